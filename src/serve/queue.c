/* queue.c - the jobs: one FIFO queue of parsed requests, which the
 * scheduler (scheduler.c) takes them from in arrival order; cancelling,
 * deadlines and the last reference of a job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/answer.h"
#include "serve/oai.h"
#include "serve/routes_llama.h"
#include "util/util.h"

/* A queued job that will never run (shutdown): answer 503. s->mu held. */
static void fail_job_locked(job *j, const char *msg) {
    char *txt = rf_serve_error_body(msg, "server_error", NULL, "server_shutting_down");
    if (j->req.stream) {
        rf_job_sse_text_locked(j, txt);
        rf_job_sse_done_locked(j);
    } else {
        free(j->out);
        j->out = txt, j->out_len = strlen(txt), j->status = 503;
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

/* Take the first job off the queue (s->mu held): NULL when empty. */
job *rf_queue_pop_locked(rf_server *s) {
    job *j = s->head;
    if (!j) return NULL;
    s->head = j->next;
    if (!s->head) s->tail = NULL;
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
void rf_queue_fail_locked(rf_server *s) {
    for (job *j; (j = rf_queue_pop_locked(s));) {
        fail_job_locked(j, "the server is shutting down");
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
}


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
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    pthread_cond_signal(&s->queue_cv);
    s->n_active++;
    pthread_mutex_unlock(&s->mu);
    return j;
}

void rf_serve_cancel_locked(rf_server *s, job *j) {
    (void)s;
    if (j->state == JOB_DONE || j->cancelled) return;
    j->cancelled = 1;
    j->cancel_flag = 1; /* a running decoder stops before its next model call */
    j->abandoned = 1; /* a queued job is dropped when the scheduler reaches it */
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
