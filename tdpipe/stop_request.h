// A run's stop request: the first SIGINT, SIGTERM or SIGUSR1 asks the run to stop at its next
// consistency point (it finishes the chunk, or the validation batch, writes a checkpoint and exits 0);
// a second one ends the process at once. SIGUSR1 is the one to send to mpirun: README, Training.
#pragma once
#include <signal.h>
#ifdef __cplusplus
extern "C" {
#endif

// the first signal's number, 0 while none came (set by the handler, read between steps)
extern volatile sig_atomic_t g_stop_signal;

// installs the handler for the three signals (after the run's files are open: before, a signal ends it)
void stop_request_install(void);

#ifdef __cplusplus
}
#endif
