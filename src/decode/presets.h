/* presets.h - the paper's per-task decoding settings, as named presets of
 * the shared decoding options (--preset NAME in generate, eval and serve).
 *
 * The values are those of the authors' evaluation script (eval.sh in
 * ML-GSAI/ReFusion: the --model_args of each lm-eval task): gen_length 512,
 * greedy, and per task slot size / serial blocks / slot threshold / token
 * threshold. This list is the only place they are written down. */
#ifndef RF_PRESETS_H
#define RF_PRESETS_H

#include "decode/decode.h"

/* X(name, gen_length, slot_size, blocks, slot_threshold, token_threshold) */
#define RF_DECODE_PRESETS(X)              \
    X("gsm8k", 512, 32, 4, 0.9f, 0.4f)    \
    X("humaneval", 512, 32, 4, 0.9f, 0.4f) \
    X("mbpp", 512, 32, 4, 0.9f, 0.3f)     \
    X("math", 512, 32, 8, 0.8f, 0.6f)     \
    X("mmlu-pro", 512, 16, 4, 0.9f, 0.4f) \
    X("gpqa", 512, 8, 32, 0.8f, 0.2f)     \
    X("arc-c", 512, 8, 64, 0.8f, 0.1f)

/* "|gsm8k|humaneval|..." : the names for an option's choice list */
#define RF_PRESET_BAR_NAME_(name, ...) "|" name
#define RF_DECODE_PRESET_CHOICES RF_DECODE_PRESETS(RF_PRESET_BAR_NAME_)

typedef struct {
    const char *name;
    int gen_length, slot_size, n_blocks;
    float slot_threshold, token_threshold;
} rf_decode_preset;

extern const rf_decode_preset rf_decode_presets[];
extern const int rf_decode_presets_n;

/* The preset called name, or NULL. */
const rf_decode_preset *rf_decode_preset_find(const char *name);
/* Set its values in g (and temperature 0: the paper decodes greedily);
 * everything else in g is left as it is. */
void rf_decode_preset_apply(const rf_decode_preset *p, rf_params *g);

#endif
