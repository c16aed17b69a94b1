/* model_forward.c - forward-pass benchmark on real checkpoint layouts.
 *
 *   bench_model_forward [--quick] [--dir /tmp/rfbench] [--8b DIR]
 *
 * Writes (once, reused afterwards) random Qwen3-0.6B-shaped checkpoints in
 * bf16 and f32 under --dir, loads them through the normal mmap loader and
 * times one forward call of n = 1, 4, 16, 64 new tokens after a 64-token
 * context, logits for every new token (what ReFusion's plan/verify calls
 * need). For each it prints ms/call, tokens/s, the achieved weight-streaming
 * bandwidth against this machine's measured read bandwidth, the achieved
 * GFLOP/s against the measured FMA peak, and the peak RSS. With --8b DIR
 * (an 8B-shaped checkpoint, e.g. from `refusion init --preset 8b`) it also
 * prints load time, RSS and ms per 1- and 32-token forward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <omp.h>

#include "kernels/roofline.h"
#include "model/forward.h"
#include "util/util.h"

static double g_gbs, g_gflops;

/* bytes of weights one forward streams: every layer matrix + the lm head */
static double weight_bytes(const rf_model *m) {
    const rf_config *c = &m->cfg;
    double per_layer = (double)c->hidden_size * c->head_dim * (2.0 * c->n_heads + 2.0 * c->n_kv_heads) +
                       3.0 * c->hidden_size * c->intermediate_size;
    double elems = per_layer * c->n_layers + (double)c->vocab_size * c->hidden_size;
    return elems * rf_dtype_size(m->layers[0].q.dtype);
}

/* flops of one call: 2 per weight per token, plus attention scores + mix */
static double call_flops(const rf_model *m, int n, int ctx) {
    const rf_config *c = &m->cfg;
    double w = weight_bytes(m) / rf_dtype_size(m->layers[0].q.dtype);
    double att = 4.0 * c->n_layers * c->n_heads * c->head_dim * (double)n * (ctx + n / 2.0);
    return 2.0 * w * n + att;
}

static double time_forward(const rf_model *m, int n, int ctx, int reps) {
    const rf_config *cfg = &m->cfg;
    rf_kvcache c;
    rf_kv_init(&c, cfg, ctx + n + 1);
    rf_runstate *s = rf_runstate_new(cfg, ctx > n ? ctx : n, ctx + n + 1);
    int *tok = rf_malloc(sizeof(int) * (ctx + n)), *pos = rf_malloc(sizeof(int) * (ctx + n)),
        *idx = rf_malloc(sizeof(int) * (ctx + n));
    for (int i = 0; i < ctx + n; i++) tok[i] = (i * 7919) % cfg->vocab_size, pos[i] = i, idx[i] = i;
    float *logits = rf_malloc(sizeof(float) * (size_t)n * cfg->vocab_size);
    rf_batch pre = {1, ctx, tok, pos, 0, 0, idx, NULL};
    if (rf_forward(m, &c, s, &pre) != 0) rf_die("%s", rf_last_error());
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        rf_kv_crop(&c, ctx);
        rf_batch b = {1, n, tok + ctx, pos + ctx, 0, n, idx, logits};
        double t0 = rf_now();
        if (rf_forward(m, &c, s, &b) != 0) rf_die("%s", rf_last_error());
        double t = rf_now() - t0;
        if (t < best) best = t;
    }
    free(tok), free(pos), free(idx), free(logits);
    rf_runstate_free(s);
    rf_kv_free(&c);
    return best;
}

static void ensure_checkpoint(const char *dir, const char *preset, rf_dtype dt) {
    char cfgpath[4096];
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    struct stat st;
    if (stat(cfgpath, &st) == 0) return;
    rf_config cfg;
    rf_config_preset(&cfg, preset);
    fprintf(stderr, "writing %s checkpoint (%s) to %s ...\n", preset, rf_dtype_name(dt), dir);
    if (rf_model_write_random(&cfg, dir, dt, 0, 0.02f, 1) != 0) rf_die("%s", rf_last_error());
}

static void bench_dir(const char *dir, const int *ns, int nn, int reps) {
    rf_model m;
    double t0 = rf_now();
    if (rf_model_load(&m, dir) != 0) rf_die("%s", rf_last_error());
    double tload = rf_now() - t0;
    double wb = weight_bytes(&m);
    printf("\n%s: %s, %.2f GB of weights streamed per call, load %.2f s\n", dir,
           rf_dtype_name(m.layers[0].q.dtype), wb / 1e9, tload);
    printf("%6s %10s %10s %9s %7s %10s %7s\n", "n", "ms/call", "tok/s", "GB/s", "%bw", "GFLOP/s", "%peak");
    for (int i = 0; i < nn; i++) {
        int n = ns[i], ctx = 64;
        double t = time_forward(&m, n, ctx, reps);
        double gbs = wb / t / 1e9, gf = call_flops(&m, n, ctx) / t / 1e9;
        printf("%6d %10.1f %10.1f %9.2f %6.0f%% %10.1f %6.0f%%\n", n, t * 1e3, n / t, gbs,
               100 * gbs / g_gbs, gf, 100 * gf / g_gflops);
    }
    printf("peak RSS so far: %.2f GB\n", rf_peak_rss() / 1e9);
    rf_model_free(&m);
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/rfbench", *dir8b = NULL;
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--8b") && i + 1 < argc) dir8b = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [--dir DIR] [--8b DIR]\n", argv[0]);
            return 2;
        }
    }
    g_gbs = rf_measure_read_gbs();
    g_gflops = rf_measure_fma_gflops();
    printf("machine: %d threads, measured read bandwidth %.1f GB/s, f32 FMA peak %.0f GFLOP/s\n",
           omp_get_max_threads(), g_gbs, g_gflops);
    int ns[] = {1, 4, 16, 64};
    char d16[4096], d32[4096];
    snprintf(d16, sizeof d16, "%s/qwen3-0.6b-bf16", dir);
    snprintf(d32, sizeof d32, "%s/qwen3-0.6b-f32", dir);
    if (rf_mkdir_p(dir) != 0) rf_die("%s", rf_last_error());
    ensure_checkpoint(d16, "0.6b", RF_BF16);
    bench_dir(d16, ns, 4, quick ? 1 : 3);
    if (!quick) {
        ensure_checkpoint(d32, "0.6b", RF_F32);
        bench_dir(d32, ns, 4, 3);
    }
    if (dir8b) {
        int ns8[] = {1, 32};
        bench_dir(dir8b, ns8, 2, 2); /* the first rep faults the 16 GB mmap in */
    }
    return 0;
}
