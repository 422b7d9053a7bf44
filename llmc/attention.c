// CPU causal self-attention, forward and backward (see attention.h). Each (b, h) is one task, its
// rows taken in tiles of RQ: a tile's dot products and weighted sums run as small register-blocked
// matrix products, each key, value or gradient vector loaded once for all RQ rows.
// Every element is an FMA chain in a fixed order, so results do not depend on the number of threads.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "vec_math.h"
#include "attention.h"
#include "profile.h"
#include "simd.h"

#define RQ 4 // rows (queries or keys) of a tile
// vectors of a row held in registers at once: RQ x KV accumulators, 16 of AVX-512's 32 registers
// (8 of AVX's 16)
#if VL >= 16
#define KV 4
#else
#define KV 2
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

// One head's keys (or values) of batch row b, transposed: kt (hs, Tp)[i][t2] = qkv's head slice of
// token t2 at offset `part` (C: keys, 2C: values), zero past T (Tp: T rounded up to VL)
static void head_transposed(float* kt, const float* qkv, int b, int h, int part, int T, int Tp, int C, int hs) {
    simd_transpose(kt, Tp, qkv + (size_t)b * T * 3 * C + part + h * hs, 3 * C, T, hs);
    for (int i = 0; i < hs; i++)
        for (int t2 = T; t2 < Tp; t2++) kt[(size_t)i * Tp + t2] = 0.0f;
}

// o (nv vectors) (+)= Σ_{j0 <= j < j1} w[j] x_j, x_j = x + j ldx: one row's terms outside its tile's
// common range, onto o's value (add) or from zero
static inline __attribute__((always_inline)) void row_wsum(float* o, const float* w, const float* x, size_t ldx, int j0, int j1, int nv, int add) {
    vfloat acc[KV];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) acc[v] = add ? *(const vfloat_u*)(o + v * VL) : (vfloat){0};
    for (int j = j0; j < j1; j++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[v] += *(const vfloat_u*)(x + (size_t)j * ldx + v * VL) * w[j];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) *(vfloat_u*)(o + v * VL) = acc[v];
}

// the tile_wsums of nv vectors of columns (see below), jlo and jhi the rows' common range
static inline __attribute__((always_inline)) void wsums_block(float* o, size_t ldo, const float* w, size_t ldw, const float* x, size_t ldx, int rows,
                                                               const int* lo, const int* hi, int jlo, int jhi, int nv) {
    for (int r = 0; r < rows; r++) row_wsum(o + r * ldo, w + r * ldw, x, ldx, lo[r], MIN(jlo, hi[r]), nv, 0);
    vfloat acc[RQ][KV];
    const float* wr[RQ]; // rows past `rows` repeat the last one; their sums are not stored
#pragma GCC unroll 4
    for (int r = 0; r < RQ; r++) {
        wr[r] = w + MIN(r, rows - 1) * ldw;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[r][v] = *(const vfloat_u*)(o + MIN(r, rows - 1) * ldo + v * VL);
    }
    for (int j = jlo; j < jhi; j++) {
        vfloat xv[KV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) xv[v] = *(const vfloat_u*)(x + (size_t)j * ldx + v * VL);
#pragma GCC unroll 4
        for (int r = 0; r < RQ; r++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[r][v] += xv[v] * wr[r][j];
    }
#pragma GCC unroll 4
    for (int r = 0; r < RQ; r++)
        if (r < rows)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) *(vfloat_u*)(o + r * ldo + v * VL) = acc[r][v];
    for (int r = 0; r < rows; r++) row_wsum(o + r * ldo, w + r * ldw, x, ldx, MAX(jhi, lo[r]), hi[r], nv, 1);
}

// o_r (cols) = Σ_{lo_r <= j < hi_r} w_r[j] x_j for r < rows (<= RQ), o_r = o + r ldo, w_r = w + r ldw,
// x_j = x + j ldx: each element an FMA chain over j in order from zero. The j all rows share run
// blocked, each x_j vector loaded once for all rows; the rest row by row, before and after
static void tile_wsums(float* o, size_t ldo, const float* w, size_t ldw, const float* x, size_t ldx, int rows, const int* lo, const int* hi, int cols) {
    int jlo = lo[0], jhi = hi[0];
    for (int r = 1; r < rows; r++) jlo = MAX(jlo, lo[r]), jhi = MIN(jhi, hi[r]);
    jhi = MAX(jhi, jlo);
    int c = 0;
    for (; c + KV * VL <= cols; c += KV * VL) wsums_block(o + c, ldo, w, ldw, x + c, ldx, rows, lo, hi, jlo, jhi, KV);
    switch ((cols - c) / VL) { // fewer than KV vectors left
    case 3: wsums_block(o + c, ldo, w, ldw, x + c, ldx, rows, lo, hi, jlo, jhi, MIN(3, KV)); c += 3 * VL; break;
    case 2: wsums_block(o + c, ldo, w, ldw, x + c, ldx, rows, lo, hi, jlo, jhi, MIN(2, KV)); c += 2 * VL; break;
    case 1: wsums_block(o + c, ldo, w, ldw, x + c, ldx, rows, lo, hi, jlo, jhi, 1); c += VL; break;
    }
    for (int r = 0; r < rows; r++) // columns past whole vectors (a head size not a multiple of VL) one by one
        for (int i = c; i < cols; i++) {
            float s = 0.0f;
            for (int j = lo[r]; j < hi[r]; j++) s = fmaf(w[r * ldw + j], x[(size_t)j * ldx + i], s);
            o[r * ldo + i] = s;
        }
}

// S (RQ, Tp) [r][t2] = x_r · k_t2 for t2 < n rounded up to VL (kt (hs, Tp) is zero past T), x_r = x + r ldx
// for r < rows: the weighted sums of kt's rows i with the weights x_r[i], each an FMA chain over i
static void tile_dots(float* S, int Tp, const float* x, size_t ldx, int rows, const float* kt, int hs, int n) {
    int lo[RQ], hi[RQ];
    for (int r = 0; r < RQ; r++) lo[r] = 0, hi[r] = hs;
    tile_wsums(S, Tp, x, ldx, kt, Tp, rows, lo, hi, (n + VL - 1) / VL * VL);
}

// a (T) = softmax(scale s) over its first n entries, 0 past them. The maximum is taken from s (scale > 0:
// the same entry), and each entry's exponent is (s - max) scale
static void softmax_row(float* restrict a, const float* restrict s, int n, int T, float scale) {
    float maxv = simd_row_max(s, n);
    for (int t2 = 0; t2 < n; t2++) a[t2] = (s[t2] - maxv) * scale;
    expf_vec(a, a, n);
    float inv = 1.0f / simd_row_dot(a, NULL, n);
    for (int t2 = 0; t2 < n; t2++) a[t2] *= inv;
    for (int t2 = n; t2 < T; t2++) a[t2] = 0.0f;
}

// One head's rows of qkv or dout, copied contiguous: dst (T, hs)[t] = src + t ld. Strided as they lie
// (3C or C floats apart, a multiple of 1 KiB at GPT-2's widths) a head's rows fall into a quarter of
// L1's sets and evict each other between the tiles that reread them
static void head_rows(float* dst, const float* src, size_t ld, int T, int hs) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * hs, src + (size_t)t * ld, sizeof(float) * hs);
}

// a thread's view of one head at a time: its shape, and its buffers in one allocation that starts
// at kt (free(kt) frees all)
typedef struct {
    int hs, Tp;     // head size C / NH; T rounded up to VL
    float scale;    // 1 / sqrt(hs)
    float* kt;      // (hs, Tp) keys (forward) or values (backward), transposed
    float* S;       // (RQ, Tp) a tile's dot products
    float* wa;      // (RQ, Tp) a key tile's columns of att (backward)
    float* wd;      // (RQ, Tp) and of dpre
    float* rows[3]; // (T, hs) each: forward values; backward keys, queries, output gradient
} HeadScratch;

static void head_scratch_init(HeadScratch* hb, int T, int C, int NH) {
    int hs = C / NH, Tp = (T + VL - 1) / VL * VL;
    size_t n = (size_t)(hs + 3 * RQ) * Tp + 3 * (size_t)T * hs;
    hb->hs = hs, hb->Tp = Tp, hb->scale = 1.0f / sqrtf((float)hs);
    hb->kt = (float*)aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!hb->kt) td_fatal("attention: out of memory for a head's %zu-float buffers", n);
    hb->S = hb->kt + (size_t)hs * Tp;
    hb->wa = hb->S + (size_t)RQ * Tp;
    hb->wd = hb->wa + (size_t)RQ * Tp;
    for (int i = 0; i < 3; i++) hb->rows[i] = hb->wd + (size_t)RQ * Tp + (size_t)i * T * hs;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    double t0 = profile_begin();
#pragma omp parallel
    {
        HeadScratch hb;
        head_scratch_init(&hb, T, C, NH);
        int hs = hb.hs, Tp = hb.Tp;
        float *kt = hb.kt, *S = hb.S, *v = hb.rows[0]; // keys transposed (hs, Tp), dots (RQ, Tp), values (T, hs)
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                head_transposed(kt, qkv, b, h, C, T, Tp, C, hs);
                const float* q0 = qkv + (size_t)b * T * 3 * C + h * hs; // (T, 3C) this head's query rows
                head_rows(v, q0 + 2 * C, 3 * C, T, hs);
                float* a_bh = att + ((size_t)b * NH + h) * T * T;        // (T, T)
                for (int tq = 0; tq < T; tq += RQ) {
                    int rows = MIN(RQ, T - tq), lo[RQ], hi[RQ];
                    tile_dots(S, Tp, q0 + (size_t)tq * 3 * C, 3 * C, rows, kt, hs, tq + rows);
                    for (int r = 0; r < rows; r++) { // the softmax of row t over keys t2 <= t
                        int t = tq + r;
                        softmax_row(a_bh + (size_t)t * T, S + (size_t)r * Tp, t + 1, T, hb.scale);
                        lo[r] = 0, hi[r] = t + 1;
                    }
                    // out rows tq.. = att rows · values
                    tile_wsums(out + ((size_t)b * T + tq) * C + h * hs, C, a_bh + (size_t)tq * T, T, v, hs, rows, lo, hi, hs);
                }
            }
        free(hb.kt);
    }
    PROFILE_END(t0, "attention", "fwd", B * T, C, NH, 4.0 * B * C * T * (T + 1) / 2, 4.0 * (4.0 * B * T * C + (double)B * NH * T * T));
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH) {
    double t0 = profile_begin();
    // one (b, h) writes only head h's columns of dqkv: disjoint across tasks
#pragma omp parallel
    {
        HeadScratch hb;
        head_scratch_init(&hb, T, C, NH);
        int hs = hb.hs, Tp = hb.Tp;
        float *vt = hb.kt, *S = hb.S; // values transposed (hs, Tp), a tile's dout · v (RQ, Tp)
        float *k = hb.rows[0], *q = hb.rows[1], *d = hb.rows[2]; // (T, hs) each: keys, queries, output gradient
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                const float* a_bh = att + ((size_t)b * NH + h) * T * T; // (T, T)
                float* dpre = datt + ((size_t)b * NH + h) * T * T;      // (T, T) the gradient before the scaled dot product
                const float* q0 = qkv + (size_t)b * T * 3 * C + h * hs; // (T, 3C) this head's query rows
                float* dq0 = dqkv + (size_t)b * T * 3 * C + h * hs;     // (T, 3C) dq, then dk at + C, dv at + 2C
                int lo[RQ], hi[RQ];
                head_transposed(vt, qkv, b, h, 2 * C, T, Tp, C, hs);
                head_rows(k, q0 + C, 3 * C, T, hs);
                head_rows(q, q0, 3 * C, T, hs);
                head_rows(d, dout + (size_t)b * T * C + h * hs, C, T, hs);
                for (int tq = 0; tq < T; tq += RQ) { // query tiles: through out = att · v and the softmax; dq
                    int rows = MIN(RQ, T - tq);
                    tile_dots(S, Tp, d + (size_t)tq * hs, hs, rows, vt, hs, tq + rows);
                    for (int r = 0; r < rows; r++) {
                        int t = tq + r;
                        const float* a = a_bh + (size_t)t * T;
                        const float* s = S + (size_t)r * Tp;
                        float* dp = dpre + (size_t)t * T;
                        float dot = simd_row_dot(a, s, t + 1);
                        for (int t2 = 0; t2 <= t; t2++) dp[t2] = a[t2] * (s[t2] - dot) * hb.scale;
                        lo[r] = 0, hi[r] = t + 1;
                    }
                    tile_wsums(dq0 + (size_t)tq * 3 * C, 3 * C, dpre + (size_t)tq * T, T, k, hs, rows, lo, hi, hs);
                }
                for (int tk = 0; tk < T; tk += RQ) { // key tiles: dv and dk of keys tk.., sums over the queries t >= each key
                    int rows = MIN(RQ, T - tk);
                    for (int r = 0; r < rows; r++) { // column tk + r of att and of dpre as row r of wa and wd
                        int key = tk + r;
                        for (int t = key; t < T; t++) {
                            hb.wa[(size_t)r * Tp + t] = a_bh[(size_t)t * T + key];
                            hb.wd[(size_t)r * Tp + t] = dpre[(size_t)t * T + key];
                        }
                        lo[r] = key, hi[r] = T;
                    }
                    float* dk = dq0 + (size_t)tk * 3 * C + C;
                    tile_wsums(dk + C, 3 * C, hb.wa, Tp, d, hs, rows, lo, hi, hs);
                    tile_wsums(dk, 3 * C, hb.wd, Tp, q, hs, rows, lo, hi, hs);
                }
            }
        free(hb.kt);
    }
    PROFILE_END(t0, "attention", "bwd", B * T, C, NH, 8.0 * B * C * T * (T + 1) / 2, 4.0 * (7.0 * B * T * C + 3.0 * B * NH * T * T));
}
