// test/gpu_packed.h — the 16-byte paths of the memory-bound kernels (ops/packed.cuh): each kernel
// run on 16-byte aligned buffers (vector path) and on the same data one element off (every pointer
// 2-byte aligned in BF16: the element path) must give the same bits, and the vector path the CPU's
// result within the usual tolerance. Under the emulator, a 16-byte access at a misaligned address
// must stop the kernel, as it does on a GPU ("misaligned address").
//
// Shapes: C = 264 is 33 packs of 8 BF16 (lane 0 of a layernorm warp takes two packs, the others
// one); n = 1001 leaves a tail of 1 element (BF16) after the whole packs; the bias gradient's
// N = 300 rows are two row chunks, the second partial.

// A device copy of n host elements starting `off` elements into its allocation (free .base).
typedef struct { void* base; void* p; } GpOff;
static GpOff gp_up(const void* host, size_t n, size_t elem, int off) {
    GpOff r;
    r.base = gpu_zeros((n + 1) * elem);
    r.p = (char*)r.base + off * elem;
    gpu_upload(r.p, host, n * elem);
    return r;
}
static GpOff gp_nans(size_t n, size_t elem, int off) {
    GpOff r;
    r.base = gpu_nans((n + 1) * elem);
    r.p = (char*)r.base + off * elem;
    return r;
}

TEST(gpu_vector_paths_bitwise) {
    const int N = 37, C = 264;
    const int64_t NC = (int64_t)N * C;
    floatX *a = (floatX*)malloc(sizeof(floatX) * NC), *b = (floatX*)malloc(sizeof(floatX) * NC);
    floatX *w = (floatX*)malloc(sizeof(floatX) * C), *bias = (floatX*)malloc(sizeof(floatX) * C);
    floatX* dinp0 = (floatX*)malloc(sizeof(floatX) * NC);
    rand_x(a, NC, 1.0, 2101);
    rand_x(b, NC, 1.0, 2102);
    rand_x(w, C, 1.0, 2103);
    rand_x(bias, C, 0.5, 2104);
    rand_x(dinp0, NC, 0.3, 2105);
    // results[path]: 0 = aligned (16-byte path), 1 = one element off (element path)
    floatX *res[2], *out[2], *dinp[2];
    float *mean[2], *rstd[2], *dw[2], *db[2];
    for (int path = 0; path < 2; path++) {
        int off = path;
        GpOff da = gp_up(a, NC, sizeof(floatX), off), dbb = gp_up(b, NC, sizeof(floatX), off);
        GpOff dw_ = gp_up(w, C, sizeof(floatX), off), dbias = gp_up(bias, C, sizeof(floatX), off);
        GpOff dres = gp_nans(NC, sizeof(floatX), off), dout = gp_nans(NC, sizeof(floatX), off);
        GpOff ddinp = gp_up(dinp0, NC, sizeof(floatX), off);
        float *dmean = (float*)gpu_nans(4 * N), *drstd = (float*)gpu_nans(4 * N);
        float *ddw = (float*)gpu_zeros(4 * C), *ddb = (float*)gpu_zeros(4 * C);
        // forward: residual = a + b, out = layernorm(residual); backward with dout := b, x := residual
        ON_GPU(op_residual_layernorm_forward((floatX*)dres.p, (floatX*)dout.p, dmean, drstd, (floatX*)da.p,
                                             (floatX*)dbb.p, (floatX*)dw_.p, (floatX*)dbias.p, N, C));
        ON_GPU(op_layernorm_backward((floatX*)ddinp.p, ddw, ddb, (floatX*)dbb.p, (floatX*)dres.p, (floatX*)dw_.p, dmean,
                                     drstd, N, C));
        res[path] = (floatX*)malloc(sizeof(floatX) * NC);
        out[path] = (floatX*)malloc(sizeof(floatX) * NC);
        dinp[path] = (floatX*)malloc(sizeof(floatX) * NC);
        mean[path] = (float*)malloc(4 * N);
        rstd[path] = (float*)malloc(4 * N);
        dw[path] = (float*)malloc(4 * C);
        db[path] = (float*)malloc(4 * C);
        gpu_to_host(res[path], dres.p, sizeof(floatX) * NC);
        gpu_to_host(out[path], dout.p, sizeof(floatX) * NC);
        gpu_to_host(dinp[path], ddinp.p, sizeof(floatX) * NC);
        gpu_to_host(mean[path], dmean, 4 * N);
        gpu_to_host(rstd[path], drstd, 4 * N);
        gpu_to_host(dw[path], ddw, 4 * C);
        gpu_to_host(db[path], ddb, 4 * C);
        void* bufs[] = {da.base, dbb.base, dw_.base, dbias.base, dres.base, dout.base, ddinp.base, dmean, drstd, ddw, ddb};
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    }
    printf("  layernorm N %d C %d: 16-byte path vs element path\n", N, C);
    gm_bitwise("ln fwd residual", res[1], res[0], NC, sizeof(floatX));
    gm_bitwise("ln fwd out", out[1], out[0], NC, sizeof(floatX));
    gm_bitwise("ln fwd mean", mean[1], mean[0], N, 4);
    gm_bitwise("ln fwd rstd", rstd[1], rstd[0], N, 4);
    gm_bitwise("ln bwd dinp (+=)", dinp[1], dinp[0], NC, sizeof(floatX));
    gm_bitwise("ln bwd dweight (+=)", dw[1], dw[0], C, 4);
    gm_bitwise("ln bwd dbias (+=)", db[1], db[0], C, 4);
    // the 16-byte path against the CPU op
    floatX *res_c = (floatX*)malloc(sizeof(floatX) * NC), *out_c = (floatX*)malloc(sizeof(floatX) * NC);
    float *mean_c = (float*)malloc(4 * N), *rstd_c = (float*)malloc(4 * N);
    float *dw_c = (float*)calloc(C, 4), *db_c = (float*)calloc(C, 4);
    floatX* dinp_c = (floatX*)malloc(sizeof(floatX) * NC);
    memcpy(dinp_c, dinp0, sizeof(floatX) * NC);
    ON_CPU(op_residual_layernorm_forward(res_c, out_c, mean_c, rstd_c, a, b, w, bias, N, C));
    ON_CPU(op_layernorm_backward(dinp_c, dw_c, db_c, b, res_c, w, mean_c, rstd_c, N, C));
    gm_bitwise("ln fwd residual vs CPU", res[0], res_c, NC, sizeof(floatX));
    GPU_COMPARE("ln fwd out vs CPU", relerr_x(out[0], out_c, NC), TOL_GPU_FWD);
    GPU_COMPARE("ln bwd dinp vs CPU", relerr_x(dinp[0], dinp_c, NC), TOL_GPU_BWD);
    GPU_COMPARE("ln bwd dweight vs CPU", relerr_f(dw[0], dw_c, C), TOL_GPU_BWD);
    GPU_COMPARE("ln bwd dbias vs CPU", relerr_f(db[0], db_c, C), TOL_GPU_BWD);
    for (int path = 0; path < 2; path++) {
        free(res[path]); free(out[path]); free(dinp[path]); free(mean[path]); free(rstd[path]); free(dw[path]); free(db[path]);
    }
    free(res_c); free(out_c); free(mean_c); free(rstd_c); free(dw_c); free(db_c); free(dinp_c);

    // GELU forward and backward (in place) over n = 1001 elements: 125 packs and a tail of 1
    const int64_t n = 1001;
    floatX *pre = (floatX*)malloc(sizeof(floatX) * n), *g = (floatX*)malloc(sizeof(floatX) * n);
    floatX *fwd[2], *bwd[2];
    rand_x(pre, n, 2.0, 2106);
    rand_x(g, n, 1.0, 2107);
    for (int path = 0; path < 2; path++) {
        GpOff dpre = gp_up(pre, n, sizeof(floatX), path), dg = gp_up(g, n, sizeof(floatX), path);
        GpOff dout = gp_nans(n, sizeof(floatX), path);
        ON_GPU(op_gelu_forward((floatX*)dout.p, (floatX*)dpre.p, n));
        ON_GPU(cuda_gelu_backward_inplace((floatX*)dg.p, (floatX*)dpre.p, n));
        fwd[path] = (floatX*)malloc(sizeof(floatX) * n);
        bwd[path] = (floatX*)malloc(sizeof(floatX) * n);
        gpu_to_host(fwd[path], dout.p, sizeof(floatX) * n);
        gpu_to_host(bwd[path], dg.p, sizeof(floatX) * n);
        cudaCheck(cudaFree(dpre.base)); cudaCheck(cudaFree(dg.base)); cudaCheck(cudaFree(dout.base));
    }
    floatX *fwd_c = (floatX*)malloc(sizeof(floatX) * n), *bwd_c = (floatX*)malloc(sizeof(floatX) * n);
    ON_CPU(op_gelu_forward(fwd_c, pre, n));
    for (int64_t i = 0; i < n; i++) bwd_c[i] = rn(ld(g[i]) * gelu_bwd(ld(pre[i]))); // the CPU's EPI_STORE_X_DGELU
    printf("  GELU n %lld: 16-byte path (with a scalar tail) vs element path\n", (long long)n);
    gm_bitwise("gelu fwd", fwd[1], fwd[0], n, sizeof(floatX));
    gm_bitwise("gelu bwd (in place)", bwd[1], bwd[0], n, sizeof(floatX));
    GPU_COMPARE("gelu fwd vs CPU", relerr_x(fwd[0], fwd_c, n), TOL_GPU_FWD);
    GPU_COMPARE("gelu bwd vs CPU", relerr_x(bwd[0], bwd_c, n), TOL_GPU_BWD);
    for (int path = 0; path < 2; path++) { free(fwd[path]); free(bwd[path]); }
    free(pre); free(g); free(fwd_c); free(bwd_c);

    // bias gradient: N = 300 rows (chunks of 256: one whole, one partial), OC = 264
    const int BN = 300, OC = 264;
    floatX* dout = (floatX*)malloc(sizeof(floatX) * BN * OC);
    rand_x(dout, (int64_t)BN * OC, 1.0, 2108);
    float db0[264], dbias_g[2][264], dbias_c[264];
    rand_f(db0, OC, 3.0, 2109);
    for (int path = 0; path < 2; path++) {
        GpOff dd = gp_up(dout, (size_t)BN * OC, sizeof(floatX), path);
        float* ddb = (float*)gpu_copy_of(db0, 4 * OC);
        ON_GPU(cuda_bias_grad(ddb, (floatX*)dd.p, BN, OC));
        gpu_to_host(dbias_g[path], ddb, 4 * OC);
        cudaCheck(cudaFree(dd.base)); cudaCheck(cudaFree(ddb));
    }
    memcpy(dbias_c, db0, 4 * OC);
    ON_CPU(cpu_bias_grad(dbias_c, dout, BN, OC));
    printf("  bias gradient N %d OC %d: 16-byte path vs element path\n", BN, OC);
    gm_bitwise("bias grad (+=)", dbias_g[1], dbias_g[0], OC, 4);
    GPU_COMPARE("bias grad vs CPU", relerr_f(dbias_g[0], dbias_c, OC), TOL_GPU_BWD);
    free(dout);
    free(a); free(b); free(w); free(bias); free(dinp0);
}

#ifdef ZT_CUDA_EMU
#include <sys/wait.h>
// Planted bugs: the GELU kernel told to take its 16-byte path with the input (a load) or the output
// (a store) one element off. A GPU stops such a kernel ("misaligned address"); the emulator must
// too, or the vector paths' alignment conditions above are untested. Each runs in a child process
// (it ends in abort), its stderr read back.
TEST(gpu_vector_misaligned_stops) {
    const int64_t n = 64;
    floatX* pre = (floatX*)calloc(n + 8, sizeof(floatX));
    floatX* dpre = (floatX*)gpu_copy_of(pre, sizeof(floatX) * (n + 8));
    floatX* dout = (floatX*)gpu_zeros(sizeof(floatX) * (n + 8));
    for (int store = 0; store < 2; store++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fds[1], 2);
            close(fds[0]);
            // one block: the emulator runs it on this thread, no OpenMP team after fork
            gelu_forward_kernel<<<1, 32, 0, g_stream>>>(dout + store, dpre + (1 - store), n, 1);
            cudaStreamSynchronize(g_stream);
            _exit(0); // not reached when the check works
        }
        close(fds[1]);
        char buf[4096];
        size_t got = 0;
        ssize_t r;
        while (got < sizeof(buf) - 1 && (r = read(fds[0], buf + got, sizeof(buf) - 1 - got)) > 0) got += (size_t)r;
        buf[got] = 0;
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        const char* want = store ? "misaligned 16-byte store" : "misaligned 16-byte load";
        int stopped = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
        int named = strstr(buf, want) != NULL && strstr(buf, "gelu_forward_kernel") != NULL;
        printf("    %s in gelu_forward_kernel: %s%s\n", want, stopped && named ? "stopped: " : "NOT STOPPED ",
               stopped && named ? strtok(buf, "\n") : "");
        CHECKF(stopped && named, "the emulator did not stop a %s (status %d, stderr: %.300s)", want, status, buf);
    }
    free(pre);
    cudaCheck(cudaFree(dpre));
    cudaCheck(cudaFree(dout));
}
#endif
