// The drift monitor: how far the gradient a step actually applied (stale, compensated, averaged) is
// from the exact synchronous fp32 gradient of the same micro-batches at the weights the update
// applies to, per unit (embeddings, each layer, the head): cosine similarity and relative L2 error.
#pragma once
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

// per unit: applied . exact, |applied|^2, |exact|^2, |applied - exact|^2 (each unit has one stage's
// contribution, so the pipeline's sum of these is exact)
typedef struct {
    double dot, aa, bb, dd;
} DriftUnit;

// this stage's units of applied and exact (num_params each, the stage's flat layout) into out (L + 2);
// units it does not hold stay 0
void drift_compare(const Stage* st, const float* applied, const float* exact, DriftUnit* out);
// a (n) against e (n) added into u
void drift_compare_add(const float* a, const float* e, size_t n, DriftUnit* u);
// the cosine and the relative L2 error |a - e| / |e| of a unit (1 and 0 for two zero gradients)
double drift_cosine(const DriftUnit* u);
double drift_rel_err(const DriftUnit* u);
// the unit of units (n) with the lowest cosine (the first of equals)
int drift_worst(const DriftUnit* units, int n);

#ifdef __cplusplus
}
#endif
