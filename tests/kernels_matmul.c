/* kernels_matmul.c - rf_matmul / rf_matmul_rows / rf_mat_row_f32 against the
 * double-precision triple loop, on odd shapes and the three float weight
 * dtypes, at every CPU tier this machine has (kernels/cpu.h: each tier's
 * kernels are forced in turn with rf_cpu_set_tier; a tier the CPU lacks is
 * printed as SKIPPED by name). Q8_0 / Q4_0: tests/kernels_quant.c.
 *
 * Tolerance: the fast kernel accumulates in f32 (in a different order), so
 * its error grows like sqrt(cols) * eps_f32 * |x||w|; we require
 * max|y - ref| <= 1e-5 * max|ref| (+ a cols-scaled term for long rows),
 * which is ~100x above what a correct kernel reaches and far below what any
 * indexing bug (a wrong or missing term) produces. The avx512 tier's bf16
 * kernel multiplies bf16 weights by the activations split into two bf16
 * parts (x = hi + lo, |x - hi - lo| <= 2^-18 |x|): per-term error up to
 * 3.8e-6 |x w|, which cancellation in short rows (cols = 8) can lift to
 * ~1e-5 of max|ref|, so that kernel gets 5x the tolerance (5e-5), still
 * ~1e4x below an indexing bug.
 *
 * The bf16 kernel's default mode (rf_matmul_set_bf16_act(1), REFUSION_BF16_ACT
 * unset or bf16: activations rounded to bf16 once, one vdpbf16ps) is checked twice:
 * against the reference fed the bf16-rounded activations (the same
 * 5e-5 tolerance: it must compute exactly that), and against the plain
 * reference with the documented bound |y - ref| <= 2^-8 sum_k |x_k w_k|
 * per output (rounding x to bf16 changes each term by at most 2^-9 of it;
 * 2x margin for the f32 accumulation).
 *
 * Packed bf16 at avx512 and up has two kernels (rf_matmul_set_bf16p_kernel:
 * FMAs on widened weights, vdpbf16ps on the packed vectors); every bf16
 * check runs once with each forced, and the per-kernel call counts must
 * show that the forced one ran and the other did not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/matmul_impl.h"
#include "util/util.h"
#include "check.h"

static const rf_dtype dtypes[3] = {RF_F32, RF_F16, RF_BF16};
static const char *dtname(rf_dtype t) { return t == RF_F32 ? "F32" : t == RF_F16 ? "F16" : "BF16"; }

/* random weights in the given dtype, rows x cols */
static void *rand_weights(rf_rng *g, rf_dtype dt, int rows, int cols) {
    size_t m = (size_t)rows * cols;
    if (dt == RF_F32) {
        float *w = malloc(m * 4 + 4);
        for (size_t i = 0; i < m; i++) w[i] = rf_rng_normal(g);
        return w;
    }
    uint16_t *w = malloc(m * 2 + 2);
    for (size_t i = 0; i < m; i++)
        w[i] = dt == RF_F16 ? rf_f32_to_f16(rf_rng_normal(g)) : rf_f32_to_bf16(rf_rng_normal(g));
    return w;
}

static double g_scale = 1; /* 5 for the avx512 tier's bf16 kernel */
static double tol_for(int cols) { return g_scale * 1e-5 * (1.0 + cols / 1000.0); }
static const char *g_tier;

static void scale_for(rf_dtype dt) {
    g_scale = dt == RF_BF16 && rf_cpu_tier_active() >= RF_CPU_AVX512 ? 5 : 1;
}

/* W's packed copy (rf_mat_pack) when this CPU has one for W's dtype, else
 * NULL; W->packed is left as it was (the caller switches it per pass) */
static void *pack_if_any(rf_mat *W, int keep) {
    size_t bytes = rf_mat_pack_bytes(W);
    if (!bytes) return NULL;
    void *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    const void *was = W->packed;
    rf_mat_pack(W, buf);
    if (!keep) W->packed = was;
    return buf;
}

static double test_tier(void) {
    rf_rng g;
    rf_rng_seed(&g, 1234);
    const int rows_l[] = {1, 3, 7, 33, 257};
    const int cols_l[] = {1, 5, 8, 17, 130, 1000};
    const int n_l[] = {1, 2, 3, 5, 16, 17, 64, 65, 130};
    double worst = 0;
    for (int d = 0; d < 3; d++)
        for (size_t ri = 0; ri < sizeof rows_l / sizeof *rows_l; ri++)
            for (size_t ci = 0; ci < sizeof cols_l / sizeof *cols_l; ci++) {
                int rows = rows_l[ri], cols = cols_l[ci];
                void *wd = rand_weights(&g, dtypes[d], rows, cols);
                rf_mat W = {dtypes[d], wd, rows, cols, NULL};
                scale_for(dtypes[d]);
                /* bf16 at avx512 and up: every check again with W packed */
                void *pk = pack_if_any(&W, 0);
                for (int pass = 0; pass < (pk ? 2 : 1); pass++)
                for (size_t ni = 0; ni < sizeof n_l / sizeof *n_l; ni++) {
                    W.packed = pass ? pk : NULL;
                    int n = n_l[ni];
                    /* skip the slowest combinations of the naive reference */
                    if ((double)rows * cols * n > 4e6) continue;
                    float *X = malloc(sizeof(float) * n * cols);
                    float *Y = malloc(sizeof(float) * n * rows);
                    float *R = malloc(sizeof(float) * n * rows);
                    for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(&g);
                    rf_matmul(Y, X, &W, n);
                    rf_matmul_naive(R, X, &W, n);
                    double e = check_rel_err(Y, R, (size_t)n * rows);
                    if (e > worst) worst = e;
                    CHECK(e <= tol_for(cols), "%s rf_matmul %s%s rows=%d cols=%d n=%d: rel err %.3g",
                          g_tier, dtname(dtypes[d]), pass ? " packed" : "", rows, cols, n, e);
                    /* a row sub-range: rows [r0, r1) must equal those columns of R */
                    int r0 = rows / 3, r1 = rows - rows / 4;
                    if (pass && rows > 40) r0 = 16; /* a panel boundary: the packed kernel runs the view */
                    if (r1 > r0) {
                        int nr = r1 - r0;
                        float *Ys = malloc(sizeof(float) * n * nr);
                        float *Rs = malloc(sizeof(float) * n * nr);
                        rf_matmul_rows(Ys, X, &W, n, r0, r1);
                        for (int t = 0; t < n; t++)
                            memcpy(Rs + (size_t)t * nr, R + (size_t)t * rows + r0, sizeof(float) * nr);
                        e = check_rel_err(Ys, Rs, (size_t)n * nr);
                        CHECK(e <= tol_for(cols), "%s rf_matmul_rows %s%s rows=%d cols=%d n=%d [%d,%d): rel err %.3g",
                              g_tier, dtname(dtypes[d]), pass ? " packed" : "", rows, cols, n, r0, r1, e);
                        free(Ys);
                        free(Rs);
                    }
                    free(X);
                    free(Y);
                    free(R);
                }
                /* the embedding lookup must reproduce the stored values exactly */
                float *row = malloc(sizeof(float) * cols);
                int r = rows - 1, exact = 1;
                rf_mat_row_f32(row, &W, r);
                for (int c = 0; c < cols; c++) {
                    size_t k = (size_t)r * cols + c;
                    float want = dtypes[d] == RF_F32   ? ((float *)wd)[k]
                                 : dtypes[d] == RF_F16 ? rf_f16_to_f32(((uint16_t *)wd)[k])
                                                       : rf_bf16_to_f32(((uint16_t *)wd)[k]);
                    if (row[c] != want) exact = 0;
                }
                CHECK(exact, "rf_mat_row_f32 %s cols=%d", dtname(dtypes[d]), cols);
                free(row);
                free(wd);
                free(pk);
            }
    /* Shapes that reach the blocking paths: more tokens than one token block
     * (130 > 128), rows long enough to be split into k blocks (130 x 1500
     * floats > the L2 budget) with a ragged last block (1500 % 8 = 4),
     * several thread chunks (rows = 100). */
    {
        const int shp[][3] = {{7, 1500, 130}, {100, 1500, 131}, {100, 2056, 20}};
        for (int d = 0; d < 3; d++)
            for (int k = 0; k < 3; k++) {
                int rows = shp[k][0], cols = shp[k][1], n = shp[k][2];
                void *wd = rand_weights(&g, dtypes[d], rows, cols);
                rf_mat W = {dtypes[d], wd, rows, cols, NULL};
                scale_for(dtypes[d]);
                void *pk = pack_if_any(&W, 0);
                for (int pass = 0; pass < (pk ? 2 : 1); pass++) {
                W.packed = pass ? pk : NULL;
                float *X = malloc(sizeof(float) * n * cols), *Y = malloc(sizeof(float) * n * rows),
                      *R = malloc(sizeof(float) * n * rows);
                for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(&g);
                rf_matmul(Y, X, &W, n);
                rf_matmul_naive(R, X, &W, n);
                double e = check_rel_err(Y, R, (size_t)n * rows);
                CHECK(e <= tol_for(cols), "%s blocked rf_matmul %s%s rows=%d cols=%d n=%d: rel err %.3g",
                      g_tier, dtname(dtypes[d]), pass ? " packed" : "", rows, cols, n, e);
                /* called from inside a parallel region (the caller already
                 * owns the threads): must run on the calling thread and give
                 * the same numbers */
                int bad = 0;
#pragma omp parallel num_threads(2) reduction(+ : bad)
                {
                    float *Yt = malloc(sizeof(float) * n * rows);
                    rf_matmul(Yt, X, &W, n);
                    bad += check_rel_err(Yt, R, (size_t)n * rows) > tol_for(cols);
                    free(Yt);
                }
                CHECK(bad == 0, "rf_matmul inside a parallel region %s%s rows=%d: %d threads wrong",
                      dtname(dtypes[d]), pass ? " packed" : "", rows, bad);
                free(X); free(Y); free(R);
                }
                free(wd); free(pk);
            }
    }
    /* a sanity check that the comparison can fail: corrupt one output */
    {
        float X[8] = {1, 2, 3, 4, 5, 6, 7, 8}, Wd[8] = {1, 1, 1, 1, 1, 1, 1, 1}, Y[1], R[1];
        rf_mat W = {RF_F32, Wd, 1, 8, NULL};
        g_scale = 1;
        rf_matmul(Y, X, &W, 1);
        rf_matmul_naive(R, X, &W, 1);
        CHECK(Y[0] == 36.0f && R[0] == 36.0f, "1x8 ones: got %g / %g", Y[0], R[0]);
        Y[0] += 1e-3f;
        CHECK(check_rel_err(Y, R, 1) > tol_for(8), "the tolerance detects a 3e-5 error");
    }
    return worst;
}

/* Every call width 1..33 on packed bf16 weights whose rows span several
 * panel groups of the wide-call loop (panel groups outside, token tiles
 * inside) with a ragged last panel (and, at amx, the several-panel passes
 * of 3 panels or 2 x 2 token groups: 100 x 96): each token tile must meet every panel
 * of every group exactly once. Both activation modes at avx512 (single
 * against the naive product of bf16-rounded activations). */
static void test_token_sweep(void) {
    rf_rng g;
    rf_rng_seed(&g, 777);
    const int shp[][2] = {{113, 70}, {37, 160}, {100, 96}, {50, 33}};
    scale_for(RF_BF16);
    for (int single = 0; single < (rf_cpu_tier_active() >= RF_CPU_AVX512 ? 2 : 1); single++) {
        rf_matmul_set_bf16_act(single);
        for (size_t k = 0; k < sizeof shp / sizeof *shp; k++) {
            int rows = shp[k][0], cols = shp[k][1], bad = 0;
            uint16_t *wd = rand_weights(&g, RF_BF16, rows, cols);
            rf_mat W = {RF_BF16, wd, rows, cols, NULL};
            void *pk = pack_if_any(&W, 1);
            double worst = 0, tol = single ? 5e-5 * (1.0 + cols / 1000.0) : tol_for(cols);
            for (int n = 1; n <= 33; n++) {
                float *X = malloc(sizeof(float) * n * cols), *Y = malloc(sizeof(float) * n * rows),
                      *R = malloc(sizeof(float) * n * rows);
                for (int i = 0; i < n * cols; i++) {
                    X[i] = rf_rng_normal(&g);
                    if (single) X[i] = rf_bf16_to_f32(rf_f32_to_bf16(X[i]));
                }
                rf_matmul(Y, X, &W, n);
                rf_matmul_naive(R, X, &W, n);
                double e = check_rel_err(Y, R, (size_t)n * rows);
                worst = e > worst ? e : worst;
                bad += !(e <= tol);
                free(X), free(Y), free(R);
            }
            CHECK(!bad, "%s BF16 packed%s rows=%d cols=%d n=1..33: %d widths beyond rel err %.3g (worst %.3g)",
                  g_tier, single ? " bf16-act" : "", rows, cols, bad, tol, worst);
            free(wd), free(pk);
        }
    }
    rf_matmul_set_bf16_act(0);
}

/* avx512 and up: the bf16 kernel with single-rounded bf16 activations */
static void test_bf16_single(void) {
    rf_rng g;
    rf_rng_seed(&g, 99);
    /* 160 x 4096, 40 tokens: at amx, blocks of 32 tokens over L2 groups of 6 panels (a 128-row chunk spans two) */
    const int shp[][3] = {{1, 8, 1}, {7, 33, 5}, {33, 130, 17}, {257, 1000, 3}, {100, 2056, 20}, {5, 64, 64}, {160, 4096, 40}};
    rf_matmul_set_bf16_act(1);
    for (size_t k = 0; k < sizeof shp / sizeof *shp; k++) {
        int rows = shp[k][0], cols = shp[k][1], n = shp[k][2];
        uint16_t *wd = rand_weights(&g, RF_BF16, rows, cols);
        rf_mat W = {RF_BF16, wd, rows, cols, NULL};
        void *pk = pack_if_any(&W, 0);
        for (int pass = 0; pass < (pk ? 2 : 1); pass++) {
        W.packed = pass ? pk : NULL;
        float *X = malloc(sizeof(float) * n * cols), *Xb = malloc(sizeof(float) * n * cols);
        float *Y = malloc(sizeof(float) * n * rows), *R = malloc(sizeof(float) * n * rows);
        for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(&g), Xb[i] = rf_bf16_to_f32(rf_f32_to_bf16(X[i]));
        rf_matmul(Y, X, &W, n);
        rf_matmul_naive(R, Xb, &W, n);
        double e = check_rel_err(Y, R, (size_t)n * rows);
        CHECK(e <= 5e-5 * (1.0 + cols / 1000.0), "%s bf16-act rf_matmul%s rows=%d cols=%d n=%d vs bf16(x) ref: rel err %.3g",
              g_tier, pass ? " packed" : "", rows, cols, n, e);
        rf_matmul_naive(R, X, &W, n);
        int bad = 0;
        for (int t = 0; t < n; t++)
            for (int r = 0; r < rows; r++) {
                double bound = 0;
                for (int c = 0; c < cols; c++)
                    bound += fabs((double)X[(size_t)t * cols + c] * rf_bf16_to_f32(wd[(size_t)r * cols + c]));
                bad += fabs((double)Y[(size_t)t * rows + r] - R[(size_t)t * rows + r]) > bound / 256;
            }
        CHECK(!bad, "%s bf16-act rf_matmul%s rows=%d cols=%d n=%d: %d outputs beyond 2^-8 sum|x w| of the f32 ref",
              g_tier, pass ? " packed" : "", rows, cols, n, bad);
        free(X), free(Xb), free(Y), free(R);
        }
        free(wd), free(pk);
    }
    rf_matmul_set_bf16_act(0);
}

/* REFUSION_AMX_BF16 / REFUSION_AMX_INT8 values: off or 0 never, N from N
 * tokens, anything else the built-in widths (-1) */
static void test_env_min_tokens(void) {
    static const struct {
        const char *v;
        int want;
    } cases[] = {{NULL, -1}, {"", -1}, {"off", 0}, {"0", 0}, {"9", 9}, {"12", 12}, {"-3", -1}, {"9x", -1}, {"on", -1}, {"99999999", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(rf_kernels_env_min_tokens(cases[i].v) == cases[i].want, "env value '%s': %d, want %d",
              cases[i].v ? cases[i].v : "(unset)", rf_kernels_env_min_tokens(cases[i].v), cases[i].want);
    /* the setters override the environment, and a negative value restores the built-in widths */
    rf_matmul_set_amx_bf16(9);
    CHECK(rf_matmul_amx_bf16() == 9, "amx bf16 from 9 tokens: %d", rf_matmul_amx_bf16());
    rf_matmul_set_amx_bf16(-5);
    CHECK(rf_matmul_amx_bf16() == -1, "amx bf16 default: %d", rf_matmul_amx_bf16());
}

int main(void) {
    rf_matmul_set_bf16_act(0); /* the f32-grade split (the tolerances below), whatever REFUSION_BF16_ACT says */
    test_env_min_tokens();     /* ends with the built-in bf16 tile widths, whatever REFUSION_AMX_BF16 says */
    for (int t = RF_CPU_AVX2; t <= RF_CPU_AMX; t++) {
        g_tier = rf_cpu_tier_str((rf_cpu_tier)t);
        if (rf_cpu_set_tier((rf_cpu_tier)t) != 0) {
            printf("SKIPPED: %s (%s)\n", g_tier, t == RF_CPU_AMX ? "skipped: no AMX on this CPU, or the OS does not grant it" : "cpu lacks it");
            continue;
        }
        if (rf_cpu_tier_active() != (rf_cpu_tier)t) { /* a build without AMX kernels */
            printf("SKIPPED: %s (this build has no AMX kernels; it runs the %s ones)\n", g_tier, rf_cpu_tier_name());
            continue;
        }
        /* the packed bf16 kernels exist at avx512 and up; avx2 has one */
        for (int k = 0; k < (t >= RF_CPU_AVX512 ? 2 : 1); k++) {
            const char *kname = k == RF_BF16P_DP ? "vdpbf16ps" : "fma";
            rf_matmul_set_bf16p_kernel(k);
            unsigned long ran[2] = {rf_matmul_bf16p_calls(RF_BF16P_FMA), rf_matmul_bf16p_calls(RF_BF16P_DP)};
            double worst = test_tier();
            printf("%s (packed bf16: %s): worst relative error %.3g\n", g_tier, kname, worst);
            if (t >= RF_CPU_AVX512) test_bf16_single();
            test_token_sweep();
            if (t >= RF_CPU_AVX512) {
                unsigned long now_k = rf_matmul_bf16p_calls(k) - ran[k], now_o = rf_matmul_bf16p_calls(!k) - ran[!k];
                CHECK(now_k > 0 && now_o == 0, "%s packed bf16 forced to %s: %lu calls ran it, %lu the other kernel",
                      g_tier, kname, now_k, now_o);
            }
        }
        rf_matmul_set_bf16p_kernel(-1);
    }
    rf_kernels_shutdown(); /* nothing left for LeakSanitizer */
    return check_summary("kernels_matmul");
}
