// The CPU backend (fp32, OpenMP: the reference every other device is checked against), and access
// to its tensors for tests, tools and the backends built on it (cpu-staged).
#pragma once
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

// the tensors of a stage made on STAGE_CPU (slot may be STAGE_SAMPLE_SLOT once reserved)
GPT2Acts* stage_cpu_acts(Stage* st, int slot);
GPT2GradActs* stage_cpu_gacts(Stage* st, int gacts);
float* stage_cpu_grads(Stage* st, int k);                 // (num_params) gradient slot k
ParameterTensors* stage_cpu_grad_views(Stage* st, int k); // views into it
float* stage_cpu_dwte_head(Stage* st, int k);             // (Vp*C) the LM head's share in slot k, NULL off the last stage
// the CPU backend's operations on another stage's behalf: cpu-staged runs its private CPU stage
// through these, so both run one code
const StageBackend* stage_cpu_backend(void);

#ifdef __cplusplus
}
#endif
