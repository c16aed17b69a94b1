/* forward.c - the Qwen3 forward pass on the reorderable KV cache.
 *
 * Per layer, for the T = R*n tokens of a call:
 *   xb = rmsnorm(x) ; q,k,v = xb Wq^T, xb Wk^T, xb Wv^T
 *   q,k = rmsnorm per head (q_norm/k_norm) then RoPE at each token's position id
 *   k,v are appended to the cache; attention over the keys each token sees
 *   x += attn Wo^T ; xb = rmsnorm(x) ; x += (silu(xb Wg^T) * xb Wu^T) Wd^T
 * All T tokens go through each matmul together, so the weights are streamed
 * once per call whatever n is: that is what makes ReFusion's 8-64 token calls
 * cost little more than a 1-token AR step on a CPU. */
#include "model/forward.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/team.h"
#include "model/runstate.h"
#include "util/util.h"

/* The keys/values token (r, j) attends to, as up to two contiguous runs in
 * the cache: main[0, n0) and, for a forked cache, row r's extension [0, n1). */
typedef struct {
    const float *k0, *v0;
    int n0;
    const float *k1, *v1;
    int n1;
} kv_view;

/* out[hd] = softmax(q . K^T * scale) V over the view, for kv head g. */
static void attend(float *out, const float *q, const kv_view *w, int g, int hd, int ld,
                   float scale, float *sc) {
    rf_scores(sc, q, w->k0 + g * hd, ld, w->n0, hd, scale);
    if (w->n1) rf_scores(sc + w->n0, q, w->k1 + g * hd, ld, w->n1, hd, scale);
    rf_softmax(sc, w->n0 + w->n1);
    memset(out, 0, hd * sizeof(float));
    rf_mix(out, sc, w->v0 + g * hd, ld, w->n0, hd);
    if (w->n1) rf_mix(out, sc + w->n0, w->v1 + g * hd, ld, w->n1, hd);
}

/* The same for two query heads of kv head g at once (out, q: the first of
 * two adjacent heads; sc holds 2 x (n0 + n1) floats): the same numbers. */
static void attend2(float *out, const float *q, const kv_view *w, int g, int hd, int ld, float scale,
                    float *sc) {
    int n = w->n0 + w->n1;
    float *sc1 = sc + n;
    rf_scores2(sc, sc1, q, q + hd, w->k0 + g * hd, ld, w->n0, hd, scale);
    if (w->n1) rf_scores2(sc + w->n0, sc1 + w->n0, q, q + hd, w->k1 + g * hd, ld, w->n1, hd, scale);
    rf_softmax(sc, n);
    rf_softmax(sc1, n);
    memset(out, 0, 2 * hd * sizeof(float));
    rf_mix2(out, out + hd, sc, sc1, w->v0 + g * hd, ld, w->n0, hd);
    if (w->n1) rf_mix2(out, out + hd, sc + w->n0, sc1 + w->n0, w->v1 + g * hd, ld, w->n1, hd);
}

static int check_batch(const rf_model *m, const rf_kvcache *c, const rf_runstate *s, const rf_batch *b) {
    const rf_config *cfg = &m->cfg;
    int R = b->n_rows, n = b->n_tok, T = R * n;
    if (R <= 0 || n <= 0) {
        rf_set_error("forward: empty batch (%d rows x %d tokens)", R, n);
        return -1;
    }
    if (T > s->max_tokens) {
        rf_set_error("forward: %d tokens exceed the run state's %d", T, s->max_tokens);
        return -1;
    }
    if (c->n_rows ? R != c->n_rows : R != 1) {
        rf_set_error("forward: %d rows but the cache has %d forked rows", R, c->n_rows);
        return -1;
    }
    if (c->n_rows) {
        for (int r = 0; r < R; r++)
            if (c->row_len[r] + n > c->row_cap) {
                rf_set_error("forward: row %d extension full (%d + %d > %d)", r, c->row_len[r], n, c->row_cap);
                return -1;
            }
        if (c->fork_len + c->row_cap + n > s->max_ctx) {
            rf_set_error("forward: context %d exceeds the run state's %d", c->fork_len + c->row_cap + n, s->max_ctx);
            return -1;
        }
    } else if (c->len + n > c->cap || c->len + n > s->max_ctx) {
        rf_set_error("forward: context of %d + %d tokens exceeds the KV cache (%d)", c->len, n,
                     c->cap < s->max_ctx ? c->cap : s->max_ctx);
        return -1;
    }
    for (int i = 0; i < T; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= cfg->vocab_size) {
            rf_set_error("forward: token id %d outside the vocabulary [0, %d)", b->tokens[i], cfg->vocab_size);
            return -1;
        }
        if (b->pos[i] < 0) {
            rf_set_error("forward: negative position id %d", b->pos[i]);
            return -1;
        }
    }
    if (b->n_logits > T) {
        rf_set_error("forward: %d logits asked for %d tokens", b->n_logits, T);
        return -1;
    }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_idx[i] < 0 || b->logit_idx[i] >= T) {
            rf_set_error("forward: logit index %d outside [0, %d)", b->logit_idx[i], T);
            return -1;
        }
    return 0;
}

/* A run of a call's tokens that share a cache: tokens [start, start + n)
 * append to cache c's main sequence (row -1) or to its forked row `row`.
 * One call is one run (unforked cache), one run per forked row, or one run
 * per sequence of rf_forward_seqs (each its own cache). */
typedef struct {
    rf_kvcache *c;
    int row, start, n;
} run;

/* the run holding token i (runs are in token order) */
static inline const run *run_of(const run *runs, int n_runs, int i) {
    int lo = 0, hi = n_runs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (runs[mid].start <= i) lo = mid;
        else hi = mid - 1;
    }
    return &runs[lo];
}

/* The forward pass of T tokens laid out in runs (see rf_forward).
 *
 * The whole pass runs in one OpenMP parallel region, its threads a team
 * (kernels/team.h): matmuls share their row chunks (rf_matmul_team),
 * per-token steps split the tokens, attention shares its (token, head)
 * pairs; spinning barriers separate the steps. On the demo model a call
 * takes 0.1-0.3 ms: starting a thread team per matmul (33 per call) and
 * libgomp's barriers cost more than the second core gave back. */
static void forward_runs(const rf_model *m, rf_runstate *s, int T, const int *tokens, const int *pos,
                         int bidirectional, const run *runs, int n_runs, int n_logits, const int *logit_idx,
                         float *logits) {
    const rf_config *cfg = &m->cfg;
    const int d = cfg->hidden_size, hd = cfg->head_dim, nh = cfg->n_heads, nkv = cfg->n_kv_heads;
    const int qd = nh * hd, kvd = nkv * hd, ffn = cfg->intermediate_size, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    /* a team only when there is enough work to share (weights x tokens) */
    double work = ((double)d * (2 * qd + 2 * kvd) + 3.0 * d * ffn) * cfg->n_layers * (T < 8 ? 8 : T);
    rf_team team;
    rf_team_init(&team, 1);

#pragma omp parallel if (work > (1 << 20) && !omp_in_parallel())
    {
        const int tid = omp_get_thread_num();
        if (tid == 0) team.n = omp_get_num_threads();
#pragma omp barrier
        int t0, t1; /* this thread's tokens */
        rf_team_share(&team, tid, T, &t0, &t1);
        for (int i = t0; i < t1; i++) rf_mat_row_f32(s->x + (size_t)i * d, &m->embed, tokens[i]);
        float *sc = s->scores + (size_t)tid * 2 * (s->max_ctx + s->max_tokens); /* attention weights */
        /* query heads in pairs that share a KV head when the group size is even */
        const int hstep = group % 2 == 0 ? 2 : 1, nht = nh / hstep;

        for (int l = 0; l < cfg->n_layers; l++) {
            const rf_layer *L = &m->layers[l];
            /* ---- attention ---- */
            rf_rmsnorm(s->xb + (size_t)t0 * d, s->x + (size_t)t0 * d, L->attn_norm, t1 - t0, d, cfg->rms_eps);
            {
                float *const Y[3] = {s->q, s->k, s->v};
                const rf_mat *const W[3] = {&L->q, &L->k, &L->v};
                rf_matmul_team(&team, tid, 3, Y, s->xb, W, T);
            }
            /* per token: q, k norms and RoPE; then append the new K/V after
             * its cache's main sequence or its row's extension */
            for (int i = t0; i < t1; i++) {
                float *q = s->q + (size_t)i * qd, *k = s->k + (size_t)i * kvd;
                rf_rmsnorm(q, q, L->q_norm, nh, hd, cfg->rms_eps);
                rf_rmsnorm(k, k, L->k_norm, nkv, hd, cfg->rms_eps);
            }
            if (t1 > t0) {
                rf_rope(s->q + (size_t)t0 * qd, pos + t0, t1 - t0, nh, hd, cfg->rope_theta);
                rf_rope(s->k + (size_t)t0 * kvd, pos + t0, t1 - t0, nkv, hd, cfg->rope_theta);
            }
            for (int i = t0; i < t1; i++) {
                const run *u = run_of(runs, n_runs, i);
                rf_kvcache *c = u->c;
                int j = i - u->start;
                size_t off = u->row >= 0 ? rf_kv_row_off(c, u->row, l, c->row_len[u->row] + j)
                                         : rf_kv_main_off(c, l, c->len + j);
                memcpy((u->row >= 0 ? c->row_k : c->k) + off, s->k + (size_t)i * kvd, kvd * sizeof(float));
                memcpy((u->row >= 0 ? c->row_v : c->v) + off, s->v + (size_t)i * kvd, kvd * sizeof(float));
            }
            if (tid == 0) atomic_store_explicit(&team.next, 0, memory_order_relaxed);
            rf_team_barrier(&team);
            /* every (token, head or head pair) attends independently */
            for (int task = rf_team_next(&team); task < T * nht; task = rf_team_next(&team)) {
                int i = task / nht, h = (task % nht) * hstep;
                const run *u = run_of(runs, n_runs, i);
                const rf_kvcache *c = u->c;
                int j = i - u->start;
                int lim = bidirectional ? u->n : j + 1; /* tokens of its run this one sees */
                kv_view w;
                w.k0 = c->k + rf_kv_main_off(c, l, 0);
                w.v0 = c->v + rf_kv_main_off(c, l, 0);
                if (u->row >= 0) {
                    size_t off = rf_kv_row_off(c, u->row, l, 0);
                    w.n0 = c->fork_len;
                    w.k1 = c->row_k + off;
                    w.v1 = c->row_v + off;
                    w.n1 = c->row_len[u->row] + lim;
                } else {
                    w.n0 = c->len + lim;
                    w.k1 = w.v1 = NULL;
                    w.n1 = 0;
                }
                float *out = s->att + (size_t)i * qd + h * hd;
                const float *q = s->q + (size_t)i * qd + h * hd;
                if (hstep == 2)
                    attend2(out, q, &w, h / group, hd, c->ld, scale, sc);
                else
                    attend(out, q, &w, h / group, hd, c->ld, scale, sc);
            }
            {
                float *const Y[1] = {s->xb};
                const rf_mat *const W[1] = {&L->o};
                rf_matmul_team(&team, tid, 1, Y, s->att, W, T);
            }
            rf_add(s->x + (size_t)t0 * d, s->xb + (size_t)t0 * d, (size_t)(t1 - t0) * d);

            /* ---- SwiGLU MLP ---- */
            rf_rmsnorm(s->xb + (size_t)t0 * d, s->x + (size_t)t0 * d, L->ffn_norm, t1 - t0, d, cfg->rms_eps);
            {
                float *const Y[2] = {s->hb, s->hb2};
                const rf_mat *const W[2] = {&L->gate, &L->up};
                rf_matmul_team(&team, tid, 2, Y, s->xb, W, T);
            }
            rf_silu_mul(s->hb + (size_t)t0 * ffn, s->hb2 + (size_t)t0 * ffn, (size_t)(t1 - t0) * ffn);
            {
                float *const Y[1] = {s->xb};
                const rf_mat *const W[1] = {&L->down};
                rf_matmul_team(&team, tid, 1, Y, s->hb, W, T);
            }
            rf_add(s->x + (size_t)t0 * d, s->xb + (size_t)t0 * d, (size_t)(t1 - t0) * d);
            /* (the next layer's first step reads only this thread's tokens) */
        }

        /* logits only where asked: gather, final norm, lm head */
        if (n_logits > 0) {
            float *xf = s->xb; /* T >= n_logits rows of d are free here */
            int g0, g1;
            rf_team_share(&team, tid, n_logits, &g0, &g1);
            rf_team_barrier(&team); /* every thread is done reading xb */
            for (int i = g0; i < g1; i++)
                memcpy(xf + (size_t)i * d, s->x + (size_t)logit_idx[i] * d, d * sizeof(float));
            rf_rmsnorm(xf + (size_t)g0 * d, xf + (size_t)g0 * d, m->final_norm, g1 - g0, d, cfg->rms_eps);
            float *const Y[1] = {logits};
            const rf_mat *const W[1] = {&m->lm_head};
            rf_matmul_team(&team, tid, 1, Y, xf, W, n_logits);
        }
    }

    /* a matmul that found no memory for its scratch skipped its work: fail
     * here, outside the parallel region, where rf_die can unwind */
    size_t oom = rf_kernels_take_oom();
    if (oom) rf_oom(oom);

    /* the new entries are now part of the caches, with their position ids */
    for (int r = 0; r < n_runs; r++) {
        const run *u = &runs[r];
        rf_kvcache *c = u->c;
        int *dst = u->row >= 0 ? c->row_pos + (size_t)u->row * c->row_cap + c->row_len[u->row] : c->pos + c->len;
        memcpy(dst, pos + u->start, u->n * sizeof(int));
        if (u->row >= 0)
            c->row_len[u->row] += u->n;
        else
            c->len += u->n;
    }
}

int rf_forward(const rf_model *m, rf_kvcache *c, rf_runstate *s, const rf_batch *b) {
    if (check_batch(m, c, s, b) != 0) return -1;
    rf_call_log_record(c, b);
    const int R = b->n_rows, n = b->n_tok;
    run one[16], *runs = R <= 16 ? one : rf_malloc((size_t)R * sizeof *runs);
    if (c->n_rows > 0)
        for (int r = 0; r < R; r++) runs[r] = (run){c, r, r * n, n};
    else
        runs[0] = (run){c, -1, 0, n};
    forward_runs(m, s, R * n, b->tokens, b->pos, b->bidirectional, runs, R, b->n_logits, b->logit_idx, b->logits);
    if (runs != one) free(runs);
    return 0;
}

int rf_forward_seqs(const rf_model *m, rf_runstate *s, const rf_seq_batch *b) {
    const rf_config *cfg = &m->cfg;
    int T = 0;
    if (b->n_seq <= 0) {
        rf_set_error("forward: no sequences");
        return -1;
    }
    for (int i = 0; i < b->n_seq; i++) {
        const rf_kvcache *c = b->kv[i];
        int n = b->n_tok[i];
        if (n <= 0 || c->n_rows) {
            rf_set_error("forward: sequence %d: %s", i, n <= 0 ? "no tokens" : "its cache is forked");
            return -1;
        }
        if (c->len + n > c->cap || c->len + n > s->max_ctx) {
            rf_set_error("forward: sequence %d: context of %d + %d tokens exceeds the KV cache (%d)", i, c->len, n,
                         c->cap < s->max_ctx ? c->cap : s->max_ctx);
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (b->kv[k] == c) {
                rf_set_error("forward: sequences %d and %d share a cache", k, i);
                return -1;
            }
        T += n;
    }
    if (T > s->max_tokens) {
        rf_set_error("forward: %d tokens exceed the run state's %d", T, s->max_tokens);
        return -1;
    }
    for (int i = 0; i < T; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= cfg->vocab_size || b->pos[i] < 0) {
            rf_set_error("forward: token %d (id %d, position %d) outside the vocabulary or negative", i,
                         b->tokens[i], b->pos[i]);
            return -1;
        }
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_idx[i] < 0 || b->logit_idx[i] >= T) {
            rf_set_error("forward: logit index %d outside [0, %d)", b->logit_idx[i], T);
            return -1;
        }
    run one[16], *runs = b->n_seq <= 16 ? one : rf_malloc((size_t)b->n_seq * sizeof *runs);
    for (int i = 0, at = 0; i < b->n_seq; at += b->n_tok[i++]) runs[i] = (run){b->kv[i], -1, at, b->n_tok[i]};
    forward_runs(m, s, T, b->tokens, b->pos, 0, runs, b->n_seq, b->n_logits, b->logit_idx, b->logits);
    if (runs != one) free(runs);
    return 0;
}
