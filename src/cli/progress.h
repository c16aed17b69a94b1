/* progress.h - progress lines on stderr (the library itself never prints).
 *
 * rf_progress: for commands that write large files
 * through library calls that report nothing (init, convert): a thread looks
 * at how many bytes the output holds twice a second and redraws
 *   "init: 3.2 / 16.4 GB (19%), 12 s, eta 0m51s"
 * Shown when stderr is a terminal (or when forced, e.g. --progress); when
 * stderr is not a terminal it prints one line every 10 s instead of
 * redrawing. The library itself never prints. */
#ifndef RF_PROGRESS_H
#define RF_PROGRESS_H

#include "common/args.h"

typedef struct rf_progress rf_progress;

/* --progress (1) / --no-progress (-1) into one int (0: neither given), the
 * rows of the commands that use rf_progress: RF_PROGRESS_GROUP(&force). */
extern const rf_opt rf_progress_table[];
extern const int rf_progress_table_n;
#define RF_PROGRESS_GROUP(force) {NULL, rf_progress_table, rf_progress_table_n, (force), NULL, NULL}

/* path: the output file, or a directory whose regular files are summed;
 * total: the expected size in bytes (0: unknown). force: 1 = always, 0 =
 * only on a terminal, -1 = never. NULL when nothing is shown. */
rf_progress *rf_progress_start(const char *what, const char *path, double total, int force);
/* Stop the thread and end the line. NULL is fine. */
void rf_progress_stop(rf_progress *p);

/* A progress line for a loop over a known number of items (eval, probe),
 * redrawn by the caller after each item:
 *   "eval: [#########.....................]  90/300  acc 45.6%  120 tok/s  eta 1m20s"
 * On a terminal the line is redrawn in place at most 4 times a second (and
 * at the end); otherwise one line is printed each time another tenth of the
 * items is done. */
typedef struct {
    const char *what;
    int total, tty, on;
    int tenth;           /* the last tenth printed (not a terminal) */
    double t0, last;     /* start; the last redraw (terminal) */
} rf_meter;

/* quiet: 1 = print nothing (--quiet). */
void rf_meter_init(rf_meter *m, const char *what, int total, int quiet);
/* done items of total; extra: what follows the count (may be NULL). */
void rf_meter_update(rf_meter *m, int done, const char *extra);
/* End the terminal's line when the loop stopped before the last item. */
void rf_meter_abort(rf_meter *m);
/* rf_eval_opts.on_example (tasks/eval.h) for a meter passed as user: the
 * accuracy and speed so far after the count, "acc 45.6%  120 tok/s". */
struct rf_eval_agg;
void rf_meter_eval_example(int done, int total, const struct rf_eval_agg *all, void *meter);

#endif
