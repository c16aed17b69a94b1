/* ops_impl.h - (internal to src/kernels) the avx512 tier's versions of
 * ops.c's vocabulary-wide passes and MLP activation, which ops.c
 * dispatches to. */
#ifndef RF_OPS_IMPL_H
#define RF_OPS_IMPL_H

#include <stddef.h>

double rf_sum_exp_avx512(const float *x, int n, float shift);
size_t rf_silu_mul_avx512(float *g, const float *u, size_t n);

#endif
