/* decode_ar.c - AR decoding and the sampling helpers.
 *
 *  1. AR greedy with the KV cache equals an argmax-by-argmax loop that runs
 *     the full reference forward (no cache) over prompt + answer each step;
 *     EOS stops the answer (EOS included); calls = tokens;
 *  2. sampling: same seed -> same answer, top_k = 1 and a tiny top_p are
 *     greedy, every sampled token lies in the reference's top_k set;
 *  3. the helpers against float64 formulas: log-sum-exp / probabilities,
 *     and the frequencies of Gumbel-max draws and of rf_sample_ar (with
 *     top-k / top-p) against the distributions they should sample. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/small_config.h"
#include "decode/decode.h"
#include "model/forward.h"

#define V 512

static rf_config cfg_small(void) {
    rf_config c = rf_test_config(64, 128, 4, 2, 16, V, 256);
    c.eos_id = 510, c.mask_id = 511, c.bot_id = 509;
    return c;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* argmax by argmax over the full reference forward; eos < 0: none */
static int reference_greedy(const rf_model *m, const int *prompt, int P, int G, int eos, int *out) {
    int *seq = rf_malloc((P + G) * sizeof(int)), *pos = rf_malloc((P + G) * sizeof(int)), n = 0;
    memcpy(seq, prompt, P * sizeof(int));
    for (int i = 0; i < P + G; i++) pos[i] = i;
    for (int i = 0; i < G; i++) {
        float *lg = rf_malloc((size_t)(P + i) * V * 4);
        rf_forward_reference(m, P + i, seq, pos, 0, lg);
        int t = argmax(lg + (size_t)(P + i - 1) * V, V);
        free(lg);
        seq[P + i] = out[n++] = t;
        if (t == eos) break;
    }
    free(seq), free(pos);
    return n;
}

static void test_greedy(const rf_model *m) {
    int prompts[3][8] = {{5, 6, 7, 8, 9, 10, 11, 12}, {300}, {1, 400, 2, 401}};
    int plen[3] = {8, 1, 4};
    for (int k = 0; k < 3; k++) {
        int ref[40];
        int n = reference_greedy(m, prompts[k], plen[k], 40, -1, ref);
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = 40, p.eos_id = -1;
        rf_gen_result r;
        CHECK(rf_generate_ar(m, prompts[k], plen[k], &p, &r) == 0, "ar: %s", rf_last_error());
        int same = r.n_ids == n && !memcmp(r.ids, ref, n * sizeof(int));
        CHECK(same, "prompt %d: AR greedy differs from the argmax-by-argmax reference", k);
        CHECK(r.n_calls == 40 && r.n_steps == 40 && r.tpf == 1.0, "prompt %d: %d calls, %d steps, tpf %g", k,
              r.n_calls, r.n_steps, r.tpf);
        /* EOS: the token produced 11th stops the answer there, EOS included */
        int eos = ref[10], first = 0;
        while (ref[first] != eos) first++;
        p.eos_id = eos;
        rf_gen_result e;
        CHECK(rf_generate_ar(m, prompts[k], plen[k], &p, &e) == 0, "ar eos: %s", rf_last_error());
        CHECK(e.hit_eos && e.n_ids == first + 1 && !memcmp(e.ids, ref, e.n_ids * sizeof(int)),
              "prompt %d: EOS %d expected at %d, answer has %d tokens", k, eos, first, e.n_ids);
        CHECK(e.n_calls == e.n_ids, "EOS run: %d calls for %d tokens", e.n_calls, e.n_ids);
        rf_gen_result_free(&e);
        rf_gen_result_free(&r);
    }
}

static void test_sampling(const rf_model *m) {
    int prompt[4] = {1, 2, 3, 4};
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 24, p.eos_id = -1, p.temperature = 1.0f, p.seed = 7;
    rf_gen_result a, b, g;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &a) == 0 && rf_generate_ar(m, prompt, 4, &p, &b) == 0, "sample");
    CHECK(a.n_ids == b.n_ids && !memcmp(a.ids, b.ids, a.n_ids * sizeof(int)), "same seed, different answers");
    p.seed = 8;
    rf_gen_result c;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &c) == 0, "sample");
    CHECK(memcmp(a.ids, c.ids, a.n_ids * sizeof(int)) != 0, "seeds 7 and 8 gave the same 24 tokens");
    rf_gen_result_free(&c);
    p.temperature = 0;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &g) == 0, "greedy");
    p.temperature = 1.5f, p.top_k = 1;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &c) == 0 && !memcmp(c.ids, g.ids, 24 * sizeof(int)), "top_k 1 != greedy");
    rf_gen_result_free(&c);
    p.top_k = 0, p.top_p = 1e-6f;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &c) == 0 && !memcmp(c.ids, g.ids, 24 * sizeof(int)), "tiny top_p != greedy");
    rf_gen_result_free(&c);
    /* top_k 3: every token is in the reference's top 3 given the sampled prefix */
    p.top_p = 1, p.top_k = 3, p.temperature = 2.0f, p.seed = 11;
    CHECK(rf_generate_ar(m, prompt, 4, &p, &c) == 0, "top_k 3");
    int seq[32], pos[32], bad = 0;
    memcpy(seq, prompt, 4 * sizeof(int));
    memcpy(seq + 4, c.ids, 24 * sizeof(int));
    for (int i = 0; i < 28; i++) pos[i] = i;
    float *lg = rf_malloc((size_t)28 * V * 4);
    rf_forward_reference(m, 28, seq, pos, 0, lg);
    for (int i = 0; i < 24; i++) {
        const float *l = lg + (size_t)(3 + i) * V;
        int above = 0;
        for (int t = 0; t < V; t++) above += l[t] > l[c.ids[i]];
        bad += above >= 3;
    }
    CHECK(bad == 0, "%d sampled tokens outside the top 3", bad);
    free(lg);
    rf_gen_result_free(&a), rf_gen_result_free(&b), rf_gen_result_free(&c), rf_gen_result_free(&g);
}

static void test_helpers(void) {
    /* log-sum-exp against float64, over a vocab that is not a multiple of 8 */
    int n = 1003;
    float *l = rf_malloc(n * 4);
    rf_rng r;
    rf_rng_seed(&r, 3);
    for (int i = 0; i < n; i++) l[i] = 6.0f * rf_rng_normal(&r);
    l[0] = -200.0f; /* underflows */
    rf_logit_stats s = rf_logits_stats(l, n);
    double mx = -1e30, sum = 0;
    int am = 0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i], am = i;
    for (int i = 0; i < n; i++) sum += exp(l[i] - mx);
    CHECK(s.argmax == am, "argmax %d vs %d", s.argmax, am);
    CHECK(fabs(s.lse - (mx + log(sum))) < 1e-5, "lse %.9g vs %.9g", s.lse, mx + log(sum));
    double tot = 0;
    for (int i = 0; i < n; i++) tot += rf_logit_prob(l, &s, i);
    CHECK(fabs(tot - 1) < 1e-5, "probabilities sum to %.9g", tot);
    free(l);

    /* frequencies: 6 tokens, 60000 draws each; |f - p| < 5 sigma */
    float lg[6] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
    double T = 0.7, q[6], z = 0;
    for (int i = 0; i < 6; i++) z += q[i] = exp(lg[i] / T);
    for (int i = 0; i < 6; i++) q[i] /= z;
    int cg[6] = {0}, ca[6] = {0}, ck[6] = {0}, cp[6] = {0}, N = 60000;
    for (int k = 0; k < N; k++) {
        cg[rf_gumbel_argmax(lg, 6, T, 2.0f, &r)]++;
        ca[rf_sample_ar(lg, 6, (float)T, 0, 1.0f, &r)]++;
        ck[rf_sample_ar(lg, 6, (float)T, 2, 1.0f, &r)]++;
        cp[rf_sample_ar(lg, 6, (float)T, 0, 0.9f, &r)]++;
    }
    /* top-2 = tokens 3, 0; top-p 0.9 = smallest prefix by prob reaching 0.9 */
    double pk[6] = {0}, pp[6] = {0}, m2 = q[3] + q[0];
    pk[3] = q[3] / m2, pk[0] = q[0] / m2;
    int order[6] = {3, 0, 1, 4, 2, 5};
    double cum = 0;
    for (int i = 0; i < 6 && cum < 0.9; i++) cum += pp[order[i]] = q[order[i]];
    for (int i = 0; i < 6; i++) pp[i] /= cum;
    int worst = 0;
    for (int i = 0; i < 6; i++) {
        double sg = 5 * sqrt(q[i] * (1 - q[i]) / N) + 1e-9;
        worst |= fabs((double)cg[i] / N - q[i]) > sg;
        worst |= fabs((double)ca[i] / N - q[i]) > sg;
        worst |= fabs((double)ck[i] / N - pk[i]) > 5 * sqrt(pk[i] * (1 - pk[i]) / N) + 1e-9;
        worst |= fabs((double)cp[i] / N - pp[i]) > 5 * sqrt(pp[i] * (1 - pp[i]) / N) + 1e-9;
    }
    CHECK(!worst, "sampling frequencies off: gumbel %d %d %d, ar %d %d %d", cg[0], cg[3], cg[5], ca[0], ca[3], ca[5]);
    CHECK(ck[1] == 0 && ck[2] == 0 && ck[4] == 0 && ck[5] == 0, "top_k 2 sampled outside the top 2");
}

int main(void) {
    omp_set_num_threads(1); /* tiny models: threads only add spin-wait time on a busy machine */
    rf_config c = cfg_small();
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 21);
    test_helpers();
    test_greedy(&m);
    test_sampling(&m);
    rf_model_free(&m);
    return check_summary("decode_ar");
}
