// test/gpu_misc.h — GPU-vs-CPU cases (see test/test_gpu.cu for the helpers): poisoning, residual +
// layernorm, encoder, AdamW, parameter rounding, sum of squares.
//
// What each case expects from the GPU (why, in ops/layernorm.cuh, ops/encoder.cuh, adamw.cuh):
//   layernorm      within TOL_GPU_* (the row sums add in another order); residual = rn(a + b)
//                  bitwise; every backward deterministic (run twice, bitwise)
//   encoder        bitwise equal to the CPU (the same FP32 additions in the same order)
//   AdamW, rounding bitwise equal to the CPU (explicit _rn intrinsics on the device)
//   sum of squares within 1e-6 of the CPU and of float64; deterministic
// Every comparison prints one line ("ok" / "FAIL"); a bitwise difference prints the first
// differing element (index, both values, bits), so a failure points at its place.

// Poisoning (released ZeRO buffers filled with NaN): the fill kernel writes the pattern everywhere.
TEST(gpu_fill_poison) {
    const size_t n = 1000003; // odd: the last block is partial
    uint16_t* d = (uint16_t*)gpu_zeros(n * 2);
    ON_GPU(dev_fill_u16(d, 0x7FC0, n));
    uint16_t* h = (uint16_t*)malloc(n * 2);
    uint16_t* ref = (uint16_t*)calloc(n, 2);
    ON_CPU(dev_fill_u16(ref, 0x7FC0, n));
    gpu_to_host(h, d, n * 2);
    CHECK(memcmp(h, ref, n * 2) == 0);
    free(h); free(ref);
    cudaCheck(cudaFree(d));
}

// ---- helpers of this file (prefix gm_)

// Bitwise comparison of n elements of `elem` bytes (2: floatX in BF16, 4: float or FP32 floatX,
// 8: double). Prints one line with "rel err" in it (dev/gpu_check.sh collects those lines); on a
// difference, how many elements differ and the first one.
static int gm_bitwise(const char* what, const void* gpu, const void* cpu, int64_t n, size_t elem) {
    const unsigned char* a = (const unsigned char*)gpu;
    const unsigned char* b = (const unsigned char*)cpu;
    if (n <= 0 || memcmp(a, b, (size_t)n * elem) == 0) {
        printf("    %-40s rel err 0 (bitwise equal) ok\n", what);
        return 1;
    }
    int64_t first = -1, count = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i * elem, b + i * elem, elem) != 0) { if (first < 0) first = i; count++; }
    double va = 0, vb = 0;
    uint64_t ba = 0, bb = 0;
    memcpy(&ba, a + first * elem, elem);
    memcpy(&bb, b + first * elem, elem);
    if (elem == 2) { bf16_t x, y; memcpy(&x, a + first * 2, 2); memcpy(&y, b + first * 2, 2); va = bf16_to_f32(x); vb = bf16_to_f32(y); }
    if (elem == 4) { float x, y; memcpy(&x, a + first * 4, 4); memcpy(&y, b + first * 4, 4); va = x; vb = y; }
    if (elem == 8) { memcpy(&va, a + first * 8, 8); memcpy(&vb, b + first * 8, 8); }
    printf("    %-40s rel err - (bitwise: %lld of %lld differ; first [%lld]: gpu %.9g (0x%llx) cpu %.9g (0x%llx)) FAIL\n", what,
           (long long)count, (long long)n, (long long)first, va, (unsigned long long)ba, vb, (unsigned long long)bb);
    CHECKF(0, "%s: %lld elements differ, first at %lld", what, (long long)count, (long long)first);
    return 0;
}

// Device buffers filled from host arrays / copied back, by element count.
#define GM_UP(host, n) gpu_copy_of((host), sizeof(*(host)) * (size_t)(n))
#define GM_DOWN(host, dev, n) gpu_to_host((host), (dev), sizeof(*(host)) * (size_t)(n))

// ---- residual + layernorm

typedef struct { int N, C; } GmShape;
static const GmShape gm_ln_shapes[] = {{7, 19}, {33, 28}, {4096, 768}}; // odd C; GPT-2's C at N = B*T

TEST(gpu_layernorm_forward) {
    for (size_t si = 0; si < sizeof(gm_ln_shapes) / sizeof(gm_ln_shapes[0]); si++) {
        int N = gm_ln_shapes[si].N, C = gm_ln_shapes[si].C;
        int64_t NC = (int64_t)N * C;
        floatX* a = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* b = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* w = (floatX*)malloc(sizeof(floatX) * C);
        floatX* bias = (floatX*)malloc(sizeof(floatX) * C);
        rand_x(a, NC, 1.0, 101 + si);
        rand_x(b, NC, 1.0, 201 + si);
        rand_x(w, C, 1.0, 301 + si);
        rand_x(bias, C, 0.5, 401 + si);
        floatX *res_c = (floatX*)malloc(sizeof(floatX) * NC), *out_c = (floatX*)malloc(sizeof(floatX) * NC);
        floatX *res_g = (floatX*)malloc(sizeof(floatX) * NC), *out_g = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* out_g2 = (floatX*)malloc(sizeof(floatX) * NC);
        float *mean_c = (float*)malloc(4 * N), *rstd_c = (float*)malloc(4 * N);
        float *mean_g = (float*)malloc(4 * N), *rstd_g = (float*)malloc(4 * N);
        float *mean_g2 = (float*)malloc(4 * N), *rstd_g2 = (float*)malloc(4 * N);
        floatX *da = (floatX*)GM_UP(a, NC), *db = (floatX*)GM_UP(b, NC);
        floatX *dw = (floatX*)GM_UP(w, C), *dbias = (floatX*)GM_UP(bias, C);
        floatX *dres = (floatX*)gpu_nans(sizeof(floatX) * NC), *dout = (floatX*)gpu_nans(sizeof(floatX) * NC);
        float *dmean = (float*)gpu_nans(4 * N), *drstd = (float*)gpu_nans(4 * N);
        for (int with_res = 1; with_res >= 0; with_res--) {
            char what[96];
            printf("  N %d C %d, %s\n", N, C, with_res ? "residual = a + b, layernorm(residual)" : "layernorm(a), no residual");
            ON_CPU(op_residual_layernorm_forward(with_res ? res_c : NULL, out_c, mean_c, rstd_c, a, with_res ? b : NULL, w, bias, N, C));
            ON_GPU(op_residual_layernorm_forward(with_res ? dres : NULL, dout, dmean, drstd, da, with_res ? db : NULL, dw, dbias, N, C));
            GM_DOWN(out_g, dout, NC);
            GM_DOWN(mean_g, dmean, N);
            GM_DOWN(rstd_g, drstd, N);
            if (with_res) {
                GM_DOWN(res_g, dres, NC);
                snprintf(what, sizeof(what), "ln fwd %dx%d residual", N, C);
                gm_bitwise(what, res_g, res_c, NC, sizeof(floatX));
            }
            snprintf(what, sizeof(what), "ln fwd %dx%d out", N, C);
            GPU_COMPARE(what, relerr_x(out_g, out_c, NC), TOL_GPU_FWD);
            snprintf(what, sizeof(what), "ln fwd %dx%d mean", N, C);
            GPU_COMPARE(what, relerr_f(mean_g, mean_c, N), TOL_GPU_FWD);
            snprintf(what, sizeof(what), "ln fwd %dx%d rstd", N, C);
            GPU_COMPARE(what, relerr_f(rstd_g, rstd_c, N), TOL_GPU_FWD);
            // deterministic: a second run gives the same bits
            ON_GPU(op_residual_layernorm_forward(with_res ? dres : NULL, dout, dmean, drstd, da, with_res ? db : NULL, dw, dbias, N, C));
            GM_DOWN(out_g2, dout, NC);
            snprintf(what, sizeof(what), "ln fwd %dx%d out, run twice", N, C);
            gm_bitwise(what, out_g2, out_g, NC, sizeof(floatX));
            if (with_res) {
                // normalising the stored residual again (no add) reproduces the bits (-r 2 relies on it)
                floatX* dout2 = (floatX*)gpu_nans(sizeof(floatX) * NC);
                ON_GPU(op_residual_layernorm_forward(NULL, dout2, dmean, drstd, dres, NULL, dw, dbias, N, C));
                GM_DOWN(out_g2, dout2, NC);
                GM_DOWN(mean_g2, dmean, N);
                GM_DOWN(rstd_g2, drstd, N);
                snprintf(what, sizeof(what), "ln fwd %dx%d recompute from residual", N, C);
                int same = gm_bitwise(what, out_g2, out_g, NC, sizeof(floatX));
                if (same) {
                    snprintf(what, sizeof(what), "ln fwd %dx%d recompute mean", N, C);
                    gm_bitwise(what, mean_g2, mean_g, N, 4);
                    snprintf(what, sizeof(what), "ln fwd %dx%d recompute rstd", N, C);
                    gm_bitwise(what, rstd_g2, rstd_g, N, 4);
                }
                cudaCheck(cudaFree(dout2));
            }
        }
        free(a); free(b); free(w); free(bias); free(res_c); free(out_c); free(res_g); free(out_g); free(out_g2);
        free(mean_c); free(rstd_c); free(mean_g); free(rstd_g); free(mean_g2); free(rstd_g2);
        cudaCheck(cudaFree(da)); cudaCheck(cudaFree(db)); cudaCheck(cudaFree(dw)); cudaCheck(cudaFree(dbias));
        cudaCheck(cudaFree(dres)); cudaCheck(cudaFree(dout)); cudaCheck(cudaFree(dmean)); cudaCheck(cudaFree(drstd));
    }
}

// Backward: dinp += (starting nonzero: the residual stream's gradient), dweight/dbias +=
// (starting nonzero: an earlier micro-step's gradient); run twice on the GPU, bitwise.
TEST(gpu_layernorm_backward) {
    for (size_t si = 0; si < sizeof(gm_ln_shapes) / sizeof(gm_ln_shapes[0]); si++) {
        int N = gm_ln_shapes[si].N, C = gm_ln_shapes[si].C;
        int64_t NC = (int64_t)N * C;
        floatX* x = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* dout = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* dinp0 = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* w = (floatX*)malloc(sizeof(floatX) * C);
        floatX* bias = (floatX*)malloc(sizeof(floatX) * C);
        floatX* scratch = (floatX*)malloc(sizeof(floatX) * NC);
        float *dw0 = (float*)malloc(4 * C), *db0 = (float*)malloc(4 * C);
        float *mean = (float*)malloc(4 * N), *rstd = (float*)malloc(4 * N);
        rand_x(x, NC, 1.0, 501 + si);
        rand_x(dout, NC, 1.0, 601 + si);
        rand_x(dinp0, NC, 0.3, 701 + si);
        rand_x(w, C, 1.0, 801 + si);
        rand_x(bias, C, 0.5, 901 + si);
        rand_f(dw0, C, 0.3, 1001 + si);
        rand_f(db0, C, 0.3, 1101 + si);
        // mean/rstd from the CPU forward: both backward sides get the same statistics
        ON_CPU(op_residual_layernorm_forward(NULL, scratch, mean, rstd, x, NULL, w, bias, N, C));
        // CPU
        floatX* dinp_c = (floatX*)malloc(sizeof(floatX) * NC);
        float *dw_c = (float*)malloc(4 * C), *db_c = (float*)malloc(4 * C);
        memcpy(dinp_c, dinp0, sizeof(floatX) * NC);
        memcpy(dw_c, dw0, 4 * C);
        memcpy(db_c, db0, 4 * C);
        ON_CPU(op_layernorm_backward(dinp_c, dw_c, db_c, dout, x, w, mean, rstd, N, C));
        // GPU, twice from the same starting values
        floatX *ddout = (floatX*)GM_UP(dout, NC), *dx = (floatX*)GM_UP(x, NC), *dwt = (floatX*)GM_UP(w, C);
        float *dmean = (float*)GM_UP(mean, N), *drstd = (float*)GM_UP(rstd, N);
        floatX* ddinp = (floatX*)gpu_zeros(sizeof(floatX) * NC);
        float *ddw = (float*)gpu_zeros(4 * C), *ddb = (float*)gpu_zeros(4 * C);
        floatX* dinp_g[2];
        float *dw_g[2], *db_g[2];
        for (int run = 0; run < 2; run++) {
            gpu_upload(ddinp, dinp0, sizeof(floatX) * NC);
            gpu_upload(ddw, dw0, 4 * C);
            gpu_upload(ddb, db0, 4 * C);
            ON_GPU(op_layernorm_backward(ddinp, ddw, ddb, ddout, dx, dwt, dmean, drstd, N, C));
            dinp_g[run] = (floatX*)malloc(sizeof(floatX) * NC);
            dw_g[run] = (float*)malloc(4 * C);
            db_g[run] = (float*)malloc(4 * C);
            GM_DOWN(dinp_g[run], ddinp, NC);
            GM_DOWN(dw_g[run], ddw, C);
            GM_DOWN(db_g[run], ddb, C);
        }
        char what[96];
        snprintf(what, sizeof(what), "ln bwd %dx%d dinp (+=)", N, C);
        GPU_COMPARE(what, relerr_x(dinp_g[0], dinp_c, NC), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "ln bwd %dx%d dweight (+=)", N, C);
        GPU_COMPARE(what, relerr_f(dw_g[0], dw_c, C), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "ln bwd %dx%d dbias (+=)", N, C);
        GPU_COMPARE(what, relerr_f(db_g[0], db_c, C), TOL_GPU_BWD);
        snprintf(what, sizeof(what), "ln bwd %dx%d dinp, run twice", N, C);
        gm_bitwise(what, dinp_g[1], dinp_g[0], NC, sizeof(floatX));
        snprintf(what, sizeof(what), "ln bwd %dx%d dweight, run twice", N, C);
        gm_bitwise(what, dw_g[1], dw_g[0], C, 4);
        snprintf(what, sizeof(what), "ln bwd %dx%d dbias, run twice", N, C);
        gm_bitwise(what, db_g[1], db_g[0], C, 4);
        for (int run = 0; run < 2; run++) { free(dinp_g[run]); free(dw_g[run]); free(db_g[run]); }
        free(x); free(dout); free(dinp0); free(w); free(bias); free(scratch); free(dw0); free(db0);
        free(mean); free(rstd); free(dinp_c); free(dw_c); free(db_c);
        cudaCheck(cudaFree(ddout)); cudaCheck(cudaFree(dx)); cudaCheck(cudaFree(dwt)); cudaCheck(cudaFree(dmean));
        cudaCheck(cudaFree(drstd)); cudaCheck(cudaFree(ddinp)); cudaCheck(cudaFree(ddw)); cudaCheck(cudaFree(ddb));
    }
}

// ---- encoder

// Tokens with many repeats (3 in 4 drawn from the 50 smallest ids), the rest spread over the
// whole vocabulary; the first is 0 and the last V-1 (the sort's extreme keys). kind 1: all equal
// (one run of B*T positions: the longest segment). kind 2: skewed, token 7 in 9 positions of 10
// (its run crosses many ENC_CHUNK edges, the others are short runs between them).
static void gm_tokens(int* tok, int N, int V, int kind, uint64_t seed) {
    uint64_t key = rng_key(seed, 0x544f4bull, (uint64_t)N);
    for (int i = 0; i < N; i++) {
        uint64_t u = rng_u64(key, (uint64_t)i);
        if (kind == 1) tok[i] = V - 1;
        else if (kind == 2) tok[i] = u % 10 != 0 ? 7 : (int)((u >> 8) % (uint64_t)V);
        else tok[i] = u % 4 == 0 ? (int)((u >> 8) % (uint64_t)V) : (int)((u >> 8) % 50);
    }
    if (kind != 1) { tok[0] = 0; tok[N - 1] = V - 1; }
}

// seg (B, T) of rows packed with examples of the given lengths, row after row (each row's lengths
// sum to T): seg[b*T + t] = the index of the first token of t's example (ops/attention.cuh).
static void gm_seg_from_lengths(int* seg, int B, int T, const int* len, int nlen) {
    int b = 0, t = 0;
    for (int e = 0; e < nlen; e++) {
        for (int k = 0; k < len[e]; k++) seg[b * T + t + k] = t;
        t += len[e];
        if (t == T) { b++; t = 0; }
    }
    if (b != B || t != 0) { fprintf(stderr, "gm_seg_from_lengths: the lengths do not fill %d rows of %d\n", B, T); exit(1); }
}

TEST(gpu_encoder) {
    typedef struct { int B, T, C, V, kind; } EncCase;
    const EncCase cases[] = {
        {3, 17, 19, 50257, 0},   // odd C
        {2, 33, 28, 50257, 1},   // every position the same token
        {4, 1024, 768, 50257, 0}, // GPT-2 small's C, T and V
        {3, 333, 40, 50257, 2},   // skewed, C % 8 == 0 (16-byte path), N = 999 not a multiple of ENC_CHUNK
        {5, 77, 19, 1000, 2},     // skewed, odd C (element path)
    };
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        int B = cases[ci].B, T = cases[ci].T, C = cases[ci].C, V = cases[ci].V, N = B * T;
        int64_t VC = (int64_t)V * C, TC = (int64_t)T * C, NC = (int64_t)N * C;
        if (VC <= 0 || TC <= 0 || NC <= 0) { CHECK(0); continue; } // (tells g++ -O3 the mallocs below are small)
        printf("  B %d T %d C %d V %d%s\n", B, T, C, V,
               cases[ci].kind == 1 ? ", one token everywhere" : cases[ci].kind == 2 ? ", one token in 90% of positions" : "");
        int* tok = (int*)malloc(sizeof(int) * N);
        gm_tokens(tok, N, V, cases[ci].kind, 1200 + ci);
        floatX* wte = (floatX*)malloc(sizeof(floatX) * VC);
        floatX* wpe = (floatX*)malloc(sizeof(floatX) * TC);
        floatX* dout = (floatX*)malloc(sizeof(floatX) * NC);
        rand_x(wte, VC, 0.1, 1300 + ci);
        rand_x(wpe, TC, 0.1, 1400 + ci);
        rand_x(dout, NC, 1.0, 1500 + ci);
        // starting gradients: nonzero (an earlier micro-step, or the LM head's share of dwte)
        float* dwte0 = (float*)malloc(sizeof(float) * (size_t)VC);
        float* dwpe0 = (float*)malloc(sizeof(float) * (size_t)TC);
        for (int64_t i = 0; i < VC; i++) dwte0[i] = (float)((i * 7919) % 1001 - 500) * 1e-3f;
        for (int64_t i = 0; i < TC; i++) dwpe0[i] = (float)((i * 104729) % 1001 - 500) * 1e-3f;
        // CPU
        floatX* out_c = (floatX*)malloc(sizeof(floatX) * NC);
        float* dwte_c = (float*)malloc(4 * VC);
        float* dwpe_c = (float*)malloc(4 * TC);
        memcpy(dwte_c, dwte0, 4 * VC);
        memcpy(dwpe_c, dwpe0, 4 * TC);
        ON_CPU(op_encoder_forward(out_c, tok, NULL, wte, wpe, B, T, C));
        ON_CPU(op_encoder_backward(dwte_c, dwpe_c, dout, tok, NULL, B, T, C, V));
        // GPU: forward once, backward twice from the same starting values
        int* dtok = (int*)GM_UP(tok, N);
        floatX *dwte_p = (floatX*)GM_UP(wte, VC), *dwpe_p = (floatX*)GM_UP(wpe, TC), *ddout = (floatX*)GM_UP(dout, NC);
        floatX* dout_fwd = (floatX*)gpu_nans(sizeof(floatX) * NC);
        float *ddwte = (float*)gpu_zeros(4 * VC), *ddwpe = (float*)gpu_zeros(4 * TC);
        ON_GPU(op_encoder_forward(dout_fwd, dtok, NULL, dwte_p, dwpe_p, B, T, C));
        floatX* out_g = (floatX*)malloc(sizeof(floatX) * NC);
        GM_DOWN(out_g, dout_fwd, NC);
        float *dwte_g[2], *dwpe_g[2];
        for (int run = 0; run < 2; run++) {
            gpu_upload(ddwte, dwte0, 4 * VC);
            gpu_upload(ddwpe, dwpe0, 4 * TC);
            ON_GPU(op_encoder_backward(ddwte, ddwpe, ddout, dtok, NULL, B, T, C, V));
            dwte_g[run] = (float*)malloc(4 * VC);
            dwpe_g[run] = (float*)malloc(4 * TC);
            GM_DOWN(dwte_g[run], ddwte, VC);
            GM_DOWN(dwpe_g[run], ddwpe, TC);
        }
        char what[96];
        snprintf(what, sizeof(what), "encoder fwd out (%dx%d)", N, C);
        GPU_COMPARE(what, relerr_x(out_g, out_c, NC), TOL_GPU_FWD);
        gm_bitwise(what, out_g, out_c, NC, sizeof(floatX));
        snprintf(what, sizeof(what), "encoder bwd dwpe (+=)");
        GPU_COMPARE(what, relerr_f(dwpe_g[0], dwpe_c, TC), TOL_GPU_BWD);
        gm_bitwise(what, dwpe_g[0], dwpe_c, TC, 4);
        snprintf(what, sizeof(what), "encoder bwd dwte (+=, V=%d)", V);
        GPU_COMPARE(what, relerr_f(dwte_g[0], dwte_c, VC), TOL_GPU_BWD);
        gm_bitwise(what, dwte_g[0], dwte_c, VC, 4);
        gm_bitwise("encoder bwd dwpe, run twice", dwpe_g[1], dwpe_g[0], TC, 4);
        gm_bitwise("encoder bwd dwte, run twice", dwte_g[1], dwte_g[0], VC, 4);
        for (int run = 0; run < 2; run++) { free(dwte_g[run]); free(dwpe_g[run]); }
        free(tok); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0); free(out_c); free(dwte_c);
        free(dwpe_c); free(out_g);
        cudaCheck(cudaFree(dtok)); cudaCheck(cudaFree(dwte_p)); cudaCheck(cudaFree(dwpe_p)); cudaCheck(cudaFree(ddout));
        cudaCheck(cudaFree(dout_fwd)); cudaCheck(cudaFree(ddwte)); cudaCheck(cudaFree(ddwpe));
    }
}

// Packed examples (a segment table): positions t - seg. The forward, and dwpe, which then sums each
// position's rows over every example (dwte's sorted scatter keyed by position), bitwise equal to the
// CPU and to a second run; examples of 1-9 tokens so that position 0's rows cross ENC_CHUNK edges,
// on the 16-byte path (C 40) and the element path (C 19).
TEST(gpu_encoder_seg) {
    const int B = 3, T = 200, V = 1000, N = B * T;
    int* seg = (int*)malloc(sizeof(int) * N);
    int* tok = (int*)malloc(sizeof(int) * N);
    for (int b = 0; b < B; b++)
        for (int t = 0, s = 0; t < T; t++) { // example lengths 1..9 from a fixed pattern, the last one cut at T
            if (t == s + 1 + (s * 7 + b) % 9 || t == 0) s = t;
            seg[b * T + t] = s;
        }
    gm_tokens(tok, N, V, 2, 1600);
    int* dtok = (int*)GM_UP(tok, N);
    int* dseg = (int*)GM_UP(seg, N);
    const int Cs[] = {40, 19};
    for (int ci = 0; ci < 2; ci++) {
        int C = Cs[ci];
        int64_t VC = (int64_t)V * C, TC = (int64_t)T * C, NC = (int64_t)N * C;
        printf("  B %d T %d C %d V %d, examples of 1-9 tokens\n", B, T, C, V);
        floatX *wte = (floatX*)malloc(sizeof(floatX) * VC), *wpe = (floatX*)malloc(sizeof(floatX) * TC);
        floatX *dout = (floatX*)malloc(sizeof(floatX) * NC), *out_c = (floatX*)malloc(sizeof(floatX) * NC);
        floatX* out_g = (floatX*)malloc(sizeof(floatX) * NC);
        rand_x(wte, VC, 0.1, 1700 + ci);
        rand_x(wpe, TC, 0.1, 1710 + ci);
        rand_x(dout, NC, 1.0, 1720 + ci);
        float *dwte_c = (float*)calloc(VC, 4), *dwpe_c = (float*)calloc(TC, 4);
        ON_CPU(op_encoder_forward(out_c, tok, seg, wte, wpe, B, T, C));
        ON_CPU(op_encoder_backward(dwte_c, dwpe_c, dout, tok, seg, B, T, C, V));
        floatX *dwte_p = (floatX*)GM_UP(wte, VC), *dwpe_p = (floatX*)GM_UP(wpe, TC), *ddout = (floatX*)GM_UP(dout, NC);
        floatX* dout_fwd = (floatX*)gpu_nans(sizeof(floatX) * NC);
        float *ddwte = (float*)gpu_zeros(4 * VC), *ddwpe = (float*)gpu_zeros(4 * TC);
        ON_GPU(op_encoder_forward(dout_fwd, dtok, dseg, dwte_p, dwpe_p, B, T, C));
        GM_DOWN(out_g, dout_fwd, NC);
        gm_bitwise("encoder fwd out, positions t - seg", out_g, out_c, NC, sizeof(floatX));
        float *dwte_g[2], *dwpe_g[2];
        for (int run = 0; run < 2; run++) {
            cudaCheck(cudaMemsetAsync(ddwte, 0, 4 * VC, g_stream));
            cudaCheck(cudaMemsetAsync(ddwpe, 0, 4 * TC, g_stream));
            ON_GPU(op_encoder_backward(ddwte, ddwpe, ddout, dtok, dseg, B, T, C, V));
            dwte_g[run] = (float*)malloc(4 * VC);
            dwpe_g[run] = (float*)malloc(4 * TC);
            GM_DOWN(dwte_g[run], ddwte, VC);
            GM_DOWN(dwpe_g[run], ddwpe, TC);
        }
        gm_bitwise("encoder bwd dwpe by position", dwpe_g[0], dwpe_c, TC, 4);
        gm_bitwise("encoder bwd dwte", dwte_g[0], dwte_c, VC, 4);
        gm_bitwise("encoder bwd dwpe by position, run twice", dwpe_g[1], dwpe_g[0], TC, 4);
        for (int run = 0; run < 2; run++) { free(dwte_g[run]); free(dwpe_g[run]); }
        free(wte); free(wpe); free(dout); free(out_c); free(out_g); free(dwte_c); free(dwpe_c);
        cudaCheck(cudaFree(dwte_p)); cudaCheck(cudaFree(dwpe_p)); cudaCheck(cudaFree(ddout));
        cudaCheck(cudaFree(dout_fwd)); cudaCheck(cudaFree(ddwte)); cudaCheck(cudaFree(ddwpe));
    }
    free(seg); free(tok);
    cudaCheck(cudaFree(dtok)); cudaCheck(cudaFree(dseg));
}

// ---- AdamW: GPU and CPU bitwise over several steps

TEST(gpu_adamw_bitwise) {
    // 20 segments (more than one launch's 16) with padding gaps between them, decay alternating,
    // one empty, one long enough for the grid-stride loop (> 4096 blocks x 256 threads);
    // gradient scales include 0, 1e-20 (g*g is subnormal: both sides must keep subnormals) and 1e3.
    const int64_t lens[20] = {1, 7, 31, 4096, 5000, 12345, 0, 64, 1500007, 3, 768, 2304, 19, 28, 1, 100, 999, 4097, 8, 50257};
    const double gscale[20] = {1, 1, 1, 1e-20, 1, 1e3, 1, 0, 1, 1, 1e-3, 1, 1, 1, 1e-20, 1, 1, 1, 1, 1};
    Segment segs[20];
    int64_t off = 5; // elements 0..4 are padding too
    for (int s = 0; s < 20; s++) {
        segs[s].off = off;
        segs[s].len = lens[s];
        segs[s].decay = s % 2 == 0;
        off += lens[s] + (s % 3) * 3 + (s % 2); // gaps of 0..7 elements
    }
    int64_t n = off + 11; // tail padding
    float* master = (float*)malloc(4 * n);
    float* m = (float*)malloc(4 * n);
    float* v = (float*)malloc(4 * n);
    float* g = (float*)malloc(4 * n);
    floatX* params = (floatX*)malloc(sizeof(floatX) * n);
    rand_f(master, n, 0.5, 1601);
    rand_f(m, n, 0.01, 1602);
    rand_f(v, n, 1e-4, 1603);
    for (int64_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); params[i] = rn(master[i]); }
    // m = v = 0 (as before the first step) where the gradients are tiny, so that v really is
    // subnormal (1e-20^2 ~ 1e-41): with a flush to zero on either side the bits would differ; and
    // in the long segment
    for (int s = 0; s < 20; s++)
        if (gscale[s] == 1e-20 || s == 8)
            for (int64_t i = segs[s].off; i < segs[s].off + segs[s].len; i++) m[i] = v[i] = 0.0f;
    // the GPU's copies start from the same state
    float *dmaster = (float*)GM_UP(master, n), *dm = (float*)GM_UP(m, n), *dv = (float*)GM_UP(v, n);
    floatX* dparams = (floatX*)GM_UP(params, n);
    float* dg = (float*)gpu_zeros(4 * n);
    float* padding0 = (float*)malloc(4 * n); // master before any step: the padding must keep it
    memcpy(padding0, master, 4 * n);
    float* hm = (float*)malloc(4 * n);
    floatX* hp = (floatX*)malloc(sizeof(floatX) * n);
    const int64_t steps[5] = {1, 2, 3, 10, 1000};
    for (int k = 0; k < 5; k++) {
        rand_f(g, n, 1.0, 1700 + k);
        for (int s = 0; s < 20; s++)
            for (int64_t i = segs[s].off; i < segs[s].off + segs[s].len; i++) g[i] = (float)(g[i] * gscale[s]);
        gpu_upload(dg, g, 4 * n);
        AdamWParams hpar = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.37f, 0, 0};
        if (k == 4) hpar.grad_scale = 1.0f;
        adamw_bias_corrections(&hpar, steps[k]);
        ON_CPU(op_adamw(params, master, m, v, g, segs, 20, &hpar));
        ON_GPU(op_adamw(dparams, dmaster, dm, dv, dg, segs, 20, &hpar));
        char what[96];
        printf("  step t = %lld, grad_scale %g\n", (long long)steps[k], hpar.grad_scale);
        snprintf(what, sizeof(what), "adamw t=%lld master", (long long)steps[k]);
        GM_DOWN(hm, dmaster, n);
        gm_bitwise(what, hm, master, n, 4);
        snprintf(what, sizeof(what), "adamw t=%lld m", (long long)steps[k]);
        GM_DOWN(hm, dm, n);
        gm_bitwise(what, hm, m, n, 4);
        snprintf(what, sizeof(what), "adamw t=%lld v", (long long)steps[k]);
        GM_DOWN(hm, dv, n);
        gm_bitwise(what, hm, v, n, 4);
        snprintf(what, sizeof(what), "adamw t=%lld params", (long long)steps[k]);
        GM_DOWN(hp, dparams, n);
        gm_bitwise(what, hp, params, n, sizeof(floatX));
    }
    // padding untouched (checked on the GPU's master; the CPU's equals it bitwise above)
    GM_DOWN(hm, dmaster, n);
    int64_t pad_changed = 0, seg_i = 0;
    for (int64_t i = 0; i < n; i++) {
        while (seg_i < 20 && i >= segs[seg_i].off + segs[seg_i].len) seg_i++;
        int in_seg = seg_i < 20 && i >= segs[seg_i].off;
        if (!in_seg && memcmp(&hm[i], &padding0[i], 4) != 0) pad_changed++;
    }
    printf("    %-40s rel err %s (%lld padding elements changed) %s\n", "adamw padding untouched", pad_changed ? "-" : "0",
           (long long)pad_changed, pad_changed ? "FAIL" : "ok");
    CHECK(pad_changed == 0);
    free(master); free(m); free(v); free(g); free(params); free(padding0); free(hm); free(hp);
    cudaCheck(cudaFree(dmaster)); cudaCheck(cudaFree(dm)); cudaCheck(cudaFree(dv)); cudaCheck(cudaFree(dparams));
    cudaCheck(cudaFree(dg));
}

// params = rn(master): bitwise, including ties, subnormals, infinities and NaN.
TEST(gpu_round_params_bitwise) {
    const int64_t n = 1000003;
    float* master = (float*)malloc(4 * n);
    rand_f(master, n, 3.0, 1801);
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                0x7f7fffffu, 0x00000001u, 0x80400000u, 0x3f808000u, 0x3f818000u, 0x3f80c000u,
                                0xbf808000u, 0x7f7f8000u};
    for (size_t k = 0; k < sizeof(special) / sizeof(special[0]); k++) memcpy(&master[k * 1009], &special[k], 4);
    floatX* p_c = (floatX*)malloc(sizeof(floatX) * n);
    floatX* p_g = (floatX*)malloc(sizeof(floatX) * n);
    ON_CPU(op_round_params(p_c, master, n));
    float* dmaster = (float*)GM_UP(master, n);
    floatX* dp = (floatX*)gpu_nans(sizeof(floatX) * n);
    ON_GPU(op_round_params(dp, dmaster, n));
    GM_DOWN(p_g, dp, n);
    gm_bitwise("round_params", p_g, p_c, n, sizeof(floatX));
    free(master); free(p_c); free(p_g);
    cudaCheck(cudaFree(dmaster)); cudaCheck(cudaFree(dp));
}

// Sum of squares: within 1e-6 of the CPU (large len: the CPU's per-chunk rounding averages out)
// and of float64 (every len), deterministic (twice, bitwise), 0 for an empty range.
TEST(gpu_sumsq) {
    const int64_t lens[] = {0, 1, 4095, 4096, 4097, 3000017};
    const int64_t nmax = 3000017 + 1;
    float* g = (float*)malloc(4 * nmax);
    rand_f(g, nmax, 1e-2, 1901);
    float* dg = (float*)GM_UP(g, nmax);
    for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
        int64_t len = lens[k];
        const int start = k % 2; // odd start: a segment need not be aligned
        double ref = 0.0;
        for (int64_t i = 0; i < len; i++) ref += (double)g[start + i] * g[start + i];
        double cpu = 0.0, gpu = 0.0, gpu2 = 0.0;
        ON_CPU(cpu = op_sumsq(g + start, len));
        ON_GPU(gpu = op_sumsq(dg + start, len));
        ON_GPU(gpu2 = op_sumsq(dg + start, len));
        char what[96];
        double e_ref = ref > 0 ? fabs(gpu - ref) / ref : fabs(gpu);
        double e_cpu = cpu > 0 ? fabs(gpu - cpu) / cpu : fabs(gpu);
        printf("    sumsq len %lld: gpu %.17g cpu %.17g float64 %.17g\n", (long long)len, gpu, cpu, ref);
        snprintf(what, sizeof(what), "sumsq len %lld vs float64", (long long)len);
        GPU_COMPARE(what, e_ref, 1e-6);
        if (len > 1000000) {
            snprintf(what, sizeof(what), "sumsq len %lld vs CPU", (long long)len);
            GPU_COMPARE(what, e_cpu, 1e-6);
        }
        snprintf(what, sizeof(what), "sumsq len %lld, run twice", (long long)len);
        gm_bitwise(what, &gpu2, &gpu, 1, 8);
        if (len == 0) CHECK(gpu == 0.0 && cpu == 0.0);
    }
    free(g);
    cudaCheck(cudaFree(dg));
}

// The gradient norm's sum of squares over many segments at once (one read-back per step): equal
// within 1e-6 to the CPU and to float64, deterministic, empty segments included.
TEST(gpu_sumsq_many_segments) {
    const int64_t lens[] = {4097, 0, 1, 12345, 4096, 77};
    const int n = (int)(sizeof(lens) / sizeof(lens[0]));
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i] + 3; // gaps between segments, as padding makes
    float* g = (float*)malloc(4 * total);
    rand_f(g, total, 1e-2, 1907);
    float* dg = (float*)GM_UP(g, total);
    const float* hp[6];
    const float* dp[6];
    double ref = 0.0;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        hp[i] = g + at;
        dp[i] = dg + at;
        for (int64_t j = 0; j < lens[i]; j++) ref += (double)g[at + j] * g[at + j];
        at += lens[i] + 3;
    }
    double cpu = 0.0, gpu = 0.0, gpu2 = 0.0;
    ON_CPU(cpu = op_sumsq_many(hp, lens, n));
    ON_GPU(gpu = op_sumsq_many(dp, lens, n));
    ON_GPU(gpu2 = op_sumsq_many(dp, lens, n));
    GPU_COMPARE("sumsq of 6 segments vs float64", fabs(gpu - ref) / ref, 1e-6);
    GPU_COMPARE("sumsq of 6 segments vs CPU", fabs(gpu - cpu) / cpu, 1e-6);
    gm_bitwise("sumsq of 6 segments, run twice", &gpu2, &gpu, 1, 8);
    free(g);
    cudaCheck(cudaFree(dg));
}

// ---- The step's scalars on the device: norm, clip scale and finite flag from the sum of squares,
// bitwise equal to the CPU's; AdamW reads them there: a clipped step equals the CPU's, a step whose
// sum of squares is not finite (NaN, inf) changes nothing.
TEST(gpu_step_scalars_clip_and_skip) {
    const int64_t n = 3000;
    Segment seg = {0, n, 1};
    AdamWParams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, 3);
    float *w = (float*)malloc(sizeof(float) * n), *g = (float*)malloc(sizeof(float) * n);
    float *m0 = (float*)malloc(sizeof(float) * n), *v0 = (float*)malloc(sizeof(float) * n);
    rand_f(w, n, 0.02, 71); rand_f(g, n, 1.0, 72); rand_f(m0, n, 0.1, 73); rand_f(v0, n, 0.1, 74);
    for (int64_t i = 0; i < n; i++) v0[i] = v0[i] * v0[i];
    const double sumsqs[4] = {0.25, 16.0, NAN, INFINITY}; // unclipped, clipped (norm 4 > 1), two non-finite
    for (int c = 0; c < 4; c++) {
        StepScalars hs;
        memset(&hs, 0, sizeof(hs));
        hs.sumsq = sumsqs[c];
        StepScalars cs = hs;
        ON_CPU(op_step_scalars(&cs, 1.0f));
        StepScalars* dsc = (StepScalars*)gpu_copy_of(&hs, sizeof(hs));
        ON_GPU(op_step_scalars(dsc, 1.0f));
        StepScalars gs;
        gpu_to_host(&gs, dsc, sizeof(gs));
        printf("    sumsq %g: norm %g, scale %g, finite %d (CPU %g, %g, %d)\n", sumsqs[c], gs.norm, gs.grad_scale, gs.finite,
               cs.norm, cs.grad_scale, cs.finite);
        CHECKF(!memcmp(&gs.norm, &cs.norm, 4) && gs.grad_scale == cs.grad_scale && gs.finite == cs.finite,
               "sumsq %g: the device's scalars differ from the CPU's", sumsqs[c]);
        CHECK(gs.finite == (c < 2) && (c >= 2 || gs.grad_scale == (c == 1 ? 0.25f : 1.0f))); // (unused when not finite)
        // AdamW on both devices with these scalars
        floatX* pc = (floatX*)calloc(n, sizeof(floatX));
        float *mc = (float*)malloc(sizeof(float) * n), *vc = (float*)malloc(sizeof(float) * n), *wc = (float*)malloc(sizeof(float) * n);
        memcpy(mc, m0, sizeof(float) * n); memcpy(vc, v0, sizeof(float) * n); memcpy(wc, w, sizeof(float) * n);
        ON_CPU(op_adamw_scalars(pc, wc, mc, vc, g, &seg, 1, &hp, &cs, NULL));
        floatX* dp = (floatX*)gpu_zeros(sizeof(floatX) * n);
        float* dw = (float*)gpu_copy_of(w, sizeof(float) * n);
        float* dm = (float*)gpu_copy_of(m0, sizeof(float) * n);
        float* dv = (float*)gpu_copy_of(v0, sizeof(float) * n);
        float* dg = (float*)gpu_copy_of(g, sizeof(float) * n);
        ON_GPU(op_adamw_scalars(dp, dw, dm, dv, dg, &seg, 1, &hp, dsc, NULL));
        float* wg = (float*)malloc(sizeof(float) * n);
        gpu_to_host(wg, dw, sizeof(float) * n);
        CHECKF(!memcmp(wg, wc, sizeof(float) * n), "sumsq %g: GPU and CPU masters differ", sumsqs[c]);
        int unchanged = !memcmp(wc, w, sizeof(float) * n) && !memcmp(mc, m0, sizeof(float) * n);
        CHECKF(unchanged == (c >= 2), "sumsq %g: the step %s", sumsqs[c], unchanged ? "changed nothing" : "was applied");
        free(pc); free(mc); free(vc); free(wc); free(wg);
        void* bufs[] = {dsc, dp, dw, dm, dv, dg};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    }
    free(w); free(g); free(m0); free(v0);
}

// ---- The overflow check proved on the device (op_adamw_bound, issue 20 item 4): the update folds
// the new state's largest |m|, v, |w| into AdamWMax as it runs, on the GPU with a block reduction
// and atomicMax on the bits; the maxima equal the CPU fold's bit for bit (a long segment: many
// blocks), and an update leaving a value that is not finite clears known
// on both. With the maxima, the next normal step is proved on both devices (the check kernel then
// returns at once); the finite learning rate FLT_MAX, or maxima unknown (a start, a load), is not
// proved, and its check runs and flags the overflow as before.
TEST(gpu_adamw_bound_proves) {
    const int64_t n = 200001 + 64;
    Segment segs[2] = {{0, 33, 1}, {64, 200001, 0}};
    float *w = (float*)malloc(4 * n), *m = (float*)malloc(4 * n), *v = (float*)malloc(4 * n), *g = (float*)malloc(4 * n);
    floatX* p = (floatX*)malloc(sizeof(floatX) * n);
    rand_f(w, n, 0.5, 2201); rand_f(m, n, 0.01, 2202); rand_f(v, n, 1e-4, 2203); rand_f(g, n, 1.0, 2204);
    for (int64_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); p[i] = rn(w[i]); }
    for (int c = 0; c < 2; c++) { // 0: a normal update; 1: one whose m - g overflows (known cleared)
        float *w2 = (float*)malloc(4 * n), *m2 = (float*)malloc(4 * n), *v2 = (float*)malloc(4 * n), *g2 = (float*)malloc(4 * n);
        floatX* p2 = (floatX*)malloc(sizeof(floatX) * n);
        memcpy(w2, w, 4 * n); memcpy(m2, m, 4 * n); memcpy(v2, v, 4 * n); memcpy(g2, g, 4 * n); memcpy(p2, p, sizeof(floatX) * n);
        if (c == 1) { m2[150000] = 3.4e38f; g2[150000] = -3.4e38f; }
        AdamWParams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0};
        adamw_bias_corrections(&hp, 5);
        StepScalars hs;
        memset(&hs, 0, sizeof(hs));
        hs.finite = 1;
        hs.grad_scale = 1.0f;
        hs.sumsq = 4.0;
        StepScalars cs = hs;
        AdamWMax cm = {7.0f, 7.0f, 7.0f, 0}, gm;
        float *dw = (float*)GM_UP(w2, n), *dm = (float*)GM_UP(m2, n), *dv = (float*)GM_UP(v2, n), *dg = (float*)GM_UP(g2, n);
        floatX* dp = (floatX*)GM_UP(p2, n);
        StepScalars* dsc = (StepScalars*)gpu_copy_of(&hs, sizeof(hs));
        AdamWMax* dmx = (AdamWMax*)gpu_copy_of(&cm, sizeof(cm));
        ON_CPU(op_adamw_max_begin(&cm, &cs); op_adamw_scalars(p2, w2, m2, v2, g2, segs, 2, &hp, &cs, &cm));
        ON_GPU(op_adamw_max_begin(dmx, dsc); op_adamw_scalars(dp, dw, dm, dv, dg, segs, 2, &hp, dsc, dmx));
        gpu_to_host(&gm, dmx, sizeof(gm));
        printf("    update %d: maxima |m| %g, v %g, |w| %g, known %d (CPU %g, %g, %g, %d)\n", c, gm.m, gm.v, gm.w, gm.known,
               cm.m, cm.v, cm.w, cm.known);
        CHECKF(!memcmp(&gm, &cm, sizeof(gm)), "update %d: the GPU's maxima differ from the CPU's", c);
        CHECKF(cm.known == (c == 0) && (c == 1 || (cm.m > 0.0f && cm.v > 0.0f && cm.w > 0.4f)), "update %d: maxima %g %g %g known %d",
               c, cm.m, cm.v, cm.w, cm.known);
        float* hw = (float*)malloc(4 * n);
        GM_DOWN(hw, dw, n);
        gm_bitwise("adamw with the maxima fold", hw, w2, n, 4);
        free(hw);
        // the next step: normal (proved when known), lr FLT_MAX (never proved), maxima unknown
        for (int k = 0; k < 3 && c == 0; k++) {
            AdamWParams np = hp;
            adamw_bias_corrections(&np, 6);
            if (k == 1) np.lr = FLT_MAX;
            AdamWMax ck = cm;
            if (k == 2) ck.known = 0;
            gpu_upload(dmx, &ck, sizeof(ck));
            StepScalars c2 = hs, g2s;
            gpu_upload(dsc, &hs, sizeof(hs));
            ON_CPU(op_adamw_bound(&c2, &ck, &np); op_adamw_check(w2, m2, v2, g2, segs, 2, &np, &c2));
            ON_GPU(op_adamw_bound(dsc, dmx, &np); op_adamw_check(dw, dm, dv, dg, segs, 2, &np, dsc));
            gpu_to_host(&g2s, dsc, sizeof(g2s));
            const char* what[3] = {"normal step", "lr FLT_MAX", "maxima unknown"};
            printf("    %-15s proved GPU %d, CPU %d; overflow GPU %d, CPU %d\n", what[k], g2s.proved, c2.proved, g2s.overflow, c2.overflow);
            CHECKF(g2s.proved == (k == 0) && c2.proved == (k == 0), "%s: proved GPU %d, CPU %d (expected %d)", what[k], g2s.proved,
                   c2.proved, k == 0);
            CHECKF(g2s.overflow == (k == 1) && c2.overflow == (k == 1), "%s: overflow GPU %d, CPU %d (expected %d)", what[k],
                   g2s.overflow, c2.overflow, k == 1);
        }
        void* bufs[] = {dw, dm, dv, dg, dp, dsc, dmx};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
        free(w2); free(m2); free(v2); free(g2); free(p2);
    }
    free(w); free(m); free(v); free(g); free(p);
}

// ---- The overflow check (op_adamw_check) on the device: the same flag as the CPU's for a normal
// step, the finite learning rate FLT_MAX, one master at 3.4e38 (infinite as BF16 only), an
// overflowing m - g far into a long segment (the grid-stride loop), and a step whose norm is not
// finite; the check writes nothing, and the update behind the flag changes nothing when it is set
// (the normal step's update equals the CPU's bitwise).
TEST(gpu_adamw_check_overflow) {
    const int64_t n = 1500007 + 40;
    Segment segs[2] = {{0, 20, 1}, {40, 1500007, 0}};
    float *w = (float*)malloc(4 * n), *m = (float*)malloc(4 * n), *v = (float*)malloc(4 * n), *g = (float*)malloc(4 * n);
    floatX* p = (floatX*)malloc(sizeof(floatX) * n);
    rand_f(w, n, 0.5, 2101); rand_f(m, n, 0.01, 2102); rand_f(v, n, 1e-4, 2103); rand_f(g, n, 1.0, 2104);
    for (int64_t i = 0; i < n; i++) { v[i] = fabsf(v[i]); p[i] = rn(w[i]); }
    const char* names[5] = {"normal step", "lr FLT_MAX", "master 3.4e38", "m - g overflows", "norm not finite"};
    float *w2 = (float*)malloc(4 * n), *m2 = (float*)malloc(4 * n), *v2 = (float*)malloc(4 * n), *g2 = (float*)malloc(4 * n);
    floatX* p2 = (floatX*)malloc(sizeof(floatX) * n);
    float *hw = (float*)malloc(4 * n), *hm = (float*)malloc(4 * n);
    for (int c = 0; c < 5; c++) {
        AdamWParams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0, 0};
        adamw_bias_corrections(&hp, 4);
        memcpy(w2, w, 4 * n); memcpy(m2, m, 4 * n); memcpy(v2, v, 4 * n); memcpy(g2, g, 4 * n); memcpy(p2, p, sizeof(floatX) * n);
        if (c == 1) hp.lr = FLT_MAX;
        if (c == 2) w2[7] = 3.4e38f;
        if (c == 3) { m2[1400000] = 3.4e38f; g2[1400000] = -3.4e38f; }
        StepScalars hs;
        memset(&hs, 0, sizeof(hs));
        hs.finite = c != 4;
        hs.grad_scale = 0.75f;
        StepScalars cs = hs;
        float *dw = (float*)GM_UP(w2, n), *dm = (float*)GM_UP(m2, n), *dv = (float*)GM_UP(v2, n), *dg = (float*)GM_UP(g2, n);
        floatX* dp = (floatX*)GM_UP(p2, n);
        StepScalars* dsc = (StepScalars*)gpu_copy_of(&hs, sizeof(hs));
        ON_CPU(op_adamw_check(w2, m2, v2, g2, segs, 2, &hp, &cs));
        ON_GPU(op_adamw_check(dw, dm, dv, dg, segs, 2, &hp, dsc));
        StepScalars gs;
        gpu_to_host(&gs, dsc, sizeof(gs));
        int want = c == 1 || c == 3 || (c == 2 && sizeof(floatX) == 2);
        printf("    %-16s overflow GPU %d, CPU %d (expected %d)\n", names[c], gs.overflow, cs.overflow, want);
        CHECKF(gs.overflow == want && cs.overflow == want, "%s: overflow GPU %d, CPU %d, expected %d", names[c], gs.overflow, cs.overflow, want);
        GM_DOWN(hw, dw, n);
        GM_DOWN(hm, dm, n);
        CHECKF(!memcmp(hw, w2, 4 * n) && !memcmp(hm, m2, 4 * n), "%s: the GPU's check wrote", names[c]);
        ON_CPU(op_adamw_scalars(p2, w2, m2, v2, g2, segs, 2, &hp, &cs, NULL));
        ON_GPU(op_adamw_scalars(dp, dw, dm, dv, dg, segs, 2, &hp, dsc, NULL));
        GM_DOWN(hw, dw, n);
        char what[96];
        snprintf(what, sizeof(what), "adamw after the check: %s", names[c]);
        gm_bitwise(what, hw, w2, n, 4);
        int unchanged = !memcmp(hw, c == 2 ? w2 : w, 4 * n);
        CHECKF(unchanged == (c != 0), "%s: the update %s", names[c], unchanged ? "changed nothing" : "was applied");
        void* bufs[] = {dw, dm, dv, dg, dp, dsc};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    }
    free(w); free(m); free(v); free(g); free(p); free(w2); free(m2); free(v2); free(g2); free(p2); free(hw); free(hm);
}
