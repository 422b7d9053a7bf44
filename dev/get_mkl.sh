#!/usr/bin/env bash
# Intel's oneMKL for bench_cpu's library comparison, from its PyPI wheels (mkl, mkl-include), unpacked
# into DIR as DIR/include/mkl.h and DIR/lib/libmkl_rt.so.*: then `make bench-mkl MKL=DIR`. Nothing of
# it is linked into the trainer; the default build never needs it.
#
# usage: dev/get_mkl.sh DIR [version (default: the newest on PyPI)]
set -euo pipefail
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional get_mkl "$@"
cli_need get_mkl 1 "dev/get_mkl.sh DIR [version]" "$@"
DIR=$1
VER=${2:-}
if [ -f "$DIR/include/mkl.h" ] && ls "$DIR"/lib/libmkl_rt.so* >/dev/null 2>&1; then
    echo "get_mkl: $DIR already holds MKL"
    exit 0
fi
command -v pip3 >/dev/null || { echo "get_mkl: needs pip3 (python3-pip) to download Intel's wheels" >&2; exit 1; }
TMP=$(mktemp -d /tmp/get_mkl.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
pip3 download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 -d "$TMP" "mkl${VER:+==$VER}" "mkl-include${VER:+==$VER}" ||
    { echo "get_mkl: pip could not download mkl and mkl-include${VER:+ $VER} from PyPI" >&2; exit 1; }
mkdir -p "$TMP/x" "$DIR/include" "$DIR/lib"
for w in "$TMP"/*.whl; do python3 -m zipfile -e "$w" "$TMP/x"; done
# a wheel's files sit under NAME-VERSION.data/data/{include,lib}
cp -r "$TMP"/x/mkl_include-*.data/data/include/. "$DIR/include/"
cp -r "$TMP"/x/mkl-*.data/data/lib/. "$DIR/lib/"
[ -f "$DIR/include/mkl.h" ] && ls "$DIR"/lib/libmkl_rt.so* >/dev/null 2>&1 || { echo "get_mkl: the wheels did not hold mkl.h and libmkl_rt" >&2; exit 1; }
echo "get_mkl: MKL $(ls "$TMP"/mkl-2*.whl | sed 's/.*mkl-\([^-]*\)-.*/\1/') in $DIR"
