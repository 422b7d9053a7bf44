// tdpipe/dp_sync.h's bucketed two-shot gradient average on the GPUs: the same plan, segments and
// arithmetic, bit for bit the host's result, in device memory over NCCL (grouped sends and receives).
// nvcc builds get the real thing; a C build gets stubs that say "not here" (dp_sync_cuda_init: NULL).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cuda.cuh"

// ---- How it works ----------------------------------------------------------------------------------
// The plan is dp_sync.c's own (dp_sync_init_plan: buckets of whole units, blocks cut from each slice's
// start, owner = block_owner(unit, tensor, index), each bucket's bytes laid out by owner; int8: an
// owner's segment is (scales, float[blocks]) then (values, int8[elems]); fp32: (values, float)). Its
// block table goes to the device once, as is (DpBlock: src, len, head, owner, idx, elem), with each
// bucket's segment offsets (seg_off, D + 1) and block counts (seg_blocks, D), and the list of the
// blocks this replica owns (indices into the bucket's blocks). Every kernel runs one warp per plan
// block (a grid-stride loop over the bucket's blocks, the lanes over the block's elements, any block
// size), so one launch covers a bucket, whatever its blocks' owners (consecutive blocks of a slice
// have different owners: "contiguous runs" would be one block each). Per bucket, in the order its units complete, all on
// the NCCL stream:
//   1  dsc_pack_kernel: each block of the gradient (+ the replica residual: quant_int8_ef's
//      arithmetic) into its owner's segment at (idx, elem); [the int8 histogram of every segment's
//      values, on the steps dp_sync.c measures entropy]; NCCL group: ncclSend of owner j's segment to
//      j, ncclRecv of replica j's share of mine into recv row peer(j), for every j != me
//   2  dsc_reduce_kernel (this replica's blocks): the D shares dequantized and added in replica order
//      (fmaf from +0; fp32: x_0 + x_1 + ...), divided by D (exact non-ftz PTX, as quant.cuh), then
//      (int8) requantized with the owner residual into my segment in place; NCCL group: my segment
//      to every replica, owner j's segment from j into its place in buf
//   3  dsc_unpack_kernel: every block of buf (now the owners' results) back into the gradient slot
//      and the LM head's share
// The buffers (buf: the largest bucket's seg_off[D] bytes; recv: (D - 1) times the largest share of
// mine; the owner's sums) are shared by all buckets: one stream runs the buckets one after another.
// An int8 segment's scales start wherever the previous segment ended (seg_off need not be a multiple
// of 4 when blocks have odd lengths): the kernels read and write scales byte by byte where unaligned.
// The non-finite counts (phase 1's of this replica's gradient, phase 2's of the averaged blocks it owns,
// as dp_sync.c counts them) and the histogram are device counters, read back once per step with the
// sync's end.
//
// Overlapped with backward: the executor starts the sync before the step's last backward
// (dp_sync_cuda_start), the CUDA weight backward tells dp_sync_cuda_unit_done each unit as it enqueues
// the unit's last kernel, an event recorded on the compute stream then marks it, and a bucket whose
// units are all done is enqueued behind its event; dp_sync_cuda_end enqueues the rest and waits.
// Buckets change no bit (the result is per block), only when the bytes move.
//
// NaNs: the dequantizing kernels pass an operand's NaN on quieted, as x86 does (quant.cuh); the fp32
// sum does the same for a NaN operand (the first operand's first, as the vectorized host loop adds
// acc + x). A NaN *made* from infinities (inf - inf in an fp32 sum) is x86's 0xffc00000 on the host
// and 0x7fffffff here: the guard refuses such a step on every replica either way. In int8 mode every
// non-finite block is requantized to the canonical NaN scale, so the bits agree there too.
//
// ---- Where it runs ----------------------------------------------------------------------------------
// train_tdpipe's make_links takes it when a stage on GPUs has replicas NCCL connects (each its own GPU,
// or its own NCCL_HOSTID) and the run asks for int8 or fp32 buckets: the executor's step average is
// then dp_sync_cuda_average (a DpSyncDevice), the drift monitor's exact pass keeps the fp32 NCCL
// average, and checkpoints read and write the residuals through the plan's host mirrors
// (dp_sync_cuda_residuals_to_host / _from_host); a rollback clears them. dev/cuda/dp_sync_check holds
// it against dp_sync.c bit for bit.

typedef struct DpSyncCuda DpSyncCuda;

#ifdef TD_CUDA
#include "llmc/quant.cuh"
#include "tdpipe/comm_nccl.cuh"

struct DpSyncCuda {
    DpSync plan;                  // dp_sync_init_plan: the buckets' blocks and segments; host residual mirrors (int8 + EF)
    CommNccl* cn;                 // the caller's communicator (shared; freed by the caller, after this)
    Stage* st;
    int D, me, int8, ef;
    size_t n;                     // num_params + the LM head's share
    // the block table on the device, every bucket's one after another
    DpBlock* d_blocks;            // (sum of n_blocks) as the plan's
    uint32_t* d_mine;             // (this replica's blocks) their indices in their bucket's blocks
    size_t* d_seg_off;            // (n_buckets, D + 1) the plan's seg_off
    int* d_seg_blocks;            // (n_buckets, D) the plan's seg_blocks
    size_t* block_base;           // host (n_buckets + 1) where bucket b's blocks start in d_blocks
    size_t* mine_base;            // host (n_buckets + 1) where its owned blocks start in d_mine
    // buffers shared by the buckets, which run one after another on cn->stream
    uint8_t* d_buf;               // (largest seg_off[D]) a bucket's segments
    uint8_t* d_recv;              // (largest (D - 1) * my segment) the other replicas' shares of mine
    float* d_acc;                 // (largest seg_elems[me]) the owner's sums before requantizing (int8)
    float* d_ef_replica;          // (n) error feedback (int8 + EF): this replica's residual, the slot's layout
    float* d_ef_owner;            // (n) the requantization's residual of the blocks this replica owns
    unsigned long long* d_counts; // (DSC_COUNTS) non-finite elements, the histogram of the int8 values sent, non-finite averaged elements
    unsigned long long* h_counts; // (DSC_COUNTS) pinned host copy
    double device_bytes;          // what the above take on the device
    cudaEvent_t* events;          // (n_buckets) where the compute stream completed each bucket's units
    // the sync in flight (dp_sync_cuda_start .. _end)
    int active, measure;          // measure: this step's entropy
    float* grads;                 // (num_params) device
    float* head;                  // (Vp * C) device, the LM head's share; NULL off the last stage
    double t_first;               // when its first bucket was enqueued (0: none yet)
    DpSyncStats stats;            // the last step's figures
};

// ---- device helpers ------------------------------------------------------------------------------

// a + b with x86's NaN rule for NaN operands (the first one's, quieted), else one exact IEEE add
__device__ __forceinline__ float dsc_add(float a, float b) {
    return quant_isnan(a) ? quant_quiet(a) : quant_isnan(b) ? quant_quiet(b) : f32_add_exact(a, b);
}
// a / d, the same way
__device__ __forceinline__ float dsc_div(float a, float d) { return quant_isnan(a) ? quant_quiet(a) : f32_div_exact(a, d); }

enum { DSC_FP32 = 0, DSC_INT8 = 1, DSC_INT8_EF = 2 };
// the device counters: [0] phase 1's non-finite elements, [1, 257) the int8 histogram, [257] phase 2's
enum { DSC_COUNT_AVG = 257, DSC_COUNTS = DP_SYNC_DEVICE_COUNTERS };
static_assert(DSC_COUNT_AVG + 1 == DSC_COUNTS, "the counters dp_sync_device_sizes counts (dp_sync.h) are these");

// the share of this replica's segment that replica q sent (its own for q = me), laid out as the segment
__device__ __forceinline__ const uint8_t* dsc_share(const uint8_t* own, const uint8_t* recv, size_t mine_bytes, int q, int me) {
    return q == me ? own : recv + (size_t)(q < me ? q : q - 1) * mine_bytes;
}

// phase 1: every block of the bucket from the gradient (grads, or head for the LM head's share) into its
// owner's segment of buf; ef: the replica residual (DSC_INT8_EF), head_off: where the head's part of it starts
template <int MODE>
__global__ void dsc_pack_kernel(const DpBlock* blocks, size_t n_blocks, const size_t* seg_off, const int* seg_blocks, const float* grads,
                                const float* head, float* ef, size_t head_off, uint8_t* buf, unsigned long long* bad) {
    const int lane = threadIdx.x & 31;
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < n_blocks; b += warps) {
        const DpBlock blk = blocks[b];
        const float* x = (blk.head ? head : grads) + blk.src;
        uint8_t* seg = buf + seg_off[blk.owner];
        const int m = (int)blk.len;
        if (MODE == DSC_FP32) {
            float* out = (float*)seg + blk.elem; // (fp32 segments are whole floats: aligned)
            for (int i = lane; i < m; i += 32) out[i] = x[i];
            continue;
        }
        int8_t* q = (int8_t*)(seg + (size_t)seg_blocks[blk.owner] * sizeof(float)) + blk.elem;
        float* r = MODE == DSC_INT8_EF ? ef + (blk.head ? head_off : 0) + blk.src : nullptr;
        quant_int8_block_warp<MODE == DSC_INT8_EF>(x, r, m, q, seg + (size_t)blk.idx * sizeof(float), bad, lane);
    }
}

// phase 2: each block this replica owns (mine: indices into blocks) summed over the D shares in replica
// order and divided by D into acc (int8, then requantized into own with ef, the owner residual, or
// without) or straight into own (fp32); own: my segment in buf (my share in, the result out, in place:
// a lane writes only the elements it read, lane 0 the scale after every lane has read it)
template <int MODE>
__global__ void dsc_reduce_kernel(const DpBlock* blocks, const uint32_t* mine, size_t n_mine, int D, int me, uint8_t* own, const uint8_t* recv,
                                  size_t mine_bytes, int own_blocks, float* acc, float* ef, size_t head_off, unsigned long long* bad) {
    const int lane = threadIdx.x & 31;
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    const float fD = (float)D;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < n_mine; b += warps) {
        const DpBlock blk = blocks[mine[b]];
        const int m = (int)blk.len;
        if (MODE == DSC_FP32) { // as dp_sync.c (COMM_ORDERED_AVERAGE): x_0, then + x_1, + x_2, ..., then / D
            for (int i = lane; i < m; i += 32) {
                float v = ((const float*)dsc_share(own, recv, mine_bytes, 0, me))[blk.elem + i];
                for (int q = 1; q < D; q++) v = dsc_add(v, ((const float*)dsc_share(own, recv, mine_bytes, q, me))[blk.elem + i]);
                ((float*)own)[blk.elem + i] = dsc_div(v, fD);
            }
            continue;
        }
        float* a = acc + blk.elem;
        for (int i = lane; i < m; i += 32) { // dequant_int8_add for replica 0, 1, ... after acc = 0, then / D
            float v = 0.0f;
            for (int q = 0; q < D; q++) {
                const uint8_t* sh = dsc_share(own, recv, mine_bytes, q, me);
                v = quant_dequant_add(((const int8_t*)(sh + (size_t)own_blocks * sizeof(float)))[blk.elem + i], quant_load_f32(sh + (size_t)blk.idx * sizeof(float)), v);
            }
            a[i] = dsc_div(v, fD);
        }
        __syncwarp();
        int8_t* qo = (int8_t*)(own + (size_t)own_blocks * sizeof(float)) + blk.elem;
        float* r = MODE == DSC_INT8_EF ? ef + (blk.head ? head_off : 0) + blk.src : nullptr;
        quant_int8_block_warp<MODE == DSC_INT8_EF>(a, r, m, qo, own + (size_t)blk.idx * sizeof(float), bad, lane);
    }
}

// phase 3: every block of buf (the owners' results) into the gradient: q s (a NaN scale's NaN quieted,
// as dequant_int8 on x86 and quant.cuh), or the fp32 values
template <bool INT8>
__global__ void dsc_unpack_kernel(const DpBlock* blocks, size_t n_blocks, const size_t* seg_off, const int* seg_blocks, const uint8_t* buf,
                                  float* grads, float* head) {
    const int lane = threadIdx.x & 31;
    const size_t warps = ((size_t)gridDim.x * blockDim.x) >> 5;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < n_blocks; b += warps) {
        const DpBlock blk = blocks[b];
        float* x = (blk.head ? head : grads) + blk.src;
        const uint8_t* seg = buf + seg_off[blk.owner];
        const int m = (int)blk.len;
        if (!INT8) {
            const float* v = (const float*)seg + blk.elem;
            for (int i = lane; i < m; i += 32) x[i] = v[i];
            continue;
        }
        const float s = quant_load_f32(seg + (size_t)blk.idx * sizeof(float));
        const int8_t* q = (const int8_t*)(seg + (size_t)seg_blocks[blk.owner] * sizeof(float)) + blk.elem;
        for (int i = lane; i < m; i += 32) x[i] = quant_dequant(q[i], s);
    }
}

// ---- setup ----------------------------------------------------------------------------------------

static inline void* dsc_malloc(DpSyncCuda* ds, size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, bytes ? bytes : 1));
    ds->device_bytes += (double)(bytes ? bytes : 1); // (as dp_sync_device_sizes counts)
    return p;
}

// The device sync for stage st over c's replicas, on the NCCL communicator cn (comm_nccl_init's, shared:
// its stream runs everything here; the caller frees it after dp_sync_cuda_free). Every replica of the
// stage calls it with the same cfg. The residuals start at zero.
static inline DpSyncCuda* dp_sync_cuda_init_nccl(const DpSyncConfig* cfg, Comm* c, Stage* st, CommNccl* cn) {
    if (cn->D != c->D || cn->replica != c->replica)
        td_fatal("dp_sync_cuda_init: the NCCL communicator (replica %d of %d) is not this grid's (replica %d of %d)", cn->replica, cn->D, c->replica, c->D);
    DpSyncCuda* ds = (DpSyncCuda*)calloc_check(1, sizeof(DpSyncCuda));
    ds->cn = cn;
    ds->st = st;
    ds->D = c->D;
    ds->me = c->replica;
    ds->int8 = cfg->quant == GRAD_QUANT_INT8;
    ds->ef = ds->int8 && cfg->error_feedback;
    ds->n = st->num_params + (st->range.has_head ? st->sizes[0] : 0);
    dp_sync_init_plan(&ds->plan, cfg, c, st, 1);
    DpSync* p = &ds->plan;
    int D = ds->D, me = ds->me, nb = p->n_buckets;
    ds->block_base = (size_t*)calloc_check(nb + 1, sizeof(size_t));
    ds->mine_base = (size_t*)calloc_check(nb + 1, sizeof(size_t));
    DpSyncDeviceSizes z = dp_sync_device_sizes(p);
    for (int b = 0; b < nb; b++) {
        ds->block_base[b + 1] = ds->block_base[b] + (size_t)p->buckets[b].n_blocks;
        ds->mine_base[b + 1] = ds->mine_base[b] + (size_t)p->buckets[b].seg_blocks[me];
    }
    // the block table, the owned blocks' indices and the segments, every bucket's, one upload each
    size_t n_blocks = ds->block_base[nb], n_mine = ds->mine_base[nb];
    DpBlock* blocks = (DpBlock*)malloc_check((n_blocks ? n_blocks : 1) * sizeof(DpBlock));
    uint32_t* mine = (uint32_t*)malloc_check((n_mine ? n_mine : 1) * sizeof(uint32_t));
    size_t* seg_off = (size_t*)malloc_check((size_t)(nb ? nb : 1) * (D + 1) * sizeof(size_t));
    int* seg_blocks = (int*)malloc_check((size_t)(nb ? nb : 1) * D * sizeof(int));
    for (int b = 0; b < nb; b++) {
        const DpBucket* k = &p->buckets[b];
        memcpy(blocks + ds->block_base[b], k->blocks, (size_t)k->n_blocks * sizeof(DpBlock));
        size_t j = ds->mine_base[b];
        for (int i = 0; i < k->n_blocks; i++)
            if (k->blocks[i].owner == me) mine[j++] = (uint32_t)i;
        if (j != ds->mine_base[b + 1]) td_fatal("dp_sync_cuda_init: bucket %d: %zu blocks owned, the plan says %d", b, j - ds->mine_base[b], k->seg_blocks[me]);
        memcpy(seg_off + (size_t)b * (D + 1), k->seg_off, (D + 1) * sizeof(size_t));
        memcpy(seg_blocks + (size_t)b * D, k->seg_blocks, D * sizeof(int));
    }
    ds->d_blocks = (DpBlock*)dsc_malloc(ds, n_blocks * sizeof(DpBlock));
    ds->d_mine = (uint32_t*)dsc_malloc(ds, n_mine * sizeof(uint32_t));
    ds->d_seg_off = (size_t*)dsc_malloc(ds, (size_t)nb * (D + 1) * sizeof(size_t));
    ds->d_seg_blocks = (int*)dsc_malloc(ds, (size_t)nb * D * sizeof(int));
    cudaCheck(cudaMemcpy(ds->d_blocks, blocks, n_blocks * sizeof(DpBlock), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(ds->d_mine, mine, n_mine * sizeof(uint32_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(ds->d_seg_off, seg_off, (size_t)nb * (D + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(ds->d_seg_blocks, seg_blocks, (size_t)nb * D * sizeof(int), cudaMemcpyHostToDevice));
    free(blocks);
    free(mine);
    free(seg_off);
    free(seg_blocks);
    ds->d_buf = (uint8_t*)dsc_malloc(ds, z.buf);
    ds->d_recv = (uint8_t*)dsc_malloc(ds, z.recv);
    if (ds->int8) ds->d_acc = (float*)dsc_malloc(ds, z.acc);
    if (ds->ef) {
        ds->d_ef_replica = (float*)dsc_malloc(ds, ds->n * sizeof(float));
        ds->d_ef_owner = (float*)dsc_malloc(ds, ds->n * sizeof(float));
        cudaCheck(cudaMemset(ds->d_ef_replica, 0, ds->n * sizeof(float)));
        cudaCheck(cudaMemset(ds->d_ef_owner, 0, ds->n * sizeof(float)));
    }
    ds->events = (cudaEvent_t*)calloc_check(nb ? nb : 1, sizeof(cudaEvent_t));
    for (int b = 0; b < nb; b++) cudaCheck(cudaEventCreateWithFlags(&ds->events[b], cudaEventDisableTiming));
    ds->d_counts = (unsigned long long*)dsc_malloc(ds, DSC_COUNTS * sizeof(unsigned long long));
    cudaCheck(cudaMallocHost((void**)&ds->h_counts, DSC_COUNTS * sizeof(unsigned long long)));
    ds->stats.entropy = NAN;
    return ds;
}

// The same on cuda_dp (cuda_dp_init's ctx, a CudaDp: train_tdpipe's make_links takes this sync only
// where that NCCL communicator exists, and shares it)
static inline DpSyncCuda* dp_sync_cuda_init(const DpSyncConfig* cfg, Comm* c, Stage* st, void* cuda_dp) {
    return dp_sync_cuda_init_nccl(cfg, c, st, &((CudaDp*)cuda_dp)->nccl);
}

static inline void dp_sync_cuda_free(DpSyncCuda* ds) {
    if (!ds) return;
    cudaCheck(cudaStreamSynchronize(ds->cn->stream));
    void* dev[] = {ds->d_blocks, ds->d_mine, ds->d_seg_off, ds->d_seg_blocks, ds->d_buf, ds->d_recv, ds->d_acc, ds->d_ef_replica, ds->d_ef_owner, ds->d_counts};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) cudaCheck(cudaFree(dev[i]));
    cudaCheck(cudaFreeHost(ds->h_counts));
    for (int b = 0; b < ds->plan.n_buckets; b++) cudaCheck(cudaEventDestroy(ds->events[b]));
    free(ds->events);
    dp_sync_free(&ds->plan);
    free(ds->block_base);
    free(ds->mine_base);
    free(ds);
}

// ---- one step ----------------------------------------------------------------------------------------

// Bucket bi's three phases, enqueued on the communication stream behind whatever it was made to wait
// for (the units' event, or all of the compute stream): pack into the owners' segments, the all-to-all,
// the owner's sums / D (requantized), the all-gather, unpack into the gradient
static inline void dsc_post_bucket(DpSyncCuda* ds, int bi) {
    DpSync* p = &ds->plan;
    CommNccl* cn = ds->cn;
    cudaStream_t sm = cn->stream;
    int D = ds->D, me = ds->me, mode = !ds->int8 ? DSC_FP32 : ds->ef ? DSC_INT8_EF : DSC_INT8;
    float *grads = ds->grads, *head = ds->head;
    size_t head_off = ds->st->num_params;
    p->buckets[bi].phase = 1;
    if (ds->t_first == 0.0) ds->t_first = now_seconds();
    if (p->buckets[bi].n_blocks == 0) return;
    const DpBucket* b = &p->buckets[bi];
    const DpBlock* d_blocks = ds->d_blocks + ds->block_base[bi];
    const size_t* d_seg_off = ds->d_seg_off + (size_t)bi * (D + 1);
    const int* d_seg_blocks = ds->d_seg_blocks + (size_t)bi * D;
    size_t nbl = (size_t)b->n_blocks, n_mine = ds->mine_base[bi + 1] - ds->mine_base[bi];
    size_t mine = b->seg_off[me + 1] - b->seg_off[me];
    uint8_t* own = ds->d_buf + b->seg_off[me];
    // phase 1: into the owners' segments, each on its way to its owner, the others' shares of mine here
    if (mode == DSC_FP32)
        dsc_pack_kernel<DSC_FP32><<<quant_grid(nbl), 256, 0, sm>>>(d_blocks, nbl, d_seg_off, d_seg_blocks, grads, head, NULL, head_off, ds->d_buf, ds->d_counts);
    else if (mode == DSC_INT8)
        dsc_pack_kernel<DSC_INT8><<<quant_grid(nbl), 256, 0, sm>>>(d_blocks, nbl, d_seg_off, d_seg_blocks, grads, head, NULL, head_off, ds->d_buf, ds->d_counts);
    else
        dsc_pack_kernel<DSC_INT8_EF><<<quant_grid(nbl), 256, 0, sm>>>(d_blocks, nbl, d_seg_off, d_seg_blocks, grads, head, ds->d_ef_replica, head_off, ds->d_buf,
                                                                ds->d_counts);
    cudaCheckLaunch("dsc_pack_kernel");
    if (ds->measure)
        for (int j = 0; j < D; j++) { // every value this replica quantized: each segment's int8 part
            size_t ne = b->seg_elems[j];
            if (ne == 0) continue;
            size_t hb = (ne + 4095) / 4096;
            quant_histogram_kernel<<<hb > 2048 ? 2048 : (int)hb, 256, 0, sm>>>((const int8_t*)(ds->d_buf + b->seg_off[j] + (size_t)b->seg_blocks[j] * sizeof(float)),
                                                                             ne, ds->d_counts + 1);
            cudaCheckLaunch("quant_histogram_kernel (dp_sync_cuda)");
        }
    if (D > 1) { // the all-to-all; zero-size segments are skipped on both sides alike (the plan is every replica's)
        ncclCheck(ncclGroupStart());
        for (int j = 0; j < D; j++) {
            if (j == me) continue;
            size_t bytes = b->seg_off[j + 1] - b->seg_off[j];
            if (bytes) ncclCheck(ncclSend(ds->d_buf + b->seg_off[j], bytes, ncclUint8, j, cn->dp, sm));
            if (mine) ncclCheck(ncclRecv(ds->d_recv + (size_t)(j < me ? j : j - 1) * mine, mine, ncclUint8, j, cn->dp, sm));
        }
        ncclCheck(ncclGroupEnd());
    }
    // phase 2: the owner's sums, / D, requantized, in place in my segment; then to every replica
    if (n_mine) {
        const uint32_t* d_mine = ds->d_mine + ds->mine_base[bi];
        int ob = b->seg_blocks[me];
        if (mode == DSC_FP32)
            dsc_reduce_kernel<DSC_FP32><<<quant_grid(n_mine), 256, 0, sm>>>(d_blocks, d_mine, n_mine, D, me, own, ds->d_recv, mine, ob, NULL, NULL, head_off,
                                                                      ds->d_counts + DSC_COUNT_AVG);
        else if (mode == DSC_INT8)
            dsc_reduce_kernel<DSC_INT8><<<quant_grid(n_mine), 256, 0, sm>>>(d_blocks, d_mine, n_mine, D, me, own, ds->d_recv, mine, ob, ds->d_acc, NULL, head_off,
                                                                      ds->d_counts + DSC_COUNT_AVG);
        else
            dsc_reduce_kernel<DSC_INT8_EF><<<quant_grid(n_mine), 256, 0, sm>>>(d_blocks, d_mine, n_mine, D, me, own, ds->d_recv, mine, ob, ds->d_acc, ds->d_ef_owner,
                                                                         head_off, ds->d_counts + DSC_COUNT_AVG);
        cudaCheckLaunch("dsc_reduce_kernel");
    }
    if (D > 1) { // the all-gather: my result to every replica, owner j's into its place in buf
        ncclCheck(ncclGroupStart());
        for (int j = 0; j < D; j++) {
            if (j == me) continue;
            size_t bytes = b->seg_off[j + 1] - b->seg_off[j];
            if (mine) ncclCheck(ncclSend(own, mine, ncclUint8, j, cn->dp, sm));
            if (bytes) ncclCheck(ncclRecv(ds->d_buf + b->seg_off[j], bytes, ncclUint8, j, cn->dp, sm));
        }
        ncclCheck(ncclGroupEnd());
    }
    // phase 3: the owners' results into the gradient
    if (mode == DSC_FP32) dsc_unpack_kernel<false><<<quant_grid(nbl), 256, 0, sm>>>(d_blocks, nbl, d_seg_off, d_seg_blocks, ds->d_buf, grads, head);
    else dsc_unpack_kernel<true><<<quant_grid(nbl), 256, 0, sm>>>(d_blocks, nbl, d_seg_off, d_seg_blocks, ds->d_buf, grads, head);
    cudaCheckLaunch("dsc_unpack_kernel");
}

// The sync of a gradient in device memory begins: grads (num_params) and head (the LM head's share,
// last stage; else NULL), laid out as a slot's; step: 0-based, picks the steps whose entropy is
// measured (as dp_sync_begin). Its buckets go as backward completes their units
// (dp_sync_cuda_unit_done) or at dp_sync_cuda_end.
static inline void dp_sync_cuda_start(DpSyncCuda* ds, float* grads, float* head, int step) {
    DpSync* p = &ds->plan;
    if (ds->active) td_fatal("dp_sync_cuda_start: a sync is still running");
    if (ds->st->range.has_head != (head != NULL)) td_fatal("dp_sync_cuda_start: the LM head's share %s", head ? "given to a stage without the head" : "missing");
    ds->active = 1;
    ds->grads = grads, ds->head = head;
    ds->measure = ds->int8 && step % DP_ENTROPY_EVERY == 0;
    ds->t_first = 0.0;
    memset(&ds->stats, 0, sizeof ds->stats);
    for (int i = 0; i < p->n_buckets; i++) p->buckets[i].units_left = p->buckets[i].n_units, p->buckets[i].phase = 0;
    cudaCheck(cudaMemsetAsync(ds->d_counts, 0, DSC_COUNTS * sizeof(unsigned long long), ds->cn->stream)); // (2 KiB)
}

// A GPT2UnitHook's done (ctx: the DpSyncCuda): backward has enqueued the last kernels of `unit`. An
// event on the compute stream marks the moment; a bucket whose units are all done goes, behind its
// event, so its communication runs while backward computes the units below. Every replica enqueues
// the same buckets in the same order (backward's program order), as NCCL's point-to-point calls need.
static inline void dp_sync_cuda_unit_done(void* ctx, int unit) {
    DpSyncCuda* ds = (DpSyncCuda*)ctx;
    DpSync* p = &ds->plan;
    int bi = ds->active && unit >= 0 && unit < p->n_units ? p->bucket_of_unit[unit] : -1;
    if (bi < 0 || --p->buckets[bi].units_left > 0 || p->buckets[bi].phase) return;
    cudaCheck(cudaEventRecord(ds->events[bi], g_cuda_stream));
    cudaCheck(cudaStreamWaitEvent(ds->cn->stream, ds->events[bi], 0));
    dsc_post_bucket(ds, bi);
}

// The buckets not yet gone (behind all of the compute stream's work), then the wait: the average in
// place when it returns, bitwise the same on every replica and the same bits as dp_sync.c's for the
// same local gradients. Returns the step's figures (wait: the time this call blocked; span: from the
// first bucket enqueued to the end).
static inline DpSyncStats dp_sync_cuda_end(DpSyncCuda* ds) {
    DpSync* p = &ds->plan;
    CommNccl* cn = ds->cn;
    if (!ds->active) td_fatal("dp_sync_cuda_end: no sync was started");
    double t0 = now_seconds();
    int behind = 0;
    for (int bi = 0; bi < p->n_buckets; bi++) {
        if (p->buckets[bi].phase) continue;
        if (!behind) comm_nccl_wait_for(cn, g_cuda_stream), behind = 1; // after the backward kernels that wrote the gradient
        dsc_post_bucket(ds, bi);
    }
    cudaCheck(cudaMemcpyAsync(ds->h_counts, ds->d_counts, DSC_COUNTS * sizeof(unsigned long long), cudaMemcpyDeviceToHost, cn->stream));
    comm_nccl_sync(cn); // polls NCCL's asynchronous errors while it waits; the compute stream reads the slot next
    double t1 = now_seconds();
    ds->active = 0;
    ds->stats.nonfinite = (size_t)ds->h_counts[0];
    ds->stats.nonfinite_avg = (size_t)ds->h_counts[DSC_COUNT_AVG];
    ds->stats.bytes = ds->D > 1 ? dp_sync_step_bytes(p) : 0.0;
    ds->stats.wait = t1 - t0;
    ds->stats.span = t1 - (ds->t_first > 0.0 ? ds->t_first : t0);
    ds->stats.entropy = NAN;
    if (ds->measure) {
        uint64_t hist[256];
        for (int i = 0; i < 256; i++) hist[i] = (uint64_t)ds->h_counts[1 + i];
        ds->stats.entropy = quant_entropy_bits(hist);
    }
    return ds->stats;
}

// both at once: the average of a gradient backward has finished (dev/cuda/dp_sync_check)
static inline DpSyncStats dp_sync_cuda_sync(DpSyncCuda* ds, float* grads, float* head, int step) {
    dp_sync_cuda_start(ds, grads, head, step);
    return dp_sync_cuda_end(ds);
}

// A DpSyncDevice (ctx: the DpSyncCuda) on gradient slot k of st (the stage it was made for) and its LM
// head's share: begin before the step's last backward (which then tells unit_done), end at post
static inline void dp_sync_cuda_begin_slot(void* ctx, Stage* st, int k, int step) {
    DpSyncCuda* ds = (DpSyncCuda*)ctx;
    if (st != ds->st) td_fatal("dp_sync_cuda_begin_slot: a stage it was not made for");
    GPT2Cuda* m = cuda_model_at(st, k);
    dp_sync_cuda_start(ds, m->grads_memory, m->dwte_head, step);
}
static inline DpSyncStats dp_sync_cuda_end_slot(void* ctx, Stage* st, int k, int step) {
    DpSyncCuda* ds = (DpSyncCuda*)ctx;
    if (!ds->active) dp_sync_cuda_begin_slot(ctx, st, k, step);
    return dp_sync_cuda_end(ds);
}

// the plan (a DpSync without host buffers; int8 with error feedback: its ef_replica and ef_owner are
// host mirrors of the device's residuals, what run_checkpoint_save and _resume read and write)
static inline DpSync* dp_sync_cuda_plan(DpSyncCuda* ds) { return &ds->plan; }

// the residuals (int8 with error feedback) to host arrays replica and owner (n: num_params then the LM
// head's share each, the layout of dp_sync.c's ef_replica and ef_owner); 0 without error feedback (nothing
// copied), else 1. Waits for the sync in flight.
static inline int dp_sync_cuda_residuals_to_host(DpSyncCuda* ds, float* replica, float* owner) {
    if (!ds->ef) return 0;
    cudaCheck(cudaStreamSynchronize(ds->cn->stream));
    cudaCheck(cudaMemcpy(replica, ds->d_ef_replica, ds->n * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(owner, ds->d_ef_owner, ds->n * sizeof(float), cudaMemcpyDeviceToHost));
    return 1;
}
// the reverse (a resume): the device residuals from host arrays of the same layout
static inline int dp_sync_cuda_residuals_from_host(DpSyncCuda* ds, const float* replica, const float* owner) {
    if (!ds->ef) return 0;
    cudaCheck(cudaStreamSynchronize(ds->cn->stream));
    cudaCheck(cudaMemcpy(ds->d_ef_replica, replica, ds->n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(ds->d_ef_owner, owner, ds->n * sizeof(float), cudaMemcpyHostToDevice));
    return 1;
}
// the residuals back to zero (a rollback, as dp_sync_clear_residuals), the host mirrors too
static inline void dp_sync_cuda_clear_residuals(DpSyncCuda* ds) {
    if (!ds->ef) return;
    cudaCheck(cudaStreamSynchronize(ds->cn->stream));
    cudaCheck(cudaMemset(ds->d_ef_replica, 0, ds->n * sizeof(float)));
    cudaCheck(cudaMemset(ds->d_ef_owner, 0, ds->n * sizeof(float)));
    dp_sync_clear_residuals(&ds->plan);
}
// device bytes it holds
static inline double dp_sync_cuda_device_bytes(const DpSyncCuda* ds) { return ds->device_bytes; }

#else // a build without nvcc: there is no device sync (the host dp_sync is the way)
struct DpSyncCuda {
    DpSync plan;
};
static inline DpSyncCuda* dp_sync_cuda_init(const DpSyncConfig* cfg, Comm* c, Stage* st, void* cuda_dp) { return NULL; }
static inline void dp_sync_cuda_free(DpSyncCuda* ds) {}
static inline void dp_sync_cuda_begin_slot(void* ctx, Stage* st, int k, int step) { td_fatal("dp_sync_cuda_begin_slot: this build has no CUDA backend"); }
static inline void dp_sync_cuda_unit_done(void* ctx, int unit) {}
static inline DpSyncStats dp_sync_cuda_end_slot(void* ctx, Stage* st, int k, int step) { td_fatal("dp_sync_cuda_end_slot: this build has no CUDA backend"); }
static inline DpSync* dp_sync_cuda_plan(DpSyncCuda* ds) { return &ds->plan; }
static inline int dp_sync_cuda_residuals_to_host(DpSyncCuda* ds, float* replica, float* owner) { return 0; }
static inline int dp_sync_cuda_residuals_from_host(DpSyncCuda* ds, const float* replica, const float* owner) { return 0; }
static inline void dp_sync_cuda_clear_residuals(DpSyncCuda* ds) {}
static inline double dp_sync_cuda_device_bytes(const DpSyncCuda* ds) { return 0.0; }
#endif
