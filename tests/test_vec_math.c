// The vectorised math against libm and double precision: tanhf_vec and expf_vec bitwise libm's
// tanhf and expf on a sample of float bit patterns (every one: build/dev/check_vec_math), array
// lengths that leave every tail; GELU forward and backward against the formula in double, 1 and 2
// threads bitwise equal.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/expf_vec.h"
#include "llmc/ops.h"
#include "llmc/rng.h"
#include "llmc/tanhf_vec.h"
#include "tests/test.h"

// every stride-th float bit pattern, plus the ranges GELU and softmax meet densely
static void check_against_libm(const char* name, void (*vec)(float*, const float*, long), float (*ref)(float)) {
    enum { N = 1 << 20 };
    float* x = (float*)malloc(N * sizeof(float));
    float* got = (float*)malloc(N * sizeof(float));
    long bad = 0, total = 0;
    for (uint64_t start = 0; start < (1ull << 32); start += (uint64_t)N * 4099) {
        for (int i = 0; i < N; i++) {
            uint32_t u = (uint32_t)(start + (uint64_t)i * 4099);
            memcpy(&x[i], &u, 4);
        }
        vec(got, x, N);
        for (int i = 0; i < N; i++) {
            float want = ref(x[i]);
            bad += memcmp(&want, &got[i], 4) != 0;
        }
        total += N;
    }
    for (int i = 0; i < N; i++) x[i] = -40.0f + 80.0f * i / N; // [-40, 40): both tanh's and exp's working range
    vec(got, x, N);
    for (int i = 0; i < N; i++) {
        float want = ref(x[i]);
        bad += memcmp(&want, &got[i], 4) != 0;
    }
    total += N;
    CHECK(bad == 0, "%s: bitwise libm's on %ld inputs (%ld differ)", name, total, bad);
    int tails_ok = 1; // every length up to three vectors: the tails
    for (long n = 1; n <= 48; n++) {
        vec(got, x + 1000, n);
        for (long i = 0; i < n; i++) tails_ok &= ref(x[1000 + i]) == got[i];
    }
    CHECK(tails_ok, "%s: every array length 1..48 (the vector tails)", name);
    free(x);
    free(got);
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
    check_against_libm("tanhf_vec", tanhf_vec, tanhf);
    check_against_libm("expf_vec", expf_vec, expf);
    check_gelu(1000003);
    check_gelu(77);
    omp_set_num_threads(2);
    return test_summary();
}
