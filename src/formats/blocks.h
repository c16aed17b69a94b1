/* blocks.h - ggml's block-quantised weight layouts (ggml-common.h), bit for
 * bit, and the scalar reference conversions (formats/quant*.c,
 * formats/dequant.c).
 *
 * Every scale (d, dmin, m) is an IEEE f16 unless said otherwise. Legacy
 * types cut a row into blocks of RF_QK = 32 weights; the K-quants and
 * IQ4_XS into super-blocks of RF_QK_K = 256 with sub-block scales.
 *   Q8_0   34 B: d, int8 q[32]                  w = d q
 *   Q4_0   18 B: d, nibbles qs[16]              w = d (nib - 8)
 *   Q4_1   20 B: d, m, nibbles qs[16]           w = d nib + m
 *   Q5_0   22 B: d, qh[4], qs[16]               w = d (nib | hi << 4) - 16 d
 *   Q5_1   24 B: d, m, qh[4], qs[16]            w = d (nib | hi << 4) + m
 *      (legacy nibbles: byte j holds weight j low, weight j + 16 high; Q5's
 *       fifth bits: bit j of the little-endian u32 qh for weight j)
 *   IQ4_NL 18 B: d, qs[16]                      w = d kvalues[nib]
 *   Q2_K   84 B: scales[16] (low nibble scale, high nibble min, per 16
 *          weights), 2-bit qs[64], d, dmin      w = d sc q - dmin m
 *   Q3_K  110 B: hmask[32], 2-bit qs[64], 6-bit scales packed in 12 bytes
 *          (16 of them, offset 32), d           w = d (sc - 32) (q - 4 [hbit 0])
 *   Q4_K  144 B: d, dmin, 6-bit scales and mins packed in 12 bytes (8 each,
 *          per 32 weights), nibbles qs[128]     w = d sc q - dmin m
 *   Q5_K  176 B: d, dmin, scales[12], qh[32], qs[128]: Q4_K plus a fifth bit
 *   Q6_K  210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16]
 *          (per 16 weights), d                  w = d sc (q - 32)
 *   Q8_K  292 B: f32 d, int8 q[256], int16 bsums[16] (sums of 16): the
 *          activations' type of the K-quant dot products, not a weight type
 *   IQ4_XS 136 B: d, scales_h (2 high bits per 32), scales_l[4] (4 low
 *          bits per 32), nibbles qs[128]        w = d (ls - 32) kvalues[nib]
 * The bit positions within each layout are given by the dequantisers in
 * formats/dequant.c, which follow ggml's reference formulas. */
#ifndef RF_BLOCKS_H
#define RF_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"

#define RF_QK 32
#define RF_QK_K 256
#define RF_K_SCALE_SIZE 12

typedef struct { uint16_t d; int8_t qs[RF_QK]; } rf_block_q8_0;
typedef struct { uint16_t d; uint8_t qs[RF_QK / 2]; } rf_block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[RF_QK / 2]; } rf_block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[RF_QK / 2]; } rf_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[RF_QK / 2]; } rf_block_q5_1;
typedef struct { uint16_t d; uint8_t qs[RF_QK / 2]; } rf_block_iq4_nl;
typedef struct {
    uint8_t scales[RF_QK_K / 16];
    uint8_t qs[RF_QK_K / 4];
    uint16_t d, dmin;
} rf_block_q2_k;
typedef struct {
    uint8_t hmask[RF_QK_K / 8];
    uint8_t qs[RF_QK_K / 4];
    uint8_t scales[RF_K_SCALE_SIZE];
    uint16_t d;
} rf_block_q3_k;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[RF_K_SCALE_SIZE];
    uint8_t qs[RF_QK_K / 2];
} rf_block_q4_k;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[RF_K_SCALE_SIZE];
    uint8_t qh[RF_QK_K / 8];
    uint8_t qs[RF_QK_K / 2];
} rf_block_q5_k;
typedef struct {
    uint8_t ql[RF_QK_K / 2];
    uint8_t qh[RF_QK_K / 4];
    int8_t scales[RF_QK_K / 16];
    uint16_t d;
} rf_block_q6_k;
typedef struct {
    float d;
    int8_t qs[RF_QK_K];
    int16_t bsums[RF_QK_K / 16];
} rf_block_q8_k;
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[RF_QK_K / 64];
    uint8_t qs[RF_QK_K / 2];
} rf_block_iq4_xs;

_Static_assert(sizeof(rf_block_q8_0) == 34, "Q8_0 block is 34 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q4_0) == 18, "Q4_0 block is 18 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q4_1) == 20, "Q4_1 block is 20 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q5_0) == 22, "Q5_0 block is 22 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q5_1) == 24, "Q5_1 block is 24 bytes, as in ggml");
_Static_assert(sizeof(rf_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q2_k) == 84, "Q2_K block is 84 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q3_k) == 110, "Q3_K block is 110 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q4_k) == 144, "Q4_K block is 144 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q5_k) == 176, "Q5_K block is 176 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q6_k) == 210, "Q6_K block is 210 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q8_k) == 292, "Q8_K block is 292 bytes, as in ggml");
_Static_assert(sizeof(rf_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes, as in ggml");

/* IQ4_NL / IQ4_XS: the 16 non-linear levels a nibble indexes */
extern const int8_t rf_iq4nl_values[16];

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12
 * packed bytes */
static inline void rf_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* Q3_K: the 16 scales (signed, offset 32 removed) from the 12 packed bytes */
void rf_q3k_scales(const uint8_t packed[RF_K_SCALE_SIZE], int8_t out[16]);

/* x[k] -> blocks (k a whole number of blocks): ggml's quantisers as
 * llama-quantize runs them without an importance matrix (the same bytes) */
void rf_quantize_row_q8_0(const float *x, void *y, int64_t k);
void rf_quantize_row_q4_0(const float *x, void *y, int64_t k);
void rf_quantize_row_q4_1(const float *x, void *y, int64_t k);
void rf_quantize_row_q5_0(const float *x, void *y, int64_t k);
void rf_quantize_row_q5_1(const float *x, void *y, int64_t k);
void rf_quantize_row_q2_k(const float *x, void *y, int64_t k);
void rf_quantize_row_q3_k(const float *x, void *y, int64_t k);
void rf_quantize_row_q4_k(const float *x, void *y, int64_t k);
void rf_quantize_row_q5_k(const float *x, void *y, int64_t k);
void rf_quantize_row_q6_k(const float *x, void *y, int64_t k);
void rf_quantize_row_iq4_nl(const float *x, void *y, int64_t k);
void rf_quantize_row_iq4_xs(const float *x, void *y, int64_t k);
/* the quantiser of any weight block type; -1 for the element types and Q8_K */
int rf_quantize_row(rf_dtype t, const float *x, void *y, int64_t k);
/* blocks -> y[k], for every quantised dtype (ggml's dequantisers) */
void rf_dequantize_row(rf_dtype t, const void *x, float *y, int64_t k);
void rf_dequantize_row_q8_0(const void *x, float *y, int64_t k);
void rf_dequantize_row_q4_0(const void *x, float *y, int64_t k);

#endif
