// ops/tensor_core.cuh — the tensor-core instructions the attention kernels use, as small wrappers:
// inline PTX under nvcc (sm_80 and later), the emulator's functions under ZT_CUDA_EMU
// (test/cuda_emu/cuda_emu.h computes them from the PTX ISA's fragment layouts), so the kernels
// read the same either way.
//
//   tc_mma_bf16(d, a, b, c)        mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
//   tc_ldmatrix_x{1,2,4}[_trans]   ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16
//   tc_cp_async_16(dst, src)       cp.async.cg.shared.global, 16 bytes (L2 only: tiles are read once per block)
//   tc_cp_async_commit()           cp.async.commit_group
//   tc_cp_async_wait<N>()          cp.async.wait_group N: all but the N most recent groups have landed
//   tc_pack_bf16(lo, hi)           two FP32 values rounded to nearest BF16 in one .b32 register
//
// The fragments of m16n8k16 (PTX ISA 9.7.14.5.8; g = lane >> 2, t = lane % 4; each .b32 register
// holds two BF16, the lower column/row in the low half), drawn once:
//
//   A (16 x 16, row-major), a[4]           B (16 x 8, "col": k x n), b[2]    C, D (16 x 8, FP32), c[4]
//          cols 2t,2t+1 | cols 2t+8,2t+9          col n = g                         cols 2t, 2t+1
//   row g     a[0]      |   a[2]           rows 2t,2t+1     b[0]            row g      c[0], c[1]
//   row g+8   a[1]      |   a[3]           rows 2t+8,2t+9   b[1]            row g+8    c[2], c[3]
//
// ldmatrix.x4: lanes 8m .. 8m+7 give the row addresses of 8x8 matrix m; register m of lane l gets
// (row l/4, cols 2(l%4), 2(l%4)+1) of matrix m, or with .trans (rows 2(l%4), 2(l%4)+1, col l/4).
// So: A from a row-major 16x16 tile = x4 with lane l addressing row l%16, col 8(l/16);
//     B from an (n, k) row-major tile (K, Q: "rows are keys, k runs along the row") = x4 non-trans,
//       lane l addressing row n0 + l%8 + 8(l/16), col k0 + 8((l/8)%2): registers {0,1} = b for the
//       n-tile n0, {2,3} = b for n0 + 8;
//     B from a (k, n) row-major tile (V, dO: "rows are keys, n runs along the row") = x4 .trans,
//       lane l addressing row k0 + l%8 + 8((l/8)%2), col n0 + 8(l/16): registers {0,1} = b for n0,
//       {2,3} = b for n0 + 8;
//     A from accumulators: the C fragments of two neighbouring n-tiles j, j+1 (16 x 16 of FP32)
//       are, rounded to BF16, exactly the A fragment of that 16 x 16 tile:
//       a = {pack(c_j[0], c_j[1]), pack(c_j[2], c_j[3]), pack(c_j+1[0], c_j+1[1]), pack(c_j+1[2], c_j+1[3])}.
//
// defines: tc_mma_bf16, tc_ldmatrix_x1/x2/x4(_trans), tc_cp_async_16, tc_cp_async_commit,
//          tc_cp_async_wait, tc_pack_bf16
//
// May call: device.cuh.
#ifndef ZT_OPS_TENSOR_CORE_CUH
#define ZT_OPS_TENSOR_CORE_CUH

#ifdef __CUDACC__
#include "../device.cuh" // defines: bf16_t, f32_to_bf16

// Two FP32 values rounded to nearest (ties to even) BF16, lo in bits 0..15 (the same rounding as rn()).
__device__ static inline uint32_t tc_pack_bf16(float lo, float hi) {
    return (uint32_t)f32_to_bf16(lo).bits | (uint32_t)f32_to_bf16(hi).bits << 16;
}

#ifdef ZT_CUDA_EMU
__device__ static inline void tc_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    emu_mma_m16n8k16_bf16(d, a, b, c);
}
__device__ static inline void tc_ldmatrix_x1(uint32_t r[1], const void* row) { emu_ldmatrix(r, 1, 0, row); }
__device__ static inline void tc_ldmatrix_x2(uint32_t r[2], const void* row) { emu_ldmatrix(r, 2, 0, row); }
__device__ static inline void tc_ldmatrix_x4(uint32_t r[4], const void* row) { emu_ldmatrix(r, 4, 0, row); }
__device__ static inline void tc_ldmatrix_x1_trans(uint32_t r[1], const void* row) { emu_ldmatrix(r, 1, 1, row); }
__device__ static inline void tc_ldmatrix_x2_trans(uint32_t r[2], const void* row) { emu_ldmatrix(r, 2, 1, row); }
__device__ static inline void tc_ldmatrix_x4_trans(uint32_t r[4], const void* row) { emu_ldmatrix(r, 4, 1, row); }
__device__ static inline void tc_cp_async_16(void* dst, const void* src) { emu_cp_async(dst, src, 16); }
__device__ static inline void tc_cp_async_commit() { emu_cp_async_commit(); }
template <int N> __device__ static inline void tc_cp_async_wait() { emu_cp_async_wait(N); }
#else
__device__ static inline void tc_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ static inline uint32_t tc_smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ static inline void tc_ldmatrix_x1(uint32_t r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_ldmatrix_x2(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_ldmatrix_x4(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_ldmatrix_x1_trans(uint32_t r[1], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_ldmatrix_x2_trans(uint32_t r[2], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_ldmatrix_x4_trans(uint32_t r[4], const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(row)));
}
__device__ static inline void tc_cp_async_16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(tc_smem(dst)), "l"(src) : "memory");
}
__device__ static inline void tc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ static inline void tc_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif
#endif // __CUDACC__
#endif // ZT_OPS_TENSOR_CORE_CUH
