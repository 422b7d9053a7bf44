// Sums of squares for the global gradient norm, in a fixed order whatever the thread count or
// the pipeline split: per-unit partial sums (embedding, each layer, head) folded left in model order.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// Σ x² over n floats in double, summed in fixed-size chunks then in chunk order (deterministic)
double global_norm_sumsq(const float* x, size_t n);
// dst = a + b elementwise (dst may be a or b), returning global_norm_sumsq(dst) bitwise, from the same pass over memory
double global_norm_sumsq_of_sum(float* dst, const float* a, const float* b, size_t n);

#ifdef __cplusplus
}
#endif
