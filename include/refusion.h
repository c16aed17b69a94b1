/* refusion.h - the public C API of librefusion: ReFusion / AR / MDM text
 * generation with Qwen3-shaped diffusion language models on the CPU.
 *
 * This is the only header a program needs. Everything is reached through
 * opaque handles; every function that can fail returns NULL or a negative
 * rf_status and leaves a one-line message for rf_last_error() (per thread).
 * The library never prints, never installs signal handlers and never calls
 * exit() (an allocation failure inside a call is returned as
 * RF_ERR_INTERNAL; memory that call had taken is then leaked).
 *
 *   refusion_model *m = rf_model_open("models/refusion-demo");
 *   refusion_tokenizer *tok = rf_tokenizer_open(m);
 *   refusion_session *s = rf_session_new(m);
 *   int32_t prompt[4096], out[256];
 *   int n = rf_tokenize(tok, "What is 2+3?", 1, prompt, 4096);
 *   rf_params p = rf_params_default();
 *   int k = rf_generate(s, prompt, n, &p, out, 256, NULL);
 *   ... rf_detokenize(tok, out, k, buf, sizeof buf) ...
 *   rf_session_free(s); rf_tokenizer_free(tok); rf_model_free(m);
 *
 * Threads: a model and a tokenizer may be shared by any number of threads;
 * a session is used by one thread at a time. OpenMP decides how many cores a
 * generation uses (OMP_NUM_THREADS). */
#ifndef REFUSION_H
#define REFUSION_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RF_API __attribute__((visibility("default")))
#else
#define RF_API
#endif

#define RF_VERSION_MAJOR 0
#define RF_VERSION_MINOR 1

typedef struct refusion_model refusion_model;
typedef struct refusion_tokenizer refusion_tokenizer;
typedef struct refusion_session refusion_session;

typedef enum {
    RF_OK = 0,
    RF_ERR_INVALID = -1,   /* bad argument or parameter (message says which) */
    RF_ERR_CANCELLED = -2, /* *cancel was raised */
    RF_ERR_INTERNAL = -3,  /* out of memory or an internal check failed */
} rf_status;

/* The message of the last failure on this thread ("" never: a default text). */
RF_API const char *rf_last_error(void);
/* "major.minor" of the library actually loaded. */
RF_API const char *rf_version(void);

/* ---- model ---------------------------------------------------------------- */

/* A checkpoint directory (config.json + model.safetensors or shards) or a
 * .gguf file. The weights stay memory-mapped. NULL on error. */
RF_API refusion_model *rf_model_open(const char *path);
RF_API void rf_model_close(refusion_model *m);
RF_API int rf_model_n_vocab(const refusion_model *m);
RF_API int rf_model_n_ctx(const refusion_model *m);   /* max_position_embeddings */
RF_API int rf_model_eos_id(const refusion_model *m);  /* -1: none */
RF_API int rf_model_mask_id(const refusion_model *m);

/* ---- tokenizer -------------------------------------------------------------- */

/* The tokenizer that belongs to the model: tokenizer.json (+
 * tokenizer_config.json) beside the weights, or the GGUF file's metadata.
 * NULL (with the reason) when the model has none. */
RF_API refusion_tokenizer *rf_tokenizer_open(const refusion_model *m);
RF_API void rf_tokenizer_close(refusion_tokenizer *t);
/* Token ids of text (UTF-8); chat = 1 wraps it as one user turn of the chat
 * template with the generation prompt. Writes at most cap ids; returns the
 * number of ids the text has (more than cap: call again with a larger
 * buffer), or RF_ERR_INVALID (e.g. invalid UTF-8). */
RF_API int rf_tokenize(const refusion_tokenizer *t, const char *text, int chat, int32_t *ids, int cap);
/* Text of ids (special tokens skipped when skip_special), NUL-terminated in
 * buf (truncated to cap - 1 bytes); returns its full length in bytes, or
 * RF_ERR_INVALID for an id outside the vocabulary. */
RF_API int rf_detokenize(const refusion_tokenizer *t, const int32_t *ids, int n, int skip_special,
                         char *buf, int cap);

/* ---- generation ------------------------------------------------------------- */

typedef enum {
    RF_METHOD_REFUSION = 0, /* plan-and-infill slots, verified by the AR head */
    RF_METHOD_AR = 1,       /* one token per model call, left to right */
    RF_METHOD_MDM = 2,      /* masked diffusion (LLaDA low-confidence remasking) */
} rf_method;

/* Newly final answer tokens, in order (up to and including the first EOS). */
typedef void (*rf_token_cb)(const int32_t *ids, int n, void *user);

typedef struct {
    rf_method method;
    int gen_length;        /* answer tokens (ReFusion pads it to whole slots) */
    int slot_size;         /* ReFusion */
    int n_blocks;          /* ReFusion and MDM: serial blocks */
    float slot_threshold;  /* ReFusion: plan a slot when its first token's prob > this */
    float token_threshold; /* ReFusion: accept a token when its AR prob > this */
    int ar_verify;         /* ReFusion: 0 off (the paper), 1 AR correct, 2 check first, 3 both */
    int mdm_steps;         /* MDM: diffusion steps (0: gen_length) */
    float temperature;     /* 0: greedy */
    int top_k;             /* AR sampling, 0: off */
    float top_p;           /* AR sampling, 1: off */
    uint64_t seed;
    rf_token_cb on_tokens; /* optional streaming */
    void *user;
    const volatile int *cancel; /* optional: non-zero stops before the next model call */
} rf_params;

/* The defaults of `refusion generate`: ReFusion, 512 tokens, slots of 4,
 * 32 blocks, thresholds 0.6 / 0.3, ar_verify off, greedy, seed 0. */
RF_API rf_params rf_params_default(void);

typedef struct {
    int n_tokens;    /* answer tokens (as returned) */
    int hit_eos;     /* the answer ends with EOS */
    int n_calls;     /* model calls */
    double seconds;  /* wall time */
} rf_stats;

/* A session: the KV cache and forward-pass buffers of one generation at a
 * time, kept and reused by every rf_generate on it (they grow only when a
 * request needs more than any before). Free it to release the memory. */
RF_API refusion_session *rf_session_new(const refusion_model *m);
RF_API void rf_session_free(refusion_session *s);
/* Bytes the session holds between generations. */
RF_API size_t rf_session_bytes(const refusion_session *s);

/* Generate an answer to prompt ids. Writes at most cap ids to out; returns
 * the answer's length (more than cap: the rest was dropped), or a negative
 * rf_status. stats may be NULL. */
RF_API int rf_generate(refusion_session *s, const int32_t *prompt, int n_prompt, const rf_params *p,
                       int32_t *out, int cap, rf_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
