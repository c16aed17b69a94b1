/* progress.h - a progress line on stderr for commands that write large files
 * through library calls that report nothing (init, convert): a thread looks
 * at how many bytes the output holds twice a second and redraws
 *   "init: 3.2 / 16.4 GB (19%), 12 s"
 * Shown when stderr is a terminal (or when forced, e.g. --progress); when
 * stderr is not a terminal it prints one line every 10 s instead of
 * redrawing. The library itself never prints. */
#ifndef RF_PROGRESS_H
#define RF_PROGRESS_H

typedef struct rf_progress rf_progress;

/* path: the output file, or a directory whose regular files are summed;
 * total: the expected size in bytes (0: unknown). force: 1 = always, 0 =
 * only on a terminal, -1 = never. NULL when nothing is shown. */
rf_progress *rf_progress_start(const char *what, const char *path, double total, int force);
/* Stop the thread and end the line. NULL is fine. */
void rf_progress_stop(rf_progress *p);

#endif
