// ops/lora.cuh — the three elementwise pieces of a LoRA adapter that the matmuls do not cover
// (lora.h builds the adapter y += (alpha/r) B (A x) from op_matmul_forward/backward and these):
//
//   op_lora_add_cols:  out[n, col0 + j] = rn(out[n, col0 + j] + scale * v[n, j])   out (N, ld), v (N, cols)   [floatX, +=]
//   op_lora_take_cols: dv[n, j] = rn(scale * dout[n, col0 + j])                    dv (N, cols)               [floatX, =]
//   op_add_inplace:    dst[i] = rn(dst[i] + src[i])                                (n)                        [floatX, +=]
//
// The column range is where a target's rows sit in a fused projection's output (q_proj's in q;k;v).
// CPU: rows in parallel. CUDA: one thread per element; the same FP32 operations through _rn
// intrinsics (no FMA contraction), so both devices round identically.
//
// defines: op_lora_add_cols, op_lora_take_cols, op_add_inplace
//
// May call: device.cuh.
#ifndef ZT_OPS_LORA_CUH
#define ZT_OPS_LORA_CUH

#include "../device.cuh" // defines: floatX, ld, rn, ceil_div, g_stream

ZT_HD static inline floatX lora_axpy1(float o, float s, float v) {
#ifdef __CUDA_ARCH__
    return rn(__fadd_rn(o, __fmul_rn(s, v)));
#else
    return rn(o + s * v);
#endif
}
ZT_HD static inline floatX lora_scale1(float s, float v) {
#ifdef __CUDA_ARCH__
    return rn(__fmul_rn(s, v));
#else
    return rn(s * v);
#endif
}

#ifdef __CUDACC__
__global__ static void lora_add_cols_kernel(floatX* out, int64_t ld_out, int64_t col0, const floatX* v, int64_t N, int64_t cols, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * cols) return;
    int64_t n = i / cols, j = i % cols;
    floatX* o = out + n * ld_out + col0 + j;
    *o = lora_axpy1(ld(*o), scale, ld(v[i]));
}
__global__ static void lora_take_cols_kernel(floatX* dv, const floatX* dout, int64_t ld_out, int64_t col0, int64_t N, int64_t cols, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * cols) return;
    int64_t n = i / cols, j = i % cols;
    dv[i] = lora_scale1(scale, ld(dout[n * ld_out + col0 + j]));
}
__global__ static void add_inplace_kernel(floatX* dst, const floatX* src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = lora_axpy1(ld(dst[i]), 1.0f, ld(src[i]));
}
#endif

static void op_lora_add_cols(floatX* out, int64_t ld_out, int64_t col0, const floatX* v, int64_t N, int64_t cols, float scale) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (N > 0 && cols > 0) lora_add_cols_kernel<<<(unsigned)ceil_div(N * cols, 256), 256, 0, g_stream>>>(out, ld_out, col0, v, N, cols, scale);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < cols; j++) {
            floatX* o = out + n * ld_out + col0 + j;
            *o = lora_axpy1(ld(*o), scale, ld(v[n * cols + j]));
        }
}

static void op_lora_take_cols(floatX* dv, const floatX* dout, int64_t ld_out, int64_t col0, int64_t N, int64_t cols, float scale) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (N > 0 && cols > 0) lora_take_cols_kernel<<<(unsigned)ceil_div(N * cols, 256), 256, 0, g_stream>>>(dv, dout, ld_out, col0, N, cols, scale);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < cols; j++) dv[n * cols + j] = lora_scale1(scale, ld(dout[n * ld_out + col0 + j]));
}

static void op_add_inplace(floatX* dst, const floatX* src, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (n > 0) add_inplace_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(dst, src, n);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = lora_axpy1(ld(dst[i]), 1.0f, ld(src[i]));
}

#endif // ZT_OPS_LORA_CUH
