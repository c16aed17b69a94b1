/* refusion.c - ReFusion plan-and-infill decoding on the KV cache.
 *
 * What the reference (generate_refusion in the authors' generate.py) does,
 * step by step, in our words. S = slot_size, P = prompt length.
 *
 * Setup. gen_length is padded up to a multiple of S; answer position i has
 * position id P + i. The answer is cut into serial blocks decoded one after
 * the other (the reference: gen_length / n_blocks tokens each; see
 * rf_block_layout for what happens when that is not whole slots). State:
 * the committed sequence (prompt, then committed answer tokens in the order
 * they were committed) with its KV cache, and the still-masked slots of the
 * current block, kept in position order.
 *
 * A step, repeated while the block has masked slots:
 *
 * 1. Plan. Feed every masked slot of the block as <|mask|> tokens with their
 *    true position ids after the cache (the very first call feeds prompt and
 *    masks together; we prefill the prompt first and count the pair as one
 *    call - attention is causal, so the numbers are the same). Masks predict
 *    their own position. Draft x0 = argmax of the logits, or with temperature
 *    the Gumbel-max draw (float64); confidence = softmax probability of the
 *    drafted token under the plain logits. The cache is cropped back to the
 *    committed length. Slot score = confidence of the slot's first token;
 *    chosen = slots with score > slot_threshold (strictly), in position
 *    order, or, when none is, the single best slot (first on ties).
 *    Temperature only ever affects this draft: every later draft is argmax.
 *
 * 2. Global verification. Feed the chosen slots' drafts concatenated (true
 *    positions) after the cache. Token j >= 1 of a slot gets the probability
 *    of its draft under the logits of token j-1 (the AR, shifted reading);
 *    token 0 of every slot is accepted unconditionally. tag[k][j] = product
 *    over i <= j of (prob > token_threshold), per slot. prefix = longest
 *    prefix of the flattened concatenation whose tokens all pass (slot starts
 *    always pass), so it is >= 1.
 *    - If an EOS lies in that prefix: commit the chosen slots up to the one
 *      holding the first EOS, that slot truncated just after the EOS; the
 *      committed tokens are exactly a prefix of what was fed, so the cache of
 *      this very pass is kept by cropping it to the new committed length.
 *      Every slot of the block from the EOS slot on is dropped; the EOS flag
 *      ends generation after this block (earlier masked slots of the block
 *      are still planned and filled).
 *    - Else if prefix >= S: commit the first prefix / S whole slots the same
 *      way (fast path). The other chosen slots stay masked: back to 1.
 *    - Else: crop the cache back and infill all chosen slots (3).
 *    Reference TPF term of a fast-path step: S * committed slots / 2 (the
 *    EOS slot counted whole).
 *
 * 3. Parallel AR infilling. The cache is replicated into one row per chosen
 *    slot. spec[k] = the slot's draft, tag[k] from step 2 (each row keeps
 *    the prefix it already verified). a = a common "cached prefix" length,
 *    0 at first. At most S iterations, each two batched calls (all rows):
 *    - stop when every row is fully accepted;
 *    - draft: feed spec[k][a..S) with every unaccepted token replaced by
 *      <|mask|>; each mask proposes the argmax of its own logits; the
 *      appended entries are dropped again (crop every row to a);
 *    - verify: feed the updated spec[k][a..S); token j of the window is
 *      accepted if the token before it was already accepted before this
 *      iteration (this keeps accepted tokens and forces the first unaccepted
 *      one: at least one new token per row per iteration), otherwise if its
 *      probability under the previous token's logits > token_threshold; new
 *      tags = running product over the window;
 *    - EOS: the first row holding an accepted EOS in the window becomes the
 *      last row: later rows (slots) are dropped with their cache rows, and
 *      the row is marked fully accepted (what follows its EOS is cut at
 *      commit time);
 *    - advance: m = min over rows of the accepted tokens in the window; if a
 *      row is still unfinished, a += m - 1, else a += m; every row's cache
 *      is cropped to a. Rows have different accepted lengths; the common a
 *      is the minimum, and the -1 re-feeds the last token every row has
 *      accepted so that the shifted logits of the first token after it are
 *      produced in the next verify (the window's first token is never judged
 *      by its own logits). Cache entries below a stay valid: attention is
 *      causal and those tokens never change again. (The re-feed does not
 *      change any result - the token after the common prefix is forced in
 *      the next iteration either way - it only feeds one more token per
 *      row; it is kept because it is what the reference computes.)
 *    Since every row starts with >= 1 accepted token and gains >= 1 per
 *    iteration, at most S-1 iterations run and a ends at S.
 *    Reference TPF term: S * chosen slots / (2 * iterations + 2), counting
 *    the chosen slots before any EOS drop.
 *
 * 4. Reorder and reuse. Rows in position order, flattened, cut after the
 *    first EOS, are appended to the committed sequence with the K/V they got
 *    in their rows: no recomputation. They now sit physically before the
 *    block's remaining masks. (Row k's entries attended to the committed
 *    prefix and to their own row only - that is the reference's choice,
 *    which the naive twin reproduces exactly.) The chosen slots leave the
 *    mask set, and after an EOS so does every slot from the EOS slot on.
 *
 * 5. After a block in which an EOS was committed, stop. The answer is the
 *    committed tokens sorted by position.
 *
 * AR-verified mode (docs/refusion.md §4; both switches off by default, and then
 * every call and every number above is exactly the reference's):
 *  (a) ar_correct: in an infill verify, the token a row forces through (its
 *      first unaccepted one) becomes the AR head's argmax at that position -
 *      the logits of the accepted token before it, from this very verify -
 *      instead of the mask re-draft. When it differs from the re-draft, what
 *      follows it in the row was judged against the re-draft, so nothing
 *      after it is accepted in this iteration, and the row's cache is valid
 *      only before it: the common prefix a stops at it (re-fed next time).
 *      When every row is then accepted but a < S, one more call feeds the
 *      rest of the rows (no logits) so that the committed K/V are current.
 *  (b) ar_check_first: a slot's first token is checked when the slot just
 *      left of it is already committed (or it is the answer's first slot):
 *      the AR distribution for it is the logits of that committed token,
 *      kept from the call that fed it (the prompt prefill, a fast-path
 *      verify, or the last verify of an infill row). It is accepted if its
 *      probability > token_threshold, else replaced by that argmax, before
 *      global verification; the mask drafts after it are then verified
 *      against the replacement as usual (and re-drafted by infilling when
 *      they fail). Other slots keep the reference's rule.
 *  With both, one slot per block and token_threshold >= 0.5, every committed
 *  token is the AR argmax: the answer is greedy AR decoding's.
 *
 * Two call savers, also opt-in (docs/refusion.md §4):
 *  lookahead: a global verification also feeds, behind the drafts, the masks
 *      the next plan would feed if every chosen slot commits (the block's
 *      other masked slots, or the next block's). Attention is causal, so
 *      those rows see what a separate plan call would; when every chosen
 *      slot does commit (no EOS), the next plan comes from them and its call
 *      is skipped. Same answers, statistics and RNG draws; wider verifies.
 *  jacobi (needs (a)): an infilling iteration skips the draft call and
 *      verifies the current drafts again - the forced token is the AR
 *      head's choice, the drafts after it stay as they were. One call per
 *      iteration instead of two.
 *
 * Two deliberate deviations, both where the reference is wrong:
 *  - After an EOS during infilling the reference drops the block's slots
 *    from the EOS *row index* on, not from the EOS *slot*, which leaves
 *    never-filled holes in the answer when non-chosen slots lie between the
 *    two. We drop from the slot (as its own fast path does).
 *  - The reference returns every committed token, even ones after an EOS
 *    (when an earlier slot commits an EOS after a later one did). The answer
 *    here ends at the first EOS by position.
 */
#include <stdlib.h>
#include <string.h>

#include "decode/decode_impl.h"
#include "model/forward.h"

typedef struct {
    const rf_model *m;
    const rf_gen_params *p;
    int V, S, P, G, mask, eos;
    rf_kvcache kv;
    rf_runstate *rs;
    int max_tok;        /* tokens one call may hold (runstate size) */
    float *logits;      /* [max_tok, V] */
    int *tok, *pos, *lidx; /* [max_tok] batch scratch */
    int *lq;            /* [max_tok] fed index -> logits row (-1: none), verify calls */
    int prompt_pending; /* the prompt is not in the cache yet */
    /* (b): arl row r holds the AR logits of the last token of slot
     * blk0 - 1 + r (row 0: the slot before the block, or the prompt's last
     * token), valid where arl_ok[r] */
    float *arl;
    unsigned char *arl_ok;
    int blk0;
    /* lookahead: the next plan, drafted from masks fed behind a global
     * verification whose chosen slots were then all committed */
    const int *first;   /* block layout: block b = slots [first[b], first[b+1]) */
    int nb;
    int la_n;           /* > 0: la_draft / la_conf hold the next plan's n tokens */
    int *la_draft;
    float *la_conf;
    const int *prompt;
    rf_rng rng;
    rf_answer ans;
    /* refusion_step's scratch, made once per generation for the largest
     * block (maxb slots, n = maxb * S tokens) instead of once per step */
    struct {
        int *draft, *spec;          /* [n] */
        float *conf;                /* [n] */
        unsigned char *tag, *pm, *how; /* [n] */
        int *ch, *slot_of;          /* [maxb] */
        unsigned char *gone, *done; /* [maxb] */
        int *la_slots;              /* [maxb + max_tok / S], lookahead */
    } sc;
} fast;

/* One model call of R rows x n tokens (R = 1: after main, else the forked
 * rows). The first call of a generation prefills the prompt first. */
static int call(fast *f, int R, int n, int n_logits) {
    if (gen_cancelled(f->p)) return -1;
    if (f->prompt_pending) {
        for (int s = 0; s < f->P; s += f->max_tok) {
            int c = f->P - s < f->max_tok ? f->P - s : f->max_tok;
            int *pp = rf_scoped_malloc((size_t)c * sizeof(int));
            for (int i = 0; i < c; i++) pp[i] = s + i;
            int last = c - 1, keep = f->arl && s + c == f->P; /* (b): the prompt's last logits */
            rf_batch pb = {1, c, f->prompt + s, pp, 0, keep, &last, f->arl};
            int rc = rf_forward(f->m, &f->kv, f->rs, &pb);
            rf_scoped_free(pp);
            if (rc) return -1;
            if (keep) f->arl_ok[0] = 1;
        }
        f->prompt_pending = 0;
    }
    rf_batch b = {R, n, f->tok, f->pos, 0, n_logits, f->lidx, f->logits};
    f->ans.n_calls++;
    f->ans.steps[f->ans.n_steps - 1].calls++;
    return rf_forward(f->m, &f->kv, f->rs, &b);
}

static const float *lrow(const fast *f, int i) { return f->logits + (size_t)i * f->V; }

/* (b): keep logits row q as the AR logits after slot `slot`'s last token */
static void keep_arl(fast *f, int slot, int q) {
    int r = slot - f->blk0 + 1;
    memcpy(f->arl + (size_t)r * f->V, lrow(f, q), (size_t)f->V * sizeof(float));
    f->arl_ok[r] = 1;
}

/* Probability of token t under logits row i. */
static double prob_of(const fast *f, int i, int t) {
    rf_logit_stats s = rf_logits_stats(lrow(f, i), f->V);
    return rf_logit_prob(lrow(f, i), &s, t);
}

/* Drop slots from the block's mask list: those flagged in gone[]. */
static int compact(int *rem, int n_rem, const unsigned char *gone) {
    int k = 0;
    for (int i = 0; i < n_rem; i++)
        if (!gone[i]) rem[k++] = rem[i];
    return k;
}

/* Commit chosen rows' tokens to the answer and emit the event. */
static void commit_tokens(fast *f, rf_event_kind kind, int step, int n, const int *slot_of, const int *toks,
                          const unsigned char *how) {
    int *ap = rf_scoped_malloc((size_t)n * sizeof(int) + 1);
    for (int i = 0; i < n; i++) {
        ap[i] = slot_of[i / f->S] * f->S + i % f->S;
        ans_fill(&f->ans, ap[i], toks[i]);
        ans_count_how(&f->ans, how[i]);
    }
    ans_event(&f->ans, kind, step, n, ap, toks, NULL);
    ans_flush(&f->ans);
    rf_scoped_free(ap);
}

/* Emit RF_EV_DROP for the slots flagged in drop[] (not committed). */
static void emit_drop(fast *f, int step, const int *rem, int n_rem, const unsigned char *drop) {
    int *ap = rf_scoped_malloc((size_t)n_rem * f->S * sizeof(int) + 1), n = 0;
    for (int i = 0; i < n_rem; i++)
        if (drop[i])
            for (int j = 0; j < f->S; j++) ap[n++] = rem[i] * f->S + j;
    ans_event(&f->ans, RF_EV_DROP, step, n, ap, NULL, NULL);
    rf_scoped_free(ap);
}

/* Parallel AR infilling of the K chosen slots (step 3 and 4). spec/tag/how
 * are [K][S], filled by the plan and the verification. ch[k] indexes rem.
 * Sets *eos_slot to the slot holding a committed EOS, or leaves it. */
static int infill(fast *f, int step, rf_step_stat *st, const int *rem, const int *ch, int K, int *spec,
                  unsigned char *tag, unsigned char *how, int *eos_slot) {
    const int S = f->S, ar_fix = f->p->ar_correct, keep_last = f->arl != NULL;
    int R = K, a = 0, it = 0, eos_row = -1;
    unsigned char *pm = rf_scoped_malloc((size_t)K * S), *old = rf_scoped_malloc((size_t)K * S);
    int *stale = rf_scoped_malloc((size_t)K * sizeof(int));
    rf_kv_fork(&f->kv, K, S);
    for (;; it++) {
        int done = 1;
        for (int i = 0; i < R * S; i++) done &= tag[i];
        if (done && a == S) break;
        if (done) {
            /* (a) replaced a token whose K/V the rows hold from before: feed
             * the rest again so that every committed entry is current */
            int n = S - a, nl = 0;
            for (int r = 0; r < R; r++)
                for (int j = 0; j < n; j++) {
                    f->tok[r * n + j] = spec[r * S + a + j];
                    f->pos[r * n + j] = f->P + rem[ch[r]] * S + a + j;
                    if (keep_last && j == n - 1) f->lidx[nl++] = r * n + j;
                }
            if (call(f, R, n, nl)) goto fail;
            for (int r = 0; r < nl; r++) keep_arl(f, rem[ch[r]], r);
            st->refeeds++;
            a = S;
            break;
        }
        if (it > S) rf_die("refusion: infilling made no progress");
        int n = S - a;
        /* draft: masks where not accepted; keep nothing (jacobi: no draft
         * call, the current drafts are verified again) */
        int nl = 0;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < n; j++) {
                int t = r * S + a + j, i = r * n + j;
                f->tok[i] = tag[t] ? spec[t] : f->mask;
                f->pos[i] = f->P + rem[ch[r]] * S + a + j;
                if (!tag[t]) f->lidx[nl++] = i;
            }
        if (!f->p->jacobi) {
            if (call(f, R, n, nl)) goto fail;
            for (int r = 0; r < R; r++) rf_kv_row_crop(&f->kv, r, a);
            for (int q = 0; q < nl; q++) {
                int i = f->lidx[q], r = i / n, j = i % n;
                spec[r * S + a + j] = rf_logits_stats(lrow(f, q), f->V).argmax;
            }
        }
        /* verify: shifted probabilities, forced where the previous token was
         * accepted; logits of the token before every unforced one, before the
         * forced one too with (a), and of each row's last token with (b) */
        memcpy(old, tag, (size_t)R * S);
        nl = 0;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < n; j++) {
                int t = r * S + a + j, i = r * n + j;
                f->tok[i] = spec[t];
                f->lq[i] = -1;
                pm[t] = (j == 0 || tag[t - 1]);
                if (!pm[t] || (ar_fix && j > 0 && !tag[t])) f->lq[i - 1] = nl, f->lidx[nl++] = i - 1;
                if (keep_last && j == n - 1) f->lq[i] = nl, f->lidx[nl++] = i;
            }
        if (call(f, R, n, nl)) goto fail;
        for (int r = 0; r < R; r++) {
            stale[r] = -1;
            for (int j = 1; j < n; j++) {
                int t = r * S + a + j, i = r * n + j;
                if (!pm[t]) {
                    pm[t] = prob_of(f, f->lq[i - 1], spec[t]) > f->p->token_threshold;
                } else if (ar_fix && !tag[t] && stale[r] < 0) {
                    /* (a): the row's one forced token is the AR head's choice */
                    int am = rf_logits_stats(lrow(f, f->lq[i - 1]), f->V).argmax;
                    if (am != spec[t]) spec[t] = am, stale[r] = a + j;
                }
            }
            if (stale[r] >= 0) memset(pm + r * S + stale[r] + 1, 0, (size_t)(S - stale[r] - 1));
            if (keep_last) keep_arl(f, rem[ch[r]], f->lq[r * n + n - 1]);
        }
        for (int r = 0; r < R; r++) {
            unsigned char run = 1;
            for (int j = a; j < S; j++) {
                int t = r * S + j;
                run = tag[t] = run & pm[t];
                if (tag[t] && !old[t])
                    how[t] = old[t - 1] ? (ar_fix ? HOW_FORCED_AR : HOW_FORCED_DRAFT) : HOW_VERIFIED;
            }
        }
        /* an accepted EOS ends its row and drops the rows after it */
        for (int r = 0; r < R; r++) {
            int hit = 0;
            for (int j = a; j < S; j++) hit |= tag[r * S + j] && spec[r * S + j] == f->eos;
            if (!hit) continue;
            eos_row = r;
            memset(tag + r * S, 1, S);
            if (r + 1 < R) {
                int *keep = rf_scoped_malloc((size_t)(r + 1) * sizeof(int));
                for (int q = 0; q <= r; q++) keep[q] = q;
                rf_kv_select_rows(&f->kv, keep, r + 1);
                rf_scoped_free(keep);
            }
            R = r + 1;
            break;
        }
        int mn = S, any0 = 0;
        for (int r = 0; r < R; r++) {
            int c = 0;
            for (int j = a; j < S; j++) c += tag[r * S + j], any0 |= !tag[r * S + j];
            if (c < mn) mn = c;
        }
        a += any0 ? mn - 1 : mn;
        for (int r = 0; r < R; r++)
            if (stale[r] >= 0 && stale[r] < a) a = stale[r];
        for (int r = 0; r < R; r++) rf_kv_row_crop(&f->kv, r, a);
        st->infill_iters++;
        if (f->p->on_event) {
            int *ap = rf_scoped_malloc((size_t)R * S * sizeof(int));
            for (int i = 0; i < R * S; i++) ap[i] = rem[ch[i / S]] * S + i % S;
            ans_event(&f->ans, RF_EV_INFILL_ITER, step, R * S, ap, spec, tag);
            rf_scoped_free(ap);
        }
    }
    /* commit the rows in position order with their own K/V, cut after the
     * first EOS (which can only be in the EOS row: every accepted token was
     * scanned above, and rows before it hold none) */
    int n_commit = 0, *slot_of = rf_scoped_malloc((size_t)R * sizeof(int));
    for (int r = 0; r < R; r++) {
        int cnt = S, hit = 0;
        for (int j = 0; j < S && !hit; j++)
            if (spec[r * S + j] == f->eos) cnt = j + 1, hit = 1;
        if (hit != (r == eos_row)) rf_die("refusion: EOS in infill row %d, expected row %d", r, eos_row);
        if (rf_kv_commit_row(&f->kv, r, 0, cnt)) {
            rf_scoped_free(slot_of);
            goto fail;
        }
        slot_of[r] = rem[ch[r]];
        n_commit += cnt; /* rows before the last are whole: spec stays contiguous */
    }
    rf_kv_unfork(&f->kv);
    if (eos_row >= 0) *eos_slot = rem[ch[eos_row]];
    st->slots_infilled = R;
    st->tpf_ref = (double)S * K / (2.0 * st->infill_iters + 2.0);
    commit_tokens(f, RF_EV_INFILL_COMMIT, step, n_commit, slot_of, spec, how);
    rf_scoped_free(slot_of);
    rf_scoped_free(pm), rf_scoped_free(old), rf_scoped_free(stale);
    return 0;
fail:
    rf_scoped_free(pm), rf_scoped_free(old), rf_scoped_free(stale);
    return -1;
}

/* Plan drafts from logits rows q0.. : argmax, or the Gumbel draw with
 * temperature (the only place the RNG is used, so drafting a lookahead plan
 * early keeps the draw order), and the draft's probability. */
static void plan_drafts(fast *f, int q0, int n, int *draft, float *conf) {
    for (int i = 0; i < n; i++) {
        const float *l = lrow(f, q0 + i);
        rf_logit_stats s = rf_logits_stats(l, f->V);
        draft[i] = f->p->temperature > 0 ? rf_gumbel_argmax(l, f->V, f->p->temperature, s.max, &f->rng)
                                         : s.argmax;
        conf[i] = (float)rf_logit_prob(l, &s, draft[i]);
    }
}

/* Lookahead: the slots the next plan feeds if every chosen slot of this
 * step is committed - the block's other masked slots, or, when the chosen
 * ones are all it has left, the next block's. Writes them to out, returns
 * their count (0: no next plan). */
static int next_plan_slots(const fast *f, int block, const int *rem, int n_rem, const int *ch, int K, int *out) {
    int n = 0;
    for (int i = 0, k = 0; i < n_rem; i++) {
        if (k < K && ch[k] == i) {
            k++;
            continue;
        }
        out[n++] = rem[i];
    }
    if (n == 0 && block + 1 < f->nb)
        for (int s = f->first[block + 1]; s < f->first[block + 2]; s++) out[n++] = s;
    return n;
}

/* One step over the block's masked slots rem[0..n_rem) (position order):
 * plan, verify, then fast-path commit or infilling. Returns the number of
 * slots still masked (rem compacted), or -1. */
static int refusion_step(fast *f, int block, int *rem, int n_rem, int *eos_flag) {
    const int S = f->S, n = n_rem * S, stepi = f->ans.n_steps;
    rf_step_stat *st = ans_step(&f->ans, block);
    int *draft = f->sc.draft, *ch = f->sc.ch, *spec = f->sc.spec;
    float *conf = f->sc.conf;
    unsigned char *tag = f->sc.tag, *pm = f->sc.pm, *how = f->sc.how, *gone = f->sc.gone, *done = f->sc.done;
    memset(gone, 0, (size_t)n_rem), memset(done, 0, (size_t)n_rem);
    int rc = -1;

    /* 1. plan: every masked slot of the block, masks predict themselves
     * (already done when the last verification carried them: lookahead) */
    if (f->la_n) {
        if (f->la_n != n) rf_die("refusion: lookahead planned %d tokens, the block has %d masked", f->la_n, n);
        memcpy(draft, f->la_draft, (size_t)n * sizeof(int));
        memcpy(conf, f->la_conf, (size_t)n * sizeof(float));
        f->la_n = 0;
    } else {
        for (int i = 0; i < n; i++) {
            f->tok[i] = f->mask;
            f->pos[i] = f->P + rem[i / S] * S + i % S;
            f->lidx[i] = i;
        }
        if (call(f, 1, n, n)) goto out;
        rf_kv_crop(&f->kv, f->kv.len - n);
        plan_drafts(f, 0, n, draft, conf);
    }
    int K = 0;
    for (int k = 0; k < n_rem; k++)
        if (conf[k * S] > f->p->slot_threshold) ch[K++] = k;
    if (K == 0) {
        ch[K++] = 0;
        for (int k = 1; k < n_rem; k++)
            if (conf[k * S] > conf[ch[0] * S]) ch[0] = k;
    }
    st->slots_planned = K;
    for (int i = 0; i < K * S; i++) {
        spec[i] = draft[ch[i / S] * S + i % S];
        f->tok[i] = spec[i];
        f->pos[i] = f->P + rem[ch[i / S]] * S + i % S;
        f->lidx[i] = f->pos[i] - f->P; /* answer positions, for the event */
        how[i] = i % S ? HOW_VERIFIED : HOW_FIRST_FREE;
    }
    ans_event(&f->ans, RF_EV_PLAN, stepi, K * S, f->lidx, spec, NULL);

    /* (b): a slot whose left neighbour is committed gets its first token
     * checked against the AR logits kept for that neighbour */
    for (int k = 0; f->arl && k < K; k++) {
        int left_masked = 0;
        for (int i = 0; i < n_rem; i++) left_masked |= rem[i] == rem[ch[k]] - 1;
        if (left_masked) continue;
        int r = rem[ch[k]] - f->blk0;
        if (!f->arl_ok[r]) rf_die("refusion: no AR logits kept for slot %d's left neighbour", rem[ch[k]]);
        const float *l = f->arl + (size_t)r * f->V;
        rf_logit_stats ls = rf_logits_stats(l, f->V);
        if (rf_logit_prob(l, &ls, spec[k * S]) > f->p->token_threshold) {
            how[k * S] = HOW_FIRST_CHECKED;
        } else {
            how[k * S] = HOW_FIRST_REPLACED;
            spec[k * S] = f->tok[k * S] = ls.argmax;
        }
    }

    /* 2. global verification: shifted AR probabilities of the concatenation
     * (with (b) also the logits after each slot's last token, to keep) */
    int nl = 0, nla = 0;
    for (int i = 0; i < K * S; i++) {
        f->lq[i] = -1;
        if ((i + 1) % S ? i + 1 < K * S : f->arl != NULL) f->lq[i] = nl, f->lidx[nl++] = i;
    }
    /* lookahead: the next plan's masks behind the drafts (causal: they see
     * exactly the context a separate plan call would, if all K slots commit) */
    int *la_slots = f->sc.la_slots; /* NULL without lookahead */
    if (la_slots) {
        nla = next_plan_slots(f, block, rem, n_rem, ch, K, la_slots) * S;
        for (int i = 0; i < nla; i++) {
            f->tok[K * S + i] = f->mask;
            f->pos[K * S + i] = f->P + la_slots[i / S] * S + i % S;
            f->lidx[nl + i] = K * S + i;
        }
    }
    if (call(f, 1, K * S + nla, nl + nla)) goto out;
    int base = f->kv.len - K * S - nla;
    for (int i = 0; i < K * S; i++)
        pm[i] = i % S == 0 || prob_of(f, f->lq[i - 1], spec[i]) > f->p->token_threshold;
    for (int i = 0; i < K * S; i++) tag[i] = pm[i] && (i % S == 0 || tag[i - 1]);
    int prefix = 0, eos_at = -1;
    while (prefix < K * S && pm[prefix]) prefix++;
    for (int i = 0; i < prefix && eos_at < 0; i++)
        if (spec[i] == f->eos) eos_at = i;

    int *slot_of = f->sc.slot_of, eos_slot = -1;
    for (int k = 0; k < K; k++) slot_of[k] = rem[ch[k]];
    if (eos_at >= 0 || prefix >= S) {
        /* fast path: a prefix of this very pass is committed with its cache */
        int ncommit = eos_at >= 0 ? eos_at + 1 : prefix / S * S;
        int nslots = (ncommit + S - 1) / S;
        rf_kv_crop(&f->kv, base + ncommit);
        if (nla > 0 && ncommit == K * S && eos_at < 0) { /* every chosen slot: the lookahead holds */
            plan_drafts(f, nl, nla, f->la_draft, f->la_conf);
            f->la_n = nla;
        }
        commit_tokens(f, RF_EV_FAST_COMMIT, stepi, ncommit, slot_of, spec, how);
        for (int k = 0; f->arl && k < ncommit / S; k++) keep_arl(f, slot_of[k], f->lq[k * S + S - 1]);
        for (int k = 0; k < nslots; k++) done[ch[k]] = 1;
        st->slots_fast = nslots;
        st->tpf_ref = S * nslots / 2.0;
        if (eos_at >= 0) eos_slot = slot_of[eos_at / S];
    } else {
        /* 3. + 4. parallel infilling of every chosen slot */
        rf_kv_crop(&f->kv, base);
        if (infill(f, stepi, st, rem, ch, K, spec, tag, how, &eos_slot)) goto out;
        for (int k = 0; k < K; k++) done[ch[k]] = 1;
    }
    for (int i = 0; i < n_rem; i++) {
        int dropped = eos_slot >= 0 && rem[i] >= eos_slot && !done[i];
        gone[i] = done[i] || dropped;
        done[i] = dropped; /* reused: the slots to report as dropped */
    }
    if (eos_slot >= 0) {
        *eos_flag = 1;
        emit_drop(f, stepi, rem, n_rem, done);
    }
    rc = compact(rem, n_rem, gone);
out:
    return rc;
}

int rf_generate_refusion(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                         rf_gen_result *out) {
    if (p->rolling) return rf_generate_rolling(m, prompt, n_prompt, p, out);
    memset(out, 0, sizeof *out);
    if (rf_gen_check(m, prompt, n_prompt, p, 0)) return -1;
    fast f;
    memset(&f, 0, sizeof f);
    f.m = m;
    f.p = p;
    f.V = m->cfg.vocab_size;
    f.S = p->slot_size;
    f.P = n_prompt;
    f.G = gen_padded(p);
    f.mask = gen_mask_id(m, p);
    f.eos = gen_eos_id(m, p);
    f.prompt = prompt;
    f.prompt_pending = 1;
    rf_rng_seed(&f.rng, p->seed);

    int n_slots = f.G / f.S;
    int *first = rf_scoped_malloc((size_t)(n_slots + 1) * sizeof(int));
    int nb = rf_block_layout(n_slots, p->n_blocks, first), maxb = 0;
    for (int b = 0; b < nb; b++)
        if (first[b + 1] - first[b] > maxb) maxb = first[b + 1] - first[b];
    f.max_tok = maxb * f.S * (p->lookahead ? 2 : 1); /* lookahead: a verification + the next plan */
    f.first = first, f.nb = nb;
    if (f.max_tok < 256 && f.max_tok < f.P) f.max_tok = f.P < 256 ? f.P : 256; /* prefill chunk */
    rf_workspace_kv_init(p->ws, &f.kv, &m->cfg, f.P + f.G);
    f.rs = rf_workspace_runstate(p->ws, &m->cfg, f.max_tok, f.P + f.G + f.S);
    f.logits = rf_scoped_malloc((size_t)f.max_tok * f.V * sizeof(float));
    f.tok = rf_scoped_malloc((size_t)f.max_tok * sizeof(int));
    f.pos = rf_scoped_malloc((size_t)f.max_tok * sizeof(int));
    f.lidx = rf_scoped_malloc((size_t)f.max_tok * sizeof(int));
    f.lq = rf_scoped_malloc((size_t)f.max_tok * sizeof(int));
    if (p->lookahead) {
        f.la_draft = rf_scoped_malloc((size_t)f.max_tok * sizeof(int));
        f.la_conf = rf_scoped_malloc((size_t)f.max_tok * sizeof(float));
    }
    if (p->ar_check_first) {
        f.arl = rf_scoped_malloc((size_t)(maxb + 1) * f.V * sizeof(float));
        f.arl_ok = rf_scoped_calloc((size_t)maxb + 1, 1);
    }
    const size_t nmax = (size_t)maxb * f.S;
    f.sc.draft = rf_scoped_malloc(nmax * sizeof(int)), f.sc.spec = rf_scoped_malloc(nmax * sizeof(int));
    f.sc.conf = rf_scoped_malloc(nmax * sizeof(float));
    f.sc.tag = rf_scoped_malloc(nmax), f.sc.pm = rf_scoped_malloc(nmax), f.sc.how = rf_scoped_malloc(nmax);
    f.sc.ch = rf_scoped_malloc((size_t)maxb * sizeof(int)), f.sc.slot_of = rf_scoped_malloc((size_t)maxb * sizeof(int));
    f.sc.gone = rf_scoped_malloc((size_t)maxb), f.sc.done = rf_scoped_malloc((size_t)maxb);
    if (p->lookahead) f.sc.la_slots = rf_scoped_malloc((size_t)(maxb + f.max_tok / f.S) * sizeof(int));
    ans_init(&f.ans, p, f.G, f.eos);
    int *rem = rf_scoped_malloc((size_t)n_slots * sizeof(int)), rc = 0, eos_flag = 0;

    for (int b = 0; b < nb && !eos_flag && rc == 0; b++) {
        int n_rem = 0;
        for (int s = first[b]; s < first[b + 1]; s++) rem[n_rem++] = s;
        if (f.arl && b > 0) { /* the previous block's last slot becomes row 0 */
            int last = first[b] - f.blk0;
            memmove(f.arl, f.arl + (size_t)last * f.V, (size_t)f.V * sizeof(float));
            f.arl_ok[0] = f.arl_ok[last];
            memset(f.arl_ok + 1, 0, (size_t)maxb);
        }
        f.blk0 = first[b];
        while (n_rem > 0) {
            n_rem = refusion_step(&f, b, rem, n_rem, &eos_flag);
            if (n_rem < 0) {
                rc = -1;
                break;
            }
        }
    }
    rf_scoped_free(rem), rf_scoped_free(first), rf_scoped_free(f.logits), rf_scoped_free(f.tok), rf_scoped_free(f.pos), rf_scoped_free(f.lidx), rf_scoped_free(f.lq);
    rf_scoped_free(f.arl), rf_scoped_free(f.arl_ok), rf_scoped_free(f.la_draft), rf_scoped_free(f.la_conf);
    rf_scoped_free(f.sc.draft), rf_scoped_free(f.sc.spec), rf_scoped_free(f.sc.conf), rf_scoped_free(f.sc.tag);
    rf_scoped_free(f.sc.pm), rf_scoped_free(f.sc.how), rf_scoped_free(f.sc.ch), rf_scoped_free(f.sc.slot_of);
    rf_scoped_free(f.sc.gone), rf_scoped_free(f.sc.done), rf_scoped_free(f.sc.la_slots);
    rf_workspace_runstate_free(p->ws, f.rs);
    rf_kv_free(&f.kv);
    if (rc) {
        ans_free(&f.ans);
        return -1;
    }
    return ans_finish(&f.ans, n_prompt, out);
}
