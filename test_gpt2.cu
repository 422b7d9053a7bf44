// GPU test: the CUDA backend against the CPU reference (llmc/ops.h, llmc/attention.h, llmc/matmul.h,
// llmc/gpt2.h, llmc/adamw.h), tensor by tensor: every operation alone (forward and backward), then a tiny GPT-2
// from one initialisation (logits, loss, every gradient; also split into two pipeline stages), then
// 10 AdamW steps. Prints max abs and relative diff per tensor with OK / NOT OK, ends with
// "overall okay: 1|0" (and the exit code agrees).
// Usage: test_gpt2cu [--matmul tdpipe|tdpipe-mma|cublaslt (the model's matmul)] [--model-only]
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/adamw.h"
#include "llmc/attention.h"
#include "llmc/global_norm.h"
#include "llmc/gpt2.h"
#include "llmc/gpt2_cuda.cuh"
#include "llmc/matmul.h"
#include "llmc/ops.h"
#include "llmc/rng.h"

// Tolerances on rel = max|gpu - cpu| / max|cpu| per tensor. The GPU gets exactly the CPU's inputs
// (rounded to floatX first), so only the GPU's own arithmetic and output rounding differ.
#ifdef ENABLE_FP32
#define TOL_OP 1e-4    // fp32 both sides: summation order and fast-math exp differ, ~1e-6
#define TOL_OP32 1e-4  // same, for fp32 outputs
#define TOL_MODEL 1e-3 // two layers of chained fp32 ops, normalised per tensor
#define TOL_LOSS 1e-4  // absolute, on a loss of ~5.3
#define TOL_STEPS 1e-2 // AdamW update after 10 steps, L2-relative (see test_steps)
#else
#define TOL_OP 1e-2    // bf16 outputs: rounding ≤ 2^-9 relative, plus bf16 intermediates (attention's P, dS)
#define TOL_OP32 1e-3  // fp32 outputs (weight gradients) from bf16 inputs: summation order only
#define TOL_MODEL 3e-2 // every activation rounded to bf16 through two layers, against an fp32 model (seen: <1e-2)
#define TOL_LOSS 2e-2  // absolute
#define TOL_STEPS 0.25 // Adam moves elements with near-zero gradients by ±lr whatever their sign (see test_steps; seen: <0.06)
#endif

static int g_all_ok = 1;

// normwise comparison; NaN/Inf in gpu (e.g. an unwritten, poisoned output) always fails
static int check(const char* name, const float* gpu, const float* cpu, size_t n, double tol) {
    double max_abs = 0.0, max_ref = 0.0;
    size_t worst = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) {
            nonfinite++;
            continue;
        }
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        if (d > max_abs) {
            max_abs = d;
            worst = i;
        }
        if (fabs((double)cpu[i]) > max_ref) max_ref = fabs((double)cpu[i]);
    }
    double rel = max_ref > 0.0 ? max_abs / max_ref : max_abs;
    int ok = nonfinite == 0 && rel <= tol;
    printf("  %-30s n=%-9zu max|cpu| %9.3e  max abs diff %9.3e (at %zu: gpu %.5g cpu %.5g)  rel %9.3e  tol %.0e  %s", name, n, max_ref,
           max_abs, worst, n ? gpu[worst] : 0.0f, n ? cpu[worst] : 0.0f, rel, tol, ok ? "OK" : "NOT OK");
    if (nonfinite) printf("  (%zu non-finite)", nonfinite);
    printf("\n");
    if (!ok) g_all_ok = 0;
    return ok;
}

static int check_scalar(const char* name, double gpu, double cpu, double tol) {
    double d = fabs(gpu - cpu);
    int ok = isfinite(gpu) && d <= tol;
    printf("  %-30s gpu %.7f cpu %.7f  abs diff %.3e  tol %.0e  %s\n", name, gpu, cpu, d, tol, ok ? "OK" : "NOT OK");
    if (!ok) g_all_ok = 0;
    return ok;
}

// the units the CUDA weight backward reports done (GPT2UnitHook, what the GPU gradient sync overlaps by)
typedef struct {
    int unit[64];
    int n;
} UnitLog;
static void unit_log(void* ctx, int unit) {
    UnitLog* u = (UnitLog*)ctx;
    if (u->n < 64) u->unit[u->n] = unit;
    u->n++;
}
// a whole model's backward reports each unit once, in the order it computes them: the head's share
// (L + 2), the final LayerNorm (L + 1), the layers from the last (L .. 1), the embeddings (0)
static void check_unit_order(const UnitLog* u, int L) {
    int ok = u->n == L + 3;
    for (int i = 0; ok && i < u->n; i++) ok = u->unit[i] == L + 2 - i;
    printf("  %-30s %d units reported, in the order computed  %s\n", "backward's unit hook", u->n, ok ? "OK" : "NOT OK");
    if (!ok) g_all_ok = 0;
}

// ---- host/device helpers ----------------------------------------------------------------------------

// n normals * scale, rounded to what floatX holds (so the CPU sees exactly the GPU's inputs)
static float* rand_x(Rng* rng, size_t n, float scale) {
    float* h = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = scale * rng_normal(rng);
#ifndef ENABLE_FP32
    for (size_t i = 0; i < n; i++) h[i] = host_bf16_bits_to_float(host_float_to_bf16_bits(h[i]));
#endif
    return h;
}
static float* copy_h(const float* src, size_t n) {
    float* h = (float*)malloc_check(n * sizeof(float));
    memcpy(h, src, n * sizeof(float));
    return h;
}
static float* zeros_h(size_t n) { return (float*)calloc_check(n, sizeof(float)); }
static void round_x(float* h, size_t n) {
#ifndef ENABLE_FP32
    for (size_t i = 0; i < n; i++) h[i] = host_bf16_bits_to_float(host_float_to_bf16_bits(h[i]));
#else
    (void)h;
    (void)n;
#endif
}
// device buffers (16 bytes of slack past the end for vector loads): uninitialised, full of NaN
// (0xff bytes, so an unwritten element cannot pass), or a copy of host data
static void* dev_alloc(size_t bytes) {
    void* d;
    cudaCheck(cudaMalloc(&d, bytes + 16));
    return d;
}
static void* dev_poison(size_t bytes) {
    void* d = dev_alloc(bytes);
    cudaCheck(cudaMemset(d, 0xff, bytes));
    return d;
}
static void* dev_copy(const void* h, size_t bytes) {
    void* d = dev_alloc(bytes);
    cudaCheck(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
// device floatX copy of h
static floatX* dev_x(const float* h, size_t n) {
    floatX* d = (floatX*)dev_alloc(n * sizeof(floatX));
    floatX_upload(d, h, n);
    return d;
}
static floatX* dev_x_poison(size_t n) { return (floatX*)dev_poison(n * sizeof(floatX)); }
static float* dev_f(const float* h, size_t n) { return (float*)dev_copy(h, n * sizeof(float)); }
static float* dev_f_poison(size_t n) { return (float*)dev_poison(n * sizeof(float)); }
static int* dev_i(const int* h, size_t n) { return (int*)dev_copy(h, n * sizeof(int)); }
static float* get_x(const floatX* d, size_t n) {
    float* h = (float*)malloc_check(n * sizeof(float));
    cudaCheck(cudaDeviceSynchronize());
    floatX_download(h, d, n);
    return h;
}
static float* get_f(const float* d, size_t n) {
    float* h = (float*)malloc_check(n * sizeof(float));
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
// check a device floatX tensor against a host reference, then free the downloaded copy
static void check_x(const char* name, const floatX* d, const float* cpu, size_t n, double tol) {
    float* h = get_x(d, n);
    check(name, h, cpu, n, tol);
    free(h);
}
static void check_f(const char* name, const float* d, const float* cpu, size_t n, double tol) {
    float* h = get_f(d, n);
    check(name, h, cpu, n, tol);
    free(h);
}

// ---- operations alone ---------------------------------------------------------------------------------

static void test_matmul(Rng* rng, int N, int C, int OC, MatmulBackend backend) {
    printf("matmul N=%d C=%d OC=%d, backend %s\n", N, C, OC, matmul_backend_name(backend));
    MatmulBackend saved = g_matmul_backend;
    g_matmul_backend = backend;
    float *inp = rand_x(rng, (size_t)N * C, 1.0f), *w = rand_x(rng, (size_t)OC * C, 0.1f), *bias = rand_x(rng, OC, 0.1f);
    float *dout = rand_x(rng, (size_t)N * OC, 1.0f), *dinp0 = rand_x(rng, (size_t)N * C, 1.0f);
    float *dw0 = rand_x(rng, (size_t)OC * C, 1.0f), *db0 = rand_x(rng, OC, 1.0f);
    floatX *d_inp = dev_x(inp, (size_t)N * C), *d_w = dev_x(w, (size_t)OC * C), *d_bias = dev_x(bias, OC), *d_dout = dev_x(dout, (size_t)N * OC);
    float* scratch;
    cudaCheck(cudaMalloc(&scratch, (size_t)COLSUM_MAX_CHUNKS * OC * sizeof(float)));

    float* out = zeros_h((size_t)N * OC);
    matmul_forward(out, inp, w, bias, N, C, OC);
    floatX* d_out = dev_x_poison((size_t)N * OC);
    matmul_forward_cuda(d_out, d_inp, d_w, d_bias, N, C, OC);
    check_x("forward out", d_out, out, (size_t)N * OC, TOL_OP);

    float* dinp = copy_h(dinp0, (size_t)N * C); // += onto a nonzero start
    matmul_backward_input(dinp, dout, w, N, C, OC, 1);
    floatX* d_dinp = dev_x(dinp0, (size_t)N * C);
    matmul_backward_input_cuda(d_dinp, d_dout, d_w, N, C, OC, 1);
    check_x("backward dinp (+=)", d_dinp, dinp, (size_t)N * C, TOL_OP);
    float* dinp_z = zeros_h((size_t)N * C);
    matmul_backward_input(dinp_z, dout, w, N, C, OC, 0);
    floatX* d_dinp_z = dev_x_poison((size_t)N * C);
    matmul_backward_input_cuda(d_dinp_z, d_dout, d_w, N, C, OC, 0);
    check_x("backward dinp (=)", d_dinp_z, dinp_z, (size_t)N * C, TOL_OP);

    float *dw = copy_h(dw0, (size_t)OC * C), *db = copy_h(db0, OC);
    matmul_backward_weight(dw, db, dout, inp, N, C, OC, 1);
    float *d_dw = dev_f(dw0, (size_t)OC * C), *d_db = dev_f(db0, OC);
    matmul_backward_weight_cuda(d_dw, d_db, d_dout, d_inp, N, C, OC, scratch);
    check_f("backward dweight (+=)", d_dw, dw, (size_t)OC * C, TOL_OP32);
    check_f("backward dbias (+=)", d_db, db, OC, TOL_OP32);

    g_matmul_backend = saved;
    free(inp); free(w); free(bias); free(dout); free(dinp0); free(dw0); free(db0); free(out); free(dinp); free(dinp_z); free(dw); free(db);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_w)); cudaCheck(cudaFree(d_bias)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dinp_z)); cudaCheck(cudaFree(d_dw));
    cudaCheck(cudaFree(d_db)); cudaCheck(cudaFree(scratch));
}

static void test_attention(Rng* rng, int B, int T, int C, int NH, int simple) {
    printf("attention B=%d T=%d C=%d NH=%d, %s kernels\n", B, T, C, NH, simple ? "simple" : "tensor-core");
    g_attention_simple = simple;
    int hs = C / NH;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T, nl = (size_t)B * NH * T;
    float *qkv = rand_x(rng, nqkv, 1.0f), *dout = rand_x(rng, nout, 1.0f);
    float *out = zeros_h(nout), *att = zeros_h(natt), *datt = zeros_h(natt), *dqkv = zeros_h(nqkv), *lse = zeros_h(nl);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    // the log-sum-exp the GPU saves, in double from the scores
    float scale = 1.0f / sqrtf((float)hs);
    double* s = (double*)malloc_check(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double mx = -1e300, sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    double d = 0.0;
                    for (int i = 0; i < hs; i++)
                        d += (double)qkv[((size_t)b * T + t) * 3 * C + h * hs + i] * qkv[((size_t)b * T + j) * 3 * C + C + h * hs + i];
                    s[j] = d * scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
            }
    free(s);
    floatX *d_qkv = dev_x(qkv, nqkv), *d_dout = dev_x(dout, nout), *d_out = dev_x_poison(nout), *d_dqkv = dev_x_poison(nqkv);
    float *d_lse = dev_f_poison(nl), *d_scratch = dev_f_poison(nl);
    attention_forward_cuda(d_out, d_lse, d_qkv, B, T, C, NH);
    check_x("forward out", d_out, out, nout, TOL_OP);
    check_f("forward lse", d_lse, lse, nl, TOL_OP32);
    attention_backward_cuda(d_dqkv, d_scratch, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
    float* g = get_x(d_dqkv, nqkv);
    // the three parts separately: a wrong dq, dk or dv shows by name
    const char* names[3] = {"backward dq", "backward dk", "backward dv"};
    float *pg = (float*)malloc_check(nout * sizeof(float)), *pc = (float*)malloc_check(nout * sizeof(float));
    for (int part = 0; part < 3; part++) {
        for (size_t bt = 0; bt < (size_t)B * T; bt++) {
            memcpy(pg + bt * C, g + bt * 3 * C + part * C, C * sizeof(float));
            memcpy(pc + bt * C, dqkv + bt * 3 * C + part * C, C * sizeof(float));
        }
        check(names[part], pg, pc, nout, TOL_OP);
    }
    g_attention_simple = 0;
    free(pg); free(pc); free(g); free(qkv); free(dout); free(out); free(att); free(datt); free(dqkv); free(lse);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_scratch));
}

static void test_layernorm(Rng* rng, int N, int C) {
    printf("layernorm N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x1 = rand_x(rng, n, 1.0f), *x2 = rand_x(rng, n, 1.0f), *w = rand_x(rng, C, 1.0f), *b = rand_x(rng, C, 0.5f);
    float *dout = rand_x(rng, n, 1.0f), *dres = rand_x(rng, n, 1.0f), *dw0 = rand_x(rng, C, 1.0f), *db0 = rand_x(rng, C, 1.0f);
    floatX *d_x1 = dev_x(x1, n), *d_x2 = dev_x(x2, n), *d_w = dev_x(w, C), *d_b = dev_x(b, C), *d_dout = dev_x(dout, n);
    float *out = zeros_h(n), *mean = zeros_h(N), *rstd = zeros_h(N);
    // plain forward
    layernorm_forward(out, mean, rstd, x1, w, b, N, C);
    floatX* d_out = dev_x_poison(n);
    float *d_mean = dev_f_poison(N), *d_rstd = dev_f_poison(N);
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_x1, d_w, d_b, N, C);
    check_x("forward out", d_out, out, n, TOL_OP);
    check_f("forward mean", d_mean, mean, N, TOL_OP32);
    check_f("forward rstd", d_rstd, rstd, N, TOL_OP32);
    // fused residual: the LayerNorm reads the floatX-rounded sum
    float* res = zeros_h(n);
    residual_forward(res, x1, x2, n);
    round_x(res, n);
    layernorm_forward(out, mean, rstd, res, w, b, N, C);
    floatX *d_res = dev_x_poison(n), *d_out2 = dev_x_poison(n);
    fused_residual_layernorm_forward_cuda(d_res, d_out2, d_mean, d_rstd, d_x1, d_x2, d_w, d_b, N, C);
    check_x("fused residual", d_res, res, n, TOL_OP);
    check_x("fused residual: out", d_out2, out, n, TOL_OP);
    check_f("fused residual: rstd", d_rstd, rstd, N, TOL_OP32);
    // backward, from the CPU's mean/rstd of `res`
    float* dinp = copy_h(dres, n);
    layernorm_backward_input(dinp, dinp, dout, res, w, mean, rstd, N, C);
    floatX* d_dinp = dev_x(dres, n); // in place: dinp = dresidual + ...
    float *d_mean_c = dev_f(mean, N), *d_rstd_c = dev_f(rstd, N);
    layernorm_backward_input_cuda(d_dinp, d_dinp, d_dout, d_res, d_w, d_mean_c, d_rstd_c, N, C);
    check_x("backward dinp (+ dresidual)", d_dinp, dinp, n, TOL_OP);
    float *dw = copy_h(dw0, C), *db = copy_h(db0, C);
    layernorm_backward_weight(dw, db, dout, res, mean, rstd, N, C, 1);
    float *d_dw = dev_f(dw0, C), *d_db = dev_f(db0, C), *scratch;
    cudaCheck(cudaMalloc(&scratch, (size_t)COLSUM_MAX_CHUNKS * 2 * C * sizeof(float)));
    layernorm_backward_weight_cuda(d_dw, d_db, d_dout, d_res, d_mean_c, d_rstd_c, N, C, scratch);
    check_f("backward dweight (+=)", d_dw, dw, C, TOL_OP32);
    check_f("backward dbias (+=)", d_db, db, C, TOL_OP32);
    free(x1); free(x2); free(w); free(b); free(dout); free(dres); free(dw0); free(db0); free(out); free(mean); free(rstd);
    free(res); free(dinp); free(dw); free(db);
    floatX* fx[] = {d_x1, d_x2, d_w, d_b, d_dout, d_out, d_res, d_out2, d_dinp};
    for (int i = 0; i < 9; i++) cudaCheck(cudaFree(fx[i]));
    float* ff[] = {d_mean, d_rstd, d_mean_c, d_rstd_c, d_dw, d_db, scratch};
    for (int i = 0; i < 7; i++) cudaCheck(cudaFree(ff[i]));
}

static void test_gelu(Rng* rng, long N) {
    printf("gelu N=%ld\n", N);
    float *x = rand_x(rng, N, 2.0f), *dout = rand_x(rng, N, 1.0f), *out = zeros_h(N), *dinp = zeros_h(N);
    gelu_forward(out, x, N);
    gelu_backward(dinp, x, dout, N);
    floatX *d_x = dev_x(x, N), *d_dout = dev_x(dout, N), *d_out = dev_x_poison(N), *d_dinp = dev_x_poison(N);
    gelu_forward_cuda(d_out, d_x, N);
    check_x("forward", d_out, out, N, TOL_OP);
    gelu_backward_cuda(d_dinp, d_x, d_dout, N);
    check_x("backward", d_dinp, dinp, N, TOL_OP);
    free(x); free(dout); free(out); free(dinp);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dinp));
}

static void test_encoder(Rng* rng, int B, int T, int C, int Vp, int maxT) {
    printf("encoder B=%d T=%d C=%d\n", B, T, C);
    int BT = B * T;
    int* tok = (int*)malloc_check(BT * sizeof(int));
    for (int i = 0; i < BT; i++) tok[i] = (int)rng_below(rng, 50); // repeats: several positions per token
    float *wte = rand_x(rng, (size_t)Vp * C, 1.0f), *wpe = rand_x(rng, (size_t)maxT * C, 1.0f), *dout = rand_x(rng, (size_t)BT * C, 1.0f);
    float *dwte0 = rand_x(rng, (size_t)Vp * C, 1.0f), *dwpe0 = rand_x(rng, (size_t)maxT * C, 1.0f), *out = zeros_h((size_t)BT * C);
    encoder_forward(out, tok, wte, wpe, B, T, C);
    float *dwte = copy_h(dwte0, (size_t)Vp * C), *dwpe = copy_h(dwpe0, (size_t)maxT * C);
    encoder_backward(dwte, dwpe, dout, tok, B, T, C);
    int* d_tok = dev_i(tok, BT);
    int* d_scratch;
    cudaCheck(cudaMalloc(&d_scratch, (3 * BT + 1) * sizeof(int)));
    floatX *d_wte = dev_x(wte, (size_t)Vp * C), *d_wpe = dev_x(wpe, (size_t)maxT * C), *d_dout = dev_x(dout, (size_t)BT * C);
    floatX* d_out = dev_x_poison((size_t)BT * C);
    encoder_forward_cuda(d_out, d_tok, d_wte, d_wpe, B, T, C);
    check_x("forward", d_out, out, (size_t)BT * C, TOL_OP);
    float *d_dwte = dev_f(dwte0, (size_t)Vp * C), *d_dwpe = dev_f(dwpe0, (size_t)maxT * C);
    encoder_backward_cuda(d_dwte, d_dwpe, d_dout, tok, B, T, C, d_scratch);
    check_f("backward dwte (+=)", d_dwte, dwte, (size_t)Vp * C, TOL_OP32);
    check_f("backward dwpe (+=)", d_dwpe, dwpe, (size_t)maxT * C, TOL_OP32);
    free(tok); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(out); free(dwte); free(dwpe);
    cudaCheck(cudaFree(d_tok)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dwte)); cudaCheck(cudaFree(d_dwpe));
}

static void test_classifier(Rng* rng, int BT, int V, int Vp) {
    printf("classifier BT=%d V=%d Vp=%d\n", BT, V, Vp);
    size_t n = (size_t)BT * Vp;
    float* logits = rand_x(rng, n, 3.0f);
    int* tgt = (int*)malloc_check(BT * sizeof(int));
    for (int i = 0; i < BT; i++) tgt[i] = (int)rng_below(rng, V);
    float dloss = 1.0f / BT;
    float *probs = zeros_h(n), *losses = zeros_h(BT), *dlogits = zeros_h(n);
    classifier_forward(losses, probs, logits, tgt, BT, V, Vp);
    classifier_backward(dlogits, probs, tgt, dloss, BT, V, Vp);
    int* d_tgt = dev_i(tgt, BT);
    floatX* d_logits = dev_x(logits, n);
    float *d_losses = dev_f_poison(BT), *d_lse = dev_f_poison(BT);
    classifier_forward_cuda(d_losses, d_lse, d_logits, d_tgt, BT, V, Vp);
    check_f("forward losses", d_losses, losses, BT, TOL_OP32);
    classifier_backward_cuda(d_logits, d_lse, d_tgt, dloss, BT, V, Vp);
    check_x("backward dlogits", d_logits, dlogits, n, TOL_OP);
    floatX_upload(d_logits, logits, n);
    cudaCheck(cudaMemset(d_losses, 0xff, BT * sizeof(float)));
    fused_classifier_cuda(d_logits, d_losses, d_lse, d_tgt, dloss, BT, V, Vp);
    check_f("fused losses", d_losses, losses, BT, TOL_OP32);
    check_x("fused dlogits", d_logits, dlogits, n, TOL_OP);
    free(logits); free(tgt); free(probs); free(losses); free(dlogits);
    cudaCheck(cudaFree(d_tgt)); cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_losses)); cudaCheck(cudaFree(d_lse));
}

static void test_adamw(Rng* rng, size_t n) {
    printf("adamw n=%zu (step t=3, weight decay 0.1, grad_scale 0.5)\n", n);
    float *p0 = rand_x(rng, n, 1.0f), *g = rand_x(rng, n, 1.0f), *m0 = rand_x(rng, n, 0.1f), *v0 = rand_x(rng, n, 0.1f);
    for (size_t i = 0; i < n; i++) v0[i] *= v0[i]; // second moments are non-negative
    float *p = copy_h(p0, n), *m = copy_h(m0, n), *v = copy_h(v0, n);
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, 3, gs);
    float *d_p = dev_f(p0, n), *d_g = dev_f(g, n), *d_m = dev_f(m0, n), *d_v = dev_f(v0, n);
    floatX* d_px = dev_x_poison(n);
    adamw_update_cuda(d_p, d_px, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, 3, gs);
    // the update itself (p - p0), not p, so its own precision is measured
    float *hp = get_f(d_p, n), *du_g = zeros_h(n), *du_c = zeros_h(n);
    for (size_t i = 0; i < n; i++) {
        du_g[i] = hp[i] - p0[i];
        du_c[i] = p[i] - p0[i];
    }
    check("update (p - p0)", du_g, du_c, n, 1e-4); // fp32 both sides: approximate sqrt/division, ~1e-6
    check_f("m", d_m, m, n, 1e-5);
    check_f("v", d_v, v, n, 1e-5);
    // the compute copy is exactly the master rounded to floatX (bitwise)
    float* hx = get_x(d_px, n);
    size_t mismatch = 0;
    for (size_t i = 0; i < n; i++) {
        float r = hp[i];
        round_x(&r, 1);
        if (memcmp(&r, &hx[i], sizeof(float))) mismatch++;
    }
    int ok = mismatch == 0;
    printf("  %-30s %zu of %zu elements differ from round(master)  %s\n", "floatX copy (bitwise)", mismatch, n, ok ? "OK" : "NOT OK");
    if (!ok) g_all_ok = 0;
    free(p0); free(g); free(m0); free(v0); free(p); free(m); free(v); free(hp); free(du_g); free(du_c); free(hx);
    cudaCheck(cudaFree(d_p)); cudaCheck(cudaFree(d_g)); cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_px));
}

static void test_sumsq(Rng* rng, size_t n) {
    printf("sumsq n=%zu\n", n);
    float* x = rand_x(rng, n, 1.0f);
    double cpu = global_norm_sumsq(x, n);
    float *d_x = dev_f(x, n), *scratch;
    cudaCheck(cudaMalloc(&scratch, (SUMSQ_BLOCKS + 2) * sizeof(float)));
    double gpu = sumsq_cuda(d_x, n, scratch);
    check_scalar("sum of squares / n", gpu / n, cpu / n, 1e-5); // fp32 partial sums of ~n/2^18 terms each
    free(x);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(scratch));
}

// ---- the whole model -----------------------------------------------------------------------------------

typedef struct {
    GPT2Config cfg;
    int B, T;
    float* params; // full model, rounded to floatX
    int* inputs;   // (B, T)
    int* targets;  // (B, T)
} ModelCase;

// the CPU reference run: forward, both backward halves; grads (num_params) and dwte_head (Vp*C) zeroed first
typedef struct {
    GPT2Acts a;
    GPT2GradActs g;
    float* grads;
    float* dwte_head;
    float* logits; // (B, T, Vp) recomputed from lnf (the forward leaves probabilities)
    float loss;
} CpuRun;

static void cpu_run(CpuRun* c, const ModelCase* mc, const float* params) {
    GPT2Range all = {0, mc->cfg.num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t np = gpt2_param_sizes(&mc->cfg, &all, sizes);
    ParameterTensors p, gr;
    gpt2_point_params(&p, (float*)params, sizes);
    c->grads = zeros_h(np);
    gpt2_point_params(&gr, c->grads, sizes);
    int BT = mc->B * mc->T, C = mc->cfg.channels, Vp = mc->cfg.padded_vocab_size;
    c->dwte_head = zeros_h((size_t)Vp * C);
    gpt2_acts_alloc(&c->a, &mc->cfg, &all, mc->B, mc->T);
    gpt2_grad_acts_alloc(&c->g, &mc->cfg, &all, mc->B, mc->T);
    memcpy(c->a.inputs, mc->inputs, BT * sizeof(int));
    memcpy(c->a.targets, mc->targets, BT * sizeof(int));
    c->loss = gpt2_forward(&mc->cfg, &all, &p, &c->a, 1, NULL);
    c->logits = zeros_h((size_t)BT * Vp);
    matmul_forward(c->logits, c->a.lnf, p.wte, NULL, BT, C, Vp);
    gpt2_backward_input(&mc->cfg, &all, &p, &c->a, &c->g, NULL, 1.0f / BT, NULL);
    gpt2_backward_weight(&mc->cfg, &all, &c->a, &c->g, NULL, &gr, c->dwte_head, 1);
}

static void cpu_run_free(CpuRun* c) {
    gpt2_acts_free(&c->a);
    gpt2_grad_acts_free(&c->g);
    free(c->grads);
    free(c->dwte_head);
    free(c->logits);
}

// per-tensor comparison of a stage's gradients (gpu, laid out for range r) with the full model's (cpu)
static void check_grads(const GPT2Config* cfg, const GPT2Range* r, const float* gpu, const float* cpu_full, int skip_wte) {
    size_t ss[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(cfg, r, ss);
    float* cpu = zeros_h(n);
    gpt2_slice_params(cfg, r, cpu_full, cpu);
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        if (ss[i] && !(i == 0 && skip_wte)) {
            char name[64];
            snprintf(name, sizeof(name), "grad %s", gpt2_param_name(i));
            check(name, gpu + off, cpu + off, ss[i], TOL_MODEL);
        }
        off += ss[i];
    }
    free(cpu);
}

static void test_model(const ModelCase* mc, const CpuRun* c) {
    const GPT2Config* cfg = &mc->cfg;
    int B = mc->B, T = mc->T, BT = B * T, C = cfg->channels, Vp = cfg->padded_vocab_size, L = cfg->num_layers;
    size_t BTC = (size_t)BT * C;
    printf("model: L=%d C=%d NH=%d V=%d Vp=%d, B=%d T=%d, matmul %s, one stage\n", L, C, cfg->num_heads, cfg->vocab_size, Vp, B, T,
           matmul_backend_name(g_matmul_backend));
    GPT2Range all = {0, L, 1, 1};
    GPT2Cuda m;
    GPT2CudaActs a;
    GPT2CudaGradActs g;
    gpt2_cuda_init(&m, cfg, &all, mc->params);
    gpt2_cuda_acts_alloc(&a, &m, B, T);
    gpt2_cuda_grad_acts_alloc(&g, &m, B, T);
    float loss = gpt2_cuda_forward(&m, &a, mc->inputs, mc->targets, NULL);
    check_scalar("loss", loss, c->loss, TOL_LOSS);
    check_x("act ln1 (all layers)", a.ln1, c->a.ln1, L * BTC, TOL_MODEL);
    check_x("act qkv", a.qkv, c->a.qkv, 3 * L * BTC, TOL_MODEL);
    check_x("act atty", a.atty, c->a.atty, L * BTC, TOL_MODEL);
    check_x("act fch_gelu", a.fch_gelu, c->a.fch_gelu, 4 * L * BTC, TOL_MODEL);
    check_x("act residual3", a.residual3, c->a.residual3, L * BTC, TOL_MODEL);
    check_x("act lnf", a.lnf, c->a.lnf, BTC, TOL_MODEL);
    check_x("logits", a.logits, c->logits, (size_t)BT * Vp, TOL_MODEL);
    gpt2_cuda_zero_grads(&m);
    gpt2_cuda_backward_input(&m, &a, &g, NULL, 1.0f / BT);
    check_x("dlogits", a.logits, c->g.dlogits, (size_t)BT * Vp, TOL_MODEL);
    check_x("dres3 (all layers)", g.dres3, c->g.dres3, L * BTC, TOL_MODEL);
    check_x("dqkv (all layers)", g.dqkv, c->g.dqkv, 3 * L * BTC, TOL_MODEL);
    check_x("dx_in", g.dx_in, c->g.dx_in, BTC, TOL_MODEL);
    UnitLog units = {{0}, 0};
    GPT2UnitHook hook = {unit_log, &units};
    gpt2_cuda_backward_weight(&m, &a, &g, &hook);
    check_unit_order(&units, L);
    float* gr = zeros_h(m.num_params);
    gpt2_cuda_get_grads(&m, gr);
    check_grads(cfg, &all, gr, c->grads, 0);
    float* dh = zeros_h((size_t)Vp * C);
    gpt2_cuda_get_dwte_head(&m, dh);
    check("grad wte (LM head share)", dh, c->dwte_head, (size_t)Vp * C, TOL_MODEL);
    // per-unit sums of squares for the global norm (unit 0 embeddings, 1..L layers, L+1 head), before the
    // tied embedding is summed: wte's encoder share only
    double* ug = (double*)calloc_check(L + 2, sizeof(double));
    gpt2_cuda_grad_unit_sumsq(&m, ug);
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_sizes(cfg, &all, sizes);
    float uc[64], ugf[64];
    size_t off = 0;
    for (int u = 0; u < L + 2; u++) uc[u] = 0.0f;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        for (int l = 0; l < (gpt2_param_is_layer(i) ? L : 1); l++) {
            size_t n = gpt2_param_is_layer(i) ? sizes[i] / L : sizes[i];
            int unit = gpt2_param_is_layer(i) ? 1 + l : i < 2 ? 0 : L + 1;
            uc[unit] += (float)global_norm_sumsq(c->grads + off + l * n, n);
        }
        off += sizes[i];
    }
    for (int u = 0; u < L + 2; u++) ugf[u] = (float)ug[u];
    check("grad sums of squares per unit", ugf, uc, L + 2, 2 * TOL_MODEL); // squares: twice the relative error
    free(ug);
    free(gr);
    free(dh);
    gpt2_cuda_acts_free(&a);
    gpt2_cuda_grad_acts_free(&g);
    gpt2_cuda_free(&m);
}

// the same batch through two GPU stages [0, L/2) and [L/2, L), activations and gradients passed through the host
static void test_model_split(const ModelCase* mc, const CpuRun* c) {
    const GPT2Config* cfg = &mc->cfg;
    int B = mc->B, T = mc->T, BT = B * T, C = cfg->channels, Vp = cfg->padded_vocab_size, L = cfg->num_layers;
    printf("model: two stages [0,%d) and [%d,%d) through the host\n", L / 2, L / 2, L);
    GPT2Range r0 = {0, L / 2, 1, 0}, r1 = {L / 2, L, 0, 1};
    size_t s0[GPT2_NUM_PARAM_TENSORS], s1[GPT2_NUM_PARAM_TENSORS];
    size_t n0 = gpt2_param_sizes(cfg, &r0, s0), n1 = gpt2_param_sizes(cfg, &r1, s1);
    float *p0 = zeros_h(n0), *p1 = zeros_h(n1), *x = zeros_h((size_t)BT * C);
    gpt2_slice_params(cfg, &r0, mc->params, p0);
    gpt2_slice_params(cfg, &r1, mc->params, p1);
    GPT2Cuda m0, m1;
    GPT2CudaActs a0, a1;
    GPT2CudaGradActs g0, g1;
    gpt2_cuda_init(&m0, cfg, &r0, p0);
    gpt2_cuda_init(&m1, cfg, &r1, p1);
    gpt2_cuda_acts_alloc(&a0, &m0, B, T);
    gpt2_cuda_acts_alloc(&a1, &m1, B, T);
    gpt2_cuda_grad_acts_alloc(&g0, &m0, B, T);
    gpt2_cuda_grad_acts_alloc(&g1, &m1, B, T);
    gpt2_cuda_forward(&m0, &a0, mc->inputs, NULL, NULL);
    gpt2_cuda_stage_output(&m0, &a0, x);
    float loss = gpt2_cuda_forward(&m1, &a1, NULL, mc->targets, x);
    check_scalar("loss", loss, c->loss, TOL_LOSS);
    gpt2_cuda_zero_grads(&m0);
    gpt2_cuda_zero_grads(&m1);
    gpt2_cuda_backward_input(&m1, &a1, &g1, NULL, 1.0f / BT);
    gpt2_cuda_dx_in(&m1, &g1, B, T, x);
    gpt2_cuda_backward_input(&m0, &a0, &g0, x, 0.0f);
    gpt2_cuda_backward_weight(&m1, &a1, &g1, NULL);
    gpt2_cuda_backward_weight(&m0, &a0, &g0, NULL);
    float *gr0 = zeros_h(n0), *gr1 = zeros_h(n1), *dh = zeros_h((size_t)Vp * C);
    gpt2_cuda_get_grads(&m0, gr0);
    gpt2_cuda_get_grads(&m1, gr1);
    gpt2_cuda_get_dwte_head(&m1, dh);
    printf(" stage 0:\n");
    check_grads(cfg, &r0, gr0, c->grads, 0);
    printf(" stage 1 (its wte gradient is the LM head's share, compared next):\n");
    check_grads(cfg, &r1, gr1, c->grads, 1);
    check("grad wte (LM head share)", dh, c->dwte_head, (size_t)Vp * C, TOL_MODEL);
    free(p0); free(p1); free(x); free(gr0); free(gr1); free(dh);
    gpt2_cuda_acts_free(&a0); gpt2_cuda_acts_free(&a1); gpt2_cuda_grad_acts_free(&g0); gpt2_cuda_grad_acts_free(&g1);
    gpt2_cuda_free(&m0); gpt2_cuda_free(&m1);
}

// AdamW steps on the same batch, both backends from the same start. Per step the loss must agree.
// After the steps the parameter *updates* (p - p0) are compared L2-relatively per tensor: Adam moves
// every element by about lr whatever its gradient's size, so elements whose gradient is within the
// backends' difference of zero may move either way; in bf16 that is a few percent of the elements,
// hence the looser bf16 bound (a wrong update formula shows up in the AdamW test above). The key bias
// (qkvb's middle third) is left out: its gradient is exactly zero in exact arithmetic (softmax is
// invariant to adding q·b_k to every score of a query), so both sides move it by ±lr on rounding noise.
static void test_steps(const ModelCase* mc, int steps) {
    const GPT2Config* cfg = &mc->cfg;
    int B = mc->B, T = mc->T, BT = B * T, C = cfg->channels;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    printf("%d AdamW steps (lr %g, weight decay %g on matrices), same batch\n", steps, lr, wd);
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t np = gpt2_param_sizes(cfg, &all, sizes);
    float *p = copy_h(mc->params, np), *grads = zeros_h(np), *mm = zeros_h(np), *vv = zeros_h(np);
    float* dwte_head = zeros_h((size_t)cfg->padded_vocab_size * C);
    ParameterTensors pt, gt;
    gpt2_point_params(&pt, p, sizes);
    gpt2_point_params(&gt, grads, sizes);
    GPT2Acts a;
    GPT2GradActs g;
    gpt2_acts_alloc(&a, cfg, &all, B, T);
    gpt2_grad_acts_alloc(&g, cfg, &all, B, T);
    memcpy(a.inputs, mc->inputs, BT * sizeof(int));
    memcpy(a.targets, mc->targets, BT * sizeof(int));
    GPT2Cuda m;
    GPT2CudaActs ga;
    GPT2CudaGradActs gg;
    gpt2_cuda_init(&m, cfg, &all, mc->params);
    gpt2_cuda_acts_alloc(&ga, &m, B, T);
    gpt2_cuda_grad_acts_alloc(&gg, &m, B, T);
    for (int t = 1; t <= steps; t++) {
        memset(grads, 0, np * sizeof(float));
        memset(dwte_head, 0, (size_t)cfg->padded_vocab_size * C * sizeof(float));
        float lc = gpt2_forward(cfg, &all, &pt, &a, 1, NULL);
        gpt2_backward_input(cfg, &all, &pt, &a, &g, NULL, 1.0f / BT, NULL);
        gpt2_backward_weight(cfg, &all, &a, &g, NULL, &gt, dwte_head, 1);
        for (size_t i = 0; i < sizes[0]; i++) gt.wte[i] += dwte_head[i];
        size_t off = 0;
        for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
            adamw_update(p + off, grads + off, mm + off, vv + off, sizes[i], lr, b1, b2, eps, gpt2_param_decays(i) ? wd : 0.0f, t, 1.0f);
            off += sizes[i];
        }
        gpt2_cuda_zero_grads(&m);
        float lg = gpt2_cuda_forward(&m, &ga, mc->inputs, mc->targets, NULL);
        gpt2_cuda_backward_input(&m, &ga, &gg, NULL, 1.0f / BT);
        gpt2_cuda_backward_weight(&m, &ga, &gg, NULL);
        gpt2_cuda_tie_wte_grads(&m);
        gpt2_cuda_update(&m, lr, b1, b2, eps, wd, t, 1.0f);
        char name[32];
        snprintf(name, sizeof(name), "step %d loss", t);
        check_scalar(name, lg, lc, TOL_LOSS * (1 + t / 2)); // differences compound over the steps
    }
    float* pg = zeros_h(np);
    gpt2_cuda_get_params(&m, pg);
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        double num = 0.0, den = 0.0;
        size_t nonfinite = 0;
        for (size_t j = off; j < off + sizes[i]; j++) {
            if (!isfinite(pg[j])) nonfinite++;
            if (i == 5 && (j - off) % (3 * C) >= (size_t)C && (j - off) % (3 * C) < 2 * (size_t)C) continue; // key bias, see above
            double dg = (double)pg[j] - mc->params[j], dc = (double)p[j] - mc->params[j];
            num += (dg - dc) * (dg - dc);
            den += dc * dc;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        int ok = nonfinite == 0 && rel <= TOL_STEPS;
        printf("  %-30s update L2 rel diff %9.3e  tol %.0e  %s%s\n", gpt2_param_name(i), rel, TOL_STEPS, ok ? "OK" : "NOT OK",
               i == 5 ? "  (query and value biases; the key bias's gradient is exactly 0)" : "");
        if (!ok) g_all_ok = 0;
        off += sizes[i];
    }
    free(p); free(grads); free(mm); free(vv); free(dwte_head); free(pg);
    gpt2_acts_free(&a); gpt2_grad_acts_free(&g);
    gpt2_cuda_acts_free(&ga); gpt2_cuda_grad_acts_free(&gg); gpt2_cuda_free(&m);
}

// every operation alone, against the CPU reference
static void test_ops(Rng* rng_) {
    Rng& rng = *rng_;
    printf("== operations alone ==\n");
#ifdef ENABLE_FP32
    MatmulBackend backends[] = {MATMUL_TDPIPE, MATMUL_CUBLASLT};
#else
    MatmulBackend backends[] = {MATMUL_TDPIPE, MATMUL_TDPIPE_MMA, MATMUL_CUBLASLT};
#endif
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        test_matmul(&rng, 256, 128, 384, backends[i]);  // the test model's shapes
        test_matmul(&rng, 200, 72, 136, backends[i]);   // partial tiles in M, N and K
        test_matmul(&rng, 512, 256, 1024, backends[i]); // several tiles each way
        test_matmul(&rng, 2048, 128, 128, backends[i]); // dweight split along its depth (split-K)
    }
    test_attention(&rng, 2, 80, 128, 2, 0); // T not a multiple of the tiles
    test_attention(&rng, 1, 256, 192, 3, 0);
#ifndef ENABLE_FP32
    test_attention(&rng, 2, 80, 128, 2, 1); // the simple kernels too (the fp32 build uses only those)
#endif
    test_layernorm(&rng, 256, 128);
    test_layernorm(&rng, 100, 72);
    test_layernorm(&rng, 64, 768);
    test_gelu(&rng, 4 * 256 * 128);
    test_encoder(&rng, 4, 64, 128, 256, 64);
    test_classifier(&rng, 128, 200, 256);
    test_adamw(&rng, 100000);
    test_sumsq(&rng, 1000003);
}

int main(int argc, char** argv) {
    const DevCli cli = {"test_gpt2cu", "usage: test_gpt2cu (bf16) or build/test_gpt2cu_fp32 (fp32) [--matmul tdpipe|tdpipe-mma|cublaslt (the model's matmul, default tdpipe)] [--model-only]\n"};
    dev_cli_help(&cli, argc, argv); // the arguments are read before the GPU is touched
    MatmulBackend model_backend = MATMUL_TDPIPE;
    int model_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--matmul")) {
            const char* v = dev_cli_value(&cli, argc, argv, i++);
            if (!matmul_backend_parse(v, &model_backend)) dev_cli_refuse(&cli, "--matmul %s: expected tdpipe, tdpipe-mma or cublaslt", v);
        } else if (!strcmp(argv[i], "--model-only")) {
            model_only = 1;
        } else {
            dev_cli_refuse(&cli, "unexpected argument '%s'", argv[i]);
        }
    }
    cuda_device_init(0);
    printf("test_gpt2cu: %s build, device %s (sm_%d%d, %d SMs)\n", PRECISION_NAME, g_device_prop.name, g_device_prop.major,
           g_device_prop.minor, g_device_prop.multiProcessorCount);
#ifndef ENABLE_FP32
    printf("matmul tdpipe: %s\n", gemm_wgmma_available() ? "wgmma + TMA kernel (sm_90a)" : "mma.sync kernel (no sm_90a code for this device)");
#endif
    Rng rng;
    rng_init(&rng, 42);

    if (!model_only) test_ops(&rng);

    printf("== the whole model ==\n");
    g_matmul_backend = model_backend;
    ModelCase mc;
    mc.cfg.max_seq_len = 64;
    mc.cfg.vocab_size = 200;
    mc.cfg.padded_vocab_size = 256;
    mc.cfg.num_layers = 2;
    mc.cfg.num_heads = 2;
    mc.cfg.channels = 128;
    mc.B = 4;
    mc.T = 64;
    GPT2Range all = {0, mc.cfg.num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t np = gpt2_param_sizes(&mc.cfg, &all, sizes);
    mc.params = zeros_h(np);
    gpt2_init_full(&mc.cfg, mc.params, 1337);
    round_x(mc.params, np); // both backends start from weights the GPU's compute copy holds exactly
    int BT = mc.B * mc.T;
    mc.inputs = (int*)malloc_check(BT * sizeof(int));
    mc.targets = (int*)malloc_check(BT * sizeof(int));
    for (int i = 0; i < BT; i++) mc.inputs[i] = (int)rng_below(&rng, mc.cfg.vocab_size);
    for (int i = 0; i < BT; i++) mc.targets[i] = i + 1 < BT ? mc.inputs[i + 1] : (int)rng_below(&rng, mc.cfg.vocab_size);
    CpuRun c;
    cpu_run(&c, &mc, mc.params);
    test_model(&mc, &c);
    test_model_split(&mc, &c);
    cpu_run_free(&c);
    test_steps(&mc, 10);
    if (!model_only) { // last, so that a hang here (a TMA box wholly out of range) masks nothing above
        printf("== edge shapes (-e d1: C = 64, one head) ==\n");
#ifdef ENABLE_FP32
        MatmulBackend edge[] = {MATMUL_TDPIPE, MATMUL_CUBLASLT};
#else
        MatmulBackend edge[] = {MATMUL_TDPIPE, MATMUL_TDPIPE_MMA, MATMUL_CUBLASLT};
#endif
        // every dimension under one 128 x 128 tile; MN-major operands of at most 64 columns, whose
        // second 64-wide TMA box lies wholly outside the tensor (dinp's weight, dweight's dout)
        for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++) {
            test_matmul(&rng, 64, 64, 40, edge[i]);
            test_matmul(&rng, 40, 56, 64, edge[i]);
        }
        test_attention(&rng, 2, 37, 64, 1, 0); // T not a multiple of 8 or 16, one head of 64
    }
    free(mc.params);
    free(mc.inputs);
    free(mc.targets);
    cublaslt_free();

    printf("overall okay: %d\n", g_all_ok);
    return g_all_ok ? 0 : 1;
}
