// The CPU backend: llmc/gpt2.c's model over the Stage's own host weights, activation slots, gradient
// slots and stashes; messages are received where the model reads them and the output sent from where
// it writes it; the input gradient leaves from a copy per slot (dx_send), so the next backward may reuse gacts.
#include "stage_cpu.h"
#include <string.h>
#include "llmc/common.h"
#include "llmc/compensation.h"
#include "llmc/global_norm.h"
#include "llmc/profile.h"
#include "tdpipe/comm.h"

// Under recomputation (StageInit.recompute) a slot keeps only what its backward cannot redo: the
// stage input it received and the output being sent; the forward runs in one working set of
// activations (work), and a backward first runs the forward again there, with the weights and
// tokens the first one used, so it computes bitwise what it would have from kept activations.
typedef struct {
    float* x_in; // (B, T, C) the input received (off the first stage), else NULL
    float* out;  // (B, T, C) the output sent (off the last stage), else NULL
} KeptSlot;

typedef struct {
    GPT2Acts* acts;            // (n_acts) one per activation slot (not under recomputation: kept, work)
    int recompute;
    KeptSlot* kept;            // (n_acts) under recomputation
    GPT2Acts work;             // under recomputation: the one micro-batch whose activations are whole
    int work_holds;            // the slot whose forward work holds now, -1 none
    float* work_x_in;          // (B, T, C) work's own input buffer (the first stage's encoder writes it)
    GPT2Acts sample;           // (1, T) the sample slot, once reserved
    GPT2GradActs* gacts;       // (n_gacts)
    float** grads;             // (n_grads)[num_params] gradient slots
    ParameterTensors* gviews;  // (n_grads) views into them
    float** dwte_head;         // (n_grads)[Vp*C] the LM head's share of wte's gradient per slot (last stage), else NULLs
    float** tied_other;        // (n_grads)[Vp*C] the other end's share, received (first and last stage of a pipeline)
    float** stash;             // (n_stash)[num_params] older weight versions (or predicted ones), allocated when first used
    ParameterTensors* sviews;  // (n_stash)
    float** dx_send;           // (n_acts)[B*T*C] input gradients being sent upstream (off the first stage)
    unsigned char* state;      // (n_grads) SLOT_* below: what each gradient slot holds
    // DC-ASGD: one micro-batch's gradient alone, and per gradient slot the sums of g^2 and g^2 * w_used
    float* dc_g;               // (num_params + Vp*C on the last stage) the micro-batch's gradient, then its head share
    float** dc_a;              // (n_grads)[same] sum of g^2 per element
    float** dc_b;              // (n_grads)[same] sum of g^2 * w_used
    // second-order weight prediction's trajectory, allocated at its first update
    float* traj_w_prev;        // (num_params) the weights before the last update
    float* traj_u_prev;        // (num_params) the update before that
    int n_acts, n_gacts, n_grads, n_stash, n_dc, has_sample;
    // between the kernels of a pass: MPI moves the messages already sent (without a single-copy path
    // between processes, Open MPI moves a large message only inside MPI calls: a stage computing its
    // next op held its last activation until then, 2 MB in 54-175 ms instead of 0.5 ms). NULL
    // without a Comm (a stage made outside a run)
    GPT2UnitHook progress;
} CpuStage;

// What gradient slot k holds, so that zeroing it touches no more memory than it must. After AdamW
// it is FRESH: zero by definition, yet only the embeddings' gradients (wte, wpe: the encoder's
// scatter adds into them) are zeroed in memory, by AdamW itself as it reads them; the rest, the
// head's share included, keeps the last step's values, which the next backward_weight overwrites
// (accumulate 0) instead of adding to. Anything else that reads or hands out the slot first makes
// its memory match (slot_materialize), so only the executor's update -> zero_grad -> backward path
// skips the sweeps.
enum {
    SLOT_LIVE,  // holds a gradient (a backward, a tied sum, or a caller through an accessor wrote it)
    SLOT_ZERO,  // all zero in memory (as allocated, or materialized)
    SLOT_FRESH, // zero by definition, only the embeddings' tensors zero in memory
};

static CpuStage* cpu_of(const Stage* st) { return (CpuStage*)st->dev; }
static size_t embedding_floats(const Stage* st) { return st->sizes[0] + st->sizes[1]; } // wte, wpe: the slot's first tensors

// a FRESH slot's memory zeroed where it still holds last step's values
static void slot_materialize(Stage* st, int k) {
    CpuStage* c = cpu_of(st);
    if (c->state[k] != SLOT_FRESH) return;
    size_t e = embedding_floats(st);
    memset(c->grads[k] + e, 0, (st->num_params - e) * sizeof(float));
    if (c->dwte_head[k]) memset(c->dwte_head[k], 0, st->sizes[0] * sizeof(float));
    c->state[k] = SLOT_ZERO;
}

// slot k is about to be written, or handed out to a caller who may: exact in memory, then live
static void slot_written(Stage* st, int k) {
    slot_materialize(st, k);
    cpu_of(st)->state[k] = SLOT_LIVE;
}
static size_t cpu_btc(const Stage* st, int slot) { return (size_t)(slot == STAGE_SAMPLE_SLOT ? 1 : st->B) * st->T * st->cfg.channels; }

GPT2Acts* stage_cpu_acts(Stage* st, int slot) {
    CpuStage* c = cpu_of(st);
    if (slot == STAGE_SAMPLE_SLOT) {
        if (!c->has_sample) td_fatal("stage_cpu_acts: the sample slot is not reserved (stage_reserve_sample)");
        return &c->sample;
    }
    if (!c->recompute) return &c->acts[slot];
    if (c->work_holds != slot)
        td_fatal("stage_cpu_acts: slot %d's activations were not kept (recomputation) and the working set holds %d's", slot, c->work_holds);
    return &c->work;
}
GPT2GradActs* stage_cpu_gacts(Stage* st, int gacts) { return &cpu_of(st)->gacts[gacts]; }
float* stage_cpu_grads(Stage* st, int k) {
    slot_written(st, k);
    return cpu_of(st)->grads[k];
}
ParameterTensors* stage_cpu_grad_views(Stage* st, int k) {
    slot_written(st, k);
    return &cpu_of(st)->gviews[k];
}
float* stage_cpu_dwte_head(Stage* st, int k) {
    slot_written(st, k);
    return cpu_of(st)->dwte_head[k];
}

// n pointers in *arr (holding have), grown to n; new entries NULL
static void grow_ptrs(void*** arr, int have, int n) {
    *arr = (void**)realloc_check(*arr, n * sizeof(void*));
    for (int i = have; i < n; i++) (*arr)[i] = NULL;
}

static void cpu_reserve(Stage* st) {
    CpuStage* c = cpu_of(st);
    const GPT2Config* cfg = &st->cfg;
    const GPT2Range* r = &st->range;
    int pipelined = !(r->has_embed && r->has_head); // a stage of P > 1 exchanges messages and tied shares
    if (st->n_slots > c->n_acts) {
        if (c->recompute) c->kept = (KeptSlot*)realloc_check(c->kept, st->n_slots * sizeof(KeptSlot));
        else c->acts = (GPT2Acts*)realloc_check(c->acts, st->n_slots * sizeof(GPT2Acts));
        grow_ptrs((void***)&c->dx_send, c->n_acts, st->n_slots);
        size_t btc = cpu_btc(st, 0);
        for (int i = c->n_acts; i < st->n_slots; i++) {
            if (c->recompute) {
                c->kept[i].x_in = r->has_embed ? NULL : (float*)calloc_check(btc, sizeof(float));
                c->kept[i].out = r->has_head ? NULL : (float*)calloc_check(btc, sizeof(float));
            } else {
                gpt2_acts_alloc(&c->acts[i], cfg, r, st->B, st->T);
            }
            if (!r->has_embed) c->dx_send[i] = (float*)malloc_check(btc * sizeof(float));
        }
        if (c->recompute && c->n_acts == 0) {
            gpt2_acts_alloc(&c->work, cfg, r, st->B, st->T);
            c->work_x_in = c->work.x_in;
        }
        c->n_acts = st->n_slots;
    }
    if (st->sample_slot && !c->has_sample) {
        gpt2_acts_alloc(&c->sample, cfg, r, 1, st->T);
        c->has_sample = 1;
    }
    if (st->n_gacts > c->n_gacts) {
        c->gacts = (GPT2GradActs*)realloc_check(c->gacts, st->n_gacts * sizeof(GPT2GradActs));
        for (int i = c->n_gacts; i < st->n_gacts; i++) gpt2_grad_acts_alloc(&c->gacts[i], cfg, r, st->B, st->T);
        c->n_gacts = st->n_gacts;
    }
    if (st->n_grad_slots > c->n_grads) {
        int n = st->n_grad_slots;
        grow_ptrs((void***)&c->grads, c->n_grads, n);
        grow_ptrs((void***)&c->dwte_head, c->n_grads, n);
        grow_ptrs((void***)&c->tied_other, c->n_grads, n);
        c->state = (unsigned char*)realloc_check(c->state, n);
        c->gviews = (ParameterTensors*)realloc_check(c->gviews, n * sizeof(ParameterTensors));
        for (int k = c->n_grads; k < n; k++) {
            c->grads[k] = (float*)calloc_check(st->num_params, sizeof(float));
            gpt2_point_params(&c->gviews[k], c->grads[k], st->sizes);
            if (r->has_head) c->dwte_head[k] = (float*)calloc_check(st->sizes[0], sizeof(float));
            if (pipelined && (r->has_embed || r->has_head)) c->tied_other[k] = (float*)calloc_check(st->sizes[0], sizeof(float));
            c->state[k] = SLOT_ZERO; // calloc'ed
        }
        c->n_grads = n;
    }
    if (st->n_stash > c->n_stash) {
        grow_ptrs((void***)&c->stash, c->n_stash, st->n_stash);
        c->sviews = (ParameterTensors*)realloc_check(c->sviews, st->n_stash * sizeof(ParameterTensors));
        c->n_stash = st->n_stash;
    }
}

static void cpu_destroy(Stage* st) {
    CpuStage* c = cpu_of(st);
    for (int i = 0; i < c->n_acts; i++) {
        if (c->recompute) {
            free(c->kept[i].x_in);
            free(c->kept[i].out);
        } else {
            gpt2_acts_free(&c->acts[i]);
        }
        free(c->dx_send[i]);
    }
    if (c->recompute && c->n_acts) {
        c->work.x_in = c->work_x_in; // (its own, where a kept input was lent to it)
        gpt2_acts_free(&c->work);
    }
    free(c->kept);
    if (c->has_sample) gpt2_acts_free(&c->sample);
    for (int i = 0; i < c->n_gacts; i++) gpt2_grad_acts_free(&c->gacts[i]);
    for (int k = 0; k < c->n_grads; k++) {
        free(c->grads[k]);
        free(c->dwte_head[k]);
        free(c->tied_other[k]);
    }
    for (int i = 0; i < c->n_stash; i++) free(c->stash[i]);
    for (int k = 0; k < c->n_dc; k++) {
        free(c->dc_a[k]);
        free(c->dc_b[k]);
    }
    free(c->dc_g);
    free(c->traj_w_prev);
    free(c->traj_u_prev);
    free(c->dc_a);
    free(c->dc_b);
    free(c->acts);
    free(c->dx_send);
    free(c->gacts);
    free(c->grads);
    free(c->gviews);
    free(c->dwte_head);
    free(c->tied_other);
    free(c->state);
    free(c->stash);
    free(c->sviews);
    free(c);
}

static const ParameterTensors* weights(Stage* st, int stash) { return stash < 0 ? &st->p : &cpu_of(st)->sviews[stash]; }

static void progress_between(void* comm) { comm_progress((Comm*)comm); }
static const GPT2UnitHook* progress_of(const Stage* st) {
    const CpuStage* c = cpu_of(st);
    return c->progress.between ? &c->progress : NULL;
}

// slot's forward into a: its tokens (first stage) and targets (when valid) copied in, its input read
// from a->x_in
static float forward_into(Stage* st, GPT2Acts* a, int slot, int stash, int targets_valid) {
    size_t bt = (size_t)a->B * a->T;
    if (st->range.has_embed) memcpy(a->inputs, stage_inputs(st, slot), bt * sizeof(int));
    if (targets_valid) memcpy(a->targets, stage_targets(st, slot), bt * sizeof(int));
    return gpt2_forward(&st->cfg, &st->range, weights(st, stash), a, targets_valid, progress_of(st));
}

// under recomputation: slot's forward in the working set, its input the kept one (lent off the first stage)
static float work_forward(Stage* st, int slot, int stash, int targets_valid) {
    CpuStage* c = cpu_of(st);
    c->work.x_in = st->range.has_embed ? c->work_x_in : c->kept[slot].x_in;
    c->work_holds = -1; // (until the forward below is whole)
    float loss = forward_into(st, &c->work, slot, stash, targets_valid);
    c->work_holds = slot;
    return loss;
}

static float cpu_forward(Stage* st, const Op* op, int slot, int stash, int targets_valid) {
    CpuStage* c = cpu_of(st);
    if (!c->recompute || slot == STAGE_SAMPLE_SLOT) return forward_into(st, stage_cpu_acts(st, slot), slot, stash, targets_valid);
    float loss = work_forward(st, slot, stash, targets_valid);
    if (!st->range.has_head) memcpy(c->kept[slot].out, gpt2_stage_output(&st->cfg, &st->range, &c->work), cpu_btc(st, slot) * sizeof(float));
    return loss;
}

// the activations slot's backward reads: kept, or under recomputation its forward run again (unless
// the working set still holds it), with the weights each half is given for op: they may have become
// a stash since the forward (an update came between, and the version was stashed for it), and where a
// weight half finds them gone it stops rather than recompute on other weights. A backward follows a
// training forward, so the targets are valid on the last stage; the loss it computes again is dropped.
static const GPT2Acts* acts_for_backward(Stage* st, const Op* op, int slot, int stash) {
    CpuStage* c = cpu_of(st);
    if (!c->recompute) return &c->acts[slot];
    if (stage_must_recompute(st, op, slot, c->work_holds, stash)) work_forward(st, slot, stash, st->range.has_head);
    return &c->work;
}

// the output gradient was received in place (grad_msg): the last slice of gacts' dres3
static void cpu_backward_input(Stage* st, const Op* op, int slot, int gacts, int stash, float dloss) {
    gpt2_backward_input(&st->cfg, &st->range, weights(st, stash), acts_for_backward(st, op, slot, stash), &cpu_of(st)->gacts[gacts], NULL, dloss,
                        progress_of(st));
}

// a FRESH slot's first backward writes it (its embeddings' tensors are zero for the encoder's scatter,
// which gpt2_backward_weight runs first: it adds into them, the other tensors are written)
static void cpu_backward_weight(Stage* st, const Op* op, int slot, int gacts, int k, int stash, const GPT2UnitHook* hook) {
    CpuStage* c = cpu_of(st);
    int accumulate = c->state[k] != SLOT_FRESH;
    c->state[k] = SLOT_LIVE;
    gpt2_backward_weight(&st->cfg, &st->range, acts_for_backward(st, op, slot, stash), &c->gacts[gacts], hook ? hook : progress_of(st),
                         &c->gviews[k], c->dwte_head[k], accumulate); // (a data-parallel sync's hook moves MPI along itself)
}

static void cpu_probs(Stage* st, int slot, int t, float* out) {
    GPT2Acts* a = stage_cpu_acts(st, slot);
    memcpy(out, a->probs + (size_t)t * st->cfg.padded_vocab_size, st->cfg.vocab_size * sizeof(float));
}

// stash slot i's buffer, allocated at its first use (weight prediction may hold more copies than plain stashing)
static float* stash_buf(Stage* st, int i) {
    CpuStage* c = cpu_of(st);
    if (!c->stash[i]) {
        c->stash[i] = (float*)malloc_check(st->num_params * sizeof(float));
        gpt2_point_params(&c->sviews[i], c->stash[i], st->sizes);
    }
    return c->stash[i];
}

static void cpu_stash(Stage* st, int i) {
    double t0 = profile_begin();
    memcpy(stash_buf(st, i), st->params, st->num_params * sizeof(float));
    PROFILE_END(t0, "copies", "stash", 0, 0, 0, 0.0, 8.0 * st->num_params);
}

static void cpu_predict(Stage* st, int i, const AdamWConfig* opt, float lr_sum, float curvature) {
    CpuStage* c = cpu_of(st);
    float* out = stash_buf(st, i);
    size_t off = 0;
    for (int t = 0; t < GPT2_NUM_PARAM_TENSORS; t++) {
        if (st->sizes[t])
            compensation_predict(out + off, st->params + off, st->adam_m + off, st->adam_v + off, st->sizes[t], lr_sum, opt->beta1, opt->beta2,
                          opt->eps, gpt2_param_decays(t) ? opt->weight_decay : 0.0f, st->version);
        off += st->sizes[t];
    }
    if (curvature != 0.0f) compensation_curvature(out, st->params, c->traj_w_prev, c->traj_u_prev, st->num_params, curvature);
}

static void cpu_track(Stage* st, int first) {
    CpuStage* c = cpu_of(st);
    if (!c->traj_w_prev) {
        c->traj_w_prev = (float*)malloc_check(st->num_params * sizeof(float));
        c->traj_u_prev = (float*)malloc_check(st->num_params * sizeof(float));
    }
    compensation_track(c->traj_w_prev, c->traj_u_prev, st->params, st->num_params, first);
}

// the buffers of a micro-batch's gradient alone, and DC-ASGD's sums (dc), allocated at their first use
static void alone_alloc(Stage* st, int dc) {
    CpuStage* c = cpu_of(st);
    size_t n = st->num_params + (st->range.has_head ? st->sizes[0] : 0);
    if (!c->dc_g) c->dc_g = (float*)malloc_check(n * sizeof(float));
    if (dc && c->n_dc < c->n_grads) {
        grow_ptrs((void***)&c->dc_a, c->n_dc, c->n_grads);
        grow_ptrs((void***)&c->dc_b, c->n_dc, c->n_grads);
        for (int k = c->n_dc; k < c->n_grads; k++) {
            c->dc_a[k] = (float*)calloc_check(n, sizeof(float));
            c->dc_b[k] = (float*)calloc_check(n, sizeof(float));
        }
        c->n_dc = c->n_grads;
    }
}

// The micro-batch's weight gradient alone (into dc_g, its LM-head share after it), its per-unit
// squared norms, then into slot k (and the DC-ASGD sums), which is added to: a FRESH slot is made
// exact in memory first. The head share belongs to the tied wte: its weights are the version's wte,
// the first tensor.
static void cpu_backward_weight_alone(Stage* st, const Op* op, int slot, int gacts, int k, int stash, int dc, double* unit_sq) {
    CpuStage* c = cpu_of(st);
    alone_alloc(st, dc);
    slot_written(st, k);
    size_t n = st->num_params, vc = st->range.has_head ? st->sizes[0] : 0;
    memset(c->dc_g, 0, (n + vc) * sizeof(float));
    ParameterTensors g;
    gpt2_point_params(&g, c->dc_g, st->sizes);
    gpt2_backward_weight(&st->cfg, &st->range, acts_for_backward(st, op, slot, stash), &c->gacts[gacts], progress_of(st), &g,
                         vc ? c->dc_g + n : NULL, 1);
    if (unit_sq) {
        StageSlice sl[STAGE_MAX_SLICES(st->range.l1 - st->range.l0)];
        int ns = stage_slices(st, sl);
        for (int i = 0; i < ns; i++) unit_sq[sl[i].unit] += global_norm_sumsq(c->dc_g + sl[i].off, sl[i].n);
        if (vc) unit_sq[st->cfg.num_layers + 2] += global_norm_sumsq(c->dc_g + n, vc);
    }
    if (dc) {
        const float* w = stash < 0 ? st->params : c->stash[stash];
        compensation_dc_accumulate(c->grads[k], c->dc_a[k], c->dc_b[k], c->dc_g, w, n);
        if (vc) compensation_dc_accumulate(c->dwte_head[k], c->dc_a[k] + n, c->dc_b[k] + n, c->dc_g + n, w, vc);
    } else {
        compensation_grad_add(c->grads[k], c->dc_g, n);
        if (vc) compensation_grad_add(c->dwte_head[k], c->dc_g + n, vc);
    }
}

static void cpu_head_share_sumsq(Stage* st, int k, double* out) {
    slot_materialize(st, k);
    *out = global_norm_sumsq(cpu_of(st)->dwte_head[k], st->sizes[0]);
}

static void cpu_dc_correct(Stage* st, int k, float lambda) {
    CpuStage* c = cpu_of(st);
    alone_alloc(st, 1);
    slot_written(st, k);
    size_t n = st->num_params, vc = st->range.has_head ? st->sizes[0] : 0;
    compensation_dc_correct(c->grads[k], c->dc_a[k], c->dc_b[k], st->params, n, lambda);
    if (vc) compensation_dc_correct(c->dwte_head[k], c->dc_a[k] + n, c->dc_b[k] + n, st->params, vc, lambda);
}

static void cpu_grad_unit_sumsq(Stage* st, int k, double wte_sq, double* out) {
    double t0 = profile_begin();
    slot_materialize(st, k);
    StageSlice sl[STAGE_MAX_SLICES(st->range.l1 - st->range.l0)];
    int n = stage_slices(st, sl);
    const float* g = cpu_of(st)->grads[k];
    size_t swept = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || sl[i].unit != sl[i - 1].unit) out[sl[i].unit] = 0.0; // 0 + x is x: the same sums as unit by unit
        int known = sl[i].tensor == 0 && wte_sq >= 0.0;
        out[sl[i].unit] += known ? wte_sq : global_norm_sumsq(g + sl[i].off, sl[i].n);
        swept += known ? 0 : sl[i].n;
    }
    PROFILE_END(t0, "global norm", "sumsq", 0, 0, 0, 2.0 * swept, 4.0 * swept);
}

// AdamW over every tensor, each with its decay. The slot is left FRESH: the embeddings' gradients
// zeroed as AdamW reads them, the rest to be overwritten by the next backward, so the zero_grad that
// follows has nothing to sweep
static void cpu_update(Stage* st, int k, const AdamWConfig* opt, float lr, int t, float grad_scale) {
    double t0 = profile_begin();
    CpuStage* c = cpu_of(st);
    slot_materialize(st, k);
    float* grads = c->grads[k];
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        float decay = gpt2_param_decays(i) ? opt->weight_decay : 0.0f;
        if (st->sizes[i] && i < 2) // wte, wpe: first in the slot
            adamw_update_zero(st->params + off, grads + off, st->adam_m + off, st->adam_v + off, st->sizes[i], lr, opt->beta1, opt->beta2,
                              opt->eps, decay, t, grad_scale);
        else if (st->sizes[i])
            adamw_update(st->params + off, grads + off, st->adam_m + off, st->adam_v + off, st->sizes[i], lr, opt->beta1, opt->beta2, opt->eps,
                         decay, t, grad_scale);
        off += st->sizes[i];
    }
    c->state[k] = SLOT_FRESH;
    PROFILE_END(t0, "adamw", "update", 0, 0, 0, 0.0, 28.0 * st->num_params + 4.0 * embedding_floats(st));
}

// slot k empty again. A live slot: its embeddings' tensors zeroed and the rest left for the next
// backward to overwrite (FRESH: a refused step's NaN is overwritten, never added to); a zero or
// fresh one: nothing to do. Its DC-ASGD sums, if any, are zeroed in memory.
static void cpu_zero_grad(Stage* st, int k) {
    double t0 = profile_begin();
    CpuStage* c = cpu_of(st);
    double bytes = 0.0;
    if (c->state[k] == SLOT_LIVE) {
        memset(c->grads[k], 0, embedding_floats(st) * sizeof(float));
        bytes = 4.0 * embedding_floats(st);
        c->state[k] = SLOT_FRESH;
    }
    if (k < c->n_dc) {
        size_t n = st->num_params + (st->range.has_head ? st->sizes[0] : 0);
        memset(c->dc_a[k], 0, n * sizeof(float));
        memset(c->dc_b[k], 0, n * sizeof(float));
        bytes += 8.0 * n;
    }
    PROFILE_END(t0, "zero grad", "memset", 0, 0, 0, 0.0, bytes);
}

// wte's gradient = first + last (the encoder's share, the head's). On the first stage, whose norm
// holds wte, its sumsq comes from the same pass; the last stage's copy is in no norm of its own
// (STAGE_SUMSQ_UNKNOWN), so it only adds
static double tied_sum_sumsq(Stage* st, int k, const float* first, const float* last) {
    double t0 = profile_begin();
    slot_written(st, k);
    float* wte = cpu_of(st)->gviews[k].wte;
    size_t n = st->sizes[0];
    int norm = st->range.has_embed;
    double sq = STAGE_SUMSQ_UNKNOWN;
    if (norm) {
        sq = global_norm_sumsq_of_sum(wte, first, last, n);
    } else {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) wte[i] = first[i] + last[i];
    }
    PROFILE_END(t0, "tied embedding", norm ? "sum+sumsq" : "sum", 0, 0, 0, norm ? 2.0 * n : 0.0, 12.0 * n);
    return sq;
}

// wte's gradient += the head's share
static double cpu_tie_local(Stage* st, int k) {
    return tied_sum_sumsq(st, k, cpu_of(st)->gviews[k].wte, cpu_of(st)->dwte_head[k]);
}

static float* cpu_host_grads(Stage* st, int k, float** dwte_head) {
    slot_written(st, k);
    if (dwte_head) *dwte_head = cpu_of(st)->dwte_head[k];
    return cpu_of(st)->grads[k];
}

static size_t cpu_msg_bytes(const Stage* st, int slot) { return cpu_btc(st, slot) * sizeof(float); }
static void* cpu_input_msg(Stage* st, int slot) {
    CpuStage* c = cpu_of(st);
    return c->recompute && slot != STAGE_SAMPLE_SLOT ? c->kept[slot].x_in : stage_cpu_acts(st, slot)->x_in;
}
static const void* cpu_output_msg(Stage* st, int slot) {
    CpuStage* c = cpu_of(st);
    return c->recompute && slot != STAGE_SAMPLE_SLOT ? c->kept[slot].out : gpt2_stage_output(&st->cfg, &st->range, stage_cpu_acts(st, slot));
}
static void* cpu_grad_msg(Stage* st, int gacts) {
    return cpu_of(st)->gacts[gacts].dres3 + (size_t)(st->range.l1 - st->range.l0 - 1) * cpu_btc(st, 0);
}
static const void* cpu_dx_in_msg(Stage* st, int gacts, int slot) {
    float* dst = cpu_of(st)->dx_send[slot];
    memcpy(dst, cpu_of(st)->gacts[gacts].dx_in, cpu_btc(st, 0) * sizeof(float));
    return dst;
}

static float* cpu_tied_share(Stage* st, int k) {
    slot_written(st, k);
    return st->range.has_embed ? cpu_of(st)->gviews[k].wte : cpu_of(st)->dwte_head[k];
}
static float* cpu_tied_other(Stage* st, int k) { return cpu_of(st)->tied_other[k]; }
static double cpu_tied_sum(Stage* st, int k, const float* first, const float* last) { return tied_sum_sumsq(st, k, first, last); }

static void cpu_memory(const Stage* st, StageUnitBytes* b) {
    CpuStage* c = cpu_of(st);
    double whole = 4.0 * (double)gpt2_acts_floats(&st->cfg, &st->range, st->B, st->T), btc = 4.0 * (double)cpu_btc(st, 0);
    b->slot = c->recompute ? btc * (!st->range.has_embed + !st->range.has_head) : whole;
    b->once = c->recompute ? whole : 0.0;
    b->gacts = 4.0 * (double)gpt2_grad_acts_floats(&st->cfg, &st->range, st->B, st->T);
    int held = 0; // stashes allocated so far (weight prediction may use more than plain stashing)
    for (int i = 0; i < c->n_stash; i++) held += c->stash[i] != NULL;
    b->stash = c->n_stash ? 4.0 * (double)st->num_params * held / c->n_stash : 0.0;
    b->grad_slot = 4.0 * (double)(st->num_params + (st->range.has_head ? st->sizes[0] : 0));
}

static const StageBackend CPU_BACKEND = {
    .name = "cpu",
    .host_memory = 1,
    .reserve = cpu_reserve,
    .destroy = cpu_destroy,
    .forward = cpu_forward,
    .backward_input = cpu_backward_input,
    .backward_weight = cpu_backward_weight,
    .probs = cpu_probs,
    .stash = cpu_stash,
    .grad_unit_sumsq = cpu_grad_unit_sumsq,
    .update = cpu_update,
    .zero_grad = cpu_zero_grad,
    .tie_local = cpu_tie_local,
    .host_grads = cpu_host_grads,
    .msg_bytes = cpu_msg_bytes,
    .input_msg = cpu_input_msg,
    .output_msg = cpu_output_msg,
    .grad_msg = cpu_grad_msg,
    .dx_in_msg = cpu_dx_in_msg,
    .tied_share = cpu_tied_share,
    .tied_other = cpu_tied_other,
    .tied_sum = cpu_tied_sum,
    .memory = cpu_memory,
    .predict = cpu_predict,
    .track = cpu_track,
    .backward_weight_alone = cpu_backward_weight_alone,
    .head_share_sumsq = cpu_head_share_sumsq,
    .dc_correct = cpu_dc_correct,
};

const StageBackend* stage_cpu_backend(void) { return &CPU_BACKEND; }

static void cpu_create(Stage* st, const StageInit* init) {
    if (!init->full && !init->slice) td_fatal("stage_create(cpu): the CPU stage needs the model's parameters");
    CpuStage* c = (CpuStage*)calloc_check(1, sizeof(CpuStage));
    Comm* comm = (Comm*)init->comm;
    if (comm && comm_has_peers(comm)) c->progress = (GPT2UnitHook){NULL, comm, progress_between};
    c->recompute = init->recompute;
    c->work_holds = -1;
    stage_init_common(st, init, &CPU_BACKEND, c);
}

const StageDevice STAGE_CPU = {"cpu", cpu_create};
