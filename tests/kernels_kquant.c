/* kernels_kquant.c - the matmuls over Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K and IQ4_XS weights (kernels/matmul_kq.c; at the avx512
 * and amx tiers the 256-weight types run matmul_kq_avx512.c) at every CPU
 * tier this machine has (tiers it lacks printed as SKIPPED), on random
 * blocks (random level bytes, f16 scales in a sane range; every bit pattern
 * of the levels and sub-block scales is a valid block), rows 1, 3, 17, 40,
 * every block count of 1..3 plus one long row, and n = 1..33 tokens:
 *  - against a reference that quantises the activations as the kernel does
 *    (per 32-block: d = max|x| / 127 in f32, round to nearest even) and
 *    sums the dequantised weights (formats/dequant.c, which
 *    tests/gguf_kquant.sh proves bit-identical to ggml's) times d q_x in
 *    double: per output |y - ref| <= 2e-5 (1 + cols / 1000) x the sum of
 *    the |terms| (the kernel rounds the scale products and f32 sums only);
 *  - rf_mat_row_f32 (the embedding lookup) gives the dequantised row
 *    exactly;
 *  - the panel copy (every one of these types has one: 16-row panels,
 *    read by both tiers' packed kernels): the same checks on it, and one
 *    call of 70 tokens. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "formats/blocks.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "util/util.h"

static const rf_dtype TYPES[] = {RF_Q4_1, RF_Q5_0, RF_Q5_1, RF_IQ4_NL, RF_Q2_K,
                                 RF_Q3_K, RF_Q4_K, RF_Q5_K, RF_Q6_K, RF_IQ4_XS};

/* byte offsets of a block's f16 scale fields (-1: none) */
static void scale_fields(rf_dtype t, int *d, int *m) {
    *m = -1;
    switch (t) {
    case RF_Q4_1: *d = offsetof(rf_block_q4_1, d), *m = offsetof(rf_block_q4_1, m); break;
    case RF_Q5_1: *d = offsetof(rf_block_q5_1, d), *m = offsetof(rf_block_q5_1, m); break;
    case RF_Q2_K: *d = offsetof(rf_block_q2_k, d), *m = offsetof(rf_block_q2_k, dmin); break;
    case RF_Q3_K: *d = offsetof(rf_block_q3_k, d); break;
    case RF_Q4_K: *d = offsetof(rf_block_q4_k, d), *m = offsetof(rf_block_q4_k, dmin); break;
    case RF_Q5_K: *d = offsetof(rf_block_q5_k, d), *m = offsetof(rf_block_q5_k, dmin); break;
    case RF_Q6_K: *d = offsetof(rf_block_q6_k, d); break;
    default: *d = 0; break; /* Q5_0, IQ4_NL, IQ4_XS: d first */
    }
}

static void random_blocks(rf_rng *g, rf_dtype t, uint8_t *p, size_t nblocks) {
    const size_t bb = rf_dtype_block_bytes(t);
    int od, om;
    scale_fields(t, &od, &om);
    for (size_t b = 0; b < nblocks; b++, p += bb) {
        for (size_t i = 0; i < bb; i++) p[i] = (uint8_t)(rf_rng_next(g) >> 24);
        uint16_t d = rf_f32_to_f16((float)(rf_rng_uniform(g) * 0.02 - 0.01)), m = rf_f32_to_f16((float)(rf_rng_uniform(g) * 0.01));
        memcpy(p + od, &d, 2);
        if (om >= 0) memcpy(p + om, &m, 2);
    }
}

static void act_quant(const float *x, int k, int8_t *q, float *d) {
    for (int b = 0; b < k / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
        d[b] = amax / 127;
        float id = d[b] ? 1.0f / d[b] : 0.0f;
        for (int j = 0; j < 32; j++) {
            volatile float v = x[32 * b + j] * id;
            q[32 * b + j] = (int8_t)nearbyintf(v);
        }
    }
}

/* worst |y - ref| / bound over the outputs (> 1: a failure) */
static double check_matmul(const rf_mat *W, const float *X, int n) {
    const int k = W->cols, rows = W->rows;
    float *Y = malloc(sizeof(float) * (size_t)n * rows), *w = malloc(sizeof(float) * k), *dx = malloc(sizeof(float) * k / 32);
    int8_t *q = malloc((size_t)k);
    rf_matmul(Y, X, W, n);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        act_quant(X + (size_t)t * k, k, q, dx);
        for (int r = 0; r < rows; r++) {
            rf_mat_row_f32(w, W, r);
            double s = 0, mag = 0;
            for (int i = 0; i < k; i++) {
                double term = (double)w[i] * dx[i / 32] * q[i];
                s += term, mag += fabs(term);
            }
            double e = fabs(Y[(size_t)t * rows + r] - s) / (2e-5 * (1 + k / 1000.0) * mag + 1e-30);
            if (!(e <= worst)) worst = e;
        }
    }
    free(Y), free(w), free(dx), free(q);
    return worst;
}

static int n_packed; /* matrices checked with a panel copy */

static void test_tier(const char *tier) {
    rf_rng g;
    rf_rng_seed(&g, 7);
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const rf_dtype t = TYPES[ti];
        const int be = rf_dtype_block_elems(t);
        const int nbs[] = {1, 2, 3, be == 256 ? 12 : 96};
        for (int bi = 0; bi < 4; bi++) {
            const int cols = nbs[bi] * be, rows_list[] = {1, 3, 17, 40};
            for (int ri = 0; ri < 4; ri++) {
                const int rows = rows_list[ri];
                uint8_t *data = malloc(rf_dtype_row_bytes(t, cols) * rows);
                random_blocks(&g, t, data, (size_t)rows * nbs[bi]);
                rf_mat W = {t, data, rows, cols, NULL};
                /* the embedding lookup: the reference dequantiser's floats */
                float *a = malloc(sizeof(float) * cols), *b = malloc(sizeof(float) * cols);
                rf_mat_row_f32(a, &W, rows - 1);
                rf_dequantize_row(t, data + rf_dtype_row_bytes(t, cols) * (rows - 1), b, cols);
                CHECK(!memcmp(a, b, sizeof(float) * cols), "%s rf_mat_row_f32 %s cols=%d", tier, rf_dtype_name(t), cols);
                free(a), free(b);
                const int nmax = rows >= 17 && cols > 1024 ? 5 : 33; /* the long row: a few widths */
                float *X = malloc(sizeof(float) * (size_t)nmax * cols);
                for (size_t i = 0; i < (size_t)nmax * cols; i++) X[i] = (float)(rf_rng_uniform(&g) * 2 - 1);
                double worst = 0;
                int wn = 0;
                for (int n = 1; n <= nmax; n++) {
                    double e = check_matmul(&W, X, n);
                    if (!(e <= worst)) worst = e, wn = n;
                }
                CHECK(worst <= 1, "%s %s rows=%d cols=%d n=1..%d: error %.3g x the bound (at n=%d)", tier,
                      rf_dtype_name(t), rows, cols, nmax, worst, wn);
                /* the panel copy where the type has one: the same checks,
                 * and one call wider than the kernel's token block */
                const size_t pb = rf_mat_pack_bytes(&W);
                if (pb) {
                    void *pk = rf_aligned_alloc(pb);
                    rf_mat_pack(&W, pk);
                    worst = 0, wn = 0;
                    for (int n = 1; n <= nmax; n++) {
                        double e = check_matmul(&W, X, n);
                        if (!(e <= worst)) worst = e, wn = n;
                    }
                    CHECK(worst <= 1, "%s %s packed rows=%d cols=%d n=1..%d: error %.3g x the bound (at n=%d)",
                          tier, rf_dtype_name(t), rows, cols, nmax, worst, wn);
                    if (cols <= 1024) {
                        const int wide = 70;
                        float *Xw = malloc(sizeof(float) * (size_t)wide * cols);
                        for (size_t i = 0; i < (size_t)wide * cols; i++) Xw[i] = (float)(rf_rng_uniform(&g) * 2 - 1);
                        double e = check_matmul(&W, Xw, wide);
                        CHECK(e <= 1, "%s %s packed rows=%d cols=%d n=%d: error %.3g x the bound", tier,
                              rf_dtype_name(t), rows, cols, wide, e);
                        free(Xw);
                    }
                    n_packed++;
                    free(pk);
                    W.packed = NULL;
                }
                free(X), free(data);
            }
        }
    }
}

int main(void) {
    for (int t = RF_CPU_AVX2; t <= RF_CPU_AMX; t++) {
        const char *tier = rf_cpu_tier_str((rf_cpu_tier)t);
        if (rf_cpu_set_tier((rf_cpu_tier)t) != 0 || rf_cpu_tier_active() != (rf_cpu_tier)t) {
            printf("SKIPPED: %s (this CPU or build lacks it)\n", tier);
            continue;
        }
        n_packed = 0;
        test_tier(tier);
        printf("%s: checked (%d matrices also packed)\n", tier, n_packed);
    }
    rf_kernels_shutdown();
    return check_summary("kernels_kquant");
}
