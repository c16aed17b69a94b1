/* matmul_amx.c - the amx tier's bf16 matmul with AMX tiles (TDPBF16PS).
 *
 * Verified on an Intel Xeon with AMX (tests/kernels_matmul at tier amx against
 * the double-precision reference); its speed has not been measured. The code
 * compiles in every build (per-file -mamx-* flags, CMakeLists.txt; stubs
 * when the compiler lacks them) and is chosen only when kernels/cpu.c finds
 * AMX-TILE/BF16/INT8 and the OS grants the tile data (arch_prctl). Its
 * layout and indexing are also tested on any CPU by tests/kernels_amx_emul.c,
 * which compiles this file with RF_AMX_EMULATE: the six tile operations
 * below are then plain C following Intel's pseudocode.
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
#else
#include <immintrin.h>
#define TCFG(c) _tile_loadconfig(c)
#define TRELEASE() _tile_release()
#define TZERO(t) _tile_zero(t)
#define TLOAD(t, p, s) _tile_loadd(t, p, s)
#define TSTORE(t, p, s) _tile_stored(t, p, s)
#define TDP(c, a, b) _tile_dpbf16ps(c, a, b)
#endif

int AMXFN(rf_amx_built)(void) { return 1; }

/* per token group of 16 and 32-column chunk: 512 bf16 (hi), and 512 (lo) */
static inline size_t group_elems(int cols, int single) { return (size_t)(cols / 32) * (single ? 1 : 2) * 512; }

size_t AMXFN(rf_bf16_prep_amx_bytes)(int n, int cols, int single) {
    return (size_t)((n + 15) / 16) * group_elems(cols, single) * 2;
}

void AMXFN(rf_bf16_prep_amx)(void *xp, const float *X, int n, int cols, int single) {
    const int nk = cols / 32, H = single ? 1 : 2;
    uint16_t *o = xp;
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
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64; /* C 0-3, A 4, B 5-6 */
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
    for (size_t t = 0; t < n16; t++)
        for (int c = 0; c < cols; c++) {
            float v = t < (size_t)n ? X[t * cols + c] : 0.0f;
            uint16_t h = rf_f32_to_bf16(v);
            hi[t * cols + c] = h;
            if (!single) lo[t * cols + c] = rf_f32_to_bf16(v - rf_bf16_to_f32(h));
        }
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

void AMXFN(rf_bf16p_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b,
                               int single) {
    const int cols = W->cols, nk = cols / 32, ng = (n + 15) / 16;
    const size_t n16 = (size_t)ng * 16, lda = (size_t)cols * 2;
    const uint16_t *hi = xp, *lo = hi + n16 * cols;
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64; /* C 0-3, A 4 and 6, B 5 */
    float cbuf[4][16][16] __attribute__((aligned(64)));
    TCFG(&cfg);
    for (int r = a; r < b; r += 16) { /* a: a panel boundary (matmul.c's packed chunks) */
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
            for (int gi = 0; gi < gn; gi++)
                for (int t = 0; t < 16 && (g0 + gi) * 16 + t < n; t++)
                    memcpy(Y + (size_t)((g0 + gi) * 16 + t) * ldy + r, cbuf[gi][t], (size_t)rr * sizeof(float));
        }
    }
    TRELEASE();
}

#else /* the compiler has no AMX: the tier is never chosen (rf_amx_built) */

int AMXFN(rf_amx_built)(void) { return 0; }
size_t AMXFN(rf_bf16_prep_amx_bytes)(int n, int cols, int single) { return 0; }
void AMXFN(rf_bf16_prep_amx)(void *xp, const float *X, int n, int cols, int single) {}
void AMXFN(rf_bf16_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single) {}
size_t AMXFN(rf_bf16p_prep_amx_bytes)(int n, int cols, int single) { return 0; }
void AMXFN(rf_bf16p_prep_amx)(void *xp, const float *X, int n, int cols, int single) {}
void AMXFN(rf_bf16p_range_amx)(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b,
                               int single) {}

#endif
