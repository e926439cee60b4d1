// test/cuda_emu/fake_nccl.h — the NCCL calls zerotrain makes, emulated between emulated ranks that
// are real processes (mpirun or dev/launch.sh starts them), through a shared-memory file in /dev/shm named by the
// unique id. Included through test/cuda_emu/include/nccl.h; only the emulator build sees it.
//
// WHAT IS EMULATED (NCCL 2.28's documented behaviour, values from its nccl.h):
//   ncclGetUniqueId, ncclCommInitRank, ncclCommInitRankConfig (blocking or not: a non-blocking
//   init returns ncclInProgress and completes in ncclCommGetAsyncError once every rank arrived),
//   ncclAllGather, ncclReduceScatter, ncclAllReduce (sum, FP32 / BF16 / FP64 / int), ncclGroupStart
//   and ncclGroupEnd (the calls between them are issued at ncclGroupEnd, in order),
//   ncclCommGetAsyncError, ncclCommAbort, ncclCommFinalize, ncclCommDestroy, ncclGetErrorString,
//   ncclGetVersion, ncclCommSplit (collective over the parent: every rank's color and key through the
//   parent's file; members of a color ranked by key, then parent rank; the new communicator
//   initialised as ncclCommInitRankConfig with the given config, so non-blocking: in progress until
//   every member arrived), ncclCommCount, ncclCommUserRank.
//   In-place forms as NCCL defines them: AllGather with sendbuff == recvbuff + rank*count,
//   ReduceScatter with recvbuff == sendbuff + rank*recvcount, AllReduce with sendbuff == recvbuff;
//   any other overlap of send and receive buffers stops the run (NCCL's result is undefined).
//
// STREAM ORDER. The emulator runs every stream operation when it is issued (cuda_emu.h), so a
// collective runs when its stream reaches it, which is when it is called (or at ncclGroupEnd): its
// process waits there for the other ranks' matching call. The collective reads its send buffer and
// writes its receive buffer as an operation of its stream: the cross-stream check of cuda_emu.h
// stops a kernel on another stream that reads the receive buffer before an event says the
// collective is done, and a collective that overwrites a buffer another stream may still use.
//
// SUMMATION ORDER. NCCL does not promise one; we emulate its ring: the reduce-scatter sum of shard
// r starts at rank r+1 and goes around the ring to r; the all-reduce uses another order (a tree:
// pairs of ranks, then pairs of pairs), as NCCL may. So at R >= 3 an all-reduce and a reduce-scatter
// of the same data differ in their last bits, here as on a GPU.
//
// PROTOCOL. The file holds a header per rank (what it is calling: sequence number, kind, count,
// type) and a data slot per rank. Each collective goes in chunks: every rank copies its chunk in,
// a barrier, every rank reads what it needs, a barrier. Ranks that call different collectives (or
// counts, or types) at the same point stop with a message naming both (real NCCL would hang or
// corrupt memory). A rank that waits longer than ZT_EMU_NCCL_TIMEOUT seconds (default 600) stops.
// NON-BLOCKING COMMUNICATORS. NCCL's rule: when a call on a non-blocking communicator returns
// ncclInProgress, poll ncclCommGetAsyncError until it says ncclSuccess before calling NCCL again (or
// launching on its streams). Here every collective and ncclCommFinalize on a non-blocking
// communicator returns ncclInProgress (NCCL may, whenever it likes), the state stays in progress for
// two polls, and a call made before the state is ncclSuccess stops the run naming it: so every
// NCCL call of the program is proven to wait (zero.h: nccl_settle).
// ncclCommAbort makes a collective waiting in another rank return ncclRemoteError (a flag in the
// file), as an aborted kernel would end. THREADS: NCCL forbids two threads in calls on one
// communicator at once, and the abort frees it for every thread: a call entering while another
// thread is inside one, an abort while another thread is inside one, and any call after the abort
// stop the run (Turn). (A collective waiting for a peer waits inside its call here; on a GPU the
// call returns and the kernel waits.)
// CONNECTIONS. NCCL (2.22 on) connects to its peers lazily: the buffers of a protocol are allocated
// at the first collective that uses it (tens to hundreds of MiB of device memory), unless
// NCCL_RUNTIME_CONNECT=0 was set before the communicator's initialisation, which connects them all
// there. Emulated as kConnBytes counted as device memory in use (what cudaMemGetInfo reports): at
// initialisation with NCCL_RUNTIME_CONNECT=0, else at the first collective of more than kSmallBytes
// per rank (the small, low-latency protocol, already connected, carries the smaller ones).
// Fault injection: ZT_EMU_NCCL_STALL=rank:n hangs that rank's n-th collective until an abort (inside
// the call); rank:n:async returns from the call and hangs the stream behind it instead; rank "all":
// every rank's.
//
// defines: ncclComm_t, ncclUniqueId, ncclResult_t, ncclConfig_t, NCCL_CONFIG_INITIALIZER,
//          ncclDataType_t, ncclRedOp_t, and the functions above
#ifndef ZT_FAKE_NCCL_H
#define ZT_FAKE_NCCL_H

#include <fcntl.h>
#include <sys/syscall.h>
#include <limits.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <atomic>
#include "cuda_emu.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;

typedef enum {
    ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3, ncclInvalidArgument = 4,
    ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7, ncclNumResults = 8
} ncclResult_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9
} ncclDataType_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char* netName;
    int splitShare, trafficClass;
    const char* commName;
    int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                                     \
    {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT,     \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
     NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT}

namespace fake_nccl {

enum Kind { K_ALL_GATHER = 1, K_REDUCE_SCATTER, K_ALL_REDUCE };
static const char* kind_name(int k) {
    return k == K_ALL_GATHER ? "ncclAllGather" : k == K_REDUCE_SCATTER ? "ncclReduceScatter" : k == K_ALL_REDUCE ? "ncclAllReduce" : "?";
}
static const int kMaxRanks = 64;
static const size_t kSlotBytes = (size_t)1 << 20; // one rank's chunk (all R destinations of a reduce-scatter)
static const size_t kConnBytes = (size_t)320 << 20; // the lazily connected buffers (see CONNECTIONS)
static const size_t kSmallBytes = (size_t)8 << 10; // a collective of at most this many bytes per rank connects nothing

struct RankHdr { long seq; int kind, dtype; long count; int pad[2]; };
struct Shared {
    unsigned magic; int nranks;
    std::atomic<int> attached;           // ranks that opened the file
    std::atomic<long> barrier_count;     // arrivals at the current barrier generation
    std::atomic<long> barrier_gen;
    std::atomic<int> aborted;            // a rank called ncclCommAbort: 1 + its rank
    RankHdr hdr[kMaxRanks];
};

struct Op { int kind; const void* send; void* recv; size_t count; ncclDataType_t dtype; cudaStream_t stream; };

} // namespace fake_nccl

struct ncclComm {
    int rank, nranks, blocking;
    int ready;                    // init finished (every rank attached)
    int finalized;                // ncclCommFinalize was called
    std::atomic<int> aborted;     // ncclCommAbort was called on this communicator
    ncclResult_t async_error;
    char path[96];
    fake_nccl::Shared* sh;
    char* slots;                  // nranks * kSlotBytes
    size_t map_bytes;
    long seq;                     // collectives issued
    long gen;                     // barrier generations passed
    std::atomic<int> in_progress; // non-blocking: polls of ncclCommGetAsyncError left before ncclSuccess
    const char* in_progress_call; // the call that returned ncclInProgress
    std::atomic<long> inside;     // the OS thread inside a call on this communicator (0: none)
    const char* inside_call;      // which call
    size_t conn_bytes;            // device memory its connections hold (see CONNECTIONS)
    int splits;                   // ncclCommSplit calls so far (each new communicator's file is named by it)
};
typedef struct ncclComm* ncclComm_t;

namespace fake_nccl {
static int g_group_depth = 0;

// NCCL's thread rules: one thread at a time in the calls on a communicator (two at once: undefined),
// and none after ncclCommAbort, which frees the communicator for every thread. Each call holds a
// Turn for its length; the stalled collective of ZT_EMU_NCCL_STALL stays inside its call, as a
// blocking call would.
static long thread_id() { return (long)syscall(SYS_gettid); }
struct Turn {
    ncclComm_t c;
    Turn(ncclComm_t comm, const char* what) : c(comm) {
        if (!c) return;
        if (c->aborted.load())
            emu::fail("fake NCCL: %s on rank %d after ncclCommAbort: the abort freed the communicator for every thread "
                      "(on a GPU: a use after free). HINT: once aborted, no thread may call NCCL on it again", what, c->rank);
        long me = thread_id(), none = 0;
        if (!c->inside.compare_exchange_strong(none, me) && none != me)
            emu::fail("fake NCCL: %s on rank %d from thread %ld while thread %ld is inside %s on the same communicator: "
                      "NCCL forbids two threads on one communicator at once. HINT: one lock around every NCCL call "
                      "(zero.h: nccl_mu)", what, c->rank, me, none, c->inside_call);
        if (none == me) { c = nullptr; return; } // (nested: ncclGroupEnd runs the group's calls)
        c->inside_call = what;
    }
    ~Turn() { if (c) c->inside.store(0); }
};
static std::vector<std::pair<ncclComm_t, Op>> g_group_ops;

static size_t dtype_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static double timeout_s() {
    const char* e = getenv("ZT_EMU_NCCL_TIMEOUT");
    return e && *e ? atof(e) : 600.0;
}

// Every rank arrives, then all go on. Returns ncclRemoteError when a rank aborted the communicator.
static ncclResult_t barrier(ncclComm_t c, const char* what) {
    Shared* sh = c->sh;
    long gen = c->gen++;
    if (sh->barrier_count.fetch_add(1) + 1 == (long)c->nranks * (gen + 1)) sh->barrier_gen.store(gen + 1);
    double t0 = emu::now_s();
    long spins = 0;
    while (sh->barrier_gen.load() <= gen) {
        if (sh->aborted.load() || c->aborted.load()) return ncclRemoteError;
        if (emu::now_s() - t0 > timeout_s())
            emu::fail("fake NCCL: rank %d waited %.0f s in %s (collective #%ld) for the other ranks: a rank stopped "
                      "calling collectives, or the ranks call them in different orders", c->rank, timeout_s(), what, c->seq);
        if (++spins > 100) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); } else sched_yield();
    }
    return ncclSuccess;
}

static float bf16_to_f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t f_to_bf16(float f) { // round to nearest even, NaN kept quiet
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static double load(const char* p, ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: { float v; memcpy(&v, p, 4); return v; }
    case ncclFloat64: { double v; memcpy(&v, p, 8); return v; }
    case ncclBfloat16: { uint16_t v; memcpy(&v, p, 2); return bf16_to_f(v); }
    case ncclInt32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ncclInt64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: emu::fail("fake NCCL: reductions of type %d are not emulated", (int)t);
    }
}
static void store(char* p, ncclDataType_t t, double v) {
    switch (t) {
    case ncclFloat32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case ncclFloat64: memcpy(p, &v, 8); break;
    case ncclBfloat16: { uint16_t h = f_to_bf16((float)v); memcpy(p, &h, 2); break; }
    case ncclInt32: { int32_t i = (int32_t)v; memcpy(p, &i, 4); break; }
    case ncclInt64: { int64_t i = (int64_t)v; memcpy(p, &i, 8); break; }
    default: emu::fail("fake NCCL: reductions of type %d are not emulated", (int)t);
    }
}
// a + b in the type's own arithmetic (FP32 sums in float, as NCCL's kernels add)
static double add(double a, double b, ncclDataType_t t) {
    if (t == ncclFloat32 || t == ncclBfloat16) return (double)emu_opaque((float)a + (float)b);
    return a + b;
}
// Sum of the R values vals[k*stride] in the order of `kind`: the ring from rank `start` (reduce-
// scatter), or a pairwise tree (all-reduce).
static double reduce(const char* vals, size_t stride, int R, int start, int kind, ncclDataType_t t) {
    if (kind == K_REDUCE_SCATTER) {
        double s = load(vals + (size_t)start * stride, t);
        for (int i = 1; i < R; i++) s = add(s, load(vals + (size_t)((start + i) % R) * stride, t), t);
        return s;
    }
    double part[kMaxRanks];
    for (int k = 0; k < R; k++) part[k] = load(vals + (size_t)k * stride, t);
    for (int w = 1; w < R; w *= 2)
        for (int k = 0; k + w < R; k += 2 * w) part[k] = add(part[k], part[k + w], t);
    return part[0];
}

static bool overlap(const void* a, size_t an, const void* b, size_t bn) {
    return (const char*)a < (const char*)b + bn && (const char*)b < (const char*)a + an;
}

// The connections' buffers, once per communicator (see CONNECTIONS): device memory in use from now on.
static void conn_open(ncclComm_t c) {
    if (c->conn_bytes) return;
    if (kConnBytes > emu::g_mem_total - emu::g_mem_used)
        emu::fail("fake NCCL: rank %d cannot connect: its buffers (%zu bytes) do not fit in the emulated GPU's free memory", c->rank, kConnBytes);
    c->conn_bytes = kConnBytes;
    emu::g_mem_used += kConnBytes;
}
static void conn_close(ncclComm_t c) { emu::g_mem_used -= c->conn_bytes; c->conn_bytes = 0; }

// Run one collective of this rank (the stream has reached it).
static ncclResult_t run(ncclComm_t c, const Op& op) {
    if (!c->ready) emu::fail("fake NCCL: %s on a communicator whose initialisation has not completed (ncclInProgress: poll "
                             "ncclCommGetAsyncError until ncclSuccess first)", kind_name(op.kind));
    if (c->aborted.load() || c->sh->aborted.load()) return ncclRemoteError;
    if (emu::stream_hung(op.stream)) return ncclSuccess; // queued behind a stalled collective (ZT_EMU_NCCL_STALL async): never reached
    int R = c->nranks, r = c->rank;
    size_t es = dtype_size(op.dtype), n = op.count;
    size_t send_n = op.kind == K_REDUCE_SCATTER ? n * R : n, recv_n = op.kind == K_ALL_GATHER ? n * R : n;
    const char* what = kind_name(op.kind);
    if (!emu::device_range(op.send, send_n * es, what, "send buffer") || !emu::device_range(op.recv, recv_n * es, what, "receive buffer"))
        return ncclInvalidArgument;
    bool in_place = (op.kind == K_ALL_GATHER && (const char*)op.send == (const char*)op.recv + (size_t)r * n * es) ||
                    (op.kind == K_REDUCE_SCATTER && (const char*)op.recv == (const char*)op.send + (size_t)r * n * es) ||
                    (op.kind == K_ALL_REDUCE && op.send == op.recv);
    if (!in_place && overlap(op.send, send_n * es, op.recv, recv_n * es))
        emu::fail("fake NCCL: %s on rank %d: send [%p, +%zu) and receive [%p, +%zu) buffers overlap but not in NCCL's "
                  "in-place form (the result is undefined)", what, r, op.send, send_n * es, op.recv, recv_n * es);
    if (n * es > kSmallBytes) conn_open(c); // (lazily, as NCCL_RUNTIME_CONNECT=1, the default, does)
    // the stream reaches the collective: it reads send and writes recv as one of its operations
    emu::stream_tick(op.stream);
    emu::cross_stream_check(op.stream, op.send, send_n * es, false, what);
    emu::cross_stream_write(op.stream, op.recv, recv_n * es, what);
    // fault injection for the watchdog's tests: ZT_EMU_NCCL_STALL=rank:n makes that rank's n-th collective
    // hang (as a kernel waiting for a peer that never comes) until the communicator is aborted
    // (rank:n:async: the call returns and the collective's stream never reaches it, as a non-blocking
    // communicator's kernel waiting for its peer: whatever is recorded on the stream after it is never
    // reached until the abort -- the watchdog's abort-under-lock path); rank "all": every rank's n-th
    const char* stall = getenv("ZT_EMU_NCCL_STALL");
    int stalls = stall && (!strncmp(stall, "all:", 4) || atoi(stall) == r); // (atoi("all") is 0: checked first)
    if (stalls && strchr(stall, ':') && atol(strchr(stall, ':') + 1) == c->seq + 1 && strstr(stall, ":async")) {
        fprintf(stderr, "fake NCCL: rank %d stalls in %s #%ld on its stream (ZT_EMU_NCCL_STALL, async)\n", r, what, c->seq + 1);
        c->seq++; // (one stall per collective number)
        emu::stream_hang(op.stream, &c->aborted, &c->sh->aborted);
        return ncclSuccess;
    }
    if (stalls && strchr(stall, ':') && atol(strchr(stall, ':') + 1) == c->seq + 1) {
        fprintf(stderr, "fake NCCL: rank %d stalls in %s #%ld (ZT_EMU_NCCL_STALL)\n", r, what, c->seq + 1);
        while (!c->aborted.load() && !c->sh->aborted.load()) { struct timespec ts = {0, 1000000}; nanosleep(&ts, NULL); }
        return ncclRemoteError;
    }
    // say what we call; every rank checks that all call the same
    RankHdr* h = &c->sh->hdr[r];
    h->seq = ++c->seq; h->kind = op.kind; h->dtype = (int)op.dtype; h->count = (long)n;
    ncclResult_t e = barrier(c, what);
    if (e != ncclSuccess) return e;
    for (int k = 0; k < R; k++) {
        const RankHdr* o = &c->sh->hdr[k];
        if (o->seq != h->seq || o->kind != h->kind || o->dtype != h->dtype || o->count != h->count)
            emu::fail("fake NCCL: collective #%ld differs between ranks: rank %d calls %s of %zu elements (type %d), rank %d "
                      "calls %s of %ld (type %d) as its #%ld: every rank must issue the same collectives in the same order "
                      "(NCCL would hang or corrupt memory)", h->seq, r, what, n, (int)op.dtype, k, kind_name(o->kind),
                      o->count, o->dtype, o->seq);
    }
    if (n == 0) return barrier(c, what); // (with chunks, their barriers keep the headers until all have read them)
    emu::DeviceMode dm;
    // chunk: elements per destination per round, so that one rank's part fits its slot
    size_t per = op.kind == K_REDUCE_SCATTER ? (size_t)R : 1;
    size_t chunk = kSlotBytes / es / per;
    char* mine = c->slots + (size_t)r * kSlotBytes;
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        size_t cn = n - c0 < chunk ? n - c0 : chunk;
        // 1. my contribution into my slot: [dest][cn] for a reduce-scatter, [cn] otherwise
        if (op.kind == K_REDUCE_SCATTER)
            for (int d = 0; d < R; d++) memcpy(mine + (size_t)d * cn * es, (const char*)op.send + ((size_t)d * n + c0) * es, cn * es);
        else memcpy(mine, (const char*)op.send + c0 * es, cn * es);
        if ((e = barrier(c, what)) != ncclSuccess) return e;
        // 2. my result from every slot
        if (op.kind == K_ALL_GATHER) {
            for (int k = 0; k < R; k++)
                memcpy((char*)op.recv + ((size_t)k * n + c0) * es, c->slots + (size_t)k * kSlotBytes, cn * es);
        } else {
            size_t off = op.kind == K_REDUCE_SCATTER ? (size_t)r * cn * es : 0;
            int start = (r + 1) % R;
            for (size_t i = 0; i < cn; i++) {
                double v = reduce(c->slots + off + i * es, kSlotBytes, R, start, op.kind, op.dtype);
                store((char*)op.recv + (c0 + i) * es, op.dtype, v);
            }
        }
        if ((e = barrier(c, what)) != ncclSuccess) return e;
    }
    return ncclSuccess;
}

// A call on a non-blocking communicator whose last call is still in progress: NCCL's usage error.
static void check_settled(ncclComm_t c, const char* what) {
    if (c->in_progress.load() > 0)
        emu::fail("fake NCCL: %s on rank %d while %s is still in progress: after ncclInProgress, poll ncclCommGetAsyncError "
                  "until it returns ncclSuccess before calling NCCL again", what, c->rank, c->in_progress_call);
}
// A successful call on a non-blocking communicator answers ncclInProgress (for two polls).
static ncclResult_t answer(ncclComm_t c, ncclResult_t e, const char* what) {
    if (e != ncclSuccess || c->blocking) return e;
    c->in_progress_call = what;
    c->in_progress.store(2);
    return ncclInProgress;
}

static ncclResult_t issue(ncclComm_t c, const Op& op) {
    if (!c) return ncclInvalidArgument;
    Turn turn(c, kind_name(op.kind));
    if (!emu::stream_ok(op.stream, kind_name(op.kind))) return ncclInvalidArgument;
    check_settled(c, kind_name(op.kind));
    if (g_group_depth > 0) { g_group_ops.push_back({c, op}); return ncclSuccess; }
    ncclResult_t e = run(c, op);
    if (e != ncclSuccess) c->async_error = e;
    return answer(c, e, kind_name(op.kind));
}

// Attach to the file: the last rank to arrive completes everyone's init.
static void try_finish_init(ncclComm_t c) {
    if (!c->ready && c->sh->attached.load() >= c->nranks) {
        c->ready = 1;
        if (c->rank == 0) unlink(c->path); // every rank has it open: the name is no longer needed
    }
}
} // namespace fake_nccl

static const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}
static ncclResult_t ncclGetVersion(int* version) { *version = NCCL_VERSION_CODE; return ncclSuccess; }

static ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    uint64_t v[2] = {0, 0};
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0 || read(fd, v, sizeof(v)) != (ssize_t)sizeof(v)) { if (fd >= 0) close(fd); return ncclSystemError; }
    close(fd);
    snprintf(id->internal, sizeof(id->internal), "zt_fake_nccl_%d_%016llx%016llx", (int)getpid(), (unsigned long long)v[0],
             (unsigned long long)v[1]);
    return ncclSuccess;
}

static ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
    using namespace fake_nccl;
    *comm = nullptr;
    if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    if (strncmp(id.internal, "zt_fake_nccl_", 13)) return ncclInvalidArgument; // not from ncclGetUniqueId
    if (config && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))) return ncclInvalidArgument; // not initialised
    ncclComm_t c = new ncclComm();
    c->rank = rank; c->nranks = nranks;
    c->blocking = !(config && config->blocking == 0);
    c->aborted.store(0);
    c->in_progress.store(0);
    c->async_error = ncclSuccess;
    snprintf(c->path, sizeof(c->path), "/dev/shm/%.80s", id.internal);
    c->map_bytes = (sizeof(Shared) + 4095) / 4096 * 4096 + (size_t)nranks * kSlotBytes;
    int fd = open(c->path, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) {
        fprintf(stderr, "fake NCCL: cannot create %s: %s\n", c->path, strerror(errno));
        if (fd >= 0) close(fd);
        delete c;
        return ncclSystemError;
    }
    void* m = mmap(nullptr, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { delete c; return ncclSystemError; }
    c->sh = (Shared*)m; // a new file is zeros: the atomics start at 0
    c->slots = (char*)m + (sizeof(Shared) + 4095) / 4096 * 4096;
    c->sh->attached.fetch_add(1);
    c->conn_bytes = 0;
    const char* rc = getenv("NCCL_RUNTIME_CONNECT");
    if (rc && !strcmp(rc, "0")) conn_open(c); // every connection at initialisation (see CONNECTIONS)
    *comm = c;
    if (!c->blocking) { try_finish_init(c); return c->ready ? ncclSuccess : ncclInProgress; }
    double t0 = emu::now_s();
    while (!c->ready) {
        try_finish_init(c);
        if (emu::now_s() - t0 > timeout_s())
            emu::fail("fake NCCL: rank %d of %d waited %.0f s in ncclCommInitRank for the other ranks", rank, nranks, timeout_s());
        if (!c->ready) { struct timespec ts = {0, 200000}; nanosleep(&ts, NULL); }
    }
    return ncclSuccess;
}
static ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

// ncclInProgress while a non-blocking init waits for its peers, then the communicator's error.
static ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* err) {
    if (!c) return ncclInvalidArgument;
    fake_nccl::Turn turn(c, "ncclCommGetAsyncError");
    fake_nccl::try_finish_init(c);
    int left = c->in_progress.load();
    if (!c->ready) *err = ncclInProgress;
    else if (c->aborted.load() || c->sh->aborted.load()) *err = ncclRemoteError;
    else if (left > 0 && c->in_progress.compare_exchange_strong(left, left - 1)) *err = ncclInProgress;
    else *err = c->async_error;
    return ncclSuccess;
}

// Ends the communicator, for every thread (a later call from any thread stops the run: NCCL frees
// it); the other ranks' collectives return ncclRemoteError (their processes see the flag in the
// shared file). Called while another thread is inside a call on it: stops the run.
static ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    {
        fake_nccl::Turn turn(c, "ncclCommAbort");
    }
    c->aborted.store(1);
    int expected = 0;
    c->sh->aborted.compare_exchange_strong(expected, 1 + c->rank);
    return ncclSuccess; // (the memory stays mapped, so that a later call is caught and named)
}
// Every rank's collectives are done (they are, at issue); the ranks leave together. Then destroy.
static ncclResult_t ncclCommFinalize(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    fake_nccl::Turn turn(c, "ncclCommFinalize");
    if (c->finalized || c->aborted.load() || !c->ready || c->sh->aborted.load()) return ncclSuccess;
    fake_nccl::check_settled(c, "ncclCommFinalize");
    c->finalized = 1;
    return fake_nccl::answer(c, fake_nccl::barrier(c, "ncclCommFinalize"), "ncclCommFinalize");
}
static ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclSuccess;
    { fake_nccl::Turn turn(c, "ncclCommDestroy"); }
    if (!c->aborted.load() && !c->sh->aborted.load()) fake_nccl::check_settled(c, "ncclCommDestroy");
    if (!c->finalized && !c->aborted.load() && c->ready && !c->sh->aborted.load()) {
        ncclResult_t e = fake_nccl::barrier(c, "ncclCommDestroy"); // ranks leave together, as NCCL's destroy does
        (void)e;
    }
    if (c->rank == 0) unlink(c->path);
    munmap(c->sh, c->map_bytes);
    fake_nccl::conn_close(c);
    delete c;
    return ncclSuccess;
}

// Every rank of `comm` calls it with its color and key (the same number of times, in the same order).
static ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
    using namespace fake_nccl;
    *newcomm = nullptr;
    if (!comm) return ncclInvalidArgument;
    int n = 0, me = 0;
    {
        Turn turn(comm, "ncclCommSplit");
        if (!comm->ready) emu::fail("fake NCCL: ncclCommSplit on rank %d before its communicator's initialisation completed", comm->rank);
        check_settled(comm, "ncclCommSplit");
        int* mine = (int*)(comm->slots + (size_t)comm->rank * kSlotBytes);
        mine[0] = color; mine[1] = key;
        if (barrier(comm, "ncclCommSplit") != ncclSuccess) return ncclRemoteError;
        for (int q = 0; q < comm->nranks; q++) {
            const int* o = (const int*)(comm->slots + (size_t)q * kSlotBytes);
            if (o[0] != color) continue;
            n++;
            if (o[1] < key || (o[1] == key && q < comm->rank)) me++;
        }
        if (barrier(comm, "ncclCommSplit") != ncclSuccess) return ncclRemoteError; // (the slots are reused)
        comm->splits++;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    snprintf(id.internal, sizeof(id.internal), "%.60s_s%d_c%d", comm->path + strlen("/dev/shm/"), comm->splits, color);
    return ncclCommInitRankConfig(newcomm, n, id, me, config);
}
static ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (!comm) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}
static ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (!comm) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

static ncclResult_t ncclGroupStart() { fake_nccl::g_group_depth++; return ncclSuccess; }
static ncclResult_t ncclGroupEnd() {
    using namespace fake_nccl;
    if (g_group_depth == 0) return ncclInvalidUsage;
    if (--g_group_depth > 0) return ncclSuccess;
    std::vector<std::pair<ncclComm_t, Op>> ops;
    ops.swap(g_group_ops);
    ncclResult_t first = ncclSuccess;
    for (auto& co : ops) {
        ncclResult_t e = run(co.first, co.second);
        if (e != ncclSuccess) { co.first->async_error = e; if (first == ncclSuccess) first = e; }
    }
    return ops.empty() ? first : answer(ops[0].first, first, "ncclGroupEnd");
}

static ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                  ncclComm_t comm, cudaStream_t stream) {
    return fake_nccl::issue(comm, {fake_nccl::K_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, stream});
}
static ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                      ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (op != ncclSum) return ncclInvalidArgument; // the only one zerotrain uses
    return fake_nccl::issue(comm, {fake_nccl::K_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, stream});
}
static ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                                  ncclComm_t comm, cudaStream_t stream) {
    if (op != ncclSum) return ncclInvalidArgument;
    return fake_nccl::issue(comm, {fake_nccl::K_ALL_REDUCE, sendbuff, recvbuff, count, datatype, stream});
}

#endif // ZT_FAKE_NCCL_H
