#!/usr/bin/env bash
# Every long flag of --help given each of a set of odd values (empty, signs, overflow, NaN, Inf,
# hex, junk after a number, stray commas), two steps of the built-in model each: a run must either
# train (exit 0) or be refused in at most three lines of stderr that name the trainer (exit 1); any
# other exit (a crash, an abort, a timeout) or a refusal that does not say who refuses is reported.
# One line a finding ("crash", "unnamed", "long") and one a value the trainer took ("took"), then a
# total; exit 1 where anything is found. About 800 runs: 4-7 minutes on 2 cores.
# usage: dev/flag_values.sh [binary (default ./train_tdpipe)]
set -u
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional flag_values "$@"
BIN=$(realpath -- "${1:-./train_tdpipe}" 2> /dev/null || echo "${1:-./train_tdpipe}") # (each run starts in a fresh folder)
[ -x "$BIN" ] || { echo "flag_values: $BIN: no such program (make builds ./train_tdpipe)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/flag_values.XXXXXX); trap 'rm -rf "$TMP"' EXIT
flags=$("$BIN" --help | grep -o '^ *\(-., \)\?--[a-z0-9-]*' | grep -o -- '--[a-z0-9-]*' | grep -vx -- '--help')
values=("" "-1" "0" "-0" "2.5" "1e309" "1e-320" "nan" "inf" "abc" "3junk" " 3" "0x10" "99999999999"
    "-9223372036854775809" "1,2," "," "1,,2" "auto,1")
found=0 runs=0
for f in $flags; do
    for v in "${values[@]}"; do
        rm -rf "$TMP/cwd" && mkdir "$TMP/cwd"
        # (the flag tried comes last, so that it wins where it is one of these)
        (cd "$TMP/cwd" && timeout 60 "$BIN" -x 2 -v 0 -s 0 -o out "$f" "$v" > "$TMP/stdout" 2> "$TMP/stderr" < /dev/null)
        rc=$? runs=$((runs + 1))
        said=$(head -c 160 "$TMP/stderr" | head -1)
        case $rc in
        0) echo "took    $f '$v'" ;;
        1) if ! grep -q "train_tdpipe" "$TMP/stderr"; then echo "unnamed $f '$v' :: $said"; found=$((found + 1))
           elif [ "$(wc -l < "$TMP/stderr")" -gt 3 ]; then echo "long    $f '$v' ($(wc -l < "$TMP/stderr") lines) :: $said"; found=$((found + 1)); fi ;;
        *) echo "crash   $f '$v' exit $rc :: $said"; found=$((found + 1)) ;;
        esac
    done
done
echo "flag_values: $runs runs ($(echo $flags | wc -w) flags x ${#values[@]} values), $found findings"
[ "$found" -eq 0 ]
