#!/usr/bin/env bash
# The benchmark entry points' refusals: what make bench-mkl / bench-llmc, dev/get_mkl.sh,
# dev/bench_llmc.sh and dev/bench_matmul_ab.sh say, and that they stop, when given nothing or the
# wrong thing (the benchmarks themselves print timings and are not run here).
# Run from the repository root after `make`.
source tests/lib.sh

refuse "make bench-mkl without MKL=" "give MKL=dir" make --no-print-directory bench-mkl
mkdir -p "$TMP/empty"
refuse "make bench-mkl MKL= a folder without MKL" "MKL=$TMP/empty has no include/mkl.h" make --no-print-directory bench-mkl MKL="$TMP/empty"
refuse "make bench-llmc without LLMC=" "give LLMC=path" make --no-print-directory bench-llmc

refuse "get_mkl.sh without a folder" "usage: dev/get_mkl.sh DIR" bash dev/get_mkl.sh
# a folder that already holds MKL is left as it is, with no download
mkdir -p "$TMP/mkl/include" "$TMP/mkl/lib" && touch "$TMP/mkl/include/mkl.h" "$TMP/mkl/lib/libmkl_rt.so.3"
held_ok() { bash dev/get_mkl.sh "$TMP/mkl" | grep -q "already holds MKL"; }
check "get_mkl.sh leaves a folder that holds MKL" held_ok

refuse "bench_llmc.sh without a checkout" "usage: dev/bench_llmc.sh LLMC_DIR" bash dev/bench_llmc.sh
refuse "bench_llmc.sh on a folder that is not llm.c" "has no train_gpt2.c and Makefile" bash dev/bench_llmc.sh "$TMP/empty"

refuse "bench_matmul_ab.sh without a variant" "usage: dev/bench_matmul_ab.sh" bash dev/bench_matmul_ab.sh
refuse "bench_matmul_ab.sh with an unknown option" "unknown option --fast" bash dev/bench_matmul_ab.sh --fast x.c
refuse "bench_matmul_ab.sh with a missing variant" "$TMP/none.c: no such file" bash dev/bench_matmul_ab.sh "$TMP/none.c"
finish
