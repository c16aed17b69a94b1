/* model_forward.c - the cached forward pass against the no-cache reference.
 *
 *  1. a sequence fed in uneven chunks through the cache, with position ids
 *     out of physical order, gives the logits of one reference pass
 *     (naive matmuls, RoPE from the formula per position id, double accum);
 *  2. bidirectional chunks match the bidirectional reference;
 *  3. rows forked from a shared prefix give the logits of independent runs;
 *  4. entries committed from a row back into main, then more tokens, match
 *     the reference over the committed physical sequence;
 *  5. crop + re-feed reproduces the same logits; bad batches are rejected.
 * Tolerance: max |fast - ref| <= 2e-4 * max |ref| (f32 accumulation vs double). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/small_config.h"
#include "model/forward.h"
#include "util/util.h"

#define TOL 2e-4

/* four_kv: 4 KV heads of 64 (a KV width of 1 KiB), each its own run of the
 * head-major cache (kvcache.h) */
static rf_config tiny_config(int tied, int four_kv) {
    rf_config c = four_kv ? rf_test_config(64, 96, 4, 4, 64, 300, 4096)
                          : rf_test_config(64, 96, 4, 2, 24, 300, 4096); /* head_dim != hidden / heads, as Qwen3 allows */
    c.tie_embeddings = tied;
    c.eos_id = 1, c.mask_id = 299, c.bot_id = 298;
    return c;
}

/* logits of tokens[0..n) fed through the cache in chunks of the given sizes */
static void run_chunked(const rf_model *m, int n, const int *tok, const int *pos, const int *chunks,
                        float *out) {
    int V = m->cfg.vocab_size;
    rf_kvcache c;
    rf_kv_init(&c, &m->cfg, 64);
    rf_runstate *s = rf_runstate_new(&m->cfg, 32, 64);
    int done = 0;
    for (int ci = 0; done < n; ci++) {
        int k = chunks[ci] < n - done ? chunks[ci] : n - done;
        int idx[32];
        for (int i = 0; i < k; i++) idx[i] = i;
        rf_batch b = {1, k, tok + done, pos + done, 0, k, idx, out + (size_t)done * V};
        CHECK(rf_forward(m, &c, s, &b) == 0, "chunked forward: %s", rf_last_error());
        done += k;
    }
    CHECK(c.len == n, "cache length %d after feeding %d tokens", c.len, n);
    rf_runstate_free(s);
    rf_kv_free(&c);
}

static void test_model(rf_dtype dt, int tied, int four_kv) {
    rf_config cfg = tiny_config(tied, four_kv);
    rf_model m;
    rf_model_init_random(&m, &cfg, dt, 0.3f, 42 + tied);
    const int V = cfg.vocab_size, N = 20;
    rf_rng rng;
    rf_rng_seed(&rng, 7);
    int tok[N], pos[N];
    for (int i = 0; i < N; i++) tok[i] = (int)rf_rng_below(&rng, V);
    /* positions: a prompt 0..5, then slots placed out of order (ReFusion's
     * reordering): 14..17, 6..9, 18..19, 10..13 */
    int order[] = {0, 1, 2, 3, 4, 5, 14, 15, 16, 17, 6, 7, 8, 9, 18, 19, 10, 11, 12, 13};
    for (int i = 0; i < N; i++) pos[i] = order[i];

    float *ref = rf_malloc(sizeof(float) * N * V), *got = rf_malloc(sizeof(float) * N * V);
    CHECK(rf_forward_reference(&m, N, tok, pos, 0, ref) == 0, "reference: %s", rf_last_error());

    /* 1. chunked, out-of-order positions */
    int chunks[] = {7, 1, 5, 7};
    run_chunked(&m, N, tok, pos, chunks, got);
    double e = check_rel_err(got, ref, (size_t)N * V);
    CHECK(e <= TOL, "dtype %d tied %d: chunked cached forward vs reference rel err %.3g", dt, tied, e);
    int ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1;
    run_chunked(&m, N, tok, pos, ones, got);
    e = check_rel_err(got, ref, (size_t)N * V);
    CHECK(e <= TOL, "token-by-token forward vs reference rel err %.3g", e);

    /* the positions matter: the same tokens in natural position order differ */
    int nat[N];
    for (int i = 0; i < N; i++) nat[i] = i;
    float *ref2 = rf_malloc(sizeof(float) * N * V);
    rf_forward_reference(&m, N, tok, nat, 0, ref2);
    CHECK(check_rel_err(ref2, ref, (size_t)N * V) > 1e-3, "position ids have no effect");

    /* 2. bidirectional: prefix causal in cache, then a bidirectional chunk == reference
     * bidirectional over the chunk alone when the cache is empty */
    {
        rf_kvcache c;
        rf_kv_init(&c, &cfg, 64);
        rf_runstate *s = rf_runstate_new(&cfg, 32, 64);
        int idx[N];
        for (int i = 0; i < N; i++) idx[i] = i;
        rf_batch b = {1, N, tok, pos, 1, N, idx, got};
        CHECK(rf_forward(&m, &c, s, &b) == 0, "bidirectional: %s", rf_last_error());
        rf_forward_reference(&m, N, tok, pos, 1, ref2);
        e = check_rel_err(got, ref2, (size_t)N * V);
        CHECK(e <= TOL, "bidirectional forward vs reference rel err %.3g", e);
        CHECK(check_rel_err(ref2, ref, (size_t)N * V) > 1e-3, "bidirectional flag has no effect");
        rf_runstate_free(s);
        rf_kv_free(&c);
    }

    /* 3 + 4. fork: prefix of P tokens, R rows each fed 2 chunks of 3 */
    {
        const int P = 8, R = 3, n = 3;
        rf_kvcache c;
        rf_kv_init(&c, &cfg, 64);
        rf_runstate *s = rf_runstate_new(&cfg, 32, 64);
        int idx[32];
        for (int i = 0; i < 32; i++) idx[i] = i;
        rf_batch b = {1, P, tok, pos, 0, 0, idx, NULL};
        CHECK(rf_forward(&m, &c, s, &b) == 0, "prefix: %s", rf_last_error());
        rf_kv_fork(&c, R, 8);
        int rt[R][2 * n], rp[R][2 * n];
        for (int r = 0; r < R; r++)
            for (int j = 0; j < 2 * n; j++) {
                rt[r][j] = (int)rf_rng_below(&rng, V);
                rp[r][j] = 30 + 7 * r + j;
            }
        float *fl = rf_malloc(sizeof(float) * R * 2 * n * V);
        for (int step = 0; step < 2; step++) {
            int bt[R * n], bp[R * n];
            for (int r = 0; r < R; r++)
                for (int j = 0; j < n; j++) {
                    bt[r * n + j] = rt[r][step * n + j];
                    bp[r * n + j] = rp[r][step * n + j];
                }
            float *lg = rf_malloc(sizeof(float) * R * n * V);
            rf_batch fb = {R, n, bt, bp, 0, R * n, idx, lg};
            CHECK(rf_forward(&m, &c, s, &fb) == 0, "forked step: %s", rf_last_error());
            for (int r = 0; r < R; r++)
                memcpy(fl + ((size_t)r * 2 * n + step * n) * V, lg + (size_t)r * n * V, sizeof(float) * n * V);
            free(lg);
        }
        CHECK(c.len == P, "forking changed main length to %d", c.len);
        for (int r = 0; r < R; r++) {
            int st[P + 2 * n], sp[P + 2 * n];
            memcpy(st, tok, P * sizeof(int));
            memcpy(sp, pos, P * sizeof(int));
            memcpy(st + P, rt[r], 2 * n * sizeof(int));
            memcpy(sp + P, rp[r], 2 * n * sizeof(int));
            float *rl = rf_malloc(sizeof(float) * (P + 2 * n) * V);
            rf_forward_reference(&m, P + 2 * n, st, sp, 0, rl);
            e = check_rel_err(fl + (size_t)r * 2 * n * V, rl + (size_t)P * V, (size_t)2 * n * V);
            CHECK(e <= TOL, "forked row %d vs independent reference rel err %.3g", r, e);
            free(rl);
        }
        /* 4. keep rows {2, 0}; commit the first 4 entries of (old) row 2 to main */
        int keep[] = {2, 0};
        rf_kv_select_rows(&c, keep, 2);
        CHECK(c.n_rows == 2 && c.row_len[0] == 2 * n, "select rows: %d rows, len %d", c.n_rows, c.row_len[0]);
        CHECK(rf_kv_commit_row(&c, 0, 0, 4) == 0, "commit: %s", rf_last_error());
        CHECK(c.len == P + 4, "main length %d after commit", c.len);
        CHECK(rf_kv_commit_row(&c, 0, 4, 5) != 0, "commit past the row end accepted");
        rf_kv_unfork(&c);
        int nt[2] = {5, 9}, np[2] = {40, 41};
        float *lg = rf_malloc(sizeof(float) * 2 * V);
        rf_batch nb = {1, 2, nt, np, 0, 2, idx, lg};
        CHECK(rf_forward(&m, &c, s, &nb) == 0, "after commit: %s", rf_last_error());
        int st[P + 6], sp[P + 6];
        memcpy(st, tok, P * sizeof(int));
        memcpy(sp, pos, P * sizeof(int));
        memcpy(st + P, rt[2], 4 * sizeof(int));
        memcpy(sp + P, rp[2], 4 * sizeof(int));
        st[P + 4] = 5, st[P + 5] = 9, sp[P + 4] = 40, sp[P + 5] = 41;
        float *rl = rf_malloc(sizeof(float) * (P + 6) * V);
        rf_forward_reference(&m, P + 6, st, sp, 0, rl);
        e = check_rel_err(lg, rl + (size_t)(P + 4) * V, (size_t)2 * V);
        CHECK(e <= TOL, "forward after commit vs reference rel err %.3g", e);
        CHECK(c.pos[P] == rp[2][0] && c.pos[P + 3] == rp[2][3], "committed position ids wrong");

        /* 5. crop back and re-feed: identical logits */
        float *lg2 = rf_malloc(sizeof(float) * 2 * V);
        rf_kv_crop(&c, P + 4);
        nb.logits = lg2;
        CHECK(rf_forward(&m, &c, s, &nb) == 0, "re-feed: %s", rf_last_error());
        CHECK(memcmp(lg, lg2, sizeof(float) * 2 * V) == 0, "crop + re-feed changed the logits");

        /* bad batches */
        int bad_tok[1] = {V}, one_pos[1] = {0};
        rf_batch bb = {1, 1, bad_tok, one_pos, 0, 0, idx, NULL};
        CHECK(rf_forward(&m, &c, s, &bb) != 0 && strstr(rf_last_error(), "vocabulary"),
              "token id outside the vocabulary accepted");
        rf_batch br = {2, 1, nt, np, 0, 0, idx, NULL};
        CHECK(rf_forward(&m, &c, s, &br) != 0, "2 rows on an unforked cache accepted");
        rf_kv_crop(&c, 0);
        int many[40] = {0}, mpos[40] = {0};
        rf_batch bf = {1, 40, many, mpos, 0, 0, idx, NULL};
        rf_runstate *s2 = rf_runstate_new(&cfg, 64, 64);
        c.len = 30;
        CHECK(rf_forward(&m, &c, s2, &bf) != 0, "cache overflow accepted");
        rf_runstate_free(s2);
        free(lg), free(lg2), free(rl), free(fl);
        rf_runstate_free(s);
        rf_kv_free(&c);
    }
    free(ref), free(ref2), free(got);
    rf_model_free(&m);
}

int main(void) {
    /* compared with f32 references at f32 tolerances: the f32-grade split
     * activations (the default rounding to bf16 is tested in kernels_matmul) */
    rf_matmul_set_bf16_act(0);
    test_model(RF_F32, 1, 0);
    test_model(RF_F32, 0, 0);
    test_model(RF_BF16, 1, 0);
    test_model(RF_F16, 0, 0);
    test_model(RF_F32, 0, 1);
    return check_summary("model_forward");
}
