// A pipeline stage: the model's layer range [l0, l1) on one device, with what the pipeline keeps
// around it: activation slots of micro-batches in flight, weight stashes, the gradient cache (a ring
// of accumulation slots keyed by step) and AdamW's moments. P = 1: the one stage is the whole model.
// Every device (the CPU, CUDA, cpu-staged, synthetic compute) is a StageBackend behind these calls;
// where bytes live is the backend's business and this file's, never the executor's.
#pragma once
#include "llmc/adamw.h"
#include "llmc/gpt2.h"
#include "tdpipe/schedule.h"
#include "tdpipe/staleness.h"
#ifdef __cplusplus
extern "C" {
#endif

// Terms, as everywhere in tdpipe/:
//   slot     an activation slot: the tensors of one micro-batch in flight on this stage, from its
//            forward to its backward (0 <= slot < n_slots), or STAGE_SAMPLE_SLOT (one row, sampling)
//   gacts    an activation-gradient buffer: what the input-gradient half of backward leaves for the
//            weight-gradient half (one per slot under zero-bubble's split backward, else one)
//   version  the number of optimizer updates applied to a set of weights
//   stash    a copy of an older weight version that an in-flight micro-batch still needs, or (weight
//            prediction) a version extrapolated `ahead` updates along AdamW's direction
//   k        a gradient slot of the cache: step t accumulates into k = t % n_grad_slots
//   share    the tied embedding's gradient on one end: the encoder's (first stage, in wte's
//            gradient) or the LM head's (last stage, dwte_head); both ends apply first + last
#define STAGE_SAMPLE_SLOT (-1)
#define STAGE_WEIGHTS_GONE (-3) // a weight half's weights are neither current nor stashed (its input half read them last)

typedef struct Stage Stage;

// the bytes of one of each of a backend's buffers, allocated or not yet: stage_memory and the plans
// before a run (stage_planned_bytes, stage_planned_device_bytes) multiply them by the counts
typedef struct {
    double slot;      // one activation slot (a micro-batch's forward state)
    double gacts;     // one activation-gradient buffer
    double stash;     // one weight stash (the CPU: the average over its stashes of those allocated so far)
    double grad_slot; // one gradient slot, the head's wte share included
    double once;      // held once whatever the counts: the working set of activations under recomputation
} StageUnitBytes;

// A device. Compute calls name the weights by stash (-1: the current weights, else a stash slot)
// and the gradient by k; stage.c turns versions and steps into those. op is what the schedule runs
// (synthetic compute times it; real devices ignore it). Buffers named *_msg live in the backend's
// memory; host_memory says whether MPI may read and write them directly.
typedef struct {
    const char* name;
    int host_memory; // 1: buffers are host memory (the CPU); 0: the device's own (CUDA; cpu-staged pretends)
    void (*reserve)(Stage* st);   // grow to st->n_slots, n_gacts, n_grad_slots, n_stash (and the sample slot)
    void (*destroy)(Stage* st);   // free the backend's state (the Stage's own arrays are stage.c's)
    // compute; forward reads the slot's tokens (stage_inputs, stage_targets) and, off the first stage, its input_msg
    float (*forward)(Stage* st, const Op* op, int slot, int stash, int targets_valid);
    void (*backward_input)(Stage* st, const Op* op, int slot, int gacts, int stash, float dloss); // reads grad_msg(gacts) off the last stage
    // stash: the weights the micro-batch ran on, or STAGE_WEIGHTS_GONE (only a backend that runs the
    // forward again, under recomputation, reads them); hook: NULL, or told of each unit of slot k that
    // is complete (gpt2.h: GPT2UnitHook); a backend whose gradient is not in host memory may ignore it
    void (*backward_weight)(Stage* st, const Op* op, int slot, int gacts, int k, int stash, const GPT2UnitHook* hook);
    void (*finish)(Stage* st); // returns when the compute enqueued so far has run (NULL: calls return when done)
    void (*probs)(Stage* st, int slot, int t, float* out); // (V) last stage: softmax of row 0's logits at position t
    // weights, gradients and the optimizer
    void (*stash)(Stage* st, int i);  // the current weights into stash slot i
    void (*grad_unit_sumsq)(Stage* st, int k, double wte_sq, double* out); // as stage_grad_unit_sumsq
    void (*update)(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float grad_scale);
    void (*zero_grad)(Stage* st, int k);
    double (*tie_local)(Stage* st, int k); // P = 1: wte's gradient += the LM head's share; returns as stage_tie_local
    void (*to_host)(Stage* st);          // weights and AdamW moments -> st->params, adam_m, adam_v
    void (*from_host)(Stage* st);        // the reverse
    float* (*host_grads)(Stage* st, int k, float** dwte_head); // host-memory backends: slot k's own buffers, (num_params) and (Vp*C) or NULL
    void (*grads_to_host)(Stage* st, int k, float* grads, float* dwte_head); // device backends: (num_params), (Vp*C) or NULL
    void (*grads_from_host)(Stage* st, int k, const float* grads, const float* dwte_head); // the reverse: (num_params), (Vp*C) or NULL
    // device backends whose tied shares go through host memory: this end's share of slot k down
    // (Vp*C: wte's gradient on the first stage, the LM head's on the last), wte's summed gradient up
    void (*tied_share_to_host)(Stage* st, int k, float* share);
    void (*wte_grad_from_host)(Stage* st, int k, const float* wte);
    // pipeline messages in the backend's memory; (B, T, C) in its precision, msg_bytes each
    size_t (*msg_bytes)(const Stage* st, int slot);
    void* (*input_msg)(Stage* st, int slot);                  // the stage input of slot
    const void* (*output_msg)(Stage* st, int slot);           // the stage output of slot
    void* (*grad_msg)(Stage* st, int gacts);                  // dL/d(output) that backward_input reads
    const void* (*dx_in_msg)(Stage* st, int gacts, int slot); // dL/d(input), copied into slot's send buffer
    // host staging of the same, msg_bytes as they are (the backend's precision), for messages that go
    // through host memory; into and out of buffers from host_alloc
    void (*upload_input)(Stage* st, int slot, const void* x);
    void (*download_output)(Stage* st, int slot, void* x);
    void (*upload_grad)(Stage* st, int gacts, const void* dx);
    void (*download_dx_in)(Stage* st, int gacts, void* dx);
    // zeroed host memory for the staged copies above and the host copies of gradient slots and tied
    // shares (a GPU's page-locked memory, which its copy engines reach directly); NULL: calloc and free
    void* (*host_alloc)(size_t bytes);
    void (*host_free)(void* p);
    // the tied embedding's shares (first and last stage): this end's, the other end's (received), their sum
    float* (*tied_share)(Stage* st, int k);                                  // (Vp, C)
    float* (*tied_other)(Stage* st, int k);                                  // (Vp, C)
    double (*tied_sum)(Stage* st, int k, const float* first, const float* last); // wte's gradient in k = first (Vp, C) + last (Vp, C); returns as stage_tie_local
    void (*memory)(const Stage* st, StageUnitBytes* b);
    // device backends: the device's bytes in all, in use now (by anyone), and how many devices this
    // host has; NULL where the buffers are host memory
    void (*device_memory)(const Stage* st, double* total, double* used, int* devices);
    // staleness compensation (tdpipe/staleness.h); NULL: the backend has none
    // stash i = the current weights lr_sum of AdamW steps ahead, plus c times the change between the
    // last two updates (second order; c = 0: none) from the trajectory that track keeps
    void (*predict)(Stage* st, int i, const AdamWConfig* opt, float lr_sum, float c);
    // before an update, under second-order prediction: w_prev, u_prev (llmc/compensation.h: compensation_track)
    void (*track)(Stage* st, int first);
    // backward_weight with the micro-batch's gradient computed alone, then added into slot k: dc adds it
    // into slot k's DC-ASGD sums too (stash, the weights it used, then held), unit_sq (L + 3, or NULL)
    // gets its per-unit squared norms added, the tied LM head's share in unit L + 2
    void (*backward_weight_alone)(Stage* st, const Op* op, int slot, int gacts, int k, int stash, int dc, double* unit_sq);
    void (*head_share_sumsq)(Stage* st, int k, double* out); // last stage: *out = |slot k's LM-head share of wte's gradient|^2
    void (*dc_correct)(Stage* st, int k, float lambda); // slot k += lambda (w * sum g^2 - sum g^2 w_used); the sums zeroed
} StageBackend;

struct Stage {
    GPT2Config cfg;
    GPT2Range range;
    int B, T;
    const StageBackend* be;
    void* dev;             // the backend's state
    size_t sizes[GPT2_NUM_PARAM_TENSORS]; // floats per tensor of this stage
    size_t num_params;
    // host memory: the weights and AdamW moments (a device backend's copies, between stage_to_host
    // and stage_from_host; the CPU backend's own), NULL under synthetic compute
    float* params;         // (num_params)
    float* adam_m;         // (num_params)
    float* adam_v;         // (num_params)
    ParameterTensors p;    // views into params
    int version;           // optimizer updates applied
    int** inputs;          // (n_slots)[B*T] token ids of each slot (first stage)
    int** targets;         // (n_slots)[B*T] next-token ids (last stage)
    int* sample_ids;       // (T) the sample slot's token ids (B = 1)
    int n_slots, n_gacts, n_grad_slots, n_stash;
    int sample_slot;       // 1 once the one-row sample slot is reserved
    int* stash_version;    // (n_stash) version each stash holds, -1 when free
    int* stash_ahead;      // (n_stash) 0: that version; > 0: it extrapolated so many updates ahead (weight prediction)
    const StaleComp* comp; // staleness compensation, or NULL (none)
    int tracked;           // updates the second-order prediction's trajectory has seen since stage_trajectory_reset (at most 2)
    int gns;               // 1: micro-batch gradients are computed alone too (the gradient noise scale)
    // where messages and the tied shares go through host memory (a device backend without a link
    // that reaches its memory): host copies, allocated when needed
    int device_msgs;       // 1: pipeline messages stay in the backend's memory
    int device_tied;       // 1: so do the tied embedding's shares
    int n_host_slots, n_host_gacts;
    // (each a message of msg_bytes: (B, T, C) in the backend's precision)
    void** host_in;        // (n_host_slots) inputs received on the host
    void** host_out;       // (n_host_slots) outputs sent from the host
    void** host_dx_out;    // (n_host_gacts) output gradients received on the host
    void** host_dx_in;     // (n_host_slots) input gradients sent from the host
    void* host_sample[2];  // (1, T, C) the sample slot's input and output on the host
    int n_host_grads;
    float** host_grads;     // (n_host_grads)[num_params] gradient slots downloaded for host-side exchanges
    float** host_dwte_head; // (n_host_grads)[Vp*C] the LM head's share with each (last stage), else NULLs
    float** host_tied;      // (n_host_grads)[2 * Vp*C] this end's share of wte's gradient, then the other end's
};

// What a stage is made from. full: the whole model's parameters (laid out for [0, L) with embed
// and head), or slice: the stage's own (laid out for range); both NULL for synthetic compute. comm: the rank's Comm (a GPU's local rank; MPI progress
// during synthetic waits). syn_f, syn_b: synthetic compute's seconds per forward and per backward,
// jittered by Gamma draws of CV jitter keyed by seed and the op.
typedef struct {
    const GPT2Config* cfg;
    GPT2Range range;
    int B, T;
    const float* full;     // (num_params of [0, L) with embed and head) or NULL
    const float* slice;    // (num_params of range) or NULL
    void* comm;
    double syn_f, syn_b, jitter;
    unsigned long long seed;
    int recompute; // 1: slots keep a micro-batch's input and output only; its backward runs its forward again
} StageInit;

// A device: a name and how to make a stage on it (the CPU's, cpu-staged's and synthetic compute's
// are here; CUDA's in stage_cuda.cuh, which only nvcc builds).
typedef struct {
    const char* name;
    void (*create)(Stage* st, const StageInit* init);
} StageDevice;
extern const StageDevice STAGE_CPU;       // stage_cpu.c: fp32, the reference
extern const StageDevice STAGE_CPU_STAGED; // stage_staged.c: the CPU behind a device's code path (tests)
extern const StageDevice STAGE_SYNTHETIC;  // stage_synthetic.c: timed waits, no model

// the weights and AdamW's moments, no activation or gradient buffer yet: stage_reserve adds them
// (1, 1, 1, 0 for micro-batches one after another; the executor reserves what its schedule needs),
// so a caller can check the memory a run plans (stage_planned_bytes) before any of it is taken
void stage_create(Stage* st, const StageDevice* device, const StageInit* init);
void stage_destroy(Stage* st);
// grows to n_slots activation slots, n_gacts activation-gradient buffers, n_grad_slots gradient
// slots and n_stash weight stashes (never shrinks)
void stage_reserve(Stage* st, int n_slots, int n_gacts, int n_grad_slots, int n_stash);
void stage_reserve_sample(Stage* st); // the one-row slot STAGE_SAMPLE_SLOT
// the Stage's part of stage_create for a backend: shapes, host weights (from init->full or slice), books
void stage_init_common(Stage* st, const StageInit* init, const StageBackend* be, void* dev);

// (B*T) host token ids of a slot: its inputs (first stage reads them) and targets (last stage)
int* stage_inputs(Stage* st, int slot);
int* stage_targets(Stage* st, int slot);

// forward of the micro-batch in slot with the weights of op->version (the current ones or a stash;
// under weight prediction, that version extrapolated: staleness_ahead); its mean loss on the last
// stage when targets_valid, else 0
float stage_forward(Stage* st, const Op* op, int slot, int targets_valid);
// the input-gradient half of backward of slot with the weights of op->version, into gacts (reading
// stage_grad_buf(gacts) off the last stage); dloss weighs each token's loss
void stage_backward_input(Stage* st, const Op* op, int slot, int gacts, float dloss);
// the weight-gradient half, accumulated into the gradient slot of op->step (under DC-ASGD, for a
// compensated micro-batch, also into the slot's sums that stage_dc_correct applies); unit_sq (L + 3,
// or NULL): the micro-batch's own gradient's squared norm per unit is added there (the gradient noise
// scale's small-batch term), the tied LM head's share in unit L + 2. hook (NULL: none): told of each
// unit of the slot's gradient as it is complete, where the backend can (the CPU, computing into the
// slot: not when the micro-batch's gradient is computed alone for DC-ASGD or unit_sq)
void stage_backward_weight(Stage* st, const Op* op, int slot, int gacts, double* unit_sq, const GPT2UnitHook* hook);
// 1 when the slot's gradient is host memory that a hook may read as its units complete (the CPU);
// elsewhere stage_host_grads is a copy, made once the step's backwards are all done
int stage_grads_readable_during_backward(const Stage* st);
// the gradient noise scale's large-batch term: slot k's squared norm per unit into out (L + 3), the
// tied embedding's two shares apart (before they are summed): the encoder's in unit 0, the LM head's
// in unit L + 2
void stage_gns_units(Stage* st, int k, double* out);
// both halves of backward of slot, through activation-gradient buffer 0: one process running its
// micro-batches one after another (tests, benchmarks)
void stage_backward(Stage* st, const Op* op, int slot, float dloss);
// returns when the compute given to the device so far has run: an op's measured time is then its
// compute, not the time to enqueue it
void stage_finish(Stage* st);
// (V) after a forward of slot without targets, on the last stage: row 0's next-token probabilities at t
void stage_probs(Stage* st, int slot, int t, float* out);

// Pipeline messages: where the executor receives a slot's input and the gradient of its output,
// and what it sends (the output, the gradient of the input, copied per slot so the next backward may
// reuse gacts). In the backend's memory when it is host memory or a link reaches it
// (stage_use_device_msgs), else host copies staged up and down here, the same bytes either way
// (msg_bytes: (B, T, C) in the backend's precision).
size_t stage_msg_bytes(const Stage* st, int slot);
void* stage_input_buf(Stage* st, int slot);
const void* stage_output_buf(Stage* st, int slot);
void* stage_grad_buf(Stage* st, int gacts);
const void* stage_dx_in_buf(Stage* st, int gacts, int slot);
int stage_keeps_device_msgs(const Stage* st); // 1 when a device link can reach its messages
void stage_use_device_msgs(Stage* st);
void stage_use_device_tied(Stage* st);

// The gradient cache. k of step t; the tied embedding: P = 1 sums locally, else each end sends
// stage_tied_share(k), receives the other's into stage_tied_other(k), and stage_tied_sum(k) makes
// wte's gradient first + last on both ends (bitwise equal copies). Both return sumsq of the summed
// wte gradient where the sum's own pass over memory computed it (host memory, on the end whose norm
// holds wte: the first stage, or P = 1), else STAGE_SUMSQ_UNKNOWN (the last stage's copy is in no
// unit of the norm; a device reduces its own): the global norm then needs no second sweep of wte for it.
#define STAGE_SUMSQ_UNKNOWN (-1.0)
int stage_grad_slot(const Stage* st, int step);
double stage_tie_local(Stage* st, int k);
float* stage_tied_share(Stage* st, int k); // (Vp, C)
float* stage_tied_other(Stage* st, int k); // (Vp, C)
double stage_tied_sum(Stage* st, int k);
// sums of squares of slot k's gradient per unit, in model order: unit 0 = embeddings (wte, wpe), then
// one per layer, then the head (lnfw, lnfb). Writes this stage's units of out (L + 2 entries).
// wte_sq: sumsq of wte's gradient when the tied sum returned it (bitwise what it would be here), or
// STAGE_SUMSQ_UNKNOWN; a backend that reduces on its device computes its own.
void stage_grad_unit_sumsq(Stage* st, int k, double wte_sq, double* out);
// one slice of a stage's flat parameter layout (gpt2_param_sizes order) and the norm unit it belongs
// to (units as stage_grad_unit_sumsq): what the units' sums fold, in the order they fold it
typedef struct {
    int unit, tensor; // tensor: its index in gpt2_param_sizes' order
    size_t off, n;
} StageSlice;
#define STAGE_MAX_SLICES(Ls) (4 + 12 * (Ls))
// writes the stage's slices (at most STAGE_MAX_SLICES(l1 - l0)) into out; returns how many
int stage_slices(const Stage* st, StageSlice* out);
// AdamW on every tensor from slot k's gradient times grad_scale (clipping); t is the 1-based step
void stage_update(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float grad_scale);
void stage_zero_grad(Stage* st, int k);
// slot k's gradient (num_params) and the LM head's share (Vp*C, last stage; else NULL) in host
// memory: the backend's own on the CPU, a downloaded copy on a device until stage_host_grads_done
// uploads it. What host-side exchanges over MPI read and write.
float* stage_host_grads(Stage* st, int k, float** dwte_head);
void stage_host_grads_done(Stage* st, int k);
// the data-parallel average of slot k through host memory over MPI (comm: a Comm*), bitwise the
// same as a device average that sums in replica order (comm_nccl.cuh, cpu-staged's)
void stage_dp_average_host(void* comm, Stage* st, int k);
// a data-parallel average of gradient slot k over the stage's replicas where the gradient lives (NCCL
// between GPUs, cpu-staged's private memory, or stage_dp_average_host), and where that is, in words
typedef struct {
    void (*average)(void* ctx, Stage* st, int k);
    void* ctx;
    const char* where;
} StageDpAverage;

// Weight versions: the weights of (version, ahead) are the current ones or a stash (fatal if neither);
// before an update, stage_stash_current keeps the current weights for in-flight micro-batches.
void stage_stash_current(Stage* st);
void stage_release_stash(Stage* st, int version, int ahead);
int stage_has_weights(const Stage* st, int version, int ahead);
// Recomputation, for a backend that keeps a slot's input and output only and makes its activations
// whole in one working set, which holds slot `holds` (-1 none): 1 when slot's backward must first run
// its forward again there, on the weights it was given (stash); 0 when the set holds it already. Stops
// the run where a weight half's weights are gone (STAGE_WEIGHTS_GONE) rather than use others.
int stage_must_recompute(const Stage* st, const Op* op, int slot, int holds, int stash);
// Staleness compensation (tdpipe/staleness.h): the stage follows comp (NULL: none) from now on.
// stage_predict keeps the current weights extrapolated `ahead` updates along AdamW's direction, by
// lr_sum (the learning rates of those updates), for the micro-batches that will use them; second
// order (comp->curvature) adds the change between the last two updates, once the trajectory has seen
// two since stage_trajectory_reset (a chunk's start, so that a run resumed there predicts as the
// unbroken run does: the trajectory is not in checkpoints);
// stage_dc_correct applies DC-ASGD to slot k with the current weights (those the update applies to).
void stage_use_compensation(Stage* st, const StaleComp* comp);
void stage_predict(Stage* st, int ahead, const AdamWConfig* opt, float lr_sum);
void stage_trajectory_reset(Stage* st);
void stage_dc_correct(Stage* st, int k);
// after a chunk whose rest the guard refused: every stash dropped, every gradient slot (and DC-ASGD's
// sums) zeroed; the weights and moments are untouched
void stage_discard(Stage* st);
// weights and AdamW moments to and from the host copies (no-ops on the CPU)
void stage_to_host(Stage* st);
void stage_from_host(Stage* st);
// A stage's weights, AdamW moments and version at a consistency point, in host memory: what the
// guard's rollback goes back to when the refused step's chunk ran with a window (the steps it had
// applied before were computed on stale weights). Buffers grown once and reused.
typedef struct {
    float* state;   // (3, num_params): the weights, then AdamW's m and v
    size_t cap;     // floats state holds
    int version;    // the stage's updates applied when taken
} StageSnapshot;
void stage_snapshot_take(Stage* st, StageSnapshot* snap);
// the stage as it was at stage_snapshot_take, on its device too; stashes and gradients as they are
// (stage_discard drops them)
void stage_snapshot_restore(Stage* st, const StageSnapshot* snap);
void stage_snapshot_free(StageSnapshot* snap);
double stage_snapshot_bytes(const Stage* st);
// this stage's slice of a full model's parameters into the host weights, and the inverse
void stage_load_params(Stage* st, const float* full);  // full: (num_params of [0, L) with embed and head)
void stage_store_params(const Stage* st, float* full); // the same layout

// what the stage's pipeline state takes, for the end-of-run table (bytes in the backend's own
// precision; 0 where a backend keeps none)
typedef struct {
    int slots, stashes, grad_slots;
    double act_bytes;   // activation slots and activation-gradient buffers
    double stash_bytes, grad_bytes;
} StageMemory;
StageMemory stage_memory(const Stage* st);
// one activation slot's bytes (a micro-batch in flight), allocated or not yet
double stage_slot_bytes(const Stage* st);
// the bytes a backend holds once whatever the counts (the working set of activations under recomputation)
double stage_once_bytes(const Stage* st);
// the host memory this stage will hold with that many activation slots, activation-gradient
// buffers, gradient slots and stashes: its host weights and AdamW moments, and the backend's
// buffers where they are host memory (a GPU's are the GPU's)
double stage_planned_bytes(const Stage* st, int slots, int gacts, int grad_slots, int stashes);
// the device memory the same plan adds to what stage_create already took (0 for host-memory backends):
// activation slots, gacts buffers, stashes, and gradient slots beyond the model's own
double stage_planned_device_bytes(const Stage* st, int slots, int gacts, int grad_slots, int stashes);

// global norm from every unit's sum of squares (L + 2 of them), folded in model order
float stage_grad_norm_from_units(const double* units, int n_units);

#ifdef __cplusplus
}
#endif
