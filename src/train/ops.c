/* ops.c - forward/backward pairs of the training ops (see ops.h).
 *
 * Big matmuls go to OpenBLAS sgemm (it threads itself); the per-token ops and
 * attention thread with OpenMP. Every parallel loop writes disjoint outputs
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

static inline float dotf(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static int max_len(const int *off, int n_seq) {
    int m = 1;
    for (int b = 0; b < n_seq; b++)
        if (off[b + 1] - off[b] > m) m = off[b + 1] - off[b];
    return m;
}

static size_t attn_work(const int *off, int n_seq, int nh, int hd) {
    size_t w = 0;
    for (int b = 0; b < n_seq; b++) w += (size_t)(off[b + 1] - off[b]) * (off[b + 1] - off[b]);
    return w * nh * hd;
}

void op_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir) {
    int qd = nh * hd, kvd = nkv * hd, group = nh / nkv, T = max_len(off, n_seq);
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel if (attn_work(off, n_seq, nh, hd) >= PAR_MIN)
    {
        float *sc = rf_malloc((size_t)T * sizeof(float)); /* one score row */
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int b = 0; b < n_seq; b++)
            for (int h = 0; h < nh; h++) {
                int s0 = off[b], s1 = off[b + 1], kh = h / group;
                for (int i = s0; i < s1; i++) {
                    const float *qi = q + (size_t)i * qd + h * hd;
                    int jend = bidir ? s1 : i + 1;
                    float mx = -INFINITY;
                    for (int j = s0; j < jend; j++) {
                        float s = dotf(qi, k + (size_t)j * kvd + kh * hd, hd) * scale;
                        sc[j - s0] = s;
                        if (s > mx) mx = s;
                    }
                    float sum = 0.0f;
                    for (int j = s0; j < jend; j++) {
                        sc[j - s0] = expf(sc[j - s0] - mx);
                        sum += sc[j - s0];
                    }
                    float inv = 1.0f / sum, *oi = out + (size_t)i * qd + h * hd;
                    memset(oi, 0, (size_t)hd * sizeof(float));
                    for (int j = s0; j < jend; j++) {
                        const float *vj = v + (size_t)j * kvd + kh * hd;
                        float p = sc[j - s0] * inv;
                        for (int c = 0; c < hd; c++) oi[c] += p * vj[c];
                    }
                    lse[(size_t)i * nh + h] = mx + logf(sum);
                }
            }
        free(sc);
    }
}

void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir) {
    /* With P = softmax(S) recomputed from lse:  dP_ij = dout_i . v_j,
     * dS_ij = P_ij (dP_ij - D_i) where D_i = sum_j P_ij dP_ij = dout_i . out_i,
     * dq_i = scale sum_j dS_ij k_j, dk_j += scale dS_ij q_i, dv_j += P_ij dout_i.
     * One task per (example, K/V head) owns its dk/dv rows, so GQA needs no
     * atomics. */
    int qd = nh * hd, kvd = nkv * hd, group = nh / nkv;
    float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1) collapse(2) if (attn_work(off, n_seq, nh, hd) >= PAR_MIN)
    for (int b = 0; b < n_seq; b++)
        for (int kh = 0; kh < nkv; kh++) {
            int s0 = off[b], s1 = off[b + 1];
            for (int j = s0; j < s1; j++) {
                memset(dk + (size_t)j * kvd + kh * hd, 0, (size_t)hd * sizeof(float));
                memset(dv + (size_t)j * kvd + kh * hd, 0, (size_t)hd * sizeof(float));
            }
            for (int h = kh * group; h < (kh + 1) * group; h++)
                for (int i = s0; i < s1; i++) {
                    const float *qi = q + (size_t)i * qd + h * hd;
                    const float *gi = dout + (size_t)i * qd + h * hd;
                    float *dqi = dq + (size_t)i * qd + h * hd;
                    float Di = dotf(gi, out + (size_t)i * qd + h * hd, hd);
                    float L = lse[(size_t)i * nh + h];
                    memset(dqi, 0, (size_t)hd * sizeof(float));
                    int jend = bidir ? s1 : i + 1;
                    for (int j = s0; j < jend; j++) {
                        const float *kj = k + (size_t)j * kvd + kh * hd;
                        const float *vj = v + (size_t)j * kvd + kh * hd;
                        float *dkj = dk + (size_t)j * kvd + kh * hd;
                        float *dvj = dv + (size_t)j * kvd + kh * hd;
                        float p = expf(dotf(qi, kj, hd) * scale - L);
                        float ds = p * (dotf(gi, vj, hd) - Di) * scale;
                        for (int c = 0; c < hd; c++) {
                            dvj[c] += p * gi[c];
                            dqi[c] += ds * kj[c];
                            dkj[c] += ds * qi[c];
                        }
                    }
                }
        }
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
