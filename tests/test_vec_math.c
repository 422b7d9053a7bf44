// The vectorised math (llmc/vec_math.c) against double precision: expf_vec and tanhf_vec within their
// ulp bounds of exp and tanh on a sample of float bit patterns (every one: build/dev/check_vec_math),
// their special values, and array lengths that leave every tail; GELU forward and backward against
// the formula in double, 1 and 2 threads bitwise equal.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/ops.h"
#include "llmc/rng.h"
#include "llmc/vec_math.h"
#include "tests/test.h"

enum { SAMPLE = 1 << 20, DENSE = 1 << 20 };

// every 4099th float bit pattern (SAMPLE of them), then [-40, 40) in DENSE steps (the range GELU and
// softmax meet densely); malloc'd, SAMPLE + DENSE floats
static float* test_inputs(void) {
    float* x = (float*)malloc((SAMPLE + DENSE) * sizeof(float));
    for (long i = 0; i < SAMPLE; i++) {
        uint32_t u = (uint32_t)(i * 4099);
        memcpy(&x[i], &u, 4);
    }
    for (long i = 0; i < DENSE; i++) x[SAMPLE + i] = -40.0f + 80.0f * i / DENSE;
    return x;
}

// vec over test_inputs within bound ulps of exact, and every array length up to three vectors (the
// tails, from the dense inputs) giving the whole array's result for each input
static void check_accuracy(const char* name, void (*vec)(float*, const float*, long), double (*exact)(double), double bound) {
    float* x = test_inputs();
    float* got = (float*)malloc((SAMPLE + DENSE) * sizeof(float));
    vec(got, x, SAMPLE + DENSE);
    double worst = 0.0;
    for (long i = 0; i < SAMPLE + DENSE; i++) {
        double e = td_ulp_error(got[i], exact((double)x[i]));
        worst = e > worst ? e : worst;
    }
    // the bound: every float measured (AVX-512 with FMA; dev/check_vec_math): see README
    CHECK(worst <= bound, "%s: within %.1f ulp of the exact value on %d inputs (worst %.3f)", name, bound, SAMPLE + DENSE, worst);
    float short_out[48];
    int same = 1;
    for (long n = 1; n <= 48; n++) {
        vec(short_out, x + SAMPLE + 1000, n);
        same &= !memcmp(short_out, got + SAMPLE + 1000, n * sizeof(float));
    }
    CHECK(same, "%s: every array length 1..48 (the vector tails) gives the whole array's results", name);
    free(x);
    free(got);
}

static void check_expf(void) {
    check_accuracy("expf_vec", expf_vec, exp, EXPF_VEC_MAX_ULP);
    // the edges: 1 at +-0, inf and 0 at the infinities and past overflow and underflow, NaN through,
    // a subnormal result as libm rounds it
    float sp[8] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 89.0f, -104.0f, -100.0f}, out[8];
    expf_vec(out, sp, 8);
    CHECK(out[0] == 1.0f && out[1] == 1.0f, "expf_vec: e^+-0 = 1");
    CHECK(out[2] == INFINITY && out[5] == INFINITY && out[3] == 0.0f && out[6] == 0.0f, "expf_vec: inf at +inf and 89, 0 at -inf and -104");
    CHECK(isnan(out[4]), "expf_vec: NaN gives NaN");
    CHECK(out[7] == expf(-100.0f) && out[7] > 0.0f, "expf_vec: e^-100, a subnormal, as libm's (%a)", out[7]);
}

static void check_tanhf(void) {
    check_accuracy("tanhf_vec", tanhf_vec, tanh, TANHF_VEC_MAX_ULP);
    // the edges: signed zeros kept, +-1 at the infinities and far out, NaN through, tiny x itself
    float sp[8] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-30f, 88.0f}, out[8];
    tanhf_vec(out, sp, 8);
    CHECK(out[0] == 0.0f && !signbit(out[0]) && out[1] == 0.0f && signbit(out[1]), "tanhf_vec: tanh(+0) = +0, tanh(-0) = -0");
    CHECK(out[2] == 1.0f && out[3] == -1.0f && out[7] == 1.0f, "tanhf_vec: +-inf give +-1, 88 gives 1");
    CHECK(isnan(out[4]), "tanhf_vec: NaN gives NaN");
    CHECK(out[5] == sp[5] && out[6] == sp[6], "tanhf_vec: a tiny or subnormal x gives x");
}

static void check_gelu(long N) {
    float* x = (float*)malloc(N * sizeof(float));
    float* dout = (float*)malloc(N * sizeof(float));
    Rng r;
    rng_init(&r, 11);
    for (long i = 0; i < N; i++) {
        x[i] = 3.0f * rng_normal(&r);
        dout[i] = rng_normal(&r);
    }
    float *out[2], *dinp[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        out[t] = (float*)malloc(N * sizeof(float));
        dinp[t] = (float*)malloc(N * sizeof(float));
        for (long i = 0; i < N; i++) dinp[t][i] = NAN; // overwritten
        gelu_forward(out[t], x, N);
        gelu_backward(dinp[t], x, dout, N);
    }
    // errors relative to each formula's magnitude with every term taken positive (1 + th and 1 - th^2
    // cancel where |x| is large: float rounding is relative to the terms, not to the difference)
    double worst_f = 0.0, worst_b = 0.0, k = sqrt(2.0 / M_PI);
    for (long i = 0; i < N; i++) {
        double v = x[i], u = k * (v + 0.044715 * v * v * v), th = tanh(u);
        double f = 0.5 * v * (1.0 + th), mag_f = 0.5 * fabs(v) * (1.0 + fabs(th));
        double slope = 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * v * v);
        double mag_b = (0.5 * (1.0 + fabs(th)) + 0.5 * fabs(v) * (1.0 + th * th) * k * (1.0 + 3.0 * 0.044715 * v * v)) * fabs(dout[i]);
        double g = (0.5 * (1.0 + th) + slope) * dout[i];
        double ef = fabs(out[0][i] - f) / (mag_f + 1e-30), eb = fabs(dinp[0][i] - g) / (mag_b + 1e-30);
        if (ef > worst_f) worst_f = ef;
        if (eb > worst_b) worst_b = eb;
    }
    CHECK(worst_f < 1e-6, "gelu forward N %ld: within 1e-6 of double, relative to the terms' size (worst %.2g)", N, worst_f);
    CHECK(worst_b < 1e-6, "gelu backward N %ld: within 1e-6 of double, relative to the terms' size (worst %.2g)", N, worst_b);
    CHECK(!memcmp(out[0], out[1], N * 4) && !memcmp(dinp[0], dinp[1], N * 4), "gelu N %ld: 1 and 2 threads bitwise equal", N);
    for (int t = 0; t < 2; t++) {
        free(out[t]);
        free(dinp[t]);
    }
    free(x);
    free(dout);
}

int main(void) {
    check_expf();
    check_tanhf();
    check_gelu(1000003);
    check_gelu(77);
    omp_set_num_threads(2);
    return test_summary();
}
