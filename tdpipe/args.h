// The trainer's settings: one table of flags (short and long name, type, default, range, help,
// group) drives parsing, range checks, --help, and the YAML config's keys.
#pragma once
#include <stdio.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    // data
    char train_pattern[1024]; // -i  glob of llm.c token shards; empty = the built-in dataset
    char val_pattern[1024];   // -j
    char tokenizer_dir[1024]; // --tokenizer-dir  encoder.json + vocab.bpe for decoding GPT-2 samples
    int shuffle;              // --shuffle
    // model
    char init[1024];          // -e  llm.c model file, or dN for a fresh model of depth N
    int B;                    // -b  micro-batch size
    int T;                    // -t  sequence length
    int recompute;            // --recompute 0|1  keep a micro-batch's stage input and output only; its backward runs its forward again
    // optimisation
    float lr;                 // -l
    int warmup;               // -u
    float final_lr_frac;      // -q
    float weight_decay;       // -c
    float clip;               // --clip  0 = off
    float beta1, beta2;       // --beta1 --beta2  AdamW's moment decay rates
    float eps;                // --eps  AdamW's epsilon
    int steps;                // -x
    int grad_accum;           // --micro-batches (--grad-accum)  micro-batches per step per replica (M)
    int global_batch;         // --global-batch N  sequences per step over every replica, B x M x D: M follows from it (0 = --micro-batches)
    long seed;                // --seed
    // checkpoints
    char out_dir[1024];       // -o
    int ckpt_every;           // -n  0 = only at the end
    int keep;                 // --keep
    int resume;               // -y
    // logging
    int val_every;            // -v
    int val_batches;          // --val-batches
    int sample_every;         // -s
    int gen_tokens;           // -g
    char config_path[1024];   // --config
    // pipeline
    int stages;               // --stages P (the rank count is P x D)
    char schedule[16];        // --schedule gpipe|1f1b|zbh1|tdpipe ("": 1f1b, or tdpipe when --aew is given)
    char aew[16];             // --aew W|auto  TD-Pipe's asynchronous execution window
    char aew_start_arg[16];   // --aew-start N|auto  as given (auto: --warmup's steps with --aew auto and a compensation, else 0)
    int aew_start;            // resolved from it: steps 1..N run synchronously (W = 0); the window opens after them
    char grad_cache[32];      // --grad-cache N|SIZE  gradient-cache slots (0 = what the schedule needs), or with a unit (4MB) the sync's bucket size
    char grad_quant[8];       // --grad-quant none|int8  how gradients travel between replicas
    int quant_block;          // --quant-block N  elements per int8 block (one fp32 scale each)
    int error_feedback;       // --error-feedback 0|1  int8: the rounding's residual into the next step
    char partition[256];      // --partition auto|model|uniform|4,4,3,1
    char placement[16];       // --placement stages|replicas|auto
    char rank_speed[256];     // --rank-speed 1,1,0.5,1  relative speed of each stage's rank (partition)
    char rank_mem[256];       // --rank-mem 8,8,4,8  GiB available to each stage's rank (partition)
    int consistency_every;    // --consistency-every K  every schedule checks its copies, TD-Pipe flushes at the latest, every K steps
    int print_schedule;       // --print-schedule  print each stage's op list and exit
    int print_config;         // --print-config  print the settings as a YAML config file and exit
    char trace_path[1024];    // --trace FILE  Chrome trace of every op
    float jitter;             // --jitter beta  extra op time with coefficient of variation beta
    int synthetic;            // --synthetic-compute  timed waits from a cost model instead of the model
    char device[16];          // --device auto|cpu|cuda
    char matmul[16];          // --matmul tdpipe|tdpipe-mma|cublaslt (CUDA)
    char comm[8];             // --comm auto|mpi: where a device stage's data-parallel average runs
    float comm_timeout;       // --comm-timeout S: seconds a rank may wait for another before every rank stops (0 = forever)
    // asynchrony: staleness compensation, drift monitor, gradient noise scale, guard and rollback
    char stale_comp[24];      // --stale-comp none, or predict, dcasgd, lr joined by +
    int predict_order;        // --predict-order 1|2  weight prediction's order
    int stale_tau;            // --stale-tau  compensate micro-batches staler than this
    float dc_lambda;          // --dc-lambda  DC-ASGD's lambda
    int drift_every;          // --drift-every N  the drift monitor every N steps (0 = off)
    float drift_min_cos;      // --drift-min-cos c  below it the window halves (0 = never)
    int gns;                  // --gns  estimate the gradient noise scale every step
    int lr_gns;               // --lr-gns  scale the learning rate by the measured noise scale
    float spike_z;            // --spike-z  a loss this many deviations above the running mean is a spike (0 = off)
    int max_rollbacks;        // --max-rollbacks  rollbacks in a row at W = 0 before the run stops
    int inject_nan;           // --inject-nan STEP  (tests) a NaN in stage 0's gradient at STEP's first attempt (0 = none)
    int inject_diverge;       // --inject-diverge STEP  (tests) one bit of the last rank's wte flipped before STEP's consistency check
    unsigned char given[128]; // (by the flag table's row) where it was set: GIVEN_FILE (--config), GIVEN_FLAG, or 0 (its default)
} TrainArgs;
enum { GIVEN_FILE = 1, GIVEN_FLAG = 2 }; // TrainArgs.given: a flag outranks the config file

void args_defaults(TrainArgs* a);
// parses argv into a (after --config FILE, if given, was applied, so flags override the file);
// prints a message naming the flag and exits 1 on a bad flag or value; exits 0 after --help
void args_parse(TrainArgs* a, int argc, char** argv);
void args_print_help(FILE* f);
// the settings in a as a YAML config file (--print-config): every flag that has a key, by section,
// strings double-quoted; args_load_config reads it back to the same settings
void args_print_yaml(const TrainArgs* a, FILE* f);
// --grad-cache: a count (gradient-cache slots: *slots, *bucket_bytes 0) or a size with a unit, B, KB,
// MB, GB (powers of 1024; KiB, MiB, GiB too): the gradient sync's bucket size (*bucket_bytes, *slots
// 0). 0, or -1 with a message naming the value.
int args_grad_cache(const char* s, int* slots, size_t* bucket_bytes, char* err, size_t errlen);
// --aew: a window for every stage, auto (*W = -1: measured later), or one per stage ("8,8,4,4": *W =
// -2); stage_W (P) gets each stage's. 0, or -1 with a message naming the value.
int args_aew(const char* s, int P, int* W, int* stage_W, char* err, size_t errlen);
// --aew-start: a step count, or auto: --warmup's steps for --aew auto (W -1) with a compensation, else 0.
// 0, or -1 with a message naming the value.
int args_aew_start(const char* s, int W, int compensated, int warmup, int* out, char* err, size_t errlen);
// applies a YAML config file's keys (pipeline.stages, ...: each setting's "section.key") to a; 0, or
// -1 with "path:line: ..." in err naming the key and the problem (an unknown key among them)
int args_load_config(TrainArgs* a, const char* path, char* err, size_t errlen);

// --inject-nan and --inject-diverge (tests) at a step where they would act: within -x, and for the
// divergence a consistency point with another copy to compare; world_size: the ranks of the run (0:
// not known, as for --print-schedule, which runs on one process for any grid)
int args_check_injections(const TrainArgs* a, int world_size, char* err, size_t errlen);

// --global-batch N: M = N / (B x D), refused where it does not divide or where --micro-batches was
// given another M at the same level (both flags, or both in the config file; a flag wins over the
// file either way); D: the run's replicas (1 where it has no ranks yet: --print-schedule)
int args_global_batch(TrainArgs* a, int D, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
