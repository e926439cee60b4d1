# zerotrain — build, test, benchmark.
#
#   make train            ./train: nvcc build (CPU and CUDA devices) when nvcc is found, g++ otherwise;
#                         rebuilt only when a source changed or the kind of build did (see below)
#   make test             the whole suite: test binaries (BF16 and FP32, g++), the GPU test program on
#                         the CPU emulator (test/cuda_emu/), the nvcc compile check, the PyTorch
#                         fixture check; ends with "N passed, N failed"
#   make test-long        what `make test` samples or leaves out: the longer matrices (several ranks on
#                         the emulated CUDA device at R = 2 and 3 in both precisions, under mpirun and
#                         without MPI; -offload z x R x GA), the 100-step default run, the FP32
#                         build's repetitions of BF16 cases; CI runs it after make test
#   make portability      no instruction set assumed: every intrinsic in a target-attributed function,
#                         every translation unit compiled for x86-64 v1..v4 (-O0, -Werror), an aarch64
#                         cross build run under qemu (test/portability.sh; CI runs it after make test)
#   make bench            CPU benchmarks (tokens/s, ratios side by side)
#   make plot             out/log.jsonl (of ./train -o out) -> out/loss.png (dev/plot.py; LOGS=, PLOT=)
#   make PRECISION=FP32   FP32 storage instead of BF16 (for train and test binaries)
#   make NO_MPI=1         build without MPI even if mpicxx is installed (several ranks on the CUDA
#                         device still run: dev/launch.sh or torchrun, over the TCP rendezvous)
#   make NO_CUDA=1        build ./train with g++ even if nvcc is installed
#   make NO_BLAS=1        build without OpenBLAS even if it is installed
#   make gpu-binaries     ./train_gpu, ./train_gpu_fp32, ./test/test_gpu, build/attn_bench to carry to a GPU box (see below)
#   make USE_CUDNN=1 ...  with cuDNN's fused attention (-attn cudnn; train and gpu-binaries; docs/cudnn.md)
#   make DEBUG=1          -O1 -g, released ZeRO buffers poisoned with NaN by default (-poison)
#
# What was found is printed with a check mark or a cross on every build.
#
# ./train is a real file target: `make train` rebuilds it only when one of its sources (SOURCES)
# is newer, or when this build is of another kind than the one that made it. Each build of ./train
# records its kind (compiler, devices, precision, MPI, OpenBLAS, NCCL, DEBUG) and its command in
# build/train.kind; a build of another kind rebuilds ./train and says so first: after
# `make NO_CUDA=1 train`, a plain `make train` on a machine with nvcc prints
#   ./train was built as: g++ (CPU device only), BF16, MPI, OpenBLAS
#   rebuilding it as:     nvcc (CPU and CUDA devices; GPU code sm_80 sm_90 compute_90), BF16, MPI, OpenBLAS, NCCL
# and `make NO_CUDA=1 train` after that swaps it back, saying so too: a CPU-only binary is never
# replaced silently, nor the other way round. Every build of ./train ends with a line naming its
# compiler and devices. (docs/build.md)

PRECISION ?= BF16
CXX_HOST  ?= g++

# The CPU the host code is for: -march=$(MARCH), this machine's (native) unless told. Nothing in the
# sources assumes an instruction set (simd.h picks the SIMD paths at run time; make portability
# compiles everything for x86-64 v1..v4 and aarch64), so any level builds and runs the same bits:
#   make train MARCH=x86-64-v3                            a binary for other x86 machines (AVX2)
#   make train CXX_HOST=aarch64-linux-gnu-g++             a cross build for aarch64 (armv8-a)
# A cross compiler (its -dumpmachine is not this machine's) builds the CPU device alone: no nvcc, MPI
# or OpenBLAS of this machine's architecture can be linked into it.
TARGET_MACHINE := $(shell $(CXX_HOST) -dumpmachine 2>/dev/null)
CROSS := $(if $(TARGET_MACHINE),$(if $(filter $(shell uname -m)-%,$(TARGET_MACHINE)),,yes))
ifneq ($(CROSS),)
  NO_CUDA := 1
  NO_MPI  := 1
  NO_BLAS := 1
  $(info ✓ cross build for $(TARGET_MACHINE) with $(CXX_HOST): the CPU device only, without MPI or OpenBLAS)
endif
MARCH ?= $(if $(CROSS),$(if $(filter aarch64-%,$(TARGET_MACHINE)),armv8-a,x86-64),native)

NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
MPICXX    := $(if $(NO_MPI),,$(shell command -v mpicxx 2>/dev/null))

# Host code: optimised for MARCH; no contraction of a*b+c into FMA behind our back (the ops use
# explicit FMAs where they want them; AdamW must round exactly like the GPU); OpenMP threads.
HOST_FLAGS := -O3 -march=$(MARCH) -ffp-contract=off -fno-fast-math -fopenmp -Wall -Wextra
ifeq ($(PRECISION),FP32)
  DEFS := -DENABLE_FP32
endif
ifeq ($(DEBUG),1)
  HOST_FLAGS := $(subst -O3,-O1 -g,$(HOST_FLAGS))
  DEFS += -DZT_DEBUG
endif

# MPI: take its compile and link flags from the wrapper (Open MPI: --showme, MPICH: -compile_info)
ifneq ($(MPICXX),)
  MPI_CFLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null || $(MPICXX) -compile_info 2>/dev/null | cut -d' ' -f2-)
  MPI_LIBS   := $(shell $(MPICXX) --showme:link 2>/dev/null || $(MPICXX) -link_info 2>/dev/null | cut -d' ' -f2-)
  DEFS += -DUSE_MPI -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX
  $(info ✓ MPI: $(MPICXX))
else
  $(info ✗ MPI: mpicxx not found (or NO_MPI=1): one process only. apt-get install openmpi-bin libopenmpi-dev)
endif

# OpenBLAS (Debian: libopenblas-dev) for the CPU device's matmuls, found through pkg-config
ifeq ($(NO_BLAS),)
  BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
  BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null)
endif
ifneq ($(BLAS_LIBS),)
  DEFS += -DUSE_BLAS
  MPI_CFLAGS += $(BLAS_CFLAGS)
  MPI_LIBS += $(BLAS_LIBS)
  $(info ✓ OpenBLAS: $(BLAS_LIBS))
else
  $(info ✗ OpenBLAS: not found (or NO_BLAS=1): the CPU matmuls are the plain loop. apt-get install libopenblas-dev)
endif

# nvcc: Ampere and Hopper code plus PTX for later GPUs; device arithmetic that must match the CPU
# bit for bit uses explicit __fmaf_rn etc. (adamw.cuh); warnings are errors.
NVCC_ARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -O3 -std=c++17 -x cu $(NVCC_ARCH) -Werror all-warnings -Xcompiler "$(HOST_FLAGS) -Werror"
CUDA_LIBS  := -lcublasLt -lcublas -lgomp
# NCCL, for several ranks on the CUDA device (their unique id goes over MPI, or over the TCP
# rendezvous when they are launched without MPI: with or without MPI in the build). Found in the
# CUDA toolkit's folders (NCCL_SEARCH), else in NCCL_HOME, else in Python's nvidia-nccl wheel
# (dev/nccl_home.py), which ships lib/libnccl.so.2 only: linked by that name, with its folder as
# the run path.
NCCL_SEARCH ?= /usr/local/cuda /usr/local /usr
NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(addsuffix /include/nccl.h,$(NCCL_SEARCH)))))
ifeq ($(NCCL_HOME),)
  NCCL_HOME := $(shell python3 dev/nccl_home.py 2>/dev/null)
endif
ifneq ($(NCCL_HOME),)
  NCCL_LIBDIR := $(firstword $(dir $(wildcard $(NCCL_HOME)/lib/libnccl.so.2 $(NCCL_HOME)/lib64/libnccl.so.2)))
  NVCC_DEFS := -DUSE_NCCL -I$(NCCL_HOME)/include
  CUDA_LIBS += -L$(NCCL_LIBDIR) -l:libnccl.so.2 -Xlinker -rpath=$(NCCL_LIBDIR)
  NCCL_FOUND := $(NCCL_HOME)
endif
# cuDNN's fused attention (-attn cudnn, docs/cudnn.md): make USE_CUDNN=1 builds ./train and the GPU
# binaries with it (ops/attention_cudnn.cuh, ZT_CUDNN). cudnn-frontend's headers (header-only C++) come
# from the PyPI package nvidia-cudnn-frontend, pinned (CUDNN_FRONTEND_PIN; .ci/run installs it, without
# its dependencies, into the venv /tmp/zt-cudnn): CUDNN_FRONTEND_INCLUDE, else asked of CUDNN_PYTHON
# (dev/cudnn_frontend_include.py). cudnn.h is the CUDA toolkit's (or CUDNN_INCLUDE). cuDNN is not
# linked: the frontend dlopens libcudnn.so.9 at run time (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), so the
# binary starts where cuDNN is absent. The frontend also dlopens libcudart.so.13 for its own CUDA calls:
# these builds link the CUDA runtime shared (-cudart shared), so that it finds the one already loaded.
CUDNN_FRONTEND_PIN := 1.32.0
ifeq ($(USE_CUDNN),1)
  CUDNN_PYTHON ?= $(firstword $(wildcard /tmp/zt-cudnn/bin/python) python3)
  CUDNN_FRONTEND_INCLUDE ?= $(shell $(CUDNN_PYTHON) dev/cudnn_frontend_include.py 2>/dev/null)
  ifeq ($(wildcard $(CUDNN_FRONTEND_INCLUDE)/cudnn_frontend.h),)
    $(error ✗ USE_CUDNN=1: cudnn-frontend's headers not found (CUDNN_FRONTEND_INCLUDE='$(CUDNN_FRONTEND_INCLUDE)'). HINT: python3 -m venv /tmp/zt-cudnn && /tmp/zt-cudnn/bin/pip install --no-deps nvidia-cudnn-frontend==$(CUDNN_FRONTEND_PIN), or set CUDNN_FRONTEND_INCLUDE)
  endif
  CUDNN_FRONTEND_FOUND := $(shell sed -n 's/^\#define CUDNN_FRONTEND_\(MAJOR\|MINOR\|PATCH\)_VERSION \([0-9]*\).*/\2/p' $(CUDNN_FRONTEND_INCLUDE)/cudnn_frontend_version.h | paste -sd.)
  ifneq ($(CUDNN_FRONTEND_FOUND),$(CUDNN_FRONTEND_PIN))
    $(error ✗ USE_CUDNN=1: cudnn-frontend $(CUDNN_FRONTEND_FOUND) in $(CUDNN_FRONTEND_INCLUDE), the pin is $(CUDNN_FRONTEND_PIN). HINT: pip install --no-deps nvidia-cudnn-frontend==$(CUDNN_FRONTEND_PIN))
  endif
  CUDNN_FLAGS := -DZT_CUDNN -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -isystem $(CUDNN_FRONTEND_INCLUDE) $(if $(CUDNN_INCLUDE),-isystem $(CUDNN_INCLUDE))
  CUDNN_LIBS  := -cudart shared -ldl
  $(info ✓ cuDNN attention (USE_CUDNN=1): cudnn-frontend $(CUDNN_FRONTEND_FOUND) from $(CUDNN_FRONTEND_INCLUDE); libcudnn.so.9 loaded at run time)
endif

ifneq ($(and $(NVCC),$(if $(NO_CUDA),,yes)),)
  $(info ✓ nvcc: $(NVCC))
  $(if $(NCCL_FOUND),$(info ✓ NCCL: $(NCCL_FOUND)),$(info ✗ NCCL: not found (set NCCL_HOME, or pip install nvidia-nccl-cu13): the CUDA device runs one rank only))
  TRAIN_WITH := nvcc
else
  $(info ✗ nvcc: not found (or NO_CUDA=1): ./train is the CPU device only)
  TRAIN_WITH := g++
endif

# The binaries carried to the GPU box (make gpu-binaries: ./train_gpu, ./train_gpu_fp32, ./test/test_gpu,
# build/attn_bench), built exactly as `make test` compile-checks them. The box has CUDA 13 and no MPI, OpenBLAS or NCCL
# development files, and its CPU is not this one: one rank (no MPI, no NCCL), Hopper only (GPU_ARCH),
# host code for x86-64-v3 (AVX2 + FMA: every x86 server CPU sold beside a Hopper GPU has it, and
# the CPU reference loops in test_gpu use it; -march=native here would emit AVX-512, which the box
# may lack: dev/gpu_check.sh checks the CPU's flags and builds there when they are missing). The
# bits do not depend on the level: host code is never contracted into FMAs (-ffp-contract=off).
# libstdc++ and libgcc are linked statically (the box's may be older); cuBLASLt, libgomp and libc
# stay shared (dev/gpu_check.sh's stage 0 runs ldd). Both translation units in one nvcc call.
GPU_ARCH       ?= -gencode arch=compute_90,code=sm_90
GPU_HOST_FLAGS := $(subst -march=$(MARCH),-march=x86-64-v3,$(HOST_FLAGS))
GPU_DEFS       := $(filter -DENABLE_FP32 -DZT_DEBUG,$(DEFS))
# (-Wno-format-truncation: test/test_gpu.cu includes the test helpers; see TEST_FLAGS)
GPU_NVCC_FLAGS := -O3 -std=c++17 $(GPU_ARCH) -Werror all-warnings -Xcompiler "$(GPU_HOST_FLAGS) -Werror -Wno-format-truncation"
GPU_LIBS       := -lcublasLt -lcublas -lgomp -Xcompiler -static-libstdc++ -Xcompiler -static-libgcc

SOURCES := train_gpt.cu flags.h acts.h plan.h startup.h tune.h run_record.h device.cuh zero.h offload.h model.h lora.h checkpoint.h adamw.cuh simd.h dataloader.h tokenizer.h tokenizer_json.h unicode_tables.h unicode_nfc.h rng.h fileio.h safetensors.h hf.h prompts.h chat.h $(wildcard ops/*.cuh)
TEST_SOURCES := $(wildcard test/*.cpp test/*.h)

.PHONY: all FORCE test test-long test-binaries test-long-binaries portability nvcc-check nvcc-check-ptx test-gpu gpu-binaries bench plot clean print-% fuzz test-sanitize kernel-resources
all: train

# The kind of ./train this build makes and its command; build/train.kind records the kind and the
# command that made ./train (line 1, line 2), written only after a build of ./train succeeded. When
# they differ from this build's, ./train is out of date (FORCE) and the recipe says why first;
# make -n / make -q show that decision and change nothing.
comma := ,
ifeq ($(TRAIN_WITH),nvcc)
  TRAIN_CMD := $(NVCC) $(NVCC_FLAGS) $(DEFS) $(NVCC_DEFS) $(CUDNN_FLAGS) $(MPI_CFLAGS) train_gpt.cu -o train $(MPI_LIBS) $(CUDA_LIBS) $(CUDNN_LIBS)
  TRAIN_DEVICES := CPU and CUDA devices; GPU code $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(NVCC_ARCH))))
else
  TRAIN_CMD := $(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(DEFS) $(MPI_CFLAGS) train_gpt.cu -o train $(MPI_LIBS)
  TRAIN_DEVICES := CPU device only
endif
TRAIN_KIND  := $(strip $(TRAIN_WITH) ($(TRAIN_DEVICES)), $(PRECISION)$(if $(MPICXX),$(comma) MPI,$(comma) no MPI)$(if $(BLAS_LIBS),$(comma) OpenBLAS)$(if $(and $(filter nvcc,$(TRAIN_WITH)),$(NCCL_FOUND)),$(comma) NCCL)$(if $(and $(filter nvcc,$(TRAIN_WITH)),$(CUDNN_FLAGS)),$(comma) cuDNN)$(if $(filter 1,$(DEBUG)),$(comma) DEBUG))
TRAIN_STAMP := build/train.kind
ifneq ($(wildcard train),)
  TRAIN_WAS     := $(strip $(shell sed -n 1p $(TRAIN_STAMP) 2>/dev/null))
  TRAIN_WAS_CMD := $(strip $(shell sed -n 2p $(TRAIN_STAMP) 2>/dev/null))
  ifeq ($(TRAIN_WAS),)
    TRAIN_SAY := ./train: how it was built is not recorded ($(TRAIN_STAMP)): rebuilding it
  else ifneq ($(TRAIN_WAS),$(TRAIN_KIND))
    TRAIN_SAY := ./train was built as: $(TRAIN_WAS)\nrebuilding it as:     $(TRAIN_KIND)
  else ifneq ($(TRAIN_WAS_CMD),$(strip $(TRAIN_CMD)))
    TRAIN_SAY := ./train was built by another command of the same kind: rebuilding it
  endif
endif

train: $(SOURCES) $(if $(TRAIN_SAY),FORCE)
	@$(if $(TRAIN_SAY),printf '%b\n' '$(TRAIN_SAY)')
	$(TRAIN_CMD)
	@mkdir -p build && printf '%s\n%s\n' '$(TRAIN_KIND)' '$(strip $(TRAIN_CMD))' > $(TRAIN_STAMP)
	@echo "built ./train with $(TRAIN_KIND)"
FORCE:

# The CPU-only trainer built by g++, whatever is installed (the tests use it through test binaries).
train_cpu: $(SOURCES)
	$(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(DEFS) $(MPI_CFLAGS) train_gpt.cu -o train_cpu $(MPI_LIBS)

# The same in FP32 (make bench compares it with PyTorch's FP32 CPU training).
train_cpu_fp32: $(SOURCES)
	$(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) train_gpt.cu -o train_cpu_fp32 $(MPI_LIBS)

# One test program, built twice: BF16 (what users run) and FP32 (tight tolerances). Each binary
# is also a trainer: `test/test_bf16 --train [flags]` (so mpirun can start it as N ranks).
# -Wno-format-truncation: the test helpers build shell commands and paths with snprintf into fixed
# buffers (test/test.h, zero_runs.h, the test_*.h), ~100 places where gcc cannot rule truncation out;
# the program's own builds (make train, train_cpu, nvcc-check) have it on and are warning-free.
TEST_FLAGS := -x c++ -std=c++17 -O2 -g $(filter-out -O3,$(HOST_FLAGS)) -Werror -Wno-format-truncation -DTESTING
test/test_bf16: $(SOURCES) $(TEST_SOURCES)
	$(CXX_HOST) $(TEST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) $(MPI_CFLAGS) test/test_main.cpp -o $@ $(MPI_LIBS)
test/test_fp32: $(SOURCES) $(TEST_SOURCES)
	$(CXX_HOST) $(TEST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) test/test_main.cpp -o $@ $(MPI_LIBS)

# libFuzzer harnesses (test/fuzz.cpp: model, shard, state, tokenizer, bpe, safetensors, jsonl, hfjson, chat, ..., bnb), built with clang when it
# is installed (Debian: clang, libclang-rt-14-dev). make test replays test/fuzz_corpus/ and runs a
# fixed number of seeded inputs per harness; make fuzz runs each for FUZZ_SECONDS into build/fuzz/.
CLANGXX    ?= $(shell command -v clang++ 2>/dev/null)
FUZZ_FLAGS := -x c++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function
FUZZ_BIN   := $(if $(CLANGXX),test/fuzz)
test/fuzz: $(SOURCES) test/fuzz.cpp
	$(CLANGXX) $(FUZZ_FLAGS) test/fuzz.cpp -o $@
FUZZ_SECONDS ?= 60
fuzz: test/fuzz
	for h in model shard state tokenizer bpe safetensors jsonl hfjson chat mask prompt record peft rdv chatcfg bnb; do mkdir -p build/fuzz/$$h; \
	  ASAN_OPTIONS=detect_leaks=0 test/fuzz $$h -max_total_time=$(FUZZ_SECONDS) -max_len=16384 -print_final_stats=1 \
	    build/fuzz/$$h test/fuzz_corpus/$$h > build/fuzz/$$h.log 2>&1; rc=$$?; \
	  echo "$$h: $$(grep -E 'stat::number_of_executed_units' build/fuzz/$$h.log)"; \
	  [ $$rc -eq 0 ] || { grep -E 'ERROR|SUMMARY' build/fuzz/$$h.log; echo "fuzz $$h failed: build/fuzz/$$h.log"; exit 1; }; done

NVCC_FOUND := $(if $(and $(NVCC),$(if $(NO_CUDA),,yes)),yes)
# make test's binaries (the nvcc part: the multi-GPU build checked to PTX, warnings as errors); make
# test-long adds the GPU test program built without MPI (test/test_emu_nompi), the nvcc builds of
# every architecture and the binaries carried to a GPU box.
test-binaries: test/test_bf16 test/test_fp32 test/test_emu test/test_emu_fp32 $(FUZZ_BIN) \
               $(if $(NVCC_FOUND),build/nvcc_check_ptx.o)
test-long-binaries: test-binaries test/test_emu_nompi $(if $(NVCC_FOUND),build/nvcc_check.o train_gpu train_gpu_fp32 test/test_gpu build/attn_bench build/gpu/kernel_resources.h)

# The sanitizer subset (.ci/run runs it after make test): the test program built with ASan + UBSan
# (g++), running the cases that feed the readers bad and changing input, and the trainer processes
# they start (the same binary, so sanitized too).
SANITIZE_CASES ?= ckpt_mixed ckpt_leftovers exit_ data_ cli_bad_input cli_bounds hf_corrupt hf_llama_corrupt hf_llama_config \
                  rel_output rel_fifo rel_lora_init rel_export rel_tokenize qlora_bnb offload_params_bitwise offload_params_kill
test/test_sanitize: $(SOURCES) $(TEST_SOURCES)
	$(CXX_HOST) $(filter-out -O2,$(TEST_FLAGS)) -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	  $(filter-out -DENABLE_FP32 -DUSE_BLAS,$(DEFS)) $(MPI_CFLAGS) test/test_main.cpp -o $@ $(filter-out -lopenblas,$(MPI_LIBS))
test-sanitize: test/test_sanitize
	@fail=0; for c in $(SANITIZE_CASES); do ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	  test/test_sanitize $$c > build/sanitize_$$c.log 2>&1 || fail=1; tail -n 1 build/sanitize_$$c.log; \
	  if grep -q "runtime error\|AddressSanitizer" build/sanitize_$$c.log; then fail=1; grep -m 3 "runtime error\|AddressSanitizer" build/sanitize_$$c.log; fi; done; exit $$fail

# The test binaries are built with as many jobs as this machine has cores (TEST_JOBS), then the
# suite runs its cases as many at a time (test.h: ZT_TEST_JOBS).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-binaries
	NVCC_CHECK=$(if $(NVCC_FOUND),yes,no) bash test/run_tests.sh

# What make test samples or leaves out, in full (ZT_TEST_LONG=1 widens the sampled matrices and runs
# the 100-step default run; --long-only runs the cases a binary repeats from another, see test.h):
# several ranks on the emulator in both precisions, the offload matrix, the FP32 builds' repetitions;
# then test/long_checks.sh: dev/gpu_check.sh --emu (the GPU check's stages on the emulator, which
# repeat what test/test_emu checks case by case: its plumbing checked before a GPU is spent on it),
# and with nvcc the builds of every architecture: the multi-GPU ./train (sm_80, sm_90, PTX), the
# binaries carried to a GPU box and what they link, and nvcc's register table against the emulator's
# committed snapshot. Each part ends with "N passed, N failed" and fails the target.
test-long:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-long-binaries
	ZT_TEST_LONG=1 test/test_emu multirank && ZT_TEST_LONG=1 test/test_emu nompi && \
	  ZT_TEST_LONG=1 test/test_bf16 offload_bitwise && ZT_TEST_LONG=1 test/test_bf16 offload_params_bitwise && ZT_TEST_LONG=1 test/test_emu offload && \
	  ZT_TEST_LONG=1 test/test_emu gpu_attention_tc_gqa && \
	  ZT_TEST_LONG=1 test/test_bf16 cli_default_run_learns && ZT_TEST_LONG=1 test/test_bf16 zero_stages_bitwise && \
	  ZT_TEST_LONG=1 test/test_bf16 zero_across && ZT_TEST_LONG=1 test/test_bf16 zero_memory && \
	  ZT_TEST_LONG=1 test/test_bf16 hf_llama_export_vs && ZT_TEST_LONG=1 test/test_bf16 lora_replicated_base && \
	  ZT_TEST_LONG=1 test/test_bf16 comm_broadcast_in_pieces && \
	  ZT_TEST_LONG=1 test/test_fp32 --long-only && ZT_TEST_LONG=1 test/test_emu_fp32 --long-only && \
	  NVCC_CHECK=$(if $(NVCC_FOUND),yes,no) bash test/long_checks.sh

# The nvcc build of ./train for several GPUs (MPI and NCCL, every architecture), compiled without
# linking into build/nvcc_check.o, again whenever a source changes (make test-long builds it, with
# the binaries carried to a GPU box). make test compiles the same build to PTX for the lowest
# architecture only (build/nvcc_check_ptx.o: every line of host and device code through nvcc with
# warnings as errors, half the time: ptxas and the second architecture are test-long's), and
# run_tests.sh's nvcc_build line checks it is current. It compiles train_gpt.cu through
# dev/attn_bench.cu, which includes all of it (but its one-line main, under TESTING): so the
# attention benchmark is compiled in make test too, at no cost.
build/nvcc_check.o: $(SOURCES)
	@mkdir -p build
	$(NVCC) $(NVCC_FLAGS) $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) -c train_gpt.cu -o $@.tmp && mv $@.tmp $@
build/nvcc_check_ptx.o: $(SOURCES) dev/attn_bench.cu
	@mkdir -p build
	$(NVCC) $(filter-out -gencode arch=%,$(NVCC_FLAGS)) -gencode arch=compute_80,code=compute_80 $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) \
	  -c dev/attn_bench.cu -o $@.tmp && mv $@.tmp $@
nvcc-check: build/nvcc_check.o
nvcc-check-ptx: build/nvcc_check_ptx.o

# The GPU test program on the CPU (test/cuda_emu/): emulate.py (python3) copies the sources into
# build/emu/ (kernel launches and __shared__ rewritten, nothing else), g++ compiles test/test_gpu.cu
# from there against test/cuda_emu/include/ (the CUDA subset we use, a fake cuBLASLt, CUB and NCCL), in
# BF16 and FP32. Kernels get nvcc's FMA contraction (per function; the param undoes the Zen tuning
# that would skip it), host code none; two warnings nvcc does not give for device code are off.
EMU_SOURCES := $(wildcard test/cuda_emu/*.h test/cuda_emu/*.py test/cuda_emu/include/*.h test/cuda_emu/include/cub/device/*)
EMU_COPY    := $(SOURCES) test/test_gpu.cu $(wildcard test/*.h)
EMU_FLAGS   := $(TEST_FLAGS) -Wno-sign-compare -Wno-unused-function --param=avoid-fma-max-bits=0 -DZT_CUDA_EMU -DUSE_NCCL -Itest/cuda_emu/include
# nvcc's registers, shared memory and spills per kernel (sm_90), which the emulator checks at every launch
# (test/cuda_emu/resources.py): the committed snapshot of the nvcc build of the carried binaries below
# (make kernel-resources refreshes it; make test-long builds them and fails while the snapshot differs
# from nvcc's table), so the emulator never waits for minutes of nvcc. To check against a fresh
# table: make test/test_emu KERNEL_RES=build/gpu/kernel_resources.h
KERNEL_RES  ?= test/cuda_emu/kernel_resources_sm90.h
EMU_FLAGS   += -DZT_KERNEL_RESOURCES='"$(abspath $(KERNEL_RES))"'
build/emu/.copied: $(EMU_COPY) test/cuda_emu/emulate.py
	python3 test/cuda_emu/emulate.py build/emu $(EMU_COPY) && touch $@
test/test_emu: build/emu/.copied $(EMU_SOURCES) $(KERNEL_RES)
	$(CXX_HOST) $(EMU_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) $(MPI_CFLAGS) build/emu/test/test_gpu.cu -o $@ $(MPI_LIBS)
test/test_emu_fp32: build/emu/.copied $(EMU_SOURCES) $(KERNEL_RES)
	$(CXX_HOST) $(EMU_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) build/emu/test/test_gpu.cu -o $@ $(MPI_LIBS)
# The same BF16 program built without MPI, as make NO_MPI=1 builds: the launch tests (test/gpu_launch.h)
# start it as the ranks of a run without MPI (dev/launch.sh) and compare with test/test_emu under mpirun.
NOMPI_DEFS := $(filter-out -DENABLE_FP32 -DUSE_MPI -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX,$(DEFS))
test/test_emu_nompi: build/emu/.copied $(EMU_SOURCES) $(KERNEL_RES)
	$(CXX_HOST) $(EMU_FLAGS) $(NOMPI_DEFS) $(BLAS_CFLAGS) build/emu/test/test_gpu.cu -o $@ $(BLAS_LIBS)

# The GPU test program (GPU against CPU, op by op) and the trainer, as carried to the GPU box (see
# GPU_ARCH above): one nvcc call compiles both, then each is linked. dev/gpu_check.sh runs them.
# (test/train_gpu_fp32.cu is the trainer with ENABLE_FP32: the FP32 build, ./train_gpu_fp32.)
# --resource-usage: ptxas's registers, shared memory and spills per kernel, into build/gpu/ptxas.log.
# make USE_CUDNN=1 gpu-binaries compiles into build/gpu_cudnn/ (build/gpu/ stays the plain build's), and
# each binary records which folder it was linked from (build/<name>.gpukind): switching between the two
# relinks, never recompiles what is current. (The cuDNN build compiles the frontend's C++ in each of
# the three units: docs/cudnn.md gives its time.)
GPU_DIR := build/gpu$(if $(CUDNN_FLAGS),_cudnn)
$(GPU_DIR)/.objs: $(SOURCES) test/test_gpu.cu test/train_gpu_fp32.cu $(wildcard test/*.h)
	@mkdir -p $(GPU_DIR)
	$(NVCC) $(GPU_NVCC_FLAGS) $(GPU_DEFS) $(CUDNN_FLAGS) --resource-usage -x cu -c train_gpt.cu test/test_gpu.cu test/train_gpu_fp32.cu -odir $(GPU_DIR) \
	  > $(GPU_DIR)/ptxas.log 2>&1 || { cat $(GPU_DIR)/ptxas.log; exit 1; }
	@touch $@
gpu_relink = $(if $(filter-out $(GPU_DIR),$(shell cat build/$(subst /,_,$(1)).gpukind 2>/dev/null)),FORCE)
gpu_link = $(NVCC) $(GPU_ARCH) $(GPU_DIR)/$(2) -o $(1) $(GPU_LIBS) $(CUDNN_LIBS) && echo $(GPU_DIR) > build/$(subst /,_,$(1)).gpukind
build/gpu/kernel_resources.h: build/gpu/.objs test/cuda_emu/resources.py
	python3 test/cuda_emu/resources.py build/gpu/ptxas.log > $@.tmp && mv $@.tmp $@
# The committed snapshot the emulator uses where nvcc is missing.
kernel-resources: build/gpu/kernel_resources.h
	cp build/gpu/kernel_resources.h test/cuda_emu/kernel_resources_sm90.h
	python3 test/cuda_emu/resources.py --table build/gpu/ptxas.log
train_gpu: $(GPU_DIR)/.objs $(call gpu_relink,train_gpu)
	$(call gpu_link,$@,train_gpt.o)
train_gpu_fp32: $(GPU_DIR)/.objs $(call gpu_relink,train_gpu_fp32)
	$(call gpu_link,$@,train_gpu_fp32.o)
test/test_gpu: $(GPU_DIR)/.objs $(call gpu_relink,test/test_gpu)
	$(call gpu_link,$@,test_gpu.o)
test-gpu: test/test_gpu
# The attention microbenchmark (dev/attn_bench.cu: the whole program included, timed through the
# model's dispatchers), built as the binaries above so that dev/attn_bench.sh and dev/gpu_check.sh
# never run nvcc on the box (they build it there only when this one does not load). Its own nvcc
# call: the ptxas table above (build/gpu/ptxas.log) stays the three programs'.
build/attn_bench: dev/attn_bench.cu $(SOURCES)
	@mkdir -p build
	$(NVCC) $(GPU_NVCC_FLAGS) $(GPU_DEFS) -x cu dev/attn_bench.cu -o $@ $(GPU_LIBS)
gpu-binaries: train_gpu train_gpu_fp32 test/test_gpu build/attn_bench

# Every CPU a user has (docs/build.md): test/portability.sh compiles what the binaries are made of for
# each x86-64 level and cross-builds for aarch64 (g++-aarch64-linux-gnu; qemu-user runs it), saying SKIP
# where a compiler or qemu is missing. ~3 minutes on 2 cores.
# (the emulated GPU test program's unit reads the emulator's copy and nvcc's resource table: made first)
portability: build/emu/.copied $(KERNEL_RES)
	bash test/portability.sh

bench: train_cpu train_cpu_fp32 test/test_bf16 test/test_fp32
	bash dev/bench.sh

# make print-VAR: a variable's value (the tests read NCCL_HOME and the link line this way)
print-%:
	@echo '$($*)'

# Loss, validation loss, tokens/s, memory and communication wait of runs, overlaid, as a PNG:
#   ./train -o out && make plot                       -> out/loss.png
#   make plot LOGS="z0/log.jsonl:ZeRO-0 z3/log.jsonl:ZeRO-3" PLOT=z.png
# matplotlib for /usr/bin/python3: apt-get install python3-matplotlib
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
LOGS   ?= out/log.jsonl
PLOT   ?= $(dir $(firstword $(LOGS)))loss.png
plot:
	$(PYTHON) dev/plot.py $(LOGS) -o $(PLOT)

clean:
	rm -f train train_gpu train_gpu_fp32 train_cpu train_cpu_fp32 test/test_bf16 test/test_fp32 test/test_gpu test/test_emu test/test_emu_fp32 test/test_emu_nompi test/fuzz test/test_sanitize
	rm -rf build/emu build/gpu build/gpu_cudnn build/*.gpukind build/attn_bench build/nvcc_check.o build/nvcc_check_ptx.o build/train.kind
