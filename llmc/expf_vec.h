// expf over an array, vectorised, bitwise equal to glibc's scalar expf on this machine (checked over
// every float by dev/check_vec_math): softmax and attention without one libm call per element.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// out[i] = expf(in[i]) for i < n; out may be in
void expf_vec(float* out, const float* in, long n);

#ifdef __cplusplus
}
#endif
