// The gradient sync's plan (tdpipe/dp_sync.h), without ranks: every gradient element in exactly one
// block of its owner's segment, the plan alone (dp_sync_init_plan, what the GPU sync runs) equal to
// the full one's, and the memory checks' bounds above what the host sync holds and what the GPU sync
// allocates (dp_sync_device_sizes, the same function its init allocates by), over stages, D, owners,
// block and bucket sizes; and the CPU weight backward tells the units the plan's buckets wait for, in
// the order the plan expects, with its calls between a layer's kernels (GPT2UnitHook).
#include <string.h>
#include "llmc/common.h"
#include "llmc/gpt2.h"
#include "tdpipe/comm.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/stage_cpu.h"
#include "tests/test.h"

// what a GPT2UnitHook heard, in order: a unit's number for done, -1 for between
typedef struct {
    int ev[64];
    int n;
} HookLog;
static void log_done(void* ctx, int unit) {
    HookLog* h = (HookLog*)ctx;
    if (h->n < 64) h->ev[h->n++] = unit;
}
static void log_between(void* ctx) { log_done(ctx, -1); }

// one micro-batch's weight backward on a small whole model, with the hook and without: the units in
// units_in_order's order (embeddings, head, final LayerNorm, layers from the last), three calls
// between the four matmuls of each layer and none elsewhere, and the same gradient bits either way
static void test_unit_hook(void) {
    const GPT2Config cfg = {16, 64, 64, 3, 2, 16}; // maxT, V, Vp, L, NH, C
    const int B = 2, T = 8, L = cfg.num_layers;
    GPT2Range all = {0, L, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(&cfg, &all, sizes);
    float* init = (float*)malloc_check(n * sizeof(float));
    gpt2_init_full(&cfg, init, 5);
    Stage st;
    stage_create(&st, &STAGE_CPU, &(StageInit){.cfg = &cfg, .range = all, .B = B, .T = T, .full = init});
    stage_reserve(&st, 1, 1, 1, 0);
    GPT2Acts* a = stage_cpu_acts(&st, 0);
    GPT2GradActs* ga = stage_cpu_gacts(&st, 0);
    for (int i = 0; i < B * T; i++) a->inputs[i] = (i * 7 + 3) % cfg.vocab_size, a->targets[i] = (i * 5 + 1) % cfg.vocab_size;
    gpt2_forward(&cfg, &all, &st.p, a, 1, NULL);
    gpt2_backward_input(&cfg, &all, &st.p, a, ga, NULL, 1.0f / (B * T), NULL);
    float* g[2];
    float* head[2];
    HookLog log = {{0}, 0};
    for (int k = 0; k < 2; k++) { // k 0 without a hook, 1 with one
        g[k] = (float*)calloc_check(n, sizeof(float));
        head[k] = (float*)calloc_check(st.sizes[0], sizeof(float));
        ParameterTensors gv;
        gpt2_point_params(&gv, g[k], sizes);
        GPT2UnitHook hook = {log_done, &log, log_between};
        gpt2_backward_weight(&cfg, &all, a, ga, k ? &hook : NULL, &gv, head[k], 0);
    }
    int want[64], nw = 0;
    want[nw++] = 0, want[nw++] = L + 2, want[nw++] = L + 1;
    for (int l = L - 1; l >= 0; l--) want[nw++] = -1, want[nw++] = -1, want[nw++] = -1, want[nw++] = 1 + l;
    int order = log.n == nw && !memcmp(log.ev, want, nw * sizeof(int));
    CHECK(order, "the weight backward tells embeddings, head, final LayerNorm, then each layer from the last, after 3 calls between its "
                 "kernels (%d events, %d expected)", log.n, nw);
    CHECK(!memcmp(g[0], g[1], n * sizeof(float)) && !memcmp(head[0], head[1], st.sizes[0] * sizeof(float)),
          "the gradient with the hook is bitwise the one without (%zu values and the head's %zu)", n, st.sizes[0]);
    for (int k = 0; k < 2; k++) free(g[k]), free(head[k]);
    free(init);
    stage_destroy(&st);
}

// every element of the stage's slices (stage_slices: on a last stage without the embeddings its copy of
// wte is the tied exchange's, not a slice) and of the head share (vc, after the n parameters) in exactly
// one block, nothing else in any; blocks within the block size, owners in [0, D), each owner's blocks
// numbered 0.. and its elements laid end to end
static int plan_covers(const DpSync* ds, Stage* st, size_t n, size_t vc, char* why, size_t whylen) {
    unsigned char* hit = (unsigned char*)calloc_check(n + vc + 1, 1);
    unsigned char* want = (unsigned char*)calloc_check(n + vc + 1, 1);
    StageSlice* sl = (StageSlice*)malloc_check(STAGE_MAX_SLICES(st->range.l1 - st->range.l0) * sizeof(StageSlice));
    int ns = stage_slices(st, sl);
    for (int i = 0; i < ns; i++) memset(want + sl[i].off, 1, sl[i].n);
    memset(want + n, 1, vc);
    free(sl);
    int ok = 1;
    for (int i = 0; i < ds->n_buckets && ok; i++) {
        const DpBucket* b = &ds->buckets[i];
        size_t* elems = (size_t*)calloc_check(ds->D, sizeof(size_t));
        int* idx = (int*)calloc_check(ds->D, sizeof(int));
        for (int j = 0; j < b->n_blocks && ok; j++) {
            const DpBlock* k = &b->blocks[j];
            size_t at = (k->head ? n : 0) + k->src;
            if (k->owner < 0 || k->owner >= ds->D || k->len == 0 || k->len > (uint32_t)ds->cfg.block || at + k->len > (k->head ? n + vc : n))
                ok = 0, snprintf(why, whylen, "bucket %d block %d: owner %d, len %u at %zu", i, j, k->owner, k->len, at);
            else if (k->idx != (uint32_t)idx[k->owner]++ || k->elem != elems[k->owner])
                ok = 0, snprintf(why, whylen, "bucket %d block %d: index %u / element %zu out of order", i, j, k->idx, k->elem);
            else
                for (uint32_t e = 0; e < k->len; e++) hit[at + e]++;
            elems[k->owner] += k->len;
        }
        for (int q = 0; q < ds->D && ok; q++)
            if (elems[q] != b->seg_elems[q] || idx[q] != b->seg_blocks[q]) ok = 0, snprintf(why, whylen, "bucket %d owner %d: totals differ", i, q);
        free(elems);
        free(idx);
    }
    for (size_t e = 0; e < n + vc && ok; e++)
        if (hit[e] != want[e]) ok = 0, snprintf(why, whylen, "element %zu in %d blocks (%d wanted)", e, hit[e], want[e]);
    free(hit);
    free(want);
    return ok;
}

// the floats in the stage's slices, and the blocks of `block` they and the head share (vc) cut into, each slice's last one short
static size_t slice_floats(Stage* st) {
    StageSlice* sl = (StageSlice*)malloc_check(STAGE_MAX_SLICES(st->range.l1 - st->range.l0) * sizeof(StageSlice));
    size_t total = 0;
    for (int i = 0, ns = stage_slices(st, sl); i < ns; i++) total += sl[i].n;
    free(sl);
    return total;
}
static double n_blocks(Stage* st, size_t vc, int block) {
    StageSlice* sl = (StageSlice*)malloc_check(STAGE_MAX_SLICES(st->range.l1 - st->range.l0) * sizeof(StageSlice));
    size_t total = (vc + block - 1) / block;
    for (int i = 0, ns = stage_slices(st, sl); i < ns; i++) total += (sl[i].n + block - 1) / block;
    free(sl);
    return (double)total;
}

// a stage's shapes only (range of cfg, B = 1, T), and a grid of D = 2 replicas around it: what a plan reads
static void shapes_d2(Stage* st, Comm* c, const GPT2Config* cfg, GPT2Range range, int T) {
    StageInit init = {.cfg = cfg, .range = range, .B = 1, .T = T};
    stage_init_common(st, &init, NULL, NULL);
    memset(c, 0, sizeof *c);
    c->D = 2;
}

// --grad-cache's bucket size: whole units in backward's order until the bucket holds that many fp32
// bytes. Three layers alone (no embeddings, no head), each 12 C^2 + 13 C floats: a bucket of exactly a
// layer's bytes holds one layer (3 buckets), a byte more two (2 buckets: layers 3 and 2, then 1), and 0
// all three in one
static void test_bucket_bytes(void) {
    const GPT2Config cfg = {64, 1000, 1024, 3, 4, 128};
    const size_t C = 128, layer = 4 * (12 * C * C + 13 * C);
    Stage st;
    Comm c;
    shapes_d2(&st, &c, &cfg, (GPT2Range){0, 3, 0, 0}, 64);
    const size_t sizes[3] = {layer, layer + 1, 0};
    const int want[3] = {3, 2, 1}, want_first[3] = {1, 2, 3}; // buckets, and the units in the first
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        DpSyncConfig dcfg = {GRAD_QUANT_NONE, 256, 0, sizes[i]};
        DpSync ds;
        dp_sync_init_plan(&ds, &dcfg, &c, &st, 1);
        ok &= ds.n_buckets == want[i] && ds.buckets[0].n_units == want_first[i];
        dp_sync_free(&ds);
    }
    CHECK(ok, "buckets of a layer's %zu bytes: one layer each; of a byte more: two; of 0: the stage's three in one", layer);
}

// the plan alone against the full sync's: the same buckets, blocks and segments; no message buffers;
// the residuals (int8 with error feedback) all the same
static int same_plan(const DpSync* a, const DpSync* p) {
    if (a->n_buckets != p->n_buckets || p->scratch || !a->ef_replica != !p->ef_replica || !a->ef_owner != !p->ef_owner) return 0;
    for (int i = 0; i < a->n_buckets; i++) {
        const DpBucket *x = &a->buckets[i], *y = &p->buckets[i];
        if (x->n_blocks != y->n_blocks || x->n_units != y->n_units || x->first_unit != y->first_unit || y->buf || y->recv || y->req) return 0;
        if (memcmp(x->blocks, y->blocks, (size_t)x->n_blocks * sizeof(DpBlock)) || memcmp(x->seg_off, y->seg_off, (a->D + 1) * sizeof(size_t)) ||
            memcmp(x->seg_blocks, y->seg_blocks, a->D * sizeof(int)) || memcmp(x->seg_elems, y->seg_elems, a->D * sizeof(size_t)))
            return 0;
    }
    return 1;
}

// dp_sync_clear_residuals (a rollback's): both error-feedback residuals, the replica's and the owner's,
// all zero again, the LM head's share after the model included
static void test_clear_residuals(void) {
    const GPT2Config cfg = {16, 64, 64, 2, 2, 16};
    Stage st;
    Comm c;
    shapes_d2(&st, &c, &cfg, (GPT2Range){0, 2, 1, 1}, 8);
    DpSyncConfig dcfg = {GRAD_QUANT_INT8, 64, 1, 0};
    DpSync ds;
    dp_sync_init(&ds, &dcfg, &c, &st);
    size_t n = st.num_params + st.sizes[0];
    for (size_t i = 0; i < n; i++) ds.ef_replica[i] = ds.ef_owner[i] = 1.0f;
    dp_sync_clear_residuals(&ds);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= ds.ef_replica[i] == 0.0f && ds.ef_owner[i] == 0.0f;
    CHECK(zero, "dp_sync_clear_residuals zeroes the replica's and the owner's residuals (%zu floats each)", n);
    dp_sync_free(&ds);
}

int main(void) {
    const GPT2Config small = {64, 1000, 1024, 3, 4, 128};     // maxT, V, Vp, L, NH, C
    const GPT2Config gpt2 = {1024, 50257, 50304, 12, 12, 768}; // GPT-2 124M
    struct {
        const char* name;
        const GPT2Config* cfg;
        GPT2Range range;
    } stages[] = {{"small whole", &small, {0, 3, 1, 1}}, {"small first", &small, {0, 1, 1, 0}}, {"small middle", &small, {1, 2, 0, 0}},
                  {"small last", &small, {2, 3, 0, 1}},  {"124M whole", &gpt2, {0, 12, 1, 1}},  {"124M last half", &gpt2, {6, 12, 0, 1}}};
    const int blocks[] = {256, 100, 7, 1};
    const size_t buckets[] = {0, 64 << 10, 4 << 20};
    int cases = 0, covered = 0, equal = 0, host_ok = 0, dev_ok = 0, bytes_ok = 0, d2_cases = 0, d2_ok = 0;
    double worst_host = 0.0, worst_dev = 0.0; // the largest held / planned, to print
    char why[256] = "";
    for (size_t si = 0; si < sizeof stages / sizeof stages[0]; si++) {
        Stage st;
        StageInit init = {.cfg = stages[si].cfg, .range = stages[si].range, .B = 1, .T = 64};
        stage_init_common(&st, &init, NULL, NULL); // shapes only
        size_t n = st.num_params, vc = st.range.has_head ? st.sizes[0] : 0;
        double elems = (double)slice_floats(&st) + (double)vc; // (a last stage's wte copy is in no slice: the tied exchange's)
        int big = stages[si].cfg == &gpt2;
        for (int D = 2; D <= 4; D++)
            for (int me = 0; me < D; me += D - 1)
                for (int mode = 0; mode < 3; mode++)
                    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
                        for (size_t ki = 0; ki < sizeof buckets / sizeof buckets[0]; ki++) {
                            if (big && (bi || ki == 1 || D == 3 || me)) continue; // (124M: its shape's sizes; the small shapes take the rest)
                            if (mode == 0 && bi > 1) continue;
                            Comm c;
                            memset(&c, 0, sizeof c);
                            c.D = D, c.replica = me; // a plan reads nothing else of the grid
                            DpSyncConfig cfg = {mode ? GRAD_QUANT_INT8 : GRAD_QUANT_NONE, blocks[bi], mode == 2, buckets[ki]};
                            DpSync full, plan;
                            dp_sync_init(&full, &cfg, &c, &st);
                            dp_sync_init_plan(&plan, &cfg, &c, &st, 1);
                            cases++;
                            char w[160];
                            if (plan_covers(&full, &st, n, vc, w, sizeof w)) covered++;
                            else snprintf(why, sizeof why, "%s D=%d me=%d block %d: %s", stages[si].name, D, me, blocks[bi], w);
                            equal += same_plan(&full, &plan);
                            bytes_ok += dp_sync_step_bytes(&full) == dp_sync_step_bytes(&plan);
                            if (D == 2) { // each replica sends the other's half and receives its own, then the reverse: the whole buffer twice
                                d2_cases++;
                                d2_ok += dp_sync_step_bytes(&full) == 2.0 * (mode ? elems + 4.0 * n_blocks(&st, vc, blocks[bi]) : 4.0 * elems);
                            }
                            double held = dp_sync_held_bytes(&full), planned = dp_sync_planned_bytes(&cfg, &st, D);
                            double dev = dp_sync_device_sizes(&plan).total, dev_planned = dp_sync_device_planned_bytes(&cfg, &st, D);
                            host_ok += held <= planned;
                            dev_ok += dev <= dev_planned;
                            if (held > planned || dev > dev_planned)
                                printf("over: %s D=%d me=%d mode %d block %d bucket %zu: host %.0f of %.0f, device %.0f of %.0f\n", stages[si].name, D, me,
                                       mode, blocks[bi], buckets[ki], held, planned, dev, dev_planned);
                            if (held / planned > worst_host) worst_host = held / planned;
                            if (dev / dev_planned > worst_dev) worst_dev = dev / dev_planned;
                            dp_sync_free(&full);
                            dp_sync_free(&plan);
                        }
    }
    CHECK(covered == cases, "every element in exactly one block, owners' blocks in order, in %d of %d plans %s", covered, cases, why);
    CHECK(equal == cases, "dp_sync_init_plan's plan is the full sync's, without message buffers, in %d of %d", equal, cases);
    CHECK(bytes_ok == cases, "the same bytes a step, in %d of %d", bytes_ok, cases);
    CHECK(d2_ok == d2_cases, "dp_sync_step_bytes at D = 2: twice the whole buffer, 2 (n + 4 blocks) int8, 8 n fp32 (n the slices' and the head "
                             "share's floats, blocks cut per slice), in %d of %d", d2_ok, d2_cases);
    CHECK(host_ok == cases, "dp_sync_planned_bytes bounds what the host sync holds, in %d of %d (at most %.1f%% of it used)", host_ok, cases,
          100.0 * worst_host);
    CHECK(dev_ok == cases, "dp_sync_device_planned_bytes bounds what the GPU sync allocates, in %d of %d (at most %.1f%% of it used)", dev_ok, cases,
          100.0 * worst_dev);
    test_unit_hook();
    test_clear_residuals();
    test_bucket_bytes();
    return test_summary();
}
