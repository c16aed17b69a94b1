/* decode_rolling.c - the rolling-slot decoder (decode/rolling.c).
 *
 *  1. Its answer is AR decoding's, token for token, for any sampling
 *     settings: random models (flat and peaky), prompts of 1-9 tokens,
 *     slot sizes 1-8, slot thresholds 0 / 0.5 / 1, greedy and sampled (with
 *     top-k / top-p, several seeds; with min-p and llama.cpp's repeat /
 *     presence / frequency penalties over windows of 6 and all tokens), no EOS / the model's EOS / a frequent
 *     token as EOS (early stops at every position), answer lengths 1-40;
 *  2. its bookkeeping: every committed token is counted once in the accept
 *     statistics, no call commits nothing, drafts are only fed while the
 *     mask head's probability passes slot_threshold (threshold 1: never ->
 *     one token per call);
 *  3. on the shipped ReFusion demo model (a trained mask head) with its
 *     chat format, questions of the task families: same answers as AR and
 *     more than 1.5 tokens per call, i.e. drafts really pass.
 *     With logprobs (1.'s settings, 1 to 17 alternatives) the answers stay
 *     the same and the rolling slot's log-probabilities are AR's, bit for
 *     bit at avx512, within 2e-2 where call widths round differently;
 *  4. bad settings are refused with a message;
 *  5. the adaptive width (draft_adaptive) keeps AR's answer for any widths
 *     it picks: cost tables that make it pick the widest calls (flat), plain
 *     AR calls (cost = n), a memory-bound-like line, and none (the cost fitted
 *     to its own timed calls), with the samplings of 1.; on the demo model the
 *     flat table gives more tokens per call than cost = n, which gives about
 *     one (the width follows the cost model). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "helpers/demo_model.h"
#include "decode/decode.h"
#include "kernels/cpu.h"
#include "model/tune.h"
#include "helpers/small_config.h"
#include "tokenizer/tokenizer.h"

#define V 512

static rf_config cfg_small(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, V, 256);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    return c;
}

static long n_runs, n_verified, n_calls_total, n_tokens_total;

/* How far the rolling slot's log-probabilities may lie from AR's: none
 * where every call width rounds alike (the avx512 kernels); the amx tiles
 * (calls of 5+ tokens, bf16 activations) and the avx2 kernels' width-
 * dependent summation order move a value by up to ~7e-3 on the demo. A row
 * taken from the wrong position moves it by whole units. */
static double logprob_tolerance(void) { return rf_cpu_tier_active() == RF_CPU_AVX512 ? 0.0 : 2e-2; }

/* y's top list is x's within tol: the same values, and each token of y in
 * x's list at a value within tol (near ties may swap places), or within
 * tol of x's last (a near tie with the first one left out) */
static int same_tops(const rf_token_logprob *x, const rf_token_logprob *y, double tol) {
    if (x->n_top != y->n_top) return 0;
    for (int k = 0; k < y->n_top; k++) {
        if (fabs(x->top_logprob[k] - y->top_logprob[k]) > tol) return 0;
        int found = 0;
        for (int j = 0; j < x->n_top && !found; j++)
            found = x->top_token[j] == y->top_token[k] && fabs(x->top_logprob[j] - y->top_logprob[k]) <= tol;
        if (!found && fabs(x->top_logprob[x->n_top - 1] - y->top_logprob[k]) > tol) return 0;
    }
    return 1;
}

/* With logprobs: the same answer as a (AR without them), and the rolling
 * slot's log-probabilities AR's (the AR head's rows at the same positions;
 * exactly, or within logprob_tolerance), with top lists sorted, each
 * token's own value among them where it is one of the likeliest. */
static void same_logprobs(const rf_model *m, const int *prompt, int P, const rf_params *p,
                          const rf_gen_result *a, const char *what) {
    rf_gen_result la, lr;
    rf_params q = *p;
    q.logprobs = 1, q.top_logprobs = 1 + (int)(p->seed % 5) * 4; /* 1 .. 17 */
    q.rolling = 0, q.method = RF_METHOD_AR;
    if (rf_generate_ar(m, prompt, P, &q, &la)) {
        CHECK(0, "%s: ar with logprobs: %s", what, rf_last_error());
        return;
    }
    q.rolling = 1, q.method = RF_METHOD_REFUSION;
    if (rf_generate_refusion(m, prompt, P, &q, &lr)) {
        CHECK(0, "%s: rolling with logprobs: %s", what, rf_last_error());
        rf_gen_result_free(&la);
        return;
    }
    int same = la.n_ids == a->n_ids && lr.n_ids == a->n_ids && !memcmp(la.ids, a->ids, (size_t)a->n_ids * sizeof(int)) &&
               !memcmp(lr.ids, a->ids, (size_t)a->n_ids * sizeof(int));
    CHECK(same, "%s: asking for logprobs changed the answer", what);
    CHECK(la.logprobs && lr.logprobs, "%s: no logprobs in the result", what);
    for (int i = 0; same && la.logprobs && lr.logprobs && i < a->n_ids; i++) {
        const rf_token_logprob *x = &la.logprobs[i], *y = &lr.logprobs[i];
        const double tol = logprob_tolerance();
        CHECK(tol ? x->token == y->token && fabs(x->logprob - y->logprob) <= tol && same_tops(x, y, tol)
                  : !memcmp(x, y, sizeof *x),
              "%s: position %d: rolling logprob %.9g (top %d) != AR's %.9g (top %d), tolerance %g", what, i, y->logprob,
              y->n_top, x->logprob, x->n_top, tol);
        CHECK(x->token == a->ids[i] && x->n_top == q.top_logprobs && x->logprob <= 0.0f,
              "%s: position %d: token %d (answer %d), %d alternatives, logprob %g", what, i, x->token, a->ids[i],
              x->n_top, x->logprob);
        int sorted = 1, has_own = 0;
        for (int k = 0; k < x->n_top; k++) {
            if (k && x->top_logprob[k] > x->top_logprob[k - 1]) sorted = 0;
            if (x->top_token[k] == x->token) has_own = x->top_logprob[k] == x->logprob;
        }
        CHECK(sorted, "%s: position %d: top list not sorted", what, i);
        if (x->logprob > x->top_logprob[x->n_top - 1])
            CHECK(has_own, "%s: position %d: the token (logprob %g) is missing from its top list", what, i,
                  x->logprob);
    }
    rf_gen_result_free(&la), rf_gen_result_free(&lr);
}

/* the sampling of a test mode: 0 greedy; 1..3 sampled at temperature 0.8
 * with seed (2 top-k, 3 top-p); 4 and 5 llama.cpp's penalties, which look
 * at the answer before each position, and min_p: greedy, then sampled */
static void set_sampling(rf_params *p, int mode, unsigned seed) {
    if (mode >= 1) p->temperature = 0.8f, p->seed = seed;
    if (mode == 2) p->top_k = 5;
    if (mode == 3) p->top_p = 0.9f;
    if (mode == 4)
        p->temperature = 0, p->repeat_penalty = 1.3f, p->frequency_penalty = 0.4f, p->presence_penalty = 0.2f,
        p->penalty_last_n = 6;
    if (mode == 5) p->min_p = 0.05f, p->repeat_penalty = 1.1f, p->presence_penalty = 0.5f, p->penalty_last_n = -1;
}

/* rolling vs AR on one setting; returns tokens per call of the rolling run */
static double same_as_ar(const rf_model *m, const int *prompt, int P, const rf_params *p, const char *what) {
    rf_gen_result a, r;
    rf_params q = *p;
    q.rolling = 0;
    if (rf_generate_ar(m, prompt, P, &q, &a)) {
        CHECK(0, "%s: ar: %s", what, rf_last_error());
        return 0;
    }
    q.rolling = 1;
    if (rf_generate_refusion(m, prompt, P, &q, &r)) {
        CHECK(0, "%s: rolling: %s", what, rf_last_error());
        rf_gen_result_free(&a);
        return 0;
    }
    int same = a.n_ids == r.n_ids && a.hit_eos == r.hit_eos && !memcmp(a.ids, r.ids, (size_t)a.n_ids * sizeof(int));
    CHECK(same, "%s: rolling answer (%d ids) differs from AR's (%d ids)", what, r.n_ids, a.n_ids);
    const rf_accept_stats *s = &r.accept;
    int counted = s->first_free + s->first_checked + s->first_replaced + s->verified + s->forced_draft + s->forced_ar;
    CHECK(counted == r.n_tokens, "%s: accept statistics count %d of %d tokens", what, counted, r.n_tokens);
    /* every call commits a token the AR head chose, except a last one that
     * ends the answer on a passed draft */
    CHECK(s->forced_ar == r.n_calls || s->forced_ar == r.n_calls - 1, "%s: %d calls, %d AR-chosen tokens", what,
          r.n_calls, s->forced_ar);
    int step_tokens = 0, empty = 0;
    for (int i = 0; i < r.n_steps; i++) step_tokens += r.steps[i].tokens, empty += r.steps[i].tokens < 1;
    CHECK(!empty, "%s: %d calls committed nothing", what, empty);
    CHECK(step_tokens == r.n_tokens && r.n_steps == r.n_calls, "%s: steps %d / tokens %d, calls %d / tokens %d",
          what, r.n_steps, step_tokens, r.n_calls, r.n_tokens);
    if (p->slot_threshold >= 1.0f)
        CHECK(s->verified == 0, "%s: a draft was fed at slot_threshold 1", what);
    if (p->slot_size == 1) CHECK(s->verified == 0, "%s: slot size 1 has no drafts", what);
    n_runs++, n_verified += s->verified, n_calls_total += r.n_calls, n_tokens_total += r.n_tokens;
    double tpc = r.tokens_per_call;
    same_logprobs(m, prompt, P, p, &a, what);
    rf_gen_result_free(&a), rf_gen_result_free(&r);
    return tpc;
}

static void test_random_models(void) {
    const int prompts[3][9] = {{5, 6, 7, 8, 9, 10, 11, 12, 13}, {300}, {1, 400, 2, 401}};
    const int plen[3] = {9, 1, 4};
    const int slots[] = {1, 2, 3, 4, 8};
    const float thr[] = {0.0f, 0.5f, 1.0f};
    for (int mi = 0; mi < 2; mi++) {
        rf_config c = cfg_small();
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, mi ? 1.5f : 0.5f, 70 + mi);
        /* a frequent token of this model as EOS: the AR answer's 3rd token */
        rf_params g;
        rf_gen_params_default(&g);
        g.gen_length = 3, g.eos_id = -1;
        rf_gen_result a;
        CHECK(rf_generate_ar(&m, prompts[0], plen[0], &g, &a) == 0, "ar: %s", rf_last_error());
        const int eos_ids[3] = {-1, RF_TOKEN_FROM_MODEL, a.n_ids == 3 ? a.ids[2] : 7};
        rf_gen_result_free(&a);
        for (int pi = 0; pi < 3; pi++)
            for (int si = 0; si < 5; si++)
                for (int ti = 0; ti < 3; ti++)
                    for (int ei = 0; ei < 3; ei++)
                        for (int mode = 0; mode < 6; mode++) {
                            rf_params p;
                            rf_gen_params_default(&p);
                            p.gen_length = (pi + si + ei) % 3 == 0 ? 40 : (pi + si) % 2 ? 7 : 1;
                            p.slot_size = slots[si], p.slot_threshold = thr[ti], p.eos_id = eos_ids[ei];
                            set_sampling(&p, mode, 11u * mode + pi);
                            char what[160];
                            snprintf(what, sizeof what, "model %d prompt %d slot %d thr %.1f eos %d mode %d gen %d", mi,
                                     pi, p.slot_size, p.slot_threshold, p.eos_id, mode, p.gen_length);
                            same_as_ar(&m, prompts[pi], plen[pi], &p, what);
                        }
        rf_model_free(&m);
    }
    printf("random models: %ld runs, %ld drafts passed, %ld tokens in %ld calls\n", n_runs, n_verified,
           n_tokens_total, n_calls_total);
}

/* The demo model with its tokenizer and chat format, on task questions of
 * the three families it was trained on. */
static void test_demo_model(void) {
    char dir[4096];
    rf_model m;
    rf_tokenizer *tok;
    if (rf_test_demo_load_chat(&m, &tok, dir, sizeof dir)) return;
    const char *questions[] = {
        "Write a Python function f(x) that does this: start from x, add 5, square it, then return its absolute value.",
        "Write a Python function f(x) that does this: start from x, multiply by 3, subtract 7, then return it.",
        "Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?",
        "A shop sells 4 boxes of 9 pens each and then 6 more pens. How many pens were sold?",
        "Make a JSON record for a person named Ada, age 36, city London.",
        "Make a JSON record for a book titled Dune, year 1965, author Frank Herbert."};
    long calls = 0, tokens = 0;
    for (int k = 0; k < 6; k++) {
        int *prompt = NULL, P = 0;
        if (rf_chat_query_ids(tok, questions[k], &prompt, &P)) {
            CHECK(0, "question %d: %s", k, rf_last_error());
            continue;
        }
        for (int w = 3; w <= 5; w++) {
            rf_params p;
            rf_gen_params_default(&p);
            p.gen_length = 64, p.slot_size = w, p.slot_threshold = 0.5f;
            char what[96];
            snprintf(what, sizeof what, "demo prompt %d slot %d", k, w);
            long c0 = n_calls_total, t0 = n_tokens_total;
            same_as_ar(&m, prompt, P, &p, what);
            calls += n_calls_total - c0, tokens += n_tokens_total - t0;
        }
        free(prompt);
    }
    double tpc = calls ? (double)tokens / calls : 0;
    printf("demo model: %ld tokens in %ld calls (%.2f tokens per call)\n", tokens, calls, tpc);
    CHECK(tpc > 1.5, "demo model: %.2f tokens per call: the mask head's drafts hardly pass", tpc);
    rf_tok_free(tok);
    rf_model_free(&m);
}

static void test_bad_settings(void) {
    rf_config c = cfg_small();
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 3);
    int prompt[2] = {4, 5};
    rf_gen_result r;
    struct {
        const char *what, *msg;
        int slot;
        float thr;
        int mask;
    } bad[] = {{"slot 0", "slot_size", 0, 0.5f, RF_TOKEN_FROM_MODEL},
               {"threshold 2", "slot_threshold", 4, 2.0f, RF_TOKEN_FROM_MODEL},
               {"mask = eos", "mask id", 4, 0.5f, 510},
               {"mask outside", "mask id", 4, 0.5f, V}};
    for (int i = 0; i < 4; i++) {
        rf_params p;
        rf_gen_params_default(&p);
        p.rolling = 1, p.gen_length = 8, p.slot_size = bad[i].slot, p.slot_threshold = bad[i].thr;
        p.mask_id = bad[i].mask;
        int rc = rf_generate_refusion(&m, prompt, 2, &p, &r);
        CHECK(rc == -1 && strstr(rf_last_error(), bad[i].msg), "%s: rc %d, \"%s\"", bad[i].what, rc, rf_last_error());
    }
    /* logprobs: the settings' bounds (every decoder reports them) */
    struct {
        int method, rolling, logprobs, top;
        const char *msg;
    } lp[] = {{RF_METHOD_REFUSION, 1, 1, RF_MAX_TOP_LOGPROBS + 1, "top_logprobs must be in [0, 20]"},
              {RF_METHOD_AR, 0, 0, 3, "top_logprobs needs logprobs"},
              {RF_METHOD_AR, 0, 2, 0, "logprobs must be 0 or 1"}};
    for (int i = 0; i < 3; i++) {
        rf_params p;
        rf_gen_params_default(&p);
        p.method = lp[i].method, p.rolling = lp[i].rolling, p.logprobs = lp[i].logprobs, p.top_logprobs = lp[i].top;
        p.gen_length = 8;
        int rc = rf_gen_check(&m, prompt, 2, &p, p.method != RF_METHOD_REFUSION);
        CHECK(rc == -1 && strstr(rf_last_error(), lp[i].msg), "logprobs case %d: rc %d, \"%s\"", i, rc,
              rf_last_error());
    }
    rf_model_free(&m);
}

enum { COST_N = 64 };
static float cost_flat[COST_N], cost_linear[COST_N], cost_memory[COST_N];

static void set_cost(rf_params *p, int which) {
    static const float *const tables[3] = {cost_flat, cost_linear, cost_memory};
    p->draft_adaptive = 1;
    p->call_cost = which < 3 ? tables[which] : NULL, p->n_call_cost = which < 3 ? COST_N : 0;
}

static void test_adaptive_width(void) {
    for (int n = 1; n <= COST_N; n++)
        cost_flat[n - 1] = 1.0f, cost_linear[n - 1] = (float)n, cost_memory[n - 1] = 1.0f + 0.08f * (n - 1);
    const int prompts[3][9] = {{5, 6, 7, 8, 9, 10, 11, 12, 13}, {300}, {1, 400, 2, 401}};
    const int plen[3] = {9, 1, 4};
    const int slots[] = {2, 4, 8};
    long runs0 = n_runs;
    for (int mi = 0; mi < 2; mi++) {
        rf_config c = cfg_small();
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, mi ? 1.5f : 0.5f, 70 + mi);
        for (int pi = 0; pi < 3; pi++)
            for (int si = 0; si < 3; si++)
                for (int ci = 0; ci < 4; ci++)
                    for (int ti = 0; ti < 2; ti++)
                        for (int mode = 0; mode < 6; mode++) {
                            rf_params p;
                            rf_gen_params_default(&p);
                            p.gen_length = (pi + si + mode) % 3 == 0 ? 40 : (pi + ci) % 2 ? 17 : 3;
                            p.slot_size = slots[si], p.slot_threshold = ti ? 0.5f : 0.0f;
                            p.eos_id = (pi + mode) % 3 == 0 ? -1 : RF_TOKEN_FROM_MODEL;
                            set_cost(&p, ci);
                            set_sampling(&p, mode, 13u * mode + pi);
                            char what[160];
                            snprintf(what, sizeof what, "adaptive: model %d prompt %d slot %d cost %d thr %.1f mode %d",
                                     mi, pi, p.slot_size, ci, p.slot_threshold, mode);
                            same_as_ar(&m, prompts[pi], plen[pi], &p, what);
                        }
        rf_model_free(&m);
    }
    printf("adaptive width, random models: %ld runs\n", n_runs - runs0);
}

/* tokens per call of the demo model on a few task questions with the
 * adaptive width under cost table `which` (each answer checked against AR) */
static double demo_adaptive_tpc(const rf_model *m, rf_tokenizer *tok, int which) {
    const char *questions[] = {
        "Write a Python function f(x) that does this: start from x, add 5, square it, then return its absolute value.",
        "Tom has 12 apples. He buys 7 more and gives 5 away. How many apples does he have?",
        "Make a JSON record for a person named Ada, age 36, city London."};
    long c0 = n_calls_total, t0 = n_tokens_total;
    for (int k = 0; k < 3; k++) {
        int *prompt = NULL, P = 0;
        if (rf_chat_query_ids(tok, questions[k], &prompt, &P)) {
            CHECK(0, "question %d: %s", k, rf_last_error());
            continue;
        }
        for (int mode = 0; mode < 2; mode++) {
            rf_params p;
            rf_gen_params_default(&p);
            p.gen_length = 64, p.slot_size = 8, p.slot_threshold = 0.5f;
            if (mode) p.temperature = 0.7f, p.seed = 5;
            set_cost(&p, which);
            char what[96];
            snprintf(what, sizeof what, "demo adaptive prompt %d cost %d mode %d", k, which, mode);
            same_as_ar(m, prompt, P, &p, what);
        }
        free(prompt);
    }
    long calls = n_calls_total - c0;
    return calls ? (double)(n_tokens_total - t0) / calls : 0;
}

static void test_demo_adaptive(void) {
    char dir[4096];
    rf_model m;
    if (rf_test_demo_load(&m, dir, sizeof dir)) return;
    rf_tokenizer *tok = rf_tok_for_model(dir, NULL);
    CHECK(tok != NULL, "%s: no tokenizer: %s", dir, rf_last_error());
    if (tok) {
        double flat = demo_adaptive_tpc(&m, tok, 0), linear = demo_adaptive_tpc(&m, tok, 1);
        double online = demo_adaptive_tpc(&m, tok, 3);
        float measured[16];
        int rc = rf_call_cost_measure(&m, 16, measured);
        CHECK(rc == 0, "rf_call_cost_measure: %s", rf_last_error());
        int mono = 1;
        for (int n = 1; rc == 0 && n < 16; n++) mono &= measured[n] >= measured[n - 1];
        CHECK(rc || (measured[0] == 1.0f && mono), "measured call costs: c(1) %g, non-decreasing %d", measured[0], mono);
        printf("demo model, adaptive width (slot 8): %.2f tokens per call with a flat cost, %.2f with cost = n, "
               "%.2f with the cost fitted online; measured c(8) %.2f, c(16) %.2f\n",
               flat, linear, online, measured[7], measured[15]);
        /* rf_call_cost_get: the tune cache's table when it holds every
         * width asked for, else the calls timed (a table of impossible
         * costs tells which) */
        char cache[] = "/tmp/decode_rolling_XXXXXX";
        const char *was = getenv("XDG_CACHE_HOME");
        char *saved = was ? strdup(was) : NULL;
        const int made = mkdtemp(cache) != NULL;
        CHECK(made, "mkdtemp %s", cache);
        if (made) {
            setenv("XDG_CACHE_HOME", cache, 1);
            rf_tune_choices set = rf_tune_choices_none();
            const float table[4] = {1.0f, 5.0f, 6.0f, 7.0f};
            set.cost_key = rf_call_cost_key(&m, omp_get_max_threads()), set.n_cost = 4;
            memcpy(set.cost, table, sizeof table);
            CHECK(rf_tune_cache_write(&set) == 0, "tune cache write: %s", rf_last_error());
            float got[8];
            int cached = -1;
            CHECK(rf_call_cost_get(&m, 4, got, &cached) == 0 && cached == 1 && !memcmp(got, table, sizeof table),
                  "4 widths of a 4-width table: cached %d, c(2) %g", cached, got[1]);
            CHECK(rf_call_cost_get(&m, 8, got, &cached) == 0 && cached == 0 && got[0] == 1.0f && got[1] < 5.0f,
                  "8 widths of a 4-width table: cached %d (want 0: timed), c(2) %g", cached, got[1]);
            char path[4096];
            if (rf_tune_cache_path(path, sizeof path) == 0) remove(path);
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/refusion", cache);
            rmdir(sub), rmdir(cache);
            if (saved) setenv("XDG_CACHE_HOME", saved, 1);
            else unsetenv("XDG_CACHE_HOME");
        }
        free(saved);
        CHECK(flat > 1.8, "flat cost: %.2f tokens per call: the width does not widen", flat);
        CHECK(linear < 1.3, "cost = n: %.2f tokens per call: drafts fed where a plain AR call is cheaper", linear);
        rf_tok_free(tok);
    }
    rf_model_free(&m);
}

int main(void) {
    omp_set_num_threads(1); /* tiny models: threads only add spin-wait time on a busy machine */
    test_random_models();
    test_demo_model();
    test_bad_settings();
    test_adaptive_width();
    test_demo_adaptive();
    return check_summary("decode_rolling");
}
