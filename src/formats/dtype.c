/* dtype.c - the weight types' names, block sizes and ggml type ids. */
#include "formats/dtype.h"

#include "formats/blocks.h"

/* per dtype: ggml's name, weights per block, bytes per block, ggml's id */
static const struct {
    const char *name;
    int elems;
    size_t bytes;
    uint32_t ggml;
} g_types[RF_DTYPE_COUNT] = {
    [RF_F32] = {"F32", 1, 4, 0},
    [RF_F16] = {"F16", 1, 2, 1},
    [RF_BF16] = {"BF16", 1, 2, 30},
    [RF_Q8_0] = {"Q8_0", RF_QK, sizeof(rf_block_q8_0), 8},
    [RF_Q4_0] = {"Q4_0", RF_QK, sizeof(rf_block_q4_0), 2},
    [RF_Q4_1] = {"Q4_1", RF_QK, sizeof(rf_block_q4_1), 3},
    [RF_Q5_0] = {"Q5_0", RF_QK, sizeof(rf_block_q5_0), 6},
    [RF_Q5_1] = {"Q5_1", RF_QK, sizeof(rf_block_q5_1), 7},
    [RF_Q2_K] = {"Q2_K", RF_QK_K, sizeof(rf_block_q2_k), 10},
    [RF_Q3_K] = {"Q3_K", RF_QK_K, sizeof(rf_block_q3_k), 11},
    [RF_Q4_K] = {"Q4_K", RF_QK_K, sizeof(rf_block_q4_k), 12},
    [RF_Q5_K] = {"Q5_K", RF_QK_K, sizeof(rf_block_q5_k), 13},
    [RF_Q6_K] = {"Q6_K", RF_QK_K, sizeof(rf_block_q6_k), 14},
    [RF_Q8_K] = {"Q8_K", RF_QK_K, sizeof(rf_block_q8_k), 15},
    [RF_IQ4_NL] = {"IQ4_NL", RF_QK, sizeof(rf_block_iq4_nl), 20},
    [RF_IQ4_XS] = {"IQ4_XS", RF_QK_K, sizeof(rf_block_iq4_xs), 23},
};

static int valid(rf_dtype t) { return (unsigned)t < RF_DTYPE_COUNT; }

size_t rf_dtype_size(rf_dtype t) { return t == RF_F32 ? 4 : 2; }
const char *rf_dtype_name(rf_dtype t) { return valid(t) ? g_types[t].name : "?"; }
int rf_dtype_is_quant(rf_dtype t) { return valid(t) && t != RF_F32 && t != RF_F16 && t != RF_BF16; }
int rf_dtype_block_elems(rf_dtype t) { return valid(t) ? g_types[t].elems : 0; }
size_t rf_dtype_block_bytes(rf_dtype t) { return valid(t) ? g_types[t].bytes : 0; }
uint32_t rf_dtype_ggml_id(rf_dtype t) { return valid(t) ? g_types[t].ggml : UINT32_MAX; }
double rf_dtype_bits(rf_dtype t) { return valid(t) ? 8.0 * (double)g_types[t].bytes / g_types[t].elems : 0; }

size_t rf_dtype_row_bytes(rf_dtype t, int64_t cols) {
    if (cols < 0 || !valid(t)) return 0;
    const int64_t e = g_types[t].elems;
    return cols % e ? 0 : (size_t)(cols / e) * g_types[t].bytes;
}

int rf_dtype_from_ggml(uint32_t id, rf_dtype *out) {
    for (int t = 0; t < RF_DTYPE_COUNT; t++)
        if (g_types[t].ggml == id && t != RF_Q8_K) { /* Q8_K: activations only, never a weight */
            *out = (rf_dtype)t;
            return 0;
        }
    return -1;
}

/* ggml.h's enum ggml_type, as its type_traits spell them (upper case, as
 * llama.cpp prints them); the gaps are ids ggml removed */
const char *rf_ggml_type_name(uint32_t id) {
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0", "Q8_1",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
        "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
        "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
        "IQ4_NL_8_8", "MXFP4",
    };
    return id < sizeof names / sizeof names[0] ? names[id] : NULL;
}
