// CPU benchmark: this machine's fp32 FMA peak and stream bandwidth, the matmul on GPT-2 124M's shapes
// (beside a library's cblas_sgemm when built with one: OpenBLAS, or Intel's MKL with MKL=dir), training steps of a small model and of 124M, and
// where a 124M step's time goes per op family against its roofline; everything measured in one run.
// usage: build/dev/bench_cpu [steps (default 6)] [--small-only | --no-matmul]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "llmc/matmul.h"
#include "llmc/profile.h"
#include "llmc/rng.h"
#include "tdpipe/stage.h"
#if defined(TD_MKL)
#include <mkl.h>
#define TD_CBLAS
#elif defined(TD_OPENBLAS)
#include <cblas.h>
#define TD_CBLAS
#endif

#include "llmc/simd.h"
#define CHAINS 16 // independent FMA chains per thread: enough to cover FMA latency x ports

// fp32 FMA peak: every thread runs CHAINS independent vector FMA chains, in windows of a few ms for
// about a second. On a shared machine a few long windows can all land in a slow spell (best of 3 x
// 60 ms read anywhere from 222 to 339 GFLOP/s on one VM); the best short window finds the clock the
// chip reaches, and is the peak every % below is of. The rate over the whole second is kept beside
// it: what pure FMAs sustain through the VM's slow moments, as a step of about a second must (on this
// project's VM the best window read 4-21% above it, README 2026-12-06)
typedef struct {
    double best, sustained; // GFLOP/s: the best window's, and all windows' FLOPs over their time
} FmaPeak;

static FmaPeak fma_peak_gflops(void) {
    const long iters = 1000000;
    double best = 0.0, flops = 0.0, t_start = now_seconds(), t_end = t_start + 1.0, t0 = t_start;
    while (t0 < t_end) {
        float sink = 0.0f;
#pragma omp parallel reduction(+ : sink)
        {
            vfloat acc[CHAINS], a = (vfloat){0} + 0.999999f, b = (vfloat){0} + 1e-7f;
            for (int i = 0; i < CHAINS; i++) acc[i] = (vfloat){0} + (float)i;
            for (long it = 0; it < iters; it++) {
#pragma GCC unroll 16
                for (int i = 0; i < CHAINS; i++) acc[i] = acc[i] * a + b;
            }
            for (int i = 0; i < CHAINS; i++) sink += acc[i][0];
        }
        double t1 = now_seconds(), f = (double)omp_get_max_threads() * iters * CHAINS * VL * 2;
        if (f / (t1 - t0) / 1e9 > best) best = f / (t1 - t0) / 1e9;
        flops += f;
        t0 = t1;
        if (sink == 12345.0f) printf(" ");
    }
    return (FmaPeak){best, flops / (t0 - t_start) / 1e9};
}

// STREAM's copy (a = b) and triad (a = b + s c) on arrays far larger than the caches, all threads,
// best of 5; bytes counted as STREAM counts them (each array read or written once). Returns triad's GB/s.
static double stream_gbps(void) {
    const size_t n = (size_t)32 << 20; // 128 MiB per array
    float* a = (float*)malloc_check(n * sizeof(float));
    float* b = (float*)malloc_check(n * sizeof(float));
    float* c = (float*)malloc_check(n * sizeof(float));
#pragma omp parallel for schedule(static) // first touch by the threads that use the pages
    for (size_t i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }
    double best_copy = 0.0, best_triad = 0.0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now_seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i];
        double t1 = now_seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        double t2 = now_seconds();
        double copy = 8.0 * n / (t1 - t0) / 1e9, triad = 12.0 * n / (t2 - t1) / 1e9;
        if (copy > best_copy) best_copy = copy;
        if (triad > best_triad) best_triad = triad;
    }
    printf("  stream  copy %.1f GB/s, triad %.1f GB/s (3 x %zu MiB arrays; triad is the bandwidth roofline below)\n", best_copy, best_triad,
           n * sizeof(float) >> 20);
    free(a); free(b); free(c);
    return best_triad;
}

static float* random_floats(size_t n, uint64_t seed) {
    float* x = (float*)malloc_check(n * sizeof(float));
    Rng r;
    rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = rng_f32(&r) - 0.5f;
    return x;
}

#define MATMUL_ROUNDS 7 // calls of each pass in the matmul table, one a round

// one pass of a linear layer (N, C) -> (N, OC): 0 forward, 1 backward input, 2 backward weight;
// blas: through cblas_sgemm instead of llmc/matmul.c
static void matmul_pass(int which, int blas, float* out, float* dinp, float* dw, const float* inp, const float* w, int N, int C, int OC) {
#ifdef TD_CBLAS
    if (blas) {
        if (which == 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 0.0f, out, OC);
        else if (which == 1) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, out, OC, w, C, 1.0f, dinp, C);
        else cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, out, OC, inp, C, 1.0f, dw, C);
        return;
    }
#endif
    if (which == 0) matmul_forward(out, inp, w, NULL, N, C, OC);
    else if (which == 1) matmul_backward_input(dinp, out, w, N, C, OC, 1);
    else matmul_backward_weight(dw, NULL, out, inp, N, C, OC, 1);
}

// one linear layer's shape and its operands, kept while the table is timed
typedef struct {
    int N, C, OC;
    const char* label;
    float *inp, *w, *out, *dw, *dinp; // (N, C), (OC, C), (N, OC), (OC, C), (N, C)
    double t[2][3][MATMUL_ROUNDS];      // [ours, blas][fwd, bwd_in, bwd_w][round]: seconds of one call
} MatmulShape;

// GFLOP/s of forward, backward-input and backward-weight on each shape, and the library's beside them.
// Each entry is the median of MATMUL_ROUNDS calls taken in rounds over the whole table, not back to
// back: a VM's slow spell (on the Zen 4 VM of 2026-12-07 one pass read 101-108 GF/s for 15 calls in
// a row, then 196) then costs every entry a round instead of one entry its whole median
static void bench_matmuls(MatmulShape* sh, int nsh, double peak, int have_blas) {
    for (int s = 0; s < nsh; s++) {
        MatmulShape* m = &sh[s];
        m->inp = random_floats((size_t)m->N * m->C, 1);
        m->w = random_floats((size_t)m->OC * m->C, 2);
        m->out = random_floats((size_t)m->N * m->OC, 3);
        m->dw = random_floats((size_t)m->OC * m->C, 4);
        m->dinp = random_floats((size_t)m->N * m->C, 6);
    }
    for (int r = 0; r < MATMUL_ROUNDS; r++)
        for (int s = 0; s < nsh; s++)
            for (int which = 0; which < 3; which++)
                for (int blas = 0; blas <= have_blas; blas++) {
                    MatmulShape* m = &sh[s];
                    double t0 = now_seconds();
                    matmul_pass(which, blas, m->out, m->dinp, m->dw, m->inp, m->w, m->N, m->C, m->OC);
                    m->t[blas][which][r] = now_seconds() - t0;
                }
    const char* names[3] = {"fwd", "bwd_in", "bwd_w"};
    for (int s = 0; s < nsh; s++) {
        MatmulShape* m = &sh[s];
        double flops = 2.0 * m->N * m->C * m->OC;
        for (int which = 0; which < 3; which++) {
            double t = td_median(m->t[0][which], MATMUL_ROUNDS), g = flops / t / 1e9;
            printf("  matmul  %-10s %6s %6d %6d %6d %10.3f %9.1f %6.1f%%", m->label, names[which], m->N, m->C, m->OC, t * 1e3, g, 100.0 * g / peak);
            if (have_blas) {
                double tb = td_median(m->t[1][which], MATMUL_ROUNDS), gb = flops / tb / 1e9;
                printf(" %9.1f %6.1f%% %6.2fx", gb, 100.0 * gb / peak, tb / t);
            }
            printf("\n");
        }
        free(m->inp); free(m->w); free(m->out); free(m->dw); free(m->dinp);
    }
}

// one training step as the trainer's executor runs it for P = 1, M = 1: forward, backward, the tied
// embedding's sum, the global norm, AdamW with clipping's scale, the gradient slot zeroed
static void train_step(Stage* s, int step, int L, const AdamWConfig* opt, double* units) {
    Op f = {.kind = OP_F, .step = step, .mb = 0, .version = s->version}, bw = {.kind = OP_B, .step = step, .mb = 0, .version = s->version};
    stage_forward(s, &f, 0, 1);
    stage_backward(s, &bw, 0, 1.0f / (s->B * s->T));
    double wte_sq = stage_tie_local(s, 0); // (wte's part of the norm, from the sum's own pass)
    stage_grad_unit_sumsq(s, 0, wte_sq, units);
    float norm = stage_grad_norm_from_units(units, L + 2);
    stage_update(s, 0, opt, opt->lr, step + 1, norm > 1.0f ? 1.0f / norm : 1.0f);
    stage_zero_grad(s, 0);
}

// per-entry and per-family table of the profiled steps (profile.h's buckets), each against its roofline:
// time at the FMA peak for FLOPs or at the stream bandwidth for bytes, whichever is longer
static void print_breakdown(const char* label, int steps, double step_s, FmaPeak fp, double bw) {
    double peak = fp.best;
    const ProfileEntry* e;
    int n = profile_entries(&e);
    const char* families[] = {"matmul", "attention", "layernorm", "gelu", "residual", "softmax+CE", "encoder", "adamw",
                              "global norm", "zero grad", "tied embedding", "copies"};
    int nf = (int)(sizeof(families) / sizeof(families[0]));
    double fam_s[16] = {0}, fam_roof[16] = {0}, total_s = 0.0, total_flops = 0.0; // fam_*: (nf)
    printf("# breakdown of a %s step: %d more steps with the profiling hook on, %.1f ms each on average; each op's time is its mean per step\n",
           label, steps, step_s * 1e3);
    printf("#         family         pass      shape                  ms   %%step      rate   %%roof\n");
    for (int i = 0; i < n; i++) {
        double s = e[i].seconds / steps, fl = e[i].flops / steps, by = e[i].bytes / steps;
        double roof = fl / (peak * 1e9) > by / (bw * 1e9) ? fl / (peak * 1e9) : by / (bw * 1e9);
        char shape[64] = "";
        if (e[i].shape[0]) snprintf(shape, sizeof(shape), "%d %d %d", e[i].shape[0], e[i].shape[1], e[i].shape[2]);
        int compute = fl / (peak * 1e9) >= by / (bw * 1e9);
        printf("  op      %-14s %-8s %-18s %8.2f %6.1f%% %6.1f %s %6.1f%%\n", e[i].family, e[i].pass, shape, s * 1e3, 100.0 * s / step_s,
               compute ? fl / s / 1e9 : by / s / 1e9, compute ? "GF/s" : "GB/s", 100.0 * roof / s);
        for (int f = 0; f < nf; f++)
            if (!strcmp(e[i].family, families[f])) { fam_s[f] += s; fam_roof[f] += roof; }
        total_s += s;
        total_flops += fl;
    }
    printf("#         family                 ms   %%step   %%roof\n");
    for (int f = 0; f < nf; f++)
        if (fam_s[f] > 0) printf("  family  %-14s %10.2f %6.1f%% %6.1f%%\n", families[f], fam_s[f] * 1e3, 100.0 * fam_s[f] / step_s, 100.0 * fam_roof[f] / fam_s[f]);
    printf("  family  %-14s %10.2f %6.1f%%\n", "the rest", (step_s - total_s) * 1e3, 100.0 * (step_s - total_s) / step_s);
    printf("  total   %.1f GFLOP per step: %.1f GFLOP/s over the whole step, %.1f%% of the FMA peak (%.1f%% of the %.1f GFLOP/s FMAs sustained over a second)\n",
           total_flops / 1e9, total_flops / step_s / 1e9, 100.0 * total_flops / step_s / 1e9 / peak, 100.0 * total_flops / step_s / 1e9 / fp.sustained,
           fp.sustained);
}

// one row of the split: a pass's (or all passes') thread-seconds per step, packing and micro-kernel
static void print_split_row(const char* name, MatmulSplit m, int steps, double thread_peak, double alone) {
    double g = m.kernel_s > 0 ? m.kernel_flops / m.kernel_s / 1e9 : 0.0;
    printf("  split   %-8s %9.1f %6.1f%% %10.1f %12.1f %5.1f%% %7.1f%%\n", name, m.pack_s / steps * 1e3, 100.0 * m.pack_s / (m.pack_s + m.kernel_s),
           m.kernel_s / steps * 1e3, g, 100.0 * g / thread_peak, 100.0 * g / alone);
}

// inside the profiled steps' matmuls: each thread's time packing operands and in the micro-kernel,
// and the micro-kernel's rate there beside its rate on a tile that stays in L2 (the gap: time the
// micro-kernel lost in the step, to memory waits or, on a shared VM, to other load); both rates are
// over their whole time, and the FMAs' own sustained rate beside them
static void print_matmul_split(int steps, FmaPeak fp) {
    int nt = omp_get_max_threads();
    double thread_peak = fp.best / nt, alone = matmul_kernel_gflops(1.0, 256, 288, 256), in_l1 = matmul_kernel_gflops(1.0, 8, 48, 128);
    const char* names[3] = {"fwd", "bwd_in", "bwd_w"};
    printf("# inside the matmuls of those steps: thread-seconds per step summed over the %d threads, packing against the micro-kernel; "
           "GF/s per thread, %% of the peak's per-thread share (%.1f GF/s)\n", nt, thread_peak);
    printf("#         pass       pack_ms  pack_%%  kernel_ms  kernel_GF/s  %%peak  %%alone\n");
    MatmulSplit all = {0};
    for (int p = 0; p < 3; p++) {
        MatmulSplit m = matmul_profile_split(p);
        print_split_row(names[p], m, steps, thread_peak, alone);
        all.pack_s += m.pack_s, all.kernel_s += m.kernel_s, all.kernel_flops += m.kernel_flops;
    }
    print_split_row("all", all, steps, thread_peak, alone);
    printf("  kernel  alone, on every thread at once, each over one 256 x 288 tile of depth 256 in its L2, for 1 s: %.1f GF/s per thread, %.1f%% of the "
           "per-thread peak, %.1f%% of the FMAs' sustained rate\n", alone, 100.0 * alone / thread_peak, 100.0 * alone / (fp.sustained / nt));
    // its ceiling: one micro-tile whose operands (4 KiB of A, 24 KiB of B) stay in L1, so nothing
    // waits on memory; below 100% here is the loop of loads and FMAs itself on this core
    printf("  kernel  in L1, on every thread at once, each over one 8 x 48 micro-tile of depth 128, for 1 s: %.1f GF/s per thread, %.1f%% of the "
           "per-thread peak, %.1f%% of the FMAs' sustained rate\n", in_l1, 100.0 * in_l1 / thread_peak, 100.0 * in_l1 / (fp.sustained / nt));
}

// the whole model as one CPU stage, one micro-batch of random tokens, for train_step
static void step_stage_create(Stage* s, int L, int C, int NH, int V, int B, int T) {
    GPT2Config cfg = {1024, V, (V + 127) / 128 * 128, L, NH, C};
    GPT2Range all = {0, L, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    float* full = (float*)malloc_check(gpt2_param_sizes(&cfg, &all, sizes) * sizeof(float));
    gpt2_init_full(&cfg, full, 42);
    stage_create(s, &STAGE_CPU, &(StageInit){.cfg = &cfg, .range = all, .B = B, .T = T, .full = full});
    stage_reserve(s, 1, 1, 1, 0); // one micro-batch at a time
    free(full);
    Rng r;
    rng_init(&r, 7);
    for (int i = 0; i < B * T; i++) {
        stage_inputs(s, 0)[i] = (int)rng_below(&r, V);
        stage_targets(s, 0)[i] = (int)rng_below(&r, V);
    }
}

static const AdamWConfig STEP_OPT = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};

// median ms of full training steps on random tokens; profiled > 0: that many more steps with the
// profiling hook on, then their breakdown
static void bench_step(const char* label, int L, int C, int NH, int V, int B, int T, int steps, int profiled, FmaPeak peak, double bw) {
    Stage s;
    step_stage_create(&s, L, C, NH, V, B, T);
    AdamWConfig opt = STEP_OPT;
    double* units = (double*)calloc_check(L + 2, sizeof(double));
    double* t = (double*)calloc_check(steps + 1, sizeof(double));
    for (int step = 0; step <= steps; step++) { // step 0 warms up and is left out
        double t0 = now_seconds();
        train_step(&s, step, L, &opt, units);
        t[step] = now_seconds() - t0;
    }
    double med = td_median(t + 1, steps);
    printf("  step    %-10s L %d C %d NH %d V %d B %d T %d: %zu params, median %.1f ms/step over %d steps, %.1f tokens/s\n", label, L, C, NH, V,
           B, T, s.num_params, med * 1e3, steps, B * T / med);
    if (profiled > 0) { // shares of these steps' own mean time, as the ops' times are means: "the rest" is what no hook saw
        double t0 = now_seconds();
        profile_reset();
        matmul_profile_reset();
        profile_on = 1;
        for (int i = 0; i < profiled; i++) train_step(&s, steps + 1 + i, L, &opt, units);
        profile_on = 0;
        double step_s = (now_seconds() - t0) / profiled;
        FmaPeak again = fma_peak_gflops();
        // a slow spell on a shared machine can last seconds: the peak measured at the start may be
        // low, and every % below would then read high; measured again here, the higher one is used
        printf("  peak    fp32 FMA measured again before the breakdown: %.1f GFLOP/s, %.1f sustained (%.1f and %.1f at the start; the higher "
               "peak is used below)\n", again.best, again.sustained, peak.best, peak.sustained);
        peak = again.best > peak.best ? again : peak;
        print_breakdown(label, profiled, step_s, peak, bw);
        print_matmul_split(profiled, peak);
    }
    free(units);
    free(t);
    stage_destroy(&s);
}

int main(int argc, char** argv) {
    const DevCli cli = {"bench_cpu", "usage: build/dev/bench_cpu [steps (default 6)] [--small-only | --no-matmul]\n"
                                     "  steps         124M steps timed (the small model's: 4x as many)\n"
                                     "  --small-only  the small model's steps and its breakdown only\n"
                                     "  --no-matmul   leave out the matmul table: the steps and the breakdown only\n"};
    dev_cli_help(&cli, argc, argv);
    int steps = 6, small_only = 0, no_matmul = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small-only")) small_only = 1;
        else if (!strcmp(argv[i], "--no-matmul")) no_matmul = 1;
        else if (i == 1) steps = (int)dev_cli_long(&cli, "steps", argv[i], 1, 100000);
        else dev_cli_refuse(&cli, "unexpected argument '%s'", argv[i]);
    }
    if (small_only && no_matmul) dev_cli_refuse(&cli, "--small-only and --no-matmul: give one of them");
    struct utsname u;
    uname(&u);
    char cpu[256] = "unknown";
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof(line), f))
            if (!strncmp(line, "model name", 10)) {
                char* p = strchr(line, ':');
                if (p) snprintf(cpu, sizeof(cpu), "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    printf("# bench_cpu: %s, %s, %d OpenMP threads, SIMD width %d floats\n", u.machine, cpu, omp_get_max_threads(), VL);
    printf("# command: %s %s %s\n", argv[0], argc > 1 ? argv[1] : "", argc > 2 ? argv[2] : "");
    FmaPeak peak = fma_peak_gflops();
    printf("  peak    fp32 FMA (measured) %.1f GFLOP/s, the best few-ms window; %.1f sustained over the second\n", peak.best, peak.sustained);
    double bw = stream_gbps();
    int have_blas = 0;
#if defined(TD_MKL)
    // MKL's OpenMP layer is libgomp's, whose threads are ours (its default, Intel's libiomp5, would
    // start a second pool on the same two cores); set before any other MKL call
    have_blas = 1;
    mkl_set_threading_layer(MKL_THREADING_GNU);
    char mkl_version[256];
    mkl_get_version_string(mkl_version, sizeof(mkl_version));
    // the code path MKL chose for this CPU (mkl_types.h: 12 AVX512, 14 AVX512_E1, 15 AVX10, 10 AVX2)
    printf("# MKL: %s, code path %d, %d threads; blas columns: cblas_sgemm on the same operands, x = its time / ours\n", mkl_version,
           mkl_cbwr_get_auto_branch(), mkl_get_max_threads());
#elif defined(TD_OPENBLAS)
    // 2 = OpenBLAS's OpenMP build, whose threads are ours; a pthreads build would fight them for the cores
    have_blas = 1;
    printf("# OpenBLAS %s, parallel mode %d (2 = OpenMP), %d threads; blas columns: cblas_sgemm on the same operands, x = its time / ours\n",
           openblas_get_config(), openblas_get_parallel(), openblas_get_num_threads());
    // OpenBLAS's DYNAMIC_ARCH picks its kernels by CPU model; a model newer than the library (0.3.21
    // on an Intel family 6 model 207 VM) gets the generic SSE3 "Prescott" ones at ~10% of the peak,
    // which would make the blas_x column a comparison with the wrong kernels
    const char* core = openblas_get_corename();
    if (VL >= 8 && (!strcmp(core, "Prescott") || !strcmp(core, "Core2") || !strcmp(core, "Nehalem") || !strcmp(core, "Generic")))
        printf("# OpenBLAS: WARNING: core %s (no AVX kernels) on a CPU with %d-float SIMD: it does not know this CPU; "
               "rerun with OPENBLAS_CORETYPE=%s for its own kernels\n",
               core, VL, VL >= 16 ? "SkylakeX" : "Haswell");
#else
    printf("# no BLAS built in (make finds OpenBLAS with pkg-config openblas: apt-get install libopenblas-openmp-dev; "
           "Intel's MKL: make bench-mkl MKL=dir)\n");
#endif
    if (!no_matmul) {
        printf("#         shape      pass        N      C     OC      ms/op   GFLOP/s  %%peak%s\n", have_blas ? "  blas_GF/s  %peak  blas_x" : "");
        MatmulShape shapes[] = {{.N = 256, .C = 768, .OC = 2304, .label = "124M-qkv"},    {.N = 256, .C = 768, .OC = 768, .label = "124M-proj"},
                                {.N = 256, .C = 768, .OC = 3072, .label = "124M-fc"},     {.N = 256, .C = 3072, .OC = 768, .label = "124M-fcproj"},
                                {.N = 256, .C = 768, .OC = 50304, .label = "124M-head"}, {.N = 256, .C = 128, .OC = 512, .label = "small-fc"}};
        bench_matmuls(shapes, (int)(sizeof(shapes) / sizeof(shapes[0])), peak.best, have_blas);
    }
    bench_step("small", 2, 128, 2, 256, 8, 64, steps * 4, small_only ? steps * 8 : 0, peak, bw); // its breakdown where it is all that runs
    if (!small_only) bench_step("124M", 12, 768, 12, 50257, 4, 64, steps, 3, peak, bw);
    return 0;
}
