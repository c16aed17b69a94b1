/* mdm.h - the masked-diffusion baseline decoder the paper compares against:
 * LLaDA's generate with low-confidence remasking, for models trained with the
 * MDM objective (bidirectional attention, masks predict their own token).
 *
 * The answer region (gen_length tokens) starts fully masked and is cut into
 * n_blocks semi-autoregressive blocks decoded left to right. Each block gets
 * a fixed number of steps; every step runs the model over the WHOLE sequence
 * (prompt + every answer position, filled or masked) with full bidirectional
 * attention and no KV cache, drafts x0 = argmax (Gumbel-max with temperature)
 * at the block's masked positions, and unmasks the k most confident drafts,
 * k following LLaDA's schedule (the block's tokens spread evenly over its
 * steps, earlier steps taking the remainder). Unmasked tokens are final.
 *
 * Parameters come from rf_params (gen_length, n_blocks, temperature,
 * seed, eos_id, mask_id, on_tokens) plus the step budget below. Results use
 * rf_gen_result like the other decoders: the answer up to and including the
 * first EOS, model calls (one per step), TPF (mean over steps of tokens
 * unmasked per call), tokens/s. */
#ifndef RF_MDM_H
#define RF_MDM_H

#include "decode/decode.h"
#include "decode/step.h"

/* rf_mdm_params (steps, early_stop) is in decode/decode.h, beside rf_decode. */

/* steps = gen_length (one token per step, LLaDA's most accurate setting
 * when steps == gen_length is asked for), early_stop = 1. */
void rf_mdm_params_default(rf_mdm_params *mp, const rf_params *p);

/* LLaDA's get_num_transfer_tokens for one block: n masked tokens over s
 * steps, base n / s each, the first n % s steps one more. out: [s]. */
void rf_mdm_schedule(int n, int s, int *out);

/* 0, or -1 with rf_last_error() (bad params: see rf_gen_check; steps < 1).
 * mp NULL: as rf_mdm_params_of. Drives the step machine below to its end. */
int rf_generate_mdm(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                    const rf_mdm_params *mp, rf_gen_result *out);

/* mp, or, when NULL, rf_mdm_params_default's with p->mdm_steps when set
 * (what rf_decode uses). */
void rf_mdm_params_of(const rf_params *p, const rf_mdm_params *mp, rf_mdm_params *out);

/* ---- the step machine (decode/step.h): one call per step ----
 * Each call is the whole sequence (prompt + answer region, width tokens),
 * bidirectional, on the machine's own cache (emptied after every call),
 * with the logits of the block's masked positions (at most
 * rf_mdm_seq_logits rows). Memory: scoped blocks (util.h) of the calling
 * thread, all made by rf_mdm_seq_new; the cache from p->ws when it has one. */
typedef struct rf_mdm_seq rf_mdm_seq;
/* p is copied (callbacks, user, cancel and ws kept as pointers), the prompt
 * too; mp as rf_mdm_params_of. NULL with rf_last_error() when the settings
 * are refused (as rf_generate_mdm refuses them). */
rf_mdm_seq *rf_mdm_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                           const rf_mdm_params *mp);
int rf_mdm_seq_width(const rf_mdm_seq *q);  /* tokens of each call (and the context) */
int rf_mdm_seq_logits(const rf_mdm_seq *q); /* the most logits rows a call wants */
/* The next call into *c: its token count, 0 when finished or budget < 1
 * (a call is never cut), or -1 with rf_last_error() "cancelled". */
int rf_mdm_seq_next(rf_mdm_seq *q, int budget, rf_step_call *c);
/* After the call: its logits ([n_logits, vocab]). 1 when the answer is
 * complete, 0 when another call follows, -1 with rf_last_error() when no
 * call was handed out (nothing changes then). */
int rf_mdm_seq_after(rf_mdm_seq *q, const float *logits);
int rf_mdm_seq_done(const rf_mdm_seq *q);
/* The result (as rf_generate_mdm's) and q freed. 0, or -1. */
int rf_mdm_seq_finish(rf_mdm_seq *q, rf_gen_result *out);
/* Drop a machine, finished or not (NULL: nothing). */
void rf_mdm_seq_free(rf_mdm_seq *q);

#endif
