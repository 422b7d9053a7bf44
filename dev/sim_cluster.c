// The cluster simulator from the command line: a GPT shape, a GPU cluster and a parallel layout
// in; key=value lines out (throughput, FLOP/s per GPU, MFU, bubble, memory, op and message times).
// Usage: build/dev/sim_cluster --layers L --hidden C --heads NH --vocab V --seq T --gpus N --tp X
//        --pp Y --global-batch B [options]; --help lists every option with its default.
#include "llmc/common.h"
#include "tdpipe/cluster_sim.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>

// one line on stderr naming the problem, and exit 1
static void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "sim_cluster: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

typedef enum { OPT_INT, OPT_DOUBLE, OPT_STRING } OptType;

typedef struct {
    const char* name;
    OptType type;
    const char* def; // the default, as text; NULL: required
    const char* help;
    double lo, hi;     // a number's range (NaN and infinities are outside it); both 0: none given (strings)
    const char* value; // what the command line gave, else def
    int set;           // 1 when the command line gave it
} Opt;

static Opt opts[] = {
    {.name = "model", .type = OPT_STRING, .def = "", .help = "a preset shape (gpt3-13b, gpt3-175b, mtnlg-530b); the shape flags override it"},
    {.name = "layers", .type = OPT_INT, .def = NULL, .lo = 1, .hi = 1000, .help = "transformer layers L"},
    {.name = "hidden", .type = OPT_INT, .def = NULL, .lo = 1, .hi = 1048576, .help = "channels C"},
    {.name = "heads", .type = OPT_INT, .def = NULL, .lo = 1, .hi = 65536, .help = "attention heads NH"},
    {.name = "vocab", .type = OPT_INT, .def = "50257", .lo = 1, .hi = 10000000.0, .help = "vocabulary V"},
    {.name = "seq", .type = OPT_INT, .def = "2048", .lo = 1, .hi = 1048576, .help = "sequence length T"},
    {.name = "dropout", .type = OPT_INT, .def = "0", .lo = 0, .hi = 1, .help = "1: attention and hidden dropout kernels (Megatron-LM's default)"},
    {.name = "gpus", .type = OPT_INT, .def = NULL, .lo = 1, .hi = 1048576, .help = "GPUs N; data-parallel size D = N / (tp x pp)"},
    {.name = "tp", .type = OPT_INT, .def = "1", .lo = 1, .hi = 1024, .help = "tensor-parallel size (inside a node)"},
    {.name = "pp", .type = OPT_INT, .def = "1", .lo = 1, .hi = 1000, .help = "pipeline stages P"},
    {.name = "global-batch", .type = OPT_INT, .def = NULL, .lo = 1, .hi = 1048576, .help = "sequences per step over all replicas"},
    {.name = "micro-batch", .type = OPT_INT, .def = "1", .lo = 1, .hi = 65536, .help = "sequences per micro-batch b (M = global batch / (D b))"},
    {.name = "schedule", .type = OPT_STRING, .def = "1f1b", .help = "gpipe | 1f1b | interleaved | zbh1 | tdpipe"},
    {.name = "chunks", .type = OPT_INT, .def = "2", .lo = 1, .hi = 1000, .help = "interleaved: model chunks per stage"},
    {.name = "aew", .type = OPT_INT, .def = "0", .lo = 0, .hi = 1048576, .help = "tdpipe: asynchronous window W in micro-batches"},
    {.name = "jitter", .type = OPT_DOUBLE, .def = "0", .lo = 0, .hi = 10, .help = "op-time coefficient of variation beta (Gamma jitter)"},
    {.name = "seeds", .type = OPT_INT, .def = "5", .lo = 1, .hi = 1000, .help = "jitter seeds averaged when --jitter > 0"},
    {.name = "steps", .type = OPT_INT, .def = "6", .lo = 1, .hi = 1000, .help = "steps simulated (the steady step time is measured between updates)"},
    {.name = "recompute", .type = OPT_INT, .def = "1", .lo = 0, .hi = 1, .help = "1: full activation recomputation"},
    {.name = "grad-quant", .type = OPT_STRING, .def = "none", .help = "none | int8 (issue 11's format: 256 int8 + one fp32 scale a block; two-shot)"},
    {.name = "grad-dtype", .type = OPT_STRING, .def = "fp32", .help = "fp32 | bf16: gradients without --grad-quant"},
    {.name = "dp-algo", .type = OPT_STRING, .def = "ring", .help = "ring | two-shot: the data-parallel average (int8: two-shot)"},
    {.name = "dp-overlap", .type = OPT_INT, .def = "0", .lo = 0, .hi = 1, .help = "1: the average streams beside the last backward; 0: after it"},
    {.name = "dp-comm", .type = OPT_INT, .def = "1", .lo = 0, .hi = 1, .help = "0: the data-parallel average takes no time (what-if: what it costs)"},
    {.name = "early-dx", .type = OPT_STRING, .def = "auto", .help = "1: a backward's input gradient leaves after its input-gradient half (tdpipe's executor); 0: after the whole backward (Megatron-LM, DeepSpeed); auto: 1 with --schedule tdpipe, else 0"},
    {.name = "zero1", .type = OPT_INT, .def = "0", .lo = 0, .hi = 1, .help = "1: optimizer state sharded over the replicas (ZeRO-1)"},
    {.name = "scatter-gather", .type = OPT_INT, .def = "1", .lo = 0, .hi = 1, .help = "1: messages across nodes split over the TP ranks' NICs"},
    {.name = "placement", .type = OPT_STRING, .def = "replicas", .help = "replicas (a node holds replicas of a stage) | stages (consecutive stages) | auto (fewer bytes a step between nodes, as train_tdpipe's --placement auto)"},
    {.name = "partition", .type = OPT_STRING, .def = "auto", .help = "auto (the trainer's DP over layer times and speeds) | uniform (as even as the layers allow: Megatron-LM's split where they divide by --pp x chunks; Megatron-LM refuses the others, which this allows so that the article's 13B at --pp 8 with 2 chunks can be simulated)"},
    {.name = "stage-speed", .type = OPT_STRING, .def = "", .help = "relative speed of each stage's GPUs, e.g. 1,1,0.5,0.5 (default all 1)"},
    {.name = "hardware", .type = OPT_STRING, .def = "dgx-a100", .help = "the cluster preset"},
    {.name = "matmul-eff", .type = OPT_DOUBLE, .def = "", .lo = 1e-06, .hi = 1, .help = "override the preset's matmul efficiency"},
    {.name = "nic-bw", .type = OPT_DOUBLE, .def = "", .lo = 1e-06, .hi = 100000, .help = "override one NIC's bandwidth, GB/s"},
    {.name = "nics-per-node", .type = OPT_INT, .def = "", .lo = 1, .hi = 1024, .help = "override the NICs per node"},
    {.name = "nvlink-bw", .type = OPT_DOUBLE, .def = "", .lo = 1e-06, .hi = 1000000, .help = "override the GPU-to-GPU bandwidth inside a node, GB/s"},
};
#define N_OPTS ((int)(sizeof(opts) / sizeof(opts[0])))

static void usage(FILE* f) {
    fprintf(f, "usage: sim_cluster --layers L --hidden C --heads NH --seq T --gpus N --tp X --pp Y --global-batch B [options]\n"
               "  (or --model gpt3-175b ... for the shape); prints key=value lines\n\n");
    for (int i = 0; i < N_OPTS; i++) {
        char d[48];
        snprintf(d, sizeof(d), "%s", !opts[i].def ? "required" : opts[i].def[0] ? opts[i].def : "none");
        fprintf(f, "  --%-15s %s (default: %s)\n", opts[i].name, opts[i].help, d);
    }
}

static Opt* find(const char* name) {
    for (int i = 0; i < N_OPTS; i++)
        if (strcmp(opts[i].name, name) == 0) return &opts[i];
    return NULL;
}

static int given(const char* name) { return find(name)->set; }

// the option's value; a malformed number is refused naming the flag
static double number(const char* name) {
    const Opt* o = find(name);
    char* end;
    double v = strtod(o->value, &end);
    if (end == o->value || *end || (o->type == OPT_INT && v != floor(v)))
        fail("--%s %s: expected %s", name, o->value, o->type == OPT_INT ? "an integer" : "a number");
    // (NaN fails both: a NaN jitter never ended the Gamma sampler; a product of huge ints wrapped to 0)
    if (!(v >= o->lo && v <= o->hi)) fail("--%s %s: expected %s from %g to %g", name, o->value, o->type == OPT_INT ? "an integer" : "a number", o->lo, o->hi);
    return v;
}

static const char* text(const char* name) { return find(name)->value; }

int main(int argc, char** argv) {
    for (int i = 0; i < N_OPTS; i++) opts[i].value = opts[i].def;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        Opt* o = strncmp(argv[i], "--", 2) == 0 ? find(argv[i] + 2) : NULL;
        if (!o) fail("unknown option %s (--help lists them)", argv[i]);
        if (i + 1 >= argc) fail("%s needs a value", argv[i]);
        o->value = argv[++i];
        o->set = 1;
    }
    for (int k = 0; k < N_OPTS; k++) // every number given is checked, also one the schedule then ignores (--chunks 0 with 1f1b)
        if (opts[k].set && opts[k].type != OPT_STRING) number(opts[k].name);
    ClusterModel m = {.name = "custom"};
    if (given("model") && cluster_model_preset(text("model"), &m)) fail("--model %s: expected gpt3-13b, gpt3-175b or mtnlg-530b", text("model"));
    const char* shape[] = {"layers", "hidden", "heads"};
    for (int k = 0; k < 3; k++)
        if (!given("model") && !given(shape[k])) fail("--%s is required (or --model)", shape[k]);
    for (int k = 0; k < N_OPTS; k++)
        if (!opts[k].value) {
            if (given("model") && (!strcmp(opts[k].name, "layers") || !strcmp(opts[k].name, "hidden") || !strcmp(opts[k].name, "heads")))
                continue;
            fail("--%s is required", opts[k].name);
        }
    if (given("layers")) m.L = (int)number("layers");
    if (given("hidden")) m.C = (int)number("hidden");
    if (given("heads")) m.NH = (int)number("heads");
    if (!given("model") || given("vocab")) m.V = (int)number("vocab");
    if (!given("model") || given("seq")) m.T = (int)number("seq");
    m.dropout = (int)number("dropout");

    ClusterHw hw;
    if (cluster_hw_preset(text("hardware"), &hw)) fail("--hardware %s: expected %s", text("hardware"), cluster_hw_names());
    if (given("matmul-eff")) hw.gpu.matmul_eff = number("matmul-eff");
    if (given("nic-bw")) hw.net.nic_bw = number("nic-bw") * 1e9;
    if (given("nics-per-node")) hw.net.nics_per_node = (int)number("nics-per-node");
    if (given("nvlink-bw")) hw.node.nvlink_bw = number("nvlink-bw") * 1e9;
    if (!(hw.gpu.matmul_eff > 0 && hw.gpu.matmul_eff <= 1)) fail("--matmul-eff %g: expected a fraction in (0, 1]", hw.gpu.matmul_eff);
    if (!(hw.net.nic_bw > 0) || hw.net.nics_per_node < 1 || !(hw.node.nvlink_bw > 0))
        fail("--nic-bw, --nics-per-node and --nvlink-bw must be positive");

    ClusterLayout y = {0};
    y.gpus = (int)number("gpus");
    y.tp = (int)number("tp");
    y.P = (int)number("pp");
    y.b = (int)number("micro-batch");
    int gb = (int)number("global-batch");
    if (y.tp < 1 || y.P < 1 || y.gpus < 1 || gb < 1 || y.b < 1) fail("--gpus, --tp, --pp, --global-batch and --micro-batch must be at least 1");
    if ((double)y.tp * y.P > y.gpus) fail("--tp %d x --pp %d = %.0f exceeds --gpus %d", y.tp, y.P, (double)y.tp * y.P, y.gpus);
    if (y.gpus % (y.tp * y.P)) fail("--gpus %d is not a multiple of --tp %d x --pp %d = %d", y.gpus, y.tp, y.P, y.tp * y.P);
    y.D = y.gpus / (y.tp * y.P);
    if ((double)y.D * y.b > gb) fail("--global-batch %d is less than data-parallel %d x --micro-batch %d", gb, y.D, y.b);
    if (gb % (y.D * y.b)) fail("--global-batch %d is not a multiple of data-parallel %d x --micro-batch %d = %d", gb, y.D, y.b,
                y.D * y.b);
    y.M = gb / (y.D * y.b);
    if (schedule_parse_kind(text("schedule"), &y.kind)) fail("--schedule %s: expected gpipe, 1f1b, interleaved, zbh1 or tdpipe", text("schedule"));
    y.chunks = y.kind == SCHED_INTERLEAVED ? (int)number("chunks") : 1;
    y.W = (int)number("aew");
    // the schedule's needs in this program's terms (schedule_build names the trainer's flags)
    const char* sname = text("schedule");
    if (y.kind != SCHED_GPIPE && y.M < y.P)
        fail("--global-batch %d gives M = %d micro-batches per replica (/ data-parallel %d / --micro-batch %d), fewer than --pp %d: the %s schedule needs "
             "one per stage at least", gb, y.M, y.D, y.b, y.P, sname);
    if (y.kind == SCHED_INTERLEAVED && y.M % y.P)
        fail("--global-batch %d gives M = %d micro-batches per replica, not a multiple of --pp %d, which the interleaved schedule needs", gb, y.M, y.P);
    if ((double)y.M * y.chunks * number("steps") > 2e6) // (each a few ops per stage, held at once)
        fail("%d steps of M = %d micro-batches%s would be %.3g ops per stage to simulate, more than 2e6: give fewer --steps or a smaller --global-batch",
             (int)number("steps"), y.M, y.chunks > 1 ? " x chunks" : "", (double)y.M * y.chunks * number("steps"));
    y.recompute = (int)number("recompute");
    const char* q = text("grad-quant");
    const char* dt = text("grad-dtype");
    if (strcmp(q, "none") && strcmp(q, "int8")) fail("--grad-quant %s: expected none or int8", q);
    if (strcmp(dt, "fp32") && strcmp(dt, "bf16")) fail("--grad-dtype %s: expected fp32 or bf16", dt);
    y.grad = !strcmp(q, "int8") ? CLUSTER_GRAD_INT8 : !strcmp(dt, "bf16") ? CLUSTER_GRAD_BF16 : CLUSTER_GRAD_FP32;
    const char* algo = text("dp-algo");
    if (strcmp(algo, "ring") && strcmp(algo, "two-shot")) fail("--dp-algo %s: expected ring or two-shot", algo);
    y.dp_algo = !strcmp(algo, "ring") && y.grad != CLUSTER_GRAD_INT8 ? CLUSTER_DP_RING : CLUSTER_DP_TWO_SHOT;
    y.dp_overlap = (int)number("dp-overlap");
    y.no_dp = !(int)number("dp-comm");
    y.zero1 = (int)number("zero1");
    const char* ed = text("early-dx");
    if (strcmp(ed, "auto") && strcmp(ed, "0") && strcmp(ed, "1")) fail("--early-dx %s: expected auto, 0 or 1", ed);
    y.early_dx = !strcmp(ed, "auto") ? y.kind == SCHED_TDPIPE : !strcmp(ed, "1");
    y.scatter_gather = (int)number("scatter-gather");
    const char* pl = text("placement");
    if (placement_parse(pl, &y.placement, &y.placement_auto)) fail("--placement %s: expected replicas, stages or auto", pl);

    const char* part = text("partition");
    if (strcmp(part, "auto") && strcmp(part, "uniform")) fail("--partition %s: expected auto or uniform", part);
    y.balance = !strcmp(part, "auto");
    double* speed = NULL; // (P)
    if (given("stage-speed")) {
        speed = (double*)malloc_check((size_t)y.P * sizeof(double));
        const char* it = text("stage-speed");
        for (int s = 0; s < y.P; s++) {
            char* end;
            speed[s] = strtod(it, &end);
            if (end == it || !(speed[s] > 0) || !(speed[s] <= 1e6) || (s + 1 < y.P ? *end != ',' : *end != '\0'))
                fail("--stage-speed %s: expected %d speeds in (0, 1e6] separated by commas (one per stage)", text("stage-speed"), y.P);
            it = end + 1;
        }
        y.speed = speed;
    }
    ClusterResult r;
    ClusterCosts c;
    char err[512];
    // the model's line first: its parameter count holds even for a layout that is refused
    printf("model=%s layers=%d hidden=%d heads=%d vocab=%d seq=%d params=%.6g\n", m.name, m.L, m.C, m.NH, m.V, m.T, cluster_params(&m));
    if (cluster_simulate(&hw, &m, &y, number("jitter"), (int)number("seeds"), (int)number("steps"), &r, &c, err, sizeof(err))) fail("%s", err);
    printf("hardware=%s gpus=%d tp=%d pp=%d dp=%d micro_batch=%d micro_batches=%d global_batch=%d\n", hw.name, y.gpus, y.tp, y.P, y.D,
           y.b, y.M, gb);
    printf("schedule=%s chunks=%d aew=%d jitter=%g recompute=%d grad=%s dp_algo=%s dp_overlap=%d zero1=%d early_dx=%d\n",
           schedule_kind_name(y.kind), y.chunks > 1 ? y.chunks : 1, y.W, number("jitter"), y.recompute,
           y.grad == CLUSTER_GRAD_INT8 ? "int8" : y.grad == CLUSTER_GRAD_BF16 ? "bf16" : "fp32",
           y.dp_algo == CLUSTER_DP_RING ? "ring" : "two-shot", y.dp_overlap, y.zero1, y.early_dx);
    printf("step_s=%.6g\nsamples_per_s=%.6g\ntokens_per_s=%.6g\ntflops_per_gpu=%.4g\nhfu=%.4f\nmfu=%.4f\nbubble=%.4f\n", r.step_s,
           r.samples_per_s, r.tokens_per_s, r.tflops_per_gpu, r.hfu, r.mfu, r.bubble);
    printf("mem_gib_per_gpu=%.3f\nmem_async_gib=%.3f\nstaleness=%d\n", r.mem_gib_per_gpu, r.mem_async_gib, r.staleness);
    printf("stage0_f_ms=%.4g stage0_b_ms=%.4g stage0_u_ms=%.4g tp_comm_ms=%.4g\n", 1e3 * c.t_f[0], 1e3 * c.t_b[0], 1e3 * c.t_u[0],
           1e3 * c.tp_comm[0]);
    printf("msg_mb=%.4g msg_ms=%.4g dp_ms=%.4g dp_mb_sent=%.4g\n", c.msg_bytes / 1e6, c.Q > 1 ? 1e3 * c.t_msg_f[0] : 0.0,
           1e3 * c.t_dp[0], c.dp_bytes[0] / 1e6);
    printf("placement=%s", placement_name(c.placement));
    if (y.placement_auto)
        printf(" placement_auto_mb_between_nodes=stages:%.6g,replicas:%.6g", c.place_cross[PLACE_STAGES_FIRST] / 1e6,
               c.place_cross[PLACE_REPLICAS_FIRST] / 1e6);
    printf("\nlayers_per_virtual_stage=");
    for (int q = 0; q < c.Q; q++) printf("%s%d", q ? "," : "", c.first[q + 1] - c.first[q]);
    printf("\nnode_group_of_stage=");
    for (int s = 0; s < c.P; s++) printf("%s%d", s ? "," : "", c.group[s]);
    printf("\n");
    cluster_costs_free(&c);
    free(speed);
    return 0;
}
