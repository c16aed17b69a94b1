/* step.h - a decoder as a step machine: the one shape of a model call it
 * asks for. The machine decides, from the logits of its last call, the
 * next call's rows (tokens, positions, the cache they go into, which
 * logits it needs) or that it is finished; whoever drives it makes the
 * call - rf_generate alone with rf_forward, the server's scheduler as part
 * of one forward call for many machines (rf_forward_calls). A token's
 * numbers do not depend on the other calls of a pass, so the answer is the
 * same whoever drives.
 *
 *   while (!done(q)) {
 *       n = next(q, budget, &call);     // n tokens (R rows x n_tok), -1: cancelled
 *       ... run call.b on call.kv, logits of call.b.logit_idx into buf ...
 *       rc = after(q, call.b.n_logits ? buf : NULL);  // 1 finished, 0 not, -1 failed
 *   }
 *
 * The logits handed to after are [call.b.n_logits, vocab], in the order of
 * call.b.logit_idx, and are read only during that call of after. A call
 * stays valid until after; next without an after in between hands out the
 * same call again (a prompt chunk cut to the new budget). after without a
 * call handed out (a finished machine stepped again) fails with -1 and
 * changes nothing. */
#ifndef RF_STEP_H
#define RF_STEP_H

#include "model/forward.h"
#include "model/kvcache.h"

typedef struct {
    rf_kvcache *kv; /* the cache the call appends to (forked: one extension per row) */
    rf_batch b;     /* rows, tokens, positions, attention, the logits wanted; b.logits is the driver's (NULL here) */
} rf_step_call;

#endif
