#!/usr/bin/env bash
# Installs what the build and the tests need and this machine lacks (Debian packages): a C
# compiler and make, zlib, libyaml, Open MPI, python3, and any package named as an argument (CI
# names clang). As root it runs apt-get; otherwise it prints the exact command and exits 1.
# Usage: scripts/ensure_deps.sh [package...]        (make test runs it first)
set -u
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"; cli_positional ensure_deps "$@"
need=()
want() { for p in "$@"; do [[ " ${need[*]-} " == *" $p "* ]] || need+=("$p"); done; }
has_header() { printf '#include <%s>\n' "$1" | cc -E -x c - >/dev/null 2>&1; }

command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || want build-essential
has_header zlib.h || want zlib1g-dev
has_header yaml.h || want libyaml-dev
command -v mpicc >/dev/null 2>&1 || want libopenmpi-dev openmpi-bin
command -v mpirun >/dev/null 2>&1 || want openmpi-bin
command -v python3 >/dev/null 2>&1 || want python3
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || want "$p"
done
[ ${#need[@]} -eq 0 ] && exit 0

cmd="apt-get install -y ${need[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "tdpipe: this machine lacks what the build and tests need; on Debian: $cmd (no apt-get here: install the same by hand)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "tdpipe: this machine lacks what the build and tests need. Run:  sudo $cmd  (then make test again)" >&2
    exit 1
fi
echo "tdpipe: installing ${need[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null || { echo "tdpipe: $cmd failed" >&2; exit 1; }
