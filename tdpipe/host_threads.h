// How many OpenMP threads a rank runs: the host's cores shared between the ranks on it, unless
// OMP_NUM_THREADS says otherwise (then a note where that asks for more threads than the cores hold).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// local_ranks: the ranks on this host (Comm's local_ranks); warn: this rank says the note (rank 0 of a
// run whose threads compute: not a GPU run's)
void host_threads_choose(int local_ranks, int warn);
#ifdef __cplusplus
}
#endif
