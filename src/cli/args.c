/* args.c - see args.h */
#include "cli/args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rf_arg_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "refusion: %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int rf_arg_float(const char *cmd, const char *opt, const char *s, float *out) {
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end) {
        fprintf(stderr, "refusion: %s: %s expects a number, got '%s'\n", cmd, opt, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static const char *const ar_verify_names[4] = {"off", "correct", "first", "both"}; /* index a + 2b */

int rf_arg_ar_verify(const char *cmd, const char *opt, const char *s, int *ar_correct, int *ar_check_first) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, ar_verify_names[i])) {
            *ar_correct = i & 1;
            *ar_check_first = i >> 1;
            return 0;
        }
    fprintf(stderr, "refusion: %s: %s expects off, correct, first or both, got '%s'\n", cmd, opt, s);
    return -1;
}

const char *rf_ar_verify_name(int ar_correct, int ar_check_first) {
    return ar_verify_names[(ar_correct ? 1 : 0) + (ar_check_first ? 2 : 0)];
}
