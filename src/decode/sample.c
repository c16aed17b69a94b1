/* sample.c - probabilities from logits (the per-token hot spot),
 * Gumbel-max and AR sampling with its penalties (decode.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"

/* ---- probabilities ---------------------------------------------------------- */

/* argmax (first index of the max) and log-sum-exp of one logits row: two
 * vectorised passes over the vocab (rf_argmax, rf_sum_exp). */
rf_logit_stats rf_logits_stats(const float *l, int V) {
    rf_logit_stats s = {0, l[0], 0.0};
    s.argmax = rf_argmax(l, V, &s.max);
    s.lse = s.max + log(rf_sum_exp(l, V, s.max));
    return s;
}

void rf_logprobs_of(const float *l, int V, int tok, int n_top, rf_token_logprob *out) {
    rf_logit_stats st = rf_logits_stats(l, V);
    memset(out, 0, sizeof *out);
    out->token = tok;
    out->logprob = (float)((double)l[tok] - st.lse);
    if (n_top > V) n_top = V;
    if (n_top > RF_MAX_TOP_LOGPROBS) n_top = RF_MAX_TOP_LOGPROBS;
    /* one pass keeping the best n_top sorted: a token enters only above the
     * last kept one (ids rise, so an equal logit keeps the lower id first) */
    int k = 0;
    for (int i = 0; i < V && n_top > 0; i++) {
        if (k == n_top && !(l[i] > l[out->top_token[k - 1]])) continue;
        int at = k < n_top ? k++ : k - 1;
        while (at > 0 && l[i] > l[out->top_token[at - 1]]) {
            out->top_token[at] = out->top_token[at - 1];
            at--;
        }
        out->top_token[at] = i;
    }
    out->n_top = k;
    for (int i = 0; i < k; i++) out->top_logprob[i] = (float)((double)l[out->top_token[i]] - st.lse);
}

/* Gumbel-max in float64. The reference computes exp(l) / (-log u)^T and
 * takes the argmax; its log is l - T log(-log u) = l + T g with g a standard
 * Gumbel draw. All V uniforms are drawn (in vocab order, so a seed fixes the
 * result), but the two logs are only evaluated where the token can still win:
 * u < 1 - 2^-53 bounds g below 37, so l + 37 T <= best score cannot win. */
int rf_gumbel_argmax(const float *l, int V, double T, float max, rf_rng *rng) {
    const double GMAX = 37.0;
    double *u = rf_scoped_malloc((size_t)V * sizeof(double));
    for (int i = 0; i < V; i++) u[i] = rf_rng_uniform(rng);
    int best = -1;
    double bs = -INFINITY;
    /* start from a token with the max logit so that the bound prunes early */
    for (int i = 0; i < V; i++)
        if (l[i] == max) {
            best = i;
            bs = l[i] - T * log(-log(u[i]));
            break;
        }
    for (int i = 0; i < V; i++) {
        if (i == best || (double)l[i] + GMAX * T <= bs) continue;
        double s = l[i] - T * log(-log(u[i]));
        if (s > bs) bs = s, best = i;
    }
    rf_scoped_free(u);
    return best < 0 ? 0 : best;
}

typedef struct {
    float p;
    int id;
} prob_id;
static int by_prob_desc(const void *a, const void *b) {
    const prob_id *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

/* temperature, then top-k, then top-p, then min-p (the Hugging Face order) */
static int sample_core(const float *l, int V, float T, int top_k, float top_p, float min_p, rf_rng *rng) {
    if (T <= 0.0f) { /* greedy: the argmax alone (no pass of exps over the vocab) */
        float max;
        return rf_argmax(l, V, &max);
    }
    rf_logit_stats st = rf_logits_stats(l, V);
    prob_id *c = rf_scoped_malloc((size_t)V * sizeof *c);
    double sum = 0;
    for (int i = 0; i < V; i++) {
        c[i].p = (float)exp(((double)l[i] - st.max) / T);
        c[i].id = i;
        sum += c[i].p;
    }
    int n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1.0f) {
        qsort(c, V, sizeof *c, by_prob_desc);
        if (top_k > 0 && top_k < n) n = top_k;
        sum = 0;
        for (int i = 0; i < n; i++) sum += c[i].p;
        if (top_p < 1.0f) { /* keep the smallest prefix whose mass reaches top_p */
            double cum = 0;
            int k = 0;
            while (k < n && cum < top_p * sum) cum += c[k++].p;
            n = k < 1 ? 1 : k;
            sum = cum;
        }
    }
    int last = n - 1; /* the fallback pick when rounding leaves r >= the total */
    if (min_p > 0.0f) {
        /* c[i].p is the probability relative to the most likely token's
         * (exp((l - max) / T), 1 at the max): drop the tokens below min_p of
         * it, in place (the max itself always stays) */
        sum = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].p < min_p) c[i].p = 0;
            else sum += c[i].p, last = i;
        }
    }
    double r = rf_rng_uniform(rng) * sum, cum = 0;
    int pick = c[last].id;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) {
            pick = c[i].id;
            break;
        }
    }
    rf_scoped_free(c);
    return pick;
}

int rf_sample_ar(const float *l, int V, float T, int top_k, float top_p, rf_rng *rng) {
    return sample_core(l, V, T, top_k, top_p, 0.0f, rng);
}

int rf_gen_has_penalties(const rf_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static int by_id(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* llama.cpp's penalties over the last penalty_last_n tokens of prompt +
 * answer (-1: all of them), each distinct token t seen c times there:
 * l[t] /= repeat (l[t] * repeat when l[t] <= 0), then
 * l[t] -= c * frequency + presence. Then AR sampling as rf_sample_ar with
 * min_p. Deterministic in (logits, history, settings, RNG state), which is
 * what lets the rolling slot reproduce AR decoding token for token. */
int rf_sample_token(const float *l, int V, const rf_params *p, const int *prompt, int n_prompt,
                    const int *answer, int n_answer, rf_rng *rng) {
    if (!rf_gen_has_penalties(p)) return sample_core(l, V, p->temperature, p->top_k, p->top_p, p->min_p, rng);
    int64_t n_all = (int64_t)n_prompt + n_answer;
    int64_t w = p->penalty_last_n < 0 || p->penalty_last_n > n_all ? n_all : p->penalty_last_n;
    float *pl = rf_scoped_malloc((size_t)V * sizeof(float));
    int *win = rf_scoped_malloc((size_t)(w + 1) * sizeof(int));
    memcpy(pl, l, (size_t)V * sizeof(float));
    for (int64_t i = 0; i < w; i++) {
        int64_t k = n_all - w + i; /* position in prompt ++ answer */
        win[i] = k < n_prompt ? prompt[k] : answer[k - n_prompt];
    }
    qsort(win, (size_t)w, sizeof *win, by_id);
    for (int64_t i = 0; i < w;) {
        int64_t j = i;
        while (j < w && win[j] == win[i]) j++;
        int t = win[i];
        if (t >= 0 && t < V) {
            float x = pl[t];
            x = x <= 0.0f ? x * p->repeat_penalty : x / p->repeat_penalty;
            pl[t] = x - (float)(j - i) * p->frequency_penalty - p->presence_penalty;
        }
        i = j;
    }
    int pick = sample_core(pl, V, p->temperature, p->top_k, p->top_p, p->min_p, rng);
    rf_scoped_free(win), rf_scoped_free(pl);
    return pick;
}
