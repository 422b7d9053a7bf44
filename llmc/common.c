// Checked calls and small utilities every module shares (see common.h).
#include "common.h"
#include <errno.h>
#include <stdarg.h>
#include <string.h>
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

void* malloc_check_at(size_t bytes, const char* file, int line) {
    void* p = malloc(bytes ? bytes : 1);
    if (!p) td_fatal_at(file, line, "malloc(%zu) failed: out of memory", bytes);
    return p;
}

void* calloc_check_at(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n ? n : 1, size ? size : 1);
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
