/* matmul_amx.c - the amx tier's matmuls on AMX tiles: bf16 weights with
 * TDPBF16PS, and packed Q8_0 / Q4_0 weights with TDPBSUD (below the int8
 * part; the widths kernels.h rf_matmul_set_amx_int8 says, by default Q8_0
 * calls of 5..32 tokens and Q4_0 calls of 9..16, where it can beat the
 * avx512 vpdpbusd kernel).
 *
 * Verified on an Intel Xeon with AMX (tests/kernels_matmul and
 * tests/kernels_quant at tier amx against their references). The bf16
 * kernel makes wide calls cheap: it streams W once per call and the tile
 * unit mostly waits on memory, far below the TDPBF16PS probe's peak
 * (roofline_amx.c). The int8 kernel pays for the per-block scales: a tile
 * store and an AVX-512 rescale per 16 x 16 x 32 TDP, so it gains on the
 * vpdpbusd kernel only with its weight streams prefetched and, for one
 * token group, its sums in registers (q_g1). Call costs on each machine:
 * docs/benchmarks.md. The code
 * compiles in every build (per-file -mamx-* flags, CMakeLists.txt; stubs
 * when the compiler lacks them) and is chosen only when kernels/cpu.c finds
 * AMX-TILE/BF16/INT8 and the OS grants the tile data (arch_prctl). Its
 * layout and indexing are also tested on any CPU by tests/kernels_amx_emul.c,
 * which compiles this file with RF_AMX_EMULATE: the six tile operations
 * below are then plain C following Intel's pseudocode.
 *
 * A loaded model's bf16 matrices are packed: they run on the packed-panel
 * kernel further below ("bf16, packed weights"); this one serves matrices
 * without a packed copy.
 *
 * Y[t, r] = sum_k X[t, k] W[r, k] as tiles (palette 1, 16 rows x 64 bytes):
 *   A (tmm4)      16 weight rows x 32 bf16, loaded straight from the row-major
 *                 weights (stride = the row length): no re-layout
 *   B (tmm5, 6)   16 tokens' activations for the same 32 columns, packed per
 *                 call in TDPBF16PS's pair layout: B[k][2t + j] = x[t][2k + j]
 *                 (tmm5: bf16 hi, tmm6: lo when the activations are split,
 *                 see rf_matmul_set_bf16_act; both dot products accumulate)
 *   C (tmm0..3)   16 rows x 16 tokens of f32 each: up to 64 tokens share
 *                 one A load (weight-stationary), W streams once per call.
 * C is stored to a 16 x 16 buffer and scattered to Y. Rows: groups of 16
 * read W in place; a last group of rr < 16 rows reconfigures the A and C
 * tiles to rr rows (a tile load must not read past the matrix).
 * Columns must be a multiple of 32 (rf_matmul sends other shapes to the
 * avx512 kernel). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"
#include "util/util.h"

/* the emulated build (the test) names its functions emu_*, so that it can
 * link with the library that holds the real ones */
#ifdef RF_AMX_EMULATE
#define AMXFN(f) emu_##f
#else
#define AMXFN(f) f
#endif

#if defined(RF_AMX_EMULATE) || !defined(RF_NO_AMX)

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg; /* the 64-byte LDTILECFG operand */

#ifdef RF_AMX_EMULATE
/* ---- the tile operations in C (Intel SDM pseudocode), for the test ---- */
static _Thread_local uint8_t emu_tile[8][16][64];
static _Thread_local tilecfg emu_cfg;
static void TCFG(const tilecfg *c) { emu_cfg = *c; }
static void TRELEASE(void) { memset(emu_tile, 0, sizeof emu_tile); }
#define PREFETCH(p) ((void)(p))
static void TZERO(int t) { memset(emu_tile[t], 0, sizeof emu_tile[t]); }
static void TLOAD(int t, const void *p, size_t stride) {
    for (int r = 0; r < emu_cfg.rows[t]; r++) memcpy(emu_tile[t][r], (const char *)p + r * stride, emu_cfg.colsb[t]);
}
static void TSTORE(int t, void *p, size_t stride) {
    for (int r = 0; r < emu_cfg.rows[t]; r++) memcpy((char *)p + r * stride, emu_tile[t][r], emu_cfg.colsb[t]);
}
static float bf(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return rf_bf16_to_f32(h);
}
/* C[m][n] += sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] (f32) */
static void TDP(int c, int a, int b) {
    for (int m = 0; m < emu_cfg.rows[a]; m++)
        for (int n = 0; n < emu_cfg.colsb[b] / 4; n++) {
            float s;
            memcpy(&s, &emu_tile[c][m][4 * n], 4);
            for (int k = 0; k < emu_cfg.colsb[a] / 4; k++)
                s += bf(&emu_tile[a][m][4 * k]) * bf(&emu_tile[b][k][4 * n]) +
                     bf(&emu_tile[a][m][4 * k + 2]) * bf(&emu_tile[b][k][4 * n + 2]);
            memcpy(&emu_tile[c][m][4 * n], &s, 4);
        }
}
/* C[m][n] += sum_k sum_i A[m][4k+i] B[k][4n+i], A signed bytes, B signed
 * (TDPBSSD) or unsigned (TDPBSUD) bytes, C int32 */
static void emu_dp_bytes(int c, int a, int b, int b_signed) {
    for (int m = 0; m < emu_cfg.rows[a]; m++)
        for (int n = 0; n < emu_cfg.colsb[b] / 4; n++) {
            int32_t s;
            memcpy(&s, &emu_tile[c][m][4 * n], 4);
            for (int k = 0; k < emu_cfg.colsb[a] / 4; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t bv = emu_tile[b][k][4 * n + i];
                    s += (int8_t)emu_tile[a][m][4 * k + i] * (b_signed ? (int32_t)(int8_t)bv : (int32_t)bv);
                }
            memcpy(&emu_tile[c][m][4 * n], &s, 4);
        }
}
static void TDPI(int c, int a, int b) { emu_dp_bytes(c, a, b, 0); }
static void TDPS(int c, int a, int b) { emu_dp_bytes(c, a, b, 1); }
#else
#include <immintrin.h>
#define TCFG(c) _tile_loadconfig(c)
#define TRELEASE() _tile_release()
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, s) _tile_loadd(t, p, s)
#define TSTORE(t, p, s) _tile_stored(t, p, s)
#define TDP(c, a, b) _tile_dpbf16ps(c, a, b)
#define TDPI(c, a, b) _tile_dpbsud(c, a, b)
#define TDPS(c, a, b) _tile_dpbssd(c, a, b)
#endif

int AMXFN(rf_amx_built)(void) { return 1; }

/* a palette-1 configuration with tiles 0..n-1 of `rows` rows x colsb bytes
 * and the others unused (the callers then reshape single tiles) */
static void tile_config(tilecfg *cfg, int n, int rows, int colsb) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < n; t++) cfg->rows[t] = (uint8_t)rows, cfg->colsb[t] = (uint16_t)colsb;
}

/* per token group of 16 and 32-column chunk: 512 bf16 (hi), and 512 (lo) */
static inline size_t group_elems(int cols, int single) { return (size_t)(cols / 32) * (single ? 1 : 2) * 512; }

size_t AMXFN(rf_bf16_prep_amx_bytes)(int n, int cols, int single) {
    return (size_t)((n + 15) / 16) * group_elems(cols, single) * 2;
}

void AMXFN(rf_bf16_prep_amx)(void *xp, const float *X, int n, int cols, int single) {
    const int nk = cols / 32, H = single ? 1 : 2;
    uint16_t *o = xp;
#ifdef RF_AMX_EMULATE
    for (int g = 0; g < (n + 15) / 16; g++)
        for (int kc = 0; kc < nk; kc++)
            for (int h = 0; h < H; h++, o += 512)
                for (int kp = 0; kp < 16; kp++)
                    for (int t = 0; t < 16; t++)
                        for (int j = 0; j < 2; j++) {
                            int tok = g * 16 + t;
                            float v = tok < n ? X[(size_t)tok * cols + kc * 32 + 2 * kp + j] : 0.0f;
                            uint16_t hi = rf_f32_to_bf16(v);
                            o[kp * 32 + 2 * t + j] = h == 0 ? hi : rf_f32_to_bf16(v - rf_bf16_to_f32(hi));
                        }
#else
    /* per token: its 32 values as 16 bf16 pairs (vcvtne2ps2bf16, round to
     * nearest even as rf_f32_to_bf16), scattered to the pairs' rows. The
     * scalar loop above is kept for the emulated test only: it runs on one
     * thread while the others wait, a visible share of a wide call */
    const __m512i rows = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int g = 0; g < (n + 15) / 16; g++)
        for (int kc = 0; kc < nk; kc++, o += H * 512)
            for (int t = 0; t < 16; t++) {
                const int tok = g * 16 + t;
                __m512 a = _mm512_setzero_ps(), b = a;
                if (tok < n) a = _mm512_loadu_ps(X + (size_t)tok * cols + kc * 32), b = _mm512_loadu_ps(X + (size_t)tok * cols + kc * 32 + 16);
                __m512i hi = (__m512i)_mm512_cvtne2ps_pbh(b, a);
                _mm512_i32scatter_epi32(o + 2 * t, rows, hi, 4);
                if (H == 2) { /* the rest, rounded again */
                    __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi)), 16));
                    __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hi, 1)), 16));
                    __m512i lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha));
                    _mm512_i32scatter_epi32(o + 512 + 2 * t, rows, lo, 4);
                }
            }
#endif
}

/* One 16-row group x GN (1..4) token groups starting at token group g0:
 * C tiles 0..GN-1 accumulate over all 32-column chunks; each A load (the 16
 * weight rows' chunk) meets every token group. */
#define DP_GROUP(C)                                                                                   \
    do {                                                                                              \
        const uint16_t *b_ = B + ((size_t)(g0 + (C)) * nk + kc) * H * 512;                           \
        TLOAD(5, b_, 64);                                                                             \
        TDP(C, 4, 5);                                                                                 \
        if (H == 2) {                                                                                 \
            TLOAD(6, b_ + 512, 64);                                                                   \
            TDP(C, 4, 6);                                                                             \
        }                                                                                             \
    } while (0)
#define ROW_GROUP(GN)                                                                                 \
    do {                                                                                              \
        TZERO(0);                                                                                     \
        if ((GN) > 1) TZERO(1);                                                                       \
        if ((GN) > 2) TZERO(2);                                                                       \
        if ((GN) > 3) TZERO(3);                                                                       \
        for (int kc = 0; kc < nk; kc++) {                                                             \
            TLOAD(4, A + (size_t)kc * 32, lda);                                                       \
            DP_GROUP(0);                                                                              \
            if ((GN) > 1) DP_GROUP(1);                                                                \
            if ((GN) > 2) DP_GROUP(2);                                                                \
            if ((GN) > 3) DP_GROUP(3);                                                                \
        }                                                                                             \
        TSTORE(0, cbuf[0], 64);                                                                       \
        if ((GN) > 1) TSTORE(1, cbuf[1], 64);                                                         \
        if ((GN) > 2) TSTORE(2, cbuf[2], 64);                                                         \
        if ((GN) > 3) TSTORE(3, cbuf[3], 64);                                                         \
    } while (0)

void AMXFN(rf_bf16_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single) {
    const int cols = W->cols, nk = cols / 32, H = single ? 1 : 2, ng = (n + 15) / 16;
    const uint16_t *B = xp, *w0 = W->data;
    const size_t lda = (size_t)cols * 2;
    tilecfg cfg;
    tile_config(&cfg, 7, 16, 64); /* C 0-3, A 4, B 5-6 */
    float cbuf[4][16][16] __attribute__((aligned(64)));
    TCFG(&cfg);
    for (int r = a; r < b; r += 16) {
        const int rr = b - r < 16 ? b - r : 16;
        const uint16_t *A = w0 + (size_t)r * cols;
        if (rr < 16) { /* the last rows: A and C tiles of rr rows (loads read no further) */
            for (int t = 0; t < 5; t++) cfg.rows[t] = (uint8_t)rr;
            TCFG(&cfg);
        }
        for (int g0 = 0; g0 < ng; g0 += 4) {
            const int gn = ng - g0 < 4 ? ng - g0 : 4;
            switch (gn) {
            case 1: ROW_GROUP(1); break;
            case 2: ROW_GROUP(2); break;
            case 3: ROW_GROUP(3); break;
            default: ROW_GROUP(4); break;
            }
            for (int gi = 0; gi < gn; gi++)
                for (int t = 0; t < 16 && (g0 + gi) * 16 + t < n; t++) {
                    float *y = Y + (size_t)((g0 + gi) * 16 + t) * ldy + r;
                    for (int i = 0; i < rr; i++) y[i] = cbuf[gi][i][t];
                }
        }
    }
    TRELEASE();
}

/* ---- Q8_0 / Q4_0: int8 tiles ----------------------------------------------
 * TDPBSUD (A signed, B unsigned bytes, C int32) with K = 32 bytes per
 * instruction, one 32-block of the weights:
 * A (tmm4, 5)   up to 16 tokens x 32 bytes: the block's int8 activations q
 *               (rounded as the avx512 prep rounds them), loaded in place
 *               from the prepared blocks
 * B (tmm6, 7)   8 rows of 64 bytes, one 16-row panel's block as packed
 *               (matmul_pack.c: row k = the 4 weights of columns 4k..4k+3
 *               of the 16 rows, as unsigned bytes w + off, off = 128 for
 *               Q8_0, 8 for Q4_0): Q8_0 loaded in place from the panel,
 *               Q4_0's nibbles unpacked to bytes in a buffer one block
 *               ahead (a tile load of bytes the vector unit has just
 *               stored stalls the tile unit)
 * C (tmm0..3)   tokens x 16 rows of int32, C = sum q (w + off): the
 *               offset comes off inside the tiles, sum q off per token
 *               and block: C starts as a tile of -off sum q (prepared with
 *               the activations; one token group: a TDPBSSD against
 *               -off bytes instead, q_g1).
 * The tiles hold just a group's tokens (8 tokens: 8-row A and C tiles,
 * half the TDP, store and scaling of 16). The scales are per 32-block, so
 * a C tile holds one block's dot products: after each block it is stored
 * and scaled into f32 accumulators with AVX-512 (cvt(c) * (d_w * d_x), the
 * avx512 kernel's arithmetic). The next steps' TDPs are issued before that
 * scaling, so the tile unit works while the vector units scale (a loop
 * that waits for each step's tile results leaves both idle in turn). Up to
 * 4 token groups (64 tokens) share each B load; W streams once per 64
 * tokens, each panel prefetched AMX_PF_AHEAD bytes ahead: without the
 * prefetch the tile loads of B wait on memory. */

/* The prepared activations, ordered by token group of 16, block, token (an
 * A tile is one piece, not rows a power of two apart): per token and
 * block the 32 bytes q; then 16 int32 copies of -off sum q (a C tile's
 * start, off = the weights' offset); then the f32 scales d_x; tokens
 * padded with zeros to whole groups */
size_t AMXFN(rf_q_prep_amx_bytes)(int n, int cols) { return (size_t)((n + 15) / 16) * 16 * (cols / RF_QK) * (32 + 64 + 4); }

/* d = max|x| / 127, q = x * (1 / d) rounded to nearest even: the rounding of
 * rf_q8p_prep_avx512 (so the tiers' answers agree bit for bit) */
void AMXFN(rf_q_prep_amx)(void *xp, const float *X, int n, int cols, rf_dtype wdt) {
    const int nb = cols / RF_QK, np = (n + 15) / 16 * 16;
    int8_t *q0 = xp;
    int32_t *corr = (int32_t *)(q0 + (size_t)np * nb * 32);
    float *dx = (float *)(corr + (size_t)np * nb * 16);
    const int off = wdt == RF_Q8_0 ? 128 : 8;
    for (int t = 0; t < n; t++)
        for (int b = 0; b < nb; b++) {
            const size_t at = ((size_t)(t / 16) * nb + b) * 16 + t % 16;
            int8_t *o = q0 + at * 32;
            const float *x = X + (size_t)t * cols + b * RF_QK;
#ifdef RF_AMX_EMULATE
            float amax = 0;
            for (int i = 0; i < RF_QK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            int32_t sq = 0;
            for (int i = 0; i < RF_QK; i++) o[i] = (int8_t)lrintf(x[i] * id), sq += o[i];
#else
            __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
            float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
            const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
            __m512i qa = _mm512_cvtps_epi32(
                _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            __m512i qc = _mm512_cvtps_epi32(
                _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            _mm_storeu_si128((__m128i *)o, _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128((__m128i *)(o + 16), _mm512_cvtepi32_epi8(qc));
            const int32_t sq = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
#endif
            dx[at] = d;
            for (int i = 0; i < 16; i++) corr[at * 16 + i] = -off * sq;
        }
    for (int t = n; t < np; t++) /* zero tokens up to a whole group: C rows of 0 */
        for (int b = 0; b < nb; b++) {
            const size_t at = ((size_t)(t / 16) * nb + b) * 16 + t % 16;
            memset(q0 + at * 32, 0, 32);
            dx[at] = 0;
            memset(corr + at * 16, 0, 64);
        }
}

/* acc[t][i] (+)= c[t][i] * (dw[i] * dx[t]) for the first m tokens t of a
 * token group and the panel's 16 rows i */
static inline __attribute__((always_inline)) void q_scale(float *acc, const int32_t *c, const float *dx,
                                                          const float *dw, int first, int m) {
#ifdef RF_AMX_EMULATE
    for (int t = 0; t < m; t++)
        for (int i = 0; i < 16; i++) {
            float v = (float)c[t * 16 + i] * (dw[i] * dx[t]);
            acc[t * 16 + i] = first ? v : acc[t * 16 + i] + v;
        }
#else
    const __m512 w = _mm512_loadu_ps(dw);
    if (first)
        for (int t = 0; t < m; t++)
            _mm512_store_ps(acc + t * 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + t * 16)),
                                                        _mm512_mul_ps(w, _mm512_set1_ps(dx[t]))));
    else
        for (int t = 0; t < m; t++)
            _mm512_store_ps(acc + t * 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + t * 16)),
                                                          _mm512_mul_ps(w, _mm512_set1_ps(dx[t])),
                                                          _mm512_load_ps(acc + t * 16)));
#endif
}

/* a Q4_0 panel block as B-tile rows 0..7 of bytes: its 4 vectors, lane r
 * byte k = columns 4v + k (low nibble) and 16 + 4v + k (high) of row r,
 * unpacked to rows v and 4 + v */
static inline void b_fill_q4(uint8_t *o, const uint8_t *w) {
#ifdef RF_AMX_EMULATE
    for (int i = 0; i < 256; i++) o[i] = w[i] & 15, o[256 + i] = w[i] >> 4;
#else
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int v = 0; v < 4; v++) {
        __m512i q = _mm512_loadu_si512(w + 64 * v);
        _mm512_store_si512(o + 64 * v, _mm512_and_si512(q, m4));
        _mm512_store_si512(o + 256 + 64 * v, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    }
#endif
}

/* Each panel's weight stream is prefetched this many bytes ahead (to L1,
 * one per 64-byte line), as the avx512 kernels' streams (matmul_avx512.c
 * PF_AHEAD): without it the tile loads of B wait on memory. 1 to 4 KiB, to
 * L1 or L2, are alike; 2 KiB to L1 matches the avx512 kernels. */
#define AMX_PF_AHEAD 2048

/* The weights' B tiles of block k_ for P panels, tmm6 and tmm7, as both
 * int8 kernels below take them: each panel's stream prefetched, Q8_0 in
 * place, Q4_0 from the nibbles unpacked into wq one block ahead (B_FILL).
 * In scope: w, block, panel, P, q8, nb, wq. */
#define B_FILL(k_)                                                                                    \
    do {                                                                                              \
        b_fill_q4(wq[(k_) & 1][0], w + (size_t)(k_) * block);                                         \
        if (P > 1) b_fill_q4(wq[(k_) & 1][1], w + panel + (size_t)(k_) * block);                      \
    } while (0)
#define B_LOAD(k_)                                                                                    \
    do {                                                                                              \
        const uint8_t *wk_ = w + (size_t)(k_) * block;                                                \
        for (int p_ = 0; p_ < P; p_++)                                                                \
            for (size_t l_ = 0; l_ < block; l_ += 64) PREFETCH(wk_ + p_ * panel + AMX_PF_AHEAD + l_); \
        if (q8) {                                                                                     \
            TLOAD(6, wk_, 64);                                                                        \
            if (P > 1) TLOAD(7, wk_ + panel, 64);                                                     \
        } else {                                                                                      \
            TLOAD(6, wq[(k_) & 1][0], 64);                                                            \
            if (P > 1) TLOAD(7, wq[(k_) & 1][1], 64);                                                 \
            if ((k_) + 1 < nb) B_FILL((k_) + 1);                                                      \
        }                                                                                             \
    } while (0)

/* ---- one token group (up to 16 tokens): accumulators in registers --------
 * The general kernel below keeps its f32 sums in memory and scales each
 * C tile with a load, convert, multiply, FMA and store per row; at a few
 * tokens that vector work, not the tiles, sets the pace. Here the sums of P panels x MT tokens live in zmm registers
 * (P MT <= 16; at more the compiler spills a part), the weights' offset is taken off inside the tiles (a
 * second TDP, TDPBSSD of the activations against a tile of -off bytes,
 * held in tmm5 for the whole call), d_x is broadcast once per token for
 * both panels, and a C tile is scaled one block after its store:
 * per block and panel one TDPBSUD, one TDPBSSD, one tile store and, per
 * token, a convert, a multiply and an FMA.
 * Tiles: C tmm0..3 (block parity x panel), A tmm4 (the tokens' q), the
 * -off bytes tmm5, B tmm6, 7 (panels: Q8_0 in place, Q4_0 unpacked into
 * a buffer one block ahead). */
static inline __attribute__((always_inline)) void q_g1(const int P, const int MT, float *Y, size_t ldy,
                                                       const int8_t *X, const float *DX, const rf_mat *W, int n,
                                                       int a, int b) {
    const int nb = W->cols / RF_QK, q8 = W->dtype == RF_Q8_0;
    const size_t block = q8 ? RF_Q8P_BLOCK : RF_Q4P_BLOCK, scales = q8 ? 512 : 256;
    const size_t panel = (size_t)nb * block;
    int32_t cbuf[2][2][256] __attribute__((aligned(64)));
    uint8_t wq[2][2][512] __attribute__((aligned(64))); /* Q4_0: [block parity][panel] */
    uint8_t noff[512] __attribute__((aligned(64)));
    memset(cbuf, 0, sizeof cbuf); /* rows n..MT - 1 are scaled but never stored */
    memset(noff, q8 ? 0x80 : 0xF8, sizeof noff); /* -128, -8 */
    tilecfg cfg;
    tile_config(&cfg, 8, 8, 64); /* B 5-7: 8 rows */
    for (int t = 0; t < 5; t++) cfg.rows[t] = (uint8_t)n; /* C 0-3 and A 4: the tokens */
    cfg.colsb[4] = 32;
    TCFG(&cfg);
    TLOAD(5, noff, 64);
    for (int r = a; r < b; r += 16 * P) {
        const uint8_t *w = (const uint8_t *)W->packed + (size_t)(r / 16) * panel;
#ifdef RF_AMX_EMULATE
        float acc[2][16][16];
        memset(acc, 0, sizeof acc);
#else
        __m512 acc[2][16];
        for (int p = 0; p < P; p++)
            for (int t = 0; t < MT; t++) acc[p][t] = _mm512_setzero_ps();
#endif
#ifdef RF_AMX_EMULATE
#define G1_SCALE(cb_, dx_, dw_)                                                                       \
    do {                                                                                              \
        for (int p_ = 0; p_ < P; p_++)                                                                \
            for (int t_ = 0; t_ < MT; t_++)                                                           \
                for (int i_ = 0; i_ < 16; i_++)                                                       \
                    acc[p_][t_][i_] += (float)(cb_)[p_][t_ * 16 + i_] *                               \
                                       (((const float *)((dw_) + p_ * panel))[i_] * (dx_)[t_]);       \
    } while (0)
#else
#define G1_SCALE(cb_, dx_, dw_)                                                                       \
    do {                                                                                              \
        const __m512 w0_ = _mm512_loadu_ps((const float *)(dw_));                                     \
        const __m512 w1_ = P > 1 ? _mm512_loadu_ps((const float *)((dw_) + panel)) : w0_;            \
        for (int t_ = 0; t_ < MT; t_++) {                                                             \
            const __m512 d_ = _mm512_set1_ps((dx_)[t_]);                                              \
            acc[0][t_] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((cb_)[0] + t_ * 16)),   \
                                         _mm512_mul_ps(w0_, d_), acc[0][t_]);                         \
            if (P > 1)                                                                                \
                acc[1][t_] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((cb_)[1] + t_ * 16)), \
                                             _mm512_mul_ps(w1_, d_), acc[1][t_]);                     \
        }                                                                                             \
    } while (0)
#endif
#define G1_ISSUE(k_, C0, C1)                                                                          \
    do {                                                                                              \
        B_LOAD(k_);                                                                                   \
        TLOAD(4, X + (size_t)(k_) * 16 * 32, 32);                                                     \
        TZERO(C0);                                                                                    \
        TDPI(C0, 4, 6);                                                                               \
        TDPS(C0, 4, 5);                                                                               \
        if (P > 1) {                                                                                  \
            TZERO(C1);                                                                                \
            TDPI(C1, 4, 7);                                                                           \
            TDPS(C1, 4, 5);                                                                           \
        }                                                                                             \
    } while (0)
#define G1_STORE(k_, C0, C1)                                                                          \
    do {                                                                                              \
        TSTORE(C0, cbuf[(k_) & 1][0], 64);                                                            \
        if (P > 1) TSTORE(C1, cbuf[(k_) & 1][1], 64);                                                 \
    } while (0)
        if (!q8) B_FILL(0);
        G1_ISSUE(0, 0, 1);
        for (int k = 0; k < nb; k += 2) {
            /* block k in C0/C1, k + 1 in C2/C3 */
            if (k + 1 < nb) G1_ISSUE(k + 1, 2, 3);
            G1_STORE(k, 0, 1);
            if (k > 0) G1_SCALE(cbuf[1], DX + (size_t)(k - 1) * 16, w + (size_t)(k - 1) * block + scales);
            if (k + 1 >= nb) break;
            if (k + 2 < nb) G1_ISSUE(k + 2, 0, 1);
            G1_STORE(k + 1, 2, 3);
            G1_SCALE(cbuf[0], DX + (size_t)k * 16, w + (size_t)k * block + scales);
        }
        G1_SCALE(cbuf[(nb - 1) & 1], DX + (size_t)(nb - 1) * 16, w + (size_t)(nb - 1) * block + scales);
#undef G1_STORE
#undef G1_SCALE
#undef G1_ISSUE
        for (int p = 0; p < P; p++) {
            const int rows = b - r - 16 * p < 16 ? b - r - 16 * p : 16;
            for (int t = 0; t < n; t++) {
#ifdef RF_AMX_EMULATE
                memcpy(Y + (size_t)t * ldy + r + 16 * p, acc[p][t], sizeof(float) * rows);
#else
                _mm512_mask_storeu_ps(Y + (size_t)t * ldy + r + 16 * p, (__mmask16)((1u << rows) - 1), acc[p][t]);
#endif
            }
        }
    }
    TRELEASE();
}

void AMXFN(rf_q_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const int nb = W->cols / RF_QK, q8 = W->dtype == RF_Q8_0, ng = (n + 15) / 16;
    const size_t block = q8 ? RF_Q8P_BLOCK : RF_Q4P_BLOCK, scales = q8 ? 512 : 256;
    const size_t panel = (size_t)nb * block;
    const uint8_t *pk = W->packed;
    const int8_t *X = xp;
    const int32_t *CR = (const int32_t *)(X + (size_t)ng * 16 * nb * 32);
    const float *DX = (const float *)(CR + (size_t)ng * 16 * nb * 16);
    /* one token group: accumulators in registers (the compiler keeps what
     * it can of 2 x 12 or 2 x 16 in zmm registers and spills the rest);
     * two panels per pass, not one, at 9..16 tokens: two weight streams
     * per thread keep more of memory's bandwidth busy than one */
    if (ng == 1) {
        if (a >= b) return;
        const int e = a + (b - a) / 32 * 32; /* panel pairs, and a last single panel */
        if (n <= 4) {
            if (e > a) q_g1(2, 4, Y, ldy, X, DX, W, n, a, e);
            if (e < b) q_g1(1, 4, Y, ldy, X, DX, W, n, e, b);
        } else if (n <= 8) {
            if (e > a) q_g1(2, 8, Y, ldy, X, DX, W, n, a, e);
            if (e < b) q_g1(1, 8, Y, ldy, X, DX, W, n, e, b);
        } else if (n <= 12) {
            if (e > a) q_g1(2, 12, Y, ldy, X, DX, W, n, a, e);
            if (e < b) q_g1(1, 12, Y, ldy, X, DX, W, n, e, b);
        } else {
            if (e > a) q_g1(2, 16, Y, ldy, X, DX, W, n, a, e);
            if (e < b) q_g1(1, 16, Y, ldy, X, DX, W, n, e, b);
        }
        return;
    }
    tilecfg cfg, cur;
    memset(&cur, 0, sizeof cur);
    float acc[4][2][256] __attribute__((aligned(64)));
    int32_t cbuf[4][256] __attribute__((aligned(64)));
    uint8_t wq[2][2][512] __attribute__((aligned(64))); /* Q4_0: [block parity][panel] */
    int loaded = 0;
    for (int r = a; r < b; r += 32) {
        const int P = b - r > 16 ? 2 : 1;
        const uint8_t *w = pk + (size_t)(r / 16) * panel;
        for (int g0 = 0; g0 < ng; g0 += 4) {
            const int G = ng - g0 < 4 ? ng - g0 : 4, S = nb * G * P;
            int m[4]; /* tokens in each token group */
            for (int gi = 0; gi < 4; gi++) m[gi] = n - 16 * (g0 + gi) < 16 ? n - 16 * (g0 + gi) : 16;
            /* tiles of just the group's tokens where one group keeps its
             * tiles (G <= 2: C tile c holds group (c / P) % G, A tile 4 + g) */
            tile_config(&cfg, 8, 8, 64); /* B 6-7: 8 rows */
            for (int c = 0; c < 4; c++) cfg.rows[c] = (uint8_t)(G <= 2 ? m[(c / P) % G] : 16);
            cfg.rows[4] = (uint8_t)(G <= 2 ? m[0] : 16), cfg.rows[5] = (uint8_t)(G == 2 ? m[1] : 16);
            cfg.colsb[4] = cfg.colsb[5] = 32;
            if (!loaded || memcmp(&cfg, &cur, sizeof cfg)) TCFG(&cfg), cur = cfg, loaded = 1;
#define TDP_CASE(C, A, B)                                                                             \
    case (C) * 4 + ((A) - 4) * 2 + ((B) - 6):                                                         \
        TLOAD(C, cr_, 64);                                                                            \
        TDPI(C, A, B);                                                                                \
        break;
#define TDP_CASES(C) TDP_CASE(C, 4, 6) TDP_CASE(C, 4, 7) TDP_CASE(C, 5, 6) TDP_CASE(C, 5, 7)
            /* step s: C tile s % 4 = block k, token group g0 + g, panel p, in
             * that order (p fastest); counters, not divisions, per step */
#define ISSUE(k_, g_, p_, c_)                                                                         \
    do {                                                                                              \
        if ((g_) == 0 && (p_) == 0) B_LOAD(k_);                                                       \
        const size_t at_ = ((size_t)(g0 + (g_)) * nb + (k_)) * 16;                                    \
        const int32_t *cr_ = CR + at_ * 16;                                                           \
        if ((p_) == 0) {                                                                              \
            const int8_t *x_ = X + at_ * 32;                                                          \
            if ((g_) & 1) TLOAD(5, x_, 32);                                                           \
            else TLOAD(4, x_, 32);                                                                    \
        }                                                                                             \
        switch ((c_) * 4 + ((g_) & 1) * 2 + (p_)) { /* A tile 4 + (g & 1), B 6 + p; immediates */     \
        TDP_CASES(0) TDP_CASES(1) TDP_CASES(2) TDP_CASES(3)                                           \
        }                                                                                             \
    } while (0)
#define NEXT(k_, g_, p_)                                                                              \
    do {                                                                                              \
        if (++(p_) == P) {                                                                            \
            (p_) = 0;                                                                                 \
            if (++(g_) == G) (g_) = 0, (k_)++;                                                        \
        }                                                                                             \
    } while (0)
            /* 3 steps ahead: a TDP's result is stored while the next 3 run */
            if (!q8) B_FILL(0);
            int ki = 0, gi = 0, pi = 0, k = 0, g = 0, p = 0;
            for (int s = 0; s < 3 && s < S; s++) {
                ISSUE(ki, gi, pi, s);
                NEXT(ki, gi, pi);
            }
            /* step s's C is scaled 2 steps after its store, so that the
             * vector loads do not wait right behind the tile store */
#define SCALE()                                                                                       \
    do {                                                                                              \
        const size_t at_ = ((size_t)(g0 + g) * nb + k) * 16;                                          \
        q_scale(acc[g][p], cbuf[sc & 3], DX + at_,                                                    \
                (const float *)(w + (size_t)p * panel + (size_t)k * block + scales), k == 0, m[g]);   \
        NEXT(k, g, p);                                                                                \
        sc++;                                                                                         \
    } while (0)
            int sc = 0;
            for (int s = 0; s < S; s++) {
                int32_t *cb = cbuf[s & 3];
                switch (s & 3) { /* the tile number must be a constant */
                case 0: TSTORE(0, cb, 64); break;
                case 1: TSTORE(1, cb, 64); break;
                case 2: TSTORE(2, cb, 64); break;
                default: TSTORE(3, cb, 64); break;
                }
                if (s + 3 < S) {
                    ISSUE(ki, gi, pi, (s + 3) & 3);
                    NEXT(ki, gi, pi);
                }
                if (s >= 2) SCALE();
            }
            while (sc < S) SCALE();
#undef SCALE
#undef NEXT
#undef ISSUE
#undef TDP_CASES
#undef TDP_CASE
#undef B_LOAD
#undef B_FILL
            for (int gi = 0; gi < G; gi++)
                for (int p = 0; p < P; p++) {
                    const int rows = b - r - 16 * p < 16 ? b - r - 16 * p : 16;
                    for (int t = 0; t < m[gi]; t++)
                        memcpy(Y + (size_t)((g0 + gi) * 16 + t) * ldy + r + 16 * p, acc[gi][p] + t * 16,
                               sizeof(float) * rows);
                }
        }
    }
    if (loaded) TRELEASE();
}

/* ---- bf16, packed weights ------------------------------------------------
 * The loaders keep bf16 weights only in the packed panel layout
 * (matmul_pack.c) and hand the row-major pages back to the kernel, so this
 * is the amx tier's path in a model (reading the row-major originals above
 * faulted them back in: two copies of the weights, 32 GB at the 8B shape).
 * In 16-row panel p, 64-byte vector j holds the pair (2j, 2j + 1) of each
 * of the 16 rows (lane r: row 16p + r): 16 consecutive vectors are
 * TDPBF16PS's B operand for a 32-column chunk, B[k][2r + j] =
 * W[16p + r][32kc + 2k + j], loaded in place (stride 64). So the roles
 * swap: A (tmm4 hi, tmm6 lo) is 16 tokens x 32 columns of the activations,
 * row-major in bf16 (stride = the row length), C (tmm0..3) 16 tokens x 16
 * rows, stored straight into Y where the panel and the token group are
 * whole. Each B load (the weights) meets up to 4 token groups: W streams
 * once per 64 tokens, as above. Rows past the matrix are zero in the
 * panel, tokens past n zero in the prepared activations: no tile
 * reconfiguration for the tails. */
size_t AMXFN(rf_bf16p_prep_amx_bytes)(int n, int cols, int single) {
    return (size_t)((n + 15) / 16) * 16 * cols * 2 * (single ? 1 : 2);
}

void AMXFN(rf_bf16p_prep_amx)(void *xp, const float *X, int n, int cols, int single) {
    const size_t n16 = (size_t)((n + 15) / 16) * 16;
    uint16_t *hi = xp, *lo = hi + n16 * cols;
#ifdef RF_AMX_EMULATE
    for (size_t t = 0; t < n16; t++)
        for (int c = 0; c < cols; c++) {
            float v = t < (size_t)n ? X[t * cols + c] : 0.0f;
            uint16_t h = rf_f32_to_bf16(v);
            hi[t * cols + c] = h;
            if (!single) lo[t * cols + c] = rf_f32_to_bf16(v - rf_bf16_to_f32(h));
        }
#else
    /* 32 values at a time (vcvtne2ps2bf16: round to nearest even, as
     * rf_f32_to_bf16); the tokens past n zero */
    for (size_t t = 0; t < n16; t++)
        for (int c = 0; c < cols; c += 32) {
            __m512 a = _mm512_setzero_ps(), b = a;
            if (t < (size_t)n) a = _mm512_loadu_ps(X + t * cols + c), b = _mm512_loadu_ps(X + t * cols + c + 16);
            __m512i h = (__m512i)_mm512_cvtne2ps_pbh(b, a);
            _mm512_storeu_si512(hi + t * cols + c, h);
            if (!single) {
                __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
                __m512 hb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
                _mm512_storeu_si512(lo + t * cols + c, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)));
            }
        }
#endif
}

#define DPP_GROUP(C)                                                                                  \
    do {                                                                                              \
        const size_t o_ = ((size_t)(g0 + (C)) * 16 * cols + (size_t)kc * 32);                         \
        TLOAD(4, hi + o_, lda);                                                                       \
        TDP(C, 4, 5);                                                                                 \
        if (!single) {                                                                                \
            TLOAD(6, lo + o_, lda);                                                                   \
            TDP(C, 6, 5);                                                                             \
        }                                                                                             \
    } while (0)
#define PANEL_GROUP(GN)                                                                               \
    do {                                                                                              \
        TZERO(0);                                                                                     \
        if ((GN) > 1) TZERO(1);                                                                       \
        if ((GN) > 2) TZERO(2);                                                                       \
        if ((GN) > 3) TZERO(3);                                                                       \
        for (int kc = 0; kc < nk; kc++) {                                                             \
            TLOAD(5, panel + (size_t)kc * 1024, 64);                                                  \
            DPP_GROUP(0);                                                                             \
            if ((GN) > 1) DPP_GROUP(1);                                                               \
            if ((GN) > 2) DPP_GROUP(2);                                                               \
            if ((GN) > 3) DPP_GROUP(3);                                                               \
        }                                                                                             \
        TSTORE(0, cbuf[0], 64);                                                                       \
        if ((GN) > 1) TSTORE(1, cbuf[1], 64);                                                         \
        if ((GN) > 2) TSTORE(2, cbuf[2], 64);                                                         \
        if ((GN) > 3) TSTORE(3, cbuf[3], 64);                                                         \
    } while (0)

/* Several panels at once for calls of up to 32 tokens (single-rounded
 * activations): each A tile (16 tokens x 32 columns) serves 3 panels (16
 * tokens) or 2 panels x 2 token groups (17..32 tokens), and as many weight
 * streams are in flight: one panel at a time streams the weights well
 * below a 1-token call's speed, and software prefetch of the panels does
 * not make up for it (figures: docs/benchmarks.md). Whole panels only: the range's
 * last ones go through PANEL_GROUP. Tiles: C 0-2 (P3) or 0-3 (P2G2), A 4
 * (and 6), B 5-7. */
#define KSTEP3(kc)                                                                                    \
    do {                                                                                              \
        TLOAD(4, hi + (size_t)(kc) * 32, lda);                                                        \
        TLOAD(5, p0 + (size_t)(kc) * 1024, 64);                                                       \
        TLOAD(6, p0 + pbytes + (size_t)(kc) * 1024, 64);                                              \
        TLOAD(7, p0 + 2 * pbytes + (size_t)(kc) * 1024, 64);                                          \
        TDP(0, 4, 5);                                                                                 \
        TDP(1, 4, 6);                                                                                 \
        TDP(2, 4, 7);                                                                                 \
    } while (0)
#define KSTEP2G2(kc)                                                                                  \
    do {                                                                                              \
        TLOAD(4, hi + (size_t)(kc) * 32, lda);                                                        \
        TLOAD(6, hi + (size_t)16 * cols + (size_t)(kc) * 32, lda);                                    \
        TLOAD(5, p0 + (size_t)(kc) * 1024, 64);                                                       \
        TLOAD(7, p0 + pbytes + (size_t)(kc) * 1024, 64);                                              \
        TDP(0, 4, 5);                                                                                 \
        TDP(1, 6, 5);                                                                                 \
        TDP(2, 4, 7);                                                                                 \
        TDP(3, 6, 7);                                                                                 \
    } while (0)

/* rows [r, r + rows) of Y for tokens t0.. (up to 16, those < n) from a
 * stored C tile c (token-major, 16 rows each) */
static void put_tile(float *Y, size_t ldy, int r, int rows, int t0, int n, const float (*c)[16]) {
    for (int t = 0; t < 16 && t0 + t < n; t++) memcpy(Y + (size_t)(t0 + t) * ldy + r, c[t], (size_t)rows * sizeof(float));
}

/* whole panels from r while they last (r < b: the range's end), n <= 32;
 * returns the first row not done */
static int panels_multi(float *Y, size_t ldy, const uint16_t *hi, const rf_mat *W, int n, int r, int b,
                        float (*cbuf)[16][16]) {
    const int cols = W->cols, nk = cols / 32;
    const size_t lda = (size_t)cols * 2, pbytes = (size_t)(cols / 2) * 64;
    if (n <= 16)
        for (; r + 48 <= b; r += 48) {
            const char *p0 = (const char *)W->packed + (size_t)(r / 16) * pbytes;
            TZERO(0);
            TZERO(1);
            TZERO(2);
            for (int kc = 0; kc < nk; kc++) KSTEP3(kc);
            TSTORE(0, cbuf[0], 64);
            TSTORE(1, cbuf[1], 64);
            TSTORE(2, cbuf[2], 64);
            for (int p = 0; p < 3; p++) put_tile(Y, ldy, r + 16 * p, 16, 0, n, cbuf[p]);
        }
    else
        for (; r + 32 <= b; r += 32) {
            const char *p0 = (const char *)W->packed + (size_t)(r / 16) * pbytes;
            TZERO(0);
            TZERO(1);
            TZERO(2);
            TZERO(3);
            for (int kc = 0; kc < nk; kc++) KSTEP2G2(kc);
            TSTORE(0, cbuf[0], 64);
            TSTORE(1, cbuf[1], 64);
            TSTORE(2, cbuf[2], 64);
            TSTORE(3, cbuf[3], 64);
            put_tile(Y, ldy, r, 16, 0, n, cbuf[0]);
            put_tile(Y, ldy, r, 16, 16, n, cbuf[1]);
            put_tile(Y, ldy, r + 16, 16, 0, n, cbuf[2]);
            put_tile(Y, ldy, r + 16, 16, 16, n, cbuf[3]);
        }
    return r;
}
#undef KSTEP3
#undef KSTEP2G2

/* rows [r, b) one panel at a time, every token group of n (up to 4 per B
 * load); hi / lo: the tokens' activations (lo: the split mode's low parts) */
static void panels_one(float *Y, size_t ldy, const uint16_t *hi, const uint16_t *lo, const rf_mat *W, int n, int r,
                       int b, int single, float (*cbuf)[16][16]) {
    const int cols = W->cols, nk = cols / 32, ng = (n + 15) / 16;
    const size_t lda = (size_t)cols * 2;
    for (; r < b; r += 16) { /* r: a panel boundary (matmul.c's packed chunks) */
        const int rr = b - r < 16 ? b - r : 16;
        const char *panel = (const char *)W->packed + (size_t)(r / 16) * (cols / 2) * 64;
        for (int g0 = 0; g0 < ng; g0 += 4) {
            const int gn = ng - g0 < 4 ? ng - g0 : 4;
            switch (gn) {
            case 1: PANEL_GROUP(1); break;
            case 2: PANEL_GROUP(2); break;
            case 3: PANEL_GROUP(3); break;
            default: PANEL_GROUP(4); break;
            }
            for (int gi = 0; gi < gn; gi++) put_tile(Y, ldy, r, rr, (g0 + gi) * 16, n, cbuf[gi]);
        }
    }
}

/* Calls of more than 32 tokens (single-rounded activations): blocks of 32
 * tokens through panels_multi, over groups of panels that stay in L2 (about
 * 1 MiB, a multiple of 6 panels) so that only the first block reads them
 * from memory, where one panel at a time meeting up to 4 token groups per
 * B load (panels_one) reads the weights from memory once per 64 tokens. */
#define L2_GROUP_BYTES (1u << 20)

void AMXFN(rf_bf16p_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b,
                               int single) {
    const int cols = W->cols, ng = (n + 15) / 16;
    const size_t n16 = (size_t)ng * 16, pbytes = (size_t)(cols / 2) * 64;
    const uint16_t *hi = xp, *lo = hi + n16 * cols;
    tilecfg cfg;
    tile_config(&cfg, 8, 16, 64); /* C 0-3, A 4 and 6, B 5 (and 6, 7) */
    float cbuf[4][16][16] __attribute__((aligned(64)));
    TCFG(&cfg);
    if (!single) {
        panels_one(Y, ldy, hi, lo, W, n, a, b, 0, cbuf);
    } else if (n <= 32) {
        int r = panels_multi(Y, ldy, hi, W, n, a, b, cbuf);
        panels_one(Y, ldy, hi, NULL, W, n, r, b, 1, cbuf);
    } else {
        int gp = (int)(L2_GROUP_BYTES / pbytes) / 6 * 6;
        const int group = 16 * (gp < 6 ? 6 : gp);
        for (int r0 = a; r0 < b; r0 += group) {
            const int re = b - r0 < group ? b : r0 + group;
            for (int t0 = 0; t0 < n; t0 += 32) {
                const int nt = n - t0 < 32 ? n - t0 : 32;
                float *Yt = Y + (size_t)t0 * ldy;
                const uint16_t *ht = hi + (size_t)t0 * cols;
                int r = panels_multi(Yt, ldy, ht, W, nt, r0, re, cbuf);
                panels_one(Yt, ldy, ht, NULL, W, nt, r, re, 1, cbuf);
            }
        }
    }
    TRELEASE();
}

#else /* the compiler has no AMX: the tier is never chosen (rf_amx_built) */

int AMXFN(rf_amx_built)(void) { return 0; }
size_t AMXFN(rf_bf16_prep_amx_bytes)(int n, int cols, int single) { return 0; }
void AMXFN(rf_bf16_prep_amx)(void *xp, const float *X, int n, int cols, int single) {}
void AMXFN(rf_bf16_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single) {}
size_t AMXFN(rf_q_prep_amx_bytes)(int n, int cols) { return 0; }
void AMXFN(rf_q_prep_amx)(void *xp, const float *X, int n, int cols, rf_dtype wdt) {}
void AMXFN(rf_q_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {}
size_t AMXFN(rf_bf16p_prep_amx_bytes)(int n, int cols, int single) { return 0; }
void AMXFN(rf_bf16p_prep_amx)(void *xp, const float *X, int n, int cols, int single) {}
void AMXFN(rf_bf16p_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b,
                               int single) {}

#endif
