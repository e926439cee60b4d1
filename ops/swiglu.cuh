// ops/swiglu.cuh — the SwiGLU gate of the Llama MLP (Shazeer 2020), forward and backward.
//
//   forward:  gu (N, 2F): each row is gate (F) ; up (F), the fused up-projection's output
//             out (N, F) = rn(rn(silu(gate)) * up)                               [floatX, =]
//   backward: dgu (N, 2F): dgate = rn(rn(dout * up) * silu'(gate)),
//                          dup   = rn(dout * rn(silu(gate)))                     [floatX, =]
// with silu(x) = x / (1 + exp(-x)) and silu'(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x))).
// The rounding points are transformers' LlamaMLP, down(act_fn(gate(x)) * up(x)): act_fn's output is
// a tensor of the activation dtype (rounded), then the product is rounded; autograd rounds the
// product's gradients the same way (dact = rn(dout * up), then silu's backward in FP32, rounded).
// The FP32 build has no roundings. The operations are in torch's order (silu: x / (1 + exp(-x));
// its backward: (dy * sig) * (1 + x * (1 - sig))).
//
// CPU: rows in parallel. CUDA: one thread per PACK_X elements of out (16-byte accesses when F is a
// multiple of PACK_X and the pointers are aligned, else one element at a time), the same operations
// through _rn intrinsics (no FMA contraction); the device's expf differs from the host's by at most 2 ulp.
//
// defines: op_swiglu_forward, op_swiglu_backward
//
// May call: device.cuh and packed.cuh.
#ifndef ZT_OPS_SWIGLU_CUH
#define ZT_OPS_SWIGLU_CUH

#include "../device.cuh"   // defines: floatX, ld, rn
#include "packed.cuh"      // defines: PACK_X, Packed128, load128, store128, aligned16

// The element, on the host: silu(x) = x / (1 + exp(-x)) and sigmoid as torch computes them, FP32,
// never contracted into FMAs (-ffp-contract=off). The kernels below have their own copies with _rn
// intrinsics (a function shared by host and device would be contracted on the device).
static inline float swiglu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float swiglu_silu(float x) { return x / (1.0f + expf(-x)); }
// out = rn(rn(silu(g)) * u)
static inline floatX swiglu_fwd1(float g, float u) { return rn(ld(rn(swiglu_silu(g))) * u); }
// dgate = rn(rn(d * u) * sig * (1 + g * (1 - sig))) (torch's order), dup = rn(d * rn(silu(g)))
static inline void swiglu_bwd1(floatX* dg, floatX* du, float d, float g, float u) {
    float sig = swiglu_sigmoid(g);
    float da = ld(rn(d * u));
    *dg = rn(da * sig * (1.0f + g * (1.0f - sig)));
    *du = rn(d * ld(rn(swiglu_silu(g))));
}

#ifdef __CUDACC__
// ---- CUDA kernels: thread idx owns elements [c0, c0 + PACK_X) of row n (the row's last pack may be
// short when !vec; with vec, F % PACK_X == 0 and every pointer is 16-byte aligned).

// The host element's operations in the same order, each rounded on its own (no FMA).
__device__ static inline float swiglu_sigmoid_dev(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
__device__ static inline float swiglu_silu_dev(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ static inline floatX swiglu_fwd1_dev(float g, float u) { return rn(__fmul_rn(ld(rn(swiglu_silu_dev(g))), u)); }
__device__ static inline void swiglu_bwd1_dev(floatX* dg, floatX* du, float d, float g, float u) {
    float sig = swiglu_sigmoid_dev(g);
    float da = ld(rn(__fmul_rn(d, u)));
    *dg = rn(__fmul_rn(__fmul_rn(da, sig), __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig)))));
    *du = rn(__fmul_rn(d, ld(rn(swiglu_silu_dev(g)))));
}

__global__ static void swiglu_forward_kernel(floatX* out, const floatX* gu, int64_t N, int F, int vec) {
    int64_t packs = ceil_div(F, PACK_X);
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * packs) return;
    int64_t n = idx / packs;
    int c0 = (int)(idx % packs) * PACK_X;
    const floatX* g = gu + n * 2 * F + c0;
    const floatX* u = g + F;
    floatX* o = out + n * F + c0;
    if (vec) {
        Packed128<floatX> a = load128(g), b = load128(u), r;
        for (int k = 0; k < PACK_X; k++) r[k] = swiglu_fwd1_dev(ld(a[k]), ld(b[k]));
        store128(o, r);
        return;
    }
    for (int k = 0; k < PACK_X; k++) if (c0 + k < F) o[k] = swiglu_fwd1_dev(ld(g[k]), ld(u[k]));
}

__global__ static void swiglu_backward_kernel(floatX* dgu, const floatX* dout, const floatX* gu, int64_t N, int F,
                                              int vec) {
    int64_t packs = ceil_div(F, PACK_X);
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * packs) return;
    int64_t n = idx / packs;
    int c0 = (int)(idx % packs) * PACK_X;
    const floatX* g = gu + n * 2 * F + c0;
    const floatX* u = g + F;
    const floatX* d = dout + n * F + c0;
    floatX* dg = dgu + n * 2 * F + c0;
    floatX* du = dg + F;
    if (vec) {
        Packed128<floatX> a = load128(g), b = load128(u), dd = load128(d), rg, ru;
        for (int k = 0; k < PACK_X; k++) swiglu_bwd1_dev(&rg[k], &ru[k], ld(dd[k]), ld(a[k]), ld(b[k]));
        store128(dg, rg);
        store128(du, ru);
        return;
    }
    for (int k = 0; k < PACK_X; k++)
        if (c0 + k < F) swiglu_bwd1_dev(&dg[k], &du[k], ld(d[k]), ld(g[k]), ld(u[k]));
}

static void swiglu_forward_cuda(floatX* out, const floatX* gu, int64_t N, int F) {
    int64_t n = N * ceil_div(F, PACK_X);
    if (n <= 0) return;
    int vec = F % PACK_X == 0 && aligned16(out) && aligned16(gu);
    swiglu_forward_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(out, gu, N, F, vec);
    cudaCheck(cudaGetLastError());
}

static void swiglu_backward_cuda(floatX* dgu, const floatX* dout, const floatX* gu, int64_t N, int F) {
    int64_t n = N * ceil_div(F, PACK_X);
    if (n <= 0) return;
    int vec = F % PACK_X == 0 && aligned16(dgu) && aligned16(dout) && aligned16(gu);
    swiglu_backward_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(dgu, dout, gu, N, F, vec);
    cudaCheck(cudaGetLastError());
}
#endif

// out (N, F) = rn(rn(silu(gate)) * up), gu (N, 2F) = gate ; up per row.
static void op_swiglu_forward(floatX* out, const floatX* gu, int64_t N, int F) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { swiglu_forward_cuda(out, gu, N, F); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const floatX* g = gu + n * 2 * F;
        const floatX* u = g + F;
        floatX* o = out + n * F;
        for (int c = 0; c < F; c++) o[c] = swiglu_fwd1(ld(g[c]), ld(u[c]));
    }
}

// Backward of `out = rn(rn(silu(gate)) * up)`: dgu (N, 2F) [=] from dout (N, F) and the forward's gu.
static void op_swiglu_backward(floatX* dgu, const floatX* dout, const floatX* gu, int64_t N, int F) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { swiglu_backward_cuda(dgu, dout, gu, N, F); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const floatX* g = gu + n * 2 * F;
        const floatX* u = g + F;
        const floatX* d = dout + n * F;
        floatX* dg = dgu + n * 2 * F;
        floatX* du = dg + F;
        for (int c = 0; c < F; c++) swiglu_bwd1(&dg[c], &du[c], ld(d[c]), ld(g[c]), ld(u[c]));
    }
}

#endif // ZT_OPS_SWIGLU_CUH
