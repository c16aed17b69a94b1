/* mdm.c - LLaDA-style masked-diffusion decoding (see mdm.h).
 *
 * What LLaDA's generate does, in our words: x = prompt followed by
 * gen_length masks. For each block (left to right), for each of its steps:
 * run the model on all of x; x0 = argmax of (Gumbel-noised, with
 * temperature) logits; p = softmax probability of x0 under the plain logits;
 * confidence = p at the still-masked positions of the current block, -inf
 * everywhere else (earlier blocks are full, later blocks wait); unmask the k
 * positions of highest confidence with their x0. Nothing is ever re-masked.
 *
 * Differences, all of which leave the answer unchanged:
 *  - logits are computed only at the current block's masked positions (the
 *    only ones whose values are used);
 *  - the optional early stop ends as soon as the answer up to its first EOS
 *    is complete (later positions are cut off anyway);
 *  - a block never gets more steps than it has tokens (LLaDA would spend a
 *    model call unmasking nothing).
 * One difference that can change an answer: the mask token itself is never
 * drafted (LLaDA could draft it, leaving the position masked after the
 * schedule ends; a trained model gives it ~0 probability anyway).
 * Blocks: with gen_length not a multiple of n_blocks the last block takes
 * the remainder (LLaDA requires a multiple). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "decode/mdm.h"
#include "model/forward.h"

void rf_mdm_params_default(rf_mdm_params *mp, const rf_gen_params *p) {
    mp->steps = p->gen_length;
    mp->early_stop = 1;
}

void rf_mdm_schedule(int n, int s, int *out) {
    for (int i = 0; i < s; i++) out[i] = n / s + (i < n % s);
}

int rf_generate_mdm(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                    const rf_mdm_params *mp, rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    /* the shared checks, with the slot settings that do not apply neutralised:
     * one-token "slots" make the padded length gen_length itself */
    rf_gen_params q = *p;
    q.slot_size = 1;
    q.slot_threshold = q.token_threshold = 0.0f;
    if (rf_gen_check(m, prompt, n_prompt, &q, 0)) return -1;
    const int G = p->gen_length, P = n_prompt, T = P + G, V = m->cfg.vocab_size;
    int *first = rf_scoped_malloc((size_t)(G + 2) * sizeof(int));
    const int nb = rf_block_layout(G, p->n_blocks, first); /* blocks of whole positions */
    if (mp->steps < nb) {
        rf_set_error("mdm: steps (%d) must be at least the number of blocks (%d)", mp->steps, nb);
        rf_scoped_free(first);
        return -1;
    }
    int max_len = 0;
    for (int b = 0; b < nb; b++)
        if (first[b + 1] - first[b] > max_len) max_len = first[b + 1] - first[b];

    const int mask = gen_mask_id(m, p);
    rf_answer a;
    ans_init(&a, p, G, gen_eos_id(m, p));

    /* x: prompt then the answer region; pos: plain 0..T-1 */
    int *tokens = rf_scoped_malloc((size_t)T * sizeof(int)), *pos = rf_scoped_malloc((size_t)T * sizeof(int));
    for (int i = 0; i < T; i++) {
        tokens[i] = i < P ? prompt[i] : mask;
        pos[i] = i;
    }
    int *idx = rf_scoped_malloc((size_t)max_len * sizeof(int)), *draft = rf_scoped_malloc((size_t)max_len * sizeof(int));
    int *order = rf_scoped_malloc((size_t)max_len * sizeof(int)), *sched = rf_scoped_malloc((size_t)max_len * sizeof(int));
    double *conf = rf_scoped_malloc((size_t)max_len * sizeof(double));
    float *logits = rf_scoped_malloc((size_t)max_len * V * sizeof(float));
    rf_kvcache cache;
    rf_workspace_kv_init(p->ws, &cache, &m->cfg, T);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, T, T);
    rf_rng rng;
    rf_rng_seed(&rng, p->seed);
    int rc = 0;

    for (int b = 0; b < nb && rc == 0; b++) {
        const int b0 = first[b], len = first[b + 1] - b0;
        int sb = mp->steps / nb + (b < mp->steps % nb);
        if (sb > len) sb = len;
        rf_mdm_schedule(len, sb, sched);
        for (int st = 0; st < sb; st++) {
            int n = 0;
            for (int i = b0; i < b0 + len; i++)
                if (a.tok[i] < 0) idx[n++] = P + i;
            /* full recompute: no cache survives from the previous step */
            rf_kv_crop(&cache, 0);
            rf_batch bt = {1, T, tokens, pos, 1, n, idx, logits};
            if (gen_cancelled(p) || rf_workspace_forward(p->ws, m, &cache, rs, &bt)) {
                rc = -1;
                break;
            }
            a.n_calls++;
            rf_step_stat *ss = ans_step(&a, b);
            ss->calls = 1;
            for (int j = 0; j < n; j++) {
                float *l = logits + (size_t)j * V;
                l[mask] = -INFINITY; /* a mask is never an answer token */
                rf_logit_stats ls = rf_logits_stats(l, V);
                draft[j] = p->temperature > 0.0f
                               ? rf_gumbel_argmax(l, V, p->temperature, ls.max, &rng)
                               : ls.argmax;
                conf[j] = rf_logit_prob(l, &ls, draft[j]);
                order[j] = j;
            }
            /* the k most confident, ties to the earlier position: a partial
             * selection sort, k <= n is small */
            int k = sched[st] < n ? sched[st] : n;
            for (int i = 0; i < k; i++) {
                int best = i;
                for (int j = i + 1; j < n; j++)
                    if (conf[order[j]] > conf[order[best]] ||
                        (conf[order[j]] == conf[order[best]] && order[j] < order[best]))
                        best = j;
                int t = order[i];
                order[i] = order[best];
                order[best] = t;
            }
            for (int i = 0; i < k; i++) {
                int j = order[i];
                tokens[idx[j]] = draft[j];
                ans_fill(&a, idx[j] - P, draft[j]);
            }
            ss->tpf_ref = (double)k; /* tokens unmasked per model call */
            ans_flush(&a);
            if (mp->early_stop && a.stopped) break;
        }
        if (mp->early_stop && a.stopped) break;
    }

    rf_workspace_runstate_free(p->ws, rs);
    rf_kv_free(&cache);
    rf_scoped_free(first);
    rf_scoped_free(tokens);
    rf_scoped_free(pos);
    rf_scoped_free(idx);
    rf_scoped_free(draft);
    rf_scoped_free(order);
    rf_scoped_free(sched);
    rf_scoped_free(conf);
    rf_scoped_free(logits);
    return ans_end(&a, rc, P, out);
}
