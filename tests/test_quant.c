// 8-bit block quantization (llmc/quant.h): the round trip within half a step for every kind of block,
// non-finite values reported and never quantized, error feedback's telescoping sum, the replica-order
// dequantized sum, and the entropy of the int8 values.
#include <float.h>
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/quant.h"
#include "llmc/rng.h"
#include "tests/test.h"

enum { N = 1000, BLOCK = 256 }; // four blocks, the last 232 elements long

// The round-trip bound for an element of a block with stored scale s: rint(x / s) is within 0.5 of
// the true quotient plus the division's rounding (|x / s| <= 127.5, so at most 127.5 * 2^-24), and the
// product q * s is rounded once more (at most 127 s 2^-24): s (0.5 + 255 * 2^-24). A subnormal scale
// is itself rounded to a multiple of 2^-149, which can move 127 s below absmax by 127 * 2^-150 (the
// clamp) and q * s by 2^-150: 128 * 2^-149 more, nothing next to a normal block's figures.
static double bound(float s) { return (double)s * (0.5 + 255.0 * 0x1p-24) + 128.0 * 0x1p-149; }

// the largest |x - dq(q(x))| / bound over x (n); 1 means exactly at the bound
static double worst_ratio(const float* x, size_t n, int block) {
    int8_t* q = (int8_t*)malloc_check(n);
    float* s = (float*)malloc_check(quant_blocks(n, block) * sizeof(float));
    float* y = (float*)malloc_check(n * sizeof(float));
    size_t bad = quant_int8(x, n, block, q, s);
    dequant_int8(q, s, n, block, y);
    double worst = bad ? INFINITY : 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)x[i] - (double)y[i]) / bound(s[i / block]);
        if (r > worst) worst = r;
        if (q[i] == -128) worst = INFINITY; // outside [-127, 127]
    }
    free(q);
    free(s);
    free(y);
    return worst;
}

static void round_trips(void) {
    static float x[N];
    Rng r;
    rng_init(&r, 7);
    const char* kinds[] = {"normal(0, 1)", "normal(0, 1e-3), the size of a gradient", "a constant block", "all zeros", "tiny (1e-30)",
                           "huge (1e38)", "subnormal (1e-42 and below)", "one spike among small values", "the largest floats, both signs"};
    for (int k = 0; k < 9; k++) {
        for (int i = 0; i < N; i++) {
            float g = rng_normal(&r);
            x[i] = k == 0 ? g : k == 1 ? 1e-3f * g : k == 2 ? 0.37f : k == 3 ? 0.0f : k == 4 ? 1e-30f * g : k == 5 ? 1e38f * (2 * rng_f32(&r) - 1)
                 : k == 6 ? 1e-42f * g : k == 7 ? (i == 300 ? 5.0f : 1e-4f * g) : (i % 2 ? FLT_MAX : -FLT_MAX);
        }
        double w = worst_ratio(x, N, BLOCK);
        CHECK(w <= 1.0, "round trip of %s, %d elements in blocks of %d (the last one %d): worst |x - dq(q(x))| = %.4f of the bound", kinds[k], N,
              BLOCK, N % BLOCK, w);
    }
    // every block size, down to one element a block and up to one block for all
    for (int i = 0; i < N; i++) x[i] = rng_normal(&r);
    int sizes[] = {1, 3, 128, 999, 1000, 4096};
    double worst = 0.0;
    for (int j = 0; j < 6; j++) worst = fmax(worst, worst_ratio(x, N, sizes[j]));
    CHECK(worst <= 1.0, "block sizes 1, 3, 128, 999, 1000, 4096: worst %.4f of the bound", worst);
    // a constant block is exact: absmax / 127 * 127 comes back to within one rounding
    int8_t q[N];
    float s[4], y[N];
    for (int i = 0; i < N; i++) x[i] = -2.5f;
    quant_int8(x, N, BLOCK, q, s);
    dequant_int8(q, s, N, BLOCK, y);
    CHECK(q[0] == -127 && fabsf(y[0] + 2.5f) <= 2.5f * 0x1p-23, "a constant block quantizes to -127 and back to %.9g", y[0]);
    // zeros: scale 0, values 0, dequantized exactly 0
    memset(x, 0, sizeof(x));
    quant_int8(x, N, BLOCK, q, s);
    dequant_int8(q, s, N, BLOCK, y);
    int zeros = s[0] == 0.0f && s[3] == 0.0f;
    for (int i = 0; i < N; i++) zeros &= q[i] == 0 && y[i] == 0.0f;
    CHECK(zeros, "a block of zeros: scale 0, every value 0");
}

static void non_finite(void) {
    static float x[N], y[N];
    int8_t q[N];
    float s[4];
    Rng r;
    rng_init(&r, 8);
    for (int i = 0; i < N; i++) x[i] = rng_normal(&r);
    x[300] = NAN;
    x[900] = INFINITY;
    x[901] = -INFINITY;
    size_t bad = quant_int8(x, N, BLOCK, q, s);
    CHECK(bad == 3, "a NaN and two infinities are reported: %zu non-finite", bad);
    dequant_int8(q, s, N, BLOCK, y);
    CHECK(isnan(s[1]) && isnan(s[3]) && isfinite(s[0]) && isfinite(s[2]), "their blocks (1 and 3) get a NaN scale, the others do not");
    int spread = 1;
    for (int i = 0; i < N; i++) spread &= (i / BLOCK == 1 || i / BLOCK == 3) ? (isnan(y[i]) && q[i] == 0) : isfinite(y[i]);
    CHECK(spread, "dequantized, exactly those blocks are NaN (nothing quietly becomes a number)");
    float res[N] = {0};
    bad = quant_int8_ef(x, res, N, BLOCK, q, s);
    int kept = 1;
    for (int i = BLOCK; i < 2 * BLOCK; i++) kept &= res[i] == 0.0f;
    CHECK(bad == 3 && kept, "with error feedback too; a refused block leaves its residual as it was");
    // values so small that their block's scale (absmax / 127) underflows to 0: quantized to 0, and with
    // error feedback all of x + r carried in the residual, none of it dropped
    float tiny[BLOCK], rt[BLOCK];
    for (int i = 0; i < BLOCK; i++) tiny[i] = (i % 3 - 1) * 0x1p-148f, rt[i] = 0x1p-149f;
    bad = quant_int8_ef(tiny, rt, BLOCK, BLOCK, q, s);
    int carried = bad == 0 && s[0] == 0.0f;
    for (int i = 0; i < BLOCK; i++) carried &= q[i] == 0 && rt[i] == tiny[i] + 0x1p-149f;
    CHECK(carried, "a block whose scale underflows to 0: values 0, the residual holds x + r (%g)", (double)rt[2]);
}

// Error feedback telescopes: with r_0 = 0 and applied_k = dq(q(g_k + r_k)), r_{k+1} = (g_k + r_k) -
// applied_k, so sum_k applied_k + r_K = sum_k g_k exactly in real arithmetic. In fp32 each step rounds
// the sum g_k + r_k once and the subtraction once (each at most 2^-24 of its result), so per element
// |sum applied + r_K - sum g| <= sum_k 2^-24 (|g_k + r_k| + |r_{k+1}|); the sums here are in double.
static void telescopes(void) {
    enum { K = 50 };
    static float g[N], res[N], y[N];
    static double sum_g[N], sum_applied[N], slack[N];
    int8_t q[N];
    float s[4];
    Rng r;
    rng_init(&r, 9);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) g[i] = 1e-3f * rng_normal(&r) + (i % 7 == 0 ? 1e-6f : 0.0f); // a bias the rounding alone would lose
        for (int i = 0; i < N; i++) slack[i] += fabs((double)(g[i] + res[i])) * 0x1p-24;
        quant_int8_ef(g, res, N, BLOCK, q, s);
        dequant_int8(q, s, N, BLOCK, y);
        for (int i = 0; i < N; i++) {
            sum_g[i] += g[i];
            sum_applied[i] += y[i];
            slack[i] += fabs((double)res[i]) * 0x1p-24;
        }
    }
    double worst = 0.0, plain = 0.0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(sum_applied[i] + res[i] - sum_g[i]) / slack[i]);
    CHECK(worst <= 1.0, "over %d steps sum(applied) + final residual = sum(gradients): worst error %.3f of the stated bound", K, worst);
    // without feedback the same gradients lose their small bias: the error is the rounding's, K times
    memset(sum_applied, 0, sizeof(sum_applied));
    memset(sum_g, 0, sizeof(sum_g));
    rng_init(&r, 9);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) g[i] = 1e-3f * rng_normal(&r) + (i % 7 == 0 ? 1e-6f : 0.0f);
        quant_int8(g, N, BLOCK, q, s);
        dequant_int8(q, s, N, BLOCK, y);
        for (int i = 0; i < N; i++) sum_g[i] += g[i], sum_applied[i] += y[i];
    }
    double with_ef = 0.0;
    for (int i = 0; i < N; i++) {
        plain += fabs(sum_applied[i] - sum_g[i]);
        with_ef += fabs((double)res[i]); // what error feedback still owes at the end
    }
    CHECK(with_ef < plain, "error feedback owes %.3g in all after %d steps, plain quantization has lost %.3g", with_ef, K, plain);
}

// the owner's sum: dequant_int8_add in replica order is ((q_0 s_0 + q_1 s_1) + ...) in that order, each
// product fused into the running sum, bitwise
static void replica_order_sum(void) {
    enum { D = 4 };
    static float x[D][N], y[N], ref[N];
    static int8_t q[D][N];
    float s[D][4];
    Rng r;
    rng_init(&r, 10);
    for (int d = 0; d < D; d++) {
        for (int i = 0; i < N; i++) x[d][i] = rng_normal(&r) * (float)(d + 1);
        quant_int8(x[d], N, BLOCK, q[d], s[d]);
    }
    memset(y, 0, sizeof(y));
    for (int d = 0; d < D; d++) dequant_int8_add(q[d], s[d], N, BLOCK, y);
    for (int i = 0; i < N; i++) ref[i] = 0.0f;
    for (int d = 0; d < D; d++) {
        for (int i = 0; i < N; i++) ref[i] = fmaf((float)q[d][i], s[d][i / BLOCK], ref[i]);
    }
    CHECK(memcmp(y, ref, sizeof(y)) == 0, "the dequantized sum of %d replicas is the sum in replica order, bitwise", D);
}

static void entropy(void) {
    uint64_t h[256] = {0};
    CHECK(quant_entropy_bits(h) == 0.0, "no values: 0 bits");
    int8_t q[256 * 4];
    for (int i = 0; i < 256 * 4; i++) q[i] = (int8_t)(i % 256 - 128);
    quant_histogram_add(q, 256 * 4, h);
    CHECK(fabs(quant_entropy_bits(h) - 8.0) < 1e-12, "every value equally often: 8 bits (%.12f)", quant_entropy_bits(h));
    memset(h, 0, sizeof(h));
    memset(q, 5, sizeof(q));
    quant_histogram_add(q, 256 * 4, h);
    CHECK(quant_entropy_bits(h) == 0.0 && h[133] == 1024, "one value: 0 bits, counted at value + 128");
    memset(h, 0, sizeof(h));
    for (int i = 0; i < 1024; i++) q[i] = i % 4 == 0 ? 1 : 0; // p = 1/4, 3/4
    quant_histogram_add(q, 1024, h);
    double want = -(0.25 * log2(0.25) + 0.75 * log2(0.75));
    CHECK(fabs(quant_entropy_bits(h) - want) < 1e-12, "two values at 1/4 and 3/4: %.6f bits (%.6f)", quant_entropy_bits(h), want);
}

// the scale is the block's largest finite |v| / 127 (v = x + r with error feedback), for values of
// every magnitude and sign, -0 and subnormals among them: the absmax the quantizer takes on the
// values' bits (an integer maximum) is the plain float one
static void scale_is_absmax(void) {
    enum { M = 4099 };
    static float x[M], r[M], r0[M];
    float s[M];
    int8_t q[M];
    Rng g;
    rng_init(&g, 11);
    int blocks[] = {1, 7, 256, M}, ok = 1, checked = 0;
    for (int trial = 0; trial < 8; trial++)
        for (int bi = 0; bi < 4; bi++) {
            for (int i = 0; i < M; i++) { // any finite float below 2^126, so that absmax / 127 * 127 stays finite
                uint32_t bits = (uint32_t)rng_u64(&g);
                bits = (bits & 0x80000000u) | (bits & 0x7fffffffu) % 0x7e800000u;
                memcpy(&x[i], &bits, 4);
                r[i] = r0[i] = trial % 2 ? x[(i * 13) % M] * 1e-3f : 0.0f;
            }
            if (trial % 2) quant_int8_ef(x, r, M, blocks[bi], q, s);
            else quant_int8(x, M, blocks[bi], q, s);
            for (int b0 = 0, k = 0; b0 < M; b0 += blocks[bi], k++) {
                float ref = 0.0f;
                for (int i = b0; i < M && i < b0 + blocks[bi]; i++) {
                    float v = x[i] + r0[i]; // (r0: the residuals before; r now holds the new ones)
                    ref = fabsf(v) > ref ? fabsf(v) : ref;
                }
                ok &= s[k] == ref / 127.0f;
                checked++;
            }
        }
    CHECK(ok, "every block's scale is its largest |v| / 127, for values of every magnitude, sign and subnormal (%d blocks)", checked);
}

int main(void) {
    round_trips();
    scale_is_absmax();
    non_finite();
    telescopes();
    replica_order_sum();
    entropy();
    return test_summary();
}
