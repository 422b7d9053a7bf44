#!/usr/bin/env bash
# Here, before a GPU run: everything scripts/gpu_check.sh needs on a device machine that may have no
# compiler headers, no Open MPI and no network (../shared/gpu_first_run.md): the CUDA binaries built
# for a portable x86-64 (-march=x86-64-v3), the Tiny Shakespeare shards, the small shared libraries
# the binaries load (.devlibs/) and a relocatable copy of this machine's Open MPI launcher and its
# plugins (.devmpi/, found by gpu_check.sh through OPAL_PREFIX when the device has no mpirun). The
# device's own CUDA provides cuBLAS, and its NCCL (libnccl.so.2, too large to carry) is looked for
# there. Prints the paths to carry and their size. A later `make` here rebuilds for this machine.
# Usage: scripts/gpu_prepare.sh (env JOBS: make's -j, default nproc)
set -eu
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"
[ $# -eq 0 ] || { echo "gpu_prepare: takes no arguments (got $1; --help for the usage)" >&2; exit 1; }
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
echo "# gpu_prepare: building for x86-64-v3 (make ARCH=x86-64-v3)"
make -j"$JOBS" ARCH=x86-64-v3 cuda train_tdpipe build/dev/data/make_shards build/dev/sim_replay >/dev/null
ARCH=x86-64-v3 bash dev/data/prepare_tinyshakespeare.sh >/dev/null # (its make, with the same ARCH, rebuilds nothing)
BINS="train_tdpipe test_gpt2cu build/test_gpt2cu_fp32 $(ls build/dev/cuda/*)"

# every shared library a file loads that is not the C library's own, the GPU driver or CUDA's (the
# device has those, matched to its driver): copied into dir, links followed
copy_deps() { # dir files...
    local dir=$1
    shift
    ldd "$@" 2>/dev/null | awk '/=> \// { print $1, $3 }' | sort -u | while read -r name path; do
        case $name in
        libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so* | libcublas* | libnccl* | libcudart*) ;;
        *) [ -e "$dir/$name" ] || cp -L "$path" "$dir/$name" ;;
        esac
    done
}
rm -rf .devlibs .devmpi
mkdir -p .devlibs
copy_deps .devlibs $BINS

# Open MPI, laid out under .devmpi as under its prefix /usr (Debian's libdir and pkglibdir are
# prefix-relative: OPAL_PREFIX moves them), PMIx beside it (PMIX_PREFIX), their plugins'
# libraries into .devlibs
if command -v orterun >/dev/null; then
    ML=/usr/lib/x86_64-linux-gnu
    mkdir -p .devmpi/bin .devmpi/lib/x86_64-linux-gnu .devmpi/share
    cp -L "$(command -v orterun)" .devmpi/bin/orterun
    ln -s orterun .devmpi/bin/mpirun
    cp -L "$(command -v orted)" .devmpi/bin/orted
    # the plugins alone (the libraries go to .devlibs), without the transports one GPU and loopback do
    # not use (UCX, libfabric, PSM, verbs: excluded by Debian's parameters anyway) and Java
    mkdir -p .devmpi/lib/x86_64-linux-gnu/openmpi/lib
    cp -rL $ML/openmpi/lib/openmpi3 .devmpi/lib/x86_64-linux-gnu/openmpi/lib/
    rm -f .devmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*{ucx,ofi,psm,openib,verbs,usnic,portals,java,uct}*
    cp -rL /usr/share/openmpi .devmpi/share/
    if [ -d $ML/pmix2 ]; then
        mkdir -p .devmpi/pmix2/lib
        cp -rL $ML/pmix2/lib/pmix .devmpi/pmix2/lib/
        cp -rL $ML/pmix2/share .devmpi/pmix2/
    fi
    copy_deps .devlibs .devmpi/bin/orterun .devmpi/bin/orted .devmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so $(ls .devmpi/pmix2/lib/pmix/*.so 2>/dev/null)
    # Debian's /etc/openmpi/openmpi-mca-params.conf (sysconfdir is absolute: it does not move), as a file gpu_check.sh names
    grep -v '^#' /etc/openmpi/openmpi-mca-params.conf 2>/dev/null | grep . > .devmpi/mca-params.conf || true
else
    echo "gpu_prepare: no Open MPI here (apt-get install openmpi-bin): the device's own mpirun, if any, will have to do" >&2
fi
echo "# carry: train_tdpipe test_gpt2cu build data .devlibs .devmpi ($(du -scm train_tdpipe test_gpt2cu build data .devlibs .devmpi 2>/dev/null | tail -1 | cut -f1) MiB; the limit is 64)"
echo "# then on the device, in one call with timeout_s 600: SKIP_BUILD=1 bash scripts/gpu_check.sh --part AB --budget 570 \$OUT/gpu_check_AB.log"
