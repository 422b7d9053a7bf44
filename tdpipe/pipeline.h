// Services over the whole pipeline at a consistency point (all stages flushed): validation loss,
// sampling, streaming the full model to rank 0 for checkpoints and export, and the checks that
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
// What takes the whole model's array on world rank 0, in its layout's order: put(ctx, data, n) is
// given the next n floats. data is valid during the call only.
typedef struct {
    void (*put)(void* ctx, const float* data, size_t n);
    void* ctx;
} PipelineSink;
// Streams replica `replica`'s whole array (laid out for [0, L): every stage's `mine`, num_params on
// the host: its params, adam_m or adam_v) into sink on world rank 0, and with head not NULL (on every
// rank alike) the last stage's (Vp, C) beside mine after it. A collective of the replica's ranks and
// rank 0; the other replicas' ranks return at once. Nothing is staged on the senders, and rank 0
// holds one message of at most a few MiB (its own stage's tensors go to the sink where they lie):
// no rank needs memory for the whole model, whatever its size. The tied wte, which the first and the
// last stage both hold, is taken from `tied_from`: PIPELINE_TIED_LAST where the two copies are
// equal (weights, moments), PIPELINE_TIED_FIRST where only the first stage's is the embedding's own
// (the int8 sync's residuals: the last stage's wte part is never synced, its head share comes after).
enum { PIPELINE_TIED_LAST, PIPELINE_TIED_FIRST };
void pipeline_stream(Pipeline* pl, int replica, const float* mine, const float* head, int tied_from, PipelineSink sink);
// 1 when the first and last stage's wte are bitwise equal and every replica holds the same weights
// (a collective; the verdict and a message on every rank)
int pipeline_check_consistency(Pipeline* pl, char* msg, size_t msglen);

#ifdef __cplusplus
}
#endif
