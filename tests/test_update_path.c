// The CPU update path: AdamW (plain, and fused with zeroing the gradient) against the formula in
// double precision and bitwise against each other; the global norm's sums of squares against long
// double, against the chunked serial sum they are defined as, and across thread counts; the CPU
// stage's gradient slot: zero_grad after an update sweeps nothing and alone only the embeddings'
// tensors (the profiling hook's byte counts say so), yet the slot reads as zero, and the backward
// that follows (writing instead of adding) is bitwise one into zeroed memory; a stage's snapshot (the
// guard's way back to a consistency point) restores weights, moments and version bitwise, on the CPU
// and behind a device's code path (cpu-staged).
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/adamw.h"
#include "llmc/global_norm.h"
#include "llmc/gpt2.h"
#include "llmc/profile.h"
#include "llmc/rng.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cpu.h"
#include "tests/test.h"

static float* randn(size_t n, uint64_t seed, float scale) {
    float* x = (float*)malloc(n * sizeof(float));
    Rng r;
    rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(&r);
    return x;
}

static float* copy(const float* x, size_t n) {
    float* y = (float*)malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static void check_adamw(size_t n, int threads) {
    omp_set_num_threads(threads);
    float *p = randn(n, 1, 0.1f), *g = randn(n, 2, 1e-2f), *m = randn(n, 3, 1e-3f), *v = randn(n, 4, 1e-3f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    for (size_t i = 0; i < n; i += 97) g[i] = 0.0f; // zero gradients too
    float* g2 = copy(g, n);
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    const int t = 7;
    float *pf = copy(p, n), *mf = copy(m, n), *vf = copy(v, n);
    adamw_update(pf, g, mf, vf, n, lr, b1, b2, eps, wd, t, scale);
    // the formula in double from the same inputs (the bias corrections as the float code forms them);
    // the error relative to the step's size, about lr plus the decay term
    double worst = 0.0;
    float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        double gd = (double)g[i] * scale, mi = b1 * (double)m[i] + (1.0 - b1) * gd, vi = b2 * (double)v[i] + (1.0 - b2) * gd * gd;
        double pd = p[i] - lr * (mi / bc1 / (sqrt(vi / bc2) + eps) + wd * p[i]);
        double e = fabs((double)pf[i] - pd) / (lr * (1.0 + wd * fabs(p[i])));
        if (e > worst) worst = e;
    }
    CHECK(worst < 1e-3, "adamw n %zu, %d threads: within 1e-3 of a step of the double-precision formula (worst %.2g)", n, threads, worst);
    // bitwise the formula with every rounding spelled out, as adamw.c promises (the releases' results)
    size_t diff = n;
    for (size_t i = 0; i < n && diff == n; i++) {
        float gi = g[i] * scale, mi = fmaf(b1, m[i], (1.0f - b1) * gi), vi = fmaf(b2, v[i], (1.0f - b2) * gi * gi);
        float pi = fmaf(-lr, fmaf(wd, p[i], mi / bc1 / (sqrtf(vi / bc2) + eps)), p[i]);
        if (memcmp(&pi, pf + i, 4) || memcmp(&mi, mf + i, 4) || memcmp(&vi, vf + i, 4)) diff = i;
    }
    CHECK(diff == n, "adamw n %zu, %d threads: bitwise the scalar fmaf formula (first difference at %zu)", n, threads, diff);
    float *pz = copy(p, n), *mz = copy(m, n), *vz = copy(v, n);
    adamw_update_zero(pz, g2, mz, vz, n, lr, b1, b2, eps, wd, t, scale);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= g2[i] == 0.0f && !signbit(g2[i]);
    CHECK(!memcmp(pz, pf, n * 4) && !memcmp(mz, mf, n * 4) && !memcmp(vz, vf, n * 4), "adamw n %zu, %d threads: fused with zeroing, bitwise the plain one", n,
          threads);
    CHECK(zero, "adamw n %zu, %d threads: the fused one leaves the gradient +0", n, threads);
    free(p); free(g); free(m); free(v); free(g2); free(pf); free(mf); free(vf); free(pz); free(mz); free(vz);
}

// sumsq's definition: chunks of max(4096, ceil(n / 4096)) floats, each summed in index order in double, the chunk sums in order
static double sumsq_serial(const float* x, size_t n) {
    size_t chunk = (n + 4095) / 4096;
    if (chunk < 4096) chunk = 4096;
    double total = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += chunk) {
        double s = 0.0;
        for (size_t i = i0; i < n && i < i0 + chunk; i++) s += (double)x[i] * x[i];
        total += s;
    }
    return total;
}

static void check_sumsq(size_t n) {
    float* x = randn(n, 5, 1e-2f);
    long double ref = 0.0L;
    for (size_t i = 0; i < n; i++) ref += (long double)x[i] * x[i];
    omp_set_num_threads(1);
    double one = global_norm_sumsq(x, n);
    omp_set_num_threads(2);
    double two = global_norm_sumsq(x, n), serial = sumsq_serial(x, n);
    CHECK(fabsl(one - ref) <= 1e-12L * ref + 1e-300L, "sumsq n %zu: within 1e-12 of the long double sum (%.3Lg off)", n, fabsl(one - ref) / (ref + 1e-300L));
    CHECK(!memcmp(&one, &two, sizeof(double)), "sumsq n %zu: 1 and 2 threads bitwise equal", n);
    CHECK(!memcmp(&one, &serial, sizeof(double)), "sumsq n %zu: bitwise the chunked serial sum", n);
    // the tied sum's pass: dst = a + b (here in place, as the P = 1 tie adds the head's share) and its sumsq
    float *y = randn(n, 6, 1e-2f), *sum = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) sum[i] = x[i] + y[i];
    double want = global_norm_sumsq(sum, n);
    for (int threads = 1; threads <= 2; threads++) {
        omp_set_num_threads(threads);
        float* a = copy(x, n);
        double got = global_norm_sumsq_of_sum(a, a, y, n);
        CHECK(!memcmp(&got, &want, sizeof(double)) && !memcmp(a, sum, n * sizeof(float)),
              "global_norm_sumsq_of_sum n %zu, %d threads: the sum and its sumsq bitwise those of two passes", n, threads);
        free(a);
    }
    free(x); free(y); free(sum);
}

// bytes the CPU stage's zero_grad swept, from the profiling hook (its time is not looked at)
static double zero_grad_bytes(Stage* s) {
    profile_reset();
    profile_on = 1;
    stage_zero_grad(s, 0);
    profile_on = 0;
    const ProfileEntry* e;
    return profile_entries(&e) == 1 ? e[0].bytes : -1.0;
}

// the slot's gradient and head share after a forward and backward (with the tied sum), copied out
static float* backward_grads(Stage* s, int step, size_t n_head) {
    Op f = {.kind = OP_F, .step = step, .mb = 0, .version = s->version}, b = {.kind = OP_B, .step = step, .mb = 0, .version = s->version};
    stage_forward(s, &f, 0, 1);
    stage_backward(s, &b, 0, 0.0625f);
    float* g = (float*)malloc((s->num_params + n_head) * sizeof(float));
    memcpy(g, stage_cpu_grads(s, 0), s->num_params * sizeof(float));
    memcpy(g + s->num_params, stage_cpu_dwte_head(s, 0), n_head * sizeof(float));
    return g;
}

static int all_zero(Stage* s, size_t n_head) {
    const float* g = stage_cpu_grads(s, 0);
    const float* head = stage_cpu_dwte_head(s, 0);
    int zero = 1;
    for (size_t i = 0; i < s->num_params; i++) zero &= g[i] == 0.0f;
    for (size_t i = 0; i < n_head; i++) zero &= head[i] == 0.0f;
    return zero;
}

// The trainer's order (backward, tied sum, norm, update, zero_grad) and zero_grad alone: the slot
// reads as zero either way, zero_grad after an update sweeps nothing and alone only the embeddings'
// tensors, and a backward into a slot left that way (written, not added to) is bitwise one into zeros.
static const GPT2Config TINY = {16, 64, 128, 2, 2, 32}; // maxT, V, Vp, L, NH, C

// the whole tiny model as a stage on dev from initialisation `seed`, one slot (B 2, T 8: one micro-batch
// at a time) holding tokens (i a) % V and targets (i b + c) % V; sizes filled (gpt2_param_sizes);
// returns the full parameters it was made from (the caller frees them)
static float* tiny_stage(Stage* s, const StageDevice* dev, int seed, int a, int b, int c, size_t* sizes) {
    GPT2Range all = {0, TINY.num_layers, 1, 1};
    size_t n = gpt2_param_sizes(&TINY, &all, sizes);
    float* full = (float*)malloc(n * sizeof(float));
    gpt2_init_full(&TINY, full, seed);
    stage_create(s, dev, &(StageInit){.cfg = &TINY, .range = all, .B = 2, .T = 8, .full = full});
    stage_reserve(s, 1, 1, 1, 0);
    for (int i = 0; i < 16; i++) {
        stage_inputs(s, 0)[i] = (i * a) % TINY.vocab_size;
        stage_targets(s, 0)[i] = (i * b + c) % TINY.vocab_size;
    }
    return full;
}

static void check_zero_grad(void) {
    omp_set_num_threads(2);
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    Stage s;
    float* full = tiny_stage(&s, &STAGE_CPU, 3, 7, 11, 3, sizes);
    AdamWConfig opt = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
    double units[4];
    free(backward_grads(&s, 0, sizes[0]));
    double wte_sq = stage_tie_local(&s, 0), units_swept[4];
    stage_grad_unit_sumsq(&s, 0, wte_sq, units);
    stage_grad_unit_sumsq(&s, 0, STAGE_SUMSQ_UNKNOWN, units_swept);
    CHECK(wte_sq >= 0.0 && !memcmp(units, units_swept, sizeof(units)), "the norm's units with wte's sumsq from the tied sum's pass are bitwise those of a sweep");
    CHECK(units[0] > 0 && units[1] > 0, "zero_grad: the backward left a nonzero gradient");
    stage_update(&s, 0, &opt, 1e-3f, 1, 1.0f);
    double swept = zero_grad_bytes(&s);
    CHECK(swept == 0.0, "zero_grad after the update swept %.0f bytes (none: AdamW left the slot zero by definition)", swept);
    CHECK(all_zero(&s, sizes[0]), "after update and zero_grad the slot reads as all zero (head share too)");
    float* into_zeros = backward_grads(&s, 1, sizes[0]); // the slot read above: now zero in memory
    swept = zero_grad_bytes(&s);
    CHECK(swept == 4.0 * (sizes[0] + sizes[1]), "zero_grad alone swept %.0f bytes (the embeddings' gradients, %zu floats)", swept, sizes[0] + sizes[1]);
    float* written = backward_grads(&s, 1, sizes[0]); // same weights, into the slot zero_grad left
    CHECK(!memcmp(written, into_zeros, (s.num_params + sizes[0]) * sizeof(float)), "a backward after zero_grad (written) is bitwise one into zeros");
    stage_zero_grad(&s, 0);
    CHECK(all_zero(&s, sizes[0]), "after zero_grad alone the slot reads as all zero (head share too)");
    free(into_zeros);
    free(written);
    stage_destroy(&s);
    free(full);
}

// one step of training on slot 0 (forward, backward, update, zero_grad); returns the loss
static float train_step(Stage* s, const AdamWConfig* opt, int t) {
    Op f = {.kind = OP_F, .step = t, .mb = 0, .version = s->version}, b = {.kind = OP_B, .step = t, .mb = 0, .version = s->version};
    float loss = stage_forward(s, &f, 0, 1);
    stage_backward(s, &b, 0, 0.0625f);
    stage_tie_local(s, 0);
    stage_update(s, 0, opt, 1e-2f, t + 1, 1.0f);
    stage_zero_grad(s, 0);
    return loss;
}

static void check_snapshot(const StageDevice* dev) {
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    Stage s;
    float* full = tiny_stage(&s, dev, 5, 5, 13, 1, sizes);
    size_t n = s.num_params;
    AdamWConfig opt = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    train_step(&s, &opt, 0);
    train_step(&s, &opt, 1);
    StageSnapshot snap = {0};
    stage_snapshot_take(&s, &snap);
    float* want = (float*)malloc(3 * n * sizeof(float)); // (3, n) the weights and moments at the snapshot
    memcpy(want, s.params, n * sizeof(float));
    memcpy(want + n, s.adam_m, n * sizeof(float));
    memcpy(want + 2 * n, s.adam_v, n * sizeof(float));
    int version = s.version;
    float next = train_step(&s, &opt, 2); // the step that would have followed the snapshot
    float later = train_step(&s, &opt, 3);
    stage_to_host(&s);
    CHECK(s.version == version + 2 && memcmp(want, s.params, n * sizeof(float)), "%s: two more steps moved the weights (version %d)", dev->name, s.version);
    stage_snapshot_restore(&s, &snap);
    stage_to_host(&s);
    CHECK(s.version == version, "%s: the snapshot's version is back (%d, taken at %d)", dev->name, s.version, version);
    CHECK(!memcmp(want, s.params, n * sizeof(float)) && !memcmp(want + n, s.adam_m, n * sizeof(float)) && !memcmp(want + 2 * n, s.adam_v, n * sizeof(float)),
          "%s: weights and both moments bitwise the snapshot's", dev->name);
    float again = train_step(&s, &opt, 2);
    CHECK(again == next && later != next, "%s: the step after the restore is bitwise the one that followed the snapshot (loss %.9g, %.9g; then %.9g)", dev->name,
          again, next, later);
    stage_snapshot_free(&snap);
    free(want);
    stage_destroy(&s);
    free(full);
}

int main(void) {
    check_adamw(1000003, 1);
    check_adamw(1000003, 2);
    check_adamw(37, 2);
    size_t ns[] = {1, 4095, 4097, 65536 + 3, 589824, 2359296, 38633472};
    for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) check_sumsq(ns[i]);
    check_zero_grad();
    check_snapshot(&STAGE_CPU);
    check_snapshot(&STAGE_CPU_STAGED);
    omp_set_num_threads(2);
    return test_summary();
}
