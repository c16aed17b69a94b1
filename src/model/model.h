/* model.h - a Qwen3 / ReFusion checkpoint in memory: config + weights. The
 * large matrices stay in the mmap'd safetensors files (bf16/f16/f32); only the
 * small norm vectors are converted to f32 copies at load time. */
#ifndef RF_MODEL_H
#define RF_MODEL_H

#include "formats/ftype.h"
#include "io/config.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kernels/kernels.h"

typedef struct {
    rf_mat q, k, v, o;        /* q:[n_heads*hd, d] k,v:[n_kv*hd, d] o:[d, n_heads*hd] */
    rf_mat gate, up, down;    /* gate,up:[ffn, d] down:[d, ffn] */
    float *attn_norm;         /* input_layernorm [d] */
    float *ffn_norm;          /* post_attention_layernorm [d] */
    float *q_norm, *k_norm;   /* [head_dim] */
} rf_layer;

typedef struct {
    rf_config cfg;
    rf_mat embed;             /* [vocab, d] */
    rf_mat lm_head;           /* [vocab, d]; same memory as embed when tied */
    float *final_norm;        /* [d] */
    rf_layer *layers;         /* [n_layers] */
    rf_st_file *files;        /* the mmap'd shards */
    int n_files;
    rf_gguf_file *gguf;       /* or the mmap'd GGUF file (then n_files = 0) */
    char *dir;
    void *owned;              /* heap block holding in-memory weights, or NULL */
    void *packed_mem;         /* the matrices' packed copies (rf_model_pack), or NULL */
} rf_model;

/* Load <dir>/config.json and model.safetensors or the shards listed in
 * model.safetensors.index.json. Every expected tensor must exist with the
 * dtype/shape the config implies; unknown extra tensors are an error too.
 * Error: -1 and rf_last_error(). */
int rf_model_load(rf_model *m, const char *dir);
void rf_model_free(rf_model *m);

/* model/pack.c: give the bf16 layer matrices and the lm head their packed
 * copies (kernels.h rf_mat_pack; also Q8_0 / Q4_0 ones, at every tier). The loaders call it; whoever
 * changes the matrices in place afterwards calls rf_model_unpack first
 * (rf_model_quantize does). Returns 0, or -1 with the error set when the
 * copies do not fit in memory. */
int rf_model_pack(rf_model *m);
void rf_model_unpack(rf_model *m);

/* GGUF (io/gguf.h), llama.cpp's `qwen3` layout: rf_model_load of a path that
 * is a file reads it with rf_model_load_gguf. Hyper-parameters come from the
 * qwen3.* keys, the vocabulary size from token_embd, the token ids from
 * tokenizer.ggml.* and refusion.* keys; tied embeddings = no output tensor.
 * Matrices may be F32/F16/BF16/Q8_0/Q4_0, norms F32/F16/BF16. */
int rf_model_load_gguf(rf_model *m, const char *path);
/* Add the model's metadata (general.*, qwen3.*, the token ids) and its
 * tensors to w, as llama.cpp's converter lays them out, in the file type
 * ft: norms in F32, each matrix in the type llama-quantize gives it in a
 * file of that type (formats/ftype.h: the mixes' per-tensor types and
 * fallbacks) and with ggml's quantisers, so that the bytes are
 * llama-quantize's. The tensors are converted row by row while w is
 * written: m must outlive the finish. rf_model_gguf_add: the file type a
 * dtype stands for (rf_ftype_of_dtype: RF_Q4_K is Q4_K_M). */
void rf_model_gguf_add_ftype(const rf_model *m, rf_gguf_writer *w, rf_ftype ft, const char *name);
void rf_model_gguf_add(const rf_model *m, rf_gguf_writer *w, rf_dtype dtype, const char *name);

/* Write a randomly initialised checkpoint of the config's shape into dir:
 * config.json + model.safetensors, or shards of at most shard_bytes each with
 * model.safetensors.index.json when shard_bytes > 0. dtype: RF_BF16 or RF_F32.
 * Weights ~ N(0, init_std), norms = 1. Streams tensor by tensor so an 8B
 * checkpoint does not need 16 GiB of RAM. */
int rf_model_write_random(const rf_config *cfg, const char *dir, rf_dtype dtype,
                          size_t shard_bytes, float init_std, uint64_t seed);

/* Write m as a Hugging Face checkpoint into dir: config.json and
 * model.safetensors (or shards of at most shard_bytes with an index when
 * shard_bytes > 0) in dtype RF_F32/RF_F16/RF_BF16, converted tensor by
 * tensor from wherever m's weights are (mmap, heap, a trainer's block).
 * Quantised weights (a GGUF of ggml block types) are dequantised. 0, or -1
 * with rf_last_error(). */
int rf_model_save(const rf_model *m, const char *dir, rf_dtype dtype, size_t shard_bytes);

/* A random model held in memory (no files): for tests and benchmarks that
 * do not need the loader. Same init as rf_model_write_random. */
void rf_model_init_random(rf_model *m, const rf_config *cfg, rf_dtype dtype,
                          float init_std, uint64_t seed);

/* Quantise a loaded model in memory (model/quantize.c): the layer matrices
 * (q, k, v, o, gate, up, down) and the lm head become dtype (RF_Q8_0 or
 * RF_Q4_0, ggml's blocks, heap memory in m->owned); the embeddings keep
 * their dtype, norms stay f32. Tied embeddings: the lm head becomes a
 * quantised copy. Every matrix needs cols % 32 == 0. -1 and rf_last_error()
 * on a bad dtype or shape (the model is then unchanged). */
int rf_model_quantize(rf_model *m, rf_dtype dtype);

#endif
