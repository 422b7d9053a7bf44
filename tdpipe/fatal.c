// Errors that end a run of many ranks with one message (see fatal.h).
#include "fatal.h"
#include <time.h>

void fatal_exit_after_the_teller(void) {
    struct timespec wait_ = {2, 0};
    nanosleep(&wait_, NULL);
    exit(1);
}

void fatal_any(Comm* c, int bad, const char* err) {
    int n = c->world_size, first = comm_max(c, bad ? n - g_rank : 0); // n - (the lowest bad rank)
    if (!first) return;
    if (g_rank != n - first) fatal_exit_after_the_teller();
    if (n > 1) fprintf(stderr, "train_tdpipe: rank %d (stage %d, replica %d): %s\n", g_rank, c->stage, c->replica, err);
    else fprintf(stderr, "train_tdpipe: %s\n", err);
    fflush(stderr);
    exit(1);
}
