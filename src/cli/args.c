/* args.c - see args.h */
#include "cli/args.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- the shared decoding table ------------------------------------------------------ */
#define D(f) offsetof(rf_decode_opts, f)
#define G(f) offsetof(rf_decode_opts, gen.f)

const char *const rf_decoder_names[3] = {"refusion", "ar", "mdm"};

const rf_opt rf_decode_table[] = {
    {"decoder", 0, "mode", "mode", RF_OPT_CHOICE, 0, 0, 0, 0, "refusion|ar|mdm", D(decoder), "NAME",
     "refusion (plan-and-infill), ar (autoregressive), mdm (LLaDA-style baseline, for models trained "
     "with the mdm objective)"},
    {"gen-length", 'n', "n-predict", "max_tokens", RF_OPT_INT, 1, 1000000, 0, RF_HI_CONTEXT, NULL, D(gen.gen_length),
     "N", "answer length in tokens (ReFusion decodes whole slots; the server cuts the answer to N)"},
    {"slot-size", 0, NULL, "slot_size", RF_OPT_INT, 1, 1000000, 0, RF_HI_CONTEXT, NULL, G(slot_size), "N",
     "refusion: tokens per slot"},
    {"blocks", 0, NULL, "blocks", RF_OPT_INT, 1, 1000000, 0, RF_HI_CONTEXT, NULL, G(n_blocks), "N",
     "refusion and mdm: serial blocks (HTTP also \"serial_num_blocks\")"},
    {"slot-threshold", 0, NULL, "slot_threshold", RF_OPT_FLOAT, 0, 1, 0, 0, NULL, G(slot_threshold), "X",
     "refusion: plan the slots whose first token's probability > X"},
    {"token-threshold", 0, NULL, "token_threshold", RF_OPT_FLOAT, 0, 1, 0, 0, NULL, G(token_threshold), "X",
     "refusion: accept a drafted token when its AR probability > X"},
    {"ar-verify", 0, NULL, "ar_verify", RF_OPT_CHOICE, 0, 0, 0, 0, "off|correct|first|both", D(ar_verify), "MODE",
     "refusion, beyond the paper (REFUSION.md 3b): correct = a rejected token becomes the AR head's "
     "choice, first = a slot's first token is checked by the AR head, both"},
    {"lookahead", 0, NULL, "lookahead", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(lookahead), NULL,
     "refusion, beyond the paper (REFUSION.md 3c): a global verification also feeds the next plan's "
     "masks (same answer, fewer but wider calls)"},
    {"jacobi", 0, NULL, "jacobi", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(jacobi), NULL,
     "refusion, beyond the paper (REFUSION.md 3d; needs --ar-verify correct or both): infilling "
     "re-verifies its drafts without re-drafting them (one call per iteration, not two)"},
    {"rolling", 0, NULL, "rolling", RF_OPT_FLAG, 0, 0, 0, 0, NULL, G(rolling), NULL,
     "refusion, beyond the paper (decode/rolling.c): a rolling slot - every call verifies the drafts "
     "with the AR head and drafts the next slot-size tokens with masks behind them; the answer is AR "
     "decoding's (same --temp/--top-k/--top-p/--seed); uses --slot-size, --slot-threshold"},
    {"temp", 0, "temperature", "temperature", RF_OPT_FLOAT, 0, 1e6, 0, 0, NULL, G(temperature), "X",
     "sampling temperature, 0 = greedy (refusion: Gumbel-max planning)"},
    {"top-k", 0, NULL, "top_k", RF_OPT_INT, 0, 1000000000, 0, RF_HI_VOCAB, NULL, G(top_k), "N",
     "ar sampling: keep the N most likely tokens (0 = off)"},
    {"top-p", 0, NULL, "top_p", RF_OPT_FLOAT, 0, 1, 1, 0, NULL, G(top_p), "X",
     "ar sampling: keep the smallest set with probability mass >= X (1 = off)"},
    {"seed", 's', NULL, "seed", RF_OPT_I64, 0, (double)INT64_MAX, 0, 0, NULL, G(seed), "N", "sampling seed"},
    {"steps", 0, NULL, "steps", RF_OPT_INT, 0, 1000000, 0, RF_HI_CONTEXT, NULL, D(steps), "N",
     "mdm: diffusion steps over the answer (0 = the answer length)"},
    {"threads", 't', NULL, NULL, RF_OPT_INT, 0, 1024, 0, 0, NULL, D(threads), "N",
     "OpenMP threads (0 = OpenMP's default; serve: per worker)"},
    {"ctx-size", 'c', NULL, NULL, RF_OPT_INT, 0, 100000000, 0, 0, NULL, D(ctx_size), "N",
     "prompt + answer limit in tokens (0 = the model's context)"},
};
const int rf_decode_table_n = (int)(sizeof rf_decode_table / sizeof rf_decode_table[0]);

const rf_opt rf_chat_template_table[] = {
    {"chat-template", 0, NULL, NULL, RF_OPT_STR, 0, 0, 0, 0, NULL, offsetof(rf_chat_template_opts, chat_template),
     "FILE|builtin", "render prompts with this Jinja template instead of the model's (chat_template.jinja, "
     "tokenizer_config.json or GGUF), or with the built-in Qwen3 renderer"},
    {"jinja", 0, NULL, NULL, RF_OPT_FLAG, 0, 0, 0, 0, NULL, offsetof(rf_chat_template_opts, jinja), NULL,
     "use the model's Jinja chat template (the default; llama.cpp's spelling)"},
};
const int rf_chat_template_table_n = (int)(sizeof rf_chat_template_table / sizeof rf_chat_template_table[0]);

void rf_decode_opts_default(rf_decode_opts *d) {
    memset(d, 0, sizeof *d);
    rf_gen_params_default(&d->gen);
    d->decoder = RF_DECODER_REFUSION;
}

void rf_decode_opts_finish(rf_decode_opts *d) {
    d->gen.ar_correct = d->ar_verify & 1;
    d->gen.ar_check_first = d->ar_verify >> 1;
}

/* ---- one value ------------------------------------------------------------------------ */
static const char *opt_name(const rf_opt *o, char *buf, size_t cap) {
    snprintf(buf, cap, "--%s", o->name);
    return buf;
}

/* the index of s in "a|b|c", or -1 */
static int choice_index(const char *choices, const char *s) {
    size_t n = strlen(s);
    int i = 0;
    for (const char *c = choices; c; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && !strncmp(c, s, n)) return i;
        c = bar ? bar + 1 : NULL;
    }
    return -1;
}

static void choice_name(const char *choices, int k, char *buf, size_t cap) {
    const char *c = choices;
    for (int i = 0; i < k && c; i++) c = strchr(c, '|'), c = c ? c + 1 : NULL;
    if (!c) {
        snprintf(buf, cap, "?");
        return;
    }
    const char *bar = strchr(c, '|');
    int len = bar ? (int)(bar - c) : (int)strlen(c);
    snprintf(buf, cap, "%.*s", len, c);
}

/* a number as people write it: 0.6, not 0.60000002 */
static void fmt_real(double x, char *buf, size_t cap) { snprintf(buf, cap, "%g", x); }

/* as: the spelling the user typed, for the message */
static int opt_set_as(const rf_opt *o, void *base, const char *s, const char *as) {
    char *p = (char *)base + o->offset, *end, nm[64];
    if (as) snprintf(nm, sizeof nm, "%s", as);
    else opt_name(o, nm, sizeof nm);
    switch (o->type) {
    case RF_OPT_FLAG: *(int *)p = o->lo < 0 ? 0 : 1; return 0;
    case RF_OPT_STR: *(const char **)p = s; return 0;
    case RF_OPT_CHOICE: {
        int k = choice_index(o->choices, s);
        if (k < 0) {
            char alts[128];
            snprintf(alts, sizeof alts, "%s", o->choices);
            for (char *c = alts; *c; c++)
                if (*c == '|') *c = ',';
            rf_set_error("%s expects one of %s, got '%.40s'", nm, alts, s);
            return -1;
        }
        *(int *)p = k;
        return 0;
    }
    case RF_OPT_INT:
    case RF_OPT_I64: {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        int over = errno == ERANGE || (o->hi < 9e18 && v > (long long)o->hi);
        if (!*s || *end || over || v < (long long)o->lo) {
            if (o->hi >= 9e18) rf_set_error("%s expects an integer >= %.0f, got '%.40s'", nm, o->lo, s);
            else rf_set_error("%s expects an integer in [%.0f, %.0f], got '%.40s'", nm, o->lo, o->hi, s);
            return -1;
        }
        if (o->type == RF_OPT_INT) *(int *)p = (int)v;
        else *(int64_t *)p = (int64_t)v;
        return 0;
    }
    case RF_OPT_FLOAT: {
        double v = strtod(s, &end);
        if (!*s || *end || !isfinite(v) || v < o->lo || v > o->hi || (o->open_lo && v == o->lo)) {
            char lo[32], hi[32];
            fmt_real(o->lo, lo, sizeof lo), fmt_real(o->hi, hi, sizeof hi);
            rf_set_error("%s expects a number in %s%s, %s], got '%.40s'", nm, o->open_lo ? "(" : "[", lo, hi, s);
            return -1;
        }
        *(float *)p = (float)v;
        return 0;
    }
    }
    return -1;
}

int rf_opt_set(const rf_opt *o, void *base, const char *s) { return opt_set_as(o, base, s, NULL); }

void rf_opt_format(const rf_opt *o, const void *base, char *buf, size_t cap) {
    const char *p = (const char *)base + o->offset;
    switch (o->type) {
    case RF_OPT_FLAG: snprintf(buf, cap, "%s", *(const int *)p ? "on" : "off"); break;
    case RF_OPT_STR: snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : ""); break;
    case RF_OPT_CHOICE: choice_name(o->choices, *(const int *)p, buf, cap); break;
    case RF_OPT_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case RF_OPT_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
    case RF_OPT_FLOAT: fmt_real(*(const float *)p, buf, cap); break;
    }
}

const rf_opt *rf_opt_find(const rf_opt *opts, int n, const char *s) {
    while (*s == '-') s++;
    for (int i = 0; i < n; i++) {
        const rf_opt *o = &opts[i];
        if (!strcmp(s, o->name) || (o->alias && !strcmp(s, o->alias)) || (o->letter && s[0] == o->letter && !s[1]))
            return o;
    }
    return NULL;
}

/* ---- --help ---------------------------------------------------------------------------------- */
/* text wrapped at 100 columns, continuation lines indented by ind */
static void put_wrapped(FILE *f, const char *text, int col, int ind) {
    const char *w = text;
    while (*w) {
        while (*w == ' ') w++;
        const char *e = w;
        while (*e && *e != ' ') e++;
        int len = (int)(e - w);
        if (!len) break;
        if (col > ind && col + 1 + len > 100) {
            fprintf(f, "\n%*s", ind, "");
            col = ind;
        } else if (col > ind) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", len, w);
        col += len;
        w = e;
    }
    fputc('\n', f);
}

void rf_args_usage(FILE *f, const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups) {
    fprintf(f, "usage: refusion %s %s\n", cmd, synopsis);
    for (int g = 0; g < n_groups; g++) {
        const rf_opt_group *gr = &groups[g];
        fprintf(f, "\n%s:\n", gr->title ? gr->title : "options");
        for (int i = 0; i < gr->n; i++) {
            const rf_opt *o = &gr->opts[i];
            char head[96], help[640], def[64] = "";
            char letter[8] = "    ";
            if (o->letter) snprintf(letter, sizeof letter, "-%c, ", o->letter);
            int k = snprintf(head, sizeof head, "  %s--%s", letter, o->name);
            if (o->type != RF_OPT_FLAG) snprintf(head + k, sizeof head - k, " %s", o->metavar ? o->metavar : "VALUE");
            if (gr->defaults && o->type != RF_OPT_FLAG) {
                char v[48];
                rf_opt_format(o, gr->defaults, v, sizeof v);
                if (o->type != RF_OPT_STR || *v) snprintf(def, sizeof def, "default %s", v);
            }
            char extra[160] = "";
            int n = 0;
            if (*def) n += snprintf(extra + n, sizeof extra - n, "%s", def);
            if (o->alias) n += snprintf(extra + n, sizeof extra - n, "%s--%s", n ? "; " : "", o->alias);
            if (o->http) snprintf(extra + n, sizeof extra - n, "%sHTTP \"%s\"", n ? "; " : "", o->http);
            snprintf(help, sizeof help, "%s%s%s%s", o->help, *extra ? " (" : "", extra, *extra ? ")" : "");
            fputs(head, f);
            int col = (int)strlen(head);
            if (col < 30) fprintf(f, "%*s", 30 - col, ""), col = 30;
            else fputc(' ', f), col++;
            put_wrapped(f, help, col, 30);
        }
    }
    fprintf(f, "\n  -h, --help                  this text\n      --version               print the version\n"
               "Long options also take --name=value.\n");
}

/* ---- the parser ------------------------------------------------------------------------------ */
enum { VAL_HELP = 'h', VAL_VERSION = 1000, VAL_ROW = 1001 };

int rf_args_parse(const char *cmd, const char *synopsis, const rf_opt_group *groups, int n_groups, int argc,
                  char **argv, int *first_pos) {
    int n_rows = 0;
    for (int g = 0; g < n_groups; g++) n_rows += groups[g].n;
    /* each row: its name and its alias; + help, version, terminator */
    struct option *lo = rf_calloc((size_t)(2 * n_rows + 3), sizeof *lo);
    const rf_opt **row = rf_calloc((size_t)n_rows + 1, sizeof *row);
    void **row_base = rf_calloc((size_t)n_rows + 1, sizeof *row_base);
    char *shorts = rf_calloc((size_t)(3 * n_rows + 4), 1);
    int nl = 0, r = 0, ns = 0;
    shorts[ns++] = ':'; /* ':' for a missing value, '?' for an unknown option */
    shorts[ns++] = 'h';
    for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < groups[g].n; i++, r++) {
            const rf_opt *o = &groups[g].opts[i];
            row[r] = o, row_base[r] = groups[g].base;
            int has = o->type == RF_OPT_FLAG ? no_argument : required_argument;
            lo[nl++] = (struct option){o->name, has, NULL, VAL_ROW + r};
            if (o->alias) lo[nl++] = (struct option){o->alias, has, NULL, VAL_ROW + r};
            if (o->letter) {
                shorts[ns++] = (char)o->letter;
                if (has) shorts[ns++] = ':';
            }
        }
    lo[nl++] = (struct option){"help", no_argument, NULL, VAL_HELP};
    lo[nl++] = (struct option){"version", no_argument, NULL, VAL_VERSION};
    int rc = 0;
    opterr = 0;
    optind = 0; /* full re-initialisation (GNU): the parser may run more than once */
    for (;;) {
        int li = -1;
        int c = getopt_long(argc, argv, shorts, lo, &li);
        if (c == -1) break;
        int k = -1;
        if (c >= VAL_ROW) k = c - VAL_ROW;
        else if (c != VAL_HELP && c != VAL_VERSION && c != ':' && c != '?')
            for (int j = 0; j < n_rows; j++)
                if (row[j]->letter == c) k = j;
        if (c == VAL_HELP) {
            rf_args_usage(stdout, cmd, synopsis, groups, n_groups);
            rc = 1;
            break;
        }
        if (c == VAL_VERSION) {
            printf("refusion %s\n", RF_VERSION);
            rc = 1;
            break;
        }
        if (c == ':' || c == '?') {
            const char *arg = argv[optind - 1];
            char sh[3] = {'-', (char)optopt, 0};
            const char *what = optopt ? sh : arg;
            if (c == ':') fprintf(stderr, "refusion: %s: %s needs a value\n", cmd, what);
            else if (optopt && strncmp(arg, "--", 2)) fprintf(stderr, "refusion: %s: unknown option '%s' (see --help)\n", cmd, what);
            else fprintf(stderr, "refusion: %s: unknown option '%s' (see --help)\n", cmd, arg);
            rc = -1;
            break;
        }
        if (k < 0) { /* cannot happen: every value comes from the tables */
            fprintf(stderr, "refusion: %s: unexpected option\n", cmd);
            rc = -1;
            break;
        }
        char as[80];
        if (li >= 0) snprintf(as, sizeof as, "--%s", lo[li].name);
        else snprintf(as, sizeof as, "-%c", c);
        if (opt_set_as(row[k], row_base[k], optarg ? optarg : "", as)) {
            fprintf(stderr, "refusion: %s: %s\n", cmd, rf_last_error());
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        if (first_pos) *first_pos = optind;
        else if (optind < argc) {
            fprintf(stderr, "refusion: %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
            rc = -1;
        }
    }
    free(lo), free(row), free(row_base), free(shorts);
    return rc;
}

char *rf_read_text(const char *path) {
    int std = !strcmp(path, "-");
    FILE *f = std ? stdin : fopen(path, "rb");
    if (!f) {
        rf_set_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0, k;
    char *buf = rf_malloc(cap);
    while ((k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            cap *= 2;
            char *g = rf_malloc(cap);
            memcpy(g, buf, n);
            free(buf);
            buf = g;
        }
    }
    int err = ferror(f);
    if (!std) fclose(f);
    if (err) {
        free(buf);
        rf_set_error("%s: read error", std ? "stdin" : path);
        return NULL;
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        rf_set_error("%s: the text contains a NUL byte", std ? "stdin" : path);
        return NULL;
    }
    return buf;
}

/* ---- the older helpers, for commands that parse by hand ------------------------------------ */
int rf_arg_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "refusion: %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int rf_arg_float(const char *cmd, const char *opt, const char *s, float *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end) {
        fprintf(stderr, "refusion: %s: %s expects a number, got '%s'\n", cmd, opt, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static const char *const ar_verify_names[4] = {"off", "correct", "first", "both"}; /* index a + 2b */

int rf_arg_ar_verify(const char *cmd, const char *opt, const char *s, int *ar_correct, int *ar_check_first) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, ar_verify_names[i])) {
            *ar_correct = i & 1;
            *ar_check_first = i >> 1;
            return 0;
        }
    fprintf(stderr, "refusion: %s: %s expects off, correct, first or both, got '%s'\n", cmd, opt, s);
    return -1;
}

const char *rf_ar_verify_name(int ar_correct, int ar_check_first) {
    return ar_verify_names[(ar_correct ? 1 : 0) + (ar_check_first ? 2 : 0)];
}
