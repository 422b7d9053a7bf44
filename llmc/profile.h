// Run-time profiling hook for the CPU kernels: with profile_on set (dev/bench_cpu's breakdown), each
// hooked kernel adds its time, FLOPs and bytes moved to a bucket named by op family and shape; off,
// a hook costs one predictable branch. Hooks run on the calling thread, outside parallel regions.
#pragma once
#include "common.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* family; // "matmul", "attention", "layernorm", ... (a string literal)
    const char* pass;   // "fwd", "bwd_in", "bwd_w", ...
    int shape[3];       // the kernel's sizes (matmul: the layer's N, C, OC), 0 where unused
    double seconds;     // summed over calls
    double flops;       // summed over calls
    double bytes;       // summed over calls: the least traffic the op needs (each operand read or written once)
    long calls;
} ProfileEntry;

extern int profile_on;

static inline double profile_begin(void) { return profile_on ? now_seconds() : 0.0; }
void profile_add(double t0, const char* family, const char* pass, int a, int b, int c, double flops, double bytes);
#define PROFILE_END(t0, family, pass, a, b, c, flops, bytes) \
    do { if (profile_on) profile_add((t0), (family), (pass), (a), (b), (c), (flops), (bytes)); } while (0)

// the buckets collected since the last profile_reset, in first-seen order
int profile_entries(const ProfileEntry** out);
void profile_reset(void);

#ifdef __cplusplus
}
#endif
