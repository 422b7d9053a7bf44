#!/usr/bin/env bash
# Every fuzz target of dev/fuzz/ built in a folder of its own and run FUZZ_SECONDS (default 3) from
# its seeds. Needs clang with libFuzzer (clang libclang-rt-14-dev): without it this is skipped,
# except under CI (CI=true), where .ci/run installs it and a missing clang is a failure.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
printf 'int LLVMFuzzerTestOneInput(const char* d, unsigned long n) { return 0; }\n' > "$TMP/probe.c"
if ! clang -fsanitize=fuzzer,address,undefined "$TMP/probe.c" -o "$TMP/probe" >/dev/null 2>&1; then
    if [ "${CI:-}" = true ]; then fail "clang with libFuzzer is missing (apt-get install clang libclang-rt-14-dev)"
    else echo "SKIPPED fuzz targets: clang with libFuzzer not installed (apt-get install clang libclang-rt-14-dev)"; fi
    finish; exit
fi
targets=$(sed -n 's/^FUZZ_TARGETS *:= *//p' Makefile)
check "the fuzz targets build ($targets)" make --no-print-directory -j2 FUZZ_BUILD="$TMP/fuzz" fuzz-build
for t in $targets; do
    check "fuzz target $t: ${FUZZ_SECONDS:-3} s from the seeds without a crash" \
        env FUZZ_BUILD="$TMP/fuzz" bash dev/fuzz/run.sh "${FUZZ_SECONDS:-3}" "$t"
    sed 's/^/     /' "$TMP/out"
done
finish
