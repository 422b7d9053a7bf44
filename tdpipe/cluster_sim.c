// Runs a cluster configuration through the simulator (tdpipe/simulator: the same lists and TD-Pipe
// policy the trainer runs) over the cost model's op times and messages, and reduces the result.
#include "tdpipe/cluster_sim.h"
#include "llmc/common.h"
#include "tdpipe/simulator.h"
#include <math.h>
#include <string.h>

// mean over stages of (end of the last U - end of the first U) / (n_steps - 1): the steady step
static double step_time(const SimResult* r, int n_steps) {
    double sum = 0.0;
    for (int s = 0; s < r->P; s++) {
        double first = -1.0, last = -1.0;
        for (int i = 0; i < r->n_ops[s]; i++)
            if (r->ops[s][i].kind == OP_U) {
                if (first < 0) first = r->end[s][i];
                last = r->end[s][i];
            }
        sum += (last - first) / (n_steps - 1);
    }
    return sum / r->P;
}

int cluster_simulate(const ClusterHw* hw, const ClusterModel* m, const ClusterLayout* lay, double beta, int seeds,
                     int n_steps, ClusterResult* r, ClusterCosts* costs, char* err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    if (n_steps < 3) return td_error(err, errlen, "the cluster simulation needs at least 3 steps (got %d)", n_steps);
    if (beta < 0) return td_error(err, errlen, "--jitter must be >= 0 (got %g)", beta);
    if (seeds < 1) return td_error(err, errlen, "--seeds must be at least 1 (got %d)", seeds);
    ClusterCosts c;
    if (cluster_costs(&c, hw, m, lay, err, errlen)) return -1;
    Schedule sch;
    ScheduleShape shape = {.kind = lay->kind, .P = lay->P, .M = lay->M, .W = lay->W, .n_steps = n_steps, .chunks = lay->chunks};
    if (schedule_build(&sch, &shape, err, errlen)) {
        cluster_costs_free(&c);
        return -1;
    }
    int runs = beta > 0 ? seeds : 1, rc = 0;
    double* b_send = NULL; // (Q) with early_dx: the input-gradient half's share of each backward
    if (lay->early_dx) {
        b_send = (double*)malloc_check((size_t)c.Q * sizeof(double));
        for (int q = 0; q < c.Q; q++) b_send[q] = c.t_b[q] > 0 ? c.t_bi[q] / c.t_b[q] : 1.0;
    }
    for (int seed = 1; seed <= runs && rc == 0; seed++) {
        SimCost sc = {.t_f = c.t_f, .t_b = c.t_b, .t_bi = c.t_bi, .t_bw = c.t_bw, .t_u = c.t_u, .jitter_cv = beta,
                      .seed = (uint64_t)seed, .t_msg_f = c.t_msg_f, .t_msg_b = c.t_msg_b, .t_dp = c.t_dp,
                      .dp_overlap = lay->dp_overlap, .b_send = b_send};
        // the pipeline-wide sum before each update (global norm, loss) crosses the network once
        sc.latency = lay->P > 1 ? hw->net.nic_lat : 0.0;
        SimResult res;
        if ((rc = simulator_run(&res, &sch, &sc, err, errlen))) break;
        r->step_s += step_time(&res, n_steps) / runs;
        r->bubble += (1.0 - res.steady_utilisation) / runs;
        int st = schedule_max_staleness(&(Schedule){.kind = sch.kind, .P = sch.P, .M = sch.M, .W = sch.W, .first_step = 0,
                                                    .n_steps = n_steps, .n_ops = res.n_ops, .ops = res.ops, .chunks = sch.chunks});
        if (st > r->staleness) r->staleness = st;
        simulator_free(&res);
    }
    schedule_free(&sch);
    free(b_send);
    if (rc == 0) {
        double B = (double)lay->D * lay->M * lay->b, peak = hw->gpu.peak_flops;
        r->samples_per_s = B / r->step_s;
        r->tokens_per_s = r->samples_per_s * m->T;
        r->tflops_per_gpu = cluster_step_flops(m, B, lay->recompute) / r->step_s / lay->gpus / 1e12;
        r->hfu = r->tflops_per_gpu * 1e12 / peak;
        r->mfu = 6.0 * cluster_params(m) * r->tokens_per_s / (lay->gpus * peak);
        int worst = 0;
        for (int s = 0; s < c.P; s++)
            if (c.mem[s] > c.mem[worst]) worst = s;
        r->mem_gib_per_gpu = c.mem[worst] / (1024.0 * 1024.0 * 1024.0);
        r->mem_async_gib = c.mem_async[worst] / (1024.0 * 1024.0 * 1024.0);
    }
    if (costs && rc == 0) *costs = c;
    else cluster_costs_free(&c);
    return rc;
}
