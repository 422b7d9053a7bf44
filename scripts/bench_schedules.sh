#!/usr/bin/env bash
# Measured utilisation of the pipeline schedules with --synthetic-compute (timed waits from a cost
# model instead of the model, so P = 8 fits on two cores): P = 8, M = 16, beta in {0, 0.1, 0.3},
# gpipe / 1f1b / zbh1 and tdpipe at W in {0, 1, 2, 4, 8, 16, 32, auto}, beside each synchronous schedule's
# theoretical bubble and the simulator's figure for the same schedule and cost model (sim_%: the
# event-driven policy over Gamma-jittered op times, 20 seeds, the same per-step measure). Prints a
# table that people and awk both read. Not a test.
# usage: scripts/bench_schedules.sh [steps (default 12)] [binary (default ./train_tdpipe)]
set -u
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"; cli_positional bench_schedules "$@"
STEPS=${1:-12}
BIN=${2:-./train_tdpipe}
cli_count bench_schedules steps "$STEPS" 3
P=8; M=16
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --mca mpi_yield_when_idle 1 -np $P"
TMP=$(mktemp -d /tmp/bench_schedules.XXXXXX); trap 'rm -rf "$TMP"' EXIT
[ -x "$BIN" ] || { echo "bench_schedules: $BIN not found (run make)" >&2; exit 1; }
SIM=build/dev/sim_schedules
[ -x "$SIM" ] || { echo "bench_schedules: $SIM not found (run make)" >&2; exit 1; }
# the simulator's table for every window below, computed once; a window --aew auto picks that is
# not among them is simulated when it comes up
"$SIM" -P $P -M $M -n "$STEPS" -s 20 -W 0,1,2,4,8,16,32 > "$TMP/sim.txt"
# sim_util SCHED W BETA: the simulator's steady-state utilisation (%) of that row
sim_util() {
    local pick='/^beta / { cur = $2 + 0 } $1 == s && $2 + 0 == w + 0 && cur == b + 0 { print $6; exit }'
    local u
    u=$(awk -v s="$1" -v w="$2" -v b="$3" "$pick" "$TMP/sim.txt")
    [ -n "$u" ] || u=$("$SIM" -P $P -M $M -n "$STEPS" -s 20 -W "$2" | awk -v s="$1" -v w="$2" -v b="$3" "$pick")
    echo "$u"
}

echo "# bench_schedules: $(uname -m), $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(grep -c ^processor /proc/cpuinfo) cores, $(date -u +%Y-%m-%d)"
echo "# command: $0 $STEPS $BIN"
echo "# P $P, M $M, synthetic compute: F = 2 ms per stage, B = 2 F (zbh1: BI = BW = F), U = 0; jitter: op time x Gamma(mean 1, CV beta)"
echo "# utilisation = 1 - bubble, bubble = 1 - busy / time between updates, mean over stages and the steady steps 2..$((STEPS - 1))"
echo "# (step 1 fills the pipeline and step $STEPS drains it; tdpipe's asynchrony spans steps, so those two are left out)"
echo "# theory: synchronous bubble (P-1)/(M+P-1) = $(awk -v p=$P -v m=$M 'BEGIN{printf "%.1f", 100*(p-1)/(m+p-1)}')% for gpipe and 1f1b (with B = 2F), (P-1)/(3M+P-1) for zbh1"
printf "%-8s %5s %5s %9s %9s %9s %6s %6s %9s\n" "#sched" "W" "beta" "util_%" "sim_%" "theory_%" "stale" "W_used" "step_ms"
for beta in 0 0.1 0.3; do
    for run in "gpipe 0" "1f1b 0" "zbh1 0" "tdpipe 0" "tdpipe 1" "tdpipe 2" "tdpipe 4" "tdpipe 8" "tdpipe 16" "tdpipe 32" "tdpipe auto"; do
        set -- $run; sched=$1; W=$2
        $MPI "$BIN" -e d8 --stages $P --schedule $sched --aew $W --synthetic-compute --jitter $beta --micro-batches $M \
            -x "$STEPS" -o "$TMP/out" > "$TMP/log.txt" 2>&1 || { echo "bench_schedules: $sched W=$W beta=$beta failed:" >&2; tail -3 "$TMP/log.txt" >&2; continue; }
        case $sched in
            zbh1) theory=$(awk -v p=$P -v m=$M 'BEGIN{printf "%.1f", 100*(1-(p-1)/(3*m+p-1))}');;
            tdpipe) [ "$W" = 0 ] && theory=$(awk -v p=$P -v m=$M 'BEGIN{printf "%.1f", 100*(1-(p-1)/(m+p-1))}') || theory="-";;
            *) theory=$(awk -v p=$P -v m=$M 'BEGIN{printf "%.1f", 100*(1-(p-1)/(m+p-1))}');;
        esac
        used=$(grep -o 'W = ceil.* = [0-9]*' "$TMP/log.txt" | awk '{print $NF}'); used=${used:-$W}
        sim=$(sim_util "$sched" "$used" "$beta")
        grep '^{"step"' "$TMP/out/log.jsonl" | awk -v steps="$STEPS" -v th="$theory" -v s="$sched" -v w="$W" -v b="$beta" -v used="$used" -v sim="${sim:--}" '
            { match($0, /"step": [0-9]+/); step = substr($0, RSTART + 8, RLENGTH - 8) + 0
              if (step < 2 || step >= steps) next
              match($0, /"bubble": [0-9.]+/); bub += substr($0, RSTART + 10, RLENGTH - 10); n++
              match($0, /"staleness": [0-9]+/); st = substr($0, RSTART + 13, RLENGTH - 13) + 0; if (st > smax) smax = st
              match($0, /"ms": [0-9.]+/); ms += substr($0, RSTART + 6, RLENGTH - 6) }
            END { printf "%-8s %5s %5s %9.1f %9s %9s %6d %6s %9.1f\n", s, w, b, 100 * (1 - bub / n), sim == "-" ? sim : sprintf("%.1f", sim), th, smax, used, ms / n }'
    done
done
