// Checked calls and small utilities every module shares (see common.h).
#include "common.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

int g_rank = 0;

void td_fatal_at(const char* file, int line, const char* fmt, ...) {
    fflush(stdout);
    // one write of the whole line: ranks failing at once then cannot interleave mid-line
    char msg[4096];
    int n = snprintf(msg, sizeof(msg), "[rank %d] %s:%d: ", g_rank, file, line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && n < (int)sizeof(msg)) vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
    va_end(ap);
    size_t len = strlen(msg);
    if (len + 1 >= sizeof(msg)) len = sizeof(msg) - 2;
    msg[len] = '\n';
    msg[len + 1] = '\0';
    fputs(msg, stderr);
    fflush(stderr);
    exit(1);
}

// Large buffers (weights, moments, gradients, activations: hundreds of MiB that every step sweeps)
// asked to be backed by transparent huge pages, where the kernel grants them on request (THP
// "madvise" mode), before their first touch: 2 MiB pages leave the TLB nothing to miss on a sweep.
// glibc serves such sizes with fresh mmaps, so the pages are untouched until the caller writes them.
#define HUGE_MIN_BYTES ((size_t)8 << 20)
static void* ask_huge_pages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    if (p && bytes >= HUGE_MIN_BYTES) {
        uintptr_t a = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, end = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
        if (end > a) madvise((void*)a, end - a, MADV_HUGEPAGE); // advice only: a refusal changes nothing
    }
#endif
    return p;
}

void* malloc_check_at(size_t bytes, const char* file, int line) {
    void* p = ask_huge_pages(malloc(bytes ? bytes : 1), bytes);
    if (!p) td_fatal_at(file, line, "malloc(%zu) failed: out of memory", bytes);
    return p;
}

void* calloc_check_at(size_t n, size_t size, const char* file, int line) {
    void* p = ask_huge_pages(calloc(n ? n : 1, size ? size : 1), n * size);
    if (!p) td_fatal_at(file, line, "calloc(%zu, %zu) failed: out of memory", n, size);
    return p;
}

FILE* fopen_check_at(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (!f) td_fatal_at(file, line, "fopen(\"%s\", \"%s\") failed: %s", path, mode, strerror(errno));
    return f;
}

void fread_check_at(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        if (feof(f)) td_fatal_at(file, line, "%s: file is truncated (wanted %zu items of %zu bytes, got %zu)", path, n, size, got);
        td_fatal_at(file, line, "%s: read failed: %s", path, strerror(errno));
    }
}

void fwrite_check_at(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line) {
    if (fwrite(ptr, size, n, f) != n) td_fatal_at(file, line, "%s: write failed: %s", path, strerror(errno));
}

void fclose_check_at(FILE* f, const char* path, const char* file, int line) {
    if (fclose(f) != 0) td_fatal_at(file, line, "%s: close failed: %s", path, strerror(errno));
}

int td_error(char* err, size_t errlen, const char* fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sleep_seconds(double s) {
    if (s <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}
