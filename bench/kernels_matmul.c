/* kernels_matmul.c - benchmark rf_matmul on the Qwen3-0.6B and Qwen3-8B layer
 * shapes against this machine's measured rooflines.
 *
 *   bench_kernels_matmul [--quick] [--blas] [--dtype bf16,q8_0,q4_0,f32,f16,q4_k,...] [--n 1,4,16]
 *                        [--shape RxC] [--tier avx2,avx512,amx] [--clock wall|cpu]
 *                        [--amx-int8 MIN_TOKENS]
 *
 * Every CPU tier this machine has (kernels/cpu.h; or those given) and every
 * dtype (default bf16, q8_0, q4_0; also q4_1 q5_0 q5_1 iq4_nl q2_k q3_k
 * q4_k q5_k q6_k iq4_xs, whose weights are a fixed byte pattern with finite
 * scales: the kernel's speed does not depend on the values) is timed; the
 * tier is printed per row. The per-type 1-token GB/s and the wide calls'
 * cost (the x1 column: a call's time over the 1-token call's) of the
 * llama.cpp ladder: --dtype q4_k,q5_k,q6_k,iq4_xs,q8_0,q4_0 --n 1,2,4,8,16,32.
 * --blas also times OpenBLAS cblas_sgemm on the f32 rows with n >= 16 (the
 * "blas ms" column) for comparison. Note: OpenBLAS 0.3.21 does not know
 * this CPU model and falls back to its SSE3 "Prescott" kernels unless run
 * with OPENBLAS_CORETYPE=Haswell (AVX2) in the environment.
 *
 * For every (shape, tier, dtype, n): ms per call, GB/s of weight streaming
 * (and % of the measured read bandwidth), G ops/s (a multiply-add = 2) and %
 * of the measured peak of the instruction the kernel is built on at that
 * tier (roofline.h): f32 FMA (f32/f16, bf16 at avx2, packed bf16 at avx512
 * on the FMA kernel), bf16 vdpbf16ps (packed bf16 on the dp kernel; row-major
 * bf16 at avx512: with hi and lo activations it issues two per weight and
 * tops out at 50%), int8 maddubs (avx2 Q8_0/Q4_0, and the 32-weight block
 * types at every tier) or vpdpbusd (avx512 Q8_0/Q4_0 and the 256-weight
 * types; row-major Q8_0/Q4_0 at amx), and at amx
 * TDPBF16PS (bf16) and TDPBSUD with K = 32 (packed Q8_0/Q4_0 when
 * --amx-int8 MIN_TOKENS puts calls of that many tokens or more on the
 * int8 tiles, 0 none, kernels.h rf_matmul_set_amx_int8; by default Q8_0
 * of 5..32 tokens and Q4_0 9..16: elsewhere the vpdpbusd kernel runs and
 * its % of the tile peak means little).
 * Each figure is the fastest of the calls that fill ~0.15 s (at least 2,
 * after one warm-up call): on a shared machine the minimum is the least
 * disturbed measurement. Default: everything in well under a minute.
 * --clock cpu times the calls by the process's CPU time instead of the wall
 * clock: on a machine loaded by other jobs the wall clock mostly measures
 * the wait for a core (meaningful with OMP_NUM_THREADS=1 only; the
 * bandwidth and peak probes stay on the wall clock). */
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#ifndef RF_NO_BLAS
#include <cblas.h>
#endif
#include "io/quant.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "read_probe.h"
#include "util/util.h"

typedef struct { int rows, cols; const char *what; } shape;

static const shape shapes[] = {
    {2048, 1024, "0.6B q_proj"},   {1024, 2048, "0.6B o_proj"},
    {3072, 1024, "0.6B gate/up"},  {1024, 3072, "0.6B down"},
    {151936, 1024, "0.6B lm_head"}, {12288, 4096, "8B gate/up"},
    {4096, 4096, "8B q/o_proj"},
};

/* --dtype names, in rf_dtype's order (formats/dtype.h) */
static const char *const dnames[RF_DTYPE_COUNT] = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",
                                                   "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k",
                                                   "q6_k", "q8_k", "iq4_nl", "iq4_xs"};
static const char *dtname(rf_dtype t) { return dnames[t]; }

static int g_cpu_clock;
/* seconds on the chosen clock */
static double now(void) {
    if (!g_cpu_clock) return rf_now();
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double g_peak[3][RF_DTYPE_COUNT]; /* [tier][dtype]: the peak the kernel is measured against */

static void measure_peaks(int have512) {
    double f32 = rf_measure_fma_gflops(), i8 = rf_peak_i8_maddubs_avx2(), i8u = rf_peak_i8_maddubs16_avx2();
    printf("peaks (G ops/s): avx2 f32 FMA %.0f, avx2 int8 maddubs %.0f (Q8_0 step), %.0f (Q4_0 step)", f32, i8, i8u);
    g_peak[0][RF_F32] = g_peak[0][RF_F16] = g_peak[0][RF_BF16] = f32;
    g_peak[0][RF_Q8_0] = i8, g_peak[0][RF_Q4_0] = i8u;
    /* the other block types: the avx2 maddubs kernel at every tier */
    for (int d = RF_Q4_1; d < RF_DTYPE_COUNT; d++) g_peak[0][d] = g_peak[1][d] = i8;
    g_peak[1][RF_F32] = g_peak[1][RF_F16] = f32;
    if (have512) {
        double f512 = rf_peak_f32_fma_avx512(), b = rf_peak_bf16_dot_avx512(), v = rf_peak_i8_vnni_avx512();
        printf(", avx512 f32 FMA %.0f, avx512 bf16 dot %.0f, avx512 int8 VNNI %.0f", f512, b, v);
        g_peak[1][RF_F32] = g_peak[1][RF_F16] = f512;
        g_peak[1][RF_BF16] = b;
        g_peak[1][RF_Q8_0] = g_peak[1][RF_Q4_0] = v;
        /* the 256-weight block types (K-quants, IQ4_XS) take vpdpbusd at avx512 */
        for (int d = RF_Q4_1; d < RF_DTYPE_COUNT; d++)
            if (rf_dtype_block_elems((rf_dtype)d) == 256) g_peak[1][d] = v;
    }
    for (int d = 0; d < RF_DTYPE_COUNT; d++) g_peak[2][d] = g_peak[1][d];
    if (rf_cpu_tier_detected() >= RF_CPU_AMX && rf_peak_bf16_tile_amx() > 0) {
        /* amx: bf16 on TDPBF16PS; packed Q8_0 / Q4_0 on TDPBSUD with K = one 32-block */
        g_peak[2][RF_BF16] = rf_peak_bf16_tile_amx();
        g_peak[2][RF_Q8_0] = g_peak[2][RF_Q4_0] = rf_peak_i8_tile32_amx();
        printf(", amx bf16 tdpbf16ps %.0f, amx int8 tdpbsud %.0f (K = 32: %.0f)", g_peak[2][RF_BF16],
               rf_peak_i8_tile_amx(), g_peak[2][RF_Q8_0]);
    }
    printf("\n");
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

/* random weights of the dtype: a fixed pattern, quantised for Q types */
static void *make_weights(rf_dtype dt, int rows, int cols) {
    size_t rb = rf_dtype_row_bytes(dt, cols);
    char *wd = rf_aligned_alloc(rb * rows);
#pragma omp parallel
    {
        float *row = rf_malloc(sizeof(float) * cols);
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) {
                size_t i = (size_t)r * cols + c;
                row[c] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
            }
            char *o = wd + (size_t)r * rb;
            for (int c = 0; c < cols; c++)
                if (dt == RF_F32) ((float *)o)[c] = row[c];
                else if (dt == RF_F16) ((uint16_t *)o)[c] = rf_f32_to_f16(row[c]);
                else if (dt == RF_BF16) ((uint16_t *)o)[c] = rf_f32_to_bf16(row[c]);
            if (dt == RF_Q8_0) rf_quantize_row_q8_0(row, o, cols);
            if (dt == RF_Q4_0) rf_quantize_row_q4_0(row, o, cols);
            if (dt >= RF_Q4_1) /* bytes below 0x40: every f16 scale in them finite */
                for (size_t i = 0; i < rb; i++) o[i] = (char)((((size_t)r * rb + i) * 2654435761u >> 7) & 0x3f);
        }
        free(row);
    }
    return wd;
}

int main(int argc, char **argv) {
    int ns[16] = {1, 4, 8, 16, 32, 64, 128}, n_ns = 7;
    static const char *const tnames[] = {"avx2", "avx512", "amx"};
    int dts[RF_DTYPE_COUNT] = {RF_BF16, RF_Q8_0, RF_Q4_0}, n_dts = 3, tiers[3] = {0, 1, 2}, n_tiers = 3;
    int only_r = 0, only_c = 0, blas = 0;
    double target = 0.15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) target = 0.05;
        else if (!strcmp(argv[i], "--blas")) blas = 1;
        else if (!strcmp(argv[i], "--amx-int8") && i + 1 < argc) rf_matmul_set_amx_int8(atoi(argv[++i]));
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc && (n_dts = parse_list(argv[++i], dnames, RF_DTYPE_COUNT, dts, RF_DTYPE_COUNT)) > 0) {
        } else if (!strcmp(argv[i], "--tier") && i + 1 < argc &&
                   (n_tiers = parse_list(argv[++i], tnames, 3, tiers, 3)) > 0) {
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            n_ns = 0;
            for (char *s = argv[++i]; *s && n_ns < 16;) {
                ns[n_ns++] = (int)strtol(s, &s, 10);
                if (*s == ',') s++;
            }
        } else if (!strcmp(argv[i], "--clock") && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "cpu") || !strcmp(argv[i + 1], "wall"))) {
            g_cpu_clock = !strcmp(argv[++i], "cpu");
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%d", &only_r, &only_c) != 2 || only_r < 1 || only_c < 32 || only_c % 32) {
                fprintf(stderr, "--shape %s: want ROWSxCOLS, COLS a multiple of 32\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--quick] [--blas] [--dtype bf16,q8_0,q4_0,f32,f16,q4_k,...] [--n 1,4,16] "
                            "[--shape RxC] [--tier avx2,avx512,amx] [--clock wall|cpu] [--amx-int8 MIN_TOKENS]\n", argv[0]);
            return 2;
        }
    }
    for (int di = 0; di < n_dts; di++)
        if (dts[di] == RF_Q8_K) {
            fprintf(stderr, "--dtype q8_k: Q8_K holds activations, not weights\n");
            return 2;
        }
    int have512 = rf_cpu_tier_detected() >= RF_CPU_AVX512;
    printf("threads: %d, clock: %s, cpu: %s%s%s%s%s\n", omp_get_max_threads(), g_cpu_clock ? "process cpu" : "wall",
           rf_cpu_tier_str(rf_cpu_tier_detected()),
           rf_cpu_note()[0] ? "; " : "", rf_cpu_note(), rf_matmul_amx_note()[0] ? "; " : "", rf_matmul_amx_note());
    double bw = rf_measure_read_gbs();
    printf("measured read bandwidth %.1f GB/s\n", bw);
    measure_peaks(have512);
    printf("\n%-13s %-12s %-6s %-5s %4s %10s %8s %6s %9s %6s %7s%s\n", "layer", "shape", "tier", "dtype", "n",
           "ms/call", "W GB/s", "%bw", "Gops/s", "%peak", "x n=1", blas ? "   blas ms" : "");

    int maxn = 1;
    for (int i = 0; i < n_ns; i++) maxn = ns[i] > maxn ? ns[i] : maxn;
    rf_rng g;
    rf_rng_seed(&g, 7);
    /* --shape RxC: that shape alone (named if it is one of the list) */
    shape custom = {only_r, only_c, "custom"};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (shapes[i].rows == only_r && shapes[i].cols == only_c) custom.what = shapes[i].what;
    size_t nshapes = only_r ? 1 : sizeof shapes / sizeof *shapes;
    for (size_t si = 0; si < nshapes; si++) {
        const shape *sh = only_r ? &custom : &shapes[si];
        float *X = rf_aligned_alloc(sizeof(float) * maxn * sh->cols);
        float *Y = rf_aligned_alloc(sizeof(float) * maxn * sh->rows);
        for (size_t i = 0; i < (size_t)maxn * sh->cols; i++) X[i] = rf_rng_normal(&g);
        for (int di = 0; di < n_dts; di++) {
            rf_dtype dt = (rf_dtype)dts[di];
            size_t wbytes = rf_dtype_row_bytes(dt, sh->cols) * sh->rows, nw = (size_t)sh->rows * sh->cols;
            void *wd = make_weights(dt, sh->rows, sh->cols);
            rf_mat W = {dt, wd, sh->rows, sh->cols, NULL};
            /* the packed types: also W in the packed panel layout (rows "BF16p", "Q8_0p", "Q6_Kp", ...), at
             * avx2 and avx512, and Q8_0 / Q4_0 at amx (the amx tier's bf16 kernel reads the row-major W) */
            size_t pbytes = rf_mat_pack_bytes(&W);
            void *pk = pbytes ? rf_try_huge_alloc(pbytes) : NULL; /* as the model's (model/pack.c) */
            if (pk) rf_mat_pack(&W, pk);
            for (int ti = 0; ti < n_tiers; ti++) {
                int tier = tiers[ti];
                if (rf_cpu_set_tier((rf_cpu_tier)tier) != 0) {
                    if (si == 0 && di == 0) printf("SKIPPED: %s (cpu lacks it)\n", tnames[tier]);
                    continue;
                }
                for (int lay = 0; lay < (pk && (tier <= RF_CPU_AVX512 || dt != RF_BF16) ? 2 : 1); lay++) {
                W.packed = lay ? pk : NULL;
                double s1 = 0;
                for (int ni = 0; ni < n_ns; ni++) {
                    int n = ns[ni];
                    rf_matmul(Y, X, &W, n); /* warm-up */
                    /* best single call: the machine is shared, the minimum is
                     * the least disturbed measurement */
                    int reps = 0;
                    double t0 = now(), s = 1e30;
                    do {
                        double t1 = now();
                        rf_matmul(Y, X, &W, n);
                        double d = now() - t1;
                        s = d < s ? d : s;
                        reps++;
                    } while (now() - t0 < target || reps < 2);
                    if (n == 1) s1 = s;
                    double gbs = wbytes / s / 1e9, gf = 2.0 * nw * n / s / 1e9, pk = g_peak[tier][dt];
                    if (lay && dt == RF_BF16 && tier >= 1 && rf_matmul_bf16p_kernel() == RF_BF16P_FMA)
                        pk = g_peak[1][RF_F32]; /* packed bf16 on widened f32 FMAs (else vdpbf16ps) */
                    if (!lay && dt != RF_BF16 && tier == RF_CPU_AMX) pk = g_peak[1][dt]; /* row-major Q8_0 / Q4_0 at amx: vpdpbusd */
                    if (lay && dt == RF_IQ4_NL && tier >= 1) pk = g_peak[1][RF_Q4_0]; /* packed IQ4_NL at avx512, amx: vpdpbusd */
                    if (lay && (dt == RF_Q4_1 || dt == RF_Q5_0 || dt == RF_Q5_1))
                        pk = g_peak[tier >= 1][RF_Q4_0]; /* packed Q4_1 / Q5_0 / Q5_1: Q4_0's maddubs step, vpdpbusd */
                    char shs[32], ratio[16] = "";
                    snprintf(shs, sizeof shs, "%dx%d", sh->rows, sh->cols);
                    if (s1 > 0) snprintf(ratio, sizeof ratio, "%.2f", s / s1);
                    char label[16];
                    snprintf(label, sizeof label, "%s%s", lay ? rf_dtype_name(dt) : dtname(dt), lay ? "p" : "");
                    const double bw_before = bw;
                    const int bw_bug = read_probe_beaten(gbs, (double)wbytes, &bw); /* may raise bw first */
                    printf("%-13s %-12s %-6s %-5s %4d %10.3f %8.1f %5.0f%% %9.1f %5.0f%% %7s", sh->what, shs,
                           rf_cpu_tier_name(), label, n, s * 1e3, gbs, 100 * gbs / bw, gf, 100 * gf / pk, ratio);
#ifndef RF_NO_BLAS
                    if (blas && dt == RF_F32 && n >= 16) {
                        double sb = 1e30;
                        reps = 0;
                        t0 = rf_now();
                        do {
                            double t1 = rf_now();
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, sh->rows, sh->cols, 1.0f, X,
                                        sh->cols, wd, sh->cols, 0.0f, Y, sh->rows);
                            double d = rf_now() - t1;
                            sb = d < sb ? d : sb;
                            reps++;
                        } while (rf_now() - t0 < target || reps < 2);
                        printf(" %9.3f", sb * 1e3);
                    }
#endif
                    /* the probes are ceilings: a kernel above one means the probe is wrong */
                    if (bw > bw_before) printf("  (read probe again: %.1f GB/s)", bw);
                    if (bw_bug || gf > pk)
                        printf("  PROBE BUG: above the measured %s", gf > pk ? "compute peak" : "read bandwidth");
                    printf("\n");
                    fflush(stdout);
                }
                }
            }
            free(wd);
            free(pk);
        }
        free(X);
        free(Y);
    }
    return 0;
}
