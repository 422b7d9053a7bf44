// The executor: one stage's ops of a schedule (see executor.h). Each op says only what happens to
// the micro-batch (receive, compute with the right weight version, send, accumulate, update);
// where its bytes live is the stage's business (stage.h), how they travel the link's (comm.h).
//
// How a step's gradient becomes an update without a blocking call that spans the pipeline:
//   post(t), after the stage's last backward of step t: average gradient slot k over the D replicas
//     (only among this stage's replicas, which all post in step order: blocking fp32, or the bucketed
//     sync of tdpipe/dp_sync.h, whose buckets left during that backward as it completed their units,
//     so post waits only for what backward did not hide), exchange the tied embedding's shares, and
//     start a nonblocking sum over the pipeline of [loss, per-unit sums of squares];
//   U(t): wait for that sum (it needs every stage's post(t), which every schedule puts before any
//     U(t)), clip, apply AdamW, zero the slot for a later step.
// A stage blocked in U(t) waits only for other stages' backwards of step t, never for their U(t):
// TD-Pipe's stages may sit at different steps without deadlock.
//
// The tied embedding (wte is the first stage's token embedding and the last stage's LM head): each
// end accumulates a share of its gradient, and both apply first share + last share:
//              post(t)                                              U(t)
//   P = 1      wte's gradient += the head's share                    -
//   first      send its share, receive the last's, wait, sum         -
//   last       send its share, post the receive of the first's       wait, sum
// The first stage sums at post because the norm needs the summed gradient; the last stage's share is
// under way by then (its post(t) needs nothing from the first stage).
//
// Synchronous schedules (and tdpipe with W = 0, which is 1f1b) run their lists in order, receiving
// when an op needs its message. tdpipe with W > 0 runs event-driven: schedule_tdpipe_pick chooses
// each op from what has arrived, receives are posted ahead, and the stage sleeps until a message
// lands when nothing is ready. Numerics do not depend on that order: forwards and backwards each run
// in micro-batch order, and a forward's weight version is fixed by its micro-batch.
#include "executor.h"
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/fatal.h"
#include "tdpipe/gns.h"
#include "tdpipe/simulator.h"
#include "tdpipe/staleness.h"

enum { TAG_STATS = 4 }; // step statistics to world rank 0 (pipeline messages travel the link by channel)

// a stage's share of one step: compute seconds, seconds since its previous update, max staleness,
// and its replicas' average (tdpipe/dp_sync.h: DpSyncStats)
typedef struct {
    double busy, span, staleness;
    double dp_bytes, dp_wait, dp_span, dp_entropy;
} StepStats;

// what the pipeline sums at post(t): each element has one contributor (the loss the last stage, each
// unit the stage that holds it), so the sum is exact whatever order MPI adds in
typedef struct {
    double loss;     // the step's mean loss (last stage)
    double units[];  // (L + 2) per-unit sums of squares of the gradient (stage.h: stage_grad_unit_sumsq),
                     // then the gradient noise scale's (L + 3) small-batch and (L + 3) large-batch terms
} PipeSums;
// doubles in a PipeSums for L layers
static int pipe_sums_n(int L) { return 1 + (L + 2) + 2 * (L + 3); }
static double* pipe_sums_gns_small(PipeSums* p, int L) { return p->units + (L + 2); }
static double* pipe_sums_gns_big(PipeSums* p, int L) { return p->units + (L + 2) + (L + 3); }

typedef struct {
    int grad_ops_left;    // backwards (B or BW) of the step still to run on this stage
    int posted, updated;
    double loss_sum;      // last stage: sum of its micro-batch losses
    int max_stale;
    PipeSums* mine;       // this stage's contribution
    PipeSums* sums;       // summed over the pipeline
    CommRequest pipe_req;
    CommRequest tied_send, tied_recv;
    float loss, norm, lr;
    int refused, skipped; // the guard refused this step's update / a step after that in the chunk
    double b_simple;      // the gradient noise scale's estimate after this step (NaN: none)
    StepStats stats;
    StepStats* peer;      // world rank 0: (P) every stage's
    CommRequest* peer_req;// world rank 0: (P) their receives
    CommRequest stats_send;
} StepState;

// an activation slot: one micro-batch in flight on this stage, from its forward to its backward
typedef struct {
    int version, ahead;   // the weights its forward used: a version, extrapolated ahead (weight prediction) or not
    int needs_weights;    // until the backward's weight half has run (B whole, or zero-bubble's BW): DC-ASGD and
                          // a forward run again under --recompute read them there too
    CommRequest out_send; // its output, on its way downstream
    CommRequest dx_send;  // the gradient of its input, on its way upstream
} Slot;

// a message this stage awaits: the next forward's input, or the next backward's output gradient
typedef struct {
    int g; // for micro-batch g of the schedule; -1 none yet
    CommRequest req;
    double awaited, arrived; // when this stage began waiting for it, when a wait saw it in (0: not yet; the trace's)
} Incoming;

typedef struct {
    Executor* ex;
    const Schedule* sch;
    Stage* st;
    int s, P, D, first, last; // this stage, stages, replicas; 1 on the first / last stage
    int report;           // 1 on world rank 0: it gathers every stage's StepStats and reports the steps
    int split;            // 1 under zbh1: backwards run as BI and BW apart, a gacts buffer per slot
    int n_slots;          // activation slots (schedule_stage_limits)
    Slot* slots;          // (n_slots)
    int* free_slots;      // (n_slots) a stack
    int n_free;
    int* slot_of;         // (n_steps * M) activation slot of each micro-batch, -1 when none
    Incoming act, grad;   // the next forward's input (not on the first stage); the next backward's output gradient (not on the last)
    StepState* steps;     // (n_steps)
    int next_f;           // micro-batches forwarded (the next forward's g)
    int next_post;        // the next step to post (steps post in order)
    int next_report;
    double busy, last_u;  // compute seconds since this stage's last update; when that ended
    int halted;           // the guard refused an update: the rest of the chunk computes nothing
    DataLoaderState* data_at; // (n_steps) the loader's position before each step's first micro-batch (ranks with data)
    double* rep_bubble;   // world rank 0: (P) the report's per-stage figures
    int* rep_stale;       // world rank 0: (P)
    double* rep_dp_bytes; // world rank 0: (P) per stage, bytes its replicas' average sent and received
    double* rep_dp_wait;  // world rank 0: (P) seconds the stage waited for that average
    double* rep_dp_span;  // world rank 0: (P) seconds from its first bucket posted to its last done
    int cap_slots, cap_steps, cap_mb, cap_P; // what the buffers above hold (they outlive a run)
} Run;

static StepState* step_of(const Run* r, int t) { return &r->steps[t - r->sch->first_step]; }
static int mb_of(const Run* r, const Op* op) { return (op->step - r->sch->first_step) * r->sch->M + op->mb; }

static void times_add(OpTimes* t, double d) {
    t->sum += d;
    t->sum2 += d * d;
    t->n++;
}

// where an op's time went on this stage, seconds on the monotonic clock the ranks of a host share: the
// trace keeps it beside the op's whole span (which includes waiting for its input), and the simulator's
// replay reads each link's message time from when messages left and arrived
typedef struct {
    double start, end;       // its compute
    double awaited, arrived; // its input message: as Incoming's (0, 0: in before any wait, or none)
    double sent;             // its own message posted to a neighbour; 0: none
} OpMarks;

// the op's compute, begun at t0, has run (a device's stream drained): its time counts as busy,
// stretched first by --jitter: measured x (1 + Y), Y of mean 1 and CV 2 beta, so the total has CV beta
static OpMarks computed(Run* r, const Op* op, double t0) {
    Executor* ex = r->ex;
    stage_finish(r->st);
    if (ex->jitter > 0) sleep_seconds((now_seconds() - t0) * simulator_jitter(ex->seed, r->s, op, 2.0 * ex->jitter));
    double end = now_seconds();
    r->busy += end - t0;
    times_add(op->kind == OP_F ? &ex->stats.f : &ex->stats.b, end - t0);
    return (OpMarks){.start = t0, .end = end};
}

// ---- messages --------------------------------------------------------------------------------------

static void link_send(Run* r, const void* buf, size_t bytes, int peer, CommRequest* req) {
    comm_link_isend(r->ex->comm, r->ex->link, COMM_LINK_NEIGHBOURS, buf, bytes, peer, req);
}

// the activation slot of micro-batch g, taken when its forward (or the receive of its input) comes;
// the slot's previous messages must have left before its buffers are reused
static int slot_for(Run* r, int g) {
    if (r->slot_of[g] >= 0) return r->slot_of[g];
    if (r->n_free == 0) td_fatal("stage %d: no free activation slot (%d allocated)", r->s, r->n_slots);
    int slot = r->free_slots[--r->n_free];
    comm_wait(r->ex->comm, &r->slots[slot].out_send);
    comm_wait(r->ex->comm, &r->slots[slot].dx_send);
    r->slot_of[g] = slot;
    return slot;
}

// the activation-gradient buffer of slot's backward: its own for zero-bubble's split passes
static int gacts_of(const Run* r, int slot) { return r->split ? slot : 0; }

// the receive of micro-batch g's input (from stage s - 1), posted once
static void expect_input(Run* r, int g) {
    if (r->act.g == g) return;
    int slot = slot_for(r, g);
    comm_link_irecv(r->ex->comm, r->ex->link, COMM_LINK_NEIGHBOURS, stage_input_buf(r->st, slot), stage_msg_bytes(r->st, slot), r->s - 1,
                    &r->act.req);
    Op f = schedule_mb_op(r->sch, r->s, OP_F, g);
    snprintf(r->act.req.what, sizeof(r->act.req.what), "the input of step %d micro-batch %d from stage %d", f.step + 1, f.mb, r->s - 1);
    r->act.g = g;
    r->act.awaited = r->act.arrived = 0.0;
}

// the receive of the gradient of micro-batch g's output (from stage s + 1), posted once
static void expect_grad(Run* r, int g) {
    if (r->grad.g == g) return;
    int slot = r->slot_of[g];
    comm_link_irecv(r->ex->comm, r->ex->link, COMM_LINK_NEIGHBOURS, stage_grad_buf(r->st, gacts_of(r, slot)), stage_msg_bytes(r->st, slot),
                    r->s + 1, &r->grad.req);
    Op b = schedule_mb_op(r->sch, r->s, OP_B, g);
    snprintf(r->grad.req.what, sizeof(r->grad.req.what), "the output gradient of step %d micro-batch %d from stage %d", b.step + 1, b.mb, r->s + 1);
    r->grad.g = g;
    r->grad.awaited = r->grad.arrived = 0.0;
}

// the trace's marks of an input: the first wait that included it began at t; a wait saw it in at t
static void wait_began(Incoming* in, double t) {
    if (in->awaited == 0.0) in->awaited = t;
}
static void seen_in(Incoming* in, double t) {
    if (in->arrived == 0.0) in->arrived = t;
}

// waits for a posted receive, marking it (a message already in leaves the marks as they are)
static void await_incoming(Run* r, Incoming* in) {
    if (comm_test(r->ex->comm, &in->req)) return;
    wait_began(in, now_seconds());
    comm_wait(r->ex->comm, &in->req);
    seen_in(in, now_seconds());
}

// the op's marks of the message it waited for
static void marks_of(OpMarks* span, const Incoming* in) {
    span->awaited = in->awaited;
    span->arrived = in->arrived;
}

// ---- weight versions ---------------------------------------------------------------------------------

// how many updates ahead of its version op's micro-batch extrapolates its weights (weight prediction)
static int ahead_of(const Run* r, const Op* op) { return r->ex->comp ? staleness_ahead(r->ex->comp, op) : 0; }

// 1 while the weights (v, ahead) are still needed: an in-flight micro-batch used them and its backward
// has not read them yet (Slot.needs_weights), or a forward still to come in this schedule will use them
static int weights_needed(const Run* r, int v, int ahead) {
    int nM = r->sch->n_steps * r->sch->M;
    for (int g = r->next_f; g < nM; g++) { // forwards run in order: their versions never decrease
        Op f = schedule_mb_op(r->sch, r->s, OP_F, g);
        if (f.version > v) break;
        if (f.version == v && ahead_of(r, &f) == ahead) return 1;
    }
    for (int i = 0; i < r->n_slots; i++)
        if (r->slots[i].needs_weights && r->slots[i].version == v && r->slots[i].ahead == ahead) return 1;
    return 0;
}

// the backward of slot has read its weights: a stash nobody needs any more is dropped
static void weights_done(Run* r, int slot) {
    Slot* x = &r->slots[slot];
    x->needs_weights = 0;
    if ((x->version != r->st->version || x->ahead) && !weights_needed(r, x->version, x->ahead)) stage_release_stash(r->st, x->version, x->ahead);
}

// the gradient noise scale's large batch: the step's tokens over every replica (D M B T)
static double big_batch_tokens(const Run* r) { return (double)r->st->B * r->st->T * r->sch->M * r->D; }

// weight prediction: the current version extrapolated for every forward still to come that will run
// on it, made as soon as the version is current (at the chunk's start, after each update); each
// holds as many learning rates as it runs ahead, as the updates will apply them
static void predict_weights(Run* r) {
    Stage* st = r->st;
    const OptimConfig* o = &r->ex->optim;
    if (!r->ex->comp || !(r->ex->comp->methods & STALE_PREDICT) || st->version == 0) return;
    int nM = r->sch->n_steps * r->sch->M;
    for (int g = r->next_f; g < nM; g++) {
        Op f = schedule_mb_op(r->sch, r->s, OP_F, g);
        if (f.version > st->version) break;
        int ahead = ahead_of(r, &f);
        if (f.version < st->version || !ahead || stage_has_weights(st, f.version, ahead)) continue;
        float lr_sum = 0.0f;
        for (int j = f.version; j < f.version + ahead; j++) // the rates those updates will apply (LR scaling's too)
            lr_sum += adamw_lr_schedule(j, o->total_steps, o->warmup, o->adamw.lr, o->final_lr_frac) * (float)staleness_lr_factor(r->ex->comp, r->sch, r->s, j);
        if (r->ex->gns && r->ex->lr_gns) // --lr-gns's factor, as the noise scale measures it now (the same on every stage)
            lr_sum *= (float)gns_lr_factor_now(&r->ex->gns_state, big_batch_tokens(r));
        stage_predict(st, ahead, &o->adamw, lr_sum);
    }
}

// ---- the ops ---------------------------------------------------------------------------------------

static void post_ready(Run* r);
static int step_compensated(const Run* r, StaleMethod m, int t);

// F: the micro-batch's tokens (first and last stage) and its input (later stages) in; the stage's
// layers with the weights of op->version (a stash when the window let an update happen since);
// the output on its way downstream
static OpMarks op_forward(Run* r, const Op* op) {
    Stage* st = r->st;
    int g = mb_of(r, op);
    if (g != r->next_f) td_fatal("stage %d: forward of micro-batch %d out of order (next is %d)", r->s, g, r->next_f);
    int slot = slot_for(r, g);
    if (r->ex->data && op->mb == 0) dataloader_get_state(r->ex->data, &r->data_at[op->step - r->sch->first_step]);
    if (r->ex->data && dataloader_next(r->ex->data, stage_inputs(st, slot), stage_targets(st, slot)))
        td_fatal("training data: %s", r->ex->data->err);
    if (!r->first) {
        expect_input(r, g);
        await_incoming(r, &r->act);
    }
    r->slots[slot].version = op->version;
    r->slots[slot].ahead = ahead_of(r, op);
    r->slots[slot].needs_weights = 1;
    r->next_f++;
    double t0 = now_seconds();
    float loss = r->halted ? 0.0f : stage_forward(st, op, slot, r->last);
    OpMarks span = computed(r, op, t0);
    StepState* ss = step_of(r, op->step);
    if (r->last) ss->loss_sum += loss;
    int stale = schedule_op_staleness(op);
    if (stale > ss->max_stale) ss->max_stale = stale;
    if (!r->first) marks_of(&span, &r->act);
    if (!r->last) { // (a device staging through host memory downloads the output here: the stage's work, as in backward)
        link_send(r, stage_output_buf(st, slot), stage_msg_bytes(st, slot), r->s + 1, &r->slots[slot].out_send);
        span.sent = now_seconds();
        r->busy += span.sent - span.end;
        span.end = span.sent;
    }
    r->ex->stats.forwards++;
    return span;
}

// the micro-batch is done on this stage: its slot is free; the step's last one posts the step
static void grad_done(Run* r, const Op* op, int slot) {
    r->ex->stats.backwards++;
    r->slot_of[mb_of(r, op)] = -1;
    r->free_slots[r->n_free++] = slot;
    step_of(r, op->step)->grad_ops_left--;
    post_ready(r);
}

// 1 when op completes its step's gradient here and the replicas' average may start inside it, bucket
// by bucket as backward completes units: the host sync where the gradient is in host memory (a
// device's host copy is made after the step), or the device's own sync; not on --inject-nan's step
// (post writes the fault first), not under DC-ASGD (post corrects the whole gradient first), the drift
// monitor's step (post keeps the local gradient for its fp32 comparison) or its exact pass, and not
// under --gns (the weight half runs alone, to square the micro-batch's own gradient, and tells no unit done)
static int sync_overlaps(const Run* r, const Op* op) {
    const Executor* ex = r->ex;
    int can = ex->sync ? stage_grads_readable_during_backward(r->st) : ex->device_sync.begin != NULL;
    return can && r->D > 1 && !ex->gradient_only && !ex->gns && op->kind != OP_BI &&
           step_of(r, op->step)->grad_ops_left == 1 &&
           op->step != ex->drift_step && ex->inject_nan != op->step + 1 && !step_compensated(r, STALE_DCASGD, op->step);
}

// the input-gradient half of backward, with the weights the forward used; the gradient of the input
// on its way upstream (not off the first stage) before the weight-gradient half, so the stage upstream
// goes on sooner. Returns when it left (0: nothing sent)
static double backward_input(Run* r, const Op* op, int slot, int ga) {
    Stage* st = r->st;
    if (!r->halted) stage_backward_input(st, op, slot, ga, 1.0f / ((float)st->B * st->T * r->sch->M));
    if (r->first) return 0.0;
    link_send(r, stage_dx_in_buf(st, ga, slot), stage_msg_bytes(st, slot), r->s - 1, &r->slots[slot].dx_send);
    return now_seconds();
}

// the weight-gradient half: accumulated into the step's gradient slot (DC-ASGD reads the weights here
// too); where the step's last one lets it, the replicas' average starts inside it, bucket by bucket
static void backward_weight(Run* r, const Op* op, int slot, int ga) {
    if (r->halted) return;
    Stage* st = r->st;
    const Executor* ex = r->ex;
    GPT2UnitHook hook = ex->sync ? (GPT2UnitHook){dp_sync_unit_done, ex->sync, dp_sync_between}
                                 : (GPT2UnitHook){ex->device_sync.unit_done, ex->device_sync.ctx, NULL};
    int overlap = sync_overlaps(r, op), k = stage_grad_slot(st, op->step);
    if (overlap && ex->sync) dp_sync_begin(ex->sync, k, op->step);
    else if (overlap) ex->device_sync.begin(ex->device_sync.ctx, st, k, op->step);
    double* gns_small = ex->gns ? pipe_sums_gns_small(step_of(r, op->step)->mine, st->cfg.num_layers) : NULL;
    stage_backward_weight(st, op, slot, ga, gns_small, overlap ? &hook : NULL);
}

// B: the gradient of the output in (off the last stage), then both halves of backward. Zero-bubble
// splits them: BI the input half, BW the weight half, later. The slot's weights are done with after
// the weight half, which may read them again (DC-ASGD's w_used, a forward run again under --recompute);
// the schedule's stash count holds a version until then too (schedule_stage_stats)
static OpMarks op_backward(Run* r, const Op* op) {
    int g = mb_of(r, op), slot = r->slot_of[g];
    if (slot < 0) td_fatal("stage %d: backward of step %d micro-batch %d before its forward", r->s, op->step, op->mb);
    int ga = gacts_of(r, slot), input_half = op->kind != OP_BW, weight_half = op->kind != OP_BI;
    if (input_half && !r->last) {
        expect_grad(r, g);
        await_incoming(r, &r->grad);
    }
    double t0 = now_seconds(), sent = 0.0;
    if (input_half) sent = backward_input(r, op, slot, ga);
    if (weight_half) backward_weight(r, op, slot, ga);
    if (weight_half) weights_done(r, slot);
    OpMarks span = computed(r, op, t0);
    if (input_half && !r->last) marks_of(&span, &r->grad);
    span.sent = sent;
    if (op->kind == OP_B && sent > 0 && span.end > t0) times_add(&r->ex->stats.b_send, (sent - t0) / (span.end - t0));
    if (weight_half) grad_done(r, op, slot);
    return span;
}

// the tied embedding's exchange (the table at the top): this end's share on its way, the other's awaited
static void tied_start(Run* r, int t) {
    if (r->P == 1 || !(r->first || r->last)) return;
    Stage* st = r->st;
    StepState* ss = step_of(r, t);
    int k = stage_grad_slot(st, t), other = r->first ? r->P - 1 : 0;
    size_t bytes = st->sizes[0] * sizeof(float);
    const CommLink* link = r->ex->tied_link ? r->ex->tied_link : r->ex->link;
    comm_link_isend(r->ex->comm, link, COMM_LINK_TIED, stage_tied_share(st, k), bytes, other, &ss->tied_send);
    comm_link_irecv(r->ex->comm, link, COMM_LINK_TIED, stage_tied_other(st, k), bytes, other, &ss->tied_recv);
    snprintf(ss->tied_recv.what, sizeof(ss->tied_recv.what), "the tied embedding's gradient share of step %d from stage %d", t + 1, other);
}

// both shares here: wte's gradient = first share + last share (one process: its two shares); returns
// its sumsq where the sum's pass computed it (stage_tie_local)
static double tied_finish(Run* r, int t) {
    Stage* st = r->st;
    StepState* ss = step_of(r, t);
    int k = stage_grad_slot(st, t);
    if (r->P == 1) return stage_tie_local(st, k);
    comm_wait(r->ex->comm, &ss->tied_recv);
    comm_wait(r->ex->comm, &ss->tied_send); // this end's share is summed in place: once it has left
    return stage_tied_sum(st, k);
}

// 1 when some micro-batch of step t is compensated by method m
static int step_compensated(const Run* r, StaleMethod m, int t) {
    if (!r->ex->comp) return 0;
    for (int i = 0; i < r->sch->M; i++) {
        Op f = schedule_mb_op(r->sch, r->s, OP_F, (t - r->sch->first_step) * r->sch->M + i);
        if (staleness_applies(r->ex->comp, m, &f)) return 1;
    }
    return 0;
}

// with an int8 sync on the drift monitor's step: the local gradient's fp32 average (grads: num_params,
// head: the LM head's share or NULL), to compare with what the int8 sync makes of it (executor.h: drift_sync)
static void int8_drift_reference(Run* r, const float* grads, const float* head) {
    Executor* ex = r->ex;
    size_t n = r->st->num_params, vc = head ? r->st->sizes[0] : 0;
    if (!ex->drift_fp32) ex->drift_fp32 = (float*)malloc_check((n + vc) * sizeof(float));
    memcpy(ex->drift_fp32, grads, n * sizeof(float));
    if (vc) memcpy(ex->drift_fp32 + n, head, vc * sizeof(float));
    comm_dp_average(ex->comm, ex->drift_fp32, n + vc);
}
// ... and the int8 sync's average of it (grads: num_params, head: (Vp*C) or NULL) against that, per unit
// into drift_sync (L + 2; the head's share in unit 0)
static void int8_drift_compare(Run* r, const float* grads, const float* head) {
    Executor* ex = r->ex;
    int L = r->st->cfg.num_layers;
    if (!ex->drift_sync) ex->drift_sync = (DriftUnit*)malloc_check((L + 2) * sizeof(DriftUnit));
    drift_compare(r->st, grads, ex->drift_fp32, ex->drift_sync);
    if (head) drift_compare_add(head, ex->drift_fp32 + r->st->num_params, r->st->sizes[0], &ex->drift_sync[0]);
    ex->drift_synced = 1;
}

// the replicas' average of slot k at post(t): the sync (begun inside the last backward, or now; or
// the backend's own) or the blocking fp32 average; the bytes and the waiting into the step's figures
static void replicas_average(Run* r, int t, int k) {
    Executor* ex = r->ex;
    StepStats* s = &step_of(r, t)->stats;
    if ((!ex->sync && !ex->device_sync.end) || ex->gradient_only) { // (the drift monitor's exact pass is synchronous fp32 by definition)
        double t0 = now_seconds();
        ex->dp.average(ex->dp.ctx, r->st, k);
        s->dp_wait = s->dp_span = now_seconds() - t0;
        s->dp_bytes = comm_dp_average_bytes(ex->comm, r->st->num_params) + (r->last ? comm_dp_average_bytes(ex->comm, r->st->sizes[0]) : 0.0);
        s->dp_entropy = NAN;
        return;
    }
    DpSync* ds = ex->sync;
    int drift = t == ex->drift_step && (ds ? ds->cfg.quant : ex->device_sync.quant) == GRAD_QUANT_INT8;
    float *grads = NULL, *head = NULL; // the local gradient, then its average, in host memory (the drift comparison)
    DpSyncStats d;
    if (ds) {
        if (!ds->active) dp_sync_begin(ds, k, t);
        if (drift) int8_drift_reference(r, ds->grads, ds->head);
        d = dp_sync_finish(ds);
        grads = ds->grads, head = ds->head;
    } else { // on the device: host copies of the gradient before and after, for the drift monitor only
        if (drift) grads = stage_host_grads(r->st, k, &head), int8_drift_reference(r, grads, head);
        d = ex->device_sync.end(ex->device_sync.ctx, r->st, k, t);
        if (drift) grads = stage_host_grads(r->st, k, &head);
    }
    if (drift) int8_drift_compare(r, grads, head);
    if (d.nonfinite && !r->halted)
        fprintf(stderr, "stage %d replica %d: %zu gradient values of step %d are not finite: their int8 blocks are not quantized (NaN), so the "
                        "average is NaN there and the guard refuses the step\n",
                r->s, ex->comm->replica, d.nonfinite, t + 1);
    else if (d.nonfinite_avg && !r->halted) // (its own gradient was finite: another replica's was not, or the sum overflowed)
        fprintf(stderr, "stage %d replica %d: %zu values of step %d's average, in the blocks it owns, are not finite: the guard refuses the step\n",
                r->s, ex->comm->replica, d.nonfinite_avg, t + 1);
    *s = (StepStats){.dp_bytes = d.bytes, .dp_wait = d.wait, .dp_span = d.span, .dp_entropy = d.entropy};
}

// post(t): the stage's gradient of step t is complete
static void post_step(Run* r, int t) {
    Executor* ex = r->ex;
    Stage* st = r->st;
    StepState* ss = step_of(r, t);
    int k = stage_grad_slot(st, t), L = st->cfg.num_layers;
    if (step_compensated(r, STALE_DCASGD, t) && !r->halted) stage_dc_correct(st, k); // the weights now current are those U(t) applies to
    if (ex->inject_nan == t + 1 && r->first) { // (tests; STEP is 1-based, as the step lines are) a NaN in stage 0's gradient,
        stage_host_grads(st, k, NULL)[0] = NAN; // seen by every rank through the average and the norm's sum
        stage_host_grads_done(st, k);
        ex->inject_nan = 0;
    }
    if (r->D > 1) replicas_average(r, t, k);
    double* small = pipe_sums_gns_small(ss->mine, L); // summed over the step's backwards already
    if (ex->gns) { // the large-batch term on the replicas' average, the small-batch term averaged over them
        stage_gns_units(st, k, pipe_sums_gns_big(ss->mine, L));
        if (r->D > 1) comm_dp_average_double(ex->comm, small, L + 3);
    }
    tied_start(r, t);
    double wte_sq = r->first ? tied_finish(r, t) : STAGE_SUMSQ_UNKNOWN; // the norm needs wte's summed gradient
    ss->mine->loss = 0.0;
    memset(ss->mine->units, 0, (L + 2) * sizeof(double));
    stage_grad_unit_sumsq(st, k, wte_sq, ss->mine->units);
    if (r->last) { // the step's loss, averaged over the replicas here: U(t) has no collective among replicas
        ss->mine->loss = ss->loss_sum / r->sch->M;
        if (r->D > 1) comm_dp_average_double(ex->comm, &ss->mine->loss, 1);
    }
    comm_pipe_sum_start(ex->comm, (const double*)ss->mine, (double*)ss->sums, pipe_sums_n(L), &ss->pipe_req);
    ss->posted = 1;
}

// Posts every step that is ready, in step order (the replicas' collectives and the pipeline sums
// match by order): its backwards have all run, and under DC-ASGD the weights U(t) will apply to are
// current (U(t - 1) has run here; with a whole step stale its backwards may finish before that).
static void post_ready(Run* r) {
    while (r->next_post < r->sch->n_steps) {
        int t = r->sch->first_step + r->next_post;
        if (step_of(r, t)->grad_ops_left > 0) return;
        if (step_compensated(r, STALE_DCASGD, t) && r->st->version < t && !r->halted) return;
        post_step(r, t);
        r->next_post++;
    }
}

// the gradient noise scale after step t (tdpipe/gns.h) from its per-unit sums (folded in unit order:
// the same figures on every rank): small batch B T tokens (one micro-batch), large batch D M B T (the
// step); returns --lr-gns's learning-rate factor (1 without it)
static double noise_scale_step(Run* r, StepState* ss) {
    int L = r->st->cfg.num_layers, M = r->sch->M;
    double b_small = (double)r->st->B * r->st->T, b_big = big_batch_tokens(r), small = 0.0, big = 0.0, factor = 1.0;
    if (b_big <= b_small) return 1.0; // one micro-batch per step over all replicas: nothing to compare
    for (int u = 0; u < L + 3; u++) {
        small += pipe_sums_gns_small(ss->sums, L)[u];
        big += pipe_sums_gns_big(ss->sums, L)[u];
    }
    small *= M; // each micro-batch's gradient carries 1 / M of the step's mean: its own mean's |g|^2 is M^2 times
    ss->b_simple = gns_update(&r->ex->gns_state, small, big, b_small, b_big, &factor);
    return r->ex->lr_gns ? factor : 1.0;
}

// the guard's verdict on a step's loss and norm (executor.h), with its reason in halt_reason
static int guard_refuses(Executor* ex, float loss, float norm) {
    if (!isfinite(loss) || !isfinite(norm)) {
        snprintf(ex->halt_reason, sizeof(ex->halt_reason), "%s is not finite (loss %g, norm %g)", isfinite(loss) ? "the gradient norm" : "the loss",
                 loss, norm);
        return 1;
    }
    const LossWindow* w = &ex->losses;
    if (ex->spike_z <= 0 || w->n < GUARD_MIN) return 0;
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < w->n; i++) mean += w->loss[i] / w->n;
    for (int i = 0; i < w->n; i++) var += (w->loss[i] - mean) * (w->loss[i] - mean) / w->n;
    double z = var > 0 ? (loss - mean) / sqrt(var) : 0.0;
    if (z <= ex->spike_z) return 0;
    snprintf(ex->halt_reason, sizeof(ex->halt_reason), "a loss spike: %.4f is %.1f standard deviations above the last %d steps' mean %.4f", loss, z,
             w->n, mean);
    return 1;
}

static void guard_remember(Executor* ex, float loss) {
    LossWindow* w = &ex->losses;
    w->loss[w->next] = loss;
    w->next = (w->next + 1) % GUARD_WINDOW;
    if (w->n < GUARD_WINDOW) w->n++;
}

// the guard's verdict on step t, once its loss and norm are known: a refused step halts the chunk
// (nothing of it or later in the chunk is applied); a step after one is skipped
static void guard_step(Run* r, StepState* ss, int t) {
    Executor* ex = r->ex;
    if (ex->gradient_only) return; // (the drift monitor's exact pass keeps the gradient in slot k)
    ss->refused = !r->halted && guard_refuses(ex, ss->loss, ss->norm);
    ss->skipped = r->halted;
    if (ss->refused) {
        r->halted = 1;
        ex->halted_step = t;
    }
}

// the update, as llm.c's step ends it: the weights the update replaces kept where something still
// needs them (the drift monitor, an in-flight micro-batch's stash), then clip, AdamW, the gradient
// slot zeroed for a later step; then the guard's window and the predicted weights move on
static void apply_update(Run* r, StepState* ss, int t, int k) {
    Executor* ex = r->ex;
    Stage* st = r->st;
    const OptimConfig* o = &ex->optim;
    if (ex->gns) ss->lr *= (float)noise_scale_step(r, ss); // (after the guard: a refused step's figures are not folded in)
    if (t == ex->drift_step) { // the drift monitor's copies: what is applied, and (a stash) the weights it applies to
        if (!ex->drift_applied) ex->drift_applied = (float*)malloc_check(st->num_params * sizeof(float));
        memcpy(ex->drift_applied, stage_host_grads(st, k, NULL), st->num_params * sizeof(float));
        stage_stash_current(st);
    } else if (weights_needed(r, st->version, 0)) {
        stage_stash_current(st); // weight stashing
    }
    float scale = (o->clip > 0 && ss->norm > o->clip) ? o->clip / ss->norm : 1.0f;
    stage_update(st, k, &o->adamw, ss->lr, t + 1, scale);
    stage_zero_grad(st, k);
    guard_remember(ex, ss->loss);
    predict_weights(r);
}

// U(t): the step's pipeline-wide sums (waiting for them is bubble, not compute), the tied
// embedding's sum on the last stage, the guard, the update; the step's figures on their way to rank 0
static OpMarks op_update(Run* r, const Op* op) {
    Executor* ex = r->ex;
    Stage* st = r->st;
    int t = op->step, k = stage_grad_slot(st, t);
    StepState* ss = step_of(r, t);
    if (!ss->posted) td_fatal("stage %d: update of step %d before all its backward passes", r->s, t);
    comm_wait(ex->comm, &ss->pipe_req);
    OpMarks span = {.start = now_seconds()}; // (not counted as busy, as the simulator does not count U)
    ss->loss = (float)ss->sums->loss;
    ss->norm = stage_grad_norm_from_units(ss->sums->units, st->cfg.num_layers + 2);
    const OptimConfig* o = &ex->optim;
    ss->lr = adamw_lr_schedule(t, o->total_steps, o->warmup, o->adamw.lr, o->final_lr_frac);
    if (ex->comp) ss->lr *= (float)staleness_lr_factor(ex->comp, r->sch, r->s, t);
    ss->b_simple = NAN;
    if (r->last && !r->first) tied_finish(r, t);
    guard_step(r, ss, t);
    if (!r->halted && !ex->gradient_only) apply_update(r, ss, t, k);
    double now = now_seconds();
    ss->stats.busy = r->busy; // (its dp_ figures came at post)
    ss->stats.span = now - r->last_u;
    ss->stats.staleness = ss->max_stale;
    r->busy = 0.0;
    r->last_u = now;
    ss->updated = 1;
    post_ready(r); // a step whose post waited for this update
    if (!r->report && ex->comm->replica == 0) comm_isend(ex->comm, &ss->stats, sizeof(ss->stats), 0, TAG_STATS, &ss->stats_send);
    span.end = now;
    return span;
}

// ---- reports and the two ways of running --------------------------------------------------------------

// world rank 0: reports every step whose stats have arrived from all stages, in order
static void deliver_step_reports(Run* r, int wait_all) {
    Executor* ex = r->ex;
    while (r->next_report < r->sch->n_steps) {
        StepState* ss = &r->steps[r->next_report];
        if (!ss->updated) return;
        for (int s = 1; s < r->P; s++) {
            if (wait_all) comm_wait(ex->comm, &ss->peer_req[s]);
            else if (!comm_test(ex->comm, &ss->peer_req[s])) return;
        }
        ss->peer[0] = ss->stats;
        StepReport rep = {.step = r->sch->first_step + r->next_report + 1, .loss = ss->loss, .norm = ss->norm, .lr = ss->lr,
                          .seconds = ss->stats.span, .P = r->P, .bubble = r->rep_bubble, .staleness = r->rep_stale};
        double busy = 0.0, total = 0.0;
        for (int s = 0; s < r->P; s++) {
            const StepStats* p = &ss->peer[s];
            r->rep_bubble[s] = p->span > 0 ? 1.0 - p->busy / p->span : 0.0;
            r->rep_stale[s] = (int)p->staleness;
            if (r->rep_stale[s] > rep.staleness_max) rep.staleness_max = r->rep_stale[s];
            busy += p->busy;
            total += p->span;
        }
        rep.bubble_all = total > 0 ? 1.0 - busy / total : 0.0;
        for (int s = 0; s < r->P; s++) {
            r->rep_dp_bytes[s] = ss->peer[s].dp_bytes;
            r->rep_dp_wait[s] = ss->peer[s].dp_wait;
            r->rep_dp_span[s] = ss->peer[s].dp_span;
        }
        rep.D = r->D;
        rep.dp_bytes = r->rep_dp_bytes;
        rep.dp_wait = r->rep_dp_wait;
        rep.dp_span = r->rep_dp_span;
        rep.dp_entropy = ss->peer[0].dp_entropy;
        rep.refused = ss->refused;
        rep.b_simple = ss->b_simple;
        rep.skipped = ss->skipped;
        if (ex->on_step) ex->on_step(ex->ctx, &rep);
        r->next_report++;
    }
}

// one op, traced; world rank 0 then reports the steps that are complete
static void run_op(Run* r, const Op* op) {
    double t0 = now_seconds();
    OpMarks c = op->kind == OP_F ? op_forward(r, op) : op->kind == OP_U ? op_update(r, op) : op_backward(r, op);
    Trace* tr = r->ex->trace;
    if (tr && tr->enabled) {
        TraceEvent e = {.start = t0, .end = now_seconds(), .compute_start = c.start, .compute_end = c.end, .awaited = c.awaited,
                        .arrived = c.arrived, .sent = c.sent, .stage = r->s, .replica = r->ex->comm->replica};
        schedule_op_name(op, e.name, sizeof(e.name));
        trace_add(tr, &e);
    }
    if (r->report) deliver_step_reports(r, 0);
}

// the policy's readiness (schedule_tdpipe_pick): the message the op waits for has arrived
static int message_arrived(void* ctx, const Op* op) {
    Run* r = (Run*)ctx;
    Comm* c = r->ex->comm;
    if (op->kind == OP_U) {
        StepState* ss = step_of(r, op->step);
        return ss->posted && comm_test(c, &ss->pipe_req);
    }
    if (op->kind == OP_F) return r->first || comm_test(c, &r->act.req);
    return r->last || comm_test(c, &r->grad.req);
}

// tdpipe with W > 0: TD-Pipe's policy, live. A forward's input is awaited only once the window lets
// the forward run (its sender may need this stage's own progress first, and a receive posted on a
// GPU holds the device meanwhile), the next backward's gradient as soon as its forward has run; with
// nothing ready the stage sleeps until one of those messages, or the next update's sum, lands.
static void run_event_driven(Run* r) {
    TdpipeCursor cur = {0, 0, 0, OP_F};
    while (cur.v < r->sch->n_steps) {
        TdpipeNext next;
        schedule_tdpipe_next(r->sch, r->s, &cur, &next);
        if (next.has_f && !r->first) expect_input(r, cur.nf);
        if (next.has_b && !r->last) expect_grad(r, cur.nb);
        Op op;
        if (schedule_tdpipe_pick(&cur, &next, message_arrived, r, &op)) {
            schedule_tdpipe_advance(&cur, &op);
            run_op(r, &op);
            continue;
        }
        StepState* ss = &r->steps[cur.v];
        Incoming* in[3] = {NULL, next.has_b ? &r->grad : NULL, next.has_f ? &r->act : NULL}; // (the trace's marks)
        CommRequest* wait[3] = {ss->posted ? &ss->pipe_req : NULL, in[1] ? &in[1]->req : NULL, in[2] ? &in[2]->req : NULL};
        double from = now_seconds();
        for (int i = 1; i < 3; i++)
            if (in[i] && in[i]->req.active) wait_began(in[i], from);
        int got = comm_wait_any(r->ex->comm, wait, 3);
        double now = now_seconds();
        for (int i = 1; i < 3; i++) // (the other one may have come in during the same wait)
            if (in[i] && in[i]->awaited > 0.0 && (i == got || comm_test(r->ex->comm, &in[i]->req))) seen_in(in[i], now);
    }
}

// ---- buffers and the run -----------------------------------------------------------------------------

// grows the run's buffers to what this schedule needs; they are kept across runs, so a training step
// allocates nothing once the first run of each shape has been seen
static void run_reserve(Run* r, int n_slots, int n_steps, int n_mb) {
    int L = r->st->cfg.num_layers, P = r->P;
    if (n_mb > r->cap_mb) {
        r->slot_of = (int*)realloc_check(r->slot_of, n_mb * sizeof(int));
        r->cap_mb = n_mb;
    }
    if (n_slots > r->cap_slots) {
        r->slots = (Slot*)realloc_check(r->slots, n_slots * sizeof(Slot));
        r->free_slots = (int*)realloc_check(r->free_slots, n_slots * sizeof(int));
        memset(r->slots + r->cap_slots, 0, (n_slots - r->cap_slots) * sizeof(Slot));
        r->cap_slots = n_slots;
    }
    if (P > r->cap_P) {
        r->rep_bubble = (double*)realloc_check(r->rep_bubble, P * sizeof(double));
        r->rep_stale = (int*)realloc_check(r->rep_stale, P * sizeof(int));
        r->rep_dp_bytes = (double*)realloc_check(r->rep_dp_bytes, P * sizeof(double));
        r->rep_dp_wait = (double*)realloc_check(r->rep_dp_wait, P * sizeof(double));
        r->rep_dp_span = (double*)realloc_check(r->rep_dp_span, P * sizeof(double));
        for (int t = 0; t < r->cap_steps; t++) { // the per-step arrays sized by P grow with it
            r->steps[t].peer = (StepStats*)realloc_check(r->steps[t].peer, P * sizeof(StepStats));
            r->steps[t].peer_req = (CommRequest*)realloc_check(r->steps[t].peer_req, P * sizeof(CommRequest));
        }
        r->cap_P = P;
    }
    if (n_steps > r->cap_steps) {
        r->steps = (StepState*)realloc_check(r->steps, n_steps * sizeof(StepState));
        r->data_at = (DataLoaderState*)realloc_check(r->data_at, n_steps * sizeof(DataLoaderState));
        for (int t = r->cap_steps; t < n_steps; t++) {
            StepState* ss = &r->steps[t];
            memset(ss, 0, sizeof(*ss));
            ss->mine = (PipeSums*)calloc_check(pipe_sums_n(L), sizeof(double));
            ss->sums = (PipeSums*)calloc_check(pipe_sums_n(L), sizeof(double));
            ss->peer = (StepStats*)calloc_check(r->cap_P, sizeof(StepStats));
            ss->peer_req = (CommRequest*)calloc_check(r->cap_P, sizeof(CommRequest));
        }
        r->cap_steps = n_steps;
    }
}

// the run's buffers grown and its books reset for sch
static Run* run_begin(Executor* ex, const Schedule* sch) {
    if (!ex->run) ex->run = calloc_check(1, sizeof(Run));
    Run* r = (Run*)ex->run;
    Comm* c = ex->comm;
    r->ex = ex;
    r->sch = sch;
    r->st = ex->stage;
    r->s = c->stage;
    r->P = sch->P;
    r->D = c->D;
    r->first = r->s == 0;
    r->last = r->s == r->P - 1;
    r->report = c->world_rank == 0;
    r->split = sch->kind == SCHED_ZBH1;
    int stashes, grad_slots, n_mb = sch->n_steps * sch->M;
    schedule_stage_limits(sch, r->s, &r->n_slots, &stashes, &grad_slots);
    stashes = staleness_stashes(ex->comp, stashes);
    if (ex->drift_step >= sch->first_step && ex->drift_step < sch->first_step + sch->n_steps) stashes++; // the drift monitor's copy
    stage_reserve(r->st, r->n_slots, r->split ? r->n_slots : 1, grad_slots, stashes);
    run_reserve(r, r->n_slots, sch->n_steps, n_mb);
    // every request of the previous run completed before it returned: only the books reset
    for (int i = 0; i < n_mb; i++) r->slot_of[i] = -1;
    for (int i = 0; i < r->n_slots; i++) {
        r->slots[i].version = 0;
        r->slots[i].needs_weights = 0;
        r->free_slots[i] = r->n_slots - 1 - i;
    }
    r->n_free = r->n_slots;
    r->act.g = r->grad.g = -1;
    r->next_f = 0;
    r->next_post = 0;
    r->next_report = 0;
    r->busy = 0.0;
    r->halted = 0;
    ex->halted_step = -1;
    ex->halt_reason[0] = '\0';
    for (int t = 0; t < sch->n_steps; t++) {
        StepState* ss = &r->steps[t];
        ss->grad_ops_left = sch->M;
        ss->posted = ss->updated = ss->refused = ss->skipped = 0;
        memset(ss->mine, 0, pipe_sums_n(r->st->cfg.num_layers) * sizeof(double));
        ss->loss_sum = 0.0;
        ss->stats = (StepStats){.dp_entropy = NAN};
        ss->max_stale = 0;
        if (r->report)
            for (int s = 1; s < r->P; s++) comm_irecv(c, &ss->peer[s], sizeof(StepStats), s, TAG_STATS, &ss->peer_req[s]);
    }
    r->last_u = now_seconds();
    // second-order prediction starts each chunk afresh: what it predicts is a function of the chunk's
    // updates alone, so a run resumed at a consistency point (or after a rollback) predicts as one that went on
    stage_trajectory_reset(r->st);
    predict_weights(r);
    return r;
}

void executor_run(Executor* ex, const Schedule* sch) {
    Run* r = run_begin(ex, sch);
    if (schedule_event_driven(sch)) run_event_driven(r);
    else
        for (int i = 0; i < sch->n_ops[r->s]; i++) run_op(r, &sch->ops[r->s][i]);
    if (r->report) deliver_step_reports(r, 1);
    // flush: every message of this chunk has left
    for (int i = 0; i < r->n_slots; i++) {
        comm_wait(ex->comm, &r->slots[i].out_send);
        comm_wait(ex->comm, &r->slots[i].dx_send);
    }
    for (int t = 0; t < sch->n_steps; t++) comm_wait(ex->comm, &r->steps[t].stats_send);
    if (r->n_free != r->n_slots) td_fatal("stage %d: %d micro-batches still in flight at the end of the schedule", r->s, r->n_slots - r->n_free);
}

void executor_free(Executor* ex) {
    Run* r = (Run*)ex->run;
    if (!r) return;
    for (int t = 0; t < r->cap_steps; t++) {
        free(r->steps[t].mine);
        free(r->steps[t].sums);
        free(r->steps[t].peer);
        free(r->steps[t].peer_req);
    }
    free(r->steps);
    free(r->data_at);
    free(r->slots);
    free(r->free_slots);
    free(r->slot_of);
    free(r->rep_bubble);
    free(r->rep_stale);
    free(r->rep_dp_bytes);
    free(r->rep_dp_wait);
    free(r->rep_dp_span);
    free(r);
    ex->run = NULL;
    free(ex->drift_applied);
    free(ex->drift_fp32);
    free(ex->drift_sync);
    ex->drift_applied = ex->drift_fp32 = NULL;
    ex->drift_sync = NULL;
}

static double cv(const OpTimes* t) {
    if (t->n < 2 || t->sum <= 0) return 0.0;
    double mean = t->sum / t->n, var = t->sum2 / t->n - mean * mean;
    return var > 0 ? sqrt(var) / mean : 0.0;
}

// out (n) = the sum of in (n) over the pipeline's stages, waited for (outside a step's ops)
static void pipe_sum(Executor* ex, const double* in, double* out, int n) {
    CommRequest r;
    memset(&r, 0, sizeof(r));
    comm_pipe_sum_start(ex->comm, in, out, n, &r);
    comm_wait(ex->comm, &r);
}

int executor_drift_measure(Executor* ex, int t, int M, DriftUnit* all) {
    Stage* st = ex->stage;
    char err[1024];
    int L = st->cfg.num_layers, k = stage_grad_slot(st, t), P = ex->comm->P;
    DataLoaderState after, before;
    if (ex->data) {
        dataloader_get_state(ex->data, &after);
        executor_data_before(ex, t, &before);
        if (dataloader_set_state(ex->data, &before, err, sizeof(err))) td_fatal("drift monitor: %s", err);
    }
    Executor saved = *ex;
    ex->comp = NULL, ex->on_step = NULL, ex->trace = NULL, ex->drift_step = -1, ex->gradient_only = 1;
    stage_use_compensation(st, NULL);
    ScheduleShape shape = {.kind = M >= P ? SCHED_1F1B : SCHED_GPIPE, .P = P, .M = M, .first_step = t, .n_steps = 1};
    Schedule sch;
    if (schedule_build(&sch, &shape, err, sizeof(err))) fatal_all("drift monitor: %s", err);
    executor_run(ex, &sch);
    schedule_free(&sch);
    ex->comp = saved.comp, ex->on_step = saved.on_step, ex->trace = saved.trace, ex->drift_step = saved.drift_step, ex->gradient_only = 0;
    stage_use_compensation(st, saved.comp);
    DriftUnit* mine = (DriftUnit*)calloc_check(2 * (L + 2), sizeof(DriftUnit)); // (2, L + 2), as all
    drift_compare(st, ex->drift_applied, stage_host_grads(st, k, NULL), mine);
    if (ex->drift_synced) memcpy(mine + L + 2, ex->drift_sync, (L + 2) * sizeof(DriftUnit));
    pipe_sum(ex, (const double*)mine, (double*)all, 8 * (L + 2)); // each unit from the one stage that holds it
    int halves = 1 + ex->drift_synced;
    ex->drift_synced = 0;
    free(mine);
    stage_zero_grad(st, k);
    stage_release_stash(st, t, 0);
    if (ex->data && dataloader_set_state(ex->data, &after, err, sizeof(err))) td_fatal("drift monitor: %s", err);
    return halves;
}

void executor_data_before(const Executor* ex, int step, DataLoaderState* state) {
    const Run* r = (const Run*)ex->run;
    if (!ex->data || !r || step < r->sch->first_step || step >= r->sch->first_step + r->sch->n_steps)
        td_fatal("executor_data_before: step %d is not in the last run, or this stage reads no data", step);
    *state = r->data_at[step - r->sch->first_step];
}

void executor_stage_times(Executor* ex, double* all) {
    const ExecutorStats* st = &ex->stats;
    int P = ex->comm->P, s = ex->comm->stage;
    double mine[4] = {st->f.n ? st->f.sum / st->f.n : 0.0, st->b.n ? st->b.sum / st->b.n : 0.0, 0.5 * (cv(&st->f) + cv(&st->b)),
                      st->b_send.n ? st->b_send.sum / st->b_send.n : 1.0};
    comm_dp_average_double(ex->comm, mine, 4);
    double* per = (double*)calloc_check(4 * P, sizeof(double)); // (4, P) this stage's column, the rest 0
    for (int k = 0; k < 4; k++) per[k * P + s] = mine[k];
    pipe_sum(ex, per, all, 4 * P); // each column from its own stage
    free(per);
}
