/* workspace.c - a session's KV cache and run state, lent to the decoders
 * (see workspace.h). */
#include "model/workspace.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

struct rf_workspace {
    rf_kvcache kv;          /* the cache's buffers (and row capacities) between generations */
    size_t kv_floats, pos_cap; /* what kv.k / kv.v and kv.pos hold */
    int kv_lent;
    rf_runstate *rs;        /* forward scratch */
    int rs_tokens, rs_ctx;  /* the sizes rs was made for */
    int rs_lent;
    size_t allocs;
};

static _Thread_local rf_workspace *current;

rf_workspace *rf_workspace_new(void) { return rf_calloc(1, sizeof(rf_workspace)); }

void rf_workspace_free(rf_workspace *w) {
    if (!w) return;
    if (current == w) current = NULL;
    /* plain buffers (a cache's own are scoped: not rf_kv_free) */
    free(w->kv.k), free(w->kv.v), free(w->kv.pos);
    free(w->kv.row_k), free(w->kv.row_v), free(w->kv.row_pos), free(w->kv.row_len);
    rf_runstate_release(w->rs);
    free(w);
}

rf_workspace *rf_workspace_attach(rf_workspace *w) {
    rf_workspace *old = current;
    current = w;
    return old;
}

rf_workspace *rf_workspace_current(void) { return current; }
size_t rf_workspace_allocs(const rf_workspace *w) { return w->allocs; }
void rf_workspace_keep_rows(rf_workspace *w, const rf_kvcache *c) {
    w->kv.row_k = c->row_k, w->kv.row_v = c->row_v, w->kv.row_pos = c->row_pos, w->kv.row_len = c->row_len;
    w->kv.rows_alloc = c->rows_alloc, w->kv.row_floats_alloc = c->row_floats_alloc;
}
void rf_workspace_note_alloc(rf_workspace *w) { w->allocs++; }

size_t rf_workspace_bytes(const rf_workspace *w) {
    return 2 * (w->kv_floats + w->kv.row_floats_alloc) * sizeof(float) + w->pos_cap * sizeof(int) +
           (w->rs ? rf_runstate_bytes(w->rs) : 0);
}

void rf_workspace_reset(rf_workspace *w) {
    /* a cache or run state lent when the generation was aborted still points
     * at these buffers from a dead stack frame: forget it, keep the buffers */
    w->kv_lent = 0;
    w->rs_lent = 0;
}

int rf_workspace_lend_kv(rf_workspace *w, rf_kvcache *c, size_t kv_floats, size_t cap) {
    if (w->kv_lent) return -1;
    /* each buffer is dropped before its bigger one is made, so a failed
     * allocation (rf_die) leaves w empty there, never pointing at freed memory */
    if (kv_floats > w->kv_floats) {
        free(w->kv.k), free(w->kv.v);
        w->kv.k = w->kv.v = NULL, w->kv_floats = 0;
        float *k = rf_try_aligned_alloc(kv_floats * sizeof(float));
        float *v = k ? rf_try_aligned_alloc(kv_floats * sizeof(float)) : NULL;
        if (!v) free(k), rf_oom(kv_floats * sizeof(float));
        w->kv.k = k, w->kv.v = v, w->kv_floats = kv_floats;
        w->allocs++;
    }
    if (cap > w->pos_cap) {
        free(w->kv.pos);
        w->kv.pos = NULL, w->pos_cap = 0;
        w->kv.pos = rf_calloc(cap, sizeof(int));
        w->pos_cap = cap;
        w->allocs++;
    }
    /* c's shape (set by rf_kv_init), w's buffers, nothing in it yet */
    rf_kvcache shape = *c;
    *c = w->kv;
    c->n_layers = shape.n_layers;
    c->kv_dim = shape.kv_dim;
    c->cap = shape.cap;
    c->len = c->n_rows = c->fork_len = c->row_cap = 0;
    c->lender = w;
    w->kv_lent = 1;
    return 0;
}

void rf_workspace_return_kv(rf_workspace *w, rf_kvcache *c) {
    w->kv = *c; /* the rows may have grown while lent (rf_kv_fork) */
    w->kv_lent = 0;
}

rf_runstate *rf_workspace_lend_rs(rf_workspace *w, const rf_config *cfg, int max_tokens, int max_ctx) {
    if (w->rs_lent) return NULL;
    if (!w->rs || !rf_runstate_fits(w->rs, max_tokens, max_ctx)) {
        /* grow to cover this request and every earlier one */
        if (max_tokens > w->rs_tokens) w->rs_tokens = max_tokens;
        if (max_ctx > w->rs_ctx) w->rs_ctx = max_ctx;
        rf_runstate_release(w->rs);
        w->rs = NULL; /* (a failure below leaves none) */
        w->rs = rf_runstate_alloc(cfg, w->rs_tokens, w->rs_ctx, 0);
        w->allocs++;
    }
    w->rs_lent = 1;
    return w->rs;
}

int rf_workspace_return_rs(rf_workspace *w, rf_runstate *s) {
    if (s != w->rs) return 0;
    w->rs_lent = 0;
    return 1;
}
