/* tools.c - OpenAI tool calling, shared by the public API and the server:
 * "tools" and "tool_choice" checked, the grammar that makes a required or
 * named call the answer, OpenAI's messages (tool results, assistant turns
 * with their calls) rendered with the tools by the chat template, and the
 * model's <tool_call> blocks parsed into "tool_calls".
 *
 * Qwen3's chat template (the format these models are trained on) renders
 * the tools in the system turn and a call as
 *     <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * so that is the text a call is, in both directions. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "refusion.h"
#include "api/tools.h"
#include "grammar/constraint.h"
#include "grammar/json_schema.h"
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

#define FAIL(param, ...) do { snprintf(err_param, err_cap, "%s", param); \
        rf_set_error(__VA_ARGS__); return -1; } while (0)

int rf_tools_parse(json_t *tools, json_t *choice, int *mode, json_t **tools_out, char **gbnf, char *err_param,
                   size_t err_cap, int *unsupported) {
    json_t *t;
    *mode = RF_TOOL_CHOICE_NONE, *tools_out = NULL, *gbnf = NULL, *unsupported = 0;
    if (err_cap) err_param[0] = 0;
    if (json_is_null(tools)) tools = NULL;
    if (json_is_null(choice)) choice = NULL;
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
    int m = tools ? RF_TOOL_CHOICE_AUTO : RF_TOOL_CHOICE_NONE;
    const char *named = NULL;
    if (choice) {
        const char *c = json_string_value(choice);
        if (c && !strcmp(c, "none")) m = RF_TOOL_CHOICE_NONE;
        else if (c && !strcmp(c, "auto")) m = tools ? RF_TOOL_CHOICE_AUTO : RF_TOOL_CHOICE_NONE;
        else if (c && !strcmp(c, "required")) m = RF_TOOL_CHOICE_REQUIRED;
        else if (json_is_object(choice) && (named = json_string_value(json_object_get(json_object_get(choice, "function"),
                                                                                       "name"))))
            m = RF_TOOL_CHOICE_NAMED;
        else
            FAIL("tool_choice", "\"tool_choice\" must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                "\"function\": {\"name\": ...}}");
        if (m >= RF_TOOL_CHOICE_REQUIRED && !tools)
            FAIL("tool_choice", "\"tool_choice\" asks for a tool call, and there are no \"tools\"");
    }
    json_t *pick = NULL;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (named && !strcmp(name, named)) pick = t;
    }
    if (named && !pick) FAIL("tool_choice", "\"tool_choice\" names \"%.64s\", which is not one of \"tools\"", named);
    if (m == RF_TOOL_CHOICE_REQUIRED && json_array_size(tools) == 1) pick = json_array_get(tools, 0);
    char *g = NULL;
    if (m >= RF_TOOL_CHOICE_REQUIRED) {
        if (pick) {
            json_t *fn = json_object_get(pick, "function"), *params = json_object_get(fn, "parameters");
            g = call_gbnf(json_string_value(json_object_get(fn, "name")), json_is_object(params) ? params : NULL);
        } else {
            g = any_call_gbnf(tools);
        }
        if (!g) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", rf_last_error());
            *unsupported = strstr(msg, "not supported") || strstr(msg, "not enforced");
            FAIL("tools", "the function's parameters: %s", msg);
        }
    }
    *mode = m, *tools_out = tools, *gbnf = g;
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

json_t *rf_tool_calls_parse(const char *text, const char *id_prefix, char **content) {
    json_t *calls = json_array();
    size_t len = strlen(text), out = 0;
    char *rest = rf_malloc(len + 1);
    const char *p = text;
    for (;;) {
        const char *open = strstr(p, CALL_OPEN), *close = open ? strstr(open, CALL_CLOSE) : NULL;
        json_t *call = NULL;
        if (close) {
            char id[96];
            snprintf(id, sizeof id, "%.80s%zu", id_prefix, json_array_size(calls));
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

/* A message's content: a string, or a list of text parts
 * [{"type": "text", "text": "..."}, ...] joined with newlines. malloc'd;
 * NULL with rf_last_error() on anything else. */
static char *message_text(json_t *c, size_t i) {
    if (json_is_string(c)) return rf_strdup(json_string_value(c));
    if (!json_is_array(c)) {
        rf_set_error("\"messages\"[%zu]: \"content\" must be a string or an array of text parts", i);
        return NULL;
    }
    size_t n = json_array_size(c), len = 0, j;
    json_t *part;
    json_array_foreach(c, j, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!type || strcmp(type, "text") || !text) {
            rf_set_error("\"messages\"[%zu].content[%zu]: only {\"type\": \"text\", \"text\": string} parts are "
                         "supported", i, j);
            return NULL;
        }
        len += strlen(text) + 1;
    }
    char *s = rf_malloc(len + 1), *p = s;
    json_array_foreach(c, j, part) {
        const char *text = json_string_value(json_object_get(part, "text"));
        size_t k = strlen(text);
        memcpy(p, text, k), p += k;
        if (j + 1 < n) *p++ = '\n';
    }
    *p = 0;
    return s;
}

/* An assistant turn's tool calls appended to its text as Qwen3's chat
 * template renders them: after the content (a newline between), each call
 * '<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>', calls
 * separated by a newline, ARGS as sent when a string (OpenAI sends the
 * arguments as JSON text) or else as the template's tojson writes it. So
 * the model's Jinja template and the built-in renderer render the turn
 * alike. malloc'd; NULL with rf_last_error() on a malformed call. */
static char *with_tool_calls(const char *content, json_t *calls, size_t i) {
    if (!json_is_array(calls) || json_array_size(calls) == 0) {
        rf_set_error("\"messages\"[%zu]: \"tool_calls\" must be a non-empty array", i);
        return NULL;
    }
    size_t j, len = strlen(content) + 1;
    json_t *call;
    char **args = rf_calloc(json_array_size(calls), sizeof *args);
    char *out = NULL;
    json_array_foreach(calls, j, call) {
        json_t *fn = json_object_get(call, "function");
        const char *type = json_string_value(json_object_get(call, "type"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        json_t *a = json_object_get(fn, "arguments");
        if ((type && strcmp(type, "function")) || !name || !a) {
            rf_set_error("\"messages\"[%zu].tool_calls[%zu] must be {\"type\": \"function\", \"function\": "
                         "{\"name\": string, \"arguments\": string}}", i, j);
            goto done;
        }
        /* Python's json.dumps separators (", ", ": "), non-ASCII kept */
        args[j] = json_is_string(a) ? rf_strdup(json_string_value(a)) : json_dumps(a, JSON_ENCODE_ANY);
        if (!args[j]) {
            rf_set_error("\"messages\"[%zu].tool_calls[%zu]: the arguments cannot be rendered", i, j);
            goto done;
        }
        len += strlen(name) + strlen(args[j]) + 64;
    }
    out = rf_malloc(len);
    char *p = out;
    p += sprintf(p, "%s", content);
    json_array_foreach(calls, j, call) {
        const char *name = json_string_value(json_object_get(json_object_get(call, "function"), "name"));
        if (j > 0 || *content) *p++ = '\n';
        p += sprintf(p, "<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>", name, args[j]);
    }
done:
    for (j = 0; j < json_array_size(calls); j++) free(args[j]);
    free(args);
    return out;
}

#define MFAIL(...) do { snprintf(err_param, err_cap, __VA_ARGS__); goto done; } while (0)

char *rf_chat_render_openai(const rf_tokenizer *tok, json_t *messages, json_t *tools, int think,
                            rf_text_span **spans, size_t *n_spans, char *err_param, size_t err_cap) {
    *spans = NULL, *n_spans = 0;
    if (err_cap) err_param[0] = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        snprintf(err_param, err_cap, "messages");
        rf_set_error("\"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
        return NULL;
    }
    size_t n = json_array_size(messages), i;
    rf_chat_msg *msgs = rf_calloc(n, sizeof *msgs);
    char **texts = rf_calloc(n, sizeof *texts);
    char *text = NULL;
    json_t *e;
    json_array_foreach(messages, i, e) {
        const char *role = json_string_value(json_object_get(e, "role"));
        json_t *content = json_object_get(e, "content"), *calls = json_object_get(e, "tool_calls");
        if (json_is_null(content)) content = NULL;
        if (json_is_null(calls)) calls = NULL;
        if (!json_is_object(e) || !role) {
            rf_set_error("\"messages\"[%zu] must be an object with a string \"role\" and a \"content\"", i);
            MFAIL("messages[%zu]", i);
        }
        if (calls && strcmp(role, "assistant")) {
            rf_set_error("\"messages\"[%zu]: only an assistant message may hold \"tool_calls\"", i);
            MFAIL("messages[%zu].tool_calls", i);
        }
        if (!content && !calls) {
            rf_set_error("\"messages\"[%zu] has no \"content\" (null content needs \"tool_calls\")", i);
            MFAIL("messages[%zu].content", i);
        }
        if (!(texts[i] = content ? message_text(content, i) : rf_strdup(""))) MFAIL("messages[%zu].content", i);
        if (calls) {
            char *t = with_tool_calls(texts[i], calls, i);
            free(texts[i]);
            if (!(texts[i] = t)) MFAIL("messages[%zu].tool_calls", i);
        }
        if (!strcmp(role, "developer")) role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            rf_set_error("\"messages\"[%zu]: role must be \"system\", \"developer\", \"user\", \"assistant\" or "
                         "\"tool\"", i);
            MFAIL("messages[%zu].role", i);
        }
        msgs[i].role = role, msgs[i].content = texts[i];
    }
    if (tools) { /* the template renders them (Qwen3's: in the system turn) */
        json_t *conv = json_pack("{s:[], s:O}", "messages", "tools", tools);
        for (i = 0; i < n; i++)
            json_array_append_new(json_object_get(conv, "messages"),
                                  json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content));
        text = rf_chat_render_spans(tok, conv, 1, think, spans, n_spans);
        json_decref(conv);
    } else {
        text = rf_chat_apply_spans(tok, msgs, (int)n, 1, think, spans, n_spans);
    }
done:
    for (i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(msgs);
    return text;
}

/* ---- the public API (include/refusion.h) ---------------------------------------- */
#include "api/api_internal.h"

/* text as JSON (NULL: none, not an error), or NULL with the error set and
 * *bad = 1 */
static json_t *load(const char *text, const char *what, int *bad) {
    if (!text) return NULL;
    json_error_t err;
    json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &err);
    if (!v) {
        for (char *c = err.text; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
        rf_set_error("%s: not JSON: %s (line %d, column %d)", what, err.text, err.line, err.column);
        *bad = 1;
    }
    return v;
}

RF_API int rf_tokenize_chat_json(const refusion_tokenizer *t, const char *messages_json, const char *tools_json,
                                 int think, int32_t *ids, int cap) {
    if (!t || !messages_json || cap < 0 || (cap > 0 && !ids)) {
        rf_set_error("rf_tokenize_chat_json: bad arguments");
        return RF_ERR_INVALID;
    }
    const rf_tokenizer *tok = rf_api_tokenizer(t);
    json_t *volatile msgs = NULL, *volatile tools = NULL;
    char *volatile text = NULL;
    rf_text_span *volatile sp = NULL;
    int *volatile v = NULL;
    volatile int rc = RF_ERR_INVALID, n = 0;
    CATCH_DIE(json_decref(msgs); json_decref(tools); free(text); free(sp); free(v); return DIED);
    int bad = 0;
    msgs = load(messages_json, "messages", &bad);
    tools = load(tools_json, "tools", &bad);
    json_t *use = NULL;
    char *g = NULL, param[64];
    int mode, unsupported;
    if (!bad && !rf_tools_parse(tools, NULL, &mode, &use, &g, param, sizeof param, &unsupported)) {
        rf_text_span *spans = NULL;
        size_t nsp = 0;
        text = rf_chat_render_openai(tok, msgs, use, think, &spans, &nsp, param, sizeof param);
        sp = spans;
        /* the messages' special-token text is text unless the tokenizer says otherwise */
        if (rf_tok_special_in_content(tok)) nsp = 0;
        int *out = NULL, nn = 0;
        if (text && !rf_tok_encode_spans(tok, text, strlen(text), sp, nsp, &out, &nn)) rc = 0;
        v = out, n = nn;
    }
    END_CATCH();
    if (rc == 0) {
        for (int i = 0; i < n && i < cap; i++) ids[i] = v[i];
        rc = n;
    }
    json_decref(msgs);
    json_decref(tools);
    free(text);
    free(sp);
    free(v);
    return rc;
}

RF_API int rf_constraint_tool_calls(const refusion_tokenizer *t, const char *tools_json, const char *tool_choice_json,
                                    rf_constraint **out) {
    if (out) *out = NULL;
    json_t *volatile tools = NULL, *volatile choice = NULL;
    char *volatile g = NULL;
    volatile int rc = RF_ERR_INVALID;
    CATCH_DIE(json_decref(tools); json_decref(choice); free(g); return DIED);
    int bad = 0;
    tools = load(tools_json, "tools", &bad);
    choice = load(tool_choice_json, "tool_choice", &bad);
    json_t *use;
    char *gbnf = NULL, param[64];
    int mode, unsupported;
    if (!bad && !rf_tools_parse(tools, choice, &mode, &use, &gbnf, param, sizeof param, &unsupported)) {
        g = gbnf;
        rc = mode;
        if (g && out) {
            if (!t) {
                rf_set_error("rf_constraint_tool_calls: a required or named tool call needs the tokenizer");
                rc = RF_ERR_INVALID;
            } else if (!(*out = rf_constraint_from_gbnf(rf_api_tokenizer(t), g, strlen(g)))) {
                rc = RF_ERR_INVALID;
            }
        }
    }
    END_CATCH();
    json_decref(tools);
    json_decref(choice);
    free(g);
    return rc;
}

RF_API int rf_tool_calls_parse_json(const char *text, const char *id_prefix, char *buf, int cap) {
    if (!text || cap < 0 || (cap > 0 && !buf)) {
        rf_set_error("rf_tool_calls_parse_json: bad arguments");
        return RF_ERR_INVALID;
    }
    json_t *volatile o = NULL;
    char *volatile s = NULL, *volatile content = NULL;
    CATCH_DIE(json_decref(o); free(s); free(content); return DIED);
    char *rest = NULL;
    json_t *calls = rf_tool_calls_parse(text, id_prefix ? id_prefix : "call_", &rest);
    content = rest;
    if (calls)
        o = json_pack("{s:o, s:o}", "content", *rest ? json_string(rest) : json_null(), "tool_calls", calls);
    else
        o = json_pack("{s:s, s:[]}", "content", text, "tool_calls");
    s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    END_CATCH();
    json_decref(o);
    free(content);
    if (!s) {
        rf_set_error("rf_tool_calls_parse_json: the text is not UTF-8");
        return RF_ERR_INVALID;
    }
    return rf_api_copy_out(s, buf, cap);
}
