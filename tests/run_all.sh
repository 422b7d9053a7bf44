#!/usr/bin/env bash
# Runs every C test binary (build/tests/test_*) and shell test (tests/test_*.sh), sums their
# "N passed, N failed" lines, and ends with the total. A test that exits non-zero without a tally counts as one failure.
cd "$(dirname "$0")/.." || exit 1
total_p=0; total_f=0
for t in build/tests/test_* tests/test_*.sh; do
    [ -e "$t" ] || continue
    case "$t" in *.d) continue;; esac
    echo "=== $t"
    start=$(date +%s)
    if [[ "$t" == *.sh ]]; then bash "$t" >"/tmp/tdpipe_run.$$" 2>&1; else "$t" >"/tmp/tdpipe_run.$$" 2>&1; fi
    rc=$?
    cat "/tmp/tdpipe_run.$$"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "/tmp/tdpipe_run.$$" | tail -1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
        [ $rc -ne 0 ] && [ "$f" -eq 0 ] && f=1
    else
        p=0; f=1; echo "FAIL $t exited $rc without a tally"
    fi
    echo "--- $t: $p passed, $f failed ($(( $(date +%s) - start )) s)"
    total_p=$((total_p + p)); total_f=$((total_f + f))
done
rm -f "/tmp/tdpipe_run.$$"
echo "$total_p passed, $total_f failed"
[ $total_f -eq 0 ]
