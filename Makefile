# zerotrain — build, test, benchmark.
#
#   make train            ./train: nvcc build (CPU and CUDA devices) when nvcc is found, g++ otherwise
#   make test             the whole suite: test binaries (BF16 and FP32, g++), the GPU test program on
#                         the CPU emulator (test/cuda_emu/), the nvcc compile check, the PyTorch
#                         fixture check; ends with "N passed, N failed"
#   make bench            CPU benchmarks (tokens/s, ratios side by side)
#   make plot             out/log.jsonl (of ./train -o out) -> out/loss.png (dev/plot.py; LOGS=, PLOT=)
#   make PRECISION=FP32   FP32 storage instead of BF16 (for train and test binaries)
#   make NO_MPI=1         build without MPI even if mpicxx is installed (one process only)
#   make NO_CUDA=1        build ./train with g++ even if nvcc is installed
#   make NO_BLAS=1        build without OpenBLAS even if it is installed
#   make DEBUG=1          -O1 -g, released ZeRO buffers poisoned with NaN by default (-poison)
#
# What was found is printed with a check mark or a cross on every build.

PRECISION ?= BF16
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
MPICXX    := $(if $(NO_MPI),,$(shell command -v mpicxx 2>/dev/null))
CXX_HOST  ?= g++

# Host code: optimised for this CPU; no contraction of a*b+c into FMA behind our back (the ops use
# explicit FMAs where they want them; AdamW must round exactly like the GPU); OpenMP threads.
HOST_FLAGS := -O3 -march=native -ffp-contract=off -fno-fast-math -fopenmp -Wall -Wextra
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
# NCCL for several ranks on the CUDA device: in the CUDA toolkit's folders, or in NCCL_HOME
# (e.g. a Python wheel's site-packages/nvidia/nccl, which holds include/ and lib/)
NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard /usr/local/cuda/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h)))
ifneq ($(NCCL_HOME),)
  NVCC_DEFS := -DUSE_NCCL -I$(NCCL_HOME)/include
  CUDA_LIBS += -L$(NCCL_HOME)/lib -lnccl
  NCCL_FOUND := $(NCCL_HOME)
endif
ifneq ($(and $(NVCC),$(if $(NO_CUDA),,yes)),)
  $(info ✓ nvcc: $(NVCC))
  $(if $(NCCL_FOUND),$(info ✓ NCCL: $(NCCL_FOUND)),$(info ✗ NCCL: not found (set NCCL_HOME): the CUDA device runs one rank only))
  TRAIN_WITH := nvcc
else
  $(info ✗ nvcc: not found (or NO_CUDA=1): ./train is the CPU device only)
  TRAIN_WITH := g++
endif

SOURCES := train_gpt.cu device.cuh zero.h adamw.cuh dataloader.h tokenizer.h unicode_tables.h rng.h $(wildcard ops/*.cuh)
TEST_SOURCES := $(wildcard test/*.cpp test/*.h)

.PHONY: all train test test-binaries nvcc-check test-gpu gpu-binaries bench plot clean
all: train

train: $(SOURCES)
ifeq ($(TRAIN_WITH),nvcc)
	$(NVCC) $(NVCC_FLAGS) $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) train_gpt.cu -o train $(MPI_LIBS) $(CUDA_LIBS)
else
	$(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(DEFS) $(MPI_CFLAGS) train_gpt.cu -o train $(MPI_LIBS)
endif

# The CPU-only trainer built by g++, whatever is installed (the tests use it through test binaries).
train_cpu: $(SOURCES)
	$(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(DEFS) $(MPI_CFLAGS) train_gpt.cu -o train_cpu $(MPI_LIBS)

# The same in FP32 (make bench compares it with PyTorch's FP32 CPU training).
train_cpu_fp32: $(SOURCES)
	$(CXX_HOST) -x c++ -std=c++17 $(HOST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) train_gpt.cu -o train_cpu_fp32 $(MPI_LIBS)

# One test program, built twice: BF16 (what users run) and FP32 (tight tolerances). Each binary
# is also a trainer: `test/test_bf16 --train [flags]` (so mpirun can start it as N ranks).
TEST_FLAGS := -x c++ -std=c++17 -O2 -g $(filter-out -O3,$(HOST_FLAGS)) -Werror -Wno-format-truncation -DTESTING
test/test_bf16: $(SOURCES) $(TEST_SOURCES)
	$(CXX_HOST) $(TEST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) $(MPI_CFLAGS) test/test_main.cpp -o $@ $(MPI_LIBS)
test/test_fp32: $(SOURCES) $(TEST_SOURCES)
	$(CXX_HOST) $(TEST_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) test/test_main.cpp -o $@ $(MPI_LIBS)

test-binaries: test/test_bf16 test/test_fp32 test/test_emu test/test_emu_fp32

test: test-binaries
	NVCC_CHECK=$(if $(and $(NVCC),$(if $(NO_CUDA),,yes)),yes,no) bash test/run_tests.sh

# The nvcc builds with warnings as errors, to scratch files (run_tests.sh calls it): the trainer and
# the GPU test program.
nvcc-check:
	$(NVCC) $(NVCC_FLAGS) $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) train_gpt.cu -o /tmp/zt_nvcc_check_$$$$ $(MPI_LIBS) $(CUDA_LIBS) && rm -f /tmp/zt_nvcc_check_$$$$
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -Wno-format-truncation $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) test/test_gpu.cu -o /tmp/zt_nvcc_check_gpu_$$$$ $(MPI_LIBS) $(CUDA_LIBS) && rm -f /tmp/zt_nvcc_check_gpu_$$$$

# The GPU test program on the CPU (test/cuda_emu/): emulate.py (python3) copies the sources into
# build/emu/ (kernel launches and __shared__ rewritten, nothing else), g++ compiles test/test_gpu.cu
# from there against test/cuda_emu/include/ (the CUDA subset we use, a fake cuBLASLt and CUB), in
# BF16 and FP32. Kernels get nvcc's FMA contraction (per function; the param undoes the Zen tuning
# that would skip it), host code none; two warnings nvcc does not give for device code are off.
EMU_SOURCES := $(wildcard test/cuda_emu/*.h test/cuda_emu/*.py test/cuda_emu/include/*.h test/cuda_emu/include/cub/device/*)
EMU_COPY    := $(SOURCES) test/test_gpu.cu $(wildcard test/*.h)
EMU_FLAGS   := $(TEST_FLAGS) -Wno-sign-compare -Wno-unused-function --param=avoid-fma-max-bits=0 -DZT_CUDA_EMU -Itest/cuda_emu/include
build/emu/.copied: $(EMU_COPY) test/cuda_emu/emulate.py
	python3 test/cuda_emu/emulate.py build/emu $(EMU_COPY) && touch $@
test/test_emu: build/emu/.copied $(EMU_SOURCES)
	$(CXX_HOST) $(EMU_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) $(MPI_CFLAGS) build/emu/test/test_gpu.cu -o $@ $(MPI_LIBS)
test/test_emu_fp32: build/emu/.copied $(EMU_SOURCES)
	$(CXX_HOST) $(EMU_FLAGS) $(filter-out -DENABLE_FP32,$(DEFS)) -DENABLE_FP32 $(MPI_CFLAGS) build/emu/test/test_gpu.cu -o $@ $(MPI_LIBS)

# The GPU test program (GPU against CPU, op by op); dev/gpu_check.sh builds and runs it on a GPU.
test/test_gpu: $(SOURCES) test/test_gpu.cu test/gpu_ops.h test/gpu_misc.h test/gpu_matmul.h test/gpu_attention.h test/tolerances.h test/test.h
	$(NVCC) $(NVCC_FLAGS) -Xcompiler -Wno-format-truncation $(DEFS) $(NVCC_DEFS) $(MPI_CFLAGS) test/test_gpu.cu -o $@ $(MPI_LIBS) $(CUDA_LIBS)
test-gpu: test/test_gpu

# Binaries to carry to a GPU machine that has CUDA 13 but neither MPI nor OpenBLAS (dev/gpu_check.sh):
# one process per GPU; NCCL from NCCL_HOME (the toolkit's or a Python wheel's).
gpu-binaries: $(SOURCES) test/test_gpu.cu test/gpu_ops.h test/gpu_misc.h test/gpu_matmul.h test/gpu_attention.h
	$(MAKE) -B NO_MPI=1 NO_BLAS=1 train && mv train train_gpu
	$(MAKE) -B NO_MPI=1 NO_BLAS=1 test/test_gpu

bench: train_cpu train_cpu_fp32
	bash dev/bench.sh

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
	rm -f train train_gpu train_cpu train_cpu_fp32 test/test_bf16 test/test_fp32 test/test_gpu test/test_emu test/test_emu_fp32
	rm -rf build/emu
