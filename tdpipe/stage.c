// A pipeline stage over its backend (see stage.h): the books of weight versions and gradient
// slots, token ids, and the host staging of messages and gradients for devices that need it.
#include "stage.h"
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"

void stage_init_common(Stage* st, const StageInit* init, const StageBackend* be, void* dev) {
    memset(st, 0, sizeof(*st));
    st->cfg = *init->cfg;
    st->range = init->range;
    st->B = init->B;
    st->T = init->T;
    st->be = be;
    st->dev = dev;
    st->num_params = gpt2_param_sizes(&st->cfg, &st->range, st->sizes);
    if (init->full || init->slice) {
        st->params = (float*)calloc_check(st->num_params, sizeof(float));
        st->adam_m = (float*)calloc_check(st->num_params, sizeof(float));
        st->adam_v = (float*)calloc_check(st->num_params, sizeof(float));
        gpt2_point_params(&st->p, st->params, st->sizes);
        if (init->full) stage_load_params(st, init->full);
        else memcpy(st->params, init->slice, st->num_params * sizeof(float));
    }
}

void stage_create(Stage* st, const StageDevice* device, const StageInit* init) {
    device->create(st, init);
}

static void grow_ints(int*** bufs, int have, int n, size_t count) {
    if (n <= have) return;
    *bufs = (int**)realloc_check(*bufs, n * sizeof(int*));
    for (int i = have; i < n; i++) (*bufs)[i] = (int*)calloc_check(count, sizeof(int));
}

// host staging: a device backend whose messages no link reaches sends and receives host copies of
// them, byte for byte (so the bits are the device's, whichever way they travel)
static int msgs_direct(const Stage* st) { return st->be->host_memory || st->device_msgs; }

static void* staging_alloc(const Stage* st, size_t bytes) {
    if (!st->be->host_alloc) return calloc_check(bytes, 1);
    return st->be->host_alloc(bytes);
}
static void staging_free(const Stage* st, void* p) {
    if (st->be->host_free) st->be->host_free(p);
    else free(p);
}

// n message buffers of `bytes` in *bufs (holding *have), grown to n; bytes 0: NULLs (a stage end
// that has no such message)
static void grow_staging_bufs(const Stage* st, void*** bufs, int have, int n, size_t bytes) {
    if (n <= have) return;
    *bufs = (void**)realloc_check(*bufs, n * sizeof(void*));
    for (int i = have; i < n; i++) (*bufs)[i] = bytes ? staging_alloc(st, bytes) : NULL;
}

static void grow_host_msgs(Stage* st) {
    if (msgs_direct(st)) return;
    size_t n = st->be->msg_bytes(st, 0);
    grow_staging_bufs(st, &st->host_in, st->n_host_slots, st->n_slots, st->range.has_embed ? 0 : n);
    grow_staging_bufs(st, &st->host_out, st->n_host_slots, st->n_slots, st->range.has_head ? 0 : n);
    grow_staging_bufs(st, &st->host_dx_in, st->n_host_slots, st->n_slots, st->range.has_embed ? 0 : n);
    grow_staging_bufs(st, &st->host_dx_out, st->n_host_gacts, st->n_gacts, st->range.has_head ? 0 : n);
    if (st->n_slots > st->n_host_slots) st->n_host_slots = st->n_slots;
    if (st->n_gacts > st->n_host_gacts) st->n_host_gacts = st->n_gacts;
}

void stage_reserve(Stage* st, int n_slots, int n_gacts, int n_grad_slots, int n_stash) {
    if (n_slots > st->n_slots) {
        grow_ints(&st->inputs, st->n_slots, n_slots, (size_t)st->B * st->T);
        grow_ints(&st->targets, st->n_slots, n_slots, (size_t)st->B * st->T);
        st->n_slots = n_slots;
    }
    if (n_gacts > st->n_gacts) st->n_gacts = n_gacts;
    if (n_grad_slots > st->n_grad_slots) st->n_grad_slots = n_grad_slots;
    if (n_stash > st->n_stash) {
        st->stash_version = (int*)realloc_check(st->stash_version, n_stash * sizeof(int));
        st->stash_ahead = (int*)realloc_check(st->stash_ahead, n_stash * sizeof(int));
        for (int i = st->n_stash; i < n_stash; i++) st->stash_version[i] = -1, st->stash_ahead[i] = 0;
        st->n_stash = n_stash;
    }
    st->be->reserve(st);
    grow_host_msgs(st);
}

void stage_reserve_sample(Stage* st) {
    if (st->sample_slot) return;
    st->sample_slot = 1;
    st->sample_ids = (int*)calloc_check(st->T, sizeof(int));
    st->be->reserve(st);
    if (!msgs_direct(st)) {
        st->host_sample[0] = staging_alloc(st, st->be->msg_bytes(st, STAGE_SAMPLE_SLOT));
        st->host_sample[1] = staging_alloc(st, st->be->msg_bytes(st, STAGE_SAMPLE_SLOT));
    }
}

static void free_bufs(void** bufs, int n) {
    if (!bufs) return;
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
}
static void free_staging_bufs(const Stage* st, void** bufs, int n) {
    if (!bufs) return;
    for (int i = 0; i < n; i++)
        if (bufs[i]) staging_free(st, bufs[i]);
    free(bufs);
}

void stage_destroy(Stage* st) {
    st->be->destroy(st);
    free_bufs((void**)st->inputs, st->n_slots);
    free_bufs((void**)st->targets, st->n_slots);
    free_staging_bufs(st, st->host_in, st->n_host_slots);
    free_staging_bufs(st, st->host_out, st->n_host_slots);
    free_staging_bufs(st, st->host_dx_in, st->n_host_slots);
    free_staging_bufs(st, st->host_dx_out, st->n_host_gacts);
    for (int i = 0; i < 2; i++)
        if (st->host_sample[i]) staging_free(st, st->host_sample[i]);
    free_staging_bufs(st, (void**)st->host_grads, st->n_host_grads);
    free_staging_bufs(st, (void**)st->host_dwte_head, st->n_host_grads);
    free_staging_bufs(st, (void**)st->host_tied, st->n_host_grads);
    free(st->sample_ids);
    free(st->stash_version);
    free(st->stash_ahead);
    free(st->params);
    free(st->adam_m);
    free(st->adam_v);
    memset(st, 0, sizeof(*st));
}

int* stage_inputs(Stage* st, int slot) { return slot == STAGE_SAMPLE_SLOT ? st->sample_ids : st->inputs[slot]; }
int* stage_targets(Stage* st, int slot) {
    if (slot == STAGE_SAMPLE_SLOT) td_fatal("stage_targets: the sample slot has no targets");
    return st->targets[slot];
}

// the stash slot holding (version, ahead), or -1 when none does
static int find_stash(const Stage* st, int version, int ahead) {
    for (int i = 0; i < st->n_stash; i++)
        if (st->stash_version[i] == version && st->stash_ahead[i] == ahead) return i;
    return -1;
}

// -1 for the current weights, the stash slot holding (version, ahead), or STAGE_WEIGHTS_GONE
static int held_weights(const Stage* st, int version, int ahead) {
    if (version == st->version && ahead == 0) return -1;
    int i = find_stash(st, version, ahead);
    return i >= 0 ? i : STAGE_WEIGHTS_GONE;
}

// the same, where they must be held
static int stash_of(const Stage* st, int version, int ahead) {
    int i = held_weights(st, version, ahead);
    if (i == STAGE_WEIGHTS_GONE)
        td_fatal("stage [%d, %d): weight version %d%s%.0d is neither current (%d) nor stashed", st->range.l0, st->range.l1, version,
                 ahead ? " extrapolated ahead by " : "", ahead, st->version);
    return i;
}

static int ahead_of(const Stage* st, const Op* op) { return st->comp ? staleness_ahead(st->comp, op) : 0; }

// the stash slot of the weights op's micro-batch runs on
static int weights_of(const Stage* st, const Op* op) { return stash_of(st, op->version, ahead_of(st, op)); }

int stage_has_weights(const Stage* st, int version, int ahead) { return held_weights(st, version, ahead) != STAGE_WEIGHTS_GONE; }

int stage_must_recompute(const Stage* st, const Op* op, int slot, int holds, int stash) {
    if (holds == slot) return 0;
    if (stash == STAGE_WEIGHTS_GONE)
        td_fatal("stage [%d, %d): the weight half of step %d micro-batch %d runs its forward again (--recompute), but its weights "
                 "(version %d) are neither current nor stashed any more",
                 st->range.l0, st->range.l1, op->step, op->mb, op->version);
    return 1;
}

float stage_forward(Stage* st, const Op* op, int slot, int targets_valid) {
    if (!msgs_direct(st) && !st->range.has_embed)
        st->be->upload_input(st, slot, slot == STAGE_SAMPLE_SLOT ? st->host_sample[0] : st->host_in[slot]);
    return st->be->forward(st, op, slot, weights_of(st, op), targets_valid);
}

void stage_backward_input(Stage* st, const Op* op, int slot, int gacts, float dloss) {
    if (!msgs_direct(st) && !st->range.has_head) st->be->upload_grad(st, gacts, st->host_dx_out[gacts]);
    st->be->backward_input(st, op, slot, gacts, weights_of(st, op), dloss);
}

void stage_backward_weight(Stage* st, const Op* op, int slot, int gacts, double* unit_sq, const GPT2UnitHook* hook) {
    int k = stage_grad_slot(st, op->step);
    int dc = st->comp && staleness_applies(st->comp, STALE_DCASGD, op);
    // the weights, for a backend that runs the forward again; DC-ASGD reads them always, so it needs them held
    int stash = dc ? weights_of(st, op) : held_weights(st, op->version, ahead_of(st, op));
    if (!dc && !unit_sq) {
        st->be->backward_weight(st, op, slot, gacts, k, stash, hook);
        return;
    }
    if (!st->be->backward_weight_alone) td_fatal("the %s backend cannot compute a micro-batch's gradient alone (DC-ASGD, --gns)", st->be->name);
    st->be->backward_weight_alone(st, op, slot, gacts, k, stash, dc, unit_sq);
}

int stage_grads_readable_during_backward(const Stage* st) { return st->be->host_memory; }

void stage_gns_units(Stage* st, int k, double* out) {
    int L = st->cfg.num_layers;
    memset(out, 0, (L + 3) * sizeof(double));
    st->be->grad_unit_sumsq(st, k, STAGE_SUMSQ_UNKNOWN, out);
    if (st->range.has_head) st->be->head_share_sumsq(st, k, &out[L + 2]); // (at P = 1 too: the shares are apart until post sums them)
}

void stage_backward(Stage* st, const Op* op, int slot, float dloss) {
    stage_backward_input(st, op, slot, 0, dloss);
    stage_backward_weight(st, op, slot, 0, NULL, NULL);
}

void stage_finish(Stage* st) {
    if (st->be->finish) st->be->finish(st);
}

void stage_probs(Stage* st, int slot, int t, float* out) {
    if (!st->range.has_head) td_fatal("stage_probs: only the last stage has the LM head");
    st->be->probs(st, slot, t, out);
}

// ---- messages --------------------------------------------------------------------------------------

size_t stage_msg_bytes(const Stage* st, int slot) { return st->be->msg_bytes(st, slot); }

void* stage_input_buf(Stage* st, int slot) {
    if (msgs_direct(st)) return st->be->input_msg(st, slot);
    return slot == STAGE_SAMPLE_SLOT ? st->host_sample[0] : st->host_in[slot];
}

const void* stage_output_buf(Stage* st, int slot) {
    if (msgs_direct(st)) return st->be->output_msg(st, slot);
    void* host = slot == STAGE_SAMPLE_SLOT ? st->host_sample[1] : st->host_out[slot];
    st->be->download_output(st, slot, host);
    return host;
}

void* stage_grad_buf(Stage* st, int gacts) { return msgs_direct(st) ? st->be->grad_msg(st, gacts) : st->host_dx_out[gacts]; }

const void* stage_dx_in_buf(Stage* st, int gacts, int slot) {
    if (msgs_direct(st)) return st->be->dx_in_msg(st, gacts, slot);
    st->be->download_dx_in(st, gacts, st->host_dx_in[slot]);
    return st->host_dx_in[slot];
}

int stage_keeps_device_msgs(const Stage* st) { return !st->be->host_memory && st->be->input_msg; }

void stage_use_device_msgs(Stage* st) {
    if (!stage_keeps_device_msgs(st)) td_fatal("stage_use_device_msgs: the %s backend keeps no pipeline messages of its own", st->be->name);
    st->device_msgs = 1;
    st->be->reserve(st); // the device-side send buffers
}

void stage_use_device_tied(Stage* st) {
    if (!st->device_msgs) td_fatal("stage_use_device_tied: the stage's messages are not in device memory (stage_use_device_msgs)");
    if (st->range.has_embed == st->range.has_head) td_fatal("stage_use_device_tied: only the first or the last stage of a pipeline exchanges tied shares");
    st->device_tied = 1;
    st->be->reserve(st); // the device-side receive buffers of the other end's share
}

// ---- the gradient cache -----------------------------------------------------------------------------

int stage_grad_slot(const Stage* st, int step) { return step % st->n_grad_slots; }

static int tied_direct(const Stage* st) { return st->be->host_memory || st->device_tied; }

// room for every gradient slot's host copies (a device backend staging through host memory); each
// copy is allocated when first needed
static void host_slots_grow(Stage* st) {
    if (st->n_host_grads >= st->n_grad_slots) return;
    int n = st->n_grad_slots;
    st->host_grads = (float**)realloc_check(st->host_grads, n * sizeof(float*));
    st->host_dwte_head = (float**)realloc_check(st->host_dwte_head, n * sizeof(float*));
    st->host_tied = (float**)realloc_check(st->host_tied, n * sizeof(float*));
    for (int i = st->n_host_grads; i < n; i++) st->host_grads[i] = st->host_dwte_head[i] = st->host_tied[i] = NULL;
    st->n_host_grads = n;
}

static void host_grads_alloc(Stage* st, int k) {
    host_slots_grow(st);
    if (!st->host_grads[k]) {
        st->host_grads[k] = (float*)staging_alloc(st, st->num_params * sizeof(float));
        if (st->range.has_head) st->host_dwte_head[k] = (float*)staging_alloc(st, st->sizes[0] * sizeof(float));
    }
}

float* stage_host_grads(Stage* st, int k, float** dwte_head) {
    if (st->be->host_memory) return st->be->host_grads(st, k, dwte_head);
    host_grads_alloc(st, k);
    st->be->grads_to_host(st, k, st->host_grads[k], st->host_dwte_head[k]);
    if (dwte_head) *dwte_head = st->host_dwte_head[k];
    return st->host_grads[k];
}

void stage_host_grads_done(Stage* st, int k) {
    if (st->be->host_memory) return;
    st->be->grads_from_host(st, k, st->host_grads[k], st->host_dwte_head[k]);
}

void stage_dp_average_host(void* comm, Stage* st, int k) {
    float* dwte_head;
    float* grads = stage_host_grads(st, k, &dwte_head);
    comm_dp_average((Comm*)comm, grads, st->num_params);
    if (dwte_head) comm_dp_average((Comm*)comm, dwte_head, st->sizes[0]);
    stage_host_grads_done(st, k);
}

double stage_tie_local(Stage* st, int k) { return st->be->tie_local(st, k); }

// slot k's two shares on the host: this end's (Vp*C), then the other end's
static float* host_tied_at(Stage* st, int k) {
    host_slots_grow(st);
    if (!st->host_tied[k]) st->host_tied[k] = (float*)staging_alloc(st, 2 * st->sizes[0] * sizeof(float));
    return st->host_tied[k];
}

// Through host memory (a device backend whose tied shares no link reaches), this end's share goes down
// when it is sent and wte's summed gradient comes back up: only those Vp*C floats cross, not the slot;
// the device does not touch the share in between (every backward of its step has run).
float* stage_tied_share(Stage* st, int k) {
    if (tied_direct(st)) return st->be->tied_share(st, k);
    float* own = host_tied_at(st, k);
    st->be->tied_share_to_host(st, k, own);
    return own;
}

float* stage_tied_other(Stage* st, int k) {
    if (tied_direct(st)) return st->be->tied_other(st, k);
    return host_tied_at(st, k) + st->sizes[0];
}

double stage_tied_sum(Stage* st, int k) {
    int first = st->range.has_embed; // the encoder's share comes first on both ends: bitwise equal copies
    float* other = stage_tied_other(st, k);
    if (tied_direct(st)) {
        float* own = st->be->tied_share(st, k);
        return st->be->tied_sum(st, k, first ? own : other, first ? other : own);
    }
    float* own = host_tied_at(st, k); // sent from here at stage_tied_share, summed in place now it has left
    for (size_t i = 0; i < st->sizes[0]; i++) own[i] = first ? own[i] + other[i] : other[i] + own[i];
    st->be->wte_grad_from_host(st, k, own);
    return STAGE_SUMSQ_UNKNOWN; // (a device backend's copy: the device reduces its own)
}

void stage_grad_unit_sumsq(Stage* st, int k, double wte_sq, double* out) { st->be->grad_unit_sumsq(st, k, wte_sq, out); }

int stage_slices(const Stage* st, StageSlice* out) {
    size_t off[GPT2_NUM_PARAM_TENSORS + 1] = {0};
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) off[i + 1] = off[i] + st->sizes[i];
    int n = 0, Ls = st->range.l1 - st->range.l0;
    if (st->range.has_embed) // unit 0: wte, wpe
        for (int i = 0; i < 2; i++) out[n++] = (StageSlice){0, i, off[i], st->sizes[i]};
    for (int l = 0; l < Ls; l++) // unit 1 + layer: its slice of the twelve per-layer tensors
        for (int i = 2; i < 14; i++) {
            size_t per_layer = st->sizes[i] / Ls;
            out[n++] = (StageSlice){1 + st->range.l0 + l, i, off[i] + l * per_layer, per_layer};
        }
    if (st->range.has_head) // unit L + 1: lnfw, lnfb
        for (int i = 14; i < 16; i++) out[n++] = (StageSlice){1 + st->cfg.num_layers, i, off[i], st->sizes[i]};
    return n;
}

float stage_grad_norm_from_units(const double* units, int n_units) {
    double total = 0.0;
    for (int i = 0; i < n_units; i++) total += units[i];
    return (float)sqrt(total);
}

void stage_update(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float grad_scale) {
    if (staleness_second_order(st->comp)) {
        st->be->track(st, st->tracked == 0);
        if (st->tracked < 2) st->tracked++;
    }
    st->be->update(st, k, opt, lr, t, grad_scale);
    st->version++;
}

void stage_zero_grad(Stage* st, int k) { st->be->zero_grad(st, k); }

// ---- weight versions and host copies -----------------------------------------------------------------

// a free stash slot, booked for (the current version, ahead)
static int take_stash(Stage* st, int ahead) {
    for (int i = 0; i < st->n_stash; i++)
        if (st->stash_version[i] < 0) {
            st->stash_version[i] = st->version;
            st->stash_ahead[i] = ahead;
            return i;
        }
    td_fatal("stage [%d, %d): no free stash slot for version %d (%d slots)", st->range.l0, st->range.l1, st->version, st->n_stash);
}

void stage_stash_current(Stage* st) { st->be->stash(st, take_stash(st, 0)); }

void stage_release_stash(Stage* st, int version, int ahead) {
    int i = find_stash(st, version, ahead);
    if (i >= 0) st->stash_version[i] = -1, st->stash_ahead[i] = 0;
}

void stage_use_compensation(Stage* st, const StaleComp* comp) {
    unsigned m = comp ? comp->methods : STALE_NONE;
    if (((m & STALE_PREDICT) && !st->be->predict) || (staleness_second_order(comp) && !st->be->track) ||
        ((m & STALE_DCASGD) && !st->be->backward_weight_alone))
        td_fatal("--stale-comp %s: the %s backend has no kernels for it", staleness_name(m), st->be->name);
    st->comp = comp;
}

void stage_predict(Stage* st, int ahead, const AdamWConfig* opt, float lr_sum) {
    if (ahead <= 0 || st->version == 0) td_fatal("stage_predict: %d updates ahead of version %d: nothing to extrapolate", ahead, st->version);
    // the change between the last two updates needs two of them seen in this chunk
    st->be->predict(st, take_stash(st, ahead), opt, lr_sum, st->tracked >= 2 ? staleness_curvature(st->comp, ahead) : 0.0f);
}

void stage_trajectory_reset(Stage* st) { st->tracked = 0; }

void stage_dc_correct(Stage* st, int k) { st->be->dc_correct(st, k, st->comp->dc_lambda); }

void stage_discard(Stage* st) {
    for (int i = 0; i < st->n_stash; i++) st->stash_version[i] = -1, st->stash_ahead[i] = 0;
    for (int k = 0; k < st->n_grad_slots; k++) stage_zero_grad(st, k);
}

void stage_to_host(Stage* st) {
    if (st->be->to_host) st->be->to_host(st);
}
void stage_from_host(Stage* st) {
    if (st->be->from_host) st->be->from_host(st);
}

void stage_snapshot_take(Stage* st, StageSnapshot* snap) {
    size_t n = st->num_params;
    if (snap->cap < 3 * n) {
        free(snap->state);
        snap->state = (float*)malloc_check(3 * n * sizeof(float));
        snap->cap = 3 * n;
    }
    stage_to_host(st);
    memcpy(snap->state, st->params, n * sizeof(float));
    memcpy(snap->state + n, st->adam_m, n * sizeof(float));
    memcpy(snap->state + 2 * n, st->adam_v, n * sizeof(float));
    snap->version = st->version;
}
void stage_snapshot_restore(Stage* st, const StageSnapshot* snap) {
    size_t n = st->num_params;
    memcpy(st->params, snap->state, n * sizeof(float));
    memcpy(st->adam_m, snap->state + n, n * sizeof(float));
    memcpy(st->adam_v, snap->state + 2 * n, n * sizeof(float));
    st->version = snap->version;
    stage_from_host(st);
}
void stage_snapshot_free(StageSnapshot* snap) {
    free(snap->state);
    memset(snap, 0, sizeof(*snap));
}
double stage_snapshot_bytes(const Stage* st) { return 3.0 * (double)st->num_params * sizeof(float); }

void stage_load_params(Stage* st, const float* full) { gpt2_slice_params(&st->cfg, &st->range, full, st->params); }
void stage_store_params(const Stage* st, float* full) { gpt2_unslice_params(&st->cfg, &st->range, st->params, full); }

static StageUnitBytes unit_bytes(const Stage* st) {
    StageUnitBytes b = {0.0, 0.0, 0.0, 0.0, 0.0};
    if (st->be->memory) st->be->memory(st, &b);
    return b;
}

StageMemory stage_memory(const Stage* st) {
    StageUnitBytes b = unit_bytes(st);
    StageMemory m = {st->n_slots, st->n_stash, st->n_grad_slots, b.slot * st->n_slots + b.gacts * st->n_gacts + b.once, b.stash * st->n_stash,
                     b.grad_slot * st->n_grad_slots};
    return m;
}

double stage_slot_bytes(const Stage* st) { return unit_bytes(st).slot; }
double stage_once_bytes(const Stage* st) { return unit_bytes(st).once; }

// second-order prediction's trajectory: two fp32 copies of the weights' size
static double trajectory_bytes(const Stage* st) {
    return staleness_second_order(st->comp) ? 8.0 * (double)st->num_params : 0.0;
}

double stage_planned_device_bytes(const Stage* st, int slots, int gacts, int grad_slots, int stashes) {
    if (st->be->host_memory || !st->be->memory) return 0.0;
    StageUnitBytes b = unit_bytes(st);
    return b.slot * slots + b.gacts * gacts + b.once + b.stash * stashes + b.grad_slot * (grad_slots > 1 ? grad_slots - 1 : 0) + trajectory_bytes(st);
}

double stage_planned_bytes(const Stage* st, int slots, int gacts, int grad_slots, int stashes) {
    double host = st->params ? 12.0 * (double)st->num_params : 0.0;
    StageUnitBytes b = {0.0, 0.0, 0.0, 0.0, 0.0};
    if (st->be->memory && st->be->host_memory) {
        b = unit_bytes(st);
        b.stash = 4.0 * (double)st->num_params; // a stash's bytes, allocated or not yet
    }
    return host + b.slot * slots + b.gacts * gacts + b.once + b.grad_slot * grad_slots + b.stash * stashes + (st->be->host_memory ? trajectory_bytes(st) : 0.0);
}
