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
    int rc = schedule_build(&sch, k, P, M, W, n, err, sizeof(err));
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
    int rc = schedule_build(&sch, SCHED_GPIPE, 4, 2, 0, 1, err, sizeof(err));
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
    schedule_build(&sch, SCHED_1F1B, 2, 2, 0, 1, err, sizeof(err));
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
    Op stale = {OP_F, 3, 1, 2}, bw = {OP_BW, 0, 5, 0};
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
                    if (schedule_build(&sch, (SchedKind)k, P, M, 0, n, err, sizeof(err))) { ok_valid = 0; continue; }
                    if (schedule_validate(&sch, err, sizeof(err))) {
                        if (ok_valid) printf("  %s P=%d M=%d n=%d: %s\n", schedule_kind_name((SchedKind)k), P, M, n, err);
                        ok_valid = 0;
                    }
                    if (schedule_max_staleness(&sch) != 0) ok_sync = 0;
                    for (int s = 0; s < P; s++) {
                        int inflight, versions;
                        schedule_stage_stats(&sch, s, &inflight, &versions);
                        if (versions != 1 || schedule_stage_grad_slots(&sch, s) != 1) ok_stats = 0;
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
    CHECK(ok_stats, "sync schedules: 1 weight version, 1 gradient slot; 1f1b peak in-flight = P - s");
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
                schedule_build(&a, SCHED_1F1B, P, M, 0, n, err, sizeof(err));
                for (int W = 0; W <= 2 * M + 1; W++) {
                    if (schedule_build(&b, SCHED_TDPIPE, P, M, W, n, err, sizeof(err))) { ok_valid = 0; continue; }
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
    schedule_build(&b, SCHED_TDPIPE, 4, 4, 2, 3, err, sizeof(err));
    int inflight, versions;
    schedule_stage_stats(&b, 0, &inflight, &versions);
    CHECK(inflight == 6 && versions == 2, "tdpipe P=4 M=4 W=2: stage 0 holds (P-0)+W = 6 in flight, 2 versions (got %d, %d)",
          inflight, versions);
    int slots = 0;
    for (int s = 0; s < 4; s++) slots = schedule_stage_grad_slots(&b, s) > slots ? schedule_stage_grad_slots(&b, s) : slots;
    CHECK(slots == 2, "tdpipe P=4 M=4 W=2: some stage accumulates two steps' gradients at once (max %d)", slots);
    schedule_free(&b);
}

// hand-broken lists: validation must say what is wrong
static void test_validate_broken(void) {
    char err[512];
    Schedule sch;
    schedule_build(&sch, SCHED_1F1B, 3, 3, 0, 1, err, sizeof(err));
    // stage 2's U moved to the front: its forwards would then run on version 1, not 0
    Op* o = sch.ops[2];
    Op u = o[sch.n_ops[2] - 1];
    memmove(o + 1, o, (sch.n_ops[2] - 1) * sizeof(Op));
    o[0] = u;
    int rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "stage 2"), "U moved to the front is refused: %s", err);
    schedule_free(&sch);

    // crossed orders: stage 0 wants B0.0 before sending F0.1, stage 1 wants F0.1 before B0.0
    schedule_build(&sch, SCHED_1F1B, 2, 2, 0, 1, err, sizeof(err));
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

    schedule_build(&sch, SCHED_GPIPE, 2, 2, 0, 1, err, sizeof(err));
    sch.ops[1][3].mb = 0; // a second B0.0, no B0.1
    rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "stage 1 has 2 B, 0 BI, 0 BW of step 0 micro-batch 0"), "duplicate backward refused: %s", err);
    schedule_free(&sch);

    schedule_build(&sch, SCHED_GPIPE, 2, 2, 0, 2, err, sizeof(err));
    // step 1's forwards on version 0 in a synchronous schedule
    for (int i = 0; i < sch.n_ops[0]; i++)
        if (sch.ops[0][i].kind == OP_F && sch.ops[0][i].step == 1) sch.ops[0][i].version = 0;
    rc = schedule_validate(&sch, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "version"), "wrong forward version refused: %s", err);
    schedule_free(&sch);
}

static void test_progress(void) {
    ScheduleProgress p;
    schedule_progress_init(&p, 3, 2, 2);
    char why[256];
    double tr;
    Op f1 = {OP_F, 0, 0, 0}, b2 = {OP_B, 0, 0, 0}, u = {OP_U, 0, -1, 1}, f_next = {OP_F, 1, 0, 1};
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

int main(void) {
    test_refusals();
    test_print();
    test_shapes();
    test_tdpipe();
    test_validate_broken();
    test_progress();
    return test_summary();
}
