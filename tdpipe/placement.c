// The grid's layouts on hosts and --placement auto (see placement.h).
#include "placement.h"
#include <string.h>

int placement_rank(Placement pl, int P, int D, int s, int d) { return pl == PLACE_REPLICAS_FIRST ? s * D + d : d * P + s; }

void placement_coords(Placement pl, int P, int D, int rank, int* s, int* d) {
    if (pl == PLACE_REPLICAS_FIRST) *s = rank / D, *d = rank % D;
    else *s = rank % P, *d = rank / P;
}

const char* placement_name(Placement pl) { return pl == PLACE_REPLICAS_FIRST ? "replicas" : "stages"; }

double placement_cross_bytes(Placement pl, const PlacementTraffic* t) {
    int P = t->P, D = t->D;
    double bytes = 0.0;
#define HOST(s, d) t->host[placement_rank(pl, P, D, (s), (d))]
    for (int d = 0; d < D; d++) { // along each replica's pipeline
        for (int s = 0; s + 1 < P; s++) bytes += HOST(s, d) != HOST(s + 1, d) ? t->msg_bytes : 0.0;
        if (P > 1 && HOST(0, d) != HOST(P - 1, d)) bytes += t->tied_bytes;
    }
    for (int s = 0; s < P; s++) // among each stage's replicas, every ordered pair
        for (int d = 0; d < D; d++)
            for (int e = 0; e < D; e++) bytes += e != d && HOST(s, d) != HOST(s, e) ? t->dp_bytes[s] : 0.0;
#undef HOST
    return bytes;
}

Placement placement_choose(const PlacementTraffic* t, double* cross) {
    double st = placement_cross_bytes(PLACE_STAGES_FIRST, t), rp = placement_cross_bytes(PLACE_REPLICAS_FIRST, t);
    if (cross) cross[PLACE_STAGES_FIRST] = st, cross[PLACE_REPLICAS_FIRST] = rp;
    return rp < st ? PLACE_REPLICAS_FIRST : PLACE_STAGES_FIRST;
}

int placement_parse(const char* text, Placement* pl, int* is_auto) {
    *is_auto = 0;
    if (!strcmp(text, "auto")) *is_auto = 1;
    else if (!strcmp(text, "stages")) *pl = PLACE_STAGES_FIRST;
    else if (!strcmp(text, "replicas")) *pl = PLACE_REPLICAS_FIRST;
    else return -1;
    return 0;
}
