/* matmul_bf16dp_avx512.c - the avx512 tier's second kernel for bf16 W in
 * 16-row panels (rf_mat_pack): vdpbf16ps on the packed vectors as they are.
 *
 * The panel layout already holds, in lane r of vector j, row r's column
 * pair (2j, 2j + 1) as two bf16 in one 32-bit lane: the operand vdpbf16ps
 * wants. A token's column pair (x[2j], x[2j + 1]) as two bf16 broadcast to
 * every lane makes one vdpbf16ps add 16 rows' two products into 16
 * accumulators: 32 multiply-adds per instruction, no widening, no
 * horizontal sums (rf_bf16p_range_avx512 widens to f32 and does 16 per FMA).
 *
 * Activations: single: x rounded to bf16 once (the same numbers the FMA
 * kernel multiplies, rf_matmul_bf16_act); split: x = hi + lo, both bf16
 * (|x - hi - lo| <= 2^-18 |x|), two vdpbf16ps per weight vector and token,
 * f32-grade. bf16 x bf16 products are exact in f32; the two kernels differ
 * only in the order and the rounding of the sums (vdpbf16ps adds a pair's
 * two products in one step, with denormals flushed), so their results
 * agree to f32 accumulation error, not bit for bit.
 *
 * Which of the two kernels is faster depends on the CPU: vdpbf16ps does
 * fewer multiply-adds per second than the FMAs on some CPUs (Emerald
 * Rapids) and more on others (AMD Zen 5), as the roofline probes show.
 * rf_matmul_bf16p_kernel picks; `refusion tune` measures (figures:
 * docs/benchmarks.md). */
#include <immintrin.h>
#include <string.h>

#include "kernels/matmul_impl.h"
#include "kernels/team.h"
#include "util/util.h"

/* 32-bit entries per token and column pair: hi (and lo when split) */
#define DP_S(single) ((single) ? 1 : 2)

size_t rf_bf16dp_prep_avx512_bytes(int n, int cols, int single) {
    return (size_t)n * ((cols + 1) / 2) * DP_S(single) * sizeof(uint32_t);
}

/* pair-major: token t's column pair j at [(j * n + t) * S] (hi, then lo),
 * so that a tile's tokens sit at constant offsets from one pointer per
 * pair; a zero pads an odd cols. Share part of parts: 16-column chunks. */
void rf_bf16dp_prep_avx512(void *xp, const float *X, int n, int cols, int single, int part, int parts) {
    const int k2 = (cols + 1) / 2, S = DP_S(single);
    int c0, c1;
    rf_share((cols + 15) / 16, part, parts, &c0, &c1);
    uint32_t *o = xp;
    for (int t = 0; t < n; t++) {
        const float *x = X + (size_t)t * cols;
        for (int c = 16 * c0; c < 16 * c1; c += 16) {
            int m = cols - c;
            __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
            __m512 v = _mm512_maskz_loadu_ps(k, x + c);
            __m256i hi = (__m256i)_mm512_cvtneps_pbh(v);
            _Alignas(32) uint32_t h[8], l[8];
            _mm256_store_si256((__m256i *)h, hi);
            if (!single) { /* the rest, rounded again: hi back to f32 is a shift */
                __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
                _mm256_store_si256((__m256i *)l, (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, hf)));
            }
            for (int j = c / 2, e = j + 8 < k2 ? j + 8 : k2; j < e; j++) {
                uint32_t *d = o + ((size_t)j * n + t) * S;
                d[0] = h[j - c / 2];
                if (!single) d[1] = l[j - c / 2];
            }
        }
    }
}

/* prefetch distance, as the FMA kernel's (matmul_avx512.c PF_AHEAD; twice
 * that for tiles of one or two panels, PF_AHEAD_FEW) */
#define DP_PF_AHEAD 2048
#define DP_MAX_T 16
#define DP_MAX_P 6

/* P panels x T tokens; x: the tile's first token in column pair 0, the
 * pairs ps entries apart */
static inline __attribute__((always_inline)) void dkern(const int S, const int P, const int T, const uint16_t *w,
                                                        size_t panel, int k2, const uint32_t *x, size_t ps, float *y,
                                                        size_t ldy, int rows_left) {
    __m512 acc[DP_MAX_P][DP_MAX_T];
    for (int p = 0; p < P; p++)
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int j = 0; j < k2; j++) {
        __m512bh wv[DP_MAX_P];
        for (int p = 0; p < P; p++) {
            rf_prefetch_stream((const char *)(w + p * panel + (size_t)j * 32) + (P <= 2 ? 2 * DP_PF_AHEAD : DP_PF_AHEAD));
            wv[p] = (__m512bh)_mm512_load_si512(w + p * panel + (size_t)j * 32);
        }
        const uint32_t *xj = x + (size_t)j * ps;
        for (int t = 0; t < T; t++) {
            __m512bh xh = (__m512bh)_mm512_set1_epi32((int)xj[S * t]);
            for (int p = 0; p < P; p++) acc[p][t] = _mm512_dpbf16_ps(acc[p][t], wv[p], xh);
            if (S == 2) {
                __m512bh xl = (__m512bh)_mm512_set1_epi32((int)xj[S * t + 1]);
                for (int p = 0; p < P; p++) acc[p][t] = _mm512_dpbf16_ps(acc[p][t], wv[p], xl);
            }
        }
    }
    for (int p = 0; p < P; p++) {
        int m = rows_left - 16 * p;
        __mmask16 k = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
        for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, k, acc[p][t]);
    }
}

/* Panels per tile for T tokens: P*T accumulators + P weight vectors + 1-2
 * broadcasts within the 32 registers (one vector per panel: nothing is
 * widened). */
#define DP_PANELS(T) ((T) <= 3 ? 6 : (T) == 4 ? 5 : (T) <= 6 ? 4 : (T) <= 8 ? 3 : (T) <= 13 ? 2 : 1)

#define DK(P, T) dkern(S, P, T, w, panel, k2, x, ps, y, ldy, rows_left)
#define DK_P(T)                                                \
    do {                                                       \
        enum { PM_ = DP_PANELS(T) };                           \
        if (P == PM_) DK(PM_, T);                              \
        else if (P == 4) DK(4 < PM_ ? 4 : PM_, T);             \
        else if (P == 2) DK(2 < PM_ ? 2 : PM_, T);             \
        else DK(1, T);                                         \
    } while (0)
#define DK_T                                       \
    switch (T) {                                   \
    case 1: DK_P(1); break;                        \
    case 2: DK_P(2); break;                        \
    case 3: DK_P(3); break;                        \
    case 4: DK_P(4); break;                        \
    case 5: DK_P(5); break;                        \
    case 6: DK_P(6); break;                        \
    case 7: DK_P(7); break;                        \
    case 8: DK_P(8); break;                        \
    case 9: DK_P(9); break;                        \
    case 10: DK_P(10); break;                      \
    case 11: DK_P(11); break;                      \
    case 12: DK_P(12); break;                      \
    case 13: DK_P(13); break;                      \
    case 14: DK_P(14); break;                      \
    case 15: DK_P(15); break;                      \
    default: DK_P(DP_MAX_T); break;                \
    }

/* P is DP_PANELS(T), or 4, 2, 1 for a group's last panels */
static void dtile_single(int P, int T, const uint16_t *w, size_t panel, int k2, const uint32_t *x, size_t ps, float *y,
                         size_t ldy, int rows_left) {
    const int S = 1;
    DK_T
}
static void dtile_split(int P, int T, const uint16_t *w, size_t panel, int k2, const uint32_t *x, size_t ps, float *y,
                        size_t ldy, int rows_left) {
    const int S = 2;
    DK_T
}

/* Panel groups outside, token tiles inside (as rf_bf16p_range_avx512, for
 * the same reason: a group streamed from memory by the first token tile
 * meets the call's other tiles from L2, so W is read once per call). */
void rf_bf16dp_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single) {
    const int cols = W->cols, k2 = (cols + 1) / 2, S = DP_S(single);
    const size_t ps = (size_t)n * S;      /* entries from a column pair to the next */
    const size_t panel = (size_t)k2 * 32; /* in uint16 */
    const uint16_t *pk = W->packed;
    const uint32_t *X = xp;
    const int ntt = (n + DP_MAX_T - 1) / DP_MAX_T, tmax = (n + ntt - 1) / ntt;
    const int group = 16 * DP_PANELS(tmax);
    for (int g = a; g < b; g += group) {
        const int ge = b - g < group ? b : g + group;
        for (int t0 = 0, i = 0; i < ntt; i++) {
            int T = n / ntt + (i < n % ntt);
            for (int r = g; r < ge;) {
                int left = (ge - r + 15) / 16, P = rf_stream_panels(DP_PANELS(T), T);
                if (left < P) P = left >= 4 && P > 4 ? 4 : left >= 2 ? 2 : 1;
                const uint16_t *w = pk + (size_t)(r / 16) * panel;
                const uint32_t *x = X + (size_t)t0 * S;
                float *y = Y + (size_t)t0 * ldy + r;
                if (single) dtile_single(P, T, w, panel, k2, x, ps, y, ldy, b - r);
                else dtile_split(P, T, w, panel, k2, x, ps, y, ldy, b - r);
                r += 16 * P;
            }
            t0 += T;
        }
    }
}
