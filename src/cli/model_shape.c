/* model_shape.c - the rows that give a model's shape (a preset and the
 * sizes that override it), one description for `init` and `grow` (the shape
 * of a new model, the target shape of a grown one): cli/commands.h
 * rf_shape_opts. */
#include <stddef.h>

#include "cli/commands.h"

#define S(f) offsetof(rf_shape_opts, f)
#define SIZE(nm, f, hi_, what) \
    {.name = nm, .type = RF_OPT_INT, .lo = 1, .hi = hi_, .offset = S(f), .metavar = "N", .help = what}
const rf_opt rf_shape_table[] = {
    {.name = "preset", .type = RF_OPT_STR, .offset = S(preset), .metavar = "NAME",
     .help = "a preset shape: tiny, small, 0.6b, 1.7b, 4b or 8b (io/config.c; 0.6b and up: the Qwen3 shapes)"},
    SIZE("hidden", hidden, 1 << 24, "hidden size"),
    SIZE("layers", layers, 4096, "transformer layers"),
    SIZE("heads", heads, 1 << 24, "attention (query) heads"),
    SIZE("kv-heads", kv_heads, 1 << 24, "key/value heads"),
    SIZE("head-dim", head_dim, 1 << 24, "dimension of a head"),
    SIZE("ffn", ffn, 1 << 24, "intermediate size of the MLP"),
    SIZE("vocab", vocab, 1 << 24, "vocabulary size"),
    {.name = "tied", .type = RF_OPT_INT, .lo = 0, .hi = 1, .offset = S(tied), .metavar = "0|1",
     .help = "1: the output matrix is the token embedding's"},
};
const int rf_shape_table_n = (int)(sizeof rf_shape_table / sizeof rf_shape_table[0]);

void rf_shape_opts_unset(rf_shape_opts *s) {
    *s = (rf_shape_opts){NULL, -1, -1, -1, -1, -1, -1, -1, -1};
}

int rf_shape_opts_given(const rf_shape_opts *s) {
    return s->hidden >= 0 || s->layers >= 0 || s->heads >= 0 || s->kv_heads >= 0 || s->head_dim >= 0 ||
           s->ffn >= 0 || s->vocab >= 0 || s->tied >= 0;
}
