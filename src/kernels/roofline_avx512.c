/* roofline_avx512.c - the avx512 tier's compute peaks (see roofline.h);
 * compiled with AVX-512 flags, called only when the CPU has the tier. */
#include <immintrin.h>
#include <omp.h>

#include "kernels/roofline.h"
#include "util/util.h"

/* 12 independent accumulator chains per thread, as in roofline.c; the empty
 * asm stops the compiler from folding the loop. m0, m1 are private to each
 * thread (firstprivate): shared, the asm made every thread write them back
 * to one cache line each iteration, and 2 threads measured a tenth of the
 * peak. Returns ops/s / 1e9 with
 * ops_per_instr ops per instruction. */
#define PEAK_LOOP(T, INIT, STEP, SUM, ops_per_instr)                                                     \
    do {                                                                                                 \
        const long iters = 10 * 1000 * 1000;                                                             \
        double best = 0, sink = 0;                                                                       \
        for (int rep = 0; rep < 3; rep++) {                                                              \
            int nt = 1;                                                                                  \
            double t0 = rf_now();                                                                        \
            _Pragma("omp parallel reduction(+ : sink) firstprivate(m0, m1)") {                                              \
                _Pragma("omp single") nt = omp_get_num_threads();                                        \
                T a[12];                                                                                 \
                INIT;                                                                                    \
                for (long i = 0; i < iters; i++) {                                                       \
                    for (int j = 0; j < 12; j++) a[j] = STEP(a[j]);                                      \
                    __asm__ volatile("" : "+v"(m0), "+v"(m1));                                           \
                }                                                                                        \
                SUM;                                                                                     \
            }                                                                                            \
            double g = (double)nt * iters * 12 * (ops_per_instr) / (rf_now() - t0) / 1e9;                \
            if (g > best) best = g;                                                                      \
        }                                                                                                \
        return sink < -1e300 ? -best : best;                                                             \
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
