// The "staged" backend (--device cpu-staged): the CPU model behind the StageBackend interface as a
// device, its weights, gradients, activations and messages in a second, private CPU stage (the
// "device" memory). It runs exactly the code path a GPU stage takes (host staging of messages and
// gradients, or messages kept on the device and moved by a link), so the tests check that path
// bitwise on a machine without a GPU.
#include "stage_staged.h"
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#include "tdpipe/stage_cpu.h"

static Stage* inner(const Stage* st) { return (Stage*)st->dev; }
static const StageBackend* cpu(void) { return stage_cpu_backend(); }
static size_t fp32_bytes(const Stage* st, int slot) { return cpu()->msg_bytes(inner(st), slot); }

// the private stage follows the slots and buffers reserved on the outer one
static void staged_reserve(Stage* st) {
    stage_reserve(inner(st), st->n_slots, st->n_gacts, st->n_grad_slots, st->n_stash);
    if (st->sample_slot) stage_reserve_sample(inner(st));
}

static void staged_destroy(Stage* st) {
    stage_destroy(inner(st));
    free(inner(st));
}

static float staged_forward(Stage* st, const Op* op, int slot, int stash, int targets_valid) {
    Stage* d = inner(st);
    size_t bt = (size_t)(slot == STAGE_SAMPLE_SLOT ? 1 : st->B) * st->T;
    memcpy(stage_inputs(d, slot), stage_inputs(st, slot), bt * sizeof(int)); // "upload" the token ids
    if (targets_valid) memcpy(stage_targets(d, slot), stage_targets(st, slot), bt * sizeof(int));
    return cpu()->forward(d, op, slot, stash, targets_valid);
}
static void staged_backward_input(Stage* st, const Op* op, int slot, int gacts, int stash, float dloss) {
    cpu()->backward_input(inner(st), op, slot, gacts, stash, dloss);
}
// (no hook: the gradient lives in the private memory, reached through a host copy only after the step)
static void staged_backward_weight(Stage* st, const Op* op, int slot, int gacts, int k, int stash, const GPT2UnitHook* hook) {
    cpu()->backward_weight(inner(st), op, slot, gacts, k, stash, NULL);
}
static void staged_probs(Stage* st, int slot, int t, float* out) { cpu()->probs(inner(st), slot, t, out); }
static void staged_stash(Stage* st, int i) { cpu()->stash(inner(st), i); }
static void staged_sumsq(Stage* st, int k, double wte_sq, double* out) { cpu()->grad_unit_sumsq(inner(st), k, wte_sq, out); }
static void staged_update(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float scale) { cpu()->update(inner(st), k, opt, lr, t, scale); }
static void staged_zero(Stage* st, int k) { cpu()->zero_grad(inner(st), k); }
static double staged_tie_local(Stage* st, int k) { return cpu()->tie_local(inner(st), k); }

static void staged_to_host(Stage* st) {
    size_t bytes = st->num_params * sizeof(float);
    memcpy(st->params, inner(st)->params, bytes);
    memcpy(st->adam_m, inner(st)->adam_m, bytes);
    memcpy(st->adam_v, inner(st)->adam_v, bytes);
}
static void staged_from_host(Stage* st) {
    size_t bytes = st->num_params * sizeof(float);
    memcpy(inner(st)->params, st->params, bytes);
    memcpy(inner(st)->adam_m, st->adam_m, bytes);
    memcpy(inner(st)->adam_v, st->adam_v, bytes);
}

static void staged_grads_to_host(Stage* st, int k, float* grads, float* dwte_head) {
    memcpy(grads, stage_cpu_grads(inner(st), k), st->num_params * sizeof(float));
    if (dwte_head) memcpy(dwte_head, stage_cpu_dwte_head(inner(st), k), st->sizes[0] * sizeof(float));
}
static void staged_grads_from_host(Stage* st, int k, const float* grads, const float* dwte_head) {
    memcpy(stage_cpu_grads(inner(st), k), grads, st->num_params * sizeof(float));
    if (dwte_head) memcpy(stage_cpu_dwte_head(inner(st), k), dwte_head, st->sizes[0] * sizeof(float));
}

// messages live in the private stage, as a GPU stage's live in device memory
static size_t staged_msg_bytes(const Stage* st, int slot) { return fp32_bytes(st, slot); }
static void* staged_input_msg(Stage* st, int slot) { return cpu()->input_msg(inner(st), slot); }
static const void* staged_output_msg(Stage* st, int slot) { return cpu()->output_msg(inner(st), slot); }
static void* staged_grad_msg(Stage* st, int gacts) { return cpu()->grad_msg(inner(st), gacts); }
static const void* staged_dx_in_msg(Stage* st, int gacts, int slot) { return cpu()->dx_in_msg(inner(st), gacts, slot); }
static void staged_upload_input(Stage* st, int slot, const void* x) { memcpy(staged_input_msg(st, slot), x, fp32_bytes(st, slot)); }
static void staged_download_output(Stage* st, int slot, void* x) { memcpy(x, staged_output_msg(st, slot), fp32_bytes(st, slot)); }
static void staged_upload_grad(Stage* st, int gacts, const void* dx) { memcpy(staged_grad_msg(st, gacts), dx, fp32_bytes(st, 0)); }
static void staged_download_dx_in(Stage* st, int gacts, void* dx) { memcpy(dx, stage_cpu_gacts(inner(st), gacts)->dx_in, fp32_bytes(st, 0)); }

static float* staged_tied_share(Stage* st, int k) { return cpu()->tied_share(inner(st), k); }
static void staged_tied_share_to_host(Stage* st, int k, float* share) { memcpy(share, staged_tied_share(st, k), st->sizes[0] * sizeof(float)); }
static void staged_wte_grad_from_host(Stage* st, int k, const float* wte) { // wte's gradient is the first tensor
    memcpy(stage_cpu_grads(inner(st), k), wte, st->sizes[0] * sizeof(float));
}
static float* staged_tied_other(Stage* st, int k) { return cpu()->tied_other(inner(st), k); }
static double staged_tied_sum(Stage* st, int k, const float* first, const float* last) { return cpu()->tied_sum(inner(st), k, first, last); }
static void staged_memory(const Stage* st, StageUnitBytes* b) { cpu()->memory(inner(st), b); }
static void staged_predict(Stage* st, int i, const AdamWConfig* opt, float lr_sum, float c) {
    inner(st)->version = st->version; // the moments' update count (the private stage's updates bypass its books)
    cpu()->predict(inner(st), i, opt, lr_sum, c);
}
static void staged_track(Stage* st, int first) { cpu()->track(inner(st), first); }
static void staged_backward_weight_alone(Stage* st, const Op* op, int slot, int gacts, int k, int stash, int dc, double* unit_sq) {
    cpu()->backward_weight_alone(inner(st), op, slot, gacts, k, stash, dc, unit_sq);
}
static void staged_head_share_sumsq(Stage* st, int k, double* out) { cpu()->head_share_sumsq(inner(st), k, out); }
static void staged_dc_correct(Stage* st, int k, float lambda) { cpu()->dc_correct(inner(st), k, lambda); }

static const StageBackend STAGED = {
    .name = "cpu-staged",
    .host_memory = 0, // pretends: its memory is reached only as a GPU's is
    .reserve = staged_reserve,
    .destroy = staged_destroy,
    .forward = staged_forward,
    .backward_input = staged_backward_input,
    .backward_weight = staged_backward_weight,
    .probs = staged_probs,
    .stash = staged_stash,
    .grad_unit_sumsq = staged_sumsq,
    .update = staged_update,
    .zero_grad = staged_zero,
    .tie_local = staged_tie_local,
    .to_host = staged_to_host,
    .from_host = staged_from_host,
    .grads_to_host = staged_grads_to_host,
    .grads_from_host = staged_grads_from_host,
    .tied_share_to_host = staged_tied_share_to_host,
    .wte_grad_from_host = staged_wte_grad_from_host,
    .msg_bytes = staged_msg_bytes,
    .input_msg = staged_input_msg,
    .output_msg = staged_output_msg,
    .grad_msg = staged_grad_msg,
    .dx_in_msg = staged_dx_in_msg,
    .upload_input = staged_upload_input,
    .download_output = staged_download_output,
    .upload_grad = staged_upload_grad,
    .download_dx_in = staged_download_dx_in,
    .tied_share = staged_tied_share,
    .tied_other = staged_tied_other,
    .tied_sum = staged_tied_sum,
    .memory = staged_memory,
    .predict = staged_predict,
    .track = staged_track,
    .backward_weight_alone = staged_backward_weight_alone,
    .head_share_sumsq = staged_head_share_sumsq,
    .dc_correct = staged_dc_correct,
};

void stage_staged_dp_average(void* comm, Stage* st, int k) {
    Stage* d = inner(st);
    comm_dp_average((Comm*)comm, stage_cpu_grads(d, k), d->num_params);
    float* head = stage_cpu_dwte_head(d, k);
    if (head) comm_dp_average((Comm*)comm, head, d->sizes[0]);
}

static void staged_create(Stage* st, const StageInit* init) {
    Stage* d = (Stage*)calloc_check(1, sizeof(Stage));
    stage_create(d, &STAGE_CPU, init);
    stage_init_common(st, init, &STAGED, d);
}

const StageDevice STAGE_CPU_STAGED = {"cpu-staged", staged_create};
