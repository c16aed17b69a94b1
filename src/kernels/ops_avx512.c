/* ops_avx512.c - the avx512 tier's versions of vocabulary-wide passes and
 * of the MLP's activation (kernels.h; ops.c dispatches here when the tier is
 * active). */
#include <immintrin.h>
#include <math.h>

#include "kernels/ops_impl.h"
#include "kernels/simd512.h"

/* sum_i e^(x_i - shift): 32 lanes in two accumulators (a draft's
 * confidence takes one pass over a 152k vocabulary per mask, so a single
 * 8-lane chain, as the avx2 loop has, is a visible share of a rolling-slot
 * decode) */
double rf_sum_exp_avx512(const float *x, int n, float shift) {
    const __m512 mx = _mm512_set1_ps(shift);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_add_ps(a0, rf_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx)));
        a1 = _mm512_add_ps(a1, rf_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), mx)));
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, rf_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx)));
    if (i < n) { /* the tail under a mask: masked-off lanes add e^-inf = 0 */
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 t = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), k, x + i);
        a1 = _mm512_add_ps(a1, _mm512_maskz_mov_ps(k, rf_exp16(_mm512_sub_ps(t, mx))));
    }
    return (double)_mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

/* silu(g) * u over the first n - n % 16 entries, 16 lanes at a time: each
 * lane takes rf_silu_mul's avx2 steps (rf_exp16 equals rf_exp8 lane for
 * lane; sub, add, div and mul are exact IEEE operations), so the numbers are
 * the avx2 loop's; ops.c finishes the rest. Returns the entries done. */
size_t rf_silu_mul_avx512(float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(g + i);
        __m512 e = rf_exp16(_mm512_sub_ps(zero, v));
        __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, e));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
    }
    return i;
}
