/* spans.c - see spans.h */
#include "io/spans.h"

#include <stdlib.h>

static int span_cmp(const void *a, const void *b) {
    const rf_span *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

int rf_spans_overlap(rf_span *s, int n, int *prev_out) {
    qsort(s, (size_t)n, sizeof(rf_span), span_cmp);
    int prev = -1;
    for (int i = 0; i < n; i++) {
        if (s[i].b == s[i].e) continue;
        if (prev >= 0 && s[i].b < s[prev].e) {
            *prev_out = prev;
            return i;
        }
        prev = i;
    }
    return -1;
}
