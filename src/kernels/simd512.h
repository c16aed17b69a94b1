/* simd512.h - small AVX-512 helpers of the avx512 tier's kernels (internal
 * to src/kernels; only for files compiled with the AVX-512 flags). */
#ifndef RF_SIMD512_H
#define RF_SIMD512_H

#include <immintrin.h>

/* Horizontal sums of four zmm at once: {sum a, sum b, sum c, sum d} (13 ops
 * instead of 4 x _mm512_reduce_add_ps). */
static inline __attribute__((always_inline)) __m128 hsum4_512(__m512 a, __m512 b, __m512 c, __m512 d) {
    /* per 128-bit lane: ab = {a0+a2, b0+b2, a1+a3, b1+b3} */
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    /* per 128-bit lane: {a, b, c, d} partial sums */
    __m512d abd = _mm512_castps_pd(ab), cdd = _mm512_castps_pd(cd);
    __m512 abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                                _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* e^x for 16 lanes: simd.h's rf_exp8 step for step (the same constants and
 * rounding, so each lane equals rf_exp8's), masks instead of blends */
static inline __attribute__((always_inline)) __m512 rf_exp16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.7228317f), lo = _mm512_set1_ps(-87.3365478f);
    __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    /* lanes under the bound compute e^0 instead: clamped to it they would build
     * a denormal 2^k p, and its microcode assist would dominate a pass over
     * a vocabulary whose logits lie far below the max; they return 0 below */
    x = _mm512_min_ps(hi, _mm512_mask_mov_ps(x, under, _mm512_setzero_ps())); /* min returns x for NaN: kept */
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i ki = _mm512_cvtps_epi32(k);
    __m512i k1 = _mm512_srai_epi32(ki, 1), k2 = _mm512_sub_epi32(ki, k1);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, _mm512_set1_epi32(127)), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, _mm512_set1_epi32(127)), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
}

#endif
