/* util.h - small shared helpers: error reporting, timing, RNG, bf16/f16
 * conversion, atomic file writes, aligned allocation. */
#ifndef RF_UTIL_H
#define RF_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <immintrin.h>

/* ---- errors ------------------------------------------------------------
 * Library functions return 0 on success and -1 on failure; on failure they
 * leave one line saying what is wrong and where in a thread-local buffer,
 * which callers (the CLI) print as "refusion: <message>". */
void rf_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Put "<fmt>: " before the message (rf_prefix_error("example %d", i):
 * "example 3: <what the callee said>"). */
void rf_prefix_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* part of the public API (include/refusion.h): exported from librefusion.so */
__attribute__((visibility("default"))) const char *rf_last_error(void);
/* Print "refusion: <last error>" to stderr (for programs). */
void rf_print_error(void);
/* Abort with a message for "cannot happen" states and failed allocations.
 * While a catch point is set on this thread (rf_catch_push): set it as the
 * last error, free the scoped blocks this thread allocated since that point
 * (rf_scoped_malloc below) and longjmp there. The public API's entry points
 * do this, so an aborted call returns an error and gives its scratch back.
 * Without a catch point (a program calling internals directly) the message
 * becomes the last error and the program's fatal handler runs (the CLI's
 * prints it and exits 2); without one, abort(). The library never exits. */
void rf_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* The program's handler of an rf_die outside any catch point; it must not
 * return (abort() follows if it does). NULL: abort() at once. */
void rf_set_fatal_handler(void (*fn)(const char *message));
/* One line to the log callback (rf_log_set in include/refusion.h), if any.
 * level: an rf_log_level. */
void rf_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* rf_die for a failed allocation of n bytes: the catch point sees oom = 1. */
void rf_oom(size_t n) __attribute__((noreturn));
/* rf_oom with the message of a failed allocation reported by another
 * thread (msg: its rf_last_error()). */
void rf_oom_msg(const char *msg) __attribute__((noreturn));
#include <setjmp.h>
typedef struct rf_catch {
    jmp_buf jb;
    struct rf_catch *prev; /* the catch point set before this one */
    uint64_t mark;         /* scoped blocks after this were allocated inside */
    int oom;               /* set when taken: the abort was a failed allocation */
} rf_catch;
/* Set c as this thread's catch point (then setjmp(c->jb)); pop it when the
 * protected code returns normally. rf_die pops it itself when it takes it. */
void rf_catch_push(rf_catch *c);
void rf_catch_pop(rf_catch *c);
/* The scoped blocks this thread allocated before now survive an unwind to
 * c (they belong to work that completed): for a catch point that guards
 * one piece of work after another. */
void rf_catch_mark(rf_catch *c);

/* ---- environment and test faults (env.c) ----------------------------------
 * The REFUSION_* variables the library reads (NULL when unset). */
const char *rf_env_cpu_tier(void);  /* REFUSION_CPU */
const char *rf_env_bf16_act(void);  /* REFUSION_BF16_ACT */
const char *rf_env_amx_int8(void);  /* REFUSION_AMX_INT8 */
const char *rf_env_amx_bf16(void);  /* REFUSION_AMX_BF16 */
const char *rf_env_bf16p(void);     /* REFUSION_BF16P */
const char *rf_env_prefetch_l2(void); /* REFUSION_PREFETCH_L2 */
const char *rf_env_stream_panels(void); /* REFUSION_STREAM_PANELS */
const char *rf_env_tune(void);      /* REFUSION_TUNE */
const char *rf_env_cache_home(void); /* XDG_CACHE_HOME (the tune cache) */
const char *rf_env_home(void);      /* HOME (the tune cache without XDG_CACHE_HOME) */
/* Points where a test makes the library fail on purpose. All NULL unless a
 * program sets them (the refusion command does, from its REFUSION_TEST_*
 * variables); the library only calls them. */
typedef struct {
    void (*generation_step)(void); /* before each model call of a generation (may rf_die) */
    void (*checkpoint_step)(void); /* after each step of a checkpoint save (may end the process) */
    int (*reply_append)(void);     /* before each append to a server reply's output, under the server's lock:
                                    * nonzero fails it as an allocation would */
} rf_fault_points;
extern rf_fault_points rf_faults;

/* ---- memory --------------------------------------------------------------
 * Every allocator here fails through rf_oom (or, rf_try_*, by returning
 * NULL with the error set), and each one counts for rf_fail_alloc_after. */
void *rf_malloc(size_t n);            /* dies on failure */
void *rf_calloc(size_t n, size_t sz); /* dies on failure */
void *rf_aligned_alloc(size_t n);     /* 64-byte aligned, zeroed; free with free() */
char *rf_strdup(const char *s);
/* For sizes a file or a request chose: NULL with rf_set_error() instead of
 * dying, so that a server or a loader can refuse and go on. */
void *rf_try_malloc(size_t n);
void *rf_try_realloc(void *p, size_t n);
void *rf_try_aligned_alloc(size_t n); /* as rf_aligned_alloc, NULL on failure */
/* As rf_try_aligned_alloc, for big blocks read from end to end on every call
 * (the packed weights): from 2 MiB on, aligned to 2 MiB and advised into
 * transparent huge pages, where the kernel allows them (madvise mode), so that
 * a stream takes one TLB entry per 2 MiB and the hardware prefetchers do not
 * stop at every 4 KiB page boundary. Free with free(). */
void *rf_try_huge_alloc(size_t n);
/* Room for `need` elements in the array p (*cap elements of elem bytes,
 * their contents kept): while *cap is short of need, it doubles (from
 * `first` when 0) and p is reallocated; dies when out of memory. Returns the
 * (possibly moved) array. Every growing array of the program grows here. */
void *rf_grow_to(void *p, size_t elem, size_t need, size_t *cap, size_t first);
/* The same for an int count: room for element n (need n + 1). */
void *rf_grow(void *p, size_t elem, int n, int *cap, int first);
/* Scoped blocks: the scratch of one library call (a decoder's arrays, a KV
 * cache or run state of its own). As rf_malloc (64-byte aligned; _calloc and
 * _aligned zeroed), and recorded until rf_scoped_free, the only way to free
 * them: when rf_die unwinds to a catch point, the blocks the same thread
 * allocated after that point are freed, so an aborted generation leaks
 * nothing. Any thread may free a block. */
void *rf_scoped_malloc(size_t n);
void *rf_scoped_calloc(size_t n, size_t sz);
void *rf_scoped_aligned(size_t n);
void rf_scoped_free(void *p);
/* p (a scoped block holding `used` bytes, or NULL) moved into a new one of n
 * bytes; p is freed. */
void *rf_scoped_grow(void *p, size_t used, size_t n);
/* A 64-byte aligned, zeroed buffer whose owner decides its kind: scoped
 * (rf_scoped_aligned: dies on failure) or, scoped = 0, plain
 * (rf_try_aligned_alloc: NULL on failure, so that a long-lived owner can
 * make a set of them all or none). For the buffers that are a decoder's own
 * in one use and a session's in another (run state, KV cache). */
void *rf_block_aligned(int scoped, size_t n);
void rf_block_free(int scoped, void *p);
/* Scoped blocks now recorded (all threads): for tests. */
long rf_scoped_live(void);
/* Fault injection for tests: the n-th allocation from now, through any
 * allocator above on any thread, fails as if the machine were out of memory
 * (n <= 0: none). rf_fail_alloc_fired() says whether it has happened. */
void rf_fail_alloc_after(long n);
int rf_fail_alloc_fired(void);
long rf_alloc_count(void); /* allocations tried so far, all threads */
/* Physical memory of this machine in bytes (0 if unknown): the ceiling
 * against which sizes from requests and options are checked up front. */
uint64_t rf_phys_mem(void);

/* ---- overflow-checked sizes ------------------------------------------------
 * Every size computed from outside input (headers, requests, options) goes
 * through these: 0 with the result in *out, or -1 when it does not fit. */
static inline int rf_mul_size(size_t a, size_t b, size_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }
static inline int rf_add_size(size_t a, size_t b, size_t *out) { return __builtin_add_overflow(a, b, out) ? -1 : 0; }
static inline int rf_mul_i64(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }
static inline int rf_add_i64(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out) ? -1 : 0; }

/* ---- time ---------------------------------------------------------------- */
double rf_now(void); /* seconds, monotonic */
/* Peak resident set size of this process in bytes (from /proc/self/status VmHWM). */
size_t rf_peak_rss(void);

/* ---- RNG: xoshiro256** seeded through splitmix64 --------------------------- */
typedef struct { uint64_t s[4]; } rf_rng;
void rf_rng_seed(rf_rng *r, uint64_t seed);
uint64_t rf_rng_next(rf_rng *r);
double rf_rng_uniform(rf_rng *r);    /* [0, 1) with 53 bits */
float rf_rng_normal(rf_rng *r);      /* standard normal (Box-Muller) */
uint64_t rf_rng_below(rf_rng *r, uint64_t n); /* uniform in [0, n) */

/* ---- statistics of repeated timings --------------------------------------- */
/* The median of v[0..n) (n >= 1; sorts v). */
double rf_median(double *v, int n);
/* out[0] = the median of v[0..n), out[1..2] its bootstrap 95% interval
 * (2,000 resamples, fixed seed: the same numbers every run). v is kept. */
void rf_median_ci(const double *v, int n, double out[3]);

/* ---- number formats ------------------------------------------------------- */
static inline float rf_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round-to-nearest-even, as torch does; NaN stays NaN. */
static inline uint16_t rf_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float rf_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t rf_f32_to_f16(float f) { return _cvtss_sh(f, 0); }

/* ---- files ---------------------------------------------------------------- */
/* Write a whole file atomically: data goes to "<path>.tmp.<pid>", is fsync'd,
 * then renamed over path. Nothing half-written is ever left at path. */
int rf_write_file_atomic(const char *path, const void *data, size_t n);
/* The same in pieces, for files written as they are produced:
 * rf_atomic_create opens "<path>.tmp.<pid>" (its malloc'd name in *tmp_out,
 * NULL on failure) and returns the fd or -1; rf_write_all writes all n
 * bytes (path names the file in the error); rf_atomic_commit fsyncs, closes
 * and renames the temp file over path; rf_atomic_abandon closes and removes
 * it after a failed write. Each failure sets the error and returns -1, and
 * leaves no temp file behind once commit or abandon has run. */
int rf_atomic_create(const char *path, char **tmp_out);
/* The name rf_atomic_create writes path under in this process, malloc'd. */
char *rf_atomic_tmp_path(const char *path);
int rf_write_all(int fd, const void *buf, size_t n, const char *path);
int rf_atomic_commit(int fd, const char *tmp, const char *path);
void rf_atomic_abandon(int fd, const char *tmp);
/* mmap a whole regular file read-only (private pages); on success *path_out
 * is a copy of path, and the four are released by rf_unmap_file (which takes
 * fd < 0 and map NULL as "never opened"). A file shorter than min_size is
 * refused: "truncated: N bytes is too short for a <format> header". */
int rf_map_file(const char *path, uint64_t min_size, const char *format, char **path_out,
                int *fd_out, void **map_out, size_t *size_out);
void rf_unmap_file(char *path, int fd, void *map, size_t size);
/* Read a whole file into a NUL-terminated malloc'd buffer. */
char *rf_read_file(const char *path, size_t *len_out);
/* The same, refusing (NULL, "<path>: larger than N MB") a file longer than
 * max bytes before reading it, and a stream that grows past max. */
char *rf_read_file_max(const char *path, size_t max, size_t *len_out);
/* Copy file `from` to dir/name atomically. */
int rf_copy_file_into(const char *from, const char *dir, const char *name);
/* path join into a malloc'd string: dir + "/" + name */
char *rf_path_join(const char *dir, const char *name);
int rf_mkdir_p(const char *path);

#endif
