// A cluster configuration through the simulator: the cost model's op times, messages and
// data-parallel average run on the same schedule lists and TD-Pipe policy as the trainer's, giving
// step time, throughput, FLOP/s per GPU, MFU, bubble and memory.
#pragma once
#include <stddef.h>
#include "tdpipe/cluster.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double step_s;          // steady time of one step (between consecutive updates), mean over seeds
    double samples_per_s;   // sequences per second: D M b / step_s
    double tokens_per_s;
    double tflops_per_gpu;  // Megatron-LM's FLOPs (cluster_step_flops, recomputation counted) / step / GPU, in 1e12
    double hfu;             // tflops_per_gpu over the GPU's peak
    double mfu;             // 6 N FLOPs per token (N = cluster_params) / (GPUs x peak)
    double bubble;          // 1 - compute time / (stages x step time) over the steady steps, mean over stages
    double mem_gib_per_gpu; // the fullest stage's bytes per GPU / 2^30
    double mem_async_gib;   // of which TD-Pipe's stashes and extra gradient slots on that stage
    int staleness;          // the largest staleness any forward ran with
} ClusterResult;

// Simulates n_steps steps (at least 3; the first and last fill and drain) `seeds` times with jitter
// CV beta (seeds 1..seeds; one run when beta = 0). costs: when not NULL, filled (free it with
// cluster_costs_free). Returns 0, or -1 with cluster_costs' or the simulator's message.
int cluster_simulate(const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* lay, double beta, int seeds,
                     int n_steps, ClusterResult* r, ClusterCosts* costs, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
