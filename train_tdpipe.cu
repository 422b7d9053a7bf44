// train_tdpipe: the training binary. flags -> data -> model -> stage -> training loop, with
// validation, samples, log.jsonl, checkpoints and resume. Compiled as C (no nvcc) or by nvcc.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <omp.h>
#include "llmc/builtin_data.h"
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/dataloader.h"
#include "llmc/model_file.h"
#include "llmc/sampler.h"
#include "llmc/shard.h"
#include "llmc/tokenizer.h"
#include "tdpipe/args.h"
#include "tdpipe/stage.h"

#define BUILTIN_TRAIN_TOKENS 2000000
#define BUILTIN_VAL_TOKENS 131072
#define BUILTIN_SOURCE_SEED 20241130ULL

// ----------------------------------------------------------------------------------------------
// data: the built-in Markov corpus or llm.c shards

typedef struct {
    DataLoader train, val;
    int has_val;
    int tokenizer;        // SHARD_TOKENIZER_*: decides V for fresh models and how samples decode
    int builtin;          // 1 when training on the built-in dataset
    MarkovSource source;  // the built-in dataset's source (its entropy floor)
} Data;

static void data_init(Data* d, const TrainArgs* a, int V_limit) {
    char err[1024];
    memset(d, 0, sizeof(*d));
    uint64_t seed = (uint64_t)a->seed;
    if (!a->train_pattern[0]) {
        d->builtin = 1;
        d->has_val = 1;
        d->tokenizer = SHARD_TOKENIZER_BYTES;
        markov_init(&d->source, BUILTIN_SOURCE_SEED);
        uint16_t* tokens = (uint16_t*)malloc_check(sizeof(uint16_t) * (BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS));
        markov_generate(&d->source, tokens, BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS, BUILTIN_SOURCE_SEED + 1);
        if (dataloader_init_memory(&d->train, tokens, BUILTIN_TRAIN_TOKENS, a->B, a->T, 0, 1, a->shuffle, seed, V_limit, err, sizeof(err)) ||
            dataloader_init_memory(&d->val, tokens + BUILTIN_TRAIN_TOKENS, BUILTIN_VAL_TOKENS, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
            td_fatal("built-in dataset: %s", err);
        free(tokens);
        return;
    }
    if (dataloader_init(&d->train, a->train_pattern, a->B, a->T, 0, 1, a->shuffle, seed, V_limit, err, sizeof(err)))
        td_fatal("-i %s: %s", a->train_pattern, err);
    d->tokenizer = d->train.tokenizer == SHARD_TOKENIZER_BYTES ? SHARD_TOKENIZER_BYTES : SHARD_TOKENIZER_GPT2;
    if (a->val_pattern[0]) {
        if (dataloader_init(&d->val, a->val_pattern, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
            td_fatal("-j %s: %s", a->val_pattern, err);
        d->has_val = 1;
    }
}

static void data_free(Data* d) {
    dataloader_free(&d->train);
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
    if (depth < 1 || depth > 48) td_fatal("-e %s: depth must be 1..48", init);
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

// the whole model's parameters (range [0, L) with embed and head), from -e
static float* model_init(const TrainArgs* a, int vocab_size, GPT2Config* cfg) {
    char err[1024];
    GPT2Range all;
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    if (fresh_config(a->init, vocab_size, cfg)) {
        all.l0 = 0; all.l1 = cfg->num_layers; all.has_embed = 1; all.has_head = 1;
        float* full = (float*)malloc_check(gpt2_param_sizes(cfg, &all, sizes) * sizeof(float));
        gpt2_init_full(cfg, full, (unsigned long long)a->seed);
        return full;
    }
    float* full;
    if (model_file_load(a->init, cfg, &full, err, sizeof(err))) td_fatal("-e: %s", err);
    return full;
}

// ----------------------------------------------------------------------------------------------
// output: the start-up table, step lines, log.jsonl

static volatile sig_atomic_t g_stop_signal = 0;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

static void ensure_out_dir(const char* dir) {
    char path[1100];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) // mkdir -p
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) td_fatal("-o %s: cannot create the output directory: %s", dir, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) td_fatal("-o %s: not a directory", dir);
}

static void format_seconds(double s, char* buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

static void print_startup(const TrainArgs* a, const GPT2Config* cfg, const Stage* s, const Data* d) {
    double mib = 1.0 / (1024.0 * 1024.0);
    size_t act_floats = 0;
    for (int i = 0; i < s->n_slots; i++) act_floats += s->acts[i].num_floats;
    printf("+----------------------+--------------------------------------------------+\n");
    printf("| %-20s | %-48s |\n", "model", a->init);
    printf("| %-20s | L %d, C %d, NH %d, V %d (Vp %d), maxT %d%*s |\n", "shape", cfg->num_layers, cfg->channels, cfg->num_heads,
           cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, 0, "");
    printf("| %-20s | %-48zu |\n", "parameters", s->num_params);
    printf("| %-20s | %-48s |\n", "device", "cpu (fp32)");
    printf("| %-20s | %d OpenMP threads%*s |\n", "threads", omp_get_max_threads(), 32, "");
    printf("| %-20s | B %d, T %d, M %d: %d tokens per step%*s |\n", "batch", a->B, a->T, a->grad_accum, a->B * a->T * a->grad_accum, 10, "");
    printf("| %-20s | weights+grads+AdamW %.1f MiB, activations %.1f MiB |\n", "memory", 4.0 * s->num_params * 4 * mib,
           (act_floats + s->gacts[0].num_floats) * 4.0 * mib);
    if (d->builtin) {
        printf("| %-20s | built-in: order-1 Markov source, %d symbols, %d successors each |\n", "data", MARKOV_ALPHABET, MARKOV_BRANCHING);
        printf("| %-20s | %.6f nats/token (exact entropy rate: no model can go lower) |\n", "entropy floor", d->source.entropy_rate);
    } else {
        printf("| %-20s | %lld tokens in %d shard(s) (%s)\n", "train data", (long long)d->train.num_tokens, d->train.num_shards, a->train_pattern);
        if (d->has_val) printf("| %-20s | %lld tokens (%s)\n", "val data", (long long)d->val.num_tokens, a->val_pattern);
    }
    printf("| %-20s | %d steps, lr %g, warmup %d, final frac %g, wd %g, clip %g\n", "schedule", a->steps, a->lr, a->warmup,
           a->final_lr_frac, a->weight_decay, a->clip);
    printf("+----------------------+--------------------------------------------------+\n");
    fflush(stdout);
}

// ----------------------------------------------------------------------------------------------
// evaluation and sampling (P = 1)

static float evaluate(Stage* s, DataLoader* val, int batches) {
    GPT2Acts* a = &s->acts[0];
    dataloader_reset(val);
    double total = 0.0;
    for (int i = 0; i < batches; i++) {
        if (dataloader_next(val, a->inputs, a->targets)) td_fatal("validation data: %s", val->err);
        total += stage_forward(s, 0);
    }
    return (float)(total / batches);
}

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

static void print_token(const Decoder* dec, int id) {
    if (!dec->ready) {
        printf("%d ", id);
        return;
    }
    size_t len;
    const uint8_t* bytes = tokenizer_decode(&dec->tok, id, &len);
    for (size_t i = 0; i < len; i++) putchar(bytes[i] == '\n' ? ' ' : bytes[i]); // one sample, one line
}

// continues from the first token of the validation (or train) data, one token at a time
static void sample(Stage* s, GPT2Acts* sa, const Decoder* dec, int first_token, int n, float temperature, Rng* rng) {
    int T = sa->T, V = s->cfg.vocab_size, Vp = s->cfg.padded_vocab_size;
    for (int i = 0; i < T; i++) sa->inputs[i] = first_token;
    printf("sample (%s): ", temperature > 0 ? "temperature 1" : "greedy");
    print_token(dec, first_token);
    for (int t = 1; t < n && t < T; t++) {
        gpt2_forward(&s->cfg, &s->range, &s->p, sa, 0);
        int next = sample_token(sa->probs + (size_t)(t - 1) * Vp, V, temperature, rng);
        sa->inputs[t] = next;
        print_token(dec, next);
    }
    printf("\n");
}

// ----------------------------------------------------------------------------------------------
// checkpoints: the whole model's layout, so a run may resume with another pipeline shape

#define CKPT_CONFIG_INTS 16

static void checkpoint_save(const TrainArgs* a, const Stage* s, int step, const Data* d, const Rng* rng) {
    char err[1024], path[1200];
    CkptWriter* w = ckpt_writer_open(a->out_dir, step, 6, 1, err, sizeof(err));
    int32_t config[CKPT_CONFIG_INTS] = {0};
    config[0] = s->cfg.max_seq_len; config[1] = s->cfg.vocab_size; config[2] = s->cfg.num_layers;
    config[3] = s->cfg.num_heads; config[4] = s->cfg.channels; config[5] = s->cfg.padded_vocab_size;
    config[6] = a->B; config[7] = a->T; config[8] = a->grad_accum;
    int64_t step64 = step;
    DataLoaderState dls;
    dataloader_get_state(&d->train, &dls);
    if (!w || ckpt_writer_add(w, "config", config, sizeof(config), 4, err, sizeof(err)) ||
        ckpt_writer_add(w, "step", &step64, sizeof(step64), 8, err, sizeof(err)) ||
        ckpt_writer_add(w, "rng", &rng->state, sizeof(rng->state), 8, err, sizeof(err)) ||
        ckpt_writer_add(w, "dataloader", &dls, sizeof(dls), 8, err, sizeof(err)) ||
        ckpt_writer_add(w, "params", s->params, s->num_params * sizeof(float), 4, err, sizeof(err)) ||
        ckpt_writer_add(w, "adam_m", s->adam_m, s->num_params * sizeof(float), 4, err, sizeof(err)) ||
        ckpt_writer_add(w, "adam_v", s->adam_v, s->num_params * sizeof(float), 4, err, sizeof(err)) ||
        ckpt_writer_commit(w, path, sizeof(path), err, sizeof(err))) {
        if (w) ckpt_writer_abort(w);
        td_fatal("checkpoint at step %d not written: %s (earlier checkpoints are untouched)", step, err);
    }
    if (ckpt_prune(a->out_dir, a->keep, err, sizeof(err))) fprintf(stderr, "warning: %s\n", err);
    printf("checkpoint: %s\n", path);
}

static const void* section_exact(const Ckpt* c, const char* path, const char* name, size_t bytes) {
    size_t got;
    const void* p = ckpt_section(c, name, &got);
    if (!p) td_fatal("%s: checkpoint has no section '%s'", path, name);
    if (got != bytes) td_fatal("%s: section '%s' holds %zu bytes, this run needs %zu (model or batch shape differs)", path, name, got, bytes);
    return p;
}

// restores state from the newest valid checkpoint of -o; returns the step to continue from
static int checkpoint_resume(const TrainArgs* a, Stage* s, Data* d, Rng* rng) {
    Ckpt c;
    char path[1200], note[4096], err[1024];
    int rc = ckpt_find_latest(a->out_dir, &c, path, sizeof(path), note, sizeof(note));
    if (note[0]) fprintf(stderr, "%s", note);
    if (rc == 1) td_fatal("-y 1: no checkpoint in %s to resume from", a->out_dir);
    if (rc < 0) td_fatal("-y 1: no usable checkpoint in %s", a->out_dir);
    const int32_t* config = (const int32_t*)section_exact(&c, path, "config", CKPT_CONFIG_INTS * 4);
    int want[9] = {s->cfg.max_seq_len, s->cfg.vocab_size, s->cfg.num_layers, s->cfg.num_heads, s->cfg.channels,
                   s->cfg.padded_vocab_size, a->B, a->T, a->grad_accum};
    const char* names[9] = {"maxT", "V", "L", "NH", "C", "Vp", "B (-b)", "T (-t)", "M (--grad-accum)"};
    for (int i = 0; i < 9; i++)
        if (config[i] != want[i]) td_fatal("%s: checkpoint has %s = %d but this run has %d", path, names[i], config[i], want[i]);
    int step = (int)*(const int64_t*)section_exact(&c, path, "step", 8);
    rng->state = *(const uint64_t*)section_exact(&c, path, "rng", 8);
    const DataLoaderState* dls = (const DataLoaderState*)section_exact(&c, path, "dataloader", sizeof(DataLoaderState));
    if (dataloader_set_state(&d->train, dls, err, sizeof(err))) td_fatal("%s: %s", path, err);
    memcpy(s->params, section_exact(&c, path, "params", s->num_params * 4), s->num_params * 4);
    memcpy(s->adam_m, section_exact(&c, path, "adam_m", s->num_params * 4), s->num_params * 4);
    memcpy(s->adam_v, section_exact(&c, path, "adam_v", s->num_params * 4), s->num_params * 4);
    ckpt_free(&c);
    printf("resumed from %s at step %d\n", path, step);
    return step;
}

// ----------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    TrainArgs a;
    args_defaults(&a);
    args_parse(&a, argc, argv);
    if (strcmp(a.device, "auto") && strcmp(a.device, "cpu") && strcmp(a.device, "cuda"))
        td_fatal("--device %s: expected auto, cpu or cuda", a.device);
    if (!strcmp(a.device, "cuda")) td_fatal("--device cuda: this build has no CUDA backend yet; use --device cpu");

    // the model's vocabulary decides which tokens the data may hold; a fresh model takes it from the data
    GPT2Config cfg;
    int from_file = !fresh_config(a.init, 256, &cfg);
    char err[1024];
    if (from_file && model_file_read_config(a.init, &cfg, err, sizeof(err))) td_fatal("-e: %s", err);
    int V_limit = from_file ? cfg.vocab_size : 65536;
    Data d;
    data_init(&d, &a, V_limit);
    int vocab = d.tokenizer == SHARD_TOKENIZER_BYTES ? 256 : 50257;
    float* full = model_init(&a, vocab, &cfg);
    if (a.T > cfg.max_seq_len) td_fatal("-t %d exceeds the model's maximum sequence length %d", a.T, cfg.max_seq_len);
    if (!from_file && d.train.num_tokens > 0 && !d.builtin && d.train.tokenizer == SHARD_TOKENIZER_BYTES && vocab != 256)
        td_fatal("internal: vocabulary mismatch");

    GPT2Range all = {0, cfg.num_layers, 1, 1};
    Stage s;
    stage_init(&s, &cfg, &all, a.B, a.T, 1);
    stage_load_params(&s, full);
    free(full);
    GPT2Acts sample_acts;
    gpt2_acts_alloc(&sample_acts, &cfg, &all, 1, a.T);

    ensure_out_dir(a.out_dir);
    Rng rng;
    rng_init(&rng, (uint64_t)a.seed ^ 0x5A4D504CULL);
    int start_step = a.resume ? checkpoint_resume(&a, &s, &d, &rng) : 0;
    print_startup(&a, &cfg, &s, &d);
    Decoder dec;
    decoder_init(&dec, &d, &a);

    char log_path[1200];
    snprintf(log_path, sizeof(log_path), "%s/log.jsonl", a.out_dir);
    FILE* log = fopen(log_path, a.resume ? "a" : "w");
    if (!log) td_fatal("-o %s: cannot write %s: %s", a.out_dir, log_path, strerror(errno));
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);

    AdamWConfig opt;
    opt.lr = a.lr; opt.beta1 = 0.9f; opt.beta2 = 0.95f; opt.eps = 1e-8f; opt.weight_decay = a.weight_decay;
    int M = a.grad_accum, L = cfg.num_layers;
    double* units = (double*)calloc_check(L + 2, sizeof(double));
    float dloss = 1.0f / (float)(a.B * a.T * M);
    double train_seconds = 0.0;
    int steps_timed = 0;
    GPT2Acts* act = &s.acts[0];
    for (int step = start_step; step < a.steps; step++) {
        double t0 = now_seconds();
        double loss_sum = 0.0;
        for (int mb = 0; mb < M; mb++) {
            if (dataloader_next(&d.train, act->inputs, act->targets)) td_fatal("training data: %s", d.train.err);
            loss_sum += stage_forward(&s, 0);
            stage_backward(&s, 0, NULL, dloss);
        }
        stage_tie_embedding_local(&s);
        stage_grad_unit_sumsq(&s, units);
        float norm = grad_norm_from_units(units, L + 2);
        float scale = (a.clip > 0 && norm > a.clip) ? a.clip / norm : 1.0f;
        float lr = lr_schedule(step, a.steps, a.warmup, a.lr, a.final_lr_frac);
        stage_update(&s, &opt, lr, step + 1, scale);
        stage_zero_grad(&s);
        float loss = (float)(loss_sum / M);
        double dt = now_seconds() - t0;
        if (step > start_step) { // the first step warms caches: left out of the averages
            train_seconds += dt;
            steps_timed++;
        }
        double tok_s = a.B * a.T * M / dt;
        char eta[32];
        format_seconds(steps_timed ? train_seconds / steps_timed * (a.steps - step - 1) : 0.0, eta, sizeof(eta));
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s | eta %s\n", step + 1, a.steps, loss, norm, lr,
               dt * 1e3, tok_s, eta);
        if (!isfinite(loss)) td_fatal("step %d: loss is %f: training diverged (lower -l, or raise --clip)", step + 1, loss);
        fprintf(log, "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, \"ms\": %.3f, \"tok_per_s\": %.1f",
                step + 1, loss, norm, lr, dt * 1e3, tok_s);
        int last = step + 1 == a.steps;
        if (d.has_val && a.val_every > 0 && ((step + 1) % a.val_every == 0 || last)) {
            float val = evaluate(&s, &d.val, a.val_batches);
            if (d.builtin) {
                double floor = d.source.entropy_rate;
                printf("val loss %.6f | gap to floor %.6f nats\n", val, val - floor);
                fprintf(log, ", \"val_loss\": %.9g, \"val_gap\": %.9g", val, val - floor);
            } else {
                printf("val loss %.6f\n", val);
                fprintf(log, ", \"val_loss\": %.9g", val);
            }
        }
        fprintf(log, "}\n");
        fflush(log);
        fflush(stdout);
        if (a.sample_every > 0 && ((step + 1) % a.sample_every == 0 || last)) {
            int first = d.has_val ? d.val.tokens[0] : d.train.tokens[0];
            sample(&s, &sample_acts, &dec, first, a.gen_tokens, 1.0f, &rng);
            sample(&s, &sample_acts, &dec, first, a.gen_tokens, 0.0f, &rng);
        }
        int stopping = g_stop_signal != 0;
        if (last || stopping || (a.ckpt_every > 0 && (step + 1) % a.ckpt_every == 0)) checkpoint_save(&a, &s, step + 1, &d, &rng);
        if (stopping) {
            fprintf(stderr, "stopped by signal %d after step %d; resume with the same flags and -y 1\n", (int)g_stop_signal, step + 1);
            fclose(log);
            return 0;
        }
    }
    if (steps_timed) printf("average step: %.1f ms (%d steps, first left out)\n", train_seconds / steps_timed * 1e3, steps_timed);
    char model_path[1200];
    snprintf(model_path, sizeof(model_path), "%s/model.bin", a.out_dir);
    full = (float*)malloc_check(gpt2_param_sizes(&cfg, &all, s.sizes) * sizeof(float));
    stage_store_params(&s, full);
    if (model_file_save(model_path, &cfg, full, err, sizeof(err))) td_fatal("%s", err);
    printf("model: %s (llm.c fp32 format)\n", model_path);
    free(full);
    fclose(log);
    free(units);
    gpt2_acts_free(&sample_acts);
    stage_free(&s);
    data_free(&d);
    if (dec.ready) tokenizer_free(&dec.tok);
    return 0;
}
