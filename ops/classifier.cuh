// ops/classifier.cuh — the LM head fused with softmax cross-entropy and the logits gradient, and
// the whole head (forward and backward) run chunk by chunk so that the B*T*Vp logits never exist.
//
// op_lm_head_forward, one block of rows (N of them):
//   logits (N, Vp) = x (N, C) @ W (Vp, C)^T                                 [floatX, =]
//   losses (N)     = logsumexp(logits[n, :V]) - logits[n, target[n]]         [FP32, =]
//   with dloss:    logits[n, j] <- (softmax(logits[n, :V])_j - [j == target[n]]) * dloss   for j < V
//                  logits[n, j] <- 0 for the padded columns V <= j < Vp       [floatX, in place]
// W is the head's weight: wte (tied, GPT-2) or lmhead (an untied head).
// The loss mask: a negative target[n] (-1, like PyTorch's ignore_index) is a position that does
// not count: losses[n] = 0 and, with dloss, its whole logits row becomes 0 (no gradient). dloss is
// then 1 / (counted targets of the global batch). With every target >= 0 nothing changes.
// The padded vocabulary columns (W rows V..Vp-1 are zero) never enter the softmax and get a
// zero gradient. dloss is the loss gradient's pre-scale, 1 / (R * GA * B * T) in training, so
// that every later reduction is a plain SUM (zero.h). Without targets the logits are left as
// they are (sampling reads them).
// The softmax reads the *rounded* logits, as the GPU does after its BF16 matmul.
//
// op_classifier, the whole head over N rows in chunks of `chunk` rows (classifier_chunk_rows),
// n0 = 0, chunk, 2 chunk, ... in that order, each chunk's logits in one (chunk, Vp) buffer:
//   logits (nc, Vp) = x[n0:n0+nc] @ W^T ; losses[n0:n0+nc] ; dlogits in place   (op_lm_head_forward)
//   dx[n0:n0+nc] (nc, C) = dlogits @ W                                           [floatX, =]
//   dW (Vp, C)          += dlogits^T @ x[n0:n0+nc]                               [FP32, +=, chunk order]
// So at most one chunk of logits exists (the memory tag "logits" is chunk * Vp elements), and the
// three matmuls of the unchunked head are done once each (Liger's fused linear cross-entropy; no
// recompute). Per row, everything (logits, loss, dlogits, dx) is the unchunked path's bits; only
// dW's FP32 sum over rows is grouped by chunk (one partial sum per chunk, added in chunk order):
// docs/classifier.md gives the tolerance against the unchunked head. The chunk depends on the
// vocabulary only (classifier_chunk_rows), never on R, the stage or the memory, so runs are
// bit-identical across stages and ranks, and the run record (run_record.h) refuses a resume whose
// chunk differs.
//
// CUDA: the matmuls through op_matmul_forward / op_matmul_backward (cuBLASLt), the rest in
// classifier_row_kernel (one block per row, the row read from global memory once, deterministic
// block reductions).
//
// defines: op_lm_head_forward, op_classifier, classifier_chunk_rows, classifier_row_max,
//          classifier_chunk_override (TESTING)
//
// May call: device.cuh, matmul.cuh and packed.cuh.
#ifndef ZT_OPS_CLASSIFIER_CUH
#define ZT_OPS_CLASSIFIER_CUH

#include "../device.cuh" // defines: floatX, ld, rn
#include "matmul.cuh"    // defines: op_matmul_forward
#include "packed.cuh"    // defines: PACK_X, Packed128, load128, store128, aligned16

// CUDA device: the classifier part. The softmax needs the row three times (its max, the sum of
// exp(l - max), then p = exp(l - lse) for dlogits), as on the CPU. Read from global memory three
// times, a GPT-2 row (Vp = 50304 BF16, 98 KiB) costs 3 reads + 1 write of HBM traffic: at d12,
// B*T = 16K rows, 6.6 GB per micro-step. classifier_row_kernel reads the row once into shared
// memory (with 16-byte loads when it can) and takes the max on the way; the sum and the dlogits
// read the shared copy; the dlogits go out with 16-byte stores: 1 read + 1 write, half the traffic.
// The row must fit one block's shared memory (98 KiB BF16 or 196 KiB FP32 at GPT-2's Vp, under the
// 227 KiB a Hopper block may opt in to: two blocks of 1024 threads per SM in BF16). A longer row
// takes classifier_kernel, the same arithmetic over global memory. The two are bitwise the same:
// the max is exact in any order and both sum each thread's strided elements j = tid + k * blockDim
// in the same order, then combine the threads by the same fixed tree (gpu_classifier_paths_bitwise).
#ifdef __CUDACC__
#define CLASSIFIER_THREADS 1024 // threads per row (32 warps)

// Rows longer than this (bytes) take classifier_kernel even when they would fit shared memory: a
// test lowers it to send GPT-2's rows down that path.
static size_t classifier_row_max = SIZE_MAX;

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

// A masked row (target < 0: no loss, no gradient): losses[n] = 0 and, with write_dlogits, a row of
// zeros; returns 1. The whole block takes this branch together (t is the block's row's).
__device__ static int classifier_masked_row(floatX* row, float* losses, int64_t n, int t, int write_dlogits, int Vp) {
    if (t >= 0) return 0;
    if (threadIdx.x == 0) losses[n] = 0.0f;
    if (write_dlogits) for (int j = threadIdx.x; j < Vp; j += blockDim.x) row[j] = rn(0.0f);
    return 1;
}

// Row n of logits (N, Vp), the row read once into shared memory (Vp floatX of dynamic shared
// memory): losses[n] = lse - l[target]; with write_dlogits the row becomes rn((p - onehot) * dloss)
// for j < V and 0 for V <= j < Vp. packed: every row is 16-byte aligned and Vp % PACK_X == 0.
__global__ static void __launch_bounds__(CLASSIFIER_THREADS)
classifier_row_kernel(floatX* logits, float* losses, const int* targets, float dloss, int write_dlogits, int V, int Vp,
                      int packed) {
    extern __shared__ __align__(16) float classifier_smem[]; // (Vp) floatX: the row (16-byte packed copies)
    __shared__ float scratch[32];
    floatX* srow = (floatX*)classifier_smem;
    int64_t n = blockIdx.x;
    floatX* row = logits + n * Vp;
    int t = targets[n];
    if (classifier_masked_row(row, losses, n, t, write_dlogits, Vp)) return;
    // the one read of the row: into shared memory, the max on the way (exact in any order)
    float maxv = -INFINITY;
    if (packed) {
        for (int k = threadIdx.x; k < Vp / PACK_X; k += blockDim.x) {
            Packed128<floatX> v = load128(row + (int64_t)k * PACK_X);
            store128(srow + k * PACK_X, v);
            #pragma unroll
            for (int e = 0; e < PACK_X; e++)
                if (k * PACK_X + e < V) maxv = fmaxf(maxv, ld(v[e]));
        }
    } else {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
            srow[j] = row[j];
            if (j < V) maxv = fmaxf(maxv, ld(srow[j]));
        }
    }
    maxv = classifier_block_reduce(maxv, 1, scratch); // (its __syncthreads: the whole row is in srow)
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(ld(srow[j]) - maxv);
    sum = classifier_block_reduce(sum, 0, scratch);
    float lse = maxv + logf(sum);
    if (threadIdx.x == 0) losses[n] = lse - ld(srow[t]);
    if (!write_dlogits) return;
    if (packed) {
        for (int k = threadIdx.x; k < Vp / PACK_X; k += blockDim.x) {
            Packed128<floatX> v = load128(srow + k * PACK_X);
            #pragma unroll
            for (int e = 0; e < PACK_X; e++) {
                int j = k * PACK_X + e;
                v[e] = j < V ? rn((expf(ld(v[e]) - lse) - (j == t ? 1.0f : 0.0f)) * dloss) : rn(0.0f);
            }
            store128(row + (int64_t)k * PACK_X, v);
        }
    } else {
        for (int j = threadIdx.x; j < Vp; j += blockDim.x)
            row[j] = j < V ? rn((expf(ld(srow[j]) - lse) - (j == t ? 1.0f : 0.0f)) * dloss) : rn(0.0f);
    }
}

// Row n of logits (N, Vp), for rows longer than shared memory: as classifier_row_kernel, each pass
// reading the row from global memory (3 reads + 1 write).
__global__ static void __launch_bounds__(CLASSIFIER_THREADS)
classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss, int write_dlogits, int V, int Vp) {
    __shared__ float scratch[32];
    int64_t n = blockIdx.x;
    floatX* row = logits + n * Vp;
    int t = targets[n];
    if (classifier_masked_row(row, losses, n, t, write_dlogits, Vp)) return;
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
        static size_t smem_max = 0; // once: allow the row kernel all the shared memory a block may have
        if (smem_max == 0) {
            smem_max = g_cuda_prop.sharedMemPerBlockOptin - 32 * sizeof(float); // less its scratch
            cudaCheck(cudaFuncSetAttribute(classifier_row_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max));
        }
        size_t row_bytes = (size_t)Vp * sizeof(floatX);
        if (row_bytes <= smem_max && row_bytes <= classifier_row_max) {
            int packed = Vp % PACK_X == 0 && aligned16(logits);
            classifier_row_kernel<<<(unsigned)N, CLASSIFIER_THREADS, row_bytes, g_stream>>>(
                logits, losses, targets, dloss, write_dlogits, V, Vp, packed);
        } else {
            classifier_kernel<<<(unsigned)N, CLASSIFIER_THREADS, 0, g_stream>>>(logits, losses, targets, dloss,
                                                                              write_dlogits, V, Vp);
        }
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

// ----------------------------------------------------------------------------
// The chunked head.

// Rows per chunk of logits, from the padded vocabulary alone: the largest power of two whose
// (rows, Vp) logits have at most CLASSIFIER_CHUNK_ELEMS elements (512 MiB in BF16), and at least
// CLASSIFIER_MIN_ROWS. Why these numbers: the chunk's weight-gradient GEMM reads and writes the
// FP32 dW (Vp, C) once per chunk and does 2 rows C Vp flops: about rows / 4 flops per byte of dW
// traffic whatever C is, so rows >= 1024 keeps it compute-bound on an H200 (~200 flops per byte);
// Vp <= 262,144 (every vocabulary in use) gets 1024 rows or more. GPT-2 (Vp 50,304): 4096 rows;
// Llama 3 (128,256): 2048; Qwen2 (151,936): 1024. C does not enter (see above), nor B, T, R, the
// stage or any memory size: the same chunk on every rank, stage and resume.
#define CLASSIFIER_CHUNK_ELEMS ((int64_t)1 << 28)
#define CLASSIFIER_MIN_ROWS 64
#ifdef TESTING
static int classifier_chunk_override = 0; // > 0: the tests' chunk rows (to cut a small batch into several)
#endif
static int classifier_chunk_rows(int Vp) {
#ifdef TESTING
    if (classifier_chunk_override > 0) return classifier_chunk_override;
#endif
    int rows = CLASSIFIER_MIN_ROWS;
    while ((int64_t)rows * 2 * Vp <= CLASSIFIER_CHUNK_ELEMS) rows *= 2;
    return rows;
}

// Rows the logits buffer holds for a micro-batch of N rows: one chunk, or N when smaller.
static int classifier_buffer_rows(int N, int Vp) {
    int chunk = classifier_chunk_rows(Vp);
    return N < chunk ? N : chunk;
}

// The LM head over N rows, chunk by chunk (see the file's top). logits: (min(N, chunk), Vp)
// scratch; losses (N) [=] with targets; with dloss != 0 (training, targets needed) also dx (N, C)
// [=] and dW (Vp, C) [+=]. Without targets only the last min(N, chunk) rows' logits are computed
// (sampling reads the last row). Returns the first row whose logits (or, with dloss, dlogits) the
// buffer holds on return: logits row i of the buffer is row row0 + i of x.
static int op_classifier(floatX* logits, float* losses, floatX* dx, float* dW, const floatX* x, const floatX* W,
                         const int* targets, float dloss, int N, int C, int V, int Vp, int chunk) {
    if (N <= 0) return 0;
    if (chunk < N && chunk % 8 != 0) // every chunk's x and dx rows then start 16-byte aligned whatever C is,
        die(1, "classifier: chunk of %d rows is not a multiple of 8 (internal error)", chunk); // (cuBLASLt: one plan a shape)
    if (!targets) { // the logits of the last rows, for sampling
        int n0 = N > chunk ? N - chunk : 0;
        op_lm_head_forward(logits, NULL, x + (int64_t)n0 * C, W, NULL, 0.0f, 0, N - n0, C, V, Vp);
        return n0;
    }
    int train = dloss != 0.0f;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        int nc = N - n0 < chunk ? N - n0 : chunk;
        const floatX* xc = x + (int64_t)n0 * C;
        // logits (nc, Vp) = xc @ W^T; losses; dlogits in place when training
        op_lm_head_forward(logits, losses + n0, xc, W, targets + n0, dloss, train, nc, C, V, Vp);
        if (!train) continue;
        // logits = xc @ W^T: dx[n0:] = dlogits @ W; dW += dlogits^T @ xc (chunks in order)
        op_matmul_backward(dx + (int64_t)n0 * C, dW, NULL, logits, xc, W, NULL, nc, C, Vp);
    }
    return ((N - 1) / chunk) * chunk; // the last chunk's first row
}

#endif // ZT_OPS_CLASSIFIER_CUH
