// Pipeline schedules as pure data: for each stage, the ordered list of operations (forward,
// backward, zero-bubble's split backward, optimizer update) covering n_steps training steps; the TD-Pipe
// policy that the executor and the simulator both follow; the simulator's and validator's dependency tracker.
#pragma once
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// OP_F forward; OP_B full backward; OP_BI zero-bubble input-gradient backward (sent upstream);
// OP_BW zero-bubble weight-gradient backward; OP_U optimizer update.
typedef enum { OP_F, OP_B, OP_BI, OP_BW, OP_U } OpKind;

// step t (absolute: the run's 0-based step, whatever chunk of it a schedule covers), micro-batch m
// (-1 for OP_U). version (absolute too): for F/B/BI/BW the weight version the micro-batch's forward
// uses (schedule_forward_version; the backward uses the same, stashed, version); for OP_U the version
// it produces (= step + 1).
// chunk: the model chunk of an interleaved schedule (virtual stage chunk * P + s); 0 for every other
typedef struct {
    OpKind kind;
    int step;
    int mb;
    int version;
    int chunk;
} Op;

// Per step unless noted, stage s (0 = embeddings, P-1 = loss):
// gpipe: F(0..M-1), B(0..M-1) in increasing micro-batch order, U.
// 1f1b: min(P-s-1, M) warmup forwards, then F/B alternating, the remaining Bs, U.
// zbh1: ZB-H1 (Qi et al. 2023): min(P-s, M) forwards, then per j: BI(j), BW(j-s) once j >= s, next F;
//       the remaining BWs, U. Peak awaiting BW <= P (1F1B's stage-0 peak).
// tdpipe: no flush, event-driven, by the policy of schedule_tdpipe_pick (below): U if ready, else
//       the ready one of the next B and the next F (the window allows it), 1F1B's rhythm breaking
//       ties. The executor runs this policy live when W > 0 (W = 0 is exactly the 1f1b list); the
//       list printed here is the order it takes with F = 1, B = 2, U = 0, no latency.
//       Versions depend on g alone, so a run is bitwise the same at every P, P = 1 included: one
//       process with W > 0 computes exactly the stale updates a pipeline does.
// interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021, section 2.2.2): each stage
//       holds `chunks` model chunks v, virtual stage c * P + s holding the c-th of P * v contiguous
//       layer ranges; forwards go over micro-batches in groups of P, chunk by chunk, warmup
//       2 (P - s - 1) + (v - 1) P forwards (all of them when M = P), then F/B alternating, backwards
//       taking the chunks in reverse. The bubble shrinks to (P - 1) / (v M) of the ideal. The
//       trainer's executor runs one contiguous layer range per rank, so only the simulator runs it
//       (schedule_trainer_supports).
typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_ZBH1, SCHED_TDPIPE, SCHED_INTERLEAVED } SchedKind;

// what a schedule is built for: steps first_step .. first_step + n_steps - 1 of a run whose weights
// are at version first_step when it begins (a consistency point: the pipeline is empty)
typedef struct {
    SchedKind kind;
    int P, M;       // stages, micro-batches per step
    int W;          // TD-Pipe's asynchronous window (tdpipe only)
    int first_step; // absolute step of the first step
    int n_steps;
    int chunks;     // model chunks per stage (interleaved only); 0 means 1
    const int* stage_W; // (P) tdpipe: a window per stage (large for variable stages, small for stable
                        // ones); NULL: W on every stage
} ScheduleShape;

typedef struct {
    SchedKind kind;
    int P, M, W, first_step, n_steps; // as in ScheduleShape; W the largest stage's window
    int* stage_W;         // (P) each stage's window
    int* n_ops;           // (P) ops in each stage's list
    Op** ops;             // (P)[n_ops[s]] stage s's ops in execution order
    int chunks;           // as in ScheduleShape (0 means 1)
} Schedule;

// Builds the lists. Refuses (returns -1 with a message naming the flag) P < 1, M < 1, W < 0,
// W > 0 for a synchronous schedule, M < P for 1f1b/zbh1/tdpipe, n_steps < 1, first_step < 0,
// chunks > 1 for any schedule but interleaved, and for interleaved chunks < 2, P < 2 or M not a
// multiple of P (Megatron-LM's conditions). Returns 0.
int schedule_build(Schedule* sch, const ScheduleShape* shape, char* err, size_t errlen);
void schedule_free(Schedule* sch);
// "gpipe", "1f1b", "zbh1", "tdpipe", "interleaved" -> kind; returns 0, or -1 for an unknown name
int schedule_parse_kind(const char* name, SchedKind* kind);
const char* schedule_kind_name(SchedKind kind);
// model chunks per stage: 1 unless interleaved; virtual stages are P * chunks
static inline int schedule_chunks(const Schedule* sch) { return sch->chunks > 1 ? sch->chunks : 1; }
// 0 when the trainer's executor can run kind; -1 with the reason otherwise (interleaved: a rank
// would hold several non-adjacent layer ranges, and the executor holds one contiguous range per rank)
int schedule_trainer_supports(SchedKind kind, char* err, size_t errlen);
// one header line, one line per stage ("stage 0: F0.0 F0.1 B0.0 ... U0") and a legend line
void schedule_print(const Schedule* sch, FILE* f);
// writes an op's short name ("F1.3", "F1.3@0" when it runs on an older version, "BW0.2", "U0";
// "F1.3c2" for model chunk 2 of an interleaved schedule)
void schedule_op_name(const Op* op, char* buf, size_t buflen);

// The weight version (counted from the schedule's start) the forward of micro-batch g = t*M + m of
// the schedule uses: t for the synchronous schedules; for tdpipe max(0, floor((g - W) / M)), the
// oldest the window allows. It is fixed by g alone, never by timing, so event-driven runs are
// deterministic: a stage that is already past that version forwards on a stashed copy. Staleness
// t - version is at most ceil(W / M).
int schedule_forward_version(SchedKind kind, int g, int M, int W);
// the op that forwards (kind OP_F) or backwards (OP_B, OP_BI, OP_BW) micro-batch g of the schedule
// (0 <= g < n_steps * M) on stage s, with its absolute step and that stage's weight version
Op schedule_mb_op(const Schedule* sch, int s, OpKind kind, int g);
// tdpipe's window: stage s (of P), with nf micro-batches forwarded, nb backwarded and v updates
// applied (all counted from the schedule's start), may forward micro-batch nf when nf - nb < (P - s) + W
// (in flight) and its version exists: schedule_forward_version(nf) <= v
int schedule_forward_allowed(int P, int s, int M, int W, int nf, int nb, int v);
// 1 when sch runs event-driven (tdpipe with W > 0), 0 when its lists run in order
static inline int schedule_event_driven(const Schedule* sch) { return sch->kind == SCHED_TDPIPE && sch->W > 0; }

// ---- TD-Pipe's event-driven policy: the executor (live, on messages) and the simulator (on
// simulated time) both pick every op with these three calls, so what is measured and what is
// simulated follow one rule. Given where a stage stands (TdpipeCursor), schedule_tdpipe_next says
// which ops it could run next; schedule_tdpipe_pick asks `ready` about them in the policy's order
// and returns the first that is ready:
//   1. U(v), the next update, once the step's pipeline-wide sum has arrived;
//   2. of the next backward B(nb) (its forward has run) and the next forward F(nf) (the window
//      allows it: schedule_forward_allowed), the one 1F1B's rhythm puts next, F after a B and B
//      after an F, if ready; else the other, if ready.
// The tie-break was measured (dev/sim_schedules -n 12 -s 5 at beta 0.3, against always-B-first, with
// a development switch not kept): 1.6 to 5 points more utilisation for W 2..16.
typedef struct {
    int nf, nb; // micro-batches of the schedule forwarded, backwarded
    int v;      // updates applied since the schedule began
    OpKind last; // the stage's last F or B (OP_F before any)
} TdpipeCursor;
typedef struct {
    Op u, b, f;
    int has_u, has_b, has_f; // each exists (and, for F, the window allows it)
} TdpipeNext;
// readiness of op on this stage: 1 when its input is there (a message arrived, or by now in the
// simulation); the policy asks in its order and stops at the first 1
typedef int (*TdpipeReady)(void* ctx, const Op* op);
void schedule_tdpipe_next(const Schedule* sch, int s, const TdpipeCursor* c, TdpipeNext* next);
int schedule_tdpipe_pick(const TdpipeCursor* c, const TdpipeNext* next, TdpipeReady ready, void* ctx, Op* op);
void schedule_tdpipe_advance(TdpipeCursor* c, const Op* op);

// staleness of a micro-batch op = step - version (0 for OP_U); the max over all ops
int schedule_op_staleness(const Op* op);
int schedule_max_staleness(const Schedule* sch);
// stage s: max micro-batches whose forward is done and whose weight gradient is not (activation
// slots), and max distinct weight versions held: the current one, those in-flight micro-batches
// used, and older ones a later forward still needs (stash slots + 1)
void schedule_stage_stats(const Schedule* sch, int s, int* max_inflight, int* max_versions);
// stage s: max steps whose gradient accumulation has begun and whose update has not run
// (gradient-cache slots)
int schedule_stage_grad_slots(const Schedule* sch, int s);
// gradient-cache slots a stage needs for a schedule of this shape: 1 for the synchronous ones (a
// step's accumulation ends at its update), 2 + (W - 1) / M for tdpipe with W > 0 (below)
int schedule_shape_grad_slots(const ScheduleShape* shape);
// the steps after which a schedule of this shape holds no more (schedule_stage_limits): 2 + ceil(W / M)
// for tdpipe with W > 0, whose stashes and ring grow with the schedule's length up to their bound; 2 else
int schedule_shape_steady_steps(const ScheduleShape* shape);
// what stage s must hold to run sch in any order its dependencies allow: activation slots,
// weight stashes (versions kept besides the current one) and gradient-cache slots. Synchronous
// schedules run their lists as printed (the stats above); tdpipe runs event-driven, so its bounds
// come from the window (W > 0): (P - s) + W slots (the last stage 2: its backward is always ready after
// its forward, and the next input arrives meanwhile; 1 at P = 1), ceil(W / M) stashes, 1 or 2 + (W - 1) / M ring slots,
// each at most what the schedule's length can use (n_steps * M slots, n_steps - 1 stashes, n_steps ring slots).
void schedule_stage_limits(const Schedule* sch, int s, int* slots, int* stashes, int* grad_slots);

// Checks every (t, m) has exactly one F and one B (or one BI and one BW, not mixed) per stage,
// one U per step per stage in step order, versions consistent with the U positions, and that
// the lists can run to the end honouring the dependencies (else names the stuck stages).
int schedule_validate(const Schedule* sch, char* err, size_t errlen);

// ---- dependency tracking -------------------------------------------------------------------
// On virtual stage q = op.chunk * P + s (q = s but for interleaved), of Q = P * chunks:
// F(t,m)@q needs F(t,m)@q-1 and the stage at weight version >= op.version (an older one is a
// stash); B/BI(t,m)@q needs its own F and B/BI(t,m)@q+1 (at the last virtual stage only its own F); BW
// needs its own BI; U(t)@s needs U(t-1)@s and every B/BW of step t on every stage (global norm, tied embedding exchange).
// Steps are absolute, as in the schedule's ops; the arrays below count from first_step.
//
// A dependency across stages costs `latency`, or, with a ScheduleComm, its message's time on the
// link it travels: a message leaves when its op ends (a B's input gradient, with b_send, part-way
// through it) and its link is free (each directed pair of stages is one link, carrying its messages
// in the order they were sent), so communication overlaps compute, and the op that needs it waits
// for its arrival. The data-parallel average of a step's
// gradient (comm->dp) runs beside the stage's last backward of the step (dp_overlap = 1: it ends
// no earlier than that backward's start + dp) or after it (0), and U waits for it.
typedef struct {
    const double* msg_f; // (P*chunks - 1) time the activation from virtual stage q to q+1 holds its link; NULL: latency
    const double* msg_b; // (P*chunks - 1) time the input gradient from q+1 to q holds its link; NULL: latency
    const double* dp;    // (P) each stage's data-parallel gradient average per step; NULL: none
    int dp_overlap;      // 1: the average streams beside the step's last backward; 0: it starts after it
    const double* b_send; // (P*chunks) share of a full backward B's time after which its input gradient
                          // leaves (the executor sends it between the input- and the weight-gradient
                          // halves: BI's share of B); NULL: at B's end (Megatron-LM's backward_step)
} ScheduleComm;

typedef struct {
    int P, M, first_step, n_steps, chunks;
    double* f_end;     // (P*chunks, n_steps*M) end time of F, < 0 while not done
    double* b_end;     // (P*chunks, n_steps*M) when B or BI sent its input gradient upstream (BI's end, B's
                       // end or, with comm->b_send, its share of B), < 0 while not
    double* w_end;     // (P*chunks, n_steps*M) end of B or BW (weight gradient accumulated), < 0 while not
    int* grads_left;   // (n_steps, P) B/BW ops of the step not done yet on each stage
    double* grads_end; // (n_steps, P) latest B/BW end of the step on each stage (with comm->dp: its average's end)
    int* updates;      // (P) U ops done on each stage (its weight version is first_step + updates)
    const ScheduleComm* comm; // NULL: every dependency across stages costs the latency passed to ready
    double* f_arrive;  // (P*chunks, n_steps*M) with comm->msg_f: when F's activation reaches q+1
    double* b_arrive;  // (P*chunks, n_steps*M) with comm->msg_b: when B/BI's gradient reaches q-1
    double* link_free; // (P, P) when the link from stage a to stage b is next free
} ScheduleProgress;

// tracks sch's ops (its shape: P, M, chunks, first_step, n_steps); comm may be NULL, else it must
// outlive p
void schedule_progress_init(ScheduleProgress* p, const Schedule* sch);
void schedule_progress_init_comm(ScheduleProgress* p, const Schedule* sch, const ScheduleComm* comm);
void schedule_progress_free(ScheduleProgress* p);
// 1 when op (on stage s) may start: *t_ready = when its last dependency finished, plus latency
// for a dependency on another stage (or its message's arrival). 0 when not: why says what it waits
// for (or that it is already done / out of range, which can never become ready).
int schedule_progress_ready(const ScheduleProgress* p, int s, const Op* op, double latency, double* t_ready,
                            char* why, size_t whylen);
void schedule_progress_done(ScheduleProgress* p, int s, const Op* op, double t_end);
// the same, for an op that ran from t_start (the overlapped data-parallel average needs it)
void schedule_progress_done_span(ScheduleProgress* p, int s, const Op* op, double t_start, double t_end);
// op starts at t_start and will end at t_end: what it sends before its end (B's input gradient with
// comm->b_send) is on its way from the start's point of view; done_span then sends nothing twice.
// A run that learns of an op only at its end (schedule_replay_comm) need not call it. Returns 1 when
// it sent something (a stage waiting for it may wake before op ends), else 0.
int schedule_progress_began(ScheduleProgress* p, int s, const Op* op, double t_start, double t_end);

// tdpipe's event-driven policy as a discrete-event run with op times dur(ctx, s, op) and latency
// on every dependency across stages (or comm's message times; comm may be NULL): fills the
// schedule's lists in the order the ops ran (sch must come from schedule_build of the same shape)
// and, when not NULL, start / end (P)[n_ops[s]].
typedef double (*ScheduleOpTime)(void* ctx, int s, const Op* op);
int schedule_run_tdpipe(Schedule* sch, ScheduleOpTime dur, void* ctx, double latency, double* const* start,
                        double* const* end, char* err, size_t errlen);
int schedule_run_tdpipe_comm(Schedule* sch, ScheduleOpTime dur, void* ctx, double latency, const ScheduleComm* comm,
                             double* const* start, double* const* end, char* err, size_t errlen);

// Runs the lists in order, each op starting when its stage is free and its dependencies are done
// (the earliest such time). dur (P)[n_ops[s]]: durations, or NULL for all 1. start, end
// (P)[n_ops[s]]: outputs, or NULL. Returns 0, or -1 naming each stuck stage, its op and what it
// waits for. The _comm form takes message times (comm may be NULL).
int schedule_replay(const Schedule* sch, const double* const* dur, double latency, double* const* start,
                    double* const* end, char* err, size_t errlen);
int schedule_replay_comm(const Schedule* sch, const double* const* dur, double latency, const ScheduleComm* comm,
                         double* const* start, double* const* end, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
