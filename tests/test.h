// A tiny test harness for the C tests: CHECK counts a case, prints "ok"/"FAIL" with the reason,
// and test_summary() prints "N passed, N failed" and gives the exit code; test_dir_make and
// test_path give a test a temporary folder of its own, removed when it exits.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int test_passed_ = 0, test_failed_ = 0;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed_++;                                                \
            printf("ok   ");                                               \
        } else {                                                           \
            test_failed_++;                                                \
            printf("FAIL %s:%d (%s) ", __FILE__, __LINE__, #cond);         \
        }                                                                  \
        printf(__VA_ARGS__);                                               \
        printf("\n");                                                      \
        fflush(stdout);                                                    \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed_, test_failed_);
    return test_failed_ ? 1 : 0;
}

static char test_dir_[256];

static inline void test_dir_remove_(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir_);
    if (system(cmd) != 0) printf("note: could not remove %s\n", test_dir_);
}

// makes /tmp/<name>.XXXXXX (exits if it cannot) and returns it
static inline const char* test_dir_make(const char* name) {
    snprintf(test_dir_, sizeof test_dir_, "/tmp/%s.XXXXXX", name);
    if (!mkdtemp(test_dir_)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(test_dir_remove_);
    return test_dir_;
}

// a whole file's bytes (malloc'd; *n its size, 0 after a short read), or NULL when it cannot be opened
static inline unsigned char* test_slurp(const char* path, size_t* n) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char* b = (unsigned char*)malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

// "<test folder>/<name>"; the last 8 results stay valid
static inline const char* test_path(const char* name) {
    static char buf[8][1024];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", test_dir_, name);
    return buf[k];
}
