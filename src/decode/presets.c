/* presets.c - see presets.h */
#include "decode/presets.h"

#include <string.h>

#define RF_PRESET_ROW_(name, gen, slot, blocks, st, tt) {name, gen, slot, blocks, st, tt},
const rf_decode_preset rf_decode_presets[] = {RF_DECODE_PRESETS(RF_PRESET_ROW_)};
const int rf_decode_presets_n = (int)(sizeof rf_decode_presets / sizeof rf_decode_presets[0]);

const rf_decode_preset *rf_decode_preset_find(const char *name) {
    for (int i = 0; name && i < rf_decode_presets_n; i++)
        if (!strcmp(rf_decode_presets[i].name, name)) return &rf_decode_presets[i];
    return NULL;
}

void rf_decode_preset_apply(const rf_decode_preset *p, rf_params *g) {
    g->gen_length = p->gen_length;
    g->slot_size = p->slot_size;
    g->n_blocks = p->n_blocks;
    g->slot_threshold = p->slot_threshold;
    g->token_threshold = p->token_threshold;
    g->temperature = 0.0f;
}
