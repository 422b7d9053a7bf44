# tdpipe: one Makefile. The CPU build always works with a C compiler; where nvcc is found the
# training binary is built through it (CUDA backend), and where mpicc is found, with MPI.
CC       ?= gcc
ARCH     ?= native
OPT      ?= -O3 -march=$(ARCH)
# clang splits the 512-bit vector types of llmc/simd.h into 256-bit halves where the -march prefers
# 256-bit vectors (Intel's AVX-512 cores); asked not to, it runs the matmul as fast as GCC does
CC_IS_CLANG := $(findstring clang,$(shell $(CC) --version 2>/dev/null | head -1))
ifneq ($(CC_IS_CLANG),)
  ifeq ($(shell uname -m),x86_64)
    OPT += -mprefer-vector-width=512
  endif
endif
CFLAGS   += $(OPT) -fopenmp -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-psabi -I. -MMD -MP
LDLIBS   += -lm -lz -lyaml
BUILD    := build

# ---- optional MPI (Open MPI from Debian's packages) ------------------------------------------
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  ifneq ($(NO_MPI),1)
    MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null) -DTD_MPI
    MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
    $(info tdpipe: MPI found ($(MPICC)): multi-rank pipelines enabled)
  endif
else
  $(info tdpipe: no mpicc: building single-process only (apt-get install openmpi-bin libopenmpi-dev for pipelines))
endif

# ---- optional CUDA -----------------------------------------------------------------------------
NVCC := $(shell command -v nvcc 2>/dev/null)
ifeq ($(NO_CUDA),1)
  NVCC :=
endif
ifneq ($(NVCC),)
  $(info tdpipe: nvcc found ($(NVCC)): building train_tdpipe through nvcc)
  NVCC_FLAGS := -O3 -std=c++17 --use_fast_math -Xcompiler "-fopenmp -march=$(ARCH)" -I. -DTD_CUDA
else
  $(info tdpipe: no nvcc: CPU-only build)
endif

# what every object is built with, kept in build/flags.txt: a change (MPI installed since the last
# build, another OPT) rebuilds everything, so no object of the old build is linked with the new
BUILD_FLAGS := $(CC) $(CFLAGS) $(MPI_CFLAGS) $(MPI_LIBS) | $(NVCC) $(NVCC_FLAGS)
FLAGS_FILE  := $(BUILD)/flags.txt
ifneq ($(BUILD_FLAGS),$(file <$(FLAGS_FILE)))
  $(shell mkdir -p $(BUILD))
  $(file >$(FLAGS_FILE),$(BUILD_FLAGS))
endif

LIB_SRC := $(wildcard llmc/*.c) $(wildcard tdpipe/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB     := $(BUILD)/libtdpipe.a
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
DEV_SRC  := $(wildcard dev/*.c) $(wildcard dev/data/*.c)
DEV_BIN  := $(DEV_SRC:%.c=$(BUILD)/%)

.PHONY: all test test-run clean bench
all: train_tdpipe $(DEV_BIN)

$(BUILD)/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -c $< -o $@

# AdamW's loop vectorises only without errno semantics for sqrtf (IEEE-exact either way; see llmc/adamw.c)
$(BUILD)/llmc/adamw.o: CFLAGS += -fno-math-errno

# made afresh: ar would keep the member of a source file since deleted, which the linker may still pick
$(LIB): $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

ifneq ($(NVCC),)
train_tdpipe: train_tdpipe.cu $(LIB) $(FLAGS_FILE) $(wildcard llmc/*.h llmc/*.cuh tdpipe/*.h tdpipe/*.cuh)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $(MPI_CFLAGS) $< $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS) -lcublas -lcublasLt -lnccl -lgomp
else
train_tdpipe: train_tdpipe.cu $(LIB) $(FLAGS_FILE) $(wildcard llmc/*.h tdpipe/*.h tdpipe/*.cuh)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -x c $< -x none $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS)
endif

$(BUILD)/tests/%: tests/%.c $(LIB) $(FLAGS_FILE) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS)

$(BUILD)/dev/%: dev/%.c $(LIB) $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS)

# bench_matmul_ab: up to three matmul.c variants linked side by side, each with its API renamed
# (va_, vb_, vc_; -Illmc: a variant may live outside llmc/), and the library without its own
# matmul.o; dev/bench_matmul_ab.sh names AB_B and AB_C (the binary keeps the variants it was last built with). Built by `make` alone, all three are
# this checkout's: an A/A run, which shows the bench's noise floor.
AB_A ?= llmc/matmul.c
AB_B ?= $(AB_A)
AB_C ?= $(AB_B)
AB_API := matmul_forward matmul_backward_input matmul_backward_weight matmul_profile_split matmul_profile_reset matmul_kernel_gflops
$(BUILD)/dev/bench_matmul_ab: dev/bench_matmul_ab.c dev/bench_cpu.c $(LIB) $(FLAGS_FILE) $(AB_A) $(AB_B) $(AB_C)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -Illmc -c $(AB_A) -o $@.va.o $(foreach f,$(AB_API),-D$(f)=va_$(f))
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -Illmc -c $(AB_B) -o $@.vb.o $(foreach f,$(AB_API),-D$(f)=vb_$(f))
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -Illmc -c $(AB_C) -o $@.vc.o $(foreach f,$(AB_API),-D$(f)=vc_$(f))
	cp $(LIB) $@.lib.a && ar d $@.lib.a matmul.o
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< $@.va.o $@.vb.o $@.vc.o $@.lib.a -o $@ $(LDLIBS) $(MPI_LIBS)

# bench_cpu times OpenBLAS's cblas_sgemm beside the hand-written SGEMM where pkg-config finds OpenBLAS
# (Debian: libopenblas-openmp-dev, whose OpenMP threads are ours); NO_OPENBLAS=1 leaves it out
ifneq ($(NO_OPENBLAS),1)
  OPENBLAS_FLAGS := $(shell pkg-config --exists openblas 2>/dev/null && echo "-DTD_OPENBLAS $$(pkg-config --cflags openblas)")
  OPENBLAS_LIBS  := $(shell pkg-config --exists openblas 2>/dev/null && pkg-config --libs openblas)
endif
$(BUILD)/dev/bench_cpu: dev/bench_cpu.c $(LIB) $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $(OPENBLAS_FLAGS) $< $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS) $(OPENBLAS_LIBS)
# the same benchmark against Intel's MKL instead (MKL=dir holding include/mkl.h and lib/libmkl_rt.so*:
# dev/get_mkl.sh DIR fetches it from PyPI); its own binary, so that bench_cpu stays OpenBLAS's
$(BUILD)/dev/bench_cpu_mkl: dev/bench_cpu.c $(LIB) $(FLAGS_FILE)
	@test -f "$(MKL)/include/mkl.h" || { echo "make bench_cpu_mkl: MKL=$(MKL) has no include/mkl.h (dev/get_mkl.sh DIR fetches MKL)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -DTD_MKL -I$(MKL)/include $< $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS) \
	  $(firstword $(wildcard $(MKL)/lib/libmkl_rt.so*)) -Wl,-rpath,$(abspath $(MKL)/lib)

# `make test`: first installs what the tests need and the machine lacks (scripts/ensure_deps.sh:
# apt-get as root, else the command to run), then a new make (which probes mpicc again) builds
# and runs every C test binary and every tests/test_*.sh; ends with "N passed, N failed"
test:
	@bash scripts/ensure_deps.sh
	@$(MAKE) --no-print-directory test-run
test-run: train_tdpipe $(TEST_BIN) $(DEV_BIN)
	@bash tests/run_all.sh

# ---- benchmarks: programs that print figures (never part of `make test`)
.PHONY: bench-cpu bench-mkl bench-llmc bench-checkpoint
bench-cpu: $(BUILD)/dev/bench_cpu
	$(BUILD)/dev/bench_cpu 5
# the 124M matmuls beside Intel's MKL: make bench-mkl MKL=dir (dev/get_mkl.sh dir downloads it)
bench-mkl:
	@test -n "$(MKL)" || { echo "make bench-mkl: give MKL=dir (dev/get_mkl.sh dir downloads Intel's MKL there)" >&2; exit 1; }
	@test -f "$(MKL)/include/mkl.h" || { echo "make bench-mkl: MKL=$(MKL) has no include/mkl.h (dev/get_mkl.sh DIR fetches MKL)" >&2; exit 1; }
	@$(MAKE) --no-print-directory $(BUILD)/dev/bench_cpu_mkl MKL="$(MKL)"
	$(BUILD)/dev/bench_cpu_mkl 2
# llm.c's CPU trainer beside ours on the same model and shard: make bench-llmc LLMC=path/to/llm.c
bench-llmc: train_tdpipe $(BUILD)/dev/data/make_shards
	@test -n "$(LLMC)" || { echo "make bench-llmc: give LLMC=path/to/an/llm.c/checkout" >&2; exit 1; }
	bash dev/bench_llmc.sh "$(LLMC)" 6
# checkpoint save/load MB/s and compression on a GPT-2 124M-shape model after 3 training steps on Tiny Shakespeare
bench-checkpoint: train_tdpipe $(BUILD)/dev/bench_checkpoint $(BUILD)/dev/data/make_shards
	bash dev/data/prepare_tinyshakespeare.sh >/dev/null
	./train_tdpipe -e d12 -i 'data/tinyshakespeare/ts_train.bin' -b 4 -t 64 -x 3 -s 0 -v 0 -o $(BUILD)/bench_ckpt
	$(BUILD)/dev/bench_checkpoint $(BUILD)/bench_ckpt/ckpt_00000003.tdck

# ---- CUDA targets (test_gpt2cu, dev/cuda benchmarks): begin
# GPU_ARCH: sm_90a (H100/H200: the wgmma path; mma.sync kept as the run-time fallback) or e.g. sm_80
# (A100: mma.sync only). test_gpt2cu is the bf16 build, build/test_gpt2cu_fp32 the fp32 one (-DENABLE_FP32).
GPU_ARCH ?= sm_90a
CUDA_GENCODE := -gencode=arch=$(subst sm_,compute_,$(GPU_ARCH)),code=$(GPU_ARCH)
CUDA_HDRS := $(wildcard llmc/*.cuh) $(wildcard llmc/*.h)
CUDA_LINK := $(LIB) $(LDLIBS) $(MPI_LIBS) -lcublasLt -lgomp
CUDA_BENCH := $(BUILD)/dev/cuda/matmul $(BUILD)/dev/cuda/attention $(BUILD)/dev/cuda/layernorm
# GPU checks of tdpipe's own CUDA modules (nccl_check: tdpipe/comm_nccl.cuh on one GPU; quant_check,
# compensation_check: llmc/quant.cuh, llmc/compensation.cuh against their CPU references)
CUDA_CHECKS := $(BUILD)/dev/cuda/nccl_check $(BUILD)/dev/cuda/quant_check $(BUILD)/dev/cuda/compensation_check $(BUILD)/dev/cuda/dp_sync_check
.PHONY: cuda
ifneq ($(NVCC),)
cuda: test_gpt2cu $(BUILD)/test_gpt2cu_fp32 $(CUDA_BENCH) $(CUDA_CHECKS)

test_gpt2cu: test_gpt2.cu $(LIB) $(CUDA_HDRS)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $< -o $@ $(CUDA_LINK)

$(BUILD)/test_gpt2cu_fp32: test_gpt2.cu $(LIB) $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) -DENABLE_FP32 $< -o $@ $(CUDA_LINK)

$(BUILD)/dev/cuda/%: dev/cuda/%.cu $(LIB) $(CUDA_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $< -o $@ $(CUDA_LINK)

# with MPI's flags (comm_nccl.cuh's MPI path compiles here too) and NCCL
$(BUILD)/dev/cuda/nccl_check: dev/cuda/nccl_check.cu $(LIB) $(CUDA_HDRS) tdpipe/comm_nccl.cuh tdpipe/comm.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $(MPI_CFLAGS) $< -o $@ $(CUDA_LINK) -lnccl
# the device gradient sync against the host one (it includes the CUDA stage: cuBLAS too)
$(BUILD)/dev/cuda/dp_sync_check: dev/cuda/dp_sync_check.cu $(LIB) $(CUDA_HDRS) $(wildcard tdpipe/*.cuh) tdpipe/dp_sync.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_GENCODE) $(MPI_CFLAGS) $< -o $@ $(CUDA_LINK) -lcublas -lnccl
else
cuda:
	@echo "make cuda: nvcc not found (the CUDA targets need it)" >&2; exit 1
endif
# ---- CUDA targets: end

# ---- sanitizers: `make sanitize` builds the C unit tests with AddressSanitizer and
# UndefinedBehaviorSanitizer (any report ends the test: no recovery) into build-asan/, without MPI
# (Open MPI's own allocations would be reported), and runs them; it ends with "N passed, N failed".
SAN_BUILD := build-asan
SAN_OPT   := -O1 -g -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
.PHONY: sanitize sanitize-build
sanitize:
	@$(MAKE) --no-print-directory BUILD=$(SAN_BUILD) OPT="$(SAN_OPT)" NO_MPI=1 NO_CUDA=1 sanitize-build
	@bash tests/run_all.sh --c-only $(SAN_BUILD)
sanitize-build: $(TEST_BIN)

# ---- the trainer under the same sanitizers, with MPI: `make sanitize-pipeline` builds it CPU-only into
# build-asan-mpi/ and runs pipelines, replicas, TD-Pipe's window, int8 sync and a resume through it
# (tests/sanitize_pipeline.sh; Open MPI is needed). Leak checks are off there: Open MPI's own
# allocations live until exit.
SAN_MPI_BUILD := build-asan-mpi
.PHONY: sanitize-pipeline
sanitize-pipeline:
	@$(MAKE) --no-print-directory BUILD=$(SAN_MPI_BUILD) OPT="$(SAN_OPT)" NO_CUDA=1 $(SAN_MPI_BUILD)/train_tdpipe
	@BIN="$(SAN_MPI_BUILD)/train_tdpipe --device cpu" bash tests/sanitize_pipeline.sh
$(BUILD)/train_tdpipe: train_tdpipe.cu $(LIB) $(FLAGS_FILE) $(wildcard llmc/*.h tdpipe/*.h)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -x c $< -x none $(LIB) -o $@ $(LDLIBS) $(MPI_LIBS)

# ---- fuzzing: a libFuzzer target per file reader (dev/fuzz/fuzz_*.c), built by clang with
# AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/ (clang, libclang-rt-14-dev).
# `make fuzz FUZZ_SECONDS=N` runs each target for N seconds, one after the other (dev/fuzz/run.sh).
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_TARGETS := model_file shard checkpoint config tokenizer
FUZZ_CFLAGS  := -g -O1 -std=gnu11 -I. -fsanitize=address,undefined -fno-sanitize-recover=all
# the readers, instrumented; the model's compute, which gpt2.c links in but no reader runs, is
# built plain by $(CC) with OpenMP, whose runtime the link then names: GCC's libgomp, or clang's
# libomp where CC is clang
FUZZ_OMP     := $(if $(CC_IS_CLANG),-fopenmp,-lgomp)
FUZZ_LIB_SRC := $(addprefix llmc/,common.c checkpoint.c model_file.c gpt2.c shard.c dataloader.c tokenizer.c) tdpipe/args.c tdpipe/config.c
FUZZ_PLAIN_SRC := llmc/matmul.c llmc/ops.c llmc/attention.c llmc/vec_math.c llmc/profile.c
FUZZ_LIB     := $(FUZZ_BUILD)/libreaders.a
FUZZ_BIN     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BIN) $(BUILD)/dev/fuzz/make_seeds
fuzz: fuzz-build
	bash dev/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/plain/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_PLAIN_SRC:%.c=$(FUZZ_BUILD)/plain/%.o)
	rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz_file.h $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB) -o $@ -lm -lz -lyaml $(FUZZ_OMP)

-include $(wildcard $(FUZZ_BUILD)/obj/*/*.d $(FUZZ_BUILD)/plain/*/*.d)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(FUZZ_BUILD) train_tdpipe

-include $(LIB_OBJ:.o=.d) $(wildcard $(BUILD)/tests/*.d $(BUILD)/dev/*.d $(BUILD)/dev/*/*.d)
