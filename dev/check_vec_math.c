// Checks the vectorised math (llmc/vec_math.c) on every float bit pattern (or, with a stride, every
// stride-th one): expf_vec and tanhf_vec, each its largest error in ulps from exp or tanh in double
// against its bound, with libm's expf and tanhf measured the same way beside them. Exits non-zero if
// either is over its bound.
// usage: build/dev/check_vec_math [stride (default 1: all 2^32)]
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "llmc/vec_math.h"

#define BLOCK 4096

typedef struct {
    long n, differ;          // patterns checked; results not bitwise libm's
    double worst, worst_lib; // ulps from the exact value (double), the most over all patterns: ours, libm's
    uint32_t at, at_lib;     // the inputs of those
} Check;

// patterns 0, stride, 2 stride, ... through vec and through libm, each result's ulps from exact
static Check check(void (*vec)(float*, const float*, long), float (*libm)(float), double (*exact)(double), long stride) {
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
            vec(got, x, n);
            for (int i = 0; i < n; i++) {
                double want = exact((double)x[i]);
                float lib = libm(x[i]);
                double e = td_ulp_error(got[i], want), el = td_ulp_error(lib, want);
                if (e > mine.worst) mine.worst = e, memcpy(&mine.at, &x[i], 4);
                if (el > mine.worst_lib) mine.worst_lib = el, memcpy(&mine.at_lib, &x[i], 4);
                mine.differ += memcmp(&lib, &got[i], 4) != 0;
            }
            mine.n += n;
        }
#pragma omp critical
        {
            all.n += mine.n, all.differ += mine.differ;
            if (mine.worst > all.worst) all.worst = mine.worst, all.at = mine.at;
            if (mine.worst_lib > all.worst_lib) all.worst_lib = mine.worst_lib, all.at_lib = mine.at_lib;
        }
    }
    return all;
}

// one function's line: its worst against its bound, libm's worst, how many results differ from libm's;
// returns whether it is within the bound
static int report(const char* name, void (*vec)(float*, const float*, long), float (*libm)(float), double (*exact)(double), double bound, long stride) {
    Check c = check(vec, libm, exact, stride);
    printf("check_vec_math: %s: at most %.3f ulp from the exact value over %ld float patterns (stride %ld; worst at input 0x%08x), bound %.1f; "
           "libm's: %.3f (at 0x%08x); %ld results differ from libm's\n", name, c.worst, c.n, stride, c.at, bound, c.worst_lib, c.at_lib, c.differ);
    return c.worst <= bound;
}

int main(int argc, char** argv) {
    const DevCli cli = {"check_vec_math", "usage: build/dev/check_vec_math [stride (default 1: all 2^32 float patterns; n: every n-th)]\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 2) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[2]);
    long stride = argc > 1 ? dev_cli_long(&cli, "stride", argv[1], 1, 1L << 32) : 1;
    int ok = report("expf_vec", expf_vec, expf, exp, EXPF_VEC_MAX_ULP, stride);
    ok &= report("tanhf_vec", tanhf_vec, tanhf, tanh, TANHF_VEC_MAX_ULP, stride);
    return !ok;
}
