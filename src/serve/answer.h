/* answer.h - one choice's answer as the decoder reports it: token ids and
 * text cut at max_tokens and at the earliest stop sequence, streamed as SSE
 * chunks or kept for the plain body, and a job's choices summed into its
 * response (answer.c). Used by the scheduler. */
#ifndef RF_SERVE_ANSWER_H
#define RF_SERVE_ANSWER_H

#include "serve/serve_impl.h"

/* The answer as it arrives from the decoder, in position order: the token
 * ids and their text, cut at max_tokens and at the earliest stop sequence.
 * Once cut, the job's cancel flag stops the decoder before its next call. */
typedef struct {
    rf_server *s;
    job *j;
    int index;           /* the choice ("n" > 1: 0 .. n-1) */
    refusion_text_stream *ts; /* NULL without a tokenizer */
    int eos;
    int32_t *ids;        /* [n_ids] kept tokens */
    rf_token_logprob *lp; /* [n_ids] their log-probabilities when the request asked (else NULL) */
    rf_token_logprob *lp_next; /* the decoder's log-probabilities of the tokens it reports next */
    int n_lp_next, cap_lp_next;
    size_t *tok_start;   /* [n_ids] offset of each token's text in text */
    int n_ids, cap_ids;
    char *text;          /* the kept tokens' text */
    size_t len, cap;
    int cut;             /* 1: max_tokens or a stop sequence reached: nothing more is kept */
    int stop_hit;        /* the cut was a stop sequence */
    size_t max_stop;     /* longest stop sequence */
    int ids_sent;        /* streaming: ids already in a chunk */
    size_t text_sent;    /* streaming: text bytes already in a chunk */
    int stop_index;      /* stop_hit: which stop sequence */
    int steps_seen;      /* planning steps (AR: tokens) the decoder's events reported */
    double t0;           /* rf_now() at the choice's start */
} run_ctx;

/* A job's choices as they complete: the plain answer's choices, the
 * statistics and usage summed over them (completion tokens, model calls,
 * steps and wall time are summed, TPF is the mean over all steps, hit_eos
 * means every choice ended with EOS). */
typedef struct {
    json_t *choices;
    json_t *native;  /* RF_REQ_NATIVE: llama-server's answer (one choice) */
    rf_stats sum;
    double tpf_sum;
    int tokens;
} job_acc;

/* Set up c for choice `index` of j: 0, or -1 when the client has left or
 * the job passed its deadline. *calls0: the job's calls so far. */
int rf_answer_begin(rf_server *s, job *j, int index, run_ctx *c, int *calls0);
/* After the decoder returned rc (wall seconds): the choice's rc (a
 * generation stopped by the cut is complete). */
int rf_answer_end(rf_server *s, job *j, run_ctx *c, rf_stats *r, int rc, double wall, int calls0);
void rf_answer_free(run_ctx *c);
/* the decoder's callbacks (user: the run_ctx) */
void rf_answer_on_tokens(const int32_t *ids, int n, void *user);
void rf_answer_on_event(const rf_event *ev, void *user);
void rf_answer_on_logprobs(const rf_token_logprob *lp, int n, void *user);
void rf_acc_init(job_acc *a);
/* choice i of n is complete: stream its last chunk or keep it */
void rf_acc_choice(rf_server *s, job *j, job_acc *a, run_ctx *c, const rf_stats *r, int i, int n);
/* the job is over (rc 0, or the failure): its output, counters, JOB_DONE */
void rf_job_finish(rf_server *s, job *j, job_acc *a, int rc);

#endif
