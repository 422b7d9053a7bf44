// Benchmark of causal flash attention (llmc/attention.cuh, the production kernels) at GPT-2 124M's
// shape: forward and backward, checked against the CPU reference (llmc/attention.h) on batch row 0, timed,
// in TFLOP/s (causal: half of the T x T work counted).
// Usage: build/dev/cuda/attention [B T NH C], default 8 1024 12 768 (head size 64)
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "dev/cuda/compare.h"
#include "llmc/attention.cuh"
#include "llmc/attention.h"

static int g_ok = 1;

static void compare(const char* name, const float* gpu, const float* cpu, size_t n, double tol) {
    compare_report(name, " (batch row 0)", gpu, cpu, n, tol, &g_ok);
}

int main(int argc, char** argv) {
    const DevCli cli = {"attention", "usage: build/dev/cuda/attention [B T NH C]   (default 8 1024 12 768: causal attention, head size C / NH)\n"};
    dev_cli_help(&cli, argc, argv);
    int B = 8, T = 1024, NH = 12, C = 768;
    if (argc != 1 && argc != 5) dev_cli_refuse(&cli, "expected no arguments or all four of B T NH C, got %d", argc - 1);
    if (argc == 5) {
        B = (int)dev_cli_long(&cli, "B", argv[1], 1, 1 << 16);
        T = (int)dev_cli_long(&cli, "T", argv[2], 1, 1 << 20);
        NH = (int)dev_cli_long(&cli, "NH", argv[3], 1, 1 << 10);
        C = (int)dev_cli_long(&cli, "C", argv[4], 1, 1 << 16);
        if (C % NH) dev_cli_refuse(&cli, "C %d is not a multiple of NH %d", C, NH);
    }
    cuda_device_init(0);
    int hs = C / NH;
    printf("attention benchmark: %s, B=%d T=%d NH=%d C=%d (head size %d), causal, %s kernels, device %s\n", PRECISION_NAME, B, T, NH, C, hs,
           attention_uses_tc(C, NH) ? "tensor-core" : "simple", g_device_prop.name);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    floatX *qkv, *out, *dout, *dqkv;
    float *lse, *scratch;
    cudaCheck(cudaMalloc(&qkv, nqkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dqkv, nqkv * sizeof(floatX)));
    cudaCheck(cudaMalloc(&out, nout * sizeof(floatX)));
    cudaCheck(cudaMalloc(&dout, nout * sizeof(floatX)));
    cudaCheck(cudaMalloc(&lse, nl * sizeof(float)));
    cudaCheck(cudaMalloc(&scratch, nl * sizeof(float)));
    random_fill_cuda(qkv, nqkv, 11, 2.0f); // scores of a few units: a softmax that is neither flat nor one-hot
    random_fill_cuda(dout, nout, 12, 1.0f);

    attention_forward_cuda(out, lse, qkv, B, T, C, NH);
    attention_backward_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
    // CPU reference for batch row 0 (rows are independent)
    size_t q0 = (size_t)T * 3 * C, o0 = (size_t)T * C;
    float *h_qkv = (float*)malloc_check(q0 * 4), *h_dout = (float*)malloc_check(o0 * 4);
    float *g_out = (float*)malloc_check(o0 * 4), *g_dqkv = (float*)malloc_check(q0 * 4);
    floatX_download(h_qkv, qkv, q0);
    floatX_download(h_dout, dout, o0);
    floatX_download(g_out, out, o0);
    floatX_download(g_dqkv, dqkv, q0);
    float *r_out = (float*)calloc_check(o0, 4), *r_dqkv = (float*)calloc_check(q0, 4);
    float *att = (float*)calloc_check((size_t)NH * T * T, 4), *datt = (float*)calloc_check((size_t)NH * T * T, 4);
    attention_forward(r_out, att, h_qkv, 1, T, C, NH);
    attention_backward(r_dqkv, datt, h_dout, h_qkv, att, 1, T, C, NH);
    compare("out", g_out, r_out, o0, 1e-2);
    compare("dqkv", g_dqkv, r_dqkv, q0, 1e-2);

    double fwd_flops = 4.0 * B * NH * (double)T * T * hs / 2.0; // QKᵀ and PV, causal half
    double bwd_flops = 2.5 * fwd_flops;                         // the usual count: 5 products against 2
    float fwd_ms = time_cuda_ms([&] { attention_forward_cuda(out, lse, qkv, B, T, C, NH); }, 3, 20);
    float bwd_ms = time_cuda_ms([&] { attention_backward_cuda(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH); }, 3, 20);
    double fwd_tf = fwd_flops / (fwd_ms * 1e-3) / 1e12, bwd_tf = bwd_flops / (bwd_ms * 1e-3) / 1e12;
    printf("  forward  %8.3f ms  %6.1f TFLOP/s  (goal >= 200 at T=1024, hs=64: %s)\n", fwd_ms, fwd_tf, fwd_tf >= 200 ? "met" : "not met");
    printf("  backward %8.3f ms  %6.1f TFLOP/s  (2.5x the forward's FLOPs)\n", bwd_ms, bwd_tf);
    printf("checks vs CPU: %s\n", g_ok ? "all OK" : "SOME NOT OK");
    free(h_qkv); free(h_dout); free(g_out); free(g_dqkv); free(r_out); free(r_dqkv); free(att); free(datt);
    cudaCheck(cudaFree(qkv)); cudaCheck(cudaFree(dqkv)); cudaCheck(cudaFree(out)); cudaCheck(cudaFree(dout));
    cudaCheck(cudaFree(lse)); cudaCheck(cudaFree(scratch));
    return g_ok ? 0 : 1;
}
