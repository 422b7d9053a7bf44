// GPT-2 on one GPU over a layer range [l0, l1): the CUDA backend's mirror of llmc/gpt2.h (same
// GPT2Config, GPT2Range, parameter order and sizes): fp32 master weights, gradients and AdamW moments,
// a floatX copy of the weights for compute, floatX activations; forward, backward split into its
// input-gradient and weight-gradient halves, AdamW. Differences from the CPU: attention keeps the
// log-sum-exp (Ls, B, NH, T) instead of the T x T probabilities, the classifier keeps the logits and
// their lse, and backward_input overwrites the logits with their gradient.
// Header-only with C linkage for the API below: include it in exactly one .cu file.
#pragma once
#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "cuda_common.cuh"
#include "encoder.cuh"
#include "gelu.cuh"
#include "global_norm.cuh"
#include "gpt2.h"
#include "layernorm.cuh"
#include "matmul.cuh"

// the floatX compute copy of the parameters, pointers into one device buffer, llm.c's order
typedef struct {
    floatX* wte;      // (Vp, C)
    floatX* wpe;      // (maxT, C)
    floatX* ln1w;     // (Ls, C)
    floatX* ln1b;     // (Ls, C)
    floatX* qkvw;     // (Ls, 3*C, C)
    floatX* qkvb;     // (Ls, 3*C)
    floatX* attprojw; // (Ls, C, C)
    floatX* attprojb; // (Ls, C)
    floatX* ln2w;     // (Ls, C)
    floatX* ln2b;     // (Ls, C)
    floatX* fcw;      // (Ls, 4*C, C)
    floatX* fcb;      // (Ls, 4*C)
    floatX* fcprojw;  // (Ls, C, 4*C)
    floatX* fcprojb;  // (Ls, C)
    floatX* lnfw;     // (C)
    floatX* lnfb;     // (C)
} ParameterTensorsX;

typedef struct {
    GPT2Config cfg;
    GPT2Range range;
    size_t sizes[GPT2_NUM_PARAM_TENSORS]; // as gpt2_param_sizes
    size_t num_params;
    float* master;            // (num_params) fp32 master weights, gpt2_param_sizes layout
    floatX* params_memory;    // (num_params) compute copy
    ParameterTensorsX params; // into params_memory
    float* grads_memory;      // (num_params) fp32, accumulated (+=) by backward_weight
    ParameterTensors grads;   // into grads_memory (device pointers)
    float* dwte_head;         // (Vp, C) the LM head's share of wte's gradient; NULL unless has_head
    float* adam_m;            // (num_params)
    float* adam_v;            // (num_params)
    float* scratch;           // (scratch_floats) column-sum partials, sumsq partials
    size_t scratch_floats;
} GPT2Cuda;

// activations of one micro-batch (B, T) through the stage, on the device
typedef struct {
    int B, T;
    int* inputs;       // (B, T) token ids (first stage)
    int* targets;      // (B, T) next-token ids (last stage)
    int* inputs_host;  // (B, T) host copy of the token ids (the encoder backward buckets them)
    int targets_valid;
    floatX* x_in;      // (B, T, C) stage input
    floatX* ln1;       // (Ls, B, T, C)
    float* ln1_mean;   // (Ls, B, T)
    float* ln1_rstd;   // (Ls, B, T)
    floatX* qkv;       // (Ls, B, T, 3*C)
    floatX* atty;      // (Ls, B, T, C)
    float* att_lse;    // (Ls, B, NH, T) attention log-sum-exp
    floatX* attproj;   // (Ls, B, T, C)
    floatX* residual2; // (Ls, B, T, C)
    floatX* ln2;       // (Ls, B, T, C)
    float* ln2_mean;   // (Ls, B, T)
    float* ln2_rstd;   // (Ls, B, T)
    floatX* fch;       // (Ls, B, T, 4*C)
    floatX* fch_gelu;  // (Ls, B, T, 4*C)
    floatX* fcproj;    // (Ls, B, T, C)
    floatX* residual3; // (Ls, B, T, C) layer outputs; the last one is the stage output
    floatX* lnf;       // (B, T, C) last stage only
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    floatX* logits;    // (B, T, Vp) logits; their gradient after gpt2_cuda_backward_input
    float* lse;        // (B, T) classifier log-sum-exp
    float* losses;     // (B, T)
    void* mem_x;       // the two device allocations (floatX arrays, float/int arrays)
    void* mem_f;
} GPT2CudaActs;

// gradients of activations kept between the two halves of backward, on the device
typedef struct {
    floatX* dx_in;     // (B, T, C) gradient of the stage input
    floatX* dln1;      // (Ls, B, T, C)
    floatX* dqkv;      // (Ls, B, T, 3*C)
    floatX* datty;     // (Ls, B, T, C)
    floatX* dres2;     // (Ls, B, T, C)
    floatX* dln2;      // (Ls, B, T, C)
    floatX* dfch;      // (Ls, B, T, 4*C) before GELU
    floatX* dfch_gelu; // (Ls, B, T, 4*C)
    floatX* dres3;     // (Ls, B, T, C) gradient of each layer's output
    floatX* dlnf;      // (B, T, C)
    float* att_scratch; // (B, NH, T)
    int* enc_scratch;  // (3*B*T + 1)
    void* mem_x;
    void* mem_f;
} GPT2CudaGradActs;

// one device allocation holding n arrays of the given byte sizes (256-byte aligned, zeroed); zero sizes give NULL
static inline size_t gpt2_cuda_group_bytes(const size_t* bytes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (bytes[i] + 255) / 256 * 256;
    return total;
}
static inline void* gpt2_cuda_alloc_group(void** ptrs[], const size_t* bytes, int n) {
    size_t total = gpt2_cuda_group_bytes(bytes, n);
    char* mem;
    cudaCheck(cudaMalloc((void**)&mem, total ? total : 256));
    cudaCheck(cudaMemset(mem, 0, total ? total : 256));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        *ptrs[i] = bytes[i] ? mem + off : NULL;
        off += (bytes[i] + 255) / 256 * 256;
    }
    return mem;
}

static inline void gpt2_cuda_point_x(ParameterTensorsX* p, floatX* memory, const size_t sizes[GPT2_NUM_PARAM_TENSORS]) {
    floatX** ptrs[GPT2_NUM_PARAM_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
                                             &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    floatX* it = memory;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        *ptrs[i] = sizes[i] ? it : NULL;
        it += sizes[i];
    }
}

// weight decay applies to the 2-D matrices only (wte, wpe, qkvw, attprojw, fcw, fcprojw), as llm.c's CUDA trainer

#ifdef __cplusplus
extern "C" {
#endif

// uploads params_host (num_params floats, gpt2_param_sizes layout for range r) as master weights and
// compute copy; zero gradients and AdamW moments
void gpt2_cuda_init(GPT2Cuda* m, const GPT2Config* cfg, const GPT2Range* r, const float* params_host) {
    memset(m, 0, sizeof(*m));
    if (r->l1 <= r->l0) td_fatal("gpt2_cuda_init: empty layer range [%d, %d)", r->l0, r->l1);
    cuda_device_init(0);
    matmul_cuda_setup(); // no device-wide synchronisation inside a step
    m->cfg = *cfg;
    m->range = *r;
    m->num_params = gpt2_param_sizes(cfg, r, m->sizes);
    size_t n = m->num_params, C = cfg->channels, Vp = cfg->padded_vocab_size;
    // column-sum partials (dbias of the widest layer), or sumsq partials + one double per gradient slice
    size_t Ls = r->l1 - r->l0, sumsq_floats = SUMSQ_BLOCKS + 2 * (4 + 12 * Ls);
    m->scratch_floats = COLSUM_MAX_CHUNKS * 4 * C > sumsq_floats ? COLSUM_MAX_CHUNKS * 4 * C : sumsq_floats;
    void** ptrs[] = {(void**)&m->master, (void**)&m->params_memory, (void**)&m->grads_memory, (void**)&m->dwte_head,
                     (void**)&m->adam_m, (void**)&m->adam_v, (void**)&m->scratch};
    size_t bytes[] = {n * 4, n * sizeof(floatX), n * 4, r->has_head ? Vp * C * 4 : 0, n * 4, n * 4, m->scratch_floats * 4};
    gpt2_cuda_alloc_group(ptrs, bytes, 7);
    gpt2_cuda_point_x(&m->params, m->params_memory, m->sizes);
    gpt2_point_params(&m->grads, m->grads_memory, m->sizes);
    cudaCheck(cudaMemcpy(m->master, params_host, n * 4, cudaMemcpyHostToDevice));
    floatX_upload(m->params_memory, params_host, n);
}

void gpt2_cuda_free(GPT2Cuda* m) {
    cudaCheck(cudaFree(m->master)); // the group's base
    memset(m, 0, sizeof(*m));
}

// replaces the master weights and the compute copy
void gpt2_cuda_set_params(GPT2Cuda* m, const float* params_host) {
    cudaCheck(cudaMemcpy(m->master, params_host, m->num_params * 4, cudaMemcpyHostToDevice));
    floatX_upload(m->params_memory, params_host, m->num_params);
}
void gpt2_cuda_get_params(const GPT2Cuda* m, float* params_host) {
    cudaCheck(cudaMemcpy(params_host, m->master, m->num_params * 4, cudaMemcpyDeviceToHost));
}
void gpt2_cuda_get_grads(const GPT2Cuda* m, float* grads_host) {
    cudaCheck(cudaMemcpy(grads_host, m->grads_memory, m->num_params * 4, cudaMemcpyDeviceToHost));
}
void gpt2_cuda_set_grads(GPT2Cuda* m, const float* grads_host) {
    cudaCheck(cudaMemcpy(m->grads_memory, grads_host, m->num_params * 4, cudaMemcpyHostToDevice));
}
// the LM head's share of wte's gradient (Vp, C); last stage only
void gpt2_cuda_get_dwte_head(const GPT2Cuda* m, float* host) {
    if (!m->dwte_head) td_fatal("gpt2_cuda_get_dwte_head: the stage has no LM head");
    cudaCheck(cudaMemcpy(host, m->dwte_head, m->sizes[0] * 4, cudaMemcpyDeviceToHost));
}
// AdamW moments (num_params each), for checkpoints
void gpt2_cuda_get_adam(const GPT2Cuda* m, float* m_host, float* v_host) {
    cudaCheck(cudaMemcpy(m_host, m->adam_m, m->num_params * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(v_host, m->adam_v, m->num_params * 4, cudaMemcpyDeviceToHost));
}
void gpt2_cuda_set_adam(GPT2Cuda* m, const float* m_host, const float* v_host) {
    cudaCheck(cudaMemcpy(m->adam_m, m_host, m->num_params * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->adam_v, v_host, m->num_params * 4, cudaMemcpyHostToDevice));
}

void gpt2_cuda_zero_grads(GPT2Cuda* m) {
    cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->num_params * 4, g_cuda_stream));
    if (m->dwte_head) cudaCheck(cudaMemsetAsync(m->dwte_head, 0, m->sizes[0] * 4, g_cuda_stream));
}

// dst (n) += src (n), one exact IEEE add (not --use_fast_math's flush-to-zero add): the same bits as
// comm_nccl_sum (tdpipe/comm_nccl.cuh), which makes the same sum when the two shares are on two stages,
// so that P = 1 and P > 1 stay bitwise equal where a share or the sum is subnormal
__global__ void gpt2_cuda_add_kernel(float* dst, const float* src, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = f32_add_exact(dst[i], src[i]);
}
// grads.wte += dwte_head: the tied embedding, when one stage holds both ends (P = 1)
void gpt2_cuda_tie_wte_grads(GPT2Cuda* m) {
    if (!m->dwte_head || !m->grads.wte) td_fatal("gpt2_cuda_tie_wte_grads: the stage lacks the LM head or wte");
    long n = (long)m->sizes[0];
    gpt2_cuda_add_kernel<<<ceil_div(n, 256), 256, 0, g_cuda_stream>>>(m->grads.wte, m->dwte_head, n);
    cudaCheckLaunch("gpt2_cuda_add_kernel");
}

// sums of squares of the gradient per unit, as stage_grad_unit_sumsq (tdpipe/stage.h): unit 0 = wte + wpe,
// 1 + l = layer l's twelve tensors, L + 1 = lnfw + lnfb; writes the units this stage holds into out (L + 2)
void gpt2_cuda_grad_unit_sumsq(const GPT2Cuda* m, double* out) {
    const GPT2Range* r = &m->range;
    const ParameterTensors* g = &m->grads;
    int Ls = r->l1 - r->l0, C = m->cfg.channels, k = 0;
    double* dev = reinterpret_cast<double*>(m->scratch + SUMSQ_BLOCKS); // one double per tensor slice
    if (r->has_embed) {
        sumsq_cuda_async(dev + k++, g->wte, m->sizes[0], m->scratch);
        sumsq_cuda_async(dev + k++, g->wpe, m->sizes[1], m->scratch);
    }
    float* layer_tensors[12] = {g->ln1w, g->ln1b, g->qkvw, g->qkvb, g->attprojw, g->attprojb, g->ln2w, g->ln2b, g->fcw, g->fcb, g->fcprojw, g->fcprojb};
    for (int l = 0; l < Ls; l++)
        for (int i = 0; i < 12; i++) {
            size_t per_layer = m->sizes[2 + i] / Ls;
            sumsq_cuda_async(dev + k++, layer_tensors[i] + l * per_layer, per_layer, m->scratch);
        }
    if (r->has_head) {
        sumsq_cuda_async(dev + k++, g->lnfw, C, m->scratch);
        sumsq_cuda_async(dev + k++, g->lnfb, C, m->scratch);
    }
    double* h = (double*)malloc_check(k * sizeof(double));
    cudaCheck(cudaMemcpyAsync(h, dev, k * sizeof(double), cudaMemcpyDeviceToHost, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    int j = 0;
    if (r->has_embed) {
        out[0] = h[0] + h[1];
        j = 2;
    }
    for (int l = 0; l < Ls; l++) {
        double acc = 0.0;
        for (int i = 0; i < 12; i++) acc += h[j++];
        out[1 + r->l0 + l] = acc;
    }
    if (r->has_head) out[1 + m->cfg.num_layers] = h[j] + h[j + 1];
    free(h);
}

// one AdamW step (llmc/adamw.h semantics) over every tensor; t is the 1-based step; weight decay on
// 2-D matrices only; refreshes the compute copy
void gpt2_cuda_update(GPT2Cuda* m, float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        size_t n = m->sizes[i];
        adamw_update_cuda(m->master + off, m->params_memory + off, m->grads_memory + off, m->adam_m + off, m->adam_v + off, n, lr,
                          beta1, beta2, eps, gpt2_param_decays(i) ? weight_decay : 0.0f, t, grad_scale);
        off += n;
    }
}

// The byte sizes of a slot's arrays in the order gpt2_cuda_acts_alloc points them (bx: the floatX
// ones, bf: the fp32 and int ones); the stage's memory plan sums the same (gpt2_cuda_acts_bytes)
enum { ACTS_NX = 13, ACTS_NF = 11, GACTS_NX = 10, GACTS_NF = 2 };
static void acts_sizes(const GPT2Config* cfg, const GPT2Range* r, int B, int T, size_t bx[ACTS_NX], size_t bf[ACTS_NF]) {
    size_t BT = (size_t)B * T, C = cfg->channels, Ls = r->l1 - r->l0, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t head = r->has_head ? 1 : 0, X = sizeof(floatX);
    const size_t x[ACTS_NX] = {BT * C * X, Ls * BT * C * X, Ls * BT * 3 * C * X, Ls * BT * C * X, Ls * BT * C * X, Ls * BT * C * X,
                               Ls * BT * C * X, Ls * BT * 4 * C * X, Ls * BT * 4 * C * X, Ls * BT * C * X, Ls * BT * C * X, head * BT * C * X,
                               head * BT * Vp * X};
    const size_t f[ACTS_NF] = {Ls * BT * 4, Ls * BT * 4, Ls * NH * BT * 4, Ls * BT * 4, Ls * BT * 4, head * BT * 4, head * BT * 4, head * BT * 4,
                               head * BT * 4, BT * 4, BT * 4};
    memcpy(bx, x, sizeof(x));
    memcpy(bf, f, sizeof(f));
}

// the same for a gradient buffer's arrays (gpt2_cuda_grad_acts_alloc)
static void grad_acts_sizes(const GPT2Config* cfg, const GPT2Range* r, int B, int T, size_t bx[GACTS_NX], size_t bf[GACTS_NF]) {
    size_t BT = (size_t)B * T, C = cfg->channels, Ls = r->l1 - r->l0, NH = cfg->num_heads;
    size_t head = r->has_head ? 1 : 0, X = sizeof(floatX);
    const size_t x[GACTS_NX] = {BT * C * X, Ls * BT * C * X, Ls * BT * 3 * C * X, Ls * BT * C * X, Ls * BT * C * X, Ls * BT * C * X,
                                Ls * BT * 4 * C * X, Ls * BT * 4 * C * X, Ls * BT * C * X, head * BT * C * X};
    const size_t f[GACTS_NF] = {NH * BT * 4, (3 * BT + 1) * 4};
    memcpy(bx, x, sizeof(x));
    memcpy(bf, f, sizeof(f));
}

// the device bytes of one slot and of one gradient buffer, as allocated (arrays 256-byte aligned)
size_t gpt2_cuda_acts_bytes(const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    size_t bx[ACTS_NX], bf[ACTS_NF];
    acts_sizes(cfg, r, B, T, bx, bf);
    return gpt2_cuda_group_bytes(bx, ACTS_NX) + gpt2_cuda_group_bytes(bf, ACTS_NF);
}

size_t gpt2_cuda_grad_acts_bytes(const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    size_t bx[GACTS_NX], bf[GACTS_NF];
    grad_acts_sizes(cfg, r, B, T, bx, bf);
    return gpt2_cuda_group_bytes(bx, GACTS_NX) + gpt2_cuda_group_bytes(bf, GACTS_NF);
}

void gpt2_cuda_acts_alloc(GPT2CudaActs* a, const GPT2Cuda* m, int B, int T) {
    memset(a, 0, sizeof(*a));
    a->B = B;
    a->T = T;
    if (T > m->cfg.max_seq_len) td_fatal("gpt2_cuda_acts_alloc: T = %d exceeds max_seq_len %d", T, m->cfg.max_seq_len);
    void** px[ACTS_NX] = {(void**)&a->x_in, (void**)&a->ln1, (void**)&a->qkv, (void**)&a->atty, (void**)&a->attproj, (void**)&a->residual2,
                          (void**)&a->ln2, (void**)&a->fch, (void**)&a->fch_gelu, (void**)&a->fcproj, (void**)&a->residual3, (void**)&a->lnf,
                          (void**)&a->logits};
    void** pf[ACTS_NF] = {(void**)&a->ln1_mean, (void**)&a->ln1_rstd, (void**)&a->att_lse, (void**)&a->ln2_mean, (void**)&a->ln2_rstd,
                          (void**)&a->lnf_mean, (void**)&a->lnf_rstd, (void**)&a->lse, (void**)&a->losses, (void**)&a->inputs, (void**)&a->targets};
    size_t bx[ACTS_NX], bf[ACTS_NF];
    acts_sizes(&m->cfg, &m->range, B, T, bx, bf);
    a->mem_x = gpt2_cuda_alloc_group(px, bx, ACTS_NX);
    a->mem_f = gpt2_cuda_alloc_group(pf, bf, ACTS_NF);
    a->inputs_host = (int*)calloc_check((size_t)B * T, sizeof(int));
}

void gpt2_cuda_acts_free(GPT2CudaActs* a) {
    cudaCheck(cudaFree(a->mem_x));
    cudaCheck(cudaFree(a->mem_f));
    free(a->inputs_host);
    memset(a, 0, sizeof(*a));
}

void gpt2_cuda_grad_acts_alloc(GPT2CudaGradActs* g, const GPT2Cuda* m, int B, int T) {
    memset(g, 0, sizeof(*g));
    void** px[GACTS_NX] = {(void**)&g->dx_in, (void**)&g->dln1, (void**)&g->dqkv, (void**)&g->datty, (void**)&g->dres2, (void**)&g->dln2,
                           (void**)&g->dfch, (void**)&g->dfch_gelu, (void**)&g->dres3, (void**)&g->dlnf};
    void** pf[GACTS_NF] = {(void**)&g->att_scratch, (void**)&g->enc_scratch};
    size_t bx[GACTS_NX], bf[GACTS_NF];
    grad_acts_sizes(&m->cfg, &m->range, B, T, bx, bf);
    g->mem_x = gpt2_cuda_alloc_group(px, bx, GACTS_NX);
    g->mem_f = gpt2_cuda_alloc_group(pf, bf, GACTS_NF);
}

void gpt2_cuda_grad_acts_free(GPT2CudaGradActs* g) {
    cudaCheck(cudaFree(g->mem_x));
    cudaCheck(cudaFree(g->mem_f));
    memset(g, 0, sizeof(*g));
}

// forward of one micro-batch. inputs (B, T) host token ids (first stage; else unused, may be NULL);
// targets (B, T) host next-token ids or NULL (no loss); x_in (B, T, C) host stage input for a non-first
// stage, or NULL when a->x_in was filled on the device. Returns the mean loss over B*T (last stage
// with targets), else 0.
// the kernels index wte's rows and the logits by token id unchecked: ids (n) must lie in [0, V)
static void gpt2_cuda_check_ids(const int* ids, int n, int V, const char* what) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V) td_fatal("gpt2_cuda_forward: %s %d at position %d is outside [0, V = %d)", what, ids[i], i, V);
}

float gpt2_cuda_forward(GPT2Cuda* m, GPT2CudaActs* a, const int* inputs, const int* targets, const float* x_in) {
    const GPT2Config* cfg = &m->cfg;
    const GPT2Range* r = &m->range;
    const ParameterTensorsX* p = &m->params;
    int B = a->B, T = a->T, C = cfg->channels, NH = cfg->num_heads, Ls = r->l1 - r->l0;
    int BT = B * T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C, c = C;
    if (r->has_embed) {
        if (!inputs) td_fatal("gpt2_cuda_forward: the first stage needs inputs");
        gpt2_cuda_check_ids(inputs, BT, V, "input token");
        memcpy(a->inputs_host, inputs, BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(a->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, g_cuda_stream));
        encoder_forward_cuda(a->x_in, a->inputs, p->wte, p->wpe, B, T, C);
    } else if (x_in) {
        floatX_upload(a->x_in, x_in, BTC);
    }
    a->targets_valid = targets != NULL && r->has_head;
    if (a->targets_valid) gpt2_cuda_check_ids(targets, BT, V, "target token");
    if (a->targets_valid) cudaCheck(cudaMemcpyAsync(a->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, g_cuda_stream));
    layernorm_forward_cuda(a->ln1, a->ln1_mean, a->ln1_rstd, a->x_in, p->ln1w, p->ln1b, BT, C);
    for (int l = 0; l < Ls; l++) {
        const floatX* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        floatX* ln1 = a->ln1 + l * BTC;
        floatX* qkv = a->qkv + l * 3 * BTC;
        floatX* atty = a->atty + l * BTC;
        floatX* attproj = a->attproj + l * BTC;
        floatX* residual2 = a->residual2 + l * BTC;
        floatX* ln2 = a->ln2 + l * BTC;
        floatX* fch = a->fch + l * 4 * BTC;
        floatX* fch_gelu = a->fch_gelu + l * 4 * BTC;
        floatX* fcproj = a->fcproj + l * BTC;
        floatX* residual3 = a->residual3 + l * BTC;
        matmul_forward_cuda(qkv, ln1, p->qkvw + l * 3 * c * c, p->qkvb + l * 3 * c, BT, C, 3 * C);
        attention_forward_cuda(atty, a->att_lse + (size_t)l * NH * BT, qkv, B, T, C, NH);
        matmul_forward_cuda(attproj, atty, p->attprojw + l * c * c, p->attprojb + l * c, BT, C, C);
        fused_residual_layernorm_forward_cuda(residual2, ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, residual, attproj,
                                              p->ln2w + l * c, p->ln2b + l * c, BT, C);
        matmul_forward_cuda(fch, ln2, p->fcw + l * 4 * c * c, p->fcb + l * 4 * c, BT, C, 4 * C);
        gelu_forward_cuda(fch_gelu, fch, 4 * BTC);
        matmul_forward_cuda(fcproj, fch_gelu, p->fcprojw + l * 4 * c * c, p->fcprojb + l * c, BT, 4 * C, C);
        // the residual add fused with the LayerNorm that reads it next: the next layer's ln1, or lnf
        if (l + 1 < Ls)
            fused_residual_layernorm_forward_cuda(residual3, a->ln1 + (l + 1) * BTC, a->ln1_mean + (l + 1) * BT, a->ln1_rstd + (l + 1) * BT,
                                                  residual2, fcproj, p->ln1w + (l + 1) * c, p->ln1b + (l + 1) * c, BT, C);
        else if (r->has_head)
            fused_residual_layernorm_forward_cuda(residual3, a->lnf, a->lnf_mean, a->lnf_rstd, residual2, fcproj, p->lnfw, p->lnfb, BT, C);
        else
            residual_forward_cuda(residual3, residual2, fcproj, BTC);
    }
    if (!r->has_head) return 0.0f;
    matmul_forward_cuda(a->logits, a->lnf, p->wte, NULL, BT, C, Vp);
    if (!a->targets_valid) return 0.0f;
    classifier_forward_cuda(a->losses, a->lse, a->logits, a->targets, BT, V, Vp);
    float* losses = (float*)malloc_check(BT * sizeof(float));
    cudaCheck(cudaMemcpyAsync(losses, a->losses, BT * sizeof(float), cudaMemcpyDeviceToHost, g_cuda_stream));
    cudaCheck(cudaStreamSynchronize(g_cuda_stream));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += losses[i];
    free(losses);
    return (float)(sum / BT);
}

// the stage output (B, T, C) (last layer's residual3) to the host as fp32
void gpt2_cuda_stage_output(const GPT2Cuda* m, const GPT2CudaActs* a, float* out_host) {
    size_t BTC = (size_t)a->B * a->T * m->cfg.channels;
    floatX_download(out_host, a->residual3 + (size_t)(m->range.l1 - m->range.l0 - 1) * BTC, BTC);
}

// input-gradient half of backward. Last stage: from the loss, each token weighted by dloss (needs the
// forward's targets); the logits become their gradient. Other stages: from dx_out (B, T, C) host fp32,
// the gradient of the stage output, or NULL when the last slice of g->dres3 was filled on the device.
void gpt2_cuda_backward_input(GPT2Cuda* m, GPT2CudaActs* a, GPT2CudaGradActs* g, const float* dx_out, float dloss) {
    const GPT2Config* cfg = &m->cfg;
    const GPT2Range* r = &m->range;
    const ParameterTensorsX* p = &m->params;
    int B = a->B, T = a->T, C = cfg->channels, NH = cfg->num_heads, Ls = r->l1 - r->l0;
    int BT = B * T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C, c = C;
    floatX* dlast = g->dres3 + (Ls - 1) * BTC;
    if (r->has_head) {
        if (!a->targets_valid) td_fatal("gpt2_cuda_backward_input: the forward had no targets");
        const floatX* last = a->residual3 + (Ls - 1) * BTC;
        classifier_backward_cuda(a->logits, a->lse, a->targets, dloss, BT, V, Vp);
        matmul_backward_input_cuda(g->dlnf, a->logits, p->wte, BT, C, Vp, 0);
        layernorm_backward_input_cuda(dlast, NULL, g->dlnf, last, p->lnfw, a->lnf_mean, a->lnf_rstd, BT, C);
    } else if (dx_out) {
        floatX_upload(dlast, dx_out, BTC);
    }
    for (int l = Ls - 1; l >= 0; l--) {
        const floatX* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        floatX* dresidual = l == 0 ? g->dx_in : g->dres3 + (l - 1) * BTC; // gradient of the layer input
        const floatX* dres3 = g->dres3 + l * BTC;
        floatX* dres2 = g->dres2 + l * BTC;
        floatX* dfch_gelu = g->dfch_gelu + l * 4 * BTC;
        floatX* dfch = g->dfch + l * 4 * BTC;
        floatX* dln2 = g->dln2 + l * BTC;
        floatX* datty = g->datty + l * BTC;
        floatX* dqkv = g->dqkv + l * 3 * BTC;
        floatX* dln1 = g->dln1 + l * BTC;
        matmul_backward_input_cuda(dfch_gelu, dres3, p->fcprojw + l * 4 * c * c, BT, 4 * C, C, 0);
        gelu_backward_cuda(dfch, a->fch + l * 4 * BTC, dfch_gelu, 4 * BTC);
        matmul_backward_input_cuda(dln2, dfch, p->fcw + l * 4 * c * c, BT, C, 4 * C, 0);
        layernorm_backward_input_cuda(dres2, dres3, dln2, a->residual2 + l * BTC, p->ln2w + l * c, a->ln2_mean + l * BT,
                                      a->ln2_rstd + l * BT, BT, C);
        matmul_backward_input_cuda(datty, dres2, p->attprojw + l * c * c, BT, C, C, 0);
        attention_backward_cuda(dqkv, g->att_scratch, datty, a->qkv + l * 3 * BTC, a->atty + l * BTC, a->att_lse + (size_t)l * NH * BT,
                                B, T, C, NH);
        matmul_backward_input_cuda(dln1, dqkv, p->qkvw + l * 3 * c * c, BT, C, 3 * C, 0);
        layernorm_backward_input_cuda(dresidual, dres2, dln1, residual, p->ln1w + l * c, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C);
    }
}

// the gradient of the stage input (B, T, C) to the host as fp32
void gpt2_cuda_dx_in(const GPT2Cuda* m, const GPT2CudaGradActs* g, int B, int T, float* out_host) {
    floatX_download(out_host, g->dx_in, (size_t)B * T * m->cfg.channels);
}

// weight-gradient half: accumulates (+=) into m->grads; the LM head's share of wte's gradient into
// m->dwte_head, the encoder's into m->grads.wte (as gpt2_backward_weight). hook: NULL, or told of each
// unit (gpt2.h's numbering) as soon as its last kernel is enqueued on g_cuda_stream, in the order
// enqueued: the head's share, the final LayerNorm, the layers from the last, the embeddings (an event
// recorded then marks the unit done on the device)
void gpt2_cuda_backward_weight(GPT2Cuda* m, const GPT2CudaActs* a, const GPT2CudaGradActs* g, const GPT2UnitHook* hook) {
    const GPT2Config* cfg = &m->cfg;
    const GPT2Range* r = &m->range;
    ParameterTensors* gr = &m->grads;
    int B = a->B, T = a->T, C = cfg->channels, Ls = r->l1 - r->l0, L = cfg->num_layers;
    int BT = B * T, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C, c = C;
    float* s = m->scratch;
    if (r->has_head) {
        const floatX* last = a->residual3 + (Ls - 1) * BTC;
        matmul_backward_weight_cuda(m->dwte_head, NULL, a->logits, a->lnf, BT, C, Vp, s);
        if (hook) hook->done(hook->ctx, L + 2);
        layernorm_backward_weight_cuda(gr->lnfw, gr->lnfb, g->dlnf, last, a->lnf_mean, a->lnf_rstd, BT, C, s);
        if (hook) hook->done(hook->ctx, L + 1);
    }
    for (int l = Ls - 1; l >= 0; l--) {
        const floatX* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        matmul_backward_weight_cuda(gr->fcprojw + l * 4 * c * c, gr->fcprojb + l * c, g->dres3 + l * BTC, a->fch_gelu + l * 4 * BTC, BT,
                                    4 * C, C, s);
        matmul_backward_weight_cuda(gr->fcw + l * 4 * c * c, gr->fcb + l * 4 * c, g->dfch + l * 4 * BTC, a->ln2 + l * BTC, BT, C, 4 * C, s);
        layernorm_backward_weight_cuda(gr->ln2w + l * c, gr->ln2b + l * c, g->dln2 + l * BTC, a->residual2 + l * BTC, a->ln2_mean + l * BT,
                                       a->ln2_rstd + l * BT, BT, C, s);
        matmul_backward_weight_cuda(gr->attprojw + l * c * c, gr->attprojb + l * c, g->dres2 + l * BTC, a->atty + l * BTC, BT, C, C, s);
        matmul_backward_weight_cuda(gr->qkvw + l * 3 * c * c, gr->qkvb + l * 3 * c, g->dqkv + l * 3 * BTC, a->ln1 + l * BTC, BT, C, 3 * C, s);
        layernorm_backward_weight_cuda(gr->ln1w + l * c, gr->ln1b + l * c, g->dln1 + l * BTC, residual, a->ln1_mean + l * BT,
                                       a->ln1_rstd + l * BT, BT, C, s);
        if (hook) hook->done(hook->ctx, 1 + r->l0 + l);
    }
    if (r->has_embed) {
        encoder_backward_cuda(gr->wte, gr->wpe, g->dx_in, a->inputs_host, B, T, C, g->enc_scratch);
        if (hook) hook->done(hook->ctx, 0);
    }
}

#ifdef __cplusplus
}
#endif
