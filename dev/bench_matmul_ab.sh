#!/usr/bin/env bash
# Is a matmul change faster? Paired A/B steps (dev/bench_matmul_ab.c): variant a is this checkout's
# llmc/matmul.c, b and c the files given (e.g. an older one: git show HEAD~1:llmc/matmul.c > /tmp/old.c).
# A ratio below 1 with both quartiles below 1 is a gain that the machine's noise does not explain.
#
# usage: dev/bench_matmul_ab.sh [--rounds N (default 30)] [--small] B.c [C.c]
set -euo pipefail
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
make -s build/libtdpipe.a >/dev/null
OUT=build/dev/ab
mkdir -p "$OUT"
CFLAGS="-O3 -march=${ARCH:-native} -fopenmp -std=gnu11 -Wno-psabi -I. -Illmc"
LINK=""
if nm build/libtdpipe.a 2>/dev/null | grep ' U MPI_' >/dev/null; then # the library was built with MPI
    CFLAGS="$CFLAGS $(mpicc --showme:compile) -DTD_MPI"
    LINK=$(mpicc --showme:link)
fi
files=(llmc/matmul.c "$@")
objs=()
for i in 0 1 2; do # three objects always (the program routes to three); with two files, c is b again, unused
    X=(va vb vc); X=${X[$i]}
    src=${files[$i]:-${files[1]}}
    gcc $CFLAGS -c "$src" -o "$OUT/$X.o" -Dmatmul_forward=${X}_matmul_forward -Dmatmul_backward_input=${X}_matmul_backward_input \
        -Dmatmul_backward_weight=${X}_matmul_backward_weight -Dmatmul_profile_split=${X}_matmul_profile_split \
        -Dmatmul_profile_reset=${X}_matmul_profile_reset -Dmatmul_kernel_gflops=${X}_matmul_kernel_gflops
    objs+=("$OUT/$X.o")
done
cp build/libtdpipe.a "$OUT/lib.a"
ar d "$OUT/lib.a" matmul.o
gcc $CFLAGS dev/bench_matmul_ab.c "${objs[@]}" "$OUT/lib.a" -o "$OUT/bench_matmul_ab" -lm -lz -lyaml $LINK
echo "# bench_matmul_ab: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "# command: dev/bench_matmul_ab.sh --rounds $ROUNDS ${SMALL:+--small }$*"
echo "# variants: a = llmc/matmul.c (this checkout)$([ $# -ge 1 ] && echo ", b = $1")$([ $# -ge 2 ] && echo ", c = $2")"
"$OUT/bench_matmul_ab" "$ROUNDS" $(($# + 1)) $SMALL
