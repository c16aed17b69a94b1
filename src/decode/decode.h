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
#include "util/util.h"

/* eos_id / mask_id value meaning "take it from the model's config". */
#define RF_ID_FROM_MODEL (-2)

/* What the decoder reports while it works (for --visualize and demos). */
typedef enum {
    RF_EV_PLAN,          /* slots chosen by the planning step: tok = their drafts */
    RF_EV_FAST_COMMIT,   /* slots committed by global verification's fast path */
    RF_EV_INFILL_ITER,   /* after one draft+verify iteration: tok = current drafts,
                            accepted[i] = 1 where verified so far */
    RF_EV_INFILL_COMMIT, /* infilled slots committed (truncated after an EOS) */
    RF_EV_DROP,          /* positions dropped because an EOS was committed before them */
    RF_EV_AR_TOKEN,      /* one AR token */
} rf_event_kind;

typedef struct {
    rf_event_kind kind;
    int step;                     /* 0-based planning step (AR: token index) */
    int n;                        /* entries below */
    const int *apos;              /* [n] answer positions */
    const int *tok;               /* [n] tokens (NULL for RF_EV_DROP) */
    const unsigned char *accepted;/* [n] for RF_EV_INFILL_ITER, else NULL */
} rf_decode_event;

/* Newly final answer tokens: every answer position before them is filled, so
 * they can be printed. Called in position order, up to and including the
 * first EOS. */
typedef void (*rf_tokens_cb)(const int *ids, int n, void *user);
typedef void (*rf_event_cb)(const rf_decode_event *ev, void *user);

typedef struct {
    int gen_length;          /* answer length; ReFusion pads it up to a multiple of slot_size */
    int slot_size;           /* ReFusion */
    int n_blocks;            /* ReFusion: serial blocks (whole slots; the last takes the rest) */
    float slot_threshold;    /* ReFusion: a slot is planned when its first token's prob > this */
    float token_threshold;   /* ReFusion: a token is verified when its AR prob > this */
    float temperature;       /* 0 = greedy */
    int top_k;               /* AR sampling: 0 = off */
    float top_p;             /* AR sampling: 1 = off */
    uint64_t seed;
    int eos_id;              /* RF_ID_FROM_MODEL, or -1 for "no EOS" */
    int mask_id;             /* RF_ID_FROM_MODEL or an id */
    /* AR-verified ReFusion (docs/refusion.md §4; both off = the reference) */
    int ar_correct;          /* (a) a forced token is the AR head's choice, not the mask re-draft */
    int ar_check_first;      /* (b) a slot's first token is checked by the AR head when its
                                left neighbour is committed */
    int lookahead;           /* ReFusion, beyond the paper: a global verification also feeds the
                                next plan's masks; used when every chosen slot is committed
                                (same answer, fewer calls; docs/refusion.md §4) */
    int jacobi;              /* ReFusion, beyond the paper: an infilling iteration verifies the
                                current drafts again instead of re-drafting them first (one call
                                per iteration, not two; docs/refusion.md §4) */
    int rolling;             /* ReFusion, beyond the paper: a rolling slot (decode/rolling.c):
                                every call verifies the drafts and drafts the next slot with masks
                                behind them; the answer is AR decoding's (same sampling settings) */
    int draft_adaptive;      /* rolling slot: choose each call's width (up to slot_size drafts and
                                masks) for the most expected tokens per unit of call cost
                                (decode/rolling.c); the answer stays AR decoding's */
    const float *call_cost;  /* draft_adaptive, optional: call_cost[n-1] = the time of a call of
                                n tokens over that of 1 token (rf_call_cost_measure), n = 1..
                                n_call_cost; NULL: fitted online from the decoder's own calls */
    int n_call_cost;
    /* AR sampling (ar and the rolling slot), as llama.cpp names them */
    float min_p;             /* keep tokens with probability >= min_p * the top one's (0 = off) */
    float repeat_penalty;    /* l /= x (l *= x when l <= 0) for tokens seen in the window (1 = off) */
    float presence_penalty;  /* l -= x for tokens seen in the window (0 = off) */
    float frequency_penalty; /* l -= x * count for tokens seen in the window (0 = off) */
    int penalty_last_n;      /* the window: last N tokens of prompt + answer (-1: all, 0: none) */
    rf_tokens_cb on_tokens;  /* optional */
    rf_event_cb on_event;    /* optional */
    void *user;
    /* optional: when *cancel becomes non-zero the decoder stops before its
     * next model call and returns -1 ("cancelled"); another thread may set it */
    const volatile int *cancel;
} rf_gen_params;

/* Statistics of one planning step of ReFusion (one per AR token for AR). */
typedef struct {
    int block;               /* serial block the step belongs to */
    int slots_planned;       /* slots chosen by the plan */
    int slots_fast;          /* slots committed by the fast path (0 when infilled) */
    int slots_infilled;      /* slots committed by parallel infilling */
    int infill_iters;        /* draft+verify iterations (0 on the fast path) */
    int refeeds;             /* AR-verified (a): calls that only re-feed a row's tail whose
                                K/V predate a replaced token (0 or 1) */
    int tokens;              /* answer tokens committed in this step */
    int calls;               /* model calls in this step */
    double tpf_ref;          /* the reference's per-step TPF term (see refusion.c) */
} rf_step_stat;

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
    rf_step_stat *steps;
    int n_steps;
    double tpf;              /* TPF as the reference defines it: mean over steps of tpf_ref */
    double tokens_per_call;  /* n_tokens / n_calls */
    double wall_s, tokens_per_s;
    rf_accept_stats accept;  /* ReFusion only (AR: all zero) */
} rf_gen_result;

/* The reference example's settings: gen 512, slot 4, 32 blocks, 0.6 / 0.3,
 * greedy; AR: top_k 0, top_p 1; eos/mask from the model. */
void rf_gen_params_default(rf_gen_params *p);

/* The time of a forward call of n = 1..max_n tokens (one row, 64 tokens of
 * context) over that of a 1-token call, the best of a few interleaved rounds,
 * non-decreasing in n: the cost model of the adaptive rolling slot. A few
 * seconds at the Qwen3-0.6B shape for max_n = 16. Returns 0, or -1 with
 * rf_last_error() set. */
int rf_call_cost_measure(const rf_model *m, int max_n, float *cost);

/* Check params against the model and prompt (ids in the vocabulary, slot_size
 * >= 1, thresholds in [0, 1], prompt + answer within the context, ...).
 * ar: 1 for AR decoding (slot settings ignored). 0 or -1 with rf_last_error(). */
int rf_gen_check(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p, int ar);

/* All return 0, or -1 with rf_last_error() set (the result is then empty). */
int rf_generate_refusion(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                         rf_gen_result *out);
int rf_generate_refusion_naive(const rf_model *m, const int *prompt, int n_prompt,
                               const rf_gen_params *p, rf_gen_result *out);
int rf_generate_ar(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                   rf_gen_result *out);
/* p->rolling's decoder (rf_generate_refusion calls it when p->rolling is set) */
int rf_generate_rolling(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                        rf_gen_result *out);
void rf_gen_result_free(rf_gen_result *r);

/* ---- helpers shared by the decoders (decode_util.c) ---- */

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
int rf_sample_token(const float *l, int vocab, const rf_gen_params *p, const int *prompt, int n_prompt,
                    const int *answer, int n_answer, rf_rng *rng);
/* 1 when p has a repeat / presence / frequency penalty */
int rf_gen_has_penalties(const rf_gen_params *p);

#endif
