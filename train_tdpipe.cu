// train_tdpipe: the training binary. flags -> ranks -> partition -> stage -> schedule -> loop of
// executor runs between consistency points (validation, samples, checkpoints), with log.jsonl
// and resume. One process (P = D = 1) without mpirun; P x D ranks with it. Compiled as C or by nvcc.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>
#include "llmc/builtin_data.h"
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/model_file.h"
#include "llmc/shard.h"
#include "llmc/tokenizer.h"
#include "tdpipe/args.h"
#include "tdpipe/comm.h"
#include "tdpipe/executor.h"
#include "tdpipe/partition.h"
#include "tdpipe/pipeline.h"
#include "tdpipe/schedule.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cuda.cuh"
#include "tdpipe/stage_staged.h"
#include "tdpipe/trace.h"

#define BUILTIN_TRAIN_TOKENS 2000000
#define BUILTIN_VAL_TOKENS 131072
#define BUILTIN_SOURCE_SEED 20241130ULL

// an error every rank detects alike (flags, shapes, rank counts): rank 0 says it, all exit 1. The
// other ranks first give rank 0 two seconds: the launcher ends the job at the first exit, and a
// rank 0 still a little behind (reading a checkpoint, say) would be killed before saying why.
#define fatal_all(...)                                          \
    do {                                                        \
        if (g_rank == 0) {                                      \
            fprintf(stderr, "train_tdpipe: ");                  \
            fprintf(stderr, __VA_ARGS__);                       \
            fputc('\n', stderr);                                \
            fflush(stderr);                                     \
        } else {                                                \
            struct timespec wait_ = {2, 0};                     \
            nanosleep(&wait_, NULL);                            \
        }                                                       \
        exit(1);                                                \
    } while (0)

// ----------------------------------------------------------------------------------------------
// data: the built-in Markov corpus or llm.c shards; read on the first and last stage

typedef struct {
    DataLoader train, val;
    int has_train, has_val;
    int tokenizer;        // SHARD_TOKENIZER_*: decides V for fresh models and how samples decode
    int builtin;          // 1 when training on the built-in dataset
    MarkovSource source;  // the built-in dataset's source (its entropy floor)
    int first_token;      // where samples start: the first validation (or training) token
} Data;

// every replica reads its own slice of the training data (rank = replica of D); validation is
// the same for all. Ranks that need no data (middle stages) still learn the tokenizer.
static void data_init(Data* d, const TrainArgs* a, int V_limit, int needs_data, int replica, int D) {
    char err[1024];
    memset(d, 0, sizeof(*d));
    uint64_t seed = (uint64_t)a->seed;
    if (!a->train_pattern[0]) {
        d->builtin = 1;
        d->tokenizer = SHARD_TOKENIZER_BYTES;
        markov_init(&d->source, BUILTIN_SOURCE_SEED);
        uint16_t* tokens = (uint16_t*)malloc_check(sizeof(uint16_t) * (BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS));
        markov_generate(&d->source, tokens, BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS, BUILTIN_SOURCE_SEED + 1);
        d->first_token = tokens[BUILTIN_TRAIN_TOKENS];
        d->has_val = 1;
        if (needs_data) {
            if (dataloader_init_memory(&d->train, tokens, BUILTIN_TRAIN_TOKENS, a->B, a->T, replica, D, a->shuffle, seed, V_limit, err, sizeof(err)) ||
                dataloader_init_memory(&d->val, tokens + BUILTIN_TRAIN_TOKENS, BUILTIN_VAL_TOKENS, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
                td_fatal("built-in dataset: %s", err);
            d->has_train = 1;
        }
        free(tokens);
        return;
    }
    // every rank validates the shards (the same verdict everywhere); middle stages then drop them
    if (dataloader_init(&d->train, a->train_pattern, a->B, a->T, replica, D, a->shuffle, seed, V_limit, err, sizeof(err)))
        fatal_all("-i %s: %s", a->train_pattern, err);
    d->tokenizer = d->train.tokenizer == SHARD_TOKENIZER_BYTES ? SHARD_TOKENIZER_BYTES : SHARD_TOKENIZER_GPT2;
    d->has_train = 1;
    if (a->val_pattern[0]) {
        if (dataloader_init(&d->val, a->val_pattern, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
            fatal_all("-j %s: %s", a->val_pattern, err);
        d->has_val = 1;
    }
    // samples start from the first validation (or training) token
    DataLoader* src = d->has_val ? &d->val : &d->train;
    int* in = (int*)malloc_check(sizeof(int) * a->B * a->T * 2);
    if (dataloader_next(src, in, in + a->B * a->T) == 0) d->first_token = in[0];
    dataloader_reset(src);
    free(in);
}

static void data_free(Data* d) {
    if (d->has_train) dataloader_free(&d->train);
    if (d->has_val) dataloader_free(&d->val);
}

// ----------------------------------------------------------------------------------------------
// model: a fresh GPT-2 of depth N ("dN") or an llm.c model file

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

// fills cfg for -e dN (vocabulary from the data's tokenizer); returns 1 if init names a depth
static int fresh_config(const char* init, int vocab_size, GPT2Config* cfg) {
    if (init[0] != 'd') return 0;
    char* end;
    long depth = strtol(init + 1, &end, 10);
    if (end == init + 1 || *end != '\0') return 0;
    if (depth < 1 || depth > 48) fatal_all("-e %s: depth must be 1..48", init);
    // llm.c's shapes: d12 = GPT-2 124M (C 768, 12 heads), d24 = 350M, d36 = 774M, d48 = 1558M; below 12, C = 64 N
    int C = depth <= 12 ? 64 * (int)depth : depth <= 24 ? 1024 : depth <= 36 ? 1280 : 1600;
    cfg->num_layers = (int)depth;
    cfg->channels = C;
    cfg->num_heads = C / 64;
    cfg->max_seq_len = 1024;
    cfg->vocab_size = vocab_size;
    cfg->padded_vocab_size = round_up(vocab_size, 128);
    return 1;
}

// the whole model's parameters (range [0, L) with embed and head): GPT-2's initialisation for a
// fresh dN (cfg already filled), else the -e model file's
static float* model_init(const TrainArgs* a, const GPT2Config* cfg, int fresh) {
    char err[1024];
    if (fresh) {
        GPT2Range all = {0, cfg->num_layers, 1, 1};
        size_t sizes[GPT2_NUM_PARAM_TENSORS];
        float* full = (float*)malloc_check(gpt2_param_sizes(cfg, &all, sizes) * sizeof(float));
        gpt2_init_full(cfg, full, (unsigned long long)a->seed);
        return full;
    }
    float* full;
    GPT2Config file_cfg;
    if (model_file_load(a->init, &file_cfg, &full, err, sizeof(err))) fatal_all("-e: %s", err);
    return full;
}

// ----------------------------------------------------------------------------------------------
// the partition: layers per stage, from a FLOP cost model (auto), evenly, or as given

// "1,1,0.5,1" -> P positive numbers (scaled by `unit`); empty -> NULL (the default)
static double* parse_per_rank(const char* flag, const char* list, int P, double unit) {
    if (!list[0]) return NULL;
    double* v = (double*)malloc_check(P * sizeof(double));
    const char* it = list;
    for (int i = 0; i < P; i++) {
        char* end;
        v[i] = strtod(it, &end);
        if (end == it || !(v[i] > 0) || (*end != ',' && *end != '\0') || (*end == '\0' && i != P - 1) || (*end == ',' && i == P - 1))
            fatal_all("--%s %s: expected %d positive numbers separated by commas, one per stage", flag, list, P);
        v[i] *= unit;
        it = end + 1;
    }
    return v;
}

static void partition_make(Partition* part, const TrainArgs* a, const GPT2Config* cfg, int P) {
    char err[512];
    if (P > cfg->num_layers) fatal_all("--stages %d exceeds the model's %d layers (each stage needs at least one)", P, cfg->num_layers);
    if (strcmp(a->partition, "auto") != 0) {
        if (partition_parse(part, a->partition, cfg->num_layers, P, err, sizeof(err))) fatal_all("%s", err);
    }
    // cost model: forward + backward = 3x the forward FLOPs; memory = 16 bytes per parameter
    // (weights, gradient, two AdamW moments) plus the activations of up to P micro-batches
    double BT = (double)a->B * a->T, C = cfg->channels, T = a->T, Vp = cfg->padded_vocab_size;
    double* layer_time = (double*)malloc_check(cfg->num_layers * sizeof(double));
    double* layer_mem = (double*)malloc_check(cfg->num_layers * sizeof(double));
    for (int l = 0; l < cfg->num_layers; l++) {
        layer_time[l] = 3.0 * (24.0 * BT * C * C + 4.0 * BT * T * C);
        layer_mem[l] = 16.0 * 12.0 * C * C + 4.0 * P * BT * (16.0 * C + cfg->num_heads * T);
    }
    PartitionCost cost;
    memset(&cost, 0, sizeof(cost));
    cost.L = cfg->num_layers;
    cost.P = P;
    cost.layer_time = layer_time;
    cost.first_time = 3.0 * BT * C;
    cost.last_time = 3.0 * 2.0 * BT * C * Vp;
    cost.layer_mem = layer_mem;
    cost.first_mem = 16.0 * Vp * C;
    cost.last_mem = 16.0 * Vp * C + 4.0 * 2 * BT * Vp;
    double* speed = parse_per_rank("rank-speed", a->rank_speed, P, 1.0);
    double* mem = parse_per_rank("rank-mem", a->rank_mem, P, 1024.0 * 1024.0 * 1024.0);
    cost.speed = speed;
    cost.mem_limit = mem;
    if (!strcmp(a->partition, "auto")) {
        if (partition_solve(part, &cost, err, sizeof(err))) fatal_all("--partition auto: %s", err);
    } else {
        partition_evaluate(part, &cost);
    }
    free(layer_time);
    free(layer_mem);
    free(speed);
    free(mem);
}

// ----------------------------------------------------------------------------------------------
// output: the start-up table, step lines, log.jsonl

static volatile sig_atomic_t g_stop_signal = 0;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

// 0, or -1 after saying why
static int ensure_out_dir(const char* dir) {
    char path[1100];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) // mkdir -p
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "train_tdpipe: -o %s: cannot create the output directory: %s\n", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "train_tdpipe: -o %s: not a directory\n", dir);
        return -1;
    }
    return 0;
}

static void format_seconds(double s, char* buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

typedef struct {
    const TrainArgs* a;
    FILE* log;
    int tokens_per_step;  // B * T * M * D
    double seconds_sum;   // over reported steps after the first
    int seconds_n;
    int P;
    double flops_per_step; // model FLOPs of one step (6 N per token + attention), for MFU
    double peak_flops;     // the GPU's bf16 peak; 0 on the CPU
} Reporter;

static void on_step(void* ctx, const StepReport* r) {
    Reporter* rep = (Reporter*)ctx;
    const TrainArgs* a = rep->a;
    double tok_s = rep->tokens_per_step / r->seconds;
    if (r->step > 1) {
        rep->seconds_sum += r->seconds;
        rep->seconds_n++;
    }
    char eta[32];
    format_seconds(rep->seconds_n ? rep->seconds_sum / rep->seconds_n * (a->steps - r->step) : 0.0, eta, sizeof(eta));
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s", r->step, a->steps, r->loss, r->norm, r->lr,
           r->seconds * 1e3, tok_s);
    if (rep->peak_flops > 0) printf(" | MFU %.1f%%", 100.0 * rep->flops_per_step / r->seconds / rep->peak_flops);
    if (rep->P > 1) printf(" | bubble %.1f%% | stale %d", 100.0 * r->bubble_all, r->staleness_max);
    printf(" | eta %s\n", eta);
    fprintf(rep->log, "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f, \"bubble\": %.4f, "
                      "\"staleness\": %d, \"bubble_per_stage\": [",
            r->step, r->loss, r->norm, r->lr, r->seconds * 1e3, tok_s, r->bubble_all, r->staleness_max);
    for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%.4f", s ? ", " : "", r->bubble[s]);
    fprintf(rep->log, "], \"staleness_per_stage\": [");
    for (int s = 0; s < r->P; s++) fprintf(rep->log, "%s%d", s ? ", " : "", r->staleness[s]);
    fprintf(rep->log, "]}\n");
    fflush(rep->log);
    fflush(stdout);
}

static void print_startup(const TrainArgs* a, const GPT2Config* cfg, const Comm* c, const Data* d, const Partition* part,
                          const char* sched, size_t params_total, int st_is_cuda, const Stage* st, const char* dp_where,
                          const char* msg_where) {
    printf("+----------------------+--------------------------------------------------------------\n");
    printf("| %-20s | %s\n", "model", a->init);
    printf("| %-20s | L %d, C %d, NH %d, V %d (Vp %d), maxT %d\n", "shape", cfg->num_layers, cfg->channels, cfg->num_heads,
           cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len);
    printf("| %-20s | %zu\n", "parameters", params_total);
    if (st && !st_is_cuda) { // rank 0's stage; the pipeline's extra slots, stashes and gradient ring are reported at the end
        double mib = 1.0 / (1024.0 * 1024.0);
        printf("| %-20s | weights + gradient + AdamW %.1f MiB; activations %.1f MiB per micro-batch in flight\n", "memory (stage 0)",
               16.0 * st->num_params * mib, 4.0 * (st->acts[0].num_floats + st->gacts[0].num_floats) * mib);
    }
    if (st_is_cuda) printf("| %-20s | cuda (bf16 compute, fp32 master weights), matmul %s; samples off on the GPU for now\n", "device", a->matmul);
    else printf("| %-20s | cpu (fp32), %d OpenMP thread(s) per rank\n", "device", omp_get_max_threads());
    printf("| %-20s | P %d stages x D %d replicas = %d rank(s); schedule %s", "pipeline", c->P, c->D, c->world_size, sched);
    if (!strcmp(sched, "tdpipe")) printf(", AEW W = %s", a->aew);
    printf("\n");
    if (c->P > 1) printf("| %-20s | activations and gradients between stages in %s\n", "pipeline messages", msg_where);
    if (c->D > 1) printf("| %-20s | gradients averaged over the %d replicas in %s\n", "data-parallel", c->D, dp_where);
    printf("| %-20s | B %d, T %d, M %d, D %d: %d tokens per step\n", "batch", a->B, a->T, a->grad_accum, c->D, a->B * a->T * a->grad_accum * c->D);
    if (d->builtin) {
        printf("| %-20s | built-in: order-1 Markov source, %d symbols, %d successors each\n", "data", MARKOV_ALPHABET, MARKOV_BRANCHING);
        printf("| %-20s | %.6f nats/token (exact entropy rate: no model can go lower)\n", "entropy floor", d->source.entropy_rate);
    } else {
        printf("| %-20s | %s (%lld tokens)\n", "train data", a->train_pattern, (long long)d->train.num_tokens);
        if (d->has_val) printf("| %-20s | %s (%lld tokens)\n", "val data", a->val_pattern, (long long)d->val.num_tokens);
    }
    printf("| %-20s | %d steps, lr %g, warmup %d, final frac %g, wd %g, clip %g\n", "optimisation", a->steps, a->lr, a->warmup,
           a->final_lr_frac, a->weight_decay, a->clip);
    printf("+----------------------+--------------------------------------------------------------\n");
    printf("partition (%s; predicted time in FLOPs of forward + backward, memory per stage):\n", a->partition);
    partition_print(stdout, part);
    fflush(stdout);
}

// ----------------------------------------------------------------------------------------------
// decoding samples

typedef struct {
    Tokenizer tok;
    int ready;
} Decoder;

static void decoder_init(Decoder* dec, const Data* d, const TrainArgs* a) {
    memset(dec, 0, sizeof(*dec));
    if (d->tokenizer == SHARD_TOKENIZER_BYTES) {
        dec->ready = tokenizer_init_bytes(&dec->tok) == 0;
        return;
    }
    char enc[1100], bpe[1100], err[1024];
    snprintf(enc, sizeof(enc), "%s/encoder.json", a->tokenizer_dir);
    snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", a->tokenizer_dir);
    if (tokenizer_init_gpt2(&dec->tok, enc, bpe, err, sizeof(err)) == 0) dec->ready = 1;
    else fprintf(stderr, "note: samples print token ids: %s (see --tokenizer-dir)\n", err);
}

static void print_sample(const Decoder* dec, const char* kind, const int* ids, int n) {
    printf("sample (%s): ", kind);
    for (int i = 0; i < n; i++) {
        if (!dec->ready) {
            printf("%d ", ids[i]);
            continue;
        }
        size_t len;
        const uint8_t* bytes = tokenizer_decode(&dec->tok, ids[i], &len);
        for (size_t j = 0; j < len; j++) putchar(bytes[j] == '\n' ? ' ' : bytes[j]); // one sample, one line
    }
    printf("\n");
}

// ----------------------------------------------------------------------------------------------
// checkpoints: the whole model's layout, so a run may resume with another pipeline shape

#define CKPT_CONFIG_INTS 16
// byte shuffle + Huffman-only deflate: the smallest and fastest of the modes measured on a trained
// 124M checkpoint (README, make bench-checkpoint)
#define CKPT_ZLIB_LEVEL CKPT_LEVEL_HUFFMAN

// world rank 0 writes; every rank learns whether it worked
static void checkpoint_save(const TrainArgs* a, Pipeline* pl, int step, const Data* d, size_t n_full) {
    char err[1024] = "", path[1200] = "";
    Stage* s = pl->stage;
    float* full = pl->comm->world_rank == 0 ? (float*)malloc_check(n_full * sizeof(float)) : NULL;
    CkptWriter* w = NULL;
    int failed = 0;
    if (pl->comm->world_rank == 0) {
        w = ckpt_writer_open(a->out_dir, step, CKPT_ZLIB_LEVEL, 1, err, sizeof(err));
        int32_t config[CKPT_CONFIG_INTS] = {0};
        config[0] = s->cfg.max_seq_len; config[1] = s->cfg.vocab_size; config[2] = s->cfg.num_layers;
        config[3] = s->cfg.num_heads; config[4] = s->cfg.channels; config[5] = s->cfg.padded_vocab_size;
        config[6] = a->B; config[7] = a->T; config[8] = a->grad_accum * pl->comm->D; // micro-batches per step, all replicas
        int64_t step64 = step;
        uint64_t seed = (uint64_t)a->seed; // every random stream (data order, sampling) derives from it and the step
        DataLoaderState dls;
        dataloader_get_state(&d->train, &dls);
        failed = !w || ckpt_writer_add(w, "config", config, sizeof(config), 4, err, sizeof(err)) ||
                 ckpt_writer_add(w, "step", &step64, sizeof(step64), 8, err, sizeof(err)) ||
                 ckpt_writer_add(w, "rng", &seed, sizeof(seed), 8, err, sizeof(err)) ||
                 ckpt_writer_add(w, "dataloader", &dls, sizeof(dls), 8, err, sizeof(err));
    }
    const char* names[3] = {"params", "adam_m", "adam_v"};
    for (int which = 0; which < 3; which++) {
        pipeline_gather(pl, which, full); // collective: every rank takes part even after a failure
        if (pl->comm->world_rank == 0 && !failed)
            failed = ckpt_writer_add(w, names[which], full, n_full * sizeof(float), 4, err, sizeof(err));
    }
    if (pl->comm->world_rank == 0) {
        if (!failed) failed = ckpt_writer_commit(w, path, sizeof(path), err, sizeof(err));
        else if (w) ckpt_writer_abort(w);
        if (failed) fprintf(stderr, "[rank 0] checkpoint at step %d not written: %s (earlier checkpoints are untouched)\n", step, err);
        else {
            if (ckpt_prune(a->out_dir, a->keep, err, sizeof(err))) fprintf(stderr, "warning: %s\n", err);
            printf("checkpoint: %s\n", path);
        }
    }
    free(full);
    if (comm_any(pl->comm, failed)) exit(1);
}

static const void* section_exact(const Ckpt* c, const char* path, const char* name, size_t bytes) {
    size_t got;
    const void* p = ckpt_section(c, name, &got);
    if (!p) fatal_all("%s: checkpoint has no section '%s'", path, name);
    if (got != bytes) fatal_all("%s: section '%s' holds %zu bytes, this run needs %zu (model or batch shape differs)", path, name, got, bytes);
    return p;
}

// every rank reads the newest valid checkpoint of -o and takes its slice; returns the step
static int checkpoint_resume(const TrainArgs* a, Stage* s, Data* d, int D, size_t n_full) {
    Ckpt c;
    char path[1200], note[4096], err[1024];
    int rc = ckpt_find_latest(a->out_dir, &c, path, sizeof(path), note, sizeof(note));
    if (note[0] && g_rank == 0) fprintf(stderr, "%s", note);
    if (rc == 1) fatal_all("-y 1: no checkpoint in %s to resume from", a->out_dir);
    if (rc < 0) fatal_all("-y 1: no usable checkpoint in %s", a->out_dir);
    const int32_t* config = (const int32_t*)section_exact(&c, path, "config", CKPT_CONFIG_INTS * 4);
    int want[9] = {s->cfg.max_seq_len, s->cfg.vocab_size, s->cfg.num_layers, s->cfg.num_heads, s->cfg.channels,
                   s->cfg.padded_vocab_size, a->B, a->T, a->grad_accum * D};
    const char* names[9] = {"maxT", "V", "L", "NH", "C", "Vp", "B (-b)", "T (-t)", "micro-batches per step (M x D)"};
    for (int i = 0; i < 9; i++)
        if (config[i] != want[i]) fatal_all("%s: checkpoint has %s = %d but this run has %d", path, names[i], config[i], want[i]);
    int step = (int)*(const int64_t*)section_exact(&c, path, "step", 8);
    section_exact(&c, path, "rng", 8);
    const DataLoaderState* dls = (const DataLoaderState*)section_exact(&c, path, "dataloader", sizeof(DataLoaderState));
    if (d->has_train && dataloader_set_state(&d->train, dls, err, sizeof(err))) fatal_all("%s: %s", path, err);
    gpt2_slice_params(&s->cfg, &s->range, (const float*)section_exact(&c, path, "params", n_full * 4), s->params);
    gpt2_slice_params(&s->cfg, &s->range, (const float*)section_exact(&c, path, "adam_m", n_full * 4), s->adam_m);
    gpt2_slice_params(&s->cfg, &s->range, (const float*)section_exact(&c, path, "adam_v", n_full * 4), s->adam_v);
    s->version = step;
    stage_from_host(s);
    ckpt_free(&c);
    if (g_rank == 0) printf("resumed from %s at step %d\n", path, step);
    return step;
}


// W for --aew: a number, or auto (measured later)
static int parse_aew(const char* s, int* W) {
    if (!strcmp(s, "auto")) {
        *W = -1;
        return 0;
    }
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 100000) return -1;
    *W = (int)v;
    return 0;
}

// --grad-cache N caps the gradient-cache ring: refuse a schedule whose stage s needs more slots
static void check_grad_cache(const TrainArgs* a, const Schedule* sch, int s) {
    int need;
    schedule_stage_limits(sch, s, NULL, NULL, &need);
    if (a->grad_cache > 0 && need > a->grad_cache)
        fatal_all("--grad-cache %d: the %s schedule with --aew %d needs %d gradient-cache slots per stage", a->grad_cache,
                  schedule_kind_name(sch->kind), sch->W, need);
}

static int is_boundary(int step, int every) { return every > 0 && step % every == 0; }

int main(int argc, char** argv) {
#ifdef TD_CUDA
    // every kernel loaded when the context is made (unless the user chose otherwise): lazy loading may
    // synchronise the context at a kernel's first launch, which inside a step could wait on an NCCL
    // receive posted ahead whose sender waits on this rank. Set before MPI_Init, which may touch CUDA.
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    // a hardware queue per stream (compute, up to six link directions, the replicas' average, NCCL's
    // own): with CUDA's default of 8, streams can share a queue and wait on each other for nothing
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
#endif
    Comm comm;
    comm_init(&comm, &argc, &argv);
    TrainArgs a;
    args_defaults(&a);
    args_parse(&a, argc, argv);
    char err[1024];
    if (strcmp(a.device, "auto") && strcmp(a.device, "cpu") && strcmp(a.device, "cuda") && strcmp(a.device, "cpu-staged"))
        fatal_all("--device %s: expected auto, cpu or cuda", a.device);
    int staged = !strcmp(a.device, "cpu-staged"); // the CPU behind the device-backend interface (tests)
    // every rank decides the same: one rank without a GPU while the others use theirs would leave
    // collectives half-entered (a hang), so the GPU is used only when every rank has one
    char why[256];
    int have_cuda = cuda_available_why(why, sizeof(why));
    int gpu_everywhere = !comm_any(&comm, !have_cuda);
    if (!strcmp(a.device, "cuda") && !gpu_everywhere)
        fatal_all("--device cuda: %s", have_cuda ? "not every rank has a usable GPU (rank 0 has one)" : why);
    int use_cuda = strcmp(a.device, "cpu") != 0 && !staged && gpu_everywhere;
    SchedKind kind;
    if (schedule_parse_kind(a.schedule, &kind)) fatal_all("--schedule %s: expected gpipe, 1f1b, zbh1 or tdpipe", a.schedule);
    int W;
    if (parse_aew(a.aew, &W)) fatal_all("--aew %s: expected a window size >= 0 or auto", a.aew);
    if (W != 0 && kind != SCHED_TDPIPE) fatal_all("--aew %s: only the tdpipe schedule has an asynchronous window", a.aew);
    if (comm_grid(&comm, a.stages, err, sizeof(err))) fatal_all("%s", err);
    int P = comm.P, D = comm.D, s = comm.stage;
    if (use_cuda && a.synthetic) {
        if (!strcmp(a.device, "cuda")) fatal_all("--device cuda: --synthetic-compute replaces the model by timed waits: use --device cpu");
        use_cuda = 0; // auto: synthetic compute needs no device
    }
#ifdef TD_CUDA
    if (use_cuda && !matmul_backend_parse(a.matmul, &g_matmul_backend)) fatal_all("--matmul %s: expected tdpipe, tdpipe-mma or cublaslt", a.matmul);
#endif
    if (strcmp(a.comm, "auto") != 0 && strcmp(a.comm, "mpi") != 0) fatal_all("--comm %s: expected auto or mpi", a.comm);
    if (!use_cuda && strcmp(a.matmul, "tdpipe") != 0) fatal_all("--matmul %s: only the CUDA backend has a choice of matmul", a.matmul);
    // ranks sharing this host share its cores
    if (comm.local_ranks > 1 && !getenv("OMP_NUM_THREADS")) {
        int threads = omp_get_num_procs() / comm.local_ranks;
        omp_set_num_threads(threads > 0 ? threads : 1);
    }

    // the model's vocabulary decides which tokens the data may hold; a fresh model takes it from the data
    GPT2Config cfg;
    memset(&cfg, 0, sizeof(cfg));
    int from_file = !fresh_config(a.init, 256, &cfg);
    if (from_file && model_file_read_config(a.init, &cfg, err, sizeof(err))) fatal_all("-e: %s", err);
    if (a.T > cfg.max_seq_len) fatal_all("-t %d exceeds the model's maximum sequence length %d", a.T, cfg.max_seq_len);
    Partition part;
    partition_make(&part, &a, &cfg, P);
    Schedule probe;
    ScheduleShape probe_shape = {kind, P, a.grad_accum, W > 0 ? W : 0, 0, 2};
    if (schedule_build(&probe, &probe_shape, err, sizeof(err))) fatal_all("%s", err);
    check_grad_cache(&a, &probe, comm.stage);
    if (a.print_schedule) {
        if (g_rank == 0) {
            printf("partition (%s):\n", a.partition);
            partition_print(stdout, &part);
            schedule_print(&probe, stdout);
        }
        schedule_free(&probe);
        comm_finalize(&comm);
        return 0;
    }
    schedule_free(&probe);

    GPT2Range range = {part.first[s], part.first[s + 1], s == 0, s == P - 1};
    GPT2Range* ranges = (GPT2Range*)malloc_check(P * sizeof(GPT2Range));
    for (int i = 0; i < P; i++) {
        ranges[i].l0 = part.first[i];
        ranges[i].l1 = part.first[i + 1];
        ranges[i].has_embed = i == 0;
        ranges[i].has_head = i == P - 1;
    }
    int needs_data = !a.synthetic && (range.has_embed || range.has_head);
    Data d;
    data_init(&d, &a, from_file ? cfg.vocab_size : 65536, needs_data, comm.replica, D);
    if (!from_file) fresh_config(a.init, d.tokenizer == SHARD_TOKENIZER_BYTES ? 256 : 50257, &cfg);

    GPT2Range all = {0, cfg.num_layers, 1, 1};
    size_t full_sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n_full = gpt2_param_sizes(&cfg, &all, full_sizes);
    Stage stage, *st = NULL;
    GPT2Acts sample_acts;
    if (!a.synthetic) {
        float* full = model_init(&a, &cfg, !from_file);
        if (use_cuda) cuda_stage_init(&stage, &cfg, &range, a.B, a.T, full, &comm);
        else if (staged) stage_init_staged(&stage, &cfg, &range, a.B, a.T, full);
        else {
            stage_init(&stage, &cfg, &range, a.B, a.T, 1);
            stage_load_params(&stage, full);
        }
        free(full);
        gpt2_acts_alloc(&sample_acts, &cfg, &range, 1, a.T);
        st = &stage;
    }
    Pipeline pl = {&comm, st, P, ranges, NULL};
    // a device stage's data-parallel average runs where its gradient lives when it can: NCCL between
    // GPUs (each replica on its own GPU), the private stage's memory for cpu-staged; else through
    // host memory over MPI (--comm mpi, or replicas sharing a GPU)
    void (*dp_fn)(void*, Stage*) = NULL;
    void* dp_ctx = NULL;
    const char* dp_where = "host memory, MPI";
    if (st && st->be && D > 1 && !strcmp(a.comm, "auto")) {
        if (staged) {
            dp_fn = stage_staged_dp_average, dp_ctx = &comm;
            dp_where = "the backend's memory, MPI (cpu-staged: where NCCL would run on GPUs)";
        } else if (cuda_dp_init(&comm, st, &dp_ctx)) {
            dp_fn = cuda_dp_average;
            dp_where = "GPU memory, NCCL";
        } else {
            dp_where = "host memory, MPI (the replicas share a GPU: NCCL cannot connect them)";
        }
    }

    // activations and gradients between stages stay where the model lives when they can: NCCL from GPU
    // to GPU (every stage of the pipeline on a GPU NCCL can reach), the private stage's memory over MPI
    // for cpu-staged; else host copies over MPI (--comm mpi, or stages sharing a GPU)
    const CommLink* link = NULL;
    CommLink staged_link;
    const char* msg_where = "host memory, MPI";
    if (st && st->be && P > 1 && !strcmp(a.comm, "auto")) {
        if (staged) {
            comm_mpi_link(&comm, &staged_link);
            link = &staged_link;
            msg_where = "the backend's memory, MPI (cpu-staged: where NCCL would run between GPUs)";
        } else if (cuda_link_init(&comm, &link)) {
            msg_where = "GPU memory, NCCL";
        } else {
            msg_where = "host memory, MPI (stages share a GPU: NCCL cannot connect them)";
        }
    }
    if (link) stage_use_device_msgs(st);

    // the tied embedding's shares move on the device too, unless some stage averages its replicas on the
    // host (replicas sharing a GPU): then the shares follow the average there. Decided by every rank
    // together: a first stage on the device and a last stage on the host would wait for each other.
    int host_average = st && st->be && D > 1 && !dp_fn;
    if (!comm_any(&comm, host_average) && link && (s == 0 || s == P - 1)) stage_use_device_tied(st);
    pl.link = link; // validation's messages travel as training's do
    FILE* log = NULL;
    int bad_out = 0;
    if (g_rank == 0 && !(bad_out = ensure_out_dir(a.out_dir) != 0) && !a.resume) {
        char log_path[1200]; // a resumed run appends, after the checkpoint said it is fine
        snprintf(log_path, sizeof(log_path), "%s/log.jsonl", a.out_dir);
        if (!(log = fopen(log_path, "w"))) {
            fprintf(stderr, "train_tdpipe: -o %s: cannot write %s: %s\n", a.out_dir, log_path, strerror(errno));
            bad_out = 1;
        }
    }
    if (comm_any(&comm, bad_out)) exit(1); // every rank waits for the output directory's verdict
    int start_step = a.resume && st ? checkpoint_resume(&a, st, &d, D, n_full) : 0;
    if (g_rank == 0) print_startup(&a, &cfg, &comm, &d, &part, a.schedule, n_full, use_cuda, st, dp_where, msg_where);
    Decoder dec;
    if (g_rank == 0) decoder_init(&dec, &d, &a);

    if (g_rank == 0 && a.resume) {
        char log_path[1200];
        snprintf(log_path, sizeof(log_path), "%s/log.jsonl", a.out_dir);
        if (!(log = fopen(log_path, "a"))) td_fatal("-o %s: cannot write %s: %s", a.out_dir, log_path, strerror(errno));
    }
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);

    Reporter rep;
    memset(&rep, 0, sizeof(rep));
    rep.a = &a;
    rep.log = log;
    rep.tokens_per_step = a.B * a.T * a.grad_accum * D;
    rep.P = P;
    // llm.c's estimate: 6 N FLOPs per token for the weights plus 6 L T C for attention (fwd + bwd)
    rep.flops_per_step = (6.0 * n_full + 6.0 * cfg.num_layers * a.T * cfg.channels) * rep.tokens_per_step;
    rep.peak_flops = use_cuda ? cuda_peak() * comm.world_size : 0.0; // one GPU per rank
    Trace trace;
    trace_init(&trace, a.trace_path[0] != 0);
    Executor ex;
    memset(&ex, 0, sizeof(ex));
    ex.comm = &comm;
    ex.stage = st;
    ex.data = needs_data ? &d.train : NULL;
    ex.B = a.B;
    ex.T = a.T;
    ex.C = cfg.channels;
    ex.L = cfg.num_layers;
    ex.opt.lr = a.lr;
    ex.opt.beta1 = 0.9f;
    ex.opt.beta2 = 0.95f;
    ex.opt.eps = 1e-8f;
    ex.opt.weight_decay = a.weight_decay;
    ex.total_steps = a.steps;
    ex.warmup = a.warmup;
    ex.final_lr_frac = a.final_lr_frac;
    ex.clip = a.clip;
    ex.jitter = a.jitter;
    ex.seed = (uint64_t)a.seed;
    if (a.synthetic) { // cost model: each stage's share of the layers, 2 ms per forward of a whole stage-width
        double per_layer = 2e-3 * P / cfg.num_layers;
        ex.syn_f = per_layer * (range.l1 - range.l0);
        ex.syn_b = 2.0 * ex.syn_f;
    }
    ex.link = link;
    ex.dp_average_device = dp_fn;
    ex.dp_ctx = dp_ctx;
    ex.trace = &trace;
    ex.on_step = on_step;
    ex.ctx = &rep;

    // chunks between consistency points: one step for the synchronous schedules (they flush anyway),
    // up to --consistency-every for tdpipe; --aew auto runs its first step synchronously to measure beta
    int step = start_step, W_now = W < 0 ? 0 : W;
    int synchronous = kind != SCHED_TDPIPE;
    while (step < a.steps) {
        int chunk = synchronous ? 1 : a.consistency_every - step % a.consistency_every;
        if (W < 0 && step == start_step) chunk = 1;
        for (int k = 1; k < chunk; k++) // end early at a validation, sample or checkpoint step
            if (is_boundary(step + k, a.val_every) || is_boundary(step + k, a.sample_every) || is_boundary(step + k, a.ckpt_every)) {
                chunk = k;
                break;
            }
        if (step + chunk > a.steps) chunk = a.steps - step;
        Schedule sch;
        ScheduleShape shape = {kind, P, a.grad_accum, W_now, step, chunk};
        if (schedule_build(&sch, &shape, err, sizeof(err))) fatal_all("%s", err);
        check_grad_cache(&a, &sch, s); // again: --aew auto has chosen its window by now
        executor_run(&ex, &sch, step);
        schedule_free(&sch);
        step += chunk;
        if (W < 0 && step == start_step + 1) { // --aew auto: W = ceil(P (1 - beta)) from the measured beta
            double cvs[1] = {executor_stage_cv(&ex)};
            comm_dp_average_double(&comm, cvs, 1);
            double* per_stage = (double*)calloc_check(P, sizeof(double)), *sum = (double*)calloc_check(P, sizeof(double));
            per_stage[s] = cvs[0];
            CommRequest r;
            memset(&r, 0, sizeof(r));
            comm_pipe_sum_start(&comm, per_stage, sum, P, &r);
            comm_wait(&comm, &r);
            double beta = 0.0;
            for (int i = 0; i < P; i++) beta += sum[i] / P;
            W_now = (int)ceil(P * (1.0 - beta));
            if (W_now < 0) W_now = 0;
            if (g_rank == 0) printf("aew auto: measured beta %.3f -> W = ceil(%d x (1 - beta)) = %d\n", beta, P, W_now);
            free(per_stage);
            free(sum);
        }
        int last = step == a.steps;
        int stopping = comm_any(&comm, g_stop_signal != 0);
        if (!st) {
            if (stopping) break;
            continue;
        }
        if (d.has_val && (is_boundary(step, a.val_every) || (last && a.val_every > 0))) {
            float val = pipeline_eval(&pl, needs_data ? &d.val : NULL, a.val_batches);
            if (g_rank == 0) {
                if (d.builtin) printf("val loss %.6f | gap to floor %.6f nats\n", val, val - d.source.entropy_rate);
                else printf("val loss %.6f\n", val);
                fprintf(log, "{\"step\": %d, \"val_loss\": %.9g%s", step, val, d.builtin ? "" : "}\n");
                if (d.builtin) fprintf(log, ", \"val_gap\": %.9g}\n", val - d.source.entropy_rate);
                fflush(log);
            }
        }
        if (!st->be && (is_boundary(step, a.sample_every) || (last && a.sample_every > 0))) {
            int* ids = (int*)calloc_check(a.gen_tokens, sizeof(int));
            int n = a.gen_tokens < a.T ? a.gen_tokens : a.T;
            pipeline_sample(&pl, &sample_acts, d.first_token, n, 1.0f, (uint64_t)a.seed ^ (uint64_t)step, ids);
            if (g_rank == 0) print_sample(&dec, "temperature 1", ids, n);
            pipeline_sample(&pl, &sample_acts, d.first_token, n, 0.0f, (uint64_t)a.seed ^ (uint64_t)step, ids);
            if (g_rank == 0) print_sample(&dec, "greedy", ids, n);
            free(ids);
        }
        if (last || stopping || is_boundary(step, a.ckpt_every)) {
            stage_to_host(st);
            char msg[256];
            if (!pipeline_check_consistency(&pl, msg, sizeof(msg))) fatal_all("%s", msg);
            if (g_rank == 0 && (P > 1 || D > 1)) printf("%s\n", msg);
            checkpoint_save(&a, &pl, step, &d, n_full);
        }
        fflush(stdout);
        if (stopping) {
            if (g_rank == 0) fprintf(stderr, "stopped by signal %d after step %d; resume with the same flags and -y 1\n", (int)g_stop_signal, step);
            comm_finalize(&comm);
            return 0;
        }
    }

    // the end: counts, measured stage times, trace, the model
    long expect = (long)(a.steps - start_step) * a.grad_accum;
    long counts[3] = {ex.count_f, ex.count_b, expect};
    long* all_counts = g_rank == 0 ? (long*)malloc_check(3 * sizeof(long) * comm.world_size) : NULL;
    comm_gather_to_root(&comm, counts, sizeof(counts), all_counts);
    // per stage: measured op times, and the memory its pipeline state took (activation slots,
    // weight stashes, gradient-cache ring), as the schedules made the executor reserve them
    double mib = 1.0 / (1024.0 * 1024.0);
    double times[8] = {ex.n_f ? ex.busy_f / ex.n_f : 0.0, ex.n_b ? ex.busy_b / ex.n_b : 0.0};
    if (st) { // a backend's buffers live on its device, in its own precision: counted, not sized (-1)
        times[2] = st->n_slots;
        times[3] = st->be ? -1 : st->n_slots * (double)st->acts[0].num_floats * 4 * mib + st->n_gacts * (double)st->gacts[0].num_floats * 4 * mib;
        times[4] = st->n_stash;
        times[5] = st->be ? -1 : st->n_stash * (double)st->num_params * 4 * mib;
        times[6] = st->n_grad_slots;
        times[7] = st->be ? -1 : st->n_grad_slots * (double)(st->num_params + (st->range.has_head ? st->sizes[0] : 0)) * 4 * mib;
    }
    double* all_times = g_rank == 0 ? (double*)malloc_check(sizeof(times) * comm.world_size) : NULL;
    comm_gather_to_root(&comm, times, sizeof(times), all_times);
    if (g_rank == 0) {
        int lost = 0;
        for (int r = 0; r < comm.world_size; r++) lost |= all_counts[3 * r] != expect || all_counts[3 * r + 1] != expect;
        printf("micro-batches: every rank ran %s forwards and backwards (expected %ld each)%s\n", lost ? "NOT" : "exactly", expect,
               lost ? ": LOST OR DUPLICATED" : "");
        printf("stage  layers    pred. share  meas. F ms  meas. B ms  act. slots      MiB  stashes      MiB  grad ring      MiB\n");
        double total_pred = 0.0;
        for (int i = 0; i < P; i++) total_pred += part.time[i];
        for (int i = 0; i < P; i++) {
            const double* t = all_times + 8 * i;
            char layers[32];
            snprintf(layers, sizeof(layers), "[%d,%d)", part.first[i], part.first[i + 1]);
            char mb[3][16]; // MiB columns, "-" for a device stage's
            for (int k = 0; k < 3; k++)
                if (t[3 + 2 * k] < 0) snprintf(mb[k], sizeof(mb[k]), "-");
                else snprintf(mb[k], sizeof(mb[k]), "%.1f", t[3 + 2 * k]);
            printf("%-6d %-9s %10.1f%%  %10.2f  %10.2f  %10.0f %8s  %7.0f %8s  %9.0f %8s\n", i, layers,
                   total_pred > 0 ? 100.0 * part.time[i] / total_pred : 100.0, t[0] * 1e3, t[1] * 1e3, t[2], mb[0], t[4], mb[1], t[6], mb[2]);
        }
        if (rep.seconds_n) printf("average step: %.1f ms (%d steps, first left out)\n", rep.seconds_sum / rep.seconds_n * 1e3, rep.seconds_n);
        if (lost) exit(1);
    }
    free(all_counts);
    free(all_times);
    if (trace.enabled) {
        size_t* tcounts = (size_t*)calloc_check(comm.world_size, sizeof(size_t));
        TraceEvent* events = (TraceEvent*)comm_gatherv_to_root(&comm, trace.events, trace.n * sizeof(TraceEvent), tcounts);
        if (g_rank == 0) {
            size_t n = 0;
            for (int r = 0; r < comm.world_size; r++) n += tcounts[r] / sizeof(TraceEvent);
            if (trace_write_json(a.trace_path, events, n, err, sizeof(err))) td_fatal("%s", err);
            printf("trace: %s (%zu ops)\n", a.trace_path, n);
        }
        free(events);
        free(tcounts);
    }
    if (st) {
        float* full = g_rank == 0 ? (float*)malloc_check(n_full * sizeof(float)) : NULL;
        stage_to_host(st);
        pipeline_gather(&pl, 0, full);
        if (g_rank == 0) {
            char model_path[1200];
            snprintf(model_path, sizeof(model_path), "%s/model.bin", a.out_dir);
            if (model_file_save(model_path, &cfg, full, err, sizeof(err))) td_fatal("%s", err);
            printf("model: %s (llm.c fp32 format)\n", model_path);
        }
        free(full);
        gpt2_acts_free(&sample_acts);
        if (staged) stage_free_staged(st);
        else if (use_cuda) cuda_stage_free(st);
        else stage_free(st);
    }
    if (use_cuda && link) cuda_link_free(link);
    if (dp_fn == cuda_dp_average) cuda_dp_free(dp_ctx);
    if (log) fclose(log);
    executor_free(&ex);
    trace_free(&trace);
    partition_free(&part);
    free(ranges);
    data_free(&d);
    if (g_rank == 0 && dec.ready) tokenizer_free(&dec.tok);
    comm_finalize(&comm);
    return 0;
}
