#!/usr/bin/env bash
# build/tests/test_comm under mpirun: 2, 4 and 6 ranks in several P x D grids; a rank count that P does
# not divide is refused by every rank; a fatal error on one rank ends the whole job instead of hanging.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
T=${TEST_COMM:-build/tests/test_comm} # TEST_COMM: another build of it
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 60 mpirun --oversubscribe --mca mpi_yield_when_idle 1)

# tally NAME CMD...: passes when CMD exits 0 and its tally reads "N passed, 0 failed" with N > 0
tally() {
    local name=$1; shift
    "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$TMP/out" | tail -1)
    if [ $rc -eq 0 ] && [[ "$line" =~ ^[1-9][0-9]*\ passed,\ 0\ failed$ ]]; then
        ok "$name: $line"
    else
        fail "$name (exit $rc${line:+, $line})"
        { grep '^FAIL' "$TMP/out" | head -5; tail -3 "$TMP/err"; } | sed 's/^/     /'
    fi
}

if [ ! -x $T ]; then
    fail "$T is not built (make $T)"
    finish; exit
fi

tally "one process, no mpirun" timeout 60 $T
built_with_mpi=$(grep -c "built with MPI" "$TMP/out")
refuse "one process, P = 2: refused" "--stages 2 does not divide the 1 rank: the rank count must be P x D \(launch with mpirun" \
    timeout 60 $T 2
if [ "$built_with_mpi" -eq 0 ]; then
    echo "note: $T was built without MPI (no mpicc, or NO_MPI=1): the multi-rank cases do not apply"
    if command -v mpirun >/dev/null; then
        refuse "a build without MPI refuses to run as 2 ranks" "launched by mpirun with 2 ranks, but this build has no MPI" \
            "${MPIRUN[@]}" -np 2 $T
    fi
    finish; exit
fi
if ! command -v mpirun >/dev/null; then
    fail "mpirun not found, though $T was built with MPI"
    finish; exit
fi

tally "mpirun -np 2, P = 1 (D = 2)" "${MPIRUN[@]}" -np 2 $T 1
tally "mpirun -np 2, P = 2 (D = 1)" "${MPIRUN[@]}" -np 2 $T 2
tally "mpirun -np 4, P = 1 (D = 4)" "${MPIRUN[@]}" -np 4 $T 1
tally "mpirun -np 4, P = 2 (D = 2)" "${MPIRUN[@]}" -np 4 $T 2
tally "mpirun -np 4, P = 4 (D = 1)" "${MPIRUN[@]}" -np 4 $T 4
tally "mpirun -np 6, P = 3 (D = 2)" "${MPIRUN[@]}" -np 6 $T 3
tally "mpirun -np 6, P = 2 (D = 3)" "${MPIRUN[@]}" -np 6 $T 2
# replicas first: launch rank s D + d holds stage s, replica d; the world communicator (and every
# collective and gather over it) is in grid order all the same
tally "mpirun -np 4, P = 2 (D = 2), replicas first" "${MPIRUN[@]}" -np 4 $T 2 --replicas
tally "mpirun -np 6, P = 3 (D = 2), replicas first" "${MPIRUN[@]}" -np 6 $T 3 --replicas
tally "mpirun -np 6, P = 2 (D = 3), replicas first" "${MPIRUN[@]}" -np 6 $T 2 --replicas

refuse "mpirun -np 4, P = 3: refused" "--stages 3 does not divide the 4 ranks: the rank count must be P x D" \
    "${MPIRUN[@]}" -np 4 $T 3
check "... by each of the 4 ranks" \
    test "$(grep -oE '^\[rank [0-3]\] --stages 3 does not divide' "$TMP/err" | sort -u | wc -l)" -eq 4

# one rank fails while the others wait in a collective or a receive: the job must still end
refuse "a message over the size limit on rank 3 ends the job" \
    '^\[rank 3\] tdpipe/comm\.c:[0-9]+: comm_gather_to_root of 2147483648 bytes exceeds' \
    "${MPIRUN[@]}" -np 4 $T 1 --fatal gather-size
refuse "a receive shorter than the message: MPI's error, with rank, file, line and call" \
    '^\[rank [13]\] tdpipe/comm\.c:[0-9]+: MPI_(Wait|Test)\(.*\) failed: MPI_ERR_TRUNCATE' \
    "${MPIRUN[@]}" -np 4 $T 2 --fatal truncate
refuse "a message shorter than the receive expects" \
    '^\[rank 1\] tdpipe/comm\.c:[0-9]+: a message of 100 bytes from stage 0 \(tag 3\): 50 bytes arrived where 100 were expected' \
    "${MPIRUN[@]}" -np 2 $T 2 --fatal short
refuse "a transfer between world ranks shorter than the receive expects (its second message of two)" \
    '^\[rank 0\] tdpipe/comm\.c:[0-9]+: a message of 700 bytes from rank 1 \(tag 9\): 500 bytes arrived where 700 were expected' \
    "${MPIRUN[@]}" -np 2 $T 1 --fatal world-size
# a rank that works alone for a while (rank 0 writing a checkpoint) under a short --comm-timeout
refuse "rank 0 busy 6 s, the others waiting under --comm-timeout 1: they time out" \
    'waited [0-9]+ s for every rank.s agreement \(a value all ranks share\) \(--comm-timeout 1\)' \
    "${MPIRUN[@]}" -np 2 $T 1 --fatal slow-root
slow_root_allowed() { "${MPIRUN[@]}" -np 2 $T 1 --fatal slow-root-allowed >"$TMP/out" 2>&1 && grep -q "the job went on" "$TMP/out"; }
check "... and go on when comm_timeout_allow gives that work 30 s" slow_root_allowed
refuse "... and time out after 1 + 0.5 s when it gives 0.5 s, naming the allowance" \
    'waited [0-9]+ s for every rank.s agreement \(a value all ranks share\) \(--comm-timeout 1 \+ 0\.5 s for rank 0.s test work\)' \
    "${MPIRUN[@]}" -np 2 $T 1 --fatal slow-root-short
# a rank stopped (SIGSTOP) for 4 s while it waits under --comm-timeout 2, then continued: the stop is not waiting
stopped_waiter() { "${MPIRUN[@]}" -np 2 $T 1 --fatal stopped-waiter >"$TMP/out" 2>&1 && grep -q "the job went on" "$TMP/out"; }
check "a waiting rank stopped for 4 s under --comm-timeout 2 does not time out once continued" stopped_waiter
finish
