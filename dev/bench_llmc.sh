#!/usr/bin/env bash
# llm.c's CPU trainer beside tdpipe's, back to back on the same GPT-2 124M model file and the same
# Tiny Shakespeare shard (B = 4, T = 64, llm.c's fixed shape): each one's median step time and the ratio,
# and tdpipe's step as a share of the machine's FMA peak measured in the same run.
#
# usage: dev/bench_llmc.sh LLMC_DIR [steps (default 6)] [threads (default 2)]
# LLMC_DIR is a checkout of https://github.com/karpathy/llm.c. Its train_gpt2.c is built by its own
# Makefile (-Ofast -march=native, OpenMP) in a copy under a temporary folder, so the checkout is not
# written to. tdpipe writes the model (a fresh d12 after one step, in llm.c's fp32 format); llm.c's
# trainer reads fixed paths, given it as links in its run folder. llm.c validates at step 0 and would
# run 40 steps: it is stopped once it has printed steps + 1 step lines. The first step of each is
# left out of the median (llm.c allocates its AdamW state there).
set -euo pipefail
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional bench_llmc "$@"
cd "$(dirname "$0")/.."
cli_need bench_llmc 1 "dev/bench_llmc.sh LLMC_DIR [steps] [threads]" "$@"
LLMC=$1
STEPS=${2:-6}
THREADS=${3:-2}
[ -f "$LLMC/train_gpt2.c" ] && [ -f "$LLMC/Makefile" ] || { echo "bench_llmc: $LLMC has no train_gpt2.c and Makefile (an llm.c checkout?)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/bench_llmc.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=$THREADS

make -s train_tdpipe >/dev/null
bash dev/data/prepare_tinyshakespeare.sh >/dev/null
TRAIN=data/tinyshakespeare/ts_train.bin VAL=data/tinyshakespeare/ts_val.bin

# llm.c's trainer, built its way
mkdir -p "$TMP/llmc"
(cd "$LLMC" && tar --exclude=.git -cf - .) | (cd "$TMP/llmc" && tar xf -)
make -s -C "$TMP/llmc" train_gpt2 >"$TMP/llmc_build.txt" 2>&1 || { cat "$TMP/llmc_build.txt" >&2; exit 1; }
FLAGS=$(make -s -n -C "$TMP/llmc" -B train_gpt2 2>/dev/null | grep -m1 train_gpt2.c || true)

# the model: tdpipe's fresh GPT-2 124M (d12), in llm.c's format
./train_tdpipe -e d12 -i "$TRAIN" -b 4 -t 64 -x 1 -v 0 -s 0 --device cpu -o "$TMP/init" >"$TMP/init.txt" 2>&1
mkdir -p "$TMP/run/dev/data/tinyshakespeare"
ln -s "$TMP/init/model.bin" "$TMP/run/gpt2_124M.bin"
ln -s "$PWD/$TRAIN" "$TMP/run/dev/data/tinyshakespeare/tiny_shakespeare_train.bin"
ln -s "$PWD/$VAL" "$TMP/run/dev/data/tinyshakespeare/tiny_shakespeare_val.bin"

# median of the step times (ms) on stdin, one a line, the first left out
median() { tail -n +2 | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# llm.c: "step N: train loss L (took T ms)", stopped after STEPS + 1 of them (line-buffered: its
# stdout is a pipe here, which stdio would otherwise fill 4 KiB at a time)
command -v stdbuf >/dev/null || { echo "bench_llmc: needs stdbuf (coreutils)" >&2; exit 1; }
(cd "$TMP/run" && stdbuf -oL "$TMP/llmc/train_gpt2" 2>&1 | {
    k=0
    while IFS= read -r line; do # read line by line (awk implementations may read ahead in blocks)
        echo "$line"
        case "$line" in "step "*": train loss"*) k=$((k + 1)); [ $k -gt "$STEPS" ] && break ;; esac
    done
}) >"$TMP/llmc.txt" || true
LLMC_MS=$(grep -o 'took [0-9.]* ms' "$TMP/llmc.txt" | awk '{ print $2 }' | median)

# tdpipe on the same model and shard: ms per step from its log
./train_tdpipe -e "$TMP/init/model.bin" -i "$TRAIN" -b 4 -t 64 -x $((STEPS + 1)) -v 0 -s 0 --device cpu -o "$TMP/td" >"$TMP/td.txt" 2>&1
TD_MS=$(grep -o '"ms": [0-9.]*' "$TMP/td/log.jsonl" | awk '{ print $2 }' | median)

# the machine's FMA peak and the step's FLOPs, in this run: bench_cpu measures the peak (twice; the
# higher) and counts a 124M step's FLOPs at B 4, T 64 through its profile (the shape above)
make -s build/dev/bench_cpu >/dev/null
build/dev/bench_cpu 3 --no-matmul >"$TMP/cpu.txt" 2>&1 || { cat "$TMP/cpu.txt" >&2; exit 1; }
PEAK=$(grep -Eo 'FMA (\(measured\)|measured again before the breakdown:) [0-9.]+' "$TMP/cpu.txt" | awk '{ v = $NF + 0; if (v > m) m = v } END { print m }')
GFLOP=$(grep -Eo 'total +[0-9.]+ GFLOP per step' "$TMP/cpu.txt" | awk '{ print $2 }')
[ -n "$PEAK" ] && [ -n "$GFLOP" ] || { echo "bench_llmc: no peak or FLOP count in bench_cpu's output" >&2; cat "$TMP/cpu.txt" >&2; exit 1; }

echo "# bench_llmc: $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads, $(date -u +%F)"
echo "# llm.c $(git -C "$LLMC" rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)'), built: ${FLAGS:-see its Makefile}"
echo "# GPT-2 124M (tdpipe's d12 in llm.c's format), Tiny Shakespeare, B 4, T 64; median of steps 2..$((STEPS + 1))"
printf '  llm.c   train_gpt2.c    %9.1f ms/step\n' "$LLMC_MS"
printf '  tdpipe  train_tdpipe    %9.1f ms/step\n' "$TD_MS"
awk -v a="$LLMC_MS" -v b="$TD_MS" 'BEGIN { printf "  ratio   llm.c / tdpipe  %9.2fx\n", a / b }'
awk -v ms="$TD_MS" -v g="$GFLOP" -v p="$PEAK" 'BEGIN { printf "  tdpipe  %.1f GFLOP a step: %.1f GFLOP/s, %.1f%% of the FMA peak (%.1f GFLOP/s, bench_cpu in this run)\n", g, g / ms * 1e3, 100 * g / ms * 1e3 / p, p }'
