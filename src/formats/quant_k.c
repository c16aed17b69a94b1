/* quant_k.c - ggml's reference quantisers of the K-quants with a min per
 * sub-block: Q2_K, Q4_K and Q5_K (the no-importance-matrix path
 * llama-quantize takes: quantize_row_*_ref; the signed ones, Q3_K and Q6_K:
 * formats/quant_k_signed.c), so that a file this project writes holds the
 * bytes llama.cpp's would. The arithmetic follows ggml's operation for
 * operation (the same summation orders, products in the same association,
 * rounding by the same 1.5 * 2^23 trick, no FMA contraction: src/formats is
 * compiled with -ffp-contract=off), since a different rounding of one
 * scale changes every level of its sub-block. */
#include <math.h>
#include <string.h>

#include "formats/blocks.h"
#include "formats/quant_impl.h"
#include "util/util.h"

/* The per-sub-block fit (ggml's make_qkx2_quants): levels L in [0, nmax]
 * with w ~ scale L - min, the scale and min chosen among nstep + 1 trial
 * scales by the weighted error (squared, or absolute when mad) of the
 * weighted least-squares scale and min of each trial's levels; returns the
 * scale, *neg_min = -min (>= 0) */
static float fit_scale_min(int n, int nmax, const float *x, const float *wt, uint8_t *L, float *neg_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, int mad) {
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
        L[i] = (uint8_t)rf_clampi(rf_nearest(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        best += wt[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (hi - lo);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = rf_clampi(rf_nearest(iscale * (x[i] - lo)), 0, nmax);
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
                diff = mad ? fabsf(diff) : diff * diff;
                err += wt[i] * diff;
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

/* Q2_K: 16 sub-blocks of 16, 2-bit levels, 4-bit scales and mins */
void rf_quantize_row_q2_k(const float *x, void *vy, int64_t k) {
    rf_block_q2_k *y = vy;
    uint8_t L[RF_QK_K], Laux[16];
    float wt[16], mins[16], scales[16];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) wt[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, wt, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)rf_nearest(iscale * scales[j]);
            y[i].d = rf_f32_to_f16(max_scale / 15.f);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = rf_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(rf_nearest(iscale * mins[j]) << 4);
            y[i].dmin = rf_f32_to_f16(max_min / 15.f);
        } else {
            y[i].dmin = rf_f32_to_f16(0.f);
        }
        for (int j = 0; j < 16; j++) { /* the levels again against the rounded scales */
            const float d = rf_f16_to_f32(y[i].d) * (y[i].scales[j] & 0x0F);
            if (!d) continue;
            const float dm = rf_f16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)rf_clampi(rf_nearest((x[16 * j + l] + dm) / d), 0, 3);
        }
        for (int j = 0; j < RF_QK_K; j += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[j / 4 + l] =
                    (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

/* Q4_K / Q5_K: 8 sub-blocks of 32, 6-bit scales and mins packed in 12
 * bytes; levels in [0, nmax] into L. The fit's search: rmin, nstep. */
static void quantize_k_scale_min(const float *x, uint8_t *packed, uint16_t *dd, uint16_t *dmin, uint8_t *L,
                                 int nmax, float rmin, int nstep) {
    uint8_t Laux[32];
    float wt[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) wt[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_scale_min(32, nmax, x + 32 * j, wt, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(packed, 0, RF_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)rf_nearest(inv_scale * scales[j]), lm = (uint8_t)rf_nearest(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else { /* the low 4 bits beside each other, the high 2 on top of sub-blocks 0..3's */
            packed[j + 4] = (uint8_t)((ls & 0x0F) | ((lm & 0x0F) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dd = rf_f32_to_f16(max_scale / 63.f);
    *dmin = rf_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) { /* the levels again against the rounded scales */
        uint8_t sc, m;
        rf_k4_scale_min(j, packed, &sc, &m);
        const float d = rf_f16_to_f32(*dd) * sc;
        if (!d) continue;
        const float dm = rf_f16_to_f32(*dmin) * m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)rf_clampi(rf_nearest((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void rf_quantize_row_q4_k(const float *x, void *vy, int64_t k) {
    rf_block_q4_k *y = vy;
    uint8_t L[RF_QK_K];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        quantize_k_scale_min(x, y[i].scales, &y[i].d, &y[i].dmin, L, 15, -1.f, 20);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

void rf_quantize_row_q5_k(const float *x, void *vy, int64_t k) {
    rf_block_q5_k *y = vy;
    uint8_t L[RF_QK_K];
    for (int64_t i = 0; i < k / RF_QK_K; i++, x += RF_QK_K) {
        quantize_k_scale_min(x, y[i].scales, &y[i].d, &y[i].dmin, L, 31, -0.5f, 15);
        /* per 64 weights: the low nibbles in 32 bytes of qs, the fifth bits
         * 2j (first 32) and 2j + 1 (next 32) of qh */
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t *ql = y[i].qs, m1 = 1, m2 = 2;
        for (int n = 0; n < RF_QK_K; n += 64, ql += 32, m1 <<= 2, m2 <<= 2)
            for (int j = 0; j < 32; j++) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) l1 -= 16, y[i].qh[j] |= m1;
                if (l2 > 15) l2 -= 16, y[i].qh[j] |= m2;
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
    }
}
