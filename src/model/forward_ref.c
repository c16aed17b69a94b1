/* forward_ref.c - the slow, obviously-correct reference forward pass.
 *
 * No cache, no SIMD, no threads, double-precision accumulation, RoPE
 * evaluated from the formula for each position id. It shares nothing with
 * forward.c but the weight loader and rf_matmul_naive, so tests comparing the
 * two check the cache bookkeeping, the kernels and the position handling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "util/util.h"

/* x[n, dim] <- w * x / sqrt(mean(x^2) + eps), per row */
static void ref_rmsnorm(float *x, const float *w, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        float *r = x + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)r[j] * r[j];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) r[j] = (float)(w[j] * (r[j] * inv));
    }
}

/* HF rotate_half on one head vector at position p */
static void ref_rope(float *v, int hd, int p, double theta) {
    int half = hd / 2;
    for (int j = 0; j < half; j++) {
        double ang = p * pow(theta, -2.0 * j / hd);
        double a = v[j], b = v[j + half];
        v[j] = (float)(a * cos(ang) - b * sin(ang));
        v[j + half] = (float)(b * cos(ang) + a * sin(ang));
    }
}

int rf_forward_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                         int bidirectional, float *logits) {
    const rf_config *cfg = &m->cfg;
    const int d = cfg->hidden_size, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int qd = nh * hd, kvd = nkv * hd, ffn = cfg->intermediate_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size) {
            rf_set_error("reference forward: token id %d outside the vocabulary", tokens[i]);
            return -1;
        }
    float *x = rf_calloc((size_t)n * d, sizeof(float)), *xb = rf_calloc((size_t)n * d, sizeof(float));
    float *q = rf_calloc((size_t)n * qd, sizeof(float)), *att = rf_calloc((size_t)n * qd, sizeof(float));
    float *k = rf_calloc((size_t)n * kvd, sizeof(float)), *v = rf_calloc((size_t)n * kvd, sizeof(float));
    float *g = rf_calloc((size_t)n * ffn, sizeof(float)), *u = rf_calloc((size_t)n * ffn, sizeof(float));
    double *sc = rf_calloc((size_t)n, sizeof(double));

    for (int i = 0; i < n; i++) rf_mat_row_f32(x + (size_t)i * d, &m->embed, tokens[i]);
    for (int l = 0; l < cfg->n_layers; l++) {
        const rf_layer *L = &m->layers[l];
        memcpy(xb, x, (size_t)n * d * sizeof(float));
        ref_rmsnorm(xb, L->attn_norm, n, d, cfg->rms_eps);
        rf_matmul_naive(q, xb, &L->q, n);
        rf_matmul_naive(k, xb, &L->k, n);
        rf_matmul_naive(v, xb, &L->v, n);
        ref_rmsnorm(q, L->q_norm, n * nh, hd, cfg->rms_eps);
        ref_rmsnorm(k, L->k_norm, n * nkv, hd, cfg->rms_eps);
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < nh; h++) ref_rope(q + (size_t)i * qd + h * hd, hd, pos[i], cfg->rope_theta);
            for (int h = 0; h < nkv; h++) ref_rope(k + (size_t)i * kvd + h * hd, hd, pos[i], cfg->rope_theta);
        }
        for (int i = 0; i < n; i++) {
            int lim = bidirectional ? n : i + 1; /* causal over physical index */
            for (int h = 0; h < nh; h++) {
                int gk = h / (nh / nkv);
                const float *qi = q + (size_t)i * qd + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t < lim; t++) {
                    double s = 0;
                    for (int e = 0; e < hd; e++) s += (double)qi[e] * k[(size_t)t * kvd + gk * hd + e];
                    sc[t] = s / sqrt((double)hd);
                    if (sc[t] > mx) mx = sc[t];
                }
                for (int t = 0; t < lim; t++) sum += (sc[t] = exp(sc[t] - mx));
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int t = 0; t < lim; t++) o += sc[t] * v[(size_t)t * kvd + gk * hd + e];
                    att[(size_t)i * qd + h * hd + e] = (float)(o / sum);
                }
            }
        }
        rf_matmul_naive(xb, att, &L->o, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
        memcpy(xb, x, (size_t)n * d * sizeof(float));
        ref_rmsnorm(xb, L->ffn_norm, n, d, cfg->rms_eps);
        rf_matmul_naive(g, xb, &L->gate, n);
        rf_matmul_naive(u, xb, &L->up, n);
        for (size_t i = 0; i < (size_t)n * ffn; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        rf_matmul_naive(xb, g, &L->down, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
    }
    ref_rmsnorm(x, m->final_norm, n, d, cfg->rms_eps);
    rf_matmul_naive(logits, x, &m->lm_head, n);
    free(x), free(xb), free(q), free(att), free(k), free(v), free(g), free(u), free(sc);
    return 0;
}
