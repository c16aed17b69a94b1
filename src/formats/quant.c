/* quant.c - ggml's reference quantisers of the 32-weight legacy blocks (Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1: quantize_row_*_ref, the path llama-quantize takes
 * without an importance matrix), the dequantisers of Q8_0 / Q4_0 (the other
 * types: formats/dequant.c) and rf_quantize_row, which picks the quantiser
 * of a type (the K-quants: formats/quant_k.c, formats/quant_k_signed.c; IQ4:
 * formats/quant_iq4.c). The fast matmuls over the blocks live in kernels/. */
#include "formats/blocks.h"

#include <float.h>
#include <math.h>

#include "util/util.h"

void rf_quantize_row_q8_0(const float *x, void *vy, int64_t k) {
    rf_block_q8_0 *y = vy;
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        float amax = 0.0f;
        for (int j = 0; j < RF_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        for (int j = 0; j < RF_QK; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* the signed value of largest magnitude in a block of 32 (the first of equals) */
static float block_signed_max(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < RF_QK; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    return max;
}

void rf_quantize_row_q4_0(const float *x, void *vy, int64_t k) {
    rf_block_q4_0 *y = vy;
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        /* the signed value of largest magnitude maps to -8 */
        const float d = block_signed_max(x) / -8.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        for (int j = 0; j < RF_QK / 2; j++) {
            int q0 = (int)(int8_t)(x[j] * id + 8.5f), q1 = (int)(int8_t)(x[j + RF_QK / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* the range [min, max] of a block of 32, for the types with a min */
static void block_range(const float *x, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < RF_QK; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

void rf_quantize_row_q4_1(const float *x, void *vy, int64_t k) {
    rf_block_q4_1 *y = vy;
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        float min, max;
        block_range(x, &min, &max);
        const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        y[b].m = rf_f32_to_f16(min);
        for (int j = 0; j < RF_QK / 2; j++) {
            int q0 = (int8_t)((x[j] - min) * id + 0.5f), q1 = (int8_t)((x[j + RF_QK / 2] - min) * id + 0.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* Q5_0 / Q5_1: the low nibbles of level j and j + 16 in qs[j], the fifth
 * bits in the little-endian u32 qh */
static void pack_q5(const uint8_t q[RF_QK], uint8_t qs[RF_QK / 2], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < RF_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + RF_QK / 2] & 0x0F) << 4));
        h |= (uint32_t)((q[j] & 0x10) >> 4) << j;
        h |= (uint32_t)((q[j + RF_QK / 2] & 0x10) >> 4) << (j + RF_QK / 2);
    }
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> (8 * i));
}

void rf_quantize_row_q5_0(const float *x, void *vy, int64_t k) {
    rf_block_q5_0 *y = vy;
    uint8_t q[RF_QK];
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        const float d = block_signed_max(x) / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        for (int j = 0; j < RF_QK; j++) {
            int l = (int8_t)(x[j] * id + 16.5f);
            q[j] = (uint8_t)(l < 31 ? l : 31);
        }
        pack_q5(q, y[b].qs, y[b].qh);
    }
}

void rf_quantize_row_q5_1(const float *x, void *vy, int64_t k) {
    rf_block_q5_1 *y = vy;
    uint8_t q[RF_QK];
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        float min, max;
        block_range(x, &min, &max);
        const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        y[b].m = rf_f32_to_f16(min);
        for (int j = 0; j < RF_QK; j++) q[j] = (uint8_t)((x[j] - min) * id + 0.5f);
        pack_q5(q, y[b].qs, y[b].qh);
    }
}

int rf_quantize_row(rf_dtype t, const float *x, void *y, int64_t k) {
    switch (t) {
    case RF_Q8_0: rf_quantize_row_q8_0(x, y, k); return 0;
    case RF_Q4_0: rf_quantize_row_q4_0(x, y, k); return 0;
    case RF_Q4_1: rf_quantize_row_q4_1(x, y, k); return 0;
    case RF_Q5_0: rf_quantize_row_q5_0(x, y, k); return 0;
    case RF_Q5_1: rf_quantize_row_q5_1(x, y, k); return 0;
    case RF_Q2_K: rf_quantize_row_q2_k(x, y, k); return 0;
    case RF_Q3_K: rf_quantize_row_q3_k(x, y, k); return 0;
    case RF_Q4_K: rf_quantize_row_q4_k(x, y, k); return 0;
    case RF_Q5_K: rf_quantize_row_q5_k(x, y, k); return 0;
    case RF_Q6_K: rf_quantize_row_q6_k(x, y, k); return 0;
    case RF_IQ4_NL: rf_quantize_row_iq4_nl(x, y, k); return 0;
    case RF_IQ4_XS: rf_quantize_row_iq4_xs(x, y, k); return 0;
    default: return -1; /* the element types, and Q8_K (activations only) */
    }
}

void rf_dequantize_row_q8_0(const void *vx, float *y, int64_t k) {
    const rf_block_q8_0 *x = vx;
    for (int64_t b = 0; b < k / RF_QK; b++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[b].d);
        for (int j = 0; j < RF_QK; j++) y[j] = x[b].qs[j] * d;
    }
}

void rf_dequantize_row_q4_0(const void *vx, float *y, int64_t k) {
    const rf_block_q4_0 *x = vx;
    for (int64_t b = 0; b < k / RF_QK; b++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[b].d);
        for (int j = 0; j < RF_QK / 2; j++) {
            y[j] = ((x[b].qs[j] & 0x0F) - 8) * d;
            y[j + RF_QK / 2] = ((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}
