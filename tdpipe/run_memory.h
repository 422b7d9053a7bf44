// A run's memory against what it runs on: what each stage holds at most under the run's schedule,
// the plans of a host's ranks summed against what the host (or its container) has left, and a rank's
// device plan, once for each rank sharing the device, against the device's total. The caller words
// the refusal; every rank takes part.
#pragma once
#include <stdio.h>
#include "tdpipe/comm.h"
#include "tdpipe/outdir.h"
#include "tdpipe/schedule.h"
#include "tdpipe/stage.h"
#include "tdpipe/staleness.h"
#ifdef __cplusplus
extern "C" {
#endif

// what a stage holds at most, the buffers its memory plan counts (schedule_stage_limits)
typedef struct {
    int slots;      // activation slots
    int stashes;    // weight stashes, compensation's included
    int grad_slots; // gradient-cache slots
} StageHolds;

// stage s of a run of this shape (kind, P, M, the widest window W, stage_W or NULL: W on every stage;
// n_steps: the run's longest chunk): a window's stashes and ring grow with a chunk's length up to the
// schedule's steady steps, so it is planned at the longer of 2 and the shorter of the two. 1 with err
// when the shape does not build
int run_memory_stage_holds(const ScheduleShape* shape, const StaleComp* comp, int s, StageHolds* h, char* err, size_t errlen);
// every stage's, as a table (--print-schedule)
int run_memory_print_holds(FILE* f, const ScheduleShape* shape, const StaleComp* comp, char* err, size_t errlen);

// rank 0: the bytes every rank on its host plans (`mine` on each: the host's memory is shared; a
// multi-host run counts rank 0's share of its host), 1 when they exceed what the host has left
// (*host, *ranks and *m then say how much, over how many ranks); every rank takes part
int run_memory_host_over(Comm* c, double mine, double* host, int* ranks, OutdirMemory* m);

// this rank's device: what is in use now (this rank's weights and AdamW, and whatever the ranks
// sharing the device hold already) plus `plan` bytes for each rank that shares it, against the
// device's total (never against what is free this instant, which other ranks still allocating would
// make look smaller than it will be). 1 when over (*used, *total, *sharing say how); 0 when it fits,
// or the stage's device has no memory of its own
int run_memory_device_over(Stage* st, int local_ranks, double plan, double* used, double* total, int* sharing);

#ifdef __cplusplus
}
#endif
