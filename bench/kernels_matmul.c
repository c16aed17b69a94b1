/* kernels_matmul.c - benchmark rf_matmul on the Qwen3-0.6B and Qwen3-8B layer
 * shapes against this machine's measured rooflines.
 *
 *   bench_kernels_matmul [--quick] [--blas] [--dtype bf16|f16|f32] [--n 1,4,16] [--shape RxC]
 *
 * --blas also times OpenBLAS cblas_sgemm on the f32 rows with n >= 16 (the
 * "blas ms" column) for comparison. Note: OpenBLAS 0.3.21 does not know
 * this CPU model and falls back to its SSE3 "Prescott" kernels unless run
 * with OPENBLAS_CORETYPE=Haswell (AVX2) in the environment.
 *
 * For every (shape, dtype, n): ms per call, GB/s of weight streaming (and %
 * of the measured read bandwidth), GFLOP/s (and % of the measured FMA peak).
 * Each figure is the fastest of the calls that fill ~0.15 s (at least 2,
 * after one warm-up call): on a shared machine the minimum is the least
 * disturbed measurement. Default: everything in well under a minute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#ifndef RF_NO_BLAS
#include <cblas.h>
#endif
#include "kernels/kernels.h"
#include "kernels/roofline.h"
#include "util/util.h"

typedef struct { int rows, cols; const char *what; } shape;

static const shape shapes[] = {
    {2048, 1024, "0.6B q_proj"},   {1024, 2048, "0.6B o_proj"},
    {3072, 1024, "0.6B gate/up"},  {1024, 3072, "0.6B down"},
    {151936, 1024, "0.6B lm_head"}, {12288, 4096, "8B gate/up"},
    {4096, 4096, "8B q/o_proj"},
};

static const char *dtname(rf_dtype t) { return t == RF_F32 ? "f32" : t == RF_F16 ? "f16" : "bf16"; }

int main(int argc, char **argv) {
    int ns[16] = {1, 4, 8, 16, 32, 64, 128}, n_ns = 7;
    rf_dtype dts[3] = {RF_BF16, RF_F32}; int n_dts = 2;
    int only_r = 0, only_c = 0, blas = 0;
    double target = 0.15;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) target = 0.05;
        else if (!strcmp(argv[i], "--blas")) blas = 1;
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            n_dts = 1;
            dts[0] = !strcmp(d, "f32") ? RF_F32 : !strcmp(d, "f16") ? RF_F16 : RF_BF16;
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            n_ns = 0;
            for (char *s = argv[++i]; *s && n_ns < 16;) {
                ns[n_ns++] = (int)strtol(s, &s, 10);
                if (*s == ',') s++;
            }
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%d", &only_r, &only_c) != 2) only_r = only_c = 0;
        } else {
            fprintf(stderr, "usage: %s [--quick] [--blas] [--dtype bf16|f16|f32] [--n 1,4,16] [--shape RxC]\n", argv[0]);
            return 2;
        }
    }
    printf("threads: %d\n", omp_get_max_threads());
    double bw = rf_measure_read_gbs();
    double peak = rf_measure_fma_gflops();
    printf("measured roofline: read %.1f GB/s, f32 FMA peak %.1f GFLOP/s\n\n", bw, peak);
    printf("%-13s %-12s %-5s %4s %10s %8s %6s %9s %6s%s\n", "layer", "shape", "dtype", "n", "ms/call",
           "W GB/s", "%bw", "GFLOP/s", "%peak", blas ? "   blas ms" : "");

    int maxn = 1;
    for (int i = 0; i < n_ns; i++) maxn = ns[i] > maxn ? ns[i] : maxn;
    rf_rng g;
    rf_rng_seed(&g, 7);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const shape *sh = &shapes[si];
        if (only_r && (sh->rows != only_r || sh->cols != only_c)) continue;
        float *X = rf_aligned_alloc(sizeof(float) * maxn * sh->cols);
        float *Y = rf_aligned_alloc(sizeof(float) * maxn * sh->rows);
        for (size_t i = 0; i < (size_t)maxn * sh->cols; i++) X[i] = rf_rng_normal(&g);
        for (int di = 0; di < n_dts; di++) {
            size_t nw = (size_t)sh->rows * sh->cols, esz = dts[di] == RF_F32 ? 4 : 2;
            void *wd = rf_aligned_alloc(nw * esz);
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < nw; i++) {
                float v = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
                if (esz == 4) ((float *)wd)[i] = v;
                else ((uint16_t *)wd)[i] = dts[di] == RF_F16 ? rf_f32_to_f16(v) : rf_f32_to_bf16(v);
            }
            rf_mat W = {dts[di], wd, sh->rows, sh->cols};
            for (int ni = 0; ni < n_ns; ni++) {
                int n = ns[ni];
                rf_matmul(Y, X, &W, n); /* warm-up */
                /* best single call: the machine is shared, the minimum is
                 * the least disturbed measurement */
                int reps = 0;
                double t0 = rf_now(), s = 1e30;
                do {
                    double t1 = rf_now();
                    rf_matmul(Y, X, &W, n);
                    double d = rf_now() - t1;
                    s = d < s ? d : s;
                    reps++;
                } while (rf_now() - t0 < target || reps < 2);
                double gbs = nw * esz / s / 1e9, gf = 2.0 * nw * n / s / 1e9;
                char shs[32];
                snprintf(shs, sizeof shs, "%dx%d", sh->rows, sh->cols);
                printf("%-13s %-12s %-5s %4d %10.3f %8.1f %5.0f%% %9.1f %5.0f%%", sh->what, shs,
                       dtname(dts[di]), n, s * 1e3, gbs, 100 * gbs / bw, gf, 100 * gf / peak);
#ifndef RF_NO_BLAS
                if (blas && dts[di] == RF_F32 && n >= 16) {
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
                printf("\n");
                fflush(stdout);
            }
            free(wd);
        }
        free(X);
        free(Y);
    }
    return 0;
}
