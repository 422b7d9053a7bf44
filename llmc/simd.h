// The CPU's SIMD width as GCC vector types: VL floats per vector (16 with AVX-512, 8 with AVX, else 4),
// transposes, and a way to keep a product rounded. The matmul's micro-kernel, the kernels that
// vectorise across rows, keys or chunks, and the FMA-peak benchmark are written with these, so the
// compiler emits the widest instructions the -march allows.
#pragma once
#include <math.h>
#include <stddef.h>

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vfloat __attribute__((vector_size(VL * sizeof(float))));
typedef float vfloat_u __attribute__((vector_size(VL * sizeof(float)), aligned(4))); // unaligned access

typedef float v8f __attribute__((vector_size(32)));
typedef float v8f_u __attribute__((vector_size(32), aligned(4)));
typedef int v8i __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));

// a shuffle of two v8f by constant lanes (0-7 from a, 8-15 from b): GCC's __builtin_shuffle takes them
// as a vector, clang's __builtin_shufflevector as arguments
#if defined(__clang__)
#define SIMD_SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SIMD_SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif

// r[j][i] = old r[i][j]: three rounds of shuffles (unpack pairs, then quads, then 128-bit halves)
static inline void simd_transpose8(v8f r[8]) {
    v8f t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = SIMD_SHUFFLE8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);      // rows i, i+1 interleaved: columns 0,1 | 4,5
        t[i + 1] = SIMD_SHUFFLE8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15); // columns 2,3 | 6,7
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = SIMD_SHUFFLE8(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);          // column 0 | 4, rows i..i+3
        u[i + 1] = SIMD_SHUFFLE8(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);    // column 1 | 5
        u[i + 2] = SIMD_SHUFFLE8(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);  // column 2 | 6
        u[i + 3] = SIMD_SHUFFLE8(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15); // column 3 | 7
    }
    for (int j = 0; j < 4; j++) {
        r[j] = SIMD_SHUFFLE8(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        r[j + 4] = SIMD_SHUFFLE8(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

// dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols: whole 8 x 8 blocks in registers, the edges one by one
static inline void simd_transpose(float* restrict dst, int ldd, const float* restrict src, int lds, int rows, int cols) {
    int r8 = rows / 8 * 8, c8 = cols / 8 * 8;
    for (int r = 0; r < r8; r += 8)
        for (int c = 0; c < c8; c += 8) {
            v8f b[8];
            for (int i = 0; i < 8; i++) b[i] = *(const v8f_u*)(src + (size_t)(r + i) * lds + c);
            simd_transpose8(b);
            for (int j = 0; j < 8; j++) *(v8f_u*)(dst + (size_t)(c + j) * ldd + r) = b[j];
        }
    for (int r = 0; r < rows; r++)
        for (int c = r < r8 ? c8 : 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

// Σ_i x[r][i] in double over i < n (squares: Σ x[r][i]²) for the 8 rows x[r] = base + r ld, summed side by
// side in the lanes of one vector, each row in index order: bitwise each row's one-at-a-time sum (a
// float squared is exact in double, so fusing that product into the add rounds the same). A serial
// chain of adds is latency-bound; eight of them side by side are not. add (NULL or not): the rows
// summed are x = base + add, each x also stored to dst (which may be base) in the same pass.
static inline v8d simd_sum8_rows_of(float* dst, const float* base, const float* add, size_t ld, size_t n, int squares) {
    v8d acc = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f r[8];
        for (int j = 0; j < 8; j++) {
            r[j] = *(const v8f_u*)(base + (size_t)j * ld + i);
            if (add) {
                r[j] += *(const v8f_u*)(add + (size_t)j * ld + i);
                *(v8f_u*)(dst + (size_t)j * ld + i) = r[j];
            }
        }
        simd_transpose8(r); // row j now holds element i + j of every row
        for (int j = 0; j < 8; j++) {
            v8d d = __builtin_convertvector(r[j], v8d);
            acc += squares ? d * d : d;
        }
    }
    for (; i < n; i++) {
        v8d d;
        for (int j = 0; j < 8; j++) {
            float x = base[(size_t)j * ld + i];
            if (add) dst[(size_t)j * ld + i] = x = x + add[(size_t)j * ld + i];
            d[j] = x;
        }
        acc += squares ? d * d : d;
    }
    return acc;
}
static inline v8d simd_sum8_rows(const float* base, size_t ld, size_t n, int squares) { return simd_sum8_rows_of(NULL, base, NULL, ld, n, squares); }

// max over x[0..n): vector lanes keep running maxima that are then folded; the same value as a
// one-at-a-time scan (NaNs skipped alike) up to the sign of a zero maximum, which cannot change
// what it is used for (x - max and expf of it; a target's logit - max in the loss)
static inline float simd_row_max(const float* x, int n) {
    typedef int vint __attribute__((vector_size(VL * sizeof(int))));
    vfloat m = (vfloat){0} - INFINITY;
    int i = 0;
    for (; i + VL <= n; i += VL) {
        vfloat v = *(const vfloat_u*)(x + i);
        vint gt = v > m;
        m = (vfloat)(((vint)v & gt) | ((vint)m & ~gt));
    }
    float maxv = -INFINITY;
    for (int j = 0; j < VL; j++) maxv = m[j] > maxv ? m[j] : maxv;
    for (; i < n; i++) maxv = x[i] > maxv ? x[i] : maxv;
    return maxv;
}

// Σ x[i] y[i] over i < n (y NULL: Σ x[i]) in one fixed order, whatever the threads: lane j of a vector
// sums elements j, j + VL, ... of the whole vectors (FMA chains), the lanes are folded in order and
// the tail added one by one. Not a serial chain's rounding, but VL chains side by side are not
// latency-bound
static inline float simd_row_dot(const float* x, const float* y, int n) {
    vfloat acc = {0};
    int i = 0;
    for (; i + VL <= n; i += VL) acc += y ? *(const vfloat_u*)(x + i) * *(const vfloat_u*)(y + i) : *(const vfloat_u*)(x + i);
    float s = 0.0f;
    for (int j = 0; j < VL; j++) s += acc[j];
    for (; i < n; i++) s += y ? x[i] * y[i] : x[i];
    return s;
}

// x (a vector of products) stays rounded: the compiler cannot fuse it into the add that follows (FMA
// contraction), for sums that must add rounded products, as GCC's in-order vector reductions do.
// In a register where the CPU has one that holds it (a v8f needs AVX), else through memory
#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX__)
#define SIMD_ROUNDED(x) __asm__("" : "+v"(x))
#elif defined(__aarch64__)
#define SIMD_ROUNDED(x) __asm__("" : "+w"(x))
#else
#define SIMD_ROUNDED(x) __asm__("" : "+m"(x))
#endif
