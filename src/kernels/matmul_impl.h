/* matmul_impl.h - (internal to src/kernels) the per-tier matmul kernels that
 * rf_matmul_rows (matmul.c) dispatches to. Each path has two halves:
 *  - prep: converts the n activation rows once per call into the layout its
 *    kernel reads (bf16 hi/lo pairs, or int8 blocks with scales), on the
 *    calling thread;
 *  - range: output rows [a, b) of W for all n tokens, on one thread; the
 *    OpenMP threading over row chunks stays in matmul.c.
 * Y is [n, ldy]; W is the (row-offset) view of the rows being computed. */
#ifndef RF_MATMUL_IMPL_H
#define RF_MATMUL_IMPL_H

#include <stddef.h>
#include <xmmintrin.h>
#include "kernels/kernels.h"

/* 1: this call prefetches into L2 (kernels.h rf_matmul_set_prefetch_l2; set
 * by matmul.c's plan before any range runs); one prefetch of a weight
 * stream's line */
extern int rf_mm_prefetch_l2;
static inline __attribute__((always_inline)) void rf_prefetch_stream(const void *p) {
    if (rf_mm_prefetch_l2)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
    else
        _mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* the most panels a tile of up to RF_STREAM_PANELS_MAX_T tokens in the
 * panel-group order streams at once this call (kernels.h
 * rf_matmul_set_stream_panels; set by matmul.c's plan before any range
 * runs): 0 the kernels' own counts, else 1, 2 or 4; a kernel's count P
 * for T tokens capped by it (wider tiles keep theirs: on a Zen 5 one
 * panel made Q4_0's 5- and 6-token calls 2-4% slower) */
extern int rf_mm_stream_panels;
enum { RF_STREAM_PANELS_MAX_T = 4 };
static inline int rf_stream_panels(int P, int T) {
    return T <= RF_STREAM_PANELS_MAX_T && rf_mm_stream_panels && P > rf_mm_stream_panels ? rf_mm_stream_panels : P;
}

/* amx: bf16 calls of RF_AMX_BF16_MIN_N tokens or more run on TDPBF16PS tiles
 * (matmul.c AMX_MIN_TOKENS), packed Q8_0 / Q4_0 calls of these widths on the
 * int8 tiles by default (matmul.c amx_q_wanted, where the measurements are;
 * kernels.h rf_matmul_set_amx_int8 overrides them); cpu.c's tier note says
 * the same from these */
#define RF_AMX_BF16_MIN_N 5
/* "off" / N / other from REFUSION_AMX_* (matmul.c) */
int rf_kernels_env_min_tokens(const char *e);
#define RF_AMX_Q8_MIN_N 5
#define RF_AMX_Q8_MAX_N 32
#define RF_AMX_Q4_MIN_N 9
#define RF_AMX_Q4_MAX_N 16

/* Activations quantised per 32-block to int8 as ggml's q8_0 does (d =
 * max|x| / 127, q = round-to-nearest-even(x / d)), but d is kept in f32. */

/* ---- packed panels (matmul_pack.c, baseline flags): one layout that the
 * avx512 and the avx2 kernels both read; panels of 16 rows ---- */
#define RF_Q8P_BLOCK 576 /* bytes per panel and 32-block: 16 x 32 weights + 16 f32 scales */
#define RF_Q4P_BLOCK 320 /* the same, nibbles */
size_t rf_bf16_pack_bytes(int rows, int cols);
void rf_bf16_pack(void *dst, const uint16_t *w, int rows, int cols);
size_t rf_q8p_pack_bytes(int rows, int cols);
void rf_q8p_pack(void *dst, const void *w, int rows, int cols);
size_t rf_q4p_pack_bytes(int rows, int cols);
void rf_q4p_pack(void *dst, const void *w, int rows, int cols);
/* Q4_1 / Q5_0 / Q5_1 (matmul_pack.c): Q4_0's nibbles, Q5's fifth bits,
 * the rows' d and m in f16 */
size_t rf_q41p_pack_bytes(rf_dtype dt, int rows, int cols);
void rf_q41p_pack(rf_dtype dt, void *dst, const void *w, int rows, int cols);
#define RF_Q4KP_SB 2432 /* Q4_K: bytes per panel and 256-column super-block (matmul_pack.c) */
size_t rf_q4kp_pack_bytes(int rows, int cols);
void rf_q4kp_pack(void *dst, const void *w, int rows, int cols);
#define RF_Q5KP_SB 2944 /* Q5_K: bytes per panel and 256-column super-block (matmul_pack.c) */
size_t rf_q5kp_pack_bytes(int rows, int cols);
void rf_q5kp_pack(void *dst, const void *w, int rows, int cols);
#define RF_Q6KP_SB 3392 /* Q6_K: bytes per panel and 256-column super-block (matmul_pack.c) */
size_t rf_q6kp_pack_bytes(int rows, int cols);
void rf_q6kp_pack(void *dst, const void *w, int rows, int cols);
#define RF_IQ4XSP_SB 2240 /* IQ4_XS: bytes per panel and 256-column super-block (matmul_pack.c) */
size_t rf_iq4xsp_pack_bytes(int rows, int cols);
void rf_iq4xsp_pack(void *dst, const void *w, int rows, int cols);
#define RF_Q3KP_SB 1856 /* Q3_K: bytes per panel and 256-column super-block (matmul_pack.c) */
#define RF_Q2KP_SB 1408 /* Q2_K: the same */
size_t rf_k23p_pack_bytes(rf_dtype dt, int rows, int cols);
void rf_k23p_pack(rf_dtype dt, void *dst, const void *w, int rows, int cols);
/* The super-block panels with a scale per 16 columns (Q6_K, Q3_K, Q2_K):
 * bytes per 32-column chunk; the chunks' scale bytes follow the 8 chunks,
 * the rows' d (f32) 256 bytes on, Q2_K's dmin 64 bytes further */
static inline size_t rf_k16p_chunk(rf_dtype dt) { return dt == RF_Q6_K ? 384 : dt == RF_Q3_K ? 192 : 128; }
/* bytes per panel and super-block of the super-block panel types */
static inline size_t rf_kp_sb_bytes(rf_dtype dt) {
    switch (dt) {
    case RF_Q4_K: return RF_Q4KP_SB;
    case RF_Q5_K: return RF_Q5KP_SB;
    case RF_Q6_K: return RF_Q6KP_SB;
    case RF_Q3_K: return RF_Q3KP_SB;
    case RF_Q2_K: return RF_Q2KP_SB;
    default: return RF_IQ4XSP_SB;
    }
}
/* The 32-block panel types (Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0, Q5_1): bytes
 * per panel and block, and the byte of a block where its 16 rows' d begin
 * (f32 for Q8_0 / Q4_0 / IQ4_NL; f16 for Q4_1 / Q5_0 / Q5_1, whose f16 m
 * follow 32 bytes on; matmul_pack.c) */
static inline int rf_qp_f16_scales(rf_dtype dt) { return dt == RF_Q4_1 || dt == RF_Q5_0 || dt == RF_Q5_1; }
static inline size_t rf_qp_block_bytes(rf_dtype dt) {
    return dt == RF_Q8_0 ? RF_Q8P_BLOCK : dt == RF_Q5_0 || dt == RF_Q5_1 ? 384 : RF_Q4P_BLOCK;
}
static inline size_t rf_qp_scales_at(rf_dtype dt) {
    return dt == RF_Q8_0 ? 512 : dt == RF_Q5_0 || dt == RF_Q5_1 ? 320 : 256;
}
/* IQ4_NL / IQ4_XS (Q4_0's panel nibbles): rf_iq4nl_values[i] + 128 (1..241),
 * the table of the byte shuffles that turn a nibble i into the unsigned
 * operand of vpdpbusd; xor 0x80 gives the signed levels back (the avx2
 * kernels). A constant the compiler folds into the kernels, where a load of
 * rf_iq4nl_values would be repeated per block; tests/kernels_kquant.c
 * checks the packed kernels against the dequantiser's table. */
#define RF_IQ4NL_U8 1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241

/* ---- avx2 (matmul_q.c): Q8_0 / Q4_0 with maddubs ---- */
typedef struct {
    int8_t q[32];
    float d;       /* activation scale */
    union {
        int32_t nsum8; /* -8 * sum(q): Q4_0's nibble offset, folded into the integer dot
                        * (packed Q5_0: -16 sum(q)); for packed Q4_K / Q5_K sum(q),
                        * the mins' factor; for packed Q6_K / Q3_K / Q2_K the sums
                        * of the two 16-column halves in the low and high 16 bits
                        * (rf_q_prep_avx2's wdt) */
        float dsum;    /* packed Q4_1 / Q5_1: d sum(q), the factor of the block's min */
    };
} rf_xq_avx2;      /* one 32-block of one token, 40 bytes */
size_t rf_q_prep_avx2_bytes(int n, int cols);
/* share part of parts (tokens: its layout is token-major) */
void rf_q_prep_avx2(void *xp, const float *X, int n, int cols, rf_dtype wdt, int part, int parts);
void rf_q_range_avx2(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);
/* ---- avx2 (matmul_kq.c): the other block types (Q4_1, Q5_0, Q5_1,
 * IQ4_NL, the K-quants, IQ4_XS) when nothing packed them, row-major,
 * decoded per block ---- */
typedef struct {
    int8_t q[32];
    float d;      /* activation scale */
    int16_t s[2]; /* sums of q[0..16) and q[16..32): the weights' mins */
} rf_xk;          /* one 32-block of one token, 40 bytes */
/* the activations for W of dtype dt: rf_xk blocks, or rf_xk512 where
 * rf_kq_direct(dt) */
size_t rf_kq_prep_bytes(int n, int cols, rf_dtype dt);
void rf_kq_prep(void *xp, const float *X, int n, int cols, rf_dtype dt, int part, int parts);
void rf_kq_range(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);
/* one block decoded: int8 levels, and per 16 weights a scale s and a min
 * m with w = s q - m (matmul_kq.c) */
typedef struct {
    int8_t q[256];
    float s[16], m[16];
} rf_kq_block;
void rf_kq_decode(rf_dtype dt, const void *blk, rf_kq_block *o);
/* the avx512 tier's rf_kq_range for the 256-weight super-block types (the
 * K-quants, IQ4_XS): 64 weights per vpdpbusd (matmul_kq_avx512.c);
 * rf_kq_range runs it when the active tier is avx512 or amx */
void rf_kq_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);
/* 1 when W of dtype dt is read straight from its blocks (Q4_K, Q5_K, Q6_K
 * at the avx512 and amx tiers), over activations laid out as rf_xk512 */
int rf_kq_direct(rf_dtype dt);
/* one token's activations for one super-block, per 32-chunk c in the
 * vector (chunk pair) p and half h that hold c's weights (matmul_kq_avx512.c) */
typedef struct {
    int8_t q[4][64];   /* int8 values, as rf_xk */
    float dxs[16];     /* Q4_K / Q5_K: chunk c's scale in dxs[c]; Q6_K: 16-weight
                        * piece i's chunk's (i / 2) in dxs[i] */
    float xs[16];      /* Q4_K / Q5_K: dx sum(q) of chunk c in xs[c] (the mins);
                        * Q6_K: 32 sum(q) of piece i in xs[i] (the offset) */
} rf_xk512;
void rf_kq_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype dt, int part, int parts);
/* ---- avx2, W packed (matmul_avx2p.c; a is a multiple of 16) ---- */
/* bf16: X as it is (f32, no prep) */
void rf_bf16p_range_avx2(float *Y, size_t ldy, const float *X, const rf_mat *W, int n, int a, int b);
/* Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / the K-quants / IQ4_NL / IQ4_XS: the
 * activations from rf_q_prep_avx2 */
void rf_qp_range_avx2(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);

/* ---- avx512 (matmul_avx512.c, compiled with AVX-512 flags) ---- */
/* bf16 weights x activations split as x = hi + lo (both bf16, |x - hi - lo|
 * <= 2^-18 |x|), two vdpbf16ps per weight vector: f32-grade results; or
 * (single != 0) rounded to bf16 once, one vdpbf16ps (rf_matmul_set_bf16_act). */
size_t rf_bf16_prep_avx512_bytes(int n, int cols, int single);
void rf_bf16_prep_avx512(void *xp, const float *X, int n, int cols, int single);
void rf_bf16_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single);
/* bf16 W in 16-row panels (rf_mat_pack): 16-wide f32 FMAs on the widened
 * weights, the activations f32 (split) or rounded to bf16 (single) by the
 * prep; a is a multiple of 16 */
size_t rf_bf16p_prep_avx512_bytes(int n, int cols);
/* share part of parts (16-column chunks: its layout is pair-major) */
void rf_bf16p_prep_avx512(void *xp, const float *X, int n, int cols, int single, int part, int parts);
void rf_bf16p_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);
/* the same W with vdpbf16ps on the packed vectors (matmul_bf16dp_avx512.c;
 * rf_matmul_bf16p_kernel RF_BF16P_DP): the activations as bf16 pairs, hi
 * only (single) or hi and lo (split); a is a multiple of 16 */
size_t rf_bf16dp_prep_avx512_bytes(int n, int cols, int single);
/* share part of parts (16-column chunks: its layout is pair-major) */
void rf_bf16dp_prep_avx512(void *xp, const float *X, int n, int cols, int single, int part, int parts);
void rf_bf16dp_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single);
/* Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / the K-quants / IQ4_NL / IQ4_XS with W in 16-row
 * panels (rf_mat_pack) and the activations
 * per token and block (the same rounding as rf_q_prep_avx512; the prep
 * depends on the weight dtype); a is a multiple of 16 */
size_t rf_q8p_prep_avx512_bytes(int n, int cols);
/* share part of parts (blocks: its layout is block-major) */
void rf_q8p_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype wdt, int part, int parts);
void rf_qp_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);
/* f32 / f16 weights with 16-wide FMAs (X used as it is, no prep) */
void rf_float_range_avx512(float *Y, size_t ldy, const float *X, const rf_mat *W, int n, int a, int b);
/* Q8_0 / Q4_0 with vpdpbusd; prep depends on the weight dtype */
size_t rf_q_prep_avx512_bytes(int n, int cols);
void rf_q_prep_avx512(void *xp, const float *X, int n, int cols, rf_dtype wdt);
void rf_q_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);

/* ---- amx (matmul_amx.c, compiled with AMX and AVX-512 flags) ---- */
/* 1 when the AMX kernels were compiled (the compiler knows -mamx-*), else 0
 * and the amx tier is never chosen */
/* bf16 weights with TDPBF16PS tiles; activations packed per 16-token group
 * (single or hi/lo split as for avx512); cols must be a multiple of 32 */
size_t rf_bf16_prep_amx_bytes(int n, int cols, int single);
void rf_bf16_prep_amx(void *xp, const float *X, int n, int cols, int single);
void rf_bf16_range_amx(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single);
/* the same on W's packed copy (rf_mat_pack; a: a multiple of 16) */
size_t rf_bf16p_prep_amx_bytes(int n, int cols, int single);
void rf_bf16p_prep_amx(void *xp, const float *X, int n, int cols, int single);
void rf_bf16p_range_amx(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b, int single);
/* Q8_0 / Q4_0 with W in 16-row panels (rf_mat_pack) on TDPBSUD tiles; the
 * activations rounded as rf_q8p_prep_avx512 rounds them, in a tile layout
 * (q and -q per block, groups of 16 tokens); a is a multiple of 16. The
 * prep does not depend on the weight dtype (wdt is unused) */
size_t rf_q_prep_amx_bytes(int n, int cols);
void rf_q_prep_amx(void *xp, const float *X, int n, int cols, rf_dtype wdt);
void rf_q_range_amx(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b);

/* tokens per block so that `bytes_per_token` x block stays in L2 (multiple of 4, >= 4) */
static inline int rf_token_block(size_t bytes_per_token) {
    size_t tb = ((size_t)512 << 10) / (bytes_per_token ? bytes_per_token : 1);
    tb = tb / 4 * 4;
    return tb < 4 ? 4 : tb > 128 ? 128 : (int)tb;
}

#endif
