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

static void op_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("attention_forward"); return; }
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
    if (g_device == DEV_CUDA) { cuda_not_yet("attention_backward"); return; }
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
