/* quant_iq4.c - ggml's quantisers of IQ4_NL and IQ4_XS without an
 * importance matrix (quantize_iq4_nl / quantize_iq4_xs, through
 * quantize_row_iq4_nl_impl with 7 trial scales each side and weights x^2:
 * the path llama-quantize takes), the arithmetic operation for operation
 * as ggml's (see formats/quant_k.c). */
#include <math.h>
#include <string.h>

#include "formats/blocks.h"
#include "formats/quant_impl.h"
#include "util/util.h"

#define NTRY 7

/* the index of the level nearest to v (ties to the upper one), by bisection
 * as ggml's best_index_int8 */
static int nearest_level(float v) {
    const int8_t *val = rf_iq4nl_values;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < val[mid]) hi = mid;
        else lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

/* the scale of one block of 32 (levels into L), refined over 2 NTRY + 1
 * trial scales by the x^2-weighted fit; 0 for an all-zero block (L
 * untouched) */
static float fit_block(const float *x, uint8_t *L) {
    float amax = 0, max = 0, w[32];
    for (int j = 0; j < 32; j++) {
        w[j] = x[j] * x[j];
        float ax = fabsf(x[j]);
        if (ax > amax) amax = ax, max = x[j];
    }
    if (amax < RF_GROUP_MAX_EPS) return 0;
    const int8_t *values = rf_iq4nl_values;
    float d = -max / values[0], id = 1 / d, sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = nearest_level(id * x[j]);
        L[j] = (uint8_t)l;
        float q = values[l];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = values[nearest_level(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void pack_nibbles(const uint8_t L[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[16 + j] << 4));
}

void rf_quantize_row_iq4_nl(const float *x, void *vy, int64_t k) {
    rf_block_iq4_nl *y = vy;
    uint8_t L[32];
    for (int64_t i = 0; i < k / RF_QK; i++, x += RF_QK) {
        const float d = fit_block(x, L), id = d ? 1 / d : 0;
        y[i].d = rf_f32_to_f16(d);
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_level(id * x[j]);
        pack_nibbles(L, y[i].qs);
    }
}

void rf_quantize_row_iq4_xs(const float *x, void *vy, int64_t k) {
    rf_block_iq4_xs *y = vy;
    uint8_t L[32];
    float scales[8];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = fit_block(x + 32 * ib, L);
            if (fabsf(scales[ib]) > amax_scale) amax_scale = fabsf(scales[ib]), max_scale = scales[ib];
        }
        /* 6-bit block scales, offset 32, of the super-block scale d (its
         * f32 value: the levels are found against d l before d is rounded) */
        const float d = -max_scale / 32, id = d ? 1 / d : 0.f;
        y[i].d = rf_f32_to_f16(d);
        y[i].scales_h = 0;
        for (int ib = 0; ib < 8; ib++) {
            int l = rf_clampi(rf_nearest(id * scales[ib]), -32, 31);
            const float dl = d * l, idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)nearest_level(idl * x[32 * ib + j]);
            pack_nibbles(L, y[i].qs + 16 * ib);
            l += 32;
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(l & 0x0F);
            else y[i].scales_l[ib / 2] |= (uint8_t)((l & 0x0F) << 4);
            y[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    }
}
