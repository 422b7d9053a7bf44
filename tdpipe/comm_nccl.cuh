// The NCCL half of tdpipe's communication (nvcc only): GPU-resident pipeline messages between stages
// and the data-parallel gradient average, bitwise identical to comm.c's comm_dp_average (replica-order
// sum, exact division), over one NCCL communicator per pipeline and per data-parallel group.
#pragma once
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "llmc/cuda_common.cuh"
#include "tdpipe/comm.h"
#include "tdpipe/mpi_check.h"

// ---- checked calls -----------------------------------------------------------------------------

// an NCCL call that fails ends the process with the file, line, the call, NCCL's error string and its
// last detailed message
#define ncclCheck(call)                                                                                \
    do {                                                                                               \
        ncclResult_t r_ = (call);                                                                      \
        if (r_ != ncclSuccess) {                                                                       \
            const char* d_ = ncclGetLastError(NULL);                                                   \
            td_fatal_at(__FILE__, __LINE__, "%s: %s%s%s%s", #call, ncclGetErrorString(r_), d_ && *d_ ? " (" : "", \
                        d_ && *d_ ? d_ : "", d_ && *d_ ? ")" : "");                                    \
        }                                                                                              \
    } while (0)


typedef struct {
    ncclComm_t pipe;      // this replica's P stages, NCCL rank = stage
    ncclComm_t dp;        // this stage's D replicas, NCCL rank = replica
    cudaStream_t stream;  // every NCCL operation and the averaging kernel run here (non-blocking stream)
    cudaEvent_t order;    // internal: orders the module's stream after a producer stream
    int P, D, stage, replica;
    int device;
} CommNccl;

// ---- the ordered average kernel ------------------------------------------------------------------

// Exact IEEE round-to-nearest add and divide that --use_fast_math cannot touch: under fast math
// __fadd_rn / __fdiv_rn compile to add.rn.ftz / div.rn.ftz (subnormals flushed to zero), which would
// differ from the CPU's result on subnormal gradients. The PTX instructions without .ftz keep them.
__device__ __forceinline__ float comm_nccl_add_exact(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float comm_nccl_div_exact(float a, float b) {
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// out (count) <- (x_0 + x_1 + ... + x_{D-1}) / D, x_q = in + q * stride (in: (D, stride)); summed
// left to right in replica order, then a true division: comm.h's COMM_ORDERED_AVERAGE for floats
__global__ static void comm_nccl_ordered_average_kernel(float* out, const float* in, size_t stride, size_t count, int D) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float s = in[i];
        for (int q = 1; q < D; q++) s = comm_nccl_add_exact(s, in[(size_t)q * stride + i]);
        out[i] = comm_nccl_div_exact(s, (float)D);
    }
}

// launches the kernel above on `stream`; out may alias row 0 of in (each element is read before written)
static inline void comm_nccl_ordered_average(float* dout, const float* din, size_t stride, size_t count, int D,
                                             cudaStream_t stream) {
    if (count == 0) return;
    if (D < 1 || (D > 1 && stride < count)) td_fatal("comm_nccl_ordered_average: D = %d, stride %zu < count %zu", D, stride, count);
    size_t blocks = (count + 255) / 256;
    if (blocks > 4096) blocks = 4096; // grid-stride loop beyond
    comm_nccl_ordered_average_kernel<<<(unsigned)blocks, 256, 0, stream>>>(dout, din, stride, count, D);
    cudaCheckLaunch("comm_nccl_ordered_average_kernel");
}

// ---- the data-parallel chunk plan --------------------------------------------------------------------

// floats of scratch comm_nccl_dp_average needs for n floats over D replicas: (D, largest chunk)
static inline size_t comm_nccl_dp_scratch_floats(int D, size_t n) {
    size_t m = n < COMM_DP_PIECE ? n : COMM_DP_PIECE;
    return (size_t)D * ((m + (size_t)D - 1) / (size_t)D);
}

// ---- setup ------------------------------------------------------------------------------------------

#ifdef TD_MPI
// what each rank of a group reports about its GPU: the UUID decides "same device", host and PCI bus id
// name it in the message
typedef struct {
    unsigned char uuid[16];
    char host[64];
    char bus[32];
    int device;
} CommNcclDeviceId;

// Gathers every rank's device over group `m`; returns 1 and the first pair of ranks (in rank order)
// that would drive the same GPU in *a, *b (the UUID decides; host and PCI bus id name it), else 0.
// all: (group size) every rank's device, malloc'ed, the caller frees it. Collective over m.
static inline int comm_nccl_shared_gpu(MPI_Comm m, int device, CommNcclDeviceId** all_out, int* a, int* b) {
    int n = 0;
    MPI_CHECK(MPI_Comm_size(m, &n));
    CommNcclDeviceId mine;
    memset(&mine, 0, sizeof mine);
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    memcpy(mine.uuid, &prop.uuid, sizeof mine.uuid);
    cudaCheck(cudaDeviceGetPCIBusId(mine.bus, (int)sizeof mine.bus, device));
    if (gethostname(mine.host, sizeof mine.host - 1) != 0) snprintf(mine.host, sizeof mine.host, "?");
    mine.device = device;
    CommNcclDeviceId* all = (CommNcclDeviceId*)malloc_check((size_t)n * sizeof *all); // (n) every group rank's device
    MPI_CHECK(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, m));
    *all_out = all;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (memcmp(all[i].uuid, all[j].uuid, sizeof all[i].uuid) == 0) {
                *a = i;
                *b = j;
                return 1;
            }
    return 0;
}

// Refuses (one message, from the group's lowest rank that shares a GPU) when two ranks of group m
// would drive the same GPU; the other ranks wait here for the launcher to end the job. `group` names
// the group in the message ("pipeline" or "data-parallel group").
static inline void comm_nccl_check_devices(MPI_Comm m, int device, const char* group, const char* rank_word) {
    int me = 0, a = -1, b = -1;
    MPI_CHECK(MPI_Comm_rank(m, &me));
    CommNcclDeviceId* all = NULL;
    if (comm_nccl_shared_gpu(m, device, &all, &a, &b)) {
        if (me == a)
            td_fatal("%ss %d and %d of this %s would both use the same GPU (CUDA device %d, PCI %s on host %s): NCCL "
                     "cannot connect two ranks on one GPU. Give every rank its own GPU, or use the host-staged MPI path "
                     "for ranks that share a GPU",
                     rank_word, a, b, group, all[a].device, all[a].bus, all[a].host);
        MPI_CHECK(MPI_Barrier(m)); // never completes: rank a has exited, and the launcher ends the job
        exit(1);
    }
    free(all);
}
#endif

// one NCCL communicator of `n` ranks (this one `rank`): rank 0 creates the unique id, `mpi_comm`
// (an MPI_Comm*, NULL for a one-rank group) broadcasts it
static inline void comm_nccl_make(ncclComm_t* out, int n, int rank, void* mpi_comm) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id));
#ifdef TD_MPI
    if (mpi_comm) MPI_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, *(MPI_Comm*)mpi_comm));
#else
    (void)mpi_comm;
#endif
    ncclCheck(ncclCommInitRank(out, n, id, rank));
}

// 1 when every replica of this rank's stage has a GPU of its own, so the data-parallel group can
// use NCCL (collective over the group; 1 without MPI or with D = 1)
static inline int comm_nccl_dp_possible(const Comm* c, int device) {
#ifdef TD_MPI
    if (!c->mpi || c->D == 1) return 1;
    CommNcclDeviceId* all = NULL;
    int a, b, shared = comm_nccl_shared_gpu(*(MPI_Comm*)c->dp_comm, device, &all, &a, &b);
    free(all);
    return !shared;
#else
    (void)c, (void)device;
    return 1;
#endif
}

enum { COMM_NCCL_PIPE = 1, COMM_NCCL_DP = 2 }; // the groups comm_nccl_init builds

// Sets `device` current and builds the communicators of c's grid (after comm_grid) that `groups`
// names (the pipeline's, the data-parallel group's; a group left out stays NULL), plus the module's
// stream. Without MPI (c->mpi == 0): one-rank communicators, P = D = 1.
static inline void comm_nccl_init(CommNccl* cn, const Comm* c, int device, int groups) {
    memset(cn, 0, sizeof *cn);
    cn->P = c->P;
    cn->D = c->D;
    cn->stage = c->stage;
    cn->replica = c->replica;
    cn->device = device;
    cudaCheck(cudaSetDevice(device));
    void *pipe_mpi = NULL, *dp_mpi = NULL;
    if (c->mpi) {
#ifdef TD_MPI
        if (!c->pipe_comm || !c->dp_comm) td_fatal("comm_nccl_init: called before comm_grid");
        pipe_mpi = c->pipe_comm;
        dp_mpi = c->dp_comm;
        int pr = -1, ps = -1, dr = -1, ds = -1;
        MPI_CHECK(MPI_Comm_rank(*(MPI_Comm*)pipe_mpi, &pr));
        MPI_CHECK(MPI_Comm_size(*(MPI_Comm*)pipe_mpi, &ps));
        MPI_CHECK(MPI_Comm_rank(*(MPI_Comm*)dp_mpi, &dr));
        MPI_CHECK(MPI_Comm_size(*(MPI_Comm*)dp_mpi, &ds));
        if (pr != c->stage || ps != c->P || dr != c->replica || ds != c->D)
            td_fatal("comm_nccl_init: MPI groups (pipeline rank %d of %d, data-parallel rank %d of %d) do not match "
                     "the grid (stage %d of %d, replica %d of %d)", pr, ps, dr, ds, c->stage, c->P, c->replica, c->D);
        // every rank checks both of its groups before any NCCL call (ncclCommInitRank would hang or fail
        // less clearly); all ranks do the pipeline first, so the collectives match
        if (groups & COMM_NCCL_PIPE) comm_nccl_check_devices(*(MPI_Comm*)pipe_mpi, device, "pipeline", "stage");
        if (groups & COMM_NCCL_DP) comm_nccl_check_devices(*(MPI_Comm*)dp_mpi, device, "data-parallel group", "replica");
#else
        td_fatal("comm_nccl_init: Comm says MPI is running, but this translation unit was built without TD_MPI");
#endif
    } else if (c->P != 1 || c->D != 1) {
        td_fatal("comm_nccl_init: a grid of P = %d, D = %d without MPI (launch with mpirun)", c->P, c->D);
    }
    // every rank builds its pipeline communicator first, then its data-parallel one: each init waits
    // only for ranks that are making the same communicator, so the order cannot deadlock
    if (groups & COMM_NCCL_PIPE) comm_nccl_make(&cn->pipe, c->P, c->stage, pipe_mpi);
    if (groups & COMM_NCCL_DP) comm_nccl_make(&cn->dp, c->D, c->replica, dp_mpi);
    int lo = 0, hi = 0; // communication first: the highest priority this device offers
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaCheck(cudaStreamCreateWithPriority(&cn->stream, cudaStreamNonBlocking, hi));
    cudaCheck(cudaEventCreateWithFlags(&cn->order, cudaEventDisableTiming));
}

// waits for everything enqueued, then releases the communicators, the stream and the event
static inline void comm_nccl_free(CommNccl* cn) {
    if (cn->stream) cudaCheck(cudaStreamSynchronize(cn->stream));
    if (cn->pipe) {
        ncclCheck(ncclCommFinalize(cn->pipe));
        ncclCheck(ncclCommDestroy(cn->pipe));
    }
    if (cn->dp) {
        ncclCheck(ncclCommFinalize(cn->dp));
        ncclCheck(ncclCommDestroy(cn->dp));
    }
    if (cn->order) cudaCheck(cudaEventDestroy(cn->order));
    if (cn->stream) cudaCheck(cudaStreamDestroy(cn->stream));
    memset(cn, 0, sizeof *cn);
}

// ---- ordering and completion -----------------------------------------------------------------------

// the module's stream waits (on the device, the host does not block) for all work enqueued so far on
// `producer`: call it before sending data a kernel on `producer` writes
static inline void comm_nccl_wait_for(CommNccl* cn, cudaStream_t producer) {
    cudaCheck(cudaEventRecord(cn->order, producer));
    cudaCheck(cudaStreamWaitEvent(cn->stream, cn->order, 0));
}

// records `ev` after everything enqueued so far on the module's stream (sends, receives, averages);
// a consumer stream can cudaStreamWaitEvent on it, the host can poll it with comm_nccl_done
static inline void comm_nccl_record(CommNccl* cn, cudaEvent_t ev) { cudaCheck(cudaEventRecord(ev, cn->stream)); }

// 1 when the work before `ev` (recorded by comm_nccl_record) has completed, 0 while it is in flight;
// never blocks. While it is in flight, an asynchronous NCCL error (a peer gone, a network failure) ends
// the process here instead of leaving the poller waiting forever.
static inline int comm_nccl_done(CommNccl* cn, cudaEvent_t ev) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) td_fatal("cudaEventQuery(ev): %s", cudaGetErrorString(e));
    ncclComm_t comms[2] = {cn->pipe, cn->dp};
    for (int i = 0; i < 2; i++) {
        if (!comms[i]) continue;
        ncclResult_t a = ncclSuccess;
        ncclCheck(ncclCommGetAsyncError(comms[i], &a));
        if (a != ncclSuccess && a != ncclInProgress)
            td_fatal("NCCL %s communicator failed asynchronously: %s", i == 0 ? "pipeline" : "data-parallel",
                     ncclGetErrorString(a));
    }
    return 0;
}

// blocks the host until everything on the module's stream has completed
static inline void comm_nccl_sync(CommNccl* cn) { cudaCheck(cudaStreamSynchronize(cn->stream)); }

// ---- the pipeline ----------------------------------------------------------------------------------

// Several sends and receives that must progress together (a stage that sends to and receives from the
// same peer, or a message to itself) go between comm_nccl_group_start and comm_nccl_group_end.
static inline void comm_nccl_group_start(void) { ncclCheck(ncclGroupStart()); }
static inline void comm_nccl_group_end(void) { ncclCheck(ncclGroupEnd()); }

static inline void comm_nccl_check_peer(const CommNccl* cn, int peer_stage, const char* what) {
    if (peer_stage < 0 || peer_stage >= cn->P) td_fatal("%s: stage %d does not exist (P = %d)", what, peer_stage, cn->P);
}

// enqueues on the module's stream: send `bytes` from dbuf (bytes, device) to stage peer_stage of this
// replica's pipeline. A message to this stage itself is allowed only inside a group with its receive.
static inline void comm_nccl_send(CommNccl* cn, const void* dbuf, size_t bytes, int peer_stage) {
    comm_nccl_check_peer(cn, peer_stage, "comm_nccl_send");
    ncclCheck(ncclSend(dbuf, bytes, ncclChar, peer_stage, cn->pipe, cn->stream));
}

// enqueues on the module's stream: receive `bytes` into dbuf (bytes, device) from stage peer_stage;
// the sender must send exactly `bytes` (NCCL does not carry the size: a mismatch is undefined)
static inline void comm_nccl_recv(CommNccl* cn, void* dbuf, size_t bytes, int peer_stage) {
    comm_nccl_check_peer(cn, peer_stage, "comm_nccl_recv");
    ncclCheck(ncclRecv(dbuf, bytes, ncclChar, peer_stage, cn->pipe, cn->stream));
}

// ---- the data-parallel group ---------------------------------------------------------------------

// dbuf (n, device) <- (dbuf_0 + dbuf_1 + ... + dbuf_{D-1}) / D over this stage's replicas, bitwise what
// comm.c's comm_dp_average computes: each round of at most COMM_DP_PIECE floats is split into D
// contiguous chunks; replica r receives every replica's copy of chunk r (an all-to-all of grouped
// sends and receives), sums them in replica order and divides by D (the kernel above), and the averaged
// chunks are all-gathered (grouped sends and receives: the chunks differ in size by up to one float).
// dscratch: (D, ceil(min(n, COMM_DP_PIECE) / D)) device floats, comm_nccl_dp_scratch_floats(D, n).
// Enqueued on the module's stream (order it after the gradients' producer with comm_nccl_wait_for);
// every replica of the stage must call it with the same n.
static inline void comm_nccl_dp_average(CommNccl* cn, float* dbuf, size_t n, float* dscratch) {
    int D = cn->D, me = cn->replica;
    if (D == 1 || n == 0) return;
    for (size_t off = 0; off < n; off += COMM_DP_PIECE) {
        size_t m = n - off < COMM_DP_PIECE ? n - off : COMM_DP_PIECE;
        size_t mine, mine_off;
        comm_dp_chunk(m, D, me, &mine, &mine_off);
        float* own = dbuf + off + mine_off; // (mine) this replica's chunk, averaged in place
        if (mine > 0)                       // row `me` of the scratch: this replica's own copy
            cudaCheck(cudaMemcpyAsync(dscratch + (size_t)me * mine, own, mine * sizeof(float), cudaMemcpyDeviceToDevice,
                                      cn->stream));
        // reduce-scatter as an all-to-all: chunk q to replica q; every replica's copy of chunk `me` into
        // row q of the scratch. Zero-size chunks (m < D) are skipped on both sides alike.
        ncclCheck(ncclGroupStart());
        for (int q = 0; q < D; q++) {
            if (q == me) continue;
            size_t sz, so;
            comm_dp_chunk(m, D, q, &sz, &so);
            if (sz > 0) ncclCheck(ncclSend(dbuf + off + so, sz, ncclFloat, q, cn->dp, cn->stream));
            if (mine > 0) ncclCheck(ncclRecv(dscratch + (size_t)q * mine, mine, ncclFloat, q, cn->dp, cn->stream));
        }
        ncclCheck(ncclGroupEnd());
        comm_nccl_ordered_average(own, dscratch, mine, mine, D, cn->stream);
        // all-gather: this replica's averaged chunk to every other replica, theirs into their places
        ncclCheck(ncclGroupStart());
        for (int q = 0; q < D; q++) {
            if (q == me) continue;
            size_t sz, so;
            comm_dp_chunk(m, D, q, &sz, &so);
            if (mine > 0) ncclCheck(ncclSend(own, mine, ncclFloat, q, cn->dp, cn->stream));
            if (sz > 0) ncclCheck(ncclRecv(dbuf + off + so, sz, ncclFloat, q, cn->dp, cn->stream));
        }
        ncclCheck(ncclGroupEnd());
    }
}
