/* tune.c - the AMX tile crossovers of this machine (tune.h). */
#include "model/tune.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "model/forward.h"
#include "util/util.h"

int rf_tune_crossover(const rf_tune_point *p, int n) {
    int from = 0;
    for (int i = n - 1; i >= 0 && p[i].hi < 1; i--) from = p[i].width;
    return from;
}

/* the widths measured: bf16 tiles hold 16 tokens (one tile row each), the
 * int8 kernel's defaults reached 32 */
static const int bf16_widths[] = {4, 5, 6, 8, 9, 10, 12, 16};
static const int int8_widths[] = {4, 5, 8, 9, 12, 16, 24, 32};

int rf_tune_amx(const rf_model *m, int rounds, rf_tune_result *out) {
    const rf_mat *q = &m->layers[0].q;
    const int int8 = q->dtype == RF_Q8_0 || q->dtype == RF_Q4_0;
    if (rounds < 3 || rounds > 1000) {
        rf_set_error("tune: rounds must be in [3, 1000] (got %d)", rounds);
        return -1;
    }
    if (rf_cpu_tier_active() != RF_CPU_AMX) {
        rf_set_error("tune: the active tier is %s; the tile crossovers apply at the amx tier only", rf_cpu_tier_name());
        return -1;
    }
    if (!(q->dtype == RF_BF16 || (int8 && q->packed))) {
        rf_set_error("tune: the layer weights are %s%s; the tiles take bf16 or packed Q8_0 / Q4_0", rf_dtype_name(q->dtype),
                     int8 ? " without a packed copy" : "");
        return -1;
    }
    const int *widths = int8 ? int8_widths : bf16_widths;
    const int nw = (int)(int8 ? sizeof int8_widths : sizeof bf16_widths) / (int)sizeof(int);
    const int wmax = widths[nw - 1], V = m->cfg.vocab_size;
    int ctx = 64;
    if (ctx + wmax > m->cfg.max_pos) ctx = m->cfg.max_pos - wmax;
    if (ctx < 1) {
        rf_set_error("tune: %d tokens do not fit the context (%d)", wmax + 1, m->cfg.max_pos);
        return -1;
    }
    const int before_bf16 = rf_matmul_amx_bf16(), before_int8 = rf_matmul_amx_int8();
    rf_kvcache kv;
    rf_kv_init(&kv, &m->cfg, ctx + wmax);
    rf_runstate *rs = rf_runstate_new(&m->cfg, ctx > wmax ? ctx : wmax, ctx + wmax);
    /* every fed token's logits, as the rolling slot asks for them */
    float *logits = rf_scoped_malloc((size_t)wmax * V * sizeof(float));
    int *tok = rf_scoped_malloc((size_t)(ctx + wmax) * sizeof(int)), *pos = rf_scoped_malloc((size_t)(ctx + wmax) * sizeof(int));
    int *lidx = rf_scoped_malloc((size_t)wmax * sizeof(int));
    double *t = rf_scoped_malloc((size_t)2 * nw * rounds * sizeof(double)), *v = rf_scoped_malloc((size_t)rounds * sizeof(double));
    memset(t, 0, (size_t)2 * nw * rounds * sizeof(double));
    for (int i = 0; i < ctx + wmax; i++) tok[i] = (i * 7919 + 13) % V, pos[i] = i;
    for (int i = 0; i < wmax; i++) lidx[i] = i;
    rf_batch pre = {1, ctx, tok, pos, 0, 0, lidx, NULL};
    int rc = rf_forward(m, &kv, rs, &pre);
    /* side 0: every call of these widths on tiles; side 1: none. Round -1
     * is an untimed warm-up (scratch buffers, page faults, tile state). */
    static const int order[2][4] = {{0, 1, 1, 0}, {1, 0, 0, 1}};
    for (int r = -1; r < rounds && !rc; r++)
        for (int k = 0; k < 4 && !rc; k++) {
            const int side = order[(r + 2) % 2][k];
            if (int8) rf_matmul_set_amx_int8(side ? 0 : 1);
            else rf_matmul_set_amx_bf16(side ? 0 : 1);
            for (int w = 0; w < nw && !rc; w++) {
                rf_batch b = {1, widths[w], tok + ctx, pos + ctx, 0, widths[w], lidx, logits};
                double t0 = rf_now();
                rc = rf_forward(m, &kv, rs, &b);
                double dt = rf_now() - t0;
                rf_kv_crop(&kv, ctx);
                if (r >= 0) t[((size_t)side * nw + w) * rounds + r] += dt / 2;
            }
        }
    rf_matmul_set_amx_bf16(before_bf16);
    rf_matmul_set_amx_int8(before_int8);
    if (!rc) {
        out->int8 = int8, out->n_points = nw;
        for (int w = 0; w < nw; w++) {
            const double *a = t + (size_t)w * rounds, *b = t + ((size_t)nw + w) * rounds;
            rf_tune_point *p = &out->points[w];
            double st[3];
            for (int r = 0; r < rounds; r++) v[r] = a[r] / b[r];
            rf_median_ci(v, rounds, st);
            p->width = widths[w], p->ratio = st[0], p->lo = st[1], p->hi = st[2];
            memcpy(v, a, (size_t)rounds * sizeof(double));
            p->ms_tiles = rf_median(v, rounds) * 1e3;
            memcpy(v, b, (size_t)rounds * sizeof(double));
            p->ms_other = rf_median(v, rounds) * 1e3;
        }
        out->min_tokens = rf_tune_crossover(out->points, nw);
    }
    rf_scoped_free(logits), rf_scoped_free(tok), rf_scoped_free(pos), rf_scoped_free(lidx), rf_scoped_free(t),
        rf_scoped_free(v);
    rf_runstate_free(rs);
    rf_kv_free(&kv);
    return rc;
}
