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
// so the three products above need no transposed copies. Every output element is one FP32 chain
// acc = fmaf(A[i,k], B[k,j], acc) over k = 0..K-1 in order, so results do not depend on the number
// of threads (they split the output, never a sum) nor on the microkernel's path (scalar, AVX2,
// AVX-512, chosen at run time like the host AdamW's: simd.h, ZT_SIMD). A and B are packed to FP32
// (the BF16 build converts there) in cache blocks of the fixed workspace; an 8 x 32 register tile
// does the arithmetic. See "CPU GEMM core" below. With OpenBLAS (built with it and -blas 1) sgemm
// does the products instead.
//
// CUDA device: cuBLASLt for the three products (BF16 in, FP32 compute, the bias as its epilogue;
// one algorithm per shape, chosen once), our kernels for GELU, GELU' and the deterministic bias
// gradient; see "CUDA device" below for the row-major / column-major mapping. Never run on a GPU
// yet when written: test/gpu_matmul.h is what checks it against the CPU op.
//
// defines: gelu_fwd, gelu_bwd, op_matmul_forward, op_matmul_backward, op_gelu_forward, cpu_matmul, g_use_blas,
//          cpu_gemm, gemm_kernel_fn, GEMM_MR, GEMM_NR, GEMM_KC, GEMM_PANEL_FLOATS
//          (CUDA) cuda_gemm, g_matmul_simple_plans, g_matmul_force_simple (TESTING)
//
// May call: device.cuh, packed.cuh, simd.h, OpenBLAS (-blas 1) and cuBLASLt (nvcc build).
#ifndef ZT_OPS_MATMUL_CUH
#define ZT_OPS_MATMUL_CUH

#include "../device.cuh" // defines: floatX, ld, rn, g_work, FAULT
#include "packed.cuh"    // defines: PACK_X, Packed128, load128, store128, aligned16
#include "../simd.h"      // defines: simd_level, SIMD_*, ZT_TARGET_AVX2/512 (the microkernel's path)
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
// CPU GEMM core: C (M, N) = A (M, K) @ B (K, N), the operands read through strides.
//
// The bits. Every output element is one FP32 chain over k = 0..K-1 in order,
//     acc = 0;  acc = fmaf(A[i,k], B[k,j], acc)  for k = 0, 1, ..., K-1,
// then the epilogue. Every path (scalar, avx2, avx512: simd.h, ZT_SIMD), every thread count and
// every blocking gives that chain: threads split the output, never a sum; a vector lane is one
// output element (vfmadd231ps is fmaf per lane); a partial sum that waits in memory between k
// blocks is stored and reloaded as the same FP32 value. So results are bitwise the same whatever the
// path or the threads (test: op_gemm_simd_bitwise, every path against a plain fmaf loop). The scalar
// path calls fmaf too: one instruction where the build has FMA (-march=native, x86-64-v3), libm's
// correctly rounded fmaf elsewhere (slow, same bits).
//
// The blocking (GotoBLAS / BLIS's loops, simplified; MR x NR = 8 x 32 register tile):
//   for row blocks of mb rows            (mb = M unless K is cut and the partial sums of M rows
//                                          do not fit the workspace)
//     for k blocks of kc <= GEMM_KC       (one block when K <= GEMM_KC: no partial sums kept)
//       for column panels of nc           (kc x nc floats ~ GEMM_PANEL_L2: a core's L2 share)
//         pack B[k block, panel] to FP32 strips (strip, kc, NR), zero-padded  [threads split strips]
//         tiles (row tile outer, strip inner), threads take contiguous runs of them: a thread packs
//         its row tile's A[rows, k block] to FP32 (kc, MR) on its stack once (the BF16 build
//         converts here), then the microkernel runs the tile's chain over the k block with A in L1
//         and the strip streaming from L2; the acc starts at 0 (first block) or from the partial
//         buffer Cp (mb, N), and goes to the epilogue (last block) or back to Cp.
// The LM head's three products are the shapes that matter on the tiny models: forward (BT, V, C)
// has a wide N (panels); dinp (BT, C, V) has a long K (k blocks and Cp); dweight (V, C, BT) has a
// long M with A = dout^T read down columns (a_rs 1: the packing reads MR neighbours per k).
// With OpenBLAS (built with it and -blas 1) sgemm does the products instead (cpu_gemm_blas).

#define GEMM_MR 8                    // rows of the register tile
#define GEMM_NR 32                   // columns of the register tile (2 AVX-512 / 4 AVX2 vectors)
#define GEMM_KC 512                  // the k block: A's (kc, MR) 16 KiB sits in L1 beside a strip's stream
#define GEMM_PANEL_L2 (1 << 18)      // floats of a packed B panel (1 MiB) that a thread's strips re-read
#define GEMM_PANEL_FLOATS (1u << 22) // the workspace the ops reserve at least (16 MiB of FP32; acts.h)

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

// The microkernel: acc (MR, NR) = (zero ? 0 : acc) continued by the chain over k < kc of
// Ap (kc, MR) [FP32, packed] times Bp (kc, NR) [FP32, packed]. One per path; the same bits.
typedef void (*GemmKernelFn)(int kc, const float* Ap, const float* Bp, float* acc, int zero);

static void gemm_kernel_scalar(int kc, const float* Ap, const float* Bp, float* acc, int zero) {
    float c[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) c[r][j] = zero ? 0.0f : acc[r * GEMM_NR + j];
    for (int k = 0; k < kc; k++) {
        const float* b = Bp + (int64_t)k * GEMM_NR;
        for (int r = 0; r < GEMM_MR; r++) {
            float a = Ap[k * GEMM_MR + r];
            for (int j = 0; j < GEMM_NR; j++) c[r][j] = fmaf(a, b[j], c[r][j]);
        }
    }
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) acc[r * GEMM_NR + j] = c[r][j];
}

#ifdef ZT_X86
// (nvcc's front end rejects GCC's unroll pragma; the host compiler unrolls these constant loops anyway)
#ifdef __CUDACC__
#define GEMM_UNROLL(n)
#else
#define GEMM_PRAGMA(x) _Pragma(#x)
#define GEMM_UNROLL(n) GEMM_PRAGMA(GCC unroll n)
#endif

// AVX-512: the whole 8 x 32 tile in 16 zmm accumulators; per k two loads of B, eight broadcasts of A,
// sixteen vfmadd231ps.
ZT_TARGET_AVX512 static void gemm_kernel_avx512(int kc, const float* Ap, const float* Bp, float* acc, int zero) {
    __m512 c[GEMM_MR][2];
    GEMM_UNROLL(8)
    for (int r = 0; r < GEMM_MR; r++) {
        c[r][0] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + r * GEMM_NR);
        c[r][1] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + r * GEMM_NR + 16);
    }
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_loadu_ps(Bp + (int64_t)k * GEMM_NR), b1 = _mm512_loadu_ps(Bp + (int64_t)k * GEMM_NR + 16);
        GEMM_UNROLL(8)
        for (int r = 0; r < GEMM_MR; r++) {
            __m512 a = _mm512_set1_ps(Ap[k * GEMM_MR + r]);
            c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
        }
    }
    GEMM_UNROLL(8)
    for (int r = 0; r < GEMM_MR; r++) {
        _mm512_storeu_ps(acc + r * GEMM_NR, c[r][0]);
        _mm512_storeu_ps(acc + r * GEMM_NR + 16, c[r][1]);
    }
}

// AVX2 (16 ymm registers): the tile in four passes of 4 rows x 16 columns, 8 ymm accumulators each.
ZT_TARGET_AVX2 static void gemm_kernel_avx2(int kc, const float* Ap, const float* Bp, float* acc, int zero) {
    for (int r0 = 0; r0 < GEMM_MR; r0 += 4)
        for (int j0 = 0; j0 < GEMM_NR; j0 += 16) {
            __m256 c[4][2];
            GEMM_UNROLL(4)
            for (int r = 0; r < 4; r++) {
                c[r][0] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + (r0 + r) * GEMM_NR + j0);
                c[r][1] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + (r0 + r) * GEMM_NR + j0 + 8);
            }
            for (int k = 0; k < kc; k++) {
                const float* b = Bp + (int64_t)k * GEMM_NR + j0;
                __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                GEMM_UNROLL(4)
                for (int r = 0; r < 4; r++) {
                    __m256 a = _mm256_broadcast_ss(Ap + k * GEMM_MR + r0 + r);
                    c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
                    c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
                }
            }
            GEMM_UNROLL(4)
            for (int r = 0; r < 4; r++) {
                _mm256_storeu_ps(acc + (r0 + r) * GEMM_NR + j0, c[r][0]);
                _mm256_storeu_ps(acc + (r0 + r) * GEMM_NR + j0 + 8, c[r][1]);
            }
        }
}
#endif

static GemmKernelFn gemm_kernel_fn(int level) {
#ifdef ZT_X86
    if (level == SIMD_AVX512) return gemm_kernel_avx512;
    if (level == SIMD_AVX2) return gemm_kernel_avx2;
#endif
    (void)level;
    return gemm_kernel_scalar;
}

// Elements (i, j0 .. j0+n-1) of the output from acc[0 .. n-1]: one row of a tile (the kind's
// switch outside the loop over j, so the loop vectorises).
static inline void gemm_epilogue_row(const GemmOut* o, int64_t i, int64_t j0, int n, int64_t N, const float* acc) {
    int64_t idx = i * N + j0;
    const floatX* bias = o->bias ? o->bias + j0 : NULL;
    switch (o->kind) {
    case EPI_STORE_X:
        if (bias) for (int j = 0; j < n; j++) o->outX[idx + j] = rn(acc[j] + ld(bias[j]));
        else for (int j = 0; j < n; j++) o->outX[idx + j] = rn(acc[j]);
        break;
    case EPI_STORE_X_GELU:
        for (int j = 0; j < n; j++) {
            floatX pre = rn(bias ? acc[j] + ld(bias[j]) : acc[j]);
            o->preX[idx + j] = pre;
            o->outX[idx + j] = rn(gelu_fwd(ld(pre)));
        }
        break;
    case EPI_STORE_X_DGELU:
        for (int j = 0; j < n; j++) o->outX[idx + j] = rn(ld(rn(acc[j])) * gelu_bwd(ld(o->preX[idx + j])));
        break;
    case EPI_ACCUM_F32:
        for (int j = 0; j < n; j++) o->outF[idx + j] += acc[j];
        break;
    }
}

// Bp (strips, kb, NR) = FP32 of B[k0.., n0..] for kb rows and ncols columns, zero past ncols.
// Threads split the strips (called inside the GEMM's parallel region).
static void gemm_pack_b(float* Bp, const floatX* B, int64_t b_rs, int64_t b_cs, int64_t k0, int kb, int64_t n0, int64_t ncols) {
    int64_t strips = ceil_div(ncols, GEMM_NR);
#pragma omp for schedule(static)
    for (int64_t s = 0; s < strips; s++) {
        float* dst = Bp + s * kb * GEMM_NR;
        int64_t j0 = n0 + s * GEMM_NR;
        int w = (int)(ncols - s * GEMM_NR < GEMM_NR ? ncols - s * GEMM_NR : GEMM_NR);
        if (b_cs == 1) // rows of B contiguous (dinp: W; dweight: inp)
            for (int k = 0; k < kb; k++) {
                const floatX* src = B + (k0 + k) * b_rs + j0;
                for (int j = 0; j < GEMM_NR; j++) dst[k * GEMM_NR + j] = j < w ? ld(src[j]) : 0.0f;
            }
        else // columns of B contiguous when b_rs == 1 (forward: B = W^T, a row of W per column)
            for (int j = 0; j < GEMM_NR; j++) {
                const floatX* src = B + k0 * b_rs + (j0 + j) * b_cs;
                for (int k = 0; k < kb; k++) dst[k * GEMM_NR + j] = j < w ? ld(src[k * b_rs]) : 0.0f;
            }
    }
}

#ifdef ZT_X86
// 8 floatX at p as 8 FP32 lanes (BF16: the bits shifted into the upper half, exactly ld()).
ZT_TARGET_AVX2 static inline __m256 gemm_load8(const floatX* p) {
#ifdef ENABLE_FP32
    return _mm256_loadu_ps(p);
#else
    __m128i h = _mm_loadu_si128((const __m128i*)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#endif
}

// Ap (kb, MR) from MR = 8 rows with a_cs == 1 (row r's k-th element at rowp[r][k]): blocks of 8 x 8
// transposed in registers (unpack, shuffle, permute: the classic AVX 8 x 8 transpose); the tail
// element by element. A copy: the same values as the scalar packing.
ZT_TARGET_AVX2 static void gemm_pack_a_rows_avx2(float* Ap, const floatX* const* rowp, int kb) {
    int k = 0;
    for (; k + 8 <= kb; k += 8) {
        __m256 r0 = gemm_load8(rowp[0] + k), r1 = gemm_load8(rowp[1] + k), r2 = gemm_load8(rowp[2] + k), r3 = gemm_load8(rowp[3] + k);
        __m256 r4 = gemm_load8(rowp[4] + k), r5 = gemm_load8(rowp[5] + k), r6 = gemm_load8(rowp[6] + k), r7 = gemm_load8(rowp[7] + k);
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5), t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE), u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
        __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE), u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
        float* d = Ap + k * GEMM_MR; // columns k .. k+7 of the 8 rows: (u_c low | u_{c+4} low), (u_c high | u_{c+4} high)
        _mm256_storeu_ps(d + 0 * GEMM_MR, _mm256_permute2f128_ps(u0, u4, 0x20));
        _mm256_storeu_ps(d + 1 * GEMM_MR, _mm256_permute2f128_ps(u1, u5, 0x20));
        _mm256_storeu_ps(d + 2 * GEMM_MR, _mm256_permute2f128_ps(u2, u6, 0x20));
        _mm256_storeu_ps(d + 3 * GEMM_MR, _mm256_permute2f128_ps(u3, u7, 0x20));
        _mm256_storeu_ps(d + 4 * GEMM_MR, _mm256_permute2f128_ps(u0, u4, 0x31));
        _mm256_storeu_ps(d + 5 * GEMM_MR, _mm256_permute2f128_ps(u1, u5, 0x31));
        _mm256_storeu_ps(d + 6 * GEMM_MR, _mm256_permute2f128_ps(u2, u6, 0x31));
        _mm256_storeu_ps(d + 7 * GEMM_MR, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    for (; k < kb; k++)
        for (int r = 0; r < GEMM_MR; r++) Ap[k * GEMM_MR + r] = ld(rowp[r][k]);
}
#endif

// Ap (kb, MR) = FP32 of A[i0.., k0..]; rows past M repeat row M-1 (their results are dropped).
// simd: the microkernel's path (SIMD_AVX2 or wider: the AVX2 transpose for rows of A).
static void gemm_pack_a(float* Ap, const floatX* A, int64_t a_rs, int64_t a_cs, int64_t i0, int64_t M, int64_t k0, int kb, int simd) {
    const floatX* rowp[GEMM_MR];
    for (int r = 0; r < GEMM_MR; r++) rowp[r] = A + (i0 + r < M ? i0 + r : M - 1) * a_rs + k0 * a_cs;
#ifdef ZT_X86
    if (a_cs == 1 && simd >= SIMD_AVX2) { gemm_pack_a_rows_avx2(Ap, rowp, kb); return; }
#endif
    (void)simd;
    if (a_cs == 1) // rows of A contiguous (forward: inp; dinp: dout)
        for (int r = 0; r < GEMM_MR; r++)
            for (int k = 0; k < kb; k++) Ap[k * GEMM_MR + r] = ld(rowp[r][k]);
    else if (a_rs == 1 && i0 + GEMM_MR <= M) // dweight: A = dout^T, MR neighbours in each row of dout
        for (int k = 0; k < kb; k++) {
            // each k is another row of dout (V floats away: another page, which no hardware prefetcher
            // follows): fetch the next two row tiles' cache line now, while this tile computes
            __builtin_prefetch((const char*)(rowp[0] + k * a_cs) + 64, 0, 2);
            for (int r = 0; r < GEMM_MR; r++) Ap[k * GEMM_MR + r] = ld(rowp[0][k * a_cs + r]);
        }
    else
        for (int k = 0; k < kb; k++)
            for (int r = 0; r < GEMM_MR; r++) Ap[k * GEMM_MR + r] = ld(rowp[r][k * a_cs]);
}

// C (M, N) = A (M, K) @ B (K, N), element (i, k) of A at A[i*a_rs + k*a_cs], element (k, j) of B
// at B[k*b_rs + j*b_cs]; each element through `out`'s epilogue. Uses g_work for the packed B panel
// and the partial sums.
static void cpu_gemm(int64_t M, int64_t N, int64_t K, const floatX* A, int64_t a_rs, int64_t a_cs,
                     const floatX* B, int64_t b_rs, int64_t b_cs, const GemmOut* out) {
    if (M <= 0 || N <= 0) return;
    int simd = simd_level();
    GemmKernelFn kern = gemm_kernel_fn(simd);
    int64_t kc = K < GEMM_KC ? K : GEMM_KC, nk = K > 0 ? ceil_div(K, kc) : 1;
    if (kc < 1) kc = 1;
    // the panel: GEMM_PANEL_L2 floats, at least one strip, at most the workspace (and N)
    int64_t nc = GEMM_PANEL_L2 / kc / GEMM_NR * GEMM_NR;
    int64_t nc_fit = (int64_t)(g_work_floats / ((size_t)kc * GEMM_NR)) * GEMM_NR;
    if (nc > nc_fit) nc = nc_fit;
    if (nc < GEMM_NR) nc = GEMM_NR;
    if (nc > round_up(N, GEMM_NR)) nc = round_up(N, GEMM_NR);
    float* Bp = g_work;
    float* Cp = g_work + round_up(kc * nc, 16); // (mb, N) partial sums when K is cut
    int64_t mb = M;
    if (nk > 1) {
        int64_t room = (int64_t)g_work_floats - round_up(kc * nc, 16);
        mb = room > 0 ? room / N / GEMM_MR * GEMM_MR : 0;
        if (mb > M) mb = M;
    }
    if ((size_t)kc * nc > g_work_floats || mb < 1)
        die(1, "matmul workspace too small (%zu floats) for M=%lld N=%lld K=%lld (internal error)", g_work_floats, (long long)M,
            (long long)N, (long long)K);
#pragma omp parallel
    {
        float Ap[GEMM_KC * GEMM_MR] __attribute__((aligned(64)));     // this thread's row tile of A, (kb, MR)
        float acc[GEMM_MR * GEMM_NR] __attribute__((aligned(64)));    // the tile's sums
        for (int64_t m0 = 0; m0 < M; m0 += mb) {
            int64_t mrows = M - m0 < mb ? M - m0 : mb, mtiles = ceil_div(mrows, GEMM_MR);
            for (int64_t kblk = 0; kblk < nk; kblk++) {
                int64_t k0 = kblk * kc;
                int kb = (int)(K - k0 < kc ? K - k0 : kc);
                int first = kblk == 0, last = kblk == nk - 1;
                for (int64_t n0 = 0; n0 < N; n0 += nc) {
                    int64_t ncols = N - n0 < nc ? N - n0 : nc, strips = ceil_div(ncols, GEMM_NR);
                    gemm_pack_b(Bp, B, b_rs, b_cs, k0, kb, n0, ncols); // (ends with a barrier: Bp is whole)
                    int64_t packed = -1;                                // the row tile in Ap
#pragma omp for schedule(static)
                    for (int64_t t = 0; t < mtiles * strips; t++) {
                        int64_t mt = t / strips, s = t % strips;
                        int64_t i0 = m0 + mt * GEMM_MR, j0 = n0 + s * GEMM_NR;
                        if (mt != packed) { gemm_pack_a(Ap, A, a_rs, a_cs, i0, M, k0, kb, simd); packed = mt; }
                        int rows = (int)(M - i0 < GEMM_MR ? M - i0 : GEMM_MR);
                        int cols = (int)(N - j0 < GEMM_NR ? N - j0 : GEMM_NR);
                        if (!first) // continue the partial sums (rows / columns past the edge: zeros, dropped)
                            for (int r = 0; r < GEMM_MR; r++)
                                for (int j = 0; j < GEMM_NR; j++)
                                    acc[r * GEMM_NR + j] = r < rows && j < cols ? Cp[(i0 - m0 + r) * N + j0 + j] : 0.0f;
                        kern(kb, Ap, Bp + s * kb * GEMM_NR, acc, first);
                        for (int r = 0; r < rows; r++) {
                            if (last) gemm_epilogue_row(out, i0 + r, j0, cols, N, acc + r * GEMM_NR);
                            else memcpy(Cp + (i0 - m0 + r) * N + j0, acc + r * GEMM_NR, sizeof(float) * cols);
                        }
                    }
                    // the implicit barrier of the omp for: no thread still reads Bp when it is repacked
                }
            }
        }
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
            for (int64_t i = 0; i < mn; i++) gemm_epilogue_row(out, m0 + i, n0, (int)nn, N, Cp + i * nn);
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
// CUDA device: the three products through cuBLASLt, GELU / GELU' and the bias gradient as small
// kernels of our own.
//
// Row-major vs column-major. cuBLAS(Lt) is column-major: it computes D (m, n) = op(A) (m, k) @
// op(B) (k, n), each operand stored column-major with a leading dimension. A row-major matrix
// X (R, K) with row stride K has exactly the bytes of the column-major matrix X^T (K, R) with
// leading dimension K. So every product is computed transposed, D = out^T, and the operand
// bytes are passed as they are:
//
//   forward   out (N, OC) = inp (N, C) @ W (OC, C)^T + bias
//             out^T (OC, N) = W (OC, C) @ inp^T (C, N) + bias (OC, one per row of out^T)
//             A = W    stored col-major (C, OC), ld C  -> op T gives (OC, C);   m = OC
//             B = inp  stored col-major (C, N),  ld C  -> op N gives (C, N);    n = N, k = C
//             D = out  col-major (OC, N), ld OC; the bias epilogue adds bias[i] to row i of D
//   dinp      dinp (N, C) = dout (N, OC) @ W (OC, C)
//             dinp^T (C, N) = W^T (C, OC) @ dout^T (OC, N)
//             A = W    stored col-major (C, OC), ld C  -> op N;                 m = C
//             B = dout stored col-major (OC, N), ld OC -> op N;                 n = N, k = OC
//             D = dinp col-major (C, N), ld C
//   dweight   dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
//             dweight^T (C, OC) += inp^T (C, N) @ dout (N, OC)
//             A = inp  stored col-major (C, N),  ld C  -> op N;                 m = C
//             B = dout stored col-major (OC, N), ld OC -> op T gives (N, OC);   n = OC, k = N
//             C = D = dweight col-major (C, OC), ld C, FP32, beta = 1 (accumulate in place)
//
// Precision: BF16 A and B (FP32 in the FP32 build), FP32 compute (CUBLAS_COMPUTE_32F: no TF32),
// FP32 alpha/beta; D is floatX (forward, dinp) or FP32 (dweight). The bias is floatX: with a
// BF16 D, cuBLASLt's bias type is D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, set explicitly).
// The epilogue adds the bias in FP32 and rounds once, so pre = rn(acc + bias) as on the CPU.
// GELU is *not* cuBLASLt's GELU epilogue (that would apply GELU before the rounding): the GEMM
// writes the rounded pre-activation and gelu_forward_kernel rounds gelu(pre) again. Likewise the
// DGELU of the backward is a kernel over the rounded dinp.
//
// Split-K: only reduction schemes that add the partial sums in FP32 in the workspace (COMPUTE_TYPE)
// or none are allowed. INPLACE and OUTPUT_TYPE would add partial sums rounded to BF16, i.e. round
// more than once.
//
// Plans: the matmul descriptor, the three layouts and the heuristic's chosen algorithm are created
// once per (shape, transposes, leading dimensions, epilogue, output type, pointer alignments) and
// kept in g_matmul_plans; every later call with that key reuses the same algorithm (the same bits).
// The plans' host structures (the table, grown by doubling, and cuBLASLt's) are created on first
// use — the only host allocations of these ops; nothing is allocated on the device. The pointer
// alignments are part of the key because the heuristic picks algorithms for the alignment it is
// told (TransformerEngine does the same), but clamped: min(alignment, 16 bytes) (plan_alignment).
// cuBLASLt distinguishes alignments up to 256 bytes, and where a buffer lies differs between ZeRO
// stages (a tensor inside full_params, or inside a gathered param_buf); keyed by the raw alignment,
// one shape could get two algorithms — two summation orders — and z0..z3 would stop being
// bit-identical. Every buffer is at least 16-byte aligned (dev_alloc: 256; tensors in a block:
// TENSOR_ALIGN), so a training run plans each shape once, at 16. The heuristic also reads the bias
// pointer's alignment: it is shown a stand-in pointer of exactly the key's alignment (g_work +
// align_bias), and the real bias pointer is set on the descriptor at every call.
//
// Workspace: a fixed MATMUL_WORKSPACE_BYTES (32 MiB) at the start of g_work (256-byte aligned),
// whatever g_work's size, so the algorithm choice does not depend on the model's workspace. 32 MiB
// is the size the cuBLAS documentation recommends for Hopper (cublasSetWorkspace; 4 MiB before it;
// PyTorch uses the same): it lets the heuristic offer the split-K kernels that reduce in FP32 in the
// workspace. ops_workspace_floats counts it on both devices, so the planner's workspace row is the
// allocation. The heuristic is deterministic (no timing), runs once per plan key, and the plan keeps
// its algorithm for the run: every rank and every run gets the same algorithm for the same shape.
//
// When cuBLASLt has no algorithm for a shape (the heuristic fails, e.g. NOT_SUPPORTED, or finds
// none: unusual sizes or alignments), matmul_simple_kernel does the product instead: one thread per output element, an
// in-order FP32 sum, the same epilogues. It is slow and says so once on stderr.
//
// Bias gradient: cuBLASLt's BGRAD epilogues overwrite the bias gradient instead of adding to it, so
// dbias += column sums of dout is two deterministic kernels: partial sums over fixed chunks of
// BIASGRAD_ROWS rows into g_work, then the partials of each column added in chunk order. No atomics.

#ifndef MATMUL_WORKSPACE_BYTES // (a GPU session may build with -DMATMUL_WORKSPACE_BYTES='((size_t)16<<20)' to compare)
#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20) // cuBLASLt's workspace: 32 MiB of g_work (both devices count it)
#endif

#ifdef __CUDACC__

#ifdef ENABLE_FP32
#define CUDA_R_FLOATX CUDA_R_32F
#else
#define CUDA_R_FLOATX CUDA_R_16BF
#endif
#define BIASGRAD_COLS 32                          // threads per block across columns (one warp wide)
#define BIASGRAD_LANES 8                          // rows summed side by side in a block
#define BIASGRAD_ROWS 256                         // rows per chunk (one partial sum per chunk)

#ifdef TESTING
static int g_matmul_force_simple = 0; // test hook: run every GEMM through matmul_simple_kernel
#define MATMUL_FORCE_SIMPLE g_matmul_force_simple
#else
#define MATMUL_FORCE_SIMPLE 0
#endif

// One GEMM as cuBLASLt sees it (column-major): D (m, n) [+]= op(A) (m, k) @ op(B) (k, n) [+ bias].
typedef struct {
    // key
    int transa, transb;       // op(A) = A^T, op(B) = B^T
    int64_t m, n, k;
    int64_t lda, ldb, ldd;
    int has_bias;             // CUBLASLT_EPILOGUE_BIAS with a floatX bias (m)
    int accumulate;           // 1: D is FP32 and D += ... (beta = 1); 0: D is floatX, D = ...
    unsigned align_a, align_b, align_d, align_bias; // bytes: plan_alignment, powers of two up to 16
    // value
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout_a, layout_b, layout_d; // C uses layout_d (C = D)
    cublasLtMatmulAlgo_t algo;
    int has_algo;             // 0: cuBLASLt offered none; matmul_simple_kernel runs instead
} MatmulPlan;

// Grown by doubling: a training step has ~13 distinct GEMMs, but sampling runs the model at every
// sequence length 1..T, ~5 more per length (so a fixed table ran out at the first sample).
static MatmulPlan* g_matmul_plans = NULL;
static int g_matmul_nplans = 0, g_matmul_cap = 0;
static int g_matmul_simple_plans = 0; // plans for which cuBLASLt had no algorithm (the tests read it)

// The largest power of two (at most 256) that divides the address.
static unsigned ptr_alignment(const void* p) {
    uintptr_t a = (uintptr_t)p;
    unsigned align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

// The alignment a plan is keyed by and cuBLASLt is told: min(ptr_alignment, 16) (see above).
#define MATMUL_KEY_ALIGN 16
static unsigned plan_alignment(const void* p) {
    unsigned a = ptr_alignment(p);
    return a < MATMUL_KEY_ALIGN ? a : MATMUL_KEY_ALIGN;
}

// "m=.. n=.. k=.. ..." for error messages: which GEMM failed is the first question.
static const char* matmul_plan_str(const MatmulPlan* p) {
    static char buf[320];
    snprintf(buf, sizeof(buf),
             "D (m=%lld, n=%lld) %s op(A) op(B) with k=%lld, lda=%lld ldb=%lld ldd=%lld, op A/B=%c/%c, "
             "D %s, bias %s, alignment A/B/D/bias %u/%u/%u/%u bytes",
             (long long)p->m, (long long)p->n, p->accumulate ? "+=" : "=", (long long)p->k,
             (long long)p->lda, (long long)p->ldb, (long long)p->ldd, p->transa ? 'T' : 'N',
             p->transb ? 'T' : 'N', p->accumulate ? "FP32" : PRECISION_NAME, p->has_bias ? "yes" : "no",
             p->align_a, p->align_b, p->align_d, p->align_bias);
    return buf;
}

// cublasCheck with the GEMM's shape in the message.
#define cublasCheckGemm(expr, plan)                                                              \
    do {                                                                                         \
        cublasStatus_t st_ = (expr);                                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
            die(1, "cuBLAS error %d (%s) at %s:%d: %s, for the GEMM %s. HINT: check the shapes and " \
                   "the CUDA/cuBLAS versions (nvidia-smi, nvcc --version)", (int)st_,            \
                cublasLtGetStatusName(st_), __FILE__, __LINE__, #expr, matmul_plan_str(plan));   \
    } while (0)

// Create descriptor, layouts and algorithm for the key in *p (called once per key).
static void matmul_plan_init(MatmulPlan* p) {
    cublasCheckGemm(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), p);
    cublasOperation_t ta = p->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), p);
    cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), p);
    cublasLtEpilogue_t epi = p->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), p);
    if (p->has_bias) {
        int32_t bias_type = CUDA_R_FLOATX; // = D's type, cuBLASLt's rule for non-FP8, non-integer GEMMs
        cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof(bias_type)), p);
        // the heuristic reads the bias pointer's alignment from the descriptor (never its values):
        // show it a stand-in of exactly the key's alignment (g_work is 256-byte aligned)
        const floatX* bias = (const floatX*)((const char*)g_work + p->align_bias);
        cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                       sizeof(bias)), p);
    }
    // layouts of the stored matrices (before op): A is (m, k) or, transposed, (k, m); B likewise
    cudaDataType_t td = p->accumulate ? CUDA_R_32F : CUDA_R_FLOATX;
    cublasCheckGemm(cublasLtMatrixLayoutCreate(&p->layout_a, CUDA_R_FLOATX, p->transa ? p->k : p->m,
                                               p->transa ? p->m : p->k, p->lda), p);
    cublasCheckGemm(cublasLtMatrixLayoutCreate(&p->layout_b, CUDA_R_FLOATX, p->transb ? p->n : p->k,
                                               p->transb ? p->k : p->n, p->ldb), p);
    cublasCheckGemm(cublasLtMatrixLayoutCreate(&p->layout_d, td, p->m, p->n, p->ldd), p);

    cublasLtMatmulPreference_t pref;
    cublasCheckGemm(cublasLtMatmulPreferenceCreate(&pref), p);
    uint64_t ws = MATMUL_WORKSPACE_BYTES;
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE; // (and none): see the notes above
    uint32_t al_a = p->align_a, al_b = p->align_b, al_d = p->align_d;
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)), p);
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                         sizeof(schemes)), p);
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)), p);
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)), p);
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)), p);
    cublasCheckGemm(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)), p);

    cublasLtMatmulHeuristicResult_t heur;
    memset(&heur, 0, sizeof(heur));
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_cublaslt, p->desc, p->layout_a, p->layout_b, p->layout_d,
                                                       p->layout_d, pref, 1, &heur, &found);
    cublasCheckGemm(cublasLtMatmulPreferenceDestroy(pref), p);
    // any failure of the heuristic (NOT_SUPPORTED for unusual sizes or alignments) means "no
    // algorithm": the simple kernel takes over, and says so
    p->has_algo = st == CUBLAS_STATUS_SUCCESS && found > 0 && heur.state == CUBLAS_STATUS_SUCCESS &&
                  heur.workspaceSize <= MATMUL_WORKSPACE_BYTES;
    if (p->has_algo) {
        p->algo = heur.algo;
    } else {
        g_matmul_simple_plans++;
        if (g_world > 1) fprintf(stderr, "[rank %d] ", g_rank);
        fprintf(stderr, "note: cuBLASLt has no algorithm for the GEMM %s (status %s, %d found); the simple "
                        "CUDA kernel does it instead (correct, slow)\n", matmul_plan_str(p),
                cublasLtGetStatusName(st), found);
    }
}

// The plan for this key: found, or created on first use.
static MatmulPlan* matmul_plan(const MatmulPlan* key) {
    for (int i = 0; i < g_matmul_nplans; i++) {
        MatmulPlan* p = &g_matmul_plans[i];
        if (p->transa == key->transa && p->transb == key->transb && p->m == key->m && p->n == key->n &&
            p->k == key->k && p->lda == key->lda && p->ldb == key->ldb && p->ldd == key->ldd &&
            p->has_bias == key->has_bias && p->accumulate == key->accumulate && p->align_a == key->align_a &&
            p->align_b == key->align_b && p->align_d == key->align_d && p->align_bias == key->align_bias)
            return p;
    }
    if (g_matmul_nplans == g_matmul_cap) { // plans are used at once, never kept by pointer: they may move
        int cap = g_matmul_cap ? 2 * g_matmul_cap : 64;
        MatmulPlan* grown = (MatmulPlan*)realloc(g_matmul_plans, sizeof(MatmulPlan) * cap);
        if (!grown) die(1, "out of host memory for %d matmul plans at the GEMM %s", cap, matmul_plan_str(key));
        g_matmul_plans = grown;
        g_matmul_cap = cap;
    }
    MatmulPlan* p = &g_matmul_plans[g_matmul_nplans++];
    *p = *key;
    matmul_plan_init(p);
    return p;
}

// The fallback GEMM: D[i + j*ldd] = rn(sum_k opA(i,k) opB(k,j) + bias[i])   (accumulate = 0, floatX D)
//                    D[i + j*ldd] += sum_k opA(i,k) opB(k,j)                 (accumulate = 1, FP32 D)
// with opA(i,k) = A[i + k*lda] (or A[k + i*lda] transposed), opB(k,j) = B[k + j*ldb] (or B[j + k*ldb]).
// One thread per element of D (consecutive threads: consecutive i), k summed in order.
__global__ static void matmul_simple_kernel(void* D, int64_t ldd, int accumulate, const floatX* A, int64_t lda,
                                            int transa, const floatX* B, int64_t ldb, int transb,
                                            const floatX* bias, int64_t m, int64_t n, int64_t k) {
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < m * n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = idx % m, j = idx / m;
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; kk++) {
            float a = ld(transa ? A[kk + i * lda] : A[i + kk * lda]);
            float b = ld(transb ? B[j + kk * ldb] : B[kk + j * ldb]);
            acc = fmaf(a, b, acc);
        }
        if (accumulate) ((float*)D)[i + j * ldd] += acc;
        else ((floatX*)D)[i + j * ldd] = rn(bias ? acc + ld(bias[i]) : acc);
    }
}

// Blocks for a grid-stride loop over n elements (at most 2^20 blocks; the loop covers the rest).
static unsigned elementwise_blocks(int64_t n, int threads) {
    int64_t blocks = ceil_div(n, threads);
    if (blocks > (1 << 20)) blocks = 1 << 20;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

// D (m, n) [+]= op(A) (m, k) @ op(B) (k, n) [+ bias (m)], column-major, on g_stream (see above).
static void cuda_gemm(int transa, int transb, int64_t m, int64_t n, int64_t k, const floatX* A, int64_t lda,
                      const floatX* B, int64_t ldb, void* D, int64_t ldd, const floatX* bias, int accumulate) {
    MatmulPlan key;
    memset(&key, 0, sizeof(key));
    key.transa = transa; key.transb = transb;
    key.m = m; key.n = n; key.k = k;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.has_bias = bias != NULL;
    key.accumulate = accumulate;
    key.align_a = plan_alignment(A); key.align_b = plan_alignment(B); key.align_d = plan_alignment(D);
    key.align_bias = bias ? plan_alignment(bias) : MATMUL_KEY_ALIGN;
    if (m == 0 || n == 0) return;
    if (g_work_floats * sizeof(float) < MATMUL_WORKSPACE_BYTES || ptr_alignment(g_work) < 256)
        die(1, "matmul: g_work must hold %zu bytes, 256-byte aligned (has %zu at alignment %u) (internal error)",
            MATMUL_WORKSPACE_BYTES, g_work_floats * sizeof(float), ptr_alignment(g_work));
    MatmulPlan* p = k > 0 ? matmul_plan(&key) : NULL; // k = 0: D = bias (or D += 0), the simple kernel
    if (!p || !p->has_algo || MATMUL_FORCE_SIMPLE) {
        matmul_simple_kernel<<<elementwise_blocks(m * n, 256), 256, 0, g_stream>>>(D, ldd, accumulate, A, lda, transa,
                                                                                 B, ldb, transb, bias, m, n, k);
        cudaCheck(cudaGetLastError());
        return;
    }
    if (bias) cublasCheckGemm(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                             sizeof(bias)), p);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasCheckGemm(cublasLtMatmul(g_cublaslt, p->desc, &alpha, A, p->layout_a, B, p->layout_b, &beta, D, p->layout_d,
                                   D, p->layout_d, &p->algo, g_work, MATMUL_WORKSPACE_BYTES, g_stream), p);
}

// The elementwise kernels below: with vec (every pointer 16-byte aligned) the first n / PACK_X
// whole packs move with 16-byte accesses, then the tail (n % PACK_X elements, or all n without vec)
// one element at a time; grid-stride loops over packs, then over the tail. The arithmetic per
// element is the CPU's, so both paths give the same bits.

// out = rn(gelu(ld(pre))), elementwise (the forward's GELU and its recompute: the same bits).
__global__ static void gelu_forward_kernel(floatX* out, const floatX* pre, int64_t n, int vec) {
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t packs = vec ? n / PACK_X : 0;
    for (int64_t p = first; p < packs; p += stride) {
        Packed128<floatX> x = load128(pre + p * PACK_X), y;
        for (int k = 0; k < PACK_X; k++) y[k] = rn(gelu_fwd(ld(x[k])));
        store128(out + p * PACK_X, y);
    }
    for (int64_t i = packs * PACK_X + first; i < n; i += stride) out[i] = rn(gelu_fwd(ld(pre[i])));
}

// dinp = rn(ld(dinp) * gelu'(ld(pre))), in place: dinp holds rn(acc) from the GEMM.
__global__ static void gelu_backward_inplace_kernel(floatX* dinp, const floatX* pre, int64_t n, int vec) {
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t packs = vec ? n / PACK_X : 0;
    for (int64_t p = first; p < packs; p += stride) {
        Packed128<floatX> d = load128(dinp + p * PACK_X), x = load128(pre + p * PACK_X);
        for (int k = 0; k < PACK_X; k++) d[k] = rn(ld(d[k]) * gelu_bwd(ld(x[k])));
        store128(dinp + p * PACK_X, d);
    }
    for (int64_t i = packs * PACK_X + first; i < n; i += stride) dinp[i] = rn(ld(dinp[i]) * gelu_bwd(ld(pre[i])));
}

// Threads for an elementwise kernel over n elements: one per pack (vec) or per element.
static unsigned elementwise_vec_blocks(int64_t n, int vec) {
    return elementwise_blocks(vec ? ceil_div(n, PACK_X) : n, 256);
}

static void cuda_gelu_forward(floatX* out, const floatX* pre, int64_t n) {
    if (n == 0) return;
    int vec = aligned16(out) && aligned16(pre);
    gelu_forward_kernel<<<elementwise_vec_blocks(n, vec), 256, 0, g_stream>>>(out, pre, n, vec);
    cudaCheck(cudaGetLastError());
}

static void cuda_gelu_backward_inplace(floatX* dinp, const floatX* pre, int64_t n) {
    if (n == 0) return;
    int vec = aligned16(dinp) && aligned16(pre);
    gelu_backward_inplace_kernel<<<elementwise_vec_blocks(n, vec), 256, 0, g_stream>>>(dinp, pre, n, vec);
    cudaCheck(cudaGetLastError());
}

// Block (x: column block, y: row chunk): partial[y][c] = sum of dout[r][c] over the chunk's rows.
// Thread (tx, ty) owns W columns c0 = (block column + tx) * W ... (W = PACK_X with vec: one 16-byte
// load per row, OC % PACK_X == 0 and dout aligned; else W = 1) and sums rows r0+ty, r0+ty+LANES, ...
// of each in order; the LANES sums are then added in ty order. Every sum has a fixed order, the
// same for both widths: the result depends neither on the scheduling nor on vec.
__global__ static void __launch_bounds__(BIASGRAD_COLS * BIASGRAD_LANES)
bias_grad_partial_kernel(float* partial, const floatX* dout, int N, int OC, int vec) {
    __shared__ float lane_sum[BIASGRAD_LANES][BIASGRAD_COLS * PACK_X];
    int W = vec ? PACK_X : 1;
    int c0 = (blockIdx.x * BIASGRAD_COLS + threadIdx.x) * W;
    int r0 = blockIdx.y * BIASGRAD_ROWS;
    int r1 = min(r0 + BIASGRAD_ROWS, N);
    float acc[PACK_X];
    for (int j = 0; j < PACK_X; j++) acc[j] = 0.0f;
    if (c0 < OC)
        for (int r = r0 + threadIdx.y; r < r1; r += BIASGRAD_LANES) {
            if (vec) {
                Packed128<floatX> d = load128(dout + (int64_t)r * OC + c0);
                for (int j = 0; j < PACK_X; j++) acc[j] += ld(d[j]);
            } else {
                acc[0] += ld(dout[(int64_t)r * OC + c0]);
            }
        }
    for (int j = 0; j < PACK_X; j++) if (j < W) lane_sum[threadIdx.y][threadIdx.x * W + j] = acc[j];
    __syncthreads(); // lane_sum is complete
    if (threadIdx.y == 0 && c0 < OC)
        for (int j = 0; j < PACK_X; j++) if (j < W) {
            float sum = 0.0f;
            for (int y = 0; y < BIASGRAD_LANES; y++) sum += lane_sum[y][threadIdx.x * W + j];
            partial[(int64_t)blockIdx.y * OC + c0 + j] = sum;
        }
}

// dbias[c] += sum over chunks (in order) of partial[chunk][c].
__global__ static void bias_grad_finish_kernel(float* dbias, const float* partial, int nchunks, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float sum = 0.0f;
    for (int y = 0; y < nchunks; y++) sum += partial[(int64_t)y * OC + c];
    dbias[c] += sum;
}

// dbias (OC) += column sums of dout (N, OC); partial sums in g_work (nchunks x OC floats).
static void cuda_bias_grad(float* dbias, const floatX* dout, int N, int OC) {
    int nchunks = (int)ceil_div(N, BIASGRAD_ROWS);
    if (N == 0 || OC == 0) return;
    if ((size_t)nchunks * OC > g_work_floats)
        die(1, "bias gradient: workspace too small for N=%d OC=%d (internal error)", N, OC);
    float* partial = g_work;
    int vec = OC % PACK_X == 0 && aligned16(dout);
    dim3 grid((unsigned)ceil_div(OC, BIASGRAD_COLS * (vec ? PACK_X : 1)), (unsigned)nchunks);
    dim3 block(BIASGRAD_COLS, BIASGRAD_LANES);
    bias_grad_partial_kernel<<<grid, block, 0, g_stream>>>(partial, dout, N, OC, vec);
    cudaCheck(cudaGetLastError());
    bias_grad_finish_kernel<<<(unsigned)ceil_div(OC, 256), 256, 0, g_stream>>>(dbias, partial, nchunks, OC);
    cudaCheck(cudaGetLastError());
}

static void cuda_matmul_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                                const floatX* bias, int N, int C, int OC) {
    // out^T (OC, N) = W (OC, C) @ inp^T (C, N) + bias; with GELU the GEMM writes pre, then out = gelu(pre)
    floatX* d = pre ? pre : out;
    cuda_gemm(1, 0, OC, N, C, weight, C, inp, C, d, OC, bias, 0);
    if (pre) cuda_gelu_forward(out, pre, (int64_t)N * OC);
}

static void cuda_matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                                 const floatX* inp, const floatX* weight, const floatX* pre_inp,
                                 int N, int C, int OC) {
    if (dinp) { // dinp^T (C, N) = W^T (C, OC) @ dout^T (OC, N), then dinp *= gelu'(pre_inp)
        cuda_gemm(0, 0, C, N, OC, weight, C, dout, OC, dinp, C, NULL, 0);
        if (pre_inp) cuda_gelu_backward_inplace(dinp, pre_inp, (int64_t)N * C);
    }
    // dweight^T (C, OC) += inp^T (C, N) @ dout (N, OC)   (NULL: a frozen weight, LoRA's base)
    if (dweight) cuda_gemm(0, 1, C, OC, N, inp, C, dout, OC, dweight, C, NULL, 1);
    if (dbias && !FAULT(drop_bias_grad)) cuda_bias_grad(dbias, dout, N, OC);
}
#endif // __CUDACC__

// ----------------------------------------------------------------------------
// Dispatchers.

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias; if pre != NULL: pre = that, out = gelu(pre).
static void op_matmul_forward(floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, int OC) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_matmul_forward(out, pre, inp, weight, bias, N, C, OC); return; }
#endif
    GemmOut o = {pre ? EPI_STORE_X_GELU : EPI_STORE_X, out, NULL, pre, bias};
    // B (K=C, N=OC) element (c, o) = weight[o*C + c]
    cpu_matmul(N, OC, C, inp, C, 1, weight, 1, C, &o);
}

// Backward of op_matmul_forward. dinp may be NULL (nothing upstream needs it), and dweight (a frozen
// weight: nothing computed); pre_inp is the GELU
// pre-activation of *inp* (when inp = gelu(pre_inp), fusing that GELU's backward), else NULL.
static void op_matmul_backward(floatX* dinp, float* dweight, float* dbias, const floatX* dout,
                               const floatX* inp, const floatX* weight, const floatX* pre_inp,
                               int N, int C, int OC) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cuda_matmul_backward(dinp, dweight, dbias, dout, inp, weight, pre_inp, N, C, OC);
        return;
    }
#endif
    if (dinp) { // dinp (N, C) = dout (N, OC) @ weight (OC, C)
        GemmOut o = {pre_inp ? EPI_STORE_X_DGELU : EPI_STORE_X, dinp, NULL, (floatX*)pre_inp, NULL};
        cpu_matmul(N, C, OC, dout, OC, 1, weight, C, 1, &o);
    }
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)   (NULL: a frozen weight, LoRA's base)
    GemmOut w = {EPI_ACCUM_F32, NULL, dweight, NULL, NULL};
    if (dweight) cpu_matmul(OC, C, N, dout, 1, OC, inp, C, 1, &w);
    if (dbias && !FAULT(drop_bias_grad)) cpu_bias_grad(dbias, dout, N, OC);
}

// out = gelu(pre), elementwise; used to recompute the GELU output in backward (-r >= 1).
static void op_gelu_forward(floatX* out, const floatX* pre, int64_t n) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cuda_gelu_forward(out, pre, n); return; }
#endif
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) out[i] = rn(gelu_fwd(ld(pre[i])));
}

#endif // ZT_OPS_MATMUL_CUH
