/* model_forward_calls.c - several decoders' calls in one forward pass
 * (rf_forward_calls, the server's continuous batching) give exactly what
 * each call gives alone with rf_forward.
 *
 * Four caches are built twice the same way. Then, on one set, each call is
 * made alone; on the other, all in one pass:
 *  - a plan-and-infill call: 3 forked rows x 4 tokens over a shared prompt,
 *    the rows' extensions of different lengths before the call (one row
 *    cropped), logits of some tokens of each row;
 *  - an MDM call: a bidirectional pass over 7 tokens on an empty cache (MDM
 *    recomputes prompt and answer together each step), logits of 3;
 *  - an AR token and a prompt chunk without logits on unforked caches.
 * The logits must be bit for bit the same, and so must every cache entry
 * (K, V, position ids of main and of each row) and every length. A call the
 * pass refuses (a token outside the vocabulary) is named by its index with
 * rf_forward's own message, and nothing changes; two calls on one cache are
 * refused. The calls alone are held to the no-cache reference too (f32):
 * each forked row's logits are those of its own physical sequence, the
 * MDM call's those of a bidirectional pass, so that a fault the pass and
 * rf_forward share (they are one implementation) is seen as well.
 * At every kernel tier the CPU has: f32 and Q8_0 weights, whose kernels
 * give every token the same numbers at any call width; bf16 at the avx512
 * tier only (the avx2 tier's packed bf16 kernel and the amx tier's bf16
 * tiles from 5 tokens round differently at different widths: a pass of
 * many calls agrees with the calls alone there within rounding, not bit
 * for bit, the same as rows of rf_forward_seqs). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/cpu.h"
#include "model/model.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "util/util.h"

enum { NC = 4, P = 9, R = 3, ROW_CAP = 12, N_ROW = 4, N_BI = 7 };

static void feed(const rf_model *m, rf_kvcache *c, rf_runstate *s, int n, const int *tok, const int *pos) {
    rf_batch b = {1, n, tok, pos, 0, 0, NULL, NULL};
    CHECK(rf_forward(m, c, s, &b) == 0, "setup: %s", rf_last_error());
}

/* The four caches before the calls: 0 forked with rows of 5, 2, 5 entries;
 * 1 empty (MDM); 2 a prompt and answer (AR); 3 a prompt's first chunk. */
static void build(const rf_model *m, rf_runstate *s, rf_kvcache *kv, const int *tok, const int *pos) {
    for (int i = 0; i < NC; i++) rf_kv_init(&kv[i], &m->cfg, 64);
    feed(m, &kv[0], s, P, tok, pos);
    rf_kv_fork(&kv[0], R, ROW_CAP);
    int rt[R * 5], rp[R * 5];
    for (int i = 0; i < R * 5; i++) rt[i] = tok[(i * 7 + 3) % 40], rp[i] = P + 10 + i;
    rf_batch fb = {R, 5, rt, rp, 0, 0, NULL, NULL};
    CHECK(rf_forward(m, &kv[0], s, &fb) == 0, "setup fork: %s", rf_last_error());
    rf_kv_row_crop(&kv[0], 1, 2);
    feed(m, &kv[2], s, 13, tok + 5, pos);
    feed(m, &kv[3], s, 6, tok + 11, pos);
}

/* the entries and lengths of a and b are the same, bit for bit */
static int same_cache(const rf_kvcache *a, const rf_kvcache *b) {
    if (a->len != b->len || a->n_rows != b->n_rows) return 0;
    if (memcmp(a->pos, b->pos, (size_t)a->len * sizeof(int))) return 0;
    const int nkv = a->kv_dim / a->head_dim;
    for (int l = 0; l < a->n_layers; l++)
        for (int i = 0; i < a->len; i++)
            for (int g = 0; g < nkv; g++) {
                size_t oa = rf_kv_main_off(a, l, i) + g * rf_kv_main_head(a),
                       ob = rf_kv_main_off(b, l, i) + g * rf_kv_main_head(b);
                if (memcmp(a->k + oa, b->k + ob, (size_t)a->head_dim * sizeof(float)) ||
                    memcmp(a->v + oa, b->v + ob, (size_t)a->head_dim * sizeof(float)))
                    return 0;
            }
    for (int r = 0; r < a->n_rows; r++) {
        if (a->row_len[r] != b->row_len[r]) return 0;
        if (memcmp(a->row_pos + (size_t)r * a->row_cap, b->row_pos + (size_t)r * b->row_cap,
                   (size_t)a->row_len[r] * sizeof(int)))
            return 0;
        for (int l = 0; l < a->n_layers; l++)
            for (int i = 0; i < a->row_len[r]; i++)
                for (int g = 0; g < nkv; g++) {
                    size_t oa = rf_kv_row_off(a, r, l, i) + g * rf_kv_row_head(a),
                           ob = rf_kv_row_off(b, r, l, i) + g * rf_kv_row_head(b);
                    if (memcmp(a->row_k + oa, b->row_k + ob, (size_t)a->head_dim * sizeof(float)) ||
                        memcmp(a->row_v + oa, b->row_v + ob, (size_t)a->head_dim * sizeof(float)))
                        return 0;
                }
    }
    return 1;
}

/* The calls alone against the reference: forked row r's logits (indices fl,
 * 2 per row) are those of prompt + its extension + its new tokens in
 * physical order; the MDM call's those of a bidirectional pass. */
static void check_reference(const rf_model *m, const float *la, const int *tok, const int *pos, const int *ft,
                            const int *fp, const int *fl, const int *bt, const int *bp, const int *bl) {
    const int V = m->cfg.vocab_size, ext[R] = {5, 2, 5};
    enum { MAXN = P + 5 + N_ROW };
    float *ref = rf_malloc(sizeof(float) * MAXN * V);
    for (int r = 0; r < R; r++) {
        int st[MAXN], sp[MAXN], n = 0;
        for (int i = 0; i < P; i++) st[n] = tok[i], sp[n++] = pos[i];
        for (int i = 0; i < ext[r]; i++) st[n] = tok[((r * 5 + i) * 7 + 3) % 40], sp[n++] = P + 10 + r * 5 + i;
        for (int i = 0; i < N_ROW; i++) st[n] = ft[r * N_ROW + i], sp[n++] = fp[r * N_ROW + i];
        CHECK(rf_forward_reference(m, n, st, sp, 0, ref) == 0, "reference: %s", rf_last_error());
        for (int k = 0; k < 2; k++) {
            int j = fl[2 * r + k] - r * N_ROW; /* the token within its row */
            double e = check_rel_err(la + (size_t)(2 * r + k) * V, ref + (size_t)(n - N_ROW + j) * V, V);
            CHECK(e <= 2e-4, "forked row %d token %d vs the reference: rel err %.3g", r, j, e);
        }
    }
    CHECK(rf_forward_reference(m, N_BI, bt, bp, 1, ref) == 0, "reference: %s", rf_last_error());
    for (int k = 0; k < 3; k++) {
        double e = check_rel_err(la + (size_t)(6 + k) * V, ref + (size_t)bl[k] * V, V);
        CHECK(e <= 2e-4, "the MDM call's token %d vs the bidirectional reference: rel err %.3g", bl[k], e);
    }
    free(ref);
}

static void test_calls(rf_dtype dt) {
    rf_config cfg = rf_test_config(64, 96, 4, 2, 24, 300, 4096);
    rf_model m;
    rf_model_init_random(&m, &cfg, dt == RF_Q8_0 ? RF_F32 : dt, 0.3f, 11);
    if (dt == RF_Q8_0) CHECK(rf_model_quantize(&m, RF_Q8_0) == 0, "quantize: %s", rf_last_error());
    const int V = cfg.vocab_size;
    rf_rng rng;
    rf_rng_seed(&rng, 5);
    int tok[40], pos[40];
    for (int i = 0; i < 40; i++) tok[i] = (int)rf_rng_below(&rng, V), pos[i] = i;
    rf_runstate *s = rf_runstate_new(&cfg, 64, 128);
    rf_kvcache alone[NC], both[NC];
    build(&m, s, alone, tok, pos);
    build(&m, s, both, tok, pos);
    CHECK(alone[0].row_len[0] == 5 && alone[0].row_len[1] == 2, "setup: rows of %d and %d entries",
          alone[0].row_len[0], alone[0].row_len[1]);

    /* the calls: plan-and-infill rows, an MDM chunk, an AR token, a prompt chunk */
    int ft[R * N_ROW], fp[R * N_ROW], fl[] = {0, 3, 5, 6, 9, 11};
    for (int i = 0; i < R * N_ROW; i++) ft[i] = tok[(i * 5 + 1) % 40], fp[i] = P + 20 + i;
    int bt[N_BI], bp[N_BI], bl[] = {1, 4, 6};
    for (int i = 0; i < N_BI; i++) bt[i] = i % 2 ? 299 : tok[i + 20], bp[i] = i;
    int at = tok[30], ap = 13, al = 0;
    int pt[5], pp[5];
    for (int i = 0; i < 5; i++) pt[i] = tok[i + 31], pp[i] = 6 + i;
    const int nl[NC] = {6, 3, 1, 0}, L = 10;
    float *la = rf_malloc(sizeof(float) * L * V), *lb = rf_malloc(sizeof(float) * L * V);
    rf_batch calls[NC] = {
        {R, N_ROW, ft, fp, 0, nl[0], fl, la},
        {1, N_BI, bt, bp, 1, nl[1], bl, la + (size_t)nl[0] * V},
        {1, 1, &at, &ap, 0, nl[2], &al, la + (size_t)(nl[0] + nl[1]) * V},
        {1, 5, pt, pp, 0, 0, NULL, NULL},
    };
    for (int i = 0; i < NC; i++) CHECK(rf_forward(&m, &alone[i], s, &calls[i]) == 0, "alone %d: %s", i, rf_last_error());

    if (dt == RF_F32) check_reference(&m, la, tok, pos, ft, fp, fl, bt, bp, bl);

    /* in one pass, in another order: the MDM chunk first */
    rf_kvcache *kv[NC] = {&both[1], &both[3], &both[0], &both[2]};
    rf_batch in[NC] = {calls[1], calls[3], calls[0], calls[2]};
    int bad = 7;
    rf_call_batch cb = {NC, kv, in, lb};
    CHECK(rf_forward_calls(&m, s, &cb, &bad) == 0, "one pass: %s", rf_last_error());
    /* logits in the pass's order: MDM (3), forked (6), AR (1) */
    CHECK(!memcmp(lb, la + (size_t)nl[0] * V, sizeof(float) * 3 * V), "the MDM call's logits differ in the pass");
    CHECK(!memcmp(lb + (size_t)3 * V, la, sizeof(float) * 6 * V), "the forked call's logits differ in the pass");
    CHECK(!memcmp(lb + (size_t)9 * V, la + (size_t)9 * V, sizeof(float) * V), "the AR call's logits differ");
    for (int i = 0; i < NC; i++) CHECK(same_cache(&alone[i], &both[i]), "cache %d differs after the pass", i);
    CHECK(both[0].row_len[1] == 2 + N_ROW && both[1].len == N_BI, "lengths after the pass: %d, %d",
          both[0].row_len[1], both[1].len);

    /* refusals: the first bad call by index, rf_forward's message; nothing changed */
    int bad_tok[1] = {V};
    rf_batch wrong = {1, 1, bad_tok, &ap, 0, 0, NULL, NULL};
    rf_kvcache *kv2[2] = {&both[1], &both[2]};
    rf_batch in2[2] = {calls[1], wrong};
    rf_call_batch cb2 = {2, kv2, in2, lb};
    CHECK(rf_forward(&m, &alone[2], s, &wrong) != 0, "a token outside the vocabulary accepted");
    char msg[300];
    snprintf(msg, sizeof msg, "%s", rf_last_error());
    CHECK(rf_forward_calls(&m, s, &cb2, &bad) != 0 && bad == 1 && !strcmp(rf_last_error(), msg),
          "a bad call in a pass: bad %d, \"%s\" (alone: \"%s\")", bad, rf_last_error(), msg);
    CHECK(both[1].len == N_BI, "a refused pass changed a cache");
    rf_kvcache *kv3[2] = {&both[2], &both[2]};
    rf_batch in3[2] = {calls[2], calls[2]};
    rf_call_batch cb3 = {2, kv3, in3, lb};
    CHECK(rf_forward_calls(&m, s, &cb3, &bad) != 0 && bad == -1, "two calls on one cache accepted");

    free(la), free(lb);
    for (int i = 0; i < NC; i++) rf_kv_free(&alone[i]), rf_kv_free(&both[i]);
    rf_runstate_free(s);
    rf_model_free(&m);
}

int main(void) {
    for (int t = RF_CPU_AVX2; t <= (int)rf_cpu_tier_detected(); t++) {
        CHECK(rf_cpu_set_tier((rf_cpu_tier)t) == 0, "tier %s: %s", rf_cpu_tier_str((rf_cpu_tier)t), rf_last_error());
        test_calls(RF_F32);
        test_calls(RF_Q8_0);
        if (t == RF_CPU_AVX512) test_calls(RF_BF16);
    }
    return check_summary("model_forward_calls");
}
