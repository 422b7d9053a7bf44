// GPT-2's Linear layers on the GPU: out = inp·Wᵀ + b and its backward (dinp, dW, dbias), with the
// shapes of llmc/matmul.h. One generic product C (M, N) (+)= A·Bᵀ (+ bias), operands K-major or
// MN-major, served by a hand-written tensor-core kernel (mma.sync on any sm_80+ GPU; wgmma + TMA on
// sm_90a) or by cuBLASLt; the backend is chosen at run time (`--matmul`).
// bf16 build: bf16 operands, fp32 accumulation. fp32 build (-DENABLE_FP32): a plain fp32 SIMT kernel.
#pragma once
#include "cuda_common.cuh"
#include "matmul_cublaslt.cuh"
#include "cuda_shapes.h" // CUDA_SHAPE_ALIGN

typedef enum {
    MATMUL_TDPIPE = 0,     // hand-written: wgmma where compiled for sm_90a and running on sm_90, else mma.sync
    MATMUL_TDPIPE_MMA = 1, // hand-written, mma.sync only (the fallback if the wgmma path is wrong somewhere)
    MATMUL_CUBLASLT = 2,
} MatmulBackend;

static MatmulBackend g_matmul_backend = MATMUL_TDPIPE;

static inline const char* matmul_backend_name(MatmulBackend b) {
    return b == MATMUL_CUBLASLT ? "cublaslt" : b == MATMUL_TDPIPE_MMA ? "tdpipe-mma" : "tdpipe";
}
// "tdpipe" | "tdpipe-mma" | "cublaslt"; returns 0 on an unknown name
static inline int matmul_backend_parse(const char* s, MatmulBackend* out) {
    if (!strcmp(s, "tdpipe")) *out = MATMUL_TDPIPE;
    else if (!strcmp(s, "tdpipe-mma")) *out = MATMUL_TDPIPE_MMA;
    else if (!strcmp(s, "cublaslt")) *out = MATMUL_CUBLASLT;
    else return 0;
    return 1;
}

// C (M, N), leading dimension ldc: C (+)= Σ_k A(m,k)·B(n,k) (+ bias[n]).
// A(m,k) = A[m*lda + k] if A is K-major, else A[k*lda + m]; B(n,k) likewise with n.
typedef struct {
    const floatX* A;
    const floatX* B;
    const floatX* bias; // (N) or NULL
    void* C;            // floatX, or float when the output is fp32 (weight gradients)
    int M, N, K, lda, ldb, ldc;
    int accumulate;     // 1: C += product; 0: C = product
    int k_split;        // split-K: block (tile, s) sums k in [s*k_split, (s+1)*k_split); = K when not split
    long c_split_stride; // elements between the splits' outputs (each split writes its own C)
} GemmParams;

#ifndef ENABLE_FP32
// ==== mma.sync tensor-core kernel (bf16, sm_80+) ==================================================
// Block tile 128 x 128 x 32, 8 warps as 2 (M) x 4 (N), each 64 x 32 = 4 x 4 mma.m16n8k16 tiles;
// a 4-stage cp.async pipeline. Shared tiles keep the global layout: a K-major tile is [128][32+8],
// an MN-major one [32][128+8] (the +8 pads make every ldmatrix row fall in distinct banks);
// ldmatrix (K-major) or ldmatrix.trans (MN-major) turns either into the mma fragments.
#define MMA_BM 128
#define MMA_BN 128
#define MMA_BK 32
#define MMA_STAGES 4
#define MMA_THREADS 256
#define MMA_LDK (MMA_BK + 8)        // row length of a K-major tile
#define MMA_LDMN (MMA_BM + 8)       // row length of an MN-major tile
#define MMA_TILE (MMA_BM * MMA_LDK) // elements of one operand tile (>= MMA_BK * MMA_LDMN)
#define MMA_SMEM_BYTES (MMA_STAGES * 2 * MMA_TILE * (int)sizeof(__nv_bfloat16))
#define MMA_GROUP_M 8               // block order: groups of 8 row-tiles sweep the columns (L2 reuse)

// 16 bytes global -> shared, asynchronously; zero-filled when !pred (src is then not read)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// d (16x8 fp32) += a (16x16 bf16, row) · b (16x8 bf16, col)
__device__ __forceinline__ void mma_bf16_16816(float d[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// one operand's tile for k-tile k0: rows [row0, row0+128) of `rows` (M or N), depth [k0, k0+32) of K.
// K-major: smem [128][MMA_LDK] from g[row*ld + k]; MN-major: smem [32][MMA_LDMN] from g[k*ld + row].
// Chunks of 8 elements are either wholly inside or wholly outside (K, rows multiples of 8 along the
// contiguous dimension), so out-of-range chunks are zero-filled and contribute nothing.
template <bool KMAJOR>
__device__ __forceinline__ void mma_load_tile(__nv_bfloat16* s, const __nv_bfloat16* g, int ld, int row0, int rows, int k0,
                                              int K, int tid) {
#pragma unroll
    for (int i = 0; i < (MMA_BM * MMA_BK / 8) / MMA_THREADS; i++) {
        int c = tid + i * MMA_THREADS;
        if (KMAJOR) {
            int r = c >> 2, kc = (c & 3) * 8; // 4 chunks per row of 32
            int gr = row0 + r, gk = k0 + kc;
            bool ok = gr < rows && gk < K;
            cp_async16(s + r * MMA_LDK + kc, ok ? g + (size_t)gr * ld + gk : g, ok);
        } else {
            int kr = c >> 4, rc = (c & 15) * 8; // 16 chunks per row of 128
            int gk = k0 + kr, gr = row0 + rc;
            bool ok = gk < K && gr < rows;
            cp_async16(s + kr * MMA_LDMN + rc, ok ? g + (size_t)gk * ld + gr : g, ok);
        }
    }
}

__device__ __forceinline__ void store2(__nv_bfloat16* p, float v0, float v1, int accumulate) {
    __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(p);
    if (accumulate) {
        float2 old = __bfloat1622float2(*q);
        v0 += old.x;
        v1 += old.y;
    }
    *q = __floats2bfloat162_rn(v0, v1);
}
__device__ __forceinline__ void store2(float* p, float v0, float v1, int accumulate) {
    float2* q = reinterpret_cast<float2*>(p);
    if (accumulate) {
        float2 old = *q;
        v0 += old.x;
        v1 += old.y;
    }
    *q = make_float2(v0, v1);
}

// the (row-tile, column-tile) of linear block `pid`: GROUP_M row-tiles at a time sweep all column tiles
__device__ __forceinline__ void grouped_tile(int pid, int tiles_m, int tiles_n, int group_m, int* tm, int* tn) {
    int per_group = group_m * tiles_n;
    int group = pid / per_group;
    int first_m = group * group_m;
    int size_m = min(tiles_m - first_m, group_m);
    int in_group = pid % per_group;
    *tm = first_m + in_group % size_m;
    *tn = in_group / size_m;
}

template <bool AK, bool BK, typename OutT>
__global__ void __launch_bounds__(MMA_THREADS, 2) gemm_mma_kernel(GemmParams p) {
    extern __shared__ __align__(16) unsigned char mma_smem_raw[];
    __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(mma_smem_raw);
    const __nv_bfloat16* A = reinterpret_cast<const __nv_bfloat16*>(p.A);
    const __nv_bfloat16* B = reinterpret_cast<const __nv_bfloat16*>(p.B);
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int warp_m = warp >> 2, warp_n = warp & 3;
    int tm, tn;
    grouped_tile(blockIdx.x, (p.M + MMA_BM - 1) / MMA_BM, (p.N + MMA_BN - 1) / MMA_BN, MMA_GROUP_M, &tm, &tn);
    int bm = tm * MMA_BM, bn = tn * MMA_BN;
    int kbeg = blockIdx.y * p.k_split, kend = min(p.K, kbeg + p.k_split);
    int ktiles = (kend - kbeg + MMA_BK - 1) / MMA_BK;

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < ktiles) {
            __nv_bfloat16* st = smem + s * 2 * MMA_TILE;
            mma_load_tile<AK>(st, A, p.lda, bm, p.M, kbeg + s * MMA_BK, kend, tid);
            mma_load_tile<BK>(st + MMA_TILE, B, p.ldb, bn, p.N, kbeg + s * MMA_BK, kend, tid);
        }
        cp_async_commit();
    }

    // ldmatrix: lane supplies the address of row (lane & 7) of 8x8 matrix (lane >> 3)
    int lr = lane & 7, lm1 = (lane >> 3) & 1, lm2 = lane >> 4;
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<MMA_STAGES - 2>(); // k-tile kt has landed (for this thread)...
        __syncthreads();                 // ...for all threads, and all are done with k-tile kt-1's stage
        int pf = kt + MMA_STAGES - 1;
        if (pf < ktiles) {
            __nv_bfloat16* st = smem + (pf % MMA_STAGES) * 2 * MMA_TILE;
            mma_load_tile<AK>(st, A, p.lda, bm, p.M, kbeg + pf * MMA_BK, kend, tid);
            mma_load_tile<BK>(st + MMA_TILE, B, p.ldb, bn, p.N, kbeg + pf * MMA_BK, kend, tid);
        }
        cp_async_commit();
        const __nv_bfloat16* As = smem + (kt % MMA_STAGES) * 2 * MMA_TILE;
        const __nv_bfloat16* Bs = As + MMA_TILE;
#pragma unroll
        for (int ks = 0; ks < MMA_BK / 16; ks++) {
            unsigned af[4][4], bfr[4][2];
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                int m0 = warp_m * 64 + mt * 16;
                // matrices 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15)
                if (AK) ldmatrix_x4(af[mt], As + (m0 + lr + lm1 * 8) * MMA_LDK + ks * 16 + lm2 * 8);
                else ldmatrix_x4_trans(af[mt], As + (ks * 16 + lr + lm2 * 8) * MMA_LDMN + m0 + lm1 * 8);
            }
#pragma unroll
            for (int np = 0; np < 2; np++) {
                int n0 = warp_n * 32 + np * 16;
                unsigned r[4];
                // matrices 0..3 = (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
                if (BK) ldmatrix_x4(r, Bs + (n0 + lr + lm2 * 8) * MMA_LDK + ks * 16 + lm1 * 8);
                else ldmatrix_x4_trans(r, Bs + (ks * 16 + lr + lm1 * 8) * MMA_LDMN + n0 + lm2 * 8);
                bfr[2 * np][0] = r[0];
                bfr[2 * np][1] = r[1];
                bfr[2 * np + 1][0] = r[2];
                bfr[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) mma_bf16_16816(acc[mt][nt], af[mt], bfr[nt][0], bfr[nt][1]);
        }
    }
    cp_async_wait<0>();

    // accumulator (16x8): c0,c1 at (row g, cols 2t, 2t+1), c2,c3 at (row g+8, same cols)
    int g = lane >> 2, t = lane & 3;
    OutT* C = reinterpret_cast<OutT*>(p.C) + blockIdx.y * p.c_split_stride;
    const __nv_bfloat16* bias = reinterpret_cast<const __nv_bfloat16*>(p.bias);
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        int col = bn + warp_n * 32 + nt * 8 + 2 * t;
        if (col >= p.N) continue; // N is even and col is even, so col+1 < N too
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
            b0 = __bfloat162float(bias[col]);
            b1 = __bfloat162float(bias[col + 1]);
        }
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = bm + warp_m * 64 + mt * 16 + g + h * 8;
                if (row < p.M) store2(C + (size_t)row * p.ldc + col, acc[mt][nt][2 * h] + b0, acc[mt][nt][2 * h + 1] + b1, p.accumulate);
            }
        }
    }
}

template <bool AK, bool BK, typename OutT>
static inline void gemm_mma_launch(const GemmParams& p) {
    static bool attr_set = false; // one flag per instantiation
    if (!attr_set) {
        cudaCheck(cudaFuncSetAttribute(gemm_mma_kernel<AK, BK, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize, MMA_SMEM_BYTES));
        attr_set = true;
    }
    dim3 grid(ceil_div(p.M, MMA_BM) * ceil_div(p.N, MMA_BN), ceil_div(p.K, p.k_split));
    gemm_mma_kernel<AK, BK, OutT><<<grid, MMA_THREADS, MMA_SMEM_BYTES, g_cuda_stream>>>(p);
    cudaCheckLaunch("gemm_mma_kernel");
}

static inline void gemm_mma(const GemmParams& p, int a_kmajor, int b_kmajor, int c_fp32) {
    if (c_fp32) {
        if (a_kmajor && b_kmajor) gemm_mma_launch<true, true, float>(p);
        else if (a_kmajor) gemm_mma_launch<true, false, float>(p);
        else if (b_kmajor) gemm_mma_launch<false, true, float>(p);
        else gemm_mma_launch<false, false, float>(p);
    } else {
        if (a_kmajor && b_kmajor) gemm_mma_launch<true, true, __nv_bfloat16>(p);
        else if (a_kmajor) gemm_mma_launch<true, false, __nv_bfloat16>(p);
        else if (b_kmajor) gemm_mma_launch<false, true, __nv_bfloat16>(p);
        else gemm_mma_launch<false, false, __nv_bfloat16>(p);
    }
}

#else // ENABLE_FP32
// ==== fp32 SIMT kernel (the fp32 test build) =======================================================
// 64 x 64 block tile, depth 16, 256 threads with 4 x 4 outputs each; plain fp32 FMAs.
#define SIMT_BM 64
#define SIMT_BK 16

__global__ void __launch_bounds__(256) gemm_simt_kernel(GemmParams p, int a_kmajor, int b_kmajor) {
    __shared__ float As[SIMT_BK][SIMT_BM + 4]; // [k][m]
    __shared__ float Bs[SIMT_BK][SIMT_BM + 4]; // [k][n]
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int bm = blockIdx.y * SIMT_BM, bn = blockIdx.x * SIMT_BM;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < p.K; k0 += SIMT_BK) {
        for (int e = tid; e < SIMT_BM * SIMT_BK; e += 256) {
            // consecutive threads read consecutive addresses along the contiguous dimension
            int m = a_kmajor ? e / SIMT_BK : e % SIMT_BM, k = a_kmajor ? e % SIMT_BK : e / SIMT_BM;
            int gm = bm + m, gk = k0 + k;
            As[k][m] = (gm < p.M && gk < p.K) ? p.A[a_kmajor ? (size_t)gm * p.lda + gk : (size_t)gk * p.lda + gm] : 0.0f;
            int n = b_kmajor ? e / SIMT_BK : e % SIMT_BM, kb = b_kmajor ? e % SIMT_BK : e / SIMT_BM;
            int gn = bn + n, gkb = k0 + kb;
            Bs[kb][n] = (gn < p.N && gkb < p.K) ? p.B[b_kmajor ? (size_t)gn * p.ldb + gkb : (size_t)gkb * p.ldb + gn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SIMT_BK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[k][ty * 4 + i];
                b[i] = Bs[k][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* C = reinterpret_cast<float*>(p.C);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = bm + ty * 4 + i;
        if (row >= p.M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int col = bn + tx * 4 + j;
            if (col >= p.N) continue;
            float v = acc[i][j] + (p.bias ? p.bias[col] : 0.0f);
            float* c = C + (size_t)row * p.ldc + col;
            *c = p.accumulate ? *c + v : v;
        }
    }
}

static inline void gemm_simt(const GemmParams& p, int a_kmajor, int b_kmajor) {
    dim3 grid(ceil_div(p.N, SIMT_BM), ceil_div(p.M, SIMT_BM));
    gemm_simt_kernel<<<grid, 256, 0, g_cuda_stream>>>(p, a_kmajor, b_kmajor);
    cudaCheckLaunch("gemm_simt_kernel");
}
#endif

#ifndef ENABLE_FP32
// ==== wgmma + TMA kernel (bf16, sm_90a) ============================================================
// Block tile 128 x 128 x 64, two warpgroups of 128 threads, each owning 64 rows, two blocks per SM: one
// wgmma.m64n128k16 per 16 of depth. Thread 0 loads the tiles with the bulk tensor copy engine (TMA)
// into a 3-stage ring, 128-byte swizzled, each stage completing on its mbarrier. A K-major operand is
// one box [rows][64 k] (rows of 128 bytes); an MN-major one is two boxes [64 k][64 rows], read by
// wgmma transposed. Shared-memory matrix descriptors (PTX ISA "matrix descriptor"; the canonical
// layouts are CUTLASS's make_gmma_desc): K-major: SBO = 1024 (8 rows of 128 B), +32 B per 16 of depth;
// MN-major: SBO = 1024 (8 k-rows), LBO = 8192 (the next 64 rows/columns), +2048 B per 16 of depth.
// Out-of-range rows and depth are zero-filled by TMA. Built for sm_90a only; elsewhere the kernel is
// empty and gemm_wgmma() declines (a probe kernel says what the binary holds for the device).
#include <cuda.h>         // CUtensorMap
#include <cudaTypedefs.h> // the encoder's type: it comes through the runtime's driver entry point, no -lcuda
#define WG_BM 128
#define WG_BN 128
#define WG_BK 64
#define WG_STAGES 3
#define WG_THREADS 256
#define WG_TILE_BYTES (128 * WG_BK * 2)        // one operand's stage: 16 KB
#define WG_STAGE_BYTES (2 * WG_TILE_BYTES)
#define WG_SMEM_BYTES (WG_STAGES * WG_STAGE_BYTES + 1024 + 64) // + 1024-byte alignment slack + mbarriers

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TDPIPE_WGMMA 1
#endif

__global__ void wgmma_probe_kernel(int* out) {
#ifdef TDPIPE_WGMMA
    *out = 1;
#else
    *out = 0;
#endif
}

#ifdef TDPIPE_WGMMA
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
// makes the initialised mbarriers visible to the async proxy (TMA)
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
    unsigned done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// 2-D box at coordinates (c0 inner, c1 outer) of the tensor map -> shared, completing on bar
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(smem)), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
// shared-memory matrix descriptor, 128-byte swizzle
__device__ __forceinline__ uint64_t wg_desc(const void* smem, unsigned lbo, unsigned sbo) {
    return (uint64_t)((smem_u32(smem) & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// ties the accumulators to this point, so the compiler neither reads them early nor moves writes across
__device__ __forceinline__ void wg_fence_acc(float d[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// d (64 x 128 fp32, this warpgroup) += A (64 x 16) · B (16 x 128), both from shared memory
template <int TA, int TB>
__device__ __forceinline__ void wgmma_m64n128k16(float d[64], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %68, 0;\n" // scale-d: 1, accumulate into d
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, "
        "%47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, %66, %67;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),
          "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "n"(TA), "n"(TB), "r"(1));
}
#endif // TDPIPE_WGMMA

template <bool AK, bool BK, typename OutT>
__global__ void __launch_bounds__(WG_THREADS, 2)
    gemm_wgmma_kernel(GemmParams p, const __grid_constant__ CUtensorMap tma, const __grid_constant__ CUtensorMap tmb) {
#ifdef TDPIPE_WGMMA
    extern __shared__ __align__(1024) unsigned char wg_smem_raw[];
    unsigned char* smem = (unsigned char*)(((uintptr_t)wg_smem_raw + 1023) & ~(uintptr_t)1023); // swizzle atoms: 1024-aligned
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + WG_STAGES * WG_STAGE_BYTES);            // [WG_STAGES]
    int tid = threadIdx.x, wg = tid >> 7, warp_in_wg = (tid >> 5) & 3, lane = tid & 31;
    int tm, tn;
    grouped_tile(blockIdx.x, (p.M + WG_BM - 1) / WG_BM, (p.N + WG_BN - 1) / WG_BN, MMA_GROUP_M, &tm, &tn);
    int bm = tm * WG_BM, bn = tn * WG_BN;
    int kbeg = blockIdx.y * p.k_split, kend = min(p.K, kbeg + p.k_split); // k_split is a multiple of WG_BK
    int ktiles = (kend - kbeg + WG_BK - 1) / WG_BK;

    // k-tile kt into stage s (thread 0)
    auto issue = [&](int s, int kt) {
        unsigned char* As = smem + s * WG_STAGE_BYTES;
        unsigned char* Bs = As + WG_TILE_BYTES;
        int k0 = kbeg + kt * WG_BK;
        mbar_expect_tx(&full[s], WG_STAGE_BYTES);
        if (AK) tma_load_2d(As, &tma, k0, bm, &full[s]);
        else {
            tma_load_2d(As, &tma, bm, k0, &full[s]);
            tma_load_2d(As + WG_TILE_BYTES / 2, &tma, bm + 64, k0, &full[s]);
        }
        if (BK) tma_load_2d(Bs, &tmb, k0, bn, &full[s]);
        else {
            tma_load_2d(Bs, &tmb, bn, k0, &full[s]);
            tma_load_2d(Bs + WG_TILE_BYTES / 2, &tmb, bn + 64, k0, &full[s]);
        }
    };
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; s++) mbar_init(&full[s], 1);
        mbar_fence_init();
    }
    __syncthreads();
    if (tid == 0)
        for (int s = 0; s < WG_STAGES && s < ktiles; s++) issue(s, s);

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    wg_fence_acc(acc);
    for (int kt = 0; kt < ktiles; kt++) {
        int s = kt % WG_STAGES;
        mbar_wait(&full[s], (kt / WG_STAGES) & 1);
        const unsigned char* As = smem + s * WG_STAGE_BYTES;
        const unsigned char* Bs = As + WG_TILE_BYTES;
        wg_fence();
#pragma unroll
        for (int k16 = 0; k16 < WG_BK / 16; k16++) {
            // this warpgroup's 64 rows of A; all 128 columns of B
            uint64_t da = AK ? wg_desc(As + wg * 8192 + k16 * 32, 16, 1024) : wg_desc(As + wg * 8192 + k16 * 2048, 8192, 1024);
            uint64_t db = BK ? wg_desc(Bs + k16 * 32, 16, 1024) : wg_desc(Bs + k16 * 2048, 8192, 1024);
            wgmma_m64n128k16<AK ? 0 : 1, BK ? 0 : 1>(acc, da, db);
        }
        wg_commit();
        wg_wait<1>();    // this warpgroup's products of k-tile kt-1 are done...
        __syncthreads(); // ...and the other's: its stage can be refilled
        if (tid == 0 && kt >= 1 && kt - 1 + WG_STAGES < ktiles) issue((kt - 1) % WG_STAGES, kt - 1 + WG_STAGES);
    }
    wg_wait<0>();
    wg_fence_acc(acc);

    // accumulator: d[4j + e] at row 16*warp + lane/4 + 8*(e>>1), column 8j + 2*(lane%4) + (e&1) of this warpgroup's 64 x 128
    OutT* C = reinterpret_cast<OutT*>(p.C) + blockIdx.y * p.c_split_stride;
    const __nv_bfloat16* bias = reinterpret_cast<const __nv_bfloat16*>(p.bias);
    int row0 = bm + wg * 64 + warp_in_wg * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < WG_BN / 8; j++) {
        int col = bn + j * 8 + 2 * (lane & 3);
        if (col >= p.N) continue; // N even, col even: col+1 < N too
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
            b0 = __bfloat162float(bias[col]);
            b1 = __bfloat162float(bias[col + 1]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int row = row0 + 8 * h;
            if (row < p.M) store2(C + (size_t)row * p.ldc + col, acc[4 * j + 2 * h] + b0, acc[4 * j + 2 * h + 1] + b1, p.accumulate);
        }
    }
#endif // TDPIPE_WGMMA
}

static int g_wgmma_state = -1; // -1 not yet known, 0 unavailable, 1 available
static PFN_cuTensorMapEncodeTiled_v12000 g_tensormap_encode = NULL;

// whether the wgmma kernels can run here: an sm_90 device, a binary holding sm_90a code, the TMA encoder
static inline int gemm_wgmma_available(void) {
    if (g_wgmma_state >= 0) return g_wgmma_state;
    cuda_device_init(0);
    g_wgmma_state = 0;
    if (g_device_prop.major != 9) return 0;
    int *d_flag, flag = 0;
    cudaCheck(cudaMalloc(&d_flag, sizeof(int)));
    wgmma_probe_kernel<<<1, 1, 0, g_cuda_stream>>>(d_flag);
    cudaCheckLaunch("wgmma_probe_kernel");
    cudaCheck(cudaMemcpy(&flag, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(d_flag));
    if (!flag) return 0;
    void* fn = NULL;
    cudaDriverEntryPointQueryResult q;
    cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) return 0;
    g_tensormap_encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    g_wgmma_state = 1;
    return 1;
}

// tensor map of a row-major bf16 matrix (outer, inner) with leading dimension ld, boxes of (box_outer, 64)
static inline CUtensorMap wgmma_tensor_map(const floatX* ptr, int inner, int outer, int ld, int box_outer) {
    CUtensorMap m;
    cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    cuuint64_t strides[1] = {(cuuint64_t)ld * sizeof(floatX)};
    cuuint32_t box[2] = {64, (cuuint32_t)box_outer};
    cuuint32_t estr[2] = {1, 1};
    CUresult r = g_tensormap_encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void*)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) td_fatal("cuTensorMapEncodeTiled: error %d (inner %d, outer %d, ld %d)", (int)r, inner, outer, ld);
    return m;
}

template <bool AK, bool BK, typename OutT>
static inline void gemm_wgmma_launch(const GemmParams& p) {
    static bool attr_set = false;
    if (!attr_set) {
        cudaCheck(cudaFuncSetAttribute(gemm_wgmma_kernel<AK, BK, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM_BYTES));
        attr_set = true;
    }
    // K-major: (rows, K) in boxes of 128 rows; MN-major: (K, rows) in boxes of 64 k-rows, two per tile
    CUtensorMap ta = AK ? wgmma_tensor_map(p.A, p.K, p.M, p.lda, 128) : wgmma_tensor_map(p.A, p.M, p.K, p.lda, 64);
    CUtensorMap tb = BK ? wgmma_tensor_map(p.B, p.K, p.N, p.ldb, 128) : wgmma_tensor_map(p.B, p.N, p.K, p.ldb, 64);
    dim3 grid(ceil_div(p.M, WG_BM) * ceil_div(p.N, WG_BN), ceil_div(p.K, p.k_split));
    gemm_wgmma_kernel<AK, BK, OutT><<<grid, WG_THREADS, WG_SMEM_BYTES, g_cuda_stream>>>(p, ta, tb);
    cudaCheckLaunch("gemm_wgmma_kernel");
}

// the product on the wgmma kernel; returns 0 (nothing done) where it is unavailable
static inline int gemm_wgmma(const GemmParams& p, int a_kmajor, int b_kmajor, int c_fp32) {
    if (!gemm_wgmma_available()) return 0;
    if (p.k_split < p.K && p.k_split % WG_BK) td_fatal("gemm_wgmma: k_split %d is not a multiple of %d", p.k_split, WG_BK);
    if (c_fp32) {
        if (a_kmajor && b_kmajor) gemm_wgmma_launch<true, true, float>(p);
        else if (a_kmajor) gemm_wgmma_launch<true, false, float>(p);
        else if (b_kmajor) gemm_wgmma_launch<false, true, float>(p);
        else gemm_wgmma_launch<false, false, float>(p);
    } else {
        if (a_kmajor && b_kmajor) gemm_wgmma_launch<true, true, __nv_bfloat16>(p);
        else if (a_kmajor) gemm_wgmma_launch<true, false, __nv_bfloat16>(p);
        else if (b_kmajor) gemm_wgmma_launch<false, true, __nv_bfloat16>(p);
        else gemm_wgmma_launch<false, false, __nv_bfloat16>(p);
    }
    return 1;
}

// ==== split-K for the weight gradients ============================================================
// dW = doutᵀ·inp has a small output (OC x C) and a long depth (B*T): too few tiles to fill the GPU.
// Its depth is split; each split writes fp32 partials to a workspace, summed in split order
// (deterministic) into the output.
#define SPLITK_TARGET_BLOCKS 264        // ~2 x 132 SMs; fixed, so the sums do not depend on the device
#define SPLITK_MIN_DEPTH 512            // each split at least this deep
#define SPLITK_MAX_FLOATS (8u << 20)    // workspace cap (32 MB)
static float* g_splitk_ws = NULL;       // (splits, M, N) partials
static size_t g_splitk_floats = 0;

// C (M, N; ldc) (+)= Σ_s ws[s] (M, N)
__global__ void splitk_reduce_kernel(float* C, const float* ws, int M, int N, int ldc, int splits, int accumulate) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (i >= (long)M * N) return;
    int m = (int)(i / N), n = (int)(i % N);
    float4 s = *reinterpret_cast<const float4*>(ws + i);
    for (int k = 1; k < splits; k++) {
        float4 v = *reinterpret_cast<const float4*>(ws + (size_t)k * M * N + i);
        s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    float4* c = reinterpret_cast<float4*>(C + (size_t)m * ldc + n);
    if (accumulate) {
        float4 o = *c;
        s.x += o.x; s.y += o.y; s.z += o.z; s.w += o.w;
    }
    *c = s;
}

// number of depth splits for a product with fp32 output (1: no split)
static inline int gemm_splits(const GemmParams& p) {
    long tiles = (long)ceil_div(p.M, 128) * ceil_div(p.N, 128);
    if (tiles >= SPLITK_TARGET_BLOCKS) return 1;
    long s = (SPLITK_TARGET_BLOCKS + tiles - 1) / tiles;
    if (s > p.K / SPLITK_MIN_DEPTH) s = p.K / SPLITK_MIN_DEPTH;
    if (s * p.M * p.N > (long)SPLITK_MAX_FLOATS) s = SPLITK_MAX_FLOATS / ((long)p.M * p.N);
    return s < 1 ? 1 : (int)s;
}
#endif // !ENABLE_FP32

// ==== dispatch ======================================================================================

// the hand-written product: wgmma where the backend allows it and the build and device have it, else
// mma.sync (fp32 build: the SIMT kernel); fp32 outputs with few tiles are split along K
static inline void gemm_tdpipe(const GemmParams& p0, int a_kmajor, int b_kmajor, int c_fp32, MatmulBackend backend) {
#ifdef ENABLE_FP32
    (void)c_fp32;
    (void)backend;
    gemm_simt(p0, a_kmajor, b_kmajor);
#else
    GemmParams p = p0;
    int splits = c_fp32 ? gemm_splits(p) : 1;
    if (splits > 1) {
        p.k_split = ceil_div(ceil_div(p.K, splits), WG_BK) * WG_BK;
        splits = ceil_div(p.K, p.k_split);
        size_t need = (size_t)splits * p.M * p.N;
        if (need > g_splitk_floats) {
            if (g_splitk_ws) cudaCheck(cudaFree(g_splitk_ws));
            cudaCheck(cudaMalloc(&g_splitk_ws, need * sizeof(float)));
            g_splitk_floats = need;
        }
        p.C = g_splitk_ws;
        p.ldc = p.N;
        p.accumulate = 0;
        p.c_split_stride = (long)p.M * p.N;
    }
    if (!(backend == MATMUL_TDPIPE && gemm_wgmma(p, a_kmajor, b_kmajor, c_fp32))) gemm_mma(p, a_kmajor, b_kmajor, c_fp32);
    if (splits > 1) {
        long n4 = (long)p.M * p.N / 4;
        splitk_reduce_kernel<<<ceil_div(n4, 256), 256, 0, g_cuda_stream>>>((float*)p0.C, g_splitk_ws, p.M, p.N, p0.ldc, splits, p0.accumulate);
        cudaCheckLaunch("splitk_reduce_kernel");
    }
#endif
}

static inline void gemm_check_shapes(const GemmParams& p, const char* what) {
    // 16-byte chunks along every contiguous dimension: all of M, N, K multiples of 8, 16-byte aligned pointers
    const int a = CUDA_SHAPE_ALIGN;
    if (p.M % a || p.N % a || p.K % a || p.lda % a || p.ldb % a || p.ldc % a)
        td_fatal("%s: M=%d N=%d K=%d (lda %d, ldb %d, ldc %d) must be multiples of %d", what, p.M, p.N, p.K, p.lda, p.ldb, p.ldc, a);
    if (((uintptr_t)p.A | (uintptr_t)p.B | (uintptr_t)p.C | (uintptr_t)p.bias) & 15) td_fatal("%s: pointers must be 16-byte aligned", what);
}

// What the products would otherwise set up at their first call, done at once: the wgmma probe, the
// split-K workspace at its cap, cuBLASLt's handle and workspace (for the backend in use). Their
// cudaMalloc and cudaFree synchronise the whole device; inside a training step that could wait on an
// NCCL receive posted ahead whose sender waits on this rank (a deadlock), so models call this at init.
static inline void matmul_cuda_setup(void) {
#ifndef ENABLE_FP32
    gemm_wgmma_available();
    if (g_splitk_floats < SPLITK_MAX_FLOATS) { // every split plan fits the cap (gemm_splits)
        if (g_splitk_ws) cudaCheck(cudaFree(g_splitk_ws));
        cudaCheck(cudaMalloc(&g_splitk_ws, (size_t)SPLITK_MAX_FLOATS * sizeof(float)));
        g_splitk_floats = SPLITK_MAX_FLOATS;
    }
#endif
    if (g_matmul_backend == MATMUL_CUBLASLT) cublaslt_init();
}

static inline void gemm_run(const GemmParams& p, int a_kmajor, int b_kmajor, int c_fp32, const char* what) {
    gemm_check_shapes(p, what);
    if (g_matmul_backend == MATMUL_CUBLASLT)
        cublaslt_gemm(p.C, p.A, p.B, p.bias, p.M, p.N, p.K, p.lda, p.ldb, p.ldc, a_kmajor, b_kmajor, c_fp32, p.accumulate);
    else gemm_tdpipe(p, a_kmajor, b_kmajor, c_fp32, g_matmul_backend);
}

static inline GemmParams gemm_params(void* C, const floatX* A, const floatX* B, const floatX* bias, int M, int N, int K,
                                     int lda, int ldb, int ldc, int accumulate) {
    GemmParams p;
    p.A = A; p.B = B; p.bias = bias; p.C = C;
    p.M = M; p.N = N; p.K = K; p.lda = lda; p.ldb = ldb; p.ldc = ldc;
    p.accumulate = accumulate;
    p.k_split = K;
    p.c_split_stride = 0;
    return p;
}

// ==== dbias: deterministic column sums of dout ========================================================

// partial[chunk][c] = Σ over this chunk's rows of dout[row][c]; block: 32 lanes across x128 columns,
// 8 warps over rows, reduced in warp order
__global__ void dbias_partial_kernel(float* partial, const floatX* dout, int N, int OC, int rows_per_chunk) {
    __shared__ float red[8][32 * x128::size];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int c0 = (blockIdx.x * 32 + lane) * x128::size;
    int r0 = blockIdx.y * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    float acc[x128::size];
    for (int k = 0; k < x128::size; k++) acc[k] = 0.0f;
    if (c0 < OC) {
#pragma unroll 4 // several rows' loads in flight
        for (int r = r0 + w; r < r1; r += 8) {
            x128 v = load128(dout + (size_t)r * OC + c0);
            for (int k = 0; k < x128::size; k++) acc[k] += to_float(v[k]);
        }
    }
    for (int k = 0; k < x128::size; k++) red[w][lane * x128::size + k] = acc[k];
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * x128::size; i += blockDim.x) {
        int c = blockIdx.x * 32 * x128::size + i;
        if (c >= OC) continue;
        float s = 0.0f;
        for (int ww = 0; ww < 8; ww++) s += red[ww][i];
        partial[(size_t)blockIdx.y * OC + c] = s;
    }
}

// dbias (OC) += Σ_n dout (N, OC); scratch: COLSUM_MAX_CHUNKS * OC floats
static inline void matmul_dbias(float* dbias, const floatX* dout, int N, int OC, float* scratch) {
    int col_blocks = ceil_div(OC, 32 * x128::size);
    int chunks = colsum_chunks(N, col_blocks);
    int rows_per_chunk = ceil_div(N, chunks);
    chunks = ceil_div(N, rows_per_chunk);
    dbias_partial_kernel<<<dim3(col_blocks, chunks), 256, 0, g_cuda_stream>>>(scratch, dout, N, OC, rows_per_chunk);
    cudaCheckLaunch("dbias_partial_kernel");
    column_sum_finish(dbias, scratch, chunks, OC, OC);
}

// ==== the three products of a Linear layer (shapes as llmc/matmul.h) ===================================

// out (N, OC) = inp (N, C) · weight (OC, C)ᵀ + bias (OC, may be NULL)
static inline void matmul_forward_cuda(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC) {
    gemm_run(gemm_params(out, inp, weight, bias, N, OC, C, C, C, OC, 0), 1, 1, 0, "matmul_forward_cuda");
}

// dinp (N, C) (+)= dout (N, OC) · weight (OC, C); accumulate selects += (as the CPU's) or =
static inline void matmul_backward_input_cuda(floatX* dinp, const floatX* dout, const floatX* weight, int N, int C, int OC, int accumulate) {
    // A(n, oc) = dout[n*OC + oc] K-major; B(c, oc) = weight[oc*C + c] N-major
    gemm_run(gemm_params(dinp, dout, weight, NULL, N, C, OC, OC, C, C, accumulate), 1, 0, 0, "matmul_backward_input_cuda");
}

// dweight (OC, C) += dout (N, OC)ᵀ · inp (N, C) in fp32;  dbias (OC, may be NULL) += Σ_n dout.
// scratch: COLSUM_MAX_CHUNKS * OC floats (for dbias)
static inline void matmul_backward_weight_cuda(float* dweight, float* dbias, const floatX* dout, const floatX* inp, int N, int C,
                                               int OC, float* scratch) {
    // A(oc, n) = dout[n*OC + oc] M-major; B(c, n) = inp[n*C + c] N-major
    gemm_run(gemm_params(dweight, dout, inp, NULL, OC, C, N, OC, C, C, 1), 0, 0, 1, "matmul_backward_weight_cuda");
    if (dbias) matmul_dbias(dbias, dout, N, OC, scratch);
}
