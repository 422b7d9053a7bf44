#!/usr/bin/env bash
# TD-Pipe's convergence price and what each staleness compensation buys back: validation loss after
# S steps for M in {8, 16}, W in {0, M/2, M, 2M} x --stale-comp {none, predict, predict/o1 (first-order
# prediction: --predict-order 1), dcasgd, lr, predict+lr}, on the
# built-in data (its entropy floor is known) and on Tiny Shakespeare with GPT-2 tokens (d6); each row
# with its gap to W = 0, the drift monitor's mean cosine over the run, and the utilisation that window
# reaches at beta = 0.3 with P = 8 (the simulator's figure, sim_% of scripts/bench_schedules.sh).
# With SEEDS="1337 1 2" each row is the mean over those seeds (initialisation and data order), and
# spread_% is (max - min) / mean of its val losses: single runs this short differ by about a percent.
# Runs at P = 1: a TD-Pipe run is bitwise the same at every P (tests/test_pipeline.sh), so one process
# computes exactly the pipeline's stale updates. Prints a table people and awk both read. Not a test.
# usage: scripts/bench_convergence.sh [builtin|shakespeare|both (default)] [steps (default 300)]
#   env: MS="8 16", WINDOWS="half one two" (W = M/2, M, 2M), COMPS="none predict predict/o1 dcasgd lr predict+lr",
#   DC_LAMBDA=1e5, T_SHAKESPEARE=128, SEEDS=1337: a subset of the table (the whole is 76 runs a seed; Tiny Shakespeare's take minutes each),
#   AEW_START=N: every run's window opens after step N (--aew-start; W = 0's rows are the same either way)
set -u
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"; cli_positional bench_convergence "$@"
WHICH=${1:-both}
STEPS=${2:-300}
case $WHICH in builtin | shakespeare | both) ;; *) echo "bench_convergence: '$WHICH': expected builtin, shakespeare or both" >&2; exit 1 ;; esac
cli_count bench_convergence steps "$STEPS" 1
[ $# -le 2 ] || { echo "bench_convergence: unexpected argument $3" >&2; exit 1; }
BIN=${BIN:-./train_tdpipe}
SIM=build/dev/sim_schedules
[ -x "$BIN" ] && [ -x "$SIM" ] || { echo "bench_convergence: build first (make)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/bench_convergence.XXXXXX); trap 'rm -rf "$TMP"' EXIT
DC_LAMBDA=${DC_LAMBDA:-1e5}   # the trainer's default
MS=${MS:-8 16}                 # micro-batches per step
WINDOWS=${WINDOWS:-half one two} # W as M/2, M, 2M
COMPS=${COMPS:-none predict predict/o1 dcasgd lr predict+lr}
SEEDS=${SEEDS:-1337}
AEW_START=${AEW_START:-0}
T_SHAKESPEARE=${T_SHAKESPEARE:-128}
echo "# bench_convergence: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, $(date +%F)"
echo "# command: scripts/bench_convergence.sh $WHICH $STEPS ($BIN, P = 1, default lr 3e-3, --dc-lambda $DC_LAMBDA, --drift-every 25, --aew-start $AEW_START, seeds $SEEDS)"
echo "# gap: val loss relative to the same M's W = 0 run; cos: the drift monitor's mean cosine to the exact synchronous gradient; util: tdpipe at P = 8, beta 0.3 (simulated)"
echo "# start: --aew-start; eff: the whole run's utilisation, its first start steps at W = 0's (steps / sum of step times)"
printf '%-12s %3s %3s %-10s %5s %10s %9s %8s %7s %7s %9s\n' "#data" M W comp start val_loss gap_% cos util_% eff_% spread_%
sim_util() { "$SIM" -P 8 -M "$1" -n 12 -s 20 -W "$2" | awk -v w="$2" '/^beta / { b = $2 } b == 0.3 && $1 == "tdpipe" && $2 == w { print $6; exit }'; }
one() { # one DATA M W COMP FLAGS...: the row, its val loss the mean over SEEDS
    local data=$1 M=$2 W=$3 comp=$4; shift 4
    local vals="" coss="" seed method=${comp%/o1} order=2
    [ "$method" != "$comp" ] && order=1
    for seed in $SEEDS; do
        local out="$TMP/$data.$M.$W.$method.$order.$seed"
        $BIN --device cpu --schedule tdpipe --micro-batches "$M" --aew "$W" --stale-comp "$method" --predict-order "$order" --dc-lambda "$DC_LAMBDA" --aew-start "$AEW_START" -x "$STEPS" -v "$STEPS" \
            --drift-every 25 -s 0 --seed "$seed" "$@" -o "$out" > "$out.txt" 2>&1 || { echo "$data M=$M W=$W $comp seed $seed: failed (see $out.txt)" >&2; return; }
        vals="$vals $(grep -o 'val loss [0-9.]*' "$out.txt" | tail -1 | cut -d' ' -f3)"
        coss="$coss $(grep -o '"drift_mean_cos": [0-9.e-]*' "$out/log.jsonl" | awk '{ s += $2; n++ } END { if (n) printf "%.6f", s / n; else print "-" }')"
    done
    local val cos spread
    val=$(echo $vals | awk '{ for (i = 1; i <= NF; i++) s += $i; printf "%.6f", s / NF }')
    spread=$(echo $vals | awk '{ lo = hi = $1; for (i = 1; i <= NF; i++) { s += $i; if ($i < lo) lo = $i; if ($i > hi) hi = $i } printf "%.2f", 100 * (hi - lo) / (s / NF) }')
    cos=$(echo $coss | awk '{ for (i = 1; i <= NF; i++) { if ($i == "-") { print "-"; exit } s += $i } printf "%.4f", s / NF }')
    [ "$W" = 0 ] && echo "$val" > "$TMP/ref.$data.$M"
    local ref gap
    ref=$(cat "$TMP/ref.$data.$M")
    gap=$(awk -v a="$val" -v b="$ref" 'BEGIN { printf "%+.2f", 100 * (a - b) / b }')
    local util start=$AEW_START eff
    util=$(sim_util "$M" "$W")
    [ "$W" = 0 ] && start=0
    eff=$util # with the window open from step 1, the window's own; else the first start steps at W = 0's
    [ "$start" != 0 ] && eff=$(awk -v s="$STEPS" -v n="$start" -v u0="$(sim_util "$M" 0)" -v u="$util" 'BEGIN { printf "%.2f", s / (n / u0 + (s - n) / u) }')
    printf '%-12s %3d %3d %-10s %5d %10s %9s %8s %7s %7s %9s\n' "$data" "$M" "$W" "$comp" "$start" "$val" "$gap" "$cos" "$util" "$eff" "$spread"
}
table() { # table DATA FLAGS...
    local data=$1; shift
    for M in $MS; do
        one "$data" $M 0 none "$@"
        for w in $WINDOWS; do
            local W=$M
            [ "$w" = half ] && W=$((M / 2))
            [ "$w" = two ] && W=$((2 * M))
            for comp in $COMPS; do one "$data" $M $W $comp "$@"; done
        done
    done
}
if [ "$WHICH" = builtin ] || [ "$WHICH" = both ]; then
    table builtin -b 1 --val-batches 32
fi
if [ "$WHICH" = shakespeare ] || [ "$WHICH" = both ]; then
    bash dev/data/prepare_tinyshakespeare.sh > /dev/null || { echo "bench_convergence: no Tiny Shakespeare shards" >&2; exit 1; }
    table shakespeare -e d6 -b 1 -t "$T_SHAKESPEARE" -i data/tinyshakespeare/ts_train.bin -j data/tinyshakespeare/ts_val.bin --val-batches 16
fi
