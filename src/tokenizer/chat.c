/* chat.c - conversations to prompt text: the model's Jinja template
 * (tokenizer/jinja.c) with the variables transformers' apply_chat_template
 * passes, or, when the model has none, the built-in renderer below.
 *
 * The built-in renderer renders what Qwen3's Jinja template renders
 * for messages with roles system / user / assistant / tool and no tool
 * definitions or tool calls:
 *   - a leading system message becomes "<|im_start|>system\n...<|im_end|>\n";
 *   - user (and later system) turns: "<|im_start|>ROLE\nCONTENT<|im_end|>\n";
 *   - an assistant turn whose content holds "</think>" is split into
 *     reasoning (between <think> and </think>) and the answer; turns after
 *     the last real user query keep their reasoning in a <think> block (the
 *     final turn always gets one, even if empty); earlier turns drop it;
 *   - consecutive tool turns are grouped into one user turn of
 *     <tool_response> blocks;
 *   - add_generation_prompt appends "<|im_start|>assistant\n", and
 *     enable_thinking == 0 then appends an empty "<think>\n\n</think>\n\n".
 * Python's str.strip('\n') family strips only newlines; so do we. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/jinja.h"
#include "tokenizer/tok_internal.h"
#include "util/util.h"

static int starts_with(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int ends_with(const char *s, const char *p) {
    size_t n = strlen(s), m = strlen(p);
    return n >= m && !memcmp(s + n - m, p, m);
}

/* Last occurrence of needle in [s, s+n), or NULL. */
static const char *find_last(const char *s, size_t n, const char *needle) {
    size_t m = strlen(needle);
    for (size_t i = n >= m ? n - m + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, m)) return s + i;
    return NULL;
}

/* [*a, *b) with leading (lead) and/or trailing (trail) newlines removed. */
static void strip_nl(const char **a, const char **b, int lead, int trail) {
    while (lead && *a < *b && **a == '\n') (*a)++;
    while (trail && *b > *a && (*b)[-1] == '\n') (*b)--;
}

static void put_range(rf_buf *o, const char *a, const char *b) { rf_buf_put(o, a, (size_t)(b - a)); }

static void render_assistant(rf_buf *o, const char *content, int keep_reasoning, int is_last) {
    const char *c0 = content, *c1 = content + strlen(content); /* the answer */
    const char *r0 = "", *r1 = r0;                             /* the reasoning */
    const char *close = strstr(content, "</think>");
    if (close) {
        /* content.split('</think>')[-1].lstrip('\n') */
        c0 = find_last(content, strlen(content), "</think>") + strlen("</think>");
        strip_nl(&c0, &c1, 1, 0);
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        r0 = content, r1 = close;
        strip_nl(&r0, &r1, 0, 1);
        const char *open = find_last(r0, (size_t)(r1 - r0), "<think>");
        if (open) r0 = open + strlen("<think>");
        strip_nl(&r0, &r1, 1, 0);
    }
    rf_buf_puts(o, "<|im_start|>assistant\n");
    if (keep_reasoning && (is_last || r1 > r0)) {
        strip_nl(&r0, &r1, 1, 1);
        rf_buf_puts(o, "<think>\n");
        put_range(o, r0, r1);
        rf_buf_puts(o, "\n</think>\n\n");
        strip_nl(&c0, &c1, 1, 0);
    }
    put_range(o, c0, c1);
    rf_buf_puts(o, "<|im_end|>\n");
}

static char *builtin_render(const rf_chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking) {
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            rf_set_error("chat message %d has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
    rf_buf o = {0};
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        rf_buf_puts(&o, "<|im_start|>system\n");
        rf_buf_puts(&o, msgs[0].content);
        rf_buf_puts(&o, "<|im_end|>\n");
    }
    /* index of the last user message that is not a wrapped tool response */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(msgs[i].role, "user") &&
            !(starts_with(msgs[i].content, "<tool_response>") && ends_with(msgs[i].content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        const char *role = msgs[i].role, *content = msgs[i].content;
        if (!strcmp(role, "user") || (!strcmp(role, "system") && i > 0)) {
            rf_buf_puts(&o, "<|im_start|>");
            rf_buf_puts(&o, role);
            rf_buf_puts(&o, "\n");
            rf_buf_puts(&o, content);
            rf_buf_puts(&o, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            render_assistant(&o, content, i > last_query, i == n - 1);
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool")) rf_buf_puts(&o, "<|im_start|>user");
            rf_buf_puts(&o, "\n<tool_response>\n");
            rf_buf_puts(&o, content);
            rf_buf_puts(&o, "\n</tool_response>");
            if (i == n - 1 || strcmp(msgs[i + 1].role, "tool")) rf_buf_puts(&o, "<|im_end|>\n");
        }
        /* other roles render nothing, as in the template */
    }
    if (add_generation_prompt) {
        rf_buf_puts(&o, "<|im_start|>assistant\n");
        if (!enable_thinking) rf_buf_puts(&o, "<think>\n\n</think>\n\n");
    }
    return rf_buf_cstr(&o);
}

/* The built-in renderer takes plain conversations only: say what it cannot
 * render rather than drop it. */
static char *builtin_json(const json_t *msgs, const json_t *conv, int add_generation_prompt, int enable_thinking) {
    json_t *tools = json_is_object(conv) ? json_object_get(conv, "tools") : NULL;
    if (tools && !json_is_null(tools) && !(json_is_array(tools) && !json_array_size(tools)))
        return rf_set_error("the model has no chat template and the built-in one renders no tools "
                            "(give a template with --chat-template FILE)"), NULL;
    json_t *think = json_is_object(conv) ? json_object_get(conv, "enable_thinking") : NULL;
    if (think) enable_thinking = !json_is_false(think);
    json_t *agp = json_is_object(conv) ? json_object_get(conv, "add_generation_prompt") : NULL;
    if (agp) add_generation_prompt = json_is_true(agp);
    size_t n = json_array_size(msgs);
    rf_chat_msg *m = rf_calloc(n + 1, sizeof *m);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(msgs, i);
        m[i].role = json_string_value(json_object_get(e, "role"));
        m[i].content = json_string_value(json_object_get(e, "content"));
        const char *bad = !json_is_object(e) ? "is not an object"
                          : !m[i].role ? "has no string \"role\""
                          : !m[i].content ? "has no string \"content\" (the built-in template renders text only)"
                          : json_object_get(e, "tool_calls") ? "has tool_calls (the built-in template renders none)"
                          : NULL;
        if (bad) {
            free(m);
            return rf_set_error("chat message %zu %s", i, bad), NULL;
        }
    }
    char *text = builtin_render(m, (int)n, add_generation_prompt, enable_thinking);
    free(m);
    return text;
}

char *rf_chat_render(const rf_tokenizer *t, const json_t *conv, int add_generation_prompt, int enable_thinking) {
    const json_t *msgs = json_is_array(conv) ? conv : json_object_get(conv, "messages");
    if (!json_is_array(msgs))
        return rf_set_error("a conversation is a JSON array of messages, or an object with \"messages\""), NULL;
    const char *tpl = t ? rf_tok_chat_template(t) : NULL;
    if (!tpl) return builtin_json(msgs, conv, add_generation_prompt, enable_thinking);
    /* what apply_chat_template renders with: the special tokens map, then
     * messages / tools / documents / add_generation_prompt, then the
     * caller's keyword arguments over them */
    json_t *vars = t->special_strings ? json_deep_copy(t->special_strings) : json_object();
    json_object_set(vars, "messages", (json_t *)msgs);
    json_object_set_new(vars, "tools", json_null());
    json_object_set_new(vars, "documents", json_null());
    json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (!enable_thinking) json_object_set_new(vars, "enable_thinking", json_false());
    if (json_is_object(conv)) json_object_update(vars, (json_t *)conv);
    char *text = rf_jinja_render(tpl, strlen(tpl), vars, NULL, NULL);
    json_decref(vars);
    if (!text && t->chat_template_from) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", t->chat_template_from, rf_last_error());
        rf_set_error("%s", msg);
    }
    return text;
}

char *rf_chat_apply(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                    int enable_thinking) {
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            rf_set_error("chat message %d has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
    if (!t || !rf_tok_chat_template(t)) return builtin_render(msgs, n, add_generation_prompt, enable_thinking);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m) { /* jansson refuses strings that are not UTF-8 */
            json_decref(arr);
            return rf_set_error("chat message %d is not valid UTF-8", i), NULL;
        }
        json_array_append_new(arr, m);
    }
    char *text = rf_chat_render(t, arr, add_generation_prompt, enable_thinking);
    json_decref(arr);
    return text;
}

char *rf_chat_query(const rf_tokenizer *t, const char *query) {
    rf_chat_msg msg = {"user", query};
    return rf_chat_apply(t, &msg, 1, 1, 1);
}

int rf_chat_query_ids(const rf_tokenizer *t, const char *query, int **ids, int *n) {
    char *text = rf_chat_query(t, query);
    if (!text) return -1;
    int rc = rf_tok_encode(t, text, strlen(text), ids, n);
    free(text);
    return rc;
}
