/* roofline_avx512.c - the avx512 tier's compute peaks (see roofline.h);
 * compiled with AVX-512 flags, called only when the CPU has the tier. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/roofline.h"
#include "util/util.h"

/* 12 independent accumulator chains per thread; the empty asm stops the
 * compiler from folding the loop. m0, m1 are private to each thread
 * (firstprivate): shared, the asm would make every thread write them back
 * to one cache line each iteration, and 2 threads would measure a fraction
 * of the peak. Timed in 200 short bursts per thread (~0.2 ms each), each
 * thread's fastest burst counted, the threads' rates summed: one long timed
 * loop would count every time slice another process takes on a shared
 * machine, and kernels timed at their best would then beat "the peak".
 * Returns ops/s / 1e9 with ops_per_instr ops per instruction. */
#define PEAK_LOOP(T, INIT, STEP, SUM, ops_per_instr)                                                     \
    do {                                                                                                 \
        const long iters = 20 * 1000;                                                                    \
        double total = 0, sink = 0;                                                                      \
        _Pragma("omp parallel reduction(+ : sink, total) firstprivate(m0, m1)") {                        \
            T a[12];                                                                                     \
            INIT;                                                                                        \
            double best = 1e30;                                                                          \
            for (int burst = 0; burst < 200; burst++) {                                                  \
                double t0 = rf_now();                                                                    \
                for (long i = 0; i < iters; i++) {                                                       \
                    for (int j = 0; j < 12; j++) a[j] = STEP(a[j]);                                      \
                    __asm__ volatile("" : "+v"(m0), "+v"(m1));                                           \
                }                                                                                        \
                double dt = rf_now() - t0;                                                               \
                if (dt < best) best = dt;                                                                \
            }                                                                                            \
            SUM;                                                                                         \
            total += (double)iters * 12 * (ops_per_instr) / best / 1e9;                                  \
        }                                                                                                \
        return sink < -1e300 ? -total : total;                                                           \
    } while (0)

double rf_peak_f32_fma_avx512(void) {
    __m512 m0 = _mm512_set1_ps(0.999999f), m1 = _mm512_set1_ps(1e-6f);
#define STEP_F(x) _mm512_fmadd_ps(x, m0, m1)
    PEAK_LOOP(__m512, for (int j = 0; j < 12; j++) a[j] = _mm512_set1_ps(0.01f * (j + 1)), STEP_F,
              for (int j = 0; j < 12; j++) sink += _mm512_reduce_add_ps(a[j]), 32);
}

double rf_peak_bf16_dot_avx512(void) {
    __m512bh m0 = (__m512bh)_mm512_set1_epi16(0x3f80), m1 = (__m512bh)_mm512_set1_epi16(0x3380);
#define STEP_B(x) _mm512_dpbf16_ps(x, m0, m1)
    PEAK_LOOP(__m512, for (int j = 0; j < 12; j++) a[j] = _mm512_set1_ps(0.01f * (j + 1)), STEP_B,
              for (int j = 0; j < 12; j++) sink += _mm512_reduce_add_ps(a[j]), 64);
}

double rf_peak_i8_vnni_avx512(void) {
    __m512i m0 = _mm512_set1_epi8(1), m1 = _mm512_set1_epi8(2);
#define STEP_I(x) _mm512_dpbusd_epi32(x, m0, m1)
    PEAK_LOOP(__m512i, for (int j = 0; j < 12; j++) a[j] = _mm512_set1_epi32(j), STEP_I,
              for (int j = 0; j < 12; j++) sink += _mm512_reduce_add_epi32(a[j]), 128);
}
