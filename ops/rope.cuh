// ops/rope.cuh — rotary position embedding (Su et al. 2021, "RoFormer"), forward and backward, in
// transformers' rotate_half layout, on the q and k heads of the fused qkv activation.
//
//   table:    cos_sin (2, T, HD/2) FP32 = cos(t * inv_freq[i]) ; sin(t * inv_freq[i])   (host, once)
//   forward:  qkv (B, T, QKV), QKV = (NH + 2 NKV) HD: every q head (NH) and k head (NKV) of a row,
//             pairs (x1, x2) = (x[d], x[d + HD/2]), d < HD/2, rotated by angle t * inv_freq[d]:
//                 x[d] = rn(x1 cos - x2 sin),  x[d + HD/2] = rn(x2 cos + x1 sin)   [floatX, in place]
//             (transformers: q * cos + rotate_half(q) * sin, rotate_half(q) = (-q2, q1));
//             the v heads are untouched.
//             With the segment table seg (B, T) (packed examples), a token's position is t - seg[b*T + t],
//             its place in its example (the table's row of that position); seg == NULL: position t.
//   backward: the transpose rotation on the dq and dk heads of dqkv (dv untouched):
//                 dx[d] = rn(d1 cos + d2 sin),  dx[d + HD/2] = rn(d2 cos - d1 sin)  [floatX, in place]
//
// The table is transformers 4.47.1's LlamaRotaryEmbedding (modeling_rope_utils.py), in its float32
// operations and order, so its bits are transformers' (test/test_ops.h compares with a fixture made
// by dev/rope_fixture.py):
//   default: inv_freq[i] = 1 / theta^((2i) / HD)          (float32 pow of float32 theta)
//   linear:  inv_freq[i] /= factor
//   llama3:  wavelen = 2 pi / inv_freq; wavelen > orig / low_freq: inv_freq / factor;
//            wavelen < orig / high_freq: unchanged; in between the smooth blend
//            (1 - s) inv_freq / factor + s inv_freq,  s = (orig / wavelen - low) / (high - low)
//   then cos(t * inv_freq[i]) and sin(...) in float32 (t * inv_freq one float32 product).
// One difference from transformers in the BF16 build, on purpose: transformers casts cos and sin to
// the activation dtype and rounds q * cos, rotate_half(q) * sin and their sum to BF16 (three
// roundings, angles with 8-bit cosines); here cos/sin stay FP32 and the rotated value is rounded once.
// The FP32 build computes exactly transformers' operations (x1 cos + (-x2) sin = x1 cos - x2 sin).
//
// CPU: rows (b, t) in parallel. CUDA: one thread per (row, head, pair) with explicit _rn intrinsics
// (no FMA contraction), so both devices give the same bits.
//
// defines: RopeParams, ROPE_NONE, ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_MAX_HD, rope_inv_freq, rope_table, op_rope_forward, op_rope_backward
//
// May call: device.cuh. Knows nothing of the model: the caller fills RopeParams from its config.
#ifndef ZT_OPS_ROPE_CUH
#define ZT_OPS_ROPE_CUH

#include <math.h>
#include "../device.cuh" // defines: floatX, ld, rn

#define ROPE_MAX_HD 512 // rope_table's stack array; attention takes head sizes up to ATT_MAX_HS (256)

// The frequency rules (transformers' rope_scaling.rope_type; GPTConfig.rope_type) and their fields.
// ROPE_NONE: no rotation (GPT-2's learned positions); the other three are transformers' rules.
enum { ROPE_NONE = 0, ROPE_DEFAULT = 1, ROPE_LINEAR = 2, ROPE_LLAMA3 = 3 };
typedef struct {
    int HD;              // head size (even)
    double theta;        // rope_theta
    int type;            // ROPE_DEFAULT, ROPE_LINEAR or ROPE_LLAMA3
    double factor;       // linear and llama3: factor
    double low_freq;     // llama3: low_freq_factor
    double high_freq;    // llama3: high_freq_factor
    int orig_maxT;       // llama3: original_max_position_embeddings
} RopeParams;

// inv_freq (HD/2) FP32 [=], in transformers' float32 operations (see the top). Python scalars meet
// float32 tensors as float32 (torch's type promotion), and `a / tensor` is reciprocal(tensor) * a.
static void rope_inv_freq(float* inv_freq, const RopeParams* p) {
    int H2 = p->HD / 2;
    float theta = (float)p->theta, dim = (float)p->HD, factor = (float)p->factor;
    for (int i = 0; i < H2; i++) {
        float e = (float)(2 * i) / dim;
        float pw = (float)pow((double)theta, (double)e); // torch's float32 pow, correctly rounded here
        inv_freq[i] = 1.0f / pw;
    }
    if (p->type == ROPE_LINEAR)
        for (int i = 0; i < H2; i++) inv_freq[i] = inv_freq[i] / factor;
    if (p->type == ROPE_LLAMA3) {
        float orig = (float)p->orig_maxT, low = (float)p->low_freq;
        float low_wavelen = (float)((double)p->orig_maxT / p->low_freq);   // Python float, then compared as float32
        float high_wavelen = (float)((double)p->orig_maxT / p->high_freq);
        float span = (float)(p->high_freq - p->low_freq);
        float two_pi = (float)(2 * M_PI);
        for (int i = 0; i < H2; i++) {
            float f = inv_freq[i];
            float wavelen = (1.0f / f) * two_pi;
            float fl = wavelen > low_wavelen ? f / factor : f;
            float smooth = ((1.0f / wavelen) * orig - low) / span;
            float smoothed = (1.0f - smooth) * fl / factor + smooth * fl;
            int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            inv_freq[i] = medium ? smoothed : fl;
        }
    }
}

// cos_sin (2, T, HD/2) FP32 [=]: cos then sin of t * inv_freq[i] for positions t < T. Host only;
// the caller uploads it once (it depends on the config and T only).
static void rope_table(float* cos_sin, const RopeParams* p, int T) {
    int H2 = p->HD / 2;
    float inv_freq[ROPE_MAX_HD / 2];
    if (p->HD > ROPE_MAX_HD || p->HD % 2 != 0 || p->HD <= 0 || p->type < ROPE_DEFAULT || p->type > ROPE_LLAMA3)
        die(1, "rope: head size %d (even, at most %d) or rope type %d (internal error)", p->HD, ROPE_MAX_HD, p->type);
    rope_inv_freq(inv_freq, p);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H2; i++) {
            float a = (float)t * inv_freq[i];
            cos_sin[(int64_t)t * H2 + i] = (float)cos((double)a); // torch's float32 cos/sin, correctly rounded here
            cos_sin[((int64_t)T + t) * H2 + i] = (float)sin((double)a);
        }
}

// One pair: forward (x1, x2) -> (x1 c - x2 s, x2 c + x1 s); backward the transpose,
// (d1, d2) -> (d1 c + d2 s, d2 c - d1 s), which is the forward's formula at -s (negation is exact).
// Host code is never contracted into FMAs (-ffp-contract=off); the kernel's copy uses _rn intrinsics.
static inline void rope_pair(floatX* a, floatX* b, float c, float s) {
    float x1 = ld(*a), x2 = ld(*b);
    *a = rn(x1 * c - x2 * s);
    *b = rn(x2 * c + x1 * s);
}

#ifdef __CUDACC__
// ---- CUDA kernel: thread idx = ((b*T + t) * (NH + NKV) + head) * H2 + d, rotating pair d of that
// head (q heads first, then k heads: the first (NH + NKV) HD columns of the row). sgn -1 flips sin
// (the backward's transpose rotation).
__global__ static void rope_kernel(floatX* qkv, const float* cos_sin, const int* seg, int64_t BT, int T, int NH,
                                   int NKV, int HD, float sgn) {
    int H2 = HD / 2, heads = NH + NKV;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= BT * heads * H2) return;
    int d = (int)(idx % H2);
    int64_t rh = idx / H2;
    int head = (int)(rh % heads);
    int64_t bt = rh / heads;
    int t = (int)(bt % T) - (seg ? seg[bt] : 0); // the position: t within the token's example
    floatX* x = qkv + bt * (int64_t)(NH + 2 * NKV) * HD + (int64_t)head * HD;
    float c = cos_sin[(int64_t)t * H2 + d], s = sgn * cos_sin[((int64_t)T + t) * H2 + d];
    float x1 = ld(x[d]), x2 = ld(x[d + H2]); // rope_pair's operations, each rounded on its own
    x[d] = rn(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    x[d + H2] = rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

static void rope_cuda(floatX* qkv, const float* cos_sin, const int* seg, int B, int T, int NH, int NKV, int HD, float sgn) {
    int64_t n = (int64_t)B * T * (NH + NKV) * (HD / 2);
    if (n <= 0) return;
    rope_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(qkv, cos_sin, seg, (int64_t)B * T, T, NH, NKV, HD, sgn);
    cudaCheck(cudaGetLastError());
}
#endif

// Rotate the q and k heads of qkv (B, T, (NH + 2 NKV) HD) in place; cos_sin from rope_table(T).
static void op_rope_forward(floatX* qkv, const float* cos_sin, const int* seg, int B, int T, int NH, int NKV, int HD) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { rope_cuda(qkv, cos_sin, seg, B, T, NH, NKV, HD, 1.0f); return; }
#endif
    int H2 = HD / 2, heads = NH + NKV;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        int t = (int)(bt % T) - (seg ? seg[bt] : 0); // the position: t within the token's example
        const float* c = cos_sin + (int64_t)t * H2;
        const float* s = cos_sin + ((int64_t)T + t) * H2;
        for (int h = 0; h < heads; h++) {
            floatX* x = qkv + bt * (int64_t)(NH + 2 * NKV) * HD + (int64_t)h * HD;
            for (int d = 0; d < H2; d++) rope_pair(x + d, x + d + H2, c[d], s[d]);
        }
    }
}

// Backward of the forward rotation (its transpose, the rotation by -angle) on dq, dk of dqkv, in place.
static void op_rope_backward(floatX* dqkv, const float* cos_sin, const int* seg, int B, int T, int NH, int NKV, int HD) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { rope_cuda(dqkv, cos_sin, seg, B, T, NH, NKV, HD, -1.0f); return; }
#endif
    int H2 = HD / 2, heads = NH + NKV;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
        int t = (int)(bt % T) - (seg ? seg[bt] : 0); // the position: t within the token's example
        const float* c = cos_sin + (int64_t)t * H2;
        const float* s = cos_sin + ((int64_t)T + t) * H2;
        for (int h = 0; h < heads; h++) {
            floatX* x = dqkv + bt * (int64_t)(NH + 2 * NKV) * HD + (int64_t)h * HD;
            for (int d = 0; d < H2; d++) rope_pair(x + d, x + d + H2, c[d], -s[d]);
        }
    }
}

#endif // ZT_OPS_ROPE_CUH
