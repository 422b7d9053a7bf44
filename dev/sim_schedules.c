// Prints simulated makespan, utilisation and bubble of gpipe, 1f1b, zbh1, interleaved 1F1B (2
// chunks of half a stage each) and tdpipe (several AEW windows) over unit op costs (F = 1, B = 2,
// ZB's BI = BW = 1, U = 0) at jitter β = 0, 0.1, 0.3.
// Usage: sim_schedules [-P stages] [-M micro-batches] [-n steps] [-s seeds averaged when β > 0]
//                      [-W tdpipe windows, comma-separated (default 0,1,2,4,8,16,24,32)]
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "tdpipe/schedule.h"
#include "tdpipe/simulator.h"
#include <string.h>

typedef struct {
    SchedKind kind;
    int W, chunks;
} Row;

int main(int argc, char** argv) {
    int P = 8, M = 16, n_steps = 4, seeds = 20;
    enum { FIXED = 4 }; // the synchronous rows before the tdpipe windows
    Row rows[FIXED + 32] = {{SCHED_1F1B, 0, 1}, {SCHED_GPIPE, 0, 1}, {SCHED_ZBH1, 0, 1}, {SCHED_INTERLEAVED, 0, 2}};
    int windows[] = {0, 1, 2, 4, 8, 16, 24, 32}, n_rows = FIXED;
    for (size_t k = 0; k < sizeof(windows) / sizeof(windows[0]); k++) rows[n_rows++] = (Row){SCHED_TDPIPE, windows[k], 1};
    const DevCli cli = {"sim_schedules", "usage: build/dev/sim_schedules [-P stages (8)] [-M micro-batches (16)] [-n steps (4)] "
                                         "[-s seeds averaged when beta > 0 (20)] [-W tdpipe windows, comma-separated (0,1,2,4,8,16,24,32)]\n"};
    dev_cli_help(&cli, argc, argv);
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
#define VALUE dev_cli_value(&cli, argc, argv, i)
        if (!strcmp(flag, "-P")) P = (int)dev_cli_long(&cli, flag, VALUE, 1, 1024);
        else if (!strcmp(flag, "-M")) M = (int)dev_cli_long(&cli, flag, VALUE, 1, 1 << 16);
        else if (!strcmp(flag, "-n")) n_steps = (int)dev_cli_long(&cli, flag, VALUE, 1, 1 << 16);
        else if (!strcmp(flag, "-s")) seeds = (int)dev_cli_long(&cli, flag, VALUE, 1, 1 << 16);
        else if (!strcmp(flag, "-W")) { // the tdpipe rows: a comma-separated list
            const char* v = VALUE;
            n_rows = FIXED;
            for (const char* it = v;; it++) { // it: the start of the next number
                char* e;
                long w = strtol(it, &e, 10);
                if (e == it || w < 0 || w > 1 << 16 || (*e && *e != ',') || n_rows == FIXED + 32)
                    dev_cli_refuse(&cli, "-W %s: expected up to 32 windows >= 0 separated by commas", v);
                rows[n_rows++] = (Row){SCHED_TDPIPE, (int)w, 1};
                if (!*(it = e)) break;
            }
        } else dev_cli_refuse(&cli, "unknown flag %s", flag);
#undef VALUE
    }
    double* t_f = (double*)malloc_check(P * sizeof(double)); // (P)
    double* t_b = (double*)malloc_check(P * sizeof(double)); // (P)
    double* t_h = (double*)malloc_check(P * sizeof(double)); // (P) BI and BW: half of B each
    for (int s = 0; s < P; s++) t_f[s] = 1.0, t_b[s] = 2.0, t_h[s] = 1.0;
    double* c_f = (double*)malloc_check(2 * P * sizeof(double)); // (2P) interleaved: each chunk half a stage
    double* c_b = (double*)malloc_check(2 * P * sizeof(double)); // (2P)
    for (int q = 0; q < 2 * P; q++) c_f[q] = 0.5, c_b[q] = 1.0;
    double betas[] = {0.0, 0.1, 0.3};
    printf("P=%d M=%d steps=%d; F=1 B=2 (zbh1: BI=BW=1) U=0, latency 0; Gamma jitter, mean of %d seeds when beta > 0\n",
           P, M, n_steps, seeds);
    printf("1F1B textbook bubble (P-1)/(M+P-1) = %.4f for one step\n", (double)(P - 1) / (M + P - 1));
    for (int b = 0; b < 3; b++) {
        double beta = betas[b], base = 0.0;
        int n_seeds = beta > 0 ? seeds : 1;
        printf("\nbeta %.1f\n%-8s %4s %10s %8s %8s %8s %9s %6s %6s %6s\n", beta, "schedule", "W", "makespan", "util %", "bubble %", "steady %",
               "vs 1f1b", "stale", "acts0", "stash");
        for (int r = 0; r < n_rows; r++) {
            Schedule sch;
            char err[512];
            ScheduleShape shape = {.kind = rows[r].kind, .P = P, .M = M, .W = rows[r].W, .n_steps = n_steps, .chunks = rows[r].chunks};
            if (schedule_build(&sch, &shape, err, sizeof(err))) {
                printf("%-8s %4d  %s\n", schedule_kind_name(rows[r].kind), rows[r].W, err);
                continue;
            }
            double makespan = 0.0, util = 0.0, steady = 0.0;
            for (int seed = 1; seed <= n_seeds; seed++) {
                SimCost cost = {.t_f = t_f, .t_b = t_b, .t_bi = t_h, .t_bw = t_h, .jitter_cv = beta, .seed = (uint64_t)seed};
                if (rows[r].chunks > 1) cost.t_f = c_f, cost.t_b = c_b, cost.t_bi = cost.t_bw = NULL;
                SimResult res;
                if (simulator_run(&res, &sch, &cost, err, sizeof(err))) td_fatal("%s", err);
                makespan += res.makespan / n_seeds;
                util += res.utilisation / n_seeds;
                steady += res.steady_utilisation / n_seeds;
                simulator_free(&res);
            }
            if (rows[r].kind == SCHED_1F1B) base = makespan;
            int acts0, stash = 1;
            schedule_stage_stats(&sch, 0, &acts0, NULL);
            for (int s = 0; s < P; s++) {
                int v;
                schedule_stage_stats(&sch, s, NULL, &v);
                if (v > stash) stash = v;
            }
            char vs[16] = "-";
            if (base > 0) snprintf(vs, sizeof(vs), "%.3fx", base / makespan);
            printf("%-8s %4d %10.2f %8.2f %8.2f %8.2f %9s %6d %6d %6d\n", schedule_kind_name(rows[r].kind), rows[r].W, makespan,
                   100.0 * util, 100.0 * (1.0 - util), 100.0 * steady, vs, schedule_max_staleness(&sch), acts0, stash);
            schedule_free(&sch);
        }
    }
    printf("\nutil: sum of busy / (P * makespan); steady: the trainer's measure, per step over steps 2..n-1; vs 1f1b: 1f1b's makespan / this one (same op times per op);\n"
           "stale: max staleness; acts0: stage 0 activation slots; stash: max weight versions held on a stage\n");
    free(t_f);
    free(t_b);
    free(t_h);
    free(c_f);
    free(c_b);
    return 0;
}
