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
 * checks that the benchmark sees such a slowdown). The calls are timed by
 * rf_call_timing_run (model/call_timing.h). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_settings.h"
#include "model/call_timing.h"

enum { MAX_N = 16 };

/* "[lo, hi]" of a median_ci result, with d decimals (one word per bound:
 * scripts read the columns) */
static const char *ci_text(const double st[3], int d) {
    static char buf[64];
    snprintf(buf, sizeof buf, "[%.*f, %.*f]", d, st[1], d, st[2]);
    return buf;
}

/* what the timing callbacks need: each side's settings, the first logits
 * each side gave at each width, and the test's slowdown of B */
typedef struct {
    bench_kernels *S;
    float *(*first)[MAX_N + 1];
    const int *ns;
    int vocab;
    double slow_b;
} sides;

static void apply(int side, void *arg) { bench_kernels_apply(&((sides *)arg)->S[side]); }

/* keeps the side's first logits at width w (untimed round); busy-waits
 * after each timed B call for --slow-b, recording it as part of the call */
static double after_call(int round, int side, int w, const float *logits, double s, void *arg) {
    sides *x = arg;
    if (round < 0 && !x->first[side][w]) {
        size_t bytes = sizeof(float) * (size_t)x->ns[w] * x->vocab;
        x->first[side][w] = rf_malloc(bytes);
        memcpy(x->first[side][w], logits, bytes);
    }
    if (round >= 0 && side == 1 && x->slow_b > 0) { /* the test's known slowdown */
        double end = rf_now() + s * x->slow_b / 100;
        while (rf_now() < end) {
        }
        s *= 1 + x->slow_b / 100;
    }
    return s;
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
    float *first[2][MAX_N + 1] = {{NULL}};
    sides x = {S, first, ns, cfg->vocab_size, slow_b};
    rf_call_timing p = {ctx, ns, nn, nsides, rounds, apply, after_call, &x};
    /* seconds of round r, side sd, width w: the mean of the side's calls in the round */
    double *t = rf_malloc(sizeof(double) * (size_t)rounds * nsides * nn);
#define T(sd, w, r) t[((size_t)(r) * nsides + (sd)) * nn + (w)]
    if (rf_call_timing_run(&m, &p, t) != 0) rf_die("%s", rf_last_error());

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
    free(v), free(t);
    rf_model_free(&m);
    return 0;
}
