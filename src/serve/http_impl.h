/* http_impl.h - what the HTTP front end's files share (http.c, reply.c,
 * waiters.c, server.c): the routes, the state of a connection, a request and
 * a parked wait, and the functions one of them calls in another. Internal to
 * src/serve: nothing here is part of the server's interface (serve.h). */
#ifndef RF_SERVE_HTTP_IMPL_H
#define RF_SERVE_HTTP_IMPL_H

#include <microhttpd.h>

#include "serve/serve_impl.h"

/* ---- routes --------------------------------------------------------------------- */
typedef enum { R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT, R_NONE } route_id;
typedef struct {
    const char *path, *method;
    int prefix; /* path is a prefix: /v1/models/{id} */
} rf_http_route;
/* http.c: the OpenAI routes, by route_id */
extern const rf_http_route rf_http_routes[R_NONE];

/* A connection suspended while its request is parsed or its job runs,
 * until the watcher resumes it. */
typedef enum { W_START, W_DONE, W_STREAM, W_PARSE } wait_kind;
typedef struct rf_waiter {
    struct MHD_Connection *c;
    job *j;          /* NULL for W_PARSE */
    int fd;
    wait_kind kind;  /* W_START: while queued; W_DONE: until done; W_STREAM: until more output;
                        W_PARSE: until a parser thread has handled the request (ready) */
    int ready;       /* W_PARSE: the parser is done with the request */
    int armed;       /* suspended: the watcher may resume it */
    int linked;      /* in s->waiters */
    double deadline; /* rf_now() after which the wait ends (0: none) */
    int untimed;     /* parked with MHD's idle timeout off (see rf_http_park) */
    struct rf_waiter *prev, *next;
} waiter;

/* One connection (MHD's socket context), in s->conns. */
typedef struct rf_conn {
    int fd;
    double ready_at;         /* rf_now() when it became ready for its next request */
    int busy;                /* a complete request is being answered: no request deadline */
    int shut;                /* the deadline shut it */
    int n_requests;          /* requests begun on it */
    struct request *q;       /* the request being read or answered */
    struct rf_conn *prev, *next;
} conn;

/* Per-request state (MHD's con_cls), made by the URI log callback. */
typedef struct request {
    route_id route;
    int llama;             /* R_NONE: llama-server's route (routes_llama.h), or -1 */
    int started;           /* the handler has seen the headers */
    char *body;
    size_t len;
    int too_large;
    int no_memory;         /* the body could not be stored */
    int status;            /* what we answered, for the log */
    int last;              /* the last request allowed on its connection: answer "Connection: close" */
    double t0;
    char method[8], url[72];
    const char *model_id;  /* R_MODEL: the {id} (points into MHD's url) */
    const char *raw_uri;   /* the request target as received (MHD's buffer), and its length */
    size_t raw_len;
    conn *k;               /* its connection */
    job *job;              /* a generation: queued or running, not yet answered */
    int fd;
    double queue_deadline;
    waiter w;
    /* handed to a parser thread (parse_request): in s->parse_head's list
     * until taken; what it made of the request when no job came of it */
    struct request *parse_next;
    int parsed;            /* the parser is done: answer with the below, unless job */
    int answer_status;     /* an error (err_*) or, for llama-server's routes, answer / answer_type */
    char err_param[64];
    const char *err_code;
    char err_msg[512];
    char *answer;
    const char *answer_type;
} request;

/* ---- reply.c: answers, each queued on c with the common headers, counted
 * and noted in q->status ---- */
/* "Connection: close" on the connection's last request; the CORS headers */
void rf_http_common_headers(const rf_server *s, const request *q, struct MHD_Response *r);
/* an answer's status class, for /metrics */
void rf_http_count_status(rf_server *s, int status);
/* txt: malloc'd, taken over; NULL answers 500 */
enum MHD_Result rf_http_send_text(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt,
                                  const char *type);
enum MHD_Result rf_http_send_json(struct MHD_Connection *c, rf_server *s, request *q, int status, char *txt);
/* OpenAI's error body; param and code may be NULL (JSON null) */
enum MHD_Result rf_http_send_error(struct MHD_Connection *c, rf_server *s, request *q, int status, const char *param,
                                   const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* the routes answered from the server's state: /health (show_model: the
 * client may see the model's id), /metrics, /v1/models[/{id}], a CORS
 * preflight */
enum MHD_Result rf_http_send_health(struct MHD_Connection *c, request *q, rf_server *s, int show_model);
enum MHD_Result rf_http_send_metrics(struct MHD_Connection *c, request *q, rf_server *s);
enum MHD_Result rf_http_send_models(struct MHD_Connection *c, request *q, rf_server *s);
enum MHD_Result rf_http_send_preflight(struct MHD_Connection *c, request *q, rf_server *s);
/* the request carries "Authorization: Bearer <key>" */
int rf_http_key_ok(struct MHD_Connection *c, const char *key);

/* ---- waiters.c: parked connections, the watcher, streamed answers ---- */
/* the client has closed its end of the connection (fd < 0: no) */
int rf_http_client_gone(int fd);
/* park: suspend the connection until its wait is over (the watcher resumes
 * it); called without s->mu. unpark: resumed with something to send. */
void rf_http_park(rf_server *s, struct MHD_Connection *c, waiter *w, job *j, int fd, wait_kind kind,
                  double deadline);
void rf_http_unpark(rf_server *s, struct MHD_Connection *c, waiter *w);
/* w out of s->waiters (s->mu held) */
void rf_http_unlink_waiter_locked(rf_server *s, waiter *w);
/* the watcher thread (arg: the server) */
void *rf_http_watcher_main(void *arg);
/* A streamed answer: MHD's content reader pulls the job's SSE bytes
 * (rf_http_sse_read); rf_http_sse_free, when MHD is done with the response,
 * drops the job's reference the stream holds. */
typedef struct {
    rf_server *s;
    job *j;
    struct MHD_Connection *c;
    int fd; /* the client's socket, to notice it leaving between events */
    double last_out; /* rf_now() when bytes were last handed to MHD */
    waiter w;
} stream_ref;
ssize_t rf_http_sse_read(void *cls, uint64_t pos, char *buf, size_t max);
void rf_http_sse_free(void *cls);


/* ---- http.c: MHD's callbacks and the parser thread, for server.c ---- */
/* the URI log callback: makes the request state (MHD's con_cls) */
void *rf_http_on_uri(void *cls, const char *uri, struct MHD_Connection *c);
/* the access handler: the headers, each piece of body, the complete request */
enum MHD_Result rf_http_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *up, size_t *up_size, void **con_cls);
/* a request is over: logged (cfg.verbose) and freed */
void rf_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why);
/* connections in and out of s->conns */
void rf_http_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode what);
/* a parser thread (arg: the server) */
void *rf_http_parser_main(void *arg);

#endif
