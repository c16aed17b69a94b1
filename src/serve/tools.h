/* tools.h - OpenAI tool calling in the chat endpoint (tools.c). */
#ifndef RF_SERVE_TOOLS_H
#define RF_SERVE_TOOLS_H

#include <jansson.h>

#include "serve/serve.h"

/* "tools", "tool_choice", "parallel_tool_calls" of a request body into
 * r->tools (the template renders them), r->tool_choice and, for a required
 * or named call, r->tool_gbnf: the grammar of the answer (one call; its
 * arguments follow the function's "parameters" schema when one function
 * can be called, else they are a JSON object). 0, or -1 with the error and
 * r->err_param set. */
int rf_serve_parse_tools(json_t *o, rf_serve_req *r);

/* The <tool_call>{"name", "arguments"}</tool_call> blocks of an answer's
 * text as OpenAI's "tool_calls" [{"id", "type": "function", "function":
 * {"name", "arguments": JSON text}}] (ids from the job's id and the
 * choice), *content: the text around them (malloc'd, "" when none). NULL
 * when the text holds no well-formed call (*content NULL). */
json_t *rf_tool_calls_parse(const char *text, const char *job_id, int choice, char **content);

#endif
