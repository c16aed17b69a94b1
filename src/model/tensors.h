/* tensors.h - THE description of a Qwen3 / ReFusion model's tensors.
 *
 * One table, written once below, gives every tensor of a checkpoint of a
 * given config in canonical order: its Hugging Face name, its GGUF name,
 * its shape (from the config) and which field of a layer it fills. The
 * loader (load.c, gguf_model.c), the random writer (write_random.c), the
 * quantiser, rf_model_save (save.c), the trainer's parameter block
 * (train/model_train.c) and its checkpoints (train/checkpoint.c) all walk
 * this table; none of them spells a tensor name or counts tensors itself.
 *
 * Dtype rules: matrices are stored in the checkpoint's dtype (F32/F16/BF16
 * in safetensors; also Q8_0/Q4_0 in GGUF); norm vectors ("cols == 0") are
 * held in f32 in memory whatever the file stores. */
#ifndef RF_MODEL_TENSORS_H
#define RF_MODEL_TENSORS_H

#include "model/model.h"

/* The tensors of one decoder layer, in checkpoint order:
 *   X(field, hf_suffix, gguf_suffix, rows, cols)
 * field: member of rf_layer (model.h) and rf_tlayer (train/train.h);
 * rows / cols: members of rf_dims; cols "none" (= 0) marks a norm vector.
 * HF name: model.layers.<l>.<hf_suffix>.weight; GGUF: blk.<l>.<gguf_suffix>.weight */
#define RF_LAYER_TENSORS(X)                                                  \
    X(attn_norm, "input_layernorm", "attn_norm", d, none)                    \
    X(q, "self_attn.q_proj", "attn_q", q, d)                                 \
    X(k, "self_attn.k_proj", "attn_k", kv, d)                                \
    X(v, "self_attn.v_proj", "attn_v", kv, d)                                \
    X(o, "self_attn.o_proj", "attn_output", d, q)                            \
    X(q_norm, "self_attn.q_norm", "attn_q_norm", hd, none)                   \
    X(k_norm, "self_attn.k_norm", "attn_k_norm", hd, none)                   \
    X(ffn_norm, "post_attention_layernorm", "ffn_norm", d, none)             \
    X(gate, "mlp.gate_proj", "ffn_gate", ffn, d)                             \
    X(up, "mlp.up_proj", "ffn_up", ffn, d)                                   \
    X(down, "mlp.down_proj", "ffn_down", d, ffn)

/* The model-wide tensors: embed first, then the layers, then final_norm and
 * (untied embeddings only) lm_head.
 *   X(role, hf_name, gguf_name, rows, cols) */
#define RF_TOP_TENSORS(X)                                                    \
    X(RF_T_EMBED, "model.embed_tokens.weight", "token_embd.weight", vocab, d) \
    X(RF_T_FINAL_NORM, "model.norm.weight", "output_norm.weight", d, none)   \
    X(RF_T_LM_HEAD, "lm_head.weight", "output.weight", vocab, d)

#define RF_LAYER_X_COUNT(...) +1
enum { RF_LAYER_N_TENSORS = 0 RF_LAYER_TENSORS(RF_LAYER_X_COUNT) };

/* The config's dimensions, by the names the table uses. */
typedef struct {
    int d, q, kv, hd, ffn, vocab, none;
} rf_dims;
rf_dims rf_dims_of(const rf_config *c);

/* role of a tensor: a layer tensor's index in RF_LAYER_TENSORS (0..10), or
 * one of these */
enum { RF_T_EMBED = 100, RF_T_FINAL_NORM, RF_T_LM_HEAD };

typedef struct {
    char name[96];   /* Hugging Face name */
    char gguf[96];   /* llama.cpp's name */
    int rows, cols;  /* matrix [rows, cols]; a norm vector has shape [rows], cols = 0 */
    int layer;       /* -1 for the model-wide tensors */
    int role;        /* see above */
} rf_tdesc;

/* Number of tensors of a checkpoint of config c (lm_head only when untied). */
int rf_tensor_count(const rf_config *c);
/* Fill out[0 .. rf_tensor_count(c)) in canonical order; returns the count. */
int rf_tensor_table(const rf_config *c, rf_tdesc *out);

/* A table entry with where it goes in an rf_model. */
typedef struct {
    char name[96];
    int rows, cols;  /* as rf_tdesc */
    rf_mat *mat;     /* destination of a matrix (NULL for vectors) */
    float **vec;     /* destination of a norm vector (NULL for matrices) */
    const rf_tdesc *desc;
} rf_tspec;

/* m->cfg must be set; allocates m->layers if NULL. *out is malloc'd (one
 * block, descs included: free(*out) frees all); returns the count. */
int rf_model_tensor_list(rf_model *m, rf_tspec **out);

/* The matrices the forward pass multiplies by (7 per layer, then the lm
 * head: what quantisation converts and packing copies) into out, which
 * holds 7 * n_layers + 1; returns the count. */
int rf_model_matmuls(rf_model *m, rf_mat **out);

/* For loaders: one f32 heap block (m->owned) sized for every norm vector
 * of the list, and the conversion of one stored vector (F32/F16/BF16) into
 * it: *vec of the entry points at dst, which advances past it. */
float *rf_model_norm_block(rf_model *m, const rf_tspec *ts, int n);
void rf_model_bind_norm(const rf_tspec *s, rf_dtype dtype, const void *data, float **dst);

/* Write config.json (with dtype) and the table's tensors for cfg into dir:
 * tensor i's bytes (in dtypes[i], or dtype for every tensor when dtypes is
 * NULL) come from fill[i](ctx[i], ...). One
 * model.safetensors, or shards of at most shard_bytes each plus
 * model.safetensors.index.json when shard_bytes > 0; files of an earlier
 * checkpoint there that would shadow this one are removed. (save.c) */
int rf_model_write_tensors(const rf_config *cfg, const char *dir, rf_dtype dtype, const rf_dtype *dtypes,
                           size_t shard_bytes, rf_st_fill_fn const *fill, void *const *ctx);

/* The random writer's weights (write_random.c), for writers of other
 * checkpoints that hold random tensors: rf_fill_normal is an rf_st_fill_fn
 * giving the N(0, std^2) elements rf_model_write_random(seed) writes for
 * the tensor called name, in dtype (F32/F16/BF16). */
typedef struct {
    uint64_t seed; /* per tensor */
    float std;
    rf_dtype dtype;
} rf_normal_fill;
void rf_normal_fill_init(rf_normal_fill *g, uint64_t seed, const char *name, float std, rf_dtype dtype);
void rf_fill_normal(void *ctx, size_t e0, size_t n, void *dst);

#endif
