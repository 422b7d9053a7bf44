// Tests of tdpipe/schedule: refusals, printing, the shape of each schedule (1F1B warmup and
// in-flight bound, gpipe and zbh1 orders and memory), tdpipe W = 0 equal to 1f1b op by op,
// staleness bounds, stash/cache statistics, validation of broken lists, dependency messages.
#include "tdpipe/schedule.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>

static int same_lists(const Schedule* a, const Schedule* b) {
    if (a->P != b->P) return 0;
    for (int s = 0; s < a->P; s++) {
        if (a->n_ops[s] != b->n_ops[s]) return 0;
        for (int i = 0; i < a->n_ops[s]; i++) {
            const Op *x = &a->ops[s][i], *y = &b->ops[s][i];
            if (x->kind != y->kind || x->step != y->step || x->mb != y->mb || x->version != y->version) return 0;
        }
    }
    return 1;
}

static void check_refusal(SchedKind k, int P, int M, int W, int n, const char* want) {
    Schedule sch;
    char err[256] = "";
    int rc = schedule_build(&sch, &(ScheduleShape){.kind = k, .P = P, .M = M, .W = W, .n_steps = n}, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, want), "%s P=%d M=%d W=%d refused naming %s: %s", schedule_kind_name(k), P, M, W, want, err);
    if (rc == 0) schedule_free(&sch);
}

static void test_refusals(void) {
    check_refusal(SCHED_1F1B, 4, 3, 0, 1, "--micro-batches 3");
    check_refusal(SCHED_ZBH1, 4, 2, 0, 1, "--stages 4");
    check_refusal(SCHED_TDPIPE, 4, 3, 1, 1, "--micro-batches");
    check_refusal(SCHED_1F1B, 0, 3, 0, 1, "--stages");
    check_refusal(SCHED_TDPIPE, 2, 3, -1, 1, "--aew");
    check_refusal(SCHED_1F1B, 2, 4, 2, 1, "--aew 2");
    check_refusal(SCHED_GPIPE, 2, 0, 0, 1, "--micro-batches");
    Schedule sch;
    char err[256] = "";
    int rc = schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 4, .M = 2, .W = 0, .n_steps = 1}, err, sizeof(err));
    CHECK(rc == 0, "gpipe accepts M < P (M=2, P=4): %s", err);
    if (rc == 0) {
        CHECK(schedule_validate(&sch, err, sizeof(err)) == 0, "gpipe M < P validates: %s", err);
        schedule_free(&sch);
    }
    SchedKind k;
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= schedule_parse_kind(schedule_kind_name((SchedKind)i), &k) == 0 && k == (SchedKind)i;
    CHECK(ok && schedule_parse_kind("zb-h2", &k) != 0, "kind names round-trip, unknown names refused");
}

static void test_print(void) {
    Schedule sch;
    char err[256], buf[2048] = "";
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 2, .M = 2, .W = 0, .n_steps = 1}, err, sizeof(err));
    FILE* f = fmemopen(buf, sizeof(buf), "w");
    schedule_print(&sch, f);
    fclose(f);
    const char* want =
        "schedule 1f1b: stages 2, micro-batches 2, aew 0, steps 1\n"
        "stage 0: F0.0 F0.1 B0.0 B0.1 U0\n"
        "stage 1: F0.0 B0.0 F0.1 B0.1 U0\n"
        "legend: Ft.m forward of step t micro-batch m (Ft.m@v: on weight version v < t); Bt.m backward; "
        "BIt.m/BWt.m input-/weight-gradient backward; Ut update of step t\n";
    CHECK(strcmp(buf, want) == 0, "schedule_print of 1f1b P=2 M=2 is exact");
    if (strcmp(buf, want) != 0) printf("got:\n%swant:\n%s", buf, want);
    schedule_free(&sch);
    Op stale = {OP_F, 3, 1, 2, 0}, bw = {OP_BW, 0, 5, 0, 0};
    char a[32], b[32];
    schedule_op_name(&stale, a, sizeof(a));
    schedule_op_name(&bw, b, sizeof(b));
    CHECK(strcmp(a, "F3.1@2") == 0 && strcmp(b, "BW0.5") == 0, "op names: %s %s", a, b);
}

// every schedule validates; 1f1b's warmup, in-flight bound P - s and single version; gpipe's
// backward order; zbh1's BI/BW order and memory bound
static void test_shapes(void) {
    char err[512];
    int ok_valid = 1, ok_warm = 1, ok_stats = 1, ok_gpipe = 1, ok_zb = 1, ok_zbmem = 1, ok_sync = 1;
    for (int P = 1; P <= 6; P++)
        for (int M = P; M <= P + 6; M++)
            for (int n = 1; n <= 3; n += 2)
                for (int k = 0; k < 3; k++) {
                    Schedule sch;
                    if (schedule_build(&sch, &(ScheduleShape){.kind = (SchedKind)k, .P = P, .M = M, .W = 0, .n_steps = n}, err, sizeof(err))) { ok_valid = 0; continue; }
                    if (schedule_validate(&sch, err, sizeof(err))) {
                        if (ok_valid) printf("  %s P=%d M=%d n=%d: %s\n", schedule_kind_name((SchedKind)k), P, M, n, err);
                        ok_valid = 0;
                    }
                    if (schedule_max_staleness(&sch) != 0) ok_sync = 0;
                    for (int s = 0; s < P; s++) {
                        int inflight, versions;
                        schedule_stage_stats(&sch, s, &inflight, &versions);
                        ScheduleShape shape = {.kind = (SchedKind)k, .P = P, .M = M, .n_steps = n};
                        if (versions != 1 || schedule_stage_grad_slots(&sch, s) != 1 || schedule_shape_grad_slots(&shape) != 1) ok_stats = 0;
                        const Op* ops = sch.ops[s];
                        if (k == SCHED_1F1B) {
                            int warm = 0;
                            while (ops[warm].kind == OP_F) warm++;
                            // warmup P-s-1 forwards, then the first steady-state F before the first B
                            if (warm != P - s) ok_warm = 0;
                            if (inflight != P - s) ok_stats = 0;
                        }
                        int last_b = -1, last_bi = -1, last_bw = -1;
                        for (int i = 0; i < sch.n_ops[s]; i++) {
                            int g = ops[i].step * M + ops[i].mb;
                            if (ops[i].kind == OP_B) ok_gpipe &= g == last_b + 1, last_b = g;
                            if (ops[i].kind == OP_BI) ok_zb &= g == last_bi + 1, last_bi = g;
                            if (ops[i].kind == OP_BW) ok_zb &= g == last_bw + 1, last_bw = g;
                        }
                        if (k == SCHED_ZBH1) {
                            // activations live until BW: at most P in flight (1F1B's peak at stage 0)
                            int f = 0, bi = 0, mx_bi = 0;
                            for (int i = 0; i < sch.n_ops[s]; i++) {
                                f += ops[i].kind == OP_F;
                                bi += ops[i].kind == OP_BI;
                                if (f - bi > mx_bi) mx_bi = f - bi;
                            }
                            if (inflight > P || mx_bi > P - s) ok_zbmem = 0;
                        }
                    }
                    schedule_free(&sch);
                }
    CHECK(ok_valid, "gpipe, 1f1b, zbh1 build and validate for P 1..6, M P..P+6, 1 and 3 steps");
    CHECK(ok_warm, "1f1b: stage s runs P-s-1 warmup forwards, then F before its first B");
    CHECK(ok_stats, "sync schedules: 1 weight version, 1 gradient slot (as schedule_shape_grad_slots says); 1f1b peak in-flight = P - s");
    CHECK(ok_gpipe, "B, BI and BW run in increasing micro-batch order on every stage (gpipe, 1f1b)");
    CHECK(ok_zb, "zbh1: BI and BW each in increasing micro-batch order on every stage");
    CHECK(ok_zbmem, "zbh1: at most P - s awaiting BI, at most P awaiting BW (1F1B's peak memory)");
    CHECK(ok_sync, "sync schedules: staleness 0 everywhere");
}

// every forward of every stage on the version schedule_forward_version gives
static int versions_by_rule(const Schedule* b) {
    for (int s = 0; s < b->P; s++)
        for (int i = 0; i < b->n_ops[s]; i++) {
            const Op* op = &b->ops[s][i];
            int g = op->step * b->M + op->mb, want = g < b->W ? 0 : (g - b->W) / b->M;
            if (op->kind == OP_F && op->version != want) return 0;
        }
    return 1;
}

static void test_tdpipe(void) {
    char err[512];
    int ok_eq = 1, ok_valid = 1, ok_bound = 1, ok_some = 1, ok_window = 1, ok_stash = 1, ok_rule = 1, ok_limits = 1;
    int worst = 0;
    for (int P = 1; P <= 6; P++)
        for (int M = P; M <= P + 5; M++)
            for (int n = 1; n <= 4; n++) {
                Schedule a, b;
                schedule_build(&a, &(ScheduleShape){.kind = SCHED_1F1B, .P = P, .M = M, .W = 0, .n_steps = n}, err, sizeof(err));
                for (int W = 0; W <= 2 * M + 1; W++) {
                    if (schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = P, .M = M, .W = W, .n_steps = n}, err, sizeof(err))) { ok_valid = 0; continue; }
                    if (W == 0) ok_eq &= same_lists(&a, &b);
                    ok_rule &= versions_by_rule(&b);
                    if (schedule_validate(&b, err, sizeof(err))) {
                        if (ok_valid) printf("  tdpipe P=%d M=%d W=%d n=%d: %s\n", P, M, W, n, err);
                        ok_valid = 0;
                    }
                    int st = schedule_max_staleness(&b), bound = (W + M - 1) / M;
                    if (st > bound) ok_bound = 0;
                    if (st > worst) worst = st;
                    if (P >= 2 && W >= 1 && n >= 2 && st == 0) ok_some = 0;
                    for (int s = 0; s < P; s++) {
                        int inflight, versions;
                        schedule_stage_stats(&b, s, &inflight, &versions);
                        if (inflight > P - s + W) ok_window = 0;
                        if (versions > bound + 1) ok_stash = 0;
                        int slots, stashes, rings;
                        schedule_stage_limits(&b, s, &slots, &stashes, &rings);
                        if (inflight > slots || versions - 1 > stashes || schedule_stage_grad_slots(&b, s) > rings) ok_limits = 0;
                    }
                    // stage 0 is the last to finish a step's backwards, so a stale forward there is
                    // still in flight when U runs: its version and the new one coexist
                    int versions0;
                    schedule_stage_stats(&b, 0, NULL, &versions0);
                    int stale0 = 0;
                    for (int i = 0; i < b.n_ops[0]; i++) stale0 |= schedule_op_staleness(&b.ops[0][i]) > 0;
                    if (stale0 && versions0 < 2) ok_stash = 0;
                    schedule_free(&b);
                }
                schedule_free(&a);
            }
    CHECK(ok_eq, "tdpipe W=0 lists equal 1f1b op by op (incl. U positions), P 1..6, M P..P+5, 1..4 steps");
    CHECK(ok_rule, "tdpipe: every forward uses version max(0, floor((g - W) / M)), at every P (P = 1 included)");
    CHECK(ok_valid, "tdpipe W 0..2M+1 builds and validates");
    CHECK(ok_bound, "tdpipe staleness <= ceil(W/M) everywhere (largest seen %d)", worst);
    CHECK(ok_some, "tdpipe P >= 2, W >= 1, >= 2 steps has some stale forward");
    CHECK(ok_window, "tdpipe in-flight at stage s <= (P - s) + W");
    CHECK(ok_limits, "tdpipe lists stay within schedule_stage_limits (activation slots, stashes, gradient ring)");
    CHECK(ok_stash, "tdpipe stash slots <= ceil(W/M) + 1, and >= 2 on stage 0 when it runs a stale forward");

    Schedule b;
    schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 4, .M = 4, .W = 2, .n_steps = 3}, err, sizeof(err));
    int inflight, versions;
    schedule_stage_stats(&b, 0, &inflight, &versions);
    CHECK(inflight == 6 && versions == 2, "tdpipe P=4 M=4 W=2: stage 0 holds (P-0)+W = 6 in flight, 2 versions (got %d, %d)",
          inflight, versions);
    int slots = 0;
    for (int s = 0; s < 4; s++) slots = schedule_stage_grad_slots(&b, s) > slots ? schedule_stage_grad_slots(&b, s) : slots;
    CHECK(slots == 2, "tdpipe P=4 M=4 W=2: some stage accumulates two steps' gradients at once (max %d)", slots);
    schedule_free(&b);
    // the last stage runs each backward right after its forward, window or not: one slot, and one for
    // the next input the executor receives meanwhile when P > 1, where (P - s) + W would have
    // allocated five with W 4 (and counted them against memory)
    int ok_last = 1;
    for (int P = 1; P <= 4; P++) {
        schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = P, .M = 4, .W = 4, .n_steps = 3}, err, sizeof(err));
        int last_slots = 0;
        schedule_stage_stats(&b, P - 1, &inflight, NULL);
        schedule_stage_limits(&b, P - 1, &last_slots, NULL, NULL);
        if (inflight != 1 || last_slots != (P == 1 ? 1 : 2)) ok_last = 0;
        printf("     P %d M 4 W 4: last stage %d in flight, %d slot(s)\n", P, inflight, last_slots);
        schedule_free(&b);
    }
    CHECK(ok_last, "tdpipe W 4, P 1..4: the last stage holds 1 micro-batch in flight and is given 1 activation slot at P = 1, 2 above");
    // a window wider than the run: P 2, M 2, 2 steps, W 8 lets all 2 x 2 = 4 micro-batches of the run in
    // at once, so stage 0's activation slots are 4, not (P - s) + W = 10 (cluster.c sizes memory by them)
    schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 2, .M = 2, .W = 8, .n_steps = 2}, err, sizeof(err));
    int act = 0;
    schedule_stage_stats(&b, 0, &inflight, NULL);
    schedule_stage_limits(&b, 0, &act, NULL, NULL);
    CHECK(act == 4 && inflight == 4, "tdpipe P=2 M=2 W=8, 2 steps: stage 0 holds the run's 4 micro-batches, 4 slots (got %d in flight, %d slots)",
          inflight, act);
    schedule_free(&b);
    // and its stashes and gradient ring: a schedule starts flushed, so n steps leave at most n - 1 old
    // versions and open at most n steps, however wide the window (W 1000 of M 3 asked 334 and 335,
    // 28 GiB for d6, of a 2-step run)
    int ok_cap = 1;
    for (int n = 1; n <= 3; n++) {
        int stashes, rings;
        schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 2, .M = 3, .W = 1000, .n_steps = n}, err, sizeof(err));
        schedule_stage_limits(&b, 0, NULL, &stashes, &rings);
        if (stashes != n - 1 || rings != n) ok_cap = 0;
        printf("     P 2 M 3 W 1000, %d step(s): %d stash(es), %d ring slot(s)\n", n, stashes, rings);
        schedule_free(&b);
    }
    CHECK(ok_cap, "tdpipe W 1000 of M 3: n steps hold n - 1 stashes and n ring slots (n = 1..3), not ceil(W/M) and 2 + (W-1)/M");
    int stashes, rings;
    schedule_build(&b, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = 2, .M = 3, .W = 4, .n_steps = 50}, err, sizeof(err));
    schedule_stage_limits(&b, 0, NULL, &stashes, &rings);
    CHECK(stashes == 2 && rings == 3, "tdpipe W 4 of M 3 over 50 steps: the window's bounds, ceil(4/3) = 2 stashes, 2 + 3/3 = 3 ring slots (got %d, %d)",
          stashes, rings);
    schedule_free(&b);
}

// hand-broken lists: validation must say what is wrong
static void test_validate_broken(void) {
    char err[512];
    Schedule sch;
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 3, .M = 3, .W = 0, .n_steps = 1}, err, sizeof(err));
    // stage 2's U moved to the front: its forwards would then run on version 1, not 0
    Op* o = sch.ops[2];
    Op u = o[sch.n_ops[2] - 1];
    memmove(o + 1, o, (sch.n_ops[2] - 1) * sizeof(Op));
    o[0] = u;
    int rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "stage 2"), "U moved to the front is refused: %s", err);
    schedule_free(&sch);

    // crossed orders: stage 0 wants B0.0 before sending F0.1, stage 1 wants F0.1 before B0.0
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 2, .M = 2, .W = 0, .n_steps = 1}, err, sizeof(err));
    // stage 0: F0.0 F0.1 B0.0 B0.1 U0 -> F0.0 B0.0 F0.1 B0.1 U0
    // stage 1: F0.0 B0.0 F0.1 B0.1 U0 -> F0.0 F0.1 B0.0 B0.1 U0 : stage 1 needs F0.1 before B0.0
    Op t0 = sch.ops[0][1];
    sch.ops[0][1] = sch.ops[0][2];
    sch.ops[0][2] = t0;
    Op t1 = sch.ops[1][1];
    sch.ops[1][1] = sch.ops[1][2];
    sch.ops[1][2] = t1;
    rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "deadlock") && strstr(err, "stage 0 stuck at op 1 (B0.0): waits for B0.0 on stage 1") &&
              strstr(err, "stage 1 stuck at op 1 (F0.1): waits for F0.1 on stage 0"),
          "crossed orders are reported as a deadlock naming both stages: %s", err);
    schedule_free(&sch);

    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 2, .W = 0, .n_steps = 1}, err, sizeof(err));
    sch.ops[1][3].mb = 0; // a second B0.0, no B0.1
    rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "stage 1 has 2 B, 0 BI, 0 BW of step 0 micro-batch 0"), "duplicate backward refused: %s", err);
    schedule_free(&sch);

    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_GPIPE, .P = 2, .M = 2, .W = 0, .n_steps = 2}, err, sizeof(err));
    // step 1's forwards on version 0 in a synchronous schedule
    for (int i = 0; i < sch.n_ops[0]; i++)
        if (sch.ops[0][i].kind == OP_F && sch.ops[0][i].step == 1) sch.ops[0][i].version = 0;
    rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "version"), "wrong forward version refused: %s", err);
    schedule_free(&sch);
}

static void test_progress(void) {
    ScheduleProgress p;
    Schedule shape = {.P = 3, .M = 2, .n_steps = 2}; // only its shape is read
    schedule_progress_init(&p, &shape);
    char why[256];
    double tr;
    Op f1 = {OP_F, 0, 0, 0, 0}, b2 = {OP_B, 0, 0, 0, 0}, u = {OP_U, 0, -1, 1, 0}, f_next = {OP_F, 1, 0, 1, 0};
    CHECK(!schedule_progress_ready(&p, 1, &f1, 0.0, &tr, why, sizeof(why)) && strcmp(why, "waits for F0.0 on stage 0") == 0,
          "F at stage 1 waits for stage 0: %s", why);
    schedule_progress_done(&p, 0, &f1, 1.0);
    CHECK(schedule_progress_ready(&p, 1, &f1, 0.25, &tr, why, sizeof(why)) && tr == 1.25,
          "then it is ready at end + latency (%g)", tr);
    CHECK(!schedule_progress_ready(&p, 0, &u, 0.0, &tr, why, sizeof(why)) && strstr(why, "gradients of step 0 on stage 0"),
          "U waits for the step's gradients: %s", why);
    CHECK(!schedule_progress_ready(&p, 2, &f_next, 0.0, &tr, why, sizeof(why)) && strstr(why, "waits for U0 on stage 2"),
          "a forward on version 1 waits for U0: %s", why);
    CHECK(!schedule_progress_ready(&p, 2, &b2, 0.0, &tr, why, sizeof(why)) && strstr(why, "its own F0.0"),
          "the last stage's B waits for its own F: %s", why);
    CHECK(!schedule_progress_ready(&p, 0, &f1, 0.0, &tr, why, sizeof(why)) && strstr(why, "already ran"),
          "a repeated op is reported: %s", why);
    schedule_progress_free(&p);
}

// a schedule of a later chunk (after a consistency point at step 7): the same lists as one from
// step 0, every step and version shifted by 7; validation and replay hold there too
static void test_first_step(void) {
    char err[512];
    int ok = 1, ok_valid = 1;
    for (int k = 0; k < 4; k++)
        for (int W = 0; W <= (k == SCHED_TDPIPE ? 6 : 0); W++) {
            Schedule a, b;
            if (schedule_build(&a, &(ScheduleShape){.kind = (SchedKind)k, .P = 3, .M = 4, .W = W, .n_steps = 3}, err, sizeof(err)) ||
                schedule_build(&b, &(ScheduleShape){.kind = (SchedKind)k, .P = 3, .M = 4, .W = W, .first_step = 7, .n_steps = 3}, err,
                               sizeof(err))) {
                ok = 0;
                continue;
            }
            for (int s = 0; s < 3; s++) {
                ok &= a.n_ops[s] == b.n_ops[s];
                for (int i = 0; i < a.n_ops[s] && ok; i++) {
                    const Op *x = &a.ops[s][i], *y = &b.ops[s][i];
                    ok &= x->kind == y->kind && x->mb == y->mb && y->step == x->step + 7 && y->version == x->version + 7;
                }
            }
            if (schedule_validate(&b, err, sizeof(err))) {
                if (ok_valid) printf("  %s W=%d from step 7: %s\n", schedule_kind_name((SchedKind)k), W, err);
                ok_valid = 0;
            }
            schedule_free(&a);
            schedule_free(&b);
        }
    CHECK(ok, "a schedule from step 7 is the one from step 0 with steps and versions + 7 (every kind, tdpipe W 0..6)");
    CHECK(ok_valid, "  and it validates");
    Schedule sch;
    CHECK(schedule_build(&sch, &(ScheduleShape){.kind = SCHED_1F1B, .P = 2, .M = 2, .first_step = -1, .n_steps = 1}, err, sizeof(err)) &&
              strstr(err, "step 0 or later"),
          "a negative first step is refused: %s", err);
}

// the policy's readiness oracle for the test: answers from a scripted bit pattern, and records what was asked
typedef struct {
    unsigned bits; // bit i: the answer for op kind i (OP_F, OP_B, OP_U)
    int asked[5];
} Script;

static int scripted(void* ctx, const Op* op) {
    Script* q = (Script*)ctx;
    q->asked[op->kind]++;
    return (q->bits >> (op->kind == OP_U ? 2 : op->kind == OP_B ? 1 : 0)) & 1;
}

// schedule_tdpipe_next / _pick against the rule as schedule.h states it, for every cursor of a small
// schedule and every readiness pattern: U if there and ready; else of B and F the one the rhythm puts
// next (F after a B, B after an F) if there and ready, else the other if there and ready
static void test_tdpipe_pick(void) {
    char err[256];
    Schedule sch;
    int P = 3, M = 4, W = 3, n = 2, nM = n * M, ok = 1, ok_next = 1, cases = 0;
    schedule_build(&sch, &(ScheduleShape){.kind = SCHED_TDPIPE, .P = P, .M = M, .W = W, .first_step = 5, .n_steps = n}, err, sizeof(err));
    for (int s = 0; s < P; s++)
        for (int v = 0; v <= n; v++)
            for (int nf = 0; nf <= nM; nf++)
                for (int nb = 0; nb <= nf; nb++)
                    for (int last = 0; last < 2; last++)
                        for (unsigned bits = 0; bits < 8; bits++) {
                            TdpipeCursor c = {nf, nb, v, last ? OP_B : OP_F};
                            TdpipeNext next;
                            schedule_tdpipe_next(&sch, s, &c, &next);
                            int has_u = v < n, has_b = nb < nf;
                            int has_f = nf < nM && nf - nb < (P - s) + W && schedule_forward_version(SCHED_TDPIPE, nf, M, W) <= v;
                            ok_next &= next.has_u == has_u && next.has_b == has_b && next.has_f == has_f;
                            if (has_f) ok_next &= next.f.kind == OP_F && next.f.step == 5 + nf / M && next.f.mb == nf % M &&
                                                  next.f.version == 5 + schedule_forward_version(SCHED_TDPIPE, nf, M, W);
                            if (has_b) ok_next &= next.b.kind == OP_B && next.b.step == 5 + nb / M && next.b.mb == nb % M;
                            if (has_u) ok_next &= next.u.kind == OP_U && next.u.step == 5 + v && next.u.version == 6 + v;
                            int u = has_u && (bits & 4), b = has_b && (bits & 2), f = has_f && (bits & 1);
                            OpKind want = u ? OP_U : last ? (f ? OP_F : b ? OP_B : OP_BI) : (b ? OP_B : f ? OP_F : OP_BI); // OP_BI: none
                            Script q = {bits, {0}};
                            Op op;
                            int picked = schedule_tdpipe_pick(&c, &next, scripted, &q, &op);
                            ok &= want == OP_BI ? !picked : picked && op.kind == want;
                            ok &= q.asked[OP_U] <= 1 && q.asked[OP_B] <= 1 && q.asked[OP_F] <= 1; // each asked at most once
                            cases++;
                        }
    schedule_free(&sch);
    CHECK(ok_next, "schedule_tdpipe_next: U, B and F exactly when the rule has them, with absolute steps and versions");
    CHECK(ok, "schedule_tdpipe_pick follows the rule for every cursor and readiness pattern (%d cases)", cases);
    TdpipeCursor c = {0, 0, 0, OP_F};
    Op f = {OP_F, 0, 0, 0, 0}, b = {OP_B, 0, 0, 0, 0}, u = {OP_U, 0, -1, 1, 0};
    schedule_tdpipe_advance(&c, &f);
    schedule_tdpipe_advance(&c, &b);
    schedule_tdpipe_advance(&c, &u);
    CHECK(c.nf == 1 && c.nb == 1 && c.v == 1 && c.last == OP_B, "schedule_tdpipe_advance counts F, B, U and keeps the last F or B");
}

int main(void) {
    test_refusals();
    test_print();
    test_shapes();
    test_tdpipe();
    test_validate_broken();
    test_progress();
    test_first_step();
    test_tdpipe_pick();
    return test_summary();
}
