/* roofline.c - measured read bandwidth and FMA peak (see roofline.h). */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include "kernels/roofline.h"
#include "util/util.h"

/* The read probe streams the way the packed matmul kernels do: each
 * thread reads its own contiguous share as 4 interleaved streams (a 1-token
 * tile reads 4 panels at once) with a software prefetch 2 KB ahead in each,
 * and sums with 8 independent vector adds so the loads alone bound it. A
 * single stream without prefetch reads far less than the kernels do, so it
 * would be no ceiling for them. The passes alternate the prefetch into L1
 * and into L2 (the kernels' two levels, kernels.h rf_matmul_set_prefetch):
 * which reads faster depends on the CPU (into L2 on AMD Zen 4), and the
 * ceiling is the faster. */
#define BW_STREAMS 4
#define BW_PF 2048
double rf_measure_read_gbs(void) {
    size_t n = (size_t)1 << 28; /* 2^28 floats = 1 GiB: far beyond any cache */
    /* in transparent huge pages where the system grants them, as the
     * packed weights are (model/pack.c), so that both pay the same page
     * walks */
    float *a = rf_try_huge_alloc(n * sizeof(float));
    if (!a) return 0;
    /* non-zero, written by the threads that will read it (the allocator
     * has already touched every page once, zeroing it) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    double best = 0, sink = 0;
    for (int rep = 0; rep < 8; rep++) { /* the best of 8 passes: on a shared machine the least disturbed */
        double t0 = rf_now(), tot = 0;
#pragma omp parallel reduction(+ : tot)
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t share = n / (size_t)nt / (BW_STREAMS * 64) * (BW_STREAMS * 64); /* whole 64-float steps */
            const float *base = a + (size_t)id * share;
            size_t len = share / BW_STREAMS; /* floats per stream */
            __m256 s[2 * BW_STREAMS];
            for (int k = 0; k < 2 * BW_STREAMS; k++) s[k] = _mm256_setzero_ps();
            for (size_t off = 0; off < len; off += 16) { /* 16 floats = one 64-byte line per stream */
                for (int k = 0; k < BW_STREAMS; k++) {
                    const float *p = base + (size_t)k * len + off;
                    if (rep & 1)
                        _mm_prefetch((const char *)p + BW_PF, _MM_HINT_T1);
                    else
                        _mm_prefetch((const char *)p + BW_PF, _MM_HINT_T0);
                    s[2 * k] = _mm256_add_ps(s[2 * k], _mm256_load_ps(p));
                    s[2 * k + 1] = _mm256_add_ps(s[2 * k + 1], _mm256_load_ps(p + 8));
                }
            }
            __m256 t = s[0];
            for (int k = 1; k < 2 * BW_STREAMS; k++) t = _mm256_add_ps(t, s[k]);
            tot += _mm256_cvtss_f32(t);
        }
        double dt = rf_now() - t0;
        sink += tot;
        int nt = omp_get_max_threads();
        double bytes = (double)(n / (size_t)nt / (BW_STREAMS * 64) * (BW_STREAMS * 64)) * nt * sizeof(float);
        double gbs = bytes / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    if (sink < 0) best = -best; /* keep the sums alive; never true */
    free(a);
    return best;
}

/* body(iters) on every OpenMP thread at once, in G ops/s with
 * ops_per_iter ops per iteration: each thread times 200 short bursts
 * (~0.2 ms) and counts its fastest, and the threads' rates are summed (a
 * long timed loop counted the time slices other processes took on a
 * shared machine, and kernels timed at their best beat it). body returns a
 * sum of its results, which the (never true) sign test keeps alive. */
static double best_burst(double (*body)(long iters), long iters, double ops_per_iter) {
    double total = 0, sink = 0;
    const long burst_iters = iters / 1000 > 0 ? iters / 1000 : 1;
#pragma omp parallel reduction(+ : sink, total)
    {
        double best = 1e30;
        for (int burst = 0; burst < 200; burst++) {
            double t0 = rf_now();
            sink += body(burst_iters);
            double dt = rf_now() - t0;
            if (dt < best) best = dt;
        }
        total += (double)burst_iters * ops_per_iter / best / 1e9;
    }
    return sink < -1e300 ? -total : total;
}

/* 12 independent accumulator chains per thread cover FMA latency (4
 * cycles) x 2 FMA ports with room to spare; acc = acc * m + c converges
 * to c / (1 - m), so there are no overflows or denormals. The chains
 * start from different values: identical chains would be merged into
 * one by the compiler (which then measures FMA latency, not throughput). */
static double fma_chains(long iters) {
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    __m256 a0 = _mm256_set1_ps(0.01f), a1 = _mm256_set1_ps(0.02f), a2 = _mm256_set1_ps(0.03f);
    __m256 a3 = _mm256_set1_ps(0.04f), a4 = _mm256_set1_ps(0.05f), a5 = _mm256_set1_ps(0.06f);
    __m256 a6 = _mm256_set1_ps(0.07f), a7 = _mm256_set1_ps(0.08f), a8 = _mm256_set1_ps(0.09f);
    __m256 a9 = _mm256_set1_ps(0.10f), a10 = _mm256_set1_ps(0.11f), a11 = _mm256_set1_ps(0.12f);
    for (long i = 0; i < iters; i++) {
        a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c); a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c);
        a8 = _mm256_fmadd_ps(a8, m, c); a9 = _mm256_fmadd_ps(a9, m, c);
        a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
        /* an empty asm that claims to change m stops the compiler from
         * folding the loop */
        __asm__ volatile("" : "+x"(m));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    return _mm256_cvtss_f32(s);
}

double rf_measure_fma_gflops(void) { return best_burst(fma_chains, 20 * 1000 * 1000, 12 * 8 * 2); }

/* The avx2 Q8_0 kernel's step per weight vector and token (matmul_avx2p.c):
 * acc += madd(maddubs(|w|, sign(x, w)), 1), 32 MACs in 4 instructions
 * (|w| is computed once per weight vector and shared by the tile's tokens,
 * so it is not counted). The empty asm on w inside the loop tells the
 * compiler w changed, so sign and maddubs are recomputed for every chain:
 * without it they are hoisted out of the 12 chains and the probe would
 * count 12 maddubs where the CPU does one. */
static double maddubs_chains(long iters) {
    __m256i w = _mm256_set1_epi8(-3), x = _mm256_set1_epi8(2), one = _mm256_set1_epi16(1), a[12];
    __m256i wa = _mm256_abs_epi8(w);
    for (int j = 0; j < 12; j++) a[j] = _mm256_set1_epi32(j);
    for (long i = 0; i < iters; i++) {
        for (int j = 0; j < 12; j++) {
            __asm__ volatile("" : "+x"(w));
            a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, w)), one));
        }
    }
    double sink = 0;
    for (int j = 0; j < 12; j++) sink += _mm256_extract_epi32(a[j], 0);
    return sink;
}

double rf_peak_i8_maddubs_avx2(void) { return best_burst(maddubs_chains, 10 * 1000 * 1000, 12 * 64); }

/* The avx2 Q4_0 kernel's step: its nibbles u = w + 8 are unsigned, so no
 * sign; acc16 += maddubs(u, x), 32 MACs in 2 instructions (a block's 16-bit
 * sums are widened once per block, not counted). Half the Q8_0 step's
 * instructions, so the Q4_0 kernel is measured against this peak: against
 * the Q8_0 step's it would read above 100%. */
static double maddubs16_chains(long iters) {
    __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(2), a[12];
    for (int j = 0; j < 12; j++) a[j] = _mm256_set1_epi16((short)j);
    for (long i = 0; i < iters; i++) {
        for (int j = 0; j < 12; j++) {
            __asm__ volatile("" : "+x"(w));
            a[j] = _mm256_add_epi16(a[j], _mm256_maddubs_epi16(w, x));
        }
    }
    double sink = 0;
    for (int j = 0; j < 12; j++) sink += _mm256_extract_epi16(a[j], 0);
    return sink;
}

double rf_peak_i8_maddubs16_avx2(void) { return best_burst(maddubs16_chains, 10 * 1000 * 1000, 12 * 64); }
