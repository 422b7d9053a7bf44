// Whether the global norm's sum of squares gains from running where a gradient was just written:
// sumsq over GPT-2 124M's whole gradient cold, against sumsq of each 9.4 MB piece (one fc weight's
// gradient) right after the piece is rewritten, as a norm inside the weight backward would run.
// usage: build/dev/bench_sumsq [reps (default 5)]   (best of reps; OMP_NUM_THREADS sets the threads)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include "llmc/global_norm.h"

int main(int argc, char** argv) {
    const DevCli cli = {"bench_sumsq", "usage: build/dev/bench_sumsq [reps (default 5)]   (best of reps; OMP_NUM_THREADS sets the threads)\n"};
    dev_cli_help(&cli, argc, argv);
    if (argc > 2) dev_cli_refuse(&cli, "unexpected argument '%s'", argv[2]);
    int reps = argc > 1 ? (int)dev_cli_long(&cli, "reps", argv[1], 1, 100000) : 5;
    size_t n = 124475904, piece = 2359296; // (n) the gradient; (piece) fcw's, (4*C, C) at C = 768
    float* g = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = (float)(i % 1000) * 1e-3f;
    double cold = 1e30, hot = 1e30, keep = 0.0;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        keep += global_norm_sumsq(g, n);
        double t = omp_get_wtime() - t0;
        if (t < cold) cold = t;
        double th = 0.0;
        for (size_t off = 0; off + piece <= n; off += piece) {
#pragma omp parallel for
            for (size_t i = off; i < off + piece; i++) g[i] *= 1.0000001f; // written, as the matmul writes it
            double t1 = omp_get_wtime();
            keep += global_norm_sumsq(g + off, piece);
            th += omp_get_wtime() - t1;
        }
        if (th < hot) hot = th;
    }
    size_t hot_n = n / piece * piece;
    printf("# bench_sumsq: %d threads, best of %d (checksum %g)\n", omp_get_max_threads(), reps, keep);
    printf("  cold   %zu floats   %8.2f ms  %6.1f GB/s\n", n, 1e3 * cold, 4.0 * n / cold / 1e9);
    printf("  hot    %zu floats   %8.2f ms  %6.1f GB/s  (each %zu-float piece right after it is written)\n", hot_n, 1e3 * hot,
           4.0 * hot_n / hot / 1e9, piece);
    printf("  ratio  hot / cold GB/s  %.2f\n", (4.0 * hot_n / hot) / (4.0 * n / cold));
    free(g);
    return 0;
}
