// The fuzz targets' one helper: tdpipe's readers take paths, so the fuzzer's bytes become the
// contents of a temporary file (one per slot, made once, rewritten for every input).
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_FILE_SLOTS 2

static char fuzz_paths_[FUZZ_FILE_SLOTS][64];
static int fuzz_fds_[FUZZ_FILE_SLOTS] = {-1, -1};

static void fuzz_files_remove_(void) {
    for (int k = 0; k < FUZZ_FILE_SLOTS; k++)
        if (fuzz_fds_[k] >= 0) unlink(fuzz_paths_[k]);
}

// the path of slot k (0 or 1), now holding exactly data (n)
static const char* fuzz_file(int k, const uint8_t* data, size_t n) {
    if (fuzz_fds_[k] < 0) {
        // memory-backed where there is one: the targets rewrite their file millions of times
        snprintf(fuzz_paths_[k], sizeof fuzz_paths_[k], "%s/tdpipe_fuzz_%d_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", k);
        fuzz_fds_[k] = mkstemp(fuzz_paths_[k]);
        if (fuzz_fds_[k] < 0) {
            perror("fuzz_file: mkstemp");
            abort();
        }
        atexit(fuzz_files_remove_);
    }
    if (ftruncate(fuzz_fds_[k], 0) != 0 || (n > 0 && pwrite(fuzz_fds_[k], data, n, 0) != (ssize_t)n)) {
        perror("fuzz_file: write");
        abort();
    }
    return fuzz_paths_[k];
}
