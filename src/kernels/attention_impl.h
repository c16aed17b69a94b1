/* attention_impl.h - (internal to src/kernels) the avx512 tier's attention
 * kernels that rf_scores2 / rf_mix2 (ops.c) dispatch to; hd a multiple of
 * 16 (scores) or 32 (mix). */
#ifndef RF_ATTENTION_IMPL_H
#define RF_ATTENTION_IMPL_H

#include <stddef.h>

void rf_scores2_avx512(float *sc0, float *sc1, const float *q0, const float *q1, const float *K, size_t ldk, int n,
                       int hd, float scale);
void rf_mix2_avx512(float *out0, float *out1, const float *p0, const float *p1, const float *V, size_t ldv, int n,
                    int hd);

#endif
