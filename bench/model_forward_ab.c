/* model_forward_ab.c - what a wide forward call costs, and what a kernel
 * setting changes, measured so that a noisy machine cannot fake it.
 *
 *   bench_model_forward_ab -m MODEL [--quantize q8_0|q4_0] [--n 8,16]
 *                          [--a SETTINGS] [--b SETTINGS] [--rounds R]
 *                          [--ctx C] [--threads T] [--slow-b PCT]
 *
 * SETTINGS: the kernel settings of each side (kernel_settings.h), e.g.
 * "tier=amx,amx-int8=0"; empty: the defaults.
 *
 * bench_model_forward takes the best of a few calls per width, one width
 * after the other; on a VM whose speed moves 2-3x from minute to minute the
 * ratio of two such minima says little. Here every round times, for each
 * side in A B B A order (B A A B every other round, so that neither side
 * holds the round's middle), a 1-token call and a call of each width n (after
 * a C-token context, logits for every new token), so each round yields
 *   c(n) = t(n) / t(1) for each side, from calls milliseconds apart, and
 *   B/A = t_B(n) / t_A(n), from interleaved calls,
 * and the report gives their medians over the rounds with bootstrap 95%
 * intervals (fixed seed), beside the median milliseconds per call. It also
 * says whether A's and B's logits are bit-identical at each width (the
 * int8 tiles and vpdpbusd should be; tiers may differ in the last bits).
 * --slow-b PCT busy-waits PCT% of each B call's time after it (the test
 * checks that the benchmark sees such a slowdown). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_settings.h"
#include "model/forward.h"

enum { MAX_N = 16 };

/* "[lo, hi]" of a median_ci result, with d decimals (one word per bound:
 * scripts read the columns) */
static const char *ci_text(const double st[3], int d) {
    static char buf[64];
    snprintf(buf, sizeof buf, "[%.*f, %.*f]", d, st[1], d, st[2]);
    return buf;
}

typedef struct {
    const rf_model *m;
    rf_kvcache c;
    rf_runstate *s;
    int ctx, *tok, *pos, *idx;
    float *logits;
} caller;

/* one call of n tokens after the ctx-token context; seconds */
static double call(caller *k, int n) {
    rf_kv_crop(&k->c, k->ctx);
    rf_batch b = {1, n, k->tok + k->ctx, k->pos + k->ctx, 0, n, k->idx, k->logits};
    double t0 = rf_now();
    if (rf_forward(k->m, &k->c, k->s, &b) != 0) rf_die("%s", rf_last_error());
    return rf_now() - t0;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s -m MODEL [--quantize q8_0|q4_0] [--n 8,16] [--a SETTINGS] [--b SETTINGS] [--rounds 3..1000] "
            "[--ctx C] [--threads T] [--slow-b PCT]; SETTINGS: " BENCH_KERNELS_HELP "\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv) {
    const char *path = NULL, *quant = NULL, *ta = "", *tb = NULL;
    int ns[MAX_N + 1] = {1}, nn = 1, rounds = 20, ctx = 64, threads = 0;
    double slow_b = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage(argv[0]);
        i++;
        if (!strcmp(a, "-m")) path = v;
        else if (!strcmp(a, "--quantize")) quant = v;
        else if (!strcmp(a, "--a")) ta = v;
        else if (!strcmp(a, "--b")) tb = v;
        else if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--ctx")) ctx = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--slow-b")) slow_b = atof(v);
        else if (!strcmp(a, "--n")) {
            char *e = (char *)v;
            for (nn = 1; *e;) {
                long w = strtol(e, &e, 10);
                if (w < 2 || w > 512 || nn > MAX_N || (*e && *e != ',')) {
                    fprintf(stderr, "model_forward_ab: --n: up to %d widths 2..512 separated by commas\n", MAX_N);
                    return 2;
                }
                ns[nn++] = (int)w;
                e += *e == ',';
            }
        } else
            usage(argv[0]);
    }
    if (nn == 1) ns[nn++] = 8, ns[nn++] = 16;
    if (!path || rounds < 3 || rounds > 1000 || ctx < 1 || ctx > 4096 || threads < 0 || slow_b < 0 ||
        (quant && strcmp(quant, "q8_0") && strcmp(quant, "q4_0")))
        usage(argv[0]);
    bench_kernels S[2];
    for (int sd = 0; sd < 2; sd++) {
        const char *text = sd ? tb : ta;
        if (text && bench_kernels_parse(&S[sd], text) != 0) {
            fprintf(stderr, "model_forward_ab: --%c: bad SETTINGS '%s' (%s; a tier this CPU has)\n", "ab"[sd], text,
                    BENCH_KERNELS_HELP);
            return 2;
        }
    }
    const int nsides = tb ? 2 : 1;
    if (threads) omp_set_num_threads(threads);

    rf_model m;
    if (rf_model_load(&m, path) != 0) rf_die("%s", rf_last_error());
    if (quant && rf_model_quantize(&m, !strcmp(quant, "q8_0") ? RF_Q8_0 : RF_Q4_0) != 0) rf_die("%s", rf_last_error());
    const rf_config *cfg = &m.cfg;
    int nmax = 1;
    for (int i = 0; i < nn; i++) nmax = ns[i] > nmax ? ns[i] : nmax;
    caller k = {.m = &m, .ctx = ctx};
    rf_kv_init(&k.c, cfg, ctx + nmax + 1);
    k.s = rf_runstate_new(cfg, ctx > nmax ? ctx : nmax, ctx + nmax + 1);
    k.tok = rf_malloc(sizeof(int) * (size_t)(ctx + nmax));
    k.pos = rf_malloc(sizeof(int) * (size_t)(ctx + nmax));
    k.idx = rf_malloc(sizeof(int) * (size_t)(ctx + nmax));
    for (int i = 0; i < ctx + nmax; i++) k.tok[i] = (i * 7919) % cfg->vocab_size, k.pos[i] = i, k.idx[i] = i;
    size_t nlog = (size_t)nmax * cfg->vocab_size;
    k.logits = rf_malloc(sizeof(float) * nlog);
    float *first[2][MAX_N + 1] = {{NULL}};
    rf_batch pre = {1, ctx, k.tok, k.pos, 0, 0, k.idx, NULL};
    if (rf_forward(&m, &k.c, k.s, &pre) != 0) rf_die("%s", rf_last_error());

    /* warm-up: each side and width once (page faults, scratch buffers), keeping the logits */
    for (int sd = 0; sd < nsides; sd++) {
        bench_kernels_apply(&S[sd]);
        for (int w = 0; w < nn; w++) {
            call(&k, ns[w]);
            first[sd][w] = rf_malloc(sizeof(float) * (size_t)ns[w] * cfg->vocab_size);
            memcpy(first[sd][w], k.logits, sizeof(float) * (size_t)ns[w] * cfg->vocab_size);
        }
    }
    /* t[side][width][round]: the mean of the side's two calls in the round */
    double *t = rf_calloc((size_t)2 * nn * rounds, sizeof(double));
#define T(sd, w, r) t[((size_t)(sd) * nn + (w)) * rounds + (r)]
    static const int abba[2][4] = {{0, 1, 1, 0}, {1, 0, 0, 1}};
    for (int r = 0; r < rounds; r++)
        for (int q = 0; q < 4; q++) {
            int sd = nsides == 2 ? abba[r % 2][q] : 0;
            bench_kernels_apply(&S[sd]);
            for (int w = 0; w < nn; w++) {
                double s = call(&k, ns[w]);
                if (sd == 1 && slow_b > 0) { /* the test's known slowdown */
                    double end = rf_now() + s * slow_b / 100;
                    while (rf_now() < end) {
                    }
                    s *= 1 + slow_b / 100;
                }
                T(sd, w, r) += s / (nsides == 2 ? 2 : 4);
            }
        }

    printf("# %s%s%s, %d-token context, logits for every token, %d rounds (%s), %d threads, cpu %s\n", path,
           quant ? " quantised to " : "", quant ? quant : "", ctx, rounds, nsides == 2 ? "A B B A, B A A B" : "4 calls each",
           omp_get_max_threads(), rf_cpu_tier_str(rf_cpu_tier_detected()));
    for (int sd = 0; sd < nsides; sd++) {
        bench_kernels_apply(&S[sd]);
        const char *text = sd ? tb : ta;
        printf("# %c: %s (tier %s)\n", "AB"[sd], text[0] ? text : "the defaults", rf_cpu_tier_name());
    }
    if (slow_b > 0) printf("# B slowed by %.1f%% of each call's time (--slow-b)\n", slow_b);
    printf("%5s %9s  %-22s", "n", "A ms", "c_A(n) median [95%]");
    if (nsides == 2) printf(" %9s  %-22s  %-22s %10s", "B ms", "c_B(n) median [95%]", "B/A median [95%]", "logits");
    printf("\n");
    double *v = rf_malloc(sizeof(double) * (size_t)rounds), st[3];
    for (int w = 0; w < nn; w++) {
        printf("%5d", ns[w]);
        for (int sd = 0; sd < nsides; sd++) {
            for (int r = 0; r < rounds; r++) v[r] = T(sd, w, r);
            printf(" %9.2f", rf_median(v, rounds) * 1e3);
            for (int r = 0; r < rounds; r++) v[r] = T(sd, w, r) / T(sd, 0, r);
            rf_median_ci(v, rounds, st);
            printf("  %5.2f %-16s", st[0], ci_text(st, 2));
        }
        if (nsides == 2) {
            for (int r = 0; r < rounds; r++) v[r] = T(1, w, r) / T(0, w, r);
            rf_median_ci(v, rounds, st);
            int same = !memcmp(first[0][w], first[1][w], sizeof(float) * (size_t)ns[w] * cfg->vocab_size);
            printf("  %5.3f %-16s %10s", st[0], ci_text(st, 3), same ? "identical" : "differ");
        }
        printf("\n");
    }
    for (int sd = 0; sd < 2; sd++)
        for (int w = 0; w < nn; w++) free(first[sd][w]);
    free(v), free(t), free(k.tok), free(k.pos), free(k.idx), free(k.logits);
    rf_runstate_free(k.s);
    rf_kv_free(&k.c);
    rf_model_free(&m);
    return 0;
}
