#!/usr/bin/env bash
# Runs each fuzz target ($FUZZ_BUILD, default build-fuzz/) SECONDS under nice -n 19, one at a time,
# from its seeds and grown corpus in $FUZZ_WORK (default the same), printing executions and crashes
# (crash, hang > 10 s, leak, failed property; inputs kept in crashes/<target>/); exit 1 if any.
# Usage: dev/fuzz/run.sh SECONDS TARGET...
set -u
source "$(dirname "$0")/../../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional fuzz/run.sh "$@"
cli_need fuzz/run.sh 2 "dev/fuzz/run.sh SECONDS TARGET..." "$@"
cli_count fuzz/run.sh SECONDS "$1" 1
cd "$(dirname "$0")/../.." || exit 1
secs=$1; shift
B=${FUZZ_BUILD:-build-fuzz}
W=${FUZZ_WORK:-$B}
for t in "$@"; do # every target named is there before any runs
    [ -x "$B/fuzz_$t" ] || { echo "fuzz/run.sh: no fuzz target '$t': $B/fuzz_$t is not built (make fuzz-build)" >&2; exit 1; }
done
[ -d "$W/seeds" ] || build/dev/fuzz/make_seeds "$W/seeds" || exit 1
crashed=0
for t in "$@"; do
    mkdir -p "$W/corpus/$t" "$W/crashes/$t"
    cp -n "$W/seeds/$t"/* "$W/corpus/$t/" 2>/dev/null
    log="$W/fuzz_$t.log"
    before=$(ls "$W/crashes/$t" | wc -l)
    nice -n 19 "$B/fuzz_$t" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$W/crashes/$t/" "$W/corpus/$t" >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
    found=$(( $(ls "$W/crashes/$t" | wc -l) - before ))
    [ $rc -ne 0 ] && [ $found -eq 0 ] && found=1 # died without an artifact: still a crash
    echo "fuzz $t: ${execs:-?} executions in $secs s, $found crashes, corpus $(ls "$W/corpus/$t" | wc -l) inputs (log $log)"
    if [ $found -ne 0 ]; then
        crashed=1
        grep -m3 -E 'ERROR|runtime error|deadly|Timeout|leak' "$log" | sed 's/^/    /'
    fi
done
exit $crashed
