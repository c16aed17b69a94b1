/* refusion_naive.c - ReFusion decoding written a second time, as plainly as
 * possible, to check the fast decoder's cache bookkeeping.
 *
 * No KV cache: the committed physical sequence is kept as a list of entries
 * (token, position id, which earlier entries it attended to) and every model
 * call recomputes the whole sequence plus the new tokens from scratch with a
 * double-precision reference forward. Batched calls are run row by row (each
 * row is its own sequence) but counted as one call, like the fast decoder.
 *
 * What an entry attended to: the fast decoder appends infilled rows to the
 * cache with the K/V they got inside their row, where they saw the committed
 * prefix at fork time and their own row only, not the rows committed just
 * before them. So entry i attends to entry j <= i iff j < vis_end[i] or
 * j >= grp[i]; an ordinary entry has vis_end = grp = 0 (all of j <= i). A
 * forward over exactly these rules reproduces the cached K/V, and so the
 * fast decoder's logits, to rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "model/forward.h"

/* ---- the masked reference forward ------------------------------------------ */
static void nv_rmsnorm(float *x, const float *w, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) {
        float *r = x + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)r[j] * r[j];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) r[j] = (float)(w[j] * (r[j] * inv));
    }
}

static void nv_rope(float *v, int hd, int p, double theta) {
    for (int j = 0; j < hd / 2; j++) {
        double ang = p * pow(theta, -2.0 * j / hd), a = v[j], b = v[j + hd / 2];
        v[j] = (float)(a * cos(ang) - b * sin(ang));
        v[j + hd / 2] = (float)(b * cos(ang) + a * sin(ang));
    }
}

/* Y[n, rows] = X W^T with double accumulation: for f32 weights (the tests'
 * models) two 4-wide double accumulators, else the kernels' naive loop. */
static void nv_matmul(float *Y, const float *X, const rf_mat *W, int n) {
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
            double l[4], s = 0;
            _mm256_storeu_pd(l, _mm256_add_pd(a0, a1));
            s = (l[0] + l[1]) + (l[2] + l[3]);
            for (; c < W->cols; c++) s += (double)wr[c] * x[c];
            Y[(size_t)t * W->rows + r] = (float)s;
        }
}

int rf_forward_masked_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                                const int *vis_end, const int *grp, int n_out, float *logits) {
    const rf_config *cfg = &m->cfg;
    const int d = cfg->hidden_size, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int qd = nh * hd, kvd = nkv * hd, ffn = cfg->intermediate_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->vocab_size) {
            rf_set_error("masked reference forward: token id %d outside the vocabulary", tokens[i]);
            return -1;
        }
    float *x = rf_calloc((size_t)n * d, 4), *xb = rf_calloc((size_t)n * d, 4);
    float *q = rf_calloc((size_t)n * qd, 4), *att = rf_calloc((size_t)n * qd, 4);
    float *k = rf_calloc((size_t)n * kvd, 4), *v = rf_calloc((size_t)n * kvd, 4);
    float *g = rf_calloc((size_t)n * ffn, 4), *u = rf_calloc((size_t)n * ffn, 4);
    double *sc = rf_calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n; i++) rf_mat_row_f32(x + (size_t)i * d, &m->embed, tokens[i]);
    for (int l = 0; l < cfg->n_layers; l++) {
        const rf_layer *L = &m->layers[l];
        memcpy(xb, x, (size_t)n * d * 4);
        nv_rmsnorm(xb, L->attn_norm, n, d, cfg->rms_eps);
        nv_matmul(q, xb, &L->q, n);
        nv_matmul(k, xb, &L->k, n);
        nv_matmul(v, xb, &L->v, n);
        nv_rmsnorm(q, L->q_norm, n * nh, hd, cfg->rms_eps);
        nv_rmsnorm(k, L->k_norm, n * nkv, hd, cfg->rms_eps);
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < nh; h++) nv_rope(q + (size_t)i * qd + h * hd, hd, pos[i], cfg->rope_theta);
            for (int h = 0; h < nkv; h++) nv_rope(k + (size_t)i * kvd + h * hd, hd, pos[i], cfg->rope_theta);
        }
        for (int i = 0; i < n; i++)
            for (int h = 0; h < nh; h++) {
                int gk = h / (nh / nkv);
                const float *qi = q + (size_t)i * qd + h * hd;
                double mx = -INFINITY, sum = 0;
                for (int t = 0; t <= i; t++) {
                    sc[t] = -INFINITY;
                    if (!(t < vis_end[i] || t >= grp[i])) continue; /* not seen by entry i */
                    double s = 0;
                    for (int e = 0; e < hd; e++) s += (double)qi[e] * k[(size_t)t * kvd + gk * hd + e];
                    sc[t] = s / sqrt((double)hd);
                    if (sc[t] > mx) mx = sc[t];
                }
                for (int t = 0; t <= i; t++) sum += (sc[t] = exp(sc[t] - mx));
                for (int e = 0; e < hd; e++) {
                    double o = 0;
                    for (int t = 0; t <= i; t++) o += sc[t] * v[(size_t)t * kvd + gk * hd + e];
                    att[(size_t)i * qd + h * hd + e] = (float)(o / sum);
                }
            }
        nv_matmul(xb, att, &L->o, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
        memcpy(xb, x, (size_t)n * d * 4);
        nv_rmsnorm(xb, L->ffn_norm, n, d, cfg->rms_eps);
        nv_matmul(g, xb, &L->gate, n);
        nv_matmul(u, xb, &L->up, n);
        for (size_t i = 0; i < (size_t)n * ffn; i++) g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        nv_matmul(xb, g, &L->down, n);
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] += xb[i];
    }
    float *xo = x + (size_t)(n - n_out) * d; /* only the last n_out tokens */
    nv_rmsnorm(xo, m->final_norm, n_out, d, cfg->rms_eps);
    nv_matmul(logits, xo, &m->lm_head, n_out);
    free(x), free(xb), free(q), free(att), free(k), free(v), free(g), free(u), free(sc);
    return 0;
}

/* ---- the physical sequence ---------------------------------------------------- */
typedef struct {
    int n, cap;
    int *tok, *pos, *vis_end, *grp;
} seq;

static void seq_push(seq *s, int tok, int pos, int vis_end, int grp) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->tok = realloc(s->tok, s->cap * sizeof(int));
        s->pos = realloc(s->pos, s->cap * sizeof(int));
        s->vis_end = realloc(s->vis_end, s->cap * sizeof(int));
        s->grp = realloc(s->grp, s->cap * sizeof(int));
        if (!s->tok || !s->pos || !s->vis_end || !s->grp) rf_die("out of memory");
    }
    s->tok[s->n] = tok, s->pos[s->n] = pos, s->vis_end[s->n] = vis_end, s->grp[s->n] = grp;
    s->n++;
}
static void seq_free(seq *s) { free(s->tok), free(s->pos), free(s->vis_end), free(s->grp); }

typedef struct {
    const rf_model *m;
    const rf_gen_params *p;
    int V, S, P, mask, eos;
    seq main;  /* the committed physical sequence: what the fast decoder caches */
    rf_rng rng;
    rf_answer ans;
} naive;

/* Logits [n, V] of n new tokens fed after base (new entries plain causal). */
static float *run(naive *z, const seq *base, int n, const int *tok, const int *pos) {
    seq s = {0};
    for (int i = 0; i < base->n; i++) seq_push(&s, base->tok[i], base->pos[i], base->vis_end[i], base->grp[i]);
    for (int i = 0; i < n; i++) seq_push(&s, tok[i], pos[i], 0, 0);
    float *lg = rf_malloc((size_t)n * z->V * sizeof(float));
    if (rf_forward_masked_reference(z->m, s.n, s.tok, s.pos, s.vis_end, s.grp, n, lg)) rf_die("%s", rf_last_error());
    seq_free(&s);
    return lg;
}
static void count_call(naive *z) {
    z->ans.n_calls++;
    z->ans.steps[z->ans.n_steps - 1].calls++;
}
static double prob(const naive *z, const float *l, int t) {
    rf_logit_stats s = rf_logits_stats(l, z->V);
    return rf_logit_prob(l, &s, t);
}
static int pos_of(const naive *z, int slot, int j) { return z->P + slot * z->S + j; }

/* Infill slots sl[0..K) whose drafts are spec[k][S] with accepted tags
 * tag[k][S]; commit them; return the EOS slot or -1. */
static int naive_infill(naive *z, rf_step_stat *st, const int *sl, int K, int *spec, unsigned char *tag) {
    const int S = z->S;
    int R = K, a = 0, eos_row = -1, iters = 0;
    int fork_len = z->main.n;
    int *tk = rf_malloc(S * sizeof(int)), *ps = rf_malloc(S * sizeof(int));
    unsigned char *old = rf_malloc((size_t)K * S);
    for (;;) {
        int all = 1;
        for (int i = 0; i < R * S; i++) all &= tag[i];
        if (all) break;
        if (iters == S) rf_die("naive infill: no progress");
        memcpy(old, tag, (size_t)R * S);
        /* draft, row by row: row r's sequence = main + its accepted tokens [0, a) + window */
        count_call(z);
        for (int r = 0; r < R; r++) {
            seq row = z->main;
            seq mine = {0};
            for (int i = 0; i < row.n; i++) seq_push(&mine, row.tok[i], row.pos[i], row.vis_end[i], row.grp[i]);
            for (int j = 0; j < a; j++) seq_push(&mine, spec[r * S + j], pos_of(z, sl[r], j), 0, 0);
            for (int j = a; j < S; j++) {
                tk[j - a] = tag[r * S + j] ? spec[r * S + j] : z->mask;
                ps[j - a] = pos_of(z, sl[r], j);
            }
            float *lg = run(z, &mine, S - a, tk, ps);
            for (int j = a; j < S; j++)
                if (!tag[r * S + j]) spec[r * S + j] = rf_logits_stats(lg + (size_t)(j - a) * z->V, z->V).argmax;
            free(lg);
            /* verify the window with the new drafts */
            for (int j = a; j < S; j++) tk[j - a] = spec[r * S + j];
            lg = run(z, &mine, S - a, tk, ps);
            int ok = 1;
            for (int j = a; j < S; j++) {
                int forced = j == a || old[r * S + j - 1];
                int pass = forced || prob(z, lg + (size_t)(j - a - 1) * z->V, spec[r * S + j]) > z->p->token_threshold;
                ok = ok && pass;
                tag[r * S + j] = ok;
            }
            free(lg);
            seq_free(&mine);
        }
        count_call(z);
        iters++;
        /* the first row with an accepted EOS becomes the last one */
        for (int r = 0; r < R; r++) {
            int hit = 0;
            for (int j = a; j < S; j++) hit |= tag[r * S + j] && spec[r * S + j] == z->eos;
            if (hit) {
                eos_row = r;
                R = r + 1;
                memset(tag + r * S, 1, S);
                break;
            }
        }
        int mn = S, unfinished = 0;
        for (int r = 0; r < R; r++) {
            int c = 0;
            for (int j = a; j < S; j++) c += tag[r * S + j], unfinished |= !tag[r * S + j];
            if (c < mn) mn = c;
        }
        a += unfinished ? mn - 1 : mn;
    }
    /* commit: each row's entries saw main[0, fork_len) and their own row */
    int eos_slot = -1, stop = 0;
    for (int r = 0; r < R && !stop; r++) {
        int start = z->main.n;
        for (int j = 0; j < S && !stop; j++) {
            seq_push(&z->main, spec[r * S + j], pos_of(z, sl[r], j), fork_len, start);
            ans_fill(&z->ans, sl[r] * S + j, spec[r * S + j]);
            if (spec[r * S + j] == z->eos) stop = 1, eos_slot = sl[r];
        }
    }
    if (eos_row >= 0 && eos_slot != sl[eos_row]) rf_die("naive infill: EOS row mismatch");
    st->infill_iters = iters;
    st->slots_infilled = R;
    st->tpf_ref = (double)S * K / (2.0 * iters + 2.0);
    free(tk), free(ps), free(old);
    return eos_slot;
}

int rf_generate_refusion_naive(const rf_model *m, const int *prompt, int n_prompt,
                               const rf_gen_params *p, rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    if (rf_gen_check(m, prompt, n_prompt, p, 0)) return -1;
    naive z;
    memset(&z, 0, sizeof z);
    z.m = m, z.p = p, z.V = m->cfg.vocab_size, z.S = p->slot_size, z.P = n_prompt;
    z.mask = gen_mask_id(m, p), z.eos = gen_eos_id(m, p);
    rf_rng_seed(&z.rng, p->seed);
    const int S = z.S, G = gen_padded(p), n_slots = G / S;
    ans_init(&z.ans, p, G, z.eos);
    for (int i = 0; i < n_prompt; i++) seq_push(&z.main, prompt[i], i, 0, 0);

    int *first = rf_malloc((size_t)(n_slots + 1) * sizeof(int));
    int nb = rf_block_layout(n_slots, p->n_blocks, first);
    unsigned char *masked = rf_malloc(n_slots); /* slot still masked? */
    int *sl = rf_malloc(n_slots * sizeof(int)), *tk = rf_malloc(G * sizeof(int)), *ps = rf_malloc(G * sizeof(int));
    int *spec = rf_malloc(G * sizeof(int));
    unsigned char *tag = rf_malloc(G);
    int eos_seen = 0;
    for (int b = 0; b < nb && !eos_seen; b++) {
        for (int s = first[b]; s < first[b + 1]; s++) masked[s] = 1;
        for (;;) {
            int nm = 0;
            for (int s = first[b]; s < first[b + 1]; s++)
                if (masked[s]) sl[nm++] = s;
            if (nm == 0) break;
            rf_step_stat *st = ans_step(&z.ans, b);
            /* plan */
            for (int i = 0; i < nm * S; i++) tk[i] = z.mask, ps[i] = pos_of(&z, sl[i / S], i % S);
            float *lg = run(&z, &z.main, nm * S, tk, ps);
            count_call(&z);
            int K = 0, best = 0;
            double best_c = -1;
            int *chosen = rf_malloc(nm * sizeof(int));
            for (int k = 0; k < nm; k++) {
                for (int j = 0; j < S; j++) {
                    const float *l = lg + (size_t)(k * S + j) * z.V;
                    rf_logit_stats s = rf_logits_stats(l, z.V);
                    int t = p->temperature > 0 ? rf_gumbel_argmax(l, z.V, p->temperature, s.max, &z.rng) : s.argmax;
                    tk[k * S + j] = t;
                    if (j == 0) {
                        double c = (float)rf_logit_prob(l, &s, t);
                        if (c > p->slot_threshold) chosen[K++] = k;
                        if (c > best_c) best_c = c, best = k;
                    }
                }
            }
            free(lg);
            if (K == 0) chosen[K++] = best;
            st->slots_planned = K;
            int *csl = rf_malloc(K * sizeof(int));
            for (int k = 0; k < K; k++) {
                csl[k] = sl[chosen[k]];
                for (int j = 0; j < S; j++) spec[k * S + j] = tk[chosen[k] * S + j], ps[k * S + j] = pos_of(&z, csl[k], j);
            }
            free(chosen);
            /* verify the concatenation */
            lg = run(&z, &z.main, K * S, spec, ps);
            count_call(&z);
            int prefix = 0, broken = 0, eos_at = -1;
            for (int i = 0; i < K * S; i++) {
                int pass = i % S == 0 || prob(&z, lg + (size_t)(i - 1) * z.V, spec[i]) > p->token_threshold;
                tag[i] = pass && (i % S == 0 || tag[i - 1]);
                if (!pass) broken = 1;
                if (!broken) prefix++;
            }
            free(lg);
            for (int i = 0; i < prefix; i++)
                if (spec[i] == z.eos) {
                    eos_at = i;
                    break;
                }
            int eos_slot = -1;
            if (eos_at >= 0 || prefix >= S) {
                int nc = eos_at >= 0 ? eos_at + 1 : prefix / S * S;
                for (int i = 0; i < nc; i++) {
                    seq_push(&z.main, spec[i], ps[i], 0, 0);
                    ans_fill(&z.ans, csl[i / S] * S + i % S, spec[i]);
                    masked[csl[i / S]] = 0;
                }
                st->slots_fast = (nc + S - 1) / S;
                st->tpf_ref = S * st->slots_fast / 2.0;
                if (eos_at >= 0) eos_slot = csl[eos_at / S];
            } else {
                eos_slot = naive_infill(&z, st, csl, K, spec, tag);
                for (int k = 0; k < K; k++) masked[csl[k]] = 0;
            }
            free(csl);
            if (eos_slot >= 0) {
                eos_seen = 1;
                for (int s = eos_slot; s < first[b + 1]; s++) masked[s] = 0;
            }
        }
    }
    free(first), free(masked), free(sl), free(tk), free(ps), free(spec), free(tag);
    seq_free(&z.main);
    return ans_finish(&z.ans, n_prompt, out);
}
