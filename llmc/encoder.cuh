// The embedding on the GPU: out = wte[token] + wpe[position], and its backward into fp32 gradients.
// The backward is deterministic without atomics: positions are bucketed by token on the host (the
// tokens come from the host anyway), one block per distinct token sums its positions in order.
#pragma once
#include <algorithm>
#include "cuda_common.cuh"

// out (B, T, C) = wte[inp] (Vp, C) + wpe[t] (maxT, C); inp (B, T) on the device
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int cv = C / x128::size;
    if (idx >= (long)B * T * cv) return;
    long bt = idx / cv;
    int c = (int)(idx % cv) * x128::size, t = (int)(bt % T);
    x128 we = load128(wte + (size_t)inp[bt] * C + c), wp = load128(wpe + (size_t)t * C + c), o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) o[k] = from_float<floatX>(to_float(we[k]) + to_float(wp[k]));
    store128(out + bt * C + c, o);
}

// dwpe (maxT, C) += Σ_b dout[b, t]: one thread per (t, x128 column chunk), b in order
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int cv = C / x128::size;
    if (idx >= (long)T * cv) return;
    int t = (int)(idx / cv), c = (int)(idx % cv) * x128::size;
    float acc[x128::size] = {};
    for (int b = 0; b < B; b++) {
        x128 d = load128(dout + ((size_t)b * T + t) * C + c);
        for (int k = 0; k < x128::size; k++) acc[k] += to_float(d[k]);
    }
    for (int k = 0; k < x128::size; k++) dwpe[(size_t)t * C + c + k] += acc[k];
}

// dwte[token] (C) += Σ over the token's positions (ascending) of dout[position]:
// block u handles distinct token tokens[u], positions[offsets[u] .. offsets[u+1])
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* positions, const int* offsets, const int* tokens, int C) {
    int u = blockIdx.x;
    int c = (blockIdx.y * blockDim.x + threadIdx.x) * x128::size;
    if (c >= C) return;
    float acc[x128::size] = {};
    for (int i = offsets[u]; i < offsets[u + 1]; i++) {
        x128 d = load128(dout + (size_t)positions[i] * C + c);
        for (int k = 0; k < x128::size; k++) acc[k] += to_float(d[k]);
    }
    float* w = dwte + (size_t)tokens[u] * C + c;
    for (int k = 0; k < x128::size; k++) w[k] += acc[k];
}

static inline void encoder_check(int C, const char* what) {
    if (C % x128::size) td_fatal("%s: C = %d must be a multiple of %d", what, C, x128::size);
}

// out (B, T, C) from token ids inp (B, T) on the device
static inline void encoder_forward_cuda(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    encoder_check(C, "encoder_forward_cuda");
    long n = (long)B * T * (C / x128::size);
    encoder_forward_kernel<<<ceil_div(n, 256), 256, 0, g_cuda_stream>>>(out, inp, wte, wpe, B, T, C);
    cudaCheckLaunch("encoder_forward_kernel");
}

// dwte (Vp, C) += scatter of dout (B, T, C) by inp (B, T) (host copy of the token ids); dwpe (maxT, C) += Σ_b dout.
// scratch: 3*B*T + 1 ints on the device. Synchronises with the stream (uploads the buckets).
static inline void encoder_backward_cuda(float* dwte, float* dwpe, const floatX* dout, const int* inp_host, int B, int T, int C, int* scratch) {
    encoder_check(C, "encoder_backward_cuda");
    int BT = B * T;
    long nw = (long)T * (C / x128::size);
    encoder_backward_wpe_kernel<<<ceil_div(nw, 256), 256, 0, g_cuda_stream>>>(dwpe, dout, B, T, C);
    cudaCheckLaunch("encoder_backward_wpe_kernel");
    // buckets: positions sorted by (token, position)
    uint64_t* keys = (uint64_t*)malloc_check((size_t)BT * sizeof(uint64_t));
    for (int i = 0; i < BT; i++) keys[i] = ((uint64_t)(uint32_t)inp_host[i] << 32) | (uint32_t)i;
    std::sort(keys, keys + BT);
    int* host = (int*)malloc_check((size_t)(3 * BT + 1) * sizeof(int)); // positions (BT), offsets (U+1), tokens (U)
    int* positions = host;
    int* offsets = host + BT;
    int U = 0;
    for (int i = 0; i < BT; i++) {
        positions[i] = (int)(keys[i] & 0xffffffffu);
        if (i == 0 || (keys[i] >> 32) != (keys[i - 1] >> 32)) offsets[U++] = i;
    }
    offsets[U] = BT;
    int* tokens = offsets + U + 1;
    for (int u = 0; u < U; u++) tokens[u] = (int)(keys[offsets[u]] >> 32);
    size_t n = (size_t)BT + U + 1 + U;
    cudaCheck(cudaMemcpyAsync(scratch, host, n * sizeof(int), cudaMemcpyHostToDevice, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream)); // the host buffer is freed next
    free(keys);
    free(host);
    int threads = 128;
    dim3 grid(U, ceil_div(C / x128::size, threads));
    encoder_backward_wte_kernel<<<grid, threads, 0, g_cuda_stream>>>(dwte, dout, scratch, scratch + BT, scratch + BT + U + 1, C);
    cudaCheckLaunch("encoder_backward_wte_kernel");
}
