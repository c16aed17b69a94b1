/* workspace.h - buffers that outlive one generation: the KV cache (main and
 * forked rows) and the forward pass's run state, kept by a session and lent
 * to the decoder it runs (rf_params.ws, passed down explicitly).
 *
 * A decoder takes its cache with rf_workspace_kv_init and its scratch with
 * rf_workspace_runstate, and gives them back with rf_kv_free and
 * rf_workspace_runstate_free. With a workspace those are the workspace's
 * buffers (grown only when a request needs more than any before it), so a
 * session reused for requests of the same size allocates no cache or run
 * state after the first; with none (NULL), the decoder's own. */
#ifndef RF_WORKSPACE_H
#define RF_WORKSPACE_H

#include <stddef.h>

#include "model/forward.h"
#include "model/kvcache.h"

typedef struct rf_workspace rf_workspace;

rf_workspace *rf_workspace_new(void);
void rf_workspace_free(rf_workspace *w);
/* Buffer allocations the workspace has made (each growth counts one). */
size_t rf_workspace_allocs(const rf_workspace *w);
/* Bytes held. */
size_t rf_workspace_bytes(const rf_workspace *w);
/* After an aborted generation (rf_die caught): mark every buffer free. */
void rf_workspace_reset(rf_workspace *w);

/* A KV cache of cap entries in c: w's buffers (c borrows them until
 * rf_kv_free), or c's own when w is NULL or its cache is lent already. */
void rf_workspace_kv_init(rf_workspace *w, rf_kvcache *c, const rf_config *cfg, int cap);
/* A run state of at least these sizes: w's, or a new one of the caller's
 * when w is NULL or its run state is lent already. */
rf_runstate *rf_workspace_runstate(rf_workspace *w, const rf_config *cfg, int max_tokens, int max_ctx);
/* Give s back to w when it is w's, else free it. */
void rf_workspace_runstate_free(rf_workspace *w, rf_runstate *s);

#endif
