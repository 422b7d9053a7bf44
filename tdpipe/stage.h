// A pipeline stage: the model's layer range [l0, l1) with its weights (and stashed older versions),
// the gradient cache (a ring of accumulation slots keyed by step), AdamW moments and the
// activations of its in-flight micro-batches. P = 1: the one stage is the model.
#pragma once
#include "llmc/adamw.h"
#include "llmc/gpt2.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct Stage Stage;

// A device backend for a stage's compute. A stage without one computes on the CPU (the reference).
// The CUDA backend (train_tdpipe.cu, the one file nvcc builds) fills one in; its model lives on the
// device, the Stage keeps the host side: token ids, the fp32 weights and AdamW moments between
// stage_to_host / stage_from_host, and the gradient for host-side exchanges. The Stage keeps the
// books of stashes (which slot holds which version) and of the gradient ring; the backend keeps
// their contents on the device. `stash` arguments: -1 for the current weights, else a stash slot.
typedef struct {
    const char* name;
    float (*forward)(Stage* s, int slot, int stash, int targets_valid);
    void (*backward_input)(Stage* s, int slot, int gacts, int stash, const float* dx_out, float dloss);
    void (*backward_weight)(Stage* s, int slot, int gacts);
    void (*tie_embedding_local)(Stage* s);
    void (*grad_unit_sumsq)(const Stage* s, double* out);
    void (*update)(Stage* s, const AdamWConfig* opt, float lr, int t, float grad_scale);
    void (*zero_grad)(Stage* s);
    void (*to_host)(Stage* s);         // weights and AdamW moments -> params, adam_m, adam_v
    void (*from_host)(const Stage* s); // the reverse (after a resume)
    void (*output)(Stage* s, int slot, float* host);  // (B, T, C) the stage output of slot
    void (*dx_in)(Stage* s, int gacts, float* host);  // (B, T, C) the gradient of the stage input
    void (*grads_to_host)(Stage* s);         // the active gradient (and dwte_head) -> grads, dwte_head
    void (*grads_from_host)(const Stage* s); // grads -> the device (after host-side exchanges)
    void (*stash)(Stage* s, int i);          // the current weights -> stash slot i (s->n_stash slots)
    void (*use_grad_slot)(Stage* s, int k);  // backward accumulates into gradient slot k (s->n_grad_slots)
    // pipeline messages kept in the backend's memory, moved by a CommLink (after stage_use_device_msgs)
    size_t (*msg_bytes)(const Stage* s);                     // one (B, T, C) activation or gradient message
    void* (*input_msg)(Stage* s, int slot);                  // slot's stage input: forward reads it there
    const void* (*output_msg)(Stage* s, int slot);           // slot's stage output
    void* (*grad_msg)(Stage* s, int gacts);                  // dL/d(output): backward_input (dx_out NULL) reads it there
    const void* (*dx_in_msg)(Stage* s, int gacts, int slot); // dL/d(input) of gacts, copied into slot's send buffer
    // the tied embedding's gradient shares in the backend's memory (first and last stage, device messages)
    float* (*tied_share)(Stage* s);        // (Vp, C) this end's share in the active slot: wte's (first) or the LM head's (last)
    float* (*tied_other)(Stage* s, int k); // (Vp, C) where the other end's share for gradient slot k is received
    void (*tied_sum)(Stage* s, const float* first, const float* last); // wte's gradient (active slot) = first + last
    void (*finish)(Stage* s); // waits until the compute enqueued so far has run (NULL: calls return when done)
} StageBackend;

struct Stage {
    GPT2Config cfg;
    GPT2Range range;
    int B, T;
    const StageBackend* be; // NULL: the CPU
    int device_msgs;        // 1: pipeline messages come and go in the backend's memory (the *_msg calls)
    int device_tied;        // 1: so do the tied embedding's gradient shares (the stage_tied_* calls)
    void* dev;              // the backend's state
    float** out_host;       // (n_slots)[B*T*C] with a backend: host copies of stage outputs being sent
    size_t sizes[GPT2_NUM_PARAM_TENSORS]; // floats per tensor of this stage
    size_t num_params;
    float* params;       // (num_params) fp32 master weights
    ParameterTensors p;  // views into params
    int version;         // optimizer updates applied to params
    float* grads;        // (num_params) the active gradient slot: accumulated over a step's micro-batches
    ParameterTensors g;
    float* dwte_head;    // (Vp, C) the LM head's share of wte's gradient (last stage), or NULL
    float* adam_m;       // (num_params)
    float* adam_v;       // (num_params)
    int n_slots;
    GPT2Acts* acts;      // (n_slots) activations of micro-batches in flight
    int n_gacts;
    GPT2GradActs* gacts; // (n_gacts) gradients of activations between the two halves of backward
    // the gradient cache: n_grad_slots accumulation slots; step t accumulates into slot t % n_grad_slots
    int n_grad_slots;
    float** grad_slots;      // (n_grad_slots)[num_params]
    float** dwte_head_slots; // (n_grad_slots)[Vp*C] or NULLs
    // weight stashing: copies of older versions still referenced by in-flight micro-batches
    int n_stash;
    int* stash_version;      // (n_stash) version held, -1 when free
    float** stash;           // (n_stash)[num_params] on the CPU; NULLs with a backend (it holds them)
    ParameterTensors* stash_views; // (n_stash)
};

// one activation slot, one gradient slot, no stash: what a single process running its
// micro-batches one after another needs; stage_reserve adds the pipeline's extra buffers
void stage_init(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, int n_slots);
// the same for a stage whose compute runs on a device backend: host activation slots hold only
// the token ids (the activations live on the device)
void stage_init_backend(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, int n_slots, const StageBackend* be, void* dev);
// grows to n_slots activation slots, n_gacts activation-gradient buffers, n_grad_slots gradient
// slots and n_stash weight stashes (never shrinks)
void stage_reserve(Stage* s, int n_slots, int n_gacts, int n_grad_slots, int n_stash);
// points grads / g / dwte_head at gradient slot k
void stage_use_grad_slot(Stage* s, int k);
// the weights of `version`: the current ones or a stash (td_fatal if neither holds it)
const ParameterTensors* stage_weights(const Stage* s, int version);
// copies the current weights into a free stash slot (before an update, when in-flight
// micro-batches still need this version for their backward)
void stage_stash_current(Stage* s);
// a CPU stage's current weights into stash slot i, booked under the current version
void stage_stash_into(Stage* s, int i);
void stage_release_stash(Stage* s, int version);
void stage_free(Stage* s);
// copies this stage's slice of a full model's parameters (laid out for [0, L) with embed and head)
void stage_load_params(Stage* s, const float* full);
// writes this stage's parameters into their place in a full-model buffer (the inverse)
void stage_store_params(const Stage* s, float* full);

// forward of the micro-batch in slot with the weights of `version` (the current ones, or a stash:
// tdpipe's forwards may run on an older version); returns its mean loss on the last stage when
// targets_valid (0 elsewhere)
float stage_forward(Stage* s, int slot, int version, int targets_valid);
// the input-gradient half of backward of slot with the weights of `version`, into activation-
// gradient buffer gacts; the weight-gradient half into the active gradient slot
void stage_backward_input(Stage* s, int slot, int gacts, int version, const float* dx_out, float dloss);
void stage_backward_weight(Stage* s, int slot, int gacts);
// weights and AdamW moments into params / adam_m / adam_v (a device backend keeps them on the device)
void stage_to_host(Stage* s);
void stage_from_host(Stage* s);
// (B, T, C) the stage output of slot, in host memory that stays valid until the slot is reused
const float* stage_output(Stage* s, int slot);
// dst (B, T, C) <- the gradient of the stage input from activation-gradient buffer gacts
void stage_dx_in(Stage* s, int gacts, float* dst);
// Pipeline messages in a device backend's own memory, for a CommLink that moves them device to
// device (NCCL): the executor receives a stage input straight into stage_input_msg and the gradient
// of the output into stage_grad_msg (then passes dx_out = NULL), and sends from stage_output_msg and
// stage_dx_in_msg. Every call is fatal on a stage that has no such backend.
int stage_has_device_msgs(const Stage* s);
void stage_use_device_msgs(Stage* s);
size_t stage_msg_bytes(const Stage* s);
void* stage_input_msg(Stage* s, int slot);
const void* stage_output_msg(Stage* s, int slot);
void* stage_grad_msg(Stage* s, int gacts);
const void* stage_dx_in_msg(Stage* s, int gacts, int slot);
// The tied embedding's exchange between the first and last stage with device messages: this end's
// share of wte's gradient (the encoder's on the first stage, the LM head's on the last) is sent from
// stage_tied_share, the other's received into stage_tied_other(k); stage_tied_sum then makes wte's
// gradient in slot k the first stage's share + the last stage's on both ends (bitwise equal copies).
// Slot k must be the active one (stage_use_grad_slot). Both ends must agree to use it (a collective
// choice: one end on the device and the other on the host would wait for each other forever).
void stage_use_device_tied(Stage* s);
float* stage_tied_share(Stage* s);
float* stage_tied_other(Stage* s, int k);
void stage_tied_sum(Stage* s, int k);
// returns when the compute given to the stage's device so far has run: an op's measured time is then
// its compute, not the time to enqueue it (a no-op on the CPU)
void stage_finish(Stage* s);
// host staging of the gradient around exchanges over MPI (no-ops on the CPU)
void stage_grads_to_host(Stage* s);
void stage_grads_from_host(Stage* s);
// the tied embedding on host memory: grads->wte += dwte_head
void stage_tie_embedding_host(Stage* s);
// both halves of backward of the micro-batch in slot; dx_out is the gradient of the stage output
// (NULL on the last stage); dloss the weight of each token's loss
void stage_backward(Stage* s, int slot, const float* dx_out, float dloss);
// the tied embedding on one process (P = 1): wte's gradient = encoder share + LM-head share
void stage_tie_embedding_local(Stage* s);
// sums of squares of the gradient per unit, in model order: unit 0 = embeddings (wte, wpe), then one
// per layer, then the head (lnfw, lnfb). Writes units [first_unit(s), ...) of `out` (L + 2 entries).
void stage_grad_unit_sumsq(const Stage* s, double* out);
// AdamW on every tensor with the clipping scale; t is the 1-based step
void stage_update(Stage* s, const AdamWConfig* opt, float lr, int t, float grad_scale);
void stage_zero_grad(Stage* s);

// global norm from every unit's sum of squares (L + 2 of them), folded in model order
float grad_norm_from_units(const double* units, int n_units);

#ifdef __cplusplus
}
#endif
