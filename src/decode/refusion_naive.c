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
 * forward over exactly these rules (rf_forward_masked_reference, in
 * src/model/forward_ref.c) reproduces the cached K/V, and so the fast
 * decoder's logits, to rounding.
 *
 * AR-verified mode (refusion.c's header): (a) is applied where a row forces
 * a token; (b) needs the AR logits of the committed left neighbour, which
 * the fast decoder kept from the call that fed it and which here are simply
 * recomputed over the committed sequence up to that entry (not a model call:
 * the fast decoder makes none for them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "model/forward.h"

/* ---- the physical sequence ---------------------------------------------------- */
typedef struct {
    int n, cap;
    int *tok, *pos, *vis_end, *grp;
} seq;

static void seq_push(seq *s, int tok, int pos, int vis_end, int grp) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        size_t used = (size_t)s->n * sizeof(int), n = (size_t)cap * sizeof(int);
        s->tok = rf_scoped_grow(s->tok, used, n);
        s->pos = rf_scoped_grow(s->pos, used, n);
        s->vis_end = rf_scoped_grow(s->vis_end, used, n);
        s->grp = rf_scoped_grow(s->grp, used, n);
        s->cap = cap;
    }
    s->tok[s->n] = tok, s->pos[s->n] = pos, s->vis_end[s->n] = vis_end, s->grp[s->n] = grp;
    s->n++;
}
static void seq_free(seq *s) { rf_scoped_free(s->tok), rf_scoped_free(s->pos), rf_scoped_free(s->vis_end), rf_scoped_free(s->grp); }

typedef struct {
    const rf_model *m;
    const rf_params *p;
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
    float *lg = rf_scoped_malloc((size_t)n * z->V * sizeof(float));
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

/* (b): the AR logits after the committed entry at position id `pos`:
 * recomputed over the committed sequence up to that entry. */
static float *left_logits(const naive *z, int pos) {
    int e = 0;
    while (e < z->main.n && z->main.pos[e] != pos) e++;
    if (e == z->main.n) rf_die("naive: position %d is not committed", pos);
    float *lg = rf_scoped_malloc((size_t)z->V * sizeof(float));
    if (rf_forward_masked_reference(z->m, e + 1, z->main.tok, z->main.pos, z->main.vis_end, z->main.grp, 1, lg))
        rf_die("%s", rf_last_error());
    return lg;
}

/* Infill slots sl[0..K) whose drafts are spec[k][S] with accepted tags
 * tag[k][S]; commit them; return the EOS slot or -1. */
static int naive_infill(naive *z, rf_step *st, const int *sl, int K, int *spec, unsigned char *tag,
                        unsigned char *how) {
    const int S = z->S, ar_fix = z->p->ar_correct;
    int R = K, a = 0, eos_row = -1, iters = 0;
    int *stale = rf_scoped_malloc((size_t)K * sizeof(int));
    int fork_len = z->main.n;
    int *tk = rf_scoped_malloc(S * sizeof(int)), *ps = rf_scoped_malloc(S * sizeof(int));
    unsigned char *old = rf_scoped_malloc((size_t)K * S);
    for (;;) {
        int all = 1;
        for (int i = 0; i < R * S; i++) all &= tag[i];
        if (all && a < S) count_call(z), st->refeeds++; /* the fast decoder re-feeds what (a) made stale */
        if (all) break;
        if (iters == S) rf_die("naive infill: no progress");
        memcpy(old, tag, (size_t)R * S);
        /* draft, row by row: row r's sequence = main + its accepted tokens [0, a) + window
         * (jacobi: no draft, the current drafts are verified again) */
        if (!z->p->jacobi) count_call(z);
        for (int r = 0; r < R; r++) {
            seq row = z->main;
            seq mine = {0};
            for (int i = 0; i < row.n; i++) seq_push(&mine, row.tok[i], row.pos[i], row.vis_end[i], row.grp[i]);
            for (int j = 0; j < a; j++) seq_push(&mine, spec[r * S + j], pos_of(z, sl[r], j), 0, 0);
            for (int j = a; j < S; j++) {
                tk[j - a] = tag[r * S + j] ? spec[r * S + j] : z->mask;
                ps[j - a] = pos_of(z, sl[r], j);
            }
            float *lg;
            if (!z->p->jacobi) {
                lg = run(z, &mine, S - a, tk, ps);
                for (int j = a; j < S; j++)
                    if (!tag[r * S + j]) spec[r * S + j] = rf_logits_stats(lg + (size_t)(j - a) * z->V, z->V).argmax;
                rf_scoped_free(lg);
            }
            /* verify the window with the new drafts */
            for (int j = a; j < S; j++) tk[j - a] = spec[r * S + j];
            lg = run(z, &mine, S - a, tk, ps);
            int ok = 1;
            stale[r] = -1;
            for (int j = a; j < S; j++) {
                int t = r * S + j, forced = j == a || old[t - 1];
                int pass = forced || prob(z, lg + (size_t)(j - a - 1) * z->V, spec[t]) > z->p->token_threshold;
                if (forced && ar_fix && !old[t] && stale[r] < 0) { /* (a) */
                    int am = rf_logits_stats(lg + (size_t)(j - a - 1) * z->V, z->V).argmax;
                    if (am != spec[t]) spec[t] = am, stale[r] = j;
                }
                ok = ok && pass && !(stale[r] >= 0 && j > stale[r]);
                tag[t] = ok;
                if (ok && !old[t]) how[t] = forced ? (ar_fix ? HOW_FORCED_AR : HOW_FORCED_DRAFT) : HOW_VERIFIED;
            }
            rf_scoped_free(lg);
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
        for (int r = 0; r < R; r++)
            if (stale[r] >= 0 && stale[r] < a) a = stale[r];
    }
    /* commit: each row's entries saw main[0, fork_len) and their own row */
    int eos_slot = -1, stop = 0;
    for (int r = 0; r < R && !stop; r++) {
        int start = z->main.n;
        for (int j = 0; j < S && !stop; j++) {
            seq_push(&z->main, spec[r * S + j], pos_of(z, sl[r], j), fork_len, start);
            ans_fill(&z->ans, sl[r] * S + j, spec[r * S + j]);
            ans_count_how(&z->ans, how[r * S + j]);
            if (spec[r * S + j] == z->eos) stop = 1, eos_slot = sl[r];
        }
    }
    if (eos_row >= 0 && eos_slot != sl[eos_row]) rf_die("naive infill: EOS row mismatch");
    st->infill_iters = iters;
    st->slots_infilled = R;
    st->tpf_ref = (double)S * K / (2.0 * iters + 2.0);
    rf_scoped_free(tk), rf_scoped_free(ps), rf_scoped_free(old), rf_scoped_free(stale);
    return eos_slot;
}

int rf_generate_refusion_naive(const rf_model *m, const int *prompt, int n_prompt,
                               const rf_params *p, rf_gen_result *out) {
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

    int *first = rf_scoped_malloc((size_t)(n_slots + 1) * sizeof(int));
    int nb = rf_block_layout(n_slots, p->n_blocks, first);
    unsigned char *masked = rf_scoped_malloc(n_slots); /* slot still masked? */
    int *sl = rf_scoped_malloc(n_slots * sizeof(int)), *tk = rf_scoped_malloc(G * sizeof(int)), *ps = rf_scoped_malloc(G * sizeof(int));
    int *spec = rf_scoped_malloc(G * sizeof(int));
    unsigned char *tag = rf_scoped_malloc(G), *how = rf_scoped_malloc(G);
    int eos_seen = 0, la_done = 0;
    for (int b = 0; b < nb && !eos_seen; b++) {
        for (int s = first[b]; s < first[b + 1]; s++) masked[s] = 1;
        for (;;) {
            int nm = 0;
            for (int s = first[b]; s < first[b + 1]; s++)
                if (masked[s]) sl[nm++] = s;
            if (nm == 0) break;
            rf_step *st = ans_step(&z.ans, b);
            /* plan */
            for (int i = 0; i < nm * S; i++) tk[i] = z.mask, ps[i] = pos_of(&z, sl[i / S], i % S);
            float *lg = run(&z, &z.main, nm * S, tk, ps);
            if (!la_done) count_call(&z); /* else the last verification carried these masks */
            la_done = 0;
            int K = 0, best = 0;
            double best_c = -1;
            int *chosen = rf_scoped_malloc(nm * sizeof(int));
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
            rf_scoped_free(lg);
            if (K == 0) chosen[K++] = best;
            st->slots_planned = K;
            int *csl = rf_scoped_malloc(K * sizeof(int));
            for (int k = 0; k < K; k++) {
                csl[k] = sl[chosen[k]];
                for (int j = 0; j < S; j++) spec[k * S + j] = tk[chosen[k] * S + j], ps[k * S + j] = pos_of(&z, csl[k], j);
            }
            rf_scoped_free(chosen);
            for (int i = 0; i < K * S; i++) how[i] = i % S ? HOW_VERIFIED : HOW_FIRST_FREE;
            for (int k = 0; p->ar_check_first && k < K; k++) { /* (b) */
                if (csl[k] > 0 && masked[csl[k] - 1]) continue;
                float *l = left_logits(&z, pos_of(&z, csl[k], 0) - 1);
                rf_logit_stats ls = rf_logits_stats(l, z.V);
                if (rf_logit_prob(l, &ls, spec[k * S]) > p->token_threshold) {
                    how[k * S] = HOW_FIRST_CHECKED;
                } else {
                    how[k * S] = HOW_FIRST_REPLACED;
                    spec[k * S] = ls.argmax;
                }
                rf_scoped_free(l);
            }
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
            rf_scoped_free(lg);
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
                    ans_count_how(&z.ans, how[i]);
                    masked[csl[i / S]] = 0;
                }
                /* lookahead: every chosen slot committed and a next plan exists */
                int more = b + 1 < nb;
                for (int s2 = first[b]; s2 < first[b + 1]; s2++) more |= masked[s2];
                la_done = p->lookahead && nc == K * S && eos_at < 0 && more;
                st->slots_fast = (nc + S - 1) / S;
                st->tpf_ref = S * st->slots_fast / 2.0;
                if (eos_at >= 0) eos_slot = csl[eos_at / S];
            } else {
                eos_slot = naive_infill(&z, st, csl, K, spec, tag, how);
                for (int k = 0; k < K; k++) masked[csl[k]] = 0;
            }
            rf_scoped_free(csl);
            if (eos_slot >= 0) {
                eos_seen = 1;
                for (int s = eos_slot; s < first[b + 1]; s++) masked[s] = 0;
            }
        }
    }
    rf_scoped_free(first), rf_scoped_free(masked), rf_scoped_free(sl), rf_scoped_free(tk), rf_scoped_free(ps), rf_scoped_free(spec), rf_scoped_free(tag), rf_scoped_free(how);
    seq_free(&z.main);
    return ans_finish(&z.ans, n_prompt, out);
}
