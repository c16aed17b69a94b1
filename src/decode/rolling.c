/* rolling.c - ReFusion with a rolling slot (beyond the paper).
 *
 * The reference plans a slot (one call: its masks give drafts), then verifies
 * and infills it (more calls), then plans the next. Here the two overlap:
 * every model call feeds, at consecutive positions,
 *
 *     [ last committed token | drafts d_0 .. d_{k-1} | W masks ]
 *
 * and does three things at once. The AR head (the logits of each fed real
 * token) checks the drafts left to right; the masks, which see the drafts,
 * draft the next slot as the ReFusion objective trained them to; and the
 * first token the AR head disagrees with is committed as the AR head's
 * choice. So a call commits j + 1 tokens when j drafts pass. The cache keeps
 * what was fed up to the last accepted draft (attention is causal, so those
 * entries are exactly what plain AR decoding would have cached) and drops
 * the rest.
 *
 * A draft passes when it IS the token AR decoding would commit at its
 * position: the AR head's token is drawn there exactly as rf_generate_ar
 * draws it (rf_sample_token with the same settings, the same history - prompt
 * and the answer before it - and the same RNG, one draw per answer position
 * in order), and the draft is compared with it.
 * The answer is therefore identical to AR decoding's with the same settings
 * and seed, token for token: ReFusion here only changes how many tokens one
 * call yields (tests/decode_rolling.c checks this on random models).
 *
 * Under a grammar (p->constraint) the AR head's row at each position is
 * masked as AR decoding masks it before the draw, and the grammar advances
 * by each committed token, so the answer is constrained AR decoding's.
 * Drafts are fed only while the grammar takes them from the committed
 * state: a draft it refuses cannot equal the masked draw, so cutting the
 * call there saves work without changing any answer.
 *
 * With p->logprobs each committed token's log-probabilities come from the
 * AR head's row at its position (before the mask), the row AR decoding
 * reports at that position: the same values as AR decoding's.
 *
 * Drafts for the next call: when every fed draft passed, the masks behind
 * them saw the right prefix: their argmaxes (from the second mask on; the
 * first mask's position is the token just committed) are the new drafts.
 * When a draft failed, the drafts after it were conditioned on a wrong token;
 * the first few of them still pass about half of the time (measured on the
 * demo model), so up to STALE_DRAFTS of them are fed again. Drafts are fed
 * only while the mask head's probability for them exceeds slot_threshold
 * (the plan's rule for starting a slot). With W = slot_size masks per call a
 * call holds at most 1 + (W - 1) + W tokens. The prefill's last chunk is
 * such a call with the last prompt token as its committed token, no drafts
 * and W masks: the first drafts come with the first answer token. */
#include <stdlib.h>
#include <string.h>

#include "decode/constraint.h"
#include "decode/decode_impl.h"
#include "decode/rolling_step.h"
#include "model/forward.h"

/* drafts kept after a failed one (demo model, slot 4: 1 -> 2.84 tokens per
 * call, 2 -> 2.88, all -> 2.90 with wider calls) */
enum { STALE_DRAFTS = 2 };

/* Adaptive width (p->draft_adaptive). A call feeding k drafts and w masks
 * yields 1 + (the drafts that pass, in a row) tokens and costs c(1 + k + w),
 * where c(n) is the time of an n-token call over a 1-token call: nearly flat
 * when the weights stream from memory (wide calls are cheap per token),
 * close to n when the model sits in the cache. Each call is sized for the
 * most expected tokens per unit of cost:
 *  - the slot W (masks, hence next call's drafts) maximises the steady rate
 *    T(W) / c(2W), T(W) = 1 + sum_{i<W} prod_{l<=i} p_l, where p_l is the
 *    running rate at which a fresh draft at offset l passes once the ones
 *    before it did; W = 1 is a plain AR call (no masks);
 *  - the drafts fed are cut where (1 + sum_{i<k} prod_{l<=i} q_l) /
 *    c(1 + k + W) peaks, q_l being the pass rate of drafts of that mask
 *    confidence (counted per confidence bin, fresh and stale apart).
 * Rates start from priors worth PRIOR_WEIGHT drafts and follow every draft
 * checked. c comes from p->call_cost (a measured table), else from a line
 * fitted to this decoder's own timed calls. Only the widths change: drafts
 * are still checked exactly as above, so the answer is AR decoding's.
 *
 * A call shared with other sequences (rf_roll_seq_set_load: a scheduler's
 * batched call) is sized for the most tokens of the whole call per its
 * cost: with P other rolling sequences, taken to size their calls as this
 * one does (they decide at the same moment, from the same kind of rates),
 * and other rows feeding B tokens that commit T_o, a call of n tokens
 * expected to commit T is worth ((1 + P) T + T_o) / c((1 + P) n + B) in
 * place of T / c(n). Where the batch already makes the call wide a draft
 * must pass often enough to pay for the width it adds there, so the widths
 * shrink as the batch grows (to plain AR calls when drafts do not pay). */
enum { CONF_BINS = 10, POS_MAX = 32, AR_PROBE = 8 };
#define PRIOR_WEIGHT 2.0
#define PRIOR_POS_PASS 0.7  /* a fresh draft's pass rate before any is seen (demo model: ~0.75) */
#define PRIOR_SLOPE 0.25    /* c(n) = 1 + slope (n - 1) before two widths were timed (demo
                               model, cache-resident: 8 tokens cost 2.84x one) */

typedef struct {
    const float *cost;                         /* p->call_cost, or NULL: the fitted line */
    int n_cost;
    double s0, s1, s2, sy, sxy;                /* timed calls: count, sums of n, n^2, t, n t */
    float bin_try[2][CONF_BINS], bin_pass[2][CONF_BINS]; /* [stale][confidence bin] */
    float pos_try[POS_MAX], pos_pass[POS_MAX]; /* fresh drafts by offset */
    int load_peers;                            /* a shared call: the other rolling sequences in it, */
    int load_n;                                /* the other rows' tokens */
    double load_T;                             /* and the answer tokens those are expected to commit */
    double slot_T;                             /* the tokens the slot chosen for the call being made predicts */
    double gain_pred, gain_real;               /* over its calls: predicted and committed tokens beyond 1 */
    int ar_calls;                              /* plain AR calls in a row */
    int probe;                                 /* 2: a probe call is being sized, 1: the next call feeds its draft */
} width_policy;

static void policy_init(width_policy *w, const rf_params *p) {
    memset(w, 0, sizeof *w);
    w->cost = p->call_cost, w->n_cost = p->call_cost ? p->n_call_cost : 0;
}

static double policy_cost(const width_policy *w, int n) {
    if (w->n_cost >= 2) {
        if (n <= w->n_cost) return w->cost[n - 1];
        /* beyond the table: the mean step of its upper half (one step alone
         * is as noisy as two timings) */
        int h = w->n_cost / 2, last = w->n_cost - 1;
        double slope = (w->cost[last] - w->cost[h - 1]) / (last - (h - 1));
        return w->cost[last] + (slope > 0 ? slope : 0) * (n - w->n_cost);
    }
    if (w->n_cost == 1) return 1.0 + (n - 1) * (double)w->cost[0];
    double slope = PRIOR_SLOPE, den = w->s0 * w->s2 - w->s1 * w->s1;
    if (w->s0 >= 4 && den > 0.5 * w->s0 * w->s0) { /* widths spread over more than ~1 token */
        double b = (w->s0 * w->sxy - w->s1 * w->sy) / den, a = (w->sy - b * w->s1) / w->s0;
        if (a + b > 0) slope = b / (a + b);
        slope = slope < 0.01 ? 0.01 : slope > 1.0 ? 1.0 : slope;
    }
    return 1.0 + slope * (n - 1);
}

static void policy_time(width_policy *w, int n, double secs) {
    if (w->cost) return;
    w->s0 += 1, w->s1 += n, w->s2 += (double)n * n, w->sy += secs, w->sxy += n * secs;
}

static int conf_bin(float c) {
    int b = (int)(c * CONF_BINS);
    return b < 0 ? 0 : b >= CONF_BINS ? CONF_BINS - 1 : b;
}

/* the chance that a draft of mask confidence c passes once the drafts
 * before it did */
static double policy_q(const width_policy *w, float c, int stale) {
    int b = conf_bin(c);
    double prior = (b + 0.5) / CONF_BINS * (stale ? 0.5 : 1.0);
    return (w->bin_pass[stale][b] + PRIOR_WEIGHT * prior) / (w->bin_try[stale][b] + PRIOR_WEIGHT);
}

/* draft i (offset from the first answer position the call decides) was
 * checked by the AR head */
static void policy_seen(width_policy *w, int i, float c, int stale, int pass) {
    int b = conf_bin(c);
    w->bin_try[stale][b] += 1, w->bin_pass[stale][b] += pass;
    if (!stale && i < POS_MAX) w->pos_try[i] += 1, w->pos_pass[i] += pass;
}

/* the worth of a call of n tokens expected to commit T: tokens of the whole
 * call per its cost */
static double policy_worth(const width_policy *w, double T, int n) {
    int k = 1 + w->load_peers;
    return (k * T + w->load_T) / policy_cost(w, k * n + w->load_n);
}

/* T(W) counts every draft as fresh, but after a failed one the next call's
 * drafts are stale and pass less: the calls commit fewer tokens than it
 * predicts (the demo grown to 0.6B, chat answers: 1.55 for a predicted
 * ~1.9). In a shared call that error decides between drafting and plain AR
 * calls, so there the predicted gain is scaled by the one realised so far. */
static double policy_slot_T(const width_policy *w, double T) {
    if (!w->load_peers && !w->load_n) return T;
    double f = (w->gain_real + PRIOR_WEIGHT) / (w->gain_pred + PRIOR_WEIGHT);
    return 1.0 + (f < 1.0 ? f : 1.0) * (T - 1.0);
}

/* the slot (masks) for the next call, 1..Wmax; 1 = a plain AR call */
static int policy_slot(width_policy *w, int Wmax) {
    if (w->probe) return 2;
    double best = policy_worth(w, 1, 1), T = 1, run = 1;
    int W = 1;
    for (int s = 2; s <= Wmax; s++) {
        int i = s - 2 < POS_MAX ? s - 2 : POS_MAX - 1;
        run *= (w->pos_pass[i] + PRIOR_WEIGHT * PRIOR_POS_PASS) / (w->pos_try[i] + PRIOR_WEIGHT);
        T += run;
        double r = policy_worth(w, policy_slot_T(w, T), 2 * s);
        if (r > best) best = r, W = s, w->slot_T = T;
    }
    if (W == 1) w->slot_T = 1;
    /* the rates only move when drafts are checked: a run of AR calls is
     * broken now and then by a probe, a call with a mask whose draft the next
     * call feeds whatever it costs */
    if (W == 1 && Wmax >= 2 && ++w->ar_calls >= AR_PROBE) W = 2, w->probe = 2;
    if (W > 1) w->ar_calls = 0;
    return W;
}

/* how many of the k drafts available to feed with w masks */
static int policy_drafts(width_policy *w, const float *conf, int k, int stale, int masks) {
    if (w->probe && --w->probe == 0) return k; /* the probe's draft */
    double best = policy_worth(w, 1, 1 + masks), T = 1, run = 1;
    int kb = 0;
    for (int i = 0; i < k; i++) {
        run *= policy_q(w, conf[i], stale);
        T += run;
        double r = policy_worth(w, T, 2 + i + masks);
        if (r > best) best = r, kb = i + 1;
    }
    return kb;
}

/* ---- the rolling slot one call at a time (rolling_step.h) ---- */
struct rf_roll_seq {
    const rf_model *m;
    rf_params p;
    const int *prompt;
    int n_prompt, V, G, eos, mask, W;
    int cap;               /* tokens one call may hold */
    rf_kvcache kv;
    rf_rng rng;
    rf_answer ans;
    rf_step *st;           /* the statistics of the call being made */
    width_policy pol;
    int *tok, *pos;        /* [cap] the next slot call */
    /* drafts for answer positions n_ans, n_ans + 1, ...; fresh: made by
     * masks that saw only accepted tokens */
    int *draft, nd, fresh; /* [2W] */
    float *conf;           /* [2W] */
    int *ap;               /* [2W] answer positions of an event */
    int fed;               /* prompt tokens in the cache */
    int n_ans, done, step;
    int k, w, base;        /* the slot call: drafts, masks, cache length before it */
    int stale;             /* its drafts follow a failed one */
    int n_call;            /* its tokens, 1 + k + w */
    int last_n;            /* tokens handed out by the last rf_roll_seq_next */
    int pre_w;             /* masks after the prompt's last chunk (that call's w) */
    rf_constraint_run *cr; /* p->constraint's run, NULL without one */
    float *masked;         /* [V] the row the constraint masks */
    char *error;           /* why the answer stopped (the constraint failed), NULL if it did not */
    double t0;             /* when they were */
};

rf_roll_seq *rf_roll_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p) {
    return rf_roll_seq_new_reusing(m, prompt, n_prompt, p, NULL, 0);
}

rf_roll_seq *rf_roll_seq_new_reusing(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                                     const rf_kvcache *src, int n_reuse) {
    if (rf_gen_check(m, prompt, n_prompt, p, 1)) return NULL;
    n_reuse = rf_kv_reusable(src, n_reuse, n_prompt);
    rf_roll_seq *q = rf_scoped_calloc(1, sizeof *q);
    q->m = m;
    q->p = *p;
    q->prompt = prompt, q->n_prompt = n_prompt;
    q->V = m->cfg.vocab_size, q->G = p->gen_length, q->eos = gen_eos_id(m, p), q->mask = gen_mask_id(m, p);
    q->W = p->slot_size;
    const int W = q->W, chunk = n_prompt < 256 ? n_prompt : 256;
    q->cap = chunk + W > 2 * W ? chunk + W : 2 * W;
    rf_workspace_kv_init(p->ws, &q->kv, &m->cfg, n_prompt + q->G);
    q->tok = rf_scoped_malloc((size_t)q->cap * sizeof(int)), q->pos = rf_scoped_malloc((size_t)q->cap * sizeof(int));
    q->draft = rf_scoped_malloc((size_t)2 * W * sizeof(int));
    q->conf = rf_scoped_malloc((size_t)2 * W * sizeof(float));
    q->ap = rf_scoped_malloc((size_t)2 * W * sizeof(int));
    if (p->constraint) {
        if (!(q->cr = rf_constraint_run_new(p->constraint, q->eos, q->V))) {
            rf_kv_free(&q->kv);
            rf_scoped_free(q->tok), rf_scoped_free(q->pos), rf_scoped_free(q->draft), rf_scoped_free(q->conf),
                rf_scoped_free(q->ap), rf_scoped_free(q);
            return NULL;
        }
        q->masked = rf_scoped_malloc((size_t)q->V * sizeof(float));
    }
    policy_init(&q->pol, p);
    rf_rng_seed(&q->rng, p->seed);
    ans_init(&q->ans, &q->p, q->G, q->eos);
    /* the prefill is the first call (one step, as gen_prefill counts it):
     * the last prompt token's logits give the first answer token, and the
     * masks after the prompt's last chunk (rf_roll_seq_next) the first
     * drafts */
    q->st = ans_step(&q->ans, 0);
    /* a reused prefix: its entries as a prefill would have computed them
     * (the same tokens at the same positions 0..n_reuse-1) */
    if (n_reuse > 0) rf_kv_copy_prefix(&q->kv, src, n_reuse);
    q->fed = n_reuse;
    return q;
}

int rf_roll_seq_take_cache(rf_roll_seq *q, rf_kvcache *kv, int **ids) {
    /* the cache holds the prompt and every committed token but the last
     * (fed by the call that would follow) in order, then whatever the last
     * call fed after its passed drafts */
    int n = q->n_prompt + q->n_ans - 1;
    if (q->fed < q->n_prompt || n > q->kv.len) n = q->fed < q->kv.len ? q->fed : q->kv.len;
    int *t = rf_malloc(((size_t)n + 1) * sizeof *t);
    int np = n < q->n_prompt ? n : q->n_prompt;
    memcpy(t, q->prompt, (size_t)np * sizeof *t);
    if (n > np) memcpy(t + np, q->ans.tok, (size_t)(n - np) * sizeof *t);
    rf_kv_crop(&q->kv, n);
    *kv = q->kv;
    memset(&q->kv, 0, sizeof q->kv);
    *ids = t;
    return n;
}

int rf_roll_seq_width(const rf_roll_seq *q) { return q->cap; }

/* the next call's slot: W, or the adaptive policy's width */
static int next_slot(rf_roll_seq *q) { return q->p.draft_adaptive ? policy_slot(&q->pol, q->W) : q->W; }

/* the masks a slot of Wc feeds: an adaptive width of 1 is a plain AR call
 * (one mask would draft nothing) */
static int slot_masks(const rf_roll_seq *q, int Wc) { return q->p.draft_adaptive && Wc == 1 ? 0 : Wc; }

rf_kvcache *rf_roll_seq_kv(rf_roll_seq *q) { return &q->kv; }

int rf_roll_seq_done(const rf_roll_seq *q) { return q->done; }

int rf_roll_seq_next(rf_roll_seq *q, int budget, const int **tokens, const int **pos, int *n_logits) {
    q->last_n = 0;
    *n_logits = 0;
    if (q->done || budget < 1) return 0;
    if (gen_cancelled(&q->p)) return -1;
    if (q->fed < q->n_prompt) { /* the prompt in chunks of up to 256 tokens */
        int n = q->n_prompt - q->fed;
        if (n > 256) n = 256;
        if (n > budget) n = budget;
        for (int i = 0; i < n; i++) q->pos[i] = q->fed + i;
        *tokens = q->prompt + q->fed, *pos = q->pos;
        *n_logits = q->fed + n == q->n_prompt;
        /* the last chunk plans the first slot too: masks after the prompt,
         * where a call whose drafts all passed has them (the first at the
         * answer position the last prompt token's logits decide). Without
         * them the first decoding call fed no drafts and committed one
         * token; the masks cost a prefill less than that call (the demo
         * grown to the 0.6B shape, Q8_0: the 300 test answers in 3,724 calls
         * instead of 3,993, 2.32x AR's speed instead of 2.23x) */
        q->pre_w = 0;
        if (*n_logits) {
            int wn = slot_masks(q, next_slot(q));
            q->pol.slot_T = 1; /* this call commits one token, whatever its masks */
            if (wn > q->G) wn = q->G;
            if (wn > 0 && n + wn <= budget && n + wn <= q->cap) {
                memcpy(q->tok, q->prompt + q->fed, (size_t)n * sizeof(int));
                for (int i = 0; i < wn; i++) q->tok[n + i] = q->mask, q->pos[n + i] = q->fed + n + i;
                *tokens = q->tok, *n_logits = 1 + wn;
                q->pre_w = wn;
                return q->last_n = n + wn;
            }
        }
        return q->last_n = n;
    }
    *tokens = q->tok, *pos = q->pos, *n_logits = q->n_call;
    q->t0 = rf_now();
    return q->last_n = q->n_call;
}

/* The call's logits are in: commit what the AR head decides, and prepare
 * the next call. */
static void roll_commit(rf_roll_seq *q, const float *logits) {
    const rf_params *p = &q->p;
    const int V = q->V, G = q->G, eos = q->eos, k = q->k, w = q->w;
    rf_answer *ans = &q->ans;
    int *draft = q->draft, *ap = q->ap;
    float *conf = q->conf;
    /* the AR head's token at each draft's position, drawn as AR decoding
     * draws it; drafts pass while they match. The first mismatch (or, with
     * every draft passed, the position after them) gets the drawn token. */
    int j = 0, a0 = q->n_ans;
    for (;;) {
        const float *row = logits + (size_t)j * V;
        if (q->cr) { /* the grammar's mask on a copy of the row */
            memcpy(q->masked, row, (size_t)V * sizeof(float));
            row = q->masked;
            if (rf_constraint_run_mask(q->cr, q->masked)) break;
        }
        int t = rf_sample_token(row, V, p, q->prompt, q->n_prompt, ans->tok, q->n_ans, &q->rng);
        if (q->cr && rf_constraint_run_accept(q->cr, t)) break;
        int pass = j < k && draft[j] == t;
        if (j < k && p->draft_adaptive) policy_seen(&q->pol, j, conf[j], q->stale, pass);
        ans_logprob(ans, q->n_ans, logits + (size_t)j * V, V, t); /* the model's row, as AR's */
        ans_fill(ans, q->n_ans, t);
        ans_count_how(ans, pass ? HOW_VERIFIED : HOW_FORCED_AR);
        q->n_ans++;
        if (t == eos || q->n_ans >= G) q->done = 1;
        if (!pass || q->done) break;
        j++;
    }
    if (q->cr && !q->done && q->n_ans - a0 == j) { /* the grammar failed (bounds) before the position's draw */
        q->error = rf_strdup(rf_last_error()), q->done = 1;
    }
    int n_new = q->n_ans - a0;
    q->st->tokens = n_new, q->st->tpf_ref = n_new;
    if (p->draft_adaptive && q->pol.slot_T > 1) /* a call sized by a slot of drafts */
        q->pol.gain_pred += q->pol.slot_T - 1, q->pol.gain_real += n_new - 1;
    if (p->on_event) {
        for (int i = 0; i < n_new; i++) ap[i] = a0 + i;
        ans_event(ans, RF_EVENT_INFILL_COMMIT, q->step, n_new, ap, ans->tok + a0, NULL);
    }
    q->step++;
    ans_flush(ans);
    if (q->done) return;
    /* keep the fed token and the passed drafts (j of them: the last
     * committed token is fed by the next call) */
    rf_kv_crop(&q->kv, q->base + 1 + j);
    /* next drafts, for answer positions n_ans.. */
    int nn = 0;
    if (j < k) /* stale: the drafts after the failed one, then the masks' */
        for (int i = j + 1; i < k; i++) draft[nn] = draft[i], conf[nn++] = conf[i];
    /* the masks' drafts: two passes over the vocabulary per row, the rows
     * shared among the threads (one thread took ~3% of a 0.6B-shape decode
     * over them while the others waited) */
    const int i0 = j < k ? 0 : 1, n0 = nn;
#pragma omp parallel for schedule(static) if ((size_t)(w - i0) * V >= (1u << 18))
    for (int i = i0; i < w; i++) {
        const float *l = logits + (size_t)(1 + k + i) * V;
        rf_logit_stats s = rf_logits_stats(l, V);
        draft[n0 + i - i0] = s.argmax, conf[n0 + i - i0] = (float)rf_logit_prob(l, &s, s.argmax);
    }
    if (w > i0) nn += w - i0;
    q->nd = nn, q->fresh = j == k;

    q->st = ans_step(ans, 0);
    /* feed: the last committed token, the drafts for the next answer
     * positions (while confident; fewer when stale), W masks; nothing past
     * the answer's end */
    int room = G - q->n_ans, Wc = next_slot(q);
    int kn = q->nd < Wc - 1 ? q->nd : Wc - 1;
    if (!q->fresh && kn > STALE_DRAFTS) kn = STALE_DRAFTS;
    if (kn > room) kn = room;
    if (q->cr && kn > 0) kn = rf_constraint_run_prefix(q->cr, draft, kn);
    for (int i = 0; i < kn; i++)
        if (!(conf[i] > p->slot_threshold)) {
            kn = i;
            break;
        }
    Wc = slot_masks(q, Wc);
    int wn = room - kn < Wc ? room - kn : Wc;
    q->base = q->kv.len;
    if (p->draft_adaptive) kn = policy_drafts(&q->pol, conf, kn, !q->fresh, wn);
    q->stale = !q->fresh;
    q->k = kn, q->w = wn;
    int n = q->n_call = 1 + kn + wn;
    q->tok[0] = ans->tok[q->n_ans - 1];
    memcpy(q->tok + 1, draft, (size_t)kn * sizeof(int));
    for (int i = 0; i < wn; i++) q->tok[1 + kn + i] = q->mask;
    for (int i = 0; i < n; i++) q->pos[i] = q->n_prompt + q->n_ans - 1 + i;
    if (p->on_event) {
        for (int i = 0; i < kn; i++) ap[i] = q->n_ans + i;
        ans_event(ans, RF_EVENT_PLAN, q->step, kn, ap, draft, NULL);
    }
}

void rf_roll_seq_set_load(rf_roll_seq *q, int peers, int tokens, double commits) {
    q->pol.load_peers = peers > 0 ? peers : 0;
    q->pol.load_n = tokens > 0 ? tokens : 0;
    q->pol.load_T = commits > 0 ? commits : 0;
}

int rf_roll_seq_after(rf_roll_seq *q, const float *logits) {
    int n = q->last_n;
    q->last_n = 0;
    if (q->done || n < 1) return q->done;
    if (q->fed < q->n_prompt) {
        q->fed += n - q->pre_w;
        if (q->fed < q->n_prompt) return 0;
        /* the prefill's last chunk: as if the last prompt token were fed
         * with no drafts and pre_w masks (cropped with the call's rest) */
        q->k = 0, q->w = q->pre_w, q->base = q->kv.len - 1 - q->pre_w, q->stale = 0;
    } else if (q->p.draft_adaptive) {
        policy_time(&q->pol, (1 + q->pol.load_peers) * n + q->pol.load_n, rf_now() - q->t0); /* the whole call's */
    }
    q->ans.n_calls++;
    q->st->calls++;
    roll_commit(q, logits);
    return q->done;
}

static void roll_release(rf_roll_seq *q) {
    rf_constraint_run_free(q->cr);
    if (q->masked) rf_scoped_free(q->masked);
    free(q->error);
    rf_scoped_free(q->tok), rf_scoped_free(q->pos), rf_scoped_free(q->draft), rf_scoped_free(q->conf),
        rf_scoped_free(q->ap);
    rf_kv_free(&q->kv);
    rf_scoped_free(q);
}

int rf_roll_seq_finish(rf_roll_seq *q, rf_gen_result *out) {
    int rc;
    if (q->error) {
        rf_set_error("%s", q->error);
        memset(out, 0, sizeof *out);
        rc = ans_end(&q->ans, -1, q->n_prompt, out);
    } else rc = ans_finish(&q->ans, q->n_prompt, out);
    roll_release(q);
    return rc;
}

void rf_roll_seq_free(rf_roll_seq *q) {
    if (!q) return;
    ans_free(&q->ans);
    roll_release(q);
}

/* The rolling slot alone: its calls one after the other, on p->ws's run
 * state. */
int rf_generate_rolling(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                        rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    rf_roll_seq *q = rf_roll_seq_new(m, prompt, n_prompt, p);
    if (!q) return -1;
    const int V = m->cfg.vocab_size, cap = rf_roll_seq_width(q);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, cap, n_prompt + p->gen_length);
    float *logits = rf_scoped_malloc((size_t)cap * V * sizeof(float));
    int *lidx = rf_scoped_malloc((size_t)cap * sizeof(int));
    int rc = 0;
    while (!rf_roll_seq_done(q)) {
        const int *tok, *pos;
        int nl, n = rf_roll_seq_next(q, cap, &tok, &pos, &nl);
        if (n < 1) {
            rc = -1;
            break;
        }
        for (int i = 0; i < nl; i++) lidx[i] = n - nl + i;
        rf_batch b = {1, n, tok, pos, 0, nl, lidx, logits};
        if ((rc = rf_forward(m, rf_roll_seq_kv(q), rs, &b))) break;
        rf_roll_seq_after(q, logits);
    }
    rf_scoped_free(logits), rf_scoped_free(lidx);
    rf_workspace_runstate_free(p->ws, rs);
    if (rc) {
        rf_roll_seq_free(q);
        return -1;
    }
    return rf_roll_seq_finish(q, out);
}
