// A tiny test harness for the C tests: CHECK counts a case, prints "ok"/"FAIL" with the reason,
// and test_summary() prints "N passed, N failed" and gives the exit code.
#pragma once
#include <stdio.h>

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
