/* decode.h - text generation with a ReFusion checkpoint.
 *
 *  rf_generate_refusion        plan-and-infill decoding (docs/refusion.md §3, the
 *                              authors' generate_refusion) on the KV cache:
 *                              committed tokens are never recomputed.
 *  rf_generate_refusion_naive  the same algorithm written a second time, as
 *                              simply as possible: no cache, every model call
 *                              recomputes the whole physical sequence from
 *                              scratch. Tests require identical answers and
 *                              call counts (greedy), which proves the cache
 *                              bookkeeping of the fast one.
 *  rf_generate_ar              plain autoregressive decoding (greedy,
 *                              temperature, top-k, top-p) with the KV cache:
 *                              the baseline ReFusion is measured against.
 *
 * Positions: the prompt occupies position ids 0..P-1, the answer P..P+G-1.
 * "Answer position" below means an index into the answer, 0..G-1. */
#ifndef RF_DECODE_H
#define RF_DECODE_H

#include <math.h>
#include <stdint.h>

#include "model/model.h"
#include "refusion.h" /* rf_params, rf_event, rf_step, rf_method */
#include "util/util.h"

/* The decoders read the library's public settings (rf_params) and report
 * through its public events, token callbacks and step statistics
 * (refusion.h). */

/* How each committed answer token got in (every committed token is counted
 * in exactly one field; the sum is n_tokens). */
typedef struct {
    int first_free;          /* a slot's first token, committed unchecked (the reference's rule) */
    int first_checked;       /* (b): a slot's first token whose AR probability passed */
    int first_replaced;      /* (b): a slot's first token replaced by the AR head's choice */
    int verified;            /* a later token whose AR probability > token_threshold */
    int forced_draft;        /* a later token forced through as the mask head's re-draft */
    int forced_ar;           /* (a): a later token forced through as the AR head's choice */
} rf_accept_stats;

typedef struct {
    int n_prompt;
    int *ids;                /* [n_ids] answer in position order, up to and including the first EOS */
    int n_ids;
    int hit_eos;             /* the answer ends with an EOS */
    int n_calls;             /* model calls (a prompt prefill in chunks counts once) */
    int n_tokens;            /* tokens committed (== n_ids) */
    rf_step *steps;
    int n_steps;
    double tpf;              /* TPF as the reference defines it: mean over steps of tpf_ref */
    double tokens_per_call;  /* n_tokens / n_calls */
    double wall_s, tokens_per_s;
    rf_accept_stats accept;  /* ReFusion only (AR: all zero) */
    rf_token_logprob *logprobs; /* [n_ids] with p->logprobs, else NULL */
} rf_gen_result;

/* The reference example's settings: ReFusion, gen 512, slot 4, 32 blocks,
 * 0.6 / 0.3, greedy; AR: top_k 0, top_p 1; eos/mask from the model (the one
 * place of the defaults: rf_params_default returns these). */
void rf_gen_params_default(rf_params *p);

/* MDM's step budget (decode/mdm.h). */
typedef struct {
    int steps;      /* total diffusion steps over the answer (LLaDA's `steps`);
                     * block b gets steps / n_blocks (+1 for the first
                     * steps % n_blocks blocks), at most one per token */
    int early_stop; /* stop once every position up to the first EOS is
                     * unmasked. Unmasked tokens never change, so the answer
                     * is identical to running every step; only calls are
                     * saved. 0 = run all steps as LLaDA does. */
} rf_mdm_params;

/* The one place that chooses a decoder: p->method's (ReFusion: the no-cache
 * twin with p->no_cache, the rolling slot with p->rolling). mp: MDM's
 * budget, NULL for rf_mdm_params_default's with p->mdm_steps when set.
 * 0, or -1 with rf_last_error(). */
int rf_decode(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p, const rf_mdm_params *mp,
              rf_gen_result *out);
/* "refusion", "ar", "mdm" (the --decoder / HTTP "mode" names), or NULL for
 * a value outside rf_method. */
const char *rf_method_name(rf_method method);

/* The time of a forward call of n = 1..max_n tokens (one row, 64 tokens of
 * context) over that of a 1-token call, the best of a few interleaved rounds,
 * non-decreasing in n: the cost model of the adaptive rolling slot. A few
 * seconds at the Qwen3-0.6B shape for max_n = 16. Returns 0, or -1 with
 * rf_last_error() set. */
int rf_call_cost_measure(const rf_model *m, int max_n, float *cost);
/* the same with `rounds` timed rounds (`refusion tune`: more, for a table
 * that is kept) */
int rf_call_cost_measure_rounds(const rf_model *m, int max_n, int rounds, float *cost);
/* The table the decoders use: the tune cache's for this model, tier and
 * thread count (model/tune.h rf_tune_cache_call_cost) when it holds max_n
 * widths, *cached = 1; else rf_call_cost_measure's, *cached = 0. cached
 * may be NULL. 0, or -1 with rf_last_error(). */
int rf_call_cost_get(const rf_model *m, int max_n, float *cost, int *cached);

/* Check params against the model and prompt (ids in the vocabulary, slot_size
 * >= 1, thresholds in [0, 1], prompt + answer within the context, ...).
 * ar: 1 for AR decoding (slot settings ignored). 0 or -1 with rf_last_error(). */
int rf_gen_check(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p, int ar);
/* The checks of rf_gen_check that need neither the model nor the prompt (a
 * known method, eos_id >= RF_TOKEN_FROM_MODEL); rf_gen_check makes them first. */
int rf_gen_check_settings(const rf_params *p);

/* All return 0, or -1 with rf_last_error() set (the result is then empty). */
int rf_generate_refusion(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                         rf_gen_result *out);
int rf_generate_refusion_naive(const rf_model *m, const int *prompt, int n_prompt,
                               const rf_params *p, rf_gen_result *out);
int rf_generate_ar(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                   rf_gen_result *out);
/* p->rolling's decoder (rf_generate_refusion calls it when p->rolling is set) */
int rf_generate_rolling(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                        rf_gen_result *out);
void rf_gen_result_free(rf_gen_result *r);

/* ---- helpers shared by the decoders (the block layout: params.c; probabilities and sampling: sample.c) ---- */

/* Serial blocks as ranges of whole slots: block b covers slots
 * [first[b], first[b+1]). Returns the number of blocks (n_blocks clamped to
 * the slot count); first must hold n_blocks + 1 entries. */
int rf_block_layout(int n_slots, int n_blocks, int *first);

/* One pass statistics of a logits row: argmax and log-sum-exp, so that the
 * probability of any token is exp(l[t] - lse). */
typedef struct {
    int argmax;
    float max;
    double lse;
} rf_logit_stats;
rf_logit_stats rf_logits_stats(const float *l, int vocab);
static inline double rf_logit_prob(const float *l, const rf_logit_stats *s, int t) {
    return exp((double)l[t] - s->lse);
}
/* Gumbel-max draw at temperature T > 0 (float64, as the reference): argmax of
 * l[i] - T * log(-log(u_i)), one uniform per vocab entry in order. */
int rf_gumbel_argmax(const float *l, int vocab, double temperature, float max, rf_rng *rng);
/* AR sampling: softmax(l / T) restricted to the top_k most likely tokens and
 * to the smallest set whose mass reaches top_p; T == 0 is argmax. */
int rf_sample_ar(const float *l, int vocab, float temperature, int top_k, float top_p, rf_rng *rng);
/* AR decoding's draw of the next token: p's penalties (over the window of
 * prompt ++ answer[0 .. n_answer)), then rf_sample_ar's steps and min_p. */
int rf_sample_token(const float *l, int vocab, const rf_params *p, const int *prompt, int n_prompt,
                    const int *answer, int n_answer, rf_rng *rng);
/* out: token tok's log-probability in the row l (log-softmax, in float64)
 * and the n_top most likely tokens (by logit, ties to the lower id), most
 * likely first. */
void rf_logprobs_of(const float *l, int vocab, int tok, int n_top, rf_token_logprob *out);
/* 1 when p has a repeat / presence / frequency penalty */
int rf_gen_has_penalties(const rf_params *p);

#endif
