/* sandbox_confine.h - what the sandbox's runner (tasks/sandbox.c) does to
 * itself before it execs python3: its own view of the file system (a fresh
 * /proc, empty private /tmp and /dev/shm) and Landlock rules that let it
 * read only the interpreter's files and write only its own directory.
 *
 * The paths are gathered by the caller before it forks (that side may
 * allocate); the two confine functions run in the forked child and use
 * system calls only. */
#ifndef RF_SANDBOX_CONFINE_H
#define RF_SANDBOX_CONFINE_H

#include <limits.h>
#include <stddef.h>

enum { RF_SB_READ = 1, RF_SB_EXEC = 2, RF_SB_WRITE = 4 };

typedef struct {
    int n;
    struct {
        char path[PATH_MAX];
        int access; /* RF_SB_* */
    } p[24];
} rf_sandbox_paths;

/* The files python at `python` needs: the interpreter itself, the shared
 * libraries and the standard library under its prefix and the system's,
 * the loader's cache and /etc/localtime; the devices a program reads
 * (/dev/null, /dev/zero, /dev/urandom). Paths that do not exist are left
 * out. */
void rf_sandbox_interpreter_paths(const char *python, rf_sandbox_paths *out);

/* In a new mount namespace (and, for /proc, the PID namespace whose init
 * the caller is): the mounts made private, empty tmpfs on /tmp and
 * /dev/shm (tmp_bytes each), the directory dir bind-mounted at
 * /tmp/<its name> and made the working directory, a fresh /proc. Returns 1
 * when all of that holds, 0 when the view is the host's (the working
 * directory is dir all the same), -1 when dir cannot be entered. */
int rf_sandbox_private_view(const char *dir, size_t tmp_bytes);

/* Landlock over the calling thread and what it execs: reads and execution
 * under paths only, everything in the working directory, writes to
 * /dev/null, and (private_view) /proc, /tmp and /dev/shm, which are the
 * sandbox's own then; from ABI 4 no TCP, from ABI 6 no signals or abstract
 * sockets out of the sandbox. 1 when in force, 0 when the kernel has no
 * Landlock or refused the rules. */
int rf_sandbox_landlock(const rf_sandbox_paths *paths, int private_view);

#endif
