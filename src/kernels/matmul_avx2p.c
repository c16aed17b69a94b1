/* matmul_avx2p.c - the avx2 tier's kernels for packed weights (rf_mat_pack,
 * the layouts of matmul_pack.c): AVX2 + FMA only, compiled with the
 * baseline flags. Each 64-byte vector of a 16-row panel is read as two
 * 32-byte halves of 8 rows ("groups"); a tile is G groups (one or two whole
 * panels) x T tokens, and each accumulator holds 8 outputs (8 rows of one
 * token), so there are no horizontal sums and each weight vector, loaded
 * and converted once per tile, serves all T tokens.
 *
 * bf16: a vector holds rows r = 0..7 x the column pair (2j, 2j + 1) as
 * 32-bit lanes; a shift left by 16 gives the even columns as f32, an AND
 * the odd ones (bf16 is the top half of an f32), and two FMAs with the
 * token's x[2j], x[2j + 1] broadcast add them to 8 outputs. f32 products
 * of exact bf16 weights: f32-grade results, the activations used as they
 * are.
 *
 * Q8_0 / Q4_0: the activations are rf_q_prep_avx2's (int8 per 32-block,
 * the same rounding as the row-major avx2 kernel); a vector holds rows r =
 * 0..7 x 4 columns as bytes, and a token's 4 int8 activations are
 * broadcast to every lane. maddubs (u8 x s8 -> pairs summed to s16) then
 * gives each row's 4 products as two s16:
 *  - Q8_0 (stored as w + 128): flip the top bit back to w, then
 *    maddubs(|w|, sign(x, w)) (ggml's trick; |pair| <= 2 * 128 * 127, no
 *    saturation) and madd with ones to s32 per vector;
 *  - Q4_0 (nibbles u = w + 8): maddubs(u, x) directly; a block's 8 results
 *    add up in s16 (<= 8 * 2 * 15 * 127 = 30480, no overflow), one madd
 *    per block, and the offset comes in as -8 * sum(x) (nsum8).
 *  - Q4_1 (nibbles q, w = d q + m): as Q4_0 without the offset; the min
 *    comes in per block in f32 as m d_x sum(x) (dsum holds d_x sum(x));
 *  - Q5_0 / Q5_1: the fifth bits ORed in as bit 4 (levels to 31, s32 per
 *    vector: levels45, dot45); Q5_0's offset as -16 sum(x), Q5_1's min as
 *    Q4_1's.
 *  - IQ4_NL (Q4_0's nibbles, indexes of rf_iq4nl_values): a byte shuffle
 *    of the signed table gives the levels w (-127..113), then Q8_0's
 *    maddubs(|w|, sign(x, w)); the levels + 128 (the avx512 operand)
 *    would saturate maddubs' s16 pairs.
 * Per block the s32 dot is converted once and scaled by d_w * d_x into
 * f32 accumulators: exact integer block dots, as the row-major kernel.
 *
 * Q4_K / Q5_K / Q6_K / IQ4_XS: the avx512 tier's panels, read in the same
 * halves (below). */
#include <immintrin.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"

#define AI __attribute__((always_inline))
#ifndef PF_BYTES
#define PF_BYTES 2048 /* software prefetch distance of a 1-token tile, per panel (512 and 4096 are slower) */
#endif

/* the 4 int8 activations at q in every 32-bit lane (the columns a maddubs
 * of a panel vector takes) */
static inline AI __m256i bcast4(const int8_t *q) {
    int32_t u;
    memcpy(&u, q, 4);
    return _mm256_set1_epi32(u);
}

/* the 8 outputs of group g for a token: all, or the first m (< 8) of them */
static inline AI void store8(float *y, __m256 v, int m) {
    if (m >= 8) _mm256_storeu_ps(y, v);
    else if (m > 0)
        _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                            v);
}

/* near-equal token tiles of up to tmax (10 with tmax 4: 4 + 3 + 3), token
 * tiles outside and panels inside: a tile's activations stay in L1 while
 * the range's panels (a thread's chunk) come from L2 after the first tile */
#define FOR_TOKEN_TILES(n, tmax, T, t0)                                                                  \
    for (int ntt_ = ((n) + (tmax) - 1) / (tmax), i_ = 0, t0 = 0, T = (n) / ntt_ + (0 < (n) % ntt_); i_ < ntt_; \
         t0 += T, i_++, T = (n) / ntt_ + (i_ < (n) % ntt_))

/* Groups per tile for T tokens and `left` rows: one token streams W,
 * memory-bound, so 4 panels at once (8 groups: more streams in flight; the
 * accumulators need 8 registers); more tokens: one panel (2 groups) */
static inline int groups_for(int T, int left) {
    if (T > 1) return 2;
    return left > 48 ? 8 : left > 16 ? 4 : 2;
}
/* the packed int8 types' groups: at most two per panel of the stream panel
 * cap (rf_stream_panels; not bf16's, whose 1-token kernel sums even and odd
 * columns apart with fewer groups: other bits) */
static inline int q_groups_for(int T, int left) {
    const int g = groups_for(T, left), cap = 2 * rf_stream_panels(4, T);
    return g < cap ? g : cap;
}

/* Rows of a panel group when a call has more than one token tile: the
 * group's panels (4 x 16 rows; 128 KB of bf16 at cols 1024) are streamed
 * from memory by the first token tile and meet the other tiles from L2,
 * so each weight is read from memory once per call (token tiles outside
 * would walk a thread's whole chunk per tile: the lm head's, ~19 MB at the
 * 0.6B shape, would come from memory again for every 4 tokens). */
#define PANEL_GROUP_ROWS 64

/* ---- bf16 ------------------------------------------------------------------- */

/* G groups (2 or 4) x T tokens; H = 2: even and odd columns in separate
 * accumulators (more independent FMA chains when G * T is small). w: the
 * tile's first panel; panel: uint16 per panel; x: the first token's row. */
static inline AI void bkern(const int G, const int T, const int H, const uint16_t *w, size_t panel, int cols,
                            const float *x, size_t ldx, float *y, size_t ldy, int rows_left) {
    __m256 acc[8][4][2];
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) acc[g][t][h] = _mm256_setzero_ps();
    const __m256i odd = _mm256_set1_epi32((int)0xFFFF0000);
    const int k2 = cols / 2; /* whole pairs */
    for (int j = 0; j < k2; j++) {
        if (T == 1) { /* up to 8 groups: each converted and used at once (16 registers for all of them would spill) */
            __m256 xe = _mm256_broadcast_ss(x + 2 * j), xo = _mm256_broadcast_ss(x + 2 * j + 1);
            for (int g = 0; g < G; g += 2) /* each panel is a stream of its own: fetch ahead */
                rf_prefetch_stream((const char *)(w + (g >> 1) * panel + (size_t)j * 32) + PF_BYTES);
            for (int g = 0; g < G; g++) {
                __m256i v = _mm256_load_si256((const __m256i *)(w + (g >> 1) * panel + (size_t)j * 32 + (g & 1) * 16));
                acc[g][0][0] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[g][0][0]);
                acc[g][0][H - 1] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, odd)), xo, acc[g][0][H - 1]);
            }
            continue;
        }
        __m256 we[8], wo[8];
        for (int g = 0; g < G; g += 2)
            rf_prefetch_stream((const char *)(w + (g >> 1) * panel + (size_t)j * 32) + PF_BYTES);
        for (int g = 0; g < G; g++) {
            __m256i v = _mm256_load_si256((const __m256i *)(w + (g >> 1) * panel + (size_t)j * 32 + (g & 1) * 16));
            we[g] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            wo[g] = _mm256_castsi256_ps(_mm256_and_si256(v, odd));
        }
        for (int t = 0; t < T; t++) {
            __m256 xe = _mm256_broadcast_ss(x + t * ldx + 2 * j);
            for (int g = 0; g < G; g++) acc[g][t][0] = _mm256_fmadd_ps(we[g], xe, acc[g][t][0]);
            __m256 xo = _mm256_broadcast_ss(x + t * ldx + 2 * j + 1);
            for (int g = 0; g < G; g++) acc[g][t][H - 1] = _mm256_fmadd_ps(wo[g], xo, acc[g][t][H - 1]);
        }
    }
    if (cols & 1) /* the last pair holds one column (its odd half is zero; x has no element there) */
        for (int g = 0; g < G; g++) {
            __m256i v = _mm256_load_si256((const __m256i *)(w + (g >> 1) * panel + (size_t)k2 * 32 + (g & 1) * 16));
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            for (int t = 0; t < T; t++)
                acc[g][t][0] = _mm256_fmadd_ps(we, _mm256_broadcast_ss(x + t * ldx + 2 * k2), acc[g][t][0]);
        }
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++)
            store8(y + t * ldy + 8 * g, H == 2 ? _mm256_add_ps(acc[g][t][0], acc[g][t][H - 1]) : acc[g][t][0],
                   rows_left - 8 * g);
}

/* G = 4 (two panels) for one token, else 2; up to 4 tokens per tile
 * (G * T accumulators + 2G converted weights + a broadcast: 16 registers) */
static void btile(int G, int T, const uint16_t *w, size_t panel, int cols, const float *x, size_t ldx, float *y,
                  size_t ldy, int rows_left) {
#define BK(G_, T_, H_) bkern(G_, T_, H_, w, panel, cols, x, ldx, y, ldy, rows_left)
    if (G == 8) BK(8, 1, 1);
    else if (G == 4) BK(4, 1, 2);
    else switch (T) {
        case 1: BK(2, 1, 2); break;
        case 2: BK(2, 2, 2); break;
        case 3: BK(2, 3, 1); break;
        default: BK(2, 4, 1); break;
        }
#undef BK
}

void rf_bf16p_range_avx2(float *Y, size_t ldy, const float *X, const rf_mat *W, int n, int a, int b) {
    const int cols = W->cols;
    const size_t panel = (size_t)((cols + 1) / 2) * 32; /* in uint16 */
    const uint16_t *pk = W->packed;
    const int group = n > 4 ? PANEL_GROUP_ROWS : b - a; /* one token tile: the whole range, 4 panels in flight */
    for (int g = a; g < b; g += group) {
        const int ge = b - g < group ? b : g + group;
        FOR_TOKEN_TILES(n, 4, T, t0) {
            for (int r = g; r < ge;) {
                int G = groups_for(T, ge - r);
                btile(G, T, pk + (size_t)(r / 16) * panel, panel, cols, X + (size_t)t0 * cols, cols,
                      Y + (size_t)t0 * ldy + r, ldy, b - r);
                r += 8 * G;
            }
        }
    }
}

/* ---- Q8_0 / Q4_0 ---------------------------------------------------------------- */

/* the signed IQ4_NL levels in both 128-bit lanes, for byte shuffles */
static inline AI __m256i iq4_table(void) {
    static const uint8_t u8[16] = {RF_IQ4NL_U8};
    return _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)u8)),
                            _mm256_set1_epi8((char)0x80));
}

/* the signed levels of the low (h = 0) or high (h = 1) nibbles of q */
static inline AI __m256i iq4_levels(__m256i tbl, __m256i q, int h) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    return _mm256_shuffle_epi8(tbl, _mm256_and_si256(h ? _mm256_srli_epi16(q, 4) : q, m4));
}

/* the s32 dot of 8 rows x 4 signed levels w with 4 activations x (each
 * |pair| <= 2 x 127 x 127: no saturation) */
static inline AI __m256i dot_signed(__m256i w, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

/* the nibble types with 5-bit levels: their fifth bits in a vector after
 * the nibbles (matmul_pack.c) */
static inline int five_bits(rf_dtype dt) { return dt == RF_Q5_0 || dt == RF_Q5_1 || dt == RF_Q5_K; }

/* Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K: the unsigned levels of one
 * 8-row group in column groups v (lo: the low nibbles) and 4 + v (hi: the
 * high ones), with the fifth bits (five_bits: bits v and 4 + v of the
 * bytes 256 on) as bit 4; wg: the group's first byte in its block or
 * chunk */
static inline AI void levels45(const rf_dtype dt, const uint8_t *wg, int v, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const __m256i q = _mm256_load_si256((const __m256i *)(wg + 64 * v));
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (five_bits(dt)) {
        const __m256i h = _mm256_load_si256((const __m256i *)(wg + 256));
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(h, 4 - v), m10));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(h, v), m10));
    }
}

/* ia plus the dot of levels lo, hi with a token's activations xl, xh:
 * 4-bit levels in s16 (a block's or chunk's 4 vectors: <= 4 x 2 x 2 x 15 x
 * 127 = 30480; one madd to s32 at its end), 5-bit ones to s32 per vector
 * (levels to 31 reach that in two) */
static inline AI __m256i dot45(const rf_dtype dt, __m256i ia, __m256i lo, __m256i hi, __m256i xl, __m256i xh) {
    const __m256i pv = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
    return five_bits(dt) ? _mm256_add_epi32(ia, _mm256_madd_epi16(pv, _mm256_set1_epi16(1))) : _mm256_add_epi16(ia, pv);
}

/* G groups x T tokens of Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or IQ4_XS (dt constant at
 * every call site); x: the tile's first token's blocks, ldx blocks per
 * token. IQ4_XS: block b is chunk b % 8 of super-block b / 8 (the nibbles
 * as IQ4_NL's, the scale d (ls - 32) per row), its prefetches an eighth of
 * a super-block per chunk */
static inline AI void qkern(const rf_dtype dt, const int G, const int T, const uint8_t *w, size_t panel, int nb,
                            const rf_xq_avx2 *x, size_t ldx, float *y, size_t ldy, int rows_left) {
    const int xs = dt == RF_IQ4_XS, nl = xs || dt == RF_IQ4_NL, min = dt == RF_Q4_1 || dt == RF_Q5_1;
    const size_t block = xs ? RF_IQ4XSP_SB / 8 : rf_qp_block_bytes(dt), scales = rf_qp_scales_at(dt);
    const __m256i ones = _mm256_set1_epi16(1), top = _mm256_set1_epi8((char)0x80);
    const __m256i tbl = iq4_table();
    __m256 acc[8][4];
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) acc[g][t] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *ws = xs ? w + (size_t)(b / 8) * RF_IQ4XSP_SB : NULL; /* IQ4_XS: the super-block */
        const uint8_t *wb = xs ? ws + 256 * (b % 8) : w + (size_t)b * block;
        /* each panel is a stream of its own: fetch ahead */
        for (int g = 0; g < G; g += 2)
            for (size_t l = 0; l < block; l += 64)
                rf_prefetch_stream((const char *)w + (size_t)b * block + (g >> 1) * panel + PF_BYTES + l);
        __m256i ia[8][4]; /* Q8_0, IQ4_NL: s32 dots; Q4_0: s16 pair sums */
        for (int g = 0; g < G; g++)
            for (int t = 0; t < T; t++) ia[g][t] = _mm256_setzero_si256();
        for (int v = 0; v < (dt == RF_Q8_0 ? 8 : 4); v++) {
            if (nl && T == 1) { /* up to 8 groups: each unpacked and used at once */
                const __m256i xv = bcast4(x[b].q + 4 * v), xh = bcast4(x[b].q + 16 + 4 * v);
                for (int g = 0; g < G; g++) {
                    const __m256i q = _mm256_load_si256((const __m256i *)(wb + (g >> 1) * panel + v * 64 + (g & 1) * 32));
                    ia[g][0] = _mm256_add_epi32(ia[g][0], _mm256_add_epi32(dot_signed(iq4_levels(tbl, q, 0), xv),
                                                                           dot_signed(iq4_levels(tbl, q, 1), xh)));
                }
                continue;
            }
            if (nl) { /* per half (low nibbles, then high): G weight registers */
                for (int h = 0; h < 2; h++) {
                    __m256i wl[8];
                    for (int g = 0; g < G; g++)
                        wl[g] = iq4_levels(tbl, _mm256_load_si256((const __m256i *)(wb + (g >> 1) * panel + v * 64 + (g & 1) * 32)), h);
                    for (int t = 0; t < T; t++) {
                        const __m256i xv = bcast4(x[t * ldx + b].q + 16 * h + 4 * v);
                        for (int g = 0; g < G; g++) ia[g][t] = _mm256_add_epi32(ia[g][t], dot_signed(wl[g], xv));
                    }
                }
                continue;
            }
            if (T == 1) { /* up to 8 groups: each unpacked and used at once (as bkern) */
                const __m256i xv = bcast4(x[b].q + 4 * v), xh = bcast4(x[b].q + 16 + 4 * v); /* xh: not Q8_0 */
                for (int g = 0; g < G; g++) {
                    const uint8_t *wg = wb + (g >> 1) * panel + (g & 1) * 32;
                    if (dt == RF_Q8_0) {
                        __m256i ws = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(wg + 64 * v)), top);
                        ia[g][0] = _mm256_add_epi32(
                            ia[g][0], _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(ws), _mm256_sign_epi8(xv, ws)), ones));
                    } else {
                        __m256i lo, hi;
                        levels45(dt, wg, v, &lo, &hi);
                        ia[g][0] = dot45(dt, ia[g][0], lo, hi, xv, xh);
                    }
                }
                continue;
            }
            __m256i wa[8], wc[8]; /* Q8_0: |w|, w; the nibble types: the groups v and 4 + v */
            for (int g = 0; g < G; g++) {
                const uint8_t *wg = wb + (g >> 1) * panel + (g & 1) * 32;
                if (dt == RF_Q8_0) {
                    wc[g] = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(wg + 64 * v)), top);
                    wa[g] = _mm256_abs_epi8(wc[g]);
                } else {
                    levels45(dt, wg, v, &wa[g], &wc[g]);
                }
            }
            for (int t = 0; t < T; t++) {
                const __m256i xv = bcast4(x[t * ldx + b].q + 4 * v);
                if (dt == RF_Q8_0) {
                    for (int g = 0; g < G; g++)
                        ia[g][t] = _mm256_add_epi32(
                            ia[g][t], _mm256_madd_epi16(_mm256_maddubs_epi16(wa[g], _mm256_sign_epi8(xv, wc[g])), ones));
                } else {
                    const __m256i xh = bcast4(x[t * ldx + b].q + 16 + 4 * v);
                    for (int g = 0; g < G; g++) ia[g][t] = dot45(dt, ia[g][t], wa[g], wc[g], xv, xh);
                }
            }
        }
        for (int g = 0; g < G; g++) {
            const uint8_t *wp = (xs ? ws : wb) + (g >> 1) * panel;
            const __m256 dw = xs ? _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                                     (const __m128i *)(wp + 2048 + 16 * (b % 8) + (g & 1) * 8)))),
                                                 _mm256_load_ps((const float *)(wp + 2176) + (g & 1) * 8))
                              : rf_qp_f16_scales(dt)
                                  ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wp + scales + (g & 1) * 16)))
                                  : _mm256_load_ps((const float *)(wp + scales + (g & 1) * 32)),
                         mw = min ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wp + scales + 32 + (g & 1) * 16))) : dw;
            for (int t = 0; t < T; t++) {
                const rf_xq_avx2 *xt = x + t * ldx + b;
                __m256i s = ia[g][t];
                if (dt == RF_Q4_0 || dt == RF_Q4_1) s = _mm256_madd_epi16(s, ones); /* s16 pair sums (dot45) */
                if (dt == RF_Q4_0 || dt == RF_Q5_0) s = _mm256_add_epi32(s, _mm256_set1_epi32(xt->nsum8)); /* the offset */
                acc[g][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_broadcast_ss(&xt->d)), acc[g][t]);
                if (min) acc[g][t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&xt->dsum), acc[g][t]);
            }
        }
    }
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) store8(y + t * ldy + 8 * g, acc[g][t], rows_left - 8 * g);
}

/* G = 4 (two panels) for one token, else 2 x up to QP_TMAX tokens */
#define QP_TMAX 4
#define QK_T(DT)                                                                      \
    do {                                                                              \
        if (G == 8) QK(DT, 8, 1);                                                     \
        else if (G == 4) QK(DT, 4, 1);                                                \
        else switch (T) {                                                             \
            case 1: QK(DT, 2, 1); break;                                              \
            case 2: QK(DT, 2, 2); break;                                              \
            case 3: QK(DT, 2, 3); break;                                              \
            default: QK(DT, 2, 4); break;                                             \
            }                                                                         \
    } while (0)
static void qtile(rf_dtype dt, int G, int T, const uint8_t *w, size_t panel, int nb, const rf_xq_avx2 *x,
                  size_t ldx, float *y, size_t ldy, int rows_left) {
#define QK(DT, G_, T_) qkern(DT, G_, T_, w, panel, nb, x, ldx, y, ldy, rows_left)
    if (dt == RF_Q8_0) QK_T(RF_Q8_0);
    else if (dt == RF_IQ4_NL) QK_T(RF_IQ4_NL);
    else if (dt == RF_IQ4_XS) QK_T(RF_IQ4_XS);
    else if (dt == RF_Q4_1) QK_T(RF_Q4_1);
    else if (dt == RF_Q5_0) QK_T(RF_Q5_0);
    else if (dt == RF_Q5_1) QK_T(RF_Q5_1);
    else QK_T(RF_Q4_0);
#undef QK
}

/* ---- Q4_K / Q5_K / Q6_K / Q3_K / Q2_K ------------------------------------------------------ */

/* The layouts of the avx512 tier's panels (matmul_pack.c rf_q4kp_pack,
 * rf_q5kp_pack, rf_q6kp_pack, rf_k23p_pack), each 64-byte vector read as
 * two 8-row groups. Per 32-column chunk and (group, token) the integer dot
 * as Q4_0's (maddubs of the unsigned levels with the token's int8 values;
 * Q6_K, Q3_K, Q2_K: the chunk's two 16-column halves apart, pairs of
 * levels summed in s32 per vector for Q6_K, in s16 over the chunk for the
 * 2- and 3-bit levels), then the f32 sums scaled per row lane:
 * Q4_K d sc dx minus dmin m dx sum(x_q), Q6_K / Q3_K d (s0 dot0 + s1 dot1)
 * dx with the offset (32, 4) folded into the dots through the halves' sums
 * (rf_q_prep_avx2's init), Q2_K the same without an offset minus dmin (m0
 * sum0 + m1 sum1) dx. The sums of
 * one panel and up to KP2_MAX_N tokens live in a buffer (L1); the
 * super-blocks are outside, so the panel streams once per KP2_MAX_N
 * tokens. */
#define KP2_MAX_N 64

/* Q4_K or Q5_K (dt; Q5_K: the chunk's fifth bits at wc + 256, bit v and
 * 4 + v of a byte for vector v's low and high nibbles) */
static inline AI void k4kern(const rf_dtype dt, const int T, const uint8_t *wc, const uint8_t *sc, const float *d,
                             const rf_xq_avx2 *x, size_t ldx, float *acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i ia[2][4];
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < T; t++) ia[g][t] = _mm256_setzero_si256();
    for (int v = 0; v < 4; v++) {
        __m256i lo[2], hi[2];
        for (int g = 0; g < 2; g++) levels45(dt, wc + 32 * g, v, &lo[g], &hi[g]);
        for (int t = 0; t < T; t++) {
            const __m256i xl = bcast4(x[t * ldx].q + 4 * v), xh = bcast4(x[t * ldx].q + 16 + 4 * v);
            for (int g = 0; g < 2; g++) ia[g][t] = dot45(dt, ia[g][t], lo[g], hi[g], xl, xh);
        }
    }
    for (int g = 0; g < 2; g++) {
        const __m256 scale = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * g)))),
                                           _mm256_loadu_ps(d + 8 * g)),
                     min = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 128 + 8 * g)))),
                                         _mm256_loadu_ps(d + 16 + 8 * g));
        for (int t = 0; t < T; t++) {
            float *a = acc + 16 * t + 8 * g;
            const float dx = x[t * ldx].d;
            const __m256i dot = dt == RF_Q5_K ? ia[g][t] : _mm256_madd_epi16(ia[g][t], ones);
            const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                             _mm256_mul_ps(scale, _mm256_set1_ps(dx)), _mm256_load_ps(a));
            _mm256_store_ps(a, _mm256_fnmadd_ps(min, _mm256_set1_ps(dx * (float)x[t * ldx].nsum8), f));
        }
    }
}

/* the unsigned levels of 8-row group g of chunk wc of a Q6_K, Q3_K or
 * Q2_K panel in column groups v (lo: of its first 16 columns) and 4 + v
 * (hi: of its last 16), as the avx512 tier's k16_levels */
static inline AI void k16_levels(const rf_dtype dt, const uint8_t *wc, int g, int v, __m256i *lo, __m256i *hi) {
    if (dt == RF_Q6_K) {
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        const __m256i q = _mm256_load_si256((const __m256i *)(wc + 64 * v + 32 * g)),
                      h = _mm256_load_si256((const __m256i *)(wc + 256 + 64 * (v / 2) + 32 * g));
        const __m256i hl = v & 1 ? h : _mm256_slli_epi16(h, 4), hh = v & 1 ? _mm256_srli_epi16(h, 2) : _mm256_slli_epi16(h, 2);
        *lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(hl, m30));
        *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_and_si256(hh, m30));
        return;
    }
    const __m256i m3 = _mm256_set1_epi8(3);
    *lo = _mm256_and_si256(_mm256_srli_epi16(_mm256_load_si256((const __m256i *)(wc + 32 * g)), 2 * v), m3);
    *hi = _mm256_and_si256(_mm256_srli_epi16(_mm256_load_si256((const __m256i *)(wc + 64 + 32 * g)), 2 * v), m3);
    if (dt == RF_Q3_K) { /* the high bits v and 4 + v to bit 2 */
        const __m256i h = _mm256_load_si256((const __m256i *)(wc + 128 + 32 * g)), m4 = _mm256_set1_epi8(4);
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(v <= 2 ? _mm256_slli_epi16(h, 2 - v) : _mm256_srli_epi16(h, v - 2), m4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(h, v + 2), m4));
    }
}

/* Q6_K, Q3_K or Q2_K: the chunk's two 16-column halves apart, with the
 * offsets (Q6_K 32, Q3_K 4) through the halves' sums, Q2_K's mins in f32.
 * Q6_K's pairs of levels (<= 2 x 63 x 127) go to s32 per vector; Q3_K's
 * and Q2_K's (<= 2 x 7 x 127) add up in s16 over the chunk's 4 vectors,
 * one madd at its end */
static inline AI void k16kern(const rf_dtype dt, const int T, const uint8_t *wc, const uint8_t *sc, const float *d,
                              const rf_xq_avx2 *x, size_t ldx, float *acc) {
    const int off = dt == RF_Q6_K ? 32 : dt == RF_Q3_K ? 4 : 0;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i ia[2][2][2]; /* [group][token][half] */
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < T; t++) ia[g][t][0] = ia[g][t][1] = _mm256_setzero_si256();
    for (int v = 0; v < 4; v++) {
        __m256i lo[2], hi[2];
        for (int g = 0; g < 2; g++) k16_levels(dt, wc, g, v, &lo[g], &hi[g]);
        for (int t = 0; t < T; t++) {
            const __m256i xl = bcast4(x[t * ldx].q + 4 * v), xh = bcast4(x[t * ldx].q + 16 + 4 * v);
            for (int g = 0; g < 2; g++) {
                const __m256i pl = _mm256_maddubs_epi16(lo[g], xl), ph = _mm256_maddubs_epi16(hi[g], xh);
                if (dt == RF_Q6_K) {
                    ia[g][t][0] = _mm256_add_epi32(ia[g][t][0], _mm256_madd_epi16(pl, ones));
                    ia[g][t][1] = _mm256_add_epi32(ia[g][t][1], _mm256_madd_epi16(ph, ones));
                } else {
                    ia[g][t][0] = _mm256_add_epi16(ia[g][t][0], pl);
                    ia[g][t][1] = _mm256_add_epi16(ia[g][t][1], ph);
                }
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const __m256i i0 = _mm256_set1_epi32(-off * (int16_t)(x[t * ldx].nsum8 & 0xFFFF)),
                      i1 = _mm256_set1_epi32(-off * (x[t * ldx].nsum8 >> 16));
        for (int g = 0; g < 2; g++) {
            if (dt != RF_Q6_K)
                ia[g][t][0] = _mm256_madd_epi16(ia[g][t][0], ones), ia[g][t][1] = _mm256_madd_epi16(ia[g][t][1], ones);
            ia[g][t][0] = _mm256_add_epi32(ia[g][t][0], i0), ia[g][t][1] = _mm256_add_epi32(ia[g][t][1], i1);
        }
    }
    for (int g = 0; g < 2; g++) {
        const __m256 dv = _mm256_loadu_ps(d + 8 * g);
        const __m256i b0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * g))),
                      b1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 16 + 8 * g)));
        __m256 s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(b0), dv), s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(b1), dv), m0 = s0,
               m1 = s1;
        if (dt == RF_Q2_K) { /* scale in the low nibble, min in the high one */
            const __m256i m15 = _mm256_set1_epi32(15);
            const __m256 dm = _mm256_loadu_ps(d + 16 + 8 * g);
            s0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, m15)), dv);
            s1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, m15)), dv);
            m0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b0, 4), m15)), dm);
            m1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b1, 4), m15)), dm);
        }
        for (int t = 0; t < T; t++) {
            float *a = acc + 16 * t + 8 * g;
            const rf_xq_avx2 *xt = x + t * ldx;
            const __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[g][t][0]), s0,
                                             _mm256_mul_ps(_mm256_cvtepi32_ps(ia[g][t][1]), s1));
            __m256 r = _mm256_fmadd_ps(f, _mm256_set1_ps(xt->d), _mm256_load_ps(a));
            if (dt == RF_Q2_K) {
                r = _mm256_fnmadd_ps(m0, _mm256_set1_ps(xt->d * (float)(int16_t)(xt->nsum8 & 0xFFFF)), r);
                r = _mm256_fnmadd_ps(m1, _mm256_set1_ps(xt->d * (float)(xt->nsum8 >> 16)), r);
            }
            _mm256_store_ps(a, r);
        }
    }
}

/* IQ4_XS: per chunk and (group, token) the s32 dot of the signed levels
 * (IQ4_NL's: the table's shuffle, |w| and sign(x, w)), then d (ls - 32)
 * dx in f32; the low nibbles, then the high ones, so that only 2 x 2
 * weight registers are live */
static inline AI void xskern(const int T, const uint8_t *wc, const int8_t *sc, const float *d, const rf_xq_avx2 *x,
                             size_t ldx, float *acc) {
    const __m256i tbl = iq4_table();
    __m256i ia[2][4];
    for (int g = 0; g < 2; g++)
        for (int t = 0; t < T; t++) ia[g][t] = _mm256_setzero_si256();
    for (int v = 0; v < 4; v++)
        for (int h = 0; h < 2; h++) {
            __m256i wl[2];
            for (int g = 0; g < 2; g++) wl[g] = iq4_levels(tbl, _mm256_load_si256((const __m256i *)(wc + 64 * v + 32 * g)), h);
            for (int t = 0; t < T; t++) {
                const __m256i xv = bcast4(x[t * ldx].q + 16 * h + 4 * v);
                for (int g = 0; g < 2; g++) ia[g][t] = _mm256_add_epi32(ia[g][t], dot_signed(wl[g], xv));
            }
        }
    for (int g = 0; g < 2; g++) {
        const __m256 scale = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * g)))),
                                           _mm256_loadu_ps(d + 8 * g));
        for (int t = 0; t < T; t++) {
            float *a = acc + 16 * t + 8 * g;
            _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[g][t]), _mm256_mul_ps(scale, _mm256_set1_ps(x[t * ldx].d)),
                                               _mm256_load_ps(a)));
        }
    }
}

/* one panel w (Q4_K, Q5_K, Q6_K, Q3_K, Q2_K or IQ4_XS), tokens [t0, t0 +
 * m) (x: token t0's blocks, nb per token), into acc[m][16]: super-blocks
 * outside, near-equal token tiles of <= 4 (Q4_K) or <= 2 (Q6_K, Q3_K,
 * Q2_K: two halves per token) inside */
static void kp_panel(rf_dtype dt, const uint8_t *w, int nsb, const rf_xq_avx2 *x, int nb, int m, float *acc) {
    const size_t sb = rf_kp_sb_bytes(dt), chunk = rf_k16p_chunk(dt);
    const int tmax = dt == RF_Q6_K || dt == RF_Q3_K || dt == RF_Q2_K ? 2 : 4;
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ws = w + (size_t)s * sb;
        for (size_t l = 0; l < sb; l += 64) rf_prefetch_stream((const char *)ws + PF_BYTES + l);
        for (int c = 0; c < 8; c++) {
            const rf_xq_avx2 *xc = x + 8 * s + c;
            FOR_TOKEN_TILES(m, tmax, T, u) {
                float *a = acc + 16 * u;
                const rf_xq_avx2 *xt = xc + (size_t)u * nb;
                if (dt == RF_Q4_K) {
                    const uint8_t *wc = ws + 256 * c, *sc = ws + 2048 + 16 * c;
                    const float *d = (const float *)(ws + 2304);
                    switch (T) {
                    case 1: k4kern(RF_Q4_K, 1, wc, sc, d, xt, nb, a); break;
                    case 2: k4kern(RF_Q4_K, 2, wc, sc, d, xt, nb, a); break;
                    case 3: k4kern(RF_Q4_K, 3, wc, sc, d, xt, nb, a); break;
                    default: k4kern(RF_Q4_K, 4, wc, sc, d, xt, nb, a); break;
                    }
                } else if (dt == RF_Q5_K) {
                    const uint8_t *wc = ws + 320 * c, *sc = ws + 2560 + 16 * c;
                    const float *d = (const float *)(ws + 2816);
                    switch (T) {
                    case 1: k4kern(RF_Q5_K, 1, wc, sc, d, xt, nb, a); break;
                    case 2: k4kern(RF_Q5_K, 2, wc, sc, d, xt, nb, a); break;
                    case 3: k4kern(RF_Q5_K, 3, wc, sc, d, xt, nb, a); break;
                    default: k4kern(RF_Q5_K, 4, wc, sc, d, xt, nb, a); break;
                    }
                } else if (dt == RF_IQ4_XS) {
                    const uint8_t *wc = ws + 256 * c;
                    const int8_t *sc = (const int8_t *)(ws + 2048 + 16 * c);
                    const float *d = (const float *)(ws + 2176);
                    switch (T) {
                    case 1: xskern(1, wc, sc, d, xt, nb, a); break;
                    case 2: xskern(2, wc, sc, d, xt, nb, a); break;
                    case 3: xskern(3, wc, sc, d, xt, nb, a); break;
                    default: xskern(4, wc, sc, d, xt, nb, a); break;
                    }
                } else { /* Q6_K, Q3_K, Q2_K */
                    const uint8_t *wc = ws + chunk * c, *sc = ws + 8 * chunk + 32 * c;
                    const float *d = (const float *)(ws + 8 * chunk + 256);
#define K16_T(DT) (T == 1 ? k16kern(DT, 1, wc, sc, d, xt, nb, a) : k16kern(DT, 2, wc, sc, d, xt, nb, a))
                    if (dt == RF_Q6_K) K16_T(RF_Q6_K);
                    else if (dt == RF_Q3_K) K16_T(RF_Q3_K);
                    else K16_T(RF_Q2_K);
#undef K16_T
                }
            }
        }
    }
}

static void kp_range(float *Y, size_t ldy, const rf_xq_avx2 *X, const rf_mat *W, int n, int a, int b) {
    const int nsb = W->cols / RF_QK_K, nb = W->cols / RF_QK;
    const size_t panel = (size_t)nsb * rf_kp_sb_bytes(W->dtype);
    _Alignas(32) float acc[KP2_MAX_N * 16];
    for (int r = a; r < b; r += 16)
        for (int t0 = 0; t0 < n; t0 += KP2_MAX_N) {
            const int m = n - t0 < KP2_MAX_N ? n - t0 : KP2_MAX_N;
            memset(acc, 0, sizeof(float) * (size_t)m * 16);
            kp_panel(W->dtype, (const uint8_t *)W->packed + (size_t)(r / 16) * panel, nsb, X + (size_t)t0 * nb, nb, m, acc);
            for (int t = 0; t < m; t++) {
                float *y = Y + (size_t)(t0 + t) * ldy + r;
                store8(y, _mm256_load_ps(acc + 16 * t), b - r);
                store8(y + 8, _mm256_load_ps(acc + 16 * t + 8), b - r - 8);
            }
        }
}

void rf_qp_range_avx2(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    /* IQ4_XS: calls of one token tile in the panel groups below (up to 4
     * panels streaming at once; kp_range streams one), wider ones in kp_range */
    if (W->dtype == RF_Q4_K || W->dtype == RF_Q5_K || W->dtype == RF_Q6_K || W->dtype == RF_Q3_K || W->dtype == RF_Q2_K ||
        (W->dtype == RF_IQ4_XS && n > QP_TMAX)) {
        kp_range(Y, ldy, xp, W, n, a, b);
        return;
    }
    const int nb = W->cols / RF_QK;
    const size_t panel = W->dtype == RF_IQ4_XS ? (size_t)(W->cols / RF_QK_K) * RF_IQ4XSP_SB
                                               : (size_t)nb * rf_qp_block_bytes(W->dtype);
    const uint8_t *pk = W->packed;
    const rf_xq_avx2 *X = xp;
    const int group = n > QP_TMAX ? PANEL_GROUP_ROWS : b - a; /* as rf_bf16p_range_avx2 */
    for (int g = a; g < b; g += group) {
        const int ge = b - g < group ? b : g + group;
        FOR_TOKEN_TILES(n, QP_TMAX, T, t0) {
            for (int r = g; r < ge;) {
                int G = q_groups_for(T, ge - r);
                qtile(W->dtype, G, T, pk + (size_t)(r / 16) * panel, panel, nb, X + (size_t)t0 * nb, nb,
                      Y + (size_t)t0 * ldy + r, ldy, b - r);
                r += 8 * G;
            }
        }
    }
}
