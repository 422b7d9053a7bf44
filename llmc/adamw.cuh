// AdamW on the GPU, the semantics of llmc/adamw.c (decoupled weight decay, bias correction, gradient
// scaling for clipping): fp32 master weights and moments, and the floatX copy the kernels compute with.
#pragma once
#include <math.h>
#include "cuda_common.cuh"

// one step on n elements; bc1 = 1 - beta1^t, bc2 = 1 - beta2^t; params (n) may be NULL
__global__ void adamw_kernel(float* master, floatX* params, const float* grads, float* m, float* v, long n, float lr, float beta1,
                             float beta2, float bc1, float bc2, float eps, float weight_decay, float grad_scale) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = grads[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float p = master[i];
    p -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
    master[i] = p;
    if (params) params[i] = from_float<floatX>(p);
}

// as adamw_update in llmc/adamw.h, on device arrays; also refreshes the floatX copy params (n) if non-NULL
static inline void adamw_update_cuda(float* master, floatX* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                                     float beta2, float eps, float weight_decay, int t, float grad_scale) {
    if (n == 0) return;
    // the bias corrections exactly as the CPU computes them
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(master, params, grads, m, v, (long)n, lr, beta1, beta2, bc1, bc2, eps,
                                                                   weight_decay, grad_scale);
    cudaCheckLaunch("adamw_kernel");
}
