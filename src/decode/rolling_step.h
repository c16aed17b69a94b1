/* rolling_step.h - the rolling slot (rolling.c) one model call at a time, the
 * calls made by the caller: rf_generate_rolling drives it with rf_forward,
 * a scheduler batching many sequences with rf_forward_seqs. The answer,
 * events and statistics are rf_generate_rolling's for the same settings.
 *
 *   q = rf_roll_seq_new(m, prompt, n, &p);
 *   while (!rf_roll_seq_done(q)) {
 *       n = rf_roll_seq_next(q, budget, &tok, &pos, &n_logits); // -1: cancelled
 *       ... feed tok/pos (n tokens, causal attention) into rf_roll_seq_kv(q),
 *       with the logits of its last n_logits tokens ...
 *       rf_roll_seq_after(q, logits);
 *   }
 *   rf_roll_seq_finish(q, &result);
 *
 * A call is a prompt chunk (no logits, or the last token's: 1) or a slot
 * call (the last committed token, drafts and masks at consecutive
 * positions: every token's logits). Its attention is causal, as one
 * sequence of rf_forward_seqs has it.
 *
 * Memory: scoped blocks (util.h) of the calling thread; the cache from
 * p->ws when it has one. The prompt is read, not copied: it must outlive q. */
#ifndef RF_ROLLING_STEP_H
#define RF_ROLLING_STEP_H

#include "decode/decode.h"
#include "model/kvcache.h"

typedef struct rf_roll_seq rf_roll_seq;

/* p is copied (its callbacks, user, cancel and ws are kept as pointers).
 * NULL with rf_last_error() when rf_gen_check refuses the settings. */
rf_roll_seq *rf_roll_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p);
/* The same, with the first n_reuse prompt tokens' cache entries copied from
 * src (entries 0..n_reuse-1 of its main sequence, which must hold exactly
 * those tokens at positions 0..n_reuse-1: a cache of a sequence that began
 * with the same tokens). At most n_prompt - 1 are reused (the last prompt
 * token is fed for its logits); the answer and the calls are the ones
 * without reuse. */
rf_roll_seq *rf_roll_seq_new_reusing(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                                     const rf_kvcache *src, int n_reuse);
/* Move the sequence's cache out (before rf_roll_seq_finish / _free), cut to
 * the entries of the prompt and the committed tokens it holds, in order at
 * positions 0, 1, ... (a finished answer: all but its last token); *ids
 * (malloc'd) those tokens. Returns their count. The caller frees *kv with
 * rf_kv_free. Only for a sequence made without p->ws (its own cache). */
int rf_roll_seq_take_cache(rf_roll_seq *q, rf_kvcache *kv, int **ids);
/* The most tokens one of its calls holds (a prompt chunk of up to 256, a
 * slot call of up to 2 slot_size). */
int rf_roll_seq_width(const rf_roll_seq *q);
/* The tokens of the sequence's next call: their count (0: done, or budget
 * 0), or -1 with rf_last_error() "cancelled" when p->cancel was raised. A
 * prompt chunk holds at most budget tokens; a slot call is handed out whole
 * (budget >= 1). *n_logits: the call wants the logits of its last n_logits
 * tokens, in order. tokens and pos stay valid until rf_roll_seq_after. */
int rf_roll_seq_next(rf_roll_seq *q, int budget, const int **tokens, const int **pos, int *n_logits);
/* The cache the call appends to. */
rf_kvcache *rf_roll_seq_kv(rf_roll_seq *q);
/* The call this sequence's calls share, as far as the caller knows it (a
 * scheduler batching many: the last call's): the other rolling sequences
 * in it (peers), and the tokens the other rows feed and the answer tokens
 * they are expected to commit. Only the adaptive width (p->draft_adaptive)
 * reads it: it sizes the calls for the most answer tokens of the whole call
 * per its cost, taking the peers to size theirs alike (rolling.c); set it
 * before rf_roll_seq_after, which sizes the next call. The calls decided
 * by it change, never the answer. 0, 0, 0: the call is the sequence's own
 * (the default). */
void rf_roll_seq_set_load(rf_roll_seq *q, int peers, int tokens, double commits);
/* After the call: the n_logits rows asked for ([n_logits, vocab]; NULL
 * when none). Commits the tokens it decides (reported through
 * p->on_tokens) and prepares the next call. 1 when the answer is complete
 * (EOS or gen_length tokens), else 0. */
int rf_roll_seq_after(rf_roll_seq *q, const float *logits);
int rf_roll_seq_done(const rf_roll_seq *q);
/* The result (as rf_generate_rolling's) and q freed. 0, or -1 with
 * rf_last_error(). */
int rf_roll_seq_finish(rf_roll_seq *q, rf_gen_result *out);
/* Drop an unfinished sequence. */
void rf_roll_seq_free(rf_roll_seq *q);

#endif
