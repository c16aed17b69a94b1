/* quant.c - ggml's reference quantisers of the Q8_0 / Q4_0 blocks and the
 * dequantisers of those two (the other types: formats/dequant.c; the fast
 * matmuls over the blocks live in kernels/). */
#include "formats/blocks.h"

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

void rf_quantize_row_q4_0(const float *x, void *vy, int64_t k) {
    rf_block_q4_0 *y = vy;
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        /* the signed value of largest magnitude maps to -8 */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RF_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        for (int j = 0; j < RF_QK / 2; j++) {
            int q0 = (int)(int8_t)(x[j] * id + 8.5f), q1 = (int)(int8_t)(x[j + RF_QK / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
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
