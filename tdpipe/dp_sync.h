// The replicas' gradient average in buckets, two-shot, overlapped with backward: fp32 values, or
// int8 blocks with error feedback (the DESIGN's 8-bit gradient sync). Each block has an owner
// replica; every replica sends each owner its share, the owner sums the D shares in replica order,
// divides by D (and requantizes), and every replica gathers the owners' results.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "tdpipe/comm.h"
#include "tdpipe/stage.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { GRAD_QUANT_NONE, GRAD_QUANT_INT8 } GradQuant;

typedef struct {
    GradQuant quant;     // NONE: fp32 values, bitwise comm_dp_average's result
    int block;           // elements per block: the quantization block, and what an owner owns
    int error_feedback;  // int8: what rounding dropped goes into the next step's gradient
    size_t bucket_bytes; // fp32 gradient bytes per bucket (whole units); 0: one bucket for the stage
} DpSyncConfig;

// One block of the stage's gradient: `len` elements at `src` of the slot's gradient (or of the LM
// head's share), owned by replica `owner`. Blocks never cross a (unit, tensor) slice and are cut
// from each slice's start, and a block's owner is a function of its unit, tensor and index within
// the slice: the same for every P, so a run's numerics do not depend on how layers are staged.
typedef struct {
    size_t src;
    uint32_t len;
    int head;            // 1: in the LM head's share of wte
    int owner;
    uint32_t idx;        // its index among its owner's blocks in the bucket
    size_t elem;         // its first element's index among its owner's elements in the bucket
} DpBlock;

// fp32 on the host: each slice of a bucket cut into D contiguous pieces, owner j's holding exactly
// the elements its blocks hold there (so every owner's share, and the bytes, are the blocks'), moved
// straight from and into the slot: the average is elementwise, so it is the same bits either way
typedef struct {
    size_t src, len;
    int head;            // 1: in the LM head's share of wte
    int owner;
    size_t elem;         // its first element's index among its owner's elements in the bucket
} DpPiece;

// A bucket: whole units, in the order backward completes them. Its bytes are laid out by owner, so
// an owner's share is one segment: int8: (scales, float) then (values, int8); fp32: (values, float).
typedef struct {
    int n_units, units_left; // units_left: still to be completed this step
    int first_unit;          // the lowest unit it holds (priority: the next forward needs it first)
    DpBlock* blocks;         // (n_blocks)
    int n_blocks;
    size_t* seg_off;         // (D + 1) byte offset of each owner's segment in buf
    int* seg_blocks;         // (D) blocks each owner owns here
    size_t* seg_elems;       // (D) their elements
    DpPiece* pieces;         // (n_pieces) fp32: the slices cut by owner, in the blocks' order
    int n_pieces;
    uint8_t* buf;            // (seg_off[D]) int8 only (fp32 moves the slot's own bytes)
    uint8_t* recv;           // (D - 1) segments of this replica's size: the other replicas' shares
    CommRequest* req;        // (n_req) this phase's sends and receives: int8 2 (D - 1), fp32 (D - 1) a piece
    int n_req;
    int phase;               // 0 waiting for its units, 1 shares in flight, 2 results in flight, 3 done
} DpBucket;

// what one step's sync did, for the step's log record
typedef struct {
    double bytes;            // sent plus received by this rank
    double wait;             // seconds dp_sync_finish waited: the communication backward did not hide
    double span;             // seconds from the first bucket posted to the last one done
    size_t nonfinite;        // this replica's gradient elements that were not finite (their blocks not quantized)
    size_t nonfinite_avg;    // elements of the averaged blocks it owns that were not finite (a replica's NaN
                             // makes its block's whole average NaN; so would a sum of finite values overflowing)
    double entropy;          // bits per int8 value sent this step (measured every DP_ENTROPY_EVERY steps; NaN otherwise)
} DpSyncStats;
#define DP_ENTROPY_EVERY 25

typedef struct {
    DpSyncConfig cfg;
    Comm* comm;
    Stage* st;
    int D, me;               // the stage's replicas, this one's index among them (comm->replica)
    int n_units;             // L + 3: the norm's units (stage_grad_unit_sumsq) and the LM head's share, L + 2
    DpBucket* buckets;       // (n_buckets)
    int n_buckets;
    int* bucket_of_unit;     // (L + 3) -1: not on this stage
    float* ef_replica;       // (num_params + head share) this replica's error-feedback residual, the slot's layout
    float* ef_owner;         // (the same) the requantization's residual, of the blocks this replica owns
    float* scratch;          // (block) the owner's sum of one block
    const float** shares;    // (D) fp32: the D replicas' shares of one piece, in replica order
    float* grads;            // (num_params) the slot being synced (host memory)
    float* head;             // (Vp*C) its LM head's share (last stage), else NULL
    int k, active, measure_entropy; // k: the slot being synced (-1: the caller's buffers)
    uint64_t hist[256];      // this step's int8 values sent, counted by value (q + 128; the entropy, when measure_entropy)
    double t_first;          // when the step's first bucket was posted (0: none yet)
    DpSyncStats stats;
} DpSync;

// A backend's own sync of gradient slot k where the gradient lives (tdpipe/dp_sync_cuda.cuh on GPUs,
// over NCCL): the same plan and the same bits as DpSync's. begin before the step's last backward,
// which tells unit_done (a GPT2UnitHook's done) as it completes units; end at post (it begins first
// when begin was not called), waits, and returns the step's figures. step: 0-based, as dp_sync_begin's.
typedef struct {
    void (*begin)(void* ctx, Stage* st, int k, int step);
    void (*unit_done)(void* ctx, int unit);
    DpSyncStats (*end)(void* ctx, Stage* st, int k, int step);
    void* ctx;
    GradQuant quant;
} DpSyncDevice;

void dp_sync_init(DpSync* ds, const DpSyncConfig* cfg, Comm* c, Stage* st);
// the plan alone (plan_only 1): buckets, blocks, segments and the residuals (int8 with error
// feedback), no message buffers; what a device sync (tdpipe/dp_sync_cuda.cuh) runs and checkpoints.
// plan_only 0 is dp_sync_init.
void dp_sync_init_plan(DpSync* ds, const DpSyncConfig* cfg, Comm* c, Stage* st, int plan_only);
void dp_sync_free(DpSync* ds);
// Bounds on any plan for stage st over D replicas, before it is made (the memory checks): what
// dp_sync_init and the device sync take is at most what these say (tests/test_dp_plan.c checks it)
typedef struct {
    size_t elems, blocks;            // the gradient's elements (the LM head's share included), blocks at most
    size_t share_elems, share_blocks; // one owner's share of them, at most
    size_t all_bytes, share_bytes;   // those as segment bytes (int8: values and scales; fp32: values)
    size_t units;                    // buckets at most (whole units)
    size_t slices;                   // the (unit, tensor) slices of the gradient
} DpSyncBounds;
DpSyncBounds dp_sync_bounds(const DpSyncConfig* cfg, const Stage* st, int D);
// host bytes dp_sync_init takes for stage st, at most; dp_sync_held_bytes: what an initialised one holds
double dp_sync_planned_bytes(const DpSyncConfig* cfg, const Stage* st, int D);
double dp_sync_held_bytes(const DpSync* ds);
// What the GPU sync (tdpipe/dp_sync_cuda.cuh) allocates on the device for plan p (dp_sync_init_plan's),
// part by part: the block table, the indices of this replica's blocks, the segment tables, one
// bucket's buffers (the buckets run one after another: the largest's), the residuals, the counters.
typedef struct {
    size_t n_blocks, n_mine; // over all buckets
    size_t buf, recv, acc;   // bytes: the largest bucket's segments, (D - 1) shares of mine, my sums (int8)
    double total;            // every allocation's bytes (one at least each)
} DpSyncDeviceSizes;
DpSyncDeviceSizes dp_sync_device_sizes(const DpSync* p);
// the GPU sync's device counters (64-bit each): a replica's non-finite values, the int8 histogram (256),
// the averaged blocks' non-finite values. One number for the sync that allocates them and the sizes
// above that count them (dp_sync_check holds the two equal)
#define DP_SYNC_DEVICE_COUNTERS 258
// device bytes the GPU sync takes for stage st over D replicas, at most (before its plan is made: the
// memory check): the whole stage as one bucket, an owner's largest share
double dp_sync_device_planned_bytes(const DpSyncConfig* cfg, const Stage* st, int D);
// slot k's sync starts: each bucket goes once backward has completed its units (dp_sync_unit_done),
// or at dp_sync_finish. step: 0-based, to pick the steps whose entropy is measured.
void dp_sync_begin(DpSync* ds, int k, int step);
// the same for a gradient in buffers of the caller's, laid out as a slot's (grads: num_params; head:
// the LM head's share, on the last stage): what dev/bench_dp_sync times without a model behind it
void dp_sync_begin_buffers(DpSync* ds, float* grads, float* head, int step);
// backward has completed `unit` of the slot (a GPT2UnitHook's done, ctx the DpSync)
void dp_sync_unit_done(void* ds, int unit);
// moves the buckets in flight along (cheap; call between ops, between units and between a unit's kernels)
void dp_sync_progress(DpSync* ds);
// the same as a GPT2UnitHook's between (ctx the DpSync): inside a unit, between its kernels
void dp_sync_between(void* ds);
// posts the buckets still waiting, waits for every bucket, and leaves the replicas' average in the
// slot, bitwise the same on every replica; returns the step's figures
DpSyncStats dp_sync_finish(DpSync* ds);
// the residuals back to zero: after a rollback (the refused step's rounding, and whatever the halted
// steps after it synced, are in them; clearing them on every replica keeps the run deterministic)
void dp_sync_clear_residuals(DpSync* ds);
// the bytes a rank sends and receives for one step (the formula dp_sync_finish's count must meet)
double dp_sync_step_bytes(const DpSync* ds);

#ifdef __cplusplus
}
#endif
