// The executor: runs one stage's list of a Schedule (forward, backward, split backward, update)
// with real compute or timed waits, exchanging activations and gradients with the neighbouring
// stages, keeping the gradient cache and weight stashes that TD-Pipe's asynchrony needs, and
// measuring every operation (trace, bubble, staleness).
#pragma once
#include <stdint.h>
#include "llmc/adamw.h"
#include "llmc/dataloader.h"
#include "tdpipe/comm.h"
#include "tdpipe/schedule.h"
#include "tdpipe/stage.h"
#include "tdpipe/trace.h"
#ifdef __cplusplus
extern "C" {
#endif

// what world rank 0 learns about one finished step (after every stage has reported it)
typedef struct {
    int step;             // global, 1-based
    float loss;           // mean over the step's micro-batches and replicas
    float norm;           // global gradient norm before clipping
    float lr;
    double seconds;       // wall time of the step on stage 0 (update to update)
    int P;
    double bubble[64];    // (P) per stage: 1 - busy / (time between its updates)
    int staleness[64];    // (P) per stage: max staleness of the step's micro-batches
    double bubble_all;    // 1 - total busy / total time over the stages
    int staleness_max;
} StepReport;

typedef struct {
    Comm* comm;
    Stage* stage;          // NULL with synthetic compute
    DataLoader* data;      // the training data on the first and last stage, else NULL
    int B, T, C;           // micro-batch shape (activations exchanged are (B, T, C) floats)
    int L;                 // layers of the whole model (units of the global norm: L + 2)
    AdamWConfig opt;
    int total_steps, warmup;
    float final_lr_frac, clip;
    float jitter;          // --jitter beta: op times get coefficient of variation beta (0 = off)
    uint64_t seed;
    double syn_f, syn_b;   // synthetic compute: seconds per forward / backward of this stage; 0 = real
    Trace* trace;          // NULL or the trace to record into
    // activations and gradients between stages stay in the backend's memory, moved by this link
    // (NCCL between GPUs; the stage must stage_use_device_msgs); NULL: host copies over MPI
    const CommLink* link;
    // the data-parallel average of a device backend's active gradient slot (and the LM head's share
    // of wte), done where the gradient lives (NCCL between GPUs), bitwise comm_dp_average's result;
    // NULL: the gradient goes through host memory and comm_dp_average (MPI)
    void (*dp_average_device)(void* ctx, Stage* st);
    void* dp_ctx;
    void (*on_step)(void* ctx, const StepReport* r); // world rank 0 only, in step order
    void* ctx;
    // measured over the run, for the partition table and --aew auto
    double busy_f, busy_b;   // seconds of compute in forwards / backwards (B, or BI + BW)
    double busy_f2, busy_b2; // sums of squared op times (for their coefficient of variation)
    long n_f, n_b;           // forward / backward ops run (BI and BW count as one backward)
    long count_f, count_b;   // micro-batches forwarded / whose weight gradient is done (checked at the end)
    void* run;               // buffers kept from one run to the next (executor.c)
} Executor;

// Runs every op of this rank's stage in sch (steps step0+1 .. step0+sch->n_steps), then waits for
// all its messages: the pipeline is flushed when it returns (a consistency point).
void executor_run(Executor* ex, const Schedule* sch, int step0);

// frees the buffers the runs kept
void executor_free(Executor* ex);

// measured coefficient of variation of this stage's op times (0 when nothing measured)
double executor_stage_cv(const Executor* ex);

#ifdef __cplusplus
}
#endif
