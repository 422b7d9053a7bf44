// The optimiser: AdamW (decoupled weight decay, bias correction) and the learning-rate schedule
// (linear warmup, then cosine decay to a floor).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr;           // peak learning rate (-l)
    float beta1, beta2; // 0.9, 0.95
    float eps;          // 1e-8
    float weight_decay; // (-c), applied to 2-D matrices only, as GPT-2 and llm.c's CUDA trainer do
} AdamWConfig;

// one AdamW step on n elements: params (n), grads (n) read, m (n) and v (n) updated in place.
// t is the 1-based step for bias correction; grads are multiplied by grad_scale (clipping) first;
// weight_decay is the effective decay for this tensor (0 for biases and LayerNorm).
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int t, float grad_scale);
// the same step, and grads (n) zeroed in the same pass over memory (the next step accumulates into them)
void adamw_update_zero(float* params, float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t, float grad_scale);

// learning rate at 0-based step: linear warmup over `warmup` steps, then cosine decay from lr to
// lr * final_frac at the last step (total steps `total`)
float adamw_lr_schedule(int step, int total, int warmup, float lr, float final_frac);

#ifdef __cplusplus
}
#endif
