/* small_config.h - the small Qwen3 shapes of the C tests, written once:
 * rf_test_config(hidden, ffn, heads, kv_heads, head_dim, vocab, max_pos): 2
 * layers, RMS eps 1e-6, RoPE theta 10000, untied embeddings, no BOS / pad
 * and f32 weights; eos / mask / bot are -1 for the test to set (each test
 * has its own ids), as it may change anything else. */
#ifndef RF_TEST_SMALL_CONFIG_H
#define RF_TEST_SMALL_CONFIG_H

#include <string.h>

#include "io/config.h"

static inline rf_config rf_test_config(int hidden, int ffn, int heads, int kv_heads, int head_dim, int vocab,
                                       int max_pos) {
    rf_config c;
    memset(&c, 0, sizeof c);
    c.hidden_size = hidden;
    c.intermediate_size = ffn;
    c.n_layers = 2;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.vocab_size = vocab;
    c.max_pos = max_pos;
    c.rms_eps = 1e-6f;
    c.rope_theta = 10000.0f;
    c.bos_id = c.pad_id = -1;
    c.eos_id = c.mask_id = c.bot_id = -1;
    c.dtype = RF_F32;
    return c;
}

#endif
