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
