/* matmul_q.c - Y = X . W^T for Q8_0 / Q4_0 weights (ggml's block layouts, see
 * formats/blocks.h) at the avx2 tier: the activations are quantised per 32-block
 * to int8 once per call (rf_q_prep_avx2), and each block pair is an integer
 * dot product with AVX2 maddubs (u8 x s8 -> s16 pairs, no overflow: at most
 * 2 * 127 * 127 or 2 * 15 * 127), summed to s32 by madd, converted once per
 * block and scaled by d_w * d_x into f32 accumulators.
 *  - Q8_0: maddubs needs one unsigned operand: |w| and sign(x, w) (ggml's
 *    trick); |w| is computed once per weight block for all tokens.
 *  - Q4_0: the nibbles u = w + 8 are unsigned already, so maddubs(u, x)
 *    directly, and the offset is folded in as -8 * sum(x) (stored with the
 *    activations) before the conversion: exact integer arithmetic.
 * Register tiles: R weight rows x T tokens, each weight block unpacked once
 * per tile and used for all T tokens (n = 1: 4 rows in flight). */
#include <immintrin.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"
#include "kernels/simd.h"
#include "kernels/team.h"
#include "util/util.h"

size_t rf_q_prep_avx2_bytes(int n, int cols) { return (size_t)n * (cols / RF_QK) * sizeof(rf_xq_avx2); }

void rf_q_prep_avx2(void *xp, const float *X, int n, int cols, rf_dtype wdt, int part, int parts) {
    const int nb = cols / RF_QK;
    int t0, t1;
    rf_share(n, part, parts, &t0, &t1);
    rf_xq_avx2 *o = (rf_xq_avx2 *)xp + (size_t)t0 * nb;
    for (int t = t0; t < t1; t++)
        for (int b = 0; b < nb; b++, o++) {
            __m256i q[4], p;
            o->d = rf_quant32_i8(X + (size_t)t * cols + b * RF_QK, q, &p);
            _mm256_storeu_si256((__m256i *)o->q, p);
            int32_t s0, s1;
            rf_quant32_half_sums(q, &s0, &s1);
            if (wdt == RF_Q4_1 || wdt == RF_Q5_1)
                o->dsum = o->d * (float)(s0 + s1);
            else
                o->nsum8 = wdt == RF_Q4_K || wdt == RF_Q5_K ? s0 + s1
                       : wdt == RF_Q6_K || wdt == RF_Q3_K || wdt == RF_Q2_K
                           ? (int32_t)((uint32_t)(uint16_t)s0 | (uint32_t)s1 << 16)
                       : wdt == RF_Q5_0 ? -16 * (s0 + s1)
                                        : -8 * (s0 + s1);
        }
}

static inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
    __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d), abcd = _mm256_hadd_ps(ab, cd);
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

/* y[t * ldy + r] = sum_b dot(W row r block b, x token t block b), r < R, t < T */
static inline __attribute__((always_inline)) void qkern(rf_dtype dt, const int R, const int T, const char *w,
                                                        size_t wstride, const rf_xq_avx2 *x, size_t xstride,
                                                        int nb, float *y, size_t ldy) {
    __m256 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F);
    for (int b = 0; b < nb; b++) {
        __m256i wu[4], ws[4];
        __m256 dw[4];
        for (int r = 0; r < R; r++) {
            if (dt == RF_Q8_0) {
                const rf_block_q8_0 *blk = (const rf_block_q8_0 *)(w + r * wstride) + b;
                ws[r] = _mm256_loadu_si256((const __m256i *)blk->qs);
                wu[r] = _mm256_abs_epi8(ws[r]);
                dw[r] = _mm256_set1_ps(rf_f16_to_f32(blk->d));
            } else {
                const rf_block_q4_0 *blk = (const rf_block_q4_0 *)(w + r * wstride) + b;
                __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
                /* low nibbles are weights 0..15, high nibbles 16..31 */
                wu[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
                dw[r] = _mm256_set1_ps(rf_f16_to_f32(blk->d));
            }
        }
        for (int t = 0; t < T; t++) {
            const rf_xq_avx2 *xb = x + t * xstride + b;
            __m256i xv = _mm256_loadu_si256((const __m256i *)xb->q);
            __m256 dx = _mm256_broadcast_ss(&xb->d);
            for (int r = 0; r < R; r++) {
                __m256i s;
                if (dt == RF_Q8_0) {
                    s = _mm256_madd_epi16(_mm256_maddubs_epi16(wu[r], _mm256_sign_epi8(xv, ws[r])), ones);
                } else {
                    s = _mm256_madd_epi16(_mm256_maddubs_epi16(wu[r], xv), ones);
                    s = _mm256_add_epi32(s, _mm256_zextsi128_si256(_mm_cvtsi32_si128(xb->nsum8)));
                }
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw[r], dx), acc[r][t]);
            }
        }
    }
    float s[16];
    __m256 z = _mm256_setzero_ps(), v[16];
    for (int i = 0; i < 16; i++) v[i] = z;
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) v[t * R + r] = acc[r][t];
    for (int i = 0; i < R * T; i += 4) _mm_storeu_ps(s + i, hsum4(v[i], v[i + 1], v[i + 2], v[i + 3]));
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) y[t * ldy + r] = s[t * R + r];
}

/* R in 1..4 with T in 1..2 (n <= 2), or R in 1..2 with T in 1..4 */
#define QK_T(DT, R)                                                        \
    switch (T) {                                                           \
    case 1: qkern(DT, R, 1, w, ws, x, xs, nb, y, ldy); break;              \
    case 2: qkern(DT, R, 2, w, ws, x, xs, nb, y, ldy); break;              \
    case 3: qkern(DT, R, (R > 2 ? 2 : 3), w, ws, x, xs, nb, y, ldy); break; \
    default: qkern(DT, R, (R > 2 ? 2 : 4), w, ws, x, xs, nb, y, ldy); break; \
    }
#define QK_RT(DT)                        \
    switch (R) {                         \
    case 1: QK_T(DT, 1); break;          \
    case 2: QK_T(DT, 2); break;          \
    case 3: QK_T(DT, 3); break;          \
    default: QK_T(DT, 4); break;         \
    }
static void qtile(rf_dtype dt, int R, int T, const char *w, size_t ws, const rf_xq_avx2 *x, size_t xs, int nb,
                  float *y, size_t ldy) {
    if (dt == RF_Q8_0) {
        QK_RT(RF_Q8_0);
    } else {
        QK_RT(RF_Q4_0);
    }
}

void rf_q_range_avx2(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK;
    const size_t ws = rf_dtype_row_bytes(W->dtype, W->cols);
    const rf_xq_avx2 *X = xp;
    const char *w0 = W->data;
    if (n <= 2) { /* memory-bound: 4 rows in flight, W streamed once */
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4;
            qtile(W->dtype, R, n, w0 + r * ws, ws, X, nb, nb, Y + r, ldy);
        }
        return;
    }
    const int tbmax = rf_token_block((size_t)nb * sizeof(rf_xq_avx2));
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        int ntt = (tb + 3) / 4; /* near-equal token tiles of 3-4 */
        for (int r = a; r < b; r += 2) {
            int R = b - r < 2 ? b - r : 2;
            for (int i = 0, t = t0; i < ntt; i++) {
                int T = tb / ntt + (i < tb % ntt);
                qtile(W->dtype, R, T, w0 + r * ws, ws, X + (size_t)t * nb, nb, nb, Y + (size_t)t * ldy + r, ldy);
                t += T;
            }
        }
    }
}
