// The simulator over op times given on the command line (e.g. measured from a trainer's --trace by
// scripts/plot_trace.py --op-times): the schedule the trainer ran, its steady step time and bubble
// as the trainer reports them (between stage 0's updates; 1 - busy / time, steps 2..n-1).
// Usage: sim_replay --schedule S --stages P --micro-batches M [--aew W] --steps n --f ms,.. --b ms,..
//        [--bi ms,.. --bw ms,..] [--u ms,..] [--latency ms] [--msg-f ms,.. --msg-b ms,..] [--b-send x,..]
//        [--cores C] [--detail 1]
// --msg-f, --msg-b: each link's message time (P - 1 each: activation from stage s to s + 1, gradient
// from s + 1 to s), holding the link in the order sent (plot_trace.py --op-times measures them)
// --b-send: per stage, the share of a B op's time after which its input gradient left (the trainer
// sends it between the input- and the weight-gradient halves; plot_trace.py --op-times measures it;
// stage 0 sends none, its figure unused); without it the gradient leaves at B's end
// --cores C: the stages shared C cores (ranks oversubscribing a host), the times given being each
// op's work on a core of its own (plot_trace.py --op-times --cores C)
// --detail 1: also each stage's bubble (bubble_per_stage=, as log.jsonl's) and the share of the time
// k = 0..P stages computed at once (at_once=, as plot_trace.py --op-times prints it for the trace)
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "tdpipe/simulator.h"
#include <string.h>

// n comma-separated numbers >= 0 into out (n); exits naming the flag otherwise
static void parse_list(const char* flag, const char* s, int n, double* out) {
    const char* it = s;
    for (int i = 0; i < n; i++) {
        char* end;
        out[i] = strtod(it, &end);
        if (end == it || !(out[i] >= 0) || (i + 1 < n ? *end != ',' : *end != '\0')) {
            fprintf(stderr, "sim_replay: %s %s: expected %d %s separated by commas (one per stage, or per link for --msg-*)\n", flag, s, n,
                    strcmp(flag, "--b-send") ? "times >= 0" : "shares of B's time");
            exit(1);
        }
        it = end + 1;
    }
}

// steps 2..n-1 (1-based; the ops' steps 1..n-2): each stage's bubble as the trainer reports it, and
// how much of the time k = 0..P stages compute at once
static void print_detail(const SimResult* r, int n_steps) {
    printf("bubble_per_stage=");
    for (int s = 0; s < r->P; s++) printf("%s%.4f", s ? "," : "", r->steady_bubble[s]);
    double* share = (double*)calloc_check(r->P + 1, sizeof(double));
    simulator_at_once(r, 1, n_steps - 2, share);
    printf("\nat_once=");
    for (int k = 0; k <= r->P; k++) printf("%s%.4f", k ? "," : "", share[k]);
    printf("\n");
    free(share);
}

int main(int argc, char** argv) {
    const char *sched = "1f1b", *f = NULL, *b = NULL, *bi = NULL, *bw = NULL, *u = NULL, *mf = NULL, *mb = NULL, *bs = NULL;
    int P = 0, M = 0, W = 0, n_steps = 0, cores = 0, detail = 0;
    double latency = 0.0;
    const DevCli cli = {"sim_replay",
                        "usage: build/dev/sim_replay --schedule S --stages P --micro-batches M [--aew W] --steps n --f ms,.. --b ms,..\n"
                        "         [--bi ms,.. --bw ms,..] [--u ms,..] [--latency ms] [--msg-f ms,.. --msg-b ms,..] [--b-send x,..]\n"
                        "         [--cores C] [--detail 1]   (what each means: the comment at the top of dev/sim_replay.c)\n"};
    dev_cli_help(&cli, argc, argv);
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
#define VALUE dev_cli_value(&cli, argc, argv, i)
        if (!strcmp(flag, "--schedule")) sched = VALUE;
        else if (!strcmp(flag, "--stages")) P = (int)dev_cli_long(&cli, flag, VALUE, 1, 4096);
        else if (!strcmp(flag, "--micro-batches")) M = (int)dev_cli_long(&cli, flag, VALUE, 1, 1 << 20);
        else if (!strcmp(flag, "--aew")) W = (int)dev_cli_long(&cli, flag, VALUE, 0, 1 << 20);
        else if (!strcmp(flag, "--steps")) n_steps = (int)dev_cli_long(&cli, flag, VALUE, 3, 1 << 20);
        else if (!strcmp(flag, "--latency")) latency = dev_cli_nonneg(&cli, flag, VALUE) / 1e3;
        else if (!strcmp(flag, "--cores")) cores = (int)dev_cli_long(&cli, "--cores (0: a core per stage)", VALUE, 0, 1 << 16);
        else if (!strcmp(flag, "--detail")) detail = (int)dev_cli_long(&cli, flag, VALUE, 0, 1);
        // the lists are parsed below, once P is known
        else if (!strcmp(flag, "--f")) f = VALUE;
        else if (!strcmp(flag, "--b")) b = VALUE;
        else if (!strcmp(flag, "--bi")) bi = VALUE;
        else if (!strcmp(flag, "--bw")) bw = VALUE;
        else if (!strcmp(flag, "--u")) u = VALUE;
        else if (!strcmp(flag, "--msg-f")) mf = VALUE;
        else if (!strcmp(flag, "--msg-b")) mb = VALUE;
        else if (!strcmp(flag, "--b-send")) bs = VALUE;
        else dev_cli_refuse(&cli, "unknown option %s", flag);
#undef VALUE
    }
    SchedKind kind;
    if (schedule_parse_kind(sched, &kind)) {
        fprintf(stderr, "sim_replay: --schedule %s: expected gpipe, 1f1b, zbh1 or tdpipe\n", sched);
        return 1;
    }
    if (P < 1 || M < 1 || n_steps < 3 || !f || (!b && !(bi && bw))) {
        fprintf(stderr, "sim_replay: needs --stages, --micro-batches, --steps (>= 3), --f and --b (or --bi and --bw)\n");
        return 1;
    }
    if (!mf != !mb) {
        fprintf(stderr, "sim_replay: --msg-f and --msg-b come together (each link's message time both ways)\n");
        return 1;
    }
    if (mf && P < 2) {
        fprintf(stderr, "sim_replay: --msg-f and --msg-b need --stages >= 2 (they time the links between stages)\n");
        return 1;
    }
    double* t[7] = {NULL}; // each: F, B, BI, BW, U (P), messages forward and back (P - 1), in seconds
    const char* lists[7] = {f, b, bi, bw, u, mf, mb};
    const char* flags[7] = {"--f", "--b", "--bi", "--bw", "--u", "--msg-f", "--msg-b"};
    for (int k = 0; k < 7; k++) {
        if (!lists[k]) continue;
        int n = k < 5 ? P : P - 1;
        t[k] = (double*)malloc_check((size_t)n * sizeof(double));
        parse_list(flags[k], lists[k], n, t[k]);
        for (int s = 0; s < n; s++) t[k][s] /= 1e3;
    }
    double* b_send = NULL; // (P) shares of B
    if (bs) {
        b_send = (double*)malloc_check((size_t)P * sizeof(double));
        parse_list("--b-send", bs, P, b_send);
        for (int s = 0; s < P; s++)
            if (b_send[s] > 1.0) {
                fprintf(stderr, "sim_replay: --b-send %s: stage %d's share %g is above 1 (a share of B's time is in [0, 1])\n", bs, s, b_send[s]);
                return 1;
            }
    }
    Schedule sch;
    char err[512];
    if (schedule_build(&sch, &(ScheduleShape){.kind = kind, .P = P, .M = M, .W = W, .n_steps = n_steps}, err, sizeof(err))) {
        fprintf(stderr, "sim_replay: %s\n", err);
        return 1;
    }
    SimCost cost = {.t_f = t[0], .t_b = t[1], .t_bi = t[2], .t_bw = t[3], .t_u = t[4], .latency = latency, .t_msg_f = t[5], .t_msg_b = t[6], .b_send = b_send, .cores = cores};
    SimResult r;
    if (simulator_run(&r, &sch, &cost, err, sizeof(err))) {
        fprintf(stderr, "sim_replay: %s\n", err);
        return 1;
    }
    // stage 0's update-to-update time over steps 2..n-1 (1-based), as the trainer's step line reports it
    double first = -1.0, last = -1.0;
    int u_seen = 0;
    for (int i = 0; i < r.n_ops[0]; i++)
        if (r.ops[0][i].kind == OP_U) {
            u_seen++;
            if (u_seen == 1) first = r.end[0][i];
            if (u_seen == n_steps - 1) last = r.end[0][i];
        }
    printf("step_ms=%.4f\nbubble=%.4f\nmakespan_ms=%.4f\n", 1e3 * (last - first) / (n_steps - 2), 1.0 - r.steady_utilisation,
           1e3 * r.makespan);
    if (detail) print_detail(&r, n_steps);
    simulator_free(&r);
    schedule_free(&sch);
    for (int k = 0; k < 7; k++) free(t[k]);
    free(b_send);
    return 0;
}
