// ops/rmsnorm.cuh — residual add fused with RMSNorm (Zhang & Sennrich 2019), forward and backward.
//
//   forward:  residual (N, C) = inp1 + inp2                          [floatX, =]  (if inp2)
//             x = residual if inp2 else inp1 (the *rounded* values)
//             rstd (N) = 1 / sqrt(mean_c x^2 + eps)                  [FP32, =]
//             out (N, C) = rn(weight * rn(x * rstd))                 [floatX, =]
//   backward: dinp (N, C) += dout through the normalisation          [floatX, +=]
//             dweight (C) += sum_rows dout * rn(x * rstd)            [FP32, +=]
// The rounding order is transformers' LlamaRMSNorm: normalise in FP32, cast to the activation dtype,
// then multiply by the weight (its product rounded again). In the FP32 build both roundings are the
// identity. The backward treats the inner rounding as the identity (straight-through, as autograd
// does for a dtype cast): with xhat = x * rstd and g = dout * weight,
//     dx = rstd * (g - xhat * mean_c(g * xhat))
// and the weight's gradient multiplies dout by the value the forward multiplied, rn(xhat).
// Statistics come from the stored (rounded) residual, so recomputing the norm from it in backward
// (-r 2, -r 3) reproduces the forward's bits, as ops/layernorm.cuh does.
//
// CPU: rows in parallel, each row's sums over C in order; dweight a column sum over rows in order,
// blocks of columns in parallel: no result depends on the thread count.
// CUDA: layernorm's kernels with the mean left out (ops/layernorm.cuh explains them): one warp per
// row in packs of PACK_X, a shuffle butterfly for the row sum, explicit _rn intrinsics in the CPU's
// operation order; dweight a two-level column sum without atomics (partial sums per chunk of rows in
// g_work, then chunks added in order). Every order depends on N and C only: bitwise reproducible.
//
// Per-head RMSNorm (Qwen3's q_norm and k_norm, op_head_rmsnorm_*): the same normalisation over each
// q head and each k head of the fused qkv activation (HD values; q heads take weight wq, k heads wk),
// in place before RoPE, its input kept for the backward:
//   forward:  x (BT, NH + NKV, HD) = the q and k heads of qkv                    [floatX, =]
//             rstd (BT, NH + NKV), then qkv's q/k heads = rn(w * rn(x * rstd))   [FP32 =; floatX, in place]
//   backward: dwq, dwk (HD) += sum over rows and heads of dout * rn(x * rstd)   [FP32, +=]
//             dqkv's q/k heads = rstd * (g - xhat * mean(g * xhat))             [floatX, = in place]
// The v heads are untouched. CPU: rows in parallel; each weight column summed over (token, head) in
// order, columns in parallel. CUDA: one warp per head row; dweight the two-level column sum (chunks of
// rows, then the chunks in order).
//
// defines: op_residual_rmsnorm_forward, op_rmsnorm_backward, op_head_rmsnorm_forward, op_head_rmsnorm_backward
//
// May call: device.cuh, packed.cuh and layernorm.cuh (its row helpers and tile constants).
#ifndef ZT_OPS_RMSNORM_CUH
#define ZT_OPS_RMSNORM_CUH

#include "../device.cuh"   // defines: floatX, ld, rn
#include "packed.cuh"      // defines: PACK_X, Packed128, load128, store128, aligned16
#include "layernorm.cuh"   // defines: ln_load, ln_store, ln_warp_sum, LN_WARPS_PER_BLOCK, LN_BWD_*

#ifdef __CUDACC__
// ---- CUDA kernels

// One warp per row i: residual = rn(a + b), rstd from the rounded residual, then out.
__global__ static void residual_rmsnorm_forward_kernel(floatX* residual, floatX* out, float* rstd,
                                                       const floatX* inp1, const floatX* inp2,
                                                       const floatX* weight, int N, int C, float eps, int vec) {
    int64_t i = (int64_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return; // the whole warp leaves together: the shuffles below see 32 lanes
    float f[PACK_X], g[PACK_X];
    floatX r[PACK_X];
    const floatX* x = inp1 + i * C;
    if (inp2) {
        const floatX* b = inp2 + i * C;
        floatX* res = residual + i * C;
        for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
            int n = ln_load(f, x, c0, C, vec);
            ln_load(g, b, c0, C, vec);
            for (int k = 0; k < PACK_X; k++) if (k < n) r[k] = rn(__fadd_rn(f[k], g[k]));
            ln_store(res, c0, n, r, vec);
        }
        x = res; // read back below by the same lane that wrote it: program order suffices
    }
    float sq = 0.0f;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
        int n = ln_load(f, x, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) sq = __fadd_rn(sq, __fmul_rn(f[k], f[k]));
    }
    float s = 1.0f / sqrtf(__fadd_rn(ln_warp_sum(sq) / C, eps)); // IEEE division and square root
    floatX* o = out + i * C;
    float w[PACK_X];
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) { // CPU: rn(w * rn(x * s))
        int n = ln_load(f, x, c0, C, vec);
        ln_load(w, weight, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) r[k] = rn(__fmul_rn(w[k], ld(rn(__fmul_rn(f[k], s)))));
        ln_store(o, c0, n, r, vec);
    }
    if (lane == 0) rstd[i] = s;
}

// One warp per row i: dinp[i] += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = x * rstd.
__global__ static void rmsnorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* x,
                                                    const floatX* weight, const float* rstd, int N, int C, int vec) {
    int64_t i = (int64_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return; // whole warp
    const floatX* d = dout + i * C;
    const floatX* xi = x + i * C;
    float s = rstd[i];
    float fx[PACK_X], fd[PACK_X], fw[PACK_X], fi[PACK_X];
    floatX r[PACK_X];
    float gxsum = 0.0f;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
        int n = ln_load(fx, xi, c0, C, vec);
        ln_load(fd, d, c0, C, vec);
        ln_load(fw, weight, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n)
            gxsum = __fadd_rn(gxsum, __fmul_rn(__fmul_rn(fw[k], fd[k]), __fmul_rn(fx[k], s)));
    }
    float gxmean = ln_warp_sum(gxsum) / C;
    floatX* di = dinp + i * C;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) { // CPU: rn(di + (g - xhat * gxmean) * s)
        int n = ln_load(fx, xi, c0, C, vec);
        ln_load(fd, d, c0, C, vec);
        ln_load(fw, weight, c0, C, vec);
        ln_load(fi, di, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) {
            float xhat = __fmul_rn(fx[k], s);
            float g = __fmul_rn(fw[k], fd[k]);
            float dx = __fmul_rn(__fsub_rn(g, __fmul_rn(xhat, gxmean)), s);
            r[k] = rn(__fadd_rn(fi[k], dx));
        }
        ln_store(di, c0, n, r, vec);
    }
}

// Level 1 of dweight (layernorm_backward_partial_kernel without the bias): block (column block x,
// chunk k) sums rows [k*rows, (k+1)*rows) of dout * rn(x * rstd) into part_w (nchunks, C) [=].
__global__ static void __launch_bounds__(LN_BWD_COLS * LN_BWD_LANES)
rmsnorm_backward_partial_kernel(float* part_w, const floatX* dout, const floatX* x, const float* rstd,
                                int N, int C, int rows, int vec) {
    __shared__ float lane_w[LN_BWD_LANES][LN_BWD_COLS * PACK_X];
    int W = vec ? PACK_X : 1;
    int c0 = (blockIdx.x * LN_BWD_COLS + threadIdx.x) * W;
    int k = blockIdx.y;
    int64_t lo = (int64_t)k * rows, hi = lo + rows < N ? lo + rows : N;
    float aw[PACK_X], fd[PACK_X], fx[PACK_X];
    for (int j = 0; j < PACK_X; j++) aw[j] = 0.0f;
    if (c0 < C)
        for (int64_t i = lo + threadIdx.y; i < hi; i += LN_BWD_LANES) { // a warp reads consecutive columns of row i
            float si = rstd[i];
            if (vec) {
                ln_load(fd, dout + i * C, c0, C, 1);
                ln_load(fx, x + i * C, c0, C, 1);
            } else {
                fd[0] = ld(dout[i * C + c0]);
                fx[0] = ld(x[i * C + c0]);
            }
            for (int j = 0; j < PACK_X; j++) if (j < W)
                aw[j] = __fadd_rn(aw[j], __fmul_rn(fd[j], ld(rn(__fmul_rn(fx[j], si)))));
        }
    for (int j = 0; j < PACK_X; j++) if (j < W) lane_w[threadIdx.y][threadIdx.x * W + j] = aw[j];
    __syncthreads(); // every lane's sums are in shared memory
    if (threadIdx.y == 0 && c0 < C)
        for (int j = 0; j < PACK_X; j++) if (j < W) {
            float sw = 0.0f;
            for (int y = 0; y < LN_BWD_LANES; y++) sw += lane_w[y][threadIdx.x * W + j];
            part_w[(int64_t)k * C + c0 + j] = sw;
        }
}

// Level 2: one thread per column adds the chunks' partial sums in chunk order, then += into dweight.
__global__ static void rmsnorm_backward_sum_kernel(float* dweight, const float* part_w, int C, int nchunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f;
    for (int k = 0; k < nchunks; k++) sw += part_w[(int64_t)k * C + c];
    dweight[c] += sw;
}

static void residual_rmsnorm_forward_cuda(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                          const floatX* inp2, const floatX* weight, int N, int C, float eps) {
    if (N <= 0) return;
    int vec = C % PACK_X == 0 && aligned16(out) && aligned16(inp1) && aligned16(weight) &&
              (!inp2 || (aligned16(inp2) && aligned16(residual)));
    unsigned grid = (unsigned)ceil_div(N, LN_WARPS_PER_BLOCK);
    residual_rmsnorm_forward_kernel<<<grid, LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(residual, out, rstd, inp1, inp2,
                                                                                  weight, N, C, eps, vec);
    cudaCheck(cudaGetLastError());
}

// Scratch in g_work: part_w (nchunks, C) floats, nchunks <= LN_BWD_MAX_CHUNKS (half of layernorm's).
static void rmsnorm_backward_cuda(floatX* dinp, float* dweight, const floatX* dout, const floatX* x,
                                  const floatX* weight, const float* rstd, int N, int C) {
    if (N <= 0) return;
    int vec = C % PACK_X == 0 && aligned16(dinp) && aligned16(dout) && aligned16(x) && aligned16(weight);
    unsigned grid = (unsigned)ceil_div(N, LN_WARPS_PER_BLOCK);
    rmsnorm_backward_dinp_kernel<<<grid, LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(dinp, dout, x, weight, rstd, N, C, vec);
    cudaCheck(cudaGetLastError());
    int nchunks = (int)ceil_div(N, LN_BWD_MIN_CHUNK_ROWS);
    if (nchunks > LN_BWD_MAX_CHUNKS) nchunks = LN_BWD_MAX_CHUNKS;
    int rows = (int)ceil_div(N, nchunks);
    nchunks = (int)ceil_div(N, rows); // no empty chunk
    if ((size_t)nchunks * C > g_work_floats)
        die(1, "rmsnorm backward: workspace too small (%zu floats, needs %zu) (internal error)", g_work_floats,
            (size_t)nchunks * C);
    float* part_w = g_work;
    dim3 pgrid((unsigned)ceil_div(C, LN_BWD_COLS * (vec ? PACK_X : 1)), (unsigned)nchunks);
    dim3 pblock(LN_BWD_COLS, LN_BWD_LANES);
    rmsnorm_backward_partial_kernel<<<pgrid, pblock, 0, g_stream>>>(part_w, dout, x, rstd, N, C, rows, vec);
    cudaCheck(cudaGetLastError());
    rmsnorm_backward_sum_kernel<<<(unsigned)ceil_div(C, 256), 256, 0, g_stream>>>(dweight, part_w, C, nchunks);
    cudaCheck(cudaGetLastError());
}

// ---- per-head RMSNorm (Qwen3's q/k norms). Row i = (token bt, head h), h < NH + NKV; its HD values
// sit at qkv + bt * W + h * HD (W = (NH + 2 NKV) HD), its saved copy at x + i * HD.
__global__ static void head_rmsnorm_forward_kernel(floatX* qkv, floatX* x, float* rstd, const floatX* wq, const floatX* wk,
                                                   int64_t N, int NH, int NKV, int HD, float eps) {
    int64_t i = (int64_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return; // whole warp
    int heads = NH + NKV, h = (int)(i % heads);
    floatX* q = qkv + (i / heads) * (int64_t)(NH + 2 * NKV) * HD + (int64_t)h * HD;
    floatX* xi = x + i * HD;
    const floatX* w = h < NH ? wq : wk;
    float sq = 0.0f;
    for (int c = lane; c < HD; c += 32) { floatX v = q[c]; xi[c] = v; float f = ld(v); sq = __fadd_rn(sq, __fmul_rn(f, f)); }
    float s = 1.0f / sqrtf(__fadd_rn(ln_warp_sum(sq) / HD, eps));
    for (int c = lane; c < HD; c += 32) q[c] = rn(__fmul_rn(ld(w[c]), ld(rn(__fmul_rn(ld(xi[c]), s)))));
    if (lane == 0) rstd[i] = s;
}

// d through the norm, one warp per row, written over dout in dqkv (dweight has read it first).
__global__ static void head_rmsnorm_backward_dinp_kernel(floatX* dqkv, const floatX* x, const floatX* wq, const floatX* wk,
                                                         const float* rstd, int64_t N, int NH, int NKV, int HD) {
    int64_t i = (int64_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return; // whole warp
    int heads = NH + NKV, h = (int)(i % heads);
    floatX* d = dqkv + (i / heads) * (int64_t)(NH + 2 * NKV) * HD + (int64_t)h * HD;
    const floatX* xi = x + i * HD;
    const floatX* w = h < NH ? wq : wk;
    float s = rstd[i], gx = 0.0f;
    for (int c = lane; c < HD; c += 32) gx = __fadd_rn(gx, __fmul_rn(__fmul_rn(ld(w[c]), ld(d[c])), __fmul_rn(ld(xi[c]), s)));
    float gxmean = ln_warp_sum(gx) / HD;
    __syncwarp(); // every lane has read its dout before any lane overwrites it (lanes share no columns, but keep the rule plain)
    for (int c = lane; c < HD; c += 32) {
        float xhat = __fmul_rn(ld(xi[c]), s), g = __fmul_rn(ld(w[c]), ld(d[c]));
        d[c] = rn(__fmul_rn(__fsub_rn(g, __fmul_rn(xhat, gxmean)), s));
    }
}

// dweight level 1: block (chunk k, weight wsel: 0 q, 1 k) sums its rows [k*rows, (k+1)*rows) of that
// weight's heads (row r: token r / nh, head h0 + r % nh) column by column into part (2, nchunks, HD) [=].
__global__ static void head_rmsnorm_backward_partial_kernel(float* part, const floatX* dqkv, const floatX* x, const float* rstd,
                                                            int64_t BT, int NH, int NKV, int HD, int rows, int nchunks) {
    int k = blockIdx.x, wsel = blockIdx.y;
    int nh = wsel ? NKV : NH, h0 = wsel ? NH : 0, heads = NH + NKV;
    int64_t n = BT * nh, lo = (int64_t)k * rows, hi = lo + rows < n ? lo + rows : n;
    for (int c = threadIdx.x; c < HD; c += blockDim.x) {
        float a = 0.0f;
        for (int64_t r = lo; r < hi; r++) {
            int64_t bt = r / nh, i = bt * heads + h0 + r % nh;
            float dv = ld(dqkv[bt * (int64_t)(NH + 2 * NKV) * HD + (int64_t)(h0 + r % nh) * HD + c]);
            a = __fadd_rn(a, __fmul_rn(dv, ld(rn(__fmul_rn(ld(x[i * HD + c]), rstd[i])))));
        }
        part[((int64_t)wsel * nchunks + k) * HD + c] = a;
    }
}

// Level 2: one thread per (weight, column) adds the chunks in order, then += into dwq or dwk.
__global__ static void head_rmsnorm_backward_sum_kernel(float* dwq, float* dwk, const float* part, int HD, int nchunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, wsel = blockIdx.y;
    if (c >= HD) return;
    float a = 0.0f;
    for (int k = 0; k < nchunks; k++) a += part[((int64_t)wsel * nchunks + k) * HD + c];
    (wsel ? dwk : dwq)[c] += a;
}

#define HEAD_NORM_CHUNK_ROWS 64   // dweight: rows per chunk at least ...
#define HEAD_NORM_MAX_CHUNKS 1024 // ... and at most this many chunks per weight (scratch 2 * chunks * HD floats)

static void head_rmsnorm_backward_cuda(floatX* dqkv, float* dwq, float* dwk, const floatX* x, const floatX* wq, const floatX* wk,
                                       const float* rstd, int BT, int NH, int NKV, int HD) {
    if (BT <= 0) return;
    int64_t most = (int64_t)BT * NH; // (NH >= NKV: the q weight has the most rows)
    int nchunks = (int)ceil_div(most, HEAD_NORM_CHUNK_ROWS);
    if (nchunks > HEAD_NORM_MAX_CHUNKS) nchunks = HEAD_NORM_MAX_CHUNKS;
    int rows = (int)ceil_div(most, nchunks);
    if ((size_t)2 * nchunks * HD > g_work_floats)
        die(1, "head rmsnorm backward: workspace too small (%zu floats, needs %zu) (internal error)", g_work_floats, (size_t)2 * nchunks * HD);
    dim3 pgrid((unsigned)nchunks, 2);
    head_rmsnorm_backward_partial_kernel<<<pgrid, HD < 128 ? HD : 128, 0, g_stream>>>(g_work, dqkv, x, rstd, BT, NH, NKV, HD, rows, nchunks);
    cudaCheck(cudaGetLastError());
    dim3 sgrid((unsigned)ceil_div(HD, 128), 2);
    head_rmsnorm_backward_sum_kernel<<<sgrid, 128, 0, g_stream>>>(dwq, dwk, g_work, HD, nchunks);
    cudaCheck(cudaGetLastError());
    int64_t N = (int64_t)BT * (NH + NKV);
    head_rmsnorm_backward_dinp_kernel<<<(unsigned)ceil_div(N, LN_WARPS_PER_BLOCK), LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(
        dqkv, x, wq, wk, rstd, N, NH, NKV, HD);
    cudaCheck(cudaGetLastError());
}
#endif

// residual = inp1 + inp2 (when inp2 != NULL; residual may then be NULL only if not needed);
// out = rmsnorm(residual or inp1) * weight. rstd (N) FP32; eps is the model's rms_norm_eps.
static void op_residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                        const floatX* inp2, const floatX* weight, int N, int C, float eps) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        residual_rmsnorm_forward_cuda(residual, out, rstd, inp1, inp2, weight, N, C, eps);
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const floatX* a = inp1 + i * C;
        const floatX* x = a;
        if (inp2) {
            const floatX* b = inp2 + i * C;
            floatX* res = residual + i * C;
            for (int c = 0; c < C; c++) res[c] = rn(ld(a[c]) + ld(b[c]));
            x = res;
        }
        float sq = 0.0f;
        for (int c = 0; c < C; c++) { float v = ld(x[c]); sq += v * v; }
        float s = 1.0f / sqrtf(sq / C + eps);
        floatX* o = out + i * C;
        for (int c = 0; c < C; c++) o[c] = rn(ld(weight[c]) * ld(rn(ld(x[c]) * s)));
        rstd[i] = s;
    }
}

// Backward of the rmsnorm part: x is the norm's input (the residual). dinp +=, dweight +=.
static void op_rmsnorm_backward(floatX* dinp, float* dweight, const floatX* dout, const floatX* x,
                                const floatX* weight, const float* rstd, int N, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        rmsnorm_backward_cuda(dinp, dweight, dout, x, weight, rstd, N, C);
        return;
    }
#endif
    // dinp: per row, dx = rstd * (g - xhat * mean(g * xhat)) with xhat = x * rstd, g = dout * weight
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const floatX* d = dout + i * C;
        const floatX* xi = x + i * C;
        float s = rstd[i];
        float gxmean = 0.0f;
        for (int c = 0; c < C; c++) gxmean += (ld(weight[c]) * ld(d[c])) * (ld(xi[c]) * s);
        gxmean /= C;
        floatX* di = dinp + i * C;
        for (int c = 0; c < C; c++) {
            float xhat = ld(xi[c]) * s;
            float g = ld(weight[c]) * ld(d[c]);
            di[c] = rn(ld(di[c]) + (g - xhat * gxmean) * s);
        }
    }
    // dweight: column sums over rows in order, blocks of columns in parallel
    const int CB = 64;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += CB) {
        float aw[64] = {0};
        int cn = C - c0 < CB ? C - c0 : CB;
        for (int64_t i = 0; i < N; i++) {
            const floatX* d = dout + i * C + c0;
            const floatX* xi = x + i * C + c0;
            float s = rstd[i];
            for (int c = 0; c < cn; c++) aw[c] += ld(d[c]) * ld(rn(ld(xi[c]) * s));
        }
        for (int c = 0; c < cn; c++) dweight[c0 + c] += aw[c];
    }
}

// Per-head RMSNorm, forward: qkv's q and k heads (B*T = BT rows of (NH + 2 NKV) HD) normalised in place,
// q heads times wq, k heads times wk; their inputs into x (BT, NH + NKV, HD), rstd (BT, NH + NKV).
// wq == NULL (a model without q/k norms): nothing to do.
static void op_head_rmsnorm_forward(floatX* qkv, floatX* x, float* rstd, const floatX* wq, const floatX* wk, int BT, int NH,
                                    int NKV, int HD, float eps) {
    if (!wq) return;
    int heads = NH + NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, N = (int64_t)BT * heads;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (N > 0)
            head_rmsnorm_forward_kernel<<<(unsigned)ceil_div(N, LN_WARPS_PER_BLOCK), LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(
                qkv, x, rstd, wq, wk, N, NH, NKV, HD, eps);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        int h = (int)(i % heads);
        floatX* q = qkv + (i / heads) * W + (int64_t)h * HD;
        floatX* xi = x + i * HD;
        const floatX* w = h < NH ? wq : wk;
        float sq = 0.0f;
        for (int c = 0; c < HD; c++) { xi[c] = q[c]; float v = ld(q[c]); sq += v * v; }
        float s = 1.0f / sqrtf(sq / HD + eps);
        for (int c = 0; c < HD; c++) q[c] = rn(ld(w[c]) * ld(rn(ld(xi[c]) * s)));
        rstd[i] = s;
    }
}

// Per-head RMSNorm, backward: on entry dqkv's q/k heads hold d(output), on exit d(input) (=); the
// gains' gradients are added into dwq, dwk. x, rstd: the forward's. wq == NULL: nothing to do.
static void op_head_rmsnorm_backward(floatX* dqkv, float* dwq, float* dwk, const floatX* x, const floatX* wq, const floatX* wk,
                                     const float* rstd, int BT, int NH, int NKV, int HD) {
    if (!wq) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { head_rmsnorm_backward_cuda(dqkv, dwq, dwk, x, wq, wk, rstd, BT, NH, NKV, HD); return; }
#endif
    int heads = NH + NKV;
    int64_t W = (int64_t)(NH + 2 * NKV) * HD, N = (int64_t)BT * heads;
    // the gains first (they read dout, which the input's gradient then replaces): column c of weight
    // wsel summed over tokens, then that weight's heads, in order
#pragma omp parallel for schedule(static)
    for (int wc = 0; wc < 2 * HD; wc++) {
        int wsel = wc / HD, c = wc % HD, h0 = wsel ? NH : 0, h1 = wsel ? heads : NH;
        float a = 0.0f;
        for (int64_t bt = 0; bt < BT; bt++)
            for (int h = h0; h < h1; h++) {
                int64_t i = bt * heads + h;
                a += ld(dqkv[bt * W + (int64_t)h * HD + c]) * ld(rn(ld(x[i * HD + c]) * rstd[i]));
            }
        (wsel ? dwk : dwq)[c] += a;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        int h = (int)(i % heads);
        floatX* d = dqkv + (i / heads) * W + (int64_t)h * HD;
        const floatX* xi = x + i * HD;
        const floatX* w = h < NH ? wq : wk;
        float s = rstd[i], gxmean = 0.0f;
        for (int c = 0; c < HD; c++) gxmean += (ld(w[c]) * ld(d[c])) * (ld(xi[c]) * s);
        gxmean /= HD;
        for (int c = 0; c < HD; c++) {
            float xhat = ld(xi[c]) * s, g = ld(w[c]) * ld(d[c]);
            d[c] = rn((g - xhat * gxmean) * s);
        }
    }
}

#endif // ZT_OPS_RMSNORM_CUH
