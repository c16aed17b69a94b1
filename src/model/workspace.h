/* workspace.h - buffers that outlive one generation: the KV cache (main and
 * forked rows) and the forward pass's run state, kept by a session and lent
 * to whatever decoder runs next on the same thread.
 *
 * A decoder allocates its cache with rf_kv_init and its scratch with
 * rf_runstate_new, and frees them when it returns. While a workspace is
 * attached to the calling thread those calls take the workspace's buffers
 * (growing them only when a request needs more than any before it) and the
 * frees hand them back, so a session reused for requests of the same size
 * allocates no cache or run state after the first. The decoders need no
 * change (the same thread-local hook idea as forward.h's call log). */
#ifndef RF_WORKSPACE_H
#define RF_WORKSPACE_H

#include <stddef.h>

#include "model/forward.h"
#include "model/kvcache.h"

typedef struct rf_workspace rf_workspace;

rf_workspace *rf_workspace_new(void);
void rf_workspace_free(rf_workspace *w);
/* Attach w to this thread (NULL: detach); returns the one attached before. */
rf_workspace *rf_workspace_attach(rf_workspace *w);
/* Buffer allocations the workspace has made (each growth counts one). */
size_t rf_workspace_allocs(const rf_workspace *w);
/* Bytes held. */
size_t rf_workspace_bytes(const rf_workspace *w);
/* After an aborted generation (rf_die caught): mark every buffer free. */
void rf_workspace_reset(rf_workspace *w);

/* ---- hooks for kvcache.c and forward.c ---- */
rf_workspace *rf_workspace_current(void);
/* Lend w's main-cache buffers for cap entries to c (growing them); 0, or -1
 * when they are already lent (then c allocates its own). */
int rf_workspace_lend_kv(rf_workspace *w, rf_kvcache *c, size_t kv_floats, size_t cap);
void rf_workspace_return_kv(rf_workspace *w, rf_kvcache *c);
/* A lent cache replaced its row buffers (rf_kv_fork): w takes them at once,
 * so that after an aborted generation w holds no freed buffer. */
void rf_workspace_keep_rows(rf_workspace *w, const rf_kvcache *c);
void rf_workspace_note_alloc(rf_workspace *w); /* a lent cache grew its rows */
/* A run state of at least these sizes, or NULL when w's is lent. */
rf_runstate *rf_workspace_lend_rs(rf_workspace *w, const rf_config *cfg, int max_tokens, int max_ctx);
/* 1 if s was w's (now returned), 0 if s is not w's. */
int rf_workspace_return_rs(rf_workspace *w, rf_runstate *s);
/* runstate internals for the workspace (forward.c) */
/* scoped: a decoder's own (rf_scoped_*), else plain buffers for a workspace */
rf_runstate *rf_runstate_alloc(const rf_config *cfg, int max_tokens, int max_ctx, int scoped);
void rf_runstate_release(rf_runstate *s);
int rf_runstate_fits(const rf_runstate *s, int max_tokens, int max_ctx);
size_t rf_runstate_bytes(const rf_runstate *s);

#endif
