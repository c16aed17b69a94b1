/* matmul_kq_avx512.c - the avx512 tier's Y = X . W^T for the 256-weight
 * super-block types (Q2_K..Q6_K, IQ4_XS), W in ggml's row-major blocks.
 * Q4_K, Q5_K, Q6_K and IQ4_XS matrices the loader packed (rf_mat_pack) are
 * read from their 16-row panels instead (matmul_avx512.c rf_qp_range_avx512, and
 * matmul_avx2p.c at avx2), which serve up to 64 tokens per weight read;
 * these kernels serve them where nothing was packed.
 *
 * Q4_K, Q5_K and Q6_K are read straight from their blocks: each
 * super-block's levels are unpacked in registers (nibbles with and / shift,
 * Q5_K's fifth and Q6_K's high bits with per-half variable shifts), 64
 * weights per vector, two 32-chunks in its halves, and taken against the
 * activations with vpdpbusd (the levels unsigned, 0..63). The activations
 * are quantised per 32 to int8 (as rf_kq_prep, f32 scale) into a layout
 * made for these vectors (rf_xk512): per token and super-block, the int8
 * values in the chunk pairs the weight vectors hold, the chunks' scales,
 * and their sums for the offsets: Q4_K / Q5_K's mins, m dmin dx sum(x_q)
 * per chunk, and Q6_K's -32, 32 d s dx sum(x_q) per 16 weights (one FMA
 * per super-block and token either way). The 6-bit scales are decoded
 * with integer ops once per super-block (ggml's kmask shuffle); per token
 * one multiply gives all 8 or 16 scale products and one permute per vector
 * spreads them to its lanes, then a conversion and an FMA per 64 weights.
 * The levels stay in registers for all tokens of the call's token block:
 * each weight is read once per call (per token block).
 *
 * The other types (Q2_K, Q3_K, IQ4_XS) are decoded as at avx2
 * (matmul_kq.c rf_kq_decode: int8 levels q, a scale s and a min m per 16
 * weights) over the same per-32 int8 activations (rf_kq_prep); the dot
 * takes two 32-chunks, 64 weights, per instruction: vpdpbusd of |q|
 * against the activations negated where q < 0 (AVX-512 has no byte sign
 * instruction: a masked subtract from zero), which leaves in each 32-bit
 * lane the sum of 4 products, lanes 4k..4k + 3 one 16-weight piece. Each
 * lane is scaled by its piece's s times its chunk's activation scale, the
 * mins subtracted as at avx2 (m dx sum(x_q)). A decoded block serves every
 * token of the call's token block. */
#include <immintrin.h>

#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"
#include "kernels/simd.h"
#include "kernels/team.h"
#include "util/util.h"

/* one decoded super-block (8 chunks of 32) against tokens [0, T) of x (each
 * token's row of xstride 32-blocks, from this block's first chunk) */
static void block_dot(const rf_kq_block *w, int has_min, const rf_xk *x, size_t xstride, int T, __m512 *acc,
                      float *accm) {
    const __m512i zero = _mm512_setzero_si512(), quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int c = 0; c < 8; c += 2) {
        const __m512i ws = _mm512_loadu_si512(w->q + 32 * c), wu = _mm512_abs_epi8(ws);
        const __mmask64 neg = _mm512_movepi8_mask(ws);
        /* lane l holds weights 4l..4l + 3: the scale of piece l / 4 */
        const __m512 sc = _mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(w->s + 2 * c)));
        const float *m = w->m + 2 * c;
        for (int t = 0; t < T; t++) {
            const rf_xk *x0 = x + t * xstride + c, *x1 = x0 + 1;
            __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->q)),
                                            _mm256_loadu_si256((const __m256i *)x1->q), 1);
            xv = _mm512_mask_sub_epi8(xv, neg, zero, xv);
            const __m512i s = _mm512_dpbusd_epi32(zero, wu, xv);
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(x0->d), _mm256_set1_ps(x1->d), 1);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, dx), acc[t]);
            if (has_min)
                accm[t] += x0->d * (m[0] * x0->s[0] + m[1] * x0->s[1]) + x1->d * (m[2] * x1->s[0] + m[3] * x1->s[1]);
        }
    }
}

#define KQ_TMAX 64

static void range_direct(float *Y, size_t ldy, const rf_xk512 *X, const rf_mat *W, int n, int a, int b);

void rf_kq_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const rf_dtype dt = W->dtype;
    if (rf_kq_direct(dt)) {
        range_direct(Y, ldy, xp, W, n, a, b);
        return;
    }
    const int nblk = W->cols / RF_QK_K, nb = W->cols / RF_QK;
    const size_t bb = rf_dtype_block_bytes(dt), ws = rf_dtype_row_bytes(dt, W->cols);
    const int has_min = dt == RF_Q2_K || dt == RF_Q4_K || dt == RF_Q5_K;
    const rf_xk *X = xp;
    int tbmax = rf_token_block((size_t)nb * sizeof(rf_xk));
    if (tbmax > KQ_TMAX) tbmax = KQ_TMAX;
    rf_kq_block w;
    __m512 acc[KQ_TMAX];
    float accm[KQ_TMAX];
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        const int T = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r++) {
            const char *row = (const char *)W->data + (size_t)r * ws;
            for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(), accm[t] = 0;
            for (int k = 0; k < nblk; k++) {
                rf_kq_decode(dt, row + k * bb, &w);
                block_dot(&w, has_min, X + (size_t)t0 * nb + k * 8, nb, T, acc, accm);
            }
            for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ldy + r] = _mm512_reduce_add_ps(acc[t]) - accm[t];
        }
    }
}

/* ---- Q4_K, Q5_K, Q6_K straight from the blocks ---- */

/* the chunk pair (vector) and half that holds chunk c of a super-block:
 * Q4_K / Q5_K's 64-byte loads of qs hold chunks (0, 2) and (1, 3) in their
 * low and high nibbles, then (4, 6), (5, 7); Q6_K's (0, 1), (2, 3), ... */
static inline void slot(rf_dtype dt, int c, int *p, int *h) {
    if (dt == RF_Q6_K)
        *p = c / 2, *h = c & 1;
    else
        *p = (c / 4) * 2 + (c & 1), *h = (c >> 1) & 1;
}

void rf_kq_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype dt, int part, int parts) {
    const int nblk = cols / RF_QK_K;
    int t0, t1;
    rf_share(n, part, parts, &t0, &t1);
    rf_xk512 *o = (rf_xk512 *)xp + (size_t)t0 * nblk;
    for (int t = t0; t < t1; t++)
        for (int k = 0; k < nblk; k++, o++)
            for (int c = 0; c < 8; c++) {
                __m256i lv[4], q;
                const float d = rf_quant32_i8(X + (size_t)t * cols + k * RF_QK_K + c * RF_QK, lv, &q);
                int p, h;
                slot(dt, c, &p, &h);
                _mm256_storeu_si256((__m256i *)(o->q[p] + 32 * h), q);
                if (dt == RF_Q6_K)
                    o->dxs[2 * c] = o->dxs[2 * c + 1] = d;
                else
                    o->dxs[c] = d, o->dxs[8 + c] = 0;
                /* the sums of each half's q */
                const __m256i lo = _mm256_add_epi32(lv[0], lv[1]), hi = _mm256_add_epi32(lv[2], lv[3]);
                __m128i s2 = _mm_add_epi32(_mm_unpacklo_epi64(_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi)),
                                           _mm_unpackhi_epi64(_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi)));
                s2 = _mm_add_epi32(s2, _mm_unpacklo_epi64(_mm256_extracti128_si256(lo, 1), _mm256_extracti128_si256(hi, 1)));
                s2 = _mm_add_epi32(s2, _mm_unpackhi_epi64(_mm256_extracti128_si256(lo, 1), _mm256_extracti128_si256(hi, 1)));
                /* s2: lo's two lane sums, then hi's */
                const int h0 = _mm_extract_epi32(s2, 0) + _mm_extract_epi32(s2, 1),
                          h1 = _mm_extract_epi32(s2, 2) + _mm_extract_epi32(s2, 3);
                if (dt == RF_Q6_K)
                    o->xs[2 * c] = 32.0f * (float)h0, o->xs[2 * c + 1] = 32.0f * (float)h1;
                else
                    o->xs[c] = d * (float)(h0 + h1), o->xs[8 + c] = 0;
            }
}

/* Q4_K / Q5_K's 8 6-bit scales and mins from the 12 packed bytes (as
 * ggml's kmask shuffle): bytes 0..7 of sc, of mn */
static inline void k4_scales(const uint8_t *packed, uint64_t *sc, uint64_t *mn) {
    uint32_t u[4];
    memcpy(u, packed, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m0 = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m0;
    u[0] &= k1;
    *sc = (uint64_t)u[0] | (uint64_t)u[1] << 32;
    *mn = (uint64_t)u[2] | (uint64_t)u[3] << 32;
}

/* tokens [0, T) of xt (each token's row of nblk super-blocks) against
 * rows [a, b) of W (ws bytes a row, bb a block), dt's levels unpacked in
 * registers once per block for all T tokens; inlined with dt and, for
 * 1-token calls, T constant, so that the accumulators stay in registers */
static inline __attribute__((always_inline)) void rows_direct(float *Y, size_t ldy, const rf_xk512 *xt, const char *W,
                                                              size_t ws, size_t bb, int nblk, rf_dtype dt, int T,
                                                              int a, int b) {
    const int six = dt == RF_Q6_K, five = dt == RF_Q5_K;
    if (nblk < 1) __builtin_unreachable(); /* (cols >= 256) every row sets acc */
    const __m512i low4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), b16 = _mm512_set1_epi8(0x10);
    /* per-half shift counts (16-bit lanes) */
#define HALVES(x, y) _mm512_inserti64x4(_mm512_set1_epi16(x), _mm256_set1_epi16(y), 1)
    const __m512i sh42 = HALVES(4, 2), sh02 = HALVES(0, 2), sh31 = HALVES(3, 1), sh13 = HALVES(1, 3);
#undef HALVES
    /* lanes of each vector: the scale of its chunk (Q4_K / Q5_K, 8 scales)
     * or of its 16-weight piece (Q6_K, 16 scales) */
    __m512i idx[4];
    for (int p = 0; p < 4; p++) {
        const int c0 = (p / 2) * 4 + (p & 1);
        idx[p] = six ? _mm512_add_epi32(_mm512_set1_epi32(4 * p),
                                        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3))
                     : _mm512_inserti64x4(_mm512_set1_epi32(c0), _mm256_set1_epi32(c0 + 2), 1);
    }
    /* two accumulators a token (the chains short); the mins go into the
     * second's low 8 lanes */
    __m512 acc[KQ_TMAX], acc1[KQ_TMAX];
    for (int r = a; r < b; r++) {
        const char *row = W + (size_t)r * ws;
        for (int k = 0; k < nblk; k++) {
            const char *blk = row + k * bb;
            __m512i q[4];
            __m512 sp[4], scv, mn = _mm512_setzero_ps();
            if (six) {
                const rf_block_q6_k *x = (const rf_block_q6_k *)blk;
                __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x->scales))),
                                          _mm512_set1_ps(rf_f16_to_f32(x->d)));
                scv = sc;
                for (int h = 0; h < 2; h++) {
                    const __m512i l = _mm512_loadu_si512(x->ql + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
                    q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh42), m30));
                    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                                                   _mm512_and_si512(_mm512_srlv_epi16(qh, sh02), m30));
                }
            } else {
                const rf_block_q4_k *x4 = (const rf_block_q4_k *)blk;
                const uint8_t *qs = five ? ((const rf_block_q5_k *)blk)->qs : x4->qs;
                uint64_t s8, m8;
                k4_scales(x4->scales, &s8, &m8);
                __m256 sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s8))),
                                          _mm256_set1_ps(rf_f16_to_f32(x4->d)));
                mn = _mm512_zextps256_ps512(
                    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m8))),
                                  _mm256_set1_ps(rf_f16_to_f32(x4->dmin))));
                scv = _mm512_zextps256_ps512(sc);
                for (int h = 0; h < 2; h++) {
                    const __m512i v = _mm512_loadu_si512(qs + 64 * h);
                    q[2 * h] = _mm512_and_si512(v, low4);
                    q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                }
                if (five) {
                    /* bit 2j of qh[l]: chunk 2j's fifth bits, 2j + 1 chunk
                     * 2j + 1's; moved to bit 4 within each byte */
                    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const rf_block_q5_k *)blk)->qh));
                    q[0] = _mm512_or_si512(q[0], _mm512_and_si512(_mm512_sllv_epi16(qh, sh42), b16));
                    q[1] = _mm512_or_si512(q[1], _mm512_and_si512(_mm512_sllv_epi16(qh, sh31), b16));
                    q[2] = _mm512_or_si512(q[2], _mm512_and_si512(_mm512_srlv_epi16(qh, sh02), b16));
                    q[3] = _mm512_or_si512(q[3], _mm512_and_si512(_mm512_srlv_epi16(qh, sh13), b16));
                }
            }
            const rf_xk512 *x = xt + k;
            for (int t = 0; t < T; t++, x += nblk) {
                /* the block's scales times this token's, spread to the lanes */
                const __m512 scx = _mm512_mul_ps(scv, _mm512_loadu_ps(x->dxs));
                for (int p = 0; p < 4; p++) sp[p] = _mm512_permutexvar_ps(idx[p], scx);
                /* (the first block starts the sums: no zeroing pass) */
                __m512 s0 = k ? acc[t] : _mm512_setzero_ps(), s1 = k ? acc1[t] : _mm512_setzero_ps();
                for (int p = 0; p < 4; p++) {
                    const __m512i i = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[p], _mm512_loadu_si512(x->q[p]));
                    const __m512 f = sp[p];
                    if (p < 2)
                        s0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), f, s0);
                    else
                        s1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), f, s1);
                }
                /* Q4_K / Q5_K's mins, Q6_K's offset of 32 */
                s1 = _mm512_fnmadd_ps(six ? scx : mn, _mm512_loadu_ps(x->xs), s1);
                acc[t] = s0, acc1[t] = s1;
            }
        }
        for (int t = 0; t < T; t++) Y[(size_t)t * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], acc1[t]));
    }
}

static void range_direct(float *Y, size_t ldy, const rf_xk512 *X, const rf_mat *W, int n, int a, int b) {
    const rf_dtype dt = W->dtype;
    const int nblk = W->cols / RF_QK_K;
    const size_t bb = rf_dtype_block_bytes(dt), ws = rf_dtype_row_bytes(dt, W->cols);
    int tbmax = rf_token_block((size_t)nblk * sizeof(rf_xk512));
    if (tbmax > KQ_TMAX) tbmax = KQ_TMAX;
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        const int T = n - t0 < tbmax ? n - t0 : tbmax;
        const rf_xk512 *xt = X + (size_t)t0 * nblk;
        float *y = Y + (size_t)t0 * ldy;
#define ROWS(DT)                                                                                                       \
    do {                                                                                                               \
        if (T == 1)                                                                                                    \
            rows_direct(y, ldy, xt, W->data, ws, bb, nblk, DT, 1, a, b);                                               \
        else                                                                                                           \
            rows_direct(y, ldy, xt, W->data, ws, bb, nblk, DT, T, a, b);                                               \
    } while (0)
        if (dt == RF_Q6_K)
            ROWS(RF_Q6_K);
        else if (dt == RF_Q5_K)
            ROWS(RF_Q5_K);
        else
            ROWS(RF_Q4_K);
#undef ROWS
    }
}
