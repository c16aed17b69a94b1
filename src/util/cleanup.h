/* cleanup.h - what must not outlive a program that a signal ends: the
 * temporary files and directories it is writing, and the process groups of
 * the helpers it started. The library registers each while it exists; a
 * program's SIGTERM / SIGINT handler calls rf_cleanup_run (system calls
 * only, so it may run in a signal handler) and then dies of the signal. The
 * library never installs a handler itself.
 *
 * What a SIGKILL leaves is found by the next run: temporary names carry the
 * writer's process id (rf_pid_gone says whether it still runs). */
#ifndef RF_CLEANUP_H
#define RF_CLEANUP_H

#include <sys/types.h>

/* Register a path (a file, or a directory removed with everything in it) or
 * a process group (killed with SIGKILL); the slot to drop once it is
 * renamed, removed or reaped, or -1 when the registry is full (then it is
 * simply not cleaned up on a signal). Thread-safe. */
int rf_cleanup_add_path(const char *path);
int rf_cleanup_add_group(pid_t pgid);
void rf_cleanup_drop(int slot);
/* the same by the registered path (no effect when it is not registered) */
void rf_cleanup_drop_path(const char *path);

/* Kill the registered groups, then remove the registered paths (retrying
 * for up to 2 s while a killed writer still holds them). Async-signal-safe. */
void rf_cleanup_run(void);

/* Remove path and everything under it without following symbolic links,
 * whatever modes the writer set on its directories: 0 when path is gone.
 * Async-signal-safe (no allocation; at most 32 directory levels deep). */
int rf_remove_tree(const char *path);

/* In dir, remove each entry named <prefix><marker><pid> (prefix "" for
 * any name, pid all digits) whose writer is gone; report(path, pid, user),
 * when not NULL, is called for each one removed. The number removed. */
int rf_sweep_stale(const char *dir, const char *prefix, const char *marker,
                   void (*report)(const char *path, long pid, void *user), void *user);

/* 1 when no process with this id runs here (the writer of a temporary name
 * is gone), 0 when one does or the id is not a process id. */
int rf_pid_gone(long pid);

#endif
