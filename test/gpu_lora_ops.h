// test/gpu_lora_ops.h — GPU-vs-CPU cases of LoRA's elementwise ops (ops/lora.cuh; see
// test/test_gpu.cu for the helpers, test/gpu_misc.h for gm_bitwise, GM_UP, GM_DOWN).
//
// What each case expects from the GPU (why, in ops/lora.cuh: the same FP32 operations through _rn
// intrinsics, no FMA contraction, and the counter-based mask computed from the same integers):
//   add_cols, take_cols, add_inplace   bitwise equal to the CPU, outside the column range untouched
//   dropout (forward, and in place)    bitwise equal to the CPU: the same mask, the same rn(x / (1-p))
//   dropout through the GELU           the same mask (the zeros exactly where the CPU's are), values
//                                      within TOL_GPU_BWD (gelu' uses tanhf: the device's may differ
//                                      from the host's by an ulp), deterministic run to run

typedef struct { int64_t N, ld, col0, cols; } GloShape;
// odd sizes (a fused projection's middle rows: q_proj of q;k;v), and a GPT-2 small c_attn's
static const GloShape glo_shapes[] = {{7, 29, 5, 11}, {GPU_BIG(2048, 64), 3 * 768, 768, 768}};

// out[:, col0 .. col0 + cols) += scale * v; take_cols: dv = scale * dout[:, cols]; add_inplace.
TEST(gpu_lora_cols_ops) {
    for (size_t si = 0; si < sizeof(glo_shapes) / sizeof(glo_shapes[0]); si++) {
        const GloShape sh = glo_shapes[si];
        int64_t no = sh.N * sh.ld, nv = sh.N * sh.cols;
        const float scale = 2.5f;
        floatX *out0 = (floatX*)malloc(sizeof(floatX) * no), *v = (floatX*)malloc(sizeof(floatX) * nv);
        floatX *out_c = (floatX*)malloc(sizeof(floatX) * no), *out_g = (floatX*)malloc(sizeof(floatX) * no);
        floatX *dv_c = (floatX*)malloc(sizeof(floatX) * nv), *dv_g = (floatX*)malloc(sizeof(floatX) * nv);
        floatX *acc_c = (floatX*)malloc(sizeof(floatX) * nv), *acc_g = (floatX*)malloc(sizeof(floatX) * nv);
        rand_x(out0, no, 1.0, 3101 + si);
        rand_x(v, nv, 1.0, 3201 + si);
        memcpy(out_c, out0, sizeof(floatX) * no);
        ON_CPU(op_lora_add_cols(out_c, sh.ld, sh.col0, v, sh.N, sh.cols, scale));
        ON_CPU(op_lora_take_cols(dv_c, out0, sh.ld, sh.col0, sh.N, sh.cols, scale));
        memcpy(acc_c, v, sizeof(floatX) * nv);
        ON_CPU(op_add_inplace(acc_c, dv_c, nv));
        floatX *dout = (floatX*)GM_UP(out0, no), *dv = (floatX*)GM_UP(v, nv), *ddv = (floatX*)gpu_nans(sizeof(floatX) * nv);
        floatX* dacc = (floatX*)GM_UP(v, nv);
        ON_GPU(op_lora_take_cols(ddv, dout, sh.ld, sh.col0, sh.N, sh.cols, scale)); // (reads out0 before the add)
        ON_GPU(op_lora_add_cols(dout, sh.ld, sh.col0, dv, sh.N, sh.cols, scale));
        ON_GPU(op_add_inplace(dacc, ddv, nv));
        GM_DOWN(out_g, dout, no);
        GM_DOWN(dv_g, ddv, nv);
        GM_DOWN(acc_g, dacc, nv);
        char what[96];
        snprintf(what, sizeof(what), "lora add_cols %lldx%lld [%lld,+%lld)", (long long)sh.N, (long long)sh.ld, (long long)sh.col0, (long long)sh.cols);
        gm_bitwise(what, out_g, out_c, no, sizeof(floatX)); // (the other columns: out0's, on both)
        snprintf(what, sizeof(what), "lora take_cols %lldx%lld", (long long)sh.N, (long long)sh.cols);
        gm_bitwise(what, dv_g, dv_c, nv, sizeof(floatX));
        snprintf(what, sizeof(what), "add_inplace %lld", (long long)nv);
        gm_bitwise(what, acc_g, acc_c, nv, sizeof(floatX));
        int64_t changed = 0; // the op did something (an op that wrote nothing would compare equal to out0)
        for (int64_t i = 0; i < no; i++) changed += memcmp(&out_c[i], &out0[i], sizeof(floatX)) != 0;
        CHECKF(changed > nv / 2, "add_cols changed %lld of %lld elements", (long long)changed, (long long)nv);
        free(out0); free(v); free(out_c); free(out_g); free(dv_c); free(dv_g); free(acc_c); free(acc_g);
        cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(dv)); cudaCheck(cudaFree(ddv)); cudaCheck(cudaFree(dacc));
    }
}

// -lora-dropout's op: the forward x -> dropout(x) (and in place: the backward's use), bitwise; through
// the GELU's derivative (GPT-2's MLP c_proj input), the same mask and values within TOL_GPU_BWD.
// T = 3 makes rows of several samples (the mask is keyed by sample position and token).
TEST(gpu_lora_dropout) {
    for (size_t si = 0; si < sizeof(glo_shapes) / sizeof(glo_shapes[0]); si++) {
        const GloShape sh = glo_shapes[si];
        int64_t N = sh.N, cols = sh.ld, n = N * cols;
        const float p = 0.3f;
        LoraDrop k = {rng_key(1337, LORA_DROP_LABEL, 3), 41, 3, lora_drop_threshold(p), 1.0f / (1.0f - p)};
        floatX *x = (floatX*)malloc(sizeof(floatX) * n), *pre = (floatX*)malloc(sizeof(floatX) * n);
        floatX *y_c = (floatX*)malloc(sizeof(floatX) * n), *y_g = (floatX*)malloc(sizeof(floatX) * n);
        floatX *z_c = (floatX*)malloc(sizeof(floatX) * n), *z_g = (floatX*)malloc(sizeof(floatX) * n), *z_g2 = (floatX*)malloc(sizeof(floatX) * n);
        rand_x(x, n, 1.0, 3301 + si);
        rand_x(pre, n, 2.0, 3401 + si);
        ON_CPU(op_lora_dropout(y_c, x, NULL, N, cols, k));
        ON_CPU(op_lora_dropout(z_c, x, pre, N, cols, k));
        floatX *dx = (floatX*)GM_UP(x, n), *dpre = (floatX*)GM_UP(pre, n), *dy = (floatX*)gpu_nans(sizeof(floatX) * n);
        floatX* dz = (floatX*)gpu_nans(sizeof(floatX) * n);
        ON_GPU(op_lora_dropout(dy, dx, NULL, N, cols, k));
        GM_DOWN(y_g, dy, n);
        char what[96];
        snprintf(what, sizeof(what), "lora dropout %lldx%lld p %.1f", (long long)N, (long long)cols, (double)p);
        gm_bitwise(what, y_g, y_c, n, sizeof(floatX));
        ON_GPU(op_lora_dropout(dx, dx, NULL, N, cols, k)); // in place, as the backward runs it
        GM_DOWN(y_g, dx, n);
        snprintf(what, sizeof(what), "lora dropout %lldx%lld in place", (long long)N, (long long)cols);
        gm_bitwise(what, y_g, y_c, n, sizeof(floatX));
        for (int run = 0; run < 2; run++) {
            gpu_upload(dx, x, sizeof(floatX) * n);
            ON_GPU(op_lora_dropout(dz, dx, dpre, N, cols, k));
            GM_DOWN(run ? z_g2 : z_g, dz, n);
        }
        int64_t zeros_c = 0, mism = 0;
        for (int64_t i = 0; i < n; i++) {
            zeros_c += ld(y_c[i]) == 0.0f && ld(x[i]) != 0.0f; // dropped on the CPU
            mism += (ld(z_g[i]) == 0.0f) != (ld(z_c[i]) == 0.0f); // zero on one device only
        }
        snprintf(what, sizeof(what), "lora dropout * gelu' %lldx%lld", (long long)N, (long long)cols);
        GPU_COMPARE(what, relerr_x(z_g, z_c, n), TOL_GPU_BWD);
        CHECKF(mism == 0, "%s: %lld elements zero on one device only", what, (long long)mism);
        snprintf(what, sizeof(what), "lora dropout * gelu' run twice");
        gm_bitwise(what, z_g2, z_g, n, sizeof(floatX));
        double rate = (double)zeros_c / n;
        CHECKF(fabs(rate - p) < 6.0 * sqrt(p * (1 - p) / n) + 1e-6, "dropped %.4f of %lld, p %.2f", rate, (long long)n, (double)p);
        printf("    dropped %.4f of %lld elements (p %.2f), the same ones on both devices\n", rate, (long long)n, (double)p);
        free(x); free(pre); free(y_c); free(y_g); free(z_c); free(z_g); free(z_g2);
        cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dpre)); cudaCheck(cudaFree(dy)); cudaCheck(cudaFree(dz));
    }
}
