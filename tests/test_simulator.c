// Tests of tdpipe/simulator: the textbook bubble of 1F1B and GPipe, ZB-H1's smaller bubble,
// tdpipe W = 0 identical to 1F1B, tdpipe against 1F1B under jitter, latency by hand, the jitter
// distribution, determinism, per-op timing invariants, deadlock and missing-cost errors;
// interleaved 1F1B's bubble (P - 1) / (v M), messages on links and the data-parallel average by
// hand, and overlapped communication never slower than communication that blocks; stages sharing
// cores (processor sharing) by hand, work-conserving on one core, unchanged with a core each.
#include "tdpipe/simulator.h"
#include "tests/test.h"
#include <math.h>
#include <string.h>

#define MAXP 16
static double T_F[MAXP], T_B[MAXP], T_BI[MAXP], T_BW[MAXP];

static void unit_costs(void) {
    for (int s = 0; s < MAXP; s++) T_F[s] = 1.0, T_B[s] = 2.0, T_BI[s] = 1.0, T_BW[s] = 1.0;
}

static SimCost cost_of(double cv, uint64_t seed, double latency) {
    SimCost c = {.t_f = T_F, .t_b = T_B, .t_bi = T_BI, .t_bw = T_BW, .latency = latency, .jitter_cv = cv, .seed = seed};
    return c;
}

// builds and simulates; returns the makespan, or -1 on any error (printed)
static double simulate(SchedKind k, int P, int M, int W, int n, double cv, uint64_t seed, SimResult* keep) {
    Schedule sch;
    SimResult r;
    char err[512];
    if (schedule_build(&sch, &(ScheduleShape){.kind = k, .P = P, .M = M, .W = W, .n_steps = n}, err, sizeof(err))) {
        printf("  build: %s\n", err);
        return -1;
    }
    SimCost c = cost_of(cv, seed, 0.0);
    int rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    schedule_free(&sch);
    if (rc) {
        printf("  simulate: %s\n", err);
        return -1;
    }
    double mk = r.makespan;
    if (keep) *keep = r;
    else simulator_free(&r);
    return mk;
}

// 1F1B and GPipe, one step, F = 1, B = 2, U = 0: every stage computes 3M and the pipeline takes
// (M + P - 1)(F + B), so bubble = (P - 1) / (M + P - 1) (Narayanan et al. 2021, §2.2). Times are
// small integers, exact in double, so makespan and busy are checked bitwise; the fractions are
// two differently-rounded divisions of the same rationals, equal within 1e-12.
static void test_textbook_bubble(void) {
    int ok_1f1b = 1, ok_gpipe = 1, ok_zb = 1, ok_zb_smaller = 1, ok_sum = 1;
    for (int P = 1; P <= 8; P++)
        for (int M = P; M <= 3 * P; M++)
            for (int k = 0; k < 2; k++) {
                SimResult r;
                SchedKind kind = k ? SCHED_GPIPE : SCHED_1F1B;
                if (simulate(kind, P, M, 0, 1, 0.0, 0, &r) < 0) { ok_1f1b = ok_gpipe = 0; continue; }
                int ok = r.makespan == 3.0 * (M + P - 1);
                double want = (double)(P - 1) / (M + P - 1), mean_bubble = 0;
                for (int s = 0; s < P; s++) {
                    ok &= r.busy[s] == 3.0 * M && fabs(r.bubble[s] - want) <= 1e-12;
                    mean_bubble += r.bubble[s] / P;
                }
                ok &= fabs(r.utilisation - (double)M / (M + P - 1)) <= 1e-12;
                ok_sum &= fabs(1.0 - r.utilisation - mean_bubble) <= 1e-12;
                if (kind == SCHED_1F1B) ok_1f1b &= ok;
                else ok_gpipe &= ok;
                simulator_free(&r);
            }
    CHECK(ok_1f1b, "1f1b F=1 B=2, one step: makespan 3(M+P-1), busy 3M, bubble (P-1)/(M+P-1), P 1..8, M P..3P");
    CHECK(ok_gpipe, "gpipe: the same makespan and bubble");
    CHECK(ok_sum, "1 - utilisation = mean of the per-stage bubbles");
    // ZB-H1 with F = BI = BW = 1: bubble (P - 1)(F + BI - BW) = P - 1 (Qi et al. 2023, table 1)
    for (int P = 1; P <= 8; P++)
        for (int M = P; M <= 3 * P; M++) {
            double zb = simulate(SCHED_ZBH1, P, M, 0, 1, 0.0, 0, NULL), ob = simulate(SCHED_1F1B, P, M, 0, 1, 0.0, 0, NULL);
            ok_zb &= zb == 3.0 * M + P - 1;
            if (P >= 2) ok_zb_smaller &= zb < ob;
        }
    CHECK(ok_zb, "zbh1 F=BI=BW=1, one step: makespan 3M + P - 1 (bubble P-1 against 1F1B's 3(P-1))");
    CHECK(ok_zb_smaller, "zbh1's bubble is smaller than 1f1b's for every P >= 2");
    // a cost model without BI and BW times (simulator.h: NULL is B / 2 each): F = 1, B = 2 gives BI = BW = 1,
    // so zbh1 takes the same 3M + P - 1 as with them given, P 4, M 8: 27
    Schedule zs;
    SimResult zr;
    char zerr[512];
    int zrc = schedule_build(&zs, &(ScheduleShape){.kind = SCHED_ZBH1, .P = 4, .M = 8, .n_steps = 1}, zerr, sizeof(zerr));
    SimCost halves = {.t_f = T_F, .t_b = T_B};
    zrc = zrc || simulator_run(&zr, &zs, &halves, zerr, sizeof(zerr));
    CHECK(zrc == 0 && zr.makespan == 27.0, "zbh1 from F and B alone: BI = BW = B / 2, makespan 3M + P - 1 = 27 (got %g)", zrc ? -1.0 : zr.makespan);
    if (zrc == 0) simulator_free(&zr);
    schedule_free(&zs);
    double z = simulate(SCHED_ZBH1, 8, 16, 0, 1, 0.0, 0, NULL);
    printf("     P=8 M=16: zbh1 bubble %.4f vs 1f1b %.4f\n", 1.0 - 48.0 / z, 7.0 / 23.0);
}

static void test_tdpipe(void) {
    int ok_eq = 1, ok_not_worse = 1, ok_better = 1, n_pairs = 0;
    double worst_gain = INFINITY;
    for (int P = 2; P <= 6; P++)
        for (int M = P; M <= 2 * P; M += 2) {
            SimResult a, b;
            if (simulate(SCHED_1F1B, P, M, 0, 4, 0.3, 7, &a) < 0 || simulate(SCHED_TDPIPE, P, M, 0, 4, 0.3, 7, &b) < 0) {
                ok_eq = 0;
                continue;
            }
            for (int s = 0; s < P; s++)
                ok_eq &= a.n_ops[s] == b.n_ops[s] && memcmp(a.start[s], b.start[s], a.n_ops[s] * sizeof(double)) == 0 &&
                         memcmp(a.end[s], b.end[s], a.n_ops[s] * sizeof(double)) == 0;
            simulator_free(&a);
            simulator_free(&b);
        }
    CHECK(ok_eq, "tdpipe W=0 simulates identically to 1f1b (every op's start and end, bitwise) at beta 0.3, 4 steps");
    // Common random numbers: an op's jitter depends only on (seed, stage, kind, step, mb), so both
    // schedules see the same op times and utilisation compares makespans. Fixed op orders admit
    // list-scheduling anomalies in principle, so this is an empirical check over a grid.
    for (int P = 2; P <= 8; P++)
        for (int M = P; M <= 2 * P; M += 3)
            for (int W = 1; W <= 2 * P; W++)
                for (uint64_t seed = 1; seed <= 3; seed++) {
                    double a = simulate(SCHED_1F1B, P, M, 0, 4, 0.3, seed, NULL);
                    double b = simulate(SCHED_TDPIPE, P, M, W, 4, 0.3, seed, NULL);
                    n_pairs++;
                    if (a < 0 || b < 0 || b > a) ok_not_worse = 0;
                    if (a > 0 && b > 0 && a / b < worst_gain) worst_gain = a / b;
                }
    CHECK(ok_not_worse, "beta 0.3, 4 steps: tdpipe W>=1 utilisation >= 1f1b's in all %d cases (P 2..8, W 1..2P, 3 seeds; min speed-up %.4f)",
          n_pairs, worst_gain);
    for (int P = 2; P <= 8; P++)
        for (int M = P; M <= 2 * P; M += 3)
            for (int W = 1; W <= 2 * P; W++) {
                double a = simulate(SCHED_1F1B, P, M, 0, 4, 0.0, 0, NULL), b = simulate(SCHED_TDPIPE, P, M, W, 4, 0.0, 0, NULL);
                if (!(b < a)) ok_better = 0;
            }
    CHECK(ok_better, "beta 0, 4 steps: tdpipe W>=1 finishes strictly sooner than 1f1b (it overlaps the step boundaries)");

    // the orders the event-driven policy takes under jitter are valid schedules (every op once,
    // versions by the rule, dependencies met) and stay inside the buffers the executor reserves
    int ok_valid = 1, ok_limits = 1, n_runs = 0;
    char err[512];
    for (int P = 1; P <= 6; P++)
        for (int M = P; M <= 2 * P; M += 2)
            for (int W = 1; W <= 2 * M + 1; W += 2)
                for (uint64_t seed = 1; seed <= 2; seed++) {
                    Schedule sch;
                    SimResult r;
                    SimCost c = cost_of(0.5, seed, 0.25);
                    if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = P, .M = M, .W = W, .n_steps = 3}, err, sizeof(err)) || simulator_run(&r, &sch, &c, err, sizeof(err))) {
                        printf("  P=%d M=%d W=%d: %s\n", P, M, W, err);
                        ok_valid = 0;
                        continue;
                    }
                    Schedule ran = sch;
                    ran.ops = r.ops;
                    ran.n_ops = r.n_ops;
                    if (schedule_validate(&ran, err, sizeof(err))) {
                        if (ok_valid) printf("  P=%d M=%d W=%d seed %d: %s\n", P, M, W, (int)seed, err);
                        ok_valid = 0;
                    }
                    for (int s = 0; s < P; s++) {
                        int inflight, versions, slots, stashes, rings;
                        schedule_stage_stats(&ran, s, &inflight, &versions);
                        schedule_stage_limits(&sch, s, &slots, &stashes, &rings);
                        if (inflight > slots || versions - 1 > stashes || schedule_stage_grad_slots(&ran, s) > rings) ok_limits = 0;
                    }
                    n_runs++;
                    simulator_free(&r);
                    schedule_free(&sch);
                }
    CHECK(ok_valid, "tdpipe under jitter 0.5 and latency 0.25: the %d orders the policy took validate", n_runs);
    CHECK(ok_limits, "  and stay within schedule_stage_limits (activation slots, stashes, gradient ring)");
}

static void test_jitter(void) {
    const int n = 20000;
    double cvs[2] = {0.3, 2.0};
    for (int c = 0; c < 2; c++) {
        double sum = 0, sq = 0, mn = INFINITY;
        for (int i = 0; i < n; i++) {
            Op op = {OP_F, i / 16, i % 16, 0, 0};
            double x = simulator_jitter(42, i % 5, &op, cvs[c]);
            sum += x, sq += x * x;
            if (x < mn) mn = x;
        }
        double mean = sum / n, cv = sqrt(sq / n - mean * mean) / mean;
        // standard errors at n = 20000: mean cv/141 (0.0021, 0.014); tolerances are ~5 of them
        double tol_mean = cvs[c] < 1 ? 0.01 : 0.07;
        int ok = fabs(mean - 1.0) < tol_mean && mn > 0 && (cvs[c] > 1 || fabs(cv - cvs[c]) < 0.01);
        CHECK(ok, "jitter beta %.1f: positive, mean %.4f ~ 1%s (cv %.4f)", cvs[c], mean, cvs[c] < 1 ? ", cv ~ beta" : "", cv);
    }
    Op op = {OP_B, 3, 1, 3, 0};
    CHECK(simulator_jitter(5, 2, &op, 0.0) == 1.0, "beta 0: factor exactly 1");
    double m1 = simulate(SCHED_TDPIPE, 4, 8, 2, 3, 0.3, 11, NULL), m2 = simulate(SCHED_TDPIPE, 4, 8, 2, 3, 0.3, 11, NULL);
    double m3 = simulate(SCHED_TDPIPE, 4, 8, 2, 3, 0.3, 12, NULL);
    CHECK(m1 == m2 && m1 != m3, "deterministic for a seed (%.17g twice), another seed differs (%.17g)", m1, m3);
}

static void test_timing_invariants(void) {
    Schedule sch;
    SimResult r;
    char err[512];
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_ZBH1, .P = 4, .M = 6, .W = 0, .n_steps = 2}, err, sizeof(err));
    SimCost c = cost_of(0.5, 3, 0.1);
    int rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    int ok = rc == 0;
    for (int s = 0; ok && s < 4; s++) {
        double busy = 0;
        for (int i = 0; i < r.n_ops[s]; i++) {
            double d = r.end[s][i] - r.start[s][i];
            ok &= d >= 0 && (i == 0 || r.start[s][i] >= r.end[s][i - 1]);
            busy += d;
        }
        ok &= fabs(busy - r.busy[s]) <= 1e-9 * r.busy[s]; // sum of differences vs sum of durations
    }
    CHECK(ok, "zbh1 with jitter and latency: ops on a stage do not overlap, durations add up to busy");
    if (rc == 0) simulator_free(&r);

    // gpipe P=2 M=1, latency 0.5, U = 0: F0 [0,1], F1 [1.5,2.5], B1 [2.5,4.5], B0 [5,7],
    // U0 at 7, U1 at 7 + 0.5 (stage 0's gradients cross over) -> makespan 7.5
    schedule_free(&sch);
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 1, .W = 0, .n_steps = 1}, err, sizeof(err));
    c = cost_of(0.0, 0, 0.5);
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc == 0 && r.makespan == 7.5 && r.start[1][0] == 1.5 && r.start[0][1] == 5.0,
          "latency by hand: gpipe P=2 M=1, latency 0.5 -> makespan 7.5 (got %g)", rc ? -1.0 : r.makespan);
    if (rc == 0) simulator_free(&r);

    c.t_f = NULL;
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "no F time for stage 0"), "missing op time refused: %s", err);

    // crossed orders (see test_schedule): the simulator reports the deadlock
    schedule_free(&sch);
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 2, .M = 2, .W = 0, .n_steps = 1}, err, sizeof(err));
    Op a = sch.ops[0][1], b = sch.ops[1][1];
    sch.ops[0][1] = sch.ops[0][2], sch.ops[0][2] = a;
    sch.ops[1][1] = sch.ops[1][2], sch.ops[1][2] = b;
    c = cost_of(0.0, 0, 0.0);
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "stage 0 stuck at op 1 (B0.0)") && strstr(err, "stage 1 stuck at op 1 (F0.1)"),
          "deadlock reported with the stuck stages and ops: %s", err);
    schedule_free(&sch);
}

// Interleaved 1F1B with v chunks, F = 1 and B = 2 per chunk: a stage computes 3 v M and the bubble
// is 3 (P - 1), i.e. (P - 1) / (v M) of the ideal (Narayanan et al. 2021, section 2.2.2). Integer
// times: checked bitwise. The lists validate (the executor's rules), for 1 and 2 steps.
static void test_interleaved(void) {
    int ok_bubble = 1, ok_valid = 1, n = 0;
    double t_f[64], t_b[64];
    for (int q = 0; q < 64; q++) t_f[q] = 1.0, t_b[q] = 2.0;
    char err[512];
    for (int P = 2; P <= 6; P++)
        for (int v = 2; v <= 4; v++)
            for (int M = P; M <= 3 * P; M += P)
                for (int steps = 1; steps <= 2; steps++) {
                    if (P * v > 64) continue;
                    Schedule sch;
                    if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_INTERLEAVED, .P = P, .M = M, .n_steps = steps, .chunks = v}, err, sizeof(err))) {
                        printf("  P=%d v=%d M=%d: %s\n", P, v, M, err);
                        ok_valid = 0;
                        continue;
                    }
                    if (schedule_validate(&sch, err, sizeof(err))) {
                        if (ok_valid) printf("  P=%d v=%d M=%d: %s\n", P, v, M, err);
                        ok_valid = 0;
                    }
                    SimCost c = {.t_f = t_f, .t_b = t_b};
                    SimResult r;
                    if (simulator_run(&r, &sch, &c, err, sizeof(err))) {
                        ok_bubble = 0;
                        schedule_free(&sch);
                        continue;
                    }
                    double ideal = 3.0 * v * M;
                    ok_bubble &= r.makespan == steps * (ideal + 3.0 * (P - 1));
                    for (int s = 0; s < P; s++) ok_bubble &= r.busy[s] == steps * ideal;
                    ok_bubble &= fabs((r.makespan / steps - ideal) / ideal - (double)(P - 1) / (v * M)) <= 1e-12;
                    n++;
                    simulator_free(&r);
                    schedule_free(&sch);
                }
    CHECK(ok_valid, "interleaved lists build and validate: P 2..6, v 2..4, M = P, 2P, 3P, 1 and 2 steps");
    // the warmup as Megatron-LM counts it (get_num_warmup_microbatches in its schedules.py: 2 (P - s - 1)
    // + (v - 1) P forwards before the first backward, at most all v M of them, all of them when M = P),
    // in Megatron's order (forward k: chunk (k mod P v) / P, micro-batch (k / P v) P + k mod P); the
    // lists run forwards alone that long and one more, which the steady phase opens with
    int ok_warm = 1, warm_cases = 0;
    for (int P = 2; P <= 6; P++)
        for (int v = 2; v <= 4; v++)
            for (int M = P; M <= 3 * P; M += P) {
                Schedule sch;
                if (schedule_build(&sch, &(ScheduleShape){.kind = SCHED_INTERLEAVED, .P = P, .M = M, .n_steps = 1, .chunks = v}, err, sizeof(err))) {
                    ok_warm = 0;
                    continue;
                }
                for (int s = 0; s < P; s++) {
                    int want = M == P ? v * M : 2 * (P - s - 1) + (v - 1) * P, got = 0;
                    if (want > v * M) want = v * M;
                    while (got < sch.n_ops[s] && sch.ops[s][got].kind == OP_F) {
                        const Op* o = &sch.ops[s][got];
                        ok_warm &= o->chunk == (got % (P * v)) / P && o->mb == got / (P * v) * P + got % P;
                        got++;
                    }
                    ok_warm &= got == (want < v * M ? want + 1 : v * M); // (the steady phase opens with one more forward)
                    warm_cases++;
                }
                schedule_free(&sch);
            }
    CHECK(ok_warm, "interleaved warmup: Megatron-LM's count of forwards before the first backward, in its order (%d stage lists)", warm_cases);
    CHECK(ok_bubble, "interleaved, no jitter, no communication: bubble = (P - 1) / (v M) of the ideal, exactly (%d cases)", n);
    Schedule sch;
    CHECK(schedule_build(&sch, &(ScheduleShape){.kind = SCHED_INTERLEAVED, .P = 4, .M = 6, .n_steps = 1, .chunks = 2}, err, sizeof(err)) &&
              strstr(err, "not a multiple of --stages 4"),
          "interleaved with M not a multiple of P refused: %s", err);
    CHECK(schedule_build(&sch, &(ScheduleShape){.kind = SCHED_INTERLEAVED, .P = 4, .M = 8, .n_steps = 1}, err, sizeof(err)) &&
              strstr(err, "--chunks"),
          "interleaved with one chunk refused: %s", err);
    CHECK(schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 4, .M = 8, .n_steps = 1, .chunks = 2}, err, sizeof(err)) &&
              strstr(err, "needs the interleaved schedule"),
          "chunks with another schedule refused: %s", err);
    CHECK(schedule_trainer_supports(SCHED_INTERLEAVED, err, sizeof(err)) && strstr(err, "contiguous") &&
              schedule_trainer_supports(SCHED_TDPIPE, err, sizeof(err)) == 0,
          "the trainer refuses interleaved, saying why: %s", err);
}

static double run_makespan(SchedKind k, int P, int M, int W, int v, const SimCost* c) {
    Schedule sch;
    SimResult r;
    char err[512];
    if (schedule_build(&sch, &(ScheduleShape){.kind = k, .P = P, .M = M, .W = W, .n_steps = 3, .chunks = v}, err, sizeof(err))) return -1;
    int rc = simulator_run(&r, &sch, c, err, sizeof(err));
    schedule_free(&sch);
    if (rc) {
        printf("  %s\n", err);
        return -1;
    }
    double mk = r.makespan;
    simulator_free(&r);
    return mk;
}

static void test_comm(void) {
    // gpipe P = 2, M = 1, F 1, B 2, messages of 0.5 on their links, latency 0: F0 [0,1] lands at 1.5,
    // F1 [1.5,2.5], B1 [2.5,4.5] lands at 5, B0 [5,7], U at 7 (makespan 7). A data-parallel average of
    // 1 after the last backward: U at 8; beside it: stage 0 max(7, 5 + 1), stage 1 max(4.5, 2.5 + 1): 7.
    double msg[1] = {0.5}, dp[2] = {1.0, 1.0};
    SimCost c = {.t_f = T_F, .t_b = T_B, .t_msg_f = msg, .t_msg_b = msg};
    Schedule sch;
    SimResult r;
    char err[512];
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 1, .n_steps = 1}, err, sizeof(err));
    int rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc == 0 && r.makespan == 7.0 && r.start[1][0] == 1.5 && r.start[0][1] == 5.0, "messages by hand: makespan 7 (got %g)",
          rc ? -1.0 : r.makespan);
    if (rc == 0) simulator_free(&r);
    c.t_dp = dp;
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc == 0 && r.makespan == 8.0, "a DP average of 1 after the last backward: U at 8 (got %g)", rc ? -1.0 : r.makespan);
    if (rc == 0) simulator_free(&r);
    c.dp_overlap = 1;
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc == 0 && r.makespan == 7.0, "  overlapped with that backward: hidden, U at 7 (got %g)", rc ? -1.0 : r.makespan);
    if (rc == 0) simulator_free(&r);
    schedule_free(&sch);
    // the input gradient leaving halfway through B (b_send 0.5, as the executor sends it after BI),
    // M = 2: GPipe's stage 1 runs F [1.5, 2.5], [2.5, 3.5], B [3.5, 5.5], [5.5, 7.5], sending at 4.5
    // and 6.5, so stage 0's backwards run [5, 7], [7, 9] (at B's end: [6, 8], [8, 10]). tdpipe W 1
    // (its event-driven run learns of B's message when B starts): stage 1 runs F, B, F, B from 1.5,
    // its first gradient leaves at 3.5 and stage 0's first backward starts at 4 (at B's end: 5)
    double half[2] = {0.5, 0.5};
    SimCost ce = {.t_f = T_F, .t_b = T_B, .t_msg_f = msg, .t_msg_b = msg, .b_send = half};
    for (int k = 0; k < 2; k++) {
        SchedKind kind = k ? SCHED_TDPIPE : SCHED_GPIPE;
        double want_b0 = k ? 4.0 : 5.0, want_end = 9.0;
        schedule_build(&sch, &(ScheduleShape){.kind = kind, .P = 2, .M = 2, .W = k, .n_steps = 1}, err, sizeof(err));
        rc = simulator_run(&r, &sch, &ce, err, sizeof(err));
        CHECK(rc == 0 && r.makespan == want_end && r.start[0][2] == want_b0,
              "%s: B's input gradient sent after half of it: stage 0's first backward at %g, makespan %g (got %g, %g)",
              schedule_kind_name(kind), want_b0, want_end, rc ? -1.0 : r.start[0][2], rc ? -1.0 : r.makespan);
        if (rc == 0) simulator_free(&r);
        schedule_free(&sch);
    }
    ce.t_msg_f = ce.t_msg_b = NULL; // latency 0.5 instead of links
    ce.latency = 0.5;
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 2, .n_steps = 1}, err, sizeof(err));
    rc = simulator_run(&r, &sch, &ce, err, sizeof(err));
    CHECK(rc == 0 && r.start[0][2] == 5.0 && r.makespan == 9.5, "  with latency 0.5 instead of links: the same, and U 0.5 later (its exchange): 5 and 9.5 (got %g, %g)",
          rc ? -1.0 : r.start[0][2], rc ? -1.0 : r.makespan);
    if (rc == 0) simulator_free(&r);
    schedule_free(&sch);
    // a link carries one message at a time: gpipe P = 2, M = 2, activations of 2 (F takes 1):
    // F0.0 lands at 3, F0.1 leaves at 3 (not 2) and lands at 5
    double slow[1] = {2.0};
    SimCost c2 = {.t_f = T_F, .t_b = T_B, .t_msg_f = slow};
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 2, .n_steps = 1}, err, sizeof(err));
    rc = simulator_run(&r, &sch, &c2, err, sizeof(err));
    CHECK(rc == 0 && r.start[1][0] == 3.0 && r.start[1][1] == 5.0, "messages queue on their link: stage 1 forwards at 3 and 5 (got %g, %g)",
          rc ? -1.0 : r.start[1][0], rc ? -1.0 : r.start[1][1]);
    if (rc == 0) simulator_free(&r);
    schedule_free(&sch);

    // Overlap never slower: messages on their own stream against the sender blocked for the
    // message's time (added to its op), and the average beside the backward against after it, for
    // every synchronous schedule (fixed orders: every time is a max-plus function of the op times)
    // and tdpipe. Op and message times differ per virtual stage: drawn from the jitter generator (the
    // op times themselves are not jittered, so the blocking op is exactly the op plus its message).
    int ok = 1, cases = 0;
    double f[24], b[24], bi[24], bw[24], mf[24], mb[24], fb[24], bb[24], bib[24], d[8], half_q[24];
    for (int q = 0; q < 24; q++) half_q[q] = 0.5;
    for (int P = 2; P <= 6; P += 2)
        for (int v = 1; v <= 2; v++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                int Q = P * v;
                for (int q = 0; q < Q; q++) {
                    Op key = {OP_F, 0, q, 0, 0};
                    f[q] = simulator_jitter(seed, q, &key, 0.5);
                    b[q] = 2 * simulator_jitter(seed + 10, q, &key, 0.5);
                    bi[q] = bw[q] = b[q] / 2;
                    mf[q] = 0.4 * simulator_jitter(seed + 20, q, &key, 0.5);
                    mb[q] = 0.4 * simulator_jitter(seed + 30, q, &key, 0.5);
                }
                for (int s = 0; s < P; s++) d[s] = 3.0 * simulator_jitter(seed + 40, s, &(Op){OP_U, 0, 0, 0, 0}, 0.5);
                for (int q = 0; q < Q; q++) { // blocking: the sender holds its compute while its messages leave
                    fb[q] = f[q] + (q < Q - 1 ? mf[q] : 0.0);
                    bb[q] = b[q] + (q > 0 ? mb[q - 1] : 0.0);
                    bib[q] = bi[q] + (q > 0 ? mb[q - 1] : 0.0);
                }
                SchedKind kinds[5] = {SCHED_GPIPE, SCHED_1F1B, SCHED_ZBH1, SCHED_TDPIPE, SCHED_INTERLEAVED};
                for (int k = 0; k < 5; k++) {
                    if ((kinds[k] == SCHED_INTERLEAVED) != (v == 2)) continue;
                    for (int W = 0; W <= (kinds[k] == SCHED_TDPIPE ? 4 : 0); W += 2) {
                        int M = 2 * P;
                        SimCost over = {.t_f = f, .t_b = b, .t_bi = bi, .t_bw = bw, .t_msg_f = mf,
                                        .t_msg_b = mb, .t_dp = d, .dp_overlap = 1};
                        SimCost after = over;
                        after.dp_overlap = 0;
                        SimCost block = {.t_f = fb, .t_b = bb, .t_bi = bib, .t_bw = bw, .t_dp = d};
                        SimCost early = over; // B's input gradient leaves after its first half, not at its end
                        early.b_send = half_q;
                        double a = run_makespan(kinds[k], P, M, W, v, &over), x = run_makespan(kinds[k], P, M, W, v, &after);
                        double y = run_makespan(kinds[k], P, M, W, v, &block), e = run_makespan(kinds[k], P, M, W, v, &early);
                        // early against at the end within 1e-12 of it: where B's message is on no critical path
                        // the times agree but for rounding (start + share (end - start) is not end's sum)
                        if (a < 0 || x < 0 || y < 0 || e < 0 || e > a * (1 + 1e-12) || a > x || x > y) {
                            if (ok) printf("  %s P=%d W=%d seed %d: input gradient early %.17g, overlapped %.17g, DP after %.6g, blocking %.6g\n",
                                           schedule_kind_name(kinds[k]), P, W, (int)seed, e, a, x, y);
                            ok = 0;
                        }
                        cases++;
                    }
                }
            }
    CHECK(ok, "overlapped communication is never slower than blocking, nor the overlapped DP average than the exposed one, nor an early input gradient than one at B's end (%d cases)", cases);
}

// Stages sharing cores. By hand: gpipe, P 2, M 2, F 1, B 2, one core: F0.1 on stage 0 and F0.0 on
// stage 1 share [1, 3], F0.1 on stage 1 runs alone [3, 4], B0.0 on stage 1 [4, 6], then B0.1 there
// and B0.0 on stage 0 share [6, 10] and B0.1 on stage 0 ends at 12, the total work: one core never
// idles while work is ready. The fixed point moves each factor by < 1e-9 of itself at the end, so
// times are checked within 1e-6. On one core, at the fixed point, the work (op times at full speed)
// equals the time some op computes, so the makespan is at least the total work. With a core per
// stage (cores >= P) nothing is shared and the result is bitwise the one without cores.
static void test_shared_cores(void) {
    unit_costs();
    Schedule sch;
    SimResult r;
    char err[512];
    SimCost c = cost_of(0.0, 1, 0.0);
    c.cores = 1;
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 2, .n_steps = 1}, err, sizeof(err));
    int rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc == 0 && fabs(r.makespan - 12.0) < 1e-6 && fabs(r.end[0][1] - 3.0) < 1e-6 && fabs(r.start[1][1] - 3.0) < 1e-6 &&
              fabs(r.end[1][2] - 6.0) < 1e-6 && fabs(r.end[1][3] - 10.0) < 1e-6,
          "one core by hand: gpipe P 2 M 2 takes 12, the total work (got %g)", rc ? -1.0 : r.makespan);
    if (!rc) simulator_free(&r);
    schedule_free(&sch);
    static const SchedKind kinds[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_ZBH1, SCHED_TDPIPE};
    int ok_same = 1, ok_conserve = 1, ok_slower = 1, n = 0;
    for (int k = 0; k < 4; k++)
        for (int P = 2; P <= 6; P += 2)
            for (int M = P; M <= 2 * P; M += P) {
                ScheduleShape shape = {.kind = kinds[k], .P = P, .M = M, .W = kinds[k] == SCHED_TDPIPE ? P : 0, .n_steps = 3};
                if (schedule_build(&sch, &shape, err, sizeof(err))) {
                    ok_same = 0;
                    continue;
                }
                SimResult base, wide, one;
                SimCost cc = cost_of(0.3, 7, 0.05);
                int rc0 = simulator_run(&base, &sch, &cc, err, sizeof(err));
                cc.cores = P;
                int rc1 = simulator_run(&wide, &sch, &cc, err, sizeof(err));
                cc.cores = 1;
                int rc2 = simulator_run(&one, &sch, &cc, err, sizeof(err));
                if (rc0 || rc1 || rc2) {
                    printf("  %s\n", err);
                    ok_same = 0;
                } else {
                    for (int s = 0; s < P; s++)
                        for (int i = 0; i < base.n_ops[s]; i++)
                            ok_same &= base.start[s][i] == wide.start[s][i] && base.end[s][i] == wide.end[s][i];
                    double work = 0.0; // the run's op times at full speed: the core-per-stage run's busy time
                    for (int s = 0; s < P; s++) work += base.busy[s];
                    ok_conserve &= one.makespan >= work * (1.0 - 1e-6);
                    ok_slower &= one.makespan >= base.makespan;
                    n++;
                }
                if (!rc0) simulator_free(&base);
                if (!rc1) simulator_free(&wide);
                if (!rc2) simulator_free(&one);
                schedule_free(&sch);
            }
    CHECK(ok_same && n == 24, "a core per stage (cores = P): every op's start and end bitwise as without cores (%d cases, jitter 0.3, latency)", n);
    CHECK(ok_conserve, "one core: the makespan is at least the total work in all %d cases", n);
    CHECK(ok_slower, "  and never shorter than with a core per stage");
    c.cores = -1;
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 2, .M = 2, .n_steps = 1}, err, sizeof(err));
    rc = simulator_run(&r, &sch, &c, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "shared cores must be >= 0"), "cores -1 refused: %s", rc ? err : "accepted");
    schedule_free(&sch);
}

// --aew auto's choice (simulator_choose_window): each W's figure is simulator_window_utilisation's;
// the choice is the smallest W within `within` of the best (0: the first best; 1: W = 0, as every
// figure is within a whole of any other); under jitter the best window is well above 1F1B
static void test_choose_window(void) {
    enum { P = 4, M = 8, WMAX = 8 };
    double t_f[P], t_b[P], util[WMAX + 1], again[WMAX + 1];
    for (int s = 0; s < P; s++) t_f[s] = 1.0, t_b[s] = 2.0;
    char err[256];
    int w0 = simulator_choose_window(P, M, t_f, t_b, NULL, 0.3, WMAX, 0.0, util, err, sizeof err);
    int same = w0 >= 0, first_best = w0 >= 0;
    for (int W = 0; W <= WMAX && same; W++) same = util[W] == simulator_window_utilisation(P, M, t_f, t_b, NULL, 0.3, W, err, sizeof err);
    for (int W = 0; W <= WMAX && first_best; W++) first_best = W < w0 ? util[W] < util[w0] : util[W] <= util[w0];
    CHECK(same, "each window's figure is simulator_window_utilisation's (P 4, M 8, beta 0.3, W 0..8)");
    CHECK(first_best && w0 > 0 && util[w0] > util[0], "within 0: the first best window, %d, above 1F1B's (%.4f against %.4f)", w0, w0 >= 0 ? util[w0] : 0.0,
          util[0]);
    int w1 = simulator_choose_window(P, M, t_f, t_b, NULL, 0.3, WMAX, 1.0, again, err, sizeof err);
    int wmid = simulator_choose_window(P, M, t_f, t_b, NULL, 0.3, WMAX, 0.01, again, err, sizeof err), smallest = 1;
    for (int W = 0; W < wmid && wmid >= 0; W++) smallest &= again[W] < util[w0] - 0.01;
    CHECK(w1 == 0, "within 1: W 0 (every figure is within 1 of the best)");
    CHECK(wmid >= 0 && wmid <= w0 && again[wmid] >= util[w0] - 0.01 && smallest, "within 0.01: the smallest window a point from the best, %d", wmid);
    // without jitter 1F1B keeps its flush between steps, 3 (P - 1) of every 3 M + 3 (P - 1) time units
    // idle (F = 1, B = 2), and a window of P - 1 micro-batches is the smallest that fills it
    int calm = simulator_choose_window(P, M, t_f, t_b, NULL, 0.0, WMAX, 0.0, util, err, sizeof err);
    CHECK(calm == P - 1 && fabs(util[calm] - 1.0) < 1e-12 && fabs(util[0] - (3.0 * M) / (3.0 * M + 3.0 * (P - 1))) < 1e-12 && util[P - 2] < 1.0 - 1e-9,
          "no jitter, equal stages: 1F1B at M / (M + P - 1) = %.6f, W = P - 1 = %d the first at 1 (got W %d at %.6f; W %d %.6f)", util[0], P - 1, calm,
          calm >= 0 ? util[calm] : 0.0, P - 2, util[P - 2]);
}

int main(void) {
    unit_costs();
    test_textbook_bubble();
    test_tdpipe();
    test_jitter();
    test_timing_invariants();
    test_interleaved();
    test_comm();
    test_shared_cores();
    test_choose_window();
    return test_summary();
}
