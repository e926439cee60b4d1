// ops/encoder.cuh — token + position embedding, forward and backward.
//
//   forward:  out (B, T, C) = wte[tokens[b, t]] + wpe[t]             [floatX, =]
//   backward: dwte (Vp, C) += scatter-add of dout by token           [FP32, +=]
//             dwpe (maxT, C) += sum over b of dout[b, t]             [FP32, +=]
// The backward needs no parameter values, which is why under ZeRO-3 the io block's parameters
// can be released before it runs while its gradient buffer stays alive (see zero.h).
//
// CPU backward is deterministic without atomics: positions are bucketed by token with a stable
// counting sort (so each bucket lists its positions in increasing order), then each token's row
// of dwte is the sum over its positions in that order; tokens run in parallel.
//
// CUDA: the same algorithm, and the same bits as the CPU (every output element is the same
// sequence of FP32 additions onto the same starting value; no FMA is possible in a sum):
//   forward  one thread per output element;
//   dwpe     one thread per (t, c), adding b = 0..B-1 in order;
//   dwte     CUB's radix sort of the pairs (token, position), which is stable, so each token's
//            positions come out in increasing order; then one block per sorted position: the block
//            at the first position of a token's run adds that run's rows in order (a thread per
//            column), every other block returns at once. No atomics. A token repeated k times is
//            k sequential row additions in one block: correct, slow only for huge k.
//
// defines: op_encoder_forward, op_encoder_backward, encoder_workspace_ints
#ifndef ZT_OPS_ENCODER_CUH
#define ZT_OPS_ENCODER_CUH

#include "../device.cuh" // defines: floatX, ld, rn, g_work

#ifdef __CUDACC__
#include <cub/device/device_radix_sort.cuh> // cub::DeviceRadixSort (ships with the CUDA toolkit)
#endif

// Scratch ints the backward needs in g_work (a closed form of the shapes: ops_workspace_floats
// takes the largest op's need; the device does not enter into it, so -plan is the same for both).
//   CPU:  bucket starts (V+1) and positions (N = B*T).
//   CUDA: positions 0..N-1, sorted tokens, sorted positions (N each, each start 256-byte aligned:
//         +64 ints), then CUB's radix-sort temp storage. CUB (onesweep, CUDA 12/13) asks for two
//         N-element alternate buffers (2N), a lookback table of 256 ints per tile of >= 6528 items
//         (< N/4 with a large margin), histograms and counters of a few KiB plus 256-byte
//         alignment of each part (inside the 65536-int margin). encoder_backward_cuda asks CUB
//         for the exact number every call and stops with a message if it does not fit.
static inline size_t encoder_workspace_ints(int B, int T, int V) {
    size_t N = (size_t)B * T;
    size_t cpu = (size_t)V + 1 + N;
    size_t cuda = 3 * (N + 64) + (2 * N + N / 4 + 65536);
    return cpu > cuda ? cpu : cuda;
}

#ifdef __CUDACC__
// ---- CUDA kernels

// out[bt, c] = rn(wte[tokens[bt], c] + wpe[t, c]), one thread per element.
__global__ static void encoder_forward_kernel(floatX* out, const int* tokens, const floatX* wte,
                                              const floatX* wpe, int64_t N, int T, int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= N * C) return;
    int64_t bt = idx / C;
    int c = (int)(idx % C);
    int t = (int)(bt % T);
    out[idx] = rn(__fadd_rn(ld(wte[(int64_t)tokens[bt] * C + c]), ld(wpe[(int64_t)t * C + c])));
}

// dwpe[t, c] += dout[b, t, c] for b = 0..B-1 in order, one thread per (t, c).
__global__ static void encoder_backward_dwpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)T * C) return;
    int64_t t = idx / C, c = idx % C;
    float acc = dwpe[idx];
    for (int b = 0; b < B; b++) acc = __fadd_rn(acc, ld(dout[((int64_t)b * T + t) * C + c]));
    dwpe[idx] = acc;
}

// pos[i] = i: the values the sort carries along with the tokens.
__global__ static void encoder_iota_kernel(int* pos, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) pos[i] = i;
}

// Block i: if sorted position i starts a run of equal tokens v (i == 0 or key[i-1] != v), add the
// run's rows of dout to dwte[v] in sorted (= position) order; otherwise do nothing. Each token
// has exactly one run, so each dwte row has one writer.
__global__ static void encoder_backward_dwte_kernel(float* dwte, const floatX* dout, const unsigned* key,
                                                    const int* pos, int N, int C) {
    int i = blockIdx.x;
    unsigned v = key[i];
    if (i > 0 && key[i - 1] == v) return; // the whole block: not the head of a run
    float* dw = dwte + (int64_t)v * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dw[c];
        for (int k = i; k < N && key[k] == v; k++) acc = __fadd_rn(acc, ld(dout[(int64_t)pos[k] * C + c]));
        dw[c] = acc;
    }
}

static void encoder_forward_cuda(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                                 int B, int T, int C) {
    int64_t n = (int64_t)B * T * C;
    if (n <= 0) return;
    encoder_forward_kernel<<<(unsigned)ceil_div(n, 256), 256, 0, g_stream>>>(out, tokens, wte, wpe,
                                                                           (int64_t)B * T, T, C);
    cudaCheck(cudaGetLastError());
}

// Scratch (g_work, as ints; see encoder_workspace_ints): pos_in, key_out, pos_out (N each, 64-int
// aligned), then CUB's temp storage.
static void encoder_backward_cuda(float* dwte, float* dwpe, const floatX* dout, const int* tokens,
                                  int B, int T, int C, int V) {
    int N = B * T;
    if (N <= 0 || C <= 0) return;
    encoder_backward_dwpe_kernel<<<(unsigned)ceil_div((int64_t)T * C, 256), 256, 0, g_stream>>>(dwpe, dout, B, T, C);
    cudaCheck(cudaGetLastError());
    // sort (token, position) pairs by token; tokens are in [0, V), so only the low bits matter
    int end_bit = 1;
    while (end_bit < 32 && ((int64_t)1 << end_bit) < V) end_bit++;
    size_t Na = (size_t)round_up(N, 64);
    int* pos_in = (int*)g_work;
    unsigned* key_out = (unsigned*)(pos_in + Na);
    int* pos_out = (int*)(key_out + Na);
    void* temp = (void*)(pos_out + Na);
    size_t temp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const unsigned*)tokens, key_out, pos_in,
                                              pos_out, N, 0, end_bit, g_stream)); // size query only
    size_t need_ints = 3 * Na + ceil_div((int64_t)temp_bytes, 4);
    if (need_ints > g_work_floats)
        die(1, "encoder backward: workspace too small (%zu ints, needs %zu: CUB asks %zu bytes for N=%d) "
               "(internal error: enlarge encoder_workspace_ints)", g_work_floats, need_ints, temp_bytes, N);
    encoder_iota_kernel<<<(unsigned)ceil_div(N, 256), 256, 0, g_stream>>>(pos_in, N);
    cudaCheck(cudaGetLastError());
    cudaCheck(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, (const unsigned*)tokens, key_out, pos_in,
                                              pos_out, N, 0, end_bit, g_stream));
    cudaCheck(cudaGetLastError());
    int threads = C < 256 ? (int)round_up(C, 32) : 256;
    encoder_backward_dwte_kernel<<<(unsigned)N, threads, 0, g_stream>>>(dwte, dout, key_out, pos_out, N, C);
    cudaCheck(cudaGetLastError());
}
#endif

static void op_encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                               int B, int T, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { encoder_forward_cuda(out, tokens, wte, wpe, B, T, C); return; }
#endif
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            floatX* o = out + ((int64_t)b * T + t) * C;
            const floatX* we = wte + (int64_t)tokens[b * T + t] * C;
            const floatX* pe = wpe + (int64_t)t * C;
            for (int c = 0; c < C; c++) o[c] = rn(ld(we[c]) + ld(pe[c]));
        }
}

static void op_encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* tokens,
                                int B, int T, int C, int V) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { encoder_backward_cuda(dwte, dwpe, dout, tokens, B, T, C, V); return; }
#endif
    // dwpe: each position t sums its B rows in order of b
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            const floatX* d = dout + ((int64_t)b * T + t) * C;
            float* dp = dwpe + (int64_t)t * C;
            for (int c = 0; c < C; c++) dp[c] += ld(d[c]);
        }
    // dwte: stable counting sort of positions by token, then one task per token
    int N = B * T;
    int* start = (int*)g_work; // (V + 1)
    int* pos = start + V + 1;  // (N)
    memset(start, 0, sizeof(int) * (V + 1));
    for (int i = 0; i < N; i++) start[tokens[i] + 1]++;
    for (int v = 0; v < V; v++) start[v + 1] += start[v];
    for (int i = 0; i < N; i++) pos[start[tokens[i]]++] = i; // start[v] now = end of bucket v
#pragma omp parallel for schedule(dynamic, 64)
    for (int v = 0; v < V; v++) {
        int begin = v == 0 ? 0 : start[v - 1], end = start[v];
        float* dw = dwte + (int64_t)v * C;
        for (int k = begin; k < end; k++) {
            const floatX* d = dout + (int64_t)pos[k] * C;
            for (int c = 0; c < C; c++) dw[c] += ld(d[c]);
        }
    }
}

#endif // ZT_OPS_ENCODER_CUH
