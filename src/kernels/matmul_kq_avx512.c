/* matmul_kq_avx512.c - the avx512 tier's Y = X . W^T for the 256-weight
 * super-block types (Q2_K..Q6_K, IQ4_XS), W in ggml's row-major blocks.
 *
 * The blocks are decoded as at avx2 (matmul_kq.c rf_kq_decode: int8 levels
 * q, a scale s and a min m per 16 weights) and the activations are the
 * same per-32 int8 blocks (rf_kq_prep); the dot takes two 32-chunks, 64
 * weights, per instruction: vpdpbusd of |q| against the activations
 * negated where q < 0 (AVX-512 has no byte sign instruction: a masked
 * subtract from zero), which leaves in each 32-bit lane the sum of 4
 * products, lanes 4k..4k + 3 one 16-weight piece. Each lane is scaled by
 * its piece's s times its chunk's activation scale, the mins subtracted
 * as at avx2 (m dx sum(x_q)). A decoded block serves every token of the
 * call's token block. */
#include <immintrin.h>

#include "formats/blocks.h"
#include "kernels/matmul_impl.h"

/* one decoded super-block (8 chunks of 32) against tokens [0, T) of x (each
 * token's row of xstride 32-blocks, from this block's first chunk) */
static void block_dot(const rf_kq_block *w, int has_min, const rf_xk *x, size_t xstride, int T, __m512 *acc,
                      float *accm) {
    const __m512i zero = _mm512_setzero_si512(), quarter = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int c = 0; c < 8; c += 2) {
        const __m512i ws = _mm512_loadu_si512(w->q + 32 * c), wu = _mm512_abs_epi8(ws);
        const __mmask64 neg = _mm512_movepi8_mask(ws);
        /* lane l holds weights 4l..4l + 3: the scale of piece l / 4 */
        const __m512 sc = _mm512_permutexvar_ps(quarter, _mm512_castps128_ps512(_mm_loadu_ps(w->s + 2 * c)));
        const float *m = w->m + 2 * c;
        for (int t = 0; t < T; t++) {
            const rf_xk *x0 = x + t * xstride + c, *x1 = x0 + 1;
            __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x0->q)),
                                            _mm256_loadu_si256((const __m256i *)x1->q), 1);
            xv = _mm512_mask_sub_epi8(xv, neg, zero, xv);
            const __m512i s = _mm512_dpbusd_epi32(zero, wu, xv);
            const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(x0->d), _mm256_set1_ps(x1->d), 1);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, dx), acc[t]);
            if (has_min)
                accm[t] += x0->d * (m[0] * x0->s[0] + m[1] * x0->s[1]) + x1->d * (m[2] * x1->s[0] + m[3] * x1->s[1]);
        }
    }
}

#define KQ_TMAX 64

void rf_kq_range_avx512(float *Y, size_t ldy, const void *xp, const rf_mat *W, int n, int a, int b) {
    const rf_dtype dt = W->dtype;
    const int nblk = W->cols / RF_QK_K, nb = W->cols / RF_QK;
    const size_t bb = rf_dtype_block_bytes(dt), ws = rf_dtype_row_bytes(dt, W->cols);
    const int has_min = dt == RF_Q2_K || dt == RF_Q4_K || dt == RF_Q5_K;
    const rf_xk *X = xp;
    int tbmax = rf_token_block((size_t)nb * sizeof(rf_xk));
    if (tbmax > KQ_TMAX) tbmax = KQ_TMAX;
    rf_kq_block w;
    __m512 acc[KQ_TMAX];
    float accm[KQ_TMAX];
    for (int t0 = 0; t0 < n; t0 += tbmax) {
        const int T = n - t0 < tbmax ? n - t0 : tbmax;
        for (int r = a; r < b; r++) {
            const char *row = (const char *)W->data + (size_t)r * ws;
            for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps(), accm[t] = 0;
            for (int k = 0; k < nblk; k++) {
                rf_kq_decode(dt, row + k * bb, &w);
                block_dot(&w, has_min, X + (size_t)t0 * nb + k * 8, nb, T, acc, accm);
            }
            for (int t = 0; t < T; t++) Y[(size_t)(t0 + t) * ldy + r] = _mm512_reduce_add_ps(acc[t]) - accm[t];
        }
    }
}
