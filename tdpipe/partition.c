// Layer partition over pipeline stages: a dynamic program over contiguous splits (slowest stage
// under memory limits), uniform and explicit splits, the placement of consecutive stages onto nodes
// (partition_place), and the table printer.
#include "tdpipe/partition.h"
#include "llmc/common.h"
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

static void format_bytes(double bytes, char* buf, size_t buflen) {
    if (bytes >= 1024.0 * 1024 * 1024) snprintf(buf, buflen, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024) snprintf(buf, buflen, "%.1f MiB", bytes / (1024.0 * 1024));
    else if (bytes >= 1024.0) snprintf(buf, buflen, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, buflen, bytes >= 1.0 || bytes == 0.0 ? "%.0f B" : "%.3g B", bytes); // --rank-mem 1e-12 is not "0 B"
}

static void partition_alloc(Partition* part, int L, int P) {
    part->L = L;
    part->P = P;
    part->first = (int*)calloc_check(P + 1, sizeof(int));
    part->time = (double*)calloc_check(P, sizeof(double));
    part->mem = (double*)calloc_check(P, sizeof(double));
    part->has_cost = 0;
}

void partition_free(Partition* part) {
    free(part->first);
    free(part->time);
    free(part->mem);
    memset(part, 0, sizeof(*part));
}

static int check_shape(int L, int P, char* err, size_t errlen) {
    if (L < 1) return td_error(err, errlen, "the model has %d layers: it needs at least one", L);
    if (P < 1) return td_error(err, errlen, "--stages must be at least 1 (got %d)", P);
    if (P > L) return td_error(err, errlen, "--stages %d exceeds the model's %d layers (every stage needs at least one)", P, L);
    return 0;
}

double partition_stage_time(const PartitionCost* c, int s, int l0, int l1) {
    double t = 0.0;
    if (s == 0) t += c->first_time;
    for (int l = l0; l < l1; l++) t += c->layer_time[l];
    if (s == c->P - 1) t += c->last_time;
    return c->speed ? t / c->speed[s] : t;
}

double partition_stage_mem(const PartitionCost* c, int s, int l0, int l1) {
    double m = 0.0;
    if (s == 0) m += c->first_mem;
    if (c->layer_mem)
        for (int l = l0; l < l1; l++) m += c->layer_mem[l];
    if (s == c->P - 1) m += c->last_mem;
    return m;
}

static double limit_of(const PartitionCost* c, int s) { return c->mem_limit ? c->mem_limit[s] : 0.0; }

// how far stage s over [l0, l1) is from fitting: bytes needed / bytes available (0 if unlimited)
static double mem_ratio(const PartitionCost* c, int s, int l0, int l1) {
    double lim = limit_of(c, s);
    return lim > 0 ? partition_stage_mem(c, s, l0, l1) / lim : 0.0;
}

void partition_evaluate(Partition* part, const PartitionCost* cost) {
    for (int s = 0; s < part->P; s++) {
        part->time[s] = partition_stage_time(cost, s, part->first[s], part->first[s + 1]);
        part->mem[s] = partition_stage_mem(cost, s, part->first[s], part->first[s + 1]);
    }
    part->has_cost = 1;
}

double partition_max_time(const Partition* part) {
    double mx = 0.0;
    if (part->has_cost)
        for (int s = 0; s < part->P; s++)
            if (part->time[s] > mx) mx = part->time[s];
    return mx;
}

// Minimises the max over stages of the stage cost (time when by_memory is 0, honouring the
// memory limits; memory ratio otherwise, unconstrained) over contiguous splits. best[k][j]: the
// optimum for layers [0, j) on stages 0..k-1; from[k][j]: where stage k-1 starts. Fills
// part->first and returns the optimum, INFINITY when nothing fits. O(P L^3), L is small.
static double solve_dp(Partition* part, const PartitionCost* c, int by_memory) {
    int L = c->L, P = c->P;
    double* best = (double*)malloc_check((size_t)(P + 1) * (L + 1) * sizeof(double)); // (P+1, L+1)
    int* from = (int*)calloc_check((size_t)(P + 1) * (L + 1), sizeof(int));          // (P+1, L+1)
    for (int i = 0; i < (P + 1) * (L + 1); i++) best[i] = INFINITY;
    best[0] = 0.0;
    for (int k = 1; k <= P; k++)
        for (int j = k; j <= L - (P - k); j++)
            for (int i = k - 1; i < j; i++) {
                double prev = best[(k - 1) * (L + 1) + i];
                if (isinf(prev)) continue;
                double cost;
                if (by_memory) {
                    cost = mem_ratio(c, k - 1, i, j);
                } else {
                    double lim = limit_of(c, k - 1);
                    if (lim > 0 && partition_stage_mem(c, k - 1, i, j) > lim) continue;
                    cost = partition_stage_time(c, k - 1, i, j);
                }
                double v = cost > prev ? cost : prev;
                if (v < best[k * (L + 1) + j]) {
                    best[k * (L + 1) + j] = v;
                    from[k * (L + 1) + j] = i;
                }
            }
    double opt = best[P * (L + 1) + L];
    if (!isinf(opt)) {
        part->first[P] = L;
        for (int k = P; k >= 1; k--) part->first[k - 1] = from[k * (L + 1) + part->first[k]];
    }
    free(best);
    free(from);
    return opt;
}

int partition_solve(Partition* part, const PartitionCost* c, char* err, size_t errlen) {
    memset(part, 0, sizeof(*part));
    if (check_shape(c->L, c->P, err, errlen)) return -1;
    if (!c->layer_time) return td_error(err, errlen, "the partition cost model has no layer times");
    for (int l = 0; l < c->L; l++)
        if (!(c->layer_time[l] >= 0)) return td_error(err, errlen, "layer %d has time %g: times must be >= 0", l, c->layer_time[l]);
    for (int s = 0; s < c->P; s++) {
        if (c->speed && !(c->speed[s] > 0)) return td_error(err, errlen, "rank %d has speed %g: speeds must be > 0", s, c->speed[s]);
        if (c->mem_limit && !(c->mem_limit[s] >= 0))
            return td_error(err, errlen, "rank %d has memory limit %g: limits must be >= 0 bytes (0 = unlimited)", s, c->mem_limit[s]);
    }
    // a stage's time must be finite: a speed near 0 makes even one layer take forever (an overflow),
    // and nothing fits for a reason that is not memory
    for (int s = 0; s < c->P; s++) {
        double least = INFINITY;
        for (int l = 0; l < c->L; l++) least = fmin(least, partition_stage_time(c, s, l, l + 1));
        if (!isfinite(least))
            return td_error(err, errlen, "rank %d has speed %g: its stage time would overflow (infinite); speeds are relative to "
                                         "the other ranks, e.g. 0.5 for a rank half as fast", s, c->speed ? c->speed[s] : 1.0);
    }
    partition_alloc(part, c->L, c->P);
    if (isinf(solve_dp(part, c, 0))) {
        // report the split closest to fitting (smallest worst need/limit ratio) and its worst stage
        solve_dp(part, c, 1);
        int worst = 0;
        double wr = -1.0;
        for (int s = 0; s < c->P; s++) {
            double r = mem_ratio(c, s, part->first[s], part->first[s + 1]);
            if (r > wr) wr = r, worst = s;
        }
        char need[32], have[32], counts[256] = "";
        format_bytes(partition_stage_mem(c, worst, part->first[worst], part->first[worst + 1]), need, sizeof(need));
        format_bytes(limit_of(c, worst), have, sizeof(have));
        for (int s = 0; s < c->P; s++) {
            size_t n = strlen(counts);
            snprintf(counts + n, sizeof(counts) - n, "%s%d", s ? "," : "", part->first[s + 1] - part->first[s]);
        }
        partition_free(part);
        return td_error(err, errlen, "no split of %d layers over %d stages fits the memory limits: in the closest (%s), stage %d needs %s, rank %d has %s",
                    c->L, c->P, counts, worst, need, worst, have);
    }
    partition_evaluate(part, c);
    return 0;
}

// The grouping with the least sum over boundaries among those whose every boundary costs at most
// `limit`: best[(k * (cap + 1) + u) * (G + 1) + g] for stages 0..k placed, stage k the u-th of its
// node, g nodes used; from: the u of stage k-1 (u > 1: the same node). Fills group and returns the
// sum, INFINITY when no grouping stays within limit. Ties (partition.h): the fewest nodes, then the
// fewest stages on the last node (the final state's loop), then on each node before it going back
// (the strict < over v, the previous node's count, ascending).
static double place_within(const PlacementCost* c, int G, double limit, int* group) {
    int P = c->P, cap = c->per_group;
    size_t n = (size_t)P * (cap + 1) * (G + 1);
    double* best = (double*)malloc_check(n * sizeof(double)); // (P, cap+1, G+1)
    int* from = (int*)calloc_check(n, sizeof(int));           // (P, cap+1, G+1)
    for (size_t i = 0; i < n; i++) best[i] = INFINITY;
#define AT(k, u, g) (((size_t)(k) * (cap + 1) + (u)) * (G + 1) + (g))
    best[AT(0, 1, 1)] = 0.0;
    for (int k = 1; k < P; k++)
        for (int u = 1; u <= cap; u++)
            for (int g = 1; g <= G; g++) {
                double here = INFINITY;
                int pick = 0;
                if (u > 1 && c->near[k - 1] <= limit) { // stage k joins stage k-1's node
                    here = best[AT(k - 1, u - 1, g)] + c->near[k - 1];
                    pick = u - 1;
                } else if (u == 1 && g > 1 && c->far[k - 1] <= limit) // stage k opens node g
                    for (int v = 1; v <= cap; v++) {
                        double cand = best[AT(k - 1, v, g - 1)] + c->far[k - 1];
                        if (cand < here) here = cand, pick = v;
                    }
                best[AT(k, u, g)] = here;
                from[AT(k, u, g)] = pick;
            }
    int bu = 0, bg = 0;
    double opt = INFINITY;
    for (int g = 1; g <= G; g++)
        for (int u = 1; u <= cap; u++)
            if (best[AT(P - 1, u, g)] < opt) opt = best[AT(P - 1, u, g)], bu = u, bg = g;
    for (int k = P - 1; k >= 0 && !isinf(opt); k--) {
        group[k] = bg - 1;
        int v = from[AT(k, bu, bg)];
        if (bu == 1) bg--;
        bu = v;
    }
#undef AT
    free(best);
    free(from);
    return opt;
}

int partition_place(int* group, const PlacementCost* c, double* worst, char* err, size_t errlen) {
    int P = c->P, cap = c->per_group, G = c->groups > 0 ? c->groups : P;
    if (P < 1) return td_error(err, errlen, "--stages must be at least 1 (got %d)", P);
    if (cap < 1) return td_error(err, errlen, "a node must hold at least one stage (got %d)", cap);
    if ((long)G * cap < P) return td_error(err, errlen, "%d stages do not fit on %d nodes of %d stages each", P, G, cap);
    for (int b = 0; b + 1 < P; b++)
        if (!(c->near[b] >= 0) || !(c->far[b] >= 0))
            return td_error(err, errlen, "boundary %d has link costs %g (inside a node) and %g (across): they must be >= 0", b,
                            c->near[b], c->far[b]);
    // the least costliest-boundary first: the smallest of the boundaries' costs that admits a
    // grouping (max is decided by one boundary, so the sum cannot trade against it), then its least sum
    int nc = 0;
    double* cand = (double*)malloc_check((size_t)(2 * P + 1) * sizeof(double)); // (2P - 1) candidate worst costs
    cand[nc++] = 0.0;
    for (int b = 0; b + 1 < P; b++) cand[nc++] = c->near[b], cand[nc++] = c->far[b];
    qsort(cand, nc, sizeof(double), td_cmp_double);
    int rc = -1;
    for (int i = 0; i < nc && rc; i++)
        if (!isinf(place_within(c, G, cand[i], group))) {
            if (worst) *worst = cand[i];
            rc = 0;
        }
    free(cand);
    return rc ? td_error(err, errlen, "no placement of %d stages on nodes of %d", P, cap) : 0;
}

int partition_uniform(Partition* part, int L, int P, char* err, size_t errlen) {
    memset(part, 0, sizeof(*part));
    if (check_shape(L, P, err, errlen)) return -1;
    partition_alloc(part, L, P);
    int* count = (int*)malloc_check(P * sizeof(int)); // (P)
    for (int s = 0; s < P; s++) count[s] = L / P;
    int extra = L % P;
    // middle stages by distance from the centre (ties: the lower one), then stage 0, then P-1
    for (int dist = (P % 2 == 0); dist <= P && extra > 0; dist += 2)
        for (int s = 1; s < P - 1 && extra > 0; s++)
            if (abs(2 * s - (P - 1)) == dist) count[s]++, extra--;
    if (extra > 0) count[0]++, extra--;
    if (extra > 0) count[P - 1]++, extra--;
    for (int s = 0; s < P; s++) part->first[s + 1] = part->first[s] + count[s];
    free(count);
    return 0;
}

int partition_parse(Partition* part, const char* spec, int L, int P, char* err, size_t errlen) {
    memset(part, 0, sizeof(*part));
    if (!spec) return td_error(err, errlen, "--partition is missing");
    if (strcmp(spec, "uniform") == 0) return partition_uniform(part, L, P, err, errlen);
    if (check_shape(L, P, err, errlen)) return -1;
    partition_alloc(part, L, P);
    const char* p = spec;
    int n = 0, sum = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        char* endp;
        long v = strtol(p, &endp, 10);
        const char* q = endp;
        while (isspace((unsigned char)*q)) q++;
        if (endp == p || (*q != ',' && *q != '\0')) {
            partition_free(part);
            return td_error(err, errlen, "--partition '%s': entry %d is not a layer count (want 'uniform' or counts like 4,4,3,1)", spec, n + 1);
        }
        if (v < 1) {
            partition_free(part);
            return td_error(err, errlen, "--partition '%s': entry %d is %ld, every stage needs at least one layer", spec, n + 1, v);
        }
        if (v > L) {
            partition_free(part);
            return td_error(err, errlen, "--partition '%s': entry %d is %ld, more than the model's %d layers", spec, n + 1, v, L);
        }
        if (n < P) part->first[n + 1] = part->first[n] + (int)v;
        n++;
        sum += (int)v;
        if (*q == '\0') break;
        p = q + 1;
    }
    if (n != P) {
        partition_free(part);
        return td_error(err, errlen, "--partition '%s' has %d entries, but --stages is %d", spec, n, P);
    }
    if (sum != L) {
        partition_free(part);
        return td_error(err, errlen, "--partition '%s' adds up to %d layers, but the model has %d", spec, sum, L);
    }
    return 0;
}

void partition_print(FILE* f, const Partition* part) {
    double slowest = partition_max_time(part);
    fprintf(f, "%-6s %-12s %6s %12s %12s\n", "stage", "layers", "count", "pred. time", "memory");
    for (int s = 0; s < part->P; s++) {
        char range[32], t[32] = "-", m[32] = "-";
        snprintf(range, sizeof(range), "[%d,%d)", part->first[s], part->first[s + 1]);
        if (part->has_cost) {
            snprintf(t, sizeof(t), "%.4g", part->time[s]);
            format_bytes(part->mem[s], m, sizeof(m));
        }
        fprintf(f, "%-6d %-12s %6d %12s %12s%s\n", s, range, part->first[s + 1] - part->first[s], t, m,
                part->has_cost && part->time[s] == slowest ? "  (slowest)" : "");
    }
}
