/* ops.c - the small per-token kernels: rmsnorm, rope, silu*mul, softmax,
 * add, dot, attention scores and mix. AVX2 with scalar tails; f32 unless a
 * comment says otherwise. */
#include <math.h>
#include <stdlib.h>
#include <immintrin.h>
#include "kernels/attention_impl.h"
#include "kernels/ops_impl.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/simd.h"
#include "util/util.h"

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* the first m (< 8) lanes set */
static inline __m256i tail_mask(int m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Sum of squares in double: the result then does not depend on the
 * summation order to well below f32 rounding (cost: 2 conversions and 2
 * FMAs per 8 values, nothing next to the matmuls around it). */
void rf_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        __m256d s0 = _mm256_setzero_pd(), s1 = s0;
        int j = 0;
        for (; j + 8 <= dim; j += 8) {
            __m256 v = _mm256_loadu_ps(xi + j);
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            s0 = _mm256_fmadd_pd(lo, lo, s0);
            s1 = _mm256_fmadd_pd(hi, hi, s1);
        }
        double d[4];
        _mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
        double ss = (d[0] + d[1]) + (d[2] + d[3]);
        for (; j < dim; j++) ss += (double)xi[j] * xi[j];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        __m256 vinv = _mm256_set1_ps(inv);
        for (j = 0; j + 8 <= dim; j += 8) /* out may alias x: read before write */
            _mm256_storeu_ps(oi + j, _mm256_mul_ps(_mm256_loadu_ps(w + j), _mm256_mul_ps(_mm256_loadu_ps(xi + j), vinv)));
        for (; j < dim; j++) oi[j] = w[j] * (xi[j] * inv);
    }
}

/* inv_freq[j] = 1 / theta^(2j/hd) in f32 as torch computes it, and the angle
 * f32(pos) * inv_freq[j] as an f32 product (torch's float matmul), so the
 * rounding of the angle at large positions matches the reference model;
 * cos and sin of that f32 angle are then computed accurately. */
void rf_rope_table(float *cs, const int *pos, int n, int head_dim, float theta) {
    const int half = head_dim / 2;
    for (int j = 0; j < half; j++) {
        const float inv_freq = 1.0f / powf(theta, (float)(2 * j) / (float)head_dim);
        for (int i = 0; i < n; i++) {
            float ang = (float)pos[i] * inv_freq;
            cs[(size_t)i * head_dim + j] = cosf(ang);
            cs[(size_t)i * head_dim + half + j] = sinf(ang);
        }
    }
}

void rf_rope_apply(float *x, const float *cs_table, int n, int n_heads, int head_dim) {
    const int half = head_dim / 2;
    for (int i = 0; i < n; i++) {
        const float *cs = cs_table + (size_t)i * head_dim, *sn = cs + half;
        for (int h = 0; h < n_heads; h++) {
            float *a = x + ((size_t)i * n_heads + h) * head_dim, *b = a + half;
            int j = 0;
            for (; j + 8 <= half; j += 8) {
                __m256 x1 = _mm256_loadu_ps(a + j), x2 = _mm256_loadu_ps(b + j);
                __m256 c = _mm256_loadu_ps(cs + j), s = _mm256_loadu_ps(sn + j);
                _mm256_storeu_ps(a + j, _mm256_fmsub_ps(x1, c, _mm256_mul_ps(x2, s)));
                _mm256_storeu_ps(b + j, _mm256_fmadd_ps(x2, c, _mm256_mul_ps(x1, s)));
            }
            for (; j < half; j++) {
                float x1 = a[j], x2 = b[j];
                a[j] = x1 * cs[j] - x2 * sn[j];
                b[j] = x2 * cs[j] + x1 * sn[j];
            }
        }
    }
}

void rf_rope(float *x, const int *pos, int n, int n_heads, int head_dim, float theta) {
    if (n <= 0) return;
    size_t bytes = sizeof(float) * (size_t)n * head_dim;
    float *cs = malloc(bytes);
    if (!cs) rf_oom(bytes);
    rf_rope_table(cs, pos, n, head_dim, theta);
    rf_rope_apply(x, cs, n, n_heads, head_dim);
    free(cs);
}

/* silu(g) * u = g / (1 + e^-g) * u */
void rf_silu_mul(float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = rf_cpu_tier_active() >= RF_CPU_AVX512 ? rf_silu_mul_avx512(g, u, n) : 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(g + i);
        __m256 e = rf_exp8(_mm256_sub_ps(zero, v));
        __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void rf_softmax(float *x, int n) {
    if (n <= 0) return;
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float m = _mm_cvtss_f32(m4);
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    __m256 vmax = _mm256_set1_ps(m), vs = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = rf_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        _mm256_storeu_ps(x + i, e);
        vs = _mm256_add_ps(vs, e);
    }
    if (i < n) { /* tail: masked lanes are -inf - m -> e = 0 */
        __m256i mk = tail_mask(n - i);
        __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x + i, mk), _mm256_castsi256_ps(mk));
        __m256 e = rf_exp8(_mm256_sub_ps(v, vmax));
        _mm256_maskstore_ps(x + i, mk, e);
        vs = _mm256_add_ps(vs, e);
    }
    __m256 inv = _mm256_set1_ps(1.0f / hsum8(vs));
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= _mm256_cvtss_f32(inv);
}

/* Two passes: the max with 4 x 8 lanes of compares (a NaN never wins a
 * compare, as in the scalar loop), then the first index holding it (the
 * max is usually met long before the end). A scalar loop would make a
 * vocabulary row of 152k entries ~150k dependent compares. */
int rf_argmax(const float *x, int n, float *max_out) {
    float m = x[0];
    int i = 0;
    if (n >= 32) {
        __m256 m0 = _mm256_set1_ps(m), m1 = m0, m2 = m0, m3 = m0;
        for (; i + 32 <= n; i += 32) { /* m = x > m ? x : m: a NaN x leaves m */
            __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
            __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
            m0 = _mm256_blendv_ps(m0, a, _mm256_cmp_ps(a, m0, _CMP_GT_OQ));
            m1 = _mm256_blendv_ps(m1, b, _mm256_cmp_ps(b, m1, _CMP_GT_OQ));
            m2 = _mm256_blendv_ps(m2, c, _mm256_cmp_ps(c, m2, _CMP_GT_OQ));
            m3 = _mm256_blendv_ps(m3, d, _mm256_cmp_ps(d, m3, _CMP_GT_OQ));
        }
        float l[32];
        _mm256_storeu_ps(l, m0), _mm256_storeu_ps(l + 8, m1), _mm256_storeu_ps(l + 16, m2), _mm256_storeu_ps(l + 24, m3);
        for (int k = 0; k < 32; k++) m = l[k] > m ? l[k] : m;
    }
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    if (max_out) *max_out = m;
    if (m != m) return 0; /* x[0] is NaN: the scalar loop's answer */
    const __m256 vm = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < n; i++)
        if (x[i] == m) return i;
    return 0;
}

void rf_add(float *y, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

/* four independent 8-wide accumulators: the FMA latency is hidden */
float rf_dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Four keys per pass, q's vectors reused from registers and the four sums
 * reduced together: a dot product per key with its own horizontal sum cost
 * more than the products at head_dim 64. */
void rf_scores(float *sc, const float *q, const float *K, size_t ldk, int n, int hd, float scale) {
    /* The last 1-3 keys go through the same code (the missing ones repeat
     * the last): every key's sum is then rounded the same way wherever it
     * falls, so a token's attention does not depend on how many keys the
     * call has (the cached and the recomputing decoders must agree). */
    for (int t = 0; t < n; t += 4) {
        const float *k0 = K + (size_t)t * ldk;
        const float *k1 = t + 1 < n ? k0 + ldk : k0, *k2 = t + 2 < n ? k1 + ldk : k1, *k3 = t + 3 < n ? k2 + ldk : k2;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0;
        for (; i + 8 <= hd; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + i), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + i), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + i), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + i), a3);
        }
        /* {sum a0, sum a1, sum a2, sum a3} */
        __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        float s[4];
        _mm_storeu_ps(s, s4);
        for (; i < hd; i++) {
            s[0] += q[i] * k0[i];
            s[1] += q[i] * k1[i];
            s[2] += q[i] * k2[i];
            s[3] += q[i] * k3[i];
        }
        for (int j = 0; j < 4 && t + j < n; j++) sc[t + j] = s[j] * scale;
    }
}

/* 32 outputs at a time in four accumulators, the keys streamed past them */
void rf_mix(float *out, const float *p, const float *V, size_t ldv, int n, int hd) {
    int i = 0;
    for (; i + 32 <= hd; i += 32) {
        __m256 o0 = _mm256_loadu_ps(out + i), o1 = _mm256_loadu_ps(out + i + 8), o2 = _mm256_loadu_ps(out + i + 16),
               o3 = _mm256_loadu_ps(out + i + 24);
        for (int t = 0; t < n; t++) {
            const float *v = V + (size_t)t * ldv + i;
            __m256 pv = _mm256_set1_ps(p[t]);
            o0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v), o0);
            o1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + 8), o1);
            o2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + 16), o2);
            o3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + 24), o3);
        }
        _mm256_storeu_ps(out + i, o0);
        _mm256_storeu_ps(out + i + 8, o1);
        _mm256_storeu_ps(out + i + 16, o2);
        _mm256_storeu_ps(out + i + 24, o3);
    }
    for (; i < hd; i++) {
        float o = out[i];
        for (int t = 0; t < n; t++) o += p[t] * V[(size_t)t * ldv + i];
        out[i] = o;
    }
}

double rf_sum_exp(const float *x, int n, float shift) {
    if (rf_cpu_tier_active() >= RF_CPU_AVX512) return rf_sum_exp_avx512(x, n, shift);
    __m256 mx = _mm256_set1_ps(shift), acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, rf_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mx)));
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    double sum = 0;
    for (int k = 0; k < 8; k++) sum += lanes[k];
    for (; i < n; i++) sum += exp((double)x[i] - shift);
    return sum;
}

/* The same for two queries of one KV head (grouped-query attention): each
 * key and value vector is loaded once for both. At avx2 every (query, key)
 * sum takes exactly rf_scores' steps, so the scores are bit for bit those
 * of two rf_scores calls; the avx512 tier has its own 16-wide kernels
 * (attention_avx512.c; a model uses one of the two paths for every call). */
void rf_scores2(float *sc0, float *sc1, const float *q0, const float *q1, const float *K, size_t ldk, int n, int hd,
                float scale) {
    if (hd % 16 == 0 && rf_cpu_tier_active() >= RF_CPU_AVX512) {
        rf_scores2_avx512(sc0, sc1, q0, q1, K, ldk, n, hd, scale);
        return;
    }
    if (hd % 8) { /* (no head_dim in use is; the plain path handles it) */
        rf_scores(sc0, q0, K, ldk, n, hd, scale);
        rf_scores(sc1, q1, K, ldk, n, hd, scale);
        return;
    }
    for (int t = 0; t < n; t += 4) {
        const float *k0 = K + (size_t)t * ldk;
        const float *k1 = t + 1 < n ? k0 + ldk : k0, *k2 = t + 2 < n ? k1 + ldk : k1, *k3 = t + 3 < n ? k2 + ldk : k2;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int i = 0; i < hd; i += 8) {
            __m256 x0 = _mm256_loadu_ps(q0 + i), x1 = _mm256_loadu_ps(q1 + i);
            __m256 v = _mm256_loadu_ps(k0 + i);
            a0 = _mm256_fmadd_ps(x0, v, a0), b0 = _mm256_fmadd_ps(x1, v, b0);
            v = _mm256_loadu_ps(k1 + i);
            a1 = _mm256_fmadd_ps(x0, v, a1), b1 = _mm256_fmadd_ps(x1, v, b1);
            v = _mm256_loadu_ps(k2 + i);
            a2 = _mm256_fmadd_ps(x0, v, a2), b2 = _mm256_fmadd_ps(x1, v, b2);
            v = _mm256_loadu_ps(k3 + i);
            a3 = _mm256_fmadd_ps(x0, v, a3), b3 = _mm256_fmadd_ps(x1, v, b3);
        }
        __m256 ha = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        __m256 hb = _mm256_hadd_ps(_mm256_hadd_ps(b0, b1), _mm256_hadd_ps(b2, b3));
        float s0[4], s1[4];
        _mm_storeu_ps(s0, _mm_add_ps(_mm256_castps256_ps128(ha), _mm256_extractf128_ps(ha, 1)));
        _mm_storeu_ps(s1, _mm_add_ps(_mm256_castps256_ps128(hb), _mm256_extractf128_ps(hb, 1)));
        for (int j = 0; j < 4 && t + j < n; j++) sc0[t + j] = s0[j] * scale, sc1[t + j] = s1[j] * scale;
    }
}

void rf_mix2(float *out0, float *out1, const float *p0, const float *p1, const float *V, size_t ldv, int n, int hd) {
    if (hd % 32 == 0 && rf_cpu_tier_active() >= RF_CPU_AVX512) {
        rf_mix2_avx512(out0, out1, p0, p1, V, ldv, n, hd);
        return;
    }
    if (hd % 32) { /* rf_mix's vector path covers whole 32s only: the same steps here */
        rf_mix(out0, p0, V, ldv, n, hd);
        rf_mix(out1, p1, V, ldv, n, hd);
        return;
    }
    for (int i = 0; i < hd; i += 16) { /* 16 outputs of each query: 4 accumulators */
        __m256 a0 = _mm256_loadu_ps(out0 + i), a1 = _mm256_loadu_ps(out0 + i + 8);
        __m256 b0 = _mm256_loadu_ps(out1 + i), b1 = _mm256_loadu_ps(out1 + i + 8);
        for (int t = 0; t < n; t++) {
            const float *v = V + (size_t)t * ldv + i;
            __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
            __m256 pa = _mm256_set1_ps(p0[t]), pb = _mm256_set1_ps(p1[t]);
            a0 = _mm256_fmadd_ps(pa, v0, a0), a1 = _mm256_fmadd_ps(pa, v1, a1);
            b0 = _mm256_fmadd_ps(pb, v0, b0), b1 = _mm256_fmadd_ps(pb, v1, b1);
        }
        _mm256_storeu_ps(out0 + i, a0), _mm256_storeu_ps(out0 + i + 8, a1);
        _mm256_storeu_ps(out1 + i, b0), _mm256_storeu_ps(out1 + i + 8, b1);
    }
}
