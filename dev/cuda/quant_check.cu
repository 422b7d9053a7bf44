// Check of llmc/quant.cuh against the CPU reference llmc/quant.c, bitwise: q, scales, non-finite
// counts, residuals, dequantized values and sums, histograms, for every kind of block (subnormal, huge,
// non-finite) and block size; then each kernel's GB/s on 4M elements (figures, not checks).
// Prints "ok"/"FAIL" lines and "quant_check: N passed, N failed"; exit code 1 on any failure.
// Usage: build/dev/cuda/quant_check
#include "dev/dev_cli.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/quant.cuh"
#include "llmc/rng.h"
#include "tests/test.h"

enum { MAX_N = 1 << 22 };

// host buffers (MAX_N): the input, the CPU's results, the GPU's results downloaded
static float *x, *r0, *r_cpu, *r_gpu, *s_cpu, *s_gpu, *s_ef, *y_cpu, *y_gpu;
static int8_t *q_cpu, *q_gpu, *q_ef;
// device buffers (MAX_N)
static float *d_x, *d_r, *d_s, *d_y;
static int8_t* d_q;
static unsigned long long *d_bad, *d_hist;

static void up(void* dst, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice)); }
static void down(void* dst, const void* src, size_t bytes) { cudaCheck(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)); }

// "bitwise equal" or where the first difference is: bytes of `size` elements, printed as floats (size
// 4), int8 (1) or counts (8)
static int same(const void* gpu, const void* cpu, size_t count, size_t size, char* detail, size_t len) {
    if (memcmp(gpu, cpu, count * size) == 0) return snprintf(detail, len, "bitwise equal"), 1;
    size_t i = 0;
    while (memcmp((const char*)gpu + i * size, (const char*)cpu + i * size, size) == 0) i++;
    if (size == 4)
        snprintf(detail, len, "element %zu: GPU %a, CPU %a", i, ((const float*)gpu)[i], ((const float*)cpu)[i]);
    else if (size == 1)
        snprintf(detail, len, "element %zu: GPU %d, CPU %d", i, ((const int8_t*)gpu)[i], ((const int8_t*)cpu)[i]);
    else
        snprintf(detail, len, "element %zu: GPU %llu, CPU %llu", i, ((const unsigned long long*)gpu)[i], ((const unsigned long long*)cpu)[i]);
    return 0;
}

static unsigned long long read_bad(void) {
    unsigned long long b;
    down(&b, d_bad, sizeof b);
    return b;
}

// every kernel on x (n) in blocks of `block`, against the CPU; r0 (n) the residual error feedback starts from
static void check_case(const char* what, size_t n, int block) {
    size_t nb = quant_blocks(n, block);
    char d1[160], d2[160], d3[160];
    // quant_int8
    size_t bad_cpu = quant_int8(x, n, block, q_cpu, s_cpu);
    up(d_x, x, n * 4);
    cudaCheck(cudaMemset(d_bad, 0, sizeof *d_bad));
    quant_int8_cuda(d_x, n, block, d_q, d_s, d_bad);
    down(q_gpu, d_q, n);
    down(s_gpu, d_s, nb * 4);
    unsigned long long bad_gpu = read_bad();
    int ok = same(q_gpu, q_cpu, n, 1, d1, sizeof d1) & same(s_gpu, s_cpu, nb, 4, d2, sizeof d2);
    CHECK(ok && bad_gpu == bad_cpu, "%s, n %zu, block %d: quant_int8: q %s; scales %s; %llu non-finite (CPU %zu)", what, n, block, d1, d2,
          bad_gpu, bad_cpu);
    // quant_int8_ef from r0
    memcpy(r_cpu, r0, n * 4);
    bad_cpu = quant_int8_ef(x, r_cpu, n, block, q_ef, s_ef);
    up(d_r, r0, n * 4);
    cudaCheck(cudaMemset(d_bad, 0, sizeof *d_bad));
    quant_int8_ef_cuda(d_x, d_r, n, block, d_q, d_s, d_bad);
    down(q_gpu, d_q, n);
    down(s_gpu, d_s, nb * 4);
    down(r_gpu, d_r, n * 4);
    bad_gpu = read_bad();
    ok = same(q_gpu, q_ef, n, 1, d1, sizeof d1) & same(s_gpu, s_ef, nb, 4, d2, sizeof d2) & same(r_gpu, r_cpu, n, 4, d3, sizeof d3);
    CHECK(ok && bad_gpu == bad_cpu, "%s, n %zu, block %d: quant_int8_ef: q %s; scales %s; residual %s; %llu non-finite (CPU %zu)", what, n,
          block, d1, d2, d3, bad_gpu, bad_cpu);
    // dequant_int8 of the CPU's plain q and scales (so it is checked apart from the quantizer)
    dequant_int8(q_cpu, s_cpu, n, block, y_cpu);
    up(d_q, q_cpu, n);
    up(d_s, s_cpu, nb * 4);
    dequant_int8_cuda(d_q, d_s, n, block, d_y);
    down(y_gpu, d_y, n * 4);
    CHECK(same(y_gpu, y_cpu, n, 4, d1, sizeof d1), "%s, n %zu, block %d: dequant_int8: %s", what, n, block, d1);
    // dequant_int8_add: the plain q onto the residual, then the error-feedback q (NaN onto NaN where both refused)
    memcpy(y_cpu, r0, n * 4);
    dequant_int8_add(q_cpu, s_cpu, n, block, y_cpu);
    dequant_int8_add(q_ef, s_ef, n, block, y_cpu);
    up(d_y, r0, n * 4);
    dequant_int8_add_cuda(d_q, d_s, n, block, d_y);
    up(d_q, q_ef, n);
    up(d_s, s_ef, nb * 4);
    dequant_int8_add_cuda(d_q, d_s, n, block, d_y);
    down(y_gpu, d_y, n * 4);
    CHECK(same(y_gpu, y_cpu, n, 4, d1, sizeof d1), "%s, n %zu, block %d: dequant_int8_add twice: %s", what, n, block, d1);
    // quant_histogram_add of both q onto counts that are not zero
    uint64_t h_cpu[256], h_gpu[256];
    for (int i = 0; i < 256; i++) h_cpu[i] = (uint64_t)i * 1000003u;
    up(d_hist, h_cpu, sizeof h_cpu);
    quant_histogram_add(q_cpu, n, h_cpu);
    quant_histogram_add(q_ef, n, h_cpu);
    up(d_q, q_cpu, n);
    quant_histogram_add_cuda(d_q, n, d_hist);
    up(d_q, q_ef, n);
    quant_histogram_add_cuda(d_q, n, d_hist);
    down(h_gpu, d_hist, sizeof h_gpu);
    CHECK(same(h_gpu, h_cpu, 256, 8, d1, sizeof d1), "%s, n %zu, block %d: quant_histogram_add twice: %s", what, n, block, d1);
}

enum { NORMAL, GRADIENT, CONSTANT, ZEROS, TINY, HUGE_, SUBNORMAL, SPIKE, EXTREMES, NONFINITE, KINDS };
static const char* kind_names[KINDS] = {"normal(0, 1)", "normal(0, 1e-3)", "a constant", "zeros", "tiny (1e-30)", "huge (1e38)",
                                        "subnormal (1e-42)", "one spike", "+-FLT_MAX", "a NaN and infinities"};

// x (n) of that kind, and r0 (n) a residual of the same size (so x + r overflows in the huge kinds,
// is subnormal in the subnormal kind)
static void fill(int kind, size_t n, Rng* r) {
    for (size_t i = 0; i < n; i++) {
        float g = rng_normal(r);
        switch (kind) {
        case NORMAL: case NONFINITE: x[i] = g; break;
        case GRADIENT: x[i] = 1e-3f * g; break;
        case CONSTANT: x[i] = 0.37f; break;
        case ZEROS: x[i] = 0.0f; break;
        case TINY: x[i] = 1e-30f * g; break;
        case HUGE_: x[i] = 1e38f * (2 * rng_f32(r) - 1); break;
        case SUBNORMAL: x[i] = 1e-42f * g; break;
        case SPIKE: x[i] = i == 300 ? 5.0f : 1e-4f * g; break;
        default: x[i] = i % 2 ? FLT_MAX : -FLT_MAX; break;
        }
    }
    if (kind == NONFINITE && n > 901) x[300] = NAN, x[900] = INFINITY, x[901] = -INFINITY;
    for (size_t i = 0; i < n; i++) r0[i] = kind == ZEROS ? 0.0f : 0.5f * x[(i * 7 + 3) % n];
}

static void timings(void) {
    size_t n = MAX_N;
    int block = 256;
    size_t nb = quant_blocks(n, block);
    Rng r;
    rng_init(&r, 99);
    fill(GRADIENT, n, &r);
    up(d_x, x, n * 4);
    up(d_r, r0, n * 4);
    quant_int8_cuda(d_x, n, block, d_q, d_s, d_bad);
    const double f = 4, s = 4.0 * nb; // bytes of a float, of the scales
    struct {
        const char* name;
        double bytes;
    } k[5] = {{"quant_int8_cuda", f * n + n + s},           {"quant_int8_ef_cuda", 2 * f * n + n + f * n + s},
              {"dequant_int8_cuda", n + s + f * n},         {"dequant_int8_add_cuda", n + s + 2 * f * n},
              {"quant_histogram_add_cuda", (double)n}};
    float ms[5];
    ms[0] = time_cuda_ms([&] { quant_int8_cuda(d_x, n, block, d_q, d_s, d_bad); }, 3, 21);
    ms[1] = time_cuda_ms([&] { quant_int8_ef_cuda(d_x, d_r, n, block, d_q, d_s, d_bad); }, 3, 21);
    ms[2] = time_cuda_ms([&] { dequant_int8_cuda(d_q, d_s, n, block, d_y); }, 3, 21);
    ms[3] = time_cuda_ms([&] { dequant_int8_add_cuda(d_q, d_s, n, block, d_y); }, 3, 21);
    ms[4] = time_cuda_ms([&] { quant_histogram_add_cuda(d_q, n, d_hist); }, 3, 21);
    for (int i = 0; i < 5; i++)
        printf("figure (not a check): %-24s %zu elements, block %d: %8.1f us, %7.1f GB/s of the bytes it must move\n", k[i].name, n, block,
               ms[i] * 1e3, k[i].bytes / (ms[i] * 1e-3) / 1e9);
}

int main(int argc, char** argv) {
    const DevCli cli = {"quant_check", "usage: build/dev/cuda/quant_check   (no arguments)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 1) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[1]);
    cuda_device_init(0);
    printf("quant_check: device %s\n", g_device_prop.name);
    float** hf[] = {&x, &r0, &r_cpu, &r_gpu, &s_cpu, &s_gpu, &s_ef, &y_cpu, &y_gpu};
    for (int i = 0; i < 9; i++) *hf[i] = (float*)malloc_check(MAX_N * sizeof(float));
    int8_t** hq[] = {&q_cpu, &q_gpu, &q_ef};
    for (int i = 0; i < 3; i++) *hq[i] = (int8_t*)malloc_check(MAX_N);
    cuda_malloc_check(&d_x, MAX_N * sizeof(float));
    cuda_malloc_check(&d_r, MAX_N * sizeof(float));
    cuda_malloc_check(&d_s, MAX_N * sizeof(float)); // block 1: a scale an element
    cuda_malloc_check(&d_y, MAX_N * sizeof(float));
    cuda_malloc_check(&d_q, MAX_N);
    cuda_malloc_check(&d_bad, sizeof *d_bad);
    cuda_malloc_check(&d_hist, 256 * sizeof *d_hist);

    Rng r;
    rng_init(&r, 7);
    // every kind of block: 1000 elements in blocks of 256, the last one 232 long
    for (int k = 0; k < KINDS; k++) {
        fill(k, 1000, &r);
        check_case(kind_names[k], 1000, 256);
    }
    // every block size, from one element a block to one block for all (and a block past 1024 threads' worth)
    const int sizes[] = {1, 3, 128, 256, 999, 1000, 4096};
    for (int j = 0; j < 7; j++) {
        fill(NORMAL, 1000, &r);
        check_case("normal(0, 1)", 1000, sizes[j]);
    }
    fill(SUBNORMAL, 1000, &r);
    check_case("subnormal (1e-42)", 1000, 3);
    fill(NONFINITE, 1000, &r);
    check_case("a NaN and infinities", 1000, 1);
    // large: more blocks than the grid has warps (block 1: the grid-stride loop), a short last block
    fill(GRADIENT, MAX_N - 5, &r);
    check_case("normal(0, 1e-3)", MAX_N - 5, 256);
    check_case("normal(0, 1e-3)", MAX_N - 5, 1);
    check_case("normal(0, 1e-3)", MAX_N - 5, 4096);

    timings();
    cudaCheck(cudaDeviceSynchronize());
    printf("quant_check: ");
    return test_summary();
}
