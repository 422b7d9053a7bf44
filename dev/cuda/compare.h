// The dev/cuda benchmarks' check against the CPU reference: the largest difference relative to
// the largest reference value, and whether every GPU value is finite.
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdio.h>

// max|gpu - cpu| / max|cpu| (max|gpu - cpu| when cpu is all zero); *abs_out the max abs difference
static inline double compare_rel(const float* gpu, const float* cpu, size_t n, double* abs_out, int* finite_out) {
    double max_abs = 0.0, max_ref = 0.0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) finite = 0;
        double d = fabs((double)gpu[i] - cpu[i]);
        if (d > max_abs) max_abs = d;
        if (fabs((double)cpu[i]) > max_ref) max_ref = fabs((double)cpu[i]);
    }
    *abs_out = max_abs;
    *finite_out = finite;
    return max_ref > 0 ? max_abs / max_ref : max_abs;
}

// prints one "check NAME vs CPU ... OK / NOT OK" line; clears *all_ok on a failure
static inline void compare_report(const char* name, const char* what, const float* gpu, const float* cpu, size_t n, double tol,
                                  int* all_ok) {
    double max_abs;
    int finite;
    double rel = compare_rel(gpu, cpu, n, &max_abs, &finite);
    int ok = finite && rel <= tol;
    if (!ok) *all_ok = 0;
    printf("  check %-16s vs CPU%s: max abs diff %.3e, rel %.3e, tol %.0e: %s\n", name, what, max_abs, rel, tol, ok ? "OK" : "NOT OK");
}
