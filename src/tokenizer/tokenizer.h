/* tokenizer.h - byte-level BPE tokenizer read from a Hugging Face
 * tokenizer.json (Qwen3's, or a small one trained by this project) or the
 * slow vocab.json + merges.txt layout, chat templates (the model's Jinja
 * template or the built-in Qwen3 one), and a streaming decoder. */
#ifndef RF_TOKENIZER_H
#define RF_TOKENIZER_H

#include <stddef.h>

typedef struct rf_tokenizer rf_tokenizer;
/* bytes [start, end) of a text */
typedef struct {
    size_t start, end;
} rf_text_span;

/* path: a tokenizer.json file or a model directory holding tokenizer.json
 * or the slow layout (vocab.json + merges.txt + added_tokens.json and / or
 * tokenizer_config.json's added_tokens_decoder), and optionally
 * tokenizer_config.json (eos, special tokens, chat template) and
 * chat_template.jinja. <|beginoftext|> and <|mask|> are added when the file lacks them
 * (ids 151669 / 151670 for the Qwen3 vocabulary, else the next free ids).
 * NULL on error with rf_last_error() set. */
rf_tokenizer *rf_tok_load(const char *path);
/* tokenizer.json files larger than this are refused unread (Qwen3's is 11 MB) */
#define RF_TOKENIZER_JSON_MAX (128u << 20)
void rf_tok_free(rf_tokenizer *t);
/* A GGUF file (llama.cpp's tokenizer.ggml.* metadata: gpt2 model, qwen2 or
 * gpt2 pre-tokenizer) also works as path: rf_tok_load reads it with
 * rf_tok_load_gguf. rf_tok_is_gguf: 1 if path is a file starting "GGUF". */
rf_tokenizer *rf_tok_load_gguf(const char *path);
int rf_tok_is_gguf(const char *path);
/* 1 if a model path (checkpoint directory or .gguf) carries a tokenizer:
 * DIR/tokenizer.json, DIR/vocab.json + merges.txt, or tokenizer.ggml.tokens
 * in the GGUF file. */
int rf_tok_model_has_tokenizer(const char *model_path);
/* THE rule for where a tokenizer's files are. path: a tokenizer.json or a
 * directory (a checkpoint) holding one; *json = that tokenizer.json, *cfg =
 * the tokenizer_config.json beside it (which may not exist). Both malloc'd. */
void rf_tok_files(const char *path, char **json, char **cfg);
/* The tokenizer a program uses with a model: override (a --tokenizer
 * option: file, directory or GGUF) when non-NULL, else the model's own
 * (rf_tok_model_has_tokenizer). NULL + "<model>: no tokenizer (...)". */
rf_tokenizer *rf_tok_for_model(const char *model_path, const char *override);
/* Add the tokenizer.ggml.* metadata (tokens padded with unused "[PAD<i>]"
 * entries to the model's n_vocab, types, merges, pre-tokenizer, chat
 * template) to a GGUF writer. -1 if llama.cpp could not reproduce this
 * tokenizer (a pre-tokenizer other than Qwen2's or GPT-2's). */
struct rf_gguf_writer;
int rf_tok_gguf_add(const rf_tokenizer *t, struct rf_gguf_writer *w, int n_vocab);

/* Encode UTF-8 text (special/added tokens in the text are matched as such).
 * *ids is malloc'd. -1 on invalid UTF-8 (error names the byte offset). */
int rf_tok_encode(const rf_tokenizer *t, const char *text, size_t len, int **ids, int *n_ids);
/* rf_tok_encode where the spans (sorted, apart) are plain text: a special
 * token is matched only where none of it lies in a span (the other added
 * tokens, <think> and the like, are matched everywhere, as llama.cpp and
 * transformers do when special tokens are not parsed). */
int rf_tok_encode_spans(const rf_tokenizer *t, const char *text, size_t len, const rf_text_span *spans,
                        size_t n_spans, int **ids, int *n_ids);
/* Whether the text of a conversation (message contents, tool results, ...)
 * may hold special tokens: 0 by default, so that a user's "<|im_end|>" is
 * text and cannot end its turn; 1 parses them as tokenizers did before
 * (rf_chat_query_ids and the API's chat calls follow this setting). */
void rf_tok_set_special_in_content(rf_tokenizer *t, int on);
int rf_tok_special_in_content(const rf_tokenizer *t);
/* Decode ids to a malloc'd UTF-8 string; skip_special drops special tokens.
 * NULL if an id is out of range. */
char *rf_tok_decode(const rf_tokenizer *t, const int *ids, int n, int skip_special);
/* The raw bytes a token stands for (*n of them; a piece of a UTF-8
 * character stays a piece), NULL for an id outside the vocabulary. */
const char *rf_tok_bytes(const rf_tokenizer *t, int id, int *n);

/* 0 if s[0..n) is valid UTF-8, else -1 with *bad = offset of the first bad byte. */
int rf_utf8_check(const char *s, size_t n, size_t *bad);

int rf_tok_vocab_size(const rf_tokenizer *t);      /* largest id + 1 */
int rf_tok_id(const rf_tokenizer *t, const char *token); /* -1 if unknown */
const char *rf_tok_piece(const rf_tokenizer *t, int id); /* raw vocab string */
int rf_tok_is_special(const rf_tokenizer *t, int id);
int rf_tok_eos_id(const rf_tokenizer *t);   /* tokenizer_config eos, e.g. <|im_end|> */
int rf_tok_mask_id(const rf_tokenizer *t);  /* <|mask|> */

/* ---- chat templates ----
 * A tokenizer carries the model's Jinja chat template when it has one: the
 * checkpoint's chat_template.jinja, else tokenizer_config.json's
 * chat_template (a string, or the "default" of a named list), or a GGUF
 * file's tokenizer.chat_template. It is rendered by tokenizer/jinja.c as
 * transformers' apply_chat_template renders it. Without one (or after
 * rf_tok_set_chat_template(t, "builtin")) the built-in renderer of Qwen3's
 * template for plain conversations (chat.c) is used. */
#define RF_CHAT_TEMPLATE_MAX (1u << 20) /* template files larger than this are refused */
/* spec: "builtin", or a Jinja template file that replaces the model's
 * (checked for syntax errors now). 0, or -1 with the error set. */
int rf_tok_set_chat_template(rf_tokenizer *t, const char *spec);
/* The Jinja source in use, NULL when the built-in renderer is. */
const char *rf_tok_chat_template(const rf_tokenizer *t);
/* 0 when the template in use renders at least one plain conversation (a
 * user turn; a system and a user turn; user, assistant, user), else -1 with
 * the error of the first: a template that can render nothing is reported
 * when a program loads it, not at each request. */
int rf_tok_check_chat_template(const rf_tokenizer *t);

struct json_t;
/* The prompt for a conversation: conv is a JSON array of messages (objects
 * with role, content and whatever else the template reads: tool_calls,
 * reasoning_content, ...), or an object with "messages" and more template
 * variables (tools, documents, enable_thinking, ... - they override the
 * defaults). The template sees messages, tools = None, documents = None,
 * add_generation_prompt, the tokenizer config's special tokens (bos_token,
 * eos_token, ...), and enable_thinking = false when enable_thinking is 0
 * (1 leaves it undefined: the template's default). malloc'd text, or NULL
 * with one line in rf_last_error(). t may be NULL (the built-in renderer). */
char *rf_chat_render(const rf_tokenizer *t, const struct json_t *conv, int add_generation_prompt,
                     int enable_thinking);

/* rf_chat_render, with the byte ranges of the text that came from the
 * conversation (its strings, through the template) in *spans (malloc'd,
 * sorted, apart; NULL when none), for rf_tok_encode_spans. */
char *rf_chat_render_spans(const rf_tokenizer *t, const struct json_t *conv, int add_generation_prompt,
                           int enable_thinking, rf_text_span **spans, size_t *n_spans);

typedef struct {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content;
} rf_chat_msg;
/* rf_chat_render of plain role / content messages. */
char *rf_chat_apply(const rf_tokenizer *t, const rf_chat_msg *msgs, int n,
                    int add_generation_prompt, int enable_thinking);
char *rf_chat_apply_spans(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                          int enable_thinking, rf_text_span **spans, size_t *n_spans);
/* The prompt's ids: special-token text in the messages is plain text unless
 * parse_special. 0, or -1 with the error set. */
int rf_chat_apply_ids(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                      int enable_thinking, int parse_special, int **ids, int *n_ids);

/* The prompt of one task query, the one rule training and evaluation share:
 * the chat template of a single user message with the generation prompt
 * and the template's default thinking setting (which adds nothing after the
 * generation prompt: what the reference trainer's
 * apply_chat_template(add_generation_prompt=True) produces). The text
 * (malloc'd), or its token ids (0, or -1 with the error set). */
char *rf_chat_query(const rf_tokenizer *t, const char *query);
int rf_chat_query_ids(const rf_tokenizer *t, const char *query, int **ids, int *n);

/* ---- streaming decode: feed ids one by one, get back the text that is now
 * final; bytes of an incomplete UTF-8 sequence are held back. ---- */
typedef struct rf_tok_stream rf_tok_stream;
rf_tok_stream *rf_tok_stream_new(const rf_tokenizer *t, int skip_special);
/* Returns a pointer to a NUL-terminated chunk valid until the next call
 * (NULL if id is out of range). */
const char *rf_tok_stream_put(rf_tok_stream *s, int id);
const char *rf_tok_stream_flush(rf_tok_stream *s);
void rf_tok_stream_free(rf_tok_stream *s);

/* ---- training a small byte-level BPE ----
 * Learns merges on text (UTF-8) with Qwen's pre-tokenizer and writes
 * out_dir/tokenizer.json + tokenizer_config.json (eos <|im_end|>, a chat
 * template that renders like rf_chat_apply). vocab_size counts everything:
 * 256 byte tokens + merges + <|endoftext|> <|im_start|> <|im_end|>
 * <|beginoftext|> <|mask|> (special) + <think> </think>. Fewer merges are
 * learned if no pair occurs twice any more. */
int rf_tok_train(const char *text, size_t len, int vocab_size, const char *out_dir, int verbose);

#endif
