/* forward_ref.c - the slow, obviously-correct reference forward pass.
 *
 * No cache, no threads, double-precision accumulation, RoPE
 * evaluated from the formula for each position id. It shares nothing with
 * forward.c but the weight loader, so tests comparing the
 * two check the cache bookkeeping, the kernels and the position handling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "util/util.h"
#include <immintrin.h>

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

/* Y[n, rows] = X W^T with double accumulation: f32 weights (the tests'
 * models) through two 4-wide double accumulators, others through the
 * kernels' naive loop. */
static void ref_matmul(float *Y, const float *X, const rf_mat *W, int n) {
    if (W->dtype != RF_F32) {
        rf_matmul_naive(Y, X, W, n);
        return;
    }
    const float *w = W->data;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < W->rows; r++) {
            const float *wr = w + (size_t)r * W->cols, *x = X + (size_t)t * W->cols;
            __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
            int c = 0;
            for (; c + 8 <= W->cols; c += 8) {
                __m256 w8 = _mm256_loadu_ps(wr + c), x8 = _mm256_loadu_ps(x + c);
                a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w8)),
                                     _mm256_cvtps_pd(_mm256_castps256_ps128(x8)), a0);
                a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w8, 1)),
                                     _mm256_cvtps_pd(_mm256_extractf128_ps(x8, 1)), a1);
            }
            double l[4];
            _mm256_storeu_pd(l, _mm256_add_pd(a0, a1));
            double s = (l[0] + l[1]) + (l[2] + l[3]);
            for (; c < W->cols; c++) s += (double)wr[c] * x[c];
            Y[(size_t)t * W->rows + r] = (float)s;
        }
}

/* Token i attends to token t iff t <= i (every t when bidirectional) and,
 * with a visibility rule, t < vis_end[i] or t >= grp[i]. Logits of the last
 * n_out tokens. */
static int ref_forward(const rf_model *m, int n, const int *tokens, const int *pos, int bidirectional,
                       const int *vis_end, const int *grp, int n_out, float *logits) {
    const rf_config *cfg = &m->cfg;
    const int d = cfg->hidden_size, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int qd = nh * hd, kvd = nkv * hd, ffn = cfg->intermediate_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size) {
            rf_set_error("reference forward: token id %d outside the vocabulary", tokens[i]);
            return -1;
        }
    float *x = rf_scoped_calloc((size_t)n * d, sizeof(float)), *xb = rf_scoped_calloc((size_t)n * d, sizeof(float));
    float *q = rf_scoped_calloc((size_t)n * qd, sizeof(float)), *att = rf_scoped_calloc((size_t)n * qd, sizeof(float));
    float *k = rf_scoped_calloc((size_t)n * kvd, sizeof(float)), *v = rf_scoped_calloc((size_t)n * kvd, sizeof(float));
    float *g = rf_scoped_calloc((size_t)n * ffn, sizeof(float)), *u = rf_scoped_calloc((size_t)n * ffn, sizeof(float));
    double *sc = rf_scoped_calloc((size_t)n, sizeof(double));

    for (int i = 0; i < n; i++) rf_mat_row_f32(x + (size_t)i * d, &m->embed, tokens[i]);
    for (int l = 0; l < cfg->n_layers; l++) {
        const rf_layer *L = &m->layers[l];
        memcpy(xb, x, (size_t)n * d * sizeof(float));
        ref_rmsnorm(xb, L->attn_norm, n, d, cfg->rms_eps);
        ref_matmul(q, xb, &L->q, n);
        ref_matmul(k, xb, &L->k, n);
        ref_matmul(v, xb, &L->v, n);
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
                    sc[t] = -INFINITY;
                    if (vis_end && !(t < vis_end[i] || t >= grp[i])) continue; /* hidden from i */
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
        ref_matmul(xb, att, &L->o, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
        memcpy(xb, x, (size_t)n * d * sizeof(float));
        ref_rmsnorm(xb, L->ffn_norm, n, d, cfg->rms_eps);
        ref_matmul(g, xb, &L->gate, n);
        ref_matmul(u, xb, &L->up, n);
        for (size_t i = 0; i < (size_t)n * ffn; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        ref_matmul(xb, g, &L->down, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
    }
    float *xo = x + (size_t)(n - n_out) * d; /* only the last n_out tokens */
    ref_rmsnorm(xo, m->final_norm, n_out, d, cfg->rms_eps);
    ref_matmul(logits, xo, &m->lm_head, n_out);
    rf_scoped_free(x), rf_scoped_free(xb), rf_scoped_free(q), rf_scoped_free(att), rf_scoped_free(k), rf_scoped_free(v), rf_scoped_free(g), rf_scoped_free(u), rf_scoped_free(sc);
    return 0;
}

int rf_forward_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                         int bidirectional, float *logits) {
    return ref_forward(m, n, tokens, pos, bidirectional, NULL, NULL, n, logits);
}

int rf_forward_masked_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                                const int *vis_end, const int *grp, int n_out, float *logits) {
    return ref_forward(m, n, tokens, pos, 0, vis_end, grp, n_out, logits);
}
