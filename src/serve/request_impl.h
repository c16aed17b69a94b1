/* request_impl.h - what the request parser's files share: request.c (the
 * body, its settings and checks) and prompt.c (its prompt as token ids). */
#ifndef RF_SERVE_REQUEST_IMPL_H
#define RF_SERVE_REQUEST_IMPL_H

#include <jansson.h>

#include "serve/serve.h"

/* the field the error names (r->err_param), cut to fit */
#define set_param(r, key) rf_serve_utf8_cut((r)->err_param, sizeof(r)->err_param, key)

/* The field's value, or NULL when it is absent or null. */
json_t *rf_req_field(json_t *o, const char *key);
/* A boolean field into *out: 1 set, 0 absent (out unchanged), -1 not a
 * boolean (rf_last_error() names it). */
int rf_req_bool(json_t *o, const char *key, int *out);

/* "prompt": "text" | ["text"] | [id, id, ...] into r->prompt: 0, or -1
 * with rf_last_error() (r->err_code, r->err_param where they apply). */
int rf_req_prompt(json_t *o, const rf_tokenizer *tok, rf_serve_req *r);
/* "messages": [{"role", "content"}, ...] rendered with the model's chat
 * template, ready for the assistant's turn, into r->prompt (the text in
 * r->prompt_text). Roles: system, developer (the newer OpenAI name:
 * rendered as system), user, assistant (with its tool_calls), tool (the
 * template renders it: Qwen3's groups consecutive tool answers into one
 * user turn of <tool_response> blocks). */
int rf_req_messages(json_t *o, const rf_tokenizer *tok, rf_serve_req *r);

#endif
