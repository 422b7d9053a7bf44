// Elementwise kernels of staleness compensation (the CPU reference; llmc/compensation.cuh mirrors
// them): weights extrapolated along AdamW's update direction (weight prediction) and along the
// change between the last two updates (its second order), DC-ASGD's accumulators and first-order
// correction, and a micro-batch's gradient added in on its own.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// out (n) = w - lr_sum * (mhat / (sqrt(vhat) + eps) + weight_decay * w), mhat = m / (1 - beta1^t),
// vhat = v / (1 - beta2^t): the weights lr_sum's worth of AdamW steps ahead along the direction the
// moments of t >= 1 updates give (as adamw_update computes one step, without a new gradient)
void compensation_predict(float* out, const float* w, const float* m, const float* v, size_t n, float lr_sum, float beta1, float beta2,
                   float eps, float weight_decay, int t);

// second-order weight prediction: out (n) += c * ((w - w_prev) - u_prev), the change between the last
// two updates (w - w_prev and u_prev = w_prev - w_prev2) times c, added to compensation_predict's result
void compensation_curvature(float* out, const float* w, const float* w_prev, const float* u_prev, size_t n, float c);
// the trajectory that compensation_curvature reads, before an update of the weights w (n): first (the first
// update it sees) w_prev = w; later u_prev = w - w_prev, then w_prev = w
void compensation_track(float* w_prev, float* u_prev, const float* w, size_t n, int first);

// one micro-batch's gradient g (n) into the step's: acc += g, a += g * g, b += g * g * w, where w (n)
// are the weights the micro-batch was computed with
void compensation_dc_accumulate(float* acc, float* a, float* b, const float* g, const float* w, size_t n);
// a micro-batch's gradient g (n), computed alone, into the step's: acc += g
void compensation_grad_add(float* acc, const float* g, size_t n);
// DC-ASGD (Zheng et al. 2017) summed over the step's micro-batches: acc += lambda * (w_now * a - b)
// = sum_i lambda g_i^2 (w_now - w_i); then a = b = 0
void compensation_dc_correct(float* acc, float* a, float* b, const float* w_now, size_t n, float lambda);

#ifdef __cplusplus
}
#endif
