// A run's memory against its host's and its device's (see run_memory.h).
#include "tdpipe/run_memory.h"
#include <stdlib.h>
#include "llmc/common.h"

int run_memory_host_over(Comm* c, double mine, double* host, int* ranks, OutdirMemory* m) {
    double* all = g_rank == 0 ? (double*)malloc_check(c->world_size * sizeof(double)) : NULL;
    comm_gather_to_root(c, &mine, sizeof(mine), all);
    int over = 0;
    if (g_rank == 0) {
        *host = 0.0;
        for (int r = 0; r < c->world_size; r++) *host += all[r];
        if (c->local_ranks < c->world_size) *host = mine * c->local_ranks;
        *ranks = c->local_ranks < c->world_size ? c->local_ranks : c->world_size;
        char err[256];
        over = outdir_memory_available(m, err, sizeof(err)) == 0 && *host > (double)m->bytes;
    }
    free(all);
    return over;
}

int run_memory_device_over(Stage* st, int local_ranks, double plan, double* used, double* total, int* sharing) {
    if (!(plan > 0) || !st->be->device_memory) return 0;
    int devices;
    st->be->device_memory(st, total, used, &devices);
    *sharing = devices > 0 ? (local_ranks + devices - 1) / devices : 1;
    return *used + plan * *sharing > *total;
}

// the schedule a plan reads: shape for the longer of 2 and the shorter of its n_steps (the run's longest
// chunk) and its steady steps, after which a window's stashes and ring grow no more
static int planned_schedule(const ScheduleShape* shape, Schedule* sch, char* err, size_t errlen) {
    ScheduleShape planned = *shape;
    int steady = schedule_shape_steady_steps(shape);
    planned.first_step = 0;
    planned.n_steps = shape->n_steps < steady ? (shape->n_steps > 2 ? shape->n_steps : 2) : steady;
    return schedule_build(sch, &planned, err, errlen);
}

static StageHolds holds_of(const Schedule* sch, int s, const StaleComp* comp) {
    StageHolds h;
    schedule_stage_limits(sch, s, &h.slots, &h.stashes, &h.grad_slots);
    h.stashes = staleness_stashes(comp, h.stashes);
    return h;
}

int run_memory_stage_holds(const ScheduleShape* shape, const StaleComp* comp, int s, StageHolds* h, char* err, size_t errlen) {
    Schedule sch;
    if (planned_schedule(shape, &sch, err, errlen)) return 1;
    *h = holds_of(&sch, s, comp);
    schedule_free(&sch);
    return 0;
}

int run_memory_print_holds(FILE* f, const ScheduleShape* shape, const StaleComp* comp, char* err, size_t errlen) {
    Schedule sch;
    if (planned_schedule(shape, &sch, err, errlen)) return 1;
    fprintf(f, "what each stage holds at most (the run's memory plan; its end table shows what it took):\n");
    fprintf(f, "stage  act. slots  stashes  grad ring\n");
    for (int st = 0; st < shape->P; st++) {
        StageHolds h = holds_of(&sch, st, comp);
        fprintf(f, "%-5d  %10d  %7d  %9d\n", st, h.slots, h.stashes, h.grad_slots);
    }
    schedule_free(&sch);
    return 0;
}
