// test/gpu_llama_ops.h — GPU-vs-CPU cases of the Llama family's ops (see test/test_gpu.cu for the
// helpers, test/gpu_misc.h for gm_bitwise, GM_UP, GM_DOWN): residual + RMSNorm, RoPE, SwiGLU, the
// embedding without positions. Grouped-query attention is in test/gpu_attention.h.
//
// What each case expects from the GPU (why, in ops/rmsnorm.cuh, ops/rope.cuh, ops/swiglu.cuh):
//   rmsnorm        within TOL_GPU_* (the row sums add in another order); residual = rn(a + b)
//                  bitwise; the recompute from the stored residual bitwise; backward deterministic
//   head rmsnorm   (Qwen3's q/k norms) within TOL_GPU_*; the kept input and the v heads bitwise;
//                  the dv heads untouched; deterministic
//   rope           bitwise equal to the CPU (the same FP32 products and sums, _rn intrinsics)
//   swiglu         within TOL_GPU_* (the device's expf may differ from the host's by 2 ulp);
//                  deterministic
//   encoder        without positions: the token's row, bitwise; dwte bitwise as with positions

typedef struct { int N, C; } GlShape;
// odd C (element path); Llama-tiny's C; a real model's C (16-byte path) at a few hundred rows
static const GlShape gl_norm_shapes[] = {{7, 19}, {33, 128}, {GPU_BIG(4096, 96), 2048}};

TEST(gpu_rmsnorm_forward) {
    const float eps = 1e-5f;
    for (size_t si = 0; si < sizeof(gl_norm_shapes) / sizeof(gl_norm_shapes[0]); si++) {
        int N = gl_norm_shapes[si].N, C = gl_norm_shapes[si].C;
        int64_t NC = (int64_t)N * C;
        floatX *a = (floatX*)malloc(sizeof(floatX) * NC), *b = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* w = (floatX*)malloc(sizeof(floatX) * C);
        rand_x(a, NC, 1.0, 2101 + si);
        rand_x(b, NC, 1.0, 2201 + si);
        rand_x(w, C, 1.0, 2301 + si);
        floatX *res_c = (floatX*)malloc(sizeof(floatX) * NC), *out_c = (floatX*)malloc(sizeof(floatX) * NC);
        floatX *res_g = (floatX*)malloc(sizeof(floatX) * NC), *out_g = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* out_g2 = (floatX*)malloc(sizeof(floatX) * NC);
        float *rstd_c = (float*)malloc(4 * N), *rstd_g = (float*)malloc(4 * N), *rstd_g2 = (float*)malloc(4 * N);
        floatX *da = (floatX*)GM_UP(a, NC), *db = (floatX*)GM_UP(b, NC), *dw = (floatX*)GM_UP(w, C);
        floatX *dres = (floatX*)gpu_nans(sizeof(floatX) * NC), *dout = (floatX*)gpu_nans(sizeof(floatX) * NC);
        float* drstd = (float*)gpu_nans(4 * N);
        for (int with_res = 1; with_res >= 0; with_res--) {
            char what[96];
            printf("  N %d C %d, %s\n", N, C, with_res ? "residual = a + b, rmsnorm(residual)" : "rmsnorm(a), no residual");
            ON_CPU(op_residual_rmsnorm_forward(with_res ? res_c : NULL, out_c, rstd_c, a, with_res ? b : NULL, w, N, C, eps));
            ON_GPU(op_residual_rmsnorm_forward(with_res ? dres : NULL, dout, drstd, da, with_res ? db : NULL, dw, N, C, eps));
            GM_DOWN(out_g, dout, NC);
            GM_DOWN(rstd_g, drstd, N);
            if (with_res) {
                GM_DOWN(res_g, dres, NC);
                snprintf(what, sizeof(what), "rmsnorm fwd %dx%d residual", N, C);
                gm_bitwise(what, res_g, res_c, NC, sizeof(floatX));
            }
            snprintf(what, sizeof(what), "rmsnorm fwd %dx%d out", N, C);
            GPU_COMPARE(what, relerr_x(out_g, out_c, NC), TOL_GPU_FWD);
            snprintf(what, sizeof(what), "rmsnorm fwd %dx%d rstd", N, C);
            GPU_COMPARE(what, relerr_f(rstd_g, rstd_c, N), TOL_GPU_FWD);
            ON_GPU(op_residual_rmsnorm_forward(with_res ? dres : NULL, dout, drstd, da, with_res ? db : NULL, dw, N, C, eps));
            GM_DOWN(out_g2, dout, NC);
            snprintf(what, sizeof(what), "rmsnorm fwd %dx%d out, run twice", N, C);
            gm_bitwise(what, out_g2, out_g, NC, sizeof(floatX));
            if (with_res) { // -r 2 recomputes the norm from the stored residual: the same bits
                floatX* dout2 = (floatX*)gpu_nans(sizeof(floatX) * NC);
                ON_GPU(op_residual_rmsnorm_forward(NULL, dout2, drstd, dres, NULL, dw, N, C, eps));
                GM_DOWN(out_g2, dout2, NC);
                GM_DOWN(rstd_g2, drstd, N);
                snprintf(what, sizeof(what), "rmsnorm fwd %dx%d recompute from residual", N, C);
                gm_bitwise(what, out_g2, out_g, NC, sizeof(floatX));
                snprintf(what, sizeof(what), "rmsnorm fwd %dx%d recompute rstd", N, C);
                gm_bitwise(what, rstd_g2, rstd_g, N, 4);
                cudaCheck(cudaFree(dout2));
            }
        }
        free(a); free(b); free(w); free(res_c); free(out_c); free(res_g); free(out_g); free(out_g2);
        free(rstd_c); free(rstd_g); free(rstd_g2);
        cudaCheck(cudaFree(da)); cudaCheck(cudaFree(db)); cudaCheck(cudaFree(dw));
        cudaCheck(cudaFree(dres)); cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(drstd));
    }
}

// Backward: dinp += (starting nonzero: the residual stream's gradient), dweight += (starting nonzero);
// run twice on the GPU, bitwise.
TEST(gpu_rmsnorm_backward) {
    for (size_t si = 0; si < sizeof(gl_norm_shapes) / sizeof(gl_norm_shapes[0]); si++) {
        int N = gl_norm_shapes[si].N, C = gl_norm_shapes[si].C;
        int64_t NC = (int64_t)N * C;
        floatX *x = (floatX*)malloc(sizeof(floatX) * NC), *dout = (floatX*)malloc(sizeof(floatX) * NC);
        floatX *dinp0 = (floatX*)malloc(sizeof(floatX) * NC), *w = (floatX*)malloc(sizeof(floatX) * C);
        floatX* scratch = (floatX*)malloc(sizeof(floatX) * NC);
        float *dw0 = (float*)malloc(4 * C), *rstd = (float*)malloc(4 * N);
        rand_x(x, NC, 1.0, 2501 + si);
        rand_x(dout, NC, 1.0, 2601 + si);
        rand_x(dinp0, NC, 0.3, 2701 + si);
        rand_x(w, C, 1.0, 2801 + si);
        rand_f(dw0, C, 0.3, 2901 + si);
        ON_CPU(op_residual_rmsnorm_forward(NULL, scratch, rstd, x, NULL, w, N, C, 1e-5f)); // both sides: these rstd
        floatX* dinp_c = (floatX*)malloc(sizeof(floatX) * NC);
        float* dw_c = (float*)malloc(4 * C);
        memcpy(dinp_c, dinp0, sizeof(floatX) * NC);
        memcpy(dw_c, dw0, 4 * C);
        ON_CPU(op_rmsnorm_backward(dinp_c, dw_c, dout, x, w, rstd, N, C));
        floatX *ddout = (floatX*)GM_UP(dout, NC), *dx = (floatX*)GM_UP(x, NC), *dwt = (floatX*)GM_UP(w, C);
        float* drstd = (float*)GM_UP(rstd, N);
        floatX* ddinp = (floatX*)gpu_zeros(sizeof(floatX) * NC);
        float* ddw = (float*)gpu_zeros(4 * C);
        floatX* dinp_g[2];
        float* dw_g[2];
        for (int run = 0; run < 2; run++) {
            gpu_upload(ddinp, dinp0, sizeof(floatX) * NC);
            gpu_upload(ddw, dw0, 4 * C);
            ON_GPU(op_rmsnorm_backward(ddinp, ddw, ddout, dx, dwt, drstd, N, C));
            dinp_g[run] = (floatX*)malloc(sizeof(floatX) * NC);
            dw_g[run] = (float*)malloc(4 * C);
            GM_DOWN(dinp_g[run], ddinp, NC);
            GM_DOWN(dw_g[run], ddw, C);
        }
        char what[96];
        snprintf(what, sizeof(what), "rmsnorm bwd %dx%d dinp (+=)", N, C);
        GPU_COMPARE(what, relerr_x(dinp_g[0], dinp_c, NC), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "rmsnorm bwd %dx%d dweight (+=)", N, C);
        GPU_COMPARE(what, relerr_f(dw_g[0], dw_c, C), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "rmsnorm bwd %dx%d dinp, run twice", N, C);
        gm_bitwise(what, dinp_g[1], dinp_g[0], NC, sizeof(floatX));
        snprintf(what, sizeof(what), "rmsnorm bwd %dx%d dweight, run twice", N, C);
        gm_bitwise(what, dw_g[1], dw_g[0], C, 4);
        for (int run = 0; run < 2; run++) { free(dinp_g[run]); free(dw_g[run]); }
        free(x); free(dout); free(dinp0); free(w); free(scratch); free(dw0); free(rstd); free(dinp_c); free(dw_c);
        cudaCheck(cudaFree(ddout)); cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dwt)); cudaCheck(cudaFree(drstd));
        cudaCheck(cudaFree(ddinp)); cudaCheck(cudaFree(ddw));
    }
}

// Per-head RMSNorm (Qwen3's q_norm, k_norm) forward and backward in place on qkv against the CPU.
TEST(gpu_head_rmsnorm) {
    typedef struct { int BT, NH, NKV, HD; } HnCase;
    const HnCase cases[] = {
        {37, 3, 1, 10},                    // odd rows, one kv head, HD below a warp
        {64, 4, 2, 48},                    // qwen3-tiny's heads
        {GPU_BIG(2048, 40), 16, 8, 128},   // Qwen3-0.6B's heads
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const HnCase& k = cases[ci];
        int64_t W = (int64_t)(k.NH + 2 * k.NKV) * k.HD, n = (int64_t)k.BT * W, nx = (int64_t)k.BT * (k.NH + k.NKV) * k.HD;
        int64_t nr = (int64_t)k.BT * (k.NH + k.NKV);
        printf("  BT %d NH %d NKV %d HD %d\n", k.BT, k.NH, k.NKV, k.HD);
        floatX *q = (floatX*)malloc(sizeof(floatX) * n), *dq = (floatX*)malloc(sizeof(floatX) * n);
        floatX *wq = (floatX*)malloc(sizeof(floatX) * k.HD), *wk = (floatX*)malloc(sizeof(floatX) * k.HD);
        float* dw0 = (float*)malloc(4 * 2 * k.HD);
        rand_x(q, n, 1.0, 3101 + ci);
        rand_x(dq, n, 1.0, 3201 + ci);
        rand_x(wq, k.HD, 1.0, 3301 + ci);
        rand_x(wk, k.HD, 1.0, 3401 + ci);
        rand_f(dw0, 2 * k.HD, 0.3, 3501 + ci);
        floatX *qc = (floatX*)malloc(sizeof(floatX) * n), *xc = (floatX*)malloc(sizeof(floatX) * nx), *dc = (floatX*)malloc(sizeof(floatX) * n);
        float *rc = (float*)malloc(4 * nr), *dwc = (float*)malloc(4 * 2 * k.HD);
        memcpy(qc, q, sizeof(floatX) * n);
        memcpy(dc, dq, sizeof(floatX) * n);
        memcpy(dwc, dw0, 4 * 2 * k.HD);
        ON_CPU(op_head_rmsnorm_forward(qc, xc, rc, wq, wk, k.BT, k.NH, k.NKV, k.HD, 1e-6f));
        ON_CPU(op_head_rmsnorm_backward(dc, dwc, dwc + k.HD, xc, wq, wk, rc, k.BT, k.NH, k.NKV, k.HD));
        floatX *dqg = (floatX*)GM_UP(q, n), *dwq = (floatX*)GM_UP(wq, k.HD), *dwk = (floatX*)GM_UP(wk, k.HD);
        floatX* dxg = (floatX*)gpu_nans(sizeof(floatX) * nx);
        float* drg = (float*)gpu_nans(4 * nr);
        ON_GPU(op_head_rmsnorm_forward(dqg, dxg, drg, dwq, dwk, k.BT, k.NH, k.NKV, k.HD, 1e-6f));
        floatX *qg = (floatX*)malloc(sizeof(floatX) * n), *xg = (floatX*)malloc(sizeof(floatX) * nx);
        float* rg = (float*)malloc(4 * nr);
        GM_DOWN(qg, dqg, n);
        GM_DOWN(xg, dxg, nx);
        GM_DOWN(rg, drg, nr);
        char what[96];
        snprintf(what, sizeof(what), "head rmsnorm fwd %dx%d/%dx%d out", k.BT, k.NH, k.NKV, k.HD);
        GPU_COMPARE(what, relerr_x(qg, qc, n), TOL_GPU_FWD);
        snprintf(what, sizeof(what), "head rmsnorm fwd %dx%d/%dx%d rstd", k.BT, k.NH, k.NKV, k.HD);
        GPU_COMPARE(what, relerr_f(rg, rc, nr), TOL_GPU_FWD);
        snprintf(what, sizeof(what), "head rmsnorm fwd %dx%d/%dx%d kept input", k.BT, k.NH, k.NKV, k.HD);
        gm_bitwise(what, xg, xc, nx, sizeof(floatX));
        // backward from the CPU's kept input and rstd (both sides the same), run twice
        floatX* dxc = (floatX*)GM_UP(xc, nx);
        float* drc = (float*)GM_UP(rc, nr);
        floatX* ddq = (floatX*)gpu_zeros(sizeof(floatX) * n);
        float* ddw = (float*)gpu_zeros(4 * 2 * k.HD);
        floatX* dg[2];
        float* dwg[2];
        for (int run = 0; run < 2; run++) {
            gpu_upload(ddq, dq, sizeof(floatX) * n);
            gpu_upload(ddw, dw0, 4 * 2 * k.HD);
            ON_GPU(op_head_rmsnorm_backward(ddq, ddw, ddw + k.HD, dxc, dwq, dwk, drc, k.BT, k.NH, k.NKV, k.HD));
            dg[run] = (floatX*)malloc(sizeof(floatX) * n);
            dwg[run] = (float*)malloc(4 * 2 * k.HD);
            GM_DOWN(dg[run], ddq, n);
            GM_DOWN(dwg[run], ddw, 2 * k.HD);
        }
        snprintf(what, sizeof(what), "head rmsnorm bwd %dx%d/%dx%d dqkv (v untouched)", k.BT, k.NH, k.NKV, k.HD);
        GPU_COMPARE(what, relerr_x(dg[0], dc, n), TOL_GPU_BWD);
        int v_same = 1;
        for (int64_t bt = 0; bt < k.BT; bt++)
            v_same &= !memcmp(dg[0] + bt * W + (int64_t)(k.NH + k.NKV) * k.HD, dq + bt * W + (int64_t)(k.NH + k.NKV) * k.HD, sizeof(floatX) * k.NKV * k.HD);
        CHECKF(v_same, "head rmsnorm bwd: the dv heads changed");
        snprintf(what, sizeof(what), "head rmsnorm bwd %dx%d/%dx%d dwq ; dwk (+=)", k.BT, k.NH, k.NKV, k.HD);
        GPU_COMPARE(what, relerr_f(dwg[0], dwc, 2 * k.HD), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "head rmsnorm bwd %dx%d/%dx%d, run twice", k.BT, k.NH, k.NKV, k.HD);
        gm_bitwise(what, dg[1], dg[0], n, sizeof(floatX));
        gm_bitwise(what, dwg[1], dwg[0], 2 * k.HD, 4);
        for (int run = 0; run < 2; run++) { free(dg[run]); free(dwg[run]); }
        free(q); free(dq); free(wq); free(wk); free(dw0); free(qc); free(xc); free(dc); free(rc); free(dwc); free(qg); free(xg); free(rg);
        cudaCheck(cudaFree(dqg)); cudaCheck(cudaFree(dwq)); cudaCheck(cudaFree(dwk)); cudaCheck(cudaFree(dxg)); cudaCheck(cudaFree(drg));
        cudaCheck(cudaFree(dxc)); cudaCheck(cudaFree(drc)); cudaCheck(cudaFree(ddq)); cudaCheck(cudaFree(ddw));
    }
}

// RoPE forward and backward in place on qkv, bitwise equal to the CPU; v heads untouched.
TEST(gpu_rope) {
    typedef struct { int B, T, NH, NKV, HD, kind; } RopeCase;
    const RopeCase cases[] = {
        {2, 37, 3, 1, 10, ROPE_DEFAULT},             // odd T, single kv head, HD/2 odd
        {2, 64, 4, 2, 32, ROPE_LINEAR},              // llama-tiny's heads
        {GPU_BIG(4, 1), 256, 32, 8, 128, ROPE_LLAMA3}, // Llama 3 8B's heads
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const RopeCase& k = cases[ci];
        RopeParams p = {k.HD, k.kind == ROPE_LLAMA3 ? 500000.0 : 10000.0, k.kind, 8.0, 1.0, 4.0, 8192};
        int64_t n = (int64_t)k.B * k.T * (k.NH + 2 * k.NKV) * k.HD, ntab = (int64_t)k.T * k.HD;
        printf("  B %d T %d NH %d NKV %d HD %d, rope kind %d\n", k.B, k.T, k.NH, k.NKV, k.HD, k.kind);
        float* tab = (float*)malloc(sizeof(float) * ntab);
        rope_table(tab, &p, k.T);
        floatX *x = (floatX*)malloc(sizeof(floatX) * n), *xc = (floatX*)malloc(sizeof(floatX) * n);
        floatX* xg = (floatX*)malloc(sizeof(floatX) * n);
        rand_x(x, n, 1.0, 3001 + ci);
        memcpy(xc, x, sizeof(floatX) * n);
        float* dtab = (float*)GM_UP(tab, ntab);
        floatX* dx = (floatX*)GM_UP(x, n);
        char what[96];
        for (int bwd = 0; bwd < 2; bwd++) {
            if (bwd) ON_CPU(op_rope_backward(xc, tab, NULL, k.B, k.T, k.NH, k.NKV, k.HD));
            else ON_CPU(op_rope_forward(xc, tab, NULL, k.B, k.T, k.NH, k.NKV, k.HD));
            if (bwd) ON_GPU(op_rope_backward(dx, dtab, NULL, k.B, k.T, k.NH, k.NKV, k.HD));
            else ON_GPU(op_rope_forward(dx, dtab, NULL, k.B, k.T, k.NH, k.NKV, k.HD));
            GM_DOWN(xg, dx, n);
            snprintf(what, sizeof(what), "rope %s (B %d T %d HD %d)", bwd ? "bwd (after fwd)" : "fwd", k.B, k.T, k.HD);
            gm_bitwise(what, xg, xc, n, sizeof(floatX));
        }
        // the v heads were never touched (the CPU side checks the rotation itself against float64)
        int vsame = 1;
        int64_t QKV = (int64_t)(k.NH + 2 * k.NKV) * k.HD;
        for (int64_t r = 0; r < (int64_t)k.B * k.T; r++)
            vsame &= memcmp(xg + r * QKV + (k.NH + k.NKV) * k.HD, x + r * QKV + (k.NH + k.NKV) * k.HD,
                            sizeof(floatX) * k.NKV * k.HD) == 0;
        CHECK(vsame);
        free(tab); free(x); free(xc); free(xg);
        cudaCheck(cudaFree(dtab)); cudaCheck(cudaFree(dx));
    }
}

// Packed examples: RoPE at positions t - seg (examples of 1-9 tokens, and one to the row's end),
// forward and backward bitwise equal to the CPU.
TEST(gpu_rope_seg) {
    const int B = 2, T = 64, NH = 4, NKV = 2, HD = 32;
    int64_t n = (int64_t)B * T * (NH + 2 * NKV) * HD, ntab = (int64_t)T * HD;
    int seg[B * T];
    for (int b = 0; b < B; b++)
        for (int t = 0, s = 0; t < T; t++) {
            if (t == 0 || (t < 40 && t == s + 1 + (s * 5 + b) % 9)) s = t;
            seg[b * T + t] = s;
        }
    RopeParams p = {HD, 10000.0, ROPE_DEFAULT, 1.0, 0.0, 0.0, 0};
    float* tab = (float*)malloc(sizeof(float) * ntab);
    rope_table(tab, &p, T);
    floatX *x = (floatX*)malloc(sizeof(floatX) * n), *xg = (floatX*)malloc(sizeof(floatX) * n);
    rand_x(x, n, 1.0, 3101);
    float* dtab = (float*)GM_UP(tab, ntab);
    floatX* dx = (floatX*)GM_UP(x, n);
    int* dseg = (int*)GM_UP(seg, B * T);
    for (int bwd = 0; bwd < 2; bwd++) {
        if (bwd) ON_CPU(op_rope_backward(x, tab, seg, B, T, NH, NKV, HD));
        else ON_CPU(op_rope_forward(x, tab, seg, B, T, NH, NKV, HD));
        if (bwd) ON_GPU(op_rope_backward(dx, dtab, dseg, B, T, NH, NKV, HD));
        else ON_GPU(op_rope_forward(dx, dtab, dseg, B, T, NH, NKV, HD));
        GM_DOWN(xg, dx, n);
        gm_bitwise(bwd ? "rope bwd with seg (after fwd)" : "rope fwd with seg", xg, x, n, sizeof(floatX));
    }
    free(tab); free(x); free(xg);
    cudaCheck(cudaFree(dtab)); cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dseg));
}

// SwiGLU forward and backward (dgu written, "=": the device buffer starts as NaN).
TEST(gpu_swiglu) {
    const GlShape shapes[] = {{5, 13}, {37, 352}, {GPU_BIG(2048, 64), 8192}}; // odd F; llama-tiny's F; Llama 3 8B's
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int N = shapes[si].N, F = shapes[si].C;
        int64_t NF = (int64_t)N * F;
        floatX *gu = (floatX*)malloc(sizeof(floatX) * 2 * NF), *dout = (floatX*)malloc(sizeof(floatX) * NF);
        rand_x(gu, 2 * NF, 2.0, 3101 + si);
        rand_x(dout, NF, 1.0, 3201 + si);
        floatX *out_c = (floatX*)malloc(sizeof(floatX) * NF), *dgu_c = (floatX*)malloc(sizeof(floatX) * 2 * NF);
        floatX *out_g = (floatX*)malloc(sizeof(floatX) * NF), *dgu_g = (floatX*)malloc(sizeof(floatX) * 2 * NF);
        floatX* dgu_g2 = (floatX*)malloc(sizeof(floatX) * 2 * NF);
        ON_CPU(op_swiglu_forward(out_c, gu, N, F));
        ON_CPU(op_swiglu_backward(dgu_c, dout, gu, N, F));
        floatX *dgu_in = (floatX*)GM_UP(gu, 2 * NF), *ddout = (floatX*)GM_UP(dout, NF);
        floatX *dout_fwd = (floatX*)gpu_nans(sizeof(floatX) * NF), *ddgu = (floatX*)gpu_nans(sizeof(floatX) * 2 * NF);
        ON_GPU(op_swiglu_forward(dout_fwd, dgu_in, N, F));
        ON_GPU(op_swiglu_backward(ddgu, ddout, dgu_in, N, F));
        GM_DOWN(out_g, dout_fwd, NF);
        GM_DOWN(dgu_g, ddgu, 2 * NF);
        ON_GPU(op_swiglu_backward(ddgu, ddout, dgu_in, N, F));
        GM_DOWN(dgu_g2, ddgu, 2 * NF);
        char what[96];
        snprintf(what, sizeof(what), "swiglu fwd %dx%d", N, F);
        GPU_COMPARE(what, relerr_x(out_g, out_c, NF), TOL_GPU_FWD);
        snprintf(what, sizeof(what), "swiglu bwd %dx%d dgu", N, F);
        GPU_COMPARE(what, relerr_x(dgu_g, dgu_c, 2 * NF), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "swiglu bwd %dx%d dgu, run twice", N, F);
        gm_bitwise(what, dgu_g2, dgu_g, 2 * NF, sizeof(floatX));
        free(gu); free(dout); free(out_c); free(dgu_c); free(out_g); free(dgu_g); free(dgu_g2);
        cudaCheck(cudaFree(dgu_in)); cudaCheck(cudaFree(ddout)); cudaCheck(cudaFree(dout_fwd)); cudaCheck(cudaFree(ddgu));
    }
}

// The embedding without positions (wpe == NULL, dwpe == NULL): both devices, bitwise.
TEST(gpu_encoder_no_positions) {
    const int B = 3, T = 37, V = 1000;
    const int Cs[2] = {19, 128}; // element path, 16-byte path
    for (int ci = 0; ci < 2; ci++) {
        int C = Cs[ci], N = B * T;
        int64_t VC = (int64_t)V * C, NC = (int64_t)N * C;
        int* tok = (int*)malloc(sizeof(int) * N);
        gm_tokens(tok, N, V, 0, 3300 + ci);
        floatX *wte = (floatX*)malloc(sizeof(floatX) * VC), *dout = (floatX*)malloc(sizeof(floatX) * NC);
        rand_x(wte, VC, 0.1, 3400 + ci);
        rand_x(dout, NC, 1.0, 3500 + ci);
        floatX *out_c = (floatX*)malloc(sizeof(floatX) * NC), *out_g = (floatX*)malloc(sizeof(floatX) * NC);
        float *dwte_c = (float*)calloc(VC, 4), *dwte_g = (float*)malloc(4 * VC);
        ON_CPU(op_encoder_forward(out_c, tok, NULL, wte, NULL, B, T, C));
        ON_CPU(op_encoder_backward(dwte_c, NULL, dout, tok, NULL, B, T, C, V));
        int* dtok = (int*)GM_UP(tok, N);
        floatX *dwte_p = (floatX*)GM_UP(wte, VC), *ddout = (floatX*)GM_UP(dout, NC);
        floatX* dout_fwd = (floatX*)gpu_nans(sizeof(floatX) * NC);
        float* ddwte = (float*)gpu_zeros(4 * VC);
        ON_GPU(op_encoder_forward(dout_fwd, dtok, NULL, dwte_p, NULL, B, T, C));
        ON_GPU(op_encoder_backward(ddwte, NULL, ddout, dtok, NULL, B, T, C, V));
        GM_DOWN(out_g, dout_fwd, NC);
        GM_DOWN(dwte_g, ddwte, VC);
        char what[96];
        snprintf(what, sizeof(what), "encoder, no positions, fwd C %d", C);
        gm_bitwise(what, out_g, out_c, NC, sizeof(floatX));
        snprintf(what, sizeof(what), "encoder, no positions, dwte C %d", C);
        gm_bitwise(what, dwte_g, dwte_c, VC, 4);
        int rows = 1;
        for (int i = 0; i < N; i++) rows &= memcmp(out_c + (int64_t)i * C, wte + (int64_t)tok[i] * C, sizeof(floatX) * C) == 0;
        CHECK(rows);
        free(tok); free(wte); free(dout); free(out_c); free(out_g); free(dwte_c); free(dwte_g);
        cudaCheck(cudaFree(dtok)); cudaCheck(cudaFree(dwte_p)); cudaCheck(cudaFree(ddout)); cudaCheck(cudaFree(dout_fwd));
        cudaCheck(cudaFree(ddwte));
    }
}
