/* worker.c - the job queues and the generation threads: each worker takes
 * jobs off the FIFO queue one at a time and runs the decoder with its own
 * model calls (one session per worker, reused by every job it runs: every
 * job without continuous batching, only the no-cache twin's with it); the
 * batched jobs queue for the scheduler (scheduler.c). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h" /* rf_session_allocs, for /health */
#include "model/workspace.h"
#include "serve/answer.h"
#include "serve/oai.h"
#include "serve/routes_llama.h"
#include "util/util.h"

/* One choice of the job: a generation of its own, sampled with seed +
 * index, on the worker's session. Fills c (the answer, cut) and r (the
 * decoder's statistics); 0, or -1 with rf_last_error() (or the client left:
 * j->cancelled). */
static int run_choice(rf_server *s, refusion_session *sess, job *j, int index, run_ctx *c, rf_stats *r) {
    int calls0;
    memset(r, 0, sizeof *r);
    if (rf_answer_begin(s, j, index, c, &calls0)) return -1;
    rf_params p = j->req.p; /* this choice's seed and callbacks */
    p.seed += (uint64_t)index;
    p.on_tokens = rf_answer_on_tokens, p.on_event = rf_answer_on_event, p.on_logprobs = rf_answer_on_logprobs;
    p.user = c;
    p.cancel = &j->cancel_flag;
    double t0 = rf_now();
    /* the answer arrives through rf_answer_on_tokens; a fatal error inside the
     * decoder comes back as RF_ERR_NOMEM (an allocation failed; the
     * generation's memory was given back) or RF_ERR_INTERNAL (a broken
     * invariant) and fails this request, not the server */
    int rc = rf_generate(sess, j->req.prompt, j->req.n_prompt, &p, NULL, 0, r);
    return rf_answer_end(s, j, c, r, rc, rf_now() - t0, calls0);
}

/* Run a job's choices one after the other ("n" > 1: each its own
 * generation, index 0 .. n-1) on the worker's session and set its output.
 * A stream sends each choice's chunks (carrying its index) as it is
 * decoded. */
static void run_job(rf_server *s, rf_worker *w, job *j) {
    refusion_session *sess = w->sess;
    size_t allocs0 = rf_session_allocs(sess);
    int n = j->req.n_choices > 0 ? j->req.n_choices : 1;
    job_acc a;
    rf_acc_init(&a);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        run_ctx c;
        rf_stats r;
        rc = run_choice(s, sess, j, i, &c, &r);
        if (!rc) rf_acc_choice(s, j, &a, &c, &r, i, n);
        rf_answer_free(&c);
    }
    pthread_mutex_lock(&s->mu);
    s->buffer_allocs += rf_session_allocs(sess) - allocs0;
    s->buffer_bytes[w - s->workers] = rf_session_bytes(sess);
    pthread_mutex_unlock(&s->mu);
    rf_job_finish(s, j, &a, rc);
}

/* A queued job that will never run (shutdown): answer 503. s->mu held. */
static void fail_job_locked(job *j, const char *msg) {
    char *txt = rf_serve_error_body(msg, "server_error", NULL, "server_shutting_down");
    if (j->req.stream) {
        rf_job_sse_text_locked(j, txt);
        rf_job_out_append(j, "data: [DONE]\n\n", 14);
    } else {
        free(j->out);
        j->out = txt, j->out_len = strlen(txt), j->status = 503;
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

/* Take the first job off a queue (s->mu held): NULL when empty. */
job *rf_queue_pop_locked(job **head, job **tail) {
    job *j = *head;
    if (!j) return NULL;
    *head = j->next;
    if (!*head) *tail = NULL;
    j->next = NULL;
    return j;
}

/* The job leaves the queue to run (s->mu held): 0, or -1 when its client
 * has already left (the job is then dropped). */
int rf_job_start_locked(rf_server *s, job *j) {
    if (j->abandoned) {
        j->state = JOB_DONE;
        s->n_active--;
        rf_serve_job_unref_locked(j);
        return -1;
    }
    j->state = JOB_RUNNING;
    rf_serve_slot_take_locked(s, j);
    j->deadline = rf_now() + s->cfg.generation_timeout_s;
    s->n_running++;
    if (s->n_running > s->peak_running) s->peak_running = s->n_running;
    pthread_cond_broadcast(&j->cv); /* its connection waits for it to leave the queue */
    return 0;
}

/* Shutdown: fail every job still in the queue (s->mu held). */
void rf_queue_fail_locked(rf_server *s, job **head, job **tail) {
    for (job *j; (j = rf_queue_pop_locked(head, tail));) {
        fail_job_locked(j, "the server is shutting down");
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
}


void *rf_serve_worker_main(void *arg) {
    rf_worker *w = arg;
    rf_server *s = w->s;
    /* OpenMP's thread count is a per-thread setting: set it here, in the
     * thread that runs the model */
    if (s->cfg.defaults.threads > 0) omp_set_num_threads(s->cfg.defaults.threads);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->queue_cv, &s->mu);
        if (s->stopping) break;
        job *j = rf_queue_pop_locked(&s->head, &s->tail);
        if (rf_job_start_locked(s, j)) continue;
        pthread_mutex_unlock(&s->mu);
        run_job(s, w, j);
        pthread_mutex_lock(&s->mu);
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
    rf_queue_fail_locked(s, &s->head, &s->tail);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}



/* The requests the scheduler runs: AR decoding, the rolling slot,
 * plan-and-infill and MDM, n choices each after the other (decode/ar_step.h,
 * rolling_step.h, refusion_step.h, mdm.h); not plan-and-infill's no-cache
 * twin, a check that makes no model calls rather than a step machine. */
static int batched(const rf_serve_req *r) {
    const rf_params *p = &r->p;
    return p->method == RF_METHOD_AR || p->method == RF_METHOD_MDM ||
           (p->method == RF_METHOD_REFUSION && !p->no_cache);
}

int rf_serve_batched(const rf_serve_req *r) { return batched(r); }

job *rf_serve_submit(rf_server *s, rf_serve_req *r) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->n_active >= s->cfg.max_queue) {
        if (s->stopping) rf_set_error("the server is shutting down");
        else rf_set_error("the server is busy (%d requests queued or running); try again later", s->n_active);
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    job *j = rf_calloc(1, sizeof *j);
    j->req = *r;
    memset(r, 0, sizeof *r);
    snprintf(j->id, sizeof j->id, "%s-%lu", j->req.kind == RF_REQ_CHAT ? "chatcmpl" : "cmpl", ++s->n_jobs);
    j->slot = -1;
    j->created = time(NULL);
    j->queued_at = rf_now();
    j->refs = 2;
    j->state = JOB_QUEUED;
    pthread_cond_init(&j->cv, NULL);
    /* a chat stream opens with the assistant's role, before any text (one
     * chunk per choice) */
    for (int i = 0; j->req.stream && j->req.kind == RF_REQ_CHAT && i < j->req.n_choices; i++) {
        json_t *o = rf_oai_envelope(s, j, 1);
        json_t *c = json_pack("{s:i, s:{s:s, s:s}, s:[], s:n}", "index", i, "delta", "role", "assistant",
                              "content", "", "token_ids", "finish_reason");
        json_object_set_new(o, "choices", json_pack("[o]", c));
        rf_job_sse_append_locked(j, o);
    }
    /* with batching, every decoder but the no-cache twin runs as a row of
     * the scheduler; the rest in the workers, each with its own model calls */
    if (s->cfg.batch && batched(&j->req)) {
        if (s->btail) s->btail->next = j;
        else s->bhead = j;
        s->btail = j;
        pthread_cond_signal(&s->batch_cv);
    } else {
        if (s->tail) s->tail->next = j;
        else s->head = j;
        s->tail = j;
        pthread_cond_signal(&s->queue_cv);
    }
    s->n_active++;
    pthread_mutex_unlock(&s->mu);
    return j;
}

void rf_serve_cancel_locked(rf_server *s, job *j) {
    (void)s;
    if (j->state == JOB_DONE || j->cancelled) return;
    j->cancelled = 1;
    j->cancel_flag = 1; /* a running decoder stops before its next model call */
    j->abandoned = 1; /* a queued job is dropped when the worker reaches it */
    j->calls_at_cancel = j->calls_now;
}

void rf_serve_expire_locked(rf_server *s, job *j, double now) {
    (void)s;
    if (j->state != JOB_RUNNING || j->timed_out || now <= j->deadline) return;
    j->timed_out = 1;
    j->cancel_flag = 1; /* the decoder stops before its next model call */
}

void rf_serve_get_stats(rf_server *s, rf_serve_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->done = s->n_done;
    out->cancelled = s->n_cancelled;
    out->calls_after_cancel = s->calls_after_cancel;
    pthread_mutex_unlock(&s->mu);
}

void rf_serve_job_unref_locked(job *j) {
    if (--j->refs > 0) return;
    rf_serve_req_free(&j->req);
    free(j->out);
    pthread_cond_destroy(&j->cv);
    free(j);
}
