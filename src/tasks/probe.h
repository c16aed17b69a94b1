/* probe.h - what a ReFusion model's two heads know about held-out answers
 * (refusion probe): teacher-forced cross-entropy, top-1 accuracy and
 * probability of the true token, per head and per position class.
 *
 * An example is a prompt (P ids) and an answer (A ids: the response's tokens
 * followed by EOS, as the trainer builds it). Answer position j has position
 * id P + j. The answer is cut into slots of S tokens like the decoder cuts
 * it; the last slot may be shorter (positions past the EOS are absent: no
 * mask is fed for them). Three views, each predicting every answer token
 * once:
 *
 *   AR         the AR head: prompt + answer fed in natural order (causal);
 *              the logits at the token before answer position j predict j
 *              (j = 0: the prompt's last token).
 *   mask/slot  the mask head, slot by slot: for slot k, the prompt and the
 *              answer's slots before k (committed, natural order), then slot
 *              k's positions as <|mask|> with their true position ids; the
 *              logits at each mask predict the token at that position. What
 *              the decoder's plan sees when it decodes left to right.
 *   mask/all   the mask head with the whole answer masked at once after the
 *              prompt: what the decoder's first plan call sees.
 *
 * Position classes (slot size S), the same rule for every view:
 *   start      j = 0
 *   slot       j > 0 and j % S == 0: a slot's first token. For the AR head it
 *              is the slot boundary (predicted from the previous slot's last
 *              token); for the mask head the slot-first token.
 *   later      j % S != 0: inside a slot. */
#ifndef RF_PROBE_H
#define RF_PROBE_H

#include <jansson.h>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

typedef enum { RF_PROBE_AR, RF_PROBE_MASK_SLOT, RF_PROBE_MASK_ALL, RF_PROBE_N_VIEWS } rf_probe_view;
typedef enum { RF_PROBE_START, RF_PROBE_SLOT, RF_PROBE_LATER, RF_PROBE_N_CLASSES } rf_probe_class;

/* "ar" | "mask_slot" | "mask_all" and "start" | "slot" | "later"; the
 * display name of a class depends on the view ("slot boundary" for the AR
 * head, "slot-first" for the mask head). */
const char *rf_probe_view_name(int view);
const char *rf_probe_class_name(int cls);
const char *rf_probe_class_label(int view, int cls);

/* The class of answer position j for slot size S. */
rf_probe_class rf_probe_class_of(int j, int slot_size);

/* Sums over the positions of one (view, class). */
typedef struct {
    long n;          /* positions */
    long n_top1;     /* the head's argmax (first index of the max) is the true token */
    double ce_sum;   /* sum of -log p(true token), nats */
    double prob_sum; /* sum of p(true token) */
} rf_probe_cell;

typedef struct {
    int slot_size;
    int n_examples;
    rf_probe_cell cell[RF_PROBE_N_VIEWS][RF_PROBE_N_CLASSES];
} rf_probe_stats;

/* One position's numbers (for tests and per-example output). */
typedef struct {
    double ce, prob;
    int top1;
} rf_probe_pos;

/* Probe one example and add its numbers into st (st->slot_size is S; zero
 * the rest first). per_pos, if not NULL, receives [RF_PROBE_N_VIEWS][A]
 * entries: per_pos[v * A + j]. mask_id: the <|mask|> id. 0, or -1 with
 * rf_last_error() (bad ids, empty prompt or answer, too long for the
 * context). Runs on the KV cache: P + 3A tokens fed in all (the answer once
 * as itself, once as per-slot masks, once as the all-mask view). */
int rf_probe_example(const rf_model *m, const int *prompt, int n_prompt, const int *answer, int n_answer,
                     int mask_id, rf_probe_stats *st, rf_probe_pos *per_pos);

/* Probe the first limit examples (0 = all) of a loaded task file: prompt =
 * the chat template of the query (rf_chat_query_ids), answer = the
 * response's tokens + the tokenizer's EOS, mask = the tokenizer's <|mask|>.
 * st->slot_size must be set; the rest is reset. on_done (optional) is called
 * after each example (for a progress display). Errors name the example. */
typedef void (*rf_probe_progress_cb)(int done, int total, void *user);
int rf_probe_run(const rf_model *m, const rf_tokenizer *tok, const json_t *examples, int limit,
                 rf_probe_stats *st, rf_probe_progress_cb on_done, void *user);

/* Mean cross-entropy, accuracy, mean probability of a cell (0 when empty). */
double rf_probe_cell_ce(const rf_probe_cell *c);
double rf_probe_cell_acc(const rf_probe_cell *c);
double rf_probe_cell_prob(const rf_probe_cell *c);

/* The stats as JSON ({"slot_size", "examples", "views": {view: {class:
 * {n, ce, acc, prob}, "all": {...}}}}) and as a Markdown table (malloc'd). */
json_t *rf_probe_json(const rf_probe_stats *st);
char *rf_probe_markdown(const rf_probe_stats *st);

#endif
