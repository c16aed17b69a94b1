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
 * by d_w * d_x in f32. Packed panels of Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1 and the
 * super-block types are read by the kernels further below. */
#include <immintrin.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"
#include "kernels/simd512.h"
#include "kernels/team.h"
#include "util/util.h"

/* ---- shared ---------------------------------------------------------------- */

/* y[t * ldy + r] = the sum of acc[r][t], r < R, t < T (4 rows per hsum4) */
#define STORE_TILE(R, T, acc, y, ldy)                                                                      \
    do {                                                                                                   \
        const __m512 z_ = _mm512_setzero_ps();                                                             \
        for (int t = 0; t < (T); t++) {                                                                    \
            __m128 s_ = hsum4_512(acc[0][t], (R) > 1 ? acc[1 % (R)][t] : z_, (R) > 2 ? acc[2 % (R)][t] : z_, \
                                  (R) > 3 ? acc[3 % (R)][t] : z_);                                         \
            if ((R) == 4) _mm_storeu_ps((y) + t * (ldy), s_);                                               \
            else _mm_mask_storeu_ps((y) + t * (ldy), (__mmask8)((1u << (R)) - 1), s_);                     \
        }                                                                                                  \
    } while (0)

/* Token tiles: ceil(tb / tmax) tiles of near-equal size (17 tokens with
 * tmax 6 = 6+6+5), never a lone 1-token tile that wastes the registers. */
#define FOR_TOKEN_TILES(tb, tmax, T, i)                                                                    \
    for (int ntt_ = ((tb) + (tmax) - 1) / (tmax), i = 0, T = (tb) / ntt_ + (0 < (tb) % ntt_); i < ntt_;      \
         i++, T = (tb) / ntt_ + (i < (tb) % ntt_))

/* ---- bf16 ------------------------------------------------------------------ */

/* per token: ceil(cols / 32) chunks of 32 bf16 (single) or {hi[32], lo[32]}
 * (split), zero-padded */
static inline int bf16_chunks(int cols) { return (cols + 31) / 32; }

size_t rf_bf16_prep_avx512_bytes(int n, int cols, int single) {
    return (size_t)n * bf16_chunks(cols) * (single ? 64 : 128);
}

void rf_bf16_prep_avx512(void *xp, const float *X, int n, int cols, int single) {
    const int nc = bf16_chunks(cols);
    uint16_t *o = xp;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < nc; c++, o += single ? 32 : 64) {
            const float *x = X + (size_t)t * cols + c * 32;
            int m = cols - c * 32;
            __mmask16 k0 = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
            __mmask16 k1 = m >= 32 ? 0xFFFF : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1);
            __m512 a = _mm512_maskz_loadu_ps(k0, x), b = _mm512_maskz_loadu_ps(k1, x + 16);
            __m512bh hi = _mm512_cvtne2ps_pbh(b, a); /* a -> elements 0..15, b -> 16..31 */
            __m512i h = (__m512i)hi;
            _mm512_storeu_si512(o, h);
            if (single) continue;
            /* hi back to f32: bf16 is the top half of an f32 */
            __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
            __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
            __m512bh lo = _mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
            _mm512_storeu_si512(o + 32, (__m512i)lo);
        }
}

/* R x T tile, S = 1: split activations (two vdpbf16ps per weight vector and
 * token), S = 0: single. Registers: R*T accumulators + R weights + 1-2. */
static inline __attribute__((always_inline)) void bkern(const int S, const int R, const int T, const uint16_t *w,
                                                        size_t ldw, int cols, const uint16_t *x, size_t ldx,
                                                        float *y, size_t ldy) {
    __m512 acc[4][6];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int nc = bf16_chunks(cols);
    for (int c = 0; c < nc; c++) {
        int m = cols - c * 32;
        __m512bh wv[4];
        if (m >= 32) /* (masked loads only for the tail: in the main loop they cost time) */
            for (int r = 0; r < R; r++) wv[r] = (__m512bh)_mm512_loadu_si512(w + r * ldw + c * 32);
        else /* the last chunk's tail: zeros beyond cols */
            for (int r = 0; r < R; r++)
                wv[r] = (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1u << m) - 1), w + r * ldw + c * 32);
        for (int t = 0; t < T; t++) {
            const uint16_t *xc = x + t * ldx + (size_t)c * (S ? 64 : 32);
            __m512bh xh = (__m512bh)_mm512_loadu_si512(xc);
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xh);
            if (S) {
                __m512bh xl = (__m512bh)_mm512_loadu_si512(xc + 32);
                for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv[r], xl);
            }
        }
    }
    STORE_TILE(R, T, acc, y, ldy);
}

#define BK_T(S, R)                                                       \
    switch (T) {                                                         \
    case 1: bkern(S, R, 1, w, ldw, cols, x, ldx, y, ldy); break;         \
    case 2: bkern(S, R, 2, w, ldw, cols, x, ldx, y, ldy); break;         \
    case 3: bkern(S, R, 3, w, ldw, cols, x, ldx, y, ldy); break;         \
    case 4: bkern(S, R, 4, w, ldw, cols, x, ldx, y, ldy); break;         \
    case 5: bkern(S, R, 5, w, ldw, cols, x, ldx, y, ldy); break;         \
    default: bkern(S, R, 6, w, ldw, cols, x, ldx, y, ldy); break;        \
    }
#define BK_RT(S)                \
    switch (R) {                \
    case 1: BK_T(S, 1); break;  \
    case 2: BK_T(S, 2); break;  \
    case 3: BK_T(S, 3); break;  \
    default: BK_T(S, 4); break; \
    }
static void btile(int single, int R, int T, const uint16_t *w, size_t ldw, int cols, const uint16_t *x, size_t ldx,
                  float *y, size_t ldy) {
    if (single) {
        BK_RT(0);
    } else {
        BK_RT(1);
    }
}

/* Row tiles of 4 x token tiles of up to 6: each weight vector is loaded once
 * per tile and used for all its tokens (weight-stationary in registers);
 * tokens in blocks that keep their activations in L2 while a thread's rows
 * stream past. The 4 rows (4 x cols x 2 bytes) stay in L1 for the next token
 * tile, so W is read from memory once per call. */
void rf_bf16_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single) {
    const int cols = W->cols;
    const size_t ldx = (size_t)bf16_chunks(cols) * (single ? 32 : 64);
    const uint16_t *X = xp, *w0 = W->data;
    const int tbmax = rf_token_block(ldx * 2);
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4, t = t0;
            FOR_TOKEN_TILES(tb, 6, T, i) {
                btile(single, R, T, w0 + (size_t)r * cols, cols, cols, X + (size_t)t * ldx, ldx,
                      Y + (size_t)t * ldy + r, ldy);
                t += T;
            }
        }
    }
}

/* ---- bf16, packed panels ------------------------------------------------------ */

/* The layout (matmul_pack.c): 16-row panels, vector j holding row r's
 * column pair (2j, 2j + 1) in lane r (2j in the low half). The kernel
 * widens each vector to two f32 vectors (column 2j: a shift, 2j + 1: a
 * mask; bf16 is the top half of an f32, so both are exact) and multiplies
 * them with the token's x[2j], x[2j + 1] broadcast: 16-wide FMAs whose
 * accumulators hold 16 outputs, no horizontal sums, each widened vector
 * shared by all T tokens of the tile.
 * Why FMAs and not vdpbf16ps (32 multiply-adds per instruction): on some
 * CPUs (Emerald Rapids among them) vdpbf16ps retires a quarter as many
 * instructions per second as 16-wide FMAs, so the FMAs do twice the
 * multiply-adds per second once a call is compute-bound. Which kernel wins
 * is a per-CPU choice (matmul_bf16dp_avx512.c, `refusion tune`; figures:
 * docs/benchmarks.md). */

size_t rf_bf16p_prep_avx512_bytes(int n, int cols) { return (size_t)n * ((cols + 1) / 2 * 2) * sizeof(float); }

/* x itself (split: f32-grade), or x rounded to bf16 (single: the
 * documented rounding of rf_matmul_bf16_act, the same numbers at every n),
 * pair-major: the columns 2j, 2j + 1 of token t at [(j * n + t) * 2] (a zero
 * pads an odd cols), so that a tile's tokens sit at constant offsets from
 * one pointer per column pair (token-major, a 16-token tile needed a
 * pointer register per token) */
void rf_bf16p_prep_avx512(void *xp, const float *X, int n, int cols, int single, int part, int parts) {
    const int k2 = (cols + 1) / 2;
    int c0, c1; /* this share's 16-column chunks */
    rf_share((cols + 15) / 16, part, parts, &c0, &c1);
    float *o = xp;
    for (int t = 0; t < n; t++) {
        const float *x = X + (size_t)t * cols;
        for (int c = 16 * c0; c < 16 * c1; c += 16) {
            int m = cols - c;
            __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
            __m512 v = _mm512_maskz_loadu_ps(k, x + c);
            if (single) /* round to nearest even bf16 and back: the top 16 bits */
                v = _mm512_castsi512_ps(
                    _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
            _Alignas(64) float pairs[16];
            _mm512_store_ps(pairs, v);
            for (int j = c / 2, e = j + 8 < k2 ? j + 8 : k2; j < e; j++)
                memcpy(o + ((size_t)j * n + t) * 2, pairs + 2 * (j - c / 2), 2 * sizeof(float));
        }
    }
}

/* Every weight stream runs this many bytes ahead of itself in software
 * prefetches (into L1 or L2, rf_prefetch_stream; one per 64-byte line; a
 * prefetch past the end of W is harmless): the hardware prefetchers alone leave the wide calls at the sum
 * of the memory time and the compute time, and the 1-token calls below the
 * bandwidth. 2 KiB: 1 KiB gains less, 4 KiB no more (docs/benchmarks.md). */
#define PF_AHEAD 2048
/* The same for the kernels that stream only one or two panels at a time
 * (the blocks-outside Q8_0 / Q4_0 order, the K-quant panels, bf16 tiles of
 * one or two panels): fewer streams need each further ahead to keep as
 * many bytes in flight, and a wide call consumes a stream slowly, so a
 * line prefetched 2 KiB ahead arrives late. */
#define PF_AHEAD_FEW 4096

/* The bytes [at, at + len) of P panel streams (panel bytes apart),
 * prefetched PF_AHEAD_FEW ahead; near a panel's end into the same stream of
 * the group `next` panels on rather than into the start of the neighbouring
 * panel, which this group read at its first bytes: otherwise the next
 * group's streams begin cold. */
static inline __attribute__((always_inline)) void prefetch_panels(const uint8_t *w, size_t panel, int P, int next,
                                                                  size_t at, size_t len) {
    for (int p = 0; p < P; p++)
        for (size_t l = 0; l < len; l += 64) {
            const size_t off = at + PF_AHEAD_FEW + l;
            rf_prefetch_stream(off < panel ? w + p * panel + off : w + (next + p) * panel + (off - panel));
        }
}

/* the widest bf16 token tile */
#define BP_MAX_T 16

/* P panels x T tokens; x: the tile's first token in column pair 0, the
 * pairs ps floats apart (the prep's pair-major layout) */
static inline __attribute__((always_inline)) void pkern(const int P, const int T, const uint16_t *w, size_t panel,
                                                        int k2, const float *x, size_t ps, float *y, size_t ldy,
                                                        int rows_left) {
    __m512 acc[6][BP_MAX_T];
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    const __m512i top = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int j = 0; j < k2; j++) {
        __m512 we[6], wo[6];
        for (int p = 0; p < P; p++) {
            rf_prefetch_stream((const char *)(w + p * panel + (size_t)j * 32) + (P <= 2 ? PF_AHEAD_FEW : PF_AHEAD));
            __m512i v = _mm512_load_si512(w + p * panel + (size_t)j * 32);
            we[p] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); /* column 2j */
            wo[p] = _mm512_castsi512_ps(_mm512_and_si512(v, top)); /* column 2j + 1 */
        }
        const float *xj = x + (size_t)j * ps;
        for (int t = 0; t < T; t++) {
            __m512 xe = _mm512_set1_ps(xj[2 * t]), xo = _mm512_set1_ps(xj[2 * t + 1]);
            for (int p = 0; p < P; p++) acc[p][t] = _mm512_fmadd_ps(wo[p], xo, _mm512_fmadd_ps(we[p], xe, acc[p][t]));
        }
    }
    for (int p = 0; p < P; p++) {
        int m = rows_left - 16 * p;
        __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, k, acc[p][t]);
    }
}

/* Panels per tile for T tokens: P*T accumulators + 2P widened weights + 2
 * broadcasts within the 32 registers. One expression, so that the
 * dispatch can use it as a constant. Two panels up to 13 tokens (26 + 4 +
 * 2 registers), where each broadcast feeds two FMAs, which makes calls of
 * 9-13 tokens clearly cheaper than one panel (16 tokens: one panel). At
 * 3-8 tokens the most panels the registers allow (6, 5, 4, 3, 3, 3) gain
 * nothing over these (docs/benchmarks.md). */
#define BP_PANELS(T) ((T) <= 2 ? 6 : (T) == 3 ? 5 : (T) == 4 ? 4 : (T) <= 6 ? 3 : (T) <= 13 ? 2 : 1)

#define PK(P, T) pkern(P, T, w, panel, k2, x, ps, y, ldy, rows_left)
#define PK_P(T)                                                \
    do {                                                       \
        enum { PM_ = BP_PANELS(T) };                           \
        if (P == PM_) PK(PM_, T);                              \
        else if (P == 4) PK(4 < PM_ ? 4 : PM_, T);             \
        else if (P == 2) PK(2 < PM_ ? 2 : PM_, T);             \
        else PK(1, T);                                         \
    } while (0)
/* P is BP_PANELS(T), or 4, 2, 1 for a group's last panels */
static void ptile(int P, int T, const uint16_t *w, size_t panel, int k2, const float *x, size_t ps, float *y,
                  size_t ldy, int rows_left) {
    switch (T) {
    case 1: PK_P(1); break;
    case 2: PK_P(2); break;
    case 3: PK_P(3); break;
    case 4: PK_P(4); break;
    case 5: PK_P(5); break;
    case 6: PK_P(6); break;
    case 7: PK_P(7); break;
    case 8: PK_P(8); break;
    case 9: PK_P(9); break;
    case 10: PK_P(10); break;
    case 11: PK_P(11); break;
    case 12: PK_P(12); break;
    case 13: PK_P(13); break;
    case 14: PK_P(14); break;
    case 15: PK_P(15); break;
    default: PK_P(BP_MAX_T); break;
    }
}

/* Panel groups outside, token tiles inside: a group of G panels (G =
 * BP_PANELS(the largest tile)) is streamed from memory by the first token
 * tile and meets the call's other tiles from L2 (G x 16 rows x cols x 2
 * bytes: 64 KB at cols 1024), so each weight is read from memory once per
 * call whatever n is. (Token tiles outside would walk a thread's whole
 * chunk per tile: the lm head's chunks, ~19 MB at the 0.6B shape, would
 * come from memory again for each 8 tokens.) */
void rf_bf16p_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int cols = W->cols, k2 = (cols + 1) / 2;
    const size_t ps = (size_t)n * 2;        /* floats from a column pair to the next */
    const size_t panel = (size_t)k2 * 32;   /* in uint16 */
    const uint16_t *pk = W->packed;
    const float *X = xp;
    /* near-equal tiles of up to BP_MAX_T: 20 = 10 + 10 */
    const int ntt = (n + BP_MAX_T - 1) / BP_MAX_T, tmax = (n + ntt - 1) / ntt;
    const int group = 16 * BP_PANELS(tmax);
    for (int g = a; g < b; g += group) {
        const int ge = b - g < group ? b : g + group;
        for (int t0 = 0, i = 0; i < ntt; i++) {
            int T = n / ntt + (i < n % ntt);
            for (int r = g; r < ge;) {
                int left = (ge - r + 15) / 16, P = rf_stream_panels(BP_PANELS(T), T);
                if (left < P) P = left >= 4 && P > 4 ? 4 : left >= 2 ? 2 : 1;
                ptile(P, T, pk + (size_t)(r / 16) * panel, panel, k2, X + (size_t)t0 * 2, ps,
                      Y + (size_t)t0 * ldy + r, ldy, b - r);
                r += 16 * P;
            }
            t0 += T;
        }
    }
}

/* ---- f32 / f16 ------------------------------------------------------------- */

/* 16 weights at element offset off (f32 or f16), lanes >= m zero */
static inline __attribute__((always_inline)) __m512 fload16(rf_dtype dt, const void *w, size_t off, __mmask16 k) {
    if (dt == RF_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const uint16_t *)w + off));
    return _mm512_maskz_loadu_ps(k, (const float *)w + off);
}

/* R x T tile of 16-wide FMAs, weights converted in registers once per tile */
static inline __attribute__((always_inline)) void fkern(rf_dtype dt, const int R, const int T, const void *w,
                                                        size_t ldw, int cols, const float *x, size_t ldx, float *y,
                                                        size_t ldy) {
    __m512 acc[4][6];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= cols; c += 16) {
        __m512 wv[4];
        for (int r = 0; r < R; r++)
            wv[r] = dt == RF_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + r * ldw + c)))
                                 : _mm512_loadu_ps((const float *)w + r * ldw + c);
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * ldx + c);
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (c < cols) { /* the tail, masked: zeros beyond cols */
        __mmask16 k = (__mmask16)((1u << (cols - c)) - 1);
        __m512 wv[4];
        for (int r = 0; r < R; r++) wv[r] = fload16(dt, w, r * ldw + c, k);
        for (int t = 0; t < T; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(k, x + t * ldx + c);
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    STORE_TILE(R, T, acc, y, ldy);
}

#define FK_T(DT, R)                                                      \
    switch (T) {                                                         \
    case 1: fkern(DT, R, 1, w, ldw, cols, x, ldx, y, ldy); break;        \
    case 2: fkern(DT, R, 2, w, ldw, cols, x, ldx, y, ldy); break;        \
    case 3: fkern(DT, R, 3, w, ldw, cols, x, ldx, y, ldy); break;        \
    case 4: fkern(DT, R, 4, w, ldw, cols, x, ldx, y, ldy); break;        \
    case 5: fkern(DT, R, 5, w, ldw, cols, x, ldx, y, ldy); break;        \
    default: fkern(DT, R, 6, w, ldw, cols, x, ldx, y, ldy); break;       \
    }
#define FK_RT(DT)                \
    switch (R) {                 \
    case 1: FK_T(DT, 1); break;  \
    case 2: FK_T(DT, 2); break;  \
    case 3: FK_T(DT, 3); break;  \
    default: FK_T(DT, 4); break; \
    }
static void ftile(rf_dtype dt, int R, int T, const void *w, size_t ldw, int cols, const float *x, size_t ldx,
                  float *y, size_t ldy) {
    if (dt == RF_F16) {
        FK_RT(RF_F16);
    } else {
        FK_RT(RF_F32);
    }
}

void rf_float_range_avx512(float *Y, size_t ldy, const float *X, const rf_mat *W, int n, int a, int b) {
    const int cols = W->cols;
    const size_t esz = W->dtype == RF_F16 ? 2 : 4;
    const int tbmax = rf_token_block((size_t)cols * 4);
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r += 4) {
            int R = b - r < 4 ? b - r : 4, t = t0;
            FOR_TOKEN_TILES(tb, 6, T, i) {
                ftile(W->dtype, R, T, (const char *)W->data + (size_t)r * cols * esz, cols, cols,
                      X + (size_t)t * cols, cols, Y + (size_t)t * ldy + r, ldy);
                t += T;
            }
        }
    }
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------- */

/* one pair of 32-blocks of one token, 192 bytes */
typedef struct {
    int8_t q[64];     /* the quantised activations (signed) */
    float dx[16];     /* lanes 0-7: the first block's scale, 8-15: the second's */
    int32_t init[16]; /* -off * sum(x) of each block in lanes 0 and 8, else 0 (off: see load_wpair) */
} xq_pair;

static inline int n_pairs(int cols) { return (cols / RF_QK + 1) / 2; }

size_t rf_q_prep_avx512_bytes(int n, int cols) { return (size_t)n * n_pairs(cols) * sizeof(xq_pair); }

void rf_q_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype wdt) {
    const int nb = cols / RF_QK, np = n_pairs(cols), off = wdt == RF_Q8_0 ? 128 : 8;
    xq_pair *o = xp;
    for (int t = 0; t < n; t++)
        for (int p = 0; p < np; p++, o++) {
            memset(o, 0, sizeof *o);
            for (int h = 0; h < 2 && 2 * p + h < nb; h++) { /* odd block count: the second half stays zero */
                const float *x = X + (size_t)t * cols + (2 * p + h) * RF_QK;
                __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
                float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
                const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                __m512i qa = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(id)),
                                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m512i qb = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(b, _mm512_set1_ps(id)),
                                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m128i ba = _mm512_cvtepi32_epi8(qa), bb = _mm512_cvtepi32_epi8(qb);
                int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
                _mm256_storeu_si256((__m256i *)(o->q + 32 * h), _mm256_set_m128i(bb, ba));
                for (int i = 0; i < 8; i++) o->dx[8 * h + i] = d;
                o->init[8 * h] = -off * sum;
            }
        }
}

/* two weight blocks (2p, 2p + 1) of one row as unsigned bytes u = w + off
 * [block 2p | block 2p + 1] (Q8_0: off = 128, w ^ 0x80; Q4_0: off = 8, the
 * nibbles as stored) and their scales; the second is zero when it does not
 * exist (odd block count). vpdpbusd(init, u, x) = u . x - off * sum(x) = w . x. */
static inline __attribute__((always_inline)) void load_wpair(rf_dtype dt, const char *row, int p, int nb,
                                                             __m512i *wq, __m512 *dw) {
    int two = 2 * p + 1 < nb;
    uint16_t d[2];
    if (dt == RF_Q8_0) {
        const rf_block_q8_0 *blk = (const rf_block_q8_0 *)row + 2 * p;
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
        *wq = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
        d[0] = blk[0].d, d[1] = two ? blk[1].d : 0;
    } else {
        const rf_block_q4_0 *blk = (const rf_block_q4_0 *)row + 2 * p;
        __m128i q0 = _mm_loadu_si128((const __m128i *)blk[0].qs);
        __m128i q1 = two ? _mm_loadu_si128((const __m128i *)blk[1].qs) : _mm_setzero_si128();
        __m256i q = _mm256_set_m128i(q1, q0), m = _mm256_set1_epi8(0x0F);
        __m256i lo = _mm256_and_si256(q, m), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
        /* [lo0 lo1 hi0 hi1] -> [lo0 hi0 lo1 hi1] (128-bit lanes): weight order */
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        *wq = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
        d[0] = blk[0].d, d[1] = two ? blk[1].d : 0;
    }
    /* both f16 scales at once (F16C), each broadcast over its 8 lanes */
    __m128 ds = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d[0] | (uint32_t)d[1] << 16)));
    *dw = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                _mm512_castps128_ps512(ds));
}

/* R x T tile: per block pair and (row, token) one vpdpbusd (64 MACs), one
 * conversion and two f32 multiplies; each weight pair is unpacked once per
 * tile and used for all T tokens. */
static inline __attribute__((always_inline)) void qkern(rf_dtype dt, const int R, const int T, const char *w,
                                                        size_t wstride, int nb, const xq_pair *x, size_t xstride,
                                                        float *y, size_t ldy) {
    __m512 acc[4][6];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int np = (nb + 1) / 2;
    for (int p = 0; p < np; p++) {
        __m512i wq[4];
        __m512 dw[4];
        for (int r = 0; r < R; r++) load_wpair(dt, w + r * wstride, p, nb, &wq[r], &dw[r]);
        for (int t = 0; t < T; t++) {
            const xq_pair *xb = x + t * xstride + p;
            __m512i xv = _mm512_loadu_si512(xb->q), init = _mm512_loadu_si512(xb->init);
            __m512 dx = _mm512_loadu_ps(xb->dx);
            for (int r = 0; r < R; r++) {
                __m512i s = _mm512_dpbusd_epi32(init, wq[r], xv);
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dx), dw[r], acc[r][t]);
            }
        }
    }
    STORE_TILE(R, T, acc, y, ldy);
}

/* R <= 4 with T <= 4, or R <= 3 with T <= 6 (registers: R*T + 2R + 3) */
#define QK_T(DT, R)                                                      \
    switch (T) {                                                         \
    case 1: qkern(DT, R, 1, w, ws, nb, x, xs, y, ldy); break;            \
    case 2: qkern(DT, R, 2, w, ws, nb, x, xs, y, ldy); break;            \
    case 3: qkern(DT, R, 3, w, ws, nb, x, xs, y, ldy); break;            \
    case 4: qkern(DT, R, 4, w, ws, nb, x, xs, y, ldy); break;            \
    case 5: qkern(DT, R, (R > 3 ? 4 : 5), w, ws, nb, x, xs, y, ldy); break; \
    default: qkern(DT, R, (R > 3 ? 4 : 6), w, ws, nb, x, xs, y, ldy); break; \
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

/* n <= 4: 4 rows x n tokens (4 rows in flight for the memory-bound case);
 * more tokens: 3 rows x token tiles of up to 6 (weight-stationary: each
 * unpacked weight pair meets 6 tokens). */
void rf_q_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK, np = n_pairs(W->cols);
    const size_t ws = rf_dtype_row_bytes(W->dtype, W->cols);
    const xq_pair *X = xp;
    const char *w0 = W->data;
    const int tbmax = rf_token_block((size_t)np * sizeof(xq_pair));
    const int RT = n <= 4 ? 4 : 3, TT = n <= 4 ? 4 : 6;
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        int tb = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r += RT) {
            int R = b - r < RT ? b - r : RT, t = t0;
            FOR_TOKEN_TILES(tb, TT, T, i) {
                qtile(W->dtype, R, T, w0 + r * ws, ws, nb, X + (size_t)t * np, np, Y + (size_t)t * ldy + r, ldy);
                t += T;
            }
        }
    }
}

/* ---- Q8_0, packed panels ------------------------------------------------------ */

/* The layout (matmul_pack.c): per 16-row panel and 32-block, vector g
 * holds in lane r the 4 weights of columns 4g..4g+3 as unsigned bytes
 * w + 128. One vpdpbusd of vector g with a token's 4 int8 activations
 * broadcast adds 4 products to 16 outputs: no horizontal sums, and each
 * weight vector serves all tokens of the tile. */

/* one 32-block of one token: the int8 activations, their scale, and
 * -off * sum(q) (the weights' offset, 128 for Q8_0 and 8 for Q4_0, folded
 * into the integer dot; for the types with mins (Q4_1, Q5_1, Q4_K, Q5_K)
 * dx sum(q) in f32, the factor of the block's or chunk's min). The
 * 16-column types (Q6_K, Q3_K, Q2_K) take the sums of the two halves apart,
 * as init's low and high 16 bits: the block stays at 40 bytes, which
 * every type's wide calls read (44, with the halves apart, gave Q6_K no
 * clear gain, and 16-token calls of Q8_0 and Q4_0 models ran up to a few
 * percent slower in noisy runs). A call's blocks lie block-major: block b of token
 * t at [b * n + t], so that a tile's tokens sit at constant offsets from
 * one pointer (token-major, the kernels below ran out of registers for a
 * pointer per token and spilled them into vector registers: 4 extra vmovq
 * per 16 vpdpbusd) */
typedef struct {
    int8_t q[32];
    float dx;
    union {
        int32_t init;
        float dxsum;
    };
} xq_block;

size_t rf_q8p_prep_avx512_bytes(int n, int cols) { return (size_t)n * (cols / RF_QK) * sizeof(xq_block); }

void rf_q8p_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype wdt, int part, int parts) {
    /* the weights' offset (see the pack; IQ4_NL / IQ4_XS: their levels
     * shuffled to level + 128; Q5_0: its levels 0..31 are w + 16); Q4_K,
     * Q5_K, Q4_1, Q5_1: dxsum = dx sum(q), which the kernel scales by the
     * block's or chunk's min; Q6_K, Q3_K, Q2_K: the sums of the two
     * 16-column halves (|sum| <= 2032) as init's low and high 16 bits */
    const int nb = cols / RF_QK,
              off = wdt == RF_Q8_0 || wdt == RF_IQ4_NL || wdt == RF_IQ4_XS ? 128
                    : wdt == RF_Q4_0                                       ? 8
                    : wdt == RF_Q5_0                                       ? 16
                                                                           : 0; /* the others: unused */
    int b0, b1;
    rf_share(nb, part, parts, &b0, &b1);
    for (int t = 0; t < n; t++)
        for (int b = b0; b < b1; b++) { /* the same rounding as rf_q_prep_avx512 */
            xq_block *o = (xq_block *)xp + (size_t)b * n + t;
            const float *x = X + (size_t)t * cols + b * RF_QK;
            __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
            const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            __m512i qa = _mm512_cvtps_epi32(
                _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m512i qc = _mm512_cvtps_epi32(
                _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)o->q, _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128((__m128i *)(o->q + 16), _mm512_cvtepi32_epi8(qc));
            o->dx = d;
            const int32_t sa = _mm512_reduce_add_epi32(qa), sc = _mm512_reduce_add_epi32(qc);
            if (wdt == RF_Q4_1 || wdt == RF_Q5_1 || wdt == RF_Q4_K || wdt == RF_Q5_K)
                o->dxsum = d * (float)(sa + sc);
            else if (wdt == RF_Q6_K || wdt == RF_Q3_K || wdt == RF_Q2_K)
                o->init = (int32_t)((uint32_t)(uint16_t)sa | (uint32_t)sc << 16);
            else
                o->init = -off * (sa + sc);
        }
}

/* ---- Q4_0, packed panels ------------------------------------------------------ */

/* The layout (matmul_pack.c): nibble pairs of 16 rows x 4 columns per
 * vector; two ANDs and a shift give the groups v and 4 + v as bytes for
 * vpdpbusd, once per tile for all its tokens (qpkern below serves both
 * formats). */

/* 1 for the types whose weights carry a min (Q4_1 / Q5_1: d q + m; Q4_K
 * / Q5_K: d sc q - dmin m): their integer dots start at 0 and the min
 * comes in in f32, times the token's dx sum(x_q) (dxsum) */
static inline int qp_has_min(rf_dtype dt) { return dt == RF_Q4_K || dt == RF_Q5_K || dt == RF_Q4_1 || dt == RF_Q5_1; }

/* the start of a token's integer dot with a block: x's init (the weights'
 * offset folded in), or 0 for the types whose min comes in in f32 */
static inline __attribute__((always_inline)) __m512i qdot_init(const rf_dtype dt, const xq_block *x) {
    return qp_has_min(dt) ? _mm512_setzero_si512() : _mm512_set1_epi32(x->init);
}

/* The 32-block panel types, each expanded by M(DT) with DT a constant, so
 * that every kernel is compiled once per type (IQ4_XS, read in chunks of
 * 32 columns by the panel-group order only, is dispatched there) */
#define QP_DISPATCH(dt, M)                                                                                   \
    if ((dt) == RF_Q8_0) M(RF_Q8_0) else if ((dt) == RF_IQ4_NL) M(RF_IQ4_NL) else if ((dt) == RF_Q4_1)     \
        M(RF_Q4_1) else if ((dt) == RF_Q5_0) M(RF_Q5_0) else if ((dt) == RF_Q5_1) M(RF_Q5_1) else M(RF_Q4_0)

/* the 16 rows' d of a 32-block panel's block wb (matmul_impl.h
 * rf_qp_scales_at), and the f16 m that follow them */
static inline __attribute__((always_inline)) __m512 qp_d(const rf_dtype dt, const uint8_t *wb) {
    if (rf_qp_f16_scales(dt)) return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + rf_qp_scales_at(dt))));
    return _mm512_load_ps((const float *)(wb + rf_qp_scales_at(dt)));
}
static inline __attribute__((always_inline)) __m512 qp_m(const rf_dtype dt, const uint8_t *wb) {
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(wb + rf_qp_scales_at(dt) + 32)));
}

/* acc plus one 32-block's share for a token x: the integer dot ia times
 * dw dx, and for Q4_1 / Q5_1 their m (mw) times dx sum(x_q) */
static inline __attribute__((always_inline)) __m512 qp_fold(const rf_dtype dt, __m512 acc, __m512i ia, __m512 dw,
                                                            __m512 mw, const xq_block *x) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(dw, _mm512_set1_ps(x->dx)), acc);
    if (dt == RF_Q4_1 || dt == RF_Q5_1) acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(x->dxsum), acc);
    return acc;
}

/* Vector v of a panel's 32-block wb as vpdpbusd's unsigned bytes: Q8_0's
 * column group v (lo); the 4-bit types' groups v (lo) and 4 + v (hi).
 * Q4_1 / Q5_0 / Q5_1: the nibbles as Q4_0's, Q5's fifth bits ORed in as
 * bit 4 (as Q5_K's). IQ4_NL / IQ4_XS: the nibbles are indexes; a byte
 * shuffle (vpshufb, the 16-entry table in each 128-bit lane) maps them to
 * level + 128, unsigned as Q8_0's weights (x's init = -128 sum(x) takes
 * the 128 off again: still an exact integer dot, |u x| <= 241 x 127 per
 * product, no saturation in vpdpbusd). */
static inline __attribute__((always_inline)) void qgroups(const rf_dtype dt, const uint8_t *wb, int v, __m512i *lo,
                                                          __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m10 = _mm512_set1_epi8(0x10);
    static const uint8_t iq4[16] = {RF_IQ4NL_U8};
    const __m512i q = _mm512_load_si512(wb + v * 64);
    if (dt == RF_Q8_0) {
        *lo = q;
        return;
    }
    *lo = _mm512_and_si512(q, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
    if (dt == RF_IQ4_NL || dt == RF_IQ4_XS) { /* nibbles index the table */
        const __m512i tbl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4));
        *lo = _mm512_shuffle_epi8(tbl, *lo), *hi = _mm512_shuffle_epi8(tbl, *hi);
    }
    if (dt == RF_Q5_K || dt == RF_Q5_0 || dt == RF_Q5_1) {
        /* the fifth bits: vector v's at bits v and 4 + v of the block's (chunk's) bit vector */
        const __m512i h = _mm512_load_si512(wb + 256);
        *lo = _mm512_or_si512(*lo, _mm512_and_si512(_mm512_slli_epi16(h, 4 - v), m10));
        *hi = _mm512_or_si512(*hi, _mm512_and_si512(_mm512_srli_epi16(h, v), m10));
    }
}

/* One 32-block of P panels for T tokens: ia[p][t] = the integer dot of
 * panel p's block with token t's (x[t]), the weights' offset folded
 * in through x's init (Q5_0's 16: init = -16 sum(x); the mins of Q4_1 /
 * Q5_1 in f32, qp_fold): 8 vpdpbusd of the 8 column groups, each vector
 * unpacked once for all tokens. Both loop orders below (panel groups
 * outside, blocks outside) run it. */
static inline __attribute__((always_inline)) void qblock_dot(const rf_dtype dt, const int P, const int T,
                                                             const uint8_t *wb, size_t panel, const xq_block *x,
                                                             __m512i ia[][8]) {
    for (int t = 0; t < T; t++) {
        const __m512i init = qdot_init(dt, x + t);
        for (int p = 0; p < P; p++) ia[p][t] = init;
    }
    for (int v = 0; v < (dt == RF_Q8_0 ? 8 : 4); v++) {
        __m512i lo[8], hi[8];
        for (int p = 0; p < P; p++) qgroups(dt, wb + p * panel, v, &lo[p], &hi[p]);
        for (int t = 0; t < T; t++) {
            int32_t ql, qh;
            memcpy(&ql, x[t].q + 4 * v, 4);
            __m512i xl = _mm512_set1_epi32(ql);
            for (int p = 0; p < P; p++) ia[p][t] = _mm512_dpbusd_epi32(ia[p][t], lo[p], xl);
            if (dt != RF_Q8_0) {
                memcpy(&qh, x[t].q + 16 + 4 * v, 4);
                __m512i xh = _mm512_set1_epi32(qh);
                for (int p = 0; p < P; p++) ia[p][t] = _mm512_dpbusd_epi32(ia[p][t], hi[p], xh);
            }
        }
    }
}

/* P panels x T tokens of a 32-block panel type or IQ4_XS (dt, a constant at every call site;
 * x: the tile's first token in block 0, a block's tokens bs apart):
 * per block an integer accumulator per (panel, token), 8 vpdpbusd of the
 * 8 column groups (Q4_0: 4 vectors, each unpacked into groups v and 4 + v
 * once for all tokens), then one conversion and one FMA into the f32 sum */
static inline __attribute__((always_inline)) void qpkern(const rf_dtype dt, const int P, const int T,
                                                         const uint8_t *w, size_t panel, int nb, const xq_block *x,
                                                         size_t bs, float *y, size_t ldy, int rows_left,
                                                         const uint8_t *pf, int pmod, int prem) {
    /* IQ4_XS: block b is chunk b % 8 of super-block b / 8; its prefetches
     * take an eighth of a super-block per chunk (block) */
    const int xs = dt == RF_IQ4_XS;
    const size_t block = xs ? RF_IQ4XSP_SB / 8 : rf_qp_block_bytes(dt);
    __m512 acc[8][8];
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i ia[8][8];
        const uint8_t *ws = xs ? w + (size_t)(b / 8) * RF_IQ4XSP_SB : NULL; /* IQ4_XS: the super-block */
        const uint8_t *wb = xs ? ws + 256 * (b % 8) : w + (size_t)b * block;
        if (!pf) /* a single pass: each panel's stream PF_AHEAD bytes ahead; near
                  * its end, into the same stream of the next tile (P panels
                  * on) rather than into the neighbouring panel, which this
                  * tile is reading: a panel is only nb blocks (10 KiB for
                  * Q4_0 at 1024 columns), and a tile whose streams began
                  * cold spent a fifth of it waiting */
            for (int p = 0; p < P; p++)
                for (size_t l = 0; l < block; l += 64) {
                    const size_t off = (size_t)b * block + PF_AHEAD + l;
                    const uint8_t *a = off < panel ? w + p * panel + off : w + (P + p) * panel + (off - panel);
                    rf_prefetch_stream(a);
                }
        else /* this tile's share (every pmod-th line) of the next group's block b, into L2: a few per block */
            for (int p = 0; p < P; p++)
                for (size_t l = (size_t)prem * 64; l < block; l += (size_t)pmod * 64)
                    _mm_prefetch((const char *)pf + p * panel + b * block + l, _MM_HINT_T1);
        const xq_block *xb = x + (size_t)b * bs;
        qblock_dot(dt, P, T, wb, panel, xb, ia);
        for (int p = 0; p < P; p++) {
            /* IQ4_XS: d (ls - 32) from the chunk's scale bytes and the rows' d */
            const __m512 dw = xs ? _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(
                                                     (const __m128i *)(ws + p * panel + 2048 + 16 * (b % 8))))),
                                                 _mm512_load_ps((const float *)(ws + p * panel + 2176)))
                                 : qp_d(dt, wb + p * panel),
                         mw = qp_has_min(dt) ? qp_m(dt, wb + p * panel) : dw;
            for (int t = 0; t < T; t++) acc[p][t] = qp_fold(dt, acc[p][t], ia[p][t], dw, mw, xb + t);
        }
    }
    for (int p = 0; p < P; p++) {
        int m = rows_left - 16 * p;
        __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, k, acc[p][t]);
    }
}

/* Panels per tile: 2*P*T accumulators + P (Q8_0) or 2P (Q4_0, IQ4_NL)
 * weight vectors within the 32 registers (IQ4_NL: Q4_0's, one more for its
 * shuffle table). One expression, so that the dispatch
 * below can use it as a constant. */
#define QP_PANELS(DT, T)                                                                                    \
    ((DT) == RF_Q8_0 ? ((T) == 1 ? 8 : (T) == 2 ? 5 : (T) == 3 ? 4 : (T) == 4 ? 3 : (T) <= 6 ? 2 : 1)     \
                     : ((T) == 1 ? 6 : (T) == 2 ? 4 : (T) == 3 ? 3 : (T) <= 6 ? 2 : 1))

#define QPK(DT, P, T) qpkern(DT, P, T, w, panel, nb, x, bs, y, ldy, rows_left, pf, pmod, prem)
#define QPK_P(DT, T)                                                                                  \
    do {                                                                                              \
        enum { PM_ = QP_PANELS(DT, T) };                                                              \
        if (P == PM_) QPK(DT, PM_, T);                                                                \
        else if (P == 4) QPK(DT, 4 < PM_ ? 4 : PM_, T);                                               \
        else if (P == 2) QPK(DT, 2 < PM_ ? 2 : PM_, T);                                               \
        else QPK(DT, 1, T);                                                                           \
    } while (0)
#define QPK_T(DT)                  \
    switch (T) {                   \
    case 1: QPK_P(DT, 1); break;   \
    case 2: QPK_P(DT, 2); break;   \
    case 3: QPK_P(DT, 3); break;   \
    case 4: QPK_P(DT, 4); break;   \
    case 5: QPK_P(DT, 5); break;   \
    case 6: QPK_P(DT, 6); break;   \
    case 7: QPK_P(DT, 7); break;   \
    default: QPK_P(DT, 8); break;  \
    }
/* P is QP_PANELS(dt, T), or 4, 2, 1 for a range's last panels */
#define QPK_TYPE(DT) { QPK_T(DT) }
static void qptile(rf_dtype dt, int P, int T, const uint8_t *w, size_t panel, int nb, const xq_block *x, size_t bs,
                   float *y, size_t ldy, int rows_left, const uint8_t *pf, int pmod, int prem) {
    if (dt == RF_IQ4_XS) QPK_TYPE(RF_IQ4_XS)
    else QP_DISPATCH(dt, QPK_TYPE)
}

/* ---- up to 16 tokens: the weights stationary, the sums in registers --------------
 *
 * Calls of more tokens than one panel-group tile holds and at most
 * QS_MAX_N (Q8_0 5..16, the other 32-block types 7..16): one token tile,
 * so each weight streams from memory once, PF_AHEAD_FEW ahead. Per block,
 * P panels' 8 vectors are loaded (unpacked) once; per token, each panel's
 * integer dot runs in one register and is folded at once into the token's
 * f32 sums, which stay in registers for the whole row (2 panels up to 8
 * tokens, 1 panel up to 16: 16 sums and 8 to 16 weight vectors). The
 * blocks-outside order below keeps its sums in a buffer, a load and a store
 * per block, panel and token. On a Zen 4 this order is 3-12% faster on an
 * L3-resident Q8_0 matrix at every width, and whole forward calls of the
 * grown 0.6B model at 12 and 16 tokens 2-16% faster, at 5..8 within the
 * runs' spread (docs/benchmarks.md). Past 16 tokens the tiles would
 * re-read the panels and the weights' stream would stall between them: the
 * blocks-outside order is faster there. */
#define QS_MAX_N 16
#define QS_PANELS(T) ((T) <= 8 ? 2 : 1)

/* P panels x T tokens (P <= QS_PANELS(T)); x: the tile's first token in
 * block 0, a block's n tokens apart */
static inline __attribute__((always_inline)) void qskern(const rf_dtype dt, const int P, const int T,
                                                         const uint8_t *w, size_t panel, int nb, const xq_block *x,
                                                         int n, float *y, size_t ldy, int rows_left) {
    const size_t block = rf_qp_block_bytes(dt);
    __m512 acc[2][QS_MAX_N];
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * block;
        prefetch_panels(w, panel, P, P, (size_t)b * block, block);
        __m512i wv[2][8];
        __m512 dw[2], mw[2];
        for (int p = 0; p < P; p++) {
            for (int v = 0; v < (dt == RF_Q8_0 ? 8 : 4); v++) /* Q8_0 has no hi */
                qgroups(dt, wb + p * panel, v, &wv[p][v], &wv[p][dt == RF_Q8_0 ? v : 4 + v]);
            dw[p] = qp_d(dt, wb + p * panel);
            mw[p] = qp_has_min(dt) ? qp_m(dt, wb + p * panel) : dw[p];
        }
        const xq_block *xb = x + (size_t)b * n;
        /* unrolled, or the compiler keeps the sums in memory */
#pragma GCC unroll 16
        for (int t = 0; t < T; t++) {
            __m512i ia[2];
            for (int p = 0; p < P; p++) ia[p] = qdot_init(dt, xb + t);
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) { /* group v: Q8_0's vector v; the 4-bit types' lo (v < 4) or hi nibbles */
                int32_t q;
                memcpy(&q, xb[t].q + 4 * v, 4);
                const __m512i xv = _mm512_set1_epi32(q);
                for (int p = 0; p < P; p++) ia[p] = _mm512_dpbusd_epi32(ia[p], wv[p][v], xv);
            }
            for (int p = 0; p < P; p++) acc[p][t] = qp_fold(dt, acc[p][t], ia[p], dw[p], mw[p], xb + t);
        }
    }
    for (int p = 0; p < P; p++) {
        const int m = rows_left - 16 * p;
        const __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, k, acc[p][t]);
    }
}

#define QS_P(DT, T)                                                                           \
    do {                                                                                      \
        if (P == 2 && QS_PANELS(T) == 2) qskern(DT, 2, T, w, panel, nb, X, n, y, ldy, b - r); \
        else qskern(DT, 1, T, w, panel, nb, X, n, y, ldy, b - r);                             \
    } while (0)
#define QS_T(DT)                                                                                               \
    switch (n) {                                                                                               \
    case 5: QS_P(DT, 5); break;   case 6: QS_P(DT, 6); break;   case 7: QS_P(DT, 7); break;                    \
    case 8: QS_P(DT, 8); break;   case 9: QS_P(DT, 9); break;   case 10: QS_P(DT, 10); break;                  \
    case 11: QS_P(DT, 11); break; case 12: QS_P(DT, 12); break; case 13: QS_P(DT, 13); break;                  \
    case 14: QS_P(DT, 14); break; case 15: QS_P(DT, 15); break; default: QS_P(DT, 16); break;                  \
    }

#define QS_TYPE(DT) { QS_T(DT) }

/* rows [a, b) for 5 <= n <= QS_MAX_N tokens (one tile); the last panel
 * alone when P panels would pass b */
static void qs_range(float *Y, size_t ldy, const xq_block *X, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK;
    const size_t panel = (size_t)nb * rf_qp_block_bytes(W->dtype);
    const rf_dtype dt = W->dtype;
    for (int r = a, P; r < b; r += 16 * P) {
        P = (b - r + 15) / 16 < QS_PANELS(n) ? 1 : QS_PANELS(n);
        const uint8_t *w = (const uint8_t *)W->packed + (size_t)(r / 16) * panel;
        float *y = Y + r;
        QP_DISPATCH(dt, QS_TYPE)
    }
}

/* ---- a few tokens: the weight blocks outside, the token tiles inside ------------
 *
 * Calls of QS_MAX_N + 1..BO_MAX_N tokens (17..128).
 * The panel-group order below (rf_qp_range_avx512's own) reads a group's
 * weights from memory in its first token tile and brings the next group in
 * with software prefetches spread over the other tiles, and a few-token
 * call spends its time at those prefetches. Here BO_PANELS panels' weights
 * stream once, block after block, in address order, each stream prefetched
 * PF_AHEAD_FEW bytes ahead, and every token tile meets a block while it is in
 * L1; the group's f32 sums live in a small buffer (a load, FMA and store
 * per block, panel and token, against 8 vpdpbusd). 2 panels: 3 were no
 * better at 8 tokens and worse at 16 on the Xeons, and about 0.6 of two
 * panels' speed at 8 and 16 on a Zen 4 (docs/benchmarks.md), measured when
 * this order served those widths; not measured at 17..128. Up to
 * 128 tokens (a short prompt's prefill, a wide draft, a prefill that
 * carries the rolling slot's masks)
 * this order is as fast as the panel-group order or faster, and a call
 * just past 64 tokens costs no more than one of 64 (figures:
 * docs/benchmarks.md). */
#define BO_PANELS 2
_Static_assert(BO_PANELS <= 2, "qp_range_blocks copies two vectors of sums per token");
#define BO_MAX_N 128 /* Q8_0 and Q4_0; the sums buffer (16 KiB on the stack) */

/* one block of BO_PANELS (P) panels for one tile of T tokens: the integer
 * dot of each (panel, token), scaled into acc[t][16 p] */
static inline __attribute__((always_inline)) void qbkern(const rf_dtype dt, const int P, const int T,
                                                         const uint8_t *wb, size_t panel, const xq_block *x,
                                                         float *acc) {
    __m512i ia[BO_PANELS][8];
    qblock_dot(dt, P, T, wb, panel, x, ia);
    for (int p = 0; p < P; p++) {
        const __m512 dw = qp_d(dt, wb + p * panel), mw = qp_has_min(dt) ? qp_m(dt, wb + p * panel) : dw;
        for (int t = 0; t < T; t++) {
            float *a = acc + (size_t)t * 16 * BO_PANELS + 16 * p;
            _mm512_store_ps(a, qp_fold(dt, _mm512_load_ps(a), ia[p][t], dw, mw, x + t));
        }
    }
}

#define QB_T(DT, P)                                                                                \
    switch (T) {                                                                                   \
    case 1: qbkern(DT, P, 1, wb, panel, xb, a); break;                                             \
    case 2: qbkern(DT, P, 2, wb, panel, xb, a); break;                                             \
    case 3: qbkern(DT, P, 3, wb, panel, xb, a); break;                                             \
    case 4: qbkern(DT, P, 4, wb, panel, xb, a); break;                                             \
    case 5: qbkern(DT, P, 5, wb, panel, xb, a); break;                                             \
    case 6: qbkern(DT, P, 6, wb, panel, xb, a); break;                                             \
    case 7: qbkern(DT, P, 7, wb, panel, xb, a); break;                                             \
    default: qbkern(DT, P, 8, wb, panel, xb, a); break;                                            \
    }

#define QB_TYPE(DT) { if (P == BO_PANELS) QB_T(DT, BO_PANELS) else QB_T(DT, 1) }

/* P (BO_PANELS or fewer at the range's end) panels from w, all n tokens,
 * into acc[n][16 BO_PANELS]: blocks outside, near-equal tiles of <= 8
 * tokens inside */
static void qbgroup(rf_dtype dt, int P, const uint8_t *w, size_t panel, int nb, const xq_block *X, int n,
                    float *acc) {
    const size_t block = rf_qp_block_bytes(dt);
    const int ntt = (n + 7) / 8;
    for (int b = 0; b < nb; b++) {
        const uint8_t *wb = w + (size_t)b * block;
        prefetch_panels(w, panel, P, BO_PANELS, (size_t)b * block, block); /* the next group BO_PANELS on */
        for (int t0 = 0, i = 0; i < ntt; i++) {
            const int T = n / ntt + (i < n % ntt);
            const xq_block *xb = X + (size_t)b * n + t0;
            float *a = acc + (size_t)t0 * 16 * BO_PANELS;
            QP_DISPATCH(dt, QB_TYPE)
            t0 += T;
        }
    }
}

static void qp_range_blocks(float *Y, size_t ldy, const xq_block *X, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK;
    const size_t panel = (size_t)nb * rf_qp_block_bytes(W->dtype);
    const uint8_t *pk = W->packed;
    _Alignas(64) float acc[BO_MAX_N * 16 * BO_PANELS];
    for (int r = a, P; r < b; r += 16 * P) {
        P = (b - r + 15) / 16 < BO_PANELS ? 1 : BO_PANELS;
        memset(acc, 0, sizeof(float) * (size_t)n * 16 * BO_PANELS);
        qbgroup(W->dtype, P, pk + (size_t)(r / 16) * panel, panel, nb, X, n, acc);
        /* two masked vector copies per token: a memcpy of these 128 bytes
         * compiles to rep movsq, whose start-up cost is a visible share of a
         * wide call */
        const int m = b - r < 16 * P ? b - r : 16 * P;
        const __mmask16 k0 = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1),
                        k1 = m >= 32 ? 0xFFFF : m <= 16 ? 0 : (__mmask16)((1u << (m - 16)) - 1);
        for (int t = 0; t < n; t++) {
            const float *s = acc + (size_t)t * 16 * BO_PANELS;
            float *y = Y + (size_t)t * ldy + r;
            _mm512_mask_storeu_ps(y, k0, _mm512_load_ps(s));
            if (k1) _mm512_mask_storeu_ps(y + 16, k1, _mm512_load_ps(s + 16));
        }
    }
}

/* ---- Q4_K, Q5_K and IQ4_XS, packed panels ---------------------------------------
 *
 * The layout (matmul_pack.c): per panel and 256-column super-block, the 8
 * chunks' nibbles as Q4_0's (Q5_K: each chunk's followed by its fifth bits,
 * merged into the nibbles as bit 4), then the chunks' scales and mins as
 * bytes and the rows' d and dmin. Per chunk, the integer dot of each
 * (panel, token) as Q4_0's (qblock_dot), then per (panel, token) one conversion and two
 * FMAs: the scale d sc times the token's dx, and the min dmin m times dx
 * sum(x_q). IQ4_XS: the nibbles through IQ4_NL's table (qblock_dot), one
 * FMA with the signed scale d (ls - 32) and no min. The blocks-outside
 * order of qp_range_blocks, for every width:
 * the f32 sums of KP_PANELS panels and up to KP_MAX_N tokens in a buffer
 * (the row's super-blocks stream once per KP_MAX_N tokens). */
#define KP_PANELS 2
#define KP_MAX_N 64

/* chunk c (wc: its nibbles in panel 0) of P panels for T tokens (x: the
 * chunk's first token); sc: the chunk's scale bytes in panel 0 (mins 128
 * on); d: the super-block's d in panel 0 (dmin 16 floats on). IQ4_XS: the
 * scales are signed (ls - 32) and there are no mins; its integer dots
 * carry the levels' offset 128 folded in through x's init (qblock_dot) */
static inline __attribute__((always_inline)) void qkp_kern(const rf_dtype dt, const int P, const int T,
                                                           const uint8_t *wc, const uint8_t *sc, const float *d,
                                                           size_t panel, const xq_block *x, float *acc) {
    __m512i ia[KP_PANELS][8];
    qblock_dot(dt, P, T, wc, panel, x, ia);
    for (int p = 0; p < P && dt == RF_IQ4_XS; p++) {
        const __m512 scale = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + p * panel)))),
            _mm512_load_ps((const float *)((const uint8_t *)d + p * panel)));
        for (int t = 0; t < T; t++) {
            float *a = acc + (size_t)t * 16 * KP_PANELS + 16 * p;
            _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[p][t]), _mm512_mul_ps(scale, _mm512_set1_ps(x[t].dx)),
                                               _mm512_load_ps(a)));
        }
    }
    for (int p = 0; p < P && dt != RF_IQ4_XS; p++) {
        const uint8_t *s = sc + p * panel;
        const float *dp = (const float *)((const uint8_t *)d + p * panel);
        const __m512 scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)s))),
                                           _mm512_load_ps(dp)),
                     min = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + 128)))),
                                         _mm512_load_ps(dp + 16));
        for (int t = 0; t < T; t++) {
            float *a = acc + (size_t)t * 16 * KP_PANELS + 16 * p;
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[p][t]), _mm512_mul_ps(scale, _mm512_set1_ps(x[t].dx)),
                                       _mm512_load_ps(a));
            _mm512_store_ps(a, _mm512_fnmadd_ps(min, _mm512_set1_ps(x[t].dxsum), v));
        }
    }
}

#define QKP_T(DT, P)                                                                               \
    switch (T) {                                                                                   \
    case 1: qkp_kern(DT, P, 1, wc, sc, d, panel, xb, a); break;                                    \
    case 2: qkp_kern(DT, P, 2, wc, sc, d, panel, xb, a); break;                                    \
    case 3: qkp_kern(DT, P, 3, wc, sc, d, panel, xb, a); break;                                    \
    case 4: qkp_kern(DT, P, 4, wc, sc, d, panel, xb, a); break;                                    \
    case 5: qkp_kern(DT, P, 5, wc, sc, d, panel, xb, a); break;                                    \
    case 6: qkp_kern(DT, P, 6, wc, sc, d, panel, xb, a); break;                                    \
    case 7: qkp_kern(DT, P, 7, wc, sc, d, panel, xb, a); break;                                    \
    default: qkp_kern(DT, P, 8, wc, sc, d, panel, xb, a); break;                                   \
    }

/* P panels of Q4_K, Q5_K or IQ4_XS from w, tokens [t0, t0 + m) of the
 * call's n, into acc[m][16 KP_PANELS]: super-blocks outside, near-equal
 * tiles of <= 8 tokens inside. Q5_K's panel is Q4_K's with 64 more bytes
 * per chunk (its fifth bits), so its scales, mins and d sit further on;
 * IQ4_XS's has no mins, so its d sits 128 bytes nearer. */
static void qkp_group(rf_dtype dt, int P, const uint8_t *w, size_t panel, int nsb, const xq_block *X, int n, int t0,
                      int m, float *acc) {
    const int ntt = (m + 7) / 8, q5 = dt == RF_Q5_K, xs = dt == RF_IQ4_XS;
    const size_t sb = q5 ? RF_Q5KP_SB : xs ? RF_IQ4XSP_SB : RF_Q4KP_SB, chunk = q5 ? 320 : 256;
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ws = w + (size_t)s * sb;
        prefetch_panels(w, panel, P, KP_PANELS, (size_t)s * sb, sb); /* the next group KP_PANELS on */
        const float *d = (const float *)(ws + 8 * chunk + (xs ? 128 : 256));
        for (int c = 0; c < 8; c++) {
            const uint8_t *wc = ws + chunk * c, *sc = ws + 8 * chunk + 16 * c;
            for (int i = 0, u = 0; i < ntt; i++) {
                const int T = m / ntt + (i < m % ntt);
                const xq_block *xb = X + (size_t)(8 * s + c) * n + t0 + u;
                float *a = acc + (size_t)u * 16 * KP_PANELS;
                if (q5) {
                    if (P == KP_PANELS) QKP_T(RF_Q5_K, KP_PANELS) else QKP_T(RF_Q5_K, 1)
                } else if (xs) {
                    if (P == KP_PANELS) QKP_T(RF_IQ4_XS, KP_PANELS) else QKP_T(RF_IQ4_XS, 1)
                } else {
                    if (P == KP_PANELS) QKP_T(RF_Q4_K, KP_PANELS) else QKP_T(RF_Q4_K, 1)
                }
                u += T;
            }
        }
    }
}

/* P panels of Q4_K, Q5_K or IQ4_XS for T <= 8 tokens over all nsb
 * super-blocks, the P x T sums in registers (qkp_kern's arithmetic, the
 * same expressions), stored to y (token t at y + t ldy, panel p's rows 16
 * p on, masks k0 and k1) */
static inline __attribute__((always_inline)) void qkp_row(const rf_dtype dt, const int P, const int T,
                                                          const uint8_t *w, size_t panel, int nsb, const xq_block *x,
                                                          int n, float *y, size_t ldy, __mmask16 k0, __mmask16 k1) {
    const int q5 = dt == RF_Q5_K, xs = dt == RF_IQ4_XS;
    const size_t sb = q5 ? RF_Q5KP_SB : xs ? RF_IQ4XSP_SB : RF_Q4KP_SB, chunk = q5 ? 320 : 256;
    __m512 acc[KP_PANELS][8];
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ws = w + (size_t)s * sb;
        prefetch_panels(w, panel, P, P, (size_t)s * sb, sb); /* the next group P panels on */
        const float *d = (const float *)(ws + 8 * chunk + (xs ? 128 : 256));
        for (int c = 0; c < 8; c++) {
            const uint8_t *wc = ws + chunk * c, *sc = ws + 8 * chunk + 16 * c;
            const xq_block *xc = x + (size_t)(8 * s + c) * n;
            __m512i ia[KP_PANELS][8];
            qblock_dot(dt, P, T, wc, panel, xc, ia);
            for (int p = 0; p < P; p++) {
                const float *dp = (const float *)((const uint8_t *)d + p * panel);
                if (xs) {
                    const __m512 scale = _mm512_mul_ps(
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + p * panel)))),
                        _mm512_load_ps(dp));
                    for (int t = 0; t < T; t++)
                        acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[p][t]),
                                                    _mm512_mul_ps(scale, _mm512_set1_ps(xc[t].dx)), acc[p][t]);
                } else {
                    const uint8_t *sp = sc + p * panel;
                    const __m512 scale = _mm512_mul_ps(
                                     _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)sp))),
                                     _mm512_load_ps(dp)),
                                 min = _mm512_mul_ps(
                                     _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(sp + 128)))),
                                     _mm512_load_ps(dp + 16));
                    for (int t = 0; t < T; t++) {
                        __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[p][t]), _mm512_mul_ps(scale, _mm512_set1_ps(xc[t].dx)),
                                                   acc[p][t]);
                        acc[p][t] = _mm512_fnmadd_ps(min, _mm512_set1_ps(xc[t].dxsum), v);
                    }
                }
            }
        }
    }
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, k0, acc[0][t]);
        if (P > 1 && k1) _mm512_mask_storeu_ps(y + (size_t)t * ldy + 16, k1, acc[1][t]);
    }
}

#define QKR_T(DT, P)                                                                   \
    switch (T) {                                                                       \
    case 1: qkp_row(DT, P, 1, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 2: qkp_row(DT, P, 2, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 3: qkp_row(DT, P, 3, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 4: qkp_row(DT, P, 4, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 5: qkp_row(DT, P, 5, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 6: qkp_row(DT, P, 6, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    case 7: qkp_row(DT, P, 7, w, panel, nsb, x, n, y, ldy, k0, k1); break;             \
    default: qkp_row(DT, P, 8, w, panel, nsb, x, n, y, ldy, k0, k1); break;            \
    }

/* rows [a, b) of Q4_K, Q5_K or IQ4_XS for all n tokens: one panel at a
 * time, near-equal tiles of up to 8 tokens inside (the later tiles read
 * the panel from L1 / L2), each tile's sums in registers. Calls of
 * KP4_MIN_N tokens or more: narrower ones stream the weights faster two
 * panels at a time (qkp_group; at 151936x1024, 2 threads, this order
 * took 1.06-1.12x their time at 2 and 3 tokens, 0.99-1.03x at 4,
 * 0.88-0.95x at 6, 0.86-0.93x at 8) */
#define KP4_MIN_N 5
static void qkp_rows(rf_dtype dt, const uint8_t *pk, size_t panel, int nsb, const xq_block *X, int n, float *Y,
                     size_t ldy, int a, int b) {
    const int ntt = (n + 7) / 8;
    for (int r = a; r < b; r += 16) {
        const __mmask16 k0 = b - r >= 16 ? 0xFFFF : (__mmask16)((1u << (b - r)) - 1), k1 = 0;
        const uint8_t *w = pk + (size_t)(r / 16) * panel;
        for (int i = 0, t0 = 0; i < ntt; i++) {
            const int T = n / ntt + (i < n % ntt);
            const xq_block *x = X + t0;
            float *y = Y + (size_t)t0 * ldy + r;
            if (dt == RF_Q5_K) QKR_T(RF_Q5_K, 1)
            else if (dt == RF_IQ4_XS) QKR_T(RF_IQ4_XS, 1)
            else QKR_T(RF_Q4_K, 1)
            t0 += T;
        }
    }
}

/* ---- Q6_K, Q3_K and Q2_K, packed panels ----------------------------------------
 *
 * The layouts (matmul_pack.c): per panel and 256-column super-block, 8
 * chunks of 32 columns (Q6_K: its low nibbles as a Q4_0 panel and its high
 * bit pairs in two vectors; Q3_K: its 2-bit levels in two vectors and the
 * high bits in a third; Q2_K: the 2-bit levels); then the 16-column scales
 * as bytes and the rows' d (Q2_K: and dmin). Per chunk and (panel, token)
 * two integer dots, the chunk's first 16 columns (the low nibbles' groups)
 * and its last 16, each with the weights' offset (Q6_K 32, Q3_K 4) folded
 * in through the token's half sums (rf_q8p_prep_avx512 keeps them in
 * init's two 16-bit halves); then two conversions, the scales, and one FMA
 * by the token's dx; Q2_K's mins by two more FMAs with the half sums. One
 * panel at a time, each tile's f32 sums in registers over the whole row
 * (the sums of Q4_K's order in a buffer, loaded and stored per chunk and
 * token, cost a wide call 7-10%): tiles of up to 8 tokens with two integer
 * accumulators per token (k16p_row), or one tile of 9..16 tokens with the
 * chunk's levels in registers (k16p_row_wide). */

/* the unsigned levels of chunk wc's column groups v (lo: of its first 16
 * columns) and 4 + v (hi: of its last 16) */
static inline __attribute__((always_inline)) void k16_levels(const rf_dtype dt, const uint8_t *wc, int v, __m512i *lo,
                                                             __m512i *hi) {
    if (dt == RF_Q6_K) {
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        const __m512i q = _mm512_load_si512(wc + 64 * v), h = _mm512_load_si512(wc + 256 + 64 * (v / 2));
        const __m512i hl = v & 1 ? h : _mm512_slli_epi16(h, 4), hh = v & 1 ? _mm512_srli_epi16(h, 2) : _mm512_slli_epi16(h, 2);
        /* AND-OR pairs: one vpternlogd for each measured 1% slower at 8 and 16 tokens on a Zen 4 */
        *lo = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(hl, m30));
        *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), _mm512_and_si512(hh, m30));
        return;
    }
    const __m512i m3 = _mm512_set1_epi8(3);
    *lo = _mm512_and_si512(_mm512_srli_epi16(_mm512_load_si512(wc), 2 * v), m3);
    *hi = _mm512_and_si512(_mm512_srli_epi16(_mm512_load_si512(wc + 64), 2 * v), m3);
    if (dt == RF_Q3_K) { /* the high bits v and 4 + v to bit 2 */
        const __m512i h = _mm512_load_si512(wc + 128), m4 = _mm512_set1_epi8(4);
        *lo = _mm512_or_si512(*lo, _mm512_and_si512(v <= 2 ? _mm512_slli_epi16(h, 2 - v) : _mm512_srli_epi16(h, v - 2), m4));
        *hi = _mm512_or_si512(*hi, _mm512_and_si512(_mm512_srli_epi16(h, v + 2), m4));
    }
}

/* the two integer dots of chunk wc for T tokens (x: the chunk's first
 * token, the call's tokens 1 apart): ia[0][t] of its first 16 columns,
 * ia[1][t] of its last 16, the weights' offset folded in through x's half
 * sums */
static inline __attribute__((always_inline)) void k16p_dots(const rf_dtype dt, const int T, const uint8_t *wc,
                                                            const xq_block *x, __m512i ia[2][8]) {
    const int off = dt == RF_Q6_K ? 32 : dt == RF_Q3_K ? 4 : 0;
    for (int t = 0; t < T; t++) {
        ia[0][t] = _mm512_set1_epi32(-off * (int16_t)(x[t].init & 0xFFFF));
        ia[1][t] = _mm512_set1_epi32(-off * (x[t].init >> 16));
    }
    for (int v = 0; v < 4; v++) {
        __m512i lo, hi;
        k16_levels(dt, wc, v, &lo, &hi);
        for (int t = 0; t < T; t++) {
            int32_t ql, qh;
            memcpy(&ql, x[t].q + 4 * v, 4);
            memcpy(&qh, x[t].q + 16 + 4 * v, 4);
            ia[0][t] = _mm512_dpbusd_epi32(ia[0][t], lo, _mm512_set1_epi32(ql));
            ia[1][t] = _mm512_dpbusd_epi32(ia[1][t], hi, _mm512_set1_epi32(qh));
        }
    }
}

/* the rows' scales of a chunk's two halves, d times its scale bytes sc
 * (Q2_K: the low nibbles; m0 / m1 its mins, dmin times the high ones) */
static inline __attribute__((always_inline)) void k16p_scales(const rf_dtype dt, const uint8_t *sc, const float *d,
                                                              __m512 *s0, __m512 *s1, __m512 *m0, __m512 *m1) {
    const __m512 dv = _mm512_load_ps(d);
    const __m512i b0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sc)),
                  b1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sc + 16)));
    *s0 = _mm512_mul_ps(_mm512_cvtepi32_ps(b0), dv), *s1 = _mm512_mul_ps(_mm512_cvtepi32_ps(b1), dv), *m0 = *s0, *m1 = *s1;
    if (dt == RF_Q2_K) { /* scale in the low nibble, min in the high one (the byte sign-extended: masks) */
        const __m512i m15 = _mm512_set1_epi32(15);
        const __m512 dm = _mm512_load_ps(d + 16);
        *s0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b0, m15)), dv);
        *s1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b1, m15)), dv);
        *m0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(b0, 4), m15)), dm);
        *m1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(b1, 4), m15)), dm);
    }
}

/* one token's sum r plus a chunk's share: the two dots times their
 * scales, times the token's dx (Q2_K: less its mins times dx and the half sums) */
static inline __attribute__((always_inline)) __m512 k16p_fold(const rf_dtype dt, __m512 r, __m512i i0, __m512i i1,
                                                              __m512 s0, __m512 s1, __m512 m0, __m512 m1,
                                                              const xq_block *x) {
    const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), s0, _mm512_mul_ps(_mm512_cvtepi32_ps(i1), s1));
    r = _mm512_fmadd_ps(f, _mm512_set1_ps(x->dx), r);
    if (dt == RF_Q2_K) {
        r = _mm512_fnmadd_ps(m0, _mm512_set1_ps(x->dx * (float)(int16_t)(x->init & 0xFFFF)), r);
        r = _mm512_fnmadd_ps(m1, _mm512_set1_ps(x->dx * (float)(x->init >> 16)), r);
    }
    return r;
}

/* one panel w for T tokens over all nsb super-blocks, the T sums in
 * registers (x: the tile's first token in block 0, a block's tokens n
 * apart), stored to y (token t at y + t ldy, the rows of mask k): no sums
 * loaded and stored per chunk, nor zeroed and copied per call */
static inline __attribute__((always_inline)) void k16p_row(const rf_dtype dt, const int T, const uint8_t *w, int nsb,
                                                           const xq_block *x, int n, float *y, size_t ldy,
                                                           __mmask16 k) {
    const size_t sb = rf_kp_sb_bytes(dt), chunk = rf_k16p_chunk(dt);
    __m512 acc[8];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ws = w + (size_t)s * sb;
        for (size_t l = 0; l < sb; l += 64) /* PF_AHEAD_FEW bytes ahead, into the next panel near the end */
            rf_prefetch_stream(ws + PF_AHEAD_FEW + l);
        const float *d = (const float *)(ws + 8 * chunk + 256);
        for (int c = 0; c < 8; c++) {
            const xq_block *xc = x + (size_t)(8 * s + c) * n;
            __m512i ia[2][8];
            k16p_dots(dt, T, ws + chunk * c, xc, ia);
            __m512 s0, s1, m0, m1;
            k16p_scales(dt, ws + 8 * chunk + 32 * c, d, &s0, &s1, &m0, &m1);
            for (int t = 0; t < T; t++) acc[t] = k16p_fold(dt, acc[t], ia[0][t], ia[1][t], s0, s1, m0, m1, xc + t);
        }
    }
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy, k, acc[t]);
}

/* T (K16W_MIN..K16_MAX_T) tokens of one panel, the tokens outside: per
 * chunk the 8 level vectors unpacked once into registers and the scales
 * made once, then per token its two integer dots (4 vpdpbusd each) folded
 * at once into its sum (8 levels, 16 sums, 2 dots and the scales fill the
 * 32 registers). One tile for a call of 9..16 tokens instead of two tiles
 * of up to 8, which unpacked each chunk twice: on a Zen 5, Q6_K calls of
 * 12 and 16 tokens took 0.81-0.89x the time (docs/benchmarks.md); at 5..8
 * tokens this order was 5% faster on an L3-resident matrix and 2% slower
 * at the lm head's shape, so those keep k16p_row. */
#define K16_MAX_T 16
#define K16W_MIN 9
static inline __attribute__((always_inline)) void k16p_row_wide(const rf_dtype dt, const int T, const uint8_t *w,
                                                                int nsb, const xq_block *x, int n, float *y,
                                                                size_t ldy, __mmask16 k) {
    const size_t sb = rf_kp_sb_bytes(dt), chunk = rf_k16p_chunk(dt);
    const int off = dt == RF_Q6_K ? 32 : dt == RF_Q3_K ? 4 : 0;
    __m512 acc[K16_MAX_T];
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int s = 0; s < nsb; s++) {
        const uint8_t *ws = w + (size_t)s * sb;
        for (size_t l = 0; l < sb; l += 64) rf_prefetch_stream(ws + PF_AHEAD_FEW + l);
        const float *d = (const float *)(ws + 8 * chunk + 256);
        for (int c = 0; c < 8; c++) {
            const xq_block *xc = x + (size_t)(8 * s + c) * n;
            __m512i lo[4], hi[4];
            for (int v = 0; v < 4; v++) k16_levels(dt, ws + chunk * c, v, &lo[v], &hi[v]);
            __m512 s0, s1, m0, m1;
            k16p_scales(dt, ws + 8 * chunk + 32 * c, d, &s0, &s1, &m0, &m1);
#pragma GCC unroll 16
            for (int t = 0; t < T; t++) {
                __m512i i0 = _mm512_set1_epi32(-off * (int16_t)(xc[t].init & 0xFFFF)),
                        i1 = _mm512_set1_epi32(-off * (xc[t].init >> 16));
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) {
                    int32_t ql, qh;
                    memcpy(&ql, xc[t].q + 4 * v, 4);
                    memcpy(&qh, xc[t].q + 16 + 4 * v, 4);
                    i0 = _mm512_dpbusd_epi32(i0, lo[v], _mm512_set1_epi32(ql));
                    i1 = _mm512_dpbusd_epi32(i1, hi[v], _mm512_set1_epi32(qh));
                }
                acc[t] = k16p_fold(dt, acc[t], i0, i1, s0, s1, m0, m1, xc + t);
            }
        }
    }
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy, k, acc[t]);
}

/* a tile of T tokens: up to 8 with two integer accumulators per token,
 * K16W_MIN and more with the chunk's levels in registers */
#define K16_T(DT)                                                   \
    switch (T) {                                                    \
    case 1: k16p_row(DT, 1, w, nsb, x, n, y, ldy, k); break;        \
    case 2: k16p_row(DT, 2, w, nsb, x, n, y, ldy, k); break;        \
    case 3: k16p_row(DT, 3, w, nsb, x, n, y, ldy, k); break;        \
    case 4: k16p_row(DT, 4, w, nsb, x, n, y, ldy, k); break;        \
    case 5: k16p_row(DT, 5, w, nsb, x, n, y, ldy, k); break;        \
    case 6: k16p_row(DT, 6, w, nsb, x, n, y, ldy, k); break;        \
    case 7: k16p_row(DT, 7, w, nsb, x, n, y, ldy, k); break;        \
    case 8: k16p_row(DT, 8, w, nsb, x, n, y, ldy, k); break;        \
    case 9: k16p_row_wide(DT, 9, w, nsb, x, n, y, ldy, k); break;   \
    case 10: k16p_row_wide(DT, 10, w, nsb, x, n, y, ldy, k); break; \
    case 11: k16p_row_wide(DT, 11, w, nsb, x, n, y, ldy, k); break; \
    case 12: k16p_row_wide(DT, 12, w, nsb, x, n, y, ldy, k); break; \
    case 13: k16p_row_wide(DT, 13, w, nsb, x, n, y, ldy, k); break; \
    case 14: k16p_row_wide(DT, 14, w, nsb, x, n, y, ldy, k); break; \
    case 15: k16p_row_wide(DT, 15, w, nsb, x, n, y, ldy, k); break; \
    default: k16p_row_wide(DT, 16, w, nsb, x, n, y, ldy, k); break; \
    }
_Static_assert(K16W_MIN == 9 && K16_MAX_T == 16, "K16_T's cases");

/* rows [a, b) of Q6_K, Q3_K or Q2_K for all n tokens: panels outside,
 * one tile of 9..16 tokens or near-equal tiles of up to 8 inside, each
 * tile's sums in registers over the whole row (the panel, 13 KiB for Q6_K
 * at 1024 columns, stays in L1 for the tiles after the first) */
static inline __attribute__((always_inline)) void k16p_rows_of(const rf_dtype dt, const uint8_t *pk, int nsb,
                                                               const xq_block *X, int n, float *Y, size_t ldy,
                                                               int a, int b) {
    const size_t panel = (size_t)nsb * rf_kp_sb_bytes(dt);
    const int ntt = n >= K16W_MIN && n <= K16_MAX_T ? 1 : (n + 7) / 8;
    for (int r = a; r < b; r += 16) {
        const __mmask16 k = b - r >= 16 ? 0xFFFF : (__mmask16)((1u << (b - r)) - 1);
        const uint8_t *w = pk + (size_t)(r / 16) * panel;
        for (int i = 0, t0 = 0; i < ntt; i++) {
            const int T = n / ntt + (i < n % ntt);
            const xq_block *x = X + t0;
            float *y = Y + (size_t)t0 * ldy + r;
            K16_T(dt)
            t0 += T;
        }
    }
}
/* one function per type, dt a constant in each: one type's kernels in a
 * function (the three in one made Q6_K's 1-token calls a quarter slower) */
static void k16p_rows(rf_dtype dt, const uint8_t *pk, int nsb, const xq_block *X, int n, float *Y, size_t ldy, int a,
                      int b) {
    if (dt == RF_Q6_K) k16p_rows_of(RF_Q6_K, pk, nsb, X, n, Y, ldy, a, b);
    else if (dt == RF_Q3_K) k16p_rows_of(RF_Q3_K, pk, nsb, X, n, Y, ldy, a, b);
    else k16p_rows_of(RF_Q2_K, pk, nsb, X, n, Y, ldy, a, b);
}

/* Q4_K, Q5_K, Q6_K, Q3_K, Q2_K or IQ4_XS panels: up to KP_PANELS panels
 * and KP_MAX_N tokens at a time (Q6_K, Q3_K, Q2_K: k16p_rows) */
static void kp_range(float *Y, size_t ldy, const xq_block *X, const rf_mat *W, int n, int a, int b) {
    const rf_dtype dt = W->dtype;
    const int nsb = W->cols / RF_QK_K;
    const size_t panel = (size_t)nsb * rf_kp_sb_bytes(dt);
    const uint8_t *pk = W->packed;
    if (dt == RF_Q6_K || dt == RF_Q3_K || dt == RF_Q2_K) {
        k16p_rows(dt, pk, nsb, X, n, Y, ldy, a, b);
        return;
    }
    if (n >= KP4_MIN_N) {
        qkp_rows(dt, pk, panel, nsb, X, n, Y, ldy, a, b);
        return;
    }
    _Alignas(64) float acc[KP_MAX_N * 16 * KP_PANELS];
    for (int r = a, P; r < b; r += 16 * P) {
        P = (b - r + 15) / 16 < KP_PANELS ? 1 : KP_PANELS;
        const int rows = b - r < 16 * P ? b - r : 16 * P;
        const __mmask16 k0 = rows >= 16 ? 0xFFFF : (__mmask16)((1u << rows) - 1),
                        k1 = rows >= 32 ? 0xFFFF : rows <= 16 ? 0 : (__mmask16)((1u << (rows - 16)) - 1);
        for (int t0 = 0; t0 < n; t0 += KP_MAX_N) {
            const int m = n - t0 < KP_MAX_N ? n - t0 : KP_MAX_N;
            memset(acc, 0, sizeof(float) * (size_t)m * 16 * KP_PANELS);
            qkp_group(W->dtype, P, pk + (size_t)(r / 16) * panel, panel, nsb, X, n, t0, m, acc);
            for (int t = 0; t < m; t++) {
                const float *s = acc + (size_t)t * 16 * KP_PANELS;
                float *y = Y + (size_t)(t0 + t) * ldy + r;
                _mm512_mask_storeu_ps(y, k0, _mm512_load_ps(s));
                if (k1) _mm512_mask_storeu_ps(y + 16, k1, _mm512_load_ps(s + 16));
            }
        }
    }
}

/* Panel groups outside, token tiles inside, as rf_bf16p_range_avx512 (each
 * weight read from memory once per call, the later tiles from L2). */
void rf_qp_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    /* IQ4_XS: calls of up to 6 tokens (one token tile) in Q4_0's panel
     * groups below, with the f32 sums in registers and up to 6 panels
     * streaming at once (the super-block order of kp_range streams 2 and
     * stays below the read bandwidth at 1 token); wider ones in kp_range */
    if (W->dtype == RF_Q4_K || W->dtype == RF_Q5_K || W->dtype == RF_Q6_K || W->dtype == RF_Q3_K || W->dtype == RF_Q2_K ||
        (W->dtype == RF_IQ4_XS && n > 6)) {
        kp_range(Y, ldy, xp, W, n, a, b);
        return;
    }
    const int nb = W->cols / RF_QK;
    const size_t panel = W->dtype == RF_IQ4_XS ? (size_t)(W->cols / RF_QK_K) * RF_IQ4XSP_SB
                                               : (size_t)nb * rf_qp_block_bytes(W->dtype);
    const uint8_t *pk = W->packed;
    const xq_block *X = xp;
    /* near-equal token tiles of up to 4 (Q8_0) or 6 (Q4_0): the tile sizes
     * closest to the vpdpbusd peak on an L2-resident matrix, ahead of tiles
     * of 8 (and, for Q4_0, of 4) */
    const int tcap = W->dtype == RF_Q8_0 ? 4 : 6;
    if (n > tcap && n <= QS_MAX_N) { /* more than one tile: below */
        qs_range(Y, ldy, X, W, n, a, b);
        return;
    }
    if (n > tcap && n <= BO_MAX_N) {
        qp_range_blocks(Y, ldy, X, W, n, a, b);
        return;
    }
    const int ntt = (n + tcap - 1) / tcap, tmax = (n + ntt - 1) / ntt;
    const int group = 16 * QP_PANELS(W->dtype, tmax) * (tmax > 4 ? 2 : 1);
    for (int g = a; g < b; g += group) {
        const int ge = b - g < group ? b : g + group;
        for (int t0 = 0, i = 0; i < ntt; i++) {
            int T = n / ntt + (i < n % ntt);
            for (int r = g; r < ge;) {
                int left = (ge - r + 15) / 16, P = rf_stream_panels(QP_PANELS(W->dtype, T), T);
                if (left < P) P = left >= 4 && P > 4 ? 4 : left >= 2 && P > 2 ? 2 : 1;
                /* the same panels of the next group, a 1/ntt share of their
                 * blocks per token tile: without it the first tile of each
                 * group waited for memory and the others for nothing (a
                 * 16-token call streamed at half the 1-token call's speed) */
                const uint8_t *pf = ntt > 1 && ge < b ? pk + (size_t)((r + group) / 16) * panel : NULL;
                qptile(W->dtype, P, T, pk + (size_t)(r / 16) * panel, panel, nb, X + t0, n,
                       Y + (size_t)t0 * ldy + r, ldy, b - r, pf, ntt, i);
                r += 16 * P;
            }
            t0 += T;
        }
    }
}
