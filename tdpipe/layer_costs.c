// --partition auto's timed passes (see profile.h), on the run's device with random tokens.
#include "layer_costs.h"
#include <stdlib.h>
#include "llmc/common.h"
#include "llmc/rng.h"
#include "tdpipe/stage.h"

// median seconds of forward + backward of one micro-batch through a one-layer stage of range r on
// the device; each pass ends when the device has run it (stage_finish), not when it is enqueued
static double time_stage(const StageDevice* device, void* comm, const GPT2Config* one, const float* full, GPT2Range r, int B, int T,
                         int reps) {
    Stage s;
    stage_create(&s, device, &(StageInit){.cfg = one, .range = r, .B = B, .T = T, .full = full, .comm = comm});
    stage_reserve(&s, 1, 1, 1, 0);
    Rng rng;
    rng_init(&rng, 11);
    for (int i = 0; i < B * T; i++) {
        stage_inputs(&s, 0)[i] = (int)rng_below(&rng, one->vocab_size);
        stage_targets(&s, 0)[i] = (int)rng_below(&rng, one->vocab_size);
    }
    double* t = (double*)malloc_check((reps + 1) * sizeof(double));
    for (int i = 0; i <= reps; i++) { // pass 0 warms up (first touch of the buffers) and is left out
        Op f = {.kind = OP_F, .step = 0, .mb = 0}, b = {.kind = OP_B, .step = 0, .mb = 0};
        stage_finish(&s);
        double t0 = now_seconds();
        stage_forward(&s, &f, 0, r.has_head);
        stage_backward(&s, &b, 0, 1.0f / (B * T));
        stage_finish(&s);
        t[i] = now_seconds() - t0;
        stage_zero_grad(&s, 0);
    }
    double med = td_median(t + 1, reps);
    free(t);
    stage_destroy(&s);
    return med;
}

void layer_costs_measure(const StageDevice* device, void* comm, const GPT2Config* cfg, int B, int T, int reps, LayerCosts* out) {
    GPT2Config one = *cfg;
    one.num_layers = 1;
    GPT2Range all = {0, 1, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    float* full = (float*)malloc_check(gpt2_param_sizes(&one, &all, sizes) * sizeof(float));
    gpt2_init_full(&one, full, 42);
    double layer = time_stage(device, comm, &one, full, (GPT2Range){0, 1, 0, 0}, B, T, reps);
    double with_embed = time_stage(device, comm, &one, full, (GPT2Range){0, 1, 1, 0}, B, T, reps);
    double with_head = time_stage(device, comm, &one, full, (GPT2Range){0, 1, 0, 1}, B, T, reps);
    free(full);
    out->layer = layer;
    out->embed = with_embed > layer ? with_embed - layer : 0.0;
    out->head = with_head > layer ? with_head - layer : 0.0;
}
