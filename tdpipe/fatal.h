// Errors that end a run of many ranks with one message: fatal_all where every rank meets the error
// alike (rank 0 says it), fatal_any where only some may (the lowest of them says it). Every rank
// exits 1, the silent ones after giving the one that speaks time to be heard.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include "llmc/common.h"
#include "tdpipe/comm.h"
#ifdef __cplusplus
extern "C" {
#endif

// A rank that exits 1 without saying why first gives the rank that says it two seconds: the launcher
// ends the job at the first exit, and that rank, still a little behind (reading a checkpoint, say),
// would be killed before saying why.
__attribute__((noreturn)) void fatal_exit_after_the_teller(void);

// an error every rank detects alike (flags, shapes, rank counts): rank 0 says it, all exit 1
#define fatal_all(...)                                          \
    do {                                                        \
        if (g_rank == 0) {                                      \
            fprintf(stderr, "train_tdpipe: ");                  \
            fprintf(stderr, __VA_ARGS__);                       \
            fputc('\n', stderr);                                \
            fflush(stderr);                                     \
            exit(1);                                            \
        }                                                       \
        fatal_exit_after_the_teller();                          \
    } while (0)

// An error that not every rank may meet (each reads its own slice of the data, the model file and the
// checkpoint; a NaN in layer 5 is seen by the stage that holds it): the lowest rank that met it says
// it, naming itself where there are several, and every rank exits 1 (the others after giving it two
// seconds). Collective: every rank calls it, bad or not; returns where none is bad.
void fatal_any(Comm* c, int bad, const char* err);

#ifdef __cplusplus
}
#endif
