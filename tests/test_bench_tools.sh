#!/usr/bin/env bash
# The benchmark entry points' refusals: what make bench-mkl / bench-llmc, dev/get_mkl.sh,
# dev/bench_llmc.sh and dev/bench_matmul_ab.sh say, and that they stop, when given nothing or the
# wrong thing; and the dev programs' command lines (dev/dev_cli.h): --help prints the usage and
# exits 0, a bad argument is named before anything runs (the benchmarks themselves print timings
# and are not run here).
# Run from the repository root after `make`.
source tests/lib.sh

refuse "make bench-mkl without MKL=" "give MKL=dir" make --no-print-directory bench-mkl
mkdir -p "$TMP/empty"
refuse "make bench-mkl MKL= a folder without MKL" "MKL=$TMP/empty has no include/mkl.h" make --no-print-directory bench-mkl MKL="$TMP/empty"
refuse "make bench-llmc without LLMC=" "give LLMC=path" make --no-print-directory bench-llmc

refuse "get_mkl.sh without a folder" "get_mkl: missing arguments: usage: dev/get_mkl.sh DIR" bash dev/get_mkl.sh
# a folder that already holds MKL is left as it is, with no download
mkdir -p "$TMP/mkl/include" "$TMP/mkl/lib" && touch "$TMP/mkl/include/mkl.h" "$TMP/mkl/lib/libmkl_rt.so.3"
held_ok() { bash dev/get_mkl.sh "$TMP/mkl" | grep -q "already holds MKL"; }
check "get_mkl.sh leaves a folder that holds MKL" held_ok

refuse "bench_llmc.sh without a checkout" "bench_llmc: missing arguments: usage: dev/bench_llmc.sh LLMC_DIR" bash dev/bench_llmc.sh
refuse "bench_llmc.sh on a folder that is not llm.c" "has no train_gpt2.c and Makefile" bash dev/bench_llmc.sh "$TMP/empty"

refuse "bench_matmul_ab.sh without a variant" "usage: dev/bench_matmul_ab.sh" bash dev/bench_matmul_ab.sh
refuse "bench_matmul_ab.sh with an unknown option" "unknown option --fast" bash dev/bench_matmul_ab.sh --fast x.c
refuse "bench_matmul_ab.sh with a missing variant" "$TMP/none.c: no such file" bash dev/bench_matmul_ab.sh "$TMP/none.c"
# every dev program answers --help with its usage, on stdout, exit 0, having run nothing (the usage
# is the first line it prints)
helps() { "$1" --help > "$TMP/help" 2>&1 && head -1 "$TMP/help" | grep -q "^usage: .*$(basename "$1")"; }
for prog in bench_cpu bench_sumsq check_vec_math bench_checkpoint bench_matmul_ab sim_replay sim_schedules sim_cluster; do
    check "$prog --help prints its usage" helps build/dev/$prog
done
[ -x build/dev/bench_dp_sync ] && check "bench_dp_sync --help prints its usage" helps build/dev/bench_dp_sync

refuse "bench_cpu with 0 steps" "bench_cpu: steps 0: expected a whole number from 1" build/dev/bench_cpu 0
refuse "bench_cpu with steps that are not a number" "bench_cpu: steps five: expected a whole number" build/dev/bench_cpu five
refuse "bench_cpu with an unknown option" "bench_cpu: unexpected argument '--fast'" build/dev/bench_cpu 3 --fast
refuse "bench_cpu with both modes" "give one of them" build/dev/bench_cpu 3 --small-only --no-matmul
refuse "bench_sumsq with 0 reps" "bench_sumsq: reps 0: expected a whole number from 1" build/dev/bench_sumsq 0
refuse "check_vec_math with stride 0" "check_vec_math: stride 0: expected a whole number from 1" build/dev/check_vec_math 0
refuse "check_vec_math with two arguments" "unexpected argument '7'" build/dev/check_vec_math 3 7
refuse "bench_checkpoint with nothing to save" "give a checkpoint or --synthetic" build/dev/bench_checkpoint
refuse "bench_checkpoint with a scale above 1" "--scale 2: expected a share of 124M's size" build/dev/bench_checkpoint --synthetic --scale 2
refuse "bench_checkpoint with --dir and no folder" "--dir needs a value" build/dev/bench_checkpoint --synthetic --dir
refuse "bench_checkpoint with an unknown option" "unknown option --fast" build/dev/bench_checkpoint --synthetic --fast
refuse "bench_matmul_ab with 3 rounds" "ROUNDS 3: expected a whole number from 4" build/dev/bench_matmul_ab 3 2
refuse "bench_matmul_ab with a fourth argument it does not know" "unexpected argument 'big'" build/dev/bench_matmul_ab 8 2 big
[ -x build/dev/bench_dp_sync ] && refuse "bench_dp_sync with 0 reps" "bench_dp_sync: reps 0: expected a whole number" build/dev/bench_dp_sync 0
refuse "sim_schedules with -P 0" "sim_schedules: -P 0: expected a whole number from 1" build/dev/sim_schedules -P 0
refuse "sim_schedules with an empty window" "-W 1,,2: expected up to 32 windows" build/dev/sim_schedules -W 1,,2
refuse "sim_schedules with a flag and no value" "-n needs a value" build/dev/sim_schedules -n
refuse "sim_schedules with an unknown flag" "unknown flag -Q" build/dev/sim_schedules -Q 1
refuse "sim_replay with stages that are not a number" "--stages two: expected a whole number from 1" build/dev/sim_replay --stages two
refuse "sim_replay with a negative latency" "--latency -1: expected a number >= 0" build/dev/sim_replay --latency -1
refuse "sim_replay with a flag and no value" "--steps needs a value" build/dev/sim_replay --stages 2 --steps
refuse "sim_replay with an unknown option" "unknown option --fast" build/dev/sim_replay --fast 1

# the scripts likewise (scripts/cli.sh): --help prints the header with its usage and runs nothing, an
# option a script does not take is refused by name before anything runs
script_helps() { (cd "$TMP/empty" && bash "$OLDPWD/$1" --help) > "$TMP/help" 2>&1 && grep -qi "usage" "$TMP/help" && [ -z "$(ls -A "$TMP/empty")" ]; }
for s in scripts/bench_convergence.sh scripts/bench_dp_sync.sh scripts/bench_schedules.sh scripts/ensure_deps.sh scripts/gpu_check.sh \
    scripts/gpu_prepare.sh scripts/sim_vs_measured.sh scripts/reproduce_tables.sh dev/bench_llmc.sh dev/bench_matmul_ab.sh dev/get_mkl.sh \
    dev/golden_runs.sh dev/flag_sweep.sh dev/signal_sweep.sh dev/flag_values.sh dev/data/get_gpt2_tokenizer.sh dev/data/prepare_tinyshakespeare.sh dev/fuzz/run.sh; do
    check "$s --help prints its usage and runs nothing" script_helps "$s"
    refuse "$s refuses an option it does not take" "(unknown option|unexpected argument|takes no arguments).*--bogus" bash "$s" --bogus
done
refuse "fuzz/run.sh with no arguments" "fuzz/run.sh: missing arguments: usage: dev/fuzz/run.sh SECONDS TARGET" bash dev/fuzz/run.sh
check "  and stops there (one line: nothing after the usage)" test "$(wc -l < "$TMP/err")" -eq 1
refuse "fuzz/run.sh with seconds that are not a number" "fuzz/run.sh: SECONDS x: expected a whole number >= 1" bash dev/fuzz/run.sh x shard
refuse "fuzz/run.sh with seconds +5 (a number to bash's test, not a whole number's digits)" "fuzz/run.sh: SECONDS \+5: expected a whole number >= 1" \
    env FUZZ_BUILD="$TMP/empty" bash dev/fuzz/run.sh +5 nosuch
refuse "flag_sweep.sh with cases that are not a number" "flag_sweep: CASES x: expected a whole number >= 1" bash dev/flag_sweep.sh x
refuse "flag_sweep.sh with a binary that is not there" "flag_sweep: $TMP/empty/nosuch: no such program" bash dev/flag_sweep.sh 1 1 "$TMP/empty/nosuch"
refuse "flag_sweep.sh with no make_shards for its shards" "flag_sweep: $TMP/empty/nosuch: no such program \(make builds it\)" \
    env MAKE_SHARDS="$TMP/empty/nosuch" bash dev/flag_sweep.sh 1 1
refuse "signal_sweep.sh with a seed that is not a number" "signal_sweep: SEED 1e3: expected a whole number >= 0" bash dev/signal_sweep.sh 1 1e3
refuse "signal_sweep.sh with a binary that is not there" "signal_sweep: $TMP/empty/nosuch: no such program" bash dev/signal_sweep.sh 1 1 "$TMP/empty/nosuch"
refuse "flag_values.sh with a binary that is not there" "flag_values: $TMP/empty/nosuch: no such program" bash dev/flag_values.sh "$TMP/empty/nosuch"
refuse "bench_convergence.sh with a one-dash option" "bench_convergence: unknown option -q" bash scripts/bench_convergence.sh -q
refuse "fuzz/run.sh with a target that is not built" "fuzz/run.sh: no fuzz target 'nosuch'" env FUZZ_BUILD="$TMP/empty" bash dev/fuzz/run.sh 1 nosuch
refuse "bench_convergence.sh with data it does not know" "'tiny': expected builtin, shakespeare or both" bash scripts/bench_convergence.sh tiny
refuse "bench_convergence.sh with steps that are not a number" "steps x: expected a whole number" bash scripts/bench_convergence.sh both x
refuse "bench_schedules.sh with too few steps" "steps 2: expected a whole number >= 3" bash scripts/bench_schedules.sh 2
refuse "bench_dp_sync.sh with a second argument" "unexpected argument 5" bash scripts/bench_dp_sync.sh --quick 5
refuse "gpu_check.sh with two log files" "one log file at most" bash scripts/gpu_check.sh a.log b.log
refuse "gpu_check.sh with a budget that is not a number" "budget 9m: expected a whole number" bash scripts/gpu_check.sh --budget 9m
# out of --budget time, every step is skipped (not started and cut off by the device call's own
# limit), and the summary still names them (the first, the CUDA build, is skipped too, and part A
# stops there: the same whether or not this machine has built the CUDA binaries)
budget_skips() {
    bash scripts/gpu_check.sh --part A --budget 1 "$TMP/gpu_budget.log" >/dev/null 2>&1
    local rc=$? n
    n=$(grep -c "SKIPPED (out of time" "$TMP/gpu_budget.log")
    [ "$n" -ge 1 ] && [ "$rc" -eq "$n" ] && ! grep -q "^=== .*: exit " "$TMP/gpu_budget.log" &&
        [ "$(grep -c '^=== ' "$TMP/gpu_budget.log")" -eq $((n + 1)) ] && grep -q "^failed steps: build_cuda(skipped)" "$TMP/gpu_budget.log"
}
check "gpu_check.sh --budget 1 skips every step and still writes the summary" budget_skips
# the CUDA benchmarks read their arguments before they touch a GPU, so this is checked where nvcc built them
if [ -x build/dev/cuda/matmul ]; then
    for prog in matmul attention layernorm; do check "cuda/$prog --help prints its usage" helps build/dev/cuda/$prog; done
    refuse "cuda/matmul with N 0" "matmul: N 0: expected a whole number from 1" build/dev/cuda/matmul 0
    refuse "cuda/attention with heads that do not divide C" "C 768 is not a multiple of NH 5" build/dev/cuda/attention 8 1024 5 768
    refuse "cuda/layernorm with N and no C" "expected no arguments or both of N C, got 1" build/dev/cuda/layernorm 5
fi
# the GPU checks, likewise: gpu_check.sh calls them with fixed arguments, a person by hand
if [ -x build/dev/cuda/nccl_check ] && [ -x test_gpt2cu ]; then
    for prog in test_gpt2cu build/test_gpt2cu_fp32 build/dev/cuda/nccl_check build/dev/cuda/quant_check build/dev/cuda/compensation_check build/dev/cuda/dp_sync_check; do
        check "$prog --help prints its usage" helps ./$prog
        refuse "$prog with an argument it does not take" "unexpected argument '--bogus'" ./$prog --bogus
    done
    refuse "test_gpt2cu --matmul with no value" "test_gpt2cu: --matmul needs a value" ./test_gpt2cu --matmul
    refuse "test_gpt2cu --matmul foo" "--matmul foo: expected tdpipe, tdpipe-mma or cublaslt" ./test_gpt2cu --matmul foo
    refuse "nccl_check --stages 3" "nccl_check: --stages 3: expected a whole number from 1 to 2" build/dev/cuda/nccl_check --stages 3
fi
# the Python tools: --help without their optional packages (PyTorch, tiktoken, matplotlib)
for s in scripts/plot_reproduce.py scripts/dp_exposure.py dev/stale_stability.py scripts/plot_trace.py scripts/plot_log.py scripts/plot_utilisation.py \
    dev/pytorch_reference.py dev/data/tiktoken_reference.py dev/fit_vec_math.py dev/cuda/torch_gpt2_step.py; do
    check "$s --help prints its usage" bash -c "python3 $s --help | grep -qi usage"
done
refuse "dp_exposure.py with too few arguments" "usage: scripts/dp_exposure.py LOG TRACE" python3 scripts/dp_exposure.py log.jsonl
refuse "torch_gpt2_step.py with --steps 3" "the first 3 steps are left out of the mean, so at least 4" python3 dev/cuda/torch_gpt2_step.py --steps 3
refuse "torch_gpt2_step.py with -t 2048" "GPT-2's position table has 1024 rows" python3 dev/cuda/torch_gpt2_step.py -t 2048
refuse "stale_stability.py with a beta1 of 1" "expected one beta1 in \\[0, 1\\), got 1" python3 dev/stale_stability.py 1
finish
