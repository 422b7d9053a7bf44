// Communication behind one small interface: the P x D rank grid, point-to-point messages along a
// replica's pipeline, and collectives in a fixed order (bitwise identical on every rank). MPI
// between CPU ranks; without mpirun (or without MPI in the build) one process, P = D = 1.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "tdpipe/placement.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int world_rank, world_size;
    int P, D;           // stages per pipeline, data-parallel replicas
    int stage, replica; // this rank's place in the grid: world rank = replica * P + stage
    int launch_rank;    // the rank mpirun gave this process (= world_rank when stages come first)
    Placement placement; // which consecutive launch ranks hold what (placement.h)
    int mpi;            // 1 when MPI was initialised (launched by mpirun)
    int local_rank;     // this rank's index among the ranks on its host (picks its GPU)
    int local_ranks;    // ranks on this host (to share its cores and GPUs between them)
    void* pipe_comm;    // (MPI_Comm*) this replica's P stages, ranked by stage
    void* dp_comm;      // (MPI_Comm*) this stage's D replicas, ranked by replica
    void* world_comm;   // (MPI_Comm*) all ranks
    double timeout;     // --comm-timeout: seconds any wait may take before this rank says what it waits for and exits (0: forever)
    double allowance;   // seconds every wait may take beyond timeout while one rank works alone at what allowance_for says (comm_timeout_allow)
    const char* allowance_for;
    size_t chunk_bytes; // the largest message comm_world_send splits a transfer into (1 GiB, under MPI's int count; tests set less)
    int tag_ub;         // the largest tag MPI accepts (asked at comm_init; 0 in a Comm made without it: the standard's minimum, 32767)
    float* dp_recv;     // (D, chunk) comm_dp_average's copies of this replica's chunk from the D replicas; grows on demand
    size_t dp_recv_cap; // floats allocated in dp_recv
} Comm;

struct CommLink;

// an outstanding nonblocking operation: an MPI_Request (held opaquely so this header needs no
// mpi.h), or, with `link` set, a transfer of that CommLink (comm_test and friends poll it there)
typedef struct {
    int64_t handle[2];
    int active;
    const struct CommLink* link;
    char what[80]; // what it carries, for --comm-timeout's message (set by comm_isend/irecv; callers may say more)
} CommRequest;

// A transport for pipeline messages, between the buffers stage_input_buf and friends hand out: every
// stage's executor sends through one. MPI between host buffers (comm_mpi_link: the CPU, host staging,
// synthetic compute, and cpu-staged's device memory), or NCCL between GPUs where the messages stay in
// a device backend's memory (comm_nccl.cuh). A device link enqueues sends and receives behind the work
// already given to the device, so a buffer that the compute is still writing (a send) or reading (a
// receive) is safe; completion is polled. Messages have no tags: on each channel and direction they
// match in the order they were posted.
enum {
    COMM_LINK_NEIGHBOURS, // activations from stage s to s + 1, gradients back
    COMM_LINK_TIED,       // the tied embedding's gradient shares, between the first and the last stage
    COMM_LINK_CHANNELS
};
typedef struct CommLink {
    void* ctx;
    void (*isend)(void* ctx, int channel, const void* buf, size_t bytes, int peer_stage, CommRequest* r);
    void (*irecv)(void* ctx, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r);
    // 1 when r has completed (the buffer may be read or reused), else 0; never blocks
    int (*test)(void* ctx, CommRequest* r);
} CommLink;

// Initialises MPI when launched by mpirun (and the build has MPI); otherwise a single process.
// Sets g_rank for messages.
void comm_init(Comm* c, int* argc, char*** argv);
// Builds the grid for P stages: D = world_size / P, launch ranks laid out by pl; world_comm and
// world_rank are then in grid order (stage + P x replica) whatever the layout. Returns 0, or -1 with
// a message when the rank count is not a multiple of P (naming --stages and the count).
int comm_grid(Comm* c, int P, Placement pl, char* err, size_t errlen);
// comm_grid's refusals alone (no collective): -1 with the message, else 0
int comm_grid_check(const Comm* c, int P, char* err, size_t errlen);
// the host of each launch rank (world_size ints, equal where ranks share a host's memory: the lowest
// launch rank there), to every rank; before comm_grid or after
void comm_host_map(Comm* c, int* host);
void comm_finalize(Comm* c);

// While one rank does a long piece of work the others wait for (rank 0 writing a checkpoint or
// model.bin: seconds, where a message takes milliseconds), every wait of this rank may take `seconds`
// more than --comm-timeout, so that a short timeout meant to catch a hung rank does not end a healthy
// run there; `what` names that work in a timeout's message. comm_timeout_allow(c, 0, NULL) ends it.
void comm_timeout_allow(Comm* c, double seconds, const char* what);

// every rank's flag OR-ed (a collective over all ranks): lets all ranks agree to stop together
int comm_any(Comm* c, int flag);
// the largest of every rank's value (a collective over all ranks)
int comm_max(Comm* c, int value);
// every rank's n doubles, to every rank: out (world_size, n), in world-rank order (all ranks then hold
// the same figures, so choices made from them agree)
void comm_allgather_double(Comm* c, const double* in, int n, double* out);

// --- the pipeline (peers named by stage index within this replica) ---------------------------
void comm_isend(Comm* c, const void* buf, size_t bytes, int peer_stage, int tag, CommRequest* r);
void comm_irecv(Comm* c, void* buf, size_t bytes, int peer_stage, int tag, CommRequest* r);
void comm_recv(Comm* c, void* buf, size_t bytes, int peer_stage, int tag);
void comm_wait(Comm* c, CommRequest* r); // no-op on an inactive request; polls a link's request
// 1 when r has completed (then it is inactive), 0 while it is still in flight; 1 for inactive
int comm_test(Comm* c, CommRequest* r);
// 1 where this rank has other ranks to exchange with (MPI, more than one rank): where waiting on
// something else (a GPU, the CPU's kernels) should let MPI move messages along
int comm_has_peers(const Comm* c);
// lets MPI move outstanding nonblocking operations along (a probe); cheap, returns at once
void comm_progress(Comm* c);
// blocks until one of the active requests among reqs (n <= 8; NULL or inactive entries are
// skipped) completes; returns its index, now inactive. Fatal when none is active.
int comm_wait_any(Comm* c, CommRequest* const* reqs, int n);
// a CommLink over MPI between buffers in host memory: what every stage whose messages are in host
// memory uses (the CPU, host staging, synthetic compute), and what cpu-staged uses in place of NCCL,
// so the executor's device-message path runs (and is tested) on a machine without a GPU. As with
// NCCL, its messages between two stages match in the order they were posted, one MPI tag per channel.
void comm_mpi_link(Comm* c, CommLink* out);
// a pipeline message over `link`'s `channel`, from / into buffers the link can reach
void comm_link_isend(Comm* c, const CommLink* link, int channel, const void* buf, size_t bytes, int peer_stage, CommRequest* r);
void comm_link_irecv(Comm* c, const CommLink* link, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r);
// sum of n doubles over this replica's stages, nonblocking; start, then wait on r
void comm_pipe_sum_start(Comm* c, const double* in, double* out, int n, CommRequest* r);

// --- the data-parallel group -------------------------------------------------------------------
// point-to-point messages between this stage's replicas (peers named by replica index); they match
// by tag and, for one tag, in the order they were posted
void comm_dp_isend(Comm* c, const void* buf, size_t bytes, int peer_replica, int tag, CommRequest* r);
void comm_dp_irecv(Comm* c, void* buf, size_t bytes, int peer_replica, int tag, CommRequest* r);
// buf (n) <- (buf_0 + buf_1 + ... + buf_{D-1}) / D over this stage's replicas, summed in replica
// order so every replica gets bitwise the same result (reduce-scatter, then all-gather)
void comm_dp_average(Comm* c, float* buf, size_t n);
// the bytes this replica sends plus receives in comm_dp_average of n floats (and NCCL's equivalent)
double comm_dp_average_bytes(const Comm* c, size_t n);
// the same for a few doubles (losses, statistics)
void comm_dp_average_double(Comm* c, double* buf, int n);

// What every implementation of the average shares (MPI here, NCCL in comm_nccl.cuh), so that they
// agree bitwise. Rounds of at most COMM_DP_PIECE floats bound the receive buffer (64 MiB); an
// element's sum does not depend on them.
#define COMM_DP_PIECE ((size_t)1 << 24)
// Chunk r of m floats split over D replicas: sizes base + (r < extra), contiguous.
static inline void comm_dp_chunk(size_t m, int D, int r, size_t* size, size_t* off) {
    size_t base = m / (size_t)D, extra = m % (size_t)D, rr = (size_t)r;
    *size = base + (rr < extra);
    *off = rr * base + (rr < extra ? rr : extra);
}
// out[i] = (x_0[i] + x_1[i] + ... + x_{D-1}[i]) / D with x_q = in + q * stride: summed in exactly
// that order (no reassociation), then a true division (no reciprocal)
#define COMM_ORDERED_AVERAGE(T, out, in, stride, count, D)                 \
    do {                                                                   \
        for (size_t i_ = 0; i_ < (size_t)(count); i_++) (out)[i_] = (in)[i_]; \
        for (int q_ = 1; q_ < (D); q_++) {                                 \
            const T* x_ = (in) + (size_t)q_ * (size_t)(stride);            \
            for (size_t i_ = 0; i_ < (size_t)(count); i_++) (out)[i_] += x_[i_]; \
        }                                                                  \
        for (size_t i_ = 0; i_ < (size_t)(count); i_++) (out)[i_] /= (T)(D); \
    } while (0)

// --- everyone ------------------------------------------------------------------------------------
// gathers `bytes` from every rank to world rank 0 (out: world_size * bytes, only on rank 0)
void comm_gather_to_root(Comm* c, const void* in, size_t bytes, void* out);
// variable-size gather to world rank 0: counts (world_size) and the concatenation (rank 0 only,
// malloc'ed, caller frees)
void* comm_gatherv_to_root(Comm* c, const void* in, size_t bytes, size_t* counts);
// a transfer of any size between two world ranks, blocking, as messages of at most c->chunk_bytes
// (matched in order, so a sender's transfers to one rank with one tag arrive in the order sent): what
// assembles the whole model on world rank 0 straight into its place, with no staging copy
void comm_world_send(Comm* c, const void* buf, size_t bytes, int to_rank, int tag);
void comm_world_recv(Comm* c, void* buf, size_t bytes, int from_rank, int tag);
void comm_barrier(Comm* c);

#ifdef __cplusplus
}
#endif
