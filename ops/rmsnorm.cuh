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
// defines: op_residual_rmsnorm_forward, op_rmsnorm_backward
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

#endif // ZT_OPS_RMSNORM_CUH
