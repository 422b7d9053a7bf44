// LayerNorm on the GPU: forward (optionally fused with the residual add that precedes it), the
// input-gradient half of backward (optionally fused with the residual gradient it adds to), and the
// weight-gradient half (deterministic column sums). One warp per row, rows held in registers,
// 16-byte loads; C a multiple of 8 (bf16) or 4 (fp32), at most 2048. eps = 1e-5 as llmc/ops.c.
#pragma once
#include "cuda_common.cuh"
#include "cuda_shapes.h" // LN_MAX_C

#define LN_EPS 1e-5f
#define LN_MAXU (LN_MAX_C / (32 * x128::size)) // x128 chunks per lane at most
// kernels are instantiated for U = 1, 2, 3, 4 and LN_MAXU chunks per lane (registers: a row of
// C = 768 in bf16 needs 3, so it does not pay for 2048)

// one warp per row n: residual_out = inp1 + inp2 (if RESIDUAL; the LayerNorm then reads the rounded
// sum, as the backward will), out = (x - mean) * rstd * weight + bias; mean, rstd (N) saved if non-NULL
template <bool RESIDUAL, int U>
__global__ void layernorm_forward_kernel(floatX* residual_out, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                         const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C) {
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (n >= N) return;
    int nvec = C / x128::size;
    size_t off = (size_t)n * C;
    float v[U][x128::size];
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < U; u++) {
        int i = lane + 32 * u;
        if (i >= nvec) break;
        x128 a = load128cs(inp1 + off + i * x128::size);
        if (RESIDUAL) {
            x128 b = load128cs(inp2 + off + i * x128::size), r;
#pragma unroll
            for (int k = 0; k < x128::size; k++) r[k] = from_float<floatX>(to_float(a[k]) + to_float(b[k]));
            store128(residual_out + off + i * x128::size, r);
            a = r;
        }
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            v[u][k] = to_float(a[k]);
            sum += v[u][k];
        }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (lane + 32 * u >= nvec) break;
#pragma unroll
        for (int k = 0; k < x128::size; k++) var += (v[u][k] - m) * (v[u][k] - m);
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
#pragma unroll
    for (int u = 0; u < U; u++) {
        int i = lane + 32 * u;
        if (i >= nvec) break;
        x128 w = load128(weight + i * x128::size), b = load128(bias + i * x128::size), o;
#pragma unroll
        for (int k = 0; k < x128::size; k++) o[k] = from_float<floatX>((v[u][k] - m) * s * to_float(w[k]) + to_float(b[k]));
        store128(out + off + i * x128::size, o);
    }
    if (lane == 0) {
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
    }
}

// dinp = (dresidual, or 0 if NULL) + dLN/dx · dout; dresidual may alias dinp
template <int U>
__global__ void layernorm_backward_input_kernel(floatX* dinp, const floatX* dresidual, const floatX* dout, const floatX* inp,
                                                const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    int n = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (n >= N) return;
    int nvec = C / x128::size;
    size_t off = (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float nrm[U][x128::size], dn[U][x128::size]; // norm and dnorm = weight * dout
    float sum_dn = 0.0f, sum_dn_nrm = 0.0f;
#pragma unroll
    for (int u = 0; u < U; u++) {
        int i = lane + 32 * u;
        if (i >= nvec) break;
        x128 d = load128cs(dout + off + i * x128::size), x = load128cs(inp + off + i * x128::size), w = load128(weight + i * x128::size);
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            nrm[u][k] = (to_float(x[k]) - m) * s;
            dn[u][k] = to_float(w[k]) * to_float(d[k]);
            sum_dn += dn[u][k];
            sum_dn_nrm += dn[u][k] * nrm[u][k];
        }
    }
    float mean_dn = warp_sum(sum_dn) / C, mean_dn_nrm = warp_sum(sum_dn_nrm) / C;
#pragma unroll
    for (int u = 0; u < U; u++) {
        int i = lane + 32 * u;
        if (i >= nvec) break;
        x128 r, o;
        if (dresidual) r = load128(dresidual + off + i * x128::size);
#pragma unroll
        for (int k = 0; k < x128::size; k++) {
            float g = (dn[u][k] - mean_dn - nrm[u][k] * mean_dn_nrm) * s;
            o[k] = from_float<floatX>(dresidual ? to_float(r[k]) + g : g);
        }
        store128(dinp + off + i * x128::size, o);
    }
}

// partial[chunk][c] = Σ rows of the chunk of norm * dout (dweight), partial[chunk][C + c] = Σ dout (dbias)
__global__ void layernorm_backward_weight_partial_kernel(float* partial, const floatX* dout, const floatX* inp, const float* mean,
                                                         const float* rstd, int N, int C, int rows_per_chunk) {
    __shared__ float red_w[8][32 * x128::size];
    __shared__ float red_b[8][32 * x128::size];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int c0 = (blockIdx.x * 32 + lane) * x128::size;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float aw[x128::size], ab[x128::size];
    for (int k = 0; k < x128::size; k++) aw[k] = ab[k] = 0.0f;
    if (c0 < C) {
#pragma unroll 4 // several rows' loads in flight
        for (int r = r0 + w; r < r1; r += 8) {
            x128 d = load128(dout + (size_t)r * C + c0), x = load128(inp + (size_t)r * C + c0);
            float m = mean[r], s = rstd[r];
            for (int k = 0; k < x128::size; k++) {
                float dk = to_float(d[k]);
                aw[k] += (to_float(x[k]) - m) * s * dk;
                ab[k] += dk;
            }
        }
    }
    for (int k = 0; k < x128::size; k++) {
        red_w[w][lane * x128::size + k] = aw[k];
        red_b[w][lane * x128::size + k] = ab[k];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * x128::size; i += blockDim.x) {
        int c = blockIdx.x * 32 * x128::size + i;
        if (c >= C) continue;
        float sw = 0.0f, sb = 0.0f;
        for (int ww = 0; ww < 8; ww++) {
            sw += red_w[ww][i];
            sb += red_b[ww][i];
        }
        partial[(size_t)blockIdx.y * 2 * C + c] = sw;
        partial[(size_t)blockIdx.y * 2 * C + C + c] = sb;
    }
}

// out (N) = inp1 + inp2, N a multiple of x128::size
__global__ void residual_forward_kernel(floatX* out, const floatX* inp1, const floatX* inp2, long N) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) return;
    x128 a = load128cs(inp1 + i), b = load128cs(inp2 + i), o;
#pragma unroll
    for (int k = 0; k < x128::size; k++) o[k] = from_float<floatX>(to_float(a[k]) + to_float(b[k]));
    store128(out + i, o);
}

// x128 chunks per lane the kernels need for rows of C: 1, 2, 3, 4 or LN_MAXU
static inline int layernorm_units(int C, const char* what) {
    if (C % x128::size || C > LN_MAX_C) td_fatal("%s: C = %d must be a multiple of %d and at most %d", what, C, x128::size, LN_MAX_C);
    int u = ceil_div(C / x128::size, 32);
    return u <= 4 ? u : LN_MAXU;
}

template <bool RESIDUAL>
static inline void layernorm_forward_launch(floatX* residual_out, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                            const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C) {
    int u = layernorm_units(C, "layernorm_forward");
    dim3 grid(ceil_div(N, 8)), block(256);
    cudaStream_t st = g_cuda_stream;
    if (u == 1) layernorm_forward_kernel<RESIDUAL, 1><<<grid, block, 0, st>>>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    else if (u == 2) layernorm_forward_kernel<RESIDUAL, 2><<<grid, block, 0, st>>>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    else if (u == 3) layernorm_forward_kernel<RESIDUAL, 3><<<grid, block, 0, st>>>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    else if (u == 4) layernorm_forward_kernel<RESIDUAL, 4><<<grid, block, 0, st>>>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    else layernorm_forward_kernel<RESIDUAL, LN_MAXU><<<grid, block, 0, st>>>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    cudaCheckLaunch("layernorm_forward_kernel");
}

// out (N, C), mean (N), rstd (N) from inp (N, C), weight (C), bias (C)
static inline void layernorm_forward_cuda(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                          const floatX* bias, int N, int C) {
    layernorm_forward_launch<false>(NULL, out, mean, rstd, inp, NULL, weight, bias, N, C);
}

// residual_out (N, C) = inp1 + inp2; out, mean, rstd = LayerNorm(residual_out)
static inline void fused_residual_layernorm_forward_cuda(floatX* residual_out, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                                         const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C) {
    layernorm_forward_launch<true>(residual_out, out, mean, rstd, inp1, inp2, weight, bias, N, C);
}

// dinp (N, C) = dresidual (N, C; NULL: 0; may alias dinp) + the LayerNorm's input gradient for dout (N, C)
static inline void layernorm_backward_input_cuda(floatX* dinp, const floatX* dresidual, const floatX* dout, const floatX* inp,
                                                 const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    int u = layernorm_units(C, "layernorm_backward_input_cuda");
    dim3 grid(ceil_div(N, 8)), block(256);
    cudaStream_t st = g_cuda_stream;
    if (u == 1) layernorm_backward_input_kernel<1><<<grid, block, 0, st>>>(dinp, dresidual, dout, inp, weight, mean, rstd, N, C);
    else if (u == 2) layernorm_backward_input_kernel<2><<<grid, block, 0, st>>>(dinp, dresidual, dout, inp, weight, mean, rstd, N, C);
    else if (u == 3) layernorm_backward_input_kernel<3><<<grid, block, 0, st>>>(dinp, dresidual, dout, inp, weight, mean, rstd, N, C);
    else if (u == 4) layernorm_backward_input_kernel<4><<<grid, block, 0, st>>>(dinp, dresidual, dout, inp, weight, mean, rstd, N, C);
    else layernorm_backward_input_kernel<LN_MAXU><<<grid, block, 0, st>>>(dinp, dresidual, dout, inp, weight, mean, rstd, N, C);
    cudaCheckLaunch("layernorm_backward_input_kernel");
}

// dweight (C), dbias (C) += (fp32); scratch: COLSUM_MAX_CHUNKS * 2C floats
static inline void layernorm_backward_weight_cuda(float* dweight, float* dbias, const floatX* dout, const floatX* inp, const float* mean,
                                                  const float* rstd, int N, int C, float* scratch) {
    layernorm_units(C, "layernorm_backward_weight_cuda");
    int col_blocks = ceil_div(C, 32 * x128::size);
    int chunks = colsum_chunks(N, col_blocks);
    int rows_per_chunk = ceil_div(N, chunks);
    chunks = ceil_div(N, rows_per_chunk);
    layernorm_backward_weight_partial_kernel<<<dim3(col_blocks, chunks), 256, 0, g_cuda_stream>>>(scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
    cudaCheckLaunch("layernorm_backward_weight_partial_kernel");
    column_sum_finish(dweight, scratch, chunks, C, 2 * C);
    column_sum_finish(dbias, scratch + C, chunks, C, 2 * C);
}

// out (N) = inp1 + inp2
static inline void residual_forward_cuda(floatX* out, const floatX* inp1, const floatX* inp2, long N) {
    if (N % x128::size) td_fatal("residual_forward_cuda: N = %ld must be a multiple of %d", N, x128::size);
    residual_forward_kernel<<<ceil_div(N / x128::size, 256), 256, 0, g_cuda_stream>>>(out, inp1, inp2, N);
    cudaCheckLaunch("residual_forward_kernel");
}
