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

typedef enum { STALE_NONE, STALE_PREDICT, STALE_DCASGD, STALE_LR } StaleMethod;

typedef struct {
    StaleMethod method;
    int tau;          // micro-batches with staleness delta = step - version > tau are compensated
    float dc_lambda;  // DC-ASGD's lambda
} StaleComp;

// "none", "predict", "dcasgd", "lr" -> method; 0, or -1 for an unknown name
int staleness_parse(const char* name, StaleMethod* method);
const char* staleness_name(StaleMethod method);

// the staleness of a forward or backward op: step - version (0 for an update)
static inline int staleness_of(const Op* op) { return op->kind == OP_U ? 0 : op->step - op->version; }
// 1 when op's micro-batch is compensated by method m: stale beyond tau
static inline int staleness_applies(const StaleComp* c, StaleMethod m, const Op* op) {
    return c->method == m && staleness_of(op) > c->tau;
}
// weight prediction: how many updates ahead of its version a micro-batch's forward (and backward)
// extrapolates its weights, 0 for the plain version. Version 0 has no optimizer state to extrapolate
// along, so its micro-batches run on it as they are.
static inline int staleness_ahead(const StaleComp* c, const Op* op) {
    return staleness_applies(c, STALE_PREDICT, op) && op->version > 0 ? staleness_of(op) : 0;
}
// LR by staleness: the learning-rate factor of update t on stage s, the mean over the step's
// micro-batches of 1 / (1 + delta) for those stale beyond tau, 1 for the rest. A factor on
// the gradients instead would cancel in AdamW's m / sqrt(v) whenever a whole step is equally stale.
double staleness_lr_factor(const StaleComp* c, const Schedule* sch, int s, int t);

#ifdef __cplusplus
}
#endif
