/* decode_executor.c - the decoders make every model call through their
 * workspace (rf_workspace_forward), so that a server can run the calls
 * elsewhere (serve/scheduler.c: in its batched passes).
 *
 * For AR, ReFusion plan-and-infill (blocks of several slots: forked calls
 * of several rows), the rolling slot and MDM, greedy and sampled: with an
 * executor set (it runs each call with rf_forward_calls on a run state of
 * its own) the answer, the model calls and the call log are exactly those
 * without one, and the executor sees every logged call; the log is still
 * kept on the decoder's thread. An executor that fails a call fails the
 * generation with its error, and no call follows. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/small_config.h"
#include "decode/decode.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/workspace.h"
#include "util/util.h"

typedef struct {
    rf_runstate *rs;
    int calls, fail_at, rows_max;
} executor;

static int run_call(void *user, const rf_model *m, rf_kvcache *c, const rf_batch *b) {
    executor *e = user;
    if (++e->calls == e->fail_at) {
        rf_set_error("the executor refused call %d", e->calls);
        return -1;
    }
    if (b->n_rows > e->rows_max) e->rows_max = b->n_rows;
    rf_call_batch cb = {1, &c, b, b->logits};
    return rf_forward_calls(m, e->rs, &cb, NULL);
}

static int same_log(const rf_call_log *a, const rf_call_log *b) {
    return a->n == b->n && !memcmp(a->rec, b->rec, (size_t)a->n * sizeof *a->rec);
}

static void check_method(const rf_model *m, const char *what, rf_method method, int rolling, float temp) {
    int prompt[12];
    for (int i = 0; i < 12; i++) prompt[i] = (i * 37 + 5) % 250;
    rf_gen_params p;
    rf_gen_params_default(&p);
    p.method = method, p.rolling = rolling, p.temperature = temp, p.seed = 9;
    p.gen_length = 24, p.slot_size = 4, p.n_blocks = 2, p.eos_id = -1, p.mdm_steps = 12;
    p.slot_threshold = 0.0f; /* every masked slot of a block at once */
    rf_workspace *ws = rf_workspace_new();
    p.ws = ws;
    rf_call_log l0 = {0}, l1 = {0};
    rf_gen_result r0, r1;
    rf_call_log_attach(&l0);
    int rc0 = rf_decode(m, prompt, 12, &p, NULL, &r0);
    rf_call_log_attach(NULL);
    executor e = {rf_runstate_new(&m->cfg, 256, 512), 0, 0, 0};
    rf_workspace_set_forward(ws, run_call, &e);
    rf_call_log_attach(&l1);
    int rc1 = rf_decode(m, prompt, 12, &p, NULL, &r1);
    rf_call_log_attach(NULL);
    CHECK(rc0 == 0 && rc1 == 0, "%s: %s", what, rf_last_error());
    if (!rc0 && !rc1) {
        CHECK(r0.n_ids == r1.n_ids && !memcmp(r0.ids, r1.ids, (size_t)r0.n_ids * sizeof(int)),
              "%s: %d ids with the executor, %d without", what, r1.n_ids, r0.n_ids);
        CHECK(r0.n_calls == r1.n_calls, "%s: %d model calls with the executor, %d without", what, r1.n_calls,
              r0.n_calls);
        CHECK(same_log(&l0, &l1), "%s: call log of %d entries with the executor, %d without", what, l1.n, l0.n);
        CHECK(e.calls == l1.n && e.calls > 0, "%s: the executor ran %d calls, the log has %d", what, e.calls, l1.n);
        if (method == RF_METHOD_REFUSION && !rolling)
            CHECK(e.rows_max > 1, "%s: no call of several forked rows (at most %d)", what, e.rows_max);
        rf_gen_result_free(&r0), rf_gen_result_free(&r1);
    }
    /* an executor that refuses the third call: the generation fails with its error */
    e.calls = 0, e.fail_at = 3;
    rf_call_log_free(&l1);
    memset(&l1, 0, sizeof l1);
    rf_call_log_attach(&l1);
    rc1 = rf_decode(m, prompt, 12, &p, NULL, &r1);
    rf_call_log_attach(NULL);
    CHECK(rc1 != 0 && strstr(rf_last_error(), "executor refused call 3") && e.calls == 3,
          "%s: a refused call: rc %d, %d calls, \"%s\"", what, rc1, e.calls, rf_last_error());
    if (!rc1) rf_gen_result_free(&r1);
    rf_call_log_free(&l0), rf_call_log_free(&l1);
    rf_runstate_free(e.rs);
    rf_workspace_free(ws);
}

int main(void) {
    rf_config c = rf_test_config(32, 64, 4, 2, 8, 256, 512);
    c.tie_embeddings = 1;
    c.eos_id = 254, c.mask_id = 255, c.bot_id = 253;
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.7f, 3);
    for (int s = 0; s < 2; s++) {
        float t = s ? 0.8f : 0.0f;
        check_method(&m, s ? "ar sampled" : "ar", RF_METHOD_AR, 0, t);
        check_method(&m, s ? "plan-and-infill sampled" : "plan-and-infill", RF_METHOD_REFUSION, 0, t);
        check_method(&m, s ? "rolling sampled" : "rolling", RF_METHOD_REFUSION, 1, t);
        check_method(&m, s ? "mdm sampled" : "mdm", RF_METHOD_MDM, 0, t);
    }
    rf_model_free(&m);
    return check_summary("decode_executor");
}
