/* grow.c - function-preserving growth of a checkpoint (rules in grow.h and
 * docs/growth.md). Every grown tensor is an index map of a source tensor:
 * new row -> source row (or none), new column -> source column (or none),
 * plus a few constants; it is produced chunk by chunk while the
 * safetensors file is written, one source row at a time. */
#include "model/grow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/tensors.h"
#include "util/util.h"

#define GROW_STD 0.02f /* the extra layers' random matrices, as `refusion init` */

/* ---- shapes ----------------------------------------------------------------------- */

/* extra hidden dims the logit offset of a larger vocabulary takes (grow.h) */
static int offset_dims(const rf_config *s, const rf_config *d) {
    return d->vocab_size > s->vocab_size ? (d->tie_embeddings ? 2 : 1) : 0;
}

/* new KV heads per old one: ceil(g / g') */
static int kv_copies(const rf_config *s, const rf_config *d) {
    int g = s->n_heads / s->n_kv_heads, g2 = d->n_heads / d->n_kv_heads;
    return (g + g2 - 1) / g2;
}

int rf_grow_config(const rf_config *src, const rf_config *shape, rf_config *out) {
    rf_config d = *src;
    d.hidden_size = shape->hidden_size;
    d.intermediate_size = shape->intermediate_size;
    d.n_layers = shape->n_layers;
    d.n_heads = shape->n_heads;
    d.n_kv_heads = shape->n_kv_heads;
    d.head_dim = shape->head_dim;
    d.vocab_size = shape->vocab_size;
    d.tie_embeddings = shape->tie_embeddings;
    const struct { const char *what; int to, from; } dims[] = {
        {"hidden size", d.hidden_size, src->hidden_size},    {"FFN size", d.intermediate_size, src->intermediate_size},
        {"layer count", d.n_layers, src->n_layers},          {"head count", d.n_heads, src->n_heads},
        {"KV head count", d.n_kv_heads, src->n_kv_heads},    {"head_dim", d.head_dim, src->head_dim},
        {"vocabulary", d.vocab_size, src->vocab_size},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].to < dims[i].from) {
            rf_set_error("grow: the target's %s %d is smaller than the source's %d", dims[i].what, dims[i].to,
                         dims[i].from);
            return -1;
        }
    if (d.n_kv_heads <= 0 || d.n_heads % d.n_kv_heads) {
        rf_set_error("grow: %d heads do not divide into %d KV heads", d.n_heads, d.n_kv_heads);
        return -1;
    }
    if (d.head_dim % src->head_dim || d.head_dim % 2) {
        rf_set_error("grow: head_dim %d is not an even multiple of the source's %d (RoPE pairs must map "
                     "to equal frequencies)", d.head_dim, src->head_dim);
        return -1;
    }
    int m = kv_copies(src, &d);
    if (src->n_kv_heads * m > d.n_kv_heads) {
        rf_set_error("grow: %d KV heads cannot hold the source's %d KV heads of %d query heads each in "
                     "groups of %d (needs %d)", d.n_kv_heads, src->n_kv_heads, src->n_heads / src->n_kv_heads,
                     d.n_heads / d.n_kv_heads, src->n_kv_heads * m);
        return -1;
    }
    if (d.tie_embeddings && !src->tie_embeddings) {
        rf_set_error("grow: the source's head is untied (lm_head != embed_tokens); a tied target cannot hold "
                     "it (grow to an untied shape)");
        return -1;
    }
    int off = offset_dims(src, &d);
    if (d.hidden_size < src->hidden_size + off) {
        rf_set_error("grow: a larger vocabulary needs %d more hidden dim%s than the source's %d (the extra "
                     "rows' logit offset), the target has %d", off, off > 1 ? "s" : "", src->hidden_size,
                     d.hidden_size);
        return -1;
    }
    /* the hidden-size norms' eps shrinks with the mean square (grow.h) */
    d.rms_eps = src->rms_eps * (float)src->hidden_size / (float)d.hidden_size;
    if (rf_config_check(&d, "grow target")) return -1;
    *out = d;
    return 0;
}

/* ---- the index maps ------------------------------------------------------------ */

typedef struct {
    const rf_model *src;
    const rf_config *d;
    int r;              /* head_dim ratio */
    float s;            /* sqrt(H / H'): the hidden-size norms' scale */
    int n_off;          /* vocabulary offset dims, at hidden dims H.. */
    float c, K, b;      /* offset: embedding constant, final-norm weight, extra head rows' weight */
    int *hmap, *qmap, *kvmap, *fmap, *vmap; /* new index -> source index or -1 */
    int *dim_src;       /* [hd'] new head dim -> source head dim or -1 */
    int *layer_src;     /* [L'] new layer -> source layer or -1 */
} grow_plan;

static void plan_free(grow_plan *p) {
    free(p->hmap), free(p->qmap), free(p->kvmap), free(p->fmap), free(p->vmap), free(p->dim_src),
        free(p->layer_src);
}

static int *map_prefix(int n_new, int n_old) {
    int *m = rf_malloc((size_t)n_new * sizeof(int));
    for (int i = 0; i < n_new; i++) m[i] = i < n_old ? i : -1;
    return m;
}

/* the offset constant: small beside every embedding row (it adds
 * n_off * c^2 to each mean square), a power of two so bf16 holds it */
static float offset_constant(const rf_model *m) {
    const rf_config *c = &m->cfg;
    float *row = rf_malloc((size_t)c->hidden_size * sizeof(float));
    double lo = INFINITY;
    for (int t = 0; t < c->vocab_size; t++) {
        rf_mat_row_f32(row, &m->embed, t);
        double ss = 0;
        for (int i = 0; i < c->hidden_size; i++) ss += (double)row[i] * row[i];
        if (ss > 0 && ss < lo) lo = ss;
    }
    free(row);
    /* c^2 ~ 2^-20 of the smallest row's squared norm, within [2^-12, 2^-4]
     * (a quantised row block keeps it: Q8_0's f16 scale c/127 stays above f16's
     * smallest subnormals) */
    double e = isfinite(lo) ? floor(log2(sqrt(lo)) - 10) : -12;
    if (e < -12) e = -12;
    if (e > -4) e = -4;
    return ldexpf(1.0f, (int)e);
}

static void plan_init(grow_plan *p, const rf_model *src, const rf_config *d) {
    const rf_config *s = &src->cfg;
    memset(p, 0, sizeof *p);
    p->src = src;
    p->d = d;
    p->r = d->head_dim / s->head_dim;
    p->s = sqrtf((float)s->hidden_size / (float)d->hidden_size);
    p->n_off = offset_dims(s, d);
    if (p->n_off) {
        p->c = offset_constant(src);
        p->b = 1.0f;
        /* extra logits = -n_off * b * c * K / rms' = -2^14 / rms' (rms': the grown
         * final hidden's RMS, sqrt(H / H') times the source's; trained models have
         * a few to a few tens: about -1000) */
        p->K = 16384.0f / ((float)p->n_off * p->b * p->c);
    }
    p->hmap = map_prefix(d->hidden_size, s->hidden_size);
    p->fmap = map_prefix(d->intermediate_size, s->intermediate_size);
    p->vmap = map_prefix(d->vocab_size, s->vocab_size);
    int hd = s->head_dim, hd2 = d->head_dim;
    p->dim_src = map_prefix(hd2, 0);
    for (int i = 0; i < hd / 2; i++) {
        p->dim_src[p->r * i] = i;
        p->dim_src[p->r * i + hd2 / 2] = i + hd / 2;
    }
    /* heads: old KV head j -> new KV heads j*m .. j*m+m-1; old query head
     * t of group j -> new KV head j*m + t/g', slot t%g' */
    int g = s->n_heads / s->n_kv_heads, g2 = d->n_heads / d->n_kv_heads, m = kv_copies(s, d);
    int *qhead = map_prefix(d->n_heads, 0), *kvhead = map_prefix(d->n_kv_heads, 0);
    for (int j = 0; j < s->n_kv_heads; j++) {
        for (int k = 0; k < m; k++) kvhead[j * m + k] = j;
        for (int t = 0; t < g; t++) qhead[(j * m + t / g2) * g2 + t % g2] = j * g + t;
    }
    p->qmap = rf_malloc((size_t)d->n_heads * hd2 * sizeof(int));
    p->kvmap = rf_malloc((size_t)d->n_kv_heads * hd2 * sizeof(int));
    for (int h = 0; h < d->n_heads; h++)
        for (int j = 0; j < hd2; j++)
            p->qmap[h * hd2 + j] = qhead[h] >= 0 && p->dim_src[j] >= 0 ? qhead[h] * hd + p->dim_src[j] : -1;
    for (int h = 0; h < d->n_kv_heads; h++)
        for (int j = 0; j < hd2; j++)
            p->kvmap[h * hd2 + j] = kvhead[h] >= 0 && p->dim_src[j] >= 0 ? kvhead[h] * hd + p->dim_src[j] : -1;
    free(qhead);
    free(kvhead);
    p->layer_src = map_prefix(d->n_layers, 0);
    for (int l = 0; l < s->n_layers; l++) p->layer_src[(int)((long long)l * d->n_layers / s->n_layers)] = l;
}

/* ---- tensors produced while written --------------------------------------------- */

static inline void store(void *dst, rf_dtype t, size_t i, float x) {
    switch (t) {
    case RF_BF16: ((uint16_t *)dst)[i] = rf_f32_to_bf16(x); break;
    case RF_F16: ((uint16_t *)dst)[i] = rf_f32_to_f16(x); break;
    default: ((float *)dst)[i] = x;
    }
}

/* a grown matrix: element (i, j) = src[rm[i], cm[j]] (0 where either is -1),
 * except the vocabulary offset columns [off_col, off_col + n_off) */
typedef struct {
    const rf_mat *src;      /* NULL: all zero but the offsets */
    const int *rm, *cm;
    int cols, n_src_rows;   /* n_src_rows: rows below it are the source vocabulary's (embed/head) */
    int off_col, n_off;
    float off_old[2], off_new[2]; /* offset values in rows of the source vocabulary / the extra ones */
    rf_dtype dtype;
    float *row;             /* the source row last read */
    int row_at;
} mat_fill;

static void fill_mat(void *vctx, size_t e0, size_t n, void *dst) {
    mat_fill *f = vctx;
    size_t cols = (size_t)f->cols;
    for (size_t k = 0; k < n;) {
        size_t e = e0 + k, i = e / cols, j = e % cols, end = cols - j < n - k ? cols - j : n - k;
        int si = f->src ? f->rm[i] : -1;
        if (si >= 0 && si != f->row_at) {
            rf_mat_row_f32(f->row, f->src, si);
            f->row_at = si;
        }
        const float *off = (int)i < f->n_src_rows ? f->off_old : f->off_new;
        for (size_t q = 0; q < end; q++, j++) {
            float x = si >= 0 && f->cm[j] >= 0 ? f->row[f->cm[j]] : 0.0f;
            if ((int)j >= f->off_col && (int)j < f->off_col + f->n_off) x = off[j - (size_t)f->off_col];
            store(dst, f->dtype, k + q, x);
        }
        k += end;
    }
}

typedef struct {
    float *v;
    rf_dtype dtype;
} vec_fill;

static void fill_vec(void *vctx, size_t e0, size_t n, void *dst) {
    const vec_fill *f = vctx;
    for (size_t i = 0; i < n; i++) store(dst, f->dtype, i, f->v[e0 + i]);
}

/* a norm vector of n_new entries: w[map[i]] * scale where mapped, else rest */
static float *grown_vec(const float *w, const int *map, int n_new, float scale, float rest) {
    float *v = rf_malloc((size_t)n_new * sizeof(float));
    for (int i = 0; i < n_new; i++) v[i] = w && map[i] >= 0 ? w[map[i]] * scale : rest;
    return v;
}

int rf_model_grow(const rf_model *src, const rf_config *dst, const char *dir, rf_dtype dtype, uint64_t seed) {
    if (dtype != RF_F32 && dtype != RF_F16 && dtype != RF_BF16) {
        rf_set_error("grow: %s: a grown checkpoint is written in f32, f16 or bf16, not %s", dir,
                     rf_dtype_name(dtype));
        return -1;
    }
    rf_config check;
    if (rf_grow_config(&src->cfg, dst, &check)) return -1;
    grow_plan p;
    plan_init(&p, src, dst);
    const rf_config *s = &src->cfg;
    int n = rf_tensor_count(dst), H = s->hidden_size;
    rf_tdesc *td = rf_calloc((size_t)n, sizeof *td);
    rf_tensor_table(dst, td);
    rf_st_fill_fn *fill = rf_calloc((size_t)n, sizeof *fill);
    void **ctx = rf_calloc((size_t)n, sizeof *ctx);
    mat_fill *mf = rf_calloc((size_t)n, sizeof *mf);
    vec_fill *vf = rf_calloc((size_t)n, sizeof *vf);
    rf_normal_fill *nf = rf_calloc((size_t)n, sizeof *nf);
    /* one source row buffer for all matrices: they are written one after another */
    int widest = s->hidden_size;
    const int w2[] = {s->n_heads * s->head_dim, s->intermediate_size};
    for (int i = 0; i < 2; i++) widest = w2[i] > widest ? w2[i] : widest;
    float *row = rf_malloc((size_t)widest * sizeof(float));
    /* norms in f32 whatever the matrices' dtype: the scaled weights (sqrt(H/H'),
     * 1/sqrt(r)) are rarely bf16 numbers, and rounding them would break the
     * equality the growth is for (the loaders take any float dtype per tensor) */
    rf_dtype *dts = rf_calloc((size_t)n, sizeof *dts);
    for (int i = 0; i < n; i++) dts[i] = td[i].cols ? dtype : RF_F32;
    for (int i = 0; i < n; i++) {
        const rf_tdesc *t = &td[i];
        int ls = t->layer >= 0 ? p.layer_src[t->layer] : -1;
        const rf_layer *L = ls >= 0 ? &src->layers[ls] : NULL;
        if (!t->cols) { /* norm vectors */
            float *v;
            switch (t->role) {
            case RF_T_FINAL_NORM:
                v = grown_vec(src->final_norm, p.hmap, t->rows, p.s, p.s);
                if (p.n_off) v[H] = p.K;
                if (p.n_off > 1) v[H + 1] = -p.K;
                break;
            default: {
                /* the layer norms, in table order: attn_norm, q_norm, k_norm, ffn_norm */
                const float *w = !L ? NULL
                               : t->role == 0 ? L->attn_norm
                               : t->role == 5 ? L->q_norm
                               : t->role == 6 ? L->k_norm
                                              : L->ffn_norm;
                int head = t->role == 5 || t->role == 6;
                float sc = !head ? p.s : t->role == 6 ? 1.0f / sqrtf((float)p.r) : 1.0f;
                v = grown_vec(w, head ? p.dim_src : p.hmap, t->rows, sc, head ? 1.0f : p.s);
            }
            }
            vf[i] = (vec_fill){v, RF_F32};
            fill[i] = fill_vec;
            ctx[i] = &vf[i];
            continue;
        }
        mat_fill *f = &mf[i];
        *f = (mat_fill){.cols = t->cols, .dtype = dtype, .row = row, .row_at = -1, .n_src_rows = t->rows};
        fill[i] = fill_mat;
        ctx[i] = f;
        if (t->role == RF_T_EMBED || t->role == RF_T_LM_HEAD) {
            int head = t->role == RF_T_LM_HEAD;
            f->src = head ? &src->lm_head : &src->embed;
            f->rm = p.vmap, f->cm = p.hmap, f->n_src_rows = s->vocab_size;
            f->off_col = H, f->n_off = p.n_off;
            if (head) { /* untied head: old rows 0 on the offset dim, extra rows -b */
                f->off_old[0] = 0.0f, f->off_new[0] = -p.b;
            } else if (dst->tie_embeddings) { /* tied: c, -c in old rows; -b, -b in extra ones */
                f->off_old[0] = p.c, f->off_old[1] = -p.c;
                f->off_new[0] = f->off_new[1] = -p.b;
            } else {
                f->off_old[0] = f->off_new[0] = p.c;
            }
            continue;
        }
        if (!L) { /* an identity layer: o and down zero, the rest random */
            if (t->role != 4 && t->role != 10) { /* o_proj, down_proj */
                rf_normal_fill_init(&nf[i], seed, t->name, GROW_STD, dtype);
                fill[i] = rf_fill_normal;
                ctx[i] = &nf[i];
            }
            continue;
        }
        /* layer matrices, in table order q k v o gate up down */
        static const int which[RF_LAYER_N_TENSORS] = {-1, 0, 1, 2, 3, -1, -1, -1, 4, 5, 6};
        const rf_mat *mats[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
        int w = which[t->role];
        f->src = mats[w];
        f->rm = w == 0 ? p.qmap : w <= 2 ? p.kvmap : w == 3 || w == 6 ? p.hmap : p.fmap;
        f->cm = w == 3 ? p.qmap : w == 6 ? p.fmap : p.hmap;
    }
    int rc = rf_model_write_tensors(&check, dir, dtype, dts, 0, fill, ctx);
    free(dts);
    for (int i = 0; i < n; i++) free(vf[i].v);
    free(row);
    free(nf);
    free(vf);
    free(mf);
    free(ctx);
    free(fill);
    free(td);
    plan_free(&p);
    return rc;
}
