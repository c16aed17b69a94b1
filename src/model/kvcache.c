/* kvcache.c - the reorderable, forkable KV cache (see kvcache.h). */
#include "model/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* A cache's own buffers are scoped blocks (util.h: an aborted generation
 * frees them); a cache that borrows (c->lender) uses and grows the
 * lender's plain ones (rf_block_aligned / rf_block_free with scoped =
 * !c->lender). */

#define main_off rf_kv_main_off
#define row_off rf_kv_row_off

/* n consecutive entries of one layer, head by head (the cache is
 * head-major): from k, v at so (head 0; head g sh floats further) to
 * dk, dv at doff (head g dh further); c gives the heads' shape. */
static void copy_entries(const rf_kvcache *c, float *dk, float *dv, size_t doff, size_t dh, const float *k,
                         const float *v, size_t so, size_t sh, int n) {
    const size_t run = (size_t)n * c->head_dim * sizeof(float);
    for (int g = 0; g < c->kv_dim / c->head_dim; g++) {
        memcpy(dk + doff + g * dh, k + so + g * sh, run);
        memcpy(dv + doff + g * dh, v + so + g * sh, run);
    }
}

void rf_kv_init(rf_kvcache *c, const rf_config *cfg, int cap) {
    memset(c, 0, sizeof *c);
    c->n_layers = cfg->n_layers;
    c->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    c->head_dim = cfg->head_dim;
    c->cap = cap;
    size_t n = (size_t)c->n_layers * cap * c->kv_dim;
    c->k = rf_scoped_aligned(n * sizeof(float));
    c->v = rf_scoped_aligned(n * sizeof(float));
    c->pos = rf_scoped_calloc((size_t)cap, sizeof(int));
}

/* the borrower's row buffers, into the lender */
static void lender_keep_rows(const rf_kvcache *c) {
    rf_kvcache *l = c->lender;
    l->row_k = c->row_k, l->row_v = c->row_v, l->row_pos = c->row_pos, l->row_len = c->row_len;
    l->rows_alloc = c->rows_alloc, l->row_floats_alloc = c->row_floats_alloc;
}

void rf_kv_free(rf_kvcache *c) {
    if (c->lender) { /* everything back to the lender, the rows as they grew */
        rf_kvcache *l = c->lender;
        int grows = l->grows;
        *l = *c;
        l->lender = NULL, l->lent = 0, l->grows = grows;
        memset(c, 0, sizeof *c);
        return;
    }
    /* (a lent cache returned above: these are its own, scoped) */
    rf_scoped_free(c->k);
    rf_scoped_free(c->v);
    rf_scoped_free(c->pos);
    rf_scoped_free(c->row_k);
    rf_scoped_free(c->row_v);
    rf_scoped_free(c->row_pos);
    rf_scoped_free(c->row_len);
    memset(c, 0, sizeof *c);
}

void rf_kv_crop(rf_kvcache *c, int len) {
    if (len < 0 || len > c->len) rf_die("kv crop to %d outside [0, %d]", len, c->len);
    c->len = len;
}

void rf_kv_fork(rf_kvcache *c, int n_rows, int row_cap) {
    if (n_rows <= 0 || row_cap <= 0) rf_die("kv fork into %d rows of %d", n_rows, row_cap);
    size_t need = (size_t)n_rows * c->n_layers * row_cap * c->kv_dim;
    /* row_pos holds need / (n_layers * kv_dim) ints: it fits whenever row_k does */
    if (need > c->row_floats_alloc || n_rows > c->rows_alloc) {
        if (need < c->row_floats_alloc) need = c->row_floats_alloc;
        int rows = n_rows > c->rows_alloc ? n_rows : c->rows_alloc;
        const int own = !c->lender;
        rf_block_free(own, c->row_k);
        rf_block_free(own, c->row_v);
        rf_block_free(own, c->row_pos);
        rf_block_free(own, c->row_len);
        c->row_k = c->row_v = NULL, c->row_pos = c->row_len = NULL;
        c->rows_alloc = 0, c->row_floats_alloc = 0;
        if (c->lender) lender_keep_rows(c); /* none, should an allocation below fail */
        /* own: scoped, a failure dies (and the unwinding frees the others);
         * lent: plain, all or none */
        float *k = rf_block_aligned(own, need * sizeof(float)), *v = rf_block_aligned(own, need * sizeof(float));
        int *pos = rf_block_aligned(own, (need / ((size_t)c->n_layers * c->kv_dim) + 1) * sizeof(int));
        int *len = rf_block_aligned(own, (size_t)rows * sizeof(int));
        if (!k || !v || !pos || !len) {
            free(k), free(v), free(pos), free(len);
            rf_oom(need * sizeof(float));
        }
        c->row_k = k, c->row_v = v, c->row_pos = pos, c->row_len = len;
        c->rows_alloc = rows;
        c->row_floats_alloc = need;
        if (c->lender) lender_keep_rows(c), c->lender->grows++;
    }
    c->n_rows = n_rows;
    c->row_cap = row_cap;
    c->fork_len = c->len;
    memset(c->row_len, 0, (size_t)n_rows * sizeof(int));
}

void rf_kv_row_crop(rf_kvcache *c, int r, int len) {
    if (r < 0 || r >= c->n_rows || len < 0 || len > c->row_len[r])
        rf_die("kv row crop: row %d to %d invalid", r, len);
    c->row_len[r] = len;
}

void rf_kv_select_rows(rf_kvcache *c, const int *keep, int n_keep) {
    if (n_keep < 0 || n_keep > c->n_rows) rf_die("kv select %d of %d rows", n_keep, c->n_rows);
    /* Rows are moved through a scratch copy so any order (and repeats) works. */
    size_t row_floats = (size_t)c->n_layers * c->row_cap * c->kv_dim;
    float *tk = rf_scoped_malloc((size_t)n_keep * row_floats * sizeof(float));
    float *tv = rf_scoped_malloc((size_t)n_keep * row_floats * sizeof(float));
    int *tp = rf_scoped_malloc((size_t)n_keep * c->row_cap * sizeof(int) + 1);
    int *tl = rf_scoped_malloc((size_t)n_keep * sizeof(int) + 1);
    for (int i = 0; i < n_keep; i++) {
        int r = keep[i];
        if (r < 0 || r >= c->n_rows) rf_die("kv select: row %d of %d", r, c->n_rows);
        memcpy(tk + i * row_floats, c->row_k + r * row_floats, row_floats * sizeof(float));
        memcpy(tv + i * row_floats, c->row_v + r * row_floats, row_floats * sizeof(float));
        memcpy(tp + i * c->row_cap, c->row_pos + (size_t)r * c->row_cap, c->row_cap * sizeof(int));
        tl[i] = c->row_len[r];
    }
    memcpy(c->row_k, tk, (size_t)n_keep * row_floats * sizeof(float));
    memcpy(c->row_v, tv, (size_t)n_keep * row_floats * sizeof(float));
    memcpy(c->row_pos, tp, (size_t)n_keep * c->row_cap * sizeof(int));
    memcpy(c->row_len, tl, (size_t)n_keep * sizeof(int));
    c->n_rows = n_keep;
    rf_scoped_free(tk);
    rf_scoped_free(tv);
    rf_scoped_free(tp);
    rf_scoped_free(tl);
}

int rf_kv_commit_row(rf_kvcache *c, int r, int start, int count) {
    if (r < 0 || r >= c->n_rows || start < 0 || count < 0 || start + count > c->row_len[r]) {
        rf_set_error("kv commit: row %d entries [%d, %d) invalid", r, start, start + count);
        return -1;
    }
    if (c->len + count > c->cap) {
        rf_set_error("KV cache full: %d + %d entries exceed capacity %d", c->len, count, c->cap);
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++)
        copy_entries(c, c->k, c->v, main_off(c, l, c->len), rf_kv_main_head(c), c->row_k, c->row_v,
                     row_off(c, r, l, start), rf_kv_row_head(c), count);
    memcpy(c->pos + c->len, c->row_pos + (size_t)r * c->row_cap + start, count * sizeof(int));
    c->len += count;
    return 0;
}

void rf_kv_copy_prefix(rf_kvcache *dst, const rf_kvcache *src, int n) {
    if (n < 0 || n > src->len || n > dst->cap || dst->kv_dim != src->kv_dim || dst->head_dim != src->head_dim)
        rf_die("kv copy of %d entries invalid", n);
    for (int l = 0; n > 0 && l < dst->n_layers; l++)
        copy_entries(dst, dst->k, dst->v, main_off(dst, l, 0), rf_kv_main_head(dst), src->k, src->v,
                     main_off(src, l, 0), rf_kv_main_head(src), n);
    if (n > 0) memcpy(dst->pos, src->pos, (size_t)n * sizeof(int));
    dst->len = n;
}

int rf_kv_reusable(const rf_kvcache *src, int n, int n_prompt) {
    if (!src || n < 0) return 0;
    if (n > n_prompt - 1) n = n_prompt - 1;
    return n > src->len ? src->len : n;
}

void rf_kv_unfork(rf_kvcache *c) {
    c->n_rows = 0;
    c->fork_len = 0;
}
