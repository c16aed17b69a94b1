/* kernels.h - the numeric kernels: batched matmul over bf16/f16/f32 weights
 * with f32 activations, and the small per-token ops. All f32 accumulation.
 *
 * Rooflines (2 threads here, as rf_measure_read_gbs / rf_measure_fma_gflops
 * measure them: ~22 GB/s read, ~180 GFLOP/s f32 AVX2 FMA):
 *  - rf_matmul with n = 1 is memory-bound: it must stream W once at full speed.
 *  - with n tokens it streams W once and reuses every loaded weight n times,
 *    so n = 8..64 costs little more than n = 1 until it turns compute-bound. */
#ifndef RF_KERNELS_H
#define RF_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "io/safetensors.h"

/* A row-major weight matrix [rows, cols] (torch Linear: [out, in]). */
typedef struct {
    rf_dtype dtype;
    const void *data;
    int rows, cols;
} rf_mat;

/* Y[n, rows] = X[n, cols] . W[rows, cols]^T   (Y = X W^T, a Linear layer).
 * Threads over output rows with OpenMP; X rows are reused from cache. */
void rf_matmul(float *Y, const float *X, const rf_mat *W, int n);
/* Same, the obvious triple loop in double precision: the test reference. */
void rf_matmul_naive(float *Y, const float *X, const rf_mat *W, int n);
/* Same, only output rows [r0, r1) of W; Y is [n, r1 - r0]. Used for logits
 * restricted to a vocabulary range and for tests. */
void rf_matmul_rows(float *Y, const float *X, const rf_mat *W, int n, int r0, int r1);

/* Row r of W as f32 (the embedding lookup). */
void rf_mat_row_f32(float *out, const rf_mat *W, int r);

/* out[i, :] = w * x[i, :] / sqrt(mean(x[i, :]^2) + eps), i < n, rows of dim. */
void rf_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps);
/* HF rotate_half RoPE, in place: x is [n, n_heads, head_dim]; token i has
 * position pos[i]; pairs (j, j + head_dim/2); inv_freq[j] = theta^(-2j/hd). */
void rf_rope(float *x, const int *pos, int n, int n_heads, int head_dim, float theta);
/* g[i] = silu(g[i]) * u[i] */
void rf_silu_mul(float *g, const float *u, size_t n);
/* in place softmax of x[0..n) (max-subtracted, f32) */
void rf_softmax(float *x, int n);
/* y += x */
void rf_add(float *y, const float *x, size_t n);
/* dot product with AVX2 */
float rf_dot(const float *a, const float *b, int n);

#endif
