/* prefix_cache.c - prompt-prefix reuse for the scheduler (prefix_cache.h). */
#include <stdlib.h>
#include <string.h>

#include "serve/prefix_cache.h"
#include "util/util.h"

static size_t kv_bytes(const rf_kvcache *kv) {
    return (size_t)kv->n_layers * kv->cap * kv->kv_dim * 2 * sizeof(float) + (size_t)kv->cap * sizeof(int);
}

void rf_pc_drop(prefix_cache *pc, pc_entry **link) {
    pc_entry *e = *link;
    *link = e->next;
    pc->bytes -= e->bytes;
    rf_kv_free(&e->kv);
    free(e->ids);
    free(e);
}

/* The entry sharing the longest prefix with prompt (its length in
 * *common), or NULL. */
pc_entry *rf_pc_find(prefix_cache *pc, const int *prompt, int n, int *common) {
    pc_entry *best = NULL;
    *common = 0;
    for (pc_entry *e = pc->head; e; e = e->next) {
        int k = 0, lim = e->n < n ? e->n : n;
        while (k < lim && e->ids[k] == prompt[k]) k++;
        if (k > *common) *common = k, best = e;
    }
    if (best) best->used = ++pc->clock;
    return best;
}

/* Keep a finished generation's cache (taken over), replacing the entries
 * whose tokens it begins with, then drop the least recently used down to
 * the budget. */
void rf_pc_put(prefix_cache *pc, size_t budget, rf_kvcache *kv, int *ids, int n) {
    size_t bytes = kv_bytes(kv);
    if (n < 1 || bytes > budget) {
        rf_kv_free(kv);
        free(ids);
        return;
    }
    for (pc_entry **l = &pc->head; *l;) {
        pc_entry *e = *l;
        if (e->n <= n && !memcmp(e->ids, ids, (size_t)e->n * sizeof *ids)) rf_pc_drop(pc, l);
        else l = &e->next;
    }
    pc_entry *e = rf_calloc(1, sizeof *e);
    e->ids = ids, e->n = n, e->kv = *kv, e->bytes = bytes, e->used = ++pc->clock;
    e->next = pc->head;
    pc->head = e;
    pc->bytes += bytes;
    while (pc->bytes > budget) {
        pc_entry **lru = &pc->head;
        for (pc_entry **l = &pc->head; *l; l = &(*l)->next)
            if ((*l)->used < (*lru)->used) lru = l;
        rf_pc_drop(pc, lru);
    }
}