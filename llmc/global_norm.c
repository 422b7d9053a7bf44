// Deterministic sums of squares (see global_norm.h).
#include "global_norm.h"

#define SUMSQ_MAX_CHUNKS 4096

double sumsq(const float* x, size_t n) {
    if (n == 0) return 0.0;
    // the chunk size depends only on n, so the grouping (and the result) is the same for any thread count
    size_t chunk = (n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS;
    if (chunk < 4096) chunk = 4096;
    long nchunks = (long)((n + chunk - 1) / chunk);
    double partial[SUMSQ_MAX_CHUNKS];
#pragma omp parallel for if (nchunks > 1)
    for (long k = 0; k < nchunks; k++) {
        size_t i0 = (size_t)k * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        partial[k] = s;
    }
    double total = 0.0;
    for (long k = 0; k < nchunks; k++) total += partial[k];
    return total;
}
