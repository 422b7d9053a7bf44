// What --partition auto measures at start: one transformer layer's, the embeddings' and the LM
// head's forward + backward time on this rank's device (a few timed passes of one micro-batch).
#pragma once
#include "llmc/gpt2.h"
#include "tdpipe/comm.h"
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double layer; // seconds: forward + backward of one layer of the model's shape, B x T tokens
    double embed; // the embeddings' share (encoder forward and backward)
    double head;  // the final LayerNorm, LM head and loss
} LayerCosts;

// the median of `reps` passes after one warm-up, each of a one-layer stage with the embeddings, with
// the head, and with neither (the shares are the differences, at least 0), made on device (comm: the
// rank's Comm, which a GPU stage reads its local rank from) and destroyed again
void layer_costs_measure(const StageDevice* device, void* comm, const GPT2Config* cfg, int B, int T, int reps, LayerCosts* out);
// every stage's costs (per_stage: P, the mean over its replicas), the same on every rank (collective):
// each rank measures (3 passes), the ranks of a host taking turns so that none times its passes while
// another shares its cores or GPU (on an H100 shared by two ranks, timed together, one rank's layer
// read 3.1 ms and the other's 0.39: the first's passes overlapped the second's start-up)
void layer_costs_per_stage(const StageDevice* device, Comm* comm, const GPT2Config* cfg, int B, int T, LayerCosts* per_stage);

#ifdef __cplusplus
}
#endif
