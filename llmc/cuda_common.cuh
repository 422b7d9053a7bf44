// What every CUDA file shares: checked CUDA/cuBLAS calls and launches that name the call, file and
// line; the compute type floatX (bf16, or fp32 with -DENABLE_FP32); 16-byte packed loads and stores;
// device properties and the peak bf16 rate for MFU; the deterministic column-sum finish kernel.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>
#include "common.h"

// ---- checked calls -----------------------------------------------------------------------------

#define cudaCheck(call)                                                                               \
    do {                                                                                              \
        cudaError_t err_ = (call);                                                                    \
        if (err_ != cudaSuccess) td_fatal_at(__FILE__, __LINE__, "%s: %s", #call, cudaGetErrorString(err_)); \
    } while (0)

// after every kernel launch: a bad configuration shows here, named by the kernel
#define cudaCheckLaunch(kernel_name)                                                                  \
    do {                                                                                              \
        cudaError_t err_ = cudaGetLastError();                                                        \
        if (err_ != cudaSuccess) td_fatal_at(__FILE__, __LINE__, "launch of %s: %s", kernel_name, cudaGetErrorString(err_)); \
    } while (0)

#define cublasCheck(call)                                                                             \
    do {                                                                                              \
        cublasStatus_t st_ = (call);                                                                  \
        if (st_ != CUBLAS_STATUS_SUCCESS) td_fatal_at(__FILE__, __LINE__, "%s: cuBLAS status %d", #call, (int)st_); \
    } while (0)

// ---- precision ---------------------------------------------------------------------------------

#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif

// all kernels of the backend run on this stream (0: the legacy default stream)
static cudaStream_t g_cuda_stream = 0;

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// 16 bytes of T: one vectorised load or store (8 bf16 or 4 floats)
template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = (int)(16 / sizeof(T));
    T v[size];
    __device__ __forceinline__ T& operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
typedef Packed128<floatX> x128;

template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* p) { return *reinterpret_cast<const Packed128<T>*>(p); }
// streaming (evict-first) load for data read once
template <class T>
__device__ __forceinline__ Packed128<T> load128cs(const T* p) {
    int4 r = __ldcs(reinterpret_cast<const int4*>(p));
    return *reinterpret_cast<Packed128<T>*>(&r);
}
template <class T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& v) { *reinterpret_cast<Packed128<T>*>(p) = v; }
template <class T>
__device__ __forceinline__ void store128cs(T* p, const Packed128<T>& v) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// ---- exact IEEE arithmetic --------------------------------------------------------------------
// --use_fast_math compiles the float operations, __fadd_rn & co. and even fabsf and comparisons to
// their .ftz forms (subnormals flushed to zero), which would make results differ from the CPU's on
// subnormal values. The PTX instructions without .ftz round exactly as the CPU does: kernels whose
// results are held bitwise against the CPU (the replicas' average, int8 quantization) use these.
__device__ __forceinline__ float f32_add_exact(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float f32_mul_exact(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float f32_div_exact(float a, float b) {
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float f32_fma_exact(float a, float b, float c) {
    float r;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c));
    return r;
}

// ---- host-side conversions (tests, model upload) ------------------------------------------------

// round-to-nearest-even float -> bf16 bits, as __float2bfloat16_rn does (NaN kept quiet)
static inline uint16_t host_float_to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float host_bf16_bits_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// dst (n) floatX <- src (n) float, on the host
static inline void host_to_floatX(floatX* dst, const float* src, size_t n) {
#ifdef ENABLE_FP32
    memcpy(dst, src, n * sizeof(float));
#else
    uint16_t* d = (uint16_t*)dst;
    for (size_t i = 0; i < n; i++) d[i] = host_float_to_bf16_bits(src[i]);
#endif
}
static inline void host_from_floatX(float* dst, const floatX* src, size_t n) {
#ifdef ENABLE_FP32
    memcpy(dst, src, n * sizeof(float));
#else
    const uint16_t* s = (const uint16_t*)src;
    for (size_t i = 0; i < n; i++) dst[i] = host_bf16_bits_to_float(s[i]);
#endif
}
// device floatX (n) <-> host float (n), through a temporary host buffer; synchronous
static inline void floatX_upload(floatX* dst_dev, const float* src_host, size_t n) {
    floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX) + 1);
    host_to_floatX(tmp, src_host, n);
    cudaCheck(cudaMemcpyAsync(dst_dev, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    free(tmp);
}
static inline void floatX_download(float* dst_host, const floatX* src_dev, size_t n) {
    floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX) + 1);
    cudaCheck(cudaMemcpyAsync(tmp, src_dev, n * sizeof(floatX), cudaMemcpyDeviceToHost, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    host_from_floatX(dst_host, tmp, n);
    free(tmp);
}

// ---- device ------------------------------------------------------------------------------------

static cudaDeviceProp g_device_prop;
static int g_device_ready = 0;

// selects the device and reads its properties once
static inline void cuda_device_init(int device) {
    if (g_device_ready) return;
    cudaCheck(cudaSetDevice(device));
    cudaCheck(cudaGetDeviceProperties(&g_device_prop, device));
    g_device_ready = 1;
}

// dense bf16 tensor-core peak in FLOP/s of the current device, for MFU; 0 if unknown.
// Datasheet figures: H100/H200 SXM 989.4 TFLOP/s, H100 PCIe 756, H100 NVL / H200 NVL 835, A100 312.
static inline double cuda_peak_bf16_flops(void) {
    cuda_device_init(0);
    const char* name = g_device_prop.name;
    if (strstr(name, "H100") || strstr(name, "H200")) {
        if (strstr(name, "PCIe")) return 756e12;
        if (strstr(name, "NVL")) return 835e12;
        return 989.4e12;
    }
    if (strstr(name, "A100")) return 312e12;
    if (strstr(name, "A800")) return 312e12;
    if (strstr(name, "L40S")) return 362e12;
    if (strstr(name, "RTX 4090")) return 165e12;
    if (strstr(name, "A10G")) return 70e12;
    return 0.0;
}

// device allocation that names the call site on failure
#define cuda_malloc_check(ptr, bytes) cudaCheck(cudaMalloc((void**)(ptr), (bytes)))

// ---- deterministic column sums --------------------------------------------------------------------

// out[c] += Σ_r partial[r * ld + c] for c < ncols, over r < nrows in row order (the second pass of the
// deterministic column reductions: dbias, LayerNorm dweight/dbias)
__global__ static void column_sum_finish_kernel(float* out, const float* partial, int nrows, int ncols, int ld) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    float s = 0.0f;
    for (int r = 0; r < nrows; r++) s += partial[(size_t)r * ld + c];
    out[c] += s;
}

static inline void column_sum_finish(float* out, const float* partial, int nrows, int ncols, int ld) {
    column_sum_finish_kernel<<<ceil_div(ncols, 256), 256, 0, g_cuda_stream>>>(out, partial, nrows, ncols, ld);
    cudaCheckLaunch("column_sum_finish_kernel");
}

// row chunks for the first pass of a column reduction over n rows, `col_blocks` blocks across:
// enough blocks to fill the GPU, at most COLSUM_MAX_CHUNKS (scratch holds COLSUM_MAX_CHUNKS rows)
#define COLSUM_MAX_CHUNKS 256
static inline int colsum_chunks(int n, int col_blocks) {
    int want = ceil_div(4 * 132, col_blocks); // ~4 blocks per SM on a 132-SM GPU; fixed, so results do not depend on the device
    if (want > COLSUM_MAX_CHUNKS) want = COLSUM_MAX_CHUNKS;
    if (want > n) want = n;
    return want < 1 ? 1 : want;
}

// ---- benchmark utilities ---------------------------------------------------------------------------

// x (n) <- uniform in [-scale, scale) from a hash of (seed, i): reproducible inputs made on the device
__global__ static void random_fill_kernel(floatX* x, long n, unsigned seed, float scale) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ULL + seed * 0xD1B54A32D192ED03ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    float u = (float)(z >> 40) / 16777216.0f; // [0, 1)
    x[i] = from_float<floatX>((2.0f * u - 1.0f) * scale);
}
static inline void random_fill_cuda(floatX* x, size_t n, unsigned seed, float scale) {
    random_fill_kernel<<<ceil_div((long)n, 256), 256, 0, g_cuda_stream>>>(x, (long)n, seed, scale);
    cudaCheckLaunch("random_fill_kernel");
}

// median time in ms of `reps` runs of f() (after `warmup` runs), timed with events on g_cuda_stream
template <class F>
static inline float time_cuda_ms(F f, int warmup, int reps) {
    for (int i = 0; i < warmup; i++) f();
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    float* t = (float*)malloc_check(reps * sizeof(float));
    for (int i = 0; i < reps; i++) {
        cudaCheck(cudaEventRecord(e0, g_cuda_stream));
        f();
        cudaCheck(cudaEventRecord(e1, g_cuda_stream));
        cudaCheck(cudaEventSynchronize(e1));
        cudaCheck(cudaEventElapsedTime(&t[i], e0, e1));
    }
    for (int i = 1; i < reps; i++) // insertion sort: reps is small
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    float med = t[reps / 2];
    free(t);
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return med;
}
