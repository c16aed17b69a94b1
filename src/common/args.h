/* args.h - command-line options as tables, parsed by one getopt_long based
 * parser that also prints --help.
 *
 * An option is one row: long name (+ an older spelling still accepted), a
 * short letter, the HTTP request field it corresponds to in `refusion
 * serve`, its type and bounds, where its value goes (an offset into a struct
 * the caller passes) and its help line. A command lists groups of rows: its
 * own, plus the shared decoding table rf_decode_table, whose values land in
 * an rf_decode_opts. The server parses request bodies with the same rows
 * (serve/request.c), so a setting has one name, one range and one default
 * everywhere; the defaults are rf_gen_params_default's (decode/decode.h),
 * printed by --help from the struct itself.
 *
 * Spellings follow llama.cpp where it has one: -t/--threads, --temp,
 * -s/--seed, -c/--ctx-size, -n/--n-predict, --top-k, --top-p, -f/--file,
 * --min-p, --repeat-penalty, --ignore-eos, -r/--reverse-prompt, and its
 * multi-letter short options (-cnv, -sys, -np, -cb, -ngl, -fa, -hf ...: args.c's
 * llama_shorts, for the rows a command has; one of llama.cpp's that a command
 * lacks is an error naming it, never read as a one-letter option with its
 * value glued on); --opt=value works for every long option. */
#ifndef RF_ARGS_H
#define RF_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "decode/decode.h"

#include "refusion_version.h" /* RF_VERSION_STRING, for --version */

typedef enum {
    RF_OPT_FLAG,   /* no value: sets an int to 1 (or to 0 with .lo = -1, e.g. --no-chat; or to .hi when
                      .hi is not 0, e.g. --no-progress: -1 in the int --progress sets to 1) */
    RF_OPT_INT,    /* int, in [lo, hi] */
    RF_OPT_I64,    /* int64_t / uint64_t, in [lo, hi] */
    RF_OPT_FLOAT,  /* float, in [lo, hi] (lo excluded when .open_lo) */
    RF_OPT_STR,    /* const char * (points into argv) */
    RF_OPT_CHOICE, /* one of .choices "a|b|c": stores its index as an int */
    RF_OPT_LEN,    /* int, in [lo, hi], or -1 on the command line (no limit: -n -1); HTTP: [lo, hi] */
    RF_OPT_DOUBLE, /* double, in [lo, hi] (lo excluded when .open_lo); command line only */
    RF_OPT_LIST,   /* repeatable: each value appended, with its row, to the rf_arg_list at .offset
                      (rows sharing one list keep the command line's order); command line only */
} rf_opt_type;

/* HTTP bounds that depend on the model: checked against them, not .hi */
enum { RF_HI_FIXED, RF_HI_CONTEXT, RF_HI_VOCAB };

typedef struct rf_opt rf_opt;
struct rf_opt {
    const char *name;     /* --name, --name=value */
    int letter;           /* -x, or 0 */
    const char *alias;    /* another long spelling, or NULL */
    const char *http;     /* request field in `refusion serve`, or NULL (CLI only) */
    rf_opt_type type;
    double lo, hi;
    int open_lo;          /* FLOAT: lo itself is refused */
    int hi_from;          /* RF_HI_*: HTTP upper bound from the model */
    const char *choices;  /* RF_OPT_CHOICE */
    size_t offset;        /* where the value goes in the group's struct */
    const char *metavar;  /* N, X, TEXT ... */
    const char *help;
};

/* The values of RF_OPT_LIST rows, in command-line order (rf_arg_list_free). */
typedef struct {
    int n, cap;
    const rf_opt **row; /* the row each value was given with (--user, --system ...) */
    const char **value; /* points into argv */
} rf_arg_list;
void rf_arg_list_free(rf_arg_list *l);

typedef struct {
    const char *title;    /* heading in --help, or NULL ("options", shared by untitled groups in a row) */
    const rf_opt *opts;
    int n;
    void *base;           /* the struct the offsets point into */
    unsigned char *src;   /* NULL, or one RF_SRC_* per row: RF_SRC_FLAG where the command line set it
                             (beside base, so that a group's sources travel with its values) */
    const void *defaults; /* the same struct holding the defaults, for --help (NULL: none shown; a
                             number outside the row's [lo, hi] means "not given" and is not shown) */
} rf_opt_group;

/* Where a setting's value came from (rf_decode_opts.src, the --verbose and
 * server echoes: rf_src_names). */
enum { RF_SRC_DEFAULT, RF_SRC_CONFIG, RF_SRC_FLAG, RF_SRC_REQUEST, RF_SRC_PRESET };
extern const char *const rf_src_names[5]; /* "default", "generation_config.json", "flag", "request", "preset" */

/* The shared decoding options. */
#define RF_DECODE_ROWS_MAX 48 /* rows rf_decode_table may have (checked where it is defined) */
typedef struct {
    rf_params gen;        /* the decoder's settings: --decoder is gen.method, --steps gen.mdm_steps */
    int ar_verify;        /* off, correct, first, both (index: correct + 2 * first) */
    int threads;          /* OpenMP threads (0: OpenMP's default) */
    int ctx_size;         /* prompt + answer limit (0: the model's context) */
    int preset;           /* 0 none, else 1 + index into rf_decode_presets (decode/presets.h) */
    int ignore_eos;       /* the answer does not end at EOS (eos -1) */
    const char *n_gpu_layers; /* llama.cpp's -ngl: accepted with a note (this build runs on the CPU) */
    const char *hf_repo;  /* llama.cpp's -hf: refused (no downloads) */
    int flash_attn;       /* llama.cpp's -fa auto|on|off: accepted with a note (attention is one exact pass) */
    const char *generation_config; /* --generation-config FILE|none (NULL: the model's) */
    int config_eos;       /* generation_config.json's eos_token_id (-1: none given) */
    /* the answer's grammar (generate and chat; at most one of them) */
    const char *grammar;      /* --grammar GBNF */
    const char *grammar_file; /* --grammar-file FILE */
    const char *json_schema;  /* -j / --json-schema JSON */
    unsigned char src[RF_DECODE_ROWS_MAX]; /* RF_SRC_* of each rf_decode_table row */
} rf_decode_opts;

extern const rf_opt rf_decode_table[];
extern const int rf_decode_table_n;
/* The rf_opt_group of the decoding options in generate, chat, eval and probe
 * (values in d, defaults in def; serve has its own title). */
#define RF_DECODE_GROUP(d, def)                                                                                  \
    {"decoding (the same options and defaults in generate, chat, eval, probe and serve; the model's "          \
     "generation_config.json replaces the defaults, flags override it; generate -v shows where each came from)", \
     rf_decode_table,                                                                                          \
     rf_decode_table_n, (d), (d)->src, (def)}

/* Which chat template renders the prompts (generate, chat, serve). */
typedef struct {
    const char *chat_template; /* --chat-template FILE|builtin, or NULL: the model's */
    int jinja;                 /* --jinja: llama.cpp's spelling for "the model's template" */
    int special_in_content;    /* --special-in-content: special-token text in messages parsed as such */
} rf_chat_template_opts;
extern const rf_opt rf_chat_template_table[];
extern const int rf_chat_template_table_n;
#define RF_CHAT_TEMPLATE_GROUP(c) {"chat template", rf_chat_template_table, rf_chat_template_table_n, (c), NULL, NULL}

/* rf_gen_params_default and the rest zero. */
void rf_decode_opts_default(rf_decode_opts *d);
/* Copy the derived settings into gen (ar_verify -> ar_correct/ar_check_first,
 * ignore_eos -> eos_id -1). */
void rf_decode_opts_finish(rf_decode_opts *d);
/* Task preset number preset (1 + index into rf_decode_presets) into d: its
 * values in the rows the command line did not set, which become
 * RF_SRC_PRESET. */
void rf_decode_opts_preset(rf_decode_opts *d, int preset);
/* A checkpoint's recommended settings, applied to the rows of d neither the
 * command line nor a preset set (RF_SRC_FLAG, RF_SRC_PRESET), which become RF_SRC_CONFIG:
 * d->generation_config, or else generation_config.json in the model
 * directory (none for a .gguf file, or when the file is not there; "none":
 * not read). Hugging Face's keys max_new_tokens, temperature, do_sample
 * (false: greedy), top_k, top_p, min_p, repetition_penalty, eos_token_id (an
 * id or a list: tok_eos when listed, else the first; d->config_eos); other
 * Hugging Face keys are ignored. Its "refusion" object holds this engine's
 * settings by their option or HTTP names ("decoder", "rolling",
 * "slot_size", ...; '_' or '-'), typed as in a request body; an unknown key
 * there is an error; its "rolling" is part of the choice of decoder, so it
 * is not applied when --decoder or a preset was given. Then rf_decode_opts_finish. 0, or -1 with the file and
 * the key in rf_last_error(), or with rf_decode_opts_unused's reason (a flag
 * that the decoder chosen does not use). */
int rf_decode_opts_from_config(rf_decode_opts *d, const char *model_path, int tok_eos);
/* One line per decoding setting with its value and where it came from
 * (--verbose). */
void rf_decode_opts_print(FILE *f, const rf_decode_opts *d);
/* The command line's checks of the llama.cpp habits, after parsing: -hf is
 * refused (one error line, -1), -ngl gets a note line, --threads above the
 * online CPUs a warning and the cap. Prints to stderr as "refusion: cmd: ...". */
int rf_decode_opts_cli(const char *cmd, rf_decode_opts *d);
/* --seed -1 / "seed": -1: draw a random seed (the value no seed can have:
 * seeds are in [0, INT64_MAX]). serve draws one per request that has none;
 * the other commands once, in rf_decode_opts_cli. */
#define RF_SEED_RANDOM UINT64_MAX
/* A seed from the system's random source, in [0, INT64_MAX]. */
uint64_t rf_seed_random(void);
/* A sampling setting set by a flag or a request that d's decoder does not
 * use (top-k, top-p for plan-and-infill and mdm, which draw from the full
 * distribution): its row in rf_decode_table, with the reason in
 * rf_last_error(); -1 when there is none. */
int rf_decode_opts_unused(const rf_decode_opts *d);
/* The answer length -n -1 stands for: the rest of the context (ctx_size, or
 * n_ctx when it is 0) after n_prompt tokens, in whole slots for
 * plan-and-infill; other lengths unchanged. */
int rf_decode_gen_length(const rf_decode_opts *d, int n_ctx, int n_prompt);

/* Parse argv (argv[0] is the command name) against the groups. Positional
 * arguments are moved to argv[*first_pos .. argc-1] in order (pass NULL to
 * refuse them). A group's src, when set, notes where each value came from.
 * --help prints the usage (synopsis + the groups' rows) and --version the
 * version. Returns 0 to go on, 1 when --help / --version was printed (exit
 * 0), -1 after a one-line error on stderr (exit 2). */
int rf_args_parse(const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups, int argc,
                  char **argv, int *first_pos);
/* The usage text rf_args_parse prints for --help. */
void rf_args_usage(FILE *f, const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups);

/* Set one option from text: 0, or -1 with "what: ..." in rf_last_error(). */
int rf_opt_set(const rf_opt *o, void *base, const char *value);
/* An option's current value as text (for help and tests). */
void rf_opt_format(const rf_opt *o, const void *base, char *buf, size_t cap);
/* The row whose --name, alias or letter is s ("temp", "-s"), or NULL. */
const rf_opt *rf_opt_find(const rf_opt *opts, int n, const char *s);

/* Read a whole file, or stdin for "-", as a NUL-terminated string. NULL with
 * rf_last_error() on failure. */
char *rf_read_text(const char *path);

/* The name of an ar_verify setting: off, correct, first, both. */
const char *rf_ar_verify_name(int ar_correct, int ar_check_first);

#endif
