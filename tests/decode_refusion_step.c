/* decode_refusion_step.c - plan-and-infill driven one call at a time
 * (decode/refusion_step.h), several generations as calls of one forward pass
 * (rf_forward_calls: each its own cache, forked rows included), as the
 * server's scheduler runs them.
 *
 *  - every generation's answer, call count, per-step statistics, accept
 *    statistics, streamed tokens and events are exactly rf_generate_refusion's
 *    for it alone: greedy and sampled, slots of 1 to 8, one to four blocks,
 *    AR verification (a), (b) and both, lookahead, jacobi; joining at
 *    different steps, a 300-token prompt prefilled in chunks under a prompt
 *    budget while the others decode; on the demo model (a trained mask
 *    head: fast commits) and on random f32 models (infilling, EOS anywhere);
 *    calls with forked rows really share passes with other calls;
 *  - the step interface: a finished machine stepped again hands out no call
 *    and refuses logits (-1) without changing its answer; logits given
 *    before any call are refused; a raised cancel flag refuses the next
 *    call; bad settings are refused as rf_generate_refusion refuses them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/demo_model.h"
#include "decode/decode.h"
#include "decode/refusion_step.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

#define NSEQ 8
#define MAXT 4096

typedef struct {
    int ids[512], n;   /* streamed through on_tokens */
    int events[8];     /* tokens reported per event kind */
    int n_events;
    unsigned long hash; /* of every event's kind, step, positions, tokens and flags, in order */
} trace;

static void on_tokens(const int *ids, int n, void *user) {
    trace *s = user;
    for (int i = 0; i < n && s->n < 512; i++) s->ids[s->n++] = ids[i];
}

static void on_event(const rf_event *ev, void *user) {
    trace *s = user;
    s->n_events++;
    if ((int)ev->kind >= 0 && (int)ev->kind < 8) s->events[ev->kind] += ev->n;
    unsigned long h = s->hash * 1000003u + (unsigned long)ev->kind * 31u + (unsigned long)ev->step;
    for (int i = 0; i < ev->n; i++) {
        h = h * 31u + (unsigned long)ev->apos[i];
        if (ev->tok) h = h * 31u + (unsigned long)ev->tok[i];
        if (ev->accepted) h = h * 31u + ev->accepted[i];
    }
    s->hash = h;
}

typedef struct {
    const int *prompt;
    int n_prompt, join;
    rf_params p;
} seq_case;

static rf_params pi(int gen, int slot, int blocks) {
    rf_params p;
    rf_gen_params_default(&p);
    p.method = RF_METHOD_REFUSION, p.rolling = 0;
    p.gen_length = gen, p.slot_size = slot, p.n_blocks = blocks;
    return p;
}

static int first_diff(const int *a, int na, const int *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* the generation's result against its solo run */
static void compare(const char *what, int i, const rf_gen_result *r, const rf_gen_result *s, const trace *tr,
                    const trace *ts) {
    CHECK(r->n_ids == s->n_ids && r->hit_eos == s->hit_eos && !memcmp(r->ids, s->ids, (size_t)r->n_ids * sizeof(int)),
          "%s: sequence %d: %d ids batched, %d alone, first difference at %d", what, i, r->n_ids, s->n_ids,
          first_diff(r->ids, r->n_ids, s->ids, s->n_ids));
    int same_steps = r->n_steps == s->n_steps;
    for (int k = 0; same_steps && k < r->n_steps; k++)
        same_steps = !memcmp(&r->steps[k], &s->steps[k], sizeof r->steps[k]);
    CHECK(r->n_calls == s->n_calls && same_steps, "%s: sequence %d: %d calls / %d steps batched, alone %d / %d", what,
          i, r->n_calls, r->n_steps, s->n_calls, s->n_steps);
    CHECK(!memcmp(&r->accept, &s->accept, sizeof r->accept), "%s: sequence %d: accept statistics differ", what, i);
    CHECK(tr->n == r->n_ids && !memcmp(tr->ids, r->ids, (size_t)r->n_ids * sizeof(int)),
          "%s: sequence %d: streamed %d tokens of %d", what, i, tr->n, r->n_ids);
    CHECK(tr->n_events == ts->n_events && !memcmp(tr->events, ts->events, sizeof tr->events) &&
              tr->hash == ts->hash,
          "%s: sequence %d: %d events batched, %d alone", what, i, tr->n_events, ts->n_events);
}

/* Run the cases together, one pass per step (budget: prompt tokens per pass
 * besides the first chunk), and compare each with its solo run. */
static void run(const rf_model *m, const seq_case *cs, int n, int budget, const char *what) {
    const int V = m->cfg.vocab_size;
    rf_gen_result solo[NSEQ];
    trace ts[NSEQ], tb[NSEQ];
    memset(ts, 0, sizeof ts), memset(tb, 0, sizeof tb);
    for (int i = 0; i < n; i++) {
        rf_params p = cs[i].p;
        p.on_tokens = on_tokens, p.on_event = on_event, p.user = &ts[i];
        CHECK(rf_generate_refusion(m, cs[i].prompt, cs[i].n_prompt, &p, &solo[i]) == 0, "%s: solo %d: %s", what, i,
              rf_last_error());
    }
    rf_pi_seq *q[NSEQ] = {0};
    int done[NSEQ] = {0}, row[NSEQ];
    rf_params ps[NSEQ];
    rf_runstate *rs = rf_runstate_new(&m->cfg, MAXT, m->cfg.max_pos);
    float *logits = malloc((size_t)MAXT * V * sizeof(float));
    rf_kvcache *kv[NSEQ];
    rf_batch calls[NSEQ];
    int max_calls = 0, shared_forked = 0;
    for (int step = 0; step < 4000; step++) {
        for (int i = 0; i < n; i++)
            if (cs[i].join == step) {
                ps[i] = cs[i].p;
                ps[i].on_tokens = on_tokens, ps[i].on_event = on_event, ps[i].user = &tb[i];
                q[i] = rf_pi_seq_new(m, cs[i].prompt, cs[i].n_prompt, &ps[i]);
                CHECK(q[i] != NULL, "%s: new %d: %s", what, i, rf_last_error());
            }
        int nc = 0, T = 0, nl = 0, left = budget, forked = 0;
        for (int i = 0; i < n; i++) {
            row[i] = -1;
            if (!q[i] || done[i]) continue;
            rf_step_call c;
            int k = rf_pi_seq_next(q[i], left > 0 ? left : 1, &c);
            CHECK(k > 0, "%s: sequence %d handed out %d tokens before it was done", what, i, k);
            if (k <= 0) continue;
            if (c.b.n_logits == 0) left -= k; /* prompt chunks share the budget */
            forked += c.b.n_rows > 1;
            row[i] = nl;
            kv[nc] = c.kv, calls[nc++] = c.b;
            T += k, nl += c.b.n_logits;
        }
        if (!nc) break;
        CHECK(T <= MAXT, "%s: %d tokens in one pass", what, T);
        if (nc > max_calls) max_calls = nc;
        if (forked && nc >= 2) shared_forked++;
        rf_call_batch b = {nc, kv, calls, logits};
        if (rf_forward_calls(m, rs, &b, NULL)) {
            CHECK(0, "%s: forward: %s", what, rf_last_error());
            break;
        }
        for (int i = 0; i < n; i++) {
            if (row[i] < 0) continue;
            int r = rf_pi_seq_after(q[i], logits + (size_t)row[i] * V);
            CHECK(r >= 0, "%s: sequence %d: after: %s", what, i, rf_last_error());
            done[i] = r != 0;
        }
    }
    CHECK(max_calls >= 3, "%s: at most %d generations shared a pass", what, max_calls);
    CHECK(shared_forked >= 3, "%s: only %d passes had forked rows beside other calls", what, shared_forked);
    for (int i = 0; i < n; i++) {
        rf_gen_result r;
        CHECK(done[i], "%s: sequence %d never finished", what, i);
        if (!q[i] || rf_pi_seq_finish(q[i], &r)) {
            CHECK(0, "%s: finish %d: %s", what, i, rf_last_error());
        } else {
            compare(what, i, &r, &solo[i], &tb[i], &ts[i]);
            rf_gen_result_free(&r);
        }
        rf_gen_result_free(&solo[i]);
    }
    rf_runstate_free(rs);
    free(logits);
}

/* Drive q alone to its end with rf_forward: its call count (-1: failed). */
static int drive(const rf_model *m, rf_pi_seq *q, float *logits, rf_runstate *rs) {
    int calls = 0;
    while (!rf_pi_seq_done(q)) {
        rf_step_call c;
        if (rf_pi_seq_next(q, rf_pi_seq_width(q), &c) < 1) return -1;
        c.b.logits = logits;
        if (rf_forward(m, c.kv, rs, &c.b)) return -1;
        if (rf_pi_seq_after(q, c.b.n_logits ? logits : NULL) < 0) return -1;
        calls++;
    }
    return calls;
}

/* The interface's edges: a finished machine stepped again, logits before
 * any call, cancel, bad settings. */
static void test_interface(const rf_model *m, const int *prompt, int n_prompt) {
    const int V = m->cfg.vocab_size;
    rf_params p = pi(16, 4, 2);
    p.ar_check_first = 1;
    rf_gen_result solo, r;
    CHECK(rf_generate_refusion(m, prompt, n_prompt, &p, &solo) == 0, "interface: solo: %s", rf_last_error());
    rf_pi_seq *q = rf_pi_seq_new(m, prompt, n_prompt, &p);
    CHECK(q != NULL, "interface: new: %s", rf_last_error());
    if (!q) return;
    float *logits = malloc((size_t)MAXT * V * sizeof(float));
    rf_runstate *rs = rf_runstate_new(&m->cfg, MAXT, m->cfg.max_pos);
    CHECK(rf_pi_seq_after(q, logits) == -1, "logits before any call were taken");
    CHECK(drive(m, q, logits, rs) > 0, "interface: drive: %s", rf_last_error());
    rf_step_call c;
    CHECK(rf_pi_seq_done(q) && rf_pi_seq_next(q, 64, &c) == 0, "a finished machine handed out another call");
    for (int i = 0; i < V; i++) logits[i] = i == 7 ? 50.0f : 0.0f;
    CHECK(rf_pi_seq_after(q, logits) == -1 && strstr(rf_last_error(), "no call"),
          "a finished machine took logits again (%s)", rf_last_error());
    CHECK(rf_pi_seq_finish(q, &r) == 0, "interface: finish: %s", rf_last_error());
    CHECK(r.n_ids == solo.n_ids && !memcmp(r.ids, solo.ids, (size_t)r.n_ids * sizeof(int)) &&
              r.n_calls == solo.n_calls,
          "stepping a finished machine changed its answer (%d ids, %d calls; alone %d, %d)", r.n_ids, r.n_calls,
          solo.n_ids, solo.n_calls);
    rf_gen_result_free(&r), rf_gen_result_free(&solo);

    volatile int flag = 0;
    p.cancel = &flag;
    q = rf_pi_seq_new(m, prompt, n_prompt, &p);
    CHECK(q && rf_pi_seq_next(q, 64, &c) > 0, "cancel: no first call");
    flag = 1;
    CHECK(q && rf_pi_seq_next(q, 64, &c) == -1 && strstr(rf_last_error(), "cancel"),
          "cancel: a call was handed out after the flag");
    rf_pi_seq_free(q);
    p.cancel = NULL;
    p.slot_size = 0;
    CHECK(rf_pi_seq_new(m, prompt, n_prompt, &p) == NULL && strstr(rf_last_error(), "slot_size"), "slot 0: %s",
          rf_last_error());
    rf_runstate_free(rs);
    free(logits);
}

/* the demo model (a trained mask head: drafts pass, fast commits) */
static void test_demo(void) {
    char dir[4096];
    rf_model m;
    rf_tokenizer *tok;
    if (rf_test_demo_load_chat(&m, &tok, dir, sizeof dir)) return;
    int *pr[RF_TEST_DEMO_QUESTIONS], np[RF_TEST_DEMO_QUESTIONS];
    rf_test_demo_prompts(tok, pr, np);
    static int longp[300];
    for (int i = 0; i < 300; i++) longp[i] = pr[0] ? pr[0][i % np[0]] : 5;
    seq_case cs[NSEQ];
    cs[0] = (seq_case){pr[0], np[0], 0, pi(48, 4, 1)};
    cs[1] = (seq_case){pr[1], np[1], 0, pi(48, 4, 2)};
    cs[1].p.temperature = 0.7f, cs[1].p.seed = 5;
    cs[2] = (seq_case){pr[2], np[2], 1, pi(48, 4, 3)};
    cs[2].p.ar_correct = 1, cs[2].p.ar_check_first = 1;
    cs[3] = (seq_case){pr[3], np[3], 2, pi(40, 8, 1)};
    cs[3].p.ar_correct = 1, cs[3].p.lookahead = 1, cs[3].p.jacobi = 1;
    cs[4] = (seq_case){longp, 300, 3, pi(32, 4, 2)};
    cs[5] = (seq_case){pr[0], np[0], 4, pi(36, 3, 2)};
    cs[5].p.lookahead = 1, cs[5].p.ar_check_first = 1, cs[5].p.slot_threshold = 0.3f;
    cs[6] = (seq_case){pr[2], np[2], 6, pi(24, 2, 4)};
    cs[6].p.ar_correct = 1, cs[6].p.token_threshold = 0.9f;
    cs[7] = (seq_case){pr[1], np[1], 5, pi(20, 1, 2)};
    cs[7].p.temperature = 0.9f, cs[7].p.seed = 11;
    run(&m, cs, NSEQ, 64, "demo, budget 64");
    run(&m, cs, NSEQ, 512, "demo, budget 512");
    if (pr[0]) test_interface(&m, pr[0], np[0]);
    for (int k = 0; k < RF_TEST_DEMO_QUESTIONS; k++) free(pr[k]);
    rf_tok_free(tok);
    rf_model_free(&m);
}

/* random models: few drafts pass (infilling), EOS anywhere */
static void test_random(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, 512, 512);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    static const int p0[] = {5}, p1[] = {1, 400, 2, 401}, p2[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 1.5f, 90);
    seq_case cs[6];
    cs[0] = (seq_case){p2, 9, 0, pi(40, 4, 2)};
    cs[1] = (seq_case){p1, 4, 0, pi(33, 8, 1)};
    cs[1].p.temperature = 0.9f, cs[1].p.seed = 4;
    cs[2] = (seq_case){p0, 1, 1, pi(30, 3, 3)};
    cs[2].p.ar_correct = 1, cs[2].p.ar_check_first = 1, cs[2].p.token_threshold = 0.05f;
    cs[3] = (seq_case){p2, 9, 3, pi(24, 4, 1)};
    cs[3].p.ar_correct = 1, cs[3].p.jacobi = 1, cs[3].p.lookahead = 1, cs[3].p.slot_threshold = 0.0f;
    cs[4] = (seq_case){p1, 4, 5, pi(25, 5, 2)};
    cs[4].p.slot_threshold = 0.0f, cs[4].p.token_threshold = 0.01f;
    cs[5] = (seq_case){p0, 1, 2, pi(16, 2, 1)};
    for (int i = 0; i < 6; i++) cs[i].p.eos_id = i % 2 ? -1 : RF_TOKEN_FROM_MODEL;
    run(&m, cs, 6, 64, "random f32");
    test_interface(&m, p2, 9);
    rf_model_free(&m);
}

int main(void) {
    test_demo();
    test_random();
    return check_summary("decode_refusion_step");
}
