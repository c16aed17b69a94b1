/* mdm.c - LLaDA-style masked-diffusion decoding (see mdm.h).
 *
 * What LLaDA's generate does, in our words: x = prompt followed by
 * gen_length masks. For each block (left to right), for each of its steps:
 * run the model on all of x; x0 = argmax of (Gumbel-noised, with
 * temperature) logits; p = softmax probability of x0 under the plain logits;
 * confidence = p at the still-masked positions of the current block, -inf
 * everywhere else (earlier blocks are full, later blocks wait); unmask the k
 * positions of highest confidence with their x0. Nothing is ever re-masked.
 *
 * Differences, all of which leave the answer unchanged:
 *  - logits are computed only at the current block's masked positions (the
 *    only ones whose values are used);
 *  - the optional early stop ends as soon as the answer up to its first EOS
 *    is complete (later positions are cut off anyway);
 *  - a block never gets more steps than it has tokens (LLaDA would spend a
 *    model call unmasking nothing).
 * One difference that can change an answer: the mask token itself is never
 * drafted (LLaDA could draft it, leaving the position masked after the
 * schedule ends; a trained model gives it ~0 probability anyway).
 * Blocks: with gen_length not a multiple of n_blocks the last block takes
 * the remainder (LLaDA requires a multiple).
 *
 * Under a grammar (p->constraint) only the answer's frontier can be checked,
 * so a step unmasks in position order instead of by confidence: the first
 * masked position's token is drawn from its row with the grammar's mask,
 * then each next position's draft is taken while the grammar takes it, up
 * to the step's k. A block keeps stepping until it is full (a step unmasks
 * at least one token), and the answer ends at its EOS.
 *
 * The decoder is a step machine (decode/step.h, the rf_mdm_seq functions of
 * mdm.h): each step hands out its one call (the whole sequence,
 * bidirectional, logits at the block's masked positions) and rf_mdm_seq_after
 * unmasks from its logits; rf_generate_mdm drives it alone, the server's
 * scheduler beside other generations. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/constraint.h"
#include "decode/decode_impl.h"
#include "decode/mdm.h"
#include "model/forward.h"

void rf_mdm_params_default(rf_mdm_params *mp, const rf_params *p) {
    mp->steps = p->gen_length;
    mp->early_stop = 1;
}

void rf_mdm_schedule(int n, int s, int *out) {
    for (int i = 0; i < s; i++) out[i] = n / s + (i < n % s);
}

struct rf_mdm_seq {
    const rf_model *m;
    rf_params p;      /* the caller's, copied */
    rf_mdm_params mp;
    int G, P, T, V, mask;
    int *first, nb;       /* blocks of whole positions: block b = [first[b], first[b+1]) */
    int max_len;          /* the longest block */
    int *tokens, *pos;    /* [T] x: the prompt, then the answer region; plain positions 0..T-1 */
    int *idx, n;          /* [max_len] this step's masked positions of the block (logits rows), their count */
    int *draft, *order, *sched; /* [max_len] */
    double *conf;         /* [max_len] */
    float *row;           /* [V] a logits row with the mask token taken out */
    rf_kvcache cache;     /* only the call's own entries: dropped after every call */
    rf_rng rng;
    rf_constraint_run *cr; /* p.constraint's run, NULL without one */
    char *error;           /* why the answer stopped (the constraint failed), NULL if it did not */
    rf_answer a;
    int b, st, sb;        /* the block, its step, its steps */
    int handed, done;
};

/* The next step's masked positions: the block's still-masked ones. */
static void step_positions(rf_mdm_seq *q) {
    const int b0 = q->first[q->b], len = q->first[q->b + 1] - b0;
    q->n = 0;
    for (int i = b0; i < b0 + len; i++)
        if (q->a.tok[i] < 0) q->idx[q->n++] = q->P + i;
}

/* Block b's schedule: its share of the steps (never more than its tokens). */
static void block_begin(rf_mdm_seq *q) {
    const int len = q->first[q->b + 1] - q->first[q->b];
    q->sb = q->mp.steps / q->nb + (q->b < q->mp.steps % q->nb);
    if (q->sb > len) q->sb = len;
    rf_mdm_schedule(len, q->sb, q->sched);
    q->st = 0;
}

void rf_mdm_params_of(const rf_params *p, const rf_mdm_params *mp, rf_mdm_params *out) {
    if (mp) {
        *out = *mp;
        return;
    }
    rf_mdm_params_default(out, p);
    if (p->mdm_steps > 0) out->steps = p->mdm_steps;
}

rf_mdm_seq *rf_mdm_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                           const rf_mdm_params *mp) {
    /* the shared checks, with the slot settings that do not apply neutralised:
     * one-token "slots" make the padded length gen_length itself */
    rf_params c = *p;
    c.slot_size = 1;
    c.slot_threshold = c.token_threshold = 0.0f;
    if (rf_gen_check(m, prompt, n_prompt, &c, 0)) return NULL;
    rf_mdm_params own;
    rf_mdm_params_of(p, mp, &own);
    const int G = p->gen_length;
    int *first = rf_scoped_malloc((size_t)(G + 2) * sizeof(int));
    const int nb = rf_block_layout(G, p->n_blocks, first);
    if (own.steps < nb) {
        rf_set_error("mdm: steps (%d) must be at least the number of blocks (%d)", own.steps, nb);
        rf_scoped_free(first);
        return NULL;
    }
    rf_mdm_seq *q = rf_scoped_calloc(1, sizeof *q);
    q->m = m, q->p = *p, q->mp = own;
    q->G = G, q->P = n_prompt, q->T = n_prompt + G, q->V = m->cfg.vocab_size, q->mask = gen_mask_id(m, p);
    q->first = first, q->nb = nb;
    for (int b = 0; b < nb; b++)
        if (first[b + 1] - first[b] > q->max_len) q->max_len = first[b + 1] - first[b];
    ans_init(&q->a, &q->p, G, gen_eos_id(m, p));
    /* at most one step per token (a grammar may need more than own.steps) */
    ans_reserve_steps(&q->a, own.steps < G && !p->constraint ? own.steps : G);
    q->tokens = rf_scoped_malloc((size_t)q->T * sizeof(int));
    q->pos = rf_scoped_malloc((size_t)q->T * sizeof(int));
    for (int i = 0; i < q->T; i++) {
        q->tokens[i] = i < q->P ? prompt[i] : q->mask;
        q->pos[i] = i;
    }
    const size_t ml = (size_t)q->max_len;
    q->idx = rf_scoped_malloc(ml * sizeof(int)), q->draft = rf_scoped_malloc(ml * sizeof(int));
    q->order = rf_scoped_malloc(ml * sizeof(int)), q->sched = rf_scoped_malloc(ml * sizeof(int));
    q->conf = rf_scoped_malloc(ml * sizeof(double));
    q->row = rf_scoped_malloc((size_t)q->V * sizeof(float));
    rf_workspace_kv_init(p->ws, &q->cache, &m->cfg, q->T);
    rf_rng_seed(&q->rng, p->seed);
    if (p->constraint && !(q->cr = rf_constraint_run_new(p->constraint, gen_eos_id(m, p), q->V))) {
        rf_mdm_seq_free(q);
        return NULL;
    }
    block_begin(q);
    step_positions(q);
    return q;
}

int rf_mdm_seq_width(const rf_mdm_seq *q) { return q->T; }

int rf_mdm_seq_logits(const rf_mdm_seq *q) { return q->max_len; }

int rf_mdm_seq_next(rf_mdm_seq *q, int budget, rf_step_call *c) {
    q->handed = 0;
    if (q->done || budget < 1) return 0;
    if (gen_cancelled(&q->p)) return -1;
    /* full recompute, bidirectional: no cache survives from the last step */
    c->kv = &q->cache;
    c->b = (rf_batch){1, q->T, q->tokens, q->pos, 1, q->n, q->idx, NULL};
    return q->handed = q->T;
}

/* A position's draft from its logits row (the mask token taken out): the
 * argmax, or the Gumbel draw with temperature; its probability to *conf. */
static int draft_of(rf_mdm_seq *q, const float *logits, double *conf) {
    float *l = q->row;
    memcpy(l, logits, (size_t)q->V * sizeof(float));
    l[q->mask] = -INFINITY; /* a mask is never an answer token */
    rf_logit_stats ls = rf_logits_stats(l, q->V);
    int t = q->p.temperature > 0.0f ? rf_gumbel_argmax(l, q->V, q->p.temperature, ls.max, &q->rng) : ls.argmax;
    if (conf) *conf = rf_logit_prob(l, &ls, t);
    return t;
}

/* Under a grammar: the first masked position's token from its row with
 * the grammar's mask, then the next positions' drafts while the grammar
 * takes them, k at most, in position order. Returns how many, 0 when the
 * grammar failed (q->error). */
static int unmask_in_order(rf_mdm_seq *q, const float *logits, int k) {
    const int V = q->V;
    int *draft = q->draft;
    float *l = q->row;
    memcpy(l, logits, (size_t)V * sizeof(float));
    l[q->mask] = -INFINITY;
    if (rf_constraint_run_mask(q->cr, l)) goto failed;
    rf_logit_stats ls = rf_logits_stats(l, V);
    draft[0] = q->p.temperature > 0.0f ? rf_gumbel_argmax(l, V, q->p.temperature, ls.max, &q->rng) : ls.argmax;
    int m = 0;
    for (;;) {
        if (rf_constraint_run_accept(q->cr, draft[m])) goto failed;
        if (draft[m++] == gen_eos_id(q->m, &q->p) || m == k) return m;
        draft[m] = draft_of(q, logits + (size_t)m * V, NULL);
        if (rf_constraint_run_prefix(q->cr, &draft[m], 1) < 1) return m;
    }
failed:
    q->error = rf_strdup(rf_last_error());
    return 0;
}

/* Unmask the k most confident drafts of the step from its logits (under a
 * grammar: unmask_in_order). */
static void unmask(rf_mdm_seq *q, const float *logits) {
    const int n = q->n, P = q->P;
    int *draft = q->draft, *order = q->order;
    double *conf = q->conf;
    q->a.n_calls++;
    rf_step *ss = ans_step(&q->a, q->b);
    ss->calls = 1;
    int k = q->st < q->sb && q->sched[q->st] < n ? q->sched[q->st] : n;
    if (q->cr) {
        k = unmask_in_order(q, logits, k);
        for (int j = 0; j < k; j++) {
            q->tokens[q->idx[j]] = draft[j];
            ans_logprob(&q->a, q->idx[j] - P, logits + (size_t)j * q->V, q->V, draft[j]);
            ans_fill(&q->a, q->idx[j] - P, draft[j]);
        }
        ss->tpf_ref = (double)k;
        ans_flush(&q->a);
        return;
    }
    for (int j = 0; j < n; j++) {
        draft[j] = draft_of(q, logits + (size_t)j * q->V, &conf[j]);
        order[j] = j;
    }
    /* the k most confident, ties to the earlier position: a partial
     * selection sort, k <= n is small */
    for (int i = 0; i < k; i++) {
        int best = i;
        for (int j = i + 1; j < n; j++)
            if (conf[order[j]] > conf[order[best]] || (conf[order[j]] == conf[order[best]] && order[j] < order[best]))
                best = j;
        int t = order[i];
        order[i] = order[best];
        order[best] = t;
    }
    for (int i = 0; i < k; i++) {
        int j = order[i];
        q->tokens[q->idx[j]] = draft[j];
        ans_logprob(&q->a, q->idx[j] - P, logits + (size_t)j * q->V, q->V, draft[j]);
        ans_fill(&q->a, q->idx[j] - P, draft[j]);
    }
    ss->tpf_ref = (double)k; /* tokens unmasked per model call */
    ans_flush(&q->a);
}

int rf_mdm_seq_after(rf_mdm_seq *q, const float *logits) {
    if (!q->handed || q->done) {
        q->handed = 0;
        rf_set_error("mdm: logits given with no call handed out");
        return -1;
    }
    q->handed = 0;
    unmask(q, logits);
    rf_kv_crop(&q->cache, 0);
    if (q->error) return q->done = 1;
    if ((q->mp.early_stop || q->cr) && q->a.stopped) return q->done = 1;
    q->st++;
    if (q->cr) step_positions(q); /* a grammar's block ends when it is full */
    if (q->cr ? q->n == 0 : q->st == q->sb) {
        if (++q->b == q->nb) return q->done = 1;
        block_begin(q);
    }
    step_positions(q);
    return 0;
}

int rf_mdm_seq_done(const rf_mdm_seq *q) { return q->done; }

void rf_mdm_seq_free(rf_mdm_seq *q) {
    if (!q) return;
    ans_free(&q->a);
    rf_kv_free(&q->cache);
    rf_constraint_run_free(q->cr);
    free(q->error);
    rf_scoped_free(q->first), rf_scoped_free(q->tokens), rf_scoped_free(q->pos), rf_scoped_free(q->idx);
    rf_scoped_free(q->draft), rf_scoped_free(q->order), rf_scoped_free(q->sched), rf_scoped_free(q->conf);
    rf_scoped_free(q->row);
    rf_scoped_free(q);
}

int rf_mdm_seq_finish(rf_mdm_seq *q, rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    int rc = q->done && !q->error ? 0 : -1;
    if (q->error) rf_set_error("%s", q->error);
    else if (rc) rf_set_error("mdm: finished before its answer was complete");
    rc = ans_end(&q->a, rc, q->P, out); /* q->a is freed (and zeroed) either way */
    rf_mdm_seq_free(q);
    return rc;
}

int rf_generate_mdm(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                    const rf_mdm_params *mp, rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    rf_mdm_seq *q = rf_mdm_seq_new(m, prompt, n_prompt, p, mp);
    if (!q) return -1;
    const int T = rf_mdm_seq_width(q);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, T, T);
    float *logits = rf_scoped_malloc((size_t)rf_mdm_seq_logits(q) * m->cfg.vocab_size * sizeof(float));
    int rc = 0;
    while (!rc && !rf_mdm_seq_done(q)) {
        rf_step_call c;
        if (rf_mdm_seq_next(q, T, &c) < 1) {
            rc = -1;
            break;
        }
        c.b.logits = logits;
        if ((rc = rf_forward(m, c.kv, rs, &c.b))) break;
        rc = rf_mdm_seq_after(q, logits) < 0 ? -1 : 0;
    }
    rf_scoped_free(logits);
    rf_workspace_runstate_free(p->ws, rs);
    if (rc) {
        rf_mdm_seq_free(q);
        return -1;
    }
    return rf_mdm_seq_finish(q, out);
}
