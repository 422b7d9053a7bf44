// Check of llmc/compensation.cuh against the CPU reference llmc/compensation.c: weight prediction (first
// and second order) into the compute type, the trajectory it reads, DC-ASGD's sums and correction.
// Prints "ok"/"FAIL" lines and "compensation_check: N passed, N failed"; exit code 1 on any failure.
// Usage: build/dev/cuda/compensation_check
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/compensation.h"
#include "llmc/compensation.cuh"
#include "llmc/rng.h"
#include "tests/test.h"

enum { N = 1 << 20 };

static void up(float* dst, const float* src) { cudaCheck(cudaMemcpy(dst, src, N * sizeof(float), cudaMemcpyHostToDevice)); }
static void down(float* dst, const float* src) { cudaCheck(cudaMemcpy(dst, src, N * sizeof(float), cudaMemcpyDeviceToHost)); }

// the largest |gpu - cpu| / max(|cpu|, floor) over n elements, and its index
static double worst_rel(const float* gpu, const float* cpu, size_t n, double floor, size_t* at) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]) / fmax(fabs((double)cpu[i]), floor);
        if (!(d <= worst)) worst = d, *at = i; // (a NaN is the worst)
    }
    return worst;
}

int main(int argc, char** argv) {
    const DevCli cli = {"compensation_check", "usage: build/dev/cuda/compensation_check   (no arguments)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 1) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[1]);
    cuda_device_init(0);
    printf("compensation_check: device %s, compute type %s\n", g_device_prop.name, sizeof(floatX) == 4 ? "fp32" : "bf16");
    // host (N): weights and moments as training has them, the trajectory, the CPU's and the GPU's results
    float *w = (float*)malloc_check(N * 4), *m = (float*)malloc_check(N * 4), *v = (float*)malloc_check(N * 4);
    float *w_prev = (float*)malloc_check(N * 4), *u_prev = (float*)malloc_check(N * 4);
    float *cpu = (float*)malloc_check(N * 4), *gpu = (float*)malloc_check(N * 4);
    float *g = (float*)malloc_check(N * 4), *a = (float*)malloc_check(N * 4), *b = (float*)malloc_check(N * 4);
    float *cpu2 = (float*)malloc_check(N * 4), *cpu3 = (float*)malloc_check(N * 4);
    Rng r;
    rng_init(&r, 3);
    for (size_t i = 0; i < N; i++) {
        w[i] = 0.02f * rng_normal(&r);
        m[i] = 1e-3f * rng_normal(&r);
        v[i] = 1e-6f * rng_f32(&r) * rng_f32(&r) + 1e-12f;
        w_prev[i] = w[i] - 1e-4f * rng_normal(&r);
        u_prev[i] = 1e-4f * rng_normal(&r);
        g[i] = 1e-3f * rng_normal(&r);
        a[i] = 1e-6f * rng_f32(&r);
        b[i] = a[i] * 0.02f * rng_normal(&r);
    }
    float *d_w, *d_m, *d_v, *d_wp, *d_up, *d_x, *d_g, *d_a, *d_b;
    floatX* d_out;
    float** dev[] = {&d_w, &d_m, &d_v, &d_wp, &d_up, &d_x, &d_g, &d_a, &d_b};
    for (int i = 0; i < 9; i++) cuda_malloc_check(dev[i], N * sizeof(float));
    cuda_malloc_check(&d_out, N * sizeof(floatX));
    up(d_w, w), up(d_m, m), up(d_v, v), up(d_wp, w_prev), up(d_up, u_prev);

    // weight prediction: the same fp32 formula on both sides, the GPU's result then rounded once into
    // floatX. Two errors, bounded per element: the rounding, half a floatX ulp of the result (2^-8
    // relative for bf16's 8 significant bits, 0 for fp32), and the fp32 arithmetic's, which is
    // relative to the terms summed, not to their sum: --use_fast_math's division and square root are
    // up to 2 ulp off, the compilers may contract into fmas differently, and where the update term
    // nearly cancels w the result is far smaller than either. So: |gpu - cpu| <= 2^-8 |cpu| +
    // 2^-20 (|w| + |the update term| + |the curvature term|), 8 fp32 ulps of the largest term.
    const double round_rel = sizeof(floatX) == 4 ? 0.0 : 1.0 / (1 << 8), arith_rel = 1.0 / (1 << 20);
    const int t = 37, aheads[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        int ahead = aheads[k];
        for (int order = 1; order <= 2; order++) {
            float lr_sum = 3e-3f * ahead, c = order == 2 ? 0.5f * ahead * (ahead + 1) : 0.0f;
            compensation_predict(cpu, w, m, v, N, lr_sum, 0.9f, 0.95f, 1e-8f, 0.1f, t);
            if (order == 2) compensation_curvature(cpu, w, w_prev, u_prev, N, c);
            adamw_predict_cuda(d_out, d_w, d_m, d_v, order == 2 ? d_wp : NULL, order == 2 ? d_up : NULL, N, lr_sum, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                               c);
            floatX_download(gpu, d_out, N);
            double bc1 = 1.0 - pow(0.9, t), bc2 = 1.0 - pow(0.95, t), worst = 0.0; // worst: the error over its bound
            size_t at = 0;
            for (size_t i = 0; i < N; i++) {
                double upd = lr_sum * (fabs(m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8) + 0.1 * fabs(w[i]));
                double curv = order == 2 ? fabs(c * (((double)w[i] - w_prev[i]) - u_prev[i])) : 0.0;
                double bound = round_rel * fabs(cpu[i]) + arith_rel * (fabs(w[i]) + upd + curv);
                double r = fabs((double)gpu[i] - cpu[i]) / bound;
                if (!(r <= worst)) worst = r, at = i; // (a NaN is the worst)
            }
            CHECK(worst <= 1.0, "compensation_predict%s, %d updates ahead: worst error %.3g of its bound at %zu: GPU %a, CPU %a",
                  order == 2 ? " + compensation_curvature" : "", ahead, worst, at, gpu[at], cpu[at]);
        }
    }
    // the trajectory: a copy and a subtraction, bitwise
    for (int first = 1; first >= 0; first--) {
        memcpy(cpu, w_prev, N * 4), memcpy(cpu2, u_prev, N * 4);
        compensation_track(cpu, cpu2, w, N, first);
        up(d_x, w_prev), up(d_g, u_prev);
        trajectory_track_cuda(d_x, d_g, d_w, N, first);
        down(gpu, d_x);
        int same_w = memcmp(gpu, cpu, N * 4) == 0;
        down(gpu, d_g);
        CHECK(same_w && memcmp(gpu, cpu2, N * 4) == 0, "compensation_track (first %d): w_prev and u_prev bitwise the CPU's", first);
    }
    // DC-ASGD: the sums and the correction, fp32 throughout; an fma contracted on one side only moves a
    // result by an ulp of its operands, so each is compared relative to its operands' scale (g 1e-3,
    // g^2 1e-6, g^2 w 1e-8, the corrected gradient 1e-3): within 1e-6 of it
    memcpy(cpu, g, N * 4), memcpy(cpu2, a, N * 4), memcpy(cpu3, b, N * 4);
    compensation_dc_accumulate(cpu, cpu2, cpu3, g, w, N);
    up(d_x, g), up(d_a, a), up(d_b, b), up(d_g, g);
    dc_accumulate_cuda(d_x, d_a, d_b, d_g, d_w, N);
    size_t at = 0;
    down(gpu, d_x);
    double e_acc = worst_rel(gpu, cpu, N, 1e-3, &at);
    down(gpu, d_a);
    double e_a = worst_rel(gpu, cpu2, N, 1e-6, &at);
    down(gpu, d_b);
    double e_b = worst_rel(gpu, cpu3, N, 1e-8, &at);
    CHECK(e_acc <= 1e-6 && e_a <= 1e-6 && e_b <= 1e-6, "compensation_dc_accumulate: acc, sum g^2, sum g^2 w within 1e-6 of their scale (%.3g, %.3g, %.3g)", e_acc,
          e_a, e_b);
    compensation_dc_correct(cpu, cpu2, cpu3, w_prev, N, 1e5f);
    dc_correct_cuda(d_x, d_a, d_b, d_wp, N, 1e5f);
    down(gpu, d_x);
    double e_c = worst_rel(gpu, cpu, N, 1e-3, &at);
    down(gpu, d_a);
    int zero_a = memcmp(gpu, cpu2, N * 4) == 0;
    down(gpu, d_b);
    CHECK(e_c <= 1e-6 && zero_a && memcmp(gpu, cpu3, N * 4) == 0, "dc_correct: acc within 1e-6 of its scale (%.3g), the sums zeroed", e_c);

    cudaCheck(cudaDeviceSynchronize());
    for (int i = 0; i < 9; i++) cudaCheck(cudaFree(*dev[i]));
    cudaCheck(cudaFree(d_out));
    free(w), free(m), free(v), free(w_prev), free(u_prev), free(cpu), free(gpu), free(g), free(a), free(b), free(cpu2), free(cpu3);
    printf("compensation_check: ");
    return test_summary();
}
