/* blas_env.c - run environment for training: OpenBLAS's AVX2 kernels and
 * passive OpenMP waiting.
 *
 * OpenBLAS 0.3.21 (Debian 12) picks its kernels by CPU model when the library
 * loads; a model it does not know (e.g. the Xeon family 6 model 207 this
 * project runs on) falls back to the SSE3 "Prescott" kernels, which run the
 * training matmuls ~3x slower. The choice can only be overridden through
 * OPENBLAS_CORETYPE before the library loads, so a long-running command that
 * finds the fallback re-executes itself once with OPENBLAS_CORETYPE=Haswell
 * (AVX2 + FMA, the project's target ISA).
 *
 * The same re-exec sets OMP_WAIT_POLICY=PASSIVE when unset: a training step
 * alternates OpenMP loops with OpenBLAS gemms, which run on OpenBLAS's own
 * threads; OpenMP threads spinning after their loop steal the cores those
 * gemms need (measured 3x slower steps on 2 busy cores). Like the core type,
 * the wait policy is read only when the runtime loads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

char *openblas_get_corename(void); /* OpenBLAS extension, not in every cblas.h */

void rf_train_env_setup(void) {
    if (getenv("RF_TRAIN_ENV_DONE")) return; /* re-executed already */
    int change = 0;
    const char *core = openblas_get_corename();
    __builtin_cpu_init();
    if (!getenv("OPENBLAS_CORETYPE") && core && !strcmp(core, "Prescott") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        setenv("OPENBLAS_CORETYPE", "Haswell", 1);
        change = 1;
    }
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        change = 1;
    }
    if (!change) return;
    size_t n;
    char *cmd = rf_read_file("/proc/self/cmdline", &n);
    if (!cmd || n == 0) {
        free(cmd);
        return;
    }
    int argc = 0;
    for (size_t i = 0; i < n; i++) argc += cmd[i] == 0;
    char **argv = rf_calloc((size_t)argc + 1, sizeof(char *));
    for (size_t i = 0, a = 0; i < n && (int)a < argc; a++) {
        argv[a] = cmd + i;
        i += strlen(cmd + i) + 1;
    }
    setenv("RF_TRAIN_ENV_DONE", "1", 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    free(argv); /* exec failed: carry on as we are */
    free(cmd);
}
