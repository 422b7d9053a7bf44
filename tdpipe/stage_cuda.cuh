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
#include "llmc/compensation.cuh"
#include "llmc/gpt2_cuda.cuh"
#include "tdpipe/comm_nccl.cuh"

// Under recomputation (StageInit.recompute) a slot keeps only what its backward cannot redo, as the
// CPU's does (stage_cpu.c): the stage input received and the output sent; the forward runs in one
// working set (work), and a backward first runs the forward again there on the weights it is given.
// The last stage's input half turns the logits into their gradient in place, so a weight half that
// runs the forward again turns them again, with the dloss its input half had.
typedef struct {
    floatX* x_in; // (B, T, C) the input received (off the first stage), else NULL
    floatX* out;  // (B, T, C) the output sent (off the last stage), else NULL
    float dloss;  // the input half's weight of each token's loss (last stage)
} CudaKeptSlot;

typedef struct {
    GPT2Cuda m;
    GPT2CudaActs* acts;   // (n_acts) one per activation slot (not under recomputation: kept, work)
    int recompute;
    CudaKeptSlot* kept;   // (n_acts) under recomputation
    GPT2CudaActs work;    // under recomputation: the one micro-batch whose activations are whole
    int work_holds;       // the slot whose forward work holds now, -1 none
    floatX* work_x_in;    // (B, T, C) work's own input buffer (the first stage's encoder writes it)
    GPT2CudaActs sample;  // (1, T) the sample slot, once reserved
    GPT2CudaGradActs* ga; // (n_ga)
    floatX** stash;       // (n_stash)[num_params] compute copies of older weight versions (the Stage books them)
    float** grad_ring;    // (n_ring)[num_params] gradient slots; [0] is m's own
    float** dwte_ring;    // (n_ring)[Vp*C] the LM head's share per slot (last stage), else NULLs
    floatX** dx_send;     // (n_dx_send)[B*T*C] per activation slot: dL/d(input) being sent (device messages)
    float** tied;         // (n_tied)[Vp*C] per gradient slot: the other end's share of wte's gradient (device messages)
    // DC-ASGD: one micro-batch's gradient alone (then its head share), and per gradient slot the sums of g^2 and g^2 * w_used
    float* dc_g;          // (num_params + Vp*C on the last stage)
    float** dc_a;         // (n_dc)[same]
    float** dc_b;         // (n_dc)[same]
    // second-order weight prediction's trajectory of the master weights (reserved with the buffers)
    float* traj_w_prev;   // (num_params) the weights before the last update
    float* traj_u_prev;   // (num_params) the update before that
    int n_acts, n_ga, n_stash, n_ring, n_dx_send, n_tied, n_dc, has_sample;
    Comm* comm;           // the rank's: MPI is moved along while the host waits for the GPU
} CudaStage;

static CudaStage* cuda_of(const Stage* st) { return (CudaStage*)st->dev; }
static GPT2CudaActs* cuda_acts(const Stage* st, int slot) {
    CudaStage* c = cuda_of(st);
    if (slot == STAGE_SAMPLE_SLOT) return &c->sample;
    if (!c->recompute) return &c->acts[slot];
    if (c->work_holds != slot)
        td_fatal("cuda_acts: slot %d's activations were not kept (recomputation) and the working set holds %d's", slot, c->work_holds);
    return &c->work;
}
static size_t cuda_btc(const Stage* st, int slot) { return (size_t)(slot == STAGE_SAMPLE_SLOT ? 1 : st->B) * st->T * st->cfg.channels; }
static floatX* cuda_alloc_x(size_t n) {
    floatX* p = NULL;
    cudaCheck(cudaMalloc((void**)&p, n * sizeof(floatX)));
    cudaCheck(cudaMemset(p, 0, n * sizeof(floatX)));
    return p;
}

// the device buffers follow the slots reserved on the Stage
static void cuda_reserve(Stage* st) {
    CudaStage* c = cuda_of(st);
    if (st->n_slots > c->n_acts && c->recompute) {
        c->kept = (CudaKeptSlot*)realloc_check(c->kept, st->n_slots * sizeof(CudaKeptSlot));
        for (int i = c->n_acts; i < st->n_slots; i++) {
            c->kept[i].x_in = st->range.has_embed ? NULL : cuda_alloc_x(cuda_btc(st, 0));
            c->kept[i].out = st->range.has_head ? NULL : cuda_alloc_x(cuda_btc(st, 0));
            c->kept[i].dloss = 0.0f;
        }
        if (c->n_acts == 0) {
            gpt2_cuda_acts_alloc(&c->work, &c->m, st->B, st->T);
            c->work_x_in = c->work.x_in;
        }
        c->n_acts = st->n_slots;
    } else if (st->n_slots > c->n_acts) {
        c->acts = (GPT2CudaActs*)realloc_check(c->acts, st->n_slots * sizeof(GPT2CudaActs));
        for (int i = c->n_acts; i < st->n_slots; i++) gpt2_cuda_acts_alloc(&c->acts[i], &c->m, st->B, st->T);
        c->n_acts = st->n_slots;
    }
    if (st->sample_slot && !c->has_sample) {
        gpt2_cuda_acts_alloc(&c->sample, &c->m, 1, st->T);
        c->has_sample = 1;
    }
    if (st->n_gacts > c->n_ga) {
        c->ga = (GPT2CudaGradActs*)realloc_check(c->ga, st->n_gacts * sizeof(GPT2CudaGradActs));
        for (int i = c->n_ga; i < st->n_gacts; i++) gpt2_cuda_grad_acts_alloc(&c->ga[i], &c->m, st->B, st->T);
        c->n_ga = st->n_gacts;
    }
    if (st->n_stash > c->n_stash) {
        c->stash = (floatX**)realloc_check(c->stash, st->n_stash * sizeof(floatX*));
        for (int i = c->n_stash; i < st->n_stash; i++) cudaCheck(cudaMalloc((void**)&c->stash[i], c->m.num_params * sizeof(floatX)));
        c->n_stash = st->n_stash;
    }
    if (st->n_grad_slots > c->n_ring) {
        c->grad_ring = (float**)realloc_check(c->grad_ring, st->n_grad_slots * sizeof(float*));
        c->dwte_ring = (float**)realloc_check(c->dwte_ring, st->n_grad_slots * sizeof(float*));
        size_t vc = st->range.has_head ? (size_t)st->cfg.padded_vocab_size * st->cfg.channels : 0;
        for (int k = c->n_ring; k < st->n_grad_slots; k++) {
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
        c->n_ring = st->n_grad_slots;
    }
    if (st->device_msgs && !st->range.has_embed && st->n_slots > c->n_dx_send) {
        c->dx_send = (floatX**)realloc_check(c->dx_send, st->n_slots * sizeof(floatX*));
        for (int i = c->n_dx_send; i < st->n_slots; i++) cudaCheck(cudaMalloc((void**)&c->dx_send[i], cuda_btc(st, 0) * sizeof(floatX)));
        c->n_dx_send = st->n_slots;
    }
    size_t n_dc = c->m.num_params + (st->range.has_head ? st->sizes[0] : 0);
    if (st->gns && !c->dc_g) cudaCheck(cudaMalloc((void**)&c->dc_g, n_dc * sizeof(float))); // between chunks, never inside a step
    if (staleness_second_order(st->comp) && !c->traj_w_prev) { // between chunks, never inside a step
        cudaCheck(cudaMalloc((void**)&c->traj_w_prev, c->m.num_params * sizeof(float)));
        cudaCheck(cudaMalloc((void**)&c->traj_u_prev, c->m.num_params * sizeof(float)));
    }
    if (st->comp && (st->comp->methods & STALE_DCASGD) && st->n_grad_slots > c->n_dc) {
        if (!c->dc_g) cudaCheck(cudaMalloc((void**)&c->dc_g, n_dc * sizeof(float)));
        c->dc_a = (float**)realloc_check(c->dc_a, st->n_grad_slots * sizeof(float*));
        c->dc_b = (float**)realloc_check(c->dc_b, st->n_grad_slots * sizeof(float*));
        for (int k = c->n_dc; k < st->n_grad_slots; k++) {
            cudaCheck(cudaMalloc((void**)&c->dc_a[k], n_dc * sizeof(float)));
            cudaCheck(cudaMalloc((void**)&c->dc_b[k], n_dc * sizeof(float)));
            cudaCheck(cudaMemset(c->dc_a[k], 0, n_dc * sizeof(float)));
            cudaCheck(cudaMemset(c->dc_b[k], 0, n_dc * sizeof(float)));
        }
        c->n_dc = st->n_grad_slots;
    }
    if (st->device_tied && st->n_grad_slots > c->n_tied) {
        c->tied = (float**)realloc_check(c->tied, st->n_grad_slots * sizeof(float*));
        for (int k = c->n_tied; k < st->n_grad_slots; k++) cudaCheck(cudaMalloc((void**)&c->tied[k], st->sizes[0] * sizeof(float)));
        c->n_tied = st->n_grad_slots;
    }
}

// The model's functions read m.params and m.grads: each call points them at the stash and the
// gradient slot it was given, and the weights back at the current ones after.
static void cuda_use_weights(CudaStage* c, int stash) {
    gpt2_cuda_point_x(&c->m.params, stash < 0 ? c->m.params_memory : c->stash[stash], c->m.sizes);
}
static GPT2Cuda* cuda_model_at(Stage* st, int k) {
    CudaStage* c = cuda_of(st);
    c->m.grads_memory = c->grad_ring[k];
    gpt2_point_params(&c->m.grads, c->grad_ring[k], c->m.sizes);
    c->m.dwte_head = c->dwte_ring[k];
    return &c->m;
}

static void cuda_stash(Stage* st, int i) {
    CudaStage* c = cuda_of(st);
    cudaCheck(cudaMemcpyAsync(c->stash[i], c->m.params_memory, c->m.num_params * sizeof(floatX), cudaMemcpyDeviceToDevice, g_cuda_stream));
}

// the stage input was received (device messages) or uploaded (host staging) into the slot's x_in
static float cuda_forward_into(Stage* st, GPT2CudaActs* a, int slot, int stash, int targets_valid) {
    CudaStage* c = cuda_of(st);
    cuda_use_weights(c, stash);
    int* targets = targets_valid ? stage_targets(st, slot) : NULL;
    float loss = gpt2_cuda_forward(&c->m, a, stage_inputs(st, slot), targets, NULL);
    cuda_use_weights(c, -1);
    return loss;
}
static float cuda_work_forward(Stage* st, int slot, int stash, int targets_valid) {
    CudaStage* c = cuda_of(st);
    c->work.x_in = st->range.has_embed ? c->work_x_in : c->kept[slot].x_in;
    c->work_holds = -1; // (until the forward below is whole)
    float loss = cuda_forward_into(st, &c->work, slot, stash, targets_valid);
    c->work_holds = slot;
    return loss;
}
static float cuda_forward(Stage* st, const Op* op, int slot, int stash, int targets_valid) {
    CudaStage* c = cuda_of(st);
    if (!c->recompute || slot == STAGE_SAMPLE_SLOT) return cuda_forward_into(st, cuda_acts(st, slot), slot, stash, targets_valid);
    float loss = cuda_work_forward(st, slot, stash, targets_valid);
    if (!st->range.has_head) {
        size_t BTC = cuda_btc(st, slot);
        const floatX* last = c->work.residual3 + (size_t)(st->range.l1 - st->range.l0 - 1) * BTC;
        cudaCheck(cudaMemcpyAsync(c->kept[slot].out, last, BTC * sizeof(floatX), cudaMemcpyDeviceToDevice, g_cuda_stream));
    }
    return loss;
}

// the activations slot's backward reads: kept, or under recomputation its forward run again (unless
// the working set still holds it) on the weights the half was given; a weight half on the last stage
// then turns the logits into their gradient again, as its input half did (weight_half)
static GPT2CudaActs* cuda_acts_for_backward(Stage* st, const Op* op, int slot, int stash, int weight_half) {
    CudaStage* c = cuda_of(st);
    if (!c->recompute) return &c->acts[slot];
    if (!stage_must_recompute(st, op, slot, c->work_holds, stash)) return &c->work;
    cuda_work_forward(st, slot, stash, st->range.has_head);
    if (weight_half && st->range.has_head) {
        GPT2CudaActs* w = &c->work;
        classifier_backward_cuda(w->logits, w->lse, w->targets, c->kept[slot].dloss, w->B * w->T, st->cfg.vocab_size, st->cfg.padded_vocab_size);
    }
    return &c->work;
}

// the output gradient was received or uploaded into the last slice of the gacts' dres3
static void cuda_backward_input(Stage* st, const Op* op, int slot, int gacts, int stash, float dloss) {
    CudaStage* c = cuda_of(st);
    GPT2CudaActs* a = cuda_acts_for_backward(st, op, slot, stash, 0);
    if (c->recompute) c->kept[slot].dloss = dloss;
    cuda_use_weights(c, stash);
    gpt2_cuda_backward_input(&c->m, a, &c->ga[gacts], NULL, dloss);
    cuda_use_weights(c, -1);
}
static void cuda_backward_weight(Stage* st, const Op* op, int slot, int gacts, int k, int stash, const GPT2UnitHook* hook) { // (hook: told as each unit's kernels are enqueued)
    GPT2CudaActs* a = cuda_acts_for_backward(st, op, slot, stash, 1);
    gpt2_cuda_backward_weight(cuda_model_at(st, k), a, &cuda_of(st)->ga[gacts], hook);
}
// Waits for the stream (not the device), letting MPI move the messages in flight meanwhile: Open MPI
// moves a large message only inside MPI calls on both ranks (without a single-copy path between the
// processes it goes in fragments the sender pushes), so a rank blocked in cudaStreamSynchronize held
// every activation it had sent until its next wait (one H100, two ranks: ~10 ms a 12.6 MB message).
// The host is free beside the GPU's kernels, as synthetic compute's waits model it.
#define CUDA_FINISH_POLL_S 5e-5
static void cuda_finish(Stage* st) {
    Comm* comm = cuda_of(st)->comm;
    if (!comm_has_peers(comm)) { // nothing to move: no poll's wake-up latency
        cudaCheck(cudaStreamSynchronize(g_cuda_stream));
        return;
    }
    for (;;) {
        cudaError_t e = cudaStreamQuery(g_cuda_stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) cudaCheck(e);
        comm_progress(comm);
        sleep_seconds(CUDA_FINISH_POLL_S);
    }
}

// row 0's logits at position t, to the host, and their softmax over the V real tokens
static void cuda_probs(Stage* st, int slot, int t, float* out) {
    int V = st->cfg.vocab_size, Vp = st->cfg.padded_vocab_size;
    float* logits = (float*)malloc_check(Vp * sizeof(float));
    floatX_download(logits, cuda_acts(st, slot)->logits + (size_t)t * Vp, Vp);
    double mx = logits[0], sum = 0.0;
    for (int i = 1; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < V; i++) sum += exp(logits[i] - mx);
    for (int i = 0; i < V; i++) out[i] = (float)(exp(logits[i] - mx) / sum);
    free(logits);
}

static void cuda_sumsq(Stage* st, int k, double wte_sq, double* out) { gpt2_cuda_grad_unit_sumsq(cuda_model_at(st, k), out); }
static void cuda_update(Stage* st, int k, const AdamWConfig* o, float lr, int t, float scale) {
    gpt2_cuda_update(cuda_model_at(st, k), lr, o->beta1, o->beta2, o->eps, o->weight_decay, t, scale);
}
// slot k empty again: its gradient, its head share, and its DC-ASGD sums if any
static void cuda_zero(Stage* st, int k) {
    CudaStage* c = cuda_of(st);
    gpt2_cuda_zero_grads(cuda_model_at(st, k));
    if (k < c->n_dc) {
        size_t n = c->m.num_params + (st->range.has_head ? st->sizes[0] : 0);
        cudaCheck(cudaMemsetAsync(c->dc_a[k], 0, n * sizeof(float), g_cuda_stream));
        cudaCheck(cudaMemsetAsync(c->dc_b[k], 0, n * sizeof(float), g_cuda_stream));
    }
}
static double cuda_tie_local(Stage* st, int k) {
    gpt2_cuda_tie_wte_grads(cuda_model_at(st, k));
    return STAGE_SUMSQ_UNKNOWN;
}
static void cuda_to_host(Stage* st) {
    gpt2_cuda_get_params(&cuda_of(st)->m, st->params);
    gpt2_cuda_get_adam(&cuda_of(st)->m, st->adam_m, st->adam_v);
}
static void cuda_from_host(Stage* st) {
    gpt2_cuda_set_params(&cuda_of(st)->m, st->params);
    gpt2_cuda_set_adam(&cuda_of(st)->m, st->adam_m, st->adam_v);
}
static void cuda_grads_to_host(Stage* st, int k, float* grads, float* dwte_head) {
    GPT2Cuda* m = cuda_model_at(st, k);
    gpt2_cuda_get_grads(m, grads);
    if (dwte_head) gpt2_cuda_get_dwte_head(m, dwte_head);
}
static void cuda_grads_from_host(Stage* st, int k, const float* grads, const float* dwte_head) {
    GPT2Cuda* m = cuda_model_at(st, k);
    gpt2_cuda_set_grads(m, grads);
    if (dwte_head) cudaCheck(cudaMemcpy(m->dwte_head, dwte_head, st->sizes[0] * sizeof(float), cudaMemcpyHostToDevice));
}

// messages: floatX (B, T, C) buffers, sent and received (NCCL) or staged (host) where the model reads
// and writes them
static size_t cuda_msg_bytes(const Stage* st, int slot) { return cuda_btc(st, slot) * sizeof(floatX); }
static void* cuda_input_msg(Stage* st, int slot) {
    CudaStage* c = cuda_of(st);
    return c->recompute && slot != STAGE_SAMPLE_SLOT ? c->kept[slot].x_in : cuda_acts(st, slot)->x_in;
}
static const void* cuda_output_msg(Stage* st, int slot) { // the last layer's output
    CudaStage* c = cuda_of(st);
    if (c->recompute && slot != STAGE_SAMPLE_SLOT) return c->kept[slot].out;
    return cuda_acts(st, slot)->residual3 + (size_t)(st->range.l1 - st->range.l0 - 1) * cuda_btc(st, slot);
}
static void* cuda_grad_msg(Stage* st, int gacts) { // the last layer's output gradient
    return cuda_of(st)->ga[gacts].dres3 + (size_t)(st->range.l1 - st->range.l0 - 1) * cuda_btc(st, 0);
}
static const void* cuda_dx_in_msg(Stage* st, int gacts, int slot) { // a copy: the next backward reuses gacts
    CudaStage* c = cuda_of(st);
    cudaCheck(cudaMemcpyAsync(c->dx_send[slot], c->ga[gacts].dx_in, cuda_msg_bytes(st, 0), cudaMemcpyDeviceToDevice, g_cuda_stream));
    return c->dx_send[slot];
}
// host staging: the messages' own bytes (floatX) to and from page-locked host memory, which the copy
// engines reach without a bounce through a pageable buffer (and no conversion to fp32 and back,
// which doubled the bytes MPI moved); the stream is drained before the host reads or reuses them
static void cuda_copy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, kind, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
}
static void cuda_upload_input(Stage* st, int slot, const void* x) { cuda_copy_sync(cuda_input_msg(st, slot), x, cuda_msg_bytes(st, slot), cudaMemcpyHostToDevice); }
static void cuda_download_output(Stage* st, int slot, void* x) { cuda_copy_sync(x, cuda_output_msg(st, slot), cuda_msg_bytes(st, slot), cudaMemcpyDeviceToHost); }
static void cuda_upload_grad(Stage* st, int gacts, const void* dx) { cuda_copy_sync(cuda_grad_msg(st, gacts), dx, cuda_msg_bytes(st, 0), cudaMemcpyHostToDevice); }
static void cuda_download_dx_in(Stage* st, int gacts, void* dx) { cuda_copy_sync(dx, cuda_of(st)->ga[gacts].dx_in, cuda_msg_bytes(st, 0), cudaMemcpyDeviceToHost); }
static void* cuda_host_alloc(size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMallocHost(&p, bytes));
    memset(p, 0, bytes);
    return p;
}
static void cuda_host_free(void* p) { cudaCheck(cudaFreeHost(p)); }

// the tied embedding's shares: wte's gradient in slot k (first stage) or the LM head's share (last)
static float* cuda_tied_share(Stage* st, int k) { return st->range.has_embed ? cuda_model_at(st, k)->grads.wte : cuda_of(st)->dwte_ring[k]; }
static float* cuda_tied_other(Stage* st, int k) { return cuda_of(st)->tied[k]; }
static double cuda_tied_sum(Stage* st, int k, const float* first, const float* last) { // added as the CPU adds
    comm_nccl_sum(cuda_model_at(st, k)->grads.wte, first, last, st->sizes[0], g_cuda_stream);
    return STAGE_SUMSQ_UNKNOWN;
}
// the same through host memory (stage_tied_share, stage_tied_sum): only the share and the sum cross
static void cuda_tied_share_to_host(Stage* st, int k, float* share) {
    cuda_copy_sync(share, cuda_tied_share(st, k), st->sizes[0] * sizeof(float), cudaMemcpyDeviceToHost);
}
static void cuda_wte_grad_from_host(Stage* st, int k, const float* wte) {
    cuda_copy_sync(cuda_model_at(st, k)->grads.wte, wte, st->sizes[0] * sizeof(float), cudaMemcpyHostToDevice);
}

// weight prediction: stash i (floatX) = the fp32 master weights extrapolated along AdamW's direction
// (plus c times the change between the last two updates, from the trajectory cuda_track keeps)
static void cuda_predict(Stage* st, int i, const AdamWConfig* o, float lr_sum, float curv) {
    CudaStage* c = cuda_of(st);
    size_t off = 0;
    for (int t = 0; t < GPT2_NUM_PARAM_TENSORS; t++) {
        adamw_predict_cuda(c->stash[i] + off, c->m.master + off, c->m.adam_m + off, c->m.adam_v + off, curv != 0.0f ? c->traj_w_prev + off : NULL,
                           curv != 0.0f ? c->traj_u_prev + off : NULL, st->sizes[t], lr_sum, o->beta1, o->beta2, o->eps,
                           gpt2_param_decays(t) ? o->weight_decay : 0.0f, st->version, curv);
        off += st->sizes[t];
    }
}

// before an update under second-order prediction: the trajectory of the fp32 master weights
static void cuda_track(Stage* st, int first) {
    CudaStage* c = cuda_of(st);
    if (!c->traj_w_prev) td_fatal("cuda_track: the trajectory was not reserved (second-order prediction)");
    trajectory_track_cuda(c->traj_w_prev, c->traj_u_prev, c->m.master, c->m.num_params, first);
}

// The micro-batch's weight gradient alone (m's gradient pointers at dc_g, its LM-head share after
// it), its per-unit squared norms, then into slot k (and DC-ASGD's sums, w_used the compute copy the
// micro-batch ran on)
static void cuda_backward_weight_alone(Stage* st, const Op* op, int slot, int gacts, int k, int stash, int dc, double* unit_sq) {
    CudaStage* c = cuda_of(st);
    size_t n = c->m.num_params, vc = st->range.has_head ? st->sizes[0] : 0;
    if (!c->dc_g) td_fatal("cuda_backward_weight_alone: its buffers were not reserved (DC-ASGD or --gns)");
    cudaCheck(cudaMemsetAsync(c->dc_g, 0, (n + vc) * sizeof(float), g_cuda_stream));
    c->m.grads_memory = c->dc_g;
    gpt2_point_params(&c->m.grads, c->dc_g, c->m.sizes);
    c->m.dwte_head = vc ? c->dc_g + n : NULL;
    gpt2_cuda_backward_weight(&c->m, cuda_acts_for_backward(st, op, slot, stash, 1), &c->ga[gacts], NULL);
    if (unit_sq) {
        int L = st->cfg.num_layers;
        double* units = (double*)calloc_check(L + 2, sizeof(double));
        gpt2_cuda_grad_unit_sumsq(&c->m, units);
        for (int u = 0; u < L + 2; u++) unit_sq[u] += units[u];
        if (vc) unit_sq[L + 2] += sumsq_cuda(c->dc_g + n, vc, c->m.scratch);
        free(units);
    }
    GPT2Cuda* m = cuda_model_at(st, k);
    if (dc) {
        const floatX* w = stash < 0 ? m->params_memory : c->stash[stash];
        dc_accumulate_cuda(m->grads_memory, c->dc_a[k], c->dc_b[k], c->dc_g, w, n);
        if (vc) dc_accumulate_cuda(m->dwte_head, c->dc_a[k] + n, c->dc_b[k] + n, c->dc_g + n, w, vc);
    } else {
        grad_add_cuda(m->grads_memory, c->dc_g, n);
        if (vc) grad_add_cuda(m->dwte_head, c->dc_g + n, vc);
    }
}

static void cuda_head_share_sumsq(Stage* st, int k, double* out) { *out = sumsq_cuda(cuda_of(st)->dwte_ring[k], st->sizes[0], cuda_of(st)->m.scratch); }

// w_now: the compute copy (AdamW refreshes it with the master weights), as w_used above is one: with the
// fp32 master here, w_now - w_used held w_used's bf16 rounding (up to 2^-9 |w|, about one update's size)
// besides the change since, and the CPU's correction (fp32 on both sides) has no such term
static void cuda_dc_correct(Stage* st, int k, float lambda) {
    CudaStage* c = cuda_of(st);
    GPT2Cuda* m = cuda_model_at(st, k);
    size_t n = m->num_params, vc = st->range.has_head ? st->sizes[0] : 0;
    dc_correct_cuda(m->grads_memory, c->dc_a[k], c->dc_b[k], m->params_memory, n, lambda);
    if (vc) dc_correct_cuda(m->dwte_head, c->dc_a[k] + n, c->dc_b[k] + n, m->params_memory, vc, lambda);
}

static void cuda_memory(const Stage* st, StageUnitBytes* b) {
    const GPT2Config* cfg = &st->cfg;
    size_t C = cfg->channels, X = sizeof(floatX);
    size_t head = st->range.has_head ? 1 : 0, Vp = cfg->padded_vocab_size;
    double whole = (double)gpt2_cuda_acts_bytes(cfg, &st->range, st->B, st->T), btc = (double)(cuda_btc(st, 0) * X);
    int recompute = cuda_of(st)->recompute;
    b->slot = recompute ? btc * (!st->range.has_embed + !st->range.has_head) : whole;
    b->once = recompute ? whole : 0.0;
    b->gacts = (double)gpt2_cuda_grad_acts_bytes(cfg, &st->range, st->B, st->T);
    b->stash = (double)(st->num_params * X);
    b->grad_slot = (double)(st->num_params * 4 + head * Vp * C * 4);
}

static void cuda_device_memory(const Stage* st, double* total, double* used, int* devices) {
    (void)st;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    cudaCheck(cudaGetDeviceCount(devices));
    *total = (double)total_b;
    *used = (double)(total_b - free_b);
}

static void cuda_destroy(Stage* st) {
    CudaStage* c = cuda_of(st);
    for (int i = 0; i < c->n_acts && !c->recompute; i++) gpt2_cuda_acts_free(&c->acts[i]);
    for (int i = 0; i < c->n_acts && c->recompute; i++) {
        if (c->kept[i].x_in) cudaCheck(cudaFree(c->kept[i].x_in));
        if (c->kept[i].out) cudaCheck(cudaFree(c->kept[i].out));
    }
    if (c->recompute && c->n_acts) gpt2_cuda_acts_free(&c->work);
    free(c->kept);
    if (c->has_sample) gpt2_cuda_acts_free(&c->sample);
    for (int i = 0; i < c->n_ga; i++) gpt2_cuda_grad_acts_free(&c->ga[i]);
    for (int i = 0; i < c->n_stash; i++) cudaCheck(cudaFree(c->stash[i]));
    for (int k = 1; k < c->n_ring; k++) {
        cudaCheck(cudaFree(c->grad_ring[k]));
        if (c->dwte_ring[k]) cudaCheck(cudaFree(c->dwte_ring[k]));
    }
    for (int i = 0; i < c->n_dx_send; i++) cudaCheck(cudaFree(c->dx_send[i]));
    for (int k = 0; k < c->n_tied; k++) cudaCheck(cudaFree(c->tied[k]));
    for (int k = 0; k < c->n_dc; k++) {
        cudaCheck(cudaFree(c->dc_a[k]));
        cudaCheck(cudaFree(c->dc_b[k]));
    }
    if (c->dc_g) cudaCheck(cudaFree(c->dc_g));
    if (c->traj_w_prev) cudaCheck(cudaFree(c->traj_w_prev));
    if (c->traj_u_prev) cudaCheck(cudaFree(c->traj_u_prev));
    free(c->dc_a);
    free(c->dc_b);
    cuda_model_at(st, 0);  // m's gradient pointers back at its own memory (slot 0), which it frees
    gpt2_cuda_free(&c->m);
    free(c->dx_send);
    free(c->tied);
    free(c->acts);
    free(c->ga);
    free(c->stash);
    free(c->grad_ring);
    free(c->dwte_ring);
    free(c);
}

static const StageBackend CUDA_BACKEND = {
    .name = "cuda",
    .host_memory = 0,
    .reserve = cuda_reserve,
    .destroy = cuda_destroy,
    .forward = cuda_forward,
    .backward_input = cuda_backward_input,
    .backward_weight = cuda_backward_weight,
    .finish = cuda_finish,
    .probs = cuda_probs,
    .stash = cuda_stash,
    .grad_unit_sumsq = cuda_sumsq,
    .update = cuda_update,
    .zero_grad = cuda_zero,
    .tie_local = cuda_tie_local,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .host_grads = NULL,
    .grads_to_host = cuda_grads_to_host,
    .grads_from_host = cuda_grads_from_host,
    .tied_share_to_host = cuda_tied_share_to_host,
    .wte_grad_from_host = cuda_wte_grad_from_host,
    .msg_bytes = cuda_msg_bytes,
    .input_msg = cuda_input_msg,
    .output_msg = cuda_output_msg,
    .grad_msg = cuda_grad_msg,
    .dx_in_msg = cuda_dx_in_msg,
    .upload_input = cuda_upload_input,
    .download_output = cuda_download_output,
    .upload_grad = cuda_upload_grad,
    .download_dx_in = cuda_download_dx_in,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .tied_share = cuda_tied_share,
    .tied_other = cuda_tied_other,
    .tied_sum = cuda_tied_sum,
    .memory = cuda_memory,
    .device_memory = cuda_device_memory,
    .predict = cuda_predict,
    .track = cuda_track,
    .backward_weight_alone = cuda_backward_weight_alone,
    .head_share_sumsq = cuda_head_share_sumsq,
    .dc_correct = cuda_dc_correct,
};

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
static void cuda_stage_create(Stage* st, const StageInit* init) {
    const Comm* comm = (const Comm*)init->comm;
    int n = 1;
    cudaCheck(cudaGetDeviceCount(&n));
    cuda_device_init(comm->local_rank % n);
    CudaStage* c = (CudaStage*)calloc_check(1, sizeof(CudaStage));
    c->comm = (Comm*)init->comm;
    c->recompute = init->recompute;
    c->work_holds = -1;
    stage_init_common(st, init, &CUDA_BACKEND, c);
    gpt2_cuda_init(&c->m, init->cfg, &init->range, st->params);
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

// a StageDpAverage: gradient slot k and the LM head's share of wte, averaged in place, bitwise
// comm_dp_average's result
static void cuda_dp_average(void* ctx, Stage* st, int k) {
    CudaDp* dp = (CudaDp*)ctx;
    GPT2Cuda* m = cuda_model_at(st, k);
    comm_nccl_wait_for(&dp->nccl, g_cuda_stream); // after the backward kernels that wrote them
    comm_nccl_dp_average(&dp->nccl, m->grads_memory, m->num_params, dp->scratch);
    if (m->dwte_head) comm_nccl_dp_average(&dp->nccl, m->dwte_head, (size_t)st->cfg.padded_vocab_size * st->cfg.channels, dp->scratch);
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
static void cuda_stage_create(Stage* st, const StageInit* init) {
    td_fatal("--device cuda: this build has no CUDA backend (build where nvcc is installed)");
}
static double cuda_peak(void) { return 0.0; }
static int cuda_link_init(const Comm* c, const CommLink** link) { return 0; }
static void cuda_link_free(const CommLink* link) {}
static int cuda_dp_init(const Comm* c, Stage* st, void** ctx) { return 0; }
static void cuda_dp_average(void* ctx, Stage* st, int k) {}
static void cuda_dp_free(void* ctx) {}
#endif

// the GPU as a device for stage_create (refused at run time by a build without nvcc)
static const StageDevice STAGE_CUDA = {"cuda", cuda_stage_create};
