// ops/attention.cuh — causal multi-head self-attention, FlashAttention-2 style, both passes.
//
//   forward:  qkv (B, T, QKV) -> out (B, T, NH*HS)     [floatX, =]
//                              -> lse (B, NH, T)       [FP32, =]  log-sum-exp of each score row
//   backward: dout (B, T, NH*HS), qkv, out, lse -> dqkv (B, T, QKV)   [floatX, =]
// Grouped-query attention (Ainslie et al. 2023): NH query heads, NKV key/value heads (NKV divides
// NH), head size HS; a qkv row is q heads (NH*HS) ; k heads (NKV*HS) ; v heads (NKV*HS), QKV =
// (NH + 2 NKV) HS. Query head h reads kv head h / (NH/NKV), as transformers' repeat_kv, but the K/V
// rows are read in place (never copied per query head). GPT-2 is NKV = NH, HS = C/NH: QKV = 3C.
// S = Q K^T / sqrt(HS) with the causal mask (key j <= query i), P = softmax(S), out = P V.
// Packed examples (issue 25): with the segment table seg (B, T) int32, seg[b*T + i] = the index of
// the first token of i's example, query i sees keys seg[b*T + i] <= j <= i only (a block-diagonal
// causal mask); seg == NULL is one example per row (the causal mask above, the same bits as before).
// Where a query's key walk starts: the CPU loop at its example's first key, so there an example
// packed anywhere in a row computes the same sums in the same order as the example alone at a row's
// start. The scalar CUDA kernels start at the first key of the query tile's first row's example, the
// tensor-core kernels at the key tile holding that key (a tile boundary): the keys before the
// query's example are masked (they add nothing), but the tiles of the online softmax fall elsewhere
// than for the example alone, so on CUDA packed and alone agree to rounding, not bit for bit.
// dK/dV of a kv head sum over its group's query heads: every kernel and the CPU loop add the heads
// in increasing order, each over its queries in order (a fixed order: deterministic, no atomics).
// The tensor-core kernel may split a group into parts of consecutive heads (where a shape has too
// few blocks: attention_dkdv_nsplit, a function of the shape alone), sum each part so, and add the
// parts' FP32 sums in part order: a fixed order too, another rounding than the unsplit sum.
//
// The T x T matrices S and P are never stored (Dao, "FlashAttention-2", 2023, Alg. 1 and 2).
// Forward, per query row i, walks the keys in tiles of ATT_BK, keeping a running maximum m, a
// running sum l and an unnormalised output o (the "online softmax" of Milakov & Gimelshein 2018):
//     m' = max(m, max_j s_ij);  l = l*exp(m - m') + sum_j exp(s_ij - m');  o = o*exp(m - m') + sum_j exp(s_ij - m') v_j
// and stores out = o / l and lse = m + log(l). Backward recomputes P_ij = exp(s_ij - lse_i) and,
// with D_i = dout_i . out_i (Alg. 2 line 4), dS_ij = P_ij (dout_i . v_j - D_i):
//     dq_i = scale * sum_{j<=i} dS_ij k_j          (pass 1, a task per query row)
//     dk_j = scale * sum_{i>=j} dS_ij q_i,  dv_j = sum_{i>=j} P_ij dout_i   (pass 2, a task per key row
//                                                      of a kv head: its query heads in order, each i >= j)
// Two passes instead of atomics: every gradient row is one sum in a fixed order, so the result
// does not depend on the thread count, exactly as the GPU kernel will do it.
//
// On CUDA two sets of kernels implement this: on tensor cores (mma.sync, for HS 64 and 128 with T a
// multiple of 64 in the BF16 build) and scalar FP32 ones for every other shape (attention_uses_tc
// decides; docs/cuda.md "Attention on tensor cores" lists both and what to expect of them).
//
// A third implementation, cuDNN's fused SDPA (ops/attention_cudnn.cuh, make USE_CUDNN=1), takes the CUDA
// device's shapes when -attn picks it (g_attn_cudnn, set at start-up: attention_choose in startup.h);
// attention_cudnn_unavailable says why it cannot run in this build, on this device or machine.
//
// defines: op_attention_forward, op_attention_backward, attention_uses_tc, attention_tc_tiles,
//          attention_dkdv_nsplit, attention_workspace_floats, ATT_BK, ATT_MAX_HS,
//          g_attn_cudnn, attention_cudnn_unavailable, attention_cudnn_workspace_bytes
//
// May call: device.cuh, tensor_core.cuh and attention_cudnn.cuh. Each op here knows nothing of the model or ZeRO.
#ifndef ZT_OPS_ATTENTION_CUH
#define ZT_OPS_ATTENTION_CUH

#include "../device.cuh"      // defines: floatX, ld, rn
#include "tensor_core.cuh"      // defines: tc_mma_bf16, tc_ldmatrix_*, tc_cp_async_* (mma.sync, ldmatrix, cp.async)
#include "attention_cudnn.cuh"  // defines (USE_CUDNN=1 nvcc builds only): attention_cudnn_forward, attention_cudnn_backward, attention_cudnn_load

// -attn: 1 when the CUDA device's attention goes to cuDNN (attention_choose, startup.h); g_attn_cudnn_given:
// -attn cudnn was given (a shape cuDNN refuses ends the run), else auto (that shape takes our kernels, said once).
static int g_attn_cudnn = 0, g_attn_cudnn_given = 0;

// Why cuDNN attention cannot run in this build, on this device or machine: 0 when it can, else -1 and
// the reason in why. With load (the CUDA device of a USE_CUDNN=1 build), loads libcudnn.so.9 the first
// time (attention_cudnn_load: its version checked); without, only the build and the device are asked.
// *brief: the reason in a few words (the settings table's row).
static int attention_cudnn_unavailable(int on_cuda, int load, char* why, size_t cap, const char** brief) {
    const char* build = NULL; // what this build lacks
    *brief = NULL;
#if defined(ZT_CUDA_EMU)
    build = "the CUDA emulator (test/cuda_emu/) has no cuDNN: it runs our kernels only";
    *brief = "the emulator has no cuDNN";
#elif !defined(__CUDACC__)
    build = "this build has no CUDA (built with g++)";
#elif !defined(ZT_CUDNN)
    build = "this build has no cuDNN: build it with make USE_CUDNN=1 (docs/cudnn.md)";
    *brief = "no cuDNN in this build";
#elif defined(ENABLE_FP32)
    build = "the FP32 build: cuDNN's fused attention takes BF16 (or FP16) only";
    *brief = "the FP32 build";
#endif
    if (!on_cuda) {
        snprintf(why, cap, "cuDNN runs on the CUDA device only, and this run is on the CPU device%s%s", build ? "; besides, " : "", build ? build : "");
        *brief = "cpu device";
        return -1;
    }
    if (build) { snprintf(why, cap, "%s", build); return -1; }
#if defined(__CUDACC__) && defined(ZT_CUDNN) && !defined(ENABLE_FP32) && !defined(ZT_CUDA_EMU)
    *brief = "cuDNN not loaded: see the note";
    if (load) return attention_cudnn_load(why, cap);
#endif
    (void)load;
    return 0;
}

// The planner's estimate of cuDNN's workspace for one shape, in bytes (cuDNN reports the real size
// when it builds a graph; attention_cudnn.cuh checks it against the ops' workspace): the deterministic
// backward's dP buffer on Hopper, 2 bytes per score of T rounded up to 64 queries and 128 keys per
// head; dQ accumulated in FP32 (4 B NH T HS); the softmax sums (2 x 4 B NH T); with grouped-query
// attention dK and dV accumulated per query head in FP32 (2 x 4 B NH T HS).
static size_t attention_cudnn_workspace_bytes(int B, int T, int NH, int NKV, int HS) {
    size_t bh = (size_t)B * NH;
    size_t dp = 2 * bh * (size_t)round_up(T, 64) * (size_t)round_up(T, 128);
    size_t dq = 4 * bh * (size_t)T * HS, sums = 2 * 4 * bh * (size_t)T;
    size_t gqa = NKV < NH ? 2 * 4 * bh * (size_t)T * HS : 0;
    return dp + dq + sums + gqa;
}

#define ATT_BK 64       // key tile (columns of S processed per online-softmax update)
#define ATT_MAX_HS 256  // largest head size (HD); checked when the model is configured

// The tensor-core kernels' tiles (below, CUDA BF16 build; here for attention_tc_tiles too).
#define FA_TILE 64                   // rows a block owns = rows of each tile it walks (B_r = B_c; but FA_DKDV_BC)
// dK/dV walks query tiles of FA_DKDV_BC rows: FA_TILE, but 32 at HS = 128, where the accumulators dK
// and dV (2 x 64 FP32 registers a lane) leave no room for 64-column P and dS (ptxas: 255 registers
// and spills); with 32 columns, P and dS take 32 registers. The sums are the same, in the same order
// (16 queries per mma, in order): the bits do not depend on it.
#define FA_DKDV_BC(HS) ((HS) == 128 ? 32 : FA_TILE)

// Their walks with a segment table sg (one row's (T), non-decreasing; NULL: causal over the row):
// the query tile at q0 needs keys from sg[q0] (its smallest example start) on, so key tiles before
// the tile holding sg[q0] are skipped whole; the key tile whose last key is klast is seen by the
// queries i >= its first key with sg[i] <= klast, which end at the first query tile (of bc rows,
// from it0 on, nq in all) whose first row's example starts after klast.
ZT_HD static inline int att_first_key_tile(const int* sg, int q0, int tile) { return sg ? sg[q0] / tile : 0; }
ZT_HD static inline int att_query_tile_end(const int* sg, int klast, int it0, int nq, int bc) {
    if (!sg) return nq;
    int it = it0;
    while (it < nq && sg[it * bc] <= klast) it++;
    return it;
}
// The tiles those walks visit for one row (sg (T) or NULL: causal; T a multiple of FA_TILE), counted
// on the host with the kernels' own functions: *fwd = the (query tile, key tile) pairs of the
// forward (and of dQ, the same walk), *dkdv = the (key tile, query tile of FA_DKDV_BC(HS) rows)
// pairs of dK/dV (per query head). docs/ops.md's prediction of the work skipped is from here.
static inline void attention_tc_tiles(const int* sg, int T, int HS, int64_t* fwd, int64_t* dkdv) {
    int nt = T / FA_TILE, bc = FA_DKDV_BC(HS), nq = T / bc;
    *fwd = *dkdv = 0;
    for (int qt = 0; qt < nt; qt++) *fwd += qt + 1 - att_first_key_tile(sg, qt * FA_TILE, FA_TILE);
    for (int kt = 0; kt < nt; kt++) {
        int it0 = kt * FA_TILE / bc;
        *dkdv += att_query_tile_end(sg, kt * FA_TILE + FA_TILE - 1, it0, nq, bc) - it0;
    }
}

// The shapes the tensor-core kernels take (the build and the pointers' alignment aside: attention_uses_tc).
static inline int att_tc_shape(int T, int HS) { return (HS == 64 || HS == 128) && T % FA_TILE == 0; }

// dK/dV's group split (issue 42). The tensor-core dK/dV kernel runs a block per (b, kv head, key
// tile) walking its group's rep = NH/NKV query heads: B*NKV*T/64 blocks, 64 for Qwen2.5-0.5B (NKV 2)
// at B 1, T 2048 on a GPU of 132 SMs. Below FA_DKDV_TARGET_BLOCKS such blocks the group's heads are
// split into nsplit parts of consecutive heads (part p: heads p*rep/nsplit .. (p+1)*rep/nsplit - 1,
// sizes within one of each other), a block per (b, kv head, key tile, part): nsplit = the fewest
// parts that reach the target, at most rep. Each block sums its part as before and writes it in
// FP32 to the workspace; a second kernel adds the parts in order (part 0, 1, ...) and rounds once.
// No atomics, and nsplit is a function of the shape alone (never of the device's SM count): a shape
// gives the same bits on every GPU and on the emulator. nsplit = 1 (MHA, or enough blocks already)
// is the single kernel, bit for bit as before the split existed.
#define FA_DKDV_TARGET_BLOCKS 132 // an H100 / H200 SXM's SMs (a constant: the bits must not depend on the GPU)
static inline int attention_dkdv_nsplit(int B, int T, int NH, int NKV, int HS) {
    if (NKV <= 0 || NH % NKV != 0 || NH / NKV <= 1 || !att_tc_shape(T, HS)) return 1;
    int64_t rep = NH / NKV, blocks = (int64_t)B * NKV * (T / FA_TILE);
    if (blocks <= 0 || blocks >= FA_DKDV_TARGET_BLOCKS) return 1;
    int64_t n = ceil_div(FA_DKDV_TARGET_BLOCKS, blocks);
    return (int)(n < rep ? n : rep);
}
// The parts' FP32 sums: (nsplit, B, T, 2*NKV*HS), each part laid out as dqkv's k and v columns.
static inline size_t att_dkdv_part_floats(int B, int T, int NKV, int HS, int nsplit) {
    return nsplit > 1 ? (size_t)nsplit * B * T * 2 * NKV * HS : 0;
}
// The backward's scratch in g_work (ops_workspace_floats takes it from here): D (B, NH, T), then,
// where the shape splits dK/dV, the parts' sums from the next 64-float (256-byte) boundary on. The
// parts stay small: a shape splits only under 132 blocks, so nsplit * blocks < 2 * 132 and the parts
// hold under 264 * 64 * 2 * HS floats (4.3 M at HS 128, under cuBLASLt's 8 M of the workspace).
#define ATT_PART_ALIGN 64
static inline size_t attention_workspace_floats(int B, int T, int NH, int NKV, int HS) {
    size_t d = (size_t)B * NH * T, part = att_dkdv_part_floats(B, T, NKV, HS, attention_dkdv_nsplit(B, T, NH, NKV, HS));
    return part ? (size_t)round_up((int64_t)d, ATT_PART_ALIGN) + part : d;
}

#ifdef __CUDACC__
// ---- CUDA kernels: FlashAttention-2 (Dao 2023) Alg. 1 (forward) and Alg. 2 (backward)
//
// Plain FP32 scalar code, for the shapes the tensor-core kernels below do not take (head sizes
// other than 64 and 128, T not a multiple of 64, the FP32 build). A thread block owns a tile of rows
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
//            2. grid (B*NKV, ceil(T/16)): a block owns 16 keys j of a kv head (line 5) and, for
//               each query head of its group in order, walks the query tiles of 32 rows i that
//               reach them (i >= j), accumulating dK_j, dV_j (lines 6-19);
//            3. grid (B*NH, ceil(T/16)): a block owns 16 queries i and walks the key tiles of
//               32 keys j <= i, accumulating dQ_i: line 15 as a pass of its own.
//            Both recompute P_ij = exp(S_ij - L_i) (line 11) from the forward's lse.
// Every output element is accumulated by one thread, in a fixed order, so the result is bitwise
// reproducible. Scores are S = scale * Q K^T with scale = 1/sqrt(HS); the paper leaves the scale
// out, so it appears in S and once more in dQ and dK (dS is the gradient of the scaled score).
// Masks: key j > query i, and rows past T (tiles are zero-filled there and masked out); with a
// segment table also keys before the query's example (the forward and dQ start their key walk at
// the block's first row's example, dK/dV stops at the first query tile whose example starts after
// the block's last key: att_query_tile_end).
// Shared memory at HS = 256: ~133 KiB per block (forward, and both backward kernels), under the
// 163 KiB a block may use on A100 (sm_80) and the 227 KiB of H100/H200 (sm_90).
// Limits: FP32 FMAs from shared memory, 20-40x slower than the tensor-core kernels; never run on a GPU yet.

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
// out (B, T, NH*HS) floatX [=], lse (B, NH, T) FP32 [=], qkv (B, T, QKV).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_forward_kernel(floatX* out, float* lse, const floatX* qkv, const int* seg, int T, int NH, int NKV, int HS) {
    const int Br = ATT_FWD_BR, Bc = ATT_FWD_BC;
    int W = HS | 1, QKV = (NH + 2 * NKV) * HS, C = NH * HS;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * Br; // the last tiles (most keys) are scheduled first
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * QKV + h * HS; // (T, HS), row stride QKV
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS; // kv head kh of query head h
    const floatX* v = k + NKV * HS;
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
    att_load_tile(Qs, q, QKV, q0, Br, T, HS, W);
    for (int e = tid; e < Br * HS; e += ATT_THREADS) Os[(e / HS) * W + e % HS] = 0.0f;
    for (int r = tid; r < Br; r += ATT_THREADS) { ms[r] = -INFINITY; ls[r] = 0.0f; }
    int kend = q0 + Br < T ? q0 + Br : T; // causal: the tile's last row sees keys j < q0 + Br
    const int* sg = seg ? seg + (int64_t)b * T : NULL; // this row's segment table (NULL: one example)
    int kbeg = sg ? sg[q0] : 0; // the first key of the tile's first (smallest) example: earlier keys are skipped
    for (int k0 = kbeg; k0 < kend; k0 += Bc) { // line 6
        // line 7: load K_j, V_j
        att_load_tile(Ks, k, QKV, k0, Bc, T, HS, W);
        att_load_tile(Vs, v, QKV, k0, Bc, T, HS, W);
        __syncthreads(); // K_j, V_j (and, on the first tile, Q_i, O_i, m_i, l_i) are in place
        // line 8: S_ij = scale * Q_i K_j^T; -inf where key j > query i, j >= T (rows past T only), or
        // j before the first key of i's example
        for (int e = tid; e < Br * Bc; e += ATT_THREADS) {
            int r = e / Bc, c = e % Bc, i = q0 + r, j = k0 + c;
            float s = -INFINITY;
            if (j <= i && j < T && (!sg || i >= T || j >= sg[i])) {
                float dot = 0.0f;
                for (int d = 0; d < HS; d++) dot += Qs[r * W + d] * Ks[c * W + d];
                s = dot * scale;
            }
            Ps[r * Bc + c] = s;
        }
        __syncthreads(); // S_ij is complete before line 9 reads whole rows of it
        // line 9: m_new = max(m, rowmax(S)), P~ = exp(S - m_new), l = exp(m - m_new) l + rowsum(P~).
        // A warp per row, lane c holds column c. Causal alone, m_new is finite (column k0 <= q0 <= i is
        // visible); with examples a row may see no key of the first tiles (its example starts later):
        // m_new = -inf there, and the exponents use 0 instead (P~ = 0, l and O stay 0).
        for (int r = warp; r < Br; r += ATT_THREADS / 32) {
            float s = Ps[r * Bc + lane];
            float m_old = ms[r];
            float m_new = fmaxf(m_old, att_warp_max(s));
            float m_exp = m_new == -INFINITY ? 0.0f : m_new; // no visible key yet (never without seg)
            float p = expf(s - m_exp); // masked: exp(-inf) = 0
            float rowsum = att_warp_sum(p);
            Ps[r * Bc + lane] = p;
            if (lane == 0) {
                float corr = expf(m_old - m_exp); // 0 on the first tile (m_old = -inf)
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
// stored (rounded) out. A warp per row (b, h, i); dout, out (B, T, C), C = NH*HS.
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_d_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int NH, int HS) {
    int64_t row = (int64_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32; // (b*NH + h)*T + i
    int lane = threadIdx.x % 32;
    if (row >= (int64_t)B * NH * T) return; // the whole warp leaves together: the shuffles see 32 lanes
    int C = NH * HS;
    int i = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    const floatX* dorow = dout + ((int64_t)b * T + i) * C + h * HS;
    const floatX* orow = out + ((int64_t)b * T + i) * C + h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc += ld(dorow[d]) * ld(orow[d]);
    acc = att_warp_sum(acc);
    if (lane == 0) D[row] = acc;
}

// Alg. 2 lines 5-19 without line 15. Block (b*NKV + kh, tile) owns keys [k0, k0 + Bk) of kv head kh
// and, for each query head h of its group in order, walks the query tiles [q0, q0 + Bq) that hold
// some i >= k0, adding into the same dK_j, dV_j.
// dqkv (B, T, QKV) floatX: the k and v heads [=]; dout (B, T, NH*HS), qkv (B, T, QKV), lse, D (B, NH, T).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_dkdv_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                               const float* D, const int* seg, int T, int NH, int NKV, int HS) {
    const int Bk = ATT_BWD_OWN, Bq = ATT_BWD_WALK;
    int W = HS | 1, QKV = (NH + 2 * NKV) * HS, C = NH * HS, rep = NH / NKV;
    int b = blockIdx.x / NKV, kh = blockIdx.x % NKV;
    int k0 = blockIdx.y * Bk; // the first keys (most queries) are scheduled first
    int tid = threadIdx.x;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS; // (T, HS), row stride QKV
    const floatX* v = k + NKV * HS;
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
    att_load_tile(Ks, k, QKV, k0, Bk, T, HS, W);
    att_load_tile(Vs, v, QKV, k0, Bk, T, HS, W);
    for (int e = tid; e < Bk * HS; e += ATT_THREADS) {
        dKs[(e / HS) * W + e % HS] = 0.0f;
        dVs[(e / HS) * W + e % HS] = 0.0f;
    }
    const int* sg = seg ? seg + (int64_t)b * T : NULL; // this row's segment table (NULL: one example)
    // the queries that see a key of the block: i >= k0 with seg[i] <= its last key (seg is
    // non-decreasing, so they end at the first query tile whose first row's example starts later)
    int klast = (k0 + Bk < T ? k0 + Bk : T) - 1;
    int qend = att_query_tile_end(sg, klast, k0 / Bq, (int)ceil_div(T, Bq), Bq) * Bq; // <= T + Bq - 1
    for (int h = kh * rep; h < (kh + 1) * rep; h++) { // the group's query heads, in order
        int bh = b * NH + h;
        const floatX* q = qkv + (int64_t)b * T * QKV + h * HS; // (T, HS), row stride QKV
        const floatX* dO = dout + (int64_t)b * T * C + h * HS;  // (T, HS), row stride C
        for (int q0 = k0 / Bq * Bq; q0 < qend; q0 += Bq) { // line 8, causal: only tiles with i >= k0
            // line 9: load Q_i, dO_i, L_i, D_i (rows past T: zero, and masked below)
            att_load_tile(Qs, q, QKV, q0, Bq, T, HS, W);
            att_load_tile(dOs, dO, C, q0, Bq, T, HS, W);
            for (int r = tid; r < Bq; r += ATT_THREADS) {
                int i = q0 + r;
                Ls[r] = i < T ? lse[(int64_t)bh * T + i] : 0.0f;
                Ds[r] = i < T ? D[(int64_t)bh * T + i] : 0.0f;
            }
            __syncthreads(); // Q_i, dO_i, L_i, D_i (and, on the first tile, K_j, V_j, dK_j, dV_j) are in place
            // line 10: S = scale Q_i K_j^T; 11: P = exp(S - L_i); 13: dP = dO_i V_j^T; 14: dS = P (dP - D_i).
            // Masked (P = dS = 0): key j > query i, query rows i >= T (keys j >= T then follow), and
            // keys before the first key of i's example.
            for (int e = tid; e < Bq * Bk; e += ATT_THREADS) {
                int r = e / Bk, c = e % Bk, i = q0 + r, j = k0 + c;
                float p = 0.0f, ds = 0.0f;
                if (j <= i && i < T && (!sg || j >= sg[i])) {
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
    }
    // line 18: write dK_j = scale * dK_j, dV_j, rounded once (each thread the elements it owns)
    for (int e = tid; e < Bk * HS; e += ATT_THREADS) {
        int c = e / HS, d = e % HS, j = k0 + c;
        if (j >= T) continue;
        floatX* dk = dqkv + ((int64_t)b * T + j) * QKV + (NH + kh) * HS; // (HS) row j of dK, kv head kh
        dk[d] = rn(dKs[c * W + d] * scale);
        dk[NKV * HS + d] = rn(dVs[c * W + d]); // the v heads follow NKV*HS channels later
    }
}

// Alg. 2 line 15 as its own pass. Block (bh = b*NH + h, tile) owns queries [q0, q0 + Bq) of head h
// and walks the key tiles [k0, k0 + Bk) with keys j <= i.
// dqkv (B, T, QKV) floatX: the q heads [=]; dout (B, T, NH*HS), qkv (B, T, QKV), lse, D (B, NH, T).
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_dq_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                             const float* D, const int* seg, int T, int NH, int NKV, int HS) {
    const int Bq = ATT_BWD_OWN, Bk = ATT_BWD_WALK;
    int W = HS | 1, QKV = (NH + 2 * NKV) * HS, C = NH * HS;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int q0 = (gridDim.y - 1 - blockIdx.y) * Bq; // the last queries (most keys) are scheduled first
    int tid = threadIdx.x;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * QKV + h * HS; // (T, HS), row stride QKV
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS; // kv head kh of query head h
    const floatX* v = k + NKV * HS;
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
    att_load_tile(Qs, q, QKV, q0, Bq, T, HS, W);
    att_load_tile(dOs, dO, C, q0, Bq, T, HS, W);
    for (int e = tid; e < Bq * HS; e += ATT_THREADS) dQs[(e / HS) * W + e % HS] = 0.0f;
    for (int r = tid; r < Bq; r += ATT_THREADS) {
        int i = q0 + r;
        Ls[r] = i < T ? lse[(int64_t)bh * T + i] : 0.0f;
        Ds[r] = i < T ? D[(int64_t)bh * T + i] : 0.0f;
    }
    int kend = q0 + Bq < T ? q0 + Bq : T; // causal: the tile's last row sees keys j < q0 + Bq
    const int* sg = seg ? seg + (int64_t)b * T : NULL; // this row's segment table (NULL: one example)
    int kbeg = sg ? sg[q0] : 0; // the first key of the tile's first (smallest) example
    for (int k0 = kbeg; k0 < kend; k0 += Bk) {
        // line 6: load K_j, V_j
        att_load_tile(Ks, k, QKV, k0, Bk, T, HS, W);
        att_load_tile(Vs, v, QKV, k0, Bk, T, HS, W);
        __syncthreads(); // K_j, V_j (and, on the first tile, Q_i, dO_i, L_i, D_i, dQ_i) are in place
        // lines 10, 11, 13, 14 as in the dK/dV kernel: dS = P (dO_i V_j^T - D_i), masked to 0
        for (int e = tid; e < Bq * Bk; e += ATT_THREADS) {
            int r = e / Bk, c = e % Bk, i = q0 + r, j = k0 + c;
            float ds = 0.0f;
            if (j <= i && i < T && (!sg || j >= sg[i])) {
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
        if (i < T) dqkv[((int64_t)b * T + i) * QKV + h * HS + d] = rn(dQs[r * W + d] * scale);
    }
}

// ---- CUDA kernels on tensor cores: FlashAttention-2 (Dao 2023) Alg. 1 and 2 with mma.sync
//
// Taken when HS is 64 or 128, T is a multiple of FA_TILE (64) and the storage is BF16 (with 16-byte
// aligned tensors); the scalar kernels above take everything else (other head sizes, T not a
// multiple of 64, the FP32 build). A block of 4 warps owns FA_TILE rows (each warp 16 of them:
// the M of m16n8k16) and walks tiles of FA_TILE rows of the other side; all products are BF16
// mma.sync m16n8k16 with FP32 accumulators (ops/tensor_core.cuh draws the fragment layouts):
//   S = Q K^T           A = Q rows (ldmatrix), B = K rows (ldmatrix: K is "n x k" row-major)
//   O += P V            A = P from S's accumulators (rounded to BF16), B = V (ldmatrix.trans)
// Tiles reach shared memory by cp.async, double-buffered: the next tile's copy is in flight while
// the warps compute on this one. Shared rows are HS + 8 elements long, so the 8 row addresses of
// one ldmatrix fall in 8 different 16-byte bank groups. Causal: tiles wholly above the diagonal
// are skipped; the diagonal tile is masked element by element (query tile == key tile, so
// key > query is col > row within the tile). The online softmax runs in FP32 in registers: each
// lane holds rows g and g + 8 of its warp's 16 (g = lane / 4); a row's 4 lanes combine by shuffles.
// Backward: as the scalar kernels, three passes without atomics: D (the scalar kernel), dK/dV
// with a block per key tile (Alg. 2 lines 5-19 without 15; per key tile and part of the group where
// the shape splits it, then a pass adding the parts: line 18), dQ with a block per query tile.
// Each kernel is a template on SEG: false is the causal kernel; true takes a segment table (packed
// examples): key tiles wholly before the query tile's first example are skipped
// (att_first_key_tile), the partial ones masked per row, and dK/dV's query walk ends at
// att_query_tile_end. SEG = false compiles to the causal code alone (its registers are unchanged).
// Performance expectations are in docs/cuda.md ("Attention on tensor cores"); never run on a GPU yet.
#ifndef ENABLE_FP32
#define FA_WARPS 4                   // 16 of the owned rows each
#define FA_THREADS (32 * FA_WARPS)
#define FA_PAD 8                     // shared rows are HS + FA_PAD elements (16 bytes more)
static_assert(FA_TILE == 16 * FA_WARPS, "each warp owns the 16 rows of one m16n8k16 A operand");
// Blocks per SM each kernel is compiled for (__launch_bounds__' second argument: ptxas keeps to
// 65536 / (FA_THREADS * n) registers a thread, and spills what does not fit). Two at HS = 128, where
// shared memory allows two (dK/dV: three); at HS = 64 the forward and dQ fit in 168 registers
// (three blocks), dK/dV does not (240: two). make test checks that no kernel spills (nvcc's
// resource table, test/gpu_resources.h); docs/cuda.md has the registers and the occupancy.
#define FA_FWD_MIN_BLOCKS(HS) ((HS) == 64 ? 3 : 2)
#define FA_DKDV_MIN_BLOCKS(HS) 2
#define FA_DQ_MIN_BLOCKS(HS) ((HS) == 64 ? 3 : 2)

// Shared memory of each kernel in bytes: 5 (forward: Q, 2 K, 2 V) or 6 (dQ: the owned side's 2, the
// walked side's 2 x 2) tiles of (FA_TILE, HS + FA_PAD) BF16, plus L and D (2 x 2 x FA_TILE FP32).
static size_t fa_smem_bytes(int HS, int backward) {
    return (size_t)(backward ? 6 : 5) * FA_TILE * (HS + FA_PAD) * sizeof(bf16_t) + (backward ? 4 * FA_TILE * sizeof(float) : 0);
}
// dK/dV: K_j, V_j (FA_TILE rows each), 2 x Q_i and 2 x dO_i (FA_DKDV_BC rows each), 2 x L_i, D_i
// and (with a segment table) seg_i.
static size_t fa_smem_dkdv_bytes(int HS) {
    size_t bc = HS == 128 ? FA_DKDV_BC(128) : FA_DKDV_BC(64);
    return (2 * FA_TILE + 4 * bc) * (HS + FA_PAD) * sizeof(bf16_t) + 6 * bc * sizeof(float);
}

// Rows [row0, row0 + ROWS) x HS of x (row stride xs elements) into the shared tile s (row stride
// HS + FA_PAD) by cp.async, 16 bytes per copy, every thread of the block; the caller commits.
template <int HS, int ROWS = FA_TILE> __device__ static inline void fa_load_tile(bf16_t* s, const floatX* x, int64_t xs, int row0) {
    const int chunks = HS / 8; // 16-byte pieces per row
    for (int e = threadIdx.x; e < ROWS * chunks; e += FA_THREADS) {
        int r = e / chunks, c = (e % chunks) * 8;
        tc_cp_async_16(s + r * (HS + FA_PAD) + c, x + (int64_t)(row0 + r) * xs + c);
    }
}
// N floats (or ints) of x (a row of L, D or seg) into s by cp.async (the first N / 4 threads).
template <int N = FA_TILE, typename E> __device__ static inline void fa_load_vec(E* s, const E* x) {
    if (threadIdx.x < N / 4) tc_cp_async_16(s + 4 * threadIdx.x, x + 4 * threadIdx.x);
}

// S (16 x N) = A B^T over k = 0..HS: A is this warp's 16 rows of a shared tile (row-major, k along
// the row), B all N rows of another (row-major, k along the row). S[n] is the accumulator fragment
// of columns 8n .. 8n + 7.
template <int HS, int N = FA_TILE> __device__ static inline void fa_mma_ABt(float S[N / 8][4], const bf16_t* A, const bf16_t* B) {
    const int ld = HS + FA_PAD, lane = threadIdx.x % 32;
    #pragma unroll
    for (int n = 0; n < N / 8; n++)
        #pragma unroll
        for (int i = 0; i < 4; i++) S[n][i] = 0.0f;
    #pragma unroll
    for (int k0 = 0; k0 < HS; k0 += 16) {
        uint32_t a[4], b[4];
        tc_ldmatrix_x4(a, A + (lane % 16) * ld + k0 + 8 * (lane / 16));
        #pragma unroll
        for (int n0 = 0; n0 < N; n0 += 16) {
            tc_ldmatrix_x4(b, B + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * ((lane / 8) % 2));
            tc_mma_bf16(S[n0 / 8], a, b, S[n0 / 8]);
            tc_mma_bf16(S[n0 / 8 + 1], a, b + 2, S[n0 / 8 + 1]);
        }
    }
}

// O (16 x HS) += P V: P (16 x K) in accumulator fragments (rounded to BF16 here), V all K rows of a
// shared tile (row-major: k = its rows, n along the row). O[n] holds columns 8n ...
template <int HS, int K = FA_TILE>
__device__ static inline void fa_mma_PV(float O[HS / 8][4], const float P[K / 8][4], const bf16_t* V) {
    const int ld = HS + FA_PAD, lane = threadIdx.x % 32;
    #pragma unroll
    for (int kk = 0; kk < K / 16; kk++) { // k = rows 16 kk .. 16 kk + 15 of V
        uint32_t a[4] = {tc_pack_bf16(P[2 * kk][0], P[2 * kk][1]), tc_pack_bf16(P[2 * kk][2], P[2 * kk][3]),
                         tc_pack_bf16(P[2 * kk + 1][0], P[2 * kk + 1][1]), tc_pack_bf16(P[2 * kk + 1][2], P[2 * kk + 1][3])};
        #pragma unroll
        for (int n0 = 0; n0 < HS; n0 += 16) {
            uint32_t b[4];
            tc_ldmatrix_x4_trans(b, V + (16 * kk + lane % 8 + 8 * ((lane / 8) % 2)) * ld + n0 + 8 * (lane / 16));
            tc_mma_bf16(O[n0 / 8], a, b, O[n0 / 8]);
            tc_mma_bf16(O[n0 / 8 + 1], a, b + 2, O[n0 / 8 + 1]);
        }
    }
}

// Row (b, i) of an HS-wide head slice, two neighbouring columns from one accumulator: x[2 cols] = rn(v0), rn(v1).
__device__ static inline void fa_store2(floatX* x, float v0, float v1) { *(uint32_t*)x = tc_pack_bf16(v0, v1); }

// Alg. 1. Block (bh = b*NH + h, query tile) computes out rows [q0, q0 + FA_TILE) of head h and lse.
// Query head h reads kv head h / (NH / NKV) in place. out (B, T, NH*HS) [=], lse (B, NH, T) [=],
// qkv (B, T, QKV).
template <int HS, bool SEG>
__global__ static void __launch_bounds__(FA_THREADS, FA_FWD_MIN_BLOCKS(HS))
attention_forward_tc_kernel(floatX* out, float* lse, const floatX* qkv, const int* seg, int T, int NH, int NKV) {
    const int ld = HS + FA_PAD, QKV = (NH + 2 * NKV) * HS, C = NH * HS;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * FA_TILE; // the last tiles (most keys) are scheduled first
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * QKV + h * HS; // (T, HS), row stride QKV
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS;
    const floatX* v = k + NKV * HS;
    extern __shared__ __align__(16) float fa_smem[]; // 16-byte cp.async and ldmatrix rows
    bf16_t* Qs = (bf16_t*)fa_smem;        // (FA_TILE, ld) Q_i
    bf16_t* Ks = Qs + FA_TILE * ld;       // 2 x (FA_TILE, ld) K_j, double-buffered
    bf16_t* Vs = Ks + 2 * FA_TILE * ld;   // 2 x (FA_TILE, ld) V_j
    // [SEG] lo: the first key of the examples of this lane's rows (g, g + 8); j0: the first key tile
    int lo[2] = {0, 0}, j0 = 0;
    if (SEG) {
        const int* sg = seg + (int64_t)b * T;
        lo[0] = sg[q0 + 16 * warp + g];
        lo[1] = sg[q0 + 16 * warp + g + 8];
        j0 = att_first_key_tile(sg, q0, FA_TILE);
    }

    // line 4: load Q_i; line 7 of the first key tile: K_j0, V_j0 (one cp.async group)
    fa_load_tile<HS>(Qs, q, QKV, q0);
    fa_load_tile<HS>(Ks, k, QKV, j0 * FA_TILE);
    fa_load_tile<HS>(Vs, v, QKV, j0 * FA_TILE);
    tc_cp_async_commit();
    // line 5: O_i = 0, l_i = 0, m_i = -inf; this lane's rows: r = 0 -> row g, r = 1 -> row g + 8
    float O[HS / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int n = 0; n < HS / 8; n++)
        #pragma unroll
        for (int i = 0; i < 4; i++) O[n][i] = 0.0f;
    for (int j = j0; j <= qt; j++) { // line 6; causal: key tiles past the query tile are skipped whole
        bf16_t* Kj = Ks + ((j - j0) % 2) * FA_TILE * ld;
        bf16_t* Vj = Vs + ((j - j0) % 2) * FA_TILE * ld;
        if (j < qt) { // line 7 of the next tile, into the other buffer, while this one is used
            fa_load_tile<HS>(Ks + ((j + 1 - j0) % 2) * FA_TILE * ld, k, QKV, (j + 1) * FA_TILE);
            fa_load_tile<HS>(Vs + ((j + 1 - j0) % 2) * FA_TILE * ld, v, QKV, (j + 1) * FA_TILE);
            tc_cp_async_commit();
            tc_cp_async_wait<1>(); // all but that newest group have landed: Q_i, K_j, V_j
        } else {
            tc_cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of K_j, V_j (and Q_i) are visible to every warp
        // line 8: S_ij = scale Q_i K_j^T (this warp's 16 rows); on the diagonal tile -inf where key >
        // query, and [SEG] -inf where the key is before the first key of the query's example
        float S[FA_TILE / 8][4];
        fa_mma_ABt<HS>(S, Qs + 16 * warp * ld, Kj);
        #pragma unroll
        for (int n = 0; n < FA_TILE / 8; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = 16 * warp + g + 8 * (i / 2), col = 8 * n + 2 * t + (i % 2);
                int masked = (j == qt && col > row) || (SEG && j * FA_TILE + col < lo[i / 2]);
                S[n][i] = masked ? -INFINITY : S[n][i] * scale;
            }
        // line 9: m_new = max(m, rowmax S); P~ = exp(S - m_new); l = exp(m - m_new) l + rowsum P~.
        // Causal, m_new is finite: every row sees key 0 in tile 0, and its own key on the diagonal.
        // [SEG] a row whose example starts in a later tile sees no key yet: m_new = -inf, and the
        // exponents use 0 instead (P~ = 0; l and O stay 0 until its first key).
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            float mx = m[r];
            #pragma unroll
            for (int n = 0; n < FA_TILE / 8; n++) mx = fmaxf(mx, fmaxf(S[n][2 * r], S[n][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); // the 4 lanes of a row: t = 0..3
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mexp = SEG && mx == -INFINITY ? 0.0f : mx;
            float corr = expf(m[r] - mexp), sum = 0.0f; // corr = 0 on the first tile (m = -inf)
            #pragma unroll
            for (int n = 0; n < FA_TILE / 8; n++)
                #pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    S[n][e] = expf(S[n][e] - mexp); // masked: exp(-inf) = 0
                    sum += S[n][e];
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[r] = corr * l[r] + sum;
            m[r] = mx;
            #pragma unroll
            for (int n = 0; n < HS / 8; n++) { O[n][2 * r] *= corr; O[n][2 * r + 1] *= corr; }
        }
        // line 10: O_i = diag(exp(m_old - m_new)) O_i + P~_ij V_j (the rescale is just above)
        fa_mma_PV<HS>(O, S, Vj);
        __syncthreads(); // every warp is done with K_j, V_j before the next prefetch overwrites them
    }
    // lines 12, 14: out_i = O_i / l_i, rounded once; lines 13, 15: L_i = m_i + log(l_i)
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + 16 * warp + g + 8 * r;
        floatX* orow = out + ((int64_t)b * T + i) * C + h * HS;
        #pragma unroll
        for (int n = 0; n < HS / 8; n++) fa_store2(orow + 8 * n + 2 * t, O[n][2 * r] / l[r], O[n][2 * r + 1] / l[r]);
        if (t == 0) lse[(int64_t)bh * T + i] = m[r] + logf(l[r]);
    }
}

// Alg. 2 lines 5-19 without line 15, transposed so that the block's own rows are the M side: block
// (b*NKV + kh, key tile, part p) owns keys [k0, k0 + FA_TILE) of kv head kh and walks, for each query
// head of its part of the group in order, the query tiles (BC = FA_DKDV_BC rows each) from k0 on: one
// pipeline of nh * (T/BC - k0/BC) steps, heads outer. The group is heads kh*rep .. kh*rep + rep - 1
// (rep = NH / NKV); with nsplit = gridDim.z parts (attention_dkdv_nsplit) part p is its heads
// p*rep/nsplit .. (p+1)*rep/nsplit - 1, nh of them (nsplit = 1: the whole group). Each warp computes,
// for its 16 keys, S^T = K_j Q_i^T, P^T, dP^T = V_j dO_i^T and dS^T, then dV_j += P^T dO_i and dK_j
// += dS^T Q_i, all in registers: the part's sum without atomics, in a fixed order.
// nsplit = 1: dqkv (B, T, QKV), the k and v heads [=]; part unused (NULL).
// nsplit > 1: part (nsplit, B, T, 2*NKV*HS) FP32, this part's unscaled dK_j ; dV_j [=] (line 18 is
//             attention_backward_dkdv_sum_kernel's); dqkv untouched.
// dout (B, T, NH*HS), qkv (B, T, QKV), lse, D (B, NH, T).
template <int HS, bool SEG>
__global__ static void __launch_bounds__(FA_THREADS, FA_DKDV_MIN_BLOCKS(HS))
attention_backward_dkdv_tc_kernel(floatX* dqkv, float* part, const floatX* dout, const floatX* qkv, const float* lse,
                                  const float* D, const int* seg, int T, int NH, int NKV) {
    const int ld = HS + FA_PAD, BC = FA_DKDV_BC(HS), QKV = (NH + 2 * NKV) * HS, C = NH * HS;
    int rep = NH / NKV, nsplit = gridDim.z, p = blockIdx.z;
    int b = blockIdx.x / NKV, kh = blockIdx.x % NKV;
    int h0 = kh * rep + p * rep / nsplit, nh = kh * rep + (p + 1) * rep / nsplit - h0; // this part's first query head, its heads
    int kt = blockIdx.y, k0 = kt * FA_TILE, it0 = k0 / BC, nq = T / BC; // the first keys (most queries) first
    const int* sg = SEG ? seg + (int64_t)b * T : NULL; // [SEG] this row's segment table
    // causal: the query tiles from the key tile's own on; [SEG] up to the last that holds a query of
    // an example that reaches the block's last key
    int nit = (SEG ? att_query_tile_end(sg, k0 + FA_TILE - 1, it0, nq, BC) : nq) - it0;
    int steps = nh * nit; // step s: query head h0 + s / nit, query tile it0 + s % nit
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * QKV + h0 * HS;  // (T, HS) of head h0, row stride QKV; head h0+e: + e*HS
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS;
    const floatX* v = k + NKV * HS;
    const floatX* dO = dout + (int64_t)b * T * C + h0 * HS; // (T, HS) of head h0, row stride C; head h0+e: + e*HS
    const float* L0 = lse + ((int64_t)b * NH + h0) * T;    // (T) of head h0; head h0+e: + e*T
    const float* D0 = D + ((int64_t)b * NH + h0) * T;
    extern __shared__ __align__(16) float fa_smem[]; // 16-byte cp.async and ldmatrix rows
    bf16_t* Ks = (bf16_t*)fa_smem;        // (FA_TILE, ld) K_j
    bf16_t* Vs = Ks + FA_TILE * ld;       // (FA_TILE, ld) V_j
    bf16_t* Qs = Vs + FA_TILE * ld;       // 2 x (BC, ld) Q_i, double-buffered
    bf16_t* dOs = Qs + 2 * BC * ld;       // 2 x (BC, ld) dO_i
    float* Ls = (float*)(dOs + 2 * BC * ld); // 2 x (BC) L_i
    float* Ds = Ls + 2 * BC;                 // 2 x (BC) D_i
    int* Sgs = (int*)(Ds + 2 * BC);          // [SEG] 2 x (BC) seg_i: the first key of each query's example

    // line 6: load K_j, V_j; line 9 of the first query tile (on the diagonal): Q_i, dO_i, L_i, D_i
    fa_load_tile<HS>(Ks, k, QKV, k0);
    fa_load_tile<HS>(Vs, v, QKV, k0);
    fa_load_tile<HS, BC>(Qs, q, QKV, k0);
    fa_load_tile<HS, BC>(dOs, dO, C, k0);
    fa_load_vec<BC>(Ls, L0 + k0);
    fa_load_vec<BC>(Ds, D0 + k0);
    if (SEG) fa_load_vec<BC>(Sgs, sg + k0);
    tc_cp_async_commit();
    // line 7: dK_j = 0, dV_j = 0 (this warp's 16 keys; this lane's rows g and g + 8 of them)
    float dK[HS / 8][4], dV[HS / 8][4];
    #pragma unroll
    for (int n = 0; n < HS / 8; n++)
        #pragma unroll
        for (int i = 0; i < 4; i++) dK[n][i] = dV[n][i] = 0.0f;
    for (int s = 0; s < steps; s++) { // line 8 per query head; causal: query tiles before the key tile are skipped whole
        int it = it0 + s % nit, buf = s % 2, nbuf = 1 - buf;
        bf16_t* Qi = Qs + buf * BC * ld;
        bf16_t* dOi = dOs + buf * BC * ld;
        const float* Li = Ls + buf * BC;
        const float* Di = Ds + buf * BC;
        const int* Sgi = Sgs + buf * BC;
        if (s + 1 < steps) { // line 9 of the next step's tile, into the other buffer, while this one is used
            int e = (s + 1) / nit, n0 = (it0 + (s + 1) % nit) * BC; // its head h0 + e, its first query row
            fa_load_tile<HS, BC>(Qs + nbuf * BC * ld, q + e * HS, QKV, n0);
            fa_load_tile<HS, BC>(dOs + nbuf * BC * ld, dO + e * HS, C, n0);
            fa_load_vec<BC>(Ls + nbuf * BC, L0 + (int64_t)e * T + n0);
            fa_load_vec<BC>(Ds + nbuf * BC, D0 + (int64_t)e * T + n0);
            if (SEG) fa_load_vec<BC>(Sgs + nbuf * BC, sg + n0);
            tc_cp_async_commit();
            tc_cp_async_wait<1>(); // all but that newest group have landed
        } else {
            tc_cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of Q_i, dO_i, L_i, D_i (and K_j, V_j) are visible
        // line 10: S^T = scale K_j Q_i^T; line 11: P^T = exp(S^T - L_i), 0 where query < key (the tiles
        // that overlap the block's keys) and [SEG] where the query's example starts after the key
        float P[BC / 8][4], dS[BC / 8][4];
        fa_mma_ABt<HS, BC>(P, Ks + 16 * warp * ld, Qi);
        // line 13: dP^T = V_j dO_i^T
        fa_mma_ABt<HS, BC>(dS, Vs + 16 * warp * ld, dOi);
        // line 14: dS^T = P^T o (dP^T - D_i)   (columns are queries: L and D are indexed by column)
        int diag = it * BC < k0 + FA_TILE;
        #pragma unroll
        for (int n = 0; n < BC / 8; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int key = k0 + 16 * warp + g + 8 * (i / 2), col = 8 * n + 2 * t + (i % 2);
                int masked = (diag && it * BC + col < key) || (SEG && Sgi[col] > key);
                float p = masked ? 0.0f : expf(P[n][i] * scale - Li[col]);
                P[n][i] = p;
                dS[n][i] = p * (dS[n][i] - Di[col]);
            }
        // line 12: dV_j += P^T dO_i;  line 16: dK_j += dS^T Q_i (times scale at line 18)
        fa_mma_PV<HS, BC>(dV, P, dOi);
        fa_mma_PV<HS, BC>(dK, dS, Qi);
        __syncthreads(); // every warp is done with Q_i, dO_i, L_i, D_i before the next prefetch overwrites them
    }
    if (nsplit == 1) { // line 18: write dK_j = scale * dK_j and dV_j, rounded once
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            int j = k0 + 16 * warp + g + 8 * r;
            floatX* dk = dqkv + ((int64_t)b * T + j) * QKV + (NH + kh) * HS; // (HS) row j of dK, kv head kh
            #pragma unroll
            for (int n = 0; n < HS / 8; n++) {
                fa_store2(dk + 8 * n + 2 * t, dK[n][2 * r] * scale, dK[n][2 * r + 1] * scale);
                fa_store2(dk + NKV * HS + 8 * n + 2 * t, dV[n][2 * r], dV[n][2 * r + 1]); // the v heads: NKV*HS later
            }
        }
    } else { // this part's sums, FP32 and unscaled: the sum kernel adds the parts and does line 18
        const int KV2 = 2 * NKV * HS;
        int64_t BT = (int64_t)(gridDim.x / NKV) * T;
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            int j = k0 + 16 * warp + g + 8 * r;
            float* pk = part + ((int64_t)p * BT + (int64_t)b * T + j) * KV2 + kh * HS; // (HS) row j of this part's dK
            #pragma unroll
            for (int n = 0; n < HS / 8; n++) {
                pk[8 * n + 2 * t] = dK[n][2 * r];
                pk[8 * n + 2 * t + 1] = dK[n][2 * r + 1];
                pk[NKV * HS + 8 * n + 2 * t] = dV[n][2 * r]; // dV: NKV*HS later, as in dqkv
                pk[NKV * HS + 8 * n + 2 * t + 1] = dV[n][2 * r + 1];
            }
        }
    }
}

// Alg. 2 line 18 for a split group: dK_j = scale * (part 0 + part 1 + ... + part nsplit-1) and dV_j =
// the same sum of the parts' dV_j, added in that order in FP32 and rounded once. A thread per element.
// part (nsplit, B, T, 2*NKV*HS) FP32; dqkv (B, T, QKV): the k and v heads [=].
__global__ static void __launch_bounds__(ATT_THREADS)
attention_backward_dkdv_sum_kernel(floatX* dqkv, const float* part, int nsplit, int B, int T, int NH, int NKV, int HS) {
    const int KV2 = 2 * NKV * HS, QKV = (NH + 2 * NKV) * HS;
    int64_t n = (int64_t)B * T * KV2, e = (int64_t)blockIdx.x * ATT_THREADS + threadIdx.x; // e: (b*T + j)*KV2 + c
    if (e >= n) return;
    float s = part[e];
    for (int p = 1; p < nsplit; p++) s += part[(int64_t)p * n + e];
    int c = (int)(e % KV2); // c < NKV*HS: dK's columns, then dV's (dqkv's order)
    float scale = 1.0f / sqrtf((float)HS);
    dqkv[(e / KV2) * QKV + NH * HS + c] = rn(c < NKV * HS ? s * scale : s);
}

// Alg. 2 line 15 as its own pass: block (bh, query tile) owns queries [q0, q0 + FA_TILE) and walks
// the key tiles up to its own; each warp, for its 16 queries: S = Q_i K_j^T, P, dP = dO_i V_j^T,
// dS, dQ_i += dS K_j.
// Query head h reads kv head h / (NH / NKV) in place.
// dqkv (B, T, QKV): the q heads [=]; dout (B, T, NH*HS), qkv (B, T, QKV), lse, D (B, NH, T).
template <int HS, bool SEG>
__global__ static void __launch_bounds__(FA_THREADS, FA_DQ_MIN_BLOCKS(HS))
attention_backward_dq_tc_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                                const float* D, const int* seg, int T, int NH, int NKV) {
    const int ld = HS + FA_PAD, QKV = (NH + 2 * NKV) * HS, C = NH * HS;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH, kh = h / (NH / NKV);
    int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * FA_TILE; // the last queries (most keys) first
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = qkv + (int64_t)b * T * QKV + h * HS; // (T, HS), row stride QKV
    const floatX* k = qkv + (int64_t)b * T * QKV + (NH + kh) * HS;
    const floatX* v = k + NKV * HS;
    const floatX* dO = dout + (int64_t)b * T * C + h * HS;  // (T, HS), row stride C
    extern __shared__ __align__(16) float fa_smem[]; // 16-byte cp.async and ldmatrix rows
    bf16_t* Qs = (bf16_t*)fa_smem;        // (FA_TILE, ld) Q_i
    bf16_t* dOs = Qs + FA_TILE * ld;      // (FA_TILE, ld) dO_i
    bf16_t* Ks = dOs + FA_TILE * ld;      // 2 x (FA_TILE, ld) K_j, double-buffered
    bf16_t* Vs = Ks + 2 * FA_TILE * ld;   // 2 x (FA_TILE, ld) V_j
    float* Ls = (float*)(Vs + 2 * FA_TILE * ld); // (FA_TILE) L_i
    float* Ds = Ls + FA_TILE;                    // (FA_TILE) D_i
    // [SEG] lo: the first key of the examples of this lane's rows (g, g + 8); j0: the first key tile
    int lo[2] = {0, 0}, j0 = 0;
    if (SEG) {
        const int* sg = seg + (int64_t)b * T;
        lo[0] = sg[q0 + 16 * warp + g];
        lo[1] = sg[q0 + 16 * warp + g + 8];
        j0 = att_first_key_tile(sg, q0, FA_TILE);
    }

    // line 9 (the query side, once): Q_i, dO_i, L_i, D_i; line 6 of the first key tile: K_j0, V_j0
    fa_load_tile<HS>(Qs, q, QKV, q0);
    fa_load_tile<HS>(dOs, dO, C, q0);
    fa_load_vec(Ls, lse + (int64_t)bh * T + q0);
    fa_load_vec(Ds, D + (int64_t)bh * T + q0);
    fa_load_tile<HS>(Ks, k, QKV, j0 * FA_TILE);
    fa_load_tile<HS>(Vs, v, QKV, j0 * FA_TILE);
    tc_cp_async_commit();
    float dQ[HS / 8][4];
    #pragma unroll
    for (int n = 0; n < HS / 8; n++)
        #pragma unroll
        for (int i = 0; i < 4; i++) dQ[n][i] = 0.0f;
    for (int j = j0; j <= qt; j++) { // causal: key tiles past the query tile are skipped whole
        bf16_t* Kj = Ks + ((j - j0) % 2) * FA_TILE * ld;
        bf16_t* Vj = Vs + ((j - j0) % 2) * FA_TILE * ld;
        if (j < qt) { // line 6 of the next tile, into the other buffer, while this one is used
            fa_load_tile<HS>(Ks + ((j + 1 - j0) % 2) * FA_TILE * ld, k, QKV, (j + 1) * FA_TILE);
            fa_load_tile<HS>(Vs + ((j + 1 - j0) % 2) * FA_TILE * ld, v, QKV, (j + 1) * FA_TILE);
            tc_cp_async_commit();
            tc_cp_async_wait<1>(); // all but that newest group have landed
        } else {
            tc_cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of K_j, V_j (and Q_i, dO_i, L_i, D_i) are visible
        // lines 10, 11: P = exp(scale Q_i K_j^T - L_i), 0 where key > query; line 13: dP = dO_i V_j^T
        float P[FA_TILE / 8][4], dS[FA_TILE / 8][4];
        fa_mma_ABt<HS>(P, Qs + 16 * warp * ld, Kj);
        fa_mma_ABt<HS>(dS, dOs + 16 * warp * ld, Vj);
        // line 14: dS = P o (dP - D_i)   (rows are queries: L and D are indexed by row)
        #pragma unroll
        for (int n = 0; n < FA_TILE / 8; n++)
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = 16 * warp + g + 8 * (i / 2), col = 8 * n + 2 * t + (i % 2);
                int masked = (j == qt && col > row) || (SEG && j * FA_TILE + col < lo[i / 2]);
                float p = masked ? 0.0f : expf(P[n][i] * scale - Ls[row]);
                dS[n][i] = p * (dS[n][i] - Ds[row]);
            }
        // line 15: dQ_i += dS K_j (times scale at the end)
        fa_mma_PV<HS>(dQ, dS, Kj);
        __syncthreads(); // every warp is done with K_j, V_j before the next prefetch overwrites them
    }
    // write dQ_i = scale * dQ_i, rounded once
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        int i = q0 + 16 * warp + g + 8 * r;
        floatX* dq = dqkv + ((int64_t)b * T + i) * QKV + h * HS;
        #pragma unroll
        for (int n = 0; n < HS / 8; n++) fa_store2(dq + 8 * n + 2 * t, dQ[n][2 * r] * scale, dQ[n][2 * r + 1] * scale);
    }
}
#endif // !ENABLE_FP32

#ifndef ENABLE_FP32
// Allow the tensor-core kernels of one head size and mask (SEG: with a segment table) the dynamic
// shared memory of the HS = 128 ones.
template <int HS, bool SEG> static void fa_set_smem(void) {
    int tc_fwd = (int)fa_smem_bytes(128, 0), tc_bwd = (int)fa_smem_bytes(128, 1);
    cudaCheck(cudaFuncSetAttribute(attention_forward_tc_kernel<HS, SEG>, cudaFuncAttributeMaxDynamicSharedMemorySize, tc_fwd));
    cudaCheck(cudaFuncSetAttribute(attention_backward_dkdv_tc_kernel<HS, SEG>, cudaFuncAttributeMaxDynamicSharedMemorySize, tc_bwd));
    cudaCheck(cudaFuncSetAttribute(attention_backward_dq_tc_kernel<HS, SEG>, cudaFuncAttributeMaxDynamicSharedMemorySize, tc_bwd));
}
#endif

// Check the heads; once per process, allow the kernels the dynamic shared memory the largest head
// size needs (over the default 48 KiB), after checking that this GPU has it.
static void attention_cuda_setup(int NH, int NKV, int HS) {
    if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || HS <= 0 || HS > ATT_MAX_HS)
        die(1, "attention: NH = %d, NKV = %d, head size %d: NKV must divide NH and the head size be at most %d "
               "(internal error)", NH, NKV, HS, ATT_MAX_HS);
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
#ifndef ENABLE_FP32
    // the tensor-core kernels, causal and with a segment table: ~85 KiB (forward) and ~103 KiB
    // (backward) at HS = 128
    fa_set_smem<64, false>();
    fa_set_smem<128, false>();
    fa_set_smem<64, true>();
    fa_set_smem<128, true>();
#endif
    done = 1;
}

// Which kernels a shape takes: the tensor-core ones (1) or the scalar ones (0). The tensor-core
// kernels need BF16 storage, HS = 64 or 128, T a multiple of FA_TILE, and 16-byte aligned rows
// (cp.async copies 16 bytes).
static int attention_uses_tc(int T, int HS, const void* p0, const void* p1, const void* p2, const void* p3) {
#ifdef ENABLE_FP32
    (void)T; (void)HS; (void)p0; (void)p1; (void)p2; (void)p3;
    return 0;
#else
    uintptr_t any = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2 | (uintptr_t)p3;
    return att_tc_shape(T, HS) && any % 16 == 0;
#endif
}

// Tiles of `rows` rows over T, as the grid's y dimension (at most 65535).
static unsigned att_tiles(int T, int rows) {
    int64_t n = ceil_div(T, rows);
    if (n > 65535) die(1, "attention: T = %d needs %lld tiles of %d rows, over CUDA's 65535 (grid y)", T, (long long)n, rows);
    return (unsigned)n;
}

#if defined(ZT_CUDNN) && !defined(ENABLE_FP32)
// -attn auto: a shape cuDNN refuses takes our kernels; said once per process and pass.
static int attention_cudnn_refused(const char* pass, const char* why, int B, int T) {
    if (g_attn_cudnn_given)
        die_user("-attn cudnn: cuDNN refuses the attention %s at B %d, T %d: %s. HINT: -attn auto (our kernels where cuDNN refuses) or -attn own",
                 pass, B, T, why);
    static int said[2] = {0, 0};
    int k = pass[0] == 'b';
    if (!said[k]) printf0("note: -attn auto: cuDNN refuses the attention %s at B %d, T %d (%s): our kernels run it\n", pass, B, T, why);
    said[k] = 1;
    return 0;
}
#endif

static void attention_forward_cuda(floatX* out, float* lse, const floatX* qkv, const int* seg, int B, int T, int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_setup(NH, NKV, HS);
#if defined(ZT_CUDNN) && !defined(ENABLE_FP32)
    if (g_attn_cudnn) { // -attn cudnn (or auto that chose it): cuDNN's fused SDPA
        char why[512];
        const char* no = attention_cudnn_refusal(seg, HS);
        if (!no && attention_cudnn_forward(out, lse, qkv, B, T, NH, NKV, HS, why, sizeof(why)) == 0) return;
        attention_cudnn_refused("forward", no ? no : why, B, T);
    }
#endif
#ifndef ENABLE_FP32
    if (attention_uses_tc(T, HS, out, lse, qkv, seg)) {
        void (*fwd_tc)(floatX*, float*, const floatX*, const int*, int, int, int) =
            HS == 64 ? (seg ? attention_forward_tc_kernel<64, true> : attention_forward_tc_kernel<64, false>)
                     : (seg ? attention_forward_tc_kernel<128, true> : attention_forward_tc_kernel<128, false>);
        dim3 tc_grid((unsigned)(B * NH), att_tiles(T, FA_TILE));
        fwd_tc<<<tc_grid, FA_THREADS, fa_smem_bytes(HS, 0), g_stream>>>(out, lse, qkv, seg, T, NH, NKV);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    dim3 grid((unsigned)(B * NH), att_tiles(T, ATT_FWD_BR));
    size_t smem = att_fwd_smem_floats(HS) * sizeof(float);
    attention_forward_kernel<<<grid, ATT_THREADS, smem, g_stream>>>(out, lse, qkv, seg, T, NH, NKV, HS);
    cudaCheck(cudaGetLastError());
}

// Scratch in g_work (ops_workspace_floats counts attention_workspace_floats): D (B, NH, T) FP32,
// then the dK/dV parts' sums when the group is split. The dQ kernels run a block per (b, query head),
// the dK/dV kernels a block per (b, kv head): B*NKV blocks per key tile, times nsplit on tensor cores.
// nsplit: the tensor-core dK/dV kernel's parts of a group (attention_backward_cuda passes
// attention_dkdv_nsplit; the tests force others); the scalar kernels never split.
static void attention_backward_cuda_nsplit(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                           const float* lse, const int* seg, int B, int T, int NH, int NKV, int HS, int nsplit) {
    if (B <= 0 || T <= 0) return;
    attention_cuda_setup(NH, NKV, HS);
#if defined(ZT_CUDNN) && !defined(ENABLE_FP32)
    if (g_attn_cudnn) { // the lse read is cuDNN's stats or ours: the same definition (attention_cudnn.cuh)
        char why[512];
        const char* no = attention_cudnn_refusal(seg, HS);
        if (!no && attention_cudnn_backward(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, why, sizeof(why)) == 0) return;
        attention_cudnn_refused("backward", no ? no : why, B, T);
    }
#endif
    if (nsplit < 1 || nsplit > NH / NKV)
        die(1, "attention backward: %d parts of a group of %d query heads (internal error)", nsplit, NH / NKV);
    size_t rows = (size_t)B * NH * T, part_floats = att_dkdv_part_floats(B, T, NKV, HS, nsplit);
    size_t need = part_floats ? (size_t)round_up((int64_t)rows, ATT_PART_ALIGN) + part_floats : rows;
    if (need > g_work_floats)
        die(1, "attention backward: workspace too small (%zu floats, needs %zu) (internal error)", g_work_floats, need);
    float* D = g_work;
    attention_backward_d_kernel<<<(unsigned)ceil_div((int64_t)rows, ATT_THREADS / 32), ATT_THREADS, 0, g_stream>>>(D, dout, out, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
#ifndef ENABLE_FP32
    if (attention_uses_tc(T, HS, dqkv, dout, qkv, lse) && (uintptr_t)D % 16 == 0 && (uintptr_t)seg % 16 == 0) {
        void (*dkdv_tc)(floatX*, float*, const floatX*, const floatX*, const float*, const float*, const int*, int, int, int) =
            HS == 64 ? (seg ? attention_backward_dkdv_tc_kernel<64, true> : attention_backward_dkdv_tc_kernel<64, false>)
                     : (seg ? attention_backward_dkdv_tc_kernel<128, true> : attention_backward_dkdv_tc_kernel<128, false>);
        void (*dq_tc)(floatX*, const floatX*, const floatX*, const float*, const float*, const int*, int, int, int) =
            HS == 64 ? (seg ? attention_backward_dq_tc_kernel<64, true> : attention_backward_dq_tc_kernel<64, false>)
                     : (seg ? attention_backward_dq_tc_kernel<128, true> : attention_backward_dq_tc_kernel<128, false>);
        float* part = part_floats ? g_work + round_up((int64_t)rows, ATT_PART_ALIGN) : NULL; // (nsplit, B, T, 2*NKV*HS)
        dim3 kv_grid((unsigned)(B * NKV), att_tiles(T, FA_TILE), (unsigned)nsplit), q_grid((unsigned)(B * NH), att_tiles(T, FA_TILE));
        dkdv_tc<<<kv_grid, FA_THREADS, fa_smem_dkdv_bytes(HS), g_stream>>>(dqkv, part, dout, qkv, lse, D, seg, T, NH, NKV);
        cudaCheck(cudaGetLastError());
        if (part) { // line 18 of a split group: the parts added in order, rounded once into dqkv
            int64_t n = (int64_t)B * T * 2 * NKV * HS;
            attention_backward_dkdv_sum_kernel<<<(unsigned)ceil_div(n, ATT_THREADS), ATT_THREADS, 0, g_stream>>>(dqkv, part, nsplit, B, T, NH, NKV, HS);
            cudaCheck(cudaGetLastError());
        }
        dq_tc<<<q_grid, FA_THREADS, fa_smem_bytes(HS, 1), g_stream>>>(dqkv, dout, qkv, lse, D, seg, T, NH, NKV);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    dim3 kv_grid((unsigned)(B * NKV), att_tiles(T, ATT_BWD_OWN)), q_grid((unsigned)(B * NH), att_tiles(T, ATT_BWD_OWN));
    size_t smem = att_bwd_smem_floats(HS) * sizeof(float);
    attention_backward_dkdv_kernel<<<kv_grid, ATT_THREADS, smem, g_stream>>>(dqkv, dout, qkv, lse, D, seg, T, NH, NKV, HS);
    cudaCheck(cudaGetLastError());
    attention_backward_dq_kernel<<<q_grid, ATT_THREADS, smem, g_stream>>>(dqkv, dout, qkv, lse, D, seg, T, NH, NKV, HS);
    cudaCheck(cudaGetLastError());
}
static void attention_backward_cuda(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                    const float* lse, const int* seg, int B, int T, int NH, int NKV, int HS) {
    attention_backward_cuda_nsplit(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, HS, attention_dkdv_nsplit(B, T, NH, NKV, HS));
}
#endif

// out (B, T, NH*HD) [=], lse (B, NH, T) [=] from qkv (B, T, (NH + 2 NKV) HD); query head h reads kv
// head h / (NH / NKV) (transformers' repeat_kv, without the copies). seg (B, T) or NULL: query i sees
// keys seg[b*T + i] .. i (NULL: 0 .. i); the key tiles start at seg[b*T + i].
static void op_attention_forward(floatX* out, float* lse, const floatX* qkv, const int* seg, int B, int T, int NH, int NKV, int HD) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { attention_forward_cuda(out, lse, qkv, seg, B, T, NH, NKV, HD); return; }
#endif
    int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, ATT = (int64_t)NH * HD;
    int rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
#pragma omp parallel
    {
        float q[ATT_MAX_HS], o[ATT_MAX_HS], s[ATT_BK]; // thread-local row scratch
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    const floatX* qrow = qkv + ((int64_t)b * T + i) * QKV + h * HD;
                    int64_t koff = (int64_t)NH * HD + (int64_t)(h / rep) * HD; // k head of h; v = k + NKV*HD
                    for (int d = 0; d < HD; d++) { q[d] = ld(qrow[d]); o[d] = 0.0f; }
                    float m = -INFINITY, l = 0.0f;
                    int jlo = seg ? seg[b * T + i] : 0; // the first key of i's example (0: causal over the row)
                    for (int j0 = jlo; j0 <= i; j0 += ATT_BK) { // tiles from jlo: an example computes as alone
                        int jn = i + 1 - j0 < ATT_BK ? i + 1 - j0 : ATT_BK; // causal: keys j <= i
                        float mt = -INFINITY;
                        for (int jj = 0; jj < jn; jj++) {
                            const floatX* krow = qkv + ((int64_t)b * T + j0 + jj) * QKV + koff;
                            float dot = 0.0f;
                            for (int d = 0; d < HD; d++) dot += q[d] * ld(krow[d]);
                            s[jj] = dot * scale;
                            mt = fmaxf(mt, s[jj]);
                        }
                        float mnew = fmaxf(m, mt);
                        float corr = expf(m - mnew); // 0 on the first tile (m = -inf)
                        l *= corr;
                        for (int d = 0; d < HD; d++) o[d] *= corr;
                        for (int jj = 0; jj < jn; jj++) {
                            float p = expf(s[jj] - mnew);
                            l += p;
                            const floatX* vrow = qkv + ((int64_t)b * T + j0 + jj) * QKV + koff + (int64_t)NKV * HD;
                            for (int d = 0; d < HD; d++) o[d] += p * ld(vrow[d]);
                        }
                        m = mnew;
                    }
                    floatX* orow = out + ((int64_t)b * T + i) * ATT + h * HD;
                    for (int d = 0; d < HD; d++) orow[d] = rn(o[d] / l);
                    lse[((int64_t)b * NH + h) * T + i] = m + logf(l);
                }
    }
}

// dqkv (B, T, (NH + 2 NKV) HD) [=] from dout (B, T, NH*HD), qkv, out and lse. dK/dV of kv head g sum
// over its query heads h = g*rep .. g*rep + rep - 1 in that order, each over queries i >= j in order
// (with seg: the queries of j's example, i from j to the example's end; dq over keys seg[b*T + i] .. i).
static void op_attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                  const float* lse, const int* seg, int B, int T, int NH, int NKV, int HD) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { attention_backward_cuda(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, HD); return; }
#endif
    int64_t QKV = (int64_t)(NH + 2 * NKV) * HD, ATT = (int64_t)NH * HD, VOFF = (int64_t)NKV * HD;
    int rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)HD);
    // D (B, NH, T) = rowsum(dout * out) lives in the workspace
    float* D = g_work;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const floatX* dorow = dout + ((int64_t)b * T + i) * ATT + h * HD;
                const floatX* orow = out + ((int64_t)b * T + i) * ATT + h * HD;
                float acc = 0.0f;
                for (int d = 0; d < HD; d++) acc += ld(dorow[d]) * ld(orow[d]);
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
                    const floatX* qrow = qkv + ((int64_t)b * T + i) * QKV + h * HD;
                    const floatX* dorow = dout + ((int64_t)b * T + i) * ATT + h * HD;
                    int64_t koff = (int64_t)NH * HD + (int64_t)(h / rep) * HD;
                    for (int d = 0; d < HD; d++) { a[d] = ld(qrow[d]); g[d] = ld(dorow[d]); acc1[d] = 0.0f; }
                    float li = lse[((int64_t)b * NH + h) * T + i], Di = D[((int64_t)b * NH + h) * T + i];
                    for (int j = seg ? seg[b * T + i] : 0; j <= i; j++) { // keys of i's example, j <= i
                        const floatX* krow = qkv + ((int64_t)b * T + j) * QKV + koff;
                        const floatX* vrow = krow + VOFF;
                        float sdot = 0.0f, pdot = 0.0f;
                        for (int d = 0; d < HD; d++) { sdot += a[d] * ld(krow[d]); pdot += g[d] * ld(vrow[d]); }
                        float p = expf(sdot * scale - li);
                        float ds = p * (pdot - Di);
                        for (int d = 0; d < HD; d++) acc1[d] += ds * ld(krow[d]);
                    }
                    floatX* dq = dqkv + ((int64_t)b * T + i) * QKV + h * HD;
                    for (int d = 0; d < HD; d++) dq[d] = rn(acc1[d] * scale);
                }
        // pass 2: dk_j = scale * sum_{h in group} sum_{i >= j} dS_ij q_i,  dv_j = sum_h sum_{i >= j} P_ij dout_i
#pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < NKV; kh++)
                for (int j = 0; j < T; j++) {
                    const floatX* krow = qkv + ((int64_t)b * T + j) * QKV + (int64_t)NH * HD + (int64_t)kh * HD;
                    const floatX* vrow = krow + VOFF;
                    for (int d = 0; d < HD; d++) { a[d] = ld(krow[d]); g[d] = ld(vrow[d]); acc1[d] = 0.0f; acc2[d] = 0.0f; }
                    int iend = T; // one past the last query that sees key j: the end of j's example
                    if (seg) for (iend = j + 1; iend < T && seg[b * T + iend] <= j; iend++) {}
                    for (int h = kh * rep; h < (kh + 1) * rep; h++)
                        for (int i = j; i < iend; i++) {
                            const floatX* qrow = qkv + ((int64_t)b * T + i) * QKV + h * HD;
                            const floatX* dorow = dout + ((int64_t)b * T + i) * ATT + h * HD;
                            float li = lse[((int64_t)b * NH + h) * T + i], Di = D[((int64_t)b * NH + h) * T + i];
                            float sdot = 0.0f, pdot = 0.0f;
                            for (int d = 0; d < HD; d++) { sdot += ld(qrow[d]) * a[d]; pdot += ld(dorow[d]) * g[d]; }
                            float p = expf(sdot * scale - li);
                            float ds = p * (pdot - Di);
                            for (int d = 0; d < HD; d++) { acc1[d] += ds * ld(qrow[d]); acc2[d] += p * ld(dorow[d]); }
                        }
                    floatX* dk = dqkv + ((int64_t)b * T + j) * QKV + (int64_t)NH * HD + (int64_t)kh * HD;
                    floatX* dv = dk + VOFF;
                    for (int d = 0; d < HD; d++) { dk[d] = rn(acc1[d] * scale); dv[d] = rn(acc2[d]); }
                }
    }
}

#endif // ZT_OPS_ATTENTION_CUH
