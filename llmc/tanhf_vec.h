// tanhf over an array, vectorised, bitwise equal to fdlibm's scalar tanhf (the one glibc's libm ships,
// checked over every float by dev/check_vec_math): GELU's tanh without one libm call per element.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// out[i] = tanhf(in[i]) for i < n; out may be in
void tanhf_vec(float* out, const float* in, long n);

#ifdef __cplusplus
}
#endif
