// test/gpu_ops.h — the GPU-vs-CPU cases, one file per op family (included by test/test_gpu.cu).
#include "gpu_misc.h"      // encoder, layernorm, GELU, AdamW, parameter rounding, sum of squares
#include "gpu_matmul.h"    // matmul + bias (+ GELU) through cuBLASLt, bias gradients, LM head + cross-entropy
#include "gpu_attention.h" // FlashAttention-2 style forward and backward (grouped-query too)
#include "gpu_llama_ops.h" // the Llama family: residual + RMSNorm, RoPE, SwiGLU, embedding without positions
#include "gpu_lora_ops.h"  // LoRA's elementwise ops: a fused projection's columns, -lora-dropout's mask
#include "gpu_nf4.h"       // the NF4 dequantization of a QLoRA base (ops/nf4.cuh), bitwise
#include "gpu_packed.h"    // the 16-byte paths of the memory-bound kernels against their element paths
#include "gpu_bench.h"     // `test/test_gpu --bench`: the memory-bound kernels timed, both paths
