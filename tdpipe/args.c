// The trainer's flags: one table drives parsing, range checks, --help and the YAML keys (see args.h).
#include "args.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "llmc/common.h"

typedef enum { A_INT, A_LONG, A_FLOAT, A_STR, A_BOOL } ArgType; // A_BOOL: a flag without a value
typedef struct {
    const char* group; // data, model, optimisation, checkpoints, logging
    char short_name;   // 0 if none
    const char* long_name;
    const char* yaml;  // "section.key" in the config file
    ArgType type;
    size_t offset;
    size_t size;       // for strings: buffer size
    double min, max;   // inclusive range for numbers
    const char* def;   // default, as text
    const char* help;
} ArgSpec;

#define F(field) offsetof(TrainArgs, field), sizeof(((TrainArgs*)0)->field)
static const ArgSpec SPECS[] = {
    {"data", 'i', "train", "data.train", A_STR, F(train_pattern), 0, 0, "", "train token shards (glob); empty: the built-in Markov dataset"},
    {"data", 'j', "val", "data.val", A_STR, F(val_pattern), 0, 0, "", "validation token shards (glob)"},
    {"data", 0, "tokenizer-dir", "data.tokenizer_dir", A_STR, F(tokenizer_dir), 0, 0, "data/gpt2", "directory with GPT-2's encoder.json and vocab.bpe (to decode samples)"},
    {"data", 0, "shuffle", "data.shuffle", A_INT, F(shuffle), 0, 1, "0", "seeded shuffle of shards and windows (0/1)"},
    {"model", 'e', "init", "model.init", A_STR, F(init), 0, 0, "d2", "llm.c model file (fp32/bf16), or dN: a fresh GPT-2 of depth N"},
    {"model", 'b', "batch", "model.batch", A_INT, F(B), 1, 65536, "8", "micro-batch size B"},
    {"model", 't', "seq-len", "model.seq_len", A_INT, F(T), 1, 1048576, "64", "sequence length T"},
    {"model", 0, "recompute", "model.recompute", A_INT, F(recompute), 0, 1, "0", "activation recomputation: keep each micro-batch's stage input and output only, and run its forward again in its backward (a third more compute, the same bits; on a GPU not yet run: README)"},
    {"model", 0, "device", "model.device", A_STR, F(device), 0, 0, "auto", "auto | cpu | cuda (cpu-staged: the CPU behind the GPU's code path, for tests)"},
    {"model", 0, "matmul", "model.matmul", A_STR, F(matmul), 0, 0, "tdpipe", "CUDA matmul: tdpipe (hand-written) | tdpipe-mma (mma.sync only) | cublaslt"},
    {"optimisation", 'l', "lr", "optimizer.lr", A_FLOAT, F(lr), 0, 10, "3e-3", "peak learning rate (the default suits the small models; GPT-2 124M: 6e-4 to 3e-4)"},
    {"optimisation", 'u', "warmup", "optimizer.warmup", A_INT, F(warmup), 0, 1e9, "20", "linear warmup steps"},
    {"optimisation", 'q', "final-lr-frac", "optimizer.final_lr_frac", A_FLOAT, F(final_lr_frac), 0, 1, "0.1", "final learning rate as a fraction of -l (cosine decay)"},
    {"optimisation", 'c', "weight-decay", "optimizer.weight_decay", A_FLOAT, F(weight_decay), 0, 10, "0.0", "AdamW weight decay (2-D matrices only)"},
    {"optimisation", 0, "clip", "optimizer.clip", A_FLOAT, F(clip), 0, 1e9, "1.0", "global gradient-norm clipping threshold; 0 = off"},
    {"optimisation", 0, "beta1", "optimizer.beta1", A_FLOAT, F(beta1), 0, 0.999999, "0.9", "AdamW's first-moment decay rate"},
    {"optimisation", 0, "beta2", "optimizer.beta2", A_FLOAT, F(beta2), 0, 0.999999, "0.95", "AdamW's second-moment decay rate"},
    {"optimisation", 0, "eps", "optimizer.eps", A_FLOAT, F(eps), 1e-30, 1, "1e-8", "AdamW's epsilon (> 0: at 0, a weight whose gradient has always been 0 gets 0/0)"},
    {"optimisation", 'x', "steps", "optimizer.steps", A_INT, F(steps), 1, 1e9, "300", "training steps"},
    {"optimisation", 0, "micro-batches", "pipeline.micro_batch", A_INT, F(grad_accum), 1, 1e6, "1", "micro-batches per step and replica (gradient accumulation), M"},
    {"optimisation", 0, "grad-accum", NULL, A_INT, F(grad_accum), 1, 1e6, "1", "the same as --micro-batches (given both, they must agree)"},
    {"optimisation", 0, "global-batch", "pipeline.global_batch", A_INT, F(global_batch), 0, 1e9, "0", "sequences per step over every replica (B x M x D, as Megatron-LM's --global-batch-size): M follows from it; 0 = M from --micro-batches"},
    {"optimisation", 0, "seed", "optimizer.seed", A_LONG, F(seed), 0, 9.2e18, "1337", "seed for initialisation, data order and sampling"},
    {"checkpoints", 'o', "out", "checkpoint.out_dir", A_STR, F(out_dir), 0, 0, "out", "output directory: log.jsonl, checkpoints, model.bin"},
    {"checkpoints", 'n', "ckpt-every", "checkpoint.every", A_INT, F(ckpt_every), 0, 1e9, "0", "write a checkpoint every N steps (and at the end); 0 = at the end only"},
    {"checkpoints", 0, "keep", "checkpoint.keep", A_INT, F(keep), 1, 1e6, "3", "checkpoints kept in the output directory"},
    {"checkpoints", 'y', "resume", "checkpoint.resume", A_INT, F(resume), 0, 1, "0", "1: resume from the newest valid checkpoint in -o"},
    {"logging", 'v', "val-every", "logging.val_every", A_INT, F(val_every), 0, 1e9, "50", "validation loss every N steps (and at the end); 0 = never"},
    {"logging", 0, "val-batches", "logging.val_batches", A_INT, F(val_batches), 1, 1e6, "8", "micro-batches per validation"},
    {"logging", 's', "sample-every", "logging.sample_every", A_INT, F(sample_every), 0, 1e9, "100", "print a sample every N steps (one line: newlines as spaces, tabs kept, other control bytes and invalid UTF-8 as \\xNN); 0 = never"},
    {"logging", 'g', "gen-tokens", "logging.gen_tokens", A_INT, F(gen_tokens), 1, 1e6, "48", "tokens per sample"},
    {"logging", 0, "config", NULL, A_STR, F(config_path), 0, 0, "", "YAML config file; flags given on the command line override it"},
    {"logging", 0, "print-config", NULL, A_BOOL, F(print_config), 0, 1, "0", "print the settings (flags, --config's file, defaults) as a YAML config file and exit"},
    {"logging", 0, "trace", "logging.trace", A_STR, F(trace_path), 0, 0, "", "write a Chrome trace (Perfetto) of every pipeline op to FILE"},
    {"pipeline", 0, "stages", "pipeline.stages", A_INT, F(stages), 1, 4096, "1", "pipeline stages P (run P x D ranks under mpirun)"},
    {"pipeline", 0, "schedule", "pipeline.schedule", A_STR, F(schedule), 0, 0, "", "gpipe | 1f1b | zbh1 | tdpipe (default: 1f1b; tdpipe when --aew is a window other than 0, which is 1f1b)"},
    {"pipeline", 0, "aew", "pipeline.aew_window", A_STR, F(aew), 0, 0, "0", "TD-Pipe's window W in micro-batches: one for every stage (2), one per stage (8,8,4,4), or auto (the simulator's choice from the first step's measured times)"},
    {"pipeline", 0, "aew-start", "pipeline.aew_start", A_STR, F(aew_start_arg), 0, 0, "auto", "tdpipe: steps 1..N run synchronously (W = 0) and the window opens after them; auto: --warmup's steps with --aew auto and a --stale-comp, else 0"},
    {"pipeline", 0, "grad-cache", "pipeline.grad_cache", A_STR, F(grad_cache), 0, 0, "0", "a cap on the gradient-cache slots per stage (a schedule that needs more is refused; it never takes more than it needs; 0 = no cap), or with a unit (4MB) the gradient sync's bucket size"},
    {"pipeline", 0, "grad-quant", "pipeline.grad_quant", A_STR, F(grad_quant), 0, 0, "none", "how replicas average gradients: none (fp32) | int8 (blocks with an fp32 scale, two-shot, in buckets overlapped with backward)"},
    {"pipeline", 0, "quant-block", "pipeline.quant_block", A_INT, F(quant_block), 1, 1 << 20, "256", "elements per int8 block (one fp32 absmax scale each)"},
    {"pipeline", 0, "error-feedback", "pipeline.error_feedback", A_INT, F(error_feedback), 0, 1, "1", "int8: add what the rounding dropped to the next step's gradient (0/1)"},
    {"pipeline", 0, "partition", "pipeline.partition", A_STR, F(partition), 0, 0, "auto", "layers per stage: auto (DP over timed passes on each rank's device; the FLOP model under synthetic compute or with per-stage --aew windows that differ) | model (DP over the FLOP model) | uniform | 4,4,3,1"},
    {"pipeline", 0, "placement", "pipeline.placement", A_STR, F(placement), 0, 0, "auto", "which consecutive mpirun ranks (what a host holds) form what: stages (a replica's pipeline: rank d P + s) | replicas (a stage's replicas: rank s D + d) | auto (fewer bytes a step between hosts; stages on one host)"},
    {"pipeline", 0, "rank-speed", "pipeline.rank_speed", A_STR, F(rank_speed), 0, 0, "", "relative speed of each stage's rank for --partition auto or model, e.g. 1,1,0.5,1 (default: auto's timed passes; all 1 under the FLOP model)"},
    {"pipeline", 0, "rank-mem", "pipeline.rank_mem", A_STR, F(rank_mem), 0, 0, "", "GiB each stage's rank may use for --partition auto or model, e.g. 8,8,4,8 (default: unlimited)"},
    {"pipeline", 0, "comm", "pipeline.comm", A_STR, F(comm), 0, 0, "auto", "a device stage's messages and data-parallel average: auto (on the device: NCCL between GPUs it can connect) | mpi (through host memory)"},
    {"pipeline", 0, "comm-timeout", "pipeline.comm_timeout", A_FLOAT, F(comm_timeout), 0, 1e9, "600", "seconds a rank may wait for a message, collective or the pipeline sum before it names what it waits for and every rank exits; 0 = forever"},
    {"pipeline", 0, "consistency-every", "pipeline.consistency_every", A_INT, F(consistency_every), 1, 1e9, "50", "every K steps, check the replicas and the tied embedding's copies bitwise equal (any schedule); tdpipe's pipeline flushes there at the latest (where a signal stops it)"},
    {"pipeline", 0, "print-schedule", NULL, A_BOOL, F(print_schedule), 0, 1, "0", "print every stage's op list and what it holds (activation slots, weight stashes, gradient slots), and exit"},
    {"pipeline", 0, "jitter", "pipeline.jitter", A_FLOAT, F(jitter), 0, 10, "0", "stretch op times at random with coefficient of variation beta (seeded)"},
    {"pipeline", 0, "synthetic-compute", "pipeline.synthetic_compute", A_BOOL, F(synthetic), 0, 1, "0", "replace the model by timed waits from a cost model"},
    {"asynchrony", 0, "stale-comp", "pipeline.stale_comp", A_STR, F(stale_comp), 0, 0, "none", "staleness compensation of tdpipe's stale micro-batches: none, or predict (weight prediction), dcasgd, lr (LR by staleness) alone or joined by + (predict+lr)"},
    {"asynchrony", 0, "predict-order", "pipeline.predict_order", A_INT, F(predict_order), 1, 2, "2", "weight prediction: 1 along AdamW's current direction, 2 also along the change between the last two updates (README)"},
    {"asynchrony", 0, "stale-tau", "pipeline.stale_tau", A_INT, F(stale_tau), 0, 1e6, "0", "compensate micro-batches whose staleness exceeds this"},
    {"asynchrony", 0, "dc-lambda", "pipeline.dc_lambda", A_FLOAT, F(dc_lambda), 0, 1e12, "1e5", "DC-ASGD's lambda in g + lambda g*g*(w_now - w_used) (the best of 1e2..1e6 on the built-in data: README)"},
    {"asynchrony", 0, "drift-every", "pipeline.drift_every", A_INT, F(drift_every), 0, 1e9, "0", "every N steps compare the applied gradient with the exact synchronous one, per layer; 0 = off"},
    {"asynchrony", 0, "drift-min-cos", "pipeline.drift_min_cos", A_FLOAT, F(drift_min_cos), 0, 1, "0", "a drift cosine below this halves the window; 0 = never"},
    {"asynchrony", 0, "gns", "pipeline.gns", A_INT, F(gns), 0, 1, "0", "estimate the gradient noise scale B_simple every step (0/1)"},
    {"asynchrony", 0, "lr-gns", "pipeline.lr_gns", A_INT, F(lr_gns), 0, 1, "0", "scale the learning rate by the measured gradient noise (0/1; implies --gns 1)"},
    {"asynchrony", 0, "spike-z", "pipeline.spike_z", A_FLOAT, F(spike_z), 0, 1e6, "0", "roll back a step whose loss is this many standard deviations above the last 100 applied steps' mean (once 20 are in); 0 = off (a NaN or Inf loss or norm is rolled back always)"},
    {"asynchrony", 0, "max-rollbacks", "pipeline.max_rollbacks", A_INT, F(max_rollbacks), 1, 1e6, "3", "rollbacks in a row at W = 0; a step refused after them stops the run"},
    {"asynchrony", 0, "inject-nan", NULL, A_INT, F(inject_nan), 0, 1e9, "0", "for tests: a NaN in stage 0's gradient of this step (its first attempt); 0 = none"},
    {"asynchrony", 0, "inject-diverge", NULL, A_INT, F(inject_diverge), 0, 1e9, "0", "for tests: one bit of the last rank's wte flipped before this step's consistency check, which must fail; 0 = none"},
};
#undef F
#define NSPECS ((int)(sizeof(SPECS) / sizeof(SPECS[0])))
_Static_assert(sizeof(SPECS) / sizeof(SPECS[0]) <= sizeof(((TrainArgs*)0)->given), "TrainArgs.given has a byte for every flag");

static int set_value(TrainArgs* a, const ArgSpec* s, const char* value, const char* shown, char* err, size_t errlen) {
    char* p = (char*)a + s->offset;
    if (s->type == A_STR) {
        if (strlen(value) >= s->size) {
            snprintf(err, errlen, "%s: value too long (at most %zu characters)", shown, s->size - 1);
            return -1;
        }
        strcpy(p, value);
        return 0;
    }
    if (s->type == A_BOOL) {
        int v = !strcmp(value, "1") || !strcmp(value, "true") ? 1 : !strcmp(value, "0") || !strcmp(value, "false") ? 0 : -1;
        if (v < 0) {
            snprintf(err, errlen, "%s: '%s' is not a boolean (true/false/1/0)", shown, value);
            return -1;
        }
        *(int*)p = v;
        return 0;
    }
    char* end;
    errno = 0;
    double v = s->type == A_FLOAT ? strtod(value, &end) : (double)strtoll(value, &end, 10);
    if (end == value || *end != '\0' || isspace((unsigned char)value[0]) || errno == ERANGE || !isfinite(v)) { // (strtod skips leading blanks, not trailing: both refused)
        snprintf(err, errlen, "%s: '%s' is not a valid %s", shown, value, s->type == A_FLOAT ? "number" : "integer");
        return -1;
    }
    if (v < s->min || v > s->max) {
        snprintf(err, errlen, "%s: %s is out of range [%g, %g]", shown, value, s->min, s->max);
        return -1;
    }
    if (s->type == A_INT) *(int*)p = (int)v;
    else if (s->type == A_LONG) *(long*)p = strtol(value, NULL, 10);
    else *(float*)p = (float)v;
    return 0;
}

// a setting's value as a YAML scalar: numbers as the flag takes them, strings double-quoted with backslash, quote and control bytes escaped
static void print_yaml_value(FILE* f, const TrainArgs* a, const ArgSpec* s) {
    const char* p = (const char*)a + s->offset;
    if (s->type == A_INT) fprintf(f, "%d", *(const int*)p);
    else if (s->type == A_LONG) fprintf(f, "%ld", *(const long*)p);
    else if (s->type == A_FLOAT) { // the fewest digits that read back to the same float (9 always do)
        float v = *(const float*)p;
        char buf[32];
        for (int digits = 1; digits <= 9; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, v);
            if ((float)strtod(buf, NULL) == v) break;
        }
        if (v == floorf(v) && fabsf(v) >= 10.0f && fabsf(v) < 1e9f) snprintf(buf, sizeof buf, "%.0f", v); // 600, not 6e+02 (exact: a whole float)
        fputs(buf, f);
    }
    else if (s->type == A_BOOL) fputs(*(const int*)p ? "true" : "false", f);
    else {
        fputc('"', f);
        for (const unsigned char* c = (const unsigned char*)p; *c; c++) {
            if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
            else if (*c < 0x20 || *c == 0x7f) fprintf(f, "\\x%02x", *c);
            else fputc(*c, f);
        }
        fputc('"', f);
    }
}

// the length of a "section.key"'s section
static size_t yaml_section_len(const char* key) { return (size_t)(strchr(key, '.') - key); }
// 1 when spec s has a YAML key in the section of key, n its section's length
static int in_section(const ArgSpec* s, const char* key, size_t n) { return s->yaml && yaml_section_len(s->yaml) == n && !strncmp(s->yaml, key, n); }

void args_print_yaml(const TrainArgs* a, FILE* f) {
    fprintf(f, "# train_tdpipe's settings (--print-config): flags, --config's file and defaults; run them with --config FILE\n");
    for (int i = 0; i < NSPECS; i++) { // each section where its first key stands in the table, all its keys together
        const char* key = SPECS[i].yaml;
        if (!key) continue;
        size_t n = yaml_section_len(key);
        int printed = 0;
        for (int j = 0; j < i && !printed; j++) printed = in_section(&SPECS[j], key, n);
        if (printed) continue;
        fprintf(f, "%.*s:\n", (int)n, key);
        for (int j = i; j < NSPECS; j++) {
            if (!in_section(&SPECS[j], key, n)) continue;
            if (SPECS[j].offset == offsetof(TrainArgs, grad_accum) && a->global_batch) { // (M for this D: read back, it would refuse another D or B)
                fprintf(f, "  # %s: follows from global_batch, M = global_batch / (B x D)\n", SPECS[j].yaml + n + 1);
                continue;
            }
            fprintf(f, "  %s: ", SPECS[j].yaml + n + 1);
            print_yaml_value(f, a, &SPECS[j]);
            fputc('\n', f);
        }
    }
}

void args_defaults(TrainArgs* a) {
    memset(a, 0, sizeof(*a));
    char err[256];
    for (int i = 0; i < NSPECS; i++)
        if (set_value(a, &SPECS[i], SPECS[i].def, SPECS[i].long_name, err, sizeof(err))) td_fatal("bad default: %s", err);
}

// the config file's setter (ConfigSetFn): one "section.key" of the file onto the TrainArgs at a
static int set_yaml_key(void* a, const char* yaml_key, const char* value, char* err, size_t errlen) {
    for (int i = 0; i < NSPECS; i++)
        if (SPECS[i].yaml && !strcmp(SPECS[i].yaml, yaml_key)) {
            ((TrainArgs*)a)->given[i] = GIVEN_FILE;
            return set_value(a, &SPECS[i], value, yaml_key, err, errlen);
        }
    snprintf(err, errlen, "unknown key '%s'", yaml_key);
    return -1;
}

int args_load_config(TrainArgs* a, const char* path, char* err, size_t errlen) { return config_load_yaml(path, set_yaml_key, a, err, errlen); }

void args_print_help(FILE* f) {
    fprintf(f, "usage: train_tdpipe [flags]   (no flags: train a small GPT-2 on the built-in dataset)\n");
    const char* group = "";
    for (int i = 0; i < NSPECS; i++) {
        const ArgSpec* s = &SPECS[i];
        if (strcmp(group, s->group)) {
            group = s->group;
            fprintf(f, "\n%s:\n", group);
        }
        char names[64];
        if (s->short_name) snprintf(names, sizeof(names), "-%c, --%s", s->short_name, s->long_name);
        else snprintf(names, sizeof(names), "    --%s", s->long_name);
        if (strstr(s->help, "(default: ")) fprintf(f, "  %-26s %s\n", names, s->help); // says what its empty default means
        else fprintf(f, "  %-26s %s (default: %s)\n", names, s->help, s->def[0] ? s->def : "none");
    }
    fprintf(f, "\n  -h, --help                 this text\n");
}

int args_grad_cache(const char* s, int* slots, size_t* bucket_bytes, char* err, size_t errlen) {
    static const struct {
        const char* unit;
        double bytes;
    } UNITS[] = {{"B", 1}, {"KB", 1024}, {"KiB", 1024}, {"MB", 1048576}, {"MiB", 1048576}, {"GB", 1073741824}, {"GiB", 1073741824}};
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    *slots = 0;
    *bucket_bytes = 0;
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0)
        return td_error(err, errlen, "--grad-cache %s: expected a count of gradient-cache slots (0 to 1024) or a bucket size with a unit (4MB)", s);
    while (*end == ' ') end++;
    if (!*end) {
        if (v != floor(v) || v > 1024) return td_error(err, errlen, "--grad-cache %s: a slot count is a whole number from 0 to 1024", s);
        *slots = (int)v;
        return 0;
    }
    for (size_t i = 0; i < sizeof(UNITS) / sizeof(UNITS[0]); i++)
        if (!strcmp(end, UNITS[i].unit)) {
            double bytes = v * UNITS[i].bytes;
            if (bytes < 4 || bytes > 1099511627776.0)
                return td_error(err, errlen, "--grad-cache %s: a bucket holds at least one fp32 value (4 B) and at most 1 TiB", s);
            *bucket_bytes = (size_t)bytes;
            return 0;
        }
    return td_error(err, errlen, "--grad-cache %s: unknown unit '%s' (B, KB, MB, GB; KiB, MiB, GiB)", s, end);
}

int args_aew(const char* s, int P, int* W, int* stage_W, char* err, size_t errlen) {
    if (!strcmp(s, "auto")) {
        *W = -1;
        for (int i = 0; i < P; i++) stage_W[i] = 0;
        return 0;
    }
    const char* it = s;
    int n = 0;
    for (;;) {
        char* end;
        long v = strtol(it, &end, 10);
        if (end == it || v < 0 || v > 100000 || (*end != ',' && *end != '\0'))
            return td_error(err, errlen, "--aew %s: expected a window size >= 0, auto, or one window per stage (8,8,4,4)", s);
        if (n < P) stage_W[n] = (int)v;
        n++;
        if (*end == '\0') break;
        it = end + 1;
    }
    if (n == 1) {
        *W = stage_W[0];
        for (int i = 1; i < P; i++) stage_W[i] = *W;
        return 0;
    }
    if (n != P) return td_error(err, errlen, "--aew %s: %d windows for %d stages (--stages): give one per stage, or one for all", s, n, P);
    *W = -2;
    return 0;
}

// auto: --aew auto with a compensation opens its window after the learning rate's warm-up, where
// stale runs spike and where keeping it closed let two updates of staleness cost under 2% (README,
// TD-Pipe convergence); any other run opens it at step 1 (0)
int args_aew_start(const char* s, int W, int compensated, int warmup, int* out, char* err, size_t errlen) {
    if (!strcmp(s, "auto")) {
        *out = W == -1 && compensated ? warmup : 0;
        return 0;
    }
    char* end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0 || v > 1000000000)
        return td_error(err, errlen, "--aew-start %s: expected a number of steps >= 0, or auto", s);
    *out = (int)v;
    return 0;
}

int args_check_injections(const TrainArgs* a, int world_size, char* err, size_t errlen) {
    if (a->inject_nan > a->steps)
        return td_error(err, errlen, "--inject-nan %d: past the run's last step (-x %d), so nothing would be injected", a->inject_nan, a->steps);
    int t = a->inject_diverge;
    if (t == 0) return 0;
    if (t > a->steps)
        return td_error(err, errlen, "--inject-diverge %d: past the run's last step (-x %d), so nothing would be flipped", t, a->steps);
    if (world_size > 0 && world_size < 2) // (0: ranks not known, as for --print-schedule)
        return td_error(err, errlen, "--inject-diverge %d: one rank holds the only copy of the weights, so no check could see the flipped bit", t);
    int checked = t == a->steps || (a->ckpt_every > 0 && t % a->ckpt_every == 0) || (a->consistency_every > 0 && t % a->consistency_every == 0);
    if (!checked)
        return td_error(err, errlen, "--inject-diverge %d: the copies are not checked after step %d (checks: every --consistency-every %d, every -n %d, and -x %d)",
                        t, t, a->consistency_every, a->ckpt_every, a->steps);
    return 0;
}

// where the field of flag `long_name` was set (through any of its flags): GIVEN_FILE, GIVEN_FLAG, or 0 (its default)
static int args_given(const TrainArgs* a, const char* long_name) {
    size_t off = (size_t)-1;
    int from = 0;
    for (int i = 0; i < NSPECS; i++)
        if (!strcmp(SPECS[i].long_name, long_name)) off = SPECS[i].offset;
    for (int i = 0; i < NSPECS; i++)
        if (SPECS[i].offset == off && a->given[i] > from) from = a->given[i];
    return from;
}

// M from the global batch where it was given at least as near the command line as M itself (a flag
// wins over the config file, as everywhere); the two at one level must agree
int args_global_batch(TrainArgs* a, int D, char* err, size_t errlen) {
    int m_from = args_given(a, "micro-batches"), g_from = args_given(a, "global-batch");
    if (a->global_batch == 0 || m_from > g_from) {
        if (a->global_batch && g_rank == 0)
            fprintf(stderr, "note: --micro-batches %d (on the command line) overrides the config file's global_batch %d\n", a->grad_accum, a->global_batch);
        a->global_batch = 0;
        return 0;
    }
    long per = (long)a->B * D; // sequences in a step's micro-batch over the replicas
    if (a->global_batch % per)
        return td_error(err, errlen, "--global-batch %d: not a multiple of -b %d x %d replica(s) = %ld, the sequences of one micro-batch on every replica",
                        a->global_batch, a->B, D, per);
    long M = a->global_batch / per;
    if (M > 1000000) return td_error(err, errlen, "--global-batch %d: %ld micro-batches a step (-b %d, D %d), over the 1e6 --micro-batches takes", a->global_batch, M, a->B, D);
    if (m_from == g_from && a->grad_accum != M)
        return td_error(err, errlen, "--global-batch %d with -b %d and %d replica(s) makes M = %ld micro-batches a step, but --micro-batches says %d; give one of the two",
                        a->global_batch, a->B, D, M, a->grad_accum);
    a->grad_accum = (int)M;
    return 0;
}

static const ArgSpec* find_flag(const char* arg) {
    for (int i = 0; i < NSPECS; i++) {
        if (arg[0] == '-' && arg[1] == '-' && !strcmp(arg + 2, SPECS[i].long_name)) return &SPECS[i];
        if (arg[0] == '-' && arg[1] == SPECS[i].short_name && arg[1] && arg[2] == '\0') return &SPECS[i];
    }
    return NULL;
}

// every rank parses the same flags and fails the same way: rank 0 alone says why
static void args_fail(const char* fmt, ...) {
    if (g_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    exit(1);
}

void args_parse(TrainArgs* a, int argc, char** argv) {
    char err[1200];
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            if (g_rank == 0) args_print_help(stdout);
            exit(0);
        }
    // the config file first, so that flags override it
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (args_load_config(a, argv[i + 1], err, sizeof(err))) args_fail("train_tdpipe: --config %s", err);
        }
    // two flags for one field (--micro-batches and --grad-accum): given with two values, neither wins
    const char* value_of[NSPECS] = {0}; // (by row) the value the flag was last given here
    for (int i = 1; i < argc; i++) {
        const ArgSpec* s = find_flag(argv[i]);
        const ArgSpec* before = i > 1 ? find_flag(argv[i - 1]) : NULL;
        if (!s && argv[i][0] != '-' && before && before->type == A_BOOL) // (a YAML key takes true/false; a flag is the switch)
            args_fail("train_tdpipe: '%s' after --%s: the flag is a switch and takes no value (give it alone to turn it on)", argv[i], before->long_name);
        if (!s) args_fail("train_tdpipe: unknown flag '%s' (see --help)", argv[i]);
        char shown[64];
        if (s->short_name && argv[i][1] != '-') snprintf(shown, sizeof(shown), "-%c", s->short_name);
        else snprintf(shown, sizeof(shown), "--%s", s->long_name);
        a->given[s - SPECS] = GIVEN_FLAG;
        if (s->type == A_BOOL) {
            *(int*)((char*)a + s->offset) = 1;
            continue;
        }
        if (i + 1 >= argc) args_fail("train_tdpipe: %s needs a value", shown);
        if (argv[i + 1][0] == '-' && find_flag(argv[i + 1])) // `-o -v`: the value forgotten, the next flag taken for it
            args_fail("train_tdpipe: %s needs a value, but the flag %s follows it", shown, argv[i + 1]);
        char was[sizeof(TrainArgs)];
        memcpy(was, (char*)a + s->offset, s->size);
        if (set_value(a, s, argv[++i], shown, err, sizeof(err))) args_fail("train_tdpipe: %s", err);
        for (int k = 0; k < NSPECS; k++)
            if (&SPECS[k] != s && SPECS[k].offset == s->offset && value_of[k] && memcmp(was, (char*)a + s->offset, s->size))
                args_fail("train_tdpipe: --%s %s and --%s %s are one setting given two values; give one", SPECS[k].long_name, value_of[k],
                          s->long_name, argv[i]);
        value_of[s - SPECS] = argv[i];
    }
}
