// Checks llmc/tanhf_vec.c against this machine's libm tanhf on every float bit pattern (or, with a
// stride, every stride-th one) and prints how many differ; exits non-zero if any does.
// usage: build/dev/check_tanhf [stride (default 1: all 2^32)]
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/tanhf_vec.h"

#define BLOCK 4096

int main(int argc, char** argv) {
    long stride = argc > 1 ? atol(argv[1]) : 1;
    if (stride < 1) stride = 1;
    long nblocks = ((1L << 32) / stride + BLOCK - 1) / BLOCK, bad = 0;
    uint32_t first_bad = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : bad)
    for (long b = 0; b < nblocks; b++) {
        float x[BLOCK], got[BLOCK];
        int n = 0;
        for (long i = b * BLOCK; i < (b + 1) * BLOCK && i * stride < (1L << 32); i++) {
            uint32_t u = (uint32_t)(i * stride);
            memcpy(&x[n++], &u, 4);
        }
        tanhf_vec(got, x, n);
        for (int i = 0; i < n; i++) {
            float want = tanhf(x[i]);
            if (memcmp(&want, &got[i], 4)) {
#pragma omp critical
                if (!bad) memcpy(&first_bad, &x[i], 4);
                bad++;
            }
        }
    }
    printf("check_tanhf: %ld of %ld float patterns (stride %ld) differ from libm's tanhf", bad, (long)(((1L << 32) + stride - 1) / stride),
           stride);
    if (bad) printf(" (e.g. 0x%08x)", first_bad);
    printf("\n");
    return bad != 0;
}
