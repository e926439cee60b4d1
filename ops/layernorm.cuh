// ops/layernorm.cuh — residual add fused with layernorm, forward and backward.
//
//   forward:  residual (N, C) = inp1 + inp2                         [floatX, =]  (if inp2)
//             x = residual if inp2 else inp1 (the *rounded* values)
//             mean, rstd (N) = statistics of x over C               [FP32, =]
//             out (N, C) = (x - mean) * rstd * weight + bias        [floatX, =]
//   backward: dinp (N, C) += dout through the normalisation         [floatX, +=]
//             dweight (C) += sum_rows dout * xhat; dbias (C) += sum_rows dout   [FP32, +=]
// The residual stream's gradient is one buffer that every layernorm backward adds into; the
// residual add itself has gradient 1 for both inputs, so it needs no op of its own.
// Statistics are computed from the stored (rounded) residual so that recomputing the layernorm
// from it in backward (-r 2, -r 3) reproduces the forward's bits. eps = 1e-5 as in GPT-2.
//
// CPU: rows in parallel, each row's sums over C in order; the weight/bias gradients are column
// sums over rows in order, columns in parallel, so no result depends on the thread count.
//
// CUDA: one warp per row (forward, and the dinp part of backward): each lane walks the row in packs
// of 8 elements (BF16; 4 in FP32) with stride 32 packs, with one 16-byte access per pack when the
// row allows it (ops/packed.cuh); the row sums are combined by a xor-butterfly of shuffles (fixed
// order; every lane ends with the same bits, since a+b == b+a in IEEE). The elementwise outputs use
// explicit _rn intrinsics in the CPU's operation order, so nvcc cannot contract them into FMAs:
// only the row sums' order differs from the CPU. dweight/dbias: a two-level column sum without
// atomics, partial sums per (chunk of rows, column) into g_work, then one thread per column adds
// the chunks in order. Every order of summation is a function of N and C only (not of the 16-byte
// or element path, nor of the GPU), so results are bitwise reproducible.
//
// defines: op_residual_layernorm_forward, op_layernorm_backward
//
// May call: device.cuh and packed.cuh.
#ifndef ZT_OPS_LAYERNORM_CUH
#define ZT_OPS_LAYERNORM_CUH

#include "../device.cuh"   // defines: floatX, ld, rn
#include "packed.cuh"      // defines: PACK_X, Packed128, load128, store128, aligned16

#define LN_EPS 1e-5f

#ifdef __CUDACC__
// ---- CUDA kernels

#define LN_WARPS_PER_BLOCK 8        // forward and dinp: one warp per row, 8 rows per block
#define LN_BWD_MAX_CHUNKS 128       // dweight/dbias: at most 128 row chunks ...
#define LN_BWD_MIN_CHUNK_ROWS 32    // ... of at least 32 rows; scratch 2 * chunks * C floats <= 256 C
#define LN_BWD_COLS 32              // dweight/dbias: threads across columns (PACK_X or 1 column each) ...
#define LN_BWD_LANES 8              // ... times rows summed side by side: 256 threads a block

// Sum of v over the 32 lanes of a warp, the same bits in every lane (butterfly: lane i adds lane
// i^o's value; both partners compute the same sum because IEEE addition is commutative).
__device__ static inline float ln_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// A row is walked in packs of PACK_X elements: lane l takes packs l, l+32, l+64, ... and, inside a
// pack, its elements in order; the last pack may be short (C % PACK_X). vec (C % PACK_X == 0 and
// every pointer 16-byte aligned, so every row is): one 16-byte access per pack, else one access per
// element. Either way the same elements in the same order, so the bits do not depend on vec.
// ln_load: the pack's n = min(PACK_X, C - c0) elements as floats.
__device__ static inline int ln_load(float* f, const floatX* row, int c0, int C, int vec) {
    if (vec) {
        Packed128<floatX> p = load128(row + c0);
        for (int k = 0; k < PACK_X; k++) f[k] = ld(p[k]);
        return PACK_X;
    }
    int n = C - c0 < PACK_X ? C - c0 : PACK_X;
    for (int k = 0; k < PACK_X; k++) if (k < n) f[k] = ld(row[c0 + k]);
    return n;
}
// ln_store: row[c0 + k] = x[k] for the pack's n elements (already rounded).
__device__ static inline void ln_store(floatX* row, int c0, int n, const floatX* x, int vec) {
    if (vec) {
        Packed128<floatX> p;
        for (int k = 0; k < PACK_X; k++) p[k] = x[k];
        store128(row + c0, p);
        return;
    }
    for (int k = 0; k < PACK_X; k++) if (k < n) row[c0 + k] = x[k];
}

// One warp per row i: residual = rn(a + b), then mean/rstd from the rounded residual, then out.
__global__ static void residual_layernorm_forward_kernel(floatX* residual, floatX* out, float* mean,
                                                         float* rstd, const floatX* inp1,
                                                         const floatX* inp2, const floatX* weight,
                                                         const floatX* bias, int N, int C, int vec) {
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
    float sum = 0.0f;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
        int n = ln_load(f, x, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) sum += f[k];
    }
    float m = ln_warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
        int n = ln_load(f, x, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) { float d = f[k] - m; sq += d * d; }
    }
    float v = ln_warp_sum(sq) / C;
    float s = 1.0f / sqrtf(v + LN_EPS); // IEEE division and square root (no fast-math)
    floatX* o = out + i * C;
    float w[PACK_X], bb[PACK_X];
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) { // CPU: rn((x - m) * s * w + b), each operation rounded
        int n = ln_load(f, x, c0, C, vec);
        ln_load(w, weight, c0, C, vec);
        ln_load(bb, bias, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) r[k] = rn(__fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(f[k], m), s), w[k]), bb[k]));
        ln_store(o, c0, n, r, vec);
    }
    if (lane == 0) { mean[i] = m; rstd[i] = s; }
}

// One warp per row i: dinp[i] += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight.
__global__ static void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* x,
                                                      const floatX* weight, const float* mean,
                                                      const float* rstd, int N, int C, int vec) {
    int64_t i = (int64_t)blockIdx.x * LN_WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (i >= N) return; // whole warp
    const floatX* d = dout + i * C;
    const floatX* xi = x + i * C;
    float m = mean[i], s = rstd[i];
    float fx[PACK_X], fd[PACK_X], fw[PACK_X], fi[PACK_X];
    floatX r[PACK_X];
    float gsum = 0.0f, gxsum = 0.0f;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) {
        int n = ln_load(fx, xi, c0, C, vec);
        ln_load(fd, d, c0, C, vec);
        ln_load(fw, weight, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) {
            float xhat = __fmul_rn(__fsub_rn(fx[k], m), s);
            float g = __fmul_rn(fw[k], fd[k]);
            gsum += g;
            gxsum += g * xhat;
        }
    }
    float gmean = ln_warp_sum(gsum) / C;
    float gxmean = ln_warp_sum(gxsum) / C;
    floatX* di = dinp + i * C;
    for (int c0 = lane * PACK_X; c0 < C; c0 += 32 * PACK_X) { // CPU: rn(di + (g - gmean - xhat * gxmean) * s)
        int n = ln_load(fx, xi, c0, C, vec);
        ln_load(fd, d, c0, C, vec);
        ln_load(fw, weight, c0, C, vec);
        ln_load(fi, di, c0, C, vec);
        for (int k = 0; k < PACK_X; k++) if (k < n) {
            float xhat = __fmul_rn(__fsub_rn(fx[k], m), s);
            float g = __fmul_rn(fw[k], fd[k]);
            float dx = __fmul_rn(__fsub_rn(__fsub_rn(g, gmean), __fmul_rn(xhat, gxmean)), s);
            r[k] = rn(__fadd_rn(fi[k], dx));
        }
        ln_store(di, c0, n, r, vec);
    }
}

// Level 1 of dweight/dbias: block (column block x, chunk k) sums rows [k*rows, (k+1)*rows). Thread
// (tx, ty) owns W columns c0 = (x * LN_BWD_COLS + tx) * W (W = PACK_X with vec: one 16-byte load of
// dout and of x per row; else 1) and sums rows lo+ty, lo+ty+LANES, ... in order; the LANES sums of a
// column are then added in ty order. part_w, part_b (nchunks, C) FP32 [=], in g_work. The same order
// for both widths: the bits do not depend on vec.
__global__ static void __launch_bounds__(LN_BWD_COLS * LN_BWD_LANES)
layernorm_backward_partial_kernel(float* part_w, float* part_b, const floatX* dout, const floatX* x,
                                  const float* mean, const float* rstd, int N, int C, int rows, int vec) {
    __shared__ float lane_w[LN_BWD_LANES][LN_BWD_COLS * PACK_X];
    __shared__ float lane_b[LN_BWD_LANES][LN_BWD_COLS * PACK_X];
    int W = vec ? PACK_X : 1;
    int c0 = (blockIdx.x * LN_BWD_COLS + threadIdx.x) * W;
    int k = blockIdx.y;
    int64_t lo = (int64_t)k * rows, hi = lo + rows < N ? lo + rows : N;
    float aw[PACK_X], ab[PACK_X], fd[PACK_X], fx[PACK_X];
    for (int j = 0; j < PACK_X; j++) aw[j] = ab[j] = 0.0f;
    if (c0 < C)
        for (int64_t i = lo + threadIdx.y; i < hi; i += LN_BWD_LANES) { // a warp reads consecutive columns of row i
            float mi = mean[i], si = rstd[i];
            if (vec) {
                ln_load(fd, dout + i * C, c0, C, 1);
                ln_load(fx, x + i * C, c0, C, 1);
            } else {
                fd[0] = ld(dout[i * C + c0]);
                fx[0] = ld(x[i * C + c0]);
            }
            for (int j = 0; j < PACK_X; j++) if (j < W) {
                float xhat = __fmul_rn(__fsub_rn(fx[j], mi), si);
                aw[j] += fd[j] * xhat;
                ab[j] += fd[j];
            }
        }
    for (int j = 0; j < PACK_X; j++) if (j < W) {
        lane_w[threadIdx.y][threadIdx.x * W + j] = aw[j];
        lane_b[threadIdx.y][threadIdx.x * W + j] = ab[j];
    }
    __syncthreads(); // every lane's sums are in shared memory
    if (threadIdx.y == 0 && c0 < C)
        for (int j = 0; j < PACK_X; j++) if (j < W) {
            float sw = 0.0f, sb = 0.0f;
            for (int y = 0; y < LN_BWD_LANES; y++) {
                sw += lane_w[y][threadIdx.x * W + j];
                sb += lane_b[y][threadIdx.x * W + j];
            }
            part_w[(int64_t)k * C + c0 + j] = sw;
            part_b[(int64_t)k * C + c0 + j] = sb;
        }
}

// Level 2: one thread per column adds the chunks' partial sums in chunk order, then += into the
// FP32 gradient (as the CPU adds its column sum).
__global__ static void layernorm_backward_sum_kernel(float* dweight, float* dbias, const float* part_w,
                                                     const float* part_b, int C, int nchunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        sw += part_w[(int64_t)k * C + c];
        sb += part_b[(int64_t)k * C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
}

static void residual_layernorm_forward_cuda(floatX* residual, floatX* out, float* mean, float* rstd,
                                            const floatX* inp1, const floatX* inp2, const floatX* weight,
                                            const floatX* bias, int N, int C) {
    if (N <= 0) return;
    int vec = C % PACK_X == 0 && aligned16(out) && aligned16(inp1) && aligned16(weight) && aligned16(bias) &&
              (!inp2 || (aligned16(inp2) && aligned16(residual)));
    unsigned grid = (unsigned)ceil_div(N, LN_WARPS_PER_BLOCK);
    residual_layernorm_forward_kernel<<<grid, LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(
        residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, vec);
    cudaCheck(cudaGetLastError());
}

// Scratch in g_work: part_w and part_b, (nchunks, C) floats each; nchunks <= LN_BWD_MAX_CHUNKS so
// at most 256*C floats, which ops_workspace_floats covers through cuBLASLt's 32 MiB (8M floats:
// C up to 32768); checked here anyway. Up to 128 chunks x 256 threads x C / (32 W) column blocks:
// at d12 (N = 16384) 384 blocks, 98K threads with two 16-byte loads each in flight.
static void layernorm_backward_cuda(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                                    const floatX* x, const floatX* weight, const float* mean,
                                    const float* rstd, int N, int C) {
    if (N <= 0) return;
    int vec = C % PACK_X == 0 && aligned16(dinp) && aligned16(dout) && aligned16(x) && aligned16(weight);
    unsigned grid = (unsigned)ceil_div(N, LN_WARPS_PER_BLOCK);
    layernorm_backward_dinp_kernel<<<grid, LN_WARPS_PER_BLOCK * 32, 0, g_stream>>>(dinp, dout, x, weight,
                                                                                  mean, rstd, N, C, vec);
    cudaCheck(cudaGetLastError());
    int nchunks = (int)ceil_div(N, LN_BWD_MIN_CHUNK_ROWS);
    if (nchunks > LN_BWD_MAX_CHUNKS) nchunks = LN_BWD_MAX_CHUNKS;
    int rows = (int)ceil_div(N, nchunks);
    nchunks = (int)ceil_div(N, rows); // no empty chunk
    if ((size_t)2 * nchunks * C > g_work_floats)
        die(1, "layernorm backward: workspace too small (%zu floats, needs %zu) (internal error)",
            g_work_floats, (size_t)2 * nchunks * C);
    float* part_w = g_work;
    float* part_b = g_work + (size_t)nchunks * C;
    dim3 pgrid((unsigned)ceil_div(C, LN_BWD_COLS * (vec ? PACK_X : 1)), (unsigned)nchunks);
    dim3 pblock(LN_BWD_COLS, LN_BWD_LANES);
    layernorm_backward_partial_kernel<<<pgrid, pblock, 0, g_stream>>>(part_w, part_b, dout, x, mean, rstd, N, C,
                                                                     rows, vec);
    cudaCheck(cudaGetLastError());
    layernorm_backward_sum_kernel<<<(unsigned)ceil_div(C, 256), 256, 0, g_stream>>>(dweight, dbias, part_w,
                                                                                  part_b, C, nchunks);
    cudaCheck(cudaGetLastError());
}
#endif

// residual = inp1 + inp2 (when inp2 != NULL; residual may then be NULL only if not needed);
// out = layernorm(residual or inp1). mean/rstd are (N) FP32.
static void op_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                          const floatX* inp1, const floatX* inp2,
                                          const floatX* weight, const floatX* bias, int N, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        residual_layernorm_forward_cuda(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C);
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
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += ld(x[c]);
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) { float d = ld(x[c]) - m; v += d * d; }
        v /= C;
        float s = 1.0f / sqrtf(v + LN_EPS);
        floatX* o = out + i * C;
        for (int c = 0; c < C; c++) o[c] = rn((ld(x[c]) - m) * s * ld(weight[c]) + ld(bias[c]));
        mean[i] = m;
        rstd[i] = s;
    }
}

// Backward of the layernorm part: x is the layernorm's input (the residual).
static void op_layernorm_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                                  const floatX* x, const floatX* weight, const float* mean,
                                  const float* rstd, int N, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        layernorm_backward_cuda(dinp, dweight, dbias, dout, x, weight, mean, rstd, N, C);
        return;
    }
#endif
    // dinp: per row. With xhat = (x - mean) * rstd and g = dout * weight,
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const floatX* d = dout + i * C;
        const floatX* xi = x + i * C;
        float m = mean[i], s = rstd[i];
        float gmean = 0.0f, gxmean = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (ld(xi[c]) - m) * s;
            float g = ld(weight[c]) * ld(d[c]);
            gmean += g;
            gxmean += g * xhat;
        }
        gmean /= C;
        gxmean /= C;
        floatX* di = dinp + i * C;
        for (int c = 0; c < C; c++) {
            float xhat = (ld(xi[c]) - m) * s;
            float g = ld(weight[c]) * ld(d[c]);
            di[c] = rn(ld(di[c]) + (g - gmean - xhat * gxmean) * s);
        }
    }
    // dweight, dbias: column sums over rows in order, blocks of columns in parallel
    const int CB = 64;
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += CB) {
        float aw[64] = {0}, ab[64] = {0};
        int cn = C - c0 < CB ? C - c0 : CB;
        for (int64_t i = 0; i < N; i++) {
            const floatX* d = dout + i * C + c0;
            const floatX* xi = x + i * C + c0;
            float m = mean[i], s = rstd[i];
            for (int c = 0; c < cn; c++) {
                float dv = ld(d[c]);
                aw[c] += dv * ((ld(xi[c]) - m) * s);
                ab[c] += dv;
            }
        }
        for (int c = 0; c < cn; c++) {
            dweight[c0 + c] += aw[c];
            dbias[c0 + c] += ab[c];
        }
    }
}

#endif // ZT_OPS_LAYERNORM_CUH
