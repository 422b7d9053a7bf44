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

// Where a matmul's threads spend their time (dev/bench_cpu's breakdown): with profile_on, the
// thread-seconds packing operands and in the micro-kernel, and the product's FLOPs the micro-kernel
// computed (2 M N K: a partial tile's padding is not counted), summed over threads and calls since
// matmul_profile_reset; pass 0 forward, 1 backward-input, 2 backward-weight
typedef struct {
    double pack_s, kernel_s, kernel_flops;
} MatmulSplit;
MatmulSplit matmul_profile_split(int pass);
void matmul_profile_reset(void);
// the micro-kernel alone, on every thread at once, each over its own tile of C (mi, nj) at depth kc
// (<= the packed block's), its packed operands reused so that they stay in cache: 256 x 288 x 256
// keeps them in L2, 8 x 48 x 128 in L1 (what it does with no memory traffic to wait for). GFLOP/s
// per thread, each thread's rate over `seconds`, averaged
double matmul_kernel_gflops(double seconds, int mi, int nj, int kc);

#ifdef __cplusplus
}
#endif
