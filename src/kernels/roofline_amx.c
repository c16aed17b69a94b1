/* roofline_amx.c - the amx tier's compute peaks (see roofline.h): TDPBF16PS
 * and TDPBSUD on tiles, compiled with -mamx-* (CMakeLists.txt) and called
 * only when kernels/cpu.c found AMX and the OS granted the tile data. A
 * compiler without -mamx-* builds stubs that return 0 (no probe).
 *
 * Each thread configures its own tiles and loads its own operands (tiles
 * are per thread; the A and B data sit on its stack) and runs 6 TDPs per
 * iteration into 6 independent accumulator tiles (tmm0..5) from one A
 * (tmm6) and one B (tmm7): a TDP has a latency of several times its issue
 * interval, so one or two accumulators would measure latency, not
 * throughput. Timed as the avx512 probes: 200 short bursts per thread,
 * each thread's fastest counted, the threads' rates summed. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "kernels/roofline.h"
#include "util/util.h"

#ifndef RF_NO_AMX
#include <immintrin.h>

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* kbytes: the K extent of A in bytes (64: the full tile; 32: one 32-block
 * of int8, what the Q8_0 / Q4_0 kernel issues); B then has kbytes / 4 rows */
static double tile_peak(int int8, int kbytes) {
    const long iters = 2000;
    double total = 0, sink = 0;
#pragma omp parallel reduction(+ : sink, total)
    {
        tilecfg cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
        cfg.colsb[6] = (uint16_t)kbytes;
        cfg.rows[7] = (uint8_t)(kbytes / 4);
        uint8_t a[16 * 64] __attribute__((aligned(64))), bm[16 * 64] __attribute__((aligned(64)));
        float c[16 * 16] __attribute__((aligned(64)));
        /* small values: bf16 1/64 (0x3c80) and int8 1, no overflow in any burst */
        for (int i = 0; i < 16 * 64; i += 2) {
            uint16_t h = (uint16_t)(0x3c80 + (i & 14));
            if (int8) a[i] = bm[i] = 1, a[i + 1] = bm[i + 1] = (uint8_t)(i & 3);
            else memcpy(a + i, &h, 2), memcpy(bm + i, &h, 2);
        }
        _tile_loadconfig(&cfg);
        _tile_loadd(6, a, 64);
        _tile_loadd(7, bm, 64);
        double best = 1e30;
        for (int burst = 0; burst < 200; burst++) {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            _tile_zero(4);
            _tile_zero(5);
            double t0 = rf_now();
            if (int8)
                for (long i = 0; i < iters; i++) {
                    _tile_dpbsud(0, 6, 7);
                    _tile_dpbsud(1, 6, 7);
                    _tile_dpbsud(2, 6, 7);
                    _tile_dpbsud(3, 6, 7);
                    _tile_dpbsud(4, 6, 7);
                    _tile_dpbsud(5, 6, 7);
                }
            else
                for (long i = 0; i < iters; i++) {
                    _tile_dpbf16ps(0, 6, 7);
                    _tile_dpbf16ps(1, 6, 7);
                    _tile_dpbf16ps(2, 6, 7);
                    _tile_dpbf16ps(3, 6, 7);
                    _tile_dpbf16ps(4, 6, 7);
                    _tile_dpbf16ps(5, 6, 7);
                }
            _tile_stored(0, c, 64); /* waits for the chain: the burst's time includes its last TDPs */
            double dt = rf_now() - t0;
            sink += c[0];
            if (dt < best) best = dt;
        }
        _tile_release();
        /* a TDP: 16 x 16 outputs, each kbytes / 4 (bf16) or kbytes (int8) multiply-adds */
        double ops = 2.0 * 16 * 16 * (int8 ? kbytes : kbytes / 2);
        total += (double)iters * 6 * ops / best / 1e9;
    }
    return sink < -1e300 ? -total : total;
}

double rf_peak_bf16_tile_amx(void) { return tile_peak(0, 64); }
double rf_peak_i8_tile_amx(void) { return tile_peak(1, 64); }
double rf_peak_i8_tile32_amx(void) { return tile_peak(1, 32); }

#else

double rf_peak_bf16_tile_amx(void) { return 0; }
double rf_peak_i8_tile_amx(void) { return 0; }
double rf_peak_i8_tile32_amx(void) { return 0; }

#endif
