/* waiters.c - connections parked (suspended) while their request waits: for
 * a parser thread, a place off the queue, more of a stream or the end of its
 * generation; the watcher thread that resumes them, notices clients that
 * left and enforces the request deadline; and the SSE stream MHD pulls from
 * a job, which parks its connection while there is nothing to send.
 *
 * Connections are served the way an event-driven server (nginx) serves
 * them: a small pool of MHD threads, each with its own epoll loop, runs
 * every connection, and no handler ever blocks. A generation request is
 * queued and its connection suspended (MHD_suspend_connection); a watcher
 * thread resumes it when its job leaves the queue, produces more of a
 * stream, finishes, outlives its queue wait, or its client leaves. So a few
 * hundred connections that send slowly cost a few bytes each, not a thread. */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "serve/http_impl.h"
#include "util/util.h"

/* ---- a client that leaves -------------------------------------------------------- */
/* Has the client closed its end of the connection? A zero-timeout poll and a
 * peek: end of file or an error means gone (a pipelined next request is data,
 * not a close). */
int rf_http_client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- suspended connections and the watcher ------------------------------------- */
void rf_http_unlink_waiter_locked(rf_server *s, waiter *w) {
    if (!w->linked) return;
    if (w->prev) w->prev->next = w->next;
    else s->waiters = w->next;
    if (w->next) w->next->prev = w->prev;
    w->prev = w->next = NULL;
    w->linked = w->armed = 0;
}

/* Park the connection until its wait is over (the watcher resumes it and
 * MHD calls the handler, or the content reader, again). Called from the
 * handler or the content reader, without s->mu: MHD's own locks are never
 * taken under ours. The waiter is only armed once suspended, so the watcher
 * never resumes a connection that is not. */
void rf_http_park(rf_server *s, struct MHD_Connection *c, waiter *w, job *j, int fd, wait_kind kind,
                  double deadline) {
    pthread_mutex_lock(&s->mu);
    w->c = c, w->j = j, w->fd = fd, w->kind = kind, w->deadline = deadline, w->armed = 0;
    w->prev = NULL, w->next = s->waiters;
    if (s->waiters) s->waiters->prev = w;
    s->waiters = w;
    w->linked = 1;
    pthread_mutex_unlock(&s->mu);
    /* the idle timeout (--timeout) is for clients that stall while sending
     * or stop reading: a connection waiting for the model is neither, so
     * it has none until there is something to send (rf_http_unpark). MHD only
     * changes the timeout of a connection that is not suspended. */
    if (!w->untimed) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    w->untimed = 1;
    MHD_suspend_connection(c);
    pthread_mutex_lock(&s->mu);
    if (w->linked) w->armed = 1;
    pthread_mutex_unlock(&s->mu);
}

/* Resumed with something to send: the idle timeout again, its clock
 * restarted (MHD restarts it when the timeout was off). */
void rf_http_unpark(rf_server *s, struct MHD_Connection *c, waiter *w) {
    if (!w->untimed) return;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.timeout_s);
    w->untimed = 0;
}

/* Is the wait over? s->mu held. check_gone: look at the socket too. */
static int wait_over_locked(rf_server *s, const waiter *w, int check_gone, double now) {
    if (w->kind == W_PARSE) return w->ready; /* the parser holds the request until then */
    const job *j = w->j;
    if (s->stopping && j->state == JOB_DONE) return 1;
    switch (w->kind) {
    case W_START: if (j->state != JOB_QUEUED) return 1; break;
    case W_DONE: if (j->state == JOB_DONE) return 1; break;
    case W_STREAM: if (j->out_sent < j->out_len || j->state == JOB_DONE) return 1; break;
    case W_PARSE: break;
    }
    if (w->deadline > 0 && now > w->deadline) return 1;
    return check_gone && rf_http_client_gone(w->fd);
}

/* The watcher: every 10 ms, resumes the parked connections whose wait is
 * over (the sockets are looked at every 100 ms, to notice clients that
 * left), and every 250 ms shuts the connections whose request is not
 * complete request_timeout_s after they became ready for it. */
void *rf_http_watcher_main(void *arg) {
    rf_server *s = arg;
    struct MHD_Connection **wake = NULL;
    size_t cap = 0;
    for (unsigned long tick = 0;; tick++) {
        size_t n = 0;
        double now = rf_now();
        pthread_mutex_lock(&s->mu);
        if (s->watcher_stop && !s->waiters) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        for (waiter *w = s->waiters, *next; w; w = next) {
            next = w->next;
            if (tick % 10 == 0 && w->j) rf_serve_expire_locked(s, w->j, now); /* its job, while its client waits */
            if (!w->armed || !wait_over_locked(s, w, tick % 10 == 0 || s->watcher_stop, now)) continue;
            wake = rf_grow_to(wake, sizeof *wake, n + 1, &cap, 64);
            wake[n++] = w->c;
            rf_http_unlink_waiter_locked(s, w);
        }
        if (tick % 25 == 0)
            for (conn *k = s->conns; k; k = k->next)
                if (!k->busy && !k->shut && now - k->ready_at > s->cfg.request_timeout_s) {
                    /* MHD sees the end of the stream and closes it; the fd
                     * stays valid until the CLOSED notification unlinks k */
                    shutdown(k->fd, SHUT_RDWR);
                    k->shut = 1;
                    s->n_request_timeouts++;
                }
        pthread_mutex_unlock(&s->mu);
        /* a parked connection is only closed by MHD_stop_daemon, which
         * runs after this thread has ended: resuming outside the lock is safe */
        for (size_t i = 0; i < n; i++) MHD_resume_connection(wake[i]);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    free(wake);
    return NULL;
}

/* ---- streaming: MHD pulls SSE bytes from the job ---------------------------- */
/* A stream whose generation produces no text for this long gets an SSE
 * comment line, so that clients and proxies see a live connection. */
#define SSE_KEEPALIVE_S 2.0

ssize_t rf_http_sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ref *r = cls;
    job *j = r->j;
    (void)pos;
    pthread_mutex_lock(&r->s->mu);
    if (j->out_sent == j->out_len && j->state != JOB_DONE) {
        int gone = rf_http_client_gone(r->fd);
        if (gone) rf_serve_cancel_locked(r->s, j);
        pthread_mutex_unlock(&r->s->mu);
        if (gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        /* the generation runs without new text: a comment line now and
         * then (clients ignore it), else wait for text or that time */
        static const char ka[] = ": keep-alive\n\n";
        double now = rf_now();
        if (now - r->last_out >= SSE_KEEPALIVE_S && max >= sizeof ka - 1) {
            rf_http_unpark(r->s, r->c, &r->w);
            memcpy(buf, ka, sizeof ka - 1);
            r->last_out = now;
            return (ssize_t)(sizeof ka - 1);
        }
        /* nothing yet: MHD's prescribed pattern is to suspend and return 0 */
        rf_http_park(r->s, r->c, &r->w, j, r->fd, W_STREAM, r->last_out + SSE_KEEPALIVE_S);
        return 0;
    }
    size_t n = j->out_len - j->out_sent;
    if (n > max) n = max;
    if (n) memcpy(buf, j->out + j->out_sent, n);
    j->out_sent += n;
    pthread_mutex_unlock(&r->s->mu);
    rf_http_unpark(r->s, r->c, &r->w);
    r->last_out = rf_now();
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

/* The response is gone (sent, or the client went away). */
void rf_http_sse_free(void *cls) {
    stream_ref *r = cls;
    pthread_mutex_lock(&r->s->mu);
    rf_http_unlink_waiter_locked(r->s, &r->w);
    rf_serve_cancel_locked(r->s, r->j); /* nothing when the job is done */
    r->j->abandoned = 1;
    rf_serve_job_unref_locked(r->j);
    pthread_mutex_unlock(&r->s->mu);
    free(r);
}
