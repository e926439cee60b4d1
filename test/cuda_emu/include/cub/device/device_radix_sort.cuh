// cub::DeviceRadixSort::SortPairs on the CPU (test/cuda_emu/fake_cub.h).
#include "../../../fake_cub.h"
