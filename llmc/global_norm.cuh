// Sums of squares on the GPU for the global gradient norm, deterministic (a fixed grid and fixed
// reduction orders, whatever the device), returned in double like sumsq() in llmc/global_norm.h.
#pragma once
#include "cuda_common.cuh"

#define SUMSQ_BLOCKS 512
#define SUMSQ_THREADS 512

// partial[blockIdx.x] = Σ x² over the elements i ≡ this thread (mod the grid), tree-reduced in the block
__global__ void __launch_bounds__(SUMSQ_THREADS) sumsq_partial_kernel(float* partial, const float* x, long n) {
    __shared__ float red[SUMSQ_THREADS / 32];
    long stride = (long)SUMSQ_BLOCKS * SUMSQ_THREADS;
    float s = 0.0f;
    for (long i = (long)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n; i += stride) s += x[i] * x[i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < SUMSQ_THREADS / 32; w++) t += red[w];
        partial[blockIdx.x] = t;
    }
}

// out = Σ partial in order, in double
__global__ void sumsq_finish_kernel(double* out, const float* partial) {
    double s = 0.0;
    for (int i = 0; i < SUMSQ_BLOCKS; i++) s += partial[i];
    *out = s;
}

// Σ x² over n floats on the device; scratch: SUMSQ_BLOCKS floats + one double (SUMSQ_BLOCKS + 2 floats).
// Synchronises with the stream to return the value.
static inline double sumsq_cuda(const float* x, size_t n, float* scratch) {
    if (n == 0) return 0.0;
    double* out = reinterpret_cast<double*>(scratch + SUMSQ_BLOCKS); // SUMSQ_BLOCKS is even: 8-byte aligned
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, g_cuda_stream>>>(scratch, x, (long)n);
    cudaCheckLaunch("sumsq_partial_kernel");
    sumsq_finish_kernel<<<1, 1, 0, g_cuda_stream>>>(out, scratch);
    cudaCheckLaunch("sumsq_finish_kernel");
    double r;
    cudaCheck(cudaMemcpyAsync(&r, out, sizeof(double), cudaMemcpyDeviceToHost, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    return r;
}
