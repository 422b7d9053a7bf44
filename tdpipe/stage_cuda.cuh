// The CUDA backend of a Stage (nvcc builds; a C build gets stubs that refuse --device cuda): the
// stage's model, activation slots, weight stashes and gradient ring on the GPU behind StageBackend.
// Included by train_tdpipe.cu, the one translation unit nvcc builds.
#pragma once
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#include "tdpipe/stage.h"

#ifdef TD_CUDA
#include "llmc/gpt2_cuda.cuh"
#include "tdpipe/comm_nccl.cuh"

typedef struct {
    GPT2Cuda m;
    GPT2CudaActs* acts;   // (slots) one per activation slot
    GPT2CudaGradActs* ga; // (gacts)
    int n_acts, n_ga;
    floatX** stash;       // (n_stash)[num_params] compute copies of older weight versions (Stage books them)
    float** grad_ring;    // (n_ring)[num_params] gradient slots; [0] is m's own
    float** dwte_ring;    // (n_ring)[Vp*C] the LM head's share per slot (last stage), else NULLs
    floatX** dx_send;     // (n_dx_send)[B*T*C] per activation slot: dL/d(input) being sent (device messages)
    float** tied;         // (n_tied)[Vp*C] per gradient slot: the other end's share of wte's gradient (device messages)
    int n_stash, n_ring, n_dx_send, n_tied;
} CudaStage;

static CudaStage* cuda_of(const Stage* s) { return (CudaStage*)s->dev; }

// the device buffers follow the host slots the executor reserved
static void cuda_grow(Stage* s) {
    CudaStage* c = cuda_of(s);
    if (s->n_slots > c->n_acts) {
        c->acts = (GPT2CudaActs*)realloc(c->acts, s->n_slots * sizeof(GPT2CudaActs));
        for (int i = c->n_acts; i < s->n_slots; i++) gpt2_cuda_acts_alloc(&c->acts[i], &c->m, s->B, s->T);
        c->n_acts = s->n_slots;
    }
    if (s->n_gacts > c->n_ga) {
        c->ga = (GPT2CudaGradActs*)realloc(c->ga, s->n_gacts * sizeof(GPT2CudaGradActs));
        for (int i = c->n_ga; i < s->n_gacts; i++) gpt2_cuda_grad_acts_alloc(&c->ga[i], &c->m, s->B, s->T);
        c->n_ga = s->n_gacts;
    }
    if (s->n_stash > c->n_stash) {
        c->stash = (floatX**)realloc(c->stash, s->n_stash * sizeof(floatX*));
        for (int i = c->n_stash; i < s->n_stash; i++) cudaCheck(cudaMalloc((void**)&c->stash[i], c->m.num_params * sizeof(floatX)));
        c->n_stash = s->n_stash;
    }
    if (s->n_grad_slots > c->n_ring) {
        c->grad_ring = (float**)realloc(c->grad_ring, s->n_grad_slots * sizeof(float*));
        c->dwte_ring = (float**)realloc(c->dwte_ring, s->n_grad_slots * sizeof(float*));
        size_t vc = s->range.has_head ? (size_t)s->cfg.padded_vocab_size * s->cfg.channels : 0;
        for (int k = c->n_ring; k < s->n_grad_slots; k++) {
            if (k == 0) {
                c->grad_ring[0] = c->m.grads_memory;
                c->dwte_ring[0] = c->m.dwte_head;
                continue;
            }
            cudaCheck(cudaMalloc((void**)&c->grad_ring[k], c->m.num_params * sizeof(float)));
            cudaCheck(cudaMemset(c->grad_ring[k], 0, c->m.num_params * sizeof(float)));
            c->dwte_ring[k] = NULL;
            if (vc) {
                cudaCheck(cudaMalloc((void**)&c->dwte_ring[k], vc * sizeof(float)));
                cudaCheck(cudaMemset(c->dwte_ring[k], 0, vc * sizeof(float)));
            }
        }
        c->n_ring = s->n_grad_slots;
    }
    if (s->device_msgs && !s->range.has_embed && s->n_slots > c->n_dx_send) {
        c->dx_send = (floatX**)realloc(c->dx_send, s->n_slots * sizeof(floatX*));
        for (int i = c->n_dx_send; i < s->n_slots; i++)
            cudaCheck(cudaMalloc((void**)&c->dx_send[i], (size_t)s->B * s->T * s->cfg.channels * sizeof(floatX)));
        c->n_dx_send = s->n_slots;
    }
    if (s->device_tied && s->n_grad_slots > c->n_tied) {
        c->tied = (float**)realloc(c->tied, s->n_grad_slots * sizeof(float*));
        for (int k = c->n_tied; k < s->n_grad_slots; k++) cudaCheck(cudaMalloc((void**)&c->tied[k], s->sizes[0] * sizeof(float)));
        c->n_tied = s->n_grad_slots;
    }
}

// forward and backward read m.params: point it at stash slot i for one call (-1: leave it), then
// back at the current weights (m.params_memory)
static void cuda_swap_in(CudaStage* c, int i) {
    if (i >= 0) gpt2_cuda_point_x(&c->m.params, c->stash[i], c->m.sizes);
}
static void cuda_swap_out(CudaStage* c) { gpt2_cuda_point_x(&c->m.params, c->m.params_memory, c->m.sizes); }

static void cuda_stash(Stage* s, int i) {
    cuda_grow(s);
    CudaStage* c = cuda_of(s);
    cudaCheck(cudaMemcpyAsync(c->stash[i], c->m.params_memory, c->m.num_params * sizeof(floatX), cudaMemcpyDeviceToDevice, g_cuda_stream));
}

static void cuda_use_grad_slot(Stage* s, int k) {
    cuda_grow(s);
    CudaStage* c = cuda_of(s);
    c->m.grads_memory = c->grad_ring[k];
    gpt2_point_params(&c->m.grads, c->grad_ring[k], c->m.sizes);
    c->m.dwte_head = c->dwte_ring[k];
}

static float cuda_forward(Stage* s, int slot, int stash, int targets_valid) {
    cuda_grow(s);
    GPT2Acts* a = &s->acts[slot];
    CudaStage* c = cuda_of(s);
    cuda_swap_in(c, stash);
    // a later stage's input arrived in the host slot (host staging): it goes up with the forward;
    // with device messages it was received into the device slot already
    const float* x_in = s->range.has_embed || s->device_msgs ? NULL : a->x_in;
    float loss = gpt2_cuda_forward(&c->m, &c->acts[slot], a->inputs, targets_valid ? a->targets : NULL, x_in);
    cuda_swap_out(c);
    return loss;
}
static void cuda_backward_input(Stage* s, int slot, int gacts, int stash, const float* dx_out, float dloss) {
    cuda_grow(s);
    CudaStage* c = cuda_of(s);
    cuda_swap_in(c, stash);
    gpt2_cuda_backward_input(&c->m, &c->acts[slot], &c->ga[gacts], dx_out, dloss);
    cuda_swap_out(c);
}
static void cuda_backward_weight(Stage* s, int slot, int gacts) {
    gpt2_cuda_backward_weight(&cuda_of(s)->m, &cuda_of(s)->acts[slot], &cuda_of(s)->ga[gacts]);
}
static void cuda_tie(Stage* s) { gpt2_cuda_tie_wte_grads(&cuda_of(s)->m); }
static void cuda_sumsq(const Stage* s, double* out) { gpt2_cuda_grad_unit_sumsq(&cuda_of(s)->m, out); }
static void cuda_update(Stage* s, const AdamWConfig* o, float lr, int t, float scale) {
    gpt2_cuda_update(&cuda_of(s)->m, lr, o->beta1, o->beta2, o->eps, o->weight_decay, t, scale);
}
static void cuda_zero(Stage* s) { gpt2_cuda_zero_grads(&cuda_of(s)->m); }
static void cuda_to_host(Stage* s) {
    gpt2_cuda_get_params(&cuda_of(s)->m, s->params);
    gpt2_cuda_get_adam(&cuda_of(s)->m, s->adam_m, s->adam_v);
}
static void cuda_from_host(const Stage* s) {
    gpt2_cuda_set_params(&cuda_of(s)->m, s->params);
    gpt2_cuda_set_adam(&cuda_of(s)->m, s->adam_m, s->adam_v);
}

static void cuda_output(Stage* s, int slot, float* host) { gpt2_cuda_stage_output(&cuda_of(s)->m, &cuda_of(s)->acts[slot], host); }
static void cuda_dx_in(Stage* s, int gacts, float* host) { gpt2_cuda_dx_in(&cuda_of(s)->m, &cuda_of(s)->ga[gacts], s->B, s->T, host); }
static void cuda_grads_to_host(Stage* s) {
    gpt2_cuda_get_grads(&cuda_of(s)->m, s->grads);
    if (s->range.has_head) gpt2_cuda_get_dwte_head(&cuda_of(s)->m, s->dwte_head);
}
static void cuda_grads_from_host(const Stage* s) { gpt2_cuda_set_grads(&cuda_of(s)->m, s->grads); }

// device messages: floatX (B, T, C) buffers, sent and received by NCCL where the model reads and writes them
static size_t cuda_btc(const Stage* s) { return (size_t)s->B * s->T * s->cfg.channels; }
static size_t cuda_msg_bytes(const Stage* s) { return cuda_btc(s) * sizeof(floatX); }
static void* cuda_input_msg(Stage* s, int slot) {
    cuda_grow(s);
    return cuda_of(s)->acts[slot].x_in;
}
static const void* cuda_output_msg(Stage* s, int slot) { // the last layer's output
    return cuda_of(s)->acts[slot].residual3 + (size_t)(s->range.l1 - s->range.l0 - 1) * cuda_btc(s);
}
static void* cuda_grad_msg(Stage* s, int gacts) { // the last layer's output gradient (backward_input with dx_out NULL)
    cuda_grow(s);
    return cuda_of(s)->ga[gacts].dres3 + (size_t)(s->range.l1 - s->range.l0 - 1) * cuda_btc(s);
}
static const void* cuda_dx_in_msg(Stage* s, int gacts, int slot) { // a copy: the next backward reuses gacts
    cuda_grow(s);
    CudaStage* c = cuda_of(s);
    cudaCheck(cudaMemcpyAsync(c->dx_send[slot], c->ga[gacts].dx_in, cuda_msg_bytes(s), cudaMemcpyDeviceToDevice, g_cuda_stream));
    return c->dx_send[slot];
}

// the tied embedding's shares: wte's gradient in the active slot (first stage) or the LM head's share (last)
static float* cuda_tied_share(Stage* s) { return s->range.has_embed ? cuda_of(s)->m.grads.wte : cuda_of(s)->m.dwte_head; }
static float* cuda_tied_other(Stage* s, int k) {
    cuda_grow(s);
    return cuda_of(s)->tied[k];
}
static void cuda_tied_sum(Stage* s, const float* first, const float* last) { // added as the CPU adds
    comm_nccl_sum(cuda_of(s)->m.grads.wte, first, last, s->sizes[0], g_cuda_stream);
}
static void cuda_finish(Stage* s) { cudaCheck(cudaStreamSynchronize(g_cuda_stream)); } // the stream, not the device

static const StageBackend CUDA_BACKEND = {"cuda", cuda_forward, cuda_backward_input, cuda_backward_weight, cuda_tie,
                                          cuda_sumsq, cuda_update, cuda_zero, cuda_to_host, cuda_from_host,
                                          cuda_output, cuda_dx_in, cuda_grads_to_host, cuda_grads_from_host,
                                          cuda_stash, cuda_use_grad_slot, cuda_msg_bytes, cuda_input_msg,
                                          cuda_output_msg, cuda_grad_msg, cuda_dx_in_msg, cuda_tied_share,
                                          cuda_tied_other, cuda_tied_sum, cuda_finish};

// 1 when a CUDA device can be used; else 0 with the runtime's reason in why
static int cuda_available_why(char* why, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) snprintf(why, cap, "%s", cudaGetErrorString(e));
    else if (n == 0) snprintf(why, cap, "no CUDA device");
    return e == cudaSuccess && n > 0;
}

// ranks on one host take its GPUs round-robin by local rank; ranks sharing a GPU exchange
// activations and gradients through host memory over MPI (host staging)
static void cuda_stage_init(Stage* st, const GPT2Config* cfg, const GPT2Range* r, int B, int T, const float* full, const Comm* comm) {
    int n = 1;
    cudaCheck(cudaGetDeviceCount(&n));
    cuda_device_init(comm->local_rank % n);
    CudaStage* c = (CudaStage*)calloc_check(1, sizeof(CudaStage));
    float* mine = (float*)malloc_check(gpt2_param_sizes(cfg, r, st->sizes) * sizeof(float));
    gpt2_slice_params(cfg, r, full, mine);
    gpt2_cuda_init(&c->m, cfg, r, mine);
    free(mine);
    stage_init_backend(st, cfg, r, B, T, 1, &CUDA_BACKEND, c);
    stage_load_params(st, full);
    cuda_grow(st);
}

// the device side of the stage (slots, stashes, the gradient ring beyond m's own, the model), then
// the host side
static void cuda_stage_free(Stage* st) {
    CudaStage* c = cuda_of(st);
    for (int i = 0; i < c->n_acts; i++) gpt2_cuda_acts_free(&c->acts[i]);
    for (int i = 0; i < c->n_ga; i++) gpt2_cuda_grad_acts_free(&c->ga[i]);
    for (int i = 0; i < c->n_stash; i++) cudaCheck(cudaFree(c->stash[i]));
    for (int k = 1; k < c->n_ring; k++) {
        cudaCheck(cudaFree(c->grad_ring[k]));
        if (c->dwte_ring[k]) cudaCheck(cudaFree(c->dwte_ring[k]));
    }
    for (int i = 0; i < c->n_dx_send; i++) cudaCheck(cudaFree(c->dx_send[i]));
    for (int k = 0; k < c->n_tied; k++) cudaCheck(cudaFree(c->tied[k]));
    gpt2_cuda_free(&c->m); // after the ring: m's gradient pointers may name a ring slot, its memory is slot 0
    free(c->dx_send);
    free(c->tied);
    free(c->acts);
    free(c->ga);
    free(c->stash);
    free(c->grad_ring);
    free(c->dwte_ring);
    free(c);
    stage_free(st);
}

static double cuda_peak(void) { return cuda_peak_bf16_flops(); }

// Activations and gradients between stages over NCCL, GPU to GPU, when every stage of the pipeline
// has a GPU NCCL can reach (collective over the pipeline): then 1 and *link is the executor's link
// (the stage is to keep its messages on the device); else 0 (host staging over MPI).
static int cuda_link_init(const Comm* c, const CommLink** link) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (!comm_nccl_link_possible(c, dev)) return 0;
    CommNcclLink* l = (CommNcclLink*)calloc_check(1, sizeof(CommNcclLink));
    comm_nccl_link_init(l, c, dev, g_cuda_stream);
    *link = &l->link;
    return 1;
}

static void cuda_link_free(const CommLink* link) {
    CommNcclLink* l = (CommNcclLink*)link->ctx;
    comm_nccl_link_free(l);
    free(l);
}

// the data-parallel average on the GPUs: NCCL over this stage's replicas
typedef struct {
    CommNccl nccl;
    float* scratch; // (D, largest chunk) device floats for comm_nccl_dp_average
} CudaDp;

// Collective over the stage's replicas. 1 and *ctx (a CudaDp) when every replica has a GPU of its
// own; 0 when some share one (NCCL cannot connect them: the executor stages through host memory).
static int cuda_dp_init(const Comm* c, Stage* st, void** ctx) {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (!comm_nccl_possible(c->dp_comm, dev)) return 0;
    CudaDp* dp = (CudaDp*)calloc_check(1, sizeof(CudaDp));
    comm_nccl_init(&dp->nccl, c, dev);
    size_t vc = st->range.has_head ? (size_t)st->cfg.padded_vocab_size * st->cfg.channels : 0;
    size_t n = st->num_params > vc ? st->num_params : vc;
    cudaCheck(cudaMalloc((void**)&dp->scratch, comm_nccl_dp_scratch_floats(c->D, n) * sizeof(float)));
    *ctx = dp;
    return 1;
}

// the executor's dp_average_device: the active gradient slot and the LM head's share of wte,
// averaged in place, bitwise comm_dp_average's result
static void cuda_dp_average(void* ctx, Stage* st) {
    CudaDp* dp = (CudaDp*)ctx;
    CudaStage* c = cuda_of(st);
    comm_nccl_wait_for(&dp->nccl, g_cuda_stream); // after the backward kernels that wrote them
    comm_nccl_dp_average(&dp->nccl, c->m.grads_memory, c->m.num_params, dp->scratch);
    if (c->m.dwte_head)
        comm_nccl_dp_average(&dp->nccl, c->m.dwte_head, (size_t)st->cfg.padded_vocab_size * st->cfg.channels, dp->scratch);
    comm_nccl_sync(&dp->nccl); // the kernels that read them next run on the compute stream
}

static void cuda_dp_free(void* ctx) {
    CudaDp* dp = (CudaDp*)ctx;
    comm_nccl_free(&dp->nccl);
    cudaCheck(cudaFree(dp->scratch));
    free(dp);
}
#else
static int cuda_available_why(char* why, size_t cap) {
    snprintf(why, cap, "this build has no CUDA backend (build where nvcc is installed)");
    return 0;
}
static void cuda_stage_init(Stage* st, const GPT2Config* cfg, const GPT2Range* r, int B, int T, const float* full, const Comm* comm) {
    td_fatal("--device cuda: this build has no CUDA backend (build where nvcc is installed)");
}
static void cuda_stage_free(Stage* st) {}
static double cuda_peak(void) { return 0.0; }
static int cuda_link_init(const Comm* c, const CommLink** link) { return 0; }
static void cuda_link_free(const CommLink* link) {}
static int cuda_dp_init(const Comm* c, Stage* st, void** ctx) { return 0; }
static void cuda_dp_average(void* ctx, Stage* st) {}
static void cuda_dp_free(void* ctx) {}
#endif
