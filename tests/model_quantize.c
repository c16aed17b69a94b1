/* model_quantize.c - rf_model_quantize on a small random Qwen3 (bf16 weights,
 * std 0.1; GQA, head_dim != hidden / heads): the logits of its Q8_0 and Q4_0
 * versions against the bf16 model's, at every CPU tier this machine has.
 *
 * Tolerances, max |logit_q - logit_bf16| / max |logit_bf16| over 6 tokens:
 *   Q8_0 <= 5e-2 (measured 1.9e-2: 8-bit weights and activations)
 *   Q4_0 <= 0.6  (measured 0.32 untied, 0.44 tied: 4-bit weights)
 * Gaussian random weights are a worst case for block quantisation (every
 * block's scale is set by a ~2.2 sigma extreme, no structure), and the error
 * of every matrix compounds through the 2 layers; these bounds catch a
 * broken quantiser or kernel (errors ~1), not a subtle one: that is what
 * tests/kernels_quant.c checks tightly.
 * and Q4_0 must be further off than Q8_0 (both must really be quantised).
 * Also: a checkpoint written to disk, loaded (mmap'd) and quantised gives the
 * same logits bit for bit as the in-memory model of the same seed (norms move
 * out of the loader's heap block, matrices out of the mmap); a bad target
 * dtype is rejected with the model unchanged. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "helpers/small_config.h"
#include "kernels/cpu.h"
#include "model/forward.h"
#include "util/util.h"

#define N_TOK 6

static rf_config small_config(int tied) {
    rf_config c = rf_test_config(64, 96, 4, 2, 24, 300, 4096);
    c.tie_embeddings = tied;
    c.eos_id = 1, c.mask_id = 299, c.bot_id = 298;
    c.dtype = RF_BF16;
    return c;
}

static void logits_of(const rf_model *m, float *out) {
    int tok[N_TOK] = {5, 17, 250, 3, 99, 42}, pos[N_TOK], idx[N_TOK];
    for (int i = 0; i < N_TOK; i++) pos[i] = idx[i] = i;
    rf_kvcache c;
    rf_kv_init(&c, &m->cfg, 16);
    rf_runstate *s = rf_runstate_new(&m->cfg, N_TOK, 16);
    rf_batch b = {1, N_TOK, tok, pos, 0, N_TOK, idx, out};
    CHECK(rf_forward(m, &c, s, &b) == 0, "forward: %s", rf_last_error());
    rf_runstate_free(s);
    rf_kv_free(&c);
}

static double rel(const float *a, const float *b, size_t n) { return check_rel_err(a, b, n); }

static void test_tier(const char *tier, int tied) {
    rf_config cfg = small_config(tied);
    size_t nl = (size_t)N_TOK * cfg.vocab_size;
    float *ref = malloc(sizeof(float) * nl), *q8 = malloc(sizeof(float) * nl), *q4 = malloc(sizeof(float) * nl);
    rf_model m;
    rf_model_init_random(&m, &cfg, RF_BF16, 0.1f, 7);
    logits_of(&m, ref);
    CHECK(rf_model_quantize(&m, RF_BF16) != 0, "quantize to BF16 must be rejected");
    CHECK(m.layers[0].q.dtype == RF_BF16, "a rejected quantize left the model changed");
    CHECK(rf_model_quantize(&m, RF_Q8_0) == 0, "quantize Q8_0: %s", rf_last_error());
    CHECK(m.layers[1].down.dtype == RF_Q8_0 && m.lm_head.dtype == RF_Q8_0 && m.embed.dtype == RF_BF16,
          "Q8_0 model dtypes: down %d lm_head %d embed %d", m.layers[1].down.dtype, m.lm_head.dtype, m.embed.dtype);
    logits_of(&m, q8);
    rf_model_free(&m);
    rf_model_init_random(&m, &cfg, RF_BF16, 0.1f, 7);
    CHECK(rf_model_quantize(&m, RF_Q4_0) == 0, "quantize Q4_0: %s", rf_last_error());
    logits_of(&m, q4);
    rf_model_free(&m);
    double e8 = rel(q8, ref, nl), e4 = rel(q4, ref, nl);
    printf("%s %s: Q8_0 vs bf16 logits rel err %.3g, Q4_0 %.3g\n", tier, tied ? "tied" : "untied", e8, e4);
    CHECK(e8 <= 5e-2, "%s Q8_0 logits rel err %.3g > 5e-2", tier, e8);
    CHECK(e4 <= 0.6, "%s Q4_0 logits rel err %.3g > 0.6", tier, e4);
    CHECK(e8 > 0 && e4 > e8, "%s: Q4_0 (%.3g) must be further off than Q8_0 (%.3g), both > 0", tier, e4, e8);

    /* the same weights from disk: mmap'd matrices, norms in the loader's heap */
    char dir[] = "/tmp/rf_quant_XXXXXX";
    if (!mkdtemp(dir)) rf_die("mkdtemp failed");
    CHECK(rf_model_write_random(&cfg, dir, RF_BF16, 0, 0.1f, 7) == 0, "write: %s", rf_last_error());
    if (rf_model_load(&m, dir) == 0) {
        CHECK(rf_model_quantize(&m, RF_Q8_0) == 0, "quantize loaded: %s", rf_last_error());
        float *q8d = malloc(sizeof(float) * nl);
        logits_of(&m, q8d);
        CHECK(memcmp(q8d, q8, sizeof(float) * nl) == 0, "%s: loaded+quantised logits differ from in-memory (rel %.3g)",
              tier, rel(q8d, q8, nl));
        free(q8d);
        rf_model_free(&m);
    } else {
        CHECK(0, "load: %s", rf_last_error());
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    free(ref), free(q8), free(q4);
}

int main(void) {
    for (int t = RF_CPU_AVX2; t <= RF_CPU_AMX; t++) {
        const char *tier = rf_cpu_tier_str((rf_cpu_tier)t);
        if (rf_cpu_set_tier((rf_cpu_tier)t) != 0) {
            printf("SKIPPED: %s (cpu lacks it)\n", tier);
            continue;
        }
        if (rf_cpu_tier_active() != (rf_cpu_tier)t) {
            printf("SKIPPED: %s (no kernels of its own yet; it runs the %s ones)\n", tier, rf_cpu_tier_name());
            continue;
        }
        test_tier(tier, 0);
        test_tier(tier, 1);
    }
    return check_summary("model_quantize");
}
