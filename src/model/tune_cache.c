/* tune_cache.c - the choices `refusion tune` measured, kept per CPU model
 * and build (tune.h).
 *
 * The file, text, one "key: value" per line after a header line:
 *   refusion tune cache 1
 *   cpu: <the cpuid brand string>
 *   build: <rf_tune_build_id()>
 *   bf16p: fma | dp        (when measured: bf16 weights at avx512 and up)
 *   prefetch-l2: N         (when measured: packed weights)
 * One file per CPU model (its name hashes the brand string), so that a
 * file written by another build is found and reported as stale rather
 * than silently shadowed; the choices depend on the kernels, which change
 * with the build. */
#include "model/tune.h"

#include <cpuid.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "refusion.h"
#include "util/util.h"

#define CACHE_HEADER "refusion tune cache 1"

const char *rf_tune_cpu_model(void) {
    static char brand[49];
    if (!brand[0]) {
        unsigned r[12] = {0};
        if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u)
            for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(brand, r, 48);
        brand[48] = 0;
        /* trimmed of the padding spaces some CPUs put around it */
        char *s = brand;
        while (*s == ' ') s++;
        memmove(brand, s, strlen(s) + 1);
        for (size_t n = strlen(brand); n && brand[n - 1] == ' ';) brand[--n] = 0;
        if (!brand[0]) strcpy(brand, "unknown x86-64");
    }
    return brand;
}

/* the version, the compiler and the moment this file was compiled (a
 * rebuild of the library recompiles it with the kernels) */
const char *rf_tune_build_id(void) { return RF_VERSION_STRING " " __VERSION__ " " __DATE__ " " __TIME__; }

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int rf_tune_cache_path(char *buf, size_t cap) {
    const char *xdg = rf_env_cache_home(), *home = rf_env_home();
    int n;
    unsigned long long h = (unsigned long long)fnv1a(rf_tune_cpu_model());
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/refusion/tune-%016llx.txt", xdg, h);
    else if (home && home[0]) n = snprintf(buf, cap, "%s/.cache/refusion/tune-%016llx.txt", home, h);
    else {
        rf_set_error("tune cache: neither XDG_CACHE_HOME (absolute) nor HOME is set");
        return -1;
    }
    if (n < 0 || (size_t)n >= cap) {
        rf_set_error("tune cache: the cache path is too long");
        return -1;
    }
    return 0;
}

/* a token count N (0..2^20) of the file, or -1 */
static int token_count(const char *v) {
    char *end;
    long n = strtol(v, &end, 10);
    return *v >= '0' && *v <= '9' && !*end && n <= 1 << 20 ? (int)n : -1;
}

/* the value of line "key: value" (newline stripped), or NULL */
static const char *value_of(char *line, const char *key) {
    size_t k = strlen(key);
    if (strncmp(line, key, k) || line[k] != ':' || line[k + 1] != ' ') return NULL;
    line[strcspn(line, "\n")] = 0;
    return line + k + 2;
}

int rf_tune_cache_read(const char *path, int *bf16p_kernel, int *prefetch_l2, char *warn, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(warn, cap, "%s: cannot be read (%s); ignored", path, strerror(errno));
        return -1;
    }
    char line[256];
    int ok_header = 0, ok_cpu = 0, ok_build = 0, kernel = -1, pf = -1, bad = 0, stale = 0;
    for (int i = 0; fgets(line, sizeof line, f); i++) {
        const char *v;
        if (!strchr(line, '\n') && !feof(f)) bad = 1; /* a line longer than any valid one */
        if (i == 0) ok_header = !strcmp(line, CACHE_HEADER "\n");
        else if ((v = value_of(line, "cpu"))) ok_cpu = !strcmp(v, rf_tune_cpu_model());
        else if ((v = value_of(line, "build"))) ok_build = !strcmp(v, rf_tune_build_id()), stale |= !ok_build;
        else if ((v = value_of(line, "bf16p"))) kernel = !strcmp(v, "dp") ? RF_BF16P_DP : !strcmp(v, "fma") ? RF_BF16P_FMA : -2;
        else if ((v = value_of(line, "prefetch-l2"))) pf = token_count(v), bad |= pf < 0;
        else bad = 1;
    }
    fclose(f);
    if (!ok_header || bad || kernel == -2 || (kernel == -1 && pf < 0)) {
        snprintf(warn, cap, "%s: not a tune cache this build reads (corrupt); ignored: run `refusion tune` again", path);
        return -1;
    }
    if (stale || !ok_build || !ok_cpu) {
        snprintf(warn, cap, "%s: measured by %s; ignored (stale): run `refusion tune` again",
                 path, !ok_cpu ? "another CPU model" : "another build");
        return -1;
    }
    *bf16p_kernel = kernel, *prefetch_l2 = pf;
    return 1;
}

/* mkdir -p of path's folder */
static int make_parents(const char *path) {
    char d[4096];
    snprintf(d, sizeof d, "%s", path);
    for (char *s = d + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(d, 0755) && errno != EEXIST) {
            rf_set_error("tune cache: cannot create %s: %s", d, strerror(errno));
            return -1;
        }
        *s = '/';
    }
    return 0;
}

int rf_tune_cache_write(int bf16p_kernel, int prefetch_l2) {
    char path[4096], tmp[4200], warn[4400];
    if (rf_tune_cache_path(path, sizeof path) || make_parents(path)) return -1;
    int old_kernel = -1, old_pf = -1; /* a valid file's other choice stays */
    if (rf_tune_cache_read(path, &old_kernel, &old_pf, warn, sizeof warn) == 1) {
        if (bf16p_kernel < 0) bf16p_kernel = old_kernel;
        if (prefetch_l2 < 0) prefetch_l2 = old_pf;
    }
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rf_set_error("tune cache: cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, CACHE_HEADER "\ncpu: %s\nbuild: %s\n", rf_tune_cpu_model(), rf_tune_build_id());
    if (bf16p_kernel >= 0) fprintf(f, "bf16p: %s\n", bf16p_kernel == RF_BF16P_DP ? "dp" : "fma");
    if (prefetch_l2 >= 0) fprintf(f, "prefetch-l2: %d\n", prefetch_l2);
    if (fclose(f) || rename(tmp, path)) {
        rf_set_error("tune cache: cannot write %s: %s", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

static int g_disabled;
static char g_state[4200];

void rf_tune_cache_disable(void) { g_disabled = 1; }
const char *rf_tune_cache_state(void) { return g_state; }

int rf_tune_cache_apply(void) {
    const char *e = rf_env_tune();
    if (g_disabled || (e && !strcmp(e, "off"))) {
        snprintf(g_state, sizeof g_state, "off");
        return 0;
    }
    char path[4096], warn[4400];
    int kernel = -1, pf = -1;
    if (rf_tune_cache_path(path, sizeof path)) {
        snprintf(g_state, sizeof g_state, "none");
        return 0;
    }
    int rc = rf_tune_cache_read(path, &kernel, &pf, warn, sizeof warn);
    if (rc < 0) {
        snprintf(g_state, sizeof g_state, "ignored: %s", path);
        rf_log(RF_LOG_WARN, "tune cache: %s", warn);
        return -1;
    }
    if (rc == 0) {
        snprintf(g_state, sizeof g_state, "none");
        return 0;
    }
    /* the environment's settings win over the cache's */
    if (kernel >= 0 && !rf_env_bf16p()) rf_matmul_set_bf16p_kernel(kernel);
    if (pf >= 0 && !rf_env_prefetch_l2()) rf_matmul_set_prefetch_l2(pf);
    snprintf(g_state, sizeof g_state, "applied: %s", path);
    return 1;
}
