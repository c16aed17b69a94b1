/* decode_calllog.c - the forward call log (model/forward.h) that the replay
 * benchmark (bench/decode_replay.c) records and replays, against what the
 * decoders themselves report.
 *
 *  1. AR: the log's model calls == rf_gen_result.n_calls; the prompt is fed
 *     once (P tokens, in chunks), then one token per call at cache length
 *     P + i with one logits row; tokens fed = P + answer - 1.
 *  2. ReFusion (faithful): the call shapes are rebuilt independently from
 *     the decoder's events and per-step statistics (which slots were
 *     planned, committed, dropped; the accepted flags after each infill
 *     iteration) and must equal the log call by call: plan = every masked
 *     slot of the block after the committed tokens; verify = the chosen
 *     slots; infilling = two calls per iteration over R forked rows of
 *     S - a tokens. Calls == n_calls; tokens fed == the rebuilt count.
 *     The runs must cover infilling, multi-row calls and EOS drops.
 *  3. AR-verified switches and MDM: model calls == n_calls; MDM feeds the
 *     whole sequence bidirectionally each call.
 *  4. Detached: nothing is recorded.
 *  5. Cancel: a flag raised from a callback stops every decoder before its
 *     next model call (the log gains no entry after the raise) with -1 and
 *     "cancelled"; an unraised flag changes nothing. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/favourite_token.h"
#include "helpers/small_config.h"
#include "decode/decode.h"
#include "decode/mdm.h"
#include "model/forward.h"

#define V 256
#define MASK 255

static rf_config cfg_small(void) {
    rf_config c = rf_test_config(32, 64, 4, 2, 8, V, 512);
    c.tie_embeddings = 1;
    c.eos_id = 254, c.mask_id = MASK, c.bot_id = 253;
    return c;
}

static long fed(const rf_call_log *log) {
    long t = 0;
    for (int i = 0; i < log->n; i++) t += (long)log->rec[i].n_rows * log->rec[i].n_tok;
    return t;
}

/* ---- 1. AR ---------------------------------------------------------------------- */
static void check_ar(const rf_model *m, const int *prompt, int P, int G, int eos) {
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = G, p.eos_id = eos;
    rf_call_log log = {0};
    rf_call_log_attach(&log);
    rf_gen_result r;
    int rc = rf_generate_ar(m, prompt, P, &p, &r);
    rf_call_log_attach(NULL);
    CHECK(rc == 0, "ar: %s", rf_last_error());
    if (rc) return;
    int calls = rf_call_log_model_calls(&log, 0, log.n, P, 1);
    CHECK(calls == r.n_calls, "ar P=%d: log has %d model calls, decoder %d", P, calls, r.n_calls);
    CHECK(fed(&log) == P + r.n_ids - 1, "ar P=%d: %ld tokens fed, expected %d", P, fed(&log), P + r.n_ids - 1);
    int k = 0, prompt_fed = 0;
    while (k < log.n && log.rec[k].pos_max < P) prompt_fed += log.rec[k++].n_tok;
    CHECK(prompt_fed == P, "ar: prompt prefill fed %d of %d tokens", prompt_fed, P);
    CHECK(k > 0 && log.rec[k - 1].n_logits == 1, "ar: the prefill's last chunk must give one logits row");
    for (int i = 0; k + i < log.n; i++) {
        const rf_call_rec *c = &log.rec[k + i];
        CHECK(c->n_rows == 1 && c->n_tok == 1 && !c->forked && c->ctx_main == P + i && c->n_logits == 1 &&
                  c->pos_min == P + i,
              "ar step %d: %dx%d ctx %d logits %d pos %d", i, c->n_rows, c->n_tok, c->ctx_main, c->n_logits,
              c->pos_min);
    }
    rf_gen_result_free(&r);
    rf_call_log_free(&log);
}

/* ---- 2. ReFusion: shapes rebuilt from events ---------------------------------------- */
typedef struct {
    int R, n, ctx_main, ctx_rows, forked;
} shape;

typedef struct {
    int S, P, n_slots;
    int *first;          /* block layout */
    unsigned char *gone; /* [n_slots] committed or dropped */
    int committed;       /* answer tokens committed so far */
    int cur_step, a, R;  /* infill state of the current step */
    shape *want;
    int n_want, cap_want;
    int n_infill_calls, max_rows, drops, bad;
} rebuild;

static void want(rebuild *b, int R, int n, int ctx_rows, int forked) {
    if (b->n_want == b->cap_want) {
        b->cap_want = b->cap_want ? 2 * b->cap_want : 64;
        b->want = realloc(b->want, (size_t)b->cap_want * sizeof *b->want);
    }
    shape s = {R, n, b->P + b->committed, ctx_rows, forked};
    b->want[b->n_want++] = s;
}

static void on_event(const rf_event *ev, void *user) {
    rebuild *b = user;
    const int S = b->S;
    switch (ev->kind) {
    case RF_EVENT_PLAN: {
        /* the plan call (already made) fed every masked slot of this step's
         * block; the block is the one holding the planned slots */
        int blk = 0, slot = ev->apos[0] / S;
        while (b->first[blk + 1] <= slot) blk++;
        int n_rem = 0;
        for (int s = b->first[blk]; s < b->first[blk + 1]; s++) n_rem += !b->gone[s];
        want(b, 1, n_rem * S, 0, 0);
        want(b, 1, ev->n, 0, 0); /* verification of the chosen slots */
        b->cur_step = ev->step, b->a = 0, b->R = ev->n / S;
        break;
    }
    case RF_EVENT_INFILL_ITER: {
        /* this iteration: draft + verify over the rows it started with */
        want(b, b->R, S - b->a, b->R * b->a, 1);
        want(b, b->R, S - b->a, b->R * b->a, 1);
        b->n_infill_calls += 2;
        if (b->R > b->max_rows) b->max_rows = b->R;
        int R = ev->n / S, mn = S, any0 = 0;
        for (int r = 0; r < R; r++) {
            int c = 0;
            for (int j = b->a; j < S; j++) c += ev->accepted[r * S + j], any0 |= !ev->accepted[r * S + j];
            if (c < mn) mn = c;
        }
        b->a += any0 ? mn - 1 : mn;
        b->R = R;
        break;
    }
    case RF_EVENT_FAST_COMMIT:
    case RF_EVENT_INFILL_COMMIT:
        for (int i = 0; i < ev->n; i++) b->gone[ev->apos[i] / S] = 1;
        b->committed += ev->n;
        break;
    case RF_EVENT_DROP:
        for (int i = 0; i < ev->n; i++) b->gone[ev->apos[i] / S] = 1;
        b->drops++;
        break;
    default: break;
    }
}

typedef struct {
    int runs, infill_calls, multi_row, drops;
} coverage;

static void check_refusion(const rf_model *m, const int *prompt, int P, rf_params *p, coverage *cov,
                           const char *what) {
    const int S = p->slot_size, G = (p->gen_length + S - 1) / S * S, n_slots = G / S;
    rebuild b;
    memset(&b, 0, sizeof b);
    b.S = S, b.P = P, b.n_slots = n_slots;
    b.first = malloc((size_t)(n_slots + 1) * sizeof(int));
    b.gone = calloc((size_t)n_slots, 1);
    rf_block_layout(n_slots, p->n_blocks, b.first);
    p->on_event = on_event, p->user = &b;
    rf_call_log log = {0};
    rf_call_log_attach(&log);
    rf_gen_result r;
    int rc = rf_generate_refusion(m, prompt, P, p, &r);
    rf_call_log_attach(NULL);
    p->on_event = NULL, p->user = NULL;
    CHECK(rc == 0, "%s: %s", what, rf_last_error());
    if (rc) return;
    int calls = rf_call_log_model_calls(&log, 0, log.n, P, 0);
    CHECK(calls == r.n_calls, "%s: log has %d model calls, decoder %d", what, calls, r.n_calls);
    /* the prompt prefill, then the rebuilt calls one by one */
    int k = 0, prompt_fed = 0;
    while (k < log.n && !log.rec[k].forked && log.rec[k].pos_max < P) prompt_fed += log.rec[k++].n_tok;
    CHECK(prompt_fed == P, "%s: prefill fed %d of %d prompt tokens", what, prompt_fed, P);
    CHECK(log.n - k == b.n_want, "%s: %d calls after the prefill, rebuilt %d", what, log.n - k, b.n_want);
    long want_fed = P;
    for (int i = 0; i < b.n_want; i++) want_fed += (long)b.want[i].R * b.want[i].n;
    CHECK(fed(&log) == want_fed, "%s: %ld tokens fed, rebuilt %ld", what, fed(&log), want_fed);
    for (int i = 0; i < b.n_want && k + i < log.n; i++) {
        const rf_call_rec *c = &log.rec[k + i];
        const shape *w = &b.want[i];
        int same = c->n_rows == w->R && c->n_tok == w->n && c->ctx_main == w->ctx_main && c->forked == w->forked &&
                   (!w->forked || c->ctx_rows == w->ctx_rows);
        CHECK(same, "%s: call %d is %dx%d ctx %d+%d forked %d, rebuilt %dx%d ctx %d+%d forked %d", what, i,
              c->n_rows, c->n_tok, c->ctx_main, c->ctx_rows, c->forked, w->R, w->n, w->ctx_main, w->ctx_rows,
              w->forked);
        if (!same) break;
    }
    cov->runs++;
    cov->infill_calls += b.n_infill_calls;
    cov->multi_row += b.max_rows > 1;
    cov->drops += b.drops > 0;
    rf_gen_result_free(&r);
    rf_call_log_free(&log);
    free(b.first), free(b.gone), free(b.want);
}

/* ---- 3. AR-verified switches, MDM: counts -------------------------------------------- */
static void check_counts(const rf_model *m, const int *prompt, int P, rf_params *p, int mdm, const char *what) {
    rf_call_log log = {0};
    rf_call_log_attach(&log);
    rf_gen_result r;
    rf_mdm_params mp;
    rf_mdm_params_default(&mp, p);
    int rc = mdm ? rf_generate_mdm(m, prompt, P, p, &mp, &r) : rf_generate_refusion(m, prompt, P, p, &r);
    rf_call_log_attach(NULL);
    CHECK(rc == 0, "%s: %s", what, rf_last_error());
    if (rc) return;
    int calls = rf_call_log_model_calls(&log, 0, log.n, P, 0);
    CHECK(calls == r.n_calls, "%s: log has %d model calls, decoder %d", what, calls, r.n_calls);
    if (mdm)
        for (int i = 0; i < log.n; i++)
            CHECK(log.rec[i].n_tok == P + p->gen_length && log.rec[i].bidirectional && log.rec[i].ctx_main == 0,
                  "%s: call %d is %d tokens, bidirectional %d, ctx %d", what, i, log.rec[i].n_tok,
                  log.rec[i].bidirectional, log.rec[i].ctx_main);
    rf_gen_result_free(&r);
    rf_call_log_free(&log);
}

/* ---- 5. cancel -------------------------------------------------------------------- */
typedef struct {
    volatile int flag;
    int after;      /* raise on this callback */
    int seen;
    int log_at;     /* log entries when raised */
    rf_call_log *log;
} canceller;
static void cancel_on_tokens(const int *ids, int n, void *user) {
    (void)ids, (void)n;
    canceller *c = user;
    if (++c->seen == c->after) c->flag = 1, c->log_at = c->log->n;
}
static void check_cancel(const rf_model *m, const int *prompt, int P, rf_params *p, int dec, int after,
                         const char *what) {
    rf_call_log log = {0};
    canceller c = {0, after, 0, -1, &log};
    p->cancel = &c.flag;
    p->on_tokens = cancel_on_tokens, p->user = &c;
    rf_gen_result r;
    rf_mdm_params mp;
    rf_mdm_params_default(&mp, p);
    rf_call_log_attach(&log);
    int rc = dec == 2 ? rf_generate_mdm(m, prompt, P, p, &mp, &r)
             : dec == 1 ? rf_generate_ar(m, prompt, P, p, &r)
                        : rf_generate_refusion(m, prompt, P, p, &r);
    rf_call_log_attach(NULL);
    if (after > 0) {
        CHECK(c.log_at >= 0, "%s: the callback never raised the flag (%d calls)", what, c.seen);
        CHECK(rc == -1 && strstr(rf_last_error(), "cancelled"), "%s: rc %d, error '%s'", what, rc,
              rc ? rf_last_error() : "");
        CHECK(log.n == c.log_at, "%s: %d forward calls after the cancel", what, log.n - c.log_at);
    } else {
        CHECK(rc == 0 && r.n_ids > 0, "%s: an unraised flag stopped the decoder", what);
    }
    if (rc == 0) rf_gen_result_free(&r);
    rf_call_log_free(&log);
    p->cancel = NULL, p->on_tokens = NULL, p->user = NULL;
}

int main(void) {
    omp_set_num_threads(1); /* a tiny model: threads only add overhead on a busy machine */
    rf_config c = cfg_small();
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.7f, 3);
    int prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = (i * 37 + 11) % 250;

    /* 1. AR: short prompt, long prompt (prefilled in chunks), with and without EOS */
    check_ar(&m, prompt, 5, 20, -1);
    check_ar(&m, prompt, 300, 12, -1);
    check_ar(&m, prompt, 7, 40, 3);

    /* 2. ReFusion */
    struct {
        int gen, slot, blocks;
        float st, tt;
    } cfgs[] = {{32, 4, 2, 0.6f, 0.3f}, {30, 4, 3, 0.5f, 0.2f}, {24, 8, 1, 0.3f, 0.5f}, {20, 3, 2, 0.7f, 0.1f},
                {16, 2, 4, 0.2f, 0.6f}, {12, 1, 3, 0.5f, 0.5f}, {40, 8, 3, 0.9f, 0.4f}, {24, 6, 5, 0.1f, 0.9f}};
    coverage cov = {0};
    char what[96];
    for (int ci = 0; ci < 8; ci++)
        for (int e = 0; e < 2; e++) {
            rf_params p;
            rf_gen_params_default(&p);
            p.gen_length = cfgs[ci].gen, p.slot_size = cfgs[ci].slot, p.n_blocks = cfgs[ci].blocks;
            p.slot_threshold = cfgs[ci].st, p.token_threshold = cfgs[ci].tt;
            int P = ci == 2 ? 260 : 4 + ci; /* 260: prefilled in two chunks */
            p.eos_id = e ? favourite_token(&m, prompt, P) : -1;
            snprintf(what, sizeof what, "refusion cfg%d eos=%d P=%d", ci, p.eos_id, P);
            check_refusion(&m, prompt, P, &p, &cov, what);
            p.ar_correct = 1;
            snprintf(what, sizeof what, "ar_correct cfg%d eos=%d", ci, p.eos_id);
            check_counts(&m, prompt, P, &p, 0, what);
            p.ar_check_first = 1;
            snprintf(what, sizeof what, "ar_correct+check_first cfg%d eos=%d", ci, p.eos_id);
            check_counts(&m, prompt, P, &p, 0, what);
            p.lookahead = 1;
            snprintf(what, sizeof what, "verified+lookahead cfg%d eos=%d", ci, p.eos_id);
            check_counts(&m, prompt, P, &p, 0, what);
            p.jacobi = 1;
            snprintf(what, sizeof what, "verified+lookahead+jacobi cfg%d eos=%d", ci, p.eos_id);
            check_counts(&m, prompt, P, &p, 0, what);
            p.lookahead = p.jacobi = 0;
        }
    printf("refusion: %d runs, %d infill calls, %d runs with multi-row calls, %d with drops\n", cov.runs,
           cov.infill_calls, cov.multi_row, cov.drops);
    CHECK(cov.infill_calls > 0 && cov.multi_row > 0 && cov.drops > 0,
          "the runs never infilled with several rows or never dropped slots after an EOS");

    /* 3. MDM */
    rf_params p;
    rf_gen_params_default(&p);
    p.gen_length = 16, p.n_blocks = 2, p.eos_id = -1;
    check_counts(&m, prompt, 6, &p, 1, "mdm");

    /* 4. detached: nothing recorded */
    rf_call_log log = {0};
    rf_call_log_attach(&log);
    rf_call_log_attach(NULL);
    rf_gen_result r;
    p.gen_length = 8, p.slot_size = 4;
    if (rf_generate_refusion(&m, prompt, 5, &p, &r) == 0) rf_gen_result_free(&r);
    CHECK(log.n == 0, "a detached log recorded %d calls", log.n);

    /* 5. cancel */
    rf_gen_params_default(&p);
    p.gen_length = 32, p.slot_size = 4, p.n_blocks = 4, p.eos_id = -1;
    check_cancel(&m, prompt, 6, &p, 0, 1, "refusion cancel after the first tokens");
    check_cancel(&m, prompt, 6, &p, 0, 0, "refusion, flag never raised");
    p.ar_correct = p.ar_check_first = 1;
    check_cancel(&m, prompt, 6, &p, 0, 2, "ar-verified cancel");
    check_cancel(&m, prompt, 6, &p, 1, 3, "ar cancel after 3 tokens");
    check_cancel(&m, prompt, 6, &p, 1, 0, "ar, flag never raised");
    p.n_blocks = 2;
    check_cancel(&m, prompt, 6, &p, 2, 1, "mdm cancel after the first block");
    rf_model_free(&m);
    return check_summary("decode_calllog");
}
