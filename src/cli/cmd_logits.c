/* cmd_logits.c - `refusion logits`: the raw next-token logits of a model
 * after a prompt of ids, and its greedy (argmax) continuation, as JSON. For
 * comparing this engine with another one (llama.cpp on the same GGUF file,
 * tests/gguf_llamacpp.sh) or two files of the same weights with each other. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "cli/commands.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/util.h"

typedef struct {
    const char *model, *ids;
    int steps, threads;
} logits_args;

#define A(f) offsetof(logits_args, f)
static const rf_opt logits_opts[] = {
    {.name = "model", .letter = 'm', .type = RF_OPT_STR, .offset = A(model), .metavar = "DIR|GGUF",
     .help = "checkpoint directory or .gguf file"},
    {.name = "ids", .type = RF_OPT_STR, .offset = A(ids), .metavar = "\"ID ID ...\"",
     .help = "the prompt's token ids (space or comma separated)"},
    {.name = "n-predict", .letter = 'n', .type = RF_OPT_INT, .lo = 1, .hi = 1 << 16, .offset = A(steps), .metavar = "N",
     .help = "greedy steps"},
    {.name = "threads", .letter = 't', .type = RF_OPT_INT, .lo = 1, .hi = 1024, .offset = A(threads), .metavar = "N",
     .help = "OpenMP threads (default: OpenMP's; at most the online CPUs)"},
};

static int parse_ids(const char *s, int vocab, int **out, int *n_out) {
    int n = 0, cap = 16;
    int *ids = rf_malloc((size_t)cap * sizeof(int));
    while (*s) {
        while (*s == ' ' || *s == ',') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= vocab) {
            fprintf(stderr, "refusion: logits: --ids: '%.20s' is not a token id in [0, %d)\n", s, vocab);
            free(ids);
            return -1;
        }
        ids = rf_grow(ids, sizeof *ids, n, &cap, cap);
        ids[n++] = (int)v;
        s = end;
    }
    if (n == 0) {
        fprintf(stderr, "refusion: logits: --ids holds no ids\n");
        free(ids);
        return -1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

/* The logits after ids[0..P-1] and after each of the N - 1 greedy tokens
 * that follow them, into logits (N rows of V) and greedy (N tokens). */
static int run_greedy(const rf_model *m, const int *ids, int P, int N, float *logits, int *greedy) {
    const int V = m->cfg.vocab_size;
    rf_kvcache kv;
    rf_kv_init(&kv, &m->cfg, P + N);
    rf_runstate *rs = rf_runstate_new(&m->cfg, P, P + N);
    int *pos = rf_malloc((size_t)P * sizeof(int));
    for (int i = 0; i < P; i++) pos[i] = i;
    int last = P - 1;
    rf_batch b = {1, P, (int *)ids, pos, 0, 1, &last, logits};
    int rc = rf_forward(m, &kv, rs, &b);
    for (int k = 0; k < N && rc == 0; k++) {
        const float *row = logits + (size_t)k * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (row[j] > row[best]) best = j;
        greedy[k] = best;
        if (k + 1 == N) break;
        int ps = P + k, zero = 0;
        rf_batch bk = {1, 1, &greedy[k], &ps, 0, 1, &zero, logits + (size_t)(k + 1) * V};
        rc = rf_forward(m, &kv, rs, &bk);
    }
    free(pos);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return rc;
}

/* floats printed with 9 significant digits: they read back exactly */
static void print_json(const float *logits, const int *greedy, int N, int V) {
    printf("{\"greedy\": [");
    for (int k = 0; k < N; k++) printf("%s%d", k ? ", " : "", greedy[k]);
    printf("], \"logits\": [");
    for (int k = 0; k < N; k++) {
        printf("%s[", k ? ", " : "");
        for (int j = 0; j < V; j++) printf("%s%.9g", j ? "," : "", (double)logits[(size_t)k * V + j]);
        printf("]");
    }
    printf("]}\n");
}

int cmd_logits(int argc, char **argv) {
    logits_args a = {.steps = 1}, def_a = a;
    const rf_opt_group groups[] = {{NULL, logits_opts, (int)(sizeof logits_opts / sizeof logits_opts[0]), &a, NULL,
                                    &def_a}};
    int prc = rf_args_parse("logits", "-m MODEL --ids \"ID ID ...\" [-n N] [--threads N]\n"
                            "Feed the ids (plain causal attention, positions 0, 1, ...), then extend them\n"
                            "greedily by N tokens. Prints one JSON object: \"greedy\" (the N argmax tokens)\n"
                            "and \"logits\" (N rows of vocab floats: row k predicts token k of the continuation).",
                            groups, 1, argc, argv, NULL);
    if (prc) return prc > 0 ? 0 : 2;
    if (!a.model || !a.ids) {
        fprintf(stderr, "refusion: logits: %s is required (see --help)\n", !a.model ? "-m MODEL" : "--ids");
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && a.threads > cpus) a.threads = (int)cpus; /* more only makes the team wait at its barriers */
    if (a.threads > 0) omp_set_num_threads(a.threads);
    rf_model m;
    if (rf_model_load(&m, a.model)) {
        rf_print_error();
        return 1;
    }
    int *ids, P;
    const int V = m.cfg.vocab_size, N = a.steps;
    if (parse_ids(a.ids, V, &ids, &P)) {
        rf_model_free(&m);
        return 2;
    }
    if (P + N > m.cfg.max_pos) {
        fprintf(stderr, "refusion: logits: %d ids + %d steps exceed the context (%d)\n", P, N, m.cfg.max_pos);
        free(ids);
        rf_model_free(&m);
        return 2;
    }
    float *logits = rf_malloc((size_t)N * V * sizeof(float));
    int *greedy = rf_malloc((size_t)N * sizeof(int));
    int rc = run_greedy(&m, ids, P, N, logits, greedy);
    if (rc == 0) print_json(logits, greedy, N, V);
    else rf_print_error();
    free(logits), free(greedy), free(ids);
    rf_model_free(&m);
    return rc ? 1 : 0;
}
