/* blas_env.c - the run environment training wants: OpenBLAS's AVX2 kernels
 * and passive OpenMP waiting. The library only says what to set; the program
 * (src/cli/cmd_train.c) sets it and re-executes itself.
 *
 * OpenBLAS 0.3.21 (Debian 12) picks its kernels by CPU model when the library
 * loads; a model it does not know (e.g. the Xeon family 6 model 207 this
 * project runs on) falls back to the SSE3 "Prescott" kernels, which run the
 * training matmuls ~3x slower. The choice can only be overridden through
 * OPENBLAS_CORETYPE before the library loads (Haswell = AVX2 + FMA, the
 * project's target ISA).
 *
 * OMP_WAIT_POLICY=PASSIVE when unset: a training step alternates OpenMP loops
 * with OpenBLAS gemms, which run on OpenBLAS's own threads; OpenMP threads
 * spinning after their loop steal the cores those gemms need (measured 3x
 * slower steps on 2 busy cores). Like the core type, the wait policy is read
 * only when the runtime loads. */
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

char *openblas_get_corename(void); /* OpenBLAS extension, not in every cblas.h */

int rf_train_env_advice(const char *names[2], const char *values[2]) {
    int n = 0;
    const char *core = openblas_get_corename();
    __builtin_cpu_init();
    if (!getenv("OPENBLAS_CORETYPE") && core && !strcmp(core, "Prescott") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        names[n] = "OPENBLAS_CORETYPE";
        values[n++] = "Haswell";
    }
    if (!getenv("OMP_WAIT_POLICY")) {
        names[n] = "OMP_WAIT_POLICY";
        values[n++] = "PASSIVE";
    }
    return n;
}
