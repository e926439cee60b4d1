// test/bench_adamw.h — `make bench`, the host AdamW: what -offload runs on the host each step
// (adamw.cuh's host pass: the update with maxima adamw_host_max, and the overflow check
// adamw_check_host when its bound cannot prove it), on each path this CPU has (scalar, avx2, avx512:
// ZT_SIMD's values), as bytes of state moved per second beside a plain memcpy moving as many bytes,
// on the same threads, in the same run.
//
//   test/test_bf16 --bench-adamw [elements (default 2^25)] [threads (default: OpenMP's)]
//
// Bytes moved per element: the update reads master, m, v and the gradient (16 B) and writes
// master, m, v and the parameter (12 B + sizeof(floatX)); the check reads the same 16 B and writes
// nothing. memcpy of N bytes reads N and writes N. Each figure: the median of 7 timed repetitions
// after one warm-up; the repetitions interleave memcpy and every path, so that a machine whose load
// changes during the run slows them alike. The goal for the update: >= 50% of memcpy's rate.
// The last line, "fastest <path> <ns per element>", is the fastest path's update with maxima (what
// dev/bench.sh compares with PyTorch).
// defines: adamw_bench_main
#include <omp.h>

static double bench_median(double* t, int n) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
    return t[n / 2];
}

static int adamw_bench_main(int argc, char** argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 25;
    if (argc > 2) omp_set_num_threads(atoi(argv[2]));
    int threads = omp_get_max_threads();
    if (n <= 0) { fprintf(stderr, "--bench-adamw: elements must be > 0\n"); return 2; }
    float *master = (float*)malloc(4 * n), *m = (float*)malloc(4 * n), *v = (float*)malloc(4 * n), *g = (float*)malloc(4 * n);
    floatX* p = (floatX*)malloc(sizeof(floatX) * n);
    size_t copy_bytes = (size_t)n * (28 + sizeof(floatX)) / 2; // a memcpy moving as many bytes (read + written)
    char *src = (char*)malloc(copy_bytes), *dst = (char*)malloc(copy_bytes);
    if (!master || !m || !v || !g || !p || !src || !dst) { fprintf(stderr, "--bench-adamw: out of memory\n"); return 1; }
    Segment seg = {0, n, 1};
    float* arr[3] = {master, m, v};
    for (int a = 0; a < 3; a++) adamw_host_touch(arr[a], n, &seg, 1); // first touch by the threads that update the pages
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        master[i] = 0.02f * (float)((i * 7919) % 1000 - 500) / 500.0f;
        g[i] = 1e-3f * (float)((i * 104729) % 2000 - 1000) / 1000.0f;
        p[i] = rn(master[i]);
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (int64_t)(copy_bytes >> 12); c++) { memset(src + (c << 12), 1, 4096); memset(dst + (c << 12), 0, 4096); }
    AdamWParams hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, 1);
    StepScalars sc;
    memset(&sc, 0, sizeof(sc));
    sc.finite = 1; sc.grad_scale = 1.0f;
    enum { REPS = 7 };
    int saved = g_simd, npath = 0, path[SIMD_COUNT];
    for (int k = SIMD_SCALAR; k < SIMD_COUNT; k++)
        if (simd_supported(k)) path[npath++] = k;
    double t_cpy[REPS], t_upd[SIMD_COUNT][REPS], t_max[SIMD_COUNT][REPS], t_chk[SIMD_COUNT][REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = wall_s();
#pragma omp parallel
        { // the copy split as the AdamW pass splits its elements: one contiguous piece per thread
            int k = omp_get_thread_num(), K = omp_get_num_threads();
            size_t a = copy_bytes * k / K, b = copy_bytes * (k + 1) / K;
            memcpy(dst + a, src + a, b - a);
        }
        if (r >= 0) t_cpy[r] = wall_s() - t0;
        for (int k = 0; k < npath; k++) {
            g_simd = path[k];
            double t1 = wall_s();
            adamw_host(p, master, m, v, g, &seg, 1, &hp, NULL);
            double t2 = wall_s();
            adamw_check_host(master, m, v, g, &seg, 1, &hp, &sc);
            double t3 = wall_s();
            AdamWMax mx = {0.0f, 0.0f, 0.0f, 1};
            adamw_host_max(p, master, m, v, g, &seg, 1, &hp, &mx);
            double t4 = wall_s();
            if (r >= 0) { t_upd[k][r] = t2 - t1; t_chk[k][r] = t3 - t2; t_max[k][r] = t4 - t3; }
        }
    }
    g_simd = saved;
    double cpy = bench_median(t_cpy, REPS), b_cpy = 2.0 * copy_bytes;
    double b_upd = (double)n * (28 + sizeof(floatX)), b_chk = 16.0 * n;
    printf("   %-44s %9s %10s %12s\n", "host loop", "ns/elem", "GB/s", "vs memcpy");
    printf("   %-44s %9.2f %10.2f %12s\n", "memcpy (as many bytes as the update)", cpy / n * 1e9, b_cpy / cpy / 1e9, "1.00x");
    int best = 0;
    double best_t = 0.0;
    for (int k = 0; k < npath; k++) {
        double upd = bench_median(t_upd[k], REPS), mxu = bench_median(t_max[k], REPS), chk = bench_median(t_chk[k], REPS);
        char name[3][64];
        snprintf(name[0], sizeof(name[0]), "%s: update (adamw_host)", simd_names[path[k]]);
        snprintf(name[1], sizeof(name[1]), "%s: update + maxima (adamw_host_max)", simd_names[path[k]]);
        snprintf(name[2], sizeof(name[2]), "%s: overflow check (adamw_check_host)", simd_names[path[k]]);
        printf("   %-44s %9.2f %10.2f %11.2fx\n", name[0], upd / n * 1e9, b_upd / upd / 1e9, (b_upd / upd) / (b_cpy / cpy));
        printf("   %-44s %9.2f %10.2f %11.2fx\n", name[1], mxu / n * 1e9, b_upd / mxu / 1e9, (b_upd / mxu) / (b_cpy / cpy));
        printf("   %-44s %9.2f %10.2f %11.2fx\n", name[2], chk / n * 1e9, b_chk / chk / 1e9, (b_chk / chk) / (b_cpy / cpy));
        if (k == 0 || mxu < best_t) { best = path[k]; best_t = mxu; }
    }
    printf("   (%lld elements, %d thread(s), %s storage; the flag stayed %d)\n", (long long)n, threads,
           sizeof(floatX) == 2 ? "BF16" : "FP32", sc.overflow);
    printf("fastest %s %.4f\n", simd_names[best], best_t / n * 1e9);
    free(master); free(m); free(v); free(g); free(p); free(src); free(dst);
    return 0;
}
