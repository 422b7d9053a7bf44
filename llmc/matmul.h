// CPU matmul for GPT-2's linear layers: out = inp · weightᵀ + bias, and its backward split into the
// input-gradient part and the weight-gradient part (ZB-H1 runs them at different times).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// out (N, OC) = inp (N, C) · weight (OC, C)ᵀ + bias (OC, may be NULL)
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
// dinp (N, C) += dout (N, OC) · weight (OC, C); accumulate 0: dinp = ..., bitwise as if added to zeros
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC, int accumulate);
// dweight (OC, C) += dout (N, OC)ᵀ · inp (N, C);  dbias (OC, may be NULL) += Σ_n dout; accumulate 0: both
// written, bitwise as if added to zeros
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int C, int OC, int accumulate);

#ifdef __cplusplus
}
#endif
