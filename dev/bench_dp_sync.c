// The replicas' gradient average alone, on a random gradient of GPT-2 124M's shape and a small one:
// bytes each rank sends plus receives and the time of one average (until the slowest rank is done,
// median of the repetitions), blocking fp32 (comm_dp_average) beside tdpipe/dp_sync's fp32 and int8 buckets.
// usage: mpirun -np D build/dev/bench_dp_sync [reps (default 5)] [--small-only]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/stage.h"

// one mode: 0 blocking fp32, 1 fp32 buckets, 2 int8 buckets; returns the median seconds until every rank is done
static double time_mode(Comm* c, Stage* st, int mode, size_t bucket, int reps, float* g, float* h, const float* g0, double* bytes) {
    size_t n = st->num_params, vc = st->sizes[0];
    DpSync ds;
    DpSyncConfig cfg = {mode == 2 ? GRAD_QUANT_INT8 : GRAD_QUANT_NONE, 256, 1, bucket};
    if (mode) dp_sync_init(&ds, &cfg, c, st);
    double* t = (double*)malloc_check(reps * sizeof(double));
    for (int r = 0; r < reps + 1; r++) { // the first is a warm-up (page faults, MPI's first contact)
        memcpy(g, g0, n * sizeof(float));
        memcpy(h, g0, vc * sizeof(float));
        comm_barrier(c);
        double t0 = now_seconds();
        if (mode == 0) {
            comm_dp_average(c, g, n);
            comm_dp_average(c, h, vc);
            *bytes = comm_dp_average_bytes(c, n) + comm_dp_average_bytes(c, vc);
        } else {
            dp_sync_begin_buffers(&ds, g, h, 1);
            *bytes = dp_sync_finish(&ds).bytes;
        }
        comm_barrier(c); // done when the slowest rank is
        if (r) t[r - 1] = now_seconds() - t0;
    }
    double med = td_median(t, reps);
    free(t);
    if (mode) dp_sync_free(&ds);
    return med;
}

int main(int argc, char** argv) {
    const DevCli cli = {"bench_dp_sync", "usage: mpirun -np D build/dev/bench_dp_sync [reps (default 5)] [--small-only]\n"};
    dev_cli_help(&cli, argc, argv); // before MPI starts: every rank would print it
    int reps = 5, small_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small-only")) small_only = 1;
        else if (i == 1) reps = (int)dev_cli_long(&cli, "reps", argv[i], 1, 100000);
        else dev_cli_refuse(&cli, "unexpected argument '%s'", argv[i]);
    }
    Comm c;
    comm_init(&c, &argc, &argv);
    char err[256];
    if (comm_grid(&c, 1, PLACE_STAGES_FIRST, err, sizeof(err))) td_fatal("%s", err);
    struct utsname u;
    uname(&u);
    const GPT2Config shapes[2] = {{1024, 256, 256, 4, 4, 256}, {1024, 50257, 50304, 12, 12, 768}}; // maxT, V, Vp, L, NH, C
    const char* names[2] = {"small (d4, C 256, V 256)", "GPT-2 124M (d12, C 768, V 50257)"};
    if (c.world_rank == 0) {
        printf("# bench_dp_sync: the replicas' gradient average alone, D = %d ranks on %s (%s), median of %d after one warm-up\n", c.D, u.nodename,
               u.machine, reps);
        printf("# command: mpirun -np %d build/dev/bench_dp_sync %d%s\n", c.D, reps, small_only ? " --small-only" : "");
        printf("# %-34s %-14s %14s %9s %10s %8s\n", "shape", "mode", "bytes/rank", "vs fp32", "time_ms", "GB/s");
    }
    const char* modes[3] = {"fp32-blocking", "fp32-buckets", "int8-buckets"};
    for (int s = 0; s < (small_only ? 1 : 2); s++) {
        Stage st;
        StageInit init = {.cfg = &shapes[s], .range = {0, shapes[s].num_layers, 1, 1}, .B = 1, .T = 64};
        stage_init_common(&st, &init, NULL, NULL); // shapes only: no weights, no backend
        size_t n = st.num_params, vc = st.sizes[0];
        float* g0 = (float*)malloc_check(n * sizeof(float));
        float* g = (float*)malloc_check(n * sizeof(float));
        float* h = (float*)malloc_check(vc * sizeof(float));
        Rng r;
        rng_init(&r, 1000 + (uint64_t)c.replica);
        for (size_t i = 0; i < n; i++) g0[i] = 1e-3f * rng_normal(&r); // a gradient's size; each replica its own
        double fp32_bytes = 0.0;
        for (int m = 0; m < 3; m++) {
            double bytes = 0.0, sec = time_mode(&c, &st, m, (size_t)4 << 20, reps, g, h, g0, &bytes);
            if (m == 0) fp32_bytes = bytes;
            if (c.world_rank == 0)
                printf("  %-34s %-14s %14.0f %8.2fx %10.2f %8.2f\n", names[s], modes[m], bytes, fp32_bytes / bytes, 1e3 * sec, bytes / sec / 1e9);
        }
        free(g0);
        free(g);
        free(h);
    }
    if (c.world_rank == 0) printf("# bytes/rank: sent plus received by one rank; vs fp32: the blocking fp32 bytes over this mode's; buckets of 4 MiB\n");
    comm_finalize(&c);
    return 0;
}
