# Helpers for the shell tests: each check prints "ok"/"FAIL" and counts; finish prints the tally.
# Usage: source tests/lib.sh; check "name" cmd...; refuse "name" "regex in stderr" cmd...; finish
PASSED=0; FAILED=0
# the CPU is the reference: pinned, so a GPU on the machine does not change what is tested
BIN=${BIN:-./train_tdpipe --device cpu}
TMP=$(mktemp -d /tmp/tdpipe_test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

ok()   { PASSED=$((PASSED+1)); echo "ok   $*"; }
fail() { FAILED=$((FAILED+1)); echo "FAIL $*"; }

# a program a check runs is bounded (a shell function is not: timeout runs programs only), so a
# refusal that regressed into a run, or a run that hangs, fails with its name instead of stalling
# the suite: TEST_TIMEOUT seconds, far above any check's own time here
TEST_TIMEOUT=${TEST_TIMEOUT:-600}
bounded() { if [ "$(type -t "$1")" = file ]; then timeout -k 10 "$TEST_TIMEOUT" "$@"; else "$@"; fi; }
how() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ] && echo "exit $1: not done in $TEST_TIMEOUT s" || echo "exit $1"; }

# check NAME CMD...: passes when CMD exits 0
check() {
    local name=$1; shift
    # output lands in $TMP/out and $TMP/err only when the command is done, so a check may grep the previous one's
    bounded "$@" >"$TMP/out.new" 2>"$TMP/err.new"; local rc=$?
    mv "$TMP/out.new" "$TMP/out"; mv "$TMP/err.new" "$TMP/err"
    if [ $rc -eq 0 ]; then ok "$name"; else fail "$name ($(how $rc))"; tail -5 "$TMP/err" | sed 's/^/     /'; fi
}

# refuse NAME REGEX CMD...: passes when CMD exits non-zero by itself (not by a signal, not by a timeout)
# and stderr matches REGEX; the line that matched is printed
refuse() {
    local name=$1 re=$2; shift 2
    bounded "$@" >"$TMP/out.new" 2>"$TMP/err.new"; local rc=$?
    mv "$TMP/out.new" "$TMP/out"; mv "$TMP/err.new" "$TMP/err"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -lt 128 ] && grep -Eq -- "$re" "$TMP/err"; then
        ok "$name: $(grep -E -m1 -- "$re" "$TMP/err" | cut -c1-140)"
    else
        fail "$name ($(how $rc), stderr: $(head -2 "$TMP/err" | tr '\n' ' ' | cut -c1-200))"
    fi
}

# use_mpi WHAT: the multi-rank tests need Open MPI and a build with it (else one failure and exit);
# sets MPI (the launcher, bounded by a timeout) and losses DIR (a run's training losses, one per line)
use_mpi() {
    if ! command -v mpirun >/dev/null || ! ldd "${BIN%% *}" | grep -q libmpi; then
        echo "FAIL the $1 tests need Open MPI (apt-get install openmpi-bin libopenmpi-dev) and a build with it"
        echo "0 passed, 1 failed"; exit 1
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    MPI="timeout 180 mpirun --oversubscribe --mca mpi_yield_when_idle 1"
}
# what each stage holds, "stage:slots,stashes,ring " per stage: plan_holds from --print-schedule's
# table, end_holds from a run's end table (what it allocated)
plan_holds() { awk '/^stage  act\. slots/ { f = 1; next } f && /^[0-9]/ { printf "%s:%s,%s,%s ", $1, $2, $3, $4 }' "$1"; }
end_holds() { awk '/act\. slots/ && /meas/ { f = 1; next } f && /^[0-9]/ { printf "%s:%s,%s,%s ", $1, $6, $8, $10; next } { f = 0 }' "$1"; }
losses() { grep -o '^{"step": [0-9]*, "loss": [^,]*' "$1/log.jsonl" | cut -d' ' -f4; }

finish() { echo "$PASSED passed, $FAILED failed"; [ $FAILED -eq 0 ]; }
