// 8-bit block quantization on the GPU: llmc/quant.c's quantize (plain and with error feedback),
// dequantize, dequantize-and-add and value histogram, bit for bit the CPU's results.
#pragma once
#include "cuda_common.cuh"
#include "quant.h"

// ---- exact IEEE arithmetic -------------------------------------------------------------------------
// (f32_add_exact & co. in cuda_common.cuh) --use_fast_math would flush subnormals in the scale, q and
// the residual of blocks of subnormal values (and a residual that falls below FLT_MIN); absolute
// values, comparisons and finiteness use the bits. (The .ftz negation and float-to-int conversion
// left in the kernels only ever see integer values.)

// rintf: round half to even, to an integer-valued float
__device__ __forceinline__ float quant_rint_exact(float a) {
    float r;
    asm("cvt.rni.f32.f32 %0, %1;" : "=f"(r) : "f"(a));
    return r;
}
// |v|'s bits: for non-negative floats the unsigned order of the bits is the order of the values
__device__ __forceinline__ unsigned quant_abs_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }
#define QUANT_INF_BITS 0x7f800000u  // abs bits >= this: infinite or NaN
#define QUANT_NAN_BITS 0x7fc00000u  // the C library's NAN, the scale of a refused block
#define QUANT_QUIET_BIT 0x00400000u
// a NaN operand comes out of x86 (and ARM) arithmetic quieted with its payload kept, while the GPU's
// gives its canonical NaN 0x7fffffff: the dequantizing kernels pass the operand's NaN on themselves
__device__ __forceinline__ float quant_quiet(float v) { return __uint_as_float(__float_as_uint(v) | QUANT_QUIET_BIT); }

__device__ __forceinline__ bool quant_isnan(float v) { return quant_abs_bits(v) > QUANT_INF_BITS; }

// a float at p, 4-byte aligned or not (tdpipe/dp_sync_cuda.cuh: an int8 segment's scales start
// wherever the segment before it ended)
__device__ __forceinline__ float quant_load_f32(const uint8_t* p) {
    if (((uintptr_t)p & 3u) == 0) return *(const float*)p;
    return __uint_as_float((unsigned)p[0] | (unsigned)p[1] << 8 | (unsigned)p[2] << 16 | (unsigned)p[3] << 24);
}
__device__ __forceinline__ void quant_store_f32(uint8_t* p, float v) {
    unsigned u = __float_as_uint(v);
    if (((uintptr_t)p & 3u) == 0) {
        *(unsigned*)p = u;
        return;
    }
    p[0] = (uint8_t)u, p[1] = (uint8_t)(u >> 8), p[2] = (uint8_t)(u >> 16), p[3] = (uint8_t)(u >> 24);
}

// ---- quantize ---------------------------------------------------------------------------------------
// One warp per quantization block (a grid-stride loop over blocks; the lanes stride over the
// block's elements, so any block size works, the design's 128-256 being 4-8 elements a lane). A
// max is exact in any order, so the warp reduction of absmax gives block_scale's value.

// One block of m elements by the calling warp (all 32 lanes call it together, lane = their index):
// xb (m) (+ rb (m), EF) into qb (m) int8 and the scale at scale_at (aligned or not); rb then holds
// what the rounding dropped. bad: += the non-finite count (or NULL).
template <bool EF>
__device__ __forceinline__ void quant_int8_block_warp(const float* xb, float* rb, int m, int8_t* qb, uint8_t* scale_at, unsigned long long* bad, int lane) {
    unsigned amax = 0, nonfinite = 0;
    for (int i = lane; i < m; i += 32) {
        unsigned a = quant_abs_bits(EF ? f32_add_exact(xb[i], rb[i]) : xb[i]);
        if (a >= QUANT_INF_BITS) nonfinite++;
        else amax = max(amax, a);
    }
    amax = __reduce_max_sync(0xffffffffu, amax); // (also: every lane has read its elements before lane 0 writes the scale)
    nonfinite = __reduce_add_sync(0xffffffffu, nonfinite);
    if (nonfinite) { // not quantized: scale NaN, q 0, the residual left as it was
        if (lane == 0) {
            quant_store_f32(scale_at, __uint_as_float(QUANT_NAN_BITS));
            if (bad) atomicAdd(bad, (unsigned long long)nonfinite);
        }
        for (int i = lane; i < m; i += 32) qb[i] = 0;
        return;
    }
    float s = f32_div_exact(__uint_as_float(amax), (float)QUANT_MAX);
    // 127 s overflowing: one float lower (nextafterf(s, 0); s is then a large positive float)
    if (quant_abs_bits(f32_mul_exact(s, (float)QUANT_MAX)) == QUANT_INF_BITS) s = __uint_as_float(__float_as_uint(s) - 1);
    if (lane == 0) quant_store_f32(scale_at, s);
    const bool zero = __float_as_uint(s) == 0; // a block of zeros, or a scale that underflowed to 0
    for (int i = lane; i < m; i += 32) {
        float v = EF ? f32_add_exact(xb[i], rb[i]) : xb[i]; // the same v as in the first pass
        int qi = 0;
        if (!zero) {
            qi = (int)quant_rint_exact(f32_div_exact(v, s)); // |v / s| < 192 (a rounded-down subnormal scale), exact in an int
            qi = min(max(qi, -QUANT_MAX), QUANT_MAX);
        }
        qb[i] = (int8_t)qi;
        if (EF) rb[i] = f32_fma_exact(-(float)qi, s, v); // v - q s, rounded once (s = 0: x + r, as quant.c)
    }
}

// x (n), residual (n) or NULL (EF false), q (n), scale (nb), bad: += the non-finite count (or NULL)
template <bool EF>
__global__ void quant_int8_kernel(const float* x, float* residual, size_t n, size_t nb, int block, int8_t* q, float* scale,
                                  unsigned long long* bad) {
    const int lane = threadIdx.x & 31;
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < nb; b += warps) { // b is the warp's: all lanes loop together
        const size_t off = b * (size_t)block;
        const int m = n - off < (size_t)block ? (int)(n - off) : block;
        quant_int8_block_warp<EF>(x + off, EF ? residual + off : nullptr, m, q + off, (uint8_t*)(scale + b), bad, lane);
    }
}

// 256-thread blocks (8 warps) for `units` quantization blocks, one a warp, at most 65536 blocks (the
// grid-stride loops cover the rest)
static inline int quant_grid(size_t units) {
    size_t blocks = (units + 7) / 8;
    return blocks > 65536 ? 65536 : (int)blocks;
}

static inline void quant_check_block(const char* what, int block) {
    if (block < 1) td_fatal("%s: block size %d (must be positive)", what, block);
}

// as quant_int8 (llmc/quant.h) on the device: x (n) fp32, q (n) int8, scale (quant_blocks(n, block))
// fp32. Instead of returning the non-finite count it adds it to *d_bad (a device counter the caller
// zeroes and reads when it wants the number, e.g. once for many buffers; NULL: not counted); the
// NaN scales say the same per block. Asynchronous on g_cuda_stream.
static inline void quant_int8_cuda(const float* x, size_t n, int block, int8_t* q, float* scale, unsigned long long* d_bad) {
    quant_check_block("quant_int8_cuda", block);
    if (n == 0) return;
    size_t nb = quant_blocks(n, block);
    quant_int8_kernel<false><<<quant_grid(nb), 256, 0, g_cuda_stream>>>(x, nullptr, n, nb, block, q, scale, d_bad);
    cudaCheckLaunch("quant_int8_kernel");
}

// as quant_int8_ef: quantizes x (n) + residual (n) and leaves in residual what the rounding dropped
// (unchanged in a refused block); x is not written; d_bad as for quant_int8_cuda
static inline void quant_int8_ef_cuda(const float* x, float* residual, size_t n, int block, int8_t* q, float* scale,
                                      unsigned long long* d_bad) {
    quant_check_block("quant_int8_ef_cuda", block);
    if (n == 0) return;
    size_t nb = quant_blocks(n, block);
    quant_int8_kernel<true><<<quant_grid(nb), 256, 0, g_cuda_stream>>>(x, residual, n, nb, block, q, scale, d_bad);
    cudaCheckLaunch("quant_int8_kernel<ef>");
}

// ---- dequantize -------------------------------------------------------------------------------------
// The same warp-per-block layout: the warp reads its block's scale once (no 64-bit division per element).

// one value: q s, a NaN scale's NaN quieted (as dequant_int8 on x86)
__device__ __forceinline__ float quant_dequant(int8_t q, float s) { return quant_isnan(s) ? quant_quiet(s) : f32_mul_exact((float)q, s); }
// fmaf(q, s, o) with x86's NaN order: a NaN already in o stays that NaN, else the scale's (the
// compiled vfmadd132ss takes q, o, s in that precedence; q is never NaN)
__device__ __forceinline__ float quant_dequant_add(int8_t q, float s, float o) {
    return quant_isnan(o) ? quant_quiet(o) : quant_isnan(s) ? quant_quiet(s) : f32_fma_exact((float)q, s, o);
}

// q (n), scale (nb), out (n): out = q s (ADD false) or fmaf(q, s, out) (ADD true)
template <bool ADD>
__global__ void dequant_int8_kernel(const int8_t* q, const float* scale, size_t n, size_t nb, int block, float* out) {
    const int lane = threadIdx.x & 31;
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < nb; b += warps) {
        const size_t off = b * (size_t)block;
        const int m = n - off < (size_t)block ? (int)(n - off) : block;
        const float s = scale[b];
        const int8_t* qb = q + off;
        float* ob = out + off;
        for (int i = lane; i < m; i += 32) ob[i] = ADD ? quant_dequant_add(qb[i], s, ob[i]) : quant_dequant(qb[i], s);
    }
}

template <bool ADD>
static inline void dequant_int8_launch(const char* fn, const int8_t* q, const float* scale, size_t n, int block, float* out) {
    quant_check_block(fn, block);
    if (n == 0) return;
    size_t nb = quant_blocks(n, block);
    dequant_int8_kernel<ADD><<<quant_grid(nb), 256, 0, g_cuda_stream>>>(q, scale, n, nb, block, out);
    cudaCheckLaunch(ADD ? "dequant_int8_kernel<add>" : "dequant_int8_kernel");
}

// as dequant_int8: out (n) fp32 = q (n) int8 times its block's scale (quant_blocks(n, block)) fp32
static inline void dequant_int8_cuda(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    dequant_int8_launch<false>("dequant_int8_cuda", q, scale, n, block, out);
}

// as dequant_int8_add: out (n) fp32 = fmaf(q, scale, out), one rounding per element; called for
// replica 0, 1, ... in turn on the same stream after out = 0, the sum in replica order
static inline void dequant_int8_add_cuda(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    dequant_int8_launch<true>("dequant_int8_add_cuda", q, scale, n, block, out);
}

// ---- histogram --------------------------------------------------------------------------------------

// hist (256) += the counts of q (n)'s values at value + 128: per thread block in shared memory (32-bit
// counts: at most n / gridDim.x values a block), then added to the device's 64-bit counts
__global__ void quant_histogram_kernel(const int8_t* q, size_t n, unsigned long long* hist) {
    __shared__ unsigned h[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) atomicAdd(&h[q[i] + 128], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
        if (h[i]) atomicAdd(&hist[i], (unsigned long long)h[i]);
}

// as quant_histogram_add: hist (256) 64-bit counts on the device (uint64_t's layout), q (n) int8;
// asynchronous on g_cuda_stream
static inline void quant_histogram_add_cuda(const int8_t* q, size_t n, unsigned long long* hist) {
    if (n == 0) return;
    size_t blocks = (n + 4095) / 4096; // 16 values a thread; at most 2048 blocks (32-bit shared counts up to n = 8.8e12)
    quant_histogram_kernel<<<blocks > 2048 ? 2048 : (int)blocks, 256, 0, g_cuda_stream>>>(q, n, hist);
    cudaCheckLaunch("quant_histogram_kernel");
}
