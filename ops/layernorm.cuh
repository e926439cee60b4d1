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
// defines: op_residual_layernorm_forward, op_layernorm_backward
#ifndef ZT_OPS_LAYERNORM_CUH
#define ZT_OPS_LAYERNORM_CUH

#include "../device.cuh" // defines: floatX, ld, rn

#define LN_EPS 1e-5f

// residual = inp1 + inp2 (when inp2 != NULL; residual may then be NULL only if not needed);
// out = layernorm(residual or inp1). mean/rstd are (N) FP32.
static void op_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                          const floatX* inp1, const floatX* inp2,
                                          const floatX* weight, const floatX* bias, int N, int C) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("residual_layernorm_forward"); return; }
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
    if (g_device == DEV_CUDA) { cuda_not_yet("layernorm_backward"); return; }
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
