/* tune.h - where the AMX tiles pay on this machine, measured on a model's
 * own weights.
 *
 * At the amx tier a bf16 call of n tokens can run on TDPBF16PS tiles or on
 * the avx512 kernel, a packed Q8_0 / Q4_0 call on TDPBSUD tiles or on
 * vpdpbusd (kernels.h rf_matmul_set_amx_bf16 / _int8). Which is faster
 * depends on the machine, not only on the CPU model: two VMs of the same
 * Xeon model disagreed by 10-25% either way. rf_tune_amx times whole
 * forward calls of the model both ways, interleaved (per round the two
 * paths in A B B A or B A A B order, a few milliseconds apart, so the
 * machine's minute-to-minute speed swings hit both alike), and says from
 * how many tokens the tiles win: the value for REFUSION_AMX_BF16 or
 * REFUSION_AMX_INT8 (util/env.c). */
#ifndef RF_MODEL_TUNE_H
#define RF_MODEL_TUNE_H

#include "model/model.h"

enum { RF_TUNE_MAX_WIDTHS = 16 };

/* one call width: the tiles' time over the other path's (median over the
 * rounds and its bootstrap 95% interval), and each path's median ms */
typedef struct {
    int width;
    double ratio, lo, hi;
    double ms_tiles, ms_other;
} rf_tune_point;

typedef struct {
    int int8;                               /* 1: the int8 tiles (Q8_0 / Q4_0 weights), 0: bf16 */
    int n_points;
    rf_tune_point points[RF_TUNE_MAX_WIDTHS];
    int min_tokens;                         /* the crossover (rf_tune_crossover) */
} rf_tune_result;

/* Measures m's tile crossover: m's layer weights must be bf16, or packed
 * Q8_0 / Q4_0, and the active tier amx. rounds >= 3. The kernel settings
 * in force before are restored. Not while other threads run matmuls (the
 * settings are process-wide). 0, or -1 with rf_last_error(). */
int rf_tune_amx(const rf_model *m, int rounds, rf_tune_result *out);

/* The smallest measured width from which the tiles were faster at that
 * width and every wider one measured, faster meaning the whole 95%
 * interval of the ratio below 1 (a tie keeps the avx512 kernels: two runs
 * of the same comparison minutes apart can differ by more than one run's
 * interval); 0 (off) when they were not faster at the widest. */
int rf_tune_crossover(const rf_tune_point *p, int n);

#endif
