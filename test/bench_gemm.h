// test/bench_gemm.h — `make bench`, the CPU device's GEMM (ops/matmul.cuh's cpu_gemm) on the shapes
// of a tiny model's step: the LM head's three products (V = 50257, C = 128, B*T = 512 rows) and a
// block's widest (the MLP's fc), on each microkernel path this CPU has (ZT_SIMD's scalar / avx2 /
// avx512), beside the machine's FP32 peak measured by a register-only FMA loop on the same threads.
//
//   test/test_fp32 --bench-gemm [threads (default: OpenMP's)]
//
// GFLOP/s = 2 M N K / time. Each figure: the median of 5 timed repetitions after one warm-up, by
// wall clock and by CPU time per thread (the latter is what a loaded machine disturbs less). The
// peak loop: per thread 16 independent chains of vfmadd231ps on AVX-512 (8 on AVX2), no memory.
// defines: gemm_bench_main
#include <omp.h>

static volatile float g_gemm_bench_sink; // keeps the peak loops' results alive

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

#ifdef ZT_X86
// FLOPs done: iters * 16 chains * 16 lanes * 2 per thread (the result keeps the loop alive)
ZT_TARGET_AVX512 static float gemm_peak_avx512(int64_t iters) {
    __m512 c[16], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < 16; i++) c[i] = _mm512_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) c[i] = _mm512_fmadd_ps(c[i], a, b);
    __m512 s = c[0];
    for (int i = 1; i < 16; i++) s = _mm512_add_ps(s, c[i]);
    float out[16];
    _mm512_storeu_ps(out, s);
    return out[0];
}
// FLOPs done: iters * 12 chains * 8 lanes * 2 per thread
ZT_TARGET_AVX2 static float gemm_peak_avx2(int64_t iters) {
    __m256 c[12], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps((float)i);
    for (int64_t it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) c[i] = _mm256_fmadd_ps(c[i], a, b);
    __m256 s = c[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, c[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}
#endif

static int gemm_bench_main(int argc, char** argv) {
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    int threads = omp_get_max_threads();
    const int64_t BT = 512, C = 128, V = 50257;
    struct { const char* name; int64_t M, N, K, a_rs, a_cs, b_rs, b_cs; int w; } shape[] = {
        // A, B as op_matmul_forward / op_matmul_backward pass them; w: which operand is the weight
        {"LM head forward (BT, V, C)", BT, V, C, C, 1, 1, C, 1},
        {"LM head dinp (BT, C, V)", BT, C, V, V, 1, C, 1, 1},
        {"LM head dweight (V, C, BT)", V, C, BT, 1, V, C, 1, 0},
        {"fc forward (BT, 4C, C)", BT, 4 * C, C, C, 1, 1, C, 1},
    };
    const int nshape = sizeof(shape) / sizeof(shape[0]);
    floatX* act = (floatX*)malloc(sizeof(floatX) * BT * V); // the (BT, V) operand, or (BT, C)
    floatX* wgt = (floatX*)malloc(sizeof(floatX) * V * C);
    floatX* outX = (floatX*)malloc(sizeof(floatX) * BT * V);
    float* outF = (float*)calloc((size_t)V * C, sizeof(float));
    g_work_floats = GEMM_PANEL_FLOATS;
    g_work = (float*)aligned_alloc(256, sizeof(float) * g_work_floats);
    if (!act || !wgt || !outX || !outF || !g_work) { fprintf(stderr, "--bench-gemm: out of memory\n"); return 1; }
    for (int64_t i = 0; i < BT * V; i++) act[i] = rn(1e-2f * (float)((i * 7919) % 1000 - 500) / 500.0f);
    for (int64_t i = 0; i < V * C; i++) wgt[i] = rn(2e-2f * (float)((i * 104729) % 1000 - 500) / 500.0f);
    enum { REPS = 5 };
    int saved = g_simd;
    printf("   %d threads; GFLOP/s by wall clock / by CPU time per thread (median of %d)\n", threads, REPS);
#ifdef ZT_X86
    for (int level = SIMD_AVX2; level < SIMD_COUNT; level++) {
        if (!simd_supported(level)) continue;
        const int64_t iters = 20000000;
        double t0 = wall_s(), c0 = cpu_s();
#pragma omp parallel
        {
            float x = level == SIMD_AVX512 ? gemm_peak_avx512(iters) : gemm_peak_avx2(iters);
            if (x == 0.0f) g_gemm_bench_sink = x;
        }
        double wall = wall_s() - t0, cpu = (cpu_s() - c0) / threads;
        double flops = (double)threads * iters * (level == SIMD_AVX512 ? 16 * 16 * 2 : 12 * 8 * 2);
        printf("   %-44s %8.1f / %6.1f GFLOP/s\n", level == SIMD_AVX512 ? "peak: FMA loop, AVX-512 (16 chains)" : "peak: FMA loop, AVX2 (12 chains)",
               flops / wall / 1e9, flops / cpu / 1e9);
    }
#endif
    for (int s = 0; s < nshape; s++) {
        double flops = 2.0 * shape[s].M * shape[s].N * shape[s].K;
        const floatX* A = act;                    // inp (BT, C), dout (BT, V) or dout^T
        const floatX* B = shape[s].w ? wgt : act; // W^T, W, or (dweight) inp (BT, C)
        GemmOut o = {shape[s].w ? EPI_STORE_X : EPI_ACCUM_F32, outX, outF, NULL, NULL};
        for (int level = SIMD_SCALAR; level < SIMD_COUNT; level++) {
            if (!simd_supported(level)) continue;
            g_simd = level;
            double tw[REPS], tc[REPS];
            for (int r = -1; r < REPS; r++) {
                double t0 = wall_s(), c0 = cpu_s();
                cpu_gemm(shape[s].M, shape[s].N, shape[s].K, A, shape[s].a_rs, shape[s].a_cs, B, shape[s].b_rs, shape[s].b_cs, &o);
                if (r >= 0) { tw[r] = wall_s() - t0; tc[r] = (cpu_s() - c0) / threads; }
            }
            char name[96];
            snprintf(name, sizeof(name), "%s, %s", shape[s].name, simd_names[level]);
            printf("   %-44s %8.1f / %6.1f GFLOP/s\n", name, flops / bench_median(tw, REPS) / 1e9, flops / bench_median(tc, REPS) / 1e9);
        }
    }
    g_simd = saved;
    free(act); free(wgt); free(outX); free(outF); free(g_work);
    g_work = NULL;
    return 0;
}
