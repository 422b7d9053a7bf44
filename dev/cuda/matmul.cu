// Benchmark of the Linear layers' matmul (llmc/matmul.cuh, the production kernels) on GPT-2 124M's
// shapes: every product (forward, dinp, dweight) of every backend, checked against the CPU reference
// (llmc/matmul.h) on a slice of the output, timed, in TFLOP/s and as a ratio to cuBLASLt.
// Usage: build/dev/cuda/matmul [B*T rows, default 8192]
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "dev/cuda/compare.h"
#include "llmc/matmul.cuh"
#include "llmc/matmul.h"

#define CHECK_ROWS 64 // rows (forward, dinp) or weight rows (dweight) compared with the CPU

static int g_ok = 1;

// dst (rows, cols) fp32 <- the (rows, cols) corner of a device floatX matrix with leading dimension ld
static void download_block(float* dst, const floatX* src, int ld, int rows, int cols) {
    floatX* tmp = (floatX*)malloc_check((size_t)rows * cols * sizeof(floatX));
    cudaCheck(cudaMemcpy2D(tmp, cols * sizeof(floatX), src, (size_t)ld * sizeof(floatX), cols * sizeof(floatX), rows, cudaMemcpyDeviceToHost));
    host_from_floatX(dst, tmp, (size_t)rows * cols);
    free(tmp);
}

// max|gpu - cpu| / max|cpu| <= tol
static const char* verdict(const float* gpu, const float* cpu, size_t n, double tol, double* rel_out) {
    double max_abs;
    int finite;
    *rel_out = compare_rel(gpu, cpu, n, &max_abs, &finite);
    int ok = finite && *rel_out <= tol;
    if (!ok) g_ok = 0;
    return ok ? "OK" : "NOT OK";
}

typedef struct {
    const char* name;
    int C, OC; // the layer's in and out features
    int per_step; // times it runs in one training step (layers)
} Shape;

int main(int argc, char** argv) {
    const DevCli cli = {"matmul", "usage: build/dev/cuda/matmul [N (default 8192)]   (N = B*T rows through GPT-2 124M's shapes)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 2) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[2]);
    int N = argc > 1 ? (int)dev_cli_long(&cli, "N", argv[1], 1, 1 << 20) : 8192;
    cuda_device_init(0);
    const int C = 768, Vp = 50304, L = 12;
    Shape shapes[] = {{"qkv", C, 3 * C, L}, {"attproj", C, C, L}, {"fc", C, 4 * C, L}, {"fcproj", 4 * C, C, L}, {"lm_head", C, Vp, 1}};
    const int nshapes = sizeof(shapes) / sizeof(shapes[0]);
#ifdef ENABLE_FP32
    MatmulBackend backends[] = {MATMUL_TDPIPE, MATMUL_CUBLASLT};
#else
    MatmulBackend backends[] = {MATMUL_TDPIPE, MATMUL_TDPIPE_MMA, MATMUL_CUBLASLT};
#endif
    const int nb = sizeof(backends) / sizeof(backends[0]);
    const int ref = nb - 1; // cuBLASLt
    printf("matmul benchmark: %s, N = B*T = %d rows, GPT-2 124M shapes (C = %d, Vp = %d), device %s\n", PRECISION_NAME, N, C, Vp,
           g_device_prop.name);
#ifndef ENABLE_FP32
    printf("matmul tdpipe: %s\n", gemm_wgmma_available() ? "wgmma + TMA kernel (sm_90a); tdpipe-mma: the mma.sync kernel"
                                                           : "mma.sync kernel (no sm_90a code for this device)");
#endif
    printf("%-8s %-8s %-20s", "shape", "product", "M x N x K");
    for (int b = 0; b < nb; b++) printf(" %13s", matmul_backend_name(backends[b]));
    printf("   tdpipe/cuBLASLt  check vs CPU (rel diff per backend)\n");
    double total_ms[3] = {0, 0, 0};
    for (int s = 0; s < nshapes; s++) {
        int K = shapes[s].C, OC = shapes[s].OC;
        floatX *inp, *w, *bias, *out, *dout, *dinp;
        float *dw, *scratch;
        cudaCheck(cudaMalloc(&inp, (size_t)N * K * sizeof(floatX)));
        cudaCheck(cudaMalloc(&w, (size_t)OC * K * sizeof(floatX)));
        cudaCheck(cudaMalloc(&bias, (size_t)OC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&out, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dout, (size_t)N * OC * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dinp, (size_t)N * K * sizeof(floatX)));
        cudaCheck(cudaMalloc(&dw, (size_t)OC * K * sizeof(float)));
        cudaCheck(cudaMalloc(&scratch, (size_t)COLSUM_MAX_CHUNKS * OC * sizeof(float)));
        random_fill_cuda(inp, (size_t)N * K, 1, 1.0f);
        random_fill_cuda(w, (size_t)OC * K, 2, 0.05f);
        random_fill_cuda(bias, OC, 3, 0.1f);
        random_fill_cuda(dout, (size_t)N * OC, 4, 1.0f);
        // CPU references on slices: rows [0, 64) of out and dinp, weight rows [0, 64) of dweight
        int R = CHECK_ROWS;
        float *h_inp = (float*)malloc_check((size_t)N * K * 4), *h_w = (float*)malloc_check((size_t)OC * K * 4);
        float *h_bias = (float*)malloc_check((size_t)OC * 4), *h_dout_rows = (float*)malloc_check((size_t)R * OC * 4);
        float *h_dout_cols = (float*)malloc_check((size_t)N * R * 4);
        download_block(h_inp, inp, K, N, K);
        download_block(h_w, w, K, OC, K);
        download_block(h_bias, bias, OC, 1, OC);
        download_block(h_dout_rows, dout, OC, R, OC);
        download_block(h_dout_cols, dout, OC, N, R);
        float *ref_out = (float*)calloc_check((size_t)R * OC, 4), *ref_dinp = (float*)calloc_check((size_t)R * K, 4);
        float* ref_dw = (float*)calloc_check((size_t)R * K, 4);
        matmul_forward(ref_out, h_inp, h_w, h_bias, R, K, OC);
        matmul_backward_input(ref_dinp, h_dout_rows, h_w, R, K, OC, 1);
        matmul_backward_weight(ref_dw, NULL, h_dout_cols, h_inp, N, K, R, 1);
        float *g_out = (float*)malloc_check((size_t)R * OC * 4), *g_dinp = (float*)malloc_check((size_t)R * K * 4);
        float* g_dw = (float*)malloc_check((size_t)R * K * 4);

        const char* products[3] = {"fwd", "dinp", "dweight"};
        for (int pr = 0; pr < 3; pr++) {
            double flops = 2.0 * N * K * OC;
            char dims[32];
            if (pr == 0) snprintf(dims, sizeof(dims), "%dx%dx%d", N, OC, K);
            else if (pr == 1) snprintf(dims, sizeof(dims), "%dx%dx%d", N, K, OC);
            else snprintf(dims, sizeof(dims), "%dx%dx%d", OC, K, N);
            printf("%-8s %-8s %-20s", shapes[s].name, products[pr], dims);
            float ms[3];
            char checks[3][64];
            for (int b = 0; b < nb; b++) {
                g_matmul_backend = backends[b];
                double rel = 0.0;
                const char* v;
                if (pr == 0) {
                    matmul_forward_cuda(out, inp, w, bias, N, K, OC);
                    download_block(g_out, out, OC, R, OC);
                    v = verdict(g_out, ref_out, (size_t)R * OC, 1e-2, &rel); // bf16 output rounding
                    ms[b] = time_cuda_ms([&] { matmul_forward_cuda(out, inp, w, bias, N, K, OC); }, 3, 20);
                } else if (pr == 1) {
                    matmul_backward_input_cuda(dinp, dout, w, N, K, OC, 0);
                    download_block(g_dinp, dinp, K, R, K);
                    v = verdict(g_dinp, ref_dinp, (size_t)R * K, 1e-2, &rel);
                    ms[b] = time_cuda_ms([&] { matmul_backward_input_cuda(dinp, dout, w, N, K, OC, 0); }, 3, 20);
                } else {
                    cudaCheck(cudaMemset(dw, 0, (size_t)OC * K * 4));
                    matmul_backward_weight_cuda(dw, NULL, dout, inp, N, K, OC, scratch);
                    cudaCheck(cudaMemcpy(g_dw, dw, (size_t)R * K * 4, cudaMemcpyDeviceToHost));
                    v = verdict(g_dw, ref_dw, (size_t)R * K, 1e-3, &rel); // fp32 output
                    ms[b] = time_cuda_ms([&] { matmul_backward_weight_cuda(dw, NULL, dout, inp, N, K, OC, scratch); }, 3, 20);
                }
                snprintf(checks[b], sizeof(checks[b]), "%s %.1e", v, rel);
                total_ms[b] += ms[b] * shapes[s].per_step;
                printf(" %8.1f TF/s", flops / (ms[b] * 1e-3) / 1e12);
            }
            printf("   %6.1f%%         ", 100.0 * ms[ref] / ms[0]);
            for (int b = 0; b < nb; b++) printf(" %s", checks[b]);
            printf("\n");
        }
        free(h_inp); free(h_w); free(h_bias); free(h_dout_rows); free(h_dout_cols); free(ref_out); free(ref_dinp); free(ref_dw);
        free(g_out); free(g_dinp); free(g_dw);
        cudaCheck(cudaFree(inp)); cudaCheck(cudaFree(w)); cudaCheck(cudaFree(bias)); cudaCheck(cudaFree(out));
        cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(dinp)); cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(scratch));
    }
    printf("one training step's matmuls (12 layers x 4 shapes x 3 products + LM head):");
    for (int b = 0; b < nb; b++) printf("  %s %.2f ms", matmul_backend_name(backends[b]), total_ms[b]);
    printf("\n");
    for (int b = 0; b < nb - 1; b++)
        printf("matmul %s at %.1f%% of cuBLASLt on GPT-2 124M's shapes (goal >= 70%%): %s\n", matmul_backend_name(backends[b]),
               100.0 * total_ms[ref] / total_ms[b], total_ms[ref] / total_ms[b] >= 0.7 ? "met" : "not met");
    printf("checks vs CPU: %s\n", g_ok ? "all OK" : "SOME NOT OK");
    cublaslt_free();
    return g_ok ? 0 : 1;
}
