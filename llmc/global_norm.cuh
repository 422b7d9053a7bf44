// Sums of squares on the GPU for the global gradient norm, deterministic (a fixed grid and fixed
// reduction orders, whatever the device), returned in double like global_norm_sumsq() in llmc/global_norm.h.
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

// *out_dev (a device double) = Σ x² over n floats on the device, queued on the stream without
// waiting; partial: SUMSQ_BLOCKS floats of scratch (reused by the next call in stream order)
static inline void sumsq_cuda_async(double* out_dev, const float* x, size_t n, float* partial) {
    if (n == 0) {
        cudaCheck(cudaMemsetAsync(out_dev, 0, sizeof(double), g_cuda_stream));
        return;
    }
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, g_cuda_stream>>>(partial, x, (long)n);
    cudaCheckLaunch("sumsq_partial_kernel");
    sumsq_finish_kernel<<<1, 1, 0, g_cuda_stream>>>(out_dev, partial);
    cudaCheckLaunch("sumsq_finish_kernel");
}

// Σ x² over n floats on the device, returned to the host (synchronises); scratch: SUMSQ_BLOCKS + 2 floats
static inline double sumsq_cuda(const float* x, size_t n, float* scratch) {
    double* out = reinterpret_cast<double*>(scratch + SUMSQ_BLOCKS); // SUMSQ_BLOCKS is even: 8-byte aligned
    sumsq_cuda_async(out, x, n, scratch);
    double r;
    cudaCheck(cudaMemcpyAsync(&r, out, sizeof(double), cudaMemcpyDeviceToHost, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    return r;
}
