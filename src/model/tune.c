/* tune.c - the AMX tile crossovers and the packed bf16 kernel of this
 * machine (tune.h). */
#include "model/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "model/call_timing.h"
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

/* a side's kernel settings: side 0 the tiles from one token on, side 1 off */
static void tiles_bf16(int side, void *arg) {
    (void)arg;
    rf_matmul_set_amx_bf16(side ? 0 : 1);
}
static void tiles_int8(int side, void *arg) {
    (void)arg;
    rf_matmul_set_amx_int8(side ? 0 : 1);
}

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
    const int wmax = widths[nw - 1];
    int ctx = 64;
    if (ctx + wmax > m->cfg.max_pos) ctx = m->cfg.max_pos - wmax;
    if (ctx < 1) {
        rf_set_error("tune: %d tokens do not fit the context (%d)", wmax + 1, m->cfg.max_pos);
        return -1;
    }
    const int before_bf16 = rf_matmul_amx_bf16(), before_int8 = rf_matmul_amx_int8();
    /* side 0: every call of these widths on tiles; side 1: none */
    rf_call_timing p = {ctx, widths, nw, 2, rounds, int8 ? tiles_int8 : tiles_bf16, NULL, NULL};
    double *t = rf_scoped_malloc((size_t)rounds * 2 * nw * sizeof(double)), *v = rf_scoped_malloc((size_t)rounds * sizeof(double));
    int rc = rf_call_timing_run(m, &p, t);
    rf_matmul_set_amx_bf16(before_bf16);
    rf_matmul_set_amx_int8(before_int8);
    if (!rc) {
        out->int8 = int8, out->n_points = nw;
        for (int w = 0; w < nw; w++) {
            /* round r's seconds of side sd at width w */
#define T(sd, r) t[((size_t)(r) * 2 + (sd)) * nw + w]
            rf_tune_point *pt = &out->points[w];
            double st[3];
            for (int r = 0; r < rounds; r++) v[r] = T(0, r) / T(1, r);
            rf_median_ci(v, rounds, st);
            pt->width = widths[w], pt->ratio = st[0], pt->lo = st[1], pt->hi = st[2];
            for (int r = 0; r < rounds; r++) v[r] = T(0, r);
            pt->ms_tiles = rf_median(v, rounds) * 1e3;
            for (int r = 0; r < rounds; r++) v[r] = T(1, r);
            pt->ms_other = rf_median(v, rounds) * 1e3;
#undef T
        }
        out->min_tokens = rf_tune_crossover(out->points, nw);
    }
    rf_scoped_free(t), rf_scoped_free(v);
    return rc;
}

/* ---- the packed bf16 kernel ------------------------------------------------- */

/* max |b - a| / max |a| over cnt values */
static double check_rel(const float *a, const float *b, size_t cnt) {
    double d = 0, s = 0;
    for (size_t i = 0; i < cnt; i++) {
        double e = fabs((double)b[i] - a[i]);
        if (e > d) d = e;
        if (fabs(a[i]) > s) s = fabs(a[i]);
    }
    return s > 0 ? d / s : d;
}

int rf_tune_bf16p_choice(const rf_tune_point *p, int n) {
    if (n < 1 || !(p[n - 1].hi < 1)) return RF_BF16P_FMA;
    for (int i = 0; i < n; i++)
        if (p[i].lo > 1) return RF_BF16P_FMA;
    return RF_BF16P_DP;
}

/* 1 token (the memory-bound call) up to the widest rolling slot */
static const int bf16p_widths[] = {1, 4, 8, 12, 16};
#define BF16P_NW ((int)(sizeof bf16p_widths / sizeof bf16p_widths[0]))

/* side 0: vdpbf16ps, side 1: fma */
static void set_bf16p(int side, void *arg) {
    (void)arg;
    rf_matmul_set_bf16p_kernel(side ? RF_BF16P_FMA : RF_BF16P_DP);
}

/* the untimed round's logits of side 0 per width, compared with side 1's */
typedef struct {
    float *ref[BF16P_NW];
    int vocab;
    double diff;
} logit_cmp;

static double compare_logits(int round, int side, int w, const float *logits, double seconds, void *arg) {
    logit_cmp *c = arg;
    if (round >= 0) return seconds;
    size_t cnt = (size_t)bf16p_widths[w] * c->vocab;
    if (side == 0) {
        if (!c->ref[w]) c->ref[w] = rf_scoped_malloc(cnt * sizeof(float));
        memcpy(c->ref[w], logits, cnt * sizeof(float));
    } else if (c->ref[w]) {
        double e = check_rel(c->ref[w], logits, cnt);
        if (e > c->diff) c->diff = e;
    }
    return seconds;
}

/* the calls' context: 64 tokens, less where the widest call would not fit
 * (0 and an error when nothing fits) */
static int tune_ctx(const rf_model *m) {
    const int wmax = bf16p_widths[BF16P_NW - 1];
    int ctx = 64;
    if (ctx + wmax > m->cfg.max_pos) ctx = m->cfg.max_pos - wmax;
    if (ctx < 1) rf_set_error("tune: %d tokens do not fit the context (%d)", wmax + 1, m->cfg.max_pos);
    return ctx < 1 ? 0 : ctx;
}

/* Whole forward calls of m at bf16p_widths after tune_ctx's context, side
 * 0 against side 1 (set applies a side's setting), interleaved over rounds: per width the median
 * ratio side 0 / side 1 with its interval and each side's median ms, and
 * the largest relative difference of their logits. 0 or -1. */
static int time_sides(const rf_model *m, int rounds, void (*set)(int, void *), rf_tune_point *points,
                      double *max_diff) {
    const int ctx = tune_ctx(m);
    if (!ctx) return -1;
    logit_cmp cmp = {{NULL}, m->cfg.vocab_size, 0};
    rf_call_timing p = {ctx, bf16p_widths, BF16P_NW, 2, rounds, set, compare_logits, &cmp};
    double *t = rf_scoped_malloc((size_t)rounds * 2 * BF16P_NW * sizeof(double));
    double *v = rf_scoped_malloc((size_t)rounds * sizeof(double));
    int rc = rf_call_timing_run(m, &p, t);
    if (!rc) {
        for (int w = 0; w < BF16P_NW; w++) {
            rf_tune_point *pt = &points[w];
            double st[3];
            for (int r = 0; r < rounds; r++) v[r] = t[((size_t)r * 2) * BF16P_NW + w] / t[((size_t)r * 2 + 1) * BF16P_NW + w];
            rf_median_ci(v, rounds, st);
            pt->width = bf16p_widths[w], pt->ratio = st[0], pt->lo = st[1], pt->hi = st[2];
            for (int r = 0; r < rounds; r++) v[r] = t[((size_t)r * 2) * BF16P_NW + w];
            pt->ms_tiles = rf_median(v, rounds) * 1e3;
            for (int r = 0; r < rounds; r++) v[r] = t[((size_t)r * 2 + 1) * BF16P_NW + w];
            pt->ms_other = rf_median(v, rounds) * 1e3;
        }
        *max_diff = cmp.diff;
    }
    for (int w = 0; w < BF16P_NW; w++) rf_scoped_free(cmp.ref[w]);
    rf_scoped_free(t), rf_scoped_free(v);
    return rc;
}

static int check_rounds(int rounds) {
    if (rounds >= 3 && rounds <= 1000) return 0;
    rf_set_error("tune: rounds must be in [3, 1000] (got %d)", rounds);
    return -1;
}

int rf_tune_bf16p(const rf_model *m, int rounds, rf_tune_bf16p_result *out) {
    const rf_mat *q = &m->layers[0].q;
    if (check_rounds(rounds)) return -1;
    if (rf_cpu_tier_active() < RF_CPU_AVX512) {
        rf_set_error("tune: the active tier is %s; the packed bf16 kernels differ at avx512 and up", rf_cpu_tier_name());
        return -1;
    }
    if (q->dtype != RF_BF16 || !q->packed) {
        rf_set_error("tune: the layer weights are %s%s; the packed bf16 kernels take packed bf16", rf_dtype_name(q->dtype),
                     q->dtype == RF_BF16 ? " without a packed copy" : "");
        return -1;
    }
    const int before = rf_matmul_bf16p_kernel();
    int rc = time_sides(m, rounds, set_bf16p, out->points, &out->max_logit_diff);
    rf_matmul_set_bf16p_kernel(before);
    if (!rc) {
        out->n_points = BF16P_NW;
        out->kernel = rf_tune_bf16p_choice(out->points, BF16P_NW);
    }
    return rc;
}

/* ---- the prefetch level ------------------------------------------------------ */

int rf_tune_prefetch_choice(const rf_tune_point *p, int n) {
    if (n < 1 || !(p[0].hi < 1)) return 0;
    int max_tokens = 0;
    for (int i = 0; i < n && p[i].ratio <= 1 && p[i].lo <= 1; i++) max_tokens = p[i].width;
    return max_tokens;
}

/* side 0: every call into L2, side 1: every call into L1 */
static void set_prefetch(int side, void *arg) {
    (void)arg;
    rf_matmul_set_prefetch_l2(side ? 0 : 1 << 20);
}

/* time_sides for a setting of the panel kernels, which need packed layer
 * weights (what: the setting, for the error); the value in force before
 * (get) is put back after. 0 or -1. */
static int time_panel_setting(const rf_model *m, int rounds, const char *what, int (*get)(void), void (*put)(int),
                              void (*set)(int, void *), rf_tune_point *points, double *max_diff) {
    const rf_mat *q = &m->layers[0].q;
    if (check_rounds(rounds)) return -1;
    if (!q->packed) {
        rf_set_error("tune: the layer weights are %s without a packed copy; %s is the panel kernels'",
                     rf_dtype_name(q->dtype), what);
        return -1;
    }
    const int before = get();
    int rc = time_sides(m, rounds, set, points, max_diff);
    put(before);
    return rc;
}

int rf_tune_prefetch(const rf_model *m, int rounds, rf_tune_prefetch_result *out) {
    int rc = time_panel_setting(m, rounds, "the prefetch level", rf_matmul_prefetch_l2, rf_matmul_set_prefetch_l2,
                                set_prefetch, out->points, &out->max_logit_diff);
    if (!rc) {
        out->n_points = BF16P_NW;
        out->max_tokens = rf_tune_prefetch_choice(out->points, BF16P_NW);
    }
    return rc;
}

/* ---- the stream panels ------------------------------------------------------- */

int rf_tune_stream_panels_choice(const rf_tune_point *p, int n) {
    if (n < 1 || !(p[0].hi < 1)) return 0;
    for (int i = 1; i < n; i++)
        if (p[i].lo > 1) return 0;
    return 1;
}

/* side 0: one panel at a time, side 1: the kernels' own counts */
static void set_panels(int side, void *arg) {
    (void)arg;
    rf_matmul_set_stream_panels(side ? 0 : 1);
}

int rf_tune_stream_panels(const rf_model *m, int rounds, rf_tune_panels_result *out) {
    int rc = time_panel_setting(m, rounds, "the stream panel count", rf_matmul_stream_panels,
                                rf_matmul_set_stream_panels, set_panels, out->points, &out->max_logit_diff);
    if (!rc) {
        out->n_points = BF16P_NW;
        out->panels = rf_tune_stream_panels_choice(out->points, BF16P_NW);
    }
    return rc;
}

static uint64_t fnv1a_add(uint64_t h, const char *s) {
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* FNV-1a over a text naming what c(n) depends on: the shapes, every
 * matrix's type and layout (llama.cpp's mixes vary them by layer), the
 * tier, the threads */
uint64_t rf_call_cost_key(const rf_model *m, int threads) {
    const rf_config *c = &m->cfg;
    char s[256];
    snprintf(s, sizeof s, "d %d ffn %d layers %d heads %d/%d hd %d vocab %d tier %s threads %d;", c->hidden_size,
             c->intermediate_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size,
             rf_cpu_tier_name(), threads);
    uint64_t h = fnv1a_add(1469598103934665603ull, s);
    for (int i = 0; i <= c->n_layers; i++) {
        const rf_layer *l = &m->layers[i < c->n_layers ? i : 0];
        const rf_mat *w[7] = {&l->q, &l->k, &l->v, &l->o, &l->gate, &l->up, &l->down};
        int n = 7;
        if (i == c->n_layers) w[0] = &m->lm_head, w[1] = &m->embed, n = 2;
        for (int j = 0; j < n; j++) {
            snprintf(s, sizeof s, " %d%c", (int)w[j]->dtype, w[j]->packed ? 'p' : 'r');
            h = fnv1a_add(h, s);
        }
    }
    return h | 1;
}
