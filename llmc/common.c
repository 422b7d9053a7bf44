// Checked calls and small utilities every module shares (see common.h).
#include "common.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

void* realloc_check_at(void* p, size_t bytes, const char* file, int line) {
    void* q = realloc(p, bytes ? bytes : 1);
    if (!q) td_fatal_at(file, line, "realloc(%zu) failed: out of memory", bytes);
    return q;
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

static const char* file_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

int td_open_regular(const char* path, const char* what, long long* bytes, char* err, size_t errlen) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == EISDIR) return td_error(err, errlen, "%s: is a directory, not a %s", path, what);
        return td_error(err, errlen, "%s: cannot open %s: %s", path, what, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return td_error(err, errlen, "%s: cannot stat %s: %s", path, what, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode)) return td_error(err, errlen, "%s: is a directory, not a %s", path, what);
        return td_error(err, errlen, "%s: is %s, not a %s", path, file_kind(st.st_mode), what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return td_error(err, errlen, "%s: cannot read %s: %s", path, what, strerror(e));
    }
    if (bytes) *bytes = (long long)st.st_size;
    return fd;
}

FILE* td_fopen_regular(const char* path, const char* what, long long* bytes, char* err, size_t errlen) {
    int fd = td_open_regular(path, what, bytes, err, errlen);
    if (fd < 0) return NULL;
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        td_error(err, errlen, "%s: cannot read %s: %s", path, what, strerror(errno));
        close(fd);
    }
    return f;
}

int td_create_regular(const char* path, const char* what, char* err, size_t errlen) {
    // O_NONBLOCK: a FIFO without a reader fails at once (ENXIO) instead of waiting for one
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0 && (errno == ENXIO || errno == EISDIR || errno == ELOOP) && lstat(path, &st) == 0)
        return td_error(err, errlen, "%s: is %s, not a %s", path, S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : file_kind(st.st_mode), what);
    if (fd < 0) return td_error(err, errlen, "%s: cannot create %s: %s", path, what, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return td_error(err, errlen, "%s: is %s, not a %s", path, S_ISDIR(st.st_mode) ? "a directory" : file_kind(st.st_mode), what);
    }
    int fl = fcntl(fd, F_GETFL);
    if (ftruncate(fd, 0) != 0 || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return td_error(err, errlen, "%s: cannot write %s: %s", path, what, strerror(e));
    }
    return fd;
}

unsigned char* td_read_file(const char* path, const char* what, size_t* len, char* err, size_t errlen) {
    FILE* f = td_fopen_regular(path, what, NULL, err, errlen);
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0, got;
    unsigned char* buf = (unsigned char*)malloc_check(cap); // (cap,) of which n are read
    // read to the end rather than trust the size: the file may grow while it is read
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char* bigger = (unsigned char*)malloc_check(cap * 2);
            memcpy(bigger, buf, n);
            free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        td_error(err, errlen, "%s: reading %s failed", path, what);
        return NULL;
    }
    *len = n;
    return buf;
}

int td_cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

double td_median(double* v, int n) {
    qsort(v, (size_t)n, sizeof(double), td_cmp_double);
    return v[n / 2];
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

double td_ulp_error(float got, double exact) {
    if (isnan(exact) || isnan(got)) return isnan(exact) && isnan(got) ? 0.0 : INFINITY;
    // a float infinity is right where the exact value rounds to it: at or past FLT_MAX + half its ulp
    if (isinf(got) && !isinf(exact)) return fabs(exact) >= 0x1.ffffffp127 && (got > 0) == (exact > 0) ? 0.0 : INFINITY;
    if (isinf(exact) || isinf(got)) return (double)got == exact ? 0.0 : INFINITY;
    int e;
    frexp(exact, &e); // |exact| = m 2^e, m in [0.5, 1): the float spacing there is 2^(e - 24)
    double ulp = fabs(exact) < 0x1p-126 ? 0x1p-149 : ldexp(1.0, e - 24);
    return fabs((double)got - exact) / ulp;
}
