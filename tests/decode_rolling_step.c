/* decode_rolling_step.c - the rolling slot driven one call at a time
 * (decode/rolling_step.h) with other sequences as rows of one forward call
 * (rf_forward_seqs), as the server's scheduler runs them.
 *
 * Every rolling sequence's answer, call count, per-call statistics, accept
 * statistics and streamed tokens must be exactly rf_generate_rolling's for
 * the sequence alone, and every AR sequence's rf_generate_ar's, while they
 * share calls: rolling sequences (slots of 1 to 8, thresholds 0 to 0.9,
 * greedy and sampled with top-k / top-p / min-p / penalties, the fixed and
 * the adaptive width with a cost table) beside AR ones, joining at
 * different steps, a 300-token prompt prefilled in chunks over several
 * calls while the others decode; on the demo model (a trained mask head:
 * drafts pass, calls of several tokens) and on random f32 and Q8_0 models.
 * Calls of several rolling tokens really share a forward call with other
 * rows. A raised cancel flag stops a rolling sequence with -1.
 * Prompt-prefix reuse (a chat's next turn starting from the cache a
 * finished rolling sequence leaves: its prompt and committed tokens) changes
 * neither a rolling nor an AR sequence's answer or calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/demo_model.h"
#include "decode/ar_step.h"
#include "decode/decode.h"
#include "decode/rolling_step.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

#define NSEQ 7
#define MAXT 2048

typedef struct {
    int ids[128], n; /* streamed through on_tokens */
} stream;

static void on_tokens(const int *ids, int n, void *user) {
    stream *s = user;
    for (int i = 0; i < n && s->n < 128; i++) s->ids[s->n++] = ids[i];
}

typedef struct {
    const int *prompt;
    int n_prompt, join;
    rf_params p; /* p.rolling: a rolling sequence, else AR */
} seq_case;

typedef struct {
    rf_ar_seq *a;
    rf_roll_seq *r;
    int row, nl, done;
} seq_run;

static int first_diff(const int *a, int na, const int *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* Run the cases together (budget: prompt tokens per call) and compare each
 * with its solo run. */
static void run(const rf_model *m, const seq_case *cs, int n, int budget, const char *what) {
    const int V = m->cfg.vocab_size;
    rf_gen_result solo[NSEQ];
    for (int i = 0; i < n; i++) {
        int rc = cs[i].p.rolling ? rf_generate_rolling(m, cs[i].prompt, cs[i].n_prompt, &cs[i].p, &solo[i])
                                 : rf_generate_ar(m, cs[i].prompt, cs[i].n_prompt, &cs[i].p, &solo[i]);
        CHECK(rc == 0, "%s: solo %d: %s", what, i, rf_last_error());
    }
    stream st[NSEQ];
    memset(st, 0, sizeof st);
    seq_run q[NSEQ];
    memset(q, 0, sizeof q);
    rf_runstate *rs = rf_runstate_new(&m->cfg, MAXT, m->cfg.max_pos);
    float *logits = malloc((size_t)MAXT * V * sizeof(float));
    static int tokens[MAXT], pos[MAXT], lidx[MAXT];
    int n_tok[NSEQ], posbuf[256];
    rf_kvcache *kv[NSEQ];
    int max_rows = 0, shared_slot_calls = 0;
    for (int step = 0; step < 2000; step++) {
        for (int i = 0; i < n; i++)
            if (cs[i].join == step) {
                rf_params pi = cs[i].p;
                pi.on_tokens = on_tokens, pi.user = &st[i];
                if (pi.rolling) q[i].r = rf_roll_seq_new(m, cs[i].prompt, cs[i].n_prompt, &pi);
                else q[i].a = rf_ar_seq_new(m, cs[i].prompt, cs[i].n_prompt, &pi);
                CHECK(q[i].r || q[i].a, "%s: new %d: %s", what, i, rf_last_error());
            }
        int rows = 0, T = 0, nl = 0, left = budget, slot_rows = 0;
        for (int i = 0; i < n; i++) {
            q[i].row = -1, q[i].nl = 0;
            if ((!q[i].a && !q[i].r) || q[i].done) continue;
            const int *t, *ps;
            int k, nli;
            if (q[i].r) {
                k = rf_roll_seq_next(q[i].r, left > 0 ? left : 1, &t, &ps, &nli);
            } else {
                k = rf_ar_seq_next(q[i].a, left > 0 ? left : 1, &t, &ps, posbuf);
                nli = rf_ar_seq_wants_logits(q[i].a);
            }
            if (k <= 0) continue;
            if (k > nli) left -= k; /* prompt chunks share the budget */
            if (q[i].r && k > 1 && nli == k) slot_rows++;
            memcpy(tokens + T, t, k * sizeof(int));
            memcpy(pos + T, ps, k * sizeof(int));
            T += k;
            q[i].row = nl, q[i].nl = nli;
            for (int j = 0; j < nli; j++) lidx[nl++] = T - nli + j;
            kv[rows] = q[i].r ? rf_roll_seq_kv(q[i].r) : rf_ar_seq_kv(q[i].a);
            n_tok[rows++] = k;
        }
        if (!rows) break;
        if (rows > max_rows) max_rows = rows;
        if (slot_rows && rows >= 2) shared_slot_calls++;
        rf_seq_batch b = {rows, kv, n_tok, tokens, pos, nl, lidx, logits};
        if (rf_forward_seqs(m, rs, &b)) {
            CHECK(0, "%s: forward: %s", what, rf_last_error());
            break;
        }
        for (int i = 0; i < n; i++) {
            if (q[i].row < 0) continue;
            const float *l = q[i].nl ? logits + (size_t)q[i].row * V : NULL;
            q[i].done = q[i].r ? rf_roll_seq_after(q[i].r, l) : rf_ar_seq_after(q[i].a, l);
        }
    }
    CHECK(max_rows >= 3, "%s: at most %d sequences shared a call", what, max_rows);
    CHECK(shared_slot_calls >= 5, "%s: only %d calls had a rolling slot call beside other rows", what,
          shared_slot_calls);
    for (int i = 0; i < n; i++) {
        rf_gen_result r;
        CHECK(q[i].done, "%s: sequence %d never finished", what, i);
        int rc = q[i].r ? rf_roll_seq_finish(q[i].r, &r) : q[i].a ? rf_ar_seq_finish(q[i].a, &r) : -1;
        if (rc) {
            CHECK(0, "%s: finish %d: %s", what, i, rf_last_error());
            rf_gen_result_free(&solo[i]);
            continue;
        }
        const rf_gen_result *s = &solo[i];
        CHECK(r.n_ids == s->n_ids && r.hit_eos == s->hit_eos && !memcmp(r.ids, s->ids, (size_t)r.n_ids * sizeof(int)),
              "%s: sequence %d (%s): %d ids batched, %d alone, first difference at %d", what, i,
              cs[i].p.rolling ? "rolling" : "ar", r.n_ids, s->n_ids, first_diff(r.ids, r.n_ids, s->ids, s->n_ids));
        int same_steps = r.n_steps == s->n_steps;
        for (int k = 0; same_steps && k < r.n_steps; k++)
            same_steps = r.steps[k].tokens == s->steps[k].tokens && r.steps[k].calls == s->steps[k].calls;
        CHECK(r.n_calls == s->n_calls && same_steps, "%s: sequence %d: %d calls / %d steps batched, alone %d / %d",
              what, i, r.n_calls, r.n_steps, s->n_calls, s->n_steps);
        CHECK(!memcmp(&r.accept, &s->accept, sizeof r.accept), "%s: sequence %d: accept statistics differ", what, i);
        CHECK(st[i].n == r.n_ids && !memcmp(st[i].ids, r.ids, (size_t)r.n_ids * sizeof(int)),
              "%s: sequence %d: streamed %d tokens of %d", what, i, st[i].n, r.n_ids);
        rf_gen_result_free(&r);
        rf_gen_result_free(&solo[i]);
    }
    rf_runstate_free(rs);
    free(logits);
}

static rf_params rolling(int gen, int slot, float thr) {
    rf_params p;
    rf_gen_params_default(&p);
    p.method = RF_METHOD_REFUSION, p.rolling = 1;
    p.gen_length = gen, p.slot_size = slot, p.slot_threshold = thr;
    return p;
}

static rf_params ar(int gen) {
    rf_params p;
    rf_gen_params_default(&p);
    p.method = RF_METHOD_AR, p.gen_length = gen;
    return p;
}

/* Drive sequences alone to their end (rf_forward, one after the other),
 * telling each call it shares a call with `peers` rolling sequences and
 * load_n other tokens that commit load_T (0, 0, 0: alone). */
static void drive_loaded(const rf_model *m, rf_roll_seq *q, int peers, int load_n, double load_T) {
    rf_runstate *rs = rf_runstate_new(&m->cfg, 256, m->cfg.max_pos);
    float *logits = malloc((size_t)256 * m->cfg.vocab_size * sizeof(float));
    int lidx[256];
    while (!rf_roll_seq_done(q)) {
        const int *t, *ps;
        int nl, n = rf_roll_seq_next(q, 256, &t, &ps, &nl);
        CHECK(n > 0, "drive: next: %d", n);
        if (n <= 0) break;
        for (int i = 0; i < nl; i++) lidx[i] = n - nl + i;
        rf_batch b = {1, n, t, ps, 0, nl, lidx, logits};
        CHECK(rf_forward(m, rf_roll_seq_kv(q), rs, &b) == 0, "drive: %s", rf_last_error());
        rf_roll_seq_set_load(q, peers, load_n, load_T);
        rf_roll_seq_after(q, logits);
    }
    rf_runstate_free(rs);
    free(logits);
}
static void drive(const rf_model *m, rf_roll_seq *q) { drive_loaded(m, q, 0, 0, 0); }

static void drive_ar(const rf_model *m, rf_ar_seq *q) {
    rf_runstate *rs = rf_runstate_new(&m->cfg, 256, m->cfg.max_pos);
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    int posbuf[256], last;
    while (!rf_ar_seq_done(q)) {
        const int *t, *ps;
        int n = rf_ar_seq_next(q, 256, &t, &ps, posbuf);
        if (n <= 0) break;
        last = n - 1;
        rf_batch b = {1, n, t, ps, 0, rf_ar_seq_wants_logits(q), &last, logits};
        CHECK(rf_forward(m, rf_ar_seq_kv(q), rs, &b) == 0, "drive_ar: %s", rf_last_error());
        rf_ar_seq_after(q, b.n_logits ? logits : NULL);
    }
    rf_runstate_free(rs);
    free(logits);
}

/* A chat's next turn from the cache of the last: the first turn is a
 * rolling sequence on the demo model (drafts pass, so its last call fed
 * drafts and masks past the committed tokens: they must be cut); the next
 * turn (its prompt and answer, new tokens) runs as a rolling and as an AR
 * sequence reusing all or part of that cache, greedy and sampled: answers
 * and calls as without reuse. */
/* The adaptive width under a shared call's load (rf_roll_seq_set_load):
 * calls cost nothing more up to 8 tokens and a whole call per token beyond
 * (cost table), so alone the sequence feeds wide calls; beside 8 tokens of
 * other rows that commit 8 (eight AR rows), or beside 7 rolling sequences
 * sizing their calls alike, a draft would have to pass more than always to
 * pay for its width: the calls shrink to plain AR calls (a probe now and
 * then), and the answer stays the one alone, AR's. */
static void test_load(const rf_model *m, const int *prompt, int n_prompt) {
    static float cost[16];
    for (int n = 1; n <= 16; n++) cost[n - 1] = n <= 8 ? 1.0f : (float)(n - 7);
    rf_params p = rolling(48, 4, 0.3f);
    p.draft_adaptive = 1, p.call_cost = cost, p.n_call_cost = 16, p.eos_id = RF_TOKEN_FROM_MODEL;
    static const struct { int peers, n; double T; } load[3] = {{0, 0, 0}, {0, 8, 8}, {7, 0, 0}};
    rf_gen_result r[3], a;
    for (int k = 0; k < 3; k++) {
        rf_roll_seq *q = rf_roll_seq_new(m, prompt, n_prompt, &p);
        CHECK(q != NULL, "load: new: %s", rf_last_error());
        if (!q) return;
        drive_loaded(m, q, load[k].peers, load[k].n, load[k].T);
        CHECK(rf_roll_seq_finish(q, &r[k]) == 0, "load: finish: %s", rf_last_error());
    }
    rf_params pa = ar(48);
    pa.eos_id = RF_TOKEN_FROM_MODEL;
    CHECK(rf_generate_ar(m, prompt, n_prompt, &pa, &a) == 0, "load: AR: %s", rf_last_error());
    for (int k = 0; k < 3; k++) {
        CHECK(r[k].n_ids == a.n_ids && !memcmp(r[k].ids, a.ids, (size_t)a.n_ids * sizeof *a.ids),
              "load %d: the answer differs from AR's at token %d", k, first_diff(r[k].ids, r[k].n_ids, a.ids, a.n_ids));
        /* alone: about 2 tokens a call on the demo; loaded: AR calls and probes */
        double tpc = (double)r[k].n_ids / r[k].n_calls;
        CHECK(k ? tpc < 1.25 : tpc > 1.5, "load %d (peers %d, %d tokens): %.2f tokens per call (want %s)", k,
              load[k].peers, load[k].n, tpc, k ? "< 1.25" : "> 1.5");
        rf_gen_result_free(&r[k]);
    }
    rf_gen_result_free(&a);
    /* beside 3 rolling peers, calls 4% dearer per token: the slots' fresh
     * pass rates alone promise ~1.9 tokens for a draft and 2 masks, which
     * would pay (2.00 tokens per call here when they are believed); the
     * calls commit fewer (a failed draft leaves stale ones), and once the
     * realised gain scales the promise the calls are mostly AR (1.44) */
    float lin[16];
    for (int n = 1; n <= 16; n++) lin[n - 1] = 1.0f + 0.04f * (n - 1);
    p.call_cost = lin;
    rf_gen_result g;
    rf_roll_seq *q = rf_roll_seq_new(m, prompt, n_prompt, &p);
    drive_loaded(m, q, 3, 0, 0);
    CHECK(rf_roll_seq_finish(q, &g) == 0, "load: finish: %s", rf_last_error());
    double tpc = (double)g.n_ids / g.n_calls;
    CHECK(tpc < 1.7, "load, peers 3, cost 1 + 0.04 (n - 1): %.2f tokens per call (want < 1.7: the realised gain)", tpc);
    rf_gen_result_free(&g);
}

/* drafts: the model's drafts pass (the demo; a random model's rarely do) */
static void test_reuse(const rf_model *m, const int *p1, int n1, int drafts) {
    rf_params p = rolling(40, 4, 0.5f);
    p.eos_id = -1;
    rf_roll_seq *a = rf_roll_seq_new(m, p1, n1, &p);
    drive(m, a);
    rf_kvcache kv;
    int *ids, n = rf_roll_seq_take_cache(a, &kv, &ids);
    rf_gen_result ra;
    CHECK(rf_roll_seq_finish(a, &ra) == 0 && ra.n_ids == 40, "reuse: first turn: %s", rf_last_error());
    CHECK(n == n1 + 39 && kv.len == n, "reuse: the first turn's cache holds %d entries (len %d), want %d", n, kv.len,
          n1 + 39);
    CHECK(!memcmp(ids, p1, (size_t)n1 * sizeof(int)) && !memcmp(ids + n1, ra.ids, 39 * sizeof(int)),
          "reuse: the cached ids are not the prompt and the answer");
    CHECK(!drafts || ra.n_calls < 30, "reuse: %d calls for 40 tokens: the drafts did not pass", ra.n_calls);
    int *p2 = malloc((size_t)(n + 6) * sizeof(int));
    memcpy(p2, ids, (size_t)n * sizeof(int));
    for (int i = 0; i < 6; i++) p2[n + i] = ids[i % n1];
    int n2 = n + 6;
    for (int mode = 0; mode < 4; mode++) {
        rf_params q = mode < 2 ? rolling(32, 4, 0.5f) : ar(32);
        q.eos_id = -1;
        if (mode % 2) q.temperature = 0.9f, q.seed = 12;
        rf_gen_result solo, r;
        int rc = mode < 2 ? rf_generate_rolling(m, p2, n2, &q, &solo) : rf_generate_ar(m, p2, n2, &q, &solo);
        CHECK(rc == 0, "reuse: solo: %s", rf_last_error());
        const int reuse[2] = {n, 7};
        for (int c = 0; c < 2; c++) {
            if (mode < 2) {
                rf_roll_seq *b = rf_roll_seq_new_reusing(m, p2, n2, &q, &kv, reuse[c]);
                drive(m, b);
                rc = rf_roll_seq_finish(b, &r);
            } else {
                rf_ar_seq *b = rf_ar_seq_new_reusing(m, p2, n2, &q, &kv, reuse[c]);
                drive_ar(m, b);
                rc = rf_ar_seq_finish(b, &r);
            }
            CHECK(rc == 0, "reuse: finish: %s", rf_last_error());
            if (rc) continue;
            CHECK(r.n_ids == solo.n_ids && !memcmp(r.ids, solo.ids, (size_t)r.n_ids * sizeof(int)) &&
                      r.n_calls == solo.n_calls,
                  "reuse mode %d, %d reused: answer or call count differs from the one without reuse (%d / %d calls, "
                  "first difference at %d)", mode, reuse[c], r.n_calls, solo.n_calls,
                  first_diff(r.ids, r.n_ids, solo.ids, solo.n_ids));
            rf_gen_result_free(&r);
        }
        rf_gen_result_free(&solo);
    }
    free(p2);
    rf_gen_result_free(&ra);
    rf_kv_free(&kv);
    free(ids);
}

/* the demo model (a trained mask head: many drafts pass) with its chat format */
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
    cs[0] = (seq_case){pr[0], np[0], 0, rolling(64, 4, 0.5f)};
    cs[1] = (seq_case){pr[1], np[1], 0, rolling(64, 8, 0.3f)};
    cs[1].p.temperature = 0.7f, cs[1].p.seed = 5, cs[1].p.top_p = 0.95f;
    cs[2] = (seq_case){pr[2], np[2], 2, ar(40)};
    cs[2].p.temperature = 0.8f, cs[2].p.seed = 9;
    cs[3] = (seq_case){pr[3], np[3], 3, rolling(64, 3, 0.5f)};
    cs[3].p.temperature = 0.5f, cs[3].p.seed = 2, cs[3].p.top_k = 10, cs[3].p.min_p = 0.05f;
    cs[4] = (seq_case){pr[2], np[2], 6, rolling(48, 6, 0.0f)};
    cs[4].p.repeat_penalty = 1.2f, cs[4].p.penalty_last_n = 8;
    cs[5] = (seq_case){longp, 300, 4, rolling(32, 4, 0.5f)};
    cs[6] = (seq_case){pr[0], np[0], 8, rolling(64, 5, 0.5f)};
    static const float flat[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    cs[6].p.draft_adaptive = 1, cs[6].p.call_cost = flat, cs[6].p.n_call_cost = 16;
    for (int i = 0; i < NSEQ; i++) cs[i].p.eos_id = RF_TOKEN_FROM_MODEL;
    run(&m, cs, NSEQ, 64, "demo, budget 64");
    run(&m, cs, NSEQ, 512, "demo, budget 512");
    if (pr[0]) test_reuse(&m, pr[0], np[0], 1);
    if (pr[0]) test_load(&m, pr[0], np[0]);
    for (int k = 0; k < RF_TEST_DEMO_QUESTIONS; k++) free(pr[k]);
    rf_tok_free(tok);
    rf_model_free(&m);
}

/* random models: few drafts pass, every answer length, EOS anywhere */
static void test_random(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, 512, 512);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    static const int p0[] = {5}, p1[] = {1, 400, 2, 401}, p2[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    for (int d = 0; d < 2; d++) {
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, 1.5f, 90 + d);
        if (d == 1) CHECK(rf_model_quantize(&m, RF_Q8_0) == 0, "quantize: %s", rf_last_error());
        seq_case cs[5];
        cs[0] = (seq_case){p2, 9, 0, rolling(40, 2, 0.0f)};
        cs[1] = (seq_case){p1, 4, 0, rolling(33, 8, 0.0f)};
        cs[1].p.temperature = 0.9f, cs[1].p.seed = 4;
        cs[2] = (seq_case){p0, 1, 1, ar(30)};
        cs[3] = (seq_case){p2, 9, 3, rolling(7, 1, 0.5f)};
        cs[4] = (seq_case){p1, 4, 5, rolling(25, 4, 0.1f)};
        cs[4].p.presence_penalty = 0.3f, cs[4].p.frequency_penalty = 0.2f, cs[4].p.penalty_last_n = -1;
        for (int i = 0; i < 5; i++) cs[i].p.eos_id = -1;
        cs[4].p.eos_id = RF_TOKEN_FROM_MODEL;
        run(&m, cs, 5, 64, d ? "random q8_0" : "random f32");
        rf_model_free(&m);
    }
    /* 4 KV heads of 64: a reused prefix is copied head by head between
     * caches of different capacities (kvcache.h: head-major) */
    rf_config w = rf_test_config(64, 128, 4, 4, 64, 512, 512);
    w.eos_id = 510, w.mask_id = 511, w.bot_id = 509;
    rf_model m;
    rf_model_init_random(&m, &w, RF_F32, 1.5f, 93);
    test_reuse(&m, p2, 9, 0);
    rf_model_free(&m);
}

/* a raised cancel flag: the next call is refused with -1; bad settings are
 * refused as rf_generate_rolling refuses them */
static void test_cancel(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, 512, 512);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 1.0f, 7);
    const int pr[] = {3, 4};
    volatile int flag = 0;
    rf_params p = rolling(10, 4, 0.0f);
    p.eos_id = -1, p.cancel = &flag;
    rf_roll_seq *q = rf_roll_seq_new(&m, pr, 2, &p);
    const int *t, *ps;
    int nl;
    /* the first call: the prompt, then the slot's masks after it (logits for
     * the last prompt token and the masks); a budget without room for the
     * masks gets the prompt alone */
    rf_roll_seq *q0 = rf_roll_seq_new(&m, pr, 2, &p);
    CHECK(q0 && rf_roll_seq_next(q0, 5, &t, &ps, &nl) == 2 && nl == 1 && t[0] == 3 && t[1] == 4,
          "a budget of 5: the prompt alone");
    rf_roll_seq_free(q0);
    int n0 = q ? rf_roll_seq_next(q, 8, &t, &ps, &nl) : 0;
    int masks_ok = n0 == 6 && nl == 5 && t[0] == 3 && t[1] == 4;
    for (int i = 2; masks_ok && i < 6; i++) masks_ok = t[i] == c.mask_id && ps[i] == i;
    CHECK(masks_ok, "first call: %d tokens, %d logits (want the prompt and 4 masks at positions 2-5, 5 logits)", n0,
          nl);
    flag = 1;
    CHECK(rf_roll_seq_next(q, 8, &t, &ps, &nl) == -1, "cancel: a call after the flag was handed out");
    rf_roll_seq_free(q);
    p.slot_size = 0;
    CHECK(rf_roll_seq_new(&m, pr, 2, &p) == NULL && strstr(rf_last_error(), "slot_size"), "slot 0: %s",
          rf_last_error());
    rf_model_free(&m);
}

int main(void) {
    test_demo();
    test_random();
    test_cancel();
    return check_summary("decode_rolling_step");
}
