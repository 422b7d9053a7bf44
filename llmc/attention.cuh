// Causal multi-head attention on the GPU, flash-style: online softmax over key tiles, never a T x T
// matrix in memory; the forward saves the log-sum-exp (B, NH, T) for the backward, which recomputes
// the probabilities. bf16 with head size 64: tensor-core kernels (mma.sync m16n8k16); otherwise (fp32
// build, other head sizes) simple kernels, one warp per row. Both are deterministic (no atomics):
// the backward runs one kernel for dK, dV (per key tile) and one for dQ (per query tile).
#pragma once
#include "cuda_common.cuh"
#include "cuda_shapes.h" // ATT_MAX_DPL
#include "matmul.cuh" // cp.async, ldmatrix and mma helpers (bf16 build)

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

static int g_attention_simple = 0; // 1: use the simple kernels even where the tensor-core ones apply

// D (B, NH, T) = Σ_d dout · out per row: the softmax backward's row term (dO·O = Σ_j p_j dO·v_j)
__global__ void attention_rowdot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x; // over (b, t, h), h fastest
    if (idx >= B * T * NH) return;
    int h = idx % NH, bt = idx / NH, b = bt / T, t = bt % T;
    int hs = C / NH;
    const floatX* d = dout + (size_t)bt * C + h * hs;
    const floatX* o = out + (size_t)bt * C + h * hs;
    float s = 0.0f;
    for (int i = 0; i < hs; i += x128::size) {
        x128 a = load128(d + i), c = load128(o + i);
        for (int k = 0; k < x128::size; k++) s += to_float(a[k]) * to_float(c[k]);
    }
    D[((size_t)b * NH + h) * T + t] = s;
}

// ==== simple kernels: one warp per row, any floatX, head size a multiple of 32 up to 256 ============

// one warp per (b, h, t): online softmax over keys 0..t
__global__ void attention_forward_simple_kernel(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= B * NH * T) return;
    int t = w % T, h = (w / T) % NH, b = w / (T * NH);
    int hs = C / NH, dpl = hs / 32;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * hs;
    float q[ATT_MAX_DPL], o[ATT_MAX_DPL];
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++) {
        q[i] = i < dpl ? to_float(base[(size_t)t * 3 * C + lane + 32 * i]) : 0.0f;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const floatX* k = base + (size_t)j * 3 * C + C;
        const floatX* v = base + (size_t)j * 3 * C + 2 * C;
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) s += q[i] * to_float(k[lane + 32 * i]);
        s = warp_sum(s) * scale;
        float mnew = fmaxf(m, s), corr = expf(m - mnew), p = expf(s - mnew);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) o[i] = o[i] * corr + p * to_float(v[lane + 32 * i]);
        m = mnew;
    }
    floatX* y = out + ((size_t)b * T + t) * C + h * hs;
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++)
        if (i < dpl) y[lane + 32 * i] = from_float<floatX>(o[i] / l);
    if (lane == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
}

// one warp per (b, h, t): dq = scale · Σ_{j<=t} p_tj (dO_t·v_j − D_t) k_j
__global__ void attention_backward_dq_simple_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout, const float* lse,
                                                    const float* D, int B, int T, int C, int NH) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= B * NH * T) return;
    int t = w % T, h = (w / T) % NH, b = w / (T * NH);
    int hs = C / NH, dpl = hs / 32;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * hs;
    const floatX* dO = dout + ((size_t)b * T + t) * C + h * hs;
    float q[ATT_MAX_DPL], d[ATT_MAX_DPL], dq[ATT_MAX_DPL];
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++) {
        q[i] = i < dpl ? to_float(base[(size_t)t * 3 * C + lane + 32 * i]) : 0.0f;
        d[i] = i < dpl ? to_float(dO[lane + 32 * i]) : 0.0f;
        dq[i] = 0.0f;
    }
    size_t row = ((size_t)b * NH + h) * T + t;
    float L = lse[row], Dt = D[row];
    for (int j = 0; j <= t; j++) {
        const floatX* k = base + (size_t)j * 3 * C + C;
        const floatX* v = base + (size_t)j * 3 * C + 2 * C;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) {
                s += q[i] * to_float(k[lane + 32 * i]);
                dp += d[i] * to_float(v[lane + 32 * i]);
            }
        s = warp_sum(s);
        dp = warp_sum(dp);
        float p = expf(s * scale - L), ds = p * (dp - Dt);
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) dq[i] += ds * to_float(k[lane + 32 * i]);
    }
    floatX* y = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++)
        if (i < dpl) y[lane + 32 * i] = from_float<floatX>(dq[i] * scale);
}

// one warp per (b, h, key j): dv = Σ_{t>=j} p_tj dO_t;  dk = scale · Σ_{t>=j} p_tj (dO_t·v_j − D_t) q_t
__global__ void attention_backward_dkdv_simple_kernel(floatX* dqkv, const floatX* qkv, const floatX* dout, const float* lse,
                                                      const float* D, int B, int T, int C, int NH) {
    int w = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (w >= B * NH * T) return;
    int j = w % T, h = (w / T) % NH, b = w / (T * NH);
    int hs = C / NH, dpl = hs / 32;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX* base = qkv + (size_t)b * T * 3 * C + h * hs;
    float k[ATT_MAX_DPL], v[ATT_MAX_DPL], dk[ATT_MAX_DPL], dv[ATT_MAX_DPL];
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++) {
        k[i] = i < dpl ? to_float(base[(size_t)j * 3 * C + C + lane + 32 * i]) : 0.0f;
        v[i] = i < dpl ? to_float(base[(size_t)j * 3 * C + 2 * C + lane + 32 * i]) : 0.0f;
        dk[i] = dv[i] = 0.0f;
    }
    const float* L = lse + ((size_t)b * NH + h) * T;
    const float* Dr = D + ((size_t)b * NH + h) * T;
    for (int t = j; t < T; t++) {
        const floatX* q = base + (size_t)t * 3 * C;
        const floatX* dO = dout + ((size_t)b * T + t) * C + h * hs;
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) {
                s += to_float(q[lane + 32 * i]) * k[i];
                dp += to_float(dO[lane + 32 * i]) * v[i];
            }
        s = warp_sum(s);
        dp = warp_sum(dp);
        float p = expf(s * scale - L[t]), ds = p * (dp - Dr[t]);
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl) {
                dv[i] += p * to_float(dO[lane + 32 * i]);
                dk[i] += ds * to_float(q[lane + 32 * i]);
            }
    }
    floatX* y = dqkv + ((size_t)b * T + j) * 3 * C + h * hs;
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++)
        if (i < dpl) {
            y[C + lane + 32 * i] = from_float<floatX>(dk[i] * scale);
            y[2 * C + lane + 32 * i] = from_float<floatX>(dv[i]);
        }
}

#ifndef ENABLE_FP32
// ==== tensor-core kernels: bf16, head size 64 =========================================================
// Warps own 16 rows (queries in the forward and dQ, keys in dK/dV). Scores S = Q·Kᵀ come out of
// mma.sync in the accumulator layout, which is exactly the A-operand layout of the next product
// (P·V, dS·K, ...), so probabilities never leave registers. Tiles in shared memory are [rows][64+8]
// (144-byte rows: ldmatrix rows fall in distinct banks); K-major B operands use ldmatrix, the
// others ldmatrix.trans, as in matmul.cuh.
#define FA_HS 64
#define FA_BQ 128                  // forward: queries per block (8 warps)
#define FA_BKV 64                  // keys per tile; the backward's tiles of queries are 64 too
#define FA_LD (FA_HS + 8)
#define FA_TILE (64 * FA_LD)       // elements of a 64-row tile
#define FA_FWD_SMEM ((FA_BQ * FA_LD + 4 * FA_TILE) * 2)
#define FA_BWD_SMEM (6 * FA_TILE * 2 + 4 * 64 * 4)

// rows [row0, row0 + ROWS) of one head's 64 columns (base points at row 0, column h*64 of q, k or v);
// rows >= T are zero-filled
template <int ROWS, int THREADS>
__device__ __forceinline__ void fa_load_rows(__nv_bfloat16* s, const __nv_bfloat16* base, int row0, int T, int ld, int tid) {
#pragma unroll
    for (int i = 0; i < ROWS * 8 / THREADS; i++) {
        int c = tid + i * THREADS, r = c >> 3, cc = (c & 7) * 8;
        int gr = row0 + r;
        bool ok = gr < T;
        cp_async16(s + r * FA_LD + cc, ok ? base + (size_t)gr * ld + cc : base, ok);
    }
}

__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

// acc (16 x 64) += a (16 x 64 over d, A fragments) · tileᵀ, tile [64 rows][d]: the rows of the tile are
// the output columns (K-major B: S = Q·Kᵀ, dP = dO·Vᵀ, ...)
__device__ __forceinline__ void fa_mma_abt(float acc[8][4], const unsigned a[4][4], const __nv_bfloat16* tile, int lane) {
    int lr = lane & 7, lm1 = (lane >> 3) & 1, lm2 = lane >> 4;
#pragma unroll
    for (int ks = 0; ks < 4; ks++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            unsigned r[4];
            ldmatrix_x4(r, tile + (np * 16 + lr + lm2 * 8) * FA_LD + ks * 16 + lm1 * 8);
            mma_bf16_16816(acc[2 * np], a[ks], r[0], r[1]);
            mma_bf16_16816(acc[2 * np + 1], a[ks], r[2], r[3]);
        }
}

// acc (16 x 64 over d) += p (16 x 64, accumulator layout, rounded to bf16 here) · tile, tile [64 rows][d]:
// the rows of the tile are the reduction index (N-major B: O += P·V, dV += Pᵀ·dO, dK += dSᵀ·Q, dQ += dS·K)
__device__ __forceinline__ void fa_mma_pb(float acc[8][4], const float p[8][4], const __nv_bfloat16* tile, int lane) {
    int lr = lane & 7, lm1 = (lane >> 3) & 1, lm2 = lane >> 4;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        // accumulator tiles 2kk, 2kk+1 (columns 16kk..16kk+15) are the A fragment of reduction step kk
        unsigned a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            unsigned r[4];
            ldmatrix_x4_trans(r, tile + (kk * 16 + lr + lm1 * 8) * FA_LD + dp * 16 + lm2 * 8);
            mma_bf16_16816(acc[2 * dp], a, r[0], r[1]);
            mma_bf16_16816(acc[2 * dp + 1], a, r[2], r[3]);
        }
    }
}

// A fragments (16 rows x 64) of rows [row0, row0+16) of a tile
__device__ __forceinline__ void fa_load_a(unsigned a[4][4], const __nv_bfloat16* tile, int row0, int lane) {
    int lr = lane & 7, lm1 = (lane >> 3) & 1, lm2 = lane >> 4;
#pragma unroll
    for (int ks = 0; ks < 4; ks++) ldmatrix_x4(a[ks], tile + (row0 + lr + lm1 * 8) * FA_LD + ks * 16 + lm2 * 8);
}

__device__ __forceinline__ void fa_zero(float a[8][4]) {
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) a[i][e] = 0.0f;
}

// grid (T/128 query tiles, B*NH), 256 threads; query tiles in reverse order (the longest first)
__global__ void __launch_bounds__(256) attention_forward_tc_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int C, int NH) {
    extern __shared__ __align__(16) unsigned char fa_smem_raw[];
    __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(fa_smem_raw); // [128][FA_LD]
    __nv_bfloat16* Ks = Qs + FA_BQ * FA_LD;                              // [2][64][FA_LD]
    __nv_bfloat16* Vs = Ks + 2 * FA_TILE;                                // [2][64][FA_LD]
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int g = lane >> 2, t4 = lane & 3;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int q0 = qt * FA_BQ, ld = 3 * C;
    const __nv_bfloat16* base = qkv + (size_t)b * T * ld + h * FA_HS;
    const float sl2 = ATT_LOG2E / sqrtf((float)FA_HS); // scores -> log2 units

    fa_load_rows<FA_BQ, 256>(Qs, base, q0, T, ld, tid);
    fa_load_rows<64, 256>(Ks, base + C, 0, T, ld, tid);
    fa_load_rows<64, 256>(Vs, base + 2 * C, 0, T, ld, tid);
    cp_async_commit();
    int n_kt = (min(T, q0 + FA_BQ) + FA_BKV - 1) / FA_BKV; // key tiles up to the block's last query
    int wq0 = q0 + warp * 16;                                // the warp's first query

    unsigned qf[4][4];
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    fa_zero(o);
    for (int jt = 0; jt < n_kt; jt++) {
        int buf = jt & 1;
        if (jt + 1 < n_kt) {
            fa_load_rows<64, 256>(Ks + (buf ^ 1) * FA_TILE, base + C, (jt + 1) * FA_BKV, T, ld, tid);
            fa_load_rows<64, 256>(Vs + (buf ^ 1) * FA_TILE, base + 2 * C, (jt + 1) * FA_BKV, T, ld, tid);
        }
        cp_async_commit();
        cp_async_wait<1>(); // all but the prefetch just issued: tile jt (and Q) have landed
        __syncthreads();
        if (jt == 0) fa_load_a(qf, Qs, warp * 16, lane);
        int k0 = jt * FA_BKV;
        if (k0 <= wq0 + 15) { // else every key of the tile is after every query of the warp
            float s[8][4];
            fa_zero(s);
            fa_mma_abt(s, qf, Ks + buf * FA_TILE, lane);
            // element (nt, e): query wq0 + g + 8*(e>>1), key k0 + 8*nt + 2*t4 + (e&1)
            if (k0 + FA_BKV - 1 > wq0) {
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (k0 + nt * 8 + 2 * t4 + (e & 1) > wq0 + g + 8 * (e >> 1)) s[nt][e] = -INFINITY;
            }
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * hr], s[nt][2 * hr + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // the first tile always holds key 0 <= query, so m is finite from then on
                float mnew = fmaxf(m[hr], mx * sl2);
                float corr = exp2f(m[hr] - mnew);
                m[hr] = mnew;
                float rs = 0.0f;
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        float pv = exp2f(s[nt][2 * hr + j] * sl2 - mnew);
                        s[nt][2 * hr + j] = pv;
                        rs += pv;
                    }
                l[hr] = l[hr] * corr + rs;
#pragma unroll
                for (int nt = 0; nt < 8; nt++) {
                    o[nt][2 * hr] *= corr;
                    o[nt][2 * hr + 1] *= corr;
                }
            }
            fa_mma_pb(o, s, Vs + buf * FA_TILE, lane);
        }
        __syncthreads(); // the next iteration's prefetch overwrites this buffer
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float lt = l[hr];
        lt += __shfl_xor_sync(0xffffffffu, lt, 1);
        lt += __shfl_xor_sync(0xffffffffu, lt, 2);
        int q = wq0 + g + 8 * hr;
        if (q >= T) continue;
        float inv = 1.0f / lt;
        __nv_bfloat16* y = out + ((size_t)b * T + q) * C + h * FA_HS;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            *reinterpret_cast<__nv_bfloat162*>(y + nt * 8 + 2 * t4) = __floats2bfloat162_rn(o[nt][2 * hr] * inv, o[nt][2 * hr + 1] * inv);
        if (t4 == 0) lse[(size_t)bh * T + q] = (m[hr] + log2f(lt)) * ATT_LN2;
    }
}

// dK, dV of one tile of 64 keys: grid (T/64 key tiles, B*NH), 128 threads (4 warps x 16 keys);
// loops over the query tiles at or after the key tile
__global__ void __launch_bounds__(128) attention_backward_dkdv_tc_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* qkv, const __nv_bfloat16* dout,
                                                                         const float* lse, const float* D, int T, int C, int NH) {
    extern __shared__ __align__(16) unsigned char fa_smem_raw[];
    __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(fa_smem_raw); // [64][FA_LD]
    __nv_bfloat16* Vs = Ks + FA_TILE;                                   // [64][FA_LD]
    __nv_bfloat16* Qs = Vs + FA_TILE;                                   // [2][64][FA_LD]
    __nv_bfloat16* dOs = Qs + 2 * FA_TILE;                              // [2][64][FA_LD]
    float* Ls = reinterpret_cast<float*>(dOs + 2 * FA_TILE);            // [2][64] lse · log2(e)
    float* Ds = Ls + 2 * 64;                                            // [2][64]
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int g = lane >> 2, t4 = lane & 3;
    int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int k0 = kt * FA_BKV, ld = 3 * C;
    int nqt = (T + 63) / 64;
    const __nv_bfloat16* base = qkv + (size_t)b * T * ld + h * FA_HS;
    const __nv_bfloat16* dbase = dout + (size_t)b * T * C + h * FA_HS;
    const float* lrow = lse + (size_t)bh * T;
    const float* drow = D + (size_t)bh * T;
    const float sl2 = ATT_LOG2E / sqrtf((float)FA_HS);

    fa_load_rows<64, 128>(Ks, base + C, k0, T, ld, tid);
    fa_load_rows<64, 128>(Vs, base + 2 * C, k0, T, ld, tid);
    int qt0 = k0 / 64; // the first query tile with a query >= some key of this tile
    fa_load_rows<64, 128>(Qs, base, qt0 * 64, T, ld, tid);
    fa_load_rows<64, 128>(dOs, dbase, qt0 * 64, T, C, tid);
    if (tid < 64) {
        int q = qt0 * 64 + tid;
        Ls[tid] = q < T ? lrow[q] * ATT_LOG2E : 0.0f;
        Ds[tid] = q < T ? drow[q] : 0.0f;
    }
    cp_async_commit();
    int wk0 = k0 + warp * 16; // the warp's first key
    unsigned kf[4][4], vf[4][4];
    float dk[8][4], dv[8][4];
    fa_zero(dk);
    fa_zero(dv);
    for (int qt = qt0; qt < nqt; qt++) {
        int buf = (qt - qt0) & 1, q0 = qt * 64;
        if (qt + 1 < nqt) {
            int nb = buf ^ 1;
            fa_load_rows<64, 128>(Qs + nb * FA_TILE, base, q0 + 64, T, ld, tid);
            fa_load_rows<64, 128>(dOs + nb * FA_TILE, dbase, q0 + 64, T, C, tid);
            if (tid < 64) {
                int q = q0 + 64 + tid;
                Ls[nb * 64 + tid] = q < T ? lrow[q] * ATT_LOG2E : 0.0f;
                Ds[nb * 64 + tid] = q < T ? drow[q] : 0.0f;
            }
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (qt == qt0) {
            fa_load_a(kf, Ks, warp * 16, lane);
            fa_load_a(vf, Vs, warp * 16, lane);
        }
        const __nv_bfloat16* Qb = Qs + buf * FA_TILE;
        const __nv_bfloat16* dOb = dOs + buf * FA_TILE;
        const float* Lb = Ls + buf * 64;
        const float* Db = Ds + buf * 64;
        // Pᵀ (16 keys x 64 queries): element (nt, e) is key wk0 + g + 8*(e>>1), query q0 + 8*nt + 2*t4 + (e&1)
        float pt[8][4];
        fa_zero(pt);
        fa_mma_abt(pt, kf, Qb, lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qi = nt * 8 + 2 * t4 + (e & 1), q = q0 + qi, key = wk0 + g + 8 * (e >> 1);
                pt[nt][e] = (q >= key && q < T) ? exp2f(pt[nt][e] * sl2 - Lb[qi]) : 0.0f;
            }
        fa_mma_pb(dv, pt, dOb, lane); // dV += Pᵀ·dO
        float dst[8][4];              // dPᵀ = V·dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D)
        fa_zero(dst);
        fa_mma_abt(dst, vf, dOb, lane);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) dst[nt][e] = pt[nt][e] * (dst[nt][e] - Db[nt * 8 + 2 * t4 + (e & 1)]);
        fa_mma_pb(dk, dst, Qb, lane); // dK += dSᵀ·Q
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf((float)FA_HS);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int key = wk0 + g + 8 * hr;
        if (key >= T) continue;
        __nv_bfloat16* y = dqkv + ((size_t)b * T + key) * ld + h * FA_HS;
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            int d = nt * 8 + 2 * t4;
            *reinterpret_cast<__nv_bfloat162*>(y + C + d) = __floats2bfloat162_rn(dk[nt][2 * hr] * scale, dk[nt][2 * hr + 1] * scale);
            *reinterpret_cast<__nv_bfloat162*>(y + 2 * C + d) = __floats2bfloat162_rn(dv[nt][2 * hr], dv[nt][2 * hr + 1]);
        }
    }
}

// dQ of one tile of 64 queries: grid (T/64, B*NH), 128 threads (4 warps x 16 queries); query tiles in
// reverse order (the longest first); loops over the key tiles up to the diagonal
__global__ void __launch_bounds__(128) attention_backward_dq_tc_kernel(__nv_bfloat16* dqkv, const __nv_bfloat16* qkv, const __nv_bfloat16* dout,
                                                                       const float* lse, const float* D, int T, int C, int NH) {
    extern __shared__ __align__(16) unsigned char fa_smem_raw[];
    __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(fa_smem_raw); // [64][FA_LD]
    __nv_bfloat16* dOs = Qs + FA_TILE;                                  // [64][FA_LD]
    __nv_bfloat16* Ks = dOs + FA_TILE;                                  // [2][64][FA_LD]
    __nv_bfloat16* Vs = Ks + 2 * FA_TILE;                               // [2][64][FA_LD]
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int g = lane >> 2, t4 = lane & 3;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int q0 = qt * 64, ld = 3 * C;
    const __nv_bfloat16* base = qkv + (size_t)b * T * ld + h * FA_HS;
    const __nv_bfloat16* dbase = dout + (size_t)b * T * C + h * FA_HS;
    const float sl2 = ATT_LOG2E / sqrtf((float)FA_HS);

    fa_load_rows<64, 128>(Qs, base, q0, T, ld, tid);
    fa_load_rows<64, 128>(dOs, dbase, q0, T, C, tid);
    fa_load_rows<64, 128>(Ks, base + C, 0, T, ld, tid);
    fa_load_rows<64, 128>(Vs, base + 2 * C, 0, T, ld, tid);
    cp_async_commit();
    int wq0 = q0 + warp * 16;
    float Lr[2], Dr[2]; // per row: lse · log2(e), D
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int q = wq0 + g + 8 * hr;
        Lr[hr] = q < T ? lse[(size_t)bh * T + q] * ATT_LOG2E : 0.0f;
        Dr[hr] = q < T ? D[(size_t)bh * T + q] : 0.0f;
    }
    int n_kt = (min(T, q0 + 64) + FA_BKV - 1) / FA_BKV;
    unsigned qf[4][4], dof[4][4];
    float dq[8][4];
    fa_zero(dq);
    for (int jt = 0; jt < n_kt; jt++) {
        int buf = jt & 1;
        if (jt + 1 < n_kt) {
            fa_load_rows<64, 128>(Ks + (buf ^ 1) * FA_TILE, base + C, (jt + 1) * FA_BKV, T, ld, tid);
            fa_load_rows<64, 128>(Vs + (buf ^ 1) * FA_TILE, base + 2 * C, (jt + 1) * FA_BKV, T, ld, tid);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (jt == 0) {
            fa_load_a(qf, Qs, warp * 16, lane);
            fa_load_a(dof, dOs, warp * 16, lane);
        }
        int k0 = jt * FA_BKV;
        if (k0 <= wq0 + 15) {
            const __nv_bfloat16* Kb = Ks + buf * FA_TILE;
            // P (16 queries x 64 keys): element (nt, e) is query wq0 + g + 8*(e>>1), key k0 + 8*nt + 2*t4 + (e&1)
            float p[8][4], ds[8][4];
            fa_zero(p);
            fa_mma_abt(p, qf, Kb, lane);
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int key = k0 + nt * 8 + 2 * t4 + (e & 1), q = wq0 + g + 8 * (e >> 1);
                    p[nt][e] = (key <= q && q < T) ? exp2f(p[nt][e] * sl2 - Lr[e >> 1]) : 0.0f;
                }
            fa_zero(ds);
            fa_mma_abt(ds, dof, Vs + buf * FA_TILE, lane); // dP = dO·Vᵀ
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) ds[nt][e] = p[nt][e] * (ds[nt][e] - Dr[e >> 1]);
            fa_mma_pb(dq, ds, Kb, lane); // dQ += dS·K
        }
        __syncthreads();
    }
    const float scale = 1.0f / sqrtf((float)FA_HS);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        int q = wq0 + g + 8 * hr;
        if (q >= T) continue;
        __nv_bfloat16* y = dqkv + ((size_t)b * T + q) * ld + h * FA_HS;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            *reinterpret_cast<__nv_bfloat162*>(y + nt * 8 + 2 * t4) = __floats2bfloat162_rn(dq[nt][2 * hr] * scale, dq[nt][2 * hr + 1] * scale);
    }
}
#endif // !ENABLE_FP32

// whether the tensor-core kernels take this shape
static inline int attention_uses_tc(int C, int NH) {
#ifdef ENABLE_FP32
    (void)C;
    (void)NH;
    return 0;
#else
    return !g_attention_simple && C / NH == 64 && C % NH == 0;
#endif
}

static inline void attention_check_shape(int C, int NH, const char* what) {
    int hs = C / NH;
    if (C % NH || hs % 32 || hs > 32 * ATT_MAX_DPL || hs % x128::size)
        td_fatal("%s: head size C/NH = %d/%d must be a multiple of 32 and at most %d", what, C, NH, 32 * ATT_MAX_DPL);
}

// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C); causal
static inline void attention_forward_cuda(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    attention_check_shape(C, NH, "attention_forward_cuda");
#ifndef ENABLE_FP32
    if (attention_uses_tc(C, NH)) {
        static bool attr = false;
        if (!attr) {
            cudaCheck(cudaFuncSetAttribute(attention_forward_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FA_FWD_SMEM));
            attr = true;
        }
        dim3 grid(ceil_div(T, FA_BQ), B * NH);
        attention_forward_tc_kernel<<<grid, 256, FA_FWD_SMEM, g_cuda_stream>>>(out, lse, qkv, T, C, NH);
        cudaCheckLaunch("attention_forward_tc_kernel");
        return;
    }
#endif
    long warps = (long)B * NH * T;
    attention_forward_simple_kernel<<<ceil_div(warps * 32, 256), 256, 0, g_cuda_stream>>>(out, lse, qkv, B, T, C, NH);
    cudaCheckLaunch("attention_forward_simple_kernel");
}

// dqkv (B, T, 3C) (overwritten) from dout (B, T, C), with qkv, out and lse of the forward;
// scratch: B*NH*T floats
static inline void attention_backward_cuda(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                                           const float* lse, int B, int T, int C, int NH) {
    attention_check_shape(C, NH, "attention_backward_cuda");
    long rows = (long)B * NH * T;
    attention_rowdot_kernel<<<ceil_div(rows, 256), 256, 0, g_cuda_stream>>>(scratch, dout, out, B, T, C, NH);
    cudaCheckLaunch("attention_rowdot_kernel");
#ifndef ENABLE_FP32
    if (attention_uses_tc(C, NH)) {
        static bool attr = false;
        if (!attr) {
            cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FA_BWD_SMEM));
            cudaCheck(cudaFuncSetAttribute(attention_backward_dq_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FA_BWD_SMEM));
            attr = true;
        }
        dim3 grid(ceil_div(T, 64), B * NH);
        attention_backward_dkdv_tc_kernel<<<grid, 128, FA_BWD_SMEM, g_cuda_stream>>>(dqkv, qkv, dout, lse, scratch, T, C, NH);
        cudaCheckLaunch("attention_backward_dkdv_tc_kernel");
        attention_backward_dq_tc_kernel<<<grid, 128, FA_BWD_SMEM, g_cuda_stream>>>(dqkv, qkv, dout, lse, scratch, T, C, NH);
        cudaCheckLaunch("attention_backward_dq_tc_kernel");
        return;
    }
#endif
    attention_backward_dkdv_simple_kernel<<<ceil_div(rows * 32, 256), 256, 0, g_cuda_stream>>>(dqkv, qkv, dout, lse, scratch, B, T, C, NH);
    cudaCheckLaunch("attention_backward_dkdv_simple_kernel");
    attention_backward_dq_simple_kernel<<<ceil_div(rows * 32, 256), 256, 0, g_cuda_stream>>>(dqkv, qkv, dout, lse, scratch, B, T, C, NH);
    cudaCheckLaunch("attention_backward_dq_simple_kernel");
}
