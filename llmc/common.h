// Checked calls and small utilities every module shares: fatal errors that name the rank, file,
// line and call; checked allocation and file I/O; a monotonic clock.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

extern int g_rank; // this process's MPI rank for messages; 0 without MPI

// print "[rank R] file:line: message" to stderr and exit(1)
void td_fatal_at(const char* file, int line, const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4), noreturn))
#endif
    ;
#define td_fatal(...) td_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

void* malloc_check_at(size_t bytes, const char* file, int line);
void* calloc_check_at(size_t n, size_t size, const char* file, int line);
void* realloc_check_at(void* p, size_t bytes, const char* file, int line);
FILE* fopen_check_at(const char* path, const char* mode, const char* file, int line);
void fread_check_at(void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line);
void fwrite_check_at(const void* ptr, size_t size, size_t n, FILE* f, const char* path, const char* file, int line);
void fclose_check_at(FILE* f, const char* path, const char* file, int line);
#define malloc_check(bytes) malloc_check_at((bytes), __FILE__, __LINE__)
#define calloc_check(n, size) calloc_check_at((n), (size), __FILE__, __LINE__)
#define realloc_check(p, bytes) realloc_check_at((p), (bytes), __FILE__, __LINE__)
#define fopen_check(path, mode) fopen_check_at((path), (mode), __FILE__, __LINE__)
#define fread_check(ptr, size, n, f, path) fread_check_at((ptr), (size), (n), (f), (path), __FILE__, __LINE__)
#define fwrite_check(ptr, size, n, f, path) fwrite_check_at((ptr), (size), (n), (f), (path), __FILE__, __LINE__)
#define fclose_check(f, path) fclose_check_at((f), (path), __FILE__, __LINE__)

// writes a message into err (errlen bytes; err may be NULL) and returns -1: the error path of
// library functions that report to their caller instead of exiting
int td_error(char* err, size_t errlen, const char* fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

// Opens path for reading only if it is a regular file: a directory is refused with "<path>: is a
// directory, not a <what>", a FIFO, socket or device likewise ("<path>: is a FIFO, not a <what>"),
// and neither open nor the check can block (O_NONBLOCK until fstat has said it is a file).
// Returns the descriptor (O_CLOEXEC, blocking again) and *bytes (may be NULL) = its size, or -1 + err.
int td_open_regular(const char* path, const char* what, long long* bytes, char* err, size_t errlen);
// The same as a stdio stream ("rb"); NULL + err on failure.
FILE* td_fopen_regular(const char* path, const char* what, long long* bytes, char* err, size_t errlen);

// Creates (or truncates) path for writing, as a regular file only: an existing FIFO, device or
// directory there is refused ("<path>: is a FIFO, not a <what>") instead of written into or
// waited on, and a symbolic link is not followed. Returns the descriptor (O_CLOEXEC), or -1 + err.
int td_create_regular(const char* path, const char* what, char* err, size_t errlen);

// The whole of a regular file (as td_open_regular checks it) in a malloc'd buffer of *len bytes
// (one spare byte after them); NULL + err on failure.
unsigned char* td_read_file(const char* path, const char* what, size_t* len, char* err, size_t errlen);

double now_seconds(void); // monotonic clock
// qsort's comparator for doubles, ascending
int td_cmp_double(const void* a, const void* b);
// v (n) sorted in place; returns v[n / 2] (the median for odd n, the upper one for even n)
double td_median(double* v, int n);
void sleep_seconds(double s); // returns after s seconds (at once for s <= 0)
// |got - exact| in float ulps at exact (the spacing of the floats in exact's binade; below 2^-126 the
// subnormals' 2^-149): how far a float function's result lies from the true value. 0 for NaN against
// NaN and for an infinity where exact rounds to it (|exact| >= FLT_MAX + half an ulp), else infinity
// where only one side is NaN or infinite.
double td_ulp_error(float got, double exact);

#ifdef __cplusplus
}
#endif
