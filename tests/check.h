/* check.h - a minimal assertion layer for the C test programs run by CTest.
 * CHECK(cond, fmt, ...) records a failure with file:line and keeps going;
 * a test's main ends with `return check_summary("name");`, which prints the
 * counts and returns non-zero when anything failed. */
#ifndef RF_CHECK_H
#define RF_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_n_pass, check_n_fail;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            check_n_pass++;                                                \
        } else {                                                           \
            check_n_fail++;                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* max |a-b| / (max |b| + tiny) over n floats */
static inline double check_rel_err(const float *a, const float *b, size_t n) {
    double md = 0, mb = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs((double)b[i]) > mb) mb = fabs((double)b[i]);
    }
    return md / mb;
}

static inline int check_summary(const char *name) {
    printf("%s: %d checks passed, %d failed\n", name, check_n_pass, check_n_fail);
    return check_n_fail ? 1 : 0;
}

#endif
