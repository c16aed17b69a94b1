/* call_cost.c - c(n), the time of an n-token forward call over a 1-token
 * call (decode.h rf_call_cost_measure), the adaptive rolling slot's cost
 * model: timed on the model, or read from the tune cache where `refusion
 * tune` measured it (model/tune.h). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "model/forward.h"
#include "model/tune.h"
#include "util/util.h"

/* c(1 .. max_n) from the fastest of `rounds` timed rounds */
static int measure(const rf_model *m, int max_n, int rounds, float *cost) {
    if (max_n < 1 || max_n > 4096 || !cost || rounds < 1) {
        rf_set_error("rf_call_cost_measure: max_n must be in [1, 4096] (got %d)", max_n);
        return -1;
    }
    const int V = m->cfg.vocab_size, cap = m->cfg.max_pos;
    int ctx = 64;
    if (ctx + max_n > cap) ctx = cap - max_n;
    if (ctx < 1) {
        rf_set_error("rf_call_cost_measure: %d tokens do not fit the context (%d)", max_n + 1, cap);
        return -1;
    }
    const int width = ctx > max_n ? ctx : max_n;
    rf_kvcache kv;
    rf_kv_init(&kv, &m->cfg, ctx + max_n);
    rf_runstate *rs = rf_runstate_new(&m->cfg, width, ctx + max_n);
    /* every fed token's logits, as the rolling slot asks for them */
    float *logits = rf_scoped_malloc((size_t)width * V * sizeof(float));
    int *tok = rf_scoped_malloc((size_t)width * sizeof(int)), *pos = rf_scoped_malloc((size_t)width * sizeof(int));
    int *lidx = rf_scoped_malloc((size_t)width * sizeof(int));
    double *best = rf_scoped_malloc((size_t)(max_n + 1) * sizeof(double));
    for (int i = 0; i < width; i++) tok[i] = (i * 7919 + 13) % V, pos[i] = i, lidx[i] = i;
    rf_batch pre = {1, ctx, tok, pos, 0, 1, lidx, logits};
    int rc = rf_forward(m, &kv, rs, &pre);
    /* widths interleaved within each round (a busy spell hits them alike),
     * after one untimed round that warms caches and threads. Not
     * rf_call_timing_run (model/call_timing.h): this runs when a decoder
     * starts, one setting and one call per width and round (the fastest
     * kept), a quarter of that routine's four calls per side and round. */
    for (int r = 0; r <= rounds && !rc; r++)
        for (int n = 1; n <= max_n && !rc; n++) {
            for (int i = 0; i < n; i++) pos[i] = ctx + i;
            rf_batch b = {1, n, tok, pos, 0, n, lidx, logits};
            double t0 = rf_now();
            rc = rf_forward(m, &kv, rs, &b);
            double dt = rf_now() - t0;
            rf_kv_crop(&kv, ctx);
            if (r == 1 || (r > 1 && dt < best[n])) best[n] = dt;
        }
    for (int n = 1; n <= max_n && !rc; n++) {
        double c = best[n] / best[1];
        cost[n - 1] = (float)(n > 1 && c < cost[n - 2] ? cost[n - 2] : c);
    }
    rf_scoped_free(logits), rf_scoped_free(tok), rf_scoped_free(pos), rf_scoped_free(lidx), rf_scoped_free(best);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return rc;
}

int rf_call_cost_measure(const rf_model *m, int max_n, float *cost) { return measure(m, max_n, 3, cost); }

int rf_call_cost_measure_rounds(const rf_model *m, int max_n, int rounds, float *cost) {
    return measure(m, max_n, rounds, cost);
}

int rf_call_cost_get(const rf_model *m, int max_n, float *cost, int *cached) {
    float c[RF_TUNE_MAX_COST];
    if (cached) *cached = 0;
    if (max_n >= 1 && rf_tune_cache_call_cost(rf_call_cost_key(m, omp_get_max_threads()), c) >= max_n) {
        memcpy(cost, c, (size_t)max_n * sizeof *cost);
        if (cached) *cached = 1;
        return 0;
    }
    return measure(m, max_n, 3, cost);
}
