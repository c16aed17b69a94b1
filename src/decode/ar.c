/* ar.c - plain autoregressive decoding with the KV cache: the baseline.
 *
 * Every real token's logits predict the next token. The prompt is prefilled
 * (in chunks, counted as one model call whose last logits give the first
 * answer token); then each call feeds the token just produced. Stops after
 * gen_length tokens or after an EOS (which is part of the answer). Sampling:
 * greedy at temperature 0, else softmax(l / T) cut to top_k / top_p / min_p;
 * the penalties first (rf_sample_token). With p->constraint the grammar
 * masks each row first (decode/constraint.h). */
#include <stdlib.h>
#include <string.h>

#include "decode/constraint.h"
#include "decode/decode_impl.h"
#include "model/forward.h"

int rf_generate_ar(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                   rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    if (rf_gen_check(m, prompt, n_prompt, p, 1)) return -1;
    const int V = m->cfg.vocab_size, G = p->gen_length, eos = gen_eos_id(m, p);
    const int chunk = n_prompt < 256 ? n_prompt : 256;
    rf_kvcache kv;
    rf_workspace_kv_init(p->ws, &kv, &m->cfg, n_prompt + G);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, chunk, n_prompt + G);
    float *logits = rf_scoped_malloc((size_t)V * sizeof(float));
    int *pos = rf_scoped_malloc((size_t)chunk * sizeof(int));
    rf_rng rng;
    rf_rng_seed(&rng, p->seed);
    rf_answer ans;
    ans_init(&ans, p, G, eos);
    rf_constraint_run *cr = p->constraint ? rf_constraint_run_new(p->constraint, eos, V) : NULL;

    /* prefill; the last prompt token's logits give the first answer token */
    int rc = p->constraint && !cr ? -1 : gen_prefill(m, &kv, rs, prompt, n_prompt, chunk, pos, logits, &ans);
    rf_step_stat *st = rc ? NULL : &ans.steps[ans.n_steps - 1];
    for (int i = 0; i < G && rc == 0; i++) {
        if (cr && rf_constraint_run_mask(cr, logits)) {
            rc = -1;
            break;
        }
        int t = rf_sample_token(logits, V, p, prompt, n_prompt, ans.tok, i, &rng);
        if (cr && rf_constraint_run_accept(cr, t)) {
            rc = -1;
            break;
        }
        ans_fill(&ans, i, t);
        st->tpf_ref = 1.0;
        ans_event(&ans, RF_EV_AR_TOKEN, i, 1, &i, &t, NULL);
        ans_flush(&ans);
        if (t == eos || i + 1 == G) break;
        st = ans_step(&ans, 0);
        int ps = n_prompt + i, zero = 0;
        rf_batch b = {1, 1, &t, &ps, 0, 1, &zero, logits};
        rc = gen_cancelled(p) ? -1 : rf_workspace_forward(p->ws, m, &kv, rs, &b);
        ans.n_calls++;
        st->calls++;
    }
    rf_constraint_run_free(cr);
    rf_scoped_free(logits), rf_scoped_free(pos);
    rf_workspace_runstate_free(p->ws, rs);
    rf_kv_free(&kv);
    return ans_end(&ans, rc, n_prompt, out);
}
