/* row.h - one running generation as the scheduler sees it: a row of its
 * forward calls, driven by the decoder's step machine (AR decoding, the
 * rolling slot, plan-and-infill, MDM: decode/ar_step.h, rolling_step.h,
 * refusion_step.h, mdm.h), its answer (answer.h) and the job's n choices one
 * after the other (choice i seeded with seed + i). row.c; the scheduler
 * (scheduler.c) is its only user, and calls these under its catch point. */
#ifndef RF_SERVE_ROW_H
#define RF_SERVE_ROW_H

#include "decode/ar_step.h"
#include "decode/mdm.h"
#include "decode/refusion_step.h"
#include "decode/rolling_step.h"
#include "serve/answer.h"
#include "serve/prefix_cache.h"

typedef struct {
    job *j;
    run_ctx c;
    rf_ar_seq *q;      /* AR decoding, or */
    rf_roll_seq *rq;   /* the rolling slot, or */
    rf_pi_seq *pq;     /* plan-and-infill, or */
    rf_mdm_seq *mq;    /* MDM */
    rf_step_call call; /* plan-and-infill and MDM: this step's call, whole (rf_row_whole) */
    int in_call;       /* this step: its call is in the pass */
    int n_tok, n_logits, at; /* this step: its call's tokens, logits rows, and (a packed row) where its
                                tokens sit in the scheduler's buffers */
    int choice, n_choices; /* the choice it decodes (seed + choice), of the job's n */
    job_acc acc;       /* the job's choices so far */
    int calls0;
    double t0;
    int logit_row;     /* this step: its first row in the logits, -1 none, -2 its call was refused */
} batch_row;

/* What the rows share, held by the scheduler thread across steps. */
typedef struct {
    prefix_cache pc;
    /* the adaptive rolling slot's cost model, measured once when the first
     * such row starts (its rows share calls of every width; without it each
     * would fit a line to the batched calls it times) */
    float *call_cost;
    int n_call_cost, cost_tried;
} row_shared;

/* A row for job j (which has left the queue), its first choice not yet
 * started (rf_row_begin). */
batch_row *rf_row_new(job *j);
/* Start r's choice r->choice: its answer and its sequence (AR and the
 * rolling slot from a cached prompt prefix when there is one). 0, or the
 * failure (the row then ends with rf_row_release). */
int rf_row_begin(rf_server *s, batch_row *r, row_shared *sh);
/* r hands in whole calls of its own (plan-and-infill, MDM), not a row of
 * tokens for the scheduler to pack */
int rf_row_whole(const batch_row *r);
/* The cache a packed row's tokens go into (AR, rolling slot). */
rf_kvcache *rf_row_kv(batch_row *r);
/* r's next call: its token count (< 0: cancelled, cut or failed), tokens,
 * positions (buf: room for the budget's positions) and how many of its last
 * tokens want logits; a whole call is left in r->call. */
int rf_row_next(batch_row *r, int budget, const int **t, const int **ps, int *buf, int *n_logits);
/* After the call: 1 the choice is complete, 0 not yet, < 0 failed. */
int rf_row_after(batch_row *r, const float *logits);
/* r's choice is over (rc 0: its sequence completed, else the failure):
 * 1 when the row goes on with the job's next choice, else 0 or the failure
 * with which the row ends (rf_row_release). */
int rf_row_end(rf_server *s, batch_row *r, int rc, row_shared *sh);
/* The row's last steps, whatever ended it: r freed, its job finished with
 * its choices so far (or the failure rc), its reference given back. */
void rf_row_release(rf_server *s, batch_row *r, int rc);
/* A job that never got a row (it failed on the way): finished with rc. */
void rf_row_job_fail(rf_server *s, job *j, int rc);
/* What the rows share, freed. */
void rf_row_shared_free(row_shared *sh);

#endif
