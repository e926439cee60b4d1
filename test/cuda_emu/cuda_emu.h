// test/cuda_emu/cuda_emu.h — the CUDA subset zerotrain uses, emulated on the CPU, so that the real
// kernels and the real CUDA host code (ops/*.cuh, adamw.cuh, zero.h, device.cuh, train_gpt.cu) run in
// `make test` on a machine without a GPU, inside the real GPU test program (test/test_gpu.cu).
//
// HOW (see test/cuda_emu/emulate.py for the build side):
//   sources   emulate.py copies the sources into build/emu/ with mechanical rewrites only (kernel
//             launches, __shared__ declarations, the `__CUDACC__` guard renamed ZT_CUDA_EMU), keeping
//             every line where it was; g++ compiles the copies against this header (include/ holds the
//             cuda_runtime.h, cuda_bf16.h, cublasLt.h and cub/ headers the sources ask for).
//   threads   every CUDA thread of a block is a fiber (its own stack) in one OS thread. A fiber runs
//             until it reaches __syncthreads, __syncwarp or a shuffle, or returns; when every thread of
//             the block (of the warp) waits at that same call, all go on. One warp at a time runs as
//             far as it can (through its shuffles) before the next starts, lane after lane: warps
//             drift apart as far as a GPU lets them. The order is block 0, warp 0, lane 0 first in
//             a kernel's even-numbered launches and the reverse in its odd ones, so a missing barrier
//             (a thread reading shared memory another has not written yet, or overwriting what
//             another has not read yet) gives wrong results, and a race between blocks gives
//             different bits when a test runs an op twice. OpenMP threads take whole blocks.
//   memory    device memory is host memory (mmap), with inaccessible guard pages on both sides,
//             filled with 0xFF bytes (NaN in every float type) by cudaMalloc, so that reading memory
//             nobody wrote shows up as NaN. Outside CUDA calls it is inaccessible (PROT_NONE): host
//             code that dereferences a device pointer stops with a message, as it would crash on a
//             GPU. Shared memory is refilled with 0xFF for every block; dynamic shared memory ends
//             at a guard page.
//   streams   synchronous: a launch, copy or memset runs to completion when it is issued, so stream
//             order, events and cross-stream waits are respected trivially; what is checked is
//             that nothing relies on the legacy default stream and a non-blocking stream waiting
//             for each other, and, with vector clocks through events, that no stream touches a
//             range a collective or copy on another stream may still be writing, and that no
//             collective or copy overwrites a range another stream may still use (a kernel's use:
//             its whole allocation) (see "Streams and events" below).
//   NCCL      fake_nccl.h: the collectives between emulated ranks that are real processes (mpirun),
//             through shared memory; a collective runs when its stream reaches it (at issue).
//   numerics  kernels (__global__, __device__) are compiled with FMA contraction on, as nvcc does
//             (--fmad=true), host code with it off, as the Makefile asks; the IEEE intrinsics
//             (__fadd_rn, __fmul_rn, ...) are correctly rounded host operations that are never
//             contracted, which is what they are on the GPU. expf, logf, tanhf, coshf are the host's
//             libm. Subnormals are kept, as nvcc keeps them without -ftz.
//
// WHAT IT CHECKS (each stops the program with "cuda_emu: ..." naming the kernel, block and thread,
// or makes the CUDA call return the error a GPU would, after a line on stderr saying why):
//   - launch configurations: block and grid limits, __launch_bounds__, dynamic shared memory above
//     48 KiB without cudaFuncSetAttribute, shared memory above the device's limit; and, from nvcc's
//     own numbers (--resource-usage, sm_90), registers x threads over an SM's 65,536, static +
//     dynamic shared memory, parameter bytes (see check_resources);
//   - a runtime call from a thread that never set its device while the process uses GPU d > 0
//     (ZT_EMU_GPUS GPUs); in fake_nccl.h: two threads in one communicator, any call after an abort;
//   - asynchronous copies with page-locked host memory land when the host learns they are done (a
//     source changed before then stops the run); pageable ones count as possible host waits;
//   - shared arrays at exactly their declared alignment (16-byte accesses to an array declared
//     with less fail); cp.async landing at issue or at the wait, alternating per launch;
//   - kernel arguments that point outside device memory (host pointers, freed buffers);
//   - 16-byte vector accesses (uint4, int4, float4 copied from or into memory) at addresses that are
//     not 16-byte aligned;
//   - accesses past a device buffer by more than its 256-byte rounding, past dynamic shared memory,
//     of freed device memory (until the address is reused), of device memory from host code;
//   - __syncthreads reached by some threads of a block while others returned or wait at another
//     __syncthreads (undefined behaviour on a GPU: hangs or corrupts); shuffles and __syncwarp whose
//     mask names lanes that returned, that do not exist, or that wait elsewhere;
//   - cudaMemcpy/cudaMemset ranges that leave their allocation, copy kinds that contradict the
//     pointers, invalid streams and events, waits on events never recorded;
//   - a buffer written on the legacy default stream and used on a non-blocking stream (or the
//     reverse) before the host waited for the write.
//
//   - tensor-core instructions (mma.sync m16n8k16 BF16, ldmatrix x1/x2/x4 [.trans]) computed from
//     the PTX ISA's fragment layouts, with every lane of the warp required; cp.async copies land
//     at issue or at the cp.async.wait_group that covers them (NaN until then), per launch.
// WHAT IT CANNOT CHECK (the GPU session still has to):
//   - time on the device: cudaEventElapsedTime gives the host's time between the two records
//     (work runs when it is issued), so a stream's stall on another (cudaStreamWaitEvent) is ~0;
//   - real concurrency: streams never overlap here; a missing event between two non-blocking
//     streams is caught for collectives and copies (their ranges are known) and for kernel pointer
//     arguments inside such a range, not for two kernels on different streams; races between blocks
//     writing the same element show only as differing bits when an op runs twice; warps never
//     interleave inside a phase, so only the two orders above are tried;
//   - the GPU's own expf/logf/tanhf (within a few ulp of the host's), and which product nvcc chooses
//     to fuse into an FMA (g++ may choose another); ZT_HD functions (GELU, ...) are compiled once,
//     as host code, without contraction, where nvcc may contract their device copy;
//   - cuBLASLt's real algorithms, their summation orders, alignment rules and heuristic failures
//     (fake_cublaslt.h), CUB's real temporary-storage size (fake_cub.h), NCCL's real transports,
//     algorithms and summation orders (fake_nccl.h follows its documentation: a ring, a tree);
//   - a tensor core's own summation order inside mma (the emulator's is a documented model: see
//     "THE ACCUMULATION ORDER IS A MODEL"), and a cp.async that lands between its issue and its
//     wait (here at one end or the other: never a half-landed tile);
//   - performance, occupancy, bank conflicts, memory coalescing (registers and shared memory are
//     nvcc's numbers, checked against the limits: not how fast they run); out-of-bounds accesses
//     smaller than a buffer's 256-byte rounding, or between two live shared arrays; NCCL's own
//     buffers and connections (allocated lazily on a GPU), a real driver's pageable-copy stalls.
//
// Environment: ZT_EMU_ORDER=forward|reverse (default: alternate per kernel's launches),
// ZT_EMU_CP_ASYNC=issue|wait (default: alternate, every second launch), ZT_EMU_GPUS=n (GPUs, 1),
// ZT_EMU_DRIVER=old (cudaGetDeviceCount answers cudaErrorInsufficientDriver),
// ZT_EMU_SM=80 (an A100's 163 KiB of shared memory per block instead of an H100's 227 KiB),
// ZT_EMU_PROTECT=0 (leave device memory readable by host code), ZT_EMU_PROFILE=1 (seconds per
// kernel, printed at exit), ZT_EMU_STATS=1 (how often cudaEventQuery answered not-ready, at exit).
// The last error is per host thread, as CUDA keeps it; an event asked about work the host has not
// learnt is done answers cudaErrorNotReady once (the GPU behind), which is also the last error.
// Runs on x86-64 Linux (other CPUs: slower fibers through ucontext).
//
// defines: the CUDA runtime subset (cudaMalloc ... cudaGetErrorString), dim3, threadIdx, blockIdx,
//          blockDim, gridDim, __syncthreads, __syncwarp, __shfl_*_sync, the _rn intrinsics, atomicMax, clock64,
//          uint4/int4/float4 (alignment-checked) and make_uint4/make_int4/make_float4,
//          __nanosleep, min/max, __nv_bfloat16, emu_mma_m16n8k16_bf16, emu_ldmatrix, emu_cp_async(_commit,
//          _wait) (for ops/tensor_core.cuh); for emulate.py's rewrites: emu::launch, EMU_SHARED,
//          emu_dynamic_shared
#ifndef ZT_CUDA_EMU_H
#define ZT_CUDA_EMU_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <algorithm>
#include <atomic>
#include <map>
#include <string>
#include <set>
#include <tuple>
#include <vector>
#include <type_traits>
#include <utility>
#ifdef _OPENMP
#include <omp.h>
#endif
// Fibers switch stacks with a few lines of x86-64 assembly, elsewhere (or with -DZT_EMU_UCONTEXT,
// to test that path) with ucontext.
#if defined(__x86_64__) && !defined(ZT_EMU_UCONTEXT)
#define EMU_FIBERS_ASM 1
#else
#include <ucontext.h>
#endif

// ----------------------------------------------------------------------------
// Qualifiers. Kernels and device functions get nvcc's default FMA contraction; host code keeps the
// Makefile's -ffp-contract=off. (GCC honours this per function unless its tuning avoids FMA chains,
// which the Makefile turns off with --param=avoid-fma-max-bits=0.) ZT_HD functions, shared by
// both sides, are compiled once, as host code: the GPU may contract them where we do not.

#define EMU_DEVICE_CODE __attribute__((optimize("fp-contract=fast")))
#define __global__ EMU_DEVICE_CODE
#define __device__ EMU_DEVICE_CODE
#define __host__
#define EMU_HOST_DEVICE // emulate.py writes this for `__host__ __device__`
#define __forceinline__ inline
#define __launch_bounds__(...) // checked at the launch (emulate.py passes the bound there)

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
};

// ----------------------------------------------------------------------------
// Runtime types and error codes (the values are CUDA's).

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02

struct EmuStream;
struct EmuEvent;
typedef EmuStream* cudaStream_t;
typedef EmuEvent* cudaEvent_t;

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;      // static + dynamic without opting in (48 KiB)
    size_t sharedMemPerBlockOptin; // what cudaFuncSetAttribute may allow
    int major, minor;
    int multiProcessorCount;
    int maxThreadsPerBlock;
    int warpSize;
} cudaDeviceProp;

static const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    }
    return "unknown error";
}

namespace emu {

// ----------------------------------------------------------------------------
// Messages. fail(): a bug the GPU would crash, hang or corrupt on: stop here. note(): why a CUDA
// call is about to return an error (the caller's cudaCheck then stops with its own message).

struct Where { const char* kernel; uint3 block, thread; }; // set while a kernel runs on this OS thread
static thread_local Where* tl_where = nullptr;

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cuda_emu: ");
    if (tl_where)
        fprintf(stderr, "kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", tl_where->kernel, tl_where->block.x,
                tl_where->block.y, tl_where->block.z, tl_where->thread.x, tl_where->thread.y, tl_where->thread.z);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

__attribute__((format(printf, 2, 3))) static cudaError_t note(cudaError_t e, const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cuda_emu: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " -> %s\n", cudaGetErrorString(e));
    return e;
}

// ----------------------------------------------------------------------------
// The emulated device: an H100 (or, with ZT_EMU_SM=80, an A100's shared-memory limit).

static const size_t kPage = 4096;
static size_t g_mem_total = (size_t)80 << 30, g_mem_used = 0;

static const cudaDeviceProp& props() {
    static cudaDeviceProp p;
    static bool init = false;
    if (!init) {
        memset(&p, 0, sizeof(p));
        const char* sm = getenv("ZT_EMU_SM");
        int a100 = sm && !strcmp(sm, "80");
        snprintf(p.name, sizeof(p.name), "%s (cuda_emu: a CPU emulation)", a100 ? "NVIDIA A100-SXM4-80GB" : "NVIDIA H100 80GB HBM3");
        p.totalGlobalMem = g_mem_total;
        p.sharedMemPerBlock = 48 << 10;
        p.sharedMemPerBlockOptin = a100 ? 166912 : 232448; // 163 KiB, 227 KiB
        p.major = a100 ? 8 : 9;
        p.minor = 0;
        p.multiProcessorCount = a100 ? 108 : 132;
        p.maxThreadsPerBlock = 1024;
        p.warpSize = 32;
        init = true;
    }
    return p;
}

// ---- GPUs and host threads. ZT_EMU_GPUS=n (default 1) GPUs, all alike. Each OS thread has a current
// device, as in CUDA's runtime: GPU 0 until the thread calls cudaSetDevice. A runtime call from a
// thread that never set its device, in a process where another thread chose GPU d > 0, stops the run:
// on a GPU it would make a context on GPU 0 (~0.5 GiB of another rank's GPU) and act on the wrong device.
static int gpus() {
    static int n = 0;
    if (!n) { const char* e = getenv("ZT_EMU_GPUS"); n = e && atoi(e) > 0 ? (atoi(e) < 16 ? atoi(e) : 16) : 1; }
    return n;
}
static thread_local int tl_device = -1;     // cudaSetDevice on this thread (-1: never: GPU 0)
static std::atomic<int> g_chosen_device{0}; // the GPU > 0 a thread of this process chose (0: none)
static void context_check(const char* call) {
    int d = g_chosen_device.load();
    if (tl_device < 0 && d > 0)
        fail("%s from a thread that never called cudaSetDevice, while this process uses GPU %d: on a GPU this thread "
             "works on GPU 0 (its first call makes a context there, ~0.5 GiB of another rank's GPU). HINT: "
             "cudaSetDevice(%d) first in every thread that calls CUDA", call, d, d);
}

// ----------------------------------------------------------------------------
// Device memory. Each cudaMalloc is its own mapping: [guard page][data, ending 256-byte aligned just
// below the last page boundary][guard page]. The data pages are PROT_NONE while host code runs. In
// "device mode" (kernels, copies, memsets, the fake libraries; nested) the first touch of an
// allocation faults, and the SIGSEGV handler opens that allocation (checking that the address is
// inside the buffer) and lets the access go on; leaving device mode closes what was opened. So only
// the buffers a kernel uses are toggled, not every buffer at every launch.

struct Alloc {
    uintptr_t base; size_t size; char* map; size_t map_size, data_off, data_size; long id;
    int open;                  // accessible now (device mode, touched)
    const char* legacy_write;  // a write on the legacy default stream the host has not waited for (what), or NULL
    const void* stream_write;  // a non-blocking stream with a write the host has not waited for, or NULL
    const char* stream_what;   // what that write was
};
static std::map<uintptr_t, Alloc> g_allocs; // by base
static long g_alloc_count = 0;
static int g_device_depth = 0;

static bool protect_enabled() {
    static int on = -1;
    if (on < 0) { const char* e = getenv("ZT_EMU_PROTECT"); on = !(e && !strcmp(e, "0")); }
    return on;
}
static void set_access(Alloc& a, bool on) {
    if (mprotect(a.map + a.data_off, a.data_size, on ? PROT_READ | PROT_WRITE : PROT_NONE))
        fail("mprotect failed (too many allocations?)");
    __atomic_store_n(&a.open, on ? 1 : 0, __ATOMIC_SEQ_CST);
}
static void device_enter() { g_device_depth++; }
static void device_leave() {
    if (--g_device_depth == 0 && protect_enabled())
        for (auto& kv : g_allocs)
            if (__atomic_load_n(&kv.second.open, __ATOMIC_SEQ_CST)) set_access(kv.second, false);
}
struct DeviceMode { DeviceMode() { device_enter(); } ~DeviceMode() { device_leave(); } };

// The allocation holding [p, p + bytes) (bytes may be 0: p may then be one past the end), or NULL.
static const Alloc* find_alloc(const void* p, size_t bytes = 0) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    const Alloc& al = it->second;
    if (a < al.base || a > al.base + al.size || bytes > al.base + al.size - a) return nullptr;
    return &al;
}
// The allocation whose mapping (guard pages included) holds p, or NULL. Mappings are ordered as
// their bases, and p is at most one page away from its allocation's base or end: look at the two
// allocations around p.
static const Alloc* find_mapping(const void* p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    for (int k = 0; k < 2; k++) {
        if (k == 1) { if (it == g_allocs.begin()) break; --it; }
        if (it == g_allocs.end()) continue;
        const Alloc& m = it->second;
        if (a >= (uintptr_t)m.map && a < (uintptr_t)m.map + m.map_size) return &m;
    }
    return nullptr;
}
static bool is_device(const void* p) { return find_mapping(p) != nullptr; }

// A device range [p, p+bytes) for an API call: inside one allocation, or a message and false.
static bool device_range(const void* p, size_t bytes, const char* call, const char* what) {
    if (bytes == 0) return true;
    if (find_alloc(p, bytes)) return true;
    const Alloc* m = find_mapping(p);
    if (m) note(cudaErrorInvalidValue, "%s: %s [%p, +%zu bytes) leaves allocation #%ld [%p, +%zu bytes)", call, what, p,
                bytes, m->id, (void*)m->base, m->size);
    else note(cudaErrorInvalidValue, "%s: %s %p is not device memory (a host pointer, or freed)", call, what, p);
    return false;
}
static bool host_range(const void* p, size_t bytes, const char* call, const char* what) {
    if (bytes == 0 || !is_device(p)) return true;
    note(cudaErrorInvalidValue, "%s: %s %p is device memory where the copy kind says host", call, what, p);
    return false;
}

// ----------------------------------------------------------------------------
// Streams and events: handles with a validity check; the work itself is done at issue time.
//
// One ordering rule is checked although everything runs in order: the legacy default stream
// (stream 0: cudaMemcpy, cudaMemset, launches without a stream) and a stream created with
// cudaStreamNonBlocking do not wait for each other. So a buffer written on one of them must not be
// touched on the other until the host has waited for the write: cudaStreamSynchronize of the
// writer's stream, a device-to-host cudaMemcpy (it returns when the legacy stream is drained), or
// cudaFree (it synchronizes the device). A host-to-device cudaMemcpy from pageable memory drains
// the legacy stream first but may return before its own DMA lands; cudaMemset of device memory
// returns at once. Tracked per allocation (for kernels: const pointer arguments are reads, others
// writes).
//
// Ordering between streams through events is checked with vector clocks: every operation on a
// stream counts (Clock::seq); an event carries its stream's clock when recorded; a stream that
// waits for an event, and the host when it synchronizes a stream, learn that clock (Clock::known).
// Collectives (fake_nccl.h) and copies/memsets on a non-blocking stream register the byte range
// they write as pending; any later access to that range from another stream that has not learned,
// through events or the host, that the write is done, stops the run ("a kernel reading a buffer a
// collective on another stream has not finished writing"). A collective also checks that the
// stream it runs on has learned of every earlier use of the allocation it writes by other streams
// (a gather overwriting a buffer a kernel may still read): uses by copies and collectives by their
// range (a copy of one block's shard on another stream does not order a collective writing the next
// block's), uses by kernels by their whole allocation. Kernels' own writes are tracked only
// by allocation and pointer (a kernel argument inside a pending range), since their extent is not
// known.

struct Clock { long seq = 0; std::map<const void*, long> known; }; // known: stream -> seq learned
// hang[0..1] (fake NCCL's asynchronous stall, ZT_EMU_NCCL_STALL=rank:n:async): the stream's work after
// the stalled collective is never reached until one of the two flags is set (an abort): events
// recorded after it stay not ready, and host waits on it block until then.
struct Stream { int flags; Clock clock; const std::atomic<int>* hang[2] = {nullptr, nullptr}; };
static inline bool hang_released(const std::atomic<int>* const h[2]) {
    return !h[0] || h[0]->load() || (h[1] && h[1]->load());
}
struct Event { int flags; bool recorded; const void* stream; std::map<const void*, long> clock; double t = 0; // t: the host's clock at the record
               bool lagged = false; // since its record, a query answered cudaErrorNotReady (the GPU behind: see cudaEventQuery)
               pthread_t by = pthread_t(); // the OS thread that recorded it (only that thread's queries teach the host: no locks)
               const std::atomic<int>* hang[2] = {nullptr, nullptr}; }; // recorded on a hung stream: never reached until released
static std::set<const void*> g_streams, g_events;
static bool stream_hung(const void* s) { return s && !hang_released(((const Stream*)s)->hang); }
// Make stream s hang (see Stream::hang) until *a or *b is set; fake NCCL calls it.
static void stream_hang(const void* s, const std::atomic<int>* a, const std::atomic<int>* b) {
    if (!s || !g_streams.count(s)) fail("stream_hang: %p is not a live stream", s);
    ((Stream*)s)->hang[0] = a;
    ((Stream*)s)->hang[1] = b;
}
// A host wait on a hung stream blocks until its release, as a GPU's would.
static void wait_released(const std::atomic<int>* const h[2]) {
    while (!hang_released(h)) { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); }
}
static Clock g_legacy_clock, g_host_clock; // the legacy default stream's; what the host has waited for

// Host synchronisations (the host waits for the device: cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, cudaMemcpy, cudaFree) and device-to-host copies (sync or async), counted
// since the start: the tests read them around a training step (docs/cuda.md: the step's budget).
static long g_host_syncs = 0, g_d2h_copies = 0;

static bool stream_ok(cudaStream_t s, const char* call) {
    if (s == nullptr || g_streams.count((const void*)s)) return true;
    note(cudaErrorInvalidResourceHandle, "%s: stream %p was never created or is destroyed", call, (void*)s);
    return false;
}
static bool legacy(cudaStream_t s) { return s == nullptr || !(((Stream*)s)->flags & 0x01 /* non-blocking */); }

// ---- vector clocks between streams
static Clock& clock_of(cudaStream_t s) { return s == nullptr ? g_legacy_clock : ((Stream*)s)->clock; }
static void clock_merge(std::map<const void*, long>& into, const std::map<const void*, long>& from) {
    for (auto& kv : from) if (into[kv.first] < kv.second) into[kv.first] = kv.second;
}
// Stream s (or the host, when s is the host's clock) knows that operation `seq` of stream `of` is done.
static bool host_knows(const void* of, long seq) {
    auto h = g_host_clock.known.find(of);
    return h != g_host_clock.known.end() && h->second >= seq;
}
static bool ordered_after(cudaStream_t s, const void* of, long seq) {
    if (of == (const void*)s) return true;
    Clock& c = clock_of(s);
    auto k = c.known.find(of);
    return (k != c.known.end() && k->second >= seq) || host_knows(of, seq);
}
// One more operation issued on s; returns its number.
static long stream_tick(cudaStream_t s) { return ++clock_of(s).seq; }
// The host waited for everything issued on s so far (and so for everything s had waited for).
static void land_pinned_copies();
static void host_learns(cudaStream_t s) {
    Clock& c = clock_of(s);
    clock_merge(g_host_clock.known, c.known);
    if (g_host_clock.known[(const void*)s] < c.seq) g_host_clock.known[(const void*)s] = c.seq;
    land_pinned_copies();
}
static void host_learns_all() {
    host_learns(nullptr);
    for (const void* s : g_streams) host_learns((cudaStream_t)s);
}

// ---- copies between the device and page-locked host memory (cudaMallocHost): asynchronous on a GPU.
// Such a copy reads or writes the host side when its stream reaches it, which the host knows only at
// a later synchronisation (stream, event or device synchronize, a successful cudaEventQuery). So here
// a copy to the host lands only when the host learns that it is done (reading the destination before
// sees the old bytes), and the source of a copy to the device must not change before then (checked at
// that point: a changed source stops the run, naming the copy). Copies from or to pageable memory are
// staged by the driver, which may wait for the stream: counted in g_host_syncs (possible host waits).
static std::map<uintptr_t, size_t> g_pinned; // cudaMallocHost: base -> bytes
struct PinnedCopy { const void* stream; long seq; void* host; std::vector<unsigned char> bytes; bool to_host; const char* call; };
static std::vector<PinnedCopy> g_pinned_copies; // not yet known done by the host
static bool is_pinned(const void* p, size_t n) {
    auto it = g_pinned.upper_bound((uintptr_t)p);
    if (it == g_pinned.begin()) return false;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + it->second;
}
// The host learned something: the copies it now knows done land (to the host) or are checked (from it).
static void land_pinned_copies() {
    for (size_t i = 0; i < g_pinned_copies.size();) {
        PinnedCopy& c = g_pinned_copies[i];
        if (!host_knows(c.stream, c.seq)) { i++; continue; }
        if (c.to_host) memcpy(c.host, c.bytes.data(), c.bytes.size());
        else if (memcmp(c.host, c.bytes.data(), c.bytes.size()))
            fail("%s of %zu bytes from page-locked memory at %p: the host changed its source before it knew the copy was done "
                 "(on a GPU the copy reads the source when its stream reaches it: it would move the new bytes). HINT: record an "
                 "event after the copy and wait for it (or query it) before reusing the buffer", c.call, c.bytes.size(), c.host);
        g_pinned_copies.erase(g_pinned_copies.begin() + i);
    }
}

struct PendingWrite { const void* stream; long seq; uintptr_t lo, hi; std::string what; };
static std::vector<PendingWrite> g_pending;                                  // writes with a known range
// A stream's use of [lo, hi) of an allocation (a copy's or collective's range; a kernel's: the whole
// allocation, its extent is not known) by operation seq.
struct Use { long seq; uintptr_t lo, hi; const char* what; };
static std::map<uintptr_t, std::map<const void*, std::vector<Use>>> g_uses; // allocation base -> stream -> uses not yet known done

// An access by stream s (operation seq) to [p, p + bytes) (bytes 0: the pointer only, for kernels).
static void cross_stream_check(cudaStream_t s, const void* p, size_t bytes, bool write, const char* what) {
    uintptr_t lo = (uintptr_t)p, hi = lo + (bytes ? bytes : 1);
    for (const PendingWrite& w : g_pending)
        if (lo < w.hi && w.lo < hi && !ordered_after(s, w.stream, w.seq))
            fail("%s on stream %p %s [%p, +%zu bytes) while %s on stream %p may not have finished writing it: no "
                 "event orders the two streams. HINT: record an event on the writer's stream after it and "
                 "cudaStreamWaitEvent on it before this (comm_wait does this for collectives)",
                 what, (void*)s, write ? "writes" : "reads", p, bytes, w.what.c_str(), w.stream);
    const Alloc* a = find_alloc(p);
    if (!a) return;
    if (!bytes) { lo = a->base; hi = a->base + a->size; } // a kernel: anywhere in the allocation
    std::vector<Use>& u = g_uses[a->base][(const void*)s];
    // a later use of a range covers the earlier ones inside it (a stream's operations finish in order)
    u.erase(std::remove_if(u.begin(), u.end(), [&](const Use& e) { return (lo <= e.lo && e.hi <= hi) || host_knows(s, e.seq); }), u.end());
    u.push_back({clock_of(s).seq, lo, hi, what});
}
// Stream s is about to write [p, p + bytes) (a collective, a copy): every other stream's earlier use of
// the allocation must be known to s; then the range is pending until other streams learn it is done.
static void cross_stream_write(cudaStream_t s, const void* p, size_t bytes, const char* what) {
    cross_stream_check(s, p, bytes, true, what);
    const Alloc* a = find_alloc(p);
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    if (a)
        for (auto& kv : g_uses[a->base])
            for (const Use& e : kv.second)
                if (kv.first != (const void*)s && e.lo < hi && lo < e.hi && !ordered_after(s, kv.first, e.seq))
                    fail("%s on stream %p overwrites [%p, +%zu bytes) of allocation #%ld [%p, +%zu bytes) that %s on stream %p "
                         "may still be using: no event orders the two streams. HINT: record an event after that use and "
                         "cudaStreamWaitEvent on it before this", what, (void*)s, p, bytes, a->id, (void*)a->base, a->size,
                         e.what, kv.first);
    // forget what every stream and the host already know is done
    g_pending.erase(std::remove_if(g_pending.begin(), g_pending.end(), [](const PendingWrite& w) {
                        return host_knows(w.stream, w.seq); }), g_pending.end());
    g_pending.push_back({(const void*)s, clock_of(s).seq, (uintptr_t)p, (uintptr_t)p + bytes, what});
}

// An operation `what` on stream s reads or writes [p, p+bytes): check, then record.
static void stream_access(cudaStream_t s, const void* p, bool write, const char* what) {
    Alloc* a = (Alloc*)find_alloc(p);
    if (!a) return;
    if (!legacy(s) && a->legacy_write)
        fail("%s on a non-blocking stream uses allocation #%ld [%p, +%zu bytes) while %s on the legacy default "
             "stream may still be writing it (a non-blocking stream does not wait for the legacy stream). HINT: "
             "issue that write on the same stream (cudaMemcpyAsync / cudaMemsetAsync), or synchronize first",
             what, a->id, (void*)a->base, a->size, a->legacy_write);
    if (legacy(s) && a->stream_write)
        fail("%s on the legacy default stream uses allocation #%ld [%p, +%zu bytes) while %s on non-blocking stream "
             "%p may still be writing it (the legacy stream does not wait for it). HINT: cudaStreamSynchronize that "
             "stream first, or issue this on it", what, a->id, (void*)a->base, a->size, a->stream_what, a->stream_write);
    if (write && legacy(s)) a->legacy_write = what;
    if (write && !legacy(s)) { a->stream_write = (const void*)s; a->stream_what = what; }
}
// The host has waited for everything issued so far on s (s == NULL: the legacy stream; all: the device).
static void host_waited(cudaStream_t s, bool all = false) {
    for (auto& kv : g_allocs) {
        if (all || legacy(s)) kv.second.legacy_write = nullptr;
        if (all || kv.second.stream_write == (const void*)s) kv.second.stream_write = nullptr;
    }
}

// ----------------------------------------------------------------------------
// Threads as fibers. switch_stack saves the callee-saved registers on the current stack, stores the
// stack pointer in *save and resumes the other stack (x86-64 System V); elsewhere, ucontext (slow:
// a system call per switch).

#if defined(EMU_FIBERS_ASM)
extern "C" void emu_switch_stack(void** save, void* to);
__asm__(".text\n"
        ".globl emu_switch_stack\n"
        ".type emu_switch_stack,@function\n"
        "emu_switch_stack:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size emu_switch_stack, .-emu_switch_stack\n");
#endif

enum State { RUNNING, AT_BARRIER, AT_WARP_OP, DONE };
enum WarpOp { SHFL_XOR, SHFL_DOWN, SHFL_UP, SHFL_IDX, SYNCWARP, MMA_BF16, LDMATRIX };
static const char* warp_op_name[] = {"__shfl_xor_sync", "__shfl_down_sync", "__shfl_up_sync", "__shfl_sync", "__syncwarp",
                                     "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8"};

// cp.async (see "Asynchronous copies" below): a copy issued by a thread and not yet landed. The
// source bytes are taken at issue; the destination holds 0xFF (NaN) until the thread's wait_group
// that covers the copy's commit group.
struct CpAsync { void* dst; const void* src; int bytes; long group; };
static const int kMaxCpAsync = 64; // copies in flight per thread (a GPU's limit is larger; ours is a check)

struct Fiber {
#if defined(EMU_FIBERS_ASM)
    void* sp; // saved stack pointer while switched out
#else
    ucontext_t ctx;
#endif
    char* stack;          // usable stack (a guard page below it)
    State state;
    uint3 idx;            // threadIdx
    int linear;           // x + y*bx + z*bx*by: lane = linear % 32, warp = linear / 32
    const char* file;     // where it waits (barrier or warp op)
    int line;
    WarpOp op;            // the warp op it waits in, and its operands
    unsigned mask;
    int arg, width;
    size_t size;
    uint64_t value, result;
    const void* in;       // warp-collective instructions (mma, ldmatrix): this lane's operands
    void* out;            // and where its results go (both on the lane's own stack)
    int cp_n;             // cp.async copies in flight (cp[0 .. cp_n))
    long cp_committed;    // commit_group calls so far: a copy issued now joins group cp_committed + 1
    CpAsync cp[kMaxCpAsync];
};

static const size_t kStackBytes = 128 << 10;
static const size_t kSmemBytes = 256 << 10; // the shared-memory arena of an OS thread (> 227 KiB)

// What runs a kernel's blocks on one OS thread: its fibers, its shared-memory arena, the block.
struct Worker {
    std::vector<Fiber> fibers;
#if defined(EMU_FIBERS_ASM)
    void* sched_sp = nullptr;
#else
    ucontext_t sched;
#endif
    Fiber* cur = nullptr;     // the running fiber
    int cp_at_issue = 0;      // this launch's cp.async copies land at issue (else at the wait)
    char* smem = nullptr;     // arena; its last page is a guard
    char* dyn = nullptr;      // dynamic shared memory: ends at the guard page
    size_t static_used = 0;   // static __shared__ bytes handed out in this block
    std::vector<std::pair<const void*, size_t>> sites; // (site, offset) of static __shared__ arrays
    uint3 block_idx;
    dim3 grid, block;
    size_t dyn_bytes = 0;
    void (*body)(const void*) = nullptr; // runs the kernel with its parameters
    const void* params = nullptr;
    Where where;
    char* altstack = nullptr; // the SIGSEGV handler's stack on this OS thread
};
static thread_local Worker* tl_worker = nullptr;

static void install_segv_handler();

static char* map_with_guard(size_t bytes, bool guard_below) {
    char* p = (char*)mmap(nullptr, bytes + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("mmap of %zu bytes failed", bytes);
    mprotect(guard_below ? p : p + bytes, kPage, PROT_NONE);
    return guard_below ? p + kPage : p;
}

static Worker* worker() {
    if (!tl_worker) {
        Worker* w = new Worker();
        w->smem = map_with_guard(kSmemBytes, false);
        w->altstack = (char*)malloc(1 << 16);
        stack_t ss;
        ss.ss_sp = w->altstack;
        ss.ss_size = 1 << 16;
        ss.ss_flags = 0;
        sigaltstack(&ss, nullptr);
        install_segv_handler();
        tl_worker = w;
    }
    return tl_worker;
}

static void to_scheduler(State s) {
    Worker* w = tl_worker;
    Fiber* f = w->cur;
    f->state = s;
#if defined(EMU_FIBERS_ASM)
    emu_switch_stack(&f->sp, w->sched_sp);
#else
    swapcontext(&f->ctx, &w->sched);
#endif
}

static void fiber_main() {
    Worker* w = tl_worker;
    w->body(w->params);
    to_scheduler(DONE);
    abort(); // a finished fiber is never resumed
}

static void fiber_start(Fiber* f) {
#if defined(EMU_FIBERS_ASM)
    // the first switch "returns" into fiber_main with the stack aligned as after a call
    uintptr_t top = ((uintptr_t)(f->stack + kStackBytes)) & ~(uintptr_t)15;
    void** sp = (void**)(top - 64);
    for (int k = 0; k < 6; k++) sp[k] = nullptr; // r15 r14 r13 r12 rbx rbp
    sp[6] = (void*)&fiber_main;
    sp[7] = nullptr;
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = kStackBytes;
    f->ctx.uc_link = nullptr;
    makecontext(&f->ctx, fiber_main, 0);
#endif
    f->state = RUNNING;
    f->cp_n = 0;
    f->cp_committed = 0;
}

static void fiber_resume(Worker* w, Fiber* f) {
    w->cur = f;
    w->where.thread = f->idx;
#if defined(EMU_FIBERS_ASM)
    emu_switch_stack(&w->sched_sp, f->sp);
#else
    swapcontext(&w->sched, &f->ctx);
#endif
    w->cur = nullptr;
}

// ---- barriers and warp operations, resolved by the scheduler when every fiber has stopped

// Two call sites are the same (file names are compared as strings: equal literals need not merge).
static bool same_site(const Fiber& a, const Fiber& b) {
    return a.line == b.line && (a.file == b.file || !strcmp(a.file, b.file));
}

static void describe_fiber(const Fiber& f, char* buf, size_t n) {
    switch (f.state) {
    case DONE: snprintf(buf, n, "returned"); break;
    case AT_BARRIER: snprintf(buf, n, "at __syncthreads %s:%d", f.file, f.line); break;
    case AT_WARP_OP: snprintf(buf, n, "at %s %s:%d", warp_op_name[f.op], f.file, f.line); break;
    default: snprintf(buf, n, "running");
    }
}

// ---- tensor-core instructions (PTX ISA 9.7.14, "Warp-level matrix instructions"), from the
// documented fragment layouts; every lane of the warp must be there (.sync.aligned).
//   groupID = lane >> 2, threadID_in_group = lane % 4 (g and t below); a .b32 register holds two
//   16-bit elements, the lower-numbered one in the low half.
//   mma.m16n8k16 .bf16 (9.7.14.5.8): D (16x8) = A (16x16, .row) * B (16x8, .col) + C, FP32 C and D
//     A: a0..a7 in 4 registers: row = g for a0,a1,a4,a5, g + 8 for a2,a3,a6,a7;
//        col = 2t + (i & 1) for i < 4, 2t + (i & 1) + 8 for i >= 4
//     B: b0..b3 in 2 registers: row (k) = 2t + (i & 1) for i < 2, 2t + (i & 1) + 8 for i >= 2; col (n) = g
//     C, D: c0..c3 (FP32): row = g for c0,c1, g + 8 for c2,c3; col = 2t + (i & 1)
//   ldmatrix.m8n8.x1/x2/x4[.trans].b16 (9.7.14.4.x "ldmatrix"): matrix m (0..x-1) has its 8 row
//     addresses in lanes 8m .. 8m+7 (16-byte aligned rows of 8 elements in shared memory); lane l
//     receives in register m the elements (row l/4, cols 2(l%4), 2(l%4)+1) of matrix m, or with
//     .trans the elements (rows 2(l%4), 2(l%4)+1, col l/4).
// THE ACCUMULATION ORDER IS A MODEL. A tensor core's internal order and intermediate precision are
// not documented. The emulator computes each element of D as d = c, then for k = 0, 1, ..., 15:
// d = d + a_k * b_k, the product exact (two BF16 significands fit in FP32's) and each addition
// rounded to nearest FP32. Real hardware adds the products in another order (and, by published
// measurements, with truncation inside the adder tree), so emulated and GPU results of the
// tensor-core kernels differ in the last bits: compare them with the CPU op within a tolerance,
// never bitwise across devices. (Run-to-run on one GPU, the instruction is deterministic.)

struct MmaIn { uint32_t a[4], b[2]; float c[4]; }; // one lane's operands of mma m16n8k16

static float bf16_bits(uint32_t reg, int half) {
    uint32_t u = (half ? reg >> 16 : reg & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void resolve_mma(Worker* w, int lo) {
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const MmaIn* in = (const MmaIn*)w->fibers[lo + lane].in;
        int g = lane >> 2, t = lane % 4;
        for (int i = 0; i < 8; i++) { // a_i: register i / 2, half i % 2
            int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = bf16_bits(in->a[i / 2], i % 2);
        }
        for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = bf16_bits(in->b[i / 2], i % 2);
        for (int i = 0; i < 4; i++) C[i < 2 ? g : g + 8][2 * t + (i & 1)] = in->c[i];
    }
    for (int lane = 0; lane < 32; lane++) {
        float* d = (float*)w->fibers[lo + lane].out;
        int g = lane >> 2, t = lane % 4;
        for (int i = 0; i < 4; i++) {
            int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
            float acc = C[row][col];
            for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col]; // the model above (host code: never contracted)
            d[i] = acc;
        }
    }
}

static void resolve_ldmatrix(Worker* w, int lo, int x, int trans) {
    const char* addr[32];
    for (int lane = 0; lane < 8 * x; lane++) {
        const Fiber& f = w->fibers[lo + lane];
        addr[lane] = (const char*)f.in;
        if (addr[lane] < w->smem || addr[lane] + 16 > w->smem + kSmemBytes)
            fail("ldmatrix at %s:%d: lane %d's row address %p is not in shared memory", f.file, f.line, lane, f.in);
        if ((uintptr_t)addr[lane] % 16)
            fail("ldmatrix at %s:%d: lane %d's row address %p is not 16-byte aligned", f.file, f.line, lane, f.in);
    }
    for (int lane = 0; lane < 32; lane++) {
        uint32_t* r = (uint32_t*)w->fibers[lo + lane].out;
        for (int m = 0; m < x; m++) {
            uint16_t e[2];
            for (int h = 0; h < 2; h++) {
                int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;
                memcpy(&e[h], addr[8 * m + row] + 2 * col, 2);
            }
            r[m] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
        }
    }
}

// Every lane of warp wi waits at a warp op: check they agree, compute the results. Returns false
// when the warp has no lane at a warp op.
static bool resolve_warp(Worker* w, int wi, int nthreads) {
    int lo = wi * 32, hi = lo + 32 < nthreads ? lo + 32 : nthreads;
    int first = -1;
    for (int t = lo; t < hi; t++)
        if (w->fibers[t].state == AT_WARP_OP) { first = t; break; }
    if (first < 0) return false;
    Fiber& f0 = w->fibers[first];
    w->where.thread = f0.idx;
    for (int lane = 0; lane < 32; lane++) {
        if (!(f0.mask >> lane & 1u)) continue;
        if (lo + lane >= hi)
            fail("%s at %s:%d with mask 0x%08x names lane %d, which does not exist (the block has %d threads)",
                 warp_op_name[f0.op], f0.file, f0.line, f0.mask, lane, nthreads);
        Fiber& f = w->fibers[lo + lane];
        char why[256];
        describe_fiber(f, why, sizeof(why));
        if (f.state != AT_WARP_OP || !same_site(f, f0) || f.op != f0.op)
            fail("%s at %s:%d (warp %d, mask 0x%08x): lane %d is %s", warp_op_name[f0.op], f0.file, f0.line, wi,
                 f0.mask, lane, why);
        if (f.mask != f0.mask || f.width != f0.width || f.size != f0.size || (f.op >= MMA_BF16 && f.arg != f0.arg))
            fail("%s at %s:%d (warp %d): lanes disagree on the mask, width or type", warp_op_name[f0.op], f0.file, f0.line, wi);
    }
    if (f0.op == MMA_BF16 || f0.op == LDMATRIX) {
        if (f0.op == MMA_BF16) resolve_mma(w, lo);
        else resolve_ldmatrix(w, lo, f0.arg & 7, f0.arg >> 4);
        for (int lane = 0; lane < 32; lane++) w->fibers[lo + lane].state = RUNNING;
        return true;
    }
    for (int lane = 0; lane < 32; lane++) {
        if (!(f0.mask >> lane & 1u)) continue;
        Fiber& f = w->fibers[lo + lane];
        int src = lane;
        switch (f.op) {
        case SHFL_XOR: src = lane ^ f.arg; break;
        case SHFL_DOWN: src = lane + f.arg < 32 ? lane + f.arg : lane; break;
        case SHFL_UP: src = lane - f.arg >= 0 ? lane - f.arg : lane; break;
        case SHFL_IDX: src = f.arg & 31; break;
        case SYNCWARP: case MMA_BF16: case LDMATRIX: break; // (the collectives returned above)
        }
        if (f.op != SYNCWARP && (src < 0 || src >= 32 || !(f0.mask >> src & 1u)))
            fail("%s at %s:%d: lane %d reads lane %d, outside the mask 0x%08x (undefined)", warp_op_name[f.op], f.file,
                 f.line, lane, src, f0.mask);
        f.result = w->fibers[lo + src].value;
    }
    for (int lane = 0; lane < 32; lane++)
        if (f0.mask >> lane & 1u) w->fibers[lo + lane].state = RUNNING;
    return true;
}

// Every fiber has stopped and no warp op is pending: release a barrier, or report what is wrong.
static void resolve_barrier(Worker* w, int nthreads) {
    int at = 0, done = 0;
    const Fiber* f0 = nullptr;
    for (int t = 0; t < nthreads; t++) {
        const Fiber& f = w->fibers[t];
        if (f.state == AT_BARRIER) { at++; if (!f0) f0 = &f; }
        else if (f.state == DONE) done++;
    }
    if (!f0) return;
    w->where.thread = f0->idx;
    for (int t = 0; t < nthreads; t++) {
        const Fiber& f = w->fibers[t];
        if (f.state == AT_BARRIER && !same_site(f, *f0))
            fail("barrier divergence: thread %d waits at __syncthreads %s:%d, thread %d at %s:%d", (int)(f0 - &w->fibers[0]),
                 f0->file, f0->line, t, f.file, f.line);
        if (f.state != AT_BARRIER && f.state != DONE) {
            char why[256];
            describe_fiber(f, why, sizeof(why));
            fail("deadlock: %d threads wait at __syncthreads %s:%d while thread %d is %s", at, f0->file, f0->line, t, why);
        }
    }
    if (done) fail("__syncthreads %s:%d is reached by %d threads while %d threads of the block have returned (undefined: "
                   "the condition around a barrier must be the same for the whole block)", f0->file, f0->line, at, done);
    for (int t = 0; t < nthreads; t++) w->fibers[t].state = RUNNING;
}

static int g_order_env = -1;                  // -1: alternate, 0: forward, 1: reverse
static int g_cp_async_env = -1;              // ZT_EMU_CP_ASYNC: -1: alternate, 0: land at the wait, 1: at issue
static std::map<const void*, long> g_launches; // launches per kernel

// Run one block: start a fiber per thread, run them until all have returned.
static void run_block(Worker* w, uint3 bidx, int reverse) {
    int nthreads = (int)(w->block.x * w->block.y * w->block.z);
    w->block_idx = bidx;
    w->where.block = bidx;
    w->static_used = 0;
    w->sites.clear();
    if (w->dyn_bytes) memset(w->dyn, 0xFF, w->dyn_bytes);
    while ((int)w->fibers.size() < nthreads) {
        Fiber f;
        memset(&f, 0, sizeof(f));
        f.stack = map_with_guard(kStackBytes, true);
        w->fibers.push_back(f);
    }
    for (int t = 0; t < nthreads; t++) {
        Fiber& f = w->fibers[t];
        f.linear = t;
        f.idx.x = t % w->block.x;
        f.idx.y = t / w->block.x % w->block.y;
        f.idx.z = t / (w->block.x * w->block.y);
        fiber_start(&f);
    }
    // Warps one at a time, each as far as it goes: its lanes run until they stop, its warp ops are
    // resolved, and again, until the whole warp waits at __syncthreads or has returned. Then the
    // next warp. So warps drift apart as far as a GPU allows (a missing __syncthreads between one
    // warp's write and another warp's read or overwrite shows), while a warp's lanes stay together.
    int nwarps = (nthreads + 31) / 32;
    for (;;) {
        for (int n = 0; n < nwarps; n++) {
            int wi = reverse ? nwarps - 1 - n : n;
            int lo = wi * 32, hi = lo + 32 < nthreads ? lo + 32 : nthreads;
            do {
                for (int k = 0; k < hi - lo; k++) {
                    Fiber& f = w->fibers[reverse ? hi - 1 - k : lo + k];
                    if (f.state == RUNNING) fiber_resume(w, &f);
                }
            } while (resolve_warp(w, wi, nthreads));
        }
        bool all_done = true;
        for (int t = 0; t < nthreads; t++) all_done &= w->fibers[t].state == DONE;
        if (all_done) break;
        resolve_barrier(w, nthreads);
    }
}

// The parameters of one launch, converted to the kernel's parameter types as a launch does; each
// thread gets its own copies (std::apply copies them into the by-value parameters).
template <class... P> struct KernelCall {
    void (*kernel)(P...);
    std::tuple<P...> params;
    static void run(const void* self) {
        const KernelCall* c = (const KernelCall*)self;
        std::apply(c->kernel, c->params);
    }
};

template <class T> static void check_pointer_arg(const char* kernel, cudaStream_t s, int i, const T& v) {
    if constexpr (std::is_pointer<T>::value) {
        if (v && !find_alloc((const void*)v))
            fail("launch of %s: argument %d (%p) %s", kernel, i + 1, (const void*)v,
                 find_mapping((const void*)v) ? "points outside its device allocation"
                                              : "is not device memory (a host pointer, or freed)");
        if (v) stream_access(s, (const void*)v, !std::is_const<typename std::remove_pointer<T>::type>::value, kernel);
        if (v) cross_stream_check(s, (const void*)v, 0, !std::is_const<typename std::remove_pointer<T>::type>::value, kernel);
    }
}

static std::map<const void*, int> g_max_dyn_smem; // cudaFuncSetAttribute's value per kernel

// ZT_EMU_PROFILE=1: launches and seconds per kernel (and per fake-library call), printed at exit.
struct Prof { long calls; double seconds; };
static std::map<std::string, Prof> g_prof;
static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
static void prof_print() {
    std::vector<std::pair<double, std::string>> v;
    for (auto& kv : g_prof) v.push_back({kv.second.seconds, kv.first});
    std::sort(v.rbegin(), v.rend());
    fprintf(stderr, "cuda_emu profile (seconds, calls):\n");
    for (auto& x : v) fprintf(stderr, "  %9.3f %8ld  %s\n", x.first, g_prof[x.second].calls, x.second.c_str());
}
static bool profiling() {
    static int on = -1;
    if (on < 0) { const char* e = getenv("ZT_EMU_PROFILE"); on = e && !strcmp(e, "1"); if (on) atexit(prof_print); }
    return on;
}
struct ProfScope {
    const char* name; double t0;
    explicit ProfScope(const char* n) : name(n), t0(profiling() ? now_s() : 0) {}
    ~ProfScope() { if (profiling()) { Prof& p = g_prof[name]; p.calls++; p.seconds += now_s() - t0; } }
};

} // namespace emu

// ----------------------------------------------------------------------------
// What kernels see: thread and block indices, barriers, warp operations, shared memory.

#define threadIdx (emu::tl_worker->cur->idx)
#define blockIdx (emu::tl_worker->block_idx)
#define blockDim (emu::tl_worker->block)
#define gridDim (emu::tl_worker->grid)

static inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::Fiber* f = emu::tl_worker->cur;
    f->file = file;
    f->line = line;
    emu::to_scheduler(emu::AT_BARRIER);
}

namespace emu {
template <class T> static inline T warp_op(WarpOp op, unsigned mask, T v, int arg, int width, const char* file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move up to 8 bytes");
    Fiber* f = tl_worker->cur;
    if (width != 32) fail("%s at %s:%d with width %d: only width 32 is emulated", warp_op_name[op], file, line, width);
    if (!(mask >> (f->linear % 32) & 1u))
        fail("%s at %s:%d: mask 0x%08x leaves out the calling lane %d", warp_op_name[op], file, line, mask, f->linear % 32);
    f->op = op; f->mask = mask; f->arg = arg; f->width = width; f->size = sizeof(T); f->file = file; f->line = line;
    f->value = 0;
    memcpy(&f->value, &v, sizeof(T));
    to_scheduler(AT_WARP_OP);
    T r;
    memcpy(&r, &f->result, sizeof(T));
    return r;
}
} // namespace emu

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                                                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::warp_op(emu::SHFL_XOR, mask, v, lane_mask, width, file, line);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::warp_op(emu::SHFL_DOWN, mask, v, (int)delta, width, file, line);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::warp_op(emu::SHFL_UP, mask, v, (int)delta, width, file, line);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32,
                                               const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return emu::warp_op(emu::SHFL_IDX, mask, v, src_lane, width, file, line);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::warp_op(emu::SYNCWARP, mask, 0, 0, 32, file, line);
}

// ---- Tensor-core instructions and asynchronous copies, as ops/tensor_core.cuh calls them under
// the emulator (its nvcc side is the inline PTX). The layouts are in resolve_mma / resolve_ldmatrix.
namespace emu {
static inline void warp_collective(WarpOp op, const void* in, void* out, int arg, const char* file, int line) {
    Fiber* f = tl_worker->cur;
    f->op = op; f->mask = 0xffffffffu; f->arg = arg; f->width = 32; f->size = 0; f->file = file; f->line = line;
    f->in = in; f->out = out;
    to_scheduler(AT_WARP_OP);
}
} // namespace emu

// d = A b + c for one m16n8k16 tile (a[4], b[2] BF16 pairs, c[4], d[4] FP32: this lane's fragments).
static inline void emu_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    emu::MmaIn in;
    memcpy(in.a, a, sizeof(in.a));
    memcpy(in.b, b, sizeof(in.b));
    memcpy(in.c, c, sizeof(in.c));
    float res[4];
    emu::warp_collective(emu::MMA_BF16, &in, res, 0, file, line);
    memcpy(d, res, sizeof(res));
}
// r[0 .. x) = ldmatrix.m8n8.x{x}[.trans].b16 with this lane's row address `row`.
static inline void emu_ldmatrix(uint32_t* r, int x, int trans, const void* row, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
    uint32_t res[4];
    emu::warp_collective(emu::LDMATRIX, row, res, x | trans << 4, file, line);
    memcpy(r, res, (size_t)x * 4);
}

// cp.async.{ca,cg}.shared.global [dst], [src], bytes (4, 8 or 16; cg: 16) and its groups. On a GPU a
// copy lands at some point between its issue and the cp.async.wait_group that covers its group; a
// kernel may rely on neither end. So the emulator lands it at one end or the other, alternating
// with the kernel's launches (ZT_EMU_CP_ASYNC=issue|wait fixes one): at the wait, dst reads 0xFF
// (NaN) until then and the source is read at the wait (reading dst without the wait fails, so does
// a copy issued over data other warps still read, or a source changed before the wait); at issue,
// dst holds the bytes at once (a kernel that reads dst's old bytes after the issue gets the new).
// (Other threads see landed data after a barrier, as on a GPU.)
static inline void emu_cp_async(void* dst, const void* src, int bytes, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
    emu::Worker* w = emu::tl_worker;
    emu::Fiber* f = w->cur;
    if (bytes != 4 && bytes != 8 && bytes != 16) emu::fail("cp.async at %s:%d: %d bytes (4, 8 or 16)", file, line, bytes);
    if ((char*)dst < w->smem || (char*)dst + bytes > w->smem + emu::kSmemBytes)
        emu::fail("cp.async at %s:%d: destination %p is not shared memory", file, line, dst);
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes)
        emu::fail("cp.async at %s:%d: %d-byte copy from %p to %p: both must be %d-byte aligned", file, line, bytes, src,
                  dst, bytes);
    if (!emu::find_alloc(src, (size_t)bytes))
        emu::fail("cp.async at %s:%d: source [%p, +%d) is not inside a device allocation", file, line, src, bytes);
    if (f->cp_n == emu::kMaxCpAsync)
        emu::fail("cp.async at %s:%d: more than %d copies in flight in one thread (a missing wait_group?)", file, line,
                  emu::kMaxCpAsync);
    if (w->cp_at_issue) { memcpy(dst, src, (size_t)bytes); return; }
    emu::CpAsync& c = f->cp[f->cp_n++];
    c.dst = dst;
    c.src = src;
    c.bytes = bytes;
    c.group = f->cp_committed + 1;
    memset(dst, 0xFF, (size_t)bytes);
}
static inline void emu_cp_async_commit() { emu::tl_worker->cur->cp_committed++; }
// cp.async.wait_group n: every committed group but the n most recent has landed.
// emu_cp_async_skip_waits = 1 turns every wait into nothing: the "missing wait" a test plants to
// show that the attention test catches it (test/gpu_attention.h).
static int emu_cp_async_skip_waits = 0;
static inline void emu_cp_async_wait(int n) {
    emu::Fiber* f = emu::tl_worker->cur;
    if (emu_cp_async_skip_waits) return;
    int keep = 0;
    for (int i = 0; i < f->cp_n; i++) {
        emu::CpAsync& c = f->cp[i];
        if (c.group <= f->cp_committed - n) memcpy(c.dst, c.src, (size_t)c.bytes);
        else f->cp[keep++] = c;
    }
    f->cp_n = keep;
}

namespace emu {
// A static `__shared__ T name[dims];` (emulate.py writes EMU_SHARED(T, name, [dims])): the block's
// threads get the same bytes, handed out in the order of first use and filled with 0xFF per block.
// Declared alignment is honoured and no more: an array declared with alignment A < 128 starts at an
// odd multiple of A (aligned to A, never to 2A), so an access that needs more than its declaration
// promises (a 16-byte cp.async, ldmatrix row or vector into a float array) fails here, as it may on a
// GPU, where the placement is the compiler's choice.
static size_t exactly_aligned(size_t off, size_t align) {
    if (align >= 128) return (off + align - 1) / align * align;
    return (off + align) / (2 * align) * (2 * align) + align;
}
static void* static_shared(size_t bytes, size_t align, const void* site) {
    Worker* w = tl_worker;
    for (auto& s : w->sites)
        if (s.first == site) return w->smem + s.second;
    size_t off = exactly_aligned(w->static_used, align);
    w->static_used = off + bytes;
    if (w->static_used > props().sharedMemPerBlock)
        fail("static __shared__ arrays take %zu bytes, over the 48 KiB a block may declare statically", w->static_used);
    if (w->static_used + w->dyn_bytes > props().sharedMemPerBlockOptin)
        fail("static (%zu) + dynamic (%zu) shared memory exceed this GPU's %zu bytes per block", w->static_used,
             w->dyn_bytes, props().sharedMemPerBlockOptin);
    memset(w->smem + off, 0xFF, bytes);
    w->sites.push_back({site, off});
    return w->smem + off;
}
} // namespace emu

#define EMU_SHARED(T, name, dims, align)                                                       \
    typedef T emu_shared_##name##_t dims;                                                      \
    static const char emu_site_##name = 0;                                                     \
    emu_shared_##name##_t& name =                                                              \
        *(emu_shared_##name##_t*)emu::static_shared(sizeof(emu_shared_##name##_t), align, &emu_site_##name)

// `extern __shared__ T name[];` (emulate.py writes T* name = (T*)emu_dynamic_shared(alignof(T)), or
// the __align__ given): 16-byte aligned when declared so (ending at the guard page), else at an
// address aligned to the declaration only (a few bytes before the guard page).
static inline void* emu_dynamic_shared(size_t align) {
    emu::Worker* w = emu::tl_worker;
    if (align >= 16) return w->dyn;
    uintptr_t end = (uintptr_t)(w->smem + emu::kSmemBytes);
    uintptr_t p = (end - w->dyn_bytes) / align * align;
    if (p % 16 == 0) p -= align;
    return (void*)p;
}
#define __align__(n) alignas(n)

// ----------------------------------------------------------------------------
// Launches: emulate.py rewrites  kernel<<<grid, block, smem, stream>>>(args);  into
// emu::launch("kernel", kernel, bound, dim3(grid), dim3(block), smem, stream, args);
// (bound: the kernel's __launch_bounds__, or 0).

namespace emu {
// The last error, per host thread as CUDA keeps it: set by a failed call (and by a query that answers
// cudaErrorNotReady), kept until cudaGetLastError reads and clears it.
static thread_local cudaError_t g_last_error = cudaSuccess;
static std::atomic<long> g_not_ready_answers{0}; // cudaEventQuery's not-ready answers (ZT_EMU_STATS=1 prints them at exit)
static void stats_print() { fprintf(stderr, "cuda_emu: cudaEventQuery answered cudaErrorNotReady %ld time(s)\n", g_not_ready_answers.load()); }
static void stats_arm() {
    static std::atomic<int> armed{0};
    const char* e = getenv("ZT_EMU_STATS");
    if (e && !strcmp(e, "1") && !armed.exchange(1)) atexit(stats_print);
}

// ---- nvcc's resources per kernel (sm_90): registers a thread, static shared memory, stack, spills,
// from `nvcc --resource-usage` in the build of the carried binaries (test/cuda_emu/resources.py writes
// the table; test/test_gpu.cu registers it). Checked at every launch as a GPU's launch checks them:
// registers (allocated per warp in units of 256) x warps <= 65,536 per block, static shared memory
// <= 48 KiB and static + dynamic <= the opt-in limit, the parameters within 32,764 bytes (CUDA 12.1
// and later on Volta and later: this project builds with CUDA 13; sumsq_chunks_kernel's table takes
// ~12 KiB, over the 4 KiB of older toolkits and drivers). A kernel missing from the table stops
// the run (the table is stale: rebuild it) unless no table was built (no nvcc: g_resources empty).
struct KernelResources { const void* fn; const char* name; int regs, smem, stack, spill_st, spill_ld; };
static std::map<const void*, KernelResources> g_resources;
static int register_kernel_resources(const KernelResources* t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i].fn) g_resources[t[i].fn] = t[i];
    return (int)g_resources.size();
}
static const int kRegsPerSM = 65536, kRegsPerThreadMax = 255;
static const size_t kMaxParamBytes = 32764;
// A kernel's parameters as CUDA lays them out: each at its alignment, in order.
template <class... P> static size_t param_bytes() {
    size_t off = 0;
    ((off = (off + alignof(P) - 1) / alignof(P) * alignof(P) + sizeof(P)), ...);
    return off;
}
static cudaError_t check_resources(const char* name, const void* kernel, long threads, size_t dyn, size_t params) {
    if (params > kMaxParamBytes)
        return note(cudaErrorInvalidValue, "launch of %s: %zu bytes of kernel parameters, over CUDA's %zu", name, params, kMaxParamBytes);
    if (g_resources.empty()) return cudaSuccess;
    auto it = g_resources.find(kernel);
    if (it == g_resources.end())
        fail("launch of %s: the kernel is not in nvcc's resource table (build/gpu/kernel_resources.h is stale or the "
             "kernel was never compiled by nvcc). HINT: make gpu-binaries, then rebuild this binary", name);
    const KernelResources& r = it->second;
    long warps = (threads + 31) / 32, per_warp = ((long)r.regs * 32 + 255) / 256 * 256;
    if (r.regs > kRegsPerThreadMax || per_warp * warps > kRegsPerSM)
        return note(cudaErrorLaunchOutOfResources, "launch of %s (%s): %ld threads x %d registers (nvcc, sm_90) need %ld "
                    "registers, over the %d of an SM. HINT: __launch_bounds__(%ld) on the kernel makes nvcc fit them",
                    name, r.name, threads, r.regs, per_warp * warps, kRegsPerSM, threads);
    if ((size_t)r.smem > props().sharedMemPerBlock || r.smem + dyn > props().sharedMemPerBlockOptin)
        return note(cudaErrorInvalidValue, "launch of %s (%s): %d bytes of static and %zu of dynamic shared memory, over "
                    "the limits (48 KiB static, %zu in all)", name, r.name, r.smem, dyn, props().sharedMemPerBlockOptin);
    return cudaSuccess;
}

template <class... P, class... A>
static void launch(const char* name, void (*kernel)(P...), int bound, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch needs one argument per parameter");
    context_check(name);
    long threads = (long)block.x * block.y * block.z;
    cudaError_t e = cudaSuccess;
    if (!stream_ok(stream, name)) e = cudaErrorInvalidResourceHandle;
    else if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
        e = note(cudaErrorInvalidConfiguration, "launch of %s: block (%u,%u,%u)", name, block.x, block.y, block.z);
    else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
        e = note(cudaErrorInvalidConfiguration, "launch of %s: grid (%u,%u,%u)", name, grid.x, grid.y, grid.z);
    else if (bound > 0 && threads > bound)
        e = note(cudaErrorLaunchOutOfResources, "launch of %s: %ld threads per block, over its __launch_bounds__(%d)", name,
                 threads, bound);
    else if (smem > props().sharedMemPerBlock &&
             (!g_max_dyn_smem.count((const void*)kernel) || smem > (size_t)g_max_dyn_smem[(const void*)kernel]))
        e = note(cudaErrorInvalidValue, "launch of %s: %zu bytes of dynamic shared memory, over 48 KiB and over what "
                 "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) allowed (%d)", name, smem,
                 g_max_dyn_smem.count((const void*)kernel) ? g_max_dyn_smem[(const void*)kernel] : 0);
    else if (smem > props().sharedMemPerBlockOptin)
        e = note(cudaErrorInvalidValue, "launch of %s: %zu bytes of dynamic shared memory, over the device's %zu", name, smem,
                 props().sharedMemPerBlockOptin);
    else e = check_resources(name, (const void*)kernel, threads, smem, param_bytes<P...>());
    if (e != cudaSuccess) { g_last_error = e; return; }
    KernelCall<P...> call{kernel, std::tuple<P...>(std::forward<A>(args)...)};
    stream_tick(stream);
    {
        int i = 0;
        std::apply([&](const auto&... v) { (check_pointer_arg(name, stream, i++, v), ...); }, call.params);
    }
    ProfScope prof(name);
    long nth = g_launches[(const void*)kernel]++;
    int reverse = g_order_env >= 0 ? g_order_env : (int)(nth & 1);
    int cp_at_issue = g_cp_async_env >= 0 ? g_cp_async_env : (int)(nth >> 1 & 1); // (with the order: 4 combinations)
    long nblocks = (long)grid.x * grid.y * grid.z;
    DeviceMode dm;
    auto run_range = [&](long b) {
        Worker* w = worker();
        w->grid = grid;
        w->block = block;
        w->dyn_bytes = smem;
        w->dyn = w->smem + kSmemBytes - (smem + 15) / 16 * 16;
        w->body = &KernelCall<P...>::run;
        w->params = &call;
        w->where.kernel = name;
        w->cp_at_issue = cp_at_issue;
        tl_where = &w->where;
        uint3 bidx = {(unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / ((long)grid.x * grid.y))};
        run_block(w, bidx, reverse);
        tl_where = nullptr;
    };
#ifdef _OPENMP
    if (nblocks > 1 && omp_get_max_threads() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
        for (long b = 0; b < nblocks; b++) run_range(reverse ? nblocks - 1 - b : b);
    } else
#endif
        for (long b = 0; b < nblocks; b++) run_range(reverse ? nblocks - 1 - b : b);
}
} // namespace emu

// ----------------------------------------------------------------------------
// Device-side intrinsics and functions.

// The IEEE round-to-nearest intrinsics: one correctly rounded operation each, never fused with a
// neighbour (nvcc's guarantee). The empty asm hides operands and result from g++'s contraction.
#if defined(__x86_64__)
#define EMU_OPAQUE(x) __asm__("" : "+x"(x))
#else
#define EMU_OPAQUE(x) __asm__("" : "+m"(x))
#endif
static inline float emu_opaque(float x) { EMU_OPAQUE(x); return x; }
static inline float __fadd_rn(float a, float b) { return emu_opaque(emu_opaque(a) + emu_opaque(b)); }
static inline float __fsub_rn(float a, float b) { return emu_opaque(emu_opaque(a) - emu_opaque(b)); }
static inline float __fmul_rn(float a, float b) { return emu_opaque(emu_opaque(a) * emu_opaque(b)); }
static inline float __fdiv_rn(float a, float b) { return emu_opaque(emu_opaque(a) / emu_opaque(b)); }
static inline float __fsqrt_rn(float a) { return emu_opaque(sqrtf(emu_opaque(a))); }
static inline float __fmaf_rn(float a, float b, float c) { return emu_opaque(fmaf(a, b, c)); }

// atomicMax on 32-bit unsigned words (adamw_kernel folds its maxima with it) and the bit cast it
// takes: a compare-and-swap loop, since OpenMP threads run different blocks of one launch at once.
static inline unsigned int atomicMax(unsigned int* addr, unsigned int val) {
    unsigned int old = __atomic_load_n(addr, __ATOMIC_SEQ_CST);
    while (old < val && !__atomic_compare_exchange_n(addr, &old, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

// clock64: a nanosecond counter (a GPU's runs at ~1-2 GHz); __nanosleep sleeps.
static inline long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
static inline void __nanosleep(unsigned ns) {
    struct timespec ts = {0, (long)ns};
    nanosleep(&ts, nullptr);
}

// CUDA's integer min/max (the float ones are fminf/fmaxf from libm).
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// 16-byte vector types (vector_types.h): uint4, int4, float4. A GPU loads or stores one in a single
// 16-byte access (ld.global.v4 / st.global.v4, what `*(const uint4*)p` compiles to), and that address
// must be 16-byte aligned: otherwise the kernel stops with "misaligned address". Here copying one out
// of memory or into memory checks the address, so a kernel that takes the vector path on a pointer
// that is not 16-byte aligned (a row of odd length, a sub-buffer at an odd offset) stops with a
// message naming the kernel, block and thread; x86 would do the access silently.
namespace emu {
static inline void check_align16(const void* p, const char* what) {
    if ((uintptr_t)p % 16)
        fail("misaligned 16-byte %s at %p (address %% 16 = %u): on a GPU the kernel stops with 'misaligned "
             "address'. HINT: take the 16-byte path only when the pointer is 16-byte aligned (and a row's length "
             "keeps every row aligned)", what, p, (unsigned)((uintptr_t)p % 16));
}
} // namespace emu
#define EMU_VECTOR4(name, T)                                                                               \
    struct alignas(16) name {                                                                              \
        T x, y, z, w;                                                                                      \
        name() = default;                                                                                  \
        name(const name& o) { emu::check_align16(&o, "load (" #name ")"); x = o.x; y = o.y; z = o.z; w = o.w; } \
        name& operator=(const name& o) {                                                                   \
            emu::check_align16(this, "store (" #name ")");                                                 \
            emu::check_align16(&o, "load (" #name ")");                                                    \
            x = o.x; y = o.y; z = o.z; w = o.w;                                                            \
            return *this;                                                                                  \
        }                                                                                                  \
    };                                                                                                     \
    static inline name make_##name(T a, T b, T c, T d) { name v; v.x = a; v.y = b; v.z = c; v.w = d; return v; }
EMU_VECTOR4(uint4, unsigned int)
EMU_VECTOR4(int4, int)
EMU_VECTOR4(float4, float)
#undef EMU_VECTOR4

// BF16 (cuda_bf16.h): the storage type and its conversions, round to nearest even, NaN kept NaN.
struct __nv_bfloat16 { unsigned short x; };
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) { h.x = (unsigned short)((u >> 16) | 0x40); return h; }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (unsigned short)(u >> 16);
    return h;
}

// ----------------------------------------------------------------------------
// The runtime API we call, synchronous.

static cudaError_t cudaGetLastError() {
    cudaError_t e = emu::g_last_error;
    emu::g_last_error = cudaSuccess;
    return e;
}
// ZT_EMU_DRIVER=old: the runtime's answer on a machine whose driver is older than the toolkit.
static cudaError_t cudaGetDeviceCount(int* n) {
    const char* d = getenv("ZT_EMU_DRIVER");
    *n = 0;
    if (d && !strcmp(d, "old")) return emu::g_last_error = cudaErrorInsufficientDriver;
    *n = emu::gpus();
    return cudaSuccess;
}
static cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= emu::gpus())
        return emu::note(cudaErrorInvalidDevice, "cudaSetDevice(%d): the emulation has %d GPU(s) (ZT_EMU_GPUS)", d, emu::gpus());
    emu::tl_device = d;
    if (d > 0) emu::g_chosen_device.store(d);
    return cudaSuccess;
}
static cudaError_t cudaGetDevice(int* d) { *d = emu::tl_device < 0 ? 0 : emu::tl_device; return cudaSuccess; }
static cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d < 0 || d >= emu::gpus())
        return emu::note(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d): the emulation has %d GPU(s) (ZT_EMU_GPUS)", d, emu::gpus());
    *p = emu::props();
    return cudaSuccess;
}
static cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    emu::context_check("cudaMemGetInfo");
    *free_b = emu::g_mem_total - emu::g_mem_used;
    *total_b = emu::g_mem_total;
    return cudaSuccess;
}

static cudaError_t cudaMalloc(void** p, size_t bytes) {
    emu::context_check("cudaMalloc");
    *p = nullptr;
    if (bytes == 0) return cudaSuccess;
    if (bytes > emu::g_mem_total - emu::g_mem_used)
        return emu::note(cudaErrorMemoryAllocation, "cudaMalloc(%zu): the emulated GPU has %zu bytes free", bytes,
                         emu::g_mem_total - emu::g_mem_used);
    emu::Alloc a;
    a.data_size = (bytes + emu::kPage - 1) / emu::kPage * emu::kPage;
    a.map_size = a.data_size + 2 * emu::kPage;
    a.map = (char*)mmap(nullptr, a.map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a.map == MAP_FAILED) return emu::note(cudaErrorMemoryAllocation, "cudaMalloc(%zu): mmap failed", bytes);
    a.data_off = emu::kPage;
    a.size = bytes;
    a.base = (uintptr_t)(a.map + a.data_off + a.data_size - (bytes + 255) / 256 * 256);
    a.id = ++emu::g_alloc_count;
    a.open = 0;
    a.legacy_write = nullptr;
    a.stream_write = nullptr;
    a.stream_what = nullptr;
    emu::set_access(a, true);
    memset(a.map + a.data_off, 0xFF, a.data_size); // NaN: memory nobody wrote (the slack around the buffer too)
    if (emu::g_device_depth == 0 && emu::protect_enabled()) emu::set_access(a, false);
    if (!emu::protect_enabled()) a.open = 0; // always open: never closed
    emu::g_allocs[a.base] = a;
    emu::g_mem_used += bytes;
    *p = (void*)a.base;
    return cudaSuccess;
}
template <class T> static cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }

static cudaError_t cudaFree(void* p) {
    emu::context_check("cudaFree");
    if (!p) return cudaSuccess;
    auto it = emu::g_allocs.find((uintptr_t)p);
    if (it == emu::g_allocs.end())
        return emu::note(cudaErrorInvalidValue, "cudaFree(%p): not the start of a live allocation", p);
    emu::g_mem_used -= it->second.size;
    emu::g_host_syncs++;
    emu::host_waited(nullptr, true); // cudaFree synchronizes the device
    emu::host_learns_all();
    emu::g_uses.erase(it->first);
    munmap(it->second.map, it->second.map_size); // later uses fault until the address is reused
    emu::g_allocs.erase(it);
    return cudaSuccess;
}

static cudaError_t emu_memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool sync,
                              const char* call) {
    if (n == 0) return cudaSuccess;
    emu::context_check(call);
    if (kind == cudaMemcpyDefault)
        kind = (cudaMemcpyKind)((emu::is_device(src) ? 2 : 0) + (emu::is_device(dst) ? 1 : 0));
    bool ok = true;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = emu::device_range(dst, n, call, "destination") && emu::host_range(src, n, call, "source"); break;
    case cudaMemcpyDeviceToHost: ok = emu::device_range(src, n, call, "source") && emu::host_range(dst, n, call, "destination"); break;
    case cudaMemcpyDeviceToDevice: ok = emu::device_range(dst, n, call, "destination") && emu::device_range(src, n, call, "source"); break;
    case cudaMemcpyHostToHost: ok = emu::host_range(dst, n, call, "destination") && emu::host_range(src, n, call, "source"); break;
    default: return emu::note(cudaErrorInvalidMemcpyDirection, "%s: copy kind %d", call, (int)kind);
    }
    if (!ok) return cudaErrorInvalidValue;
    if (kind == cudaMemcpyDeviceToHost) emu::g_d2h_copies++;
    if (sync) emu::g_host_syncs++;
    if ((const char*)dst < (const char*)src + n && (const char*)src < (const char*)dst + n)
        return emu::note(cudaErrorInvalidValue, "%s: source and destination overlap", call);
    if (sync && kind == cudaMemcpyHostToDevice) { emu::host_waited(nullptr); emu::host_learns(nullptr); } // drains the legacy stream first
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) emu::stream_access(stream, src, false, call);
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) emu::stream_access(stream, dst, true, call);
    emu::stream_tick(stream);
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) emu::cross_stream_check(stream, src, n, false, call);
    if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
        if (emu::legacy(stream)) emu::cross_stream_check(stream, dst, n, true, call);
        else emu::cross_stream_write(stream, dst, n, call);
    }
    emu::DeviceMode dm;
    const void* host = kind == cudaMemcpyHostToDevice ? src : kind == cudaMemcpyDeviceToHost ? dst : nullptr;
    if (!sync && host && !emu::is_pinned(host, n)) emu::g_host_syncs++; // pageable: staged by the driver, may wait
    if (!sync && host && emu::is_pinned(host, n)) { // lands (to the host) or is checked (from it) when the host learns it is done
        emu::PinnedCopy c{(const void*)stream, emu::clock_of(stream).seq, (void*)host,
                          std::vector<unsigned char>((const unsigned char*)src, (const unsigned char*)src + n),
                          kind == cudaMemcpyDeviceToHost, call};
        if (kind == cudaMemcpyHostToDevice) memcpy(dst, src, n);
        emu::g_pinned_copies.push_back(std::move(c));
        return cudaSuccess;
    }
    memcpy(dst, src, n);
    if (sync && kind == cudaMemcpyDeviceToHost) { emu::host_waited(nullptr); emu::host_learns(nullptr); } // returns when the copy is done
    return cudaSuccess;
}
static cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    return emu_memcpy(dst, src, n, kind, nullptr, true, "cudaMemcpy");
}
static cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr) {
    if (!emu::stream_ok(s, "cudaMemcpyAsync")) return cudaErrorInvalidResourceHandle;
    return emu_memcpy(dst, src, n, kind, s, false, "cudaMemcpyAsync");
}
static cudaError_t emu_memset(void* p, int value, size_t n, cudaStream_t s, const char* call) {
    emu::context_check(call);
    if (!emu::stream_ok(s, call)) return cudaErrorInvalidResourceHandle;
    if (!emu::device_range(p, n, call, "destination")) return cudaErrorInvalidValue;
    if (n) emu::stream_access(s, p, true, call);
    emu::stream_tick(s);
    if (n && emu::legacy(s)) emu::cross_stream_check(s, p, n, true, call);
    if (n && !emu::legacy(s)) emu::cross_stream_write(s, p, n, call);
    emu::DeviceMode dm;
    memset(p, value, n);
    return cudaSuccess;
}
static cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s = nullptr) {
    return emu_memset(p, value, n, s, "cudaMemsetAsync");
}
// Asynchronous with respect to the host (device memory), on the legacy stream.
static cudaError_t cudaMemset(void* p, int value, size_t n) { return emu_memset(p, value, n, nullptr, "cudaMemset"); }

static cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    emu::context_check("cudaStreamCreateWithFlags");
    *s = (cudaStream_t) new emu::Stream{(int)flags, {}};
    emu::g_streams.insert((const void*)*s);
    return cudaSuccess;
}
static cudaError_t cudaStreamDestroy(cudaStream_t s) {
    emu::context_check("cudaStreamDestroy");
    if (!s || !emu::g_streams.erase((const void*)s))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void*)s);
    delete (emu::Stream*)s;
    return cudaSuccess;
}
static cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::context_check("cudaStreamSynchronize");
    if (!emu::stream_ok(s, "cudaStreamSynchronize")) return cudaErrorInvalidResourceHandle;
    if (s) emu::wait_released(((emu::Stream*)s)->hang);
    emu::g_host_syncs++;
    emu::host_waited(s);
    emu::host_learns(s);
    return cudaSuccess;
}
static cudaError_t cudaDeviceSynchronize() {
    emu::context_check("cudaDeviceSynchronize");
    emu::g_host_syncs++;
    emu::host_waited(nullptr, true);
    emu::host_learns_all();
    return cudaSuccess;
}
// Pinned host memory: host memory, remembered (its asynchronous copies land late: see land_pinned_copies).
static cudaError_t cudaMallocHost(void** p, size_t bytes) {
    emu::context_check("cudaMallocHost");
    *p = calloc(1, bytes > 0 ? bytes : 1);
    if (!*p) return emu::note(cudaErrorMemoryAllocation, "cudaMallocHost(%zu): out of host memory", bytes);
    emu::g_pinned[(uintptr_t)*p] = bytes > 0 ? bytes : 1;
    return cudaSuccess;
}
static cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    auto it = emu::g_pinned.find((uintptr_t)p);
    if (it == emu::g_pinned.end()) return emu::note(cudaErrorInvalidValue, "cudaFreeHost(%p): not from cudaMallocHost", p);
    for (const emu::PinnedCopy& c : emu::g_pinned_copies)
        if ((uintptr_t)c.host >= it->first && (uintptr_t)c.host < it->first + it->second)
            emu::fail("cudaFreeHost(%p) while %s of %zu bytes at %p may not have finished (no synchronisation since): "
                      "on a GPU it would read or write freed memory", p, c.call, c.bytes.size(), c.host);
    emu::g_pinned.erase(it);
    free(p);
    return cudaSuccess;
}
static cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    emu::context_check("cudaEventCreateWithFlags");
    *e = (cudaEvent_t) new emu::Event{(int)flags, false, nullptr, {}};
    emu::g_events.insert((const void*)*e);
    return cudaSuccess;
}
static cudaError_t cudaEventDestroy(cudaEvent_t e) {
    emu::context_check("cudaEventDestroy");
    if (!e || !emu::g_events.erase((const void*)e))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void*)e);
    delete (emu::Event*)e;
    return cudaSuccess;
}
static cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    emu::context_check("cudaEventRecord");
    if (!e || !emu::g_events.count((const void*)e))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p): not a live event", (void*)e);
    if (!emu::stream_ok(s, "cudaEventRecord")) return cudaErrorInvalidResourceHandle;
    emu::Event* ev = (emu::Event*)e;
    ev->recorded = true;
    ev->lagged = false;
    ev->by = pthread_self();
    ev->stream = (const void*)s; // the event carries its stream's clock
    ev->hang[0] = s ? ((emu::Stream*)s)->hang[0] : nullptr;
    ev->hang[1] = s ? ((emu::Stream*)s)->hang[1] : nullptr;
    ev->clock = emu::clock_of(s).known;
    ev->clock[(const void*)s] = emu::clock_of(s).seq;
    struct timespec ts; // work completes when it is issued: the stream reaches the event now
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ev->t = ts.tv_sec + 1e-9 * ts.tv_nsec;
    return cudaSuccess;
}
// Milliseconds between two recorded events: here the host's time between the two records (the
// work between them ran as it was issued); on a GPU, when the stream reached each. As on a GPU,
// an event never recorded, or created with cudaEventDisableTiming, is an error.
static cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    emu::context_check("cudaEventElapsedTime");
    emu::Event* ev[2] = {(emu::Event*)a, (emu::Event*)b};
    for (int k = 0; k < 2; k++) {
        if (!ev[k] || !emu::g_events.count((const void*)ev[k]))
            return emu::note(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event %p is not a live event", (void*)ev[k]);
        if (!ev[k]->recorded)
            return emu::note(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event %p was never recorded", (void*)ev[k]);
        if (ev[k]->flags & cudaEventDisableTiming)
            return emu::note(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event %p was created with cudaEventDisableTiming", (void*)ev[k]);
    }
    *ms = (float)((ev[1]->t - ev[0]->t) * 1e3);
    return cudaSuccess;
}
// Work completes when it is issued, but a GPU runs behind the host: asked by the thread that recorded it
// about work the host has not yet learnt is done (no synchronisation since), an event answers
// cudaErrorNotReady once (as a GPU still busy would), and that answer is also the thread's last error
// (CUDA keeps it there: a later cudaGetLastError reports it unless the caller cleared it). Asked again,
// or after a synchronisation, it is reached, and the host learns what it orders. (Another thread's
// queries, the NCCL watchdog's: reached, and they teach nothing.) An event never recorded is reached.
static cudaError_t cudaEventQuery(cudaEvent_t e) {
    emu::context_check("cudaEventQuery");
    emu::stats_arm();
    if (!e || !emu::g_events.count((const void*)e))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): not a live event", (void*)e);
    emu::Event* ev = (emu::Event*)e;
    if (ev->recorded && !emu::hang_released(ev->hang)) return cudaErrorNotReady; // behind a stalled collective
    if (ev->recorded && pthread_equal(ev->by, pthread_self()) && !ev->lagged) {
        auto seq = ev->clock.find(ev->stream);
        if (seq != ev->clock.end() && !emu::host_knows(ev->stream, seq->second)) {
            ev->lagged = true;
            emu::g_not_ready_answers++;
            return emu::g_last_error = cudaErrorNotReady;
        }
    }
    if (ev->recorded && pthread_equal(ev->by, pthread_self())) { // (the watchdog's queries: another thread, no state)
        emu::clock_merge(emu::g_host_clock.known, ev->clock);
        emu::land_pinned_copies();
    }
    return cudaSuccess;
}
// The host waits for the work recorded before the event on its stream (a never-recorded event: at
// once), and so learns the event's clock.
static cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    emu::context_check("cudaEventSynchronize");
    if (!e || !emu::g_events.count((const void*)e))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): not a live event", (void*)e);
    emu::g_host_syncs++;
    emu::Event* ev = (emu::Event*)e;
    if (ev->recorded) {
        emu::wait_released(ev->hang);
        emu::host_waited((cudaStream_t)ev->stream);
        emu::clock_merge(emu::g_host_clock.known, ev->clock);
        emu::land_pinned_copies();
    }
    return cudaSuccess;
}
// Waiting on an event never recorded succeeds at once on a GPU (it orders nothing): here it stops.
static cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0) {
    emu::context_check("cudaStreamWaitEvent");
    (void)flags;
    if (!e || !emu::g_events.count((const void*)e))
        return emu::note(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: event %p is not a live event", (void*)e);
    if (!emu::stream_ok(s, "cudaStreamWaitEvent")) return cudaErrorInvalidResourceHandle;
    if (!((emu::Event*)e)->recorded) emu::fail("cudaStreamWaitEvent: event %p was never recorded: the wait orders nothing", (void*)e);
    emu::clock_merge(emu::clock_of(s).known, ((emu::Event*)e)->clock);
    emu::Event* ev = (emu::Event*)e;
    if (s && !emu::hang_released(ev->hang)) { // waiting behind a stalled collective: s hangs with it
        ((emu::Stream*)s)->hang[0] = ev->hang[0];
        ((emu::Stream*)s)->hang[1] = ev->hang[1];
    }
    return cudaSuccess;
}

template <class T> static cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
    emu::context_check("cudaFuncSetAttribute");
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        return emu::note(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute %d is not emulated", (int)attr);
    if (value < 0 || (size_t)value > emu::props().sharedMemPerBlockOptin)
        return emu::note(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared memory, over the device's %zu",
                         value, emu::props().sharedMemPerBlockOptin);
    emu::g_max_dyn_smem[(const void*)kernel] = value;
    return cudaSuccess;
}

// ----------------------------------------------------------------------------
// SIGSEGV: say which rule was broken (guard page of a buffer, freed memory, device memory touched
// by host code, dynamic shared memory overrun, a fiber's stack overflow), then stop.

namespace emu {
static void segv_handler(int sig, siginfo_t* si, void*) {
    (void)sig;
    const void* a = si->si_addr;
    Worker* w = tl_worker;
    Alloc* m = (Alloc*)find_mapping(a);
    bool in_data = m && (const char*)a >= m->map + m->data_off && (const char*)a < m->map + m->data_off + m->data_size;
    bool in_buffer = m && (uintptr_t)a >= m->base && (uintptr_t)a < m->base + m->size;
    if (in_buffer && g_device_depth > 0) { set_access(*m, true); return; } // first touch in device mode
    if (in_buffer)
        fail("host code touched device memory at %p (allocation #%ld [%p, +%zu bytes), offset %zu): on a GPU this "
             "crashes. HINT: copy it with cudaMemcpy / dev_to_host first (gdb test/test_emu shows the line)",
             a, m->id, (void*)m->base, m->size, (size_t)((uintptr_t)a - m->base));
    if (m)
        fail("access at %p, %s allocation #%ld [%p, +%zu bytes) (out of bounds%s)", a,
             (uintptr_t)a < m->base ? "before" : "past the end of", m->id, (void*)m->base, m->size,
             in_data ? "" : ", into a guard page");
    if (w && (const char*)a >= w->smem + kSmemBytes && (const char*)a < w->smem + kSmemBytes + kPage)
        fail("access past the end of dynamic shared memory (%zu bytes) at offset %zu", w->dyn_bytes,
             (size_t)((const char*)a - w->dyn));
    if (w)
        for (const Fiber& f : w->fibers)
            if ((const char*)a >= f.stack - kPage && (const char*)a < f.stack)
                fail("stack overflow of a thread (%zu KiB stacks)", kStackBytes >> 10);
    if (tl_where) fail("invalid memory access at %p (not device memory: freed, or a host address)", a);
    fail("segmentation fault at %p outside any kernel and outside device memory (not an emulator check: a plain host bug)", a);
}

static void install_segv_handler() {
    static bool done = false;
    if (done) return;
    done = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    const char* o = getenv("ZT_EMU_ORDER");
    if (o && !strcmp(o, "forward")) g_order_env = 0;
    if (o && !strcmp(o, "reverse")) g_order_env = 1;
    const char* cp = getenv("ZT_EMU_CP_ASYNC");
    if (cp && !strcmp(cp, "wait")) g_cp_async_env = 0;
    if (cp && !strcmp(cp, "issue")) g_cp_async_env = 1;
}
// The main thread's alternate signal stack and the handler, before main runs.
static int g_init = (worker(), 0);
} // namespace emu

#endif // ZT_CUDA_EMU_H
