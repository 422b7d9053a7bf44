// Schedule simulator: op durations from a per-stage cost model with optional Gamma jitter, then
// schedule_replay for the earliest start of every op under the per-stage order and dependencies.
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
    uint64_t key[4] = {(uint64_t)s, (uint64_t)op->kind, (uint64_t)(int64_t)op->step, (uint64_t)(int64_t)op->mb};
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        x ^= key[i];
        x = rng_splitmix64(&x);
    }
    Rng r;
    rng_init(&r, x);
    double k = 1.0 / (cv * cv); // Gamma(k, 1/k): mean 1, CV 1/sqrt(k) = cv
    return gamma_draw(k, &r) / k;
}

// the cost model's time for op kind k on stage s, or -1 when the model lacks it
static double base_time(const SimCost* c, int s, OpKind k) {
    switch (k) {
    case OP_F: return c->t_f ? c->t_f[s] : -1.0;
    case OP_B: return c->t_b ? c->t_b[s] : (c->t_bi && c->t_bw ? c->t_bi[s] + c->t_bw[s] : -1.0);
    case OP_BI: return c->t_bi ? c->t_bi[s] : (c->t_b ? 0.5 * c->t_b[s] : -1.0);
    case OP_BW: return c->t_bw ? c->t_bw[s] : (c->t_b ? 0.5 * c->t_b[s] : -1.0);
    case OP_U: return c->t_u ? c->t_u[s] : 0.0;
    }
    return -1.0;
}

void simulator_free(SimResult* res) {
    if (res->start)
        for (int s = 0; s < res->P; s++) free(res->start[s]);
    if (res->end)
        for (int s = 0; s < res->P; s++) free(res->end[s]);
    free(res->start);
    free(res->end);
    free(res->busy);
    free(res->bubble);
    free(res->n_ops);
    memset(res, 0, sizeof(*res));
}

int simulator_run(SimResult* res, const Schedule* sch, const SimCost* cost, char* err, size_t errlen) {
    static const char* const kinds[] = {"F", "B", "BI", "BW", "U"};
    int P = sch->P;
    memset(res, 0, sizeof(*res));
    if (cost->jitter_cv < 0) return td_error(err, errlen, "jitter coefficient of variation must be >= 0 (got %g)", cost->jitter_cv);
    res->P = P;
    res->busy = (double*)calloc_check(P, sizeof(double));
    res->bubble = (double*)calloc_check(P, sizeof(double));
    res->n_ops = (int*)calloc_check(P, sizeof(int));
    res->start = (double**)calloc_check(P, sizeof(double*));
    res->end = (double**)calloc_check(P, sizeof(double*));
    double** dur = (double**)calloc_check(P, sizeof(double*)); // (P)[n_ops[s]]
    int rc = 0;
    for (int s = 0; s < P; s++) {
        int n = sch->n_ops[s];
        res->n_ops[s] = n;
        res->start[s] = (double*)calloc_check(n, sizeof(double));
        res->end[s] = (double*)calloc_check(n, sizeof(double));
        dur[s] = (double*)calloc_check(n, sizeof(double));
        for (int i = 0; i < n && rc == 0; i++) {
            const Op* op = &sch->ops[s][i];
            double t = base_time(cost, s, op->kind);
            if (t < 0) rc = td_error(err, errlen, "the cost model has no %s time for stage %d", kinds[op->kind], s);
            dur[s][i] = t * simulator_jitter(cost->seed, s, op, cost->jitter_cv);
            res->busy[s] += dur[s][i];
        }
    }
    if (rc == 0) rc = schedule_replay(sch, (const double* const*)dur, cost->latency, res->start, res->end, err, errlen);
    for (int s = 0; s < P; s++) free(dur[s]);
    free(dur);
    if (rc) {
        simulator_free(res);
        return rc;
    }
    double first = INFINITY, last = -INFINITY, total = 0.0;
    for (int s = 0; s < P; s++) {
        if (res->n_ops[s] == 0) continue;
        if (res->start[s][0] < first) first = res->start[s][0];
        if (res->end[s][res->n_ops[s] - 1] > last) last = res->end[s][res->n_ops[s] - 1];
    }
    res->makespan = last > first ? last - first : 0.0;
    for (int s = 0; s < P; s++) {
        total += res->busy[s];
        res->bubble[s] = res->makespan > 0 ? 1.0 - res->busy[s] / res->makespan : 0.0;
    }
    res->utilisation = res->makespan > 0 ? total / (P * res->makespan) : 0.0;
    return 0;
}
