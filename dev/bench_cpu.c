// CPU benchmark of the training step and the matmul: ms per step and tokens/s at GPT-2 124M's shape
// and a small shape, and the matmul's GFLOP/s beside this machine's fp32 FMA peak measured in the same run.
// usage: build/dev/bench_cpu [steps (default 6)] [--small-only]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include "llmc/common.h"
#include "llmc/matmul.h"
#include "llmc/rng.h"
#include "tdpipe/stage.h"

#include "llmc/simd.h"
#define CHAINS 16 // independent FMA chains per thread: enough to cover FMA latency x ports

// fp32 FMA peak: every thread runs CHAINS independent vector FMA chains
static double fma_peak_gflops(void) {
    const long iters = 20000000;
    double best = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_seconds();
        float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
        {
            vfloat acc[CHAINS], a = (vfloat){0} + 0.999999f, b = (vfloat){0} + 1e-7f;
            for (int i = 0; i < CHAINS; i++) acc[i] = (vfloat){0} + (float)i;
            for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
                for (int i = 0; i < CHAINS; i++) acc[i] = acc[i] * a + b;
            }
            for (int i = 0; i < CHAINS; i++) sink += acc[i][0];
        }
        double dt = now_seconds() - t0;
        double g = (double)omp_get_max_threads() * iters * CHAINS * VL * 2 / dt / 1e9;
        if (g > best) best = g;
        if (sink == 12345.0f) printf(" ");
    }
    return best;
}

static float* random_floats(size_t n, uint64_t seed) {
    float* x = (float*)malloc_check(n * sizeof(float));
    Rng r;
    rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = rng_f32(&r) - 0.5f;
    return x;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

// median GFLOP/s of forward, backward-input and backward-weight on one linear-layer shape
static void bench_matmul(int N, int C, int OC, const char* label, double peak) {
    float* inp = random_floats((size_t)N * C, 1);
    float* w = random_floats((size_t)OC * C, 2);
    float* out = random_floats((size_t)N * OC, 3);
    float* dw = random_floats((size_t)OC * C, 4);
    float* db = random_floats(OC, 5);
    float* dinp = random_floats((size_t)N * C, 6);
    double flops = 2.0 * N * C * OC;
    const char* names[3] = {"fwd", "bwd_in", "bwd_w"};
    for (int which = 0; which < 3; which++) {
        double t[7];
        for (int rep = 0; rep < 7; rep++) {
            double t0 = now_seconds();
            if (which == 0) matmul_forward(out, inp, w, NULL, N, C, OC);
            else if (which == 1) matmul_backward_input(dinp, out, w, N, C, OC);
            else matmul_backward_weight(dw, db, out, inp, N, C, OC);
            t[rep] = now_seconds() - t0;
        }
        qsort(t, 7, sizeof(double), cmp_double);
        double g = flops / t[3] / 1e9;
        printf("  matmul  %-10s %6s %6d %6d %6d %10.3f %9.1f %7.1f%%\n", label, names[which], N, C, OC, t[3] * 1e3, g, 100.0 * g / peak);
    }
    free(inp); free(w); free(out); free(dw); free(db); free(dinp);
}

// median ms of full training steps (forward, backward, tied embedding, norm, AdamW) on random tokens
static void bench_step(const char* label, int L, int C, int NH, int V, int B, int T, int steps) {
    GPT2Config cfg = {1024, V, (V + 127) / 128 * 128, L, NH, C};
    GPT2Range all = {0, L, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    float* full = (float*)malloc_check(gpt2_param_sizes(&cfg, &all, sizes) * sizeof(float));
    gpt2_init_full(&cfg, full, 42);
    Stage s;
    stage_create(&s, &STAGE_CPU, &(StageInit){.cfg = &cfg, .range = all, .B = B, .T = T, .full = full});
    stage_reserve(&s, 1, 1, 1, 0); // one micro-batch at a time
    free(full);
    Rng r;
    rng_init(&r, 7);
    for (int i = 0; i < B * T; i++) {
        stage_inputs(&s, 0)[i] = (int)rng_below(&r, V);
        stage_targets(&s, 0)[i] = (int)rng_below(&r, V);
    }
    AdamWConfig opt = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    double* units = (double*)calloc_check(L + 2, sizeof(double));
    double* t = (double*)calloc_check(steps + 1, sizeof(double));
    for (int step = 0; step <= steps; step++) { // step 0 warms up and is left out
        double t0 = now_seconds();
        Op f = {.kind = OP_F, .step = step, .mb = 0, .version = s.version}, bw = {.kind = OP_B, .step = step, .mb = 0, .version = s.version};
        stage_forward(&s, &f, 0, 1);
        stage_backward(&s, &bw, 0, 1.0f / (B * T));
        stage_tie_local(&s, 0);
        stage_grad_unit_sumsq(&s, 0, units);
        float norm = grad_norm_from_units(units, L + 2);
        stage_update(&s, 0, &opt, 3e-4f, step + 1, norm > 1.0f ? 1.0f / norm : 1.0f);
        stage_zero_grad(&s, 0);
        t[step] = now_seconds() - t0;
    }
    qsort(t + 1, steps, sizeof(double), cmp_double);
    double med = t[1 + steps / 2];
    printf("  step    %-10s L %d C %d NH %d V %d B %d T %d: %zu params, median %.1f ms/step over %d steps, %.1f tokens/s\n", label, L, C, NH, V,
           B, T, s.num_params, med * 1e3, steps, B * T / med);
    free(units);
    free(t);
    stage_destroy(&s);
}

int main(int argc, char** argv) {
    int steps = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 6;
    int small_only = argc > 2 && !strcmp(argv[2], "--small-only");
    struct utsname u;
    uname(&u);
    char cpu[256] = "unknown";
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f))
            if (!strncmp(line, "model name", 10)) {
                char* p = strchr(line, ':');
                if (p) snprintf(cpu, sizeof(cpu), "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    printf("# bench_cpu: %s, %s, %d OpenMP threads, SIMD width %d floats\n", u.machine, cpu, omp_get_max_threads(), VL);
    printf("# command: %s %s%s\n", argv[0], argc > 1 ? argv[1] : "", argc > 2 ? " --small-only" : "");
    double peak = fma_peak_gflops();
    printf("  peak    fp32 FMA (measured) %.1f GFLOP/s\n", peak);
    printf("#         shape      pass        N      C     OC      ms/op   GFLOP/s  %%peak\n");
    bench_matmul(256, 768, 3072, "124M-fc", peak);
    bench_matmul(256, 768, 50304, "124M-head", peak);
    bench_matmul(256, 128, 512, "small-fc", peak);
    bench_step("small", 2, 128, 2, 256, 8, 64, steps * 4);
    if (!small_only) bench_step("124M", 12, 768, 12, 50257, 4, 64, steps);
    return 0;
}
