// NCCL, emulated between processes on the CPU (test/cuda_emu/fake_nccl.h). Only the emulator build sees this folder.
#include "../fake_nccl.h"
