// Tests of tdpipe/partition: the dynamic program against brute force over every contiguous split
// on random small instances (speeds, memory limits, infeasible ones), the memory-limit message,
// uniform splits, --partition parsing and its refusals, the printed table; the placement of stages
// onto nodes against brute force over every grouping, a speed that overflows, and the costs that
// run_model_partition feeds the split (the FLOP and memory model, --rank-speed) against hand-worked values.
#include "tdpipe/partition.h"
#include "tdpipe/run_model.h"
#include "tests/test.h"
#include "llmc/rng.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

static Rng rng;
static double urand(void) { return (double)(rng_u64(&rng) >> 11) / 9007199254740992.0; } // [0, 1)

// best max stage time over all splits whose memory fits (INFINITY if none), by enumeration
static double brute_force(const PartitionCost* c) {
    int L = c->L, P = c->P, first[9];
    double best = INFINITY;
    // bit i of mask set: a stage boundary after layer i (i in 0..L-2); exactly P-1 bits set
    for (unsigned mask = 0; mask < (1u << (L - 1)); mask++) {
        if (__builtin_popcount(mask) != P - 1) continue;
        int s = 0;
        first[0] = 0;
        for (int i = 0; i < L - 1; i++)
            if (mask >> i & 1) first[++s] = i + 1;
        first[P] = L;
        double worst = 0;
        int fits = 1;
        for (s = 0; s < P; s++) {
            double t = partition_stage_time(c, s, first[s], first[s + 1]);
            double lim = c->mem_limit ? c->mem_limit[s] : 0;
            if (lim > 0 && partition_stage_mem(c, s, first[s], first[s + 1]) > lim) fits = 0;
            if (t > worst) worst = t;
        }
        if (fits && worst < best) best = worst;
    }
    return best;
}

static void test_dp_vs_brute_force(void) {
    int ok_opt = 1, ok_fit = 1, ok_infeasible = 1, n = 0, n_infeasible = 0;
    for (int trial = 0; trial < 3000; trial++) {
        double lt[8], lm[8], speed[4], lim[4];
        int L = 1 + (int)(urand() * 8), P = 1 + (int)(urand() * 4);
        if (P > L) P = L;
        int integer = trial % 3 == 0; // small integer times make ties common
        for (int l = 0; l < L; l++) {
            lt[l] = integer ? (double)(1 + (int)(urand() * 3)) : 0.5 + urand();
            lm[l] = (double)(1 + (int)(urand() * 4)) * 1073741824.0;
        }
        for (int s = 0; s < P; s++) {
            speed[s] = trial % 2 ? 1.0 : (double)(1 + (int)(urand() * 4)) / 2.0;
            lim[s] = urand() < 0.3 ? 0.0 : (double)(2 + (int)(urand() * 8)) * 1073741824.0;
        }
        PartitionCost c = {L, P, lt, integer ? 1.0 : urand(), integer ? 2.0 : urand(), lm,
                           1073741824.0 * (int)(urand() * 2), 1073741824.0 * (int)(urand() * 3), speed, lim};
        double want = brute_force(&c);
        Partition part;
        char err[512];
        int rc = partition_solve(&part, &c, err, sizeof(err));
        n++;
        if (isinf(want)) {
            n_infeasible++;
            if (rc == 0 || !strstr(err, "needs") || !strstr(err, "GiB")) {
                if (ok_infeasible) printf("  trial %d: expected a refusal, got rc %d: %s\n", trial, rc, err);
                ok_infeasible = 0;
            }
            if (rc == 0) partition_free(&part);
            continue;
        }
        if (rc != 0) {
            if (ok_opt) printf("  trial %d: refused a feasible instance: %s\n", trial, err);
            ok_opt = 0;
            continue;
        }
        // both sides evaluate stages with partition_stage_time, so the optimum compares bitwise
        if (partition_max_time(&part) != want) {
            if (ok_opt) printf("  trial %d: dp %.17g, brute force %.17g\n", trial, partition_max_time(&part), want);
            ok_opt = 0;
        }
        for (int s = 0; s < P; s++) {
            if (part.first[s + 1] - part.first[s] < 1) ok_fit = 0;
            if (lim[s] > 0 && part.mem[s] > lim[s]) ok_fit = 0;
        }
        if (part.first[0] != 0 || part.first[P] != L) ok_fit = 0;
        partition_free(&part);
    }
    CHECK(ok_opt, "dp optimum equals brute force on %d random instances (L <= 8, P <= 4, speeds, limits)", n - n_infeasible);
    CHECK(ok_fit, "dp splits cover [0, L), every stage >= 1 layer, memory within each rank's limit");
    CHECK(ok_infeasible && n_infeasible > 50, "the %d instances with no fitting split are refused with a memory message", n_infeasible);
}

static void test_solve_cases(void) {
    const double GiB = 1073741824.0;
    double lt[6] = {1, 1, 1, 1, 1, 1}, lm[6] = {GiB, GiB, GiB, GiB, GiB, GiB};
    double speed[2] = {2.0, 1.0}, lim[3] = {0, 2.0 * GiB, 0};
    PartitionCost c = {6, 2, lt, 0, 0, NULL, 0, 0, speed, NULL};
    Partition part;
    char err[512];
    int rc = partition_solve(&part, &c, err, sizeof(err));
    CHECK(rc == 0 && part.first[1] == 4 && part.time[0] == 2.0 && part.time[1] == 2.0,
          "a rank twice as fast gets twice the layers: 6 layers -> [0,4) at speed 2, [4,6) at speed 1");
    if (rc == 0) partition_free(&part);

    // 3 stages, the middle rank holds only 2 GiB; the LM head (3 s) makes the last stage heavy
    PartitionCost c3 = {6, 3, lt, 0.5, 3.0, lm, 0, 0, NULL, lim};
    rc = partition_solve(&part, &c3, err, sizeof(err));
    CHECK(rc == 0 && part.first[1] == 3 && part.first[2] == 5 && part.mem[1] <= 2.0 * GiB,
          "memory limit on the middle rank, heavy last stage: layers 3,2,1 (got %d,%d,%d)", rc ? -1 : part.first[1],
          rc ? -1 : part.first[2] - part.first[1], rc ? -1 : 6 - part.first[2]);
    if (rc == 0) {
        char buf[1024] = "";
        FILE* f = fmemopen(buf, sizeof(buf), "w");
        partition_print(f, &part);
        fclose(f);
        CHECK(strstr(buf, "stage") && strstr(buf, "[3,5)") && strstr(buf, "2.00 GiB") && strstr(buf, "(slowest)"),
              "partition_print table:\n%s", buf);
        partition_free(&part);
    }

    // 6.5 GiB over ranks of 4 + 2 + 1.5 GiB: only 3,2,1 fits, the last two stages exactly at their limit
    double tight[3] = {4.0 * GiB, 2.0 * GiB, 1.5 * GiB};
    PartitionCost c4 = {6, 3, lt, 0, 0, lm, 0, 0.5 * GiB, NULL, tight};
    rc = partition_solve(&part, &c4, err, sizeof(err));
    CHECK(rc == 0 && part.first[1] == 3 && part.first[2] == 5, "memory exactly at the limits fits: layers 3,2,1");
    if (rc == 0) partition_free(&part);
    double tighter[3] = {3.0 * GiB, 2.0 * GiB, 1.0 * GiB};
    c4.mem_limit = tighter;
    rc = partition_solve(&part, &c4, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "in the closest (3,2,1), stage 2 needs 1.50 GiB, rank 2 has 1.00 GiB"),
          "the refusal names the closest split's worst stage: %s", err);

    PartitionCost c5 = {4, 5, lt, 0, 0, NULL, 0, 0, NULL, NULL};
    rc = partition_solve(&part, &c5, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "--stages 5 exceeds the model's 4 layers"), "P > L refused: %s", err);
    double bad_speed[2] = {1.0, 0.0};
    PartitionCost c6 = {4, 2, lt, 0, 0, NULL, 0, 0, bad_speed, NULL};
    rc = partition_solve(&part, &c6, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "rank 1 has speed 0"), "zero speed refused: %s", err);
}

static int counts_are(const Partition* p, const int* want) {
    for (int s = 0; s < p->P; s++)
        if (p->first[s + 1] - p->first[s] != want[s]) return 0;
    return 1;
}

static void test_uniform_and_parse(void) {
    Partition p;
    char err[256];
    int w1[5] = {2, 3, 3, 2, 2}, w2[2] = {4, 3}, w3[4] = {3, 3, 3, 3}, w4[4] = {3, 4, 4, 3}, w5[3] = {4, 5, 4};
    int rc = partition_uniform(&p, 12, 5, err, sizeof(err));
    CHECK(rc == 0 && counts_are(&p, w1), "uniform 12 over 5: extras to the middle stages, centre first: 2,3,3,2,2");
    if (rc == 0) partition_free(&p);
    rc = partition_uniform(&p, 7, 2, err, sizeof(err));
    CHECK(rc == 0 && counts_are(&p, w2), "uniform 7 over 2: no middle stage, the extra goes to stage 0: 4,3");
    if (rc == 0) partition_free(&p);
    rc = partition_parse(&p, "uniform", 12, 4, err, sizeof(err));
    CHECK(rc == 0 && counts_are(&p, w3) && !p.has_cost, "'uniform' 12 over 4: 3,3,3,3");
    if (rc == 0) partition_free(&p);
    rc = partition_uniform(&p, 14, 4, err, sizeof(err));
    CHECK(rc == 0 && counts_are(&p, w4), "uniform 14 over 4: 3,4,4,3");
    if (rc == 0) partition_free(&p);
    rc = partition_uniform(&p, 13, 3, err, sizeof(err));
    CHECK(rc == 0 && counts_are(&p, w5), "uniform 13 over 3: 4,5,4");
    if (rc == 0) partition_free(&p);
    rc = partition_parse(&p, "4, 4,3,1", 12, 4, err, sizeof(err));
    CHECK(rc == 0 && p.first[1] == 4 && p.first[2] == 8 && p.first[3] == 11 && p.first[4] == 12, "'4, 4,3,1' parses");
    if (rc == 0) partition_free(&p);

    struct { const char* spec; int L, P; const char* want; } bad[] = {
        {"4,4,3", 12, 4, "has 3 entries, but --stages is 4"},
        {"4,4,3,2", 12, 4, "adds up to 13 layers, but the model has 12"},
        {"4,0,4,4", 12, 4, "entry 2 is 0"},
        {"4,-1,5,4", 12, 4, "entry 2 is -1"},
        {"4,x,4,4", 12, 4, "entry 2 is not a layer count"},
        {"4,,4,4", 12, 4, "entry 2 is not a layer count"},
        {"", 12, 1, "entry 1 is not a layer count"},
        {"1,1,1,1,1", 4, 5, "--stages 5 exceeds the model's 4 layers"},
        {"uniform", 4, 5, "--stages 5 exceeds the model's 4 layers"},
        {"99999999999999,1", 12, 2, "entry 1 is 99999999999999, more than the model's 12 layers"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        rc = partition_parse(&p, bad[i].spec, bad[i].L, bad[i].P, err, sizeof(err));
        CHECK(rc != 0 && strstr(err, bad[i].want), "--partition '%s' (L=%d, P=%d) refused: %s", bad[i].spec, bad[i].L, bad[i].P, err);
        if (rc == 0) partition_free(&p);
    }
}

// the best (worst boundary, then sum) over every grouping of P stages, by enumeration of cut masks
static double brute_place(const PlacementCost* c, double* sum_out) {
    int P = c->P, G = c->groups > 0 ? c->groups : P;
    double best = INFINITY, best_sum = INFINITY;
    for (unsigned mask = 0; mask < (1u << (P - 1)); mask++) { // bit b: boundary b crosses nodes
        int groups = 1, run = 1, fits = 1;
        double worst = 0, sum = 0;
        for (int b = 0; b + 1 < P; b++) {
            int cut = mask >> b & 1;
            double t = cut ? c->far[b] : c->near[b];
            if (cut) groups++, run = 1;
            else if (++run > c->per_group) fits = 0;
            worst = t > worst ? t : worst;
            sum += t;
        }
        if (!fits || groups > G) continue;
        if (worst < best || (worst == best && sum < best_sum)) best = worst, best_sum = sum;
    }
    *sum_out = best_sum;
    return best;
}

static void test_place(void) {
    int ok = 1, ok_shape = 1, n = 0;
    for (int trial = 0; trial < 2000; trial++) {
        double near[8], far[8];
        int P = 1 + (int)(urand() * 8), cap = 1 + (int)(urand() * 4);
        int G = urand() < 0.5 ? 0 : (P + cap - 1) / cap + (int)(urand() * 3);
        for (int b = 0; b + 1 < P; b++) {
            near[b] = trial % 2 ? (double)(int)(urand() * 3) : urand();
            far[b] = near[b] + (trial % 2 ? (double)(int)(urand() * 4) : 2 * urand());
        }
        PlacementCost c = {P, cap, G, near, far};
        int group[8];
        double worst, sum_want;
        char err[256];
        if (partition_place(group, &c, &worst, err, sizeof(err))) {
            if (ok) printf("  trial %d: %s\n", trial, err);
            ok = 0;
            continue;
        }
        double want = brute_place(&c, &sum_want), sum = 0, mx = 0;
        int run = 1;
        ok_shape &= group[0] == 0;
        for (int b = 0; b + 1 < P; b++) {
            int cut = group[b + 1] != group[b];
            ok_shape &= group[b + 1] == group[b] + cut;
            run = cut ? 1 : run + 1;
            ok_shape &= run <= cap;
            double t = cut ? far[b] : near[b];
            sum += t, mx = t > mx ? t : mx;
        }
        ok_shape &= G == 0 || group[P - 1] < G;
        if (mx != want || worst != want || fabs(sum - sum_want) > 1e-9) {
            if (ok) printf("  trial %d: dp %g (sum %g), brute force %g (sum %g)\n", trial, mx, sum, want, sum_want);
            ok = 0;
        }
        n++;
    }
    CHECK(ok, "placement dp equals brute force over every grouping on %d random instances (P <= 8, node sizes, node limits)", n);
    CHECK(ok_shape, "placements are consecutive groups from 0, at most per_group stages each, within the node limit");
    // a slow link between stages 1 and 2 (an inter-socket hop, say): with room for a cut elsewhere the
    // dp puts the node boundary on a fast link
    double near[3] = {1, 5, 1}, far[3] = {2, 9, 2};
    PlacementCost c = {4, 3, 2, near, far};
    int group[4];
    double worst;
    char err[256];
    int rc = partition_place(group, &c, &worst, err, sizeof(err));
    CHECK(rc == 0 && group[0] == 0 && group[1] == 0 && group[2] == 0 && group[3] == 1 && worst == 5,
          "the node boundary avoids the slow link: groups 0,0,0,1, worst boundary 5 (got %d,%d,%d,%d, %g)", group[0], group[1],
          group[2], group[3], worst);
    // the tie rule (partition.h): 3 stages on 2 nodes of 2 at equal links cost the same either way;
    // the fewest stages on the last node wins, so the first node is filled
    double eq_near[2] = {1, 1}, eq_far[2] = {2, 2};
    PlacementCost eq = {3, 2, 2, eq_near, eq_far};
    rc = partition_place(group, &eq, &worst, err, sizeof(err));
    CHECK(rc == 0 && group[0] == 0 && group[1] == 0 && group[2] == 1 && worst == 2, "a tie: groups 0,0,1, the first node filled (got %d,%d,%d)", group[0],
          group[1], group[2]);
    PlacementCost tight = {5, 2, 2, near, far};
    double n4[4] = {1, 1, 1, 1};
    tight.near = tight.far = n4;
    rc = partition_place(group, &tight, &worst, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "5 stages do not fit on 2 nodes of 2 stages each"), "too few nodes refused: %s", err);
}

// issue 15: a speed so small that a stage's time overflows is not a memory problem
static void test_tiny_speed(void) {
    double lt[4] = {1e10, 1e10, 1e10, 1e10}, speed[2] = {1e-307, 1}, lim[2] = {0, 0};
    PartitionCost c = {4, 2, lt, 0, 0, NULL, 0, 0, speed, lim};
    Partition part;
    char err[512] = "";
    int rc = partition_solve(&part, &c, err, sizeof(err));
    CHECK(rc != 0 && strstr(err, "rank 0 has speed 1e-307") && strstr(err, "overflow") && !strstr(err, "0 B"),
          "--rank-speed 1e-307,1 without --rank-mem: says the time overflows, not that rank 0 has 0 B: %s", err);
}

// run_model_partition's costs for a fresh d2 on bytes (C 128, 2 heads, V = Vp = 256) at B 1, T 4, split
// 1,1 over P = 2 with --rank-speed 1,2, worked by hand (BT = 4):
//   a layer's forward FLOPs: its matmuls 2 BT (3 C^2 + C^2 + 4 C^2 + 4 C^2) = 24 BT C^2 = 1,572,864, and
//   attention's Q K^T and att V, 2 BT T C each = 8,192; forward + backward = 3x: 4,743,168
//   stage 0: one layer + the embeddings 3 BT C = 1,536 -> 4,744,704 at speed 1
//   stage 1: one layer + the LM head 3 (2 BT C Vp) = 786,432 -> 5,529,600 at speed 2 -> 2,764,800
//   a layer's bytes: 16 per weight (weight, gradient, two AdamW moments) x 12 C^2 = 3,145,728, and
//   4 bytes x P micro-batches x BT tokens x (16 C + NH T) floats of activations (GPT2Acts' per-layer
//   arrays per token: ln1, qkv 3C, atty, attproj, residual2, ln2, fch 4C, fch_gelu 4C, fcproj,
//   residual3 = 16 C, and att's NH T) = 65,792 -> 3,211,520
//   stage 0: + wte and its gradient and moments 16 Vp C = 524,288 -> 3,735,808
//   stage 1: + wte's again and the logits and their gradient 2 x 4 BT Vp = 532,480 -> 3,744,000
static void test_run_model_costs(void) {
    TrainArgs a;
    args_defaults(&a);
    a.B = 1;
    a.T = 4;
    snprintf(a.partition, sizeof a.partition, "1,1");
    snprintf(a.rank_speed, sizeof a.rank_speed, "1,2");
    GPT2Config cfg;
    char err[512];
    Partition part;
    int fresh = run_model_fresh_config("d2", 256, &cfg, err, sizeof err);
    int rc = run_model_partition(&part, &a, &cfg, 2, NULL, err, sizeof err);
    CHECK(fresh == 1 && rc == 0 && part.has_cost && part.time[0] == 4744704.0 && part.time[1] == 2764800.0,
          "FLOP model, d2 split 1,1 at speeds 1,2: stage times %.0f and %.0f (by hand 4,744,704 and 2,764,800) %s", rc ? 0 : part.time[0],
          rc ? 0 : part.time[1], rc ? err : "");
    CHECK(rc == 0 && part.mem[0] == 3735808.0 && part.mem[1] == 3744000.0, "memory model: %.0f and %.0f bytes (by hand 3,735,808 and 3,744,000)",
          rc ? 0 : part.mem[0], rc ? 0 : part.mem[1]);
    if (rc == 0) partition_free(&part);
    snprintf(a.rank_speed, sizeof a.rank_speed, "1,2,3");
    CHECK(run_model_partition(&part, &a, &cfg, 2, NULL, err, sizeof err) == -1 && strstr(err, "expected 2 positive numbers"),
          "--rank-speed with one value too many for P = 2 refused: %s", err);
}

int main(void) {
    rng_init(&rng, 1234567);
    test_run_model_costs();
    test_dp_vs_brute_force();
    test_solve_cases();
    test_uniform_and_parse();
    test_place();
    test_tiny_speed();
    return test_summary();
}
