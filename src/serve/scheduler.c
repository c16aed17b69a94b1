/* scheduler.c - the thread that runs every generation: one model call per
 * step for all of them (continuous batching; see the comment below). */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/runstate.h" /* its max_tokens, to grow it */
#include "serve/oai.h"
#include "serve/routes_llama.h" /* the slots */
#include "serve/row.h"
#include "util/util.h"

/* Continuous batching.
 * The scheduler thread makes one forward pass at a time for every running
 * generation, each a row driven by its decoder's step machine (AR decoding,
 * the rolling slot, plan-and-infill, MDM: decode/ar_step.h,
 * decode/rolling_step.h, decode/refusion_step.h, decode/mdm.h; n > 1
 * choices one after the other on the same row). Each step it asks every
 * row's machine for its next call (the token just drawn, a rolling call, a
 * plan, a verification or an infilling call on forked rows, MDM's
 * bidirectional pass, or a chunk of its prompt) and runs them as one pass
 * (rf_forward_calls: each call on its own KV cache, the weights read once),
 * then hands each its logits. New jobs join at the next step (without
 * continuous batching, cfg.batch 0, only when no generation is running: the
 * ones queued by then start together), finished ones leave; a cancelled one
 * (client gone, max_tokens, stop) leaves before its next call. Prompt tokens are fed at most PREFILL_BUDGET per
 * step in all, so a long prompt joins over several steps while the others
 * keep decoding (a plan-and-infill or MDM call cannot be split: one that
 * does not fit a budget already drawn on waits a step). Every answer is the
 * one the generation gets alone (decode/ar_step.c; tests/decode_*_step.c,
 * tests/model_forward_calls.c, tests/serve_batch_solo.sh).
 *
 * A step runs under one catch point (step()): an rf_die inside (a failed
 * allocation, a broken invariant, a test's fault point) fails the row whose
 * work it was in, or every row of the shared call, and the step goes on
 * with the others; the server keeps serving. */
enum { PREFILL_BUDGET = 256 };


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
/* A step's calls: the scheduler's rows (AR and rolling rows one row of
 * tokens each, in sb; a plan-and-infill or MDM call its own), as
 * rf_forward_calls takes them. */
typedef struct {
    int n;                 /* calls */
    rf_kvcache **kv;       /* [cap] */
    rf_batch *calls;       /* [cap] */
    int rows;              /* rows in all (a forked call's R rows each count) */
} step_calls;

/* The context a call on cache c needs (the most of it and ctx). */
static int call_context(const rf_kvcache *c, const rf_batch *b, int ctx) {
    int need = c->n_rows ? c->fork_len + c->row_cap + b->n_tok : c->len + b->n_tok;
    return need > ctx ? need : ctx;
}

/* The step's call in /health's and /metrics' counters (n_whole,
 * whole_rows: the plan-and-infill and MDM calls and their rows). */
static void count_step(rf_server *s, const step_calls *sc, int n_roll, int n_whole, int whole_rows) {
    pthread_mutex_lock(&s->mu);
    s->batch_calls += sc->n > 0;
    s->batch_rows += (unsigned long long)sc->rows;
    s->batch_rolling_rows += (unsigned long long)n_roll;
    if (n_roll && sc->rows > 1) s->batch_mixed_calls++;
    if (sc->rows > s->batch_peak) s->batch_peak = sc->rows;
    s->batch_whole_calls += (unsigned long long)n_whole;
    s->batch_whole_rows += (unsigned long long)whole_rows;
    if (n_whole && sc->n > 1) s->batch_whole_mixed_calls++;
    pthread_mutex_unlock(&s->mu);
}

/* The rows' calls of the step (a packed row's tokens at r->at in sb, a
 * whole call its own) into sc, each checked as rf_forward checks it alone:
 * a refused one is marked (logit_row -2: its generation fails), the others
 * go. *n_whole, *whole_rows: the plan-and-infill and MDM calls and their
 * rows. */
static void rows_calls(rf_server *s, batch_row **rows, int n_rows, step_bufs *sb, const rf_runstate *rs,
                       step_calls *sc, int *n_whole, int *whole_rows) {
    int nl = 0;
    for (int i = 0; i < n_rows; i++) {
        batch_row *r = rows[i];
        if (!r->in_call) continue;
        rf_batch b = r->call.b;
        rf_kvcache *c = r->call.kv;
        if (!rf_row_whole(r)) {
            int *lidx = r->n_logits ? sb->lidx + nl : NULL;
            for (int k = 0; k < r->n_logits; k++) lidx[k] = r->n_tok - r->n_logits + k;
            b = (rf_batch){1, r->n_tok, sb->tokens + r->at, sb->pos + r->at, 0, r->n_logits, lidx, NULL};
            c = rf_row_kv(r);
        }
        if (rf_forward_check(s->m, c, rs, &b)) {
            r->logit_row = -2; /* refused */
            continue;
        }
        if (r->n_logits > 0) r->logit_row = nl;
        nl += r->n_logits;
        sc->kv[sc->n] = c, sc->calls[sc->n++] = b, sc->rows += b.n_rows;
        if (rf_row_whole(r)) (*n_whole)++, *whole_rows += b.n_rows;
    }
}


/* What the scheduler thread holds: its rows, what they share, the buffers
 * of its calls, and where the step under way is (what a fault fails). */
typedef struct {
    rf_server *s;
    int cap, V;            /* rows at most (--parallel), vocabulary */
    batch_row **rows;      /* [cap] */
    int n_rows;
    row_shared sh;
    step_calls sc;
    step_bufs sb;
    int *pos_buf;          /* [PREFILL_BUDGET] an AR row's prompt positions */
    rf_runstate *rs;       /* made at the first call, grown for wider ones */
    int max_ctx;
    int kept_last;         /* answer tokens the rows other than rolling ones kept in the last step */
    /* the step under way */
    enum { ADMIT, NEXT, CALL, AFTER, DONE } phase;
    int i;                 /* NEXT, AFTER: the row at work */
    int fresh;             /* ADMIT: rows admitted in this step */
    job *admitting;        /* ADMIT: the job being given a row, */
    batch_row *starting;   /* and that row */
    job *releasing;        /* the job of a row being released (a fault there drops it: job_drop) */
    int left, T, T_whole, nl, n_roll, ctx, kept; /* the step's budget left, tokens packed and whole, logits
                                                     rows, rolling rows, context, tokens kept by rows */
    int roll_tokens;       /* the step's tokens of rolling rows */
    int call_rc;           /* the shared call failed: every row in it fails */
} sched;

/* The scheduler's shared buffers in /health's counters, after one of them
 * was (re)allocated. */
static void note_buffers(sched *x) {
    size_t bytes = (x->rs ? rf_runstate_bytes(x->rs) : 0) + (size_t)x->sb.tcap * 2 * sizeof(int) +
                   (size_t)x->sb.lcap * (sizeof(int) + (size_t)x->V * sizeof(float));
    pthread_mutex_lock(&x->s->mu);
    x->s->buffer_allocs++;
    x->s->buffer_bytes = bytes;
    pthread_mutex_unlock(&x->s->mu);
}

/* room in the buffers for n more packed tokens and nl more logits rows */
static void reserve(sched *x, int n, int nl) {
    int tcap = x->sb.tcap, lcap = x->sb.lcap;
    bufs_reserve(&x->sb, x->T, n, x->nl, nl, x->V);
    if (tcap != x->sb.tcap || lcap != x->sb.lcap) note_buffers(x);
}

/* The run state for a call of T tokens over contexts up to ctx (grown to
 * twice the widest call so far, or T). */
static void fit_runstate(sched *x, int T, int ctx) {
    if (x->rs && rf_runstate_fits(x->rs, T, ctx)) return;
    int want = x->rs && 2 * x->rs->max_tokens > T ? 2 * x->rs->max_tokens : T;
    if (ctx > x->max_ctx) x->max_ctx = ctx;
    rf_runstate_release(x->rs);
    x->rs = NULL; /* (until the new one is made: a fault in between leaves none) */
    x->rs = rf_runstate_alloc(&x->s->m->cfg, want, x->max_ctx, 0);
    note_buffers(x);
}

/* Release r (its job finished with rc); a fault inside drops the job (job_drop). */
static void release(sched *x, batch_row *r, int rc) {
    x->releasing = r->j;
    rf_row_release(x->s, r, rc);
    x->releasing = NULL;
}

/* A job's last resort: a fault while its row was being released. Its
 * answer ends as it stands (a plain request: 500, "the reply could not be
 * built"; a stream: the events it had, then an error event and [DONE],
 * written without allocating). */
static void job_drop(rf_server *s, job *j, int rc) {
    pthread_mutex_lock(&s->mu);
    if (j->state != JOB_DONE) {
        if (j->req.stream) rf_job_stream_cut_locked(j, rc == RF_ERR_NOMEM);
        j->state = JOB_DONE;
        rf_serve_slot_give_locked(s, j);
        s->n_done++, s->n_running--, s->n_failed++;
        pthread_cond_broadcast(&j->cv);
    }
    s->n_active--;
    rf_serve_job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

/* ADMIT: one queued job gets a row (without continuous batching only when
 * every row is one admitted in this step: the jobs queued while the batch
 * was empty start together); with none to admit the step's calls begin. */
static void admit_one(sched *x) {
    rf_server *s = x->s;
    job *j = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) rf_queue_fail_locked(s);
    while ((s->cfg.batch || x->n_rows == x->fresh) && x->n_rows < x->cap && (j = rf_queue_pop_locked(s)))
        if (!rf_job_start_locked(s, j)) break;
        else j = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!j) {
        x->phase = NEXT, x->i = 0;
        x->left = PREFILL_BUDGET, x->T = x->T_whole = x->nl = x->n_roll = x->roll_tokens = x->kept = 0;
        x->ctx = x->max_ctx, x->call_rc = 0;
        return;
    }
    x->admitting = j;
    batch_row *r = x->starting = rf_row_new(j);
    x->admitting = NULL;
    int rc = rf_row_begin(s, r, &x->sh);
    x->starting = NULL;
    if (rc) release(x, r, rc);
    else x->rows[x->n_rows++] = r, x->fresh++;
}

/* Row i leaves the rows (the last one moves to its place). */
static batch_row *row_remove(sched *x, int i) {
    batch_row *r = x->rows[i];
    x->rows[i] = x->rows[--x->n_rows];
    return r;
}

/* r's next call of n tokens (nli logits rows) joins the step: packed
 * into the buffers (t, ps), or whole; or it waits for the next step. */
static void row_join(sched *x, batch_row *r, int n, int nli, const int *t, const int *ps) {
    if (rf_row_whole(r)) {
        /* what it feeds without logits (a prompt chunk, MDM's recomputed
         * context) shares the budget; it cannot be split: one that does not
         * fit a budget already drawn on waits */
        int fed = n - nli;
        if (fed > 0 && x->left < PREFILL_BUDGET && fed > x->left) return;
        x->left -= fed;
        x->ctx = call_context(r->call.kv, &r->call.b, x->ctx);
        reserve(x, 0, nli);
        x->T_whole += n;
    } else {
        /* prompt chunks (tokens fed without logits) share the budget;
         * decoding rows (an AR token, a rolling call) always go */
        if (n > nli) x->left -= n;
        reserve(x, n, nli);
        memcpy(x->sb.tokens + x->T, t, (size_t)n * sizeof(int));
        memcpy(x->sb.pos + x->T, ps, (size_t)n * sizeof(int));
        r->at = x->T;
        x->T += n;
        if (r->rq) x->n_roll++, x->roll_tokens += n;
    }
    r->in_call = 1, r->n_tok = n, r->n_logits = nli;
    x->nl += nli;
}


/* NEXT: row x->i's next call joins the step (packed into the buffers, or
 * whole), waits for the next step, or the row leaves (cancelled, cut or
 * failed: its choice ends). */
static void row_next(sched *x) {
    batch_row *r = x->rows[x->i];
    const int *t = NULL, *ps = NULL;
    int nli = 0, n = rf_row_next(r, x->left > 0 ? x->left : 1, &t, &ps, x->pos_buf, &nli);
    r->logit_row = -1, r->in_call = 0, r->n_tok = 0, r->n_logits = 0;
    if (n < 0) { /* its choice is over (a next choice starts, or the row leaves) */
        int more = rf_row_end(x->s, r, n, &x->sh);
        if (more != 1) release(x, row_remove(x, x->i), more);
        return; /* row x->i is now another row, or the next choice's, not yet asked */
    }
    if (n > 0) row_join(x, r, n, nli, t, ps);
    x->i++; /* (last: a fault before it fails row x->i, this one) */
}

/* The rows' calls as one forward pass. */
static void call_rows(sched *x) {
    fit_runstate(x, x->T + x->T_whole, x->ctx);
    int n_whole = 0, whole_rows = 0;
    /* each call checked as rf_forward checks it alone: one that fails
     * leaves (its generation fails), the others go */
    rows_calls(x->s, x->rows, x->n_rows, &x->sb, x->rs, &x->sc, &n_whole, &whole_rows);
    if (x->sc.n) {
        rf_call_batch cb = {x->sc.n, x->sc.kv, x->sc.calls, x->sb.logits};
        if (rf_forward_calls(x->s->m, x->rs, &cb, NULL)) x->call_rc = -1;
    }
    count_step(x->s, &x->sc, x->n_roll, n_whole, whole_rows);
}

/* CALL: the step's call (none when every row waits). */
static void run_call(sched *x) {
    x->sc.n = x->sc.rows = 0;
    int n_call = 0;
    for (int i = 0; i < x->n_rows; i++) n_call += x->rows[i]->in_call;
    if (n_call) call_rows(x);
    x->phase = AFTER, x->i = 0; /* (last: a fault before it fails every row of the call) */
}

/* AFTER: row x->i takes its logits (draws its tokens: on_tokens streams
 * them); a rolling row first sizes its next call for the call this one
 * was: the other rolling rows, the other rows' tokens and what those kept
 * last step. */
static void row_after(sched *x) {
    batch_row *r = x->rows[x->i];
    if (!r->in_call) { /* its call waits for the next step */
        x->i++;
        return;
    }
    r->in_call = 0;
    if (r->rq) rf_roll_seq_set_load(r->rq, x->n_roll - 1, x->T + x->T_whole - x->roll_tokens, x->kept_last);
    int n_ids = r->c.n_ids;
    int done = x->call_rc            ? x->call_rc
               : r->logit_row == -2 ? -1
                                    : rf_row_after(r, r->logit_row >= 0 ? x->sb.logits + (size_t)r->logit_row * x->V
                                                                        : NULL);
    if (!r->rq) x->kept += r->c.n_ids - n_ids;
    if (!done) {
        x->i++;
        return;
    }
    int more = rf_row_end(x->s, r, done < 0 ? done : 0, &x->sh);
    if (more == 1) x->i++;
    else release(x, row_remove(x, x->i), more);
}

/* A fault (an rf_die) in the work the step was at: that row fails (ADMIT:
 * the job being started; CALL: every row in the call) and the step goes
 * on; a fault while a row was being released drops its job (job_drop). */
static void fault(sched *x, int rc) {
    /* a fault inside a locked section (an append to a reply under the lock)
     * left the lock held by this thread: given back (the mutex checks its
     * owner, server.c: when this thread did not hold it, nothing happens) */
    pthread_mutex_unlock(&x->s->mu);
    if (x->releasing) {
        job *j = x->releasing;
        x->releasing = NULL;
        job_drop(x->s, j, rc);
    } else if (x->phase == ADMIT && x->starting) {
        batch_row *r = x->starting;
        x->starting = NULL;
        release(x, r, rc);
    } else if (x->phase == ADMIT && x->admitting) {
        job *j = x->admitting;
        x->admitting = NULL;
        x->releasing = j;
        rf_row_job_fail(x->s, j, rc);
        x->releasing = NULL;
    } else if ((x->phase == NEXT || x->phase == AFTER) && x->i < x->n_rows) {
        batch_row *r = row_remove(x, x->i);
        r->in_call = 0;
        release(x, r, rc);
    } else if (x->phase == CALL) {
        x->call_rc = rc, x->phase = AFTER, x->i = 0;
    }
}

/* One step: new jobs join, every row's next call, the call, the logits to
 * each row. Under one catch point for the whole step, set again after a
 * fault; before each piece of work the scoped blocks of the work done so far
 * are marked to survive a fault in it. */
static void step(sched *x) {
    rf_catch k;
    x->phase = ADMIT, x->fresh = 0;
    rf_catch_push(&k);
    if (setjmp(k.jb)) {
        int rc = k.oom ? RF_ERR_NOMEM : RF_ERR_INTERNAL;
        rf_catch_push(&k);
        fault(x, rc);
    }
    while (x->phase != DONE) {
        rf_catch_mark(&k);
        switch (x->phase) {
        case ADMIT: admit_one(x); break;
        case NEXT:
            if (x->i < x->n_rows) row_next(x);
            else x->phase = CALL;
            break;
        case CALL: run_call(x); break;
        case AFTER:
            if (x->i < x->n_rows) row_after(x);
            else x->kept_last = x->kept, x->phase = DONE;
            break;
        case DONE: break;
        }
    }
    rf_catch_pop(&k);
}

void *rf_serve_scheduler_main(void *arg) {
    rf_server *s = arg;
    if (s->cfg.defaults.threads > 0) omp_set_num_threads(s->cfg.defaults.threads);
    sched x = {.s = s, .cap = s->cfg.parallel, .V = s->m->cfg.vocab_size, .max_ctx = s->m->cfg.max_pos};
    x.rows = rf_calloc((size_t)x.cap, sizeof *x.rows);
    x.sc = (step_calls){0, rf_calloc((size_t)x.cap, sizeof(rf_kvcache *)), rf_calloc((size_t)x.cap, sizeof(rf_batch)), 0};
    x.pos_buf = rf_calloc(PREFILL_BUDGET, sizeof *x.pos_buf);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* once stopping, no new jobs; the running ones finish */
        while (!x.n_rows && !s->head && !s->stopping) pthread_cond_wait(&s->queue_cv, &s->mu);
        if (s->stopping) rf_queue_fail_locked(s);
        if (s->stopping && !x.n_rows) break;
        pthread_mutex_unlock(&s->mu);
        step(&x);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    rf_row_shared_free(&x.sh);
    rf_runstate_release(x.rs); /* made in this thread: its attention scratch is per OpenMP thread of it */
    free(x.rows), free(x.sc.kv), free(x.sc.calls);
    free(x.sb.lidx), free(x.sb.tokens), free(x.sb.pos), free(x.sb.logits), free(x.pos_buf);
    return NULL;
}
