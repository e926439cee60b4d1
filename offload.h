// offload.h — the optimizer state off the device: -offload cpu keeps each rank's shard of master, m
// and v in host memory, -offload nvme in one file per rank, and the optimizer runs on the host
// (ZeRO-Offload: Ren et al., USENIX ATC 2021; ZeRO-Infinity: Rajbhandari et al., SC 2021), with exact
// semantics: an offloaded run is bit-identical to the same run without offload, at every stage and R.
//
// WHAT LIVES WHERE (per rank). The device keeps the parameters and the gradients as the ZeRO stage
// says (zero.h; with -offload-params, at the end of this file, their shards leave it too); master, m
// and v of the rank's optimizer range (its shard: offload needs -z 1, 2 or 3) live in host memory,
// plain pageable memory. Pinned (page-locked) are only the staging buffers:
// cpu: the FP32 copy of the rank's whole gradient shard (4 bytes an element: the gradients' staging,
// written by the D2H copies during the backward and read by the check and the update) and two
// parameter buffers of one block's shard; nvme: two FP32 gradient and two parameter buffers of a unit.
// On the CPU device "device" memory is the same RAM: -offload cpu is a code path there, not a saving.
// NVME: the file holds master at [0, S), m at [S, 2S), v at [2S, 3S) floats (S: the rank's optimizer
// range); the host holds three slots of one UNIT (K elements of master, m, v) and the staging of one
// unit, K from -offload-buffer: a block's shard longer than K is updated in several units. One I/O
// thread (pread/pwrite, requests in order) reads unit u+1 while u is updated and u-1 is written; the
// page cache is dropped after each unit (posix_fadvise DONTNEED, after sync_file_range for writes).
//
// THE STEP (train_step), the same numbers as without offload, bit for bit:
//   0. [cpu] during the backward: when block b's reduction of the step's last micro-step is issued
//      (zero_reduce_block; ZeRO-1: its reduce-scatter, ZeRO-2/3: the one that adds the last
//      micro-step into the shard), the hook offload_grad_reduced copies b's shard to the host copy
//      once that reduction is complete, while the backward of the next blocks runs (CUDA: on the
//      offload stream, after the collective's `done` event; CPU device: when comm_wait has finished
//      it, checked at the next hook and at the step). The io block, reduced last, is the only copy
//      nothing overlaps. Under -poison the host copy is NaN-filled at the step's first hook;
//   1. the gradient's sum of squares, norm, clip scale and finite flag are computed where they are
//      without offload: on the device, from the shards (zero_grad_sumsq, op_step_scalars; the GPU's
//      sum is deterministic but not the CPU's bitwise), then read back (one wait per step);
//   2. the host waits once for the last gradient copy (offload_grads_arrived: every step, also one
//      that is skipped; each block copied exactly once, or an internal error ends the run);
//   3. unit by unit (cpu: a unit is a block's shard, its gradient read from the host copy; nvme: its
//      gradient goes to the host now, unit u+1's copy issued before u is updated), AdamW runs on
//      the host (adamw_host_max: adamw.cuh's host pass, scalar, AVX2 or AVX-512 with the same bits, the
//      same operation order as the kernel, which spells every IEEE operation out; no fast-math, no
//      FTZ/DAZ in either build), the parameters
//      are rounded to nearest by the same rn() into a staging buffer and copied back segment by
//      segment (padding is never written, as on the device) while the next block is updated;
//   4. the stage's all-gather (zero_after_step), after the last copy.
// Before 3, the overflow check (offload_adamw_check), so a step whose update would not be finite is
// skipped by every rank before any unit changes: usually proved by a bound (adamw_bound_finite, from
// the norm and the state's maxima that the last update kept: adamw_host_max), reading nothing;
// otherwise (the first step after a start or a load, a bound too loose) a first pass over the units
// with the update's arithmetic and nothing written (adamw_check_host), the flag summed over ranks.
// With cpu the pass reads the same host copy as the update: one gradient copy per step. With nvme
// the pass costs one more gradient copy to the host and one more read of the state (that step reads
// 24 bytes per element instead of 12 and writes 12).
// NVME keeps the copies at the step, unit by unit (not during the backward): its host memory is
// bounded by -offload-buffer, which cannot hold the whole gradient shard, and a bounded window
// filled during the backward would have to stall the backward (or fall back to the step) whenever
// the shard exceeds it, which is nvme's whole use case. The cost: the gradient crosses PCIe after
// the backward, not overlapped with it (once per step when the check is proved, twice when its pass
// runs; -plan counts the steady state: 4 bytes an element down, for nvme as for cpu).
// Threads: the host AdamW uses the rank's OpenMP threads (-threads: cores / ranks on the node), pinned
// to the rank's cores (offload_pin_threads), the state first-touched by the thread that updates it
// (offload_touch_state); each pass is one parallel region, vectorised (adamw.cuh: adamw_host_pass).
//
// CUDA ORDER (the copies run on g_offload_stream, a stream of their own; events created once at
// init, no allocation in a step):
//   g. [cpu] block b's gradient D2H waits on the offload stream for its reduction's completion
//      event (the comm slot's `done`, recorded by comm_start_cuda), then event grads_ev is recorded;
//      at the step the host waits for grads_ev (cudaEventSynchronize) before the check reads the
//      host copy, and the compute stream waits for it too (cudaStreamWaitEvent), so the next writer
//      of the shard ([ZeRO-2/3] the next step's first reduce-scatter, which starts behind the
//      compute stream; [ZeRO-1] zero_zero_grads into full_grads) comes after the copy -- on every
//      step, also a skipped one;
//   a. g_offload_stream waits for the compute stream (event `start`) before the step's first copy
//      ([nvme] D2H, [cpu] the first H2D): the gradients are final, the parameters read;
//   b. the host waits for unit u's D2H (d2h[u % 2], nvme) before updating it, and for unit u-2's
//      H2D (h2d[u % 2]) before rounding into that staging buffer again;
//   c. the compute stream waits for the last H2D (event `done_ev`) before the all-gather, the next
//      step's gradient zeroing and its forward.
// The CUDA emulator (make test: test/test_emu offload) runs this path with host and device memory
// kept apart (a missing copy reads NaN or stops the run) and checks cross-stream order through events:
// without (c) it stops the run (tried: a kernel reads parameters the copy stream may still be
// writing); without (g)'s wait for `done` it stops the run where the reduction is a copy or a
// collective (R = 1 at GA = 1 under ZeRO-2/3, any R > 1: offload_emu_grad_copy_faults), not where it
// is only a kernel (R = 1 accumulating micro-steps: the emulator tracks kernels' writes by pointer,
// not by range, and ZeRO-1 at R = 1 issues nothing); a missing compute-stream wait for grads_ev is
// covered there by the host's wait (the emulator counts the host's knowledge, as a GPU does).
// (a) is implied today by train_step's read-back of the scalars (the host has waited for the
// compute stream before it issues any copy): without (a) the emulator runs on, correctly; it is kept
// so that the order does not hang on that read-back. Its streams are synchronous, so it cannot show
// that the copies overlap the backward or the host's AdamW, nor catch a missing host wait (b, or g's
// cudaEventSynchronize: the copy has landed when it is issued): a GPU run has to.
//
// defines: OffloadState, offload_parse, offload_name, offload_host_bytes, offload_pin_threads, offload_init, offload_free,
//          ParamOffload, param_offload_host_bytes, param_offload_init, param_offload_free ([-offload-params], at the end),
//          offload_adamw_check, offload_adamw, offload_report
//
// May call: zero.h (the Zero state and its buffers) and adamw.cuh (the host AdamW). Knows nothing of
// the trainer's types.
#ifndef ZT_OFFLOAD_H
#define ZT_OFFLOAD_H

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#include "zero.h"    // defines: Zero, Offload, zero_opt_*, zero_state_get/put, layout_segments
#include "adamw.cuh" // defines: adamw_host, adamw_check_host, AdamWParams, StepScalars

// "none" | "cpu" | "nvme" -> OFFLOAD_*; -1 for anything else.
static int offload_parse(const char* s) {
    if (!strcmp(s, "none")) return OFFLOAD_NONE;
    if (!strcmp(s, "cpu")) return OFFLOAD_CPU;
    if (!strcmp(s, "nvme")) return OFFLOAD_NVME;
    return -1;
}
static const char* offload_name(Offload k) { return k == OFFLOAD_CPU ? "cpu" : k == OFFLOAD_NVME ? "nvme" : "none"; }

// The largest shard of one block: the staging buffers' length (elements) under -offload cpu.
static int64_t offload_max_shard(const BlockLayout* lay) {
    int64_t maxS = 0;
    for (int b = 0; b < lay->nblocks; b++) maxS = !lay->frozen[b] && lay->S[b] > maxS ? lay->S[b] : maxS; // [LoRA] (a frozen block has no state)
    return maxS;
}

// [nvme] Elements per unit of work for a host buffer budget of `buffer` bytes: three state slots
// (master, m, v: 12 bytes an element each) and the staging (two FP32 gradient and two floatX
// parameter buffers), a multiple of 64 elements. 0 when the budget is below 64 elements' worth.
#define OFFLOAD_NVME_BYTES_PER_ELEM (3 * 12 + 2 * (4 + (int64_t)sizeof(floatX)))
static int64_t offload_nvme_unit(double buffer) { return (int64_t)(buffer / OFFLOAD_NVME_BYTES_PER_ELEM) / 64 * 64; }

// Elements per unit of work: a whole block's shard (cpu), or what the buffer budget allows (nvme).
static int64_t offload_unit(const BlockLayout* lay, Offload k, double buffer) {
    int64_t maxS = offload_max_shard(lay);
    if (k != OFFLOAD_NVME) return maxS;
    int64_t K = offload_nvme_unit(buffer);
    return K < maxS ? K : maxS;
}

// Host bytes one rank holds: cpu: master, m, v of its shard (FP32), the pinned FP32 copy of its
// gradient shard (the gradients' staging: 4 bytes an element) and two pinned parameter buffers of
// the largest block shard; nvme: three state slots of one unit and the staging of one unit (two
// gradient and two parameter buffers: what -offload-buffer bounds). THE closed form: offload_init
// allocates exactly this, the planner prints it.
// grads_host ([-offload-params with -offload]: the gradient shard leaves the device): cpu holds
// OFFLOAD_GRING pinned buffers of the largest block shard for the micro-steps' sums on their way to
// being added to the host copy; nvme keeps the gradient in the file (a fourth array, gfile): each slot
// holds the unit's gradient too (4 bytes an element of the unit), and two block-sized buffers carry a
// block's sum down and its partial sum back.
#define OFFLOAD_GRING 4
// [grads_host] The norm's chunk sums on the host (offload_host_sumsq): every trainable block's chunks,
// and one more per segment (a segment's last chunk may be short).
static int64_t offload_norm_chunks(const BlockLayout* lay) {
    int64_t n = 0;
    for (int b = 0; b < lay->nblocks; b++) n += lay->frozen[b] ? 0 : ceil_div(lay->S[b], NORM_CHUNK) + MAX_BLOCK_TENSORS;
    return n;
}
static size_t offload_host_bytes(const BlockLayout* lay, Offload k, double buffer, int grads_host) {
    if (k == OFFLOAD_NONE) return 0;
    size_t K = (size_t)offload_unit(lay, k, buffer), S = (size_t)lay->train_shard_total; // [LoRA] the trainable blocks'
    size_t maxS = (size_t)offload_max_shard(lay);
    size_t gh = !grads_host ? 0 : k == OFFLOAD_NVME ? 3 * 4 * K + 2 * 4 * maxS // [nvme] the gradient in the file: slots + 4K, a block and its sum
                                                     : 4 * OFFLOAD_GRING * maxS;
    if (grads_host) gh += sizeof(double) * (size_t)offload_norm_chunks(lay); // the norm's chunk sums
    if (k == OFFLOAD_CPU) return 3 * 4 * S + 4 * S + 2 * sizeof(floatX) * K + gh;
    return 3 * 12 * K + 2 * ((grads_host ? 0 : 4) + sizeof(floatX)) * K + gh; // ([gfile] no gradient staging: read with the state)
}

// A unit of work: elements [lo, lo + n) of block b's optimizer range (lo relative to its start).
typedef struct { int b; int64_t lo, n; } OffloadUnit;

// [cpu, CPU device] A gradient copy waiting for reduction h (the slot's issue number seq) to finish.
typedef struct { int b, h, micro; int64_t seq; } OffloadPending;

// [nvme] One request to the I/O thread: read (0) or write (1) unit u's master, m, v to / from slot s.
typedef struct { int write, u, s; } OffloadIO;
#define OFFLOAD_QUEUE 8

typedef struct {
    Offload kind;
    int64_t K;            // elements per unit (offload_unit)
    int nunits;
    OffloadUnit* units;   // every block's range in pieces of at most K, block order
    int64_t* read_seq;    // [nvme] (nunits): the request number of unit u's read in this pass
    float* gbuf[2];       // [nvme] pinned, (K) FP32: unit u's gradient in gbuf[u % 2] [=]
    float* gring[OFFLOAD_GRING]; // [grads_host] pinned, (largest shard) FP32: a micro-step's sum of a block, to be added
    int gring_b[OFFLOAD_GRING]; // [grads_host] the block in each (FIFO: gring_head, gring_count)
    int gring_head, gring_count;
    int arrived;          // offload_grads_arrived ran this step
    int gfile;            // [nvme, grads_host] the gradient lives in the file: g at [3S, 4S), read with the unit's state
    float* gacc;          // [gfile] (largest shard) a block's gradient read back (its partial sum, or for the norm)
    double* npart;        // [grads_host] (offload_norm_chunks) the norm's chunk sums, allocated once
    float* ghost;         // [cpu; grads_host] pinned, (opt_total) FP32: the rank's whole gradient shard, each block
                          //   copied as its last reduction completes (offload_grad_reduced) [=]
    int* copied;          // [cpu] (nblocks): copies of block b's shard issued this step (1 at the check)
    OffloadPending pend[COMM_MAX_INFLIGHT]; // [cpu, CPU device] copies waiting for their reduction
    int npend;
    int step_open;        // [cpu] a copy hook of this step ran (under -poison the host copy was NaN-filled)
    int grads_issued;     // [cpu, CUDA] a D2H of this step was issued (grads_ev recorded)
    floatX* pbuf[2];      // pinned, (K) floatX: unit u's parameters rounded from master [=]
    int h2d_pending[2];   // an H2D from pbuf[k] was issued (the host waits for it before refilling)
    size_t host_bytes;    // what this rank allocated on the host (offload_host_bytes)
    // [nvme] the file and the I/O thread
    int fd;
    char path[4096];
    float* slot[3];       // (3K): master | m | v of one unit; unit u in slot[u % 3]
    pthread_t io;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    OffloadIO queue[OFFLOAD_QUEUE];
    int64_t issued, done; // requests issued / completed (in order: one thread, FIFO)
    int stop, io_err;     // io_err: errno of the first failure (0: none), io_what: what failed
    char io_what[256];
    int64_t writes, reads; // units written / read by steps so far (fault injection: ZT_FAULT)
    AdamWMax max;         // the state's largest |m|, v, |w| after the last update (adamw_host_max); unknown after a put
    int64_t checks_run, checks_proved; // steps whose overflow check read the state / was proved by the bound
#ifdef __CUDACC__
    cudaStream_t stream;  // g_offload_stream: the copies
    cudaEvent_t start, done_ev, d2h[2], h2d[2];
    cudaEvent_t grads_ev; // [cpu] recorded after each block's gradient D2H (the last one: every block's)
    cudaEvent_t gring_ev[OFFLOAD_GRING]; // [grads_host] recorded after the D2H into gring[k]
    cudaEvent_t gslot_ev[4]; // [grads_host] recorded after the D2H from gradient buffer slot i (zero_grad_buffer waits)
    int gslot_pending[4];
#endif
} OffloadState;

#ifdef __CUDACC__
static cudaStream_t g_offload_stream = 0;
#endif

// Fault injection for the tests (test/test_offload.h), from the environment:
//   ZT_FAULT=offload-skip-copy:B   block B's updated parameters never go back to the device
//                                  (proves that the bitwise comparison sees a missing copy)
//   ZT_FAULT=offload-grad-skip:B   [cpu] block B's gradient shard is counted as copied to the host but
//                                  never copied (the host copy keeps its -poison NaN)
//   ZT_FAULT=offload-grad-early:B  [cpu] block B's shard is copied after its first micro-step's
//                                  reduction instead of its last (a partial sum when GA > 1, ZeRO-2/3)
//   ZT_FAULT=offload-grad-every:B  [cpu] block B's shard is copied after every micro-step's reduction
//   ZT_FAULT=offload-grad-nowait:B [cpu] block B's shard is copied as soon as its reduction is issued,
//                                  not when it is complete (CUDA: no wait for the collective's event)
//   ZT_FAULT=offload-params-skip-down:B  [-offload-params] block B's parameters are never written to where
//                                  the shard lives (they stay as the last write left them: zeros at the start)
//   ZT_FAULT=offload-params-nowait:B [-offload-params, CUDA] block B's copy up does not wait for the compute
//                                  stream (it may overwrite a gather buffer a kernel still reads)
//   ZT_FAULT=offload-grad-reuse-nowait:S [-offload-params with -offload, CUDA] gradient buffer slot S is zeroed
//                                  for its next block without waiting for its last copy down
//   ZT_FAULT=offload-params-no-ahead:0 [-offload-params nvme] no read-ahead: every gather reads its shard itself
//                                  (the benchmark's reference: dev/bench_offload_params.sh)
//   ZT_FAULT=crash:params-write:stepS [-offload-params nvme] killed after the first parameter write of step S
//   ZT_FAULT=offload-enospc:N      [nvme] the N-th unit written by a step fails as a full disk would
//   ZT_FAULT=offload-eio:N         [nvme] the N-th unit read by a step fails with an I/O error
// Never set outside the tests.
static int offload_fault(const char* kind, int64_t n) {
    const char* f = getenv("ZT_FAULT");
    size_t k = strlen(kind);
    return f && !strncmp(f, kind, k) && f[k] == ':' && atoll(f + k + 1) == n;
}

// ---- [nvme] the file: master at [0, S), m at [S, 2S), v at [2S, 3S) (S = opt_total floats)

// Whole reads and writes; 0, or -1 with errno set (a short read at the end of the file: EIO).
static int offload_pread(int fd, void* buf, size_t n, off_t off) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = EIO; return -1; } // (the file was sized at start: a short read is an error)
        p += r; n -= (size_t)r; off += r;
    }
    return 0;
}
static int offload_pwrite(int fd, const void* buf, size_t n, off_t off) {
    const char* p = (const char*)buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) { errno = ENOSPC; return -1; }
        p += r; n -= (size_t)r; off += r;
    }
    return 0;
}

// The page cache stays bounded: written ranges are flushed (sync_file_range) and then dropped with
// posix_fadvise(DONTNEED), read ranges dropped at once. (Not O_DIRECT: units start at any element.)
static void offload_drop_cache(int fd, off_t off, size_t n, int written) {
#ifdef SYNC_FILE_RANGE_WRITE
    if (written) sync_file_range(fd, off, (off_t)n, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
#else
    if (written) fdatasync(fd);
#endif
    posix_fadvise(fd, off, (off_t)n, POSIX_FADV_DONTNEED);
}

// n floats of array a at element off: read into (write 0) or written from (write 1) host.
// Returns 0, or -1 with errno and what in `what`.
static int offload_file_io(OffloadState* o, int64_t S, int a, int64_t off, float* host, int64_t n, int write, char* what, size_t cap) {
    off_t at = (off_t)(((int64_t)a * S + off) * 4);
    size_t bytes = 4 * (size_t)n;
    int rc = write ? offload_pwrite(o->fd, host, bytes, at) : offload_pread(o->fd, host, bytes, at);
    if (rc) snprintf(what, cap, "%s of %zu bytes at offset %lld", write ? "write" : "read", bytes, (long long)at);
    else offload_drop_cache(o->fd, at, bytes, write);
    return rc;
}

static void offload_die(OffloadState* o, int err, const char* what) {
    die(1, "-offload nvme: %s: %s failed (%s). HINT: free space under -offload-dir (the file needs %d bytes per element of the "
           "rank's shard) or check the device; the last checkpoint is intact: resume with -y 1", o->path, what, strerror(err), 12 + 4 * o->gfile);
}

// [-offload nvme] the optimizer state's reads and writes outside the step (checkpoints, hashes, loading).
static void offload_nvme_io(Zero* z, int a, int64_t off, float* host, int64_t n, int write) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (write) o->max.known = 0; // (a loaded or initialised state: its maxima are not known)
    char what[256];
    if (offload_file_io(o, z->opt_total, a, off, host, n, write, what, sizeof(what))) offload_die(o, errno, what);
}

// The I/O thread: requests in order; a request after a failure is skipped (the step ends the run).
typedef struct { OffloadState* o; Zero* z; } OffloadThreadArg;
static OffloadThreadArg g_offload_arg;
static void* offload_io_thread(void* arg) {
    OffloadState* o = ((OffloadThreadArg*)arg)->o;
    Zero* z = ((OffloadThreadArg*)arg)->z;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->stop && o->done == o->issued) pthread_cond_wait(&o->cv, &o->mu);
        if (o->done == o->issued && o->stop) break;
        OffloadIO rq = o->queue[o->done % OFFLOAD_QUEUE];
        int failed = o->io_err != 0;
        pthread_mutex_unlock(&o->mu);
        int err = 0;
        char what[256] = "";
        if (!failed) {
            const OffloadUnit* u = &o->units[rq.u];
            int64_t at = zero_opt_off(z, u->b) + u->lo;
            int64_t count = rq.write ? ++o->writes : ++o->reads;
            if (offload_fault(rq.write ? "offload-enospc" : "offload-eio", count)) {
                err = rq.write ? ENOSPC : EIO;
                snprintf(what, sizeof(what), "%s of unit %d (injected)", rq.write ? "write" : "read", rq.u);
            }
            for (int a = 0; a < 3 + (o->gfile && !rq.write) && !err; a++) // [gfile] a read brings the unit's gradient too
                if (offload_file_io(o, z->opt_total, a, at, o->slot[rq.s] + a * o->K, u->n, rq.write, what, sizeof(what))) err = errno;
        }
        pthread_mutex_lock(&o->mu);
        if (err && !o->io_err) { o->io_err = err; snprintf(o->io_what, sizeof(o->io_what), "%s", what); }
        o->done++;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}
static void offload_io_issue(OffloadState* o, int write, int u) {
    pthread_mutex_lock(&o->mu);
    while (o->issued - o->done >= OFFLOAD_QUEUE) pthread_cond_wait(&o->cv, &o->mu);
    o->queue[o->issued % OFFLOAD_QUEUE] = (OffloadIO){write, u, u % 3};
    o->issued++;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}
// Wait until request number `seq` (0-based, in issue order) is done; a failure ends the run.
static void offload_io_wait(OffloadState* o, int64_t seq) {
    pthread_mutex_lock(&o->mu);
    while (o->done <= seq) pthread_cond_wait(&o->cv, &o->mu);
    int err = o->io_err;
    pthread_mutex_unlock(&o->mu);
    if (err) offload_die(o, err, o->io_what);
}

// [-offload cpu] the optimizer state's reads and writes (checkpoints, hashes, loading): host memory.
static void offload_cpu_io(Zero* z, int a, int64_t off, float* host, int64_t n, int write) {
    float* arr = a == 0 ? z->master : a == 1 ? z->m : z->v;
    if (write) ((OffloadState*)z->offload_ctx)->max.known = 0; // (as offload_nvme_io)
    if (write) memcpy(arr + off, host, sizeof(float) * n);
    else memcpy(host, arr + off, sizeof(float) * n);
}

// ---- The rank's cores: the host AdamW's threads pinned
// When offloading, the rank's OpenMP threads (-threads: its share of the node's cores) are pinned one
// to a core of the rank's share (local rank lr of W on a node whose process may run on n cores: cores
// [lr n/W, (lr+1) n/W) of those, in the order the kernel lists them), before the state is allocated,
// so that the thread that first touches a page of master, m, v (offload_touch_state) is the one that
// updates it every step, on the same core, next to that memory (NUMA). Not pinned: when OMP_PROC_BIND,
// OMP_PLACES or GOMP_CPU_AFFINITY is set (the user's binding stands; OMP_PROC_BIND=false: none), when
// the node's ranks have fewer cores than threads (oversubscribed: the kernel places them), or when
// the kernel refuses. The [nvme] I/O thread may run on any core of the share. The team's size is
// fixed by then (setup_threads); threads a later, larger team adds would inherit the main thread's core.
static int g_pin_state = 0;          // 0: not tried, 1: pinned, -1: not pinned (g_pin_note says why)
static char g_pin_note[128] = "";
static cpu_set_t g_pin_share;        // the rank's share of the cores (when pinned)
static void offload_pin_threads(int local_rank, int local_world) {
    if (g_pin_state) return;
    g_pin_state = -1;
    const char* env[3] = {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"};
    for (int i = 0; i < 3; i++)
        if (getenv(env[i])) { snprintf(g_pin_note, sizeof(g_pin_note), "threads not pinned: %s is set", env[i]); return; }
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof(all), &all)) { snprintf(g_pin_note, sizeof(g_pin_note), "threads not pinned: %s", strerror(errno)); return; }
    static int cpus[CPU_SETSIZE];
    int n = 0, W = local_world > 0 ? local_world : 1, T = num_threads();
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    int share = n / W, first = local_rank * share;
    if (share < T) {
        snprintf(g_pin_note, sizeof(g_pin_note), "threads not pinned: %d core(s) for %d rank(s) of %d thread(s)", n, W, T);
        return;
    }
    CPU_ZERO(&g_pin_share);
    for (int k = 0; k < share; k++) CPU_SET(cpus[first + k], &g_pin_share);
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[first + t], &one);
        failed |= pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0;
    }
    if (failed) { snprintf(g_pin_note, sizeof(g_pin_note), "threads not pinned: the kernel refused"); return; }
    g_pin_state = 1;
    snprintf(g_pin_note, sizeof(g_pin_note), "%d thread(s) pinned to cores %d..%d", T, cpus[first], cpus[first + T - 1]);
}

// A helper thread (the I/O thread, the parameters' reader) on the rank's share of the cores when the
// threads are pinned (not the main thread's one core), else anywhere.
static void offload_thread_start(pthread_t* t, void* (*fn)(void*), void* arg, const char* what) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (g_pin_state == 1) pthread_attr_setaffinity_np(&attr, sizeof(g_pin_share), &g_pin_share);
    if (pthread_create(t, &attr, fn, arg)) die(1, "%s: cannot be started", what);
    pthread_attr_destroy(&attr);
}

// Page-aligned host memory; zeroed by this thread (zero 1), or untouched (0: offload_touch_state).
static void* offload_host_alloc(size_t bytes, int zero) {
    size_t rounded = (size_t)round_up((int64_t)(bytes > 0 ? bytes : 1), 4096);
    void* p = aligned_alloc(4096, rounded);
    if (!p)
        die(1, "out of host memory allocating %.1f MiB for -offload. HINT: ./train -plan shows the host bytes per node of each "
               "offload row", rounded / 1048576.0);
    if (zero) memset(p, 0, rounded);
    return p;
}

static void offload_grad_reduced(Zero* z, int b, int h, int micro, int last_micro); // (below: the copies)
static void offload_grad_reuse(Zero* z, int slot);
static void offload_host_sumsq(Zero* z, double* out);
static int offload_unit_segments(Zero* z, const OffloadUnit* u, Segment* out);

// [cpu] master, m, v zeroed, each unit's segments by the threads that will update them (adamw_host_touch:
// the update's cuts), so that on a NUMA machine each page lies on the node of the core that streams it;
// the padding between segments and units by this thread.
static void offload_touch_state(Zero* z, OffloadState* o) {
    float* arr[3] = {z->master, z->m, z->v};
    Segment seg[MAX_BLOCK_TENSORS];
    int64_t done = 0; // [0, done) is zeroed
    for (int u = 0; u < o->nunits; u++) {
        int64_t at = zero_opt_off(z, o->units[u].b) + o->units[u].lo;
        int n = offload_unit_segments(z, &o->units[u], seg);
        for (int a = 0; a < 3; a++) {
            if (at > done) memset(arr[a] + done, 0, sizeof(float) * (size_t)(at - done));
            adamw_host_touch(arr[a] + at, o->units[u].n, seg, n);
        }
        done = at + o->units[u].n > done ? at + o->units[u].n : done;
    }
    for (int a = 0; a < 3; a++)
        if (z->opt_total > done) memset(arr[a] + done, 0, sizeof(float) * (size_t)(z->opt_total - done));
}

// Place master, m, v (zero_init left them unallocated) and the staging buffers. cpu: host arrays,
// zeroed; nvme: dir/zt_offload_<pid>_r<rank>.bin, sized (posix_fallocate: a full disk says so now)
// and unlinked at once (nothing is left behind, whatever ends the run), and three unit slots.
// buffer: -offload-buffer's bytes (nvme).
static void offload_init(Zero* z, const char* dir, double buffer) {
    if (z->offload == OFFLOAD_NONE) return;
    if (z->stage == 0) die(1, "internal error: -offload with ZeRO-0 (check_flags refuses it)");
    OffloadState* o = (OffloadState*)calloc(1, sizeof(OffloadState));
    if (!o) die(1, "out of host memory for the offload state");
    o->kind = z->offload;
    o->K = offload_unit(&z->lay, z->offload, buffer);
    if (o->K <= 0) die_user("flag -offload-buffer: %.0f bytes hold no unit of work (%lld bytes per element: at least %lld bytes)", buffer,
                            (long long)OFFLOAD_NVME_BYTES_PER_ELEM, 64LL * OFFLOAD_NVME_BYTES_PER_ELEM);
    for (int b = 0; b < z->lay.nblocks; b++) o->nunits += (int)ceil_div(zero_opt_hi(z, b) - zero_opt_lo(z, b), o->K);
    o->units = (OffloadUnit*)malloc(sizeof(OffloadUnit) * (o->nunits > 0 ? o->nunits : 1));
    o->read_seq = (int64_t*)malloc(sizeof(int64_t) * (o->nunits > 0 ? o->nunits : 1));
    if (!o->units || !o->read_seq) die(1, "out of host memory for the offload state");
    for (int b = 0, u = 0; b < z->lay.nblocks; b++)
        for (int64_t lo = 0, L = zero_opt_hi(z, b) - zero_opt_lo(z, b); lo < L; lo += o->K, u++)
            o->units[u] = (OffloadUnit){b, lo, L - lo < o->K ? L - lo : o->K};
    size_t state = 0;
    if (o->kind == OFFLOAD_CPU) {
        float** arr[3] = {&z->master, &z->m, &z->v};
        for (int a = 0; a < 3; a++) *arr[a] = (float*)offload_host_alloc(sizeof(float) * (size_t)z->opt_total, 0);
        offload_touch_state(z, o);
        state = 3 * sizeof(float) * (size_t)z->opt_total;
        z->state_io = offload_cpu_io;
    } else {
        o->gfile = z->grads_host; // [-offload-params] the gradient in the file too
        for (int k = 0; k < 3; k++) o->slot[k] = (float*)offload_host_alloc((3 + o->gfile) * sizeof(float) * (size_t)o->K, 1);
        state = 3 * 3 * sizeof(float) * (size_t)o->K;
        snprintf(o->path, sizeof(o->path), "%s/zt_offload_%d_r%05d.bin", dir, (int)getpid(), z->r);
        o->fd = open(o->path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (o->fd < 0) die_user("-offload-dir %s: cannot create %s: %s", dir, o->path, strerror(errno));
        unlink(o->path); // the file lives while the process does
        off_t bytes = (off_t)((12 + 4 * o->gfile) * z->opt_total);
        int e = posix_fallocate(o->fd, 0, bytes > 0 ? bytes : 1);
        if (e) { char what[64]; snprintf(what, sizeof(what), "reserving %lld bytes", (long long)bytes); offload_die(o, e, what); }
        pthread_mutex_init(&o->mu, NULL);
        pthread_cond_init(&o->cv, NULL);
        g_offload_arg = (OffloadThreadArg){o, z};
        offload_thread_start(&o->io, offload_io_thread, &g_offload_arg, "-offload nvme: the I/O thread");
        z->state_io = offload_nvme_io;
    }
    size_t staging = 0;
    for (int k = 0; k < 2; k++) {
        if (o->kind == OFFLOAD_NVME && !o->gfile) o->gbuf[k] = (float*)host_pinned_alloc(sizeof(float) * o->K); // ([gfile] read with the state)
        o->pbuf[k] = (floatX*)host_pinned_alloc(sizeof(floatX) * o->K);
        staging += (o->kind == OFFLOAD_NVME && !o->gfile ? sizeof(float) : 0) * (size_t)o->K + sizeof(floatX) * (size_t)o->K;
    }
    if (o->kind == OFFLOAD_CPU || z->grads_host) { // the gradient shard's staging: copied block by block during the backward
        if (!o->gfile) o->ghost = (float*)host_pinned_alloc(sizeof(float) * (size_t)(z->opt_total > 0 ? z->opt_total : 1));
        if (!o->gfile) staging += sizeof(float) * (size_t)z->opt_total;
        o->copied = (int*)calloc((size_t)z->lay.nblocks, sizeof(int));
        if (!o->copied) die(1, "out of host memory for the offload state");
        z->grad_reduced = offload_grad_reduced;
    }
    if (z->grads_host) { // [-offload-params with -offload] the micro-steps' sums on their way to the host copy or the file
        int64_t maxS = offload_max_shard(&z->lay);
        for (int k = 0; k < (o->gfile ? 1 : OFFLOAD_GRING); k++) o->gring[k] = (float*)host_pinned_alloc(sizeof(float) * (size_t)(maxS > 0 ? maxS : 1));
        staging += sizeof(float) * (o->gfile ? 1 : OFFLOAD_GRING) * (size_t)maxS;
        int64_t nc = offload_norm_chunks(&z->lay);
        o->npart = (double*)offload_host_alloc(sizeof(double) * (size_t)(nc > 0 ? nc : 1), 1);
        staging += sizeof(double) * (size_t)nc;
        if (o->gfile) {
            o->gacc = (float*)offload_host_alloc(sizeof(float) * (size_t)(maxS > 0 ? maxS : 1), 1);
            staging += sizeof(float) * (size_t)maxS + 3 * sizeof(float) * (size_t)o->K; // (and the slots' gradient parts)
        }
        z->grad_reuse = offload_grad_reuse;
        z->host_sumsq = offload_host_sumsq;
    }
    o->host_bytes = state + staging;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaStreamCreateWithFlags(&o->stream, cudaStreamNonBlocking));
        g_offload_stream = o->stream;
        cudaEvent_t* evs[7] = {&o->start, &o->done_ev, &o->d2h[0], &o->d2h[1], &o->h2d[0], &o->h2d[1], &o->grads_ev};
        for (int i = 0; i < 7; i++) cudaCheck(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
        for (int k = 0; k < OFFLOAD_GRING; k++) cudaCheck(cudaEventCreateWithFlags(&o->gring_ev[k], cudaEventDisableTiming));
        for (int i = 0; i < 4; i++) cudaCheck(cudaEventCreateWithFlags(&o->gslot_ev[i], cudaEventDisableTiming));
    }
#endif
    z->offload_ctx = o;
}

static void offload_free(Zero* z) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (!o) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaStreamSynchronize(o->stream));
        cudaEvent_t evs[7] = {o->start, o->done_ev, o->d2h[0], o->d2h[1], o->h2d[0], o->h2d[1], o->grads_ev};
        for (int i = 0; i < 7; i++) cudaCheck(cudaEventDestroy(evs[i]));
        for (int k = 0; k < OFFLOAD_GRING; k++) cudaCheck(cudaEventDestroy(o->gring_ev[k]));
        for (int i = 0; i < 4; i++) cudaCheck(cudaEventDestroy(o->gslot_ev[i]));
        cudaCheck(cudaStreamDestroy(o->stream));
        g_offload_stream = 0;
    }
#endif
    if (o->kind == OFFLOAD_NVME) {
        pthread_mutex_lock(&o->mu);
        o->stop = 1;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->io, NULL);
        close(o->fd);
        for (int k = 0; k < 3; k++) free(o->slot[k]);
    }
    for (int k = 0; k < 2; k++) { if (o->gbuf[k]) host_pinned_free(o->gbuf[k]); host_pinned_free(o->pbuf[k]); }
    if (o->ghost) host_pinned_free(o->ghost);
    for (int k = 0; k < OFFLOAD_GRING; k++) if (o->gring[k]) host_pinned_free(o->gring[k]);
    free(o->gacc);
    free(o->npart);
    free(o->copied);
    z->grad_reduced = NULL;
    z->grad_reuse = NULL;
    z->host_sumsq = NULL;
    free(z->master); free(z->m); free(z->v);
    z->master = z->m = z->v = NULL;
    free(o->units);
    free(o->read_seq);
    free(o);
    z->offload_ctx = NULL;
    z->state_io = NULL;
}

// ---- the copies and their order (plain memcpy on the CPU device: everything is done when issued)

static void offload_d2h(OffloadState* o, void* host, const void* dev, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, o->stream)); return; }
#endif
    (void)o;
    memcpy(host, dev, bytes);
}
static void offload_h2d(OffloadState* o, void* dev, const void* host, size_t bytes) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, o->stream)); return; }
#endif
    (void)o;
    memcpy(dev, host, bytes);
}

// ---- [cpu] the gradient shard to the host as each block's reduction completes (THE STEP, 1)

// [grads_host] The oldest micro-step sum in the ring, added into the host copy (ghost += ring, FP32,
// element by element: the bits of the device's accumulating reduce-scatter), once its D2H is done.
static void offload_gring_pop(Zero* z, OffloadState* o) {
    int k = o->gring_head, b = o->gring_b[k];
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) cudaCheck(cudaEventSynchronize(o->gring_ev[k]));
#endif
    float* dst = o->ghost + zero_opt_off(z, b);
    const float* src = o->gring[k];
    int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] += src[i];
    o->gring_head = (k + 1) % OFFLOAD_GRING;
    o->gring_count--;
}

// [grads_host] Block b's sum of micro-step `micro` (reduced in place in its gradient buffer, at the
// shard's place) down to the host: the first micro-step's into the host copy (=), a later one's into
// the ring, added in order (offload_gring_pop: when the ring is full, at the step). CUDA: the buffer's
// next zeroing waits for this copy (gslot_ev, offload_grad_reuse).
static void offload_grad_down(Zero* z, OffloadState* o, int b, int micro) {
    int slot = zero_slot(z, b);
    int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
    const float* src = z->grad_buf[slot] + z->lay.r * z->lay.S[b];
    if (o->gfile) { // [nvme] into the file, at once: = on the first micro-step; read, +=, written back after it
        if (n > 0) offload_d2h(o, o->gring[0], src, sizeof(float) * (size_t)n);
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) { cudaCheck(cudaEventRecord(o->gring_ev[0], o->stream)); cudaCheck(cudaEventSynchronize(o->gring_ev[0])); }
#endif
        char what[256];
        int64_t at = zero_opt_off(z, b);
        float* w = o->gring[0];
        if (micro > 0 && n > 0) {
            if (offload_file_io(o, z->opt_total, 3, at, o->gacc, n, 0, what, sizeof(what))) offload_die(o, errno, what);
            float* dst = o->gacc;
            const float* add = o->gring[0];
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++) dst[i] += add[i];
            w = o->gacc;
        }
        if (n > 0 && offload_file_io(o, z->opt_total, 3, at, w, n, 1, what, sizeof(what))) offload_die(o, errno, what);
        if (micro == 0) o->copied[b]++;
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) { cudaCheck(cudaEventRecord(o->gslot_ev[slot], o->stream)); o->gslot_pending[slot] = 1; }
#endif
        return;
    }
    if (micro == 0) {
        if (n > 0) offload_d2h(o, o->ghost + zero_opt_off(z, b), src, sizeof(float) * (size_t)n);
        o->copied[b]++;
    } else {
        if (o->gring_count == OFFLOAD_GRING) offload_gring_pop(z, o);
        int k = (o->gring_head + o->gring_count) % OFFLOAD_GRING;
        if (n > 0) offload_d2h(o, o->gring[k], src, sizeof(float) * (size_t)n);
        o->gring_b[k] = b;
        o->gring_count++;
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) cudaCheck(cudaEventRecord(o->gring_ev[k], o->stream));
#endif
        if (g_device != DEV_CUDA) offload_gring_pop(z, o); // (the CPU device: the copy is done)
    }
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { cudaCheck(cudaEventRecord(o->gslot_ev[slot], o->stream)); o->gslot_pending[slot] = 1; }
#endif
}

// Zero.grad_reuse: gradient buffer `slot` is about to be zeroed for its next block; the copy down of
// its last block is done first (CPU device: the reduction comm_wait just finished is copied now;
// CUDA: the compute stream waits for the copy's event).
static void offload_grad_flush(Zero* z, OffloadState* o, int all);
static void offload_grad_reuse(Zero* z, int slot) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (o->gslot_pending[slot] && !offload_fault("offload-grad-reuse-nowait", slot)) cudaCheck(cudaStreamWaitEvent(g_stream, o->gslot_ev[slot], 0));
        o->gslot_pending[slot] = 0;
        return;
    }
#endif
    (void)slot;
    offload_grad_flush(z, o, 0);
}

// Block b's gradient shard into the host copy: its last reduction is complete (CPU device) or
// ordered before this copy on the offload stream (CUDA).
static void offload_grad_copy(Zero* z, OffloadState* o, int b) {
    int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
    if (n > 0 && !offload_fault("offload-grad-skip", b)) offload_d2h(o, o->ghost + zero_opt_off(z, b), zero_opt_grads(z, b), sizeof(float) * (size_t)n);
    o->copied[b]++;
}

// [CPU device] The copies whose reduction has finished by now (a slot no longer active, or reused);
// all: every one, which must have finished (zero_grad_sumsq waited for every reduction).
static void offload_grad_flush(Zero* z, OffloadState* o, int all) {
    int k = 0;
    for (int i = 0; i < o->npend; i++) {
        const CommSlot* s = &z->comm->slots[o->pend[i].h];
        int done = !s->active || s->seq != o->pend[i].seq;
        if (!done && all) die(1, "internal error: block %d's reduction is not done at the optimizer step", o->pend[i].b);
        if (done && z->grads_host) offload_grad_down(z, o, o->pend[i].b, o->pend[i].micro);
        else if (done) offload_grad_copy(z, o, o->pend[i].b);
        else o->pend[k++] = o->pend[i];
    }
    o->npend = k;
}

// The hook (Zero.grad_reduced, called by zero_reduce_block after it issued block b's reduction h of
// micro-step `micro`): on the step's last one, the block's shard goes to the host once h is done.
// CUDA: the offload stream waits for h's completion event (the comm slot's `done`) and copies, while
// the compute stream goes on with the backward of the next blocks. CPU device: a reduction finishes
// inside comm_wait (MPI rounds; the local sum at R = 1), which the backward calls when it needs the
// staging or the buffer again; the copy waits in `pend` until then (checked at each hook and at the
// step), so the MPI reductions stay overlapped as without offload. Under -poison the host copy is
// NaN at the start of every step (the first hook): a block whose copy is missing reads NaN.
static void offload_grad_reduced(Zero* z, int b, int h, int micro, int last_micro) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (!o->step_open) { // the previous step's host reads are over (offload_adamw, synchronous)
        o->step_open = 1;
        o->arrived = 0;
        if (z->poison && o->ghost) memset(o->ghost, 0xFF, sizeof(float) * (size_t)z->opt_total); // NaN
    }
    if (z->grads_host) { // every micro-step's sum goes down (in place in the block's buffer)
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) {
            cudaCheck(cudaStreamWaitEvent(o->stream, z->comm->slots[h].done, 0)); // the reduction is done
            offload_grad_down(z, o, b, micro);
            cudaCheck(cudaEventRecord(o->grads_ev, o->stream));
            o->grads_issued = 1;
            return;
        }
#endif
        offload_grad_flush(z, o, 0);
        o->pend[o->npend++] = (OffloadPending){b, h, micro, z->comm->slots[h].seq};
        return;
    }
    int when = offload_fault("offload-grad-early", b) ? micro == 0 : offload_fault("offload-grad-every", b) ? 1 : last_micro;
    if (!when) return;
    int nowait = offload_fault("offload-grad-nowait", b);
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        if (!nowait) cudaCheck(cudaStreamWaitEvent(o->stream, z->comm->slots[h].done, 0)); // the reduction is done
        offload_grad_copy(z, o, b);
        cudaCheck(cudaEventRecord(o->grads_ev, o->stream));
        o->grads_issued = 1;
        return;
    }
#endif
    offload_grad_flush(z, o, 0); // the earlier blocks whose reduction finished meanwhile
    if (nowait) { offload_grad_copy(z, o, b); return; }
    o->pend[o->npend++] = (OffloadPending){b, h, micro, z->comm->slots[h].seq}; // (at most one per slot in flight)
}

// At the step, before the host reads the gradient (every step, also one that is skipped): the
// copies still waiting are done [CPU device]; the host waits once for the last D2H, and the compute
// stream too, so the next writer of the shard (the next step's reduce-scatter, or [ZeRO-1]
// zero_zero_grads into full_grads) comes after it [CUDA]; every block went to the host exactly once.
static void offload_grads_arrived(Zero* z, OffloadState* o) {
    if (!(o->ghost || o->gfile) || o->arrived) return; // ([grads_host] offload_host_sumsq ran it before the norm)
    offload_grad_flush(z, o, 1);
    while (o->gring_count > 0) offload_gring_pop(z, o); // [grads_host] the last micro-step sums, added
#ifdef __CUDACC__
    if (g_device == DEV_CUDA && o->grads_issued) {
        cudaCheck(cudaEventSynchronize(o->grads_ev));
        cudaCheck(cudaStreamWaitEvent(g_stream, o->grads_ev, 0));
        o->grads_issued = 0;
    }
#endif
    for (int b = 0; b < z->lay.nblocks; b++)
        if (o->copied[b] != !z->lay.frozen[b]) // [LoRA] a frozen block has no gradient
            die(1, "internal error: block %d's gradient shard went to the host %d times this step (once expected: after its "
                   "last reduction). HINT: a bug in the zero_reduce_block -> offload_grad_reduced hook", b, o->copied[b]);
    memset(o->copied, 0, sizeof(int) * (size_t)z->lay.nblocks);
    o->step_open = 0;
    o->arrived = 1;
}

// Zero.host_sumsq ([grads_host]): every copy down done and added, then the gradient's sum of squares
// over its segments (padding excluded, as zero_local_sumsq), block by block from the host copy or
// ([gfile] 4 bytes an element more per step) read from the file, in the order the device would have
// summed it: on the CPU device its op over each segment alone, the segments' sums added in order (what
// one call over all of them adds); on CUDA every segment's chunk sums, then the total kernel's order
// (sumsq_chunks_host_cuda_order, sumsq_total_host_cuda_order: adamw.cuh). The same norm, to the bit,
// as a resident gradient's. The chunk sums go to o->npart (allocated once: offload_norm_chunks).
static void offload_host_sumsq(Zero* z, double* out) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    offload_grads_arrived(z, o);
    Segment seg[MAX_BLOCK_TENSORS];
    double total = 0.0;
    int64_t c = 0;
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (z->lay.frozen[b]) continue; // [LoRA] no gradient
        int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
        const float* g = o->ghost ? o->ghost + zero_opt_off(z, b) : o->gacc;
        char what[256];
        if (o->gfile && n > 0 && offload_file_io(o, z->opt_total, 3, zero_opt_off(z, b), o->gacc, n, 0, what, sizeof(what)))
            offload_die(o, errno, what);
        int k = layout_segments(&z->lay, b, z->lay.r * z->lay.S[b], (z->lay.r + 1) * z->lay.S[b], seg);
        for (int i = 0; i < k; i++) {
            const float* gs = g + seg[i].off;
            int64_t len = seg[i].len;
#ifdef __CUDACC__
            if (g_device == DEV_CUDA) { c += sumsq_chunks_host_cuda_order(gs, len, o->npart + c); continue; }
#endif
            double run = 0.0;
            op_sumsq_many_into(&run, &gs, &len, 1);
            total += run;
        }
    }
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) total = sumsq_total_host_cuda_order(o->npart, c);
#endif
    (void)c;
    *out = total;
}

// Unit u's gradient on the host: [cpu] in the host copy of the shard; [nvme] in gbuf[u % 2].
static float* offload_unit_grads(Zero* z, OffloadState* o, int u) {
    if (o->ghost) return o->ghost + zero_opt_off(z, o->units[u].b) + o->units[u].lo; // [cpu; grads_host]
    if (o->gfile) return o->slot[u % 3] + 3 * o->K; // [nvme, grads_host] read with the unit's state (offload_unit_state first)
    return o->gbuf[u % 2];
}

// [nvme] Unit u's gradient into gbuf[u % 2] (issued; offload_adamw waits for it with d2h[u % 2]);
// [cpu] nothing: it is on the host already.
static void offload_fetch_grads(Zero* z, OffloadState* o, int u) {
    if (o->ghost || o->gfile) return; // [cpu; grads_host] on the host already, or read from the file with the state
    const OffloadUnit* un = &o->units[u];
    offload_d2h(o, o->gbuf[u % 2], zero_opt_grads(z, un->b) + un->lo, sizeof(float) * (size_t)un->n);
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) cudaCheck(cudaEventRecord(o->d2h[u % 2], o->stream));
#endif
}

// The segments of block b's optimizer range inside [lo, lo + n), relative to lo.
static int offload_unit_segments(Zero* z, const OffloadUnit* u, Segment* out) {
    Segment seg[MAX_BLOCK_TENSORS];
    int n = layout_segments(&z->lay, u->b, zero_opt_lo(z, u->b), zero_opt_hi(z, u->b), seg), k = 0;
    for (int i = 0; i < n; i++) {
        int64_t a = seg[i].off > u->lo ? seg[i].off : u->lo, e = seg[i].off + seg[i].len < u->lo + u->n ? seg[i].off + seg[i].len : u->lo + u->n;
        if (e > a) out[k++] = (Segment){a - u->lo, e - a, seg[i].decay};
    }
    return k;
}

// [nvme] Issue the read of unit u's master, m, v into its slot (a no-op for cpu or past the last unit).
static void offload_read_ahead(OffloadState* o, int u) {
    if (o->kind != OFFLOAD_NVME || u >= o->nunits) return;
    o->read_seq[u] = o->issued;
    offload_io_issue(o, 0, u);
}

// Where unit u's master, m and v are for this pass: [nvme] its slot, once its read
// (offload_read_ahead) is done; [cpu] the host arrays at the unit's offset.
static void offload_unit_state(Zero* z, OffloadState* o, int u, float** master, float** m, float** v) {
    if (o->kind == OFFLOAD_NVME) {
        offload_io_wait(o, o->read_seq[u]);
        *master = o->slot[u % 3];
        *m = *master + o->K;
        *v = *m + o->K;
    } else {
        int64_t at = zero_opt_off(z, o->units[u].b) + o->units[u].lo;
        *master = z->master + at; *m = z->m + at; *v = z->v + at;
    }
}

// The copies of a pass over the units start after everything the compute stream did (a).
static void offload_copies_after_compute(OffloadState* o) {
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaEventRecord(o->start, g_stream));
        cudaCheck(cudaStreamWaitEvent(o->stream, o->start, 0));
    }
#else
    (void)o;
#endif
}

// The overflow check before the update (zero_adamw_check's, where the state is: on the host or in
// the file). First the bound (adamw_bound_finite, from the norm and the maxima the last update left):
// when it proves the update finite, nothing is read (with nvme: a step reads the state once, not
// twice, and copies the gradient once). Otherwise unit by unit, the gradient from the host copy of
// the shard ([cpu], every block's there once offload_grads_arrived returns) or through the staging
// buffers ([nvme], and the state through the slots, read ahead as in offload_adamw, never written)
// and adamw_check_host runs the update's arithmetic without writing. Either way the flag is summed
// over ranks. sc: on the host.
static void offload_adamw_check(Zero* z, const AdamWParams* hp, StepScalars* sc) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    int nu = o->nunits, nvme = o->kind == OFFLOAD_NVME;
    offload_grads_arrived(z, o); // [cpu] every step: the host copy of the gradient is complete
    AdamWParams p = *hp;
    p.grad_scale = sc->grad_scale;
    int proved = sc->finite && nu > 0 && adamw_bound_finite(&p, sc, &o->max); // no pass: see adamw_bound_finite
    if (proved) o->checks_proved++;
    else if (sc->finite && nu > 0) { // (a step that is not finite is skipped anyway)
        o->checks_run++;
        if (nvme) offload_copies_after_compute(o); // (a)
        offload_fetch_grads(z, o, 0);
        offload_read_ahead(o, 0);
        Segment seg[MAX_BLOCK_TENSORS];
        for (int u = 0; u < nu; u++) {
            const OffloadUnit* un = &o->units[u];
            if (u + 1 < nu) offload_fetch_grads(z, o, u + 1); // gbuf[(u+1) % 2]: unit u-1's, checked
            offload_read_ahead(o, u + 1);
#ifdef __CUDACC__
            if (g_device == DEV_CUDA && nvme && !o->gfile) cudaCheck(cudaEventSynchronize(o->d2h[u % 2])); // unit u's gradients are here
#endif
            float *master, *m, *v;
            offload_unit_state(z, o, u, &master, &m, &v);
            int n = offload_unit_segments(z, un, seg);
            adamw_check_host(master, m, v, offload_unit_grads(z, o, u), seg, n, &p, sc);
        }
    }
    double any = sc->overflow;
    comm_sum_doubles(z->comm, &any, 1);
    sc->overflow = any > 0.0;
}

// How often the check was proved rather than run (rank 0's, at the end of a run).
static void offload_report(const Zero* z) {
    const OffloadState* o = (const OffloadState*)z->offload_ctx;
    if (o && z->r == 0)
        printf("offload %s: the overflow check was proved by its bound on %lld step(s) (nothing read) and read the state on %lld "
               "(the first after a start or a load, or when the bound was too loose)\n",
               offload_name(o->kind), (long long)o->checks_proved, (long long)o->checks_run);
}

// The optimizer step on the host, unit by unit (see THE STEP above). sc: the step's scalars,
// already on the host (train_step reads them back when offloading); a step that is not finite, or
// whose update would not be (offload_adamw_check), changes nothing, as on the device. [nvme] unit
// u+1's state is read while u is updated and u-1 written (one I/O thread, requests in order: a slot
// is read again only after its write).
static void offload_adamw(Zero* z, const AdamWParams* hp, const StepScalars* sc) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (!sc->finite || sc->overflow) return;
    AdamWParams p = *hp;
    p.grad_scale = sc->grad_scale; // computed on the device (op_step_scalars)
    int nu = o->nunits, nvme = o->kind == OFFLOAD_NVME;
    offload_copies_after_compute(o); // (a)
    if (nu > 0) offload_fetch_grads(z, o, 0);
    offload_read_ahead(o, 0);
    Segment seg[MAX_BLOCK_TENSORS];
    AdamWMax mx = {0.0f, 0.0f, 0.0f, 1}; // the new state's maxima, for the next step's check
    for (int u = 0; u < nu; u++) {
        int k = u % 2;
        const OffloadUnit* un = &o->units[u];
        if (u + 1 < nu) offload_fetch_grads(z, o, u + 1); // gbuf[(u+1) % 2] was unit u-1's: done with
        offload_read_ahead(o, u + 1);
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) { // (b) [nvme] unit u's gradients are here; unit u-2's parameters have left pbuf[k]
            if (nvme && !o->gfile) cudaCheck(cudaEventSynchronize(o->d2h[k]));
            if (o->h2d_pending[k]) cudaCheck(cudaEventSynchronize(o->h2d[k]));
        }
#endif
        float *master, *m, *v;
        offload_unit_state(z, o, u, &master, &m, &v);
        int n = offload_unit_segments(z, un, seg);
        adamw_host_max(o->pbuf[k], master, m, v, offload_unit_grads(z, o, u), seg, n, &p, &mx);
        if (nvme) offload_io_issue(o, 1, u);
        floatX* dst = zero_opt_params(z, un->b); // [-offload-params] NULL: the shard is on the host, not the device
        for (int i = 0; i < n && !offload_fault("offload-skip-copy", un->b); i++) {
            if (seg[i].len <= 0) continue;
            if (!dst) zero_shard_put(z, un->b, un->lo + seg[i].off, o->pbuf[k] + seg[i].off, seg[i].len); // never up and down
            else offload_h2d(o, dst + un->lo + seg[i].off, o->pbuf[k] + seg[i].off, sizeof(floatX) * (size_t)seg[i].len);
        }
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) cudaCheck(cudaEventRecord(o->h2d[k], o->stream));
#endif
        o->h2d_pending[k] = 1;
    }
    if (nvme) offload_io_wait(o, o->issued - 1); // every write is on the disk's side
    o->max = mx;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { // (c) the compute stream goes on after the last parameters arrived
        cudaCheck(cudaEventRecord(o->done_ev, o->stream));
        cudaCheck(cudaStreamWaitEvent(g_stream, o->done_ev, 0));
    }
#endif
}

// ----------------------------------------------------------------------------
// -offload-params cpu|nvme: ZeRO-3's parameter shards off the device (ZeRO-Infinity's parameter
// offload; FSDP's CPUOffload(offload_params=True)). Each rank's floatX shard of every block (laid out as
// shard_params would be: lay.shard_off) lives in page-locked host memory (cpu) or in a file per rank
// under -offload-dir (nvme); the device keeps no shard at all, only the gather buffers it had already.
//
// THE PATH (the hooks do not change; zero_gather_start calls param_up, then gathers in place):
//   up:   block b's shard goes into its own place in the block's gather buffer (param_buf + r*S), then
//         the all-gather runs in place (R = 1: the copy is the gather). CUDA: on the communication
//         stream, after an event recorded on the compute stream at that moment (the buffer's last
//         reader, the block released before, is before it), so the copy and the gather are one stream
//         in order, overlapping the compute of the layer before, as the gather alone did.
//         [cpu] from the pinned shard itself; [nvme] from the slot's pinned staging, which the reader
//         thread filled ahead (READ-AHEAD below) or the gather fills now (the host waits for that
//         staging's previous copy first: an event per slot).
//   down: [AdamW on the device] the update is written into the block's gather buffer (released at
//         the step) at the shard's place, and its segments (padding never written, as on the device)
//         are copied to the host shard ([nvme] through a pinned buffer to the file) in the compute
//         stream's order; the host waits once after the last block (PARAM_SYNC). [-offload cpu|nvme:
//         AdamW on the host] the rounded parameters go from its staging straight to the host shard
//         (or the file): they never go up to the device and back down.
// The step knows before the update whether it applies (train_step reads the scalars back at once
// with parameter offload: readback_lag 0), so a skipped step copies nothing.
// Exactness: the bytes are moved, never changed: bit-identical to the resident run at any R.
// GRADIENTS (with -offload cpu|nvme: AdamW on the host): the FP32 gradient shard leaves the device
// too (Zero.grads_host; shard_grads is not allocated): each block's reduce-scatter lands in place in
// its own gradient buffer every micro-step and goes down at once (offload_grad_down). cpu: the first
// micro-step's into the host copy, later ones through a ring of pinned buffers, added on the host in
// order (the bits of the device's accumulation); nvme: into the state file, a fourth array (gfile),
// the partial sum read back and added, then read with each unit's state for the update. The norm is
// summed on the host in the device's order (offload_host_sumsq). Without
// -offload AdamW runs on the device and the gradient shard stays there.
// READ-AHEAD [nvme]: a reader thread reads the next layer's shard (param_ahead_ask) while the current
// one is gathered; a gather whose shard was not read ahead reads it itself. Not yet: -tune does not
// measure these rows (docs/offload.md).

typedef struct {
    Offload kind;
    floatX* shard;        // [cpu] pinned (lay.shard_total): the rank's shard of every block
    int fd;               // [nvme] the file: the shard as shard_params lays it out
    char path[4096];
    floatX* stage[4];     // [nvme] pinned, one per gather slot (that slot's block's S): the file read into it
    floatX* down;         // [nvme] pinned (the largest trainable shard): an updated segment on its way to the file
    int64_t down_n;
    size_t host_bytes;    // what this rank allocated on the host (param_offload_host_bytes)
    // [nvme] the read-ahead: a thread of its own reads the next layer's shard (the hooks' order: the
    // next layer in the forward, the one before in the backward) into that layer's slot staging while
    // the current one is gathered and computed
    pthread_t reader;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ahead_b[4];       // the block read (or being read) ahead into stage[i], -1 none
    int ahead_state[4];   // 0 none, 1 asked, 2 being read, 3 read (then ahead_err: 0 or the errno)
    int ahead_err[4];
    int last_b;           // the last layer gathered (the direction of the next guess)
    int stop, reader_on;
    int64_t ahead_hits, ahead_misses; // gathers that found their shard read ahead / read it themselves
#ifdef __CUDACC__
    cudaEvent_t compute;  // recorded on the compute stream before a copy up (the comm stream waits for it)
    cudaEvent_t up[4];    // [nvme] recorded on the comm stream after slot i's copy: stage[i] may be refilled
    int up_pending[4];
#endif
} ParamOffload;

// "none" | "cpu" | "nvme" (offload_parse's words) for -offload-params.
// Host bytes one rank holds for it: cpu: the whole shard (floatX, pinned); nvme: one staging buffer
// per gather slot and one for the update's segments. THE closed form: param_offload_init allocates
// exactly this, the planner prints it.
static int64_t param_offload_slot_shard(const BlockLayout* lay, int i) {
    int b = zero_slot_block(lay, i);
    return b < 0 ? 0 : lay->S[b];
}
static size_t param_offload_host_bytes(const BlockLayout* lay, Offload k) {
    if (k == OFFLOAD_NONE) return 0;
    if (k == OFFLOAD_CPU) return sizeof(floatX) * (size_t)lay->shard_total;
    size_t n = (size_t)offload_max_shard(lay);
    for (int i = 0; i < 4; i++) n += (size_t)param_offload_slot_shard(lay, i);
    return sizeof(floatX) * n;
}

static void param_offload_die(const ParamOffload* po, int err, const char* what) {
    die(1, "-offload-params nvme: %s: %s failed (%s). HINT: free space under -offload-dir (the file needs %d bytes per "
           "parameter of the rank's shard) or check the device; the last checkpoint is intact: resume with -y 1",
        po->path, what, strerror(err), (int)sizeof(floatX));
}
// [nvme] n elements of the file at element `at`: read into (write 0) or written from (write 1) buf.
static void param_file_io(ParamOffload* po, int64_t at, floatX* buf, int64_t n, int write) {
    if (n <= 0) return;
    off_t off = (off_t)(at * (int64_t)sizeof(floatX));
    size_t bytes = sizeof(floatX) * (size_t)n;
    if (write ? offload_pwrite(po->fd, buf, bytes, off) : offload_pread(po->fd, buf, bytes, off)) {
        char what[128];
        snprintf(what, sizeof(what), "%s of %zu bytes at offset %lld", write ? "write" : "read", bytes, (long long)off);
        param_offload_die(po, errno, what);
    }
    offload_drop_cache(po->fd, off, bytes, write); // (the page cache stays bounded, as the state file's)
}

// [nvme] The reader thread: each asked slot's block read from the file into its staging, one at a
// time. It calls no CUDA function: the main thread waits for the staging's last copy up before asking.
typedef struct { ParamOffload* po; Zero* z; } ParamReaderArg;
static ParamReaderArg g_param_reader_arg;
static void* param_reader_thread(void* arg) {
    ParamOffload* po = ((ParamReaderArg*)arg)->po;
    Zero* z = ((ParamReaderArg*)arg)->z;
    pthread_mutex_lock(&po->mu);
    for (;;) {
        int i = -1;
        for (int k = 0; k < 4 && i < 0; k++) if (po->ahead_state[k] == 1) i = k;
        if (i < 0 && po->stop) break;
        if (i < 0) { pthread_cond_wait(&po->cv, &po->mu); continue; }
        po->ahead_state[i] = 2;
        int b = po->ahead_b[i];
        pthread_mutex_unlock(&po->mu);
        int64_t S = z->lay.S[b], bytes = S * (int64_t)sizeof(floatX);
        off_t off = (off_t)(z->lay.shard_off[b] * (int64_t)sizeof(floatX));
        int err = offload_pread(po->fd, po->stage[i], (size_t)bytes, off) ? errno : 0;
        if (!err) offload_drop_cache(po->fd, off, (size_t)bytes, 0);
        pthread_mutex_lock(&po->mu);
        po->ahead_err[i] = err;
        po->ahead_state[i] = 3;
        pthread_cond_broadcast(&po->cv);
    }
    pthread_mutex_unlock(&po->mu);
    return NULL;
}
// [nvme] Slot i's read ahead finished (or none asked); returns its block (-1: none) and ends the run
// on a failed read.
static int param_ahead_settle(ParamOffload* po, int i) {
    pthread_mutex_lock(&po->mu);
    while (po->ahead_state[i] == 1 || po->ahead_state[i] == 2) pthread_cond_wait(&po->cv, &po->mu);
    int b = po->ahead_state[i] == 3 ? po->ahead_b[i] : -1, err = po->ahead_err[i];
    pthread_mutex_unlock(&po->mu);
    if (b >= 0 && err) param_offload_die(po, err, "a read ahead of a block's shard");
    return b;
}
// [nvme] Slot i's read ahead settled and then forgotten (under the lock, as the reader reads the
// states); returns the block it held (-1: none).
static int param_ahead_take(ParamOffload* po, int i) {
    int b = param_ahead_settle(po, i);
    pthread_mutex_lock(&po->mu);
    po->ahead_state[i] = 0;
    po->ahead_b[i] = -1;
    pthread_mutex_unlock(&po->mu);
    return b;
}
// [nvme] Every read ahead finished and forgotten: the file is about to change (an update's writes).
static void param_ahead_drain(ParamOffload* po) {
    if (!po->reader_on) return;
    for (int i = 0; i < 4; i++) param_ahead_take(po, i);
}
// [nvme] Ask the reader for layer block nb into its slot's staging (nothing for the io block, the
// adapters, or past the layers).
static void param_ahead_ask(Zero* z, ParamOffload* po, int nb) {
    if (!po->reader_on || nb < 1 || nb > z->L || nb == z->lay.adapter) return;
    int i = zero_slot(z, nb);
    pthread_mutex_lock(&po->mu);
    int asked = po->ahead_b[i] == nb && po->ahead_state[i] >= 1; // (already asked, read or being read: kept)
    pthread_mutex_unlock(&po->mu);
    if (asked) return;
    param_ahead_take(po, i); // (a read of the slot's earlier guess: done, and dropped)
#ifdef __CUDACC__
    if (g_device == DEV_CUDA && po->up_pending[i]) cudaCheck(cudaEventSynchronize(po->up[i])); // stage[i]'s last copy up has left
    po->up_pending[i] = 0;
#endif
    pthread_mutex_lock(&po->mu);
    po->ahead_b[i] = nb;
    po->ahead_state[i] = 1;
    pthread_cond_broadcast(&po->cv);
    pthread_mutex_unlock(&po->mu);
}

// Zero.param_up: block b's shard into dst (param_buf + r*S), in the gather's order (see THE PATH).
static void param_offload_up(Zero* z, int b, floatX* dst) {
    ParamOffload* po = (ParamOffload*)z->param_ctx;
    int64_t S = z->lay.S[b], at = z->lay.shard_off[b];
    int slot = zero_slot(z, b);
    const floatX* src = po->shard ? po->shard + at : po->stage[slot];
    if (po->kind == OFFLOAD_NVME) {
        int have = po->reader_on ? param_ahead_take(po, slot) == b : 0;
        if (have) po->ahead_hits++;
        else {
            po->ahead_misses++;
#ifdef __CUDACC__
            if (g_device == DEV_CUDA && po->up_pending[slot]) cudaCheck(cudaEventSynchronize(po->up[slot])); // its last copy has left
#endif
            param_file_io(po, at, po->stage[slot], S, 0);
        }
    }
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaStream_t cs = z->comm->stream;
        cudaCheck(cudaEventRecord(po->compute, g_stream)); // the buffer's last reader is before this
        if (!offload_fault("offload-params-nowait", b)) cudaCheck(cudaStreamWaitEvent(cs, po->compute, 0));
        cudaCheck(cudaMemcpyAsync(dst, src, sizeof(floatX) * (size_t)S, cudaMemcpyHostToDevice, cs));
        if (po->kind == OFFLOAD_NVME) { cudaCheck(cudaEventRecord(po->up[slot], cs)); po->up_pending[slot] = 1; }
    } else
#endif
    memcpy(dst, src, sizeof(floatX) * (size_t)S);
    if (b >= 1 && b <= z->L) { // [nvme] the next layer in the hooks' order, guessed from the direction
        int next = b == 1 ? 2 : b == z->L ? z->L - 1 : b > po->last_b ? b + 1 : b < po->last_b ? b - 1 : -1; // (the ends turn)
        po->last_b = b;
        if (next >= 1 && next <= z->L) param_ahead_ask(z, po, next);
    }
}

// ZT_FAULT=crash:params-write:stepS (tests): killed (SIGKILL) right after the first write of updated
// parameters to the -offload-params nvme file in training step S (as printed: the step after comm->step
// completed ones), the file half old, half new: what a kill -9 mid-update leaves.
static void param_offload_crash(const Zero* z) {
    const char* f = getenv("ZT_FAULT");
    if (!f || strncmp(f, "crash:params-write:step", 23) || atoi(f + 23) != z->comm->step + 1) return;
    fflush(stdout);
    fflush(stderr);
    raise(SIGKILL);
}

// Zero.param_io: elements [at, at + n) of block b's shard (see Zero.param_io for the modes).
static void param_offload_io(Zero* z, int b, int64_t at, floatX* buf, int64_t n, int mode) {
    ParamOffload* po = (ParamOffload*)z->param_ctx;
    if (mode == PARAM_SYNC) {
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) cudaCheck(cudaStreamSynchronize(g_stream)); // every PUT_DEV has landed
#endif
        return;
    }
    if (n <= 0) return;
    if (mode != PARAM_GET && offload_fault("offload-params-skip-down", b)) return;
    if (mode != PARAM_GET) param_ahead_drain(po); // [nvme] no read ahead sees the file half updated
    int64_t e = z->lay.shard_off[b] + at;
    if (mode == PARAM_PUT_DEV && po->kind == OFFLOAD_NVME) { // through the pinned buffer, in pieces of its size
        for (int64_t k = 0; k < n; k += po->down_n) {
            int64_t m = n - k < po->down_n ? n - k : po->down_n;
            dev_to_host(po->down, buf + k, sizeof(floatX) * (size_t)m); // (waits for the compute stream)
            param_file_io(po, e + k, po->down, m, 1);
        }
        param_offload_crash(z);
        return;
    }
    if (mode == PARAM_PUT_DEV) { // [cpu] straight into the pinned shard, in the compute stream's order
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) { cudaCheck(cudaMemcpyAsync(po->shard + e, buf, sizeof(floatX) * (size_t)n, cudaMemcpyDeviceToHost, g_stream)); return; }
#endif
        memcpy(po->shard + e, buf, sizeof(floatX) * (size_t)n);
        return;
    }
    if (po->kind == OFFLOAD_NVME) {
        param_file_io(po, e, buf, n, mode == PARAM_PUT);
        if (mode == PARAM_PUT) param_offload_crash(z);
        return;
    }
    if (mode == PARAM_PUT) memcpy(po->shard + e, buf, sizeof(floatX) * (size_t)n);
    else memcpy(buf, po->shard + e, sizeof(floatX) * (size_t)n);
}

// Place the shards (zero_init left shard_params NULL): cpu: pinned host memory, zeroed; nvme:
// dir/zt_params_<pid>_r<rank>.bin, sized (posix_fallocate: zeros; a full disk says so now) and
// unlinked at once, and the staging buffers.
static void param_offload_init(Zero* z, const char* dir) {
    if (z->param_loc == OFFLOAD_NONE) return;
    if (z->stage != 3 || (z->lay.rep_frozen && z->lay.adapter)) die(1, "internal error: -offload-params needs ZeRO-3 with sharded blocks (check_flags refuses it)");
    ParamOffload* po = (ParamOffload*)calloc(1, sizeof(ParamOffload));
    if (!po) die(1, "out of host memory for the parameter offload state");
    po->kind = z->param_loc;
    po->fd = -1;
    if (po->kind == OFFLOAD_CPU) {
        po->shard = (floatX*)host_pinned_alloc(sizeof(floatX) * (size_t)(z->lay.shard_total > 0 ? z->lay.shard_total : 1));
    } else {
        snprintf(po->path, sizeof(po->path), "%s/zt_params_%d_r%05d.bin", dir, (int)getpid(), z->r);
        po->fd = open(po->path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (po->fd < 0) die_user("-offload-dir %s: cannot create %s: %s", dir, po->path, strerror(errno));
        unlink(po->path); // the file lives while the process does
        off_t bytes = (off_t)(sizeof(floatX) * (size_t)z->lay.shard_total);
        int e = posix_fallocate(po->fd, 0, bytes > 0 ? bytes : 1);
        if (e) { char what[64]; snprintf(what, sizeof(what), "reserving %lld bytes", (long long)bytes); param_offload_die(po, e, what); }
        for (int i = 0; i < 4; i++) {
            int64_t n = param_offload_slot_shard(&z->lay, i);
            if (n > 0) po->stage[i] = (floatX*)host_pinned_alloc(sizeof(floatX) * (size_t)n);
        }
        po->down_n = offload_max_shard(&z->lay);
        po->down = (floatX*)host_pinned_alloc(sizeof(floatX) * (size_t)(po->down_n > 0 ? po->down_n : 1));
        for (int i = 0; i < 4; i++) po->ahead_b[i] = -1;
        pthread_mutex_init(&po->mu, NULL);
        pthread_cond_init(&po->cv, NULL);
        g_param_reader_arg = (ParamReaderArg){po, z};
        offload_thread_start(&po->reader, param_reader_thread, &g_param_reader_arg, "-offload-params nvme: the reader thread");
        po->reader_on = !offload_fault("offload-params-no-ahead", 0);
    }
    po->host_bytes = param_offload_host_bytes(&z->lay, po->kind);
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaEventCreateWithFlags(&po->compute, cudaEventDisableTiming));
        for (int i = 0; i < 4; i++) cudaCheck(cudaEventCreateWithFlags(&po->up[i], cudaEventDisableTiming));
    }
#endif
    z->param_ctx = po;
    z->param_up = param_offload_up;
    z->param_io = param_offload_io;
}

static void param_offload_free(Zero* z) {
    ParamOffload* po = (ParamOffload*)z->param_ctx;
    if (!po) return;
    if (po->kind == OFFLOAD_NVME) { // the reader ends (after what it was asked)
        pthread_mutex_lock(&po->mu);
        po->stop = 1;
        pthread_cond_broadcast(&po->cv);
        pthread_mutex_unlock(&po->mu);
        pthread_join(po->reader, NULL);
        if (z->r == 0 && po->ahead_hits + po->ahead_misses > 0)
            printf("offload-params nvme: %lld of %lld gathers found their shard read ahead\n", (long long)po->ahead_hits,
                   (long long)(po->ahead_hits + po->ahead_misses));
    }
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaStreamSynchronize(z->comm->stream)); // (no copy from the host buffers is in flight)
        cudaCheck(cudaEventDestroy(po->compute));
        for (int i = 0; i < 4; i++) cudaCheck(cudaEventDestroy(po->up[i]));
    }
#endif
    if (po->shard) host_pinned_free(po->shard);
    for (int i = 0; i < 4; i++) if (po->stage[i]) host_pinned_free(po->stage[i]);
    if (po->down) host_pinned_free(po->down);
    if (po->fd >= 0) close(po->fd);
    free(po);
    z->param_ctx = NULL;
    z->param_up = NULL;
    z->param_io = NULL;
}

#endif // ZT_OFFLOAD_H
