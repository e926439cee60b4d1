// test/gpu_attention.h — GPU-vs-CPU cases (see test/test_gpu.cu for the helpers).
//
// Causal attention, FlashAttention-2 style (ops/attention.cuh), multi-head and grouped-query (NKV kv
// heads shared by NH/NKV query heads each): the forward's out and lse, and the
// backward's dq, dk, dv (compared apart: dk and dv come from one kernel, dq from another). The
// backward of both devices reads the CPU forward's out and lse, so a forward error cannot hide in
// it. GPU outputs start as NaN (all bits set), so an element a kernel forgets to write fails.
// Shapes: T of one row, T not a multiple of any tile (the tiles are 16 and 32 rows), odd head
// sizes, and the largest head sizes the scalar kernels' shared memory is sized for (all on the
// scalar kernels); full 64-row tiles at T = 256 with HS 64 and 128 and GPT-2's T = 1024 (on the
// tensor-core kernels: each case says which kernels it must take). Before them, the tensor-core
// instructions alone against the PTX ISA; after them, the planted missing cp.async wait.

// ---- The tensor-core instructions (ops/tensor_core.cuh) against the PTX ISA's documented layouts.
// The kernels below build and read fragments with the ISA's formulas written out here (not with
// the attention kernels' helpers), so a wrong layout in the emulator, or in the wrappers, fails.
// g = lane >> 2 (groupID), t = lane % 4 (threadID_in_group). Under the emulator these are the
// proof that it implements the documented semantics; on a GPU they check the wrappers' PTX.
#ifndef ENABLE_FP32
static __device__ inline float tct_f(bf16_t x) { return bf16_to_f32(x); }
static __device__ inline uint32_t tct_pair(bf16_t lo, bf16_t hi) { return (uint32_t)lo.bits | (uint32_t)hi.bits << 16; }

// One warp: D (16x8) = A (16x16, row-major) B (16x8, k x n, row-major here) + C (16x8), each lane
// assembling its fragments from global memory by PTX ISA 9.7.14.5.8 (m16n8k16, .bf16):
//   a_i: row g (i in 0,1,4,5) or g + 8, col 2t + (i & 1) (+ 8 for i >= 4); register i / 2
//   b_i: row (k) 2t + (i & 1) (+ 8 for i >= 2), col (n) g; register i / 2
//   c_i: row g (i < 2) or g + 8, col 2t + (i & 1)
__global__ static void tct_mma_kernel(float* D, const bf16_t* A, const bf16_t* B, const float* Cm) {
    int lane = threadIdx.x, g = lane >> 2, t = lane % 4;
    uint32_t a[4], b[2];
    float c[4], d[4];
    for (int r = 0; r < 4; r++) { // register r holds a_{2r}, a_{2r+1}
        int i = 2 * r, row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = 2 * t + (i >= 4 ? 8 : 0);
        a[r] = tct_pair(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) { // register r holds b_{2r}, b_{2r+1}
        int k = 2 * t + (r ? 8 : 0);
        b[r] = tct_pair(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    for (int i = 0; i < 4; i++) c[i] = Cm[(i < 2 ? g : g + 8) * 8 + 2 * t + (i & 1)];
    tc_mma_bf16(d, a, b, c);
    for (int i = 0; i < 4; i++) D[(i < 2 ? g : g + 8) * 8 + 2 * t + (i & 1)] = d[i];
}

// The products are small integers times powers of two: every sum is exact, the result is unique.
TEST(gpu_tc_mma_layout) {
    bf16_t A[256], B[128];
    float Cm[128], D[128];
    for (int i = 0; i < 256; i++) A[i] = f32_to_bf16((float)((i * 7) % 23 - 11) * 0.25f);
    for (int i = 0; i < 128; i++) B[i] = f32_to_bf16((float)((i * 5) % 19 - 9) * 0.5f);
    for (int i = 0; i < 128; i++) Cm[i] = (float)(i % 13) - 6.0f;
    bf16_t* dA = (bf16_t*)gpu_copy_of(A, sizeof(A));
    bf16_t* dB = (bf16_t*)gpu_copy_of(B, sizeof(B));
    float* dC = (float*)gpu_copy_of(Cm, sizeof(Cm));
    float* dD = (float*)gpu_zeros(sizeof(D));
    int bad = 0;
    for (int run = 0; run < 2; run++) { // the emulator alternates the lanes' order between launches
        gpu_fill(dD, 0xFF, sizeof(D));
        tct_mma_kernel<<<1, 32, 0, g_stream>>>(dD, dA, dB, dC);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaStreamSynchronize(g_stream));
        gpu_to_host(D, dD, sizeof(D));
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double ref = Cm[m * 8 + n];
                for (int k = 0; k < 16; k++) ref += (double)bf16_to_f32(A[m * 16 + k]) * bf16_to_f32(B[k * 8 + n]);
                bad += D[m * 8 + n] != (float)ref;
            }
    }
    CHECKF(bad == 0, "%d of 256 elements of D differ from A B + C", bad);
    printf("    mma.m16n8k16 bf16: D = A B + C exactly, %s\n", bad ? "NO" : "yes");
    cudaCheck(cudaFree(dA)); cudaCheck(cudaFree(dB)); cudaCheck(cudaFree(dC)); cudaCheck(cudaFree(dD));
}

#ifdef ZT_CUDA_EMU
// The emulator's accumulation model (cuda_emu.h, "THE ACCUMULATION ORDER IS A MODEL"): d = c, then
// k = 0..15, each addition rounded to FP32. With c = 2^24 and sixteen products of 1, every addition
// of 1 to 2^24 rounds back to 2^24 (ties to even): 2^24, where adding the products first gives
// 2^24 + 16. A GPU need not agree, so this case runs under the emulator only.
TEST(gpu_tc_mma_accumulation_model) {
    bf16_t A[256], B[128];
    float Cm[128], D[128];
    for (int i = 0; i < 256; i++) A[i] = f32_to_bf16(1.0f);
    for (int i = 0; i < 128; i++) { B[i] = f32_to_bf16(1.0f); Cm[i] = 16777216.0f; }
    bf16_t* dA = (bf16_t*)gpu_copy_of(A, sizeof(A));
    bf16_t* dB = (bf16_t*)gpu_copy_of(B, sizeof(B));
    float* dC = (float*)gpu_copy_of(Cm, sizeof(Cm));
    float* dD = (float*)gpu_zeros(sizeof(D));
    tct_mma_kernel<<<1, 32, 0, g_stream>>>(dD, dA, dB, dC);
    cudaCheck(cudaStreamSynchronize(g_stream));
    gpu_to_host(D, dD, sizeof(D));
    CHECKF(D[0] == 16777216.0f && D[127] == 16777216.0f, "2^24 + 16 x 1 gave %.1f (model: 16777216)", D[0]);
    cudaCheck(cudaFree(dA)); cudaCheck(cudaFree(dB)); cudaCheck(cudaFree(dC)); cudaCheck(cudaFree(dD));
}
#endif

// One warp, a 16x16 tile of BF16 values v(r, c) = 16 r + c in shared memory (rows 16-byte aligned).
// Lane l gives the address of row l % 16 at column 8 (l / 16), so 8x8 matrix m (lanes 8m..8m+7)
// is the tile's block (rows 8 (m % 2) .., cols 8 (m / 2) ..). Variant x = 0..5: x1, x2, x4, then
// the same .trans. out (6, 32 lanes, 4 registers) [=], unused registers 0.
__global__ static void tct_ldmatrix_kernel(uint32_t* out) {
    __shared__ __align__(16) bf16_t tile[16 * 16]; // ldmatrix rows: 16-byte aligned
    int lane = threadIdx.x;
    for (int e = lane; e < 256; e += 32) tile[e] = f32_to_bf16((float)e);
    __syncwarp();
    const bf16_t* row = tile + (lane % 16) * 16 + 8 * (lane / 16);
    uint32_t r[6][4] = {};
    tc_ldmatrix_x1(r[0], row);
    tc_ldmatrix_x2(r[1], row);
    tc_ldmatrix_x4(r[2], row);
    tc_ldmatrix_x1_trans(r[3], row);
    tc_ldmatrix_x2_trans(r[4], row);
    tc_ldmatrix_x4_trans(r[5], row);
    for (int x = 0; x < 6; x++)
        for (int k = 0; k < 4; k++) out[(x * 32 + lane) * 4 + k] = r[x][k];
}

// PTX ISA "ldmatrix": register m of lane l holds (row l / 4, cols 2 (l % 4), + 1) of matrix m, or
// with .trans (rows 2 (l % 4), + 1, col l / 4); the lower element in the low half.
TEST(gpu_tc_ldmatrix_layout) {
    uint32_t out[6 * 32 * 4];
    uint32_t* d = (uint32_t*)gpu_zeros(sizeof(out));
    tct_ldmatrix_kernel<<<1, 32, 0, g_stream>>>(d);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(g_stream));
    gpu_to_host(out, d, sizeof(out));
    int bad = 0;
    for (int x = 0; x < 6; x++) {
        int nmat = 1 << (x % 3), trans = x >= 3;
        for (int lane = 0; lane < 32; lane++)
            for (int m = 0; m < 4; m++) {
                uint32_t want = 0;
                if (m < nmat)
                    for (int half = 0; half < 2; half++) {
                        int r = trans ? 2 * (lane % 4) + half : lane / 4, c = trans ? lane / 4 : 2 * (lane % 4) + half;
                        int v = (8 * (m % 2) + r) * 16 + 8 * (m / 2) + c;
                        want |= (uint32_t)f32_to_bf16((float)v).bits << (16 * half);
                    }
                bad += out[(x * 32 + lane) * 4 + m] != want;
            }
    }
    CHECKF(bad == 0, "%d registers differ from the documented ldmatrix layout", bad);
    printf("    ldmatrix x1/x2/x4 and .trans: %s\n", bad ? "WRONG" : "as documented");
    cudaCheck(cudaFree(d));
}

// 32 threads, two groups of 16-byte copies: before any wait, after wait_group 1 (the older group
// only), after wait_group 0 (both); the last read is of another thread's copy after a barrier.
// obs (32 threads, 4 observations): the first 4 bytes of the destination each time, as seen.
__global__ static void tct_cp_async_kernel(uint32_t* obs, const uint32_t* src) {
    __shared__ __align__(16) uint32_t dst[2][32 * 4]; // 16-byte cp.async destinations
    int t = threadIdx.x;
    tc_cp_async_16(&dst[0][4 * t], src + 4 * t); // group 1
    tc_cp_async_commit();
    tc_cp_async_16(&dst[1][4 * t], src + 128 + 4 * t); // group 2
    tc_cp_async_commit();
    obs[t * 4 + 0] = dst[0][4 * t];     // not landed: NaN bytes under the emulator (a GPU may differ)
    tc_cp_async_wait<1>();
    obs[t * 4 + 1] = dst[0][4 * t] ^ (dst[1][4 * t] == 0xFFFFFFFFu ? 0 : 0x80000000u); // group 1 landed, 2 not
    tc_cp_async_wait<0>();
    __syncthreads(); // every thread's copies are visible to every thread
    obs[t * 4 + 2] = dst[1][4 * t];
    obs[t * 4 + 3] = dst[1][4 * ((t + 1) % 32)];
}

TEST(gpu_tc_cp_async_groups) {
    uint32_t src[256], obs[128];
    for (int i = 0; i < 256; i++) src[i] = 1000 + i;
    uint32_t* dsrc = (uint32_t*)gpu_copy_of(src, sizeof(src));
    uint32_t* dobs = (uint32_t*)gpu_zeros(sizeof(obs));
#ifdef ZT_CUDA_EMU
    // the emulator lands a copy at one end or the other (alternating per launch): first at issue, where
    // every observation is the source's, then at the wait, below
    int saved_mode = emu::g_cp_async_env;
    emu::g_cp_async_env = 1;
    tct_cp_async_kernel<<<1, 32, 0, g_stream>>>(dobs, dsrc);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(g_stream));
    gpu_to_host(obs, dobs, sizeof(obs));
    int early = 0;
    for (int t = 0; t < 32; t++)
        early += obs[t * 4 + 0] != src[4 * t] || obs[t * 4 + 1] != (src[4 * t] ^ 0x80000000u);
    CHECKF(early == 0, "landing at issue: %d observations are not the source's at once", early);
    emu::g_cp_async_env = 0;
#endif
    tct_cp_async_kernel<<<1, 32, 0, g_stream>>>(dobs, dsrc);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(g_stream));
    gpu_to_host(obs, dobs, sizeof(obs));
#ifdef ZT_CUDA_EMU
    emu::g_cp_async_env = saved_mode;
#endif
    int bad = 0;
    for (int t = 0; t < 32; t++) {
#ifdef ZT_CUDA_EMU
        bad += obs[t * 4 + 0] != 0xFFFFFFFFu;                 // landing at the wait: nothing lands before a wait
        bad += obs[t * 4 + 1] != src[4 * t];                  // wait_group 1: group 1 only
#else
        bad += (obs[t * 4 + 1] & 0x7FFFFFFFu) != src[4 * t];  // a GPU may land group 2 early
#endif
        bad += obs[t * 4 + 2] != src[128 + 4 * t];
        bad += obs[t * 4 + 3] != src[128 + 4 * ((t + 1) % 32)];
    }
    CHECKF(bad == 0, "%d observations differ from cp.async's commit/wait semantics", bad);
    cudaCheck(cudaFree(dsrc)); cudaCheck(cudaFree(dobs));
}
#endif // !ENABLE_FP32

// ||a - b|| / ||b|| over columns [off, off + width) of (N, QKV) tensors (the q, k or v heads).
static double att_relerr_part(const floatX* a, const floatX* b, int64_t N, int QKV, int off, int width) {
    floatX* pa = (floatX*)malloc((size_t)N * width * sizeof(floatX));
    floatX* pb = (floatX*)malloc((size_t)N * width * sizeof(floatX));
    for (int64_t n = 0; n < N; n++) {
        memcpy(pa + n * width, a + n * QKV + off, (size_t)width * sizeof(floatX));
        memcpy(pb + n * width, b + n * QKV + off, (size_t)width * sizeof(floatX));
    }
    double e = relerr_x(pa, pb, N * width);
    free(pa);
    free(pb);
    return e;
}

// One shape: forward and backward on both devices, compared. want_tc: the tensor-core kernels must
// (1) or must not (0) take this shape, so a case cannot silently test the other path. NKV: key/value
// heads (grouped-query attention; 0: NH, multi-head attention as GPT-2's). seg: a segment table (B,
// T) on the host (packed examples), or NULL.
static void gpu_attention_case(int B, int T, int NH, int HS, uint64_t seed, int want_tc = 0, int NKV = 0,
                               const int* seg = NULL) {
    if (NKV == 0) NKV = NH;
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS;
    int64_t nqkv = (int64_t)B * T * QKV, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T;
    size_t bqkv = nqkv * sizeof(floatX), bout = nout * sizeof(floatX), blse = nlse * sizeof(float);
    printf("    shape B=%d T=%d NH=%d NKV=%d HS=%d%s\n", B, T, NH, NKV, HS, seg ? ", packed examples" : "");
    int* d_seg = seg ? (int*)gpu_copy_of(seg, sizeof(int) * B * T) : NULL;
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
    ON_CPU(op_attention_forward(out, lse, qkv, seg, B, T, NH, NKV, HS));
    ON_CPU(op_attention_backward(dqkv, dout, qkv, out, lse, seg, B, T, NH, NKV, HS));

    // forward
    floatX* d_qkv = (floatX*)gpu_copy_of(qkv, bqkv);
    floatX* d_out = (floatX*)gpu_zeros(bout);
    float* d_lse = (float*)gpu_zeros(blse);
    gpu_fill(d_out, 0xFF, bout); // NaN: unwritten elements fail
    gpu_fill(d_lse, 0xFF, blse);
    int tc = attention_uses_tc(T, C / NH, d_out, d_lse, d_qkv, d_seg);
    printf("    kernels: %s\n", tc ? "tensor cores (mma.sync)" : "scalar FP32");
    CHECKF(tc == want_tc, "expected the %s kernels", want_tc ? "tensor-core" : "scalar");
    ON_GPU(op_attention_forward(d_out, d_lse, d_qkv, d_seg, B, T, NH, NKV, HS));
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
    ON_GPU(op_attention_backward(d_dqkv, d_dout, d_qkv, d_outc, d_lsec, d_seg, B, T, NH, NKV, HS));
    gpu_to_host(g_dqkv, d_dqkv, bqkv);
    int64_t N = (int64_t)B * T;
    GPU_COMPARE("attention backward dq", att_relerr_part(g_dqkv, dqkv, N, QKV, 0, C), TOL_GPU_BWD);
    GPU_COMPARE("attention backward dk", att_relerr_part(g_dqkv, dqkv, N, QKV, C, NKV * HS), TOL_GPU_BWD);
    GPU_COMPARE("attention backward dv", att_relerr_part(g_dqkv, dqkv, N, QKV, C + NKV * HS, NKV * HS), TOL_GPU_BWD);

    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(g_out); free(g_lse); free(g_dqkv);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_outc)); cudaCheck(cudaFree(d_lsec));
    cudaCheck(cudaFree(d_dqkv));
    if (d_seg) cudaCheck(cudaFree(d_seg));
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
#ifdef ENABLE_FP32
#define ATT_TC 0 // the FP32 build has no tensor-core path
#else
#define ATT_TC 1
#endif
// GPT-2 small's attention: 12 heads of 64, T = 1024 (emulated: one sequence of one head).
TEST(gpu_attention_gpt2) { gpu_attention_case(GPU_BIG(2, 1), 1024, GPU_BIG(12, 1), 64, 35, ATT_TC); }
// Full tiles on tensor cores: 4 query tiles x 4 key tiles (double buffering, skipped tiles, the
// diagonal's mask), both head sizes.
// (The FP32 build would run the scalar kernels on them, which the other cases cover.)
#ifdef ENABLE_FP32
#define ATT_TC_ONLY() TEST_SKIP("the FP32 build has no tensor-core attention")
#else
#define ATT_TC_ONLY() do {} while (0)
#endif
TEST(gpu_attention_tc_hs64) { ATT_TC_ONLY(); gpu_attention_case(2, 256, 2, 64, 38, ATT_TC); }
TEST(gpu_attention_tc_hs128) { ATT_TC_ONLY(); gpu_attention_case(1, 256, 2, 128, 39, ATT_TC); }
// The largest head sizes (the shared-memory layouts are sized for HS = 256); HS 128 with T not a
// multiple of 64 takes the scalar kernels.
TEST(gpu_attention_hs128) { gpu_attention_case(1, 100, 2, 128, 36); }
TEST(gpu_attention_hs256) { gpu_attention_case(2, 77, 2, 256, 37); }

// Grouped-query attention (query head h reads kv head h / (NH/NKV); dK/dV summed over the group).
// Scalar kernels: 2 query heads per kv head at T = 100 (not a tile multiple), and one kv head for 3
// query heads with HS 32 (llama-tiny's head size).
TEST(gpu_attention_gqa) {
    gpu_attention_case(1, 100, 4, 12, 50, 0, 2);
    gpu_attention_case(2, 77, 3, 32, 51, 0, 1);
}
// Tensor cores at T 256 (4 x 4 tiles), HS 64 and 128: GQA ratios 2 and 4, and a single kv head for 3
// query heads (ratio 1 is gpu_attention_tc_hs64 / _hs128). make test runs HS 64 at ratio 2 and the
// single kv head at HS 128; make test-long all six.
static void gpu_attention_tc_gqa_cases(int HS) {
    const struct { int NH, NKV; } g[] = {{4, 2}, {8, 2}, {3, 1}};
    for (int i = 0; i < 3; i++) {
        int sampled = HS == 64 ? i == 0 : i == 2;
        if (!sampled && !test_long()) continue;
        gpu_attention_case(1, 256, g[i].NH, HS, 52 + i, ATT_TC, g[i].NKV);
    }
}
TEST(gpu_attention_tc_gqa_hs64) { ATT_TC_ONLY(); gpu_attention_tc_gqa_cases(64); }
TEST(gpu_attention_tc_gqa_hs128) { ATT_TC_ONLY(); gpu_attention_tc_gqa_cases(128); }

// dK/dV's group split (issue 42): where a shape has fewer than FA_DKDV_TARGET_BLOCKS dK/dV blocks,
// the tensor-core kernel splits each group's query heads into parts, a block per part, and a second
// kernel adds the parts' FP32 sums in order. (The tensor-core GQA cases above split too: their groups
// of 2, 4 and 3 heads in parts of one head each.) First attention_dkdv_nsplit, arithmetic only (both
// builds): the models of the issue with their dK/dV block counts; Qwen2.5-0.5B at B 1, T 2048 (64
// blocks unsplit) reaches the target, Llama-3.2-1B (256) and multi-head attention (rep 1) never split.
// Then, on tensor cores, 3 query heads of HS 64 per kv head at T 128 three ways: the shape's own
// split (3 parts of one head), forced 2 parts (of 1 and 2 heads: a head change inside a block's
// pipeline) and forced 1 (the group in one block, no parts): each against the CPU, each twice
// bitwise equal, and the parts' kernel launched exactly when split (the emulator's launch count).
static long att_dkdv_sum_launches(void) {
#if defined(ZT_CUDA_EMU) && !defined(ENABLE_FP32)
    return emu::g_launches[(const void*)attention_backward_dkdv_sum_kernel];
#else
    return -1; // a GPU does not count launches: the split shows in the block counts alone
#endif
}
// max |a - b| over columns [off, off + width) of (N, QKV) tensors
static double att_maxabs_part(const floatX* a, const floatX* b, int64_t N, int QKV, int off, int width) {
    double m = 0;
    for (int64_t n = 0; n < N; n++)
        for (int c = off; c < off + width; c++) m = fmax(m, fabs((double)ld(a[n * QKV + c]) - ld(b[n * QKV + c])));
    return m;
}
TEST(gpu_attention_tc_gqa_split) {
    const struct { const char* name; int B, T, NH, NKV, HS, want; } m[] = {
        {"Qwen2.5-0.5B", 1, 2048, 14, 2, 64, 3}, {"Qwen2.5-0.5B", 1, 1024, 14, 2, 64, 5},
        {"Qwen2.5-1.5B", 1, 2048, 12, 2, 128, 3}, {"Llama-3.2-1B", 1, 2048, 32, 8, 64, 1},
        {"GPT-2 d12", 1, 1024, 12, 12, 64, 1}, {"GPT-2 d12", 16, 1024, 12, 12, 64, 1},
        {"T not a multiple of 64", 1, 100, 14, 2, 64, 1}};
    for (const auto& x : m) {
        int ns = attention_dkdv_nsplit(x.B, x.T, x.NH, x.NKV, x.HS), unsplit = x.B * x.NKV * (x.T / FA_TILE);
        printf("    %-22s B %2d T %4d NH %2d NKV %2d HS %3d: nsplit %d, dK/dV blocks %4d (unsplit %4d), workspace %zu floats\n",
               x.name, x.B, x.T, x.NH, x.NKV, x.HS, ns, ns * unsplit, unsplit,
               attention_workspace_floats(x.B, x.T, x.NH, x.NKV, x.HS));
        CHECKF(ns == x.want, "%s: nsplit %d, expected %d", x.name, ns, x.want);
        CHECKF(ns == 1 || ns * unsplit >= FA_DKDV_TARGET_BLOCKS || ns == x.NH / x.NKV, "%s: %d blocks", x.name, ns * unsplit);
    }
    CHECK(attention_workspace_floats(1, 2048, 14, 2, 64) == 14 * 2048 + (size_t)3 * 2048 * 2 * 2 * 64); // D, then 3 parts
    CHECK(attention_workspace_floats(1, 2048, 32, 8, 64) == (size_t)32 * 2048);                      // D alone
    size_t most = 0; // the parts of any shape that splits stay within cuBLASLt's share of the workspace
    for (int B = 1; B <= 8; B++)
        for (int NKV = 1; NKV <= 8; NKV++)
            for (int rep = 2; rep <= 8; rep++)
                for (int T = FA_TILE; T <= 8192; T += FA_TILE)
                    for (int HS = 64; HS <= 128; HS += 64) {
                        size_t p = att_dkdv_part_floats(B, T, NKV, HS, attention_dkdv_nsplit(B, T, rep * NKV, NKV, HS));
                        if (p > most) most = p;
                    }
    printf("    the parts' largest workspace (B, NKV 1..8, NH/NKV 2..8, T 64..8192): %zu floats\n", most);
    CHECKF(most < MATMUL_WORKSPACE_BYTES / sizeof(float), "%zu floats", most);
#ifdef ENABLE_FP32
    printf("    the FP32 build has no tensor-core attention: nsplit's arithmetic only\n");
#else
    const int B = 1, T = 128, NH = 3, NKV = 1, HS = 64, C = NH * HS, QKV = (NH + 2 * NKV) * HS;
    int64_t nqkv = (int64_t)B * T * QKV, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T, N = (int64_t)B * T;
    size_t bqkv = nqkv * sizeof(floatX), bout = nout * sizeof(floatX), blse = nlse * sizeof(float);
    floatX* qkv = (floatX*)malloc(bqkv);
    floatX* dout = (floatX*)malloc(bout);
    floatX* out = (floatX*)malloc(bout);
    float* lse = (float*)malloc(blse);
    floatX* dqkv = (floatX*)malloc(bqkv);
    floatX* g[3][2]; // [mode][run]
    rand_x(qkv, nqkv, 1.0, 56);
    rand_x(dout, nout, 1.0, 57);
    ON_CPU(op_attention_forward(out, lse, qkv, NULL, B, T, NH, NKV, HS));
    ON_CPU(op_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, HS));
    floatX* d_qkv = (floatX*)gpu_copy_of(qkv, bqkv);
    floatX* d_dout = (floatX*)gpu_copy_of(dout, bout);
    floatX* d_out = (floatX*)gpu_copy_of(out, bout);
    float* d_lse = (float*)gpu_copy_of(lse, blse);
    floatX* d_dqkv = (floatX*)gpu_zeros(bqkv);
    CHECK(attention_uses_tc(T, HS, d_dqkv, d_dout, d_qkv, d_lse));
    int own = attention_dkdv_nsplit(B, T, NH, NKV, HS);
    CHECKF(own == 3, "this shape's nsplit is %d, expected 3", own);
    const int nsplit[3] = {own, 2, 1}; // mode 0: op_attention_backward's own choice; 1, 2: forced
    for (int mode = 0; mode < 3; mode++) {
        printf("    nsplit %d%s: %d dK/dV blocks\n", nsplit[mode], mode == 0 ? " (the shape's own)" : " (forced)",
               B * NKV * (T / FA_TILE) * nsplit[mode]);
        for (int run = 0; run < 2; run++) {
            g[mode][run] = (floatX*)malloc(bqkv);
            gpu_fill(d_dqkv, 0xFF, bqkv); // NaN: an element the sum kernel forgets fails
            long before = att_dkdv_sum_launches();
            if (mode == 0) ON_GPU(op_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, NULL, B, T, NH, NKV, HS));
            else ON_GPU(attention_backward_cuda_nsplit(d_dqkv, d_dout, d_qkv, d_out, d_lse, NULL, B, T, NH, NKV, HS, nsplit[mode]));
            long sums = att_dkdv_sum_launches() - before;
            if (before >= 0) CHECKF(sums == (nsplit[mode] > 1), "the parts' kernel ran %ld times, nsplit %d", sums, nsplit[mode]);
            gpu_to_host(g[mode][run], d_dqkv, bqkv);
        }
        CHECKF(memcmp(g[mode][0], g[mode][1], bqkv) == 0, "nsplit %d: dqkv differs between two runs", nsplit[mode]);
        printf("    two runs: %s; max |GPU - CPU| dk %.3e dv %.3e dq %.3e\n",
               memcmp(g[mode][0], g[mode][1], bqkv) == 0 ? "bitwise equal" : "DIFFERENT",
               att_maxabs_part(g[mode][0], dqkv, N, QKV, C, NKV * HS), att_maxabs_part(g[mode][0], dqkv, N, QKV, C + NKV * HS, NKV * HS),
               att_maxabs_part(g[mode][0], dqkv, N, QKV, 0, C));
        GPU_COMPARE("attention backward dq", att_relerr_part(g[mode][0], dqkv, N, QKV, 0, C), TOL_GPU_BWD);
        GPU_COMPARE("attention backward dk", att_relerr_part(g[mode][0], dqkv, N, QKV, C, NKV * HS), TOL_GPU_BWD);
        GPU_COMPARE("attention backward dv", att_relerr_part(g[mode][0], dqkv, N, QKV, C + NKV * HS, NKV * HS), TOL_GPU_BWD);
    }
    // dQ does not depend on the split: the same bits every way
    int dq_same = 1;
    for (int64_t n = 0; n < N; n++)
        for (int mode = 1; mode < 3; mode++) dq_same &= memcmp(g[mode][0] + n * QKV, g[0][0] + n * QKV, C * sizeof(floatX)) == 0;
    CHECKF(dq_same, "dq differs between the splits");
    printf("    split (3, 2 parts) against unsplit: max |difference| dk %.3e, %.3e; dv %.3e, %.3e\n",
           att_maxabs_part(g[0][0], g[2][0], N, QKV, C, NKV * HS), att_maxabs_part(g[1][0], g[2][0], N, QKV, C, NKV * HS),
           att_maxabs_part(g[0][0], g[2][0], N, QKV, C + NKV * HS, NKV * HS), att_maxabs_part(g[1][0], g[2][0], N, QKV, C + NKV * HS, NKV * HS));
    for (int mode = 0; mode < 3; mode++) { free(g[mode][0]); free(g[mode][1]); }
    free(qkv); free(dout); free(out); free(lse); free(dqkv);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dqkv));
#endif
}

// Deterministic: the same inputs give the same bits, forward and backward (no atomics), on the
// scalar kernels (T = 300) and on the tensor-core ones (T = 256).
static void gpu_attention_deterministic_case(int B, int T, int NH, int HS, int NKV = 0, const int* seg = NULL) {
    if (NKV == 0) NKV = NH;
    int* d_seg = seg ? (int*)gpu_copy_of(seg, sizeof(int) * B * T) : NULL;
    int C = NH * HS;
    int64_t nqkv = (int64_t)B * T * (NH + 2 * NKV) * HS, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T;
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
        ON_GPU(op_attention_forward(d_out, d_lse, d_qkv, d_seg, B, T, NH, NKV, HS));
        ON_GPU(op_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_seg, B, T, NH, NKV, HS));
        gpu_to_host(run ? out2 : out1, d_out, bout);
        gpu_to_host(run ? lse2 : lse1, d_lse, blse);
        gpu_to_host(run ? dq2 : dq1, d_dqkv, bqkv);
    }
    CHECKF(memcmp(out1, out2, bout) == 0, "forward out differs between two runs");
    CHECKF(memcmp(lse1, lse2, blse) == 0, "forward lse differs between two runs");
    CHECKF(memcmp(dq1, dq2, bqkv) == 0, "backward dqkv differs between two runs");
    printf("    two runs%s, forward and backward: %s\n", seg ? " with a segment table" : "",
           memcmp(dq1, dq2, bqkv) == 0 ? "bitwise equal" : "DIFFERENT");
    if (d_seg) cudaCheck(cudaFree(d_seg));
    free(qkv); free(dout); free(out1); free(out2); free(lse1); free(lse2); free(dq1); free(dq2);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dqkv));
}
TEST(gpu_attention_deterministic) { gpu_attention_deterministic_case(2, 300, 4, 64); }
TEST(gpu_attention_tc_deterministic) { ATT_TC_ONLY(); gpu_attention_deterministic_case(1, 256, 2, 64); }
TEST(gpu_attention_gqa_deterministic) { // the group's dK/dV sum, both kernel sets
    gpu_attention_deterministic_case(1, 70, 4, 16, 1);
    if (ATT_TC) gpu_attention_deterministic_case(1, 256, 2, 64, 1);
}

// ---- Packed examples: the segment table (issue 25; query i sees keys seg[i] .. i of its own row)
// The same comparison with a table, on the scalar kernels (T = 100: examples starting mid-tile and
// on the 16- and 32-row tile edges, GQA) and the tensor-core ones (T = 256: many short examples
// and one long one, starts mid-tile and on the 64-row edges, a row with an example that begins in a
// later key tile than the query tile's first row's, HS 64 and 128). Both sets also hold an example
// that starts at a key block's last key and runs well into the next query tile (47 -> 81 scalar, 63 ->
// 213 at HS 128): the dK/dV walk must not stop before that tile. Then both kernel sets twice:
// bitwise the same (the fixed order without atomics holds with the table).
static const int gseg_scalar[] = {1, 15, 16, 15, 35, 18, /* row 1 */ 3, 97};
static const int gseg_tc64[] = {1, 7, 56, 64, 3, 5, 10, 110, /* row 1 */ 200, 56};
static const int gseg_tc128[] = {30, 2, 31, 151, 42};
TEST(gpu_attention_seg) {
    int seg[2 * 100];
    gm_seg_from_lengths(seg, 2, 100, gseg_scalar, 8);
    gpu_attention_case(2, 100, 4, 12, 60, 0, 2, seg);
}
TEST(gpu_attention_tc_seg_hs64) {
    ATT_TC_ONLY();
    int seg[2 * 256];
    gm_seg_from_lengths(seg, 2, 256, gseg_tc64, 10);
    gpu_attention_case(2, 256, 2, 64, 61, ATT_TC, 1, seg);
}
TEST(gpu_attention_tc_seg_hs128) {
    ATT_TC_ONLY();
    int seg[256];
    gm_seg_from_lengths(seg, 1, 256, gseg_tc128, 5);
    gpu_attention_case(1, 256, 2, 128, 62, ATT_TC, 1, seg);
}
TEST(gpu_attention_seg_deterministic) { // both kernel sets, GQA (the group's dK/dV sum) with a table
    int seg[2 * 256];
    gm_seg_from_lengths(seg, 2, 100, gseg_scalar, 8);
    gpu_attention_deterministic_case(2, 100, 4, 16, 1, seg);
    if (ATT_TC) {
        gm_seg_from_lengths(seg, 2, 256, gseg_tc64, 10);
        gpu_attention_deterministic_case(2, 256, 2, 64, 1, seg);
    }
}

// Strictness, planted: the emulator drops every cp.async.wait_group (emu_cp_async_skip_waits), as
// if the kernel had forgotten them; the copies then never land, the tiles read NaN, and the same
// comparison gpu_attention_tc_hs64 passes must fail. (test/cuda_emu/mutants.py plants the other
// bugs in the source: a wrong fragment index, a wrong wait count, a missing barrier, ...)
TEST(gpu_attention_tc_planted_missing_wait) {
#ifndef ZT_CUDA_EMU
    TEST_SKIP("a fault planted in the emulator");
#else
    ATT_TC_ONLY();
    const int B = 1, T = 128, NH = 1, HS = 64, C = NH * HS;
    int64_t nqkv = (int64_t)B * T * 3 * C, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T;
    floatX* qkv = (floatX*)malloc(nqkv * sizeof(floatX));
    floatX* out = (floatX*)malloc(nout * sizeof(floatX));
    floatX* g_out = (floatX*)malloc(nout * sizeof(floatX));
    float* lse = (float*)malloc(nlse * sizeof(float));
    rand_x(qkv, nqkv, 1.0, 40);
    ON_CPU(op_attention_forward(out, lse, qkv, NULL, B, T, NH, NH, C / NH));
    floatX* d_qkv = (floatX*)gpu_copy_of(qkv, nqkv * sizeof(floatX));
    floatX* d_out = (floatX*)gpu_zeros(nout * sizeof(floatX));
    float* d_lse = (float*)gpu_zeros(nlse * sizeof(float));
    CHECK(attention_uses_tc(T, C / NH, d_out, d_lse, d_qkv, NULL));
    double err[2];
    int saved_mode = emu::g_cp_async_env;
    emu::g_cp_async_env = 0; // copies land at the wait (at issue, a missing wait cannot show)
    for (int planted = 0; planted < 2; planted++) {
        emu_cp_async_skip_waits = planted;
        gpu_fill(d_out, 0xFF, nout * sizeof(floatX));
        ON_GPU(op_attention_forward(d_out, d_lse, d_qkv, NULL, B, T, NH, NH, C / NH));
        emu_cp_async_skip_waits = 0;
        gpu_to_host(g_out, d_out, nout * sizeof(floatX));
        err[planted] = relerr_x(g_out, out, nout);
    }
    emu::g_cp_async_env = saved_mode;
    printf("    forward out rel err: %.3e as written, %.3e without the cp.async waits\n", err[0], err[1]);
    CHECKF(err[0] < TOL_GPU_FWD, "the kernel as written fails: %.3e", err[0]);
    CHECKF(!(err[1] < TOL_GPU_FWD), "the missing wait went unnoticed: %.3e", err[1]);
    free(qkv); free(out); free(g_out); free(lse);
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_lse));
#endif
}

// ---- cuDNN's fused attention (ops/attention_cudnn.cuh, make USE_CUDNN=1, -attn cudnn) against the CPU
// and against our kernels on the same inputs: the forward's out and lse (cuDNN's softmax stats must be
// our lse: the natural-log log-sum-exp of the scaled scores), then the backward from the CPU's out
// and lse (so cuDNN's backward reads an lse of our definition: if the two differed, dq/dk/dv would
// be far off), twice, bit for bit (the deterministic algorithm). cuDNN's functions are called
// directly, not through the dispatcher, so a shape cuDNN refuses fails here instead of falling back
// to our kernels and passing vacuously. SKIP (never PASS) where cuDNN is not there: the emulator, a
// build without USE_CUDNN=1, the FP32 build, no libcudnn.so.9 (or older than 9.0) on the machine.
// Tolerances: test/tolerances.h's TOL_GPU_CUDNN_*, written before any GPU ran it.
static void gpu_attention_cudnn_case(int B, int T, int NH, int NKV, int HS, uint64_t seed) {
#if defined(ZT_CUDA_EMU)
    (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)seed;
    TEST_SKIP("the CUDA emulator has no cuDNN");
#elif !defined(ZT_CUDNN)
    (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)seed;
    TEST_SKIP("built without cuDNN (make USE_CUDNN=1 gpu-binaries)");
#elif defined(ENABLE_FP32)
    (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)seed;
    TEST_SKIP("the FP32 build: cuDNN's fused attention takes BF16 only");
#else
    static char why[512];
    const char* brief;
    if (attention_cudnn_unavailable(1, 1, why, sizeof(why), &brief)) TEST_SKIP(why);
    printf("    cuDNN %zu, shape B=%d T=%d NH=%d NKV=%d HS=%d\n", attention_cudnn_version(), B, T, NH, NKV, HS);
    size_t need = attention_cudnn_workspace_bytes(B, T, NH, NKV, HS);
    CHECKF(need <= GPU_WORK_FLOATS * sizeof(float), "the planner's estimate %zu bytes is above the test's workspace", need);
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS;
    int64_t nqkv = (int64_t)B * T * QKV, nout = (int64_t)B * T * C, nlse = (int64_t)B * NH * T, N = (int64_t)B * T;
    size_t bqkv = nqkv * sizeof(floatX), bout = nout * sizeof(floatX), blse = nlse * sizeof(float);
    floatX *qkv = (floatX*)malloc(bqkv), *dout = (floatX*)malloc(bout), *out = (floatX*)malloc(bout), *dqkv = (floatX*)malloc(bqkv);
    floatX *o_own = (floatX*)malloc(bout), *o_dnn = (floatX*)malloc(bout), *d_own = (floatX*)malloc(bqkv), *d_dnn = (floatX*)malloc(bqkv);
    floatX* d_dnn2 = (floatX*)malloc(bqkv);
    float *lse = (float*)malloc(blse), *l_own = (float*)malloc(blse), *l_dnn = (float*)malloc(blse);
    rand_x(qkv, nqkv, 1.0, seed);
    rand_x(dout, nout, 1.0, seed + 1);
    ON_CPU(op_attention_forward(out, lse, qkv, NULL, B, T, NH, NKV, HS));
    ON_CPU(op_attention_backward(dqkv, dout, qkv, out, lse, NULL, B, T, NH, NKV, HS));
    floatX* g_qkv = (floatX*)gpu_copy_of(qkv, bqkv);
    floatX* g_dout = (floatX*)gpu_copy_of(dout, bout);
    floatX* g_outc = (floatX*)gpu_copy_of(out, bout);
    float* g_lsec = (float*)gpu_copy_of(lse, blse);
    floatX* g_out = (floatX*)gpu_nans(bout);
    float* g_lse = (float*)gpu_nans(blse);
    floatX* g_dqkv = (floatX*)gpu_nans(bqkv);
    // ours (tensor cores where attention_uses_tc takes the shape, else the scalar kernels)
    printf("    ours: %s kernels\n", attention_uses_tc(T, HS, g_out, g_lse, g_qkv, NULL) ? "tensor-core" : "scalar");
    g_attn_cudnn = 0;
    ON_GPU(op_attention_forward(g_out, g_lse, g_qkv, NULL, B, T, NH, NKV, HS));
    gpu_to_host(o_own, g_out, bout);
    gpu_to_host(l_own, g_lse, blse);
    ON_GPU(op_attention_backward(g_dqkv, g_dout, g_qkv, g_outc, g_lsec, NULL, B, T, NH, NKV, HS));
    gpu_to_host(d_own, g_dqkv, bqkv);
    // cuDNN
    char err[512];
    gpu_fill(g_out, 0xFF, bout);
    gpu_fill(g_lse, 0xFF, blse);
    int rc = attention_cudnn_forward(g_out, g_lse, g_qkv, B, T, NH, NKV, HS, err, sizeof(err));
    CHECKF(rc == 0, "cuDNN refused the forward: %s", err);
    cudaCheck(cudaStreamSynchronize(g_stream));
    gpu_to_host(o_dnn, g_out, bout);
    gpu_to_host(l_dnn, g_lse, blse);
    for (int run = 0; run < 2; run++) {
        gpu_fill(g_dqkv, 0xFF, bqkv);
        rc = attention_cudnn_backward(g_dqkv, g_dout, g_qkv, g_outc, g_lsec, B, T, NH, NKV, HS, err, sizeof(err));
        CHECKF(rc == 0, "cuDNN refused the backward: %s", err);
        cudaCheck(cudaStreamSynchronize(g_stream));
        gpu_to_host(run ? d_dnn2 : d_dnn, g_dqkv, bqkv);
    }
    GPU_COMPARE("cuDNN forward out vs CPU", relerr_x(o_dnn, out, nout), TOL_GPU_CUDNN_FWD);
    GPU_COMPARE("cuDNN forward lse vs CPU", relerr_f(l_dnn, lse, nlse), TOL_GPU_CUDNN_FWD);
    GPU_COMPARE("cuDNN forward out vs ours", relerr_x(o_dnn, o_own, nout), TOL_GPU_CUDNN_VS_TC_FWD);
    GPU_COMPARE("cuDNN forward lse vs ours", relerr_f(l_dnn, l_own, nlse), TOL_GPU_CUDNN_VS_TC_FWD);
    const char* part[3] = {"dq", "dk", "dv"};
    int off[3] = {0, C, C + NKV * HS}, width[3] = {C, NKV * HS, NKV * HS};
    for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof(what), "cuDNN backward %s vs CPU", part[k]);
        GPU_COMPARE(what, att_relerr_part(d_dnn, dqkv, N, QKV, off[k], width[k]), TOL_GPU_CUDNN_BWD);
        snprintf(what, sizeof(what), "cuDNN backward %s vs ours", part[k]);
        GPU_COMPARE(what, att_relerr_part(d_dnn, d_own, N, QKV, off[k], width[k]), TOL_GPU_CUDNN_VS_TC_BWD);
    }
    CHECKF(!memcmp(d_dnn, d_dnn2, bqkv), "cuDNN's backward is not bit-reproducible (the deterministic algorithm was asked for)");
    free(qkv); free(dout); free(out); free(dqkv); free(o_own); free(o_dnn); free(d_own); free(d_dnn); free(d_dnn2);
    free(lse); free(l_own); free(l_dnn);
    cudaCheck(cudaFree(g_qkv)); cudaCheck(cudaFree(g_dout)); cudaCheck(cudaFree(g_outc)); cudaCheck(cudaFree(g_lsec));
    cudaCheck(cudaFree(g_out)); cudaCheck(cudaFree(g_lse)); cudaCheck(cudaFree(g_dqkv));
#endif
}
// GPT-2 small's heads (12 x 64) at T = 1024, two sequences; ours on tensor cores.
TEST(gpu_attention_cudnn_gpt2) { gpu_attention_cudnn_case(2, 1024, 12, 12, 64, 51); }
// Grouped-query attention, head size 128 (Llama's), 4 query heads per K/V head; ours on tensor cores.
TEST(gpu_attention_cudnn_gqa_hs128) { gpu_attention_cudnn_case(1, 512, 8, 2, 128, 52); }
// T = 200, not a multiple of any tile (ours: the scalar kernels), GQA 2:1, head size 64.
TEST(gpu_attention_cudnn_t200) { gpu_attention_cudnn_case(2, 200, 4, 2, 64, 53); }

