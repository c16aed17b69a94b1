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
 * Parameters come from rf_gen_params (gen_length, n_blocks, temperature,
 * seed, eos_id, mask_id, on_tokens) plus the step budget below. Results use
 * rf_gen_result like the other decoders: the answer up to and including the
 * first EOS, model calls (one per step), TPF (mean over steps of tokens
 * unmasked per call), tokens/s. */
#ifndef RF_MDM_H
#define RF_MDM_H

#include "decode/decode.h"

/* rf_mdm_params (steps, early_stop) is in decode/decode.h, beside rf_decode. */

/* steps = gen_length (one token per step, LLaDA's most accurate setting
 * when steps == gen_length is asked for), early_stop = 1. */
void rf_mdm_params_default(rf_mdm_params *mp, const rf_gen_params *p);

/* LLaDA's get_num_transfer_tokens for one block: n masked tokens over s
 * steps, base n / s each, the first n % s steps one more. out: [s]. */
void rf_mdm_schedule(int n, int s, int *out);

/* 0, or -1 with rf_last_error() (bad params: see rf_gen_check; steps < 1). */
int rf_generate_mdm(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                    const rf_mdm_params *mp, rf_gen_result *out);

#endif
