/* dtype.h - the element types of weights, in files and in memory. */
#ifndef RF_DTYPE_H
#define RF_DTYPE_H

#include <stddef.h>

/* Q8_0 / Q4_0 are ggml block formats (io/quant.h): not safetensors dtypes,
 * they occur in GGUF files and in memory; their size is per row of blocks
 * (rf_dtype_row_bytes), rf_dtype_size() is for the element dtypes only. */
typedef enum { RF_F32 = 0, RF_F16 = 1, RF_BF16 = 2, RF_Q8_0 = 3, RF_Q4_0 = 4 } rf_dtype;
size_t rf_dtype_size(rf_dtype t);
const char *rf_dtype_name(rf_dtype t); /* "F32", "F16", "BF16" */
int rf_dtype_parse(const char *s, rf_dtype *out); /* safetensors or torch names */

#endif
