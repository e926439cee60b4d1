// test/train_gpu_fp32.cu — the trainer with FP32 storage (PRECISION=FP32), as a translation unit of
// its own, so that `make gpu-binaries` compiles the BF16 trainer, this one and the GPU test program in
// one nvcc call (dev/gpu_check.sh's fp32 stage runs it as ./train_gpu_fp32).
#ifndef ENABLE_FP32
#define ENABLE_FP32
#endif
#include "../train_gpt.cu" // defines: the whole trainer, main
