// CPU matmul: one cache-blocked SGEMM (packed panels, an MR x NR register-blocked micro-kernel
// written with GCC vector extensions so it compiles to FMAs on any x86/ARM SIMD width), serving
// GPT-2's forward, input-gradient and weight-gradient products.
// Deterministic: each output element is the same sum whatever the thread count or the tiling: over
// k-blocks of KC in order, each block an FMA chain from zero over its k in order, added to C.
#include "matmul.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "profile.h"

#include "simd.h"

#define KC 256 // depth of one packed block. It fixes every element's rounding (see the top): changing it changes results
// 8 x 3 vectors: 24 accumulators, 3 vector loads and 8 broadcasts per k; 8 divides GPT-2's token
// counts and 48 its widths, so no partial tiles (5-7% faster than 12 x 2 on 124M's shapes)
#ifndef MR
#define MR 8 // rows of C per micro-kernel
#endif
#ifndef NV
#define NV 3 // vectors of C per micro-kernel row
#endif
#define NR (NV * VL)  // columns of C per micro-kernel
_Static_assert(NV >= 1 && NV <= 4, "block_kernels has narrower micro-kernels for up to 4 vectors");
#define TILE_MAX 512  // widest tile of the split operand (rows packed per task)

// how a k-block's sum s meets C: C = s; C = C + s; C = 0 + s (bitwise what adding into zeroed memory
// gave, even for a sum that rounded to -0, for the backward passes that used to start from a memset)
enum { C_SET, C_ADD, C_ZERO_ADD };

// C (m, n) of one MR x (nv VL) tile from Σ_k a[k][i] b[k][j] over this block's kc (the sum an FMA chain
// from zero) as `mode` says; then + bias[j] where bias is given (a forward's last block). b's panel is
// NR wide whatever nv: nv < NV serves a last panel that needs fewer vectors (n <= nv VL), without
// computing the padding. Full tiles go straight from the registers to C; a partial tile passes through
// a small buffer, so that no accumulator is ever indexed at run time (that would move them all out of
// registers). Always inlined, so each nv is its own code with every loop unrolled: the loops run to
// the constant NV and test v < nv inside, which the inlined constant removes (clang unrolls the
// loops before inlining, and with nv as their bound it kept the accumulators in memory)
static inline __attribute__((always_inline)) void micro_kernel(int kc, const float* restrict a, const float* restrict b, float* restrict c, int ldc,
                                                                int m, int n, int nv, int mode, const float* restrict bias) {
    vfloat acc[MR][NV];
    // C's lines are asked for now, to arrive while the k loop runs: in a training step C is mostly
    // fresh activations, not in any cache, and the stores at the end would otherwise wait for them
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) if (v < nv) __builtin_prefetch(c + (size_t)i * ldc + v * VL, 1, 3);
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) if (v < nv) acc[i][v] = (vfloat){0};
    for (int k = 0; k < kc; k++) {
        vfloat bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) if (v < nv) bv[v] = *(const vfloat*)(b + (size_t)k * NR + v * VL);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) if (v < nv) acc[i][v] += bv[v] * a[k * MR + i]; // vector * scalar: the broadcast folds into a load
    }
    if (m == MR && n == nv * VL) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) if (v < nv) {
                vfloat_u* ci = (vfloat_u*)(c + (size_t)i * ldc + v * VL);
                vfloat x = mode == C_ADD ? *ci + acc[i][v] : mode == C_ZERO_ADD ? (vfloat){0} + acc[i][v] : acc[i][v];
                *ci = bias ? x + *(const vfloat_u*)(bias + v * VL) : x;
            }
        return;
    }
    float tile[MR * NR] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) if (v < nv) *(vfloat*)(tile + i * NR + v * VL) = acc[i][v];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float* cij = c + (size_t)i * ldc + j;
            float x = mode == C_ADD ? *cij + tile[i * NR + j] : mode == C_ZERO_ADD ? 0.0f + tile[i * NR + j] : tile[i * NR + j];
            *cij = bias ? x + bias[j] : x;
        }
}

// an operand as a row-major matrix of `rows` rows of depth K: X(r, k) = trans ? p[k*ld + r] : p[r*ld + k]
typedef struct {
    const float* p;
    int ld, trans;
} Operand;

// Packing copies a block of an operand into micro-panels the micro-kernel reads contiguously:
// rows [r0, r0+rows) x depth [k0, k0+kc) of X into dst (ceil(rows/W), kc, W) zero-padded;
// W = MR for A (rows of C), NR for B (columns of C).
static void pack_panels(float* restrict dst, Operand X, int r0, int rows, int k0, int kc, int W) {
    for (int rp = 0; rp < rows; rp += W) {
        float* d = dst + (size_t)rp * kc;
        int w = rows - rp < W ? rows - rp : W;
        if (w < W) memset(d, 0, sizeof(float) * (size_t)kc * W);
        if (X.trans) { // X(r, k) = p[k*ld + r]: W consecutive floats per k
            for (int k = 0; k < kc; k++) { // a short copy per k: vector moves, not a memcpy call
                const float* src = X.p + (size_t)(k0 + k) * X.ld + r0 + rp;
                float* dk = d + (size_t)k * W;
                if (w == W && W % 8 == 0) // 8-float moves: MR = 8 is half an AVX-512 vector
                    for (int j = 0; j < W; j += 8) *(v8f_u*)(dk + j) = *(const v8f_u*)(src + j);
                else
                    memcpy(dk, src, sizeof(float) * w);
            }
        } else { // X(r, k) = p[r*ld + k]: a transpose
            simd_transpose(d, W, X.p + (size_t)(r0 + rp) * X.ld + k0, X.ld, w, kc);
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
#define MIN(a, b) ((a) < (b) ? (a) : (b))

// what one sgemm call's tasks share: the shapes, the operands, how the split operand is tiled
typedef struct {
    int M, N, K, nkb, ldc, mode, split_n; // mode: how the first k-block meets C (later ones add)
    Operand sp;            // the split operand: rows in tiles, each packed by the task that owns it
    int sp_rows, sp_w, tile, ntiles;
    Operand sh;            // the shared operand: each thread packs each k-block of it for its own tiles
    int sh_rows, sh_w, sh_panels;
    float* C;              // (M, N), rows ldc apart
    const float* bias;     // (N) or NULL
} Gemm;

// packs k-block kb of the shared operand into dst
static void pack_shared(const Gemm* g, float* dst, int kb, MatmulSplit* prof) {
    int k0 = kb * KC, kc = MIN(g->K - k0, KC);
    double t0 = prof ? now_seconds() : 0.0;
    for (int p = 0; p < g->sh_panels; p++)
        pack_panels(dst + (size_t)p * g->sh_w * kc, g->sh, p * g->sh_w, MIN(g->sh_rows - p * g->sh_w, g->sh_w), k0, kc, g->sh_w);
    if (prof) prof->pack_s += now_seconds() - t0;
}

// every micro-tile of C (mi, nj) over one k-block: a packed (ceil(mi/MR), kc, MR), b packed
// (ceil(nj/NR), kc, NR). The A micro-panel (MR x kc, 8 KiB) stays in L1 while B's stream from L2: a
// few % faster here than keeping B's (48 KiB, as large as L1) and streaming A's
static void block_kernels(int kc, const float* a, const float* b, float* C, int ldc, int mi, int nj, int mode, const float* bias) {
    for (int ip = 0; ip < mi; ip += MR)
        for (int jp = 0; jp < nj; jp += NR) {
            int m = MIN(mi - ip, MR), n = MIN(nj - jp, NR), nv = CEIL_DIV(n, VL); // nv < NV: a last panel narrower than NR
            const float *ap = a + (size_t)ip * kc, *bp = b + (size_t)jp * kc, *bj = bias ? bias + jp : NULL;
            float* cp = C + (size_t)ip * ldc + jp;
            if (nv >= NV) micro_kernel(kc, ap, bp, cp, ldc, m, n, NV, mode, bj);
#if NV > 3
            else if (nv == 3) micro_kernel(kc, ap, bp, cp, ldc, m, n, 3, mode, bj);
#endif
#if NV > 2
            else if (nv == 2) micro_kernel(kc, ap, bp, cp, ldc, m, n, 2, mode, bj);
#endif
            else micro_kernel(kc, ap, bp, cp, ldc, m, n, 1, mode, bj);
        }
}

// tile t of C over k-block kb: its block of the split operand packed into blk, then every micro-tile;
// shk: the shared operand's packed k-block; the seconds of each half added to `prof` when given
static void tile_block(const Gemm* g, int t, int kb, const float* shk, float* blk, MatmulSplit* prof) {
    int k0 = kb * KC, kc = MIN(g->K - k0, KC);
    int mode = kb > 0 ? C_ADD : g->mode;
    const float* bias = kb == g->nkb - 1 ? g->bias : NULL;
    int s0 = t * g->tile, sn = MIN(g->sp_rows - s0, g->tile);
    double t0 = prof ? now_seconds() : 0.0;
    pack_panels(blk, g->sp, s0, sn, k0, kc, g->sp_w);
    double t1 = prof ? now_seconds() : 0.0;
    const float* a = g->split_n ? shk : blk;
    const float* b = g->split_n ? blk : shk;
    int i0 = g->split_n ? 0 : s0, j0 = g->split_n ? s0 : 0, mi = g->split_n ? g->M : sn, nj = g->split_n ? sn : g->N;
    block_kernels(kc, a, b, g->C + (size_t)i0 * g->ldc + j0, g->ldc, mi, nj, mode, bias ? bias + j0 : NULL);
    if (prof) {
        double t2 = now_seconds();
        prof->pack_s += t1 - t0;
        prof->kernel_s += t2 - t1;
        prof->kernel_flops += 2.0 * mi * nj * kc;
    }
}

// Which operand's rows the threads split (1: Bt's, the columns of C; 0: A's), the other being packed
// whole by every thread. Per thread and k, in cycles on a core: the micro-kernel's FMAs over its split
// rows against all of the shared ones, about 1/8 a row pair (2 FLOP of 16 a cycle), and the packing
// of those rows and of the whole shared operand, about 1/2 a row (a copy from memory). Where both
// split evenly that is the smaller operand shared (packing is what differs); where one splits
// unevenly (128 columns are 3 panels of 48: 2 and 1 between two threads) its balance can win.
static int split_columns(int M, int N, int nt) {
    int rows_n = MIN(CEIL_DIV(CEIL_DIV(N, NR), nt) * NR, N), rows_m = MIN(CEIL_DIV(CEIL_DIV(M, MR), nt) * MR, M); // a thread's most
    double cost_n = rows_n * (double)M / 8 + (M + rows_n) / 2.0, cost_m = rows_m * (double)N / 8 + (N + rows_m) / 2.0;
    return cost_n != cost_m ? cost_n < cost_m : N >= M;
}

// C (M, N) = A (M, K) · Bᵀ (N, K) [+ bias (N) after the last k-block], set or added as `mode` says, A and
// Bt given as Operands of M and N rows. One operand (the shared one, usually the smaller: see
// split_columns) is read by every thread; the threads split the other one's rows into tiles, thread th owning tiles th,
// th + nt, ... Each thread walks the k-blocks in order: it packs the shared operand's block itself
// (the smaller operand, so a small share of the work), then for each of its tiles packs that tile's
// block and runs the micro-kernels. Nothing is shared between threads but C's disjoint tiles, so
// there is no barrier: a thread descheduled on a shared machine delays only its own tiles. Packing
// the shared operand on each thread costs less than reading another core's packing (measured with
// paired steps, dev/bench_matmul_ab.sh: about 3% off a 124M step, 6% off the small model's).
static void sgemm(int M, int N, int K, Operand A, Operand Bt, float* C, int ldc, int mode, const float* bias, MatmulSplit* prof) {
    if (K == 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = (mode == C_ADD ? C[(size_t)i * ldc + j] : 0.0f) + (bias ? bias[j] : 0.0f);
        return;
    }
    int nthreads = omp_get_max_threads();
    Gemm g = {.M = M, .N = N, .K = K, .nkb = CEIL_DIV(K, KC), .ldc = ldc, .mode = mode, .split_n = split_columns(M, N, nthreads), .C = C, .bias = bias};
    g.sh = g.split_n ? A : Bt;
    g.sp = g.split_n ? Bt : A;
    g.sh_rows = g.split_n ? M : N;
    g.sh_w = g.split_n ? MR : NR;
    g.sp_rows = g.split_n ? N : M;
    g.sp_w = g.split_n ? NR : MR;
    g.sh_panels = CEIL_DIV(g.sh_rows, g.sh_w);
    // tiles of whole micro-panels, as few as TILE_MAX allows, their count a multiple of the threads
    // so that each thread has as many (fewer only where there are fewer panels than threads)
    int sp_panels = CEIL_DIV(g.sp_rows, g.sp_w);
    int want = nthreads * CEIL_DIV(sp_panels, nthreads * (TILE_MAX / g.sp_w));
    g.tile = CEIL_DIV(sp_panels, MIN(want, sp_panels)) * g.sp_w;
    g.ntiles = CEIL_DIV(g.sp_rows, g.tile);
#pragma omp parallel
    {
        static __thread float* own = NULL; // this thread's block of the split operand
        static __thread size_t own_cap = 0;
        static __thread float* mine = NULL; // this thread's packed k-block of the shared operand
        static __thread size_t mine_cap = 0;
        float* blk = workspace(&own, &own_cap, (size_t)KC * TILE_MAX);
        float* shk = workspace(&mine, &mine_cap, (size_t)g.sh_panels * g.sh_w * KC);
        int th = omp_get_thread_num(), nt = omp_get_num_threads();
        MatmulSplit mine_s = {0}, *p = prof ? &mine_s : NULL; // this thread's seconds, added up below
        for (int kb = 0; kb < g.nkb && th < g.ntiles; kb++) {
            pack_shared(&g, shk, kb, p);
            for (int t = th; t < g.ntiles; t += nt) tile_block(&g, t, kb, shk, blk, p);
        }
        if (prof) {
#pragma omp critical(matmul_split)
            {
                prof->pack_s += mine_s.pack_s;
                prof->kernel_s += mine_s.kernel_s;
                prof->kernel_flops += mine_s.kernel_flops;
            }
        }
    }
}

static MatmulSplit split_by_pass[3]; // fwd, bwd_in, bwd_w: thread-seconds while profile_on
static MatmulSplit* split_of(int pass) { return profile_on ? &split_by_pass[pass] : NULL; }

MatmulSplit matmul_profile_split(int pass) { return split_by_pass[pass]; }
void matmul_profile_reset(void) { memset(split_by_pass, 0, sizeof(split_by_pass)); }

double matmul_kernel_gflops(double seconds, int mi, int nj, int kc) {
    // on every thread at once (the clock a loaded chip runs at), each its own tile as sgemm runs it.
    // The rate over all of `seconds`, not the best few ms: a step's matmuls are timed the same way,
    // through a VM's slow moments as well as its fast; the clock is read every 64 tiles, so that
    // reading it costs nothing next to a one-micro-tile tile
    if (mi < 1 || nj < 1 || kc < 1 || kc > KC) td_fatal("matmul_kernel_gflops: tile %d x %d x %d out of range (depth 1..%d)", mi, nj, kc, KC);
    const int ldc = nj > 2304 ? nj : 2304; // C's rows as far apart as the 124M QKV output's
    double sum = 0.0;
#pragma omp parallel reduction(+ : sum)
    {
        float* a = (float*)aligned_alloc(64, sizeof(float) * (size_t)CEIL_DIV(mi, MR) * MR * kc);
        float* b = (float*)aligned_alloc(64, sizeof(float) * (size_t)CEIL_DIV(nj, NR) * NR * kc);
        float* c = (float*)aligned_alloc(64, sizeof(float) * (size_t)mi * ldc);
        if (!a || !b || !c) td_fatal("matmul_kernel_gflops: out of memory");
        for (size_t i = 0; i < (size_t)CEIL_DIV(mi, MR) * MR * kc; i++) a[i] = 1e-3f * (float)(i % 7);
        for (size_t i = 0; i < (size_t)CEIL_DIV(nj, NR) * NR * kc; i++) b[i] = 1e-3f * (float)(i % 5);
        memset(c, 0, sizeof(float) * (size_t)mi * ldc);
        long reps = 0;
        double t0 = now_seconds(), t = t0;
        for (; t - t0 < seconds; t = now_seconds())
            for (int r = 0; r < 64; r++, reps++) block_kernels(kc, a, b, c, ldc, mi, nj, reps ? C_ADD : C_SET, NULL);
        free(a); free(b); free(c);
        sum += reps * 2.0 * mi * nj * kc / (t - t0) / 1e9;
    }
    return sum / omp_get_max_threads();
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    double t0 = profile_begin();
    // out (N, OC) = inp (N, C) · weight (OC, C)ᵀ + bias
    sgemm(N, OC, C, (Operand){inp, C, 0}, (Operand){weight, C, 0}, out, OC, C_SET, bias, split_of(0));
    PROFILE_END(t0, "matmul", "fwd", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * C + (double)OC * C + (double)N * OC));
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C, int OC, int accumulate) {
    double t0 = profile_begin();
    // dinp (N, C) (+)= dout (N, OC) · weight (OC, C): Bt(j, k) = weight[k*C + j]
    sgemm(N, C, OC, (Operand){dout, OC, 0}, (Operand){weight, C, 1}, dinp, C, accumulate ? C_ADD : C_ZERO_ADD, NULL, split_of(1));
    PROFILE_END(t0, "matmul", "bwd_in", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * OC + (double)OC * C + (accumulate ? 2.0 : 1.0) * N * C));
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int N, int C, int OC, int accumulate) {
    double t0 = profile_begin();
    // dweight (OC, C) (+)= dout (N, OC)ᵀ · inp (N, C): A(o, n) = dout[n*OC + o], Bt(c, n) = inp[n*C + c]
    sgemm(OC, C, N, (Operand){dout, OC, 1}, (Operand){inp, C, 1}, dweight, C, accumulate ? C_ADD : C_ZERO_ADD, NULL, split_of(2));
    if (dbias) {
        // each thread owns a column range of dbias and sums n in order (onto 0 when not accumulating,
        // bitwise the old sum into zeroed memory): deterministic
#pragma omp parallel
        {
            int nt = omp_get_num_threads(), t = omp_get_thread_num();
            int o0 = (int)((long)OC * t / nt), o1 = (int)((long)OC * (t + 1) / nt);
            if (!accumulate)
                for (int o = o0; o < o1; o++) dbias[o] = 0.0f;
            for (int n = 0; n < N; n++)
                for (int o = o0; o < o1; o++) dbias[o] += dout[(size_t)n * OC + o];
        }
    }
    PROFILE_END(t0, "matmul", "bwd_w", N, C, OC, 2.0 * N * C * OC, 4.0 * ((double)N * OC + (double)N * C + (accumulate ? 2.0 : 1.0) * OC * C));
}
