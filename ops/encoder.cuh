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
// defines: op_encoder_forward, op_encoder_backward, encoder_workspace_ints
#ifndef ZT_OPS_ENCODER_CUH
#define ZT_OPS_ENCODER_CUH

#include "../device.cuh" // defines: floatX, ld, rn, g_work

static void op_encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe,
                               int B, int T, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("encoder_forward"); return; }
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

// Scratch ints the backward needs in g_work: bucket starts (V+1) and positions (B*T).
static inline size_t encoder_workspace_ints(int B, int T, int V) { return (size_t)V + 1 + (size_t)B * T; }

static void op_encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* tokens,
                                int B, int T, int C, int V) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("encoder_backward"); return; }
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
