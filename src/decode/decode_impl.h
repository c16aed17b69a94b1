/* decode_impl.h - bookkeeping shared by the decoders (not part of the API):
 * the answer being filled in, streaming of its final prefix, per-step
 * statistics, events. The model calls and the cache are each decoder's own. */
#ifndef RF_DECODE_IMPL_H
#define RF_DECODE_IMPL_H

#include "decode/decode.h"
#include "model/forward.h"
#include "model/workspace.h"

typedef struct {
    const rf_params *p;
    int G;               /* answer length (ReFusion: padded to whole slots) */
    int eos;             /* resolved EOS id, -1 = none */
    int *tok;            /* [G] token at each answer position, -1 while masked */
    int frontier;        /* answer positions [0, frontier) are final and reported */
    int stopped;         /* the frontier passed an EOS: nothing after it counts */
    int refills;         /* fills of an already filled position: must stay 0 */
    rf_token_logprob *lp; /* [G] with p->logprobs (else NULL): each filled position's */
    rf_step *steps;
    int n_steps, cap_steps;
    int n_calls;
    rf_accept_stats acc; /* how committed tokens got in (ReFusion) */
    double t0;
} rf_answer;

/* How a token got in, for rf_accept_stats (one code per committed token). */
enum { HOW_FIRST_FREE, HOW_FIRST_CHECKED, HOW_FIRST_REPLACED, HOW_VERIFIED, HOW_FORCED_DRAFT,
       HOW_FORCED_AR };
void ans_count_how(rf_answer *a, int how);

void ans_init(rf_answer *a, const rf_params *p, int G, int eos);
void ans_free(rf_answer *a);
/* Record a committed token (answer position apos). */
void ans_fill(rf_answer *a, int apos, int tok);
/* With p->logprobs: answer position apos's log-probabilities from the
 * logits row its token is drawn from, as the model gave it (before
 * penalties, temperature, filters and a grammar's mask); call it with the
 * token before ans_fill. Nothing without p->logprobs. */
void ans_logprob(rf_answer *a, int apos, const float *row, int vocab, int tok);
/* Advance the final prefix and hand the new tokens to p->on_tokens. */
void ans_flush(rf_answer *a);
/* Start the statistics of a new step. */
rf_step *ans_step(rf_answer *a, int block);
/* Room for n steps' statistics now, so that ans_step allocates nothing
 * while there are fewer: a step machine reserves its bound when it is made,
 * so that a step cut short inside a catch point (util.h) leaves no block of
 * its own behind in the answer. */
void ans_reserve_steps(rf_answer *a, int n);
/* Fill *out (answer up to and including the first EOS, stats, timings) and
 * free a. -1 if an answer position before the end / first EOS was never
 * filled or one was filled twice (a decoder bug; tests rely on this). */
int ans_finish(rf_answer *a, int n_prompt, rf_gen_result *out);
/* A decoder's last line: rc != 0 (it failed, rf_last_error() set) frees a
 * and returns -1; else ans_finish. */
int ans_end(rf_answer *a, int rc, int n_prompt, rf_gen_result *out);
void ans_event(const rf_answer *a, rf_event_type kind, int step, int n, const int *apos,
               const int *tok, const unsigned char *accepted);

/* AR-style prefill (ar.c, rolling.c): the prompt in chunks of `chunk`
 * tokens (pos: chunk ints of scratch), the last prompt token's logits into
 * logits; one model call in a new step of ans. 0, or -1 (error, cancel). */
int gen_prefill(const rf_model *m, rf_kvcache *kv, rf_runstate *rs, const int *prompt, int n_prompt, int chunk,
                int *pos, float *logits, rf_answer *ans);

/* Before every model call: 0, or -1 with rf_last_error() "cancelled" when
 * the caller raised p->cancel. */
int gen_cancelled(const rf_params *p);

/* eos / mask ids after resolving RF_TOKEN_FROM_MODEL */
int gen_eos_id(const rf_model *m, const rf_params *p);
int gen_mask_id(const rf_model *m, const rf_params *p);
/* gen_length padded up to whole slots, in 64 bits: gen_length and slot_size
 * come from requests and may be anything up to INT_MAX, so the sum must not
 * wrap (rf_gen_check bounds the result by the context before any decoder
 * narrows it with gen_padded). */
static inline int64_t gen_padded64(const rf_params *p) {
    int64_t S = p->slot_size > 0 ? p->slot_size : 1;
    return ((int64_t)p->gen_length + S - 1) / S * S;
}
static inline int gen_padded(const rf_params *p) {
    int64_t G = gen_padded64(p);
    return G > INT32_MAX ? INT32_MAX : (int)G;
}

/* Bytes a generation allocates (KV cache, forked rows, activations, logits,
 * answer), computed in 64 bits from the same sizes the decoders use; for
 * params that passed the shape checks of rf_gen_check. What the server's
 * per-request memory limit and rf_gen_check's machine-memory ceiling use. */
int64_t rf_gen_mem_bytes(const rf_model *m, int n_prompt, const rf_params *p, int ar);

#endif
