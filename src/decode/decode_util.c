/* decode_util.c - what every decoder runs through: the cancel check before
 * each model call, the prompt's prefill, and the answer bookkeeping
 * (decode_impl.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"

int gen_cancelled(const rf_params *p) {
    if (rf_faults.generation_step) rf_faults.generation_step();
    if (!p->cancel || !*p->cancel) return 0;
    rf_set_error("generation cancelled");
    return -1;
}

int gen_prefill(const rf_model *m, rf_kvcache *kv, rf_runstate *rs, const int *prompt, int n_prompt, int chunk,
                int *pos, float *logits, rf_answer *ans) {
    rf_step *st = ans_step(ans, 0);
    int rc = 0;
    for (int s = 0; s < n_prompt && rc == 0; s += chunk) {
        int c = n_prompt - s < chunk ? n_prompt - s : chunk, last = c - 1;
        for (int i = 0; i < c; i++) pos[i] = s + i;
        rf_batch b = {1, c, prompt + s, pos, 0, s + c == n_prompt, &last, logits};
        rc = gen_cancelled(ans->p) ? -1 : rf_forward(m, kv, rs, &b);
    }
    ans->n_calls++;
    st->calls++;
    return rc;
}

/* ---- answer bookkeeping ----------------------------------------------------- */
void ans_init(rf_answer *a, const rf_params *p, int G, int eos) {
    memset(a, 0, sizeof *a);
    a->p = p;
    a->G = G;
    a->eos = eos;
    a->tok = rf_scoped_malloc((size_t)G * sizeof(int));
    for (int i = 0; i < G; i++) a->tok[i] = -1;
    if (p->logprobs) a->lp = rf_scoped_calloc((size_t)G, sizeof *a->lp);
    a->t0 = rf_now();
}

void ans_free(rf_answer *a) {
    rf_scoped_free(a->tok);
    if (a->lp) rf_scoped_free(a->lp);
    rf_scoped_free(a->steps);
    memset(a, 0, sizeof *a);
}

void ans_fill(rf_answer *a, int apos, int tok) {
    if (apos < 0 || apos >= a->G) rf_die("decode: answer position %d outside [0, %d)", apos, a->G);
    if (a->tok[apos] >= 0) a->refills++;
    a->tok[apos] = tok;
    if (a->n_steps > 0) a->steps[a->n_steps - 1].tokens++;
}

void ans_logprob(rf_answer *a, int apos, const float *row, int vocab, int tok) {
    if (!a->lp) return;
    if (apos < 0 || apos >= a->G) rf_die("decode: answer position %d outside [0, %d)", apos, a->G);
    rf_logprobs_of(row, vocab, tok, a->p->top_logprobs, &a->lp[apos]);
}

void ans_flush(rf_answer *a) {
    int start = a->frontier;
    while (!a->stopped && a->frontier < a->G && a->tok[a->frontier] >= 0) {
        if (a->tok[a->frontier] == a->eos) a->stopped = 1;
        a->frontier++;
    }
    if (a->frontier > start && a->lp && a->p->on_logprobs)
        a->p->on_logprobs(a->lp + start, a->frontier - start, a->p->user);
    if (a->frontier > start && a->p->on_tokens)
        a->p->on_tokens(a->tok + start, a->frontier - start, a->p->user);
}

void ans_reserve_steps(rf_answer *a, int n) {
    if (n <= a->cap_steps) return;
    a->steps = rf_scoped_grow(a->steps, (size_t)a->n_steps * sizeof *a->steps, (size_t)n * sizeof *a->steps);
    a->cap_steps = n;
}

rf_step *ans_step(rf_answer *a, int block) {
    if (a->n_steps == a->cap_steps) {
        a->cap_steps = a->cap_steps ? 2 * a->cap_steps : 64;
        a->steps = rf_scoped_grow(a->steps, (size_t)a->n_steps * sizeof *a->steps,
                                  (size_t)a->cap_steps * sizeof *a->steps);
    }
    rf_step *s = &a->steps[a->n_steps++];
    memset(s, 0, sizeof *s);
    s->block = block;
    return s;
}

void ans_event(const rf_answer *a, rf_event_type kind, int step, int n, const int *apos,
               const int *tok, const unsigned char *accepted) {
    if (!a->p->on_event || n <= 0) return;
    rf_event ev = {kind, step, n, apos, tok, accepted};
    a->p->on_event(&ev, a->p->user);
}

int ans_end(rf_answer *a, int rc, int n_prompt, rf_gen_result *out) {
    if (rc) {
        ans_free(a);
        return -1;
    }
    return ans_finish(a, n_prompt, out);
}

int ans_finish(rf_answer *a, int n_prompt, rf_gen_result *out) {
    ans_flush(a);
    memset(out, 0, sizeof *out);
    if (a->refills) {
        rf_set_error("decode: %d answer positions were filled more than once", a->refills);
        ans_free(a);
        return -1;
    }
    if (!a->stopped && a->frontier < a->G) {
        rf_set_error("decode: answer position %d was never filled", a->frontier);
        ans_free(a);
        return -1;
    }
    out->n_prompt = n_prompt;
    out->n_ids = a->frontier;
    out->ids = rf_scoped_malloc((size_t)(a->frontier + 1) * sizeof(int));
    memcpy(out->ids, a->tok, (size_t)a->frontier * sizeof(int));
    if (a->lp) {
        out->logprobs = rf_scoped_malloc((size_t)(a->frontier + 1) * sizeof *out->logprobs);
        memcpy(out->logprobs, a->lp, (size_t)a->frontier * sizeof *out->logprobs);
    }
    out->hit_eos = a->stopped;
    out->n_calls = a->n_calls;
    out->accept = a->acc;
    out->n_tokens = a->frontier;
    out->steps = a->steps;
    out->n_steps = a->n_steps;
    a->steps = NULL;
    double tpf = 0;
    for (int i = 0; i < out->n_steps; i++) tpf += out->steps[i].tpf_ref;
    out->tpf = out->n_steps ? tpf / out->n_steps : 0.0;
    out->tokens_per_call = out->n_calls ? (double)out->n_tokens / out->n_calls : 0.0;
    out->wall_s = rf_now() - a->t0;
    out->tokens_per_s = out->wall_s > 0 ? out->n_tokens / out->wall_s : 0.0;
    ans_free(a);
    return 0;
}

void rf_gen_result_free(rf_gen_result *r) {
    rf_scoped_free(r->ids);
    if (r->logprobs) rf_scoped_free(r->logprobs);
    rf_scoped_free(r->steps);
    memset(r, 0, sizeof *r);
}

void ans_count_how(rf_answer *a, int how) {
    rf_accept_stats *s = &a->acc;
    int *field[] = {&s->first_free, &s->first_checked, &s->first_replaced,
                    &s->verified,   &s->forced_draft,  &s->forced_ar};
    (*field[how])++;
}
