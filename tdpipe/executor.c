// The executor: one stage's ops of a schedule, with messages, gradient cache, weight stashes and
// measurements (see executor.h).
//
// How a step's gradient becomes an update, without any blocking call that spans the pipeline:
//   after the stage's last backward of step t ("post"): average the gradient slot over the D
//     replicas (blocking, but only among the replicas of this stage, which all post in step order),
//     exchange the tied embedding's shares between the first and last stage, and start a
//     nonblocking sum over the pipeline of [per-unit sums of squares, loss];
//   at U(t): wait for that sum (it needs every stage's post of step t, which the schedule puts
//     before every U(t)), clip, apply AdamW, recycle the slot.
// So a stage blocked in U(t) waits only for other stages' *backward* of step t, never for their
// U(t): TD-Pipe's stages may sit at different steps without deadlock. The only collectives among
// replicas are in post, which every replica reaches in step order whatever order its ops ran in.
//
// Synchronous schedules (and tdpipe with W = 0, which is 1f1b) run their lists in order with
// blocking receives. tdpipe with W > 0 runs event-driven (run_event_driven): receives for the next
// forward and backward are posted ahead, and the stage runs whichever op is ready, by the policy
// schedule.h defines. Numerics do not depend on that order: forwards and backwards each run in
// micro-batch order, and a forward's weight version is fixed by schedule_forward_version.
#include "executor.h"
#include <math.h>
#include <string.h>
#include <time.h>
#include "llmc/common.h"
#include "tdpipe/simulator.h"

enum { TAG_ACT = 1, TAG_GRAD = 2, TAG_TIED = 3, TAG_STATS = 4 };
#define SYN_FLOATS 16 // payload of a synthetic-compute message: dependencies, not data
#define SYN_POLL_S 2e-4 // a synthetic op's wait is cut into slices this long, MPI progressed between
enum { SYN_ACT_IN, SYN_ACT_OUT, SYN_GRAD_IN, SYN_GRAD_OUT, SYN_BUFS }; // regions of syn_buf

typedef struct {
    double* units_in;   // (L + 3): per-unit sums of squares, then the step's mean loss (last stage)
    double* units_out;  // (L + 3) summed over the pipeline
    CommRequest pipe_req;
    int grad_ops_left;  // B / BW ops of the step still to run on this stage
    int posted, updated;
    double loss_sum;    // last stage: sum of its micro-batch losses
    int max_stale;
    float loss, norm, lr;
    double stats[3];        // this stage's busy seconds, seconds since its previous update, staleness
    double* peer_stats;     // world rank 0: (P, 3) from every stage
    CommRequest* stats_req; // world rank 0: (P) receives of peer_stats
    CommRequest stats_sreq;
} StepState;

typedef struct {
    Executor* ex;
    const Schedule* sch;
    int s, P, D, n_slots, split, first, last, report;
    int dev_msgs;           // activations and gradients come and go in the backend's memory (ex->link)
    int dev_tied;           // so do the tied embedding's gradient shares (first and last stage)
    int v0;                 // the stage's weight version when the run began (op versions count from it)
    size_t btc;             // B*T*C floats of one activation message
    int* slot_of;           // (n_steps*M) activation slot of each micro-batch, -1 when none
    int* slot_version;      // (n_slots) weight version a slot's forward used
    int* slot_needs_w;      // (n_slots) 1 while its backward still needs those weights
    int* slot_free;         // (n_slots) stack of free slots
    int n_free;
    float** dx_send;        // (n_slots)[btc] input gradients being sent upstream (host messages)
    CommRequest* fwd_req;   // (n_slots)
    CommRequest* bwd_req;   // (n_slots)
    float* dx_recv;         // (btc) output gradient received from downstream (host messages)
    float* syn_buf;         // (SYN_BUFS, SYN_FLOATS) synthetic payloads
    float** tied_buf;       // (grad slots)[Vp*C] the other end's share of wte's gradient
    float** tied_send;      // (grad slots)[Vp*C] first stage: its share, kept until sent
    CommRequest* tied_sreq; // (grad slots)
    CommRequest* tied_rreq; // (grad slots)
    StepState* steps;       // (n_steps)
    int next_f;             // micro-batches forwarded in this run (the next forward's g)
    int next_report;
    double busy, last_u;    // compute seconds since the last update; when it ended
    int cap_slots, cap_ng, cap_steps, cap_nmb; // what the buffers above hold (they outlive a run)
} Run;

static void sleep_seconds(double s) {
    if (s <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

// the time an op takes: real compute plus --jitter's extra wait, or the synthetic cost model
static void finish_compute(Run* r, const Op* op, double t0, int step0) {
    Executor* ex = r->ex;
    if (ex->stage) stage_finish(ex->stage);
    double measured = now_seconds() - t0;
    uint64_t seed = ex->seed;
    int backward = op->kind != OP_F;
    if (ex->syn_f > 0) { // the op is a wait from the cost model, with CV beta
        double nominal = backward ? (op->kind == OP_B ? ex->syn_b : 0.5 * ex->syn_b) : ex->syn_f;
        double until = t0 + nominal * simulator_jitter(seed, r->s, op, ex->jitter);
        // the host stays free while a device would compute: MPI moves messages and the pipeline
        // sums along meanwhile, as it would beside a GPU kernel
        for (double left = until - now_seconds(); left > 0; left = until - now_seconds()) {
            sleep_seconds(left < SYN_POLL_S ? left : SYN_POLL_S);
            comm_progress(ex->comm);
        }
    } else if (ex->jitter > 0) { // measured x (1 + Y), Y of mean 1 and CV 2 beta: the total has CV beta
        sleep_seconds(measured * simulator_jitter(seed, r->s, op, 2.0 * ex->jitter));
    }
    double d = now_seconds() - t0;
    r->busy += d;
    if (backward) {
        ex->busy_b += d;
        ex->busy_b2 += d * d;
        ex->n_b++;
    } else {
        ex->busy_f += d;
        ex->busy_f2 += d * d;
        ex->n_f++;
    }
}

static int alloc_slot(Run* r) {
    if (r->n_free == 0) td_fatal("stage %d: no free activation slot (%d allocated)", r->s, r->n_slots);
    int slot = r->slot_free[--r->n_free];
    // the slot's previous messages must have left before its buffers are reused
    comm_wait(r->ex->comm, &r->fwd_req[slot]);
    comm_wait(r->ex->comm, &r->bwd_req[slot]);
    return slot;
}

static void release_slot(Run* r, int slot) { r->slot_free[r->n_free++] = slot; }

// 1 while weight version v (absolute) is still needed: a micro-batch in flight used it and has not
// run its backward, or a forward still to come in this run will use it
static int version_needed(const Run* r, int v) {
    int M = r->sch->M, W = r->sch->W, nM = r->sch->n_steps * M, rel = v - r->sch->first_step;
    if (r->next_f < nM && schedule_forward_version(r->sch->kind, r->next_f, M, W) <= rel &&
        rel <= schedule_forward_version(r->sch->kind, nM - 1, M, W))
        return 1;
    for (int i = 0; i < r->n_slots; i++)
        if (r->slot_needs_w[i] && r->slot_version[i] == v) return 1;
    return 0;
}

// the backward of `slot` no longer needs its weights: drop a stash nobody needs any more
static void weights_done(Run* r, int slot) {
    Stage* st = r->ex->stage;
    int v = r->slot_version[slot];
    r->slot_needs_w[slot] = 0;
    if (st && v != st->version && !version_needed(r, v)) stage_release_stash(st, v);
}

static float* syn(Run* r, int region) { return r->syn_buf + region * SYN_FLOATS; }

// Where messages live: the backend's memory (dev_msgs: ex->link moves them), host buffers (MPI), or
// a few floats that stand for them under synthetic compute.
static size_t msg_bytes(const Run* r) {
    if (r->dev_msgs) return stage_msg_bytes(r->ex->stage);
    return (r->ex->stage ? r->btc : SYN_FLOATS) * sizeof(float);
}
// where slot's stage input is received
static void* input_buf(Run* r, int slot) {
    Stage* st = r->ex->stage;
    if (r->dev_msgs) return stage_input_msg(st, slot);
    return st ? (void*)st->acts[slot].x_in : (void*)syn(r, SYN_ACT_IN);
}
// slot's stage output, to send
static const void* output_buf(Run* r, int slot) {
    Stage* st = r->ex->stage;
    if (r->dev_msgs) return stage_output_msg(st, slot);
    return st ? (const void*)stage_output(st, slot) : (const void*)syn(r, SYN_ACT_OUT);
}
// where the gradient of the stage output for activation-gradient buffer ga is received
static void* grad_in_buf(Run* r, int ga) {
    if (r->dev_msgs) return stage_grad_msg(r->ex->stage, ga);
    return r->ex->stage ? (void*)r->dx_recv : (void*)syn(r, SYN_GRAD_IN);
}
static const CommLink* link_of(const Run* r) { return r->dev_msgs ? r->ex->link : NULL; }
static void msg_send(Run* r, const void* buf, int peer, int tag, CommRequest* req) {
    comm_link_isend(r->ex->comm, link_of(r), COMM_LINK_NEIGHBOURS, buf, msg_bytes(r), peer, tag, req);
}
static void msg_irecv(Run* r, void* buf, int peer, int tag, CommRequest* req) {
    comm_link_irecv(r->ex->comm, link_of(r), COMM_LINK_NEIGHBOURS, buf, msg_bytes(r), peer, tag, req);
}
static void msg_recv(Run* r, void* buf, int peer, int tag) {
    CommRequest req;
    memset(&req, 0, sizeof req);
    msg_irecv(r, buf, peer, tag, &req);
    comm_wait(r->ex->comm, &req);
}

// the activation slot of micro-batch g's forward, taken when its input is first awaited
static int forward_slot(Run* r, int g) {
    if (r->slot_of[g] < 0) r->slot_of[g] = alloc_slot(r);
    return r->slot_of[g];
}

// have_input: the input activation was already received (event-driven runs post it ahead)
static void op_forward(Run* r, const Op* op, int step0, int have_input) {
    Executor* ex = r->ex;
    Stage* st = ex->stage;
    int g = (op->step - r->sch->first_step) * r->sch->M + op->mb;
    if (g != r->next_f) td_fatal("stage %d: forward of micro-batch %d out of order (next is %d)", r->s, g, r->next_f);
    int slot = forward_slot(r, g);
    r->next_f++;
    r->slot_version[slot] = op->version;
    r->slot_needs_w[slot] = 1;
    StepState* ss = &r->steps[op->step - r->sch->first_step];
    int stale = schedule_op_staleness(op);
    if (stale > ss->max_stale) ss->max_stale = stale;
    GPT2Acts* a = st ? &st->acts[slot] : NULL;
    if (st && (r->first || r->last) && dataloader_next(ex->data, a->inputs, a->targets))
        td_fatal("training data: %s", ex->data->err);
    if (!r->first && !have_input) msg_recv(r, input_buf(r, slot), r->s - 1, TAG_ACT);
    double t0 = now_seconds();
    if (st) {
        float loss = stage_forward(st, slot, op->version, r->last);
        if (r->last) ss->loss_sum += loss;
    }
    finish_compute(r, op, t0, step0);
    if (!r->last) msg_send(r, output_buf(r, slot), r->s + 1, TAG_ACT, &r->fwd_req[slot]);
    ex->count_f++;
}

// the activation-gradient buffer of slot's backward: its own for zero-bubble's split passes
static int gacts_of(const Run* r, int slot) { return r->split ? slot : 0; }

// the input-gradient half (B or BI): receive dL/d(output), compute; send_input_grad sends dL/d(input)
static void op_backward_input(Run* r, int slot, int have_input, double* t0_out) {
    Executor* ex = r->ex;
    Stage* st = ex->stage;
    int ga = gacts_of(r, slot);
    if (!r->last && !have_input) msg_recv(r, grad_in_buf(r, ga), r->s + 1, TAG_GRAD);
    double t0 = now_seconds();
    *t0_out = t0;
    if (st) {
        float dloss = 1.0f / ((float)ex->B * ex->T * r->sch->M);
        const float* dx_out = r->last || r->dev_msgs ? NULL : r->dx_recv; // NULL: received on the device
        stage_backward_input(st, slot, ga, r->slot_version[slot], dx_out, dloss);
    }
    weights_done(r, slot);
}

static void send_input_grad(Run* r, int slot) {
    if (r->first) return;
    Stage* st = r->ex->stage;
    const void* buf = syn(r, SYN_GRAD_OUT);
    if (r->dev_msgs) {
        buf = stage_dx_in_msg(st, gacts_of(r, slot), slot);
    } else if (st) {
        stage_dx_in(st, gacts_of(r, slot), r->dx_send[slot]);
        buf = r->dx_send[slot];
    }
    msg_send(r, buf, r->s - 1, TAG_GRAD, &r->bwd_req[slot]);
}

static void post_step(Run* r, int t);

// the weight-gradient half into the gradient-cache slot of the op's step
static void accumulate_weight_grad(Run* r, const Op* op, int slot, int ga) {
    Stage* st = r->ex->stage;
    if (!st) return;
    stage_use_grad_slot(st, op->step % st->n_grad_slots);
    stage_backward_weight(st, slot, ga);
}

// the micro-batch is done on this stage: free its slot; the step's last one posts the step
static void grad_done(Run* r, const Op* op, int slot) {
    r->ex->count_b++;
    int t = op->step - r->sch->first_step;
    r->slot_of[t * r->sch->M + op->mb] = -1;
    release_slot(r, slot);
    if (--r->steps[t].grad_ops_left == 0) post_step(r, op->step);
}

static void op_backward(Run* r, const Op* op, int step0, int have_input) {
    int slot = r->slot_of[(op->step - r->sch->first_step) * r->sch->M + op->mb];
    if (slot < 0) td_fatal("stage %d: backward of step %d micro-batch %d before its forward", r->s, op->step, op->mb);
    double t0;
    if (op->kind == OP_BW) { // zero-bubble's deferred half: its activation gradients wait in gacts[slot]
        t0 = now_seconds();
        accumulate_weight_grad(r, op, slot, slot);
        finish_compute(r, op, t0, step0);
        grad_done(r, op, slot);
        return;
    }
    op_backward_input(r, slot, have_input, &t0);
    if (op->kind == OP_B) accumulate_weight_grad(r, op, slot, 0);
    finish_compute(r, op, t0, step0);
    send_input_grad(r, slot);
    if (op->kind == OP_B) grad_done(r, op, slot);
}

// the stage's gradient of step t is complete: average over replicas, exchange the tied
// embedding's shares, start the pipeline-wide sum of the norm's units and the loss
static void post_step(Run* r, int t) {
    Executor* ex = r->ex;
    Stage* st = ex->stage;
    StepState* ss = &r->steps[t - r->sch->first_step];
    int nu = ex->L + 3;
    memset(ss->units_in, 0, nu * sizeof(double));
    if (st) {
        int k = t % st->n_grad_slots;
        stage_use_grad_slot(st, k);
        size_t vc = st->sizes[0];
        int dp_device = r->D > 1 && ex->dp_average_device;
        if (dp_device) ex->dp_average_device(ex->dp_ctx, st);
        // a device backend's gradient goes through host memory for the exchanges over MPI: the
        // tied embedding's (first and last stage) and the replicas' average unless done on the device
        int staged = st->be && ((r->P > 1 && (r->first || r->last) && !r->dev_tied) || (r->D > 1 && !dp_device));
        if (staged) stage_grads_to_host(st);
        if (r->D > 1 && !dp_device) {
            comm_dp_average(ex->comm, st->grads, st->num_params);
            if (st->dwte_head) comm_dp_average(ex->comm, st->dwte_head, vc);
        }
        // the tied embedding: both ends end up with encoder share + head share (a + b == b + a, bitwise)
        if (r->dev_tied) { // the shares move in the backend's memory; the last stage sums them at U
            int other = r->first ? r->P - 1 : 0;
            size_t bytes = vc * sizeof(float);
            comm_link_isend(ex->comm, ex->link, COMM_LINK_TIED, stage_tied_share(st), bytes, other, TAG_TIED, &r->tied_sreq[k]);
            comm_link_irecv(ex->comm, ex->link, COMM_LINK_TIED, stage_tied_other(st, k), bytes, other, TAG_TIED, &r->tied_rreq[k]);
            if (r->first) { // our share is summed in place: once it has left
                comm_wait(ex->comm, &r->tied_rreq[k]);
                comm_wait(ex->comm, &r->tied_sreq[k]);
                stage_tied_sum(st, k);
            }
        } else if (r->P == 1) {
            if (staged) stage_tie_embedding_host(st);
            else stage_tie_embedding_local(st);
        } else if (r->first) {
            memcpy(r->tied_send[k], st->g.wte, vc * sizeof(float));
            comm_isend(ex->comm, r->tied_send[k], vc * sizeof(float), r->P - 1, TAG_TIED, &r->tied_sreq[k]);
            comm_recv(ex->comm, r->tied_buf[k], vc * sizeof(float), r->P - 1, TAG_TIED); // sent before our last backward began
            for (size_t i = 0; i < vc; i++) st->g.wte[i] += r->tied_buf[k][i];
        } else if (r->last) {
            comm_isend(ex->comm, st->dwte_head, vc * sizeof(float), 0, TAG_TIED, &r->tied_sreq[k]);
            comm_irecv(ex->comm, r->tied_buf[k], vc * sizeof(float), 0, TAG_TIED, &r->tied_rreq[k]);
        }
        if (staged) stage_grads_from_host(st);
        stage_grad_unit_sumsq(st, ss->units_in);
    }
    if (r->last) { // the step's loss, averaged over the replicas here: U(t) has no collective among replicas
        double loss = ss->loss_sum / r->sch->M;
        if (r->D > 1) comm_dp_average_double(ex->comm, &loss, 1);
        ss->units_in[ex->L + 2] = loss;
    }
    comm_pipe_sum_start(ex->comm, ss->units_in, ss->units_out, nu, &ss->pipe_req);
    ss->posted = 1;
}

static void op_update(Run* r, const Op* op, int step0) {
    Executor* ex = r->ex;
    Stage* st = ex->stage;
    int t = op->step;
    StepState* ss = &r->steps[t - r->sch->first_step];
    if (!ss->posted) td_fatal("stage %d: update of step %d before all its backward passes", r->s, t);
    comm_wait(ex->comm, &ss->pipe_req); // waiting here is bubble, not compute
    double sq = 0.0;
    for (int i = 0; i < ex->L + 2; i++) sq += ss->units_out[i];
    ss->loss = (float)ss->units_out[ex->L + 2];
    ss->norm = (float)sqrt(sq);
    ss->lr = lr_schedule(t, ex->total_steps, ex->warmup, ex->opt.lr, ex->final_lr_frac);
    if (st) {
        int k = t % st->n_grad_slots;
        stage_use_grad_slot(st, k);
        if (r->P > 1 && r->last) { // wte's gradient = the first stage's share + ours, in that order
            comm_wait(ex->comm, &r->tied_rreq[k]);
            comm_wait(ex->comm, &r->tied_sreq[k]);
            if (r->dev_tied) {
                stage_tied_sum(st, k);
            } else {
                for (size_t i = 0; i < st->sizes[0]; i++) st->g.wte[i] = r->tied_buf[k][i] + st->dwte_head[i];
                stage_grads_from_host(st);
            }
        }
        if (r->P > 1 && r->first) comm_wait(ex->comm, &r->tied_sreq[k]);
        if (version_needed(r, st->version)) stage_stash_current(st); // weight stashing
        float scale = (ex->clip > 0 && ss->norm > ex->clip) ? ex->clip / ss->norm : 1.0f;
        stage_update(st, &ex->opt, ss->lr, t + 1, scale);
        stage_zero_grad(st);
    }
    double now = now_seconds();
    ss->stats[0] = r->busy;
    ss->stats[1] = now - r->last_u;
    ss->stats[2] = ss->max_stale;
    r->busy = 0.0;
    r->last_u = now;
    ss->updated = 1;
    if (r->report) return; // world rank 0 reads its own stats
    if (ex->comm->replica == 0) comm_isend(ex->comm, ss->stats, sizeof(ss->stats), 0, TAG_STATS, &ss->stats_sreq);
}

// world rank 0: report every step whose stats have arrived from all stages, in order
static void report_ready(Run* r, int step0, int wait_all) {
    Executor* ex = r->ex;
    while (r->next_report < r->sch->n_steps) {
        StepState* ss = &r->steps[r->next_report];
        if (!ss->updated) return;
        for (int s = 1; s < r->P; s++) {
            if (wait_all) comm_wait(ex->comm, &ss->stats_req[s]);
            else if (!comm_test(ex->comm, &ss->stats_req[s])) return;
        }
        memcpy(ss->peer_stats, ss->stats, sizeof(ss->stats));
        StepReport rep;
        memset(&rep, 0, sizeof(rep));
        rep.step = step0 + r->next_report + 1;
        rep.loss = ss->loss;
        rep.norm = ss->norm;
        rep.lr = ss->lr;
        rep.seconds = ss->stats[1];
        rep.P = r->P < 64 ? r->P : 64;
        double busy = 0.0, total = 0.0;
        for (int s = 0; s < rep.P; s++) {
            const double* st = ss->peer_stats + 3 * s;
            rep.bubble[s] = st[1] > 0 ? 1.0 - st[0] / st[1] : 0.0;
            rep.staleness[s] = (int)st[2];
            if (rep.staleness[s] > rep.staleness_max) rep.staleness_max = rep.staleness[s];
            busy += st[0];
            total += st[1];
        }
        rep.bubble_all = total > 0 ? 1.0 - busy / total : 0.0;
        if (ex->on_step) ex->on_step(ex->ctx, &rep);
        r->next_report++;
    }
}

// one op, traced; world rank 0 then reports the steps that are complete
static void run_op(Run* r, const Op* op, int step0, int have_input) {
    double t0 = now_seconds();
    if (op->kind == OP_F) op_forward(r, op, step0, have_input);
    else if (op->kind == OP_U) op_update(r, op, step0);
    else op_backward(r, op, step0, have_input);
    Trace* tr = r->ex->trace;
    if (tr && tr->enabled) {
        char name[32];
        schedule_op_name(op, name, sizeof(name));
        trace_add(tr, r->s, r->ex->comm->replica, name, t0, now_seconds());
    }
    if (r->report) report_ready(r, step0, 0);
}

// tdpipe with W > 0: the policy of schedule.h, live. The receive of the next forward's input is
// posted as soon as that forward may run (window and weight version), the next backward's gradient
// as soon as its forward has run; the stage runs U when the step's pipeline sum has arrived, else
// the ready one of F and B (both ready: 1F1B's rhythm), else it sleeps until one of those messages
// lands (in MPI, or polling a device link).
typedef struct {
    Run* r;
    CommRequest *act, *grad; // the next forward's input and the next backward's output gradient
} Readiness;

// the executor's readiness for the policy: the message the op waits for has arrived
static int ready_now(void* ctx, const Op* op) {
    Readiness* q = (Readiness*)ctx;
    Run* r = q->r;
    Comm* c = r->ex->comm;
    if (op->kind == OP_U) {
        StepState* ss = &r->steps[op->step - r->sch->first_step];
        return ss->posted && comm_test(c, &ss->pipe_req);
    }
    if (op->kind == OP_F) return r->first || comm_test(c, q->act);
    return r->last || comm_test(c, q->grad);
}

static void run_event_driven(Run* r, int step0) {
    const Schedule* sch = r->sch;
    Comm* c = r->ex->comm;
    int s = r->s;
    int act_for = -1, grad_for = -1; // the micro-batch whose input / output gradient is being received
    CommRequest act, grad;
    memset(&act, 0, sizeof(act));
    memset(&grad, 0, sizeof(grad));
    TdpipeCursor cur = {0, 0, 0, OP_F};
    Readiness q = {r, &act, &grad};
    while (cur.v < sch->n_steps) {
        TdpipeNext next;
        schedule_tdpipe_next(sch, s, &cur, &next);
        // a forward's input is received only once the forward may run: its sender may need this
        // stage's own progress first, and a receive posted on a GPU waits on the device meanwhile
        if (!r->first && next.has_f && act_for != cur.nf) {
            msg_irecv(r, input_buf(r, forward_slot(r, cur.nf)), s - 1, TAG_ACT, &act);
            act_for = cur.nf;
        }
        if (!r->last && next.has_b && grad_for != cur.nb) {
            msg_irecv(r, grad_in_buf(r, 0), s + 1, TAG_GRAD, &grad); // one buffer: tdpipe does not split backward
            grad_for = cur.nb;
        }
        Op op;
        if (!schedule_tdpipe_pick(&cur, &next, ready_now, &q, &op)) { // sleep until a message that can make something ready lands
            StepState* ss = &r->steps[cur.v < sch->n_steps ? cur.v : 0];
            CommRequest* wait[3] = {ss->posted ? &ss->pipe_req : NULL, next.has_b ? &grad : NULL, next.has_f ? &act : NULL};
            comm_wait_any(c, wait, 3);
            continue;
        }
        schedule_tdpipe_advance(&cur, &op);
        run_op(r, &op, step0, 1);
    }
}

// grows the run's buffers to what this schedule needs; they are kept across runs, so a training
// step allocates nothing once the first run of each shape has been seen
static void run_reserve(Run* r, int n_slots, int ng, int n_steps, int nmb) {
    Executor* ex = r->ex;
    Stage* st = ex->stage;
    int L3 = ex->L + 3, P = ex->comm->P;
    if (nmb > r->cap_nmb) {
        r->slot_of = (int*)realloc(r->slot_of, nmb * sizeof(int));
        if (!r->slot_of) td_fatal("out of memory for %d micro-batch slots", nmb);
        r->cap_nmb = nmb;
    }
    if (n_slots > r->cap_slots) {
        r->slot_version = (int*)realloc(r->slot_version, n_slots * sizeof(int));
        r->slot_needs_w = (int*)realloc(r->slot_needs_w, n_slots * sizeof(int));
        r->slot_free = (int*)realloc(r->slot_free, n_slots * sizeof(int));
        r->fwd_req = (CommRequest*)realloc(r->fwd_req, n_slots * sizeof(CommRequest));
        r->bwd_req = (CommRequest*)realloc(r->bwd_req, n_slots * sizeof(CommRequest));
        r->dx_send = (float**)realloc(r->dx_send, n_slots * sizeof(float*));
        if (!r->slot_version || !r->slot_needs_w || !r->slot_free || !r->fwd_req || !r->bwd_req || !r->dx_send)
            td_fatal("out of memory for %d activation slots", n_slots);
        for (int i = r->cap_slots; i < n_slots; i++) {
            memset(&r->fwd_req[i], 0, sizeof(CommRequest));
            memset(&r->bwd_req[i], 0, sizeof(CommRequest));
            r->dx_send[i] = st && !r->first && !r->dev_msgs ? (float*)malloc_check(r->btc * sizeof(float)) : NULL;
        }
        r->cap_slots = n_slots;
    }
    if (!r->syn_buf) {
        r->syn_buf = (float*)calloc_check(SYN_BUFS * SYN_FLOATS, sizeof(float));
        r->dx_recv = st && !r->last && !r->dev_msgs ? (float*)malloc_check(r->btc * sizeof(float)) : NULL;
    }
    if (ng > r->cap_ng) {
        r->tied_buf = (float**)realloc(r->tied_buf, ng * sizeof(float*));
        r->tied_send = (float**)realloc(r->tied_send, ng * sizeof(float*));
        r->tied_sreq = (CommRequest*)realloc(r->tied_sreq, ng * sizeof(CommRequest));
        r->tied_rreq = (CommRequest*)realloc(r->tied_rreq, ng * sizeof(CommRequest));
        if (!r->tied_buf || !r->tied_send || !r->tied_sreq || !r->tied_rreq) td_fatal("out of memory for %d gradient slots", ng);
        for (int k = r->cap_ng; k < ng; k++) {
            int tied = st && P > 1 && (r->first || r->last) && !r->dev_tied;
            r->tied_buf[k] = tied ? (float*)malloc_check(st->sizes[0] * sizeof(float)) : NULL;
            r->tied_send[k] = tied && r->first ? (float*)malloc_check(st->sizes[0] * sizeof(float)) : NULL;
            memset(&r->tied_sreq[k], 0, sizeof(CommRequest));
            memset(&r->tied_rreq[k], 0, sizeof(CommRequest));
        }
        r->cap_ng = ng;
    }
    if (n_steps > r->cap_steps) {
        r->steps = (StepState*)realloc(r->steps, n_steps * sizeof(StepState));
        if (!r->steps) td_fatal("out of memory for %d steps", n_steps);
        for (int t = r->cap_steps; t < n_steps; t++) {
            StepState* ss = &r->steps[t];
            memset(ss, 0, sizeof(*ss));
            ss->units_in = (double*)calloc_check(L3, sizeof(double));
            ss->units_out = (double*)calloc_check(L3, sizeof(double));
            ss->peer_stats = (double*)calloc_check(3 * P, sizeof(double));
            ss->stats_req = (CommRequest*)calloc_check(P, sizeof(CommRequest));
        }
        r->cap_steps = n_steps;
    }
}

void executor_run(Executor* ex, const Schedule* sch, int step0) {
    if (!ex->run) ex->run = calloc_check(1, sizeof(Run));
    Run* r = (Run*)ex->run;
    Comm* c = ex->comm;
    Stage* st = ex->stage;
    r->ex = ex;
    r->sch = sch;
    r->s = c->stage;
    r->P = sch->P;
    r->D = c->D;
    r->first = r->s == 0;
    r->last = r->s == r->P - 1;
    r->report = c->world_rank == 0;
    r->split = sch->kind == SCHED_ZBH1;
    r->btc = (size_t)ex->B * ex->T * ex->C;
    r->dev_msgs = ex->link && st;
    r->dev_tied = r->dev_msgs && r->P > 1 && (r->first || r->last) && st->device_tied;
    if (r->dev_msgs && !st->device_msgs) td_fatal("stage %d: a message link was given, but the stage keeps its messages on the host", r->s);
    int stashes, grad_slots;
    schedule_stage_limits(sch, r->s, &r->n_slots, &stashes, &grad_slots);
    if (st) stage_reserve(st, r->n_slots, r->split ? r->n_slots : 1, grad_slots, stashes);
    int nmb = sch->n_steps * sch->M;
    run_reserve(r, r->n_slots, st ? st->n_grad_slots : 1, sch->n_steps, nmb);
    // every request of the previous run completed before it returned: only the bookkeeping resets
    for (int i = 0; i < nmb; i++) r->slot_of[i] = -1;
    for (int i = 0; i < r->n_slots; i++) {
        r->slot_version[i] = 0;
        r->slot_needs_w[i] = 0;
        r->slot_free[i] = r->n_slots - 1 - i;
    }
    r->n_free = r->n_slots;
    r->next_f = 0;
    r->next_report = 0;
    r->busy = 0.0;
    for (int t = 0; t < sch->n_steps; t++) {
        StepState* ss = &r->steps[t];
        ss->grad_ops_left = sch->M;
        ss->posted = ss->updated = 0;
        ss->loss_sum = 0.0;
        ss->max_stale = 0;
        if (r->report)
            for (int s = 1; s < r->P; s++)
                comm_irecv(c, ss->peer_stats + 3 * s, 3 * sizeof(double), s, TAG_STATS, &ss->stats_req[s]);
    }
    if (st) stage_use_grad_slot(st, 0);
    r->v0 = st ? st->version : 0;
    r->last_u = now_seconds();

    if (schedule_event_driven(sch)) run_event_driven(r, step0);
    else
        for (int i = 0; i < sch->n_ops[r->s]; i++) run_op(r, &sch->ops[r->s][i], step0, 0);
    if (r->report) report_ready(r, step0, 1);
    // flush: every message of this chunk has left
    for (int i = 0; i < r->n_slots; i++) {
        comm_wait(c, &r->fwd_req[i]);
        comm_wait(c, &r->bwd_req[i]);
    }
    for (int t = 0; t < sch->n_steps; t++) comm_wait(c, &r->steps[t].stats_sreq);
    if (r->n_free != r->n_slots) td_fatal("stage %d: %d micro-batches still in flight at the end of the schedule", r->s, r->n_slots - r->n_free);
}

void executor_free(Executor* ex) {
    Run* r = (Run*)ex->run;
    if (!r) return;
    for (int t = 0; t < r->cap_steps; t++) {
        free(r->steps[t].units_in);
        free(r->steps[t].units_out);
        free(r->steps[t].peer_stats);
        free(r->steps[t].stats_req);
    }
    for (int k = 0; k < r->cap_ng; k++) {
        free(r->tied_buf[k]);
        free(r->tied_send[k]);
    }
    for (int i = 0; i < r->cap_slots; i++) free(r->dx_send[i]);
    free(r->steps); free(r->tied_buf); free(r->tied_send); free(r->tied_sreq); free(r->tied_rreq);
    free(r->dx_send); free(r->dx_recv); free(r->syn_buf); free(r->fwd_req); free(r->bwd_req);
    free(r->slot_of); free(r->slot_version); free(r->slot_needs_w); free(r->slot_free);
    free(r);
    ex->run = NULL;
}

static double cv(double sum, double sum2, long n) {
    if (n < 2 || sum <= 0) return 0.0;
    double mean = sum / n, var = sum2 / n - mean * mean;
    return var > 0 ? sqrt(var) / mean : 0.0;
}

double executor_stage_cv(const Executor* ex) {
    return 0.5 * (cv(ex->busy_f, ex->busy_f2, ex->n_f) + cv(ex->busy_b, ex->busy_b2, ex->n_b));
}
