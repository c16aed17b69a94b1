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

#endif
