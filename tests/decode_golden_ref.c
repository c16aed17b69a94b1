/* decode_golden_ref.c - rf_generate_refusion against the authors' own decoder:
 * generate_refusion from ML-GSAI/ReFusion's generate.py, run once (greedy,
 * float64) by scripts/device/golden.py on a small random checkpoint and stored
 * in tests/data/golden/decode_ref.json.
 *
 * The checkpoint is recreated with the recorded `refusion init` arguments (a
 * peaky model, std 0.8, vocab 40, so that the fast path and parallel
 * infilling both happen). For each recorded case (prompt, gen_length,
 * slot_size, serial blocks, slot / token thresholds, EOS id or none) the
 * answer ids must be identical, and so must the number of model calls, the
 * calls of every planning step and the reference's TPF.
 *
 * The two documented departures (refusion.c's header) only act after an EOS
 * was committed: the reference returns every committed token sorted by
 * position, ours ends at the first EOS by position. So our answer is
 * compared with the reference's truncated after its first EOS; the fixture
 * records whether that truncation removed anything. */
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "golden_util.h"

static void test_case(const rf_model *m, json_t *c, const char *golden_run) {
    const char *name = json_string_value(json_object_get(c, "name"));
    json_t *g = json_object_get(json_object_get(c, "runs"), golden_run);
    if (!g || json_object_get(g, "error")) {
        CHECK(0, "%s: the golden run %s is missing or failed", name, golden_run);
        return;
    }
    int n_prompt, n_ref, n_steps_ref;
    int *prompt = golden_ints(json_object_get(c, "prompt"), &n_prompt);
    int *ref = golden_ints(json_object_get(g, "answer"), &n_ref);
    int *steps_ref = golden_ints(json_object_get(g, "step_calls"), &n_steps_ref);
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = (int)json_integer_value(json_object_get(c, "gen_length"));
    p.slot_size = (int)json_integer_value(json_object_get(c, "slot_size"));
    p.n_blocks = (int)json_integer_value(json_object_get(c, "n_blocks"));
    p.slot_threshold = (float)json_number_value(json_object_get(c, "slot_threshold"));
    p.token_threshold = (float)json_number_value(json_object_get(c, "token_threshold"));
    p.temperature = 0;
    p.eos_id = (int)json_integer_value(json_object_get(c, "eos_id"));
    p.mask_id = (int)json_integer_value(json_object_get(c, "mask_id"));
    /* the reference's answer up to and including its first EOS */
    int n_cut = n_ref;
    for (int i = 0; i < n_ref; i++)
        if (ref[i] == p.eos_id) {
            n_cut = i + 1;
            break;
        }
    rf_gen_result r;
    int rc = rf_generate_refusion(m, prompt, n_prompt, &p, &r);
    CHECK(rc == 0, "%s: rf_generate_refusion: %s", name, rf_last_error());
    if (rc == 0) {
        int same = r.n_ids == n_cut && !memcmp(r.ids, ref, sizeof(int) * (size_t)n_cut);
        CHECK(same, "%s: answer differs from the reference (ours %d tokens, reference %d)", name, r.n_ids,
              n_cut);
        if (!same) {
            fprintf(stderr, "  ours:");
            for (int i = 0; i < r.n_ids; i++) fprintf(stderr, " %d", r.ids[i]);
            fprintf(stderr, "\n  ref: ");
            for (int i = 0; i < n_cut; i++) fprintf(stderr, " %d", ref[i]);
            fprintf(stderr, "\n");
        }
        int n_calls = (int)json_integer_value(json_object_get(g, "n_calls"));
        double tpf = json_number_value(json_object_get(g, "tpf"));
        CHECK(r.n_calls == n_calls, "%s: %d model calls, the reference made %d", name, r.n_calls, n_calls);
        CHECK(r.n_steps == n_steps_ref, "%s: %d steps, the reference %d", name, r.n_steps, n_steps_ref);
        int steps_same = r.n_steps == n_steps_ref;
        for (int i = 0; steps_same && i < r.n_steps; i++) steps_same = r.steps[i].calls == steps_ref[i];
        CHECK(steps_same, "%s: calls per step differ from the reference", name);
        CHECK(fabs(r.tpf - tpf) <= 1e-9 * (1 + tpf), "%s: TPF %.6f, the reference %.6f", name, r.tpf, tpf);
        int fast = 0, infill = 0;
        for (int i = 0; i < r.n_steps; i++) fast += r.steps[i].slots_fast, infill += r.steps[i].slots_infilled;
        printf("%-14s eos %3d: %2d tokens%s, %2d calls, %d steps (%d slots fast, %d infilled), TPF %.3f: %s\n",
               name, p.eos_id, r.n_ids, n_cut < n_ref ? " (reference: more after its EOS)" : "", r.n_calls,
               r.n_steps, fast, infill, r.tpf, same && r.n_calls == n_calls ? "same" : "DIFFERENT");
        rf_gen_result_free(&r);
    }
    free(prompt);
    free(ref);
    free(steps_ref);
}

int main(void) {
    json_t *g = golden_json("decode_ref.json");
    CHECK(g != NULL, "decode_ref.json missing");
    if (!g) return check_summary("decode_golden_ref");
    const char *golden_run = json_string_value(json_object_get(json_array_get(json_object_get(g, "cases"), 0),
                                                               "golden"));
    printf("golden: the authors' generate_refusion (commit %.12s), model %s, torch %s\n",
           json_string_value(json_object_get(g, "reference_commit")), golden_run ? golden_run : "?",
           json_string_value(json_object_get(g, "torch")));
    char dir[4096];
    rf_model m;
    if (golden_checkpoint(json_object_get(g, "init_args"), dir, &m)) {
        CHECK(0, "could not recreate the decoder's checkpoint");
        return check_summary("decode_golden_ref");
    }
    if (golden_same_weights(&m, g, "decode checkpoint")) {
        json_t *cases = json_object_get(g, "cases");
        CHECK(json_array_size(cases) >= 8, "only %zu cases", json_array_size(cases));
        for (size_t i = 0; i < json_array_size(cases); i++) {
            json_t *c = json_array_get(cases, i);
            test_case(&m, c, json_string_value(json_object_get(c, "golden")));
        }
    }
    rf_model_free(&m);
    golden_rmdir(dir);
    json_decref(g);
    return check_summary("decode_golden_ref");
}
