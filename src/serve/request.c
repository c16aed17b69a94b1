/* request.c - one JSON request body -> prompt ids + decoding settings.
 *
 * Everything a client can get wrong is caught here, before the request is
 * queued, and reported as one line naming the field: the HTTP layer turns it
 * into 400 {"error": {"message", "param", ...}}. Every field must be known:
 * the decoding settings are the rows of the shared option table (common/args.h,
 * the same names, ranges and defaults as the command line); OpenAI fields we
 * do not implement are accepted only at their neutral value (echo false,
 * logit_bias {}, ...); anything else is refused, naming it. null means
 * "not given". */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "grammar/constraint.h"
#include "grammar/json_schema.h"
#include "serve/request_impl.h"
#include "serve/serve.h"
#include "serve/tools.h"
#include "util/util.h"

/* dst = src cut to at most n - 1 bytes on a UTF-8 character boundary: the
 * field names of a body are valid UTF-8 (jansson checks), and a name cut
 * inside a character would no longer be, so the error reply that quotes it
 * could not be built. */
void rf_serve_utf8_cut(char *dst, size_t n, const char *src) {
    size_t k = strlen(src);
    if (k > n - 1) {
        k = n - 1;
        while (k > 0 && ((unsigned char)src[k] & 0xC0) == 0x80) k--; /* src[k]: a continuation byte */
    }
    memcpy(dst, src, k);
    dst[k] = 0;
}
int rf_serve_check_id(const char *id, const char *what) {
    size_t n = strlen(id);
    json_t *v = json_string(id); /* NULL: not UTF-8 */
    json_decref(v);
    int ctl = 0;
    for (size_t i = 0; i < n; i++) ctl |= (unsigned char)id[i] < 0x20 || id[i] == 0x7f;
    if (!v || ctl || n == 0 || n > 256) {
        rf_set_error("%s: a model id must be 1 to 256 bytes of UTF-8 text without control characters", what);
        return -1;
    }
    return 0;
}

json_t *rf_req_field(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

int rf_req_bool(json_t *o, const char *key, int *out) {
    json_t *v = rf_req_field(o, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) {
        rf_set_error("\"%s\" must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* Fields a client may send that change nothing here (accepted, ignored). */
static const char *const harmless[] = {"model", "user", "metadata", "store", "service_tier", NULL};

/* OpenAI fields we do not implement: accepted only at their neutral value,
 * otherwise refused with a message naming them. */
static int check_unsupported(json_t *o, rf_serve_req *r) {
    json_t *v;
#define REFUSE(key, ...) do { set_param(r, key); \
        r->err_unsupported = 1; rf_set_error(__VA_ARGS__); return -1; } while (0)
    /* the deprecated spellings of tools / tool_choice */
    static const char *const tool_keys[] = {"functions", "function_call"};
    for (size_t i = 0; i < sizeof tool_keys / sizeof *tool_keys; i++)
        if ((v = rf_req_field(o, tool_keys[i])) && !(json_is_array(v) && json_array_size(v) == 0) &&
            !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
            REFUSE(tool_keys[i], "\"%s\" is not supported: use \"tools\" and \"tool_choice\"", tool_keys[i]);
    if ((v = rf_req_field(o, "response_format"))) {
        const char *t = json_is_object(v) ? json_string_value(json_object_get(v, "type")) : NULL;
        if (!t || (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema")))
            REFUSE("response_format", "\"response_format\" must be {\"type\": \"text\" | \"json_object\" | "
                                      "\"json_schema\", ...}");
    }
    if ((v = rf_req_field(o, "repetition_penalty")) && !(json_is_number(v) && json_number_value(v) == 1))
        REFUSE("repetition_penalty", "\"repetition_penalty\" is spelled \"repeat_penalty\" here (llama.cpp's name)");
    if ((v = rf_req_field(o, "logit_bias")) && !(json_is_object(v) && json_object_size(v) == 0))
        REFUSE("logit_bias", "\"logit_bias\" is not supported");
    if ((v = rf_req_field(o, "echo")) && !json_is_false(v)) REFUSE("echo", "\"echo\" is not supported (only false)");
    if ((v = rf_req_field(o, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1))
        REFUSE("best_of", "\"best_of\" is not supported (only 1)");
    if ((v = rf_req_field(o, "suffix")) && !(json_is_string(v) && !*json_string_value(v)))
        REFUSE("suffix", "\"suffix\" is not supported");
#undef REFUSE
    return 0;
}

/* Chat: "logprobs": true | false and "top_logprobs": 0..20 (which needs
 * "logprobs": true, as OpenAI says); completions: "logprobs": 0..20 (the
 * alternatives per token; false or null: none) into p.logprobs and
 * p.top_logprobs (every decoder reports them). */
static int parse_logprobs(json_t *o, rf_serve_req *r) {
    json_t *v = rf_req_field(o, "logprobs"), *top = rf_req_field(o, "top_logprobs");
    int on = 0, n_top = 0;
    set_param(r, "logprobs");
    if (r->kind == RF_REQ_CHAT) {
        if (v && !json_is_boolean(v)) {
            rf_set_error("\"logprobs\" must be true or false");
            return -1;
        }
        on = v && json_is_true(v);
        if (top) {
            set_param(r, "top_logprobs");
            if (!json_is_integer(top) || json_integer_value(top) < 0 ||
                json_integer_value(top) > RF_MAX_TOP_LOGPROBS) {
                rf_set_error("\"top_logprobs\" must be an integer in [0, %d]", RF_MAX_TOP_LOGPROBS);
                return -1;
            }
            n_top = (int)json_integer_value(top);
            if (!on) {
                rf_set_error("\"top_logprobs\" needs \"logprobs\": true");
                return -1;
            }
        }
    } else {
        if (top) {
            set_param(r, "top_logprobs");
            rf_set_error("\"top_logprobs\" is a chat field: a completion's \"logprobs\" is the number of "
                         "alternatives");
            return -1;
        }
        if (v && !json_is_false(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > RF_MAX_TOP_LOGPROBS) {
                rf_set_error("\"logprobs\" must be an integer in [0, %d] (the alternatives per token)",
                             RF_MAX_TOP_LOGPROBS);
                return -1;
            }
            on = 1, n_top = (int)json_integer_value(v);
        }
    }
    r->p.logprobs = on, r->p.top_logprobs = n_top;
    r->err_param[0] = 0;
    return 0;
}

/* "stop": "text" | ["text", ...] (at most 4, non-empty, as OpenAI) */
static int parse_stop(json_t *o, rf_serve_req *r) {
    json_t *v = rf_req_field(o, "stop");
    if (!v) return 0;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if ((!json_is_string(v) && !json_is_array(v)) || n > RF_SERVE_MAX_STOP) {
        rf_set_error("\"stop\" must be a string or an array of at most %d strings", RF_SERVE_MAX_STOP);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_string(v) ? v : json_array_get(v, i);
        const char *t = json_string_value(e);
        if (!t || !*t || strlen(t) >= RF_SERVE_STOP_LEN) {
            rf_set_error("\"stop\"[%zu] must be a non-empty string of at most %d bytes", i, RF_SERVE_STOP_LEN - 1);
            return -1;
        }
        snprintf(r->stop[r->n_stop++], RF_SERVE_STOP_LEN, "%s", t);
    }
    return 0;
}

/* One row of the shared option table (common/args.h) as a request field: the
 * same name, type and range as the command-line option; lengths bounded by
 * the model's context and top_k by its vocabulary before anything is
 * computed from them, so rf_gen_check works on sizes that cannot overflow. */
static int parse_row(json_t *v, const char *key, const rf_opt *row, const rf_model *m, rf_decode_opts *d) {
    char *dst = (char *)d + row->offset;
    double hi = row->hi_from == RF_HI_CONTEXT ? m->cfg.max_pos : row->hi_from == RF_HI_VOCAB ? m->cfg.vocab_size : row->hi;
    const char *why = row->hi_from == RF_HI_CONTEXT ? " (the model's context)"
                      : row->hi_from == RF_HI_VOCAB ? " (the vocabulary)" : "";
    switch (row->type) {
    case RF_OPT_INT:
    case RF_OPT_LEN: /* -1 (no limit) is the command line's only: [lo, hi] here */
    case RF_OPT_I64: {
        long long x = json_is_integer(v) ? (long long)json_integer_value(v) : 0;
        if (!json_is_integer(v) || x < (long long)row->lo || (hi < 9e18 && x > (long long)hi)) {
            if (hi >= 9e18) rf_set_error("\"%s\" must be an integer >= %.0f", key, row->lo);
            else rf_set_error("\"%s\" must be an integer in [%.0f, %.0f]%s", key, row->lo, hi, why);
            return -1;
        }
        if (row->type == RF_OPT_I64) *(int64_t *)dst = x;
        else *(int *)dst = (int)x;
        return 0;
    }
    case RF_OPT_FLOAT: {
        double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!json_is_number(v) || !isfinite(x) || x < row->lo || x > hi || (row->open_lo && x == row->lo)) {
            if (hi >= 1e6) rf_set_error("\"%s\" must be a number >= %g", key, row->lo);
            else rf_set_error("\"%s\" must be a number in %s%g, %g]", key, row->open_lo ? "(" : "[", row->lo, hi);
            return -1;
        }
        *(float *)dst = (float)x;
        return 0;
    }
    case RF_OPT_CHOICE: {
        const char *t = json_string_value(v);
        if (!t || rf_opt_set(row, d, t)) {
            char alts[96];
            snprintf(alts, sizeof alts, "%s", row->choices);
            for (char *c = alts; *c; c++)
                if (*c == '|') *c = ',';
            rf_set_error("\"%s\" must be one of %s", key, alts);
            return -1;
        }
        return 0;
    }
    case RF_OPT_FLAG:
        if (!json_is_boolean(v)) {
            rf_set_error("\"%s\" must be true or false", key);
            return -1;
        }
        *(int *)dst = json_is_true(v);
        return 0;
    default: return 0;
    }
}

/* A sampling setting the request (or the server's flags) gave that its
 * decoder does not use is refused, never silently ignored. */
static int unused_setting(rf_serve_req *r) {
    int row = rf_decode_opts_unused(&r->d);
    if (row < 0) return 0;
    set_param(r, rf_decode_table[row].http ? rf_decode_table[row].http : rf_decode_table[row].name);
    r->err_unsupported = 1;
    return -1;
}

/* The decoding settings every endpoint shares, and the OpenAI fields around them. */
static int parse_settings(json_t *o, const rf_model *m, rf_serve_req *r) {
    /* every field must be one we know: nothing is silently ignored */
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int known = 0;
        for (int i = 0; i < rf_decode_table_n && !known; i++)
            known = rf_decode_table[i].http && !strcmp(key, rf_decode_table[i].http);
        static const char *const own[] = {"prompt", "messages", "stream", "stream_options", "stop",
                                          "max_completion_tokens", "serial_num_blocks", "enable_thinking",
                                          "chat_template_kwargs", "logprobs", "top_logprobs", "tools",
                                          "tool_choice", "functions", "function_call", "parallel_tool_calls",
                                          "response_format", "presence_penalty", "frequency_penalty",
                                          "repetition_penalty", "logit_bias", "echo", "best_of", "suffix", "n",
                                          "parse_special", "grammar", "json_schema", "decode_events", NULL};
        for (int i = 0; own[i] && !known; i++) known = !strcmp(key, own[i]);
        for (int i = 0; harmless[i] && !known; i++) known = !strcmp(key, harmless[i]);
        if (!known) {
            set_param(r, key);
            r->err_unsupported = 1;
            char shown[61];
            rf_serve_utf8_cut(shown, sizeof shown, key);
            rf_set_error("unsupported field \"%s\"%s", shown, strlen(key) >= sizeof shown ? " (cut)" : "");
            return -1;
        }
    }
    if (check_unsupported(o, r)) return -1;
    rf_decode_opts d = r->d;
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *row = &rf_decode_table[i];
        if (!row->http) continue;
        const char *k = row->http;
        /* the newer OpenAI name for chat; the authors' name for blocks */
        if (!strcmp(k, "max_tokens") && rf_req_field(o, "max_completion_tokens")) k = "max_completion_tokens";
        if (!strcmp(k, "blocks") && !rf_req_field(o, k) && rf_req_field(o, "serial_num_blocks")) k = "serial_num_blocks";
        if ((v = rf_req_field(o, k)) && parse_row(v, k, row, m, &d)) {
            set_param(r, k);
            return -1;
        }
        if (v) d.src[i] = RF_SRC_REQUEST; /* over the server's default / generation_config.json / flag */
    }
    rf_decode_opts_finish(&d);
    r->d = d;
    r->p = d.gen;
    r->p.on_tokens = NULL, r->p.on_event = NULL, r->p.user = NULL, r->p.cancel = NULL;
    r->ar = d.gen.method == RF_METHOD_AR;
    r->max_tokens = d.gen.gen_length;
    if (rf_req_bool(o, "stream", &r->stream) < 0) {
        set_param(r, "stream");
        return -1;
    }
    if ((v = rf_req_field(o, "stream_options"))) {
        set_param(r, "stream_options");
        if (!json_is_object(v) || rf_req_bool(v, "include_usage", &r->include_usage) < 0) {
            rf_set_error("\"stream_options\" must be an object whose \"include_usage\" is true or false");
            return -1;
        }
        if (!r->stream) {
            rf_set_error("\"stream_options\" is only allowed with \"stream\": true");
            return -1;
        }
        r->err_param[0] = 0;
    }
    if (rf_req_bool(o, "decode_events", &r->decode_events) < 0 || (r->decode_events && !r->stream)) {
        set_param(r, "decode_events");
        if (r->decode_events) rf_set_error("\"decode_events\" needs \"stream\": true (they are Server-Sent Events)");
        return -1;
    }
    if (unused_setting(r)) return -1;
    /* no seed: a fresh one for each request, reported in the answer's settings */
    if (r->p.seed == RF_SEED_RANDOM) r->p.seed = r->d.gen.seed = rf_seed_random();
    if (parse_stop(o, r)) {
        set_param(r, "stop");
        return -1;
    }
    /* "n": choices, each its own generation (scheduler.c: choice i samples
     * with seed + i) */
    if ((v = rf_req_field(o, "n"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > RF_SERVE_MAX_N) {
            set_param(r, "n");
            rf_set_error("\"n\" must be an integer in [1, %d] (the number of choices)", RF_SERVE_MAX_N);
            return -1;
        }
        r->n_choices = (int)json_integer_value(v);
    }
    return 0;
}

/* What the decoders would only find out while running (an error after the
 * job started, or a stream already answered 200), and work the client never
 * gets back: checked here so that it is a 400 before anything is queued. */
static int check_work(json_t *o, const rf_decode_opts *defaults, rf_serve_req *r) {
    const rf_params *p = &r->p;
    if (p->method == RF_METHOD_MDM) {
        /* mdm.c: the answer is cut into min(blocks, max_tokens) blocks, each
         * needs a step; more steps than answer tokens unmask nothing */
        int steps = p->mdm_steps > 0 ? p->mdm_steps : p->gen_length;
        int nb = p->n_blocks < p->gen_length ? p->n_blocks : p->gen_length;
        if (nb < 1) nb = 1;
        if (steps < nb || steps > p->gen_length) {
            set_param(r, "steps");
            rf_set_error("\"steps\" (%d) must be in [%d, %d]: at least one per block (\"blocks\") and at most "
                         "one per answer token (max_tokens)", steps, nb, p->gen_length);
            return -1;
        }
    }
    /* ReFusion (the rolling slot too) decodes whole slots: a slot larger
     * than the answer pads it with work that is thrown away. Small slots
     * (RF_SERVE_SMALL_SLOT, and the server's own default) are always
     * allowed, so that a client may keep one slot size for every length. */
    int slots = p->method == RF_METHOD_REFUSION || p->rolling;
    int small = defaults->gen.slot_size > RF_SERVE_SMALL_SLOT ? defaults->gen.slot_size : RF_SERVE_SMALL_SLOT;
    int cap = p->gen_length > small ? p->gen_length : small;
    if (slots && p->slot_size > cap) {
        set_param(r, rf_req_field(o, "slot_size") ? "slot_size" : "max_tokens");
        rf_set_error("\"slot_size\" (%d) must not exceed %d (max_tokens, or %d for any length): the answer is "
                     "decoded in whole slots", p->slot_size, cap, small);
        return -1;
    }
    return 0;
}

int64_t rf_serve_work_positions(const rf_serve_req *r) {
    const rf_params *p = &r->p;
    int64_t P = r->n_prompt, G = p->gen_length, S = p->slot_size > 0 ? p->slot_size : 1, one;
    if (p->method == RF_METHOD_MDM) {
        /* no cache: every step feeds prompt and answer */
        one = (int64_t)(p->mdm_steps > 0 ? p->mdm_steps : p->gen_length) * (P + G);
    } else if (p->rolling) {
        /* a call per kept token at worst, each feeding the draft window of
         * two slots behind it */
        one = P + G * (2 * S + 1);
    } else if (r->ar) {
        one = P + G;
    } else {
        /* plan-and-infill: a plan commits at least one slot and feeds the
         * block's masks (and, with lookahead, the next plan's: twice); a
         * slot's infilling accepts at least one token per draft + verify
         * pair of S-position calls (the re-feed: S + 1) */
        int64_t Gp = (G + S - 1) / S * S, n_slots = Gp / S, nb = p->n_blocks < 1 ? 1 : p->n_blocks;
        if (nb > n_slots) nb = n_slots;
        int64_t block = (n_slots - (nb - 1) * (n_slots / nb)) * S; /* the largest, as rf_block_layout cuts */
        one = P + n_slots * (2 * block + 2 * S * (S + 1));
    }
    return one * (r->n_choices > 0 ? r->n_choices : 1);
}

/* "grammar" (GBNF), "json_schema" (a schema, as llama-server takes it) or
 * "response_format" {"type": "json_object"} / {"type": "json_schema",
 * "json_schema": {"schema": ...}}: the answer's constraint (docs/grammar.md).
 * Refused, naming the field: two of them, a decoder that cannot honour a
 * grammar, a schema keyword that cannot be enforced, bad GBNF. */
static int parse_constraint(json_t *o, const rf_tokenizer *tok, rf_serve_req *r) {
    json_t *g = rf_req_field(o, "grammar"), *js = rf_req_field(o, "json_schema"), *rfmt = rf_req_field(o, "response_format");
    const char *type = rfmt ? json_string_value(json_object_get(rfmt, "type")) : NULL;
    int json_mode = type && strcmp(type, "text");
    int n = (g != NULL) + (js != NULL) + json_mode + (r->tool_gbnf != NULL);
    if (!n) return 0;
    const char *param = g ? "grammar" : js ? "json_schema" : json_mode ? "response_format" : "tool_choice";
    set_param(r, param);
    if (n > 1) {
        rf_set_error("give at most one of \"grammar\", \"json_schema\", a JSON \"response_format\" and a "
                     "required or named \"tool_choice\"");
        return -1;
    }
    if (!tok) {
        rf_set_error("\"%s\" needs the model's tokenizer, and this model has none", param);
        return -1;
    }
    char *gbnf = NULL;
    if (r->tool_gbnf) {
        gbnf = rf_strdup(r->tool_gbnf);
    } else if (g) {
        if (!json_is_string(g)) {
            rf_set_error("\"grammar\" must be a string (GBNF)");
            return -1;
        }
        gbnf = rf_strdup(json_string_value(g));
    } else {
        json_t *schema = js;
        if (!js && !strcmp(type, "json_object")) schema = json_object_get(rfmt, "schema"); /* llama-server's */
        if (!js && !strcmp(type, "json_schema")) {
            json_t *w = json_object_get(rfmt, "json_schema");
            if (!(schema = json_is_object(w) ? json_object_get(w, "schema") : NULL)) {
                rf_set_error("\"response_format\": {\"type\": \"json_schema\"} needs \"json_schema\": "
                             "{\"schema\": {...}}");
                return -1;
            }
        }
        gbnf = schema ? rf_json_schema_to_gbnf(schema) : rf_strdup(rf_json_object_gbnf());
        if (!gbnf) {
            r->err_unsupported = strstr(rf_last_error(), "not supported") || strstr(rf_last_error(), "not enforced");
            return -1;
        }
    }
    r->constraint = rf_constraint_from_gbnf(tok, gbnf, strlen(gbnf));
    free(gbnf);
    if (!r->constraint) return -1;
    r->p.constraint = r->constraint;
    r->err_param[0] = 0;
    return 0;
}

int rf_serve_parse(const char *body, size_t len, rf_req_kind kind, const rf_model *m,
                   const rf_tokenizer *tok, const rf_decode_opts *defaults, rf_serve_req *out) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->d = *defaults;
    out->p = defaults->gen;
    out->p.on_tokens = NULL, out->p.on_event = NULL, out->p.user = NULL, out->p.cancel = NULL;
    out->ar = defaults->gen.method == RF_METHOD_AR;
    out->n_choices = 1;
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
    if (rf_serve_parse_tools(o, out)) goto out;
    if (parse_constraint(o, tok, out)) goto out;
    if (parse_logprobs(o, out)) goto out;
    if (kind == RF_REQ_CHAT ? rf_req_messages(o, tok, out) : rf_req_prompt(o, tok, out)) {
        if (!out->err_param[0]) set_param(out, kind == RF_REQ_CHAT ? "messages" : "prompt");
        goto out;
    }
    /* over the context: OpenAI's code, naming the messages (or prompt) */
    const char *prompt_field = kind == RF_REQ_CHAT ? "messages" : "prompt";
    if (out->d.ctx_size > 0 && (long)out->n_prompt + out->p.gen_length > out->d.ctx_size) {
        rf_set_error("prompt (%d tokens) + max_tokens (%d) exceed the server's context limit of %d tokens",
                     out->n_prompt, out->p.gen_length, out->d.ctx_size);
        set_param(out, prompt_field);
        out->err_code = "context_length_exceeded";
        goto out;
    }
    int ar_like = out->p.method != RF_METHOD_REFUSION;
    int64_t S = out->p.slot_size > 0 ? out->p.slot_size : 1; /* ReFusion decodes whole slots */
    int64_t answer = ar_like ? out->p.gen_length : ((int64_t)out->p.gen_length + S - 1) / S * S;
    if ((int64_t)out->n_prompt + answer > m->cfg.max_pos) {
        rf_set_error("prompt (%d tokens) + answer (%lld tokens%s) exceed the model's context (%d tokens)",
                     out->n_prompt, (long long)answer, ar_like ? "" : ", max_tokens in whole slots",
                     m->cfg.max_pos);
        set_param(out, prompt_field);
        out->err_code = "context_length_exceeded";
        goto out;
    }
    if (rf_gen_check(m, out->prompt, out->n_prompt, &out->p, ar_like)) goto out;
    if (check_work(o, defaults, out)) goto out;
    rc = 0;
out:
    json_decref(o);
    if (rc) {
        free(out->prompt);
        free(out->prompt_text);
        out->prompt = NULL, out->n_prompt = 0, out->prompt_text = NULL;
        rf_constraint_free(out->constraint);
        out->constraint = NULL, out->p.constraint = NULL;
        json_decref(out->tools), free(out->tool_gbnf);
        out->tools = NULL, out->tool_gbnf = NULL;
    }
    return rc;
}

void rf_serve_req_free(rf_serve_req *r) {
    free(r->prompt);
    free(r->prompt_text);
    r->prompt = NULL, r->n_prompt = 0, r->prompt_text = NULL;
    rf_constraint_free(r->constraint);
    r->constraint = NULL, r->p.constraint = NULL;
    json_decref(r->tools), free(r->tool_gbnf);
    r->tools = NULL, r->tool_gbnf = NULL;
}
