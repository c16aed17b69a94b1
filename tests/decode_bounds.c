/* decode_bounds.c - the decoders' size checks: settings a request
 * can choose, up to INT_MAX, never overflow a size and never reach an
 * allocation.
 *
 *  1. slot_size = INT_MAX and gen_length = INT_MAX (ReFusion and AR), and
 *     their sums with the prompt, are refused by rf_gen_check with a message
 *     about the context, and rf_generate_* return -1 instead of wrapping the
 *     padded length to 0 (which wrote past a 1-int block layout);
 *  2. the exact boundary: prompt + padded answer == context is accepted and
 *     generates, one more token is refused;
 *  3. rf_gen_mem_bytes: at least the KV cache and the logits the decoder
 *     allocates (computed here from the formula independently), growing with
 *     the answer, and a generation larger than the machine's memory (a model
 *     with a huge vocabulary and context, never allocated) is refused by
 *     rf_gen_check with the "more than this machine's" message. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/small_config.h"
#include "decode/decode_impl.h"

static rf_config cfg_small(int max_pos) {
    rf_config c = rf_test_config(32, 64, 2, 1, 16, 64, max_pos);
    c.tie_embeddings = 1;
    c.eos_id = 62, c.mask_id = 63;
    return c;
}

static int has(const char *needle) { return strstr(rf_last_error(), needle) != NULL; }

static void test_int_max(const rf_model *m) {
    int prompt[3] = {1, 2, 3};
    rf_params p;
    const struct {
        int gen, slot, blocks, ar;
    } cases[] = {
        {8, INT_MAX, 32, 0},          /* the crashing request: padded length wrapped to 0 */
        {INT_MAX, 4, 32, 0},          /* gen + slot - 1 overflowed int */
        {INT_MAX, 1, 1, 0},           /* no padding, still past the context */
        {INT_MAX, 4, 32, 1},          /* AR: n_prompt + G wrapped negative in int */
        {INT_MAX - 2, 4, INT_MAX, 0}, /* and blocks as large as they come */
        {8, INT_MAX - 1, INT_MAX, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rf_gen_params_default(&p);
        p.gen_length = cases[i].gen, p.slot_size = cases[i].slot, p.n_blocks = cases[i].blocks;
        rf_set_error("none");
        CHECK(rf_gen_check(m, prompt, 3, &p, cases[i].ar) == -1 && has("context"),
              "case %zu: gen %d slot %d blocks %d ar %d: accepted or wrong message '%s'", i, cases[i].gen,
              cases[i].slot, cases[i].blocks, cases[i].ar, rf_last_error());
        CHECK(gen_padded64(&p) >= p.gen_length, "case %zu: padded length %lld < gen_length %d", i,
              (long long)gen_padded64(&p), p.gen_length);
        rf_gen_result r;
        int rc = cases[i].ar ? rf_generate_ar(m, prompt, 3, &p, &r) : rf_generate_refusion(m, prompt, 3, &p, &r);
        CHECK(rc == -1 && r.ids == NULL, "case %zu: the decoder ran (rc %d)", i, rc);
    }
}

static void test_boundary(const rf_model *m) {
    int prompt[4] = {1, 2, 3, 4}, P = 4, room = m->cfg.max_pos - P; /* room: a multiple of 4 */
    rf_params p;
    rf_gen_params_default(&p);
    p.eos_id = -1; /* fill the whole answer */
    p.slot_size = 4;
    p.n_blocks = 2;
    p.gen_length = room - 3; /* pads up to exactly room */
    rf_gen_result r;
    CHECK(rf_generate_refusion(m, prompt, P, &p, &r) == 0 && r.n_ids == room,
          "prompt + padded answer == context: %s (n_ids %d)", rf_last_error(), r.n_ids);
    rf_gen_result_free(&r);
    p.gen_length = room + 1; /* pads to room + 4 */
    CHECK(rf_gen_check(m, prompt, P, &p, 0) == -1 && has("context"), "one slot more: %s", rf_last_error());
    p.gen_length = room;
    CHECK(rf_gen_check(m, prompt, P, &p, 1) == 0, "AR at the boundary: %s", rf_last_error());
    p.gen_length++;
    CHECK(rf_gen_check(m, prompt, P, &p, 1) == -1, "AR one past the boundary accepted");
}

static void test_memory(const rf_model *m) {
    const rf_config *c = &m->cfg;
    rf_params p;
    rf_gen_params_default(&p);
    p.slot_size = 4, p.n_blocks = 1;
    int64_t prev = 0;
    for (int G = 4; G <= 64; G *= 2) {
        p.gen_length = G;
        int64_t est = rf_gen_mem_bytes(m, 10, &p, 0);
        /* independent lower bound: K and V of every layer for prompt + answer,
         * and a logits row per token of the one block */
        int64_t kv = 2LL * c->n_layers * (10 + G) * c->n_kv_heads * c->head_dim * 4;
        int64_t logits = (int64_t)G * c->vocab_size * 4;
        CHECK(est >= kv + logits, "G %d: estimate %lld below KV %lld + logits %lld", G, (long long)est,
              (long long)kv, (long long)logits);
        CHECK(est > prev, "G %d: estimate %lld does not grow (was %lld)", G, (long long)est, (long long)prev);
        prev = est;
    }
    /* the rolling slot (rolling.c): calls of up to 2 slots, whatever the
     * blocks say; a long slot and a short prompt need 2 * slot logits rows
     * (a config-only model with a large vocabulary, so that they dominate) */
    rf_model wide;
    memset(&wide, 0, sizeof wide);
    wide.cfg = cfg_small(4096);
    wide.cfg.vocab_size = 1 << 16;
    wide.cfg.eos_id = (1 << 16) - 2, wide.cfg.mask_id = (1 << 16) - 1;
    p.rolling = 1, p.slot_size = 100, p.n_blocks = 1, p.gen_length = 100;
    for (int ar = 0; ar < 2; ar++) {
        const rf_config *w = &wide.cfg;
        int64_t est = rf_gen_mem_bytes(&wide, 10, &p, ar);
        int64_t need = 2LL * w->n_layers * 110 * w->n_kv_heads * w->head_dim * 4 + 200LL * w->vocab_size * 4;
        CHECK(est >= need, "rolling (ar %d): estimate %lld below KV + logits %lld", ar, (long long)est,
              (long long)need);
    }
    p.rolling = 0;
    /* A model whose generation cannot fit any machine: its config is only
     * read by rf_gen_check, no weight is ever touched. 2^24 vocabulary x 2^20
     * tokens of logits = 64 TiB. */
    rf_model big;
    memset(&big, 0, sizeof big);
    big.cfg = cfg_small(1 << 20);
    big.cfg.vocab_size = 1 << 24;
    big.cfg.eos_id = (1 << 24) - 2, big.cfg.mask_id = (1 << 24) - 1;
    int prompt = 1;
    p.gen_length = (1 << 20) - 8, p.slot_size = 8, p.n_blocks = 1;
    rf_set_error("none");
    CHECK(rf_gen_check(&big, &prompt, 1, &p, 0) == -1 && has("more than this machine"),
          "64 TiB generation: '%s'", rf_last_error());
    CHECK(rf_gen_mem_bytes(&big, 1, &p, 0) > (1LL << 45), "64 TiB generation estimated at %lld bytes",
          (long long)rf_gen_mem_bytes(&big, 1, &p, 0));
}

int main(void) {
    rf_model m;
    rf_config c = cfg_small(64);
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 3);
    test_int_max(&m);
    test_boundary(&m);
    test_memory(&m);
    rf_model_free(&m);
    return check_summary("decode_bounds");
}
