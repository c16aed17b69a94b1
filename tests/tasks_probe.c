/* tasks_probe.c - refusion probe's numbers against a naive computation.
 *
 * For every answer position and every view, the test builds by hand exactly
 * the physical sequence that position should be predicted from and runs the
 * no-cache reference forward (rf_forward_reference) on it alone:
 *   AR         prompt + answer[0..j)                      -> last logits
 *   mask/slot  prompt + answer[0..s0) + masks s0..j       -> last logits
 *              (s0 = j rounded down to the slot)
 *   mask/all   prompt + masks 0..j                        -> last logits
 * (masks after j are not fed: attention is causal, so they cannot matter.)
 * Cross-entropy, probability and top-1 are computed in double here, the
 * classes with this file's own rule, and every per-position number and every
 * aggregate the probe reports must agree. The answers are built so that each
 * view's argmax is right at some positions (otherwise top-1 would be 0
 * everywhere and prove nothing). Slot sizes: partial last slot, 1, equal to
 * the answer, larger than the answer. Bad input gets an error. */
#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "tasks/probe.h"
#include "util/util.h"

#define V 96
#define MASK 95

static rf_config cfg_small(void) {
    rf_config c = rf_test_config(32, 64, 4, 2, 8, V, 64);
    c.eos_id = 94, c.mask_id = MASK, c.bot_id = 93;
    return c;
}

/* logits of the last token of seq[0..n) (position ids 0..n-1), by the reference */
static float *ref_last(const rf_model *m, const int *seq, int n) {
    int *pos = malloc((size_t)n * sizeof(int));
    float *all = malloc((size_t)n * V * sizeof(float)), *last = malloc(V * sizeof(float));
    for (int i = 0; i < n; i++) pos[i] = i;
    if (rf_forward_reference(m, n, seq, pos, 0, all)) {
        fprintf(stderr, "reference: %s\n", rf_last_error());
        exit(1);
    }
    memcpy(last, all + (size_t)(n - 1) * V, V * sizeof(float));
    free(pos), free(all);
    return last;
}

static int argmax(const float *l) {
    int a = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[a]) a = i;
    return a;
}

/* the sequence view v shows answer position j (answer[<j] known), into seq; returns its length */
static int view_seq(int v, const int *prompt, int P, const int *ans, int j, int S, int *seq) {
    int n = 0;
    for (int i = 0; i < P; i++) seq[n++] = prompt[i];
    int known = v == 0 ? j : v == 1 ? j / S * S : 0;
    for (int i = 0; i < known; i++) seq[n++] = ans[i];
    if (v == 0) return n; /* the last token (answer[j-1], or the prompt's last) predicts j */
    for (int i = known; i <= j; i++) seq[n++] = MASK;
    return n;
}

/* An answer of A tokens: position j is view (j % 3)'s argmax given the
 * positions before it (so every view gets some top-1 hits), or a random id
 * (j % 4 == 3). Never the mask id. */
static void make_answer(const rf_model *m, const int *prompt, int P, int A, int S, unsigned seed, int *ans) {
    int *seq = malloc((size_t)(P + A + 1) * sizeof(int));
    srand(seed);
    for (int j = 0; j < A; j++) {
        int t;
        if (j % 4 == 3) {
            t = rand() % (V - 1);
        } else {
            int v = j % 3, n = view_seq(v, prompt, P, ans, j, S, seq);
            float *l = ref_last(m, seq, n);
            l[MASK] = -INFINITY;
            t = argmax(l);
            free(l);
        }
        ans[j] = t;
    }
    free(seq);
}

typedef struct {
    double ce, prob;
    int top1, near_tie;
} naive_pos;

static naive_pos naive_score(const float *l, int t) {
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
    naive_pos r;
    r.prob = exp((double)l[t] - mx) / z;
    r.ce = -log(r.prob);
    int a = argmax(l);
    r.top1 = a == t;
    /* a runner-up within 1e-4 of the max: the cached forward may pick it */
    r.near_tie = 0;
    for (int i = 0; i < V; i++)
        if (i != a && (double)l[a] - l[i] < 1e-4) r.near_tie = 1;
    return r;
}

static int naive_class(int j, int S) {
    if (j == 0) return 0;         /* answer start */
    if (j % S == 0) return 1;     /* slot boundary / slot-first */
    return 2;                     /* later in slot */
}

/* one example: per-position and aggregate agreement; returns positions checked */
static int check_example(const rf_model *m, const int *prompt, int P, int A, int S, unsigned seed,
                         rf_probe_stats *want_total, rf_probe_stats *got_total) {
    int *ans = malloc((size_t)A * sizeof(int)), *seq = malloc((size_t)(P + A + 1) * sizeof(int));
    make_answer(m, prompt, P, A, S, seed, ans);
    rf_probe_pos *pp = calloc((size_t)RF_PROBE_N_VIEWS * A, sizeof *pp);
    rf_probe_stats got;
    memset(&got, 0, sizeof got);
    got.slot_size = S;
    int rc = rf_probe_example(m, prompt, P, ans, A, MASK, &got, pp);
    CHECK(rc == 0, "probe P=%d A=%d S=%d: %s", P, A, S, rf_last_error());
    rf_probe_stats want;
    memset(&want, 0, sizeof want);
    want.slot_size = S;
    want.n_examples = 1;
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        for (int j = 0; j < A; j++) {
            int n = view_seq(v, prompt, P, ans, j, S, seq);
            float *l = ref_last(m, seq, n);
            naive_pos r = naive_score(l, ans[j]);
            free(l);
            const rf_probe_pos *g = &pp[(size_t)v * A + j];
            CHECK(fabs(g->ce - r.ce) < 1e-4, "S=%d view %d pos %d: CE %.6f, naive %.6f", S, v, j, g->ce, r.ce);
            CHECK(fabs(g->prob - r.prob) < 1e-5, "S=%d view %d pos %d: prob %.6f, naive %.6f", S, v, j, g->prob,
                  r.prob);
            if (!r.near_tie) CHECK(g->top1 == r.top1, "S=%d view %d pos %d: top1 %d, naive %d", S, v, j, g->top1, r.top1);
            rf_probe_cell *c = &want.cell[v][naive_class(j, S)];
            c->n++;
            c->n_top1 += r.top1;
            c->ce_sum += r.ce;
            c->prob_sum += r.prob;
        }
    CHECK(got.n_examples == 1, "n_examples %d", got.n_examples);
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        for (int k = 0; k < RF_PROBE_N_CLASSES; k++) {
            const rf_probe_cell *g = &got.cell[v][k], *w = &want.cell[v][k];
            CHECK(g->n == w->n, "S=%d view %d class %d: n %ld, naive %ld", S, v, k, g->n, w->n);
            CHECK(g->n_top1 == w->n_top1, "S=%d view %d class %d: top1 %ld, naive %ld", S, v, k, g->n_top1,
                  w->n_top1);
            CHECK(fabs(g->ce_sum - w->ce_sum) < 1e-4 * (w->n + 1), "S=%d view %d class %d: CE sum %.6f, naive %.6f",
                  S, v, k, g->ce_sum, w->ce_sum);
            CHECK(fabs(g->prob_sum - w->prob_sum) < 1e-5 * (w->n + 1),
                  "S=%d view %d class %d: prob sum %.6f, naive %.6f", S, v, k, g->prob_sum, w->prob_sum);
            rf_probe_cell *wt = &want_total->cell[v][k], *gt = &got_total->cell[v][k];
            wt->n += w->n, wt->n_top1 += w->n_top1, wt->ce_sum += w->ce_sum, wt->prob_sum += w->prob_sum;
            gt->n += g->n, gt->n_top1 += g->n_top1, gt->ce_sum += g->ce_sum, gt->prob_sum += g->prob_sum;
        }
    free(ans), free(seq), free(pp);
    return A;
}

/* JSON and Markdown carry the numbers (n, and the means to printed precision) */
static void check_outputs(const rf_probe_stats *st) {
    json_t *j = rf_probe_json(st);
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        for (int k = 0; k < RF_PROBE_N_CLASSES; k++) {
            json_t *c = json_object_get(json_object_get(json_object_get(j, "views"), rf_probe_view_name(v)),
                                        rf_probe_class_name(k));
            const rf_probe_cell *w = &st->cell[v][k];
            CHECK(json_integer_value(json_object_get(c, "n")) == w->n, "json n view %d class %d", v, k);
            CHECK(fabs(json_real_value(json_object_get(c, "ce")) - rf_probe_cell_ce(w)) < 1e-12 &&
                      fabs(json_real_value(json_object_get(c, "acc")) - (w->n ? (double)w->n_top1 / w->n : 0)) <
                          1e-12 &&
                      fabs(json_real_value(json_object_get(c, "prob")) - rf_probe_cell_prob(w)) < 1e-12,
                  "json means view %d class %d", v, k);
        }
    json_decref(j);
    char *md = rf_probe_markdown(st), line[256];
    const rf_probe_cell *w = &st->cell[RF_PROBE_MASK_SLOT][RF_PROBE_LATER];
    snprintf(line, sizeof line, "| mask head (slot by slot) | later in slot | %ld | %.4f | %.4f | %.4f |", w->n,
             rf_probe_cell_ce(w), rf_probe_cell_acc(w), rf_probe_cell_prob(w));
    CHECK(strstr(md, line) != NULL, "markdown lacks '%s':\n%s", line, md);
    free(md);
}

int main(void) {
    omp_set_num_threads(1); /* a tiny model: threads only add overhead on a busy machine */
    rf_config c = cfg_small();
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.6f, 5);
    int prompt[8] = {3, 17, 42, 60, 7, 11, 80, 1};
    struct {
        int P, A, S;
    } cases[] = {{5, 13, 4}, {8, 11, 1}, {1, 9, 9}, {6, 7, 16}, {4, 20, 8}};
    rf_probe_stats want, got;
    memset(&want, 0, sizeof want);
    memset(&got, 0, sizeof got);
    int positions = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        positions += check_example(&m, prompt, cases[i].P, cases[i].A, cases[i].S, 100 + (unsigned)i, &want, &got);
    long hits[RF_PROBE_N_VIEWS] = {0}, per_class[RF_PROBE_N_CLASSES] = {0};
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        for (int k = 0; k < RF_PROBE_N_CLASSES; k++) hits[v] += want.cell[v][k].n_top1, per_class[k] += want.cell[v][k].n;
    printf("%d positions x 3 views; top-1 hits: AR %ld, mask/slot %ld, mask/all %ld; per class %ld/%ld/%ld\n",
           positions, hits[0], hits[1], hits[2], per_class[0], per_class[1], per_class[2]);
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        CHECK(hits[v] > 0 && hits[v] < positions, "view %d: %ld top-1 hits of %d: the test cannot see top-1 errors", v,
              hits[v], positions);
    for (int k = 0; k < RF_PROBE_N_CLASSES; k++) CHECK(per_class[k] > 0, "class %d never occurred", k);
    got.slot_size = 4;
    check_outputs(&got);

    /* bad input: one message each, nothing recorded */
    rf_probe_stats st;
    memset(&st, 0, sizeof st);
    st.slot_size = 4;
    int ans[70];
    for (int i = 0; i < 70; i++) ans[i] = i % 90;
    CHECK(rf_probe_example(&m, prompt, 8, ans, 60, MASK, &st, NULL) && strstr(rf_last_error(), "context"),
          "too long: %s", rf_last_error());
    ans[3] = V + 2;
    CHECK(rf_probe_example(&m, prompt, 8, ans, 10, MASK, &st, NULL) && strstr(rf_last_error(), "vocabulary"),
          "bad id: %s", rf_last_error());
    ans[3] = 3;
    CHECK(rf_probe_example(&m, prompt, 0, ans, 10, MASK, &st, NULL) && strstr(rf_last_error(), "empty"),
          "empty prompt: %s", rf_last_error());
    st.slot_size = 0;
    CHECK(rf_probe_example(&m, prompt, 8, ans, 10, MASK, &st, NULL) && strstr(rf_last_error(), "slot size"),
          "slot 0: %s", rf_last_error());
    CHECK(st.n_examples == 0 && st.cell[0][0].n == 0, "a failed probe recorded numbers");
    rf_model_free(&m);
    return check_summary("tasks_probe");
}
