// tanhf over arrays, vectorised (see tanhf_vec.h). Every lane takes the steps of fdlibm's scalar
// tanhf and expm1f (the float versions in glibc's libm, from Sun's fdlibm: Copyright (C) 1993 by Sun
// Microsystems, Inc.; "Permission to use, copy, modify, and distribute this software is freely
// granted, provided that this notice is preserved"): the same operations in the same order, each
// branch computed for all lanes and the taken one selected, so each result is bitwise the scalar
// one. That needs each multiply and add rounded on its own, as the library's SSE code does: the
// Makefile builds this file with -ffp-contract=off.
#include "tanhf_vec.h"
#include "simd.h"

typedef int vint __attribute__((vector_size(VL * sizeof(int))));
typedef unsigned vuint __attribute__((vector_size(VL * sizeof(int))));

static inline vfloat splat(float c) { return (vfloat){0} + c; }
static inline vint spliti(int c) { return (vint){0} + c; }
static inline vfloat sel(vint m, vfloat a, vfloat b) { return (vfloat)(((vint)a & m) | ((vint)b & ~m)); } // m ? a : b per lane
static inline vint seli(vint m, vint a, vint b) { return (a & m) | (b & ~m); }

// fdlibm's expm1f on the arguments tanhf gives it: 2|x| in [2, 44) and -2|x| in (-2, 0), so never
// its overflow or -1 limits (|x| >= 27 ln2 with a negative x, or |x| >= 88.7)
static inline __attribute__((always_inline)) vfloat expm1f_v(vfloat x) {
    const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f, invln2 = 1.4426950216e+00f;
    const float Q1 = -3.3333335072e-02f, Q2 = 1.5873016091e-03f, Q3 = -7.9365076090e-05f, Q4 = 4.0082177293e-06f, Q5 = -2.0109921195e-07f;
    vint hx = (vint)x & 0x7fffffff;
    vint neg = (vint)x < spliti(0);
    // argument reduction x = k ln2 + xr (+ c, the rounding error), for |x| > ln2 / 2
    vint reduce = hx > spliti(0x3eb17218), near = hx < spliti(0x3F851592); // near: |x| < 1.5 ln2, k = +-1
    vfloat hi_near = sel(neg, x + splat(ln2_hi), x - splat(ln2_hi));
    vfloat lo_near = sel(neg, splat(-ln2_lo), splat(ln2_lo));
    vint k_far = __builtin_convertvector(splat(invln2) * x + sel(neg, splat(-0.5f), splat(0.5f)), vint); // truncates, as C's (int)
    vfloat t_far = __builtin_convertvector(k_far, vfloat);
    vfloat hi_far = x - t_far * splat(ln2_hi), lo_far = t_far * splat(ln2_lo);
    vfloat hi = sel(near, hi_near, hi_far), lo = sel(near, lo_near, lo_far);
    vfloat xr = hi - lo;
    vfloat c = (hi - xr) - lo;
    vint k = seli(near, seli(neg, spliti(-1), spliti(1)), k_far);
    xr = sel(reduce, xr, x);
    c = sel(reduce, c, splat(0.0f));
    k = seli(reduce, k, spliti(0));
    // xr in the primary range
    vfloat hfx = splat(0.5f) * xr;
    vfloat hxs = xr * hfx;
    vfloat r1 = splat(1.0f) + hxs * (splat(Q1) + hxs * (splat(Q2) + hxs * (splat(Q3) + hxs * (splat(Q4) + hxs * splat(Q5)))));
    vfloat t = splat(3.0f) - r1 * hfx;
    vfloat e = hxs * ((r1 - t) / (splat(6.0f) - xr * t));
    vfloat r_k0 = xr - (xr * e - hxs);
    vfloat ek = (xr * (e - c) - c) - hxs;
    vfloat r_km1 = splat(0.5f) * (xr - ek) - splat(0.5f);
    vfloat r_k1 = sel(xr < splat(-0.25f), splat(-2.0f) * (ek - (xr + splat(0.5f))), splat(1.0f) + splat(2.0f) * (xr - ek));
    vuint kexp = (vuint)k << 23; // k added to an exponent
    vfloat r_wide = (vfloat)((vuint)(splat(1.0f) - (ek - xr)) + kexp) - splat(1.0f); // k <= -2 or k > 56
    vint k_lo = seli(k < spliti(0), spliti(0), seli(k > spliti(22), spliti(22), k)); // shift counts kept in range
    vfloat t_lo = (vfloat)(spliti(0x3f800000) - (spliti(0x1000000) >> k_lo)); // 1 - 2^-k
    vfloat r_lo = (vfloat)((vuint)(t_lo - (ek - xr)) + kexp);                // 2 <= k < 23
    vint k_hi = seli(k < spliti(23), spliti(23), seli(k > spliti(56), spliti(56), k));
    vfloat t_hi = (vfloat)((spliti(0x7f) - k_hi) << 23); // 2^-k
    vfloat r_hi = (vfloat)((vuint)((xr - (ek + t_hi)) + splat(1.0f)) + kexp); // 23 <= k <= 56
    vfloat r = sel(k < spliti(23), r_lo, r_hi);
    r = sel((k <= spliti(-2)) | (k > spliti(56)), r_wide, r);
    r = sel(k == spliti(1), r_k1, r);
    r = sel(k == spliti(-1), r_km1, r);
    r = sel(k == spliti(0), r_k0, r);
    return sel(~reduce & (hx < spliti(0x33000000)), x, r); // |x| < 2^-25: x itself
}

static inline __attribute__((always_inline)) vfloat tanhf_v(vfloat x) { // inlined: its constants leave the loop
    vint jx = (vint)x, ix = jx & 0x7fffffff;
    vfloat ax = (vfloat)ix;
    vint big = ix >= spliti(0x3f800000); // |x| >= 1
    vfloat t = expm1f_v(sel(big, ax + ax, splat(-2.0f) * ax));
    // 2 / (t + 2) where |x| >= 1, -t / (t + 2) below: one division with the numerator chosen per lane
    // (each lane still rounds the quotient its branch rounds; a division costs several multiplies)
    vfloat q = sel(big, splat(2.0f), -t) / (t + splat(2.0f));
    vfloat z = sel(big, splat(1.0f) - q, q);
    z = sel(ix >= spliti(0x41b00000), splat(1.0f), z); // |x| >= 22: 1 - tiny, which rounds to 1
    vfloat r = sel(jx < spliti(0), -z, z);
    r = sel(ix < spliti(0x24000000), x * (splat(1.0f) + x), r); // |x| < 2^-55 (and 0)
    // fdlibm returns 1/x +- 1 for inf and NaN: +-1 for +-inf, which r already holds (the |x| >= 22
    // lane), and for a NaN the NaN quieted, which x + 1 gives as 1/x + 1 does, without a division
    return sel(ix > spliti(0x7f800000), x + splat(1.0f), r);
}

void tanhf_vec(float* out, const float* in, long n) {
    long i = 0;
    for (; i + VL <= n; i += VL) *(vfloat_u*)(out + i) = tanhf_v(*(const vfloat_u*)(in + i));
    if (i < n) { // the tail through a padded vector
        vfloat x = {0};
        for (long j = i; j < n; j++) x[j - i] = in[j];
        vfloat r = tanhf_v(x);
        for (long j = i; j < n; j++) out[j] = r[j - i];
    }
}
