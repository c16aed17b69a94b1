/* call_timing.c - interleaved timing of forward calls (call_timing.h). */
#include "model/call_timing.h"

#include <string.h>

#include "model/forward.h"
#include "util/util.h"

int rf_call_timing_run(const rf_model *m, const rf_call_timing *p, double *seconds) {
    if (p->n_sides != 1 && p->n_sides != 2) {
        rf_set_error("call timing: %d sides (1 or 2)", p->n_sides);
        return -1;
    }
    if (p->rounds < 1 || p->n_widths < 1 || p->ctx < 1) {
        rf_set_error("call timing: %d rounds, %d widths, a %d-token context (each must be >= 1)", p->rounds,
                     p->n_widths, p->ctx);
        return -1;
    }
    int wmax = 0;
    for (int w = 0; w < p->n_widths; w++) {
        if (p->widths[w] < 1) {
            rf_set_error("call timing: a call of %d tokens", p->widths[w]);
            return -1;
        }
        if (p->widths[w] > wmax) wmax = p->widths[w];
    }
    const int ctx = p->ctx, V = m->cfg.vocab_size, nw = p->n_widths, ns = p->n_sides;
    if (ctx + wmax > m->cfg.max_pos) {
        rf_set_error("call timing: a %d-token context and %d tokens do not fit the model's %d positions", ctx, wmax,
                     m->cfg.max_pos);
        return -1;
    }
    rf_kvcache kv;
    rf_kv_init(&kv, &m->cfg, ctx + wmax);
    rf_runstate *rs = rf_runstate_new(&m->cfg, ctx > wmax ? ctx : wmax, ctx + wmax);
    /* every fed token's logits, as the rolling slot asks for them */
    float *logits = rf_scoped_malloc((size_t)wmax * V * sizeof(float));
    int *tok = rf_scoped_malloc((size_t)(ctx + wmax) * sizeof(int)), *pos = rf_scoped_malloc((size_t)(ctx + wmax) * sizeof(int));
    int *lidx = rf_scoped_malloc((size_t)wmax * sizeof(int));
    for (int i = 0; i < ctx + wmax; i++) tok[i] = (i * 7919 + 13) % V, pos[i] = i;
    for (int i = 0; i < wmax; i++) lidx[i] = i;
    memset(seconds, 0, (size_t)p->rounds * ns * nw * sizeof(double));
    rf_batch pre = {1, ctx, tok, pos, 0, 0, lidx, NULL};
    int rc = rf_forward(m, &kv, rs, &pre);
    /* a side runs 4 / n_sides times a round; it records their mean */
    const double share = ns / 4.0;
    static const int order[2][4] = {{0, 1, 1, 0}, {1, 0, 0, 1}};
    for (int r = -1; r < p->rounds && !rc; r++)
        for (int k = 0; k < 4 && !rc; k++) {
            const int side = ns == 2 ? order[(r + 2) % 2][k] : 0;
            if (p->apply) p->apply(side, p->arg);
            for (int w = 0; w < nw && !rc; w++) {
                rf_batch b = {1, p->widths[w], tok + ctx, pos + ctx, 0, p->widths[w], lidx, logits};
                double t0 = rf_now();
                rc = rf_forward(m, &kv, rs, &b);
                double dt = rf_now() - t0;
                rf_kv_crop(&kv, ctx);
                if (rc) break;
                if (p->after_call) dt = p->after_call(r, side, w, logits, dt, p->arg);
                if (r >= 0) seconds[((size_t)r * ns + side) * nw + w] += dt * share;
            }
        }
    rf_scoped_free(logits), rf_scoped_free(tok), rf_scoped_free(pos), rf_scoped_free(lidx);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return rc;
}
