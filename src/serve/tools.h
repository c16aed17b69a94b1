/* tools.h - OpenAI tool calling in the chat endpoint (tools.c, over the
 * library's src/api/tools.c). */
#ifndef RF_SERVE_TOOLS_H
#define RF_SERVE_TOOLS_H

#include <jansson.h>

#include "serve/serve.h"

/* "tools", "tool_choice", "parallel_tool_calls" of a request body into
 * r->tools (the template renders them), r->tool_choice and, for a required
 * or named call, r->tool_gbnf: the grammar of the answer (rf_tools_parse).
 * 0, or -1 with the error and r->err_param set. */
int rf_serve_parse_tools(json_t *o, rf_serve_req *r);

/* rf_tool_calls_parse with the ids of a job's choice: call_<job>_<choice>_<i>. */
json_t *rf_serve_tool_calls(const char *text, const char *job_id, int choice, char **content);

#endif
