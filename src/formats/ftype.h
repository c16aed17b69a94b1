/* ftype.h - llama.cpp's file types (enum llama_ftype): the type a whole
 * GGUF file is quantised to, which for the K-quant and IQ4 mixes is a rule
 * per tensor (llama-quantize's llama_tensor_get_type without an importance
 * matrix: which matrices get more bits, and the fallbacks for rows that
 * are not whole blocks). The enum values are llama.cpp's numbers, written
 * as general.file_type. */
#ifndef RF_FTYPE_H
#define RF_FTYPE_H

#include <stdint.h>

#include "formats/dtype.h"

typedef enum {
    RF_FTYPE_F32 = 0,
    RF_FTYPE_F16 = 1,
    RF_FTYPE_Q4_0 = 2,
    RF_FTYPE_Q4_1 = 3,
    RF_FTYPE_Q8_0 = 7,
    RF_FTYPE_Q5_0 = 8,
    RF_FTYPE_Q5_1 = 9,
    RF_FTYPE_Q2_K = 10,
    RF_FTYPE_Q3_K_S = 11,
    RF_FTYPE_Q3_K_M = 12,
    RF_FTYPE_Q3_K_L = 13,
    RF_FTYPE_Q4_K_S = 14,
    RF_FTYPE_Q4_K_M = 15,
    RF_FTYPE_Q5_K_S = 16,
    RF_FTYPE_Q5_K_M = 17,
    RF_FTYPE_Q6_K = 18,
    RF_FTYPE_IQ4_NL = 25,
    RF_FTYPE_IQ4_XS = 30,
    RF_FTYPE_BF16 = 32,
} rf_ftype;

/* a file type by llama-quantize's name ("q4_k_m", "IQ4_XS", "f16": any
 * case); -1 for a name that is not one of the above */
int rf_ftype_parse(const char *name, rf_ftype *out);
/* llama-quantize's name ("Q4_K_M"), "?" for a value not in the enum */
const char *rf_ftype_name(rf_ftype ft);
/* the names, lower case, ", " between: for help and error lines */
const char *rf_ftype_list(void);
/* the type of most of the matrices (Q4_K for Q4_K_M); RF_DTYPE_COUNT for a
 * value not in the enum */
rf_dtype rf_ftype_base(rf_ftype ft);
/* the file type a whole-file dtype stands for: its own, and for the
 * K-quants the _M mix (Q4_K -> Q4_K_M, Q3_K -> Q3_K_M); -1 for Q8_K */
int rf_ftype_of_dtype(rf_dtype t, rf_ftype *out);

/* One matrix of a Qwen3 model, as the per-tensor rule sees it */
typedef struct {
    const char *name; /* its GGUF name: "blk.3.attn_v.weight", "output.weight" */
    int layer;        /* its block (-1 for token_embd / output) */
    int n_layers;
    int64_t cols;     /* ne[0], the length of a row */
    int tied;         /* the model has no output.weight: token_embd is also the output matrix */
    int n_gqa;        /* attention heads per KV head */
} rf_ftype_tensor;

/* The type llama-quantize gives the matrix in a file of type ft. */
rf_dtype rf_ftype_tensor_type(rf_ftype ft, const rf_ftype_tensor *t);

#endif
