/* ops.c - the small per-token kernels: rmsnorm, rope, silu*mul, softmax, add, dot.
 * (first version: plain loops) */
#include <math.h>
#include "kernels/kernels.h"

/* Sum of squares in double: rows are at most a few thousand wide, and the
 * double accumulator makes the result independent of summation order to
 * well below f32 rounding. */
void rf_rmsnorm(float *out, const float *x, const float *w, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int j = 0; j < dim; j++) oi[j] = w[j] * (xi[j] * inv);
    }
}

void rf_rope(float *x, const int *pos, int n, int n_heads, int head_dim, float theta) {
    int half = head_dim / 2;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            /* as torch: inv_freq in f32, angle = f32(pos) * inv_freq in f32 */
            float inv_freq = (float)(1.0 / pow((double)theta, 2.0 * j / head_dim));
            float ang = (float)pos[i] * inv_freq;
            float c = cosf(ang), s = sinf(ang);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((size_t)i * n_heads + h) * head_dim;
                float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c - x2 * s;
                v[j + half] = x2 * c + x1 * s;
            }
        }
}

void rf_silu_mul(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void rf_softmax(float *x, int n) {
    float m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    float s = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - m); s += x[i]; }
    float inv = 1.0f / s;
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void rf_add(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

float rf_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
