// The executor: runs one stage's part of a schedule (forwards, backwards whole or split, updates)
// on the stage's device, with the messages between neighbouring stages, the gradient cache and
// weight stashes that TD-Pipe's window needs, and measurements (trace, bubble, staleness).
#pragma once
#include <stdint.h>
#include "llmc/adamw.h"
#include "llmc/dataloader.h"
#include "tdpipe/comm.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/drift.h"
#include "tdpipe/gns.h"
#include "tdpipe/schedule.h"
#include "tdpipe/stage.h"
#include "tdpipe/staleness.h"
#include "tdpipe/trace.h"
#ifdef __cplusplus
extern "C" {
#endif

// Terms (with those of stage.h: slot, gacts, version, stash, k, share):
//   g        a micro-batch's index in the schedule, g = (t - first_step) * M + m
//   post(t)  what a stage does after its last backward of step t: the replicas' average of the
//            gradient slot, the tied embedding's shares, the start of the pipeline-wide norm sum
//   chunk    the steps one schedule covers, between two consistency points (an empty pipeline at
//            both ends: the trainer flushes there for validation, samples and checkpoints)

// seconds of one kind of op: sum, sum of squares and count (for the mean and the coefficient of variation)
typedef struct {
    double sum, sum2;
    long n;
} OpTimes;

typedef struct {
    OpTimes f, b;             // forward ops; backward ops (B, BI and BW each count)
    OpTimes b_send;           // full backwards (B) that sent an input gradient: the share of the op's
                              // time before it left (the input-gradient half's, and the send's)
    long forwards, backwards; // micro-batches forwarded / whose weight gradient is done (checked at the end)
} ExecutorStats;

// The guard: a step whose loss or gradient norm is not finite, or whose loss is a spike (a z-score
// above spike_z against the last GUARD_WINDOW applied steps' losses), is not applied. Every rank sees
// the same loss and norm (the pipeline's sum, the replicas' average), so every rank refuses the same
// step; the rest of the chunk then computes nothing (its messages still flow, so the pipeline drains
// in step) and the trainer rolls back (executor.h: halted_step).
#define GUARD_WINDOW 100
#define GUARD_MIN 20 // losses needed before a z-score means anything
typedef struct {
    double loss[GUARD_WINDOW]; // the last applied steps' losses, a ring
    int n, next;
} LossWindow;

// what world rank 0 learns about one finished step, once every stage has reported it
typedef struct {
    int step;              // 1-based
    float loss;            // mean over the step's micro-batches and replicas
    float norm;            // global gradient norm before clipping
    float lr;
    double seconds;        // wall time of the step on stage 0 (update to update)
    int P;
    const double* bubble;  // (P) per stage: 1 - busy / (time between its updates)
    const int* staleness;  // (P) per stage: max staleness of the step's micro-batches
    double bubble_all;     // 1 - total busy / total time over the stages
    int staleness_max;
    int refused;           // 1: the guard refused this step's update (reason in the executor's halt_reason)
    double b_simple;       // the gradient noise scale after this step (--gns; NaN when not estimated)
    int skipped;           // 1: after a refused step, in the same chunk: nothing computed
    int D;                 // replicas per stage: the figures below mean something when D > 1
    const double* dp_bytes;// (P) per stage (its replica 0): bytes its replicas' gradient average sent and received
    const double* dp_wait; // (P) seconds the stage waited for that average after its last backward (exposed)
    const double* dp_span; // (P) seconds from its first bucket posted to its last one done
    double dp_entropy;     // stage 0's int8 values' entropy in bits per value (NaN: not measured this step)
} StepReport;

// AdamW and the schedule of its learning rate
typedef struct {
    AdamWConfig adamw; // peak lr, betas, eps, weight decay
    int total_steps, warmup;
    float final_lr_frac;
    float clip;        // global-norm clipping threshold, 0 = off
} OptimConfig;

typedef struct {
    Comm* comm;
    Stage* stage;          // this rank's stage, on whatever device
    DataLoader* data;      // the training data of the first and last stage; NULL where none is read
    const CommLink* link;  // carries activations and gradients between stages' buffers
    const CommLink* tied_link; // carries the tied embedding's shares (NULL: link); MPI where they pass through host memory (stage.h)
    StageDpAverage dp;     // the replicas' blocking fp32 average of a gradient slot (D > 1, no sync; the drift monitor's exact pass)
    DpSync* sync;          // NULL, or the bucketed two-shot average (fp32 or int8) that overlaps backward
    DpSyncDevice device_sync; // .end NULL, or (sync NULL) the same sync where the gradient lives, overlapped with backward there
    OptimConfig optim;
    const StaleComp* comp; // staleness compensation (tdpipe/staleness.h), the stage's too; NULL: none
    float spike_z;         // the guard's spike threshold (0 = NaN and Inf only)
    int inject_nan;        // for tests: a NaN in stage 0's gradient (so in the norm every rank sums) of this 1-based
                           // step, at its first attempt (0 = none)
    LossWindow losses;     // the guard's window, carried from run to run (and in checkpoints)
    int gns, lr_gns;       // estimate the gradient noise scale every step; scale the learning rate by it
    GnsState gns_state;    // carried from run to run (and in checkpoints)
    float jitter;          // --jitter on real compute: each op stretched by (1 + Y), Y ~ Gamma(mean 1, CV 2 jitter)
    uint64_t seed;         // the jitter's
    Trace* trace;          // NULL or the trace to record into
    void (*on_step)(void* ctx, const StepReport* r); // world rank 0 only, in step order
    void* ctx;
    // the drift monitor (tdpipe/drift.h): at U(drift_step) the applied gradient is copied to
    // drift_applied (num_params, allocated by the executor) and the weights it applies to are kept as a
    // stash of their version; gradient_only runs a schedule whose update keeps the step's gradient in
    // its slot (the exact pass) instead of applying it
    int drift_step;        // -1: none
    float* drift_applied;  // (num_params)
    // with an int8 sync, at post(drift_step): the int8-synced gradient against the fp32 average of the
    // same local gradients (drift_fp32: num_params + the LM head's share), per unit (L + 2; the head's
    // share in unit 0, whose gradient it becomes); drift_synced says it was measured
    float* drift_fp32;     // (num_params + Vp*C on the last stage)
    DriftUnit* drift_sync; // (L + 2)
    int drift_synced;
    int gradient_only;
    ExecutorStats stats;   // measured over every run
    // after a run: the step whose update the guard refused, or -1, and why
    int halted_step;
    char halt_reason[96];
    void* run;             // buffers kept from one run to the next (executor.c)
} Executor;

// Runs every op of this rank's stage in sch (its steps sch->first_step ..), then waits for all its
// messages: the pipeline is flushed when it returns (a consistency point).
void executor_run(Executor* ex, const Schedule* sch);
// frees the buffers the runs kept
void executor_free(Executor* ex);
// where the data loader stood before the first micro-batch of step (of the last run), on a stage
// that reads data: to skip that step's batches, or to read them again
void executor_data_before(const Executor* ex, int step, DataLoaderState* state);
// The drift monitor's exact pass at step t, the last of the run just done (tdpipe/drift.h): the step's
// M micro-batches again, through every stage, synchronously (1F1B, or GPipe where M < P; no
// compensation), at the weights U(t) applied to (the stash kept for it), into the step's gradient
// slot, which the update left there; then per unit the comparison with the gradient U(t) applied,
// summed over the pipeline into all (2, L + 2), the same on every rank: applied against exact, then,
// where an int8 sync measured it, int8 against fp32. The data loaders go back to where they were and
// the slot and stash are released. Returns how many halves of all were filled (1 or 2).
int executor_drift_measure(Executor* ex, int t, int M, DriftUnit* all);
// every stage's measured op times, the same on every rank, into all (4, P): mean forward and backward
// seconds, the coefficient of variation of its op times (0 when nothing measured), and the share of
// its backward after which the input gradient left (1 on stage 0, which sends none); each the
// replicas' mean, in replica order
void executor_stage_times(Executor* ex, double* all);

#ifdef __cplusplus
}
#endif
