// AdamW and the learning-rate schedule (see adamw.h).
#include "adamw.h"
#include <math.h>

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, float grad_scale) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
    }
}

float lr_schedule(int step, int total, int warmup, float lr, float final_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    float lr_min = lr * final_frac;
    if (total <= warmup + 1) return lr;
    float ratio = (float)(step - warmup) / (float)(total - 1 - warmup); // 0 at the end of warmup, 1 at the last step
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));
    return lr_min + coeff * (lr - lr_min);
}
