/* cleanup.c - see cleanup.h. The registry is a fixed table of slots, each
 * claimed, filled and then published with an atomic state, so that a
 * signal handler reading it at any moment sees only complete entries. */
#include "util/cleanup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

enum { FREE, FILLING, LIVE };
enum { N_SLOTS = 64, MAX_DEPTH = 32 };

static struct {
    atomic_int state;
    pid_t group; /* > 0: a process group, else path */
    char path[PATH_MAX];
} slots[N_SLOTS];

static int claim(void) {
    for (int i = 0; i < N_SLOTS; i++) {
        int expect = FREE;
        if (atomic_compare_exchange_strong(&slots[i].state, &expect, FILLING)) return i;
    }
    return -1;
}

int rf_cleanup_add_path(const char *path) {
    if (strlen(path) >= PATH_MAX) return -1;
    int i = claim();
    if (i < 0) return -1;
    slots[i].group = 0;
    memcpy(slots[i].path, path, strlen(path) + 1);
    atomic_store(&slots[i].state, LIVE);
    return i;
}

int rf_cleanup_add_group(pid_t pgid) {
    if (pgid <= 1) return -1;
    int i = claim();
    if (i < 0) return -1;
    slots[i].group = pgid;
    atomic_store(&slots[i].state, LIVE);
    return i;
}

void rf_cleanup_drop(int slot) {
    if (slot >= 0 && slot < N_SLOTS) atomic_store(&slots[slot].state, FREE);
}

void rf_cleanup_drop_path(const char *path) {
    for (int i = 0; i < N_SLOTS; i++)
        if (atomic_load(&slots[i].state) == LIVE && slots[i].group <= 0 && !strcmp(slots[i].path, path)) {
            rf_cleanup_drop(i);
            return;
        }
}

/* ---- removal with system calls only ---- */

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static int remove_in(int dfd, const char *name, int depth);

/* empty the open directory fd: read a batch, remove it, read again until
 * nothing is left (removing while reading moves the offsets) */
static int empty_dir(int fd, int depth) {
    char buf[1024] __attribute__((aligned(8)));
    int rc = 0;
    for (;;) {
        lseek(fd, 0, SEEK_SET);
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n < 0) return -1;
        int removed = 0, others = 0;
        for (long off = 0; off < n;) {
            struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + off);
            off += e->d_reclen;
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            others++;
            if (remove_in(fd, e->d_name, depth) == 0) removed++;
            else rc = -1;
        }
        if (!others) return 0;
        if (!removed) return rc ? rc : -1; /* nothing more will go */
    }
}

static int remove_in(int dfd, const char *name, int depth) {
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    if (depth >= MAX_DEPTH) return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == EACCES && fchmodat(dfd, name, 0700, 0) == 0)
        fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    /* a directory the writer made read-only keeps its entries */
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & 0700) != 0700) fchmod(fd, 0700);
    empty_dir(fd, depth + 1);
    close(fd);
    return unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
}

int rf_remove_tree(const char *path) {
    return remove_in(AT_FDCWD, path, 0);
}

int rf_pid_gone(long pid) {
    if (pid <= 0 || pid > INT_MAX) return 0;
    return kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

void rf_cleanup_run(void) {
    int saved = errno;
    for (int i = 0; i < N_SLOTS; i++)
        if (atomic_load(&slots[i].state) == LIVE && slots[i].group > 0) kill(-slots[i].group, SIGKILL);
    /* a writer killed just now may still finish the call it was in */
    for (int tries = 0; tries < 200; tries++) {
        int left = 0;
        for (int i = 0; i < N_SLOTS; i++)
            if (atomic_load(&slots[i].state) == LIVE && slots[i].group <= 0 && rf_remove_tree(slots[i].path))
                left++;
        if (!left) break;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    errno = saved;
}

/* the writer's id when name is <prefix><marker><digits>, else 0 */
static long temp_owner(const char *name, const char *prefix, const char *marker) {
    size_t np = strlen(prefix), nm = strlen(marker);
    if (strncmp(name, prefix, np)) return 0;
    const char *m = NULL;
    if (np) m = strncmp(name + np, marker, nm) ? NULL : name + np;
    else /* the last one: "a.tmp.b.tmp.12" is b's temporary */
        for (const char *f = strstr(name, marker); f; f = strstr(f + 1, marker)) m = f;
    if (!m) return 0;
    const char *digits = m + nm;
    if (!*digits || strspn(digits, "0123456789") != strlen(digits) || strlen(digits) > 9) return 0;
    return atol(digits);
}

int rf_sweep_stale(const char *dir, const char *prefix, const char *marker,
                   void (*report)(const char *path, long pid, void *user), void *user) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long pid = temp_owner(e->d_name, prefix, marker);
        if (!pid || !rf_pid_gone(pid)) continue;
        char *p = rf_path_join(dir, e->d_name);
        if (rf_remove_tree(p) == 0) {
            n++;
            if (report) report(p, pid, user);
        }
        free(p);
    }
    closedir(d);
    return n;
}
