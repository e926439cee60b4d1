// device.cuh — what both devices share: the storage type floatX, BF16 bit conversions, error
// checks, and the first of the three device seams: tagged memory.
//
// zerotrain compiles two ways: with nvcc (CPU and CUDA devices) and with g++ as plain C++ (CPU
// device only). Everything CUDA sits behind `#ifdef __CUDACC__`. The BF16 type is our own
// 16-bit struct on the host so the g++ build needs no CUDA headers; CUDA kernels reinterpret
// the same bytes as __nv_bfloat16.
//
// Memory seam: every buffer is allocated with dev_alloc(tag, bytes). The tag says what the bytes
// are for (parameters, gradients, master weights, Adam moments, activations, ...); the per-tag
// totals are what the start-up memory table prints and what the tests compare against the
// closed form. On the CPU device "device memory" is 256-byte aligned host memory.
//
// defines: floatX, bf16_t, ld/rn (load/round to storage), Device, g_device, TAG_*, dev_alloc,
//          dev_free, dev_zero, dev_fill_u16, dev_to_host, dev_from_host, dev_upload, die/die_user, printf0
//
// May call: the C library, OpenMP and, in the nvcc build, the CUDA runtime; nothing of ours (the
// bottom of the include tree).
#ifndef ZT_DEVICE_CUH
#define ZT_DEVICE_CUH

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <stdarg.h>
#include <pthread.h>
#include <unistd.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#endif
#include "rng.h" // defines: ZT_HD, rng_key, rng_u64, rng_normal

#define ZT_VERSION "0.1.0"

// ----------------------------------------------------------------------------
// Precision. One storage type for parameters, activations and activation gradients:
// BF16 by default, FP32 with `make PRECISION=FP32`. Everything is computed and accumulated in
// FP32; weight gradients, master weights and Adam moments are always FP32 (see zero.h's dtype
// table). The storage rounding is round-to-nearest-even on both devices.

typedef struct { uint16_t bits; } bf16_t;

ZT_HD static inline float bf16_to_f32(bf16_t h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
ZT_HD static inline bf16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    bf16_t h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { h.bits = (uint16_t)((u >> 16) | 0x40); return h; } // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                                           // nearest, ties to even
    h.bits = (uint16_t)(u >> 16);
    return h;
}

#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "FP32"
ZT_HD static inline float ld(floatX x) { return x; }
ZT_HD static inline floatX rn(float x) { return x; }
#else
typedef bf16_t floatX;
#define PRECISION_NAME "BF16"
ZT_HD static inline float ld(floatX x) { return bf16_to_f32(x); }
ZT_HD static inline floatX rn(float x) { return f32_to_bf16(x); }
#endif

// ----------------------------------------------------------------------------
// Errors. Two kinds: a user's mistake (bad flag, bad file: exit code 2, one line saying what to
// do) and a failure at run time (exit code 1). Both print the rank when there is more than one.
// The comm layer installs g_abort_hook so that one rank's failure ends every rank.

static int g_rank = 0, g_world = 1;         // set by the launcher (zero.h) before anything else
static void (*g_abort_hook)(int code) = NULL; // ends every rank (MPI_Abort) when there are several
static void (*g_finalize_hook)(void) = NULL;  // a single process's clean exit (MPI_Finalize)

static char g_die_msg[512];                   // the last die() message (the rendezvous sends it to the other ranks)

// Once per process: a second thread that fails while the first is ending the process (the NCCL
// watchdog and the main thread both see the same dead peer) waits for that exit instead of racing
// it (two exit() calls at once are undefined, and the exit code would be whichever came last), and
// prints nothing: one message per rank.
static void zt_exit_claim(void) {
    static int exiting = 0;
    static __thread int this_thread_exits = 0; // (the fuzzer's hook longjmps back: then this thread comes again)
    if (this_thread_exits) return;
    if (__atomic_exchange_n(&exiting, 1, __ATOMIC_SEQ_CST))
        for (;;) pause(); // another thread is ending the process
    this_thread_exits = 1;
}

static void zt_exit(int code) {
    zt_exit_claim();
    fflush(stdout);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(code);
    if (g_finalize_hook) g_finalize_hook();
    exit(code);
}

__attribute__((format(printf, 2, 3))) static void die(int code, const char* fmt, ...) {
    zt_exit_claim();
    char line[8192]; // one write: ranks sharing a terminal do not interleave their lines
    int n = g_world > 1 ? snprintf(line, sizeof(line), "[rank %d] error: ", g_rank) : snprintf(line, sizeof(line), "error: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    snprintf(g_die_msg, sizeof(g_die_msg), "%s", line + n);
    fprintf(stderr, "%s\n", line);
    zt_exit(code);
}
#define die_user(...) die(2, __VA_ARGS__)

// printf on rank 0 only (the human-readable log).
__attribute__((format(printf, 1, 2))) static void printf0(const char* fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

#define CHECK_IO(cond, path, what)                                                              \
    do {                                                                                        \
        if (!(cond)) die(1, "%s: %s failed (%s) at %s:%d. HINT: check the path, free disk space " \
                            "and permissions", (path), (what), strerror(errno), __FILE__, __LINE__); \
    } while (0)

#ifdef __CUDACC__
#define cudaCheck(expr)                                                                          \
    do {                                                                                         \
        cudaError_t err_ = (expr);                                                               \
        if (err_ != cudaSuccess)                                                                 \
            die(1, "CUDA error at %s:%d: %s -> %s. HINT: run compute-sanitizer ./train ... to "   \
                   "locate it", __FILE__, __LINE__, #expr, cudaGetErrorString(err_));            \
    } while (0)
#endif

ZT_HD static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
ZT_HD static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Fault injection for the test suite only: a test flips one of these to prove that the checks
// around an op can fail (e.g. a backward that drops the bias gradient). Always 0 in the program.
#ifdef TESTING
static int g_fault_drop_bias_grad = 0;
#define FAULT(name) (g_fault_##name)
#else
#define FAULT(name) 0
#endif

// ----------------------------------------------------------------------------
// Devices.

typedef enum { DEV_CPU = 0, DEV_CUDA = 1 } Device;
static Device g_device = DEV_CPU;

#ifdef __CUDACC__
// The CUDA side of an op that has no kernel yet. Called by a dispatcher; never silent.
static void cuda_not_yet(const char* op) {
    die(1, "op %s has no CUDA kernel yet in this version. HINT: run with -device cpu", op);
}

#define cublasCheck(expr)                                                                        \
    do {                                                                                         \
        cublasStatus_t st_ = (expr);                                                             \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
            die(1, "cuBLAS error %d at %s:%d: %s. HINT: check the shapes and the CUDA/cuBLAS "   \
                   "versions (nvidia-smi, nvcc --version)", (int)st_, __FILE__, __LINE__, #expr); \
    } while (0)

// The CUDA device's fixed state, made once by cuda_init. Every kernel and every copy of a step
// runs on g_stream (the NCCL backend in zero.h has its own stream, ordered by events); kernels are
// launched as  kernel<<<grid, block, smem, g_stream>>>(...); cudaCheck(cudaGetLastError());
// cuBLASLt's workspace is the ops' workspace g_work (one stream: its users never overlap).
static cudaStream_t g_stream = 0;
static cublasLtHandle_t g_cublaslt = NULL;
static cudaDeviceProp g_cuda_prop;
static cudaEvent_t g_readback = NULL; // recorded after a read-back copy (dev_to_host_async)
static int g_cuda_device = 0;         // this rank's GPU: every other thread that calls CUDA sets it first (cudaSetDevice)

// Whether an NVIDIA driver exposes a GPU to this process, asked without starting the CUDA runtime
// (starting it costs 0.1 s warm, seconds cold; on a machine without the driver the toolkit's stub
// answers cudaErrorInsufficientDriver, which reads as "update the driver" though there is no GPU):
// the driver's device files, /dev/nvidiactl or /dev/nvidia0 (containers get them passed in), or
// WSL2's /dev/dxg. None of them: no GPU, and nothing to say about it. (The emulator has its GPUs.)
static int gpu_device_files_present(void) {
#ifdef ZT_CUDA_EMU
    return 1;
#else
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
#endif
}

// The GPUs this process sees: their number, or 0 and why not in `why` (NULL when the count is
// simply 0, or when the machine has no NVIDIA device files: then the runtime is never started): cudaGetDeviceCount fails for reasons a user must see, not only "no GPU" (a driver
// older than this build's CUDA, a driver not loaded, CUDA_VISIBLE_DEVICES naming none).
static int cuda_device_count(const char** why) {
    int n = 0;
    *why = NULL;
    if (!gpu_device_files_present()) return 0; // no GPU: the runtime is not started (nor its stub's "old driver")
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n;
    (void)cudaGetLastError(); // (the error is sticky for cudaGetLastError: clear it)
    *why = e == cudaErrorNoDevice ? NULL
         : e == cudaErrorInsufficientDriver ? "the NVIDIA driver is older than this build's CUDA needs (cudaErrorInsufficientDriver). "
                                              "HINT: update the driver (nvidia-smi shows its CUDA version), or build with an older toolkit"
         : cudaGetErrorString(e);
    return 0;
}

// Pick this rank's GPU (local rank modulo the GPUs seen), create the stream and the cuBLASLt handle.
static void cuda_init(int local_rank) {
    if (g_cublaslt) return; // once per process (the GPU test program starts several trainers)
    int n = 0;
    cudaCheck(cudaGetDeviceCount(&n));
    g_cuda_device = local_rank % n;
    cudaCheck(cudaSetDevice(g_cuda_device));
    cudaCheck(cudaGetDeviceProperties(&g_cuda_prop, g_cuda_device));
    cudaCheck(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&g_readback, cudaEventDisableTiming));
    cublasCheck(cublasLtCreate(&g_cublaslt));
}
#endif

// ----------------------------------------------------------------------------
// Memory seam: tagged allocations. The tags are the rows of the memory table: X(tag, name, what).

#define MEM_TAGS(X)                                                             \
    X(TAG_PARAMS,    "params",      "BF16 parameters: full copy or this rank's shard")  \
    X(TAG_PARAM_BUF, "param bufs",  "[ZeRO-3] gathered io block + two layer blocks; [QLoRA] one layer dequantized to BF16") \
    X(TAG_GRADS,     "grads",       "FP32 gradients: full (ZeRO-0/1) or shard (2/3)")   \
    X(TAG_GRAD_BUF,  "grad bufs",   "[ZeRO-2/3] FP32 io block + two layer blocks")      \
    X(TAG_MASTER,    "master",      "FP32 master weights")                              \
    X(TAG_ADAM_M,    "adam m",      "FP32 first moment")                                \
    X(TAG_ADAM_V,    "adam v",      "FP32 second moment")                               \
    X(TAG_ACTS,      "activations", "kept for backward, per micro-batch")               \
    X(TAG_LOGITS,    "logits",      "one classifier chunk of logits / their gradient")  \
    X(TAG_COMM,      "comm",        "collective staging buffers")                       \
    X(TAG_WORK,      "workspace",   "op scratch")

typedef enum {
#define X(tag, name, what) tag,
    MEM_TAGS(X)
#undef X
    TAG_COUNT
} MemTag;

static const char* mem_tag_name[TAG_COUNT] = {
#define X(tag, name, what) name,
    MEM_TAGS(X)
#undef X
};

static size_t g_mem_bytes[TAG_COUNT]; // live bytes per tag
static size_t g_mem_peak;             // the most bytes live at once, all tags together, since start or mem_peak_reset (-tune)

static void mem_peak_note(void) {
    size_t live = 0;
    for (int t = 0; t < TAG_COUNT; t++) live += g_mem_bytes[t];
    if (live > g_mem_peak) g_mem_peak = live;
}
static void mem_peak_reset(void) { g_mem_peak = 0; mem_peak_note(); }

#define DEV_ALIGN 256

static void* dev_alloc(MemTag tag, size_t bytes) {
    void* p = NULL;
    if (bytes == 0) return NULL;
    size_t rounded = (bytes + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaError_t e = cudaMalloc(&p, rounded);
        if (e != cudaSuccess)
            die(1, "out of GPU memory allocating %.1f MiB for %s (%s). HINT: run ./train -plan with "
                   "the same flags, then raise -z, lower -b or use -r", bytes / 1048576.0,
                mem_tag_name[tag], cudaGetErrorString(e));
        cudaCheck(cudaMemsetAsync(p, 0, rounded, g_stream));
        cudaCheck(cudaStreamSynchronize(g_stream));
        g_mem_bytes[tag] += bytes;
        mem_peak_note();
        return p;
    }
#endif
    p = aligned_alloc(DEV_ALIGN, rounded);
    if (!p)
        die(1, "out of memory allocating %.1f MiB for %s. HINT: run ./train -plan with the same "
               "flags, then raise -z, lower -b or use -r", bytes / 1048576.0, mem_tag_name[tag]);
    memset(p, 0, rounded);
    g_mem_bytes[tag] += bytes;
    mem_peak_note();
    return p;
}

static void dev_free(MemTag tag, void* p, size_t bytes) {
    if (!p) return;
    g_mem_bytes[tag] -= bytes;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaFree(p)); return; }
#endif
    free(p);
}

static void dev_zero(void* p, size_t bytes) {
    if (!p || !bytes) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaMemsetAsync(p, 0, bytes, g_stream)); return; }
#endif
    memset(p, 0, bytes);
}

// Fill with a repeated 16- or 32-bit pattern (used to poison released buffers with NaN).
#ifdef __CUDACC__
__global__ static void fill_u16_kernel(uint16_t* p, uint16_t pattern, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) p[i] = pattern;
}
#endif
static void dev_fill_u16(void* p, uint16_t pattern, size_t count) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        fill_u16_kernel<<<(unsigned)ceil_div((int64_t)count, 256), 256, 0, g_stream>>>((uint16_t*)p, pattern, count);
        cudaCheck(cudaGetLastError());
        return;
    }
#endif
    uint16_t* q = (uint16_t*)p;
    for (size_t i = 0; i < count; i++) q[i] = pattern;
}

// Device to host: waits for the stream first (the result is needed now). Not used inside a step on
// one GPU (train_step reads its scalars back a step late: dev_to_host_async).
static void dev_to_host(void* host, const void* dev, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, g_stream));
        cudaCheck(cudaStreamSynchronize(g_stream));
        return;
    }
#endif
    memcpy(host, dev, bytes);
}
// Host to device, in stream order. From pageable memory cudaMemcpyAsync returns once the driver has
// staged the bytes (so the buffer may be reused at once), which may wait for the stream: a possible
// host wait (for uploads inside a step use dev_upload). From page-locked memory (host_pinned_alloc)
// the copy reads the source when the stream reaches it: the source must not change until an event
// or a synchronisation says the copy is done.
static void dev_from_host(void* dev, const void* host, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g_stream)); return; }
#endif
    memcpy(dev, host, bytes);
}

// Reading back without waiting: dev_to_host_async copies into page-locked host memory
// (host_pinned_alloc) in stream order and records an event; dev_read_wait waits for the last such
// copy (the host's one wait per step on a GPU). On the CPU device: a plain copy, nothing to wait for.
static void* host_pinned_alloc(size_t bytes) {
    void* p = NULL;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaMallocHost(&p, bytes)); memset(p, 0, bytes); return p; }
#endif
    p = calloc(1, bytes);
    if (!p) die(1, "out of host memory (%zu bytes)", bytes);
    return p;
}
static void host_pinned_free(void* p) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaFreeHost(p)); return; }
#endif
    free(p);
}
static void dev_to_host_async(void* pinned, const void* dev, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, g_stream));
        cudaCheck(cudaEventRecord(g_readback, g_stream));
        return;
    }
#endif
    memcpy(pinned, dev, bytes);
}
static void dev_read_wait(void) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) cudaCheck(cudaEventSynchronize(g_readback));
#endif
}

// Uploads inside a step (the tokens of every micro-batch) without a host wait: the bytes go into
// the next of UPLOAD_SLOTS page-locked slots, then to the device in stream order; an event after the
// copy says when the slot is free again. The host waits only when it is UPLOAD_SLOTS uploads ahead of
// the GPU (then the GPU is the bottleneck and the wait costs nothing). The slots are allocated at start-up
// (dev_upload_reserve, with the model's buffers: no allocation in a step) and grown, after a wait,
// only for an upload larger than reserved; the CPU device copies directly.
#define UPLOAD_SLOTS 8
#ifdef __CUDACC__
typedef struct {
    unsigned char* pinned;            // (UPLOAD_SLOTS * slot) bytes, page-locked
    size_t slot;                      // bytes per slot
    int next;                         // the slot the next upload takes
    int issued[UPLOAD_SLOTS];         // the slot's copy was issued and its event recorded
    cudaEvent_t done[UPLOAD_SLOTS];   // recorded on g_stream after the slot's copy
} Uploads;
static Uploads g_uploads;
static void* host_pinned_alloc(size_t bytes);
static void host_pinned_free(void* p);
#endif
// Slots of at least `bytes` each (start-up: B*T token ids); a no-op when they are that large already.
static void dev_upload_reserve(size_t bytes) {
#ifdef __CUDACC__
    Uploads* u = &g_uploads;
    if (g_device != DEV_CUDA || bytes <= u->slot) return;
    for (int k = 0; k < UPLOAD_SLOTS; k++)
        if (u->issued[k]) { cudaCheck(cudaEventSynchronize(u->done[k])); u->issued[k] = 0; }
    if (u->pinned) host_pinned_free(u->pinned);
    else for (int k = 0; k < UPLOAD_SLOTS; k++) cudaCheck(cudaEventCreateWithFlags(&u->done[k], cudaEventDisableTiming));
    u->slot = (bytes + 255) / 256 * 256;
    u->pinned = (unsigned char*)host_pinned_alloc(UPLOAD_SLOTS * u->slot);
#else
    (void)bytes;
#endif
}
static void dev_upload(void* dev, const void* host, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        Uploads* u = &g_uploads;
        dev_upload_reserve(bytes); // (nothing after start-up: reserved there for B*T)
        int k = u->next;
        u->next = (k + 1) % UPLOAD_SLOTS;
        if (u->issued[k]) { // free unless the GPU is UPLOAD_SLOTS uploads behind
            cudaError_t q = cudaEventQuery(u->done[k]);
            if (q == cudaErrorNotReady) {   // not a failure: the GPU is behind. But the runtime also keeps it as
                (void)cudaGetLastError();   // this thread's last error, which the next launch's check would report
                q = cudaEventSynchronize(u->done[k]); // ("device not ready"): cleared, as PyTorch does here; then wait
            }
            cudaCheck(q);
        }
        unsigned char* src = u->pinned + (size_t)k * u->slot;
        memcpy(src, host, bytes);
        cudaCheck(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, g_stream));
        cudaCheck(cudaEventRecord(u->done[k], g_stream));
        u->issued[k] = 1;
        return;
    }
#endif
    memcpy(dev, host, bytes);
}

// The ops' fixed scratch space, allocated once at start-up (TAG_WORK) by ops_workspace_init();
// no op allocates. Its size is a closed form of the model and batch shapes (ops_workspace_floats).
static float* g_work = NULL;
static size_t g_work_floats = 0;

// ----------------------------------------------------------------------------
// Small helpers.


// Threads used by the CPU ops. Results never depend on it (see ops/): only speed does.
static inline int num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// (fnv1a, FNV_INIT: rng.h, beside the other hashing, so that dataloader.h has it too)

#endif // ZT_DEVICE_CUH
