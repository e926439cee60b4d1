// ops/packed.cuh — 16-byte loads and stores for the memory-bound kernels (llm.c's Packed128).
//
// The memory-bound kernels (residual + layernorm, GELU and GELU', the bias gradient, the embedding)
// read and write floatX arrays. With one 2-byte access per thread a warp issues a 64-byte request per
// instruction; with one 16-byte access (ld.global.v4 / st.global.v4) it moves 512 bytes, 8 BF16 (or 4
// FP32) values per thread, so the memory system, not the instruction issue, sets the speed. Every
// rounding point stays where the CPU op has it: a pack is only a way to move bytes, the arithmetic
// on its elements is the scalar code's.
//
// The rule a GPU enforces: the address of a 16-byte access is 16-byte aligned, or the kernel stops
// with "misaligned address" (the emulator, test/cuda_emu/, checks it too). So a kernel takes its
// vector path only when every pointer it moves in packs is 16-byte aligned and, for row-wise kernels,
// the row length is a multiple of PACK_X (so every row starts aligned); otherwise it runs the same
// code one element at a time. Elementwise kernels do the whole packs with vectors and the last
// n % PACK_X elements (the tail) one at a time. Where a kernel sums, it assigns elements to threads
// and orders its sums by pack (element c belongs to pack c / PACK_X) on both paths, so its bits do
// not depend on which path ran. Loops over a pack's elements run to the constant PACK_X with a
// guard (`if (k < n)`), never to a run-time bound, so that nvcc unrolls them and a pack's arrays
// stay in registers (an array indexed at run time goes to local memory).
//
// defines: PACK_X, Packed128, load128, store128, aligned16
//
// May call: device.cuh.
#ifndef ZT_OPS_PACKED_CUH
#define ZT_OPS_PACKED_CUH

#include "../device.cuh" // defines: floatX

#ifdef __CUDACC__
#define PACK_X ((int)(16 / sizeof(floatX))) // floatX elements in 16 bytes: 8 in BF16, 4 in FP32

// 16 bytes seen as 16 / sizeof(T) elements of T (a value in registers, never a pointer into memory).
template <class T> struct alignas(16) Packed128 {
    T v[16 / sizeof(T)];
    __device__ T& operator[](int i) { return v[i]; }
    __device__ const T& operator[](int i) const { return v[i]; }
};

// One 16-byte load from p, which must be 16-byte aligned.
template <class T> __device__ static inline Packed128<T> load128(const T* p) {
    uint4 bits = *reinterpret_cast<const uint4*>(p);
    Packed128<T> r;
    memcpy((void*)&r, (const void*)&bits, 16);
    return r;
}
// One 16-byte store to p, which must be 16-byte aligned.
template <class T> __device__ static inline void store128(T* p, const Packed128<T>& x) {
    uint4 bits;
    memcpy((void*)&bits, (const void*)&x, 16);
    *reinterpret_cast<uint4*>(p) = bits;
}

// Whether a pointer may be used for 16-byte accesses (host side: the launchers decide the path).
static inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }
#endif // __CUDACC__

#endif // ZT_OPS_PACKED_CUH
