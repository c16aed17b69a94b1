/* simd.h - small AVX2 helpers of the kernels (internal to src/kernels). */
#ifndef RF_SIMD_H
#define RF_SIMD_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* e^x for 8 lanes, ~1 ulp (Cephes expf scheme): x = k ln2 + r with
 * |r| <= ln2/2, e^r by a degree-6 polynomial, times 2^k built in the
 * exponent bits. Below -87.3 it returns 0, above 88.7 +inf, NaN stays NaN. */
static inline __m256 rf_exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7228317f), lo = _mm256_set1_ps(-87.3365478f);
    __m256 over = _mm256_cmp_ps(x, hi, _CMP_GT_OQ), under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    /* lanes under the bound compute e^0 instead: clamped to it they would build
     * a denormal 2^k p, and its microcode assist would dominate a pass over
     * a vocabulary whose logits lie far below the max; they return 0 below */
    x = _mm256_min_ps(hi, _mm256_blendv_ps(x, _mm256_setzero_ps(), under)); /* min returns x for NaN: kept */
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - k ln2 in two steps (ln2 split in a short exact part + rest) */
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^k: k in [-126, 128]; split as 2^(k/2) * 2^(k - k/2) so that k = 128
     * (x just below the overflow bound) does not overflow the exponent field */
    __m256i ki = _mm256_cvtps_epi32(k);
    __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), over);
    return _mm256_blendv_ps(y, _mm256_setzero_ps(), under);
}

/* max over 8 lanes */
static inline float rf_hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 activations as int8 levels q = round(x / d), d = max |x| / 127 (0 for
 * an all-zero block): the levels as s32 in lv[4], 32 s8 in order in *packed
 * (packs interleave 128-bit lanes, a final permute restores the order, as
 * ggml does); returns d */
static inline float rf_quant32_i8(const float *x, __m256i lv[4], __m256i *packed) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(x + 8 * i), m = _mm256_max_ps(m, _mm256_and_ps(v[i], absmask));
    const float d = rf_hmax8(m) / 127.0f, id = d ? 1.0f / d : 0.0f;
    for (int i = 0; i < 4; i++)
        lv[i] = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(v[i], _mm256_set1_ps(id)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(lv[0], lv[1]), _mm256_packs_epi32(lv[2], lv[3]));
    *packed = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return d;
}

/* the sums of rf_quant32_i8's first and last 16 levels (lv as it returns
 * them), for the offsets and mins the block kernels fold in */
static inline void rf_quant32_half_sums(const __m256i lv[4], int32_t *s0, int32_t *s1) {
    const __m256i a = _mm256_add_epi32(lv[0], lv[1]), b = _mm256_add_epi32(lv[2], lv[3]);
    __m128i h = _mm_hadd_epi32(_mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)),
                               _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
    h = _mm_hadd_epi32(h, h); /* lanes: sum a, sum b */
    *s0 = _mm_cvtsi128_si32(h);
    *s1 = _mm_extract_epi32(h, 1);
}

#endif
