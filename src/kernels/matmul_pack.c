/* matmul_pack.c - the packed panel layouts of bf16, Q8_0, Q4_0, IQ4_NL,
 * Q4_1, Q5_0, Q5_1 and the 256-weight super-block types (kernels.h
 * rf_mat_pack), written once at load time and read by both the
 * avx512 kernels (matmul_avx512.c: one 64-byte vector per 16 rows) and the
 * avx2 ones (matmul_avx2p.c: the same vector as two 32-byte halves of 8
 * rows). One layout for both tiers, so a model packed at either tier runs at
 * the other one unchanged (rf_cpu_set_tier, REFUSION_CPU).
 *
 * Compiled with the baseline flags (AVX2 + FMA + F16C): packing happens on
 * every CPU, also one without AVX-512.
 *
 * All layouts: panels of 16 rows (row 16p + r in lane r of a panel p's
 * vectors), rows past the end of W zero-weighted. */
#include <omp.h>
#include <string.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"
#include "util/util.h"

/* bf16: in panel p, vector j (64 bytes) holds W[16p + r][2j], W[16p +
 * r][2j + 1] in its 32-bit lane r (odd cols: the last pair's second half
 * zero). A kernel broadcasts the token's pair (x[2j], x[2j + 1]) and gets
 * the pair's products for 16 (avx512) or 8 (avx2) output rows at once: the
 * accumulators hold outputs, not partial sums, so no horizontal sums. */
size_t rf_bf16_pack_bytes(int rows, int cols) { return (size_t)((rows + 15) / 16) * ((cols + 1) / 2) * 64; }

void rf_bf16_pack(void *dst, const uint16_t *w, int rows, int cols) {
    const int k2 = (cols + 1) / 2, np = (rows + 15) / 16;
    /* panels in parallel: an 8B model packs 15 GB */
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++) {
        uint32_t *o = (uint32_t *)dst + (size_t)p * k2 * 16;
        for (int r = 0; r < 16; r++) {
            int row = 16 * p + r;
            const uint16_t *src = w + (size_t)row * cols;
            if (row >= rows) {
                for (int j = 0; j < k2; j++) o[(size_t)j * 16 + r] = 0;
                continue;
            }
            for (int j = 0; j < cols / 2; j++) { /* one row's pairs, read in order */
                uint32_t pair;
                memcpy(&pair, src + 2 * j, 4);
                o[(size_t)j * 16 + r] = pair;
            }
            if (cols & 1) o[(size_t)(k2 - 1) * 16 + r] = src[cols - 1];
        }
    }
}

/* Q8_0: per panel and 32-block (RF_Q8P_BLOCK = 576 bytes per 16 x 32
 * weights; Q8_0 itself: 544), 8 vectors of 64 bytes (vector g: in lane r
 * the 4 weights of columns 4g..4g+3 of row 16p + r, as unsigned bytes w +
 * 128, what vpdpbusd takes; the avx2 kernel flips the top bit back) and
 * one vector of the 16 rows' scales in f32 (at byte 512). */
size_t rf_q8p_pack_bytes(int rows, int cols) { return (size_t)((rows + 15) / 16) * (cols / RF_QK) * RF_Q8P_BLOCK; }

void rf_q8p_pack(void *dst, const void *w, int rows, int cols) {
    const int nb = cols / RF_QK, np = (rows + 15) / 16;
    const rf_block_q8_0 *W = w;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nb + b) * RF_Q8P_BLOCK;
            float *dw = (float *)(o + 512);
            for (int r = 0; r < 16; r++) {
                int row = 16 * p + r;
                const rf_block_q8_0 *blk = row < rows ? W + (size_t)row * nb + b : NULL;
                for (int c = 0; c < RF_QK; c++) /* column c: vector c / 4, lane r, byte c % 4 */
                    o[(c / 4) * 64 + r * 4 + c % 4] = blk ? (uint8_t)(blk->qs[c] ^ 0x80) : 0x80;
                dw[r] = blk ? rf_f16_to_f32(blk->d) : 0.0f;
            }
        }
}

/* Q4_0: per panel and 32-block (RF_Q4P_BLOCK = 320 bytes per 16 x 32
 * weights; Q4_0 itself: 288), 4 vectors of 64 bytes (vector v, lane r,
 * byte k: low nibble = column 4v + k, high nibble = column 16 + 4v + k of
 * row 16p + r, as stored: w + 8) and the 16 scales in f32 (at byte 256).
 * Two ANDs and a shift give the column groups v and 4 + v as bytes.
 *
 * IQ4_NL: the same panels (its block is Q4_0's: f16 d, then byte j with
 * column j low and 16 + j high), the nibbles indexes into rf_iq4nl_values;
 * the kernels map them to levels with a byte shuffle. */
size_t rf_q4p_pack_bytes(int rows, int cols) { return (size_t)((rows + 15) / 16) * (cols / RF_QK) * RF_Q4P_BLOCK; }

void rf_q4p_pack(void *dst, const void *w, int rows, int cols) {
    const int nb = cols / RF_QK, np = (rows + 15) / 16;
    const rf_block_q4_0 *W = w;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nb + b) * RF_Q4P_BLOCK;
            float *dw = (float *)(o + 256);
            for (int r = 0; r < 16; r++) {
                int row = 16 * p + r;
                const rf_block_q4_0 *blk = row < rows ? W + (size_t)row * nb + b : NULL;
                for (int v = 0; v < 4; v++)
                    for (int k = 0; k < 4; k++) {
                        int c = 4 * v + k; /* ggml: qs[c] holds column c (low) and 16 + c (high) */
                        o[v * 64 + r * 4 + k] = blk ? blk->qs[c] : 0x88;
                    }
                dw[r] = blk ? rf_f16_to_f32(blk->d) : 0.0f;
            }
        }
}

/* Q4_K: per panel and 256-column super-block (RF_Q4KP_SB = 2,432 bytes per
 * 16 x 256 weights, 4.75 bits a weight; Q4_K itself: 4.5): the 8 chunks of
 * 32 columns as Q4_0's panels hold theirs (chunk c at byte 256 c, vector v,
 * lane r, byte k: low nibble = level of column 32 c + 4 v + k, high nibble
 * = of column 32 c + 16 + 4 v + k, the levels 0..15 as stored), then the
 * chunks' 6-bit scales (byte 2048 + 16 c + r) and mins (byte 2176 + 16 c +
 * r) as bytes, then the 16 rows' d and dmin in f32 (bytes 2304 and 2368).
 * A weight is d sc q - dmin m, as ggml dequantises it.
 *
 * Q5_K: the same with each chunk's fifth bits after its nibbles (chunk c at
 * 320 c: 256 B of nibbles, then 64 B whose byte 4 r + k holds at bit v the
 * fifth bit of column 4 v + k and at bit 4 + v that of column 16 + 4 v + k,
 * v = 0..3), so the scales at 2560, mins at 2688, d at 2816, dmin at 2880
 * (RF_Q5KP_SB = 2,944 bytes, 5.75 bits a weight). ggml: weight 32 c + l is
 * qs[32 (c / 2) + l]'s low (c even) or high nibble plus 16 times bit c of
 * qh[l]. */
/* Q4_1, Q5_0, Q5_1: per panel and 32-block, Q4_0's 4 vectors of nibbles
 * (the levels 0..15 as stored), for Q5_0 / Q5_1 then one vector of fifth
 * bits as a Q5_K chunk holds them (byte 4 r + k: bit v = column 4 v + k's,
 * bit 4 + v = column 16 + 4 v + k's), then the 16 rows' d and m as f16
 * (the block's own halves: Q4_1 d at byte 256, m at 288; Q5_0 / Q5_1 d at
 * 320, m at 352, zero for Q5_0). A weight is d q + m (Q5_0: d (q - 16)),
 * as ggml dequantises it. f16 rather than Q4_0's f32 scales: the copy is
 * as large as the blocks (Q5_0: 352 bytes padded to 384 for aligned
 * vectors), so a 1-token call streams no more than the file holds.
 * ggml: qs[j] holds column j (low) and 16 + j (high), bit j of qh column
 * j's fifth bit. */
size_t rf_q41p_pack_bytes(rf_dtype dt, int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK) * rf_qp_block_bytes(dt);
}

/* a Q4_1, Q5_0 or Q5_1 block's fields: nibbles, fifth bits (0 for Q4_1),
 * d and m (0 for Q5_0) */
static void q41_fields(rf_dtype dt, const void *blk, const uint8_t **qs, uint32_t *qh, uint16_t *d, uint16_t *m) {
    *qh = 0, *m = 0;
    if (dt == RF_Q4_1) {
        const rf_block_q4_1 *b = blk;
        *qs = b->qs, *d = b->d, *m = b->m;
    } else if (dt == RF_Q5_0) {
        const rf_block_q5_0 *b = blk;
        *qs = b->qs, *d = b->d;
        memcpy(qh, b->qh, 4);
    } else {
        const rf_block_q5_1 *b = blk;
        *qs = b->qs, *d = b->d, *m = b->m;
        memcpy(qh, b->qh, 4);
    }
}

void rf_q41p_pack(rf_dtype dt, void *dst, const void *w, int rows, int cols) {
    const int nb = cols / RF_QK, np = (rows + 15) / 16;
    const size_t block = rf_qp_block_bytes(dt), bb = rf_dtype_block_bytes(dt), dofs = rf_qp_scales_at(dt);
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nb + b) * block;
            uint16_t *d = (uint16_t *)(o + dofs), *m = d + 16;
            memset(o, 0, block);
            for (int r = 0; r < 16 && 16 * p + r < rows; r++) {
                const uint8_t *qs;
                uint32_t qh;
                q41_fields(dt, (const uint8_t *)w + ((size_t)(16 * p + r) * nb + b) * bb, &qs, &qh, d + r, m + r);
                for (int v = 0; v < 4; v++)
                    for (int k = 0; k < 4; k++) {
                        const int c = 4 * v + k;
                        o[64 * v + 4 * r + k] = qs[c];
                        if (dt != RF_Q4_1)
                            o[256 + 4 * r + k] |= (uint8_t)(((qh >> c) & 1) << v | ((qh >> (16 + c)) & 1) << (4 + v));
                    }
            }
        }
}

size_t rf_q4kp_pack_bytes(int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK_K) * RF_Q4KP_SB;
}

size_t rf_q5kp_pack_bytes(int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK_K) * RF_Q5KP_SB;
}

/* Q4_K (q5 = 0) or Q5_K (q5 = 1): the two blocks differ only by Q5_K's qh */
static void k45_pack(void *dst, const void *w, int rows, int cols, int q5) {
    const int nsb = cols / RF_QK_K, np = (rows + 15) / 16;
    const size_t sb = q5 ? RF_Q5KP_SB : RF_Q4KP_SB, chunk = q5 ? 320 : 256, scales = 8 * chunk;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int s = 0; s < nsb; s++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nsb + s) * sb;
            float *d = (float *)(o + scales + 256), *dmin = d + 16;
            memset(o, 0, sb);
            for (int r = 0; r < 16 && 16 * p + r < rows; r++) {
                const size_t i = (size_t)(16 * p + r) * nsb + s;
                const rf_block_q4_k *b4 = q5 ? NULL : (const rf_block_q4_k *)w + i;
                const rf_block_q5_k *b5 = q5 ? (const rf_block_q5_k *)w + i : NULL;
                const uint8_t *qs_all = q5 ? b5->qs : b4->qs, *sc = q5 ? b5->scales : b4->scales;
                for (int c = 0; c < 8; c++) {
                    /* ggml: qs[32 (c / 2) + l], low nibble for even c, high for odd */
                    const uint8_t *qs = qs_all + 32 * (c / 2);
                    const int shift = 4 * (c & 1);
                    uint8_t *oc = o + chunk * c;
                    for (int v = 0; v < 4; v++)
                        for (int k = 0; k < 4; k++) {
                            const int l0 = 4 * v + k, l1 = 16 + 4 * v + k;
                            const uint8_t lo = (qs[l0] >> shift) & 0x0F, hi = (qs[l1] >> shift) & 0x0F;
                            oc[64 * v + 4 * r + k] = (uint8_t)(lo | hi << 4);
                            if (q5)
                                oc[256 + 4 * r + k] |=
                                    (uint8_t)(((b5->qh[l0] >> c) & 1) << v | ((b5->qh[l1] >> c) & 1) << (4 + v));
                        }
                    rf_k4_scale_min(c, sc, o + scales + 16 * c + r, o + scales + 128 + 16 * c + r);
                }
                d[r] = rf_f16_to_f32(q5 ? b5->d : b4->d);
                dmin[r] = rf_f16_to_f32(q5 ? b5->dmin : b4->dmin);
            }
        }
}

void rf_q4kp_pack(void *dst, const void *w, int rows, int cols) { k45_pack(dst, w, rows, cols, 0); }

void rf_q5kp_pack(void *dst, const void *w, int rows, int cols) { k45_pack(dst, w, rows, cols, 1); }

size_t rf_q6kp_pack_bytes(int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK_K) * RF_Q6KP_SB;
}

/* weight e (0..255) of a Q6_K block as its unsigned 6-bit value (ggml:
 * element 128 h + 32 g + l, g = 0..3, takes ql[64 h + l + 32 (g & 1)]'s
 * low nibble for g < 2 and high for g >= 2, and qh[32 h + l]'s bits 2 g) */
static int q6_value(const rf_block_q6_k *b, int e) {
    const int h = e / 128, g = e % 128 / 32, l = e % 32;
    const int lo = (b->ql[64 * h + l + 32 * (g & 1)] >> (g >= 2 ? 4 : 0)) & 0x0F;
    return lo | ((b->qh[32 * h + l] >> (2 * g)) & 3) << 4;
}

/* Per panel and super-block: 8 chunks of 32 columns, each the low nibbles
 * as a Q4_0 panel (256 B) and the high bit pairs (128 B: vector v's byte
 * 4r + k, in byte 4r + k of high vector v / 2 at bit 4 (v & 1), column
 * 4v + k's pair, then column 16 + 4v + k's); then the 16 scales of each
 * row as bytes, chunk c's first 16 columns at 3072 + 32c + r and its last
 * at 3072 + 32c + 16 + r; then the rows' d at 3328. */
void rf_q6kp_pack(void *dst, const void *w, int rows, int cols) {
    const int nsb = cols / RF_QK_K, np = (rows + 15) / 16;
    const rf_block_q6_k *W = w;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int s = 0; s < nsb; s++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nsb + s) * RF_Q6KP_SB;
            float *d = (float *)(o + 3328);
            memset(o, 0, RF_Q6KP_SB);
            for (int r = 0; r < 16 && 16 * p + r < rows; r++) {
                const rf_block_q6_k *blk = W + (size_t)(16 * p + r) * nsb + s;
                for (int c = 0; c < 8; c++) {
                    uint8_t *oc = o + 384 * c;
                    for (int v = 0; v < 4; v++)
                        for (int k = 0; k < 4; k++) {
                            const int lo = q6_value(blk, 32 * c + 4 * v + k), hi = q6_value(blk, 32 * c + 16 + 4 * v + k);
                            oc[64 * v + 4 * r + k] = (uint8_t)((lo & 0x0F) | (hi & 0x0F) << 4);
                            oc[256 + 64 * (v / 2) + 4 * r + k] |= (uint8_t)((lo >> 4 | (hi >> 4) << 2) << 4 * (v & 1));
                        }
                    o[3072 + 32 * c + r] = (uint8_t)blk->scales[2 * c];
                    o[3072 + 32 * c + 16 + r] = (uint8_t)blk->scales[2 * c + 1];
                }
                d[r] = rf_f16_to_f32(blk->d);
            }
        }
}

/* Q3_K and Q2_K: per panel and 256-column super-block, 8 chunks of 32
 * columns (Q3_K: 192 bytes each, Q2_K: 128), each the 2-bit levels of its
 * first 16 columns in one vector (byte 4 r + k, bits 2 v and 2 v + 1:
 * column 4 v + k) and of its last 16 in the next (column 16 + 4 v + k),
 * for Q3_K then the high bits in a third (byte 4 r + k: bit v = column 4
 * v + k's, bit 4 + v = column 16 + 4 v + k's); then the 16-column scales
 * as bytes (chunk c's first 16 columns at 8 chunk + 32 c + r, its last 16
 * on): Q3_K's 6-bit scales minus 32 as signed bytes, Q2_K's scale byte as
 * stored (scale in the low nibble, min in the high one); then the rows' d
 * in f32 (8 chunk + 256), for Q2_K their dmin after it. A weight is d sc
 * (q - 4) (Q3_K, q = the 2 bits + 4 x the high bit) or d sc q - dmin m
 * (Q2_K), as ggml dequantises them; ggml: column j of chunk c takes bits
 * 2 (c % 4) of qs[32 (c / 4) + j] and bit c of hmask[j]. 1,856 / 1,408
 * bytes per 16 x 256 weights: 5.5% / 4.8% more than the blocks (their f16
 * d as f32). */
size_t rf_k23p_pack_bytes(rf_dtype dt, int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK_K) * rf_kp_sb_bytes(dt);
}

void rf_k23p_pack(rf_dtype dt, void *dst, const void *w, int rows, int cols) {
    const int nsb = cols / RF_QK_K, np = (rows + 15) / 16, q3 = dt == RF_Q3_K;
    const size_t sb = rf_kp_sb_bytes(dt), chunk = rf_k16p_chunk(dt), scales = 8 * chunk;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int s = 0; s < nsb; s++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nsb + s) * sb;
            float *d = (float *)(o + scales + 256);
            memset(o, 0, sb);
            for (int r = 0; r < 16 && 16 * p + r < rows; r++) {
                const size_t i = (size_t)(16 * p + r) * nsb + s;
                const rf_block_q3_k *b3 = q3 ? (const rf_block_q3_k *)w + i : NULL;
                const rf_block_q2_k *b2 = q3 ? NULL : (const rf_block_q2_k *)w + i;
                const uint8_t *qs = q3 ? b3->qs : b2->qs;
                int8_t sc[16];
                if (q3) rf_q3k_scales(b3->scales, sc);
                for (int c = 0; c < 8; c++) {
                    uint8_t *oc = o + chunk * c;
                    for (int j = 0; j < 32; j++) {
                        const int half = j / 16, v = j % 16 / 4, k = j % 4;
                        oc[64 * half + 4 * r + k] |= (uint8_t)(((qs[32 * (c / 4) + j] >> 2 * (c % 4)) & 3) << 2 * v);
                        if (q3) oc[128 + 4 * r + k] |= (uint8_t)(((b3->hmask[j] >> c) & 1) << (4 * half + v));
                    }
                    for (int h = 0; h < 2; h++)
                        o[scales + 32 * c + 16 * h + r] = q3 ? (uint8_t)sc[2 * c + h] : b2->scales[2 * c + h];
                }
                d[r] = rf_f16_to_f32(q3 ? b3->d : b2->d);
                if (!q3) d[16 + r] = rf_f16_to_f32(b2->dmin);
            }
        }
}

/* IQ4_XS: per panel and 256-column super-block (RF_IQ4XSP_SB = 2,240 bytes
 * per 16 x 256 weights, 4.375 bits a weight; IQ4_XS itself: 4.25): the 8
 * chunks of 32 columns as Q4_0's panels hold theirs (chunk c at byte 256 c,
 * vector v, lane r, byte k: low nibble = index of column 32 c + 4 v + k,
 * high nibble = of column 32 c + 16 + 4 v + k), then the chunks' scales
 * ls - 32 (-32..31) as signed bytes (byte 2048 + 16 c + r), then the 16
 * rows' d in f32 (byte 2176). A weight is d (ls - 32) rf_iq4nl_values[i],
 * as ggml dequantises it; rows past the end of W are all zero. */
size_t rf_iq4xsp_pack_bytes(int rows, int cols) {
    return (size_t)((rows + 15) / 16) * (cols / RF_QK_K) * RF_IQ4XSP_SB;
}

void rf_iq4xsp_pack(void *dst, const void *w, int rows, int cols) {
    const int nsb = cols / RF_QK_K, np = (rows + 15) / 16;
    const rf_block_iq4_xs *W = w;
#pragma omp parallel for schedule(dynamic, 16) if (np > 64 && !omp_in_parallel())
    for (int p = 0; p < np; p++)
        for (int s = 0; s < nsb; s++) {
            uint8_t *o = (uint8_t *)dst + ((size_t)p * nsb + s) * RF_IQ4XSP_SB;
            float *d = (float *)(o + 2176);
            memset(o, 0, RF_IQ4XSP_SB);
            for (int r = 0; r < 16 && 16 * p + r < rows; r++) {
                const rf_block_iq4_xs *blk = W + (size_t)(16 * p + r) * nsb + s;
                for (int c = 0; c < 8; c++) {
                    /* ggml: qs[16 c + j] holds column 32 c + j (low) and 32 c + 16 + j (high) */
                    for (int v = 0; v < 4; v++)
                        for (int k = 0; k < 4; k++) o[256 * c + 64 * v + 4 * r + k] = blk->qs[16 * c + 4 * v + k];
                    const int ls = ((blk->scales_l[c / 2] >> 4 * (c % 2)) & 0x0F) | (((blk->scales_h >> 2 * c) & 3) << 4);
                    o[2048 + 16 * c + r] = (uint8_t)(int8_t)(ls - 32);
                }
                d[r] = rf_f16_to_f32(blk->d);
            }
        }
}
