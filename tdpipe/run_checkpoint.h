// A training run's checkpoints and its model.bin: what a checkpoint holds (the config a resume must
// match, the step, the RNG seed, the data loader's position, TD-Pipe's state (RunState), the whole
// model's parameters and AdamW moments, and the int8 sync's error-feedback residuals, laid out
// independently of P and D), written by world rank 0 as the stages stream it, read back by every rank.
#pragma once
#include "llmc/dataloader.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/executor.h"
#include "tdpipe/pipeline.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char* dir;   // -o
    int keep;          // --keep: checkpoints kept in dir
    unsigned long long seed; // every random stream (data order, sampling) derives from it and the step
    int B, T;
    int mb_per_step;   // micro-batches per step over all replicas (M x D)
} RunCheckpoint;

// TD-Pipe's state that a resume continues from (the "tdpipe" section; a checkpoint without it resumes
// with the flags' window, no rollbacks and an empty guard window)
typedef struct {
    int64_t aew_requested;    // --aew as given: W >= 0, -1 auto, -2 a window per stage
    int64_t aew_base;         // the window before halvings: W, or auto's measured W (-1 until measured)
    int64_t aew_halvings;     // rollbacks and the drift monitor halve every stage's window: W >> halvings
    int64_t rollbacks_in_row; // at W = 0, without an applied step between
    LossWindow losses;        // the guard's window of applied steps' losses
    GnsState gns;             // the gradient noise scale's running estimate
    int64_t val_owed;         // 1: a signal cut this step's validation short, so the resumed run runs it first (the
                              // "val_owed" section, written only then: a checkpoint without it owes nothing)
} RunState;

// Collective. World rank 0 writes dir/ckpt_<step>.tdck (temporary file, fsync, rename) and prunes to
// `keep`; train: the data loader whose position is saved (the first stage's). Returns 0 on every
// rank, or -1 on every rank after rank 0 said why (any earlier checkpoint is untouched).
// ef: the int8 sync whose error-feedback residuals go in too ("grad_ef" and one section per replica and
// kind; NULL or a sync without them: none).
int run_checkpoint_save(const RunCheckpoint* rc, Pipeline* pl, int step, const DataLoader* train, const RunState* state, const DpSync* ef);
// Collective. World rank 0 writes the model's parameters (the stages' params, on the host) to path in
// llm.c's fp32 format (model_file.h), streamed from the stages as they arrive. 0 on every rank, or -1
// on every rank with err said on rank 0 (a non-finite parameter or a failed write: no file is left).
int run_checkpoint_save_model(Pipeline* pl, const char* path, char* err, size_t errlen);
// Every rank reads the newest valid checkpoint of dir and takes its stage's slice (weights, moments,
// version); train (or NULL): the data loader that continues from the saved position; state: TD-Pipe's
// (kept as it is when the checkpoint has none, or when its window was asked for as another --aew).
// Returns the step (path: the checkpoint's file, for the caller to say so once it accepts the step), or
// -1 with a message naming the file and the problem (a config this run does not match).
// ef (or NULL): the int8 sync whose residuals continue from the checkpoint's when it holds them for the
// same D and block size; otherwise they start at zero and a note on stderr says why.
int run_checkpoint_resume(const RunCheckpoint* rc, Stage* s, DataLoader* train, RunState* state, DpSync* ef, char* path, size_t path_cap,
                          char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
