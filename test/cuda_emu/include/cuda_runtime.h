// The CUDA runtime, emulated on the CPU (test/cuda_emu/cuda_emu.h). Only the emulator build sees this folder.
#include "../cuda_emu.h"
