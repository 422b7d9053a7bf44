// --partition auto's timed passes (see layer_costs.h), on the run's device with random tokens, and
// every stage's from the ranks that hold it.
#include "layer_costs.h"
#include <stdlib.h>
#include "llmc/common.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
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

void layer_costs_per_stage(const StageDevice* device, Comm* comm, const GPT2Config* cfg, int B, int T, LayerCosts* per_stage) {
    int P = comm->P, R = comm->world_size;
    // The others wait meanwhile, each wait allowed the passes' FLOPs at 10 GFLOP/s (the slowest
    // device this allows for) beyond --comm-timeout: 4 passes each of a layer, the embeddings and
    // the head, 6 FLOPs a parameter and token forward and backward
    double C = cfg->channels, layer_params = 12.0 * C * C + 13.0 * C, head_params = (double)cfg->padded_vocab_size * C;
    double flops = 4.0 * 6.0 * B * T * (3.0 * layer_params + 2.0 * head_params);
    comm_timeout_allow(comm, flops / 10e9, "a rank's timed passes for --partition auto");
    LayerCosts mine;
    int turns = comm_max(comm, comm->local_ranks);
    for (int turn = 0; turn < turns; turn++) {
        if (comm->local_rank == turn) layer_costs_measure(device, comm, cfg, B, T, 3, &mine);
        comm_barrier(comm);
    }
    comm_timeout_allow(comm, 0, NULL);
    double in[3] = {mine.layer, mine.embed, mine.head};
    double* all = (double*)malloc_check((size_t)R * 3 * sizeof(double)); // (R, 3)
    comm_allgather_double(comm, in, 3, all);
    for (int s = 0; s < P; s++) per_stage[s] = (LayerCosts){0.0, 0.0, 0.0};
    for (int r = 0; r < R; r++) { // world rank r holds stage r % P (comm_grid); replicas averaged
        LayerCosts* c = &per_stage[r % P];
        c->layer += all[3 * r] * P / R;
        c->embed += all[3 * r + 1] * P / R;
        c->head += all[3 * r + 2] * P / R;
    }
    free(all);
}
