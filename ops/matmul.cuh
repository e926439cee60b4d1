// ops/matmul.cuh — matmul + bias (+ GELU tanh), forward and backward; the GELU itself.
//
//   forward:   out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)        [floatX, =]
//              with GELU:  pre = that, out = gelu(pre)                         [floatX, =]
//   backward:  dinp (N, C)     = dout (N, OC) @ weight (OC, C)                 [floatX, =]
//                  with GELU:  dinp *= gelu'(pre_of_inp)                       [floatX, =]
//              dweight (OC, C) += dout^T @ inp                                 [FP32, +=]
//              dbias (OC)      += sum over rows of dout                        [FP32, +=]
// Rounding points (the same on both devices): the matmul result is rounded to floatX; GELU is
// applied to the *rounded* pre-activation and rounded again. So recomputing GELU from the stored
// pre-activation in backward (-r 1) reproduces the forward's bits exactly.
//
// CPU device: one GEMM core, C (M, N) = A (M, K) @ B (K, N), with A and B read through strides
// so the three products above need no transposed copies of A. Every output element is one FP32
// sum over k = 0..K-1 in order (fused multiply-add when the CPU has it), so results do not depend
// on the number of threads: threads split the output, never a sum. B is packed to FP32 in column
// panels in the fixed workspace; an 8 x 32 register tile does the arithmetic (about 90 GFLOP/s a
// core on AVX-512). With OpenBLAS (built with it and -blas 1) sgemm does the products instead.
//
// defines: gelu_fwd, gelu_bwd, op_matmul_forward, op_matmul_backward, op_gelu_forward, cpu_matmul, g_use_blas
#ifndef ZT_OPS_MATMUL_CUH
#define ZT_OPS_MATMUL_CUH

#include "../device.cuh" // defines: floatX, ld, rn, g_work, FAULT
#ifdef USE_BLAS
#include <cblas.h>       // OpenBLAS (Debian: libopenblas-dev): cblas_sgemm, openblas_set_num_threads
#endif

// -blas 1: the CPU matmuls go through OpenBLAS's sgemm (much faster; its sums are ordered its own
// way, which depends on the machine, so the bit-exactness tests run with -blas 0, the plain loop).
static int g_use_blas = 0;

// GELU, tanh approximation (Hendrycks & Gimpel 2016; GPT-2's choice).
#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)
ZT_HD static inline float gelu_fwd(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}
// d gelu(x) / dx
ZT_HD static inline float gelu_bwd(float x) {
    float cube = 0.044715f * x * x * x;
    float tanh_arg = GELU_SCALE * (x + cube);
    float tanh_out = tanhf(tanh_arg);
    float cosh_out = coshf(tanh_arg);
    float sech2 = 1.0f / (cosh_out * cosh_out);
    return 0.5f * (1.0f + tanh_out) + x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// ----------------------------------------------------------------------------
// CPU GEMM core.

#ifdef __FMA__
#define GEMM_MADD(a, b, c) fmaf((a), (b), (c))
#else
#define GEMM_MADD(a, b, c) ((a) * (b) + (c))
#endif
#define GEMM_MR 8                    // rows of the register tile
#define GEMM_NR 32                   // columns of the register tile (2 AVX-512 vectors)
#define GEMM_PANEL_FLOATS (1u << 22) // packed B panel: 16 MiB of FP32, K x (multiple of NR)

// What to do with each finished element acc = sum_k A[i,k] B[k,j].
typedef enum {
    EPI_STORE_X,      // outX[i,j] = rn(acc + bias[j])                 (bias may be NULL)
    EPI_STORE_X_GELU, // pre = rn(acc + bias[j]); outX = rn(gelu(pre)); preX[i,j] = pre
    EPI_STORE_X_DGELU,// outX[i,j] = rn(ld(rn(acc)) * gelu'(ld(preX[i,j])))
    EPI_ACCUM_F32,    // outF[i,j] += acc
} GemmEpilogue;

typedef struct {
    GemmEpilogue kind;
    floatX* outX;         // (M, N) row-major
    float* outF;          // (M, N) row-major
    floatX* preX;         // (M, N) GELU pre-activation: written (GELU) or read (DGELU)
    const floatX* bias;   // (N) or NULL
} GemmOut;

// acc tile (MR x NR) for rows i0.., columns j0.. of the panel, sum over all K in order.
static inline void gemm_tile(int K, const floatX* A, const int64_t* arow, int64_t a_cs,
                             const float* Bp, int ldb, float acc[GEMM_MR][GEMM_NR]) {
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) acc[r][j] = 0.0f;
    for (int k = 0; k < K; k++) {
        const float* b = Bp + (int64_t)k * ldb;
        int64_t ak = (int64_t)k * a_cs;
        for (int r = 0; r < GEMM_MR; r++) {
            float a = ld(A[arow[r] + ak]);
            for (int j = 0; j < GEMM_NR; j++) acc[r][j] = GEMM_MADD(a, b[j], acc[r][j]);
        }
    }
}

static inline void gemm_epilogue(const GemmOut* o, int64_t i, int64_t j, int64_t N, float acc) {
    int64_t idx = i * N + j;
    switch (o->kind) {
    case EPI_STORE_X:
        o->outX[idx] = rn(o->bias ? acc + ld(o->bias[j]) : acc);
        break;
    case EPI_STORE_X_GELU: {
        floatX pre = rn(o->bias ? acc + ld(o->bias[j]) : acc);
        o->preX[idx] = pre;
        o->outX[idx] = rn(gelu_fwd(ld(pre)));
        break;
    }
    case EPI_STORE_X_DGELU:
        o->outX[idx] = rn(ld(rn(acc)) * gelu_bwd(ld(o->preX[idx])));
        break;
    case EPI_ACCUM_F32:
        o->outF[idx] += acc;
        break;
    }
}

// C (M, N) = A (M, K) @ B (K, N), element (i, k) of A at A[i*a_rs + k*a_cs], element (k, j) of B
// at B[k*b_rs + j*b_cs]. Uses g_work for the packed B panel.
static void cpu_gemm(int64_t M, int64_t N, int64_t K, const floatX* A, int64_t a_rs, int64_t a_cs,
                     const floatX* B, int64_t b_rs, int64_t b_cs, const GemmOut* out) {
    // panel width: as many NR-column strips as fit the workspace, at least one
    int64_t strips = (int64_t)(g_work_floats / ((size_t)K * GEMM_NR));
    if (strips < 1) die(1, "matmul workspace too small for K=%lld (internal error)", (long long)K);
    int64_t nc = strips * GEMM_NR;
    int64_t nc_needed = round_up(N, GEMM_NR);
    if (nc > nc_needed) nc = nc_needed;
    float* Bp = g_work;
    int64_t mtiles = ceil_div(M, GEMM_MR);
#pragma omp parallel
    for (int64_t n0 = 0; n0 < N; n0 += nc) {
        int64_t ncols = N - n0 < nc ? N - n0 : nc;
        int64_t ldb = round_up(ncols, GEMM_NR);
        // pack B[:, n0:n0+ncols] as FP32 (K, ldb), zero-padded to whole strips
#pragma omp for schedule(static)
        for (int64_t k = 0; k < K; k++) {
            float* dst = Bp + k * ldb;
            const floatX* src = B + k * b_rs + n0 * b_cs;
            int64_t j = 0;
            for (; j < ncols; j++) dst[j] = ld(src[j * b_cs]);
            for (; j < ldb; j++) dst[j] = 0.0f;
        }
        int64_t strips_here = ldb / GEMM_NR;
#pragma omp for collapse(2) schedule(static)
        for (int64_t mt = 0; mt < mtiles; mt++) {
            for (int64_t s = 0; s < strips_here; s++) {
                int64_t i0 = mt * GEMM_MR, j0 = s * GEMM_NR;
                int64_t arow[GEMM_MR]; // rows past M repeat the last row; their results are dropped
                for (int r = 0; r < GEMM_MR; r++) arow[r] = (i0 + r < M ? i0 + r : M - 1) * a_rs;
                float acc[GEMM_MR][GEMM_NR];
                gemm_tile((int)K, A, arow, a_cs, Bp + j0, (int)ldb, acc);
                for (int r = 0; r < GEMM_MR && i0 + r < M; r++)
                    for (int j = 0; j < GEMM_NR && j0 + j < ncols; j++)
                        gemm_epilogue(out, i0 + r, n0 + j0 + j, N, acc[r][j]);
            }
        }
        // the implicit barrier of the omp for protects Bp before the next panel overwrites it
    }
}

#ifdef USE_BLAS
// The same contract as cpu_gemm through sgemm. The output is cut into tiles of mc rows and nc
// columns; each thread takes whole tiles, converts its rows of A and columns of B to FP32 in its
// own slice of the workspace (2 s K + s^2 floats), calls a single-threaded sgemm and runs the same
// epilogue. (OpenBLAS's own threads would spin against OpenMP's; one level of threads is faster.)
static void cpu_gemm_blas(int64_t M, int64_t N, int64_t K, const floatX* A, int64_t a_rs, int64_t a_cs,
                          const floatX* B, int64_t b_rs, int64_t b_cs, const GemmOut* out) {
    int nt = num_threads();
    size_t per = g_work_floats / nt;
    int64_t s = (int64_t)(sqrt((double)K * K + (double)per) - K) / 16 * 16;
    if (s < 16) die(1, "matmul workspace too small for K=%lld (internal error)", (long long)K);
    int64_t mc = M < s ? M : s, nc = N < s ? N : s;
    int64_t mt = ceil_div(M, mc), ntl = ceil_div(N, nc);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t ti = 0; ti < mt; ti++)
        for (int64_t tj = 0; tj < ntl; tj++) {
#ifdef _OPENMP
            float* Ap = g_work + per * omp_get_thread_num(); // (mn, K)
#else
            float* Ap = g_work;
#endif
            int64_t m0 = ti * mc, n0 = tj * nc;
            int64_t mn = M - m0 < mc ? M - m0 : mc, nn = N - n0 < nc ? N - n0 : nc;
            float* Bp = Ap + mn * K; // (K, nn)
            float* Cp = Bp + K * nn; // (mn, nn)
            for (int64_t i = 0; i < mn; i++)
                for (int64_t k = 0; k < K; k++) Ap[i * K + k] = ld(A[(m0 + i) * a_rs + k * a_cs]);
            for (int64_t k = 0; k < K; k++)
                for (int64_t j = 0; j < nn; j++) Bp[k * nn + j] = ld(B[k * b_rs + (n0 + j) * b_cs]);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)mn, (int)nn, (int)K, 1.0f, Ap, (int)K, Bp, (int)nn,
                        0.0f, Cp, (int)nn);
            for (int64_t i = 0; i < mn; i++)
                for (int64_t j = 0; j < nn; j++) gemm_epilogue(out, m0 + i, n0 + j, N, Cp[i * nn + j]);
        }
}
#endif

// The matmul the ops call: OpenBLAS when built with it and -blas 1, else the plain loop.
static void cpu_matmul(int64_t M, int64_t N, int64_t K, const floatX* A, int64_t a_rs, int64_t a_cs,
                       const floatX* B, int64_t b_rs, int64_t b_cs, const GemmOut* out) {
#ifdef USE_BLAS
    if (g_use_blas) { cpu_gemm_blas(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, out); return; }
#endif
    cpu_gemm(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, out);
}

// dbias (OC) += column sums of dout (N, OC): each column summed over rows in order.
static void cpu_bias_grad(float* dbias, const floatX* dout, int64_t N, int64_t OC) {
    const int64_t CB = 64; // columns per task
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < OC; c0 += CB) {
        float acc[64] = {0};
        int64_t cn = OC - c0 < CB ? OC - c0 : CB;
        for (int64_t i = 0; i < N; i++) {
            const floatX* row = dout + i * OC + c0;
            for (int64_t c = 0; c < cn; c++) acc[c] += ld(row[c]);
        }
        for (int64_t c = 0; c < cn; c++) dbias[c0 + c] += acc[c];
    }
}

// ----------------------------------------------------------------------------
// Dispatchers.

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias; if pre != NULL: pre = that, out = gelu(pre).
static void op_matmul_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, int OC) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("matmul_forward"); return; }
#endif
    GemmOut o = {pre ? EPI_STORE_X_GELU : EPI_STORE_X, out, NULL, pre, bias};
    // B (K=C, N=OC) element (c, o) = weight[o*C + c]
    cpu_matmul(N, OC, C, inp, C, 1, weight, 1, C, &o);
}

// Backward of op_matmul_forward. dinp may be NULL (nothing upstream needs it); pre_inp is the GELU
// pre-activation of *inp* (when inp = gelu(pre_inp), fusing that GELU's backward), else NULL.
static void op_matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                               const floatX* inp, const floatX* weight, const floatX* pre_inp,
                               int N, int C, int OC) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("matmul_backward"); return; }
#endif
    if (dinp) { // dinp (N, C) = dout (N, OC) @ weight (OC, C)
        GemmOut o = {pre_inp ? EPI_STORE_X_DGELU : EPI_STORE_X, dinp, NULL, (floatX*)pre_inp, NULL};
        cpu_matmul(N, C, OC, dout, OC, 1, weight, C, 1, &o);
    }
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
    GemmOut w = {EPI_ACCUM_F32, NULL, dweight, NULL, NULL};
    cpu_matmul(OC, C, N, dout, 1, OC, inp, C, 1, &w);
    if (dbias && !FAULT(drop_bias_grad)) cpu_bias_grad(dbias, dout, N, OC);
}

// out = gelu(pre), elementwise; used to recompute the GELU output in backward (-r >= 1).
static void op_gelu_forward(floatX* out, const floatX* pre, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_not_yet("gelu_forward"); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = rn(gelu_fwd(ld(pre[i])));
}

#endif // ZT_OPS_MATMUL_CUH
