/* worker.c - the generation threads: each takes jobs off the FIFO queue one
 * at a time, runs the decoder, cuts the answer at max_tokens and at the
 * earliest stop sequence, and turns it into OpenAI-shaped JSON.
 *
 * A streamed job's output is a growing buffer of Server-Sent Events that the
 * connection thread drains as the decoder reports final tokens; a plain job's
 * output is the whole response body, set once at the end.
 *
 * Generation goes through the public API (include/refusion.h): one session
 * per worker, reused by every job it runs. */
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h" /* rf_session_allocs, for /health */
#include "api/api_internal.h"
#include "serve/serve_impl.h"
#include "serve/routes_llama.h"
#include "decode/ar_step.h"
#include "decode/rolling_step.h"
#include "model/workspace.h" /* rf_runstate_alloc: the scheduler's own run state */
#include "model/forward.h"
#include "model/runstate.h" /* its max_tokens, to grow it */
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

/* One SSE event "data: <compact json>\n\n" (o is consumed); floats with 6
 * significant digits, as in a plain answer (0.6, not 0.59999999999999998). */
static void sse_append_locked(job *j, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(o);
    if (!txt) txt = rf_serve_error_body("an event of the answer could not be built", "server_error", NULL, NULL);
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

static json_t *ids_json(const int32_t *ids, int n) {
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

/* choices[index]: the text (a piece of it when streaming) and its token ids */
static json_t *choice(const job *j, int index, const char *text, const int32_t *ids, int n, const char *finish,
                      int chunk) {
    json_t *c = json_pack("{s:i}", "index", index);
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

/* The decoder's statistics: how many tokens each model call produced (with
 * n > 1 choices: over all of them, see run_job). */
static json_t *stats_json(const job *j, const rf_stats *r) {
    const rf_gen_params *p = &j->req.p;
    json_t *o = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:b}", "mode", rf_method_name(j->req.p.method),
                          "model_calls", r->n_calls, "steps", r->n_steps, "tpf", r->tpf, "tokens_per_call",
                          r->tokens_per_call, "tokens_per_s", r->tokens_per_s, "wall_s", r->seconds,
                          "hit_eos", r->hit_eos);
    if (j->req.n_choices > 1) json_object_set_new(o, "choices", json_integer(j->req.n_choices));
    /* every setting of the shared table, as the request names it */
    json_t *set = json_object();
    for (int i = 0; i < rf_decode_table_n; i++) {
        const rf_opt *row = &rf_decode_table[i];
        if (!row->http) continue;
        char b[48]; /* as the option prints it: 0.6, not 0.60000002 */
        rf_opt_format(row, &j->req.d, b, sizeof b);
        json_object_set_new(set, row->http, row->type == RF_OPT_FLOAT    ? json_real(strtod(b, NULL))
                                            : row->type == RF_OPT_CHOICE ? json_string(b)
                                            : row->type == RF_OPT_FLAG   ? json_boolean(!strcmp(b, "on"))
                                                                         : json_integer(strtoll(b, NULL, 10)));
    }
    json_object_set_new(set, "max_tokens", json_integer(p->gen_length));
    json_object_set_new(o, "settings", set);
    /* where each of them came from: default, generation_config.json, flag (the server's) or request */
    json_t *src = json_object();
    for (int i = 0; i < rf_decode_table_n; i++)
        if (rf_decode_table[i].http)
            json_object_set_new(src, rf_decode_table[i].http, json_string(rf_src_names[j->req.d.src[i]]));
    json_object_set_new(o, "settings_source", src);
    return o;
}

/* OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
 * Never NULL: every string that is not UTF-8 is replaced (json_string
 * refuses it), and a failed allocation leaves a smaller object, not none. */
static json_t *str_or(const char *s, const char *fallback) {
    json_t *v = s ? json_string(s) : NULL;
    return v ? v : fallback ? json_string(fallback) : json_null();
}
json_t *rf_serve_error_json(const char *msg, const char *type, const char *param, const char *code) {
    json_t *e = json_object(), *o = json_object();
    if (!e || !o) {
        json_decref(e);
        json_decref(o);
        return NULL;
    }
    json_object_set_new(e, "message", str_or(msg, "(an error message that is not UTF-8)"));
    json_object_set_new(e, "type", str_or(type, "server_error"));
    json_object_set_new(e, "param", param && *param ? str_or(param, NULL) : json_null());
    json_object_set_new(e, "code", str_or(code, NULL));
    json_object_set_new(o, "error", e);
    return o;
}

char *rf_serve_error_body(const char *msg, const char *type, const char *param, const char *code) {
    json_t *o = rf_serve_error_json(msg, type, param, code);
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return txt ? txt
               : rf_strdup("{\"error\":{\"message\":\"the error reply could not be built\",\"type\":"
                           "\"server_error\",\"param\":null,\"code\":null}}");
}

/* ---- running one job ------------------------------------------------------------------ */
/* The answer as it arrives from the decoder, in position order: the token
 * ids and their text, cut at max_tokens and at the earliest stop sequence.
 * Once cut, the job's cancel flag stops the decoder before its next call. */
typedef struct {
    rf_server *s;
    job *j;
    int index;           /* the choice ("n" > 1: 0 .. n-1) */
    refusion_text_stream *ts; /* NULL without a tokenizer */
    int eos;
    int32_t *ids;        /* [n_ids] kept tokens */
    size_t *tok_start;   /* [n_ids] offset of each token's text in text */
    int n_ids, cap_ids;
    char *text;          /* the kept tokens' text */
    size_t len, cap;
    int cut;             /* 1: max_tokens or a stop sequence reached: nothing more is kept */
    int stop_hit;        /* the cut was a stop sequence */
    size_t max_stop;     /* longest stop sequence */
    int ids_sent;        /* streaming: ids already in a chunk */
    size_t text_sent;    /* streaming: text bytes already in a chunk */
    int stop_index;      /* stop_hit: which stop sequence */
    int steps_seen;      /* planning steps (AR: tokens) the decoder's events reported */
    double t0;           /* rf_now() at the choice's start */
} run_ctx;

static void text_append(run_ctx *c, const char *piece) {
    size_t k = piece ? strlen(piece) : 0;
    if (c->len + k + 1 > c->cap) {
        while (c->len + k + 1 > c->cap) c->cap = c->cap ? 2 * c->cap : 256;
        char *g = rf_malloc(c->cap);
        if (c->len) memcpy(g, c->text, c->len);
        free(c->text);
        c->text = g;
    }
    if (k) memcpy(c->text + c->len, piece, k);
    c->len += k;
    c->text[c->len] = 0;
}

/* The earliest stop sequence that starts at or after from: cut there (the
 * tokens whose text starts before it are kept). */
static void find_stop(run_ctx *c, size_t from) {
    const rf_serve_req *q = &c->j->req;
    if (!q->n_stop || !c->text) return;
    const char *best = NULL;
    for (int i = 0; i < q->n_stop; i++) {
        const char *f = strstr(c->text + from, q->stop[i]);
        if (f && (!best || f < best)) best = f;
    }
    if (!best) return;
    for (int i = 0; i < q->n_stop; i++)
        if (!strncmp(best, q->stop[i], strlen(q->stop[i]))) {
            c->stop_index = i;
            break;
        }
    size_t k = (size_t)(best - c->text);
    c->len = k;
    c->text[k] = 0;
    while (c->n_ids > 0 && c->tok_start[c->n_ids - 1] >= k) c->n_ids--;
    c->cut = c->stop_hit = 1;
}

static void cut_now(run_ctx *c) {
    c->cut = 1;
    c->j->cancel_flag = 1; /* the decoder stops before its next model call */
}

/* A chunk with the text and ids not yet sent: all of them when final,
 * otherwise holding back what could still be the start of a stop sequence
 * (and never splitting a UTF-8 character). finish: NULL or the reason. */
static void stream_pending(run_ctx *c, int final, const char *finish, json_t *stats) {
    size_t upto = c->len;
    if (!final && !c->cut && c->max_stop > 1) {
        upto = c->len > c->max_stop - 1 ? c->len - (c->max_stop - 1) : 0;
        while (upto > c->text_sent && ((unsigned char)c->text[upto] & 0xC0) == 0x80) upto--;
    }
    if (upto < c->text_sent) upto = c->text_sent;
    if (!finish && upto == c->text_sent && c->ids_sent == c->n_ids) {
        json_decref(stats);
        return;
    }
    char *piece = rf_malloc(upto - c->text_sent + 1);
    if (upto > c->text_sent) memcpy(piece, c->text + c->text_sent, upto - c->text_sent);
    piece[upto - c->text_sent] = 0;
    json_t *o;
    if (c->j->req.kind == RF_REQ_NATIVE) { /* llama-server's chunk; the last one comes from job_finish */
        json_decref(stats);
        if (upto == c->text_sent && c->ids_sent == c->n_ids) {
            free(piece);
            return;
        }
        o = rf_llama_chunk(c->j, piece, c->ids + c->ids_sent, c->n_ids - c->ids_sent);
    } else {
        o = envelope(c->s, c->j, 1);
        json_object_set_new(o, "choices", json_pack("[o]", choice(c->j, c->index, piece, c->ids + c->ids_sent,
                                                                  c->n_ids - c->ids_sent, finish, 1)));
        if (stats) json_object_update(o, stats); /* the statistics and timings of the last chunk */
        json_decref(stats);
    }
    sse_event(c->s, c->j, o);
    free(piece);
    c->text_sent = upto, c->ids_sent = c->n_ids;
}

/* Decoder callback, once per planning step / infill iteration / AR token,
 * i.e. once per model call after the prompt: counts the calls, so that the
 * cost of a generation whose client left is known (/health, the log). */
static void on_event(const rf_event *ev, void *user) {
    run_ctx *c = user;
    pthread_mutex_lock(&c->s->mu);
    if (!c->steps_seen && !c->j->prompt_s) c->j->prompt_s = rf_now() - c->t0;
    if (ev->step + 1 > c->steps_seen) c->steps_seen = ev->step + 1;
    if (c->j->req.decode_events && !c->j->cancelled) rf_serve_decode_event_locked(c->s, c->j, ev);
    if (ev->kind == RF_EVENT_PLAN || ev->kind == RF_EVENT_INFILL_ITER || ev->kind == RF_EVENT_AR_TOKEN)
        c->j->calls_now++;
    pthread_mutex_unlock(&c->s->mu);
}

/* Decoder callback: newly final tokens, in position order. */
static void on_tokens(const int32_t *ids, int n, void *user) {
    run_ctx *c = user;
    job *j = c->j;
    if (c->cut) return;
    size_t from = c->len;
    for (int i = 0; i < n && !c->cut; i++) {
        if (c->n_ids == j->req.max_tokens) { /* padding beyond the cap */
            cut_now(c);
            break;
        }
        if (c->n_ids == c->cap_ids) {
            c->cap_ids = c->cap_ids ? 2 * c->cap_ids : 64;
            int32_t *g = rf_malloc(c->cap_ids * sizeof *g);
            size_t *h = rf_malloc(c->cap_ids * sizeof *h);
            if (c->n_ids) memcpy(g, c->ids, c->n_ids * sizeof *g), memcpy(h, c->tok_start, c->n_ids * sizeof *h);
            free(c->ids), free(c->tok_start);
            c->ids = g, c->tok_start = h;
        }
        c->tok_start[c->n_ids] = c->len;
        c->ids[c->n_ids++] = ids[i];
        if (c->ts) text_append(c, rf_text_stream_put(c->ts, ids[i]));
    }
    /* a stop may begin in text that arrived before this call */
    find_stop(c, from > c->max_stop ? from - c->max_stop : 0);
    if (c->stop_hit) cut_now(c);
    pthread_mutex_lock(&c->s->mu);
    j->n_decoded = c->n_ids;
    pthread_mutex_unlock(&c->s->mu);
    if (j->req.stream && !j->cancelled) stream_pending(c, 0, NULL, NULL);
}

static void log_choice(const rf_server *s, const job *j, const run_ctx *c, const rf_stats *r) {
    if (!s->cfg.verbose) return;
    char which[32] = "";
    if (j->req.n_choices > 1) snprintf(which, sizeof which, " choice %d,", c->index);
    fprintf(stderr,
            "refusion serve: %s:%s %s, %d prompt + %d answer tokens%s, %d model calls, TPF %.2f, %.2f tokens/call, "
            "%.1f tokens/s, %.2f s\n",
            j->id, which, rf_method_name(j->req.p.method), j->req.n_prompt, c->n_ids,
            c->stop_hit ? " (stop sequence)" : c->cut ? " (max_tokens)" : "", r->n_calls, r->tpf,
            r->tokens_per_call, r->tokens_per_s, r->seconds);
}

static void run_ctx_free(run_ctx *c) {
    free(c->ids), free(c->tok_start), free(c->text);
    rf_text_stream_free(c->ts);
    memset(c, 0, sizeof *c);
}

/* Set up c for choice `index` of j: 0, or -1 when the client has left.
 * The previous choice's max_tokens / stop cut raised the cancel flag: it is
 * lowered, unless the client has left (both under the lock that
 * rf_serve_cancel_locked holds). *calls0: the job's calls so far. */
static int choice_begin(rf_server *s, job *j, int index, run_ctx *c, int *calls0) {
    memset(c, 0, sizeof *c);
    c->s = s, c->j = j, c->index = index;
    c->t0 = rf_now();
    if (s->tokenizer && !(c->ts = rf_text_stream_new(s->tokenizer, 1))) return -1;
    int eos = j->req.p.eos_id;
    c->eos = eos == RF_TOKEN_FROM_MODEL ? rf_model_eos_id(s->model) : eos;
    for (int i = 0; i < j->req.n_stop; i++)
        if (strlen(j->req.stop[i]) > c->max_stop) c->max_stop = strlen(j->req.stop[i]);
    pthread_mutex_lock(&s->mu);
    int gone = j->cancelled;
    *calls0 = j->calls_now;
    if (!gone) j->cancel_flag = 0;
    pthread_mutex_unlock(&s->mu);
    return gone ? -1 : 0;
}

/* After the decoder returned rc (wall seconds): a generation we stopped
 * (max_tokens / stop) is complete with the answer so far; the text
 * stream's held-back bytes are added. Returns the choice's rc. */
static int choice_end(rf_server *s, job *j, run_ctx *c, rf_stats *r, int rc, double wall, int calls0) {
    if (rc > 0) rc = 0;
    if (rc && c->cut) { /* we stopped it: the answer so far is the answer */
        rc = 0;
        memset(r, 0, sizeof *r);
        pthread_mutex_lock(&s->mu);
        r->n_calls = j->calls_now - calls0 + 1; /* + the prompt's */
        pthread_mutex_unlock(&s->mu);
        r->seconds = wall;
        r->tokens_per_s = wall > 0 ? c->n_ids / wall : 0;
        r->tokens_per_call = r->n_calls ? (double)c->n_ids / r->n_calls : 0;
        /* the decoder's own figures are lost with its run: the steps its
         * events reported, and the kept tokens per step */
        r->n_steps = c->steps_seen;
        r->tpf = r->n_steps ? (double)c->n_ids / r->n_steps : 0;
    }
    if (!rc && c->ts && !c->cut) { /* held-back bytes of an incomplete character */
        size_t from = c->len;
        text_append(c, rf_text_stream_flush(c->ts));
        find_stop(c, from > c->max_stop ? from - c->max_stop : 0);
    }
    if (!rc) log_choice(s, j, c, r);
    return rc;
}

/* One choice of the job: a generation of its own, sampled with seed +
 * index, on the worker's session. Fills c (the answer, cut) and r (the
 * decoder's statistics); 0, or -1 with rf_last_error() (or the client left:
 * j->cancelled). */
static int run_choice(rf_server *s, refusion_session *sess, job *j, int index, run_ctx *c, rf_stats *r) {
    int calls0;
    memset(r, 0, sizeof *r);
    if (choice_begin(s, j, index, c, &calls0)) return -1;
    rf_params p = j->req.p; /* this choice's seed and callbacks */
    p.seed += (uint64_t)index;
    p.on_tokens = on_tokens, p.on_event = on_event, p.user = c;
    p.cancel = &j->cancel_flag;
    double t0 = rf_now();
    /* the answer arrives through on_tokens; a fatal error inside the
     * decoder comes back as RF_ERR_NOMEM (an allocation failed; the
     * generation's memory was given back) or RF_ERR_INTERNAL (a broken
     * invariant) and fails this request, not the server */
    int rc = rf_generate(sess, j->req.prompt, j->req.n_prompt, &p, NULL, 0, r);
    return choice_end(s, j, c, r, rc, rf_now() - t0, calls0);
}

/* sum's derived figures from its totals (tpf_sum: TPF weighted by steps) */
static void sum_finish(rf_stats *sum, int tokens, double tpf_sum) {
    sum->n_tokens = tokens;
    sum->tpf = sum->n_steps ? tpf_sum / sum->n_steps : 0;
    sum->tokens_per_call = sum->n_calls ? (double)tokens / sum->n_calls : 0;
    sum->tokens_per_s = sum->seconds > 0 ? tokens / sum->seconds : 0;
}

/* A job's choices as they complete: the plain answer's choices, the
 * statistics and usage summed over them (completion tokens, model calls,
 * steps and wall time are summed, TPF is the mean over all steps, hit_eos
 * means every choice ended with EOS). */
typedef struct {
    json_t *choices;
    json_t *native;  /* RF_REQ_NATIVE: llama-server's answer (one choice) */
    rf_stats sum;
    double tpf_sum;
    int tokens;
} job_acc;

/* llama-server's "timings": the prompt's part is the time to the decoder's
 * first event (its prefill, and for plan-and-infill the first plan) */
static json_t *job_timings(const job *j, const job_acc *a) {
    rf_serve_timing t = {j->req.n_prompt, j->prompt_s, a->tokens, a->sum.seconds - j->prompt_s};
    if (t.predicted_s < 0) t.predicted_s = 0;
    return rf_serve_timings_json(&t);
}

static void acc_init(job_acc *a) {
    memset(a, 0, sizeof *a);
    a->choices = json_array();
    a->sum.hit_eos = 1;
}

/* Choice i of n is complete (c, r): stream its last chunk, or keep it for
 * the plain answer. As OpenAI does, a stream's chunk with choices [] follows
 * only when stream_options.include_usage asks for usage (it then carries
 * the statistics too); otherwise the statistics ride on the last choice's
 * finishing chunk, so that every chunk has a choice (clients read
 * chunk.choices[0] unchecked). */
static void acc_choice(rf_server *s, job *j, job_acc *a, run_ctx *c, const rf_stats *r, int i, int n) {
    int hit_eos = c->n_ids > 0 && c->ids[c->n_ids - 1] == c->eos;
    const char *finish = c->stop_hit || hit_eos ? "stop" : "length";
    a->tokens += c->n_ids;
    a->sum.n_calls += r->n_calls, a->sum.n_steps += r->n_steps, a->sum.seconds += r->seconds;
    a->sum.hit_eos &= hit_eos;
    a->tpf_sum += r->tpf * r->n_steps;
    if (j->req.kind == RF_REQ_NATIVE) { /* one choice; the answer (or the stream's last chunk) in job_finish */
        if (j->req.stream) stream_pending(c, 1, NULL, NULL);
        pthread_mutex_lock(&s->mu);
        j->n_decoded = c->n_ids; /* after the last stop check */
        pthread_mutex_unlock(&s->mu);
        const char *stop_type = c->stop_hit ? "word" : hit_eos ? "eos" : "limit";
        a->native = rf_llama_final(s, j, j->req.stream ? "" : c->text ? c->text : "", c->ids, j->req.stream ? 0 : c->n_ids,
                                   stop_type, c->stop_hit ? j->req.stop[c->stop_index] : "");
        return;
    }
    json_t *last_stats = NULL;
    if (i == n - 1 && j->req.stream && !j->req.include_usage) {
        sum_finish(&a->sum, a->tokens, a->tpf_sum);
        last_stats = json_pack("{s:o, s:o}", "refusion", stats_json(j, &a->sum), "timings", job_timings(j, a));
    }
    if (j->req.stream) stream_pending(c, 1, finish, last_stats);
    else json_array_append_new(a->choices, choice(j, i, c->text ? c->text : "", c->ids, c->n_ids, finish, 0));
}

/* The job is over (rc: 0, or the failure of a choice): its output, the
 * server's counters, and JOB_DONE. */
static void job_finish(rf_server *s, job *j, job_acc *a, int rc) {
    sum_finish(&a->sum, a->tokens, a->tpf_sum);
    int tokens = a->tokens;
    char *body = NULL;
    int status = 200;
    if (rc && j->cancelled) {
        /* the client left: nobody reads the answer */
    } else if (rc) {
        /* the request was checked before it was queued, so this is our fault */
        char msg[300];
        snprintf(msg, sizeof msg, "generation failed: %s", rf_last_error());
        fprintf(stderr, "refusion serve: %s: %s\n", j->id, msg);
        body = rf_serve_error_body(msg, "server_error", NULL, NULL);
        if (j->req.stream) {
            pthread_mutex_lock(&s->mu);
            out_append(j, "data: ", 6);
            out_append(j, body, strlen(body));
            out_append(j, "\n\n", 2);
            pthread_mutex_unlock(&s->mu);
            free(body);
            body = NULL;
        } else {
            status = rc == RF_ERR_NOMEM ? 503 : 500;
        }
    } else {
        json_t *usage = json_pack("{s:i, s:i, s:i}", "prompt_tokens", j->req.n_prompt, "completion_tokens", tokens,
                                  "total_tokens", j->req.n_prompt + tokens);
        json_t *o = envelope(s, j, j->req.stream);
        if (j->req.kind == RF_REQ_NATIVE) {
            json_decref(o);
            o = a->native ? a->native : json_object();
            a->native = NULL;
            json_object_set_new(o, "timings", job_timings(j, a));
            json_object_set_new(o, "refusion", stats_json(j, &a->sum));
            if (j->req.stream) sse_event(s, j, o);
            else body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)), json_decref(o);
        } else if (j->req.stream) {
            /* usage in a chunk of its own (choices: []) when stream_options asks */
            if (j->req.include_usage) {
                json_object_set_new(o, "choices", json_array());
                json_object_set_new(o, "refusion", stats_json(j, &a->sum));
                json_object_set_new(o, "usage", json_incref(usage));
                json_object_set_new(o, "timings", job_timings(j, a));
                sse_event(s, j, o);
            } else {
                json_decref(o);
            }
        } else {
            json_object_set_new(o, "choices", json_incref(a->choices));
            json_object_set_new(o, "usage", json_incref(usage));
            json_object_set_new(o, "refusion", stats_json(j, &a->sum));
            json_object_set_new(o, "timings", job_timings(j, a));
            body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
            json_decref(o);
        }
        json_decref(usage);
    }
    json_decref(a->choices);
    json_decref(a->native);
    a->choices = a->native = NULL;
    pthread_mutex_lock(&s->mu);
    /* llama-server's own stream ends with its last chunk ("stop": true) */
    if (j->req.stream && j->req.kind != RF_REQ_NATIVE) out_append(j, "data: [DONE]\n\n", 14);
    else if (body) j->out = body, j->out_len = strlen(body), j->status = status;
    j->state = JOB_DONE;
    rf_serve_slot_give_locked(s, j);
    s->n_done++;
    s->n_running--;
    if (!rc) {
        s->tokens_done += tokens;
        s->prompt_tokens += j->req.n_prompt;
        s->gen_seconds += a->sum.seconds;
        s->latency_sum += rf_now() - j->queued_at;
        s->n_latency++;
    } else if (!j->cancelled) {
        s->n_failed++;
    }
    if (j->cancelled) {
        s->n_cancelled++;
        s->calls_after_cancel += j->calls_now - j->calls_at_cancel;
        if (s->cfg.verbose)
            fprintf(stderr, "refusion serve: %s: the client left; %d model calls spent after that\n", j->id,
                    j->calls_now - j->calls_at_cancel);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
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
    acc_init(&a);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        run_ctx c;
        rf_stats r;
        rc = run_choice(s, sess, j, i, &c, &r);
        if (!rc) acc_choice(s, j, &a, &c, &r, i, n);
        run_ctx_free(&c);
    }
    pthread_mutex_lock(&s->mu);
    s->buffer_allocs += rf_session_allocs(sess) - allocs0;
    s->buffer_bytes[w - s->workers] = rf_session_bytes(sess);
    pthread_mutex_unlock(&s->mu);
    job_finish(s, j, &a, rc);
}

/* A queued job that will never run (shutdown): answer 503. s->mu held. */
static void fail_job_locked(job *j, const char *msg) {
    char *txt = rf_serve_error_body(msg, "server_error", NULL, "server_shutting_down");
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

/* Take the first job off a queue (s->mu held): NULL when empty. */
static job *pop_locked(job **head, job **tail) {
    job *j = *head;
    if (!j) return NULL;
    *head = j->next;
    if (!*head) *tail = NULL;
    j->next = NULL;
    return j;
}

/* The job leaves the queue to run (s->mu held): 0, or -1 when its client
 * has already left (the job is then dropped). */
static int start_job_locked(rf_server *s, job *j) {
    if (j->abandoned) {
        j->state = JOB_DONE;
        s->n_active--;
        rf_serve_job_unref_locked(j);
        return -1;
    }
    j->state = JOB_RUNNING;
    rf_serve_slot_take_locked(s, j);
    s->n_running++;
    if (s->n_running > s->peak_running) s->peak_running = s->n_running;
    pthread_cond_broadcast(&j->cv); /* its connection waits for it to leave the queue */
    return 0;
}

/* Shutdown: fail every job still in the queue (s->mu held). */
static void fail_queue_locked(rf_server *s, job **head, job **tail) {
    for (job *j; (j = pop_locked(head, tail));) {
        fail_job_locked(j, "the server is shutting down");
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
}

/* the executor of a worker's model calls under continuous batching (below) */
static int remote_forward(void *user, const rf_model *m, rf_kvcache *c, const rf_batch *b);

void *rf_serve_worker_main(void *arg) {
    rf_worker *w = arg;
    rf_server *s = w->s;
    /* OpenMP's thread count is a per-thread setting: set it here, in the
     * thread that runs the model */
    if (s->cfg.defaults.threads > 0) omp_set_num_threads(s->cfg.defaults.threads);
    /* continuous batching: the decoder's model calls join the scheduler's */
    pthread_cond_init(&w->call_cv, NULL);
    if (s->cfg.batch) rf_workspace_set_forward(rf_session_workspace(w->sess), remote_forward, w);
    pthread_mutex_lock(&s->mu);
    s->workers_live++;
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->queue_cv, &s->mu);
        if (s->stopping) break;
        job *j = pop_locked(&s->head, &s->tail);
        if (start_job_locked(s, j)) continue;
        pthread_mutex_unlock(&s->mu);
        run_job(s, w, j);
        pthread_mutex_lock(&s->mu);
        s->n_active--;
        rf_serve_job_unref_locked(j);
    }
    fail_queue_locked(s, &s->head, &s->tail);
    s->workers_live--;
    pthread_cond_broadcast(&s->batch_cv); /* the scheduler may be waiting for the last worker to end */
    pthread_mutex_unlock(&s->mu);
    if (s->cfg.batch) rf_workspace_set_forward(rf_session_workspace(w->sess), NULL, NULL);
    pthread_cond_destroy(&w->call_cv);
    return NULL;
}

/* ---- continuous batching ----------------------------------------------------------
 * The scheduler thread makes one forward pass at a time for every running
 * generation. Its own rows (AR decoding and the rolling slot, one choice:
 * decode/ar_step.h, decode/rolling_step.h): each step it asks every row's
 * sequence for its next call (the token just drawn, a rolling call, or a
 * chunk of its prompt). The other generations (plan-and-infill, MDM, n > 1
 * choices) run their decoders in the worker threads, but each of their
 * model calls comes here (remote_forward below) and waits for the next
 * step. The step runs the rows' calls and the workers' calls as one pass
 * (rf_forward_calls: each call on its own KV cache - a plan-and-infill
 * call's forked rows, MDM's bidirectional pass - the weights read once)
 * and hands each its logits. New jobs join at the next step, finished
 * ones leave; a cancelled one (client gone, max_tokens, stop) leaves
 * before its next call. Prompt tokens are fed at most PREFILL_BUDGET per
 * step in all, so a long prompt joins over several steps while the others
 * keep decoding (a worker's call cannot be split: see take_remote_locked).
 * Every answer is the one the generation gets alone (decode/ar_step.c;
 * tests/model_forward_calls.c, tests/serve_batch_all.sh). */
enum { PREFILL_BUDGET = 256 };

/* Prompt-prefix reuse: the caches of finished batched generations (their
 * prompt and answer in natural order, positions 0, 1, ...: exactly what a
 * prefill of those tokens computes), least recently used first out within
 * --cache-mb. A new request starts from a copy of the entries of the
 * longest prefix it shares with one of them (a chat's next turn: the last
 * turn's prompt and answer; a shared system prompt). Batched generations
 * (AR, the rolling slot: its cache cut to the committed tokens) leave caches
 * here and reuse them; a plan-and-infill answer's cache is in the order its
 * slots were committed, not a prefill's, and the workers' sessions keep
 * theirs.
 * Owned by the scheduler thread (the counters in s are under s->mu). */
typedef struct pc_entry {
    int *ids, n;             /* the tokens whose entries kv holds */
    rf_kvcache kv;
    size_t bytes;
    unsigned long long used; /* the cache's clock at the last use */
    struct pc_entry *next;
} pc_entry;

typedef struct {
    pc_entry *head;
    size_t bytes;
    unsigned long long clock;
} prefix_cache;

static size_t kv_bytes(const rf_kvcache *kv) {
    return (size_t)kv->n_layers * kv->cap * kv->kv_dim * 2 * sizeof(float) + (size_t)kv->cap * sizeof(int);
}

static void pc_drop(prefix_cache *pc, pc_entry **link) {
    pc_entry *e = *link;
    *link = e->next;
    pc->bytes -= e->bytes;
    rf_kv_free(&e->kv);
    free(e->ids);
    free(e);
}

/* The entry sharing the longest prefix with prompt (its length in
 * *common), or NULL. */
static pc_entry *pc_find(prefix_cache *pc, const int *prompt, int n, int *common) {
    pc_entry *best = NULL;
    *common = 0;
    for (pc_entry *e = pc->head; e; e = e->next) {
        int k = 0, lim = e->n < n ? e->n : n;
        while (k < lim && e->ids[k] == prompt[k]) k++;
        if (k > *common) *common = k, best = e;
    }
    if (best) best->used = ++pc->clock;
    return best;
}

/* Keep a finished generation's cache (taken over), replacing the entries
 * whose tokens it begins with, then drop the least recently used down to
 * the budget. */
static void pc_put(prefix_cache *pc, size_t budget, rf_kvcache *kv, int *ids, int n) {
    size_t bytes = kv_bytes(kv);
    if (n < 1 || bytes > budget) {
        rf_kv_free(kv);
        free(ids);
        return;
    }
    for (pc_entry **l = &pc->head; *l;) {
        pc_entry *e = *l;
        if (e->n <= n && !memcmp(e->ids, ids, (size_t)e->n * sizeof *ids)) pc_drop(pc, l);
        else l = &e->next;
    }
    pc_entry *e = rf_calloc(1, sizeof *e);
    e->ids = ids, e->n = n, e->kv = *kv, e->bytes = bytes, e->used = ++pc->clock;
    e->next = pc->head;
    pc->head = e;
    pc->bytes += bytes;
    while (pc->bytes > budget) {
        pc_entry **lru = &pc->head;
        for (pc_entry **l = &pc->head; *l; l = &(*l)->next)
            if ((*l)->used < (*lru)->used) lru = l;
        pc_drop(pc, lru);
    }
}

typedef struct {
    job *j;
    run_ctx c;
    rf_ar_seq *q;     /* AR decoding, or */
    rf_roll_seq *rq;  /* the rolling slot */
    int calls0;
    double t0;
    int logit_row;    /* this step: its first row in the logits, or -1 */
} batch_row;

/* the decoder's callbacks, as the worker path's (the internal ids are ints):
 * one event per model call after the prompt's is counted */
static void on_tokens_int(const int *ids, int n, void *user) { on_tokens((const int32_t *)ids, n, user); }
static void on_event_int(const rf_decode_event *ev, void *user) { on_event(ev, user); }

/* The scheduler's calls into the library, each behind a catch point: an
 * rf_die inside (a failed allocation, a broken invariant, a test's fault
 * point) fails the rows concerned, not the server. */
/* r's sequence: AR or the rolling slot, with a reused prefix of src */
static int guarded_new(const rf_model *m, batch_row *r, const rf_gen_params *p, const rf_kvcache *src,
                       int n_reuse) {
    const job *j = r->j;
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : -1;
    if (p->method == RF_METHOD_REFUSION)
        r->rq = rf_roll_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    else
        r->q = rf_ar_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    rf_catch_pop(&k);
    return r->q || r->rq ? 0 : -1;
}
/* r's next call: its tokens (count returned, < 0: failed), positions and
 * how many of its last tokens want logits */
static int guarded_next(batch_row *r, int budget, const int **t, const int **ps, int *buf, int *n_logits) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : -1;
    int n;
    if (r->rq) {
        n = rf_roll_seq_next(r->rq, budget, t, ps, n_logits);
    } else {
        n = rf_ar_seq_next(r->q, budget, t, ps, buf);
        *n_logits = n > 0 && rf_ar_seq_wants_logits(r->q);
    }
    rf_catch_pop(&k);
    return n;
}
/* 1: done, 0: not yet, < 0: failed */
static int guarded_after(batch_row *r, const float *logits) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : -1;
    int done = r->rq ? rf_roll_seq_after(r->rq, logits) : rf_ar_seq_after(r->q, logits);
    rf_catch_pop(&k);
    return done;
}
/* 0, -1 (refused: rf_forward_calls's check of the whole call), or the
 * rf_die inside: RF_ERR_NOMEM, RF_ERR_INTERNAL */
static int guarded_forward(const rf_model *m, rf_runstate *rs, const rf_call_batch *b) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : RF_ERR_INTERNAL;
    int rc = rf_forward_calls(m, rs, b, NULL);
    rf_catch_pop(&k);
    return rc;
}
static rf_runstate *guarded_runstate(const rf_config *cfg, int max_tokens, int max_ctx) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return NULL;
    rf_runstate *rs = rf_runstate_alloc(cfg, max_tokens, max_ctx, 0);
    rf_catch_pop(&k);
    return rs;
}

/* The row's last steps, whatever ended it: its context and r freed, the job
 * finished with a (its answer, or nothing on failure) and rc, the row's
 * place and its reference to the job given back. */
static void row_release(rf_server *s, batch_row *r, job_acc *a, int rc) {
    job *j = r->j;
    run_ctx_free(&r->c);
    free(r);
    job_finish(s, j, a, rc);
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    rf_serve_job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

/* A row for job j (its decoder's callbacks hold its address: rows are
 * allocated one by one, never moved), or NULL when it could not start (the
 * job is then finished, failed). rs: the scheduler's run state (NULL: it
 * could not be allocated). */
static batch_row *row_start(rf_server *s, job *j, const rf_runstate *rs, prefix_cache *pc) {
    batch_row *r = rf_calloc(1, sizeof *r);
    r->j = j;
    r->t0 = rf_now();
    int rc = choice_begin(s, j, 0, &r->c, &r->calls0);
    if (!rc && !rs) {
        rf_set_error("out of memory for the batched model calls' buffers");
        rc = RF_ERR_NOMEM;
    }
    if (!rc) {
        rf_gen_params p = j->req.p;
        p.on_tokens = on_tokens_int, p.on_event = on_event_int, p.user = &r->c;
        p.cancel = &j->cancel_flag;
        p.ws = NULL; /* the sequence's own cache */
        int common = 0;
        pc_entry *e = pc_find(pc, j->req.prompt, j->req.n_prompt, &common);
        common = rf_kv_reusable(e ? &e->kv : NULL, common, j->req.n_prompt); /* as the sequences cut it */
        rc = guarded_new(s->m, r, &p, e ? &e->kv : NULL, common);
        if (!rc && common > 0) {
            pthread_mutex_lock(&s->mu);
            s->prefix_hits++;
            s->prefix_tokens += common;
            pthread_mutex_unlock(&s->mu);
        }
    }
    if (rc) {
        job_acc a;
        acc_init(&a);
        row_release(s, r, &a, rc);
        return NULL;
    }
    return r;
}

/* Row r is over: rc 0 when its sequence completed, else the failure
 * (cancelled, cut, or an error in rf_last_error()). Its sequence is freed
 * in every case: an rf_die inside one of its steps cannot leave it half
 * changed, since a step's only lasting allocation (the next step's
 * statistics, ans_step) is its last action. r itself is freed. */
static void row_end(rf_server *s, batch_row *r, int rc, prefix_cache *pc) {
    job *j = r->j;
    rf_stats st;
    memset(&st, 0, sizeof st);
    if (!rc && s->cfg.cache_bytes > 0) { /* its cache, for the requests that begin the same way */
        rf_kvcache kv;
        int *ids, n = r->rq ? rf_roll_seq_take_cache(r->rq, &kv, &ids) : rf_ar_seq_take_cache(r->q, &kv, &ids);
        pc_put(pc, s->cfg.cache_bytes, &kv, ids, n);
        pthread_mutex_lock(&s->mu);
        s->prefix_cache_bytes = pc->bytes;
        pthread_mutex_unlock(&s->mu);
    }
    if (!rc) {
        rf_gen_result g;
        rc = r->rq ? rf_roll_seq_finish(r->rq, &g) : rf_ar_seq_finish(r->q, &g);
        if (!rc) {
            st.n_tokens = g.n_ids, st.hit_eos = g.hit_eos, st.n_calls = g.n_calls, st.seconds = g.wall_s;
            st.tpf = g.tpf, st.tokens_per_call = g.tokens_per_call, st.tokens_per_s = g.tokens_per_s;
            st.n_steps = g.n_steps;
            rf_gen_result_free(&g);
        }
    } else {
        rf_ar_seq_free(r->q);
        rf_roll_seq_free(r->rq);
    }
    r->q = NULL, r->rq = NULL;
    rc = choice_end(s, j, &r->c, &st, rc, rf_now() - r->t0, r->calls0);
    job_acc a;
    acc_init(&a);
    if (!rc) acc_choice(s, j, &a, &r->c, &st, 0, 1);
    row_release(s, r, &a, rc);
}

/* The scheduler's buffers for one call's rows, grown when a step needs more
 * (a rolling row feeds up to two slots, every token with its logits). */
typedef struct {
    int *tokens, *pos, tcap; /* [tcap] */
    int *lidx;               /* [lcap] */
    float *logits;           /* [lcap, V] */
    int lcap;
} step_bufs;

static void *grow(void *old, size_t used, size_t bytes) {
    void *g = rf_malloc(bytes);
    if (used) memcpy(g, old, used);
    free(old);
    return g;
}

/* room for n more tokens after T and nl more logits rows after L */
static void bufs_reserve(step_bufs *b, int T, int n, int L, int nl, int V) {
    if (T + n > b->tcap) {
        int c = 2 * b->tcap > T + n ? 2 * b->tcap : T + n;
        b->tokens = grow(b->tokens, (size_t)T * sizeof(int), (size_t)c * sizeof(int));
        b->pos = grow(b->pos, (size_t)T * sizeof(int), (size_t)c * sizeof(int));
        b->tcap = c;
    }
    if (L + nl > b->lcap) {
        int c = 2 * b->lcap > L + nl ? 2 * b->lcap : L + nl;
        b->lidx = grow(b->lidx, (size_t)L * sizeof(int), (size_t)c * sizeof(int));
        free(b->logits); /* written by the call, after every row is in */
        b->logits = NULL, b->lcap = 0;
        b->logits = rf_malloc((size_t)c * V * sizeof(float));
        b->lcap = c;
    }
}
static int guarded_reserve(step_bufs *b, int T, int n, int L, int nl, int V) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return RF_ERR_NOMEM;
    bufs_reserve(b, T, n, L, nl, V);
    rf_catch_pop(&k);
    return 0;
}

/* ---- the workers' model calls ------------------------------------------------------
 * With continuous batching, a worker's session has an executor
 * (rf_workspace_set_forward) that hands each model call of the decoder it
 * runs to the scheduler and waits until the scheduler has run it as part
 * of its next batched call: plan-and-infill's forked rows, MDM's
 * bidirectional passes and the calls of n > 1 choices share the weight
 * reads with everything else instead of competing for memory bandwidth
 * with their own calls. The call was checked (against the decoder's own
 * cache and run state) and logged on the worker's thread before it came
 * here, exactly as rf_forward does; the scheduler runs it on its run state
 * with the same numbers as alone (forward.c: a token's numbers do not
 * depend on the other tokens of a pass). */
typedef struct remote_call {
    rf_kvcache *c;          /* the decoder's cache and call: only the scheduler */
    const rf_batch *b;      /* touches them until done is set */
    pthread_cond_t *cv;     /* the waiting worker's */
    /* under s->mu */
    int done;
    int rc;                 /* 0, -1 (refused), RF_ERR_NOMEM, RF_ERR_INTERNAL (an rf_die in the pass) */
    char err[300];          /* the scheduler's rf_last_error() of a failure */
    struct remote_call *next;
} remote_call;

/* The executor of a worker's decoder (user: the rf_worker): queue the call
 * for the scheduler, wait, and fail as the call would have failed alone
 * (a failed allocation or an rf_die in the pass unwinds the decoder to
 * rf_generate's catch point, which frees its memory). */
static int remote_forward(void *user, const rf_model *m, rf_kvcache *c, const rf_batch *b) {
    (void)m;
    rf_worker *w = user;
    rf_server *s = w->s;
    remote_call q = {.c = c, .b = b, .cv = &w->call_cv};
    pthread_mutex_lock(&s->mu);
    if (s->scheduler_gone) {
        pthread_mutex_unlock(&s->mu);
        rf_set_error("the server is shutting down");
        return -1;
    }
    if (s->rtail) s->rtail->next = &q;
    else s->rhead = &q;
    s->rtail = &q;
    pthread_cond_signal(&s->batch_cv);
    while (!q.done) pthread_cond_wait(&w->call_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (q.rc == RF_ERR_NOMEM) rf_oom_msg(q.err);
    if (q.rc == RF_ERR_INTERNAL) rf_die("%s", q.err);
    if (q.rc) rf_set_error("%s", q.err);
    return q.rc ? -1 : 0;
}

/* The call is over (rc, the error in rf_last_error() of this thread):
 * wake its worker. s->mu held. */
static void remote_done_locked(remote_call *q, int rc) {
    q->rc = rc;
    if (rc) snprintf(q->err, sizeof q->err, "%s", rf_last_error());
    q->done = 1;
    pthread_cond_signal(q->cv);
}

/* This step's calls of the workers (s->mu held): taken off the queue in
 * order into out (at most max), each with its tokens fed without logits
 * (a prompt chunk, MDM's recomputed context) counted against the step's
 * prompt budget *left. Such a call cannot be split: the first one always
 * goes, a later one that does not fit waits for the next step. */
static int take_remote_locked(rf_server *s, remote_call **out, int max, int *left) {
    int n = 0;
    s->rtail = NULL;
    for (remote_call **l = &s->rhead; *l;) {
        remote_call *q = *l;
        int fed = q->b->n_rows * q->b->n_tok - q->b->n_logits;
        if (n == max || (fed > 0 && *left < PREFILL_BUDGET && fed > *left)) { /* the next step's */
            s->rtail = q;
            l = &q->next;
            continue;
        }
        if (fed > 0) *left -= fed;
        *l = q->next;
        q->next = NULL;
        out[n++] = q;
    }
    return n;
}

/* A batched call's generations: the scheduler's rows (one row of tokens
 * each, in sb) and the workers' calls, as rf_forward_calls takes them. */
typedef struct {
    int n;                 /* calls */
    rf_kvcache **kv;       /* [cap] */
    rf_batch *calls;       /* [cap] */
    int rows;              /* rows in all (a forked call's R rows each count) */
} step_calls;

void *rf_serve_scheduler_main(void *arg) {
    rf_server *s = arg;
    int threads = s->cfg.batch_threads > 0 ? s->cfg.batch_threads : s->cfg.defaults.threads;
    if (threads > 0) omp_set_num_threads(threads);
    /* tokens of a call at first: the prompt budget and, per row, a rolling
     * call of two slots of 4 (the demo model's); more when a step needs it */
    const int cap = s->cfg.workers, V = s->m->cfg.vocab_size, max_t = PREFILL_BUDGET + 8 * cap;
    const int n_remote = s->cfg.workers; /* a worker waits for its call: at most one each */
    int max_ctx = s->m->cfg.max_pos;
    batch_row **rows = rf_calloc((size_t)cap, sizeof *rows);
    int *row_at = rf_calloc((size_t)cap, sizeof *row_at), *row_n = rf_calloc((size_t)cap, sizeof *row_n);
    int *row_nl = rf_calloc((size_t)cap, sizeof *row_nl);
    remote_call **rem = rf_calloc((size_t)n_remote, sizeof *rem);
    int *rem_l = rf_calloc((size_t)n_remote, sizeof *rem_l); /* its first logits row */
    step_calls sc = {0, rf_calloc((size_t)(cap + n_remote), sizeof(rf_kvcache *)),
                     rf_calloc((size_t)(cap + n_remote), sizeof(rf_batch)), 0};
    step_bufs sb = {rf_calloc((size_t)max_t, sizeof(int)), rf_calloc((size_t)max_t, sizeof(int)), max_t,
                    rf_calloc((size_t)cap, sizeof(int)), rf_calloc((size_t)cap * V, sizeof(float)), cap};
    int *pos_buf = rf_calloc(PREFILL_BUDGET, sizeof *pos_buf);
    int n_rows = 0;
    prefix_cache pc = {0};
    /* made here: its attention scratch is per OpenMP thread of this thread */
    rf_runstate *rs = guarded_runstate(&s->m->cfg, max_t, max_ctx);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* once stopping, no new batched jobs; the running ones finish, and
         * the workers' calls are served until every worker has ended */
        while (!n_rows && !s->bhead && !s->rhead && !(s->stopping && !s->workers_live))
            pthread_cond_wait(&s->batch_cv, &s->mu);
        if (s->stopping) fail_queue_locked(s, &s->bhead, &s->btail);
        if (s->stopping && !n_rows && !s->rhead && !s->workers_live) break;
        /* new jobs join */
        while (n_rows < cap && s->bhead) {
            job *j = pop_locked(&s->bhead, &s->btail);
            if (start_job_locked(s, j)) continue;
            pthread_mutex_unlock(&s->mu);
            if ((rows[n_rows] = row_start(s, j, rs, &pc))) n_rows++;
            pthread_mutex_lock(&s->mu);
        }
        int left = PREFILL_BUDGET;
        int nrem = take_remote_locked(s, rem, n_remote, &left);
        pthread_mutex_unlock(&s->mu);

        /* this step's call: every row's next tokens, then the workers' calls */
        int nr = 0, T = 0, nl = 0, n_roll = 0, rc = 0, ctx = max_ctx;
        for (int i = 0; i < n_rows; i++) {
            batch_row *r = rows[i];
            const int *t = NULL, *ps = NULL;
            int nli = 0, n = guarded_next(r, left > 0 ? left : 1, &t, &ps, pos_buf, &nli);
            r->logit_row = -1;
            row_n[i] = 0;
            if (n < 0) { /* cancelled, cut or failed: it leaves */
                row_end(s, r, n, &pc);
                rows[i--] = rows[--n_rows];
                continue;
            }
            if (n == 0) continue;
            /* prompt chunks (tokens fed without logits) share the budget;
             * decoding rows (an AR token, a rolling call) always go */
            if (n > nli) left -= n;
            if (!rc) rc = guarded_reserve(&sb, T, n, nl, nli, V);
            if (rc) continue; /* no memory for the call: every row fails below */
            memcpy(sb.tokens + T, t, (size_t)n * sizeof(int));
            memcpy(sb.pos + T, ps, (size_t)n * sizeof(int));
            row_at[i] = T, row_n[i] = n, row_nl[i] = nli;
            T += n, nl += nli;
            n_roll += r->rq != NULL;
            nr++;
        }
        for (int k = 0; k < nrem; k++) {
            const rf_batch *b = rem[k]->b;
            const rf_kvcache *c = rem[k]->c;
            int need = c->n_rows ? c->fork_len + c->row_cap + b->n_tok : c->len + b->n_tok;
            if (need > ctx) ctx = need;
            if (!rc) rc = guarded_reserve(&sb, T, 0, nl, b->n_logits, V);
            T += b->n_rows * b->n_tok, nl += b->n_logits;
        }
        if (!nr && !nrem && !rc) {
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (!rc && (!rs || !rf_runstate_fits(rs, T, ctx))) { /* a wider call than any before */
            int want = rs && 2 * rs->max_tokens > T ? 2 * rs->max_tokens : T;
            if (ctx > max_ctx) max_ctx = ctx;
            rf_runstate_release(rs);
            if (!(rs = guarded_runstate(&s->m->cfg, want, max_ctx))) {
                rf_set_error("out of memory for the batched model calls' buffers");
                rc = RF_ERR_NOMEM;
            }
        }

        /* the calls, each checked as rf_forward checks it alone: one that
         * fails leaves (its generation fails), the others go */
        sc.n = sc.rows = nl = 0;
        for (int i = 0; i < n_rows && !rc; i++) {
            if (!row_n[i]) continue;
            int *lidx = sb.lidx + nl;
            for (int k = 0; k < row_nl[i]; k++) lidx[k] = row_n[i] - row_nl[i] + k;
            rf_batch b = {1, row_n[i], sb.tokens + row_at[i], sb.pos + row_at[i], 0, row_nl[i], lidx, NULL};
            rf_kvcache *c = rows[i]->rq ? rf_roll_seq_kv(rows[i]->rq) : rf_ar_seq_kv(rows[i]->q);
            if (rf_forward_check(s->m, c, rs, &b)) {
                rows[i]->logit_row = -2; /* refused */
                continue;
            }
            if (row_nl[i] > 0) rows[i]->logit_row = nl;
            nl += row_nl[i];
            sc.kv[sc.n] = c, sc.calls[sc.n++] = b, sc.rows++;
        }
        int n_worker = 0, worker_rows = 0;
        for (int k = 0; k < nrem && !rc; k++) {
            if (rf_forward_check(s->m, rem[k]->c, rs, rem[k]->b)) {
                pthread_mutex_lock(&s->mu);
                remote_done_locked(rem[k], -1);
                pthread_mutex_unlock(&s->mu);
                rem[k] = NULL; /* answered: its worker may have moved on */
                continue;
            }
            rem_l[k] = nl;
            nl += rem[k]->b->n_logits;
            sc.kv[sc.n] = rem[k]->c, sc.calls[sc.n++] = *rem[k]->b;
            n_worker++, worker_rows += rem[k]->b->n_rows;
        }
        sc.rows += worker_rows;
        if (!rc && sc.n) {
            rf_call_batch cb = {sc.n, sc.kv, sc.calls, sb.logits};
            rc = guarded_forward(s->m, rs, &cb);
        }
        pthread_mutex_lock(&s->mu);
        s->batch_calls += sc.n > 0;
        s->batch_rows += (unsigned long long)sc.rows;
        s->batch_rolling_rows += (unsigned long long)n_roll;
        if (n_roll && sc.rows > 1) s->batch_mixed_calls++;
        if (sc.rows > s->batch_peak) s->batch_peak = sc.rows;
        s->batch_worker_calls += (unsigned long long)n_worker;
        s->batch_worker_rows += (unsigned long long)worker_rows;
        if (n_worker && sc.n > 1) s->batch_worker_mixed_calls++;
        pthread_mutex_unlock(&s->mu);
        /* the workers' calls: their logits where their decoders asked */
        for (int k = 0; k < nrem; k++) {
            if (!rem[k]) continue; /* refused above */
            const rf_batch *b = rem[k]->b;
            if (!rc && b->n_logits > 0)
                memcpy(b->logits, sb.logits + (size_t)rem_l[k] * V, (size_t)b->n_logits * V * sizeof(float));
            pthread_mutex_lock(&s->mu);
            remote_done_locked(rem[k], rc);
            pthread_mutex_unlock(&s->mu);
        }
        /* each row takes its logits (draws its tokens: on_tokens streams them) */
        for (int i = 0; i < n_rows && (nr || rc); i++) {
            batch_row *r = rows[i];
            int done = rc                   ? rc
                       : r->logit_row == -2 ? -1
                                            : guarded_after(r, r->logit_row >= 0 ? sb.logits + (size_t)r->logit_row * V
                                                                                 : NULL);
            int fail = done < 0 ? done : 0;
            if (done) {
                row_end(s, r, fail, &pc);
                rows[i--] = rows[--n_rows];
            }
        }
        pthread_mutex_lock(&s->mu);
    }
    /* (none can be waiting: every worker has ended) */
    s->scheduler_gone = 1;
    for (remote_call *q; (q = s->rhead);) {
        s->rhead = q->next;
        rf_set_error("the server is shutting down");
        remote_done_locked(q, -1);
    }
    s->rtail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (pc.head) pc_drop(&pc, &pc.head);
    rf_runstate_release(rs);
    free(rows), free(row_at), free(row_n), free(row_nl), free(rem), free(rem_l), free(sc.kv), free(sc.calls);
    free(sb.lidx), free(sb.tokens), free(sb.pos), free(pos_buf), free(sb.logits);
    return NULL;
}

/* The requests the scheduler runs: one choice of AR decoding or of the
 * rolling slot (decode/ar_step.h, decode/rolling_step.h). */
static int batched(const rf_serve_req *r) {
    const rf_gen_params *p = &r->p;
    return r->n_choices <= 1 &&
           (p->method == RF_METHOD_AR || (p->method == RF_METHOD_REFUSION && p->rolling && !p->no_cache));
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
        json_t *o = envelope(s, j, 1);
        json_t *c = json_pack("{s:i, s:{s:s, s:s}, s:[], s:n}", "index", i, "delta", "role", "assistant",
                              "content", "", "token_ids", "finish_reason");
        json_object_set_new(o, "choices", json_pack("[o]", c));
        sse_append_locked(j, o);
    }
    /* AR decoding and the rolling slot, one choice, are the scheduler's
     * rows; the other decoders run in the workers (whose model calls, with
     * batching, join the scheduler's: remote_forward) */
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
