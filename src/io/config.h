/* config.h - the Qwen3 / ReFusion hyper-parameters read from config.json. */
#ifndef RF_CONFIG_H
#define RF_CONFIG_H

#include "io/safetensors.h"

/* Default ids of the two tokens ReFusion adds to the Qwen3 vocabulary. A
 * smaller vocabulary (the tiny test models) keeps them in its last two ids. */
#define RF_QWEN_BOT_ID 151669
#define RF_QWEN_MASK_ID 151670

typedef struct {
    int hidden_size;        /* d_model */
    int intermediate_size;  /* SwiGLU hidden width */
    int n_layers;           /* num_hidden_layers */
    int n_heads;            /* num_attention_heads */
    int n_kv_heads;         /* num_key_value_heads (GQA groups) */
    int head_dim;           /* per head; may differ from hidden/n_heads */
    int vocab_size;
    int max_pos;            /* max_position_embeddings: the context limit */
    float rms_eps;          /* rms_norm_eps */
    float rope_theta;
    int tie_embeddings;     /* tie_word_embeddings: lm_head = embed_tokens */
    int bos_id, eos_id, pad_id; /* -1 where config.json has none */
    int mask_id;            /* <|mask|>: config "mask_token_id", default 151670 */
    int bot_id;             /* <|beginoftext|>: "bot_token_id", default 151669 */
    rf_dtype dtype;         /* torch_dtype: storage type of the weights */
} rf_config;

/* Read and validate config.json (positive sizes, heads divide evenly, ...).
 * On error: -1 and rf_last_error() names the file and the key. */
int rf_config_load(rf_config *c, const char *path);
/* Check a config built elsewhere (e.g. from GGUF metadata) as strictly as
 * rf_config_load does; where names the source in the error. */
int rf_config_check(const rf_config *c, const char *where);
/* The default ids of ReFusion's <|mask|> / <|beginoftext|> for a vocabulary
 * of c->vocab_size (used when a checkpoint does not name them). */
void rf_config_default_special_ids(rf_config *c);
/* For a checkpoint read from disk that does not name them: 151670 / 151669
 * when the vocabulary is larger, else -1 (never a guess among real tokens). */
void rf_config_known_special_ids(rf_config *c);
/* Write config.json (atomically) in the Hugging Face Qwen3 layout. */
int rf_config_save(const rf_config *c, const char *path);
/* Parameter count of the whole model (lm_head counted once if tied). */
long long rf_config_n_params(const rf_config *c);
/* Fill the standard shapes ("0.6b", "8b", "tiny", ...) ; -1 if unknown name. */
int rf_config_preset(rf_config *c, const char *name);

#endif
