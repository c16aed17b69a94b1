/* grow.h - function-preserving growth of a Qwen3 / ReFusion checkpoint to a
 * larger shape (Net2Net-style initialisation of a large model from a
 * trained small one). The grown model computes the small model's logits
 * (for the small vocabulary; the extra vocabulary rows sit far below) at
 * every position, while every weight of the large shape is read. The rules
 * (docs/growth.md):
 *
 *  - hidden dims, heads, KV heads and FFN units beyond the source's are zero
 *    in every old layer: nothing reads them, nothing writes them;
 *  - layers beyond the source's are identities: o_proj = down_proj = 0, the
 *    other matrices N(0, 0.02^2) (read all the same); the old layers keep
 *    their order, spread evenly (old layer l at floor(l * L' / L));
 *  - a wider head_dim (r = hd' / hd) puts old dim i of each RoPE pair where
 *    the new frequency equals the old one (rotate_half: i -> r*i and
 *    i + hd/2 -> r*i + hd'/2, for i < hd/2); q_norm then gives q a gain of
 *    sqrt(r), which the attention scale 1/sqrt(hd') takes back, and k_norm
 *    is scaled by 1/sqrt(r);
 *  - every RMSNorm weight over the hidden size is scaled by sqrt(H / H')
 *    (the zero dims shrink the mean square by H / H'), and rms_norm_eps by
 *    H / H' so that the hidden-size norms stay exact;
 *  - KV heads: old KV head j becomes ceil(g / g') new ones (copies; g, g'
 *    the query heads per KV head), and old query head t of group j sits in
 *    them in order;
 *  - a larger vocabulary: extra rows must lose every softmax and threshold.
 *    Hidden dim H (the first extra one) carries a small constant c in every
 *    embedding row; the final norm's weight there is large (K), and the
 *    extra head rows read it negatively, so their logits are -2^14 / rms
 *    (rms: the grown final hidden's RMS; about -1000). Untied head: old head rows
 *    are 0 there. Tied embeddings (head rows = embedding rows, which carry
 *    c): dim H + 1 carries -c with final-norm weight -K, cancelling the old
 *    rows' c * c * K exactly.
 * Everything else (rope_theta, max_pos, special ids) is the source's. */
#ifndef RF_MODEL_GROW_H
#define RF_MODEL_GROW_H

#include "model/model.h"

/* The grown config: src with the shape of `shape` (hidden_size,
 * intermediate_size, n_layers, n_heads, n_kv_heads, head_dim, vocab_size,
 * tie_embeddings), everything else from src. Checks that the shape can hold
 * src function-preservingly: -1 with one line in rf_last_error() if not. */
int rf_grow_config(const rf_config *src, const rf_config *shape, rf_config *out);

/* Write src grown to config dst (from rf_grow_config) as a Hugging Face
 * checkpoint into dir (config.json, model.safetensors; dtype F32/F16/BF16),
 * tensor by tensor from src's weights (any dtype), so the grown model never
 * needs to fit in memory. seed: the extra layers' random matrices.
 * 0, or -1 with rf_last_error(). */
int rf_model_grow(const rf_model *src, const rf_config *dst, const char *dir, rf_dtype dtype, uint64_t seed);

#endif
