/* refusion_step.h - plan-and-infill decoding (refusion.c) as a step machine
 * (decode/step.h): rf_generate_refusion drives it alone with its own calls,
 * the server's scheduler runs its calls beside other generations' in one
 * forward pass. The answer, events, statistics and model calls are the same
 * either way.
 *
 *   q = rf_pi_seq_new(m, prompt, n, &p);
 *   while (!rf_pi_seq_done(q)) {
 *       n = rf_pi_seq_next(q, budget, &call);   // -1: cancelled
 *       ... run call.b on call.kv ...
 *       if (rf_pi_seq_after(q, logits) < 0) ... // failed
 *   }
 *   rf_pi_seq_finish(q, &result);
 *
 * Its calls: the prompt in chunks (no logits; with ar_check_first the last
 * chunk's last token's), then per step a plan (the block's masks), a global
 * verification (drafts, lookahead masks) and infilling's drafts, verifies
 * and re-feeds on the forked rows of its cache (R rows of n tokens).
 *
 * Memory: scoped blocks (util.h) of the calling thread, every one made by
 * rf_pi_seq_new except the short-lived ones of a single after; the cache
 * from p->ws when it has one. p->rolling is not this machine's (see
 * rolling_step.h); p->no_cache is the no-cache twin's (refusion_naive.c). */
#ifndef RF_REFUSION_STEP_H
#define RF_REFUSION_STEP_H

#include "decode/decode.h"
#include "decode/step.h"

typedef struct rf_pi_seq rf_pi_seq;

/* p is copied (its callbacks, user, cancel and ws are kept as pointers), the
 * prompt too. NULL with rf_last_error() when rf_gen_check refuses the
 * settings. */
rf_pi_seq *rf_pi_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p);
/* The most tokens one of its calls holds (R x n; a prompt chunk holds at
 * most this many): the width of the run state it needs. */
int rf_pi_seq_width(const rf_pi_seq *q);
/* The most cache entries a row of its calls attends to: the context of the
 * run state it needs. */
int rf_pi_seq_context(const rf_pi_seq *q);
/* The next call into *call: its token count (R x n), 0 when finished or
 * budget < 1, or -1 with rf_last_error() "cancelled" when p->cancel was
 * raised. A prompt chunk holds at most budget tokens; every other call is
 * handed out whole. */
int rf_pi_seq_next(rf_pi_seq *q, int budget, rf_step_call *call);
/* After the call: its logits ([n_logits, vocab], NULL when it wanted none).
 * Decides what the call tells (commits are reported through p->on_tokens
 * and p->on_event) and prepares the next call. 1 when the answer is
 * complete, 0 when another call follows, -1 with rf_last_error() when no
 * call was handed out or the step failed (the machine then only finishes,
 * with -1). */
int rf_pi_seq_after(rf_pi_seq *q, const float *logits);
int rf_pi_seq_done(const rf_pi_seq *q);
/* The result (as rf_generate_refusion's) and q freed. 0, or -1 with
 * rf_last_error(). */
int rf_pi_seq_finish(rf_pi_seq *q, rf_gen_result *out);
/* Drop a machine, finished or not (NULL: nothing). */
void rf_pi_seq_free(rf_pi_seq *q);

#endif
