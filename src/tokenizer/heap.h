/* heap.h - the binary heap the BPE encoder (its merge queue) and the BPE
 * trainer (its pair queue) both use, written once as a macro so that each
 * keeps its own element type and order, inlined as before.
 *
 * RF_HEAP_DEFINE(CTX, T, BEFORE, FIRST) defines
 *   static void heap_push(CTX *c, T v);
 *   static T heap_pop(CTX *c);       (c->hn > 0)
 * over c->heap (T *), c->hn and c->hcap (size_t); BEFORE(const T *x,
 * const T *y) is true when x leaves the heap first; the array grows by
 * doubling from FIRST elements. */
#ifndef RF_TOK_HEAP_H
#define RF_TOK_HEAP_H

#include <stdlib.h>

#include "util/util.h"

#define RF_HEAP_DEFINE(CTX, T, BEFORE, FIRST)                                                                  \
    static void heap_push(CTX *c, T v) {                                                                       \
        if (c->hn == c->hcap) {                                                                                \
            c->hcap = c->hcap ? 2 * c->hcap : (FIRST);                                                         \
            c->heap = realloc(c->heap, c->hcap * sizeof *c->heap);                                             \
            if (!c->heap) rf_die("out of memory");                                                             \
        }                                                                                                      \
        size_t i = c->hn++;                                                                                    \
        while (i > 0 && BEFORE(&v, &c->heap[(i - 1) / 2])) {                                                   \
            c->heap[i] = c->heap[(i - 1) / 2];                                                                 \
            i = (i - 1) / 2;                                                                                   \
        }                                                                                                      \
        c->heap[i] = v;                                                                                        \
    }                                                                                                          \
    static T heap_pop(CTX *c) {                                                                                \
        T top = c->heap[0], last = c->heap[--c->hn];                                                           \
        size_t i = 0;                                                                                          \
        for (;;) {                                                                                             \
            size_t l = 2 * i + 1, r = l + 1, m = i;                                                            \
            const T *mv = &last;                                                                               \
            if (l < c->hn && BEFORE(&c->heap[l], mv)) m = l, mv = &c->heap[l];                                 \
            if (r < c->hn && BEFORE(&c->heap[r], mv)) m = r;                                                   \
            if (m == i) break;                                                                                 \
            c->heap[i] = c->heap[m];                                                                           \
            i = m;                                                                                             \
        }                                                                                                      \
        if (c->hn) c->heap[i] = last;                                                                          \
        return top;                                                                                            \
    }

#endif
