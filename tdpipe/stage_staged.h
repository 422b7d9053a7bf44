// The "staged" backend (--device cpu-staged): the CPU model behind the device-backend interface,
// so the host staging that GPU stages rely on is tested bitwise without a GPU.
#pragma once
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

// a stage whose model lives in a private CPU stage, reached only through StageBackend;
// full: the whole model's parameters
void stage_init_staged(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, const float* full);
void stage_free_staged(Stage* s);
// the executor's dp_average_device for this backend (ctx: the Comm): the data-parallel average of
// the private stage's active gradient slot, in place where it lives, as NCCL does on a GPU
void stage_staged_dp_average(void* comm, Stage* s);

#ifdef __cplusplus
}
#endif
