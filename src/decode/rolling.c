/* rolling.c - ReFusion with a rolling slot (beyond the paper).
 *
 * The reference plans a slot (one call: its masks give drafts), then verifies
 * and infills it (more calls), then plans the next. Here the two overlap:
 * every model call feeds, at consecutive positions,
 *
 *     [ last committed token | drafts d_0 .. d_{k-1} | W masks ]
 *
 * and does three things at once. The AR head (the logits of each fed real
 * token) checks the drafts left to right; the masks, which see the drafts,
 * draft the next slot as the ReFusion objective trained them to; and the
 * first token the AR head disagrees with is committed as the AR head's
 * choice. So a call commits j + 1 tokens when j drafts pass. The cache keeps
 * what was fed up to the last accepted draft (attention is causal, so those
 * entries are exactly what plain AR decoding would have cached) and drops
 * the rest.
 *
 * A draft passes when it IS the token AR decoding would commit at its
 * position: the AR head's token is drawn there exactly as rf_generate_ar
 * draws it (rf_sample_token with the same settings, the same history - prompt
 * and the answer before it - and the same RNG, one draw per answer position
 * in order), and the draft is compared with it.
 * The answer is therefore identical to AR decoding's with the same settings
 * and seed, token for token: ReFusion here only changes how many tokens one
 * call yields (tests/decode_rolling.c checks this on random models).
 *
 * Drafts for the next call: when every fed draft passed, the masks behind
 * them saw the right prefix: their argmaxes (from the second mask on; the
 * first mask's position is the token just committed) are the new drafts.
 * When a draft failed, the drafts after it were conditioned on a wrong token;
 * the first few of them still pass about half of the time (measured on the
 * demo model), so up to STALE_DRAFTS of them are fed again. Drafts are fed
 * only while the mask head's probability for them exceeds slot_threshold
 * (the plan's rule for starting a slot). With W = slot_size masks per call a
 * call holds at most 1 + (W - 1) + W tokens. */
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "model/forward.h"

/* drafts kept after a failed one (demo model, slot 4: 1 -> 2.84 tokens per
 * call, 2 -> 2.88, all -> 2.90 with wider calls) */
enum { STALE_DRAFTS = 2 };

int rf_generate_rolling(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                        rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    if (rf_gen_check(m, prompt, n_prompt, p, 1)) return -1;
    const int V = m->cfg.vocab_size, G = p->gen_length, eos = gen_eos_id(m, p), mask = gen_mask_id(m, p);
    const int W = p->slot_size, chunk = n_prompt < 256 ? n_prompt : 256;
    const int cap = chunk > 2 * W ? chunk : 2 * W; /* tokens one call may hold */
    rf_kvcache kv;
    rf_workspace_kv_init(p->ws, &kv, &m->cfg, n_prompt + G);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, cap, n_prompt + G);
    float *logits = rf_scoped_malloc((size_t)cap * V * sizeof(float));
    int *tok = rf_scoped_malloc((size_t)cap * sizeof(int)), *pos = rf_scoped_malloc((size_t)cap * sizeof(int));
    int *lidx = rf_scoped_malloc((size_t)cap * sizeof(int));
    /* drafts for answer positions n_ans, n_ans + 1, ...; fresh: made by masks
     * that saw only accepted tokens */
    int *draft = rf_scoped_malloc((size_t)2 * W * sizeof(int)), nd = 0, fresh = 0;
    float *conf = rf_scoped_malloc((size_t)2 * W * sizeof(float));
    int *ap = rf_scoped_malloc((size_t)2 * W * sizeof(int));
    rf_rng rng;
    rf_rng_seed(&rng, p->seed);
    rf_answer ans;
    ans_init(&ans, p, G, eos);
    int n_ans = 0, done = 0, step = 0;

    /* the prefill is the first call: no drafts, no masks; the last prompt
     * token's logits give the first answer token */
    int rc = gen_prefill(m, &kv, rs, prompt, n_prompt, chunk, pos, logits, &ans);
    rf_step_stat *st = &ans.steps[ans.n_steps - 1];
    int k = 0, w = 0, base = kv.len - 1; /* as if the last prompt token were fed: nothing to crop */
    while (rc == 0) {
        /* the AR head's token at each draft's position, drawn as AR decoding
         * draws it; drafts pass while they match. The first mismatch (or,
         * with every draft passed, the position after them) gets the drawn
         * token. */
        int j = 0, a0 = n_ans;
        for (;;) {
            int t = rf_sample_token(logits + (size_t)j * V, V, p, prompt, n_prompt, ans.tok, n_ans, &rng);
            int pass = j < k && draft[j] == t;
            ans_fill(&ans, n_ans, t);
            ans_count_how(&ans, pass ? HOW_VERIFIED : HOW_FORCED_AR);
            n_ans++;
            if (t == eos || n_ans >= G) done = 1;
            if (!pass || done) break;
            j++;
        }
        int n_new = n_ans - a0;
        st->tokens = n_new, st->tpf_ref = n_new;
        if (p->on_event) {
            for (int i = 0; i < n_new; i++) ap[i] = a0 + i;
            ans_event(&ans, RF_EV_INFILL_COMMIT, step, n_new, ap, ans.tok + a0, NULL);
        }
        step++;
        ans_flush(&ans);
        if (done) break;
        /* keep the fed token and the passed drafts (j of them: the last
         * committed token is fed by the next call) */
        rf_kv_crop(&kv, base + 1 + j);
        /* next drafts, for answer positions n_ans.. */
        int nn = 0;
        if (j < k) /* stale: the drafts after the failed one, then the masks' */
            for (int i = j + 1; i < k; i++) draft[nn] = draft[i], conf[nn++] = conf[i];
        for (int i = j < k ? 0 : 1; i < w; i++) {
            const float *l = logits + (size_t)(1 + k + i) * V;
            rf_logit_stats s = rf_logits_stats(l, V);
            draft[nn] = s.argmax, conf[nn++] = (float)rf_logit_prob(l, &s, s.argmax);
        }
        nd = nn, fresh = j == k;

        st = ans_step(&ans, 0);
        /* feed: the last committed token, the drafts for the next answer
         * positions (while confident; fewer when stale), W masks; nothing
         * past the answer's end */
        int room = G - n_ans;
        k = nd < W - 1 ? nd : W - 1;
        if (!fresh && k > STALE_DRAFTS) k = STALE_DRAFTS;
        if (k > room) k = room;
        for (int i = 0; i < k; i++)
            if (!(conf[i] > p->slot_threshold)) {
                k = i;
                break;
            }
        w = room - k < W ? room - k : W, base = kv.len;
        int n = 1 + k + w;
        tok[0] = ans.tok[n_ans - 1];
        memcpy(tok + 1, draft, (size_t)k * sizeof(int));
        for (int i = 0; i < w; i++) tok[1 + k + i] = mask;
        for (int i = 0; i < n; i++) pos[i] = n_prompt + n_ans - 1 + i, lidx[i] = i;
        if (p->on_event) {
            for (int i = 0; i < k; i++) ap[i] = n_ans + i;
            ans_event(&ans, RF_EV_PLAN, step, k, ap, draft, NULL);
        }
        rf_batch b = {1, n, tok, pos, 0, n, lidx, logits};
        rc = gen_cancelled(p) ? -1 : rf_forward(m, &kv, rs, &b);
        if (rc) break;
        ans.n_calls++;
        st->calls++;
    }
    rf_scoped_free(logits), rf_scoped_free(tok), rf_scoped_free(pos), rf_scoped_free(lidx), rf_scoped_free(draft), rf_scoped_free(conf), rf_scoped_free(ap);
    rf_workspace_runstate_free(p->ws, rs);
    rf_kv_free(&kv);
    if (rc) {
        ans_free(&ans);
        return -1;
    }
    return ans_finish(&ans, n_prompt, out);
}
