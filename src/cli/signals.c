/* signals.c - the commands that write temporary outputs or start helper
 * processes (eval's sandbox, grow, convert) die of SIGTERM, SIGINT and
 * SIGHUP as before, but first kill the helpers and remove the temporary
 * files and directories the library registered (util/cleanup.h); at their
 * next start they remove what a SIGKILL left. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "util/cleanup.h"

static void on_signal(int sig) {
    rf_cleanup_run();
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_cleanup_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    /* one cleanup at a time: the other stop signals wait for it */
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGHUP);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void report_removed(const char *path, long pid, void *cmd) {
    fprintf(stderr, "refusion: %s: removed %s, left by an interrupted run (process %ld)\n", (const char *)cmd, path,
            pid);
}

void cli_sweep_temps(const char *cmd, const char *out) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", out);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    char *slash = strrchr(dir, '/'), prefix[4096];
    snprintf(prefix, sizeof prefix, "%s", slash ? slash + 1 : dir);
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    /* beside OUT: OUT.tmp.PID (a file), OUT.grow-tmp.PID (grow's directory) */
    rf_sweep_stale(dir, prefix, ".tmp.", report_removed, (void *)cmd);
    rf_sweep_stale(dir, prefix, ".grow-tmp.", report_removed, (void *)cmd);
    /* in OUT, a checkpoint directory: NAME.tmp.PID */
    rf_sweep_stale(out, "", ".tmp.", report_removed, (void *)cmd);
}
