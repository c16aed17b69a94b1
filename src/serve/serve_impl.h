/* serve_impl.h - what the server's files share: the server and its jobs.
 *
 * Locking: one mutex (rf_server.mu) guards the queue, every job's output
 * fields, reference counts and the counters. The model and tokenizer are
 * only read: the scheduler thread runs every generation's model calls, and
 * connection threads only encode prompts (rf_tok_encode keeps its scratch
 * per call). */
#ifndef RF_SERVE_IMPL_H
#define RF_SERVE_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <time.h>

#include "serve/serve.h"

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    rf_serve_req req;
    char id[40];            /* "cmpl-N" / "chatcmpl-N" */
    time_t created;
    /* guarded by rf_server.mu */
    job_state state;
    int refs;               /* the connection + the queue/scheduler */
    int abandoned;          /* the connection is gone: skip it if still queued */
    int cancelled;          /* the client left before the answer was complete */
    int calls_now;          /* model calls so far (counted from the decoder's events) */
    int calls_at_cancel;    /* ... when it was cancelled */
    volatile int cancel_flag; /* rf_params.cancel: the client left, or the answer is complete
                                 (max_tokens / stop); read by the decoder without the lock */
    double queued_at;       /* rf_now() when queued */
    double deadline;        /* rf_now() by which a running job must end (--generation-timeout) */
    int timed_out;          /* it passed the deadline: stopped, answered 503 */
    char *out;              /* stream: SSE bytes so far; else: the whole JSON body at DONE */
    size_t out_len, out_cap, out_sent;
    int status;             /* HTTP status of a non-stream answer */
    pthread_cond_t cv;      /* signalled when out grows or state changes */
    int slot;               /* running: its entry in rf_server.slots (-1: none) */
    int n_decoded;          /* answer tokens final so far (/slots) */
    double prompt_s;        /* seconds from the start to the decoder's first event (timings.prompt_ms) */
    struct job *next;       /* queue link */
} job;

struct rf_server {
    const refusion_model *model;    /* generation: the public API */
    const refusion_tokenizer *tokenizer;
    const rf_model *m;              /* their insides, for request parsing and /v1/models */
    const rf_tokenizer *tok;
    rf_serve_config cfg;
    char *model_name;
    struct MHD_Daemon *daemon;
    int listen_fd, port;
    time_t started;
    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t queue_cv;  /* a job was queued, or stopping */
    job *head, *tail;         /* waiting jobs, FIFO */
    pthread_t scheduler;
    int scheduler_started;
    unsigned long long batch_calls, batch_rows; /* batched model calls, and their rows in all */
    int batch_peak;           /* the most rows in one call */
    unsigned long long batch_rolling_rows; /* rows of rolling-slot generations in them */
    unsigned long long batch_mixed_calls;  /* calls with a rolling-slot row beside other rows */
    /* the calls plan-and-infill and MDM rows hand in whole (/metrics'
     * batch_whole_*), their rows, and the batched calls with one beside
     * another generation's */
    unsigned long long batch_whole_calls, batch_whole_rows;
    unsigned long long batch_whole_mixed_calls;
    unsigned long long prefix_hits, prefix_tokens; /* requests that reused a cached prefix, and its tokens */
    size_t prefix_cache_bytes; /* held by the prefix cache */
    int n_active;             /* queued + running */
    int stopping;
    unsigned long n_jobs;     /* jobs ever accepted (ids) */
    unsigned long n_done;
    int n_running;            /* jobs the scheduler is running */
    int peak_running;         /* the most jobs running at once since start */
    long long tokens_done, prompt_tokens;
    double gen_seconds;       /* decoder time of the finished jobs */
    double latency_sum;       /* queued -> done, of the finished jobs */
    unsigned long n_latency, n_failed;
    unsigned long n_http[6];  /* HTTP answers by class: 1xx..5xx, [0] unused */
    unsigned long n_cancelled;
    unsigned long n_gen_timeouts; /* generations stopped at their deadline */
    long long calls_after_cancel;
    /* the scheduler's shared buffers (/health): their allocations (flat once
     * it has run its widest step) and the bytes they hold between steps */
    unsigned long long buffer_allocs;
    size_t buffer_bytes;
    /* http.c, waiters.c: open connections, the parked (suspended) requests, the
     * watcher thread that resumes them and enforces request deadlines */
    struct rf_conn *conns;
    int n_conns;
    struct rf_waiter *waiters;
    pthread_t watcher;
    int watcher_started, watcher_stop;
    unsigned long n_refused, n_request_timeouts;
    /* http.c: the parser threads, which render chat templates and tokenize
     * prompts off MHD's event loops; their queue of requests */
    pthread_t *parsers;
    int n_parsers, parse_stop;
    struct request *parse_head, *parse_tail;
    pthread_cond_t parse_cv;
    int loopback;             /* the bound address is a loopback one */
    job **slots;              /* [n_slots] the running job of each slot (/slots; routes_llama.c), or NULL */
    int n_slots;
};

/* queue.c: the job queue (s->mu held): the first job off it (NULL:
 * empty); a job leaving it to run (-1: its client left, dropped); every
 * queued job failed (shutdown) */
job *rf_queue_pop_locked(rf_server *s);
int rf_job_start_locked(rf_server *s, job *j);
void rf_queue_fail_locked(rf_server *s);
/* scheduler.c: the scheduler thread, which runs every generation (arg: the server) */
void *rf_serve_scheduler_main(void *server);
/* Queue a parsed request (taken over: r is cleared). NULL, with the reason
 * in rf_last_error(), when stopping or the queue is full (HTTP 503). The job
 * comes back with one reference for the caller. */
job *rf_serve_submit(rf_server *s, rf_serve_req *r);
/* The client of j left: stop producing its output and, while it is still
 * queued, never run it. s->mu held. */
void rf_serve_cancel_locked(rf_server *s, job *j);
/* A running job past its deadline (now: rf_now()) is stopped: it ends
 * before its next model call and is answered 503. s->mu held. */
void rf_serve_expire_locked(rf_server *s, job *j, double now);
/* OpenAI's error body {"error": {"message", "type", "param", "code"}};
 * param and code may be NULL (JSON null). */
json_t *rf_serve_error_json(const char *msg, const char *type, const char *param, const char *code);
/* Drop a reference; frees the job at zero. Call with s->mu held. */
void rf_serve_job_unref_locked(job *j);

/* One log line through s->cfg.log (dropped without one). */
void rf_serve_log(const rf_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
