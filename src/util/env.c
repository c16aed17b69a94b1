/* env.c - the environment variables the library reads, all of them here:
 *   REFUSION_CPU       the kernel tier to use instead of the best one the CPU
 *                      has (avx2, avx512, amx; kernels/cpu.c)
 *   REFUSION_BF16_ACT  "split": bf16 weights meet f32-grade activations
 *                      (hi + lo) instead of activations rounded to bf16 once
 *                      (kernels/matmul.c)
 *   REFUSION_AMX_BF16  at the amx tier, which bf16 calls run on the tiles:
 *                      "off" (or 0) none, N those of N tokens or more; unset
 *                      or anything else from 5 tokens (kernels/matmul.c;
 *                      `refusion tune` measures the value for a machine)
 *   REFUSION_AMX_INT8  at the amx tier, which packed Q8_0 / Q4_0 calls run on
 *                      the int8 tiles: "off" (or 0) none (vpdpbusd), a
 *                      number N those of N tokens or more; unset or anything
 *                      else the default widths (kernels/matmul.c)
 * (The trainer also reads the MPI launcher's and OpenBLAS's own variables,
 * train/dist.c and train/blas_env.c: those are other programs' protocols.)
 * Test faults are not read from the environment by the library: programs
 * install them (rf_faults, util.h). */
#include <stdlib.h>

#include "util/util.h"

const char *rf_env_cpu_tier(void) { return getenv("REFUSION_CPU"); }
const char *rf_env_bf16_act(void) { return getenv("REFUSION_BF16_ACT"); }
const char *rf_env_amx_int8(void) { return getenv("REFUSION_AMX_INT8"); }
const char *rf_env_amx_bf16(void) { return getenv("REFUSION_AMX_BF16"); }
const char *rf_env_bf16p(void) { return getenv("REFUSION_BF16P"); }
const char *rf_env_prefetch_l2(void) { return getenv("REFUSION_PREFETCH_L2"); }
const char *rf_env_stream_panels(void) { return getenv("REFUSION_STREAM_PANELS"); }
const char *rf_env_tune(void) { return getenv("REFUSION_TUNE"); }
const char *rf_env_cache_home(void) { return getenv("XDG_CACHE_HOME"); }
const char *rf_env_home(void) { return getenv("HOME"); }

rf_fault_points rf_faults;
