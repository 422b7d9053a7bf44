#!/usr/bin/env bash
# The replicas' gradient sync, measured: (1) the average alone (build/dev/bench_dp_sync: bytes per rank
# and time, GPT-2 124M's gradient and a small one, D = 2 and 4); (2) inside training, the communication
# backward did not hide: per step, the seconds stage 0 waited for the average after its last backward
# (log.jsonl's dp_wait_ms) against the time the same average takes alone, for blocking fp32, fp32 in
# buckets and int8 in buckets (both sent as backward completes them): hidden = 1 - exposed / alone;
# (3) convergence: val loss of fp32, int8 + error feedback and int8 alone on the built-in data and on
# Tiny Shakespeare (GPT-2 tokens). On one machine the exchange runs through shared memory: the times say
# little about a network; the bytes and the hidden fraction feed the cluster simulator. Not a test.
# usage: scripts/bench_dp_sync.sh [--quick]   (--quick: the small shape only, fewer steps)
#   PARTS="1 2 3" (env): which parts to run; D_124M="2 4", STEPS_124M=41: part 2's 124M runs (default: D 2, 5 steps)
set -u
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"
QUICK=0; [ "${1:-}" = "--quick" ] && QUICK=1 && shift
[ $# -eq 0 ] || { echo "bench_dp_sync: unexpected argument $1 (only --quick; --help for the usage)" >&2; exit 1; }
BIN=${BIN:-./train_tdpipe}
BENCH=build/dev/bench_dp_sync
[ -x "$BIN" ] && [ -x "$BENCH" ] || { echo "bench_dp_sync: build first (make)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --mca mpi_yield_when_idle 1"
TMP=$(mktemp -d /tmp/bench_dp_sync.XXXXXX); trap 'rm -rf "$TMP"' EXIT
echo "# bench_dp_sync.sh: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, $(date +%F)"
PARTS=${PARTS:-1 2 3}
echo "# command: PARTS=\"$PARTS\" scripts/bench_dp_sync.sh $*"

part() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
part 1 && echo "## 1. the average alone"
for D in 2 4; do
    part 1 || part 2 || break
    $MPI -np $D $BENCH 5 $([ $QUICK = 1 ] && echo --small-only) | tee "$TMP/alone.$D" | grep -v '^# bytes/rank'
done
alone_ms() { # alone_ms D SHAPE_WORD MODE: the time column of bench_dp_sync's row
    awk -v s="$2" -v m="$3" '$0 ~ s && $0 ~ m { print $(NF - 1); exit }' "$TMP/alone.$1"
}

if part 2; then
echo "## 2. inside training: the exposed communication (stage 0 of replica 0, steps after the first)"
printf '%-30s %2s %-14s %10s %10s %10s %10s %9s %9s %9s %9s %10s %8s\n' "#shape" D mode step_ms exposed_ms span_ms alone_ms hidden_% med_exp med_late hid_med_% hid_late_% bytes
run_modes() { # run_modes NAME SHAPE_WORD D FLAGS...
    local name=$1 word=$2 D=$3; shift 3
    for mode in fp32-blocking fp32-buckets int8-buckets; do
        local flags=""
        [ $mode = fp32-buckets ] && flags="--grad-cache 4MB"
        [ $mode = int8-buckets ] && flags="--grad-quant int8"
        local out="$TMP/$name.$D.$mode"
        $MPI -np "$D" $BIN --device cpu "$@" $flags -v 0 -s 0 --trace "$out.trace.json" -o "$out" > "$out.txt" 2>&1 || { echo "$name D=$D $mode: failed (see $out.txt)" >&2; continue; }
        local alone
        alone=$(alone_ms "$D" "$word" "$mode")
        python3 scripts/dp_exposure.py "$out/log.jsonl" "$out.trace.json" "$name" "$D" "$mode" "${alone:-nan}"
    done
}
run_modes "small (d4 built-in)" "small" 2 -e d4 -b 4 -t 64 --micro-batches 2 -x 8
run_modes "small (d4 built-in)" "small" 4 -e d4 -b 4 -t 64 --micro-batches 2 -x 8
if [ $QUICK = 0 ]; then
    bash dev/data/prepare_tinyshakespeare.sh > /dev/null || { echo "bench_dp_sync: no Tiny Shakespeare shards" >&2; exit 1; }
    for D in ${D_124M:-2}; do
        run_modes "GPT-2 124M (d12, Shakespeare)" "124M" "$D" -e d12 -i 'data/tinyshakespeare/ts_train.bin' -b 1 -t 64 --micro-batches 1 -x "${STEPS_124M:-5}"
    done
fi
echo "# exposed: seconds from the end of the step's last backward until the average is in place; span: from its first bucket sent"
echo "# alone: part 1's time for the same shape, mode and D; hidden = 1 - exposed / alone (blocking fp32 hides nothing by construction)"
echo "# med_exp: the median step's exposed time; med_late: the median of what is left of it once the time the LAST replica's backward ended"
echo "# later than this one's (from --trace) is taken off (that is a slower replica still computing); hid_med = 1 - med_exp / alone, hid_late = 1 - med_late / alone"
fi
part 3 || exit 0

echo "## 3. convergence (D = 2): val loss"
printf '%-26s %6s %-22s %10s %9s\n' "#data" steps mode val_loss gap_%
conv() { # conv NAME STEPS FLAGS...
    local name=$1 steps=$2; shift 2
    local ref=""
    for mode in fp32 int8+ef int8; do
        local flags=""
        [ $mode = int8+ef ] && flags="--grad-quant int8"
        [ $mode = int8 ] && flags="--grad-quant int8 --error-feedback 0"
        local out="$TMP/conv.$mode"
        rm -rf "$out"
        $MPI -np 2 $BIN --device cpu "$@" -x "$steps" -v "$steps" -s 0 $flags -o "$out" > "$out.txt" 2>&1 || { echo "$name $mode: failed" >&2; continue; }
        local val
        val=$(grep -o 'val loss [0-9.]*' "$out.txt" | tail -1 | cut -d' ' -f3)
        [ -z "$ref" ] && ref=$val
        printf '%-26s %6d %-22s %10s %9s\n' "$name" "$steps" "$mode" "$val" "$(awk -v a="$val" -v b="$ref" 'BEGIN { printf "%+.3f", 100 * (a - b) / b }')"
    done
}
if [ $QUICK = 1 ]; then
    conv "built-in, d4" 60 -e d4 -b 4 -t 32 --micro-batches 2 --val-batches 16
else
    conv "built-in, d4" 300 -e d4 -b 4 -t 64 --micro-batches 2 --val-batches 32
    conv "Tiny Shakespeare, d6" 300 -e d6 -i 'data/tinyshakespeare/ts_train.bin' -j 'data/tinyshakespeare/ts_val.bin' -b 4 -t 64 --micro-batches 2 --val-batches 16
fi
echo "# gap: relative to fp32's val loss (the goal: int8 + error feedback within 0.5 %)"
