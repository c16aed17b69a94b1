/* probe.c - see probe.h.
 *
 * One example costs 2 + 2 * (slots) model calls on the KV cache:
 *   1. the prompt; the logits of its last token predict answer position 0;
 *   2. the whole answer as masks after the prompt (mask/all); cropped away;
 *   3. per slot k: slot k as masks after the cache (mask/slot), cropped
 *      away; then slot k's true tokens, whose logits predict the next
 *      positions (AR). Attention is causal over physical order, so feeding
 *      the answer slot by slot gives the AR head exactly the one-pass
 *      natural-order logits, and the masks of slot k see exactly the prompt
 *      and slots < k. */
#include "tasks/probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "tasks/eval.h"

const char *rf_probe_view_name(int view) {
    static const char *const n[] = {"ar", "mask_slot", "mask_all"};
    return view >= 0 && view < RF_PROBE_N_VIEWS ? n[view] : "?";
}

const char *rf_probe_class_name(int cls) {
    static const char *const n[] = {"start", "slot", "later"};
    return cls >= 0 && cls < RF_PROBE_N_CLASSES ? n[cls] : "?";
}

const char *rf_probe_class_label(int view, int cls) {
    if (cls == RF_PROBE_START) return "answer start";
    if (cls == RF_PROBE_SLOT) return view == RF_PROBE_AR ? "slot boundary" : "slot-first";
    if (cls == RF_PROBE_LATER) return "later in slot";
    return "?";
}

rf_probe_class rf_probe_class_of(int j, int slot_size) {
    if (j == 0) return RF_PROBE_START;
    return j % slot_size == 0 ? RF_PROBE_SLOT : RF_PROBE_LATER;
}

/* -log p(t), p(t) and whether t is the argmax, from one logits row, in double. */
static rf_probe_pos score(const float *l, int V, int t) {
    int am = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[am]) am = i;
    double mx = l[am], sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - mx);
    rf_probe_pos r;
    r.ce = mx + log(sum) - (double)l[t];
    r.prob = exp(-r.ce);
    r.top1 = am == t;
    return r;
}

typedef struct {
    const rf_model *m;
    rf_probe_stats *st;
    rf_probe_pos *per_pos;
    int A, S, V;
    const int *answer;
} probe_ctx;

static void record(probe_ctx *c, int view, int j, const float *l) {
    rf_probe_pos r = score(l, c->V, c->answer[j]);
    rf_probe_cell *cell = &c->st->cell[view][rf_probe_class_of(j, c->S)];
    cell->n++;
    cell->n_top1 += r.top1;
    cell->ce_sum += r.ce;
    cell->prob_sum += r.prob;
    if (c->per_pos) c->per_pos[(size_t)view * c->A + j] = r;
}

int rf_probe_example(const rf_model *m, const int *prompt, int P, const int *answer, int A, int mask_id,
                     rf_probe_stats *st, rf_probe_pos *per_pos) {
    const rf_config *cfg = &m->cfg;
    const int S = st->slot_size, V = cfg->vocab_size;
    if (S < 1) return rf_set_error("probe: slot size must be at least 1 (got %d)", S), -1;
    if (P < 1 || A < 1) return rf_set_error("probe: empty prompt (%d) or answer (%d)", P, A), -1;
    if ((long)P + A > cfg->max_pos)
        return rf_set_error("probe: prompt (%d) + answer (%d) tokens exceed the model's context (%d)", P, A,
                            cfg->max_pos),
               -1;
    if (mask_id < 0 || mask_id >= V)
        return rf_set_error("probe: mask id %d outside the vocabulary [0, %d)", mask_id, V), -1;
    /* the forward checks the ids too, but the answer's last token is never fed */
    for (int j = 0; j < A; j++)
        if (answer[j] < 0 || answer[j] >= V)
            return rf_set_error("probe: answer token %d (id %d) outside the vocabulary [0, %d)", j, answer[j],
                                V),
                   -1;

    const int max_tok = P > A ? P : A;
    rf_kvcache kv;
    rf_kv_init(&kv, cfg, P + A);
    rf_runstate *rs = rf_runstate_new(cfg, max_tok, P + A);
    float *logits = rf_malloc((size_t)A * V * sizeof(float));
    int *tok = rf_malloc((size_t)max_tok * sizeof(int)), *pos = rf_malloc((size_t)max_tok * sizeof(int));
    int *lidx = rf_malloc((size_t)max_tok * sizeof(int));
    probe_ctx c = {m, st, per_pos, A, S, V, answer};
    int rc = -1;

    /* 1. the prompt: its last token's logits predict answer position 0 */
    for (int i = 0; i < P; i++) pos[i] = i;
    lidx[0] = P - 1;
    rf_batch b = {1, P, prompt, pos, 0, 1, lidx, logits};
    if (rf_forward(m, &kv, rs, &b)) goto out;
    record(&c, RF_PROBE_AR, 0, logits);

    /* 2. the whole answer masked at once (the first plan call's view) */
    for (int j = 0; j < A; j++) tok[j] = mask_id, pos[j] = P + j, lidx[j] = j;
    rf_batch ball = {1, A, tok, pos, 0, A, lidx, logits};
    if (rf_forward(m, &kv, rs, &ball)) goto out;
    rf_kv_crop(&kv, P);
    for (int j = 0; j < A; j++) record(&c, RF_PROBE_MASK_ALL, j, logits + (size_t)j * V);

    /* 3. slot by slot: the slot as masks, then as itself */
    for (int s0 = 0; s0 < A; s0 += S) {
        int len = A - s0 < S ? A - s0 : S;
        for (int i = 0; i < len; i++) tok[i] = mask_id, pos[i] = P + s0 + i, lidx[i] = i;
        rf_batch bm = {1, len, tok, pos, 0, len, lidx, logits};
        if (rf_forward(m, &kv, rs, &bm)) goto out;
        rf_kv_crop(&kv, P + s0);
        for (int i = 0; i < len; i++) record(&c, RF_PROBE_MASK_SLOT, s0 + i, logits + (size_t)i * V);

        /* answer token s0+i predicts s0+i+1 (the last answer token, EOS, predicts nothing) */
        int nl = s0 + len < A ? len : len - 1;
        for (int i = 0; i < len; i++) tok[i] = answer[s0 + i], lidx[i] = i;
        rf_batch ba = {1, len, tok, pos, 0, nl, lidx, logits};
        if (rf_forward(m, &kv, rs, &ba)) goto out;
        for (int i = 0; i < nl; i++) record(&c, RF_PROBE_AR, s0 + i + 1, logits + (size_t)i * V);
    }
    st->n_examples++;
    rc = 0;
out:
    free(logits), free(tok), free(pos), free(lidx);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return rc;
}

int rf_probe_run(const rf_model *m, const rf_tokenizer *tok, const json_t *examples, int limit,
                 rf_probe_stats *st, rf_probe_progress_cb on_done, void *user) {
    int S = st->slot_size;
    memset(st, 0, sizeof *st);
    st->slot_size = S;
    int total = (int)json_array_size(examples);
    if (limit > 0 && limit < total) total = limit;
    const int eos = rf_tok_eos_id(tok), mask = rf_tok_mask_id(tok);
    if (eos < 0) return rf_set_error("probe: the tokenizer has no EOS token"), -1;
    if (mask < 0) return rf_set_error("probe: the tokenizer has no <|mask|> token"), -1;
    for (int i = 0; i < total; i++) {
        const json_t *ex = json_array_get(examples, i);
        const char *query = json_string_value(json_object_get(ex, "query"));
        const json_t *resp = json_object_get(ex, "response");
        int *pi = NULL, *ri = NULL, np = 0, nr = 0, rc = -1;
        if (!query || !json_is_string(resp)) {
            rf_set_error("example %d: needs string \"query\" and \"response\"", i);
            return -1;
        }
        if (rf_chat_query_ids(tok, query, &pi, &np) == 0 &&
            rf_tok_encode(tok, json_string_value(resp), json_string_length(resp), &ri, &nr) == 0) {
            int *ans = rf_malloc((size_t)(nr + 1) * sizeof(int));
            memcpy(ans, ri, (size_t)nr * sizeof(int));
            ans[nr] = eos;
            rc = rf_probe_example(m, pi, np, ans, nr + 1, mask, st, NULL);
            free(ans);
        }
        free(pi), free(ri);
        if (rc) {
            rf_prefix_error("example %d", i);
            return -1;
        }
        if (on_done) on_done(i + 1, total, user);
    }
    return 0;
}

double rf_probe_cell_ce(const rf_probe_cell *c) { return c->n ? c->ce_sum / c->n : 0.0; }
double rf_probe_cell_acc(const rf_probe_cell *c) { return c->n ? (double)c->n_top1 / c->n : 0.0; }
double rf_probe_cell_prob(const rf_probe_cell *c) { return c->n ? c->prob_sum / c->n : 0.0; }

/* the sum of a view's three classes */
static rf_probe_cell view_all(const rf_probe_stats *st, int v) {
    rf_probe_cell a = {0, 0, 0, 0};
    for (int k = 0; k < RF_PROBE_N_CLASSES; k++) {
        const rf_probe_cell *c = &st->cell[v][k];
        a.n += c->n, a.n_top1 += c->n_top1, a.ce_sum += c->ce_sum, a.prob_sum += c->prob_sum;
    }
    return a;
}

static json_t *cell_json(const rf_probe_cell *c) {
    return json_pack("{s:I, s:f, s:f, s:f}", "n", (json_int_t)c->n, "ce", rf_probe_cell_ce(c), "acc",
                     rf_probe_cell_acc(c), "prob", rf_probe_cell_prob(c));
}

json_t *rf_probe_json(const rf_probe_stats *st) {
    json_t *views = json_object();
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++) {
        json_t *vj = json_object();
        for (int k = 0; k < RF_PROBE_N_CLASSES; k++)
            json_object_set_new(vj, rf_probe_class_name(k), cell_json(&st->cell[v][k]));
        rf_probe_cell a = view_all(st, v);
        json_object_set_new(vj, "all", cell_json(&a));
        json_object_set_new(views, rf_probe_view_name(v), vj);
    }
    return json_pack("{s:i, s:i, s:o}", "slot_size", st->slot_size, "examples", st->n_examples, "views", views);
}

char *rf_probe_markdown(const rf_probe_stats *st) {
    static const char *const head[] = {"AR head (natural order)", "mask head (slot by slot)",
                                       "mask head (whole answer masked)"};
    size_t cap = 4096, len = 0;
    char *buf = rf_malloc(cap);
    len += (size_t)snprintf(buf + len, cap - len,
                            "| head | position class | n | CE (nats) | top-1 acc | p(true) |\n"
                            "|------|----------------|--:|----------:|----------:|--------:|\n");
    for (int v = 0; v < RF_PROBE_N_VIEWS; v++)
        for (int k = 0; k <= RF_PROBE_N_CLASSES; k++) {
            rf_probe_cell a = k < RF_PROBE_N_CLASSES ? st->cell[v][k] : view_all(st, v);
            const char *label = k < RF_PROBE_N_CLASSES ? rf_probe_class_label(v, k) : "all";
            len += (size_t)snprintf(buf + len, cap - len, "| %s | %s | %ld | %.4f | %.4f | %.4f |\n", head[v],
                                    label, a.n, rf_probe_cell_ce(&a), rf_probe_cell_acc(&a),
                                    rf_probe_cell_prob(&a));
        }
    return buf;
}
