/* decode_util.c - what the decoders share: parameter checks, the block
 * layout, probabilities from logits (the per-token hot spot), Gumbel-max and
 * AR sampling, and the answer bookkeeping (decode_impl.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"

void rf_gen_params_default(rf_gen_params *p) {
    memset(p, 0, sizeof *p);
    p->method = RF_METHOD_REFUSION;
    p->gen_length = 512;
    p->slot_size = 4;
    p->n_blocks = 32;
    p->slot_threshold = 0.6f;
    p->token_threshold = 0.3f;
    p->temperature = 0.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->seed = 0;
    p->eos_id = RF_ID_FROM_MODEL;
    p->mask_id = RF_ID_FROM_MODEL;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
}

int gen_cancelled(const rf_gen_params *p) {
    if (rf_faults.generation_step) rf_faults.generation_step();
    if (!p->cancel || !*p->cancel) return 0;
    rf_set_error("generation cancelled");
    return -1;
}

int gen_prefill(const rf_model *m, rf_kvcache *kv, rf_runstate *rs, const int *prompt, int n_prompt, int chunk,
                int *pos, float *logits, rf_answer *ans) {
    rf_step_stat *st = ans_step(ans, 0);
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

int gen_eos_id(const rf_model *m, const rf_gen_params *p) {
    return p->eos_id == RF_ID_FROM_MODEL ? m->cfg.eos_id : p->eos_id;
}
int gen_mask_id(const rf_model *m, const rf_gen_params *p) {
    return p->mask_id == RF_ID_FROM_MODEL ? m->cfg.mask_id : p->mask_id;
}

static int bad_unit(float x) { return !(x >= 0.0f && x <= 1.0f); } /* NaN too */

int rf_gen_check(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p, int ar) {
    const rf_config *c = &m->cfg;
    if (n_prompt < 1) {
        rf_set_error("the prompt is empty (at least one token is needed)");
        return -1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size) {
            rf_set_error("prompt token %d (id %d) is outside the vocabulary [0, %d)", i, prompt[i],
                         c->vocab_size);
            return -1;
        }
    if (p->gen_length < 1) {
        rf_set_error("gen_length must be at least 1 (got %d)", p->gen_length);
        return -1;
    }
    if (!(p->temperature >= 0.0f) || isinf(p->temperature)) {
        rf_set_error("temperature must be a finite number >= 0 (got %g)", p->temperature);
        return -1;
    }
    int eos = gen_eos_id(m, p);
    if (eos < -1 || eos >= c->vocab_size) {
        rf_set_error("EOS id %d is outside the vocabulary [0, %d)", eos, c->vocab_size);
        return -1;
    }
    int64_t G = p->gen_length;
    if (ar) { /* AR's sampling (the rolling decoder's too) */
        if (p->top_k < 0) {
            rf_set_error("top_k must be >= 0 (got %d)", p->top_k);
            return -1;
        }
        if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) {
            rf_set_error("top_p must be in (0, 1] (got %g)", p->top_p);
            return -1;
        }
        if (bad_unit(p->min_p)) {
            rf_set_error("min_p must be in [0, 1] (got %g)", p->min_p);
            return -1;
        }
        if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty) || !isfinite(p->presence_penalty) ||
            !isfinite(p->frequency_penalty)) {
            rf_set_error("repeat_penalty must be a finite number > 0, presence/frequency penalties finite "
                         "(got %g, %g, %g)", p->repeat_penalty, p->presence_penalty, p->frequency_penalty);
            return -1;
        }
        if (p->penalty_last_n < -1) {
            rf_set_error("penalty_last_n must be -1 (all tokens) or >= 0 (got %d)", p->penalty_last_n);
            return -1;
        }
    } else if (!p->rolling && (rf_gen_has_penalties(p) || p->min_p != 0.0f)) {
        /* plan-and-infill drafts whole slots with the mask head: a per-token
         * penalty over the tokens before it has no defined place there */
        rf_set_error("min_p and the repeat / presence / frequency penalties are AR sampling settings: "
                     "use the ar decoder or the rolling slot (--rolling)");
        return -1;
    }
    if (!ar || p->rolling) { /* slots and masks: ReFusion, the rolling decoder included */
        if (p->slot_size < 1) {
            rf_set_error("slot_size must be at least 1 (got %d)", p->slot_size);
            return -1;
        }
        if (bad_unit(p->slot_threshold)) {
            rf_set_error("slot_threshold must be in [0, 1] (got %g)", p->slot_threshold);
            return -1;
        }
        int mask = gen_mask_id(m, p);
        if (mask < 0 || mask >= c->vocab_size) {
            rf_set_error("mask id %d is outside the vocabulary [0, %d)", mask, c->vocab_size);
            return -1;
        }
        if (mask == eos) {
            rf_set_error("the mask id and the EOS id are the same (%d)", mask);
            return -1;
        }
    }
    if (!ar) { /* plan-and-infill */
        if (p->n_blocks < 1) {
            rf_set_error("the number of blocks must be at least 1 (got %d)", p->n_blocks);
            return -1;
        }
        if (bad_unit(p->token_threshold)) {
            rf_set_error("token_threshold must be in [0, 1] (got %g)", p->token_threshold);
            return -1;
        }
        if (p->jacobi && !p->ar_correct) { /* it would force stale mask-head drafts through unchecked */
            rf_set_error("jacobi infilling needs ar_correct (--ar-verify correct or both)");
            return -1;
        }
        G = gen_padded64(p);
    }
    if (n_prompt > c->max_pos) {
        rf_set_error("the prompt (%d tokens) is longer than the model's context (%d tokens)", n_prompt,
                     c->max_pos);
        return -1;
    }
    if ((int64_t)n_prompt + G > c->max_pos) {
        rf_set_error("prompt (%d tokens) + answer (%lld tokens) exceed the model's context (%d tokens)",
                     n_prompt, (long long)G, c->max_pos);
        return -1;
    }
    /* everything the decoder allocates, against the machine: an impossible
     * request is refused here instead of failing an allocation later */
    uint64_t need = (uint64_t)rf_gen_mem_bytes(m, n_prompt, p, ar), have = rf_phys_mem();
    if (have && need > have) {
        rf_set_error("this generation needs about %.0f MB of memory (prompt %d + answer %lld tokens), "
                     "more than this machine's %.0f MB",
                     need / 1e6, n_prompt, (long long)G, have / 1e6);
        return -1;
    }
    return 0;
}

/* Mirrors the allocations of rf_generate_refusion / rf_generate_ar (refusion.c,
 * ar.c, kvcache.c, forward.c's runstate); an overestimate is fine, an
 * underestimate is not. All sizes are bounded by the config's limits
 * (dimensions <= 2^24, context <= 2^20, io/config.c), so 64 bits cannot wrap. */
int64_t rf_gen_mem_bytes(const rf_model *m, int n_prompt, const rf_gen_params *p, int ar) {
    if (p->rolling) ar = 1; /* rolling.c allocates as AR does, with calls of up to 2 slots */
    const rf_config *c = &m->cfg;
    int64_t L = c->n_layers, d = c->hidden_size, V = c->vocab_size, f = c->intermediate_size;
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    int64_t P = n_prompt > 0 ? n_prompt : 1, G, T, rows = 0, S = 1;
    if (ar) {
        G = p->gen_length > 0 ? p->gen_length : 1;
        T = P < 256 ? P : 256; /* prefill chunk */
        if (p->rolling && T < 2 * (int64_t)p->slot_size) T = 2 * (int64_t)p->slot_size; /* rolling.c */
    } else {
        S = p->slot_size > 0 ? p->slot_size : 1;
        G = gen_padded64(p);
        /* the largest serial block, as rf_block_layout cuts it */
        int64_t n_slots = G / S, nb = p->n_blocks < 1 ? 1 : p->n_blocks;
        if (nb > n_slots) nb = n_slots;
        if (nb < 1) nb = 1;
        int64_t maxb = n_slots - (nb - 1) * (n_slots / nb);
        T = maxb * S;
        if (T < 256 && T < P) T = P < 256 ? P : 256;
        rows = maxb; /* forked rows: at most one per slot of a block, S entries each */
    }
    int64_t ctx = P + G + S;
    int64_t kv = 2 * L * (P + G) * kvd * 4 + (P + G) * 4;
    int64_t fork = rows ? 2 * (2 * rows * L * S * kvd * 4) + rows * (S + 1) * 4 : 0; /* + a select copy */
    int64_t runstate = T * (2 * d + 2 * qd + 2 * kvd + 2 * f) * 4 + 64 * (ctx + T) * 4;
    int64_t logits = T * V * 4 + V * (8 + 8); /* + one row of sampling scratch */
    int64_t answer = G * (4 + 4 + 16) + 4096;
    return kv + fork + runstate + logits + answer;
}

/* Blocks of whole slots. The reference cuts gen_length into n_blocks equal
 * blocks and reshapes each into slots, which only works when the slot count
 * is a multiple of n_blocks (otherwise it fails, or silently never generates
 * the remainder). Here every block but the last gets n_slots / n_blocks slots
 * and the last takes the rest, which is the reference's layout whenever the
 * reference works. With more blocks than slots every block is one slot. */
int rf_block_layout(int n_slots, int n_blocks, int *first) {
    if (n_blocks > n_slots) n_blocks = n_slots;
    if (n_blocks < 1) n_blocks = 1;
    int per = n_slots / n_blocks;
    for (int b = 0; b < n_blocks; b++) first[b] = b * per;
    first[n_blocks] = n_slots;
    return n_blocks;
}

/* ---- probabilities ---------------------------------------------------------- */

/* argmax (first index of the max) and log-sum-exp of one logits row: two
 * passes over the vocab, one vectorised exp per entry. */
rf_logit_stats rf_logits_stats(const float *l, int V) {
    rf_logit_stats s = {0, l[0], 0.0};
    for (int i = 1; i < V; i++)
        if (l[i] > s.max) s.max = l[i], s.argmax = i;
    s.lse = s.max + log(rf_sum_exp(l, V, s.max));
    return s;
}

/* Gumbel-max in float64. The reference computes exp(l) / (-log u)^T and
 * takes the argmax; its log is l - T log(-log u) = l + T g with g a standard
 * Gumbel draw. All V uniforms are drawn (in vocab order, so a seed fixes the
 * result), but the two logs are only evaluated where the token can still win:
 * u < 1 - 2^-53 bounds g below 37, so l + 37 T <= best score cannot win. */
int rf_gumbel_argmax(const float *l, int V, double T, float max, rf_rng *rng) {
    const double GMAX = 37.0;
    double *u = rf_scoped_malloc((size_t)V * sizeof(double));
    for (int i = 0; i < V; i++) u[i] = rf_rng_uniform(rng);
    int best = -1;
    double bs = -INFINITY;
    /* start from a token with the max logit so that the bound prunes early */
    for (int i = 0; i < V; i++)
        if (l[i] == max) {
            best = i;
            bs = l[i] - T * log(-log(u[i]));
            break;
        }
    for (int i = 0; i < V; i++) {
        if (i == best || (double)l[i] + GMAX * T <= bs) continue;
        double s = l[i] - T * log(-log(u[i]));
        if (s > bs) bs = s, best = i;
    }
    rf_scoped_free(u);
    return best < 0 ? 0 : best;
}

typedef struct {
    float p;
    int id;
} prob_id;
static int by_prob_desc(const void *a, const void *b) {
    const prob_id *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

/* temperature, then top-k, then top-p, then min-p (the Hugging Face order) */
static int sample_core(const float *l, int V, float T, int top_k, float top_p, float min_p, rf_rng *rng) {
    rf_logit_stats st = rf_logits_stats(l, V);
    if (T <= 0.0f) return st.argmax;
    prob_id *c = rf_scoped_malloc((size_t)V * sizeof *c);
    double sum = 0;
    for (int i = 0; i < V; i++) {
        c[i].p = (float)exp(((double)l[i] - st.max) / T);
        c[i].id = i;
        sum += c[i].p;
    }
    int n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1.0f) {
        qsort(c, V, sizeof *c, by_prob_desc);
        if (top_k > 0 && top_k < n) n = top_k;
        sum = 0;
        for (int i = 0; i < n; i++) sum += c[i].p;
        if (top_p < 1.0f) { /* keep the smallest prefix whose mass reaches top_p */
            double cum = 0;
            int k = 0;
            while (k < n && cum < top_p * sum) cum += c[k++].p;
            n = k < 1 ? 1 : k;
            sum = cum;
        }
    }
    int last = n - 1; /* the fallback pick when rounding leaves r >= the total */
    if (min_p > 0.0f) {
        /* c[i].p is the probability relative to the most likely token's
         * (exp((l - max) / T), 1 at the max): drop the tokens below min_p of
         * it, in place (the max itself always stays) */
        sum = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].p < min_p) c[i].p = 0;
            else sum += c[i].p, last = i;
        }
    }
    double r = rf_rng_uniform(rng) * sum, cum = 0;
    int pick = c[last].id;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) {
            pick = c[i].id;
            break;
        }
    }
    rf_scoped_free(c);
    return pick;
}

int rf_sample_ar(const float *l, int V, float T, int top_k, float top_p, rf_rng *rng) {
    return sample_core(l, V, T, top_k, top_p, 0.0f, rng);
}

int rf_gen_has_penalties(const rf_gen_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* llama.cpp's penalties over the last penalty_last_n tokens of prompt +
 * answer (-1: all of them), each distinct token t seen c times there:
 * l[t] /= repeat (l[t] * repeat when l[t] <= 0), then
 * l[t] -= c * frequency + presence. Then AR sampling as rf_sample_ar with
 * min_p. Deterministic in (logits, history, settings, RNG state), which is
 * what lets the rolling slot reproduce AR decoding token for token. */
int rf_sample_token(const float *l, int V, const rf_gen_params *p, const int *prompt, int n_prompt,
                    const int *answer, int n_answer, rf_rng *rng) {
    if (!rf_gen_has_penalties(p)) return sample_core(l, V, p->temperature, p->top_k, p->top_p, p->min_p, rng);
    int64_t n_all = (int64_t)n_prompt + n_answer;
    int64_t w = p->penalty_last_n < 0 || p->penalty_last_n > n_all ? n_all : p->penalty_last_n;
    float *pl = rf_scoped_malloc((size_t)V * sizeof(float));
    int *win = rf_scoped_malloc((size_t)(w + 1) * sizeof(int));
    memcpy(pl, l, (size_t)V * sizeof(float));
    for (int64_t i = 0; i < w; i++) {
        int64_t k = n_all - w + i; /* position in prompt ++ answer */
        win[i] = k < n_prompt ? prompt[k] : answer[k - n_prompt];
    }
    qsort(win, (size_t)w, sizeof *win, by_id);
    for (int64_t i = 0; i < w;) {
        int64_t j = i;
        while (j < w && win[j] == win[i]) j++;
        int t = win[i];
        if (t >= 0 && t < V) {
            float x = pl[t];
            x = x <= 0.0f ? x * p->repeat_penalty : x / p->repeat_penalty;
            pl[t] = x - (float)(j - i) * p->frequency_penalty - p->presence_penalty;
        }
        i = j;
    }
    int pick = sample_core(pl, V, p->temperature, p->top_k, p->top_p, p->min_p, rng);
    rf_scoped_free(win), rf_scoped_free(pl);
    return pick;
}

/* ---- answer bookkeeping ----------------------------------------------------- */
void ans_init(rf_answer *a, const rf_gen_params *p, int G, int eos) {
    memset(a, 0, sizeof *a);
    a->p = p;
    a->G = G;
    a->eos = eos;
    a->tok = rf_scoped_malloc((size_t)G * sizeof(int));
    for (int i = 0; i < G; i++) a->tok[i] = -1;
    a->t0 = rf_now();
}

void ans_free(rf_answer *a) {
    rf_scoped_free(a->tok);
    rf_scoped_free(a->steps);
    memset(a, 0, sizeof *a);
}

void ans_fill(rf_answer *a, int apos, int tok) {
    if (apos < 0 || apos >= a->G) rf_die("decode: answer position %d outside [0, %d)", apos, a->G);
    if (a->tok[apos] >= 0) a->refills++;
    a->tok[apos] = tok;
    if (a->n_steps > 0) a->steps[a->n_steps - 1].tokens++;
}

void ans_flush(rf_answer *a) {
    int start = a->frontier;
    while (!a->stopped && a->frontier < a->G && a->tok[a->frontier] >= 0) {
        if (a->tok[a->frontier] == a->eos) a->stopped = 1;
        a->frontier++;
    }
    if (a->frontier > start && a->p->on_tokens)
        a->p->on_tokens(a->tok + start, a->frontier - start, a->p->user);
}

rf_step_stat *ans_step(rf_answer *a, int block) {
    if (a->n_steps == a->cap_steps) {
        a->cap_steps = a->cap_steps ? 2 * a->cap_steps : 64;
        a->steps = rf_scoped_grow(a->steps, (size_t)a->n_steps * sizeof *a->steps,
                                  (size_t)a->cap_steps * sizeof *a->steps);
    }
    rf_step_stat *s = &a->steps[a->n_steps++];
    memset(s, 0, sizeof *s);
    s->block = block;
    return s;
}

void ans_event(const rf_answer *a, rf_event_kind kind, int step, int n, const int *apos,
               const int *tok, const unsigned char *accepted) {
    if (!a->p->on_event || n <= 0) return;
    rf_decode_event ev = {kind, step, n, apos, tok, accepted};
    a->p->on_event(&ev, a->p->user);
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
    rf_scoped_free(r->steps);
    memset(r, 0, sizeof *r);
}

void ans_count_how(rf_answer *a, int how) {
    rf_accept_stats *s = &a->acc;
    int *field[] = {&s->first_free, &s->first_checked, &s->first_replaced,
                    &s->verified,   &s->forced_draft,  &s->forced_ar};
    (*field[how])++;
}
