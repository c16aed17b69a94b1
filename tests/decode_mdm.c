/* decode_mdm.c - the masked-diffusion baseline decoder (src/decode/mdm.c) on a
 * random in-memory model:
 *  1. greedy output equals a second, naive implementation of LLaDA's
 *     generate written here from its description: full logits from the
 *     no-cache reference forward (rf_forward_reference, bidirectional) over
 *     the whole sequence at every step, double softmax, confidence -inf
 *     outside the current block's masks, a full sort to pick the top k;
 *  2. invariants: every position filled, no mask left, one call per step,
 *     the schedule sums to the block, deterministic for a seed;
 *  3. EOS: the answer is cut after the first EOS, the early stop saves calls
 *     but never changes the answer;
 *  4. bad parameters are refused with a message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/check.h"
#include "helpers/small_config.h"
#include "decode/mdm.h"
#include "model/forward.h"

static rf_config tiny_config(void) {
    rf_config c = rf_test_config(48, 96, 4, 2, 16, 200, 512);
    c.tie_embeddings = 1;
    c.eos_id = 1, c.mask_id = 199, c.bot_id = 198;
    return c;
}

/* LLaDA's generate, literally: G divisible by n_blocks, steps by n_blocks. */
static void llada_naive(const rf_model *m, const int *prompt, int P, int G, int n_blocks, int steps,
                        int *answer) {
    const int T = P + G, V = m->cfg.vocab_size, mask = m->cfg.mask_id;
    int *x = malloc(T * sizeof(int)), *pos = malloc(T * sizeof(int)), *x0 = malloc(T * sizeof(int));
    double *conf = malloc(T * sizeof(double));
    float *logits = malloc((size_t)T * V * sizeof(float));
    for (int i = 0; i < T; i++) x[i] = i < P ? prompt[i] : mask, pos[i] = i;
    const int bl = G / n_blocks, sp = steps / n_blocks;
    for (int b = 0; b < n_blocks; b++) {
        int n_mask = bl; /* the block is all masks when it starts */
        for (int s = 0; s < sp; s++) {
            int k = n_mask / sp + (s < n_mask % sp);
            rf_forward_reference(m, T, x, pos, 1, logits);
            for (int t = 0; t < T; t++) {
                const float *l = logits + (size_t)t * V;
                int am = mask == 0 ? 1 : 0; /* the mask is never drafted */
                for (int v = 0; v < V; v++)
                    if (v != mask && l[v] > l[am]) am = v;
                double z = 0;
                for (int v = 0; v < V; v++)
                    if (v != mask) z += exp((double)l[v] - l[am]);
                x0[t] = am;
                int in_block = t >= P + b * bl && t < P + (b + 1) * bl;
                conf[t] = (x[t] == mask && in_block) ? 1.0 / z : -INFINITY;
            }
            for (int i = 0; i < k; i++) { /* top-k by repeated max, ties to the lower index */
                int best = -1;
                for (int t = 0; t < T; t++)
                    if (conf[t] > -INFINITY && (best < 0 || conf[t] > conf[best])) best = t;
                x[best] = x0[best];
                conf[best] = -INFINITY;
            }
        }
    }
    memcpy(answer, x + P, G * sizeof(int));
    free(x);
    free(pos);
    free(x0);
    free(conf);
    free(logits);
}

typedef struct {
    int ids[256];
    int n;
} stream_buf;
static void on_tokens(const int *ids, int n, void *user) {
    stream_buf *s = user;
    for (int i = 0; i < n && s->n < 256; i++) s->ids[s->n++] = ids[i];
}

int main(void) {
    rf_config cfg = tiny_config();
    rf_model m;
    rf_model_init_random(&m, &cfg, RF_F32, 0.5f, 11);
    const int prompt[] = {5, 17, 42, 8, 99, 23, 3};
    const int P = 7;

    /* schedule: LLaDA's get_num_transfer_tokens */
    int sch[4];
    rf_mdm_schedule(10, 4, sch);
    CHECK(sch[0] == 3 && sch[1] == 3 && sch[2] == 2 && sch[3] == 2, "schedule 10/4: %d %d %d %d",
          sch[0], sch[1], sch[2], sch[3]);

    /* 1 + 2: against the naive LLaDA, no EOS so every position is decoded */
    const int G = 24, NB = 3;
    const int steps_list[] = {24, 15, 9, 6, 3}; /* 15, 9: uneven schedules */
    for (int si = 0; si < 5; si++) {
        int steps = steps_list[si];
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = G;
        p.n_blocks = NB;
        p.eos_id = -1;
        stream_buf sb = {{0}, 0};
        p.on_tokens = on_tokens;
        p.user = &sb;
        rf_mdm_params mp = {steps, 0};
        rf_gen_result r;
        int rc = rf_generate_mdm(&m, prompt, P, &p, &mp, &r);
        CHECK(rc == 0, "mdm: %s", rf_last_error());
        if (rc) continue;
        int want[64];
        llada_naive(&m, prompt, P, G, NB, steps, want);
        int same = r.n_ids == G, masks = 0;
        for (int i = 0; i < r.n_ids && i < G; i++) {
            same &= r.ids[i] == want[i];
            masks += r.ids[i] == cfg.mask_id || r.ids[i] < 0;
        }
        CHECK(same, "steps %d: answer differs from the naive LLaDA generate", steps);
        CHECK(r.n_ids == G && masks == 0 && !r.hit_eos, "steps %d: %d ids, %d masks", steps, r.n_ids, masks);
        CHECK(r.n_calls == steps && r.n_steps == steps, "steps %d: %d calls, %d step stats", steps,
              r.n_calls, r.n_steps);
        int sum = 0;
        for (int i = 0; i < r.n_steps; i++) sum += r.steps[i].tokens;
        CHECK(sum == G, "steps %d: step stats add up to %d tokens", steps, sum);
        CHECK(fabs(r.tpf - (double)G / steps) < 1e-9, "steps %d: TPF %g", steps, r.tpf);
        CHECK(sb.n == G && !memcmp(sb.ids, r.ids, G * sizeof(int)), "streamed tokens = answer");
        rf_gen_result_free(&r);
    }

    /* uneven blocks and more steps than tokens: still every position once */
    {
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = 13;
        p.n_blocks = 4; /* 3 + 3 + 3 + 4 */
        p.eos_id = -1;
        rf_mdm_params mp = {40, 0};
        rf_gen_result r;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &r) == 0, "uneven: %s", rf_last_error());
        CHECK(r.n_ids == 13 && r.n_calls == 13, "uneven: %d ids %d calls (a step per token)", r.n_ids, r.n_calls);
        rf_gen_result_free(&r);
    }

    /* temperature: deterministic for a seed, no mask left */
    {
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = 16;
        p.n_blocks = 2;
        p.eos_id = -1;
        p.temperature = 1.0f;
        p.seed = 5;
        rf_mdm_params mp = {8, 0};
        rf_gen_result r1, r2, r3;
        rf_generate_mdm(&m, prompt, P, &p, &mp, &r1);
        rf_generate_mdm(&m, prompt, P, &p, &mp, &r2);
        p.seed = 6;
        rf_generate_mdm(&m, prompt, P, &p, &mp, &r3);
        CHECK(r1.n_ids == 16 && r2.n_ids == 16 && !memcmp(r1.ids, r2.ids, 16 * sizeof(int)),
              "same seed, same sample");
        int masks = 0;
        for (int i = 0; i < r1.n_ids; i++) masks += r1.ids[i] == cfg.mask_id;
        CHECK(masks == 0, "sampled answer holds %d masks", masks);
        CHECK(r3.n_ids == 16 && memcmp(r1.ids, r3.ids, 16 * sizeof(int)), "another seed, another sample");
        rf_gen_result_free(&r1);
        rf_gen_result_free(&r2);
        rf_gen_result_free(&r3);
    }

    /* 3: EOS. The decoder's choices do not depend on the EOS id, so declaring
     * the token found at answer position e the EOS must cut the same answer
     * right after its first occurrence. */
    {
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = G;
        p.n_blocks = NB;
        p.eos_id = -1;
        rf_mdm_params mp = {G, 0};
        rf_gen_result full;
        rf_generate_mdm(&m, prompt, P, &p, &mp, &full);
        int e = 10, eos = full.ids[e];
        int cut = 0;
        while (full.ids[cut] != eos) cut++; /* first occurrence, <= e */
        p.eos_id = eos;
        rf_gen_result all_steps, early;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &all_steps) == 0, "eos run");
        mp.early_stop = 1;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &early) == 0, "early-stop run");
        CHECK(all_steps.n_ids == cut + 1 && all_steps.hit_eos && early.n_ids == cut + 1 && early.hit_eos,
              "cut after the first EOS at %d: %d / %d ids", cut, all_steps.n_ids, early.n_ids);
        CHECK(!memcmp(all_steps.ids, full.ids, (cut + 1) * sizeof(int)) &&
                  !memcmp(early.ids, full.ids, (cut + 1) * sizeof(int)),
              "same answer with and without the early stop");
        CHECK(all_steps.n_calls == G, "without early stop every step runs (%d calls)", all_steps.n_calls);
        CHECK(early.n_calls < G && early.n_calls >= cut + 1, "early stop: %d calls (EOS at %d of %d)",
              early.n_calls, cut, G);
        rf_gen_result_free(&full);
        rf_gen_result_free(&all_steps);
        rf_gen_result_free(&early);
    }

    /* a model that loves the mask token (its tied embedding row blown up, so
     * its logit dominates wherever it is positive) still never drafts it */
    {
        rf_model m2;
        rf_model_init_random(&m2, &cfg, RF_F32, 0.5f, 11);
        float *row = (float *)m2.embed.data + (size_t)cfg.mask_id * cfg.hidden_size;
        for (int i = 0; i < cfg.hidden_size; i++) row[i] *= 50.0f;
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = G;
        p.n_blocks = NB;
        p.eos_id = -1;
        rf_mdm_params mp = {12, 0};
        rf_gen_result r;
        CHECK(rf_generate_mdm(&m2, prompt, P, &p, &mp, &r) == 0, "mask-loving model: %s", rf_last_error());
        int masks = 0;
        for (int i = 0; i < r.n_ids; i++) masks += r.ids[i] == cfg.mask_id;
        int want[64];
        llada_naive(&m2, prompt, P, G, NB, 12, want);
        CHECK(r.n_ids == G && masks == 0 && !memcmp(r.ids, want, G * sizeof(int)),
              "mask-loving model: %d masks drafted, or differs from the naive run", masks);
        rf_gen_result_free(&r);
        rf_model_free(&m2);
    }

    /* 4: refusals */
    {
        rf_params p;
        rf_gen_params_default(&p);
        p.gen_length = 16;
        p.n_blocks = 4;
        rf_mdm_params mp = {3, 1};
        rf_gen_result r;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &r) == -1 && strstr(rf_last_error(), "steps"),
              "fewer steps than blocks: %s", rf_last_error());
        mp.steps = 16;
        const int bad[] = {5, 500};
        CHECK(rf_generate_mdm(&m, bad, 2, &p, &mp, &r) == -1, "token outside the vocabulary");
        p.eos_id = cfg.mask_id;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &r) == -1, "mask id == eos id");
        p.eos_id = RF_TOKEN_FROM_MODEL;
        p.gen_length = 600;
        CHECK(rf_generate_mdm(&m, prompt, P, &p, &mp, &r) == -1 && strstr(rf_last_error(), "context"),
              "longer than the context: %s", rf_last_error());
    }
    rf_model_free(&m);
    return check_summary("decode_mdm");
}
