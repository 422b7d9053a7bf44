// The NCCL half of tdpipe's communication (nvcc only): pipeline messages that stay in GPU memory (a
// CommLink, one two-rank communicator per direction of each link between stages) and the data-parallel
// gradient average, bitwise identical to comm.c's comm_dp_average (replica-order sum, exact division).
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
    ncclComm_t dp;        // this stage's D replicas, NCCL rank = replica
    cudaStream_t stream;  // every NCCL operation and the averaging kernel run here (non-blocking stream)
    cudaEvent_t order;    // internal: orders the module's stream after a producer stream
    int D, replica;
} CommNccl;

// ---- the ordered average kernel ------------------------------------------------------------------

// out (count) <- (x_0 + x_1 + ... + x_{D-1}) / D, x_q = in + q * stride (in: (D, stride)); summed
// left to right in replica order, then a true division: comm.h's COMM_ORDERED_AVERAGE for floats
__global__ static void comm_nccl_ordered_average_kernel(float* out, const float* in, size_t stride, size_t count, int D) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float s = in[i];
        for (int q = 1; q < D; q++) s = f32_add_exact(s, in[(size_t)q * stride + i]);
        out[i] = f32_div_exact(s, (float)D);
    }
}

// blocks of 256 threads for n elements of a grid-stride kernel (at most 4096: the loop covers the rest)
static inline unsigned comm_nccl_blocks(size_t n) {
    size_t blocks = (n + 255) / 256;
    return (unsigned)(blocks > 4096 ? 4096 : blocks);
}

// launches the kernel above on `stream`; out may alias row 0 of in (each element is read before written)
static inline void comm_nccl_ordered_average(float* dout, const float* din, size_t stride, size_t count, int D,
                                             cudaStream_t stream) {
    if (count == 0) return;
    if (D < 1 || (D > 1 && stride < count)) td_fatal("comm_nccl_ordered_average: D = %d, stride %zu < count %zu", D, stride, count);
    comm_nccl_ordered_average_kernel<<<comm_nccl_blocks(count), 256, 0, stream>>>(dout, din, stride, count, D);
    cudaCheckLaunch("comm_nccl_ordered_average_kernel");
}

// out (n) <- a + b, exactly as the CPU adds (no flush to zero): the tied embedding's two gradient shares
__global__ static void comm_nccl_sum_kernel(float* out, const float* a, const float* b, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f32_add_exact(a[i], b[i]);
}

static inline void comm_nccl_sum(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    comm_nccl_sum_kernel<<<comm_nccl_blocks(n), 256, 0, stream>>>(out, a, b, n);
    cudaCheckLaunch("comm_nccl_sum_kernel");
}

// ---- the data-parallel chunk plan --------------------------------------------------------------------

// floats of scratch comm_nccl_dp_average needs for n floats over D replicas: (D, largest chunk)
static inline size_t comm_nccl_dp_scratch_floats(int D, size_t n) {
    size_t m = n < COMM_DP_PIECE ? n : COMM_DP_PIECE;
    return (size_t)D * ((m + (size_t)D - 1) / (size_t)D);
}

// ---- setup ------------------------------------------------------------------------------------------

// 0, or the first asynchronous error of `comm` (a peer gone, a network failure) ends the process,
// naming `what`: pollers call it while they wait, so a failure is never an endless wait
static inline void comm_nccl_check_async(ncclComm_t comm, const char* what) {
    if (!comm) return;
    ncclResult_t a = ncclSuccess;
    ncclCheck(ncclCommGetAsyncError(comm, &a));
    if (a != ncclSuccess && a != ncclInProgress) td_fatal("NCCL %s communicator failed asynchronously: %s", what, ncclGetErrorString(a));
}

#ifdef TD_MPI
// what each rank of a group reports about its GPU. NCCL refuses two ranks on one device unless their
// NCCL_HOSTID differs (then it takes them for two hosts and connects them over its network transport,
// which is how a one-GPU machine runs NCCL between two ranks), so the UUID and NCCL_HOSTID together
// decide "same device"; host and PCI bus id name it in the message.
typedef struct {
    unsigned char uuid[16];
    char nccl_hostid[64];
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
    const char* hostid = getenv("NCCL_HOSTID");
    snprintf(mine.nccl_hostid, sizeof mine.nccl_hostid, "%s", hostid ? hostid : "");
    CommNcclDeviceId* all = (CommNcclDeviceId*)malloc_check((size_t)n * sizeof *all); // (n) every group rank's device
    MPI_CHECK(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, m));
    *all_out = all;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (memcmp(all[i].uuid, all[j].uuid, sizeof all[i].uuid) == 0 && strcmp(all[i].nccl_hostid, all[j].nccl_hostid) == 0) {
                *a = i;
                *b = j;
                return 1;
            }
    return 0;
}

// Refuses (one message, from the group's lowest rank that shares a GPU) when two ranks of group m
// would drive the same GPU; the other ranks wait here for the launcher to end the job. `group` names
// the group in the message ("data-parallel group").
static inline void comm_nccl_check_devices(MPI_Comm m, int device, const char* group, const char* rank_word) {
    int me = 0, a = -1, b = -1;
    MPI_CHECK(MPI_Comm_rank(m, &me));
    CommNcclDeviceId* all = NULL;
    if (comm_nccl_shared_gpu(m, device, &all, &a, &b)) {
        if (me == a)
            td_fatal("%ss %d and %d of this %s would both use the same GPU (CUDA device %d, PCI %s on host %s): NCCL "
                     "cannot connect two ranks on one GPU. Give every rank its own GPU (or its own NCCL_HOSTID), or use "
                     "the host-staged MPI path for ranks that share a GPU",
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

// 1 when every rank of the MPI group `group` (an MPI_Comm*, NULL or one rank: 1) has a GPU NCCL can
// connect to the others' (its own, or its own NCCL_HOSTID); collective over the group
static inline int comm_nccl_possible(void* group, int device) {
#ifdef TD_MPI
    int n = 1;
    if (group) MPI_CHECK(MPI_Comm_size(*(MPI_Comm*)group, &n));
    if (n == 1) return 1;
    CommNcclDeviceId* all = NULL;
    int a, b, shared = comm_nccl_shared_gpu(*(MPI_Comm*)group, device, &all, &a, &b);
    free(all);
    return !shared;
#else
    (void)group, (void)device;
    return 1;
#endif
}

static inline void comm_nccl_destroy(ncclComm_t comm) {
    if (!comm) return;
    ncclCheck(ncclCommFinalize(comm));
    ncclCheck(ncclCommDestroy(comm));
}

// a stream for communication: non-blocking (never synchronised with the legacy default stream, so a
// receive waiting on the device holds up nothing else) at the highest priority the device offers
static inline cudaStream_t comm_nccl_stream(void) {
    int lo = 0, hi = 0;
    cudaStream_t st;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaCheck(cudaStreamCreateWithPriority(&st, cudaStreamNonBlocking, hi));
    return st;
}

static inline void comm_nccl_dp_average(CommNccl* cn, float* dbuf, size_t n, float* dscratch);
static inline void comm_nccl_sync(CommNccl* cn);

// Sets `device` current and builds the data-parallel group's communicator of c's grid (after
// comm_grid), plus the module's stream. Without MPI (c->mpi == 0): a one-rank communicator, D = 1.
static inline void comm_nccl_init(CommNccl* cn, const Comm* c, int device) {
    memset(cn, 0, sizeof *cn);
    cn->D = c->D;
    cn->replica = c->replica;
    cudaCheck(cudaSetDevice(device));
    void* dp_mpi = NULL;
    if (c->mpi) {
#ifdef TD_MPI
        if (!c->dp_comm) td_fatal("comm_nccl_init: called before comm_grid");
        dp_mpi = c->dp_comm;
        int dr = -1, ds = -1;
        MPI_CHECK(MPI_Comm_rank(*(MPI_Comm*)dp_mpi, &dr));
        MPI_CHECK(MPI_Comm_size(*(MPI_Comm*)dp_mpi, &ds));
        if (dr != c->replica || ds != c->D)
            td_fatal("comm_nccl_init: the data-parallel MPI group (rank %d of %d) does not match the grid (replica %d of %d)",
                     dr, ds, c->replica, c->D);
        // checked before any NCCL call: ncclCommInitRank would hang or fail less clearly
        comm_nccl_check_devices(*(MPI_Comm*)dp_mpi, device, "data-parallel group", "replica");
#else
        td_fatal("comm_nccl_init: Comm says MPI is running, but this translation unit was built without TD_MPI");
#endif
    } else if (c->P != 1 || c->D != 1) {
        td_fatal("comm_nccl_init: a grid of P = %d, D = %d without MPI (launch with mpirun)", c->P, c->D);
    }
    comm_nccl_make(&cn->dp, c->D, c->replica, dp_mpi);
    cn->stream = comm_nccl_stream();
    cudaCheck(cudaEventCreateWithFlags(&cn->order, cudaEventDisableTiming));
    if (c->D > 1) { // connect every pair now (NCCL does it at first use, blocking): an average of D floats
        float* tiny; // (D) device, then its scratch (D)
        cudaCheck(cudaMalloc((void**)&tiny, 2 * (size_t)c->D * sizeof(float)));
        cudaCheck(cudaMemset(tiny, 0, 2 * (size_t)c->D * sizeof(float)));
        comm_nccl_dp_average(cn, tiny, (size_t)c->D, tiny + c->D);
        comm_nccl_sync(cn);
        cudaCheck(cudaFree(tiny));
    }
}

// waits for everything enqueued, then releases the communicator, the stream and the event
static inline void comm_nccl_free(CommNccl* cn) {
    if (cn->stream) cudaCheck(cudaStreamSynchronize(cn->stream));
    comm_nccl_destroy(cn->dp);
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

// blocks the host until everything on the module's stream has completed; polls, so that a failed
// peer ends the process with NCCL's error instead of a wait that never ends
static inline void comm_nccl_sync(CommNccl* cn) {
    while (cudaStreamQuery(cn->stream) == cudaErrorNotReady) {
        comm_nccl_check_async(cn->dp, "data-parallel");
        usleep(20);
    }
    cudaCheck(cudaStreamSynchronize(cn->stream)); // reports the stream's error, if it has one
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

// ---- pipeline messages between GPUs: a CommLink ------------------------------------------------------

// Activations go from stage s to s + 1, gradients from s + 1 to s, and the tied embedding's gradient
// shares both ways between the first and the last stage. Each direction of each of those links has its
// own two-rank communicator and stream. NCCL matches a communicator's sends and receives in the order
// they were issued, and a receive posted ahead holds its stream until the matching send: with one
// communicator per direction, every message in flight waits only for its own partner, never for one
// going the other way or on another channel, whatever order the event-driven stages run their ops in.
enum { NCCL_ACT_IN, NCCL_ACT_OUT, NCCL_GRAD_IN, NCCL_GRAD_OUT, NCCL_TIED_IN, NCCL_TIED_OUT, NCCL_DIRS };

typedef struct {
    ncclComm_t comm[NCCL_DIRS];     // NULL where the link does not exist (no neighbour; not an end stage)
    cudaStream_t stream[NCCL_DIRS];
    cudaStream_t compute;           // the stream whose kernels write and read the message buffers
    cudaEvent_t after_compute;      // recorded on `compute` before each send or receive is enqueued
    cudaEvent_t* done;              // (cap) one per request in flight, recorded after its transfer
    int* free_done;                 // (n_free) indices of unused events in done
    int n_free, cap;
    int stage, P;
    CommLink link;                  // what the executor is given (ctx: this struct)
} CommNcclLink;

// the direction of a message on `channel` to / from peer_stage (a neighbour, or the other end stage)
static inline int comm_nccl_link_dir(const CommNcclLink* l, int channel, int peer_stage, int send) {
    if (channel == COMM_LINK_TIED) {
        int other = l->stage == 0 ? l->P - 1 : 0;
        if (l->P > 1 && (l->stage == 0 || l->stage == l->P - 1) && peer_stage == other) return send ? NCCL_TIED_OUT : NCCL_TIED_IN;
        td_fatal("NCCL link: the tied channel joins stages 0 and %d, not %d and %d", l->P - 1, l->stage, peer_stage);
    }
    if (peer_stage == l->stage + 1) return send ? NCCL_ACT_OUT : NCCL_GRAD_IN;
    if (peer_stage == l->stage - 1) return send ? NCCL_GRAD_OUT : NCCL_ACT_IN;
    td_fatal("NCCL link: stage %d is not a neighbour of stage %d (P = %d)", peer_stage, l->stage, l->P);
    return -1;
}

// enqueues one transfer of `bytes` to / from peer_stage on its direction's stream, behind everything
// already enqueued on the compute stream (the kernels that write a buffer before it is sent, or still
// read one that a receive will overwrite); r polls its completion
static inline void comm_nccl_link_post(CommNcclLink* l, int channel, void* buf, size_t bytes, int peer_stage, int send, CommRequest* r) {
    int d = comm_nccl_link_dir(l, channel, peer_stage, send);
    int peer = peer_stage > l->stage; // rank in the two-rank communicator: the lower stage is 0
    cudaCheck(cudaEventRecord(l->after_compute, l->compute));
    cudaCheck(cudaStreamWaitEvent(l->stream[d], l->after_compute, 0));
    if (send) ncclCheck(ncclSend(buf, bytes, ncclChar, peer, l->comm[d], l->stream[d]));
    else ncclCheck(ncclRecv(buf, bytes, ncclChar, peer, l->comm[d], l->stream[d]));
    if (l->n_free == 0) { // more requests in flight than ever before: one more event (no device sync)
        l->done = (cudaEvent_t*)realloc_check(l->done, (l->cap + 1) * sizeof(cudaEvent_t));
        l->free_done = (int*)realloc_check(l->free_done, (l->cap + 1) * sizeof(int));
        cudaCheck(cudaEventCreateWithFlags(&l->done[l->cap], cudaEventDisableTiming));
        l->free_done[l->n_free++] = l->cap++;
    }
    int e = l->free_done[--l->n_free];
    cudaCheck(cudaEventRecord(l->done[e], l->stream[d]));
    memset(r, 0, sizeof *r);
    r->handle[0] = e;
    r->handle[1] = d;
    r->active = 1;
}

static inline void comm_nccl_link_isend(void* ctx, int channel, const void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    comm_nccl_link_post((CommNcclLink*)ctx, channel, (void*)buf, bytes, peer_stage, 1, r);
}
static inline void comm_nccl_link_irecv(void* ctx, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    comm_nccl_link_post((CommNcclLink*)ctx, channel, buf, bytes, peer_stage, 0, r);
}

// 1 when r's transfer has completed on the device (its event is then free again); never blocks
static inline int comm_nccl_link_test(void* ctx, CommRequest* r) {
    CommNcclLink* l = (CommNcclLink*)ctx;
    int e = (int)r->handle[0], d = (int)r->handle[1];
    cudaError_t q = cudaEventQuery(l->done[e]);
    if (q == cudaErrorNotReady) {
        comm_nccl_check_async(l->comm[d], "pipeline link");
        return 0;
    }
    if (q != cudaSuccess) td_fatal("cudaEventQuery (NCCL link transfer): %s", cudaGetErrorString(q));
    l->free_done[l->n_free++] = e;
    return 1;
}

// 1 when NCCL can connect every stage of this replica's pipeline (no two on one GPU with one
// NCCL_HOSTID); collective over the pipeline
static inline int comm_nccl_link_possible(const Comm* c, int device) { return c->P == 1 || comm_nccl_possible(c->pipe_comm, device); }

#ifdef TD_MPI
// The two communicators of the link between this stage and peer_stage (`out`: this stage's sending
// direction, `in`: its receiving one). The lower stage makes the ids and sends them over MPI; both ends
// create the lower-to-higher communicator first. Then one byte each way, waited for: NCCL connects a
// communicator's peers at its first send or receive, blocking the calling thread until the peer's
// first call on it; done here, in an order both ends follow, that wait never meets a receive posted
// ahead by the executor.
static inline void comm_nccl_link_pair(CommNcclLink* l, MPI_Comm pipe, int peer_stage, int out, int in) {
    const int tag = 91; // only during setup: no other message is in flight
    int lower = l->stage < peer_stage;
    ncclUniqueId ids[2]; // lower to higher, higher to lower
    if (lower) {
        ncclCheck(ncclGetUniqueId(&ids[0]));
        ncclCheck(ncclGetUniqueId(&ids[1]));
        MPI_CHECK(MPI_Send(ids, (int)sizeof ids, MPI_BYTE, peer_stage, tag, pipe));
    } else {
        MPI_CHECK(MPI_Recv(ids, (int)sizeof ids, MPI_BYTE, peer_stage, tag, pipe, MPI_STATUS_IGNORE));
    }
    int me = !lower, first = lower ? out : in, second = lower ? in : out;
    ncclCheck(ncclCommInitRank(&l->comm[first], 2, ids[0], me));
    ncclCheck(ncclCommInitRank(&l->comm[second], 2, ids[1], me));
    void* byte; // (1) device
    cudaCheck(cudaMalloc(&byte, 1));
    for (int i = 0; i < 2; i++) {
        int d = i == 0 ? first : second;
        l->stream[d] = comm_nccl_stream();
        if (d == out) ncclCheck(ncclSend(byte, 1, ncclChar, !me, l->comm[d], l->stream[d]));
        else ncclCheck(ncclRecv(byte, 1, ncclChar, !me, l->comm[d], l->stream[d]));
        cudaCheck(cudaStreamSynchronize(l->stream[d]));
    }
    cudaCheck(cudaFree(byte));
}
#endif

// Builds this stage's communicators with its neighbours and, on the first and last stage, with each
// other (call comm_nccl_link_possible first), and the CommLink in l->link; `compute`: the stream the
// model's kernels run on. Collective over the pipeline.
static inline void comm_nccl_link_init(CommNcclLink* l, const Comm* c, int device, cudaStream_t compute) {
    memset(l, 0, sizeof *l);
    l->stage = c->stage;
    l->P = c->P;
    l->compute = compute;
    cudaCheck(cudaSetDevice(device));
#ifdef TD_MPI
    if (c->P > 1) {
        MPI_Comm pipe = *(MPI_Comm*)c->pipe_comm;
        // the link with the stage before, then the one after, then the tied one: stage 0 starts the
        // chain and the tied link comes after it on both ends, so no stage waits in a cycle
        if (c->stage > 0) comm_nccl_link_pair(l, pipe, c->stage - 1, NCCL_GRAD_OUT, NCCL_ACT_IN);
        if (c->stage < c->P - 1) comm_nccl_link_pair(l, pipe, c->stage + 1, NCCL_ACT_OUT, NCCL_GRAD_IN);
        if (c->stage == 0) comm_nccl_link_pair(l, pipe, c->P - 1, NCCL_TIED_OUT, NCCL_TIED_IN);
        if (c->stage == c->P - 1) comm_nccl_link_pair(l, pipe, 0, NCCL_TIED_OUT, NCCL_TIED_IN);
    }
#else
    if (c->P > 1) td_fatal("comm_nccl_link_init: P = %d without MPI", c->P);
#endif
    cudaCheck(cudaEventCreateWithFlags(&l->after_compute, cudaEventDisableTiming));
    l->link.ctx = l;
    l->link.isend = comm_nccl_link_isend;
    l->link.irecv = comm_nccl_link_irecv;
    l->link.test = comm_nccl_link_test;
}

// waits for every transfer, then releases the communicators, streams and events
static inline void comm_nccl_link_free(CommNcclLink* l) {
    for (int d = 0; d < NCCL_DIRS; d++) {
        if (l->stream[d]) cudaCheck(cudaStreamSynchronize(l->stream[d]));
        comm_nccl_destroy(l->comm[d]);
        if (l->stream[d]) cudaCheck(cudaStreamDestroy(l->stream[d]));
    }
    for (int e = 0; e < l->cap; e++) cudaCheck(cudaEventDestroy(l->done[e]));
    if (l->after_compute) cudaCheck(cudaEventDestroy(l->after_compute));
    free(l->done);
    free(l->free_done);
    memset(l, 0, sizeof *l);
}
