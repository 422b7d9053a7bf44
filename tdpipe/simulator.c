// Schedule simulator: op durations from a per-(virtual-)stage cost model with optional Gamma jitter;
// the synchronous lists replayed in order (schedule_replay_comm), tdpipe's event-driven policy run
// live (schedule_run_tdpipe_comm), as the executor runs each, with optional message and DP times,
// and optionally stages sharing fewer cores than there are of them (processor sharing).
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
    free(res->steady_bubble);
    free(res->n_ops);
    memset(res, 0, sizeof(*res));
}

// an op's place in its stage's table of stretch factors: F, B, BI, BW by (step, mb, kind, chunk),
// then each step's U
static int share_key(const Schedule* sch, const Op* op) {
    int chunks = schedule_chunks(sch), k = op->step - sch->first_step;
    if (op->kind == OP_U) return sch->n_steps * sch->M * 4 * chunks + k;
    return ((k * sch->M + op->mb) * 4 + (int)op->kind) * chunks + op->chunk;
}
static int share_keys(const Schedule* sch) { return sch->n_steps * (sch->M * 4 * schedule_chunks(sch) + 1); }

typedef struct {
    const SimCost* cost;
    const Schedule* sch;
    double* const* stretch; // (P)[share_keys] each op's time over its work (cores shared), or NULL
} OpTimeCtx;

// one op's time: the cost model's, times its jitter draw, stretched where the cores are shared
static double op_time(void* ctx, int s, const Op* op) {
    const OpTimeCtx* x = (const OpTimeCtx*)ctx;
    const SimCost* c = x->cost;
    double t = base_time(c, s, op->chunk * x->sch->P + s, op->kind) * simulator_jitter(c->seed, s, op, c->jitter_cv);
    return x->stretch ? t * x->stretch[s][share_key(x->sch, op)] : t;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
// the first i with edges[i] >= t (edges sorted, t among them)
static int edge_index(const double* edges, int n, double t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (edges[mid] < t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// which ops an overlap count takes: all (NULL), or the F and B ops of steps [lo, hi]
typedef struct {
    int lo, hi;
} StepRange;
static int counted(const Op* op, const StepRange* steps) {
    return !steps || (op->kind != OP_U && op->step >= steps->lo && op->step <= steps->hi);
}

// the spans of the ops `steps` takes (NULL: every op): their ends sorted into *edges (allocated, at
// most 2 per op) and (*active)[i] the number computing in [edges[i], edges[i + 1]); returns the
// number of edges
static int overlap(const SimResult* res, const StepRange* steps, double** edges_out, int** active_out) {
    int n = 0;
    for (int s = 0; s < res->P; s++) n += res->n_ops[s];
    double* edges = (double*)malloc_check(2 * (size_t)n * sizeof(double)); // (2n)
    int* active = (int*)calloc_check(2 * (size_t)n + 1, sizeof(int));     // (2n + 1)
    int m = 0;
    for (int s = 0; s < res->P; s++)
        for (int i = 0; i < res->n_ops[s]; i++)
            if (counted(&res->ops[s][i], steps)) edges[m++] = res->start[s][i], edges[m++] = res->end[s][i];
    qsort(edges, m, sizeof(double), cmp_double);
    for (int s = 0; s < res->P; s++)
        for (int i = 0; i < res->n_ops[s]; i++)
            if (counted(&res->ops[s][i], steps)) {
                active[edge_index(edges, m, res->start[s][i])]++;
                active[edge_index(edges, m, res->end[s][i])]--;
            }
    for (int i = 1; i < m; i++) active[i] += active[i - 1];
    *edges_out = edges;
    *active_out = active;
    return m;
}

// rate (P)[n_ops[s]]: each op's mean speed over its span in res's timeline when the stages share
// `cores` cores: k ops computing at once each run at min(1, cores / k) of a core (processor sharing)
static void share_rates(const SimResult* res, int cores, double** rate) {
    double* edges; // every span's ends, sorted
    int* active;   // ops computing in [edges[i], edges[i+1])
    int m = overlap(res, NULL, &edges, &active);
    for (int s = 0; s < res->P; s++)
        for (int i = 0; i < res->n_ops[s]; i++) {
            double a = res->start[s][i], b = res->end[s][i], work = 0.0;
            for (int j = edge_index(edges, m, a); j + 1 < m && edges[j] < b; j++)
                if (active[j] > cores) work += (edges[j + 1] - edges[j]) * (double)cores / active[j];
                else work += edges[j + 1] - edges[j];
            rate[s][i] = b > a ? work / (b - a) : 1.0;
        }
    free(edges);
    free(active);
}

void simulator_at_once(const SimResult* res, int step_lo, int step_hi, double* share) {
    StepRange steps = {step_lo, step_hi};
    double* edges;
    int* active;
    int m = overlap(res, &steps, &edges, &active);
    for (int k = 0; k <= res->P; k++) share[k] = 0.0;
    for (int i = 0; i + 1 < m; i++) share[active[i] < res->P ? active[i] : res->P] += edges[i + 1] - edges[i];
    double total = m > 1 ? edges[m - 1] - edges[0] : 0.0;
    for (int k = 0; k <= res->P; k++) share[k] = total > 0 ? share[k] / total : 0.0;
    free(edges);
    free(active);
}

// one run of sch with each op's time stretched by stretch (NULL: none) into res (allocated)
static int simulate_once(SimResult* res, const Schedule* sch, const SimCost* cost, double* const* stretch, char* err, size_t errlen) {
    int P = sch->P, rc;
    for (int s = 0; s < P; s++) memcpy(res->ops[s], sch->ops[s], (size_t)res->n_ops[s] * sizeof(Op));
    OpTimeCtx ctx = {cost, sch, stretch};
    ScheduleComm comm = {cost->t_msg_f, cost->t_msg_b, cost->t_dp, cost->dp_overlap, cost->b_send};
    const ScheduleComm* cm = cost->t_msg_f || cost->t_msg_b || cost->t_dp || cost->b_send ? &comm : NULL;
    if (schedule_event_driven(sch)) { // the policy decides the order under these op times
        Schedule run = *sch;
        run.ops = res->ops;
        run.n_ops = res->n_ops;
        return schedule_run_tdpipe_comm(&run, op_time, &ctx, cost->latency, cm, res->start, res->end, err, errlen);
    }
    double** dur = (double**)calloc_check(P, sizeof(double*)); // (P)[n_ops[s]]
    for (int s = 0; s < P; s++) {
        dur[s] = (double*)malloc_check((size_t)res->n_ops[s] * sizeof(double));
        for (int i = 0; i < res->n_ops[s]; i++) dur[s][i] = op_time(&ctx, s, &res->ops[s][i]);
    }
    rc = schedule_replay_comm(sch, (const double* const*)dur, cost->latency, cm, res->start, res->end, err, errlen);
    for (int s = 0; s < P; s++) free(dur[s]);
    free(dur);
    return rc;
}

// Shared cores: op times are work / rate, the rate from the timeline those times make. Half steps
// toward the rates of the last run (a full step can oscillate: two ops that overlap stretch, stop
// overlapping, shrink, overlap again) until no factor moves by 1e-9 of itself.
static int simulate_shared(SimResult* res, const Schedule* sch, const SimCost* cost, char* err, size_t errlen) {
    int P = sch->P, keys = share_keys(sch), rc = 0;
    double** stretch = (double**)malloc_check(P * sizeof(double*)); // (P)[keys]
    double** rate = (double**)malloc_check(P * sizeof(double*));    // (P)[n_ops[s]]
    for (int s = 0; s < P; s++) {
        stretch[s] = (double*)malloc_check((size_t)keys * sizeof(double));
        for (int k = 0; k < keys; k++) stretch[s][k] = 1.0;
        rate[s] = (double*)malloc_check((size_t)res->n_ops[s] * sizeof(double));
    }
    for (int it = 0; it < SIM_SHARE_ITERS; it++) {
        if ((rc = simulate_once(res, sch, cost, stretch, err, errlen))) break;
        share_rates(res, cost->cores, rate);
        double moved = 0.0;
        for (int s = 0; s < P; s++)
            for (int i = 0; i < res->n_ops[s]; i++) {
                double* f = &stretch[s][share_key(sch, &res->ops[s][i])];
                double next = 0.5 * (*f + 1.0 / rate[s][i]);
                if (fabs(next - *f) > moved * *f) moved = fabs(next - *f) / *f;
                *f = next;
            }
        if (moved < 1e-9) break;
    }
    for (int s = 0; s < P; s++) free(stretch[s]), free(rate[s]);
    free(stretch);
    free(rate);
    return rc;
}

// what the trainer reports per step, averaged over steps 2..n-1 (1-based): per step, the stages'
// busy time since their previous update over the time since it, summed over the stages; and each
// stage's bubble alone the same way into res->steady_bubble (with fewer steps: the whole run's)
static double steady_utilisation(SimResult* res, int n_steps) {
    if (n_steps < 3) {
        memcpy(res->steady_bubble, res->bubble, res->P * sizeof(double));
        return res->utilisation;
    }
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
            res->steady_bubble[s] += (at > prev ? 1.0 - b / (at - prev) : 0.0) / (n_steps - 2);
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
    if (cost->cores < 0) return td_error(err, errlen, "shared cores must be >= 0 (got %d)", cost->cores);
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
    res->steady_bubble = (double*)calloc_check(P, sizeof(double));
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
    }
    int rc = cost->cores > 0 && cost->cores < P ? simulate_shared(res, sch, cost, err, errlen) : simulate_once(res, sch, cost, NULL, err, errlen);
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

double simulator_window_utilisation(int P, int M, const double* t_f, const double* t_b, const double* b_send, double beta, int W,
                                    char* err, size_t errlen) {
    Schedule sch;
    ScheduleShape shape = {.kind = SCHED_TDPIPE, .P = P, .M = M, .W = W, .n_steps = SIM_WINDOW_STEPS};
    if (schedule_build(&sch, &shape, err, errlen)) return -1.0;
    double sum = 0.0;
    int seeds = beta > 0 ? SIM_WINDOW_SEEDS : 1;
    for (int seed = 1; seed <= seeds; seed++) {
        SimCost cost = {.t_f = t_f, .t_b = t_b, .jitter_cv = beta, .seed = (uint64_t)seed, .b_send = b_send};
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

int simulator_choose_window(int P, int M, const double* t_f, const double* t_b, const double* b_send, double beta, int W_max,
                            double within, double* util, char* err, size_t errlen) {
    double best = -1.0;
    for (int W = 0; W <= W_max; W++) {
        util[W] = simulator_window_utilisation(P, M, t_f, t_b, b_send, beta, W, err, errlen);
        if (util[W] < 0) return -1;
        if (util[W] > best) best = util[W];
    }
    for (int W = 0; W <= W_max; W++)
        if (util[W] >= best - within) return W;
    return W_max;
}
