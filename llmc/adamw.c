// AdamW and the learning-rate schedule (see adamw.h).
#include "adamw.h"
#include <math.h>
#include <omp.h>

// Elements [i0, i1); zero_grads: the gradient is zeroed as it is read. The arithmetic is spelled out
// with fmaf exactly where GCC's default contraction (-ffp-contract=fast) fused the textbook expression
//     mi = beta1 m + (1 - beta1) g,  vi = beta2 v + (1 - beta2) g g,
//     p -= lr (mi / bc1 / (sqrt(vi / bc2) + eps) + wd p)
// when it was compiled as a scalar loop, so that this vectorised loop rounds every element exactly as
// that loop did (results are bitwise those of the earlier releases); no other product here feeds a
// sum, so no other contraction can happen. sqrtf is IEEE's correctly rounded square root in scalar
// and vector form alike; with errno semantics GCC keeps the loop scalar (a negative argument must set
// errno; vi / bc2 never is negative), so the Makefile builds this file with -fno-math-errno.
static void adamw_range(float* restrict params, float* restrict grads, float* restrict m, float* restrict v, size_t i0, size_t i1, float lr,
                        float beta1, float beta2, float bc1, float bc2, float eps, float weight_decay, float grad_scale, int zero_grads) {
    float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
    for (size_t i = i0; i < i1; i++) {
        float g = grads[i] * grad_scale;
        if (zero_grads) grads[i] = 0.0f;
        float mi = fmaf(beta1, m[i], c1 * g);
        float vi = fmaf(beta2, v[i], c2 * g * g);
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float p = params[i];
        params[i] = fmaf(-lr, fmaf(weight_decay, p, mhat / (sqrtf(vhat) + eps)), p);
    }
}

// the n elements split into one contiguous range per thread
static void adamw_sweep(float* params, float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int t, float grad_scale, int zero_grads) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), th = omp_get_thread_num();
        size_t i0 = n / nt * th + (th < (int)(n % nt) ? th : n % nt), i1 = i0 + n / nt + (th < (int)(n % nt));
        adamw_range(params, grads, m, v, i0, i1, lr, beta1, beta2, bc1, bc2, eps, weight_decay, grad_scale, zero_grads);
    }
}

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int t, float grad_scale) {
    adamw_sweep(params, (float*)grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale, 0);
}

void adamw_update_zero(float* params, float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t, float grad_scale) {
    adamw_sweep(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale, 1);
}

float adamw_lr_schedule(int step, int total, int warmup, float lr, float final_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    float lr_min = lr * final_frac;
    if (total <= warmup + 1) return lr;
    float ratio = (float)(step - warmup) / (float)(total - 1 - warmup); // 0 at the end of warmup, 1 at the last step
    if (ratio > 1.0f) ratio = 1.0f;
    float coeff = 0.5f * (1.0f + cosf(3.14159265358979f * ratio));
    return lr_min + coeff * (lr - lr_min);
}
