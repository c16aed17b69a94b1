/* tools.c - OpenAI tool calling in the chat endpoint: the request's
 * "tools", "tool_choice" and "parallel_tool_calls" read with the library's
 * tool calling (src/api/tools.c: the checks, the call's grammar, the
 * rendering and the parsing of calls, shared with the public API). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "api/tools.h"
#include "serve/serve.h"
#include "serve/tools.h"
#include "util/util.h"

int rf_serve_parse_tools(json_t *o, rf_serve_req *r) {
    json_t *tools = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice");
    json_t *ptc = json_object_get(o, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) {
        snprintf(r->err_param, sizeof r->err_param, "parallel_tool_calls");
        rf_set_error("\"parallel_tool_calls\" must be true or false");
        return -1;
    }
    if (tools && !json_is_null(tools) && r->kind != RF_REQ_CHAT) {
        snprintf(r->err_param, sizeof r->err_param, "tools");
        rf_set_error("\"tools\" is a chat field (/v1/chat/completions)");
        return -1;
    }
    json_t *use = NULL;
    if (rf_tools_parse(tools, choice, &r->tool_choice, &use, &r->tool_gbnf, r->err_param, sizeof r->err_param,
                       &r->err_unsupported))
        return -1;
    r->tools = use ? json_incref(use) : NULL;
    return 0;
}

json_t *rf_serve_tool_calls(const char *text, const char *job_id, int choice, char **content) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "call_%.64s_%d_", job_id, choice);
    return rf_tool_calls_parse(text, prefix, content);
}
