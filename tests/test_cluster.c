// Tests of tdpipe/cluster and cluster_sim: FLOPs, bytes and memory of two small shapes against
// figures worked out by hand, the roofline's compute-bound limit, monotonicity in bandwidth and
// size, every refusal, the presets' parameter counts, Megatron-LM's Eq. 3 against the summed matmuls.
#include "tdpipe/cluster_sim.h"
#include "tests/test.h"
#include <math.h>
#include <string.h>

static ClusterHw hw_a100(void) {
    ClusterHw hw;
    cluster_hw_preset("dgx-a100", &hw);
    return hw;
}

// a layout of one stage, one replica, no tensor parallelism, 1f1b (the simplest list)
static ClusterLayout one_gpu(int b, int M) {
    return (ClusterLayout){.gpus = 1, .tp = 1, .P = 1, .D = 1, .b = b, .M = M, .kind = SCHED_1F1B, .scatter_gather = 1};
}

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fabs(b); }

// shape A: L 2, C 64, NH 4, V 128, T 16; shape B: L 3, C 96, NH 6, V 200, T 32
static void test_hand_figures(void) {
    ClusterHw hw = hw_a100();
    ClusterModel a = {.name = "A", .L = 2, .C = 64, .NH = 4, .V = 128, .T = 16};
    ClusterModel bm = {.name = "B", .L = 3, .C = 96, .NH = 6, .V = 200, .T = 32};
    // parameters: L (12 C^2 + 13 C) + (V + T) C + 2 C
    // A: 2 (49152 + 832) + 144 * 64 + 128 = 109312; B: 3 (110592 + 1248) + 232 * 96 + 192 = 357984
    CHECK(cluster_params(&a) == 109312.0 && cluster_params(&bm) == 357984.0, "parameters by hand: A 109312, B 357984 (got %.0f, %.0f)",
          cluster_params(&a), cluster_params(&bm));
    // one layer's forward matmul FLOPs, (24 b T C^2 + 4 b T^2 C) / tp:
    // A, b 2, tp 1: 24*32*4096 + 4*2*256*64 = 3145728 + 131072 = 3276800; tp 2: 1638400
    // B, b 1, tp 3: (24*32*9216 + 4*1024*96) / 3 = (7077888 + 393216) / 3 = 2490368
    ClusterLayer la, la2, lb;
    cluster_layer(&hw, &a, 1, 0, 2, &la);
    cluster_layer(&hw, &a, 2, 0, 2, &la2);
    cluster_layer(&hw, &bm, 3, 0, 1, &lb);
    CHECK(la.flops_f == 3276800.0 && la2.flops_f == 1638400.0 && lb.flops_f == 2490368.0,
          "layer forward FLOPs by hand: 3276800, 1638400 (tp 2), 2490368 (got %.0f, %.0f, %.0f)", la.flops_f, la2.flops_f, lb.flops_f);
    // Eq. 3 over a step of B sequences equals (passes) x L x the layer's forward FLOPs x B / b + 6 B T C V
    double eq3 = cluster_step_flops(&a, 8, 1), summed = 4.0 * a.L * la.flops_f * 8 / 2 + 6.0 * 8 * a.T * a.C * a.V;
    double eq3n = cluster_step_flops(&bm, 4, 0), summedn = 3.0 * bm.L * lb.flops_f * 3 * 4 + 6.0 * 4 * bm.T * bm.C * bm.V;
    CHECK(close_rel(eq3, summed, 1e-12) && close_rel(eq3n, summedn, 1e-12),
          "Megatron-LM's Eq. 3 = the summed matmuls (4 passes with recomputation: %.6g = %.6g; 3 without: %.6g = %.6g)", eq3, summed,
          eq3n, summedn);
    // activations kept per layer (Korthikanti et al.): T b C (10 + 24 / tp + 5 NH T / (C tp))
    // A, b 2, tp 1: 16*2*64 * (34 + 5*4*16/64) = 2048 * 39 = 79872
    CHECK(la.act_bytes == 79872.0, "activation bytes per layer by hand: 79872 (got %.0f)", la.act_bytes);
    // a tensor-parallel all-reduce of b T C bf16 = 2048 * 2 bytes over tp 2 at NVLink speed:
    // 2 (1/2) 4096 / 216.5e9 + 2 * 2e-6
    double ar = 4096.0 / 216.5e9 + 4e-6;
    CHECK(la.ar == 0.0 && close_rel(la2.ar, ar, 1e-12), "TP all-reduce: none at tp 1, %.6g s at tp 2 (got %.6g)", ar, la2.ar);

    // memory of shape A on one GPU without recomputation: 2 + 4 + 12 = 18 bytes a parameter, the one
    // micro-batch in flight (1f1b at P = 1) for 2 layers, and the last stage's logits (6 b T V bytes)
    ClusterLayout y = one_gpu(2, 4);
    ClusterCosts c;
    char err[512];
    int rc = cluster_costs(&c, &hw, &a, &y, err, sizeof(err));
    double want = 18.0 * 109312 + 2 * 79872 + 6.0 * 2 * 16 * 128;
    CHECK(rc == 0 && c.mem[0] == want, "memory of shape A, one GPU: 18 x 109312 + 2 x 79872 + 24576 = %.0f bytes (got %.0f)", want,
          rc ? -1.0 : c.mem[0]);
    CHECK(rc == 0 && c.msg_bytes == 2.0 * 2 * 16 * 64, "a pipeline message is b T C bf16 = 4096 bytes (got %g)", rc ? -1.0 : c.msg_bytes);
    if (rc == 0) cluster_costs_free(&c);

    // shape B over P = 3 stages (one layer each), D = 2, fp32 ring and int8 two-shot: each GPU sends
    // 2 (D - 1) / D x values x bytes a value in the average. Stage 1 holds one layer: 111840 values.
    ClusterLayout y2 = {.gpus = 6, .tp = 1, .P = 3, .D = 2, .b = 1, .M = 3, .kind = SCHED_1F1B, .scatter_gather = 1};
    rc = cluster_costs(&c, &hw, &bm, &y2, err, sizeof(err));
    CHECK(rc == 0 && c.dp_bytes[1] == 4.0 * 111840, "fp32 ring, D 2: stage 1 sends 4 x 111840 bytes (got %.0f)", rc ? -1.0 : c.dp_bytes[1]);
    if (rc == 0) cluster_costs_free(&c);
    y2.grad = CLUSTER_GRAD_INT8;
    y2.dp_algo = CLUSTER_DP_TWO_SHOT;
    rc = cluster_costs(&c, &hw, &bm, &y2, err, sizeof(err));
    CHECK(rc == 0 && c.dp_bytes[1] == 111840 * (1.0 + 4.0 / 256), "int8 two-shot: 111840 x (1 + 4/256) bytes, 3.94x fewer (got %.0f)",
          rc ? -1.0 : c.dp_bytes[1]);
    if (rc == 0) cluster_costs_free(&c);

    // recomputation keeps each layer's input (2 b T C bytes) and one layer's working set
    y = one_gpu(2, 4);
    y.recompute = 1;
    rc = cluster_costs(&c, &hw, &a, &y, err, sizeof(err));
    want = 18.0 * 109312 + 2 * (2.0 * 2 * 16 * 64) + 79872 + 24576;
    CHECK(rc == 0 && c.mem[0] == want, "memory with recomputation: %.0f bytes (got %.0f)", want, rc ? -1.0 : c.mem[0]);
    if (rc == 0) cluster_costs_free(&c);
}

// figures the audit's mutants of cluster.c showed untested, each against a hand derivation
static void test_hand_figures_more(void) {
    ClusterHw hw = hw_a100();
    ClusterModel a = {.name = "A", .L = 2, .C = 64, .NH = 4, .V = 128, .T = 16};
    ClusterModel bm = {.name = "B", .L = 3, .C = 96, .NH = 6, .V = 200, .T = 32};
    double hbm = 2039e9 * 0.85; // the preset's streaming rate (HBM at mem_eff)
    char err[512];
    ClusterCosts c;
    // Korthikanti et al. at tp 2: T b C (10 + 24/2 + 5 NH T / (C 2)) = 2048 (10 + 12 + 2.5) = 50176
    ClusterLayer l2;
    cluster_layer(&hw, &a, 2, 0, 2, &l2);
    CHECK(l2.act_bytes == 50176.0, "activation bytes per layer at tp 2 by hand: 50176 (got %.0f)", l2.act_bytes);
    // memory-bound (peak FLOP/s unbounded): the forward is its bytes at HBM's streaming rate. Shape A,
    // b 2, tp 1 (bt 32, hd 16, 8 heads, E = 8 x 16 x 16 = 2048 scores), bf16 = 2 bytes per element
    // of each matmul's two operands and its result, 2 (mk + kn + mn) per matmul:
    //   QKV (32x64)(64x192): 2 (2048 + 12288 + 6144) = 40960; Q K^T and A V, 8 x (16x16)(16x16):
    //   2 x 8 x 768 = 12288 each; projection (32x64)(64x64): 2 x 8192 = 16384; MLP up (32x64)(64x256)
    //   and down (32x256)(256x64): 2 x 26624 = 53248 each; matmuls 188416 bytes.
    // Element-wise (no dropout; x = b T C = 2048, u = 4 b T C = 8192): two LayerNorms 2 x 4x, softmax
    // 4 E, two residual adds 2 x 6x, bias + GeLU 4u: 16384 + 8192 + 24576 + 32768 = 81920.
    ClusterHw mb = hw;
    mb.gpu.peak_flops = 1e300;
    ClusterLayer lm;
    cluster_layer(&mb, &a, 1, 0, 2, &lm);
    CHECK(close_rel(lm.f, (188416.0 + 81920.0) / hbm, 1e-12), "memory-bound forward: 270336 bytes at 1.733 TB/s = %.6g s (got %.6g)",
          270336.0 / hbm, lm.f);

    // shape B over P = 3 (one layer each), D = 2, ZeRO-1: stage 1's 111840 parameters (test_hand_figures)
    ClusterLayout z = {.gpus = 6, .tp = 1, .P = 3, .D = 2, .b = 1, .M = 3, .kind = SCHED_1F1B, .scatter_gather = 1, .zero1 = 1};
    int rc = cluster_costs(&c, &hw, &bm, &z, err, sizeof(err));
    // optimizer state 12 bytes a value on 1/D of them; AdamW streams 30 bytes a value of the shard,
    // the global norm reads the whole fp32 gradient (4 bytes a value)
    CHECK(rc == 0 && c.mem_optim[1] == 12.0 * 111840 / 2, "ZeRO-1, D 2: optimizer state 12 x 111840 / 2 bytes (got %.0f)", rc ? -1.0 : c.mem_optim[1]);
    double tu = (30.0 * 111840 / 2 + 4.0 * 111840) / hbm;
    CHECK(rc == 0 && close_rel(c.t_u[1], tu, 1e-12), "ZeRO-1, D 2: update streams 30 x 111840 / 2 + 4 x 111840 bytes = %.6g s (got %.6g)", tu,
          rc ? -1.0 : c.t_u[1]);
    // weights: stage 0 its layer, wte (V C) and wpe (T C): 111840 + 19200 + 3072; the last stage its
    // layer, its copy of the tied wte and the final LayerNorm (2 C): 111840 + 19200 + 192
    CHECK(rc == 0 && c.mem_weights[0] == 2.0 * 134112 && c.mem_weights[2] == 2.0 * 131232,
          "bf16 weights: stage 0 2 x 134112, last stage 2 x 131232 (its own wte copy) (got %.0f, %.0f)", rc ? -1.0 : c.mem_weights[0],
          rc ? -1.0 : c.mem_weights[2]);
    if (rc == 0) cluster_costs_free(&c);

    // replicas first with tp x D = a node (tp 8, D 1): each stage on a node of its own, so the message
    // between them crosses nodes: 1/tp of b T C bf16 (262144 bytes) over one GPU's NIC share
    // (8 NICs x 24 GB/s / 8 GPUs), its latency, then an NVLink all-gather of the rest
    ClusterModel m = {.L = 8, .C = 1024, .NH = 16, .V = 1000, .T = 128};
    ClusterLayout x = {.gpus = 16, .tp = 8, .P = 2, .D = 1, .b = 1, .M = 2, .kind = SCHED_1F1B, .scatter_gather = 1};
    rc = cluster_costs(&c, &hw, &m, &x, err, sizeof(err));
    double tm = 262144.0 / 8 / 24e9 + 1e-6 + 7.0 / 8 * 262144 / 216.5e9 + 7 * 2e-6;
    CHECK(rc == 0 && c.msg_cross[0] == 1 && close_rel(c.t_msg_f[0], tm, 1e-12),
          "stages on separate nodes: the message crosses the network, %.6g s (got %s, %.6g s)", tm, rc == 0 && c.msg_cross[0] ? "across" : "inside",
          rc ? -1.0 : c.t_msg_f[0]);
    if (rc == 0) cluster_costs_free(&c);

    // the data-parallel ring across nodes: tp 2, P 1, D 8, replicas first: 4 replicas a node, so
    // each GPU gets the NICs' share of 4 GPUs of its group, 8 x 24e9 x 4 / 8 = 96 GB/s (under NVLink's).
    // Shape A at tp 2 holds 2 (12 C^2 + 13 C) / 2 + V C / 2 + T C + 2 C = 49984 + 4096 + 1024 + 128 = 55232
    // values; fp32 ring: 2 (D - 1) / D x 4 x 55232 bytes / 96e9 + 2 (D - 1) NIC latencies
    ClusterLayout d = {.gpus = 16, .tp = 2, .P = 1, .D = 8, .b = 2, .M = 4, .kind = SCHED_1F1B, .scatter_gather = 1};
    rc = cluster_costs(&c, &hw, &a, &d, err, sizeof(err));
    double tdp = 2.0 * 7 / 8 * 4 * 55232 / 96e9 + 14e-6;
    CHECK(rc == 0 && close_rel(c.t_dp[0], tdp, 1e-12), "DP ring across nodes, 4 replicas a node: %.6g s (got %.6g)", tdp, rc ? -1.0 : c.t_dp[0]);
    if (rc == 0) cluster_costs_free(&c);
}

// with unbounded memory bandwidth every matmul is compute-bound: the forward takes its FLOPs at
// matmul_eff of peak, and both backward halves twice that
static void test_roofline(void) {
    ClusterHw hw = hw_a100();
    hw.gpu.hbm_bw = 1e300;
    ClusterModel a = {.L = 2, .C = 64, .NH = 4, .V = 128, .T = 16};
    ClusterLayer l;
    cluster_layer(&hw, &a, 1, 0, 2, &l);
    double rate = hw.gpu.peak_flops * hw.gpu.matmul_eff;
    CHECK(close_rel(l.f, l.flops_f / rate, 1e-9) && close_rel(l.bi + l.bw, 2 * l.flops_f / rate, 1e-9),
          "compute-bound: forward = FLOPs / (peak x eff), backward = 2x (%.4g s, %.4g s)", l.f, l.bi + l.bw);
    ClusterHw slow = hw_a100();
    ClusterLayer m;
    cluster_layer(&slow, &a, 1, 0, 2, &m);
    CHECK(m.f > l.f && m.bi > l.bi, "finite memory bandwidth only adds time (memory-bound attention, element-wise kernels)");
}

static double step_of(const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* y) {
    ClusterResult r;
    char err[512];
    if (cluster_simulate(hw, m, y, 0.0, 1, 3, &r, NULL, err, sizeof(err))) {
        printf("  %s\n", err);
        return -1;
    }
    return r.step_s;
}

// step time and memory over L = 8, 16, .., 32 (width 0) or C = 1024, 2048, 4096 (width 1): each
// larger than the one before
static int grows(const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* y, int width) {
    double t_prev = 0, mem_prev = 0;
    int ok = 1;
    for (int k = width ? 1024 : 8; k <= (width ? 4096 : 32); k = width ? 2 * k : k + 8) {
        ClusterModel mm = *m;
        if (width) mm.C = k;
        else mm.L = k;
        ClusterResult r;
        char err[512];
        if (cluster_simulate(hw, &mm, y, 0.0, 1, 3, &r, NULL, err, sizeof(err))) return 0;
        ok &= r.step_s > t_prev && r.mem_gib_per_gpu > mem_prev;
        t_prev = r.step_s, mem_prev = r.mem_gib_per_gpu;
    }
    return ok;
}

static void test_monotonic(void) {
    ClusterHw hw = hw_a100();
    ClusterModel m = {.L = 16, .C = 2048, .NH = 16, .V = 50257, .T = 1024};
    ClusterLayout y = {.gpus = 64, .tp = 4, .P = 4, .D = 4, .b = 1, .M = 8, .kind = SCHED_1F1B, .recompute = 1, .scatter_gather = 1};
    double base = step_of(&hw, &m, &y);
    int ok_bw = base > 0;
    double prev = base;
    for (double nic = 48e9; nic <= 400e9; nic *= 2) { // faster network: never slower
        ClusterHw h = hw;
        h.net.nic_bw = nic;
        double t = step_of(&h, &m, &y);
        ok_bw &= t > 0 && t <= prev;
        prev = t;
    }
    prev = base;
    for (double nv = 300e9; nv <= 1200e9; nv *= 2) {
        ClusterHw h = hw;
        h.node.nvlink_bw = nv;
        double t = step_of(&h, &m, &y);
        ok_bw &= t > 0 && t <= prev;
        prev = t;
    }
    ClusterHw fast = hw;
    fast.gpu.hbm_bw *= 2;
    ok_bw &= step_of(&fast, &m, &y) < base;
    CHECK(ok_bw, "step time never grows with NIC, NVLink or HBM bandwidth (base %.4g s)", base);
    int ok_size = grows(&hw, &m, &y, 0) && grows(&hw, &m, &y, 1);
    CHECK(ok_size, "step time and memory grow with layers and with width");
    // more micro-batches per step: the bubble's share shrinks
    ClusterResult r8, r32;
    char err[512];
    ClusterLayout y32 = y;
    y32.M = 32;
    int rc = cluster_simulate(&hw, &m, &y, 0, 1, 3, &r8, NULL, err, sizeof(err)) || cluster_simulate(&hw, &m, &y32, 0, 1, 3, &r32, NULL, err, sizeof(err));
    CHECK(rc == 0 && r32.bubble < r8.bubble && r32.tflops_per_gpu > r8.tflops_per_gpu, "M 8 -> 32: bubble %.3f -> %.3f, TFLOP/s up",
          r8.bubble, r32.bubble);
}

static void check_refused(const ClusterModel* m, const ClusterLayout* y, const char* want, const char* what) {
    ClusterHw hw = hw_a100();
    ClusterCosts c;
    char err[512] = "";
    int rc = cluster_costs(&c, &hw, m, y, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, want), "%s refused: %s", what, err);
    if (rc == 0) cluster_costs_free(&c);
}

static void test_refusals(void) {
    ClusterModel m = {.L = 8, .C = 1024, .NH = 16, .V = 1000, .T = 128};
    ClusterLayout y = {.gpus = 16, .tp = 2, .P = 4, .D = 2, .b = 1, .M = 4, .kind = SCHED_1F1B, .scatter_gather = 1};
    ClusterLayout bad = y;
    bad.tp = 3, bad.gpus = 24;
    check_refused(&m, &bad, "does not divide the model's 16 heads", "TP not dividing the heads");
    bad = y;
    bad.P = 16, bad.gpus = 64, bad.M = 16;
    check_refused(&m, &bad, "--pp 16 exceeds the model's 8 layers", "P > L");
    bad = y;
    bad.gpus = 15;
    check_refused(&m, &bad, "--gpus 15 is not --tp 2 x --pp 4 x data-parallel 2 = 16", "D x P x TP != GPUs");
    bad = y;
    bad.kind = SCHED_INTERLEAVED, bad.chunks = 4;
    check_refused(&m, &bad, "virtual stages exceed the model's 8 layers", "P x chunks > L");
    bad = y;
    bad.tp = 16, bad.gpus = 128;
    check_refused(&m, &bad, "must divide the 8 GPUs of a node", "TP across nodes");
    ClusterModel big = {.L = 8, .C = 32768, .NH = 16, .V = 1000, .T = 128};
    check_refused(&big, &y, "GiB per GPU", "memory over the GPU's");
    ClusterModel odd = {.L = 8, .C = 1000, .NH = 16, .V = 1000, .T = 128};
    check_refused(&odd, &y, "--heads 16 does not divide --hidden 1000", "heads not dividing the width");
    bad = y;
    bad.grad = CLUSTER_GRAD_INT8;
    check_refused(&m, &bad, "two-shot", "int8 by ring");
    bad = y;
    bad.M = 2;
    check_refused(&m, &bad, "--micro-batches 2 is less than --stages 4", "a schedule its shape refuses");
    bad = y;
    bad.b = 0;
    check_refused(&m, &bad, "--micro-batch must be at least 1", "micro-batch 0");
}

static void test_presets(void) {
    ClusterModel m;
    double want[3] = {13e9, 175e9, 530e9};
    const char* names[3] = {"gpt3-13b", "gpt3-175b", "mtnlg-530b"};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        ok &= cluster_model_preset(names[i], &m) == 0 && close_rel(cluster_params(&m), want[i], 0.03);
        printf("     %s: %.4g parameters\n", names[i], cluster_params(&m));
    }
    ClusterHw hw;
    CHECK(ok && cluster_model_preset("gpt4", &m) != 0, "model presets within 3%% of their names' sizes; unknown names refused");
    CHECK(cluster_hw_preset("dgx-a100", &hw) == 0 && hw.gpu.peak_flops == 312e12 && cluster_hw_preset("tpu", &hw) != 0,
          "the dgx-a100 preset (312 TFLOP/s); unknown hardware refused");
}

// the simulated run's figures agree with one another and with the cost model's parts
static void test_simulate(void) {
    ClusterHw hw = hw_a100();
    ClusterModel m = {.L = 8, .C = 1024, .NH = 16, .V = 1000, .T = 512};
    ClusterLayout y = one_gpu(4, 2);
    ClusterResult r;
    ClusterCosts c;
    char err[512];
    int rc = cluster_simulate(&hw, &m, &y, 0.0, 1, 3, &r, &c, err, sizeof(err));
    // one GPU, one stage: a step is M (F + B) + U, nothing else
    double want = 2 * (c.t_f[0] + c.t_b[0]) + c.t_u[0];
    CHECK(rc == 0 && close_rel(r.step_s, want, 1e-12) && close_rel(r.samples_per_s, 8 / want, 1e-12),
          "one GPU: step = M (F + B) + U = %.6g s (got %.6g), samples/s = 8 / step", want, rc ? -1.0 : r.step_s);
    CHECK(rc == 0 && close_rel(r.mfu, 6 * cluster_params(&m) * r.tokens_per_s / 312e12, 1e-12) && r.hfu > r.mfu,
          "mfu = 6 N tokens/s / peak; hfu (matmuls, attention) above it");
    // without recomputation Eq. 3 counts 3 passes: 72 B T L C^2 (1 + T / 6C) + 6 B T C V at B = 8
    // = 2705225416704 FLOPs a step
    CHECK(rc == 0 && close_rel(r.tflops_per_gpu * 1e12 * r.step_s, 2705225416704.0, 1e-12),
          "TFLOP/s without recomputation: 3 passes, 2.705e12 FLOPs a step (got %.6g)", rc ? -1.0 : r.tflops_per_gpu * 1e12 * r.step_s);
    if (rc == 0) cluster_costs_free(&c);
    rc = cluster_simulate(&hw, &m, &y, 0.0, 1, 2, &r, NULL, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "at least 3 steps"), "fewer than 3 steps refused: %s", err);
}

// what cluster_simulate reduces, where its mutants survived: the
// worst stage's memory, the pipeline-wide sum's network latency, the early input gradient's share
static void test_simulate_more(void) {
    ClusterHw hw = hw_a100();
    ClusterModel m = {.L = 8, .C = 1024, .NH = 16, .V = 1000, .T = 512};
    ClusterResult r;
    ClusterCosts c;
    char err[512];
    // P 3: the last stage holds the logits, so the stages' memory differs; the figure is the largest
    ClusterLayout p3 = {.gpus = 3, .tp = 1, .P = 3, .D = 1, .b = 1, .M = 3, .kind = SCHED_1F1B, .scatter_gather = 1};
    ClusterModel m6 = m;
    m6.L = 6;
    int rc = cluster_simulate(&hw, &m6, &p3, 0.0, 1, 3, &r, &c, err, sizeof(err));
    double mx = 0, mn = 1e300;
    for (int s = 0; rc == 0 && s < 3; s++) mx = fmax(mx, c.mem[s]), mn = fmin(mn, c.mem[s]);
    CHECK(rc == 0 && mn < mx && r.mem_gib_per_gpu == mx / (1024.0 * 1024 * 1024), "memory per GPU: the largest stage's (%.4f GiB, got %.4f)",
          mx / (1024.0 * 1024 * 1024), rc ? -1.0 : r.mem_gib_per_gpu);
    if (rc == 0) cluster_costs_free(&c);
    // the stages share a node (stages first: messages over NVLink, D 1: no average), so the NIC's
    // latency enters only through the pipeline-wide sum before each update: a slower one, a longer step
    ClusterLayout p2 = {.gpus = 2, .tp = 1, .P = 2, .D = 1, .b = 1, .M = 2, .kind = SCHED_1F1B, .scatter_gather = 1,
                        .placement = PLACE_STAGES_FIRST};
    ClusterHw slow = hw;
    slow.net.nic_lat = 1e-3;
    double t0 = step_of(&hw, &m, &p2), t1 = step_of(&slow, &m, &p2);
    CHECK(t0 > 0 && t1 > t0, "P 2 on one node: the pipeline-wide sum's network latency lengthens the step (%.6g -> %.6g s)", t0, t1);
    // gpipe P 2, M 1: stage 0's backward waits for stage 1's input gradient; with early_dx it leaves
    // once stage 1's input-gradient half is done, so each step is shorter by stage 1's BW exactly
    ClusterLayout g2 = {.gpus = 2, .tp = 1, .P = 2, .D = 1, .b = 1, .M = 1, .kind = SCHED_GPIPE, .recompute = 1, .scatter_gather = 1};
    ClusterLayout g2e = g2;
    g2e.early_dx = 1;
    rc = cluster_costs(&c, &hw, &m, &g2, err, sizeof(err));
    double late = step_of(&hw, &m, &g2), early = step_of(&hw, &m, &g2e);
    CHECK(rc == 0 && c.t_bi[1] != c.t_bw[1] && close_rel(late - early, c.t_bw[1], 1e-9),
          "early_dx: gpipe P 2 M 1 shorter by stage 1's BW, %.6g s (got %.6g s)", rc ? -1.0 : c.t_bw[1], late - early);
    if (rc == 0) cluster_costs_free(&c);
}

// --placement auto (placement_choose, the trainer's rule): the layout with fewer bytes between nodes,
// and then exactly that layout's costs; a tie (every TP group a node of its own) keeps stages first
static void test_placement_auto(void) {
    ClusterHw hw = hw_a100();
    ClusterModel m = {.L = 8, .C = 1024, .NH = 16, .V = 1000, .T = 512};
    ClusterLayout y = {.gpus = 32, .tp = 2, .P = 4, .D = 4, .b = 1, .M = 4, .kind = SCHED_1F1B, .scatter_gather = 1};
    ClusterCosts c[3];
    char err[512];
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        ClusterLayout v = y;
        v.placement = i == 1 ? PLACE_STAGES_FIRST : PLACE_REPLICAS_FIRST;
        v.placement_auto = i == 2;
        rc |= cluster_costs(&c[i], &hw, &m, &v, err, sizeof(err));
    }
    // 4 TP groups a node: stages first puts a pipeline on a node (only the averages cross), replicas
    // first a stage's 4 replicas (only the pipeline's messages and the tied embedding's cross)
    if (rc == 0) {
        double st = c[2].place_cross[PLACE_STAGES_FIRST], rp = c[2].place_cross[PLACE_REPLICAS_FIRST];
        Placement want = rp < st ? PLACE_REPLICAS_FIRST : PLACE_STAGES_FIRST;
        const ClusterCosts* same = &c[want == PLACE_STAGES_FIRST ? 1 : 0];
        CHECK(c[2].placement == want && st > 0 && rp > 0, "auto takes the layout with fewer bytes between nodes: %s (stages %.4g MB, replicas %.4g MB)",
              placement_name(c[2].placement), st / 1e6, rp / 1e6);
        CHECK(c[2].t_dp[0] == same->t_dp[0] && c[2].t_msg_f[0] == same->t_msg_f[0] && c[2].group[1] == same->group[1],
              "  and costs exactly as that layout given by hand");
        CHECK(c[0].place_cross[0] == 0 && c[0].place_cross[1] == 0, "  an explicit layout counts no bytes");
    } else CHECK(0, "three layouts cost: %s", err);
    for (int i = 0; i < 3 && rc == 0; i++) cluster_costs_free(&c[i]);
}

int main(void) {
    test_hand_figures();
    test_hand_figures_more();
    test_roofline();
    test_monotonic();
    test_refusals();
    test_presets();
    test_simulate();
    test_simulate_more();
    test_placement_auto();
    return test_summary();
}
