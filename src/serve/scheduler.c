/* scheduler.c - continuous batching: the thread that runs one model call
 * per step for every running generation (see the comment below). */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/ar_step.h"
#include "decode/mdm.h"
#include "decode/refusion_step.h"
#include "decode/rolling_step.h"
#include "model/forward.h"
#include "model/runstate.h" /* its max_tokens, to grow it */
#include "model/workspace.h" /* rf_runstate_alloc: the scheduler's own run state */
#include "serve/answer.h"
#include "serve/prefix_cache.h"
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
 * then hands each its logits. New jobs join at the next step, finished
 * ones leave; a cancelled one (client gone, max_tokens, stop) leaves
 * before its next call. Prompt tokens are fed at most PREFILL_BUDGET per
 * step in all, so a long prompt joins over several steps while the others
 * keep decoding (a plan-and-infill or MDM call cannot be split: one that
 * does not fit a budget already drawn on waits a step). Every answer is the
 * one the generation gets alone (decode/ar_step.c; tests/decode_*_step.c,
 * tests/model_forward_calls.c, tests/serve_batch_solo.sh). */
enum { PREFILL_BUDGET = 256 };


typedef struct {
    job *j;
    run_ctx c;
    rf_ar_seq *q;     /* AR decoding, or */
    rf_roll_seq *rq;  /* the rolling slot, or */
    rf_pi_seq *pq;    /* plan-and-infill, or */
    rf_mdm_seq *mq;   /* MDM */
    rf_step_call call; /* plan-and-infill and MDM: this step's call, whole (own_call) */
    int in_call;      /* this step: its call is in the pass */
    int choice, n_choices; /* the choice it decodes (seed + choice), of the job's n */
    job_acc acc;      /* the job's choices so far */
    int calls0;
    double t0;
    int logit_row;    /* this step: its first row in the logits, or -1 */
} batch_row;

/* What the scheduler thread holds across steps besides its rows. */
typedef struct {
    prefix_cache pc;
    /* the adaptive rolling slot's cost model, measured once when the first
     * such row starts (its rows share calls of every width; without it each
     * would fit a line to the batched calls it times) */
    float *call_cost;
    int n_call_cost, cost_tried;
} sched_state;

/* calls of up to this many tokens are timed for the cost model (wider
 * ones follow its slope) */
enum { COST_WIDTHS = 16 };

/* r hands in whole calls of its own (plan-and-infill, MDM), not a row of
 * tokens to pack */
static int own_call(const batch_row *r) { return r->pq || r->mq; }

/* the decoder's callbacks, as the worker path's (the internal ids are ints):
 * one event per model call after the prompt's is counted */
static void on_tokens_int(const int *ids, int n, void *user) { rf_answer_on_tokens((const int32_t *)ids, n, user); }
static void on_event_int(const rf_event *ev, void *user) { rf_answer_on_event(ev, user); }

/* The scheduler's calls into the library, each behind a catch point: an
 * rf_die inside (a failed allocation, a broken invariant, a test's fault
 * point) fails the rows concerned, not the server. */
/* r's sequence: AR or the rolling slot, with a reused prefix of src, or
 * plan-and-infill or MDM (which reuse none) */
static int guarded_new(const rf_model *m, batch_row *r, const rf_params *p, const rf_kvcache *src,
                       int n_reuse) {
    const job *j = r->j;
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : -1;
    if (p->method == RF_METHOD_MDM)
        r->mq = rf_mdm_seq_new(m, j->req.prompt, j->req.n_prompt, p, NULL);
    else if (p->method == RF_METHOD_REFUSION && !p->rolling)
        r->pq = rf_pi_seq_new(m, j->req.prompt, j->req.n_prompt, p);
    else if (p->method == RF_METHOD_REFUSION)
        r->rq = rf_roll_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    else
        r->q = rf_ar_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    rf_catch_pop(&k);
    return r->q || r->rq || r->pq || r->mq ? 0 : -1;
}
/* r's next call: its tokens (count returned, < 0: failed), positions and
 * how many of its last tokens want logits (plan-and-infill: the whole call
 * in r->call, its logits wanted in *n_logits) */
static int guarded_next(batch_row *r, int budget, const int **t, const int **ps, int *buf, int *n_logits) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return k.oom ? RF_ERR_NOMEM : -1;
    int n;
    if (r->pq || r->mq) {
        n = r->pq ? rf_pi_seq_next(r->pq, budget, &r->call) : rf_mdm_seq_next(r->mq, budget, &r->call);
        *n_logits = n > 0 ? r->call.b.n_logits : 0;
    } else if (r->rq) {
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
    int done = r->pq   ? rf_pi_seq_after(r->pq, logits)
               : r->mq ? rf_mdm_seq_after(r->mq, logits)
               : r->rq ? rf_roll_seq_after(r->rq, logits)
                       : rf_ar_seq_after(r->q, logits);
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
static int guarded_cost(const rf_model *m, int n, float *cost) {
    rf_catch k;
    rf_catch_push(&k);
    if (setjmp(k.jb)) return -1;
    int rc = rf_call_cost_measure(m, n, cost);
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
 * finished with r->acc (its choices, or nothing on failure) and rc, the
 * row's place and its reference to the job given back. */
static void row_release(rf_server *s, batch_row *r, int rc) {
    job *j = r->j;
    job_acc a = r->acc;
    rf_answer_free(&r->c);
    free(r);
    rf_job_finish(s, j, &a, rc);
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    rf_serve_job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

/* The cost model for p's adaptive rolling slot: 1 when st holds it (timed
 * now the first time: the rows wait a few seconds, once), 0 when it could
 * not be timed (the rows then fit their own). */
static int cost_model(rf_server *s, sched_state *st, const rf_params *p) {
    if (!st->cost_tried) {
        st->cost_tried = 1;
        int n = 2 * p->slot_size > COST_WIDTHS ? 2 * p->slot_size : COST_WIDTHS;
        if (n > s->m->cfg.max_pos / 2) n = s->m->cfg.max_pos / 2;
        float *c = n >= 2 ? malloc((size_t)n * sizeof *c) : NULL;
        if (c && !guarded_cost(s->m, n, c)) st->call_cost = c, st->n_call_cost = n;
        else free(c);
    }
    return st->call_cost != NULL;
}

/* Start r's choice r->choice: its answer context and its sequence, seeded
 * with the job's seed + choice (AR and the rolling slot from a cached
 * prompt prefix when there is one). 0, or the failure. */
static int choice_begin(rf_server *s, batch_row *r, sched_state *st) {
    job *j = r->j;
    r->t0 = rf_now();
    int rc = rf_answer_begin(s, j, r->choice, &r->c, &r->calls0);
    if (rc) return rc;
    rf_params p = j->req.p;
    p.seed += (uint64_t)r->choice;
    p.on_tokens = on_tokens_int, p.on_event = on_event_int, p.on_logprobs = rf_answer_on_logprobs;
    p.user = &r->c;
    p.cancel = &j->cancel_flag;
    p.ws = NULL; /* the sequence's own cache */
    if (p.method == RF_METHOD_REFUSION && p.rolling && p.draft_adaptive && !p.call_cost && cost_model(s, st, &p))
        p.call_cost = st->call_cost, p.n_call_cost = st->n_call_cost;
    int common = 0;
    pc_entry *e = p.method == RF_METHOD_MDM || (p.method == RF_METHOD_REFUSION && !p.rolling)
                      ? NULL /* plan-and-infill's and MDM's caches are not a prefix to keep or take */
                      : rf_pc_find(&st->pc, j->req.prompt, j->req.n_prompt, &common);
    common = rf_kv_reusable(e ? &e->kv : NULL, common, j->req.n_prompt); /* as the sequences cut it */
    rc = guarded_new(s->m, r, &p, e ? &e->kv : NULL, common);
    if (!rc && common > 0) {
        pthread_mutex_lock(&s->mu);
        s->prefix_hits++;
        s->prefix_tokens += common;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

/* A row for job j, its first choice started (its decoder's callbacks hold
 * its address: rows are allocated one by one, never moved), or NULL when it
 * could not start (the job is then finished, failed). rs: the scheduler's
 * run state (NULL: it could not be allocated). */
static batch_row *row_start(rf_server *s, job *j, const rf_runstate *rs, sched_state *st) {
    batch_row *r = rf_calloc(1, sizeof *r);
    r->j = j;
    r->n_choices = j->req.n_choices > 1 ? j->req.n_choices : 1;
    rf_acc_init(&r->acc);
    int rc = 0;
    if (!rs) {
        rf_set_error("out of memory for the batched model calls' buffers");
        rc = RF_ERR_NOMEM;
    }
    if (!rc) rc = choice_begin(s, r, st);
    if (rc) {
        row_release(s, r, rc);
        return NULL;
    }
    return r;
}

/* Row r's choice is over: rc 0 when its sequence completed, else the
 * failure (cancelled, cut, or an error in rf_last_error()). Its sequence is
 * freed in every case: an rf_die inside one of its steps cannot leave it
 * half changed, since a step's only lasting allocation (the next step's
 * statistics, ans_step) is its last action. Returns 1 when the row goes on
 * with the job's next choice (n > 1, each after the other as the workers
 * ran them), else 0: r is freed. */
static int row_end(rf_server *s, batch_row *r, int rc, sched_state *st) {
    job *j = r->j;
    rf_stats stats;
    memset(&stats, 0, sizeof stats);
    if (!rc && s->cfg.cache_bytes > 0 && !own_call(r)) { /* its cache, for the requests that begin the same way */
        rf_kvcache kv;
        int *ids, n = r->rq ? rf_roll_seq_take_cache(r->rq, &kv, &ids) : rf_ar_seq_take_cache(r->q, &kv, &ids);
        rf_pc_put(&st->pc, s->cfg.cache_bytes, &kv, ids, n);
        pthread_mutex_lock(&s->mu);
        s->prefix_cache_bytes = st->pc.bytes;
        pthread_mutex_unlock(&s->mu);
    }
    if (!rc) {
        rf_gen_result g;
        rc = r->pq   ? rf_pi_seq_finish(r->pq, &g)
             : r->mq ? rf_mdm_seq_finish(r->mq, &g)
             : r->rq ? rf_roll_seq_finish(r->rq, &g)
                     : rf_ar_seq_finish(r->q, &g);
        if (!rc) {
            stats.n_tokens = g.n_ids, stats.hit_eos = g.hit_eos, stats.n_calls = g.n_calls, stats.seconds = g.wall_s;
            stats.tpf = g.tpf, stats.tokens_per_call = g.tokens_per_call, stats.tokens_per_s = g.tokens_per_s;
            stats.n_steps = g.n_steps;
            rf_gen_result_free(&g);
        }
    } else {
        rf_ar_seq_free(r->q);
        rf_roll_seq_free(r->rq);
        rf_pi_seq_free(r->pq);
        rf_mdm_seq_free(r->mq);
    }
    r->q = NULL, r->rq = NULL, r->pq = NULL, r->mq = NULL;
    rc = rf_answer_end(s, j, &r->c, &stats, rc, rf_now() - r->t0, r->calls0);
    if (!rc) rf_acc_choice(s, j, &r->acc, &r->c, &stats, r->choice, r->n_choices);
    if (!rc && r->choice + 1 < r->n_choices) {
        rf_answer_free(&r->c);
        r->choice++;
        if (!(rc = choice_begin(s, r, st))) return 1;
    }
    row_release(s, r, rc);
    return 0;
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

/* A batched call's generations: the scheduler's rows (AR and rolling rows
 * one row of tokens each, in sb; a plan-and-infill or MDM call its own), as
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

/* Grow the run state *rs for a call of T tokens over contexts up to ctx
 * (a wider call than any before: twice the tokens, or T): 0, or
 * RF_ERR_NOMEM (*rs is then NULL). */
static int fit_runstate(rf_server *s, rf_runstate **rs, int T, int ctx, int *max_ctx) {
    if (*rs && rf_runstate_fits(*rs, T, ctx)) return 0;
    int want = *rs && 2 * (*rs)->max_tokens > T ? 2 * (*rs)->max_tokens : T;
    if (ctx > *max_ctx) *max_ctx = ctx;
    rf_runstate_release(*rs);
    if (!(*rs = guarded_runstate(&s->m->cfg, want, *max_ctx))) {
        rf_set_error("out of memory for the batched model calls' buffers");
        return RF_ERR_NOMEM;
    }
    return 0;
}

/* The step's call in /health's and /metrics' counters (n_worker,
 * worker_rows: the plan-and-infill and MDM calls and their rows). */
static void count_step(rf_server *s, const step_calls *sc, int n_roll, int n_worker, int worker_rows) {
    pthread_mutex_lock(&s->mu);
    s->batch_calls += sc->n > 0;
    s->batch_rows += (unsigned long long)sc->rows;
    s->batch_rolling_rows += (unsigned long long)n_roll;
    if (n_roll && sc->rows > 1) s->batch_mixed_calls++;
    if (sc->rows > s->batch_peak) s->batch_peak = sc->rows;
    s->batch_worker_calls += (unsigned long long)n_worker;
    s->batch_worker_rows += (unsigned long long)worker_rows;
    if (n_worker && sc->n > 1) s->batch_worker_mixed_calls++;
    pthread_mutex_unlock(&s->mu);
}

/* The rows' calls of the step (row i: row_n[i] tokens, row_nl[i] logits;
 * AR and rolling rows at row_at[i] in sb, a plan-and-infill row's call its
 * own) into sc, each checked as rf_forward checks it alone: a refused one
 * is marked (logit_row -2: its generation fails), the others go. Returns
 * the logits rows they take; *n_own, *own_rows: the plan-and-infill and MDM
 * calls and their rows. */
static int rows_calls(rf_server *s, batch_row **rows, int n_rows, const int *row_at, const int *row_n,
                      const int *row_nl, step_bufs *sb, const rf_runstate *rs, step_calls *sc, int *n_own,
                      int *own_rows) {
    int nl = 0;
    for (int i = 0; i < n_rows; i++) {
        if (!row_n[i]) continue;
        rf_batch b = rows[i]->call.b;
        rf_kvcache *c = rows[i]->call.kv;
        if (!own_call(rows[i])) {
            int *lidx = sb->lidx + nl;
            for (int k = 0; k < row_nl[i]; k++) lidx[k] = row_n[i] - row_nl[i] + k;
            b = (rf_batch){1, row_n[i], sb->tokens + row_at[i], sb->pos + row_at[i], 0, row_nl[i], lidx, NULL};
            c = rows[i]->rq ? rf_roll_seq_kv(rows[i]->rq) : rf_ar_seq_kv(rows[i]->q);
        }
        if (rf_forward_check(s->m, c, rs, &b)) {
            rows[i]->logit_row = -2; /* refused */
            continue;
        }
        if (row_nl[i] > 0) rows[i]->logit_row = nl;
        nl += row_nl[i];
        sc->kv[sc->n] = c, sc->calls[sc->n++] = b, sc->rows += b.n_rows;
        if (own_call(rows[i])) (*n_own)++, *own_rows += b.n_rows;
    }
    return nl;
}

void *rf_serve_scheduler_main(void *arg) {
    rf_server *s = arg;
    int threads = s->cfg.batch_threads > 0 ? s->cfg.batch_threads : s->cfg.defaults.threads;
    if (threads > 0) omp_set_num_threads(threads);
    /* tokens of a call at first: the prompt budget and, per row, a rolling
     * call of two slots of 4 (the demo model's); more when a step needs it */
    const int cap = s->cfg.workers, V = s->m->cfg.vocab_size, max_t = PREFILL_BUDGET + 8 * cap;
    int max_ctx = s->m->cfg.max_pos;
    batch_row **rows = rf_calloc((size_t)cap, sizeof *rows);
    int *row_at = rf_calloc((size_t)cap, sizeof *row_at), *row_n = rf_calloc((size_t)cap, sizeof *row_n);
    int *row_nl = rf_calloc((size_t)cap, sizeof *row_nl);
    step_calls sc = {0, rf_calloc((size_t)cap, sizeof(rf_kvcache *)), rf_calloc((size_t)cap, sizeof(rf_batch)), 0};
    step_bufs sb = {rf_calloc((size_t)max_t, sizeof(int)), rf_calloc((size_t)max_t, sizeof(int)), max_t,
                    rf_calloc((size_t)cap, sizeof(int)), rf_calloc((size_t)cap * V, sizeof(float)), cap};
    int *pos_buf = rf_calloc(PREFILL_BUDGET, sizeof *pos_buf);
    int n_rows = 0, kept_last = 0; /* answer tokens the rows other than rolling ones kept in the last step */
    sched_state st = {0};
    /* made here: its attention scratch is per OpenMP thread of this thread */
    rf_runstate *rs = guarded_runstate(&s->m->cfg, max_t, max_ctx);
    pthread_mutex_lock(&s->mu);
    for (;;) {
        /* once stopping, no new batched jobs; the running ones finish */
        while (!n_rows && !s->bhead && !s->stopping) pthread_cond_wait(&s->batch_cv, &s->mu);
        if (s->stopping) rf_queue_fail_locked(s, &s->bhead, &s->btail);
        if (s->stopping && !n_rows) break;
        /* new jobs join */
        while (n_rows < cap && s->bhead) {
            job *j = rf_queue_pop_locked(&s->bhead, &s->btail);
            if (rf_job_start_locked(s, j)) continue;
            pthread_mutex_unlock(&s->mu);
            if ((rows[n_rows] = row_start(s, j, rs, &st))) n_rows++;
            pthread_mutex_lock(&s->mu);
        }
        int left = PREFILL_BUDGET;
        pthread_mutex_unlock(&s->mu);

        /* this step's call: every row's next call */
        int nr = 0, T = 0, nl = 0, n_roll = 0, rc = 0, ctx = max_ctx, T_own = 0;
        for (int i = 0; i < n_rows; i++) {
            batch_row *r = rows[i];
            const int *t = NULL, *ps = NULL;
            int nli = 0, n = guarded_next(r, left > 0 ? left : 1, &t, &ps, pos_buf, &nli);
            r->logit_row = -1, r->in_call = 0;
            row_n[i] = 0;
            if (n < 0) { /* cancelled, cut or failed: it leaves (or its next choice starts) */
                if (!row_end(s, r, n, &st)) rows[i--] = rows[--n_rows];
                continue;
            }
            if (n == 0) continue;
            if (own_call(r)) { /* a call of its own (its tokens stay the machine's): */
                /* what it feeds without logits (a prompt chunk, MDM's
                 * recomputed context) shares the budget; it cannot be split:
                 * one that does not fit a budget already drawn on waits */
                int fed = n - nli;
                if (fed > 0 && left < PREFILL_BUDGET && fed > left) continue;
                left -= fed;
                r->in_call = 1;
                ctx = call_context(r->call.kv, &r->call.b, ctx);
                if (!rc) rc = guarded_reserve(&sb, T, 0, nl, nli, V);
                row_n[i] = n, row_nl[i] = nli;
                T_own += n, nl += nli, nr++;
                continue;
            }
            /* prompt chunks (tokens fed without logits) share the budget;
             * decoding rows (an AR token, a rolling call) always go */
            if (n > nli) left -= n;
            if (!rc) rc = guarded_reserve(&sb, T, n, nl, nli, V);
            if (rc) continue; /* no memory for the call: every row fails below */
            memcpy(sb.tokens + T, t, (size_t)n * sizeof(int));
            memcpy(sb.pos + T, ps, (size_t)n * sizeof(int));
            row_at[i] = T, row_n[i] = n, row_nl[i] = nli, r->in_call = 1;
            T += n, nl += nli;
            n_roll += r->rq != NULL;
            nr++;
        }
        if (!nr && !rc) {
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (!rc) rc = fit_runstate(s, &rs, T + T_own, ctx, &max_ctx);

        /* the calls, each checked as rf_forward checks it alone: one that
         * fails leaves (its generation fails), the others go */
        sc.n = sc.rows = nl = 0;
        int n_own = 0, own_rows = 0;
        if (!rc) nl = rows_calls(s, rows, n_rows, row_at, row_n, row_nl, &sb, rs, &sc, &n_own, &own_rows);
        if (!rc && sc.n) {
            rf_call_batch cb = {sc.n, sc.kv, sc.calls, sb.logits};
            rc = guarded_forward(s->m, rs, &cb);
        }
        count_step(s, &sc, n_roll, n_own, own_rows);
        /* each row takes its logits (draws its tokens: on_tokens streams
         * them); a rolling row sizes its next call for the call this one
         * was: the other rolling rows, the other rows' tokens and what
         * those kept last step */
        int kept = 0, roll_tokens = 0;
        for (int i = 0; i < n_rows; i++)
            if (rows[i]->rq && rows[i]->in_call) roll_tokens += row_n[i];
        for (int i = 0; i < n_rows && (nr || rc); i++) {
            batch_row *r = rows[i];
            if (!rc && !r->in_call) continue; /* its call waits for the next step */
            if (r->rq) rf_roll_seq_set_load(r->rq, n_roll - 1, T + T_own - roll_tokens, kept_last);
            int n_ids = r->c.n_ids;
            int done = rc                   ? rc
                       : r->logit_row == -2 ? -1
                                            : guarded_after(r, r->logit_row >= 0 ? sb.logits + (size_t)r->logit_row * V
                                                                                 : NULL);
            if (!r->rq) kept += r->c.n_ids - n_ids;
            int fail = done < 0 ? done : 0;
            if (done && !row_end(s, r, fail, &st)) rows[i--] = rows[--n_rows];
        }
        kept_last = kept;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    while (st.pc.head) rf_pc_drop(&st.pc, &st.pc.head);
    free(st.call_cost);
    rf_runstate_release(rs);
    free(rows), free(row_at), free(row_n), free(row_nl), free(sc.kv), free(sc.calls);
    free(sb.lidx), free(sb.tokens), free(sb.pos), free(pos_buf), free(sb.logits);
    return NULL;
}