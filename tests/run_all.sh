#!/usr/bin/env bash
# Runs every C test binary (build/tests/test_*) and shell test (tests/test_*.sh), sums their
# "N passed, N failed" lines, and ends with the total. A test that exits non-zero without a tally
# counts as one failure, and so does a sanitizer's report in its output.
# Usage: tests/run_all.sh [--c-only] [BUILD_DIR]   (make sanitize: the C tests of build-asan/)
cd "$(dirname "$0")/.." || exit 1
shell_tests=tests/test_*.sh
if [ "${1:-}" = "--c-only" ]; then shell_tests=; shift; fi
build=${1:-build}
total_p=0; total_f=0
# GPT-2's tokenizer files for the tests that read them (GPT2_DIR, ../shared/data/gpt2 or a download)
bash dev/data/get_gpt2_tokenizer.sh ${GPT2_DIR:-} || echo "note: the tests that need GPT-2's tokenizer files will fail"
# Tiny Shakespeare's text for tests/test_tokenizer (TINYSHAKESPEARE, ../shared/data/tinyshakespeare.txt
# or data/tinyshakespeare/input.txt, which prepare_tinyshakespeare.sh --text-only fills or downloads)
if [ -z "${TINYSHAKESPEARE:-}" ]; then
    bash dev/data/prepare_tinyshakespeare.sh --text-only >/dev/null 2>&1 ||
        echo "note: Tiny Shakespeare's text is not here and its download failed, so test_tokenizer will fail: set TINYSHAKESPEARE=file (char-rnn's data/tinyshakespeare/input.txt) or put the file at data/tinyshakespeare/input.txt"
fi
for t in "$build"/tests/test_* $shell_tests; do
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
    if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "/tmp/tdpipe_run.$$"; then
        f=$((f + 1)); echo "FAIL $t: a sanitizer report (above)"
    fi
    echo "--- $t: $p passed, $f failed ($(( $(date +%s) - start )) s)"
    total_p=$((total_p + p)); total_f=$((total_f + f))
done
rm -f "/tmp/tdpipe_run.$$"
echo "$total_p passed, $total_f failed"
[ $total_f -eq 0 ]
