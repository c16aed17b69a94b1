/* quant_k_signed.c - ggml's reference quantisers of the K-quants with signed
 * levels and no min: Q3_K and Q6_K (quantize_row_*_ref; the arithmetic
 * operation for operation as ggml's, as in formats/quant_k.c). */
#include <math.h>
#include <string.h>

#include "formats/blocks.h"
#include "formats/quant_impl.h"
#include "util/util.h"

/* *max = the value of largest magnitude among x[0..n); 0, with L cleared,
 * when the group is all (near) zero and has no scale */
static int largest(int n, const float *x, int8_t *L, float *max) {
    float amax = 0;
    *max = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) amax = ax, *max = x[i];
    }
    if (amax >= RF_GROUP_MAX_EPS) return 1;
    for (int i = 0; i < n; i++) L[i] = 0;
    return 0;
}

/* Q6_K's per-16 fit (ggml's make_qx_quants, weights x^2): signed levels in
 * [-nmax, nmax - 1] around the value of largest magnitude, the scale
 * refined over 18 trial scales; returns the scale, L holds level + nmax */
static float fit_signed(int n, int nmax, const float *x, int8_t *L) {
    float max;
    if (!largest(n, x, L, &max)) return 0.f;
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = rf_clampi(rf_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = rf_clampi(rf_nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + rf_clampi(rf_nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's per-16 fit (ggml's make_q3_quants with rmse): levels in [-nmax,
 * nmax - 1] from the value of largest magnitude, then up to 5 passes that
 * move one level at a time while the weighted (x^2) fit improves; returns
 * the scale, L holds level + nmax (0 for an all-zero block) */
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float max;
    if (!largest(n, x, L, &max)) return 0.f;
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = rf_clampi(rf_nearest(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i], slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = rf_clampi(rf_nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void rf_quantize_row_q3_k(const float *x, void *vy, int64_t k) {
    rf_block_q3_k *y = vy;
    int8_t L[RF_QK_K], sc[16];
    float scales[16];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) amax = fabsf(scales[j]), max_scale = scales[j];
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) { /* 6-bit scales, offset 32: rf_q3k_scales' packing */
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = (int8_t)rf_nearest(iscale * scales[j]);
                l = rf_clampi(l, -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0x0F);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0x0F) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = rf_f32_to_f16(1 / iscale);
        } else {
            y[i].d = rf_f32_to_f16(0.f);
        }
        rf_q3k_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) { /* the levels again against the rounded scales */
            const float d = rf_f16_to_f32(y[i].d) * sc[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(rf_clampi(rf_nearest(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* the third bit of weight j: bit j / 32 of hmask[j % 32] */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int j = 0; j < RF_QK_K; j++)
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] -= 4;
            }
        for (int j = 0; j < RF_QK_K; j += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 4 + l] =
                    (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

void rf_quantize_row_q6_k(const float *x, void *vy, int64_t k) {
    rf_block_q6_k *y = vy;
    int8_t L[RF_QK_K];
    float scales[16];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_signed(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs) max_abs = fabsf(scales[ib]), max_scale = scales[ib];
        }
        if (max_abs < RF_GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = rf_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int s = rf_nearest(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rf_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(rf_clampi(rf_nearest(x[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}
