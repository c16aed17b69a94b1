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
 * In the code below, refusion_step and infill follow steps 1-4; each
 * variant's work is in functions named for it (ar_correct_*, ar_check_first_*
 * and ar_logits_*, lookahead_*), called from one line each in the steps, and
 * jacobi is the one test that skips infill_draft.
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

/* One generation's state: the committed sequence's cache, the call
 * buffers, the answer, and what the opt-in variants keep between steps. */
typedef struct {
    const rf_model *m;
    const rf_gen_params *p;
    int n_vocab;
    int S, P;           /* slot size, prompt length (the notation above) */
    int gen_len;        /* answer length, padded to whole slots */
    int mask_id, eos_id;
    rf_kvcache kv;
    rf_runstate *runstate;
    int max_tokens;     /* tokens one call may hold (runstate size) */
    float *logits;      /* [max_tokens, n_vocab] */
    int *tok, *pos, *logit_idx; /* [max_tokens] batch scratch */
    int *logit_row;     /* [max_tokens] fed index -> logits row (-1: none), verify calls */
    int prompt_pending; /* the prompt is not in the cache yet */
    const int *prompt;
    const int *block_first; /* block layout: block b = slots [block_first[b], block_first[b+1]) */
    int n_blocks;
    int block_start;    /* the current block's first slot */
    /* (b): ar_logits row r holds the AR logits of the last token of slot
     * block_start - 1 + r (row 0: the slot before the block, or the
     * prompt's last token), valid where ar_logits_ok[r] */
    float *ar_logits;
    unsigned char *ar_logits_ok;
    /* lookahead: the next plan, drafted from masks fed behind a global
     * verification whose chosen slots were then all committed */
    int next_plan_n;    /* > 0: next_plan_draft / next_plan_conf hold the next plan's n tokens */
    int *next_plan_draft;
    float *next_plan_conf;
    rf_rng rng;
    rf_answer ans;
    /* refusion_step's scratch, made once per generation for the largest
     * block (max_block_slots slots, n = max_block_slots * S tokens)
     * instead of once per step */
    struct {
        int *draft, *spec;          /* [n] the plan's drafts; the chosen slots' tokens */
        float *conf;                /* [n] each draft's probability */
        unsigned char *tag, *passes, *how; /* [n] accepted; judged acceptable alone; how accepted */
        int *chosen, *slot_of;      /* [max_block_slots] chosen indices into masked; their slots */
        unsigned char *gone, *done; /* [max_block_slots] */
        int *next_slots;            /* [max_block_slots + max_tokens / S], lookahead */
    } scratch;
} refusion_state;

/* One model call of R rows x n tokens (R = 1: after main, else the forked
 * rows). The first call of a generation prefills the prompt first. */
static int call(refusion_state *dec, int R, int n, int n_logits) {
    if (gen_cancelled(dec->p)) return -1;
    if (dec->prompt_pending) {
        for (int start = 0; start < dec->P; start += dec->max_tokens) {
            int chunk = dec->P - start < dec->max_tokens ? dec->P - start : dec->max_tokens;
            int *chunk_pos = rf_scoped_malloc((size_t)chunk * sizeof(int));
            for (int i = 0; i < chunk; i++) chunk_pos[i] = start + i;
            int last = chunk - 1, keep = dec->ar_logits && start + chunk == dec->P; /* (b): the prompt's last logits */
            rf_batch prefill = {1, chunk, dec->prompt + start, chunk_pos, 0, keep, &last, dec->ar_logits};
            int rc = rf_workspace_forward(dec->p->ws, dec->m, &dec->kv, dec->runstate, &prefill);
            rf_scoped_free(chunk_pos);
            if (rc) return -1;
            if (keep) dec->ar_logits_ok[0] = 1;
        }
        dec->prompt_pending = 0;
    }
    rf_batch batch = {R, n, dec->tok, dec->pos, 0, n_logits, dec->logit_idx, dec->logits};
    dec->ans.n_calls++;
    dec->ans.steps[dec->ans.n_steps - 1].calls++;
    return rf_workspace_forward(dec->p->ws, dec->m, &dec->kv, dec->runstate, &batch);
}

static const float *logits_row(const refusion_state *dec, int i) { return dec->logits + (size_t)i * dec->n_vocab; }

/* (b): keep logits row q as the AR logits after slot `slot`'s last token */
static void keep_ar_logits(refusion_state *dec, int slot, int row) {
    int ar_row = slot - dec->block_start + 1;
    memcpy(dec->ar_logits + (size_t)ar_row * dec->n_vocab, logits_row(dec, row), (size_t)dec->n_vocab * sizeof(float));
    dec->ar_logits_ok[ar_row] = 1;
}

/* Probability of token t under logits row i. */
static double prob_of(const refusion_state *dec, int row, int token) {
    rf_logit_stats stats = rf_logits_stats(logits_row(dec, row), dec->n_vocab);
    return rf_logit_prob(logits_row(dec, row), &stats, token);
}

/* Drop slots from the block's mask list: those flagged in gone[]. */
static int compact(int *masked, int n_masked, const unsigned char *gone) {
    int k = 0;
    for (int i = 0; i < n_masked; i++)
        if (!gone[i]) masked[k++] = masked[i];
    return k;
}

/* Commit chosen rows' tokens to the answer and emit the event. */
static void commit_tokens(refusion_state *dec, rf_event_kind kind, int step, int n, const int *slot_of, const int *toks,
                          const unsigned char *how) {
    int *answer_pos = rf_scoped_malloc((size_t)n * sizeof(int) + 1);
    for (int i = 0; i < n; i++) {
        answer_pos[i] = slot_of[i / dec->S] * dec->S + i % dec->S;
        ans_fill(&dec->ans, answer_pos[i], toks[i]);
        ans_count_how(&dec->ans, how[i]);
    }
    ans_event(&dec->ans, kind, step, n, answer_pos, toks, NULL);
    ans_flush(&dec->ans);
    rf_scoped_free(answer_pos);
}

/* Emit RF_EV_DROP for the slots flagged in drop[] (not committed). */
static void emit_drop(refusion_state *dec, int step, const int *masked, int n_masked, const unsigned char *drop) {
    int *answer_pos = rf_scoped_malloc((size_t)n_masked * dec->S * sizeof(int) + 1), n = 0;
    for (int i = 0; i < n_masked; i++)
        if (drop[i])
            for (int j = 0; j < dec->S; j++) answer_pos[n++] = masked[i] * dec->S + j;
    ans_event(&dec->ans, RF_EV_DROP, step, n, answer_pos, NULL, NULL);
    rf_scoped_free(answer_pos);
}

/* Infilling's draft (step 3): feed rows [cached, S) with every unaccepted
 * token replaced by <|mask|>; each mask proposes the argmax of its own
 * logits. The appended entries are dropped again (rows cropped to cached). */
static int infill_draft(refusion_state *dec, const int *masked, const int *chosen, int R, int cached, int *spec,
                        const unsigned char *tag) {
    const int S = dec->S, n = S - cached;
    int n_logits = 0;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            int t = r * S + cached + j, i = r * n + j;
            dec->tok[i] = tag[t] ? spec[t] : dec->mask_id;
            dec->pos[i] = dec->P + masked[chosen[r]] * S + cached + j;
            if (!tag[t]) dec->logit_idx[n_logits++] = i;
        }
    if (call(dec, R, n, n_logits)) return -1;
    for (int r = 0; r < R; r++) rf_kv_row_crop(&dec->kv, r, cached);
    for (int q = 0; q < n_logits; q++) {
        int i = dec->logit_idx[q], r = i / n, j = i % n;
        spec[r * S + cached + j] = rf_logits_stats(logits_row(dec, q), dec->n_vocab).argmax;
    }
    return 0;
}

/* (a): a row's forced token becomes the AR head's choice, the argmax of
 * logits row `row` (the accepted token before it). Returns 1 when that
 * changed the token. */
static int ar_correct_force(const refusion_state *dec, int row, int *token) {
    int ar_choice = rf_logits_stats(logits_row(dec, row), dec->n_vocab).argmax;
    if (ar_choice == *token) return 0;
    *token = ar_choice;
    return 1;
}

/* (a) replaced a token whose K/V the rows hold from before: every row is
 * accepted but the common prefix stopped at cached < S. Feed the rest of
 * the rows again (logits only of each row's last token, to keep with (b))
 * so that every committed entry is current. */
static int ar_correct_refeed(refusion_state *dec, const int *masked, const int *chosen, int R, int cached,
                             const int *spec) {
    const int S = dec->S, keep_ar = dec->ar_logits != NULL;
    int n = S - cached, n_logits = 0;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < n; j++) {
            dec->tok[r * n + j] = spec[r * S + cached + j];
            dec->pos[r * n + j] = dec->P + masked[chosen[r]] * S + cached + j;
            if (keep_ar && j == n - 1) dec->logit_idx[n_logits++] = r * n + j;
        }
    if (call(dec, R, n, n_logits)) return -1;
    for (int r = 0; r < n_logits; r++) keep_ar_logits(dec, masked[chosen[r]], r);
    return 0;
}

/* Parallel AR infilling of the K chosen slots (step 3 and 4). spec/tag/how
 * are [K][S], filled by the plan and the verification. chosen[k] indexes masked.
 * Sets *eos_slot to the slot holding a committed EOS, or leaves it. */
static int infill(refusion_state *dec, int step, rf_step_stat *st, const int *masked, const int *chosen, int K,
                  int *spec, unsigned char *tag, unsigned char *how, int *eos_slot) {
    const int S = dec->S, ar_correct = dec->p->ar_correct, keep_ar = dec->ar_logits != NULL;
    int R = K;          /* rows still infilled (an EOS drops the later ones) */
    int cached = 0;     /* the common cached prefix of every row (a above) */
    int iter = 0, eos_row = -1;
    /* passes: a token judged acceptable on its own; was_accepted: tag
     * before this iteration; stale[r]: (a) changed row r's token there, so
     * its cache is valid only before it (-1: none) */
    unsigned char *passes = rf_scoped_malloc((size_t)K * S), *was_accepted = rf_scoped_malloc((size_t)K * S);
    int *stale = rf_scoped_malloc((size_t)K * sizeof(int));
    rf_kv_fork(&dec->kv, K, S);
    for (;; iter++) {
        int done = 1;
        for (int i = 0; i < R * S; i++) done &= tag[i];
        if (done && cached == S) break;
        if (done) { /* only (a) stops the common prefix short of S */
            if (ar_correct_refeed(dec, masked, chosen, R, cached, spec)) goto fail;
            st->refeeds++;
            cached = S;
            break;
        }
        if (iter > S) rf_die("refusion: infilling made no progress");
        int n = S - cached;
        /* jacobi: no draft call, the current drafts are verified again */
        if (!dec->p->jacobi && infill_draft(dec, masked, chosen, R, cached, spec, tag)) goto fail;
        /* verify: shifted probabilities, forced where the previous token was
         * accepted; logits of the token before every unforced one, before the
         * forced one too with (a), and of each row's last token with (b) */
        memcpy(was_accepted, tag, (size_t)R * S);
        int n_logits = 0;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < n; j++) {
                int t = r * S + cached + j, i = r * n + j;
                dec->tok[i] = spec[t];
                dec->pos[i] = dec->P + masked[chosen[r]] * S + cached + j;
                dec->logit_row[i] = -1;
                passes[t] = (j == 0 || tag[t - 1]);
                if (!passes[t] || (ar_correct && j > 0 && !tag[t]))
                    dec->logit_row[i - 1] = n_logits, dec->logit_idx[n_logits++] = i - 1;
                if (keep_ar && j == n - 1) dec->logit_row[i] = n_logits, dec->logit_idx[n_logits++] = i;
            }
        if (call(dec, R, n, n_logits)) goto fail;
        for (int r = 0; r < R; r++) {
            stale[r] = -1;
            for (int j = 1; j < n; j++) {
                int t = r * S + cached + j, i = r * n + j;
                if (!passes[t]) {
                    passes[t] = prob_of(dec, dec->logit_row[i - 1], spec[t]) > dec->p->token_threshold;
                } else if (ar_correct && !tag[t] && stale[r] < 0) {
                    if (ar_correct_force(dec, dec->logit_row[i - 1], &spec[t])) stale[r] = cached + j;
                }
            }
            if (stale[r] >= 0) memset(passes + r * S + stale[r] + 1, 0, (size_t)(S - stale[r] - 1));
            if (keep_ar) keep_ar_logits(dec, masked[chosen[r]], dec->logit_row[r * n + n - 1]);
        }
        for (int r = 0; r < R; r++) {
            unsigned char run = 1;
            for (int j = cached; j < S; j++) {
                int t = r * S + j;
                run = tag[t] = run & passes[t];
                if (tag[t] && !was_accepted[t])
                    how[t] = was_accepted[t - 1] ? (ar_correct ? HOW_FORCED_AR : HOW_FORCED_DRAFT) : HOW_VERIFIED;
            }
        }
        /* an accepted EOS ends its row and drops the rows after it */
        for (int r = 0; r < R; r++) {
            int hit = 0;
            for (int j = cached; j < S; j++) hit |= tag[r * S + j] && spec[r * S + j] == dec->eos_id;
            if (!hit) continue;
            eos_row = r;
            memset(tag + r * S, 1, S);
            if (r + 1 < R) {
                int *keep = rf_scoped_malloc((size_t)(r + 1) * sizeof(int));
                for (int q = 0; q <= r; q++) keep[q] = q;
                rf_kv_select_rows(&dec->kv, keep, r + 1);
                rf_scoped_free(keep);
            }
            R = r + 1;
            break;
        }
        int min_new = S, any_open = 0;
        for (int r = 0; r < R; r++) {
            int c = 0;
            for (int j = cached; j < S; j++) c += tag[r * S + j], any_open |= !tag[r * S + j];
            if (c < min_new) min_new = c;
        }
        cached += any_open ? min_new - 1 : min_new;
        for (int r = 0; r < R; r++)
            if (stale[r] >= 0 && stale[r] < cached) cached = stale[r];
        for (int r = 0; r < R; r++) rf_kv_row_crop(&dec->kv, r, cached);
        st->infill_iters++;
        if (dec->p->on_event) {
            int *answer_pos = rf_scoped_malloc((size_t)R * S * sizeof(int));
            for (int i = 0; i < R * S; i++) answer_pos[i] = masked[chosen[i / S]] * S + i % S;
            ans_event(&dec->ans, RF_EV_INFILL_ITER, step, R * S, answer_pos, spec, tag);
            rf_scoped_free(answer_pos);
        }
    }
    /* commit the rows in position order with their own K/V, cut after the
     * first EOS (which can only be in the EOS row: every accepted token was
     * scanned above, and rows before it hold none) */
    int n_commit = 0, *slot_of = rf_scoped_malloc((size_t)R * sizeof(int));
    for (int r = 0; r < R; r++) {
        int n_keep = S, hit = 0;
        for (int j = 0; j < S && !hit; j++)
            if (spec[r * S + j] == dec->eos_id) n_keep = j + 1, hit = 1;
        if (hit != (r == eos_row)) rf_die("refusion: EOS in infill row %d, expected row %d", r, eos_row);
        if (rf_kv_commit_row(&dec->kv, r, 0, n_keep)) {
            rf_scoped_free(slot_of);
            goto fail;
        }
        slot_of[r] = masked[chosen[r]];
        n_commit += n_keep; /* rows before the last are whole: spec stays contiguous */
    }
    rf_kv_unfork(&dec->kv);
    if (eos_row >= 0) *eos_slot = masked[chosen[eos_row]];
    st->slots_infilled = R;
    st->tpf_ref = (double)S * K / (2.0 * st->infill_iters + 2.0);
    commit_tokens(dec, RF_EV_INFILL_COMMIT, step, n_commit, slot_of, spec, how);
    rf_scoped_free(slot_of);
    rf_scoped_free(passes), rf_scoped_free(was_accepted), rf_scoped_free(stale);
    return 0;
fail:
    rf_scoped_free(passes), rf_scoped_free(was_accepted), rf_scoped_free(stale);
    return -1;
}

/* Plan drafts from logits rows q0.. : argmax, or the Gumbel draw with
 * temperature (the only place the RNG is used, so drafting a lookahead plan
 * early keeps the draw order), and the draft's probability. */
static void plan_drafts(refusion_state *dec, int q0, int n, int *draft, float *conf) {
    for (int i = 0; i < n; i++) {
        const float *row = logits_row(dec, q0 + i);
        rf_logit_stats stats = rf_logits_stats(row, dec->n_vocab);
        draft[i] = dec->p->temperature > 0
                       ? rf_gumbel_argmax(row, dec->n_vocab, dec->p->temperature, stats.max, &dec->rng)
                       : stats.argmax;
        conf[i] = (float)rf_logit_prob(row, &stats, draft[i]);
    }
}

/* Lookahead: the slots the next plan feeds if every chosen slot of this
 * step is committed - the block's other masked slots, or, when the chosen
 * ones are all it has left, the next block's. Writes them to out, returns
 * their count (0: no next plan). */
static int next_plan_slots(const refusion_state *dec, int block, const int *masked, int n_masked, const int *chosen,
                           int K, int *out) {
    int n = 0;
    for (int i = 0, k = 0; i < n_masked; i++) {
        if (k < K && chosen[k] == i) {
            k++;
            continue;
        }
        out[n++] = masked[i];
    }
    if (n == 0 && block + 1 < dec->n_blocks)
        for (int slot = dec->block_first[block + 1]; slot < dec->block_first[block + 2]; slot++) out[n++] = slot;
    return n;
}

/* Step 1, plan: feed every masked slot of the block as masks after the
 * cache (n tokens), each predicting its own position; crop them again. */
static int plan(refusion_state *dec, const int *masked, int n, int *draft, float *conf) {
    const int S = dec->S;
    for (int i = 0; i < n; i++) {
        dec->tok[i] = dec->mask_id;
        dec->pos[i] = dec->P + masked[i / S] * S + i % S;
        dec->logit_idx[i] = i;
    }
    if (call(dec, 1, n, n)) return -1;
    rf_kv_crop(&dec->kv, dec->kv.len - n);
    plan_drafts(dec, 0, n, draft, conf);
    return 0;
}

/* Step 1, choice: the slots whose first token's confidence is above
 * slot_threshold, in position order, or else the single best one (first on
 * ties). Writes indices into the masked slots to chosen, returns K. */
static int choose_slots(const refusion_state *dec, const float *conf, int n_masked, int *chosen) {
    const int S = dec->S;
    int K = 0;
    for (int k = 0; k < n_masked; k++)
        if (conf[k * S] > dec->p->slot_threshold) chosen[K++] = k;
    if (K == 0) {
        chosen[K++] = 0;
        for (int k = 1; k < n_masked; k++)
            if (conf[k * S] > conf[chosen[0] * S]) chosen[0] = k;
    }
    return K;
}

/* Lookahead: the plan the last verification carried replaces step 1. */
static void lookahead_take_plan(refusion_state *dec, int n, int *draft, float *conf) {
    if (dec->next_plan_n != n)
        rf_die("refusion: lookahead planned %d tokens, the block has %d masked", dec->next_plan_n, n);
    memcpy(draft, dec->next_plan_draft, (size_t)n * sizeof(int));
    memcpy(conf, dec->next_plan_conf, (size_t)n * sizeof(float));
    dec->next_plan_n = 0;
}

/* Lookahead: the next plan's masks behind the K * S drafts of a global
 * verification (causal: they see exactly the context a separate plan call
 * would, if all K slots commit); their logits follow the n_logits the
 * verification asks for. Returns the number of masks fed. */
static int lookahead_feed_masks(refusion_state *dec, int block, const int *masked, int n_masked, const int *chosen,
                                int K, int n_logits) {
    const int S = dec->S;
    int *next_slots = dec->scratch.next_slots;
    int n_next = next_plan_slots(dec, block, masked, n_masked, chosen, K, next_slots) * S;
    for (int i = 0; i < n_next; i++) {
        dec->tok[K * S + i] = dec->mask_id;
        dec->pos[K * S + i] = dec->P + next_slots[i / S] * S + i % S;
        dec->logit_idx[n_logits + i] = K * S + i;
    }
    return n_next;
}

/* Lookahead: every chosen slot was committed, so the masks fed behind them
 * (logits rows q0..) give the next plan. */
static void lookahead_keep_plan(refusion_state *dec, int q0, int n_next) {
    plan_drafts(dec, q0, n_next, dec->next_plan_draft, dec->next_plan_conf);
    dec->next_plan_n = n_next;
}

/* (b): a chosen slot whose left neighbour is committed gets its first token
 * checked against the AR logits kept for that neighbour: kept when its
 * probability is above token_threshold, else replaced by their argmax. */
static void ar_check_first_tokens(refusion_state *dec, const int *masked, int n_masked, const int *chosen, int K,
                                  int *spec, unsigned char *how) {
    const int S = dec->S;
    for (int k = 0; k < K; k++) {
        int left_masked = 0;
        for (int i = 0; i < n_masked; i++) left_masked |= masked[i] == masked[chosen[k]] - 1;
        if (left_masked) continue;
        int r = masked[chosen[k]] - dec->block_start;
        if (!dec->ar_logits_ok[r])
            rf_die("refusion: no AR logits kept for slot %d's left neighbour", masked[chosen[k]]);
        const float *ar_row_logits = dec->ar_logits + (size_t)r * dec->n_vocab;
        rf_logit_stats stats = rf_logits_stats(ar_row_logits, dec->n_vocab);
        if (rf_logit_prob(ar_row_logits, &stats, spec[k * S]) > dec->p->token_threshold) {
            how[k * S] = HOW_FIRST_CHECKED;
        } else {
            how[k * S] = HOW_FIRST_REPLACED;
            spec[k * S] = dec->tok[k * S] = stats.argmax;
        }
    }
}

/* (b): entering the block that starts at slot `start`: the previous block's
 * last slot becomes row 0 of the kept AR logits, the others are cleared. */
static void ar_logits_next_block(refusion_state *dec, int start, int max_block_slots) {
    int last_row = start - dec->block_start;
    memmove(dec->ar_logits, dec->ar_logits + (size_t)last_row * dec->n_vocab, (size_t)dec->n_vocab * sizeof(float));
    dec->ar_logits_ok[0] = dec->ar_logits_ok[last_row];
    memset(dec->ar_logits_ok + 1, 0, (size_t)max_block_slots);
}

/* One step over the block's masked slots masked[0..n_masked) (position order):
 * plan, verify, then fast-path commit or infilling. Returns the number of
 * slots still masked (masked compacted), or -1. */
static int refusion_step(refusion_state *dec, int block, int *masked, int n_masked, int *eos_flag) {
    const int S = dec->S, n = n_masked * S, step = dec->ans.n_steps;
    rf_step_stat *st = ans_step(&dec->ans, block);
    int *draft = dec->scratch.draft, *chosen = dec->scratch.chosen, *spec = dec->scratch.spec;
    float *conf = dec->scratch.conf;
    unsigned char *tag = dec->scratch.tag, *passes = dec->scratch.passes, *how = dec->scratch.how;
    unsigned char *gone = dec->scratch.gone, *done = dec->scratch.done;
    memset(gone, 0, (size_t)n_masked), memset(done, 0, (size_t)n_masked);
    int rc = -1;

    /* 1. plan: every masked slot of the block, masks predict themselves
     * (already done when the last verification carried them: lookahead) */
    if (dec->next_plan_n)
        lookahead_take_plan(dec, n, draft, conf);
    else if (plan(dec, masked, n, draft, conf))
        goto out;
    int K = choose_slots(dec, conf, n_masked, chosen);
    st->slots_planned = K;
    for (int i = 0; i < K * S; i++) {
        spec[i] = draft[chosen[i / S] * S + i % S];
        dec->tok[i] = spec[i];
        dec->pos[i] = dec->P + masked[chosen[i / S]] * S + i % S;
        dec->logit_idx[i] = dec->pos[i] - dec->P; /* answer positions, for the event */
        how[i] = i % S ? HOW_VERIFIED : HOW_FIRST_FREE;
    }
    ans_event(&dec->ans, RF_EV_PLAN, step, K * S, dec->logit_idx, spec, NULL);

    if (dec->ar_logits) ar_check_first_tokens(dec, masked, n_masked, chosen, K, spec, how);

    /* 2. global verification: shifted AR probabilities of the concatenation
     * (with (b) also the logits after each slot's last token, to keep) */
    int n_logits = 0, n_next = 0;
    for (int i = 0; i < K * S; i++) {
        dec->logit_row[i] = -1;
        if ((i + 1) % S ? i + 1 < K * S : dec->ar_logits != NULL)
            dec->logit_row[i] = n_logits, dec->logit_idx[n_logits++] = i;
    }
    if (dec->scratch.next_slots) /* NULL without lookahead */
        n_next = lookahead_feed_masks(dec, block, masked, n_masked, chosen, K, n_logits);
    if (call(dec, 1, K * S + n_next, n_logits + n_next)) goto out;
    int base = dec->kv.len - K * S - n_next;
    for (int i = 0; i < K * S; i++)
        passes[i] = i % S == 0 || prob_of(dec, dec->logit_row[i - 1], spec[i]) > dec->p->token_threshold;
    for (int i = 0; i < K * S; i++) tag[i] = passes[i] && (i % S == 0 || tag[i - 1]);
    int prefix = 0, eos_at = -1;
    while (prefix < K * S && passes[prefix]) prefix++;
    for (int i = 0; i < prefix && eos_at < 0; i++)
        if (spec[i] == dec->eos_id) eos_at = i;

    int *slot_of = dec->scratch.slot_of, eos_slot = -1;
    for (int k = 0; k < K; k++) slot_of[k] = masked[chosen[k]];
    if (eos_at >= 0 || prefix >= S) {
        /* fast path: a prefix of this very pass is committed with its cache */
        int n_commit = eos_at >= 0 ? eos_at + 1 : prefix / S * S;
        int n_slots_committed = (n_commit + S - 1) / S;
        rf_kv_crop(&dec->kv, base + n_commit);
        if (n_next > 0 && n_commit == K * S && eos_at < 0) /* every chosen slot: the lookahead holds */
            lookahead_keep_plan(dec, n_logits, n_next);
        commit_tokens(dec, RF_EV_FAST_COMMIT, step, n_commit, slot_of, spec, how);
        for (int k = 0; dec->ar_logits && k < n_commit / S; k++) /* (b) */
            keep_ar_logits(dec, slot_of[k], dec->logit_row[k * S + S - 1]);
        for (int k = 0; k < n_slots_committed; k++) done[chosen[k]] = 1;
        st->slots_fast = n_slots_committed;
        st->tpf_ref = S * n_slots_committed / 2.0;
        if (eos_at >= 0) eos_slot = slot_of[eos_at / S];
    } else {
        /* 3. + 4. parallel infilling of every chosen slot */
        rf_kv_crop(&dec->kv, base);
        if (infill(dec, step, st, masked, chosen, K, spec, tag, how, &eos_slot)) goto out;
        for (int k = 0; k < K; k++) done[chosen[k]] = 1;
    }
    for (int i = 0; i < n_masked; i++) {
        int dropped = eos_slot >= 0 && masked[i] >= eos_slot && !done[i];
        gone[i] = done[i] || dropped;
        done[i] = dropped; /* reused: the slots to report as dropped */
    }
    if (eos_slot >= 0) {
        *eos_flag = 1;
        emit_drop(dec, step, masked, n_masked, done);
    }
    rc = compact(masked, n_masked, gone);
out:
    return rc;
}

int rf_generate_refusion(const rf_model *m, const int *prompt, int n_prompt, const rf_gen_params *p,
                         rf_gen_result *out) {
    if (p->rolling) return rf_generate_rolling(m, prompt, n_prompt, p, out);
    memset(out, 0, sizeof *out);
    if (rf_gen_check(m, prompt, n_prompt, p, 0)) return -1;
    refusion_state dec;
    memset(&dec, 0, sizeof dec);
    dec.m = m;
    dec.p = p;
    dec.n_vocab = m->cfg.vocab_size;
    dec.S = p->slot_size;
    dec.P = n_prompt;
    dec.gen_len = gen_padded(p);
    dec.mask_id = gen_mask_id(m, p);
    dec.eos_id = gen_eos_id(m, p);
    dec.prompt = prompt;
    dec.prompt_pending = 1;
    rf_rng_seed(&dec.rng, p->seed);

    int n_slots = dec.gen_len / dec.S;
    int *block_first = rf_scoped_malloc((size_t)(n_slots + 1) * sizeof(int));
    int n_blocks = rf_block_layout(n_slots, p->n_blocks, block_first), max_block_slots = 0;
    for (int block = 0; block < n_blocks; block++)
        if (block_first[block + 1] - block_first[block] > max_block_slots)
            max_block_slots = block_first[block + 1] - block_first[block];
    dec.max_tokens = max_block_slots * dec.S * (p->lookahead ? 2 : 1); /* lookahead: a verification + the next plan */
    dec.block_first = block_first, dec.n_blocks = n_blocks;
    if (dec.max_tokens < 256 && dec.max_tokens < dec.P) dec.max_tokens = dec.P < 256 ? dec.P : 256; /* prefill chunk */
    rf_workspace_kv_init(p->ws, &dec.kv, &m->cfg, dec.P + dec.gen_len);
    dec.runstate = rf_workspace_runstate(p->ws, &m->cfg, dec.max_tokens, dec.P + dec.gen_len + dec.S);
    dec.logits = rf_scoped_malloc((size_t)dec.max_tokens * dec.n_vocab * sizeof(float));
    dec.tok = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(int));
    dec.pos = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(int));
    dec.logit_idx = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(int));
    dec.logit_row = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(int));
    if (p->lookahead) {
        dec.next_plan_draft = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(int));
        dec.next_plan_conf = rf_scoped_malloc((size_t)dec.max_tokens * sizeof(float));
    }
    if (p->ar_check_first) {
        dec.ar_logits = rf_scoped_malloc((size_t)(max_block_slots + 1) * dec.n_vocab * sizeof(float));
        dec.ar_logits_ok = rf_scoped_calloc((size_t)max_block_slots + 1, 1);
    }
    const size_t max_block_tokens = (size_t)max_block_slots * dec.S;
    dec.scratch.draft = rf_scoped_malloc(max_block_tokens * sizeof(int));
    dec.scratch.spec = rf_scoped_malloc(max_block_tokens * sizeof(int));
    dec.scratch.conf = rf_scoped_malloc(max_block_tokens * sizeof(float));
    dec.scratch.tag = rf_scoped_malloc(max_block_tokens);
    dec.scratch.passes = rf_scoped_malloc(max_block_tokens);
    dec.scratch.how = rf_scoped_malloc(max_block_tokens);
    dec.scratch.chosen = rf_scoped_malloc((size_t)max_block_slots * sizeof(int));
    dec.scratch.slot_of = rf_scoped_malloc((size_t)max_block_slots * sizeof(int));
    dec.scratch.gone = rf_scoped_malloc((size_t)max_block_slots);
    dec.scratch.done = rf_scoped_malloc((size_t)max_block_slots);
    if (p->lookahead)
        dec.scratch.next_slots = rf_scoped_malloc((size_t)(max_block_slots + dec.max_tokens / dec.S) * sizeof(int));
    ans_init(&dec.ans, p, dec.gen_len, dec.eos_id);
    int *masked = rf_scoped_malloc((size_t)n_slots * sizeof(int)), rc = 0, eos_flag = 0;

    for (int block = 0; block < n_blocks && !eos_flag && rc == 0; block++) {
        int n_masked = 0;
        for (int slot = block_first[block]; slot < block_first[block + 1]; slot++) masked[n_masked++] = slot;
        if (dec.ar_logits && block > 0) ar_logits_next_block(&dec, block_first[block], max_block_slots);
        dec.block_start = block_first[block];
        while (n_masked > 0) {
            n_masked = refusion_step(&dec, block, masked, n_masked, &eos_flag);
            if (n_masked < 0) {
                rc = -1;
                break;
            }
        }
    }
    rf_scoped_free(masked), rf_scoped_free(block_first), rf_scoped_free(dec.logits), rf_scoped_free(dec.tok);
    rf_scoped_free(dec.pos), rf_scoped_free(dec.logit_idx), rf_scoped_free(dec.logit_row);
    rf_scoped_free(dec.ar_logits), rf_scoped_free(dec.ar_logits_ok), rf_scoped_free(dec.next_plan_draft);
    rf_scoped_free(dec.next_plan_conf);
    rf_scoped_free(dec.scratch.draft), rf_scoped_free(dec.scratch.spec), rf_scoped_free(dec.scratch.conf);
    rf_scoped_free(dec.scratch.tag);
    rf_scoped_free(dec.scratch.passes), rf_scoped_free(dec.scratch.how), rf_scoped_free(dec.scratch.chosen);
    rf_scoped_free(dec.scratch.slot_of);
    rf_scoped_free(dec.scratch.gone), rf_scoped_free(dec.scratch.done), rf_scoped_free(dec.scratch.next_slots);
    rf_workspace_runstate_free(p->ws, dec.runstate);
    rf_kv_free(&dec.kv);
    return ans_end(&dec.ans, rc, n_prompt, out);
}
