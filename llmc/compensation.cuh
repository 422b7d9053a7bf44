// Staleness compensation's elementwise kernels on the GPU, the arithmetic of llmc/compensation.c:
// weights extrapolated along AdamW's direction (and the trajectory's change) into a floatX copy, the
// trajectory kept, DC-ASGD's sums and correction.
#pragma once
#include <math.h>
#include "cuda_common.cuh"

// w_prev, u_prev: the trajectory (second order, times c), or NULL (first order)
__global__ void adamw_predict_kernel(floatX* out, const float* w, const float* m, const float* v, const float* w_prev, const float* u_prev,
                                     long n, float lr_sum, float bc1, float bc2, float eps, float weight_decay, float c) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mhat = m[i] / bc1, vhat = v[i] / bc2;
    float p = w[i] - lr_sum * (mhat / (sqrtf(vhat) + eps) + weight_decay * w[i]);
    if (w_prev) p = fmaf(c, (w[i] - w_prev[i]) - u_prev[i], p); // compensation_curvature's arithmetic
    out[i] = from_float<floatX>(p);
}

// as compensation_predict, then compensation_curvature when w_prev (llmc/compensation.h), the result in the
// compute precision: out (n) floatX
static inline void adamw_predict_cuda(floatX* out, const float* w, const float* m, const float* v, const float* w_prev, const float* u_prev,
                                      size_t n, float lr_sum, float beta1, float beta2, float eps, float weight_decay, int t, float c) {
    if (n == 0) return;
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t); // as the CPU computes them
    adamw_predict_kernel<<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(out, w, m, v, w_prev, u_prev, (long)n, lr_sum, bc1, bc2, eps,
                                                                             weight_decay, c);
    cudaCheckLaunch("adamw_predict_kernel");
}

__global__ void trajectory_track_kernel(float* w_prev, float* u_prev, const float* w, long n, int first) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!first) u_prev[i] = w[i] - w_prev[i];
    w_prev[i] = w[i];
}
// as compensation_track (llmc/compensation.h)
static inline void trajectory_track_cuda(float* w_prev, float* u_prev, const float* w, size_t n, int first) {
    if (n == 0) return;
    trajectory_track_kernel<<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(w_prev, u_prev, w, (long)n, first);
    cudaCheckLaunch("trajectory_track_kernel");
}

// w: fp32 (the master weights) or floatX (a stash's compute copy), the weights the micro-batch used
template <typename TW>
__global__ void dc_accumulate_kernel(float* acc, float* a, float* b, const float* g, const TW* w, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i], gg = gi * gi;
    acc[i] += gi;
    a[i] += gg;
    b[i] += gg * to_float(w[i]);
}
template <typename TW>
static inline void dc_accumulate_cuda(float* acc, float* a, float* b, const float* g, const TW* w, size_t n) {
    if (n == 0) return;
    dc_accumulate_kernel<TW><<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(acc, a, b, g, w, (long)n);
    cudaCheckLaunch("dc_accumulate_kernel");
}

__global__ void grad_add_kernel(float* acc, const float* g, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += g[i];
}
static inline void grad_add_cuda(float* acc, const float* g, size_t n) {
    if (n == 0) return;
    grad_add_kernel<<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(acc, g, (long)n);
    cudaCheckLaunch("grad_add_kernel");
}

// w_now: fp32, or floatX (the compute copy: the same precision as the w_used dc_accumulate summed, so
// that w_now - w_used is the change of the weights the micro-batches ran on, not that plus bf16's rounding)
template <typename TW>
__global__ void dc_correct_kernel(float* acc, float* a, float* b, const TW* w_now, long n, float lambda) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    acc[i] += lambda * (to_float(w_now[i]) * a[i] - b[i]);
    a[i] = 0.0f;
    b[i] = 0.0f;
}
template <typename TW>
static inline void dc_correct_cuda(float* acc, float* a, float* b, const TW* w_now, size_t n, float lambda) {
    if (n == 0) return;
    dc_correct_kernel<TW><<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(acc, a, b, w_now, (long)n, lambda);
    cudaCheckLaunch("dc_correct_kernel");
}
