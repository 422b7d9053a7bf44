// The "staged" backend (--device cpu-staged, STAGE_CPU_STAGED in stage.h): the CPU behind the device
// interface, so the host staging and device messages that GPU stages rely on are tested bitwise
// without a GPU.
#pragma once
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

// a StageDpAverage for this backend (ctx: the Comm): the data-parallel average of gradient slot k in
// the private stage's memory, where it lives, as NCCL does on a GPU
void stage_staged_dp_average(void* comm, Stage* st, int k);

#ifdef __cplusplus
}
#endif
