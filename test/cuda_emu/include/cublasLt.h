// cuBLASLt's matmul on the CPU, written from its documentation (test/cuda_emu/fake_cublaslt.h).
#include "../fake_cublaslt.h"
