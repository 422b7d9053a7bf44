// train_tdpipe: the training binary. main runs the phases in order: parse the flags, choose the
// device, lay the ranks out as the P x D grid and time the partition, make the stage and its links,
// open the outputs, build the executor, train (chunks of steps between consistency points:
// validation, samples, checkpoints), report. One process (P = D = 1) without mpirun; P x D ranks
// with it. Compiled as C, or by nvcc with the CUDA backend.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>
#include <omp.h>
#include "llmc/builtin_data.h"
#include "llmc/common.h"
#include "llmc/cuda_shapes.h"
#include "llmc/dataloader.h"
#include "llmc/model_file.h"
#include "llmc/shard.h"
#include "llmc/tokenizer.h"
#include "tdpipe/args.h"
#include "tdpipe/comm.h"
#include "tdpipe/outdir.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/dp_sync_cuda.cuh"
#include "tdpipe/drift.h"
#include "tdpipe/executor.h"
#include "tdpipe/fatal.h"
#include "tdpipe/host_threads.h"
#include "tdpipe/partition.h"
#include "tdpipe/layer_costs.h"
#include "tdpipe/pipeline.h"
#include "tdpipe/report.h"
#include "tdpipe/run_checkpoint.h"
#include "tdpipe/run_data.h"
#include "tdpipe/run_memory.h"
#include "tdpipe/run_model.h"
#include "tdpipe/schedule.h"
#include "tdpipe/simulator.h"
#include "tdpipe/staleness.h"
#include "tdpipe/stop_request.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cuda.cuh"
#include "tdpipe/stage_staged.h"
#include "tdpipe/trace.h"

// ----------------------------------------------------------------------------------------------
// the run: what the phases make, handed from one to the next

typedef struct {
    TrainArgs a;
    Comm comm;
    SchedKind kind;
    int W;                  // --aew: W >= 0, -1 auto (measured after the first step), -2 a window per stage
    int* stage_W;           // (P) --aew's windows per stage (W on every stage unless a list was given)
    StaleComp comp;         // staleness compensation
    GPT2Config cfg;
    int from_file;          // -e names a model file (else a fresh dN)
    Partition part;
    Placement placement;    // which consecutive launch ranks hold what (tdpipe/placement.h)
    int placement_auto;     // 1: chosen by the bytes between hosts, which place_cross holds
    double place_cross[2];  // bytes a step between hosts under each layout (indexed by Placement)
    LayerCosts* profiled;   // (P) each stage's timed passes (--partition auto; NULL: the FLOP model)
    GPT2Range* ranges;      // (P) every stage's layers
    const StageDevice* device;
    int use_cuda, synthetic;
    RunData data;
    Stage stage;
    CommLink mpi_link;      // MPI between host buffers: the link unless a device keeps its messages
    const CommLink* link;
    const CommLink* tied_link; // the tied shares': link where they stay on the device, else mpi_link (host buffers)
    StageDpAverage dp;      // the replicas' blocking fp32 average (--grad-quant none without buckets)
    int grad_cache_slots;   // --grad-cache N (0: what the schedule needs)
    DpSyncConfig sync_cfg;  // --grad-quant, --quant-block, --error-feedback, --grad-cache SIZE
    int use_sync;           // 1: the replicas average through the two-shot sync (tdpipe/dp_sync.h)
    int device_sync;        // 1: that sync runs in GPU memory over NCCL (tr->dsync), else in host memory (tr->sync, overlapped with backward)
    DpSync sync;
    DpSyncCuda* dsync;
    const char* msg_where;  // where pipeline messages travel, in words (the start-up table)
    FILE* log;              // world rank 0: log.jsonl (the reporter writes and closes it)
    char log_path[OUTDIR_PATH_CAP + 16];
    Reporter rep;
    Trace trace;
    RunDecoder dec;         // world rank 0: turns samples' token ids into text
    Executor ex;
    Pipeline pl;            // the whole pipeline at consistency points: validation, samples, checks, checkpoints
    RunCheckpoint ckpt;
    OutDir outdir;          // rank 0: -o, locked for this run
    RunState state;         // the window now, rollbacks in a row, the guard's window: carried in checkpoints
    long redone;            // micro-batches of refused chunks, run again after their rollback
    int start_step;
    int ckpt_step;          // the newest checkpoint of this run in -o (written, or resumed from); -1: none
    StageSnapshot snap;     // the stage at the start of a chunk run with a window (a rollback's way back)
    int snap_step;          // the step it was taken before; -1 none for the chunk running
    RunState snap_state;    // the run's state then (the guard's window of losses, the noise scale's estimate)
} Trainer;

static int is_boundary(int step, int every) { return every > 0 && step % every == 0; }

// each stage's window at (0-based) step: the requested (or auto's measured) one, halved by rollbacks
// and the drift monitor, 0 before --aew-start; out (P). Returns the largest.
static int windows_now(const Trainer* tr, int step, int* out) {
    const RunState* rs = &tr->state;
    int mx = 0;
    for (int i = 0; i < tr->comm.P; i++) {
        int base = tr->W == -2 ? tr->stage_W[i] : rs->aew_base < 0 ? 0 : (int)rs->aew_base;
        out[i] = rs->aew_halvings >= 31 || step < tr->a.aew_start ? 0 : base >> rs->aew_halvings;
        if (out[i] > mx) mx = out[i];
    }
    return mx;
}

// the largest window --aew auto may choose, the staleness the compensation was measured to handle
// (README, TD-Pipe convergence): without compensation M / 2 (converges like 1F1B); with it M (one
// update stale), and 2M (two) when the window opens after the learning rate's warm-up
// (--aew-start >= --warmup > 0), where two updates stale cost under 2%
static int aew_auto_max(const Trainer* tr) {
    int M = tr->a.grad_accum;
    if (tr->comp.methods == STALE_NONE) return M / 2;
    return tr->a.warmup > 0 && tr->a.aew_start >= tr->a.warmup ? 2 * M : M;
}

// the widest of --aew's windows (0 under auto, before it has chosen)
static int widest_window(const Trainer* tr) {
    int W = 0;
    for (int i = 0; i < tr->a.stages; i++) W = tr->stage_W[i] > W ? tr->stage_W[i] : W;
    return W;
}

// the shape the run's memory is planned for: each stage's window (auto: its widest choice on every stage;
// rollbacks and the drift monitor only narrow them), over its longest chunk (up to --consistency-every)
static ScheduleShape planned_shape(const Trainer* tr) {
    const TrainArgs* a = &tr->a;
    int longest = a->consistency_every < a->steps ? a->consistency_every : a->steps;
    return (ScheduleShape){.kind = tr->kind, .P = a->stages, .M = a->grad_accum, .W = tr->W == -1 ? aew_auto_max(tr) : widest_window(tr),
                           .n_steps = longest, .stage_W = tr->W == -1 ? NULL : tr->stage_W};
}

// --grad-cache N caps the gradient-cache ring: refuse a schedule that needs more slots per stage
static void check_grad_cache(const Trainer* tr, const ScheduleShape* shape) {
    int need = schedule_shape_grad_slots(shape);
    if (tr->grad_cache_slots > 0 && need > tr->grad_cache_slots)
        fatal_all("--grad-cache %d: the %s schedule with --aew %d needs %d gradient-cache slots per stage", tr->grad_cache_slots,
                  schedule_kind_name(shape->kind), shape->W, need);
}

// --grad-quant, --quant-block, --error-feedback and --grad-cache's size: how replicas average. int8
// without a bucket size takes 4 MiB buckets (the TD-Pipe article's grad_cache: 4MB): about one layer
// of GPT-2 124M's 7.1M parameters is 28 MB, so a bucket is a layer there, and a few layers of a small model.
#define DP_DEFAULT_BUCKET ((size_t)4 << 20)
static void parse_grad_sync(Trainer* tr) {
    TrainArgs* a = &tr->a;
    char err[256];
    size_t bucket = 0;
    if (args_grad_cache(a->grad_cache, &tr->grad_cache_slots, &bucket, err, sizeof(err))) fatal_all("%s", err);
    GradQuant q;
    if (!strcmp(a->grad_quant, "none")) q = GRAD_QUANT_NONE;
    else if (!strcmp(a->grad_quant, "int8")) q = GRAD_QUANT_INT8;
    else fatal_all("--grad-quant %s: expected none or int8", a->grad_quant);
    if (q == GRAD_QUANT_INT8 && !bucket) bucket = DP_DEFAULT_BUCKET;
    tr->sync_cfg = (DpSyncConfig){q, a->quant_block, a->error_feedback, bucket};
}

// the sync's plan (its buckets, and the residuals checkpoints hold), wherever it runs; NULL: no sync
static DpSync* sync_plan(Trainer* tr) { return tr->dsync ? dp_sync_cuda_plan(tr->dsync) : tr->use_sync ? &tr->sync : NULL; }

// the model's shape: a fresh dN (its vocabulary from the data's tokenizer) or an llm.c file's
static void read_model_config(Trainer* tr) {
    char err[1024];
    memset(&tr->cfg, 0, sizeof(tr->cfg));
    int fresh = run_model_fresh_config(tr->a.init, run_data_vocab(&tr->a), &tr->cfg, err, sizeof(err));
    if (fresh < 0) fatal_all("%s", err);
    tr->from_file = !fresh;
    if (tr->from_file && model_file_read_config(tr->a.init, &tr->cfg, err, sizeof(err))) fatal_all("-e: %s", err);
    if (tr->a.T > tr->cfg.max_seq_len) fatal_all("-t %d exceeds the model's maximum sequence length %d", tr->a.T, tr->cfg.max_seq_len);
    if (g_rank == 0 && tr->a.sample_every > 0 && tr->a.gen_tokens > tr->a.T && !tr->a.print_schedule) // (a sample is one window of the model's context)
        fprintf(stderr, "note: -g %d: samples are at most -t %d tokens long\n", tr->a.gen_tokens, tr->a.T);
}

// per-stage windows that differ (--aew 6,4,2,0): each window applies to the layers its stage holds, so
// the split is part of the run's results, and auto's timed passes would make the same command train
// differently as the machine's load moved the split (d3 at P = 2 with --aew 3,0 split 1,2 or 2,1 from
// run to run). auto takes the FLOP model there, which every run of the command computes alike. And with
// --stale-comp lr each stage scales its rate by its own staleness, which differs between the first and
// last stage when their windows do: the tied embedding's two copies would take two rates (refused).
static int windows_differ(const Trainer* tr) {
    for (int i = 1; i < tr->a.stages; i++)
        if (tr->stage_W[i] != tr->stage_W[0]) return 1;
    return 0;
}

// phase 1: flags, schedule, model shape, partition. --print-config and --print-schedule print and exit
// here, for any P from one process (they need no ranks).
static void parse(Trainer* tr, int argc, char** argv) {
    TrainArgs* a = &tr->a;
    char err[1024];
    args_defaults(a);
    args_parse(a, argc, argv);
    int P = a->stages, ranks = tr->comm.world_size; // (D: 1 where there are no ranks for the grid yet, as for --print-schedule)
    if (args_global_batch(a, ranks >= P && ranks % P == 0 ? ranks / P : 1, err, sizeof(err))) fatal_all("%s", err);
    if (a->print_config) { // (before anything is checked: the settings as given, for a file to edit)
        if (g_rank == 0) args_print_yaml(a, stdout);
        comm_finalize(&tr->comm);
        exit(0);
    }
    if (g_rank == 0 && a->train_pattern[0] && !a->val_pattern[0] && a->val_every > 0 && !a->print_schedule)
        fprintf(stderr, "note: -v %d: no validation shards (-j), so no validation runs\n", a->val_every);
    if (a->comm_timeout > 0 && a->comm_timeout < 1) // (a start-up barrier alone takes longer: a healthy run would be blamed)
        fatal_all("--comm-timeout %g: a wait of under a second would end healthy runs; give 1 s or more (0 waits forever)", a->comm_timeout);
    tr->comm.timeout = a->comm_timeout;
    if (strcmp(a->device, "auto") && strcmp(a->device, "cpu") && strcmp(a->device, "cuda") && strcmp(a->device, "cpu-staged"))
        fatal_all("--device %s: expected auto, cpu or cuda", a->device);
    tr->stage_W = (int*)malloc_check(P * sizeof(int));
    if (args_aew(a->aew, P, &tr->W, tr->stage_W, err, sizeof(err))) fatal_all("%s", err);
    if (!a->schedule[0]) strcpy(a->schedule, tr->W != 0 ? "tdpipe" : "1f1b"); // a window asks for TD-Pipe's schedule
    if (schedule_parse_kind(a->schedule, &tr->kind)) fatal_all("--schedule %s: expected gpipe, 1f1b, zbh1 or tdpipe", a->schedule);
    if (schedule_trainer_supports(tr->kind, err, sizeof(err))) fatal_all("%s", err);
    parse_grad_sync(tr);
    if (tr->W != 0 && tr->kind != SCHED_TDPIPE) fatal_all("--aew %s: only the tdpipe schedule has an asynchronous window", a->aew);
    if (!a->print_schedule && comm_grid_check(&tr->comm, P, err, sizeof(err))) fatal_all("%s", err); // (the grid itself: make_grid)
    if (placement_parse(a->placement, &tr->placement, &tr->placement_auto)) fatal_all("--placement %s: expected stages, replicas or auto", a->placement);
    if (strcmp(a->comm, "auto") != 0 && strcmp(a->comm, "mpi") != 0) fatal_all("--comm %s: expected auto or mpi", a->comm);
    if (staleness_parse(a->stale_comp, &tr->comp.methods))
        fatal_all("--stale-comp %s: expected none, or predict, dcasgd and lr alone or joined by + (predict+lr)", a->stale_comp);
    tr->comp.tau = a->stale_tau;
    if ((tr->comp.methods & STALE_LR) && P > 1 && tr->stage_W[0] != tr->stage_W[P - 1])
        fatal_all("--stale-comp %s with --aew %s: lr scales each stage's rate by its own staleness, and these windows make the first and last "
                  "stage's differ, so the tied embedding's two copies would be updated at two rates; give one window, or leave lr out", a->stale_comp, a->aew);
    if (args_aew_start(a->aew_start_arg, tr->W, tr->comp.methods != STALE_NONE, a->warmup, &a->aew_start, err, sizeof(err))) fatal_all("%s", err);
    if (a->aew_start > 0 && tr->kind != SCHED_TDPIPE) fatal_all("--aew-start %d: only the tdpipe schedule has a window to open", a->aew_start);
    if (args_check_injections(a, a->print_schedule ? 0 : tr->comm.world_size, err, sizeof(err))) fatal_all("%s", err);
    if (a->resume && a->synthetic) // (it would cut a real run's log in -o back to step 0 and append to it)
        fatal_all("-y 1 with --synthetic-compute: a synthetic run has no model and writes no checkpoint, so there is nothing to resume");
    tr->comp.curvature = a->predict_order == 2;
    tr->comp.dc_lambda = a->dc_lambda;
    read_model_config(tr);
    // -l's default (3e-3) suits the small models; at GPT-2 124M the loss jumped (7.17 at step 10,
    // 8.74 at step 15, the norm 24 against 3-4; B 4, T 64, Tiny Shakespeare; 17.5 in another
    // initialisation). GPT-3's 125M model trained at 6e-4 (Brown et al. 2020, Table 2.1), llm.c's
    // train_gpt2.c trains GPT-2 124M at 3e-4. (-l is a float: 1e-3f, so that -l 1e-3 is not "above")
    if (g_rank == 0 && tr->cfg.channels >= 768 && a->lr > 1e-3f)
        fprintf(stderr, "note: lr %g (-l; 3e-3 by default, for the small models) is high for a model of width C %d: GPT-3's 125M model (C 768) "
                        "trained at 6e-4 and llm.c trains GPT-2 124M at 3e-4; the loss may diverge\n", a->lr, tr->cfg.channels);
    if (run_model_partition(&tr->part, a, &tr->cfg, P, NULL, err, sizeof(err))) fatal_all("%s", err);
    ScheduleShape shape = {.kind = tr->kind, .P = P, .M = a->grad_accum, .W = widest_window(tr), .first_step = 0, .n_steps = 2, .stage_W = tr->stage_W};
    Schedule sch;
    if (schedule_build(&sch, &shape, err, sizeof(err))) fatal_all("%s", err);
    check_grad_cache(tr, &shape);
    if (a->print_schedule) {
        if (g_rank == 0) {
            // (no ranks to time passes on here: auto solves over the FLOP model, as print_startup says of it)
            run_model_partition_header(stdout, a, !strcmp(a->partition, "auto") ? "auto over the FLOP model: a run times passes instead" : a->partition, 0);
            partition_print(stdout, &tr->part);
            schedule_print(&sch, stdout);
            ScheduleShape planned = planned_shape(tr);
            if (run_memory_print_holds(stdout, &planned, &tr->comp, err, sizeof(err))) fatal_all("%s", err);
        }
        schedule_free(&sch);
        comm_finalize(&tr->comm);
        exit(0);
    }
    schedule_free(&sch);
}

// phase 2a: the P x D grid on the launch ranks. --placement auto counts the bytes a step sends between
// hosts under each layout (comm_host_map: which ranks share a host), with the partition's FLOP-model
// split: each boundary's activations and gradients (bf16 between GPUs over NCCL, else fp32), the tied
// embedding's two shares between the end stages, and the replicas' average (two-shot: each replica
// sends each other 2 / D of its stage's gradient, fp32 or int8 blocks with their scales).
static void make_grid(Trainer* tr) {
    TrainArgs* a = &tr->a;
    Comm* c = &tr->comm;
    int P = a->stages;
    char err[1024];
    if (tr->placement_auto) {
        int D = c->world_size / P;
        int* host = (int*)malloc_check((size_t)c->world_size * sizeof(int));
        double* dp = (double*)malloc_check((size_t)P * sizeof(double));
        comm_host_map(c, host);
        const GPT2Config* g = &tr->cfg;
        double vc = (double)g->padded_vocab_size * g->channels, act = (double)a->B * a->T * g->channels;
        double per = tr->sync_cfg.quant == GRAD_QUANT_INT8 ? 1.0 + 4.0 / tr->sync_cfg.block : 4.0;
        for (int s = 0; s < P; s++) {
            GPT2Range r = {tr->part.first[s], tr->part.first[s + 1], s == 0, s == P - 1};
            size_t sizes[GPT2_NUM_PARAM_TENSORS];
            // the last stage averages the LM head's share of wte beside its gradient
            double n = (double)gpt2_param_sizes(g, &r, sizes) + (P > 1 && s == P - 1 ? vc : 0.0);
            dp[s] = D > 1 ? 2.0 * n * per / D : 0.0;
        }
        double msg = tr->use_cuda && !strcmp(a->comm, "auto") ? 2.0 : 4.0;
        PlacementTraffic t = {P, D, host, 2.0 * a->grad_accum * act * msg, 2.0 * vc * 4.0, dp};
        tr->placement = placement_choose(&t, tr->place_cross);
        free(host);
        free(dp);
    }
    if (comm_grid(c, P, tr->placement, err, sizeof(err))) fatal_all("%s", err);
}

// phase 2b: the split. --partition auto times one layer, the embeddings and the head on every rank,
// on the run's device (layer_costs_per_stage: 3 passes of one micro-batch at the run's B and T after
// a warm-up; a host's ranks one at a time) and solves over those seconds; every rank has every
// stage's times, so all solve the same split. Timed passes vary from run to run and so may the split,
// but no result depends on it where every stage has the same window (a run is then bitwise the same
// under any partition; windows that differ take the FLOP model: windows_differ). Synthetic compute
// keeps the FLOP model, which its timed waits follow.
static void partition_profile(Trainer* tr) {
    TrainArgs* a = &tr->a;
    int P = tr->comm.P;
    if (!strcmp(a->partition, "auto") && P > 1 && !tr->synthetic && !windows_differ(tr)) {
        tr->profiled = (LayerCosts*)calloc_check(P, sizeof(LayerCosts));
        layer_costs_per_stage(tr->device, &tr->comm, &tr->cfg, a->B, a->T, tr->profiled);
        partition_free(&tr->part);
        char err[1024];
        if (run_model_partition(&tr->part, a, &tr->cfg, P, tr->profiled, err, sizeof(err))) fatal_all("%s", err);
    }
    tr->ranges = (GPT2Range*)malloc_check(P * sizeof(GPT2Range));
    for (int i = 0; i < P; i++) tr->ranges[i] = (GPT2Range){tr->part.first[i], tr->part.first[i + 1], i == 0, i == P - 1};
}

// phase 2: the device, decided by every rank together (one rank without a GPU while the others use
// theirs would leave collectives half-entered)
static void choose_device(Trainer* tr) {
    TrainArgs* a = &tr->a;
    char why[256];
    int have_cuda = cuda_available_why(why, sizeof(why));
    int gpu_everywhere = !comm_any(&tr->comm, !have_cuda);
    if (!strcmp(a->device, "cuda") && !gpu_everywhere)
        fatal_all("--device cuda: %s", have_cuda ? "not every rank has a usable GPU (rank 0 has one)" : why);
    tr->synthetic = a->synthetic;
    tr->use_cuda = strcmp(a->device, "cpu") && strcmp(a->device, "cpu-staged") && gpu_everywhere;
    if (tr->use_cuda && tr->synthetic) {
        if (!strcmp(a->device, "cuda")) fatal_all("--device cuda: --synthetic-compute replaces the model by timed waits: use --device cpu");
        tr->use_cuda = 0; // auto: synthetic compute needs no device
    }
    char shape_why[256];
    const GPT2Config* g = &tr->cfg;
    if (tr->use_cuda && cuda_shapes_check(g->channels, g->num_heads, g->padded_vocab_size, a->T, shape_why, sizeof(shape_why)))
        fatal_all("--device %s: %s (--device cpu runs any shape)", a->device, shape_why);
#ifdef TD_CUDA
    if (tr->use_cuda && !matmul_backend_parse(a->matmul, &g_matmul_backend)) fatal_all("--matmul %s: expected tdpipe, tdpipe-mma or cublaslt", a->matmul);
#endif
    if (!tr->use_cuda && strcmp(a->matmul, "tdpipe") != 0) fatal_all("--matmul %s: only the CUDA backend has a choice of matmul", a->matmul);
    tr->device = tr->synthetic ? &STAGE_SYNTHETIC : tr->use_cuda ? &STAGE_CUDA : !strcmp(a->device, "cpu-staged") ? &STAGE_CPU_STAGED : &STAGE_CPU;
    if (a->recompute && tr->synthetic) fatal_all("--recompute 1: synthetic compute has no activations to recompute");
    host_threads_choose(tr->comm.local_ranks, g_rank == 0 && !tr->use_cuda);
}

// the weights, their gradient and AdamW's moments (16 bytes a parameter; on a GPU, the weights alone
// pass through host memory: 4) of the stages on this host against its memory, before the weights are
// allocated: check_memory comes once the stage exists, and a model file of a 200 G-parameter header
// failed in malloc before it, naming no -e (one nearer the memory was read whole first)
static void check_weights_fit(Trainer* tr, const GPT2Range* r) {
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    double host, gib = 1024.0 * 1024.0 * 1024.0, per = tr->use_cuda ? 4.0 : 16.0;
    OutdirMemory m;
    int ranks, over = run_memory_host_over(&tr->comm, per * (double)gpt2_param_sizes(&tr->cfg, r, sizes), &host, &ranks, &m);
    if (over)
        fprintf(stderr, "train_tdpipe: -e %s: the model needs %.2f GiB of host memory (%s, %g bytes a parameter, %d rank(s)) "
                        "but %.2f GiB are available (%s): a smaller model, or its stages over more hosts\n",
                tr->a.init, host / gib, tr->use_cuda ? "its weights on their way to the GPU" : "weights, gradient and AdamW state", per, ranks,
                (double)m.bytes / gib, m.source);
    if (comm_any(&tr->comm, over)) exit(1);
}

// phase 3: the data (first and last stage read it) and this rank's stage on its device
static void make_stage(Trainer* tr) {
    TrainArgs* a = &tr->a;
    int s = tr->comm.stage, P = tr->comm.P;
    GPT2Range range = tr->ranges[s];
    int needs_data = !tr->synthetic && (range.has_embed || range.has_head);
    char err[1024];
    fatal_any(&tr->comm, run_data_init(&tr->data, a, tr->cfg.vocab_size, needs_data, tr->comm.replica, tr->comm.D, err, sizeof(err)) != 0, err);
    StageInit init = {&tr->cfg, range, a->B, a->T, NULL, NULL, &tr->comm, 0.0, 0.0, a->jitter, (unsigned long long)a->seed, a->recompute};
    if (!tr->synthetic) check_weights_fit(tr, &range);
    float* slice = tr->synthetic ? NULL : run_model_init(a, &tr->cfg, !tr->from_file, &range, err, sizeof(err));
    fatal_any(&tr->comm, !tr->synthetic && !slice, err);
    init.slice = slice;
    if (tr->synthetic) { // the cost model: 2 ms per forward of a stage-width of layers, backward twice that
        init.syn_f = 2e-3 * P / tr->cfg.num_layers * (range.l1 - range.l0);
        init.syn_b = 2.0 * init.syn_f;
    }
    stage_create(&tr->stage, tr->device, &init);
    free(slice);
    if (!tr->synthetic && tr->comp.methods != STALE_NONE) stage_use_compensation(&tr->stage, &tr->comp);
    tr->stage.gns = !tr->synthetic && (a->gns || a->lr_gns); // (a GPU stage reserves the buffers it needs for it)
    tr->ex.data = needs_data ? &tr->data.train : NULL;
}

// phase 4: how messages and gradients travel. Activations and gradients between stages stay where
// the model lives when they can (NCCL between GPUs; the private stage's memory, over MPI, for
// cpu-staged), else through host memory over MPI; likewise the replicas' average. The tied shares
// move on the device too, unless some stage averages its replicas on the host (replicas sharing a
// GPU): decided by every rank together, as a first stage on the device and a last stage on the host
// would wait for each other.
static void make_links(Trainer* tr) {
    Stage* st = &tr->stage;
    int P = tr->comm.P, D = tr->comm.D, s = tr->comm.stage, device = stage_keeps_device_msgs(st) && !strcmp(tr->a.comm, "auto");
    int staged = tr->device == &STAGE_CPU_STAGED;
    comm_mpi_link(&tr->comm, &tr->mpi_link);
    tr->link = &tr->mpi_link;
    tr->msg_where = "host memory, MPI";
    tr->dp = (StageDpAverage){stage_dp_average_host, &tr->comm, "host memory, MPI"};
    void* nccl_dp = NULL;
    if (device && D > 1) {
        if (staged) tr->dp = (StageDpAverage){stage_staged_dp_average, &tr->comm, "the backend's memory, MPI (cpu-staged: where NCCL would run on GPUs)"};
        else if (cuda_dp_init(&tr->comm, st, &nccl_dp)) tr->dp = (StageDpAverage){cuda_dp_average, nccl_dp, "GPU memory, NCCL"};
        else tr->dp.where = "host memory, MPI (the replicas share a GPU: NCCL cannot connect them)";
    }
    int device_link = 0;
    if (device && P > 1) {
        if (staged) device_link = 1, tr->msg_where = "the backend's memory, MPI (cpu-staged: where NCCL would run between GPUs)";
        else if (cuda_link_init(&tr->comm, &tr->link)) device_link = 1, tr->msg_where = "GPU memory, NCCL";
        else tr->msg_where = "host memory, MPI (stages share a GPU: NCCL cannot connect them)";
    }
    if (device_link) stage_use_device_msgs(st);
    int host_average = device && D > 1 && tr->dp.average == stage_dp_average_host;
    // int8, or fp32 in buckets: the sync of tdpipe/dp_sync.h; on GPUs NCCL connects, in GPU memory
    // (tdpipe/dp_sync_cuda.cuh), else through host memory (a device stage's gradient goes down and back
    // up around it). Made in open_outputs, after the memory check.
    tr->use_sync = D > 1 && !tr->synthetic && (tr->sync_cfg.quant == GRAD_QUANT_INT8 || tr->sync_cfg.bucket_bytes > 0);
    tr->device_sync = tr->use_sync && tr->dp.average == cuda_dp_average;
    host_average |= tr->use_sync && device && !tr->device_sync;
    if (g_rank == 0 && D == 1 && tr->sync_cfg.quant == GRAD_QUANT_INT8)
        fprintf(stderr, "note: --grad-quant int8 with one replica per stage: there is nothing to average, so gradients are used as computed (not quantized)\n");
    int device_tied = !comm_any(&tr->comm, host_average) && device_link;
    if (device_tied && (s == 0 || s == P - 1)) stage_use_device_tied(st);
    tr->tied_link = device_tied ? tr->link : &tr->mpi_link; // (NCCL takes device buffers; link is mpi_link but for NCCL's)
}

// B * T * M * D, in 64 bits: past 2^31 with a large M
static long long tokens_per_step(const Trainer* tr) { return (long long)tr->a.B * tr->a.T * tr->a.grad_accum * tr->comm.D; }

static void print_startup(const Trainer* tr) {
    const TrainArgs* a = &tr->a;
    const GPT2Config* cfg = &tr->cfg;
    const Comm* c = &tr->comm;
    const RunData* d = &tr->data;
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    printf("+----------------------+--------------------------------------------------------------\n");
    printf("| %-20s | %s\n", "model", a->init);
    printf("| %-20s | L %d, C %d, NH %d, V %d (Vp %d), maxT %d\n", "shape", cfg->num_layers, cfg->channels, cfg->num_heads,
           cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len);
    printf("| %-20s | %zu\n", "parameters", gpt2_param_sizes(cfg, &all, sizes));
    if (!tr->synthetic) { // rank 0's stage; the pipeline's extra slots, stashes and gradient ring are reported at the end
        double mib = 1.0 / (1024.0 * 1024.0);
        printf("| %-20s | weights + gradient + AdamW %.1f MiB; activations %.1f MiB per micro-batch in flight", "memory (stage 0)",
               16.0 * tr->stage.num_params * mib, stage_slot_bytes(&tr->stage) * mib);
        if (a->recompute) printf(" (--recompute: its input and output; backward runs its forward again in %.1f MiB held once)", stage_once_bytes(&tr->stage) * mib);
        printf("\n");
    }
    if (tr->use_cuda) printf("| %-20s | cuda (bf16 compute, fp32 master weights), matmul %s\n", "device", a->matmul);
    else if (tr->synthetic) printf("| %-20s | synthetic compute (timed waits from a cost model), no model\n", "device");
    else printf("| %-20s | %s (fp32), %d OpenMP thread(s) per rank\n", "device", tr->device->name, omp_get_max_threads());
    printf("| %-20s | P %d stages x D %d replicas = %d rank(s); schedule %s", "pipeline", c->P, c->D, c->world_size, a->schedule);
    if (tr->kind == SCHED_TDPIPE) {
        printf(", AEW W = %s", a->aew);
        if (a->aew_start > 0) printf(" from step %d (steps 1..%d synchronous)", a->aew_start + 1, a->aew_start);
    }
    printf("\n");
    if (c->P > 1 && c->D > 1) {
        printf("| %-20s | %s first: mpirun's rank r holds stage %s, replica %s", "placement", placement_name(tr->placement),
               tr->placement == PLACE_REPLICAS_FIRST ? "r / D" : "r % P", tr->placement == PLACE_REPLICAS_FIRST ? "r % D" : "r / P");
        if (tr->placement_auto)
            printf(" (auto: %.3g MB a step between hosts stages first, %.3g MB replicas first)", tr->place_cross[PLACE_STAGES_FIRST] / 1e6,
                   tr->place_cross[PLACE_REPLICAS_FIRST] / 1e6);
        printf("\n");
    }
    if (tr->comp.methods != STALE_NONE)
        printf("| %-20s | %s for micro-batches staler than %d%s\n", "stale compensation", staleness_name(tr->comp.methods), tr->comp.tau,
               tr->kind == SCHED_TDPIPE ? "" : " (a synchronous schedule has none: nothing to compensate)");
    if (c->P > 1) printf("| %-20s | activations and gradients between stages in %s\n", "pipeline messages", tr->msg_where);
    if (c->D > 1 && !tr->use_sync) printf("| %-20s | gradients averaged over the %d replicas in %s (fp32, after the step's last backward)\n", "data-parallel", c->D, tr->dp.where);
    if (tr->use_sync) {
        const DpSyncConfig* q = &tr->sync_cfg;
        char how[96];
        if (q->quant == GRAD_QUANT_INT8) snprintf(how, sizeof how, "int8 blocks of %d, error feedback %s", q->block, q->error_feedback ? "on" : "off");
        else snprintf(how, sizeof how, "fp32");
        printf("| %-20s | gradients averaged over the %d replicas: %s, two-shot, %d buckets of >= %.2f MiB %s\n", "data-parallel", c->D, how,
               (tr->dsync ? dp_sync_cuda_plan(tr->dsync) : &tr->sync)->n_buckets, (double)q->bucket_bytes / 1048576.0,
               tr->device_sync ? "in GPU memory, NCCL, sent as backward completes them" : "in host memory, sent as backward completes them");
    }
    printf("| %-20s | B %d, T %d, M %d, D %d: %lld tokens per step\n", "batch", a->B, a->T, a->grad_accum, c->D, tokens_per_step(tr));
    if (d->builtin) {
        printf("| %-20s | built-in: order-1 Markov source, %d symbols, %d successors each\n", "data", MARKOV_ALPHABET, MARKOV_BRANCHING);
        printf("| %-20s | %.6f nats/token (exact entropy rate: no model can go lower)\n", "entropy floor", d->source.entropy_rate);
    } else {
        printf("| %-20s | %s (%lld tokens)\n", "train data", a->train_pattern, (long long)d->train.num_tokens);
        if (d->has_val) printf("| %-20s | %s (%lld tokens)\n", "val data", a->val_pattern, (long long)d->val.num_tokens);
    }
    printf("| %-20s | %d steps, lr %g, betas %g %g, eps %g, warmup %d, final frac %g, wd %g, clip %g\n", "optimisation", a->steps, a->lr,
           a->beta1, a->beta2, a->eps, a->warmup, a->final_lr_frac, a->weight_decay, a->clip);
    printf("+----------------------+--------------------------------------------------------------\n");
    if (tr->profiled) {
        run_model_partition_header(stdout, a, "auto, from timed passes", 1);
        for (int i = 0; i < tr->comm.P; i++)
            printf("  stage %d measured: a layer %.3f ms, embeddings %.3f ms, head %.3f ms\n", i, 1e3 * tr->profiled[i].layer,
                   1e3 * tr->profiled[i].embed, 1e3 * tr->profiled[i].head);
    } else if (!strcmp(a->partition, "auto") && !tr->synthetic && windows_differ(tr)) {
        char how[160];
        snprintf(how, sizeof how, "auto: the FLOP model, not timed passes, as the per-stage windows --aew %s make the results depend on the split", a->aew);
        run_model_partition_header(stdout, a, how, 0);
    } else {
        run_model_partition_header(stdout, a, a->partition, 0);
    }
    partition_print(stdout, &tr->part);
    fflush(stdout);
}

// the flags that shrink what a memory refusal counted: -b, -t, the model, and the schedule's own knob
static const char* memory_knobs(const ScheduleShape* planned) {
    if (planned->kind == SCHED_GPIPE) return "-b, -t, --micro-batches (GPipe holds them all in flight) or the model";
    return planned->kind == SCHED_TDPIPE && planned->W != 0 ? "-b, -t, --aew or the model" : "-b, -t or the model";
}

// what the run will reserve on this host (every rank of it: the host's memory is shared), against what
// the host, or the container's memory limit, has left: refused with both figures before training
static void check_memory(Trainer* tr) {
    TrainArgs* a = &tr->a;
    ScheduleShape planned = planned_shape(tr);
    StageHolds h;
    char err[1024];
    if (run_memory_stage_holds(&planned, &tr->comp, tr->comm.stage, &h, err, sizeof(err))) fatal_all("%s", err);
    int gacts = tr->kind == SCHED_ZBH1 ? h.slots : 1; // zbh1: a gacts buffer per slot (its BW runs apart from BI)
    const char* or_recompute = a->recompute || h.slots < 2 ? "" : ", or give --recompute 1"; // (it saves only where slots wait)
    double mine = stage_planned_bytes(&tr->stage, h.slots, gacts, h.grad_slots, h.stashes);
    if (tr->use_sync) mine += dp_sync_planned_bytes(&tr->sync_cfg, &tr->stage, tr->comm.D); // (on a device: the plan and residual mirrors, less)
    if (tr->kind == SCHED_TDPIPE && planned.W > 0 && !tr->synthetic) mine += stage_snapshot_bytes(&tr->stage); // a rollback's way back (train)
    double host;
    OutdirMemory m;
    int bad = 0, ranks;
    if (run_memory_host_over(&tr->comm, mine, &host, &ranks, &m)) {
        double gib = 1024.0 * 1024.0 * 1024.0;
        fprintf(stderr, "train_tdpipe: this run would reserve %.2f GiB of host memory (%d rank(s): weights, AdamW, %d activation slots, %d weight "
                        "stashes and %d gradient slots on stage 0) but %.2f GiB are available (%s): lower %s%s\n",
                host / gib, ranks, h.slots, h.stashes, h.grad_slots, (double)m.bytes / gib, m.source, memory_knobs(&planned), tr->use_cuda ? "" : or_recompute); // (a GPU's activations are not host memory)
        bad = 1;
    }
    // a device's own memory, checked by each rank against its device
    double dev = stage_planned_device_bytes(&tr->stage, h.slots, gacts, h.grad_slots, h.stashes) +
                 (tr->device_sync ? dp_sync_device_planned_bytes(&tr->sync_cfg, &tr->stage, tr->comm.D) : 0.0), used, total;
    int sharing;
    if (run_memory_device_over(&tr->stage, tr->comm.local_ranks, dev, &used, &total, &sharing)) {
        double gib = 1024.0 * 1024.0 * 1024.0;
        fprintf(stderr, "train_tdpipe: rank %d: this run would add %.2f GiB of GPU memory (%d activation slots, %d weight stashes and %d "
                        "gradient slots on stage %d) for each of the %d rank(s) sharing its GPU, to the %.2f GiB in use, but the GPU has %.2f GiB: "
                        "lower %s%s\n",
                g_rank, dev / gib, h.slots, h.stashes, h.grad_slots, tr->comm.stage, sharing, used / gib, total / gib, memory_knobs(&planned), or_recompute);
        bad = 1;
    }
    if (comm_any(&tr->comm, bad)) exit(1);
    if (g_rank == 0 && planned.W >= a->grad_accum && tr->kind == SCHED_TDPIPE && tr->W != -1) // (auto has not chosen yet: it says what it chose)
        fprintf(stderr, "note: --aew %s with M = %d: every micro-batch of a step runs on weights at least one update old%s\n", a->aew, a->grad_accum,
                tr->comp.methods == STALE_NONE ? " (without --stale-comp this costs convergence: README, TD-Pipe convergence)"
                : a->aew_start < a->warmup ? " (opening it after the warm-up, --aew-start N >= --warmup, costs less: README, TD-Pipe convergence)"
                                           : "");
}

// phase 5: the memory check, then the output folder (rank 0: its lock, left-over temporary files, an
// earlier run's files moved aside or, resuming, log.jsonl cut back to the checkpoint), a resume (every
// rank), the start-up table
static void open_outputs(Trainer* tr) {
    check_memory(tr); // before the output folder is touched: a run that cannot fit changes nothing
    if (tr->device_sync) tr->dsync = dp_sync_cuda_init(&tr->sync_cfg, &tr->comm, &tr->stage, tr->dp.ctx); // (a resume fills its residuals)
    else if (tr->use_sync) dp_sync_init(&tr->sync, &tr->sync_cfg, &tr->comm, &tr->stage);
    TrainArgs* a = &tr->a;
    char* log_path = tr->log_path, err[OUTDIR_PATH_CAP + 512], note[OUTDIR_PATH_CAP + 512];
    snprintf(log_path, sizeof(tr->log_path), "%s/log.jsonl", a->out_dir);
    int bad = 0, moved = 0;
    tr->outdir.lock_fd = -1;
    struct stat od;
    if (g_rank == 0) {
        if (a->resume && stat(a->out_dir, &od) != 0) // (outdir_open would create it, and its lock, for a typo)
            bad = fprintf(stderr, "train_tdpipe: -y 1: -o %s does not exist: there is no run there to resume\n", a->out_dir) > 0;
        else if (outdir_open(&tr->outdir, a->out_dir, err, sizeof(err))) bad = fprintf(stderr, "train_tdpipe: -o %s\n", err) > 0;
        else if (a->trace_path[0] && outdir_check_file_replaceable(&tr->outdir, a->trace_path, TRACE_JSON_HEAD, err, sizeof(err)))
            bad = fprintf(stderr, "train_tdpipe: --trace %s\n", err) > 0;
        else if (outdir_check_model_file(&tr->outdir, err, sizeof(err))) // (before an earlier run's files move: refused, nothing changed)
            bad = fprintf(stderr, "train_tdpipe: -o %s\n", err) > 0;
        else {
            if (outdir_remove_temps(&tr->outdir, NULL, err, sizeof(err))) fprintf(stderr, "warning: %s\n", err);
            // a fresh run: the model file was read already (an -e in this folder has been loaded)
            if (!a->resume && (moved = outdir_archive_earlier(&tr->outdir, note, sizeof(note), err, sizeof(err))) < 0)
                bad = fprintf(stderr, "train_tdpipe: -o %s\n", err) > 0;
            else if (moved > 0) fprintf(stderr, "train_tdpipe: -o %s\n", note);
            int fd = !bad && !a->resume ? td_create_regular(log_path, "log", err, sizeof(err)) : -2;
            if (fd == -1 || (fd >= 0 && !(tr->log = fdopen(fd, "w"))))
                bad = fprintf(stderr, "train_tdpipe: -o %s: cannot write the log: %s\n", a->out_dir, fd == -1 ? err : strerror(errno)) > 0;
        }
    }
    if (comm_any(&tr->comm, bad)) exit(1); // every rank waits for the output folder's verdict
    tr->ckpt = (RunCheckpoint){a->out_dir, a->keep, (unsigned long long)a->seed, a->B, a->T, a->grad_accum * tr->comm.D};
    tr->state = (RunState){.aew_requested = tr->W, .aew_base = tr->W == -2 ? 0 : tr->W};
    tr->ckpt_step = -1;
    if (a->resume && !tr->synthetic) {
        DpSync* plan = sync_plan(tr);
        char path[1200];
        tr->start_step = run_checkpoint_resume(&tr->ckpt, &tr->stage, tr->data.has_train ? &tr->data.train : NULL, &tr->state, plan, path,
                                               sizeof(path), err, sizeof(err));
        fatal_any(&tr->comm, tr->start_step < 0, err);
        if (tr->dsync) dp_sync_cuda_residuals_from_host(tr->dsync, plan->ef_replica, plan->ef_owner);
        // a run killed after its last checkpoint, before model.bin was in place: nothing to train, the model to write
        char model_path[1200];
        snprintf(model_path, sizeof(model_path), "%s/model.bin", a->out_dir);
        int unfinished = tr->start_step == a->steps && comm_any(&tr->comm, g_rank == 0 && access(model_path, F_OK) != 0);
        if (unfinished && g_rank == 0)
            fprintf(stderr, "note: %s is at -x %d's step but has no model.bin (a run ended before writing it): written from %s\n", a->out_dir, a->steps, path);
        if (tr->start_step >= a->steps && !unfinished)
            fatal_all("-y 1: the newest checkpoint in %s is at step %d, already at or past -x %d: give a larger -x to go on", a->out_dir, tr->start_step,
                      a->steps);
        if (g_rank == 0) printf("resumed from %s at step %d\n", path, tr->start_step);
        tr->ckpt_step = tr->start_step;
    }
    if (g_rank == 0) {
        print_startup(tr);
        if (a->sample_every > 0) run_decoder_init(&tr->dec, &tr->data, a, tr->cfg.vocab_size); // (-s 0 prints no sample: no tokenizer to load or miss)
        if (a->resume) { // the resumed step's records go on from where the checkpoint stood: none twice
            int dropped = 0, torn = 0;
            if (outdir_trim_log(log_path, tr->start_step, NULL, &dropped, &torn, err, sizeof(err))) td_fatal("-o %s: %s", a->out_dir, err);
            if (dropped) fprintf(stderr, "note: %s: %d record(s) after step %d removed (the run goes on from its checkpoint)\n", log_path, dropped, tr->start_step);
            if (torn) fprintf(stderr, "note: %s: its last line, cut off in the middle of its write, removed\n", log_path);
            struct stat st; // appended to as a regular file only (a FIFO there would hang the write)
            if ((lstat(log_path, &st) == 0 && !S_ISREG(st.st_mode)) || !(tr->log = fopen(log_path, "a")))
                td_fatal("-o %s: cannot append to %s: not a regular file, or %s", a->out_dir, log_path, strerror(errno));
        }
    }
    stop_request_install();
}

// phase 6: the executor, its reporter and trace
static void make_executor(Trainer* tr) {
    TrainArgs* a = &tr->a;
    GPT2Range all = {0, tr->cfg.num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n_full = gpt2_param_sizes(&tr->cfg, &all, sizes);
    double tokens = (double)tokens_per_step(tr);
    // llm.c's estimate: 6 N FLOPs per token for the weights plus 6 L T C for attention (fwd + bwd)
    double flops = (6.0 * n_full + 6.0 * tr->cfg.num_layers * a->T * tr->cfg.channels) * tokens;
    tr->rep = (Reporter){.log = tr->log, .log_path = tr->log_path, .total_steps = a->steps, .tokens_per_step = tokens, .P = tr->comm.P,
                         .windowed = tr->kind == SCHED_TDPIPE && tr->W != 0,
                         .flops_per_step = flops, .peak_flops = tr->use_cuda ? cuda_peak() * tr->comm.world_size : 0.0};
    trace_init(&tr->trace, a->trace_path[0] != 0);
    Executor* ex = &tr->ex;
    ex->comm = &tr->comm;
    ex->stage = &tr->stage;
    ex->link = tr->link;
    ex->tied_link = tr->tied_link;
    ex->dp = tr->dp;
    ex->sync = tr->use_sync && !tr->dsync ? &tr->sync : NULL;
    if (tr->dsync) ex->device_sync = (DpSyncDevice){dp_sync_cuda_begin_slot, dp_sync_cuda_unit_done, dp_sync_cuda_end_slot, tr->dsync, tr->sync_cfg.quant};
    ex->optim = (OptimConfig){{a->lr, a->beta1, a->beta2, a->eps, a->weight_decay}, a->steps, a->warmup, a->final_lr_frac, a->clip};
    ex->comp = tr->synthetic || tr->comp.methods == STALE_NONE ? NULL : &tr->comp;
    ex->jitter = tr->synthetic ? 0.0f : a->jitter; // synthetic compute draws its op times with the jitter itself
    ex->spike_z = a->spike_z;
    ex->gns = tr->stage.gns;
    ex->lr_gns = !tr->synthetic && a->lr_gns;
    ex->inject_nan = a->inject_nan;
    ex->seed = (uint64_t)a->seed;
    ex->trace = &tr->trace;
    ex->on_step = report_step;
    ex->ctx = &tr->rep;
    tr->pl = (Pipeline){&tr->comm, &tr->stage, tr->comm.P, tr->ranges, tr->link};
}

// --aew auto, after the first step ran synchronously: every stage's measured mean forward and backward
// time, the share of its backward after which the input gradient left, and their coefficient of
// variation beta go through the simulator (the same schedule code and policy), which picks the smallest W whose simulated utilisation is within one point of the best
// window's, up to the staleness the compensation handles (aew_auto_max). Printed beside the article's
// ceil(P (1 - beta)) and both predicted utilisations; every rank computes the same and checks it.
static int aew_measured(Trainer* tr) {
    int P = tr->comm.P, M = tr->a.grad_accum;
    double* all = (double*)calloc_check(4 * P, sizeof(double)); // (4, P) forward s, backward s, beta, share of B
    executor_stage_times(&tr->ex, all);
    double beta = 0.0;
    for (int i = 0; i < P; i++) beta += all[2 * P + i] / P;
    int W_max = aew_auto_max(tr), article = (int)fmax(0.0, ceil(P * (1.0 - beta)));
    double* util = (double*)calloc_check(W_max + 1, sizeof(double));
    char err[512];
    const double* b_send = all + 3 * P;
    int W = simulator_choose_window(P, M, all, all + P, b_send, beta, W_max, 0.01, util, err, sizeof(err));
    double u_article = simulator_window_utilisation(P, M, all, all + P, b_send, beta, article, err, sizeof(err));
    if (W < 0 || u_article < 0) fatal_all("--aew auto: %s", err);
    int* chosen = g_rank == 0 ? (int*)malloc_check(tr->comm.world_size * sizeof(int)) : NULL;
    comm_gather_to_root(&tr->comm, &W, sizeof(W), chosen);
    if (g_rank == 0) {
        int same = 1;
        for (int i = 0; i < tr->comm.world_size; i++) same &= chosen[i] == W;
        if (!same) td_fatal("--aew auto: the ranks chose different windows (rank 0: %d)", W);
        AewChoice c = {P, M, tr->comm.world_size, all, beta, util, W, W_max, staleness_name(tr->comp.methods), article, u_article};
        report_aew_auto(&c);
    }
    free(chosen);
    free(util);
    free(all);
    return W;
}

// step's validation loss, reported by rank 0. A stop asked for during it ends it at a batch and sets
// *stopping; returns 0 then, else 1 (every rank asks whether a stop cut it: a NaN is also a diverged
// model's loss, and only rank 0 holds the loss)
static int validate(Trainer* tr, int step, int* stopping) {
    RunData* d = &tr->data;
    float val = pipeline_eval(&tr->pl, tr->ex.data ? &d->val : NULL, tr->a.val_batches, (const volatile int*)&g_stop_signal);
    int cut_by = comm_max(&tr->comm, isnan(val) ? (int)g_stop_signal : 0); // (a stop returns NaN on every rank)
    if (cut_by) *stopping = cut_by;
    else if (g_rank == 0) report_val(&tr->rep, step, val, d->builtin ? d->source.entropy_rate : -1.0);
    return !cut_by;
}

// after a chunk (the pipeline empty): validation, samples; at every --consistency-every step (and
// wherever a checkpoint is written) the replicas and the tied embedding's two copies checked bitwise
// equal; a checkpoint where -n asks, at the end and at a stop (a stop asked for during the validation
// ends it there and skips the samples; *stopping then says so, and the checkpoint owes the validation)
static void consistency_point(Trainer* tr, int step, int last, int* stopping) {
    TrainArgs* a = &tr->a;
    RunData* d = &tr->data;
    Stage* st = &tr->stage;
    if (d->has_val && (is_boundary(step, a->val_every) || (last && a->val_every > 0))) tr->state.val_owed = !validate(tr, step, stopping);
    if (!*stopping && (is_boundary(step, a->sample_every) || (last && a->sample_every > 0))) {
        int* ids = (int*)calloc_check(a->gen_tokens, sizeof(int));
        int n = a->gen_tokens < a->T ? a->gen_tokens : a->T;
        float temperature[2] = {1.0f, 0.0f};
        const char* kind[2] = {"temperature 1", "greedy"};
        for (int i = 0; i < 2; i++) {
            pipeline_sample(&tr->pl, d->first_token, n, temperature[i], (uint64_t)a->seed ^ (uint64_t)step, ids);
            if (g_rank == 0) run_decoder_print(&tr->dec, kind[i], ids, n);
        }
        free(ids);
    }
    int save = last || *stopping || is_boundary(step, a->ckpt_every);
    if (save || is_boundary(step, a->consistency_every)) {
        stage_to_host(st);
        if (step == a->inject_diverge && g_rank == tr->comm.world_size - 1) { // (tests) its tied copy at P > 1, else a replica's weights
            uint32_t bits;
            memcpy(&bits, &st->p.wte[0], sizeof bits);
            bits ^= 1u;
            memcpy(&st->p.wte[0], &bits, sizeof bits);
        }
        char msg[256];
        if (!pipeline_check_consistency(&tr->pl, msg, sizeof(msg))) fatal_all("step %d: %s", step, msg);
        if (g_rank == 0 && (tr->comm.P > 1 || tr->comm.D > 1)) printf("step %d: %s\n", step, msg);
    }
    if (save) {
        DpSync* plan = sync_plan(tr);
        if (tr->dsync) dp_sync_cuda_residuals_to_host(tr->dsync, plan->ef_replica, plan->ef_owner);
        if (run_checkpoint_save(&tr->ckpt, &tr->pl, step, &d->train, &tr->state, plan)) exit(1);
        tr->ckpt_step = step;
    }
    fflush(stdout);
}

// The drift monitor at step t, the last of the chunk just run (tdpipe/drift.h): the exact gradient
// of the step's micro-batches (executor_drift_measure) against the one U(t) applied, per unit, each
// unit's cosine and error reported. Returns the lowest cosine, the same on every rank.
static double drift_measure(Trainer* tr, int t) {
    int L = tr->cfg.num_layers;
    DriftUnit* all = (DriftUnit*)calloc_check(2 * (L + 2), sizeof(DriftUnit)); // (2, L + 2): applied vs exact, then int8 vs fp32 sync
    int halves = executor_drift_measure(&tr->ex, t, tr->a.grad_accum, all);
    tr->redone += tr->a.grad_accum;
    double min_cos = 2.0;
    for (int half = 0; half < halves; half++) {
        DriftUnit* units = all + half * (L + 2);
        int worst = drift_worst(units, L + 2);
        if (!half) min_cos = drift_cosine(&units[worst]);
        if (g_rank == 0) report_drift(&tr->rep, t + 1, units, L + 2, worst, half);
    }
    free(all);
    return min_cos;
}

// The guard refused step t's update (executor.h): nothing of that step or after it in the chunk was
// applied. Where the chunk ran with a window, the steps it applied before t were computed on stale
// weights, and the damage the guard saw at t (a loss measured on those weights) may be theirs: the
// run goes back to the chunk's start, its consistency point (the snapshot), and those steps are
// undone (their log.jsonl records removed). At W = 0 they are what a synchronous run computes and
// stay: the weights and moments are those before t. Either way the stage drops what the chunk left
// (stashes, gradients; the int8 sync's residuals, which hold the refused step's rounding), the data
// loaders skip the micro-batches of every step undone and of t (the batches around a spike, as
// PaLM's restarts skip them), the window halves, and the run goes on. Rollbacks in a row at W = 0
// stop it, the last checkpoint intact (none is written on this path). Returns the step to go on from.
static int rollback(Trainer* tr, int chunk_start, int chunk) {
    TrainArgs* a = &tr->a;
    RunState* rs = &tr->state;
    int* windows = (int*)malloc_check(tr->comm.P * sizeof(int));
    int t = tr->ex.halted_step, W_was = windows_now(tr, t, windows);
    int back = tr->snap_step >= 0 && t > tr->snap_step ? tr->snap_step : t;
    if (back == t && t > chunk_start) rs->rollbacks_in_row = 0; // the chunk applied some steps before this one, and they stay
    tr->redone += (long)(chunk_start + chunk - back) * a->grad_accum;
    if (W_was == 0) rs->rollbacks_in_row++;
    if (rs->rollbacks_in_row > a->max_rollbacks) { // this refusal would be one rollback more than allowed
        char left[OUTDIR_PATH_CAP + 64];
        if (tr->ckpt_step >= 0) snprintf(left, sizeof(left), "its last checkpoint (step %d) in %s is as it was", tr->ckpt_step, a->out_dir);
        else snprintf(left, sizeof(left), "it wrote no checkpoint (-n %d)", a->ckpt_every);
        fatal_all("step %d: %s after %d rollbacks in a row at W = 0 (--max-rollbacks %d): the run stops; %s", t + 1, tr->ex.halt_reason,
                  (int)rs->rollbacks_in_row - 1, a->max_rollbacks, left);
    }
    stage_discard(&tr->stage);
    if (back < t) {
        stage_snapshot_restore(&tr->stage, &tr->snap);
        rs->losses = tr->snap_state.losses;
        rs->gns = tr->snap_state.gns;
        char err[OUTDIR_PATH_CAP + 256];
        if (g_rank == 0 && report_log_cut(&tr->rep, back, err, sizeof(err))) td_fatal("rollback: %s", err);
    }
    if (tr->dsync) dp_sync_cuda_clear_residuals(tr->dsync);
    else if (tr->use_sync) dp_sync_clear_residuals(&tr->sync);
    if (tr->ex.data) {
        char err[256];
        DataLoaderState before;
        executor_data_before(&tr->ex, t, &before);
        if (dataloader_set_state(tr->ex.data, &before, err, sizeof(err))) td_fatal("rollback: %s", err);
        for (int m = 0; m < a->grad_accum; m++) // the offending step's micro-batches, skipped
            if (dataloader_next(tr->ex.data, stage_inputs(&tr->stage, 0), stage_targets(&tr->stage, 0))) td_fatal("training data: %s", tr->ex.data->err);
    }
    if (W_was > 0) rs->aew_halvings++;
    if (g_rank == 0) report_rollback(&tr->rep, t + 1, back, tr->ex.halt_reason, W_was, windows_now(tr, t, windows), (int)rs->rollbacks_in_row);
    free(windows);
    return back;
}

// phase 7: chunks of steps between consistency points: one step for the synchronous schedules (they
// flush anyway), up to --consistency-every for tdpipe, ended early at a validation, sample,
// checkpoint or drift-monitor step and at the last step before --aew-start opens the window;
// --aew auto runs its first step synchronously to measure beta. Returns 1 when a
// signal stopped the run (after its checkpoint), else 0.
static int train(Trainer* tr) {
    TrainArgs* a = &tr->a;
    RunState* rs = &tr->state;
    char err[1024];
    int step = tr->start_step;
    int stopping = 0; // the resumed checkpoint's validation, which a signal cut short (a second stop: it still owes it)
    if (tr->state.val_owed && tr->data.has_val && !validate(tr, step, &stopping)) {
        if (g_rank == 0) fprintf(stderr, "stopped by signal %d in step %d's validation; resume with the same flags and -y 1\n", stopping, step);
        return 1;
    }
    tr->state.val_owed = 0;
    int* windows = (int*)malloc_check(tr->comm.P * sizeof(int)); // (P) each stage's window now
    while (step < a->steps) {
        int measure = rs->aew_base < 0; // --aew auto: this step runs synchronously and measures beta
        int W_now = windows_now(tr, step, windows);
        int chunk = tr->kind != SCHED_TDPIPE || measure ? 1 : a->consistency_every - step % a->consistency_every;
        for (int k = 1; k < chunk; k++)
            if (is_boundary(step + k, a->val_every) || is_boundary(step + k, a->sample_every) || is_boundary(step + k, a->ckpt_every) ||
                is_boundary(step + k, a->drift_every) || step + k == a->aew_start) { // (the window opens at a flush)
                chunk = k;
                break;
            }
        if (step + chunk > a->steps) chunk = a->steps - step;
        ScheduleShape shape = {.kind = tr->kind, .P = tr->comm.P, .M = a->grad_accum, .W = W_now, .first_step = step, .n_steps = chunk,
                               .stage_W = windows};
        check_grad_cache(tr, &shape); // again: --aew auto has chosen its window by now
        Schedule sch;
        if (schedule_build(&sch, &shape, err, sizeof(err))) fatal_all("%s", err);
        // a chunk run with a window applies steps computed on stale weights: a rollback inside it
        // goes back to where it started, so that state is kept (host memory; a device's copied down)
        tr->snap_step = -1;
        if (!tr->synthetic && tr->kind == SCHED_TDPIPE && W_now > 0 && chunk > 1) {
            stage_snapshot_take(&tr->stage, &tr->snap);
            tr->snap_step = step;
            tr->snap_state = *rs;
        }
        tr->ex.losses = rs->losses;
        tr->ex.gns_state = rs->gns;
        int last = step + chunk - 1; // 0-based: its 1-based number ends the chunk
        tr->ex.drift_step = !tr->synthetic && is_boundary(last + 1, a->drift_every) ? last : -1;
        executor_run(&tr->ex, &sch);
        rs->losses = tr->ex.losses;
        rs->gns = tr->ex.gns_state;
        schedule_free(&sch);
        if (tr->ex.halted_step >= 0) {
            step = rollback(tr, step, chunk);
            continue;
        }
        step += chunk;
        rs->rollbacks_in_row = 0;
        if (measure) rs->aew_base = aew_measured(tr);
        if (tr->ex.drift_step >= 0) {
            double cos = drift_measure(tr, tr->ex.drift_step);
            int W_was = windows_now(tr, step - 1, windows);
            if (a->drift_min_cos > 0 && cos < a->drift_min_cos && W_was > 0) {
                rs->aew_halvings++;
                if (g_rank == 0) printf("drift: lowest cosine %.6f below --drift-min-cos %g: AEW W %d -> %d\n", cos, a->drift_min_cos, W_was, windows_now(tr, step - 1, windows));
            }
        }
        stopping = comm_max(&tr->comm, (int)g_stop_signal); // the signal any rank got
        if (!tr->synthetic) consistency_point(tr, step, step == a->steps, &stopping);
        if (stopping && step < a->steps) {
            if (g_rank == 0) fprintf(stderr, "stopped by signal %d after step %d; resume with the same flags and -y 1\n", stopping, step);
            free(windows);
            return !tr->synthetic;
        }
        // at the last step a stop leaves nothing to resume (-y 1: past -x): the run ends as it would have, with model.bin
        if (stopping && g_rank == 0) fprintf(stderr, "signal %d at the last step (%d): the run ends as it would have\n", stopping, step);
    }
    free(windows);
    return 0;
}

// phase 8: every micro-batch counted, each stage's measured op times and memory, the trace, the model
static void report_end(Trainer* tr) {
    TrainArgs* a = &tr->a;
    Comm* c = &tr->comm;
    char err[1024];
    long expect = (long)(a->steps - tr->start_step) * a->grad_accum + tr->redone;
    long counts[2] = {tr->ex.stats.forwards, tr->ex.stats.backwards};
    long* all_counts = g_rank == 0 ? (long*)malloc_check(sizeof(counts) * c->world_size) : NULL;
    comm_gather_to_root(c, counts, sizeof(counts), all_counts);
    StageSummary mine = report_stage_summary(&tr->ex);
    StageSummary* all = g_rank == 0 ? (StageSummary*)malloc_check(sizeof(StageSummary) * c->world_size) : NULL;
    comm_gather_to_root(c, &mine, sizeof(mine), all);
    if (g_rank == 0) {
        int lost = 0;
        for (int r = 0; r < c->world_size; r++) lost |= all_counts[2 * r] != expect || all_counts[2 * r + 1] != expect;
        printf("micro-batches: every rank ran %s forwards and backwards (expected %ld each)%s\n", lost ? "NOT" : "exactly", expect,
               lost ? ": LOST OR DUPLICATED" : "");
        report_end_table(&tr->rep, &tr->part, all); // world ranks 0 .. P-1 are replica 0's stages
        if (lost) exit(1);
    }
    free(all_counts);
    free(all);
    if (tr->synthetic) return;
    char model_path[1200];
    snprintf(model_path, sizeof(model_path), "%s/model.bin", a->out_dir);
    stage_to_host(&tr->stage);
    // the guard keeps updates finite; a model file's NaN never reaches model.bin either
    if (run_checkpoint_save_model(&tr->pl, model_path, err, sizeof(err))) fatal_all("%s not written: %s", model_path, err);
    if (g_rank == 0) printf("model: %s (llm.c fp32 format)\n", model_path);
}

// the Chrome trace of every op of every rank (after model.bin: a trace that cannot be written costs no model)
static void write_trace(Trainer* tr) {
    TrainArgs* a = &tr->a;
    Comm* c = &tr->comm;
    char err[1024];
    if (tr->trace.enabled) {
        size_t* tcounts = (size_t*)calloc_check(c->world_size, sizeof(size_t));
        TraceEvent* events = (TraceEvent*)comm_gatherv_to_root(c, tr->trace.events, tr->trace.n * sizeof(TraceEvent), tcounts);
        if (g_rank == 0) {
            size_t n = 0;
            for (int r = 0; r < c->world_size; r++) n += tcounts[r] / sizeof(TraceEvent);
            if (trace_write_json(a->trace_path, events, n, err, sizeof(err))) td_fatal("%s", err);
            printf("trace: %s (%zu ops)\n", a->trace_path, n);
        }
        free(events);
        free(tcounts);
    }
}

static void teardown(Trainer* tr) {
    if (tr->link != &tr->mpi_link) cuda_link_free(tr->link);
    dp_sync_cuda_free(tr->dsync); // (before the NCCL communicator it shares)
    if (tr->dp.average == cuda_dp_average) cuda_dp_free(tr->dp.ctx);
    if (tr->use_sync && !tr->dsync) dp_sync_free(&tr->sync);
    stage_destroy(&tr->stage);
    stage_snapshot_free(&tr->snap);
    executor_free(&tr->ex);
    trace_free(&tr->trace);
    partition_free(&tr->part);
    free(tr->profiled);
    free(tr->ranges);
    free(tr->stage_W);
    run_data_free(&tr->data);
    if (g_rank == 0 && tr->dec.ready) tokenizer_free(&tr->dec.tok);
    if (g_rank == 0) outdir_close(&tr->outdir);
    comm_finalize(&tr->comm);
}

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
    static Trainer tr; // zeroed: every phase fills its part
    comm_init(&tr.comm, &argc, &argv);
    parse(&tr, argc, argv);
    choose_device(&tr);
    make_grid(&tr);
    partition_profile(&tr);
    make_stage(&tr);
    make_links(&tr);
    open_outputs(&tr);
    make_executor(&tr);
    int stopped = train(&tr); // by a signal: the checkpoint is written, the end report is not
    if (!stopped) report_end(&tr);
    int log_lost = g_rank == 0 && report_close_log(&tr.rep); // a record lost (a full disk): the run did not do all it says
    if (stopped) {
        comm_finalize(&tr.comm);
        return log_lost;
    }
    write_trace(&tr);
    teardown(&tr);
    return log_lost;
}
