// Checks the vectorised math on every float bit pattern (or, with a stride, every stride-th one):
// expf_vec bitwise against this machine's libm expf; tanhf_vec within TANHF_VEC_MAX_ULP of tanh in
// double, with libm's tanhf measured the same way beside it. Exits non-zero if either fails.
// usage: build/dev/check_vec_math [stride (default 1: all 2^32)]
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/expf_vec.h"
#include "llmc/tanhf_vec.h"

#define BLOCK 4096

typedef struct {
    long n, differ;      // patterns checked, results not bitwise the scalar function's
    uint32_t differ_at;  // one input whose result differs
    double worst;        // ulps from the exact value (double), the most over all patterns
    uint32_t worst_at;   // the input of the worst
} Check;

static float tanhf_libm(float x) { return tanhf(x); }
static double tanh_exact(float x) { return tanh((double)x); }

// patterns 0, stride, 2 stride, ... through vec and (per element) scalar; with exact, each result's
// ulps from it, else whether it is bitwise scalar's
static Check check(void (*vec)(float*, const float*, long), float (*scalar)(float), double (*exact)(float), long stride) {
    long nblocks = ((1L << 32) / stride + BLOCK) / BLOCK;
    Check all = {0};
#pragma omp parallel
    {
        Check mine = {0};
        float x[BLOCK], got[BLOCK];
#pragma omp for schedule(dynamic, 64)
        for (long b = 0; b < nblocks; b++) {
            int n = 0;
            for (long i = b * BLOCK; i < (b + 1) * BLOCK && i * stride < (1L << 32); i++) {
                uint32_t u = (uint32_t)(i * stride);
                memcpy(&x[n++], &u, 4);
            }
            if (vec) vec(got, x, n);
            else
                for (int i = 0; i < n; i++) got[i] = scalar(x[i]);
            for (int i = 0; i < n; i++) {
                if (exact) {
                    double e = td_ulp_error(got[i], exact(x[i]));
                    if (e > mine.worst) mine.worst = e, memcpy(&mine.worst_at, &x[i], 4);
                } else {
                    float want = scalar(x[i]);
                    if (memcmp(&want, &got[i], 4)) mine.differ++, memcpy(&mine.differ_at, &x[i], 4);
                }
            }
            mine.n += n;
        }
#pragma omp critical
        {
            all.n += mine.n;
            if (mine.differ) all.differ += mine.differ, all.differ_at = mine.differ_at;
            if (mine.worst > all.worst) all.worst = mine.worst, all.worst_at = mine.worst_at;
        }
    }
    return all;
}

int main(int argc, char** argv) {
    long stride = argc > 1 ? atol(argv[1]) : 1;
    if (stride < 1) stride = 1;
    Check ex = check(expf_vec, expf, NULL, stride);
    printf("check_vec_math: expf_vec: %ld of %ld float patterns (stride %ld) differ from libm's expf", ex.differ, ex.n, stride);
    if (ex.differ) printf(" (e.g. input 0x%08x)", ex.differ_at);
    printf("\n");
    Check th = check(tanhf_vec, NULL, tanh_exact, stride), lib = check(NULL, tanhf_libm, tanh_exact, stride);
    printf("check_vec_math: tanhf_vec: at most %.3f ulp from tanh over %ld float patterns (stride %ld; worst at input 0x%08x); bound %.1f; libm's tanhf: %.3f "
           "(at 0x%08x)\n", th.worst, th.n, stride, th.worst_at, TANHF_VEC_MAX_ULP, lib.worst, lib.worst_at);
    return ex.differ != 0 || !(th.worst <= TANHF_VEC_MAX_ULP);
}
