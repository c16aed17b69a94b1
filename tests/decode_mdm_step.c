/* decode_mdm_step.c - MDM driven one call at a time (the rf_mdm_seq step
 * machine of decode/mdm.h), several generations as calls of one forward
 * pass (rf_forward_calls: each its own cache, its bidirectional pass), as
 * the server's scheduler runs them, beside plan-and-infill machines.
 *
 *  - every MDM generation's answer, call count and per-step statistics are
 *    exactly rf_generate_mdm's alone: greedy and sampled, one to four
 *    blocks, step budgets from one per block to one per token, early stop
 *    on and off, joining at different steps; on random f32 models, whose
 *    logits differ from position to position (a logits row taken from the
 *    wrong place changes the answer);
 *  - the step interface: a finished machine stepped again hands out no call
 *    and refuses logits (-1) without changing its answer; logits before any
 *    call are refused; a raised cancel flag refuses the next call; a step
 *    budget below the block count is refused as rf_generate_mdm refuses it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "decode/refusion_step.h"
#include "helpers/small_config.h"
#include "model/forward.h"

#define NSEQ 6
#define MAXT 2048

typedef struct {
    const int *prompt;
    int n_prompt, join;
    rf_params p;
    rf_mdm_params mp;
} mdm_case;

static rf_params mdm(int gen, int blocks) {
    rf_params p;
    rf_gen_params_default(&p);
    p.method = RF_METHOD_MDM, p.gen_length = gen, p.n_blocks = blocks;
    return p;
}

/* the cases together (with a plan-and-infill machine beside them), one
 * pass per step, each against its solo run */
static void run(const rf_model *m, const mdm_case *cs, int n, const char *what) {
    const int V = m->cfg.vocab_size;
    rf_gen_result solo[NSEQ];
    for (int i = 0; i < n; i++)
        CHECK(rf_generate_mdm(m, cs[i].prompt, cs[i].n_prompt, &cs[i].p, &cs[i].mp, &solo[i]) == 0, "%s: solo %d: %s",
              what, i, rf_last_error());
    rf_params pp;
    rf_gen_params_default(&pp);
    pp.gen_length = 24, pp.slot_size = 4, pp.n_blocks = 2, pp.eos_id = -1;
    rf_gen_result pi_solo;
    CHECK(rf_generate_refusion(m, cs[0].prompt, cs[0].n_prompt, &pp, &pi_solo) == 0, "%s: pi solo: %s", what,
          rf_last_error());
    rf_pi_seq *pq = rf_pi_seq_new(m, cs[0].prompt, cs[0].n_prompt, &pp);
    rf_mdm_seq *q[NSEQ] = {0};
    int done[NSEQ] = {0}, row[NSEQ], pi_row = -1, pi_done = 0, max_calls = 0;
    rf_runstate *rs = rf_runstate_new(&m->cfg, MAXT, m->cfg.max_pos);
    float *logits = malloc((size_t)MAXT * V * sizeof(float));
    rf_kvcache *kv[NSEQ + 1];
    rf_batch calls[NSEQ + 1];
    for (int step = 0; step < 2000; step++) {
        for (int i = 0; i < n; i++)
            if (cs[i].join == step) {
                q[i] = rf_mdm_seq_new(m, cs[i].prompt, cs[i].n_prompt, &cs[i].p, &cs[i].mp);
                CHECK(q[i] != NULL, "%s: new %d: %s", what, i, rf_last_error());
            }
        int nc = 0, nl = 0;
        rf_step_call c;
        for (int i = 0; i < n; i++) {
            row[i] = -1;
            if (!q[i] || done[i]) continue;
            int k = rf_mdm_seq_next(q[i], 1, &c);
            CHECK(k > 0 && c.b.bidirectional, "%s: sequence %d: %d tokens before it was done", what, i, k);
            if (k <= 0) continue;
            row[i] = nl, kv[nc] = c.kv, calls[nc++] = c.b, nl += c.b.n_logits;
        }
        pi_row = -1;
        if (pq && !pi_done && rf_pi_seq_next(pq, 64, &c) > 0) pi_row = nl, kv[nc] = c.kv, calls[nc++] = c.b, nl += c.b.n_logits;
        if (!nc) break;
        if (nc > max_calls) max_calls = nc;
        rf_call_batch b = {nc, kv, calls, logits};
        if (rf_forward_calls(m, rs, &b, NULL)) {
            CHECK(0, "%s: forward: %s", what, rf_last_error());
            break;
        }
        for (int i = 0; i < n; i++)
            if (row[i] >= 0) done[i] = rf_mdm_seq_after(q[i], logits + (size_t)row[i] * V) != 0;
        if (pi_row >= 0) pi_done = rf_pi_seq_after(pq, logits + (size_t)pi_row * V) != 0;
    }
    CHECK(max_calls >= 3, "%s: at most %d generations shared a pass", what, max_calls);
    for (int i = 0; i < n; i++) {
        rf_gen_result r;
        CHECK(done[i], "%s: sequence %d never finished", what, i);
        if (!q[i] || rf_mdm_seq_finish(q[i], &r)) {
            CHECK(0, "%s: finish %d: %s", what, i, rf_last_error());
        } else {
            const rf_gen_result *s = &solo[i];
            int same_steps = r.n_steps == s->n_steps;
            for (int k = 0; same_steps && k < r.n_steps; k++)
                same_steps = !memcmp(&r.steps[k], &s->steps[k], sizeof r.steps[k]);
            CHECK(r.n_ids == s->n_ids && !memcmp(r.ids, s->ids, (size_t)r.n_ids * sizeof(int)) &&
                      r.n_calls == s->n_calls && same_steps,
                  "%s: sequence %d: %d ids / %d calls batched, %d / %d alone", what, i, r.n_ids, r.n_calls, s->n_ids,
                  s->n_calls);
            rf_gen_result_free(&r);
        }
        rf_gen_result_free(&solo[i]);
    }
    rf_gen_result pr;
    CHECK(pq && pi_done && rf_pi_seq_finish(pq, &pr) == 0, "%s: pi: %s", what, rf_last_error());
    if (pq && pi_done) {
        CHECK(pr.n_ids == pi_solo.n_ids && !memcmp(pr.ids, pi_solo.ids, (size_t)pr.n_ids * sizeof(int)) &&
                  pr.n_calls == pi_solo.n_calls,
              "%s: plan-and-infill beside MDM differs from alone", what);
        rf_gen_result_free(&pr);
    }
    rf_gen_result_free(&pi_solo);
    rf_runstate_free(rs);
    free(logits);
}

/* a finished machine stepped again, logits before any call, cancel, a bad budget */
static void test_interface(const rf_model *m, const int *prompt, int n_prompt) {
    const int V = m->cfg.vocab_size;
    rf_params p = mdm(12, 2);
    rf_mdm_params mp = {6, 1};
    rf_gen_result solo, r;
    CHECK(rf_generate_mdm(m, prompt, n_prompt, &p, &mp, &solo) == 0, "interface: solo: %s", rf_last_error());
    rf_mdm_seq *q = rf_mdm_seq_new(m, prompt, n_prompt, &p, &mp);
    CHECK(q != NULL, "interface: new: %s", rf_last_error());
    if (!q) return;
    float *logits = malloc((size_t)MAXT * V * sizeof(float));
    rf_runstate *rs = rf_runstate_new(&m->cfg, MAXT, m->cfg.max_pos);
    CHECK(rf_mdm_seq_after(q, logits) == -1, "logits before any call were taken");
    rf_step_call c;
    while (!rf_mdm_seq_done(q)) {
        if (rf_mdm_seq_next(q, 1, &c) < 1) break;
        c.b.logits = logits;
        if (rf_forward(m, c.kv, rs, &c.b) || rf_mdm_seq_after(q, logits) < 0) break;
    }
    CHECK(rf_mdm_seq_done(q) && rf_mdm_seq_next(q, 64, &c) == 0, "a finished machine handed out another call");
    CHECK(rf_mdm_seq_after(q, logits) == -1, "a finished machine took logits again");
    CHECK(rf_mdm_seq_finish(q, &r) == 0, "interface: finish: %s", rf_last_error());
    CHECK(r.n_ids == solo.n_ids && !memcmp(r.ids, solo.ids, (size_t)r.n_ids * sizeof(int)) &&
              r.n_calls == solo.n_calls,
          "stepping a finished machine changed its answer");
    rf_gen_result_free(&r), rf_gen_result_free(&solo);
    volatile int flag = 0;
    p.cancel = &flag;
    q = rf_mdm_seq_new(m, prompt, n_prompt, &p, &mp);
    CHECK(q && rf_mdm_seq_next(q, 64, &c) > 0, "cancel: no first call");
    flag = 1;
    CHECK(q && rf_mdm_seq_next(q, 64, &c) == -1, "cancel: a call was handed out after the flag");
    rf_mdm_seq_free(q);
    p.cancel = NULL;
    mp.steps = 1;
    CHECK(rf_mdm_seq_new(m, prompt, n_prompt, &p, &mp) == NULL && strstr(rf_last_error(), "steps"), "steps 1: %s",
          rf_last_error());
    rf_runstate_free(rs);
    free(logits);
}

int main(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, 512, 512);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    static const int p0[] = {5}, p1[] = {1, 400, 2, 401}, p2[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 1.5f, 91);
    mdm_case cs[NSEQ];
    cs[0] = (mdm_case){p2, 9, 0, mdm(16, 1), {16, 1}};
    cs[1] = (mdm_case){p1, 4, 0, mdm(20, 2), {6, 0}};
    cs[1].p.temperature = 0.9f, cs[1].p.seed = 3;
    cs[2] = (mdm_case){p0, 1, 1, mdm(24, 4), {4, 1}};
    cs[3] = (mdm_case){p2, 9, 2, mdm(13, 3), {9, 1}};
    cs[3].p.temperature = 0.5f, cs[3].p.seed = 8;
    cs[4] = (mdm_case){p1, 4, 4, mdm(8, 1), {8, 0}};
    cs[5] = (mdm_case){p0, 1, 3, mdm(30, 2), {12, 1}};
    for (int i = 0; i < NSEQ; i++) cs[i].p.eos_id = i % 2 ? -1 : RF_TOKEN_FROM_MODEL;
    run(&m, cs, NSEQ, "random f32");
    test_interface(&m, p2, 9);
    rf_model_free(&m);
    return check_summary("decode_mdm_step");
}
