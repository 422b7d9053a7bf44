// Check of tdpipe/comm_nccl.cuh on ONE GPU (NCCL refuses two ranks on one device): one-rank
// communicators from comm_nccl_init, a self send/receive round trip checked byte for byte, the
// replica-ordered average kernel against the CPU's COMM_ORDERED_AVERAGE (comm.h; bitwise, subnormals included,
// D = 1..4, odd lengths, directly and through the data-parallel chunk plan), and comm_nccl_dp_average
// with D = 1 leaving data unchanged. Prints one line per check, then "nccl_check: N passed, M failed";
// the exit code is the number of failures (capped at 1). Usage: build/dev/cuda/nccl_check (no mpirun,
// or mpirun -np 1 to take the MPI path of comm_nccl_init).
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

// the self round trip: `bytes` from one device buffer to another through the pipeline communicator
// (stage 0 to itself, inside one group), produced on another stream, polled with comm_nccl_done
static void check_round_trip(CommNccl* cn, size_t bytes) {
    unsigned char* h_src = (unsigned char*)malloc_check(bytes); // (bytes)
    unsigned char* h_dst = (unsigned char*)malloc_check(bytes); // (bytes)
    uint64_t s = 12345;
    for (size_t i = 0; i < bytes; i++) h_src[i] = (unsigned char)(splitmix(&s) >> 56);
    unsigned char *d_src, *d_dst; // (bytes) each, device
    cudaCheck(cudaMalloc(&d_src, bytes));
    cudaCheck(cudaMalloc(&d_dst, bytes));
    cudaStream_t producer;
    cudaCheck(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
    cudaCheck(cudaMemcpyAsync(d_src, h_src, bytes, cudaMemcpyHostToDevice, producer));
    cudaCheck(cudaMemsetAsync(d_dst, 0xA5, bytes, producer));
    comm_nccl_wait_for(cn, producer);
    comm_nccl_group_start();
    comm_nccl_send(cn, d_src, bytes, 0);
    comm_nccl_recv(cn, d_dst, bytes, 0);
    comm_nccl_group_end();
    cudaEvent_t ev;
    cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    comm_nccl_record(cn, ev);
    long polls = 0;
    double t0 = now_seconds();
    while (!comm_nccl_done(cn, ev)) {
        polls++;
        if (now_seconds() - t0 > 30.0) td_fatal("the self send/receive did not complete in 30 s (%ld polls)", polls);
    }
    cudaCheck(cudaMemcpy(h_dst, d_dst, bytes, cudaMemcpyDeviceToHost));
    size_t bad = bytes;
    for (size_t i = 0; i < bytes; i++)
        if (h_dst[i] != h_src[i]) {
            bad = i;
            break;
        }
    char detail[160];
    if (bad == bytes)
        snprintf(detail, sizeof detail, "(%zu bytes equal; %ld polls before completion)", bytes, polls);
    else
        snprintf(detail, sizeof detail, "(byte %zu: got 0x%02x, sent 0x%02x)", bad, h_dst[bad], h_src[bad]);
    report("self send/recv round trip", bad == bytes, detail);
    cudaCheck(cudaEventDestroy(ev));
    cudaCheck(cudaStreamDestroy(producer));
    cudaCheck(cudaFree(d_src));
    cudaCheck(cudaFree(d_dst));
    free(h_src);
    free(h_dst);
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

// comm_nccl_dp_average with D = 1: the data stays exactly as it was
static void check_dp_average_single(CommNccl* cn, size_t n) {
    float* h = (float*)malloc_check(n * sizeof(float));    // (n) the values
    float* back = (float*)malloc_check(n * sizeof(float)); // (n) after the average
    fill_values(h, n, 99);
    float *d, *d_scratch; // (n) and (comm_nccl_dp_scratch_floats(1, n)), device
    cudaCheck(cudaMalloc(&d, n * sizeof(float)));
    cudaCheck(cudaMalloc(&d_scratch, comm_nccl_dp_scratch_floats(cn->D, n) * sizeof(float)));
    cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    comm_nccl_dp_average(cn, d, n, d_scratch);
    comm_nccl_sync(cn);
    cudaCheck(cudaMemcpy(back, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    char name[96];
    snprintf(name, sizeof name, "dp average D=%d n=%zu unchanged", cn->D, n);
    report_bitwise(name, back, h, n);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(d_scratch));
    free(h);
    free(back);
}

int main(int argc, char** argv) {
    Comm c;
    comm_init(&c, &argc, &argv);
    char err[256];
    if (comm_grid(&c, 1, err, sizeof err) != 0) td_fatal("%s", err);
    if (c.world_size != 1) td_fatal("nccl_check runs as one process on one GPU (launched with %d ranks)", c.world_size);
    int ver = 0;
    ncclCheck(ncclGetVersion(&ver));
    CommNccl cn;
    comm_nccl_init(&cn, &c, 0, COMM_NCCL_PIPE | COMM_NCCL_DP);
    cuda_device_init(0);
    printf("nccl_check: NCCL %d (header %d), device %s, %s\n", ver, NCCL_VERSION_CODE, g_device_prop.name,
           c.mpi ? "MPI path (one rank)" : "no MPI");
    report("comm_nccl_init one-rank communicators", cn.P == 1 && cn.D == 1 && cn.pipe && cn.dp && cn.stream, "");

    check_round_trip(&cn, ((size_t)3 << 20) + 5);

    cudaStream_t st;
    cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t lens[] = {1, 3, 1001, 65537, 1000003};
    for (int D = 1; D <= 4; D++)
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) check_ordered_average(D, lens[k], st);
    cudaCheck(cudaStreamDestroy(st));

    check_dp_average_single(&cn, 100003);

    comm_nccl_free(&cn);
    report("comm_nccl_free", cn.pipe == NULL && cn.dp == NULL && cn.stream == NULL, "");
    printf("nccl_check: %d passed, %d failed\n", g_passed, g_failed);
    comm_finalize(&c);
    return g_failed ? 1 : 0;
}
