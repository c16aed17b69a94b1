/* util.c - see util.h */
#include "util/util.h"
#include "refusion.h" /* rf_log_set is public */
#include "util/cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[1024];

void rf_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

const char *rf_last_error(void) { return g_err[0] ? g_err : "unknown error"; }

void rf_prefix_error(const char *fmt, ...) {
    char was[512], head[512]; /* rf_set_error must not read its own buffer */
    snprintf(was, sizeof was, "%s", rf_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    rf_set_error("%s: %s", head, was);
}

void rf_print_error(void) { fprintf(stderr, "refusion: %s\n", rf_last_error()); }

/* ---- logging ----------------------------------------------------------------- */

static _Atomic(rf_log_callback) g_log_fn;
static void *_Atomic g_log_user;

RF_API void rf_log_set(rf_log_callback cb, void *user) {
    g_log_user = user;
    g_log_fn = cb;
}

void rf_log(int level, const char *fmt, ...) {
    rf_log_callback fn = g_log_fn;
    if (!fn) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fn((rf_log_level)level, line, g_log_user);
}

/* ---- fault injection ------------------------------------------------------- */

static _Atomic long g_fail_in; /* allocations until the injected failure; <= 0: off or done */
static _Atomic int g_fail_fired;
static _Atomic long g_allocs;   /* allocations made (tried) so far */

long rf_alloc_count(void) { return g_allocs; }

void rf_fail_alloc_after(long n) {
    g_fail_fired = 0;
    g_fail_in = n > 0 ? n : 0;
}
int rf_fail_alloc_fired(void) { return g_fail_fired; }

/* 1 when this allocation is the one to fail */
static int fail_now(void) {
    g_allocs++;
    if (g_fail_in <= 0) return 0;
    if (atomic_fetch_sub(&g_fail_in, 1) != 1) return 0;
    g_fail_fired = 1;
    return 1;
}

static void *sys_malloc(size_t n) { return fail_now() ? NULL : malloc(n ? n : 1); }
/* align-byte aligned (a power of two), n rounded up to a multiple of it;
 * NULL on overflow */
static void *sys_aligned(size_t n, size_t align) {
    size_t sz;
    if (rf_add_size(n ? n : 1, align - 1, &sz)) return NULL;
    return fail_now() ? NULL : aligned_alloc(align, sz & ~(align - 1));
}

/* ---- scoped blocks ------------------------------------------------------------
 * A 64-byte header before each block links it into one list in allocation
 * order (a circular list around `g_scoped`, newest last), under a mutex:
 * blocks are few (tens per generation) and a block may be freed on another
 * thread than the one that made it. */

typedef struct scoped_blk {
    struct scoped_blk *prev, *next;
    uint64_t seq;      /* allocation order */
    const void *owner; /* &t_owner of the allocating thread */
} scoped_blk;
#define SCOPED_HDR 64
_Static_assert(sizeof(scoped_blk) <= SCOPED_HDR, "scoped header");

static pthread_mutex_t g_scoped_mu = PTHREAD_MUTEX_INITIALIZER;
static scoped_blk g_scoped = {&g_scoped, &g_scoped, 0, NULL};
static uint64_t g_scoped_seq;
static long g_scoped_n;
static _Thread_local char t_owner;

static void *scoped_alloc(size_t n, int zero) {
    size_t sz;
    if (rf_add_size(n, SCOPED_HDR, &sz)) rf_oom(n);
    scoped_blk *b = sys_aligned(sz, 64);
    if (!b) rf_oom(n);
    if (zero) memset((char *)b + SCOPED_HDR, 0, n);
    b->owner = &t_owner;
    pthread_mutex_lock(&g_scoped_mu);
    b->seq = ++g_scoped_seq;
    b->prev = g_scoped.prev, b->next = &g_scoped;
    g_scoped.prev->next = b, g_scoped.prev = b;
    g_scoped_n++;
    pthread_mutex_unlock(&g_scoped_mu);
    return (char *)b + SCOPED_HDR;
}

void *rf_scoped_malloc(size_t n) { return scoped_alloc(n, 0); }
void *rf_scoped_aligned(size_t n) { return scoped_alloc(n, 1); }
void *rf_scoped_calloc(size_t n, size_t sz) {
    size_t t;
    if (rf_mul_size(n, sz, &t)) rf_oom(SIZE_MAX);
    return scoped_alloc(t, 1);
}

static void scoped_unlink(scoped_blk *b) {
    b->prev->next = b->next, b->next->prev = b->prev;
    g_scoped_n--;
}

void rf_scoped_free(void *p) {
    if (!p) return;
    scoped_blk *b = (scoped_blk *)((char *)p - SCOPED_HDR);
    pthread_mutex_lock(&g_scoped_mu);
    scoped_unlink(b);
    pthread_mutex_unlock(&g_scoped_mu);
    free(b);
}

void *rf_scoped_grow(void *p, size_t used, size_t n) {
    void *q = rf_scoped_malloc(n);
    if (used) memcpy(q, p, used < n ? used : n);
    rf_scoped_free(p);
    return q;
}

void *rf_block_aligned(int scoped, size_t n) { return scoped ? rf_scoped_aligned(n) : rf_try_aligned_alloc(n); }
void rf_block_free(int scoped, void *p) {
    if (scoped) rf_scoped_free(p);
    else free(p);
}

long rf_scoped_live(void) {
    pthread_mutex_lock(&g_scoped_mu);
    long n = g_scoped_n;
    pthread_mutex_unlock(&g_scoped_mu);
    return n;
}

/* free this thread's blocks allocated after mark (newest first) */
static void scoped_release_since(uint64_t mark) {
    pthread_mutex_lock(&g_scoped_mu);
    for (scoped_blk *b = g_scoped.prev, *prev; b != &g_scoped && b->seq > mark; b = prev) {
        prev = b->prev;
        if (b->owner != &t_owner) continue;
        scoped_unlink(b);
        free(b);
    }
    pthread_mutex_unlock(&g_scoped_mu);
}

/* ---- fatal errors ------------------------------------------------------------- */

static _Thread_local rf_catch *t_catch;
static void (*_Atomic g_fatal)(const char *message); /* the program's: rf_set_fatal_handler */
static _Thread_local int t_oom; /* the rf_die under way is rf_oom's */

void rf_catch_push(rf_catch *c) {
    c->prev = t_catch;
    c->oom = 0;
    pthread_mutex_lock(&g_scoped_mu);
    c->mark = g_scoped_seq;
    pthread_mutex_unlock(&g_scoped_mu);
    t_catch = c;
}

void rf_catch_mark(rf_catch *c) {
    pthread_mutex_lock(&g_scoped_mu);
    c->mark = g_scoped_seq;
    pthread_mutex_unlock(&g_scoped_mu);
}

void rf_catch_pop(rf_catch *c) {
    if (t_catch == c) t_catch = c->prev;
}

void rf_die(const char *fmt, ...) {
    va_list ap;
    rf_catch *c = t_catch;
    int oom = t_oom;
    t_oom = 0;
    if (c) { /* a library entry point takes it as an error return */
        va_start(ap, fmt);
        vsnprintf(g_err, sizeof g_err, fmt, ap);
        va_end(ap);
        t_catch = c->prev;
        c->oom = oom;
        scoped_release_since(c->mark);
        longjmp(c->jb, 1);
    }
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    void (*fatal)(const char *) = g_fatal;
    if (fatal) fatal(g_err);
    abort();
}

void rf_set_fatal_handler(void (*fn)(const char *message)) { g_fatal = fn; }

void rf_oom(size_t n) {
    t_oom = 1;
    rf_die("out of memory allocating %zu bytes", n);
}

void rf_oom_msg(const char *msg) {
    t_oom = 1;
    rf_die("%s", msg);
}

/* ---- memory ---------------------------------------------------------------------- */

void *rf_malloc(size_t n) {
    void *p = sys_malloc(n);
    if (!p) rf_oom(n);
    return p;
}

void *rf_calloc(size_t n, size_t sz) {
    void *p = fail_now() ? NULL : calloc(n ? n : 1, sz ? sz : 1);
    if (!p) rf_oom(n * sz);
    return p;
}

/* a zeroed block of n bytes rounded up to align; huge: advised into
 * transparent huge pages before its pages are first touched */
static void *try_zeroed(size_t n, size_t align, int huge) {
    void *p = sys_aligned(n, align);
    if (!p) {
        rf_set_error("out of memory allocating %zu bytes", n);
        return NULL;
    }
    const size_t sz = (n + align - 1) & ~(align - 1); /* no overflow: sys_aligned checked it */
    if (huge) (void)madvise(p, sz, MADV_HUGEPAGE);    /* advice: where refused, 4 KiB pages */
    memset(p, 0, sz);
    return p;
}

void *rf_try_aligned_alloc(size_t n) { return try_zeroed(n, 64, 0); }

void *rf_try_huge_alloc(size_t n) {
    const size_t huge = (size_t)2 << 20;
    return n < huge ? try_zeroed(n, 64, 0) : try_zeroed(n, huge, 1);
}

void *rf_aligned_alloc(size_t n) {
    void *p = rf_try_aligned_alloc(n);
    if (!p) rf_oom(n);
    return p;
}

void *rf_try_malloc(size_t n) {
    void *p = sys_malloc(n);
    if (!p) rf_set_error("out of memory allocating %zu bytes", n);
    return p;
}

void *rf_try_realloc(void *p, size_t n) {
    void *q = fail_now() ? NULL : realloc(p, n ? n : 1);
    if (!q) rf_set_error("out of memory allocating %zu bytes", n);
    return q;
}

void *rf_grow_to(void *p, size_t elem, size_t need, size_t *cap, size_t first) {
    if (need <= *cap) return p;
    size_t ncap = *cap ? *cap : first, bytes;
    while (ncap < need && ncap <= SIZE_MAX / 2) ncap *= 2;
    if (ncap < need || rf_mul_size(ncap, elem, &bytes)) rf_oom(SIZE_MAX);
    void *q = fail_now() ? NULL : realloc(p, bytes);
    if (!q) rf_oom(bytes); /* p and *cap stay as they were: the caller's to free */
    *cap = ncap;
    return q;
}

void *rf_grow(void *p, size_t elem, int n, int *cap, int first) {
    if (n < *cap) return p;
    size_t ncap = (size_t)*cap;
    p = rf_grow_to(p, elem, (size_t)n + 1, &ncap, (size_t)first);
    if (ncap > INT_MAX) rf_oom(SIZE_MAX);
    *cap = (int)ncap;
    return p;
}

uint64_t rf_phys_mem(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

char *rf_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = rf_malloc(n);
    memcpy(d, s, n);
    return d;
}

double rf_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t rf_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rf_rng_seed(rf_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rf_rng_next(rf_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rf_rng_uniform(rf_rng *r) { return (double)(rf_rng_next(r) >> 11) * 0x1.0p-53; }

float rf_rng_normal(rf_rng *r) {
    double u1 = rf_rng_uniform(r), u2 = rf_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t rf_rng_below(rf_rng *r, uint64_t n) { return n ? rf_rng_next(r) % n : 0; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double rf_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void rf_median_ci(const double *v, int n, double out[3]) {
    enum { BOOT = 2000 };
    double *tmp = rf_malloc(sizeof(double) * (size_t)n), *meds = rf_malloc(sizeof(double) * BOOT);
    rf_rng rng;
    rf_rng_seed(&rng, 12345);
    for (int b = 0; b < BOOT; b++) {
        for (int i = 0; i < n; i++) tmp[i] = v[rf_rng_below(&rng, (uint64_t)n)];
        meds[b] = rf_median(tmp, n);
    }
    qsort(meds, BOOT, sizeof *meds, cmp_double);
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    out[0] = rf_median(tmp, n), out[1] = meds[(int)(0.025 * BOOT)], out[2] = meds[(int)(0.975 * BOOT) - 1];
    free(tmp), free(meds);
}

char *rf_atomic_tmp_path(const char *path) {
    char *tmp = rf_malloc(strlen(path) + 32);
    sprintf(tmp, "%s.tmp.%d", path, (int)getpid());
    return tmp;
}

int rf_atomic_create(const char *path, char **tmp_out) {
    char *tmp = rf_atomic_tmp_path(path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        rf_set_error("%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        tmp = NULL;
    } else {
        rf_cleanup_add_path(tmp); /* removed if a signal ends the program first */
    }
    *tmp_out = tmp;
    return fd;
}

int rf_write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n) {
        /* Linux write() moves at most ~2 GiB per call */
        size_t step = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t k = write(fd, p, step);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rf_set_error("%s: write failed: %s", path, k < 0 ? strerror(errno) : "short write");
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int rf_atomic_commit(int fd, const char *tmp, const char *path) {
    if (fsync(fd) != 0) {
        rf_set_error("%s: fsync failed: %s", tmp, strerror(errno));
        rf_atomic_abandon(fd, tmp);
        return -1;
    }
    if (close(fd) != 0) {
        rf_set_error("%s: close failed: %s", tmp, strerror(errno));
        unlink(tmp);
        rf_cleanup_drop_path(tmp);
        return -1;
    }
    int rc = 0;
    if (rename(tmp, path) != 0) {
        rf_set_error("%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
        rc = -1;
    }
    rf_cleanup_drop_path(tmp);
    return rc;
}

void rf_atomic_abandon(int fd, const char *tmp) {
    close(fd);
    unlink(tmp);
    rf_cleanup_drop_path(tmp);
}

int rf_write_file_atomic(const char *path, const void *data, size_t n) {
    char *tmp;
    int fd = rf_atomic_create(path, &tmp);
    if (fd < 0) return -1;
    int rc = 0;
    if (rf_write_all(fd, data, n, tmp)) {
        rf_atomic_abandon(fd, tmp);
        rc = -1;
    } else {
        rc = rf_atomic_commit(fd, tmp, path);
    }
    free(tmp);
    return rc;
}

int rf_map_file(const char *path, uint64_t min_size, const char *format, char **path_out,
                int *fd_out, void **map_out, size_t *size_out) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        rf_set_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rf_set_error("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < min_size) {
        rf_set_error("%s: truncated: %" PRIu64 " bytes is too short for a %s header", path, size,
                     format);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rf_set_error("%s: mmap failed: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    *path_out = rf_strdup(path);
    *fd_out = fd;
    *map_out = map;
    *size_out = (size_t)size;
    return 0;
}

void rf_unmap_file(char *path, int fd, void *map, size_t size) {
    if (map) munmap(map, size);
    if (fd >= 0) close(fd);
    free(path);
}

char *rf_read_file_max(const char *path, size_t max, size_t *len_out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        rf_set_error("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    /* a regular file's size is known: refuse before reading a byte */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
        fclose(f);
        rf_set_error("%s: %.1f MB is larger than the %.1f MB this reads", path, st.st_size / 1e6, max / 1e6);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = rf_try_malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (len > max) { /* a pipe or a file that grew */
            free(buf);
            fclose(f);
            rf_set_error("%s: larger than the %.1f MB this reads", path, max / 1e6);
            return NULL;
        }
        if (cap - len - 1 == 0) {
            char *nb = cap <= SIZE_MAX / 2 ? rf_try_realloc(buf, cap * 2) : NULL;
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    if (!buf) {
        fclose(f);
        rf_set_error("%s: out of memory reading it", path);
        return NULL;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        rf_set_error("%s: read error", path);
        return NULL;
    }
    buf[len] = 0;
    if (len_out) *len_out = len;
    return buf;
}

char *rf_read_file(const char *path, size_t *len_out) { return rf_read_file_max(path, SIZE_MAX - 1, len_out); }

int rf_copy_file_into(const char *from, const char *dir, const char *name) {
    size_t n;
    char *data = rf_read_file(from, &n);
    if (!data) return -1;
    char *to = rf_path_join(dir, name);
    int rc = rf_write_file_atomic(to, data, n);
    free(to);
    free(data);
    return rc;
}

char *rf_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = rf_malloc(a + b + 2);
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

int rf_mkdir_p(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) goto fail;
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) goto fail;
    return 0;
fail:
    rf_set_error("%s: cannot create directory: %s", buf, strerror(errno));
    return -1;
}
