/* common_args.c - the shared option table and its parser (src/common/args.c):
 * the table is consistent (unique names, aliases, letters and HTTP fields;
 * defaults = the decoder's), every spelling parses to the same field
 * (--name, alias, -x, --name=value, last one wins), bad values and unknown
 * options are refused with one line naming the option, positional
 * arguments are kept, and --help lists every row with its default and HTTP
 * field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/args.h"

typedef struct {
    const char *model;
    int json;
} own;
static const rf_opt own_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = offsetof(own, model), .metavar = "DIR", .help = "m"},
    {.name = "json", .type = RF_OPT_FLAG, .offset = offsetof(own, json), .help = "j"},
};

/* "test LINE" split at spaces into argv[64] (its strings in buf); argc */
static int split(const char *line, char *buf, size_t cap, char **argv) {
    snprintf(buf, cap, "test %s", line);
    int argc = 0;
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    return argc;
}

/* parse a space-separated command line; 0 / 1 / -1 as rf_args_parse */
static int parse(const char *line, own *o, rf_decode_opts *d, int *pos, char ***argv_out, int *argc_out) {
    static char buf[512];
    static char *argv[64];
    int argc = split(line, buf, sizeof buf, argv);
    memset(o, 0, sizeof *o);
    rf_decode_opts_default(d);
    rf_opt_group g[] = {{NULL, own_opts, 2, o, NULL, NULL}, RF_DECODE_GROUP(d, NULL)};
    int rc = rf_args_parse("test", "[options]", g, 2, argc, argv, pos);
    if (argv_out) *argv_out = argv, *argc_out = argc;
    return rc;
}

static void test_table(void) {
    const rf_opt *t = rf_decode_table;
    int n = rf_decode_table_n;
    for (int i = 0; i < n; i++) {
        CHECK(t[i].name && t[i].help && (t[i].metavar || t[i].type == RF_OPT_FLAG), "row %d incomplete", i);
        for (int j = i + 1; j < n; j++) {
            CHECK(strcmp(t[i].name, t[j].name), "--%s twice", t[i].name);
            CHECK(!t[i].letter || t[i].letter != t[j].letter, "-%c twice", t[i].letter);
            CHECK(!t[i].http || !t[j].http || strcmp(t[i].http, t[j].http), "HTTP %s twice", t[i].http);
            CHECK(!t[i].alias || strcmp(t[i].alias, t[j].name), "alias %s is a name", t[i].alias);
        }
    }
    /* the llama.cpp spellings */
    static const char *const want[] = {"-t", "threads", "temp", "-s", "seed", "-c", "ctx-size", "-n", "n-predict",
                                       "top-k", "top-p", "mode", "temperature"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(rf_opt_find(t, n, want[i]) != NULL, "no option %s", want[i]);
    CHECK(!strcmp(rf_opt_find(t, n, "-t")->name, "threads"), "-t is not --threads");
    CHECK(!strcmp(rf_opt_find(t, n, "-n")->http, "max_tokens"), "-n is not max_tokens");
    /* one set of defaults: the decoder's */
    rf_decode_opts d;
    rf_params g;
    rf_decode_opts_default(&d);
    rf_gen_params_default(&g);
    CHECK(!memcmp(&d.gen, &g, sizeof g), "rf_decode_opts_default's gen != rf_gen_params_default");
    CHECK(d.gen.method == RF_METHOD_REFUSION && d.ar_verify == 0 && d.gen.mdm_steps == 0 && d.threads == 0, "other defaults");
}

static void test_parse(void) {
    own o;
    rf_decode_opts d;
    int pos = 0;
    char **argv;
    int argc;
    CHECK(parse("-m M --temp=0.5 -s 7 -n 12 --mode ar -t 3 --top-p=0.9 --json --top-k 40 --ar-verify both", &o, &d,
                NULL, NULL, NULL) == 0, "parse");
    CHECK(!strcmp(o.model, "M") && o.json == 1, "own options");
    CHECK(d.gen.temperature == 0.5f && d.gen.seed == 7 && d.gen.gen_length == 12 && d.gen.method == RF_METHOD_AR &&
              d.threads == 3 && d.gen.top_p == 0.9f && d.gen.top_k == 40 && d.ar_verify == 3,
          "values: temp %g seed %llu n %d decoder %d threads %d", (double)d.gen.temperature,
          (unsigned long long)d.gen.seed, d.gen.gen_length, d.gen.method, d.threads);
    /* the decoding group, second here, notes its own rows' sources: -n and
     * --temp set by a flag, --blocks left at its default (what keeps
     * generation_config.json from overriding a flag) */
    const rf_opt *rows = rf_decode_table;
    for (int i = 0; i < rf_decode_table_n; i++) {
        int flag = !strcmp(rows[i].name, "gen-length") || !strcmp(rows[i].name, "temp");
        if (flag || !strcmp(rows[i].name, "blocks"))
            CHECK(d.src[i] == (flag ? RF_SRC_FLAG : RF_SRC_DEFAULT), "source of --%s: %d", rows[i].name, d.src[i]);
    }
    rf_decode_opts_finish(&d);
    CHECK(d.gen.ar_correct == 1 && d.gen.ar_check_first == 1, "ar-verify both -> both switches");
    /* aliases and the last one wins */
    CHECK(parse("--n-predict 9 --gen-length=10 --temperature 0.25 --decoder mdm --steps 5", &o, &d, NULL, NULL, NULL) == 0 &&
              d.gen.gen_length == 10 && d.gen.temperature == 0.25f && d.gen.method == RF_METHOD_MDM && d.gen.n_blocks == 32 &&
              d.gen.mdm_steps == 5,
          "aliases");
    /* positional arguments stay, in order */
    CHECK(parse("a --json b -s 3 c", &o, &d, &pos, &argv, &argc) == 0 && argc - pos == 3 && !strcmp(argv[pos], "a") &&
              !strcmp(argv[pos + 2], "c") && d.gen.seed == 3,
          "positional: %d left", argc - pos);
    CHECK(parse("stray", &o, &d, NULL, NULL, NULL) == -1, "a positional argument refused when none is expected");
    /* bad values and unknown options */
    static const char *const bad[] = {"--temp -1",     "--top-p 0",       "--top-p 1.5",   "--slot-size 0",
                                      "-n x",          "--seed -3",       "--mode bert",   "--frob",
                                      "-Z",            "--slot-threshold 2", "-n",         "--threads 5000",
                                      "--seed 99999999999999999999", "--temp 1e400", "--json=1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(parse(bad[i], &o, &d, NULL, NULL, NULL) == -1, "accepted '%s'", bad[i]);
    CHECK(parse("--help", &o, &d, NULL, NULL, NULL) == 1, "--help returns 1");
    CHECK(parse("--version", &o, &d, NULL, NULL, NULL) == 1, "--version returns 1");
    /* text round trip */
    char b[64];
    parse("--slot-threshold 0.6 --ar-verify first", &o, &d, NULL, NULL, NULL);
    rf_opt_format(rf_opt_find(rf_decode_table, rf_decode_table_n, "slot-threshold"), &d, b, sizeof b);
    CHECK(!strcmp(b, "0.6"), "0.6 prints as '%s'", b);
    rf_opt_format(rf_opt_find(rf_decode_table, rf_decode_table_n, "ar-verify"), &d, b, sizeof b);
    CHECK(!strcmp(b, "first"), "ar-verify prints as '%s'", b);
}

static void test_help(void) {
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    rf_decode_opts d;
    rf_decode_opts_default(&d);
    rf_opt_group g[] = {{"decoding", rf_decode_table, rf_decode_table_n, &d, NULL, &d}};
    rf_args_usage(f, "test", "[options]", g, 1);
    fclose(f);
    /* the help is wrapped: compare with runs of white space as one space */
    char *w = txt;
    for (char *r = txt; *r; r++)
        if (!(*r == ' ' || *r == '\n') || (w > txt && w[-1] != ' ')) *w++ = *r == '\n' ? ' ' : *r;
    *w = 0;
    for (int i = 0; i < rf_decode_table_n; i++) {
        char want[80];
        snprintf(want, sizeof want, "--%s", rf_decode_table[i].name);
        CHECK(strstr(txt, want) != NULL, "--help lacks %s", want);
        if (rf_decode_table[i].http) {
            snprintf(want, sizeof want, "HTTP \"%s\"", rf_decode_table[i].http);
            CHECK(strstr(txt, want) != NULL, "--help lacks %s", want);
        }
    }
    CHECK(strstr(txt, "default 512") && strstr(txt, "default 0.6;"), "defaults in --help");
    free(txt);
}

/* the row kinds of the commands outside decoding: a double, a flag pair on
 * one int (--progress 1 / --no-progress -1, last one wins), rows sharing a
 * repeatable list (kept in command-line order, each value with its row),
 * and "not given" defaults (outside the row's range) left out of --help */
typedef struct {
    double x;
    int progress, size;
    rf_arg_list turns;
} more;
static const rf_opt more_opts[] = {
    {.name = "std", .type = RF_OPT_DOUBLE, .lo = 0, .open_lo = 1, .hi = 1e12, .offset = offsetof(more, x),
     .metavar = "X", .help = "x"},
    {.name = "progress", .type = RF_OPT_FLAG, .offset = offsetof(more, progress), .help = "p"},
    {.name = "no-progress", .type = RF_OPT_FLAG, .hi = -1, .offset = offsetof(more, progress), .help = "np"},
    {.name = "hidden", .type = RF_OPT_INT, .lo = 1, .hi = 100, .offset = offsetof(more, size), .metavar = "N",
     .help = "h"},
    {.name = "user", .type = RF_OPT_LIST, .offset = offsetof(more, turns), .metavar = "S", .help = "u"},
    {.name = "system", .type = RF_OPT_LIST, .offset = offsetof(more, turns), .metavar = "S", .help = "s"},
};

static int parse_more(const char *line, more *m) {
    static char buf[512];
    static char *argv[64];
    int argc = split(line, buf, sizeof buf, argv);
    rf_arg_list_free(&m->turns);
    *m = (more){.x = 0.02, .size = -1};
    rf_opt_group g[] = {{NULL, more_opts, 6, m, NULL, NULL}};
    return rf_args_parse("test", "[options]", g, 1, argc, argv, NULL);
}

static void test_more_kinds(void) {
    more m = {0};
    CHECK(parse_more("--std 0.123456789012 --no-progress", &m) == 0, "parse");
    CHECK(m.x == 0.123456789012, "--std as a double: %.17g", m.x);
    CHECK(m.progress == -1, "--no-progress: %d", m.progress);
    CHECK(parse_more("--no-progress --progress", &m) == 0 && m.progress == 1, "--progress last: %d", m.progress);
    CHECK(parse_more("--std 0", &m) == -1, "--std 0 (open lower bound) accepted");
    CHECK(parse_more("--user a --system b --user c", &m) == 0 && m.turns.n == 3, "list: %d values", m.turns.n);
    CHECK(m.turns.n == 3 && !strcmp(m.turns.value[1], "b") && !strcmp(m.turns.row[1]->name, "system") &&
              !strcmp(m.turns.row[2]->name, "user") && !strcmp(m.turns.value[2], "c"),
          "list order and rows");
    CHECK(parse_more("--user", &m) == -1, "--user without a value accepted");
    rf_arg_list_free(&m.turns);

    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    more def = {.x = 0.02, .size = -1};
    rf_opt_group g[] = {{NULL, more_opts, 6, &def, NULL, &def}};
    rf_args_usage(f, "test", "[options]", g, 1);
    fclose(f);
    CHECK(strstr(txt, "default 0.02") != NULL, "--std's default not shown:\n%s", txt);
    CHECK(strstr(txt, "default -1") == NULL, "the unset --hidden shown as a default:\n%s", txt);
    CHECK(strstr(txt, "repeatable") != NULL, "a list row not marked repeatable:\n%s", txt);
    free(txt);
}

int main(void) {
    test_table();
    test_parse();
    test_help();
    test_more_kinds();
    return check_summary("common_args");
}
