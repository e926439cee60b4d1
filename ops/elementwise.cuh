// ops/elementwise.cuh — elementwise arithmetic on floatX any family's code or an adapter can use, with
// one rounding rule on both devices:
//
//   ew_axpy1(o, s, v) = rn(o + s * v)     ew_scale1(s, v) = rn(s * v)      one element (host; _dev: kernels)
//   op_add_inplace:     dst[i] = rn(dst[i] + src[i])                       (n)   [floatX, +=]
//
// Host code is never contracted into FMAs (-ffp-contract=off); the kernels' copies spell every
// rounding out with _rn intrinsics, so nvcc's contraction (--fmad=true) cannot fuse them either: both
// devices round identically. (Kernels call the _dev copies explicitly rather than branching on
// __CUDA_ARCH__ in one host-device function, so the CUDA emulator, which compiles kernels as
// contracted host code, runs what the GPU runs.) CPU: elements in parallel. CUDA: one thread each.
//
// defines: ew_axpy1, ew_scale1, ew_axpy1_dev, ew_scale1_dev, op_add_inplace
//
// May call: device.cuh.
#ifndef ZT_OPS_ELEMENTWISE_CUH
#define ZT_OPS_ELEMENTWISE_CUH

#include "../device.cuh" // defines: floatX, ld, rn, ceil_div, g_stream

static inline floatX ew_axpy1(float o, float s, float v) { return rn(o + s * v); }
static inline floatX ew_scale1(float s, float v) { return rn(s * v); }

#ifdef __CUDACC__
__device__ static inline floatX ew_axpy1_dev(float o, float s, float v) { return rn(__fadd_rn(o, __fmul_rn(s, v))); }
__device__ static inline floatX ew_scale1_dev(float s, float v) { return rn(__fmul_rn(s, v)); }

__global__ static void add_inplace_kernel(floatX* dst, const floatX* src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = ew_axpy1_dev(ld(dst[i]), 1.0f, ld(src[i]));
}
#endif

static void op_add_inplace(floatX* dst, const floatX* src, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (n > 0) add_inplace_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(dst, src, n);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = ew_axpy1(ld(dst[i]), 1.0f, ld(src[i]));
}

#endif // ZT_OPS_ELEMENTWISE_CUH
