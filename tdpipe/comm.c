// The Comm interface (comm.h) over MPI when built with -DTD_MPI and launched by mpirun; otherwise
// the single-process versions (P = D = 1): collectives copy or do nothing, there are no peers.
#define _GNU_SOURCE // process_vm_readv (single_copy_missing)
#include "tdpipe/comm.h"
#include "llmc/common.h"
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include "tdpipe/mpi_check.h"
#ifdef __linux__
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>
#endif

// One message or gather carries at most INT_MAX bytes (MPI counts are int). Activations and
// gradients for one message are far smaller, so this version refuses larger ones instead of
// splitting them into several requests; the whole model's gathers (checkpoints, the exported model)
// go through comm_world_send / comm_world_recv, which split.
static void check_bytes(size_t bytes, const char* what) {
    if (bytes > (size_t)INT_MAX)
        td_fatal("%s of %zu bytes exceeds the %d-byte per-message limit of this version", what, bytes, INT_MAX);
}

static int env_int(const char* name, int fallback) {
    const char* s = getenv(name);
    return (s && *s) ? atoi(s) : fallback;
}

// --comm-timeout: a rank that has waited this long says for what, and exits (the launcher then ends
// every rank); 0 waits forever
static void timed_out(const Comm* c, double waited, const char* what) {
    char allowed[160] = "";
    if (c->allowance > 0) snprintf(allowed, sizeof allowed, " + %.3g s for %s", c->allowance, c->allowance_for ? c->allowance_for : "a long task");
    td_fatal("stage %d (replica %d) waited %.0f s for %s (--comm-timeout %g%s): a rank may be stopped, hung or gone; every rank stops "
             "(checkpoints already written are intact)",
             c->stage, c->replica, waited, what, c->timeout, allowed);
}

void comm_timeout_allow(Comm* c, double seconds, const char* what) {
    c->allowance = seconds > 0 ? seconds : 0.0;
    c->allowance_for = seconds > 0 ? what : NULL;
}

// A wait's clock for --comm-timeout: the seconds this process spent waiting, less any pause of more
// than a second between two of its polls (SIGSTOP, a suspended machine). A rank that was itself
// stopped and continued would otherwise find its deadline long past and blame the ranks that waited
// for it; this way only they time out, each naming what it waits for.
typedef struct {
    double start, last, paused;
} WaitClock;
static WaitClock wait_clock(void) {
    double t = now_seconds();
    return (WaitClock){t, t, 0.0};
}
static double wait_clock_read(WaitClock* w) {
    double t = now_seconds();
    if (t - w->last > 1.0) w->paused += t - w->last;
    w->last = t;
    return t - w->start - w->paused;
}
// 1 when the wait has run past --comm-timeout (*waited: its seconds); no clock is read without one
static int wait_expired(const Comm* c, WaitClock* w, double* waited) {
    if (c->timeout <= 0) return 0;
    *waited = wait_clock_read(w);
    return *waited > c->timeout + c->allowance;
}

#ifdef TD_MPI
// handle[0] holds the MPI_Request; handle[1] the bytes a receive expects (-1 for sends and collectives)
_Static_assert(sizeof(MPI_Request) <= sizeof(int64_t), "MPI_Request must fit in CommRequest.handle[0]");

static MPI_Comm comm_of(void* p, const char* what) {
    if (!p) td_fatal("%s used before comm_grid", what);
    return *(MPI_Comm*)p;
}

static void* comm_box(MPI_Comm m) {
    MPI_Comm* p = (MPI_Comm*)malloc_check(sizeof(MPI_Comm));
    *p = m;
    return p;
}

static void comm_unbox(void** p) {
    if (!*p) return;
    MPI_CHECK(MPI_Comm_free((MPI_Comm*)*p));
    free(*p);
    *p = NULL;
}

static void request_store(CommRequest* r, MPI_Request req, int64_t expect_bytes, const char* what) {
    memset(r, 0, sizeof *r);
    snprintf(r->what, sizeof r->what, "%s", what);
    memcpy(&r->handle[0], &req, sizeof req);
    r->handle[1] = expect_bytes;
    r->active = 1;
}

// MPI_Wait with a deadline: tests, then sleeps 20 us between tests once it has waited a while
static void wait_mpi(const Comm* c, MPI_Request* req, MPI_Status* st, const char* what) {
    WaitClock clock = wait_clock();
    for (long n = 0;; n++) {
        int done = 0;
        MPI_CHECK(MPI_Test(req, &done, st));
        if (done) return;
        if (n < 1000) continue;
        double waited;
        if (wait_expired(c, &clock, &waited)) timed_out(c, waited, what);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

// what: the request's description ("a message of N bytes from stage s (tag t)")
static void check_received(const MPI_Status* st, size_t bytes, const char* what) {
    int got = 0;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &got));
    if ((size_t)got != bytes) td_fatal("%s: %d bytes arrived where %zu were expected", what, got, bytes);
}
#endif

// a point-to-point peer: a stage of this replica's pipeline, or a replica of this stage
typedef struct {
    const char* kind; // "stage" or "replica"
    int count, me;    // P and this stage, or D and this replica
    void* group;      // (MPI_Comm*) the group they are ranked in
    int tag_ub;       // the largest tag MPI accepts
} PeerGroup;
static int tag_ub(const Comm* c) { return c->tag_ub > 0 ? c->tag_ub : 32767; }
static PeerGroup pipe_peers(const Comm* c) { return (PeerGroup){"stage", c->P, c->stage, c->pipe_comm, tag_ub(c)}; }
static PeerGroup dp_peers(const Comm* c) { return (PeerGroup){"replica", c->D, c->replica, c->dp_comm, tag_ub(c)}; }
static PeerGroup world_peers(const Comm* c) { return (PeerGroup){"rank", c->world_size, c->world_rank, c->world_comm, tag_ub(c)}; }

static void check_peer(PeerGroup g, int peer, int tag, size_t bytes, const char* what) {
    if (peer < 0 || peer >= g.count) td_fatal("%s: %s %d does not exist (%d of them)", what, g.kind, peer, g.count);
    if (peer == g.me) td_fatal("%s: %s %d addressed itself (messages go to other %ss)", what, g.kind, peer, g.kind);
#ifdef TD_MPI
    if (tag < 0 || tag > g.tag_ub) td_fatal("%s: tag %d outside [0, %d]", what, tag, g.tag_ub);
#else
    (void)tag;
#endif
    check_bytes(bytes, what);
}

// Open MPI's shared-memory transport moves a large message in one copy where the kernel lets one
// process read another's memory (CMA, process_vm_readv). Without that (a seccomp profile that denies
// it, Yama's ptrace_scope >= 2, or --mca btl_vader_single_copy_mechanism none) the message goes in
// 32 KiB fragments that move only inside MPI calls on both sides; here a 2 MB activation then took
// 50-175 ms and a d4 step at P = 2 1.35-1.52 s, against 0.84-0.88 s with CMA and 0.87 s with 1 MiB
// fragments. So where this process cannot read memory through the kernel, the fragments are raised
// before MPI_Init (the variables are read there), unless the user chose them. Returns why, or NULL.
#ifdef TD_MPI
#define COMM_FRAGMENT "1048576"
static const char* single_copy_missing(char* why, size_t cap) {
    const char* mech = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
    if (mech && !strcmp(mech, "none")) return "btl_vader_single_copy_mechanism is none";
#ifdef __linux__
    FILE* f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1) scope = 0;
        fclose(f);
    }
    if (scope >= 2) {
        snprintf(why, cap, "kernel.yama.ptrace_scope is %d", scope);
        return why;
    }
    char src[8] = "tdpipe", dst[8] = {0}; // this process's own memory: what a seccomp profile would deny
    struct iovec local = {dst, sizeof dst}, remote = {src, sizeof src};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof src) {
        snprintf(why, cap, "process_vm_readv: %s", strerror(errno));
        return why;
    }
#else
    (void)why;
    (void)cap;
#endif
    return NULL;
}
#endif

void comm_init(Comm* c, int* argc, char*** argv) {
    memset(c, 0, sizeof *c);
    c->world_size = 1;
    c->P = c->D = 1;
    c->local_rank = 0;
    c->local_ranks = 1;
    c->chunk_bytes = (size_t)1 << 30;
    int launched_size = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 0));
    int launched = launched_size > 0 || getenv("PMIX_RANK") != NULL;
#ifdef TD_MPI
    char why[128];
    const char* no_copy = launched_size > 1 ? single_copy_missing(why, sizeof why) : NULL;
    int chosen = getenv("OMPI_MCA_btl_vader_max_send_size") || getenv("OMPI_MCA_btl_sm_max_send_size");
    if (no_copy && !chosen) { // (vader in Open MPI 4, sm in 5; the other name is ignored)
        setenv("OMPI_MCA_btl_vader_max_send_size", COMM_FRAGMENT, 0);
        setenv("OMPI_MCA_btl_sm_max_send_size", COMM_FRAGMENT, 0);
    }
    if (launched) {
        int provided = 0;
        // FUNNELED: OpenMP threads compute, only the main thread calls MPI
        MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)); // errors reach MPI_CHECK
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank));
        c->launch_rank = c->world_rank;
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world_size));
        g_rank = c->world_rank;
        MPI_Comm world;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world)); // library traffic apart from any other; inherits the handler
        c->world_comm = comm_box(world);
        int* ub = NULL;
        int flag = 0;
        MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
        if (flag && ub) c->tag_ub = *ub;
        c->mpi = 1;
        // the ranks sharing this host's memory, whatever launched them (mpirun, Hydra, srun)
        MPI_Comm host;
        MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, c->world_rank, MPI_INFO_NULL, &host));
        MPI_CHECK(MPI_Comm_rank(host, &c->local_rank));
        MPI_CHECK(MPI_Comm_size(host, &c->local_ranks));
        MPI_CHECK(MPI_Comm_free(&host));
        // until comm_grid: the P = 1 grid it would build
        c->D = c->world_size;
        c->replica = c->world_rank;
        if (no_copy && c->world_rank == 0)
            fprintf(stderr, "comm: no single-copy path between processes here (%s): %s\n", no_copy,
                    chosen ? "large messages move only inside MPI calls; the shared-memory fragment size given is kept"
                           : "Open MPI's shared-memory fragments set to 1 MiB (btl_vader_max_send_size), so a large message needs few MPI calls to move");
    }
#else
    (void)argc;
    (void)argv;
    if (launched_size > 1) {
        g_rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0));
        td_fatal("launched by mpirun with %d ranks, but this build has no MPI "
                 "(install openmpi-bin and libopenmpi-dev, then rebuild)", launched_size);
    }
#endif
    (void)launched;
}

int comm_grid_check(const Comm* c, int P, char* err, size_t errlen) {
    if (P < 1) return td_error(err, errlen, "--stages %d: a pipeline needs at least 1 stage", P);
    if (c->world_size % P != 0)
        return td_error(err, errlen, "--stages %d does not divide the %d rank%s: the rank count must be P x D%s", P,
                          c->world_size, c->world_size == 1 ? "" : "s",
                          c->mpi ? "" : " (launch with mpirun -np P*D)");
    return 0;
}

int comm_grid(Comm* c, int P, Placement pl, char* err, size_t errlen) {
    if (comm_grid_check(c, P, err, errlen)) return -1;
    c->P = P;
    c->D = c->world_size / P;
    c->placement = pl;
    placement_coords(pl, P, c->D, c->launch_rank, &c->stage, &c->replica);
#ifdef TD_MPI
    if (c->mpi) {
        int grid = c->replica * P + c->stage;
        comm_unbox(&c->pipe_comm);
        comm_unbox(&c->dp_comm);
        // all ranks ranked by the grid (stages first: the launch order itself); it inherits
        // MPI_COMM_WORLD's error handler
        MPI_Comm regrid;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, grid, &regrid));
        comm_unbox(&c->world_comm);
        c->world_comm = comm_box(regrid);
        c->world_rank = grid;
        g_rank = grid; // messages name the grid's rank (rank 0 is launch rank 0 in either layout)
        MPI_Comm world = comm_of(c->world_comm, "comm_grid"), pipe, dp;
        MPI_CHECK(MPI_Comm_split(world, c->replica, c->stage, &pipe)); // rank in pipe = stage
        MPI_CHECK(MPI_Comm_split(world, c->stage, c->replica, &dp));   // rank in dp = replica
        c->pipe_comm = comm_box(pipe);
        c->dp_comm = comm_box(dp);
    }
#endif
    return 0;
}

void comm_host_map(Comm* c, int* host) {
    host[0] = 0;
#ifdef TD_MPI
    if (c->mpi) {
        MPI_Comm same;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->launch_rank, MPI_INFO_NULL, &same));
        int leader = c->launch_rank;
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, same, &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "the ranks on this host (their lowest rank)");
        MPI_CHECK(MPI_Iallgather(&leader, 1, MPI_INT, host, 1, MPI_INT, MPI_COMM_WORLD, &req)); // in launch order
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "every rank's host");
        MPI_CHECK(MPI_Comm_free(&same));
    }
#else
    (void)c;
#endif
}

void comm_finalize(Comm* c) {
#ifdef TD_MPI
    if (c->mpi) {
        comm_unbox(&c->pipe_comm);
        comm_unbox(&c->dp_comm);
        comm_unbox(&c->world_comm);
        free(c->dp_recv);
        c->dp_recv = NULL;
        c->dp_recv_cap = 0;
        MPI_CHECK(MPI_Finalize());
        c->mpi = 0;
    }
#else
    (void)c;
#endif
}

// every rank's int combined by `op` (MPI_LOR, MPI_MAX) over all ranks
#ifdef TD_MPI
static int allreduce_int(Comm* c, int value, MPI_Op op, const char* fn) {
    int out = value;
    if (c->mpi) {
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_INT, op, comm_of(c->world_comm, fn), &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "every rank's agreement (a value all ranks share)");
    }
    return out;
}
#endif

int comm_any(Comm* c, int flag) {
#ifdef TD_MPI
    return allreduce_int(c, flag != 0, MPI_LOR, "comm_any");
#else
    (void)c;
    return flag != 0;
#endif
}

int comm_max(Comm* c, int value) {
#ifdef TD_MPI
    return allreduce_int(c, value, MPI_MAX, "comm_max");
#else
    (void)c;
    return value;
#endif
}

void comm_allgather_double(Comm* c, const double* in, int n, double* out) {
    if (n < 0) td_fatal("comm_allgather_double: n = %d", n);
#ifdef TD_MPI
    if (c->mpi) {
        MPI_Request req;
        MPI_CHECK(MPI_Iallgather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, comm_of(c->world_comm, "comm_allgather_double"), &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "every rank's figures (an all-gather)");
        return;
    }
#else
    (void)c;
#endif
    memcpy(out, in, (size_t)n * sizeof(double));
}

// --- the pipeline -------------------------------------------------------------------------------

// MPI_Isend / MPI_Irecv to `peer` of group g (recv: the size checked on arrival)
static void p2p_start(Comm* c, PeerGroup g, int recv, void* buf, size_t bytes, int peer, int tag, CommRequest* r, const char* fn) {
    check_peer(g, peer, tag, bytes, fn);
#ifdef TD_MPI
    MPI_Request req;
    MPI_Comm comm = comm_of(g.group, fn);
    if (recv) MPI_CHECK(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, comm, &req));
    else MPI_CHECK(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, comm, &req));
    char what[80];
    snprintf(what, sizeof what, recv ? "a message of %zu bytes from %s %d (tag %d)" : "a send of %zu bytes to %s %d (tag %d)", bytes, g.kind, peer, tag);
    request_store(r, req, recv ? (int64_t)bytes : -1, what);
#else
    (void)c;
    (void)buf;
    (void)r;
    (void)recv;
#endif
}

void comm_isend(Comm* c, const void* buf, size_t bytes, int peer_stage, int tag, CommRequest* r) {
    p2p_start(c, pipe_peers(c), 0, (void*)buf, bytes, peer_stage, tag, r, "comm_isend");
}
void comm_irecv(Comm* c, void* buf, size_t bytes, int peer_stage, int tag, CommRequest* r) {
    p2p_start(c, pipe_peers(c), 1, buf, bytes, peer_stage, tag, r, "comm_irecv");
}
void comm_dp_isend(Comm* c, const void* buf, size_t bytes, int peer_replica, int tag, CommRequest* r) {
    p2p_start(c, dp_peers(c), 0, (void*)buf, bytes, peer_replica, tag, r, "comm_dp_isend");
}
void comm_dp_irecv(Comm* c, void* buf, size_t bytes, int peer_replica, int tag, CommRequest* r) {
    p2p_start(c, dp_peers(c), 1, buf, bytes, peer_replica, tag, r, "comm_dp_irecv");
}

void comm_recv(Comm* c, void* buf, size_t bytes, int peer_stage, int tag) {
#ifdef TD_MPI
    CommRequest r;
    comm_irecv(c, buf, bytes, peer_stage, tag, &r);
    comm_wait(c, &r);
#else
    (void)buf;
#endif
}

// a link's request: test it where it lives (the link marks it done); 1 when completed
static int link_test(CommRequest* r) {
    const CommLink* l = r->link;
    if (!l->test(l->ctx, r)) return 0;
    r->active = 0;
    r->link = NULL;
    return 1;
}

// between polls of a link's requests: MPI moves along, the core goes to other ranks
static void poll_pause(Comm* c) {
    comm_progress(c);
    struct timespec ts = {0, 20000}; // 20 us: far below a stage op, far above a wasted wake-up
    nanosleep(&ts, NULL);
}

void comm_wait(Comm* c, CommRequest* r) {
    if (!r->active) return;
    if (r->link) {
        WaitClock clock = wait_clock();
        double waited;
        while (!link_test(r)) {
            if (wait_expired(c, &clock, &waited)) timed_out(c, waited, r->what[0] ? r->what : "a device transfer");
            poll_pause(c);
        }
        return;
    }
#ifdef TD_MPI
    MPI_Request req;
    memcpy(&req, &r->handle[0], sizeof req);
    MPI_Status st;
    wait_mpi(c, &req, &st, r->what);
    if (r->handle[1] >= 0) check_received(&st, (size_t)r->handle[1], r->what);
#endif
    r->active = 0;
}

int comm_has_peers(const Comm* c) { return c->mpi && c->world_size > 1; }

void comm_progress(Comm* c) {
#ifdef TD_MPI
    if (!comm_has_peers(c)) return;
    int flag = 0;
    // (on the world's communicator: set from MPI_Init on, so a stage may call this before comm_grid;
    // a probe anywhere moves every outstanding operation)
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_of(c->world_comm, "comm_progress"), &flag, MPI_STATUS_IGNORE));
#else
    (void)c;
#endif
}

int comm_wait_any(Comm* c, CommRequest* const* reqs, int n) {
    int idx[8], k = 0, links = 0; // (k) which of reqs the active requests are
    for (int i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->active) {
            if (k == 8) td_fatal("comm_wait_any: more than 8 active requests");
            idx[k++] = i;
            links += reqs[i]->link != NULL;
        }
    if (k == 0) td_fatal("comm_wait_any: none of the %d requests is active: nothing to wait for", n);
    WaitClock clock = wait_clock();
    double waited;
    if (links) // a link's transfers complete where MPI cannot see them: poll everything
        for (;;) {
            for (int j = 0; j < k; j++)
                if (comm_test(c, reqs[idx[j]])) return idx[j];
            if (wait_expired(c, &clock, &waited)) timed_out(c, waited, reqs[idx[0]]->what);
            poll_pause(c);
        }
#ifdef TD_MPI
    MPI_Request req[8];
    for (int j = 0; j < k; j++) memcpy(&req[j], &reqs[idx[j]]->handle[0], sizeof req[j]);
    int j = -1;
    MPI_Status st;
    for (long n = 0;; n++) { // MPI_Waitany with --comm-timeout's deadline
        int done = 0;
        MPI_CHECK(MPI_Testany(k, req, &j, &done, &st));
        if (done) break;
        if (n < 1000) continue;
        if (wait_expired(c, &clock, &waited)) {
            char what[3 * 80 + 16] = "";
            for (int q = 0; q < k; q++) snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", q ? " or " : "", reqs[idx[q]]->what);
            timed_out(c, waited, what);
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    if (j == MPI_UNDEFINED) td_fatal("comm_wait_any: MPI_Waitany found no active request");
    for (int q = 0; q < k; q++) memcpy(&reqs[idx[q]]->handle[0], &req[q], sizeof req[q]); // MPI_Testany freed the completed one
    CommRequest* done = reqs[idx[j]];
    if (done->handle[1] >= 0) check_received(&st, (size_t)done->handle[1], done->what);
    done->active = 0;
    return idx[j];
#else
    (void)c;
    reqs[idx[0]]->active = 0; // without MPI nothing is ever in flight
    return idx[0];
#endif
}

int comm_test(Comm* c, CommRequest* r) {
    (void)c;
    if (!r->active) return 1;
    if (r->link) return link_test(r);
#ifdef TD_MPI
    MPI_Request req;
    memcpy(&req, &r->handle[0], sizeof req);
    MPI_Status st;
    int done = 0;
    MPI_CHECK(MPI_Test(&req, &done, &st));
    memcpy(&r->handle[0], &req, sizeof req); // MPI_Test frees a completed request
    if (!done) return 0;
    if (r->handle[1] >= 0) check_received(&st, (size_t)r->handle[1], r->what);
#endif
    r->active = 0;
    return 1;
}

// --- the MPI link: comm_isend / comm_irecv on the backend's buffers, their requests behind the
// link's interface (so the executor polls them as it would a device's). Like NCCL's, its messages
// match by order: one MPI tag per channel (MPI keeps the order of messages between two ranks on one
// tag), so a test on the CPU finds any use of the link that relies on more to keep messages apart.
#define MPI_LINK_TAG 1000 // + channel

static void mpi_link_isend(void* ctx, int channel, const void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    comm_isend((Comm*)ctx, buf, bytes, peer_stage, MPI_LINK_TAG + channel, r);
}
static void mpi_link_irecv(void* ctx, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    comm_irecv((Comm*)ctx, buf, bytes, peer_stage, MPI_LINK_TAG + channel, r);
}
static int mpi_link_test(void* ctx, CommRequest* r) {
    CommRequest mpi = *r; // the MPI request inside, tested as one
    mpi.link = NULL;
    int done = comm_test((Comm*)ctx, &mpi);
    memcpy(r->handle, mpi.handle, sizeof r->handle);
    return done;
}

void comm_mpi_link(Comm* c, CommLink* out) {
    memset(out, 0, sizeof *out);
    out->ctx = c;
    out->isend = mpi_link_isend;
    out->irecv = mpi_link_irecv;
    out->test = mpi_link_test;
}

// one message over the link: send from buf, or receive into it
static void link_post(Comm* c, const CommLink* link, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r, int send) {
    const char* what = send ? "comm_link_isend" : "comm_link_irecv";
    if (!link) td_fatal("%s: no link given", what);
    check_peer(pipe_peers(c), peer_stage, 0, bytes, what);
    if (channel < 0 || channel >= COMM_LINK_CHANNELS) td_fatal("%s: channel %d does not exist", what, channel);
    if (send) link->isend(link->ctx, channel, buf, bytes, peer_stage, r);
    else link->irecv(link->ctx, channel, buf, bytes, peer_stage, r);
    if (r->active) r->link = link;
}

void comm_link_isend(Comm* c, const CommLink* link, int channel, const void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    link_post(c, link, channel, (void*)buf, bytes, peer_stage, r, 1);
}

void comm_link_irecv(Comm* c, const CommLink* link, int channel, void* buf, size_t bytes, int peer_stage, CommRequest* r) {
    link_post(c, link, channel, buf, bytes, peer_stage, r, 0);
}

// Exact only because the caller guarantees each element has at most one nonzero contributor
// (x + 0 = x in any order); a -0.0 contribution comes back as +0.0. out may equal in.
void comm_pipe_sum_start(Comm* c, const double* in, double* out, int n, CommRequest* r) {
    memset(r, 0, sizeof *r);
    if (n < 0) td_fatal("comm_pipe_sum_start: n = %d", n);
#ifdef TD_MPI
    if (c->mpi && c->P > 1) {
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, MPI_DOUBLE, MPI_SUM,
                                 comm_of(c->pipe_comm, "comm_pipe_sum_start"), &req));
        request_store(r, req, -1, "the pipeline-wide sum of a step's norms and loss (every stage's post)");
        return;
    }
#else
    (void)c;
#endif
    if (n && in != out) memmove(out, in, (size_t)n * sizeof(double));
}

// --- the data-parallel group ------------------------------------------------------------------------

// All replicas of a stage call this with the same n. Each round of at most COMM_DP_PIECE floats is split
// into D contiguous chunks (sizes differ by at most one); replica r receives every replica's copy of
// chunk r (all-to-all), averages them in replica order, and the averaged chunks are all-gathered.
void comm_dp_average(Comm* c, float* buf, size_t n) {
    if (c->D == 1 || n == 0) return;
#ifdef TD_MPI
    MPI_Comm dp = comm_of(c->dp_comm, "comm_dp_average");
    int D = c->D, me = c->replica;
    int* sizes = (int*)malloc_check(4 * (size_t)D * sizeof(int)); // (4, D): chunk sizes, offsets, receive sizes, offsets
    int *offs = sizes + D, *rsizes = sizes + 2 * D, *roffs = sizes + 3 * D;
    for (size_t off = 0; off < n; off += COMM_DP_PIECE) {
        size_t m = n - off < COMM_DP_PIECE ? n - off : COMM_DP_PIECE;
        for (int r = 0; r < D; r++) {
            size_t sz, off_r;
            comm_dp_chunk(m, D, r, &sz, &off_r);
            sizes[r] = (int)sz;
            offs[r] = (int)off_r;
        }
        int mine = sizes[me];
        for (int q = 0; q < D; q++) {
            rsizes[q] = mine;
            roffs[q] = q * mine;
        }
        size_t need = (size_t)D * (size_t)mine;
        if (need > c->dp_recv_cap) {
            free(c->dp_recv);
            c->dp_recv = (float*)malloc_check(need * sizeof(float));
            c->dp_recv_cap = need;
        }
        MPI_Request req;
        MPI_CHECK(MPI_Ialltoallv(buf + off, sizes, offs, MPI_FLOAT, c->dp_recv, rsizes, roffs, MPI_FLOAT, dp, &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "the replicas' gradient average (its all-to-all)");
        float* own = buf + off + offs[me]; // (mine) this replica's chunk, averaged in place
        COMM_ORDERED_AVERAGE(float, own, c->dp_recv, mine, mine, D);
        MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + off, sizes, offs, MPI_FLOAT, dp, &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "the replicas' gradient average (its all-gather)");
    }
    free(sizes);
#else
    (void)buf;
#endif
}

// comm_dp_average's traffic, counted round by round as it cuts them
double comm_dp_average_bytes(const Comm* c, size_t n) {
    double total = 0.0;
    for (size_t off = 0; off < n; off += COMM_DP_PIECE) { // as comm_dp_average cuts its rounds
        size_t m = n - off < COMM_DP_PIECE ? n - off : COMM_DP_PIECE, mine, o;
        comm_dp_chunk(m, c->D, c->replica, &mine, &o);
        total += 2.0 * 4.0 * ((double)(m - mine) + (double)(c->D - 1) * (double)mine); // all-to-all, then all-gather: each sends and receives
    }
    return c->D > 1 ? total : 0.0;
}

// a few values: every replica gathers all D copies and averages them in replica order itself
void comm_dp_average_double(Comm* c, double* buf, int n) {
    if (n < 0) td_fatal("comm_dp_average_double: n = %d", n);
    if (c->D == 1 || n == 0) return;
#ifdef TD_MPI
    double* all = (double*)malloc_check((size_t)c->D * (size_t)n * sizeof(double)); // (D, n)
    MPI_Request req;
    MPI_CHECK(MPI_Iallgather(buf, n, MPI_DOUBLE, all, n, MPI_DOUBLE, comm_of(c->dp_comm, "comm_dp_average_double"), &req));
    wait_mpi(c, &req, MPI_STATUS_IGNORE, "the replicas' average of a few figures (the loss, statistics)");
    COMM_ORDERED_AVERAGE(double, buf, all, n, n, c->D);
    free(all);
#else
    (void)buf;
#endif
}

// --- everyone -------------------------------------------------------------------------------------

void comm_gather_to_root(Comm* c, const void* in, size_t bytes, void* out) {
    check_bytes(bytes, "comm_gather_to_root");
#ifdef TD_MPI
    if (c->mpi) {
        if ((size_t)c->world_size * bytes > (size_t)INT_MAX && c->world_rank == 0)
            td_fatal("comm_gather_to_root: %d ranks x %zu bytes exceeds the %d-byte limit of this version", c->world_size,
                     bytes, INT_MAX);
        MPI_Request req;
        MPI_CHECK(MPI_Igather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, 0, comm_of(c->world_comm, "comm_gather_to_root"), &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "a gather to world rank 0");
        return;
    }
#else
    (void)c;
#endif
    if (bytes && out != in) memmove(out, in, bytes);
}

void* comm_gatherv_to_root(Comm* c, const void* in, size_t bytes, size_t* counts) {
    check_bytes(bytes, "comm_gatherv_to_root");
#ifdef TD_MPI
    if (c->mpi) {
        MPI_Comm world = comm_of(c->world_comm, "comm_gatherv_to_root");
        int root = c->world_rank == 0, W = c->world_size;
        int mine = (int)bytes;
        int* rc = root ? (int*)malloc_check(2 * (size_t)W * sizeof(int)) : NULL; // (2, W): counts, offsets
        MPI_Request req;
        MPI_CHECK(MPI_Igather(&mine, 1, MPI_INT, rc, 1, MPI_INT, 0, world, &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "a gather to world rank 0 (sizes)");
        char* out = NULL;
        if (root) {
            size_t total = 0;
            for (int i = 0; i < W; i++) {
                rc[W + i] = (int)total;
                total += (size_t)rc[i];
                counts[i] = (size_t)rc[i];
                if (total > (size_t)INT_MAX)
                    td_fatal("comm_gatherv_to_root: %zu bytes from ranks 0..%d exceed the %d-byte limit of this version",
                             total, i, INT_MAX);
            }
            out = (char*)malloc_check(total);
        }
        MPI_CHECK(MPI_Igatherv(in, mine, MPI_BYTE, out, rc, root ? rc + W : NULL, MPI_BYTE, 0, world, &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "a gather to world rank 0 (the model, a trace)");
        free(rc);
        return out;
    }
#else
    (void)c;
#endif
    counts[0] = bytes;
    char* out = (char*)malloc_check(bytes);
    if (bytes) memcpy(out, in, bytes);
    return out;
}

// the transfer as messages of at most chunk_bytes, one at a time
static void world_transfer(Comm* c, int recv, void* buf, size_t bytes, int peer, int tag, const char* fn) {
    if (c->chunk_bytes == 0 || c->chunk_bytes > (size_t)INT_MAX) td_fatal("%s: chunk_bytes %zu outside [1, %d]", fn, c->chunk_bytes, INT_MAX);
    for (size_t off = 0; off < bytes; off += c->chunk_bytes) {
        CommRequest r = {0};
        size_t n = bytes - off < c->chunk_bytes ? bytes - off : c->chunk_bytes;
        p2p_start(c, world_peers(c), recv, (char*)buf + off, n, peer, tag, &r, fn);
        comm_wait(c, &r);
    }
}

void comm_world_send(Comm* c, const void* buf, size_t bytes, int to_rank, int tag) {
    world_transfer(c, 0, (void*)buf, bytes, to_rank, tag, "comm_world_send");
}
void comm_world_recv(Comm* c, void* buf, size_t bytes, int from_rank, int tag) {
    world_transfer(c, 1, buf, bytes, from_rank, tag, "comm_world_recv");
}

void comm_barrier(Comm* c) {
#ifdef TD_MPI
    if (c->mpi) {
        MPI_Request req;
        MPI_CHECK(MPI_Ibarrier(comm_of(c->world_comm, "comm_barrier"), &req));
        wait_mpi(c, &req, MPI_STATUS_IGNORE, "every rank (a barrier)");
    }
#else
    (void)c;
#endif
}
