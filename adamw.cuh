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
// defines: Segment, AdamWParams, StepScalars, AdamWMax, adamw_bias_corrections, adamw_host, adamw_host_max,
//          adamw_check_host, adamw_bound_finite, op_adamw,
//          op_adamw_scalars, op_adamw_check, op_round_params,
//          op_sumsq_many_into, op_sumsq_many, op_sumsq, op_loss_add, op_step_scalars
//
// May call: device.cuh.
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
__global__ static void adamw_kernel(floatX* params, float* master, float* m, float* v, const float* grads,
                                    AdamWSegTable tab, AdamWParams p, const StepScalars* sc) {
    if (sc && (!sc->finite || sc->overflow)) return;
    float grad_scale = sc ? sc->grad_scale : p.grad_scale;
    int s = blockIdx.y;
    int64_t off = tab.off[s], len = tab.len[s];
    float wd = tab.wd[s];
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = off + k;
        adamw_element_rn(&params[i], &master[i], &m[i], &v[i], grads[i], p.lr, p.beta1, p.beta2, p.eps, wd,
                         grad_scale, p.bc1, p.bc2);
    }
}

// The check (op_adamw_check): the same arithmetic, nothing written but sc->overflow = 1 when a new
// value would not be finite. Every thread that finds one stores the same 1 (no ordering needed: the
// update is the next launch on the stream).
__global__ static void adamw_check_kernel(const float* master, const float* m, const float* v, const float* grads,
                                          AdamWSegTable tab, AdamWParams p, StepScalars* sc) {
    if (!sc->finite) return; // skipped anyway
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

// check = 0: the update (adamw_kernel); 1: the check (adamw_check_kernel, sc required).
static void adamw_cuda(floatX* params, float* master, float* m, float* v, const float* grads,
                       const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc, int check) {
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
        else adamw_kernel<<<grid, ADAMW_THREADS, 0, g_stream>>>(params, master, m, v, grads, tab, *p, sc);
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

// The CPU loop, on host memory whatever the device (the CPU device's AdamW, and -offload's host
// AdamW on both devices: offload.h). Threads split each segment; elementwise, so the result does not
// depend on their number.
static void adamw_host(floatX* params, float* master, float* m, float* v, const float* grads,
                       const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc) {
    if (sc && (!sc->finite || sc->overflow)) return;
    float grad_scale = sc ? sc->grad_scale : p->grad_scale;
    for (int s = 0; s < nseg; s++) {
        int64_t off = segs[s].off, len = segs[s].len;
        float wd = segs[s].decay ? p->weight_decay : 0.0f;
#pragma omp parallel for schedule(static)
        for (int64_t i = off; i < off + len; i++)
            adamw_element(&params[i], &master[i], &m[i], &v[i], grads[i], p->lr, p->beta1, p->beta2,
                          p->eps, wd, grad_scale, p->bc1, p->bc2);
    }
}

// Update every element of every segment. All arrays are indexed by the same local offsets. sc (may
// be NULL): the step's scalars where the step runs; when given, its grad_scale is used and a step
// that is not finite (norm) or would not be (overflow, op_adamw_check) changes nothing — decided
// where the numbers are, so a GPU never waits for them.
static void op_adamw_scalars(floatX* params, float* master, float* m, float* v, const float* grads,
                             const Segment* segs, int nseg, const AdamWParams* p, const StepScalars* sc) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { adamw_cuda(params, master, m, v, grads, segs, nseg, p, sc, 0); return; }
#endif
    adamw_host(params, master, m, v, grads, segs, nseg, p, sc);
}
static inline void op_adamw(floatX* params, float* master, float* m, float* v, const float* grads,
                     const Segment* segs, int nseg, const AdamWParams* p) {
    op_adamw_scalars(params, master, m, v, grads, segs, nseg, p, NULL);
}

// The check before the update: sc->overflow = 1 when any new m, v, master or parameter of the
// segments would not be finite (never cleared here: the step zeroes sc; several calls OR together).
// Writes nothing else. A step whose norm is not finite is not checked (it is skipped anyway).
// adamw_check_host: the CPU loop, on host memory whatever the device (also -offload's check).
static void adamw_check_host(const float* master, const float* m, const float* v, const float* grads,
                             const Segment* segs, int nseg, const AdamWParams* p, StepScalars* sc) {
    if (!sc->finite) return;
    int bad = 0;
    for (int s = 0; s < nseg; s++) {
        int64_t off = segs[s].off, len = segs[s].len;
        float wd = segs[s].decay ? p->weight_decay : 0.0f;
#pragma omp parallel for schedule(static) reduction(| : bad)
        for (int64_t i = off; i < off + len; i++) {
            float mi, vi, w;
            adamw_math(&mi, &vi, &w, master[i], m[i], v[i], grads[i], p->lr, p->beta1, p->beta2, p->eps, wd,
                       sc->grad_scale, p->bc1, p->bc2);
            bad |= !adamw_finite(mi, vi, w);
        }
    }
    if (bad) sc->overflow = 1;
}
// ---- The check proved instead of run (used by -offload, where the check's pass reads the whole
// state once more: with nvme, from the disk). After an update, adamw_host_max has the largest |m|, v
// and |w| it left (and whether every value is finite and v >= 0). With those and the gradient's norm
// every new value of the next update is bounded, element by element, without reading the state:
//     |g| <= G = 2 sqrt(sumsq) grad_scale   (one element's square is at most the sum; the factor 2
//                                            covers the sum's FP32 rounding, at most 4096 * 2^-24)
//     |m - g| <= M + G,  |m'| <= b1 (M + G) + G,  v' <= b2 (V + G^2) + G^2,
//     |u| <= (|m'| / bc1) / eps  (sqrt(v'/bc2) >= 0),  |w'| <= W + lr (|u| + wd W).
// When each bound, with a factor 4 for the rounding of the few operations behind it, stays below the
// largest value that rounds finite in storage, no new m, v, w or parameter can be infinite or NaN:
// the check's pass would find nothing, so skipping it changes no bit. Otherwise -- maxima unknown
// (start, a loaded checkpoint), eps < 1e-30, beta outside [0, 1 - 1e-6], a huge learning rate or
// gradient -- the pass runs (adamw_check_host). A step that overflows is never proved finite: the
// bound is sound, not tight (test: op_adamw_bound_sound).
typedef struct { float m, v, w; int known; } AdamWMax; // largest |m|, v, |w|; known: valid and every value finite, v >= 0

// adamw_host, also folding the largest new |m|, v, |w| of the segments into mx (the caller starts a
// pass from {0, 0, 0, 1}). The update's arithmetic is adamw_element's: the same bits as adamw_host.
static void adamw_host_max(floatX* params, float* master, float* m, float* v, const float* grads,
                           const Segment* segs, int nseg, const AdamWParams* p, AdamWMax* mx) {
    float am = mx->m, av = mx->v, aw = mx->w;
    int bad = 0;
    for (int s = 0; s < nseg; s++) {
        int64_t off = segs[s].off, len = segs[s].len;
        float wd = segs[s].decay ? p->weight_decay : 0.0f;
#pragma omp parallel for schedule(static) reduction(max : am, av, aw) reduction(| : bad)
        for (int64_t i = off; i < off + len; i++) {
            adamw_element(&params[i], &master[i], &m[i], &v[i], grads[i], p->lr, p->beta1, p->beta2,
                          p->eps, wd, p->grad_scale, p->bc1, p->bc2);
            float mi = fabsf(m[i]), vi = v[i], wi = fabsf(master[i]);
            bad |= !adamw_finite(mi, vi, wi) | !(vi >= 0.0f);
            am = mi > am ? mi : am; // (a NaN is caught by bad)
            av = vi > av ? vi : av;
            aw = wi > aw ? wi : aw;
        }
    }
    mx->m = am; mx->v = av; mx->w = aw;
    if (bad) mx->known = 0;
}

// 1 when the bounds above prove that this update leaves every value finite (sc: the step's scalars
// on the host: sumsq and grad_scale; p: the update's hyperparameters; mx: the state's maxima).
static int adamw_bound_finite(const AdamWParams* p, const StepScalars* sc, const AdamWMax* mx) {
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

static void op_adamw_check(const float* master, const float* m, const float* v, const float* grads,
                           const Segment* segs, int nseg, const AdamWParams* p, StepScalars* sc) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { adamw_cuda(NULL, (float*)master, (float*)m, (float*)v, grads, segs, nseg, p, sc, 1); return; }
#endif
    adamw_check_host(master, m, v, grads, segs, nseg, p, sc);
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
__global__ static void sumsq_total_kernel(const double* part, int64_t nchunks, double* out) {
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

// The step's scalars: loss += sum of n per-token losses (one block, a fixed tree in double), and
// norm, grad_scale, finite (step_scalars_finish) on the device.
#define LOSS_THREADS 1024
__global__ static void loss_add_kernel(StepScalars* sc, const float* losses, int64_t n) {
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
