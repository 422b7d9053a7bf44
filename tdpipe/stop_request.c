// A run's stop request (see stop_request.h).
#include "stop_request.h"
#include <string.h>
#include <unistd.h>

volatile sig_atomic_t g_stop_signal = 0;

// a second signal exits at once: every file is written to a temporary name and renamed, so nothing
// half-written is trusted
static void on_stop_signal(int sig) {
    if (g_stop_signal) {
        static const char msg[] = "train_tdpipe: a second signal: exiting at once (a file being written stays a temporary one, never trusted)\n";
        ssize_t w = write(2, msg, sizeof msg - 1); // write: async-signal-safe, as fprintf is not
        (void)w;
        _exit(128 + sig);
    }
    g_stop_signal = sig;
}

void stop_request_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; // (a call the signal lands in goes on: the run stops where it checks, not inside a read or a sleep)
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL); // (Open MPI forwards it to every rank at once; a SIGTERM to mpirun it holds, then kills)
}
