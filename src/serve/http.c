/* http.c - routing and MHD's request callbacks: the state of each request,
 * its body, the route it asks for and the answer. A generation request (and
 * a llama-server POST route) is handed to a parser thread while its
 * connection is parked, so that a slow chat template or prompt holds no event
 * loop; its answer comes from its job. Also the list of open connections,
 * which the watcher walks for the request deadline. */
#include <limits.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http_impl.h"
#include "serve/routes_llama.h"
#include "util/util.h"

#ifndef MHD_HTTP_CONTENT_TOO_LARGE
#define MHD_HTTP_CONTENT_TOO_LARGE 413
#endif

#define send_error(c, s, q, status, ...) rf_http_send_error(c, s, q, status, NULL, NULL, __VA_ARGS__)

/* ---- routes --------------------------------------------------------------------- */
const rf_http_route rf_http_routes[R_NONE] = {
    [R_HEALTH] = {"/health", "GET", 0},
    [R_METRICS] = {"/metrics", "GET", 0},
    [R_MODELS] = {"/v1/models", "GET", 0},
    [R_MODEL] = {"/v1/models/", "GET", 1},
    [R_COMPLETIONS] = {"/v1/completions", "POST", 0},
    [R_CHAT] = {"/v1/chat/completions", "POST", 0},
};

/* for the log: what the client sent, cut to size, control characters as '?' */
static void copy_printable(char *dst, size_t n, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = 0;
}

static int connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- generation requests ---------------------------------------------------- */
/* Keep an error answer for the request (a parser thread cannot answer:
 * the connection belongs to MHD's event loop); returns status. */
static int keep_error(request *q, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int keep_error(request *q, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->err_msg, sizeof q->err_msg, fmt, ap);
    va_end(ap);
    snprintf(q->err_param, sizeof q->err_param, "%s", param ? param : "");
    q->err_code = code;
    return q->answer_status = status;
}

/* A generation request parsed (the chat template rendered, the prompt
 * tokenized), checked against the per-request limits and queued: 0 with
 * q->job set, or the status of the error answer kept in q. Runs in a
 * parser thread: a template or a prompt that takes seconds holds no event
 * loop, so /health and every other connection are answered meanwhile. */
static int prepare_generation(rf_server *s, request *q) {
    rf_serve_req req;
    rf_req_kind kind = q->route == R_CHAT ? RF_REQ_CHAT : RF_REQ_COMPLETION;
    char *native = NULL; /* llama-server's /completion, /infill: their body as a completions one */
    if (q->llama >= 0) {
        int status;
        char param[64];
        if (!(native = rf_llama_translate(s, q->llama, q->body ? q->body : "", q->len, &status, param, sizeof param)))
            return keep_error(q, status, param, status == 501 ? "not_supported" : NULL, "%s", rf_last_error());
    }
    int bad = rf_serve_parse(native ? native : q->body ? q->body : "", native ? strlen(native) : q->len, kind, s->m,
                             s->tok, &s->cfg.defaults, &req);
    free(native);
    if (bad)
        return keep_error(q, 400, req.err_param,
                          req.err_code ? req.err_code : req.err_unsupported ? "unsupported_parameter" : NULL, "%s",
                          rf_last_error());
    if (q->llama >= 0) req.kind = RF_REQ_NATIVE;
    /* what the decoder will allocate, against the per-request limit */
    int64_t need = rf_generate_bytes(s->model, req.n_prompt, &req.p);
    if ((uint64_t)need > s->cfg.max_request_bytes) {
        rf_serve_req_free(&req);
        return keep_error(q, 400, NULL, NULL,
                          "this request needs about %.0f MB of working memory; the server allows %.0f MB per "
                          "request (fewer tokens, or --max-request-mb)",
                          need / 1e6, s->cfg.max_request_bytes / 1e6);
    }
    /* the work, against the per-request budget: a few parameters must not
     * buy minutes of model calls */
    int64_t fed = rf_serve_work_positions(&req);
    if (fed > s->cfg.max_request_positions) {
        rf_serve_req_free(&req);
        return keep_error(q, 400, NULL, NULL,
                          "this request may feed the model up to %lld positions (prompt, max_tokens, slot_size, "
                          "steps, n); the server allows %lld per request (--max-request-positions)",
                          (long long)fed, s->cfg.max_request_positions);
    }
    job *j = rf_serve_submit(s, &req);
    if (!j) {
        rf_serve_req_free(&req);
        return keep_error(q, 503, NULL, NULL, "%s", rf_last_error());
    }
    /* bounded queue wait: a request is not kept waiting forever behind others */
    q->queue_deadline = rf_now() + s->cfg.queue_wait_s;
    q->job = j;
    return 0;
}

/* What a parser thread does with a request: a generation is prepared; one
 * of llama-server's other routes (/tokenize, /apply-template, ...) is
 * answered into q->answer. */
static void parse_request(rf_server *s, request *q) {
    if (q->route != R_NONE || rf_llama_is_generation(q->llama)) {
        prepare_generation(s, q);
        return;
    }
    q->answer_type = "application/json";
    q->answer_status = rf_llama_answer(s, q->llama, q->url, q->body ? q->body : "", q->len, &q->answer, &q->answer_type);
}

void *rf_http_parser_main(void *arg) {
    rf_server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->parse_head && !s->parse_stop) pthread_cond_wait(&s->parse_cv, &s->mu);
        request *q = s->parse_head;
        if (!q) break; /* stopping, and nothing left to parse */
        if (!(s->parse_head = q->parse_next)) s->parse_tail = NULL;
        q->parse_next = NULL;
        pthread_mutex_unlock(&s->mu);
        parse_request(s, q);
        pthread_mutex_lock(&s->mu);
        q->parsed = !q->job; /* with a job, generate_continue answers */
        q->w.ready = 1;      /* the watcher resumes the connection */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static enum MHD_Result generate_continue(struct MHD_Connection *c, request *q, rf_server *s);

/* The parser is done and made no job: its answer */
static enum MHD_Result parsed_answer(struct MHD_Connection *c, request *q, rf_server *s) {
    rf_http_unpark(s, c, &q->w);
    q->parsed = 0;
    if (q->answer_type) {
        char *out = q->answer;
        q->answer = NULL;
        return rf_http_send_text(c, s, q, q->answer_status, out, q->answer_type);
    }
    return rf_http_send_error(c, s, q, q->answer_status, q->err_param[0] ? q->err_param : NULL, q->err_code, "%s",
                              q->err_msg);
}

/* The request to a parser thread, its connection parked until the parser
 * is done; without parser threads (they could not start, or the server is
 * stopping), parsed here. */
static enum MHD_Result parse_later(struct MHD_Connection *c, request *q, rf_server *s) {
    q->fd = connection_fd(c);
    pthread_mutex_lock(&s->mu);
    int queued = s->n_parsers > 0 && !s->parse_stop;
    if (queued) {
        q->w.ready = 0; /* set by the parser, maybe before rf_http_park below has run */
        if (s->parse_tail) s->parse_tail->parse_next = q;
        else s->parse_head = q;
        s->parse_tail = q;
        pthread_cond_signal(&s->parse_cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (!queued) {
        parse_request(s, q);
        return q->job ? generate_continue(c, q, s) : parsed_answer(c, q, s);
    }
    rf_http_park(s, c, &q->w, NULL, q->fd, W_PARSE, 0);
    return MHD_YES;
}

/* Resumed (or spuriously called again): answer, or park again. */
static enum MHD_Result generate_continue(struct MHD_Connection *c, request *q, rf_server *s) {
    job *j = q->job;
    rf_http_unpark(s, c, &q->w); /* parked again below while there is nothing to send */
    pthread_mutex_lock(&s->mu);
    if (j->state != JOB_DONE && rf_http_client_gone(q->fd)) {
        rf_serve_cancel_locked(s, j);
        rf_serve_job_unref_locked(j);
        q->job = NULL;
        pthread_mutex_unlock(&s->mu);
        q->status = 499; /* for the log: the client closed the connection */
        return MHD_NO;   /* nobody to answer: close */
    }
    if (j->state == JOB_QUEUED) {
        if (rf_now() <= q->queue_deadline) {
            pthread_mutex_unlock(&s->mu);
            rf_http_park(s, c, &q->w, j, q->fd, W_START, q->queue_deadline);
            return MHD_YES;
        }
        rf_serve_cancel_locked(s, j);
        rf_serve_job_unref_locked(j);
        q->job = NULL;
        pthread_mutex_unlock(&s->mu);
        return send_error(c, s, q, 503, "the request waited %d s in the queue without starting; try again later",
                          s->cfg.queue_wait_s);
    }
    if (j->req.stream) {
        pthread_mutex_unlock(&s->mu);
        stream_ref *r = rf_calloc(1, sizeof *r);
        r->s = s, r->j = j, r->c = c, r->fd = q->fd, r->last_out = rf_now();
        q->job = NULL; /* its reference is the stream's now */
        struct MHD_Response *resp =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, rf_http_sse_read, r, rf_http_sse_free);
        if (!resp) {
            rf_http_sse_free(r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        rf_http_common_headers(s, q, resp);
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp); /* rf_http_sse_free runs when MHD is done with it */
        q->status = 200;
        rf_http_count_status(s, 200);
        return rc;
    }
    if (j->state != JOB_DONE) {
        pthread_mutex_unlock(&s->mu);
        rf_http_park(s, c, &q->w, j, q->fd, W_DONE, 0);
        return MHD_YES;
    }
    char *body = j->out;
    int status = j->status;
    j->out = NULL;
    j->abandoned = 1;
    rf_serve_job_unref_locked(j);
    q->job = NULL;
    pthread_mutex_unlock(&s->mu);
    return rf_http_send_json(c, s, q, status, body);
}

/* "Content-Length": decimal digits only, as RFC 9110 has it (MHD 0.9.75
 * answers a negative or overflowing one with a broken reply of its own, so
 * such a header must not get that far: see rf_http_on_request). 0, or -1. */
static int content_length(const char *v, unsigned long long *out) {
    unsigned long long x = 0;
    if (!v || !*v) return -1;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9' || x > (ULLONG_MAX - 9) / 10) return -1;
        x = 10 * x + (unsigned)(*p - '0');
    }
    *out = x;
    return 0;
}

/* The URI log callback: called once per request, before MHD parses it, with
 * the request target as received. The request state is made here (and is
 * con_cls from then on), so that the handler can tell a target that held a
 * NUL byte (MHD's strings end there: "GET /health\0x" would be /health). */
void *rf_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    rf_server *s = cls;
    request *q = rf_calloc(1, sizeof *q);
    q->llama = -1;
    q->raw_uri = uri, q->raw_len = uri ? strlen(uri) : 0;
    q->fd = -1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    q->k = ci ? ci->socket_context : NULL;
    if (q->k) {
        pthread_mutex_lock(&s->mu);
        q->k->q = q;
        q->last = ++q->k->n_requests >= s->cfg.keepalive_requests;
        pthread_mutex_unlock(&s->mu);
    }
    return q;
}

static void set_busy(rf_server *s, request *q, int busy) {
    if (!q->k) return;
    pthread_mutex_lock(&s->mu);
    q->k->busy = busy;
    if (!busy) q->k->ready_at = rf_now();
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result llama_request(struct MHD_Connection *c, request *q, rf_server *s, const char *method,
                                     const char *url, int keyed);

/* MHD calls this first with the headers, then once per piece of body, then
 * once more with *up_size == 0 when the body is complete (and again each
 * time a parked generation is resumed). */
enum MHD_Result rf_http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *up, size_t *up_size, void **con_cls) {
    rf_server *s = cls;
    request *q = *con_cls;
    if (!q) *con_cls = q = rf_http_on_uri(s, NULL, c);
    if (!q->started) {
        /* the headers: only what must not wait for the body is answered now
         * (the connection then closes). Everything else is answered once
         * the request is complete: MHD 0.9.75 closes a connection whose
         * answer was queued before that, so keep-alive needs the wait. */
        q->started = 1;
        q->t0 = rf_now();
        copy_printable(q->method, sizeof q->method, method);
        copy_printable(q->url, sizeof q->url, url);
        q->route = R_NONE;
        q->llama = -1;
        for (int i = 0; i < R_NONE; i++) {
            size_t n = strlen(rf_http_routes[i].path);
            if (rf_http_routes[i].prefix ? !strncmp(url, rf_http_routes[i].path, n) && url[n] && !strchr(url + n, '/')
                                         : !strcmp(url, rf_http_routes[i].path))
                q->route = (route_id)i, q->model_id = url + n;
        }
        if (q->route == R_NONE) q->llama = rf_llama_route(s, url);
        /* MHD cuts the line into method, target and version in place: the
         * version follows the target's end unless a NUL byte ended it early */
        if (q->raw_uri && version != q->raw_uri + q->raw_len + 1) {
            q->route = R_NONE, q->last = 1;
            return send_error(c, s, q, 400, "the request target holds a NUL byte");
        }
        /* a body length MHD would mishandle is refused before it reads one */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long body_len = 0;
        if (cl && content_length(cl, &body_len)) {
            q->last = 1;
            return send_error(c, s, q, 400, "Content-Length must be a decimal number of bytes");
        }
        /* refuse an announced oversized body before reading it */
        if (cl && body_len > s->cfg.max_body) {
            q->last = 1; /* the body is not read: the connection cannot carry another request */
            return send_error(c, s, q, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is larger than %zu bytes",
                              s->cfg.max_body);
        }
        return MHD_YES;
    }
    if (q->job) return generate_continue(c, q, s);
    if (q->parsed) return parsed_answer(c, q, s);
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
    /* the request is complete */
    if (!strcmp(method, "OPTIONS")) return rf_http_send_preflight(c, q, s);
    if (q->route == R_NONE && q->llama < 0)
        return rf_http_send_error(c, s, q, 404, NULL, "not_found", "no such endpoint: %s %.100s", method, url);
    /* every route but /health (and the web page, which asks for the key) needs the key, when there is one */
    int keyed = !s->cfg.api_key || rf_http_key_ok(c, s->cfg.api_key);
    if (q->llama >= 0) return llama_request(c, q, s, method, url, keyed);
    if (!keyed && q->route != R_HEALTH)
        return rf_http_send_error(c, s, q, 401, NULL, "invalid_api_key",
                                  "missing or wrong API key (send the header \"Authorization: Bearer <key>\")");
    const char *want = rf_http_routes[q->route].method;
    int is_get = !strcmp(want, "GET");
    if (strcmp(method, want) && !(is_get && !strcmp(method, "HEAD")))
        return send_error(c, s, q, MHD_HTTP_METHOD_NOT_ALLOWED, "%s takes %s, not %.16s", rf_http_routes[q->route].path,
                          want, method);
    if (q->no_memory) return send_error(c, s, q, 503, "out of memory storing the request body");
    if (q->too_large)
        return send_error(c, s, q, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is larger than %zu bytes",
                          s->cfg.max_body);
    if (q->route == R_HEALTH) return rf_http_send_health(c, q, s, keyed);
    if (q->route == R_METRICS) return rf_http_send_metrics(c, q, s);
    if (q->route == R_MODELS || q->route == R_MODEL) return rf_http_send_models(c, q, s);
    set_busy(s, q, 1); /* the request is complete: its deadline is over */
    return parse_later(c, q, s);
}

/* llama-server's routes (routes_llama.c): the generations are queued as
 * jobs, the rest answered at once */
static enum MHD_Result llama_request(struct MHD_Connection *c, request *q, rf_server *s, const char *method,
                                     const char *url, int keyed) {
    if (!keyed && q->llama != RL_PAGE)
        return rf_http_send_error(c, s, q, 401, NULL, "invalid_api_key",
                                  "missing or wrong API key (send the header \"Authorization: Bearer <key>\")");
    const char *want = rf_llama_route_method(q->llama);
    if (strcmp(method, want) && !(!strcmp(want, "GET") && !strcmp(method, "HEAD")))
        return send_error(c, s, q, MHD_HTTP_METHOD_NOT_ALLOWED, "%.64s takes %s, not %.16s", url, want, method);
    if (q->no_memory) return send_error(c, s, q, 503, "out of memory storing the request body");
    if (q->too_large)
        return send_error(c, s, q, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is larger than %zu bytes",
                          s->cfg.max_body);
    /* the generations, and the POST routes that tokenize or render a
     * template, to a parser thread; the rest answered here */
    if (rf_llama_is_generation(q->llama) || !strcmp(want, "POST")) {
        set_busy(s, q, 1);
        return parse_later(c, q, s);
    }
    char *out = NULL;
    const char *type = "application/json";
    int status = rf_llama_answer(s, q->llama, url, q->body ? q->body : "", q->len, &out, &type);
    return rf_http_send_text(c, s, q, status, out, type);
}

static void request_free_locked(rf_server *s, request *q) {
    rf_http_unlink_waiter_locked(s, &q->w);
    if (q->job) { /* closed while its job was queued or running */
        rf_serve_cancel_locked(s, q->job);
        rf_serve_job_unref_locked(q->job);
    }
    if (q->k && q->k->q == q) q->k->q = NULL;
    free(q->answer);
    free(q->body);
    free(q);
}

void rf_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    rf_server *s = cls;
    request *q = *con_cls;
    (void)c;
    if (!q) return;
    if (s->cfg.verbose && q->started)
        rf_serve_log(s, "%s %s -> %d%s (%.3f s)", q->method, q->url, q->status,
                     why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ", connection closed early", rf_now() - q->t0);
    set_busy(s, q, 0); /* ready for the next request: its deadline starts */
    pthread_mutex_lock(&s->mu);
    request_free_locked(s, q);
    pthread_mutex_unlock(&s->mu);
    *con_cls = NULL;
}

/* Connections in and out of s->conns (the count is what the accept policy
 * checks; the list is what the request deadline walks). */
void rf_http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode what) {
    rf_server *s = cls;
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        conn *k = rf_calloc(1, sizeof *k);
        k->fd = connection_fd(c);
        k->ready_at = rf_now();
        pthread_mutex_lock(&s->mu);
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
        s->n_conns++;
        pthread_mutex_unlock(&s->mu);
        *socket_context = k;
    } else if (what == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        conn *k = *socket_context;
        pthread_mutex_lock(&s->mu);
        if (k->q) request_free_locked(s, k->q); /* a request MHD never reported complete */
        if (k->prev) k->prev->next = k->next;
        else s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        s->n_conns--;
        pthread_mutex_unlock(&s->mu);
        free(k);
        *socket_context = NULL;
    }
}

