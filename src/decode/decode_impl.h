/* decode_impl.h - bookkeeping shared by the decoders (not part of the API):
 * the answer being filled in, streaming of its final prefix, per-step
 * statistics, events. The model calls and the cache are each decoder's own. */
#ifndef RF_DECODE_IMPL_H
#define RF_DECODE_IMPL_H

#include "decode/decode.h"

typedef struct {
    const rf_gen_params *p;
    int G;               /* answer length (ReFusion: padded to whole slots) */
    int eos;             /* resolved EOS id, -1 = none */
    int *tok;            /* [G] token at each answer position, -1 while masked */
    int frontier;        /* answer positions [0, frontier) are final and reported */
    int stopped;         /* the frontier passed an EOS: nothing after it counts */
    int refills;         /* fills of an already filled position: must stay 0 */
    rf_step_stat *steps;
    int n_steps, cap_steps;
    int n_calls;
    double t0;
} rf_answer;

void ans_init(rf_answer *a, const rf_gen_params *p, int G, int eos);
void ans_free(rf_answer *a);
/* Record a committed token (answer position apos). */
void ans_fill(rf_answer *a, int apos, int tok);
/* Advance the final prefix and hand the new tokens to p->on_tokens. */
void ans_flush(rf_answer *a);
/* Start the statistics of a new step. */
rf_step_stat *ans_step(rf_answer *a, int block);
/* Fill *out (answer up to and including the first EOS, stats, timings) and
 * free a. -1 if an answer position before the end / first EOS was never
 * filled or one was filled twice (a decoder bug; tests rely on this). */
int ans_finish(rf_answer *a, int n_prompt, rf_gen_result *out);
void ans_event(const rf_answer *a, rf_event_kind kind, int step, int n, const int *apos,
               const int *tok, const unsigned char *accepted);

/* eos / mask ids after resolving RF_ID_FROM_MODEL */
int gen_eos_id(const rf_model *m, const rf_gen_params *p);
int gen_mask_id(const rf_model *m, const rf_gen_params *p);
/* gen_length padded up to whole slots */
static inline int gen_padded(const rf_gen_params *p) {
    return (p->gen_length + p->slot_size - 1) / p->slot_size * p->slot_size;
}

#endif
