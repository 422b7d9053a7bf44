// What a training run tells its user (world rank 0): a line and a log.jsonl record per step and per
// validation, and at the end a table of every stage's measured op times and pipeline memory.
#pragma once
#include <stdio.h>
#include "tdpipe/drift.h"
#include "tdpipe/executor.h"
#include "tdpipe/partition.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    FILE* log;              // log.jsonl, or NULL
    const char* log_path;   // its path, for the message when a record cannot be written
    int log_errno;          // the first failed write's error (0: none): said once, and the run exits 1 at its end
    int total_steps;
    double tokens_per_step; // B * T * M * D (past 2^31 with a large M)
    int P;
    int windowed;           // 1: tdpipe with a window (staleness is shown at P = 1 too)
    double flops_per_step;  // model FLOPs of one step (6 N per token + attention), for MFU
    double peak_flops;      // the devices' bf16 peak FLOP/s; 0 on the CPU (no MFU)
    double seconds_sum;     // over reported steps after the first
    int seconds_n;
} Reporter;

// the executor's on_step (ctx: a Reporter): the step line on stdout, its record in log.jsonl
void report_step(void* reporter, const StepReport* r);
// a validation: the line and the record; floor: the data's entropy floor, or < 0 when unknown
void report_val(Reporter* rep, int step, float val, double floor);
// the drift monitor at step: the line (the lowest cosine and its unit) and a record of every unit's
// cosine and relative error; units (n = L + 2) as stage_grad_unit_sumsq's. int8_sync: the int8 sync
// against the fp32 average of the same local gradients (keys drift_int8_*), else the applied gradient
// against the exact synchronous one (keys drift_*)
void report_drift(Reporter* rep, int step, const DriftUnit* units, int n, int worst, int int8_sync);
// --aew auto's choice after its measured first step: the per-stage times, beta, the simulated
// utilisation of every window up to W_max, the one chosen and the article's ceil(P (1 - beta))
typedef struct {
    int P, M, ranks;
    const double* times;  // (4, P) forward s, backward s, beta, share of B after which the input gradient left
    double beta;          // the stages' mean coefficient of variation
    const double* util;   // (W_max + 1) simulated utilisation of W = 0..W_max
    int W, W_max;         // chosen; the staleness the compensation handles
    const char* comp;     // the compensation's name
    int article;          // ceil(P (1 - beta))
    double u_article;     // its simulated utilisation
} AewChoice;
void report_aew_auto(const AewChoice* c);
// the guard refused step's update (1-based) and the run goes on from `back` (0-based: step - 1 when
// only the refused step is undone, the chunk's start when the steps before it go too): the line, and
// a record {"step", "rollback": reason, "back_to", "aew_from", "aew_to", "rollbacks_in_row_at_w0"}
void report_rollback(Reporter* rep, int step, int back, const char* reason, int W_from, int W_to, int in_row);
// a rollback to step `back` undid the steps after it: their records go from log.jsonl (it holds the
// steps the run applied; written aside and renamed, as a resume cuts it), which is reopened to go on.
// 0, or -1 + err
int report_log_cut(Reporter* rep, int back, char* err, size_t errlen);

// closes log.jsonl (when open): 1 when any record of the run could not be written (said already), else 0
int report_close_log(Reporter* rep);

// one stage's figures for the end table: measured mean op times, and what its pipeline state took
typedef struct {
    double f_ms, b_ms;     // mean forward / backward op (a zero-bubble half counts as one)
    StageMemory mem;       // activation slots, stashes, gradient ring, in the device's precision (allocated: a page never
                           // written is not resident, as a slot the schedule's bound allows but the run never filled)
    double peak_rss;       // the rank's peak resident host memory, bytes (the whole process: weights, AdamW, buffers, MPI)
} StageSummary;

StageSummary report_stage_summary(const Executor* ex);
// the end table (world rank 0): one row per stage from every stage's summary (P of them)
void report_end_table(const Reporter* rep, const Partition* part, const StageSummary* per_stage);

#ifdef __cplusplus
}
#endif
