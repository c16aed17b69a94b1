/* dtype.h - the element types of weights, in files and in memory.
 *
 * F32 / F16 / BF16 are element types (safetensors and GGUF); the others are
 * ggml's block-quantised formats (formats/blocks.h holds their layouts),
 * which occur in GGUF files and in memory. A block type's size is per row
 * of whole blocks (rf_dtype_row_bytes); rf_dtype_size() is for the element
 * types only. */
#ifndef RF_DTYPE_H
#define RF_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    RF_F32 = 0,
    RF_F16 = 1,
    RF_BF16 = 2,
    RF_Q8_0 = 3,
    RF_Q4_0 = 4,
    RF_Q4_1 = 5,
    RF_Q5_0 = 6,
    RF_Q5_1 = 7,
    RF_Q2_K = 8,
    RF_Q3_K = 9,
    RF_Q4_K = 10,
    RF_Q5_K = 11,
    RF_Q6_K = 12,
    RF_Q8_K = 13,
    RF_IQ4_NL = 14,
    RF_IQ4_XS = 15,
} rf_dtype;
#define RF_DTYPE_COUNT 16

size_t rf_dtype_size(rf_dtype t);      /* bytes of an element type (F32 4, F16 / BF16 2) */
const char *rf_dtype_name(rf_dtype t); /* ggml's spelling: "F32", "Q4_K", "IQ4_XS" */
int rf_dtype_parse(const char *s, rf_dtype *out); /* safetensors or torch names (io/safetensors.c) */

/* 1 for the block-quantised types (everything but F32, F16, BF16) */
int rf_dtype_is_quant(rf_dtype t);
/* weights per block (1 for the element types) and bytes per block */
int rf_dtype_block_elems(rf_dtype t);
size_t rf_dtype_block_bytes(rf_dtype t);
/* Bytes of one row of `cols` weights; 0 when cols is not a whole number of
 * blocks for a quantised dtype. */
size_t rf_dtype_row_bytes(rf_dtype t, int64_t cols);
/* bits per weight (F16 16, Q4_K 4.5, Q6_K 6.5625) */
double rf_dtype_bits(rf_dtype t);

/* ggml's type ids (ggml.h enum ggml_type), and a name for any id, ours or
 * not (NULL for an id ggml never had) */
uint32_t rf_dtype_ggml_id(rf_dtype t);
int rf_dtype_from_ggml(uint32_t ggml_type, rf_dtype *out); /* -1: not one we read */
const char *rf_ggml_type_name(uint32_t ggml_type);

#endif
