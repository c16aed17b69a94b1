/* refusion.h - the public C API of librefusion: ReFusion / AR / MDM text
 * generation with Qwen3-shaped diffusion language models on the CPU.
 *
 * This is the only header a program needs. Everything is reached through
 * opaque handles; every function that can fail returns NULL or a negative
 * rf_status and leaves a one-line message for rf_last_error() (per thread).
 * The library never prints, never installs signal handlers and never calls
 * exit(): an allocation that fails inside a call makes it return
 * RF_ERR_NOMEM (or NULL) after giving back the memory it had taken.
 *
 *   refusion_model *m = rf_model_open("models/refusion-demo");
 *   refusion_tokenizer *tok = rf_tokenizer_open(m);
 *   refusion_session *s = rf_session_new(m);
 *   int32_t prompt[4096], out[256];
 *   int n = rf_tokenize(tok, "What is 2+3?", 1, prompt, 4096);
 *   rf_params p = rf_params_default();
 *   int k = rf_generate(s, prompt, n, &p, out, 256, NULL);
 *   ... rf_detokenize(tok, out, k, buf, sizeof buf) ...
 *   rf_session_free(s); rf_tokenizer_close(tok); rf_model_close(m);
 *
 * Threads: a model and a tokenizer may be shared by any number of threads;
 * a session is used by one thread at a time. OpenMP decides how many cores a
 * generation uses (OMP_NUM_THREADS, or rf_set_threads on the thread that
 * calls rf_generate). */
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

/* RF_VERSION_MAJOR, RF_VERSION_MINOR, RF_VERSION_PATCH, RF_VERSION_STRING */
#include "refusion_version.h"

typedef struct refusion_model refusion_model;
typedef struct refusion_tokenizer refusion_tokenizer;
typedef struct refusion_session refusion_session;
typedef struct refusion_text_stream refusion_text_stream;

typedef enum {
    RF_OK = 0,
    RF_ERR_INVALID = -1,   /* bad argument or parameter (message says which) */
    RF_ERR_CANCELLED = -2, /* *cancel was raised */
    RF_ERR_INTERNAL = -3,  /* an internal check failed */
    RF_ERR_NOMEM = -4,     /* out of memory (the call's own memory was freed) */
} rf_status;

/* The message of the last failure on this thread ("" never: a default text). */
RF_API const char *rf_last_error(void);
/* "major.minor.patch" of the library actually loaded (RF_VERSION_STRING of
 * the header it was built with). */
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
/* 1 when the model has a tokenizer (tokenizer.json beside the weights, or
 * the GGUF file's tokenizer metadata): rf_tokenizer_open should find it. */
RF_API int rf_model_has_tokenizer(const refusion_model *m);

/* ---- tokenizer -------------------------------------------------------------- */

/* The tokenizer that belongs to the model: tokenizer.json (+
 * tokenizer_config.json) beside the weights, or the GGUF file's metadata.
 * NULL (with the reason) when the model has none. */
RF_API refusion_tokenizer *rf_tokenizer_open(const refusion_model *m);
RF_API void rf_tokenizer_close(refusion_tokenizer *t);
/* The chat template rf_tokenize_chat renders with: by default the model's
 * Jinja template (chat_template.jinja, tokenizer_config.json's
 * chat_template or the GGUF file's tokenizer.chat_template), else the
 * built-in Qwen3 renderer. spec: a Jinja template file to use instead, or
 * "builtin". 0, or RF_ERR_INVALID (unreadable file, syntax error: the
 * message names the line). Not while other threads use t. */
RF_API int rf_tokenizer_set_chat_template(refusion_tokenizer *t, const char *spec);
/* Whether rf_tokenize_chat (and rf_tokenize with chat = 1) parses special
 * tokens written in the messages: 0 (the default) encodes a message's
 * "<|im_end|>" or "<|mask|>" as plain text, so that it cannot end its turn
 * or forge another; the template's own markers are special either way.
 * 1 parses them as special tokens. Not while other threads use t. */
RF_API void rf_tokenizer_set_special_in_content(refusion_tokenizer *t, int on);
/* 0 when the chat template renders a plain conversation (a user turn; a
 * system and a user turn; user, assistant, user), else RF_ERR_INVALID with
 * the template's error for the first: a template that can render no
 * conversation at all, reported when it is loaded rather than at each use. */
RF_API int rf_tokenizer_check_chat_template(const refusion_tokenizer *t);
/* Token ids of text (UTF-8); chat = 1 wraps it as one user turn of the chat
 * template with the generation prompt. Writes at most cap ids; returns the
 * number of ids the text has (more than cap: call again with a larger
 * buffer), or RF_ERR_INVALID (e.g. invalid UTF-8). */
RF_API int rf_tokenize(const refusion_tokenizer *t, const char *text, int chat, int32_t *ids, int cap);
/* Token ids of a conversation in the chat template, with the generation
 * prompt; think = 0 renders it with enable_thinking=false. Bad UTF-8 in the
 * last message is reported at its offset in that message. Returns like
 * rf_tokenize. */
typedef struct {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} rf_chat_message;
RF_API int rf_tokenize_chat(const refusion_tokenizer *t, const rf_chat_message *msgs, int n, int think,
                            int32_t *ids, int cap);
/* The id of one token given as its text ("<|im_start|>"), or -1. */
RF_API int rf_token_id(const refusion_tokenizer *t, const char *piece);
/* The tokenizer's end-of-sequence token (tokenizer_config.json's
 * eos_token, e.g. <|im_end|>), or -1. */
RF_API int rf_tokenizer_eos_id(const refusion_tokenizer *t);
/* Text of ids (special tokens skipped when skip_special), NUL-terminated in
 * buf (truncated to cap - 1 bytes); returns its full length in bytes, or
 * RF_ERR_INVALID for an id outside the vocabulary. */
RF_API int rf_detokenize(const refusion_tokenizer *t, const int32_t *ids, int n, int skip_special,
                         char *buf, int cap);

/* Text of ids fed one at a time, for streaming: each put returns the text
 * that is now final (bytes of an incomplete UTF-8 character are held back
 * until it completes), valid until the next call on the stream; NULL for an
 * id outside the vocabulary. flush returns what was held back. */
RF_API refusion_text_stream *rf_text_stream_new(const refusion_tokenizer *t, int skip_special);
RF_API const char *rf_text_stream_put(refusion_text_stream *s, int32_t id);
RF_API const char *rf_text_stream_flush(refusion_text_stream *s);
RF_API void rf_text_stream_free(refusion_text_stream *s);

/* ---- generation ------------------------------------------------------------- */

typedef enum {
    RF_METHOD_REFUSION = 0, /* plan-and-infill slots, verified by the AR head */
    RF_METHOD_AR = 1,       /* one token per model call, left to right */
    RF_METHOD_MDM = 2,      /* masked diffusion (LLaDA low-confidence remasking) */
} rf_method;

/* Newly final answer tokens, in order (up to and including the first EOS). */
typedef void (*rf_token_cb)(const int32_t *ids, int n, void *user);

/* What the decoder did (for visualisation and progress): answer positions
 * apos[i] (0-based in the answer) now hold tok[i]. ReFusion reports a PLAN
 * per planning step and an INFILL_ITER per infilling iteration (one or two
 * model calls each), AR an AR_TOKEN per token, MDM nothing. */
typedef enum {
    RF_EVENT_PLAN = 0,          /* slots chosen by a planning step: tok = their drafts */
    RF_EVENT_FAST_COMMIT = 1,   /* slots committed by global verification's fast path */
    RF_EVENT_INFILL_ITER = 2,   /* one draft+verify iteration: tok = the current drafts,
                                   accepted[i] = 1 where verified so far */
    RF_EVENT_INFILL_COMMIT = 3, /* infilled slots committed (truncated after an EOS) */
    RF_EVENT_DROP = 4,          /* positions dropped behind a committed EOS (tok NULL) */
    RF_EVENT_AR_TOKEN = 5,      /* one AR token */
} rf_event_type;
typedef struct {
    rf_event_type kind;
    int step;                      /* 0-based planning step (AR: token index) */
    int n;                         /* entries below */
    const int32_t *apos;           /* [n] answer positions */
    const int32_t *tok;            /* [n] tokens, NULL for RF_EVENT_DROP */
    const unsigned char *accepted; /* [n] for RF_EVENT_INFILL_ITER, else NULL */
} rf_event;
typedef void (*rf_event_callback)(const rf_event *ev, void *user);

/* One answer token's log-probability and the most likely alternatives at
 * its position (rf_params.logprobs): natural logs of the model's own
 * distribution there - the log-softmax of the AR head's logits, before the
 * penalties, temperature, top-k / top-p / min-p and a grammar's mask (what
 * OpenAI reports; the token was drawn from that distribution as the
 * sampling settings reshape it). Since 0.6. */
#define RF_MAX_TOP_LOGPROBS 20
typedef struct {
    int32_t token;                          /* the answer token */
    float logprob;                          /* its log-probability */
    int n_top;                              /* entries below: rf_params.top_logprobs */
    int32_t top_token[RF_MAX_TOP_LOGPROBS]; /* the most likely tokens, most likely first (ties: lower id) */
    float top_logprob[RF_MAX_TOP_LOGPROBS]; /* their log-probabilities */
} rf_token_logprob;
/* The log-probabilities of newly final answer tokens: called just before
 * rf_token_cb with the same tokens (lp[i].token == ids[i]). */
typedef void (*rf_logprob_cb)(const rf_token_logprob *lp, int n, void *user);

/* eos_id / mask_id: the model config's token */
#define RF_TOKEN_FROM_MODEL (-2)

/* The session's buffers that rf_generate lends the decoder (library-owned). */
struct rf_workspace;
/* A grammar over a tokenizer's vocabulary (rf_constraint_gbnf,
 * rf_constraint_json_schema). */
typedef struct rf_constraint rf_constraint;

/* The settings of one generation: what rf_generate, the CLI's option table,
 * the server and the decoders all read, as they are. Since 0.5 the decoders'
 * own fields (mask_id; ar_correct and ar_check_first in place of 0.4's
 * ar_verify = ar_correct + 2 * ar_check_first). Start from
 * rf_params_default(); rf_params_check says what is wrong with a value. */
typedef struct {
    rf_method method;        /* the decoder (RF_METHOD_REFUSION, _AR, _MDM) */
    int gen_length;          /* answer tokens (ReFusion pads it up to whole slots) */
    int slot_size;           /* ReFusion */
    int n_blocks;            /* ReFusion and MDM: serial blocks (whole slots; the last takes the rest) */
    float slot_threshold;    /* ReFusion: plan a slot when its first token's prob > this */
    float token_threshold;   /* ReFusion: accept a token when its AR prob > this */
    float temperature;       /* 0: greedy */
    int top_k;               /* AR sampling, 0: off */
    float top_p;             /* AR sampling, 1: off */
    uint64_t seed;
    int eos_id;              /* the answer ends at this token: RF_TOKEN_FROM_MODEL, an id, or -1 (none) */
    int mask_id;             /* the mask token: RF_TOKEN_FROM_MODEL or an id */
    /* AR-verified ReFusion (docs/refusion.md §4; both 0: the paper's algorithm) */
    int ar_correct;          /* a forced token is the AR head's choice, not the mask head's re-draft */
    int ar_check_first;      /* a slot's first token is checked by the AR head when its left
                                neighbour is committed */
    int lookahead;           /* ReFusion: a global verification also feeds the next plan (same answer,
                                fewer calls) */
    int jacobi;              /* ReFusion: an infilling iteration re-verifies the drafts instead of
                                re-drafting them first (one call per iteration, not two) */
    int rolling;             /* ReFusion, beyond the paper: a rolling slot - every call verifies the
                                drafts with the AR head and drafts the next slot_size tokens with
                                masks behind them (uses slot_size, slot_threshold; the answer is
                                AR decoding's with the same sampling settings) */
    int draft_adaptive;      /* rolling slot: each call's width (up to slot_size drafts and masks)
                                chosen for the most expected tokens per unit of call cost; the
                                answer stays AR decoding's */
    const float *call_cost;  /* draft_adaptive, optional: call_cost[n-1] = the time of a call of n
                                tokens over that of 1 token, n = 1..n_call_cost; NULL: rf_generate
                                measures it once per session at its first such generation (a few
                                seconds at the 0.6B shape), a decoder called without a session
                                fits it online from its own calls */
    int n_call_cost;
    int no_cache;            /* ReFusion: recompute the whole sequence every call (slow; checks the
                                cache: the same answer, up to rounding in bf16 weights) */
    int mdm_steps;           /* MDM: diffusion steps over the answer (0: gen_length) */
    /* AR sampling (method AR, or the rolling slot; refused by plan-and-infill
       and MDM), as llama.cpp names them */
    float min_p;             /* keep tokens with probability >= min_p * the top one's (0: off) */
    float repeat_penalty;    /* a logit l of a token in the window: l / x (l * x when l <= 0) (1: off) */
    float presence_penalty;  /* l - x for a token in the window (0: off) */
    float frequency_penalty; /* l - x * (times it occurs in the window) (0: off) */
    int penalty_last_n;      /* the window: the last N tokens of prompt + answer (-1: all, 0: none) */
    rf_token_cb on_tokens;   /* optional streaming */
    rf_event_callback on_event; /* optional: decoder events */
    void *user;              /* passed to on_tokens and on_event */
    const volatile int *cancel; /* optional: non-zero stops before the next model call (any thread) */
    struct rf_workspace *ws; /* NULL: rf_generate lends the session's buffers through it; a decoder
                                called without a session allocates its own */
    /* since 0.6 */
    const rf_constraint *constraint; /* optional: the answer is a sentence of this grammar (each token
                                drawn from the distribution masked to the tokens the grammar allows;
                                EOS only where the answer is complete). Every decoder: AR and the
                                rolling slot (the same answer); plan-and-infill and MDM commit in
                                position order under it (docs/refusion.md). Read-only: generations
                                may share one */
    int logprobs;            /* 1: report each answer token's log-probability (rf_token_logprob: through
                                on_logprobs as the tokens become final, and rf_stats.logprobs) under the row
                                it was drawn from: AR and the rolling slot the AR head's (the same values);
                                plan-and-infill the row that last set the token (plan, re-draft, AR
                                check); MDM its unmasking step's (docs/refusion.md). 0: off */
    int top_logprobs;        /* with logprobs: the alternatives per token, 0 .. RF_MAX_TOP_LOGPROBS */
    rf_logprob_cb on_logprobs; /* optional (user is passed) */
} rf_params;

/* The defaults of `refusion generate`: ReFusion, 512 tokens, slots of 4,
 * 32 blocks, thresholds 0.6 / 0.3, AR verification off, greedy, seed 0,
 * the model's EOS and mask (`generate` uses the tokenizer's EOS:
 * rf_tokenizer_eos_id), no min_p or penalties (repeat_penalty 1, window 64).
 * A checkpoint's generation_config.json is not read here:
 * rf_params_recommended applies it on top of these. */
RF_API rf_params rf_params_default(void);

/* The model's recommended settings, as `refusion generate` and `serve` start
 * from with no options: rf_params_default() with the checkpoint's
 * generation_config.json applied (none for a .gguf file or without the file;
 * its keys: docs/settings.md), and the answer's EOS: the file's
 * eos_token_id, else the tokenizer's (t may be NULL), else the model
 * config's. Into *p: 0, or RF_ERR_INVALID with the file and the key in
 * rf_last_error(). Since 0.5. */
RF_API int rf_params_recommended(const refusion_model *m, const refusion_tokenizer *t, rf_params *p);

/* One planning step of ReFusion (AR: one per token). */
typedef struct {
    int block;          /* serial block */
    int slots_planned;  /* slots chosen by the plan */
    int slots_fast;     /* slots committed by global verification (0 when infilled) */
    int slots_infilled; /* slots committed by parallel infilling */
    int infill_iters;   /* draft+verify iterations (0 on the fast path) */
    int refeeds;        /* ar_correct: calls that only re-feed a row's tail whose K/V predate a
                           replaced token (0 or 1) */
    int tokens;         /* answer tokens committed */
    int calls;          /* model calls */
    double tpf_ref;     /* the paper's per-step TPF term (rf_stats.tpf is their mean) */
} rf_step;

typedef struct {
    int n_tokens;    /* answer tokens (as returned) */
    int hit_eos;     /* the answer ends with EOS */
    int n_calls;     /* model calls (the prompt's prefill counts once) */
    double seconds;  /* wall time */
    /* since 0.2 */
    double tpf;             /* tokens per forward as the paper defines it (mean over steps) */
    double tokens_per_call; /* n_tokens / n_calls */
    double tokens_per_s;
    int n_steps;
    const rf_step *steps;   /* [n_steps]: held by the session until its next rf_generate */
    /* how each answer token got in (ReFusion; they sum to n_tokens) */
    int first_free, first_checked, first_replaced, verified, forced_draft, forced_ar;
    /* since 0.6 */
    const rf_token_logprob *logprobs; /* [n_tokens] with rf_params.logprobs (else NULL): held by the
                                         session until its next rf_generate */
} rf_stats;

/* A session: the KV cache and forward-pass buffers of one generation at a
 * time, kept and reused by every rf_generate on it (they grow only when a
 * request needs more than any before). Free it to release the memory. */
RF_API refusion_session *rf_session_new(const refusion_model *m);
RF_API void rf_session_free(refusion_session *s);
/* Bytes the session holds between generations. */
RF_API size_t rf_session_bytes(const refusion_session *s);

/* RF_OK when p and prompt suit the model (ids in the vocabulary, slot_size
 * >= 1, thresholds in [0, 1], prompt + answer within the context, ...),
 * else RF_ERR_INVALID with the reason: what rf_generate checks first. */
RF_API int rf_params_check(const refusion_model *m, const int32_t *prompt, int n_prompt, const rf_params *p);

/* Bytes a generation with p for a prompt of n_prompt tokens allocates (KV
 * cache, activations, logits; computed, not measured), for a server's
 * per-request memory limit. p should pass rf_params_check. RF_ERR_INVALID
 * on bad arguments. */
RF_API int64_t rf_generate_bytes(const refusion_model *m, int n_prompt, const rf_params *p);

/* Generate an answer to prompt ids. Writes at most cap ids to out; returns
 * the answer's length (more than cap: the rest was dropped), or a negative
 * rf_status. stats may be NULL. */
RF_API int rf_generate(refusion_session *s, const int32_t *prompt, int n_prompt, const rf_params *p,
                       int32_t *out, int cap, rf_stats *stats);

/* ---- grammars (docs/grammar.md) ----------------------------------------------
 * A GBNF grammar (llama.cpp's format, start symbol root) or a JSON schema
 * (the supported keywords are listed in docs/grammar.md; any other is
 * refused naming it) over t's vocabulary, for rf_params.constraint. NULL
 * with rf_last_error() saying what and where. Free with rf_constraint_free
 * after the generations using it. Since 0.6. */
RF_API rf_constraint *rf_constraint_gbnf(const refusion_tokenizer *t, const char *gbnf);
RF_API rf_constraint *rf_constraint_json_schema(const refusion_tokenizer *t, const char *schema_json);
RF_API void rf_constraint_free(rf_constraint *c);

/* ---- tool calls (OpenAI's "tools", as `refusion serve` takes them; docs/api.md) --
 * The server's tool calling as a library: the chat with the tools rendered
 * by the template, the grammar of a call, and the answer's calls parsed.
 * A call is Qwen3's text <tool_call>\n{"name": NAME, "arguments": {...}}\n
 * </tool_call>. JSON in and out is UTF-8 text. Since 0.6. */

/* Token ids of a conversation in OpenAI's JSON: messages_json an array of
 * {"role", "content"} (roles system, developer: rendered as system, user,
 * assistant - with "tool_calls", rendered as the calls' text - and tool;
 * content a string or [{"type": "text", "text"}] parts), tools_json NULL or
 * an array of {"type": "function", "function": {"name", "description",
 * "parameters"}} that the chat template renders (Qwen3's: in the system
 * turn; the built-in renderer refuses tools). With the generation prompt;
 * think = 0: enable_thinking=false. Returns like rf_tokenize; a bad message
 * or tool is RF_ERR_INVALID naming it ("messages"[1]: ...). */
RF_API int rf_tokenize_chat_json(const refusion_tokenizer *t, const char *messages_json, const char *tools_json,
                                 int think, int32_t *ids, int cap);

/* What tool_choice asks for (rf_constraint_tool_calls' return value). */
typedef enum {
    RF_TOOL_CHOICE_NONE = 0,     /* no tools, or "none": the answer is text */
    RF_TOOL_CHOICE_AUTO = 1,     /* "auto" (the default with tools): the model may write calls, no grammar */
    RF_TOOL_CHOICE_REQUIRED = 2, /* "required": the answer is one call of one of the tools */
    RF_TOOL_CHOICE_NAMED = 3,    /* {"type": "function", "function": {"name"}}: one call of that function */
} rf_tool_choice;
/* tools_json (NULL: none) and tool_choice_json (NULL: the default; a JSON
 * string such as "\"required\"", or the named object) checked; returns an
 * rf_tool_choice, or RF_ERR_INVALID naming the tool or field at fault (a
 * bad name, parameters that are not a schema, a schema keyword that cannot
 * be enforced, a named function not in tools). For REQUIRED and NAMED,
 * *out (when out is not NULL; t needed then) is the grammar of the answer
 * for rf_params.constraint: one call whose arguments follow the function's
 * "parameters" schema (required with several tools: any of their names,
 * the arguments a JSON object); free it with rf_constraint_free. *out is
 * NULL for NONE and AUTO (text, or calls the model writes unconstrained). */
RF_API int rf_constraint_tool_calls(const refusion_tokenizer *t, const char *tools_json, const char *tool_choice_json,
                                    rf_constraint **out);

/* The tool calls in an answer's text, as JSON into buf (truncated to
 * cap - 1 bytes; returns the full length, or RF_ERR_INVALID):
 * {"content": the text around the calls (null when none), "tool_calls":
 * [{"id": id_prefix + index ("call_" when NULL), "type": "function",
 * "function": {"name", "arguments": the arguments as JSON text}}]}, or
 * {"content": text, "tool_calls": []} when it holds no well-formed call -
 * OpenAI's message fields. */
RF_API int rf_tool_calls_parse_json(const char *text, const char *id_prefix, char *buf, int cap);

/* The OpenMP threads of the generations the calling thread runs: n > 0 sets
 * them (for this thread only: others keep theirs, as OpenMP's
 * omp_set_num_threads), n <= 0 changes nothing. Returns the number now in
 * effect on this thread. Since 0.5. */
RF_API int rf_set_threads(int n);

/* ---- struct layouts, for bindings ------------------------------------------------
 * The fields of rf_params and rf_stats as this library lays them out, for a
 * binding that declares the structs itself (python/refusion builds its
 * ctypes structures from them instead of keeping a copy). Since 0.4. */
typedef enum {
    RF_FIELD_INT = 0,    /* int, or an enum stored as an int */
    RF_FIELD_FLOAT = 1,  /* float */
    RF_FIELD_DOUBLE = 2, /* double */
    RF_FIELD_U64 = 3,    /* uint64_t */
    RF_FIELD_PTR = 4,    /* a data or function pointer */
} rf_field_kind;
typedef struct {
    const char *name; /* NULL ends the table */
    rf_field_kind kind;
    size_t offset;
} rf_field;
/* Every field in order of offset; *size (when size is not NULL): sizeof
 * the struct. */
RF_API const rf_field *rf_params_fields(size_t *size);
RF_API const rf_field *rf_stats_fields(size_t *size);

/* ---- logging ----------------------------------------------------------------
 * What the library has to say beyond an error return (progress of long
 * jobs such as tokenizer training) goes to one process-wide callback; none
 * is set at start, and then nothing is said. Set it before using the
 * library from several threads; cb may be called from any of them. */
typedef enum {
    RF_LOG_ERROR = 0,
    RF_LOG_WARN = 1,
    RF_LOG_INFO = 2,
    RF_LOG_DEBUG = 3,
} rf_log_level;
typedef void (*rf_log_callback)(rf_log_level level, const char *text, void *user);
/* Since 0.3. cb NULL: say nothing. text is one line without its newline. */
RF_API void rf_log_set(rf_log_callback cb, void *user);

#ifdef __cplusplus
}
#endif

#endif
