/* kernels_quant.c - Q8_0 / Q4_0: the block formats and the matmuls over them.
 *
 *  1. formats/quant.c's quantise -> dequantise against an independent scalar
 *     implementation of ggml's reference formulas written here (its own
 *     f32 <-> f16 conversion by bit manipulation, not F16C), bit-exact on
 *     the block bytes and on the dequantised floats, over random rows and
 *     edge cases (zero blocks, ties, f16-subnormal and f16-overflowing
 *     scales, a negative extreme, and values on which an FMA-contracted
 *     x * id + 8.5 truncates differently: ggml's formula is unfused). rf_mat_row_f32 (the embedding lookup)
 *     must give the independent dequantisation exactly.
 *  2. rf_matmul / rf_matmul_rows at every CPU tier this machine has (tiers it
 *     lacks are printed as SKIPPED by name), on odd shapes (rows 1..257,
 *     block counts 1, 3, 5, 32), n = 1, 2, 3, 7, 16, 33, 64:
 *     a. tightly against a reference that quantises the activations as the
 *        kernels do (per 32-block: d = max|x| / 127 in f32, q = x / d rounded
 *        to nearest even) and sums the exact integer block dots times
 *        d_w * d_x in double: per output |y - ref| <= 1e-5 (1 + cols/1000) x
 *        the sum of the |terms| (|d_w d_x| |q_w q_x|) of that output (the
 *        kernels only round the scale products and the f32 sums; relative
 *        to max|y| it would fail on short rows that cancel);
 *     b. loosely against the f32 dot product of the dequantised weights
 *        (rf_matmul_naive): the activation rounding moves each term by at
 *        most |w_i| d_x / 2, so |y - ref| must stay within the bound
 *        sum_blocks (d_x / 2) sum_i |w_i| (+ 1e-5 max|ref| for f32 sums),
 *        checked per output element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/quant.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "util/util.h"

/* ---- an independent ggml reference ------------------------------------------ */

/* f32 -> IEEE half, round to nearest even (finite inputs) */
static uint16_t my_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* >= 65520: rounds to inf */
    if (ax < 0x38800000) {                                   /* < 2^-14: subnormal half */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyint((double)a * 16777216.0)); /* units of 2^-24 */
    }
    uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffff) >> 13)), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static float my_f16_to_f32(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (float)(h >> 15 ? -v : v);
}

/* ggml quantize_row_q8_0_ref: 34-byte blocks {f16 d, int8 qs[32]} */
static void my_q8_0(const float *x, uint8_t *out, int k) {
    for (int b = 0; b < k / 32; b++, x += 32, out += 34) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        uint16_t dh = my_f16(d);
        out[0] = dh & 0xff, out[1] = dh >> 8; /* little-endian, as ggml writes it */
        for (int j = 0; j < 32; j++) {
            volatile float v = x[j] * id; /* volatile: rounded to f32 before roundf, never fused */
            out[2 + j] = (uint8_t)(int8_t)roundf(v);
        }
    }
}

/* ggml quantize_row_q4_0_ref: 18-byte blocks {f16 d, uint8 qs[16]} */
static void my_q4_0(const float *x, uint8_t *out, int k) {
    for (int b = 0; b < k / 32; b++, x += 32, out += 18) {
        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -8, id = d ? 1.0f / d : 0.0f;
        uint16_t dh = my_f16(d);
        out[0] = dh & 0xff, out[1] = dh >> 8;
        for (int j = 0; j < 16; j++) {
            volatile float x0 = x[j] * id, x1 = x[j + 16] * id;
            int8_t i0 = (int8_t)(x0 + 8.5f), i1 = (int8_t)(x1 + 8.5f);
            uint8_t q0 = i0 < 15 ? (uint8_t)i0 : 15, q1 = i1 < 15 ? (uint8_t)i1 : 15;
            out[2 + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ggml dequantize_row_*: the weights of one row */
static void my_dequant(rf_dtype dt, const uint8_t *in, float *y, int k) {
    for (int b = 0; b < k / 32; b++) {
        const uint8_t *blk = in + (size_t)b * (dt == RF_Q8_0 ? 34 : 18);
        float d = my_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        for (int j = 0; j < 32; j++) {
            int q = dt == RF_Q8_0 ? (int8_t)blk[2 + j]
                                  : (j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8;
            y[32 * b + j] = q * d;
        }
    }
}

/* ---- 1. formats --------------------------------------------------------------- */

static void fill_row(rf_rng *g, float *x, int k, int kind) {
    for (int i = 0; i < k; i++) x[i] = rf_rng_normal(g);
    int b = kind % 8;
    float *blk = x + 32 * (b % (k / 32));
    switch (b) {
    case 1: memset(blk, 0, 32 * sizeof(float)); break;                   /* all zero: d = 0 */
    case 2: for (int j = 0; j < 32; j++) blk[j] *= 1e-7f; break;         /* d is an f16 subnormal */
    case 3: for (int j = 0; j < 32; j++) blk[j] *= 1e7f; break;          /* d overflows f16 (inf) */
    case 4: for (int j = 0; j < 32; j++) blk[j] = (float)(j - 16); break; /* exact ties: x / d = k + .5 */
    case 5: blk[7] = -50; break;                                          /* negative extreme (Q4_0 max) */
    case 6: for (int j = 0; j < 32; j++) blk[j] = (float)(j % 3) * 0.25f; break;
    case 7: { /* Q4_0 values whose product x * id rounds (in f32) onto t = k - 8.5
               * from below: unfused, x * id + 8.5 is exactly k; an FMA keeps the
               * deficit and truncates to k - 1 (ggml's formula is unfused) */
        blk[0] = -8.8f - 0.37f * (kind / 8); /* the extreme: d = -extreme / 8, id inexact */
        const float d = blk[0] / -8, id = 1.0f / d;
        int j = 1;
        for (int k = 1; k <= 8 && j < 32; k++) {
            const float t = (float)k - 8.5f;
            float x = t / id;
            for (int u = 0; u < 40; u++) x = nextafterf(x, -INFINITY);
            for (int u = 0; u < 80 && j < 32; u++, x = nextafterf(x, INFINITY)) {
                volatile float p = x * id;
                if (p == t && (double)x * id < t) blk[j++] = x;
            }
        }
        break;
    }
    default: break;
    }
}

static void test_formats(void) {
    rf_rng g;
    rf_rng_seed(&g, 99);
    const int ks[] = {32, 96, 256, 1024};
    int n_rows = 0, bad_bytes[2] = {0, 0}, bad_deq[2] = {0, 0}, bad_row[2] = {0, 0};
    for (int kind = 0; kind < 64; kind++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            int k = ks[ki];
            float *x = malloc(sizeof(float) * k), *y0 = malloc(sizeof(float) * k), *y1 = malloc(sizeof(float) * k);
            uint8_t *a = malloc((size_t)k * 2), *b = malloc((size_t)k * 2);
            fill_row(&g, x, k, kind);
            for (int q = 0; q < 2; q++) {
                rf_dtype dt = q ? RF_Q4_0 : RF_Q8_0;
                size_t rb = rf_dtype_row_bytes(dt, k);
                if (q) rf_quantize_row_q4_0(x, a, k), my_q4_0(x, b, k);
                else rf_quantize_row_q8_0(x, a, k), my_q8_0(x, b, k);
                if (memcmp(a, b, rb)) bad_bytes[q]++;
                if (q) rf_dequantize_row_q4_0(b, y0, k);
                else rf_dequantize_row_q8_0(b, y0, k);
                my_dequant(dt, b, y1, k);
                if (memcmp(y0, y1, sizeof(float) * k)) bad_deq[q]++;
                rf_mat W = {dt, b, 1, k, NULL};
                rf_mat_row_f32(y0, &W, 0);
                if (memcmp(y0, y1, sizeof(float) * k)) bad_row[q]++;
            }
            n_rows++;
            free(x), free(y0), free(y1), free(a), free(b);
        }
    for (int q = 0; q < 2; q++) {
        const char *nm = q ? "Q4_0" : "Q8_0";
        CHECK(bad_bytes[q] == 0, "%s quantise: %d of %d rows differ from the independent ggml reference", nm,
              bad_bytes[q], n_rows);
        CHECK(bad_deq[q] == 0, "%s dequantise: %d of %d rows differ", nm, bad_deq[q], n_rows);
        CHECK(bad_row[q] == 0, "%s rf_mat_row_f32: %d of %d rows differ", nm, bad_row[q], n_rows);
    }
    /* the references themselves, on hand-checked blocks */
    {
        float x[32];
        uint8_t o[34];
        for (int j = 0; j < 32; j++) x[j] = j == 5 ? -127.0f : (float)j;
        my_q8_0(x, o, 32); /* d = 127 / 127 = 1 exactly: q = x */
        CHECK(o[0] == 0x00 && o[1] == 0x3c && (int8_t)o[2 + 5] == -127 && (int8_t)o[2 + 31] == 31 &&
                  (int8_t)o[2 + 1] == 1,
              "Q8_0 hand block: d %02x%02x q5 %d q31 %d", o[1], o[0], (int8_t)o[7], (int8_t)o[33]);
        my_q4_0(x, o, 32); /* max = -127, d = 15.875: x5 -> -8 + 8.5 -> 0, x0 -> 8, x31 = 1.95 + 8.5 -> 10 */
        CHECK((o[2 + 5] & 15) == 0 && (o[2] & 15) == 8 && (o[2 + 15] >> 4) == 10, "Q4_0 hand block: nibbles %d %d %d",
              o[7] & 15, o[2] & 15, o[17] >> 4);
        CHECK(my_f16(1.0f) == 0x3c00 && my_f16(65504.0f) == 0x7bff && my_f16(65520.0f) == 0x7c00 &&
                  my_f16(5.9604645e-8f) == 0x0001 && my_f16(-2.0f) == 0xc000 && my_f16_to_f32(0x3555) == 0.333251953125f,
              "independent f16 conversion");
    }
}

/* ---- 2. matmuls ----------------------------------------------------------------- */

/* per-32-block activation quantisation as the kernels do it (see kernels.h) */
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

/* Y[t, r] = sum_b d_w d_x sum_j qw qx (exact integer dots, double scale sums),
 * and bound[t, r] = sum_b (d_x / 2) sum_j |w_j| (the activation rounding) */
static void ref_quant_acts(const rf_mat *W, const float *X, int n, double *Y, double *bound, double *mag) {
    int k = W->cols, nb = k / 32;
    size_t rb = rf_dtype_row_bytes(W->dtype, k);
    int8_t *q = malloc((size_t)k);
    float *d = malloc(sizeof(float) * nb), *w = malloc(sizeof(float) * k);
    for (int t = 0; t < n; t++) {
        act_quant(X + (size_t)t * k, k, q, d);
        for (int r = 0; r < W->rows; r++) {
            const uint8_t *row = (const uint8_t *)W->data + (size_t)r * rb;
            my_dequant(W->dtype, row, w, k);
            double s = 0, bd = 0, a = 0;
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = row + (size_t)b * (W->dtype == RF_Q8_0 ? 34 : 18);
                double dw = my_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
                long long dot = 0, adot = 0;
                double wabs = 0;
                for (int j = 0; j < 32; j++) {
                    int qw = W->dtype == RF_Q8_0 ? (int8_t)blk[2 + j]
                                                 : (j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4)) - 8;
                    dot += (long long)qw * q[32 * b + j];
                    adot += llabs((long long)qw * q[32 * b + j]);
                    wabs += fabs(w[32 * b + j]);
                }
                s += dw * d[b] * (double)dot;
                bd += d[b] / 2.0 * wabs;
                a += fabs(dw * d[b]) * (double)adot;
            }
            Y[(size_t)t * W->rows + r] = s;
            bound[(size_t)t * W->rows + r] = bd;
            mag[(size_t)t * W->rows + r] = a;
        }
    }
    free(q), free(d), free(w);
}

static double test_matmuls(const char *tier) {
    rf_rng g;
    rf_rng_seed(&g, 4321);
    const int rows_l[] = {1, 3, 7, 33, 257};
    const int cols_l[] = {32, 96, 160, 1024};
    /* every kernel path: 1-4 / 1-6 token tiles, blocks outside (to 128), panel groups beyond */
    const int n_l[] = {1, 2, 3, 5, 7, 9, 16, 17, 24, 33, 64, 65, 100, 129};
    double worst = 0;
    for (int q = 0; q < 2; q++) {
        rf_dtype dt = q ? RF_Q4_0 : RF_Q8_0;
        for (size_t ri = 0; ri < sizeof rows_l / sizeof *rows_l; ri++)
            for (size_t ci = 0; ci < sizeof cols_l / sizeof *cols_l; ci++) {
                int rows = rows_l[ri], cols = cols_l[ci];
                size_t rb = rf_dtype_row_bytes(dt, cols);
                uint8_t *wd = malloc(rb * rows);
                float *tmp = malloc(sizeof(float) * cols);
                for (int r = 0; r < rows; r++) {
                    for (int c = 0; c < cols; c++) tmp[c] = rf_rng_normal(&g) * (1 + r % 5);
                    if (q) my_q4_0(tmp, wd + r * rb, cols);
                    else my_q8_0(tmp, wd + r * rb, cols);
                }
                rf_mat W = {dt, wd, rows, cols, NULL};
                /* at every tier: every check again with W packed (rf_mat_pack) */
                size_t pbytes = rf_mat_pack_bytes(&W);
                void *pk = pbytes ? aligned_alloc(64, (pbytes + 63) / 64 * 64) : NULL;
                if (pk) rf_mat_pack(&W, pk), W.packed = NULL;
                for (int pass = 0; pass < (pk ? 2 : 1); pass++)
                for (size_t ni = 0; ni < sizeof n_l / sizeof *n_l; ni++) {
                    W.packed = pass ? pk : NULL;
                    const char *lay = pass ? " packed" : "";
                    int n = n_l[ni];
                    if ((double)rows * cols * n > 3e6) continue; /* the references are slow */
                    float *X = malloc(sizeof(float) * n * cols), *Y = malloc(sizeof(float) * n * rows),
                          *F = malloc(sizeof(float) * n * rows);
                    double *R = malloc(sizeof(double) * n * rows), *B = malloc(sizeof(double) * n * rows),
                           *A = malloc(sizeof(double) * n * rows);
                    for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(&g);
                    if (n > 2) memset(X + cols, 0, sizeof(float) * 32); /* a zero block: d_x = 0 */
                    rf_matmul(Y, X, &W, n);
                    ref_quant_acts(&W, X, n, R, B, A);
                    rf_matmul_naive(F, X, &W, n);
                    /* e: max over outputs of |y - ref| / (sum of the |terms| of that output) */
                    double e = 0, over = 0, mf = 1e-30;
                    for (size_t i = 0; i < (size_t)n * rows; i++) {
                        e = fmax(e, fabs(Y[i] - R[i]) / (A[i] + 1e-30));
                        mf = fmax(mf, fabs(F[i]));
                        if (Y[i] != Y[i]) e = INFINITY;
                    }
                    for (size_t i = 0; i < (size_t)n * rows; i++) {
                        double slack = fabs(Y[i] - F[i]) - (B[i] + 1e-5 * mf);
                        if (slack > over || Y[i] != Y[i]) over = Y[i] != Y[i] ? INFINITY : slack;
                    }
                    double tol = 1e-5 * (1 + cols / 1000.0);
                    worst = fmax(worst, e);
                    CHECK(e <= tol, "%s rf_matmul %s%s rows=%d cols=%d n=%d: rel err %.3g vs quantised-activation ref (of sum |terms|)",
                          tier, rf_dtype_name(dt), lay, rows, cols, n, e);
                    CHECK(over <= 0, "%s rf_matmul %s%s rows=%d cols=%d n=%d: exceeds the activation-rounding bound "
                          "against the f32 dot product by %.3g",
                          tier, rf_dtype_name(dt), lay, rows, cols, n, over);
                    int r0 = rows / 3, r1 = rows - rows / 4;
                    if (pass && rows > 40) r0 = 16; /* a panel boundary: the packed kernel runs the view */
                    if (r1 > r0) {
                        int nr = r1 - r0, bad = 0;
                        float *Ys = malloc(sizeof(float) * n * nr);
                        rf_matmul_rows(Ys, X, &W, n, r0, r1);
                        for (int t = 0; t < n; t++)
                            for (int r = 0; r < nr; r++)
                                if (!(fabs(Ys[(size_t)t * nr + r] - R[(size_t)t * rows + r0 + r]) <=
                                      tol * A[(size_t)t * rows + r0 + r]))
                                    bad++;
                        CHECK(!bad, "%s rf_matmul_rows %s%s rows=%d cols=%d n=%d [%d,%d): %d wrong", tier,
                              rf_dtype_name(dt), lay, rows, cols, n, r0, r1, bad);
                        free(Ys);
                    }
                    free(X), free(Y), free(F), free(R), free(B), free(A);
                }
                free(wd), free(tmp), free(pk);
            }
    }
    return worst;
}

/* Every call width 1..33 on weights whose rows span several panel groups
 * of the wide-call loop (panel groups outside, token tiles inside) with a
 * ragged last panel, packed and row-major: each token tile must meet every
 * panel exactly once (a tile skipped, repeated or shifted breaks the
 * check a. above at some width). */
static void test_token_sweep(const char *tier) {
    rf_rng g;
    rf_rng_seed(&g, 8765);
    const int shp[][2] = {{113, 96}, {37, 160}};
    for (int q = 0; q < 2; q++)
        for (size_t k = 0; k < sizeof shp / sizeof *shp; k++) {
            rf_dtype dt = q ? RF_Q4_0 : RF_Q8_0;
            int rows = shp[k][0], cols = shp[k][1];
            size_t rb = rf_dtype_row_bytes(dt, cols);
            uint8_t *wd = malloc(rb * rows);
            float *tmp = malloc(sizeof(float) * cols);
            for (int r = 0; r < rows; r++) {
                for (int c = 0; c < cols; c++) tmp[c] = rf_rng_normal(&g) * (1 + r % 3);
                if (q) my_q4_0(tmp, wd + r * rb, cols);
                else my_q8_0(tmp, wd + r * rb, cols);
            }
            rf_mat W = {dt, wd, rows, cols, NULL};
            void *pk = aligned_alloc(64, (rf_mat_pack_bytes(&W) + 63) / 64 * 64);
            rf_mat_pack(&W, pk);
            for (int pass = 0; pass < 2; pass++) {
                W.packed = pass ? pk : NULL;
                int bad = 0;
                double worst = 0, tol = 1e-5 * (1 + cols / 1000.0);
                for (int n = 1; n <= 33; n++) {
                    float *X = malloc(sizeof(float) * n * cols), *Y = malloc(sizeof(float) * n * rows);
                    double *R = malloc(sizeof(double) * n * rows), *B = malloc(sizeof(double) * n * rows),
                           *A = malloc(sizeof(double) * n * rows);
                    for (int i = 0; i < n * cols; i++) X[i] = rf_rng_normal(&g);
                    rf_matmul(Y, X, &W, n);
                    ref_quant_acts(&W, X, n, R, B, A);
                    double e = 0;
                    for (size_t i = 0; i < (size_t)n * rows; i++)
                        e = Y[i] != Y[i] ? INFINITY : fmax(e, fabs(Y[i] - R[i]) / (A[i] + 1e-30));
                    worst = fmax(worst, e);
                    bad += !(e <= tol);
                    free(X), free(Y), free(R), free(B), free(A);
                }
                CHECK(!bad, "%s rf_matmul %s%s rows=%d cols=%d n=1..33: %d widths beyond rel err %.3g (worst %.3g)", tier,
                      rf_dtype_name(dt), pass ? " packed" : "", rows, cols, bad, tol, worst);
            }
            free(wd), free(tmp), free(pk);
        }
}

int main(void) {
    test_formats();
    for (int t = RF_CPU_AVX2; t <= RF_CPU_AMX; t++) {
        const char *tier = rf_cpu_tier_str((rf_cpu_tier)t);
        if (rf_cpu_set_tier((rf_cpu_tier)t) != 0) {
            printf("SKIPPED: %s (%s)\n", tier, t == RF_CPU_AMX ? "skipped: no AMX on this CPU, or the OS does not grant it" : "cpu lacks it");
            continue;
        }
        if (rf_cpu_tier_active() != (rf_cpu_tier)t) {
            printf("SKIPPED: %s (this build has no AMX kernels; it runs the %s ones)\n", tier, rf_cpu_tier_name());
            continue;
        }
        printf("%s: worst relative error vs the quantised-activation reference %.3g\n", tier, test_matmuls(tier));
        test_token_sweep(tier);
        if (t == RF_CPU_AMX) { /* again with every packed call on the int8 tiles, and with none */
            rf_matmul_set_amx_int8(1);
            printf("amx int8 tiles: worst relative error %.3g\n", test_matmuls("amx int8 tiles"));
            test_token_sweep("amx int8 tiles");
            rf_matmul_set_amx_int8(0);
            printf("amx vpdpbusd: worst relative error %.3g\n", test_matmuls("amx vpdpbusd"));
            test_token_sweep("amx vpdpbusd");
            rf_matmul_set_amx_int8(-1);
        }
    }
    rf_kernels_shutdown(); /* nothing left for LeakSanitizer */
    return check_summary("kernels_quant");
}
