// Staleness compensation's elementwise kernels on the CPU (see compensation.h).
#include "compensation.h"
#include <math.h>

void compensation_predict(float* out, const float* w, const float* m, const float* v, size_t n, float lr_sum, float beta1, float beta2,
                   float eps, float weight_decay, int t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float mhat = m[i] / bc1, vhat = v[i] / bc2;
        out[i] = w[i] - lr_sum * (mhat / (sqrtf(vhat) + eps) + weight_decay * w[i]);
    }
}

void compensation_curvature(float* out, const float* w, const float* w_prev, const float* u_prev, size_t n, float c) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = fmaf(c, (w[i] - w_prev[i]) - u_prev[i], out[i]);
}

void compensation_track(float* w_prev, float* u_prev, const float* w, size_t n, int first) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        if (!first) u_prev[i] = w[i] - w_prev[i];
        w_prev[i] = w[i];
    }
}

void compensation_dc_accumulate(float* acc, float* a, float* b, const float* g, const float* w, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float gg = g[i] * g[i];
        acc[i] += g[i];
        a[i] += gg;
        b[i] += gg * w[i];
    }
}

void compensation_grad_add(float* acc, const float* g, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) acc[i] += g[i];
}

void compensation_dc_correct(float* acc, float* a, float* b, const float* w_now, size_t n, float lambda) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        acc[i] += lambda * (w_now[i] * a[i] - b[i]);
        a[i] = 0.0f;
        b[i] = 0.0f;
    }
}
