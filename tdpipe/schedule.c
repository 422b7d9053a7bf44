// Pipeline schedules: gpipe, 1f1b, zbh1 and interleaved built by formula, tdpipe by a deterministic discrete-event
// run with fixed op times; printing, validation, per-stage statistics; TD-Pipe's policy (the executor's
// and the simulator's); dependency tracking and an in-order replay (the simulator's and the validator's).
#include "tdpipe/schedule.h"
#include "llmc/common.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>

// appends to a message already in buf, silently truncating at buflen
static void append(char* buf, size_t buflen, const char* fmt, ...) {
    if (!buf || !buflen) return;
    size_t used = strlen(buf);
    if (used + 1 >= buflen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, buflen - used, fmt, ap);
    va_end(ap);
}

static const char* const kind_names[] = {"gpipe", "1f1b", "zbh1", "tdpipe", "interleaved"};
#define N_KINDS ((int)(sizeof(kind_names) / sizeof(kind_names[0])))

int schedule_parse_kind(const char* name, SchedKind* kind) {
    for (int k = 0; k < N_KINDS; k++)
        if (name && strcmp(name, kind_names[k]) == 0) {
            *kind = (SchedKind)k;
            return 0;
        }
    return -1;
}

const char* schedule_kind_name(SchedKind kind) {
    return (kind >= SCHED_GPIPE && kind < N_KINDS) ? kind_names[kind] : "unknown";
}

int schedule_trainer_supports(SchedKind kind, char* err, size_t errlen) {
    if (kind == SCHED_INTERLEAVED)
        return td_error(err, errlen, "--schedule interleaved: the trainer cannot run it: it gives each rank several "
                                     "non-adjacent layer ranges (model chunks), and a rank here holds one contiguous "
                                     "range; build/dev/sim_cluster simulates it");
    return 0;
}

// appends an op of model chunk c, step t (counted from the schedule's start) on weight version v (likewise)
static void push_chunk(Schedule* sch, int s, OpKind kind, int t, int mb, int v, int c) {
    Op op = {kind, sch->first_step + t, mb, sch->first_step + v, c};
    sch->ops[s][sch->n_ops[s]++] = op;
}
static void push(Schedule* sch, int s, OpKind kind, int t, int mb, int v) { push_chunk(sch, s, kind, t, mb, v, 0); }

// capacity of one stage's list: F, B or BI+BW per micro-batch and chunk, one U per step
static int stage_capacity(int M, int chunks, int n_steps) { return n_steps * (3 * M * chunks + 1); }

static void build_gpipe(Schedule* sch) {
    for (int s = 0; s < sch->P; s++)
        for (int t = 0; t < sch->n_steps; t++) {
            for (int m = 0; m < sch->M; m++) push(sch, s, OP_F, t, m, t);
            // increasing micro-batch order: gradients accumulate in the same order at every P
            for (int m = 0; m < sch->M; m++) push(sch, s, OP_B, t, m, t);
            push(sch, s, OP_U, t, -1, t + 1);
        }
}

static void build_1f1b(Schedule* sch) {
    int P = sch->P, M = sch->M;
    for (int s = 0; s < P; s++)
        for (int t = 0; t < sch->n_steps; t++) {
            int warmup = P - s - 1 < M ? P - s - 1 : M;
            int f = 0, b = 0;
            for (int i = 0; i < warmup; i++) push(sch, s, OP_F, t, f++, t);
            for (int i = 0; i < M - warmup; i++) {
                push(sch, s, OP_F, t, f++, t);
                push(sch, s, OP_B, t, b++, t);
            }
            while (b < M) push(sch, s, OP_B, t, b++, t);
            push(sch, s, OP_U, t, -1, t + 1);
        }
}

// ZB-H1 (Qi et al. 2023, fig. 3): stage s runs min(P - s, M) warmup forwards, then per
// micro-batch j: BI(j), BW(j - s) once j >= s (the weight gradients lag s micro-batches to fill
// the cooldown bubble), the next forward; then the remaining BWs. At most P - s micro-batches
// await their BI and at most P their BW (1F1B's peak, at stage 0). With F = BI = BW = 1 the
// bubble is (P - 1)(F + BI - BW) = P - 1 against 1F1B's 3(P - 1).
static void build_zbh1(Schedule* sch) {
    int P = sch->P, M = sch->M;
    for (int s = 0; s < P; s++)
        for (int t = 0; t < sch->n_steps; t++) {
            int f = 0, w = 0;
            while (f < P - s && f < M) push(sch, s, OP_F, t, f++, t);
            for (int j = 0; j < M; j++) {
                push(sch, s, OP_BI, t, j, t);
                if (j >= s) push(sch, s, OP_BW, t, w++, t);
                if (f < M) push(sch, s, OP_F, t, f++, t);
            }
            while (w < M) push(sch, s, OP_BW, t, w++, t);
            push(sch, s, OP_U, t, -1, t + 1);
        }
}

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): the k-th forward
// of a stage (k over M * v per step) runs chunk (k mod P v) / P on micro-batch (k / P v) P + k mod P;
// the k-th backward the same micro-batch order with the chunks reversed. Warmup 2 (P - s - 1) +
// (v - 1) P forwards (every one when M = P), then one forward and one backward in turn, then the
// remaining backwards.
static void interleaved_op(int k, int P, int v, int forward, int* mb, int* c) {
    int in_group = k % (P * v);
    *c = forward ? in_group / P : v - 1 - in_group / P;
    *mb = k / (P * v) * P + k % P;
}

static void build_interleaved(Schedule* sch) {
    int P = sch->P, M = sch->M, v = schedule_chunks(sch), total = M * v;
    for (int s = 0; s < P; s++)
        for (int t = 0; t < sch->n_steps; t++) {
            int warmup = M == P ? total : 2 * (P - s - 1) + (v - 1) * P;
            if (warmup > total) warmup = total;
            int mb, c;
            for (int k = 0; k < warmup; k++) interleaved_op(k, P, v, 1, &mb, &c), push_chunk(sch, s, OP_F, t, mb, t, c);
            for (int k = 0; k < total - warmup; k++) {
                interleaved_op(k + warmup, P, v, 1, &mb, &c), push_chunk(sch, s, OP_F, t, mb, t, c);
                interleaved_op(k, P, v, 0, &mb, &c), push_chunk(sch, s, OP_B, t, mb, t, c);
            }
            for (int k = total - warmup; k < total; k++) interleaved_op(k, P, v, 0, &mb, &c), push_chunk(sch, s, OP_B, t, mb, t, c);
            push(sch, s, OP_U, t, -1, t + 1);
        }
}

// ---- tdpipe: the event-driven policy as a discrete-event run -------------------------------
int schedule_forward_version(SchedKind kind, int g, int M, int W) {
    if (kind != SCHED_TDPIPE) return g / M;
    return g < W ? 0 : (g - W) / M;
}

Op schedule_mb_op(const Schedule* sch, int s, OpKind kind, int g) {
    int v = schedule_forward_version(sch->kind, g, sch->M, sch->stage_W[s]);
    return (Op){kind, sch->first_step + g / sch->M, g % sch->M, sch->first_step + v, 0};
}

int schedule_forward_allowed(int P, int s, int M, int W, int nf, int nb, int v) {
    return nf - nb < (P - s) + W && schedule_forward_version(SCHED_TDPIPE, nf, M, W) <= v;
}

void schedule_tdpipe_next(const Schedule* sch, int s, const TdpipeCursor* c, TdpipeNext* next) {
    int nM = sch->n_steps * sch->M;
    memset(next, 0, sizeof(*next));
    next->has_u = c->v < sch->n_steps;
    if (next->has_u) next->u = (Op){OP_U, sch->first_step + c->v, -1, sch->first_step + c->v + 1, 0};
    next->has_b = c->nb < c->nf;
    if (next->has_b) next->b = schedule_mb_op(sch, s, OP_B, c->nb);
    next->has_f = c->nf < nM && schedule_forward_allowed(sch->P, s, sch->M, sch->stage_W[s], c->nf, c->nb, c->v);
    if (next->has_f) next->f = schedule_mb_op(sch, s, OP_F, c->nf);
}

int schedule_tdpipe_pick(const TdpipeCursor* c, const TdpipeNext* next, TdpipeReady ready, void* ctx, Op* op) {
    int forward_first = c->last == OP_B; // 1F1B's rhythm: F after a B, B after an F
    const Op* order[3];
    int has[3] = {next->has_u, forward_first ? next->has_f : next->has_b, forward_first ? next->has_b : next->has_f};
    order[0] = &next->u;
    order[1] = forward_first ? &next->f : &next->b;
    order[2] = forward_first ? &next->b : &next->f;
    for (int i = 0; i < 3; i++)
        if (has[i] && ready(ctx, order[i])) {
            *op = *order[i];
            return 1;
        }
    return 0;
}

void schedule_tdpipe_advance(TdpipeCursor* c, const Op* op) {
    if (op->kind == OP_U) c->v++;
    else if (op->kind == OP_F) c->nf++;
    else c->nb++;
    if (op->kind != OP_U) c->last = op->kind;
}

// the event-driven run's state: the dependencies, each stage's place in the policy and the op it computes
typedef struct {
    ScheduleProgress prog;
    TdpipeCursor* cur;   // (P) where each stage stands
    int* running;        // (P) 1 while the stage computes run_op
    Op* run_op;          // (P)
    double* busy_from;   // (P) start of run_op
    double* busy_until;  // (P) its end
    ScheduleOpTime dur;  // op times, and their context
    void* ctx;
    double latency;
    double* const* start; // (P)[n_ops[s]] or NULL: when each op the stage ran started
    double* const* end;   // the same, ended
} Des;

// the simulator's readiness at time T: the op's dependencies are done and have landed; one done but
// still in transit (latency) lowers *wake to when it lands
typedef struct {
    const ScheduleProgress* prog;
    int s;
    double T, latency, *wake;
} DesReady;

static int des_ready(void* ctx, const Op* op) {
    DesReady* q = (DesReady*)ctx;
    double tr = 0.0;
    if (!schedule_progress_ready(q->prog, q->s, op, q->latency, &tr, NULL, 0)) return 0;
    if (tr <= q->T) return 1;
    if (tr < *q->wake) *q->wake = tr;
    return 0;
}

// stage s, idle at T, starts what the policy picks that is ready, until an op takes time (the stage
// is then running it) or nothing is ready (*wake: when something in transit lands). Returns 1 when
// the op it began sends before its end (schedule_progress_began).
static int des_start(Des* d, Schedule* sch, int s, double T, double* wake) {
    DesReady q = {&d->prog, s, T, d->latency, wake};
    Op op;
    TdpipeNext cand;
    for (;;) {
        schedule_tdpipe_next(sch, s, &d->cur[s], &cand);
        if (!schedule_tdpipe_pick(&d->cur[s], &cand, des_ready, &q, &op)) return 0;
        int i = sch->n_ops[s]++;
        sch->ops[s][i] = op;
        schedule_tdpipe_advance(&d->cur[s], &op);
        double t = d->dur(d->ctx, s, &op);
        if (d->start) d->start[s][i] = T;
        if (d->end) d->end[s][i] = T + t;
        if (t <= 0.0) {
            schedule_progress_done(&d->prog, s, &op, T);
            continue;
        }
        d->running[s] = 1;
        d->run_op[s] = op;
        d->busy_from[s] = T;
        d->busy_until[s] = T + t;
        return schedule_progress_began(&d->prog, s, &op, T, T + t);
    }
}

int schedule_run_tdpipe(Schedule* sch, ScheduleOpTime dur, void* ctx, double latency, double* const* start,
                        double* const* end, char* err, size_t errlen) {
    return schedule_run_tdpipe_comm(sch, dur, ctx, latency, NULL, start, end, err, errlen);
}

int schedule_run_tdpipe_comm(Schedule* sch, ScheduleOpTime dur, void* ctx, double latency, const ScheduleComm* comm,
                             double* const* start, double* const* end, char* err, size_t errlen) {
    int P = sch->P, per_stage = sch->n_steps * (2 * sch->M + 1);
    Des d = {.cur = (TdpipeCursor*)calloc_check(P, sizeof(TdpipeCursor)),
             .running = (int*)calloc_check(P, sizeof(int)),
             .run_op = (Op*)calloc_check(P, sizeof(Op)),
             .busy_from = (double*)calloc_check(P, sizeof(double)),
             .busy_until = (double*)calloc_check(P, sizeof(double)),
             .dur = dur, .ctx = ctx, .latency = latency, .start = start, .end = end};
    schedule_progress_init_comm(&d.prog, sch, comm);
    for (int s = 0; s < P; s++) d.cur[s].last = OP_F;
    for (int s = 0; s < P; s++) sch->n_ops[s] = 0;
    int rc = 0;
    for (double T = 0.0;;) {
        for (int s = 0; s < P; s++)
            if (d.running[s] && d.busy_until[s] <= T) {
                schedule_progress_done_span(&d.prog, s, &d.run_op[s], d.busy_from[s], d.busy_until[s]);
                d.running[s] = 0;
            }
        double next = INFINITY;
        // a stage looked at before another began a B that sends early looks again: that gradient
        // may land before its B ends, and its arrival is the stage's wake-up
        for (int again = 1; again;) {
            again = 0;
            for (int s = 0; s < P; s++)
                if (!d.running[s]) again |= des_start(&d, sch, s, T, &next);
        }
        int complete = 1;
        for (int s = 0; s < P; s++) {
            if (d.running[s] || sch->n_ops[s] < per_stage) complete = 0;
            if (d.running[s] && d.busy_until[s] < next) next = d.busy_until[s];
        }
        if (complete) break;
        if (next == INFINITY) { // cannot happen for a correct policy; reported rather than looped on
            rc = td_error(err, errlen, "internal error: the tdpipe policy got stuck at time %g", T);
            break;
        }
        T = next;
    }
    free(d.running);
    free(d.run_op);
    free(d.busy_from);
    free(d.busy_until);
    free(d.cur);
    schedule_progress_free(&d.prog);
    return rc;
}

// the nominal op times the printed tdpipe list is built with
static double nominal_time(void* ctx, int s, const Op* op) {
    (void)ctx, (void)s;
    return op->kind == OP_U ? 0.0 : op->kind == OP_B ? 2.0 : 1.0;
}

int schedule_build(Schedule* sch, const ScheduleShape* shape, char* err, size_t errlen) {
    memset(sch, 0, sizeof(*sch));
    SchedKind kind = shape->kind;
    int P = shape->P, M = shape->M, W = shape->W, n_steps = shape->n_steps, chunks = shape->chunks > 1 ? shape->chunks : 1;
    const char* name = schedule_kind_name(kind);
    if (kind < SCHED_GPIPE || kind >= N_KINDS) return td_error(err, errlen, "unknown schedule kind %d", (int)kind);
    if (P < 1) return td_error(err, errlen, "--stages must be at least 1 (got %d)", P);
    if (M < 1) return td_error(err, errlen, "--micro-batches must be at least 1 (got %d)", M);
    if (shape->stage_W) { // the largest window is the schedule's W; each must be >= 0
        W = 0;
        for (int i = 0; i < P; i++) {
            if (shape->stage_W[i] < 0) return td_error(err, errlen, "--aew: stage %d's window must be at least 0 (got %d)", i, shape->stage_W[i]);
            if (shape->stage_W[i] > W) W = shape->stage_W[i];
        }
    }
    if (W < 0) return td_error(err, errlen, "--aew must be at least 0 (got %d)", W);
    if (W > 0 && kind != SCHED_TDPIPE)
        return td_error(err, errlen, "--aew %d needs the tdpipe schedule: %s is synchronous (use --aew 0)", W, name);
    if (M < P && kind != SCHED_GPIPE)
        return td_error(err, errlen, "--micro-batches %d is less than --stages %d: the %s schedule needs at least one micro-batch per stage", M, P, name);
    if (n_steps < 1) return td_error(err, errlen, "a schedule needs at least one step (got %d)", n_steps);
    if (shape->first_step < 0) return td_error(err, errlen, "a schedule starts at step 0 or later (got %d)", shape->first_step);
    if (shape->chunks < 0) return td_error(err, errlen, "--chunks must be at least 1 (got %d)", shape->chunks);
    if (chunks > 1 && kind != SCHED_INTERLEAVED)
        return td_error(err, errlen, "--chunks %d needs the interleaved schedule: %s runs one model chunk per stage", chunks, name);
    if (kind == SCHED_INTERLEAVED) {
        if (chunks < 2)
            return td_error(err, errlen, "the interleaved schedule needs --chunks of at least 2 (with one chunk per stage it is 1f1b)");
        if (P < 2) return td_error(err, errlen, "the interleaved schedule needs --stages of at least 2 (got %d)", P);
        if (M % P != 0)
            return td_error(err, errlen, "--micro-batches %d is not a multiple of --stages %d, which the interleaved schedule needs", M, P);
    }
    sch->kind = kind;
    sch->chunks = chunks;
    sch->first_step = shape->first_step;
    sch->P = P;
    sch->M = M;
    sch->W = W;
    sch->stage_W = (int*)malloc_check(P * sizeof(int));
    for (int i = 0; i < P; i++) sch->stage_W[i] = shape->stage_W ? shape->stage_W[i] : W;
    sch->n_steps = n_steps;
    sch->n_ops = (int*)calloc_check(P, sizeof(int));
    sch->ops = (Op**)calloc_check(P, sizeof(Op*));
    for (int s = 0; s < P; s++) sch->ops[s] = (Op*)malloc_check((size_t)stage_capacity(M, chunks, n_steps) * sizeof(Op));
    int rc = 0;
    if (kind == SCHED_GPIPE) build_gpipe(sch);
    else if (kind == SCHED_1F1B) build_1f1b(sch);
    else if (kind == SCHED_ZBH1) build_zbh1(sch);
    else if (kind == SCHED_INTERLEAVED) build_interleaved(sch);
    else rc = schedule_run_tdpipe(sch, nominal_time, NULL, 0.0, NULL, NULL, err, errlen);
    if (rc) schedule_free(sch);
    return rc;
}

void schedule_free(Schedule* sch) {
    if (sch->ops)
        for (int s = 0; s < sch->P; s++) free(sch->ops[s]);
    free(sch->ops);
    free(sch->n_ops);
    free(sch->stage_W);
    sch->ops = NULL;
    sch->n_ops = NULL;
    sch->stage_W = NULL;
}

// ---- printing and statistics -----------------------------------------------------------------
void schedule_op_name(const Op* op, char* buf, size_t buflen) {
    if (op->chunk > 0 && buflen > 0) { // the name without the chunk, then its suffix
        Op plain = *op;
        plain.chunk = 0;
        schedule_op_name(&plain, buf, buflen);
        size_t n = strlen(buf);
        snprintf(buf + n, buflen - n, "c%d", op->chunk);
        return;
    }
    switch (op->kind) {
    case OP_F:
        if (op->version != op->step) snprintf(buf, buflen, "F%d.%d@%d", op->step, op->mb, op->version);
        else snprintf(buf, buflen, "F%d.%d", op->step, op->mb);
        break;
    case OP_B: snprintf(buf, buflen, "B%d.%d", op->step, op->mb); break;
    case OP_BI: snprintf(buf, buflen, "BI%d.%d", op->step, op->mb); break;
    case OP_BW: snprintf(buf, buflen, "BW%d.%d", op->step, op->mb); break;
    case OP_U: snprintf(buf, buflen, "U%d", op->step); break;
    default: snprintf(buf, buflen, "?%d", (int)op->kind); break;
    }
}

void schedule_print(const Schedule* sch, FILE* f) {
    int uniform = 1;
    for (int i = 0; i < sch->P; i++) uniform &= sch->stage_W[i] == sch->W;
    fprintf(f, "schedule %s: stages %d, micro-batches %d, aew ", schedule_kind_name(sch->kind), sch->P, sch->M);
    for (int i = 0; i < (uniform ? 1 : sch->P); i++) fprintf(f, "%s%d", i ? "," : "", sch->stage_W[i]);
    fprintf(f, ", steps %d", sch->n_steps);
    if (schedule_chunks(sch) > 1) fprintf(f, ", chunks %d", schedule_chunks(sch));
    fprintf(f, "\n");
    char name[48];
    for (int s = 0; s < sch->P; s++) {
        fprintf(f, "stage %d:", s);
        for (int i = 0; i < sch->n_ops[s]; i++) {
            schedule_op_name(&sch->ops[s][i], name, sizeof(name));
            fprintf(f, " %s", name);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "legend: Ft.m forward of step t micro-batch m (Ft.m@v: on weight version v < t); Bt.m backward; "
               "BIt.m/BWt.m input-/weight-gradient backward; Ut update of step t%s\n",
            schedule_chunks(sch) > 1 ? "; a suffix cK: model chunk K (virtual stage K * stages + stage)" : "");
}

int schedule_op_staleness(const Op* op) { return op->kind == OP_U ? 0 : op->step - op->version; }

int schedule_max_staleness(const Schedule* sch) {
    int mx = 0;
    for (int s = 0; s < sch->P; s++)
        for (int i = 0; i < sch->n_ops[s]; i++) {
            int d = schedule_op_staleness(&sch->ops[s][i]);
            if (d > mx) mx = d;
        }
    return mx;
}

void schedule_stage_stats(const Schedule* sch, int s, int* max_inflight, int* max_versions) {
    int n = sch->n_ops[s], nv = sch->n_steps + 1;
    int* refs = (int*)calloc_check(nv, sizeof(int));          // (n_steps+1) in-flight micro-batches per version
    int* next_fv = (int*)malloc_check((n + 1) * sizeof(int)); // (n+1) version of the first F after op i, or nv
    next_fv[n] = nv;
    for (int i = n - 1; i >= 0; i--) next_fv[i] = sch->ops[s][i].kind == OP_F ? sch->ops[s][i].version - sch->first_step : next_fv[i + 1];
    int version = 0, inflight = 0, mx_in = 0, mx_ver = 1;
    for (int i = 0; i < n; i++) {
        const Op* op = &sch->ops[s][i];
        int v = op->version - sch->first_step; // counted from the schedule's start
        if (op->kind == OP_F && v >= 0 && v < nv) inflight++, refs[v]++;
        else if ((op->kind == OP_B || op->kind == OP_BW) && v >= 0 && v < nv) inflight--, refs[v]--;
        else if (op->kind == OP_U) version++;
        // held: the current weights, versions in-flight micro-batches used, and older versions a
        // later forward of this stage still needs (tdpipe's forwards may run on a stash)
        int versions = 0;
        for (int u = 0; u <= version && u < nv; u++)
            if (u == version || refs[u] > 0 || u >= next_fv[i + 1]) versions++;
        if (inflight > mx_in) mx_in = inflight;
        if (versions > mx_ver) mx_ver = versions;
    }
    free(refs);
    free(next_fv);
    if (max_inflight) *max_inflight = mx_in;
    if (max_versions) *max_versions = mx_ver;
}

void schedule_stage_limits(const Schedule* sch, int s, int* slots, int* stashes, int* grad_slots) {
    int P = sch->P, M = sch->M, W = sch->stage_W[s], nM = sch->n_steps * M;
    if (schedule_event_driven(sch)) {
        // in flight: the window. Held versions: U(v-1) needs every backward of step v-1, so the oldest
        // micro-batch in flight is >= v*M and uses a version >= v - ceil(W/M). Open gradient steps:
        // backwards reach at most micro-batch (v+1)*M + W - 1, step v + 1 + (W-1)/M. And no more than
        // the schedule's steps: it starts flushed (no older version exists), so at most n_steps - 1
        // versions are left behind by its updates, and at most n_steps steps are open
        // The last stage is the exception to the window: its backward needs nothing but its own
        // forward, so it is ready at once, and the policy takes a backward after a forward. It holds
        // that micro-batch and, when P > 1, the next one's input, whose receive the executor posts ahead
        int in = s == P - 1 ? (P == 1 ? 1 : 2) : (P - s) + W, held = (W + M - 1) / M;
        int open = W > 0 ? schedule_shape_grad_slots(&(ScheduleShape){.kind = sch->kind, .P = P, .M = M, .W = W}) : 1;
        if (slots) *slots = in < nM ? in : nM;
        if (stashes) *stashes = held < sch->n_steps - 1 ? held : sch->n_steps - 1;
        if (grad_slots) *grad_slots = open < sch->n_steps ? open : sch->n_steps;
        return;
    }
    int in, versions;
    schedule_stage_stats(sch, s, &in, &versions);
    if (slots) *slots = in;
    if (stashes) *stashes = versions - 1;
    if (grad_slots) *grad_slots = schedule_stage_grad_slots(sch, s);
}

// the widest window of the shape's stages
static int shape_max_window(const ScheduleShape* shape) {
    int W = shape->W;
    if (shape->stage_W)
        for (int i = 0; i < shape->P; i++) W = shape->stage_W[i] > W ? shape->stage_W[i] : W;
    return W;
}

int schedule_shape_grad_slots(const ScheduleShape* shape) {
    int W = shape_max_window(shape);
    if (shape->kind == SCHED_TDPIPE && W > 0) return 2 + (W - 1) / shape->M;
    return 1;
}

int schedule_shape_steady_steps(const ScheduleShape* shape) {
    int W = shape_max_window(shape);
    return shape->kind == SCHED_TDPIPE && W > 0 ? 2 + (W + shape->M - 1) / shape->M : 2;
}

int schedule_stage_grad_slots(const Schedule* sch, int s) {
    int* begun = (int*)calloc_check(sch->n_steps, sizeof(int)); // (n_steps)
    int open = 0, mx = 0;
    for (int i = 0; i < sch->n_ops[s]; i++) {
        const Op* op = &sch->ops[s][i];
        int t = op->step - sch->first_step;
        if (t < 0 || t >= sch->n_steps) continue;
        if ((op->kind == OP_B || op->kind == OP_BW) && !begun[t]) begun[t] = 1, open++;
        if (op->kind == OP_U && begun[t]) open--;
        if (open > mx) mx = open;
    }
    free(begun);
    return mx;
}

// ---- dependency tracking ---------------------------------------------------------------------
static double* filled(size_t n, double x) {
    double* a = (double*)malloc_check(n * sizeof(double));
    for (size_t i = 0; i < n; i++) a[i] = x;
    return a;
}

void schedule_progress_init_comm(ScheduleProgress* p, const Schedule* sch, const ScheduleComm* comm) {
    int P = sch->P, M = sch->M, n_steps = sch->n_steps, chunks = schedule_chunks(sch);
    size_t n = (size_t)P * chunks * n_steps * M;
    memset(p, 0, sizeof(*p));
    p->P = P;
    p->M = M;
    p->chunks = chunks;
    p->first_step = sch->first_step;
    p->n_steps = n_steps;
    p->f_end = filled(n, -1.0);
    p->b_end = filled(n, -1.0);
    p->w_end = filled(n, -1.0);
    p->grads_left = (int*)malloc_check((size_t)n_steps * P * sizeof(int));
    p->grads_end = (double*)calloc_check((size_t)n_steps * P, sizeof(double));
    for (size_t i = 0; i < (size_t)n_steps * P; i++) p->grads_left[i] = M * chunks;
    p->updates = (int*)calloc_check(P, sizeof(int));
    p->comm = comm;
    if (comm && (comm->msg_f || comm->msg_b)) {
        p->f_arrive = filled(n, -1.0);
        p->b_arrive = filled(n, -1.0);
        p->link_free = (double*)calloc_check((size_t)P * P, sizeof(double));
    }
}

void schedule_progress_init(ScheduleProgress* p, const Schedule* sch) { schedule_progress_init_comm(p, sch, NULL); }

void schedule_progress_free(ScheduleProgress* p) {
    free(p->f_end);
    free(p->b_end);
    free(p->w_end);
    free(p->grads_left);
    free(p->grads_end);
    free(p->updates);
    free(p->f_arrive);
    free(p->b_arrive);
    free(p->link_free);
    memset(p, 0, sizeof(*p));
}

static int not_ready(char* why, size_t whylen, const char* fmt, ...) {
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static double later(double a, double b) { return a > b ? a : b; }

// "stage 2", or "stage 2 chunk 1" for virtual stage q of an interleaved schedule
static const char* vstage_name(const ScheduleProgress* p, int q, char* buf, size_t buflen) {
    if (p->chunks > 1) snprintf(buf, buflen, "stage %d chunk %d", q % p->P, q / p->P);
    else snprintf(buf, buflen, "stage %d", q);
    return buf;
}

// when the output of op `here` (virtual stage q) reaches its neighbour: through the comm model's
// arrival times, else end + latency
static double arrival(const double* arrive, const double* end_, size_t here, double latency) {
    return arrive ? arrive[here] : end_[here] + latency;
}

int schedule_progress_ready(const ScheduleProgress* p, int s, const Op* op, double latency, double* t_ready,
                            char* why, size_t whylen) {
    int P = p->P, M = p->M, t = op->step - p->first_step, m = op->mb, v_now = p->first_step + p->updates[s];
    int Q = P * p->chunks, q = op->chunk * P + s;
    char vn[48];
    if (s < 0 || s >= P) return not_ready(why, whylen, "stage %d is out of range [0,%d)", s, P);
    if (op->chunk < 0 || op->chunk >= p->chunks)
        return not_ready(why, whylen, "chunk %d is out of range [0,%d)", op->chunk, p->chunks);
    if (t < 0 || t >= p->n_steps)
        return not_ready(why, whylen, "step %d is out of range [%d,%d)", op->step, p->first_step, p->first_step + p->n_steps);
    if (op->kind != OP_U && (m < 0 || m >= M))
        return not_ready(why, whylen, "micro-batch %d is out of range [0,%d)", m, M);
    size_t nM = (size_t)p->n_steps * M, g = (size_t)t * M + m, here = (size_t)q * nM + g;
    const double* f_arrive = p->comm && p->comm->msg_f ? p->f_arrive : NULL;
    const double* b_arrive = p->comm && p->comm->msg_b ? p->b_arrive : NULL;
    double tr = 0.0;
    switch (op->kind) {
    case OP_F:
        if (p->f_end[here] >= 0) return not_ready(why, whylen, "F%d.%d already ran on %s", op->step, m, vstage_name(p, q, vn, sizeof(vn)));
        if (v_now < op->version)
            return not_ready(why, whylen, "waits for U%d on stage %d (its weights are at version %d, the forward uses %d)",
                             v_now, s, v_now, op->version);
        if (q > 0) {
            if (p->f_end[here - nM] < 0)
                return not_ready(why, whylen, "waits for F%d.%d on %s", op->step, m, vstage_name(p, q - 1, vn, sizeof(vn)));
            tr = arrival(f_arrive, p->f_end, here - nM, latency);
        }
        break;
    case OP_B:
    case OP_BI: {
        const char* k = op->kind == OP_B ? "B" : "BI";
        if (p->b_end[here] >= 0) return not_ready(why, whylen, "%s%d.%d already ran on %s", k, op->step, m, vstage_name(p, q, vn, sizeof(vn)));
        if (p->f_end[here] < 0) return not_ready(why, whylen, "waits for its own F%d.%d on %s", op->step, m, vstage_name(p, q, vn, sizeof(vn)));
        tr = p->f_end[here];
        if (q < Q - 1) {
            if (p->b_end[here + nM] < 0)
                return not_ready(why, whylen, "waits for %s%d.%d on %s", k, op->step, m, vstage_name(p, q + 1, vn, sizeof(vn)));
            tr = later(tr, arrival(b_arrive, p->b_end, here + nM, latency));
        }
        break;
    }
    case OP_BW:
        if (p->w_end[here] >= 0) return not_ready(why, whylen, "BW%d.%d already ran on %s", op->step, m, vstage_name(p, q, vn, sizeof(vn)));
        if (p->b_end[here] < 0) return not_ready(why, whylen, "waits for BI%d.%d on %s", op->step, m, vstage_name(p, q, vn, sizeof(vn)));
        tr = p->b_end[here];
        break;
    case OP_U:
        if (p->updates[s] > t) return not_ready(why, whylen, "U%d already ran on stage %d", op->step, s);
        if (p->updates[s] < t) return not_ready(why, whylen, "waits for U%d on stage %d", v_now, s);
        for (int r = 0; r < P; r++) {
            int left = p->grads_left[(size_t)t * P + r];
            if (left > 0)
                return not_ready(why, whylen, "waits for the gradients of step %d on stage %d (%d backward ops missing)", op->step, r, left);
            tr = later(tr, p->grads_end[(size_t)t * P + r] + (r != s ? latency : 0.0));
        }
        break;
    default: return not_ready(why, whylen, "unknown op kind %d", (int)op->kind);
    }
    if (t_ready) *t_ready = tr;
    return 1;
}

// a message of `dur` leaves stage `from` for stage `to` at t_end, once their link is free; returns its arrival
static double send(ScheduleProgress* p, int from, int to, double t_end, double dur) {
    double* link = &p->link_free[(size_t)from * p->P + to];
    double arrive = later(t_end, *link) + dur;
    *link = arrive;
    return arrive;
}

// op's place in the (P*chunks, n_steps*M) tables of p (op on stage s, not U)
static size_t op_here(const ScheduleProgress* p, int s, const Op* op) {
    size_t q = (size_t)op->chunk * p->P + s;
    return q * p->n_steps * p->M + (size_t)(op->step - p->first_step) * p->M + op->mb;
}

// B or BI's input gradient leaves for the virtual stage before: at the op's end, or B's at its
// comm->b_send share
static void input_grad_out(ScheduleProgress* p, int s, const Op* op, double t_start, double t_end) {
    int P = p->P, q = op->chunk * P + s;
    size_t here = op_here(p, s, op);
    const ScheduleComm* c = p->comm;
    double t_out = op->kind == OP_B && c && c->b_send ? t_start + c->b_send[q] * (t_end - t_start) : t_end;
    p->b_end[here] = t_out;
    if (c && c->msg_b && q > 0) p->b_arrive[here] = send(p, s, (q - 1) % P, t_out, c->msg_b[q - 1]);
}

int schedule_progress_began(ScheduleProgress* p, int s, const Op* op, double t_start, double t_end) {
    if (op->kind != OP_B || !p->comm || !p->comm->b_send) return 0;
    input_grad_out(p, s, op, t_start, t_end);
    return 1;
}

void schedule_progress_done_span(ScheduleProgress* p, int s, const Op* op, double t_start, double t_end) {
    int P = p->P, Q = P * p->chunks, q = op->chunk * P + s;
    size_t t = (size_t)(op->step - p->first_step), here = op_here(p, s, op), tq = t * P + s;
    const ScheduleComm* c = p->comm;
    if (op->kind == OP_F) {
        p->f_end[here] = t_end;
        if (c && c->msg_f && q < Q - 1) p->f_arrive[here] = send(p, s, (q + 1) % P, t_end, c->msg_f[q]);
    }
    if ((op->kind == OP_B || op->kind == OP_BI) && p->b_end[here] < 0) input_grad_out(p, s, op, t_start, t_end);
    if (op->kind == OP_B || op->kind == OP_BW) {
        p->w_end[here] = t_end;
        p->grads_end[tq] = later(p->grads_end[tq], t_end);
        if (--p->grads_left[tq] == 0 && c && c->dp) // the step's gradient is complete here: its average
            p->grads_end[tq] = c->dp_overlap ? later(t_end, t_start + c->dp[s]) : t_end + c->dp[s];
    }
    if (op->kind == OP_U) p->updates[s]++;
}

void schedule_progress_done(ScheduleProgress* p, int s, const Op* op, double t_end) {
    schedule_progress_done_span(p, s, op, t_end, t_end);
}

int schedule_replay(const Schedule* sch, const double* const* dur, double latency, double* const* start,
                    double* const* end, char* err, size_t errlen) {
    return schedule_replay_comm(sch, dur, latency, NULL, start, end, err, errlen);
}

int schedule_replay_comm(const Schedule* sch, const double* const* dur, double latency, const ScheduleComm* comm,
                         double* const* start, double* const* end, char* err, size_t errlen) {
    int P = sch->P;
    ScheduleProgress prog;
    schedule_progress_init_comm(&prog, sch, comm);
    int* next = (int*)calloc_check(P, sizeof(int));      // (P) index of each stage's next op
    double* free_at = (double*)calloc_check(P, sizeof(double)); // (P) end of each stage's last op
    for (int moved = 1; moved;) {
        moved = 0;
        for (int s = 0; s < P; s++)
            for (; next[s] < sch->n_ops[s]; next[s]++, moved = 1) {
                const Op* op = &sch->ops[s][next[s]];
                double tr = 0.0;
                if (!schedule_progress_ready(&prog, s, op, latency, &tr, NULL, 0)) break;
                double t0 = later(free_at[s], tr), t1 = t0 + (dur ? dur[s][next[s]] : 1.0);
                if (start) start[s][next[s]] = t0;
                if (end) end[s][next[s]] = t1;
                free_at[s] = t1;
                schedule_progress_done_span(&prog, s, op, t0, t1);
            }
    }
    int rc = 0;
    for (int s = 0; s < P; s++) {
        if (next[s] >= sch->n_ops[s]) continue;
        if (rc == 0) rc = td_error(err, errlen, "%s schedule deadlocks:", schedule_kind_name(sch->kind));
        char name[48], why[160];
        schedule_op_name(&sch->ops[s][next[s]], name, sizeof(name));
        schedule_progress_ready(&prog, s, &sch->ops[s][next[s]], latency, NULL, why, sizeof(why));
        append(err, errlen, " stage %d stuck at op %d (%s): %s;", s, next[s], name, why);
    }
    free(next);
    free(free_at);
    schedule_progress_free(&prog);
    return rc;
}

// ---- validation ------------------------------------------------------------------------------
// fver (chunks, nM) and cnt (4, chunks, nM): work arrays, indexed by chunk * nM + g
static int validate_stage(const Schedule* sch, int s, int* fver, int* cnt, char* err, size_t errlen) {
    int chunks = schedule_chunks(sch), M = sch->M, nM = sch->n_steps * M * chunks; // per (chunk, micro-batch)
    int W = sch->stage_W[s], ceil_wm = (W + sch->M - 1) / sch->M;
    const char* name = schedule_kind_name(sch->kind);
    memset(cnt, 0, (size_t)4 * nM * sizeof(int)); // (4, chunks * n_steps * M) counts of F, B, BI, BW
    int updates = 0;
    char on[48];
    for (int i = 0; i < sch->n_ops[s]; i++) {
        const Op* op = &sch->ops[s][i];
        schedule_op_name(op, on, sizeof(on));
        if (op->kind < OP_F || op->kind > OP_U) return td_error(err, errlen, "stage %d op %d has unknown kind %d", s, i, (int)op->kind);
        int t0 = sch->first_step, t = op->step - t0;
        if (t < 0 || t >= sch->n_steps)
            return td_error(err, errlen, "stage %d op %d (%s): step out of range [%d,%d)", s, i, on, t0, t0 + sch->n_steps);
        if (op->kind == OP_U) {
            if (t != updates || op->version != t0 + updates + 1)
                return td_error(err, errlen, "stage %d op %d (%s): expected U%d (producing version %d)", s, i, on, t0 + updates, t0 + updates + 1);
            updates++;
            continue;
        }
        if (op->mb < 0 || op->mb >= M) return td_error(err, errlen, "stage %d op %d (%s): micro-batch out of range [0,%d)", s, i, on, M);
        if (op->chunk < 0 || op->chunk >= chunks)
            return td_error(err, errlen, "stage %d op %d (%s): chunk out of range [0,%d)", s, i, on, chunks);
        int g = t * M + op->mb, gc = op->chunk * sch->n_steps * M + g;
        if (op->kind == OP_F) {
            int want = t0 + schedule_forward_version(sch->kind, g, M, W);
            if (op->version != want)
                return td_error(err, errlen, "stage %d op %d (%s): version %d, but %s's forward of micro-batch %d uses version %d", s, i,
                                on, op->version, name, g, want);
            if (op->version > t0 + updates)
                return td_error(err, errlen, "stage %d op %d (%s): version %d, but only %d updates precede it", s, i, on, op->version, updates);
            int st = op->step - op->version;
            if (st < 0 || st > ceil_wm)
                return td_error(err, errlen, "stage %d op %d (%s): staleness %d outside [0, ceil(W/M) = %d]", s, i, on, st, ceil_wm);
            fver[gc] = op->version;
        } else {
            if (cnt[gc] == 0) return td_error(err, errlen, "stage %d op %d (%s) comes before its forward", s, i, on);
            if (op->version != fver[gc])
                return td_error(err, errlen, "stage %d op %d (%s): version %d, its forward used %d", s, i, on, op->version, fver[gc]);
            if (op->kind == OP_BW && cnt[(size_t)2 * nM + gc] == 0)
                return td_error(err, errlen, "stage %d op %d (%s) comes before its BI", s, i, on);
        }
        cnt[(size_t)op->kind * nM + gc]++;
    }
    for (int gc = 0; gc < nM; gc++) {
        int f = cnt[gc], b = cnt[nM + gc], bi = cnt[2 * nM + gc], bw = cnt[3 * nM + gc];
        int g = gc % (sch->n_steps * M), t = g / M, m = g % M, c = gc / (sch->n_steps * M);
        char chunk[24] = "";
        if (chunks > 1) snprintf(chunk, sizeof(chunk), " chunk %d", c);
        if (f != 1) return td_error(err, errlen, "stage %d%s has %d forwards of step %d micro-batch %d (want 1)", s, chunk, f, t, m);
        if (!((b == 1 && bi == 0 && bw == 0) || (b == 0 && bi == 1 && bw == 1)))
            return td_error(err, errlen, "stage %d%s has %d B, %d BI, %d BW of step %d micro-batch %d (want one B, or one BI and one BW)",
                        s, chunk, b, bi, bw, t, m);
    }
    if (updates != sch->n_steps) return td_error(err, errlen, "stage %d has %d updates for %d steps", s, updates, sch->n_steps);
    return 0;
}

int schedule_validate(const Schedule* sch, char* err, size_t errlen) {
    if (sch->P < 1 || sch->M < 1 || sch->n_steps < 1 || !sch->ops || !sch->n_ops)
        return td_error(err, errlen, "empty schedule (stages %d, micro-batches %d, steps %d)", sch->P, sch->M, sch->n_steps);
    int nM = sch->n_steps * sch->M * schedule_chunks(sch);
    int* fver = (int*)calloc_check(nM, sizeof(int));         // (chunks, n_steps * M) version of each forward
    int* cnt = (int*)calloc_check((size_t)4 * nM, sizeof(int)); // (4, chunks, n_steps * M)
    int rc = 0;
    for (int s = 0; s < sch->P && rc == 0; s++) rc = validate_stage(sch, s, fver, cnt, err, errlen);
    free(fver);
    free(cnt);
    if (rc) return rc;
    return schedule_replay(sch, NULL, 0.0, NULL, NULL, err, errlen);
}
