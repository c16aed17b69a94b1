/* ops.c - forward/backward pairs of the training ops (see ops.h).
 *
 * Big matmuls go to OpenBLAS sgemm (it threads itself); the per-token ops
 * thread with OpenMP. Every parallel loop writes disjoint outputs
 * and every reduction into a shared gradient (dw of the norms) runs in a fixed
 * serial order, so a step is bit-for-bit reproducible for a given thread
 * count - which --resume relies on. */
#include "train/ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Loops with less work than this run on one thread: a parallel region costs
 * a few microseconds even on an idle machine, and far more when the cores
 * are shared, which would dominate the tiny models of the tests. */
#define PAR_MIN ((size_t)1 << 15)

/* ---- linear ------------------------------------------------------------------ */

void op_matmul_fwd(float *Y, const float *X, const float *W, int N, int in, int out) {
    if (N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, X, in, W, in, 0.0f,
                Y, out);
}

void op_matmul_fwd_acc(float *Y, const float *X, const float *W, int N, int in, int out) {
    if (N == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, X, in, W, in, 1.0f,
                Y, out);
}

void op_matmul_bwd(float *dX, float *dW, const float *dY, const float *X, const float *W,
                   int N, int in, int out, int accum) {
    if (N == 0) return;
    /* dX[N, in] = dY[N, out] . W[out, in] */
    if (dX)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dY, out, W, in,
                    accum ? 1.0f : 0.0f, dX, in);
    /* dW[out, in] += dY^T[out, N] . X[N, in] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dY, out, X, in, 1.0f,
                dW, in);
}

/* ---- RMSNorm ------------------------------------------------------------------- */

void op_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int N, int dim,
                    float eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * dim >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        float ss = 0.0f;
        for (int j = 0; j < dim; j++) ss += xi[j] * xi[j];
        float r = 1.0f / sqrtf(ss / (float)dim + eps);
        rstd[i] = r;
        for (int j = 0; j < dim; j++) oi[j] = w[j] * (xi[j] * r);
    }
}

void op_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *w,
                    const float *rstd, int N, int dim) {
    /* y_j = w_j x_j r, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / dim, so
     * dx_j = r w_j dy_j - (r^3 / dim) x_j sum_k w_k dy_k x_k */
#pragma omp parallel for schedule(static) if ((size_t)N * dim >= PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * dim, *gi = dout + (size_t)i * dim;
        float *dxi = dx + (size_t)i * dim;
        float r = rstd[i], dot = 0.0f;
        for (int j = 0; j < dim; j++) dot += w[j] * gi[j] * xi[j];
        float c = r * r * r * dot / (float)dim;
        for (int j = 0; j < dim; j++) dxi[j] += r * w[j] * gi[j] - c * xi[j];
    }
    for (int i = 0; i < N; i++) { /* serial: a fixed summation order */
        const float *xi = x + (size_t)i * dim, *gi = dout + (size_t)i * dim;
        float r = rstd[i];
        for (int j = 0; j < dim; j++) dw[j] += gi[j] * xi[j] * r;
    }
}

/* ---- RoPE ------------------------------------------------------------------------ */

void op_rope_tables(float *cs, float *sn, const int *pos, int N, int head_dim, float theta) {
    int half = head_dim / 2;
    /* inv_freq in f32 like the HF rotary embedding */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < half; j++) {
            float inv = 1.0f / powf(theta, (float)(2 * j) / (float)head_dim);
            float a = (float)pos[i] * inv;
            cs[(size_t)i * half + j] = cosf(a);
            sn[(size_t)i * half + j] = sinf(a);
        }
}

void op_rope_fwd(float *x, const float *cs, const float *sn, int N, int n_heads, int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * n_heads * hd >= PAR_MIN)
    for (int i = 0; i < N; i++)
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)i * n_heads + h) * hd;
            const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
            for (int j = 0; j < half; j++) {
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] - b * s[j];
                v[j + half] = b * c[j] + a * s[j];
            }
        }
}

void op_rope_bwd(float *dx, const float *cs, const float *sn, int N, int n_heads, int hd) {
    int half = hd / 2;
#pragma omp parallel for schedule(static) if ((size_t)N * n_heads * hd >= PAR_MIN)
    for (int i = 0; i < N; i++)
        for (int h = 0; h < n_heads; h++) {
            float *v = dx + ((size_t)i * n_heads + h) * hd;
            const float *c = cs + (size_t)i * half, *s = sn + (size_t)i * half;
            for (int j = 0; j < half; j++) { /* R^T: rotate by -angle */
                float a = v[j], b = v[j + half];
                v[j] = a * c[j] + b * s[j];
                v[j + half] = b * c[j] - a * s[j];
            }
        }
}

/* ---- SwiGLU ----------------------------------------------------------------------- */

void op_swiglu_fwd(float *act, const float *g, const float *u, size_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) act[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void op_swiglu_bwd(float *dg, float *du, const float *dact, const float *g, const float *u,
                   size_t n) {
    /* silu(g) = g s(g);  silu'(g) = s(g) (1 + g (1 - s(g))) */
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        du[i] = dact[i] * g[i] * s;
        dg[i] = dact[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

/* ---- attention ----------------------------------------------------------------------- */

/* Per (example, query head) the scores are one [n, n] block, computed with
 * sgemm straight from the strided head slices of q / k / v (a head's rows
 * sit qd or kvd floats apart). The causal half is computed and then zeroed:
 * wasting half a small gemm is far cheaper than scalar dot products. The
 * (example, head) loop runs on the calling thread in a fixed order, letting
 * OpenBLAS thread each gemm; the row-wise softmax parts use OpenMP. */

static int max_len(const int *off, int n_seq) {
    int m = 1;
    for (int b = 0; b < n_seq; b++)
        if (off[b + 1] - off[b] > m) m = off[b + 1] - off[b];
    return m;
}

void op_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir) {
    int qd = nh * hd, kvd = nkv * hd, group = nh / nkv, T = max_len(off, n_seq);
    float scale = 1.0f / sqrtf((float)hd);
    float *P = rf_malloc((size_t)T * T * sizeof(float)); /* [n, n] scores -> probabilities */
    for (int b = 0; b < n_seq; b++) {
        int s0 = off[b], n = off[b + 1] - s0;
        if (n == 0) continue;
        for (int h = 0; h < nh; h++) {
            int kh = h / group;
            const float *Q = q + (size_t)s0 * qd + h * hd, *K = k + (size_t)s0 * kvd + kh * hd;
            const float *Vv = v + (size_t)s0 * kvd + kh * hd;
            /* S[n, n] = scale Q[n, hd] K[n, hd]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, scale, Q, qd, K, kvd,
                        0.0f, P, n);
#pragma omp parallel for schedule(static) if ((size_t)n * n >= PAR_MIN)
            for (int i = 0; i < n; i++) {
                float *row = P + (size_t)i * n, mx = -INFINITY, sum = 0.0f;
                int jend = bidir ? n : i + 1;
                for (int j = 0; j < jend; j++) mx = row[j] > mx ? row[j] : mx;
                for (int j = 0; j < jend; j++) sum += row[j] = expf(row[j] - mx);
                float inv = 1.0f / sum;
                for (int j = 0; j < jend; j++) row[j] *= inv;
                for (int j = jend; j < n; j++) row[j] = 0.0f;
                lse[(size_t)(s0 + i) * nh + h] = mx + logf(sum);
            }
            /* O[n, hd] = P[n, n] V[n, hd] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, P, n, Vv, kvd,
                        0.0f, out + (size_t)s0 * qd + h * hd, qd);
        }
    }
    free(P);
}

void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir) {
    /* With P = softmax(S) recomputed from lse:  dP = dO V^T,
     * dS_ij = P_ij (dP_ij - D_i) where D_i = sum_j P_ij dP_ij = dO_i . O_i,
     * dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO
     * (+= : the query heads of a GQA group share one K/V head). */
    int qd = nh * hd, kvd = nkv * hd, group = nh / nkv, T = max_len(off, n_seq);
    float scale = 1.0f / sqrtf((float)hd);
    float *P = rf_malloc((size_t)T * T * sizeof(float));
    float *dP = rf_malloc((size_t)T * T * sizeof(float));
    int N = off[n_seq];
    memset(dk, 0, (size_t)N * kvd * sizeof(float));
    memset(dv, 0, (size_t)N * kvd * sizeof(float));
    for (int b = 0; b < n_seq; b++) {
        int s0 = off[b], n = off[b + 1] - s0;
        if (n == 0) continue;
        for (int h = 0; h < nh; h++) {
            int kh = h / group;
            const float *Q = q + (size_t)s0 * qd + h * hd, *K = k + (size_t)s0 * kvd + kh * hd;
            const float *Vv = v + (size_t)s0 * kvd + kh * hd;
            const float *dO = dout + (size_t)s0 * qd + h * hd, *O = out + (size_t)s0 * qd + h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, scale, Q, qd, K, kvd,
                        0.0f, P, n);
            /* dP[n, n] = dO[n, hd] V[n, hd]^T */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, dO, qd, Vv, kvd,
                        0.0f, dP, n);
#pragma omp parallel for schedule(static) if ((size_t)n * n >= PAR_MIN)
            for (int i = 0; i < n; i++) {
                float *p = P + (size_t)i * n, *g = dP + (size_t)i * n;
                float L = lse[(size_t)(s0 + i) * nh + h], D = 0.0f;
                const float *oi = O + (size_t)i * qd, *gi = dO + (size_t)i * qd;
                for (int c = 0; c < hd; c++) D += gi[c] * oi[c];
                int jend = bidir ? n : i + 1;
                for (int j = 0; j < jend; j++) {
                    p[j] = expf(p[j] - L);
                    g[j] = p[j] * (g[j] - D) * scale;
                }
                for (int j = jend; j < n; j++) p[j] = g[j] = 0.0f;
            }
            /* dQ[n, hd] = dS[n, n] K[n, hd];  dK += dS^T Q;  dV += P^T dO */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, dP, n, K, kvd,
                        0.0f, dq + (size_t)s0 * qd + h * hd, qd);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, dP, n, Q, qd,
                        1.0f, dk + (size_t)s0 * kvd + kh * hd, kvd);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hd, n, 1.0f, P, n, dO, qd,
                        1.0f, dv + (size_t)s0 * kvd + kh * hd, kvd);
        }
    }
    free(P);
    free(dP);
}

/* ---- cross-entropy --------------------------------------------------------------------- */

void op_xent_fwd_bwd(float *logits, double *ce, const int *target, const float *weight, int n,
                     int V, int grad) {
#pragma omp parallel for schedule(static) if ((size_t)n * V >= PAR_MIN)
    for (int i = 0; i < n; i++) {
        float *l = logits + (size_t)i * V;
        float mx = -INFINITY;
        for (int c = 0; c < V; c++)
            if (l[c] > mx) mx = l[c];
        double sum = 0.0;
        for (int c = 0; c < V; c++) sum += exp((double)(l[c] - mx));
        double lse = (double)mx + log(sum);
        ce[i] = lse - (double)l[target[i]];
        if (grad) {
            float w = weight[i];
            for (int c = 0; c < V; c++) l[c] = w * (float)exp((double)l[c] - lse);
            l[target[i]] -= w;
        }
    }
}
