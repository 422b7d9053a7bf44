// TD-Pipe's numerics against a plain reference. The executor runs the tdpipe schedule at P = 1 with
// window W (forwards and backwards on stashed weight versions, the gradient ring, updates); the
// reference below keeps every weight version as an explicit copy and computes micro-batch g of
// step t on version max(0, floor((g - W) / M)), accumulates, clips, applies AdamW: stale SGD written
// out. The two must agree bitwise, losses and final weights, for windows from 0 to beyond M.
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "llmc/adamw.h"
#include "llmc/builtin_data.h"
#include "llmc/compensation.h"
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/gpt2.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
#include "tdpipe/drift.h"
#include "tdpipe/executor.h"
#include "tdpipe/schedule.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cpu.h"
#include "tdpipe/staleness.h"
#include "tdpipe/trace.h"
#include "tests/test.h"

enum { B = 2, T = 8, M = 4, STEPS = 6, TOKENS = 4096 };
static const GPT2Config CFG = {T, 256, 256, 2, 2, 16}; // maxT, V, Vp, L, NH, C
static const float LR = 3e-3f, CLIP = 1.0f, FINAL = 0.1f;
enum { WARMUP = 2 };

static uint16_t g_tokens[TOKENS];
static float g_losses[STEPS]; // what the executor reported, step by step

static void on_step(void* ctx, const StepReport* r) {
    (void)ctx;
    if (r->step >= 1 && r->step <= STEPS) g_losses[r->step - 1] = r->loss;
}

static AdamWConfig adamw(void) {
    AdamWConfig o;
    memset(&o, 0, sizeof(o));
    o.lr = LR;
    o.beta1 = 0.9f;
    o.beta2 = 0.95f;
    o.eps = 1e-8f;
    o.weight_decay = 0.1f;
    return o;
}

static void loader(DataLoader* dl) {
    char err[256];
    if (dataloader_init_memory(dl, g_tokens, TOKENS, B, T, 0, 1, 1, 7, CFG.vocab_size, err, sizeof(err))) td_fatal("%s", err);
}

// the reference's version of micro-batch g: max(0, floor((g - W) / M))
static int ref_version(int W, int g) { return g < W ? 0 : (g - W) / M; }

// LR scaling's factor for update first + t of a run (or chunk) whose pipeline starts empty at step
// first: the mean over its micro-batches of 1 / (1 + delta) for those compensated, counting one
// update less where prediction ran them ahead (from version 1 on: version 0 has no moments), and 1
// for the rest
static double ref_lr_factor_from(int first, int W, const StaleComp* comp, int t) {
    if (!comp || !(comp->methods & STALE_LR)) return 1.0;
    double sum = 0.0;
    for (int m = 0; m < M; m++) {
        int v = ref_version(W, t * M + m), delta = t - v, on = delta > comp->tau;
        int predict = on && (comp->methods & STALE_PREDICT) && first + v > 0;
        sum += on ? 1.0 / (1.0 + delta - predict) : 1.0;
    }
    return sum / M;
}
static double ref_lr_factor(int W, const StaleComp* comp, int t) { return ref_lr_factor_from(0, W, comp, t); }

// weights version v extrapolated `ahead` updates along AdamW's direction, tensor by tensor, by the
// rates those updates apply (the reference's weight prediction, from that version's weights and
// moments); second order (comp->curvature, from version 2 on: two updates seen) adds ahead (ahead +
// 1) / 2 times the change between the last two updates, from the versions before it (versions: (v + 1, n))
static void predicted(int W, const StaleComp* comp, const size_t* sizes, const float* versions, const float* m, const float* v, int version,
                      int ahead, float* out) {
    size_t n = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) n += sizes[i];
    const float* w = versions + (size_t)version * n;
    AdamWConfig o = adamw();
    float lr_sum = 0.0f;
    for (int j = version; j < version + ahead; j++) lr_sum += adamw_lr_schedule(j, STEPS, WARMUP, LR, FINAL) * (float)ref_lr_factor(W, comp, j);
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        compensation_predict(out + off, w + off, m + off, v + off, sizes[i], lr_sum, o.beta1, o.beta2, o.eps, gpt2_param_decays(i) ? o.weight_decay : 0.0f,
                      version);
        off += sizes[i];
    }
    if (comp->curvature && version >= 2) {
        const float *w1 = w - n, *w2 = w - 2 * n; // versions v - 1 and v - 2
        float c = 0.5f * ahead * (ahead + 1);
        for (size_t k = 0; k < n; k++) {
            float u_prev = w1[k] - w2[k];
            out[k] = fmaf(c, (w[k] - w1[k]) - u_prev, out[k]);
        }
    }
}

// the reference: plain loops over steps and micro-batches, every version (and its AdamW moments)
// kept; micro-batch g of step t runs on version max(0, floor((g - W) / M)), compensated as comp says
// (NULL: none) when its staleness exceeds comp->tau. Returns the final weights in params
// (num_params) and the losses in losses (STEPS).
static void reference(int W, const StaleComp* comp, const float* init, size_t n, float* params, float* losses) {
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    Stage s; // only for its update, zero_grad, tie and norm units (the same code the executor uses)
    stage_create(&s, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
    stage_reserve(&s, 1, 1, 1, 0); // one micro-batch at a time
    size_t vc = s.sizes[0];
    float* versions = (float*)malloc_check((size_t)(STEPS + 1) * n * sizeof(float)); // (STEPS+1, n) weights after v updates
    float* mom_m = (float*)malloc_check((size_t)(STEPS + 1) * n * sizeof(float));    // (STEPS+1, n) AdamW's m after v updates
    float* mom_v = (float*)malloc_check((size_t)(STEPS + 1) * n * sizeof(float));    // (STEPS+1, n) AdamW's v
    float* w = (float*)malloc_check(n * sizeof(float));          // (n) the weights a micro-batch runs on
    float* g1 = (float*)calloc_check(n + vc, sizeof(float));     // (n + Vp*C) one micro-batch's gradient, then its head share
    float* dc_a = (float*)calloc_check(n + vc, sizeof(float));   // (n + Vp*C) DC-ASGD's sum of g^2
    float* dc_b = (float*)calloc_check(n + vc, sizeof(float));   // (n + Vp*C) and of g^2 * w_used
    ParameterTensors view, g1v;
    gpt2_point_params(&g1v, g1, s.sizes);
    DataLoader dl;
    loader(&dl);
    AdamWConfig opt = adamw();
    double units[8];
    GPT2Acts* a = stage_cpu_acts(&s, 0);
    GPT2GradActs* ga = stage_cpu_gacts(&s, 0);
    for (int t = 0; t < STEPS; t++) {
        // the slot's buffers, fetched each step: an accessor makes a slot left FRESH by the update exact in memory
        float* grads = stage_cpu_grads(&s, 0);
        float* head = stage_cpu_dwte_head(&s, 0);
        memcpy(versions + (size_t)t * n, s.params, n * sizeof(float));
        memcpy(mom_m + (size_t)t * n, s.adam_m, n * sizeof(float));
        memcpy(mom_v + (size_t)t * n, s.adam_v, n * sizeof(float));
        double loss_sum = 0.0;
        int dc_any = 0;
        for (int m = 0; m < M; m++) {
            int v = ref_version(W, t * M + m), delta = t - v;
            int comp_on = comp && delta > comp->tau;
            const float* wv = versions + (size_t)v * n;
            int predict = comp_on && (comp->methods & STALE_PREDICT) && v > 0;
            if (predict) predicted(W, comp, s.sizes, versions, mom_m + (size_t)v * n, mom_v + (size_t)v * n, v, delta, w);
            else memcpy(w, wv, n * sizeof(float));
            gpt2_point_params(&view, w, s.sizes);
            if (dataloader_next(&dl, a->inputs, a->targets)) td_fatal("%s", dl.err);
            loss_sum += gpt2_forward(&CFG, &all, &view, a, 1, NULL);
            gpt2_backward_input(&CFG, &all, &view, a, ga, NULL, 1.0f / ((float)B * T * M), NULL);
            if (comp_on && (comp->methods & STALE_DCASGD)) { // this micro-batch's gradient alone, then into the step's and the sums
                memset(g1, 0, (n + vc) * sizeof(float));
                gpt2_backward_weight(&CFG, &all, a, ga, NULL, &g1v, g1 + n, 1);
                compensation_dc_accumulate(grads, dc_a, dc_b, g1, w, n);
                compensation_dc_accumulate(head, dc_a + n, dc_b + n, g1 + n, w, vc);
                dc_any = 1;
            } else {
                gpt2_backward_weight(&CFG, &all, a, ga, NULL, stage_cpu_grad_views(&s, 0), head, 1);
            }
        }
        losses[t] = (float)(loss_sum / M);
        if (dc_any) { // corrected towards the weights this update applies to
            compensation_dc_correct(grads, dc_a, dc_b, s.params, n, comp->dc_lambda);
            compensation_dc_correct(head, dc_a + n, dc_b + n, s.params, vc, comp->dc_lambda);
        }
        double wte_sq = stage_tie_local(&s, 0);
        memset(units, 0, sizeof(units));
        stage_grad_unit_sumsq(&s, 0, wte_sq, units);
        double sq = 0.0;
        for (int i = 0; i < CFG.num_layers + 2; i++) sq += units[i];
        float norm = (float)sqrt(sq), scale = norm > CLIP ? CLIP / norm : 1.0f;
        float lr = adamw_lr_schedule(t, STEPS, WARMUP, LR, FINAL);
        if (comp && (comp->methods & STALE_LR)) lr *= (float)ref_lr_factor(W, comp, t);
        stage_update(&s, 0, &opt, lr, t + 1, scale);
        stage_zero_grad(&s, 0);
    }
    memcpy(params, s.params, n * sizeof(float));
    free(versions);
    free(mom_m);
    free(mom_v);
    free(w);
    free(g1);
    free(dc_a);
    free(dc_b);
    dataloader_free(&dl);
    stage_destroy(&s);
}

// The compensation kernels against their formulas written out in double. The reference above runs
// these same kernels (compensation_dc_accumulate, dc_correct, compensation_predict), so a wrong kernel passes there: a
// sign flipped in DC-ASGD's correction, g instead of g^2, or weight decay dropped from the prediction
// all did. Tolerance 1e-5 of the sum of the magnitudes of the terms: each element is a dozen float
// operations, each rounding by 2^-24 (6e-8) of its operands, so 1e-6 at most; the mutants are O(1) off.
static void test_kernels(void) {
    enum { N = 1000, K = 3 };
    static float g[K][N], used[K][N], now[N], acc[N], a[N], b[N], w[N], m[N], v[N], out[N];
    Rng r;
    rng_init(&r, 21);
    for (int i = 0; i < N; i++) {
        now[i] = rng_normal(&r);
        for (int k = 0; k < K; k++) g[k][i] = rng_normal(&r), used[k][i] = now[i] + rng_normal(&r);
    }
    const float lambda = 2.0f; // the correction as large as the gradient, so that a wrong one shows
    memset(acc, 0, sizeof acc), memset(a, 0, sizeof a), memset(b, 0, sizeof b);
    for (int k = 0; k < K; k++) compensation_dc_accumulate(acc, a, b, g[k], used[k], N);
    compensation_dc_correct(acc, a, b, now, N, lambda);
    double worst = 0.0;
    int cleared = 1;
    for (int i = 0; i < N; i++) {
        double want = 0.0, mag = 0.0;
        for (int k = 0; k < K; k++) { // DESIGN.md: g + lambda g (.) g (.) (w_now - w_used), each micro-batch at its own w_used
            double gk = g[k][i], c = (double)lambda * gk * gk;
            want += gk + c * ((double)now[i] - used[k][i]);
            mag += fabs(gk) + fabs(c * now[i]) + fabs(c * used[k][i]);
        }
        worst = fmax(worst, fabs(acc[i] - want) / mag);
        cleared &= a[i] == 0.0f && b[i] == 0.0f;
    }
    CHECK(worst <= 1e-5, "DC-ASGD over %d micro-batches: sum of g + lambda g^2 (w_now - w_used) to %.1e of its terms (bound 1e-5)", K, worst);
    CHECK(cleared, "  and dc_correct leaves its two sums zero for the next step");
    const float lr_sum = 0.05f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const int t = 3;
    for (int i = 0; i < N; i++) w[i] = rng_normal(&r), m[i] = 0.1f * rng_normal(&r), v[i] = 1e-4f + 0.01f * rng_f32(&r);
    compensation_predict(out, w, m, v, N, lr_sum, b1, b2, eps, wd, t);
    worst = 0.0;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int i = 0; i < N; i++) { // AdamW's step at version t's moments (bias-corrected) and decay, lr_sum of it
        double dir = (m[i] / bc1) / (sqrt(v[i] / bc2) + eps), want = w[i] - lr_sum * (dir + wd * (double)w[i]);
        worst = fmax(worst, fabs(out[i] - want) / (fabs(w[i]) + lr_sum * (fabs(dir) + wd * fabs(w[i]))));
    }
    CHECK(worst <= 1e-5, "weight prediction: w - lr_sum (m^ / (sqrt(v^) + eps) + wd w) to %.1e of its terms (bound 1e-5)", worst);
}

// the drift monitor's figures of one unit: cosine and |a - e| / |e|, against values worked by hand
// LR scaling in a chunk that starts at a later step (a resume, or a checkpoint's consistency point):
// the pipeline starts empty there, so update first_step + k has the factor of step k of a run from step
// 0 (1 at k = 0, nothing stale yet), except that prediction runs version first_step on as well (it has
// moments). The resume test
// cannot see a factor that forgets first_step: the unbroken run splits into the same chunks.
static void test_lr_factor_late_chunk(void) {
    const unsigned methods[2] = {STALE_LR, STALE_PREDICT | STALE_LR};
    int same = 1, cases = 0;
    for (int W = 2; W <= 2 * M; W += 2)
        for (int mi = 0; mi < 2; mi++) {
            StaleComp comp = {methods[mi], 0, 0.0f, 0};
            Schedule sch;
            char err[256];
            if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 1, .M = M, .W = W, .first_step = 5, .n_steps = STEPS}, err, sizeof err))
                td_fatal("%s", err);
            for (int k = 0; k < STEPS; k++, cases++) same &= staleness_lr_factor(&comp, &sch, 0, 5 + k) == ref_lr_factor_from(5, W, &comp, k);
            schedule_free(&sch);
        }
    CHECK(same, "LR scaling in a chunk from step 5: update 5 + k has the reference's factor (%d cases, W 2..%d, with and without prediction)",
          cases, 2 * M);
}

static void test_drift_figures(void) {
    const float a[3] = {6, 8, 0}, e[3] = {0, 4, 3}, zero[3] = {0, 0, 0}; // |a| 10, |e| 5, a.e 32, |a - e|^2 61
    DriftUnit u = {0}, ze = {0}, az = {0}, zz = {0};
    drift_compare_add(a, e, 3, &u);
    drift_compare_add(zero, e, 3, &ze);
    drift_compare_add(a, zero, 3, &az);
    drift_compare_add(zero, zero, 3, &zz);
    CHECK(fabs(drift_cosine(&u) - 0.64) < 1e-12 && fabs(drift_rel_err(&u) - sqrt(61.0) / 5) < 1e-12,
          "drift: cosine 32 / 50 = 0.64 (%.12g), relative error sqrt(61) / |e| = 1.562 (%.12g)", drift_cosine(&u), drift_rel_err(&u));
    CHECK(drift_cosine(&ze) == 0.0 && drift_rel_err(&ze) == 1.0 && drift_cosine(&az) == 0.0 && isinf(drift_rel_err(&az)) &&
              drift_cosine(&zz) == 1.0 && drift_rel_err(&zz) == 0.0,
          "drift: a zero gradient against a nonzero one has cosine 0 (relative error 1, or infinite against a zero exact one); two zeros agree");
}

// one executor run of the tdpipe schedule at P = 1, W = M, with clipping threshold clip and the guard's
// spike_z and loss window (in and out); the weights into params (n); returns the refused step or -1
static int guarded_run(Comm* comm, const float* init, size_t n, float clip, float spike_z, LossWindow* window, float* params, char* why) {
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    char err[256];
    Stage st;
    stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
    stage_reserve(&st, 1, 1, 1, 0);
    DataLoader dl;
    loader(&dl);
    CommLink link;
    comm_mpi_link(comm, &link);
    Executor ex = {.comm = comm, .stage = &st, .data = &dl, .link = &link, .optim = {adamw(), STEPS, WARMUP, FINAL, clip},
                   .spike_z = spike_z, .losses = *window, .drift_step = -1, .on_step = on_step};
    Schedule sch;
    if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 1, .M = M, .W = M, .n_steps = STEPS}, err, sizeof(err))) td_fatal("%s", err);
    memset(g_losses, 0, sizeof(g_losses));
    executor_run(&ex, &sch);
    *window = ex.losses;
    memcpy(params, st.params, n * sizeof(float));
    strcpy(why, ex.halt_reason);
    int halted = ex.halted_step;
    schedule_free(&sch);
    executor_free(&ex);
    dataloader_free(&dl);
    stage_destroy(&st);
    return halted;
}

// --clip 0 is "off" (not a threshold of 0, which would scale every gradient to nothing), and the
// guard: every applied step's loss joins its window, and a loss far above the window's is refused
static void test_clip_and_guard(Comm* comm, const float* init, size_t n) {
    float* p_off = (float*)malloc_check(n * sizeof(float));
    float* p_huge = (float*)malloc_check(n * sizeof(float));
    float* p_one = (float*)malloc_check(n * sizeof(float));
    float l_off[STEPS], l_huge[STEPS];
    char why[96];
    LossWindow empty = {{0}, 0, 0}, w = empty;
    int h_off = guarded_run(comm, init, n, 0.0f, 0.0f, &w, p_off, why);
    memcpy(l_off, g_losses, sizeof l_off);
    int remembered = w.n == STEPS && w.next == STEPS;
    for (int i = 0; i < STEPS && remembered; i++) remembered = w.loss[i] == (double)g_losses[i];
    CHECK(remembered, "the guard's window holds the %d applied steps' losses in order (n %d, next %d)", STEPS, w.n, w.next);
    w = empty;
    int h_huge = guarded_run(comm, init, n, 1e30f, 0.0f, &w, p_huge, why);
    memcpy(l_huge, g_losses, sizeof l_huge);
    CHECK(h_off < 0 && h_huge < 0 && !memcmp(l_off, l_huge, sizeof l_off) && !memcmp(p_off, p_huge, n * sizeof(float)),
          "clip 0 (off): losses and weights bitwise those of a threshold no norm reaches (last loss %.7f)", l_off[STEPS - 1]);
    w = empty;
    guarded_run(comm, init, n, 1.0f, 0.0f, &w, p_one, why);
    CHECK(memcmp(p_one, p_off, n * sizeof(float)) != 0, "  and clip 1 clips in this run (the check can fail)");
    // a window of GUARD_MIN losses about 1.05 (standard deviation 0.05): the first step's loss, ln 256 = 5.5, is a spike
    LossWindow calm = empty;
    for (int i = 0; i < GUARD_MIN; i++) calm.loss[i] = i % 2 ? 1.1 : 1.0;
    calm.n = calm.next = GUARD_MIN;
    w = calm;
    int h = guarded_run(comm, init, n, CLIP, 3.0f, &w, p_one, why);
    CHECK(h == 0 && strstr(why, "a loss spike") && w.n == GUARD_MIN && !memcmp(p_one, init, n * sizeof(float)),
          "--spike-z 3 after a calm window: step 1 refused (%s), its loss not remembered, no update applied", why);
    w = calm;
    h = guarded_run(comm, init, n, CLIP, 0.0f, &w, p_one, why);
    CHECK(h < 0 && w.n == GUARD_MIN + STEPS, "  spike_z 0: the same run goes through (refused step %d)", h);
    free(p_off);
    free(p_huge);
    free(p_one);
}

// Recomputation's weight half (zero-bubble's BW) runs the forward again when the working set holds
// another micro-batch: with the weights the micro-batch ran on, found again from its op, not with
// whatever is current. Sequence: F0, F1, BI0 (slot 0 recomputed), B1 (slot 1 recomputed, its gradient
// into slot k), then BW0 must recompute slot 0 on version 0. Run once with no update before BW0, once
// with version 0 stashed and an update between: BW0's gradient is bitwise the same. Without the stash
// the stage refuses (a child process), naming the version, rather than use version 1's weights.
enum { RC_NEVER, RC_STASHED, RC_UNSTASHED }; // what comes between B1 and BW0
#define RC_CHILD_FLAG "--recompute-unstashed" // main runs RC_UNSTASHED alone
static void recompute_bw(const float* init, int between, float* grads_out, int* moved) {
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    Stage st;
    stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init, .recompute = 1});
    stage_reserve(&st, 2, 2, 1, 1); // two slots, two gradient buffers (BI0's must outlive B1), one stash
    for (int slot = 0; slot < 2; slot++)
        for (int i = 0; i < B * T; i++) {
            stage_inputs(&st, slot)[i] = g_tokens[slot * B * T + i];
            stage_targets(&st, slot)[i] = g_tokens[slot * B * T + i + 1];
        }
    Op f0 = {OP_F, 0, 0, 0, 0}, f1 = {OP_F, 0, 1, 0, 0}, bi0 = {OP_BI, 0, 0, 0, 0}, b1 = {OP_B, 0, 1, 0, 0}, bw0 = {OP_BW, 0, 0, 0, 0};
    float dloss = 1.0f / (B * T);
    stage_forward(&st, &f0, 0, 1);
    stage_forward(&st, &f1, 1, 1);
    stage_backward_input(&st, &bi0, 0, 0, dloss);
    stage_backward_input(&st, &b1, 1, 1, dloss);
    stage_backward_weight(&st, &b1, 1, 1, NULL, NULL);
    if (between == RC_NEVER) {
        stage_zero_grad(&st, 0);
    } else {
        if (between == RC_STASHED) stage_stash_current(&st);
        AdamWConfig o = adamw();
        stage_update(&st, 0, &o, LR, 1, 1.0f); // moves the weights (B1's gradient): version 1
        stage_zero_grad(&st, 0);
    }
    *moved = memcmp(st.params, init, st.num_params * sizeof(float)) != 0;
    stage_backward_weight(&st, &bw0, 0, 0, NULL, NULL);
    memcpy(grads_out, stage_cpu_grads(&st, 0), st.num_params * sizeof(float));
    stage_destroy(&st);
}

static void test_recompute_weight_half(const char* self, const float* init, size_t n) {
    float* never = (float*)malloc_check(n * sizeof(float));
    float* stashed = (float*)malloc_check(n * sizeof(float));
    int moved_never, moved;
    recompute_bw(init, RC_NEVER, never, &moved_never);
    recompute_bw(init, RC_STASHED, stashed, &moved);
    double sq = 0.0;
    for (size_t i = 0; i < n; i++) sq += (double)never[i] * never[i];
    CHECK(!moved_never && moved, "--recompute: the update between the halves moved the weights (the check below can fail)");
    CHECK(sq > 0.0 && memcmp(never, stashed, n * sizeof(float)) == 0,
          "--recompute: a weight half after an update recomputes on the stashed version, bitwise its gradient without the update (|g|^2 %.6g)", sq);
    // the refusal in a fresh process of this program (a forked copy of an OpenMP process hangs in its
    // first parallel region), its stderr read back
    int fds[2];
    char msg[512] = "";
    if (pipe(fds) != 0) td_fatal("pipe failed");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, RC_CHILD_FLAG, (char*)NULL);
        _exit(127);
    }
    close(fds[1]);
    ssize_t got, have = 0;
    while (have < (ssize_t)sizeof msg - 1 && (got = read(fds[0], msg + have, sizeof msg - 1 - have)) > 0) have += got;
    msg[have] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(msg, "the weight half of step 0 micro-batch 0 runs its forward again (--recompute), but its weights (version 0) are neither current nor stashed"),
          "  and with version 0 not stashed it refuses instead of recomputing on version 1: %s", msg);
    free(never);
    free(stashed);
}

// A zero-bubble list with a window, which no schedule the trainer builds has: step 1's forward runs
// on version 0 before U0, its input half after U0 (on the stash), and step 2's forward takes the
// working set before step 1's weight half. Under --recompute that weight half runs the forward again
// on version 0, so the executor must keep the stash until then: the losses and weights are bitwise
// those of the run that kept the activations (and the weight half needs no weights there).
static void split_window_run(Comm* comm, const float* init, size_t n, int recompute, float* params, float* losses) {
    static const Op LIST[] = {{OP_F, 0, 0, 0, 0},  {OP_F, 1, 0, 0, 0},  {OP_BI, 0, 0, 0, 0}, {OP_BW, 0, 0, 0, 0},
                              {OP_U, 0, -1, 1, 0}, {OP_BI, 1, 0, 0, 0}, {OP_F, 2, 0, 1, 0},  {OP_BW, 1, 0, 0, 0},
                              {OP_U, 1, -1, 2, 0}, {OP_BI, 2, 0, 1, 0}, {OP_BW, 2, 0, 1, 0}, {OP_U, 2, -1, 3, 0}};
    enum { SPLIT_STEPS = 3 };
    Schedule sch = {.kind = SCHED_ZBH1, .P = 1, .M = 1, .W = 0, .first_step = 0, .n_steps = SPLIT_STEPS};
    sch.stage_W = (int*)calloc_check(1, sizeof(int));
    sch.n_ops = (int*)malloc_check(sizeof(int));
    sch.n_ops[0] = (int)(sizeof LIST / sizeof LIST[0]);
    sch.ops = (Op**)malloc_check(sizeof(Op*));
    sch.ops[0] = (Op*)malloc_check(sizeof LIST);
    memcpy(sch.ops[0], LIST, sizeof LIST);
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    Stage st;
    stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init, .recompute = recompute});
    DataLoader dl;
    loader(&dl);
    CommLink link;
    comm_mpi_link(comm, &link);
    Executor ex = {.comm = comm, .stage = &st, .data = &dl, .link = &link, .optim = {adamw(), SPLIT_STEPS, WARMUP, FINAL, CLIP},
                   .drift_step = -1, .on_step = on_step};
    memset(g_losses, 0, sizeof(g_losses));
    executor_run(&ex, &sch);
    memcpy(losses, g_losses, SPLIT_STEPS * sizeof(float));
    memcpy(params, st.params, n * sizeof(float));
    schedule_free(&sch);
    executor_free(&ex);
    dataloader_free(&dl);
    stage_destroy(&st);
}

static void test_split_window_recompute(Comm* comm, const float* init, size_t n) {
    float* kept = (float*)malloc_check(n * sizeof(float));
    float* again = (float*)malloc_check(n * sizeof(float));
    float l_kept[3], l_again[3];
    split_window_run(comm, init, n, 0, kept, l_kept);
    split_window_run(comm, init, n, 1, again, l_again);
    CHECK(!memcmp(l_kept, l_again, sizeof l_kept) && !memcmp(kept, again, n * sizeof(float)) && memcmp(kept, init, n * sizeof(float)),
          "a zero-bubble list with a window: --recompute's weight half of step 1 on the stashed version 0, bitwise the kept run "
          "(losses %.7f %.7f %.7f)", l_again[0], l_again[1], l_again[2]);
    free(kept);
    free(again);
}

int main(int argc, char** argv) {
    MarkovSource src;
    markov_init(&src, 11);
    markov_generate(&src, g_tokens, TOKENS, 12);
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(&CFG, &all, sizes);
    float* init = (float*)malloc_check(n * sizeof(float));
    float* ref = (float*)malloc_check(n * sizeof(float));
    gpt2_init_full(&CFG, init, 5);
    if (argc == 2 && !strcmp(argv[1], RC_CHILD_FLAG)) {
        int moved;
        recompute_bw(init, RC_UNSTASHED, ref, &moved); // expected to stop in td_fatal
        return 0;
    }
    Comm comm;
    comm_init(&comm, &argc, &argv);
    char err[256];
    if (comm_grid(&comm, 1, PLACE_STAGES_FIRST, err, sizeof(err))) td_fatal("%s", err);
    int windows[] = {0, 1, M / 2, M, M + 1, 2 * M};
    for (size_t k = 0; k < sizeof(windows) / sizeof(windows[0]); k++) {
        int W = windows[k];
        float ref_losses[STEPS];
        reference(W, NULL, init, n, ref, ref_losses);

        Stage st;
        stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
        stage_reserve(&st, 1, 1, 1, 0); // one micro-batch at a time
        DataLoader dl;
        loader(&dl);
        CommLink link;
        comm_mpi_link(&comm, &link);
        Trace trace;
        trace_init(&trace, 1);
        Executor ex = {.comm = &comm, .stage = &st, .data = &dl, .link = &link,
                       .optim = {adamw(), STEPS, WARMUP, FINAL, CLIP}, .trace = &trace, .on_step = on_step};
        Schedule sch;
        if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 1, .M = M, .W = W, .n_steps = STEPS}, err, sizeof(err))) td_fatal("%s", err);
        memset(g_losses, 0, sizeof(g_losses));
        executor_run(&ex, &sch);
        int stale = schedule_max_staleness(&sch);
        CHECK(memcmp(g_losses, ref_losses, sizeof(g_losses)) == 0,
              "W = %d (staleness up to %d): %d step losses bitwise equal to stale SGD written out (last %.7f vs %.7f)", W, stale,
              STEPS, g_losses[STEPS - 1], ref_losses[STEPS - 1]);
        CHECK(memcmp(st.params, ref, n * sizeof(float)) == 0, "  and the final weights (%zu floats)", n);
        // One process has no messages: every op's input is there once its dependency has run, which
        // is also what the simulator's run at nominal times sees. Both pick through
        // schedule_tdpipe_pick, so the executor's live order is the schedule's list op for op.
        int same = (int)trace.n == sch.n_ops[0];
        for (int i = 0; same && i < sch.n_ops[0]; i++) {
            char name[32];
            schedule_op_name(&sch.ops[0][i], name, sizeof(name));
            same = strcmp(name, trace.events[i].name) == 0;
        }
        CHECK(same, "  the executor ran the %d ops in the order the simulator's run of the same policy lists them", sch.n_ops[0]);
        trace_free(&trace);
        schedule_free(&sch);
        executor_free(&ex);
        dataloader_free(&dl);
        stage_destroy(&st);
    }
    // each compensation method against its written-out reference, for windows making some, half and
    // every micro-batch of a step stale (and two updates stale), tau 0 and 1
    // {methods, curvature}: prediction in both orders, alone and with the others
    const struct { unsigned methods; int curvature; } methods[] = {
        {STALE_PREDICT, 0}, {STALE_PREDICT, 1}, {STALE_DCASGD, 0}, {STALE_LR, 0}, {STALE_PREDICT | STALE_LR, 0},
        {STALE_PREDICT | STALE_LR, 1}, {STALE_PREDICT | STALE_DCASGD, 1}};
    int comp_windows[] = {1, M / 2, M, 2 * M};
    for (size_t mi = 0; mi < sizeof(methods) / sizeof(methods[0]); mi++)
        for (int tau = 0; tau <= 1; tau++)
            for (size_t k = 0; k < sizeof(comp_windows) / sizeof(comp_windows[0]); k++) {
                int W = comp_windows[k];
                StaleComp comp = {methods[mi].methods, tau, 300.0f, methods[mi].curvature};
                float ref_losses[STEPS];
                reference(W, &comp, init, n, ref, ref_losses);
                Stage st;
                stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
                stage_reserve(&st, 1, 1, 1, 0); // one micro-batch at a time
                stage_use_compensation(&st, &comp);
                DataLoader dl;
                loader(&dl);
                CommLink link;
                comm_mpi_link(&comm, &link);
                Executor ex = {.comm = &comm, .stage = &st, .data = &dl, .link = &link, .optim = {adamw(), STEPS, WARMUP, FINAL, CLIP},
                               .comp = &comp, .on_step = on_step};
                Schedule sch;
                if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 1, .M = M, .W = W, .n_steps = STEPS}, err, sizeof(err)))
                    td_fatal("%s", err);
                memset(g_losses, 0, sizeof(g_losses));
                executor_run(&ex, &sch);
                CHECK(memcmp(g_losses, ref_losses, sizeof(g_losses)) == 0 && memcmp(st.params, ref, n * sizeof(float)) == 0,
                      "--stale-comp %s%s, tau %d, W = %d: losses and final weights bitwise equal to the method written out (last loss %.7f vs %.7f)",
                      staleness_name(comp.methods), comp.curvature ? " (second order)" : "", tau, W, g_losses[STEPS - 1], ref_losses[STEPS - 1]);
                float plain[STEPS];
                reference(W, NULL, init, n, ref, plain);
                int stale_beyond_tau = schedule_max_staleness(&sch) > tau;
                CHECK(!stale_beyond_tau || memcmp(plain, ref_losses, sizeof(plain)) != 0, "  and it changes the run (%.7f without)", plain[STEPS - 1]);
                schedule_free(&sch);
                executor_free(&ex);
                dataloader_free(&dl);
                stage_destroy(&st);
            }
    // the check can fail: a reference that forwards on the current weights instead of the stale
    // ones disagrees with the executor from the first stale step on
    float no_stash[STEPS];
    reference(0, NULL, init, n, ref, no_stash);
    float stale_run[STEPS];
    reference(M, NULL, init, n, ref, stale_run);
    CHECK(memcmp(no_stash, stale_run, sizeof(no_stash)) != 0 && no_stash[0] == stale_run[0],
          "W = M differs from W = 0 after the first step (%.7f vs %.7f at step 2): staleness is visible", stale_run[1], no_stash[1]);
    test_kernels();
    test_lr_factor_late_chunk();
    test_drift_figures();
    test_clip_and_guard(&comm, init, n);
    test_recompute_weight_half(argv[0], init, n);
    test_split_window_recompute(&comm, init, n);
    free(init);
    free(ref);
    comm_finalize(&comm);
    return test_summary();
}
