// A run's checkpoint sections, saved from and resumed into a pipeline (see run_checkpoint.h).
#include "run_checkpoint.h"
#include "tdpipe/outdir.h"
#include <math.h>
#include <string.h>
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/model_file.h"

#define CKPT_CONFIG_INTS 16
// byte shuffle + Huffman-only deflate: the smallest and fastest of the modes measured on a trained
// 124M checkpoint (README, make bench-checkpoint)
#define CKPT_ZLIB_LEVEL CKPT_LEVEL_HUFFMAN
// the slowest write this allows for: while rank 0 writes a file of B bytes the other ranks wait for it,
// and each of their waits may take B / WRITE_FLOOR_BYTES_PER_S seconds beyond --comm-timeout (a slow
// network disk's 10 MB/s; this machine writes a 1.5 GB checkpoint in about 7 s)
#define WRITE_FLOOR_BYTES_PER_S 10e6

// The "config" section: what a resume must match, one table for save and resume. The layout does not
// depend on P or D (micro-batches count over all replicas), so a run may resume in another shape.
enum { CFG_FIELDS = 9 };
static const char* const CFG_NAMES[CFG_FIELDS] = {"maxT", "V", "L", "NH", "C", "Vp", "B (-b)", "T (-t)", "micro-batches per step (M x D)"};
static void config_fields(const RunCheckpoint* rc, const GPT2Config* cfg, int32_t out[CKPT_CONFIG_INTS]) {
    int32_t v[CFG_FIELDS] = {cfg->max_seq_len, cfg->vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels, cfg->padded_vocab_size,
                             rc->B, rc->T, rc->mb_per_step};
    memset(out, 0, CKPT_CONFIG_INTS * sizeof(int32_t));
    memcpy(out, v, sizeof(v));
}

// the "tdpipe" section as fixed-width numbers: 8 int64, then doubles
typedef struct {
    int64_t aew_requested, aew_base, aew_halvings, rollbacks_in_row, losses_n, losses_next, gns_n, gns_b_n;
    double gns_s_ema, gns_g2_ema, gns_b_sum;
    double losses[GUARD_WINDOW];
} StateSection;

// the whole model's parameters ([0, L) with the embeddings and the head): what a checkpoint holds
static size_t full_params(const GPT2Config* cfg) {
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    return gpt2_param_sizes(cfg, &all, sizes);
}

// the section `name` of exactly `bytes` (its data NULL where the read did not keep it: see
// RESUME_KEEP_MAX), or NULL after saying what is wrong
static const CkptSection* section_exact(const Ckpt* c, const char* path, const char* name, size_t bytes, char* err, size_t errlen) {
    const CkptSection* e = ckpt_section_entry(c, name);
    if (!e) td_error(err, errlen, "%s: checkpoint has no section '%s'", path, name);
    else if (e->bytes != bytes) td_error(err, errlen, "%s: section '%s' holds %zu bytes, this run needs %zu (model or batch shape differs)", path, name, e->bytes, bytes);
    else return e;
    return NULL;
}

// A model-sized array on its way from the stages into rank 0's file (a checkpoint's section or
// model.bin), a message at a time: refused at its first non-finite value where `finite` asks (a
// non-finite state never reaches a file: the last good one stays the newest), else written. Once
// failed it takes the rest of the stream and drops it, since every stage sends it all regardless.
typedef struct {
    int (*write)(void* file, const float* data, size_t n, char* err, size_t errlen);
    void* file;
    const char* name;
    int finite;
    size_t at; // floats taken so far
    int failed;
    char* err;
    size_t errlen;
} FileSink;

static void file_put(void* ctx, const float* data, size_t n) {
    FileSink* k = (FileSink*)ctx;
    size_t bad = 0;
    if (!k->failed && k->finite) {
        while (bad < n && isfinite(data[bad])) bad++;
        if (bad < n) k->failed = td_error(k->err, k->errlen, "%s[%zu] is %g: the state is not finite", k->name, k->at + bad, data[bad]) != 0;
    }
    if (!k->failed) k->failed = k->write(k->file, data, n, k->err, k->errlen) != 0;
    k->at += n;
}

static int ckpt_put(void* w, const float* data, size_t n, char* err, size_t errlen) { return ckpt_writer_put((CkptWriter*)w, data, n * sizeof(float), err, errlen); }
static int model_put(void* w, const float* data, size_t n, char* err, size_t errlen) { return model_file_writer_put((ModelFileWriter*)w, data, n, err, errlen); }

// replica d's array (and head's share after it where head is given) streamed into section `name` of
// floats floats on rank 0; every rank takes part, after a failure too. The run's failure so far in, its failure out.
static int save_section(Pipeline* pl, int d, CkptWriter* w, const char* name, const float* mine, const float* head, int tied_from, size_t floats,
                        int finite, int failed, char* err, size_t errlen) {
    int root = pl->comm->world_rank == 0;
    FileSink k = {ckpt_put, w, name, finite, 0, failed, err, errlen};
    if (root && !k.failed) k.failed = ckpt_writer_begin(w, name, floats * sizeof(float), 4, err, errlen) != 0;
    pipeline_stream(pl, d, mine, head, tied_from, (PipelineSink){file_put, &k});
    if (root && !k.failed) k.failed = ckpt_writer_end(w, err, errlen) != 0;
    return k.failed;
}

// A resume holds the small sections whole and streams the model-sized ones (parameters, AdamW's
// moments, the int8 residuals), each rank copying out the pieces of its stage as the blocks are
// decoded: a rank needs a block of memory for them, not the whole model's arrays
#define RESUME_KEEP_MAX ((size_t)1 << 20)

// where a streamed section's bytes go: the pieces of it this rank holds, each to its place in dst
typedef struct {
    GPT2Piece pieces[GPT2_NUM_PARAM_TENSORS + 1]; // the stage's tensors, and the LM head's share of wte after the model (residuals)
    int n;
    float* dst; // (num_params, then Vp*C with the head's share) the stage's layout
} SliceSink;

static void slice_put(void* ctx, size_t off, const void* data, size_t n) {
    const SliceSink* k = (const SliceSink*)ctx;
    for (int i = 0; i < k->n; i++) {
        size_t a = k->pieces[i].full_off * sizeof(float), b = a + k->pieces[i].n * sizeof(float); // the piece's bytes in the section
        size_t lo = off > a ? off : a, hi = off + n < b ? off + n : b;
        if (lo < hi) memcpy((char*)(k->dst + k->pieces[i].stage_off) + (lo - a), (const char*)data + (lo - off), hi - lo);
    }
}

// the sink for section `name` into dst: stage s's slice of the model's layout, and with head, the
// (Vp, C) after it (at n_full in the section, after num_params in dst) on the last stage
static CkptSink slice_sink(const char* name, const Stage* s, int head, float* dst, SliceSink* k) {
    gpt2_slice_pieces(&s->cfg, &s->range, k->pieces);
    k->n = GPT2_NUM_PARAM_TENSORS;
    if (head && s->range.has_head) {
        k->pieces[k->n++] = (GPT2Piece){full_params(&s->cfg), s->num_params, s->sizes[0]};
    }
    k->dst = dst;
    return (CkptSink){name, slice_put, k};
}

// The int8 sync's error-feedback residuals: "grad_ef" = int64 {D, block, n_full, Vp*C}, then for each
// replica d "grad_ef_replica_<d>" and "grad_ef_owner_<d>" (n_full + Vp*C floats each: the model's
// layout, then the LM head's share of wte). Owners are a function of the block (dp_sync.h), not of
// the stage layout, so a resume at another P (same D) continues them exactly.
enum { EF_SHAPE = 4 };
static void ef_section_name(char* out, size_t cap, int owner, int d) { snprintf(out, cap, "grad_ef_%s_%d", owner ? "owner" : "replica", d); }
static int has_ef(const DpSync* ef) { return ef && ef->ef_replica; }

static int save_ef(Pipeline* pl, const DpSync* ef, CkptWriter* w, int failed, char* err, size_t errlen) {
    Stage* s = pl->stage;
    int root = pl->comm->world_rank == 0, D = pl->comm->D;
    size_t n_full = full_params(&s->cfg), vc = (size_t)s->cfg.padded_vocab_size * s->cfg.channels;
    int64_t shape[EF_SHAPE] = {D, ef->cfg.block, (int64_t)n_full, (int64_t)vc};
    if (root && !failed) failed = ckpt_writer_add(w, "grad_ef", shape, sizeof(shape), 8, err, errlen);
    for (int d = 0; d < D; d++)
        for (int o = 0; o < 2; o++) {
            const float* mine = o ? ef->ef_owner : ef->ef_replica;
            char name[64];
            ef_section_name(name, sizeof name, o, d);
            // wte's residual is the first stage's (the embedding's share, synced there); the head's share after the model
            failed = save_section(pl, d, w, name, mine, mine + s->num_params, PIPELINE_TIED_FIRST, n_full + vc, 0, failed, err, errlen);
        }
    return failed;
}

// this replica's residuals from the checkpoint: two sinks added to sinks[*n] (names in names[2]),
// or zero with a note when it holds none for this D and block; -1 + err when their sections are missing or misshapen
static int resume_ef(const Ckpt* c, const char* path, Stage* s, DpSync* ef, CkptSink* sinks, int* n_sinks, SliceSink* ks, char names[2][64],
                     char* err, size_t errlen) {
    size_t got;
    const int64_t* shape = (const int64_t*)ckpt_section(c, "grad_ef", &got);
    size_t n_full = full_params(&s->cfg), vc = (size_t)s->cfg.padded_vocab_size * s->cfg.channels;
    size_t n = s->num_params + (s->range.has_head ? s->sizes[0] : 0);
    const char* why = NULL;
    char buf[160];
    if (!shape || got != sizeof(int64_t) * EF_SHAPE) why = "it holds none (an fp32 run's, or one without error feedback)";
    else if (shape[0] != ef->D || shape[1] != ef->cfg.block) {
        snprintf(buf, sizeof buf, "they are for D = %lld replicas and blocks of %lld, this run has D = %d and blocks of %d", (long long)shape[0],
                 (long long)shape[1], ef->D, ef->cfg.block);
        why = buf;
    }
    if (why) {
        memset(ef->ef_replica, 0, n * sizeof(float));
        memset(ef->ef_owner, 0, n * sizeof(float));
        if (g_rank == 0)
            fprintf(stderr, "note: %s: the int8 sync's error-feedback residuals start at zero: %s (what they carried, at most half an int8 step "
                            "per element, is dropped once)\n", path, why);
        return 0;
    }
    for (int o = 0; o < 2; o++) {
        ef_section_name(names[o], 64, o, ef->me);
        if (!section_exact(c, path, names[o], (n_full + vc) * sizeof(float), err, errlen)) return -1;
        sinks[(*n_sinks)++] = slice_sink(names[o], s, 1, o ? ef->ef_owner : ef->ef_replica, &ks[o]);
    }
    return 0;
}

int run_checkpoint_save(const RunCheckpoint* rc, Pipeline* pl, int step, const DataLoader* train, const RunState* state, const DpSync* ef) {
    char err[1024] = "", path[1200] = "";
    Stage* s = pl->stage;
    int root = pl->comm->world_rank == 0;
    size_t n_full = full_params(&s->cfg);
    CkptWriter* w = NULL;
    int failed = 0;
    double bytes = 4.0 * ((has_ef(ef) ? 5.0 : 3.0) * (double)n_full); // weights, AdamW's moments, the residuals
    comm_timeout_allow(pl->comm, bytes / WRITE_FLOOR_BYTES_PER_S, "rank 0's checkpoint write");
    if (root) {
        w = ckpt_writer_open(rc->dir, step, CKPT_ZLIB_LEVEL, 1, err, sizeof(err));
        int32_t config[CKPT_CONFIG_INTS];
        config_fields(rc, &s->cfg, config);
        int64_t step64 = step;
        uint64_t seed = rc->seed;
        DataLoaderState dls;
        dataloader_get_state(train, &dls);
        failed = !w || ckpt_writer_add(w, "config", config, sizeof(config), 4, err, sizeof(err)) ||
                 ckpt_writer_add(w, "step", &step64, sizeof(step64), 8, err, sizeof(err)) ||
                 ckpt_writer_add(w, "rng", &seed, sizeof(seed), 8, err, sizeof(err)) ||
                 ckpt_writer_add(w, "dataloader", &dls, sizeof(dls), 8, err, sizeof(err));
        const GnsState* g = &state->gns;
        StateSection ts = {state->aew_requested, state->aew_base, state->aew_halvings, state->rollbacks_in_row, state->losses.n, state->losses.next, g->n, g->b_n,
                           g->s_ema, g->g2_ema, g->b_sum, {0}};
        memcpy(ts.losses, state->losses.loss, sizeof(ts.losses));
        failed = failed || ckpt_writer_add(w, "tdpipe", &ts, sizeof(ts), 8, err, sizeof(err));
        if (state->val_owed) failed = failed || ckpt_writer_add(w, "val_owed", &state->val_owed, sizeof(state->val_owed), 8, err, sizeof(err));
    }
    const char* names[3] = {"params", "adam_m", "adam_v"};
    const float* mine[3] = {s->params, s->adam_m, s->adam_v};
    for (int i = 0; i < 3; i++) failed = save_section(pl, 0, w, names[i], mine[i], NULL, PIPELINE_TIED_LAST, n_full, 1, failed, err, sizeof(err));
    if (has_ef(ef)) failed = save_ef(pl, ef, w, failed, err, sizeof(err));
    if (root) {
        // a file of this step's name is one resume passed over: kept aside, never written over
        char kept[1300] = "";
        if (!failed && ckpt_path(path, sizeof(path), rc->dir, step) == 0) failed = ckpt_keep_aside(path, kept, sizeof(kept), err, sizeof(err)) < 0;
        if (!failed) failed = ckpt_writer_commit(w, path, sizeof(path), err, sizeof(err));
        else if (w) ckpt_writer_abort(w);
        if (failed) fprintf(stderr, "[rank 0] checkpoint at step %d not written: %s (any earlier checkpoint is untouched)\n", step, err);
        else {
            if (kept[0]) fprintf(stderr, "note: %s was there already (a file resume passed over): kept as %s, not written over\n", path, kept);
            if (ckpt_prune(rc->dir, rc->keep, err, sizeof(err))) fprintf(stderr, "warning: %s\n", err);
            printf("checkpoint: %s\n", path);
        }
    }
    failed = comm_any(pl->comm, failed);
    comm_timeout_allow(pl->comm, 0, NULL);
    return failed ? -1 : 0;
}

int run_checkpoint_save_model(Pipeline* pl, const char* path, char* err, size_t errlen) {
    ModelFileWriter mw;
    int root = pl->comm->world_rank == 0, failed = root && model_file_writer_open(&mw, path, &pl->stage->cfg, err, errlen) != 0;
    FileSink k = {model_put, &mw, "parameter", 1, 0, failed, err, errlen};
    comm_timeout_allow(pl->comm, 4.0 * (double)full_params(&pl->stage->cfg) / WRITE_FLOOR_BYTES_PER_S, "rank 0's write of model.bin");
    pipeline_stream(pl, 0, pl->stage->params, NULL, PIPELINE_TIED_LAST, (PipelineSink){file_put, &k});
    if (root && !k.failed) k.failed = model_file_writer_commit(&mw, err, errlen) != 0;
    if (root && k.failed) model_file_writer_abort(&mw);
    failed = comm_any(pl->comm, k.failed);
    comm_timeout_allow(pl->comm, 0, NULL);
    return failed ? -1 : 0;
}


int run_checkpoint_resume(const RunCheckpoint* rc, Stage* s, DataLoader* train, RunState* state, DpSync* ef, char* path, size_t path_cap,
                          char* err, size_t errlen) {
    Ckpt c;
    char note[4096];
    int rc_find = ckpt_find_latest(rc->dir, RESUME_KEEP_MAX, &c, path, path_cap, note, sizeof(note));
    if (note[0] && g_rank == 0) fprintf(stderr, "%s", note);
    char archive[256];
    if (rc_find == 1 && outdir_newest_archive(rc->dir, archive, sizeof archive))
        return td_error(err, errlen, "-y 1: no checkpoint in %s to resume from (a fresh run there moved an earlier run's files to %s/%s: "
                        "move its checkpoints back to resume from them)", rc->dir, rc->dir, archive);
    if (rc_find == 1) return td_error(err, errlen, "-y 1: no checkpoint in %s to resume from", rc->dir);
    if (rc_find < 0) return td_error(err, errlen, "-y 1: no usable checkpoint in %s", rc->dir);
    size_t n_full = full_params(&s->cfg);
    int step = -1;
    do { // checked in this order: the config, then every section's presence and size
        const CkptSection* cs = section_exact(&c, path, "config", CKPT_CONFIG_INTS * 4, err, errlen);
        if (!cs) break;
        const int32_t* config = (const int32_t*)cs->data;
        int32_t want[CKPT_CONFIG_INTS];
        config_fields(rc, &s->cfg, want);
        int i = 0;
        while (i < CFG_FIELDS && config[i] == want[i]) i++;
        if (i < CFG_FIELDS) {
            td_error(err, errlen, "%s: checkpoint has %s = %d but this run has %d", path, CFG_NAMES[i], config[i], want[i]);
            break;
        }
        const CkptSection* ss = section_exact(&c, path, "step", 8, err, errlen);
        if (!ss || !section_exact(&c, path, "rng", 8, err, errlen)) break;
        const int64_t* step64 = (const int64_t*)ss->data;
        const CkptSection* ds = section_exact(&c, path, "dataloader", sizeof(DataLoaderState), err, errlen);
        if (!ds) break;
        const DataLoaderState* dls = (const DataLoaderState*)ds->data;
        char msg[256];
        if (train && dataloader_set_state(train, dls, msg, sizeof(msg))) {
            int order = dls->seed != train->seed || dls->shuffle != train->shuffle; // the flags that set the data's order
            td_error(err, errlen, "%s: %s%s", path, msg, order ? " (resume with the run's --seed and --shuffle)" : "");
            break;
        }
        const char* names[3] = {"params", "adam_m", "adam_v"};
        float* mine[3] = {s->params, s->adam_m, s->adam_v};
        CkptSink sinks[5]; // the three arrays, then the two residuals
        SliceSink ks[5];
        char ef_names[2][64];
        int n_sinks = 0;
        for (int t = 0; t < 3 && section_exact(&c, path, names[t], n_full * 4, err, errlen); t++)
            sinks[n_sinks++] = slice_sink(names[t], s, 0, mine[t], &ks[t]);
        if (n_sinks < 3) break;
        size_t got = 0;
        const CkptSection* te = ckpt_section_entry(&c, "tdpipe");
        if (te && te->bytes != sizeof(StateSection)) {
            td_error(err, errlen, "%s: section 'tdpipe' holds %zu bytes, this version reads %zu", path, te->bytes, sizeof(StateSection));
            break;
        }
        const StateSection* ts = te ? (const StateSection*)te->data : NULL;
        if (ts && ts->aew_requested == state->aew_requested) { // the same window asked for: go on where the run stood
            state->aew_base = ts->aew_base;
            state->aew_halvings = ts->aew_halvings;
            state->rollbacks_in_row = ts->rollbacks_in_row;
        }
        if (ts && (ts->losses_n < 0 || ts->losses_n > GUARD_WINDOW || ts->losses_next < 0 || ts->losses_next >= GUARD_WINDOW)) {
            td_error(err, errlen, "%s: section 'tdpipe' has a guard window of %lld losses (at most %d)", path, (long long)ts->losses_n, GUARD_WINDOW);
            break;
        }
        const CkptSection* vo = ckpt_section_entry(&c, "val_owed");
        if (vo && (vo->bytes != sizeof(int64_t) || !vo->data || *(const int64_t*)vo->data != 1)) {
            td_error(err, errlen, "%s: section 'val_owed' is not the one 8-byte 1 this version writes", path);
            break;
        }
        state->val_owed = vo != NULL;
        if (ts) {
            state->gns = (GnsState){ts->gns_s_ema, ts->gns_g2_ema, (long)ts->gns_n, ts->gns_b_sum, (long)ts->gns_b_n};
            state->losses.n = (int)ts->losses_n;
            state->losses.next = (int)ts->losses_next;
            memcpy(state->losses.loss, ts->losses, sizeof(ts->losses));
        }
        if (has_ef(ef) && resume_ef(&c, path, s, ef, sinks, &n_sinks, ks + 3, ef_names, err, errlen)) break;
        if (!has_ef(ef) && ckpt_section(&c, "grad_ef", &got) && g_rank == 0)
            fprintf(stderr, "note: %s holds an int8 sync's error-feedback residuals; this run does not use them (no --grad-quant int8 with "
                            "--error-feedback 1 over replicas)\n", path);
        if (ckpt_read_sinks(path, sinks, n_sinks, err, errlen)) break; // every check above passed: now the arrays
        step = (int)*step64;
        s->version = step;
        stage_from_host(s);
    } while (0);
    ckpt_free(&c);
    return step;
}
