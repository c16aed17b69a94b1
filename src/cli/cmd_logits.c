/* cmd_logits.c - `refusion logits`: the raw next-token logits of a model
 * after a prompt of ids, and its greedy (argmax) continuation, as JSON. For
 * comparing this engine with another one (llama.cpp on the same GGUF file,
 * tests/gguf_llamacpp.sh) or two files of the same weights with each other. */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "cli/commands.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: refusion logits -m MODEL --ids \"ID ID ...\" [-n N] [--threads N]\n"
            "Feed the ids (plain causal attention, positions 0, 1, ...), then extend them\n"
            "greedily by N tokens (default 1). Prints one JSON object: \"greedy\" (the N\n"
            "argmax tokens) and \"logits\" (N rows of vocab floats: row k predicts token k\n"
            "of the continuation).\n\n"
            "  -m, --model DIR|GGUF   checkpoint directory or .gguf file\n"
            "  --ids \"...\"            the prompt's token ids (space or comma separated)\n"
            "  -n N                   greedy steps (default 1)\n"
            "  -t, --threads N        OpenMP threads (default: OpenMP's; at most the online CPUs)\n");
}

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
        if (n == cap) ids = realloc(ids, (size_t)(cap *= 2) * sizeof(int));
        if (!ids) rf_die("out of memory");
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

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_arg = NULL;
    long steps = 1, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "refusion: logits: bad option '%s' (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--ids")) ids_arg = v;
        else if (!strcmp(a, "-n")) {
            if (rf_arg_long("logits", a, v, 1, 1 << 16, &steps)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (rf_arg_long("logits", a, v, 1, 1024, &threads)) return 2;
        } else {
            fprintf(stderr, "refusion: logits: bad option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!model || !ids_arg) {
        usage(stderr);
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && threads > cpus) threads = cpus; /* more only makes the team wait at its barriers */
    if (threads > 0) omp_set_num_threads((int)threads);
    rf_model m;
    if (rf_model_load(&m, model)) {
        rf_print_error();
        return 1;
    }
    int *ids, P;
    const int V = m.cfg.vocab_size, N = (int)steps;
    if (parse_ids(ids_arg, V, &ids, &P)) {
        rf_model_free(&m);
        return 2;
    }
    if (P + N > m.cfg.max_pos) {
        fprintf(stderr, "refusion: logits: %d ids + %d steps exceed the context (%d)\n", P, N, m.cfg.max_pos);
        free(ids);
        rf_model_free(&m);
        return 2;
    }
    rf_kvcache kv;
    rf_kv_init(&kv, &m.cfg, P + N);
    rf_runstate *rs = rf_runstate_new(&m.cfg, P, P + N);
    float *logits = rf_malloc((size_t)N * V * sizeof(float));
    int *pos = rf_malloc((size_t)P * sizeof(int)), *greedy = rf_malloc((size_t)N * sizeof(int));
    for (int i = 0; i < P; i++) pos[i] = i;
    int last = P - 1, rc = 0;
    rf_batch b = {1, P, ids, pos, 0, 1, &last, logits};
    rc = rf_forward(&m, &kv, rs, &b);
    for (int k = 0; k < N && rc == 0; k++) {
        const float *row = logits + (size_t)k * V;
        int best = 0;
        for (int j = 1; j < V; j++)
            if (row[j] > row[best]) best = j;
        greedy[k] = best;
        if (k + 1 == N) break;
        int ps = P + k, zero = 0;
        rf_batch bk = {1, 1, &greedy[k], &ps, 0, 1, &zero, logits + (size_t)(k + 1) * V};
        rc = rf_forward(&m, &kv, rs, &bk);
    }
    if (rc == 0) {
        /* floats printed with 9 significant digits: they read back exactly */
        printf("{\"greedy\": [");
        for (int k = 0; k < N; k++) printf("%s%d", k ? ", " : "", greedy[k]);
        printf("], \"logits\": [");
        for (int k = 0; k < N; k++) {
            printf("%s[", k ? ", " : "");
            for (int j = 0; j < V; j++) printf("%s%.9g", j ? "," : "", (double)logits[(size_t)k * V + j]);
            printf("]");
        }
        printf("]}\n");
    } else {
        rf_print_error();
    }
    free(logits), free(pos), free(greedy), free(ids);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    rf_model_free(&m);
    return rc ? 1 : 0;
}
