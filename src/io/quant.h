/* quant.h - llama.cpp's (ggml's) block-quantised weight formats, bit for bit.
 *
 * Both formats cut a row into blocks of RF_QK = 32 weights, each block with
 * one IEEE f16 scale d:
 *   Q8_0 (34 bytes/block): int8 q[32];          w = d * q
 *   Q4_0 (18 bytes/block): nibbles qs[16];      w = d * (nibble - 8)
 *        byte j holds weight j in its low nibble and weight j + 16 in its high.
 * Quantising follows ggml's reference formulas (quantize_row_*_ref), so a file
 * we write holds the same bytes llama.cpp would. Rows must be a whole number
 * of blocks (cols % 32 == 0), as in ggml. */
#ifndef RF_QUANT_H
#define RF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

#define RF_QK 32

typedef struct {
    uint16_t d;         /* f16 scale */
    int8_t qs[RF_QK];
} rf_block_q8_0;

typedef struct {
    uint16_t d;         /* f16 scale */
    uint8_t qs[RF_QK / 2];
} rf_block_q4_0;

_Static_assert(sizeof(rf_block_q8_0) == 34, "Q8_0 block is 34 bytes, as in ggml");
_Static_assert(sizeof(rf_block_q4_0) == 18, "Q4_0 block is 18 bytes, as in ggml");

/* 1 for block-quantised dtypes (Q8_0, Q4_0) */
int rf_dtype_is_quant(rf_dtype t);
/* Bytes of one row of `cols` weights; 0 when cols is not a whole number of
 * blocks for a quantised dtype. */
size_t rf_dtype_row_bytes(rf_dtype t, int64_t cols);

/* x[k] -> blocks (k % 32 == 0) */
void rf_quantize_row_q8_0(const float *x, void *y, int64_t k);
void rf_quantize_row_q4_0(const float *x, void *y, int64_t k);
/* blocks -> y[k] */
void rf_dequantize_row_q8_0(const void *x, float *y, int64_t k);
void rf_dequantize_row_q4_0(const void *x, float *y, int64_t k);

#endif
