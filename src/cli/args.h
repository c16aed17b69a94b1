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
 * -s/--seed, -c/--ctx-size, -n/--n-predict, --top-k, --top-p, -f/--file;
 * --opt=value works for every long option. */
#ifndef RF_ARGS_H
#define RF_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "decode/decode.h"

#define RF_VERSION "0.3.0"

typedef enum {
    RF_OPT_FLAG,   /* no value: sets an int to 1 (or to 0 with .lo = -1, e.g. --no-chat) */
    RF_OPT_INT,    /* int, in [lo, hi] */
    RF_OPT_I64,    /* int64_t / uint64_t, in [lo, hi] */
    RF_OPT_FLOAT,  /* float, in [lo, hi] (lo excluded when .open_lo) */
    RF_OPT_STR,    /* const char * (points into argv) */
    RF_OPT_CHOICE, /* one of .choices "a|b|c": stores its index as an int */
} rf_opt_type;

/* HTTP bounds that depend on the model: checked against them, not .hi */
enum { RF_HI_FIXED, RF_HI_CONTEXT, RF_HI_VOCAB };

typedef struct {
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
} rf_opt;

typedef struct {
    const char *title;    /* heading in --help, or NULL */
    const rf_opt *opts;
    int n;
    void *base;           /* the struct the offsets point into */
    const void *defaults; /* the same struct holding the defaults, for --help (NULL: none shown) */
} rf_opt_group;

/* The shared decoding options. */
enum { RF_DECODER_REFUSION, RF_DECODER_AR, RF_DECODER_MDM }; /* = tasks/eval.h RF_DEC_* */
typedef struct {
    rf_gen_params gen;    /* the decoder's settings */
    int decoder;          /* RF_DECODER_* */
    int ar_verify;        /* off, correct, first, both (index: correct + 2 * first) */
    int steps;            /* mdm diffusion steps (0: gen_length) */
    int threads;          /* OpenMP threads (0: OpenMP's default) */
    int ctx_size;         /* prompt + answer limit (0: the model's context) */
} rf_decode_opts;

extern const rf_opt rf_decode_table[];
extern const int rf_decode_table_n;
/* The rf_opt_group of the decoding options in generate, chat, eval and probe
 * (values in d, defaults in def; serve has its own title). */
#define RF_DECODE_GROUP(d, def)                                                                                  \
    {"decoding (the same options and defaults in generate, chat, eval, probe and serve)", rf_decode_table,     \
     rf_decode_table_n, (d), (def)}
extern const char *const rf_decoder_names[3]; /* "refusion", "ar", "mdm" */

/* Which chat template renders the prompts (generate, chat, serve). */
typedef struct {
    const char *chat_template; /* --chat-template FILE|builtin, or NULL: the model's */
    int jinja;                 /* --jinja: llama.cpp's spelling for "the model's template" */
} rf_chat_template_opts;
extern const rf_opt rf_chat_template_table[];
extern const int rf_chat_template_table_n;
#define RF_CHAT_TEMPLATE_GROUP(c) {"chat template", rf_chat_template_table, rf_chat_template_table_n, (c), NULL}

/* rf_gen_params_default and the rest zero / refusion. */
void rf_decode_opts_default(rf_decode_opts *d);
/* Copy the derived settings into gen (ar_verify -> ar_correct/ar_check_first). */
void rf_decode_opts_finish(rf_decode_opts *d);

/* Parse argv (argv[0] is the command name) against the groups. Positional
 * arguments are moved to argv[*first_pos .. argc-1] in order (pass NULL to
 * refuse them). --help prints the usage (synopsis + the groups' rows) and
 * --version the version. Returns 0 to go on, 1 when --help / --version was
 * printed (exit 0), -1 after a one-line error on stderr (exit 2). */
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

/* kept for the commands that still parse by hand */
int rf_arg_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int rf_arg_float(const char *cmd, const char *opt, const char *s, float *out);
int rf_arg_ar_verify(const char *cmd, const char *opt, const char *s, int *ar_correct, int *ar_check_first);
const char *rf_ar_verify_name(int ar_correct, int ar_check_first);

#endif
