// Staleness compensation for TD-Pipe's window: which weights a stale micro-batch runs on (weight
// prediction), how its gradient is corrected (DC-ASGD), how a step's learning rate is scaled (LR by
// staleness). Each is a pure function of the micro-batch (its step and weight version), so a
// compensated run is as deterministic as an uncompensated one, at every P and under any timing.
#pragma once
#include <stddef.h>
#include "tdpipe/schedule.h"
#ifdef __cplusplus
extern "C" {
#endif

// the methods are bits: a run may combine them ("predict+lr": prediction, and LR scaling for the
// staleness that prediction leaves)
typedef enum { STALE_NONE = 0, STALE_PREDICT = 1, STALE_DCASGD = 2, STALE_LR = 4 } StaleMethod;

typedef struct {
    unsigned methods; // StaleMethod bits, STALE_NONE for none
    int tau;          // micro-batches with staleness delta = step - version > tau are compensated
    float dc_lambda;  // DC-ASGD's lambda
    int curvature;    // 1: weight prediction is second order (--predict-order 2): it adds the change
                      // between the last two updates, delta (delta + 1) / 2 times (staleness_curvature)
} StaleComp;

// "none", or methods among predict, dcasgd, lr joined by '+' in any order -> bits; 0, or -1 for an
// unknown or repeated name
int staleness_parse(const char* name, unsigned* methods);
// the bits' name, in the order predict+dcasgd+lr
const char* staleness_name(unsigned methods);

// the staleness of a forward or backward op: step - version (0 for an update)
static inline int staleness_of(const Op* op) { return op->kind == OP_U ? 0 : op->step - op->version; }
// 1 when op's micro-batch is compensated by method m: stale beyond tau
static inline int staleness_applies(const StaleComp* c, StaleMethod m, const Op* op) {
    return (c->methods & m) && staleness_of(op) > c->tau;
}
// weight prediction: how many updates ahead of its version a micro-batch's forward (and backward)
// extrapolates its weights, 0 for the plain version. Version 0 has no optimizer state to extrapolate
// along, so its micro-batches run on it as they are.
static inline int staleness_ahead(const StaleComp* c, const Op* op) {
    return staleness_applies(c, STALE_PREDICT, op) && op->version > 0 ? staleness_of(op) : 0;
}
// 1 when comp (NULL: none) predicts weights in the second order: it keeps the trajectory
static inline int staleness_second_order(const StaleComp* c) { return c && c->curvature && (c->methods & STALE_PREDICT); }
// the weight stashes a stage holds for a schedule whose limits ask `stashes`: weight prediction holds
// each stale version's extrapolations instead of (and, while the versions of two steps overlap,
// beside) its plain copy, at most one per (version, ahead) in flight. None where the limits ask none:
// such a schedule runs every micro-batch on the current weights, so nothing is stale to predict for
static inline int staleness_stashes(const StaleComp* c, int stashes) {
    return c && (c->methods & STALE_PREDICT) ? (stashes + 1) * stashes : stashes;
}
// second-order prediction: the factor on the change between the last two updates, u_v - u_(v-1), for a
// prediction `ahead` updates ahead: if each update to come changes by that much again, the sum of the
// next `ahead` updates is ahead u_v + ahead (ahead + 1) / 2 (u_v - u_(v-1)); 0 for first order
static inline float staleness_curvature(const StaleComp* c, int ahead) { return staleness_second_order(c) ? 0.5f * ahead * (ahead + 1) : 0.0f; }
// LR by staleness: the learning-rate factor of update t on stage s, the mean over the step's
// micro-batches of 1 / (1 + delta) for those stale beyond tau, 1 for the rest; with prediction as
// well, 1 / delta for the predicted ones (1 at delta = 1, where prediction alone trains within half
// a percent: README): a linearised delayed-AdamW model (dev/stale_stability.py) gives prediction about
// one update of staleness' worth of stability, and the rate scaled so keeps the margin of delta - 1.
// A factor on the gradients instead would cancel in AdamW's m / sqrt(v) whenever a whole step is
// equally stale.
double staleness_lr_factor(const StaleComp* c, const Schedule* sch, int s, int t);

#ifdef __cplusplus
}
#endif
