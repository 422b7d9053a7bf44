// tanhf over arrays, vectorised (see tanhf_vec.h): an odd polynomial below |x| = 0.625, above it
// 1 - 2 / (e^2|x| + 1) with e^y from a Cody-Waite reduction and a polynomial. Written with the GCC
// vector types of simd.h, so it compiles to the widest SIMD the -march has; every lane takes the same
// operations, so a result depends on the input alone (not on the array's length, alignment or
// threads). The coefficients come from dev/fit_vec_math.py (minimax in the relative error).
#include "tanhf_vec.h"
#include "simd.h"

typedef int vint __attribute__((vector_size(VL * sizeof(int))));

static inline vfloat splat(float c) { return (vfloat){0} + c; }
static inline vfloat sel(vint m, vfloat a, vfloat b) { return (vfloat)(((vint)a & m) | ((vint)b & ~m)); } // m ? a : b per lane

#define TANH_SMALL 0.625f // below: the polynomial; the exponential form loses no accuracy above it
#define EXP_ARG_MAX 20.0f // 2|x| clamped here: tanh(10) is 1 to float precision, and e^20 is finite

// e^y for y in [0, EXP_ARG_MAX]: y = k ln2 + r (ln2 in two parts, so r is exact to a few ulp), |r| <=
// ln2 / 2, e^r a degree-6 polynomial (relative error 4e-9), 2^k added to the exponent bits
static inline __attribute__((always_inline)) vfloat exp_reduced(vfloat y) {
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f, round = 12582912.0f; // 1.5 * 2^23
    vfloat kf = (y * splat(log2e) + splat(round)) - splat(round); // round(y / ln2)
    vfloat r = (y - kf * splat(ln2_hi)) - kf * splat(ln2_lo);
    vfloat p = splat(1.38794107e-3f); // e^r = 1 + r + r^2 P(r), P fitted to (e^r - 1 - r) / r^2
    p = p * r + splat(8.36940575e-3f);
    p = p * r + splat(4.16672528e-2f);
    p = p * r + splat(1.66665152e-1f);
    p = p * r + splat(4.99999970e-1f);
    p = splat(1.0f) + (r + (r * r) * p);
    vint k = __builtin_convertvector(kf, vint);
    return (vfloat)((vint)p + (k << 23));
}

static inline __attribute__((always_inline)) vfloat tanhf_v(vfloat x) {
    vint sign = (vint)x & ((vint){0} + (int)0x80000000); // (splat(-0.0f) would be +0: 0 + -0 rounds to +0)
    vfloat a = (vfloat)((vint)x ^ sign); // |x|
    // |x| < TANH_SMALL: |x| + |x|^3 P(x^2), P fitted to (tanh x - x) / x^3 (relative error 5e-9)
    vfloat z = a * a;
    vfloat p = splat(-5.69462543e-3f);
    p = p * z + splat(2.06286646e-2f);
    p = p * z + splat(-5.37360385e-2f);
    p = p * z + splat(1.33313894e-1f);
    p = p * z + splat(-3.33332807e-1f);
    vfloat small = a + a * z * p;
    // above: 1 - 2 / (e^2|x| + 1)
    vfloat y = a + a;
    y = sel(y < splat(EXP_ARG_MAX), y, splat(EXP_ARG_MAX)); // inf (and NaN) to the clamp; NaN is put back below
    vfloat big = splat(1.0f) - splat(2.0f) / (exp_reduced(y) + splat(1.0f));
    vfloat r = (vfloat)((vint)sel(a < splat(TANH_SMALL), small, big) | sign); // tanh is odd: -0 stays -0
    return sel(x == x, r, x + x); // NaN in, NaN out
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
