// OpenMP threads per rank on a shared host (see host_threads.h).
#include "host_threads.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void host_threads_choose(int local_ranks, int warn) {
    if (local_ranks > 1 && !getenv("OMP_NUM_THREADS")) { // ranks sharing this host share its cores
        int threads = omp_get_num_procs() / local_ranks;
        omp_set_num_threads(threads > 0 ? threads : 1);
    }
    // more threads than cores, where OMP_NUM_THREADS asked for them: a thread waiting at a barrier
    // spins while the one it waits for has no core. The cores: this rank's (mpirun may bind it to
    // one) and the host's, which every rank here shares where none is bound
    int mine = omp_get_num_procs(), host = (int)sysconf(_SC_NPROCESSORS_ONLN), threads = omp_get_max_threads();
    if (warn && getenv("OMP_NUM_THREADS") && threads > 1 && (threads > mine || local_ranks * threads > host))
        fprintf(stderr, "note: OMP_NUM_THREADS=%d: %d threads a rank, %d rank(s) on this host of %d cores, %d of them this rank's: "
                        "more threads than cores, and OpenMP's waiting threads spin on cores the others need (8 ranks x 2 threads on 2 cores "
                        "ran 38x slower than 8 x 1); unset OMP_NUM_THREADS to share the cores\n",
                threads, threads, local_ranks, host, mine);
}
