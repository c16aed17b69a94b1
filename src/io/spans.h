/* spans.h - the byte ranges a file's tensors occupy, checked for overlap
 * (GGUF and safetensors both forbid two tensors sharing bytes). */
#ifndef RF_SPANS_H
#define RF_SPANS_H

#include <stdint.h>

typedef struct {
    uint64_t b, e; /* [b, e) */
    int idx;       /* the tensor's index in the file */
} rf_span;

/* Sort s[0..n) by start; the first span that begins before the end of the
 * previous non-empty one (empty spans take no room and are skipped): its
 * position in the sorted s, with that previous span's in *prev_out; -1 if
 * no two overlap. */
int rf_spans_overlap(rf_span *s, int n, int *prev_out);

#endif
