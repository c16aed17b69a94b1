/* tools.c - OpenAI tool calling in the chat endpoint: "tools" and
 * "tool_choice" checked, the grammar that makes a required or named call
 * the answer, and the model's <tool_call> blocks parsed into "tool_calls".
 *
 * Qwen3's chat template (the format these models are trained on) renders
 * the tools in the system turn and a call as
 *     <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * so that is the text a call is, in both directions. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/json_schema.h"
#include "serve/serve.h"
#include "serve/tools.h"
#include "util/util.h"

#define CALL_OPEN "<tool_call>"
#define CALL_CLOSE "</tool_call>"

/* a function name as OpenAI allows it: [A-Za-z0-9_-]{1,64} */
static int good_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/* GBNF of one call of the function named name: its arguments follow
 * params (a JSON schema; NULL: any JSON object). malloc'd, or NULL with the
 * schema's error. */
static char *call_gbnf(const char *name, const json_t *params) {
    char *schema = params ? rf_json_schema_to_gbnf(params) : rf_strdup(rf_json_object_gbnf());
    if (!schema) return NULL;
    /* the schema grammar's first line is "root ::= <its start>": the call
     * wraps that start */
    char *nl = strchr(schema, '\n');
    const char *start = schema + strlen("root ::= ");
    if (!nl || strncmp(schema, "root ::= ", 9)) {
        free(schema);
        rf_set_error("internal: a schema grammar without its root line");
        return NULL;
    }
    *nl = 0;
    size_t cap = strlen(name) + strlen(start) + strlen(nl + 1) + 128;
    char *g = rf_malloc(cap);
    snprintf(g, cap, "root ::= \"" CALL_OPEN "\\n{\\\"name\\\": \\\"%s\\\", \\\"arguments\\\": \" %s \"}\\n" CALL_CLOSE
                     "\"\n%s",
             name, start, nl + 1);
    free(schema);
    return g;
}

/* GBNF of one call of any of the functions: the name one of theirs, the
 * arguments a JSON object */
static char *any_call_gbnf(json_t *tools) {
    size_t cap = 256, i;
    json_t *t;
    json_array_foreach(tools, i, t) cap += strlen(json_string_value(json_object_get(json_object_get(t, "function"),
                                                                                      "name"))) + 8;
    char *alts = rf_malloc(cap), *p = alts;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        p += sprintf(p, "%s\"%s\"", i ? " | " : "", name);
    }
    const char *obj = rf_json_object_gbnf(); /* "root ::= object\n" + the JSON rules */
    const char *rules = strchr(obj, '\n') + 1;
    size_t n = strlen(alts) + strlen(rules) + 128;
    char *g = rf_malloc(n);
    snprintf(g, n, "root ::= \"" CALL_OPEN "\\n{\\\"name\\\": \\\"\" (%s) \"\\\", \\\"arguments\\\": \" object \"}\\n" CALL_CLOSE
                   "\"\n%s",
             alts, rules);
    free(alts);
    return g;
}

#define FAIL(param, ...) do { snprintf(r->err_param, sizeof r->err_param, "%s", param); \
        rf_set_error(__VA_ARGS__); return -1; } while (0)

int rf_serve_parse_tools(json_t *o, rf_serve_req *r) {
    json_t *tools = json_object_get(o, "tools"), *choice = json_object_get(o, "tool_choice"), *t;
    json_t *ptc = json_object_get(o, "parallel_tool_calls");
    if (json_is_null(tools)) tools = NULL;
    if (json_is_null(choice)) choice = NULL;
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc))
        FAIL("parallel_tool_calls", "\"parallel_tool_calls\" must be true or false");
    if (tools && r->kind != RF_REQ_CHAT) FAIL("tools", "\"tools\" is a chat field (/v1/chat/completions)");
    if (tools && !json_is_array(tools))
        FAIL("tools", "\"tools\" must be an array of {\"type\": \"function\", \"function\": {...}}");
    if (tools && json_array_size(tools) == 0) tools = NULL;
    size_t i;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *params = json_object_get(fn, "parameters");
        char where[48];
        snprintf(where, sizeof where, "tools[%zu]", i);
        if (!type || strcmp(type, "function") || !json_is_object(fn))
            FAIL(where, "\"tools\"[%zu] must be {\"type\": \"function\", \"function\": {\"name\", ...}}", i);
        if (!good_name(json_string_value(json_object_get(fn, "name"))))
            FAIL(where, "\"tools\"[%zu].function.name must be 1 to 64 letters, digits, '_' or '-'", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            FAIL(where, "\"tools\"[%zu].function.parameters must be a JSON schema object", i);
    }
    r->tool_choice = tools ? RF_TOOLS_AUTO : RF_TOOLS_NONE;
    const char *named = NULL;
    if (choice) {
        const char *c = json_string_value(choice);
        if (c && !strcmp(c, "none")) r->tool_choice = RF_TOOLS_NONE;
        else if (c && !strcmp(c, "auto")) r->tool_choice = tools ? RF_TOOLS_AUTO : RF_TOOLS_NONE;
        else if (c && !strcmp(c, "required")) r->tool_choice = RF_TOOLS_REQUIRED;
        else if (json_is_object(choice) && (named = json_string_value(json_object_get(json_object_get(choice, "function"),
                                                                                       "name"))))
            r->tool_choice = RF_TOOLS_NAMED;
        else
            FAIL("tool_choice", "\"tool_choice\" must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                "\"function\": {\"name\": ...}}");
        if (r->tool_choice >= RF_TOOLS_REQUIRED && !tools)
            FAIL("tool_choice", "\"tool_choice\" asks for a tool call, and the request has no \"tools\"");
    }
    json_t *pick = NULL;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (named && !strcmp(name, named)) pick = t;
    }
    if (named && !pick) FAIL("tool_choice", "\"tool_choice\" names \"%.64s\", which is not one of \"tools\"", named);
    if (r->tool_choice == RF_TOOLS_REQUIRED && json_array_size(tools) == 1) pick = json_array_get(tools, 0);
    r->tools = tools ? json_incref(tools) : NULL;
    if (r->tool_choice < RF_TOOLS_REQUIRED) return 0;
    if (pick) {
        json_t *fn = json_object_get(pick, "function"), *params = json_object_get(fn, "parameters");
        r->tool_gbnf = call_gbnf(json_string_value(json_object_get(fn, "name")), json_is_object(params) ? params : NULL);
    } else {
        r->tool_gbnf = any_call_gbnf(tools);
    }
    if (!r->tool_gbnf) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rf_last_error());
        r->err_unsupported = strstr(msg, "not supported") || strstr(msg, "not enforced");
        FAIL("tools", "the function's parameters: %s", msg);
    }
    return 0;
}

/* One <tool_call> block's JSON: {"name": string, "arguments": object} ->
 * an OpenAI tool call, or NULL when it is not one. */
static json_t *tool_call(const char *text, size_t len, const char *id) {
    json_t *o = json_loadb(text, len, 0, NULL);
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *args = json_object_get(o, "arguments");
    json_t *call = NULL;
    if (name && json_is_object(args)) {
        char *a = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (a)
            call = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", name,
                             "arguments", a);
        free(a);
    }
    json_decref(o);
    return call;
}

json_t *rf_tool_calls_parse(const char *text, const char *job_id, int choice, char **content) {
    json_t *calls = json_array();
    size_t len = strlen(text), out = 0;
    char *rest = rf_malloc(len + 1);
    const char *p = text;
    for (;;) {
        const char *open = strstr(p, CALL_OPEN), *close = open ? strstr(open, CALL_CLOSE) : NULL;
        json_t *call = NULL;
        if (close) {
            char id[96];
            snprintf(id, sizeof id, "call_%s_%d_%zu", job_id, choice, json_array_size(calls));
            const char *body = open + strlen(CALL_OPEN);
            call = tool_call(body, (size_t)(close - body), id);
        }
        const char *upto = call ? open : text + len;
        memcpy(rest + out, p, (size_t)(upto - p));
        out += (size_t)(upto - p);
        if (!call) break;
        json_array_append_new(calls, call);
        p = close + strlen(CALL_CLOSE);
    }
    rest[out] = 0;
    if (!json_array_size(calls)) {
        json_decref(calls);
        free(rest);
        *content = NULL;
        return NULL;
    }
    /* the text around the calls, without the blank lines that separated them */
    size_t a = 0, b = out;
    while (a < b && strchr(" \n\r\t", rest[a])) a++;
    while (b > a && strchr(" \n\r\t", rest[b - 1])) b--;
    memmove(rest, rest + a, b - a);
    rest[b - a] = 0;
    *content = rest;
    return calls;
}
