// The executor: runs one stage's part of a schedule (forwards, backwards whole or split, updates)
// on the stage's device, with the messages between neighbouring stages, the gradient cache and
// weight stashes that TD-Pipe's window needs, and measurements (trace, bubble, staleness).
#pragma once
#include <stdint.h>
#include "llmc/adamw.h"
#include "llmc/dataloader.h"
#include "tdpipe/comm.h"
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
    long forwards, backwards; // micro-batches forwarded / whose weight gradient is done (checked at the end)
} ExecutorStats;

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
    const CommLink* link;  // carries activations, gradients and the tied shares between stages' buffers
    StageDpAverage dp;     // the replicas' average of a gradient slot (used when D > 1)
    OptimConfig optim;
    const StaleComp* comp; // staleness compensation (tdpipe/staleness.h), the stage's too; NULL: none
    float jitter;          // --jitter on real compute: each op stretched by (1 + Y), Y ~ Gamma(mean 1, CV 2 jitter)
    uint64_t seed;         // the jitter's
    Trace* trace;          // NULL or the trace to record into
    void (*on_step)(void* ctx, const StepReport* r); // world rank 0 only, in step order
    void* ctx;
    ExecutorStats stats;   // measured over every run
    void* run;             // buffers kept from one run to the next (executor.c)
} Executor;

// Runs every op of this rank's stage in sch (its steps sch->first_step ..), then waits for all its
// messages: the pipeline is flushed when it returns (a consistency point).
void executor_run(Executor* ex, const Schedule* sch);
// frees the buffers the runs kept
void executor_free(Executor* ex);
// measured coefficient of variation of this stage's op times (0 when nothing measured)
double executor_stage_cv(const Executor* ex);

#ifdef __cplusplus
}
#endif
