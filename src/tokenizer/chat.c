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

/* The spans of the prompt that are the conversation's text (spans NULL:
 * not wanted). */
typedef struct {
    rf_text_span *v;
    size_t n, cap;
} spanv;
static void span_push(spanv *sv, size_t a, size_t e) {
    if (!sv || a >= e) return;
    if (sv->n && sv->v[sv->n - 1].end == a) {
        sv->v[sv->n - 1].end = e;
        return;
    }
    sv->v = rf_grow_to(sv->v, sizeof *sv->v, sv->n + 1, &sv->cap, 16);
    sv->v[sv->n++] = (rf_text_span){a, e};
}
/* text of the conversation appended */
static void put_data(rf_buf *o, spanv *sv, const char *a, const char *b) {
    size_t at = o->n;
    rf_buf_put(o, a, (size_t)(b - a));
    span_push(sv, at, o->n);
}

static void render_assistant(rf_buf *o, spanv *sv, const char *content, int keep_reasoning, int is_last) {
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
        put_data(o, sv, r0, r1);
        rf_buf_puts(o, "\n</think>\n\n");
        strip_nl(&c0, &c1, 1, 0);
    }
    put_data(o, sv, c0, c1);
    rf_buf_puts(o, "<|im_end|>\n");
}

static char *builtin_render(const rf_chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking, spanv *sv) {
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            rf_set_error("chat message %d has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
    rf_buf o = {0};
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        rf_buf_puts(&o, "<|im_start|>system\n");
        put_data(&o, sv, msgs[0].content, msgs[0].content + strlen(msgs[0].content));
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
            put_data(&o, sv, content, content + strlen(content));
            rf_buf_puts(&o, "<|im_end|>\n");
        } else if (!strcmp(role, "assistant")) {
            render_assistant(&o, sv, content, i > last_query, i == n - 1);
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool")) rf_buf_puts(&o, "<|im_start|>user");
            rf_buf_puts(&o, "\n<tool_response>\n");
            put_data(&o, sv, content, content + strlen(content));
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
static char *builtin_json(const json_t *msgs, const json_t *conv, int add_generation_prompt, int enable_thinking,
                          spanv *sv) {
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
    char *text = builtin_render(m, (int)n, add_generation_prompt, enable_thinking, sv);
    free(m);
    return text;
}

/* spans: filled with the conversation's spans (sv NULL: not wanted) */
static char *render(const rf_tokenizer *t, const json_t *conv, int add_generation_prompt, int enable_thinking, spanv *sv) {
    const json_t *msgs = json_is_array(conv) ? conv : json_object_get(conv, "messages");
    if (!json_is_array(msgs))
        return rf_set_error("a conversation is a JSON array of messages, or an object with \"messages\""), NULL;
    const char *tpl = t ? rf_tok_chat_template(t) : NULL;
    if (!tpl) return builtin_json(msgs, conv, add_generation_prompt, enable_thinking, sv);
    /* what apply_chat_template renders with: the special tokens map, then
     * messages / tools / documents / add_generation_prompt, then the
     * caller's keyword arguments over them; the tokenizer's own strings are
     * the template's, the rest is the conversation's */
    json_t *data = json_object();
    json_object_set(data, "messages", (json_t *)msgs);
    json_object_set_new(data, "tools", json_null());
    json_object_set_new(data, "documents", json_null());
    json_object_set_new(data, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (!enable_thinking) json_object_set_new(data, "enable_thinking", json_false());
    if (json_is_object(conv)) json_object_update(data, (json_t *)conv);
    rf_text_span *sp = NULL;
    size_t nsp = 0;
    char *text = rf_jinja_render_data(tpl, strlen(tpl), t->special_strings, data, NULL, NULL, sv ? &sp : NULL, &nsp);
    json_decref(data);
    if (!text && t->chat_template_from) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s: %s", t->chat_template_from, rf_last_error());
        rf_set_error("%s", msg);
    }
    if (sv) sv->v = sp, sv->n = sv->cap = nsp;
    return text;
}

char *rf_chat_render(const rf_tokenizer *t, const json_t *conv, int add_generation_prompt, int enable_thinking) {
    return render(t, conv, add_generation_prompt, enable_thinking, NULL);
}

char *rf_chat_render_spans(const rf_tokenizer *t, const json_t *conv, int add_generation_prompt, int enable_thinking,
                           rf_text_span **spans, size_t *n_spans) {
    spanv sv = {0};
    char *text = render(t, conv, add_generation_prompt, enable_thinking, &sv);
    if (!text) free(sv.v), sv.v = NULL, sv.n = 0;
    *spans = sv.v, *n_spans = sv.n;
    return text;
}

static char *apply(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                   int enable_thinking, spanv *sv) {
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) {
            rf_set_error("chat message %d has no %s", i, msgs[i].role ? "content" : "role");
            return NULL;
        }
    if (!t || !rf_tok_chat_template(t)) return builtin_render(msgs, n, add_generation_prompt, enable_thinking, sv);
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m) { /* jansson refuses strings that are not UTF-8 */
            json_decref(arr);
            return rf_set_error("chat message %d is not valid UTF-8", i), NULL;
        }
        json_array_append_new(arr, m);
    }
    char *text = render(t, arr, add_generation_prompt, enable_thinking, sv);
    json_decref(arr);
    return text;
}

char *rf_chat_apply(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                    int enable_thinking) {
    return apply(t, msgs, n, add_generation_prompt, enable_thinking, NULL);
}

char *rf_chat_apply_spans(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                          int enable_thinking, rf_text_span **spans, size_t *n_spans) {
    spanv sv = {0};
    char *text = apply(t, msgs, n, add_generation_prompt, enable_thinking, &sv);
    if (!text) free(sv.v), sv.v = NULL, sv.n = 0;
    *spans = sv.v, *n_spans = sv.n;
    return text;
}

int rf_chat_apply_ids(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                      int enable_thinking, int parse_special, int **ids, int *n_ids) {
    rf_text_span *sp;
    size_t nsp;
    char *text = rf_chat_apply_spans(t, msgs, n, add_generation_prompt, enable_thinking, &sp, &nsp);
    if (!text) return -1;
    int rc = rf_tok_encode_spans(t, text, strlen(text), parse_special ? NULL : sp, parse_special ? 0 : nsp, ids, n_ids);
    free(sp);
    free(text);
    return rc;
}

char *rf_chat_query(const rf_tokenizer *t, const char *query) {
    rf_chat_msg msg = {"user", query};
    return rf_chat_apply(t, &msg, 1, 1, 1);
}

int rf_chat_query_ids(const rf_tokenizer *t, const char *query, int **ids, int *n) {
    rf_chat_msg msg = {"user", query};
    return rf_chat_apply_ids(t, &msg, 1, 1, 1, rf_tok_special_in_content(t), ids, n);
}

int rf_tok_check_chat_template(const rf_tokenizer *t) {
    if (!rf_tok_chat_template(t)) return 0;
    static const rf_chat_msg user[] = {{"user", "Hello!"}};
    static const rf_chat_msg sys_user[] = {{"system", "Be brief."}, {"user", "Hello!"}};
    static const rf_chat_msg turns[] = {{"user", "Hello!"}, {"assistant", "Hi."}, {"user", "How are you?"}};
    const struct {
        const rf_chat_msg *m;
        int n;
    } probes[] = {{user, 1}, {sys_user, 2}, {turns, 3}};
    char first[1024] = "";
    for (size_t i = 0; i < sizeof probes / sizeof *probes; i++) {
        char *text = rf_chat_apply(t, probes[i].m, probes[i].n, 1, 1);
        if (text) {
            free(text);
            return 0;
        }
        if (!*first) snprintf(first, sizeof first, "%s", rf_last_error());
    }
    rf_set_error("%s (the chat template renders no conversation)", first);
    return -1;
}
