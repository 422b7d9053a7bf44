// Check of tdpipe/dp_sync_cuda.cuh: the bucketed two-shot gradient average in GPU memory over NCCL
// against tdpipe/dp_sync.c's in host memory over MPI, bitwise, on D ranks (on odd steps with the
// buckets sent unit by unit, as inside a backward; on even ones all at the end): every replica's averaged
// gradient (its LM head share too) over several steps, the error-feedback residuals after them, the
// byte count, the entropy on the steps it is measured and the non-finite count (a NaN put in on one
// step), for fp32 buckets, int8, and int8 with error feedback; blocks of 256 and of 100 (an int8
// segment's scales then start unaligned); one bucket per stage and 64 KiB buckets; a first stage
// (embeddings), a last stage (head share) and a whole model. Prints one line per check, then
// "dp_sync_check: rank R: N passed, M failed"; exit code 1 on any failure.
// Usage: mpirun -np D [env NCCL_HOSTID=...] build/dev/cuda/dp_sync_check (D >= 2; on one GPU each rank
// takes its own NCCL_HOSTID: scripts/gpu_check.sh's nccl2)
#include "dev/dev_cli.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/rng.h"
#include "tdpipe/comm.h"
#include "tdpipe/dp_sync.h"
#include "tdpipe/dp_sync_cuda.cuh"

static int g_passed = 0, g_failed = 0;

static void report(const char* name, int ok, const char* detail) {
    printf("dp_sync_check: %-64s %s%s%s\n", name, ok ? "OK" : "NOT OK", detail && *detail ? "  " : "", detail ? detail : "");
    fflush(stdout);
    if (ok) g_passed++;
    else g_failed++;
}

// bit for bit, NaNs included (their payloads are part of the claim)
static void report_bits(const char* name, const float* got, const float* want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        if (a != b && !bad++) first = i;
    }
    char d[160] = "";
    if (bad) snprintf(d, sizeof d, "%zu of %zu differ, first at %zu: %a (GPU) vs %a (host)", bad, n, first, (double)got[first], (double)want[first]);
    report(name, bad == 0, d);
}

// x (n): a gradient's values for replica q at step t: normal, times a per-2048-element magnitude over
// 2^-20..2^4 (so blocks' scales differ), with a run of zeros (a zero block) and one huge value
static void fill_gradient(float* x, size_t n, int q, int t) {
    Rng r;
    rng_init(&r, 7000 + 131 * (uint64_t)q + 17 * (uint64_t)t);
    float mag = 1.0f;
    for (size_t i = 0; i < n; i++) {
        if (i % 2048 == 0) mag = ldexpf(1.0f, -20 + (int)(rng_below(&r, 25)));
        x[i] = mag * rng_normal(&r);
    }
    for (size_t i = n / 3; i < n / 3 + 300 && i < n; i++) x[i] = 0.0f;
    if (n > 10) x[n / 2] = 3e30f;
}

typedef struct {
    const char* name;
    GPT2Range range;
} StageCase;

// one configuration: `steps` steps through both, everything compared; nan_step: the step (0-based) on
// which replica 0's gradient holds a NaN (-1: none)
static void check_case(Comm* c, CommNccl* cn, const GPT2Config* cfg, const StageCase* sc, DpSyncConfig dc, int steps, int nan_step) {
    Stage st;
    StageInit init = {.cfg = cfg, .range = sc->range, .B = 1, .T = 64};
    stage_init_common(&st, &init, NULL, NULL); // shapes only: the plan needs nothing more
    size_t n = st.num_params, vc = st.range.has_head ? st.sizes[0] : 0;
    DpSync host;
    dp_sync_init(&host, &dc, c, &st);
    DpSyncCuda* dev = dp_sync_cuda_init_nccl(&dc, c, &st, cn);
    char plan[128];
    double planned = dp_sync_device_planned_bytes(&dc, &st, c->D), sized = dp_sync_device_sizes(dp_sync_cuda_plan(dev)).total;
    snprintf(plan, sizeof plan, "%.0f bytes taken, %.0f by dp_sync_device_sizes, %.0f planned (the trainer's memory check)", dp_sync_cuda_device_bytes(dev), sized,
             planned);
    float* g = (float*)malloc_check((n + vc) * sizeof(float)); // (n + vc) this replica's gradient, then its head share
    float* back = (float*)malloc_check((n + vc) * sizeof(float));
    float* d_g; // (n + vc) device
    cudaCheck(cudaMalloc(&d_g, (n + vc) * sizeof(float)));
    char name[192], what[128];
    snprintf(what, sizeof what, "%s %s block %d bucket %zu D=%d", sc->name, dc.quant == GRAD_QUANT_INT8 ? (dc.error_feedback ? "int8+ef" : "int8") : "fp32",
             dc.block, dc.bucket_bytes, c->D);
    snprintf(name, sizeof name, "%s: device memory within the plan", what);
    report(name, dp_sync_cuda_device_bytes(dev) == sized && sized <= planned, plan);
    int all_equal = 1;
    for (int t = 0; t < steps; t++) {
        fill_gradient(g, n + vc, c->replica, t);
        if (t == nan_step && c->replica == 0) g[n / 4] = NAN;
        cudaCheck(cudaMemcpy(d_g, g, (n + vc) * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaDeviceSynchronize());
        dp_sync_begin_buffers(&host, g, vc ? g + n : NULL, t);
        DpSyncStats hs = dp_sync_finish(&host);
        DpSyncStats ds;
        if (t % 2) { // as inside a backward: every unit reported done (the last first, as the CUDA backward does), each bucket going behind its event
            dp_sync_cuda_start(dev, d_g, vc ? d_g + n : NULL, t);
            for (int u = cfg->num_layers + 2; u >= 0; u--) dp_sync_cuda_unit_done(dev, u);
            ds = dp_sync_cuda_end(dev);
        } else {
            ds = dp_sync_cuda_sync(dev, d_g, vc ? d_g + n : NULL, t);
        }
        cudaCheck(cudaMemcpy(back, d_g, (n + vc) * sizeof(float), cudaMemcpyDeviceToHost));
        int same = !memcmp(back, g, (n + vc) * sizeof(float));
        all_equal &= same;
        if (!same || t == steps - 1) {
            snprintf(name, sizeof name, "%s step %d: average", what, t);
            report_bits(name, back, g, n + vc);
        }
        snprintf(name, sizeof name, "%s step %d: bytes, non-finite, entropy", what, t);
        char d[256];
        snprintf(d, sizeof d, "bytes %.0f/%.0f nonfinite %zu/%zu averaged %zu/%zu entropy %.6f/%.6f (GPU/host)", ds.bytes, hs.bytes, ds.nonfinite, hs.nonfinite,
                 ds.nonfinite_avg, hs.nonfinite_avg, ds.entropy, hs.entropy);
        int stats_ok = ds.bytes == hs.bytes && ds.nonfinite == hs.nonfinite && ds.nonfinite_avg == hs.nonfinite_avg &&
                       ((isnan(ds.entropy) && isnan(hs.entropy)) || ds.entropy == hs.entropy);
        if (!stats_ok || t == nan_step || t % DP_ENTROPY_EVERY == 0) report(name, stats_ok, d);
    }
    snprintf(name, sizeof name, "%s: every step bitwise", what);
    report(name, all_equal, "");
    if (dc.quant == GRAD_QUANT_INT8 && dc.error_feedback) {
        float* rr = (float*)malloc_check((n + vc) * sizeof(float));
        float* ro = (float*)malloc_check((n + vc) * sizeof(float));
        report("residuals copied to the host", dp_sync_cuda_residuals_to_host(dev, rr, ro) == 1, "");
        snprintf(name, sizeof name, "%s: replica residual after %d steps", what, steps);
        report_bits(name, rr, host.ef_replica, n + vc);
        snprintf(name, sizeof name, "%s: owner residual after %d steps", what, steps);
        report_bits(name, ro, host.ef_owner, n + vc);
        dp_sync_cuda_clear_residuals(dev); // and back: cleared, then restored from the host's
        dp_sync_cuda_residuals_to_host(dev, rr, ro);
        size_t nz = 0;
        for (size_t i = 0; i < n + vc; i++) nz += rr[i] != 0.0f || ro[i] != 0.0f;
        report("residuals cleared", nz == 0, "");
        dp_sync_cuda_residuals_from_host(dev, host.ef_replica, host.ef_owner);
        dp_sync_cuda_residuals_to_host(dev, rr, ro);
        report("residuals restored from the host", !memcmp(rr, host.ef_replica, (n + vc) * 4) && !memcmp(ro, host.ef_owner, (n + vc) * 4), "");
        free(rr);
        free(ro);
    }
    cudaCheck(cudaFree(d_g));
    free(g);
    free(back);
    dp_sync_cuda_free(dev);
    dp_sync_free(&host); // (st holds shapes only: nothing of a backend's to free)
}

int main(int argc, char** argv) {
    const DevCli cli = {"dp_sync_check", "usage: mpirun -np D build/dev/cuda/dp_sync_check   (D >= 2; no arguments)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 1) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[1]);
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    Comm c;
    comm_init(&c, &argc, &argv);
    char err[256];
    if (comm_grid(&c, 1, PLACE_STAGES_FIRST, err, sizeof err) != 0) td_fatal("%s", err);
    if (c.D < 2) td_fatal("dp_sync_check: run it on D >= 2 ranks (mpirun -np 2 ...): one replica has nothing to average");
    int n_dev = 1;
    cudaCheck(cudaGetDeviceCount(&n_dev));
    int device = c.local_rank % n_dev;
    cuda_device_init(device);
    printf("dp_sync_check: rank %d of %d (replica %d of %d), device %d %s%s%s\n", c.world_rank, c.world_size, c.replica, c.D, device, g_device_prop.name,
           getenv("NCCL_HOSTID") ? ", NCCL_HOSTID " : "", getenv("NCCL_HOSTID") ? getenv("NCCL_HOSTID") : "");
    CommNccl cn;
    comm_nccl_init(&cn, &c, device);
    const GPT2Config cfg = {64, 1000, 1024, 3, 4, 128}; // maxT, V, Vp, L, NH, C: small, with a head share
    const StageCase cases[3] = {{"whole", {0, 3, 1, 1}}, {"first", {0, 2, 1, 0}}, {"last", {2, 3, 0, 1}}};
    for (int s = 0; s < 3; s++)
        for (int mode = 0; mode < 3; mode++)
            for (int blk = 0; blk < 2; blk++)
                for (int bk = 0; bk < 2; bk++) {
                    DpSyncConfig dc = {mode ? GRAD_QUANT_INT8 : GRAD_QUANT_NONE, blk ? 100 : 256, mode == 2, bk ? (size_t)64 << 10 : 0};
                    if (!mode && blk) continue; // fp32 buckets: the block is only an owner's unit; one size is enough
                    check_case(&c, &cn, &cfg, &cases[s], dc, DP_ENTROPY_EVERY + 2, s == 0 ? 3 : -1);
                }
    comm_nccl_free(&cn);
    printf("dp_sync_check: rank %d: %d passed, %d failed\n", c.world_rank, g_passed, g_failed);
    comm_finalize(&c);
    return g_failed ? 1 : 0;
}
