// The cluster cost model: a GPU, a node, a network, a GPT shape and a parallel layout in (plain
// data); each (virtual) stage's F / B / BI / BW / U times, the pipeline's message times, the
// data-parallel gradient average and the memory per GPU out, for the simulator to run schedules on.
#pragma once
#include <stddef.h>
#include "tdpipe/placement.h"
#include "tdpipe/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- hardware -----------------------------------------------------------------------------------
typedef struct {
    double peak_flops; // dense bf16 tensor-core FLOP/s
    double hbm_bw;     // bytes/s
    double hbm_bytes;  // memory per GPU
    double matmul_eff; // fraction of peak_flops a matmul reaches when it is compute-bound
    double mem_eff;    // fraction of hbm_bw a streaming (element-wise, memory-bound) kernel reaches
} ClusterGpu;

typedef struct {
    int gpus_per_node;
    double nvlink_bw;  // bytes/s per GPU that a collective reaches inside the node (NCCL bus bandwidth)
    double nvlink_lat; // s per hop
} ClusterNode;

typedef struct {
    int nics_per_node;
    double nic_bw;  // bytes/s one NIC reaches, one direction
    double nic_lat; // s per message
} ClusterNet;

typedef struct {
    const char* name;
    ClusterGpu gpu;
    ClusterNode node;
    ClusterNet net;
} ClusterHw;

// "dgx-a100" (the figures with their sources in cluster.c); returns 0, or -1 for an unknown name
int cluster_hw_preset(const char* name, ClusterHw* hw);
const char* cluster_hw_names(void); // "dgx-a100": the names cluster_hw_preset knows, for --help

// ---- model --------------------------------------------------------------------------------------
typedef struct {
    const char* name;
    int L, C, NH, V, T; // layers, channels, heads, vocabulary, sequence length
    int dropout;        // 1: attention and hidden dropout kernels run (Megatron-LM's default); 0: none (GPT-2 here)
} ClusterModel;

// "gpt3-13b", "gpt3-175b", "mtnlg-530b" (shapes with their sources in cluster.c); 0 or -1
int cluster_model_preset(const char* name, ClusterModel* m);
// parameters: L (12 C^2 + 13 C) + (V + T) C + 2 C (Megatron-LM's count, Narayanan et al. 2021 Eq. 2, tied head)
double cluster_params(const ClusterModel* m);
// Megatron-LM's FLOPs of a step of B sequences (Narayanan et al. 2021 Eq. 3): every matmul, the
// forward counted again when activations are recomputed: (3 or 4) 24 B T L C^2 (1 + T / (6 C)) + 6 B T C V
double cluster_step_flops(const ClusterModel* m, double B, int recompute);

// ---- layout -------------------------------------------------------------------------------------
typedef enum { CLUSTER_GRAD_FP32, CLUSTER_GRAD_BF16, CLUSTER_GRAD_INT8 } ClusterGradFormat;
typedef enum { CLUSTER_DP_RING, CLUSTER_DP_TWO_SHOT } ClusterDpAlgo;
// where ranks go, tensor-parallel ranks always adjacent: replicas first (Megatron-LM's order: a
// node holds replicas of one stage, pipeline messages cross nodes) or stages first (a node holds
// consecutive stages of one pipeline, grouped by stage_group; the data-parallel average crosses nodes)

typedef struct {
    int gpus;            // N = tp * P * D
    int tp, P, D;        // tensor-parallel size, pipeline stages, data-parallel replicas
    int b;               // micro-batch size (sequences)
    int M;               // micro-batches per step per replica
    int recompute;       // 1: each layer's forward runs again before its backward (only layer inputs are kept)
    SchedKind kind;
    int chunks;          // interleaved: model chunks per stage (0 = 1)
    int W;               // tdpipe: the asynchronous window
    ClusterGradFormat grad;
    ClusterDpAlgo dp_algo;
    int dp_overlap;      // 1: the average streams beside the step's last backward (buckets); 0: after it
    int zero1;           // 1: optimizer state (fp32 master, AdamW m, v) sharded over the D replicas
    int scatter_gather;  // 1: a message across nodes leaves from every TP rank in 1/tp shares, then an
                         // NVLink all-gather (Megatron-LM's optimisation); 0: every TP rank sends it all
    Placement placement;    // which consecutive GPUs (TP groups) hold what (placement.h)
    int placement_auto;     // 1: placement_choose's, by the bytes a step between nodes (placement is ignored)
    const int* stage_group; // (P) stages first: the node group of each stage (non-decreasing, at most
                            // gpus_per_node / tp stages a group); NULL: partition_place's, from the
                            // message times inside and across nodes, on the fewest nodes
    const int* first;       // (P*chunks + 1) layers of each virtual stage; NULL: by `balance`
    int balance;            // without `first`: 1, partition_solve's split over this model's layer times
                            // and the stages' speeds; 0, partition_uniform's (Megatron-LM's even split)
    const double* speed;    // (P) relative speed of each stage's GPUs (1 = hw's); NULL: all 1
    int no_dp;              // 1: the data-parallel average takes no time (to see what it costs otherwise)
    int early_dx;           // 1: a full backward sends its input gradient upstream once its input-gradient
                            // half is done (tdpipe's executor); 0: after the whole backward (Megatron-LM)
} ClusterLayout;

// ---- what the model computes --------------------------------------------------------------------
typedef struct {
    int P, Q;            // stages, virtual stages (P * chunks)
    double* t_f;         // (Q) forward of one micro-batch on each virtual stage, s
    double* t_b;         // (Q) its full backward (with the recomputed forward when recompute is on)
    double* t_bi;        // (Q) zero-bubble split: input-gradient part (with the recomputation)
    double* t_bw;        // (Q) weight-gradient part
    double* t_u;         // (P) optimizer update of each stage
    double* t_msg_f;     // activation from virtual stage q to q+1 on its link
    double* t_msg_b;     // gradient from q+1 to q
    int* msg_cross;      // 1 when the boundary after q crosses nodes
    double* t_dp;        // (P) data-parallel gradient average of each stage per step
    double* dp_bytes;    // (P) bytes each GPU sends for that average
    double* tp_comm;     // (Q) of t_f + t_b: time in tensor-parallel all-reduces
    double msg_bytes;    // bytes of one pipeline message (activation or gradient: b T C bf16)
    double* mem;         // (P) bytes per GPU of each stage: all of the below
    double* mem_weights; // (P) bf16 weights
    double* mem_grads;   // (P) gradient accumulation (fp32; bf16 with CLUSTER_GRAD_BF16)
    double* mem_optim;   // (P) fp32 master weights and AdamW m, v (divided by D with ZeRO-1)
    double* mem_acts;    // (P) activations of the micro-batches in flight, and one layer's working set
    double* mem_async;   // (P) TD-Pipe's extra: weight stashes and gradient-ring slots beyond one
    int* first;          // (Q+1) the layer split used
    int* group;          // (P) the node group of each stage (-1: replicas first, no two stages share one)
    Placement placement; // the layout used (the layout's, or --placement auto's choice)
    double place_cross[2]; // auto: bytes a step between nodes under each layout (indexed by Placement), else 0
    double params;       // the model's parameters
    double params_gpu_max; // the largest stage's parameters per GPU
} ClusterCosts;

// Checks the configuration and fills costs (free with cluster_costs_free). Refuses, with one message
// naming the flag and the problem: tp not dividing the heads or larger than a node, P > L (or P *
// chunks > L), tp * P * D != gpus, b or M < 1, a schedule the shape refuses, int8 with the ring,
// memory over the GPU's (naming the stage and both figures). Returns 0 or -1.
int cluster_costs(ClusterCosts* c, const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* lay, char* err,
                  size_t errlen);
void cluster_costs_free(ClusterCosts* c);

// one transformer layer's work on one GPU for one micro-batch (b sequences of T, tp-way split):
// matmul FLOPs, and the time of each part under the roofline of hw (each matmul takes the longer of
// its FLOPs at matmul_eff and its bytes at mem_eff; element-wise kernels their bytes)
typedef struct {
    double flops_f;    // forward matmul FLOPs: (24 b T C^2 + 4 b T^2 C) / tp
    double f, bi, bw;  // forward; input-gradient backward; weight-gradient backward (s, compute only)
    double ar;         // one tensor-parallel all-reduce of b T C bf16 (s); 2 a forward, 2 a backward
    double act_bytes;  // activations kept for the backward without recomputation (Korthikanti et al.)
} ClusterLayer;
void cluster_layer(const ClusterHw* hw, const ClusterModel* m, int tp, int tp_cross_nodes, int b, ClusterLayer* out);

// time of an all-reduce of `bytes` per GPU over g GPUs by ring, at bus bandwidth bw and latency lat per hop
double cluster_ring_allreduce(double bytes, int g, double bw, double lat);

#ifdef __cplusplus
}
#endif
