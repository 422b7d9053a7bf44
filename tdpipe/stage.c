// A pipeline stage: weights, gradients, AdamW state and activation slots of a layer range (see stage.h).
#include "stage.h"
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/global_norm.h"

void stage_init(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, int n_slots) {
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->range = *r;
    s->B = B;
    s->T = T;
    s->num_params = gpt2_param_sizes(cfg, r, s->sizes);
    s->params = (float*)calloc_check(s->num_params, sizeof(float));
    s->grads = (float*)calloc_check(s->num_params, sizeof(float));
    s->adam_m = (float*)calloc_check(s->num_params, sizeof(float));
    s->adam_v = (float*)calloc_check(s->num_params, sizeof(float));
    gpt2_point_params(&s->p, s->params, s->sizes);
    gpt2_point_params(&s->g, s->grads, s->sizes);
    if (r->has_head) s->dwte_head = (float*)calloc_check(s->sizes[0], sizeof(float));
    s->n_slots = n_slots;
    s->acts = (GPT2Acts*)calloc_check(n_slots, sizeof(GPT2Acts));
    for (int i = 0; i < n_slots; i++) gpt2_acts_alloc(&s->acts[i], cfg, r, B, T);
    gpt2_grad_acts_alloc(&s->gacts, cfg, r, B, T);
}

void stage_free(Stage* s) {
    for (int i = 0; i < s->n_slots; i++) gpt2_acts_free(&s->acts[i]);
    gpt2_grad_acts_free(&s->gacts);
    free(s->acts);
    free(s->params);
    free(s->grads);
    free(s->adam_m);
    free(s->adam_v);
    free(s->dwte_head);
    memset(s, 0, sizeof(*s));
}

// visits each of the stage's tensors with its offset in the stage buffer and in a full-model buffer
static void map_tensors(const Stage* s, void (*fn)(float* stage, float* full, size_t n, void* ctx), float* stage_buf, float* full, void* ctx) {
    GPT2Range all = {0, s->cfg.num_layers, 1, 1};
    size_t fs[GPT2_NUM_PARAM_TENSORS];
    gpt2_param_sizes(&s->cfg, &all, fs);
    size_t so = 0, fo = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        size_t skip = gpt2_param_is_layer(i) ? fs[i] / s->cfg.num_layers * s->range.l0 : 0;
        if (s->sizes[i]) fn(stage_buf + so, full + fo + skip, s->sizes[i], ctx);
        so += s->sizes[i];
        fo += fs[i];
    }
}
static void copy_in(float* stage, float* full, size_t n, void* ctx) { memcpy(stage, full, n * sizeof(float)); }
static void copy_out(float* stage, float* full, size_t n, void* ctx) { memcpy(full, stage, n * sizeof(float)); }

void stage_load_params(Stage* s, const float* full) { map_tensors(s, copy_in, s->params, (float*)full, NULL); }
void stage_store_params(const Stage* s, float* full) { map_tensors(s, copy_out, s->params, full, NULL); }

float stage_forward(Stage* s, int slot) { return gpt2_forward(&s->cfg, &s->range, &s->p, &s->acts[slot], 1); }

void stage_backward(Stage* s, int slot, const float* dx_out, float dloss) {
    gpt2_backward_input(&s->cfg, &s->range, &s->p, &s->acts[slot], &s->gacts, dx_out, dloss);
    gpt2_backward_weight(&s->cfg, &s->range, &s->acts[slot], &s->gacts, &s->g, s->dwte_head);
}

void stage_tie_embedding_local(Stage* s) {
    float* g = s->g.wte;
    const float* h = s->dwte_head;
    for (size_t i = 0; i < s->sizes[0]; i++) g[i] += h[i];
}

void stage_grad_unit_sumsq(const Stage* s, double* out) {
    const GPT2Range* r = &s->range;
    int C = s->cfg.channels, Ls = r->l1 - r->l0;
    if (r->has_embed) out[0] = sumsq(s->g.wte, s->sizes[0]) + sumsq(s->g.wpe, s->sizes[1]);
    float* layer_tensors[12] = {s->g.ln1w, s->g.ln1b, s->g.qkvw, s->g.qkvb, s->g.attprojw, s->g.attprojb,
                                s->g.ln2w, s->g.ln2b, s->g.fcw, s->g.fcb, s->g.fcprojw, s->g.fcprojb};
    for (int l = 0; l < Ls; l++) {
        double acc = 0.0;
        for (int i = 0; i < 12; i++) {
            size_t per_layer = s->sizes[2 + i] / Ls;
            acc += sumsq(layer_tensors[i] + l * per_layer, per_layer);
        }
        out[1 + r->l0 + l] = acc;
    }
    if (r->has_head) out[1 + s->cfg.num_layers] = sumsq(s->g.lnfw, C) + sumsq(s->g.lnfb, C);
}

float grad_norm_from_units(const double* units, int n_units) {
    double total = 0.0;
    for (int i = 0; i < n_units; i++) total += units[i];
    return (float)sqrt(total);
}

void stage_update(Stage* s, const AdamWConfig* opt, float lr, int t, float grad_scale) {
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        // decay the 2-D matrices (embeddings and linear weights) only, not biases or LayerNorm
        int is_matrix = i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
        if (s->sizes[i])
            adamw_update(s->params + off, s->grads + off, s->adam_m + off, s->adam_v + off, s->sizes[i], lr, opt->beta1, opt->beta2,
                         opt->eps, is_matrix ? opt->weight_decay : 0.0f, t, grad_scale);
        off += s->sizes[i];
    }
}

void stage_zero_grad(Stage* s) {
    memset(s->grads, 0, s->num_params * sizeof(float));
    if (s->dwte_head) memset(s->dwte_head, 0, s->sizes[0] * sizeof(float));
}
