/* dequant.c - the scalar reference dequantisers of ggml's block types other
 * than Q8_0 / Q4_0 (formats/quant.c), following ggml's formulas operation
 * for operation (products and differences in the order ggml writes them,
 * compiled without FMA contraction), so that a weight comes out as the
 * same f32 llama.cpp's reference dequantiser gives. */
#include <string.h>

#include "formats/blocks.h"
#include "util/util.h"

const int8_t rf_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void dq_q4_1(const rf_block_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[i].d), m = rf_f16_to_f32(x[i].m);
        for (int j = 0; j < RF_QK / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + RF_QK / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* the fifth bits of a Q5 block: bit j of qh (little endian) for weight j */
static uint32_t q5_high(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void dq_q5_0(const rf_block_q5_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[i].d);
        const uint32_t qh = q5_high(x[i].qh);
        for (int j = 0; j < RF_QK / 2; j++) {
            const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            y[j] = (((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + RF_QK / 2] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

static void dq_q5_1(const rf_block_q5_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[i].d), m = rf_f16_to_f32(x[i].m);
        const uint32_t qh = q5_high(x[i].qh);
        for (int j = 0; j < RF_QK / 2; j++) {
            const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            y[j] = ((x[i].qs[j] & 0x0F) | h0) * d + m;
            y[j + RF_QK / 2] = ((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

static void dq_iq4_nl(const rf_block_iq4_nl *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += RF_QK) {
        const float d = rf_f16_to_f32(x[i].d);
        for (int j = 0; j < RF_QK / 2; j++) {
            y[j] = d * rf_iq4nl_values[x[i].qs[j] & 0x0F];
            y[j + RF_QK / 2] = d * rf_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

/* Q2_K: per 128 weights, 32 bytes of qs hold four 2-bit planes (shift 0, 2,
 * 4, 6); plane p covers weights 32p..32p+31, each half of 16 with its own
 * scale byte (scale: low nibble, min: high nibble) */
static void dq_q2_k(const rf_block_q2_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rf_f16_to_f32(x[i].d), dmin = rf_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < RF_QK_K; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0x0F), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
                }
    }
}

void rf_q3k_scales(const uint8_t packed[RF_K_SCALE_SIZE], int8_t out[16]) {
    /* the low 4 bits of scale j: the low nibble of byte j (j < 8) or the
     * high nibble of byte j - 8; its 2 high bits: bits 2 (j / 4) and
     * 2 (j / 4) + 1 of byte 8 + j % 4 */
    for (int j = 0; j < 16; j++) {
        const int low = j < 8 ? packed[j] & 0x0F : packed[j - 8] >> 4;
        const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((low | high << 4) - 32);
    }
}

/* Q3_K: the 2-bit planes as in Q2_K; the third bit of weight 32p + l (plane
 * p, l < 32) is bit p of hmask[l] (+ 4 per 128-weight half: bit 4 + p),
 * and a clear bit subtracts 4 */
static void dq_q3_k(const rf_block_q3_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d_all = rf_f16_to_f32(x[i].d);
        int8_t sc[16];
        rf_q3k_scales(x[i].scales, sc);
        const uint8_t *q = x[i].qs, *hm = x[i].hmask;
        uint8_t m = 1;
        int is = 0;
        for (int n = 0; n < RF_QK_K; n += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m <<= 1)
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * sc[is++];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
    }
}

/* Q4_K: per 64 weights, 32 bytes of qs: low nibbles the first 32 (sub-block
 * 2j), high nibbles the next 32 (sub-block 2j + 1) */
static void dq_q4_k(const rf_block_q4_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rf_f16_to_f32(x[i].d), dmin = rf_f16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int j = 0; j < RF_QK_K / 64; j++, q += 32) {
            uint8_t s1, m1, s2, m2;
            rf_k4_scale_min(2 * j, x[i].scales, &s1, &m1);
            rf_k4_scale_min(2 * j + 1, x[i].scales, &s2, &m2);
            const float d1 = d * s1, mn1 = dmin * m1, d2 = d * s2, mn2 = dmin * m2;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0x0F) - mn1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - mn2;
        }
    }
}

/* Q5_K: Q4_K's nibbles plus a fifth bit: for the 64 weights j, bit 2j of
 * qh[l] for the low nibbles, bit 2j + 1 for the high ones */
static void dq_q5_k(const rf_block_q5_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rf_f16_to_f32(x[i].d), dmin = rf_f16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < RF_QK_K / 64; j++, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t s1, m1, s2, m2;
            rf_k4_scale_min(2 * j, x[i].scales, &s1, &m1);
            rf_k4_scale_min(2 * j + 1, x[i].scales, &s2, &m2);
            const float d1 = d * s1, mn1 = dmin * m1, d2 = d * s2, mn2 = dmin * m2;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - mn1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - mn2;
        }
    }
}

/* Q6_K: per 128 weights, 64 bytes of ql and 32 of qh; weight 32p + l
 * (p < 4, l < 32) takes the low (p < 2) or high nibble of ql[l + 32 (p %
 * 2)] and bits 2p, 2p + 1 of qh[l]; scale index 8h + l / 16 + 2p */
static void dq_q6_k(const rf_block_q6_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rf_f16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < RF_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
    }
}

static void dq_q8_k(const rf_block_q8_k *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++)
        for (int j = 0; j < RF_QK_K; j++) *y++ = x[i].d * x[i].qs[j];
}

static void dq_iq4_xs(const rf_block_iq4_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = rf_f16_to_f32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < RF_QK_K / 32; ib++, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0x0F) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * rf_iq4nl_values[qs[j] & 0x0F];
                y[j + 16] = dl * rf_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void rf_dequantize_row(rf_dtype t, const void *x, float *y, int64_t k) {
    const int64_t nb = k / (rf_dtype_block_elems(t) ? rf_dtype_block_elems(t) : 1);
    switch (t) {
    case RF_F32: memcpy(y, x, (size_t)k * 4); break;
    case RF_F16:
        for (int64_t i = 0; i < k; i++) y[i] = rf_f16_to_f32(((const uint16_t *)x)[i]);
        break;
    case RF_BF16:
        for (int64_t i = 0; i < k; i++) y[i] = rf_bf16_to_f32(((const uint16_t *)x)[i]);
        break;
    case RF_Q8_0: rf_dequantize_row_q8_0(x, y, k); break;
    case RF_Q4_0: rf_dequantize_row_q4_0(x, y, k); break;
    case RF_Q4_1: dq_q4_1(x, y, nb); break;
    case RF_Q5_0: dq_q5_0(x, y, nb); break;
    case RF_Q5_1: dq_q5_1(x, y, nb); break;
    case RF_Q2_K: dq_q2_k(x, y, nb); break;
    case RF_Q3_K: dq_q3_k(x, y, nb); break;
    case RF_Q4_K: dq_q4_k(x, y, nb); break;
    case RF_Q5_K: dq_q5_k(x, y, nb); break;
    case RF_Q6_K: dq_q6_k(x, y, nb); break;
    case RF_Q8_K: dq_q8_k(x, y, nb); break;
    case RF_IQ4_NL: dq_iq4_nl(x, y, nb); break;
    case RF_IQ4_XS: dq_iq4_xs(x, y, nb); break;
    }
}
