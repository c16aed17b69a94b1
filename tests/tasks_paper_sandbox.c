/* tasks_paper_sandbox.c - the code sandbox (tasks/sandbox.h) under hostile
 * samples: an infinite loop, a sleep past the deadline, a fork bomb, a 10 GB
 * allocation, a file written outside its directory, a TCP connect to a
 * listener on 127.0.0.1, os.system, and exiting early with status 0. Each
 * must come back as a failed sample (not an error), the next run must work
 * as before, and nothing may be left behind: no temporary directory, no
 * process, no file outside, no connection. Then what the sample can see:
 * only its own processes in /proc, no world-readable file of the host
 * outside its directory and the interpreter's (one in the host's /tmp,
 * /dev/shm, /var/tmp, /etc/hostname), while its own files, the standard
 * library and a private /tmp work. Short limits keep it fast. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "tasks/sandbox.h"
#include "util/util.h"

static char base[256], outside[300], own_dirs[64];
static rf_sandbox_limits box;

static int dir_entries(const char *d) {
    DIR *dp = opendir(d);
    if (!dp) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dp));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(dp);
    return n;
}

/* processes still running the driver */
static int drivers_alive(void) {
    DIR *dp = opendir("/proc");
    int n = 0;
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char p[300], cmd[512] = {0}, cwd[512] = {0};
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd < 0) continue;
        ssize_t k = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        for (ssize_t i = 0; i < k; i++)
            if (!cmd[i]) cmd[i] = ' ';
        snprintf(p, sizeof p, "/proc/%s/cwd", e->d_name);
        ssize_t m = readlink(p, cwd, sizeof cwd - 1);
        if (m > 0) cwd[m] = 0;
        /* the sample sees its directory at /tmp/<name> (its private /tmp)
         * or where it is, under base; the name carries this process's id */
        if (strstr(cmd, "driver.py") && (!strncmp(cwd, base, strlen(base)) || strstr(cwd, own_dirs))) n++;
    }
    if (dp) closedir(dp);
    return n;
}

static rf_sandbox_result run(const char *what, const char *code, const char *tests, int want_pass) {
    rf_sandbox_result r;
    int rc = rf_sandbox_run(code, tests, NULL, &box, &r);
    CHECK(rc == 0, "%s: the sandbox failed: %s", what, rc ? rf_last_error() : "");
    CHECK(rc || r.passed == want_pass, "%s: passed = %d, want %d (exit %d, signal %d, timeout %d): %s", what,
          r.passed, want_pass, r.exit_code, r.signal, r.timed_out, r.tail);
    CHECK(dir_entries(base) == 0, "%s: %d entries left in %s", what, dir_entries(base), base);
    CHECK(drivers_alive() == 0, "%s: %d processes left", what, drivers_alive());
    return r;
}

static int exists(const char *name) {
    char p[400];
    snprintf(p, sizeof p, "%s/%s", outside, name);
    struct stat st;
    return stat(p, &st) == 0;
}

/* a world-readable file at path holding "secret" (0 when it could not be made) */
static int plant(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fputs("secret\n", f);
    fclose(f);
    chmod(path, 0644);
    return 1;
}

/* a sample (it passes when it cannot) that reads each of the paths */
static void cannot_read(const char *what, const char *const *paths, int n) {
    char code[2048];
    size_t k = (size_t)snprintf(code, sizeof code, "import sys\nfor p in [");
    for (int i = 0; i < n; i++) k += (size_t)snprintf(code + k, sizeof code - k, "%s'%s'", i ? ", " : "", paths[i]);
    snprintf(code + k, sizeof code - k,
             "]:\n    try:\n        open(p, 'rb').read()\n    except OSError:\n        continue\n"
             "    sys.exit('read ' + p)\n");
    run(what, code, "", 1);
}

/* its own processes in /proc; its files, the standard library and a
 * private /tmp it may write */
static void own_view(void) {
    run("host processes",
        "import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "cmds = [open('/proc/%s/cmdline' % p, 'rb').read() for p in pids]\n"
        "assert all(b'driver.py' in c for c in cmds), cmds\nassert pids == ['1'], pids\n",
        "", 1);
    char code[1024], host_tmp[300];
    snprintf(host_tmp, sizeof host_tmp, "%s-private", base);
    snprintf(code, sizeof code,
             "import json, decimal, os\nassert 'def' in open('candidate.py').read()\n"
             "with open('%s', 'w') as f:\n    f.write('x')\nassert open('%s').read() == 'x'\n",
             host_tmp, host_tmp);
    run("reads the sandbox allows", code, "def f():\n    return 1\n", 1);
    struct stat st;
    CHECK(stat(host_tmp, &st) != 0, "a write to the sample's /tmp reached the host's");
    unlink(host_tmp);
}

static void see_the_host(int namespaces) {
    if (namespaces) own_view();
    else printf("note: no namespaces here; the sample sees the host's /proc, /tmp and /dev/shm\n");

    /* the host's /tmp and /dev/shm: the sample's own are empty */
    char in_tmp[400], in_shm[300], in_var[300];
    snprintf(in_tmp, sizeof in_tmp, "%s/secret", outside);
    snprintf(in_shm, sizeof in_shm, "/dev/shm/rf-sandbox-secret-%d", (int)getpid());
    snprintf(in_var, sizeof in_var, "/var/tmp/rf-sandbox-secret-%d", (int)getpid());
    int shm = plant(in_shm);
    CHECK(plant(in_tmp), "cannot write %s", in_tmp);
    const char *tmps[] = {in_tmp, in_shm};
    if (namespaces) cannot_read("the host's /tmp and /dev/shm", tmps, shm ? 2 : 1);
    /* elsewhere: Landlock's read rules */
    int var = plant(in_var);
    const char *others[] = {"/etc/hostname", "/etc/passwd", var ? in_var : "/etc/hostname"};
    if (rf_sandbox_landlock_abi() >= 1) cannot_read("files outside", others, 3);
    else printf("note: no Landlock here; the sample may read any world-readable file\n");
    unlink(in_tmp), unlink(in_shm), unlink(in_var);
}

int main(void) {
    snprintf(base, sizeof base, "/tmp/rf-sandbox-test-XXXXXX");
    if (!mkdtemp(base)) return perror("mkdtemp"), 1;
    chmod(base, 0711); /* run as root, the sample is nobody, who must enter it */
    snprintf(outside, sizeof outside, "%s-outside", base);
    mkdir(outside, 0777);
    chmod(outside, 0777); /* writable by anyone: only the sandbox may stop a write */
    snprintf(own_dirs, sizeof own_dirs, "/refusion-sandbox-%d-", (int)getpid());
    rf_sandbox_default(&box);
    box.wall_s = 2, box.cpu_s = 1, box.mem_bytes = (size_t)512 << 20, box.procs = 16, box.tmp_base = base;

    /* the ordinary cases */
    rf_sandbox_result r = run("right", "def f(x):\n    return x + 1\n", "assert f(1) == 2\n", 1);
    printf("protections: network %d, pids %d, files %d, not root %d, view %d\n", r.net_isolated, r.pid_isolated,
           r.fs_confined, r.dropped_root, r.view_private);
    CHECK(!r.pid_isolated || r.view_private, "in its own namespaces the sample has the host's /proc or /tmp");
    run("wrong", "def f(x):\n    return x\n", "assert f(1) == 2\n", 0);
    run("syntax error", "def f(x) return x\n", "assert f(1) == 1\n", 0);
    run("sanitised", "", "", 1); /* nothing at all runs fine */

    /* hostile ones */
    r = run("infinite loop", "while True:\n    pass\n", "", 0);
    CHECK(r.signal != 0 || r.timed_out, "infinite loop ended by a signal or the timeout");
    r = run("sleep", "import time\ntime.sleep(60)\n", "", 0);
    CHECK(r.timed_out, "sleep past the deadline is killed at the deadline");
    run("fork bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "", 0);
    r = run("10 GB", "x = bytearray(10 * 1024 ** 3)\nx[-1] = 1\n", "", 0);
    CHECK(strstr(r.tail, "MemoryError") != NULL, "10 GB: a MemoryError (%s)", r.tail);

    char code[1024];
    snprintf(code, sizeof code, "with open('%s/escaped', 'w') as f:\n    f.write('x')\n", outside);
    r = run("write outside", code, "", 0);
    /* Landlock is what confines the writes: where the kernel has it, it must be in force */
    long abi = rf_sandbox_landlock_abi();
    CHECK(abi < 1 || r.fs_confined, "the kernel has Landlock ABI %ld but the sample was not confined", abi);
    if (abi >= 1) CHECK(!exists("escaped"), "a file was written outside the sandbox");
    else printf("note: no Landlock here; the write outside was not confined\n");

    /* a listener on 127.0.0.1 the sample tries to reach */
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int listening = ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 4) == 0 &&
                    getsockname(ls, (struct sockaddr *)&a, &al) == 0;
    CHECK(listening, "test listener: %s", strerror(errno));
    snprintf(code, sizeof code,
             "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', %d))\ns.sendall(b'hi')\n",
             ntohs(a.sin_port));
    r = run("socket connect", code, "", 0);
    if (listening) {
        int c = accept(ls, NULL, NULL);
        CHECK(c < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "the sample reached the listener");
        if (c >= 0) close(c);
    }
    if (ls >= 0) close(ls);

    snprintf(code, sizeof code, "import os\nos.system('touch %s/by_system')\n", outside);
    run("os.system", code, "", 0);
    CHECK(!exists("by_system"), "os.system ran a command");
    run("exit(0) before the tests", "exit(0)\n", "assert False\n", 0);
    run("os._exit(0) before the tests", "import os\nos._exit(0)\n", "assert False\n", 0);
    run("sys.exit(0) in the tests", "", "import sys\nsys.exit(0)\n", 0);

    see_the_host(r.pid_isolated);

    /* and the next sample is scored as ever */
    run("right again", "def g():\n    return 3\n", "assert g() == 3\n", 1);
    CHECK(dir_entries(outside) == 0, "%d files outside", dir_entries(outside));

    rmdir(outside);
    rmdir(base);
    return check_summary("tasks_paper_sandbox");
}
