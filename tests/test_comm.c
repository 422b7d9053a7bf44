// Tests of the Comm interface (tdpipe/comm.h). Under mpirun every rank runs the same checks and rank 0
// prints the tally of all ranks; without mpirun one process checks the single-process paths (P = D = 1).
// Usage: test_comm [P] [--fatal gather-size|truncate|short|world-size]   (the --fatal modes must end the job)
#include "tdpipe/comm.h"
#include "llmc/common.h"
#include "llmc/rng.h"
#include "tests/test.h"
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

static Comm C;

// every line names its rank, so the interleaved output of several ranks stays readable
#define RCHECK(cond, fmt, ...) CHECK(cond, "[rank %d stage %d replica %d] " fmt, C.world_rank, C.stage, C.replica, ##__VA_ARGS__)

static uint64_t key(uint64_t a, uint64_t b, uint64_t c) { return a * 1000003ULL + b * 7919ULL + c * 104729ULL + 17; }

static void pattern_fill(unsigned char* buf, size_t bytes, uint64_t k) {
    Rng r;
    rng_init(&r, k);
    for (size_t i = 0; i < bytes; i++) buf[i] = (unsigned char)(rng_u64(&r) >> 56);
}

static int pattern_ok(const unsigned char* buf, size_t bytes, uint64_t k) {
    unsigned char* want = (unsigned char*)malloc_check(bytes);
    pattern_fill(want, bytes, k);
    int same = bytes == 0 || memcmp(buf, want, bytes) == 0;
    free(want);
    return same;
}

static uint64_t fnv1a(const void* p, size_t bytes) {
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

// a float of random sign and magnitude (2^-10 .. 2^11), so the summation order changes roundings
static float dp_value(Rng* r) {
    uint64_t u = rng_u64(r);
    uint32_t bits = (uint32_t)(u >> 63) << 31 | (uint32_t)(117 + (u >> 32) % 21) << 23 | (uint32_t)(u & 0x7fffff);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double pipe_value(uint64_t i, int replica) {
    Rng r;
    rng_init(&r, key(i, (uint64_t)replica, 5));
    return ldexp((double)rng_u64(&r) / 18446744073709551616.0 + 0.25, (int)rng_below(&r, 61) - 30) * ((i & 1) ? -1.0 : 1.0);
}

static void test_grid(int P) {
#ifdef TD_MPI
    int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    RCHECK(C.mpi == launched, "grid: MPI initialised exactly when launched by mpirun (mpi = %d)", C.mpi);
#else
    RCHECK(C.mpi == 0 && C.world_size == 1, "grid: a build without MPI is one process");
#endif
    RCHECK(C.P == P && C.D * P == C.world_size, "grid: P = %d, D = %d, world %d", C.P, C.D, C.world_size);
    RCHECK(C.world_rank == C.replica * P + C.stage && C.stage >= 0 && C.stage < P && C.replica >= 0 && C.replica < C.D,
           "grid: world rank %d = replica %d x P + stage %d", C.world_rank, C.replica, C.stage);
    RCHECK(g_rank == C.world_rank, "grid: g_rank = world rank (%d)", g_rank);
    int want_launch = placement_rank(C.placement, P, C.D, C.stage, C.replica);
    RCHECK(!C.mpi || C.launch_rank == want_launch, "grid, %s first: launch rank %d holds stage %d, replica %d (want launch rank %d)",
           placement_name(C.placement), C.launch_rank, C.stage, C.replica, want_launch);
    const char* ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int want_local = (C.mpi && ls) ? atoi(ls) : 1;
    RCHECK(C.local_ranks == want_local, "grid: local_ranks %d (launcher says %d)", C.local_ranks, want_local);

    // every (stage, replica) pair held by exactly one rank
    int me[2] = {C.stage, C.replica};
    int* all = (int*)malloc_check((size_t)C.world_size * sizeof(me));
    comm_gather_to_root(&C, me, sizeof(me), all);
    if (C.world_rank == 0) {
        int* seen = (int*)calloc_check((size_t)C.world_size, sizeof(int));
        int bad = 0;
        for (int w = 0; w < C.world_size; w++) {
            int s = all[2 * w], d = all[2 * w + 1];
            if (s < 0 || s >= C.P || d < 0 || d >= C.D || seen[d * C.P + s]++ || w != d * C.P + s) bad++;
        }
        RCHECK(bad == 0, "grid: the %d ranks cover the %d x %d grid once each (%d wrong)", C.world_size, C.P, C.D, bad);
        free(seen);
    }
    free(all);

    // refusals leave the grid as it was and say why, on every rank alike
    char err[256] = "";
    int bad_P = C.world_size + 1;
    char want[128];
    snprintf(want, sizeof want, "--stages %d does not divide the %d rank", bad_P, C.world_size);
    RCHECK(comm_grid(&C, bad_P, PLACE_STAGES_FIRST, err, sizeof err) == -1 && strstr(err, want) && strstr(err, "P x D"),
           "grid: P = %d refused: %s", bad_P, err);
    RCHECK(comm_grid(&C, 0, PLACE_STAGES_FIRST, err, sizeof err) == -1 && strstr(err, "--stages 0"), "grid: P = 0 refused: %s", err);
    RCHECK(C.P == P && C.D * P == C.world_size, "grid: unchanged by the refusals");
}

static void test_any(void) {
    RCHECK(comm_any(&C, C.world_rank == C.world_size - 1) == 1, "any: the last rank's flag reaches everyone");
    RCHECK(comm_any(&C, C.world_rank == 0 ? 7 : 0) == 1, "any: a nonzero flag counts as true");
    RCHECK(comm_any(&C, 0) == 0, "any: no flag, no stop");
}

// stage s sends to s + 1: six same-tag messages (must arrive in order), a 0-byte and an 8 MiB one on
// their own tags (received in a different order than sent); s + 1 answers with a pong
enum { PP_N = 6, PP_SMALL = 4096, PP_BIG = 8 << 20 };
static void test_pingpong(void) {
    if (C.P == 1) {
        CommRequest r;
        double x = 3.5, y = 0;
        comm_pipe_sum_start(&C, &x, &y, 1, &r);
        comm_wait(&C, &r);
        RCHECK(y == 3.5 && !r.active, "pipeline: P = 1 has no peers; a completed request waits as a no-op");
        return;
    }
    int s = C.stage, d = C.replica;
    unsigned char* out_small = (unsigned char*)malloc_check((size_t)PP_N * PP_SMALL); // (PP_N, PP_SMALL)
    unsigned char* out_big = (unsigned char*)malloc_check(PP_BIG);
    unsigned char zero_out = 0, zero_in = 0, pong_out[64], pong_in[64];
    CommRequest sends[PP_N + 2], pong_send, big_recv, zero_recv, pong_recv;
    if (s < C.P - 1) {
        comm_isend(&C, &zero_out, 0, s + 1, 10, &sends[PP_N]);
        for (int k = 0; k < PP_N; k++) {
            pattern_fill(out_small + (size_t)k * PP_SMALL, PP_SMALL, key((uint64_t)s, (uint64_t)d, (uint64_t)k));
            comm_isend(&C, out_small + (size_t)k * PP_SMALL, PP_SMALL, s + 1, 7, &sends[k]);
        }
        pattern_fill(out_big, PP_BIG, key((uint64_t)s, (uint64_t)d, 99));
        comm_isend(&C, out_big, PP_BIG, s + 1, 9, &sends[PP_N + 1]);
    }
    if (s > 0) {
        unsigned char* in_big = (unsigned char*)malloc_check(PP_BIG);
        unsigned char in_small[PP_SMALL];
        comm_irecv(&C, in_big, PP_BIG, s - 1, 9, &big_recv);
        int in_order = 1;
        for (int k = 0; k < PP_N; k++) {
            comm_recv(&C, in_small, PP_SMALL, s - 1, 7);
            in_order &= pattern_ok(in_small, PP_SMALL, key((uint64_t)(s - 1), (uint64_t)d, (uint64_t)k));
        }
        comm_irecv(&C, &zero_in, 0, s - 1, 10, &zero_recv);
        comm_wait(&C, &big_recv);
        comm_wait(&C, &zero_recv);
        RCHECK(in_order, "pipeline: %d same-tag messages from stage %d of this replica arrive intact and in order", PP_N, s - 1);
        RCHECK(pattern_ok(in_big, PP_BIG, key((uint64_t)(s - 1), (uint64_t)d, 99)) && !big_recv.active && !zero_recv.active,
               "pipeline: 8 MiB and 0-byte messages matched by tag, whatever the order of posting");
        free(in_big);
        pattern_fill(pong_out, sizeof pong_out, key((uint64_t)s, (uint64_t)d, 1234));
        comm_isend(&C, pong_out, sizeof pong_out, s - 1, 8, &pong_send);
    }
    if (s < C.P - 1) {
        comm_irecv(&C, pong_in, sizeof pong_in, s + 1, 8, &pong_recv);
        comm_wait(&C, &pong_recv);
        RCHECK(pattern_ok(pong_in, sizeof pong_in, key((uint64_t)(s + 1), (uint64_t)d, 1234)), "pipeline: pong from stage %d", s + 1);
        for (int k = 0; k < PP_N + 2; k++) comm_wait(&C, &sends[k]);
    }
    if (s > 0) comm_wait(&C, &pong_send);
    free(out_small);
    free(out_big);
}

// the MPI link (what cpu-staged's device messages travel by): stage s sends LK_N messages to s + 1
// through it, s + 1 posts all their receives ahead and collects them with comm_wait_any beside a
// plain MPI receive (an 8-byte note on its own tag): the mixed wait polls both kinds
enum { LK_N = 5, LK_BYTES = 65536 + 3 };
static void test_link(void) {
    if (C.P == 1) return;
    int s = C.stage, d = C.replica;
    CommLink link;
    comm_mpi_link(&C, &link);
    unsigned char* buf = (unsigned char*)malloc_check((size_t)LK_N * LK_BYTES); // (LK_N, LK_BYTES)
    CommRequest req[LK_N], note_req;
    memset(req, 0, sizeof req);
    memset(&note_req, 0, sizeof note_req);
    uint64_t note_out = key((uint64_t)s, (uint64_t)d, 777), note_in = 0;
    if (s < C.P - 1) {
        for (int k = 0; k < LK_N; k++) {
            pattern_fill(buf + (size_t)k * LK_BYTES, LK_BYTES, key((uint64_t)s, (uint64_t)d, 500 + (uint64_t)k));
            comm_link_isend(&C, &link, COMM_LINK_NEIGHBOURS, buf + (size_t)k * LK_BYTES, LK_BYTES, s + 1, &req[k]);
        }
        int all_link = 1;
        for (int k = 0; k < LK_N; k++) all_link &= req[k].link == &link;
        RCHECK(all_link, "link: its requests carry the link");
        comm_isend(&C, &note_out, sizeof note_out, s + 1, 12, &note_req);
        for (int k = 0; k < LK_N; k++) comm_wait(&C, &req[k]);
        comm_wait(&C, &note_req);
        int done = 1;
        for (int k = 0; k < LK_N; k++) done &= !req[k].active && req[k].link == NULL;
        RCHECK(done, "link: comm_wait completes every send, inactive and detached");
    }
    if (s > 0) {
        for (int k = 0; k < LK_N; k++) comm_link_irecv(&C, &link, COMM_LINK_NEIGHBOURS, buf + (size_t)k * LK_BYTES, LK_BYTES, s - 1, &req[k]);
        comm_irecv(&C, &note_in, sizeof note_in, s - 1, 12, &note_req);
        int seen[LK_N + 1] = {0}, twice = 0, got = 0;
        while (got < LK_N + 1) { // the link's receives, in order, and the note, both polled by comm_wait_any
            CommRequest* w[2] = {NULL, &note_req};
            int next = 0;
            while (next < LK_N && !req[next].active) next++;
            if (next < LK_N) w[0] = &req[next];
            int i = comm_wait_any(&C, w, 2);
            int which = i == 1 ? LK_N : next;
            twice |= seen[which]++;
            got++;
        }
        int intact = 1;
        for (int k = 0; k < LK_N; k++) intact &= pattern_ok(buf + (size_t)k * LK_BYTES, LK_BYTES, key((uint64_t)(s - 1), (uint64_t)d, 500 + (uint64_t)k));
        RCHECK(!twice && intact && note_in == key((uint64_t)(s - 1), (uint64_t)d, 777),
               "link: %d messages posted ahead and a plain MPI one, collected by comm_wait_any, each once and intact", LK_N);
    }
    // as over NCCL, the link's messages match in the order they were posted: the first receive
    // posted gets the first message sent
    uint64_t two[2] = {key((uint64_t)s, (uint64_t)d, 31), key((uint64_t)s, (uint64_t)d, 32)}, got[2] = {0, 0};
    if (s < C.P - 1) {
        comm_link_isend(&C, &link, COMM_LINK_NEIGHBOURS, &two[0], sizeof two[0], s + 1, &req[0]);
        comm_link_isend(&C, &link, COMM_LINK_NEIGHBOURS, &two[1], sizeof two[1], s + 1, &req[1]);
        comm_wait(&C, &req[0]);
        comm_wait(&C, &req[1]);
    }
    if (s > 0) {
        comm_link_irecv(&C, &link, COMM_LINK_NEIGHBOURS, &got[0], sizeof got[0], s - 1, &req[0]);
        comm_link_irecv(&C, &link, COMM_LINK_NEIGHBOURS, &got[1], sizeof got[1], s - 1, &req[1]);
        comm_wait(&C, &req[0]);
        comm_wait(&C, &req[1]);
        RCHECK(got[0] == key((uint64_t)(s - 1), (uint64_t)d, 31) && got[1] == key((uint64_t)(s - 1), (uint64_t)d, 32),
               "link: messages match in the order posted (as NCCL's)");
    }
    // channels keep messages apart: a tied-embedding message sent before a neighbour message arrives
    // in the receive posted on its own channel, though that one was posted second
    if (s == 0 && C.P > 1) {
        comm_link_isend(&C, &link, COMM_LINK_TIED, &two[0], sizeof two[0], C.P - 1, &req[0]);
        comm_link_isend(&C, &link, COMM_LINK_NEIGHBOURS, &two[1], sizeof two[1], 1, &req[1]);
        comm_wait(&C, &req[0]);
        comm_wait(&C, &req[1]);
    }
    if (s > 0) {
        int last = s == C.P - 1;
        got[0] = got[1] = 0;
        if (s == 1) comm_link_irecv(&C, &link, COMM_LINK_NEIGHBOURS, &got[1], sizeof got[1], 0, &req[1]);
        if (last) comm_link_irecv(&C, &link, COMM_LINK_TIED, &got[0], sizeof got[0], 0, &req[0]);
        comm_wait(&C, &req[0]);
        comm_wait(&C, &req[1]);
        uint64_t t0 = key(0, (uint64_t)d, 31), n1 = key(0, (uint64_t)d, 32);
        RCHECK((!last || got[0] == t0) && (s != 1 || got[1] == n1), "link: the tied channel and the neighbours' keep their messages apart");
    }
    free(buf);
}

// element i has one nonzero contributor (stage i % (P + 1); none when that is P): the sum is that value, bitwise
static void test_pipe_sum(void) {
    enum { N = 1001 };
    double in[N], out[N], want[N], inplace[N];
    for (int i = 0; i < N; i++) {
        int owner = i % (C.P + 1);
        want[i] = owner < C.P ? pipe_value((uint64_t)i, C.replica) : 0.0;
        in[i] = inplace[i] = owner == C.stage ? want[i] : 0.0;
        out[i] = NAN;
    }
    CommRequest r, r2;
    comm_pipe_sum_start(&C, in, out, N, &r);
    comm_pipe_sum_start(&C, inplace, inplace, N, &r2);
    comm_wait(&C, &r);
    comm_wait(&C, &r2);
    RCHECK(memcmp(out, want, sizeof out) == 0, "pipe_sum: equals the one contributor bitwise (P = %d)", C.P);
    RCHECK(memcmp(inplace, want, sizeof inplace) == 0, "pipe_sum: in place (in == out) too");
}

// each replica's data comes from its own seed, so every rank can regenerate all D inputs and the
// expected replica-ordered average; the comparison is bitwise
static void test_dp_average(size_t n) {
    int D = C.D;
    float* buf = (float*)malloc_check(n * sizeof(float)); // (n)
    Rng mine;
    rng_init(&mine, key((uint64_t)C.stage, (uint64_t)C.replica, n));
    for (size_t i = 0; i < n; i++) buf[i] = dp_value(&mine);
    comm_dp_average(&C, buf, n);

    Rng* rs = (Rng*)malloc_check((size_t)D * sizeof(Rng));
    float* x = (float*)malloc_check((size_t)D * sizeof(float));
    for (int q = 0; q < D; q++) rng_init(&rs[q], key((uint64_t)C.stage, (uint64_t)q, n));
    size_t wrong = 0, order_matters = 0;
    for (size_t i = 0; i < n; i++) {
        for (int q = 0; q < D; q++) x[q] = dp_value(&rs[q]);
        float acc = x[0];
        for (int q = 1; q < D; q++) acc += x[q];
        acc /= (float)D;
        float rev = x[D - 1];
        for (int q = D - 2; q >= 0; q--) rev += x[q];
        rev /= (float)D;
        uint32_t a, b, c;
        memcpy(&a, &buf[i], 4);
        memcpy(&b, &acc, 4);
        memcpy(&c, &rev, 4);
        wrong += a != b;
        order_matters += b != c;
    }
    RCHECK(wrong == 0, "dp_average n = %zu, D = %d: bitwise the replica-ordered average (%zu elements differ)", n, D, wrong);
    if (D >= 3 && n >= 1000)
        RCHECK(order_matters > 0, "dp_average n = %zu: the reverse order gives different bits in %zu elements, so the check above sees the order",
               n, order_matters);

    // the same bits on every replica of a stage, seen from rank 0
    uint64_t h[2] = {(uint64_t)C.stage, fnv1a(buf, n * sizeof(float))};
    uint64_t* all = (uint64_t*)malloc_check((size_t)C.world_size * sizeof(h));
    comm_gather_to_root(&C, h, sizeof(h), all);
    if (C.world_rank == 0) {
        int differ = 0;
        for (int w = 0; w < C.world_size; w++)
            for (int v = 0; v < C.world_size; v++) differ += all[2 * w] == all[2 * v] && all[2 * w + 1] != all[2 * v + 1];
        RCHECK(differ == 0, "dp_average n = %zu: the replicas of each stage hold identical results (hashes gathered to rank 0)", n);
    }
    free(all);
    free(x);
    free(rs);
    free(buf);
}

static void test_dp_average_double(void) {
    enum { N = 7 };
    double buf[N], want[N];
    for (int i = 0; i < N; i++) {
        buf[i] = pipe_value((uint64_t)(i + 100 * C.stage), C.replica);
        want[i] = pipe_value((uint64_t)(i + 100 * C.stage), 0);
        for (int q = 1; q < C.D; q++) want[i] += pipe_value((uint64_t)(i + 100 * C.stage), q);
        want[i] /= (double)C.D;
    }
    comm_dp_average_double(&C, buf, N);
    RCHECK(memcmp(buf, want, sizeof buf) == 0, "dp_average_double: bitwise the replica-ordered average (D = %d)", C.D);
}

static void test_gather(void) {
    enum { B = 24 };
    unsigned char in[B];
    pattern_fill(in, B, key((uint64_t)C.world_rank, 0, 77));
    unsigned char* all = C.world_rank == 0 ? (unsigned char*)malloc_check((size_t)C.world_size * B) : NULL;
    comm_gather_to_root(&C, in, B, all);
    if (C.world_rank == 0) {
        int ok = 1;
        for (int w = 0; w < C.world_size; w++) ok &= pattern_ok(all + (size_t)w * B, B, key((uint64_t)w, 0, 77));
        RCHECK(ok, "gather: rank 0 holds every rank's %d bytes in rank order", B);
    }
    free(all);

    size_t bytes = (size_t)(C.world_rank * 37 % 101) + (C.world_rank == 0 ? 0 : 5); // rank 0 sends nothing
    unsigned char* vin = (unsigned char*)malloc_check(bytes);
    pattern_fill(vin, bytes, key((uint64_t)C.world_rank, 1, 78));
    size_t* counts = (size_t*)calloc_check((size_t)C.world_size, sizeof(size_t));
    unsigned char* got = (unsigned char*)comm_gatherv_to_root(&C, vin, bytes, counts);
    if (C.world_rank == 0) {
        int ok = got != NULL;
        size_t off = 0;
        for (int w = 0; w < C.world_size && ok; w++) {
            size_t want = (size_t)(w * 37 % 101) + (w == 0 ? 0 : 5);
            ok &= counts[w] == want && pattern_ok(got + off, want, key((uint64_t)w, 1, 78));
            off += want;
        }
        RCHECK(ok, "gatherv: counts and the concatenation in rank order (%zu bytes)", off);
    } else {
        RCHECK(got == NULL, "gatherv: only rank 0 receives");
    }
    free(got);
    free(counts);
    free(vin);
    comm_barrier(&C);
}

// comm_world_send / comm_world_recv: every other rank sends rank 0 transfers of several sizes in
// messages of at most 1000 bytes (the split a > 1 GiB tensor gets, at a size a test can hold); rank 0
// receives them rank by rank, in the order sent
static void test_world_transfer(void) {
    const size_t sizes[] = {0, 1, 999, 1000, 1001, 4321};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    size_t saved = C.chunk_bytes;
    C.chunk_bytes = 1000;
    unsigned char* buf = (unsigned char*)malloc_check(4321);
    if (C.world_rank != 0) {
        for (int i = 0; i < n; i++) {
            pattern_fill(buf, sizes[i], key((uint64_t)C.world_rank, (uint64_t)i, 79));
            comm_world_send(&C, buf, sizes[i], 0, 9);
        }
    } else {
        int ok = 1;
        for (int w = 1; w < C.world_size; w++)
            for (int i = 0; i < n; i++) {
                memset(buf, 0, 4321);
                comm_world_recv(&C, buf, sizes[i], w, 9);
                ok &= pattern_ok(buf, sizes[i], key((uint64_t)w, (uint64_t)i, 79));
            }
        RCHECK(ok, "world transfers: %d sizes (0 to 4321 bytes, split into messages of 1000) from each of %d other ranks, in order", n,
               C.world_size - 1);
    }
    free(buf);
    C.chunk_bytes = saved;
    comm_barrier(&C);
}

// ways a job must end (non-zero, with a message naming the rank and the cause) instead of hanging
static void fatal_mode(const char* kind) {
    unsigned char buf[100] = {0};
    if (strcmp(kind, "gather-size") == 0) { // the last rank refuses, the others wait in the gather
        int last = C.world_rank == C.world_size - 1;
        unsigned char* all = (unsigned char*)malloc_check((size_t)C.world_size * 8);
        comm_gather_to_root(&C, buf, last ? (size_t)INT_MAX + 1 : 8, all);
        free(all);
    } else if (strcmp(kind, "world-size") == 0 && C.world_size >= 2) { // 1500 bytes sent, 1700 expected: the second message differs
        C.chunk_bytes = 1000;
        unsigned char big[1700] = {0};
        if (C.world_rank == 1) comm_world_send(&C, big, 1500, 0, 9);
        if (C.world_rank == 0) comm_world_recv(&C, big, 1700, 1, 9);
    } else if ((strcmp(kind, "truncate") == 0 || strcmp(kind, "short") == 0) && C.P >= 2) {
        size_t sent = strcmp(kind, "truncate") == 0 ? 100 : 50, expected = 150 - sent;
        if (C.stage == 0) {
            CommRequest r;
            comm_isend(&C, buf, sent, 1, 3, &r);
            comm_wait(&C, &r);
        } else if (C.stage == 1) {
            CommRequest r;
            comm_irecv(&C, buf, expected, 0, 3, &r);
            comm_wait(&C, &r);
        }
    } else if (strcmp(kind, "slow-root") == 0 || strcmp(kind, "slow-root-allowed") == 0 || strcmp(kind, "slow-root-short") == 0) {
        // rank 0 busy for 6 s (as writing a checkpoint) while the others wait in a collective under a
        // 1 s --comm-timeout: they time out, unless comm_timeout_allow gave that work its seconds (and
        // with too few, after them, saying so). 6 s, not 3: a waiter does not count a pause of over 1 s
        // between its clock reads (comm.c's WaitClock), and a loaded machine can make such pauses
        C.timeout = 1.0;
        if (strcmp(kind, "slow-root-allowed") == 0) comm_timeout_allow(&C, 30.0, "rank 0's test work");
        if (strcmp(kind, "slow-root-short") == 0) comm_timeout_allow(&C, 0.5, "rank 0's test work");
        if (C.world_rank == 0) nanosleep(&(struct timespec){6, 0}, NULL);
        comm_any(&C, 0);
        comm_timeout_allow(&C, 0, NULL);
    } else if (strcmp(kind, "stopped-waiter") == 0 && C.world_size == 2) {
        // rank 1 waits in a collective under a 2 s --comm-timeout; rank 0 stops it (SIGSTOP) for 4 s,
        // continues it and joins: the time it was stopped is not waiting (comm.c's WaitClock)
        C.timeout = 2.0;
        int64_t pid = (int64_t)getpid(), pids[2] = {0, 0};
        comm_gather_to_root(&C, &pid, sizeof pid, pids);
        if (C.world_rank == 0) {
            nanosleep(&(struct timespec){0, 200000000}, NULL);
            kill((pid_t)pids[1], SIGSTOP);
            nanosleep(&(struct timespec){4, 0}, NULL);
            kill((pid_t)pids[1], SIGCONT);
        }
        comm_any(&C, 0);
    } else {
        td_fatal("--fatal %s: unknown kind, or it needs P >= 2", kind);
    }
    comm_barrier(&C);
    printf("--fatal %s: the job went on\n", kind);
}

int main(int argc, char** argv) {
    comm_init(&C, &argc, &argv);
    int P = argc > 1 ? atoi(argv[1]) : 1;
    char err[256];
    // argv[2] --replicas: the grid laid out replicas first (a stage's replicas on consecutive launch ranks)
    Placement pl = argc > 2 && strcmp(argv[2], "--replicas") == 0 ? PLACE_REPLICAS_FIRST : PLACE_STAGES_FIRST;
    if (comm_grid(&C, P, pl, err, sizeof err) != 0) {
        fprintf(stderr, "[rank %d] %s\n", C.world_rank, err);
        comm_finalize(&C);
        return 1;
    }
    if (argc > 3 && strcmp(argv[2], "--fatal") == 0) {
        fatal_mode(argv[3]);
        comm_finalize(&C);
        return 0;
    }
    if (C.world_rank == 0) {
#ifdef TD_MPI
        printf("test_comm: built with MPI; %d rank%s, P = %d, D = %d\n", C.world_size, C.world_size == 1 ? "" : "s", C.P, C.D);
#else
        printf("test_comm: built without MPI; one process\n");
#endif
    }
    test_grid(P);
    test_any();
    test_pingpong();
    test_link();
    test_pipe_sum();
    size_t sizes[] = {0, 1, (size_t)(C.D - 1), 1000003, 17000003}; // the last is two rounds of the 16M-float pieces
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) test_dp_average(sizes[i]);
    test_dp_average_double();
    test_gather();
    test_world_transfer();

    // the tally of all ranks on rank 0; every rank exits non-zero when any rank failed
    int mine[2] = {test_passed_, test_failed_};
    int* all = (int*)malloc_check((size_t)C.world_size * sizeof(mine));
    comm_gather_to_root(&C, mine, sizeof(mine), all);
    int any_failed = comm_any(&C, test_failed_ > 0);
    int rc = any_failed ? 1 : 0;
    if (C.world_rank == 0) {
        test_passed_ = test_failed_ = 0;
        for (int w = 0; w < C.world_size; w++) {
            test_passed_ += all[2 * w];
            test_failed_ += all[2 * w + 1];
        }
        test_summary();
    }
    free(all);
    comm_finalize(&C);
    return rc;
}
