/* matmul_avx512.c - the avx512 tier's matmuls (compiled with AVX-512
 * F/BW/VL/DQ + BF16 + VNNI flags, see CMakeLists.txt; called only when
 * kernels/cpu.c found them): bf16 weights with vdpbf16ps, Q8_0 / Q4_0
 * weights with vpdpbusd. Register tiles of R weight rows x T tokens (4 x 4:
 * 16 zmm accumulators), each weight vector loaded once per tile.
 *
 * bf16: the activations are split once per call into x = hi + lo, both
 * bf16 (hi = x rounded to bf16, lo = the rest rounded again: |x - hi - lo|
 * <= 2^-18 |x|), and each weight vector meets both in two vdpbf16ps. bf16 x
 * bf16 products are exact in f32, so the result is as accurate as an f32
 * dot product (the golden tests' tolerances hold); rounding x to bf16 alone
 * (as ggml does) would halve the compute but cost ~3 significant digits.
 *
 * Q8_0 / Q4_0: vpdpbusd multiplies unsigned by signed bytes. Q8_0: the
 * activations are stored as x + 128 (unsigned) and the accumulator starts at
 * -128 * sum(w) (one vpdpbusd per weight vector, shared by all tokens). Q4_0:
 * the nibbles u = w + 8 are the unsigned operand, and the accumulator starts
 * at -8 * sum(x) (stored with the activations). Both are exact integer dot
 * products per 32-block; a zmm holds two blocks (lanes 0-7 and 8-15), scaled
 * by d_w * d_x in f32. */
#include <immintrin.h>
#include <string.h>

#include "io/quant.h"
#include "kernels/matmul_impl.h"
#include "util/util.h"

/* ---- bf16 ------------------------------------------------------------------ */

/* per token: ceil(cols / 32) chunks of {hi[32], lo[32]} bf16, zero-padded */
static inline int bf16_chunks(int cols) { return (cols + 31) / 32; }

size_t rf_bf16_prep_avx512_bytes(int n, int cols) { return (size_t)n * bf16_chunks(cols) * 128; }

void rf_bf16_prep_avx512(void *xp, const float *X, int n, int cols) {
    const int nc = bf16_chunks(cols);
    uint16_t *o = xp;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < nc; c++, o += 64) {
            const float *x = X + (size_t)t * cols + c * 32;
            int m = cols - c * 32;
            __mmask16 k0 = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
            __mmask16 k1 = m >= 32 ? 0xFFFF : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1);
            __m512 a = _mm512_maskz_loadu_ps(k0, x), b = _mm512_maskz_loadu_ps(k1, x + 16);
            __m512bh hi = _mm512_cvtne2ps_pbh(b, a); /* a -> elements 0..15, b -> 16..31 */
            /* hi back to f32: bf16 is the top half of an f32 */
            __m512i h = (__m512i)hi;
            __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
            __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
            __m512bh lo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
            _mm512_storeu_si512(o, h);
            _mm512_storeu_si512(o + 32, (__m512i)lo);
        }
}

static inline __attribute__((always_inline)) void bkern(const int R, const int T, const uint16_t *w, size_t ldw,
                                                        int cols, const uint16_t *x, size_t ldx, float *y,
                                                        size_t ldy) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int nc = bf16_chunks(cols);
    for (int c = 0; c < nc; c++) {
        int m = cols - c * 32;
        __mmask32 k = m >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << m) - 1); /* the last chunk's tail */
        __m512bh wv[4];
        for (int r = 0; r < R; r++) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(k, w + r * ldw + c * 32);
        for (int t = 0; t < T; t++) {
            const uint16_t *xc = x + t * ldx + (size_t)c * 64;
            __m512bh xh = (__m512bh)_mm512_loadu_si512(xc), xl = (__m512bh)_mm512_loadu_si512(xc + 32);
            for (int r = 0; r < R; r++) {
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xh);
                acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xl);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#define BK_T(R)                                                          \
    switch (T) {                                                         \
    case 1: bkern(R, 1, w, ldw, cols, x, ldx, y, ldy); break;            \
    case 2: bkern(R, 2, w, ldw, cols, x, ldx, y, ldy); break;            \
    case 3: bkern(R, 3, w, ldw, cols, x, ldx, y, ldy); break;            \
    default: bkern(R, 4, w, ldw, cols, x, ldx, y, ldy); break;           \
    }
static void btile(int R, int T, const uint16_t *w, size_t ldw, int cols, const uint16_t *x, size_t ldx, float *y,
                  size_t ldy) {
    switch (R) {
    case 1: BK_T(1); break;
    case 2: BK_T(2); break;
    case 3: BK_T(3); break;
    default: BK_T(4); break;
    }
}

/* Row tiles of 4, token tiles of near-equal size 1..4; tokens in blocks that
 * keep their activations in L2 while a thread's rows stream past. */
void rf_bf16_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int cols = W->cols;
    const size_t ldx = (size_t)bf16_chunks(cols) * 64;
    const uint16_t *X = xp, *w0 = W->data;
    const int tbmax = rf_token_block(ldx * 2);
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        int ntt = (tb + 3) / 4;
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4;
            for (int i = 0, t = t0; i < ntt; i++) {
                int T = tb / ntt + (i < tb % ntt);
                btile(R, T, w0 + (size_t)r * cols, cols, cols, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy + r,
                      ldy);
                t += T;
            }
        }
    }
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------- */

/* one pair of 32-blocks of one token, 192 bytes */
typedef struct {
    int8_t q[64];    /* Q8_0: x + 128 as unsigned bytes; Q4_0: x (signed) */
    float dx[16];    /* lanes 0-7: the first block's scale, 8-15: the second's */
    int32_t init[16]; /* Q4_0: -8 * sum(x) in lanes 0 and 8, else 0 */
} xq_pair;

static inline int n_pairs(int cols) { return (cols / RF_QK + 1) / 2; }

size_t rf_q_prep_avx512_bytes(int n, int cols) { return (size_t)n * n_pairs(cols) * sizeof(xq_pair); }

void rf_q_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype wdt) {
    const int nb = cols / RF_QK, np = n_pairs(cols);
    xq_pair *o = xp;
    for (int t = 0; t < n; t++)
        for (int p = 0; p < np; p++, o++) {
            memset(o, 0, sizeof *o);
            for (int h = 0; h < 2; h++) {
                int blk = 2 * p + h;
                if (blk >= nb) { /* odd block count: a zero half (the weights there are zero too) */
                    if (wdt == RF_Q8_0) memset(o->q + 32, 0x80, 32);
                    break;
                }
                const float *x = X + (size_t)t * cols + blk * RF_QK;
                __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
                float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
                const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                __m512i qa = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(id)),
                                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m512i qb = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(b, _mm512_set1_ps(id)),
                                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m128i ba = _mm512_cvtepi32_epi8(qa), bb = _mm512_cvtepi32_epi8(qb);
                int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
                __m256i q = _mm256_set_m128i(bb, ba);
                if (wdt == RF_Q8_0) q = _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
                _mm256_storeu_si256((__m256i *)(o->q + 32 * h), q);
                for (int i = 0; i < 8; i++) o->dx[8 * h + i] = d;
                if (wdt == RF_Q4_0) o->init[8 * h] = -8 * sum;
            }
        }
}

/* two weight blocks (2p, 2p + 1) of one row as bytes [block 2p | block 2p + 1]
 * (signed weights for Q8_0, unsigned nibbles for Q4_0) and their scales; the
 * second is zero when it does not exist (odd block count). */
static inline __attribute__((always_inline)) void load_wpair(rf_dtype dt, const char *row, int p, int nb,
                                                             __m512i *wq, __m512 *dw) {
    int two = 2 * p + 1 < nb;
    if (dt == RF_Q8_0) {
        const rf_block_q8_0 *blk = (const rf_block_q8_0 *)row + 2 * p;
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
        *wq = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        *dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(rf_f16_to_f32(blk[0].d))),
                                 _mm256_set1_ps(two ? rf_f16_to_f32(blk[1].d) : 0.0f), 1);
    } else {
        const rf_block_q4_0 *blk = (const rf_block_q4_0 *)row + 2 * p;
        __m128i q0 = _mm_loadu_si128((const __m128i *)blk[0].qs);
        __m128i q1 = two ? _mm_loadu_si128((const __m128i *)blk[1].qs) : _mm_setzero_si128();
        __m256i q = _mm256_set_m128i(q1, q0), m = _mm256_set1_epi8(0x0F);
        __m256i lo = _mm256_and_si256(q, m), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
        /* [lo0 lo1 hi0 hi1] -> [lo0 hi0 lo1 hi1] (128-bit lanes): weight order */
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        *wq = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
        *dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(rf_f16_to_f32(blk[0].d))),
                                 _mm256_set1_ps(two ? rf_f16_to_f32(blk[1].d) : 0.0f), 1);
    }
}

static inline __attribute__((always_inline)) void qkern(rf_dtype dt, const int R, const int T, const char *w,
                                                        size_t wstride, int nb, const xq_pair *x, size_t xstride,
                                                        float *y, size_t ldy) {
    __m512 acc[4][4];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int np = (nb + 1) / 2;
    const __m512i u128 = _mm512_set1_epi8((char)0x80);
    for (int p = 0; p < np; p++) {
        __m512i wq[4], wi[4];
        __m512 dw[4];
        for (int r = 0; r < R; r++) {
            load_wpair(dt, w + r * wstride, p, nb, &wq[r], &dw[r]);
            /* Q8_0: start at -128 * sum(w) so that (x + 128) . w = x . w */
            if (dt == RF_Q8_0)
                wi[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), u128, wq[r]));
        }
        for (int t = 0; t < T; t++) {
            const xq_pair *xb = x + t * xstride + p;
            __m512i xv = _mm512_loadu_si512(xb->q);
            __m512 dx = _mm512_loadu_ps(xb->dx);
            for (int r = 0; r < R; r++) {
                __m512i s = dt == RF_Q8_0 ? _mm512_dpbusd_epi32(wi[r], xv, wq[r])
                                          : _mm512_dpbusd_epi32(_mm512_loadu_si512(xb->init), wq[r], xv);
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dx), dw[r], acc[r][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int r = 0; r < R; r++) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#define QK_T(DT, R)                                                      \
    switch (T) {                                                         \
    case 1: qkern(DT, R, 1, w, ws, nb, x, xs, y, ldy); break;            \
    case 2: qkern(DT, R, 2, w, ws, nb, x, xs, y, ldy); break;            \
    case 3: qkern(DT, R, 3, w, ws, nb, x, xs, y, ldy); break;            \
    default: qkern(DT, R, 4, w, ws, nb, x, xs, y, ldy); break;           \
    }
#define QK_RT(DT)               \
    switch (R) {                \
    case 1: QK_T(DT, 1); break; \
    case 2: QK_T(DT, 2); break; \
    case 3: QK_T(DT, 3); break; \
    default: QK_T(DT, 4); break; \
    }
static void qtile(rf_dtype dt, int R, int T, const char *w, size_t ws, int nb, const xq_pair *x, size_t xs,
                  float *y, size_t ldy) {
    if (dt == RF_Q8_0) {
        QK_RT(RF_Q8_0);
    } else {
        QK_RT(RF_Q4_0);
    }
}

void rf_q_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK, np = n_pairs(W->cols);
    const size_t ws = rf_dtype_row_bytes(W->dtype, W->cols);
    const xq_pair *X = xp;
    const char *w0 = W->data;
    const int tbmax = rf_token_block((size_t)np * sizeof(xq_pair));
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        int ntt = (tb + 3) / 4;
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4;
            for (int i = 0, t = t0; i < ntt; i++) {
                int T = tb / ntt + (i < tb % ntt);
                qtile(W->dtype, R, T, w0 + r * ws, ws, nb, X + (size_t)t * np, np, Y + (size_t)t * ldy + r, ldy);
                t += T;
            }
        }
    }
}
