// ops/attention.cuh — causal multi-head self-attention, FlashAttention-2 style, both passes.
//
//   forward:  qkv (B, T, 3C) -> out (B, T, C)      [floatX, =]
//                            -> lse (B, NH, T)     [FP32, =]  log-sum-exp of each score row
//   backward: dout (B, T, C), qkv, out, lse -> dqkv (B, T, 3C)   [floatX, =]
// q, k, v are the three C-wide thirds of a qkv row; head h uses channels [h*HS, (h+1)*HS).
// S = Q K^T / sqrt(HS) with the causal mask (key j <= query i), P = softmax(S), out = P V.
//
// The T x T matrices S and P are never stored (Dao, "FlashAttention-2", 2023, Alg. 1 and 2).
// Forward, per query row i, walks the keys in tiles of ATT_BK, keeping a running maximum m, a
// running sum l and an unnormalised output o (the "online softmax" of Milakov & Gimelshein 2018):
//     m' = max(m, max_j s_ij);  l = l*exp(m - m') + sum_j exp(s_ij - m');  o = o*exp(m - m') + sum_j exp(s_ij - m') v_j
// and stores out = o / l and lse = m + log(l). Backward recomputes P_ij = exp(s_ij - lse_i) and,
// with D_i = dout_i . out_i (Alg. 2 line 4), dS_ij = P_ij (dout_i . v_j - D_i):
//     dq_i = scale * sum_{j<=i} dS_ij k_j          (pass 1, a task per query row)
//     dk_j = scale * sum_{i>=j} dS_ij q_i,  dv_j = sum_{i>=j} P_ij dout_i   (pass 2, a task per key row)
// Two passes instead of atomics: every gradient row is one sum in a fixed order, so the result
// does not depend on the thread count, exactly as the GPU kernel will do it.
//
// defines: op_attention_forward, op_attention_backward, ATT_BK, ATT_MAX_HS
#ifndef ZT_OPS_ATTENTION_CUH
#define ZT_OPS_ATTENTION_CUH

#include "../device.cuh" // defines: floatX, ld, rn

#define ATT_BK 64       // key tile (columns of S processed per online-softmax update)
#define ATT_MAX_HS 256  // largest head size (C / NH); checked when the model is configured

#ifdef __CUDACC__
// ---- CUDA kernels: FlashAttention-2 (Dao 2023) Alg. 1 (forward) and Alg. 2 (backward)
//
// Plain FP32 scalar code (no tensor cores yet: correct first). A thread block owns a tile of rows
// of one (b, h) and walks the tiles of the other side; every tile it reads is copied to shared
// memory as FP32, one row per tile row with an odd row stride W = HS | 1, so that the 32 lanes of
// a warp reading one column of 32 different rows hit 32 different banks.
//
//   forward  grid (B*NH, ceil(T/32)): a block owns 32 query rows i (Alg. 1 line 3) and walks
//            the key tiles of 32 keys j up to its causal limit (lines 6-11) with the online
//            softmax; it writes out (rounded once, = rn(o / l)) and lse = m + log(l) (lines 12-15).
//   backward (Alg. 2, split in three kernels so that no gradient needs an atomic add)
//            1. D_i = dout_i . out_i (line 4), from the stored (rounded) out, a warp per row, into
//               the workspace g_work (B, NH, T);
//            2. grid (B*NH, ceil(T/16)): a block owns 16 keys j (line 5), walks the query tiles
//               of 32 rows i that reach them (i >= j) and accumulates dK_j, dV_j (lines 6-19);
//            3. grid (B*NH, ceil(T/16)): a block owns 16 queries i and walks the key tiles of
//               32 keys j <= i, accumulating dQ_i: line 15 as a pass of its own.
//            Both recompute P_ij = exp(S_ij - L_i) (line 11) from the forward's lse.
// Every output element is accumulated by one thread, in a fixed order, so the result is bitwise
// reproducible. Scores are S = scale * Q K^T with scale = 1/sqrt(HS); the paper leaves the scale
// out, so it appears in S and once more in dQ and dK (dS is the gradient of the scaled score).
// Masks: key j > query i, and rows past T (tiles are zero-filled there and masked out).
// Shared memory at HS = 256: ~133 KiB per block (forward, and both backward kernels), under the
// 163 KiB a block may use on A100 (sm_80) and the 227 KiB of H100/H200 (sm_90).
// Limits: FP32 FMAs from shared memory, far from what tensor cores give; never run on a GPU yet.

#define ATT_THREADS 256     // threads per block (8 warps)
#define ATT_FWD_BR 32       // forward: query rows a block owns (B_r)
#define ATT_FWD_BC 32       // forward: keys per tile (B_c); = the warp size: lane c holds column c in line 9
#define ATT_BWD_OWN 16      // backward: rows a block owns and accumulates (keys in 2., queries in 3.)
#define ATT_BWD_WALK 32     // backward: rows per tile of the side it walks (queries in 2., keys in 3.)
static_assert(ATT_FWD_BC == 32, "the forward's line 9 gives each lane of a warp one column of S");
static_assert(ATT_FWD_BR == ATT_FWD_BC, "key tile k0 <= query tile q0: every row of a visited tile "
                                        "has a visible key, so the running max is finite");
static_assert(ATT_BWD_WALK % ATT_BWD_OWN == 0, "the dK/dV walk starts at the query tile holding k0");

// Max (sum) of v over the 32 lanes of a warp, the same bits in every lane (xor butterfly: lanes
// i and i^o combine the same two values, and IEEE max and + are commutative).
__device__ static inline float att_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ static inline float att_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// s (rows, W) FP32 = rows [row0, row0 + rows) of x, a (T, HS) slice with row stride xstride
// elements (one head of q, k, v, out or dout); rows at or past T are zero. Every thread of the
// block takes part; the caller synchronises before anyone reads s.
__device__ static inline void att_load_tile(float* s, const floatX* x, int64_t xstride, int row0, int rows,
                                            int T, int HS, int W) {
    for (int e = threadIdx.x; e < rows * HS; e += ATT_THREADS) {
        int r = e / HS, d = e % HS;
        s[r * W + d] = row0 + r < T ? ld(x[(int64_t)(row0 + r) * xstride + d]) : 0.0f;
    }
}

// Shared-memory sizes in floats (the kernels carve their arrays in this order).
// forward: Qs, Os (Br, W); Ks, Vs (Bc, W); Ps (Br, Bc); ms, ls, cs (Br)
static size_t att_fwd_smem_floats(int HS) {
    return (size_t)(2 * ATT_FWD_BR + 2 * ATT_FWD_BC) * (HS | 1) + ATT_FWD_BR * ATT_FWD_BC + 3 * ATT_FWD_BR;
}
// backward, each: the owned side's 2 tiles + 2 accumulators (OWN, W), the walked side's 2 tiles
// (WALK, W), P and dS (OWN x WALK), L and D (16 or 32 rows: counted as WALK)
static size_t att_bwd_smem_floats(int HS) {
    return (size_t)(4 * ATT_BWD_OWN + 2 * ATT_BWD_WALK) * (HS | 1) + 2 * ATT_BWD_OWN * ATT_BWD_WALK + 2 * ATT_BWD_WALK;
}

// Alg. 1. Block (bh = b*NH + h, tile) computes out rows [q0, q0 + Br) of head h and their lse.
// out (B, T, C) floatX [=], lse (B, NH, T) FP32 [=], qkv (B, T, 3C).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int C, int NH) {
    const int Br = ATT_FWD_BR, Bc = ATT_FWD_BC;
    int HS = C / NH, W = HS | 1;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int q0 = (gridDim.y - 1 - blockIdx.y) * Br; // the last tiles (most keys) are scheduled first
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * 3 * C + h * HS; // (T, HS), row stride 3C
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    extern __shared__ float att_smem[];
    float* Qs = att_smem;      // (Br, W) Q_i
    float* Os = Qs + Br * W;   // (Br, W) O_i, unnormalised; thread e % ATT_THREADS owns element e
    float* Ks = Os + Br * W;   // (Bc, W) K_j
    float* Vs = Ks + Bc * W;   // (Bc, W) V_j
    float* Ps = Vs + Bc * W;   // (Br, Bc) S_ij, then P~_ij in place
    float* ms = Ps + Br * Bc;  // (Br) running max m_i
    float* ls = ms + Br;       // (Br) running sum l_i
    float* cs = ls + Br;       // (Br) this tile's rescaling exp(m_i^(j-1) - m_i^(j))

    // line 4: load Q_i; line 5: O_i = 0, l_i = 0, m_i = -inf
    att_load_tile(Qs, q, 3 * C, q0, Br, T, HS, W);
    for (int e = tid; e < Br * HS; e += ATT_THREADS) Os[(e / HS) * W + e % HS] = 0.0f;
    for (int r = tid; r < Br; r += ATT_THREADS) { ms[r] = -INFINITY; ls[r] = 0.0f; }
    int kend = q0 + Br < T ? q0 + Br : T; // causal: the tile's last row sees keys j < q0 + Br
    for (int k0 = 0; k0 < kend; k0 += Bc) { // line 6
        // line 7: load K_j, V_j
        att_load_tile(Ks, k, 3 * C, k0, Bc, T, HS, W);
        att_load_tile(Vs, v, 3 * C, k0, Bc, T, HS, W);
        __syncthreads(); // K_j, V_j (and, on the first tile, Q_i, O_i, m_i, l_i) are in place
        // line 8: S_ij = scale * Q_i K_j^T; -inf where key j > query i, or j >= T (rows past T only)
        for (int e = tid; e < Br * Bc; e += ATT_THREADS) {
            int r = e / Bc, c = e % Bc, i = q0 + r, j = k0 + c;
            float s = -INFINITY;
            if (j <= i && j < T) {
                float dot = 0.0f;
                for (int d = 0; d < HS; d++) dot += Qs[r * W + d] * Ks[c * W + d];
                s = dot * scale;
            }
            Ps[r * Bc + c] = s;
        }
        __syncthreads(); // S_ij is complete before line 9 reads whole rows of it
        // line 9: m_new = max(m, rowmax(S)), P~ = exp(S - m_new), l = exp(m - m_new) l + rowsum(P~).
        // A warp per row, lane c holds column c. m_new is finite: column k0 <= q0 <= i is visible.
        for (int r = warp; r < Br; r += ATT_THREADS / 32) {
            float s = Ps[r * Bc + lane];
            float m_old = ms[r];
            float m_new = fmaxf(m_old, att_warp_max(s));
            float p = expf(s - m_new); // masked: exp(-inf) = 0
            float rowsum = att_warp_sum(p);
            Ps[r * Bc + lane] = p;
            if (lane == 0) {
                float corr = expf(m_old - m_new); // 0 on the first tile (m_old = -inf)
                cs[r] = corr;
                ls[r] = corr * ls[r] + rowsum;
                ms[r] = m_new;
            }
        }
        __syncthreads(); // P~_ij and cs are complete before line 10 reads them across rows
        // line 10: O_i = diag(exp(m_old - m_new)) O_i + P~_ij V_j (each thread its own elements)
        for (int e = tid; e < Br * HS; e += ATT_THREADS) {
            int r = e / HS, d = e % HS;
            float o = cs[r] * Os[r * W + d];
            for (int c = 0; c < Bc; c++) o += Ps[r * Bc + c] * Vs[c * W + d];
            Os[r * W + d] = o;
        }
        __syncthreads(); // K_j, V_j, P~_ij are used up before the next tile overwrites them
    }
    // lines 12, 14: out_i = O_i / l_i, rounded once; lines 13, 15: L_i = m_i + log(l_i)
    for (int e = tid; e < Br * HS; e += ATT_THREADS) {
        int r = e / HS, d = e % HS, i = q0 + r;
        if (i < T) out[((int64_t)b * T + i) * C + h * HS + d] = rn(Os[r * W + d] / ls[r]);
    }
    for (int r = tid; r < Br; r += ATT_THREADS)
        if (q0 + r < T) lse[(int64_t)bh * T + q0 + r] = ms[r] + logf(ls[r]);
}

// Alg. 2 line 4: D (B, NH, T) FP32 [=], D_i = dout_i . out_i over the head's HS channels, from the
// stored (rounded) out. A warp per row (b, h, i); dout, out (B, T, C).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_d_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int C, int NH) {
    int64_t row = (int64_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32; // (b*NH + h)*T + i
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * NH * T) return; // the whole warp leaves together: the shuffles see 32 lanes
    int HS = C / NH;
    int i = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    const floatX* dorow = dout + ((int64_t)b * T + i) * C + h * HS;
    const floatX* orow = out + ((int64_t)b * T + i) * C + h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc += ld(dorow[d]) * ld(orow[d]);
    acc = att_warp_sum(acc);
    if (lane == 0) D[row] = acc;
}

// Alg. 2 lines 5-19 without line 15. Block (bh = b*NH + h, tile) owns keys [k0, k0 + Bk) of head h
// and walks the query tiles [q0, q0 + Bq) that hold some i >= k0.
// dqkv (B, T, 3C) floatX: the k and v thirds [=]; dout (B, T, C), qkv (B, T, 3C), lse, D (B, NH, T).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_dkdv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                               const float* D, int T, int C, int NH) {
    const int Bk = ATT_BWD_OWN, Bq = ATT_BWD_WALK;
    int HS = C / NH, W = HS | 1;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int k0 = blockIdx.y * Bk; // the first keys (most queries) are scheduled first
    int tid = threadIdx.x;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * 3 * C + h * HS; // (T, HS), row stride 3C
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    const floatX* dO = dout + (int64_t)b * T * C + h * HS;  // (T, HS), row stride C
    extern __shared__ float att_smem[];
    float* Ks = att_smem;       // (Bk, W) K_j
    float* Vs = Ks + Bk * W;    // (Bk, W) V_j
    float* dKs = Vs + Bk * W;   // (Bk, W) dK_j, unscaled; thread e % ATT_THREADS owns element e
    float* dVs = dKs + Bk * W;  // (Bk, W) dV_j, same owners
    float* Qs = dVs + Bk * W;   // (Bq, W) Q_i
    float* dOs = Qs + Bq * W;   // (Bq, W) dO_i
    float* Ps = dOs + Bq * W;   // (Bq, Bk) P_ij
    float* dSs = Ps + Bq * Bk;  // (Bq, Bk) dS_ij
    float* Ls = dSs + Bq * Bk;  // (Bq) L_i
    float* Ds = Ls + Bq;        // (Bq) D_i

    // line 6: load K_j, V_j; line 7: dK_j = 0, dV_j = 0
    att_load_tile(Ks, k, 3 * C, k0, Bk, T, HS, W);
    att_load_tile(Vs, v, 3 * C, k0, Bk, T, HS, W);
    for (int e = tid; e < Bk * HS; e += ATT_THREADS) {
        dKs[(e / HS) * W + e % HS] = 0.0f;
        dVs[(e / HS) * W + e % HS] = 0.0f;
    }
    for (int q0 = k0 / Bq * Bq; q0 < T; q0 += Bq) { // line 8, causal: only tiles with i >= k0
        // line 9: load Q_i, dO_i, L_i, D_i (rows past T: zero, and masked below)
        att_load_tile(Qs, q, 3 * C, q0, Bq, T, HS, W);
        att_load_tile(dOs, dO, C, q0, Bq, T, HS, W);
        for (int r = tid; r < Bq; r += ATT_THREADS) {
            int i = q0 + r;
            Ls[r] = i < T ? lse[(int64_t)bh * T + i] : 0.0f;
            Ds[r] = i < T ? D[(int64_t)bh * T + i] : 0.0f;
        }
        __syncthreads(); // Q_i, dO_i, L_i, D_i (and, on the first tile, K_j, V_j, dK_j, dV_j) are in place
        // line 10: S = scale Q_i K_j^T; 11: P = exp(S - L_i); 13: dP = dO_i V_j^T; 14: dS = P (dP - D_i).
        // Masked (P = dS = 0): key j > query i, and query rows i >= T (keys j >= T then follow).
        for (int e = tid; e < Bq * Bk; e += ATT_THREADS) {
            int r = e / Bk, c = e % Bk, i = q0 + r, j = k0 + c;
            float p = 0.0f, ds = 0.0f;
            if (j <= i && i < T) {
                float sdot = 0.0f, pdot = 0.0f;
                for (int d = 0; d < HS; d++) {
                    sdot += Qs[r * W + d] * Ks[c * W + d];
                    pdot += dOs[r * W + d] * Vs[c * W + d];
                }
                p = expf(sdot * scale - Ls[r]);
                ds = p * (pdot - Ds[r]);
            }
            Ps[r * Bk + c] = p;
            dSs[r * Bk + c] = ds;
        }
        __syncthreads(); // P, dS are complete before lines 12 and 16 sum them down columns
        // line 12: dV_j += P^T dO_i;  line 16: dK_j += dS^T Q_i (times scale at line 18)
        for (int e = tid; e < Bk * HS; e += ATT_THREADS) {
            int c = e / HS, d = e % HS;
            float dv = dVs[c * W + d], dk = dKs[c * W + d];
            for (int r = 0; r < Bq; r++) {
                dv += Ps[r * Bk + c] * dOs[r * W + d];
                dk += dSs[r * Bk + c] * Qs[r * W + d];
            }
            dVs[c * W + d] = dv;
            dKs[c * W + d] = dk;
        }
        __syncthreads(); // Q_i, dO_i, P, dS are used up before the next tile overwrites them
    }
    // line 18: write dK_j = scale * dK_j, dV_j, rounded once (each thread the elements it owns)
    for (int e = tid; e < Bk * HS; e += ATT_THREADS) {
        int c = e / HS, d = e % HS, j = k0 + c;
        if (j >= T) continue;
        floatX* dk = dqkv + ((int64_t)b * T + j) * 3 * C + C + h * HS; // (HS) row j of dK, head h
        dk[d] = rn(dKs[c * W + d] * scale);
        dk[C + d] = rn(dVs[c * W + d]); // the v third follows C channels later
    }
}

// Alg. 2 line 15 as its own pass. Block (bh = b*NH + h, tile) owns queries [q0, q0 + Bq) of head h
// and walks the key tiles [k0, k0 + Bk) with keys j <= i.
// dqkv (B, T, 3C) floatX: the q third [=]; dout (B, T, C), qkv (B, T, 3C), lse, D (B, NH, T).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                             const float* D, int T, int C, int NH) {
    const int Bq = ATT_BWD_OWN, Bk = ATT_BWD_WALK;
    int HS = C / NH, W = HS | 1;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int q0 = (gridDim.y - 1 - blockIdx.y) * Bq; // the last queries (most keys) are scheduled first
    int tid = threadIdx.x;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * 3 * C + h * HS; // (T, HS), row stride 3C
    const floatX* k = q + C;
    const floatX* v = q + 2 * C;
    const floatX* dO = dout + (int64_t)b * T * C + h * HS;  // (T, HS), row stride C
    extern __shared__ float att_smem[];
    float* Qs = att_smem;       // (Bq, W) Q_i
    float* dOs = Qs + Bq * W;   // (Bq, W) dO_i
    float* dQs = dOs + Bq * W;  // (Bq, W) dQ_i, unscaled; thread e % ATT_THREADS owns element e
    float* Ks = dQs + Bq * W;   // (Bk, W) K_j
    float* Vs = Ks + Bk * W;    // (Bk, W) V_j
    float* dSs = Vs + Bk * W;   // (Bq, Bk) dS_ij
    float* Ls = dSs + Bq * Bk;  // (Bq) L_i
    float* Ds = Ls + Bq;        // (Bq) D_i

    // line 9 (the query side, once): load Q_i, dO_i, L_i, D_i; dQ_i = 0
    att_load_tile(Qs, q, 3 * C, q0, Bq, T, HS, W);
    att_load_tile(dOs, dO, C, q0, Bq, T, HS, W);
    for (int e = tid; e < Bq * HS; e += ATT_THREADS) dQs[(e / HS) * W + e % HS] = 0.0f;
    for (int r = tid; r < Bq; r += ATT_THREADS) {
        int i = q0 + r;
        Ls[r] = i < T ? lse[(int64_t)bh * T + i] : 0.0f;
        Ds[r] = i < T ? D[(int64_t)bh * T + i] : 0.0f;
    }
    int kend = q0 + Bq < T ? q0 + Bq : T; // causal: the tile's last row sees keys j < q0 + Bq
    for (int k0 = 0; k0 < kend; k0 += Bk) {
        // line 6: load K_j, V_j
        att_load_tile(Ks, k, 3 * C, k0, Bk, T, HS, W);
        att_load_tile(Vs, v, 3 * C, k0, Bk, T, HS, W);
        __syncthreads(); // K_j, V_j (and, on the first tile, Q_i, dO_i, L_i, D_i, dQ_i) are in place
        // lines 10, 11, 13, 14 as in the dK/dV kernel: dS = P (dO_i V_j^T - D_i), masked to 0
        for (int e = tid; e < Bq * Bk; e += ATT_THREADS) {
            int r = e / Bk, c = e % Bk, i = q0 + r, j = k0 + c;
            float ds = 0.0f;
            if (j <= i && i < T) {
                float sdot = 0.0f, pdot = 0.0f;
                for (int d = 0; d < HS; d++) {
                    sdot += Qs[r * W + d] * Ks[c * W + d];
                    pdot += dOs[r * W + d] * Vs[c * W + d];
                }
                float p = expf(sdot * scale - Ls[r]);
                ds = p * (pdot - Ds[r]);
            }
            dSs[r * Bk + c] = ds;
        }
        __syncthreads(); // dS is complete before line 15 sums it along rows
        // line 15: dQ_i += dS K_j (times scale at the end)
        for (int e = tid; e < Bq * HS; e += ATT_THREADS) {
            int r = e / HS, d = e % HS;
            float dq = dQs[r * W + d];
            for (int c = 0; c < Bk; c++) dq += dSs[r * Bk + c] * Ks[c * W + d];
            dQs[r * W + d] = dq;
        }
        __syncthreads(); // K_j, V_j, dS are used up before the next tile overwrites them
    }
    // write dQ_i = scale * dQ_i, rounded once (each thread the elements it owns)
    for (int e = tid; e < Bq * HS; e += ATT_THREADS) {
        int r = e / HS, d = e % HS, i = q0 + r;
        if (i < T) dqkv[((int64_t)b * T + i) * 3 * C + h * HS + d] = rn(dQs[r * W + d] * scale);
    }
}

// Check the head size; once per process, allow the kernels the dynamic shared memory the largest
// head size needs (over the default 48 KiB), after checking that this GPU has it.
static void attention_cuda_setup(int C, int NH) {
    if (NH <= 0 || C % NH != 0 || C / NH > ATT_MAX_HS)
        die(1, "attention: C = %d, NH = %d: the head size must be C / NH <= %d (internal error)", C, NH, ATT_MAX_HS);
    static int done = 0;
    if (done) return;
    size_t fwd = att_fwd_smem_floats(ATT_MAX_HS) * sizeof(float);
    size_t bwd = att_bwd_smem_floats(ATT_MAX_HS) * sizeof(float);
    size_t need = fwd > bwd ? fwd : bwd;
    if (need > g_cuda_prop.sharedMemPerBlockOptin)
        die(1, "attention: the kernels need %zu bytes of shared memory per block at head size %d, this "
               "GPU (%s) allows %zu. HINT: lower ATT_MAX_HS or the tile sizes in ops/attention.cuh",
            need, ATT_MAX_HS, g_cuda_prop.name, (size_t)g_cuda_prop.sharedMemPerBlockOptin);
    cudaCheck(cudaFuncSetAttribute(attention_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd));
    cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd));
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd));
    done = 1;
}

// Tiles of `rows` rows over T, as the grid's y dimension (at most 65535).
static unsigned att_tiles(int T, int rows) {
    int64_t n = ceil_div(T, rows);
    if (n > 65535) die(1, "attention: T = %d needs %lld tiles of %d rows, over CUDA's 65535 (grid y)", T, (long long)n, rows);
    return (unsigned)n;
}

static void attention_forward_cuda(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_setup(C, NH);
    dim3 grid((unsigned)(B * NH), att_tiles(T, ATT_FWD_BR));
    size_t smem = att_fwd_smem_floats(C / NH) * sizeof(float);
    attention_forward_kernel<<<grid, ATT_THREADS, smem, g_stream>>>(out, lse, qkv, T, C, NH);
    cudaCheck(cudaGetLastError());
}

// Scratch: D (B, NH, T) FP32 in g_work (ops_workspace_floats counts B*T*NH).
static void attention_backward_cuda(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                    const float* lse, int B, int T, int C, int NH) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_setup(C, NH);
    size_t rows = (size_t)B * NH * T;
    if (rows > g_work_floats)
        die(1, "attention backward: workspace too small (%zu floats, needs %zu) (internal error)", g_work_floats, rows);
    float* D = g_work;
    attention_backward_d_kernel<<<(unsigned)ceil_div((int64_t)rows, ATT_THREADS / 32), ATT_THREADS, 0, g_stream>>>(D, dout, out, B, T, C, NH);
    cudaCheck(cudaGetLastError());
    dim3 grid((unsigned)(B * NH), att_tiles(T, ATT_BWD_OWN));
    size_t smem = att_bwd_smem_floats(C / NH) * sizeof(float);
    attention_backward_dkdv_kernel<<<grid, ATT_THREADS, smem, g_stream>>>(dqkv, dout, qkv, lse, D, T, C, NH);
    cudaCheck(cudaGetLastError());
    attention_backward_dq_kernel<<<grid, ATT_THREADS, smem, g_stream>>>(dqkv, dout, qkv, lse, D, T, C, NH);
    cudaCheck(cudaGetLastError());
}
#endif

static void op_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { attention_forward_cuda(out, lse, qkv, B, T, C, NH); return; }
#endif
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel
    {
        float q[ATT_MAX_HS], o[ATT_MAX_HS], s[ATT_BK]; // thread-local row scratch
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    const floatX* qrow = qkv + ((int64_t)b * T + i) * 3 * C + h * HS;
                    for (int d = 0; d < HS; d++) { q[d] = ld(qrow[d]); o[d] = 0.0f; }
                    float m = -INFINITY, l = 0.0f;
                    for (int j0 = 0; j0 <= i; j0 += ATT_BK) {
                        int jn = i + 1 - j0 < ATT_BK ? i + 1 - j0 : ATT_BK; // causal: keys j <= i
                        float mt = -INFINITY;
                        for (int jj = 0; jj < jn; jj++) {
                            const floatX* krow = qkv + ((int64_t)b * T + j0 + jj) * 3 * C + C + h * HS;
                            float dot = 0.0f;
                            for (int d = 0; d < HS; d++) dot += q[d] * ld(krow[d]);
                            s[jj] = dot * scale;
                            mt = fmaxf(mt, s[jj]);
                        }
                        float mnew = fmaxf(m, mt);
                        float corr = expf(m - mnew); // 0 on the first tile (m = -inf)
                        l *= corr;
                        for (int d = 0; d < HS; d++) o[d] *= corr;
                        for (int jj = 0; jj < jn; jj++) {
                            float p = expf(s[jj] - mnew);
                            l += p;
                            const floatX* vrow = qkv + ((int64_t)b * T + j0 + jj) * 3 * C + 2 * C + h * HS;
                            for (int d = 0; d < HS; d++) o[d] += p * ld(vrow[d]);
                        }
                        m = mnew;
                    }
                    floatX* orow = out + ((int64_t)b * T + i) * C + h * HS;
                    for (int d = 0; d < HS; d++) orow[d] = rn(o[d] / l);
                    lse[((int64_t)b * NH + h) * T + i] = m + logf(l);
                }
    }
}

static void op_attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                  const float* lse, int B, int T, int C, int NH) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { attention_backward_cuda(dqkv, dout, qkv, out, lse, B, T, C, NH); return; }
#endif
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    // D (B, NH, T) = rowsum(dout * out) lives in the workspace
    float* D = g_work;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const floatX* dorow = dout + ((int64_t)b * T + i) * C + h * HS;
                const floatX* orow = out + ((int64_t)b * T + i) * C + h * HS;
                float acc = 0.0f;
                for (int d = 0; d < HS; d++) acc += ld(dorow[d]) * ld(orow[d]);
                D[((int64_t)b * NH + h) * T + i] = acc;
            }
#pragma omp parallel
    {
        float a[ATT_MAX_HS], g[ATT_MAX_HS], acc1[ATT_MAX_HS], acc2[ATT_MAX_HS]; // thread-local rows
        // pass 1: dq_i = scale * sum_{j <= i} dS_ij k_j
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    const floatX* qrow = qkv + ((int64_t)b * T + i) * 3 * C + h * HS;
                    const floatX* dorow = dout + ((int64_t)b * T + i) * C + h * HS;
                    for (int d = 0; d < HS; d++) { a[d] = ld(qrow[d]); g[d] = ld(dorow[d]); acc1[d] = 0.0f; }
                    float li = lse[((int64_t)b * NH + h) * T + i], Di = D[((int64_t)b * NH + h) * T + i];
                    for (int j = 0; j <= i; j++) {
                        const floatX* krow = qkv + ((int64_t)b * T + j) * 3 * C + C + h * HS;
                        const floatX* vrow = krow + C;
                        float sdot = 0.0f, pdot = 0.0f;
                        for (int d = 0; d < HS; d++) { sdot += a[d] * ld(krow[d]); pdot += g[d] * ld(vrow[d]); }
                        float p = expf(sdot * scale - li);
                        float ds = p * (pdot - Di);
                        for (int d = 0; d < HS; d++) acc1[d] += ds * ld(krow[d]);
                    }
                    floatX* dq = dqkv + ((int64_t)b * T + i) * 3 * C + h * HS;
                    for (int d = 0; d < HS; d++) dq[d] = rn(acc1[d] * scale);
                }
        // pass 2: dk_j = scale * sum_{i >= j} dS_ij q_i,  dv_j = sum_{i >= j} P_ij dout_i
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int j = 0; j < T; j++) {
                    const floatX* krow = qkv + ((int64_t)b * T + j) * 3 * C + C + h * HS;
                    const floatX* vrow = krow + C;
                    for (int d = 0; d < HS; d++) { a[d] = ld(krow[d]); g[d] = ld(vrow[d]); acc1[d] = 0.0f; acc2[d] = 0.0f; }
                    for (int i = j; i < T; i++) {
                        const floatX* qrow = qkv + ((int64_t)b * T + i) * 3 * C + h * HS;
                        const floatX* dorow = dout + ((int64_t)b * T + i) * C + h * HS;
                        float li = lse[((int64_t)b * NH + h) * T + i], Di = D[((int64_t)b * NH + h) * T + i];
                        float sdot = 0.0f, pdot = 0.0f;
                        for (int d = 0; d < HS; d++) { sdot += ld(qrow[d]) * a[d]; pdot += ld(dorow[d]) * g[d]; }
                        float p = expf(sdot * scale - li);
                        float ds = p * (pdot - Di);
                        for (int d = 0; d < HS; d++) { acc1[d] += ds * ld(qrow[d]); acc2[d] += p * ld(dorow[d]); }
                    }
                    floatX* dk = dqkv + ((int64_t)b * T + j) * 3 * C + C + h * HS;
                    floatX* dv = dk + C;
                    for (int d = 0; d < HS; d++) { dk[d] = rn(acc1[d] * scale); dv[d] = rn(acc2[d]); }
                }
    }
}

#endif // ZT_OPS_ATTENTION_CUH
