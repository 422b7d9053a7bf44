// Deterministic sums of squares (see global_norm.h).
#include "global_norm.h"
#include "simd.h"

#define SUMSQ_MAX_CHUNKS 4096
#define SUMSQ_LANES 8 // chunks summed side by side, one per double lane

// sumsq of x = a (b NULL), or of x = a + b stored to dst as it is read
static double sumsq_pass(float* dst, const float* a, const float* b, size_t n) {
    if (n == 0) return 0.0;
    // the chunk size depends only on n, so the grouping (and the result) is the same for any thread count
    size_t chunk = (n + SUMSQ_MAX_CHUNKS - 1) / SUMSQ_MAX_CHUNKS;
    if (chunk < 4096) chunk = 4096;
    long nchunks = (long)((n + chunk - 1) / chunk);
    long nfull = (long)(n / chunk); // chunks of exactly `chunk` floats
    long ngroups = nfull / SUMSQ_LANES;
    double partial[SUMSQ_MAX_CHUNKS]; // (nchunks) each chunk's sum, in index order within it
    // each chunk's sum is a serial chain of double adds: SUMSQ_LANES chunks at a time side by side
#pragma omp parallel for if (ngroups > 1)
    for (long g = 0; g < ngroups; g++) {
        size_t off = (size_t)g * SUMSQ_LANES * chunk;
        // (two calls, so that the plain sum inlines without the addition's branches)
        v8d acc = b ? simd_sum8_rows_of(dst + off, a + off, b + off, chunk, chunk, 1) : simd_sum8_rows(a + off, chunk, chunk, 1);
        for (int j = 0; j < SUMSQ_LANES; j++) partial[g * SUMSQ_LANES + j] = acc[j];
    }
#pragma omp parallel for if (nchunks - ngroups * SUMSQ_LANES > 1)
    for (long k = ngroups * SUMSQ_LANES; k < nchunks; k++) { // the chunks left over, one at a time
        size_t i0 = (size_t)k * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) {
            float x = a[i];
            if (b) dst[i] = x = x + b[i];
            s += (double)x * x;
        }
        partial[k] = s;
    }
    double total = 0.0;
    for (long k = 0; k < nchunks; k++) total += partial[k];
    return total;
}

double global_norm_sumsq(const float* x, size_t n) { return sumsq_pass(NULL, x, NULL, n); }
double global_norm_sumsq_of_sum(float* dst, const float* a, const float* b, size_t n) { return sumsq_pass(dst, a, b, n); }
