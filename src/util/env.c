/* env.c - the environment variables the library reads, all of them here:
 *   REFUSION_CPU       the kernel tier to use instead of the best one the CPU
 *                      has (avx2, avx512, amx; kernels/cpu.c)
 *   REFUSION_BF16_ACT  "split": bf16 weights meet f32-grade activations
 *                      (hi + lo) instead of activations rounded to bf16 once
 *                      (kernels/matmul.c)
 * (The trainer also reads the MPI launcher's and OpenBLAS's own variables,
 * train/dist.c and train/blas_env.c: those are other programs' protocols.)
 * Test faults are not read from the environment by the library: programs
 * install them (rf_faults, util.h). */
#include <stdlib.h>

#include "util/util.h"

const char *rf_env_cpu_tier(void) { return getenv("REFUSION_CPU"); }
const char *rf_env_bf16_act(void) { return getenv("REFUSION_BF16_ACT"); }

rf_fault_points rf_faults;
