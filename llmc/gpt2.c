// GPT-2 on the CPU over a layer range [l0, l1): parameter layout, initialisation, activations,
// forward, and backward split into an input-gradient half and a weight-gradient half (see gpt2.h).
#include "gpt2.h"
#ifdef __AVX__
#include <immintrin.h>
#endif
#include <math.h>
#include <string.h>
#include "attention.h"
#include "common.h"
#include "matmul.h"
#include "ops.h"
#include "rng.h"

static const char* PARAM_NAMES[GPT2_NUM_PARAM_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                          "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
const char* gpt2_param_name(int i) { return PARAM_NAMES[i]; }
int gpt2_param_is_layer(int i) { return i >= 2 && i <= 13; }
int gpt2_param_decays(int i) { return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12; }

// per-layer sizes of tensors 2..13 (floats)
static void layer_sizes(int C, size_t s[GPT2_NUM_PARAM_TENSORS]) {
    size_t c = (size_t)C;
    s[2] = c; s[3] = c;                 // ln1w, ln1b
    s[4] = 3 * c * c; s[5] = 3 * c;     // qkvw, qkvb
    s[6] = c * c; s[7] = c;             // attprojw, attprojb
    s[8] = c; s[9] = c;                 // ln2w, ln2b
    s[10] = 4 * c * c; s[11] = 4 * c;   // fcw, fcb
    s[12] = 4 * c * c; s[13] = c;       // fcprojw, fcprojb
}

size_t gpt2_param_sizes(const GPT2Config* cfg, const GPT2Range* r, size_t sizes[GPT2_NUM_PARAM_TENSORS]) {
    size_t C = (size_t)cfg->channels, Ls = (size_t)(r->l1 - r->l0);
    layer_sizes(cfg->channels, sizes);
    for (int i = 2; i <= 13; i++) sizes[i] *= Ls;
    sizes[0] = (r->has_embed || r->has_head) ? (size_t)cfg->padded_vocab_size * C : 0; // both ends hold wte
    sizes[1] = r->has_embed ? (size_t)cfg->max_seq_len * C : 0;
    sizes[14] = sizes[15] = r->has_head ? C : 0;
    size_t total = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) total += sizes[i];
    return total;
}

void gpt2_point_params(ParameterTensors* p, float* memory, const size_t sizes[GPT2_NUM_PARAM_TENSORS]) {
    float** ptrs[GPT2_NUM_PARAM_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
                                            &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    float* it = memory;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        *ptrs[i] = sizes[i] ? it : NULL;
        it += sizes[i];
    }
}

// n draws of N(0, std^2) into out, or skipped (out NULL): the stream moves on alike
static void draw_normals(Rng* rng, float* out, size_t n, float std) {
    if (!out) {
        rng_skip(rng, 2 * (uint64_t)n); // rng_normal takes two draws
        return;
    }
#ifdef __AVX__
    // the vector fills before leave the registers' upper halves in use, and GCC 12 does not clear them
    // before these calls: glibc's log and cos then pay an SSE/AVX transition on every call, which made
    // a 350M model's start several times slower on an Intel core (README, "No rank holds the whole model")
    _mm256_zeroupper();
#endif
    for (size_t j = 0; j < n; j++) out[j] = std * rng_normal(rng);
}

void gpt2_init_range(const GPT2Config* cfg, const GPT2Range* r, float* params, unsigned long long seed) {
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_sizes(cfg, &all, sizes);
    GPT2Piece pc[GPT2_NUM_PARAM_TENSORS];
    gpt2_slice_pieces(cfg, r, pc);
    Rng rng;
    rng_init(&rng, seed);
    float residual_std = 0.02f / sqrtf(2.0f * cfg->num_layers);
    size_t start = 0; // the tensor's first element in the whole model
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        const char* name = PARAM_NAMES[i];
        int is_ln_weight = !strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw");
        int is_bias = name[strlen(name) - 1] == 'b' && strcmp(name, "wte") != 0;
        float std = (!strcmp(name, "attprojw") || !strcmp(name, "fcprojw")) ? residual_std : 0.02f;
        size_t lo = pc[i].full_off - start, n = pc[i].n; // the range's part of the tensor: [lo, lo + n)
        float* out = params + pc[i].stage_off; // (n)
        if (is_ln_weight || is_bias) {
            for (size_t j = 0; j < n; j++) out[j] = is_ln_weight ? 1.0f : 0.0f;
        } else { // the whole tensor's draws in order (the stream is the whole model's), kept where the range holds them
            draw_normals(&rng, NULL, lo, std);
            draw_normals(&rng, out, n, std);
            draw_normals(&rng, NULL, sizes[i] - lo - n, std);
        }
        if (i == 0 && pc[i].n) // padded vocabulary rows stay zero: they never receive a gradient
            memset(out + (size_t)cfg->vocab_size * cfg->channels, 0, sizeof(float) * (size_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels);
        start += sizes[i];
    }
}

void gpt2_init_full(const GPT2Config* cfg, float* full, unsigned long long seed) {
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    gpt2_init_range(cfg, &all, full, seed);
}

void gpt2_slice_pieces(const GPT2Config* cfg, const GPT2Range* r, GPT2Piece pieces[GPT2_NUM_PARAM_TENSORS]) {
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t fs[GPT2_NUM_PARAM_TENSORS], ss[GPT2_NUM_PARAM_TENSORS], per_layer[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_sizes(cfg, &all, fs);
    gpt2_param_sizes(cfg, r, ss);
    layer_sizes(cfg->channels, per_layer);
    size_t full = 0, stage = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        pieces[i] = (GPT2Piece){full + (gpt2_param_is_layer(i) ? per_layer[i] * r->l0 : 0), stage, ss[i]};
        full += fs[i];
        stage += ss[i];
    }
}

// copies each tensor of range r between its place in a full-model buffer and a stage buffer
static void copy_slice(const GPT2Config* cfg, const GPT2Range* r, float* full, float* stage, int to_stage) {
    GPT2Piece pc[GPT2_NUM_PARAM_TENSORS];
    gpt2_slice_pieces(cfg, r, pc);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        float *f = full + pc[i].full_off, *st = stage + pc[i].stage_off;
        if (pc[i].n) memcpy(to_stage ? st : f, to_stage ? f : st, pc[i].n * sizeof(float));
    }
}

void gpt2_slice_params(const GPT2Config* cfg, const GPT2Range* r, const float* full, float* stage) {
    copy_slice(cfg, r, (float*)full, stage, 1);
}

void gpt2_unslice_params(const GPT2Config* cfg, const GPT2Range* r, const float* stage, float* full) {
    copy_slice(cfg, r, full, (float*)stage, 0);
}

// lays out `n` float arrays of the given sizes in one allocation; zero sizes give NULL
static float* alloc_arrays(float** ptrs[], const size_t* sizes, int n, size_t* total_out) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    float* mem = (float*)calloc_check(total, sizeof(float));
    float* it = mem;
    for (int i = 0; i < n; i++) {
        *ptrs[i] = sizes[i] ? it : NULL;
        it += sizes[i];
    }
    *total_out = total;
    return mem;
}

// the sizes, in floats, of GPT2Acts' arrays in the order gpt2_acts_alloc points them
#define N_ACTS 21
static void acts_sizes(const GPT2Config* cfg, const GPT2Range* r, int B, int T, size_t sizes[N_ACTS]) {
    size_t BT = (size_t)B * T, C = cfg->channels, Ls = r->l1 - r->l0, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t head = r->has_head ? 1 : 0;
    size_t s[N_ACTS] = {BT * C, Ls * BT * C, Ls * BT, Ls * BT, Ls * BT * 3 * C, Ls * BT * C, Ls * B * NH * T * T, Ls * BT * C, Ls * BT * C,
                        Ls * BT * C, Ls * BT, Ls * BT, Ls * BT * 4 * C, Ls * BT * 4 * C, Ls * BT * C, Ls * BT * C,
                        head * BT * C, head * BT, head * BT, head * BT * Vp, head * BT};
    memcpy(sizes, s, sizeof(s));
}

// likewise for GPT2GradActs
#define N_GRAD_ACTS 12
static void grad_acts_sizes(const GPT2Config* cfg, const GPT2Range* r, int B, int T, size_t sizes[N_GRAD_ACTS]) {
    size_t BT = (size_t)B * T, C = cfg->channels, Ls = r->l1 - r->l0, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t head = r->has_head ? 1 : 0;
    size_t s[N_GRAD_ACTS] = {BT * C, Ls * BT * C, Ls * BT * 3 * C, Ls * BT * C, Ls * BT * C, Ls * BT * C, Ls * BT * 4 * C, Ls * BT * 4 * C,
                             Ls * BT * C, head * BT * C, head * BT * Vp, (size_t)B * NH * T * T};
    memcpy(sizes, s, sizeof(s));
}

static size_t sum_sizes(const size_t* sizes, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    return total;
}

size_t gpt2_acts_floats(const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    size_t sizes[N_ACTS];
    acts_sizes(cfg, r, B, T, sizes);
    return sum_sizes(sizes, N_ACTS);
}

size_t gpt2_grad_acts_floats(const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    size_t sizes[N_GRAD_ACTS];
    grad_acts_sizes(cfg, r, B, T, sizes);
    return sum_sizes(sizes, N_GRAD_ACTS);
}

void gpt2_acts_alloc(GPT2Acts* a, const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    memset(a, 0, sizeof(*a));
    a->B = B;
    a->T = T;
    float** ptrs[N_ACTS] = {&a->x_in, &a->ln1, &a->ln1_mean, &a->ln1_rstd, &a->qkv, &a->atty, &a->att, &a->attproj, &a->residual2,
                            &a->ln2, &a->ln2_mean, &a->ln2_rstd, &a->fch, &a->fch_gelu, &a->fcproj, &a->residual3,
                            &a->lnf, &a->lnf_mean, &a->lnf_rstd, &a->probs, &a->losses};
    size_t sizes[N_ACTS];
    acts_sizes(cfg, r, B, T, sizes);
    a->memory = alloc_arrays(ptrs, sizes, N_ACTS, &a->num_floats);
    a->inputs = (int*)calloc_check((size_t)B * T, sizeof(int));
    a->targets = (int*)calloc_check((size_t)B * T, sizeof(int));
}

void gpt2_acts_free(GPT2Acts* a) {
    free(a->memory);
    free(a->inputs);
    free(a->targets);
    memset(a, 0, sizeof(*a));
}

void gpt2_grad_acts_alloc(GPT2GradActs* g, const GPT2Config* cfg, const GPT2Range* r, int B, int T) {
    memset(g, 0, sizeof(*g));
    float** ptrs[N_GRAD_ACTS] = {&g->dx_in, &g->dln1, &g->dqkv, &g->datty, &g->dres2, &g->dln2, &g->dfch, &g->dfch_gelu, &g->dres3,
                                 &g->dlnf, &g->dlogits, &g->datt};
    size_t sizes[N_GRAD_ACTS];
    grad_acts_sizes(cfg, r, B, T, sizes);
    g->memory = alloc_arrays(ptrs, sizes, N_GRAD_ACTS, &g->num_floats);
}

void gpt2_grad_acts_free(GPT2GradActs* g) {
    free(g->memory);
    memset(g, 0, sizeof(*g));
}

float* gpt2_stage_output(const GPT2Config* cfg, const GPT2Range* r, GPT2Acts* a) {
    size_t BTC = (size_t)a->B * a->T * cfg->channels;
    return a->residual3 + (size_t)(r->l1 - r->l0 - 1) * BTC;
}

static void unit_done(const GPT2UnitHook* hook, int unit) {
    if (hook && hook->done) hook->done(hook->ctx, unit);
}
static void unit_between(const GPT2UnitHook* hook) {
    if (hook && hook->between) hook->between(hook->ctx);
}

float gpt2_forward(const GPT2Config* cfg, const GPT2Range* r, const ParameterTensors* p, GPT2Acts* a, int targets_valid,
                  const GPT2UnitHook* hook) {
    int B = a->B, T = a->T, C = cfg->channels, NH = cfg->num_heads, Ls = r->l1 - r->l0;
    int BT = B * T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C;
    if (r->has_embed) encoder_forward(a->x_in, a->inputs, p->wte, p->wpe, B, T, C);
    for (int l = 0; l < Ls; l++) {
        const float* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        float* ln1 = a->ln1 + l * BTC;            // (B, T, C)
        float* ln1_mean = a->ln1_mean + l * BT;   // (B, T)
        float* ln1_rstd = a->ln1_rstd + l * BT;   // (B, T)
        float* qkv = a->qkv + l * 3 * BTC;        // (B, T, 3C)
        float* atty = a->atty + l * BTC;          // (B, T, C)
        float* att = a->att + (size_t)l * B * NH * T * T; // (B, NH, T, T)
        float* attproj = a->attproj + l * BTC;    // (B, T, C)
        float* residual2 = a->residual2 + l * BTC;
        float* ln2 = a->ln2 + l * BTC;
        float* ln2_mean = a->ln2_mean + l * BT;
        float* ln2_rstd = a->ln2_rstd + l * BT;
        float* fch = a->fch + l * 4 * BTC;        // (B, T, 4C)
        float* fch_gelu = a->fch_gelu + l * 4 * BTC;
        float* fcproj = a->fcproj + l * BTC;
        float* residual3 = a->residual3 + l * BTC;
        size_t c = C;
        layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p->ln1w + l * c, p->ln1b + l * c, BT, C);
        matmul_forward(qkv, ln1, p->qkvw + l * 3 * c * c, p->qkvb + l * 3 * c, BT, C, 3 * C);
        unit_between(hook);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, p->attprojw + l * c * c, p->attprojb + l * c, BT, C, C);
        unit_between(hook);
        residual_forward(residual2, residual, attproj, BTC);
        layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p->ln2w + l * c, p->ln2b + l * c, BT, C);
        matmul_forward(fch, ln2, p->fcw + l * 4 * c * c, p->fcb + l * 4 * c, BT, C, 4 * C);
        unit_between(hook);
        gelu_forward(fch_gelu, fch, 4 * BTC);
        matmul_forward(fcproj, fch_gelu, p->fcprojw + l * 4 * c * c, p->fcprojb + l * c, BT, 4 * C, C);
        residual_forward(residual3, residual2, fcproj, BTC);
        unit_between(hook);
    }
    if (!r->has_head) return 0.0f;
    const float* last = a->residual3 + (Ls - 1) * BTC;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p->lnfw, p->lnfb, BT, C);
    matmul_forward(a->probs, a->lnf, p->wte, NULL, BT, C, Vp); // logits (B, T, Vp)
    unit_between(hook);
    classifier_forward(a->losses, a->probs, a->probs, targets_valid ? a->targets : NULL, BT, V, Vp);
    if (!targets_valid) return 0.0f;
    double sum = 0.0;
    for (int i = 0; i < BT; i++) sum += a->losses[i];
    return (float)(sum / BT);
}

void gpt2_backward_input(const GPT2Config* cfg, const GPT2Range* r, const ParameterTensors* p, const GPT2Acts* a,
                         GPT2GradActs* g, const float* dx_out, float dloss, const GPT2UnitHook* hook) {
    int B = a->B, T = a->T, C = cfg->channels, NH = cfg->num_heads, Ls = r->l1 - r->l0;
    int BT = B * T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C, c = C;
    float* dlast = g->dres3 + (Ls - 1) * BTC; // gradient of the stage output (B, T, C)
    if (r->has_head) {
        const float* last = a->residual3 + (Ls - 1) * BTC;
        classifier_backward(g->dlogits, a->probs, a->targets, dloss, BT, V, Vp);
        matmul_backward_input(g->dlnf, g->dlogits, p->wte, BT, C, Vp, 0);
        unit_between(hook);
        layernorm_backward_input(dlast, NULL, g->dlnf, last, p->lnfw, a->lnf_mean, a->lnf_rstd, BT, C);
    } else if (dx_out) { // NULL: the caller received it in place, in dlast
        memcpy(dlast, dx_out, BTC * sizeof(float));
    }
    // every input gradient below is written, not added to: no buffer needs zeroing first
    for (int l = Ls - 1; l >= 0; l--) {
        const float* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        float* dresidual = l == 0 ? g->dx_in : g->dres3 + (l - 1) * BTC; // gradient of the layer input
        const float* dres3 = g->dres3 + l * BTC;
        float* dres2 = g->dres2 + l * BTC;
        float* dfch_gelu = g->dfch_gelu + l * 4 * BTC;
        float* dfch = g->dfch + l * 4 * BTC;
        float* dln2 = g->dln2 + l * BTC;
        float* datty = g->datty + l * BTC;
        float* dqkv = g->dqkv + l * 3 * BTC;
        float* dln1 = g->dln1 + l * BTC;
        // the MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward_input(dfch_gelu, dres3, p->fcprojw + l * 4 * c * c, BT, 4 * C, C, 0);
        unit_between(hook);
        gelu_backward(dfch, a->fch + l * 4 * BTC, dfch_gelu, 4 * BTC);
        matmul_backward_input(dln2, dfch, p->fcw + l * 4 * c * c, BT, C, 4 * C, 0);
        unit_between(hook);
        layernorm_backward_input(dres2, dres3, dln2, a->residual2 + l * BTC, p->ln2w + l * c, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C);
        // the attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward_input(datty, dres2, p->attprojw + l * c * c, BT, C, C, 0);
        attention_backward(dqkv, g->datt, datty, a->qkv + l * 3 * BTC, a->att + (size_t)l * B * NH * T * T, B, T, C, NH);
        unit_between(hook);
        matmul_backward_input(dln1, dqkv, p->qkvw + l * 3 * c * c, BT, C, 3 * C, 0);
        layernorm_backward_input(dresidual, dres2, dln1, residual, p->ln1w + l * c, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C);
        unit_between(hook);
    }
}

void gpt2_backward_weight(const GPT2Config* cfg, const GPT2Range* r, const GPT2Acts* a, const GPT2GradActs* g, const GPT2UnitHook* hook,
                          ParameterTensors* grads, float* dwte_head, int accumulate) {
    int B = a->B, T = a->T, C = cfg->channels, Ls = r->l1 - r->l0, L = cfg->num_layers;
    int BT = B * T, Vp = cfg->padded_vocab_size;
    size_t BTC = (size_t)BT * C, c = C;
    if (r->has_embed) { // first: it reads only dx_in (and touches no other tensor), so its unit can travel soonest
        encoder_backward(grads->wte, grads->wpe, g->dx_in, a->inputs, B, T, C); // a scatter: always adds, whatever accumulate
        unit_done(hook, 0);
    }
    if (r->has_head) {
        const float* last = a->residual3 + (Ls - 1) * BTC;
        matmul_backward_weight(dwte_head, NULL, g->dlogits, a->lnf, BT, C, Vp, accumulate);
        layernorm_backward_weight(grads->lnfw, grads->lnfb, g->dlnf, last, a->lnf_mean, a->lnf_rstd, BT, C, accumulate);
        unit_done(hook, L + 2);
        unit_done(hook, L + 1);
    }
    for (int l = Ls - 1; l >= 0; l--) {
        const float* residual = l == 0 ? a->x_in : a->residual3 + (l - 1) * BTC;
        matmul_backward_weight(grads->fcprojw + l * 4 * c * c, grads->fcprojb + l * c, g->dres3 + l * BTC, a->fch_gelu + l * 4 * BTC, BT, 4 * C, C,
                               accumulate);
        unit_between(hook);
        matmul_backward_weight(grads->fcw + l * 4 * c * c, grads->fcb + l * 4 * c, g->dfch + l * 4 * BTC, a->ln2 + l * BTC, BT, C, 4 * C, accumulate);
        unit_between(hook);
        layernorm_backward_weight(grads->ln2w + l * c, grads->ln2b + l * c, g->dln2 + l * BTC, a->residual2 + l * BTC,
                                  a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C, accumulate);
        matmul_backward_weight(grads->attprojw + l * c * c, grads->attprojb + l * c, g->dres2 + l * BTC, a->atty + l * BTC, BT, C, C, accumulate);
        unit_between(hook);
        matmul_backward_weight(grads->qkvw + l * 3 * c * c, grads->qkvb + l * 3 * c, g->dqkv + l * 3 * BTC, a->ln1 + l * BTC, BT, C, 3 * C,
                               accumulate);
        layernorm_backward_weight(grads->ln1w + l * c, grads->ln1b + l * c, g->dln1 + l * BTC, residual,
                                  a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C, accumulate);
        unit_done(hook, 1 + r->l0 + l);
    }
}
