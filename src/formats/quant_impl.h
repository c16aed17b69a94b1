/* quant_impl.h - the rounding helpers ggml's reference quantisers share
 * (formats/quant*.c), private to src/formats. */
#ifndef RF_QUANT_IMPL_H
#define RF_QUANT_IMPL_H

#include <stdint.h>
#include <string.h>

/* the nearest integer, ties to even, for |v| < 2^22: v + 1.5 * 2^23 puts
 * the integer in the low mantissa bits (ggml's nearest_int) */
static inline int rf_nearest(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int rf_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* a block's all-zero threshold (ggml's GROUP_MAX_EPS) */
#define RF_GROUP_MAX_EPS 1e-15f

#endif
