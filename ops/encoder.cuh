// ops/encoder.cuh — token + position embedding, forward and backward.
//
//   forward:  out (B, T, C) = wte[tokens[b, t]] + wpe[p]             [floatX, =]
//   backward: dwte (Vp, C) += scatter-add of dout by token           [FP32, +=]
//             dwpe (maxT, C) += scatter-add of dout by position p    [FP32, +=]
// The position p of token (b, t) is t (seg == NULL: one example per row; dwpe[t] = the sum over b of
// dout[b, t], b in order), or with the segment table seg (B, T) of packed examples t - seg[b*T + t],
// its place in its example: positions then repeat irregularly, and dwpe is summed exactly as dwte
// with the position as the key (below), a fixed order on both devices.
// wpe == NULL (and dwpe == NULL): no learned positions (the Llama family, whose positions are RoPE's
// rotation inside attention): out = wte[tokens[b, t]], and the backward has no dwpe part.
// The backward needs no parameter values, which is why under ZeRO-3 the io block's parameters
// can be released before it runs while its gradient buffer stays alive (see zero.h).
//
// The dwte order of summation (both devices, the same bits): positions are bucketed by token with a
// stable sort, so the sorted array lists each token's positions in increasing order. That array is
// cut into chunks of ENC_CHUNK positions. The piece of a token's run that lies in one chunk is summed
// in order, starting from 0; then the token's row adds its pieces in chunk order:
//   dw[v] = ((dw[v] + piece_0) + piece_1) + ...       (a run inside one chunk: dw[v] + its sum)
// A token that fills most positions is then ~N / ENC_CHUNK independent piece sums plus one short
// sum of pieces, not N sequential row additions (on the KJV one token had 1,375 rows of a batch).
//
// CPU: a stable counting sort, then tokens in parallel; each token walks its run once per block of
// 64 columns, cutting pieces at multiples of ENC_CHUNK. No result depends on the thread count.
//
// CUDA: the same algorithm, and the same bits as the CPU (every output element is the same
// sequence of FP32 additions onto the same starting value; no FMA is possible in a sum):
//   forward  one thread per PACK_X elements of a row (16-byte accesses when C % PACK_X == 0 and the
//            pointers are aligned, else per element);
//   dwpe     one thread per (t, pack of columns), adding b = 0..B-1 in order; with a segment table,
//            dwte's scatter below with each row's position as the key (the CPU's order again);
//   dwte     CUB's radix sort of the pairs (token, position), which is stable (the CPU's array);
//            then (1) one block per chunk: for each run piece in the chunk, the block sums its rows
//            (a thread per PACK_X columns); a run wholly inside the chunk is added to dwte at once
//            (its only writer), the piece of a run that crosses the chunk's edge goes to a slot of
//            g_work (slot 0: the piece that starts the chunk, slot 1: the one that ends it);
//            (2) one block per chunk where a crossing run starts adds that run's pieces to its dwte
//            row in chunk order. No atomics; every sum has a fixed order.
//
// defines: op_encoder_forward, op_encoder_backward, encoder_workspace_ints, ENC_CHUNK
//
// May call: device.cuh, packed.cuh and CUB (nvcc build).
#ifndef ZT_OPS_ENCODER_CUH
#define ZT_OPS_ENCODER_CUH

#include "../device.cuh" // defines: floatX, ld, rn, g_work
#include "packed.cuh"    // defines: PACK_X, Packed128, load128, store128, aligned16

#ifdef __CUDACC__
#include <cub/device/device_radix_sort.cuh> // cub::DeviceRadixSort (ships with the CUDA toolkit)
#endif

#define ENC_CHUNK 64 // dwte: positions of the sorted array per chunk (one CUDA block each)

// Scratch ints the backward needs in g_work (a closed form of the shapes: ops_workspace_floats
// takes the largest op's need; the device does not enter into it, so -plan is the same for both).
//   CPU:  bucket starts (V+1) and positions (N = B*T); dwpe with a segment table: each row's position
//         (N), then bucket starts (T+1) and rows (N).
//   CUDA: with a segment table, each row's position (N, +64 to keep the next start aligned) first
//         (dwpe sorts by it as dwte sorts by token); then the run pieces that cross a chunk's edge, 2 per chunk, (2 * ceil(N / ENC_CHUNK), C) FP32;
//         positions 0..N-1, sorted tokens, sorted positions (N each, each start 256-byte aligned:
//         +64 ints), then CUB's radix-sort temp storage. CUB (onesweep, CUDA 12/13) asks for two
//         N-element alternate buffers (2N), a lookback table of 256 ints per tile of >= 6528 items
//         (< N/4 with a large margin), histograms and counters of a few KiB plus 256-byte
//         alignment of each part (inside the 65536-int margin). encoder_backward_cuda asks CUB
//         for the exact number every call and stops with a message if it does not fit.
static inline size_t encoder_workspace_ints(int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    size_t cpu = (size_t)V + 1 + N, cpu_pos = 2 * N + (size_t)T + 1;
    if (cpu_pos > cpu) cpu = cpu_pos;
    size_t pieces = (size_t)round_up(2 * (int64_t)ceil_div((int64_t)N, ENC_CHUNK) * C, 64);
    size_t cuda = (N + 64) + pieces + 3 * (N + 64) + (2 * N + N / 4 + 65536);
    return cpu > cuda ? cpu : cuda;
}

#ifdef __CUDACC__
// ---- CUDA kernels

// out[bt, c0..c0+PACK_X) = rn(wte[tokens[bt], c] + wpe[t, c]), one thread per pack of a row (vec:
// one 16-byte access each; else per element, the row's last pack possibly short).
__global__ static void encoder_forward_kernel(floatX* out, const int* tokens, const int* seg, const floatX* wte,
                                              const floatX* wpe, int64_t N, int T, int C, int vec) {
    int64_t packs_per_row = ceil_div(C, PACK_X);
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * packs_per_row) return;
    int64_t bt = idx / packs_per_row;
    int c0 = (int)(idx % packs_per_row) * PACK_X;
    int t = (int)(bt % T) - (seg ? seg[bt] : 0); // the position: t within the token's example
    floatX* o = out + bt * C + c0;
    const floatX* we = wte + (int64_t)tokens[bt] * C + c0;
    if (!wpe) { // no positions (the Llama family): a copy of the token's row
        if (vec) { store128(o, load128(we)); return; }
        for (int k = 0; k < PACK_X && c0 + k < C; k++) o[k] = we[k];
        return;
    }
    const floatX* pe = wpe + (int64_t)t * C + c0;
    if (vec) {
        Packed128<floatX> a = load128(we), b = load128(pe), r;
        for (int k = 0; k < PACK_X; k++) r[k] = rn(__fadd_rn(ld(a[k]), ld(b[k])));
        store128(o, r);
        return;
    }
    for (int k = 0; k < PACK_X && c0 + k < C; k++) o[k] = rn(__fadd_rn(ld(we[k]), ld(pe[k])));
}

// dwpe[t, c] += dout[b, t, c] for b = 0..B-1 in order, one thread per (t, pack of columns).
__global__ static void encoder_backward_dwpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C, int vec) {
    int64_t packs_per_row = ceil_div(C, PACK_X);
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * packs_per_row) return;
    int64_t t = idx / packs_per_row;
    int c0 = (int)(idx % packs_per_row) * PACK_X;
    int n = C - c0 < PACK_X ? C - c0 : PACK_X;
    float acc[PACK_X];
    float* dp = dwpe + t * C + c0;
    for (int k = 0; k < PACK_X; k++) if (k < n) acc[k] = dp[k];
    for (int b = 0; b < B; b++) {
        const floatX* d = dout + ((int64_t)b * T + t) * C + c0;
        if (vec) {
            Packed128<floatX> x = load128(d);
            for (int k = 0; k < PACK_X; k++) acc[k] = __fadd_rn(acc[k], ld(x[k]));
        } else {
            for (int k = 0; k < PACK_X; k++) if (k < n) acc[k] = __fadd_rn(acc[k], ld(d[k]));
        }
    }
    for (int k = 0; k < PACK_X; k++) if (k < n) dp[k] = acc[k];
}

// pos[i] = i: the values the sort carries along with the tokens.
__global__ static void encoder_iota_kernel(int* pos, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) pos[i] = i;
}

// acc[0..W) = sum over sorted indices k in [lo, hi) of dout[pos[k], c0..c0+W), in k order from 0.
// W = PACK_X with vec (one 16-byte load per row, four rows loaded before they are added, in order:
// four loads in flight per thread), else 1.
__device__ static inline void enc_piece_sum(float* acc, const floatX* dout, const int* pos, int lo, int hi,
                                            int c0, int C, int vec) {
    int W = vec ? PACK_X : 1;
    for (int j = 0; j < PACK_X; j++) if (j < W) acc[j] = 0.0f;
    int k = lo;
    if (vec)
        for (; k + 4 <= hi; k += 4) {
            Packed128<floatX> x[4];
            for (int u = 0; u < 4; u++) x[u] = load128(dout + (int64_t)pos[k + u] * C + c0);
            for (int u = 0; u < 4; u++)
                for (int j = 0; j < PACK_X; j++) acc[j] = __fadd_rn(acc[j], ld(x[u][j]));
        }
    for (; k < hi; k++) {
        const floatX* d = dout + (int64_t)pos[k] * C + c0;
        if (vec) {
            Packed128<floatX> x = load128(d);
            for (int j = 0; j < PACK_X; j++) acc[j] = __fadd_rn(acc[j], ld(x[j]));
        } else {
            acc[0] = __fadd_rn(acc[0], ld(d[0]));
        }
    }
}

// Step (1), block g = chunk [g*ENC_CHUNK, min((g+1)*ENC_CHUNK, N)) of the sorted array, a thread per
// W columns. pieces (2 * nchunks, C) FP32: row 2g is the piece that starts the chunk, row 2g+1 the
// piece that ends it, each written only when its run crosses that edge.
__global__ static void encoder_backward_dwte_chunk_kernel(float* dwte, float* pieces, const floatX* dout,
                                                          const unsigned* key, const int* pos, int N, int C, int vec) {
    int W = vec ? PACK_X : 1;
    int lo = blockIdx.x * ENC_CHUNK, hi = min(lo + ENC_CHUNK, N);
    float acc[PACK_X];
    for (int ps = lo, pe; ps < hi; ps = pe) { // the pieces of the chunk, one run each
        unsigned v = key[ps];
        for (pe = ps + 1; pe < hi && key[pe] == v; pe++) {}
        int before = ps == lo && lo > 0 && key[lo - 1] == v; // the run began in an earlier chunk
        int after = pe == hi && hi < N && key[hi] == v;      // and/or goes on in a later one
        float* dst = before || after ? pieces + (int64_t)(2 * blockIdx.x + (ps == lo ? 0 : 1)) * C : dwte + (int64_t)v * C;
        for (int c0 = threadIdx.x * W; c0 < C; c0 += blockDim.x * W) {
            enc_piece_sum(acc, dout, pos, ps, pe, c0, C, vec);
            if (before || after) { for (int j = 0; j < PACK_X; j++) if (j < W) dst[c0 + j] = acc[j]; }
            else { for (int j = 0; j < PACK_X; j++) if (j < W) dst[c0 + j] = __fadd_rn(dst[c0 + j], acc[j]); } // dw[v] + sum
        }
    }
}

// Step (2), block g: if the chunk's last piece starts a run that crosses into chunk g+1, add that
// run's pieces (slot of chunk g, then slot 0 of each later chunk it reaches) to its dwte row in order.
__global__ static void encoder_backward_dwte_spans_kernel(float* dwte, const float* pieces, const unsigned* key,
                                                          int N, int C) {
    int g = blockIdx.x;
    int lo = g * ENC_CHUNK, hi = min(lo + ENC_CHUNK, N);
    unsigned v = key[hi - 1];
    if (hi == N || key[hi] != v) return;                 // the last run of the chunk ends in it
    int s = hi - 1;
    while (s > lo && key[s - 1] == v) s--;
    if (s == lo && lo > 0 && key[lo - 1] == v) return;   // began in an earlier chunk: that block adds it
    int slot = s == lo ? 0 : 1;
    int last = g + 1;                                    // the chunk where the run ends
    while ((last + 1) * ENC_CHUNK < N && key[(last + 1) * ENC_CHUNK] == v) last++;
    float* dw = dwte + (int64_t)v * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = __fadd_rn(dw[c], pieces[(int64_t)(2 * g + slot) * C + c]);
        for (int h = g + 1; h <= last; h++) acc = __fadd_rn(acc, pieces[(int64_t)(2 * h) * C + c]);
        dw[c] = acc;
    }
}

static void encoder_forward_cuda(floatX* out, const int* tokens, const int* seg, const floatX* wte, const floatX* wpe,
                                 int B, int T, int C) {
    int64_t n = (int64_t)B * T * ceil_div(C, PACK_X);
    if (n <= 0) return;
    int vec = C % PACK_X == 0 && aligned16(out) && aligned16(wte) && (!wpe || aligned16(wpe));
    encoder_forward_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(out, tokens, seg, wte, wpe,
                                                                           (int64_t)B * T, T, C, vec);
    cudaCheck(cudaGetLastError());
}

// key[i] = the position of row i in its example, i % T - seg[i] (dwpe's sort key with a segment table).
__global__ static void encoder_positions_kernel(unsigned* key, const int* seg, int N, int T) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) key[i] = (unsigned)(i % T - seg[i]);
}

// dw (K, C) FP32 [+=]: row key[i] of dw += row i of dout (N, C), keys in [0, K), in the order at the
// top (sorted by key, ENC_CHUNK pieces). Scratch (ints, from base in g_work; see
// encoder_workspace_ints): the crossing pieces (2 * nchunks, C) FP32, then pos_in, key_out, pos_out
// (N each, 64-int aligned), then CUB's temp storage.
static void encoder_scatter_cuda(float* dw, const floatX* dout, const unsigned* keys, int N, int C, int K,
                                 int* base, int vec_x) {
    // sort (key, row) pairs by key; keys are in [0, K), so only the low bits matter
    int end_bit = 1;
    while (end_bit < 32 && ((int64_t)1 << end_bit) < K) end_bit++;
    int nchunks = (int)ceil_div(N, ENC_CHUNK);
    size_t Na = (size_t)round_up(N, 64);
    float* pieces = (float*)base;
    int* pos_in = base + round_up(2 * (int64_t)nchunks * C, 64);
    unsigned* key_out = (unsigned*)(pos_in + Na);
    int* pos_out = (int*)(key_out + Na);
    void* temp = (void*)(pos_out + Na);
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, keys, key_out, pos_in,
                                              pos_out, N, 0, end_bit, g_stream)); // size query only
    size_t need_ints = (size_t)((int*)temp - (int*)g_work) + ceil_div((int64_t)temp_bytes, 4);
    if (need_ints > g_work_floats)
        die(1, "encoder backward: workspace too small (%zu ints, needs %zu: CUB asks %zu bytes for N=%d) "
               "(internal error: enlarge encoder_workspace_ints)", g_work_floats, need_ints, temp_bytes, N);
    encoder_iota_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, g_stream>>>(pos_in, N);
    cudaCheck(cudaGetLastError());
    cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, key_out, pos_in,
                                              pos_out, N, 0, end_bit, g_stream));
    cudaCheck(cudaGetLastError());
    // pieces and dw rows are read in packs when every row of both starts 16-byte aligned
    int vec = vec_x && aligned16(dw) && aligned16(pieces);
    int per_thread = vec ? PACK_X : 1;
    int threads = (int)round_up(ceil_div(C, per_thread), 32);
    if (threads > 256) threads = 256;
    encoder_backward_dwte_chunk_kernel<<<(unsigned)nchunks, threads, 0, g_stream>>>(dw, pieces, dout, key_out,
                                                                                    pos_out, N, C, vec);
    cudaCheck(cudaGetLastError());
    encoder_backward_dwte_spans_kernel<<<(unsigned)nchunks, 256, 0, g_stream>>>(dw, pieces, key_out, N, C);
    cudaCheck(cudaGetLastError());
}

// dwpe: without a segment table the per-position sum over b; with one, the scatter by position
// (keys in the first round_up(N, 64) ints of g_work, the scatter's scratch after them). dwte: the
// scatter by token (the workspace is free again).
static void encoder_backward_cuda(float* dwte, float* dwpe, const floatX* dout, const int* tokens, const int* seg,
                                  int B, int T, int C, int V) {
    int N = B * T;
    if (N <= 0 || C <= 0) return;
    int vec_x = C % PACK_X == 0 && aligned16(dout);
    if (dwpe && !seg) {
        int64_t dwpe_threads = (int64_t)T * ceil_div(C, PACK_X);
        encoder_backward_dwpe_kernel<<<(unsigned)ceil_div(dwpe_threads, 256), 256, 0, g_stream>>>(dwpe, dout, B, T, C, vec_x);
        cudaCheck(cudaGetLastError());
    } else if (dwpe) {
        unsigned* key = (unsigned*)g_work; // (N) each row's position
        encoder_positions_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, g_stream>>>(key, seg, N, T);
        cudaCheck(cudaGetLastError());
        encoder_scatter_cuda(dwpe, dout, key, N, C, T, (int*)g_work + round_up(N, 64), vec_x);
    }
    if (dwte) encoder_scatter_cuda(dwte, dout, (const unsigned*)tokens, N, C, V, (int*)g_work, vec_x);
}
#endif

// dw (K, C) FP32 [+=]: row key[i] of dw += row i of dout (N, C), for keys in [0, K): a stable
// counting sort of the rows by key, then one task per key (the order described at the top).
// work: (K + 1 + N) ints of scratch (bucket ends, sorted rows).
static void encoder_scatter_rows(float* dw_all, const floatX* dout, const int* key, int N, int C, int K, int* work) {
    int* start = work;        // (K + 1)
    int* pos = start + K + 1; // (N)
    memset(start, 0, sizeof(int) * (K + 1));
    for (int i = 0; i < N; i++) start[key[i] + 1]++;
    for (int v = 0; v < K; v++) start[v + 1] += start[v];
    for (int i = 0; i < N; i++) pos[start[key[i]]++] = i; // start[v] now = end of bucket v
#pragma omp parallel for schedule(dynamic, 64)
    for (int v = 0; v < K; v++) {
        int begin = v == 0 ? 0 : start[v - 1], end = start[v];
        float* dw = dw_all + (int64_t)v * C;
        for (int c0 = 0; c0 < C && begin < end; c0 += 64) { // 64 columns at a time: acc, piece on the stack
            int cn = C - c0 < 64 ? C - c0 : 64;
            float acc[64], piece[64];
            for (int c = 0; c < cn; c++) { acc[c] = dw[c0 + c]; piece[c] = 0.0f; }
            for (int k = begin; k < end; k++) {
                if (k > begin && k % ENC_CHUNK == 0) // a chunk edge: the piece so far joins the row
                    for (int c = 0; c < cn; c++) { acc[c] += piece[c]; piece[c] = 0.0f; }
                const floatX* d = dout + (int64_t)pos[k] * C + c0;
                for (int c = 0; c < cn; c++) piece[c] += ld(d[c]);
            }
            for (int c = 0; c < cn; c++) dw[c0 + c] = acc[c] + piece[c];
        }
    }
}

static void op_encoder_forward(floatX* out, const int* tokens, const int* seg, const floatX* wte, const floatX* wpe,
                               int B, int T, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { encoder_forward_cuda(out, tokens, seg, wte, wpe, B, T, C); return; }
#endif
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            floatX* o = out + ((int64_t)b * T + t) * C;
            const floatX* we = wte + (int64_t)tokens[b * T + t] * C;
            if (!wpe) { memcpy(o, we, sizeof(floatX) * C); continue; } // no positions: the token's row
            const floatX* pe = wpe + (int64_t)(t - (seg ? seg[b * T + t] : 0)) * C; // the position in t's example
            for (int c = 0; c < C; c++) o[c] = rn(ld(we[c]) + ld(pe[c]));
        }
}

static void op_encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* tokens, const int* seg,
                                int B, int T, int C, int V) {
    if (!dwte && !dwpe) return; // a frozen embedding (LoRA's base): no gradient
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { encoder_backward_cuda(dwte, dwpe, dout, tokens, seg, B, T, C, V); return; }
#endif
    int N = B * T;
    int* work = (int*)g_work;
    if (dwpe && !seg) {
        // dwpe: each position t sums its B rows in order of b
#pragma omp parallel for schedule(static)
        for (int t = 0; t < T; t++)
            for (int b = 0; b < B; b++) {
                const floatX* d = dout + ((int64_t)b * T + t) * C;
                float* dp = dwpe + (int64_t)t * C;
                for (int c = 0; c < C; c++) dp[c] += ld(d[c]);
            }
    } else if (dwpe) {
        // dwpe with examples: positions t - seg repeat irregularly, so dwpe is dwte's scatter-add with
        // the position as the key (T rows): the same fixed order, independent of the thread count
        int* key = work; // (N) the position of each row
        for (int i = 0; i < N; i++) key[i] = i % T - seg[i];
        encoder_scatter_rows(dwpe, dout, key, N, C, T, key + N);
    }
    // dwte: the scatter-add of rows by token (the workspace is free again)
    if (dwte) encoder_scatter_rows(dwte, dout, tokens, N, C, V, work);
}

#endif // ZT_OPS_ENCODER_CUH
