#!/usr/bin/env bash
# Is a matmul change faster? Paired A/B steps (dev/bench_matmul_ab.c): variant a is this checkout's
# llmc/matmul.c, b and c the files given (e.g. an older one: git show HEAD~1:llmc/matmul.c > /tmp/old.c).
# A ratio below 1 with both quartiles below 1 is a gain that the machine's noise does not explain.
#
# usage: dev/bench_matmul_ab.sh [--rounds N (default 30)] [--small] B.c [C.c]
set -euo pipefail
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"
cd "$(dirname "$0")/.."
ROUNDS=30 SMALL=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
    --small) SMALL=small; shift ;;
    -*) echo "bench_matmul_ab: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: dev/bench_matmul_ab.sh [--rounds N] [--small] B.c [C.c]" >&2; exit 2; }
for f in "$@"; do [ -f "$f" ] || { echo "bench_matmul_ab: $f: no such file" >&2; exit 1; }; done
# -W: rebuilt whatever the variants' timestamps, so no binary of other variants is reused
make -s -W dev/bench_matmul_ab.c build/dev/bench_matmul_ab AB_B="$1" AB_C="${2:-$1}" >/dev/null
echo "# bench_matmul_ab: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "# command: dev/bench_matmul_ab.sh --rounds $ROUNDS ${SMALL:+--small }$*"
echo "# variants: a = llmc/matmul.c (this checkout), b = $1$([ $# -ge 2 ] && echo ", c = $2")"
build/dev/bench_matmul_ab "$ROUNDS" $(($# + 1)) $SMALL
