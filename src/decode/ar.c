/* ar.c - plain autoregressive decoding with the KV cache: the baseline.
 *
 * Every real token's logits predict the next token. The prompt is prefilled
 * (in chunks, counted as one model call whose last logits give the first
 * answer token); then each call feeds the token just produced. Stops after
 * gen_length tokens or after an EOS (which is part of the answer). Sampling:
 * greedy at temperature 0, else softmax(l / T) cut to top_k / top_p / min_p;
 * the penalties first (rf_sample_token). With p->constraint the grammar
 * masks each row first (decode/constraint.h). With p->logprobs each token's
 * log-probabilities are those of the model's row, before any of that.
 *
 * The decoding itself is the step machine of ar_step.c (the one the
 * server's scheduler runs as a row of its batched calls); this is its
 * driver alone: each call the machine asks for, made on p->ws's run state,
 * until the answer is complete. */
#include <stdlib.h>
#include <string.h>

#include "decode/ar_step.h"
#include "decode/decode_impl.h"
#include "model/forward.h"

enum { PREFILL_CHUNK = 256 }; /* ar_step.c's chunk: the widest call */

int rf_generate_ar(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                   rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    rf_ar_seq *q = rf_ar_seq_new(m, prompt, n_prompt, p);
    if (!q) return -1;
    const int V = m->cfg.vocab_size, chunk = n_prompt < PREFILL_CHUNK ? n_prompt : PREFILL_CHUNK;
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, chunk, n_prompt + p->gen_length);
    float *logits = rf_scoped_malloc((size_t)V * sizeof(float));
    int *pos_buf = rf_scoped_malloc((size_t)chunk * sizeof(int));
    int rc = 0;
    while (!rf_ar_seq_done(q)) {
        const int *tok, *pos;
        int n = rf_ar_seq_next(q, chunk, &tok, &pos, pos_buf);
        if (n < 1) {
            rc = -1;
            break;
        }
        int last = n - 1, nl = rf_ar_seq_wants_logits(q);
        rf_batch b = {1, n, tok, pos, 0, nl, &last, logits};
        if ((rc = rf_forward(m, rf_ar_seq_kv(q), rs, &b))) break;
        rf_ar_seq_after(q, nl ? logits : NULL);
    }
    rf_scoped_free(logits), rf_scoped_free(pos_buf);
    rf_workspace_runstate_free(p->ws, rs);
    if (rc) {
        rf_ar_seq_free(q);
        return -1;
    }
    return rf_ar_seq_finish(q, out);
}
