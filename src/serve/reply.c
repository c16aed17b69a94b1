/* reply.c - the server's answers: text, JSON and OpenAI error bodies, each
 * with the headers every answer carries and counted by status class for
 * /metrics; and the routes answered at once from the server's state
 * (/health, /metrics, /v1/models, the CORS preflight) and the API key check.
 * Every answer goes through here, so none misses the headers or the count. */
#include <jansson.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http_impl.h"
#include "serve/routes_llama.h"

/* the headers every answer carries: Connection: close on a connection's
 * last request, the CORS origin when one is set */
void rf_http_common_headers(const rf_server *s, const request *q, struct MHD_Response *r) {
    if (q->last) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (s->cfg.cors_origin && *s->cfg.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors_origin);
        if (strcmp(s->cfg.cors_origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
    }
}

void rf_http_count_status(rf_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 100 && status < 600) s->n_http[status / 100]++;
    pthread_mutex_unlock(&s->mu);
}

/* txt: malloc'd, taken over; NULL (a JSON body that could not be built)
 * answers 500 with a fixed error body instead */
enum MHD_Result rf_http_send_text(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt,
                                  const char *type) {
    if (!txt) {
        txt = rf_serve_error_body("the reply could not be built", "server_error", NULL, NULL);
        status = 500, type = "application/json";
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(txt);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    rf_http_common_headers(s, q, r);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, q->llama >= 0 ? rf_llama_route_method(q->llama)
                                                                        : rf_http_routes[q->route].method);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    rf_http_count_status(s, status);
    return rc;
}

enum MHD_Result rf_http_send_json(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt) {
    return rf_http_send_text(c, s, q, status, txt, "application/json");
}

static enum MHD_Result send_obj(struct MHD_Connection *c, rf_server *s, request *q, int status, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    return rf_http_send_json(c, s, q, status, txt);
}

/* OpenAI's shape: {"error": {"message", "type", "param", "code"}}, code a
 * string or null */
enum MHD_Result rf_http_send_error(struct MHD_Connection *c, rf_server *s, request *q, int status, const char *param,
                                   const char *code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one line, whatever the client sent (URLs are unescaped by MHD) */
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
    const char *type = status >= 500 ? "server_error" : status == 401 ? "authentication_error" : "invalid_request_error";
    json_t *utf8 = json_string(msg); /* NULL: not UTF-8 (cut, or from the URL), keep the ASCII */
    if (!utf8)
        for (char *p = msg; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    json_decref(utf8);
    return rf_http_send_json(c, s, q, status, rf_serve_error_body(msg, type, param, code));
}

/* show_model: 0 when a key is set and the client did not send it (the
 * model's id is what /v1/models guards) */
enum MHD_Result rf_http_send_health(struct MHD_Connection *c, request *q, rf_server *s, int show_model) {
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I}", "status", stopping ? "stopping" : "ok",
                          "active", s->n_active, "requests_done", (json_int_t)s->n_done,
                          "tokens_generated", (json_int_t)s->tokens_done, "uptime_s",
                          (json_int_t)(time(NULL) - s->started), "requests_cancelled", (json_int_t)s->n_cancelled,
                          "calls_after_cancel", (json_int_t)s->calls_after_cancel);
    json_object_set_new(o, "generations_timed_out", json_integer((json_int_t)s->n_gen_timeouts));
    json_object_set_new(o, "buffer_allocs", json_integer((json_int_t)s->buffer_allocs));
    json_object_set_new(o, "buffer_bytes", json_integer((json_int_t)s->buffer_bytes));
    if (show_model) json_object_set_new(o, "model", json_string(s->model_name));
    pthread_mutex_unlock(&s->mu);
    return send_obj(c, s, q, stopping ? 503 : 200, o);
}

/* Prometheus text exposition format, version 0.0.4 */
enum MHD_Result rf_http_send_metrics(struct MHD_Connection *c, request *q, rf_server *s) {
    pthread_mutex_lock(&s->mu);
    int queued = s->n_active - s->n_running;
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    if (!f) {
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
#define M(name, type, help, fmt, ...) \
    fputs("# HELP refusion_" name " " help "\n# TYPE refusion_" name " " type "\n", f), \
        fprintf(f, "refusion_" name fmt "\n", __VA_ARGS__)
    fprintf(f, "# HELP refusion_http_responses_total HTTP answers by status class.\n"
               "# TYPE refusion_http_responses_total counter\n");
    for (int k = 1; k < 6; k++) fprintf(f, "refusion_http_responses_total{code=\"%dxx\"} %lu\n", k, s->n_http[k]);
    M("requests_total", "counter", "Generation requests finished (answered, failed or cancelled).", " %lu", s->n_done);
    M("requests_failed_total", "counter", "Generations that failed on the server's side.", " %lu", s->n_failed);
    M("requests_cancelled_total", "counter", "Generations whose client left before the answer.", " %lu", s->n_cancelled);
    M("generation_timeouts_total", "counter", "Generations stopped at --generation-timeout.", " %lu",
      s->n_gen_timeouts);
    M("prompt_tokens_total", "counter", "Prompt tokens of the answered requests.", " %lld", s->prompt_tokens);
    M("completion_tokens_total", "counter", "Answer tokens returned.", " %lld", s->tokens_done);
    M("generation_seconds_total", "counter", "Decoder time of the answered requests.", " %.6f", s->gen_seconds);
    M("tokens_per_second", "gauge", "Answer tokens per second of decoder time, over all answered requests.", " %.3f",
      s->gen_seconds > 0 ? s->tokens_done / s->gen_seconds : 0.0);
    M("request_latency_seconds_sum", "counter", "Queued-to-done time of the answered requests.", " %.6f", s->latency_sum);
    M("request_latency_seconds_count", "counter", "Answered requests in the latency sum.", " %lu", s->n_latency);
    M("queue_depth", "gauge", "Generation requests waiting for a row of the scheduler.", " %d", queued);
    M("requests_running", "gauge", "Generations running now.", " %d", s->n_running);
    M("requests_running_peak", "gauge", "The most generations running at once since start.", " %d", s->peak_running);
    M("parallel", "gauge", "Generations decoded at once at most (--parallel).", " %d", s->cfg.parallel);
    M("batch_calls_total", "counter", "Batched model calls (continuous batching: every generation's calls).",
      " %llu", s->batch_calls);
    M("batch_rows_total", "counter",
      "Rows in the batched model calls, summed over the calls (a generation's row; each forked row of a "
      "plan-and-infill call).",
      " %llu", s->batch_rows);
    M("batch_rows_per_call", "gauge", "Batch occupancy: mean rows per batched model call.", " %.3f",
      s->batch_calls ? (double)s->batch_rows / s->batch_calls : 0.0);
    M("batch_rows_peak", "gauge", "The most rows in one batched model call.", " %d", s->batch_peak);
    M("batch_rolling_rows_total", "counter", "Rows of rolling-slot generations in the batched model calls.", " %llu",
      s->batch_rolling_rows);
    M("batch_mixed_calls_total", "counter", "Batched model calls with a rolling-slot row beside other rows.", " %llu",
      s->batch_mixed_calls);
    M("batch_whole_calls_total", "counter",
      "Model calls of plan-and-infill and MDM generations (each handed in whole) in the batched calls.",
      " %llu", s->batch_whole_calls);
    M("batch_whole_rows_total", "counter", "Rows of those calls in the batched model calls.", " %llu",
      s->batch_whole_rows);
    M("batch_whole_mixed_calls_total", "counter",
      "Batched model calls with a plan-and-infill or MDM call beside another generation's.", " %llu",
      s->batch_whole_mixed_calls);
    M("prefix_cache_hits_total", "counter", "Batched requests that started from a cached prompt prefix.", " %llu",
      s->prefix_hits);
    M("prefix_cache_tokens_total", "counter", "Prompt tokens taken from the prefix cache instead of computed.",
      " %llu", s->prefix_tokens);
    M("prefix_cache_bytes", "gauge", "Bytes held by the prompt-prefix cache (--cache-mb).", " %zu",
      s->prefix_cache_bytes);
    M("connections_open", "gauge", "Open HTTP connections.", " %d", s->n_conns);
    M("connections_refused_total", "counter", "Connections closed at once: over --max-connections.", " %lu",
      s->n_refused);
    M("request_timeouts_total", "counter", "Connections closed by --request-timeout.", " %lu", s->n_request_timeouts);
#undef M
    pthread_mutex_unlock(&s->mu);
    fclose(f);
    return rf_http_send_text(c, s, q, 200, txt, "text/plain; version=0.0.4");
}

static json_t *model_json(rf_server *s) {
    const rf_config *k = &s->m->cfg;
    json_t *info = json_pack("{s:i, s:i, s:i, s:i, s:i, s:b}", "vocab_size", k->vocab_size, "context_length",
                             k->max_pos, "hidden_size", k->hidden_size, "layers", k->n_layers, "heads", k->n_heads,
                             "tokenizer", s->tok != NULL);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->started, "owned_by", "refusion", "refusion", info);
}

enum MHD_Result rf_http_send_models(struct MHD_Connection *c, request *q, rf_server *s) {
    if (q->route == R_MODEL) {
        if (strcmp(q->model_id, s->model_name))
            return rf_http_send_error(c, s, q, 404, "model", "model_not_found",
                                      "the model '%.100s' does not exist (this server has '%s')", q->model_id,
                                      s->model_name);
        return send_obj(c, s, q, 200, model_json(s));
    }
    return send_obj(c, s, q, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(s)));
}

/* CORS preflight: what browsers ask before a cross-origin POST */
enum MHD_Result rf_http_send_preflight(struct MHD_Connection *c, request *q, rf_server *s) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    rf_http_common_headers(s, q, r);
    if (s->cfg.cors_origin && *s->cfg.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", h ? h : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST, OPTIONS");
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    q->status = 204;
    rf_http_count_status(s, 204);
    return rc;
}

/* "Authorization: Bearer <key>", compared in constant time */
int rf_http_key_ok(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(key), m = strlen(h);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? h[i] : 0);
    return diff == 0;
}
