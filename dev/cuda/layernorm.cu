// Benchmark of the fused residual + LayerNorm (llmc/layernorm.cuh, the production kernels): forward
// and backward (input and weight halves), checked against the CPU reference (llmc/ops.h), timed, in
// GB/s of the bytes they must move and as a fraction of the device-to-device copy bandwidth measured here.
// Usage: build/dev/cuda/layernorm [N C], default 65536 768 (data several times the L2)
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dev/cuda/compare.h"
#include "llmc/layernorm.cuh"
#include "llmc/ops.h"

static int g_ok = 1;

static void compare(const char* name, const float* gpu, const float* cpu, size_t n, double tol) {
    compare_report(name, "", gpu, cpu, n, tol, &g_ok);
}

static float* get_x(const floatX* d, size_t n) {
    float* h = (float*)malloc_check(n * 4);
    floatX_download(h, d, n);
    return h;
}
static float* get_f(const float* d, size_t n) {
    float* h = (float*)malloc_check(n * 4);
    cudaCheck(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

int main(int argc, char** argv) {
    const DevCli cli = {"layernorm", "usage: build/dev/cuda/layernorm [N C]   (default 65536 768: N rows of C)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc != 1 && argc != 3) dev_cli_refuse(&cli, "expected no arguments or both of N C, got %d", argc - 1);
    int N = argc == 3 ? (int)dev_cli_long(&cli, "N", argv[1], 1, 1 << 24) : 65536, C = argc == 3 ? (int)dev_cli_long(&cli, "C", argv[2], 1, 1 << 16) : 768;
    cuda_device_init(0);
    size_t n = (size_t)N * C, X = sizeof(floatX);
    printf("layernorm benchmark: %s, N=%d C=%d (%.0f MB per tensor), device %s\n", PRECISION_NAME, N, C, n * X / 1e6, g_device_prop.name);
    floatX *x1, *x2, *res, *out, *w, *b, *dout, *dres, *dinp;
    float *mean, *rstd, *dw, *db, *scratch;
    floatX** xs[] = {&x1, &x2, &res, &out, &dout, &dres, &dinp};
    for (int i = 0; i < 7; i++) cudaCheck(cudaMalloc(xs[i], n * X));
    cudaCheck(cudaMalloc(&w, C * X));
    cudaCheck(cudaMalloc(&b, C * X));
    cudaCheck(cudaMalloc(&mean, N * 4));
    cudaCheck(cudaMalloc(&rstd, N * 4));
    cudaCheck(cudaMalloc(&dw, C * 4));
    cudaCheck(cudaMalloc(&db, C * 4));
    cudaCheck(cudaMalloc(&scratch, (size_t)COLSUM_MAX_CHUNKS * 2 * C * 4));
    random_fill_cuda(x1, n, 21, 1.0f);
    random_fill_cuda(x2, n, 22, 1.0f);
    random_fill_cuda(w, C, 23, 1.0f);
    random_fill_cuda(b, C, 24, 0.5f);
    random_fill_cuda(dout, n, 25, 1.0f);
    random_fill_cuda(dres, n, 26, 1.0f);
    cudaCheck(cudaMemset(dw, 0, C * 4));
    cudaCheck(cudaMemset(db, 0, C * 4));

    // correctness, on the whole tensors
    fused_residual_layernorm_forward_cuda(res, out, mean, rstd, x1, x2, w, b, N, C);
    layernorm_backward_input_cuda(dinp, dres, dout, res, w, mean, rstd, N, C);
    layernorm_backward_weight_cuda(dw, db, dout, res, mean, rstd, N, C, scratch);
    {
        float *h_res = get_x(res, n), *h_w = get_x(w, C), *h_b = get_x(b, C), *h_dout = get_x(dout, n), *h_dres = get_x(dres, n);
        float *r_out = (float*)malloc_check(n * 4), *r_mean = (float*)malloc_check(N * 4), *r_rstd = (float*)malloc_check(N * 4);
        float *r_dw = (float*)calloc_check(C, 4), *r_db = (float*)calloc_check(C, 4);
        layernorm_forward(r_out, r_mean, r_rstd, h_res, h_w, h_b, N, C); // from the GPU's (rounded) residual
        float* g = get_x(out, n);
        compare("forward out", g, r_out, n, 1e-2);
        free(g);
        g = get_f(rstd, N);
        compare("forward rstd", g, r_rstd, N, 1e-3);
        free(g);
        layernorm_backward_input(h_dres, h_dres, h_dout, h_res, h_w, r_mean, r_rstd, N, C); // h_dres becomes dinp
        g = get_x(dinp, n);
        compare("backward dinp", g, h_dres, n, 1e-2);
        free(g);
        layernorm_backward_weight(r_dw, r_db, h_dout, h_res, r_mean, r_rstd, N, C, 1);
        g = get_f(dw, C);
        compare("backward dweight", g, r_dw, C, 1e-3);
        free(g);
        g = get_f(db, C);
        compare("backward dbias", g, r_db, C, 1e-3);
        free(g);
        free(h_res); free(h_w); free(h_b); free(h_dout); free(h_dres); free(r_out); free(r_mean); free(r_rstd); free(r_dw); free(r_db);
    }

    // the copy bandwidth: one device-to-device copy of 4 tensors' worth, bytes read + written
    size_t cbytes = 4 * n * X;
    char *c0, *c1;
    cudaCheck(cudaMalloc(&c0, cbytes));
    cudaCheck(cudaMalloc(&c1, cbytes));
    cudaCheck(cudaMemset(c0, 1, cbytes));
    float copy_ms = time_cuda_ms([&] { cudaCheck(cudaMemcpyAsync(c1, c0, cbytes, cudaMemcpyDeviceToDevice, g_cuda_stream)); }, 3, 20);
    double copy_gbs = 2.0 * cbytes / (copy_ms * 1e-3) / 1e9;
    printf("  copy           %8.3f ms  %7.0f GB/s (read + write)\n", copy_ms, copy_gbs);

    float fwd_ms = time_cuda_ms([&] { fused_residual_layernorm_forward_cuda(res, out, mean, rstd, x1, x2, w, b, N, C); }, 3, 20);
    float bin_ms = time_cuda_ms([&] { layernorm_backward_input_cuda(dinp, dres, dout, res, w, mean, rstd, N, C); }, 3, 20);
    float bw_ms = time_cuda_ms([&] { layernorm_backward_weight_cuda(dw, db, dout, res, mean, rstd, N, C, scratch); }, 3, 20);
    double fwd_bytes = 4.0 * n * X + 8.0 * N; // x1, x2 in; residual, out out; mean, rstd
    double bin_bytes = 4.0 * n * X + 8.0 * N; // dout, inp, dresidual in; dinp out; mean, rstd
    double bw_bytes = 2.0 * n * X + 8.0 * N;  // dout, inp in
    double fwd_gbs = fwd_bytes / (fwd_ms * 1e-3) / 1e9, bin_gbs = bin_bytes / (bin_ms * 1e-3) / 1e9;
    double bw_gbs = bw_bytes / (bw_ms * 1e-3) / 1e9, bwd_gbs = (bin_bytes + bw_bytes) / ((bin_ms + bw_ms) * 1e-3) / 1e9;
    printf("  forward        %8.3f ms  %7.0f GB/s  %5.1f%% of copy (goal >= 75%%: %s)\n", fwd_ms, fwd_gbs, 100 * fwd_gbs / copy_gbs,
           fwd_gbs >= 0.75 * copy_gbs ? "met" : "not met");
    printf("  backward input %8.3f ms  %7.0f GB/s  %5.1f%% of copy\n", bin_ms, bin_gbs, 100 * bin_gbs / copy_gbs);
    printf("  backward weight%8.3f ms  %7.0f GB/s  %5.1f%% of copy\n", bw_ms, bw_gbs, 100 * bw_gbs / copy_gbs);
    printf("  backward total %8.3f ms  %7.0f GB/s  %5.1f%% of copy (goal >= 75%%: %s)\n", bin_ms + bw_ms, bwd_gbs, 100 * bwd_gbs / copy_gbs,
           bwd_gbs >= 0.75 * copy_gbs ? "met" : "not met");
    printf("checks vs CPU: %s\n", g_ok ? "all OK" : "SOME NOT OK");
    for (int i = 0; i < 7; i++) cudaCheck(cudaFree(*xs[i]));
    cudaCheck(cudaFree(w)); cudaCheck(cudaFree(b)); cudaCheck(cudaFree(mean)); cudaCheck(cudaFree(rstd));
    cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(db)); cudaCheck(cudaFree(scratch)); cudaCheck(cudaFree(c0)); cudaCheck(cudaFree(c1));
    return g_ok ? 0 : 1;
}
