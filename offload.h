// offload.h — the optimizer state off the device: -offload cpu keeps each rank's shard of master, m
// and v in host memory, and the optimizer runs there (ZeRO-Offload: Ren et al., "ZeRO-Offload:
// Democratizing Billion-Scale Model Training", USENIX ATC 2021), with exact semantics: an offloaded
// run is bit-identical to the same run without offload, at every stage and world size.
//
// WHAT LIVES WHERE (per rank). The device keeps the parameters and the gradients as the ZeRO stage
// says (zero.h); master, m and v of the rank's optimizer range (its shard: offload needs -z 1, 2 or
// 3) live in host memory, plain pageable memory. Pinned (page-locked) are only the staging buffers:
// two for gradient shards (FP32) and two for parameters (floatX), each one block's shard.
// On the CPU device "device" memory is the same RAM: -offload cpu is a code path there, not a saving.
//
// THE STEP (train_step), the same numbers as without offload, bit for bit:
//   1. the gradient's sum of squares, norm, clip scale and finite flag are computed where they are
//      without offload: on the device, from the shards (zero_grad_sumsq, op_step_scalars; the GPU's
//      sum is deterministic but not the CPU's bitwise), then read back (one wait per step);
//   2. the overflow check (offload_adamw_check): a first pass over the gradient shards, the update's
//      arithmetic on the host without writing; one flag summed over ranks skips the step everywhere;
//   3. block by block: the block's gradient shard goes to the host (block b+1's copy is issued
//      before block b is updated), AdamW runs on the host (adamw_host: adamw.cuh's CPU loop, the
//      same operation order as the kernel, which spells every IEEE operation out; no fast-math, no
//      FTZ/DAZ in either build), the parameters are rounded to nearest by the same rn() into a
//      staging buffer and copied back segment by segment (padding is never written, as on the
//      device) while the next block is updated;
//   4. the stage's all-gather (zero_after_step), after the last copy.
// Threads: the host AdamW uses the rank's OpenMP threads (-threads: cores / ranks on the node).
//
// CUDA ORDER (the copies run on g_offload_stream, a stream of their own):
//   a. g_offload_stream waits for the compute stream (event `start`) before the first D2H: the
//      gradients are final (zero_grad_sumsq waited for every reduction);
//   b. the host waits for block b's D2H (d2h[b % 2]) before updating it, and for block b-2's H2D
//      (h2d[b % 2]) before rounding into that staging buffer again;
//   c. the compute stream waits for the last H2D (event `done`) before the all-gather, the next
//      step's gradient zeroing and its forward.
// The CUDA emulator (make test: test/test_emu offload) runs this path with host and device memory
// kept apart (a missing copy reads NaN or stops the run) and checks that every cross-stream use is
// ordered by an event (a, c); its streams are synchronous, so it cannot show that the copies really
// overlap the host's AdamW, nor catch a missing host wait (b): a GPU run has to.
//
// NOT HERE (yet): -offload nvme (a file per rank streamed through bounded buffers); copying each
// block's gradient shard to the host as its reduction completes, overlapped with the backward of the
// next blocks (the copies start at the step, after the norm).
//
// defines: OffloadState, offload_parse, offload_name, offload_host_bytes, offload_init, offload_free,
//          offload_adamw_check, offload_adamw
#ifndef ZT_OFFLOAD_H
#define ZT_OFFLOAD_H

#include "zero.h"   // defines: Zero, Offload, zero_opt_*, zero_state_get/put, layout_segments
#include "adamw.cuh" // defines: adamw_host, adamw_check_host, AdamWParams, StepScalars

// "none" | "cpu" -> OFFLOAD_*; -1 for anything else.
static int offload_parse(const char* s) {
    if (!strcmp(s, "none")) return OFFLOAD_NONE;
    if (!strcmp(s, "cpu")) return OFFLOAD_CPU;
    return -1;
}
static const char* offload_name(Offload k) { return k == OFFLOAD_CPU ? "cpu" : k == OFFLOAD_NVME ? "nvme" : "none"; }

// The largest shard of one block: the staging buffers' length (elements).
static int64_t offload_max_shard(const BlockLayout* lay) {
    int64_t maxS = 0;
    for (int b = 0; b < lay->nblocks; b++) maxS = lay->S[b] > maxS ? lay->S[b] : maxS;
    return maxS;
}

// Host bytes one rank holds for -offload cpu at a sharded stage: master, m, v of its shard (FP32)
// and the pinned staging, two gradient and two parameter buffers of the largest block shard. THE
// closed form: offload_init allocates exactly this, the planner prints it.
static size_t offload_host_bytes(const BlockLayout* lay, Offload k) {
    if (k == OFFLOAD_NONE) return 0;
    return 3 * 4 * (size_t)lay->shard_total + 2 * (4 + sizeof(floatX)) * (size_t)offload_max_shard(lay);
}

typedef struct {
    int64_t maxS;         // elements of each staging buffer
    float* gbuf[2];       // pinned, (maxS) FP32: block b's gradient shard in gbuf[b % 2] [=]
    floatX* pbuf[2];      // pinned, (maxS) floatX: block b's parameters rounded from master [=]
    int h2d_pending[2];   // an H2D from pbuf[k] was issued (the host waits for it before refilling)
    size_t host_bytes;    // what this rank allocated on the host (offload_host_bytes)
#ifdef __CUDACC__
    cudaStream_t stream;  // g_offload_stream: the copies
    cudaEvent_t start, done, d2h[2], h2d[2];
#endif
} OffloadState;

#ifdef __CUDACC__
static cudaStream_t g_offload_stream = 0;
#endif

// [-offload cpu] the optimizer state's reads and writes (checkpoints, hashes, loading): host memory.
static void offload_cpu_io(Zero* z, int a, int64_t off, float* host, int64_t n, int write) {
    float* arr = a == 0 ? z->master : a == 1 ? z->m : z->v;
    if (write) memcpy(arr + off, host, sizeof(float) * n);
    else memcpy(host, arr + off, sizeof(float) * n);
}

// Place master, m, v (zero_init left them unallocated) and the staging buffers. Every element is
// zeroed (the state starts at 0; padding stays 0 forever).
static void offload_init(Zero* z) {
    if (z->offload == OFFLOAD_NONE) return;
    if (z->stage == 0) die(1, "internal error: -offload with ZeRO-0 (check_flags refuses it)");
    OffloadState* o = (OffloadState*)calloc(1, sizeof(OffloadState));
    if (!o) die(1, "out of host memory for the offload state");
    size_t bytes = sizeof(float) * (size_t)z->opt_total, rounded = round_up((int64_t)bytes > 0 ? (int64_t)bytes : 1, 64);
    float** arr[3] = {&z->master, &z->m, &z->v};
    for (int a = 0; a < 3; a++) {
        *arr[a] = (float*)aligned_alloc(64, rounded);
        if (!*arr[a])
            die(1, "out of host memory allocating %.1f MiB of optimizer state for -offload cpu. HINT: ./train -plan shows the "
                   "host bytes per node of each offload row", rounded / 1048576.0);
        memset(*arr[a], 0, rounded);
    }
    o->maxS = offload_max_shard(&z->lay);
    for (int k = 0; k < 2; k++) {
        o->gbuf[k] = (float*)host_pinned_alloc(sizeof(float) * o->maxS);
        o->pbuf[k] = (floatX*)host_pinned_alloc(sizeof(floatX) * o->maxS);
    }
    o->host_bytes = 3 * bytes + 2 * (sizeof(float) + sizeof(floatX)) * (size_t)o->maxS;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaStreamCreateWithFlags(&o->stream, cudaStreamNonBlocking));
        g_offload_stream = o->stream;
        cudaEvent_t* evs[6] = {&o->start, &o->done, &o->d2h[0], &o->d2h[1], &o->h2d[0], &o->h2d[1]};
        for (int i = 0; i < 6; i++) cudaCheck(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
    }
#endif
    z->offload_ctx = o;
    z->state_io = offload_cpu_io;
}

static void offload_free(Zero* z) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (!o) return;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        cudaCheck(cudaStreamSynchronize(o->stream));
        cudaEvent_t evs[6] = {o->start, o->done, o->d2h[0], o->d2h[1], o->h2d[0], o->h2d[1]};
        for (int i = 0; i < 6; i++) cudaCheck(cudaEventDestroy(evs[i]));
        cudaCheck(cudaStreamDestroy(o->stream));
        g_offload_stream = 0;
    }
#endif
    for (int k = 0; k < 2; k++) { host_pinned_free(o->gbuf[k]); host_pinned_free(o->pbuf[k]); }
    free(z->master); free(z->m); free(z->v);
    z->master = z->m = z->v = NULL;
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

// Fault injection for the tests (test/test_offload.h), from the environment:
//   ZT_FAULT=offload-skip-copy:B   block B's updated parameters never go back to the device
// (proves that the bitwise comparison sees a missing copy). Never set outside the tests.
static int offload_fault_skip_copy(int b) {
    const char* f = getenv("ZT_FAULT");
    return f && !strncmp(f, "offload-skip-copy:", 18) && atoi(f + 18) == b;
}

// Block b's gradient shard into gbuf[b % 2] (issued; offload_adamw waits for it with d2h[b % 2]).
static void offload_fetch_grads(Zero* z, OffloadState* o, int b) {
    int k = b % 2;
    offload_d2h(o, o->gbuf[k], zero_opt_grads(z, b), sizeof(float) * (size_t)(zero_opt_hi(z, b) - zero_opt_lo(z, b)));
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) cudaCheck(cudaEventRecord(o->d2h[k], o->stream));
#endif
}

// The copies of a pass over the gradient shards start after everything the compute stream did (a).
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

// The overflow check before the update (zero_adamw_check's, where the state is: on the host): block
// by block the gradient shard comes through the staging buffers and adamw_check_host runs the
// update's arithmetic without writing; the flag is summed over ranks, so every rank skips together.
// offload_adamw then fetches the gradients again: one more device-to-host pass of the gradient
// shard per step, the price of never writing an update that is not finite. sc: on the host.
static void offload_adamw_check(Zero* z, const AdamWParams* hp, StepScalars* sc) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    int nb = z->lay.nblocks;
    if (sc->finite) { // (a step that is not finite is skipped anyway)
        AdamWParams p = *hp;
        p.grad_scale = sc->grad_scale;
        offload_copies_after_compute(o);
        offload_fetch_grads(z, o, 0);
        Segment seg[MAX_BLOCK_TENSORS];
        for (int b = 0; b < nb; b++) {
            int k = b % 2;
            if (b + 1 < nb) offload_fetch_grads(z, o, b + 1); // gbuf[(b+1) % 2]: block b-1's, checked
#ifdef __CUDACC__
            if (g_device == DEV_CUDA) cudaCheck(cudaEventSynchronize(o->d2h[k])); // block b's gradients are here
#endif
            int n = layout_segments(&z->lay, b, zero_opt_lo(z, b), zero_opt_hi(z, b), seg);
            int64_t at = zero_opt_off(z, b);
            adamw_check_host(z->master + at, z->m + at, z->v + at, o->gbuf[k], seg, n, &p, sc);
        }
    }
    double any = sc->overflow;
    comm_sum_doubles(z->comm, &any, 1);
    sc->overflow = any > 0.0;
}

// The optimizer step on the host, block by block (see THE STEP above). sc: the step's scalars,
// already on the host (train_step reads them back when offloading); a step that is not finite, or
// whose update would not be (offload_adamw_check), changes nothing, as on the device.
static void offload_adamw(Zero* z, const AdamWParams* hp, const StepScalars* sc) {
    OffloadState* o = (OffloadState*)z->offload_ctx;
    if (!sc->finite || sc->overflow) return;
    AdamWParams p = *hp;
    p.grad_scale = sc->grad_scale; // computed on the device (op_step_scalars)
    int nb = z->lay.nblocks;
    offload_copies_after_compute(o); // (a)
    offload_fetch_grads(z, o, 0);
    Segment seg[MAX_BLOCK_TENSORS];
    for (int b = 0; b < nb; b++) {
        int k = b % 2;
        if (b + 1 < nb) offload_fetch_grads(z, o, b + 1); // gbuf[(b+1) % 2] was block b-1's: done with
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) { // (b) block b's gradients are here; block b-2's parameters have left pbuf[k]
            cudaCheck(cudaEventSynchronize(o->d2h[k]));
            if (o->h2d_pending[k]) cudaCheck(cudaEventSynchronize(o->h2d[k]));
        }
#endif
        int n = layout_segments(&z->lay, b, zero_opt_lo(z, b), zero_opt_hi(z, b), seg);
        int64_t at = zero_opt_off(z, b);
        adamw_host(o->pbuf[k], z->master + at, z->m + at, z->v + at, o->gbuf[k], seg, n, &p, NULL);
        floatX* dst = zero_opt_params(z, b);
        for (int i = 0; i < n && !offload_fault_skip_copy(b); i++)
            if (seg[i].len > 0) offload_h2d(o, dst + seg[i].off, o->pbuf[k] + seg[i].off, sizeof(floatX) * (size_t)seg[i].len);
#ifdef __CUDACC__
        if (g_device == DEV_CUDA) cudaCheck(cudaEventRecord(o->h2d[k], o->stream));
#endif
        o->h2d_pending[k] = 1;
    }
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { // (c) the compute stream goes on after the last parameters arrived
        cudaCheck(cudaEventRecord(o->done, o->stream));
        cudaCheck(cudaStreamWaitEvent(g_stream, o->done, 0));
    }
#endif
}

#endif // ZT_OFFLOAD_H
