#!/usr/bin/env bash
# The bytes of a fixed set of training runs, one line each, to hold a refactor against: the training
# and validation losses (log.jsonl), model.bin and every checkpoint, by sha256; synthetic compute's op
# counts. Run it before and after a change and diff the two outputs: a refactor that keeps the
# numerics prints the same lines. Not a test (it records, it does not judge).
# usage: dev/golden_runs.sh [binary (default ./train_tdpipe)] > golden.txt
set -u
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional golden_runs "$@"
BIN=${1:-./train_tdpipe}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="timeout 300 mpirun --oversubscribe --mca mpi_yield_when_idle 1"
TMP=$(mktemp -d /tmp/golden_runs.XXXXXX); trap 'rm -rf "$TMP"' EXIT
BASE="-e d4 -b 2 -t 16 -x 12 -v 6 -s 0 -n 6 --keep 5 --micro-batches 4"
n=0
# run NAME NP FLAGS...: one line: name, then sha256 of losses, val losses, model.bin, each checkpoint
run() {
    local name=$1 np=$2; shift 2
    local out="$TMP/$((n++))"
    if [ "$np" -eq 1 ]; then $BIN --device cpu "$@" -o "$out" >"$out.txt" 2>&1; else $MPI -np "$np" $BIN "$@" -o "$out" >"$out.txt" 2>&1; fi
    local rc=$?
    local losses vals model ckpts=""
    losses=$(grep -o '"loss": [^,]*' "$out/log.jsonl" 2>/dev/null | sha256sum | cut -c1-16)
    vals=$(grep -o '"val_loss": [^,}]*' "$out/log.jsonl" 2>/dev/null | sha256sum | cut -c1-16)
    model=$(sha256sum < "$out/model.bin" 2>/dev/null | cut -c1-16)
    for c in "$out"/ckpt_*.tdck; do [ -e "$c" ] && ckpts="$ckpts $(basename "$c" .tdck | sed 's/ckpt_0*//'):$(sha256sum < "$c" | cut -c1-16)"; done
    printf '%-34s rc %d losses %s vals %s model %s ckpts%s\n' "$name" "$rc" "$losses" "$vals" "$model" "$ckpts"
}
run "P1 1f1b" 1 $BASE
run "P1 D2" 2 $BASE --device cpu
for sch in gpipe 1f1b zbh1 tdpipe; do
    run "P2 $sch" 2 $BASE --device cpu --stages 2 --schedule $sch
    run "P4 $sch" 4 $BASE --device cpu --stages 4 --schedule $sch
    run "P2xD2 $sch" 4 $BASE --device cpu --stages 2 --schedule $sch
done
run "P1 tdpipe W2" 1 $BASE --schedule tdpipe --aew 2
run "P4 tdpipe W2 jitter" 4 $BASE --device cpu --stages 4 --schedule tdpipe --aew 2 --jitter 0.3
run "P2xD2 tdpipe W5 jitter" 4 $BASE --device cpu --stages 2 --schedule tdpipe --aew 5 --jitter 0.3
run "P1 tdpipe W8 (all stale)" 1 $BASE --schedule tdpipe --aew 8
run "P1 cpu-staged" 1 $BASE --device cpu-staged
run "P4 cpu-staged" 4 $BASE --device cpu-staged --stages 4
run "P4 cpu-staged mpi" 4 $BASE --device cpu-staged --stages 4 --comm mpi
run "P2xD2 cpu-staged" 4 $BASE --device cpu-staged --stages 2
run "P2xD2 cpu-staged mpi" 4 $BASE --device cpu-staged --stages 2 --comm mpi
run "P4 cpu-staged tdpipe W2 jitter" 4 $BASE --device cpu-staged --stages 4 --schedule tdpipe --aew 2 --jitter 0.3
run "P4 cpu-staged zbh1" 4 $BASE --device cpu-staged --stages 4 --schedule zbh1
run "P1 clip wd shuffle" 1 $BASE -c 0.1 --clip 0.5 --shuffle 1
# resume: the step-6 checkpoint of "P1 1f1b" resumed as P = 2 (zbh1)
mkdir -p "$TMP/resume" && $BIN --device cpu $BASE -o "$TMP/resume" >/dev/null 2>&1 && rm -f "$TMP/resume"/ckpt_00000012.tdck
$MPI -np 2 $BIN --device cpu $BASE --stages 2 --schedule zbh1 -y 1 -o "$TMP/resume" >"$TMP/resume.txt" 2>&1
printf '%-34s rc %d losses %s model %s\n' "resume P1 -> P2 zbh1" $? "$(grep -o '"loss": [^,]*' "$TMP/resume/log.jsonl" | sha256sum | cut -c1-16)" "$(sha256sum < "$TMP/resume/model.bin" | cut -c1-16)"
# synthetic compute: only the op counts are deterministic
$MPI -np 8 $BIN -e d8 --stages 8 --schedule tdpipe --aew 8 --synthetic-compute --jitter 0.3 --micro-batches 16 -x 4 -o "$TMP/syn" >"$TMP/syn.txt" 2>&1
printf '%-34s rc %d %s\n' "synthetic P8 W8" $? "$(grep -o 'every rank ran .*' "$TMP/syn.txt")"
