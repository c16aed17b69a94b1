/* roofline.h - measure this machine's two rooflines, so benchmarks can print
 * how close a kernel gets: streaming read bandwidth (memory-bound kernels,
 * e.g. a matmul with one token) and compute peaks (compute-bound ones). Both
 * use all OpenMP threads (omp_get_max_threads()). Each takes ~0.5-1 s. */
#ifndef RF_ROOFLINE_H
#define RF_ROOFLINE_H

/* GB/s (1e9 bytes) summing a 1 GiB f32 array (in huge pages, as the
 * packed weights) with AVX2 as the packed kernels stream their weights (4
 * prefetched streams per thread), best of 8 passes; 0 if the array cannot
 * be allocated. A kernel reading faster than this in the same minute is a
 * probe bug (the bandwidth of a shared machine moves from minute to
 * minute: compare a kernel with a probe measured next to it). */
double rf_measure_read_gbs(void);
/* GFLOP/s (FMA = 2 flops) of a register-only 8-wide FMA loop (each
 * thread's fastest of 200 short bursts, summed over the threads). */
double rf_measure_fma_gflops(void);

/* Compute peaks per CPU tier and kind, in G ops/s (a multiply-add = 2 ops),
 * from register-only loops of 12 independent chains per thread, each
 * thread's fastest of 200 short bursts, summed over the threads:
 *   avx2:   f32 FMA (rf_measure_fma_gflops); int8 sign + maddubs + madd + add
 *           (the AVX2 Q8_0 kernel's step: 32 MACs per 4 instructions), and
 *           maddubs + add (the Q4_0 kernel's: 32 MACs per 2 instructions)
 *   avx512: f32 FMA (16-wide), bf16 vdpbf16ps (32 MACs), int8 vpdpbusd (64).
 * The avx512 ones must only be called when the CPU has that tier. */
double rf_peak_i8_maddubs_avx2(void);
double rf_peak_i8_maddubs16_avx2(void);
double rf_peak_f32_fma_avx512(void);
double rf_peak_bf16_dot_avx512(void);
double rf_peak_i8_vnni_avx512(void);
/* amx (roofline_amx.c): TDPBF16PS (16 x 16 x 32 bf16 multiply-adds per
 * instruction) and TDPBSUD (16 x 16 x 64 int8 ones), full tiles; and
 * TDPBSUD with K = 32 bytes (one 32-block, what the Q8_0 / Q4_0 tile
 * kernel issues; counted as 16 x 16 x 32). 6 accumulator tiles per
 * thread. Only when the tier is amx; 0 from a build without AMX kernels. */
double rf_peak_bf16_tile_amx(void);
double rf_peak_i8_tile_amx(void);
double rf_peak_i8_tile32_amx(void);

#endif
