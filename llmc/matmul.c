// CPU matmul: one cache-blocked SGEMM (packed panels, an MR x NR register-blocked micro-kernel
// written with GCC vector extensions so it compiles to FMAs on any x86/ARM SIMD width), serving
// GPT-2's forward, input-gradient and weight-gradient products.
// Deterministic: every output element is summed over k in the same order whatever the thread count.
#include "matmul.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));

#define MR 8        // rows of C per micro-kernel
#define NR (2 * VL) // columns of C per micro-kernel: two vectors
#define MC 128      // rows of C per task (A block: MC x KC, ~128 KiB, in L2)
#define NC 256      // columns of C per task (B block: KC x NC, 256 KiB, in L2)
#define KC 256      // depth of one packed block

// C (MR, NR) (+)= a (kc, MR) packed · b (kc, NR) packed; m x n of it valid
static void micro_kernel(int kc, const float* restrict a, const float* restrict b, float* restrict c, int ldc,
                         int m, int n, int accumulate) {
    vfloat acc0[MR], acc1[MR];
    for (int i = 0; i < MR; i++) { acc0[i] = (vfloat){0}; acc1[i] = (vfloat){0}; }
    for (int k = 0; k < kc; k++) {
        vfloat b0 = *(const vfloat*)(b + k * NR);
        vfloat b1 = *(const vfloat*)(b + k * NR + VL);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            // vector * scalar lets the compiler fold the broadcast into the FMA's memory operand
            acc0[i] += b0 * a[k * MR + i];
            acc1[i] += b1 * a[k * MR + i];
        }
    }
    if (m == MR && n == NR) {
        for (int i = 0; i < MR; i++) {
            float* ci = c + (size_t)i * ldc;
            for (int j = 0; j < VL; j++) {
                ci[j] = (accumulate ? ci[j] : 0.0f) + acc0[i][j];
                ci[VL + j] = (accumulate ? ci[VL + j] : 0.0f) + acc1[i][j];
            }
        }
    } else {
        for (int i = 0; i < m; i++) {
            float* ci = c + (size_t)i * ldc;
            for (int j = 0; j < n; j++) {
                float v = j < VL ? acc0[i][j] : acc1[i][j - VL];
                ci[j] = (accumulate ? ci[j] : 0.0f) + v;
            }
        }
    }
}

// element (row, col) of a row-major matrix with leading dimension ld, read transposed if trans
#define AT(X, ld, trans, row, col) ((trans) ? (X)[(size_t)(col) * (ld) + (row)] : (X)[(size_t)(row) * (ld) + (col)])

// packs A rows [i0, i0+mc) x depth [k0, k0+kc) into MR-row micro-panels: pa (ceil(mc/MR), kc, MR), zero-padded
static void pack_a(float* pa, const float* A, int lda, int transA, int i0, int mc, int k0, int kc) {
    for (int ip = 0; ip < mc; ip += MR) {
        float* dst = pa + (size_t)ip * kc;
        int m = mc - ip < MR ? mc - ip : MR;
        for (int k = 0; k < kc; k++)
            for (int i = 0; i < MR; i++) dst[k * MR + i] = i < m ? AT(A, lda, transA, i0 + ip + i, k0 + k) : 0.0f;
    }
}

// packs B depth [k0, k0+kc) x columns [j0, j0+nc) into NR-column micro-panels: pb (ceil(nc/NR), kc, NR), zero-padded
static void pack_b(float* pb, const float* B, int ldb, int transB, int k0, int kc, int j0, int nc) {
    for (int jp = 0; jp < nc; jp += NR) {
        float* dst = pb + (size_t)jp * kc;
        int n = nc - jp < NR ? nc - jp : NR;
        if (!transB && n == NR) {
            for (int k = 0; k < kc; k++) memcpy(dst + k * NR, B + (size_t)(k0 + k) * ldb + j0 + jp, NR * sizeof(float));
        } else {
            for (int k = 0; k < kc; k++)
                for (int j = 0; j < NR; j++) dst[k * NR + j] = j < n ? AT(B, ldb, transB, k0 + k, j0 + jp + j) : 0.0f;
        }
    }
}

// C (M, N) = (accumulate ? C : 0) + op(A) (M, K) · op(B) (K, N)
static void sgemm(int M, int N, int K, const float* A, int lda, int transA, const float* B, int ldb, int transB,
                  float* C, int ldc, int accumulate) {
    int tiles_m = (M + MC - 1) / MC, tiles_n = (N + NC - 1) / NC;
#pragma omp parallel
    {
        // per-thread packing buffers, kept across calls (sized once; no allocation in the steady state)
        static __thread float* pa = NULL; // (MC, KC)
        static __thread float* pb = NULL; // (KC, NC)
        if (!pa) {
            pa = (float*)aligned_alloc(64, sizeof(float) * MC * KC);
            pb = (float*)aligned_alloc(64, sizeof(float) * KC * NC);
            if (!pa || !pb) td_fatal("matmul: out of memory for packing buffers");
        }
#pragma omp for schedule(dynamic, 1)
        for (int tile = 0; tile < tiles_m * tiles_n; tile++) {
            int i0 = (tile / tiles_n) * MC, j0 = (tile % tiles_n) * NC;
            int mc = M - i0 < MC ? M - i0 : MC, nc = N - j0 < NC ? N - j0 : NC;
            for (int k0 = 0; k0 < K; k0 += KC) {
                int kc = K - k0 < KC ? K - k0 : KC;
                int acc = accumulate || k0 > 0;
                pack_a(pa, A, lda, transA, i0, mc, k0, kc);
                pack_b(pb, B, ldb, transB, k0, kc, j0, nc);
                for (int jp = 0; jp < nc; jp += NR)
                    for (int ip = 0; ip < mc; ip += MR)
                        micro_kernel(kc, pa + (size_t)ip * kc, pb + (size_t)jp * kc, C + (size_t)(i0 + ip) * ldc + j0 + jp,
                                     ldc, mc - ip < MR ? mc - ip : MR, nc - jp < NR ? nc - jp : NR, acc);
            }
            if (K == 0 && !accumulate)
                for (int i = 0; i < mc; i++) memset(C + (size_t)(i0 + i) * ldc + j0, 0, nc * sizeof(float));
        }
    }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    // out (N, OC) = inp (N, C) · weight (OC, C)ᵀ
    sgemm(N, OC, C, inp, C, 0, weight, C, 1, out, OC, 0);
    if (bias) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
    }
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC) {
    // dinp (N, C) += dout (N, OC) · weight (OC, C)
    sgemm(N, C, OC, dout, OC, 0, weight, C, 0, dinp, C, 1);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int C, int OC) {
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
}
