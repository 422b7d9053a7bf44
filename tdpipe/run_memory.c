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

int run_memory_stage_holds(const ScheduleShape* shape, int longest, const StaleComp* comp, int s, StageHolds* h, char* err, size_t errlen) {
    ScheduleShape planned = *shape;
    planned.first_step = 0;
    planned.n_steps = schedule_shape_steady_steps(&planned);
    if (longest < planned.n_steps) planned.n_steps = longest > 2 ? longest : 2;
    Schedule sch;
    if (schedule_build(&sch, &planned, err, errlen)) return 1;
    schedule_stage_limits(&sch, s, &h->slots, &h->stashes, &h->grad_slots);
    schedule_free(&sch);
    h->stashes = staleness_stashes(comp, h->stashes);
    return 0;
}

int run_memory_print_holds(FILE* f, const ScheduleShape* shape, int longest, const StaleComp* comp, char* err, size_t errlen) {
    fprintf(f, "what each stage holds at most (the run's memory plan; its end table shows what it took):\n");
    fprintf(f, "stage  act. slots  stashes  grad ring\n");
    for (int s = 0; s < shape->P; s++) {
        StageHolds h;
        if (run_memory_stage_holds(shape, longest, comp, s, &h, err, errlen)) return 1;
        fprintf(f, "%-5d  %10d  %7d  %9d\n", s, h.slots, h.stashes, h.grad_slots);
    }
    return 0;
}
