/* sandbox_confine.c - see sandbox_confine.h. */
#include "tasks/sandbox_confine.h"

#include "tasks/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- the paths, gathered before the fork ---- */

static void add_path(rf_sandbox_paths *o, const char *path, int access) {
    struct stat st;
    if (o->n >= (int)(sizeof o->p / sizeof o->p[0]) || strlen(path) >= sizeof o->p[0].path || stat(path, &st))
        return;
    snprintf(o->p[o->n].path, sizeof o->p[0].path, "%s", path);
    o->p[o->n++].access = access;
}

void rf_sandbox_interpreter_paths(const char *python, rf_sandbox_paths *o) {
    memset(o, 0, sizeof *o);
    const int rx = RF_SB_READ | RF_SB_EXEC;
    char *real = realpath(python, NULL);
    if (real) {
        add_path(o, real, rx);
        /* PREFIX/bin/pythonX.Y: the standard library is PREFIX/lib/pythonX.Y,
         * Debian's packages PREFIX/lib/python3 and PREFIX/local/lib/pythonX.Y */
        char *slash = strrchr(real, '/');
        const char *name = slash ? slash + 1 : real;
        char prefix[PATH_MAX], p[PATH_MAX + 64];
        snprintf(prefix, sizeof prefix, "%.*s", slash ? (int)(slash - real) : 0, real);
        char *up = strrchr(prefix, '/');
        if (up) *up = 0;
        snprintf(p, sizeof p, "%s/lib", prefix), add_path(o, p, rx);
        snprintf(p, sizeof p, "%s/lib64", prefix), add_path(o, p, rx);
        snprintf(p, sizeof p, "%s/local/lib/%s", prefix, name), add_path(o, p, rx);
        free(real);
    }
    /* the system's shared libraries and the loader */
    add_path(o, "/lib", rx);
    add_path(o, "/lib64", rx);
    add_path(o, "/usr/lib", rx);
    add_path(o, "/usr/lib64", rx);
    add_path(o, "/etc/ld.so.cache", RF_SB_READ);
    add_path(o, "/etc/localtime", RF_SB_READ);
    add_path(o, "/dev/null", RF_SB_READ | RF_SB_WRITE);
    add_path(o, "/dev/zero", RF_SB_READ);
    add_path(o, "/dev/urandom", RF_SB_READ);
    add_path(o, "/dev/random", RF_SB_READ);
}

/* ---- the view: system calls only from here on ---- */

static int mount_tmpfs(const char *at, size_t bytes, unsigned long flags) {
    char opts[96];
    snprintf(opts, sizeof opts, "size=%zu,nr_inodes=4096,mode=1777", bytes);
    return mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV | flags, opts);
}

/* dir (open as dfd) seen at /tmp/<name> on the fresh /tmp, entered */
static int enter_at_tmp(const char *dir, int dfd) {
    const char *name = strrchr(dir, '/');
    name = name ? name + 1 : dir;
    char at[PATH_MAX], src[64];
    if (snprintf(at, sizeof at, "/tmp/%s", name) >= (int)sizeof at) return -1;
    snprintf(src, sizeof src, "/proc/self/fd/%d", dfd);
    if (mkdir(at, 0700) || mount(src, at, NULL, MS_BIND, NULL)) return -1;
    return chdir(at);
}

int rf_sandbox_private_view(const char *dir, size_t tmp_bytes) {
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -1;
    /* nothing mounted here may reach the host's namespace */
    int ok = mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
    ok = ok && mount_tmpfs("/tmp", tmp_bytes, 0) == 0;
    /* the sample's directory was under the old /tmp: bring it along, or at
     * least keep it as the working directory */
    if (!(ok && enter_at_tmp(dir, dfd) == 0) && fchdir(dfd)) {
        close(dfd);
        return -1;
    }
    close(dfd);
    struct stat st;
    if (ok && stat("/dev/shm", &st) == 0) ok = mount_tmpfs("/dev/shm", tmp_bytes, 0) == 0;
    /* this PID namespace's own /proc; where the kernel refuses one (a user
     * namespace under a /proc with covered parts), an empty one */
    if (ok && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) {
        mount_tmpfs("/proc", 4096, MS_RDONLY);
        ok = 0;
    }
    return ok;
}

/* ---- Landlock (linux/landlock.h, written out so that older headers do) ---- */
#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_ABI1_ALL ((1ull << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ull << 13)          /* ABI 2 */
#define LL_FS_TRUNCATE (1ull << 14)       /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)      /* ABI 5 */
#define LL_FS_FILE_ONLY (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_NET_BIND_TCP (1ull << 0)        /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)
struct ll_ruleset_attr {
    uint64_t fs, net, scoped;
};
struct ll_path_beneath {
    uint64_t allowed;
    int32_t parent_fd;
} __attribute__((packed));

int rf_sandbox_landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi > 0 ? (int)abi : 0;
}

/* a rule for path; a file takes only the rights that apply to files */
static int ll_allow(int ruleset, const char *path, uint64_t access) {
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) access &= LL_FS_FILE_ONLY;
    struct ll_path_beneath pb = {access, fd};
    int rc = (int)syscall(SYS_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &pb, 0);
    close(fd);
    return rc;
}

static uint64_t rights_of(int access, uint64_t all, int abi) {
    uint64_t r = 0;
    if (access & RF_SB_READ) r |= LL_FS_READ_FILE | LL_FS_READ_DIR;
    if (access & RF_SB_EXEC) r |= LL_FS_EXECUTE;
    if (access & RF_SB_WRITE) r |= LL_FS_WRITE_FILE | (abi >= 3 ? LL_FS_TRUNCATE : 0);
    return r & all;
}

int rf_sandbox_landlock(const rf_sandbox_paths *paths, int private_view) {
    int abi = rf_sandbox_landlock_abi();
    if (abi < 1) return 0;
    struct ll_ruleset_attr attr = {LL_FS_ABI1_ALL, 0, 0};
    size_t size = 8;
    if (abi >= 2) attr.fs |= LL_FS_REFER;
    if (abi >= 3) attr.fs |= LL_FS_TRUNCATE;
    if (abi >= 5) attr.fs |= LL_FS_IOCTL_DEV;
    if (abi >= 4) attr.net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP, size = 16;
    if (abi >= 6) attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL, size = 24;
    int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
    if (rs < 0) return 0;
    /* everything not named here is neither readable nor writable */
    int ok = ll_allow(rs, ".", attr.fs) == 0;
    /* a path gone since it was gathered (hidden by the new /tmp) is skipped */
    for (int i = 0; ok && i < paths->n; i++)
        ok = ll_allow(rs, paths->p[i].path, rights_of(paths->p[i].access, attr.fs, abi)) == 0 || errno == ENOENT;
    if (ok && private_view)
        ok = ll_allow(rs, "/tmp", attr.fs) == 0 && ll_allow(rs, "/proc", rights_of(RF_SB_READ, attr.fs, abi)) == 0 &&
             (access("/dev/shm", F_OK) || ll_allow(rs, "/dev/shm", attr.fs) == 0);
    ok = ok && syscall(SYS_landlock_restrict_self, rs, 0) == 0;
    close(rs);
    return ok;
}
