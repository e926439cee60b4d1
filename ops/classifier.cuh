// ops/classifier.cuh — the LM head fused with softmax cross-entropy and the logits gradient.
//
//   logits (N, Vp) = x (N, C) @ wte (Vp, C)^T                               [floatX, =]
//   losses (N)     = logsumexp(logits[n, :V]) - logits[n, target[n]]         [FP32, =]
//   with dloss:    logits[n, j] <- (softmax(logits[n, :V])_j - [j == target[n]]) * dloss   for j < V
//                  logits[n, j] <- 0 for the padded columns V <= j < Vp       [floatX, in place]
// The loss mask: a negative target[n] (-1, like PyTorch's ignore_index) is a position that does
// not count: losses[n] = 0 and, with dloss, its whole logits row becomes 0 (no gradient). dloss is
// then 1 / (counted targets of the global batch). With every target >= 0 nothing changes.
// The padded vocabulary columns (wte rows V..Vp-1 are zero) never enter the softmax and get a
// zero gradient. dloss is the loss gradient's pre-scale, 1 / (R * GA * B * T) in training, so
// that every later reduction is a plain SUM (zero.h). Without targets the logits are left as
// they are (sampling reads them).
// The softmax reads the *rounded* logits, as the GPU does after its BF16 matmul.
//
// CUDA: the matmul through op_matmul_forward (cuBLASLt), the rest in classifier_kernel (one block
// per row, deterministic block reductions).
//
// defines: op_lm_head_forward
#ifndef ZT_OPS_CLASSIFIER_CUH
#define ZT_OPS_CLASSIFIER_CUH

#include "../device.cuh" // defines: floatX, ld, rn
#include "matmul.cuh"    // defines: op_matmul_forward

// CUDA device: the classifier part is classifier_kernel, one thread block per row n, three passes
// over the row as on the CPU: max, sum of exp(l - max), then losses[n] and (with write_dlogits)
// dlogits written over the logits, p = exp(l - lse) from the rounded logits. The block-wide max and
// sum combine each thread's strided partial (fixed order) by a warp butterfly and then the warps'
// results in warp order: a fixed tree, so the result is the same every run (no atomics).
#ifdef __CUDACC__
#define CLASSIFIER_THREADS 1024 // threads per row (32 warps)

// Sum (is_max = 0) or max (is_max = 1) of v over the block; every thread gets the result.
// scratch: 32 floats of shared memory, free on entry, free again on return.
__device__ static float classifier_block_reduce(float v, int is_max, float* scratch) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    // butterfly: lanes i and i^o combine the same two values (a + b = b + a), so all lanes agree
    for (int o = 16; o > 0; o /= 2) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) scratch[warp] = v;
    __syncthreads(); // every warp's result is in scratch
    v = lane < nwarps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o /= 2) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads(); // every warp has read scratch before the next reduction writes it
    return v;
}

// Row n of logits (N, Vp): losses[n] = lse - l[target]; with write_dlogits the row becomes
// rn((p - onehot) * dloss) for j < V and 0 for V <= j < Vp.
__global__ static void __launch_bounds__(CLASSIFIER_THREADS)
classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss, int write_dlogits, int V, int Vp) {
    __shared__ float scratch[32];
    int64_t n = blockIdx.x;
    floatX* row = logits + n * Vp;
    int t = targets[n];
    if (t < 0) { // masked: no loss, no gradient (the whole block takes this branch together)
        if (threadIdx.x == 0) losses[n] = 0.0f;
        if (write_dlogits) for (int j = threadIdx.x; j < Vp; j += blockDim.x) row[j] = rn(0.0f);
        return;
    }
    // read before any thread writes the row (the reductions' __syncthreads order the writes after it)
    float logit_t = ld(row[t]);
    float maxv = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) maxv = fmaxf(maxv, ld(row[j]));
    maxv = classifier_block_reduce(maxv, 1, scratch);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(ld(row[j]) - maxv);
    sum = classifier_block_reduce(sum, 0, scratch);
    float lse = maxv + logf(sum);
    if (threadIdx.x == 0) losses[n] = lse - logit_t;
    if (!write_dlogits) return;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(ld(row[j]) - lse);
        row[j] = rn((p - (j == t ? 1.0f : 0.0f)) * dloss);
    }
    for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) row[j] = rn(0.0f);
}
#endif // __CUDACC__

static void op_lm_head_forward(floatX* logits, float* losses, const floatX* x, const floatX* wte,
                               const int* targets, float dloss, int write_dlogits,
                               int N, int C, int V, int Vp) {
    op_matmul_forward(logits, NULL, x, wte, NULL, N, C, Vp);
    if (!targets) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (N == 0) return;
        classifier_kernel<<<(unsigned)N, CLASSIFIER_THREADS, 0, g_stream>>>(logits, losses, targets, dloss,
                                                                          write_dlogits, V, Vp);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        floatX* row = logits + n * Vp;
        int t = targets[n];
        if (t < 0) { // masked: no loss, no gradient
            losses[n] = 0.0f;
            if (write_dlogits) for (int j = 0; j < Vp; j++) row[j] = rn(0.0f);
            continue;
        }
        float maxv = -INFINITY;
        for (int j = 0; j < V; j++) { float v = ld(row[j]); maxv = v > maxv ? v : maxv; }
        float sum = 0.0f;
        for (int j = 0; j < V; j++) sum += expf(ld(row[j]) - maxv);
        float lse = maxv + logf(sum);
        losses[n] = lse - ld(row[t]);
        if (!write_dlogits) continue;
        for (int j = 0; j < V; j++) {
            float p = expf(ld(row[j]) - lse);
            row[j] = rn((p - (j == t ? 1.0f : 0.0f)) * dloss);
        }
        for (int j = V; j < Vp; j++) row[j] = rn(0.0f);
    }
}

#endif // ZT_OPS_CLASSIFIER_CUH
