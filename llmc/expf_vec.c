// expf over arrays, vectorised (see expf_vec.h). Each lane takes the steps of glibc's expf (its
// flt-32/e_expf.c: exp(x) = 2^(k/32) 2^(r/32) with k = round(32 x / ln 2), 2^(k/32) from a 32-entry
// table, 2^(r/32) a cubic in double precision, rounded to float once): the same table, coefficients
// and operations in the same order. glibc builds that source twice and picks at run time: with FMA
// where the CPU has it (every product that feeds a sum fused) and without. This file is built with
// the compiler's default contraction, which fuses exactly those products where the -march has FMA
// and none where it has not, so it matches the variant libm picks on the same machine. Arguments
// outside the main path (|x| >= 88: overflow, underflow, inf, NaN) go to libm's expf itself.
#include "expf_vec.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef double v8d_e __attribute__((vector_size(64)));
typedef int64_t v8l __attribute__((vector_size(64)));
typedef uint64_t v8ul __attribute__((vector_size(64))); // for the exponent's add and shift: wrapping, as glibc's uint64_t
typedef float v8f_e __attribute__((vector_size(32)));
typedef float v8f_eu __attribute__((vector_size(32), aligned(4)));
typedef int v8i_e __attribute__((vector_size(32)));

// 2^(i/32) as doubles, each with i << 47 subtracted so that adding k << 47 scales it by 2^(k div 32)
static const uint64_t EXP2_TAB[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b, 0x3fef54873168b9aa,
    0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74,
    0x3feea11473eb0187, 0x3feea589994cce13, 0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
static const double INVLN2_32 = 0x1.71547652b82fep+5;                                      // 32 / ln 2
static const double SHIFT = 0x1.8p+52;                                                     // rounds to an integer, kept in the low bits
static const double C0 = 0x1.c6af84b912394p-20, C1 = 0x1.ebfce50fac4f3p-13, C2 = 0x1.62e42ff0c52d6p-6; // 2^(r/32) - 1 ~ r (C2 + r (C1 + r C0))

static inline v8d_e splatd(double c) { return (v8d_e){0} + c; }

// EXP2_TAB[i] for lanes i in [0, 32): two 16-entry shuffles (a permute of two registers each) and a select
static inline v8l table_lookup(v8l i) {
    const v8l t0 = {(int64_t)EXP2_TAB[0], (int64_t)EXP2_TAB[1], (int64_t)EXP2_TAB[2], (int64_t)EXP2_TAB[3],
                    (int64_t)EXP2_TAB[4], (int64_t)EXP2_TAB[5], (int64_t)EXP2_TAB[6], (int64_t)EXP2_TAB[7]};
    const v8l t1 = {(int64_t)EXP2_TAB[8], (int64_t)EXP2_TAB[9], (int64_t)EXP2_TAB[10], (int64_t)EXP2_TAB[11],
                    (int64_t)EXP2_TAB[12], (int64_t)EXP2_TAB[13], (int64_t)EXP2_TAB[14], (int64_t)EXP2_TAB[15]};
    const v8l t2 = {(int64_t)EXP2_TAB[16], (int64_t)EXP2_TAB[17], (int64_t)EXP2_TAB[18], (int64_t)EXP2_TAB[19],
                    (int64_t)EXP2_TAB[20], (int64_t)EXP2_TAB[21], (int64_t)EXP2_TAB[22], (int64_t)EXP2_TAB[23]};
    const v8l t3 = {(int64_t)EXP2_TAB[24], (int64_t)EXP2_TAB[25], (int64_t)EXP2_TAB[26], (int64_t)EXP2_TAB[27],
                    (int64_t)EXP2_TAB[28], (int64_t)EXP2_TAB[29], (int64_t)EXP2_TAB[30], (int64_t)EXP2_TAB[31]};
    v8l lo = __builtin_shuffle(t0, t1, i & 15), hi = __builtin_shuffle(t2, t3, i & 15);
    v8l upper = (i & 16) != 0; // all ones where i >= 16
    return (hi & upper) | (lo & ~upper);
}

// eight lanes of the main path (|x| < 88)
static v8f_e expf8(v8f_e x) {
    v8d_e xd = __builtin_convertvector(x, v8d_e);
    v8d_e kd = splatd(INVLN2_32) * xd + splatd(SHIFT); // round(32 x / ln 2) in the low bits
    v8l ki = (v8l)kd;
    kd -= splatd(SHIFT);
    v8d_e r = splatd(INVLN2_32) * xd - kd;
    v8l t = (v8l)((v8ul)table_lookup(ki & 31) + ((v8ul)ki << 47)); // unsigned: the sum wraps (2^k's exponent bits)
    v8d_e s = (v8d_e)t;
    v8d_e z = splatd(C0) * r + splatd(C1);
    v8d_e r2 = r * r;
    v8d_e y = splatd(C2) * r + splatd(1.0);
    y = z * r2 + y;
    y = y * s;
    return __builtin_convertvector(y, v8f_e);
}

void expf_vec(float* out, const float* in, long n) {
    for (long i = 0; i < n; i += 8) {
        int m = n - i < 8 ? (int)(n - i) : 8;
        v8f_e x = {0};
        if (m == 8) x = *(const v8f_eu*)(in + i);
        else memcpy(&x, in + i, sizeof(float) * m);
        v8i_e special = (((v8i_e)x >> 20) & 0x7ff) > 0x42a; // |x| >= 88, inf, NaN
        v8f_e y = expf8(x);
        if (m == 8) *(v8f_eu*)(out + i) = y;
        else memcpy(out + i, &y, sizeof(float) * m);
        int any = 0;
        for (int j = 0; j < 8; j++) any |= special[j];
        if (any)
            for (int j = 0; j < m; j++)
                if (special[j]) out[i + j] = expf(x[j]);
    }
}
