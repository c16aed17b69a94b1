/* roofline.h - measure this machine's two rooflines, so benchmarks can print
 * how close a kernel gets: streaming read bandwidth (memory-bound kernels,
 * e.g. a matmul with one token) and f32 FMA peak (compute-bound ones). Both
 * use all OpenMP threads (omp_get_max_threads()). Each takes ~0.5-1 s. */
#ifndef RF_ROOFLINE_H
#define RF_ROOFLINE_H

/* GB/s (1e9 bytes) summing a 1 GiB f32 array with AVX2, best of 3 passes. */
double rf_measure_read_gbs(void);
/* GFLOP/s (FMA = 2 flops) of a register-only 8-wide FMA loop, best of 3. */
double rf_measure_fma_gflops(void);

#endif
