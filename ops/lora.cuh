// ops/lora.cuh — the elementwise pieces of a LoRA adapter that the matmuls do not cover (lora.h
// builds the adapter y += (alpha/r) B (A dropout(x)) from op_matmul_forward/backward and these):
//
//   op_lora_add_cols:  out[n, col0 + j] = rn(out[n, col0 + j] + scale * v[n, j])   out (N, ld), v (N, cols)   [floatX, +=]
//   op_lora_take_cols: dv[n, j] = rn(scale * dout[n, col0 + j])                    dv (N, cols)               [floatX, =]
//   op_lora_dropout:   out[n, j] = keep(n, j) ? rn(in[n, j] * s) : 0               out, in (N, cols)          [floatX, =; in == out allowed]
//                      with pre (the backward through a GELU): rn(rn(in * s) * gelu'(pre[n, j])) where kept
//
// Dropout (-lora-dropout p, torch's inverted dropout: s = 1/(1-p)) is linear and its own transpose:
// the same op with the same mask is the forward (x -> dropout(x)) and the backward (dxd -> dx). The
// mask is a pure function of (key, sample position, token, column): keep(n, j) = the top 24 bits of
// rng_u64(rng_key(key, pos0 + n / T, n % T), j) >= thr, thr = round(p * 2^24), so a dropped element
// has probability thr / 2^24 (within 2^-25 of p), on both devices the same bits, and nothing stored.
//
// The column range is where a target's rows sit in a fused projection's output (q_proj's in q;k;v).
// CPU: rows in parallel. CUDA: one thread per element; the same FP32 operations through _rn
// intrinsics (no FMA contraction), so both devices round identically.
//
// defines: op_lora_add_cols, op_lora_take_cols, LoraDrop, lora_drop_threshold, lora_drop_keep, op_lora_dropout
//
// May call: device.cuh, rng.h, ops/elementwise.cuh (one element's rounding), ops/matmul.cuh (gelu_bwd).
#ifndef ZT_OPS_LORA_CUH
#define ZT_OPS_LORA_CUH

#include "../device.cuh" // defines: floatX, ld, rn, ceil_div, g_stream
#include "../rng.h"      // defines: rng_key, rng_u64
#include "elementwise.cuh" // defines: ew_axpy1, ew_scale1 (and _dev)
#include "matmul.cuh"    // defines: gelu_bwd

#define LORA_DROP_LABEL 0x4C44524F50ull // "LDROP": the dropout masks' RNG stream label

// One adapter's mask in one micro-batch: key = rng_key(seed, LORA_DROP_LABEL, layer * LORA_MAX_MODULES
// + module); row n is token n % T of the sample at stream position pos0 + n / T.
typedef struct {
    uint64_t key;
    int64_t pos0;
    int64_t T;
    uint32_t thr;  // drop when the element's 24 bits are below it: round(p * 2^24)
    float scale;   // 1 / (1 - p)
} LoraDrop;

static inline uint32_t lora_drop_threshold(float p) { return (uint32_t)llround((double)p * 16777216.0); }

ZT_HD static inline int lora_drop_keep(const LoraDrop* k, int64_t n, int64_t j) {
    uint64_t row = rng_key(k->key, (uint64_t)(k->pos0 + n / k->T), (uint64_t)(n % k->T));
    return (uint32_t)(rng_u64(row, (uint64_t)j) >> 40) >= k->thr;
}

// One element of the dropout, the host's and the kernel's (the rounding rule of ops/elementwise.cuh).
static inline floatX lora_drop1(const LoraDrop* k, int64_t n, int64_t j, float x, const floatX* pre, int64_t i) {
    if (!lora_drop_keep(k, n, j)) return rn(0.0f);
    float y = ld(rn(x * k->scale));
    return pre ? rn(y * gelu_bwd(ld(pre[i]))) : rn(y);
}

#ifdef __CUDACC__
__device__ static inline floatX lora_drop1_dev(const LoraDrop* k, int64_t n, int64_t j, float x, const floatX* pre, int64_t i) {
    if (!lora_drop_keep(k, n, j)) return rn(0.0f);
    float y = ld(rn(__fmul_rn(x, k->scale)));
    return pre ? rn(__fmul_rn(y, gelu_bwd(ld(pre[i])))) : rn(y); // (gelu' itself: within ulps of the host's tanhf)
}

__global__ static void lora_add_cols_kernel(floatX* out, int64_t ld_out, int64_t col0, const floatX* v, int64_t N, int64_t cols, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * cols) return;
    int64_t n = i / cols, j = i % cols;
    floatX* o = out + n * ld_out + col0 + j;
    *o = ew_axpy1_dev(ld(*o), scale, ld(v[i]));
}
__global__ static void lora_take_cols_kernel(floatX* dv, const floatX* dout, int64_t ld_out, int64_t col0, int64_t N, int64_t cols, float scale) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * cols) return;
    int64_t n = i / cols, j = i % cols;
    dv[i] = ew_scale1_dev(scale, ld(dout[n * ld_out + col0 + j]));
}
__global__ static void lora_dropout_kernel(floatX* out, const floatX* in, const floatX* pre, int64_t N, int64_t cols, LoraDrop k) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * cols) return;
    out[i] = lora_drop1_dev(&k, i / cols, i % cols, ld(in[i]), pre, i);
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
            *o = ew_axpy1(ld(*o), scale, ld(v[n * cols + j]));
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
        for (int64_t j = 0; j < cols; j++) dv[n * cols + j] = ew_scale1(scale, ld(dout[n * ld_out + col0 + j]));
}

static void op_lora_dropout(floatX* out, const floatX* in, const floatX* pre, int64_t N, int64_t cols, LoraDrop k) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (N > 0 && cols > 0) lora_dropout_kernel<<<(unsigned)ceil_div(N * cols, 256), 256, 0, g_stream>>>(out, in, pre, N, cols, k);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < cols; j++) out[n * cols + j] = lora_drop1(&k, n, j, ld(in[n * cols + j]), pre, n * cols + j);
}

#endif // ZT_OPS_LORA_CUH
