/* ar_step.c - AR decoding (ar.c) as a step machine driven one model call
 * at a time from outside: rf_generate_ar drives it alone with its own calls,
 * a scheduler runs the calls of many sequences as rows of one forward call
 * (rf_forward_seqs) so that the weights are read once for all of them.
 *
 * The prompt is prefilled in chunks (one model call in the statistics), the
 * last prompt token's logits give the first answer token, then each call
 * feeds the token just drawn; the draws are rf_sample_token's with one RNG
 * seeded with p->seed. Only who makes the model calls differs between the
 * drivers, so the answer is the same as long as a row's numbers do not
 * depend on the other rows of its call (forward.c computes every token's
 * matmul rows and attention on their own). */
#include <stdlib.h>
#include <string.h>

#include "decode/ar_step.h"
#include "decode/constraint.h"
#include "decode/decode_impl.h"

enum { PREFILL_CHUNK = 256 }; /* the widest prompt chunk (ar.c sizes its run state by it) */

struct rf_ar_seq {
    const rf_model *m;
    rf_params p;
    int *prompt, n_prompt;
    int V, G, eos;
    rf_kvcache kv;
    rf_rng rng;
    rf_answer ans;
    rf_step *st;
    int fed;        /* prompt tokens in the cache */
    int n_ans;      /* answer tokens drawn */
    int done;
    int feed_tok, feed_pos; /* the next decode call's token */
    int last_n;     /* tokens handed out by the last rf_ar_seq_next */
    rf_constraint_run *cr; /* p.constraint's run, NULL without one */
    float *masked;  /* [V] the row the constraint masks */
    char *error;    /* why the answer stopped (the constraint failed), NULL if it did not */
};

rf_ar_seq *rf_ar_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p) {
    return rf_ar_seq_new_reusing(m, prompt, n_prompt, p, NULL, 0);
}

rf_ar_seq *rf_ar_seq_new_reusing(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                                 const rf_kvcache *src, int n_reuse) {
    if (rf_gen_check(m, prompt, n_prompt, p, 1)) return NULL;
    n_reuse = rf_kv_reusable(src, n_reuse, n_prompt);
    rf_ar_seq *q = rf_scoped_calloc(1, sizeof *q);
    q->m = m;
    q->p = *p;
    q->n_prompt = n_prompt;
    q->prompt = rf_scoped_malloc((size_t)n_prompt * sizeof(int));
    memcpy(q->prompt, prompt, (size_t)n_prompt * sizeof(int));
    q->V = m->cfg.vocab_size, q->G = p->gen_length, q->eos = gen_eos_id(m, p);
    rf_workspace_kv_init(p->ws, &q->kv, &m->cfg, n_prompt + q->G);
    rf_rng_seed(&q->rng, p->seed);
    ans_init(&q->ans, &q->p, q->G, q->eos);
    if (p->constraint) {
        if (!(q->cr = rf_constraint_run_new(p->constraint, q->eos, q->V))) {
            ans_free(&q->ans);
            rf_scoped_free(q->prompt), rf_scoped_free(q);
            return NULL;
        }
        q->masked = rf_scoped_malloc((size_t)q->V * sizeof(float));
    }
    q->st = ans_step(&q->ans, 0); /* the prefill's step, as gen_prefill opens it */
    /* a reused prefix: its entries as a prefill would have computed them
     * (the same tokens at the same positions 0..n_reuse-1) */
    if (n_reuse > 0) rf_kv_copy_prefix(&q->kv, src, n_reuse);
    q->fed = n_reuse;
    return q;
}

int rf_ar_seq_take_cache(rf_ar_seq *q, rf_kvcache *kv, int **ids) {
    int n = q->kv.len;
    if (n > q->n_prompt + q->n_ans) n = q->n_prompt + q->n_ans; /* cannot happen: every entry was fed */
    int *t = rf_malloc(((size_t)n + 1) * sizeof *t);
    int np = n < q->n_prompt ? n : q->n_prompt;
    memcpy(t, q->prompt, (size_t)np * sizeof *t);
    if (n > np) memcpy(t + np, q->ans.tok, (size_t)(n - np) * sizeof *t);
    *kv = q->kv;
    kv->len = n;
    memset(&q->kv, 0, sizeof q->kv);
    *ids = t;
    return n;
}

int rf_ar_seq_next(rf_ar_seq *q, int budget, const int **tokens, const int **pos, int *pos_buf) {
    q->last_n = 0;
    if (q->done || budget < 1) return 0;
    if (gen_cancelled(&q->p)) return -1;
    if (q->fed < q->n_prompt) {
        int n = q->n_prompt - q->fed;
        if (n > PREFILL_CHUNK) n = PREFILL_CHUNK;
        if (n > budget) n = budget;
        for (int i = 0; i < n; i++) pos_buf[i] = q->fed + i;
        *tokens = q->prompt + q->fed;
        *pos = pos_buf;
        return q->last_n = n;
    }
    *tokens = &q->feed_tok;
    *pos = &q->feed_pos;
    return q->last_n = 1;
}

int rf_ar_seq_wants_logits(const rf_ar_seq *q) {
    return q->fed < q->n_prompt ? q->fed + q->last_n == q->n_prompt : 1;
}

rf_kvcache *rf_ar_seq_kv(rf_ar_seq *q) { return &q->kv; }

/* Draw answer token n_ans from logits. */
static void draw(rf_ar_seq *q, const float *logits) {
    int i = q->n_ans;
    const float *raw = logits; /* the model's row: the log-probabilities' */
    if (q->cr) { /* the grammar's mask on a copy of the row */
        memcpy(q->masked, logits, (size_t)q->V * sizeof(float));
        logits = q->masked;
        if (rf_constraint_run_mask(q->cr, q->masked)) {
            q->error = rf_strdup(rf_last_error()), q->done = 1;
            return;
        }
    }
    int t = rf_sample_token(logits, q->V, &q->p, q->prompt, q->n_prompt, q->ans.tok, i, &q->rng);
    if (q->cr && rf_constraint_run_accept(q->cr, t)) {
        q->error = rf_strdup(rf_last_error()), q->done = 1;
        return;
    }
    ans_logprob(&q->ans, i, raw, q->V, t);
    ans_fill(&q->ans, i, t);
    q->st->tpf_ref = 1.0;
    ans_event(&q->ans, RF_EVENT_AR_TOKEN, i, 1, &i, &t, NULL);
    ans_flush(&q->ans);
    q->n_ans++;
    if (t == q->eos || q->n_ans == q->G) {
        q->done = 1;
        return;
    }
    q->st = ans_step(&q->ans, 0);
    q->feed_tok = t, q->feed_pos = q->n_prompt + i;
}

int rf_ar_seq_after(rf_ar_seq *q, const float *logits) {
    if (q->fed < q->n_prompt) {
        q->fed += q->last_n;
        q->last_n = 0;
        if (q->fed < q->n_prompt) return 0;
    }
    q->ans.n_calls++;
    q->st->calls++;
    q->last_n = 0;
    draw(q, logits);
    return q->done;
}

int rf_ar_seq_done(const rf_ar_seq *q) { return q->done; }

static void release_constraint(rf_ar_seq *q) {
    rf_constraint_run_free(q->cr);
    if (q->masked) rf_scoped_free(q->masked);
    free(q->error);
}

int rf_ar_seq_finish(rf_ar_seq *q, rf_gen_result *out) {
    int rc;
    if (q->error) {
        rf_set_error("%s", q->error);
        memset(out, 0, sizeof *out);
        rc = ans_end(&q->ans, -1, q->n_prompt, out);
    } else rc = ans_finish(&q->ans, q->n_prompt, out);
    release_constraint(q);
    rf_kv_free(&q->kv);
    rf_scoped_free(q->prompt);
    rf_scoped_free(q);
    return rc;
}

void rf_ar_seq_free(rf_ar_seq *q) {
    if (!q) return;
    ans_free(&q->ans);
    release_constraint(q);
    rf_kv_free(&q->kv);
    rf_scoped_free(q->prompt);
    rf_scoped_free(q);
}
