// Tests of tdpipe/placement: the two layouts' rank maps (each a bijection, each the other's
// transpose), the bytes between hosts against hand counts, and --placement auto's choice.
#include "tdpipe/placement.h"
#include "tests/test.h"
#include <string.h>

static void test_maps(void) {
    int ok = 1, n = 0;
    for (int P = 1; P <= 5; P++)
        for (int D = 1; D <= 5; D++)
            for (int pl = 0; pl < 2; pl++) {
                int seen[25] = {0};
                for (int s = 0; s < P; s++)
                    for (int d = 0; d < D; d++) {
                        int r = placement_rank((Placement)pl, P, D, s, d), s2, d2;
                        placement_coords((Placement)pl, P, D, r, &s2, &d2);
                        ok &= r >= 0 && r < P * D && !seen[r]++ && s2 == s && d2 == d;
                        n++;
                    }
            }
    CHECK(ok, "every (stage, replica) has one launch rank and back, both layouts, P and D 1..5 (%d cases)", n);
    CHECK(placement_rank(PLACE_STAGES_FIRST, 4, 2, 3, 1) == 7 && placement_rank(PLACE_REPLICAS_FIRST, 4, 2, 3, 1) == 7 &&
              placement_rank(PLACE_STAGES_FIRST, 4, 2, 1, 1) == 5 && placement_rank(PLACE_REPLICAS_FIRST, 4, 2, 1, 1) == 3,
          "stages first: rank d P + s; replicas first: rank s D + d");
}

static void test_cross_bytes(void) {
    // P 2, D 2 on two hosts of two ranks: stages first puts each pipeline on a host (only the
    // averages cross), replicas first each stage's replicas (only the pipeline and tied messages cross)
    int host[4] = {0, 0, 2, 2};
    double dp[2] = {100, 30};
    PlacementTraffic t = {2, 2, host, 7, 5, dp};
    double st = placement_cross_bytes(PLACE_STAGES_FIRST, &t), rp = placement_cross_bytes(PLACE_REPLICAS_FIRST, &t);
    CHECK(st == 2 * (100 + 30), "stages first on 2 x 2: both ordered pairs of each stage's replicas cross (%g)", st);
    CHECK(rp == 2 * (7 + 5), "replicas first: each replica's boundary and tied shares cross (%g)", rp);
    double cross[2];
    CHECK(placement_choose(&t, cross) == PLACE_REPLICAS_FIRST && cross[PLACE_STAGES_FIRST] == st && cross[PLACE_REPLICAS_FIRST] == rp, "auto takes the fewer bytes: replicas first");
    dp[0] = dp[1] = 1;
    CHECK(placement_choose(&t, NULL) == PLACE_STAGES_FIRST, "small gradients, big messages: stages first");
    int one[4] = {0, 0, 0, 0};
    t.host = one;
    CHECK(placement_choose(&t, cross) == PLACE_STAGES_FIRST && cross[0] == 0 && cross[1] == 0, "one host: nothing crosses, stages first (the tie)");
    // P 4, D 2 on hosts of 4 ranks: stages first keeps each pipeline on a host; replicas first puts
    // stages 0-1 on host 0 and 2-3 on host 1, so boundary 1-2 and the tied shares cross per replica
    int h8[8] = {0, 0, 0, 0, 4, 4, 4, 4};
    double dp4[4] = {10, 10, 10, 10};
    PlacementTraffic u = {4, 2, h8, 3, 2, dp4};
    CHECK(placement_cross_bytes(PLACE_STAGES_FIRST, &u) == 4 * 2 * 10, "P 4 x D 2, hosts of 4, stages first: 8 ordered replica pairs cross");
    CHECK(placement_cross_bytes(PLACE_REPLICAS_FIRST, &u) == 2 * (3 + 2), "  replicas first: one boundary and the tied shares per replica");
}

static void test_parse(void) {
    Placement pl = PLACE_STAGES_FIRST;
    int is_auto = 0;
    CHECK(placement_parse("replicas", &pl, &is_auto) == 0 && pl == PLACE_REPLICAS_FIRST && !is_auto, "parse replicas");
    CHECK(placement_parse("stages", &pl, &is_auto) == 0 && pl == PLACE_STAGES_FIRST && !is_auto, "parse stages");
    CHECK(placement_parse("auto", &pl, &is_auto) == 0 && is_auto, "parse auto");
    CHECK(placement_parse("nodes", &pl, &is_auto) == -1, "anything else refused");
    CHECK(!strcmp(placement_name(PLACE_REPLICAS_FIRST), "replicas") && !strcmp(placement_name(PLACE_STAGES_FIRST), "stages"), "names");
}

int main(void) {
    test_maps();
    test_cross_bytes();
    test_parse();
    return test_summary();
}
