/* http.c - libmicrohttpd glue: the listening socket, routing, request
 * bodies, JSON / SSE responses, start and stop.
 *
 * MHD runs one thread per connection, so a handler may block: a plain
 * generation request waits for its job to finish, a streamed one blocks in
 * the content reader until the worker has produced more events. */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "cli/api_params.h"
#include "serve/serve_impl.h"
#include "util/util.h"

#ifndef MHD_HTTP_CONTENT_TOO_LARGE
#define MHD_HTTP_CONTENT_TOO_LARGE 413
#endif

void rf_serve_config_default(rf_serve_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->max_body = 4u << 20;
    c->max_queue = 64;
    c->max_connections = 256;
    c->max_per_client = 16;
    c->timeout_s = 10;
    c->queue_wait_s = 300;
    c->max_request_bytes = 0;
    c->max_request_positions = 1LL << 23;
    c->verbose = 1;
    c->workers = 2;
    c->cors_origin = "*";
    rf_decode_opts_default(&c->defaults);
}

/* ---- routes --------------------------------------------------------------------- */
typedef enum { R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_NONE } route_id;
static const struct {
    const char *path, *method;
    int prefix; /* path is a prefix: /v1/models/{id} */
} routes[] = {
    [R_HEALTH] = {"/health", "GET", 0},
    [R_METRICS] = {"/metrics", "GET", 0},
    [R_MODELS] = {"/v1/models", "GET", 0},
    [R_MODEL] = {"/v1/models/", "GET", 1},
    [R_COMPLETIONS] = {"/v1/completions", "POST", 0},
    [R_CHAT] = {"/v1/chat/completions", "POST", 0},
};

/* Per-connection request state (MHD's con_cls). */
typedef struct {
    route_id route;
    char *body;
    size_t len;
    int too_large;
    int no_memory;         /* the body could not be stored */
    int status;            /* what we answered, for the log */
    double t0;
    char method[8], url[72];
    const char *model_id;  /* R_MODEL: the {id} (points into MHD's url) */
} request;

/* for the log: what the client sent, cut to size, control characters as '?' */
static void copy_printable(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = 0;
}

/* ---- responses ------------------------------------------------------------------ */
/* the server, for the headers every answer carries (set at start) */
static void add_common_headers(const rf_server *s, struct MHD_Response *r) {
    if (s->cfg.cors_origin && *s->cfg.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors_origin);
        if (strcmp(s->cfg.cors_origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
    }
}

static void count_status(rf_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 100 && status < 600) s->n_http[status / 100]++;
    pthread_mutex_unlock(&s->mu);
}

/* txt: malloc'd, taken over; NULL (a JSON body that could not be built)
 * answers 500 with a fixed error body instead */
static enum MHD_Result send_text(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt,
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
    add_common_headers(s, r);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, routes[q->route].method);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    q->status = status;
    count_status(s, status);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt) {
    return send_text(c, s, q, status, txt, "application/json");
}

static enum MHD_Result send_obj(struct MHD_Connection *c, rf_server *s, request *q, int status, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    return send_json(c, s, q, status, txt);
}

/* OpenAI's shape: {"error": {"message", "type", "param", "code"}}, code a
 * string or null */
static enum MHD_Result send_error_p(struct MHD_Connection *c, rf_server *s, request *q, int status, const char *param,
                                    const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error_p(struct MHD_Connection *c, rf_server *s, request *q, int status, const char *param,
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
    return send_json(c, s, q, status, rf_serve_error_body(msg, type, param, code));
}
#define send_error(c, s, q, status, ...) send_error_p(c, s, q, status, NULL, NULL, __VA_ARGS__)

static enum MHD_Result send_health(struct MHD_Connection *c, request *q, rf_server *s) {
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    json_t *o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I}", "status", stopping ? "stopping" : "ok", "model",
                          s->model_name, "active", s->n_active, "requests_done", (json_int_t)s->n_done,
                          "tokens_generated", (json_int_t)s->tokens_done, "uptime_s",
                          (json_int_t)(time(NULL) - s->started), "requests_cancelled", (json_int_t)s->n_cancelled,
                          "calls_after_cancel", (json_int_t)s->calls_after_cancel);
    size_t held = 0;
    for (int i = 0; i < s->cfg.workers; i++) held += s->buffer_bytes[i];
    json_object_set_new(o, "buffer_allocs", json_integer((json_int_t)s->buffer_allocs));
    json_object_set_new(o, "buffer_bytes", json_integer((json_int_t)held));
    pthread_mutex_unlock(&s->mu);
    return send_obj(c, s, q, stopping ? 503 : 200, o);
}

/* Prometheus text exposition format, version 0.0.4 */
static enum MHD_Result send_metrics(struct MHD_Connection *c, request *q, rf_server *s) {
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
    M("prompt_tokens_total", "counter", "Prompt tokens of the answered requests.", " %lld", s->prompt_tokens);
    M("completion_tokens_total", "counter", "Answer tokens returned.", " %lld", s->tokens_done);
    M("generation_seconds_total", "counter", "Decoder time of the answered requests.", " %.6f", s->gen_seconds);
    M("tokens_per_second", "gauge", "Answer tokens per second of decoder time, over all answered requests.", " %.3f",
      s->gen_seconds > 0 ? s->tokens_done / s->gen_seconds : 0.0);
    M("request_latency_seconds_sum", "counter", "Queued-to-done time of the answered requests.", " %.6f", s->latency_sum);
    M("request_latency_seconds_count", "counter", "Answered requests in the latency sum.", " %lu", s->n_latency);
    M("queue_depth", "gauge", "Generation requests waiting for a worker.", " %d", queued);
    M("requests_running", "gauge", "Generations running now.", " %d", s->n_running);
    M("requests_running_peak", "gauge", "The most generations running at once since start.", " %d", s->peak_running);
    M("workers", "gauge", "Worker threads (requests served in parallel).", " %d", s->n_workers);
#undef M
    pthread_mutex_unlock(&s->mu);
    fclose(f);
    return send_text(c, s, q, 200, txt, "text/plain; version=0.0.4");
}

static json_t *model_json(rf_server *s) {
    const rf_config *k = &s->m->cfg;
    json_t *info = json_pack("{s:i, s:i, s:i, s:i, s:i, s:b}", "vocab_size", k->vocab_size, "context_length",
                             k->max_pos, "hidden_size", k->hidden_size, "layers", k->n_layers, "heads", k->n_heads,
                             "tokenizer", s->tok != NULL);
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->started, "owned_by", "refusion", "refusion", info);
}

static enum MHD_Result send_models(struct MHD_Connection *c, request *q, rf_server *s) {
    if (q->route == R_MODEL) {
        if (strcmp(q->model_id, s->model_name))
            return send_error_p(c, s, q, 404, "model", "model_not_found", "the model '%.100s' does not exist (this "
                                "server has '%s')", q->model_id, s->model_name);
        return send_obj(c, s, q, 200, model_json(s));
    }
    return send_obj(c, s, q, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_json(s)));
}

/* CORS preflight: what browsers ask before a cross-origin POST */
static enum MHD_Result send_preflight(struct MHD_Connection *c, request *q, rf_server *s) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_common_headers(s, r);
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
    count_status(s, 204);
    return rc;
}

/* "Authorization: Bearer <key>", compared in constant time */
static int key_ok(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(key), m = strlen(h);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? h[i] : 0);
    return diff == 0;
}

/* ---- a client that leaves -------------------------------------------------------- */
/* Has the client closed its end of the connection? A zero-timeout poll and a
 * peek: end of file or an error means gone (a pipelined next request is data,
 * not a close). */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

typedef enum { WAIT_OK, WAIT_GONE, WAIT_LATE } wait_result;

/* Wait (s->mu held) until the job has left the queue (until_done = 0) or is
 * done (1), looking at the client's socket every 100 ms: a client that left
 * cancels its job. deadline: rf_now() after which waiting gives up (0: none). */
static wait_result wait_job(rf_server *s, job *j, int fd, int until_done, double deadline) {
    while (until_done ? j->state != JOB_DONE : j->state == JOB_QUEUED) {
        if (client_gone(fd)) {
            rf_serve_cancel_locked(s, j);
            return WAIT_GONE;
        }
        if (deadline > 0 && rf_now() > deadline) return WAIT_LATE;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &s->mu, &ts);
    }
    return WAIT_OK;
}

/* ---- streaming: MHD pulls SSE bytes from the job ---------------------------- */
typedef struct {
    rf_server *s;
    job *j;
    int fd; /* the client's socket, to notice it leaving between events */
} stream_ref;

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ref *r = cls;
    job *j = r->j;
    pthread_mutex_lock(&r->s->mu);
    while (j->out_sent == j->out_len && j->state != JOB_DONE) {
        if (wait_job(r->s, j, r->fd, 1, 0) == WAIT_GONE) {
            pthread_mutex_unlock(&r->s->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = j->out_len - j->out_sent;
    if (n > max) n = max;
    if (n) memcpy(buf, j->out + j->out_sent, n);
    j->out_sent += n;
    pthread_mutex_unlock(&r->s->mu);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* The response is gone (sent, or the client went away). */
static void sse_free(void *cls) {
    stream_ref *r = cls;
    pthread_mutex_lock(&r->s->mu);
    rf_serve_cancel_locked(r->s, r->j); /* nothing when the job is done */
    r->j->abandoned = 1;
    rf_serve_job_unref_locked(r->j);
    pthread_mutex_unlock(&r->s->mu);
    free(r);
}

/* ---- generation requests ---------------------------------------------------- */
static enum MHD_Result generate(struct MHD_Connection *c, request *q, rf_server *s) {
    rf_serve_req req;
    rf_req_kind kind = q->route == R_CHAT ? RF_REQ_CHAT : RF_REQ_COMPLETION;
    if (rf_serve_parse(q->body ? q->body : "", q->len, kind, s->m, s->tok, &s->cfg.defaults, &req)) {
        return send_error_p(c, s, q, 400, req.err_param, req.err_unsupported ? "unsupported_parameter" : NULL, "%s",
                            rf_last_error());
    }
    /* what the decoder will allocate, against the per-request limit */
    rf_params p = rf_params_from_opts(&req.p, req.d.decoder, req.d.steps);
    int64_t need = rf_generate_bytes(s->model, req.n_prompt, &p);
    if ((uint64_t)need > s->cfg.max_request_bytes) {
        rf_serve_req_free(&req);
        return send_error(c, s, q, 400,
                          "this request needs about %.0f MB of working memory; the server allows %.0f MB per "
                          "request (fewer tokens, or --max-request-mb)",
                          need / 1e6, s->cfg.max_request_bytes / 1e6);
    }
    /* the work, against the per-request budget: a few parameters must not
     * buy minutes of model calls */
    int64_t fed = rf_serve_work_positions(&req);
    if (fed > s->cfg.max_request_positions) {
        rf_serve_req_free(&req);
        return send_error(c, s, q, 400,
                          "this request may feed the model up to %lld positions (prompt, max_tokens, slot_size, "
                          "steps, n); the server allows %lld per request (--max-request-positions)",
                          (long long)fed, s->cfg.max_request_positions);
    }
    job *j = rf_serve_submit(s, &req);
    if (!j) {
        rf_serve_req_free(&req);
        return send_error(c, s, q, 503, "%s", rf_last_error());
    }
    int fd = connection_fd(c);
    /* bounded queue wait: a request is not kept waiting forever behind others */
    pthread_mutex_lock(&s->mu);
    wait_result w = wait_job(s, j, fd, 0, rf_now() + s->cfg.queue_wait_s);
    if (w != WAIT_OK) {
        if (w == WAIT_LATE) rf_serve_cancel_locked(s, j);
        rf_serve_job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
        if (w == WAIT_GONE) return MHD_NO; /* nobody to answer: close */
        return send_error(c, s, q, 503, "the request waited %d s in the queue without starting; try again later",
                          s->cfg.queue_wait_s);
    }
    pthread_mutex_unlock(&s->mu);
    if (j->req.stream) {
        stream_ref *r = rf_malloc(sizeof *r);
        r->s = s, r->j = j, r->fd = fd;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, r, sse_free);
        if (!resp) {
            sse_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        add_common_headers(s, resp);
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp); /* sse_free runs when MHD is done with it */
        q->status = 200;
        count_status(s, 200);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    if (wait_job(s, j, fd, 1, 0) == WAIT_GONE) {
        rf_serve_job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
        q->status = 499; /* for the log: the client closed the connection */
        return MHD_NO;
    }
    char *body = j->out;
    int status = j->status;
    j->out = NULL;
    j->abandoned = 1;
    rf_serve_job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
    return send_json(c, s, q, status, body);
}

/* MHD calls this first with the headers, then once per piece of body, then
 * once more with *up_size == 0 when the body is complete. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *up, size_t *up_size, void **con_cls) {
    rf_server *s = cls;
    request *q = *con_cls;
    if (!q) {
        q = rf_calloc(1, sizeof *q);
        *con_cls = q;
        q->t0 = rf_now();
        copy_printable(q->method, sizeof q->method, method);
        copy_printable(q->url, sizeof q->url, url);
        q->route = R_NONE;
        for (int i = 0; i < R_NONE; i++) {
            size_t n = strlen(routes[i].path);
            if (routes[i].prefix ? !strncmp(url, routes[i].path, n) && url[n] && !strchr(url + n, '/')
                                 : !strcmp(url, routes[i].path))
                q->route = (route_id)i, q->model_id = url + n;
        }
        if (!strcmp(method, "OPTIONS")) return send_preflight(c, q, s);
        if (q->route == R_NONE)
            return send_error_p(c, s, q, 404, NULL, "not_found", "no such endpoint: %s %.100s", method, url);
        /* every route but /health needs the key, when there is one */
        if (s->cfg.api_key && q->route != R_HEALTH && !key_ok(c, s->cfg.api_key))
            return send_error_p(c, s, q, 401, NULL, "invalid_api_key",
                                "missing or wrong API key (send the header \"Authorization: Bearer <key>\")");
        const char *want = routes[q->route].method;
        int is_get = !strcmp(want, "GET");
        if (strcmp(method, want) && !(is_get && !strcmp(method, "HEAD")))
            return send_error(c, s, q, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes %s, not %.16s", routes[q->route].path,
                              want, method);
        if (q->route == R_HEALTH) return send_health(c, q, s);
        if (q->route == R_METRICS) return send_metrics(c, q, s);
        if (q->route == R_MODELS || q->route == R_MODEL) return send_models(c, q, s);
        /* refuse an announced oversized body before reading it */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
            return send_error(c, s, q, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is larger than %zu bytes",
                              s->cfg.max_body);
        return MHD_YES;
    }
    if (q->status) { /* answered early: discard the rest */
        *up_size = 0;
        return MHD_YES;
    }
    if (*up_size) {
        if (q->too_large || q->no_memory || q->len + *up_size > s->cfg.max_body) {
            q->too_large |= !q->no_memory;
        } else {
            char *g = rf_try_realloc(q->body, q->len + *up_size + 1);
            if (!g) {
                q->no_memory = 1;
                *up_size = 0;
                return MHD_YES;
            }
            q->body = g;
            memcpy(q->body + q->len, up, *up_size);
            q->len += *up_size;
            q->body[q->len] = 0;
        }
        *up_size = 0;
        return MHD_YES;
    }
    if (q->no_memory) return send_error(c, s, q, 503, "out of memory storing the request body");
    if (q->too_large)
        return send_error(c, s, q, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is larger than %zu bytes",
                          s->cfg.max_body);
    return generate(c, q, s);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    rf_server *s = cls;
    request *q = *con_cls;
    if (!q) return;
    if (s->cfg.verbose)
        fprintf(stderr, "refusion serve: %s %s -> %d%s (%.3f s)\n", q->method, q->url, q->status,
                why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ", connection closed early", rf_now() - q->t0);
    free(q->body);
    free(q);
    *con_cls = NULL;
}

/* ---- start / stop ------------------------------------------------------------- */
/* A listening socket on host:port, so that failures get a clear message
 * (MHD would only print its own) and port 0 tells us what it picked. */
static int listen_on(const char *host, int port, int *fd_out, int *port_out, int *v6) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    int e = getaddrinfo(host, ps, &hints, &ai);
    if (e) {
        rf_set_error("cannot resolve host '%s': %s", host, gai_strerror(e));
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
        rf_set_error("cannot listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t n = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &n);
    *port_out = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    *fd_out = fd;
    return 0;
}

static char *basename_of(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    char *s = rf_malloc(n - b + 1);
    memcpy(s, dir + b, n - b);
    s[n - b] = 0;
    return s;
}

/* no new jobs; the workers finish the running ones and fail the queued ones */
static void stop_workers(rf_server *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->queue_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_workers; i++) pthread_join(s->workers[i].thread, NULL);
}

static void free_workers(rf_server *s) {
    for (int i = 0; i < s->cfg.workers; i++) rf_session_free(s->workers[i].sess);
    free(s->workers);
    free(s->buffer_bytes);
}

rf_server *rf_serve_start(const refusion_model *m, const refusion_tokenizer *tok, const rf_serve_config *c) {
    rf_server *s = rf_calloc(1, sizeof *s);
    s->model = m, s->tokenizer = tok, s->cfg = *c;
    s->m = rf_api_model(m), s->tok = tok ? rf_api_tokenizer(tok) : NULL;
    if (s->cfg.max_queue < 1) s->cfg.max_queue = 1;
    if (s->cfg.max_connections < 1) s->cfg.max_connections = 1;
    if (s->cfg.timeout_s < 1) s->cfg.timeout_s = 1;
    if (s->cfg.queue_wait_s < 1) s->cfg.queue_wait_s = 1;
    if (!s->cfg.max_request_bytes) s->cfg.max_request_bytes = rf_phys_mem() ? rf_phys_mem() / 2 : (size_t)1 << 31;
    s->model_name = c->model_name ? rf_strdup(c->model_name) : basename_of(s->m->dir ? s->m->dir : "refusion");
    /* the id goes into every answer's JSON: refuse one that cannot */
    if (rf_serve_check_id(s->model_name, c->model_name ? "--name" : "the model directory's name (give --name)")) {
        free(s->model_name);
        free(s);
        return NULL;
    }
    s->started = time(NULL);
    int v6 = 0;
    if (listen_on(c->host ? c->host : "127.0.0.1", c->port, &s->listen_fd, &s->port, &v6)) {
        free(s->model_name);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->queue_cv, NULL);
    if (s->cfg.workers < 1) s->cfg.workers = 1;
    s->workers = rf_calloc((size_t)s->cfg.workers, sizeof *s->workers);
    s->buffer_bytes = rf_calloc((size_t)s->cfg.workers, sizeof *s->buffer_bytes);
    for (int i = 0; i < s->cfg.workers; i++) {
        s->workers[i].s = s;
        if (!(s->workers[i].sess = rf_session_new(m))) goto fail;
    }
    for (; s->n_workers < s->cfg.workers; s->n_workers++)
        if (pthread_create(&s->workers[s->n_workers].thread, NULL, rf_serve_worker_main, &s->workers[s->n_workers])) {
            rf_set_error("cannot start worker thread %d", s->n_workers + 1);
            stop_workers(s);
            goto fail;
        }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | (v6 ? MHD_USE_IPv6 : 0);
    /* Every connection is a thread: the total and the share of one client
     * are capped, and a client that stops sending its request for timeout_s
     * is dropped, so half-sent requests cannot hold every slot (slowloris)
     * and /health keeps answering. A running generation is not affected: its
     * connection thread waits in our handler, not in MHD's reads. */
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)s->cfg.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                 (unsigned)(s->cfg.max_per_client > 0 ? s->cfg.max_per_client : 0),
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s, MHD_OPTION_END);
    if (!s->daemon) {
        rf_set_error("cannot start the HTTP server (libmicrohttpd) on %s:%d", c->host, s->port);
        stop_workers(s);
        goto fail;
    }
    return s;
fail:
    free_workers(s);
    close(s->listen_fd);
    pthread_cond_destroy(&s->queue_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->model_name);
    free(s);
    return NULL;
}

int rf_serve_port(const rf_server *s) { return s->port; }

void rf_serve_stop(rf_server *s) {
    if (!s) return;
    /* 1. no new jobs; the workers finish the running ones and fail the
     *    queued ones, so no connection thread is left waiting on a job */
    stop_workers(s);
    /* 2. close the connections and join their threads (MHD closes the
     *    listening socket it was given too) */
    MHD_stop_daemon(s->daemon);
    pthread_cond_destroy(&s->queue_cv);
    pthread_mutex_destroy(&s->mu);
    free_workers(s);
    free(s->model_name);
    free(s);
}
