/* workspace.c - a session's KV cache and run state, lent to the decoders
 * (see workspace.h). */
#include "model/workspace.h"

#include <stdlib.h>
#include <string.h>

#include "model/runstate.h"

#include "util/util.h"

struct rf_workspace {
    rf_kvcache kv;          /* the cache's buffers (and row capacities) between generations;
                               kv.lent while a decoder borrows them */
    size_t kv_floats, pos_cap; /* what kv.k / kv.v and kv.pos hold */
    rf_runstate *rs;        /* forward scratch */
    int rs_tokens, rs_ctx;  /* the sizes rs was made for */
    int rs_lent;
    size_t allocs;
};

rf_workspace *rf_workspace_new(void) { return rf_calloc(1, sizeof(rf_workspace)); }

void rf_workspace_free(rf_workspace *w) {
    if (!w) return;
    /* plain buffers (a cache's own are scoped: not rf_kv_free) */
    free(w->kv.k), free(w->kv.v), free(w->kv.pos);
    free(w->kv.row_k), free(w->kv.row_v), free(w->kv.row_pos), free(w->kv.row_len);
    rf_runstate_release(w->rs);
    free(w);
}

/* (the cache's row buffers its borrowers grew count too) */
size_t rf_workspace_allocs(const rf_workspace *w) { return w->allocs + (size_t)w->kv.grows; }

size_t rf_workspace_bytes(const rf_workspace *w) {
    return 2 * (w->kv_floats + w->kv.row_floats_alloc) * sizeof(float) + w->pos_cap * sizeof(int) +
           (w->rs ? rf_runstate_bytes(w->rs) : 0);
}

void rf_workspace_reset(rf_workspace *w) {
    /* a cache or run state lent when the generation was aborted still points
     * at these buffers from a dead stack frame: forget it, keep the buffers */
    w->kv.lent = 0;
    w->rs_lent = 0;
}

void rf_workspace_kv_init(rf_workspace *w, rf_kvcache *c, const rf_config *cfg, int entries) {
    if (!w || w->kv.lent) {
        rf_kv_init(c, cfg, entries);
        return;
    }
    const int kv_dim = cfg->n_kv_heads * cfg->head_dim;
    size_t kv_floats = (size_t)cfg->n_layers * entries * kv_dim, cap = (size_t)entries;
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
    /* c's shape, w's buffers, nothing in it yet */
    *c = w->kv;
    c->n_layers = cfg->n_layers;
    c->kv_dim = kv_dim;
    c->head_dim = cfg->head_dim;
    c->cap = entries;
    c->len = c->n_rows = c->fork_len = c->row_cap = 0;
    c->lent = c->grows = 0;
    c->lender = &w->kv;
    w->kv.lent = 1;
}

rf_runstate *rf_workspace_runstate(rf_workspace *w, const rf_config *cfg, int max_tokens, int max_ctx) {
    if (!w || w->rs_lent) return rf_runstate_new(cfg, max_tokens, max_ctx);
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

void rf_workspace_runstate_free(rf_workspace *w, rf_runstate *s) {
    if (w && s && s == w->rs) w->rs_lent = 0;
    else rf_runstate_free(s);
}
