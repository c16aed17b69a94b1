/* prompt.c - a request's prompt as token ids: "prompt" (text or ids) or
 * "messages" rendered with the model's chat template (request_impl.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/tools.h" /* rf_chat_render_openai */
#include "serve/request_impl.h"
#include "util/util.h"

/* spans: the client's text, where special-token text is plain text unless
 * the request says "parse_special": true (llama-server's name) or the
 * server runs with --special-in-content */
static int encode(const rf_tokenizer *tok, const char *text, const rf_text_span *spans, size_t n_spans,
                  rf_serve_req *r) {
    if (rf_tok_encode_spans(tok, text, strlen(text), spans, n_spans, &r->prompt, &r->n_prompt)) {
        char why[256]; /* rf_set_error must not read its own buffer */
        snprintf(why, sizeof why, "%s", rf_last_error());
        rf_set_error("prompt: %s", why);
        return -1;
    }
    return 0;
}

int rf_req_prompt(json_t *o, const rf_tokenizer *tok, rf_serve_req *r) {
    json_t *v = rf_req_field(o, "prompt");
    if (!v) {
        rf_set_error("missing \"prompt\" (a string or an array of token ids)");
        r->err_code = "missing_required_parameter";
        return -1;
    }
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        if (!tok) {
            rf_set_error("this model has no tokenizer.json: give \"prompt\" as an array of token ids");
            return -1;
        }
        int special = rf_tok_special_in_content(tok);
        if (rf_req_bool(o, "parse_special", &special) < 0) {
            set_param(r, "parse_special");
            return -1;
        }
        rf_text_span all = {0, strlen(json_string_value(v))};
        return encode(tok, json_string_value(v), &all, special ? 0 : 1, r);
    }
    if (!json_is_array(v)) {
        rf_set_error("\"prompt\" must be a string or an array of token ids");
        return -1;
    }
    size_t n = json_array_size(v), i;
    json_t *e;
    r->prompt = rf_malloc((n ? n : 1) * sizeof(int));
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT_MAX) {
            rf_set_error("\"prompt\"[%zu] is not a token id (one prompt per request; ids are integers >= 0)", i);
            return -1;
        }
        r->prompt[i] = (int)json_integer_value(e);
    }
    r->n_prompt = (int)n;
    return 0;
}

int rf_req_messages(json_t *o, const rf_tokenizer *tok, rf_serve_req *r) {
    json_t *v = rf_req_field(o, "messages");
    if (!v) {
        rf_set_error("missing \"messages\" (an array of {\"role\", \"content\"} objects)");
        r->err_code = "missing_required_parameter";
        return -1;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) {
        rf_set_error("\"messages\" must be a non-empty array of {\"role\", \"content\"} objects");
        return -1;
    }
    if (!tok || rf_tok_id(tok, "<|im_start|>") < 0) {
        rf_set_error("this model has no chat template (no tokenizer.json with <|im_start|>): use /v1/completions");
        return -1;
    }
    int think = 1, special = rf_tok_special_in_content(tok);
    if (rf_req_bool(o, "enable_thinking", &think) < 0 || rf_req_bool(o, "parse_special", &special) < 0) {
        set_param(r, rf_req_bool(o, "enable_thinking", &think) < 0 ? "enable_thinking" : "parse_special");
        return -1;
    }
    json_t *kw = rf_req_field(o, "chat_template_kwargs");
    if (kw && (!json_is_object(kw) || rf_req_bool(kw, "enable_thinking", &think) < 0)) {
        set_param(r, "chat_template_kwargs");
        rf_set_error("\"chat_template_kwargs\" must be an object whose \"enable_thinking\" is true or false");
        return -1;
    }
    rf_text_span *spans;
    size_t n_spans;
    int rc = -1;
    char *text = rf_chat_render_openai(tok, v, r->tools, think, &spans, &n_spans, r->err_param, sizeof r->err_param);
    if (text) rc = encode(tok, text, spans, special ? 0 : n_spans, r);
    free(spans);
    r->prompt_text = text; /* /apply-template answers it */
    return rc;
}
