/* quant_k.c - ggml's reference quantisers of Q4_K, Q6_K and Q5_0 (the
 * no-importance-matrix path llama-quantize takes: quantize_row_*_ref), so
 * that a Q4_K_M or Q6_K file this project writes holds the bytes
 * llama.cpp's would. The arithmetic follows ggml's operation for operation
 * (the same summation orders, products in the same association, rounding
 * by the same 1.5 * 2^23 trick, no FMA contraction: src/formats is
 * compiled with -ffp-contract=off), since a different rounding of one
 * scale changes every level of its sub-block. */
#include <math.h>
#include <string.h>

#include "formats/blocks.h"
#include "util/util.h"

/* the nearest integer, ties to even, for |v| < 2^22: v + 1.5 * 2^23 puts
 * the integer in the low mantissa bits */
static inline int nearest(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q4_K's per-32 fit: levels L in [0, nmax] with w ~ scale L - min, the
 * scale and min chosen among nstep + 1 trial scales by the weighted squared
 * error (the weighted least-squares scale and min of each trial's levels);
 * returns the scale, *neg_min = -min (>= 0) */
static float fit_scale_min(int n, int nmax, const float *x, const float *wt, uint8_t *L, float *neg_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float lo = x[0], hi = x[0], sum_w = wt[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        float w = wt[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -lo;
        return 0.f;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best += wt[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest(iscale * (x[i] - lo)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = wt[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D, m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) {
                m = 0;
                s = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = s * Laux[i] + m - x[i];
                err += wt[i] * (diff * diff);
            }
            if (err < best) {
                memcpy(L, Laux, (size_t)n);
                best = err;
                scale = s;
                lo = m;
            }
        }
    }
    *neg_min = -lo;
    return scale;
}

void rf_quantize_row_q4_k(const float *x, void *vy, int64_t k) {
    rf_block_q4_k *y = vy;
    uint8_t L[RF_QK_K], Laux[32];
    float wt[32], mins[8], scales[8];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) wt[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = fit_scale_min(32, 15, x + 32 * j, wt, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int j = 0; j < 8; j++) {
            uint8_t ls = (uint8_t)nearest(inv_scale * scales[j]), lm = (uint8_t)nearest(inv_min * mins[j]);
            ls = ls < 63 ? ls : 63;
            lm = lm < 63 ? lm : 63;
            if (j < 4) {
                y[i].scales[j] = ls;
                y[i].scales[j + 4] = lm;
            } else { /* the low 4 bits beside each other, the high 2 on top of sub-blocks 0..3's */
                y[i].scales[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
                y[i].scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                y[i].scales[j] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        y[i].d = rf_f32_to_f16(max_scale / 63.f);
        y[i].dmin = rf_f32_to_f16(max_min / 63.f);
        for (int j = 0; j < 8; j++) { /* the levels again against the rounded scales */
            uint8_t sc, m;
            rf_k4_scale_min(j, y[i].scales, &sc, &m);
            const float d = rf_f16_to_f32(y[i].d) * sc;
            if (!d) continue;
            const float dm = rf_f16_to_f32(y[i].dmin) * m;
            for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(nearest((x[32 * j + l] + dm) / d), 0, 15);
        }
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

/* Q6_K's per-16 fit: signed levels in [-nmax, nmax - 1] around the value of
 * largest magnitude, the scale refined over 18 trial scales by the error
 * weighted with x^2; returns the scale, L holds level + nmax */
static float fit_signed(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) amax = ax, max = x[i];
    }
    if (amax < 1e-15f) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
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
            int l = clampi(nearest(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(nearest(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
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
        if (max_abs < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = rf_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int s = nearest(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = rf_f16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(nearest(x[16 * j + l] / d), -32, 31) + 32);
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

void rf_quantize_row_q5_0(const float *x, void *vy, int64_t k) {
    rf_block_q5_0 *y = vy;
    for (int64_t b = 0; b < k / RF_QK; b++, x += RF_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < RF_QK; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
        const float d = max / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = rf_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < RF_QK / 2; j++) {
            int q0 = (int8_t)(x[j] * id + 16.5f), q1 = (int8_t)(x[j + RF_QK / 2] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[b].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= (uint32_t)((q0 & 0x10) >> 4) << j;
            qh |= (uint32_t)((q1 & 0x10) >> 4) << (j + RF_QK / 2);
        }
        for (int i = 0; i < 4; i++) y[b].qh[i] = (uint8_t)(qh >> (8 * i));
    }
}
