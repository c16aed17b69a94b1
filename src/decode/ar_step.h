/* ar_step.h - AR decoding one model call at a time, the calls made by the
 * caller: rf_generate_ar drives it with rf_forward, a scheduler batching
 * many sequences with rf_forward_seqs. The answer, events and statistics
 * are rf_generate_ar's for the same settings.
 *
 *   q = rf_ar_seq_new(m, prompt, n, &p);
 *   while (!rf_ar_seq_done(q)) {
 *       n = rf_ar_seq_next(q, budget, &tok, &pos, buf);  // -1: cancelled
 *       ... feed tok/pos (n tokens) into rf_ar_seq_kv(q); logits of the
 *       last one when rf_ar_seq_wants_logits(q) ...
 *       rf_ar_seq_after(q, logits);
 *   }
 *   rf_ar_seq_finish(q, &result);
 *
 * Memory: scoped blocks (util.h) of the calling thread; the cache from
 * p->ws when it has one. */
#ifndef RF_AR_STEP_H
#define RF_AR_STEP_H

#include "decode/decode.h"
#include "model/kvcache.h"

typedef struct rf_ar_seq rf_ar_seq;

/* p is copied (its callbacks, user, cancel and ws are kept as pointers). NULL
 * with rf_last_error() when rf_gen_check refuses the settings. */
rf_ar_seq *rf_ar_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p);
/* The same, with the first n_reuse prompt tokens' cache entries copied from
 * src (entries 0..n_reuse-1 of its main sequence, which must hold exactly
 * those tokens at positions 0..n_reuse-1: a cache of a sequence that began
 * with the same tokens). At most n_prompt - 1 are reused (the last prompt
 * token is fed for its logits); the answer is the one without reuse. */
rf_ar_seq *rf_ar_seq_new_reusing(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                                 const rf_kvcache *src, int n_reuse);
/* Move the sequence's cache out (before rf_ar_seq_finish / _free): *kv
 * holds the entries of the tokens fed so far, in order at positions 0, 1,
 * ...; *ids (malloc'd) those tokens (prompt, then answer). Returns their
 * count. The caller frees *kv with rf_kv_free. Only for a sequence made
 * without p->ws (its own cache). */
int rf_ar_seq_take_cache(rf_ar_seq *q, rf_kvcache *kv, int **ids);
/* The tokens of the sequence's next call, at most budget of them (a prompt
 * chunk, or the token just drawn): their count (0: nothing, done or budget
 * 0), or -1 with rf_last_error() "cancelled" when p->cancel was raised.
 * pos_buf: room for min(budget, 256) position ids. */
int rf_ar_seq_next(rf_ar_seq *q, int budget, const int **tokens, const int **pos, int *pos_buf);
/* 1 when the call just handed out needs the logits of its last token. */
int rf_ar_seq_wants_logits(const rf_ar_seq *q);
/* The cache the call appends to. */
rf_kvcache *rf_ar_seq_kv(rf_ar_seq *q);
/* After the call: logits of its last token when asked (else NULL). Draws
 * the next answer token (reported through p->on_tokens). 1 when the answer
 * is complete (EOS or gen_length tokens), else 0. */
int rf_ar_seq_after(rf_ar_seq *q, const float *logits);
int rf_ar_seq_done(const rf_ar_seq *q);
/* The result (as rf_generate_ar's) and q freed. 0, or -1 with rf_last_error(). */
int rf_ar_seq_finish(rf_ar_seq *q, rf_gen_result *out);
/* Drop an unfinished sequence. */
void rf_ar_seq_free(rf_ar_seq *q);

#endif
