/* answer.c - a choice's answer as it arrives from the decoder, in position
 * order: the token ids and their text, cut at max_tokens and at the
 * earliest stop sequence (once cut, the job's cancel flag stops the decoder
 * before its next call); streamed as SSE chunks that hold back what could
 * still begin a stop sequence; a job's choices summed into its response. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/answer.h"
#include "serve/oai.h"
#include "serve/routes_llama.h"
#include "serve/tools.h"
#include "util/util.h"

static void text_append(run_ctx *c, const char *piece) {
    size_t k = piece ? strlen(piece) : 0;
    c->text = rf_grow_to(c->text, 1, c->len + k + 1, &c->cap, 256);
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

/* the log-probabilities of the ids not yet sent (NULL: not asked) */
static json_t *pending_logprobs(const run_ctx *c) {
    if (!c->lp) return rf_oai_logprobs(c->s, c->j, NULL, NULL, NULL, 0);
    return rf_oai_logprobs(c->s, c->j, c->ids + c->ids_sent, c->lp + c->ids_sent, c->tok_start + c->ids_sent,
                           c->n_ids - c->ids_sent);
}

/* A chat answer with tools: its <tool_call> blocks become the message's
 * (a stream's last delta's) "tool_calls", the text around them its
 * content, and a finished choice's finish_reason "tool_calls". */
static void with_tool_calls(const run_ctx *c, json_t *choice, int chunk) {
    if (c->j->req.kind != RF_REQ_CHAT || c->j->req.tool_choice == RF_TOOLS_NONE) return;
    char *content = NULL;
    json_t *calls = rf_serve_tool_calls(c->text ? c->text : "", c->j->id, c->index, &content);
    if (!calls) return;
    json_t *m = json_object_get(choice, chunk ? "delta" : "message"), *call;
    size_t i;
    if (chunk) json_array_foreach(calls, i, call) json_object_set_new(call, "index", json_integer((json_int_t)i));
    json_object_set_new(m, "content", *content ? json_string(content) : json_null());
    json_object_set_new(m, "tool_calls", calls);
    if (!json_is_null(json_object_get(choice, "finish_reason")))
        json_object_set_new(choice, "finish_reason", json_string("tool_calls"));
    free(content);
}

/* A chunk with the text and ids not yet sent: all of them when final,
 * otherwise holding back what could still be the start of a stop sequence
 * (and never splitting a UTF-8 character). finish: NULL or the reason. */
static void stream_pending(run_ctx *c, int final, const char *finish, json_t *stats) {
    if (!final && c->j->req.kind == RF_REQ_CHAT && c->j->req.tool_choice != RF_TOOLS_NONE) {
        json_decref(stats); /* with tools the answer is sent whole at the end: it may be a call */
        return;
    }
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
    if (c->j->req.kind == RF_REQ_NATIVE) { /* llama-server's chunk; the last one comes from rf_job_finish */
        json_decref(stats);
        if (upto == c->text_sent && c->ids_sent == c->n_ids) {
            free(piece);
            return;
        }
        o = rf_llama_chunk(c->j, piece, c->ids + c->ids_sent, c->n_ids - c->ids_sent, pending_logprobs(c));
    } else {
        o = rf_oai_envelope(c->s, c->j, 1);
        json_t *choice = rf_oai_choice(c->j, c->index, piece, c->ids + c->ids_sent, c->n_ids - c->ids_sent, finish, 1,
                                       pending_logprobs(c));
        if (final) with_tool_calls(c, choice, 1);
        json_object_set_new(o, "choices", json_pack("[o]", choice));
        if (stats) json_object_update(o, stats); /* the statistics and timings of the last chunk */
        json_decref(stats);
    }
    free(piece); /* o holds a copy; the append may fail (a fault ends the generation there) */
    rf_job_sse_event(c->s, c->j, o);
    c->text_sent = upto, c->ids_sent = c->n_ids;
}

/* Decoder callback, once per event. A planning step / infill iteration / AR
 * token is one model call after the prompt: counted, so that the cost of a
 * generation whose client left is known (/health, the log). The first event
 * ends the prompt's part of the timings; the steps seen stand in for the
 * decoder's own count when the answer is cut; a job that asked for them
 * gets every event in its stream (routes_llama.c). */
void rf_answer_on_event(const rf_event *ev, void *user) {
    run_ctx *c = user;
    pthread_mutex_lock(&c->s->mu);
    if (!c->steps_seen && !c->j->prompt_s) c->j->prompt_s = rf_now() - c->t0;
    if (ev->step + 1 > c->steps_seen) c->steps_seen = ev->step + 1;
    if (c->j->req.decode_events && !c->j->cancelled) rf_serve_decode_event_locked(c->s, c->j, ev);
    if (ev->kind == RF_EVENT_PLAN || ev->kind == RF_EVENT_INFILL_ITER || ev->kind == RF_EVENT_AR_TOKEN)
        c->j->calls_now++;
    pthread_mutex_unlock(&c->s->mu);
}

/* Decoder callback: the log-probabilities of the tokens it reports next
 * (rf_answer_on_tokens keeps them beside the ids). */
void rf_answer_on_logprobs(const rf_token_logprob *lp, int n, void *user) {
    run_ctx *c = user;
    if (c->cut) return;
    if (n > c->cap_lp_next) {
        free(c->lp_next);
        c->lp_next = NULL;
        c->lp_next = rf_malloc((size_t)n * sizeof *c->lp_next);
        c->cap_lp_next = n;
    }
    memcpy(c->lp_next, lp, (size_t)n * sizeof *lp);
    c->n_lp_next = n;
}

/* Decoder callback: newly final tokens, in position order. */
void rf_answer_on_tokens(const int32_t *ids, int n, void *user) {
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
            if (j->req.p.logprobs) {
                rf_token_logprob *l = rf_calloc(c->cap_ids, sizeof *l);
                if (c->n_ids) memcpy(l, c->lp, c->n_ids * sizeof *l);
                free(c->lp);
                c->lp = l;
            }
        }
        if (c->lp && i < c->n_lp_next) c->lp[c->n_ids] = c->lp_next[i];
        c->tok_start[c->n_ids] = c->len;
        c->ids[c->n_ids++] = ids[i];
        if (c->ts) text_append(c, rf_text_stream_put(c->ts, ids[i]));
    }
    c->n_lp_next = 0;
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
    rf_serve_log(s,
                 "%s:%s %s, %d prompt + %d answer tokens%s, %d model calls, TPF %.2f, %.2f tokens/call, "
                 "%.1f tokens/s, %.2f s",
                 j->id, which, rf_method_name(j->req.p.method), j->req.n_prompt, c->n_ids,
                 c->stop_hit ? " (stop sequence)" : c->cut ? " (max_tokens)" : "", r->n_calls, r->tpf,
                 r->tokens_per_call, r->tokens_per_s, r->seconds);
}

void rf_answer_free(run_ctx *c) {
    free(c->ids), free(c->tok_start), free(c->text), free(c->lp), free(c->lp_next);
    rf_text_stream_free(c->ts);
    memset(c, 0, sizeof *c);
}

/* Set up c for choice `index` of j: 0, or -1 when the client has left.
 * The previous choice's max_tokens / stop cut raised the cancel flag: it is
 * lowered, unless the client has left (both under the lock that
 * rf_serve_cancel_locked holds). *calls0: the job's calls so far. */
int rf_answer_begin(rf_server *s, job *j, int index, run_ctx *c, int *calls0) {
    memset(c, 0, sizeof *c);
    c->s = s, c->j = j, c->index = index;
    c->t0 = rf_now();
    if (s->tokenizer && !(c->ts = rf_text_stream_new(s->tokenizer, 1))) return -1;
    int eos = j->req.p.eos_id;
    c->eos = eos == RF_TOKEN_FROM_MODEL ? rf_model_eos_id(s->model) : eos;
    for (int i = 0; i < j->req.n_stop; i++)
        if (strlen(j->req.stop[i]) > c->max_stop) c->max_stop = strlen(j->req.stop[i]);
    pthread_mutex_lock(&s->mu);
    int gone = j->cancelled || j->timed_out;
    *calls0 = j->calls_now;
    if (!gone) j->cancel_flag = 0;
    pthread_mutex_unlock(&s->mu);
    return gone ? -1 : 0;
}

/* After the decoder returned rc (wall seconds): a generation we stopped
 * (max_tokens / stop) is complete with the answer so far; the text
 * stream's held-back bytes are added. Returns the choice's rc. */
int rf_answer_end(rf_server *s, job *j, run_ctx *c, rf_stats *r, int rc, double wall, int calls0) {
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


/* sum's derived figures from its totals (tpf_sum: TPF weighted by steps) */
static void sum_finish(rf_stats *sum, int tokens, double tpf_sum) {
    sum->n_tokens = tokens;
    sum->tpf = sum->n_steps ? tpf_sum / sum->n_steps : 0;
    sum->tokens_per_call = sum->n_calls ? (double)tokens / sum->n_calls : 0;
    sum->tokens_per_s = sum->seconds > 0 ? tokens / sum->seconds : 0;
}


/* llama-server's "timings": the prompt's part is the time to the decoder's
 * first event (its prefill, and for plan-and-infill the first plan) */
static json_t *job_timings(const job *j, const job_acc *a) {
    rf_serve_timing t = {j->req.n_prompt, j->prompt_s, a->tokens, a->sum.seconds - j->prompt_s};
    if (t.predicted_s < 0) t.predicted_s = 0;
    return rf_serve_timings_json(&t);
}

void rf_acc_init(job_acc *a) {
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
void rf_acc_choice(rf_server *s, job *j, job_acc *a, run_ctx *c, const rf_stats *r, int i, int n) {
    int hit_eos = c->n_ids > 0 && c->ids[c->n_ids - 1] == c->eos;
    const char *finish = c->stop_hit || hit_eos ? "stop" : "length";
    a->tokens += c->n_ids;
    a->sum.n_calls += r->n_calls, a->sum.n_steps += r->n_steps, a->sum.seconds += r->seconds;
    a->sum.hit_eos &= hit_eos;
    a->tpf_sum += r->tpf * r->n_steps;
    if (j->req.kind == RF_REQ_NATIVE) { /* one choice; the answer (or the stream's last chunk) in rf_job_finish */
        if (j->req.stream) stream_pending(c, 1, NULL, NULL);
        pthread_mutex_lock(&s->mu);
        j->n_decoded = c->n_ids; /* after the last stop check */
        pthread_mutex_unlock(&s->mu);
        const char *stop_type = c->stop_hit ? "word" : hit_eos ? "eos" : "limit";
        json_t *lp = j->req.stream ? NULL : rf_oai_logprobs(s, j, c->ids, c->lp, c->tok_start, c->n_ids);
        a->native = rf_llama_final(s, j, j->req.stream ? "" : c->text ? c->text : "", c->ids, j->req.stream ? 0 : c->n_ids,
                                   stop_type, c->stop_hit ? j->req.stop[c->stop_index] : "", lp);
        return;
    }
    json_t *last_stats = NULL;
    if (i == n - 1 && j->req.stream && !j->req.include_usage) {
        sum_finish(&a->sum, a->tokens, a->tpf_sum);
        last_stats = json_pack("{s:o, s:o}", "refusion", rf_oai_stats(j, &a->sum), "timings", job_timings(j, a));
    }
    if (j->req.stream) stream_pending(c, 1, finish, last_stats);
    else {
        json_t *choice = rf_oai_choice(j, i, c->text ? c->text : "", c->ids, c->n_ids, finish, 0,
                                       rf_oai_logprobs(s, j, c->ids, c->lp, c->tok_start, c->n_ids));
        with_tool_calls(c, choice, 0);
        json_array_append_new(a->choices, choice);
    }
}

/* The job is over (rc: 0, or the failure of a choice): its output, the
 * server's counters, and JOB_DONE. A stream's last event is appended after
 * a's answer is freed: the append may fail (a fault drops the job there). */
void rf_job_finish(rf_server *s, job *j, job_acc *a, int rc) {
    sum_finish(&a->sum, a->tokens, a->tpf_sum);
    int tokens = a->tokens;
    char *body = NULL;
    json_t *last = NULL;     /* a stream's last event, */
    char *last_text = NULL; /* or its error event */
    int status = 200;
    if (rc && j->cancelled) {
        /* the client left: nobody reads the answer */
    } else if (rc && j->timed_out) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the generation ran past its deadline of %d s and was stopped (--generation-timeout; fewer tokens "
                 "or steps finish sooner)", s->cfg.generation_timeout_s);
        if (s->cfg.verbose) rf_serve_log(s, "%s: %s", j->id, msg);
        body = rf_serve_error_body(msg, "server_error", NULL, "generation_timeout");
        status = 503;
        if (j->req.stream) last_text = body, body = NULL;
    } else if (rc) {
        /* the request was checked before it was queued, so this is our fault */
        char msg[300];
        snprintf(msg, sizeof msg, "generation failed: %s", rf_last_error());
        rf_serve_log(s, "%s: %s", j->id, msg);
        body = rf_serve_error_body(msg, "server_error", NULL, NULL);
        if (j->req.stream) {
            last_text = body, body = NULL;
        } else {
            status = rc == RF_ERR_NOMEM ? 503 : 500;
        }
    } else {
        json_t *usage = json_pack("{s:i, s:i, s:i}", "prompt_tokens", j->req.n_prompt, "completion_tokens", tokens,
                                  "total_tokens", j->req.n_prompt + tokens);
        json_t *o = rf_oai_envelope(s, j, j->req.stream);
        if (j->req.kind == RF_REQ_NATIVE) {
            json_decref(o);
            o = a->native ? a->native : json_object();
            a->native = NULL;
            json_object_set_new(o, "timings", job_timings(j, a));
            json_object_set_new(o, "refusion", rf_oai_stats(j, &a->sum));
            if (j->req.stream) last = o;
            else body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6)), json_decref(o);
        } else if (j->req.stream) {
            /* usage in a chunk of its own (choices: []) when stream_options asks */
            if (j->req.include_usage) {
                json_object_set_new(o, "choices", json_array());
                json_object_set_new(o, "refusion", rf_oai_stats(j, &a->sum));
                json_object_set_new(o, "usage", json_incref(usage));
                json_object_set_new(o, "timings", job_timings(j, a));
                last = o;
            } else {
                json_decref(o);
            }
        } else {
            json_object_set_new(o, "choices", json_incref(a->choices));
            json_object_set_new(o, "usage", json_incref(usage));
            json_object_set_new(o, "refusion", rf_oai_stats(j, &a->sum));
            json_object_set_new(o, "timings", job_timings(j, a));
            body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
            json_decref(o);
        }
        json_decref(usage);
    }
    json_decref(a->choices);
    json_decref(a->native);
    a->choices = a->native = NULL;
    if (last) rf_job_sse_event(s, j, last);
    pthread_mutex_lock(&s->mu);
    if (last_text) rf_job_sse_text_locked(j, last_text);
    /* llama-server's own stream ends with its last chunk ("stop": true) */
    if (j->req.stream && j->req.kind != RF_REQ_NATIVE) rf_job_sse_done_locked(j);
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
    } else if (j->timed_out) {
        s->n_gen_timeouts++;
    } else if (!j->cancelled) {
        s->n_failed++;
    }
    if (j->cancelled) {
        s->n_cancelled++;
        s->calls_after_cancel += j->calls_now - j->calls_at_cancel;
        if (s->cfg.verbose)
            rf_serve_log(s, "%s: the client left; %d model calls spent after that", j->id,
                         j->calls_now - j->calls_at_cancel);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);
}
