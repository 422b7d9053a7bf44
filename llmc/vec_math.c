// exp and tanh over float arrays, vectorised (see vec_math.h). Written with the GCC vector types of
// simd.h, so they compile to the widest SIMD the -march has; every lane takes the same operations, so
// a result depends on the input alone. The polynomials' coefficients come from dev/fit_vec_math.py
// (minimax in the relative error).
#include "vec_math.h"
#include "simd.h"

typedef int vint __attribute__((vector_size(VL * sizeof(int))));

static inline vfloat splat(float c) { return (vfloat){0} + c; }
static inline vint spliti(int c) { return (vint){0} + c; }
static inline vfloat sel(vint m, vfloat a, vfloat b) { return (vfloat)(((vint)a & m) | ((vint)b & ~m)); } // m ? a : b per lane

// 2^k as a float, for k in [-126, 127]
static inline vfloat pow2i(vint k) { return (vfloat)((k + 127) << 23); }

// e^x = 2^k e^r: k = round(x / ln2), r = x - k ln2 (ln2 in two parts: k ln2_hi is exact for |k| < 2^9,
// so r is exact to a few ulp), |r| <= ln2 / 2, e^r = 1 + r + r^2 P(r) (P's relative error 4e-9); returns
// e^r, and k in *k. For |x| < 2^8
static inline __attribute__((always_inline)) vfloat exp_reduce(vfloat x, vint* k) {
    const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f, round = 12582912.0f; // 1.5 * 2^23
    vfloat kf = (x * splat(log2e) + splat(round)) - splat(round); // round(x / ln2), to even
    vfloat r = (x - kf * splat(ln2_hi)) - kf * splat(ln2_lo);
    vfloat p = splat(1.38794107e-3f);
    p = p * r + splat(8.36940575e-3f);
    p = p * r + splat(4.16672528e-2f);
    p = p * r + splat(1.66665152e-1f);
    p = p * r + splat(4.99999970e-1f);
    *k = __builtin_convertvector(kf, vint);
    // 1 + r rounded, and what that rounding lost (exact: Fast2Sum, |r| < 1), added back with r^2 P: one
    // rounding at the end where 1 + (r + r^2 P) would round twice (1 ulp off near ties)
    vfloat hi = splat(1.0f) + r;
    vfloat lo = (splat(1.0f) - hi) + r;
    return hi + (lo + (r * r) * p);
}

#define EXP_HI 89.0f   // e^89 overflows a float: the clamp still gives inf
#define EXP_LO -104.0f // e^-104 is below half the least subnormal: the clamp still gives 0

static inline __attribute__((always_inline)) vfloat expf_v(vfloat x) {
    vfloat xc = sel(x < splat(EXP_HI), x, splat(EXP_HI)); // +inf and NaN to EXP_HI; NaN is put back below
    xc = sel(xc > splat(EXP_LO), xc, splat(EXP_LO));
    vint k;
    vfloat p = exp_reduce(xc, &k);
    // 2^k in two factors, each a normal float for k in [-150, 129]: exact products except where the
    // result itself overflows or is subnormal, so it is rounded once there too
    vint k1 = k >> 1;
    vfloat y = p * pow2i(k1) * pow2i(k - k1);
    return sel(x == x, y, x + x); // NaN in, NaN out
}

#define TANH_SMALL 0.625f // below: the polynomial; the exponential form loses no accuracy above it
#define TANH_ARG_MAX 20.0f // 2|x| clamped here: tanh(10) is 1 to float precision, and e^20 is finite

// tanh: |x| + |x|^3 P(x^2) below TANH_SMALL (P fitted to (tanh x - x) / x^3: relative error 5e-9),
// 1 - 2 / (e^2|x| + 1) above; the sign put back (tanh is odd: -0 stays -0)
static inline __attribute__((always_inline)) vfloat tanhf_v(vfloat x) {
    vint sign = (vint)x & spliti((int)0x80000000);
    vfloat a = (vfloat)((vint)x ^ sign); // |x|
    vfloat z = a * a;
    vfloat p = splat(-5.69462543e-3f);
    p = p * z + splat(2.06286646e-2f);
    p = p * z + splat(-5.37360385e-2f);
    p = p * z + splat(1.33313894e-1f);
    p = p * z + splat(-3.33332807e-1f);
    vfloat small = a + a * z * p;
    vfloat y = a + a;
    y = sel(y < splat(TANH_ARG_MAX), y, splat(TANH_ARG_MAX)); // inf (and NaN) to the clamp; NaN is put back below
    vint k;
    vfloat e = exp_reduce(y, &k) * pow2i(k);
    vfloat big = splat(1.0f) - splat(2.0f) / (e + splat(1.0f));
    vfloat r = (vfloat)((vint)sel(a < splat(TANH_SMALL), small, big) | sign);
    return sel(x == x, r, x + x);
}

// out[i] = f(in[i]): whole vectors, then the tail through a padded one (lanes past n hold 0)
#define VEC_MAP(f, out, in, n)                                                       \
    do {                                                                             \
        long i = 0;                                                                  \
        for (; i + VL <= (n); i += VL) *(vfloat_u*)((out) + i) = f(*(const vfloat_u*)((in) + i)); \
        if (i < (n)) {                                                               \
            vfloat x = {0};                                                          \
            for (long j = i; j < (n); j++) x[j - i] = (in)[j];                       \
            vfloat r = f(x);                                                         \
            for (long j = i; j < (n); j++) (out)[j] = r[j - i];                      \
        }                                                                            \
    } while (0)

void expf_vec(float* out, const float* in, long n) { VEC_MAP(expf_v, out, in, n); }
void tanhf_vec(float* out, const float* in, long n) { VEC_MAP(tanhf_v, out, in, n); }
