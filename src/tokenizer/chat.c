/* chat.c - Qwen3's chat template for plain conversations.
 *
 * This renders what Qwen3's Jinja template in tokenizer_config.json renders
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
#include <stdlib.h>
#include <string.h>

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

char *rf_chat_apply(const rf_tokenizer *t, const rf_chat_msg *msgs, int n, int add_generation_prompt,
                    int enable_thinking) {
    /* The rendering is Qwen3's (ChatML); refuse a checkpoint whose own
     * template is something else rather than render the wrong prompt. */
    if (t && t->chat_template && !strstr(t->chat_template, "<|im_start|>")) {
        rf_set_error("tokenizer_config.json has a chat template that is not Qwen/ChatML style (no <|im_start|>); not supported");
        return NULL;
    }
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
