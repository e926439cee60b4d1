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
// CUDA: adamw_kernel runs the same element update written with explicit IEEE round-to-nearest
// intrinsics (adamw_element_rn; why: see there), one launch per op_adamw call with the segment
// table passed by value as a kernel argument (no copy to the device, no synchronisation).
//
// A NON-FINITE UPDATE NEVER LANDS. Finite gradients, a finite norm and a finite clip scale can still
// give a non-finite update: lr*(u + wd*w) overflows (a huge learning rate), m - g overflows in m,
// or w lands beyond BF16's largest value and rounds to infinity. (A gradient whose square overflows
// makes the norm's FP32 chunk sum infinite first: that step is skipped by the norm.) So a step runs
// AdamW twice over its range: op_adamw_check computes every new m, v, w and BF16 parameter exactly
// as the update will and writes none of them, only a flag (StepScalars.overflow) when one is not
// finite; the flag is summed over ranks (zero_adamw_check) and the update proper (op_adamw_scalars)
// writes nothing when it is set, so the state is never written rather than restored. Why two passes
// and not "write, then restore": restoring needs a copy of master, m and v (12 bytes per parameter)
// and a copy pass every step; the check reads master, m, v and the gradient once more (16 of the
// update's 30 bytes per parameter) and allocates nothing. The update itself is the same operations
// in the same order, so normal runs are bitwise what they were.
// op_sumsq sums fixed chunks with a fixed tree on the GPU: deterministic, within a few 1e-7 of
// the CPU's sequential chunk sums, not bitwise equal to them (see op_sumsq). The step's scalars
// (StepScalars: loss, sum of squares, norm, clip scale, finite flag) stay where the step runs.
//
// defines: Segment, AdamWParams, StepScalars, AdamWMax, adamw_bias_corrections,
//          adamw_host_pass, adamw_host_touch, adamw_host, adamw_host_max, adamw_host_rate,
//          adamw_check_host, adamw_bound_finite, op_adamw,
//          op_adamw_scalars, op_adamw_check, op_round_params,
//          op_sumsq_many_into, op_sumsq_many, op_sumsq, op_loss_add, op_step_scalars
//
// May call: device.cuh, simd.h.
#ifndef ZT_ADAMW_CUH
#define ZT_ADAMW_CUH

#include <time.h>
#include "device.cuh" // defines: floatX, rn, g_device
#include "simd.h"     // defines: SIMD_*, simd_names, simd_supported, simd_level, g_simd, ZT_X86, ZT_TARGET_AVX2/512

// A run of real parameters inside an optimizer range: [off, off+len), decayed or not.
typedef struct { int64_t off, len; int decay; } Segment;

typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_scale;  // min(1, clip / ||g||), 1 when clipping is off
    float bc1, bc2;    // bias corrections for this update's t (adamw_bias_corrections)
} AdamWParams;

// The step's scalars, where the step runs (device memory on a GPU): the loss and the gradient's sum
// of squares as the step adds them up (op_loss_add, op_sumsq_many_into), then what op_step_scalars
// derives from them: the global norm, the clipping scale and whether the step is finite. The AdamW
// kernel reads grad_scale and finite from here, so on a GPU the host never waits for the norm; it
// reads the whole struct back one step later (train_step), into pinned memory.
typedef struct {
    double loss_sum;  // sum of the per-token losses of every micro-step (summed over ranks when R > 1)
    double sumsq;     // sum of squares of the gradient (likewise)
    float norm;       // (float)sqrt(sumsq)
    float grad_scale; // clip / norm when clipping applies, else 1
    int finite;       // norm is finite: 0 skips the optimizer (op_adamw_scalars)
    int overflow;     // op_adamw_check: a new m, v, master or parameter would not be finite (on some
                      // rank: zero_adamw_check sums it over ranks): 1 skips the optimizer too
    int proved;       // op_adamw_bound: this rank's check was proved by its bound (adamw_bound_finite):
                      // its pass read nothing
} StepScalars;

// norm, grad_scale, finite from sumsq, the same operations on both devices (IEEE double sqrt,
// rounding to float, float division: bit-identical).
ZT_HD static inline void step_scalars_finish(StepScalars* s, float clip) {
    s->norm = (float)sqrt(s->sumsq);
    s->finite = isfinite(s->norm) ? 1 : 0;
    s->grad_scale = clip > 0.0f && s->norm > clip ? clip / s->norm : 1.0f;
}

// An update's new values are all finite: m, v, the FP32 master w and its rounding to storage.
// Branch-free, so the check costs what the update costs: x - x is +0 for a finite x and NaN for an
// infinity or a NaN (exact IEEE arithmetic, no fast-math on either side); the stored parameter
// rn(w) is finite exactly when |w| < FLOATX_ROUNDS_TO_INF (false for an infinite or NaN w too),
// which op_adamw_check_overflow checks against isfinite(ld(rn(w))) at the boundary.
#ifdef ENABLE_FP32
#define FLOATX_ROUNDS_TO_INF INFINITY
#else
#define FLOATX_ROUNDS_TO_INF 0x1.ffp+127f // 0x7f7f8000: halfway between BF16's largest (0x7f7f) and infinity; ties to even (0x7f80)
#endif
ZT_HD static inline int adamw_finite(float mi, float vi, float w) {
    float z = (mi - mi) + (vi - vi);
    return (z == z) & (fabsf(w) < FLOATX_ROUNDS_TO_INF);
}

// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t for update number t >= 1, computed in double.
static void adamw_bias_corrections(AdamWParams* p, int64_t t) {
    p->bc1 = (float)(1.0 - pow((double)p->beta1, (double)t));
    p->bc2 = (float)(1.0 - pow((double)p->beta2, (double)t));
}

// ---- The check proved instead of run (-offload, where the check's pass reads the whole state once
// more: with nvme, from the disk; and on the device, op_adamw_bound). After an update, the maxima
// fold (adamw_host_max on the host, adamw_kernel with mx on the device) has the largest |m|, v and
// |w| it left (and whether every value is finite and v >= 0). With those and the gradient's norm
// every new value of the next update is bounded, element by element, without reading the state:
//     |g| <= G = 2 sqrt(sumsq) grad_scale   (one element's square is at most the sum; the factor 2
//                                            covers the sum's FP32 rounding, at most 4096 * 2^-24)
//     |m - g| <= M + G,  |m'| <= b1 (M + G) + G,  v' <= b2 (V + G^2) + G^2,
//     |u| <= (|m'| / bc1) / eps  (sqrt(v'/bc2) >= 0),  |w'| <= W + lr (|u| + wd W).
// When each bound, with a factor 4 for the rounding of the few operations behind it, stays below the
// largest value that rounds finite in storage, no new m, v, w or parameter can be infinite or NaN:
// the check's pass would find nothing, so skipping it changes no bit. Otherwise -- maxima unknown
// (start, a loaded checkpoint), eps < 1e-30, beta outside [0, 1 - 1e-6], a huge learning rate or
// gradient -- the pass runs (adamw_check_host, adamw_check_kernel). A step that overflows is never proved finite: the
// bound is sound, not tight (test: op_adamw_bound_sound).
typedef struct { float m, v, w; int known; } AdamWMax; // largest |m|, v, |w|; known: valid and every value finite, v >= 0

ZT_HD static inline int adamw_bound_finite(const AdamWParams* p, const StepScalars* sc, const AdamWMax* mx) {
    if (!mx->known || !(p->eps >= 1e-30f) || !(p->bc1 > 0.0f) || !(p->bc2 > 0.0f)) return 0;
    if (!(p->beta1 >= 0.0f && p->beta1 <= 1.0f - 1e-6f && p->beta2 >= 0.0f && p->beta2 <= 1.0f - 1e-6f)) return 0;
    double top = fmin((double)FLOATX_ROUNDS_TO_INF, (double)FLT_MAX) / 4.0;
    double lr = fabs((double)p->lr), wd = fabs((double)p->weight_decay);
    double G = 2.0 * sqrt(sc->sumsq) * fabs((double)sc->grad_scale), GG = G * G;
    double dm = (double)mx->m + G, m1 = p->beta1 * dm + G;
    double dv = (double)mx->v + GG, v1 = p->beta2 * dv + GG;
    double mh = m1 / p->bc1, u = mh / p->eps, dec = wd * mx->w, upd = lr * (u + dec), w1 = (double)mx->w + upd;
    double b[] = {G, GG, dm, m1, dv, v1, v1 / p->bc2, mh, u, dec, u + dec, upd, w1};
    for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++)
        if (!(b[i] < top)) return 0; // (NaN and infinity fail too)
    return 1;
}

#ifdef __CUDACC__
// ---- CUDA kernels

// adamw_element on the device, bit for bit. nvcc contracts a*b+c into an FMA by default
// (--fmad=true) and may do so across statements (e.g. `*v - g*g` into fma(-g, g, *v)), which the
// host build forbids (-ffp-contract=off): so every operation is an intrinsic that is never
// contracted, in the CPU's order, each IEEE-rounded to nearest even. __fdiv_rn and __fsqrt_rn are
// the correctly rounded division and square root (what / and sqrtf are on the host), and subnormals
// are kept on both sides (no -ftz, no fast-math). The final rounding to storage is rn(), the same
// integer code on both sides.
__device__ static inline void adamw_math_rn(float* mi, float* vi, float* w, float master, float m, float v, float grad,
                                            float lr, float beta1, float beta2, float eps, float wd,
                                            float grad_scale, float bc1, float bc2) {
    float g = __fmul_rn(grad, grad_scale);                                                  // grad * grad_scale
    float gg = __fmul_rn(g, g);                                                             // g * g
    *mi = __fmaf_rn(beta1, __fsub_rn(m, g), g);                                             // fmaf(beta1, m - g, g)
    *vi = __fmaf_rn(beta2, __fsub_rn(v, gg), gg);                                           // fmaf(beta2, v - gg, gg)
    float u = __fdiv_rn(__fdiv_rn(*mi, bc1), __fadd_rn(__fsqrt_rn(__fdiv_rn(*vi, bc2)), eps)); // (mi/bc1) / (sqrtf(vi/bc2) + eps)
    *w = __fmaf_rn(-lr, __fmaf_rn(wd, master, u), master);                                  // fmaf(-lr, fmaf(wd, w, u), w)
}
__device__ static inline void adamw_element_rn(floatX* param, float* master, float* m, float* v, float grad,
                                               float lr, float beta1, float beta2, float eps, float wd,
                                               float grad_scale, float bc1, float bc2) {
    float mi, vi, w;
    adamw_math_rn(&mi, &vi, &w, *master, *m, *v, grad, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    *m = mi;
    *v = vi;
    *master = w;
    *param = rn(w);
}

// Up to ADAMW_MAX_SEGS segments per launch, passed by value as a kernel argument (it lives in the
// kernel's constant parameter bank: nothing is copied to the device by hand, nothing waits).
// A ZeRO block has at most MAX_BLOCK_TENSORS = 16 tensors; more segments take several launches.
#define ADAMW_MAX_SEGS 16
#define ADAMW_THREADS 256
#define ADAMW_MAX_BLOCKS_X 4096 // per segment; a longer segment is walked grid-stride
typedef struct {
    int64_t off[ADAMW_MAX_SEGS], len[ADAMW_MAX_SEGS];
    float wd[ADAMW_MAX_SEGS]; // weight decay of the segment: p->weight_decay or 0
} AdamWSegTable;

// grid (x: blocks striding over a segment, y: segment). Elementwise: the result does not depend
// on the launch shape.
// sc (may be NULL): the step's scalars on the device; when given, its grad_scale replaces p's and a
// step whose norm is not finite, or whose update would not be (overflow), changes nothing (every
// thread reads the same flags).
// mx (may be NULL): the maxima of the new state are folded into it (adamw_host_max's fold: largest
// |m|, v, |w|; known cleared by a value that is not finite or a v < 0): each block reduces its
// threads' maxima and folds them with atomicMax on the bits (non-negative floats order as their
// bits), so the result is the same for any launch shape and order.
__global__ static void __launch_bounds__(ADAMW_THREADS)
adamw_kernel(floatX* params, float* master, float* m, float* v, const float* grads,
             AdamWSegTable tab, AdamWParams p, const StepScalars* sc, AdamWMax* mx) {
    if (sc && (!sc->finite || sc->overflow)) return;
    float grad_scale = sc ? sc->grad_scale : p.grad_scale;
    int s = blockIdx.y;
    int64_t off = tab.off[s], len = tab.len[s];
    float wd = tab.wd[s];
    float am = 0.0f, av = 0.0f, aw = 0.0f;
    int bad = 0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = off + k;
        float mi, vi, w;
        adamw_math_rn(&mi, &vi, &w, master[i], m[i], v[i], grads[i], p.lr, p.beta1, p.beta2, p.eps, wd,
                      grad_scale, p.bc1, p.bc2);
        m[i] = mi;
        v[i] = vi;
        master[i] = w;
        params[i] = rn(w);
        float ma = fabsf(mi), wa = fabsf(w);
        bad |= !adamw_finite(ma, vi, wa) | !(vi >= 0.0f);
        am = ma > am ? ma : am; // (a NaN is caught by bad)
        av = vi > av ? vi : av;
        aw = wa > aw ? wa : aw;
    }
    if (!mx) return;
    __shared__ float red[3][ADAMW_THREADS / 32];
    __shared__ int red_bad;
    if (threadIdx.x == 0) red_bad = 0;
    for (int o = 16; o > 0; o /= 2) { // warp maxima
        am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
        av = fmaxf(av, __shfl_xor_sync(0xffffffffu, av, o));
        aw = fmaxf(aw, __shfl_xor_sync(0xffffffffu, aw, o));
    }
    __syncthreads(); // (red_bad's zero before any store below)
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { red[0][warp] = am; red[1][warp] = av; red[2][warp] = aw; }
    if (bad) red_bad = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < ADAMW_THREADS / 32; k++) {
            am = fmaxf(am, red[0][k]); av = fmaxf(av, red[1][k]); aw = fmaxf(aw, red[2][k]);
        }
        atomicMax((unsigned int*)&mx->m, __float_as_uint(am));
        atomicMax((unsigned int*)&mx->v, __float_as_uint(av));
        atomicMax((unsigned int*)&mx->w, __float_as_uint(aw));
        if (red_bad) mx->known = 0;
    }
}

// Before an update's launches (op_adamw_max_begin): the maxima restart from {0, 0, 0, known} -- only
// when the update will run; a skipped step leaves the state, and so its maxima, as they were.
__global__ static void adamw_max_begin_kernel(AdamWMax* mx, const StepScalars* sc) {
    if (sc && (!sc->finite || sc->overflow)) return;
    mx->m = 0.0f; mx->v = 0.0f; mx->w = 0.0f; mx->known = 1;
}

// op_adamw_bound on the device: one thread decides whether this step's check is proved.
__global__ static void adamw_bound_kernel(StepScalars* sc, const AdamWMax* mx, AdamWParams p) {
    p.grad_scale = sc->grad_scale;
    sc->proved = sc->finite && adamw_bound_finite(&p, sc, mx);
}

// The check (op_adamw_check): the same arithmetic, nothing written but sc->overflow = 1 when a new
// value would not be finite. Every thread that finds one stores the same 1 (no ordering needed: the
// update is the next launch on the stream).
__global__ static void __launch_bounds__(ADAMW_THREADS)
adamw_check_kernel(const float* master, const float* m, const float* v, const float* grads,
                   AdamWSegTable tab, AdamWParams p, StepScalars* sc) {
    if (!sc->finite || sc->proved) return; // skipped anyway / proved by the bound: nothing to read
    int s = blockIdx.y;
    int64_t off = tab.off[s], len = tab.len[s];
    float wd = tab.wd[s];
    int bad = 0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = off + k;
        float mi, vi, w;
        adamw_math_rn(&mi, &vi, &w, master[i], m[i], v[i], grads[i], p.lr, p.beta1, p.beta2, p.eps, wd,
                      sc->grad_scale, p.bc1, p.bc2);
        bad |= !adamw_finite(mi, vi, w);
    }
    if (bad) sc->overflow = 1;
}

// check = 0: the update (adamw_kernel, maxima into mx when not NULL); 1: the check (adamw_check_kernel,
// sc required).
static void adamw_cuda(floatX* params, float* master, float* m, float* v, const float* grads,
                       const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc, AdamWMax* mx, int check) {
    for (int s0 = 0; s0 < nseg; s0 += ADAMW_MAX_SEGS) {
        AdamWSegTable tab;
        memset(&tab, 0, sizeof(tab));
        int n = 0;
        int64_t maxlen = 0;
        for (int s = s0; s < nseg && s < s0 + ADAMW_MAX_SEGS; s++) {
            if (segs[s].len <= 0) continue;
            tab.off[n] = segs[s].off;
            tab.len[n] = segs[s].len;
            tab.wd[n] = segs[s].decay ? p->weight_decay : 0.0f;
            maxlen = segs[s].len > maxlen ? segs[s].len : maxlen;
            n++;
        }
        if (n == 0) continue;
        int64_t bx = ceil_div(maxlen, ADAMW_THREADS);
        dim3 grid((unsigned)(bx < ADAMW_MAX_BLOCKS_X ? bx : ADAMW_MAX_BLOCKS_X), (unsigned)n);
        if (check) adamw_check_kernel<<<grid, ADAMW_THREADS, 0, g_stream>>>(master, m, v, grads, tab, *p, (StepScalars*)sc);
        else adamw_kernel<<<grid, ADAMW_THREADS, 0, g_stream>>>(params, master, m, v, grads, tab, *p, sc, mx);
        cudaCheck(cudaGetLastError());
    }
}

// params[i] = rn(master[i]), grid-stride.
__global__ static void round_params_kernel(floatX* params, const float* master, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        params[i] = rn(master[i]);
}

#endif

ZT_HD static inline void adamw_math(float* mi, float* vi, float* w, float master, float m, float v, float grad,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float grad_scale, float bc1, float bc2) {
    float g = grad * grad_scale;
    float gg = g * g;
    *mi = fmaf(beta1, m - g, g);
    *vi = fmaf(beta2, v - gg, gg);
    float u = (*mi / bc1) / (sqrtf(*vi / bc2) + eps);
    *w = fmaf(-lr, fmaf(wd, master, u), master);
}
ZT_HD static inline void adamw_element(floatX* param, float* master, float* m, float* v, float grad,
                                       float lr, float beta1, float beta2, float eps, float wd,
                                       float grad_scale, float bc1, float bc2) {
    float mi, vi, w;
    adamw_math(&mi, &vi, &w, *master, *m, *v, grad, lr, beta1, beta2, eps, wd, grad_scale, bc1, bc2);
    *m = mi;
    *v = vi;
    *master = w;
    *param = rn(w);
}

// ---- The host loops: explicit SIMD, chosen at run time
// The CPU device's AdamW and -offload's host AdamW (offload.h) stream master, m, v and the gradient
// through memory once (16 bytes read, 12 + sizeof(floatX) written per element) with the arithmetic
// of adamw_math: g++ vectorises neither the update nor the check by itself (the explicit fmaf, the
// division, sqrtf's errno branch and the rounding to BF16 stop it), so each pass has three paths:
//   scalar  the loop over adamw_math (any CPU; what ZT_SIMD=scalar forces, the reference)
//   avx2    8 lanes, AVX2 + FMA (x86-64-v3: every x86 server CPU beside a Hopper GPU)
//   avx512  16 lanes, AVX-512F
// Each lane runs exactly adamw_math's operations in its order: two products, two subtractions, the
// two explicit fmaf as vfmadd, the IEEE-rounded divisions and square root (vdivps, vsqrtps: correctly
// rounded like / and sqrtf), the last two fmaf, and rn() spelled in integer lanes (NaN stays NaN with
// the quiet bit set, else nearest with ties to even). Nothing is contracted (-ffp-contract=off: the
// intrinsics are plain vector operations to g++, and an add after a multiply stays two roundings),
// no FTZ/DAZ (MXCSR is not touched: subnormals as on the GPU), and an element's result does not
// depend on its lane: every path gives the scalar loop's bits (test: op_adamw_simd_bitwise, every
// path against scalar on zeros, subnormals, values near overflow, non-finite gradients, odd lengths
// and heads; and -offload cpu runs with each path forced, offload_simd_bitwise). The maxima that
// -offload keeps (adamw_host_max) and the check's flag are folded in the same pass, per lane, from
// the values just computed: no second read of the state. The last n % lanes elements of a piece go
// through the scalar loop.
// The path (simd.h, shared with the CPU matmul): ZT_SIMD=scalar|avx2|avx512 forces one (a path this CPU lacks, or another word, ends the
// run: exit 2), else the widest this CPU has (__builtin_cpu_supports: cpuid, and the OS's saving of
// the registers). The binaries stay portable: only the avx2 and avx512 functions are compiled for
// their instruction sets (per-function target attributes), so the x86-64-v3 GPU-box binaries run on a
// CPU without AVX-512 and pick avx2. Other architectures: scalar only.
// Threads: one parallel region per pass; each segment is cut into one contiguous piece per thread,
// the cuts on 32-element boundaries of the index (128 bytes of FP32, 64 of BF16: whole cache lines of
// every array whose base is line-aligned, as the offloaded state's is), so no cache line is written
// by two threads and each thread streams through its piece. adamw_host_touch zeroes an array with the same
// cuts, so pages of the offloaded state are first touched (placed, on a NUMA machine) by the thread
// that updates them.
enum { ADAMW_UPDATE, ADAMW_UPDATE_MAX, ADAMW_CHECK }; // what a pass does
// The path (simd.h: ZT_SIMD, else the widest this CPU has) is simd_level().

// Elements [lo, hi) of one segment, one pass of `mode`; wd: the segment's weight decay, gs: the
// gradient scale. [UPDATE_MAX] acc: the running largest |m|, v, |w| (updated). Returns 1 when a new
// value is not finite ([CHECK]; [UPDATE_MAX]: or v < 0), else 0.
typedef int (*AdamWRangeFn)(int mode, floatX* params, float* master, float* m, float* v, const float* grads, int64_t lo,
                            int64_t hi, const AdamWParams* p, float wd, float gs, float* acc);

static int adamw_range_scalar(int mode, floatX* params, float* master, float* m, float* v, const float* grads, int64_t lo,
                              int64_t hi, const AdamWParams* p, float wd, float gs, float* acc) {
    int bad = 0;
    float am = acc[0], av = acc[1], aw = acc[2];
    for (int64_t i = lo; i < hi; i++) {
        float mi, vi, w;
        adamw_math(&mi, &vi, &w, master[i], m[i], v[i], grads[i], p->lr, p->beta1, p->beta2, p->eps, wd, gs, p->bc1, p->bc2);
        if (mode == ADAMW_CHECK) { bad |= !adamw_finite(mi, vi, w); continue; }
        m[i] = mi;
        v[i] = vi;
        master[i] = w;
        params[i] = rn(w);
        if (mode == ADAMW_UPDATE_MAX) {
            float ma = fabsf(mi), wa = fabsf(w);
            bad |= !adamw_finite(ma, vi, wa) | !(vi >= 0.0f);
            am = ma > am ? ma : am; // (a NaN is caught by bad)
            av = vi > av ? vi : av;
            aw = wa > aw ? wa : aw;
        }
    }
    acc[0] = am; acc[1] = av; acc[2] = aw;
    return bad;
}

#ifdef ZT_X86
// (nvcc hands GCC's intrinsics headers to the host compiler outside their system-header status: their
// _mm*_undefined_* self-initialise, which g++'s -W(maybe-)uninitialized flag at -O2 and under nvcc.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

// AVX-512: 16 lanes. adamw_math's lines, in its order, one instruction each.
ZT_TARGET_AVX512 static inline void adamw_math16(__m512* mi, __m512* vi, __m512* w, __m512 w0, __m512 m0, __m512 v0, __m512 gr,
                                                 __m512 nlr, __m512 b1, __m512 b2, __m512 eps, __m512 wd, __m512 gs, __m512 bc1,
                                                 __m512 bc2) {
    __m512 g = _mm512_mul_ps(gr, gs);                                    // grad * grad_scale
    __m512 gg = _mm512_mul_ps(g, g);                                     // g * g
    *mi = _mm512_fmadd_ps(b1, _mm512_sub_ps(m0, g), g);                  // fmaf(beta1, m - g, g)
    *vi = _mm512_fmadd_ps(b2, _mm512_sub_ps(v0, gg), gg);                // fmaf(beta2, v - gg, gg)
    __m512 den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(*vi, bc2)), eps); // sqrtf(vi / bc2) + eps
    __m512 u = _mm512_div_ps(_mm512_div_ps(*mi, bc1), den);             // (mi / bc1) / den
    *w = _mm512_fmadd_ps(nlr, _mm512_fmadd_ps(wd, w0, u), w0);           // fmaf(-lr, fmaf(wd, w, u), w)
}
// adamw_finite, per lane: the lanes whose m, v, w (and stored parameter) are finite.
ZT_TARGET_AVX512 static inline __mmask16 adamw_finite16(__m512 mi, __m512 vi, __m512 w) {
    __m512 z = _mm512_add_ps(_mm512_sub_ps(mi, mi), _mm512_sub_ps(vi, vi));
    return _mm512_cmp_ps_mask(z, z, _CMP_EQ_OQ) & _mm512_cmp_ps_mask(_mm512_abs_ps(w), _mm512_set1_ps(FLOATX_ROUNDS_TO_INF), _CMP_LT_OQ);
}
// dst[0..16) = rn(w): f32_to_bf16 in integer lanes (BF16), or the floats themselves (FP32).
ZT_TARGET_AVX512 static inline void adamw_store_rn16(floatX* dst, __m512 w) {
#ifdef ENABLE_FP32
    _mm512_storeu_ps((float*)dst, w);
#else
    __m512i u = _mm512_castps_si512(w), hi = _mm512_srli_epi32(u, 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1))); // ties to even
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40))); // NaN stays NaN
    _mm256_storeu_si256((__m256i*)dst, _mm512_cvtepi32_epi16(r));
#endif
}
ZT_TARGET_AVX512 static int adamw_range_avx512(int mode, floatX* params, float* master, float* m, float* v, const float* grads,
                                               int64_t lo, int64_t hi, const AdamWParams* p, float wd, float gs, float* acc) {
    const __m512 nlr = _mm512_set1_ps(-p->lr), b1 = _mm512_set1_ps(p->beta1), b2 = _mm512_set1_ps(p->beta2), eps = _mm512_set1_ps(p->eps);
    const __m512 vwd = _mm512_set1_ps(wd), vgs = _mm512_set1_ps(gs), bc1 = _mm512_set1_ps(p->bc1), bc2 = _mm512_set1_ps(p->bc2);
    __m512 am = _mm512_set1_ps(acc[0]), av = _mm512_set1_ps(acc[1]), aw = _mm512_set1_ps(acc[2]);
    __mmask16 ok = 0xFFFF;
    int64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512 mi, vi, w;
        adamw_math16(&mi, &vi, &w, _mm512_loadu_ps(master + i), _mm512_loadu_ps(m + i), _mm512_loadu_ps(v + i), _mm512_loadu_ps(grads + i),
                     nlr, b1, b2, eps, vwd, vgs, bc1, bc2);
        if (mode == ADAMW_CHECK) { ok &= adamw_finite16(mi, vi, w); continue; }
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        _mm512_storeu_ps(master + i, w);
        adamw_store_rn16(params + i, w);
        if (mode == ADAMW_UPDATE_MAX) {
            __m512 ma = _mm512_abs_ps(mi), wa = _mm512_abs_ps(w);
            ok &= adamw_finite16(ma, vi, wa) & _mm512_cmp_ps_mask(vi, _mm512_setzero_ps(), _CMP_GE_OQ);
            am = _mm512_max_ps(ma, am); // ma > am ? ma : am, as the scalar loop (a NaN keeps am; bad says so)
            av = _mm512_max_ps(vi, av);
            aw = _mm512_max_ps(wa, aw);
        }
    }
    if (mode == ADAMW_UPDATE_MAX) { // the lanes' maxima, as the scalar loop folds them
        float l[3][16];
        _mm512_storeu_ps(l[0], am); _mm512_storeu_ps(l[1], av); _mm512_storeu_ps(l[2], aw);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 16; j++) acc[k] = l[k][j] > acc[k] ? l[k][j] : acc[k];
    }
    return (ok != 0xFFFF) | adamw_range_scalar(mode, params, master, m, v, grads, i, hi, p, wd, gs, acc);
}

// AVX2 + FMA: 8 lanes, the same operations.
ZT_TARGET_AVX2 static inline __m256 abs8(__m256 x) { return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
ZT_TARGET_AVX2 static inline void adamw_math8(__m256* mi, __m256* vi, __m256* w, __m256 w0, __m256 m0, __m256 v0, __m256 gr, __m256 nlr,
                                              __m256 b1, __m256 b2, __m256 eps, __m256 wd, __m256 gs, __m256 bc1, __m256 bc2) {
    __m256 g = _mm256_mul_ps(gr, gs);                                    // grad * grad_scale
    __m256 gg = _mm256_mul_ps(g, g);                                     // g * g
    *mi = _mm256_fmadd_ps(b1, _mm256_sub_ps(m0, g), g);                  // fmaf(beta1, m - g, g)
    *vi = _mm256_fmadd_ps(b2, _mm256_sub_ps(v0, gg), gg);                // fmaf(beta2, v - gg, gg)
    __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(*vi, bc2)), eps); // sqrtf(vi / bc2) + eps
    __m256 u = _mm256_div_ps(_mm256_div_ps(*mi, bc1), den);             // (mi / bc1) / den
    *w = _mm256_fmadd_ps(nlr, _mm256_fmadd_ps(wd, w0, u), w0);           // fmaf(-lr, fmaf(wd, w, u), w)
}
ZT_TARGET_AVX2 static inline __m256 adamw_finite8(__m256 mi, __m256 vi, __m256 w) { // all ones in the finite lanes
    __m256 z = _mm256_add_ps(_mm256_sub_ps(mi, mi), _mm256_sub_ps(vi, vi));
    return _mm256_and_ps(_mm256_cmp_ps(z, z, _CMP_EQ_OQ), _mm256_cmp_ps(abs8(w), _mm256_set1_ps(FLOATX_ROUNDS_TO_INF), _CMP_LT_OQ));
}
ZT_TARGET_AVX2 static inline void adamw_store_rn8(floatX* dst, __m256 w) {
#ifdef ENABLE_FP32
    _mm256_storeu_ps((float*)dst, w);
#else
    __m256i u = _mm256_castps_si256(w), hi = _mm256_srli_epi32(u, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(hi, _mm256_set1_epi32(1))); // ties to even
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan); // NaN stays NaN
    __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);     // (every lane < 2^16: packs exactly)
    _mm_storeu_si128((__m128i*)dst, _mm256_castsi256_si128(pk));
#endif
}
ZT_TARGET_AVX2 static int adamw_range_avx2(int mode, floatX* params, float* master, float* m, float* v, const float* grads,
                                           int64_t lo, int64_t hi, const AdamWParams* p, float wd, float gs, float* acc) {
    const __m256 nlr = _mm256_set1_ps(-p->lr), b1 = _mm256_set1_ps(p->beta1), b2 = _mm256_set1_ps(p->beta2), eps = _mm256_set1_ps(p->eps);
    const __m256 vwd = _mm256_set1_ps(wd), vgs = _mm256_set1_ps(gs), bc1 = _mm256_set1_ps(p->bc1), bc2 = _mm256_set1_ps(p->bc2);
    __m256 am = _mm256_set1_ps(acc[0]), av = _mm256_set1_ps(acc[1]), aw = _mm256_set1_ps(acc[2]);
    __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 mi, vi, w;
        adamw_math8(&mi, &vi, &w, _mm256_loadu_ps(master + i), _mm256_loadu_ps(m + i), _mm256_loadu_ps(v + i), _mm256_loadu_ps(grads + i),
                    nlr, b1, b2, eps, vwd, vgs, bc1, bc2);
        if (mode == ADAMW_CHECK) { ok = _mm256_and_ps(ok, adamw_finite8(mi, vi, w)); continue; }
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(master + i, w);
        adamw_store_rn8(params + i, w);
        if (mode == ADAMW_UPDATE_MAX) {
            __m256 ma = abs8(mi), wa = abs8(w);
            ok = _mm256_and_ps(ok, _mm256_and_ps(adamw_finite8(ma, vi, wa), _mm256_cmp_ps(vi, _mm256_setzero_ps(), _CMP_GE_OQ)));
            am = _mm256_max_ps(ma, am); // ma > am ? ma : am, as the scalar loop
            av = _mm256_max_ps(vi, av);
            aw = _mm256_max_ps(wa, aw);
        }
    }
    if (mode == ADAMW_UPDATE_MAX) {
        float l[3][8];
        _mm256_storeu_ps(l[0], am); _mm256_storeu_ps(l[1], av); _mm256_storeu_ps(l[2], aw);
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 8; j++) acc[k] = l[k][j] > acc[k] ? l[k][j] : acc[k];
    }
    return (_mm256_movemask_ps(ok) != 0xFF) | adamw_range_scalar(mode, params, master, m, v, grads, i, hi, p, wd, gs, acc);
}
#pragma GCC diagnostic pop
#endif // ZT_X86

static AdamWRangeFn adamw_range_fn(int level) {
#ifdef ZT_X86
    if (level == SIMD_AVX512) return adamw_range_avx512;
    if (level == SIMD_AVX2) return adamw_range_avx2;
#endif
    (void)level;
    return adamw_range_scalar;
}

// Thread k's piece of a segment: [cut(k), cut(k + 1)), the cuts on 32-element boundaries of the index.
static inline int64_t adamw_cut(const Segment* s, int k, int T) {
    int64_t end = s->off + s->len;
    if (k <= 0) return s->off;
    if (k >= T) return end;
    int64_t c = (s->off + s->len * k / T + 31) / 32 * 32;
    return c < end ? c : end;
}

// Fewer elements than this run on the calling thread alone (a parallel region costs more than they
// do, and much more when the cores are shared); the result does not depend on it (the tests set 0 to
// cut small states between threads).
static int64_t g_adamw_parallel_min = (int64_t)1 << 15;

// One pass of `mode` over the segments with the rank's threads and this CPU's path (simd_level);
// [UPDATE_MAX] acc: the running largest |m|, v, |w|. Returns 1 when a new value was not finite.
static int adamw_host_pass(int mode, floatX* params, float* master, float* m, float* v, const float* grads, const Segment* segs, int nseg,
                           const AdamWParams* p, float gs, float* acc) {
    AdamWRangeFn range = adamw_range_fn(simd_level());
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) total += segs[s].len;
    (void)total; // (its only reader is the pragma below, gone in a build without OpenMP)
    int bad = 0;
#pragma omp parallel reduction(| : bad) if (total >= g_adamw_parallel_min)
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        float a[3] = {acc[0], acc[1], acc[2]};
        for (int s = 0; s < nseg; s++) {
            int64_t lo = adamw_cut(&segs[s], t, T), hi = adamw_cut(&segs[s], t + 1, T);
            if (hi > lo) bad |= range(mode, params, master, m, v, grads, lo, hi, p, segs[s].decay ? p->weight_decay : 0.0f, gs, a);
        }
        if (mode == ADAMW_UPDATE_MAX) {
#pragma omp critical(adamw_max)
            for (int k = 0; k < 3; k++) acc[k] = a[k] > acc[k] ? a[k] : acc[k]; // (no NaN, no -0 enters: any order gives the same bits)
        }
    }
    return bad;
}

// a[0..n) = 0, each segment's pieces zeroed by the thread that adamw_host_pass gives them (NUMA first
// touch), the rest (padding between segments) by the calling thread afterwards.
static void adamw_host_touch(float* a, int64_t n, const Segment* segs, int nseg) {
#pragma omp parallel
    {
        int t = 0, T = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        T = omp_get_num_threads();
#endif
        for (int s = 0; s < nseg; s++) {
            int64_t lo = adamw_cut(&segs[s], t, T), hi = adamw_cut(&segs[s], t + 1, T);
            if (hi > lo) memset(a + lo, 0, sizeof(float) * (size_t)(hi - lo));
        }
    }
    int64_t at = 0;
    for (int s = 0; s <= nseg; s++) {
        int64_t next = s < nseg ? segs[s].off : n;
        if (next > at) memset(a + at, 0, sizeof(float) * (size_t)(next - at));
        if (s < nseg) at = segs[s].off + segs[s].len;
    }
}

// The CPU loop, on host memory whatever the device (the CPU device's AdamW, and -offload's host
// AdamW on both devices: offload.h): adamw_host_pass above. Elementwise, so the result depends on
// neither the number of threads nor the path.
static void adamw_host(floatX* params, float* master, float* m, float* v, const float* grads,
                       const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc) {
    if (sc && (!sc->finite || sc->overflow)) return;
    float acc[3] = {0.0f, 0.0f, 0.0f};
    adamw_host_pass(ADAMW_UPDATE, params, master, m, v, grads, segs, nseg, p, sc ? sc->grad_scale : p->grad_scale, acc);
}

// adamw_host, also folding the largest new |m|, v, |w| of the segments into mx (the caller starts a
// pass from {0, 0, 0, 1}). The update's arithmetic is adamw_element's: the same bits as adamw_host.
static void adamw_host_max(floatX* params, float* master, float* m, float* v, const float* grads,
                           const Segment* segs, int nseg, const AdamWParams* p, AdamWMax* mx) {
    float acc[3] = {mx->m, mx->v, mx->w};
    int bad = adamw_host_pass(ADAMW_UPDATE_MAX, params, master, m, v, grads, segs, nseg, p, p->grad_scale, acc);
    mx->m = acc[0]; mx->v = acc[1]; mx->w = acc[2];
    if (bad) mx->known = 0; // a value not finite, or v < 0
}

// Update every element of every segment. All arrays are indexed by the same local offsets. sc (may
// be NULL): the step's scalars where the step runs; when given, its grad_scale is used and a step
// that is not finite (norm) or would not be (overflow, op_adamw_check) changes nothing — decided
// where the numbers are, so a GPU never waits for them. mx (may be NULL; where the step runs): the
// new state's maxima are folded into it (op_adamw_max_begin starts an update's fold), for the next
// step's op_adamw_bound. The fold reads nothing more and changes no bit of the update.
static void op_adamw_scalars(floatX* params, float* master, float* m, float* v, const float* grads,
                             const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc, AdamWMax* mx) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { adamw_cuda(params, master, m, v, grads, segs, nseg, p, sc, mx, 0); return; }
#endif
    if (!mx) { adamw_host(params, master, m, v, grads, segs, nseg, p, sc); return; }
    if (sc && (!sc->finite || sc->overflow)) return;
    AdamWParams q = *p;
    if (sc) q.grad_scale = sc->grad_scale;
    adamw_host_max(params, master, m, v, grads, segs, nseg, &q, mx);
}
static inline void op_adamw(floatX* params, float* master, float* m, float* v, const float* grads,
                     const Segment* segs, int nseg, const AdamWParams* p) {
    op_adamw_scalars(params, master, m, v, grads, segs, nseg, p, NULL, NULL);
}

// The check before the update: sc->overflow = 1 when any new m, v, master or parameter of the
// segments would not be finite (never cleared here: the step zeroes sc; several calls OR together).
// Writes nothing else. A step whose norm is not finite is not checked (it is skipped anyway).
// adamw_check_host: the CPU loop, on host memory whatever the device (also -offload's check).
static void adamw_check_host(const float* master, const float* m, const float* v, const float* grads,
                             const Segment* segs, int nseg, const AdamWParams* p, StepScalars* sc) {
    if (!sc->finite || sc->proved) return; // skipped anyway / proved by its bound (op_adamw_bound)
    float acc[3] = {0.0f, 0.0f, 0.0f};
    if (adamw_host_pass(ADAMW_CHECK, NULL, (float*)master, (float*)m, (float*)v, grads, segs, nseg, p, sc->grad_scale, acc)) // (nothing written)
        sc->overflow = 1;
}


// The host AdamW's rate on this CPU, elements per second per rank, for the planner's -offload rows
// (measured like its matmul rate, measure_cpu_flops): adamw_host_max -- what -offload runs each step,
// on this CPU's path (simd_level) with the rank's threads -- over ADAMW_RATE_N elements (36 MiB in
// BF16: beyond most CPUs' last-level cache; one that holds it measures a rate a large shard will not
// reach), the median of ADAMW_RATE_REPS passes after one untimed, each timed by
// the process's CPU time over its threads (on a shared machine the wall clock measures the others'
// load). lo / hi: the slowest and fastest pass. The values do not matter to the rate (no branch on
// them). Ranks that run their AdamW at once share the node's memory bandwidth: each then gets less.
#define ADAMW_RATE_N ((int64_t)1 << 21)
#define ADAMW_RATE_REPS 5
static double adamw_host_rate(double* lo, double* hi) {
    const int64_t n = ADAMW_RATE_N;
    float* st = (float*)malloc(sizeof(float) * 4 * (size_t)n); // master, m, v, gradient
    floatX* p = (floatX*)malloc(sizeof(floatX) * (size_t)n);
    if (!st || !p) die(1, "out of host memory measuring the host AdamW's rate (%.0f MiB)", (4.0 * 4 + sizeof(floatX)) * n / 1048576.0);
    Segment seg = {0, n, 1};
    for (int a = 0; a < 4; a++) adamw_host_touch(st + a * n, n, &seg, 1);
    for (int64_t i = 0; i < n; i++) st[3 * n + i] = 1e-3f;
    AdamWParams hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, 1);
    double rate[ADAMW_RATE_REPS];
    for (int rep = -1; rep < ADAMW_RATE_REPS; rep++) {
        struct timespec c0, c1;
        AdamWMax mx = {0.0f, 0.0f, 0.0f, 1};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        adamw_host_max(p, st, st + n, st + 2 * n, st + 3 * n, &seg, 1, &hp, &mx);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double per_thread = ((c1.tv_sec - c0.tv_sec) + 1e-9 * (c1.tv_nsec - c0.tv_nsec)) / num_threads();
        if (rep >= 0) rate[rep] = (double)n / fmax(per_thread, 1e-9);
    }
    for (int i = 1; i < ADAMW_RATE_REPS; i++) // (insertion sort: a handful of numbers)
        for (int j = i; j > 0 && rate[j - 1] > rate[j]; j--) { double x = rate[j]; rate[j] = rate[j - 1]; rate[j - 1] = x; }
    *lo = rate[0];
    *hi = rate[ADAMW_RATE_REPS - 1];
    free(st);
    free(p);
    return rate[ADAMW_RATE_REPS / 2];
}

// 1 when the bounds above prove that this update leaves every value finite (sc: the step's scalars
// on the host: sumsq and grad_scale; p: the update's hyperparameters; mx: the state's maxima).

static void op_adamw_check(const float* master, const float* m, const float* v, const float* grads,
                           const Segment* segs, int nseg, const AdamWParams* p, StepScalars* sc) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { adamw_cuda(NULL, (float*)master, (float*)m, (float*)v, grads, segs, nseg, p, sc, NULL, 1); return; }
#endif
    adamw_check_host(master, m, v, grads, segs, nseg, p, sc);
}

// The overflow check proved on the device too (where -offload proves it on the host): before the
// check's launches, sc->proved = the step is finite and adamw_bound_finite holds for this rank's
// maxima mx (one thread on a GPU: the host never waits); the check's pass then reads nothing
// (adamw_check_kernel and adamw_check_host return at once). mx->known is 0 after a start, a load
// or an update that left a value not finite (zero_state_put, the fold): the pass runs.
static void op_adamw_bound(StepScalars* sc, const AdamWMax* mx, const AdamWParams* p) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        adamw_bound_kernel<<<1, 1, 0, g_stream>>>(sc, mx, *p);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    AdamWParams q = *p;
    q.grad_scale = sc->grad_scale;
    sc->proved = sc->finite && adamw_bound_finite(&q, sc, mx);
}
// An update's fold starts from {0, 0, 0, known}, unless the step is skipped (sc's flags: then the
// state, and so its maxima, stay as they are).
static void op_adamw_max_begin(AdamWMax* mx, const StepScalars* sc) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        adamw_max_begin_kernel<<<1, 1, 0, g_stream>>>(mx, sc);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    if (sc && (!sc->finite || sc->overflow)) return;
    mx->m = 0.0f; mx->v = 0.0f; mx->w = 0.0f; mx->known = 1;
}

// params = round_to_nearest(master), elementwise (start-up and after loading a checkpoint).
static void op_round_params(floatX* params, const float* master, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (n <= 0) return;
        int64_t blocks = ceil_div(n, 256);
        round_params_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, g_stream>>>(params, master, n);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) params[i] = rn(master[i]);
}

// Sum of squares of g[0..len), for the global gradient norm: FP32 within fixed chunks of
// NORM_CHUNK elements, the chunks added in order in double, so the result does not depend on
// the number of threads. Uses g_work (free between ops) for the chunk sums.
#define NORM_CHUNK 4096
#ifdef __CUDACC__
// Sum of squares, level 1, one launch over a table of segments (passed by value: 12 KiB, nothing
// copied to the device, nothing waited for): block c sums chunk c of all the segments' chunks
// (each segment split into NORM_CHUNK elements as on the CPU; the segment found by binary search in
// chunk0). Each of SUMSQ_THREADS threads adds its NORM_CHUNK / SUMSQ_THREADS elements (stride
// SUMSQ_THREADS, coalesced) in FP32, then a fixed shared-memory tree adds the threads' sums in FP32.
// part (chunks) double [=]. Up to SUMSQ_MAX_SEGS segments per launch (GPT-2 d48 has 580 per rank:
// two launches; d36 and smaller one).
#define SUMSQ_THREADS 256
#define SUMSQ_MAX_SEGS 512
typedef struct {
    const float* g[SUMSQ_MAX_SEGS];
    int64_t len[SUMSQ_MAX_SEGS];
    int64_t chunk0[SUMSQ_MAX_SEGS + 1]; // first chunk of each segment; chunk0[n] = all the chunks
    int n;
} SumsqSegTable;

__global__ static void sumsq_chunks_kernel(SumsqSegTable tab, double* part) {
    __shared__ float buf[SUMSQ_THREADS];
    int64_t c = blockIdx.x;
    int lo_s = 0, hi_s = tab.n - 1; // the segment holding chunk c: the last with chunk0 <= c
    while (lo_s < hi_s) {
        int mid = (lo_s + hi_s + 1) / 2;
        if (tab.chunk0[mid] <= c) lo_s = mid; else hi_s = mid - 1;
    }
    const float* g = tab.g[lo_s];
    int64_t len = tab.len[lo_s];
    int64_t lo = (c - tab.chunk0[lo_s]) * NORM_CHUNK;
    int64_t hi = lo + NORM_CHUNK < len ? lo + NORM_CHUNK : len;
    float s = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += SUMSQ_THREADS) s = __fmaf_rn(g[i], g[i], s); // s += g*g
    buf[threadIdx.x] = s;
    __syncthreads(); // every thread's sum is in buf
    for (int stride = SUMSQ_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
        __syncthreads(); // this level's sums are written before the next level reads them
    }
    if (threadIdx.x == 0) part[c] = (double)buf[0];
}

// Level 2, one block: thread j adds part[j], part[j + SUMSQ_TOTAL_THREADS], ... in double, then a
// fixed tree in double; the total to *out (a device double).
#define SUMSQ_TOTAL_THREADS 1024
__global__ static void __launch_bounds__(SUMSQ_TOTAL_THREADS)
sumsq_total_kernel(const double* part, int64_t nchunks, double* out) {
    __shared__ double buf[SUMSQ_TOTAL_THREADS];
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < nchunks; k += SUMSQ_TOTAL_THREADS) s += part[k];
    buf[threadIdx.x] = s;
    __syncthreads(); // every thread's sum is in buf
    for (int stride = SUMSQ_TOTAL_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
        __syncthreads(); // this level's sums are written before the next level reads them
    }
    if (threadIdx.x == 0) *out = buf[0];
}

// The CUDA side of op_sumsq_many_into. Not the CPU's bits: a chunk's FP32 sum in sequential order
// would be one thread walking 4096 elements (slow), so the same chunks are summed by a fixed tree
// instead (more accurate: relative error ~1e-7 against the CPU's ~1e-6 per chunk). Every order is a
// function of the segment lengths only: the result is deterministic on any GPU. Scratch: one double
// per chunk of every segment in g_work. The total stays on the device (*out): no read-back.
static void sumsq_many_cuda(double* out, const float* const* g, const int64_t* len, int n) {
    int64_t total_chunks = 0;
    for (int i = 0; i < n; i++) total_chunks += ceil_div(len[i], NORM_CHUNK);
    if ((size_t)total_chunks * 2 > g_work_floats) die(1, "norm workspace too small (internal error)");
    double* part = (double*)g_work;
    if (total_chunks == 0) { cudaCheck(cudaMemsetAsync(out, 0, sizeof(double), g_stream)); return; }
    int64_t at = 0;
    for (int s0 = 0; s0 < n; s0 += SUMSQ_MAX_SEGS) { // one launch per SUMSQ_MAX_SEGS segments
        SumsqSegTable tab;
        memset(&tab, 0, sizeof(tab));
        int64_t chunks = 0;
        for (int i = s0; i < n && i < s0 + SUMSQ_MAX_SEGS; i++) {
            if (len[i] <= 0) continue;
            tab.g[tab.n] = g[i];
            tab.len[tab.n] = len[i];
            tab.chunk0[tab.n] = chunks;
            chunks += ceil_div(len[i], NORM_CHUNK);
            tab.n++;
        }
        tab.chunk0[tab.n] = chunks;
        if (chunks == 0) continue;
        sumsq_chunks_kernel<<<(unsigned)chunks, SUMSQ_THREADS, 0, g_stream>>>(tab, part + at);
        cudaCheck(cudaGetLastError());
        at += chunks;
    }
    sumsq_total_kernel<<<1, SUMSQ_TOTAL_THREADS, 0, g_stream>>>(part, total_chunks, out);
    cudaCheck(cudaGetLastError());
}

// The same sum on the host, in the kernels' order to the bit: each chunk's SUMSQ_THREADS strided FP32
// fma sums, their fixed FP32 tree, the chunk's total widened to double; then thread j of the total
// kernel adds chunks j, j + SUMSQ_TOTAL_THREADS, ... in double and a fixed tree adds the threads'. For
// a gradient that lives on the host ([-offload-params with -offload], offload.h): its norm then has
// the bits a device-resident gradient's would. (fmaf: one rounding, as __fmaf_rn.)
// In two pieces, so that a gradient can be summed block by block (offload.h: from the host or a
// file): one segment's chunk sums into part (returns how many), and the total of nchunks chunk sums.
static int64_t sumsq_chunks_host_cuda_order(const float* g, int64_t len, double* part) {
    int64_t nc = len > 0 ? ceil_div(len, NORM_CHUNK) : 0;
#pragma omp parallel for schedule(static) // (each chunk its own sums: the same bits on any number of threads)
    for (int64_t c = 0; c < nc; c++) {
        int64_t lo = c * NORM_CHUNK;
        int64_t hi = lo + NORM_CHUNK < len ? lo + NORM_CHUNK : len;
        float buf[SUMSQ_THREADS];
        for (int t = 0; t < SUMSQ_THREADS; t++) {
            float s = 0.0f;
            for (int64_t i = lo + t; i < hi; i += SUMSQ_THREADS) s = fmaf(g[i], g[i], s);
            buf[t] = s;
        }
        for (int stride = SUMSQ_THREADS / 2; stride > 0; stride >>= 1)
            for (int t = 0; t < stride; t++) buf[t] += buf[t + stride];
        part[c] = (double)buf[0];
    }
    return nc;
}
static double sumsq_total_host_cuda_order(const double* part, int64_t nchunks) {
    static double tot[SUMSQ_TOTAL_THREADS];
    for (int t = 0; t < SUMSQ_TOTAL_THREADS; t++) {
        double s = 0.0;
        for (int64_t k = t; k < nchunks; k += SUMSQ_TOTAL_THREADS) s += part[k];
        tot[t] = s;
    }
    for (int stride = SUMSQ_TOTAL_THREADS / 2; stride > 0; stride >>= 1)
        for (int t = 0; t < stride; t++) tot[t] += tot[t + stride];
    return nchunks ? tot[0] : 0.0;
}

// The step's scalars: loss += sum of n per-token losses (one block, a fixed tree in double), and
// norm, grad_scale, finite (step_scalars_finish) on the device.
#define LOSS_THREADS 1024
__global__ static void __launch_bounds__(LOSS_THREADS)
loss_add_kernel(StepScalars* sc, const float* losses, int64_t n) {
    __shared__ double buf[LOSS_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += LOSS_THREADS) s += (double)losses[i];
    buf[threadIdx.x] = s;
    __syncthreads(); // every thread's sum is in buf
    for (int stride = LOSS_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
        __syncthreads(); // this level's sums are written before the next level reads them
    }
    if (threadIdx.x == 0) sc->loss_sum += buf[0];
}
__global__ static void step_scalars_kernel(StepScalars* sc, float clip) { step_scalars_finish(sc, clip); }
#endif

// sc->loss_sum += the sum of losses[0..n) (the CPU: in order, in double, as sum_losses did).
static void op_loss_add(StepScalars* sc, const float* losses, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        loss_add_kernel<<<1, LOSS_THREADS, 0, g_stream>>>(sc, losses, n);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += losses[i];
    sc->loss_sum += s;
}

// norm, grad_scale and finite from sc->sumsq, where the step runs.
static void op_step_scalars(StepScalars* sc, float clip) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        step_scalars_kernel<<<1, 1, 0, g_stream>>>(sc, clip);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    step_scalars_finish(sc, clip);
}

// Sum of squares over n runs g[i][0..len[i]) (the rank's shard of the gradient, padding excluded)
// into *out, where the step runs (device memory on a GPU: nothing is read back). On the CPU each
// run in fixed chunks (FP32 within, double across, in order), the runs added in order in double;
// no result depends on the thread count.
static void op_sumsq_many_into(double* out, const float* const* g, const int64_t* len, int n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { sumsq_many_cuda(out, g, len, n); return; }
#endif
    double total = 0.0;
    double* part = (double*)g_work;
    for (int k = 0; k < n; k++) {
        int64_t nchunks = ceil_div(len[k], NORM_CHUNK);
        if ((size_t)nchunks * 2 > g_work_floats) die(1, "norm workspace too small (internal error)");
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t lo = c * NORM_CHUNK, hi = lo + NORM_CHUNK < len[k] ? lo + NORM_CHUNK : len[k];
            float s = 0.0f;
            for (int64_t i = lo; i < hi; i++) s += g[k][i] * g[k][i];
            part[c] = s;
        }
        double run = 0.0;
        for (int64_t c = 0; c < nchunks; c++) run += part[c];
        total += run;
    }
    *out = total;
}

// The same, read back to the host (tests and tools; on a GPU it waits for the stream). The scratch
// double for the total is the last one of g_work on the device.
static double op_sumsq_many(const float* const* g, const int64_t* len, int n) {
    double total = 0.0;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        double* out = (double*)g_work + (g_work_floats / 2 - 1);
        sumsq_many_cuda(out, g, len, n);
        cudaCheck(cudaMemcpyAsync(&total, out, sizeof(double), cudaMemcpyDeviceToHost, g_stream));
        cudaCheck(cudaStreamSynchronize(g_stream));
        return total;
    }
#endif
    op_sumsq_many_into(&total, g, len, n);
    return total;
}

// One run (tests and tools).
static inline double op_sumsq(const float* g, int64_t len) { return op_sumsq_many(&g, &len, 1); }

#endif // ZT_ADAMW_CUH
