/* row.c - one running generation of the scheduler (row.h): its step
 * machine, its answer and its choices. */
#include <stdlib.h>
#include <string.h>

#include "serve/row.h"
#include "util/util.h"

/* calls of up to this many tokens are timed for the cost model (wider
 * ones follow its slope) */
enum { COST_WIDTHS = 16 };

/* the decoder's callbacks (the internal ids are ints) */
static void on_tokens_int(const int *ids, int n, void *user) { rf_answer_on_tokens((const int32_t *)ids, n, user); }
static void on_event_int(const rf_event *ev, void *user) { rf_answer_on_event(ev, user); }

int rf_row_whole(const batch_row *r) { return r->pq || r->mq; }

rf_kvcache *rf_row_kv(batch_row *r) { return r->rq ? rf_roll_seq_kv(r->rq) : rf_ar_seq_kv(r->q); }

batch_row *rf_row_new(job *j) {
    batch_row *r = rf_calloc(1, sizeof *r);
    r->j = j;
    r->n_choices = j->req.n_choices > 1 ? j->req.n_choices : 1;
    r->logit_row = -1;
    rf_acc_init(&r->acc);
    return r;
}

/* The cost model for p's adaptive rolling slot: 1 when sh holds it (the
 * tune cache's, or timed now the first time: the rows wait a few seconds,
 * once), 0 when it could not be timed (the rows then fit their own). */
static int cost_model(rf_server *s, row_shared *sh, const rf_params *p) {
    if (!sh->cost_tried) {
        sh->cost_tried = 1;
        int n = 2 * p->slot_size > COST_WIDTHS ? 2 * p->slot_size : COST_WIDTHS;
        if (n > s->m->cfg.max_pos / 2) n = s->m->cfg.max_pos / 2;
        float *c = n >= 2 ? rf_malloc((size_t)n * sizeof *c) : NULL;
        if (c && !rf_call_cost_get(s->m, n, c, NULL)) sh->call_cost = c, sh->n_call_cost = n;
        else free(c);
    }
    return sh->call_cost != NULL;
}

/* r's sequence: AR or the rolling slot, with a reused prefix of src, or
 * plan-and-infill or MDM (which reuse none) */
static int seq_new(const rf_model *m, batch_row *r, const rf_params *p, const rf_kvcache *src, int n_reuse) {
    const job *j = r->j;
    if (p->method == RF_METHOD_MDM)
        r->mq = rf_mdm_seq_new(m, j->req.prompt, j->req.n_prompt, p, NULL);
    else if (p->method == RF_METHOD_REFUSION && !p->rolling)
        r->pq = rf_pi_seq_new(m, j->req.prompt, j->req.n_prompt, p);
    else if (p->method == RF_METHOD_REFUSION)
        r->rq = rf_roll_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    else
        r->q = rf_ar_seq_new_reusing(m, j->req.prompt, j->req.n_prompt, p, src, n_reuse);
    return r->q || r->rq || r->pq || r->mq ? 0 : -1;
}

int rf_row_begin(rf_server *s, batch_row *r, row_shared *sh) {
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
    if (p.method == RF_METHOD_REFUSION && p.rolling && p.draft_adaptive && !p.call_cost && cost_model(s, sh, &p))
        p.call_cost = sh->call_cost, p.n_call_cost = sh->n_call_cost;
    int common = 0;
    pc_entry *e = p.method == RF_METHOD_MDM || (p.method == RF_METHOD_REFUSION && !p.rolling)
                      ? NULL /* plan-and-infill's and MDM's caches are not a prefix to keep or take */
                      : rf_pc_find(&sh->pc, j->req.prompt, j->req.n_prompt, &common);
    common = rf_kv_reusable(e ? &e->kv : NULL, common, j->req.n_prompt); /* as the sequences cut it */
    rc = seq_new(s->m, r, &p, e ? &e->kv : NULL, common);
    if (!rc && common > 0) {
        pthread_mutex_lock(&s->mu);
        s->prefix_hits++;
        s->prefix_tokens += common;
        pthread_mutex_unlock(&s->mu);
    }
    return rc;
}

int rf_row_next(batch_row *r, int budget, const int **t, const int **ps, int *buf, int *n_logits) {
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
    return n;
}

int rf_row_after(batch_row *r, const float *logits) {
    return r->pq   ? rf_pi_seq_after(r->pq, logits)
           : r->mq ? rf_mdm_seq_after(r->mq, logits)
           : r->rq ? rf_roll_seq_after(r->rq, logits)
                   : rf_ar_seq_after(r->q, logits);
}

/* j finished with its choices a (or the failure rc), the scheduler's
 * reference given back */
static void job_end(rf_server *s, job *j, job_acc *a, int rc) {
    rf_job_finish(s, j, a, rc);
    pthread_mutex_lock(&s->mu);
    s->n_active--;
    rf_serve_job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
}

void rf_row_job_fail(rf_server *s, job *j, int rc) {
    job_acc a;
    rf_acc_init(&a);
    job_end(s, j, &a, rc);
}

/* r's sequence, whichever it is, freed (none: nothing) */
static void seq_free(batch_row *r) {
    rf_ar_seq_free(r->q);
    rf_roll_seq_free(r->rq);
    rf_pi_seq_free(r->pq);
    rf_mdm_seq_free(r->mq);
    r->q = NULL, r->rq = NULL, r->pq = NULL, r->mq = NULL;
}

void rf_row_release(rf_server *s, batch_row *r, int rc) {
    job *j = r->j;
    job_acc a = r->acc;
    seq_free(r);
    rf_answer_free(&r->c);
    free(r);
    job_end(s, j, &a, rc);
}

/* The statistics of r's completed sequence into *stats (the sequence
 * freed): 0, or -1 with rf_last_error(). */
static int seq_finish(batch_row *r, rf_stats *stats) {
    rf_gen_result g;
    rf_ar_seq *q = r->q;
    rf_roll_seq *rq = r->rq;
    rf_pi_seq *pq = r->pq;
    rf_mdm_seq *mq = r->mq;
    r->q = NULL, r->rq = NULL, r->pq = NULL, r->mq = NULL; /* (a fault inside: not freed twice) */
    int rc = pq ? rf_pi_seq_finish(pq, &g) : mq ? rf_mdm_seq_finish(mq, &g) : rq ? rf_roll_seq_finish(rq, &g)
                                                                                : rf_ar_seq_finish(q, &g);
    if (rc) return rc;
    stats->n_tokens = g.n_ids, stats->hit_eos = g.hit_eos, stats->n_calls = g.n_calls, stats->seconds = g.wall_s;
    stats->tpf = g.tpf, stats->tokens_per_call = g.tokens_per_call, stats->tokens_per_s = g.tokens_per_s;
    stats->n_steps = g.n_steps;
    rf_gen_result_free(&g);
    return 0;
}

/* Its sequence is freed in every case: a fault inside one of its steps
 * cannot leave it half changed, since a step's only lasting allocation
 * (the next step's statistics) is its last action. */
int rf_row_end(rf_server *s, batch_row *r, int rc, row_shared *sh) {
    job *j = r->j;
    rf_stats stats;
    memset(&stats, 0, sizeof stats);
    if (!rc && s->cfg.cache_bytes > 0 && !rf_row_whole(r)) { /* its cache, for the requests that begin the same way */
        rf_kvcache kv;
        int *ids, n = r->rq ? rf_roll_seq_take_cache(r->rq, &kv, &ids) : rf_ar_seq_take_cache(r->q, &kv, &ids);
        rf_pc_put(&sh->pc, s->cfg.cache_bytes, &kv, ids, n);
        pthread_mutex_lock(&s->mu);
        s->prefix_cache_bytes = sh->pc.bytes;
        pthread_mutex_unlock(&s->mu);
    }
    if (!rc) rc = seq_finish(r, &stats);
    seq_free(r); /* (a failed one's) */
    rc = rf_answer_end(s, j, &r->c, &stats, rc, rf_now() - r->t0, r->calls0);
    if (!rc) rf_acc_choice(s, j, &r->acc, &r->c, &stats, r->choice, r->n_choices);
    if (!rc && r->choice + 1 < r->n_choices) {
        rf_answer_free(&r->c);
        r->choice++;
        if (!(rc = rf_row_begin(s, r, sh))) return 1;
    }
    return rc < 0 ? rc : 0;
}

void rf_row_shared_free(row_shared *sh) {
    while (sh->pc.head) rf_pc_drop(&sh->pc, &sh->pc.head);
    free(sh->call_cost);
}
