/* oai.c - OpenAI's response shapes: the envelope, choices, refusion's
 * statistics, error bodies, and a job's output buffer of SSE events. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/oai.h"
#include "util/util.h"

/* ---- output buffer (s->mu held) ---- */
/* The close of a stream that a fault cut short: an error event, then
 * [DONE] (llama-server's native stream: the event alone). Every append
 * keeps room for it, so that closing allocates nothing and cannot fail. */
#define CUT_EVENT(what)                                                                                   \
    "data: {\"error\":{\"message\":\"generation failed: " what " while the answer was being sent\","     \
    "\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"
static const char cut_oom[] = CUT_EVENT("out of memory"), cut_internal[] = CUT_EVENT("an internal error"),
                  done_line[] = "data: [DONE]\n\n";
#define CLOSE_ROOM (sizeof cut_internal + sizeof done_line) /* the longer event, and the 0s spare */

/* the room for n more bytes (and the terminating 0), and the close's
 * beyond them: 0, or -1 with nothing changed when the allocation failed */
static int out_reserve(job *j, size_t n) {
    if (rf_faults.reply_append && rf_faults.reply_append()) return -1;
    size_t need = j->out_len + n + 1 + CLOSE_ROOM, cap = j->out_cap;
    if (need <= cap) return 0;
    cap = cap * 2 > need ? cap * 2 : need < 1024 ? 1024 : need;
    char *p = rf_try_realloc(j->out, cap);
    if (!p) return -1;
    j->out = p, j->out_cap = cap;
    return 0;
}

static void out_put(job *j, const char *p, size_t n) {
    memcpy(j->out + j->out_len, p, n);
    j->out_len += n;
    j->out[j->out_len] = 0;
}

void rf_job_sse_done_locked(job *j) {
    if (out_reserve(j, sizeof done_line - 1)) rf_oom(sizeof done_line - 1);
    out_put(j, done_line, sizeof done_line - 1);
}

void rf_job_stream_cut_locked(job *j, int oom) {
    const char *ev = oom ? cut_oom : cut_internal;
    const size_t n = strlen(ev) + (j->req.kind == RF_REQ_NATIVE ? 0 : sizeof done_line - 1);
    if (j->out_len + n + 1 > j->out_cap) { /* nothing appended yet: a small block, or the stream ends bare */
        char *p = rf_try_realloc(j->out, j->out_len + n + 1);
        if (!p) return;
        j->out = p, j->out_cap = j->out_len + n + 1;
    }
    out_put(j, ev, strlen(ev));
    if (j->req.kind != RF_REQ_NATIVE) out_put(j, done_line, sizeof done_line - 1);
}

/* One SSE event "data: <compact json>\n\n" (o is consumed); floats with 6
 * significant digits, as in a plain answer (0.6, not 0.59999999999999998). */
void rf_job_sse_append_locked(job *j, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!txt) txt = rf_serve_error_body("an event of the answer could not be built", "server_error", NULL, NULL);
    rf_job_sse_text_locked(j, txt);
    pthread_cond_broadcast(&j->cv);
}

/* One SSE event "[event: <name>\n]data: <txt>\n\n" of text already built
 * (txt is consumed): the whole event or none of it. */
static void sse_put(job *j, const char *name, char *txt) {
    const size_t n = strlen(txt), h = name ? strlen(name) + 8 : 0;
    if (out_reserve(j, h + n + 8)) {
        free(txt);
        rf_oom(h + n + 8);
    }
    if (name) {
        out_put(j, "event: ", 7);
        out_put(j, name, h - 8);
        out_put(j, "\n", 1);
    }
    out_put(j, "data: ", 6);
    out_put(j, txt, n);
    out_put(j, "\n\n", 2);
    free(txt);
}

void rf_job_sse_text_locked(job *j, char *txt) { sse_put(j, NULL, txt); }
void rf_job_sse_named_locked(job *j, const char *name, char *txt) { sse_put(j, name, txt); }
void rf_job_sse_event(rf_server *s, job *j, json_t *o) {
    pthread_mutex_lock(&s->mu);
    rf_job_sse_append_locked(j, o);
    pthread_mutex_unlock(&s->mu);
}

/* ---- JSON pieces ------------------------------------------------------------------ */
/* Decoded text is repaired UTF-8, but never let a string we cannot encode
 * drop a field: fall back to U+FFFD. */
static json_t *jstr(const char *s) {
    json_t *v = json_string(s ? s : "");
    return v ? v : json_string("\xef\xbf\xbd");
}

static json_t *ids_json(const int32_t *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* {"id", "object", "created", "model"} of every response and chunk */
json_t *rf_oai_envelope(const rf_server *s, const job *j, int chunk) {
    const char *object = j->req.kind == RF_REQ_COMPLETION ? "text_completion"
                         : chunk                         ? "chat.completion.chunk"
                                                         : "chat.completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", s->model_name);
}

/* choices[index]: the text (a piece of it when streaming) and its token ids */
json_t *rf_oai_choice(const job *j, int index, const char *text, const int32_t *ids, int n, const char *finish,
                      int chunk, json_t *logprobs) {
    json_t *c = json_pack("{s:i}", "index", index);
    if (j->req.kind == RF_REQ_COMPLETION) {
        json_object_set_new(c, "text", jstr(text));
        json_object_set_new(c, "logprobs", logprobs ? logprobs : json_null());
    } else {
        json_t *m = json_object();
        if (!chunk) json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", jstr(text));
        json_object_set_new(c, chunk ? "delta" : "message", m);
        if (logprobs) json_object_set_new(c, "logprobs", logprobs);
    }
    json_object_set_new(c, "token_ids", ids_json(ids, n));
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

/* ---- log-probabilities ---------------------------------------------------------- */
/* A token's text as OpenAI gives it: its bytes when they are UTF-8, else
 * "bytes:\xNN..." (a piece of a character); *bytes: the byte values. */
static json_t *token_text(const rf_tokenizer *tok, int id, json_t **bytes) {
    int n = 0;
    const char *b = tok ? rf_tok_bytes(tok, id, &n) : NULL;
    if (!b) n = 0;
    *bytes = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)b[i]));
    size_t bad;
    json_t *t = n == 0 ? json_string("") : rf_utf8_check(b, (size_t)n, &bad) ? NULL : json_stringn(b, (size_t)n);
    if (t) return t;
    char *x = rf_malloc(6 + 4 * (size_t)n + 1), *p = x + sprintf(x, "bytes:");
    for (int i = 0; i < n; i++) p += sprintf(p, "\\x%02x", (unsigned char)b[i]);
    t = json_string(x);
    free(x);
    return t ? t : json_string("");
}

/* {"token", "logprob", "bytes"} (chat) or {"id", "token", "bytes", "logprob"}
 * (llama-server's /completion) */
static json_t *token_entry(const rf_tokenizer *tok, int id, float logprob, int native) {
    json_t *bytes, *t = token_text(tok, id, &bytes);
    json_t *o = json_pack("{s:o, s:f, s:o}", "token", t, "logprob", (double)logprob, "bytes", bytes);
    if (native) json_object_set_new(o, "id", json_integer(id));
    return o;
}

json_t *rf_oai_logprobs(const rf_server *s, const job *j, const int32_t *ids, const rf_token_logprob *lp,
                        const size_t *text_offset, int n) {
    if (!j->req.p.logprobs) return NULL;
    if (!lp) n = 0; /* no tokens yet */
    const rf_tokenizer *tok = s->tok;
    int chat = j->req.kind == RF_REQ_CHAT, native = j->req.kind == RF_REQ_NATIVE;
    json_t *content = json_array(), *tokens = json_array(), *token_lp = json_array(), *tops = json_array(),
           *offsets = json_array();
    for (int i = 0; i < n; i++) {
        if (tok && rf_tok_is_special(tok, ids[i])) continue; /* not in the text either */
        if (chat || native) {
            json_t *e = token_entry(tok, ids[i], lp[i].logprob, native), *top = json_array();
            for (int k = 0; k < lp[i].n_top; k++)
                json_array_append_new(top, token_entry(tok, lp[i].top_token[k], lp[i].top_logprob[k], native));
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(content, e);
            continue;
        }
        /* the completions' legacy shape: parallel lists, the alternatives as {text: logprob} */
        json_t *bytes, *top = json_object();
        json_array_append_new(tokens, token_text(tok, ids[i], &bytes));
        json_decref(bytes);
        json_array_append_new(token_lp, json_real(lp[i].logprob));
        for (int k = 0; k < lp[i].n_top; k++) {
            json_t *t = token_text(tok, lp[i].top_token[k], &bytes);
            json_decref(bytes);
            if (!json_object_get(top, json_string_value(t))) /* two tokens of one text: the likelier */
                json_object_set_new(top, json_string_value(t), json_real(lp[i].top_logprob[k]));
            json_decref(t);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offsets, json_integer((json_int_t)text_offset[i]));
    }
    json_t *o;
    if (native) o = json_incref(content);
    else if (chat) o = json_pack("{s:O, s:n}", "content", content, "refusal");
    else o = json_pack("{s:O, s:O, s:O, s:O}", "tokens", tokens, "token_logprobs", token_lp, "top_logprobs", tops,
                       "text_offset", offsets);
    json_decref(content), json_decref(tokens), json_decref(token_lp), json_decref(tops), json_decref(offsets);
    return o;
}

/* The decoder's statistics: how many tokens each model call produced (with
 * n > 1 choices: over all of them, see run_job). */
json_t *rf_oai_stats(const job *j, const rf_stats *r) {
    const rf_params *p = &j->req.p;
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:b}", "mode", rf_method_name(j->req.p.method),
                          "model_calls", r->n_calls, "steps", r->n_steps, "tpf", r->tpf, "tokens_per_call",
                          r->tokens_per_call, "tokens_per_s", r->tokens_per_s, "wall_s", r->seconds,
                          "hit_eos", r->hit_eos);
    if (j->req.n_choices > 1) json_object_set_new(o, "choices", json_integer(j->req.n_choices));
    /* every setting of the shared table, as the request names it */
    json_t *set = json_object();
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *row = &rf_decode_table[i];
        if (!row->http) continue;
        char b[48]; /* as the option prints it: 0.6, not 0.60000002 */
        rf_opt_format(row, &j->req.d, b, sizeof b);
        json_object_set_new(set, row->http, row->type == RF_OPT_FLOAT    ? json_real(strtod(b, NULL))
                                            : row->type == RF_OPT_CHOICE ? json_string(b)
                                            : row->type == RF_OPT_FLAG   ? json_boolean(!strcmp(b, "on"))
                                                                         : json_integer(strtoll(b, NULL, 10)));
    }
    json_object_set_new(set, "max_tokens", json_integer(p->gen_length));
    json_object_set_new(o, "settings", set);
    /* where each of them came from: default, generation_config.json, flag (the server's) or request */
    json_t *src = json_object();
    for (int i = 0; i < rf_decode_table_n; i++)
        if (rf_decode_table[i].http)
            json_object_set_new(src, rf_decode_table[i].http, json_string(rf_src_names[j->req.d.src[i]]));
    json_object_set_new(o, "settings_source", src);
    return o;
}

/* OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
 * Never NULL: every string that is not UTF-8 is replaced (json_string
 * refuses it), and a failed allocation leaves a smaller object, not none. */
static json_t *str_or(const char *s, const char *fallback) {
    json_t *v = s ? json_string(s) : NULL;
    return v ? v : fallback ? json_string(fallback) : json_null();
}
json_t *rf_serve_error_json(const char *msg, const char *type, const char *param, const char *code) {
    json_t *e = json_object(), *o = json_object();
    if (!e || !o) {
        json_decref(e);
        json_decref(o);
        return NULL;
    }
    json_object_set_new(e, "message", str_or(msg, "(an error message that is not UTF-8)"));
    json_object_set_new(e, "type", str_or(type, "server_error"));
    json_object_set_new(e, "param", param && *param ? str_or(param, NULL) : json_null());
    json_object_set_new(e, "code", str_or(code, NULL));
    json_object_set_new(o, "error", e);
    return o;
}

char *rf_serve_error_body(const char *msg, const char *type, const char *param, const char *code) {
    json_t *o = rf_serve_error_json(msg, type, param, code);
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return txt ? txt
               : rf_strdup("{\"error\":{\"message\":\"the error reply could not be built\",\"type\":"
                           "\"server_error\",\"param\":null,\"code\":null}}");
}
