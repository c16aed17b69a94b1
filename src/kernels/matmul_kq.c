/* matmul_kq.c - Y = X . W^T for the block types other than Q8_0 / Q4_0
 * (Q4_1, Q5_0, Q5_1, IQ4_NL; the K-quants Q2_K..Q6_K and IQ4_XS), W in
 * ggml's row-major blocks (formats/blocks.h), at the avx2 tier.
 *
 * Every type is decoded, one block (32 weights, or a 256-weight
 * super-block) at a time, into a common form: signed int8 levels q, and
 * per 16 weights a scale s and a min m with w = s q - m (exactly ggml's
 * weight when s and m are computed as ggml computes them: the products are
 * done in f32 here, the levels are integers). The activations are quantised
 * per 32-block to int8 as for Q8_0 (scale max|x|/127 in f32: finer than
 * ggml's Q8_K, one scale per 256) with the sums of each half of 16 kept,
 * so a 16-weight piece's dot is
 *     s dx sum(q x_q) - m dx sum(x_q)
 * with the integer sum from maddubs (|q| against x_q carrying q's sign, as
 * for Q8_0). A decoded block is used for all tokens of the call's token
 * block before the next is decoded: each weight is read and decoded once
 * per call (per token block of rf_token_block tokens). At the avx512 and
 * amx tiers the 256-weight types run matmul_kq_avx512.c: Q4_K, Q5_K and
 * Q6_K straight from their blocks over activations in its own layout
 * (rf_kq_direct: the prep writes rf_xk512 then), the others its dot over
 * the same decoded blocks. Matrices the loader packed (rf_mat_pack: every
 * one of these types) are read from their panels at every tier instead
 * (matmul_avx2p.c, matmul_avx512.c); these kernels serve the matrices
 * nothing packed (a view that starts inside a panel, a caller that never
 * packs). */
#include <immintrin.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/cpu.h"
#include "kernels/matmul_impl.h"
#include "kernels/simd.h"
#include "kernels/team.h"
#include "util/util.h"

int rf_kq_direct(rf_dtype dt) {
    return (dt == RF_Q4_K || dt == RF_Q5_K || dt == RF_Q6_K) && rf_cpu_tier_active() >= RF_CPU_AVX512;
}

size_t rf_kq_prep_bytes(int n, int cols, rf_dtype dt) {
    if (rf_kq_direct(dt)) return (size_t)n * (cols / RF_QK_K) * sizeof(rf_xk512);
    return (size_t)n * (cols / RF_QK) * sizeof(rf_xk);
}

void rf_kq_prep(void *xp, const float *X, int n, int cols, rf_dtype dt, int part, int parts) {
    if (rf_kq_direct(dt)) {
        rf_kq_prep_avx512(xp, X, n, cols, dt, part, parts);
        return;
    }
    const int nb = cols / RF_QK;
    int t0, t1;
    rf_share(n, part, parts, &t0, &t1);
    rf_xk *o = (rf_xk *)xp + (size_t)t0 * nb;
    for (int t = t0; t < t1; t++)
        for (int b = 0; b < nb; b++, o++) {
            __m256i q[4], p;
            o->d = rf_quant32_i8(X + (size_t)t * cols + b * RF_QK, q, &p);
            _mm256_storeu_si256((__m256i *)o->q, p);
            int32_t s0, s1;
            rf_quant32_half_sums(q, &s0, &s1);
            o->s[0] = (int16_t)s0, o->s[1] = (int16_t)s1;
        }
}

/* ---- decoding: one block into levels q[elems], scale s and min m per 16 ---- */

typedef rf_kq_block decoded;

/* the legacy nibble order: byte j holds weight j (low) and j + 16 (high) */
static inline void nibbles32(const uint8_t *qs, int8_t *q, int offset) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0x0F) - offset);
        q[j + 16] = (int8_t)((qs[j] >> 4) - offset);
    }
}

static inline void fifth_bits32(const uint8_t qh[4], int8_t *q, int offset) {
    uint32_t h;
    memcpy(&h, qh, 4);
    for (int j = 0; j < 32; j++) q[j] = (int8_t)(q[j] + (((h >> j) & 1) << 4) - offset);
}

void rf_kq_decode(rf_dtype dt, const void *blk, decoded *o) {
    switch (dt) {
    case RF_Q4_1: {
        const rf_block_q4_1 *x = blk;
        nibbles32(x->qs, o->q, 0);
        o->s[0] = o->s[1] = rf_f16_to_f32(x->d);
        o->m[0] = o->m[1] = -rf_f16_to_f32(x->m);
        break;
    }
    case RF_Q5_0: {
        const rf_block_q5_0 *x = blk;
        nibbles32(x->qs, o->q, 0);
        fifth_bits32(x->qh, o->q, 16);
        o->s[0] = o->s[1] = rf_f16_to_f32(x->d);
        o->m[0] = o->m[1] = 0;
        break;
    }
    case RF_Q5_1: {
        const rf_block_q5_1 *x = blk;
        nibbles32(x->qs, o->q, 0);
        fifth_bits32(x->qh, o->q, 0);
        o->s[0] = o->s[1] = rf_f16_to_f32(x->d);
        o->m[0] = o->m[1] = -rf_f16_to_f32(x->m);
        break;
    }
    case RF_IQ4_NL: {
        const rf_block_iq4_nl *x = blk;
        for (int j = 0; j < 16; j++) {
            o->q[j] = rf_iq4nl_values[x->qs[j] & 0x0F];
            o->q[j + 16] = rf_iq4nl_values[x->qs[j] >> 4];
        }
        o->s[0] = o->s[1] = rf_f16_to_f32(x->d);
        o->m[0] = o->m[1] = 0;
        break;
    }
    case RF_Q2_K: {
        const rf_block_q2_k *x = blk;
        const float d = rf_f16_to_f32(x->d), dmin = rf_f16_to_f32(x->dmin);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++)
                for (int l = 0; l < 32; l++) o->q[128 * h + 32 * p + l] = (int8_t)((x->qs[32 * h + l] >> (2 * p)) & 3);
        for (int i = 0; i < 16; i++) {
            o->s[i] = d * (x->scales[i] & 0x0F);
            o->m[i] = dmin * (x->scales[i] >> 4);
        }
        break;
    }
    case RF_Q3_K: {
        const rf_block_q3_k *x = blk;
        const float d = rf_f16_to_f32(x->d);
        int8_t sc[16];
        rf_q3k_scales(x->scales, sc);
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++)
                for (int l = 0; l < 32; l++)
                    o->q[128 * h + 32 * p + l] = (int8_t)(((x->qs[32 * h + l] >> (2 * p)) & 3) -
                                                          ((x->hmask[l] >> (4 * h + p)) & 1 ? 0 : 4));
        for (int i = 0; i < 16; i++) o->s[i] = d * sc[i], o->m[i] = 0;
        break;
    }
    case RF_Q4_K:
    case RF_Q5_K: {
        const rf_block_q4_k *x4 = blk;
        const rf_block_q5_k *x5 = blk;
        const int five = dt == RF_Q5_K;
        const uint8_t *qs = five ? x5->qs : x4->qs, *sc = five ? x5->scales : x4->scales;
        const float d = rf_f16_to_f32(x4->d), dmin = rf_f16_to_f32(x4->dmin); /* same place in both */
        /* 64 weights per 32 bytes: low nibbles first, then high; Q5_K's
         * fifth bits: bits 2j and 2j + 1 of qh[l] (a 16-bit shift moves
         * bits across bytes, the masks keep each byte's own) */
        const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)x5->qh) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (five) {
                const __m256i h = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j));
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
            }
            _mm256_storeu_si256((__m256i *)(o->q + 64 * j), lo);
            _mm256_storeu_si256((__m256i *)(o->q + 64 * j + 32), hi);
        }
        for (int j = 0; j < 8; j++) {
            uint8_t s, m;
            rf_k4_scale_min(j, sc, &s, &m);
            o->s[2 * j] = o->s[2 * j + 1] = d * s;
            o->m[2 * j] = o->m[2 * j + 1] = dmin * m;
        }
        break;
    }
    case RF_Q6_K: {
        const rf_block_q6_k *x = blk;
        const float d = rf_f16_to_f32(x->d);
        /* per 128 weights: weight 32p + l from a nibble of ql[l] (p = 0, 2)
         * or ql[l + 32] (p = 1, 3) and bits 2p, 2p + 1 of qh[l], minus 32;
         * each 16-bit shift is masked to the byte's own bits */
        const __m256i low4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), off = _mm256_set1_epi8(32);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            const __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
            };
            for (int p = 0; p < 4; p++)
                _mm256_storeu_si256((__m256i *)(o->q + 128 * h + 32 * p), _mm256_sub_epi8(q[p], off));
        }
        for (int i = 0; i < 16; i++) o->s[i] = d * x->scales[i], o->m[i] = 0;
        break;
    }
    case RF_IQ4_XS: {
        const rf_block_iq4_xs *x = blk;
        const float d = rf_f16_to_f32(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x->scales_l[ib / 2] >> 4 * (ib % 2)) & 0x0F) | (((x->scales_h >> 2 * ib) & 3) << 4);
            for (int j = 0; j < 16; j++) {
                o->q[32 * ib + j] = rf_iq4nl_values[x->qs[16 * ib + j] & 0x0F];
                o->q[32 * ib + 16 + j] = rf_iq4nl_values[x->qs[16 * ib + j] >> 4];
            }
            o->s[2 * ib] = o->s[2 * ib + 1] = d * (ls - 32);
            o->m[2 * ib] = o->m[2 * ib + 1] = 0;
        }
        break;
    }
    default: memset(o, 0, sizeof *o); break; /* not routed here (matmul.c) */
    }
}

/* one decoded block (nc 32-chunks) against tokens [0, T) of x (each token's
 * row of xstride 32-blocks, starting at this block's first chunk) */
static void block_dot(const decoded *w, int nc, int has_min, const rf_xk *x, size_t xstride, int T, __m256 *acc,
                      float *accm) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c = 0; c < nc; c++) {
        const __m256i ws = _mm256_loadu_si256((const __m256i *)(w->q + 32 * c)), wu = _mm256_abs_epi8(ws);
        const __m256 sc = _mm256_setr_m128(_mm_set1_ps(w->s[2 * c]), _mm_set1_ps(w->s[2 * c + 1]));
        const float m0 = w->m[2 * c], m1 = w->m[2 * c + 1];
        for (int t = 0; t < T; t++) {
            const rf_xk *xb = x + t * xstride + c;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)xb->q);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, _mm256_sign_epi8(xv, ws)), ones);
            const __m256 dx = _mm256_broadcast_ss(&xb->d);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(sc, dx), acc[t]);
            if (has_min) accm[t] += xb->d * (m0 * xb->s[0] + m1 * xb->s[1]);
        }
    }
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define KQ_TMAX 64

void rf_kq_range(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const rf_dtype dt = W->dtype;
    const int be = rf_dtype_block_elems(dt), nc = be / RF_QK, nblk = W->cols / be, nb = W->cols / RF_QK;
    if (be == RF_QK_K && rf_cpu_tier_active() >= RF_CPU_AVX512) {
        rf_kq_range_avx512(Y, ldy, xp, W, n, a, b);
        return;
    }
    const size_t bb = rf_dtype_block_bytes(dt), ws = rf_dtype_row_bytes(dt, W->cols);
    const int has_min = dt == RF_Q4_1 || dt == RF_Q5_1 || dt == RF_Q2_K || dt == RF_Q4_K || dt == RF_Q5_K;
    const rf_xk *X = xp;
    int tbmax = rf_token_block((size_t)nb * sizeof(rf_xk));
    if (tbmax > KQ_TMAX) tbmax = KQ_TMAX;
    decoded w;
    __m256 acc[KQ_TMAX];
    float accm[KQ_TMAX];
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        const int T = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r++) {
            const char *row = (const char *)W->data + (size_t)r * ws;
            for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps(), accm[t] = 0;
            for (int k = 0; k < nblk; k++) {
                rf_kq_decode(dt, row + k * bb, &w);
                block_dot(&w, nc, has_min, X + (size_t)t0 * nb + k * nc, nb, T, acc, accm);
            }
            for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ldy + r] = hsum8(acc[t]) - accm[t];
        }
    }
}
