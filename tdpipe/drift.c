// The drift monitor's per-unit comparison (see drift.h). Serial double sums: the same figures at
// any thread count.
#include "drift.h"
#include <math.h>
#include <string.h>

void drift_compare_add(const float* a, const float* e, size_t n, DriftUnit* u) {
    for (size_t j = 0; j < n; j++) {
        double x = a[j], y = e[j];
        u->dot += x * y;
        u->aa += x * x;
        u->bb += y * y;
        u->dd += (x - y) * (x - y);
    }
}

void drift_compare(const Stage* st, const float* applied, const float* exact, DriftUnit* out) {
    StageSlice sl[STAGE_MAX_SLICES(st->range.l1 - st->range.l0)];
    int n = stage_slices(st, sl);
    memset(out, 0, (st->cfg.num_layers + 2) * sizeof(DriftUnit));
    for (int i = 0; i < n; i++) drift_compare_add(applied + sl[i].off, exact + sl[i].off, sl[i].n, &out[sl[i].unit]);
}

double drift_cosine(const DriftUnit* u) {
    if (u->aa == 0.0 && u->bb == 0.0) return 1.0;
    if (u->aa == 0.0 || u->bb == 0.0) return 0.0;
    return u->dot / (sqrt(u->aa) * sqrt(u->bb));
}

int drift_worst(const DriftUnit* units, int n) {
    int worst = 0;
    for (int u = 1; u < n; u++)
        if (drift_cosine(&units[u]) < drift_cosine(&units[worst])) worst = u;
    return worst;
}

double drift_rel_err(const DriftUnit* u) {
    if (u->bb == 0.0) return u->dd == 0.0 ? 0.0 : INFINITY;
    return sqrt(u->dd) / sqrt(u->bb);
}
