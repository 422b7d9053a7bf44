// A pipeline stage: weights, gradients, AdamW state and activation slots of a layer range (see stage.h).
#include "stage.h"
#include <math.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/global_norm.h"

void stage_init(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, int n_slots) {
    stage_init_backend(s, cfg, r, B, T, n_slots, NULL, NULL);
}

void stage_init_backend(Stage* s, const GPT2Config* cfg, const GPT2Range* r, int B, int T, int n_slots, const StageBackend* be, void* dev) {
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->range = *r;
    s->B = B;
    s->T = T;
    s->num_params = gpt2_param_sizes(cfg, r, s->sizes);
    s->be = be;
    s->dev = dev;
    s->params = (float*)calloc_check(s->num_params, sizeof(float));
    s->adam_m = (float*)calloc_check(s->num_params, sizeof(float));
    s->adam_v = (float*)calloc_check(s->num_params, sizeof(float));
    gpt2_point_params(&s->p, s->params, s->sizes);
    stage_reserve(s, n_slots, 1, 1, 0);
}

void stage_reserve(Stage* s, int n_slots, int n_gacts, int n_grad_slots, int n_stash) {
    if (n_slots > s->n_slots) {
        s->acts = (GPT2Acts*)realloc(s->acts, n_slots * sizeof(GPT2Acts));
        s->out_host = (float**)realloc(s->out_host, n_slots * sizeof(float*));
        if (!s->acts || !s->out_host) td_fatal("out of memory for %d activation slots", n_slots);
        for (int i = s->n_slots; i < n_slots; i++) {
            s->out_host[i] = NULL;
            if (!s->be) {
                gpt2_acts_alloc(&s->acts[i], &s->cfg, &s->range, s->B, s->T);
                continue;
            }
            // on a device: the token ids, and the messages to and from the neighbouring stages, stay here
            size_t btc = (size_t)s->B * s->T * s->cfg.channels;
            memset(&s->acts[i], 0, sizeof(GPT2Acts));
            s->acts[i].B = s->B;
            s->acts[i].T = s->T;
            s->acts[i].inputs = (int*)calloc_check((size_t)s->B * s->T, sizeof(int));
            s->acts[i].targets = (int*)calloc_check((size_t)s->B * s->T, sizeof(int));
            s->acts[i].x_in = s->range.has_embed ? NULL : (float*)calloc_check(btc, sizeof(float));
            s->out_host[i] = s->range.has_head ? NULL : (float*)calloc_check(btc, sizeof(float));
        }
        s->n_slots = n_slots;
    }
    if (n_gacts > s->n_gacts) {
        s->gacts = (GPT2GradActs*)realloc(s->gacts, n_gacts * sizeof(GPT2GradActs));
        if (!s->gacts) td_fatal("out of memory for %d activation-gradient buffers", n_gacts);
        for (int i = s->n_gacts; i < n_gacts; i++) {
            if (s->be) memset(&s->gacts[i], 0, sizeof(GPT2GradActs));
            else gpt2_grad_acts_alloc(&s->gacts[i], &s->cfg, &s->range, s->B, s->T);
        }
        s->n_gacts = n_gacts;
    }
    if (n_grad_slots > s->n_grad_slots) {
        s->grad_slots = (float**)realloc(s->grad_slots, n_grad_slots * sizeof(float*));
        s->dwte_head_slots = (float**)realloc(s->dwte_head_slots, n_grad_slots * sizeof(float*));
        if (!s->grad_slots || !s->dwte_head_slots) td_fatal("out of memory for %d gradient slots", n_grad_slots);
        for (int i = s->n_grad_slots; i < n_grad_slots; i++) {
            s->grad_slots[i] = (float*)calloc_check(s->num_params, sizeof(float));
            s->dwte_head_slots[i] = s->range.has_head ? (float*)calloc_check(s->sizes[0], sizeof(float)) : NULL;
        }
        s->n_grad_slots = n_grad_slots;
        stage_use_grad_slot(s, 0);
    }
    if (n_stash > s->n_stash) {
        s->stash = (float**)realloc(s->stash, n_stash * sizeof(float*));
        s->stash_version = (int*)realloc(s->stash_version, n_stash * sizeof(int));
        s->stash_views = (ParameterTensors*)realloc(s->stash_views, n_stash * sizeof(ParameterTensors));
        if (!s->stash || !s->stash_version || !s->stash_views) td_fatal("out of memory for %d weight stashes", n_stash);
        for (int i = s->n_stash; i < n_stash; i++) {
            s->stash[i] = s->be ? NULL : (float*)malloc_check(s->num_params * sizeof(float));
            s->stash_version[i] = -1;
            if (s->stash[i]) gpt2_point_params(&s->stash_views[i], s->stash[i], s->sizes);
        }
        s->n_stash = n_stash;
    }
}

void stage_use_grad_slot(Stage* s, int k) {
    s->grads = s->grad_slots[k];
    s->dwte_head = s->dwte_head_slots[k];
    gpt2_point_params(&s->g, s->grads, s->sizes);
    if (s->be) s->be->use_grad_slot(s, k);
}

// -1 when version is the current one, else the stash slot holding it
static int stash_of(const Stage* s, int version) {
    if (version == s->version) return -1;
    for (int i = 0; i < s->n_stash; i++)
        if (s->stash_version[i] == version) return i;
    td_fatal("stage [%d, %d): weight version %d is neither current (%d) nor stashed", s->range.l0, s->range.l1, version, s->version);
}

const ParameterTensors* stage_weights(const Stage* s, int version) {
    int i = stash_of(s, version);
    return i < 0 ? &s->p : &s->stash_views[i];
}

void stage_stash_into(Stage* s, int i) {
    memcpy(s->stash[i], s->params, s->num_params * sizeof(float));
    s->stash_version[i] = s->version;
}

void stage_stash_current(Stage* s) {
    for (int i = 0; i < s->n_stash; i++)
        if (s->stash_version[i] < 0) {
            if (s->be) {
                s->be->stash(s, i);
                s->stash_version[i] = s->version;
            } else {
                stage_stash_into(s, i);
            }
            return;
        }
    td_fatal("stage [%d, %d): no free stash slot for version %d (%d slots)", s->range.l0, s->range.l1, s->version, s->n_stash);
}

void stage_release_stash(Stage* s, int version) {
    for (int i = 0; i < s->n_stash; i++)
        if (s->stash_version[i] == version) s->stash_version[i] = -1;
}

void stage_free(Stage* s) {
    for (int i = 0; i < s->n_slots; i++) {
        if (s->be) free(s->acts[i].x_in); // a backend's slots own x_in outside the (absent) memory block
        gpt2_acts_free(&s->acts[i]);
        free(s->out_host[i]);
    }
    free(s->out_host);
    for (int i = 0; i < s->n_gacts; i++) gpt2_grad_acts_free(&s->gacts[i]);
    for (int i = 0; i < s->n_grad_slots; i++) {
        free(s->grad_slots[i]);
        free(s->dwte_head_slots[i]);
    }
    for (int i = 0; i < s->n_stash; i++) free(s->stash[i]);
    free(s->gacts);
    free(s->grad_slots);
    free(s->dwte_head_slots);
    free(s->stash);
    free(s->stash_version);
    free(s->stash_views);
    free(s->acts);
    free(s->params);
    free(s->adam_m);
    free(s->adam_v);
    memset(s, 0, sizeof(*s));
}

void stage_load_params(Stage* s, const float* full) { gpt2_slice_params(&s->cfg, &s->range, full, s->params); }
void stage_store_params(const Stage* s, float* full) { gpt2_unslice_params(&s->cfg, &s->range, s->params, full); }

float stage_forward(Stage* s, int slot, int version, int targets_valid) {
    if (s->be) return s->be->forward(s, slot, stash_of(s, version), targets_valid);
    return gpt2_forward(&s->cfg, &s->range, stage_weights(s, version), &s->acts[slot], targets_valid);
}

void stage_backward_input(Stage* s, int slot, int gacts, int version, const float* dx_out, float dloss) {
    if (s->be) s->be->backward_input(s, slot, gacts, stash_of(s, version), dx_out, dloss);
    else gpt2_backward_input(&s->cfg, &s->range, stage_weights(s, version), &s->acts[slot], &s->gacts[gacts], dx_out, dloss);
}

void stage_backward_weight(Stage* s, int slot, int gacts) {
    if (s->be) s->be->backward_weight(s, slot, gacts);
    else gpt2_backward_weight(&s->cfg, &s->range, &s->acts[slot], &s->gacts[gacts], &s->g, s->dwte_head);
}

void stage_backward(Stage* s, int slot, const float* dx_out, float dloss) {
    stage_backward_input(s, slot, 0, s->version, dx_out, dloss);
    stage_backward_weight(s, slot, 0);
}

void stage_to_host(Stage* s) {
    if (s->be) s->be->to_host(s);
}

void stage_from_host(Stage* s) {
    if (s->be) s->be->from_host(s);
}

const float* stage_output(Stage* s, int slot) {
    if (!s->be) return gpt2_stage_output(&s->cfg, &s->range, &s->acts[slot]);
    s->be->output(s, slot, s->out_host[slot]);
    return s->out_host[slot];
}

void stage_dx_in(Stage* s, int gacts, float* dst) {
    if (s->be) s->be->dx_in(s, gacts, dst);
    else memcpy(dst, s->gacts[gacts].dx_in, (size_t)s->B * s->T * s->cfg.channels * sizeof(float));
}

void stage_finish(Stage* s) {
    if (s->be && s->be->finish) s->be->finish(s);
}

int stage_has_device_msgs(const Stage* s) { return s->be && s->be->msg_bytes; }

static const StageBackend* msgs_of(const Stage* s, const char* what) {
    if (!s->device_msgs) td_fatal("%s: this stage's pipeline messages are not in device memory (%s)", what,
                                  stage_has_device_msgs(s) ? "stage_use_device_msgs was not called" : "its backend keeps none");
    return s->be;
}

void stage_use_device_msgs(Stage* s) {
    if (!stage_has_device_msgs(s)) td_fatal("stage_use_device_msgs: the %s backend keeps no pipeline messages", s->be ? s->be->name : "CPU");
    s->device_msgs = 1;
}
void stage_use_device_tied(Stage* s) {
    msgs_of(s, "stage_use_device_tied");
    if (s->range.has_embed == s->range.has_head) td_fatal("stage_use_device_tied: only the first or the last stage of a pipeline exchanges tied shares");
    s->device_tied = 1;
}
size_t stage_msg_bytes(const Stage* s) { return msgs_of(s, "stage_msg_bytes")->msg_bytes(s); }
void* stage_input_msg(Stage* s, int slot) { return msgs_of(s, "stage_input_msg")->input_msg(s, slot); }
const void* stage_output_msg(Stage* s, int slot) { return msgs_of(s, "stage_output_msg")->output_msg(s, slot); }
void* stage_grad_msg(Stage* s, int gacts) { return msgs_of(s, "stage_grad_msg")->grad_msg(s, gacts); }
const void* stage_dx_in_msg(Stage* s, int gacts, int slot) { return msgs_of(s, "stage_dx_in_msg")->dx_in_msg(s, gacts, slot); }
static const StageBackend* tied_of(const Stage* s, const char* what) {
    if (!s->device_tied) td_fatal("%s: this stage's tied shares are not in device memory (stage_use_device_tied)", what);
    return msgs_of(s, what);
}
float* stage_tied_share(Stage* s) { return tied_of(s, "stage_tied_share")->tied_share(s); }
float* stage_tied_other(Stage* s, int k) { return tied_of(s, "stage_tied_other")->tied_other(s, k); }
void stage_tied_sum(Stage* s, int k) {
    const StageBackend* be = tied_of(s, "stage_tied_sum");
    float* own = be->tied_share(s);
    float* other = be->tied_other(s, k);
    int first = s->range.has_embed; // the encoder's share comes first on both ends: bitwise equal copies
    be->tied_sum(s, first ? own : other, first ? other : own);
}

void stage_grads_to_host(Stage* s) {
    if (s->be) s->be->grads_to_host(s);
}

void stage_grads_from_host(Stage* s) {
    if (s->be) s->be->grads_from_host(s);
}

void stage_tie_embedding_local(Stage* s) {
    if (s->be) s->be->tie_embedding_local(s);
    else stage_tie_embedding_host(s);
}

void stage_tie_embedding_host(Stage* s) {
    float* g = s->g.wte;
    const float* h = s->dwte_head;
    for (size_t i = 0; i < s->sizes[0]; i++) g[i] += h[i];
}

void stage_grad_unit_sumsq(const Stage* s, double* out) {
    if (s->be) {
        s->be->grad_unit_sumsq(s, out);
        return;
    }
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
    if (s->be) {
        s->be->update(s, opt, lr, t, grad_scale);
        s->version++;
        return;
    }
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        if (s->sizes[i])
            adamw_update(s->params + off, s->grads + off, s->adam_m + off, s->adam_v + off, s->sizes[i], lr, opt->beta1, opt->beta2,
                         opt->eps, gpt2_param_decays(i) ? opt->weight_decay : 0.0f, t, grad_scale);
        off += s->sizes[i];
    }
    s->version++;
}

void stage_zero_grad(Stage* s) {
    if (s->be) {
        s->be->zero_grad(s);
        return;
    }
    memset(s->grads, 0, s->num_params * sizeof(float));
    if (s->dwte_head) memset(s->dwte_head, 0, s->sizes[0] * sizeof(float));
}
