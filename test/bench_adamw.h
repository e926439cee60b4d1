// test/bench_adamw.h — `make bench`, the host AdamW: what -offload runs on the host each step
// (adamw_host, adamw.cuh's CPU loop, and the overflow check adamw_check_host before it), as
// bytes of state moved per second beside a plain memcpy moving as many bytes, on the same threads.
//
//   test/test_bf16 --bench-adamw [elements (default 2^25)] [threads (default: OpenMP's)]
//
// Bytes moved per element: the update reads master, m, v and the gradient (16 B) and writes
// master, m, v and the parameter (12 B + sizeof(floatX)); the check reads the same 16 B and writes
// nothing. memcpy of N bytes reads N and writes N. Each figure: the median of 7 timed repetitions
// after one warm-up. The goal for the update: >= 50% of memcpy's rate.
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
#pragma omp parallel for schedule(static) // first touch by the threads that use the pages
    for (int64_t i = 0; i < n; i++) {
        master[i] = 0.02f * (float)((i * 7919) % 1000 - 500) / 500.0f;
        m[i] = 0.0f; v[i] = 0.0f;
        g[i] = 1e-3f * (float)((i * 104729) % 2000 - 1000) / 1000.0f;
        p[i] = rn(master[i]);
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < (int64_t)(copy_bytes >> 12); c++) { memset(src + (c << 12), 1, 4096); memset(dst + (c << 12), 0, 4096); }
    Segment seg = {0, n, 1};
    AdamWParams hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, 1);
    StepScalars sc;
    memset(&sc, 0, sizeof(sc));
    sc.finite = 1; sc.grad_scale = 1.0f;
    enum { REPS = 7 };
    double t_upd[REPS], t_chk[REPS], t_cpy[REPS], t_max[REPS];
    for (int r = -1; r < REPS; r++) {
        double t0 = wall_s();
        adamw_host(p, master, m, v, g, &seg, 1, &hp, NULL);
        double t1 = wall_s();
        adamw_check_host(master, m, v, g, &seg, 1, &hp, &sc);
        double t2 = wall_s();
#pragma omp parallel
        { // the copy split as the AdamW loop splits its elements: one contiguous piece per thread
            int k = omp_get_thread_num(), K = omp_get_num_threads();
            size_t a = copy_bytes * k / K, b = copy_bytes * (k + 1) / K;
            memcpy(dst + a, src + a, b - a);
        }
        double t3 = wall_s();
        AdamWMax mx = {0.0f, 0.0f, 0.0f, 1};
        adamw_host_max(p, master, m, v, g, &seg, 1, &hp, &mx);
        double t4 = wall_s();
        if (r >= 0) { t_upd[r] = t1 - t0; t_chk[r] = t2 - t1; t_cpy[r] = t3 - t2; t_max[r] = t4 - t3; }
    }
    double mxu = bench_median(t_max, REPS), upd = bench_median(t_upd, REPS), chk = bench_median(t_chk, REPS), cpy = bench_median(t_cpy, REPS);
    double b_upd = (double)n * (28 + sizeof(floatX)), b_chk = 16.0 * n, b_cpy = 2.0 * copy_bytes;
    printf("   %-44s %9s %10s %12s\n", "host loop", "ns/elem", "GB/s", "vs memcpy");
    printf("   %-44s %9.2f %10.2f %12s\n", "memcpy (as many bytes as the update)", cpy / n * 1e9, b_cpy / cpy / 1e9, "1.00x");
    printf("   %-44s %9.2f %10.2f %11.2fx\n", "AdamW update (adamw_host)", upd / n * 1e9, b_upd / upd / 1e9, (b_upd / upd) / (b_cpy / cpy));
    printf("   %-44s %9.2f %10.2f %11.2fx\n", "update + maxima (adamw_host_max, -offload)", mxu / n * 1e9, b_upd / mxu / 1e9, (b_upd / mxu) / (b_cpy / cpy));
    printf("   %-44s %9.2f %10.2f %11.2fx\n", "overflow check (adamw_check_host)", chk / n * 1e9, b_chk / chk / 1e9, (b_chk / chk) / (b_cpy / cpy));
    printf("   (%lld elements, %d thread(s), %s storage; the flag stayed %d)\n", (long long)n, threads,
           sizeof(floatX) == 2 ? "BF16" : "FP32", sc.overflow);
    free(master); free(m); free(v); free(g); free(p); free(src); free(dst);
    return 0;
}
