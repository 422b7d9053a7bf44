// Services over the whole pipeline at a consistency point (all stages flushed): validation loss,
// sampling, gathering the full model to rank 0 for checkpoints and export, and the checks that
// the tied embedding's copies and the replicas' weights agree bitwise.
#pragma once
#include "llmc/dataloader.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    Comm* comm;
    Stage* stage;
    int P;
    const GPT2Range* ranges; // (P) every stage's layer range (to assemble the full model on rank 0)
    const CommLink* link;    // the executor's link: validation's messages travel as training's do
} Pipeline;

// mean loss over `batches` micro-batches of `val` (read on the first and last stage), forward only
// through every stage; the result on world rank 0 (other ranks: 0)
// stop (may be NULL): checked by every rank together before each batch; once it is set anywhere the
// validation ends there (it returns NAN: not a figure)
float pipeline_eval(Pipeline* pl, DataLoader* val, int batches, const volatile int* stop);
// generates up to n tokens from `first` through the stages (replica 0 only), one row in each stage's
// sample slot (STAGE_SAMPLE_SLOT, on whatever device); the tokens land in out (n) on world rank 0.
// temperature 0 = greedy.
void pipeline_sample(Pipeline* pl, int first, int n, float temperature, uint64_t seed, int* out);
// the whole model's buffer (laid out for [0, L)) assembled on world rank 0 from every stage's `mine`
// (num_params: its params, adam_m or adam_v, on the host) of replica 0; full is only written on rank 0.
// Each stage sends its tensors straight from `mine` into their places in `full`, nothing staged, any
// size; the ranks of other replicas take no part (they return at once)
void pipeline_gather(Pipeline* pl, const float* mine, float* full);
// the whole model's array on world rank 0 (NULL on the other ranks), for reading: where one stage
// holds the whole model (P = 1) its own `mine`, laid out alike, nothing copied; else pipeline_gather's
// into *buf, allocated (the whole model's floats) on rank 0 at the first call; the caller frees *buf
const float* pipeline_whole(Pipeline* pl, const float* mine, float** buf);
// the same from replica `replica`'s stages; with head (the last stage's (Vp, C) beside mine) not NULL
// (on every rank alike), that too, into full_head (world rank 0)
void pipeline_gather_replica(Pipeline* pl, int replica, const float* mine, const float* head, float* full, float* full_head);
// 1 when the first and last stage's wte are bitwise equal and every replica holds the same weights
// (a collective; the verdict and a message on every rank)
int pipeline_check_consistency(Pipeline* pl, char* msg, size_t msglen);

#ifdef __cplusplus
}
#endif
