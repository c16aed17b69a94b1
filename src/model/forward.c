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

/* The keys/values of one KV head token (r, j) attends to, as up to two
 * contiguous runs in the cache (head_dim floats per entry): main[0, n0)
 * and, for a forked cache, row r's extension [0, n1). */
typedef struct {
    const float *k0, *v0;
    int n0;
    const float *k1, *v1;
    int n1;
} kv_view;

/* Attention of a tile of nt consecutive tokens of one run, for query head h and, with hstep 2, head h + 1 (adjacent heads
 * that share the KV head of the views w): out[j] = softmax(q[j] . K^T * scale) V over the
 * keys of view w[j], for every token j of the tile.
 *
 * The keys go in blocks of ATT_KEYS, and every token of the tile takes its
 * part of a block while the block is in L1: one head's slices of a block
 * of keys are read from L2 once per tile instead of once per token (a wide
 * call's attention was bound by reading them). The numbers are those of
 * attending token by token: each key's score does not depend on how the
 * keys are grouped (kernels/ops.c rf_scores), the softmax runs over each
 * token's own keys, and the weighted sum of values adds the keys in the
 * same order (rf_mix reloads its sums between blocks). Token j's view is
 * main[0, w[j].n0) then its row's extension [0, w[j].n1): the runs of a
 * tile share k0 and k1 and differ only in how many keys they see, so key
 * index t is the same key for every token that sees it.
 * sc: hstep * ATT_TILE rows of ncap floats. */
#define ATT_TILE (RF_ATT_ROWS / 2)
#define ATT_KEYS 64
static void attend_tile(float *const *out, const float *const *q, const kv_view *w, int nt, int hd, int hstep,
                        float scale, float *sc, size_t ncap) {
    const int ld = hd; /* one head's entries, head-major (kvcache.h) */
    int nmax = 0;
    for (int j = 0; j < nt; j++)
        if (w[j].n0 + w[j].n1 > nmax) nmax = w[j].n0 + w[j].n1;
    for (int kb = 0; kb < nmax; kb += ATT_KEYS)
        for (int j = 0; j < nt; j++) {
            float *s0 = sc + (size_t)j * hstep * ncap, *s1 = s0 + ncap;
            int a = kb, b = kb + ATT_KEYS < w[j].n0 + w[j].n1 ? kb + ATT_KEYS : w[j].n0 + w[j].n1;
            for (int part = 0; part < 2 && a < b; part++) { /* main, then the row's extension */
                int base = part ? w[j].n0 : 0, lim = part ? b : (b < w[j].n0 ? b : w[j].n0);
                if (a >= lim) continue;
                const float *K = (part ? w[j].k1 : w[j].k0) + (size_t)(a - base) * ld;
                if (hstep == 2) rf_scores2(s0 + a, s1 + a, q[j], q[j] + hd, K, ld, lim - a, hd, scale);
                else rf_scores(s0 + a, q[j], K, ld, lim - a, hd, scale);
                a = lim;
            }
        }
    for (int j = 0; j < nt; j++) {
        float *s0 = sc + (size_t)j * hstep * ncap;
        for (int r = 0; r < hstep; r++) rf_softmax(s0 + (size_t)r * ncap, w[j].n0 + w[j].n1);
        memset(out[j], 0, (size_t)hstep * hd * sizeof(float));
    }
    for (int kb = 0; kb < nmax; kb += ATT_KEYS)
        for (int j = 0; j < nt; j++) {
            float *s0 = sc + (size_t)j * hstep * ncap, *s1 = s0 + ncap;
            int a = kb, b = kb + ATT_KEYS < w[j].n0 + w[j].n1 ? kb + ATT_KEYS : w[j].n0 + w[j].n1;
            for (int part = 0; part < 2 && a < b; part++) {
                int base = part ? w[j].n0 : 0, lim = part ? b : (b < w[j].n0 ? b : w[j].n0);
                if (a >= lim) continue;
                const float *V = (part ? w[j].v1 : w[j].v0) + (size_t)(a - base) * ld;
                if (hstep == 2) rf_mix2(out[j], out[j] + hd, s0 + a, s1 + a, V, ld, lim - a, hd);
                else rf_mix(out[j], s0 + a, V, ld, lim - a, hd);
                a = lim;
            }
        }
}

/* Whether rf_forward can run b on cache c with s's sizes: 0, or -1 with
 * the reason (the one validation of every entry point: a call batched with
 * others is checked exactly as it would be alone). */
int rf_forward_check(const rf_model *m, const rf_kvcache *c, const rf_runstate *s, const rf_batch *b) {
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
 * append to cache c's main sequence (row -1) or to its forked row `row`,
 * and attend causally among themselves or, bidirectional, to all n. An
 * unforked cache's call is one run, a forked one's one run per row; a pass
 * of several calls (rf_forward_calls) lays their runs one after the other. */
typedef struct {
    rf_kvcache *c;
    int row, start, n;
    int bidirectional;
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
 * pairs; spinning barriers separate the steps. A call on a small model is
 * short, so starting a thread team per matmul (33 per call) and libgomp's
 * barriers would cost more than the second core gives back.
 *
 * It stays one function (over 150 lines) because the region must: its
 * steps share the team, the barriers and the per-thread state in between.
 * The same transformer written plainly, one step after the other, is
 * rf_forward_reference (forward_ref.c), which the tests hold it to. */
static void forward_runs(const rf_model *m, rf_runstate *s, int T, const int *tokens, const int *pos,
                         const run *runs, int n_runs, int n_logits, const int *logit_idx, float *logits) {
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
        rf_rope_table(s->rope + (size_t)t0 * hd, pos + t0, t1 - t0, hd, cfg->rope_theta); /* for every layer */
        const size_t ncap = (size_t)s->max_ctx + s->max_tokens;
        float *sc = s->scores + (size_t)tid * RF_ATT_ROWS * ncap; /* attention weights */
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
                rf_rope_apply(s->q + (size_t)t0 * qd, s->rope + (size_t)t0 * hd, t1 - t0, nh, hd);
                rf_rope_apply(s->k + (size_t)t0 * kvd, s->rope + (size_t)t0 * hd, t1 - t0, nkv, hd);
            }
            for (int i = t0; i < t1; i++) {
                const run *u = run_of(runs, n_runs, i);
                rf_kvcache *c = u->c;
                int j = i - u->start;
                size_t off = u->row >= 0 ? rf_kv_row_off(c, u->row, l, c->row_len[u->row] + j)
                                         : rf_kv_main_off(c, l, c->len + j);
                size_t hs = u->row >= 0 ? rf_kv_row_head(c) : rf_kv_main_head(c); /* head-major */
                for (int g = 0; g < nkv; g++) {
                    memcpy((u->row >= 0 ? c->row_k : c->k) + off + g * hs, s->k + (size_t)i * kvd + g * hd,
                           hd * sizeof(float));
                    memcpy((u->row >= 0 ? c->row_v : c->v) + off + g * hs, s->v + (size_t)i * kvd + g * hd,
                           hd * sizeof(float));
                }
            }
            rf_team_barrier(&team);
            /* every (head or head pair, tile of up to ATT_TILE tokens of one
             * run) attends independently; a task whose token does not start
             * a tile has nothing to do. Each thread takes a contiguous share
             * of the tasks in head-major order, so that it reads a head's
             * keys and values from memory once for all the call's tiles and
             * from its L2 after that (dealt out one task at a time, the tiles
             * of a head went to both threads alternately and a 16-token call
             * of the 0.6B shape read the cache four times per layer:
             * attention took 4-5x its 1-token time) */
            int task0, task1;
            rf_team_share(&team, tid, T * nht, &task0, &task1);
            for (int task = task0; task < task1; task++) {
                int i = task % T, h = (task / T) * hstep;
                const run *u = run_of(runs, n_runs, i);
                if ((i - u->start) % ATT_TILE) continue;
                const rf_kvcache *c = u->c;
                int nt = u->start + u->n - i < ATT_TILE ? u->start + u->n - i : ATT_TILE;
                kv_view w[ATT_TILE];
                float *out[ATT_TILE];
                const float *q[ATT_TILE];
                for (int t = 0; t < nt; t++) {
                    int j = i + t - u->start;
                    int lim = u->bidirectional ? u->n : j + 1; /* tokens of its run this one sees */
                    const int g = h / group; /* the KV head: its entries one contiguous run */
                    w[t].k0 = c->k + rf_kv_main_off(c, l, 0) + g * rf_kv_main_head(c);
                    w[t].v0 = c->v + rf_kv_main_off(c, l, 0) + g * rf_kv_main_head(c);
                    if (u->row >= 0) {
                        size_t off = rf_kv_row_off(c, u->row, l, 0) + g * rf_kv_row_head(c);
                        w[t].n0 = c->fork_len;
                        w[t].k1 = c->row_k + off;
                        w[t].v1 = c->row_v + off;
                        w[t].n1 = c->row_len[u->row] + lim;
                    } else {
                        w[t].n0 = c->len + lim;
                        w[t].k1 = w[t].v1 = NULL;
                        w[t].n1 = 0;
                    }
                    out[t] = s->att + (size_t)(i + t) * qd + h * hd;
                    q[t] = s->q + (size_t)(i + t) * qd + h * hd;
                }
                attend_tile(out, q, w, nt, hd, hstep, scale, sc, ncap);
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

/* the sizes of a pass of several calls */
typedef struct {
    int T, n_runs, n_logits; /* of the whole pass */
} pass_sizes;

/* Checks the calls (each as rf_forward_check checks it alone, then what
 * only a pass of several can get wrong) and sizes their pass: 0, or -1
 * with the reason and, in *bad, the failing call (-1: the pass as a whole). */
static int check_calls(const rf_model *m, const rf_runstate *s, int n_calls, rf_kvcache *const *kv,
                       const rf_batch *calls, int n_global, const int *global_idx, int *bad, pass_sizes *z) {
    int T = 0, n_runs = 0, n_logits = 0;
    if (bad) *bad = -1;
    if (n_calls <= 0) {
        rf_set_error("forward: no calls");
        return -1;
    }
    for (int i = 0; i < n_calls; i++) {
        if (rf_forward_check(m, kv[i], s, &calls[i]) != 0) {
            if (bad) *bad = i;
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (kv[k] == kv[i]) { /* both would append at the same place */
                rf_set_error("forward: calls %d and %d share a cache", k, i);
                return -1;
            }
        T += calls[i].n_rows * calls[i].n_tok;
        n_runs += calls[i].n_rows;
        n_logits += calls[i].n_logits;
    }
    if (T > s->max_tokens) {
        rf_set_error("forward: %d tokens exceed the run state's %d", T, s->max_tokens);
        return -1;
    }
    if (global_idx) {
        for (int i = 0; i < n_global; i++)
            if (global_idx[i] < 0 || global_idx[i] >= T) {
                rf_set_error("forward: logit index %d outside [0, %d)", global_idx[i], T);
                return -1;
            }
        n_logits = n_global;
    }
    *z = (pass_sizes){T, n_runs, n_logits};
    return 0;
}

/* The checked calls' tokens (check_calls) as one forward pass: their runs,
 * tokens, position ids and logit indices laid out one call after the
 * other. Logits: the calls' own logit_idx (offset to the concatenated
 * tokens), or global_idx when given (indices into the concatenated tokens
 * already: rf_forward_seqs). */
static void run_calls(const rf_model *m, rf_runstate *s, int n_calls, rf_kvcache *const *kv, const rf_batch *calls,
                      const int *global_idx, float *logits, pass_sizes z) {
    const int T = z.T, n_runs = z.n_runs, n_logits = z.n_logits;
    /* one call reads its own arrays; several are gathered (scoped blocks:
     * an rf_die inside the pass frees them) */
    const int one = n_calls == 1;
    run *runs = rf_scoped_malloc((size_t)n_runs * sizeof *runs);
    int *tokens = one ? NULL : rf_scoped_malloc((size_t)T * sizeof(int));
    int *pos = one ? NULL : rf_scoped_malloc((size_t)T * sizeof(int));
    int *lidx = one || global_idx ? NULL : rf_scoped_malloc((size_t)(n_logits ? n_logits : 1) * sizeof(int));
    for (int i = 0, at = 0, r = 0, l = 0; i < n_calls; i++) {
        const rf_batch *b = &calls[i];
        const int n = b->n_tok, Ti = b->n_rows * n;
        if (kv[i]->n_rows) /* forked: each row its own extension */
            for (int row = 0; row < b->n_rows; row++) runs[r++] = (run){kv[i], row, at + row * n, n, b->bidirectional};
        else
            runs[r++] = (run){kv[i], -1, at, n, b->bidirectional};
        if (!one) {
            memcpy(tokens + at, b->tokens, (size_t)Ti * sizeof(int));
            memcpy(pos + at, b->pos, (size_t)Ti * sizeof(int));
        }
        if (lidx)
            for (int k = 0; k < b->n_logits; k++) lidx[l++] = at + b->logit_idx[k];
        at += Ti;
    }
    forward_runs(m, s, T, one ? calls[0].tokens : tokens, one ? calls[0].pos : pos, runs, n_runs, n_logits,
                 global_idx ? global_idx : one ? calls[0].logit_idx : lidx, logits);
    rf_scoped_free(runs), rf_scoped_free(tokens), rf_scoped_free(pos), rf_scoped_free(lidx);
}

static int forward_calls(const rf_model *m, rf_runstate *s, int n_calls, rf_kvcache *const *kv, const rf_batch *calls,
                         int n_global, const int *global_idx, float *logits, int *bad) {
    pass_sizes z;
    if (check_calls(m, s, n_calls, kv, calls, n_global, global_idx, bad, &z) != 0) return -1;
    run_calls(m, s, n_calls, kv, calls, global_idx, logits, z);
    return 0;
}

int rf_forward(const rf_model *m, rf_kvcache *c, rf_runstate *s, const rf_batch *b) {
    pass_sizes z;
    if (check_calls(m, s, 1, &c, b, 0, NULL, NULL, &z) != 0) return -1;
    rf_call_log_record(c, b); /* only valid calls, before the pass moves the cache on */
    run_calls(m, s, 1, &c, b, NULL, b->logits, z);
    return 0;
}

int rf_forward_calls(const rf_model *m, rf_runstate *s, const rf_call_batch *b, int *bad) {
    return forward_calls(m, s, b->n_calls, b->kv, b->calls, 0, NULL, b->logits, bad);
}

int rf_forward_seqs(const rf_model *m, rf_runstate *s, const rf_seq_batch *b) {
    if (b->n_seq <= 0) {
        rf_set_error("forward: no sequences");
        return -1;
    }
    /* each sequence a one-row call on its unforked cache, without logits
     * of its own: the logit indices are the batch's, into all the tokens */
    rf_batch *calls = rf_scoped_malloc((size_t)b->n_seq * sizeof *calls);
    for (int i = 0, at = 0; i < b->n_seq; at += b->n_tok[i++])
        calls[i] = (rf_batch){1, b->n_tok[i], b->tokens + at, b->pos + at, 0, 0, NULL, NULL};
    int rc = forward_calls(m, s, b->n_seq, b->kv, calls, b->n_logits, b->logit_idx, b->logits, NULL);
    rf_scoped_free(calls);
    return rc;
}
