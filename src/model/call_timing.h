/* call_timing.h - forward calls of a model timed under two kernel settings,
 * interleaved so that a machine whose speed drifts from minute to minute
 * slows both alike.
 *
 * A C-token context is fed once; then every round runs the sides in
 * A B B A order (B A A B every other round, so that neither side holds the
 * round's middle), each side's settings applied before its calls, and each
 * side a call of every width after the context (logits for every new
 * token; the cache cropped back to the context after each call). One
 * untimed round comes first (scratch buffers, page faults, tile state).
 * A side's seconds in a round are the mean of its calls there.
 *
 * rf_tune_amx (tune.h) and bench/model_forward_ab.c measure with it. */
#ifndef RF_MODEL_CALL_TIMING_H
#define RF_MODEL_CALL_TIMING_H

#include "model/model.h"

typedef struct {
    int ctx;           /* context tokens, fed before the timed calls (>= 1) */
    const int *widths; /* tokens per call (>= 1), n_widths of them */
    int n_widths;
    int n_sides; /* 2: sides 0 and 1 interleaved; 1: side 0 in all four places */
    int rounds;  /* timed rounds (>= 1) */
    /* puts side's kernel settings in force (called before each side's
     * calls, also in the untimed round); NULL: none */
    void (*apply)(int side, void *arg);
    /* optional, after each call, outside the timed span: round (-1 for the
     * untimed one), side, width index, the call's logits
     * ([widths[w]][vocab], valid during the callback only) and its measured
     * seconds; returns the seconds to record */
    double (*after_call)(int round, int side, int w, const float *logits, double seconds, void *arg);
    void *arg;
} rf_call_timing;

/* Runs p on m and fills seconds[(round * n_sides + side) * n_widths + w]
 * (rounds * n_sides * n_widths values). The kernel settings are left as the
 * last side's apply put them. Not while other threads use m's matmuls if
 * apply changes process-wide settings. 0, or -1 with rf_last_error(). */
int rf_call_timing_run(const rf_model *m, const rf_call_timing *p, double *seconds);

#endif
