// GPT-2 on one device, restricted to a layer range [l0, l1) so a pipeline stage holds just its part
// (P = 1: the whole model): configuration, parameters in llm.c's order, activations, forward and
// a backward split into its input-gradient and weight-gradient halves. CPU fp32 (the reference).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_seq_len;       // maxT
    int vocab_size;        // V
    int padded_vocab_size; // Vp, a multiple of 128
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

#define GPT2_NUM_PARAM_TENSORS 16
// pointers into one flat buffer, llm.c's order; Ls = l1 - l0 layers. Tensors a stage does not own
// (embeddings off the first stage, lnf off the last) have size 0 and a NULL pointer.
typedef struct {
    float* wte;      // (Vp, C)  token embedding, tied to the LM head
    float* wpe;      // (maxT, C)
    float* ln1w;     // (Ls, C)
    float* ln1b;     // (Ls, C)
    float* qkvw;     // (Ls, 3*C, C)
    float* qkvb;     // (Ls, 3*C)
    float* attprojw; // (Ls, C, C)
    float* attprojb; // (Ls, C)
    float* ln2w;     // (Ls, C)
    float* ln2b;     // (Ls, C)
    float* fcw;      // (Ls, 4*C, C)
    float* fcb;      // (Ls, 4*C)
    float* fcprojw;  // (Ls, C, 4*C)
    float* fcprojb;  // (Ls, C)
    float* lnfw;     // (C)
    float* lnfb;     // (C)
} ParameterTensors;

// which slice of the model a stage holds
typedef struct {
    int l0, l1;    // layers [l0, l1)
    int has_embed; // first stage: wte + wpe, encoder
    int has_head;  // last stage: lnf, LM head (its own copy of wte), loss
} GPT2Range;

// activations of one micro-batch (B, T) through a stage; the executor keeps one per micro-batch in flight
typedef struct {
    int B, T;
    int* inputs;     // (B, T)  first stage: token ids
    int* targets;    // (B, T)  last stage: next-token ids
    float* x_in;     // (B, T, C) stage input: encoder output, or what the previous stage sent
    float* ln1;      // (Ls, B, T, C)
    float* ln1_mean; // (Ls, B, T)
    float* ln1_rstd; // (Ls, B, T)
    float* qkv;      // (Ls, B, T, 3*C)
    float* atty;     // (Ls, B, T, C)
    float* att;      // (Ls, B, NH, T, T)
    float* attproj;  // (Ls, B, T, C)
    float* residual2;// (Ls, B, T, C)
    float* ln2;      // (Ls, B, T, C)
    float* ln2_mean; // (Ls, B, T)
    float* ln2_rstd; // (Ls, B, T)
    float* fch;      // (Ls, B, T, 4*C)
    float* fch_gelu; // (Ls, B, T, 4*C)
    float* fcproj;   // (Ls, B, T, C)
    float* residual3;// (Ls, B, T, C)  layer outputs; the last one is the stage output
    float* lnf;      // (B, T, C)   last stage only
    float* lnf_mean; // (B, T)
    float* lnf_rstd; // (B, T)
    float* probs;    // (B, T, Vp)  logits, then softmax probabilities in place
    float* losses;   // (B, T)
    float* memory;   // (num_floats) the one allocation the float arrays above point into (inputs, targets apart)
    size_t num_floats;
} GPT2Acts;

// gradients of activations kept between the input-gradient and the weight-gradient halves of backward
typedef struct {
    float* dx_in;    // (B, T, C)  gradient of the stage input (sent to the previous stage)
    float* dln1;     // (Ls, B, T, C)
    float* dqkv;     // (Ls, B, T, 3*C)
    float* datty;    // (Ls, B, T, C)
    float* dres2;    // (Ls, B, T, C)   = gradient of attproj's output
    float* dln2;     // (Ls, B, T, C)
    float* dfch;     // (Ls, B, T, 4*C) gradient before GELU
    float* dfch_gelu;// (Ls, B, T, 4*C)
    float* dres3;    // (Ls, B, T, C)   = gradient of fcproj's output (layer output gradient)
    float* dlnf;     // (B, T, C)
    float* dlogits;  // (B, T, Vp)
    float* datt;     // (B, NH, T, T)  scratch
    float* memory;   // (num_floats) the one allocation the arrays above point into
    size_t num_floats;
} GPT2GradActs;

// sizes (in floats) of the 16 tensors for a range; absent tensors are 0. Returns the total.
size_t gpt2_param_sizes(const GPT2Config* cfg, const GPT2Range* r, size_t sizes[GPT2_NUM_PARAM_TENSORS]);
// points the 16 tensors into `memory` laid out per `sizes`
void gpt2_point_params(ParameterTensors* p, float* memory, const size_t sizes[GPT2_NUM_PARAM_TENSORS]);
// name of tensor i ("wte", "wpe", ..., "lnfb") and whether it is per-layer
const char* gpt2_param_name(int i);
int gpt2_param_is_layer(int i);
// whether AdamW decays tensor i: the 2-D matrices (wte, wpe, qkvw, attprojw, fcw, fcprojw), not
// biases or LayerNorm, as GPT-2 and llm.c's CUDA trainer do
int gpt2_param_decays(int i);

// GPT-2's initialisation (std 0.02, residual projections scaled by 1/sqrt(2L), LayerNorm weights 1,
// biases 0) of the FULL model into `full` (laid out for range [0, L) with embed and head), from `seed`.
void gpt2_init_full(const GPT2Config* cfg, float* full, unsigned long long seed);
// the same initialisation's part that range r holds, into params (laid out for r): bitwise that slice
// of gpt2_init_full's model (the whole model's draws are made, the others dropped), without the
// memory for the whole model
void gpt2_init_range(const GPT2Config* cfg, const GPT2Range* r, float* params, unsigned long long seed);
// where a range's tensor lies in both layouts: floats [full_off, full_off + n) of a full-model buffer
// are [stage_off, stage_off + n) of the stage's (n = 0: the range holds none of that tensor)
typedef struct {
    size_t full_off, stage_off, n;
} GPT2Piece;
void gpt2_slice_pieces(const GPT2Config* cfg, const GPT2Range* r, GPT2Piece pieces[GPT2_NUM_PARAM_TENSORS]);
// copies a stage's slice out of a full-model buffer (both laid out by gpt2_param_sizes)
void gpt2_slice_params(const GPT2Config* cfg, const GPT2Range* r, const float* full, float* stage);
// the inverse: writes a stage's tensors into their places in a full-model buffer
void gpt2_unslice_params(const GPT2Config* cfg, const GPT2Range* r, const float* stage, float* full);

// the floats gpt2_acts_alloc / gpt2_grad_acts_alloc take, known before allocating (memory checks)
size_t gpt2_acts_floats(const GPT2Config* cfg, const GPT2Range* r, int B, int T);
size_t gpt2_grad_acts_floats(const GPT2Config* cfg, const GPT2Range* r, int B, int T);
void gpt2_acts_alloc(GPT2Acts* a, const GPT2Config* cfg, const GPT2Range* r, int B, int T);
void gpt2_acts_free(GPT2Acts* a);
void gpt2_grad_acts_alloc(GPT2GradActs* g, const GPT2Config* cfg, const GPT2Range* r, int B, int T);
void gpt2_grad_acts_free(GPT2GradActs* g);

// told by gpt2_backward_weight as each unit's weight gradient is complete (0 the embeddings, 1 + l
// layer l, L + 1 the final LayerNorm, L + 2 the LM head's share of wte), in the order computed: the
// embeddings (their gradient needs only dx_in), the head, then the layers from the last: a caller
// may send a finished unit while the rest is computed (done may be NULL). between (NULL or not):
// called between the kernels (the CPU's) of every pass that takes a hook, so that the messages
// already sent move along while the stage computes (MPI moves a large message between processes
// that share no single-copy path only inside MPI calls on both sides)
typedef struct {
    void (*done)(void* ctx, int unit);
    void* ctx;
    void (*between)(void* ctx);
} GPT2UnitHook;

// forward of one micro-batch through the stage. The first stage encodes a->inputs; other stages read
// a->x_in (filled by the caller). The last stage computes losses if targets_valid, and returns the
// mean loss over B*T (else 0). Output of a non-last stage: gpt2_stage_output(a).
float gpt2_forward(const GPT2Config* cfg, const GPT2Range* r, const ParameterTensors* p, GPT2Acts* a, int targets_valid,
                  const GPT2UnitHook* hook); // hook: NULL, or its between is called between kernels
float* gpt2_stage_output(const GPT2Config* cfg, const GPT2Range* r, GPT2Acts* a); // (B, T, C)

// input-gradient half of backward. Last stage: from the loss, each token's loss weighted by
// dloss (1 / (B*T*M) for a mean over a step). Other stages: from dx_out (B, T, C), the gradient of
// the stage output, or NULL when it is already in the last layer's slice of g->dres3 (received there).
// Fills g (incl. g->dx_in unless first stage). Weights are read, not written.
void gpt2_backward_input(const GPT2Config* cfg, const GPT2Range* r, const ParameterTensors* p, const GPT2Acts* a,
                         GPT2GradActs* g, const float* dx_out, float dloss, const GPT2UnitHook* hook);
// weight-gradient half: accumulates (+=) into grads. The LM head's share of wte's gradient goes to
// dwte_head (Vp, C) (the tied embedding: summed with the encoder's share once per step), the
// encoder's share to grads->wte. hook: NULL, or told of each unit as it is done. accumulate 0 (a
// step's first micro-batch): every tensor written, bitwise as if added to zeros, except the
// encoder's wte and wpe, a scatter that always adds (they must hold zeros, or the sum so far; the
// encoder runs first, but it touches no tensor the others write, so the order changes nothing).
void gpt2_backward_weight(const GPT2Config* cfg, const GPT2Range* r, const GPT2Acts* a, const GPT2GradActs* g, const GPT2UnitHook* hook,
                          ParameterTensors* grads, float* dwte_head, int accumulate);

#ifdef __cplusplus
}
#endif
