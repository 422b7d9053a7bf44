// Check of tdpipe/comm_nccl.cuh. One process: the replica-ordered average kernel against the CPU's
// COMM_ORDERED_AVERAGE (comm.h; bitwise, subnormals included, D = 1..4, odd lengths, directly and through
// the data-parallel chunk plan), the tied shares' sum against the CPU's, and comm_nccl_dp_average with
// D = 1 leaving data unchanged. Two ranks,
// --stages 1: comm_nccl_dp_average over D = 2 against the CPU, bitwise. Two ranks, --stages 2: the
// pipeline link (activations one way, gradients back, receives posted ahead; the tied channel both
// ways at once), byte for byte. Two ranks
// may share one GPU when each has its own NCCL_HOSTID (NCCL then connects them over its socket transport).
// Prints one line per check, then "nccl_check: rank R: N passed, M failed"; exit code 1 on any failure.
// Usage: build/dev/cuda/nccl_check, or mpirun -np 2 [env NCCL_HOSTID=...] build/dev/cuda/nccl_check --stages 1|2
#include "dev/dev_cli.h"
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#include "tdpipe/comm_nccl.cuh"

static int g_passed = 0, g_failed = 0;

static void report(const char* name, int ok, const char* detail) {
    printf("nccl_check: %-48s %s%s%s\n", name, ok ? "OK" : "NOT OK", detail && *detail ? "  " : "", detail ? detail : "");
    fflush(stdout);
    if (ok)
        g_passed++;
    else
        g_failed++;
}

static uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static float uniform(uint64_t* s) { return (float)(splitmix(s) >> 40) / 16777216.0f; } // [0, 1)

// x (n): gradient-like values with the cases an inexact sum would get wrong: magnitudes over many
// binades (rounding differs with the order), subnormals and values whose average is subnormal (lost
// under flush-to-zero), signed zeros, and a few large values
static void fill_values(float* x, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        float sign = (splitmix(&s) & 1) ? -1.0f : 1.0f;
        switch (splitmix(&s) % 8) {
        case 0: x[i] = sign * uniform(&s) * FLT_MIN; break;                    // subnormal
        case 1: x[i] = sign * (1.0f + uniform(&s)) * FLT_MIN; break;           // just normal: /D gives subnormals
        case 2: x[i] = sign * 0.0f; break;                                     // +0 or -0
        case 3: x[i] = sign * ldexpf(1.0f + uniform(&s), 60 + (int)(splitmix(&s) % 40)); break; // large
        default: x[i] = sign * ldexpf(1.0f + uniform(&s), -(int)(splitmix(&s) % 40)); break;   // ordinary
        }
    }
}

static size_t count_subnormal(const float* x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f && fabsf(x[i]) < FLT_MIN) k++;
    return k;
}

// index of the first bitwise difference, or -1
static long first_diff(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return (long)i;
    return -1;
}

static void report_bitwise(const char* name, const float* gpu, const float* cpu, size_t n) {
    long d = first_diff(gpu, cpu, n);
    char detail[200];
    if (d < 0)
        snprintf(detail, sizeof detail, "(%zu floats bitwise equal, %zu subnormal)", n, count_subnormal(cpu, n));
    else
        snprintf(detail, sizeof detail, "(element %ld: GPU %a, CPU %a)", d, gpu[d], cpu[d]);
    report(name, d < 0, detail);
}

// (bytes) the bytes of pattern `seed`, malloc'ed
static unsigned char* pattern(size_t bytes, uint64_t seed) {
    unsigned char* h = (unsigned char*)malloc_check(bytes); // (bytes)
    uint64_t s = seed;
    for (size_t i = 0; i < bytes; i++) h[i] = (unsigned char)(splitmix(&s) >> 56);
    return h;
}

// index of the first differing byte, or -1
static long first_byte_diff(const unsigned char* a, const unsigned char* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

// The pipeline link between stage 0 and stage 1 (P = 2): K activation messages 0 -> 1 and K gradient
// messages 1 -> 0 of different sizes. Every receive is posted before any message of its direction is
// sent (more than the executor ever has in flight: it runs only because comm_nccl_link_init connected
// both communicators), every send's buffer is written on the compute stream just before it is handed
// to the link (no host wait between), stage 1 answers message k only after receiving it; all polled
// through comm.h.
static void check_link(Comm* c, int device) {
    enum { K = 6 };
    CommNcclLink l;
    if (!comm_nccl_link_possible(c, device)) {
        report("pipeline link: NCCL can connect the two stages", 0, "(one GPU: give each rank its own NCCL_HOSTID)");
        return;
    }
    comm_nccl_link_init(&l, c, device, g_cuda_stream);
    int ends = l.comm[NCCL_TIED_IN] && l.comm[NCCL_TIED_OUT]; // P = 2: both stages are the tied channel's ends
    report("pipeline link: two-rank communicators per direction", ends && (c->stage == 0 ? l.comm[NCCL_ACT_OUT] && l.comm[NCCL_GRAD_IN] && !l.comm[NCCL_ACT_IN]
                                                                                        : l.comm[NCCL_ACT_IN] && l.comm[NCCL_GRAD_OUT] && !l.comm[NCCL_ACT_OUT]), "");
    size_t bytes[K];
    unsigned char *d_out[K], *d_in[K]; // (bytes[k]) device: what this stage sends, what it receives
    CommRequest sreq[K], rreq[K];
    memset(sreq, 0, sizeof sreq);
    memset(rreq, 0, sizeof rreq);
    for (int k = 0; k < K; k++) {
        bytes[k] = ((size_t)1 << (10 + 3 * k)) + 4099 * (size_t)k; // 1 KiB .. 32 MiB, odd sizes
        cudaCheck(cudaMalloc(&d_out[k], bytes[k]));
        cudaCheck(cudaMalloc(&d_in[k], bytes[k]));
        cudaCheck(cudaMemset(d_in[k], 0xA5, bytes[k]));
    }
    cudaCheck(cudaDeviceSynchronize());
    int me = c->stage, peer = 1 - me;
    uint64_t mine = me == 0 ? 100 : 200, theirs = me == 0 ? 200 : 100; // activations 100 + k, gradients 200 + k
    for (int k = 0; k < K; k++) comm_link_irecv(c, &l.link, COMM_LINK_NEIGHBOURS, d_in[k], bytes[k], peer, &rreq[k]);
    double t0 = now_seconds();
    for (int k = 0; k < K; k++) {
        if (me == 1) comm_wait(c, &rreq[k]); // a gradient answers its activation
        unsigned char* h = pattern(bytes[k], mine + k);
        cudaCheck(cudaMemcpyAsync(d_out[k], h, bytes[k], cudaMemcpyHostToDevice, g_cuda_stream));
        comm_link_isend(c, &l.link, COMM_LINK_NEIGHBOURS, d_out[k], bytes[k], peer, &sreq[k]);
        cudaCheck(cudaStreamSynchronize(g_cuda_stream)); // h may go once the copy has run
        free(h);
    }
    for (int k = 0; k < K; k++) {
        comm_wait(c, &rreq[k]);
        comm_wait(c, &sreq[k]);
    }
    double secs = now_seconds() - t0;
    long bad = -1;
    int bad_k = -1;
    size_t total = 0;
    for (int k = 0; k < K && bad < 0; k++) {
        unsigned char* want = pattern(bytes[k], theirs + k);
        unsigned char* got = (unsigned char*)malloc_check(bytes[k]);
        cudaCheck(cudaMemcpy(got, d_in[k], bytes[k], cudaMemcpyDeviceToHost));
        bad = first_byte_diff(got, want, bytes[k]);
        if (bad >= 0) bad_k = k;
        total += bytes[k];
        free(want);
        free(got);
    }
    char detail[160];
    if (bad < 0) snprintf(detail, sizeof detail, "(%d messages, %zu bytes received equal, %.3f s)", K, total, secs);
    else snprintf(detail, sizeof detail, "(message %d differs at byte %ld)", bad_k, bad);
    report(me == 0 ? "pipeline link: stage 0 sent activations, got gradients" : "pipeline link: stage 1 got activations, sent gradients",
           bad < 0, detail);

    // the tied channel (P = 2: both stages are its ends): both post the receive, then send, at once
    size_t tb = ((size_t)1 << 22) + 12; // 4 MiB and 3 floats
    unsigned char* want = pattern(tb, 300 + (uint64_t)peer);
    unsigned char* h_tied = pattern(tb, 300 + (uint64_t)me);
    cudaCheck(cudaMemcpy(d_out[K - 1], h_tied, tb, cudaMemcpyHostToDevice));
    comm_link_irecv(c, &l.link, COMM_LINK_TIED, d_in[K - 1], tb, peer, &rreq[0]);
    comm_link_isend(c, &l.link, COMM_LINK_TIED, d_out[K - 1], tb, peer, &sreq[0]);
    comm_wait(c, &rreq[0]);
    comm_wait(c, &sreq[0]);
    cudaCheck(cudaMemcpy(h_tied, d_in[K - 1], tb, cudaMemcpyDeviceToHost));
    long tbad = first_byte_diff(h_tied, want, tb);
    if (tbad < 0) snprintf(detail, sizeof detail, "(%zu bytes each way)", tb);
    else snprintf(detail, sizeof detail, "(differs at byte %ld)", tbad);
    report("pipeline link: the tied channel, both ways at once", tbad < 0, detail);
    free(want);
    free(h_tied);
    for (int k = 0; k < K; k++) {
        cudaCheck(cudaFree(d_out[k]));
        cudaCheck(cudaFree(d_in[k]));
    }
    comm_nccl_link_free(&l);
}

// the ordered-average kernel on D simulated replica buffers of `len` floats: (a) in one launch over
// rows `stride` apart (the padding between rows is NaN, so a read past a row shows), (b) through the
// chunk plan of comm_nccl_dp_average: each replica's chunk gathered into scratch rows, averaged, placed
static void check_ordered_average(int D, size_t len, cudaStream_t st) {
    size_t stride = len + 7;
    float* h_in = (float*)malloc_check((size_t)D * stride * sizeof(float)); // (D, stride) the replicas' values
    float* h_ref = (float*)malloc_check(len * sizeof(float));               // (len) CPU average
    float* h_out = (float*)malloc_check(len * sizeof(float));               // (len) GPU average
    for (int q = 0; q < D; q++) {
        fill_values(h_in + (size_t)q * stride, len, 1000 * (uint64_t)D + (uint64_t)q + 7 * len);
        for (size_t i = len; i < stride; i++) h_in[(size_t)q * stride + i] = NAN;
    }
    COMM_ORDERED_AVERAGE(float, h_ref, h_in, stride, len, D);
    float *d_in, *d_out; // (D, stride) and (len), device
    cudaCheck(cudaMalloc(&d_in, (size_t)D * stride * sizeof(float)));
    cudaCheck(cudaMalloc(&d_out, len * sizeof(float)));
    cudaCheck(cudaMemcpy(d_in, h_in, (size_t)D * stride * sizeof(float), cudaMemcpyHostToDevice));
    char name[96];

    // (a) one launch
    cudaCheck(cudaMemset(d_out, 0xFF, len * sizeof(float)));
    comm_nccl_ordered_average(d_out, d_in, stride, len, D, st);
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaMemcpy(h_out, d_out, len * sizeof(float), cudaMemcpyDeviceToHost));
    snprintf(name, sizeof name, "ordered average D=%d len=%zu", D, len);
    report_bitwise(name, h_out, h_ref, len);

    // (b) the chunk plan: replica r averages chunk r from the D copies in a (D, chunk) scratch
    cudaCheck(cudaMemset(d_out, 0xFF, len * sizeof(float)));
    float* d_scratch; // (D, largest chunk), device
    size_t scratch_n = comm_nccl_dp_scratch_floats(D, len);
    cudaCheck(cudaMalloc(&d_scratch, (scratch_n ? scratch_n : 1) * sizeof(float)));
    size_t covered = 0;
    for (int r = 0; r < D; r++) {
        size_t sz, so;
        comm_dp_chunk(len, D, r, &sz, &so);
        if (so != covered) td_fatal("chunk plan: chunk %d of %zu over D=%d starts at %zu, expected %zu", r, len, D, so, covered);
        covered += sz;
        if (sz == 0) continue;
        if ((size_t)D * sz > scratch_n) td_fatal("chunk plan: chunk %d (%zu floats) exceeds the scratch of %zu", r, sz, scratch_n);
        for (int q = 0; q < D; q++)
            cudaCheck(cudaMemcpyAsync(d_scratch + (size_t)q * sz, d_in + (size_t)q * stride + so, sz * sizeof(float),
                                      cudaMemcpyDeviceToDevice, st));
        comm_nccl_ordered_average(d_out + so, d_scratch, sz, sz, D, st);
    }
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaMemcpy(h_out, d_out, len * sizeof(float), cudaMemcpyDeviceToHost));
    snprintf(name, sizeof name, "chunked average D=%d len=%zu", D, len);
    if (covered != len) {
        report(name, 0, "(the chunks do not cover the buffer)");
    } else {
        report_bitwise(name, h_out, h_ref, len);
    }
    cudaCheck(cudaFree(d_scratch));
    cudaCheck(cudaFree(d_in));
    cudaCheck(cudaFree(d_out));
    free(h_in);
    free(h_ref);
    free(h_out);
}

// comm_nccl_sum (the tied embedding's two shares) against the CPU's a + b, bitwise: subnormal sums
// included, which a flush-to-zero add would lose
static void check_sum(size_t n, cudaStream_t st) {
    float* h = (float*)malloc_check(3 * n * sizeof(float)); // (3, n) a, b, the GPU's sum
    fill_values(h, n, 11);
    fill_values(h + n, n, 12);
    float* ref = (float*)malloc_check(n * sizeof(float)); // (n)
    for (size_t i = 0; i < n; i++) ref[i] = h[i] + h[n + i];
    float* d; // (3, n) device
    cudaCheck(cudaMalloc(&d, 3 * n * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h, 2 * n * sizeof(float), cudaMemcpyHostToDevice));
    comm_nccl_sum(d + 2 * n, d, d + n, n, st);
    cudaCheck(cudaStreamSynchronize(st));
    cudaCheck(cudaMemcpy(h + 2 * n, d + 2 * n, n * sizeof(float), cudaMemcpyDeviceToHost));
    char name[64];
    snprintf(name, sizeof name, "tied sum n=%zu", n);
    report_bitwise(name, h + 2 * n, ref, n);
    cudaCheck(cudaFree(d));
    free(h);
    free(ref);
}

// comm_nccl_dp_average over this rank's D replicas (D = 1: the data must not change) against the CPU's
// COMM_ORDERED_AVERAGE of every replica's values (gathered over MPI), bitwise
static void check_dp_average(Comm* c, CommNccl* cn, size_t n) {
    int D = cn->D;
    float* all = (float*)malloc_check((size_t)D * n * sizeof(float)); // (D, n) every replica's values
    for (int q = 0; q < D; q++) fill_values(all + (size_t)q * n, n, 99 + 1000 * (uint64_t)q);
    float* ref = (float*)malloc_check(n * sizeof(float));  // (n) the CPU's average
    float* back = (float*)malloc_check(n * sizeof(float)); // (n) after the GPU's average
    COMM_ORDERED_AVERAGE(float, ref, all, n, n, D);
    float *d, *d_scratch; // (n) and (comm_nccl_dp_scratch_floats(D, n)), device
    cudaCheck(cudaMalloc(&d, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_scratch, comm_nccl_dp_scratch_floats(D, n) * sizeof(float)));
    cudaCheck(cudaMemcpy(d, all + (size_t)c->replica * n, n * sizeof(float), cudaMemcpyHostToDevice));
    comm_nccl_dp_average(cn, d, n, d_scratch);
    comm_nccl_sync(cn);
    cudaCheck(cudaMemcpy(back, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    char name[96];
    snprintf(name, sizeof name, "dp average D=%d n=%zu (replica %d)", D, n, c->replica);
    report_bitwise(name, back, ref, n);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(d_scratch));
    free(all);
    free(ref);
    free(back);
}

int main(int argc, char** argv) {
    const DevCli cli = {"nccl_check", "usage: build/dev/cuda/nccl_check                         (one rank: the kernels against the CPU)\n"
                                      "       mpirun -np 2 build/dev/cuda/nccl_check --stages 1|2 (1: the data-parallel average, 2: the pipeline link)\n"};
    dev_cli_help(&cli, argc, argv); // the arguments are read before MPI, NCCL or the GPU are touched
    int P = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--stages")) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[i]);
        P = (int)dev_cli_long(&cli, "--stages", dev_cli_value(&cli, argc, argv, i++), 1, 2);
    }
    setenv("CUDA_MODULE_LOADING", "EAGER", 0); // as train_tdpipe: no context synchronisation at a first launch
    Comm c;
    comm_init(&c, &argc, &argv);
    char err[256];
    if (comm_grid(&c, P, PLACE_STAGES_FIRST, err, sizeof err) != 0) td_fatal("%s", err);
    int ver = 0;
    ncclCheck(ncclGetVersion(&ver));
    int n_dev = 1;
    cudaCheck(cudaGetDeviceCount(&n_dev));
    int device = c.local_rank % n_dev;
    cuda_device_init(device);
    printf("nccl_check: rank %d of %d (stage %d of %d, replica %d of %d): NCCL %d (header %d), device %d %s%s%s\n", c.world_rank,
           c.world_size, c.stage, c.P, c.replica, c.D, ver, NCCL_VERSION_CODE, device, g_device_prop.name,
           getenv("NCCL_HOSTID") ? ", NCCL_HOSTID " : "", getenv("NCCL_HOSTID") ? getenv("NCCL_HOSTID") : "");

    if (c.P == 2) {
        check_link(&c, device);
    } else {
        if (c.world_size == 1) { // the kernel alone, against the CPU
            cudaStream_t st;
            cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
            const size_t lens[] = {1, 3, 1001, 65537, 1000003};
            for (int D = 1; D <= 4; D++)
                for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) check_ordered_average(D, lens[k], st);
            check_sum(1000003, st);
            cudaCheck(cudaStreamDestroy(st));
        }
        CommNccl cn;
        comm_nccl_init(&cn, &c, device);
        report("comm_nccl_init data-parallel communicator", cn.D == c.D && cn.dp && cn.stream, "");
        check_dp_average(&c, &cn, 100003);
        check_dp_average(&c, &cn, COMM_DP_PIECE + 3); // two rounds of the chunk plan
        comm_nccl_free(&cn);
    }
    printf("nccl_check: rank %d: %d passed, %d failed\n", c.world_rank, g_passed, g_failed);
    comm_finalize(&c);
    return g_failed ? 1 : 0;
}
