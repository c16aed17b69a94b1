/* decode_refusion.c - ReFusion decoding: the cached decoder against its naive
 * twin, and the invariants of the algorithm.
 *
 *  1. the twin's masked reference forward equals rf_forward_reference when
 *     every token sees everything before it, and equals the cached forward
 *     for rows forked, committed back to main and attended to afterwards;
 *  2. fast vs naive (greedy, and Gumbel sampling with a seed): identical
 *     answer ids, call counts and per-step statistics on several random
 *     models, prompts, slot sizes, thresholds and block counts; the runs must
 *     have exercised the fast path, infilling, multi-slot plans, several
 *     infill iterations and an EOS (the EOS id is set to a token the model
 *     likes), otherwise they would prove little;
 *  3. invariants of every answer: no mask token, every position filled once
 *     (contiguous answer up to its end or its first EOS), EOS last, padded
 *     gen_length, blocks that do not divide the slots, streaming callback =
 *     answer, events consistent with the statistics;
 *  4. bad input is rejected with one message: prompt longer than the
 *     context, slot_size 0, thresholds outside [0, 1], unknown token id. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "helpers/favourite_token.h"
#include "helpers/small_config.h"
#include "decode/decode.h"
#include "model/forward.h"

#define V 512
#define MASK 511

static rf_config cfg_small(int hd, int tied, int max_pos) {
    rf_config c = rf_test_config(64, 128, 4, 2, hd, V, max_pos);
    c.tie_embeddings = tied;
    c.eos_id = 510, c.mask_id = MASK, c.bot_id = 509;
    return c;
}

/* ---- 1. the twin's forward ------------------------------------------------------ */
static void test_masked_forward(const rf_model *m) {
    int n = 12, tok[16], pos[16], ve[16] = {0}, gr[16] = {0};
    for (int i = 0; i < n; i++) tok[i] = (i * 37 + 5) % V, pos[i] = (i * 7) % 13;
    float *a = rf_malloc((size_t)n * V * 4), *b = rf_malloc((size_t)n * V * 4);
    CHECK(rf_forward_reference(m, n, tok, pos, 0, a) == 0, "reference: %s", rf_last_error());
    CHECK(rf_forward_masked_reference(m, n, tok, pos, ve, gr, n, b) == 0, "masked: %s", rf_last_error());
    double e = check_rel_err(b, a, (size_t)n * V);
    CHECK(e < 1e-6, "masked reference (causal) vs rf_forward_reference: rel err %.3g", e);

    /* cache: main = 4 tokens; fork 2 rows of 3; commit row 1 then row 0 to
     * main; unfork; feed 2 more tokens. The masked reference sees the same
     * physical sequence with row entries restricted to main[0,4) + own row. */
    rf_kvcache c;
    rf_kv_init(&c, &m->cfg, 32);
    rf_runstate *s = rf_runstate_new(&m->cfg, 16, 40);
    int P = 4, idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    rf_batch b0 = {1, P, tok, pos, 0, 0, idx, NULL};
    CHECK(rf_forward(m, &c, s, &b0) == 0, "prefill: %s", rf_last_error());
    rf_kv_fork(&c, 2, 4);
    int rt[6] = {tok[4], tok[5], tok[6], tok[7], tok[8], tok[9]}, rp[6] = {20, 21, 22, 30, 31, 32};
    rf_batch b1 = {2, 3, rt, rp, 0, 0, idx, NULL};
    CHECK(rf_forward(m, &c, s, &b1) == 0, "rows: %s", rf_last_error());
    CHECK(rf_kv_commit_row(&c, 1, 0, 3) == 0 && rf_kv_commit_row(&c, 0, 0, 3) == 0, "commit");
    rf_kv_unfork(&c);
    int nt[2] = {tok[10], tok[11]}, np[2] = {40, 41};
    float *lf = rf_malloc(2 * V * 4);
    rf_batch b2 = {1, 2, nt, np, 0, 2, idx, lf};
    CHECK(rf_forward(m, &c, s, &b2) == 0, "after commit: %s", rf_last_error());
    /* physical: prompt(4), row1(3), row0(3), new(2) */
    int st[12], sp[12], sv[12] = {0}, sg[12] = {0};
    for (int i = 0; i < P; i++) st[i] = tok[i], sp[i] = pos[i];
    for (int j = 0; j < 3; j++) {
        st[4 + j] = rt[3 + j], sp[4 + j] = rp[3 + j], sv[4 + j] = P, sg[4 + j] = 4;
        st[7 + j] = rt[j], sp[7 + j] = rp[j], sv[7 + j] = P, sg[7 + j] = 7;
    }
    st[10] = nt[0], sp[10] = np[0], st[11] = nt[1], sp[11] = np[1];
    float *lr = rf_malloc(2 * V * 4);
    CHECK(rf_forward_masked_reference(m, 12, st, sp, sv, sg, 2, lr) == 0, "masked: %s", rf_last_error());
    e = check_rel_err(lf, lr, 2 * V);
    CHECK(e < 2e-4, "cache with committed rows vs masked reference: rel err %.3g", e);
    /* and the rule matters: plain causal over the same sequence differs */
    memset(sv, 0, sizeof sv), memset(sg, 0, sizeof sg);
    CHECK(rf_forward_masked_reference(m, 12, st, sp, sv, sg, 2, lr) == 0, "masked: %s", rf_last_error());
    e = check_rel_err(lf, lr, 2 * V);
    CHECK(e > 1e-3, "row visibility made no difference (rel err %.3g)", e);
    free(a), free(b), free(lf), free(lr);
    rf_runstate_free(s);
    rf_kv_free(&c);
}

/* ---- 3. invariants ----------------------------------------------------------------- */
typedef struct {
    int ids[1024], n;
    int n_plan, n_fast, n_infill_commit, n_iter, n_drop;
    int fast_tokens, infill_tokens;
    int fills[1024]; /* commits per answer position, from the events */
    int eos;         /* the resolved EOS id (-1: none) */
    int late;        /* events seen while a filled prefix had not been streamed */
} trace;

static void on_tokens(const int *ids, int n, void *user) {
    trace *t = user;
    for (int i = 0; i < n && t->n < 1024; i++) t->ids[t->n++] = ids[i];
}
static void on_event(const rf_event *ev, void *user) {
    trace *t = user;
    /* streaming releases a token as soon as every position before it is
     * filled: by the next event, the filled prefix has been streamed (up to
     * an EOS, after which nothing is) */
    int prefix = 0;
    while (prefix < 1024 && t->fills[prefix] > 0) prefix++;
    if (t->n < prefix && !(t->n > 0 && t->ids[t->n - 1] == t->eos)) t->late++;
    switch (ev->kind) {
    case RF_EVENT_PLAN: t->n_plan++; break;
    case RF_EVENT_FAST_COMMIT: t->n_fast++, t->fast_tokens += ev->n; break;
    case RF_EVENT_INFILL_COMMIT: t->n_infill_commit++, t->infill_tokens += ev->n; break;
    case RF_EVENT_INFILL_ITER: t->n_iter++; break;
    case RF_EVENT_DROP: t->n_drop++; break;
    default: break;
    }
    if (ev->kind == RF_EVENT_FAST_COMMIT || ev->kind == RF_EVENT_INFILL_COMMIT)
        for (int i = 0; i < ev->n; i++) t->fills[ev->apos[i]]++;
}

typedef struct {
    int runs, fast_steps, infill_steps, multi_plan, multi_iter, eos, drop;
    int checked, replaced, forced_ar, refeeds; /* AR-verified paths */
} coverage;

static int cov_skipped;       /* plan calls saved by lookahead, over all checked runs */
static int last_infill_iters; /* infilling iterations of the last compare() */
static int cov_jacobi_iters;  /* ... summed over the jacobi runs */

static void check_answer(const rf_gen_result *r, const rf_params *p, int eos, const trace *t,
                         const char *what) {
    int G = (p->gen_length + p->slot_size - 1) / p->slot_size * p->slot_size;
    /* the mask head never drafts <|mask|> here; the AR head of a random model
     * may choose any id, as greedy AR decoding may */
    for (int i = 0; i < r->n_ids && !p->ar_correct && !p->ar_check_first; i++)
        CHECK(r->ids[i] != MASK, "%s: mask token in the answer at %d", what, i);
    for (int i = 0; i + 1 < r->n_ids; i++) CHECK(r->ids[i] != eos, "%s: EOS at %d before the end", what, i);
    if (r->hit_eos)
        CHECK(r->n_ids >= 1 && r->ids[r->n_ids - 1] == eos, "%s: hit_eos but no EOS last", what);
    else
        CHECK(r->n_ids == G, "%s: %d answer tokens, expected all %d", what, r->n_ids, G);
    int tok = 0, calls = 0;
    for (int s = 0; s < r->n_steps; s++) {
        const rf_step *st = &r->steps[s];
        tok += st->tokens, calls += st->calls;
        CHECK(st->slots_planned >= 1, "%s: step %d planned no slot", what, s);
        CHECK((st->slots_fast > 0) != (st->slots_infilled > 0), "%s: step %d fast %d infilled %d", what, s,
              st->slots_fast, st->slots_infilled);
        /* the plan call is skipped (lookahead) only after a step that committed every slot it chose */
        int plan_calls = st->calls - 1 - (p->jacobi ? 1 : 2) * st->infill_iters - st->refeeds;
        int may_skip = p->lookahead && s > 0 && r->steps[s - 1].slots_fast == r->steps[s - 1].slots_planned;
        CHECK(plan_calls == 1 || (plan_calls == 0 && may_skip), "%s: step %d: %d calls, %d iterations", what, s,
              st->calls, st->infill_iters);
        if (p->lookahead) cov_skipped += plan_calls == 0;
        CHECK(st->refeeds == 0 || (p->ar_correct && st->refeeds == 1 && st->infill_iters > 0),
              "%s: step %d: %d re-feeds", what, s, st->refeeds);
        CHECK(st->infill_iters <= p->slot_size - 1, "%s: step %d: %d iterations", what, s, st->infill_iters);
    }
    CHECK(calls == r->n_calls, "%s: steps count %d calls, result %d", what, calls, r->n_calls);
    const rf_accept_stats *a = &r->accept;
    int n_acc = a->first_free + a->first_checked + a->first_replaced + a->verified + a->forced_draft + a->forced_ar;
    CHECK(n_acc == tok, "%s: acceptance statistics count %d tokens, steps %d", what, n_acc, tok);
    CHECK(p->ar_check_first || (a->first_checked == 0 && a->first_replaced == 0), "%s: (b) off but first tokens checked",
          what);
    CHECK(p->ar_correct ? a->forced_draft == 0 : a->forced_ar == 0, "%s: forced tokens of the wrong kind", what);
    CHECK(tok >= r->n_ids, "%s: steps committed %d tokens, answer has %d", what, tok, r->n_ids);
    if (t) {
        CHECK(t->n == r->n_ids && !memcmp(t->ids, r->ids, t->n * sizeof(int)), "%s: streamed %d tokens != answer",
              what, t->n);
        CHECK(t->n_plan == r->n_steps, "%s: %d plan events, %d steps", what, t->n_plan, r->n_steps);
        CHECK(t->fast_tokens + t->infill_tokens == tok, "%s: events committed %d, stats %d", what,
              t->fast_tokens + t->infill_tokens, tok);
        int twice = 0, unfilled = 0;
        for (int i = 0; i < G; i++) twice += t->fills[i] > 1;
        for (int i = 0; i < r->n_ids; i++) unfilled += t->fills[i] != 1;
        CHECK(!twice && !unfilled, "%s: %d positions committed twice, %d answer positions not exactly once", what,
              twice, unfilled);
    }
    if (r->hit_eos && r->n_steps > 0) { /* generation stopped after the EOS's block */
        int first[1024], nb = rf_block_layout(G / p->slot_size, p->n_blocks, first), b = 0;
        int eos_slot = (r->n_ids - 1) / p->slot_size;
        while (b + 1 < nb && first[b + 1] <= eos_slot) b++;
        CHECK(r->steps[r->n_steps - 1].block <= b, "%s: steps in block %d after an EOS in block %d", what,
              r->steps[r->n_steps - 1].block, b);
    }
}

/* ---- 2. fast vs naive ------------------------------------------------------------ */
static void compare(const rf_model *m, const int *prompt, int P, rf_params *p, coverage *cov,
                    const char *what) {
    trace t;
    memset(&t, 0, sizeof t);
    t.eos = p->eos_id == RF_TOKEN_FROM_MODEL ? m->cfg.eos_id : p->eos_id;
    p->on_tokens = on_tokens, p->on_event = on_event, p->user = &t;
    rf_gen_result f, z;
    int rf = rf_generate_refusion(m, prompt, P, p, &f);
    CHECK(rf == 0, "%s: fast: %s", what, rf_last_error());
    p->on_tokens = NULL, p->on_event = NULL;
    int rz = rf_generate_refusion_naive(m, prompt, P, p, &z);
    CHECK(rz == 0, "%s: naive: %s", what, rf_last_error());
    if (rf || rz) return;
    int eos = p->eos_id == RF_TOKEN_FROM_MODEL ? m->cfg.eos_id : p->eos_id;
    CHECK(t.late == 0, "%s: %d events came while final tokens were held back from on_tokens", what, t.late);
    check_answer(&f, p, eos, &t, what);
    check_answer(&z, p, eos, NULL, what);
    int same = f.n_ids == z.n_ids && !memcmp(f.ids, z.ids, f.n_ids * sizeof(int));
    CHECK(same, "%s: fast and naive answers differ (%d vs %d tokens)", what, f.n_ids, z.n_ids);
    CHECK(f.n_calls == z.n_calls, "%s: calls fast %d naive %d", what, f.n_calls, z.n_calls);
    CHECK(f.n_steps == z.n_steps, "%s: steps fast %d naive %d", what, f.n_steps, z.n_steps);
    for (int s = 0; s < f.n_steps && s < z.n_steps; s++) {
        rf_step a = f.steps[s], b = z.steps[s];
        CHECK(!memcmp(&a, &b, sizeof a), "%s: step %d stats differ", what, s);
    }
    CHECK(f.tpf == z.tpf, "%s: TPF fast %g naive %g", what, f.tpf, z.tpf);
    CHECK(!memcmp(&f.accept, &z.accept, sizeof f.accept), "%s: acceptance statistics differ", what);
    cov->runs++;
    cov->replaced += f.accept.first_replaced, cov->checked += f.accept.first_checked;
    cov->forced_ar += f.accept.forced_ar;
    for (int s = 0; s < f.n_steps; s++) cov->refeeds += f.steps[s].refeeds;
    for (int s = 0; s < f.n_steps; s++) {
        cov->fast_steps += f.steps[s].slots_fast > 0;
        cov->infill_steps += f.steps[s].infill_iters > 0;
        cov->multi_plan += f.steps[s].slots_planned > 1;
        cov->multi_iter += f.steps[s].infill_iters > 1;
    }
    cov->eos += f.hit_eos;
    last_infill_iters = 0;
    for (int s = 0; s < f.n_steps; s++) last_infill_iters += f.steps[s].infill_iters;
    cov->drop += t.n_drop > 0;
    if (getenv("DECODE_VERBOSE"))
        printf("%-28s n=%3d eos=%d calls=%3d steps=%3d tpf=%.2f tok/call=%.2f\n", what, f.n_ids, f.hit_eos,
               f.n_calls, f.n_steps, f.tpf, f.tokens_per_call);
    rf_gen_result_free(&f);
    rf_gen_result_free(&z);
}

/* Lookahead only removes plan calls: the answer, the acceptance statistics
 * and every step's slots must be those of the same run without it. */
static int la_saved, la_cross_block, la_partial;
static void same_as_without_lookahead(const rf_model *m, const int *prompt, int P, rf_params *p,
                                      const char *what) {
    rf_gen_result with, without;
    p->lookahead = 1;
    int r1 = rf_generate_refusion(m, prompt, P, p, &with);
    p->lookahead = 0;
    int r0 = rf_generate_refusion(m, prompt, P, p, &without);
    p->lookahead = 1;
    CHECK(r0 == 0 && r1 == 0, "%s: %s", what, rf_last_error());
    if (r0 || r1) return;
    int same = with.n_ids == without.n_ids && !memcmp(with.ids, without.ids, (size_t)with.n_ids * sizeof(int));
    CHECK(same, "%s: lookahead changed the answer (%d vs %d tokens)", what, with.n_ids, without.n_ids);
    CHECK(!memcmp(&with.accept, &without.accept, sizeof with.accept), "%s: lookahead changed the acceptance", what);
    CHECK(with.n_steps == without.n_steps, "%s: steps %d vs %d", what, with.n_steps, without.n_steps);
    int skipped = 0;
    for (int s = 0; s + 1 < with.n_steps; s++) /* a fast path that left chosen slots masked: no lookahead */
        la_partial += with.steps[s].slots_fast > 0 && with.steps[s].slots_fast < with.steps[s].slots_planned;
    for (int s = 0; s < with.n_steps && s < without.n_steps; s++) {
        rf_step a = with.steps[s], b = without.steps[s];
        int d = b.calls - a.calls;
        CHECK(d == 0 || d == 1, "%s: step %d: %d calls with lookahead, %d without", what, s, a.calls, b.calls);
        skipped += d;
        if (d && s > 0 && with.steps[s - 1].block != a.block) la_cross_block++;
        a.calls = b.calls;
        CHECK(!memcmp(&a, &b, sizeof a), "%s: step %d differs beyond its call count", what, s);
    }
    CHECK(with.n_calls == without.n_calls - skipped, "%s: calls %d vs %d", what, with.n_calls, without.n_calls);
    la_saved += skipped;
    rf_gen_result_free(&with), rf_gen_result_free(&without);
}

static void test_fast_vs_naive(void) {
    coverage cov = {0};
    struct {
        int hd, tied;
        float std;
        uint64_t seed;
    } models[] = {{16, 1, 0.5f, 1}, {24, 0, 0.8f, 2}, {16, 0, 1.0f, 3}};
    struct {
        int gen, slot, blocks;
        float st, tt;
    } cfgs[] = {
        {32, 4, 2, 0.6f, 0.3f}, {30, 4, 3, 0.5f, 0.2f}, {24, 8, 1, 0.3f, 0.5f},
        {20, 3, 2, 0.7f, 0.1f}, {16, 2, 4, 0.2f, 0.6f}, {12, 1, 3, 0.5f, 0.5f},
        {40, 8, 3, 0.9f, 0.4f}, {24, 6, 5, 0.1f, 0.9f},
    };
    int prompts[3][12] = {{3, 17, 42, 99, 7}, {200, 201, 202, 203, 204, 205, 206, 207, 1, 2, 3, 4}, {77}};
    int plen[3] = {5, 12, 1};
    char what[96];
    for (int mi = 0; mi < 3; mi++) {
        rf_config c = cfg_small(models[mi].hd, models[mi].tied, 256);
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, models[mi].std, models[mi].seed);
        if (mi == 0) test_masked_forward(&m);
        for (int ci = 0; ci < 8; ci++) {
            int pi = (mi + ci) % 3;
            rf_params p;
            rf_gen_params_default(&p);
            p.gen_length = cfgs[ci].gen, p.slot_size = cfgs[ci].slot, p.n_blocks = cfgs[ci].blocks;
            p.slot_threshold = cfgs[ci].st, p.token_threshold = cfgs[ci].tt;
            snprintf(what, sizeof what, "m%d cfg%d greedy", mi, ci);
            compare(&m, prompts[pi], plen[pi], &p, &cov, what);
            /* with an EOS the model actually produces */
            p.eos_id = favourite_token(&m, prompts[pi], plen[pi]);
            snprintf(what, sizeof what, "m%d cfg%d eos=%d", mi, ci, p.eos_id);
            compare(&m, prompts[pi], plen[pi], &p, &cov, what);
            /* AR-verified: each switch and both (docs/refusion.md §4) */
            for (int mode = 1; mode < 4; mode++) {
                p.ar_correct = mode & 1, p.ar_check_first = mode >> 1;
                snprintf(what, sizeof what, "m%d cfg%d eos=%d a=%d b=%d", mi, ci, p.eos_id, mode & 1, mode >> 1);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
            }
            /* lookahead (docs/refusion.md §4): faithful and AR-verified; the same
             * answer as without it, with no more calls */
            for (int mode = 0; mode < 4; mode += 3) {
                p.ar_correct = p.ar_check_first = mode == 3;
                p.lookahead = 1;
                snprintf(what, sizeof what, "m%d cfg%d eos=%d lookahead mode %d", mi, ci, p.eos_id, mode);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                same_as_without_lookahead(&m, prompts[pi], plen[pi], &p, what);
                /* jacobi (docs/refusion.md §4): infilling without re-drafts, with and without
                 * lookahead; it needs (a), whose forced tokens are the AR head's */
                p.jacobi = 1;
                if (mode == 0) {
                    rf_gen_result r;
                    CHECK(rf_generate_refusion(&m, prompts[pi], plen[pi], &p, &r) == -1 &&
                              strstr(rf_last_error(), "jacobi"), "%s: jacobi without (a) accepted", what);
                    p.jacobi = p.lookahead = 0;
                    continue;
                }
                snprintf(what, sizeof what, "m%d cfg%d eos=%d jacobi+lookahead mode %d", mi, ci, p.eos_id, mode);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                same_as_without_lookahead(&m, prompts[pi], plen[pi], &p, what);
                p.lookahead = 0;
                snprintf(what, sizeof what, "m%d cfg%d eos=%d jacobi mode %d", mi, ci, p.eos_id, mode);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                cov_jacobi_iters += last_infill_iters;
                p.jacobi = 0;
            }
            p.ar_correct = p.ar_check_first = 0;
            for (int ti = 0; ti < 4; ti++) { /* every slot chosen, low token thresholds: partial fast paths */
                rf_params q = p;
                q.slot_size = 2 + ci % 2, q.n_blocks = 2 + ci % 3, q.gen_length = 24, q.slot_threshold = 0.0f;
                q.token_threshold = 0.02f + 0.04f * ti, q.lookahead = 1;
                snprintf(what, sizeof what, "m%d cfg%d all slots thr %.2f lookahead", mi, ci, q.token_threshold);
                compare(&m, prompts[pi], plen[pi], &q, &cov, what);
                same_as_without_lookahead(&m, prompts[pi], plen[pi], &q, what);
            }
            if (ci % 3 == 0) { /* Gumbel sampling: same seed, same answer */
                p.temperature = 0.8f, p.seed = 100 + ci, p.eos_id = RF_TOKEN_FROM_MODEL;
                snprintf(what, sizeof what, "m%d cfg%d T=0.8", mi, ci);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                p.ar_correct = p.ar_check_first = 1;
                snprintf(what, sizeof what, "m%d cfg%d T=0.8 a=1 b=1", mi, ci);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                p.lookahead = 1;
                snprintf(what, sizeof what, "m%d cfg%d T=0.8 a=1 b=1 lookahead", mi, ci);
                compare(&m, prompts[pi], plen[pi], &p, &cov, what);
                same_as_without_lookahead(&m, prompts[pi], plen[pi], &p, what);
                p.ar_correct = p.ar_check_first = p.lookahead = 0;
            }
        }
        rf_model_free(&m);
    }
    printf("coverage: %d runs, %d fast-path steps, %d infill steps, %d multi-slot plans, %d multi-iteration "
           "infills, %d EOS answers, %d with drops\n",
           cov.runs, cov.fast_steps, cov.infill_steps, cov.multi_plan, cov.multi_iter, cov.eos, cov.drop);
    CHECK(cov.fast_steps > 0 && cov.infill_steps > 0 && cov.multi_plan > 0 && cov.multi_iter > 0 && cov.eos > 0 &&
              cov.drop > 0,
          "the runs did not exercise every path");
    printf("AR-verified coverage: %d first tokens checked, %d replaced, %d forced AR tokens, %d re-feeds\n",
           cov.checked, cov.replaced, cov.forced_ar, cov.refeeds);
    CHECK(cov.checked > 0 && cov.replaced > 0 && cov.forced_ar > 0 && cov.refeeds > 0,
          "the AR-verified runs did not exercise every path");
    printf("lookahead: %d plan calls skipped, %d of them across a block boundary, %d calls saved in all, %d partial "
           "fast paths\n", cov_skipped, la_cross_block, la_saved, la_partial);
    CHECK(cov_skipped > 0 && la_cross_block > 0, "lookahead never skipped a plan call (within and across blocks)");
    CHECK(la_partial > 0, "no lookahead run committed only some of its chosen slots");
    printf("jacobi: %d infilling iterations without re-drafts\n", cov_jacobi_iters);
    CHECK(cov_jacobi_iters > 0, "no jacobi run infilled");
}

/* ---- 3. AR-verified, strictly left to right == greedy AR ------------------------- */
/* With both switches, one slot per block and token_threshold >= 0.5 every
 * committed token is the AR argmax (a probability > 0.5 is the argmax's), so
 * the answer must equal greedy AR decoding token for token. */
static void test_verified_is_ar(void) {
    int runs = 0, differ_plain = 0;
    for (int mi = 0; mi < 3; mi++) {
        rf_config c = cfg_small(16, mi != 1, 256);
        rf_model m;
        rf_model_init_random(&m, &c, RF_F32, 0.5f + 0.25f * mi, 40 + mi);
        int prompt[6] = {5 + mi, 11, 23, 42, 7, 90};
        for (int slot = 1; slot <= 8; slot *= 2)
            for (int ti = 0; ti < 2; ti++) {
                rf_params p;
                rf_gen_params_default(&p);
                p.gen_length = 32, p.slot_size = slot, p.n_blocks = 32 / slot;
                p.token_threshold = ti ? 0.9f : 0.5f, p.slot_threshold = 0.6f;
                p.eos_id = mi == 2 ? favourite_token(&m, prompt, 6) : -1;
                rf_gen_result ar, rv, plain;
                CHECK(rf_generate_ar(&m, prompt, 6, &p, &ar) == 0, "ar: %s", rf_last_error());
                rf_generate_refusion(&m, prompt, 6, &p, &plain);
                p.ar_correct = p.ar_check_first = 1;
                CHECK(rf_generate_refusion(&m, prompt, 6, &p, &rv) == 0, "verified: %s", rf_last_error());
                int same = ar.n_ids == rv.n_ids && !memcmp(ar.ids, rv.ids, (size_t)ar.n_ids * sizeof(int));
                CHECK(same, "model %d slot %d thr %.1f: AR-verified (%d tokens) != greedy AR (%d tokens)", mi, slot,
                      p.token_threshold, rv.n_ids, ar.n_ids);
                rf_gen_result la;
                for (int v = 0; v < 2; v++) { /* lookahead, lookahead + jacobi */
                    p.lookahead = 1, p.jacobi = v;
                    CHECK(rf_generate_refusion(&m, prompt, 6, &p, &la) == 0, "lookahead: %s", rf_last_error());
                    p.lookahead = p.jacobi = 0;
                    same = ar.n_ids == la.n_ids && !memcmp(ar.ids, la.ids, (size_t)ar.n_ids * sizeof(int));
                    CHECK(same, "model %d slot %d thr %.1f: AR-verified with lookahead%s != greedy AR", mi, slot,
                          p.token_threshold, v ? " + jacobi" : "");
                    rf_gen_result_free(&la);
                }
                differ_plain += plain.n_ids != ar.n_ids || memcmp(plain.ids, ar.ids, (size_t)ar.n_ids * sizeof(int));
                runs++;
                rf_gen_result_free(&ar), rf_gen_result_free(&rv), rf_gen_result_free(&plain);
            }
        rf_model_free(&m);
    }
    printf("AR-verified == greedy AR on %d runs; the faithful decoder differs from AR on %d of them\n", runs,
           differ_plain);
    CHECK(differ_plain > 0, "the faithful decoder equals AR everywhere: the test cannot tell the modes apart");
}

/* ---- 4. bad input -------------------------------------------------------------- */
static void test_errors(void) {
    rf_config c = cfg_small(16, 1, 64);
    rf_model m;
    rf_model_init_random(&m, &c, RF_F32, 0.5f, 9);
    int prompt[80];
    for (int i = 0; i < 80; i++) prompt[i] = i;
    rf_params p;
    rf_gen_result r;
    rf_gen_params_default(&p);
    p.gen_length = 16;
#define EXPECT_FAIL(call, word)                                                                           \
    do {                                                                                                  \
        int rc_ = (call);                                                                                 \
        CHECK(rc_ != 0 && strstr(rf_last_error(), word), #call ": rc %d, error '%s' lacks '%s'", rc_, \
              rf_last_error(), word);                                                                     \
        if (rc_ == 0) rf_gen_result_free(&r);                                                             \
    } while (0)
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 70, &p, &r), "longer than the model's context");
    EXPECT_FAIL(rf_generate_ar(&m, prompt, 70, &p, &r), "longer than the model's context");
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 60, &p, &r), "exceed the model's context");
    p.slot_size = 0;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 4, &p, &r), "slot_size");
    EXPECT_FAIL(rf_generate_refusion_naive(&m, prompt, 4, &p, &r), "slot_size");
    p.slot_size = 4, p.slot_threshold = 1.5f;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 4, &p, &r), "slot_threshold");
    p.slot_threshold = 0.5f, p.token_threshold = -0.1f;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 4, &p, &r), "token_threshold");
    p.token_threshold = 0.5f;
    prompt[2] = V + 3;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 4, &p, &r), "outside the vocabulary");
    EXPECT_FAIL(rf_generate_ar(&m, prompt, 4, &p, &r), "outside the vocabulary");
    prompt[2] = 2;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 0, &p, &r), "empty");
    p.top_p = 0;
    EXPECT_FAIL(rf_generate_ar(&m, prompt, 4, &p, &r), "top_p");
    p.top_p = 1, p.n_blocks = 0;
    EXPECT_FAIL(rf_generate_refusion(&m, prompt, 4, &p, &r), "blocks");
    /* a valid call still works after all that */
    p.n_blocks = 3;
    CHECK(rf_generate_refusion(&m, prompt, 4, &p, &r) == 0 && r.n_ids == 16, "valid call: %s", rf_last_error());
    rf_gen_result_free(&r);
    rf_model_free(&m);
}

static void test_block_layout(void) {
    int first[16];
    int nb = rf_block_layout(10, 4, first);
    CHECK(nb == 4 && first[0] == 0 && first[1] == 2 && first[3] == 6 && first[4] == 10, "layout 10/4");
    nb = rf_block_layout(3, 8, first);
    CHECK(nb == 3 && first[1] == 1 && first[3] == 3, "layout 3/8");
    nb = rf_block_layout(8, 4, first);
    CHECK(nb == 4 && first[1] == 2 && first[2] == 4 && first[4] == 8, "layout 8/4 (the reference's)");
}

int main(void) {
    omp_set_num_threads(1); /* tiny models: threads only add spin-wait time on a busy machine */
    test_block_layout();
    test_errors();
    test_fast_vs_naive();
    test_verified_is_ar();
    return check_summary("decode_refusion");
}
