// Paired A/B timing of matmul.c variants over whole training steps. On a shared machine a step's time
// moves by 10% and more from one minute to the next, more than most kernel changes gain; here every
// variant is linked into one program and they take turns step by step (the order rotated each round),
// so that a slow spell slows them alike, and each is judged by its per-round ratio to variant a.
// Built by the Makefile (each variant compiled with its public names prefixed va_, vb_, vc_; dev/bench_matmul_ab.sh names them).
// usage: build/dev/bench_matmul_ab ROUNDS VARIANTS(2|3) [small]   (small: the default model, else 124M)
#define main bench_cpu_main // its train_step is the step timed here: one step, not a copy of it
#include "dev/bench_cpu.c"
#undef main

#define VARIANT_API(X)                                                                                      \
    void X##_matmul_forward(float*, const float*, const float*, const float*, int, int, int);              \
    void X##_matmul_backward_input(float*, const float*, const float*, int, int, int, int);                \
    void X##_matmul_backward_weight(float*, float*, const float*, const float*, int, int, int, int);       \
    MatmulSplit X##_matmul_profile_split(int);                                                             \
    void X##_matmul_profile_reset(void);                                                                   \
    double X##_matmul_kernel_gflops(double, int, int, int);
VARIANT_API(va)
VARIANT_API(vb)
VARIANT_API(vc)

static int variant; // which one the matmul API below runs: 0 a, 1 b, 2 c
#define ROUTE(call) (variant == 0 ? va_##call : variant == 1 ? vb_##call : vc_##call)
void matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC) { ROUTE(matmul_forward(out, inp, w, b, N, C, OC)); }
void matmul_backward_input(float* dinp, const float* dout, const float* w, int N, int C, int OC, int acc) {
    ROUTE(matmul_backward_input(dinp, dout, w, N, C, OC, acc));
}
void matmul_backward_weight(float* dw, float* db, const float* dout, const float* inp, int N, int C, int OC, int acc) {
    ROUTE(matmul_backward_weight(dw, db, dout, inp, N, C, OC, acc));
}
MatmulSplit matmul_profile_split(int pass) { return ROUTE(matmul_profile_split(pass)); }
void matmul_profile_reset(void) { va_matmul_profile_reset(); vb_matmul_profile_reset(); vc_matmul_profile_reset(); }
double matmul_kernel_gflops(double seconds, int mi, int nj, int kc) { return ROUTE(matmul_kernel_gflops(seconds, mi, nj, kc)); }

static int cmp_double(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static double quantile(const double* sorted, int n, double q) { return sorted[(int)(q * (n - 1) + 0.5)]; }

int main(int argc, char** argv) {
    const DevCli cli = {"bench_matmul_ab", "usage: build/dev/bench_matmul_ab ROUNDS(>= 4) VARIANTS(2 or 3) [small]   (dev/bench_matmul_ab.sh builds and runs it)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc < 3 || argc > 4) dev_cli_refuse(&cli, "expected 2 or 3 arguments, got %d", argc - 1);
    int rounds = (int)dev_cli_long(&cli, "ROUNDS", argv[1], 4, 1000000), nv = (int)dev_cli_long(&cli, "VARIANTS", argv[2], 2, 3);
    if (argc == 4 && strcmp(argv[3], "small")) dev_cli_refuse(&cli, "unexpected argument '%s' (only 'small')", argv[3]);
    int small = argc == 4;
    int L = small ? 2 : 12, C = small ? 128 : 768, NH = small ? 2 : 12, V = small ? 256 : 50257, B = small ? 8 : 4, T = 64;
    Stage s;
    step_stage_create(&s, L, C, NH, V, B, T);
    AdamWConfig opt = STEP_OPT;
    double* units = (double*)calloc_check(L + 2, sizeof(double));
    double* t = (double*)calloc_check((size_t)3 * rounds, sizeof(double)); // (nv, rounds) seconds
    int step = 0;
    for (variant = 0; variant < nv; variant++) train_step(&s, step++, L, &opt, units); // warm-up, left out
    for (int rd = 0; rd < rounds; rd++)
        for (int j = 0; j < nv; j++) {
            variant = (rd + j) % nv;
            double t0 = now_seconds();
            train_step(&s, step++, L, &opt, units);
            t[variant * rounds + rd] = now_seconds() - t0;
        }
    printf("# %s steps (L %d C %d NH %d V %d B %d T %d), %d rounds of one step per variant, %d OpenMP threads\n", small ? "small" : "124M", L, C, NH, V,
           B, T, rounds, omp_get_max_threads());
    printf("#  variant  median_ms  ratio_to_a  ratio_q1  ratio_q3\n");
    double* x = (double*)calloc_check(rounds, sizeof(double));
    for (int v = 0; v < nv; v++) {
        for (int rd = 0; rd < rounds; rd++) x[rd] = t[v * rounds + rd];
        double ms = td_median(x, rounds) * 1e3;
        for (int rd = 0; rd < rounds; rd++) x[rd] = t[v * rounds + rd] / t[rd];
        qsort(x, rounds, sizeof(double), cmp_double); // once, for the three quantiles
        double q1 = quantile(x, rounds, 0.25), med = quantile(x, rounds, 0.5), q3 = quantile(x, rounds, 0.75);
        printf("  %c        %9.1f  %10.4f  %8.4f  %8.4f\n", 'a' + v, ms, med, q1, q3);
    }
    free(x);
    free(t);
    free(units);
    stage_destroy(&s);
    return 0;
}
