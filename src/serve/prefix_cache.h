/* prefix_cache.h - the KV caches of finished batched generations, reused
 * by requests that begin with the same tokens (prefix_cache.c). */
#ifndef RF_SERVE_PREFIX_CACHE_H
#define RF_SERVE_PREFIX_CACHE_H

#include <stddef.h>

#include "model/kvcache.h"

/* Prompt-prefix reuse: the caches of finished batched generations (their
 * prompt and answer in natural order, positions 0, 1, ...: exactly what a
 * prefill of those tokens computes), least recently used first out within
 * --cache-mb. A new request starts from a copy of the entries of the
 * longest prefix it shares with one of them (a chat's next turn: the last
 * turn's prompt and answer; a shared system prompt). Batched generations
 * (AR, the rolling slot: its cache cut to the committed tokens) leave caches
 * here and reuse them; a plan-and-infill answer's cache is in the order its
 * slots were committed, not a prefill's, and is dropped.
 * Owned by the scheduler thread (the counters in s are under s->mu). */
typedef struct pc_entry {
    int *ids, n;             /* the tokens whose entries kv holds */
    rf_kvcache kv;
    size_t bytes;
    unsigned long long used; /* the cache's clock at the last use */
    struct pc_entry *next;
} pc_entry;

typedef struct {
    pc_entry *head;
    size_t bytes;
    unsigned long long clock;
} prefix_cache;

/* Drop the entry *link points at. */
void rf_pc_drop(prefix_cache *pc, pc_entry **link);
/* The entry sharing the longest prefix with prompt (its length in
 * *common), or NULL. */
pc_entry *rf_pc_find(prefix_cache *pc, const int *prompt, int n, int *common);
/* Keep a finished generation's cache (kv and ids taken over) within budget bytes. */
void rf_pc_put(prefix_cache *pc, size_t budget, rf_kvcache *kv, int *ids, int n);

#endif
