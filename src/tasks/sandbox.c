/* sandbox.c - see sandbox.h.
 *
 * Process layout: the caller forks a relay (its own process group) that
 * enters new network, PID and mount namespaces (plus a user namespace when
 * not root) and forks the runner, PID 1 of the new namespace; when the
 * runner dies the kernel kills everything the program started in it. The
 * caller waits for the relay with a deadline and kills the whole group at
 * the deadline (and once more afterwards, for anything left). The runner
 * mounts its private view (sandbox_confine.h), sets the limits, drops
 * root, confines the file system with Landlock and execs python3 on
 * the driver below, which sanitises the candidate (HumanEval), installs the
 * guard and runs candidate + tests; exit status 0 is a pass. */
#include "tasks/sandbox.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tasks/sandbox_confine.h"
#include "util/cleanup.h"
#include "util/util.h"

void rf_sandbox_default(rf_sandbox_limits *l) {
    memset(l, 0, sizeof *l);
    l->wall_s = 10.0;
    l->cpu_s = 10;
    l->mem_bytes = (size_t)2 << 30;
    l->file_bytes = (size_t)16 << 20;
    l->procs = 32;
}

/* The driver run by python3 (argv[1]: the entry point, or ""). The
 * sanitiser follows the rules of the authors' HumanEval filter
 * (lm_eval/tasks/humaneval/sanitize_utils.py): tabs to spaces, the longest
 * run of lines that parses, then the imports and the top-level classes,
 * functions that return something and assignments that the entry point
 * reaches through the names they mention. */
static const char driver_py[] =
    "import ast, builtins, os, sys, traceback\n"
    "_exit = os._exit\n"
    "def longest_valid(text):\n"
    "    lines = text.splitlines()[:100]\n"
    "    best, best_n = '', 0\n"
    "    for i in range(len(lines)):\n"
    "        for j in range(len(lines), i, -1):\n"
    "            n = sum(1 for s in lines[i:j] if s.strip())\n"
    "            if n <= best_n:\n"
    "                break\n"
    "            chunk = '\\n'.join(lines[i:j])\n"
    "            try:\n"
    "                ast.parse(chunk)\n"
    "            except (SyntaxError, MemoryError, ValueError):\n"
    "                continue\n"
    "            best, best_n = chunk, n\n"
    "            break\n"
    "    return best\n"
    "def mentions(node):\n"
    "    out, todo = set(), [node]\n"
    "    while todo:\n"
    "        for c in ast.iter_child_nodes(todo.pop()):\n"
    "            if isinstance(c, ast.Name):\n"
    "                out.add(c.id)\n"
    "            elif isinstance(c, ast.Attribute):\n"
    "                out.add(c.attr)\n"
    "            else:\n"
    "                todo.append(c)\n"
    "    return out\n"
    "def sanitize(text, entry):\n"
    "    text = text.replace('\\t', '    ').replace('\\r\\n', '\\n').replace('\\r', '\\n').strip() + '\\n'\n"
    "    tree = ast.parse(longest_valid(text))\n"
    "    imports, defs = [], {}\n"
    "    for node in tree.body:\n"
    "        if isinstance(node, (ast.Import, ast.ImportFrom)):\n"
    "            imports.append(node)\n"
    "        elif isinstance(node, ast.ClassDef):\n"
    "            defs[node.name] = node\n"
    "        elif isinstance(node, ast.FunctionDef):\n"
    "            if any(isinstance(n, ast.Return) for n in ast.walk(node)):\n"
    "                defs[node.name] = node\n"
    "        elif isinstance(node, ast.Assign) and node.targets and isinstance(node.targets[0], ast.Name):\n"
    "            defs[node.targets[0].id] = node\n"
    "    uses = {k: mentions(v) for k, v in defs.items()}\n"
    "    seen, todo = set(), [entry]\n"
    "    while todo:\n"
    "        k = todo.pop()\n"
    "        if k not in seen:\n"
    "            seen.add(k)\n"
    "            todo.extend(uses.get(k, set()) - seen)\n"
    "    keep = [ast.unparse(n) for n in imports] + [ast.unparse(v) for k, v in defs.items() if k in seen]\n"
    "    return '\\n'.join(keep)\n"
    "def guard():\n"
    "    import shutil, subprocess\n"
    "    for name in ('system', 'popen', 'execl', 'execle', 'execlp', 'execlpe', 'execv', 'execve', 'execvp',\n"
    "                 'execvpe', 'spawnl', 'spawnle', 'spawnlp', 'spawnlpe', 'spawnv', 'spawnve', 'spawnvp',\n"
    "                 'spawnvpe', 'posix_spawn', 'posix_spawnp', 'kill', 'killpg', '_exit', 'putenv',\n"
    "                 'unsetenv', 'chroot', 'setuid', 'setgid', 'chown', 'lchown', 'fchown'):\n"
    "        if hasattr(os, name):\n"
    "            setattr(os, name, None)\n"
    "    for name in ('Popen', 'run', 'call', 'check_call', 'check_output', 'getoutput', 'getstatusoutput'):\n"
    "        setattr(subprocess, name, None)\n"
    "    shutil.rmtree = shutil.move = shutil.chown = None\n"
    "def main():\n"
    "    with open('candidate.py', encoding='utf-8') as f:\n"
    "        src = f.read()\n"
    "    with open('tests.py', encoding='utf-8') as f:\n"
    "        tests = f.read()\n"
    "    entry = sys.argv[1] if len(sys.argv) > 1 else ''\n"
    "    if entry:\n"
    "        src = sanitize(src, entry)\n"
    "    guard()\n"
    "    code = compile(src + '\\n' + tests, 'sample.py', 'exec')\n"
    "    exec(code, {'__name__': '__main__', '__builtins__': builtins})\n"
    "try:\n"
    "    main()\n"
    "except BaseException:\n"
    "    traceback.print_exc()\n"
    "    sys.stderr.flush()\n"
    "    _exit(1)\n"
    "sys.stdout.flush()\n"
    "sys.stderr.flush()\n"
    "_exit(0)\n";

/* ---- the child side (async-signal-safe calls only after fork) ---- */
static void put_flag(int fd, char c) {
    if (write(fd, &c, 1) < 0) { /* the caller then reports the protection as absent */
    }
}

static int write_str(const char *path, const char *s) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, s, strlen(s));
    close(fd);
    return n == (ssize_t)strlen(s) ? 0 : -1;
}

static void set_limit(int what, rlim_t v) {
    struct rlimit r = {v, v};
    setrlimit(what, &r);
}

/* what the relay and the runner work from (copied by fork) */
typedef struct {
    const char *dir, *python, *entry;
    const rf_sandbox_limits *l;
    const rf_sandbox_paths *paths;
    pid_t caller;  /* the process that forked the relay */
    int flags_fd;  /* to the caller: the protections in force, the runner's id */
    int alive_fd;  /* the runner's end of a pipe the relay holds open, or -1 */
    int as_root;
} child_args;

/* Killed with SIGKILL when the parent dies, from now on (a change of
 * credentials clears this: set it after setuid); _exit when it is already
 * gone. The runner, PID 1 of its namespace, cannot see its parent's id:
 * the pipe the relay holds open says whether it lives. */
static void die_with_parent(const child_args *a) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (a->alive_fd < 0) {
        if (getppid() != a->caller) _exit(126);
        return;
    }
    struct pollfd p = {a->alive_fd, POLLIN, 0};
    if (poll(&p, 1, 0) != 0) _exit(126); /* the relay never writes: an event is its end */
}

/* the runner: never returns */
static void run_python(const child_args *a, int in_namespaces) {
    const rf_sandbox_limits *l = a->l;
    /* a private view needs the new mount and PID namespaces; without them
     * only the working directory changes */
    int view = in_namespaces ? rf_sandbox_private_view(a->dir, l->file_bytes) : (chdir(a->dir) ? -1 : 0);
    if (view < 0) _exit(126);
    if (view) put_flag(a->flags_fd, 'v');
    int in = open("/dev/null", O_RDONLY), out = open("out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(126);
    set_limit(RLIMIT_CPU, (rlim_t)l->cpu_s);
    set_limit(RLIMIT_AS, (rlim_t)l->mem_bytes);
    set_limit(RLIMIT_FSIZE, (rlim_t)l->file_bytes);
    set_limit(RLIMIT_NPROC, (rlim_t)l->procs);
    set_limit(RLIMIT_NOFILE, 64);
    set_limit(RLIMIT_CORE, 0);
    if (a->as_root) {
        /* root is exempt from RLIMIT_NPROC and may write anywhere: run as nobody */
        if (setgroups(0, NULL) || setgid(65534) || setuid(65534)) _exit(126);
        put_flag(a->flags_fd, 'r');
    }
    die_with_parent(a);
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (rf_sandbox_landlock(a->paths, view)) put_flag(a->flags_fd, 'f');
    close_range(3, ~0u, 0);
    char *const argv[] = {(char *)"python3", (char *)"-I", (char *)"-B", (char *)"driver.py", (char *)a->entry, NULL};
    char *const envp[] = {NULL};
    execve(a->python, argv, envp);
    _exit(127);
}

/* the relay: never returns */
static void relay(child_args *a) {
    setpgid(0, 0);
    uid_t uid = getuid();
    gid_t gid = getgid();
    int ns = unshare(CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS | (a->as_root ? 0 : CLONE_NEWUSER)) == 0;
    if (ns && !a->as_root) {
        /* keep our own ids inside the user namespace (files stay ours) */
        char map[64];
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        write_str("/proc/self/setgroups", "deny");
        write_str("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        write_str("/proc/self/gid_map", map);
    }
    if (!ns) run_python(a, 0);
    die_with_parent(a);
    put_flag(a->flags_fd, 'n');
    int alive[2];
    if (pipe2(alive, O_CLOEXEC)) _exit(126);
    pid_t c = fork();
    if (c < 0) _exit(126);
    if (c == 0) {
        close(alive[1]);
        a->alive_fd = alive[0];
        put_flag(a->flags_fd, 'p');
        run_python(a, 1);
    }
    close(alive[0]);
    /* the caller kills the runner at the deadline: everything in the
     * namespace dies with it, and this wait returns once it is all gone */
    char msg[32];
    int k = snprintf(msg, sizeof msg, "P%d;", (int)c);
    if (write(a->flags_fd, msg, (size_t)k) < 0) { /* then the caller kills the whole group */
    }
    close(a->flags_fd);
    int st;
    while (waitpid(c, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
    /* died of a signal: say which through the exit status (128 + n), as a shell does */
    _exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 126);
}

/* ---- the caller's side ---- */
static int write_file(const char *dir, const char *name, const char *text) {
    char *p = rf_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    int ok = f && fwrite(text, 1, strlen(text), f) == strlen(text);
    if (f && fclose(f)) ok = 0;
    if (!ok) rf_set_error("sandbox: cannot write %s: %s", p, strerror(errno));
    free(p);
    return ok ? 0 : -1;
}

static void read_tail(const char *dir, char *tail, size_t cap) {
    char *p = rf_path_join(dir, "out.txt");
    tail[0] = 0;
    FILE *f = fopen(p, "rb");
    free(p);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    long from = n > (long)cap - 1 ? n - (long)cap + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t k = fread(tail, 1, cap - 1, f);
    tail[k] = 0;
    for (size_t i = 0; i < k; i++)
        if (!tail[i]) tail[i] = ' ';
    fclose(f);
}

/* Wait for the relay until the deadline, reading the flags it sends; at the
 * deadline kill the namespace's init (all of it dies, the relay returns
 * once it is gone), or without a namespace, or if that does not end it
 * within a second, the whole group. The relay's wait status. */
static int wait_relay(pid_t pid, int flags_fd, double wall_s, char *flags, size_t cap, int *timed_out) {
    size_t nf = 0;
    double deadline = rf_now() + wall_s;
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR)) break;
        ssize_t k = read(flags_fd, flags + nf, cap - 1 - nf);
        if (k > 0) nf += (size_t)k;
        flags[nf] = 0;
        if (rf_now() >= deadline) {
            *timed_out = 1;
            const char *P = strchr(flags, 'P');
            int runner = P ? atoi(P + 1) : 0;
            kill(runner > 0 ? runner : -pid, SIGKILL);
            int reaped = 0;
            for (double hard = rf_now() + 1.0; !(reaped = waitpid(pid, &st, WNOHANG) == pid) && rf_now() < hard;) {
                struct timespec ts = {0, 2000000};
                nanosleep(&ts, NULL);
            }
            if (!reaped) {
                kill(-pid, SIGKILL);
                while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
                }
            }
            break;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    /* whatever is left of the group (without a PID namespace, what the
     * program forked), and wait until it is gone, for at most two seconds */
    kill(-pid, SIGKILL);
    for (double until = rf_now() + 2.0; rf_now() < until && !(kill(-pid, 0) < 0 && errno == ESRCH);) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    for (ssize_t k; nf < cap - 1 && (k = read(flags_fd, flags + nf, cap - 1 - nf)) > 0;) nf += (size_t)k;
    flags[nf] = 0;
    return st;
}

static void fill_result(rf_sandbox_result *res, const char *flags, int st) {
    res->net_isolated = strchr(flags, 'n') != NULL;
    res->pid_isolated = strchr(flags, 'p') != NULL;
    res->fs_confined = strchr(flags, 'f') != NULL;
    res->dropped_root = strchr(flags, 'r') != NULL;
    res->view_private = strchr(flags, 'v') != NULL;
    if (WIFEXITED(st)) {
        res->exit_code = WEXITSTATUS(st);
        if (res->exit_code > 128 && res->exit_code < 128 + 65) res->signal = res->exit_code - 128;
    } else if (WIFSIGNALED(st)) {
        res->signal = WTERMSIG(st);
    }
    res->passed = !res->timed_out && WIFEXITED(st) && res->exit_code == 0;
}

/* Run the relay on the files in dir; 0 with *res filled, or -1. */
static int run_in(const char *dir, const char *python, const char *entry, const rf_sandbox_limits *l,
                  rf_sandbox_result *res) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) {
        rf_set_error("sandbox: pipe: %s", strerror(errno));
        return -1;
    }
    rf_sandbox_paths paths;
    rf_sandbox_interpreter_paths(python, &paths);
    fflush(NULL);
    pid_t caller = getpid(), pid = fork();
    if (pid < 0) {
        rf_set_error("sandbox: fork: %s", strerror(errno));
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        child_args a = {dir, python, entry ? entry : "", l, &paths, caller, fds[1], -1, geteuid() == 0};
        relay(&a);
    }
    close(fds[1]);
    setpgid(pid, pid); /* also here: no window in which the group does not exist yet */
    /* a program ended by a signal kills the group first (util/cleanup.h) */
    int group = rf_cleanup_add_group(pid);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    char flags[64];
    int st = wait_relay(pid, fds[0], l->wall_s, flags, sizeof flags, &res->timed_out);
    rf_cleanup_drop(group);
    close(fds[0]);
    fill_result(res, flags, st);
    read_tail(dir, res->tail, sizeof res->tail);
    return 0;
}

/* A directory named refusion-sandbox-<pid>-XXXXXX, locked (flock) while it
 * is in use: rf_sandbox_sweep removes it once its writer is gone. The
 * directory's fd holding the lock, or -1. */
static int make_dir(const char *tmp, char *dir, size_t cap) {
    snprintf(dir, cap, "%s/refusion-sandbox-%d-XXXXXX", tmp, (int)getpid());
    if (!mkdtemp(dir)) {
        rf_set_error("sandbox: cannot make a temporary directory in %s: %s", tmp, strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || flock(fd, LOCK_EX)) {
        rf_set_error("sandbox: cannot lock %s: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        rf_remove_tree(dir);
        return -1;
    }
    return fd;
}

int rf_sandbox_run(const char *code, const char *tests, const char *entry_point, const rf_sandbox_limits *l,
                   rf_sandbox_result *res) {
    rf_sandbox_limits def;
    if (!l) rf_sandbox_default(&def), l = &def;
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    const char *python = l->python ? l->python : "/usr/bin/python3";
    if (access(python, X_OK)) {
        rf_set_error("sandbox: cannot run %s: %s (Debian: apt-get install python3)", python, strerror(errno));
        return -1;
    }
    const char *tmp = l->tmp_base ? l->tmp_base : "/tmp";
    struct stat bst;
    if (geteuid() == 0 && (stat(tmp, &bst) || !(bst.st_mode & S_IXOTH))) {
        rf_set_error("sandbox: %s must be a directory others may enter (the sample runs as nobody)", tmp);
        return -1;
    }
    char dir[PATH_MAX];
    int lock = make_dir(tmp, dir, sizeof dir);
    if (lock < 0) return -1;
    int slot = rf_cleanup_add_path(dir), rc = -1;
    if (write_file(dir, "driver.py", driver_py) || write_file(dir, "candidate.py", code) ||
        write_file(dir, "tests.py", tests))
        goto done;
    if (geteuid() == 0 && chown(dir, 65534, 65534)) {
        rf_set_error("sandbox: cannot hand %s to nobody: %s", dir, strerror(errno));
        goto done;
    }
    rc = run_in(dir, python, entry_point, l, res);
done:
    if (rf_remove_tree(dir) && rc == 0) {
        rf_set_error("sandbox: could not remove %s", dir);
        rc = -1;
    }
    rf_cleanup_drop(slot);
    close(lock);
    return rc;
}

int rf_sandbox_sweep(const char *tmp_base) {
    const char *tmp = tmp_base ? tmp_base : "/tmp";
    DIR *d = opendir(tmp);
    if (!d) return 0;
    int n = 0;
    const char *stem = "refusion-sandbox-";
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, stem, strlen(stem))) continue;
        char *end;
        long pid = strtol(e->d_name + strlen(stem), &end, 10);
        if (*end != '-' || !rf_pid_gone(pid)) continue;
        char *p = rf_path_join(tmp, e->d_name);
        /* its writer is gone here, and no one (in another PID namespace) holds it */
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && rf_remove_tree(p) == 0) n++;
        if (fd >= 0) close(fd);
        free(p);
    }
    closedir(d);
    return n;
}
