/* request.c - one JSON request body -> prompt ids + decoding settings.
 *
 * Everything a client can get wrong is caught here, before the request is
 * queued, and reported as one line naming the field: the HTTP layer turns it
 * into 400 {"error": {"message": ...}}. Unknown fields are ignored (OpenAI
 * clients send many we have no use for); null means "not given". */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"
#include "util/util.h"

/* The field's value, or NULL when it is absent or null. */
static json_t *field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/* Integer field in [lo, hi]: 0 absent (out untouched), 1 set, -1 error.
 * why: what the upper bound is, for the message (or ""). */
static int get_int_why(json_t *o, const char *key, long long lo, long long hi, const char *why, long long *out) {
    json_t *v = field(o, key);
    if (!v) return 0;
    long long x = json_is_integer(v) ? (long long)json_integer_value(v) : 0;
    if (!json_is_integer(v) || x < lo || x > hi) {
        if (hi >= INT_MAX) rf_set_error("\"%s\" must be an integer >= %lld", key, lo);
        else rf_set_error("\"%s\" must be an integer in [%lld, %lld]%s", key, lo, hi, why);
        return -1;
    }
    *out = x;
    return 1;
}
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out) {
    return get_int_why(o, key, lo, hi, "", out);
}

/* Number field in [lo, hi] (integers accepted): 0 absent, 1 set, -1 error.
 * what: how the range reads in the message. */
static int get_num(json_t *o, const char *key, double lo, double hi, int open_lo, const char *what,
                   float *out) {
    json_t *v = field(o, key);
    if (!v) return 0;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v) || !isfinite(x) || x < lo || x > hi || (open_lo && x == lo)) {
        rf_set_error("\"%s\" must be a number %s", key, what);
        return -1;
    }
    *out = (float)x;
    return 1;
}

static int get_bool(json_t *o, const char *key, int *out) {
    json_t *v = field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        rf_set_error("\"%s\" must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* The decoding settings every endpoint shares. Every integer is bounded by
 * what the model can use (lengths by its context, top_k by its vocabulary)
 * before anything is computed from it: rf_gen_check then works on sizes
 * that cannot overflow. */
static int parse_settings(json_t *o, const rf_model *m, rf_serve_req *r) {
    const long long ctx = m->cfg.max_pos, vocab = m->cfg.vocab_size;
    long long x;
    int k;
    json_t *v;
    if ((v = field(o, "mode"))) {
        const char *s = json_string_value(v);
        if (s && !strcmp(s, "ar")) r->ar = 1;
        else if (s && !strcmp(s, "refusion")) r->ar = 0;
        else {
            rf_set_error("\"mode\" must be \"refusion\" or \"ar\"");
            return -1;
        }
    }
    if (get_bool(o, "stream", &r->stream) < 0) return -1;
    /* max_completion_tokens is the newer OpenAI name for chat */
    const char *len_key = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((k = get_int_why(o, len_key, 1, ctx, " (the model's context)", &x)) < 0) return -1;
    if (k) r->p.gen_length = (int)x;
    if ((k = get_int_why(o, "slot_size", 1, ctx, " (the model's context)", &x)) < 0) return -1;
    if (k) r->p.slot_size = (int)x;
    if ((k = get_int_why(o, "serial_num_blocks", 1, ctx, " (the model's context)", &x)) < 0) return -1;
    if (k) r->p.n_blocks = (int)x;
    if ((k = get_int_why(o, "top_k", 0, vocab, " (the vocabulary)", &x)) < 0) return -1;
    if (k) r->p.top_k = (int)x;
    if ((k = get_int(o, "seed", 0, LLONG_MAX, &x)) < 0) return -1;
    if (k) r->p.seed = (uint64_t)x;
    if (get_num(o, "slot_threshold", 0, 1, 0, "in [0, 1]", &r->p.slot_threshold) < 0) return -1;
    if (get_num(o, "token_threshold", 0, 1, 0, "in [0, 1]", &r->p.token_threshold) < 0) return -1;
    if (get_num(o, "temperature", 0, 1e6, 0, ">= 0", &r->p.temperature) < 0) return -1;
    if (get_num(o, "top_p", 0, 1, 1, "in (0, 1]", &r->p.top_p) < 0) return -1;
    /* what we cannot do is refused rather than silently ignored */
    if (get_int(o, "n", 1, 1, &x) < 0) {
        rf_set_error("\"n\" must be 1 (one answer per request)");
        return -1;
    }
    v = field(o, "stop");
    if (v && !(json_is_array(v) && json_array_size(v) == 0)) {
        rf_set_error("\"stop\" sequences are not supported (generation stops at the EOS token)");
        return -1;
    }
    return 0;
}

static int encode(const rf_tokenizer *tok, const char *text, rf_serve_req *r) {
    if (rf_tok_encode(tok, text, strlen(text), &r->prompt, &r->n_prompt)) {
        char why[256]; /* rf_set_error must not read its own buffer */
        snprintf(why, sizeof why, "%s", rf_last_error());
        rf_set_error("prompt: %s", why);
        return -1;
    }
    return 0;
}

/* "prompt": "text" | ["text"] | [id, id, ...] */
static int parse_prompt(json_t *o, const rf_tokenizer *tok, rf_serve_req *r) {
    json_t *v = field(o, "prompt");
    if (!v) {
        rf_set_error("missing \"prompt\" (a string or an array of token ids)");
        return -1;
    }
    if (json_is_array(v) && json_array_size(v) == 1 && json_is_string(json_array_get(v, 0)))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        if (!tok) {
            rf_set_error("this model has no tokenizer.json: give \"prompt\" as an array of token ids");
            return -1;
        }
        return encode(tok, json_string_value(v), r);
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

/* "messages": [{"role": "system"|"user"|"assistant", "content": "text"}, ...]
 * rendered with the model's chat template, ready for the assistant's turn. */
static int parse_messages(json_t *o, const rf_tokenizer *tok, rf_serve_req *r) {
    json_t *v = field(o, "messages");
    if (!v) {
        rf_set_error("missing \"messages\" (an array of {\"role\", \"content\"} objects)");
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
    int think = 1;
    if (get_bool(o, "enable_thinking", &think) < 0) return -1;
    json_t *kw = field(o, "chat_template_kwargs");
    if (kw && (!json_is_object(kw) || get_bool(kw, "enable_thinking", &think) < 0)) {
        rf_set_error("\"chat_template_kwargs\" must be an object whose \"enable_thinking\" is true or false");
        return -1;
    }
    size_t n = json_array_size(v), i;
    rf_chat_msg *msgs = rf_calloc(n, sizeof *msgs);
    json_t *e;
    json_array_foreach(v, i, e) {
        const char *role = json_string_value(json_object_get(e, "role"));
        const char *content = json_string_value(json_object_get(e, "content"));
        if (!json_is_object(e) || !role || !content) {
            rf_set_error("\"messages\"[%zu] must be an object with string \"role\" and \"content\"", i);
            free(msgs);
            return -1;
        }
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
            rf_set_error("\"messages\"[%zu]: role must be \"system\", \"user\" or \"assistant\"", i);
            free(msgs);
            return -1;
        }
        msgs[i].role = role, msgs[i].content = content;
    }
    char *text = rf_chat_apply(tok, msgs, (int)n, 1, think);
    free(msgs);
    if (!text) return -1;
    int rc = encode(tok, text, r);
    free(text);
    return rc;
}

int rf_serve_parse(const char *body, size_t len, rf_req_kind kind, const rf_model *m,
                   const rf_tokenizer *tok, const rf_gen_params *defaults, int default_ar,
                   rf_serve_req *out) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->p = *defaults;
    out->p.on_tokens = NULL, out->p.on_event = NULL, out->p.user = NULL;
    out->ar = default_ar;
    if (len == 0) {
        rf_set_error("empty request body (a JSON object is expected)");
        return -1;
    }
    json_error_t err;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!o) {
        /* jansson quotes the input near the error: keep it one printable line */
        for (char *c = err.text; *c; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
        rf_set_error("malformed JSON: %s (line %d, column %d)", err.text, err.line, err.column);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(o)) {
        rf_set_error("the request body must be a JSON object");
        goto out;
    }
    if (parse_settings(o, m, out)) goto out;
    if (kind == RF_REQ_CHAT ? parse_messages(o, tok, out) : parse_prompt(o, tok, out)) goto out;
    if (rf_gen_check(m, out->prompt, out->n_prompt, &out->p, out->ar)) goto out;
    rc = 0;
out:
    json_decref(o);
    if (rc) {
        free(out->prompt);
        out->prompt = NULL, out->n_prompt = 0;
    }
    return rc;
}

void rf_serve_req_free(rf_serve_req *r) {
    free(r->prompt);
    r->prompt = NULL, r->n_prompt = 0;
}
