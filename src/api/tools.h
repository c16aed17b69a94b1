/* tools.h - OpenAI tool calling (tools.c), one implementation for the
 * public API (rf_tokenize_chat_json, rf_constraint_tool_calls,
 * rf_tool_calls_parse_json) and the server (src/serve), which adds its
 * request's field names and OpenAI's error codes. */
#ifndef RF_API_TOOLS_H
#define RF_API_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* "tools" and "tool_choice" (either may be NULL or JSON null) checked: into
 * *mode an rf_tool_choice (RF_TOOL_CHOICE_*), *tools_out the tools the
 * template renders (borrowed from tools; NULL when none or empty) and, for
 * a required or named call, *gbnf the grammar of the answer (one call; its
 * arguments follow the function's "parameters" schema when one function
 * can be called, else they are a JSON object; malloc'd, else NULL). 0, or
 * -1 with the error set, err_param the field at fault ("tools[2]",
 * "tool_choice") and *unsupported 1 when a schema keyword cannot be
 * enforced. */
int rf_tools_parse(json_t *tools, json_t *choice, int *mode, json_t **tools_out, char **gbnf, char *err_param,
                   size_t err_cap, int *unsupported);

/* The <tool_call>{"name", "arguments"}</tool_call> blocks of an answer's
 * text as OpenAI's "tool_calls" [{"id", "type": "function", "function":
 * {"name", "arguments": JSON text}}] (ids: id_prefix and the call's index),
 * *content: the text around them (malloc'd, "" when none). NULL when the
 * text holds no well-formed call (*content NULL). */
json_t *rf_tool_calls_parse(const char *text, const char *id_prefix, char **content);

/* OpenAI's "messages" (system, developer: rendered as system, user,
 * assistant with its "tool_calls", tool; content a string or text parts)
 * and the "tools" (NULL: none) rendered by the chat template with the
 * generation prompt, as rf_chat_render_spans. malloc'd text, or NULL with
 * the error set and err_param the field at fault ("messages[1].role"). */
char *rf_chat_render_openai(const rf_tokenizer *tok, json_t *messages, json_t *tools, int think,
                            rf_text_span **spans, size_t *n_spans, char *err_param, size_t err_cap);

#endif
