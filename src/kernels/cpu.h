/* cpu.h - which instruction-set tier the kernels run at, chosen at run time.
 *
 * One binary runs on every machine: the baseline code is compiled for AVX2 +
 * FMA + F16C, and the higher tiers' kernels are compiled per source file
 * with their own target flags and only called when this CPU (cpuid) and the
 * OS (xgetbv: it saves the ZMM / tile state; arch_prctl: it grants AMX tile
 * data) allow them:
 *   avx2    AVX2 + FMA + F16C (baseline; the build requires it)
 *   avx512  AVX-512 F/BW/VL/DQ plus BF16 (vdpbf16ps) and VNNI (vpdpbusd):
 *           Cooper Lake / Sapphire Rapids and later, AMD Zen 4 and later. A
 *           CPU with AVX-512 but without BF16 + VNNI (Skylake-X) is avx2.
 *   amx     avx512 plus AMX-TILE/BF16/INT8 with the OS's permission. bf16
 *           weights run on TDPBF16PS tiles (matmul_amx.c; verified on an
 *           AMX Xeon, and through a C emulation of the tile ops); packed
 *           Q8_0 / Q4_0 run on TDPBSUD tiles at the widths where they
 *           beat vpdpbusd (rf_matmul_set_amx_int8);
 *           every other case runs the avx512 kernels. A build whose
 *           compiler lacks -mamx-* has no AMX kernels: then amx runs as
 *           avx512 (rf_cpu_tier_name says "avx512").
 *
 * REFUSION_CPU=avx2|avx512|amx (read once, at the first use) asks for a tier.
 * A lower tier than the CPU's is used as asked. A higher one than the CPU
 * has, or an unknown name, is not an error (the library must keep working):
 * the best available tier is used and rf_cpu_note() says so in one line,
 * which `refusion info` and the benchmarks print. */
#ifndef RF_CPU_H
#define RF_CPU_H

typedef enum { RF_CPU_AVX2 = 0, RF_CPU_AVX512 = 1, RF_CPU_AMX = 2 } rf_cpu_tier;

/* The best tier this CPU + OS supports (cached after the first call). */
rf_cpu_tier rf_cpu_tier_detected(void);
/* The tier the kernels dispatch on now (REFUSION_CPU applied, capped at
 * what the kernels have). */
rf_cpu_tier rf_cpu_tier_active(void);
/* "avx2", "avx512" or "amx" for a tier; rf_cpu_tier_name() for the active one. */
const char *rf_cpu_tier_str(rf_cpu_tier t);
const char *rf_cpu_tier_name(void);
/* Set the active tier (tests and benchmarks loop over tiers with it).
 * -1 and rf_last_error() when the CPU lacks it; the tier is unchanged. */
int rf_cpu_set_tier(rf_cpu_tier t);
/* A one-line note about REFUSION_CPU (a tier the CPU lacks, an unknown
 * name) or the amx tier's kernels absent from this build, or "" when there
 * is none. (Which calls run on the tiles: kernels.h rf_matmul_amx_note.) */
const char *rf_cpu_note(void);
/* 1 when this build has the amx tier's kernels (matmul_amx.c: the
 * compiler knew -mamx-*); the tier is never active without them. */
int rf_amx_built(void);
/* 1 when the CPU's vendor string is AMD's ("AuthenticAMD"): the kernels'
 * defaults where the vendors' cores differ (kernels.h). */
int rf_cpu_is_amd(void);

#endif
