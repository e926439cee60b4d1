// ops/classifier.cuh — the LM head fused with softmax cross-entropy and the logits gradient.
//
//   logits (N, Vp) = x (N, C) @ wte (Vp, C)^T                               [floatX, =]
//   losses (N)     = logsumexp(logits[n, :V]) - logits[n, target[n]]         [FP32, =]
//   with dloss:    logits[n, j] <- (softmax(logits[n, :V])_j - [j == target[n]]) * dloss   for j < V
//                  logits[n, j] <- 0 for the padded columns V <= j < Vp       [floatX, in place]
// The padded vocabulary columns (wte rows V..Vp-1 are zero) never enter the softmax and get a
// zero gradient. dloss is the loss gradient's pre-scale, 1 / (R * GA * B * T) in training, so
// that every later reduction is a plain SUM (zero.h). Without targets the logits are left as
// they are (sampling reads them).
// The softmax reads the *rounded* logits, as the GPU does after its BF16 matmul.
//
// defines: op_lm_head_forward
#ifndef ZT_OPS_CLASSIFIER_CUH
#define ZT_OPS_CLASSIFIER_CUH

#include "../device.cuh" // defines: floatX, ld, rn
#include "matmul.cuh"    // defines: op_matmul_forward

static void op_lm_head_forward(floatX* logits, float* losses, const floatX* x, const floatX* wte,
                               const int* targets, float dloss, int write_dlogits,
                               int N, int C, int V, int Vp) {
    op_matmul_forward(logits, NULL, x, wte, NULL, N, C, Vp);
    if (!targets) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("classifier"); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        floatX* row = logits + n * Vp;
        float maxv = -INFINITY;
        for (int j = 0; j < V; j++) { float v = ld(row[j]); maxv = v > maxv ? v : maxv; }
        float sum = 0.0f;
        for (int j = 0; j < V; j++) sum += expf(ld(row[j]) - maxv);
        float lse = maxv + logf(sum);
        int t = targets[n];
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
