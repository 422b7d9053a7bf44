// What --partition auto measures at start: one transformer layer's, the embeddings' and the LM
// head's forward + backward time on this rank's device (a few timed passes of one micro-batch).
#pragma once
#include "llmc/gpt2.h"
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

#ifdef __cplusplus
}
#endif
