/* decode_ar_step.c - AR decoding driven one call at a time (decode/ar_step.c)
 * with many sequences as rows of one forward call (rf_forward_seqs), as the
 * server's scheduler runs them.
 *
 * Every sequence's answer, call count and streamed tokens must be exactly
 * rf_generate_ar's for the sequence alone, while other sequences share its
 * calls: six sequences with prompts of 1 to 300 tokens (the long one in
 * several prefill chunks, joining midway while others decode), greedy and
 * sampled (seeds, top-k, top-p, min-p, penalties), EOS from the model / none
 * / a frequent token, answers of 1 to 40 tokens; f32, bf16 and Q8_0
 * weights, small per-call token budgets (prefill spread over calls) and a
 * large one. A sequence whose client left (cancel flag) stops with -1.
 * Prompt-prefix reuse (a chat's next turn starting from the cache of the
 * last one, all or part of it) changes neither answers nor call counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode/ar_step.h"
#include "decode/decode.h"
#include "helpers/small_config.h"
#include "model/forward.h"

#define V 512
#define NSEQ 6

typedef struct {
    int ids[64], n; /* streamed through on_tokens */
} stream;

static void on_tokens(const int *ids, int n, void *user) {
    stream *s = user;
    for (int i = 0; i < n && s->n < 64; i++) s->ids[s->n++] = ids[i];
}

static void run(const rf_model *m, int budget, const char *what) {
    static int longp[300];
    for (int i = 0; i < 300; i++) longp[i] = (i * 37 + 11) % 500;
    const int p0[] = {5}, p1[] = {1, 400, 2, 401}, p2[] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    const int *prompts[NSEQ] = {p0, p1, p2, longp, p1, longp + 100};
    const int plen[NSEQ] = {1, 4, 9, 300, 4, 17};
    const int join[NSEQ] = {0, 0, 1, 5, 9, 12}; /* the step at which each joins */
    rf_params p[NSEQ];
    /* a frequent token as EOS: greedy AR's 3rd token on prompt 2 */
    rf_params g;
    rf_gen_params_default(&g);
    g.gen_length = 3, g.eos_id = -1;
    rf_gen_result a;
    CHECK(rf_generate_ar(m, p2, 9, &g, &a) == 0, "%s: ar: %s", what, rf_last_error());
    int freq = a.n_ids == 3 ? a.ids[2] : 7;
    rf_gen_result_free(&a);
    for (int i = 0; i < NSEQ; i++) {
        rf_gen_params_default(&p[i]);
        p[i].gen_length = (int[]){40, 7, 1, 25, 33, 40}[i];
        p[i].eos_id = (int[]){-1, RF_TOKEN_FROM_MODEL, freq, -1, freq, RF_TOKEN_FROM_MODEL}[i];
    }
    p[1].temperature = 0.8f, p[1].seed = 3;
    p[3].temperature = 1.1f, p[3].seed = 99, p[3].top_k = 5;
    p[4].temperature = 0.7f, p[4].seed = 4, p[4].top_p = 0.9f, p[4].min_p = 0.05f;
    p[5].repeat_penalty = 1.3f, p[5].frequency_penalty = 0.4f, p[5].presence_penalty = 0.2f, p[5].penalty_last_n = 6;

    /* each alone */
    rf_gen_result solo[NSEQ];
    for (int i = 0; i < NSEQ; i++)
        CHECK(rf_generate_ar(m, prompts[i], plen[i], &p[i], &solo[i]) == 0, "%s: solo %d: %s", what, i,
              rf_last_error());

    /* together, joining at their steps */
    stream st[NSEQ];
    memset(st, 0, sizeof st);
    rf_ar_seq *q[NSEQ] = {0};
    int finished[NSEQ] = {0};
    rf_runstate *rs = rf_runstate_new(&m->cfg, budget + NSEQ, m->cfg.max_pos);
    float *logits = malloc((size_t)NSEQ * V * sizeof(float));
    int tokens[512 + NSEQ], pos[512 + NSEQ], n_tok[NSEQ], lidx[NSEQ], posbuf[256];
    rf_kvcache *kv[NSEQ];
    int row_of[NSEQ], max_rows = 0;
    for (int step = 0; step < 1000; step++) {
        for (int i = 0; i < NSEQ; i++)
            if (join[i] == step) {
                rf_params pi = p[i];
                pi.on_tokens = on_tokens, pi.user = &st[i];
                q[i] = rf_ar_seq_new(m, prompts[i], plen[i], &pi);
                CHECK(q[i] != NULL, "%s: new %d: %s", what, i, rf_last_error());
            }
        int rows = 0, T = 0, nl = 0, left = budget;
        for (int i = 0; i < NSEQ; i++) {
            row_of[i] = -1;
            if (!q[i] || finished[i]) continue;
            const int *t, *ps;
            int n = rf_ar_seq_next(q[i], left > 0 ? left : 1, &t, &ps, posbuf);
            if (n <= 0) continue;
            if (n > 1) left -= n; /* prompt chunks share the budget; decode rows always go */
            memcpy(tokens + T, t, n * sizeof(int));
            memcpy(pos + T, ps, n * sizeof(int));
            T += n;
            if (rf_ar_seq_wants_logits(q[i])) row_of[i] = nl, lidx[nl++] = T - 1;
            kv[rows] = rf_ar_seq_kv(q[i]);
            n_tok[rows++] = n;
        }
        if (!rows) break;
        if (rows > max_rows) max_rows = rows;
        rf_seq_batch b = {rows, kv, n_tok, tokens, pos, nl, lidx, logits};
        if (rf_forward_seqs(m, rs, &b)) {
            CHECK(0, "%s: forward: %s", what, rf_last_error());
            break;
        }
        for (int i = 0; i < NSEQ; i++) {
            if (!q[i] || finished[i]) continue;
            if (rf_ar_seq_after(q[i], row_of[i] >= 0 ? logits + (size_t)row_of[i] * V : NULL)) finished[i] = 1;
        }
    }
    CHECK(max_rows >= 4, "%s: at most %d sequences shared a call", what, max_rows);
    for (int i = 0; i < NSEQ; i++) {
        rf_gen_result r;
        CHECK(finished[i], "%s: sequence %d never finished", what, i);
        if (!q[i] || rf_ar_seq_finish(q[i], &r)) {
            CHECK(0, "%s: finish %d: %s", what, i, rf_last_error());
            continue;
        }
        int same = r.n_ids == solo[i].n_ids && r.hit_eos == solo[i].hit_eos &&
                   !memcmp(r.ids, solo[i].ids, (size_t)r.n_ids * sizeof(int));
        CHECK(same, "%s: sequence %d: %d ids batched, %d alone (first differs at %d)", what, i, r.n_ids,
              solo[i].n_ids, ({
                  int k = 0;
                  while (k < r.n_ids && k < solo[i].n_ids && r.ids[k] == solo[i].ids[k]) k++;
                  k;
              }));
        CHECK(r.n_calls == solo[i].n_calls && r.n_steps == solo[i].n_steps, "%s: sequence %d: %d calls / %d steps, "
              "alone %d / %d", what, i, r.n_calls, r.n_steps, solo[i].n_calls, solo[i].n_steps);
        CHECK(st[i].n == r.n_ids && !memcmp(st[i].ids, r.ids, (size_t)r.n_ids * sizeof(int)),
              "%s: sequence %d: streamed %d tokens of %d", what, i, st[i].n, r.n_ids);
        rf_gen_result_free(&r);
        rf_gen_result_free(&solo[i]);
    }
    rf_runstate_free(rs);
    free(logits);
}

/* Drive sequences to their end as rows of shared calls. */
static void drive(const rf_model *m, rf_ar_seq **q, int n) {
    rf_runstate *rs = rf_runstate_new(&m->cfg, 256 + n, m->cfg.max_pos);
    float *logits = malloc((size_t)n * V * sizeof(float));
    int tokens[512], pos[512], n_tok[8], lidx[8], row_of[8], posbuf[256];
    rf_kvcache *kv[8];
    for (int step = 0; step < 1000; step++) {
        int rows = 0, T = 0, nl = 0;
        for (int i = 0; i < n; i++) {
            const int *t, *ps;
            row_of[i] = -1;
            int k = rf_ar_seq_done(q[i]) ? 0 : rf_ar_seq_next(q[i], 256, &t, &ps, posbuf);
            if (k <= 0) continue;
            memcpy(tokens + T, t, k * sizeof(int)), memcpy(pos + T, ps, k * sizeof(int));
            T += k;
            if (rf_ar_seq_wants_logits(q[i])) row_of[i] = nl, lidx[nl++] = T - 1;
            kv[rows] = rf_ar_seq_kv(q[i]), n_tok[rows++] = k;
        }
        if (!rows) break;
        rf_seq_batch b = {rows, kv, n_tok, tokens, pos, nl, lidx, logits};
        CHECK(rf_forward_seqs(m, rs, &b) == 0, "drive: %s", rf_last_error());
        for (int i = 0; i < n; i++)
            if (!rf_ar_seq_done(q[i]) && (row_of[i] >= 0 || rf_ar_seq_wants_logits(q[i]) == 0))
                rf_ar_seq_after(q[i], row_of[i] >= 0 ? logits + (size_t)row_of[i] * V : NULL);
    }
    rf_runstate_free(rs);
    free(logits);
}

/* Prompt-prefix reuse: a sequence whose prompt begins with the tokens a
 * finished one holds in its cache (a chat's next turn: the last prompt and
 * answer) starts from a copy of those entries and still gets exactly the
 * answer and call count it gets alone, greedy and sampled. */
static void test_reuse(const rf_model *m) {
    int p1[20];
    for (int i = 0; i < 20; i++) p1[i] = (i * 29 + 3) % 500;
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 12, p.eos_id = -1;
    rf_ar_seq *a = rf_ar_seq_new(m, p1, 20, &p);
    drive(m, &a, 1);
    rf_kvcache kv;
    int *ids, n = rf_ar_seq_take_cache(a, &kv, &ids);
    rf_gen_result ra;
    CHECK(n == 20 + 11 && rf_ar_seq_finish(a, &ra) == 0, "reuse: the first turn's cache holds %d entries", n);
    CHECK(!memcmp(ids, p1, sizeof p1) && !memcmp(ids + 20, ra.ids, 11 * sizeof(int)),
          "reuse: the cached ids are not the prompt and the answer");
    rf_gen_result_free(&ra);
    /* the next turn: the whole history and 6 new tokens */
    int p2[40];
    memcpy(p2, ids, (size_t)n * sizeof(int));
    for (int i = 0; i < 6; i++) p2[n + i] = 100 + i;
    int n2 = n + 6;
    for (int mode = 0; mode < 2; mode++) {
        rf_params q = p;
        if (mode) q.temperature = 0.9f, q.seed = 12;
        rf_gen_result solo, r;
        CHECK(rf_generate_ar(m, p2, n2, &q, &solo) == 0, "reuse: solo: %s", rf_last_error());
        /* the full prefix, a part of it, and beside a sequence without reuse */
        rf_ar_seq *b[3] = {rf_ar_seq_new_reusing(m, p2, n2, &q, &kv, n),
                           rf_ar_seq_new_reusing(m, p2, n2, &q, &kv, 7), rf_ar_seq_new(m, p2, n2, &q)};
        drive(m, b, 3);
        for (int i = 0; i < 3; i++) {
            CHECK(rf_ar_seq_finish(b[i], &r) == 0, "reuse: finish: %s", rf_last_error());
            CHECK(r.n_ids == solo.n_ids && !memcmp(r.ids, solo.ids, (size_t)r.n_ids * sizeof(int)) &&
                      r.n_calls == solo.n_calls,
                  "reuse mode %d case %d: answer or call count differs from the one without reuse", mode, i);
            rf_gen_result_free(&r);
        }
        rf_gen_result_free(&solo);
    }
    rf_kv_free(&kv);
    free(ids);
}

/* a raised cancel flag: the next call is refused with -1 */
static void test_cancel(const rf_model *m) {
    const int pr[] = {3, 4};
    volatile int flag = 0;
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 10, p.eos_id = -1, p.cancel = &flag;
    rf_ar_seq *q = rf_ar_seq_new(m, pr, 2, &p);
    const int *t, *ps;
    int buf[256];
    CHECK(q && rf_ar_seq_next(q, 8, &t, &ps, buf) == 2, "cancel: first call");
    flag = 1;
    CHECK(rf_ar_seq_next(q, 8, &t, &ps, buf) == -1, "cancel: a call after the flag was handed out");
    rf_ar_seq_free(q);
    /* and bad settings are refused as rf_generate_ar refuses them */
    p.gen_length = 100000;
    CHECK(rf_ar_seq_new(m, pr, 2, &p) == NULL && strstr(rf_last_error(), "context"), "too long: %s",
          rf_last_error());
}

int main(void) {
    /* 4 KV heads of 64: a reused prefix is copied head by head between
     * caches of different capacities (kvcache.h: head-major) */
    rf_config c = rf_test_config(64, 128, 4, 4, 64, V, 512);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    const rf_dtype dts[] = {RF_F32, RF_BF16, RF_Q8_0};
    const char *names[] = {"f32", "bf16", "q8_0"};
    for (int d = 0; d < 3; d++) {
        rf_model m;
        rf_model_init_random(&m, &c, d == 2 ? RF_F32 : dts[d], 1.0f, 80 + d);
        if (d == 2) CHECK(rf_model_quantize(&m, RF_Q8_0) == 0, "quantize: %s", rf_last_error());
        char what[64];
        snprintf(what, sizeof what, "%s, budget 64", names[d]);
        run(&m, 64, what);
        snprintf(what, sizeof what, "%s, budget 512", names[d]);
        run(&m, 512, what);
        if (d == 0) test_cancel(&m);
        test_reuse(&m);
        rf_model_free(&m);
    }
    return check_summary("decode_ar_step");
}
