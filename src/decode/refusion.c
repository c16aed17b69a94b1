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
 * The decoder is a step machine (refusion_step.h): each function that
 * needs a model call prepares it and returns; rf_pi_seq_after takes the
 * call's logits and goes on where it stopped (plan -> verify ->
 * verify_after -> fast path, or infill_begin -> infill_draft ->
 * infill_verify -> infill_verify_after -> ... -> infill_commit; then
 * finish_step -> the next step or block). rf_generate_refusion drives it
 * alone, the server's scheduler beside other generations. Each variant's
 * work is in functions named for it (ar_correct_*, ar_check_first_* and
 * ar_logits_*, lookahead_*), called from one line each in the steps, and
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

#include "decode/constraint.h"
#include "decode/decode_impl.h"
#include "decode/refusion_step.h"
#include "model/forward.h"

/* One generation's state: the committed sequence's cache, the call
 * buffers, the answer, what the opt-in variants keep between steps, and
 * where the machine stands (the block, the step and its infilling, the call
 * handed out). */
typedef enum { CALL_NONE, CALL_PLAN, CALL_VERIFY, CALL_DRAFT, CALL_INFILL_VERIFY, CALL_REFEED } call_kind;

struct rf_pi_seq {
    const rf_model *m;
    rf_params params; /* the caller's, copied */
    const rf_params *p; /* &params */
    int n_vocab;
    int S, P;           /* slot size, prompt length (the notation above) */
    int gen_len;        /* answer length, padded to whole slots */
    int mask_id, eos_id;
    rf_kvcache kv;
    int max_tokens;     /* tokens one call may hold (the run state's width) */
    const float *logits; /* [n_logits, n_vocab] of the call just made, only during rf_pi_seq_after */
    int *tok, *pos, *logit_idx; /* [max_tokens] the call's rows */
    int *logit_row;     /* [max_tokens] fed index -> logits row (-1: none), verify calls */
    int *prompt;        /* [P] */
    int fed;            /* prompt tokens in the cache */
    int *prefill_pos, prefill_last; /* a prompt chunk's positions, its last token's index */
    int *block_first;   /* block layout: block b = slots [block_first[b], block_first[b+1]) */
    int n_blocks, max_block_slots;
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
    /* under a grammar: p->constraint's run, the row its mask is laid on, the
     * plan's row for the frontier's first token, why the answer failed */
    rf_constraint_run *cr;
    float *grammar_row, *first_row;
    char *error;
    /* the steps' scratch, made once per generation for the largest block
     * (max_block_slots slots, n = max_block_slots * S tokens) */
    struct {
        int *draft, *spec;          /* [n] the plan's drafts; the chosen slots' tokens */
        float *conf;                /* [n] each draft's probability */
        unsigned char *tag, *passes, *how; /* [n] accepted; judged acceptable alone; how accepted */
        unsigned char *was_accepted; /* [n] infilling: tag before the iteration */
        int *chosen, *slot_of;      /* [max_block_slots] chosen indices into masked; their slots */
        int *stale;                 /* [max_block_slots] infilling: (a) changed row r's token there (-1: none) */
        unsigned char *gone, *done; /* [max_block_slots] */
        int *next_slots;            /* [max_block_slots + max_tokens / S], lookahead */
    } scratch;
    /* where the machine stands */
    int block;          /* the current block */
    int *masked, n_masked; /* [n_slots] its still-masked slots, in position order */
    int eos_flag;       /* an EOS was committed: the current block is the last */
    call_kind kind;     /* the call the current step waits for (CALL_NONE: finished) */
    int call_R, call_n, call_nl; /* its rows, tokens per row, logits */
    int handed;         /* tokens of the call handed out by rf_pi_seq_next, 0: none */
    int done, failed;
    /* the step under way (refusion.c's header, 1-4) */
    int step;           /* its index in the statistics */
    int K, n_logits, n_next; /* chosen slots; the verification's logits and lookahead masks */
    int eos_slot;       /* the slot holding a committed EOS, -1: none */
    /* its infilling (3.) */
    int R, cached, iter, eos_row; /* rows still infilled, a above, iterations, the EOS row (-1) */
};
typedef struct rf_pi_seq refusion_state;

/* The next call: R rows x n tokens of dec->tok / pos (R = 1: after main,
 * else the forked rows), logits of n_logits of them (dec->logit_idx). */
static void call(refusion_state *dec, call_kind kind, int R, int n, int n_logits) {
    dec->kind = kind, dec->call_R = R, dec->call_n = n, dec->call_nl = n_logits;
}

static rf_step *step_stat(refusion_state *dec) { return &dec->ans.steps[dec->ans.n_steps - 1]; }

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

/* ---- under a grammar (p->constraint) -----------------------------------------------
 * A grammar judges a token only after every token before it, so a step
 * chooses one slot, the answer's first still-masked one (its frontier,
 * choose_slots), and every token committed is taken by the grammar in
 * position order: the slot's first token is drawn from the plan's row for
 * it with the grammar's mask (grammar_first_token, before (b) checks it), a
 * draft passes verification only where the grammar takes it (grammar_cut),
 * a forced token is a masked row's argmax (grammar_argmax), and committed
 * tokens advance the grammar (grammar_commit). A failure of the grammar (a
 * bound hit, no token allowed) ends the generation with its error. */

static void grammar_fail(refusion_state *dec) {
    if (!dec->error) dec->error = rf_strdup(rf_last_error());
}

/* The argmax of `row` under the grammar's mask for the state after the
 * committed answer and then tok[0..n); `fallback` when the grammar fails. */
static void lp_of(refusion_state *dec, int r, int j, const float *row, int token);

static int grammar_argmax(refusion_state *dec, const float *row, const int *tok, int n, int fallback) {
    memcpy(dec->grammar_row, row, (size_t)dec->n_vocab * sizeof(float));
    if (rf_constraint_run_mask_after(dec->cr, tok, n, dec->grammar_row)) {
        grammar_fail(dec);
        return fallback;
    }
    return rf_logits_stats(dec->grammar_row, dec->n_vocab).argmax;
}

/* The chosen slot's first token, drawn as the plan draws (plan_drafts)
 * from the plan's row for it with the grammar's mask. */
static void grammar_first_token(refusion_state *dec, int *token) {
    float *row = dec->grammar_row;
    memcpy(row, dec->first_row, (size_t)dec->n_vocab * sizeof(float));
    if (rf_constraint_run_mask(dec->cr, row)) {
        grammar_fail(dec);
        return;
    }
    rf_logit_stats stats = rf_logits_stats(row, dec->n_vocab);
    *token = dec->p->temperature > 0
                 ? rf_gumbel_argmax(row, dec->n_vocab, dec->p->temperature, stats.max, &dec->rng)
                 : stats.argmax;
    lp_of(dec, 0, 0, dec->first_row, *token);
}

/* A slot's tokens spec[0..S) pass only up to where the grammar stops
 * taking them in order. */
static void grammar_cut(refusion_state *dec, const int *spec, unsigned char *passes) {
    for (int j = rf_constraint_run_prefix(dec->cr, spec, dec->S); j < dec->S; j++) passes[j] = 0;
}

/* Tokens committed in position order advance the grammar. */
static void grammar_commit(refusion_state *dec, const int *toks, int n) {
    for (int i = 0; i < n; i++)
        if (rf_constraint_run_accept(dec->cr, toks[i])) {
            grammar_fail(dec);
            return;
        }
}

/* With logprobs: token j of chosen row r (slot masked[chosen[r]]) got its
 * value from logits row `row`. */
static void lp_of(refusion_state *dec, int r, int j, const float *row, int token) {
    ans_logprob(&dec->ans, dec->masked[dec->scratch.chosen[r]] * dec->S + j, row, dec->n_vocab, token);
}

/* Commit chosen rows' tokens to the answer and emit the event. */
static void commit_tokens(refusion_state *dec, rf_event_type kind, int step, int n, const int *slot_of, const int *toks,
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
    if (dec->cr) grammar_commit(dec, toks, n); /* one slot: position order */
}

/* Emit RF_EVENT_DROP for the slots flagged in drop[] (not committed). */
static void emit_drop(refusion_state *dec, int step, const int *masked, int n_masked, const unsigned char *drop) {
    int *answer_pos = rf_scoped_malloc((size_t)n_masked * dec->S * sizeof(int) + 1), n = 0;
    for (int i = 0; i < n_masked; i++)
        if (drop[i])
            for (int j = 0; j < dec->S; j++) answer_pos[n++] = masked[i] * dec->S + j;
    ans_event(&dec->ans, RF_EVENT_DROP, step, n, answer_pos, NULL, NULL);
    rf_scoped_free(answer_pos);
}

static int finish_step(refusion_state *dec);

/* Infilling's draft (step 3): feed rows [cached, S) with every unaccepted
 * token replaced by <|mask|>; each mask proposes the argmax of its own
 * logits (infill_draft_after). */
static void infill_draft(refusion_state *dec) {
    const int S = dec->S, n = S - dec->cached, cached = dec->cached;
    const int *masked = dec->masked, *chosen = dec->scratch.chosen, *spec = dec->scratch.spec;
    const unsigned char *tag = dec->scratch.tag;
    int n_logits = 0;
    for (int r = 0; r < dec->R; r++)
        for (int j = 0; j < n; j++) {
            int t = r * S + cached + j, i = r * n + j;
            dec->tok[i] = tag[t] ? spec[t] : dec->mask_id;
            dec->pos[i] = dec->P + masked[chosen[r]] * S + cached + j;
            if (!tag[t]) dec->logit_idx[n_logits++] = i;
        }
    call(dec, CALL_DRAFT, dec->R, n, n_logits);
}

/* The draft call is over: the appended entries are dropped again (rows
 * cropped to cached), the masks' argmaxes become the drafts (under a
 * grammar the one to be forced next, after the accepted ones, masked). */
static void infill_draft_after(refusion_state *dec) {
    const int S = dec->S, n = dec->call_n, cached = dec->cached;
    int *spec = dec->scratch.spec;
    for (int r = 0; r < dec->R; r++) rf_kv_row_crop(&dec->kv, r, cached);
    for (int q = 0; q < dec->call_nl; q++) {
        int i = dec->logit_idx[q], r = i / n, j = i % n, t = r * S + cached + j;
        spec[t] = rf_logits_stats(logits_row(dec, q), dec->n_vocab).argmax;
        if (dec->cr && dec->scratch.tag[t - 1])
            spec[t] = grammar_argmax(dec, logits_row(dec, q), spec + r * S, cached + j, spec[t]);
        lp_of(dec, r, cached + j, logits_row(dec, q), spec[t]);
    }
}

/* (a): a row's forced token spec_row[j] becomes the AR head's choice, the
 * argmax of logits row `row` (the accepted token before it; under a grammar
 * masked for the state after spec_row[0..j)). Returns 1 when that changed
 * the token. */
static int ar_correct_force(refusion_state *dec, int row, int *spec_row, int j) {
    int ar_choice = rf_logits_stats(logits_row(dec, row), dec->n_vocab).argmax;
    if (dec->cr) ar_choice = grammar_argmax(dec, logits_row(dec, row), spec_row, j, ar_choice);
    if (ar_choice == spec_row[j]) return 0;
    spec_row[j] = ar_choice;
    lp_of(dec, (int)(spec_row - dec->scratch.spec) / dec->S, j, logits_row(dec, row), ar_choice);
    return 1;
}

/* (a) replaced a token whose K/V the rows hold from before: every row is
 * accepted but the common prefix stopped at cached < S. Feed the rest of
 * the rows again (logits only of each row's last token, to keep with (b))
 * so that every committed entry is current. */
static void ar_correct_refeed(refusion_state *dec) {
    const int S = dec->S, keep_ar = dec->ar_logits != NULL, cached = dec->cached;
    const int *masked = dec->masked, *chosen = dec->scratch.chosen, *spec = dec->scratch.spec;
    int n = S - cached, n_logits = 0;
    for (int r = 0; r < dec->R; r++)
        for (int j = 0; j < n; j++) {
            dec->tok[r * n + j] = spec[r * S + cached + j];
            dec->pos[r * n + j] = dec->P + masked[chosen[r]] * S + cached + j;
            if (keep_ar && j == n - 1) dec->logit_idx[n_logits++] = r * n + j;
        }
    call(dec, CALL_REFEED, dec->R, n, n_logits);
}

/* Infilling's verify (step 3): shifted probabilities, forced where the
 * previous token was accepted; logits of the token before every unforced
 * one, before the forced one too with (a), and of each row's last token
 * with (b). */
static void infill_verify(refusion_state *dec) {
    const int S = dec->S, n = S - dec->cached, cached = dec->cached, ar_correct = dec->p->ar_correct;
    const int keep_ar = dec->ar_logits != NULL, *masked = dec->masked, *chosen = dec->scratch.chosen;
    const int *spec = dec->scratch.spec;
    const unsigned char *tag = dec->scratch.tag;
    unsigned char *passes = dec->scratch.passes;
    memcpy(dec->scratch.was_accepted, tag, (size_t)dec->R * S);
    int n_logits = 0;
    for (int r = 0; r < dec->R; r++)
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
    call(dec, CALL_INFILL_VERIFY, dec->R, n, n_logits);
}

/* The verify call is over: each row's tokens judged, the tags and how they
 * got in updated, an accepted EOS ends its row and drops the rows after it. */
static void infill_verify_judge(refusion_state *dec) {
    const int S = dec->S, n = dec->call_n, cached = dec->cached, ar_correct = dec->p->ar_correct;
    const int keep_ar = dec->ar_logits != NULL, *masked = dec->masked, *chosen = dec->scratch.chosen;
    int *spec = dec->scratch.spec, *stale = dec->scratch.stale, R = dec->R;
    unsigned char *tag = dec->scratch.tag, *how = dec->scratch.how, *passes = dec->scratch.passes;
    const unsigned char *was_accepted = dec->scratch.was_accepted;
    for (int r = 0; r < R; r++) {
        stale[r] = -1;
        for (int j = 1; j < n; j++) {
            int t = r * S + cached + j, i = r * n + j;
            if (!passes[t]) {
                passes[t] = prob_of(dec, dec->logit_row[i - 1], spec[t]) > dec->p->token_threshold;
            } else if (ar_correct && !tag[t] && stale[r] < 0) {
                if (ar_correct_force(dec, dec->logit_row[i - 1], spec + r * S, cached + j)) stale[r] = cached + j;
            }
        }
        if (dec->cr) grammar_cut(dec, spec + r * S, passes + r * S);
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
        dec->eos_row = r;
        memset(tag + r * S, 1, S);
        if (r + 1 < R) {
            int *keep = rf_scoped_malloc((size_t)(r + 1) * sizeof(int));
            for (int q = 0; q <= r; q++) keep[q] = q;
            rf_kv_select_rows(&dec->kv, keep, r + 1);
            rf_scoped_free(keep);
        }
        dec->R = r + 1;
        break;
    }
}

/* The verify call is over (the rest of an iteration): the common cached
 * prefix advances, every row's cache is cropped to it. */
static void infill_verify_after(refusion_state *dec) {
    const int S = dec->S;
    const int *masked = dec->masked, *chosen = dec->scratch.chosen, *stale = dec->scratch.stale;
    const unsigned char *tag = dec->scratch.tag;
    infill_verify_judge(dec);
    const int R = dec->R;
    int min_new = S, any_open = 0, cached = dec->cached;
    for (int r = 0; r < R; r++) {
        int c = 0;
        for (int j = cached; j < S; j++) c += tag[r * S + j], any_open |= !tag[r * S + j];
        if (c < min_new) min_new = c;
    }
    cached += any_open ? min_new - 1 : min_new;
    for (int r = 0; r < R; r++)
        if (stale[r] >= 0 && stale[r] < cached) cached = stale[r];
    for (int r = 0; r < R; r++) rf_kv_row_crop(&dec->kv, r, cached);
    dec->cached = cached;
    step_stat(dec)->infill_iters++;
    if (dec->p->on_event) {
        int *answer_pos = rf_scoped_malloc((size_t)R * S * sizeof(int));
        for (int i = 0; i < R * S; i++) answer_pos[i] = masked[chosen[i / S]] * S + i % S;
        ans_event(&dec->ans, RF_EVENT_INFILL_ITER, dec->step, R * S, answer_pos, dec->scratch.spec, tag);
        rf_scoped_free(answer_pos);
    }
    dec->iter++;
}

/* Infilling is over (step 4): commit the rows in position order with their
 * own K/V, cut after the first EOS (which can only be in the EOS row: every
 * accepted token was scanned, and rows before it hold none); then the step
 * ends. 0, or -1 (a row could not be committed). */
static int infill_commit(refusion_state *dec) {
    const int S = dec->S, R = dec->R, K = dec->K, *spec = dec->scratch.spec;
    const int *slot_of = dec->scratch.slot_of; /* row r infilled slot slot_of[r] */
    rf_step *st = step_stat(dec);
    int n_commit = 0;
    for (int r = 0; r < R; r++) {
        int n_keep = S, hit = 0;
        for (int j = 0; j < S && !hit; j++)
            if (spec[r * S + j] == dec->eos_id) n_keep = j + 1, hit = 1;
        if (hit != (r == dec->eos_row)) rf_die("refusion: EOS in infill row %d, expected row %d", r, dec->eos_row);
        if (rf_kv_commit_row(&dec->kv, r, 0, n_keep)) return -1;
        n_commit += n_keep; /* rows before the last are whole: spec stays contiguous */
    }
    rf_kv_unfork(&dec->kv);
    if (dec->eos_row >= 0) dec->eos_slot = slot_of[dec->eos_row];
    st->slots_infilled = R;
    st->tpf_ref = (double)S * K / (2.0 * st->infill_iters + 2.0);
    commit_tokens(dec, RF_EVENT_INFILL_COMMIT, dec->step, n_commit, slot_of, spec, dec->scratch.how);
    for (int k = 0; k < K; k++) dec->scratch.done[dec->scratch.chosen[k]] = 1;
    return finish_step(dec);
}

/* One turn of infilling's loop: finished (every row accepted and cached),
 * a re-feed with (a), or the next iteration's first call. 0, or -1. */
static int infill_next(refusion_state *dec) {
    const int S = dec->S;
    int done = 1;
    for (int i = 0; i < dec->R * S; i++) done &= dec->scratch.tag[i];
    if (done && dec->cached == S) return infill_commit(dec);
    if (done) { /* only (a) stops the common prefix short of S */
        ar_correct_refeed(dec);
        return 0;
    }
    if (dec->iter > S) rf_die("refusion: infilling made no progress");
    /* jacobi: no draft call, the current drafts are verified again */
    if (!dec->p->jacobi) infill_draft(dec);
    else infill_verify(dec);
    return 0;
}

/* Parallel AR infilling of the K chosen slots (step 3 and 4). spec/tag/how
 * ([K][S]) hold the plan and the verification; the cache is replicated into
 * one row per chosen slot. */
static int infill_begin(refusion_state *dec) {
    dec->R = dec->K, dec->cached = 0, dec->iter = 0, dec->eos_row = -1;
    rf_kv_fork(&dec->kv, dec->K, dec->S);
    return infill_next(dec);
}

/* (a)'s re-feed is over: the rows are current, (b) keeps their last logits. */
static int ar_correct_refeed_after(refusion_state *dec) {
    for (int r = 0; r < dec->call_nl; r++) keep_ar_logits(dec, dec->masked[dec->scratch.chosen[r]], r);
    step_stat(dec)->refeeds++;
    dec->cached = dec->S;
    return infill_commit(dec);
}

/* Plan drafts from logits rows q0.. (answer positions apos[]): argmax, or
 * the Gumbel draw with temperature (the only place the RNG is used, so
 * drafting a lookahead plan early keeps the draw order), and the draft's
 * probability. With logprobs every token keeps the log-probabilities of
 * the row that last gave it its value (here, and wherever a token is
 * replaced: lp_of), so a committed token reports the distribution it was
 * drawn from. */
static void plan_drafts(refusion_state *dec, int q0, int n, const int *apos, int *draft, float *conf) {
    for (int i = 0; i < n; i++) {
        const float *row = logits_row(dec, q0 + i);
        rf_logit_stats stats = rf_logits_stats(row, dec->n_vocab);
        draft[i] = dec->p->temperature > 0
                       ? rf_gumbel_argmax(row, dec->n_vocab, dec->p->temperature, stats.max, &dec->rng)
                       : stats.argmax;
        conf[i] = (float)rf_logit_prob(row, &stats, draft[i]);
        ans_logprob(&dec->ans, apos[i], row, dec->n_vocab, draft[i]);
    }
    /* under a grammar the first masked slot is chosen: its first token is
     * drawn again from this row with the grammar's mask (verify) */
    if (dec->cr) memcpy(dec->first_row, logits_row(dec, q0), (size_t)dec->n_vocab * sizeof(float));
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
 * cache (n tokens), each predicting its own position (plan_after). */
static void plan(refusion_state *dec) {
    const int S = dec->S, n = dec->n_masked * S;
    for (int i = 0; i < n; i++) {
        dec->tok[i] = dec->mask_id;
        dec->pos[i] = dec->P + dec->masked[i / S] * S + i % S;
        dec->logit_idx[i] = i;
    }
    call(dec, CALL_PLAN, 1, n, n);
}

/* Step 1, choice: the slots whose first token's confidence is above
 * slot_threshold, in position order, or else the single best one (first on
 * ties). Writes indices into the masked slots to chosen, returns K. */
static int choose_slots(const refusion_state *dec, const float *conf, int n_masked, int *chosen) {
    const int S = dec->S;
    int K = 0;
    if (dec->cr) { /* under a grammar: the frontier */
        chosen[0] = 0;
        return 1;
    }
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
    int *apos = rf_scoped_malloc((size_t)n_next * sizeof(int));
    for (int i = 0; i < n_next; i++) apos[i] = dec->pos[dec->logit_idx[q0 + i]] - dec->P;
    plan_drafts(dec, q0, n_next, apos, dec->next_plan_draft, dec->next_plan_conf);
    rf_scoped_free(apos);
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
            spec[k * S] = dec->tok[k * S] =
                dec->cr ? grammar_argmax(dec, ar_row_logits, NULL, 0, stats.argmax) : stats.argmax;
            lp_of(dec, k, 0, ar_row_logits, spec[k * S]);
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


/* Step 1's choice and step 2's call: the chosen slots' drafts (checked by
 * (b) first), the global verification of their concatenation (with (b)
 * also the logits after each slot's last token, to keep; with lookahead
 * the next plan's masks behind). */
static void verify(refusion_state *dec) {
    const int S = dec->S, n_masked = dec->n_masked, *masked = dec->masked;
    int *draft = dec->scratch.draft, *chosen = dec->scratch.chosen, *spec = dec->scratch.spec;
    unsigned char *how = dec->scratch.how;
    int K = choose_slots(dec, dec->scratch.conf, n_masked, chosen);
    step_stat(dec)->slots_planned = K;
    for (int i = 0; i < K * S; i++) {
        spec[i] = draft[chosen[i / S] * S + i % S];
        dec->tok[i] = spec[i];
        dec->pos[i] = dec->P + masked[chosen[i / S]] * S + i % S;
        dec->logit_idx[i] = dec->pos[i] - dec->P; /* answer positions, for the event */
        how[i] = i % S ? HOW_VERIFIED : HOW_FIRST_FREE;
    }
    ans_event(&dec->ans, RF_EVENT_PLAN, dec->step, K * S, dec->logit_idx, spec, NULL);

    if (dec->cr) grammar_first_token(dec, &spec[0]), dec->tok[0] = spec[0];
    if (dec->ar_logits) ar_check_first_tokens(dec, masked, n_masked, chosen, K, spec, how);

    /* 2. global verification: shifted AR probabilities of the concatenation */
    int n_logits = 0, n_next = 0;
    for (int i = 0; i < K * S; i++) {
        dec->logit_row[i] = -1;
        if ((i + 1) % S ? i + 1 < K * S : dec->ar_logits != NULL)
            dec->logit_row[i] = n_logits, dec->logit_idx[n_logits++] = i;
    }
    if (dec->scratch.next_slots) /* NULL without lookahead */
        n_next = lookahead_feed_masks(dec, dec->block, masked, n_masked, chosen, K, n_logits);
    dec->K = K, dec->n_logits = n_logits, dec->n_next = n_next;
    call(dec, CALL_VERIFY, 1, K * S + n_next, n_logits + n_next);
}

/* Step 2's call is over: the longest accepted prefix is committed with the
 * cache of this very pass (fast path), or every chosen slot is infilled
 * (3. + 4.). 0, or -1. */
static int verify_after(refusion_state *dec) {
    const int S = dec->S, K = dec->K, n_next = dec->n_next, *chosen = dec->scratch.chosen;
    const int *spec = dec->scratch.spec;
    unsigned char *tag = dec->scratch.tag, *passes = dec->scratch.passes, *done = dec->scratch.done;
    int base = dec->kv.len - K * S - n_next;
    for (int i = 0; i < K * S; i++)
        passes[i] = i % S == 0 || prob_of(dec, dec->logit_row[i - 1], spec[i]) > dec->p->token_threshold;
    if (dec->cr) grammar_cut(dec, spec, passes); /* K = 1 */
    for (int i = 0; i < K * S; i++) tag[i] = passes[i] && (i % S == 0 || tag[i - 1]);
    int prefix = 0, eos_at = -1;
    while (prefix < K * S && passes[prefix]) prefix++;
    for (int i = 0; i < prefix && eos_at < 0; i++)
        if (spec[i] == dec->eos_id) eos_at = i;

    int *slot_of = dec->scratch.slot_of;
    for (int k = 0; k < K; k++) slot_of[k] = dec->masked[chosen[k]];
    if (eos_at < 0 && prefix < S) {
        /* 3. + 4. parallel infilling of every chosen slot */
        rf_kv_crop(&dec->kv, base);
        return infill_begin(dec);
    }
    /* fast path: a prefix of this very pass is committed with its cache */
    rf_step *st = step_stat(dec);
    int n_commit = eos_at >= 0 ? eos_at + 1 : prefix / S * S;
    int n_slots_committed = (n_commit + S - 1) / S;
    rf_kv_crop(&dec->kv, base + n_commit);
    if (n_next > 0 && n_commit == K * S && eos_at < 0) /* every chosen slot: the lookahead holds */
        lookahead_keep_plan(dec, dec->n_logits, n_next);
    commit_tokens(dec, RF_EVENT_FAST_COMMIT, dec->step, n_commit, slot_of, spec, dec->scratch.how);
    for (int k = 0; dec->ar_logits && k < n_commit / S; k++) /* (b) */
        keep_ar_logits(dec, slot_of[k], dec->logit_row[k * S + S - 1]);
    for (int k = 0; k < n_slots_committed; k++) done[chosen[k]] = 1;
    st->slots_fast = n_slots_committed;
    st->tpf_ref = S * n_slots_committed / 2.0;
    if (eos_at >= 0) dec->eos_slot = slot_of[eos_at / S];
    return finish_step(dec);
}

/* A new step over the block's masked slots (position order): its plan
 * call, or, when the last verification carried the plan (lookahead), its
 * verification at once. */
static void step_begin(refusion_state *dec) {
    dec->step = dec->ans.n_steps;
    memset(dec->scratch.gone, 0, (size_t)dec->n_masked), memset(dec->scratch.done, 0, (size_t)dec->n_masked);
    dec->eos_slot = -1;
    ans_step(&dec->ans, dec->block);
    if (dec->next_plan_n) {
        lookahead_take_plan(dec, dec->n_masked * dec->S, dec->scratch.draft, dec->scratch.conf);
        verify(dec);
    } else {
        plan(dec);
    }
}

/* The next step: of this block while it has masked slots, else of the next
 * block, unless an EOS was committed or the blocks are over (finished). */
static void step_next(refusion_state *dec) {
    while (dec->n_masked == 0) {
        if (dec->eos_flag || dec->block + 1 >= dec->n_blocks) {
            dec->kind = CALL_NONE, dec->done = 1;
            return;
        }
        int block = ++dec->block;
        for (int slot = dec->block_first[block]; slot < dec->block_first[block + 1]; slot++)
            dec->masked[dec->n_masked++] = slot;
        if (dec->ar_logits && block > 0) ar_logits_next_block(dec, dec->block_first[block], dec->max_block_slots);
        dec->block_start = dec->block_first[block];
    }
    step_begin(dec);
}

/* The step's slots are committed (scratch.done) or dropped after an EOS:
 * they leave the mask list; then the next step. 0. */
static int finish_step(refusion_state *dec) {
    const int n_masked = dec->n_masked, *masked = dec->masked, eos_slot = dec->eos_slot;
    unsigned char *gone = dec->scratch.gone, *done = dec->scratch.done;
    for (int i = 0; i < n_masked; i++) {
        int dropped = eos_slot >= 0 && masked[i] >= eos_slot && !done[i];
        gone[i] = done[i] || dropped;
        done[i] = dropped; /* reused: the slots to report as dropped */
    }
    if (eos_slot >= 0) {
        dec->eos_flag = 1;
        emit_drop(dec, dec->step, masked, n_masked, done);
    }
    dec->n_masked = compact(dec->masked, n_masked, gone);
    step_next(dec);
    return 0;
}

/* ---- the step machine (refusion_step.h) ------------------------------------------ */

/* The buffers for the largest block: the call rows, the kept AR logits and
 * lookahead plan, the steps' scratch. */
static void alloc_buffers(refusion_state *dec, int n_slots) {
    const rf_params *p = dec->p;
    const int mbs = dec->max_block_slots;
    const size_t max_block_tokens = (size_t)mbs * dec->S, mt = (size_t)dec->max_tokens;
    dec->tok = rf_scoped_malloc(mt * sizeof(int));
    dec->pos = rf_scoped_malloc(mt * sizeof(int));
    dec->logit_idx = rf_scoped_malloc(mt * sizeof(int));
    dec->logit_row = rf_scoped_malloc(mt * sizeof(int));
    dec->prefill_pos = rf_scoped_malloc(mt * sizeof(int));
    if (p->lookahead) {
        dec->next_plan_draft = rf_scoped_malloc(mt * sizeof(int));
        dec->next_plan_conf = rf_scoped_malloc(mt * sizeof(float));
    }
    if (p->ar_check_first) {
        dec->ar_logits = rf_scoped_malloc((size_t)(mbs + 1) * dec->n_vocab * sizeof(float));
        dec->ar_logits_ok = rf_scoped_calloc((size_t)mbs + 1, 1);
    }
    dec->scratch.draft = rf_scoped_malloc(max_block_tokens * sizeof(int));
    dec->scratch.spec = rf_scoped_malloc(max_block_tokens * sizeof(int));
    dec->scratch.conf = rf_scoped_malloc(max_block_tokens * sizeof(float));
    dec->scratch.tag = rf_scoped_malloc(max_block_tokens);
    dec->scratch.passes = rf_scoped_malloc(max_block_tokens);
    dec->scratch.how = rf_scoped_malloc(max_block_tokens);
    dec->scratch.was_accepted = rf_scoped_malloc(max_block_tokens);
    dec->scratch.chosen = rf_scoped_malloc((size_t)mbs * sizeof(int));
    dec->scratch.slot_of = rf_scoped_malloc((size_t)mbs * sizeof(int));
    dec->scratch.stale = rf_scoped_malloc((size_t)mbs * sizeof(int));
    dec->scratch.gone = rf_scoped_malloc((size_t)mbs);
    dec->scratch.done = rf_scoped_malloc((size_t)mbs);
    if (p->lookahead) dec->scratch.next_slots = rf_scoped_malloc((size_t)(mbs + mt / dec->S) * sizeof(int));
    dec->masked = rf_scoped_malloc((size_t)n_slots * sizeof(int));
}

rf_pi_seq *rf_pi_seq_new(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p) {
    if (rf_gen_check(m, prompt, n_prompt, p, 0)) return NULL;
    refusion_state *dec = rf_scoped_calloc(1, sizeof *dec);
    dec->m = m;
    dec->params = *p;
    dec->p = p = &dec->params;
    dec->n_vocab = m->cfg.vocab_size;
    dec->S = p->slot_size;
    dec->P = n_prompt;
    dec->gen_len = gen_padded(p);
    dec->mask_id = gen_mask_id(m, p);
    dec->eos_id = gen_eos_id(m, p);
    dec->prompt = rf_scoped_malloc((size_t)n_prompt * sizeof(int));
    memcpy(dec->prompt, prompt, (size_t)n_prompt * sizeof(int));
    rf_rng_seed(&dec->rng, p->seed);

    int n_slots = dec->gen_len / dec->S;
    dec->block_first = rf_scoped_malloc((size_t)(n_slots + 1) * sizeof(int));
    dec->n_blocks = rf_block_layout(n_slots, p->n_blocks, dec->block_first);
    for (int block = 0; block < dec->n_blocks; block++)
        if (dec->block_first[block + 1] - dec->block_first[block] > dec->max_block_slots)
            dec->max_block_slots = dec->block_first[block + 1] - dec->block_first[block];
    /* lookahead: a verification + the next plan */
    dec->max_tokens = dec->max_block_slots * dec->S * (p->lookahead ? 2 : 1);
    if (dec->max_tokens < 256 && dec->max_tokens < dec->P) dec->max_tokens = dec->P < 256 ? dec->P : 256; /* prefill chunk */
    rf_workspace_kv_init(p->ws, &dec->kv, &m->cfg, dec->P + dec->gen_len);
    alloc_buffers(dec, n_slots);
    ans_init(&dec->ans, p, dec->gen_len, dec->eos_id);
    ans_reserve_steps(&dec->ans, n_slots + 1); /* every step commits a slot */
    if (p->constraint) {
        if (!(dec->cr = rf_constraint_run_new(p->constraint, dec->eos_id, dec->n_vocab))) {
            rf_pi_seq_free(dec);
            return NULL;
        }
        dec->grammar_row = rf_scoped_malloc((size_t)dec->n_vocab * sizeof(float));
        dec->first_row = rf_scoped_malloc((size_t)dec->n_vocab * sizeof(float));
    }
    dec->block = -1;
    step_next(dec); /* the first step's plan (made after the prompt's prefill) */
    return dec;
}

int rf_pi_seq_width(const rf_pi_seq *q) { return q->max_tokens; }

int rf_pi_seq_context(const rf_pi_seq *q) { return q->P + q->gen_len + q->S; }

int rf_pi_seq_next(rf_pi_seq *q, int budget, rf_step_call *c) {
    q->handed = 0;
    if (q->done || q->failed || budget < 1) return 0;
    if (gen_cancelled(q->p)) return -1;
    memset(c, 0, sizeof *c);
    c->kv = &q->kv;
    if (q->fed < q->P) { /* the prompt, in chunks, before the first plan */
        int n = q->P - q->fed;
        if (n > q->max_tokens) n = q->max_tokens;
        if (n > budget) n = budget;
        for (int i = 0; i < n; i++) q->prefill_pos[i] = q->fed + i;
        q->prefill_last = n - 1;
        int keep = q->ar_logits && q->fed + n == q->P; /* (b): the prompt's last logits */
        c->b = (rf_batch){1, n, q->prompt + q->fed, q->prefill_pos, 0, keep, &q->prefill_last, NULL};
        return q->handed = n;
    }
    c->b = (rf_batch){q->call_R, q->call_n, q->tok, q->pos, 0, q->call_nl, q->logit_idx, NULL};
    return q->handed = q->call_R * q->call_n;
}

int rf_pi_seq_after(rf_pi_seq *q, const float *logits) {
    int handed = q->handed;
    q->handed = 0;
    if (!handed || q->done || q->failed) {
        rf_set_error("plan-and-infill: logits given with no call handed out");
        return -1;
    }
    if (q->fed < q->P) {
        q->fed += handed;
        if (q->ar_logits && q->fed == q->P) { /* (b): the prompt's last token's logits */
            memcpy(q->ar_logits, logits, (size_t)q->n_vocab * sizeof(float));
            q->ar_logits_ok[0] = 1;
        }
        return 0;
    }
    q->ans.n_calls++;
    step_stat(q)->calls++;
    q->logits = logits;
    int rc = 0;
    switch (q->kind) {
    case CALL_PLAN:
        rf_kv_crop(&q->kv, q->kv.len - q->call_n);
        for (int i = 0; i < q->call_n; i++) q->logit_idx[i] = q->pos[i] - q->P; /* answer positions */
        plan_drafts(q, 0, q->call_n, q->logit_idx, q->scratch.draft, q->scratch.conf);
        verify(q);
        break;
    case CALL_VERIFY: rc = verify_after(q); break;
    case CALL_DRAFT:
        infill_draft_after(q);
        infill_verify(q);
        break;
    case CALL_INFILL_VERIFY:
        infill_verify_after(q);
        rc = infill_next(q);
        break;
    case CALL_REFEED: rc = ar_correct_refeed_after(q); break;
    case CALL_NONE: rf_die("plan-and-infill: a call with no step waiting for it");
    }
    q->logits = NULL;
    if (rc || q->error) {
        q->failed = 1;
        if (q->error) rf_set_error("%s", q->error);
        return -1;
    }
    return q->done;
}

int rf_pi_seq_done(const rf_pi_seq *q) { return q->done || q->failed; }

void rf_pi_seq_free(rf_pi_seq *q) {
    if (!q) return;
    ans_free(&q->ans);
    rf_scoped_free(q->masked), rf_scoped_free(q->block_first), rf_scoped_free(q->tok), rf_scoped_free(q->pos);
    rf_scoped_free(q->logit_idx), rf_scoped_free(q->logit_row), rf_scoped_free(q->prefill_pos);
    rf_scoped_free(q->ar_logits), rf_scoped_free(q->ar_logits_ok), rf_scoped_free(q->next_plan_draft);
    rf_scoped_free(q->next_plan_conf), rf_scoped_free(q->prompt);
    rf_scoped_free(q->scratch.draft), rf_scoped_free(q->scratch.spec), rf_scoped_free(q->scratch.conf);
    rf_scoped_free(q->scratch.tag), rf_scoped_free(q->scratch.passes), rf_scoped_free(q->scratch.how);
    rf_scoped_free(q->scratch.was_accepted), rf_scoped_free(q->scratch.chosen);
    rf_scoped_free(q->scratch.slot_of), rf_scoped_free(q->scratch.stale);
    rf_scoped_free(q->scratch.gone), rf_scoped_free(q->scratch.done), rf_scoped_free(q->scratch.next_slots);
    rf_kv_free(&q->kv);
    rf_constraint_run_free(q->cr);
    rf_scoped_free(q->grammar_row), rf_scoped_free(q->first_row);
    free(q->error);
    rf_scoped_free(q);
}

int rf_pi_seq_finish(rf_pi_seq *q, rf_gen_result *out) {
    memset(out, 0, sizeof *out);
    int rc = q->failed || !q->done ? -1 : 0;
    if (q->error) rf_set_error("%s", q->error);
    else if (!q->failed && !q->done) rf_set_error("plan-and-infill: finished before its answer was complete");
    rc = ans_end(&q->ans, rc, q->P, out); /* q->ans is freed (and zeroed) either way */
    rf_pi_seq_free(q);
    return rc;
}

/* ---- the driver alone ------------------------------------------------------------- */

int rf_generate_refusion(const rf_model *m, const int *prompt, int n_prompt, const rf_params *p,
                         rf_gen_result *out) {
    if (p->rolling) return rf_generate_rolling(m, prompt, n_prompt, p, out);
    memset(out, 0, sizeof *out);
    rf_pi_seq *q = rf_pi_seq_new(m, prompt, n_prompt, p);
    if (!q) return -1;
    const int width = rf_pi_seq_width(q);
    rf_runstate *rs = rf_workspace_runstate(p->ws, &m->cfg, width, rf_pi_seq_context(q));
    float *logits = rf_scoped_malloc((size_t)width * m->cfg.vocab_size * sizeof(float));
    int rc = 0;
    while (!rc && !rf_pi_seq_done(q)) {
        rf_step_call c;
        if (rf_pi_seq_next(q, width, &c) < 1) {
            rc = -1;
            break;
        }
        c.b.logits = logits;
        if ((rc = rf_forward(m, c.kv, rs, &c.b))) break;
        rc = rf_pi_seq_after(q, c.b.n_logits ? logits : NULL) < 0 ? -1 : 0;
    }
    rf_scoped_free(logits);
    rf_workspace_runstate_free(p->ws, rs);
    if (rc) {
        rf_pi_seq_free(q);
        return -1;
    }
    return rf_pi_seq_finish(q, out);
}
