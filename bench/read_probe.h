/* read_probe.h - the read-bandwidth ceiling for a benchmark's rows. The
 * bandwidth of a shared virtual machine moves from minute to minute, so a
 * probe measured at a benchmark's start can sit below a kernel measured
 * later in a faster minute. When a row streams faster than the ceiling
 * known so far, the probe runs again (up to three times) and the ceiling
 * becomes the best probe seen; a row still above it is a probe bug, which
 * the benchmark prints. (A header of static functions: each benchmark is
 * one file.) */
#ifndef RF_BENCH_READ_PROBE_H
#define RF_BENCH_READ_PROBE_H

#include <unistd.h>

#include "kernels/roofline.h"

/* bytes twice the last-level cache or more: a call streams them from memory */
static inline int beyond_llc(double bytes) {
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return bytes > 2.0 * (double)(l3 > 0 ? l3 : 32L << 20);
}

/* *ceiling raised by fresh probes while gbs (a row's streaming rate over
 * `bytes` of weights) is above it; 1 if the row is still above: a probe bug */
static inline int read_probe_beaten(double gbs, double bytes, double *ceiling) {
    if (!beyond_llc(bytes)) return 0; /* cache-resident: no bandwidth bound */
    for (int i = 0; i < 3 && gbs > *ceiling; i++) {
        double b = rf_measure_read_gbs();
        if (b > *ceiling) *ceiling = b;
    }
    return gbs > *ceiling;
}

#endif
