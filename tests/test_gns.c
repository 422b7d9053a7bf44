// The gradient noise scale: the estimators (tdpipe/gns.h) recover |G|^2 and tr(Sigma) exactly from
// exact expectations and without bias from sampled gradients of known G and Sigma; and the
// executor's --gns figures equal a direct computation on a tiny model (every micro-batch's gradient
// computed on its own, the step's accumulated), step by step; the factor weight prediction extrapolates
// --lr-gns with is the one the next update applies when its estimate is the smoothed one.
#include <math.h>
#include <string.h>
#include "llmc/builtin_data.h"
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/global_norm.h"
#include "llmc/gpt2.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
#include "tdpipe/executor.h"
#include "tdpipe/gns.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cpu.h"
#include "tests/test.h"

static void test_exact(void) {
    double G2 = 3.5, S = 40.0, bs = 16, bb = 128, g2, tr;
    gns_estimate(G2 + S / bs, G2 + S / bb, bs, bb, &g2, &tr);
    CHECK(fabs(g2 - G2) <= 1e-12 * G2 && fabs(tr - S) <= 1e-12 * S, "from exact expectations: |G|^2 %.12g (want %g), tr(Sigma) %.12g (want %g)", g2, G2, tr, S);
}

// per-example gradients G + e, e ~ N(0, sigma^2 I) in d dimensions: tr(Sigma) = d sigma^2; a batch of b
// examples averages them. Over K independent steps the estimates' means must land within 4 standard
// errors (estimated from the same K samples) of the truth: the estimators are unbiased.
static void test_unbiased(void) {
    enum { D = 40, K = 4000, BS = 4, BB = 16 };
    double G[D], sigma = 0.5, G2 = 0.0;
    Rng rng;
    rng_init(&rng, 2024);
    for (int i = 0; i < D; i++) {
        G[i] = 0.1 * rng_normal(&rng);
        G2 += G[i] * G[i];
    }
    double S = D * sigma * sigma, m_g = 0, m_t = 0, v_g = 0, v_t = 0;
    for (int k = 0; k < K; k++) {
        double small = 0.0, big[D] = {0};
        for (int j = 0; j < BB / BS; j++) { // BB / BS small batches make the big one
            double gs[D] = {0};
            for (int e = 0; e < BS; e++)
                for (int i = 0; i < D; i++) gs[i] += (G[i] + sigma * rng_normal(&rng)) / BS;
            for (int i = 0; i < D; i++) small += gs[i] * gs[i] / (BB / BS), big[i] += gs[i] / (BB / BS);
        }
        double bigsq = 0.0, g2, tr;
        for (int i = 0; i < D; i++) bigsq += big[i] * big[i];
        gns_estimate(small, bigsq, BS, BB, &g2, &tr);
        m_g += g2 / K, m_t += tr / K, v_g += g2 * g2 / K, v_t += tr * tr / K;
    }
    double se_g = sqrt((v_g - m_g * m_g) / K), se_t = sqrt((v_t - m_t * m_t) / K);
    CHECK(fabs(m_g - G2) <= 4 * se_g, "sampled: mean |G|^2 estimate %.5f against %.5f (4 standard errors: %.5f)", m_g, G2, 4 * se_g);
    CHECK(fabs(m_t - S) <= 4 * se_t, "sampled: mean tr(Sigma) estimate %.4f against %.4f (4 standard errors: %.4f)", m_t, S, 4 * se_t);
}

// ---- the executor against a direct computation -------------------------------------------------

enum { B = 2, T = 8, M = 4, STEPS = 4, TOKENS = 4096 };
static const GPT2Config CFG = {T, 256, 256, 2, 2, 16}; // maxT, V, Vp, L, NH, C
static uint16_t g_tokens[TOKENS];
static double g_b[STEPS];

static void on_step(void* ctx, const StepReport* r) {
    if (r->step >= 1 && r->step <= STEPS) g_b[r->step - 1] = r->b_simple;
}

static void loader(DataLoader* dl) {
    char err[256];
    if (dataloader_init_memory(dl, g_tokens, TOKENS, B, T, 0, 1, 0, 7, CFG.vocab_size, err, sizeof(err))) td_fatal("%s", err);
}

static AdamWConfig adamw(void) { return (AdamWConfig){3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f}; }

// adds |g|^2 per unit of the stage (slices in stage_slices order), the LM head's share in unit L + 2,
// into u (L + 3); returns their sum folded in unit order
static double units_sumsq(const Stage* st, const float* g, const float* head, double* u) {
    StageSlice sl[STAGE_MAX_SLICES(CFG.num_layers)];
    int n = stage_slices(st, sl);
    double sum = 0.0;
    for (int i = 0; i < n; i++) u[sl[i].unit] += global_norm_sumsq(g + sl[i].off, sl[i].n);
    u[CFG.num_layers + 2] += global_norm_sumsq(head, st->sizes[0]);
    for (int i = 0; i < CFG.num_layers + 3; i++) sum += u[i];
    return sum;
}

static void test_executor(Comm* comm) {
    MarkovSource src;
    markov_init(&src, 3);
    markov_generate(&src, g_tokens, TOKENS, 4);
    GPT2Range all = {0, CFG.num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(&CFG, &all, sizes);
    float* init = (float*)malloc_check(n * sizeof(float));
    gpt2_init_full(&CFG, init, 9);
    // the executor, one process, 1F1B, --gns
    Stage st;
    stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
    stage_reserve(&st, 1, 1, 1, 0); // one micro-batch at a time
    st.gns = 1;
    DataLoader dl;
    loader(&dl);
    CommLink link;
    comm_mpi_link(comm, &link);
    Executor ex = {.comm = comm, .stage = &st, .data = &dl, .link = &link, .optim = {adamw(), STEPS, 0, 1.0f, 0.0f}, .gns = 1, .on_step = on_step};
    char err[256];
    Schedule sch;
    if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 1, .M = M, .n_steps = STEPS}, err, sizeof(err))) td_fatal("%s", err);
    executor_run(&ex, &sch);
    schedule_free(&sch);
    // directly: every micro-batch's gradient on its own, then the step's
    Stage ref;
    stage_create(&ref, &STAGE_CPU, &(StageInit){.cfg = &CFG, .range = all, .B = B, .T = T, .full = init});
    stage_reserve(&ref, 1, 1, 1, 0); // one micro-batch at a time
    DataLoader dl2;
    loader(&dl2);
    float* g1 = (float*)calloc_check(n, sizeof(float));          // (n) one micro-batch's gradient
    float* h1 = (float*)calloc_check(ref.sizes[0], sizeof(float)); // (Vp*C) its LM-head share
    ParameterTensors g1v;
    gpt2_point_params(&g1v, g1, ref.sizes);
    GPT2Acts* a = stage_cpu_acts(&ref, 0);
    GPT2GradActs* ga = stage_cpu_gacts(&ref, 0);
    GnsState gs = {0};
    int same = 1;
    double worst = 0.0;
    for (int t = 0; t < STEPS; t++) {
        // the slot's buffers, fetched each step: an accessor makes a slot left FRESH by the update exact in memory
        float* acc = stage_cpu_grads(&ref, 0);
        float* head = stage_cpu_dwte_head(&ref, 0);
        double small = 0.0, small_u[8] = {0}, big_u[8] = {0}; // (L + 3) per unit, summed over micro-batches as the executor does
        for (int m = 0; m < M; m++) {
            if (dataloader_next(&dl2, a->inputs, a->targets)) td_fatal("%s", dl2.err);
            gpt2_forward(&CFG, &all, &ref.p, a, 1, NULL);
            gpt2_backward_input(&CFG, &all, &ref.p, a, ga, NULL, 1.0f / ((float)B * T * M), NULL);
            memset(g1, 0, n * sizeof(float));
            memset(h1, 0, ref.sizes[0] * sizeof(float));
            gpt2_backward_weight(&CFG, &all, a, ga, NULL, &g1v, h1, 1);
            small = units_sumsq(&ref, g1, h1, small_u);
            for (size_t i = 0; i < n; i++) acc[i] += g1[i];
            for (size_t i = 0; i < ref.sizes[0]; i++) head[i] += h1[i];
        }
        double big = units_sumsq(&ref, acc, head, big_u); // the shares apart, before they are summed
        double b = gns_update(&gs, M * small, big, (double)B * T, (double)B * T * M, NULL);
        same &= b == g_b[t];
        worst = fmax(worst, fabs(b - g_b[t]) / fabs(b));
        stage_tie_local(&ref, 0);
        stage_update(&ref, 0, &ex.optim.adamw, adamw_lr_schedule(t, STEPS, 0, ex.optim.adamw.lr, 1.0f), t + 1, 1.0f);
        stage_zero_grad(&ref, 0);
    }
    CHECK(same, "the executor's B_simple equals the direct computation bitwise over %d steps (largest relative difference %.2e; last %.4f)", STEPS,
          worst, g_b[STEPS - 1]);
    free(g1);
    free(h1);
    free(init);
    dataloader_free(&dl);
    dataloader_free(&dl2);
    executor_free(&ex);
    stage_destroy(&st);
    stage_destroy(&ref);
}

// the smoothed estimates fed back as a step's own leave the smoothed B unchanged (the debiased moving
// average of its own value), so gns_update's factor for that step is the factor "now"
static void test_factor_now(void) {
    GnsState st = {0};
    const double bs = 64, bb = 512;
    CHECK(gns_lr_factor_now(&st, bb) == 1.0, "before any estimate the factor is 1");
    Rng r;
    rng_init(&r, 7);
    int checked = 0, moved = 0;
    for (int t = 0; t < 30; t++) {
        double debias = 1.0 - pow(GNS_DECAY, (double)st.n);
        double now = gns_lr_factor_now(&st, bb);
        if (st.n > 0 && st.g2_ema > 0) {
            double g2 = st.g2_ema / debias, trace = st.s_ema / debias, f = 0.0;
            GnsState copy = st;
            gns_update(&copy, g2 + trace / bs, g2 + trace / bb, bs, bb, &f);
            CHECK(fabs(f - now) <= 1e-9 * now, "step %d: the factor now %.12g is the next update's for the smoothed estimate (%.12g)", t, now, f);
            checked++;
            moved += now != 1.0;
        }
        if (st.b_n < GNS_WARM) CHECK(now == 1.0, "step %d: before %d estimates the factor is 1 (%.12g)", t, GNS_WARM, now);
        double G2 = 1.0 + rng_f32(&r), S = 200.0 * (0.2 + 3.0 * rng_f32(&r)); // noise that moves B_simple about
        gns_update(&st, G2 + S / bs, G2 + S / bb, bs, bb, NULL);
    }
    CHECK(checked >= 29 && moved >= 10, "checked at %d steps, the factor away from 1 at %d", checked, moved);
}

// --lr-gns's factor (gns.h): (1 + mean B / b_big) / (1 + B / b_big), clamped to [0.5, 2]. A state whose
// smoothed B_simple is s_ema / g2_ema (any n: the debias cancels), after GNS_WARM estimates of mean 100
static void test_factor_clamp(void) {
    const double bb = 100;
    GnsState st = {.g2_ema = 1.0, .n = 5, .b_sum = 100.0 * GNS_WARM, .b_n = GNS_WARM};
    st.s_ema = 150.0;
    double mid = gns_lr_factor_now(&st, bb);
    st.s_ema = 1000.0;
    double low = gns_lr_factor_now(&st, bb);
    st.s_ema = 0.0, st.b_sum = 1000.0 * GNS_WARM;
    double high = gns_lr_factor_now(&st, bb);
    CHECK(fabs(mid - 0.8) < 1e-12 && low == 0.5 && high == 2.0, "the factor: (1 + 1) / (1 + 1.5) = 0.8 (%.12g); 2 / 11 clamped to 0.5 (%g); 11 clamped to 2 (%g)",
          mid, low, high);
}

int main(int argc, char** argv) {
    Comm comm;
    comm_init(&comm, &argc, &argv);
    char err[256];
    if (comm_grid(&comm, 1, PLACE_STAGES_FIRST, err, sizeof(err))) td_fatal("%s", err);
    test_exact();
    test_unbiased();
    test_factor_now();
    test_factor_clamp();
    test_executor(&comm);
    comm_finalize(&comm);
    return test_summary();
}
