// test/gpu_attention.h — GPU-vs-CPU cases (see test/test_gpu.cu for the helpers).
//
// Causal attention, FlashAttention-2 style (ops/attention.cuh): the forward's out and lse, and the
// backward's dq, dk, dv (compared apart: dk and dv come from one kernel, dq from another). The
// backward of both devices reads the CPU forward's out and lse, so a forward error cannot hide in
// it. GPU outputs start as NaN (all bits set), so an element a kernel forgets to write fails.
// Shapes: T of one row, T not a multiple of any tile (the tiles are 16 and 32 rows), odd head
// sizes, GPT-2's, and the largest head sizes the kernels' shared memory is sized for.

// ||a - b|| / ||b|| over one third (0: q, 1: k, 2: v) of (N, 3C) tensors.
static double att_relerr_third(const floatX* a, const floatX* b, int64_t N, int C, int third) {
    floatX* pa = (floatX*)malloc((size_t)N * C * sizeof(floatX));
    floatX* pb = (floatX*)malloc((size_t)N * C * sizeof(floatX));
    for (int64_t n = 0; n < N; n++) {
        memcpy(pa + n * C, a + n * 3 * C + (int64_t)third * C, (size_t)C * sizeof(floatX));
        memcpy(pb + n * C, b + n * 3 * C + (int64_t)third * C, (size_t)C * sizeof(floatX));
    }
    double e = relerr_x(pa, pb, N * C);
    free(pa);
    free(pb);
    return e;
}

// One shape: forward and backward on both devices, compared.
static void gpu_attention_case(int B, int T, int NH, int HS, uint64_t seed) {
    int C = NH * HS;
    int64_t nqkv = (int64_t)B * T * 3 * C, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T;
    size_t bqkv = nqkv * sizeof(floatX), bout = nout * sizeof(floatX), blse = nlse * sizeof(float);
    printf("    shape B=%d T=%d NH=%d HS=%d\n", B, T, NH, HS);
    // host: inputs, the CPU's results, the GPU's results
    floatX* qkv = (floatX*)malloc(bqkv);
    floatX* dout = (floatX*)malloc(bout);
    floatX* out = (floatX*)malloc(bout);
    float* lse = (float*)malloc(blse);
    floatX* dqkv = (floatX*)malloc(bqkv);
    floatX* g_out = (floatX*)malloc(bout);
    float* g_lse = (float*)malloc(blse);
    floatX* g_dqkv = (floatX*)malloc(bqkv);
    rand_x(qkv, nqkv, 1.0, seed);
    rand_x(dout, nout, 1.0, seed + 1);
    ON_CPU(op_attention_forward(out, lse, qkv, B, T, C, NH));
    ON_CPU(op_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH));

    // forward
    floatX* d_qkv = (floatX*)gpu_copy_of(qkv, bqkv);
    floatX* d_out = (floatX*)gpu_zeros(bout);
    float* d_lse = (float*)gpu_zeros(blse);
    gpu_fill(d_out, 0xFF, bout); // NaN: unwritten elements fail
    gpu_fill(d_lse, 0xFF, blse);
    ON_GPU(op_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH));
    gpu_to_host(g_out, d_out, bout);
    gpu_to_host(g_lse, d_lse, blse);
    GPU_COMPARE("attention forward out", relerr_x(g_out, out, nout), TOL_GPU_FWD);
    GPU_COMPARE("attention forward lse", relerr_f(g_lse, lse, nlse), TOL_GPU_FWD);

    // backward, from the CPU's out and lse
    floatX* d_dout = (floatX*)gpu_copy_of(dout, bout);
    floatX* d_outc = (floatX*)gpu_copy_of(out, bout);
    float* d_lsec = (float*)gpu_copy_of(lse, blse);
    floatX* d_dqkv = (floatX*)gpu_zeros(bqkv);
    gpu_fill(d_dqkv, 0xFF, bqkv);
    ON_GPU(op_attention_backward(d_dqkv, d_dout, d_qkv, d_outc, d_lsec, B, T, C, NH));
    gpu_to_host(g_dqkv, d_dqkv, bqkv);
    GPU_COMPARE("attention backward dq", att_relerr_third(g_dqkv, dqkv, (int64_t)B * T, C, 0), TOL_GPU_BWD);
    GPU_COMPARE("attention backward dk", att_relerr_third(g_dqkv, dqkv, (int64_t)B * T, C, 1), TOL_GPU_BWD);
    GPU_COMPARE("attention backward dv", att_relerr_third(g_dqkv, dqkv, (int64_t)B * T, C, 2), TOL_GPU_BWD);

    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(g_out); free(g_lse); free(g_dqkv);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_outc)); cudaCheck(cudaFree(d_lsec));
    cudaCheck(cudaFree(d_dqkv));
}

// One row: the softmax has a single term, out = v, lse = s_00, dv = dout and dq = dk = 0 exactly on
// the CPU (dP - D = dout.v - dout.out = 0 summed in the same order); the GPU sums D in another
// order, so its dq, dk are rounding noise (~1e-7) and relerr falls back to their absolute norm.
TEST(gpu_attention_t1) { gpu_attention_case(2, 1, 2, 8, 31); }
// Head size 3 (W = 3: odd already), T = 65 = two 32-key tiles and one row.
TEST(gpu_attention_hs3) { gpu_attention_case(1, 65, 2, 3, 32); }
// Head size 7, one head, three sequences of T = 33 (one row past a tile).
TEST(gpu_attention_hs7) { gpu_attention_case(3, 33, 1, 7, 33); }
// Head size 12, T = 200 (6.25 tiles of 32, 12.5 of 16).
TEST(gpu_attention_hs12) { gpu_attention_case(2, 200, 3, 12, 34); }
// GPT-2 small's attention: 12 heads of 64, T = 1024 (emulated: one sequence of 2 heads).
TEST(gpu_attention_gpt2) { gpu_attention_case(GPU_BIG(2, 1), 1024, GPU_BIG(12, 2), 64, 35); }
// The largest head sizes (the shared-memory layouts are sized for HS = 256).
TEST(gpu_attention_hs128) { gpu_attention_case(1, 100, 2, 128, 36); }
TEST(gpu_attention_hs256) { gpu_attention_case(2, 77, 2, 256, 37); }

// Deterministic: the same inputs give the same bits, forward and backward (no atomics).
TEST(gpu_attention_deterministic) {
    const int B = 2, T = 300, NH = 4, HS = 64, C = NH * HS;
    int64_t nqkv = (int64_t)B * T * 3 * C, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T;
    size_t bqkv = nqkv * sizeof(floatX), bout = nout * sizeof(floatX), blse = nlse * sizeof(float);
    floatX* qkv = (floatX*)malloc(bqkv);
    floatX* dout = (floatX*)malloc(bout);
    rand_x(qkv, nqkv, 1.0, 41);
    rand_x(dout, nout, 1.0, 42);
    floatX* d_qkv = (floatX*)gpu_copy_of(qkv, bqkv);
    floatX* d_dout = (floatX*)gpu_copy_of(dout, bout);
    floatX* d_out = (floatX*)gpu_zeros(bout);
    float* d_lse = (float*)gpu_zeros(blse);
    floatX* d_dqkv = (floatX*)gpu_zeros(bqkv);
    unsigned char *out1 = (unsigned char*)malloc(bout), *out2 = (unsigned char*)malloc(bout);
    unsigned char *lse1 = (unsigned char*)malloc(blse), *lse2 = (unsigned char*)malloc(blse);
    unsigned char *dq1 = (unsigned char*)malloc(bqkv), *dq2 = (unsigned char*)malloc(bqkv);
    for (int run = 0; run < 2; run++) {
        gpu_fill(d_out, 0xFF, bout);
        gpu_fill(d_dqkv, 0xFF, bqkv);
        ON_GPU(op_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH));
        ON_GPU(op_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
        gpu_to_host(run ? out2 : out1, d_out, bout);
        gpu_to_host(run ? lse2 : lse1, d_lse, blse);
        gpu_to_host(run ? dq2 : dq1, d_dqkv, bqkv);
    }
    CHECKF(memcmp(out1, out2, bout) == 0, "forward out differs between two runs");
    CHECKF(memcmp(lse1, lse2, blse) == 0, "forward lse differs between two runs");
    CHECKF(memcmp(dq1, dq2, bqkv) == 0, "backward dqkv differs between two runs");
    printf("    two runs, forward and backward: %s\n", memcmp(dq1, dq2, bqkv) == 0 ? "bitwise equal" : "DIFFERENT");
    free(qkv); free(dout); free(out1); free(out2); free(lse1); free(lse2); free(dq1); free(dq2);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dqkv));
}
