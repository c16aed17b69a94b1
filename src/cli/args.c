/* args.c - see args.h */
#include "cli/args.h"

#include <stdio.h>
#include <stdlib.h>

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
