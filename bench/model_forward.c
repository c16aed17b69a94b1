/* model_forward.c - forward-pass benchmark on real checkpoint layouts, per
 * CPU tier and weight dtype.
 *
 *   bench_model_forward [--quick] [--dir /tmp/rfbench] [--8b DIR] [--tier avx2,avx512]
 *                       [--dtype bf16,q8_0,q4_0] [--decode N] [--model DIR] [--n 1,4,16,64]
 *                       [--amx-int8 MIN_TOKENS]
 *
 * Writes (once, reused afterwards) a random Qwen3-0.6B-shaped bf16 checkpoint
 * under --dir and loads it through the normal mmap loader; Q8_0 / Q4_0 are
 * that model quantised in memory (rf_model_quantize: layer matrices and lm
 * head; the embeddings stay bf16). For every tier this machine has and every
 * dtype it times one forward call of n = 1, 4, 16, 64 new tokens after a
 * 64-token context, logits for every new token (what ReFusion's plan/verify
 * calls need), and prints ms/call, the ratio to n = 1, tokens/s, the weight
 * bytes streamed per second against the measured read bandwidth, and the
 * G ops/s (multiply-add = 2) against the measured peak of the instruction
 * the tier's kernel for that dtype is built on (kernels/roofline.h). Then AR
 * decoding: a 16-token prompt, N (default 32) greedy tokens one forward call
 * each (logits of the last token, argmax), tokens/s. With --8b DIR (an
 * 8B-shaped checkpoint, e.g. from `refusion init --preset 8b`) the same for
 * the 8B shape (n = 1, 32; Q4_0 AR decode). --model DIR times that
 * checkpoint instead of the 0.6B shape (e.g. the demo model, whose weights
 * stay in cache: there a call's cost is compute and per-call overhead, the
 * regime of the paper table's speed figures; --dtype bf16 then means the
 * checkpoint's own types, e.g. a Q4_K_M GGUF); --n sets the call widths.
 * Every figure is the best of the repetitions: on a shared machine the
 * minimum is the least disturbed. */
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <omp.h>

#include "io/quant.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "read_probe.h"
#include "model/forward.h"
#include "util/util.h"

static double g_gbs, g_peak[3][RF_DTYPE_COUNT]; /* [tier][dtype]; amx: the tile instructions' peaks */

static size_t mat_bytes(const rf_mat *w) { return rf_dtype_row_bytes(w->dtype, w->cols) * w->rows; }

/* bytes of weights one forward streams: every layer matrix + the lm head */
static double weight_bytes(const rf_model *m) {
    double b = (double)mat_bytes(&m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const rf_layer *L = &m->layers[l];
        b += (double)mat_bytes(&L->q) + mat_bytes(&L->k) + mat_bytes(&L->v) + mat_bytes(&L->o) +
             mat_bytes(&L->gate) + mat_bytes(&L->up) + mat_bytes(&L->down);
    }
    return b;
}

/* ops of one call: 2 per weight per token, plus attention scores + mix */
static double call_flops(const rf_model *m, int n, int ctx) {
    const rf_config *c = &m->cfg;
    double per_layer = (double)c->hidden_size * c->head_dim * (2.0 * c->n_heads + 2.0 * c->n_kv_heads) +
                       3.0 * c->hidden_size * c->intermediate_size;
    double w = per_layer * c->n_layers + (double)c->vocab_size * c->hidden_size;
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

/* AR decoding: prompt, then n_gen greedy tokens, one 1-token call each */
static double time_decode(const rf_model *m, int n_prompt, int n_gen, int reps) {
    const rf_config *cfg = &m->cfg;
    int V = cfg->vocab_size, ctx = n_prompt + n_gen + 1;
    rf_kvcache c;
    rf_kv_init(&c, cfg, ctx);
    rf_runstate *s = rf_runstate_new(cfg, n_prompt, ctx);
    int tok[512], pos[512];
    for (int i = 0; i < n_prompt; i++) tok[i] = (i * 7919) % V, pos[i] = i;
    float *logits = rf_malloc(sizeof(float) * V);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        rf_kv_crop(&c, 0);
        int last = n_prompt - 1;
        rf_batch pre = {1, n_prompt, tok, pos, 0, 1, &last, logits};
        if (rf_forward(m, &c, s, &pre) != 0) rf_die("%s", rf_last_error());
        double t0 = rf_now();
        for (int g = 0; g < n_gen; g++) {
            int next = 0, p = n_prompt + g, zero = 0;
            for (int v = 1; v < V; v++)
                if (logits[v] > logits[next]) next = v;
            rf_batch b = {1, 1, &next, &p, 0, 1, &zero, logits};
            if (rf_forward(m, &c, s, &b) != 0) rf_die("%s", rf_last_error());
        }
        double t = rf_now() - t0;
        if (t < best) best = t;
    }
    free(logits);
    rf_runstate_free(s);
    rf_kv_free(&c);
    return n_gen / best;
}

static void bench_model(const rf_model *m, const char *what, int tier, const int *ns, int nn, int reps) {
    rf_dtype dt = m->layers[0].q.dtype;
    double wb = weight_bytes(m), pk = g_peak[tier][dt];
    printf("\n%s, %s (%.2f GB of weights streamed per call), tier %s\n", what, rf_dtype_name(dt), wb / 1e9,
           rf_cpu_tier_name());
    printf("%6s %10s %7s %10s %9s %7s %10s %7s\n", "n", "ms/call", "x n=1", "tok/s", "GB/s", "%bw", "Gops/s", "%peak");
    double t1 = 0;
    for (int i = 0; i < nn; i++) {
        int n = ns[i], ctx = 64;
        double t = time_forward(m, n, ctx, reps);
        if (n == 1) t1 = t;
        double gbs = wb / t / 1e9, gf = call_flops(m, n, ctx) / t / 1e9;
        const double bw_before = g_gbs;
        const int bw_bug = read_probe_beaten(gbs, wb, &g_gbs); /* may raise g_gbs first */
        char ratio[16] = "";
        if (t1 > 0) snprintf(ratio, sizeof ratio, "%.2f", t / t1);
        char again[48] = "";
        if (g_gbs > bw_before) snprintf(again, sizeof again, "  (read probe again: %.1f GB/s)", g_gbs);
        printf("%6d %10.*f %7s %10.1f %9.2f %6.0f%% %10.1f %6.0f%%%s%s\n", n, t < 0.01 ? 3 : 1, t * 1e3, ratio, n / t,
               gbs, 100 * gbs / g_gbs, gf, 100 * gf / pk, again,
               gf > pk   ? "  PROBE BUG: above the measured compute peak"
               : bw_bug ? "  PROBE BUG: above the measured read bandwidth"
                         : "");
        fflush(stdout);
    }
}

static int parse_list(const char *s, const char *const *names, int nnames, int *out, int max) {
    int n = 0;
    while (*s && n < max) {
        size_t len = strcspn(s, ",");
        int k = -1;
        for (int i = 0; i < nnames; i++)
            if (strlen(names[i]) == len && !strncmp(s, names[i], len)) k = i;
        if (k < 0) return -1;
        out[n++] = k;
        s += len + (s[len] == ',');
    }
    return n;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/rfbench", *dir8b = NULL, *model_dir = NULL;
    int ns[16] = {1, 4, 16, 64}, nn = 4;
    static const char *const tnames[] = {"avx2", "avx512", "amx"}, *const dnames[] = {"bf16", "q8_0", "q4_0"};
    const rf_dtype dmap[] = {RF_BF16, RF_Q8_0, RF_Q4_0};
    int quick = 0, tiers[3] = {0, 1, 2}, n_tiers = 3, dts[3] = {0, 1, 2}, n_dts = 3, n_gen = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--8b") && i + 1 < argc) dir8b = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            char *e = argv[++i];
            for (nn = 0; nn < 16 && *e;) {
                long v = strtol(e, &e, 10);
                if (v < 1 || v > 512 || (*e && *e != ',')) rf_die("--n: widths 1..512 separated by commas");
                ns[nn++] = (int)v;
                e += *e == ',';
            }
        } else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--decode") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--amx-int8") && i + 1 < argc) rf_matmul_set_amx_int8(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--tier") && i + 1 < argc && (n_tiers = parse_list(argv[++i], tnames, 3, tiers, 3)) > 0) {
        } else if (!strcmp(argv[i], "--dtype") && i + 1 < argc &&
                   (n_dts = parse_list(argv[++i], dnames, 3, dts, 3)) > 0) {
        } else {
            fprintf(stderr, "usage: %s [--quick] [--dir DIR] [--8b DIR] [--tier avx2,avx512] "
                            "[--dtype bf16,q8_0,q4_0] [--decode N] [--model DIR] [--n 1,4,16,64] [--amx-int8 MIN_TOKENS]\n", argv[0]);
            return 2;
        }
    }
    if (n_gen < 1 || n_gen > 400) n_gen = 32;
    int have512 = rf_cpu_tier_detected() >= RF_CPU_AVX512;
    g_gbs = rf_measure_read_gbs();
    double f32 = rf_measure_fma_gflops(), i8 = rf_peak_i8_maddubs_avx2(), i8u = rf_peak_i8_maddubs16_avx2();
    g_peak[0][RF_BF16] = g_peak[1][RF_F32] = g_peak[0][RF_F32] = f32;
    g_peak[0][RF_Q8_0] = i8, g_peak[0][RF_Q4_0] = i8u;
    for (int d = RF_Q4_0 + 1; d < RF_DTYPE_COUNT; d++) g_peak[0][d] = i8u; /* the other block types: int8 dots */
    printf("machine: %d threads, cpu %s%s%s%s%s, measured read bandwidth %.1f GB/s\n", omp_get_max_threads(),
           rf_cpu_tier_str(rf_cpu_tier_detected()), rf_cpu_note()[0] ? "; " : "", rf_cpu_note(), rf_matmul_amx_note()[0] ? "; " : "", rf_matmul_amx_note(), g_gbs);
    printf("peaks (G ops/s): avx2 f32 FMA %.0f, avx2 int8 maddubs %.0f (Q8_0 step), %.0f (Q4_0 step)", f32, i8, i8u);
    if (have512) {
        /* the loaded weights are packed: bf16 runs on f32 FMAs or on vdpbf16ps,
         * as rf_matmul_bf16p_kernel chose (REFUSION_BF16P, the tune cache) */
        double fma512 = rf_peak_f32_fma_avx512(), dot = rf_peak_bf16_dot_avx512();
        int dp = rf_matmul_bf16p_kernel() == RF_BF16P_DP;
        g_peak[1][RF_BF16] = dp ? dot : fma512;
        g_peak[1][RF_Q8_0] = g_peak[1][RF_Q4_0] = rf_peak_i8_vnni_avx512();
        for (int d = RF_Q4_0 + 1; d < RF_DTYPE_COUNT; d++) g_peak[1][d] = g_peak[1][RF_Q8_0];
        printf(", avx512 f32 FMA %.0f%s, avx512 bf16 dot %.0f%s, avx512 int8 VNNI %.0f", fma512,
               dp ? "" : " (packed bf16)", dot, dp ? " (packed bf16)" : "", g_peak[1][RF_Q8_0]);
    }
    for (int d = 0; d < RF_DTYPE_COUNT; d++) g_peak[2][d] = g_peak[1][d]; /* K-quants stay on avx512 */
    if (rf_cpu_tier_detected() >= RF_CPU_AMX && rf_peak_bf16_tile_amx() > 0) {
        /* amx: bf16 on TDPBF16PS; Q8_0 / Q4_0 on TDPBSUD with K = one 32-block (the packed weights of a wide call) */
        g_peak[2][RF_BF16] = rf_peak_bf16_tile_amx();
        g_peak[2][RF_Q8_0] = g_peak[2][RF_Q4_0] = rf_peak_i8_tile32_amx();
        printf(", amx bf16 tdpbf16ps %.0f, amx int8 tdpbsud %.0f (K = 32: %.0f)", g_peak[2][RF_BF16],
               rf_peak_i8_tile_amx(), g_peak[2][RF_Q8_0]);
    }
    printf("\n");
    char d16[3900];
    const char *what = "Qwen3-0.6B";
    int reps = quick ? 1 : 3;
    if (model_dir) {
        snprintf(d16, sizeof d16, "%s", model_dir);
        what = model_dir;
        reps = quick ? 20 : 400; /* calls of well under a millisecond: the minimum needs many */
    } else {
        snprintf(d16, sizeof d16, "%s/qwen3-0.6b-bf16", dir);
        if (rf_mkdir_p(dir) != 0) rf_die("%s", rf_last_error());
        ensure_checkpoint(d16, "0.6b", RF_BF16);
    }
    double dec[3][3] = {{0}};
    for (int di = 0; di < n_dts; di++) {
        rf_model m;
        if (rf_model_load(&m, d16) != 0) rf_die("%s", rf_last_error());
        rf_dtype dt = dmap[dts[di]];
        if (dt != RF_BF16 && rf_model_quantize(&m, dt) != 0) rf_die("%s", rf_last_error());
        for (int ti = 0; ti < n_tiers; ti++) {
            if (rf_cpu_set_tier((rf_cpu_tier)tiers[ti]) != 0) {
                if (di == 0) printf("SKIPPED: %s (cpu lacks it)\n", tnames[tiers[ti]]);
                continue;
            }
            bench_model(&m, what, tiers[ti], ns, nn, reps);
            dec[tiers[ti]][dts[di]] = time_decode(&m, 16, n_gen, model_dir ? reps / 10 : quick ? 1 : 2);
        }
        printf("peak RSS so far: %.2f GB\n", rf_peak_rss() / 1e9);
        rf_model_free(&m);
    }
    printf("\nAR decode, %s, 16-token prompt + %d greedy tokens, tokens/s:\n", what, n_gen);
    for (int ti = 0; ti < n_tiers; ti++)
        if (rf_cpu_set_tier((rf_cpu_tier)tiers[ti]) == 0) {
            printf("  %-6s", tnames[tiers[ti]]);
            for (int di = 0; di < n_dts; di++) /* with --model, "bf16" is the checkpoint's own types */
                printf("  %s %.1f", model_dir && dts[di] == 0 ? "as stored" : dnames[dts[di]], dec[tiers[ti]][dts[di]]);
            printf("\n");
        }
    if (dir8b) {
        int ns8[] = {1, 32};
        for (int di = 0; di < 2; di++) {
            rf_model m;
            if (rf_model_load(&m, dir8b) != 0) rf_die("%s", rf_last_error());
            if (di == 1 && rf_model_quantize(&m, RF_Q4_0) != 0) rf_die("%s", rf_last_error());
            for (int ti = 0; ti < n_tiers; ti++) {
                if (rf_cpu_set_tier((rf_cpu_tier)tiers[ti]) != 0) continue;
                bench_model(&m, "8B", tiers[ti], ns8, 2, 2); /* the first rep faults the mmap in */
                if (di == 1) printf("AR decode 8B Q4_0 (%s): %.2f tokens/s\n", rf_cpu_tier_name(), time_decode(&m, 16, 8, 1));
            }
            printf("peak RSS so far: %.2f GB\n", rf_peak_rss() / 1e9);
            rf_model_free(&m);
        }
    }
    return 0;
}
