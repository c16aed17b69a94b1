/* calllog.c - the thread-local log of rf_forward calls' shapes (forward.h),
 * kept apart from the forward pass, which only reports each call to it. */
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "util/util.h"

static _Thread_local rf_call_log *call_log;

rf_call_log *rf_call_log_attach(rf_call_log *log) {
    rf_call_log *old = call_log;
    call_log = log;
    return old;
}

void rf_call_log_free(rf_call_log *log) {
    free(log->rec);
    memset(log, 0, sizeof *log);
}

void rf_call_log_record(const rf_kvcache *c, const rf_batch *b) {
    rf_call_log *log = call_log;
    if (!log) return;
    log->rec = rf_grow(log->rec, sizeof *log->rec, log->n, &log->cap, 256);
    rf_call_rec *r = &log->rec[log->n++];
    memset(r, 0, sizeof *r);
    r->n_rows = b->n_rows;
    r->n_tok = b->n_tok;
    r->forked = c->n_rows > 0;
    r->ctx_main = r->forked ? c->fork_len : c->len;
    for (int i = 0; r->forked && i < c->n_rows; i++) r->ctx_rows += c->row_len[i];
    r->n_logits = b->n_logits;
    r->bidirectional = b->bidirectional;
    r->pos_min = r->pos_max = b->pos[0];
    for (int i = 1; i < b->n_rows * b->n_tok; i++) {
        if (b->pos[i] < r->pos_min) r->pos_min = b->pos[i];
        if (b->pos[i] > r->pos_max) r->pos_max = b->pos[i];
    }
}

int rf_call_log_model_calls(const rf_call_log *log, int from, int to, int n_prompt, int prefill_own_call) {
    int calls = 0;
    for (int i = from; i < to; i++) {
        const rf_call_rec *r = &log->rec[i];
        int prefill = !r->forked && r->pos_max < n_prompt;
        int run_ends = i + 1 == to || log->rec[i + 1].forked || log->rec[i + 1].pos_max >= n_prompt;
        if (!prefill || (run_ends && prefill_own_call)) calls++;
    }
    return calls;
}
