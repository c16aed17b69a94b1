/* util_cleanup.c - util/cleanup.h: rf_remove_tree removes a nested tree
 * whose directories the writer made unreadable or read-only, without
 * following a symbolic link out of it; rf_sweep_stale removes exactly the
 * entries named PREFIX MARKER PID whose process is gone; rf_cleanup_run
 * kills a registered process group and removes the registered paths but not
 * a dropped one; a full registry refuses with -1. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/cleanup.h"
#include "util/util.h"

static char base[64];

static void touch(const char *rel) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) close(fd);
}
static void mkd(const char *rel, mode_t mode) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    mkdir(p, mode);
}
static void set_mode(const char *rel, mode_t mode) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    chmod(p, mode);
}
static int there(const char *rel) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", base, rel);
    struct stat st;
    return lstat(p, &st) == 0;
}

/* the id of a process that has ended (and been reaped) */
static long dead_pid(void) {
    pid_t c = fork();
    if (c == 0) _exit(0);
    waitpid(c, NULL, 0);
    return (long)c;
}

static void remove_tree(void) {
    mkd("t", 0755), mkd("t/a", 0755), mkd("t/a/b", 0755), mkd("t/ro", 0755), mkd("t/none", 0755);
    touch("t/a/b/f"), touch("t/ro/f"), touch("t/none/f"), touch("outside");
    char target[256], link[256];
    snprintf(target, sizeof target, "%s/outside", base);
    snprintf(link, sizeof link, "%s/t/a/link", base);
    CHECK(symlink(target, link) == 0, "symlink");
    snprintf(link, sizeof link, "%s/t/dirlink", base);
    CHECK(symlink(base, link) == 0, "symlink to a directory");
    set_mode("t/ro", 0500), set_mode("t/none", 0);
    char t[256];
    snprintf(t, sizeof t, "%s/t", base);
    CHECK(rf_remove_tree(t) == 0 && !there("t"), "the tree is still there");
    CHECK(there("outside"), "a link was followed out of the tree");
    CHECK(rf_remove_tree(t) == 0, "removing what is gone is done");
    snprintf(t, sizeof t, "%s/outside", base);
    CHECK(rf_remove_tree(t) == 0 && !there("outside"), "a plain file");
}

static void sweep(void) {
    long gone = dead_pid();
    char name[128];
    const char *keep[] = {"out.tmp.abc", "out.tmp.", "out.tmpx.1", "other.tmp.%ld", "out.tmp.%ld0000000000",
                          "out.grow-tmp.%ld"};
    snprintf(name, sizeof name, "out.tmp.%ld", gone);
    touch(name);
    mkd("out.tmp.x", 0755); /* not digits */
    snprintf(name, sizeof name, "out.tmp.%ld", (long)getpid());
    touch(name); /* its writer runs */
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(name, sizeof name, keep[i], gone);
        touch(name);
    }
    CHECK(rf_sweep_stale(base, "out", ".tmp.", NULL, NULL) == 1, "one stale file");
    snprintf(name, sizeof name, "out.tmp.%ld", gone);
    CHECK(!there(name), "%s is left", name);
    snprintf(name, sizeof name, "out.tmp.%ld", (long)getpid());
    CHECK(there(name), "a live writer's %s was removed", name);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(name, sizeof name, keep[i], gone);
        CHECK(there(name), "%s was removed", name);
    }
    /* "" matches any name, the last marker's digits name the writer */
    snprintf(name, sizeof name, "model.safetensors.tmp.x.tmp.%ld", gone);
    touch(name);
    CHECK(rf_sweep_stale(base, "", ".tmp.", NULL, NULL) == 2, "any name: this one and other.tmp.PID");
    CHECK(!there(name), "%s is left", name);
    snprintf(name, sizeof name, "out.grow-tmp.%ld", gone);
    mkd("out.grow-tmp.d", 0755);
    CHECK(rf_sweep_stale(base, "out", ".grow-tmp.", NULL, NULL) == 1 && !there(name), "grow's marker");
}

static void registry(void) {
    pid_t c = fork();
    if (c == 0) {
        setpgid(0, 0);
        pause();
        _exit(0);
    }
    setpgid(c, c);
    mkd("reg", 0755), touch("reg/f"), touch("kept");
    char p[256], k[256];
    snprintf(p, sizeof p, "%s/reg", base);
    snprintf(k, sizeof k, "%s/kept", base);
    int a = rf_cleanup_add_group(c), b = rf_cleanup_add_path(p), d = rf_cleanup_add_path(k);
    CHECK(a >= 0 && b >= 0 && d >= 0, "registered");
    rf_cleanup_drop_path(k);
    rf_cleanup_run();
    int st = 0;
    waitpid(c, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the group was not killed");
    CHECK(!there("reg") && there("kept"), "registered removed, dropped kept");
    rf_cleanup_drop(a), rf_cleanup_drop(b);
    int slots[65], n = 0;
    for (int i = 0; i < 65; i++) slots[i] = rf_cleanup_add_path(p), n += slots[i] >= 0;
    CHECK(n == 64 && slots[64] == -1, "a full registry: %d taken", n);
    for (int i = 0; i < 65; i++) rf_cleanup_drop(slots[i]);
    CHECK(rf_cleanup_add_path(p) >= 0, "slots are free again");
}

int main(void) {
    snprintf(base, sizeof base, "/tmp/rf_util_cleanup.XXXXXX");
    if (!mkdtemp(base)) return perror("mkdtemp"), 1;
    remove_tree();
    sweep();
    registry();
    rf_remove_tree(base);
    return check_summary("util_cleanup");
}
