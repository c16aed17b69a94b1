/* tune_cache.c - the choices `refusion tune` measured, kept per CPU model
 * and build (tune.h).
 *
 * The file, text, one "key: value" per line after a header line:
 *   refusion tune cache 1
 *   cpu: <the cpuid brand string>
 *   build: <rf_tune_build_id()>
 *   bf16p: fma | dp        (when measured: bf16 weights at avx512 and up)
 *   prefetch-l2: N         (when measured: packed weights)
 *   amx-bf16: N, amx-int8: N   (when measured at the amx tier: the tiles
 *                          from N tokens, 0 never)
 *   call-cost: KEY N c1 .. cN   (per model shape, tier and thread count: the
 *                          adaptive rolling slot's cost model, c(n) of
 *                          n = 1..N tokens; KEY is rf_call_cost_key's, hex)
 * One file per CPU model (its name hashes the brand string), so that a
 * file written by another build is found and reported as stale rather
 * than silently shadowed; the choices depend on the kernels, which change
 * with the build. */
#include "model/tune.h"

#include <cpuid.h>
#include <ctype.h>
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

/* the version, the compiler and the moment this file was compiled (the
 * build recompiles it whenever a kernel source changes: CMakeLists.txt) */
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

/* a call-cost line's value "KEY N c1 .. cN": 1 with *key, *n and cost
 * (RF_TUNE_MAX_COST entries) filled, 0 when malformed (N outside 1..max,
 * a cost not a finite number in [0.5, 1e4], extra or missing fields) */
static int parse_cost(const char *v, unsigned long long *key, int *n, float *cost) {
    char *end;
    if (!isxdigit((unsigned char)*v)) return 0;
    *key = strtoull(v, &end, 16);
    if (*end != ' ') return 0;
    long k = strtol(end + 1, &end, 10);
    if (k < 1 || k > RF_TUNE_MAX_COST) return 0;
    for (int i = 0; i < k; i++) {
        if (*end != ' ') return 0;
        double c = strtod(end + 1, &end);
        if (!(c >= 0.5 && c <= 1e4)) return 0;
        cost[i] = (float)c;
    }
    *n = (int)k;
    return *end == 0;
}

int rf_tune_cache_read(const char *path, rf_tune_choices *c, char *warn, size_t cap) {
    c->bf16p_kernel = c->prefetch_l2 = c->stream_panels = c->amx_bf16 = c->amx_int8 = -1;
    c->n_cost = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(warn, cap, "%s: cannot be read (%s); ignored", path, strerror(errno));
        return -1;
    }
    char line[1024];
    float cost[RF_TUNE_MAX_COST];
    int ok_header = 0, ok_cpu = 0, ok_build = 0, kernel = -1, pf = -1, sp = -1, amx[2] = {-1, -1}, n_costs = 0, bad = 0,
        stale = 0;
    for (int i = 0; fgets(line, sizeof line, f); i++) {
        const char *v;
        unsigned long long key;
        int n;
        if (!strchr(line, '\n') && !feof(f)) bad = 1; /* a line longer than any valid one */
        if (i == 0) ok_header = !strcmp(line, CACHE_HEADER "\n");
        else if ((v = value_of(line, "cpu"))) ok_cpu = !strcmp(v, rf_tune_cpu_model());
        else if ((v = value_of(line, "build"))) ok_build = !strcmp(v, rf_tune_build_id()), stale |= !ok_build;
        else if ((v = value_of(line, "bf16p"))) kernel = !strcmp(v, "dp") ? RF_BF16P_DP : !strcmp(v, "fma") ? RF_BF16P_FMA : -2;
        else if ((v = value_of(line, "prefetch-l2"))) pf = token_count(v), bad |= pf < 0;
        else if ((v = value_of(line, "stream-panels"))) sp = rf_stream_panels_parse(v), bad |= sp < 0;
        else if ((v = value_of(line, "amx-bf16"))) amx[0] = token_count(v), bad |= amx[0] < 0;
        else if ((v = value_of(line, "amx-int8"))) amx[1] = token_count(v), bad |= amx[1] < 0;
        else if ((v = value_of(line, "call-cost")) && parse_cost(v, &key, &n, cost)) {
            n_costs++;
            if (c->cost_key && key == c->cost_key) memcpy(c->cost, cost, (size_t)n * sizeof *cost), c->n_cost = n;
        } else bad = 1;
    }
    fclose(f);
    if (!ok_header || bad || kernel == -2 || (kernel == -1 && pf < 0 && sp < 0 && amx[0] < 0 && amx[1] < 0 && !n_costs)) {
        snprintf(warn, cap, "%s: not a tune cache this build reads (corrupt); ignored: run `refusion tune` again", path);
        c->n_cost = 0;
        return -1;
    }
    if (stale || !ok_build || !ok_cpu) {
        snprintf(warn, cap, "%s: measured by %s; ignored (stale): run `refusion tune` again",
                 path, !ok_cpu ? "another CPU model" : "another build");
        c->n_cost = 0;
        return -1;
    }
    c->bf16p_kernel = kernel, c->prefetch_l2 = pf, c->stream_panels = sp, c->amx_bf16 = amx[0], c->amx_int8 = amx[1];
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

int rf_tune_cache_write(const rf_tune_choices *set) {
    if (set->n_cost < 0 || set->n_cost > RF_TUNE_MAX_COST || (set->n_cost && !set->cost_key)) {
        rf_set_error("tune cache: a call-cost table holds 1..%d widths and has a key (got %d)", RF_TUNE_MAX_COST,
                     set->n_cost);
        return -1;
    }
    for (int i = 0; i < set->n_cost; i++)
        if (!(set->cost[i] >= 0.5f && set->cost[i] <= 1e4f)) {
            rf_set_error("tune cache: call cost %d is %g, outside [0.5, 1e4]", i + 1, (double)set->cost[i]);
            return -1;
        }
    char path[4096], tmp[4200], warn[4400], line[1024];
    if (rf_tune_cache_path(path, sizeof path) || make_parents(path)) return -1;
    rf_tune_choices c = {.cost_key = 0};
    int valid = rf_tune_cache_read(path, &c, warn, sizeof warn) == 1;
    if (!valid) c.bf16p_kernel = c.prefetch_l2 = c.stream_panels = c.amx_bf16 = c.amx_int8 = -1;
    if (set->bf16p_kernel >= 0) c.bf16p_kernel = set->bf16p_kernel;
    if (set->prefetch_l2 >= 0) c.prefetch_l2 = set->prefetch_l2;
    if (set->stream_panels >= 0) c.stream_panels = set->stream_panels;
    if (set->amx_bf16 >= 0) c.amx_bf16 = set->amx_bf16;
    if (set->amx_int8 >= 0) c.amx_int8 = set->amx_int8;
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rf_set_error("tune cache: cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, CACHE_HEADER "\ncpu: %s\nbuild: %s\n", rf_tune_cpu_model(), rf_tune_build_id());
    if (c.bf16p_kernel >= 0) fprintf(f, "bf16p: %s\n", c.bf16p_kernel == RF_BF16P_DP ? "dp" : "fma");
    if (c.prefetch_l2 >= 0) fprintf(f, "prefetch-l2: %d\n", c.prefetch_l2);
    if (c.stream_panels >= 0) fprintf(f, "stream-panels: %d\n", c.stream_panels);
    if (c.amx_bf16 >= 0) fprintf(f, "amx-bf16: %d\n", c.amx_bf16);
    if (c.amx_int8 >= 0) fprintf(f, "amx-int8: %d\n", c.amx_int8);
    /* the other keys' tables (a valid file's lines are whole and well formed) */
    FILE *in = valid ? fopen(path, "r") : NULL;
    while (in && fgets(line, sizeof line, in)) {
        unsigned long long k;
        int m;
        float cost[RF_TUNE_MAX_COST];
        char copy[1024];
        memcpy(copy, line, sizeof copy);
        const char *v = value_of(copy, "call-cost");
        if (v && parse_cost(v, &k, &m, cost) && !(set->n_cost > 0 && k == set->cost_key)) fputs(line, f);
    }
    if (in) fclose(in);
    if (set->n_cost > 0) {
        fprintf(f, "call-cost: %016llx %d", (unsigned long long)set->cost_key, set->n_cost);
        for (int i = 0; i < set->n_cost; i++) fprintf(f, " %.3f", set->cost[i]);
        fputc('\n', f);
    }
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

static int cache_on(void);

int rf_tune_cache_apply(void) {
    if (!cache_on()) {
        snprintf(g_state, sizeof g_state, "off");
        return 0;
    }
    char path[4096], warn[4400];
    rf_tune_choices c = {.cost_key = 0};
    if (rf_tune_cache_path(path, sizeof path)) {
        snprintf(g_state, sizeof g_state, "none");
        return 0;
    }
    int rc = rf_tune_cache_read(path, &c, warn, sizeof warn);
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
    if (c.bf16p_kernel >= 0 && !rf_env_bf16p()) rf_matmul_set_bf16p_kernel(c.bf16p_kernel);
    if (c.prefetch_l2 >= 0 && !rf_env_prefetch_l2()) rf_matmul_set_prefetch_l2(c.prefetch_l2);
    if (c.stream_panels >= 0 && !rf_env_stream_panels()) rf_matmul_set_stream_panels(c.stream_panels);
    if (c.amx_bf16 >= 0 && !rf_env_amx_bf16()) rf_matmul_set_amx_bf16(c.amx_bf16);
    if (c.amx_int8 >= 0 && !rf_env_amx_int8()) rf_matmul_set_amx_int8(c.amx_int8);
    snprintf(g_state, sizeof g_state, "applied: %s", path);
    return 1;
}

static int cache_on(void) {
    const char *e = rf_env_tune();
    return !g_disabled && !(e && !strcmp(e, "off"));
}

int rf_tune_cache_call_cost(uint64_t key, float *cost) {
    char path[4096], warn[4400];
    rf_tune_choices c = {.cost_key = key};
    if (!cache_on() || rf_tune_cache_path(path, sizeof path) || rf_tune_cache_read(path, &c, warn, sizeof warn) != 1)
        return 0; /* a corrupt or stale file was reported when the model loaded */
    memcpy(cost, c.cost, (size_t)c.n_cost * sizeof *cost);
    return c.n_cost;
}

rf_tune_choices rf_tune_choices_none(void) {
    rf_tune_choices c;
    memset(&c, 0, sizeof c);
    c.bf16p_kernel = c.prefetch_l2 = c.stream_panels = c.amx_bf16 = c.amx_int8 = -1;
    return c;
}
