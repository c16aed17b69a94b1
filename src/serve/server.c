/* server.c - start and stop: the listening socket, then the scheduler,
 * watcher and parser threads and MHD's daemon, each started only
 * once what it needs runs; stopped in the order that leaves no connection
 * waiting on a job. Also the defaults of the configuration and the accept
 * policy.
 *
 * Limits, each refused at once rather than left in the listen backlog: the
 * total number of connections (the accept policy callback), connections
 * per client address (MHD's per-IP limit), a connection idle for --timeout
 * (MHD's timeout), a request not complete --request-timeout after its
 * connection was ready for it (the watcher shuts the socket: a sender of one
 * byte every few seconds is never idle but still cannot hold a connection),
 * and --keepalive-requests requests on one connection (the last answer
 * says "Connection: close"). */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "serve/http_impl.h"
#include "serve/routes_llama.h"
#include "util/util.h"

void rf_serve_log(const rf_server *s, const char *fmt, ...) {
    if (!s->cfg.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->cfg.log(s->cfg.log_user, line);
}

void rf_serve_config_default(rf_serve_config *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->max_body = 4u << 20;
    c->max_queue = 64;
    c->max_connections = 512;
    c->max_per_client = 16;
    c->timeout_s = 10;
    c->batch = 1;
    c->cache_bytes = (size_t)256 << 20;
    c->request_timeout_s = 30;
    c->keepalive_requests = 100;
    c->http_threads = 2;
    c->queue_wait_s = 300;
    c->generation_timeout_s = 600;
    c->max_request_bytes = 0;
    c->max_request_positions = 1LL << 23;
    c->verbose = 1;
    c->webui = 1;
    c->slots_endpoint = 1;
    c->parallel = 2;
    c->cors_origin = NULL;
    rf_decode_opts_default(&c->defaults);
}

/* Accept policy: over the total, a new connection is closed at once (not
 * left waiting in the listen backlog). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
    rf_server *s = cls;
    (void)addr, (void)len;
    pthread_mutex_lock(&s->mu);
    int ok = s->n_conns < s->cfg.max_connections;
    if (!ok) s->n_refused++;
    pthread_mutex_unlock(&s->mu);
    return ok ? MHD_YES : MHD_NO;
}

/* ---- start / stop ------------------------------------------------------------- */
/* A listening socket on host:port, so that failures get a clear message
 * (MHD would only print its own) and port 0 tells us what it picked. */
static int is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6) return 0;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static int listen_on(const char *host, int port, int *fd_out, int *port_out, int *v6, int *loopback) {
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
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
        rf_set_error("cannot listen on %s:%d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *v6 = ai->ai_family == AF_INET6;
    *loopback = is_loopback(ai->ai_addr);
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

/* no new jobs; the scheduler finishes the running ones and fails the queued ones */
static void stop_scheduler(rf_server *s) {
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->queue_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->scheduler_started) pthread_join(s->scheduler, NULL);
    s->scheduler_started = 0;
}

/* the watcher resumes every parked connection (their jobs are done once
 * the scheduler has stopped), then ends */
static void stop_watcher(rf_server *s) {
    if (!s->watcher_started) return;
    pthread_mutex_lock(&s->mu);
    s->watcher_stop = 1;
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->watcher, NULL);
    s->watcher_started = 0;
}

/* the parser threads handle what is queued, then end; requests that come
 * later are parsed in MHD's threads (parse_later) */
static void stop_parsers(rf_server *s) {
    pthread_mutex_lock(&s->mu);
    s->parse_stop = 1;
    pthread_cond_broadcast(&s->parse_cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_parsers; i++) pthread_join(s->parsers[i], NULL);
}


rf_server *rf_serve_start(const refusion_model *m, const refusion_tokenizer *tok, const rf_serve_config *c) {
    rf_server *s = rf_calloc(1, sizeof *s);
    s->model = m, s->tokenizer = tok, s->cfg = *c;
    s->m = rf_api_model(m), s->tok = tok ? rf_api_tokenizer(tok) : NULL;
    if (s->cfg.max_queue < 1) s->cfg.max_queue = 1;
    if (s->cfg.max_connections < 1) s->cfg.max_connections = 1;
    if (s->cfg.timeout_s < 1) s->cfg.timeout_s = 1;
    if (s->cfg.request_timeout_s < 1) s->cfg.request_timeout_s = 1;
    if (s->cfg.keepalive_requests < 1) s->cfg.keepalive_requests = 1;
    if (s->cfg.http_threads < 1) s->cfg.http_threads = 1;
    if (s->cfg.queue_wait_s < 1) s->cfg.queue_wait_s = 1;
    if (s->cfg.generation_timeout_s < 1) s->cfg.generation_timeout_s = 1;
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
    if (listen_on(c->host ? c->host : "127.0.0.1", c->port, &s->listen_fd, &s->port, &v6, &s->loopback)) {
        free(s->model_name);
        free(s);
        return NULL;
    }
    /* error-checking: a fault that unwinds the scheduler out of a locked
     * section leaves the lock held, and its catch point gives it back
     * (scheduler.c fault()), which only the owner can; a relock by the
     * owner fails instead of hanging */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&s->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_cond_init(&s->queue_cv, NULL);
    pthread_cond_init(&s->parse_cv, NULL);
    if (s->cfg.parallel < 1) s->cfg.parallel = 1;
    rf_serve_slots_init(s);
    if (pthread_create(&s->scheduler, NULL, rf_serve_scheduler_main, s)) {
        rf_set_error("cannot start the scheduler thread");
        goto fail;
    }
    s->scheduler_started = 1;
    if (pthread_create(&s->watcher, NULL, rf_http_watcher_main, s)) {
        rf_set_error("cannot start the connection watcher thread");
        stop_scheduler(s);
        goto fail;
    }
    s->watcher_started = 1;
    /* as many parser threads as event loops; with none (they could not
     * start) requests are parsed in the event loops */
    s->parsers = rf_calloc((size_t)s->cfg.http_threads, sizeof *s->parsers);
    while (s->n_parsers < s->cfg.http_threads &&
           !pthread_create(&s->parsers[s->n_parsers], NULL, rf_http_parser_main, s))
        s->n_parsers++;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | (v6 ? MHD_USE_IPv6 : 0);
    /* MHD's own total is a backstop above ours (on_accept refuses at once;
     * at MHD's limit new clients would wait in the backlog instead) */
    s->daemon = MHD_start_daemon(
        flags, 0, on_accept, s, rf_http_on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
        MHD_OPTION_NOTIFY_COMPLETED, rf_http_on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, rf_http_on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, rf_http_on_uri, s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections + 64, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)(s->cfg.max_per_client > 0 ? s->cfg.max_per_client : 0), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)s->cfg.timeout_s, MHD_OPTION_END);
    if (!s->daemon) {
        rf_set_error("cannot start the HTTP server (libmicrohttpd) on %s:%d", c->host, s->port);
        stop_scheduler(s);
        stop_parsers(s);
        stop_watcher(s);
        goto fail;
    }
    return s;
fail:
    rf_serve_slots_free(s);
    free(s->parsers);
    close(s->listen_fd);
    pthread_cond_destroy(&s->queue_cv);
    pthread_cond_destroy(&s->parse_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->model_name);
    free(s);
    return NULL;
}

int rf_serve_port(const rf_server *s) { return s->port; }
int rf_serve_loopback(const rf_server *s) { return s->loopback; }

void rf_serve_stop(rf_server *s) {
    if (!s) return;
    /* 1. no new jobs; the scheduler finishes the running ones and fails
     *    the queued ones, so no connection thread is left waiting on a job */
    stop_scheduler(s);
    /* 2. the requests being parsed get their answers (a 503 for a
     *    generation: no job is taken now) */
    stop_parsers(s);
    /* 3. answer the parked requests: MHD must not stop with a suspended
     *    connection */
    stop_watcher(s);
    /* 4. close the connections and join MHD's threads (MHD closes the
     *    listening socket it was given too) */
    MHD_stop_daemon(s->daemon);
    pthread_cond_destroy(&s->queue_cv);
    pthread_cond_destroy(&s->parse_cv);
    free(s->parsers);
    pthread_mutex_destroy(&s->mu);
    rf_serve_slots_free(s);
    free(s->model_name);
    free(s);
}
