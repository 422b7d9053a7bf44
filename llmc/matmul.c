// CPU matmul: one cache-blocked SGEMM (packed panels, an MR x NR register-blocked micro-kernel
// written with GCC vector extensions so it compiles to FMAs on any x86/ARM SIMD width), serving
// GPT-2's forward, input-gradient and weight-gradient products.
// Deterministic: every output element is summed over k in the same order whatever the thread count.
#include "matmul.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "profile.h"

#include "simd.h"

#define MR 12        // rows of C per micro-kernel
#define NR (2 * VL) // columns of C per micro-kernel: two vectors
#define MC 128      // rows of C per task (A block: MC x KC, ~128 KiB, in L2)
#define NC 256      // columns of C per task (B block: KC x NC, 256 KiB, in L2)
#define KC 256      // depth of one packed block
#define TILE_MAX 512 // widest tile of the split dimension (long depths use wide tiles)


// C (MR, NR) (+)= a (kc, MR) packed · b (kc, NR) packed; m x n of it valid
static void micro_kernel(int kc, const float* restrict a, const float* restrict b, float* restrict c, int ldc,
                         int m, int n, int accumulate) {
    vfloat acc0[MR], acc1[MR];
    for (int i = 0; i < MR; i++) { acc0[i] = (vfloat){0}; acc1[i] = (vfloat){0}; }
    for (int k = 0; k < kc; k++) {
        vfloat b0 = *(const vfloat*)(b + k * NR);
        vfloat b1 = *(const vfloat*)(b + k * NR + VL);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            // vector * scalar lets the compiler fold the broadcast into a load, off the shuffle port
            acc0[i] += b0 * a[k * MR + i];
            acc1[i] += b1 * a[k * MR + i];
        }
    }
    if (m == MR && n == NR) {
        for (int i = 0; i < MR; i++) {
            vfloat_u* ci = (vfloat_u*)(c + (size_t)i * ldc);
            ci[0] = accumulate ? ci[0] + acc0[i] : acc0[i];
            ci[1] = accumulate ? ci[1] + acc1[i] : acc1[i];
        }
    } else {
        for (int i = 0; i < m; i++) {
            float* ci = c + (size_t)i * ldc;
            for (int j = 0; j < n; j++) {
                float v = j < VL ? acc0[i][j] : acc1[i][j - VL];
                ci[j] = accumulate ? ci[j] + v : v;
            }
        }
    }
}

// dst[j*ldd + i] = src[i*lds + j] for an 8 x 8 block
static inline void transpose8(float* restrict dst, int ldd, const float* restrict src, int lds) {
    v8f r[8];
    for (int i = 0; i < 8; i++) r[i] = *(const v8f_u*)(src + (size_t)i * lds);
    simd_transpose8(r);
    for (int j = 0; j < 8; j++) *(v8f_u*)(dst + (size_t)j * ldd) = r[j];
}

// Packing copies a block of an operand into micro-panels the micro-kernel reads contiguously:
// rows [r0, r0+rows) x depth [k0, k0+kc) of X, where X(r, k) = trans ? X[k*ld + r] : X[r*ld + k],
// into dst (ceil(rows/W), kc, W) zero-padded; W = MR for A (rows of C), NR for B (columns of C).
static void pack_panels(float* restrict dst, const float* X, int ld, int trans, int r0, int rows, int k0, int kc, int W) {
    for (int rp = 0; rp < rows; rp += W) {
        float* d = dst + (size_t)rp * kc;
        int w = rows - rp < W ? rows - rp : W;
        if (w < W) memset(d, 0, sizeof(float) * (size_t)kc * W);
        if (trans) { // X(r, k) = X[k*ld + r]: W consecutive floats per k
            for (int k = 0; k < kc; k++) { // a short copy per k: vector moves, not a memcpy call
                const float* src = X + (size_t)(k0 + k) * ld + r0 + rp;
                float* dst = d + (size_t)k * W;
                if (w == W && W % VL == 0)
                    for (int j = 0; j < W; j += VL) *(vfloat_u*)(dst + j) = *(const vfloat_u*)(src + j);
                else
                    memcpy(dst, src, sizeof(float) * w);
            }
        } else { // X(r, k) = X[r*ld + k]: a transpose; whole 8 x 8 blocks in registers, the rest one by one
            int r8 = w / 8 * 8, k8 = kc / 8 * 8;
            for (int r = 0; r < r8; r += 8)
                for (int k = 0; k < k8; k += 8) transpose8(d + (size_t)k * W + r, W, X + (size_t)(r0 + rp + r) * ld + k0 + k, ld);
            for (int r = 0; r < w; r++) {
                const float* src = X + (size_t)(r0 + rp + r) * ld + k0;
                for (int k = r < r8 ? k8 : 0; k < kc; k++) d[(size_t)k * W + r] = src[k];
            }
        }
    }
}

// grows a buffer kept across calls (reserved once; the steady state allocates nothing)
static float* workspace(float** buf, size_t* cap, size_t floats) {
    if (floats > *cap) {
        free(*buf);
        *buf = (float*)aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        if (!*buf) td_fatal("matmul: out of memory for a %zu-float packing buffer", floats);
        *cap = floats;
    }
    return *buf;
}

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// C (M, N) = (accumulate ? C : 0) + op(A) (M, K) · op(B) (K, N), with op(A)(i, k) = transA ? A[k*lda + i] : A[i*lda + k]
// and op(B)(k, j) = transB ? B[j*ldb + k] : B[k*ldb + j]. The smaller operand is packed whole
// once; tasks split the larger one's dimension and pack their own blocks, so each operand is
// packed exactly once per call.
static void sgemm(int M, int N, int K, const float* A, int lda, int transA, const float* B, int ldb, int transB,
                  float* C, int ldc, int accumulate) {
    if (K == 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
        return;
    }
    static float* shared = NULL;
    static size_t shared_cap = 0;
    int nkb = CEIL_DIV(K, KC);
    int split_n = N >= M; // tasks over column tiles (A packed whole) or over row tiles (B packed whole)
    int whole_rows = split_n ? M : N, whole_w = split_n ? MR : NR;
    size_t whole_stride = (size_t)CEIL_DIV(whole_rows, whole_w) * whole_w; // floats per unit of depth
    float* whole = workspace(&shared, &shared_cap, whole_stride * (size_t)nkb * KC);
    int nthreads = omp_get_max_threads();
    // tiles of the split dimension: at most NC (or MC) wide, at least 4 per thread when the size allows
    int split_size = split_n ? N : M, unit = split_n ? NR : MR, cap = split_n ? NC : MC;
    int tile = CEIL_DIV(CEIL_DIV(split_size, 4 * nthreads), unit) * unit;
    if (tile > cap) tile = cap;
    // a long depth streams the whole packed operand once per tile: then one tile per thread
    if (nkb > 8) tile = CEIL_DIV(CEIL_DIV(split_size, nthreads), unit) * unit;
    if (tile > TILE_MAX) tile = TILE_MAX / unit * unit; // whole micro-panels (MR = 12 does not divide 512)
    if (CEIL_DIV(tile, unit) * unit > TILE_MAX) // a tile packs whole micro-panels into a TILE_MAX-row buffer
        td_fatal("matmul: a tile of %d rows packs %d rows, more than the %d-row buffer", tile, CEIL_DIV(tile, unit) * unit, TILE_MAX);
    int ntiles = CEIL_DIV(split_size, tile);
#pragma omp parallel
    {
        static __thread float* own = NULL; // this thread's block of the split operand
        static __thread size_t own_cap = 0;
        float* blk = workspace(&own, &own_cap, (size_t)KC * TILE_MAX);
        // the whole operand, k-block by k-block: (nkb, ceil(rows/w), KC-or-less, w)
#pragma omp for schedule(static)
        for (int job = 0; job < nkb * CEIL_DIV(whole_rows, whole_w); job++) {
            int kb = job / CEIL_DIV(whole_rows, whole_w), rp = (job % CEIL_DIV(whole_rows, whole_w)) * whole_w;
            int k0 = kb * KC, kc = K - k0 < KC ? K - k0 : KC;
            float* dst = whole + whole_stride * (size_t)k0 + (size_t)rp * kc;
            int rows = whole_rows - rp < whole_w ? whole_rows - rp : whole_w;
            if (split_n) pack_panels(dst, A, lda, transA, rp, rows, k0, kc, MR);
            else pack_panels(dst, B, ldb, !transB, rp, rows, k0, kc, NR);
        }
        // (implicit barrier) every task runs all k-blocks in order: each C element sums k in one fixed order
#pragma omp for schedule(dynamic, 1)
        for (int t = 0; t < ntiles; t++) {
            int s0 = t * tile, sn = split_size - s0 < tile ? split_size - s0 : tile;
            for (int kb = 0; kb < nkb; kb++) {
                int k0 = kb * KC, kc = K - k0 < KC ? K - k0 : KC;
                int acc = accumulate || kb > 0;
                const float* wk = whole + whole_stride * (size_t)k0;
                if (split_n) {
                    pack_panels(blk, B, ldb, !transB, s0, sn, k0, kc, NR);
                    for (int jp = 0; jp < sn; jp += NR)
                        for (int ip = 0; ip < M; ip += MR)
                            micro_kernel(kc, wk + (size_t)ip * kc, blk + (size_t)jp * kc, C + (size_t)ip * ldc + s0 + jp, ldc,
                                         M - ip < MR ? M - ip : MR, sn - jp < NR ? sn - jp : NR, acc);
                } else {
                    pack_panels(blk, A, lda, transA, s0, sn, k0, kc, MR);
                    for (int jp = 0; jp < N; jp += NR)
                        for (int ip = 0; ip < sn; ip += MR)
                            micro_kernel(kc, blk + (size_t)ip * kc, wk + (size_t)jp * kc, C + (size_t)(s0 + ip) * ldc + jp, ldc,
                                         sn - ip < MR ? sn - ip : MR, N - jp < NR ? N - jp : NR, acc);
                }
            }
        }
    }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    double t0 = profile_begin();
    // out (N, OC) = inp (N, C) · weight (OC, C)ᵀ
    sgemm(N, OC, C, inp, C, 0, weight, C, 1, out, OC, 0);
    if (bias) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
    }
    PROFILE_END(t0, "matmul", "fwd", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * C + (double)OC * C + (double)N * OC));
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC) {
    double t0 = profile_begin();
    // dinp (N, C) += dout (N, OC) · weight (OC, C)
    sgemm(N, C, OC, dout, OC, 0, weight, C, 0, dinp, C, 1);
    PROFILE_END(t0, "matmul", "bwd_in", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * OC + (double)OC * C + 2.0 * N * C));
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int C, int OC) {
    double t0 = profile_begin();
    // dweight (OC, C) += dout (N, OC)ᵀ · inp (N, C)
    sgemm(OC, C, N, dout, OC, 1, inp, C, 0, dweight, C, 1);
    if (dbias) {
        // each thread owns a column range of dbias and sums n in order: deterministic
#pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int o0 = (int)((long)OC * t / nt), o1 = (int)((long)OC * (t + 1) / nt);
            for (int n = 0; n < N; n++)
                for (int o = o0; o < o1; o++) dbias[o] += dout[(size_t)n * OC + o];
        }
    }
    PROFILE_END(t0, "matmul", "bwd_w", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * OC + (double)N * C + 2.0 * OC * C));
}
