/* forward.h - the transformer forward pass over the KV cache.
 *
 * One call runs R rows x n new tokens. Every token carries an explicit
 * position id (used only by RoPE). Attention is causal over physical order:
 * token j of row r attends to the cache visible to row r (main, plus row r's
 * extension when the cache is forked) and to tokens 0..j of its own row
 * (all n tokens of the row when bidirectional). The new K/V are appended to
 * main (unforked cache, R must be 1) or to each row's extension (forked cache,
 * R must equal c->n_rows). Callers crop what they do not want to keep.
 *
 * Logits are computed only for the tokens listed in logit_idx (indices into
 * the R*n tokens, row-major), because the vocab projection dominates small
 * calls: logits[i, :] is [vocab] for token logit_idx[i]. */
#ifndef RF_FORWARD_H
#define RF_FORWARD_H

#include "model/kvcache.h"
#include "model/model.h"

typedef struct {
    int n_rows;            /* R */
    int n_tok;             /* n tokens per row */
    const int *tokens;     /* [R * n] */
    const int *pos;        /* [R * n] position ids */
    int bidirectional;     /* 1: full attention inside the chunk (MDM) */
    int n_logits;
    const int *logit_idx;  /* [n_logits] */
    float *logits;         /* out: [n_logits, vocab] */
} rf_batch;

/* Scratch buffers for forward calls of up to max_tokens (R*n) tokens. */
typedef struct rf_runstate rf_runstate;
rf_runstate *rf_runstate_new(const rf_config *cfg, int max_tokens, int max_ctx);
void rf_runstate_free(rf_runstate *s);
/* for a session's workspace (model/workspace.c), which keeps one run state
 * between generations. scoped: a decoder's own (scoped blocks, util.h),
 * else plain buffers, all or none. */
rf_runstate *rf_runstate_alloc(const rf_config *cfg, int max_tokens, int max_ctx, int scoped);
void rf_runstate_release(rf_runstate *s);
int rf_runstate_fits(const rf_runstate *s, int max_tokens, int max_ctx);
size_t rf_runstate_bytes(const rf_runstate *s);

/* Returns 0, or -1 with rf_last_error() set (bad token id, cache full,
 * rows mismatch). */
int rf_forward(const rf_model *m, rf_kvcache *c, rf_runstate *s, const rf_batch *b);
/* rf_forward's validation alone: 0 when rf_forward would run b on c with
 * s's sizes, else -1 with the error it would set. */
int rf_forward_check(const rf_model *m, const rf_kvcache *c, const rf_runstate *s, const rf_batch *b);

/* Several calls in one forward pass (continuous batching of every decoder):
 * call i is the rf_batch calls[i] on its own cache kv[i], run exactly as
 * rf_forward runs it alone (R forked rows with their extensions, a
 * bidirectional chunk, a prompt chunk, one AR token), while the weights are
 * read once for all of them. A call's logit_idx index its own tokens; the
 * logits of all the calls go to `logits`, one call's rows after the
 * other's ([sum of n_logits, vocab]); the calls' own logits pointers are
 * not used. Not recorded in the call log (whoever asked for a call records
 * it on its own thread). */
typedef struct {
    int n_calls;
    rf_kvcache *const *kv;  /* [n_calls], distinct */
    const rf_batch *calls;  /* [n_calls] */
    float *logits;          /* out: [sum of the calls' n_logits, vocab] */
} rf_call_batch;

/* 0, or -1 with rf_last_error(): the error rf_forward would give the first
 * call it refuses (its index in *bad, when bad is not NULL), or one of the
 * whole pass (*bad = -1: more tokens in all than the run state holds, two
 * calls on one cache). Nothing is changed then. */
int rf_forward_calls(const rf_model *m, rf_runstate *s, const rf_call_batch *b, int *bad);

/* Rows of different sequences in one call (continuous batching): sequence
 * i feeds n_tok[i] tokens (they follow those of sequence i - 1 in tokens and
 * pos), appended to its own unforked cache kv[i] and attending causally to
 * that cache only, exactly as rf_forward would for the sequence alone; the
 * weights are read once for all of them. Logits as in rf_batch (indices into
 * the concatenated tokens). Not recorded in the call log. */
typedef struct {
    int n_seq;
    rf_kvcache *const *kv;   /* [n_seq], distinct */
    const int *n_tok;        /* [n_seq], each >= 1 */
    const int *tokens, *pos; /* [sum of n_tok] */
    int n_logits;
    const int *logit_idx;    /* [n_logits] */
    float *logits;           /* out: [n_logits, vocab] */
} rf_seq_batch;

/* 0, or -1 with rf_last_error() (a cache full or forked, a token outside the
 * vocabulary, more tokens than the run state holds). A case of
 * rf_forward_calls: one-row calls, logit indices over all of them. */
int rf_forward_seqs(const rf_model *m, rf_runstate *s, const rf_seq_batch *b);

/* Call log: the shape of every rf_forward call made on this thread while a
 * log is attached, for benchmarks that replay a decoder's calls on a model of
 * another size (bench/decode_replay.c). It is a thread-local hook so that the
 * decoders, which own their caches and run states, need no changes. */
typedef struct {
    int n_rows, n_tok;  /* R rows x n new tokens */
    int forked;         /* the cache was forked into rows (R may still be 1) */
    int ctx_main;       /* main cache entries the rows see (main length, or the fork length) */
    int ctx_rows;       /* forked: sum over rows of each row's extension length before the call */
    int n_logits;       /* logits rows computed */
    int bidirectional;
    int pos_min, pos_max; /* position ids fed */
} rf_call_rec;

typedef struct {
    rf_call_rec *rec;
    int n, cap;
} rf_call_log;

/* Record this thread's successful-validation rf_forward calls into log
 * (appending), or stop recording (NULL). Returns the log attached before. */
rf_call_log *rf_call_log_attach(rf_call_log *log);
void rf_call_log_free(rf_call_log *log);
/* rf_forward reports each call that passed validation: appended to this
 * thread's attached log, if any. */
void rf_call_log_record(const rf_kvcache *c, const rf_batch *b);

/* Model calls as the decoders count them, in entries [from, to) of the log.
 * A run of calls that feed only prompt positions (unforked, every position
 * id < n_prompt) is the prompt prefill, done in chunks. The decoders differ
 * in how they count it: AR counts it as one call of its own (its last
 * logits give the first answer token: prefill_own_call = 1); ReFusion counts
 * it as part of the call that follows (the reference feeds prompt + masks
 * together: prefill_own_call = 0). Every other logged call is one call. */
int rf_call_log_model_calls(const rf_call_log *log, int from, int to, int n_prompt, int prefill_own_call);

/* The slow, obviously-correct reference: no cache, the whole physical
 * sequence (tokens[0..n) with position ids pos[0..n)) in one pass, causal
 * over physical order (or bidirectional), naive matmuls, per-position RoPE.
 * logits: [n, vocab] for every token. Tests compare rf_forward against it. */
int rf_forward_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                         int bidirectional, float *logits);

/* The same reference with a visibility rule, for sequences whose cached K/V
 * were computed in forked rows (the naive ReFusion decoder's model): token i
 * attends to token j <= i iff j < vis_end[i] or j >= grp[i] (vis_end = grp =
 * 0: plain causal). Logits [n_out, vocab] of the last n_out tokens. */
int rf_forward_masked_reference(const rf_model *m, int n, const int *tokens, const int *pos,
                                const int *vis_end, const int *grp, int n_out, float *logits);

#endif
