// exp and tanh over float arrays, vectorised: softmax's and GELU's elementary functions without one
// libm call per element. Each is within its stated ulps of the true value on every float
// (dev/check_vec_math checks all 2^32), and gives an input the same result wherever it sits in any array.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// the bounds dev/check_vec_math and tests/test_vec_math hold these functions to, in ulps (td_ulp_error).
// Measured on every float (AVX-512 with FMA): see dev/check_vec_math's output in README
#define EXPF_VEC_MAX_ULP 1.0
#define TANHF_VEC_MAX_ULP 2.0

// out[i] = e^in[i] for i < n, within EXPF_VEC_MAX_ULP (inf above 88.72, 0 below -103.97); out may be in
void expf_vec(float* out, const float* in, long n);
// out[i] = tanh(in[i]) for i < n, within TANHF_VEC_MAX_ULP; out may be in
void tanhf_vec(float* out, const float* in, long n);

#ifdef __cplusplus
}
#endif
