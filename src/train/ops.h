/* ops.h - the training ops, each a forward/backward pair (ops.c). All f32,
 * row-major; N is the number of tokens in the packed micro-batch. Backward
 * functions ADD into parameter gradients (dW, dw) and, where noted, into the
 * input gradient. */
#ifndef RF_TRAIN_OPS_H
#define RF_TRAIN_OPS_H

#include <stddef.h>

/* Linear layer. Y[N, out] = X[N, in] . W[out, in]^T */
void op_matmul_fwd(float *Y, const float *X, const float *W, int N, int in, int out);
/* Y[N, out] += X . W^T (a residual connection folded into the matmul) */
void op_matmul_fwd_acc(float *Y, const float *X, const float *W, int N, int in, int out);
/* dX[N, in] (= or += when accum) dY[N, out] . W[out, in];  dW[out, in] += dY^T . X */
void op_matmul_bwd(float *dX, float *dW, const float *dY, const float *X, const float *W,
                   int N, int in, int out, int accum);

/* RMSNorm over rows of dim. out[N, dim] = w * x * rstd, rstd[N] = 1/sqrt(mean(x^2)+eps) */
void op_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int N, int dim,
                    float eps);
/* dx[N, dim] += d/dx;  dw[dim] += sum_rows dout * x * rstd */
void op_rmsnorm_bwd(float *dx, float *dw, const float *dout, const float *x, const float *w,
                    const float *rstd, int N, int dim);

/* RoPE tables for N tokens: cs[N, hd/2] cos and sn[N, hd/2] sin of pos * inv_freq. */
void op_rope_tables(float *cs, float *sn, const int *pos, int N, int head_dim, float theta);
/* HF rotate_half rotation in place on x[N, n_heads, hd]; pairs (j, j + hd/2). */
void op_rope_fwd(float *x, const float *cs, const float *sn, int N, int n_heads, int hd);
/* The transpose (= inverse) rotation, in place on the gradient. */
void op_rope_bwd(float *dx, const float *cs, const float *sn, int N, int n_heads, int hd);

/* SwiGLU. act[n] = silu(g) * u */
void op_swiglu_fwd(float *act, const float *g, const float *u, size_t n);
/* dg[n], du[n] (=) from dact */
void op_swiglu_bwd(float *dg, float *du, const float *dact, const float *g, const float *u,
                   size_t n);

/* Attention over the packed examples (off[n_seq + 1]), GQA (nh / nkv query
 * heads share a K/V head), scale hd^-0.5, causal over physical index inside
 * an example unless bidir. q, out: [N, nh*hd]; k, v: [N, nkv*hd];
 * lse[N, nh]: log-sum-exp of each score row, kept for the backward, which
 * recomputes the probabilities instead of storing N x T of them. */
void op_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir);
/* dq (=), dk, dv (=) from dout. */
void op_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const int *off, int n_seq, int nh, int nkv, int hd, int bidir);

/* Cross-entropy of rows of logits[n, V] against target[n] (all valid), each
 * scaled by weight[n]. Returns per-row CE in ce[n]; overwrites logits with
 * d(sum_i weight_i CE_i)/d logits when grad. */
void op_xent_fwd_bwd(float *logits, double *ce, const int *target, const float *weight, int n,
                     int V, int grad);

#endif
