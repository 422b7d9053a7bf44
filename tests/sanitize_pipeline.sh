#!/usr/bin/env bash
# The trainer built with AddressSanitizer and UndefinedBehaviorSanitizer (make sanitize-pipeline) run
# through what the C unit tests cannot reach: the executor, the links and the replicas' sync over MPI.
# Each run must end well and print no sanitizer report (any report also ends the process: no
# recovery). Leak checks are off: Open MPI's own allocations live until exit. Also the guard's rollback
# to a consistency point (the snapshot's restore and the log's cut), and activation recomputation.
# Usage: BIN="build-asan-mpi/train_tdpipe --device cpu" bash tests/sanitize_pipeline.sh
source tests/lib.sh
use_mpi "sanitized pipeline"
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
MPI="timeout 300 mpirun --oversubscribe --mca mpi_yield_when_idle 1 -x ASAN_OPTIONS -x UBSAN_OPTIONS -x OMP_NUM_THREADS"
S="-e d4 -b 2 -t 16 -v 4 -s 0"
# run KEY NAME ARGS...: the run ends with exit 0 and no report in what it printed ($TMP/KEY.log)
run() {
    local key=$1 name=$2; shift 2
    check "$name" $MPI "$@"
    cat "$TMP/out" "$TMP/err" > "$TMP/$key.log"
    check "  no sanitizer report" bash -c "! grep -aqE 'ERROR: AddressSanitizer|runtime error:' '$TMP/$key.log'"
}
run a "1F1B, P 2" -np 2 $BIN $S --stages 2 --micro-batches 4 -x 6 -o "$TMP/a"
run b "TD-Pipe W 2, P 4, weight prediction, jitter" -np 4 $BIN $S --stages 4 --schedule tdpipe --aew 2 --micro-batches 4 \
    --stale-comp predict --jitter 0.3 -x 6 -o "$TMP/b"
run c "ZB-H1, P 2" -np 2 $BIN $S --stages 2 --schedule zbh1 --micro-batches 4 -x 5 -o "$TMP/c"
run d "P 3 x D 2, TD-Pipe W 1, int8 sync, drift monitor" -np 6 $BIN $S --stages 3 --micro-batches 3 --schedule tdpipe --aew 1 \
    --grad-quant int8 --drift-every 2 -x 4 -o "$TMP/d"
run e "--aew auto's simulation, DC-ASGD, P 3" -np 3 $BIN $S --stages 3 --schedule tdpipe --aew auto --stale-comp dcasgd \
    --aew-start 0 --micro-batches 3 -x 5 -o "$TMP/e"
run f "a TD-Pipe run at P 2 checkpointed at its end, step 4" -np 2 $BIN $S --stages 2 --micro-batches 4 --schedule tdpipe --aew 2 \
    -x 4 -o "$TMP/f"
run g "  resumed to step 6" -np 2 $BIN $S --stages 2 --micro-batches 4 --schedule tdpipe --aew 2 -x 6 -o "$TMP/f" -y 1
check "  from step 4" grep -q "resumed from .* at step 4" "$TMP/g.log"
run h "a rollback to the consistency point (a NaN at step 3 of the chunk 1..4, W 2, P 2 x D 2, int8): the snapshot restored, the log cut" \
    -np 4 $BIN $S --stages 2 --micro-batches 4 --schedule tdpipe --aew 2 --grad-quant int8 --inject-nan 3 -x 6 -o "$TMP/h"
check "  rolled back to step 0, steps 1 and 2 undone" grep -q "rolled back to step 0, the consistency point (steps 1..2, computed stale, undone)" "$TMP/h.log"
run i "--recompute 1: ZB-H1, P 2 (kept inputs lent to the working set, the weight half recomputed again)" \
    -np 2 $BIN $S --stages 2 --schedule zbh1 --micro-batches 4 --recompute 1 -x 3 -o "$TMP/i"
run j "  TD-Pipe W 2, weight prediction, DC-ASGD, P 2" -np 2 $BIN $S --stages 2 --schedule tdpipe --aew 2 --stale-comp predict+dcasgd \
    --micro-batches 4 --recompute 1 -x 4 -o "$TMP/j"
finish
