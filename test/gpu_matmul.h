// test/gpu_matmul.h — GPU-vs-CPU cases (see test/test_gpu.cu for the helpers): matmul + bias
// (+ GELU) forward and backward through cuBLASLt, the bias gradient, GELU, the LM head's softmax
// cross-entropy.
//
// Each matmul case runs on both devices: forward (out, and pre with GELU), then backward twice from
// nonzero FP32 gradients (dweight and dbias must be added to, across micro-steps: a "+=" that became
// "=" shows as an error of order 1), the second time without dinp (dinp may be NULL). Then the GPU
// side runs again from the same start and must give the same bits (the algorithm is chosen once per
// shape). The printed names carry the shape, so a failing line says which GEMM to look at.

// The same host data for every case of a shape.
typedef struct {
    int N, C, OC, bias, gelu;
    floatX *inp, *weight, *bvec, *dout, *pre_inp;     // host inputs
    float *dw0, *db0;                                 // host starting gradients (nonzero)
} MatmulCase;

static MatmulCase matmul_case_make(int N, int C, int OC, int bias, int gelu, uint64_t seed) {
    MatmulCase m;
    memset(&m, 0, sizeof(m));
    m.N = N; m.C = C; m.OC = OC; m.bias = bias; m.gelu = gelu;
    m.inp = (floatX*)malloc(sizeof(floatX) * N * C);
    m.weight = (floatX*)malloc(sizeof(floatX) * OC * C);
    m.bvec = (floatX*)malloc(sizeof(floatX) * OC);
    m.dout = (floatX*)malloc(sizeof(floatX) * N * OC);
    m.pre_inp = (floatX*)malloc(sizeof(floatX) * N * C);
    m.dw0 = (float*)malloc(sizeof(float) * OC * C);
    m.db0 = (float*)malloc(sizeof(float) * OC);
    rand_x(m.inp, (int64_t)N * C, 1.0, seed + 1);
    rand_x(m.weight, (int64_t)OC * C, 1.0 / sqrt((double)C), seed + 2); // pre-activations ~ N(0, 1)
    rand_x(m.bvec, OC, 0.5, seed + 3);
    rand_x(m.dout, (int64_t)N * OC, 1.0, seed + 4);
    rand_x(m.pre_inp, (int64_t)N * C, 1.5, seed + 5);
    // starting gradients of the size of one backward's contribution (~ sqrt(N)), so that a lost
    // accumulation is an error of order 1
    rand_f(m.dw0, (int64_t)OC * C, sqrt((double)N), seed + 6);
    rand_f(m.db0, OC, sqrt((double)N), seed + 7);
    return m;
}

static void matmul_case_free(MatmulCase* m) {
    free(m->inp); free(m->weight); free(m->bvec); free(m->dout); free(m->pre_inp); free(m->dw0); free(m->db0);
}

// Outputs of one device's run: forward, then two backwards.
typedef struct {
    floatX *out, *pre, *dinp;
    float *dw1, *db1, *dw2, *db2; // after the first and the second backward
} MatmulResult;

static MatmulResult matmul_result_alloc(const MatmulCase* m) {
    MatmulResult r;
    r.out = (floatX*)calloc((size_t)m->N * m->OC, sizeof(floatX));
    r.pre = (floatX*)calloc((size_t)m->N * m->OC, sizeof(floatX));
    r.dinp = (floatX*)calloc((size_t)m->N * m->C, sizeof(floatX));
    r.dw1 = (float*)calloc((size_t)m->OC * m->C, sizeof(float));
    r.dw2 = (float*)calloc((size_t)m->OC * m->C, sizeof(float));
    r.db1 = (float*)calloc((size_t)m->OC, sizeof(float));
    r.db2 = (float*)calloc((size_t)m->OC, sizeof(float));
    return r;
}

static void matmul_result_free(MatmulResult* r) {
    free(r->out); free(r->pre); free(r->dinp); free(r->dw1); free(r->dw2); free(r->db1); free(r->db2);
}

// The CPU reference on host buffers.
static void matmul_run_cpu(const MatmulCase* m, MatmulResult* r) {
    int N = m->N, C = m->C, OC = m->OC;
    const floatX* bias = m->bias ? m->bvec : NULL;
    const floatX* pre_inp = m->gelu ? m->pre_inp : NULL;
    memcpy(r->dw1, m->dw0, sizeof(float) * OC * C);
    memcpy(r->db1, m->db0, sizeof(float) * OC);
    ON_CPU(op_matmul_forward(r->out, m->gelu ? r->pre : NULL, m->inp, m->weight, bias, N, C, OC));
    ON_CPU(op_matmul_backward(r->dinp, r->dw1, m->bias ? r->db1 : NULL, m->dout, m->inp, m->weight, pre_inp, N, C, OC));
    memcpy(r->dw2, r->dw1, sizeof(float) * OC * C);
    memcpy(r->db2, r->db1, sizeof(float) * OC);
    ON_CPU(op_matmul_backward(NULL, r->dw2, m->bias ? r->db2 : NULL, m->dout, m->inp, m->weight, pre_inp, N, C, OC));
}

// The same on the GPU. misalign shifts every device pointer by one element (2 bytes in BF16), to
// exercise cuBLASLt's algorithm choice for poorly aligned operands.
static void matmul_run_gpu(const MatmulCase* m, MatmulResult* r, int misalign) {
    int N = m->N, C = m->C, OC = m->OC, s = misalign ? 1 : 0;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    floatX* d_inp = (floatX*)gpu_zeros(sizeof(floatX) * (nx + s));
    floatX* d_w = (floatX*)gpu_zeros(sizeof(floatX) * (nw + s));
    floatX* d_b = (floatX*)gpu_zeros(sizeof(floatX) * (OC + s));
    floatX* d_dout = (floatX*)gpu_zeros(sizeof(floatX) * (no + s));
    floatX* d_pin = (floatX*)gpu_zeros(sizeof(floatX) * (nx + s));
    floatX* d_out = (floatX*)gpu_nans(sizeof(floatX) * (no + s)); // "=" outputs start as NaN
    floatX* d_pre = (floatX*)gpu_nans(sizeof(floatX) * (no + s));
    floatX* d_dinp = (floatX*)gpu_nans(sizeof(floatX) * (nx + s));
    float* d_dw = (float*)gpu_zeros(sizeof(float) * (nw + s));
    float* d_db = (float*)gpu_zeros(sizeof(float) * (OC + s));
    gpu_upload(d_inp + s, m->inp, sizeof(floatX) * nx);
    gpu_upload(d_w + s, m->weight, sizeof(floatX) * nw);
    gpu_upload(d_b + s, m->bvec, sizeof(floatX) * OC);
    gpu_upload(d_dout + s, m->dout, sizeof(floatX) * no);
    gpu_upload(d_pin + s, m->pre_inp, sizeof(floatX) * nx);
    gpu_upload(d_dw + s, m->dw0, sizeof(float) * nw);
    gpu_upload(d_db + s, m->db0, sizeof(float) * OC);
    const floatX* bias = m->bias ? d_b + s : NULL;
    const floatX* pre_inp = m->gelu ? d_pin + s : NULL;
    float* dbias = m->bias ? d_db + s : NULL;
    ON_GPU(op_matmul_forward(d_out + s, m->gelu ? d_pre + s : NULL, d_inp + s, d_w + s, bias, N, C, OC));
    gpu_to_host(r->out, d_out + s, sizeof(floatX) * no);
    gpu_to_host(r->pre, d_pre + s, sizeof(floatX) * no);
    ON_GPU(op_matmul_backward(d_dinp + s, d_dw + s, dbias, d_dout + s, d_inp + s, d_w + s, pre_inp, N, C, OC));
    gpu_to_host(r->dinp, d_dinp + s, sizeof(floatX) * nx);
    gpu_to_host(r->dw1, d_dw + s, sizeof(float) * nw);
    gpu_to_host(r->db1, d_db + s, sizeof(float) * OC);
    ON_GPU(op_matmul_backward(NULL, d_dw + s, dbias, d_dout + s, d_inp + s, d_w + s, pre_inp, N, C, OC));
    gpu_to_host(r->dw2, d_dw + s, sizeof(float) * nw);
    gpu_to_host(r->db2, d_db + s, sizeof(float) * OC);
    void* bufs[] = {d_inp, d_w, d_b, d_dout, d_pin, d_out, d_pre, d_dinp, d_dw, d_db};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}

// One shape: GPU against CPU, then the GPU twice (same bits). tag names the case in the output.
static void check_matmul(const char* tag, int N, int C, int OC, int bias, int gelu, int misalign) {
    char what[160];
    printf("    %s: N=%d C=%d OC=%d%s%s%s\n", tag, N, C, OC, bias ? " +bias" : "", gelu ? " +GELU" : "",
           misalign ? " (pointers misaligned by one element)" : "");
    MatmulCase m = matmul_case_make(N, C, OC, bias, gelu, 1000u + (uint64_t)N * 7 + C * 3 + OC);
    MatmulResult cpu = matmul_result_alloc(&m), gpu = matmul_result_alloc(&m), again = matmul_result_alloc(&m);
    matmul_run_cpu(&m, &cpu);
    matmul_run_gpu(&m, &gpu, misalign);
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
#define MM_NAME(s) (snprintf(what, sizeof(what), "%s %s", tag, s), what)
    GPU_COMPARE(MM_NAME(gelu ? "forward out = gelu(pre)" : "forward out"), relerr_x(gpu.out, cpu.out, no), TOL_GPU_FWD);
    if (gelu) GPU_COMPARE(MM_NAME("forward pre"), relerr_x(gpu.pre, cpu.pre, no), TOL_GPU_FWD);
    GPU_COMPARE(MM_NAME(gelu ? "dinp (with gelu')" : "dinp"), relerr_x(gpu.dinp, cpu.dinp, nx), TOL_GPU_BWD);
    GPU_COMPARE(MM_NAME("dweight after 1 backward (+=)"), relerr_f(gpu.dw1, cpu.dw1, nw), TOL_GPU_BWD);
    GPU_COMPARE(MM_NAME("dweight after 2 backwards (+=)"), relerr_f(gpu.dw2, cpu.dw2, nw), TOL_GPU_BWD);
    if (bias) {
        GPU_COMPARE(MM_NAME("dbias after 1 backward (+=)"), relerr_f(gpu.db1, cpu.db1, OC), TOL_GPU_BWD);
        GPU_COMPARE(MM_NAME("dbias after 2 backwards (+=)"), relerr_f(gpu.db2, cpu.db2, OC), TOL_GPU_BWD);
    }
#undef MM_NAME
    // determinism: the same inputs give the same bits
    matmul_run_gpu(&m, &again, misalign);
    int same_fwd = !memcmp(gpu.out, again.out, sizeof(floatX) * no) && !memcmp(gpu.pre, again.pre, sizeof(floatX) * no);
    int same_dinp = !memcmp(gpu.dinp, again.dinp, sizeof(floatX) * nx);
    int same_dw = !memcmp(gpu.dw2, again.dw2, sizeof(float) * nw) && !memcmp(gpu.dw1, again.dw1, sizeof(float) * nw);
    int same_db = !memcmp(gpu.db2, again.db2, sizeof(float) * OC);
    printf("    %s deterministic: forward %s, dinp %s, dweight %s, dbias %s\n", tag, same_fwd ? "ok" : "FAIL",
           same_dinp ? "ok" : "FAIL", same_dw ? "ok" : "FAIL", same_db ? "ok" : "FAIL");
    CHECKF(same_fwd && same_dinp && same_dw && same_db, "%s: two GPU runs differ", tag);
    matmul_result_free(&cpu); matmul_result_free(&gpu); matmul_result_free(&again);
    matmul_case_free(&m);
}

// Odd sizes (N=7, C=13, OC=11): leading dimensions that are not multiples of 8 elements. cuBLASLt
// is asked for algorithms at the pointers' real alignment; where it has none, the simple kernel
// runs (a note on stderr says so). Both are checked: the second half forces the simple kernel.
TEST(gpu_matmul_odd_shapes) {
    check_matmul("odd", 7, 13, 11, 1, 0, 0);
    check_matmul("odd", 7, 13, 11, 0, 0, 0);
    check_matmul("odd", 7, 13, 11, 1, 1, 0);
    check_matmul("small", 64, 40, 24, 1, 1, 0); // multiples of 8 elements: cuBLASLt's aligned kernels
    g_matmul_force_simple = 1;
    check_matmul("odd simple-kernel", 7, 13, 11, 1, 1, 0);
    check_matmul("odd simple-kernel", 33, 16, 24, 0, 0, 0);
    g_matmul_force_simple = 0;
}

// GPT-2 small's layer GEMMs at B*T = 4096 rows: qkv (OC=3C), attention projection (OC=C),
// fc (OC=4C, GELU) and fc projection (C=4C in, OC=C). A case with GELU applies it on both sides
// (forward GELU and the backward's gelu' of a pre_inp): the op's contract, not one layer's exact use.
// These must run through cuBLASLt, never the simple kernel.
TEST(gpu_matmul_gpt2_layer) {
    int simple_before = g_matmul_simple_plans;
    const int N = GPU_BIG(4096, 256);
    check_matmul("qkv", N, 768, 2304, 1, 0, 0);
    check_matmul("attproj", N, 768, 768, 1, 0, 0);
    check_matmul("fc", N, 768, 3072, 1, 1, 0);
    check_matmul("fcproj", N, 3072, 768, 1, 1, 0);
    CHECKF(g_matmul_simple_plans == simple_before, "%d GPT-2 GEMMs had no cuBLASLt algorithm (see the notes above)",
           g_matmul_simple_plans - simple_before);
}

// GPT-2's LM head GEMMs: logits (N, Vp) = lnf @ wte^T, no bias; backward dlnf (K = Vp) and dwte.
// N = 1024 rows, not 4096: the CPU reference (~0.3 TFLOP per GEMM at N = 4096) and the host's
// serial random numbers (N * Vp of them for dout) would take most of a GPU session's minutes; the
// GEMMs' long dimensions (Vp = 50304 and K = Vp for dlnf) are the real ones.
TEST(gpu_matmul_lm_head) {
    int simple_before = g_matmul_simple_plans;
    check_matmul("lm head", GPU_BIG(1024, 64), 768, 50304, 0, 0, 0);
    CHECKF(g_matmul_simple_plans == simple_before, "the LM head GEMMs had no cuBLASLt algorithm (see the notes above)");
}

// The test hook FAULT(drop_bias_grad) silences the bias gradient on the GPU as on the CPU.
TEST(gpu_matmul_fault_drop_bias_grad) {
    MatmulCase m = matmul_case_make(16, 8, 8, 1, 0, 77);
    MatmulResult gpu = matmul_result_alloc(&m);
    g_fault_drop_bias_grad = 1;
    matmul_run_gpu(&m, &gpu, 0);
    g_fault_drop_bias_grad = 0;
    CHECKF(!memcmp(gpu.db2, m.db0, sizeof(float) * m.OC), "dbias changed although drop_bias_grad is set");
    matmul_result_free(&gpu);
    matmul_case_free(&m);
}

// op_gelu_forward (the recompute of -r 1) on its own, and bitwise equal to the forward's GELU.
TEST(gpu_gelu_forward) {
    const int N = 257, OC = 96, C = 32; // N*OC not a multiple of the block size
    MatmulCase m = matmul_case_make(N, C, OC, 1, 1, 99);
    size_t no = (size_t)N * OC;
    floatX* pre = (floatX*)malloc(sizeof(floatX) * no);
    floatX* out_cpu = (floatX*)malloc(sizeof(floatX) * no);
    floatX* out_gpu = (floatX*)malloc(sizeof(floatX) * no);
    floatX* out_fwd = (floatX*)malloc(sizeof(floatX) * no);
    rand_x(pre, (int64_t)no, 2.0, 5);
    ON_CPU(op_gelu_forward(out_cpu, pre, (int64_t)no));
    floatX* d_pre = (floatX*)gpu_copy_of(pre, sizeof(floatX) * no);
    floatX* d_out = (floatX*)gpu_nans(sizeof(floatX) * no);
    ON_GPU(op_gelu_forward(d_out, d_pre, (int64_t)no));
    gpu_to_host(out_gpu, d_out, sizeof(floatX) * no);
    GPU_COMPARE("gelu forward", relerr_x(out_gpu, out_cpu, (int64_t)no), TOL_GPU_FWD);
    // the matmul's GELU output equals op_gelu_forward of its pre-activation, bit for bit
    floatX* d_inp = (floatX*)gpu_copy_of(m.inp, sizeof(floatX) * N * C);
    floatX* d_w = (floatX*)gpu_copy_of(m.weight, sizeof(floatX) * OC * C);
    floatX* d_b = (floatX*)gpu_copy_of(m.bvec, sizeof(floatX) * OC);
    ON_GPU(op_matmul_forward(d_out, d_pre, d_inp, d_w, d_b, N, C, OC));
    gpu_to_host(out_fwd, d_out, sizeof(floatX) * no);
    ON_GPU(op_gelu_forward(d_out, d_pre, (int64_t)no));
    gpu_to_host(out_gpu, d_out, sizeof(floatX) * no);
    CHECKF(!memcmp(out_fwd, out_gpu, sizeof(floatX) * no), "recomputed GELU differs from the forward's");
    free(pre); free(out_cpu); free(out_gpu); free(out_fwd);
    void* bufs[] = {d_pre, d_out, d_inp, d_w, d_b};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    matmul_case_free(&m);
}

// ---- LM head + softmax cross-entropy.
// x's rows are one-hot (row n has a 1 in channel n % C), so logits[n, j] = wte[j, n % C] exactly on
// both devices whatever the GEMM's summation order: the classifier kernel is compared on identical
// logits. wte's padded rows V..Vp-1 are zero, as in the model.
// mask_every > 0: every mask_every-th target is -1 (the loss mask: no loss, a zero logits row).
static void check_classifier(int N, int C, int V, int Vp, int write_dlogits, int mask_every = 0) {
    char what[160];
    printf("    classifier N=%d V=%d Vp=%d%s%s\n", N, V, Vp, write_dlogits ? ", dlogits" : ", losses only", mask_every ? ", masked targets" : "");
    size_t nl = (size_t)N * Vp;
    floatX* x = (floatX*)malloc(sizeof(floatX) * N * C);
    floatX* wte = (floatX*)malloc(sizeof(floatX) * Vp * C);
    int* targets = (int*)malloc(sizeof(int) * N);
    for (int64_t i = 0; i < (int64_t)N * C; i++) x[i] = rn(0.0f);
    for (int n = 0; n < N; n++) x[(int64_t)n * C + n % C] = rn(1.0f);
    rand_x(wte, (int64_t)Vp * C, 2.0, 31);
    for (int64_t i = (int64_t)V * C; i < (int64_t)Vp * C; i++) wte[i] = rn(0.0f);
    uint64_t key = rng_key(32, 0x544752ull, (uint64_t)N);
    for (int n = 0; n < N; n++) targets[n] = mask_every && n % mask_every == 0 ? -1 : (int)(rng_u64(key, (uint64_t)n) % (uint64_t)V);
    float dloss = 1.0f / N;
    floatX* logits_cpu = (floatX*)malloc(sizeof(floatX) * nl);
    floatX* logits_gpu = (floatX*)malloc(sizeof(floatX) * nl);
    floatX* logits_again = (floatX*)malloc(sizeof(floatX) * nl);
    float* losses_cpu = (float*)calloc(N, sizeof(float));
    float* losses_gpu = (float*)calloc(N, sizeof(float));
    float* losses_again = (float*)calloc(N, sizeof(float));
    ON_CPU(op_lm_head_forward(logits_cpu, losses_cpu, x, wte, targets, dloss, write_dlogits, N, C, V, Vp));
    floatX* d_x = (floatX*)gpu_copy_of(x, sizeof(floatX) * N * C);
    floatX* d_wte = (floatX*)gpu_copy_of(wte, sizeof(floatX) * Vp * C);
    int* d_t = (int*)gpu_copy_of(targets, sizeof(int) * N);
    floatX* d_logits = (floatX*)gpu_zeros(sizeof(floatX) * nl);
    float* d_losses = (float*)gpu_zeros(sizeof(float) * N);
    for (int run = 0; run < 2; run++) {
        ON_GPU(op_lm_head_forward(d_logits, d_losses, d_x, d_wte, d_t, dloss, write_dlogits, N, C, V, Vp));
        gpu_to_host(run ? logits_again : logits_gpu, d_logits, sizeof(floatX) * nl);
        gpu_to_host(run ? losses_again : losses_gpu, d_losses, sizeof(float) * N);
    }
    snprintf(what, sizeof(what), "V=%d losses", V);
    GPU_COMPARE(what, relerr_f(losses_gpu, losses_cpu, N), TOL_GPU_FWD);
    snprintf(what, sizeof(what), "V=%d %s", V, write_dlogits ? "dlogits" : "logits (untouched)");
    GPU_COMPARE(what, relerr_x(logits_gpu, logits_cpu, (int64_t)nl), write_dlogits ? TOL_GPU_BWD : TOL_GPU_FWD);
    if (!write_dlogits) // identical logits in, so untouched logits are identical bits
        CHECKF(!memcmp(logits_gpu, logits_cpu, sizeof(floatX) * nl), "V=%d: the logits were changed", V);
    // padded columns: exactly +0 when written (the bits of rn(0.0f) are all zero)
    int64_t nonzero_pad = 0;
    for (int n = 0; n < N; n++) {
        const unsigned char* b = (const unsigned char*)(logits_gpu + (int64_t)n * Vp + V);
        for (size_t i = 0; i < sizeof(floatX) * (Vp - V); i++) nonzero_pad += b[i] != 0;
    }
    CHECKF(nonzero_pad == 0, "V=%d: %lld nonzero bytes in the padded columns", V, (long long)nonzero_pad);
    int64_t masked_nonzero = 0; // masked rows: loss exactly 0, with dlogits a row of +0
    for (int n = 0; n < N; n++) {
        if (targets[n] >= 0) continue;
        masked_nonzero += losses_gpu[n] != 0.0f;
        const unsigned char* b = (const unsigned char*)(logits_gpu + (int64_t)n * Vp);
        for (size_t i = 0; write_dlogits && i < sizeof(floatX) * Vp; i++) masked_nonzero += b[i] != 0;
    }
    CHECKF(masked_nonzero == 0, "V=%d: masked rows have %lld nonzero values", V, (long long)masked_nonzero);
    int same = !memcmp(logits_gpu, logits_again, sizeof(floatX) * nl) && !memcmp(losses_gpu, losses_again, sizeof(float) * N);
    printf("    V=%d deterministic: %s\n", V, same ? "ok" : "FAIL");
    CHECKF(same, "V=%d: two GPU runs differ", V);
    free(x); free(wte); free(targets); free(logits_cpu); free(logits_gpu); free(logits_again);
    free(losses_cpu); free(losses_gpu); free(losses_again);
    void* bufs[] = {d_x, d_wte, d_t, d_logits, d_losses};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}

TEST(gpu_classifier_small) {
    check_classifier(37, 16, 13, 13, 1, 3); // Vp not a whole number of packs: the element path
    check_classifier(37, 16, 13, 16, 1);
    check_classifier(37, 16, 13, 16, 0);
    check_classifier(37, 16, 13, 16, 1, 3);
    check_classifier(37, 16, 13, 16, 0, 3);
}

// B*T*Vp past 2^31 elements (GPT-2's Vp, 42,700 rows: 4.3 GB of BF16 logits): every index into the
// logits must be 64-bit. The GPU computes every row; a sample of rows (the first, those around the
// 2^31 boundary, the last) is compared with the CPU op run on just those rows (rows are independent).
// Under the emulator the rows shrink (GPU_BIG) and the case says it did not pass 2^31.
TEST(gpu_classifier_rows_past_2pow31) {
    const int C = 64, V = 50257, Vp = 50304, N = GPU_BIG(42700, 40);
    const int64_t nl = (int64_t)N * Vp;
    printf("    N=%d rows x Vp=%d = %lld logits (%s 2^31)\n", N, Vp, (long long)nl, nl > 2147483648LL ? "past" : "NOT past: emulator shape,");
    floatX* x = (floatX*)malloc(sizeof(floatX) * (size_t)N * C);
    floatX* wte = (floatX*)malloc(sizeof(floatX) * (size_t)Vp * C);
    int* targets = (int*)malloc(sizeof(int) * N);
    for (int64_t i = 0; i < (int64_t)N * C; i++) x[i] = rn(0.0f);
    for (int n = 0; n < N; n++) x[(int64_t)n * C + n % C] = rn(1.0f);
    rand_x(wte, (int64_t)Vp * C, 2.0, 41);
    for (int64_t i = (int64_t)V * C; i < (int64_t)Vp * C; i++) wte[i] = rn(0.0f);
    uint64_t key = rng_key(42, 0x544752ull, (uint64_t)N);
    for (int n = 0; n < N; n++) targets[n] = (int)(rng_u64(key, (uint64_t)n) % (uint64_t)V);
    // the sample: 8 rows at the start, 8 around row 2^31 / Vp, 8 at the end
    int rows[24], ns = 0, mid = (int)(2147483648LL / Vp);
    for (int i = 0; i < 8; i++) rows[ns++] = i;
    for (int i = -4; i < 4; i++) if (mid + i >= 8 && mid + i < N - 8) rows[ns++] = mid + i;
    for (int i = N - 8; i < N; i++) rows[ns++] = i;
    floatX* sx = (floatX*)malloc(sizeof(floatX) * ns * C);
    int* st = (int*)malloc(sizeof(int) * ns);
    for (int i = 0; i < ns; i++) { memcpy(sx + (int64_t)i * C, x + (int64_t)rows[i] * C, sizeof(floatX) * C); st[i] = targets[rows[i]]; }
    float dloss = 1.0f / N;
    floatX* ref = (floatX*)malloc(sizeof(floatX) * (size_t)ns * Vp);
    float* ref_loss = (float*)malloc(sizeof(float) * ns);
    ON_CPU(op_lm_head_forward(ref, ref_loss, sx, wte, st, dloss, 1, ns, C, V, Vp));
    floatX* d_x = (floatX*)gpu_copy_of(x, sizeof(floatX) * (size_t)N * C);
    floatX* d_wte = (floatX*)gpu_copy_of(wte, sizeof(floatX) * (size_t)Vp * C);
    int* d_t = (int*)gpu_copy_of(targets, sizeof(int) * N);
    floatX* d_logits = (floatX*)gpu_nans(sizeof(floatX) * (size_t)nl);
    float* d_losses = (float*)gpu_nans(sizeof(float) * N);
    ON_GPU(op_lm_head_forward(d_logits, d_losses, d_x, d_wte, d_t, dloss, 1, N, C, V, Vp));
    floatX* got = (floatX*)malloc(sizeof(floatX) * (size_t)ns * Vp);
    float* losses = (float*)malloc(sizeof(float) * N);
    for (int i = 0; i < ns; i++) gpu_to_host(got + (int64_t)i * Vp, d_logits + (int64_t)rows[i] * Vp, sizeof(floatX) * Vp);
    gpu_to_host(losses, d_losses, sizeof(float) * N);
    float* got_loss = (float*)malloc(sizeof(float) * ns);
    for (int i = 0; i < ns; i++) got_loss[i] = losses[rows[i]];
    GPU_COMPARE("sampled rows' losses", relerr_f(got_loss, ref_loss, ns), TOL_GPU_FWD);
    GPU_COMPARE("sampled rows' dlogits", relerr_x(got, ref, (int64_t)ns * Vp), TOL_GPU_BWD);
    int finite = 1;
    for (int n = 0; n < N; n++) finite &= isfinite(losses[n]) && losses[n] > 0.0f;
    CHECKF(finite, "a loss is not finite and positive (a row not written?)");
    free(x); free(wte); free(targets); free(sx); free(st); free(ref); free(ref_loss); free(got); free(losses); free(got_loss);
    void* bufs[] = {d_x, d_wte, d_t, d_logits, d_losses};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}

TEST(gpu_classifier_gpt2) {
    check_classifier(GPU_BIG(1024, 64), 64, 50257, 50304, 1);
    check_classifier(GPU_BIG(256, 32), 64, 50257, 50304, 0);
}

// The classifier's two CUDA paths, the row in shared memory (read once) and the row read from
// global memory three times (rows too long for shared memory), give the same bits: GPT-2's row,
// a short row (tails in the last pack), an unpadded row (not a whole number of packs: the
// element path), each with masked targets, losses only and dlogits.
static void classifier_on_gpu(const floatX* x, const floatX* wte, const int* t, int write_dlogits, int N, int C, int V,
                              int Vp, floatX* logits, float* losses) {
    floatX* d_x = (floatX*)gpu_copy_of(x, sizeof(floatX) * N * C);
    floatX* d_wte = (floatX*)gpu_copy_of(wte, sizeof(floatX) * Vp * C);
    int* d_t = (int*)gpu_copy_of(t, sizeof(int) * N);
    floatX* d_logits = (floatX*)gpu_nans(sizeof(floatX) * (size_t)N * Vp);
    float* d_losses = (float*)gpu_nans(sizeof(float) * N);
    ON_GPU(op_lm_head_forward(d_logits, d_losses, d_x, d_wte, d_t, 1.0f / N, write_dlogits, N, C, V, Vp));
    gpu_to_host(logits, d_logits, sizeof(floatX) * (size_t)N * Vp);
    gpu_to_host(losses, d_losses, sizeof(float) * N);
    void* bufs[] = {d_x, d_wte, d_t, d_logits, d_losses};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}
TEST(gpu_classifier_paths_bitwise) {
    const int shapes[][3] = {{GPU_BIG(64, 12), 50257, 50304}, {37, 13, 16}, {37, 13, 13}}; // N, V, Vp
    const int C = 16;
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        int N = shapes[si][0], V = shapes[si][1], Vp = shapes[si][2];
        floatX* x = (floatX*)malloc(sizeof(floatX) * N * C);
        floatX* wte = (floatX*)malloc(sizeof(floatX) * Vp * C);
        int* t = (int*)malloc(sizeof(int) * N);
        rand_x(x, (int64_t)N * C, 1.0, 51);
        rand_x(wte, (int64_t)Vp * C, 2.0, 52);
        for (int64_t i = (int64_t)V * C; i < (int64_t)Vp * C; i++) wte[i] = rn(0.0f);
        uint64_t key = rng_key(53, 0x544752ull, (uint64_t)N);
        for (int n = 0; n < N; n++) t[n] = n % 5 == 2 ? -1 : (int)(rng_u64(key, (uint64_t)n) % (uint64_t)V);
        size_t nl = (size_t)N * Vp;
        floatX* la = (floatX*)malloc(sizeof(floatX) * nl);
        floatX* lb = (floatX*)malloc(sizeof(floatX) * nl);
        float* sa = (float*)malloc(sizeof(float) * N);
        float* sb = (float*)malloc(sizeof(float) * N);
        for (int w = 0; w <= 1; w++) {
            classifier_on_gpu(x, wte, t, w, N, C, V, Vp, la, sa); // shared memory
            classifier_row_max = 0;                             // every row: from global memory
            classifier_on_gpu(x, wte, t, w, N, C, V, Vp, lb, sb);
            classifier_row_max = SIZE_MAX;
            int same = !memcmp(la, lb, sizeof(floatX) * nl) && !memcmp(sa, sb, sizeof(float) * N);
            printf("    N=%d V=%d Vp=%d %s: shared-memory row and global-memory row %s\n", N, V, Vp,
                   w ? "dlogits" : "losses only", same ? "bitwise equal" : "DIFFER");
            CHECKF(same, "N=%d V=%d Vp=%d write_dlogits=%d: the two classifier paths differ", N, V, Vp, w);
        }
        free(x); free(wte); free(t); free(la); free(lb); free(sa); free(sb);
    }
}

// Without targets the classifier does not run: the logits are the matmul's, untouched.
TEST(gpu_classifier_no_targets) {
    const int N = 9, C = 16, V = 13, Vp = 16;
    floatX* x = (floatX*)malloc(sizeof(floatX) * N * C);
    floatX* wte = (floatX*)malloc(sizeof(floatX) * Vp * C);
    floatX* a = (floatX*)malloc(sizeof(floatX) * N * Vp);
    floatX* b = (floatX*)malloc(sizeof(floatX) * N * Vp);
    rand_x(x, (int64_t)N * C, 1.0, 41);
    rand_x(wte, (int64_t)Vp * C, 1.0, 42);
    floatX* d_x = (floatX*)gpu_copy_of(x, sizeof(floatX) * N * C);
    floatX* d_wte = (floatX*)gpu_copy_of(wte, sizeof(floatX) * Vp * C);
    floatX* d_logits = (floatX*)gpu_zeros(sizeof(floatX) * N * Vp);
    float* d_losses = (float*)gpu_zeros(sizeof(float) * N);
    ON_GPU(op_lm_head_forward(d_logits, d_losses, d_x, d_wte, NULL, 1.0f, 1, N, C, V, Vp));
    gpu_to_host(a, d_logits, sizeof(floatX) * N * Vp);
    ON_GPU(op_matmul_forward(d_logits, NULL, d_x, d_wte, NULL, N, C, Vp));
    gpu_to_host(b, d_logits, sizeof(floatX) * N * Vp);
    CHECKF(!memcmp(a, b, sizeof(floatX) * N * Vp), "logits changed without targets");
    free(x); free(wte); free(a); free(b);
    void* bufs[] = {d_x, d_wte, d_logits, d_losses};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}

// The whole head in chunks (op_classifier): 150 rows in chunks of 64 (the last one 22 rows), every
// 7th target masked, dW accumulated onto a nonzero start. The GPU against the CPU op (losses, dx,
// dW), the GPU's chunked head against its own unchunked one (chunk = N: the one-chunk head),
// a guard past the one-chunk logits buffer untouched, and two GPU runs the same bits.
TEST(gpu_classifier_chunked) {
    const int N = 150, C = 32, V = 500, Vp = 512, chunk = 64, guard = 256;
    floatX* x = (floatX*)malloc(sizeof(floatX) * N * C);
    floatX* w = (floatX*)malloc(sizeof(floatX) * Vp * C);
    int* t = (int*)malloc(sizeof(int) * N);
    float* dw0 = (float*)malloc(sizeof(float) * Vp * C);
    rand_x(x, (int64_t)N * C, 1.0, 51);
    rand_x(w, (int64_t)Vp * C, 1.0 / sqrt((double)C), 52);
    for (int64_t i = (int64_t)V * C; i < (int64_t)Vp * C; i++) w[i] = rn(0.0f);
    for (int n = 0; n < N; n++) t[n] = n % 7 == 3 ? -1 : (n * 37 + 5) % V;
    rand_f(dw0, (int64_t)Vp * C, 0.01, 53); // about the head's contribution: a lost "+=" is an error of order 1, and the
                                            // start's own FP32 rounding stays below the FP32 build's tolerance
    float dloss = 1.0f / N;
    // CPU reference: the chunked head on the CPU device
    floatX* logits = (floatX*)malloc(sizeof(floatX) * chunk * Vp);
    float* l_cpu = (float*)malloc(sizeof(float) * N);
    floatX* dx_cpu = (floatX*)malloc(sizeof(floatX) * N * C);
    float* dw_cpu = (float*)malloc(sizeof(float) * Vp * C);
    memcpy(dw_cpu, dw0, sizeof(float) * Vp * C);
    ON_CPU(op_classifier(logits, l_cpu, dx_cpu, dw_cpu, x, w, t, dloss, N, C, V, Vp, chunk));
    floatX* d_x = (floatX*)gpu_copy_of(x, sizeof(floatX) * N * C);
    floatX* d_w = (floatX*)gpu_copy_of(w, sizeof(floatX) * Vp * C);
    int* d_t = (int*)gpu_copy_of(t, sizeof(int) * N);
    floatX* d_logits = (floatX*)gpu_nans(sizeof(floatX) * ((size_t)N * Vp + guard)); // big enough for one chunk = N
    float* d_l = (float*)gpu_nans(sizeof(float) * N);
    floatX* d_dx = (floatX*)gpu_nans(sizeof(floatX) * N * C);
    float* d_dw = (float*)gpu_zeros(sizeof(float) * Vp * C);
    float* l_gpu[3]; floatX* dx_gpu[3]; float* dw_gpu[3];
    int chunks[3] = {chunk, chunk, N};
    int guard_ok = 1;
    for (int run = 0; run < 3; run++) {
        l_gpu[run] = (float*)malloc(sizeof(float) * N);
        dx_gpu[run] = (floatX*)malloc(sizeof(floatX) * N * C);
        dw_gpu[run] = (float*)malloc(sizeof(float) * Vp * C);
        gpu_upload(d_dw, dw0, sizeof(float) * Vp * C);
        gpu_fill(d_logits + (size_t)chunks[run] * Vp, 0x7F, sizeof(floatX) * guard);
        ON_GPU(op_classifier(d_logits, d_l, d_dx, d_dw, d_x, d_w, d_t, dloss, N, C, V, Vp, chunks[run]));
        gpu_to_host(l_gpu[run], d_l, sizeof(float) * N);
        gpu_to_host(dx_gpu[run], d_dx, sizeof(floatX) * N * C);
        gpu_to_host(dw_gpu[run], d_dw, sizeof(float) * Vp * C);
        unsigned char* g = (unsigned char*)malloc(sizeof(floatX) * guard);
        gpu_to_host(g, d_logits + (size_t)chunks[run] * Vp, sizeof(floatX) * guard);
        for (size_t i = 0; i < sizeof(floatX) * guard; i++) guard_ok &= g[i] == 0x7F;
        free(g);
    }
    CHECKF(guard_ok, "the GPU's chunked head wrote past one chunk of logits");
    for (int64_t i = 0; i < (int64_t)Vp * C; i++) { dw_cpu[i] -= dw0[i]; for (int r = 0; r < 3; r++) dw_gpu[r][i] -= dw0[i]; }
    GPU_COMPARE("chunked head losses", relerr_f(l_gpu[0], l_cpu, N), TOL_GPU_FWD);
    GPU_COMPARE("chunked head dx", relerr_x(dx_gpu[0], dx_cpu, (int64_t)N * C), TOL_GPU_BWD);
    GPU_COMPARE("chunked head dW (added)", relerr_f(dw_gpu[0], dw_cpu, (int64_t)Vp * C), TOL_GPU_BWD);
    GPU_COMPARE("GPU chunked vs one chunk: losses", relerr_f(l_gpu[0], l_gpu[2], N), TOL_GPU_FWD);
    GPU_COMPARE("GPU chunked vs one chunk: dx", relerr_x(dx_gpu[0], dx_gpu[2], (int64_t)N * C), TOL_GPU_BWD);
    GPU_COMPARE("GPU chunked vs one chunk: dW", relerr_f(dw_gpu[0], dw_gpu[2], (int64_t)Vp * C), TOL_GPU_BWD);
    int same = !memcmp(l_gpu[0], l_gpu[1], sizeof(float) * N) && !memcmp(dx_gpu[0], dx_gpu[1], sizeof(floatX) * N * C) &&
               !memcmp(dw_gpu[0], dw_gpu[1], sizeof(float) * Vp * C);
    printf("    chunked head deterministic: %s; chunked vs one chunk on the GPU: losses %s, dx %s\n", same ? "ok" : "FAIL",
           memcmp(l_gpu[0], l_gpu[2], sizeof(float) * N) ? "differ" : "the same bits", memcmp(dx_gpu[0], dx_gpu[2], sizeof(floatX) * N * C) ? "differ" : "the same bits");
    CHECKF(same, "two GPU runs of the chunked head differ");
    free(x); free(w); free(t); free(dw0); free(logits); free(l_cpu); free(dx_cpu); free(dw_cpu);
    for (int r = 0; r < 3; r++) { free(l_gpu[r]); free(dx_gpu[r]); free(dw_gpu[r]); }
    void* bufs[] = {d_x, d_w, d_t, d_logits, d_l, d_dx, d_dw};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
}

// Sampling runs the model at every sequence length 1..T: about 5 GEMM shapes per length, hundreds in
// all, far more than a training step's ~13. Each shape gets its plan and the CPU's result (forward
// with bias at N = 1..200 rows; the plan table once stopped the program at 128).
TEST(gpu_matmul_many_shapes) {
    const int C = 16, OC = 24, NMAX = 200;
    MatmulCase m = matmul_case_make(NMAX, C, OC, 1, 0, 55);
    floatX* out_c = (floatX*)malloc(sizeof(floatX) * NMAX * OC);
    floatX* out_g = (floatX*)malloc(sizeof(floatX) * NMAX * OC);
    floatX* d_inp = (floatX*)gpu_copy_of(m.inp, sizeof(floatX) * NMAX * C);
    floatX* d_w = (floatX*)gpu_copy_of(m.weight, sizeof(floatX) * OC * C);
    floatX* d_b = (floatX*)gpu_copy_of(m.bvec, sizeof(floatX) * OC);
    floatX* d_out = (floatX*)gpu_nans(sizeof(floatX) * NMAX * OC);
    int plans_before = g_matmul_nplans, bad = 0;
    double worst = 0.0;
    for (int N = 1; N <= NMAX; N++) {
        ON_CPU(op_matmul_forward(out_c, NULL, m.inp, m.weight, m.bvec, N, C, OC));
        ON_GPU(op_matmul_forward(d_out, NULL, d_inp, d_w, d_b, N, C, OC));
        gpu_to_host(out_g, d_out, sizeof(floatX) * N * OC);
        double e = relerr_x(out_g, out_c, (int64_t)N * OC);
        bad += !(e < TOL_GPU_FWD);
        worst = e > worst ? e : worst;
    }
    char what[96];
    snprintf(what, sizeof(what), "forward at N = 1..%d (worst)", NMAX);
    GPU_COMPARE(what, bad ? 1.0 : worst, TOL_GPU_FWD);
    CHECKF(g_matmul_nplans - plans_before >= NMAX, "%d new plans for %d shapes", g_matmul_nplans - plans_before, NMAX);
    free(out_c); free(out_g);
    void* bufs[] = {d_inp, d_w, d_b, d_out};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    matmul_case_free(&m);
}

// Plans are keyed by min(alignment, 16 bytes): the same GEMM with every buffer at 256-, 16-, 32- and
// 64-byte alignment (as buffers of different ZeRO stages may be) uses one plan, so one algorithm, and
// gives the same bits. Keyed by the raw alignment it would plan it four times (and the emulator's
// cuBLASLt stops the run: one problem under two alignment keys).
TEST(gpu_matmul_plan_key_alignment) {
    const int N = 48, C = 40, OC = 56;
    MatmulCase m = matmul_case_make(N, C, OC, 1, 0, 77);
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    char* base[6];
    size_t bytes[6] = {sizeof(floatX) * nx, sizeof(floatX) * nw, sizeof(floatX) * OC, sizeof(floatX) * no,
                       sizeof(float) * nw, sizeof(floatX) * nx};
    for (int i = 0; i < 6; i++) base[i] = (char*)gpu_zeros(bytes[i] + 256);
    floatX *out0 = (floatX*)malloc(sizeof(floatX) * no), *out1 = (floatX*)malloc(sizeof(floatX) * no);
    float *dw0 = (float*)malloc(sizeof(float) * nw), *dw1 = (float*)malloc(sizeof(float) * nw);
    const int shifts[4] = {0, 16, 32, 64}; // bytes from a 256-byte aligned start
    int plans = 0, same = 1;
    for (int t = 0; t < 4; t++) {
        char* p[6];
        for (int i = 0; i < 6; i++) p[i] = base[i] + shifts[t];
        gpu_upload(p[0], m.inp, bytes[0]);
        gpu_upload(p[1], m.weight, bytes[1]);
        gpu_upload(p[2], m.bvec, bytes[2]);
        gpu_fill(p[4], 0, bytes[4]);
        ON_GPU(op_matmul_forward((floatX*)p[3], NULL, (floatX*)p[0], (floatX*)p[1], (floatX*)p[2], N, C, OC));
        ON_GPU(op_matmul_backward((floatX*)p[5], (float*)p[4], NULL, (floatX*)p[3], (floatX*)p[0], (floatX*)p[1], NULL,
                                  N, C, OC));
        gpu_to_host(t == 0 ? out0 : out1, p[3], sizeof(floatX) * no);
        gpu_to_host(t == 0 ? dw0 : dw1, p[4], sizeof(float) * nw);
        if (t == 0) plans = g_matmul_nplans;
        else same &= !memcmp(out0, out1, sizeof(floatX) * no) && !memcmp(dw0, dw1, sizeof(float) * nw);
    }
    printf("    one GEMM at 256/16/32/64-byte alignment: %d new plans after the first, results %s\n",
           g_matmul_nplans - plans, same ? "bitwise equal" : "DIFFER");
    CHECKF(g_matmul_nplans == plans, "%d more plans for the same shapes at other alignments", g_matmul_nplans - plans);
    CHECK(same);
    for (int i = 0; i < 6; i++) cudaCheck(cudaFree(base[i]));
    free(out0); free(out1); free(dw0); free(dw1);
    matmul_case_free(&m);
}

#ifdef ZT_CUDA_EMU
// The emulator's cuBLASLt stops a run that plans one problem under two alignment keys (here asked
// directly: the same GEMM at 256 bytes, then at 32), with a message naming both keys.
TEST(emu_cublaslt_two_alignment_keys_fail) {
    fflush(stdout);
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) { // the child: two plans of one problem, then (should not get here) exit 0
        dup2(fds[1], 2);
        close(fds[0]);
        emu_lt::forget_alignment_keys();
        cublasLtMatmulDesc_t d;
        cublasLtMatrixLayout_t l;
        cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 64, 64, 64);
        for (uint32_t al : {256u, 32u}) {
            cublasLtMatmulPreference_t pref;
            cublasLtMatmulPreferenceCreate(&pref);
            for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; a++)
                cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &al, sizeof(al));
            cublasLtMatmulHeuristicResult_t heur;
            int found = 0;
            cublasLtMatmulAlgoGetHeuristic(g_cublaslt, d, l, l, l, l, pref, 1, &heur, &found);
        }
        _exit(0);
    }
    close(fds[1]);
    char err[4096] = {0};
    size_t got = 0;
    for (ssize_t r; got < sizeof(err) - 1 && (r = read(fds[0], err + got, sizeof(err) - 1 - got)) > 0;) got += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("    child: %s; stderr: %.200s\n", WIFSIGNALED(status) ? "stopped (abort)" : "exited", err);
    CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the fake cuBLASLt let one problem be planned twice");
    CHECK(strstr(err, "two alignment keys") && strstr(err, "256/256/256/256/256") && strstr(err, "32/32/32/32/256"));
}
#endif

// Pointers shifted by one element (2-byte aligned in BF16): cuBLASLt is asked for algorithms at that
// alignment, or the simple kernel runs. Last in this file: if cuBLASLt rejected such operands at run
// time (an error that ends the program), the cases above have already reported. The shapes were
// planned 16-byte aligned above: a second alignment key on purpose, so the emulator's cuBLASLt is
// told to forget the keys it has seen (before and after).
TEST(gpu_matmul_misaligned) {
#ifdef ZT_CUDA_EMU
    emu_lt::forget_alignment_keys();
#endif
    check_matmul("odd misaligned", 7, 13, 11, 1, 1, 1);
    check_matmul("misaligned", 64, 40, 24, 1, 1, 1);
#ifdef ZT_CUDA_EMU
    emu_lt::forget_alignment_keys();
#endif
}
