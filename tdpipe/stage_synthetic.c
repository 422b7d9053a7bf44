// Synthetic compute (--synthetic-compute): a stage without a model whose forward and backward are
// timed waits from a cost model, each op's time drawn with the simulator's jitter, so schedules can
// be measured at P = 8 on two cores. Messages are a few floats that stand for the dependencies.
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#include "tdpipe/simulator.h"
#include "tdpipe/stage.h"

#define SYN_FLOATS 16   // payload of a message: dependencies, not data
#define SYN_POLL_S 2e-4 // a wait is cut into slices this long, MPI progressed between them

typedef struct {
    Comm* comm;
    double f, b;      // seconds per forward, per backward (a zero-bubble half: b / 2)
    double jitter;    // coefficient of variation of each op's time
    uint64_t seed;    // the jitter draws' (simulator_jitter)
    float msg[4][SYN_FLOATS]; // input, output, output gradient, input gradient
} Synthetic;

static Synthetic* syn_of(const Stage* st) { return (Synthetic*)st->dev; }

// the cost model's time for op, times its jitter draw (keyed by the op: the same draw under every
// schedule, as in the simulator). The host stays free meanwhile, as it would beside a GPU kernel:
// MPI moves messages and the pipeline sums along.
static void wait_for(Stage* st, const Op* op, double nominal) {
    Synthetic* y = syn_of(st);
    double until = now_seconds() + nominal * simulator_jitter(y->seed, y->comm->stage, op, y->jitter);
    for (double left = until - now_seconds(); left > 0; left = until - now_seconds()) {
        sleep_seconds(left < SYN_POLL_S ? left : SYN_POLL_S);
        comm_progress(y->comm);
    }
}

static float syn_forward(Stage* st, const Op* op, int slot, int stash, int targets_valid) {
    wait_for(st, op, syn_of(st)->f);
    return 0.0f;
}
// a backward as one op whose input gradient leaves at its end (the simulator's B without b_send, as
// sim_schedules and reproduce_tables' utilisation table run it); a zero-bubble backward as two halves
static void syn_backward_input(Stage* st, const Op* op, int slot, int gacts, int stash, float dloss) {
    wait_for(st, op, op->kind == OP_B ? syn_of(st)->b : 0.5 * syn_of(st)->b);
}
static void syn_backward_weight(Stage* st, const Op* op, int slot, int gacts, int k, int stash, const GPT2UnitHook* hook) {
    if (op->kind == OP_BW) wait_for(st, op, 0.5 * syn_of(st)->b);
}

static void syn_nothing(Stage* st) {}
static void syn_destroy(Stage* st) { free(st->dev); }
static void syn_stash(Stage* st, int i) {}
static void syn_sumsq(Stage* st, int k, double wte_sq, double* out) {} // no gradient: the units stay 0
static double syn_tie(Stage* st, int k) { return STAGE_SUMSQ_UNKNOWN; }
static void syn_update(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float scale) {}
static void syn_zero(Stage* st, int k) {}
static float* syn_host_grads(Stage* st, int k, float** dwte_head) { // none: num_params is 0
    if (dwte_head) *dwte_head = NULL;
    return syn_of(st)->msg[0];
}
static size_t syn_msg_bytes(const Stage* st, int slot) { return SYN_FLOATS * sizeof(float); }
static void* syn_input_msg(Stage* st, int slot) { return syn_of(st)->msg[0]; }
static const void* syn_output_msg(Stage* st, int slot) { return syn_of(st)->msg[1]; }
static void* syn_grad_msg(Stage* st, int gacts) { return syn_of(st)->msg[2]; }
static const void* syn_dx_in_msg(Stage* st, int gacts, int slot) { return syn_of(st)->msg[3]; }
static float* syn_tied(Stage* st, int k) { return syn_of(st)->msg[0]; } // empty: sizes[0] is 0
static double syn_tied_sum(Stage* st, int k, const float* first, const float* last) { return STAGE_SUMSQ_UNKNOWN; }

static const StageBackend SYNTHETIC = {
    .name = "synthetic",
    .host_memory = 1,
    .reserve = syn_nothing,
    .destroy = syn_destroy,
    .forward = syn_forward,
    .backward_input = syn_backward_input,
    .backward_weight = syn_backward_weight,
    .stash = syn_stash,
    .grad_unit_sumsq = syn_sumsq,
    .update = syn_update,
    .zero_grad = syn_zero,
    .tie_local = syn_tie,
    .host_grads = syn_host_grads,
    .msg_bytes = syn_msg_bytes,
    .input_msg = syn_input_msg,
    .output_msg = syn_output_msg,
    .grad_msg = syn_grad_msg,
    .dx_in_msg = syn_dx_in_msg,
    .tied_share = syn_tied,
    .tied_other = syn_tied,
    .tied_sum = syn_tied_sum,
};

// no weights: the stage's tensors are all empty, so gradients, tied shares and averages move nothing
static void syn_create(Stage* st, const StageInit* init) {
    Synthetic* y = (Synthetic*)calloc_check(1, sizeof(Synthetic));
    y->comm = (Comm*)init->comm;
    y->f = init->syn_f;
    y->b = init->syn_b;
    y->jitter = init->jitter;
    y->seed = init->seed;
    StageInit none = *init;
    none.full = none.slice = NULL;
    stage_init_common(st, &none, &SYNTHETIC, y);
    memset(st->sizes, 0, sizeof(st->sizes));
    st->num_params = 0;
}

const StageDevice STAGE_SYNTHETIC = {"synthetic", syn_create};
