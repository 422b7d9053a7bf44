// The "staged" backend: the CPU model behind the StageBackend interface, with its weights,
// gradients and activations in a second, private Stage (the "device"). It runs exactly the code
// path a GPU stage takes through the executor (host staging of messages and gradients), so the
// tests can check that path bitwise on a machine without a GPU (--device cpu-staged). It keeps
// pipeline messages in the "device" too, as a GPU stage does when NCCL moves them.
#include "stage_staged.h"
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"

typedef struct {
    Stage inner;      // the "device": model, slots, stashes and gradient ring
    float** dx_out;   // (n_gacts)[B*T*C] received gradients of the stage output (device messages)
    float** dx_send;  // (n_slots)[B*T*C] gradients of the stage input being sent (device messages)
    float** tied;     // (n_grad_slots)[Vp*C] the other end's share of wte's gradient (device messages)
    int n_dx_out, n_dx_send, n_tied;
} Staged;

static Staged* staged_of(const Stage* s) { return (Staged*)s->dev; }
static Stage* inner(const Stage* s) { return &staged_of(s)->inner; }
static size_t btc(const Stage* s) { return (size_t)s->B * s->T * s->cfg.channels; }

// n buffers of `floats` floats in *bufs (holding *have), grown to n
static void grow_msgs(float*** bufs, int* have, int n, size_t floats) {
    if (n <= *have) return;
    *bufs = (float**)realloc(*bufs, n * sizeof(float*));
    if (!*bufs) td_fatal("out of memory for %d message buffers", n);
    for (int i = *have; i < n; i++) (*bufs)[i] = (float*)calloc_check(floats, sizeof(float));
    *have = n;
}

// the private stage follows the slots and buffers the executor reserved on the outer one
static void grow(Stage* s) {
    stage_reserve(inner(s), s->n_slots, s->n_gacts, s->n_grad_slots, s->n_stash);
    if (!s->device_msgs) return;
    Staged* d = staged_of(s);
    grow_msgs(&d->dx_out, &d->n_dx_out, s->n_gacts, btc(s));
    grow_msgs(&d->dx_send, &d->n_dx_send, s->n_slots, btc(s));
    if (s->device_tied) grow_msgs(&d->tied, &d->n_tied, s->n_grad_slots, s->sizes[0]);
}

// the inner stage's version of the weights `stash` names (-1: current)
static int version_of(const Stage* s, int stash) { return stash < 0 ? inner(s)->version : inner(s)->stash_version[stash]; }

static float staged_forward(Stage* s, int slot, int stash, int targets_valid) {
    grow(s);
    GPT2Acts* out = &s->acts[slot];
    GPT2Acts* in = &inner(s)->acts[slot];
    memcpy(in->inputs, out->inputs, sizeof(int) * s->B * s->T); // "upload"
    memcpy(in->targets, out->targets, sizeof(int) * s->B * s->T);
    // a later stage's input: uploaded from the host slot, or already received into the device's
    if (out->x_in && !s->range.has_embed && !s->device_msgs) memcpy(in->x_in, out->x_in, btc(s) * sizeof(float));
    return stage_forward(inner(s), slot, version_of(s, stash), targets_valid);
}

static void staged_backward_input(Stage* s, int slot, int gacts, int stash, const float* dx_out, float dloss) {
    grow(s);
    if (!dx_out && !s->range.has_head) dx_out = staged_of(s)->dx_out[gacts]; // received on the device
    stage_backward_input(inner(s), slot, gacts, version_of(s, stash), dx_out, dloss);
}

// the device copy of the weights into stash slot i, booked on the inner stage under its version
static void staged_stash(Stage* s, int i) {
    grow(s);
    stage_stash_into(inner(s), i);
}

static void staged_use_grad_slot(Stage* s, int k) {
    grow(s);
    stage_use_grad_slot(inner(s), k);
}

static void staged_backward_weight(Stage* s, int slot, int gacts) { stage_backward_weight(inner(s), slot, gacts); }
static void staged_tie(Stage* s) { stage_tie_embedding_local(inner(s)); }
static void staged_sumsq(const Stage* s, double* out) { stage_grad_unit_sumsq(inner(s), out); }
static void staged_update(Stage* s, const AdamWConfig* opt, float lr, int t, float scale) { stage_update(inner(s), opt, lr, t, scale); }
static void staged_zero(Stage* s) { stage_zero_grad(inner(s)); }

static void staged_to_host(Stage* s) {
    size_t bytes = s->num_params * sizeof(float);
    memcpy(s->params, inner(s)->params, bytes);
    memcpy(s->adam_m, inner(s)->adam_m, bytes);
    memcpy(s->adam_v, inner(s)->adam_v, bytes);
}

static void staged_from_host(const Stage* s) {
    size_t bytes = s->num_params * sizeof(float);
    memcpy(inner(s)->params, s->params, bytes);
    memcpy(inner(s)->adam_m, s->adam_m, bytes);
    memcpy(inner(s)->adam_v, s->adam_v, bytes);
    inner(s)->version = s->version;
}

static void staged_output(Stage* s, int slot, float* host) {
    memcpy(host, gpt2_stage_output(&s->cfg, &s->range, &inner(s)->acts[slot]), btc(s) * sizeof(float));
}

static void staged_dx_in(Stage* s, int gacts, float* host) { memcpy(host, inner(s)->gacts[gacts].dx_in, btc(s) * sizeof(float)); }

static void staged_grads_to_host(Stage* s) {
    memcpy(s->grads, inner(s)->grads, s->num_params * sizeof(float));
    if (s->dwte_head) memcpy(s->dwte_head, inner(s)->dwte_head, s->sizes[0] * sizeof(float));
}

static void staged_grads_from_host(const Stage* s) { memcpy(inner(s)->grads, s->grads, s->num_params * sizeof(float)); }

static size_t staged_msg_bytes(const Stage* s) { return btc(s) * sizeof(float); }
static void* staged_input_msg(Stage* s, int slot) {
    grow(s);
    return inner(s)->acts[slot].x_in;
}
static const void* staged_output_msg(Stage* s, int slot) { return gpt2_stage_output(&s->cfg, &s->range, &inner(s)->acts[slot]); }
static void* staged_grad_msg(Stage* s, int gacts) {
    grow(s);
    return staged_of(s)->dx_out[gacts];
}
static const void* staged_dx_in_msg(Stage* s, int gacts, int slot) {
    grow(s);
    float* dst = staged_of(s)->dx_send[slot];
    memcpy(dst, inner(s)->gacts[gacts].dx_in, btc(s) * sizeof(float));
    return dst;
}

static float* staged_tied_share(Stage* s) { return s->range.has_embed ? inner(s)->g.wte : inner(s)->dwte_head; }
static float* staged_tied_other(Stage* s, int k) {
    grow(s);
    return staged_of(s)->tied[k];
}
static void staged_tied_sum(Stage* s, const float* first, const float* last) {
    float* wte = inner(s)->g.wte;
    for (size_t i = 0; i < s->sizes[0]; i++) wte[i] = first[i] + last[i];
}

static const StageBackend STAGED = {"cpu-staged", staged_forward, staged_backward_input, staged_backward_weight, staged_tie,
                                    staged_sumsq, staged_update, staged_zero, staged_to_host, staged_from_host,
                                    staged_output, staged_dx_in, staged_grads_to_host, staged_grads_from_host,
                                    staged_stash, staged_use_grad_slot, staged_msg_bytes, staged_input_msg,
                                    staged_output_msg, staged_grad_msg, staged_dx_in_msg, staged_tied_share,
                                    staged_tied_other, staged_tied_sum, NULL};

void stage_staged_dp_average(void* comm, Stage* s) {
    Stage* d = inner(s);
    comm_dp_average((Comm*)comm, d->grads, d->num_params);
    if (d->dwte_head) comm_dp_average((Comm*)comm, d->dwte_head, d->sizes[0]);
}

void stage_init_staged(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, const float* full) {
    Staged* d = (Staged*)calloc_check(1, sizeof(Staged));
    stage_init(&d->inner, cfg, r, B, T, 1);
    stage_load_params(&d->inner, full);
    stage_init_backend(s, cfg, r, B, T, 1, &STAGED, d);
    stage_load_params(s, full);
}

void stage_free_staged(Stage* s) {
    Staged* d = staged_of(s);
    stage_free(s);
    stage_free(&d->inner);
    for (int i = 0; i < d->n_dx_out; i++) free(d->dx_out[i]);
    for (int i = 0; i < d->n_dx_send; i++) free(d->dx_send[i]);
    for (int k = 0; k < d->n_tied; k++) free(d->tied[k]);
    free(d->dx_out);
    free(d->dx_send);
    free(d->tied);
    free(d);
}
