// Contiguous split of L transformer layers over P pipeline stages: a dynamic program minimising
// the slowest stage under per-rank memory limits, uniform and explicit (--partition) splits, the
// placement of consecutive stages onto nodes from per-boundary link costs, and a table printer.
// Stage 0 also holds the embeddings, stage P-1 the final LayerNorm, LM head, loss.
#pragma once
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// times in any one unit (seconds, or cost-model units); memory in bytes, as doubles (exact below 2^53)
typedef struct {
    int L, P;
    const double* layer_time; // (L) forward + backward time of each layer on a speed-1 rank
    double first_time;        // extra time of stage 0 (embeddings)
    double last_time;         // extra time of stage P-1 (final LayerNorm, LM head, loss)
    const double* layer_mem;  // (L) bytes each layer needs on its stage (weights, grads, optimizer, activations); NULL: 0
    double first_mem;         // extra bytes of stage 0
    double last_mem;          // extra bytes of stage P-1
    const double* speed;      // (P) speed of the rank holding each stage (2 = takes half the time); NULL: all 1
    const double* mem_limit;  // (P) bytes available on each stage's rank, 0 = unlimited; NULL: all unlimited
} PartitionCost;

typedef struct {
    int L, P;
    int* first;   // (P+1) stage s holds layers [first[s], first[s+1]); first[0] = 0, first[P] = L
    double* time; // (P) predicted time of each stage (set by partition_evaluate / partition_solve)
    double* mem;  // (P) predicted bytes of each stage
    int has_cost; // whether time and mem were computed from a cost model
} Partition;

// Links between consecutive stages: boundary b (stage b to b+1) costs near[b] when both stages share
// a node and far[b] when it crosses nodes (any one unit of time, per micro-batch; the link's load, e.g.
// its messages' time). A node holds at most per_group stages; at most `groups` nodes (0: no limit).
typedef struct {
    int P;
    int per_group;
    int groups;
    const double* near; // (P-1)
    const double* far;  // (P-1)
} PlacementCost;

// The split minimising the slowest stage subject to every stage's memory <= its rank's limit
// (ties: the earliest boundaries). Returns 0, or -1 with a message: bad inputs, or no split fits
// ("... stage 2 needs 3.10 GiB, rank 2 has 2.00 GiB", from the split closest to fitting).
int partition_solve(Partition* part, const PartitionCost* cost, char* err, size_t errlen);
// Which consecutive stages share a node: group (P) non-decreasing from 0, each group at most per_group
// stages, at most `groups` groups. Messages run on their own stream beside compute (as the executor's
// and the simulator's do), so a boundary is a pipeline stage of its own: the grouping minimises the
// costliest boundary, then the sum over boundaries; ties go to the fewest nodes, then the fewest
// stages on the last node, then on each node before it going back (3 stages on nodes of 2 at equal
// links: 0,0,1, the first node filled). *worst = that cost.
// It does not interact with partition_solve's split: the pipeline's period is the larger of the
// slowest stage and the costliest boundary, so each is optimal alone and together (the simulator
// calls both, tdpipe/cluster.c).
// Returns 0, or -1 with a message (bad inputs, or too few nodes for P stages).
int partition_place(int* group, const PlacementCost* links, double* worst, char* err, size_t errlen);
// L / P layers each; the L % P extra layers go to the middle stages (nearest the centre first),
// then to stage 0, then to stage P-1, since the end stages carry the embeddings and the LM head.
int partition_uniform(Partition* part, int L, int P, char* err, size_t errlen);
// "uniform", or a comma-separated count per stage ("4,4,3,1"); refusals name --partition/--stages
int partition_parse(Partition* part, const char* spec, int L, int P, char* err, size_t errlen);
// fills part->time and part->mem from the cost model (which must have the same L and P)
void partition_evaluate(Partition* part, const PartitionCost* cost);
// time and bytes of stage s holding layers [l0, l1) under the cost model
double partition_stage_time(const PartitionCost* cost, int s, int l0, int l1);
double partition_stage_mem(const PartitionCost* cost, int s, int l0, int l1);
// the slowest stage's predicted time (0 without a cost model)
double partition_max_time(const Partition* part);
// table: stage, layers [l0,l1), count, predicted time, memory
void partition_print(FILE* f, const Partition* part);
void partition_free(Partition* part);

#ifdef __cplusplus
}
#endif
