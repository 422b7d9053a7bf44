// Checkpoint benchmark: save and load MB/s and compression ratio of the checkpoint container,
// plain zlib against shuffle + zlib at zlib levels 1 and 6 and Huffman-only coding, on a trained checkpoint or on a
// synthetic 124M-shaped one (--synthetic). Prints an nccl-tests-like table.
#define _GNU_SOURCE
#include "llmc/checkpoint.h"
#include "dev/dev_cli.h"
#include "llmc/common.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <zlib.h>
#include <omp.h>

typedef struct {
    char name[CKPT_NAME_CAP];
    int elem_size;
    size_t bytes;
    void* data; // (bytes,)
} Section;

// ---- synthetic 124M-shaped state ----------------------------------------------------------------

static uint64_t splitmix(uint64_t* s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// n draws of N(0, std), deterministic for a seed whatever the thread count (one stream per 64K)
static void fill_normal(float* x, size_t n, float std, uint64_t seed) {
    const size_t chunk = 1 << 16;
    long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        uint64_t s = seed * 0x100000001B3ull + (uint64_t)c;
        size_t end = (size_t)(c + 1) * chunk < n ? (size_t)(c + 1) * chunk : n;
        for (size_t i = (size_t)c * chunk; i < end; i++) {
            uint64_t r = splitmix(&s);
            float u1 = ((float)(r >> 40) + 1.0f) / 16777217.0f, u2 = (float)((r >> 16) & 0xFFFFFF) / 16777216.0f;
            x[i] = std * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
        }
    }
}

// GPT-2 124M (Vp 50304, C 768, L 12, maxT 1024) parameter tensors, each scaled by `scale`,
// initialised as llm.c does: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), LN 1/0, biases 0
static size_t synthetic_params(float** out, double scale) {
    const size_t Vp = 50304, C = 768, L = 12, T = 1024;
    const float std = 0.02f, proj = 0.02f / sqrtf(2.0f * (float)L);
    struct {
        size_t n;
        float std; // 0: constant `value`
        float value;
    } t[] = {{Vp * C, std, 0}, {T * C, std, 0},         {L * C, 0, 1},          {L * C, 0, 0},  {L * 3 * C * C, std, 0},
             {L * 3 * C, 0, 0}, {L * C * C, proj, 0},   {L * C, 0, 0},          {L * C, 0, 1},  {L * C, 0, 0},
             {L * 4 * C * C, std, 0}, {L * 4 * C, 0, 0}, {L * C * 4 * C, proj, 0}, {L * C, 0, 0}, {C, 0, 1}, {C, 0, 0}};
    int nt = (int)(sizeof t / sizeof t[0]);
    size_t total = 0;
    for (int i = 0; i < nt; i++) total += (size_t)ceil((double)t[i].n * scale);
    float* p = (float*)malloc_check(total * sizeof(float)); // (total,) all tensors back to back
    size_t at = 0;
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)ceil((double)t[i].n * scale);
        if (t[i].std > 0) fill_normal(p + at, n, t[i].std, 1000 + (uint64_t)i);
        else for (size_t k = 0; k < n; k++) p[at + k] = t[i].value;
        at += n;
    }
    *out = p;
    return total;
}

static int synthetic_sections(Section* s, double scale) {
    float* params;
    size_t n = synthetic_params(&params, scale);
    float* m = (float*)malloc_check(n * sizeof(float)); // (n,) first moment: gradient-sized values
    float* v = (float*)malloc_check(n * sizeof(float)); // (n,) second moment: tiny, positive
    fill_normal(m, n, 1e-4f, 7);
    fill_normal(v, n, 1e-4f, 8);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i] + 1e-12f;
    static int32_t config[16] = {1024, 50257, 12, 12, 768, 50304};
    static int64_t step[1] = {5000};
    static uint64_t rng[2] = {0x853c49e6748fea9bull, 0xda3e39cb94b95bdbull};
    static int64_t loader[4] = {3, 12345678, 4, 64};
    Section t[] = {{"config", 4, sizeof config, config}, {"step", 8, sizeof step, step}, {"rng", 8, sizeof rng, rng},
                   {"dataloader", 8, sizeof loader, loader}, {"params", 4, n * sizeof(float), params},
                   {"adam_m", 4, n * sizeof(float), m}, {"adam_v", 4, n * sizeof(float), v}};
    memcpy(s, t, sizeof t);
    return (int)(sizeof t / sizeof t[0]);
}

// ---- measurement ---------------------------------------------------------------------------------

static void save(const char* dir, const Section* s, int n, int level, int shuffle, char* path) {
    char err[8192];
    CkptWriter* w = ckpt_writer_open(dir, 1, level, shuffle, err, sizeof err);
    if (!w) td_fatal("%s", err);
    for (int i = 0; i < n; i++)
        if (ckpt_writer_add(w, s[i].name, s[i].data, s[i].bytes, s[i].elem_size, err, sizeof err) != 0) td_fatal("%s", err);
    if (ckpt_writer_commit(w, path, 4096, err, sizeof err) != 0) td_fatal("%s", err);
}

static void cpu_model(char* out, size_t cap) {
    snprintf(out, cap, "unknown");
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    fclose(f);
}

int main(int argc, char** argv) {
    const DevCli cli = {"bench_checkpoint",
                        "usage: build/dev/bench_checkpoint (CHECKPOINT.tdck | --synthetic [--scale S]) [--dir DIR]\n"
                        "  CHECKPOINT.tdck  a tdpipe checkpoint whose sections are re-saved in each configuration\n"
                        "  --synthetic      build 124M-shaped params/adam_m/adam_v instead (GPT-2 init, std 0.02)\n"
                        "  --scale S        synthetic only: every tensor S times its 124M size (0 < S <= 1, default 1)\n"
                        "  --dir DIR        where the checkpoints are written (default: a fresh dir under /tmp)\n"};
    dev_cli_help(&cli, argc, argv);
    const char* src = NULL;
    const char* dir_arg = NULL;
    int synthetic = 0;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--synthetic") == 0) synthetic = 1;
        else if (strcmp(argv[i], "--scale") == 0) {
            const char* v = dev_cli_value(&cli, argc, argv, i++);
            scale = dev_cli_nonneg(&cli, "--scale", v);
            if (!(scale > 0 && scale <= 1)) dev_cli_refuse(&cli, "--scale %s: expected a share of 124M's size, 0 < S <= 1", v);
        } else if (strcmp(argv[i], "--dir") == 0) dir_arg = dev_cli_value(&cli, argc, argv, i++);
        else if (argv[i][0] == '-') dev_cli_refuse(&cli, "unknown option %s", argv[i]);
        else if (src) dev_cli_refuse(&cli, "one checkpoint at a time ('%s' and '%s')", src, argv[i]);
        else src = argv[i];
    }
    if (synthetic == (src != NULL)) dev_cli_refuse(&cli, "give a checkpoint or --synthetic (one of them)");
    if (src && scale != 1.0) dev_cli_refuse(&cli, "--scale is for --synthetic only");

    Section sec[CKPT_MAX_SECTIONS];
    int n;
    Ckpt in;
    memset(&in, 0, sizeof in);
    char source[4200];
    double t0 = now_seconds();
    if (synthetic) {
        n = synthetic_sections(sec, scale);
        snprintf(source, sizeof source, "synthetic 124M-shaped state at scale %g: params (GPT-2 init, std 0.02), adam_m N(0,1e-4), adam_v (N(0,1e-4))^2", scale);
    } else {
        char err[8192];
        if (ckpt_read(src, &in, err, sizeof err) != 0) td_fatal("%s", err);
        n = in.num_sections;
        for (int i = 0; i < n; i++) {
            snprintf(sec[i].name, CKPT_NAME_CAP, "%s", in.sections[i].name);
            sec[i].elem_size = in.sections[i].elem_size;
            sec[i].bytes = in.sections[i].bytes;
            sec[i].data = in.sections[i].data;
        }
        snprintf(source, sizeof source, "checkpoint %s (step %ld)", src, in.step);
    }
    double t_prep = now_seconds() - t0;
    size_t raw = 0;
    for (int i = 0; i < n; i++) raw += sec[i].bytes;

    char dir[4096];
    if (dir_arg) snprintf(dir, sizeof dir, "%s", dir_arg);
    else {
        snprintf(dir, sizeof dir, "/tmp/tdpipe_bench_ckpt_XXXXXX");
        if (!mkdtemp(dir)) td_fatal("mkdtemp under /tmp failed");
    }

    struct utsname u;
    uname(&u);
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("# tdpipe checkpoint benchmark\n# command:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n# machine: %s, %s, %ld online CPUs, zlib %s\n", u.machine, cpu, sysconf(_SC_NPROCESSORS_ONLN), zlibVersion());
    printf("# source: %s; %d sections, %.2f MB raw (prepared in %.1f s)\n", source, n, raw / 1e6, t_prep);
    printf("# written to %s; save = open + shuffle + deflate + write + fsync + rename (%d OpenMP threads compress blocks);\n", dir, omp_get_max_threads());
    printf("# load = ckpt_read: read + both CRCs + inflate + unshuffle, from the page cache (just written).\n");
    printf("# MB = 1e6 bytes; MB/s are raw bytes over wall time; each figure the median of 3 runs\n");
    printf("#%7s %6s %10s %10s %8s %10s %10s\n", "mode", "level", "raw_MB", "file_MB", "ratio", "save_MB/s", "load_MB/s");
    fflush(stdout);

    const char* modes[2] = {"plain", "shuffle"};
    const int levels[3] = {1, 6, CKPT_LEVEL_HUFFMAN};
    const char* level_names[3] = {"1", "6", "huff"};
    for (int mi = 0; mi < 2; mi++)
        for (int li = 0; li < 3; li++) {
            double ts[3], tl[3];
            char path[4096];
            struct stat st;
            for (int r = 0; r < 3; r++) {
                double a = now_seconds();
                save(dir, sec, n, levels[li], mi, path);
                ts[r] = now_seconds() - a;
            }
            if (stat(path, &st) != 0) td_fatal("%s: stat failed after save", path);
            for (int r = 0; r < 3; r++) {
                char err[8192];
                Ckpt c;
                double a = now_seconds();
                if (ckpt_read(path, &c, err, sizeof err) != 0) td_fatal("%s", err);
                tl[r] = now_seconds() - a;
                for (int i = 0; i < n; i++) { // a benchmark of a wrong result is worthless
                    size_t b;
                    const void* d = ckpt_section(&c, sec[i].name, &b);
                    if (!d || b != sec[i].bytes || memcmp(d, sec[i].data, b) != 0) td_fatal("%s: section '%s' did not round-trip", path, sec[i].name);
                }
                ckpt_free(&c);
            }
            unlink(path);
            printf("%8s %6s %10.2f %10.2f %8.3f %10.1f %10.1f\n", modes[mi], level_names[li], raw / 1e6, st.st_size / 1e6,
                   (double)raw / (double)st.st_size, raw / 1e6 / td_median(ts, 3), raw / 1e6 / td_median(tl, 3));
            fflush(stdout);
        }
    if (!dir_arg) rmdir(dir);
    if (synthetic)
        for (int i = 4; i < n; i++) free(sec[i].data);
    ckpt_free(&in);
    return 0;
}
