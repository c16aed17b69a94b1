/* worker.c - the generation thread: takes jobs off the FIFO queue one at a
 * time, runs the decoder, and turns its output into OpenAI-shaped JSON.
 *
 * A streamed job's output is a growing buffer of Server-Sent Events that the
 * connection thread drains as the decoder reports final tokens; a plain job's
 * output is the whole response body, set once at the end. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"
#include "util/util.h"

/* ---- output buffer (s->mu held) ------------------------------------------------- */
static void out_append(job *j, const char *p, size_t n) {
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

/* One SSE event "data: <compact json>\n\n" (o is consumed). */
static void sse_append_locked(job *j, json_t *o) {
    char *txt = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    out_append(j, "data: ", 6);
    out_append(j, txt, strlen(txt));
    out_append(j, "\n\n", 2);
    free(txt);
    pthread_cond_broadcast(&j->cv);
}
static void sse_event(rf_server *s, job *j, json_t *o) {
    pthread_mutex_lock(&s->mu);
    sse_append_locked(j, o);
    pthread_mutex_unlock(&s->mu);
}

/* ---- JSON pieces ------------------------------------------------------------------ */
/* Decoded text is repaired UTF-8, but never let a string we cannot encode
 * drop a field: fall back to U+FFFD. */
static json_t *jstr(const char *s) {
    json_t *v = json_string(s ? s : "");
    return v ? v : json_string("\xef\xbf\xbd");
}

static json_t *ids_json(const int *ids, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* {"id", "object", "created", "model"} of every response and chunk */
static json_t *envelope(const rf_server *s, const job *j, int chunk) {
    const char *object = j->req.kind == RF_REQ_COMPLETION ? "text_completion"
                         : chunk                         ? "chat.completion.chunk"
                                                         : "chat.completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object", object, "created",
                     (json_int_t)j->created, "model", s->model_name);
}

/* choices[0]: the text (a piece of it when streaming) and its token ids */
static json_t *choice(const job *j, const char *text, const int *ids, int n, const char *finish, int chunk) {
    json_t *c = json_pack("{s:i}", "index", 0);
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

static json_t *usage_json(const job *j, const rf_gen_result *r) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", j->req.n_prompt, "completion_tokens", r->n_tokens,
                     "total_tokens", j->req.n_prompt + r->n_tokens);
}

/* The decoder's statistics: how many tokens each model call produced. */
static json_t *stats_json(const job *j, const rf_gen_result *r) {
    const rf_gen_params *p = &j->req.p;
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:b}", "mode", j->req.ar ? "ar" : "refusion",
                          "model_calls", r->n_calls, "steps", r->n_steps, "tpf", r->tpf, "tokens_per_call",
                          r->tokens_per_call, "tokens_per_s", r->tokens_per_s, "wall_s", r->wall_s,
                          "hit_eos", r->hit_eos);
    json_object_set_new(o, "settings",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:I}", "max_tokens", p->gen_length,
                                  "slot_size", p->slot_size, "serial_num_blocks", p->n_blocks,
                                  "slot_threshold", (double)p->slot_threshold, "token_threshold",
                                  (double)p->token_threshold, "temperature", (double)p->temperature, "seed",
                                  (json_int_t)p->seed));
    return o;
}

static json_t *error_json(const char *msg, int code) {
    return json_pack("{s:{s:s, s:s, s:i}}", "error", "message", msg, "type", "server_error", "code", code);
}

/* ---- running one job ------------------------------------------------------------------ */
typedef struct {
    rf_server *s;
    job *j;
    rf_tok_stream *ts; /* NULL without a tokenizer */
} run_ctx;

static int is_cancelled(run_ctx *c) {
    pthread_mutex_lock(&c->s->mu);
    int gone = c->j->cancelled;
    pthread_mutex_unlock(&c->s->mu);
    return gone;
}

/* Decoder callback, once per planning step / infill iteration / AR token,
 * i.e. once per model call after the prompt: counts the calls, so that the
 * cost of a generation whose client left is known (/health, the log). */
static void on_event(const rf_decode_event *ev, void *user) {
    run_ctx *c = user;
    if (ev->kind != RF_EV_PLAN && ev->kind != RF_EV_INFILL_ITER && ev->kind != RF_EV_AR_TOKEN) return;
    pthread_mutex_lock(&c->s->mu);
    c->j->calls_now++;
    pthread_mutex_unlock(&c->s->mu);
}

/* Decoder callback: newly final tokens become one SSE chunk. */
static void on_tokens(const int *ids, int n, void *user) {
    run_ctx *c = user;
    if (!c->j->req.stream || is_cancelled(c)) return;
    size_t cap = 64, len = 0;
    char *text = rf_malloc(cap);
    text[0] = 0;
    for (int i = 0; i < n && c->ts; i++) {
        const char *piece = rf_tok_stream_put(c->ts, ids[i]);
        size_t k = piece ? strlen(piece) : 0;
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *g = rf_malloc(cap);
            memcpy(g, text, len + 1);
            free(text);
            text = g;
        }
        if (k) memcpy(text + len, piece, k + 1), len += k;
    }
    json_t *o = envelope(c->s, c->j, 1);
    json_object_set_new(o, "choices", json_pack("[o]", choice(c->j, text, ids, n, NULL, 1)));
    sse_event(c->s, c->j, o);
    free(text);
}

static void log_job(const rf_server *s, const job *j, const rf_gen_result *r) {
    if (!s->cfg.verbose) return;
    fprintf(stderr,
            "refusion serve: %s: %s, %d prompt + %d answer tokens, %d model calls, TPF %.2f, %.2f tokens/call, "
            "%.1f tokens/s, %.2f s\n",
            j->id, j->req.ar ? "ar" : "refusion", j->req.n_prompt, r->n_tokens, r->n_calls, r->tpf,
            r->tokens_per_call, r->tokens_per_s, r->wall_s);
}

static void run_job(rf_server *s, job *j) {
    run_ctx c = {s, j, s->tok ? rf_tok_stream_new(s->tok, 1) : NULL};
    rf_gen_params p = j->req.p;
    p.on_tokens = on_tokens, p.on_event = on_event, p.user = &c;
    rf_gen_result r;
    memset(&r, 0, sizeof r);
    int rc = j->req.ar ? rf_generate_ar(s->m, j->req.prompt, j->req.n_prompt, &p, &r)
                       : rf_generate_refusion(s->m, j->req.prompt, j->req.n_prompt, &p, &r);
    char *body = NULL;
    int status = 200;
    if (rc) {
        /* the request was checked before it was queued, so this is our fault */
        char msg[300];
        snprintf(msg, sizeof msg, "generation failed: %s", rf_last_error());
        fprintf(stderr, "refusion serve: %s: %s\n", j->id, msg);
        json_t *e = error_json(msg, 500);
        if (j->req.stream) sse_event(s, j, e);
        else status = 500, body = json_dumps(e, JSON_COMPACT), json_decref(e);
    } else {
        log_job(s, j, &r);
        const char *finish = r.hit_eos ? "stop" : "length";
        if (j->req.stream) {
            /* last chunk: held-back text, why it ended, usage and statistics */
            json_t *o = envelope(s, j, 1);
            json_object_set_new(o, "choices",
                                json_pack("[o]", choice(j, c.ts ? rf_tok_stream_flush(c.ts) : "", NULL, 0, finish, 1)));
            json_object_set_new(o, "usage", usage_json(j, &r));
            json_object_set_new(o, "refusion", stats_json(j, &r));
            sse_event(s, j, o);
        } else {
            char *text = s->tok ? rf_tok_decode(s->tok, r.ids, r.n_ids, 1) : NULL;
            json_t *o = envelope(s, j, 0);
            json_object_set_new(o, "choices", json_pack("[o]", choice(j, text, r.ids, r.n_ids, finish, 0)));
            json_object_set_new(o, "usage", usage_json(j, &r));
            json_object_set_new(o, "refusion", stats_json(j, &r));
            body = json_dumps(o, JSON_COMPACT);
            json_decref(o);
            free(text);
        }
    }
    pthread_mutex_lock(&s->mu);
    if (j->req.stream) out_append(j, "data: [DONE]\n\n", 14);
    else j->out = body, j->out_len = strlen(body), j->status = status;
    j->state = JOB_DONE;
    s->n_done++;
    s->tokens_done += r.n_tokens;
    if (j->cancelled) {
        /* the decoder has no cancel hook yet: what finishing it cost */
        s->n_cancelled++;
        s->calls_after_cancel += j->calls_now - j->calls_at_cancel;
        if (s->cfg.verbose)
            fprintf(stderr, "refusion serve: %s: the client left; %d model calls spent after that\n", j->id,
                    j->calls_now - j->calls_at_cancel);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
    rf_gen_result_free(&r);
    if (c.ts) rf_tok_stream_free(c.ts);
}

/* A queued job that will never run (shutdown): answer 503. s->mu held. */
static void fail_job_locked(job *j, const char *msg) {
    json_t *e = error_json(msg, 503);
    char *txt = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (j->req.stream) {
        out_append(j, "data: ", 6);
        out_append(j, txt, strlen(txt));
        out_append(j, "\n\ndata: [DONE]\n\n", 16);
        free(txt);
    } else {
        free(j->out);
        j->out = txt, j->out_len = strlen(txt), j->status = 503;
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
}

void *rf_serve_worker_main(void *arg) {
    rf_server *s = arg;
    /* OpenMP's thread count is a per-thread setting: set it here, in the
     * thread that runs the model */
    if (s->cfg.threads > 0) omp_set_num_threads(s->cfg.threads);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->queue_cv, &s->mu);
        if (s->stopping) break;
        job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        if (!j->abandoned) {
            j->state = JOB_RUNNING;
            pthread_cond_broadcast(&j->cv); /* its connection waits for it to leave the queue */
            pthread_mutex_unlock(&s->mu);
            run_job(s, j);
            pthread_mutex_lock(&s->mu);
        } else {
            j->state = JOB_DONE;
        }
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
    while (s->head) {
        job *j = s->head;
        s->head = j->next;
        fail_job_locked(j, "the server is shutting down");
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
    s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    return NULL;
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
    j->created = time(NULL);
    j->refs = 2;
    j->state = JOB_QUEUED;
    pthread_cond_init(&j->cv, NULL);
    /* a chat stream opens with the assistant's role, before any text */
    if (j->req.stream && j->req.kind == RF_REQ_CHAT) {
        json_t *o = envelope(s, j, 1);
        json_t *c = json_pack("{s:i, s:{s:s, s:s}, s:[], s:n}", "index", 0, "delta", "role", "assistant",
                              "content", "", "token_ids", "finish_reason");
        json_object_set_new(o, "choices", json_pack("[o]", c));
        sse_append_locked(j, o);
    }
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_active++;
    pthread_cond_signal(&s->queue_cv);
    pthread_mutex_unlock(&s->mu);
    return j;
}

void rf_serve_cancel_locked(rf_server *s, job *j) {
    (void)s;
    if (j->state == JOB_DONE || j->cancelled) return;
    j->cancelled = 1;
    j->abandoned = 1; /* a queued job is dropped when the worker reaches it */
    j->calls_at_cancel = j->calls_now;
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
