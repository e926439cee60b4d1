// adamw.cuh — AdamW over one rank's optimizer range (a shard, or everything under ZeRO-0).
//
// Loshchilov & Hutter, "Decoupled Weight Decay Regularization" (2019), with Adam's bias
// correction (Kingma & Ba 2015). Per element, all in FP32, in exactly this order:
//     g    = grad * grad_scale                      (grad_scale folds in global-norm clipping)
//     m    = fma(beta1, m - g, g)                   (= beta1*m + (1-beta1)*g)
//     v    = fma(beta2, v - g*g, g*g)               (= beta2*v + (1-beta2)*g^2)
//     u    = (m / bc1) / (sqrt(v / bc2) + eps)      (bc1 = 1 - beta1^t, bc2 = 1 - beta2^t, on the host in double)
//     w    = fma(-lr, fma(wd, w, u), w)             (= w - lr*(u + wd*w); wd = 0 off the matrices)
//     param = round_to_nearest(w)                   (BF16 storage; the FP32 master w is the truth)
// Every operation is IEEE-rounded and spelled out (explicit fma, no contraction, no fast-math on
// either side), so the CPU loop here and the CUDA kernel give bit-identical results, and so does
// an offloaded optimizer. Padding between tensors is never touched: the caller passes the
// (offset, length, decay) segments of real parameters, derived from the tensor table.
//
// defines: Segment, AdamWParams, adamw_bias_corrections, op_adamw, op_round_params, op_sumsq
#ifndef ZT_ADAMW_CUH
#define ZT_ADAMW_CUH

#include "device.cuh" // defines: floatX, rn, g_device

// A run of real parameters inside an optimizer range: [off, off+len), decayed or not.
typedef struct { int64_t off, len; int decay; } Segment;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale;  // min(1, clip / ||g||), 1 when clipping is off
    float bc1, bc2;    // bias corrections for this update's t (adamw_bias_corrections)
} AdamWParams;

// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t for update number t >= 1, computed in double.
static void adamw_bias_corrections(AdamWParams* p, int64_t t) {
    p->bc1 = (float)(1.0 - pow((double)p->beta1, (double)t));
    p->bc2 = (float)(1.0 - pow((double)p->beta2, (double)t));
}

ZT_HD static inline void adamw_element(floatX* param, float* master, float* m, float* v, float grad,
                                       float lr, float beta1, float beta2, float eps, float wd,
                                       float grad_scale, float bc1, float bc2) {
    float g = grad * grad_scale;
    float gg = g * g;
    float mi = fmaf(beta1, *m - g, g);
    float vi = fmaf(beta2, *v - gg, gg);
    float u = (mi / bc1) / (sqrtf(vi / bc2) + eps);
    float w = fmaf(-lr, fmaf(wd, *master, u), *master);
    *m = mi;
    *v = vi;
    *master = w;
    *param = rn(w);
}

// Update every element of every segment. All arrays are indexed by the same local offsets.
static void op_adamw(floatX* params, float* master, float* m, float* v, const float* grads,
                     const Segment* segs, int nseg, const AdamWParams* p) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("adamw"); return; }
#endif
    for (int s = 0; s < nseg; s++) {
        int64_t off = segs[s].off, len = segs[s].len;
        float wd = segs[s].decay ? p->weight_decay : 0.0f;
#pragma omp parallel for schedule(static)
        for (int64_t i = off; i < off + len; i++)
            adamw_element(&params[i], &master[i], &m[i], &v[i], grads[i], p->lr, p->beta1, p->beta2,
                          p->eps, wd, p->grad_scale, p->bc1, p->bc2);
    }
}

// params = round_to_nearest(master), elementwise (start-up and after loading a checkpoint).
static void op_round_params(floatX* params, const float* master, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("round_params"); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) params[i] = rn(master[i]);
}

// Sum of squares of g[0..len), for the global gradient norm: FP32 within fixed chunks of
// NORM_CHUNK elements, the chunks added in order in double, so the result does not depend on
// the number of threads. Uses g_work (free between ops) for the chunk sums.
#define NORM_CHUNK 4096
static double op_sumsq(const float* g, int64_t len) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("sumsq"); return 0.0; }
#endif
    int64_t nchunks = ceil_div(len, NORM_CHUNK);
    if ((size_t)nchunks * 2 > g_work_floats) die(1, "norm workspace too small (internal error)");
    double* part = (double*)g_work;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * NORM_CHUNK, hi = lo + NORM_CHUNK < len ? lo + NORM_CHUNK : len;
        float s = 0.0f;
        for (int64_t i = lo; i < hi; i++) s += g[i] * g[i];
        part[c] = s;
    }
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++) total += part[c];
    return total;
}

#endif // ZT_ADAMW_CUH
