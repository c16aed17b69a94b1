/* attention_avx512.c - the avx512 tier's attention for a pair of query heads
 * that share a KV head (kernels.h rf_scores2 / rf_mix2 dispatch here; built
 * with AVX-512 flags, called only when kernels/cpu.c found the tier).
 * 16-wide vectors: a 64-float head is 4 of them, half the instructions of
 * the AVX2 path. The sums are ordered differently from the AVX2 path (the
 * tiers may differ in the last bits; within one tier a token's attention
 * does not depend on the call: every key takes the same steps). */
#include <immintrin.h>
#include <string.h>

#include "kernels/attention_impl.h"
#include "kernels/simd512.h"

void rf_scores2_avx512(float *sc0, float *sc1, const float *q0, const float *q1, const float *K, size_t ldk, int n,
                       int hd, float scale) {
    for (int t = 0; t < n; t += 4) { /* the last 1-3 keys repeat the last one */
        const float *k0 = K + (size_t)t * ldk;
        const float *k1 = t + 1 < n ? k0 + ldk : k0, *k2 = t + 2 < n ? k1 + ldk : k1, *k3 = t + 3 < n ? k2 + ldk : k2;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int i = 0; i < hd; i += 16) {
            __m512 x0 = _mm512_loadu_ps(q0 + i), x1 = _mm512_loadu_ps(q1 + i);
            __m512 v = _mm512_loadu_ps(k0 + i);
            a0 = _mm512_fmadd_ps(x0, v, a0), b0 = _mm512_fmadd_ps(x1, v, b0);
            v = _mm512_loadu_ps(k1 + i);
            a1 = _mm512_fmadd_ps(x0, v, a1), b1 = _mm512_fmadd_ps(x1, v, b1);
            v = _mm512_loadu_ps(k2 + i);
            a2 = _mm512_fmadd_ps(x0, v, a2), b2 = _mm512_fmadd_ps(x1, v, b2);
            v = _mm512_loadu_ps(k3 + i);
            a3 = _mm512_fmadd_ps(x0, v, a3), b3 = _mm512_fmadd_ps(x1, v, b3);
        }
        float s0[4], s1[4];
        _mm_storeu_ps(s0, _mm_mul_ps(hsum4_512(a0, a1, a2, a3), _mm_set1_ps(scale)));
        _mm_storeu_ps(s1, _mm_mul_ps(hsum4_512(b0, b1, b2, b3), _mm_set1_ps(scale)));
        for (int j = 0; j < 4 && t + j < n; j++) sc0[t + j] = s0[j], sc1[t + j] = s1[j];
    }
}

void rf_mix2_avx512(float *out0, float *out1, const float *p0, const float *p1, const float *V, size_t ldv, int n,
                    int hd) {
    for (int i = 0; i < hd; i += 32) { /* 32 outputs of each query: 4 accumulators */
        __m512 a0 = _mm512_loadu_ps(out0 + i), a1 = _mm512_loadu_ps(out0 + i + 16);
        __m512 b0 = _mm512_loadu_ps(out1 + i), b1 = _mm512_loadu_ps(out1 + i + 16);
        for (int t = 0; t < n; t++) {
            const float *v = V + (size_t)t * ldv + i;
            __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
            __m512 pa = _mm512_set1_ps(p0[t]), pb = _mm512_set1_ps(p1[t]);
            a0 = _mm512_fmadd_ps(pa, v0, a0), a1 = _mm512_fmadd_ps(pa, v1, a1);
            b0 = _mm512_fmadd_ps(pb, v0, b0), b1 = _mm512_fmadd_ps(pb, v1, b1);
        }
        _mm512_storeu_ps(out0 + i, a0), _mm512_storeu_ps(out0 + i + 16, a1);
        _mm512_storeu_ps(out1 + i, b0), _mm512_storeu_ps(out1 + i + 16, b1);
    }
}
