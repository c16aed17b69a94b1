/* decode_sampler.c - AR decoding's draw of the next token with min_p and
 * llama.cpp's repeat / presence / frequency penalties (rf_sample_token,
 * decode/decode_util.c), against a reference written here from the
 * definitions:
 *
 *  1. greedy: the token is the argmax of the penalised logits, computed by
 *     counting every token of the window directly (a count per vocab entry,
 *     not the sampler's sort), for random logits and histories, windows
 *     0 / 3 / 16 / -1 (all) and windows longer than the history, the window
 *     reaching into the prompt;
 *  2. sampled: frequencies of 60000 draws match softmax(penalised / T)
 *     within 5 sigma; min_p keeps exactly the tokens whose probability is
 *     >= min_p times the top one's, in proportion; with top_k too;
 *  3. with none of them set it is rf_sample_ar, draw for draw;
 *  4. bad values and plan-and-infill with a penalty are refused with a
 *     message naming them;
 *  5. the log-probabilities a decoder reports (rf_logprobs_of): the
 *     log-softmax of the row, the alternatives sorted, ties in id order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "decode/decode.h"
#include "helpers/small_config.h"

/* the penalised logits, from the definitions */
static void reference(const float *l, int V, const rf_params *p, const int *prompt, int P, const int *ans, int A,
                      double *out) {
    int n = P + A, w = p->penalty_last_n < 0 || p->penalty_last_n > n ? n : p->penalty_last_n;
    for (int t = 0; t < V; t++) {
        int c = 0;
        for (int k = n - w; k < n; k++) c += (k < P ? prompt[k] : ans[k - P]) == t;
        double x = l[t];
        if (c) {
            x = x <= 0 ? x * p->repeat_penalty : x / p->repeat_penalty;
            x -= c * p->frequency_penalty + p->presence_penalty;
        }
        out[t] = x;
    }
}

static void test_greedy(void) {
    enum { V = 40 };
    rf_rng r;
    rf_rng_seed(&r, 9);
    const int windows[] = {0, 3, 16, -1, 1000};
    int changed = 0, n_cases = 0;
    for (int c = 0; c < 400; c++) {
        float l[V];
        double ref[V];
        int prompt[12], ans[30];
        for (int i = 0; i < V; i++) l[i] = (float)(4 * rf_rng_uniform(&r) - 2);
        int P = 1 + c % 12, A = c % 30;
        /* histories drawn from the likely tokens, so that penalties matter */
        for (int i = 0; i < P; i++) prompt[i] = (int)(rf_rng_uniform(&r) * 8);
        for (int i = 0; i < A; i++) ans[i] = (int)(rf_rng_uniform(&r) * 8);
        for (int i = 0; i < 8; i++) l[i] += 1.5f;
        rf_params p;
        rf_gen_params_default(&p);
        p.penalty_last_n = windows[c % 5];
        p.repeat_penalty = c % 3 == 0 ? 1.0f : 1.0f + (float)rf_rng_uniform(&r);
        p.frequency_penalty = c % 4 == 1 ? 0.0f : (float)rf_rng_uniform(&r) * 0.8f;
        p.presence_penalty = c % 4 == 2 ? 0.0f : (float)rf_rng_uniform(&r) - 0.3f;
        reference(l, V, &p, prompt, P, ans, A, ref);
        int want = 0, plain = 0;
        for (int t = 1; t < V; t++) {
            if (ref[t] > ref[want]) want = t;
            if (l[t] > l[plain]) plain = t;
        }
        rf_rng u;
        rf_rng_seed(&u, 1);
        int got = rf_sample_token(l, V, &p, prompt, P, ans, A, &u);
        CHECK(got == want, "case %d (window %d, repeat %g, freq %g, presence %g): token %d, want %d", c,
              p.penalty_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty, got, want);
        changed += want != plain, n_cases++;
    }
    printf("greedy: %d cases, the penalty changed the token in %d\n", n_cases, changed);
    CHECK(changed > 40, "penalties changed only %d of %d greedy tokens: the cases do not test them", changed, n_cases);
}

/* frequencies of N draws against probabilities q; 5 sigma */
static int off(const int *cnt, const double *q, int n, int N) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double f = (double)cnt[i] / N, sg = 5 * sqrt(q[i] * (1 - q[i]) / N) + 1e-9;
        if (q[i] == 0 ? cnt[i] != 0 : fabs(f - q[i]) > sg) bad = 1;
    }
    return bad;
}

static void test_sampled(void) {
    enum { V = 6, N = 60000 };
    const float lg[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
    const int prompt[3] = {3, 3, 1}, ans[2] = {2, 3}; /* token 2 has a negative logit */
    rf_rng r;
    rf_rng_seed(&r, 5);

    /* penalties, T = 0.9 */
    rf_params p;
    rf_gen_params_default(&p);
    p.temperature = 0.9f, p.repeat_penalty = 1.4f, p.frequency_penalty = 0.3f, p.presence_penalty = 0.2f;
    p.penalty_last_n = 4; /* 3, 1, 2, 3: the first prompt token is outside */
    double ref[V], q[V], z = 0;
    reference(lg, V, &p, prompt, 3, ans, 2, ref);
    for (int i = 0; i < V; i++) z += q[i] = exp(ref[i] / p.temperature);
    for (int i = 0; i < V; i++) q[i] /= z;
    int cnt[V] = {0};
    for (int k = 0; k < N; k++) cnt[rf_sample_token(lg, V, &p, prompt, 3, ans, 2, &r)]++;
    CHECK(!off(cnt, q, V, N), "penalised sampling: counts %d %d %d %d %d %d, want p %.3f %.3f %.3f %.3f %.3f %.3f",
          cnt[0], cnt[1], cnt[2], cnt[3], cnt[4], cnt[5], q[0], q[1], q[2], q[3], q[4], q[5]);

    /* min_p 0.2 at T = 0.7: p_i / p_max = exp((l_i - l_max) / T) >= 0.2 keeps tokens 3 (1) and 0 (0.24), not 1 (0.08) */
    for (int top_k = 0; top_k <= 1; top_k++) {
        rf_gen_params_default(&p);
        p.temperature = 0.7f, p.min_p = 0.2f, p.top_k = top_k ? 5 : 0;
        z = 0;
        for (int i = 0; i < V; i++) {
            double rel = exp((lg[i] - 2.0) / p.temperature);
            q[i] = rel >= p.min_p ? rel : 0;
            z += q[i];
        }
        for (int i = 0; i < V; i++) q[i] /= z;
        CHECK(q[3] > 0 && q[0] > 0 && q[1] == 0, "min_p reference: the case keeps tokens 3 and 0 only");
        memset(cnt, 0, sizeof cnt);
        for (int k = 0; k < N; k++) cnt[rf_sample_token(lg, V, &p, prompt, 3, ans, 2, &r)]++;
        CHECK(!off(cnt, q, V, N), "min_p 0.2 (top_k %d): counts %d %d %d %d %d %d", p.top_k, cnt[0], cnt[1], cnt[2],
              cnt[3], cnt[4], cnt[5]);
    }

    /* nothing set: rf_sample_ar's draws, one for one */
    rf_gen_params_default(&p);
    p.temperature = 0.8f, p.top_k = 4, p.top_p = 0.95f;
    rf_rng a, b;
    rf_rng_seed(&a, 77), rf_rng_seed(&b, 77);
    int same = 1;
    for (int k = 0; k < 2000; k++)
        same &= rf_sample_token(lg, V, &p, prompt, 3, ans, 2, &a) == rf_sample_ar(lg, V, 0.8f, 4, 0.95f, &b);
    CHECK(same, "without min_p and penalties rf_sample_token differs from rf_sample_ar");
}

static void test_refused(void) {
    rf_config c = rf_test_config(32, 64, 2, 2, 16, 64, 128);
    c.eos_id = 62, c.mask_id = 63;
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 3);
    int prompt[2] = {4, 5};
    rf_gen_result r;
    struct {
        const char *what, *msg;
        int decoder; /* 0 refusion, 1 ar, 2 rolling */
        float repeat, min_p;
        int last_n;
    } bad[] = {{"repeat 0", "repeat_penalty", 1, 0.0f, 0.0f, 64},
               {"min_p 2", "min_p", 2, 1.0f, 2.0f, 64},
               {"window -2", "penalty_last_n", 1, 1.2f, 0.0f, -2},
               {"refusion + penalty", "AR sampling settings", 0, 1.2f, 0.0f, 64},
               {"refusion + min_p", "AR sampling settings", 0, 1.0f, 0.1f, 64}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = 4, p.repeat_penalty = bad[i].repeat, p.min_p = bad[i].min_p, p.penalty_last_n = bad[i].last_n;
        p.rolling = bad[i].decoder == 2;
        int rc = bad[i].decoder == 1 ? rf_generate_ar(&m, prompt, 2, &p, &r) : rf_generate_refusion(&m, prompt, 2, &p, &r);
        CHECK(rc == -1 && strstr(rf_last_error(), bad[i].msg), "%s: rc %d, \"%s\"", bad[i].what, rc, rf_last_error());
        if (rc == 0) rf_gen_result_free(&r);
    }
    rf_model_free(&m);
}

/* rf_logprobs_of against the definition: log-softmax in float64, the
 * alternatives the likeliest first, equal logits in id order */
static void test_logprobs_of(void) {
    enum { NV = 300 };
    float l[NV];
    rf_rng rng;
    rf_rng_seed(&rng, 5);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < NV; i++) l[i] = (float)(8.0 * rf_rng_uniform(&rng) - 4.0);
        if (round % 2) /* ties: a block of equal logits at the top */
            for (int i = 40; i < 300; i += 37) l[i] = 9.5f;
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < NV; i++) m = l[i] > m ? l[i] : m;
        for (int i = 0; i < NV; i++) sum += exp((double)l[i] - m);
        double lse = m + log(sum);
        int tok = (round * 53) % NV, n_top = round % 21;
        rf_token_logprob out;
        rf_logprobs_of(l, NV, tok, n_top, &out);
        CHECK(out.token == tok && fabs(out.logprob - ((double)l[tok] - lse)) < 1e-5, "round %d: logprob %g, want %g",
              round, out.logprob, (double)l[tok] - lse);
        CHECK(out.n_top == n_top, "round %d: %d alternatives, asked %d", round, out.n_top, n_top);
        /* the reference: n_top times the best not yet taken (first index on ties) */
        unsigned char taken[NV] = {0};
        for (int k = 0; k < out.n_top; k++) {
            int best = -1;
            for (int i = 0; i < NV; i++)
                if (!taken[i] && (best < 0 || l[i] > l[best])) best = i;
            taken[best] = 1;
            CHECK(out.top_token[k] == best && fabs(out.top_logprob[k] - ((double)l[best] - lse)) < 1e-5,
                  "round %d: alternative %d is %d (%g), want %d (%g)", round, k, out.top_token[k], out.top_logprob[k],
                  best, (double)l[best] - lse);
        }
    }
}

int main(void) {
    test_logprobs_of();
    test_greedy();
    test_sampled();
    test_refused();
    return check_summary("decode_sampler");
}
