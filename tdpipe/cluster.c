// The cluster cost model: hardware and model presets with their sources, one transformer layer
// under the roofline, and a layout's per-stage op times, messages, data-parallel average and memory.
#include "tdpipe/cluster.h"
#include "llmc/common.h"
#include "tdpipe/partition.h"
#include <math.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

// ---- presets ------------------------------------------------------------------------------------
static const ClusterHw hw_presets[] = {
    {
        .name = "dgx-a100",
        .gpu = {
            .peak_flops = 312e12, // A100 SXM dense bf16/fp16 tensor peak: NVIDIA A100 datasheet
            .hbm_bw = 2039e9,     // A100 80 GB HBM2e: NVIDIA A100 datasheet
            .hbm_bytes = 80e9,    // A100 80 GB: NVIDIA A100 datasheet (Megatron-LM SC21 ran on the 80 GB part). nvidia-smi
                                  // reports 81920 MiB (80 GiB, 7% more): kept at 80e9 so that the printed memory tables
                                  // stand; a layout needing 74.5-80 GiB is refused here though it would fit
            // the two efficiencies are this model's assumptions, not measured figures, one value each
            // for every configuration: mem_eff set beforehand (a streaming kernel at 0.85 of HBM moves
            // 1.73 TB/s), matmul_eff then chosen once as the value that minimises the largest error
            // over Megatron-LM's Table 1 as a whole (0.65: 203 TFLOP/s; README, "Reproducing the
            // TD-Pipe article", gives the rows and how the errors move with it)
            .matmul_eff = 0.65,
            .mem_eff = 0.85,
        },
        .node = {
            .gpus_per_node = 8,     // DGX A100: 8 GPUs on NVSwitch: NVIDIA A100 whitepaper
            .nvlink_bw = 216.5e9,   // NCCL all-reduce bus bandwidth in one DGX A100, measured 200-233 GB/s
                                    // (nccl-tests issues 149, 175, 178): the middle of that range; also
                                    // taken as the rate of a point-to-point copy between two GPUs
            .nvlink_lat = 2e-6,     // GPU peer-to-peer write latency, NVLink class: cuda-samples issue 230
        },
        .net = {
            .nics_per_node = 8, // 8 x HDR InfiniBand 200 Gb/s for compute per node: Megatron-LM SC21, section 5
            .nic_bw = 24e9,     // one HDR 200G card, achieved: NCCL issue 412 (maintainer)
            .nic_lat = 1e-6,    // InfiniBand small-message send latency (ib_send_lat RC, 32 B): perftest figures
        },
    },
};

static const ClusterModel model_presets[] = {
    // GPT-3 13B (Brown et al. 2020, arXiv 2005.14165, Table 2.1): 40 layers, 40 heads of 128, context
    // 2048; the table prints d_model 5140, which 40 heads do not divide: 40 x 128 = 5120 is used
    {.name = "gpt3-13b", .L = 40, .C = 5120, .NH = 40, .V = 50257, .T = 2048},
    // GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, context 2048
    {.name = "gpt3-175b", .L = 96, .C = 12288, .NH = 96, .V = 50257, .T = 2048},
    // Megatron-Turing NLG 530B (Smith et al. 2022, arXiv 2201.11990, section 3.1): 105 layers, hidden
    // 20480, 128 heads, sequence 2048, GPT-2's tokenizer
    {.name = "mtnlg-530b", .L = 105, .C = 20480, .NH = 128, .V = 50257, .T = 2048},
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

int cluster_hw_preset(const char* name, ClusterHw* hw) {
    for (int i = 0; i < N_OF(hw_presets); i++)
        if (name && strcmp(name, hw_presets[i].name) == 0) {
            *hw = hw_presets[i];
            return 0;
        }
    return -1;
}

const char* cluster_hw_names(void) { return "dgx-a100"; }

int cluster_model_preset(const char* name, ClusterModel* m) {
    for (int i = 0; i < N_OF(model_presets); i++)
        if (name && strcmp(name, model_presets[i].name) == 0) {
            *m = model_presets[i];
            return 0;
        }
    return -1;
}

double cluster_params(const ClusterModel* m) {
    double C = m->C;
    return m->L * (12.0 * C * C + 13.0 * C) + ((double)m->V + m->T) * C + 2.0 * C;
}

double cluster_step_flops(const ClusterModel* m, double B, int recompute) {
    double C = m->C, T = m->T, passes = recompute ? 4.0 : 3.0;
    return passes * 24.0 * B * T * m->L * C * C * (1.0 + T / (6.0 * C)) + 6.0 * B * T * C * m->V;
}

// ---- one layer under the roofline ----------------------------------------------------------------
typedef struct {
    double flops, time;
} Work;

// `batch` matmuls of (m x k) by (k x n), bf16 operands and result
static Work matmul(const ClusterGpu* g, double batch, double m, double n, double k) {
    double flops = 2.0 * batch * m * n * k, bytes = 2.0 * batch * (m * k + k * n + m * n);
    double t = fmax(flops / (g->peak_flops * g->matmul_eff), bytes / (g->hbm_bw * g->mem_eff));
    return (Work){flops, t};
}

static double stream(const ClusterGpu* g, double bytes) { return bytes / (g->hbm_bw * g->mem_eff); }

double cluster_ring_allreduce(double bytes, int g, double bw, double lat) {
    if (g <= 1) return 0.0;
    return 2.0 * (g - 1) / g * bytes / bw + 2.0 * (g - 1) * lat;
}

// the bandwidth (bytes/s) one GPU of a collective gets out of its node, when k of the group's
// GPUs share a node of gpus_per_node GPUs, every GPU of the node running a collective of its own
static double nic_share(const ClusterHw* hw, int k) {
    return hw->net.nic_bw * hw->net.nics_per_node * k / hw->node.gpus_per_node;
}

void cluster_layer(const ClusterHw* hw, const ClusterModel* m, int tp, int tp_cross_nodes, int b, ClusterLayer* out) {
    const ClusterGpu* g = &hw->gpu;
    double C = m->C, T = m->T, bt = (double)b * T, hd = C / m->NH, heads = (double)b * m->NH / tp;
    double E = heads * T * T; // attention scores per GPU
    // the six matmuls: (m, n, k); attention's two are batched over heads
    struct { double batch, m, n, k; int weights; } mm[6] = {
        {1, bt, 3 * C / tp, C, 1},  // QKV
        {heads, T, T, hd, 0},       // Q K^T
        {heads, T, hd, T, 0},       // softmax(.) V
        {1, bt, C, C / tp, 1},      // attention projection
        {1, bt, 4 * C / tp, C, 1},  // MLP up
        {1, bt, C, 4 * C / tp, 1},  // MLP down
    };
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 6; i++) {
        Work f = matmul(g, mm[i].batch, mm[i].m, mm[i].n, mm[i].k);
        out->flops_f += f.flops;
        out->f += f.time;
        // dX = dY W^T is (m x k) over n; dW = X^T dY is (k x n) over m. Attention has no weights:
        // both of its gradients (dQ and dK; dA and dV) are input gradients
        out->bi += matmul(g, mm[i].batch, mm[i].m, mm[i].k, mm[i].n).time;
        Work w = matmul(g, mm[i].batch, mm[i].k, mm[i].n, mm[i].m);
        if (mm[i].weights) out->bw += w.time;
        else out->bi += w.time;
    }
    // element-wise kernels, bf16 bytes moved. Without sequence parallelism LayerNorm, dropout and the
    // residual run on the full b T C on every TP rank (Megatron-LM 2021); the softmax and GeLU on 1/tp.
    double drop = m->dropout ? 1.0 : 0.0, x = bt * C, u = 4.0 * bt * C / tp;
    double f_bytes = 2 * 4 * x                   // two LayerNorms: read, write
                     + 4 * E + drop * 5 * E      // scale-mask-softmax; dropout on it (read, write, 1-byte mask)
                     + 2 * (6 + drop) * x        // two (dropout +) residual adds: read two, write one
                     + 4 * u;                    // bias + GeLU
    double b_bytes = 2 * 6 * x                   // LayerNorm backward: read x and dy, write dx
                     + 6 * E + drop * 5 * E      // softmax backward; dropout backward
                     + 2 * (4 + drop) * x        // residual (and dropout) backward
                     + 2 * 6 * x                 // the residual stream's two gradient sums
                     + 6 * u;                    // GeLU backward
    out->f += stream(g, f_bytes);
    out->bi += stream(g, b_bytes);
    // one all-reduce of the b T C bf16 activation among the tp ranks: NVLink inside a node, else the
    // node's network share (one GPU of the group per node)
    double bw = tp_cross_nodes ? nic_share(hw, 1) : hw->node.nvlink_bw;
    double lat = tp_cross_nodes ? hw->net.nic_lat : hw->node.nvlink_lat;
    out->ar = cluster_ring_allreduce(2.0 * x, tp, bw, lat);
    // activations a layer keeps for its backward, bytes: T b C (10 + 24 / tp + 5 NH T / (C tp))
    // (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2, tensor parallelism without sequence parallelism)
    out->act_bytes = T * b * C * (10.0 + 24.0 / tp + 5.0 * m->NH * T / (C * tp));
}

// ---- a layout's costs -----------------------------------------------------------------------------
void cluster_costs_free(ClusterCosts* c) {
    free(c->t_f), free(c->t_b), free(c->t_bi), free(c->t_bw), free(c->t_u);
    free(c->t_msg_f), free(c->t_msg_b), free(c->msg_cross), free(c->t_dp), free(c->dp_bytes), free(c->tp_comm);
    free(c->mem), free(c->mem_weights), free(c->mem_grads), free(c->mem_optim), free(c->mem_acts), free(c->mem_async);
    free(c->first), free(c->group);
    memset(c, 0, sizeof(*c));
}

static double* zeros(int n) { return (double*)calloc_check(n > 0 ? n : 1, sizeof(double)); }

static int check_layout(const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* y, int Q, char* err, size_t errlen) {
    int G = hw->node.gpus_per_node;
    if (m->L < 1 || m->C < 1 || m->NH < 1 || m->V < 1 || m->T < 1)
        return td_error(err, errlen, "the model needs --layers, --hidden, --heads, --vocab and --seq of at least 1 (got %d, %d, %d, %d, %d)",
                        m->L, m->C, m->NH, m->V, m->T);
    if (m->C % m->NH) return td_error(err, errlen, "--heads %d does not divide --hidden %d", m->NH, m->C);
    if (y->tp < 1 || y->P < 1 || y->D < 1) return td_error(err, errlen, "--tp, --pp and the data-parallel size must be at least 1 (got %d, %d, %d)", y->tp, y->P, y->D);
    if (m->NH % y->tp) return td_error(err, errlen, "--tp %d does not divide the model's %d heads (each TP rank holds whole heads)", y->tp, m->NH);
    if (y->tp > G || G % y->tp)
        return td_error(err, errlen, "--tp %d must divide the %d GPUs of a node (tensor parallelism stays inside a node)", y->tp, G);
    if (y->tp * y->P * y->D != y->gpus)
        return td_error(err, errlen, "--gpus %d is not --tp %d x --pp %d x data-parallel %d = %d", y->gpus, y->tp, y->P, y->D,
                        y->tp * y->P * y->D);
    if (y->P > m->L) return td_error(err, errlen, "--pp %d exceeds the model's %d layers (every stage needs at least one)", y->P, m->L);
    if (Q > m->L)
        return td_error(err, errlen, "--pp %d x --chunks %d = %d virtual stages exceed the model's %d layers", y->P, Q / y->P, Q, m->L);
    if (y->b < 1) return td_error(err, errlen, "--micro-batch must be at least 1 (got %d)", y->b);
    if (y->M < 1) return td_error(err, errlen, "the global batch gives %d micro-batches per replica: it needs at least 1", y->M);
    if (y->grad == CLUSTER_GRAD_INT8 && y->dp_algo == CLUSTER_DP_RING)
        return td_error(err, errlen, "--grad-quant int8 travels by two-shot (all-to-all, sum, all-gather), not by ring");
    if (y->speed)
        for (int s = 0; s < y->P; s++)
            if (!(y->speed[s] > 0 && y->speed[s] <= 1e6)) return td_error(err, errlen, "stage %d has speed %g: speeds must be in (0, 1e6]", s, y->speed[s]);
    return 0;
}

// time of one pipeline message of `bytes` between two stages' GPUs, inside a node or across
static double message_time(const ClusterHw* hw, const ClusterLayout* y, double bytes, int cross) {
    int tp = y->tp;
    if (!cross) return bytes / hw->node.nvlink_bw + hw->node.nvlink_lat;
    if (y->scatter_gather && tp > 1) // each TP rank sends 1/tp over its NIC, then the receivers all-gather
        return bytes / tp / nic_share(hw, 1) + hw->net.nic_lat + (tp - 1.0) / tp * bytes / hw->node.nvlink_bw +
               (tp - 1) * hw->node.nvlink_lat;
    return bytes / nic_share(hw, 1) + hw->net.nic_lat;
}

// the node group of each stage: replicas first, ranks tp (d + D s) fill nodes with replicas, so
// stages share a node only when tp D is below a node (-1: never); stages first, the layout's groups
// or partition_place's over the message times, on the fewest nodes a pipeline needs
static int stage_groups(const ClusterHw* hw, const ClusterLayout* y, double msg_bytes, int* group, char* err, size_t errlen) {
    int G = hw->node.gpus_per_node, P = y->P;
    if (y->placement == PLACE_REPLICAS_FIRST) {
        for (int s = 0; s < P; s++) group[s] = y->tp * y->D >= G ? -1 : s * y->tp * y->D / G;
        return 0;
    }
    if (y->stage_group) {
        memcpy(group, y->stage_group, (size_t)P * sizeof(int));
        return 0;
    }
    double* near = zeros(P - 1); // (P-1)
    double* far = zeros(P - 1);  // (P-1)
    for (int b = 0; b + 1 < P; b++) near[b] = message_time(hw, y, msg_bytes, 0), far[b] = message_time(hw, y, msg_bytes, 1);
    int per = G / y->tp;
    PlacementCost pc = {.P = P, .per_group = per, .groups = (P + per - 1) / per, .near = near, .far = far};
    int rc = partition_place(group, &pc, NULL, err, errlen);
    free(near);
    free(far);
    return rc;
}

// bytes each GPU sends in the average of n gradient values, and its time, over the D replicas
static double dp_average(const ClusterHw* hw, const ClusterLayout* y, double n, double* bytes_sent) {
    int D = y->D, G = hw->node.gpus_per_node;
    *bytes_sent = 0.0;
    if (D <= 1) return 0.0;
    // k replicas of the group per node: replicas first, consecutive replicas share nodes; stages
    // first, whole pipelines do when one is smaller than a node
    int k = y->placement == PLACE_REPLICAS_FIRST ? G / y->tp : (y->P * y->tp <= G ? G / (y->P * y->tp) : 1);
    if (k > D) k = D;
    if (k < 1) k = 1;
    int across = k < D;
    double lat = across ? hw->net.nic_lat : hw->node.nvlink_lat;
    if (y->grad != CLUSTER_GRAD_INT8) {
        double per = y->grad == CLUSTER_GRAD_BF16 ? 2.0 : 4.0, bytes = n * per;
        double bw = across ? fmin(hw->node.nvlink_bw, nic_share(hw, k)) : hw->node.nvlink_bw;
        *bytes_sent = 2.0 * (D - 1) / D * bytes;
        if (y->dp_algo == CLUSTER_DP_RING) return cluster_ring_allreduce(bytes, D, bw, lat);
    }
    // two-shot: an all-to-all of shards (reduce-scatter), then an all-gather, each (D - 1) / D of the
    // gradient; off-node shares leave through the GPU's share of the NICs, the rest over NVLink.
    // int8 (issue 11's format): per block of 256 values, 256 int8 and one fp32 scale
    double per = y->grad == CLUSTER_GRAD_INT8 ? 1.0 + 4.0 / 256.0 : y->grad == CLUSTER_GRAD_BF16 ? 2.0 : 4.0;
    double bytes = n * per, off = (double)(D - k) / D * bytes, on = (double)(k - 1) / D * bytes;
    double phase = fmax(off / nic_share(hw, 1), on / hw->node.nvlink_bw) + (D - 1) * lat;
    *bytes_sent = 2.0 * (D - 1) / D * bytes;
    double t = 2.0 * phase;
    // int8's passes over memory: quantize (read fp32, write int8), the shard owner's dequantize-sum and
    // requantize, the final dequantize (read int8, write fp32): about 12 bytes per value
    if (y->grad == CLUSTER_GRAD_INT8) t += stream(&hw->gpu, 12.0 * n);
    return t;
}

int cluster_costs(ClusterCosts* c, const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* y, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    int chunks = y->chunks > 1 ? y->chunks : 1, P = y->P, Q = P * chunks, tp = y->tp;
    if (check_layout(hw, m, y, Q, err, errlen)) return -1;
    // the schedule: its shape's refusals, and what each stage holds in flight
    Schedule sch;
    ScheduleShape shape = {.kind = y->kind, .P = P, .M = y->M, .W = y->W, .chunks = y->chunks};
    shape.n_steps = schedule_shape_steady_steps(&shape); // (a tdpipe window's stashes and ring as a long run holds them)
    if (schedule_build(&sch, &shape, err, errlen)) return -1;
    ClusterLayer lay;
    cluster_layer(hw, m, tp, 0, y->b, &lay);
    const ClusterGpu* g = &hw->gpu;
    double C = m->C, T = m->T, bt = (double)y->b * T, x = bt * C;
    // the head's matmul (C x V/tp) forward and both gradients, and the fused cross-entropy's passes
    Work head = matmul(g, 1, bt, m->V / (double)tp, C);
    double head_b = matmul(g, 1, bt, C, m->V / (double)tp).time, head_w = matmul(g, 1, C, m->V / (double)tp, bt).time;
    double logits = bt * m->V / tp;
    double ce_f = stream(g, 2.0 * logits + 4.0 * x), ce_b = stream(g, 4.0 * logits + 6.0 * x); // + final LayerNorm
    double embed_f = stream(g, 6.0 * x), embed_b = stream(g, 6.0 * x); // gather / scatter-add of b T rows
    double per_layer_time = lay.f + lay.bi + lay.bw + (4 + 2 * y->recompute) * lay.ar + (y->recompute ? lay.f : 0.0);
    Partition part;
    int rc = 0;
    if (y->first) {
        for (int q = 0; q < Q; q++)
            if (y->first[q + 1] <= y->first[q] || y->first[0] != 0 || y->first[Q] != m->L) rc = -1;
        if (rc) td_error(err, errlen, "the layer split must give every virtual stage at least one layer and add up to %d", m->L);
        else {
            partition_uniform(&part, m->L, Q, NULL, 0); // only its array's shape; overwritten
            memcpy(part.first, y->first, (size_t)(Q + 1) * sizeof(int));
        }
    } else if (y->balance) { // the trainer's DP over this model's layer times and the stages' speeds
        double* lt = zeros(m->L); // (L)
        double* sp = zeros(Q);    // (Q) speed of each virtual stage's GPUs
        for (int l = 0; l < m->L; l++) lt[l] = per_layer_time;
        for (int q = 0; q < Q; q++) sp[q] = y->speed ? y->speed[q % P] : 1.0;
        PartitionCost pc = {.L = m->L, .P = Q, .layer_time = lt, .first_time = embed_f + embed_b + lay.ar,
                            .last_time = head.time + head_b + head_w + ce_f + ce_b + lay.ar, .speed = sp};
        rc = partition_solve(&part, &pc, err, errlen);
        free(lt);
        free(sp);
    } else rc = partition_uniform(&part, m->L, Q, err, errlen);
    if (rc) {
        schedule_free(&sch);
        return -1;
    }
    c->P = P;
    c->Q = Q;
    c->params = cluster_params(m);
    c->t_f = zeros(Q), c->t_b = zeros(Q), c->t_bi = zeros(Q), c->t_bw = zeros(Q), c->tp_comm = zeros(Q);
    c->t_u = zeros(P), c->t_dp = zeros(P), c->dp_bytes = zeros(P);
    c->t_msg_f = zeros(Q - 1), c->t_msg_b = zeros(Q - 1), c->msg_cross = (int*)calloc_check(Q, sizeof(int));
    c->mem = zeros(P), c->mem_weights = zeros(P), c->mem_grads = zeros(P), c->mem_optim = zeros(P);
    c->mem_acts = zeros(P), c->mem_async = zeros(P);
    double* params_stage = zeros(P); // (P) parameters per GPU of each stage
    int* max_layers = (int*)calloc_check(P, sizeof(int)); // (P) most layers of a chunk on the stage
    double layer_params = (12.0 * C * C + 13.0 * C) / tp;
    for (int q = 0; q < Q; q++) {
        int s = q % P, n = part.first[q + 1] - part.first[q];
        double speed = y->speed ? y->speed[s] : 1.0;
        double f = n * (lay.f + 2 * lay.ar), bi = n * (lay.bi + 2 * lay.ar), bw = n * lay.bw;
        double tpc = n * 4 * lay.ar;
        if (y->recompute) bi += f, tpc += n * 2 * lay.ar; // the forward again, all-reduces included
        if (q == 0) f += embed_f + lay.ar, bw += embed_b; // vocabulary-parallel embedding: one all-reduce
        if (q == Q - 1) f += head.time + ce_f, bi += head_b + ce_b + lay.ar, bw += head_w;
        c->t_f[q] = f / speed;
        c->t_bi[q] = bi / speed;
        c->t_bw[q] = bw / speed;
        c->t_b[q] = (bi + bw) / speed;
        c->tp_comm[q] = tpc / speed;
        params_stage[s] += n * layer_params;
        if (n > max_layers[s]) max_layers[s] = n;
    }
    params_stage[0] += (double)m->V * C / tp + T * C;  // word (vocabulary-parallel) and position embeddings
    if (P > 1) params_stage[P - 1] += (double)m->V * C / tp + 2 * C; // the last stage's copy of the tied embedding, final LN
    else params_stage[0] += 2 * C;
    // pipeline messages: b T C bf16 each way; NVLink when both ends share a node
    c->msg_bytes = 2.0 * x;
    double gbytes = y->grad == CLUSTER_GRAD_BF16 ? 2.0 : 4.0; // gradients accumulate in fp32, or in bf16
    ClusterLayout placed = *y; // the layout with its placement decided
    if (y->placement_auto) {
        // GPUs numbered as the launcher fills nodes, one TP group per (stage, replica); a step sends each
        // micro-batch's activation and gradient over every virtual boundary: s -> s + 1 once per chunk,
        // the wrap from the last stage to the first chunks - 1 times, and there too the tied
        // embedding's gradient (Megatron-LM all-reduces it between the end stages)
        int R = P * y->D, G = hw->node.gpus_per_node;
        int* host = (int*)calloc_check((size_t)R, sizeof(int)); // (R)
        double* dp = zeros(P); // (P)
        for (int i = 0; i < R; i++) host[i] = i * tp / G;
        double per = y->grad == CLUSTER_GRAD_INT8 ? 1.0 + 4.0 / 256.0 : gbytes;
        for (int s = 0; s < P; s++) dp[s] = y->D > 1 ? 2.0 * params_stage[s] * per / y->D : 0.0;
        double per_boundary = 2.0 * y->M * c->msg_bytes;
        PlacementTraffic t = {P, y->D, host, per_boundary * chunks, per_boundary * (chunks - 1) + 2.0 * m->V * C / tp * gbytes, dp};
        placed.placement = placement_choose(&t, c->place_cross);
        free(host);
        free(dp);
    }
    c->placement = placed.placement;
    y = &placed;
    c->group = (int*)calloc_check(P, sizeof(int));
    if (stage_groups(hw, y, c->msg_bytes, c->group, err, errlen)) {
        free(params_stage), free(max_layers), partition_free(&part), schedule_free(&sch), cluster_costs_free(c);
        return -1;
    }
    for (int q = 0; q + 1 < Q; q++) {
        int a = c->group[q % P], bnode = c->group[(q + 1) % P];
        c->msg_cross[q] = a < 0 || bnode < 0 || a != bnode;
        c->t_msg_f[q] = c->t_msg_b[q] = message_time(hw, y, c->msg_bytes, c->msg_cross[q]);
    }
    for (int s = 0; s < P; s++) {
        double p = params_stage[s], speed = y->speed ? y->speed[s] : 1.0, shard = y->zero1 ? p / y->D : p;
        // data-parallel average; with ZeRO-1 a reduce-scatter and an all-gather of the new bf16 weights,
        // about the same bytes as one all-reduce
        c->t_dp[s] = dp_average(hw, y, p, &c->dp_bytes[s]);
        if (y->no_dp) c->t_dp[s] = 0.0;
        // AdamW on this GPU's shard (read gradient, master, m, v; write master, m, v, bf16 weights:
        // 30 bytes a value) and the global norm's read of the whole gradient
        c->t_u[s] = (stream(g, 30.0 * shard) + stream(g, gbytes * p)) / speed;
        int slots, stashes, rings;
        schedule_stage_limits(&sch, s, &slots, &stashes, &rings);
        c->mem_weights[s] = 2.0 * p;
        c->mem_grads[s] = gbytes * p;
        c->mem_optim[s] = 12.0 * shard;
        double per_layer = y->recompute ? 2.0 * x : lay.act_bytes; // recomputation keeps each layer's input only
        c->mem_acts[s] = (double)slots * max_layers[s] * per_layer + (y->recompute ? lay.act_bytes : 0.0);
        if (s == P - 1) c->mem_acts[s] += 6.0 * logits; // bf16 logits and their fp32 softmax, one micro-batch
        c->mem_async[s] = stashes * 2.0 * p + (rings > 1 ? rings - 1 : 0) * gbytes * p;
        c->mem[s] = c->mem_weights[s] + c->mem_grads[s] + c->mem_optim[s] + c->mem_acts[s] + c->mem_async[s];
        if (p > c->params_gpu_max) c->params_gpu_max = p;
    }
    free(params_stage);
    free(max_layers);
    c->first = (int*)malloc_check((size_t)(Q + 1) * sizeof(int));
    memcpy(c->first, part.first, (size_t)(Q + 1) * sizeof(int));
    partition_free(&part);
    schedule_free(&sch);
    for (int s = 0; s < P; s++)
        if (c->mem[s] > g->hbm_bytes) {
            double need = c->mem[s] / GIB, have = g->hbm_bytes / GIB;
            cluster_costs_free(c);
            return td_error(err, errlen,
                            "stage %d needs %.1f GiB per GPU (weights, gradients, optimizer state, activations), the GPU has %.1f GiB", s,
                            need, have);
        }
    return 0;
}
