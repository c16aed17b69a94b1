/* matmul.c - Y[n, rows] = X[n, cols] . W[rows, cols]^T with W in bf16/f16/f32.
 * (first version: correct and vectorised over cols; tiling comes next) */
#include <math.h>
#include <omp.h>
#include <immintrin.h>
#include "kernels/kernels.h"
#include "util/util.h"

/* 8 consecutive weights starting at element i of row r, as f32. */
static inline __m256 load8(const rf_mat *W, size_t off) {
    switch (W->dtype) {
    case RF_BF16: {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)W->data + off));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case RF_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)W->data + off)));
    default:
        return _mm256_loadu_ps((const float *)W->data + off);
    }
}

static inline float load1(const rf_mat *W, size_t off) {
    switch (W->dtype) {
    case RF_BF16: return rf_bf16_to_f32(((const uint16_t *)W->data)[off]);
    case RF_F16: return rf_f16_to_f32(((const uint16_t *)W->data)[off]);
    default: return ((const float *)W->data)[off];
    }
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void rf_matmul_rows(float *Y, const float *X, const rf_mat *W, int n, int r0, int r1) {
    int cols = W->cols, nr = r1 - r0;
    double work = (double)nr * cols * n;
#pragma omp parallel for schedule(static) if (work > 65536 && !omp_in_parallel())
    for (int r = r0; r < r1; r++) {
        size_t roff = (size_t)r * cols;
        for (int t = 0; t < n; t++) {
            const float *x = X + (size_t)t * cols;
            __m256 acc = _mm256_setzero_ps();
            int c = 0;
            for (; c + 8 <= cols; c += 8)
                acc = _mm256_fmadd_ps(load8(W, roff + c), _mm256_loadu_ps(x + c), acc);
            float s = hsum8(acc);
            for (; c < cols; c++) s += load1(W, roff + c) * x[c];
            Y[(size_t)t * nr + (r - r0)] = s;
        }
    }
}

void rf_matmul(float *Y, const float *X, const rf_mat *W, int n) {
    rf_matmul_rows(Y, X, W, n, 0, W->rows);
}

void rf_matmul_naive(float *Y, const float *X, const rf_mat *W, int n) {
    for (int t = 0; t < n; t++)
        for (int r = 0; r < W->rows; r++) {
            double s = 0;
            for (int c = 0; c < W->cols; c++)
                s += (double)load1(W, (size_t)r * W->cols + c) * X[(size_t)t * W->cols + c];
            Y[(size_t)t * W->rows + r] = (float)s;
        }
}

void rf_mat_row_f32(float *out, const rf_mat *W, int r) {
    size_t off = (size_t)r * W->cols;
    int c = 0;
    for (; c + 8 <= W->cols; c += 8) _mm256_storeu_ps(out + c, load8(W, off + c));
    for (; c < W->cols; c++) out[c] = load1(W, off + c);
}
