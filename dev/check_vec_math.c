// Checks the vectorised math (llmc/tanhf_vec.c, llmc/expf_vec.c) against this machine's libm on
// every float bit pattern (or, with a stride, every stride-th one); prints how many results differ
// and exits non-zero if any does.
// usage: build/dev/check_vec_math [stride (default 1: all 2^32)]
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/expf_vec.h"
#include "llmc/tanhf_vec.h"

#define BLOCK 4096

// patterns 0, stride, 2 stride, ... through vec and through ref; returns how many differ, *first: one of them
static long check(const char* name, void (*vec)(float*, const float*, long), float (*ref)(float), long stride) {
    long nblocks = ((1L << 32) / stride + BLOCK) / BLOCK, bad = 0;
    uint32_t first = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : bad)
    for (long b = 0; b < nblocks; b++) {
        float x[BLOCK], got[BLOCK];
        int n = 0;
        for (long i = b * BLOCK; i < (b + 1) * BLOCK && i * stride < (1L << 32); i++) {
            uint32_t u = (uint32_t)(i * stride);
            memcpy(&x[n++], &u, 4);
        }
        vec(got, x, n);
        for (int i = 0; i < n; i++) {
            float want = ref(x[i]);
            if (memcmp(&want, &got[i], 4)) {
                bad++;
#pragma omp critical
                memcpy(&first, &x[i], 4);
            }
        }
    }
    printf("check_vec_math: %s: %ld of %ld float patterns (stride %ld) differ from libm", name, bad, ((1L << 32) + stride - 1) / stride, stride);
    if (bad) printf(" (e.g. input 0x%08x)", first);
    printf("\n");
    return bad;
}

int main(int argc, char** argv) {
    long stride = argc > 1 ? atol(argv[1]) : 1;
    if (stride < 1) stride = 1;
    long bad = check("tanhf", tanhf_vec, tanhf, stride) + check("expf", expf_vec, expf, stride);
    return bad != 0;
}
