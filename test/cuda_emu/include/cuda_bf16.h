// __nv_bfloat16 and its conversions, emulated on the CPU (test/cuda_emu/cuda_emu.h).
#include "../cuda_emu.h"
