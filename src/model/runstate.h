/* runstate.h - the run state's buffers, shared by the code that makes them
 * (runstate.c) and the forward pass that fills them (forward.c). Callers see
 * only the opaque rf_runstate of forward.h. */
#ifndef RF_RUNSTATE_H
#define RF_RUNSTATE_H

#include <stddef.h>

#include "model/forward.h"

/* attention weight rows per thread: a tile of 4 tokens (forward.c's
 * attention reads a block of keys once per tile) x a head pair */
#define RF_ATT_ROWS 8

struct rf_runstate {
    int max_tokens, max_ctx, n_threads;
    int scoped;    /* a decoder's own (scoped blocks, util.h), not a workspace's */
    size_t bytes;
    float *x;      /* [T, d] residual stream */
    float *xb;     /* [T, d] normed input of a sub-block */
    float *q;      /* [T, n_heads * hd] */
    float *k, *v;  /* [T, kv_dim] */
    float *att;    /* [T, n_heads * hd] attention output */
    float *hb;     /* [T, ffn] gate, then silu(gate) * up */
    float *hb2;    /* [T, ffn] up */
    float *rope;   /* [T, hd] each token's RoPE cosines and sines (rf_rope_table), once per call */
    float *scores; /* [n_threads, RF_ATT_ROWS, max_ctx + max_tokens] attention weights (a tile of tokens x a head pair) */
};

#endif
