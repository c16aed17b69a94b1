/* commands.h - the refusion subcommands; each lives in its own cmd_*.c and
 * returns the process exit status. */
#ifndef RF_COMMANDS_H
#define RF_COMMANDS_H

#include "common/args.h"

int cmd_init(int argc, char **argv);           /* write a random checkpoint */
int cmd_info(int argc, char **argv);           /* load + describe a checkpoint */
int cmd_convert(int argc, char **argv);        /* rewrite a checkpoint in another dtype */
int cmd_grow(int argc, char **argv);           /* function-preserving growth to a larger shape */
int cmd_tokenize(int argc, char **argv);       /* text <-> ids, chat template */
int cmd_tokenizer_train(int argc, char **argv);/* train a small byte-level BPE */
int cmd_generate(int argc, char **argv);       /* ReFusion / AR / mdm decoding */
int cmd_chat(int argc, char **argv);           /* interactive chat (generate -i) */
int cmd_train(int argc, char **argv);          /* ReFusion / AR / MDM training */
int cmd_tasks(int argc, char **argv);          /* generate the task suite */
int cmd_eval(int argc, char **argv);           /* evaluate a model on a task set */
int cmd_probe(int argc, char **argv);          /* teacher-forced view of the two heads */
int cmd_distill(int argc, char **argv);        /* greedy AR answers as a training file */
int cmd_logits(int argc, char **argv);         /* raw logits + greedy continuation (JSON) */
int cmd_serve(int argc, char **argv);          /* HTTP server, OpenAI-style API */
int cmd_tune(int argc, char **argv);           /* the AMX tile crossovers of this machine */

/* The model a command loads and its tokenizer (NULL: the model's), the rows
 * -m and --tokenizer of the commands that read a data set with a model
 * (eval, probe, distill), in their option list as RF_MODEL_SOURCE_GROUP. */
typedef struct {
    const char *model, *tokenizer;
} rf_model_source;
extern const rf_opt rf_model_source_table[];
extern const int rf_model_source_table_n;
#define RF_MODEL_SOURCE_GROUP(s) {NULL, rf_model_source_table, rf_model_source_table_n, (s), NULL, NULL}

/* A model's shape from the command line (init: the new model's, grow: the
 * target's): a preset (NULL: none) and the sizes that override it, -1 where
 * not given; in the option list as RF_SHAPE_GROUP with the command's own
 * heading (how the sizes combine differs between the commands). */
typedef struct {
    const char *preset;
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab, tied;
} rf_shape_opts;
extern const rf_opt rf_shape_table[];
extern const int rf_shape_table_n;
#define RF_SHAPE_GROUP(title, s, def) {title, rf_shape_table, rf_shape_table_n, (s), NULL, (def)}
/* Every size -1 and no preset. */
void rf_shape_opts_unset(rf_shape_opts *s);
/* 1 when a size was given. */
int rf_shape_opts_given(const rf_shape_opts *s);

/* SIGTERM, SIGINT and SIGHUP end the program as before, after killing the
 * helpers and removing the temporary outputs the library registered
 * (util/cleanup.h): for the commands that write or start such things. */
void cli_cleanup_on_signals(void);
/* Remove, saying so on stderr, the temporary outputs of an earlier `cmd`
 * writing OUT whose process is gone: OUT.tmp.PID and OUT.grow-tmp.PID
 * beside OUT, NAME.tmp.PID in OUT. */
void cli_sweep_temps(const char *cmd, const char *out);

#endif
