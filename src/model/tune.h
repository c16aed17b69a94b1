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

#include <stdint.h>

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



/* ---- the avx512 tier's packed bf16 kernel (kernels.h rf_matmul_bf16p_kernel):
 * vdpbf16ps against the widened-FMA kernel, on whole forward calls of the
 * model's own shapes, interleaved as above ---- */
typedef struct {
    int n_points;
    rf_tune_point points[RF_TUNE_MAX_WIDTHS]; /* ratio: vdpbf16ps / fma; ms_tiles: vdpbf16ps, ms_other: fma */
    int kernel;                               /* the choice (rf_tune_bf16p_choice) */
    double max_logit_diff;                    /* max |dp - fma| over the calls' logits / max |fma| */
} rf_tune_bf16p_result;

/* m's layer weights must be packed bf16 and the active tier avx512 or amx;
 * rounds >= 3. The setting in force before is restored. 0, or -1 with
 * rf_last_error(). */
int rf_tune_bf16p(const rf_model *m, int rounds, rf_tune_bf16p_result *out);
/* RF_BF16P_DP when vdpbf16ps won (the whole 95% interval below 1) at the
 * widest width measured and lost clearly (interval above 1) at none; else
 * RF_BF16P_FMA, the default. */
int rf_tune_bf16p_choice(const rf_tune_point *p, int n);

/* ---- the panel kernels' prefetch level (kernels.h rf_matmul_set_prefetch_l2):
 * every call prefetching into L2 against every call into L1, on whole
 * forward calls of the model's own shapes, interleaved as above ---- */
typedef struct {
    int n_points;
    rf_tune_point points[RF_TUNE_MAX_WIDTHS]; /* ratio: L2 / L1; ms_tiles: L2, ms_other: L1 */
    int max_tokens;                           /* the choice (rf_tune_prefetch_choice) */
    double max_logit_diff;                    /* max |L2 - L1| over the calls' logits / max |L1|: 0 */
} rf_tune_prefetch_result;

/* m's layer weights must be packed (any packed type, at any tier); rounds
 * >= 3. The setting in force before is restored. 0, or -1 with
 * rf_last_error(). */
int rf_tune_prefetch(const rf_model *m, int rounds, rf_tune_prefetch_result *out);
/* The widest measured width up to which L2 was not slower (median ratio
 * <= 1, interval not above 1) at that width and every narrower one, when it
 * was faster (the whole interval below 1) at the narrowest; else 0 (L1 at
 * every width). */
int rf_tune_prefetch_choice(const rf_tune_point *p, int n);

/* ---- the panel kernels' stream count (kernels.h rf_matmul_set_stream_panels):
 * every tile streaming one panel at a time against the kernels' own counts,
 * on whole forward calls of the model's own shapes, interleaved as above ---- */
typedef struct {
    int n_points;
    rf_tune_point points[RF_TUNE_MAX_WIDTHS]; /* ratio: one panel / own; ms_tiles: one, ms_other: own */
    int panels;                               /* the choice (rf_tune_stream_panels_choice): 1 or 0 */
    double max_logit_diff;                    /* max |one - own| over the calls' logits / max |own|: 0 */
} rf_tune_panels_result;

/* m's layer weights must be packed (any packed type, at any tier); rounds
 * >= 3. The setting in force before is restored. 0, or -1 with
 * rf_last_error(). */
int rf_tune_stream_panels(const rf_model *m, int rounds, rf_tune_panels_result *out);
/* 1 (one panel at a time) when it was faster (the whole interval below 1)
 * at the narrowest width measured (AR's 1-token calls) and clearly slower
 * (interval above 1) at none; else 0 (the kernels' own counts). */
int rf_tune_stream_panels_choice(const rf_tune_point *p, int n);

/* ---- the tune cache (tune_cache.c): the choices `refusion tune` measured,
 * one file per CPU model, $XDG_CACHE_HOME/refusion/tune-<cpu hash>.txt
 * ($HOME/.cache when XDG_CACHE_HOME is unset), holding the CPU model
 * string and the build that measured them. Loaded at model load
 * (rf_model_load) unless disabled; a file of another build (stale) or one
 * that does not parse (corrupt) is ignored with one warning. ---- */

/* this CPU's model string (cpuid brand) and this build's identity */
const char *rf_tune_cpu_model(void);
const char *rf_tune_build_id(void);
/* the cache file of this CPU into buf; -1 (with rf_last_error) when no
 * cache folder is known or the path does not fit */
int rf_tune_cache_path(char *buf, size_t cap);
enum { RF_TUNE_MAX_COST = 64 };
/* what a cache file holds; -1 for a choice it does not hold */
typedef struct {
    int bf16p_kernel;              /* RF_BF16P_* (REFUSION_BF16P) */
    int prefetch_l2;               /* REFUSION_PREFETCH_L2's N, 0 off */
    int stream_panels;             /* REFUSION_STREAM_PANELS's N, 0 the kernels' own */
    int amx_bf16, amx_int8;        /* the tiles' crossovers (REFUSION_AMX_BF16 / _INT8), 0 off */
    uint64_t cost_key;             /* the call-cost table (rf_call_cost_key; 0: none) */
    int n_cost;                    /* its widths (0: none) */
    float cost[RF_TUNE_MAX_COST];  /* c(1) .. c(n_cost) */
} rf_tune_choices;
/* Parses a cache file into c, with key c->cost_key's table (set it first;
 * 0 for none): 1 when valid (it holds at least one choice or table); 0
 * when there is no file; -1 when it is corrupt or stale, with the reason
 * in warn. */
int rf_tune_cache_read(const char *path, rf_tune_choices *c, char *warn, size_t cap);
/* Writes set's choices (those >= 0; the valid existing file's others are
 * kept) and set's table (n_cost > 0: replacing cost_key's, keeping the
 * other keys') to this CPU's cache file: the folder created, written to a
 * temporary name, then renamed. 0, or -1 with rf_last_error (a table of
 * more than RF_TUNE_MAX_COST widths or a cost outside [0.5, 1e4]). */
int rf_tune_cache_write(const rf_tune_choices *set);
/* set's fields all -1, no table: what a writer starts from */
rf_tune_choices rf_tune_choices_none(void);

/* ---- the adaptive rolling slot's cost model in the cache: c(n), the time
 * of an n-token forward call over a 1-token call (decode.h
 * rf_call_cost_measure), depends on the model's shapes and weight types,
 * the kernels' tier and the thread count, so a table is kept per key of
 * those; `refusion tune` measures it, a decoder that needs it reads it
 * (decode.h rf_call_cost_get) and times the calls itself when it is not
 * there. ---- */
/* the key of m's table at the active tier with `threads` OpenMP threads
 * (never 0) */
uint64_t rf_call_cost_key(const rf_model *m, int threads);
/* The widths of key's table in this CPU's cache, with cost[0 .. n) filled
 * (room for RF_TUNE_MAX_COST), when the cache is on (see
 * rf_tune_cache_apply); else 0 (a corrupt or stale file was reported when
 * the model loaded). */
int rf_tune_cache_call_cost(uint64_t key, float *cost);

/* Applies this CPU's cache (rf_model_load calls it: a small file read per
 * load) unless rf_tune_cache_disable was called or REFUSION_TUNE=off;
 * REFUSION_BF16P, REFUSION_PREFETCH_L2, REFUSION_STREAM_PANELS and REFUSION_AMX_BF16 / _INT8,
 * where set, win over its choices. A corrupt or stale file's
 * warning goes to the program's log callback (rf_log_set, as RF_LOG_WARN;
 * the library prints nothing). 1 applied, 0 nothing to apply, -1 ignored. */
int rf_tune_cache_apply(void);
/* no cache from now on in this process (`refusion --no-tune`) */
void rf_tune_cache_disable(void);
/* what the last rf_tune_cache_apply did: "off", "none", "applied: <path>"
 * or "ignored: <path>" ("" before any) */
const char *rf_tune_cache_state(void);
#endif
