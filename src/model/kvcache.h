/* kvcache.h - the KV cache ReFusion decoding needs.
 *
 * The cache holds the committed sequence ("main"): for every entry and layer
 * its K (after q/k-norm and RoPE) and V, plus the entry's position id. The
 * physical order of entries (the order attention is causal over) is the order
 * they were appended and is independent of their position ids.
 *
 * For parallel infilling the cache can be forked into R rows. Rows share the
 * main prefix (it is not copied) and each row has its own extension of up to
 * row_cap entries. Row r attends to main[0, len) + ext_r[0, row_len[r]).
 *
 * Layout: head-major. k, v are [n_layers][n_kv_heads][cap][head_dim] f32;
 * row_k, row_v are [n_rows][n_layers][n_kv_heads][row_cap][head_dim] f32.
 * Attention reads one head's keys and values of every entry: head-major,
 * they are one contiguous run the hardware prefetchers follow. (Entry-major,
 * a head's slices were kv_dim floats apart, 4 KiB at the Qwen3-0.6B shape,
 * every entry on another page: head-major, attention took 23-30% less time
 * at a 192-token context.) A layer's block is cap * kv_dim floats. */
#ifndef RF_KVCACHE_H
#define RF_KVCACHE_H

#include "io/config.h"

typedef struct rf_kvcache {
    int n_layers, kv_dim; /* kv_dim: floats of one entry over all heads */
    int head_dim;        /* floats of one entry of one head */
    int cap, len;        /* main sequence capacity / committed length */
    float *k, *v;
    int *pos;            /* [cap] position id of each main entry */
    int n_rows;          /* 0 = not forked */
    int fork_len;        /* main length when forked: the prefix rows see */
    int rows_alloc, row_cap;
    int *row_len;        /* [n_rows] */
    float *row_k, *row_v;
    int *row_pos;        /* [n_rows][row_cap] */
    size_t row_floats_alloc; /* capacity of row_k / row_v, in floats */
    /* A cache may borrow another's buffers (a session's, model/workspace.c):
     * the lender is kept current as the borrower's rows grow, so that it
     * never holds a freed buffer, and gets them back from rf_kv_free. */
    struct rf_kvcache *lender; /* NULL: the buffers are this cache's own (scoped blocks) */
    int lent;                  /* a lender: its buffers are borrowed now */
    int grows;                 /* a lender: row buffers its borrowers made */
} rf_kvcache;

/* Float offset of main entry i of layer l, head 0, in k / v; head g's is
 * g * rf_kv_main_head(c) further. */
static inline size_t rf_kv_main_off(const rf_kvcache *c, int l, int i) {
    return (size_t)l * c->cap * c->kv_dim + (size_t)i * c->head_dim;
}
static inline size_t rf_kv_main_head(const rf_kvcache *c) { return (size_t)c->cap * c->head_dim; }
/* Float offset of row r's extension entry i of layer l, head 0, in row_k /
 * row_v; head g's is g * rf_kv_row_head(c) further. */
static inline size_t rf_kv_row_off(const rf_kvcache *c, int r, int l, int i) {
    return ((size_t)r * c->n_layers + l) * c->row_cap * c->kv_dim + (size_t)i * c->head_dim;
}
static inline size_t rf_kv_row_head(const rf_kvcache *c) { return (size_t)c->row_cap * c->head_dim; }

void rf_kv_init(rf_kvcache *c, const rf_config *cfg, int cap);
void rf_kv_free(rf_kvcache *c);
/* Drop main entries from len on (len <= c->len). */
void rf_kv_crop(rf_kvcache *c, int len);
/* Fork into n_rows empty row extensions of row_cap entries each. */
void rf_kv_fork(rf_kvcache *c, int n_rows, int row_cap);
/* Drop row r's extension entries from len on. */
void rf_kv_row_crop(rf_kvcache *c, int r, int len);
/* Keep only rows keep[0..n_keep) (in that order); others are dropped. */
void rf_kv_select_rows(rf_kvcache *c, const int *keep, int n_keep);
/* Append entries [start, start+count) of row r's extension (K, V and
 * position ids, as computed in the row) to the end of main. */
int rf_kv_commit_row(rf_kvcache *c, int r, int start, int count);
/* dst's main sequence becomes src's first n entries (K, V at the entry
 * stride, and their position ids): a prompt prefix another sequence already
 * computed. dst is unforked, with capacity >= n; n <= src->len. */
void rf_kv_copy_prefix(rf_kvcache *dst, const rf_kvcache *src, int n);
/* How many of src's entries (n asked; src may be NULL) a new sequence of an
 * n_prompt-token prompt can reuse: none without src, at most src's length,
 * and at most n_prompt - 1 (the last prompt token is always fed: its logits
 * draw the first answer token). */
int rf_kv_reusable(const rf_kvcache *src, int n, int n_prompt);
/* Drop all rows. */
void rf_kv_unfork(rf_kvcache *c);

#endif
