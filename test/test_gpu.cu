// test/test_gpu.cu — the CUDA device against the CPU device, op by op, and then the whole model.
// Built with nvcc (make test-gpu); run on a machine with a GPU by dev/gpu_check.sh; `test/test_gpu
// --bench` times the memory-bound kernels instead (test/gpu_bench.h; dev/perf_gpu.sh runs it). `make test`
// checks that it compiles with nvcc, and runs it on the CPU as test/test_emu: the same sources,
// compiled by g++ with -DZT_CUDA_EMU against a CPU emulation of the CUDA subset they use
// (test/cuda_emu/), with the big shapes reduced (GPU_BIG below).
//
// Each case makes random inputs on the host, runs the op once on the CPU device (host buffers)
// and once on the CUDA device (copies on the GPU), and compares the outputs by ||a-b||/||b||
// against the tolerances in test/tolerances.h (TOL_GPU_*). The CPU op is the reference: it is the
// one checked against float64 finite differences and PyTorch by the CPU suite.
#ifndef TESTING
#define TESTING
#endif
#define ZT_GPU_SUITE       // test_model.h's cases run with -device cuda
#include "../train_gpt.cu" // defines: the whole trainer (train_main instead of main), every op
#include "test.h"          // defines: TEST, CHECK, test_run_all
#include "tolerances.h"    // defines: TOL_GPU_*
#include "fixture.h"       // defines: Fixture (the PyTorch reference)

// ---- helpers shared by the gpu_*.h case files (not every file uses every helper)
#pragma nv_diag_suppress 177 // "declared but never referenced"

static float* g_work_cpu = NULL; // host scratch for the CPU side of a comparison
static float* g_work_gpu = NULL; // device scratch for the CUDA side
#define GPU_WORK_FLOATS ((size_t)1 << 24)

// A size that is `full` on a GPU and `emulated` under the CPU emulator, where the largest cases
// would take minutes: only row counts (N = B*T, heads) shrink; the long dimensions (C, 3C, 4C,
// Vp, V, T = 1024) and every kind of case stay.
#ifdef ZT_CUDA_EMU
#define GPU_BIG(full, emulated) (emulated)
#else
#define GPU_BIG(full, emulated) (full)
#endif

// Run a statement on the CPU device (host pointers, host scratch), then switch back to CUDA.
#define ON_CPU(stmt)                                                   \
    do {                                                               \
        g_device = DEV_CPU; g_work = g_work_cpu;                       \
        stmt;                                                          \
        g_device = DEV_CUDA; g_work = g_work_gpu;                      \
    } while (0)
// Run a statement on the CUDA device and wait for it.
#define ON_GPU(stmt)                                                   \
    do {                                                               \
        g_device = DEV_CUDA; g_work = g_work_gpu;                      \
        stmt;                                                          \
        cudaCheck(cudaStreamSynchronize(g_stream));                    \
    } while (0)

// Copies and fills go through g_stream, the stream the ops run on, and wait for it. (Plain
// cudaMemcpy / cudaMemset use the legacy default stream, which g_stream, created non-blocking, does
// not wait for: a cudaMemset just before an op may land after it, and a host-to-device cudaMemcpy
// from pageable memory may return before its data is on the device.)
static inline void gpu_upload(void* dev, const void* host, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g_stream));
    cudaCheck(cudaStreamSynchronize(g_stream));
}
static inline void gpu_fill(void* dev, int byte, size_t bytes) {
    cudaCheck(cudaMemsetAsync(dev, byte, bytes, g_stream));
    cudaCheck(cudaStreamSynchronize(g_stream));
}
static inline void gpu_to_host(void* host, const void* dev, size_t bytes) {
    cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, g_stream));
    cudaCheck(cudaStreamSynchronize(g_stream));
}
static inline void* gpu_copy_of(const void* host, size_t bytes) {
    void* d = NULL;
    cudaCheck(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    gpu_upload(d, host, bytes);
    return d;
}
static inline void* gpu_zeros(size_t bytes) {
    void* d = NULL;
    cudaCheck(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    gpu_fill(d, 0, bytes);
    return d;
}
// Device memory filled with 0xFF bytes (NaN in every float type), for "=" outputs: an element a
// kernel forgets to write, or adds to instead of writing, then fails the comparison.
static inline void* gpu_nans(size_t bytes) {
    void* d = NULL;
    cudaCheck(cudaMalloc(&d, bytes > 0 ? bytes : 1));
    gpu_fill(d, 0xFF, bytes);
    return d;
}

static inline void rand_x(floatX* x, int64_t n, double scale, uint64_t seed) {
    uint64_t key = rng_key(seed, 0x475055ull, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = rn((float)(scale * rng_normal(key, (uint64_t)i)));
}
static inline void rand_f(float* x, int64_t n, double scale, uint64_t seed) {
    uint64_t key = rng_key(seed, 0x475055ull, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(key, (uint64_t)i));
}

// ||a - b|| / ||b|| over n elements; a from the GPU, b the CPU reference.
static inline double relerr_x(const floatX* a, const floatX* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { double d = (double)ld(a[i]) - ld(b[i]); num += d * d; den += (double)ld(b[i]) * ld(b[i]); }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static inline double relerr_f(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { double d = (double)a[i] - b[i]; num += d * d; den += (double)b[i] * b[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// Print one comparison line in the format dev/gpu_check.sh collects, and check it.
#define GPU_COMPARE(what, err, tol)                                                          \
    do {                                                                                     \
        double e_ = (err);                                                                   \
        printf("    %-40s rel err %.3e (tol %.1e) %s\n", what, e_, (double)(tol), e_ < (tol) ? "ok" : "FAIL"); \
        CHECKF(e_ < (tol), "%s: %.3e", what, e_);                                            \
    } while (0)

#include "gpu_ops.h"    // cases: every op, GPU vs CPU
#include "test_model.h" // cases: the whole model on the GPU against PyTorch, recompute and ZeRO-0..3
                        // bitwise at one rank (poisoned, delayed collectives), export
#include "gpu_multirank.h" // cases: several ranks on the CUDA device (mpirun, the emulator's NCCL)
#include "gpu_launch.h"    // cases: several ranks without MPI (dev/launch.sh, the TCP rendezvous)
#if defined(USE_MPI) && defined(USE_NCCL)
#include "test_offload.h"  // cases: -offload cpu on the CUDA device bit-identical to none (copies on their own stream)
#include "test_tune.h"     // cases: -tune's communication-wait column on the CUDA device (events around each wait)
#endif
#include "gpu_attention_model.h" // cases: the tensor-core attention through the model, -r 0..3 and -z 0..3 bitwise
#include "test_llama.h"           // cases: the Llama family on the CUDA device: gradients vs float64, -r 0..3 bitwise
#include "test_packing.h"         // cases: packed examples isolated on the CUDA device: each as alone (scalar and tensor-core attention)

#ifdef ZT_CUDA_EMU
// nvcc's registers and shared memory per kernel (sm_90: the Makefile generates the table from the nvcc
// build of the carried binaries), checked at every emulated launch (cuda_emu.h: check_resources)
#define EMU_KERNEL_RESOURCES(kernel, name, regs, smem, stack, spill_st, spill_ld) \
    {(const void*)(kernel), name, regs, smem, stack, spill_st, spill_ld},
static const emu::KernelResources g_kernel_resources[] = {
#ifdef ZT_KERNEL_RESOURCES
#include ZT_KERNEL_RESOURCES
#endif
    {NULL, NULL, 0, 0, 0, 0, 0}};
static const int g_kernel_resources_n =
    emu::register_kernel_resources(g_kernel_resources, sizeof(g_kernel_resources) / sizeof(g_kernel_resources[0]));
#include "gpu_resources.h" // cases: the resource table itself (no spills, occupancy of the tensor-core kernels)
#endif

// On a GPU the cases run in this process, one after another (a CUDA context does not survive a fork);
// on the emulator, which holds no threads, each in its own forked process, several at once (test.h).
#ifdef ZT_CUDA_EMU
#define GPU_CASE_JOBS 0
#else
#define GPU_CASE_JOBS 1
#endif
static int gpu_main(int argc, char** argv) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("no usable GPU: test_gpu needs one (cudaGetDeviceCount: %s)\n0 passed, 1 failed\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 1;
    }
    setenv("ZT_VERBOSE", "1", 0); // every trainer the cases start prints the full start-up they read
    ssize_t len = readlink("/proc/self/exe", g_test_self, sizeof(g_test_self) - 1);
    if (len > 0) g_test_self[len] = 0;
    cuda_init(0);
    printf("GPU: %s (sm_%d%d), %.1f GiB\n", g_cuda_prop.name, g_cuda_prop.major, g_cuda_prop.minor,
           g_cuda_prop.totalGlobalMem / 1073741824.0);
    g_work_cpu = (float*)calloc(GPU_WORK_FLOATS, sizeof(float));
    cudaCheck(cudaMalloc(&g_work_gpu, GPU_WORK_FLOATS * sizeof(float)));
    g_work_floats = GPU_WORK_FLOATS;
    g_device = DEV_CUDA;
    g_work = g_work_gpu;
    int rc = argc > 1 && !strcmp(argv[1], "--bench") ? (gpu_bench(GPU_BIG(16384, 64), 50257, GPU_BIG(20, 1)) != 0)
                                                      : test_run_all_jobs(argc > 1 ? argv[1] : NULL, GPU_CASE_JOBS);
    comm_finalize();
    return rc;
}

#ifdef ENABLE_FP32
// The FP32 build's cases that repeat what the BF16 build checks the same way: -tune's events and the
// host waits of a step hold no floatX; several ranks, the launch without MPI, offload, the stages at
// one rank and the uploads ahead of the GPU compare runs bit for bit (identity, in either precision)
// or check what happens around the arithmetic. make test-long runs them here too (BIN --long-only;
// see test_long_only in test.h).
static const char* const g_fp32_long_only[] = {"tune_emu_", "emu_host_syncs", "multirank_", "nompi_", "offload_emu_",
                                               "zero_stages_one_rank_bitwise", "gpu_uploads_ahead_of_the_gpu",
                                               "gpu_attention_cudnn_flag", // (-attn's refusal and fallback: no floatX)
                                               NULL};
#endif

int main(int argc, char** argv) {
    if (argc > 1 && !strcmp(argv[1], "--train")) return train_main(argc - 1, argv + 1);
#ifdef ENABLE_FP32
    test_long_only(g_fp32_long_only);
#endif
    return gpu_main(argc, argv);
}
