#!/usr/bin/env bash
# scripts/ensure_deps.sh (make test's first step) on simulated machines: PATH holds only the tools
# it uses, so Open MPI can be "missing" without removing it; apt-get and id are stand-ins that
# record their calls, and the fake apt-get "installs" Open MPI by linking the real mpicc/mpirun.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh

# machine NAME MPI UID APT: $TMP/NAME/bin with the basic tools (and Open MPI unless MPI = nompi),
# id saying UID, and apt-get as APT (ok | fail | none)
machine() {
    local m="$TMP/$1"; shift
    mkdir -p "$m/bin"
    for tool in bash cc make python3 dpkg-query grep cat; do ln -s "$(command -v $tool)" "$m/bin/$tool"; done
    if [ "$1" != nompi ]; then for t in mpicc mpirun; do ln -s "$(command -v $t)" "$m/bin/$t"; done; fi
    printf '#!%s\necho %s\n' "$(command -v bash)" "$2" > "$m/bin/id"
    if [ "$3" != none ]; then
        cat > "$m/bin/apt-get" <<APT
#!$(command -v bash)
echo "\$*" >> "$m/apt.log"
[ "$3" = fail ] && exit 100
if [ "\$1" = install ]; then for t in mpicc mpirun; do $(command -v ln) -sf "$(command -v mpicc | xargs dirname)/\$t" "$m/bin/\$t"; done; fi
exit 0
APT
    fi
    chmod +x "$m/bin/"*
    echo "$m"
}
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    fail "this test needs the real Open MPI to stand in for an installed one"; finish; exit
fi
run_on() { local m=$1; shift; PATH="$m/bin" "$m/bin/bash" scripts/ensure_deps.sh "$@"; }

m=$(machine m1 mpi 0 ok)
check "a machine that has everything: nothing to do" run_on "$m"
check "and apt-get is not called" test ! -e "$m/apt.log"

m=$(machine m2 nompi 0 ok)
check "root on a machine without Open MPI: installs it" run_on "$m"
check "and says so on stderr" grep -q "tdpipe: installing libopenmpi-dev openmpi-bin" "$TMP/err"
check "apt-get update, then install of exactly Open MPI's two packages" \
    test "$(cat "$m/apt.log" | tr '\n' '|')" = "update -qq|install -y -qq libopenmpi-dev openmpi-bin|"
check "afterwards mpicc is found on that machine" env PATH="$m/bin" "$m/bin/bash" -c 'command -v mpicc'
check "a second run does nothing more" run_on "$m"
check "(no second install)" test "$(grep -c install "$m/apt.log")" -eq 1

m=$(machine m3 nompi 1000 ok)
refuse "a user without root: prints the exact command and stops" \
    "Run:  sudo apt-get install -y libopenmpi-dev openmpi-bin  \(then make test again\)" run_on "$m"
check "and installs nothing" test ! -e "$m/apt.log"

m=$(machine m4 nompi 0 none)
refuse "no apt-get at all: names the Debian packages" "on Debian: apt-get install -y libopenmpi-dev openmpi-bin" run_on "$m"

m=$(machine m5 nompi 0 fail)
refuse "apt-get failing: said, exit 1" "apt-get install -y libopenmpi-dev openmpi-bin failed" run_on "$m"

m=$(machine m6 mpi 0 ok)
check "an extra package the machine lacks (as CI names clang) is installed" run_on "$m" tdpipe-no-such-package-x
check "by name" grep -q "install -y -qq tdpipe-no-such-package-x" "$m/apt.log"
finish
