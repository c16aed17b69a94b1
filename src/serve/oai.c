/* oai.c - OpenAI's response shapes: the envelope, choices, refusion's
 * statistics, error bodies, and a job's output buffer of SSE events. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/oai.h"
#include "util/util.h"

/* ---- output buffer (s->mu held) ---- */
void rf_job_out_append(job *j, const char *p, size_t n) {
    if (j->out_len + n + 1 > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap : 1024;
        while (cap < j->out_len + n + 1) cap *= 2;
        char *g = rf_malloc(cap);
        if (j->out_len) memcpy(g, j->out, j->out_len);
        free(j->out);
        j->out = g, j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, p, n);
    j->out_len += n;
    j->out[j->out_len] = 0;
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

/* One SSE event "data: <txt>\n\n" of text already built (txt is consumed). */
void rf_job_sse_text_locked(job *j, char *txt) {
    rf_job_out_append(j, "data: ", 6);
    rf_job_out_append(j, txt, strlen(txt));
    rf_job_out_append(j, "\n\n", 2);
    free(txt);
}
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
                      int chunk) {
    json_t *c = json_pack("{s:i}", "index", index);
    if (j->req.kind == RF_REQ_COMPLETION) {
        json_object_set_new(c, "text", jstr(text));
        json_object_set_new(c, "logprobs", json_null());
    } else {
        json_t *m = json_object();
        if (!chunk) json_object_set_new(m, "role", json_string("assistant"));
        json_object_set_new(m, "content", jstr(text));
        json_object_set_new(c, chunk ? "delta" : "message", m);
    }
    json_object_set_new(c, "token_ids", ids_json(ids, n));
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    return c;
}

/* The decoder's statistics: how many tokens each model call produced (with
 * n > 1 choices: over all of them, see run_job). */
json_t *rf_oai_stats(const job *j, const rf_stats *r) {
    const rf_gen_params *p = &j->req.p;
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
