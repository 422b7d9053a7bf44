// Schedule simulator: op durations from a per-(virtual-)stage cost model with optional Gamma jitter;
// the synchronous lists replayed in order (schedule_replay_comm), tdpipe's event-driven policy run
// live (schedule_run_tdpipe_comm), as the executor runs each, with optional message and DP times.
#include "tdpipe/simulator.h"
#include "llmc/common.h"
#include "llmc/rng.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>

// uniform in (0, 1]: never 0, so its log and powers are finite and positive
static double uniform_open0(Rng* r) { return ((double)(rng_u64(r) >> 11) + 1.0) / 9007199254740992.0; }

// Gamma(shape k, scale 1) by Marsaglia and Tsang (2000); k < 1 through Gamma(k + 1) * U^(1/k)
static double gamma_draw(double k, Rng* r) {
    if (k < 1.0) return gamma_draw(k + 1.0, r) * pow(uniform_open0(r), 1.0 / k);
    double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double z = rng_normal(r), v = 1.0 + c * z;
        if (v <= 0.0) continue;
        v = v * v * v;
        if (log(uniform_open0(r)) < 0.5 * z * z + d - d * v + d * log(v)) return d * v;
    }
}

double simulator_jitter(uint64_t seed, int s, const Op* op, double cv) {
    if (cv <= 0.0) return 1.0;
    uint64_t key[5] = {(uint64_t)s, (uint64_t)op->kind, (uint64_t)(int64_t)op->step, (uint64_t)(int64_t)op->mb,
                       (uint64_t)op->chunk};
    uint64_t x = seed;
    for (int i = 0; i < (op->chunk ? 5 : 4); i++) { // chunk 0 keeps the draws of the schedules without chunks
        x ^= key[i];
        x = rng_splitmix64(&x);
    }
    Rng r;
    rng_init(&r, x);
    double k = 1.0 / (cv * cv); // Gamma(k, 1/k): mean 1, CV 1/sqrt(k) = cv
    return gamma_draw(k, &r) / k;
}

// the cost model's time for op kind k on virtual stage q of stage s, or -1 when the model lacks it
static double base_time(const SimCost* c, int s, int q, OpKind k) {
    switch (k) {
    case OP_F: return c->t_f ? c->t_f[q] : -1.0;
    case OP_B: return c->t_b ? c->t_b[q] : (c->t_bi && c->t_bw ? c->t_bi[q] + c->t_bw[q] : -1.0);
    case OP_BI: return c->t_bi ? c->t_bi[q] : (c->t_b ? 0.5 * c->t_b[q] : -1.0);
    case OP_BW: return c->t_bw ? c->t_bw[q] : (c->t_b ? 0.5 * c->t_b[q] : -1.0);
    case OP_U: return c->t_u ? c->t_u[s] : 0.0;
    }
    return -1.0;
}

void simulator_free(SimResult* res) {
    if (res->start)
        for (int s = 0; s < res->P; s++) free(res->start[s]);
    if (res->end)
        for (int s = 0; s < res->P; s++) free(res->end[s]);
    if (res->ops)
        for (int s = 0; s < res->P; s++) free(res->ops[s]);
    free(res->ops);
    free(res->start);
    free(res->end);
    free(res->busy);
    free(res->bubble);
    free(res->n_ops);
    memset(res, 0, sizeof(*res));
}

typedef struct {
    const SimCost* cost;
    int P;
} OpTimeCtx;

// one op's time: the cost model's, times its jitter draw
static double op_time(void* ctx, int s, const Op* op) {
    const OpTimeCtx* x = (const OpTimeCtx*)ctx;
    const SimCost* c = x->cost;
    return base_time(c, s, op->chunk * x->P + s, op->kind) * simulator_jitter(c->seed, s, op, c->jitter_cv);
}

// what the trainer reports per step, averaged over steps 2..n-1 (1-based): per step, the stages'
// busy time since their previous update over the time since it, summed over the stages
static double steady_utilisation(const SimResult* res, int n_steps) {
    if (n_steps < 3) return res->utilisation;
    double sum = 0.0;
    for (int k = 1; k <= n_steps - 2; k++) {
        double busy = 0.0, span = 0.0;
        for (int s = 0; s < res->P; s++) {
            double b = 0.0, prev = -1.0, at = -1.0;
            int u = 0;
            for (int i = 0; i < res->n_ops[s] && at < 0; i++) {
                if (res->ops[s][i].kind == OP_U) {
                    if (u == k - 1) prev = res->end[s][i], b = 0.0;
                    if (u == k) at = res->end[s][i];
                    u++;
                } else {
                    b += res->end[s][i] - res->start[s][i];
                }
            }
            busy += b;
            span += at - prev;
        }
        sum += span > 0 ? busy / span : 0.0;
    }
    return sum / (n_steps - 2);
}

int simulator_run(SimResult* res, const Schedule* sch, const SimCost* cost, char* err, size_t errlen) {
    static const char* const kinds[] = {"F", "B", "BI", "BW", "U"};
    int P = sch->P, Q = P * schedule_chunks(sch);
    memset(res, 0, sizeof(*res));
    if (cost->jitter_cv < 0) return td_error(err, errlen, "jitter coefficient of variation must be >= 0 (got %g)", cost->jitter_cv);
    for (int q = 0; q < Q; q++)
        for (int k = OP_F; k <= OP_U; k++) {
            int used = sch->kind == SCHED_ZBH1 ? k != OP_B : k != OP_BI && k != OP_BW;
            if (used && base_time(cost, q % P, q, (OpKind)k) < 0) {
                if (Q > P) return td_error(err, errlen, "the cost model has no %s time for virtual stage %d", kinds[k], q);
                return td_error(err, errlen, "the cost model has no %s time for stage %d", kinds[k], q);
            }
        }
    res->P = P;
    res->busy = (double*)calloc_check(P, sizeof(double));
    res->bubble = (double*)calloc_check(P, sizeof(double));
    res->n_ops = (int*)calloc_check(P, sizeof(int));
    res->start = (double**)calloc_check(P, sizeof(double*));
    res->end = (double**)calloc_check(P, sizeof(double*));
    res->ops = (Op**)calloc_check(P, sizeof(Op*));
    for (int s = 0; s < P; s++) {
        int n = sch->n_ops[s];
        res->n_ops[s] = n;
        res->start[s] = (double*)calloc_check(n, sizeof(double));
        res->end[s] = (double*)calloc_check(n, sizeof(double));
        res->ops[s] = (Op*)malloc_check((size_t)n * sizeof(Op));
        memcpy(res->ops[s], sch->ops[s], (size_t)n * sizeof(Op));
    }
    int rc;
    OpTimeCtx ctx = {cost, P};
    ScheduleComm comm = {cost->t_msg_f, cost->t_msg_b, cost->t_dp, cost->dp_overlap};
    const ScheduleComm* cm = cost->t_msg_f || cost->t_msg_b || cost->t_dp ? &comm : NULL;
    if (schedule_event_driven(sch)) { // the policy decides the order under these op times
        Schedule run = *sch;
        run.ops = res->ops;
        run.n_ops = res->n_ops;
        rc = schedule_run_tdpipe_comm(&run, op_time, &ctx, cost->latency, cm, res->start, res->end, err, errlen);
    } else {
        double** dur = (double**)calloc_check(P, sizeof(double*)); // (P)[n_ops[s]]
        for (int s = 0; s < P; s++) {
            dur[s] = (double*)malloc_check((size_t)res->n_ops[s] * sizeof(double));
            for (int i = 0; i < res->n_ops[s]; i++) dur[s][i] = op_time(&ctx, s, &res->ops[s][i]);
        }
        rc = schedule_replay_comm(sch, (const double* const*)dur, cost->latency, cm, res->start, res->end, err, errlen);
        for (int s = 0; s < P; s++) free(dur[s]);
        free(dur);
    }
    if (rc) {
        simulator_free(res);
        return rc;
    }
    double first = INFINITY, last = -INFINITY, total = 0.0;
    for (int s = 0; s < P; s++) {
        if (res->n_ops[s] == 0) continue;
        for (int i = 0; i < res->n_ops[s]; i++) res->busy[s] += res->end[s][i] - res->start[s][i];
        if (res->start[s][0] < first) first = res->start[s][0];
        if (res->end[s][res->n_ops[s] - 1] > last) last = res->end[s][res->n_ops[s] - 1];
    }
    res->makespan = last > first ? last - first : 0.0;
    for (int s = 0; s < P; s++) {
        total += res->busy[s];
        res->bubble[s] = res->makespan > 0 ? 1.0 - res->busy[s] / res->makespan : 0.0;
    }
    res->utilisation = res->makespan > 0 ? total / (P * res->makespan) : 0.0;
    res->steady_utilisation = steady_utilisation(res, sch->n_steps);
    return 0;
}

double simulator_window_utilisation(int P, int M, const double* t_f, const double* t_b, double beta, int W, char* err, size_t errlen) {
    Schedule sch;
    ScheduleShape shape = {.kind = SCHED_TDPIPE, .P = P, .M = M, .W = W, .n_steps = SIM_WINDOW_STEPS};
    if (schedule_build(&sch, &shape, err, errlen)) return -1.0;
    double sum = 0.0;
    int seeds = beta > 0 ? SIM_WINDOW_SEEDS : 1;
    for (int seed = 1; seed <= seeds; seed++) {
        SimCost cost = {.t_f = t_f, .t_b = t_b, .jitter_cv = beta, .seed = (uint64_t)seed};
        SimResult res;
        if (simulator_run(&res, &sch, &cost, err, errlen)) {
            schedule_free(&sch);
            return -1.0;
        }
        sum += res.steady_utilisation;
        simulator_free(&res);
    }
    schedule_free(&sch);
    return sum / seeds;
}

int simulator_choose_window(int P, int M, const double* t_f, const double* t_b, double beta, int W_max, double within, double* util,
                            char* err, size_t errlen) {
    double best = -1.0;
    for (int W = 0; W <= W_max; W++) {
        util[W] = simulator_window_utilisation(P, M, t_f, t_b, beta, W, err, errlen);
        if (util[W] < 0) return -1;
        if (util[W] > best) best = util[W];
    }
    for (int W = 0; W <= W_max; W++)
        if (util[W] >= best - within) return W;
    return W_max;
}
