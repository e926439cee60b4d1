// test/gpu_bench.h — `test/test_gpu --bench`: the memory-bound kernels timed on the GPU, each on its
// 16-byte path (16-byte aligned buffers) and on its element path (the same buffers one element
// off: the scalar 2-byte accesses the kernels had before), at GPT-2 d12's and d48's widths with
// B*T = 16384 rows. One line per (op, width, path): microseconds per call (the median of 5 timings
// of 20 back-to-back calls, host clock around a stream synchronize), the bytes its kernels move
// through DRAM (each input read once, each output written once, as counted in docs/cuda.md's
// "Memory-bound kernels"), the bandwidth that makes, and the prediction for an H200.
//
// In `make test` the same code runs on the emulator at 64 rows (TEST gpu_bench_smoke): there the
// timings mean nothing, but the two paths' outputs must agree bit for bit, so the bench cannot
// silently time a broken kernel.

#include <time.h>
#include <algorithm> // std::sort

static double gb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Median over 5 timings of `reps` calls of f (one warm-up call first), seconds per call.
template <class F> static double gb_time(F f, int reps) {
    f();
    cudaCheck(cudaStreamSynchronize(g_stream));
    double t[5];
    for (int k = 0; k < 5; k++) {
        double t0 = gb_now();
        for (int r = 0; r < reps; r++) f();
        cudaCheck(cudaStreamSynchronize(g_stream));
        t[k] = (gb_now() - t0) / reps;
    }
    std::sort(t, t + 5);
    return t[2];
}

// Device floatX buffer of n elements starting `off` elements into it (+ 8 of slack), filled with a
// repeated block of random values (never zeros: they can time faster than real data); the same
// values for either offset, so both paths compute on the same data. Returns the base: use base + off.
static floatX* gb_buf(int64_t n, uint64_t seed, int off) {
    const int64_t blk = 1 << 16;
    static floatX host[1 << 16];
    rand_x(host, blk, 1.0, seed);
    floatX* d = NULL;
    cudaCheck(cudaMalloc(&d, sizeof(floatX) * (n + 8)));
    for (int64_t i = 0; i < n; i += blk)
        gpu_upload(d + off + i, host, sizeof(floatX) * (size_t)(n - i < blk ? n - i : blk));
    return d;
}

// Compares the two paths' outputs (device buffers of n elements of `elem` bytes); returns 1 if equal.
static int gb_same(const void* a, const void* b, int64_t n, size_t elem) {
    void* ha = malloc((size_t)n * elem);
    void* hb = malloc((size_t)n * elem);
    gpu_to_host(ha, a, (size_t)n * elem);
    gpu_to_host(hb, b, (size_t)n * elem);
    int same = memcmp(ha, hb, (size_t)n * elem) == 0;
    free(ha);
    free(hb);
    return same;
}

static void gb_line(const char* op, int C, const char* path, double s, double bytes, const char* predicted) {
    printf("  bench %-22s C %4d %-8s %9.1f us %10.1f MB %7.2f TB/s   H200 predicted: %s\n", op, C, path, s * 1e6,
           bytes / 1e6, bytes / s / 1e12, predicted);
}

// All ops at width C with N rows; returns the number of outputs where the two paths differ.
static int gb_bench_width(int N, int C, int V, int reps) {
    int differ = 0;
    const int T = N < 1024 ? N : 1024, B = N / T;
    const int64_t NC = (int64_t)N * C, N4C = 4 * NC;
    // inputs [path], the same values at offset 0 (16-byte path) and 1 (element path)
    floatX *a[2], *b[2], *w[2], *bias[2], *dout[2], *pre[2], *x[2], *wte[2], *wpe[2];
    for (int p = 0; p < 2; p++) {
        a[p] = gb_buf(NC, 1, p); b[p] = gb_buf(NC, 2, p); w[p] = gb_buf(C, 3, p); bias[p] = gb_buf(C, 4, p);
        dout[p] = gb_buf(N4C, 5, p); pre[p] = gb_buf(N4C, 6, p); x[p] = gb_buf(NC, 7, p);
        wte[p] = gb_buf((int64_t)V * C, 8, p); wpe[p] = gb_buf((int64_t)T * C, 9, p);
    }
    floatX* outs[2][2]; // [path][which]
    float *mean = (float*)gpu_zeros(4 * N), *rstd = (float*)gpu_zeros(4 * N);
    float *dw = (float*)gpu_zeros(4 * C), *db = (float*)gpu_zeros(4 * 4 * C);
    float* dwte[2] = {(float*)gpu_zeros(4 * (size_t)V * C), (float*)gpu_zeros(4 * (size_t)V * C)};
    float* dwpe = (float*)gpu_zeros(4 * (size_t)T * C);
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) outs[p][k] = gb_buf(N4C, 10 + k, p);
    // tokens: one in 9 of 10 positions (the KJV's frequent-token worst case, exaggerated), the rest spread
    int* tok = (int*)malloc(sizeof(int) * N);
    uint64_t key = rng_key(77, 0x544f4bull, (uint64_t)N);
    for (int i = 0; i < N; i++) { uint64_t u = rng_u64(key, (uint64_t)i); tok[i] = u % 10 ? 11 : (int)((u >> 8) % (uint64_t)V); }
    int* dtok = (int*)gpu_copy_of(tok, sizeof(int) * N);
    free(tok);
    const char* names[2] = {"16-byte", "element"};
    double bytes;
    // layernorm forward with the residual add: read a, b; write residual, out
    bytes = 8.0 * NC;
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { op_residual_layernorm_forward(outs[p][0] + p, outs[p][1] + p, mean, rstd, a[p] + p, b[p] + p, w[p] + p, bias[p] + p, N, C); }, reps);
        gb_line("residual+layernorm fwd", C, names[p], s, bytes, p == 0 ? ">= 3.5 TB/s" : "~2-3 TB/s (before)");
    }
    differ += !gb_same(outs[0][1], outs[1][1] + 1, NC, sizeof(floatX));
    // layernorm backward: dinp kernel reads dout, x, dinp, writes dinp; the column sums read dout, x again
    bytes = 12.0 * NC;
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { op_layernorm_backward(outs[p][0] + p, dw, db, b[p] + p, x[p] + p, w[p] + p, mean, rstd, N, C); }, reps);
        gb_line("layernorm bwd", C, names[p], s, bytes, p == 0 ? ">= 3.5 TB/s (8 NC if fused)" : "~2-3 TB/s (before)");
    }
    differ += !gb_same(outs[0][0], outs[1][0] + 1, NC, sizeof(floatX)); // dinp after the same number of += calls
    // GELU forward (4C wide): read pre, write out
    bytes = 4.0 * N4C;
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { op_gelu_forward(outs[p][1] + p, pre[p] + p, N4C); }, reps);
        gb_line("gelu fwd (4C)", C, names[p], s, bytes, p == 0 ? ">= 3.5 TB/s" : "~2-3 TB/s (before)");
    }
    differ += !gb_same(outs[0][1], outs[1][1] + 1, N4C, sizeof(floatX));
    // GELU backward in place: read dinp, pre; write dinp (the buffer is overwritten each call: timing only)
    bytes = 6.0 * N4C;
    for (int p = 0; p < 2; p++) {
        cudaCheck(cudaMemcpyAsync(outs[p][0] + p, dout[p] + p, sizeof(floatX) * N4C, cudaMemcpyDeviceToDevice, g_stream));
        double s = gb_time([&] { cuda_gelu_backward_inplace(outs[p][0] + p, pre[p] + p, N4C); }, reps);
        gb_line("gelu bwd (4C, in place)", C, names[p], s, bytes, p == 0 ? ">= 3.5 TB/s" : "~2-3 TB/s (before)");
    }
    differ += !gb_same(outs[0][0], outs[1][0] + 1, N4C, sizeof(floatX));
    // bias gradient of the 4C-wide fc layer: read dout once
    bytes = 2.0 * N4C;
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { cuda_bias_grad(db, dout[p] + p, N, 4 * C); }, reps);
        gb_line("bias grad (OC = 4C)", C, names[p], s, bytes, p == 0 ? ">= 3.0 TB/s" : "~2-3 TB/s (before)");
    }
    // embedding forward: read N rows of wte and wpe, write out
    bytes = 6.0 * NC;
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { op_encoder_forward(outs[p][1] + p, dtok, NULL, wte[p] + p, wpe[p] + p, B, T, C); }, reps);
        gb_line("embedding fwd", C, names[p], s, bytes, p == 0 ? ">= 3.0 TB/s" : "~2 TB/s (before)");
    }
    differ += !gb_same(outs[0][1], outs[1][1] + 1, NC, sizeof(floatX));
    // embedding backward, one token in 90% of positions: dout read twice (dwpe, dwte), dwte rows read
    // and written once per distinct token (about N/10 + 1 of them)
    bytes = 4.0 * NC + 8.0 * C * (N / 10 + 1);
    for (int p = 0; p < 2; p++) {
        double s = gb_time([&] { op_encoder_backward(dwte[p], dwpe, b[p] + p, dtok, NULL, B, T, C, V); }, reps);
        gb_line("embedding bwd (skewed)", C, names[p], s, bytes, "< 0.1 ms (the serial version: 1.5-4 ms)");
    }
    differ += !gb_same(dwte[0], dwte[1], (int64_t)V * C, 4);
    for (int p = 0; p < 2; p++) {
        floatX* bufs[] = {a[p], b[p], w[p], bias[p], dout[p], pre[p], x[p], wte[p], wpe[p], outs[p][0], outs[p][1]};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    }
    void* fbufs[] = {mean, rstd, dw, db, dwte[0], dwte[1], dwpe, dtok};
    for (size_t i = 0; i < sizeof(fbufs) / sizeof(fbufs[0]); i++) cudaCheck(cudaFree(fbufs[i]));
    return differ;
}

// The bench: d12's and d48's widths. Returns the number of outputs where the paths differ.
static int gpu_bench(int N, int V, int reps) {
    printf("memory-bound kernels, B*T = %d rows, %s (bytes: DRAM traffic each call must move)\n", N, PRECISION_NAME);
    return gb_bench_width(N, 768, V, reps) + gb_bench_width(N, 1600, V, reps);
}

TEST(gpu_bench_smoke) {
    int differ = gpu_bench(GPU_BIG(16384, 64), GPU_BIG(50257, 999), GPU_BIG(20, 1));
    CHECKF(differ == 0, "%d bench outputs differ between the 16-byte and the element path", differ);
}
