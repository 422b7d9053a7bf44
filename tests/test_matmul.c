// The CPU matmul against a plain double-precision reference on shapes that take every path of
// the blocked SGEMM (tiles split by rows or by columns, short and long depths, partial panels,
// the widest tiles, a depth of hundreds of k-blocks), forward and both backward halves, with 1 and 2 threads, bitwise equal
// across thread counts, and the written backward halves bitwise the ones added into zeros. The packing buffers are checked for overruns by glibc (MALLOC_CHECK_).
// The profiling split (packing against micro-kernel) counts each pass's FLOPs exactly and changes no bit.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/matmul.h"
#include "llmc/profile.h"
#include "llmc/rng.h"
#include "tests/test.h"

static float* randn(size_t n, uint64_t seed) {
    float* x = (float*)malloc(n * sizeof(float));
    Rng r;
    rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = rng_normal(&r);
    return x;
}

// |got - ref| <= 1e-5 * sqrt(K) * (|a| . |b|) elementwise: float32 rounding of a K-term dot
// product grows at most ~ sqrt(K) eps times the sum of absolute products (eps = 6e-8; 1e-5 leaves room)
static int close_enough(const float* got, const double* ref, const double* mag, size_t n, int K, double* worst) {
    int ok = 1;
    *worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]), bound = 1e-5 * sqrt((double)K) * mag[i] + 1e-30;
        if (err / bound > *worst) *worst = err / bound;
        if (!(err <= bound)) ok = 0;
    }
    return ok;
}

static void check_shape(int N, int C, int OC) {
    float* inp = randn((size_t)N * C, 1);
    float* w = randn((size_t)OC * C, 2);
    float* bias = randn(OC, 3);
    float* dout = randn((size_t)N * OC, 4);
    size_t most = (size_t)N * OC; // the largest of the three outputs (N, OC), (N, C), (OC, C)
    if ((size_t)N * C > most) most = (size_t)N * C;
    if ((size_t)OC * C > most) most = (size_t)OC * C;
    double* ref = (double*)malloc(sizeof(double) * most);
    double* mag = (double*)malloc(sizeof(double) * most);
    float* got[2];
    double worst;
    for (int pass = 0; pass < 3; pass++) {
        // pass 0: out (N, OC) = inp w^T + b; 1: dinp (N, C) = dout w; 2: dw (OC, C) = dout^T inp
        int rows = pass == 0 ? N : pass == 1 ? N : OC, cols = pass == 0 ? OC : C, K = pass == 0 ? C : pass == 1 ? OC : N;
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                double s = pass == 0 ? bias[j] : 0.0, m = pass == 0 ? fabs(bias[j]) : 0.0;
                for (int k = 0; k < K; k++) {
                    double p = pass == 0 ? (double)inp[(size_t)i * C + k] * w[(size_t)j * C + k]
                             : pass == 1 ? (double)dout[(size_t)i * OC + k] * w[(size_t)k * C + j]
                                         : (double)dout[(size_t)k * OC + i] * inp[(size_t)k * C + j];
                    s += p;
                    m += fabs(p);
                }
                ref[(size_t)i * cols + j] = s;
                mag[(size_t)i * cols + j] = m;
            }
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t + 1);
            got[t] = (float*)calloc((size_t)rows * cols, sizeof(float)); // backward halves accumulate into zeros
            if (pass == 0) matmul_forward(got[t], inp, w, bias, N, C, OC);
            else if (pass == 1) matmul_backward_input(got[t], dout, w, N, C, OC, 1);
            else matmul_backward_weight(got[t], NULL, dout, inp, N, C, OC, 1);
        }
        const char* names[3] = {"forward", "backward input", "backward weight"};
        int ok = close_enough(got[0], ref, mag, (size_t)rows * cols, K, &worst);
        CHECK(ok, "%-15s N %5d C %4d OC %5d: within the bound (worst %.2f of it)", names[pass], N, C, OC, worst);
        CHECK(memcmp(got[0], got[1], sizeof(float) * rows * cols) == 0, "%-15s N %5d C %4d OC %5d: 1 and 2 threads bitwise equal", names[pass], N, C, OC);
        if (pass > 0) { // written (accumulate 0) over garbage: bitwise the sum into zeros, dbias too
            float* set = (float*)malloc(sizeof(float) * rows * cols);
            float *db_add = (float*)calloc(OC, sizeof(float)), *db_set = (float*)malloc(sizeof(float) * OC);
            for (size_t i = 0; i < (size_t)rows * cols; i++) set[i] = NAN;
            for (int i = 0; i < OC; i++) db_set[i] = NAN;
            if (pass == 1) matmul_backward_input(set, dout, w, N, C, OC, 0);
            else {
                float* dw_add = (float*)calloc((size_t)rows * cols, sizeof(float));
                matmul_backward_weight(dw_add, db_add, dout, inp, N, C, OC, 1);
                matmul_backward_weight(set, db_set, dout, inp, N, C, OC, 0);
                CHECK(memcmp(db_set, db_add, sizeof(float) * OC) == 0, "%-15s N %5d C %4d OC %5d: dbias written = added into zeros, bitwise", names[pass], N, C, OC);
                free(dw_add);
            }
            CHECK(memcmp(set, got[0], sizeof(float) * rows * cols) == 0, "%-15s N %5d C %4d OC %5d: written = added into zeros, bitwise", names[pass], N, C, OC);
            free(set); free(db_add); free(db_set);
        }
        free(got[0]);
        free(got[1]);
    }
    free(inp); free(w); free(bias); free(dout); free(ref); free(mag);
}

// the profiling split (matmul.h: MatmulSplit) counts exactly each pass's FLOPs, on both paths of the
// shared operand (packed whole, packed per k-block), and leaves the results bitwise as they are without it
static void check_split(int N, int C, int OC) {
    float *inp = randn((size_t)N * C, 11), *w = randn((size_t)OC * C, 12), *dout = randn((size_t)N * OC, 13);
    float *out[2], *dinp[2], *dw[2];
    for (int on = 0; on < 2; on++) {
        out[on] = (float*)malloc(sizeof(float) * N * OC);
        dinp[on] = (float*)malloc(sizeof(float) * N * C);
        dw[on] = (float*)malloc(sizeof(float) * OC * C);
        matmul_profile_reset();
        profile_on = on;
        matmul_forward(out[on], inp, w, NULL, N, C, OC);
        matmul_backward_input(dinp[on], dout, w, N, C, OC, 0);
        matmul_backward_weight(dw[on], NULL, dout, inp, N, C, OC, 0);
        profile_on = 0;
    }
    double flops = 2.0 * N * C * OC;
    for (int pass = 0; pass < 3; pass++) {
        MatmulSplit m = matmul_profile_split(pass);
        CHECK(m.kernel_flops == flops && m.pack_s > 0 && m.kernel_s > 0, "split of pass %d, N %d C %d OC %d: %.0f FLOPs counted of %.0f, pack %.2g s, kernel %.2g s",
              pass, N, C, OC, m.kernel_flops, flops, m.pack_s, m.kernel_s);
    }
    CHECK(!memcmp(out[0], out[1], sizeof(float) * N * OC) && !memcmp(dinp[0], dinp[1], sizeof(float) * N * C) &&
              !memcmp(dw[0], dw[1], sizeof(float) * OC * C),
          "N %d C %d OC %d: the three passes bitwise equal with the split counted and without", N, C, OC);
    for (int on = 0; on < 2; on++) { free(out[on]); free(dinp[on]); free(dw[on]); }
    free(inp); free(w); free(dout);
}

int main(void) {
    check_shape(7, 5, 3);       // smaller than one micro-panel
    check_shape(64, 48, 96);    // whole panels, one depth block
    check_shape(37, 300, 70);   // partial panels, two depth blocks
    check_shape(64, 128, 80);   // a last panel of whole vectors (128 and 80 = 48 k + 32): a narrower micro-kernel's full tiles
    check_shape(1100, 40, 2100); // backward input: tiles split by rows, a long depth, the widest row tiles
    check_shape(40, 2100, 1100); // tiles split by columns, a long depth, the widest column tiles
    check_shape(130, 20, 2600); // backward weight: long depth 130 is short, rows 2600 split
    check_shape(37, 60, 120001); // backward input: hundreds of k-blocks, as the LM head's (partial panels, a partial last block)
    check_split(37, 300, 70);
    check_split(37, 60, 120001);
    omp_set_num_threads(2);
    return test_summary();
}
