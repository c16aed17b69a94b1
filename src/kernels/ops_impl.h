/* ops_impl.h - (internal to src/kernels) the avx512 tier's versions of
 * ops.c's vocabulary-wide passes, which ops.c dispatches to. */
#ifndef RF_OPS_IMPL_H
#define RF_OPS_IMPL_H

double rf_sum_exp_avx512(const float *x, int n, float shift);

#endif
