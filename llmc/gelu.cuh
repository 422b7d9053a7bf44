// GELU (tanh approximation, as llmc/ops.c) on the GPU: forward and backward, elementwise, 16-byte
// accesses; N a multiple of 8 (bf16) or 4 (fp32).
#pragma once
#include "cuda_common.cuh"

#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)

// out (N) = GELU(inp (N))
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, long N) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 x = load128cs(inp + i), o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) {
        float v = to_float(x[k]);
        float u = GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v);
        o[k] = from_float<floatX>(0.5f * v * (1.0f + tanhf(u)));
    }
    store128(out + i, o);
}

// dinp (N) = GELU'(inp) · dout (overwrites; dinp may alias dout)
__global__ void gelu_backward_kernel(floatX* dinp, const floatX* inp, const floatX* dout, long N) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 x = load128cs(inp + i), d = load128cs(dout + i), o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) {
        float v = to_float(x[k]);
        float u = GELU_SCALING_FACTOR * (v + 0.044715f * v * v * v);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
        o[k] = from_float<floatX>(grad * to_float(d[k]));
    }
    store128(dinp + i, o);
}

static inline void gelu_forward_cuda(floatX* out, const floatX* inp, long N) {
    if (N % x128::size) td_fatal("gelu_forward_cuda: N = %ld must be a multiple of %d", N, x128::size);
    gelu_forward_kernel<<<ceil_div(N / x128::size, 256), 256, 0, g_cuda_stream>>>(out, inp, N);
    cudaCheckLaunch("gelu_forward_kernel");
}

static inline void gelu_backward_cuda(floatX* dinp, const floatX* inp, const floatX* dout, long N) {
    if (N % x128::size) td_fatal("gelu_backward_cuda: N = %ld must be a multiple of %d", N, x128::size);
    gelu_backward_kernel<<<ceil_div(N / x128::size, 256), 256, 0, g_cuda_stream>>>(dinp, inp, dout, N);
    cudaCheckLaunch("gelu_backward_kernel");
}
