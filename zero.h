// zero.h — ZeRO-0/1/2/3: block layout, dtype table, per-stage buffers, the hooks, and the
// communication backends behind comm_start / comm_wait.
//
// Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
// (SC 2020). With R ranks and Psi parameters, each stage stops replicating one more thing:
//   ZeRO-1 (P_os)      shards the optimizer state (master, m, v)
//   ZeRO-2 (P_os+g)    also the gradients: each block's gradient is reduce-scattered as soon as
//                      backward has produced it, and only the rank's shard is kept (in FP32)
//   ZeRO-3 (P_os+g+p)  also the parameters: a block's full parameters are all-gathered just before
//                      it is computed and released right after, so only ~2 layers exist at once
//
// BLOCKS. Parameters are stored block-major: block 0 is the io block {wte, wpe, lnfw, lnfb},
// blocks 1..L the layers. Inside a block each tensor starts on a 16-byte (8-element) boundary;
// the block's tail is padded to a multiple of 8*R so that it splits into R equal, aligned shards
// of S_b = P_b / R elements. Rank r owns elements [r*S_b, (r+1)*S_b) of every block, and its
// optimizer state is one flat array: the concatenation of its shards of all blocks.
// Then a ZeRO-3 gather of a layer is one all-gather and its gradient reduction one reduce-scatter.
//
// DTYPE TABLE (the same for every stage; only *how much* of each a rank holds changes):
//     parameters (storage, gathers)          floatX: BF16 (FP32 with PRECISION=FP32)
//     weight gradients (compute, accumulate) FP32
//     gradient reduction                     FP32, SUM (the loss gradient is pre-scaled by 1/(R*GA*B*T))
//     master weights, Adam m, Adam v         FP32
//     activations and their gradients        floatX
//     [QLoRA] a frozen base's encoded tensors bytes the model makes (ops/nf4.cuh: 4-bit NF4 parts), held as
//                                            floatX elements: sharded and gathered as they are, never reduced
//
// THE HOOKS. The model's forward and backward never test the stage; they call these, and each
// does what its stage needs (the io block has its own lifecycle: see zero_before_embedding).
//
//   hook                       | ZeRO-0             | ZeRO-1             | ZeRO-2                | ZeRO-3
//   ---------------------------+--------------------+--------------------+-----------------------+------------------------------
//   before block b forward     | -                  | -                  | -                     | wait gather b; start gather b+1
//   after block b forward      | -                  | -                  | -                     | release b (not the last layer)
//   io block (embedding, head) | -                  | -                  | -                     | gathered once per micro-step:
//                              |                    |                    |                       |   embedding .. LM-head backward
//   before block b backward    | -                  | -                  | grad buffer free+zero | wait gather b; start gather b-1; grad buffer
//   after block b backward     | last micro-step:   | last micro-step:   | reduce-scatter b into | same, then release b
//                              |   all-reduce b     |   reduce-scatter b |   the FP32 shard      |
//   step                       | AdamW on all       | AdamW on shard     | AdamW on shard        | AdamW on shard
//   after step                 | -                  | all-gather params  | all-gather params     | -
//
// Every rank issues the same collectives in the same order, also in eval, sampling and
// checkpointing, so that none waits forever for a partner.
//
// DETERMINISM. The MPI backend's reductions are an all-to-all followed by a local FP32 sum in
// rank order (reduce-scatter), plus an all-gather (all-reduce). Scalars (loss, norm) are
// all-gathered and summed in rank order. So at a fixed R and GA = 1, ZeRO-0, 1, 2 and 3 give
// bit-identical runs; across R the sums associate differently (same numbers within tolerance).
//
// ORDERING (what a CUDA backend must guarantee with events; the CPU backend is synchronous):
//   1. a gather into a buffer waits for the compute that last read that buffer;
//   2. a gradient buffer's next writer waits for the reduce-scatter that reads it;
//   3. the optimizer waits for the last reduce-scatter and for the norm;
//   4. the next step's first gather waits for the optimizer;
//   5. every event is created once at init; no allocation, free or synchronous copy in a step.
// Released buffers are filled with NaN when poisoning is on (-poison 1, always in the tests),
// and -comm-delay delays every collective: together they expose a missing wait.
//
// defines: Launch, launch_from_env, launch_needs_rendezvous, BlockTensor, BlockLayout, layout_*, EncodedFill, ZeroSizes,
//          zero_sizes, Comm, CollOp, comm_*, Zero, zero_* hooks, zero_count_step (the schedule, counted)
//
// May call: device.cuh, adamw.cuh, MPI, NCCL and the CUDA runtime. Knows nothing of the model or the
// trainer: a block is a list of tensors (BlockLayout), the state is Zero.
#ifndef ZT_ZERO_H
#define ZT_ZERO_H

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "device.cuh" // defines: floatX, dev_alloc, TAG_*, die, g_rank, g_world
#include "adamw.cuh"  // defines: Segment, AdamWParams, op_adamw
#ifdef USE_MPI
#include <mpi.h>
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
#include <nccl.h>
#define ncclCheck(expr)                                                                          \
    do {                                                                                         \
        ncclResult_t r_ = (expr);                                                                \
        if (r_ != ncclSuccess)                                                                   \
            die(1, "NCCL error at %s:%d: %s -> %s. HINT: NCCL_DEBUG=INFO shows why; NCCL before "  \
                   "2.30 refuses two ranks on one GPU", __FILE__, __LINE__, #expr, ncclGetErrorString(r_)); \
    } while (0)
#endif

#define TENSOR_ALIGN 8   // elements: each tensor starts 16 bytes apart in BF16 (32 in FP32)
#define ZT_MAX_RANKS 1024

// ----------------------------------------------------------------------------
// Launch: which rank am I, of how many, and how many share my node. mpirun (Open MPI or
// MPICH), Slurm's srun and torchrun each say it in their own environment variables; the first
// complete set wins. With MPI the library's answer is checked against it (comm_init). Started by
// torchrun or Slurm without MPI (launch_needs_rendezvous), the ranks meet over a TCP rendezvous
// at MASTER_ADDR:MASTER_PORT instead (comm_connect, below).

typedef struct {
    int rank, world;             // this process and the world size R
    int local_rank, local_world; // on this node
    const char* source;          // which launcher's variables were used
} Launch;

static int env_int(const char* name, int* out) {
    const char* s = getenv(name);
    if (!s || !*s) return 0;
    char* end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1000000) return -1;
    *out = (int)v;
    return 1;
}

// Fills *L from the environment (a single process when no launcher is found). Returns 0, or -1
// with a message in err when a launcher's variables are malformed or inconsistent.
static int launch_from_env(Launch* L, char* err, size_t errlen) {
    static const struct { const char *rank, *world, *lrank, *lworld, *name; } sources[] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI"},
        {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MPICH (PMI)"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "Slurm"},
        {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"},
    };
    L->rank = 0; L->world = 1; L->local_rank = 0; L->local_world = 1; L->source = "single process";
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
        int rank = -1, world = -1, lrank = 0, lworld = -1;
        int hr = env_int(sources[i].rank, &rank), hw = env_int(sources[i].world, &world);
        if (hr == 0 && hw == 0) continue;
        if (hr != 1 || hw != 1) {
            snprintf(err, errlen, "%s launch: %s=%s and %s=%s must both be set to non-negative integers",
                     sources[i].name, sources[i].rank, getenv(sources[i].rank) ? getenv(sources[i].rank) : "(unset)",
                     sources[i].world, getenv(sources[i].world) ? getenv(sources[i].world) : "(unset)");
            return -1;
        }
        if (world < 1 || rank >= world) {
            snprintf(err, errlen, "%s launch: rank %d is not in a world of size %d (%s, %s)",
                     sources[i].name, rank, world, sources[i].rank, sources[i].world);
            return -1;
        }
        if (env_int(sources[i].lrank, &lrank) < 0) {
            snprintf(err, errlen, "%s launch: %s is not a non-negative integer", sources[i].name, sources[i].lrank);
            return -1;
        }
        if (sources[i].lworld) {
            if (env_int(sources[i].lworld, &lworld) < 0) {
                snprintf(err, errlen, "%s launch: %s is not a non-negative integer", sources[i].name, sources[i].lworld);
                return -1;
            }
        } else if (!strcmp(sources[i].name, "Slurm")) {
            // SLURM_NTASKS_PER_NODE may read "4" or "4(x2)"; the leading number is this node's count
            const char* s = getenv("SLURM_NTASKS_PER_NODE");
            if (s && *s) lworld = atoi(s);
        }
        if (lworld < 1) lworld = world; // unknown: assume one node
        if (lrank >= lworld || lworld > world) {
            snprintf(err, errlen, "%s launch: local rank %d of %d local ranks does not fit a world of %d",
                     sources[i].name, lrank, lworld, world);
            return -1;
        }
        L->rank = rank; L->world = world; L->local_rank = lrank; L->local_world = lworld;
        L->source = sources[i].name;
        return 0;
    }
    return 0;
}

// Several ranks started by torchrun (RANK, WORLD_SIZE) or by Slurm (SLURM_PROCID, SLURM_NTASKS)
// and not through MPI (mpirun, or srun with an MPI plug-in, sets OMPI_COMM_WORLD_RANK, PMI_RANK or
// PMIX_RANK): they meet over the TCP rendezvous. A build without MPI always does.
static int launch_needs_rendezvous(const Launch* L) {
    if (L->world < 2 || (strcmp(L->source, "torchrun") && strcmp(L->source, "Slurm"))) return 0;
#ifdef USE_MPI
    static const char* mpi_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof(mpi_vars) / sizeof(mpi_vars[0]); i++)
        if (getenv(mpi_vars[i]) && *getenv(mpi_vars[i])) return 0;
#endif
    return 1;
}

// ----------------------------------------------------------------------------
// Block layout. Built from the model's tensor list; pure arithmetic (the planner uses it too).

typedef struct {
    int tensor;      // index in the model's tensor table
    int layer;       // 0..L-1, or -1 for io tensors
    int64_t off;     // offset inside the block (padded coordinates)
    int64_t len;     // elements in the block (floatX)
    int64_t logical; // offset in the logical parameter vector (llm.c's file order, unpadded)
    int decay;       // weight decay applies
    // [QLoRA] An encoded tensor (a frozen base's 4-bit weights: ops/nf4.cuh) stores len floatX elements
    // of bytes the model makes from its logical values (zero_fill_frozen_params asks it for them); it
    // has no pieces (layout_pieces skips it, layout_encoded lists it): nothing reads or writes it as
    // logical elements.
    int enc;
} BlockTensor;

#define MAX_BLOCK_TENSORS 16

// HYBRID SHARDING. Ranks form groups of N consecutive ranks (a node: rank w is member w % N of group
// w / N; G = W / N groups of the world's W ranks). Three layouts:
//   flat (N = W)   every stage shards over all W ranks (the ZeRO paper's layout)
//   HSDP           -shard-group N: ZeRO-1/2/3 inside each group, replicated across the G groups. The
//                  optimizer state, gradient and parameters are in N shards (rank w holds shard w % N,
//                  as the other groups' member w % N does); a gradient is reduce-scattered inside
//                  the group, then each shard all-reduced across its G replicas (the sum
//                  (g0+g1)+(g2+g3), not ((g0+g1)+g2)+g3: deterministic, not flat's bits)
//   hpZ            -hpz N (ZeRO++'s hierarchical partitioning, ZeRO-3): gradient and optimizer state in
//                  W shards exactly as flat (rank w: shard w), the parameters in a second partition
//                  of N parts, one per group member, so that every gather stays inside the group.
//                  Member j's part is the G shards j, j + N, j + 2N, ... (held after the step by the
//                  ranks j, N + j, ...: member j of each group, one all-gather among them), so a
//                  block is gathered inside the group as G rounds of N shards each (one call:
//                  CollOp.rounds). Flat's collectives among the world, in flat's order: flat's bits.
// Shards says which shards a rank holds; shards_of derives it from (W, N, hpz) and the rank. Optimizer
// shard q is always held by world rank q ([HSDP] and by member q of every other group).
typedef struct { int W, N, hpz; } Groups; // world size, ranks per group (N == W: flat), -hpz
static inline Groups groups_flat(int W) { Groups g = {W, W, 0}; return g; }
typedef struct {
    int W;      // the world (blocks are padded to a multiple of 8*W: every partition below splits them evenly)
    int R, r;   // optimizer and gradient shards, and this rank's
    int G, g;   // groups (1: flat), and this rank's group
    int pR, pr; // [ZeRO-3] parameter parts, and this rank's (hpZ: N and the member; otherwise R, r)
    int hsdp;   // the shards are replicated across the groups (-shard-group N < W)
    int hpz;    // the parameter parts are G shards each (-hpz N < W)
} Shards;
static Shards shards_of(Groups gr, int w) {
    Shards s;
    int N = gr.N > 0 && gr.N <= gr.W ? gr.N : gr.W, G = gr.W / N;
    s.W = gr.W; s.G = G; s.g = w / N; s.hsdp = s.hpz = 0;
    s.R = gr.W; s.r = w; s.pR = gr.W; s.pr = w;
    if (G > 1) { s.pR = N; s.pr = w % N; }
    if (G > 1 && gr.hpz) s.hpz = 1;
    else if (G > 1) { s.R = N; s.r = w % N; s.hsdp = 1; }
    else s.g = 0;
    return s;
}

typedef struct {
    int nblocks, R, r;  // optimizer/gradient shards, this rank's (Shards.R, .r)
    Shards sh;          // how this rank's shards sit in the world (hybrid sharding)
    int64_t* P;         // (nblocks) padded block size, a multiple of 8*W (8*R without groups)
    int64_t* off;       // (nblocks) block offset in the full layout
    int64_t* S;         // (nblocks) shard size P/R
    int64_t* shard_off; // (nblocks) offset of the block's shard in the rank's flat shard arrays
    int64_t total, shard_total, logical_total;
    // [LoRA] Frozen blocks hold parameters only: no gradient, no master, no m, no v (gathered under
    // ZeRO-3, never reduced). The trainable blocks' gradients and optimizer state are laid out as if
    // the frozen blocks were not there: goff / gshard_off, train_total / train_shard_total (with no
    // frozen block they equal off / shard_off, total / shard_total). The adapter block (the last one,
    // 0: none) lives like the io block: gathered once per micro-step, reduced after the embedding.
    int* frozen;        // (nblocks) 1: parameters only
    int64_t* goff;      // (nblocks) offset of the block in the trainable arrays (frozen: where it would be)
    int64_t* gshard_off;// (nblocks) offset of the block's shard in the trainable shard arrays
    int64_t train_total, train_shard_total;
    int adapter;        // the adapter block's index (the last block), 0: none
    // [LoRA] -lora-base replicated: under ZeRO-3 every rank holds the frozen blocks whole (in
    // full_params, as ZeRO-1/2 do: they are blocks 0..L, so their offsets are off[]) and never
    // gathers them; only the adapter block is sharded (shard_params holds its shard alone) and
    // gathered. The other stages hold every block whole anyway.
    int rep_frozen;
    int* ntensors;                                  // (nblocks)
    BlockTensor (*tensors)[MAX_BLOCK_TENSORS];      // (nblocks)
} BlockLayout;

// Allocate the layout for nblocks blocks (sh: the shards this rank holds); the caller then adds tensors with layout_add_tensor
// in block order and calls layout_finish.
static void layout_init_shards(BlockLayout* lay, int nblocks, const Shards* sh) {
    memset(lay, 0, sizeof(*lay));
    lay->nblocks = nblocks; lay->R = sh->R; lay->r = sh->r; lay->sh = *sh;
    lay->P = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->off = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->S = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->shard_off = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->frozen = (int*)calloc(nblocks, sizeof(int));
    lay->goff = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->gshard_off = (int64_t*)calloc(nblocks, sizeof(int64_t));
    lay->ntensors = (int*)calloc(nblocks, sizeof(int));
    lay->tensors = (BlockTensor(*)[MAX_BLOCK_TENSORS])calloc(nblocks, sizeof(*lay->tensors));
}

// stored: [QLoRA] 0, or the floatX elements of an encoded tensor's bytes (BlockTensor.enc)
static void layout_add_stored(BlockLayout* lay, int b, int tensor, int layer, int64_t len, int64_t logical, int decay, int64_t stored) {
    int k = lay->ntensors[b]++;
    if (k >= MAX_BLOCK_TENSORS) die(1, "too many tensors in block %d (internal error)", b);
    BlockTensor* t = &lay->tensors[b][k];
    t->tensor = tensor; t->layer = layer; t->logical = logical; t->decay = decay;
    t->enc = stored > 0; t->len = stored > 0 ? stored : len;
    t->off = lay->P[b];
    lay->P[b] = round_up(lay->P[b] + t->len, TENSOR_ALIGN);
    lay->logical_total += len;
}
static void layout_add_tensor(BlockLayout* lay, int b, int tensor, int layer, int64_t len, int64_t logical, int decay) {
    layout_add_stored(lay, b, tensor, layer, len, logical, decay, 0);
}

static void layout_finish(BlockLayout* lay) {
    int64_t off = 0, soff = 0, goff = 0, gsoff = 0;
    for (int b = 0; b < lay->nblocks; b++) {
        lay->P[b] = round_up(lay->P[b], (int64_t)TENSOR_ALIGN * lay->sh.W); // tail padding: R (and W) aligned shards
        lay->S[b] = lay->P[b] / lay->R;
        lay->off[b] = off;
        lay->shard_off[b] = soff;
        lay->goff[b] = goff;
        lay->gshard_off[b] = gsoff;
        off += lay->P[b];
        soff += lay->S[b];
        if (!lay->frozen[b]) { goff += lay->P[b]; gsoff += lay->S[b]; }
    }
    lay->total = off;
    lay->shard_total = soff;
    lay->train_total = goff;
    lay->train_shard_total = gsoff;
}

static void layout_free(BlockLayout* lay) {
    free(lay->P); free(lay->off); free(lay->S); free(lay->shard_off); free(lay->ntensors); free(lay->tensors);
    free(lay->frozen); free(lay->goff); free(lay->gshard_off);
    memset(lay, 0, sizeof(*lay));
}

// A run of real parameters inside the range [lo, hi) of block b: where it is relative to lo,
// where it is in the logical vector, how long, whether it decays.
typedef struct { int64_t local, logical, len; int decay; } Piece;

// Pieces of block b's range [lo, hi) (padded block coordinates), in order; [QLoRA] an encoded tensor
// has none. Returns the count.
static int layout_pieces(const BlockLayout* lay, int b, int64_t lo, int64_t hi, Piece* out) {
    int n = 0;
    for (int k = 0; k < lay->ntensors[b]; k++) {
        const BlockTensor* t = &lay->tensors[b][k];
        if (t->enc) continue; // [QLoRA] (no logical elements in the block)
        int64_t a = t->off > lo ? t->off : lo;
        int64_t e = t->off + t->len < hi ? t->off + t->len : hi;
        if (a >= e) continue;
        out[n].local = a - lo;
        out[n].logical = t->logical + (a - t->off);
        out[n].len = e - a;
        out[n].decay = t->decay;
        n++;
    }
    return n;
}

// [QLoRA] The encoded tensors' runs inside block b's range [lo, hi), in order: the tensor (its index in
// the block), where the run is relative to lo and to the tensor's first element, how long (floatX
// elements). Returns the count.
typedef struct { int k; int64_t local, at, len; } EncRun;
static int layout_encoded(const BlockLayout* lay, int b, int64_t lo, int64_t hi, EncRun* out) {
    int n = 0;
    for (int k = 0; k < lay->ntensors[b]; k++) {
        const BlockTensor* t = &lay->tensors[b][k];
        int64_t a = t->off > lo ? t->off : lo, e = t->off + t->len < hi ? t->off + t->len : hi;
        if (!t->enc || a >= e) continue;
        out[n].k = k; out[n].local = a - lo; out[n].at = a - t->off; out[n].len = e - a;
        n++;
    }
    return n;
}

// The optimizer segments of the same range (what AdamW and the gradient norm walk).
static int layout_segments(const BlockLayout* lay, int b, int64_t lo, int64_t hi, Segment* out) {
    Piece p[MAX_BLOCK_TENSORS];
    int n = layout_pieces(lay, b, lo, hi, p);
    for (int i = 0; i < n; i++) { out[i].off = p[i].local; out[i].len = p[i].len; out[i].decay = p[i].decay; }
    return n;
}

// [ZeRO-3] Block b's parameter part (the elements a rank holds and gathers from): its shard, or
// [hpZ] G shards (j, j + N, ...: in that order); where its optimizer shard is inside it (0 but under
// hpZ: round g of the G).
static inline int64_t layout_pS(const BlockLayout* lay, int b) { return lay->P[b] / lay->sh.pR; }
static inline int64_t layout_prim(const BlockLayout* lay, int b) { return lay->sh.hpz ? lay->sh.g * lay->S[b] : 0; }

// ----------------------------------------------------------------------------
// Per-stage buffer sizes: THE closed form. The allocator (zero_init) and the planner both call
// this; the tests check it against a formula of their own. Elements, not bytes; see the dtype
// table above for the element sizes.

typedef struct {
    int64_t full_params;  // [Z0,1,2] floatX, every block
    int64_t shard_params; // [Z3]     floatX, this rank's shard of every block
    int64_t param_bufs;   // [Z3]     floatX, io block + 2 layer blocks (one computed, one prefetched)
    int64_t full_grads;   // [Z0,1]   FP32, every block
    int64_t shard_grads;  // [Z2,3]   FP32, this rank's shard
    int64_t grad_bufs;    // [Z2,3]   FP32, io block + 2 layer blocks
    int64_t opt;          // master, m, v each: FP32, every block (Z0) or the shard (Z1,2,3)
    int64_t comm;         // FP32 staging for the MPI reduce-scatter (one chunk per rank), when R > 1
} ZeroSizes;

#define COMM_CHUNK_FLOATS (1 << 20) // MPI reduce-scatter staging: 4 MiB, whatever the model size

// The most ranks a reduction runs among: the gradient's shards, or [HSDP] a shard's replicas.
static inline int zero_reduce_ranks(const BlockLayout* lay) { return lay->sh.hsdp && lay->sh.G > lay->R ? lay->sh.G : lay->R; }

static inline int64_t zero_comm_chunk(const BlockLayout* lay) {
    // elements of each shard moved per all-to-all round, a multiple of 8
    int64_t maxS = 0;
    for (int b = 0; b < lay->nblocks; b++) maxS = lay->S[b] > maxS ? lay->S[b] : maxS;
    int64_t k = COMM_CHUNK_FLOATS / zero_reduce_ranks(lay) / TENSOR_ALIGN * TENSOR_ALIGN;
    if (k < TENSOR_ALIGN) k = TENSOR_ALIGN;
    return maxS < k ? maxS : k;
}

static ZeroSizes zero_sizes(const BlockLayout* lay, int stage) {
    ZeroSizes s;
    memset(&s, 0, sizeof(s));
    int64_t P_io = lay->P[0], P_layer = lay->nblocks > 1 + (lay->adapter > 0) ? lay->P[1] : 0;
    int64_t P_ad = lay->adapter ? lay->P[lay->adapter] : 0; // [LoRA]
    int io_tr = !lay->frozen[0], layer_tr = lay->nblocks > 1 && !lay->frozen[1];
    if (stage <= 2) s.full_params = lay->total;
    else if (lay->rep_frozen && lay->adapter) { // [LoRA] the base whole, the adapters sharded
        s.full_params = lay->off[lay->adapter];
        s.shard_params = layout_pS(lay, lay->adapter);
        s.param_bufs = P_ad;
    } else { s.shard_params = lay->shard_total * (lay->R / lay->sh.pR); s.param_bufs = P_io + 2 * P_layer + P_ad; } // ([hpZ] parts of G shards)
    if (stage <= 1) s.full_grads = lay->train_total;
    else { s.shard_grads = lay->train_shard_total; s.grad_bufs = io_tr * P_io + layer_tr * 2 * P_layer + P_ad; }
    s.opt = stage == 0 ? lay->train_total : lay->train_shard_total;
    s.comm = zero_reduce_ranks(lay) > 1 ? zero_comm_chunk(lay) * zero_reduce_ranks(lay) : 0;
    return s;
}

// ----------------------------------------------------------------------------
// Communication: comm_start(op) -> handle, comm_wait(handle). The MPI backend wraps MPI_I*
// requests; with one rank every collective is a local copy. (The NCCL backend comes with the
// CUDA device.) The backend counts collectives by kind and bytes; -comm-trace prints each.

typedef enum { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, COLL_SCALARS, COLL_BROADCAST, COLL_KINDS } CollKind;
static const char* coll_name[COLL_KINDS] = {"all-gather", "reduce-scatter", "all-reduce", "scalars", "broadcast"};

// One collective over a block. Shard s of the block is elements [s*S, (s+1)*S).
//   ALL_GATHER:     full (R*S floatX) <- every rank's shard; shard may point into full (in place)
//   REDUCE_SCATTER: shard (S FP32) = or += sum over ranks of their full[r*S .. (r+1)*S) (FP32)
//   ALL_REDUCE:     full (R*S FP32) = sum over ranks, in place
// The ranks a block collective runs among (CollOp.grp), each a communicator of its own under hybrid
// sharding (comm_split_groups; without groups the first two are the world and CG_REP one rank):
//   CG_GRAD   the optimizer shards' ranks, numbered by shard (Shards.R, .r): gradient reductions
//             (flat and hpZ: the world; HSDP: the group)
//   CG_PARAM  the parameter parts' ranks (Shards.pR, .pr): ZeRO-3's gathers, ZeRO-1/2's after the step
//             (flat: the world; HSDP and hpZ: the group)
//   CG_REP    one member position across the groups, by group (G ranks): [HSDP] each gradient shard's
//             all-reduce over its replicas; [hpZ] each parameter part's all-gather from its G shards
typedef enum { CG_GRAD, CG_PARAM, CG_REP, CG_COUNT } CommGroupId;
static const char* cg_name[CG_COUNT] = {"shards", "group", "replicas"};

typedef struct {
    CollKind kind;
    int block;         // for traces and error messages
    void* full;
    void* shard;
    int64_t S;         // shard elements
    int accumulate;    // REDUCE_SCATTER: += into shard instead of =
    int grp;           // CommGroupId: the ranks it runs among (full holds S elements for each of them)
    int rounds;        // [hpZ] ALL_GATHER in k rounds (0, 1: one): shard holds k*S, round t fills full[t*n*S, (t+1)*n*S)
} CollOp;
static inline int64_t coll_rounds(const CollOp* op) { return op->rounds > 1 ? op->rounds : 1; }

typedef struct {
    int n, i;          // ranks in the group, this rank's index among them
    int split;         // an MPI communicator of its own (comm_split_groups), freed with the Comm
    int nccl_split;    // [NCCL] an NCCL communicator of its own (set under nccl_mu once it exists)
#ifdef USE_MPI
    MPI_Comm mpi;
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
    ncclComm_t nccl;   // NULL: the world's (Comm.nccl); [HSDP] CG_PARAM shares CG_GRAD's (nccl_split 0: not its own)
#endif
} CommGroup;

#define COMM_MAX_INFLIGHT 8
#define COMM_WAIT_EVENTS 256 // [CUDA] timed waits in flight before the host sums the older half (-tune only)

typedef struct {
    CollOp op;
    int active;
    int64_t seq;       // issue order (slots are waited in this order when all are busy)
    int64_t chunk0;    // reduce-scatter: first element of the chunk in flight
#ifdef USE_MPI
    MPI_Request req;
#endif
#ifdef __CUDACC__
    cudaEvent_t ready; // [CUDA] recorded on the compute stream when the collective is started
    cudaEvent_t done;  // [CUDA] recorded on the comm stream when it has finished
#endif
} CommSlot;

// [NCCL] What the watchdog follows of one collective issued on the GPU, from its issue until the GPU
// has done it. Not the CommSlot: comm_wait frees the slot as soon as the compute stream is told to
// wait, which is long before the GPU gets there, and a slot's next collective would take over the
// watch (a hang reported late, naming a later block). A ring of its own, COMM_WATCHES deep: a record
// is taken again only after the GPU has done its collective (comm_watch_begin waits for it then, and
// while it waits the watchdog still follows the old one).
#define COMM_WATCHES 64
typedef struct {
#ifdef __CUDACC__
    cudaEvent_t done;  // recorded on the comm stream after the collective
#endif
    int pending;       // issued and `done` not yet seen (under Comm.mu, as every field)
    int recorded;      // `done` is recorded (the NCCL calls have returned)
    int kind, block, step; // for the message; kind -1: comm_nccl_warm_up's collectives
    double t_issued;
} CommWatch;

typedef struct {
    int R, r;
    int trace;            // -comm-trace: print every collective
    double timeout_s;     // -comm-timeout: a collective that takes longer names itself and ends the run
    const char* timeout_flag; // the flag that set timeout_s, for the message (NULL: -comm-timeout)
    int delay_ms;         // -comm-delay: sleep before every collective starts (debug)
    int step;             // for messages
    float* stage_buf;     // (R * chunk) FP32 reduce-scatter staging, TAG_COMM
    int64_t chunk;        // elements per shard per all-to-all round
    CommSlot slots[COMM_MAX_INFLIGHT];
    int64_t next_seq;
    int64_t count[COLL_KINDS], bytes[COLL_KINDS]; // this step's traffic
    double sent[CG_COUNT]; // this step's bytes a rank sends in each group's collectives (ring algorithms: (n-1)/n of a
                           // gather's or reduce-scatter's buffer, twice that of an all-reduce)
    CommGroup grp[CG_COUNT]; // the ranks each kind of block collective runs among (CollOp.grp)
#ifdef USE_MPI
    struct { int64_t S; int n, rounds; MPI_Datatype t; } spread[4]; // [hpZ] the rounds' receive types, made once (comm_spread_type)
    int nspread;
#endif
    double wait_s;        // time spent waiting in collectives this step ([CUDA] while time_waits: the compute stream's stalls)
    int64_t waits;        // block collectives waited for (comm_wait; [CUDA] while time_waits: those timed and summed into wait_s)
    int time_waits;       // [CUDA] -tune sets it while measuring: comm_wait times the compute stream's stall on each collective
    int mpi;              // the host side goes over MPI (MPI_Init was called here)
    int rdv;              // [rdv] launched without MPI: the host side goes over the rendezvous's sockets
    int rdv_fd[ZT_MAX_RANKS]; // [rdv] rank 0: one socket per rank (index 0 unused); rank r > 0: [0], to rank 0
    int64_t rdv_seq;      // [rdv] host collectives so far (every frame carries the number)
    pthread_mutex_t rdv_mu; // [rdv] one frame at a time (the abort hook may run on the NCCL watchdog's thread)
    char rdv_where[320];  // [rdv] MASTER_ADDR:port (rdv_port), for messages
    uint64_t rdv_token;   // [rdv] the job's token, hashed (rdv_job_token; 0: none), in every HELLO
#ifdef USE_MPI
    MPI_Comm comm;
    MPI_Datatype x_type;  // floatX as an MPI type (16- or 32-bit)
    int a2a_counts[ZT_MAX_RANKS], a2a_sdispl[ZT_MAX_RANKS], a2a_rdispl[ZT_MAX_RANKS]; // live while in flight
#endif
    int device_side;      // the block buffers are GPU memory: collectives go through NCCL (comm_start_cuda)
    int count_only;       // counting mode (zero_count_step): collectives are counted, nothing is moved or waited for
    double* sum_buf;      // (sum_cap) comm_sum_doubles' all-gathered values, allocated once (grown at start-up only)
    int64_t sum_cap;
#ifdef __CUDACC__
    cudaStream_t stream;  // [CUDA] the communication stream
    cudaEvent_t wait_ev[COMM_WAIT_EVENTS][2]; // [CUDA] time_waits: a ring of (before, after) events around a wait, created once
    int wait_head, wait_pending; // [CUDA] the next pair of the ring; pairs recorded and not yet summed into wait_s
#ifdef USE_NCCL
    ncclComm_t nccl;
    pthread_t watchdog;   // [NCCL] polls the collectives in flight and NCCL's async error
    pthread_mutex_t mu;   // [NCCL] guards the watch records
    CommWatch watch[COMM_WATCHES]; // [NCCL] the collectives on the GPU the watchdog follows (a ring)
    int64_t watch_next;   // [NCCL] collectives watched so far: the next record is watch_next % COMM_WATCHES
    pthread_mutex_t nccl_mu; // [NCCL] one thread in NCCL at a time (NCCL forbids two on one communicator): every call holds it
    volatile int watchdog_stop, watchdog_on;
    volatile int watchdog_fired; // it is ending the run (and may have aborted the communicator)
    volatile int nccl_aborted;   // ncclCommAbort was called: the handle is gone for every thread (read under nccl_mu)
#endif
#endif
} Comm;

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void comm_account(Comm* c, const CollOp* op, int64_t bytes) {
    int n = c->grp[op->grp].n;
    c->count[op->kind]++;
    c->bytes[op->kind] += bytes;
    c->sent[op->grp] += (op->kind == COLL_ALL_REDUCE ? 2.0 : 1.0) * (double)(n - 1) / n * (double)bytes;
    if (c->trace)
        printf("[comm] rank %d step %d: %-14s block %3d %12lld B%s%s\n", c->r, c->step, coll_name[op->kind],
               op->block, (long long)bytes, c->grp[CG_REP].n > 1 ? " among " : "", c->grp[CG_REP].n > 1 ? cg_name[op->grp] : "");
}

// [rdv] The peers whose rendezvous connection is closed (they ended: crashed, were killed or failed),
// seen without reading the sockets: "rank 1", "ranks 1, 3", or "" (none, or not launched that way).
// Rank 0 sees every rank, another rank only rank 0. For the NCCL watchdog's message: NCCL itself
// cannot say which rank is gone.
static inline void rdv_gone(const Comm* c, char* out, size_t cap) {
    char list[128] = "";
    int n = 0;
    for (int k = 0; c->rdv && k < c->R; k++) {
        if (c->rdv_fd[k] < 0) continue;
        struct pollfd pf = {c->rdv_fd[k], POLLRDHUP, 0};
        if (poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) && n++ < 8) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof(list) - l, "%s%d", n > 1 ? ", " : "", k);
        }
    }
    if (n) snprintf(out, cap, "rank%s %s%s", n > 1 ? "s" : "", list, n > 8 ? ", ..." : "");
    else out[0] = 0;
}

#ifdef USE_MPI
// Wait for one MPI request, yielding the core while waiting (ranks may share cores), and end the
// whole job with a message naming the collective if it takes longer than the timeout.
static void comm_poll(Comm* c, MPI_Request* req, const char* what, int block) {
    double t0 = wall_s();
    int done = 0;
    long sleep_ns = 1000;
    while (1) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) break;
        if (c->timeout_s > 0 && wall_s() - t0 > c->timeout_s)
            die(3, "collective %s of block %d at step %d did not complete within %.0f s: another rank "
                   "stopped responding (crashed, stopped or much slower). HINT: check the other ranks' "
                   "logs; raise %s if they are only slow", what, block, c->step, c->timeout_s,
                   c->timeout_flag ? c->timeout_flag : "-comm-timeout");
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 200000) sleep_ns *= 2;
    }
    c->wait_s += wall_s() - t0;
}

// [hpZ] The receive type of an all-gather in `rounds` rounds among n ranks of S elements each: a rank's
// rounds*S elements land as `rounds` runs of S, n*S apart (its extent S: rank i's start at i*S). Made
// once per shape (zero_init asks for every gathered block's), freed with the Comm: none in a step.
static MPI_Datatype comm_spread_type(Comm* c, int64_t S, int n, int rounds) {
    for (int i = 0; i < c->nspread; i++)
        if (c->spread[i].S == S && c->spread[i].n == n && c->spread[i].rounds == rounds) return c->spread[i].t;
    if (c->nspread == (int)(sizeof(c->spread) / sizeof(c->spread[0]))) die(1, "comm_spread_type: more block shapes than slots (internal error)");
    MPI_Datatype vec, t;
    MPI_Type_vector(rounds, (int)S, (int)(S * n), c->x_type, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)(S * (int64_t)sizeof(floatX)), &t);
    MPI_Type_commit(&t);
    MPI_Type_free(&vec);
    c->spread[c->nspread].S = S; c->spread[c->nspread].n = n; c->spread[c->nspread].rounds = rounds; c->spread[c->nspread].t = t;
    c->nspread++;
    return t;
}

// Issue the all-to-all for the reduce-scatter chunk [k0, k0+kn) of every rank's shard.
static void comm_rs_issue(Comm* c, CommSlot* s) {
    const CommGroup* g = &c->grp[s->op.grp];
    int64_t kn = s->op.S - s->chunk0 < c->chunk ? s->op.S - s->chunk0 : c->chunk;
    for (int j = 0; j < g->n; j++) {
        c->a2a_counts[j] = (int)kn;
        c->a2a_sdispl[j] = (int)(j * s->op.S + s->chunk0); // fits: comm_start checks R*S < 2^31
        c->a2a_rdispl[j] = (int)(j * kn);
    }
    MPI_Ialltoallv(s->op.full, c->a2a_counts, c->a2a_sdispl, MPI_FLOAT, c->stage_buf, c->a2a_counts,
                   c->a2a_rdispl, MPI_FLOAT, g->mpi, &s->req);
}
#endif

#ifdef __CUDACC__
// ---- The CUDA backend. A collective runs on the comm stream: it waits (on the GPU) for an event
// recorded on the compute stream when it is started, and records an event when done, which the
// compute stream waits for in comm_wait. The host never blocks: ordering rules 1-4 at the top of
// this file follow from where the hooks call comm_start and comm_wait. Events are created once.

// dst (n FP32) += src, on the comm stream (ZeRO-2/3 accumulating a reduce-scatter).
__global__ static void comm_add_kernel(float* dst, const float* src, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
// -comm-delay on the GPU: keep the comm stream busy for ns nanoseconds before the collective.
__global__ static void comm_delay_kernel(int64_t ns) {
    int64_t t0 = (int64_t)clock64(), cycles = ns; // about 1-2 GHz: at least ns / 2 ns
    while ((int64_t)clock64() - t0 < cycles) {}
}

#ifdef USE_NCCL
// [NCCL] One thread in NCCL at a time: NCCL forbids two threads on one communicator at once, and
// ncclCommAbort frees it for every thread. Every call on the communicator holds nccl_mu (the calls of a
// non-blocking communicator return at once, so it is held briefly); once the watchdog has aborted it, a
// thread that comes for the lock never calls NCCL again: it waits for the watchdog to end the run.
static void nccl_lock(Comm* c) {
    pthread_mutex_lock(&c->nccl_mu);
    if (c->nccl_aborted) { pthread_mutex_unlock(&c->nccl_mu); for (;;) pause(); } // the watchdog ends the run with its message
}
static void nccl_unlock(Comm* c) { pthread_mutex_unlock(&c->nccl_mu); }
// Abort the communicator (under nccl_mu) and say so to the other threads.
static void nccl_abort_locked(Comm* c) {
    for (int k = 0; k < CG_COUNT; k++) // [groups] the split communicators first (they came from the world's)
        if (c->grp[k].nccl_split) ncclCommAbort(c->grp[k].nccl);
    ncclCommAbort(c->nccl);
    c->nccl_aborted = 1;
}

// [NCCL] A non-blocking communicator may answer ncclInProgress: the call goes on in the background
// until ncclCommGetAsyncError says otherwise, and no NCCL call (nor a kernel on its stream) may come
// before. Wait for that (at most the timeout) and end the run with a message naming `what` on any
// error. Every call on the communicator goes through here (ncclIssue: the call itself under nccl_mu),
// except ncclCommDestroy (after it there is no handle to poll) and ncclCommAbort (the run ends right
// after it); the emulator's NCCL answers ncclInProgress to every call and stops a run that calls again
// too early, or from two threads at once, or after an abort.
static void nccl_settle_on(Comm* c, ncclComm_t comm, ncclResult_t r, const char* what, double timeout_s) {
    double t0 = wall_s();
    while (r == ncclInProgress) {
        if (timeout_s > 0 && wall_s() - t0 > timeout_s) {
            nccl_lock(c);
            nccl_abort_locked(c);
            nccl_unlock(c);
            die(3, "%s did not complete within %.0f s: another rank never arrived or stopped responding. HINT: check "
                   "the other ranks' logs; raise -comm-timeout if they are only slow", what, timeout_s);
        }
        usleep(1000);
        nccl_lock(c);
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        nccl_unlock(c);
        if (q != ncclSuccess) r = q;
    }
    if (r != ncclSuccess && c->watchdog_fired) for (;;) pause(); // the watchdog ends the run with its message
    char gone[160];
    rdv_gone(c, gone, sizeof(gone));
    if (r != ncclSuccess) // a remote error: another rank failed or aborted the communicator (exit code 3, as a timeout)
        die(r == ncclRemoteError ? 3 : 1, "NCCL error in %s at step %d: %s%s%s. HINT: %s", what, c->step, ncclGetErrorString(r),
            gone[0] ? "; ended: " : "", gone,
            r == ncclRemoteError ? "another rank failed or was aborted: its log says why"
                                 : "NCCL_DEBUG=INFO shows why; NCCL before 2.30 refuses two ranks on one GPU");
}
static void nccl_settle(Comm* c, ncclResult_t r, const char* what, double timeout_s) { nccl_settle_on(c, c->nccl, r, what, timeout_s); }
// A call on communicator `comm` (the world's, or [groups] a split one: comm_split_groups)
#define ncclIssueOn(c, comm, expr, what)                                                              \
    do {                                                                                              \
        nccl_lock(c);                                                                                 \
        ncclResult_t issued_ = (expr);                                                                \
        nccl_unlock(c);                                                                               \
        nccl_settle_on((c), (comm), issued_, (what), (c)->timeout_s);                                 \
    } while (0)
#define ncclIssue(c, expr, what) ncclIssueOn(c, (c)->nccl, expr, what)

// [NCCL] The watchdog: a thread that looks at the collectives in flight every 50 ms. One that has not
// finished -comm-timeout seconds after it was issued (a rank stopped, died or diverged: a collective on
// NCCL has no timeout of its own), or an asynchronous NCCL error, aborts the communicator and ends
// the run with a message naming the collective, its block and the step. It runs on this rank's GPU
// (cudaSetDevice first: a thread starts on GPU 0, and its first CUDA call would make a context there,
// ~0.5 GiB of another rank's GPU), and takes its turn in NCCL like any thread (nccl_mu): it asks for the
// async error only when no other thread is in NCCL, and aborts only holding the lock. A thread that
// keeps the lock for seconds is inside a call that does not return; then the watchdog ends the run
// without the abort (the process's exit ends the communicator with it).
static void* comm_watchdog(void* arg) {
    Comm* c = (Comm*)arg;
    cudaCheck(cudaSetDevice(g_cuda_device));
    while (!c->watchdog_stop) {
        usleep(50000);
        char why[512] = "";
        pthread_mutex_lock(&c->mu);
        for (int64_t n = c->watch_next - COMM_WATCHES; n < c->watch_next && !why[0]; n++) { // oldest first
            if (n < 0) continue;
            CommWatch* w = &c->watch[n % COMM_WATCHES];
            if (!w->pending) continue;
            cudaError_t q = w->recorded ? cudaEventQuery(w->done) : cudaErrorNotReady;
            if (q == cudaErrorNotReady) (void)cudaGetLastError(); // (kept as this thread's last error otherwise)
            if (q == cudaSuccess) { w->pending = 0; continue; }
            int warm_up = w->kind < 0;
            if (q != cudaErrorNotReady && warm_up)
                snprintf(why, sizeof(why), "the NCCL warm-up failed on the GPU: %s", cudaGetErrorString(q));
            else if (q != cudaErrorNotReady)
                snprintf(why, sizeof(why), "%s of block %d at step %d failed on the GPU: %s", coll_name[w->kind],
                         w->block, w->step, cudaGetErrorString(q));
            else if (c->timeout_s > 0 && wall_s() - w->t_issued > c->timeout_s && warm_up)
                snprintf(why, sizeof(why), "the NCCL warm-up (an all-gather and a reduce-scatter right after ncclCommInitRank) "
                         "did not complete within %.0f s", c->timeout_s);
            else if (c->timeout_s > 0 && wall_s() - w->t_issued > c->timeout_s)
                snprintf(why, sizeof(why), "collective %s of block %d at step %d did not complete within %.0f s", coll_name[w->kind],
                         w->block, w->step, c->timeout_s);
        }
        pthread_mutex_unlock(&c->mu);
        if (!why[0] && pthread_mutex_trylock(&c->nccl_mu) == 0) { // (busy: another thread is in NCCL; next round)
            for (int k = -1; k < CG_COUNT && !why[0]; k++) { // the world's communicator, then [groups] the split ones
                if (k >= 0 && !c->grp[k].nccl_split) continue;
                ncclResult_t err = ncclSuccess;
                if (!c->nccl_aborted && ncclCommGetAsyncError(k < 0 ? c->nccl : c->grp[k].nccl, &err) == ncclSuccess && err != ncclSuccess && err != ncclInProgress)
                    snprintf(why, sizeof(why), "NCCL reports an error at step %d%s%s: %s", c->step, k < 0 ? "" : " on the communicator of the ",
                             k < 0 ? "" : cg_name[k], ncclGetErrorString(err));
            }
            pthread_mutex_unlock(&c->nccl_mu);
        }
        if (why[0]) {
            c->watchdog_fired = 1;
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 2;
            if (pthread_mutex_timedlock(&c->nccl_mu, &until) == 0) {
                if (!c->nccl_aborted) nccl_abort_locked(c); // a collective waiting in NCCL now ends instead of hanging
                pthread_mutex_unlock(&c->nccl_mu);
                fprintf(stderr, "[rank %d] NCCL watchdog: aborted the communicator (ncclCommAbort): what waits on it ends\n", c->r);
            } else {
                fprintf(stderr, "[rank %d] NCCL watchdog: a call into NCCL has not returned for 2 s: the run ends without "
                                "ncclCommAbort (the process's exit ends the communicator)\n", c->r);
            }
            char gone[160];
            rdv_gone(c, gone, sizeof(gone)); // launched without MPI: who closed its connection
            if (gone[0])
                die(3, "NCCL watchdog: %s: %s ended (its connection to this rank closed: crashed, killed or failed). HINT: "
                       "its log says why", why, gone);
            die(3, "NCCL watchdog: %s: another rank stopped responding (crashed, stopped or much slower). HINT: check "
                   "the other ranks' logs; raise -comm-timeout if they are only slow", why);
        }
    }
    return NULL;
}

// [NCCL] The next watch record, for a collective about to be issued (kind -1: the warm-up). Its
// previous collective, COMM_WATCHES back, is done unless the GPU is that far behind the host: then
// the host waits for it here (as dev_upload does for its slots), and the watchdog still follows it.
static CommWatch* comm_watch_begin(Comm* c, int kind, int block) {
    CommWatch* w = &c->watch[c->watch_next % COMM_WATCHES];
    pthread_mutex_lock(&c->mu);
    int busy = w->pending && w->recorded;
    pthread_mutex_unlock(&c->mu);
    if (busy) {
        cudaError_t q = cudaEventQuery(w->done);
        if (q == cudaErrorNotReady) { (void)cudaGetLastError(); q = cudaEventSynchronize(w->done); } // (see dev_upload)
        cudaCheck(q);
    }
    pthread_mutex_lock(&c->mu);
    w->pending = 1; w->recorded = 0; w->kind = kind; w->block = block; w->step = c->step; w->t_issued = wall_s();
    c->watch_next++;
    pthread_mutex_unlock(&c->mu);
    return w;
}
// [NCCL] The collective's calls have returned: its `done` goes on the comm stream after them.
static void comm_watch_recorded(Comm* c, CommWatch* w) {
    pthread_mutex_lock(&c->mu);
    cudaCheck(cudaEventRecord(w->done, c->stream));
    w->recorded = 1;
    pthread_mutex_unlock(&c->mu);
}
#else
#define ncclIssue(c, expr, what) (void)0
#endif

static void comm_start_cuda(Comm* c, CommSlot* s) {
    CollOp* op = &s->op;
#ifdef USE_NCCL
    CommWatch* w = c->watchdog_on ? comm_watch_begin(c, op->kind, op->block) : NULL;
#endif
    cudaCheck(cudaEventRecord(s->ready, g_stream));
    cudaCheck(cudaStreamWaitEvent(c->stream, s->ready, 0));
    if (c->delay_ms > 0) { comm_delay_kernel<<<1, 1, 0, c->stream>>>((int64_t)c->delay_ms * 1000000); cudaCheck(cudaGetLastError()); }
    int64_t S = op->S;
    const CommGroup* g = &c->grp[op->grp];
    if (g->n == 1) {
        if (op->kind == COLL_ALL_GATHER && op->shard != op->full)
            cudaCheck(cudaMemcpyAsync(op->full, op->shard, S * coll_rounds(op) * sizeof(floatX), cudaMemcpyDeviceToDevice, c->stream));
        if (op->kind == COLL_REDUCE_SCATTER && op->accumulate) {
            comm_add_kernel<<<(unsigned)ceil_div(S, 256), 256, 0, c->stream>>>((float*)op->shard, (const float*)op->full, S);
            cudaCheck(cudaGetLastError());
        } else if (op->kind == COLL_REDUCE_SCATTER && op->shard != op->full) {
            cudaCheck(cudaMemcpyAsync(op->shard, op->full, S * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
        }
    } else {
#ifdef USE_NCCL
        ncclDataType_t xt = sizeof(floatX) == 2 ? ncclBfloat16 : ncclFloat;
        float* mine_f = (float*)op->full + (int64_t)g->i * S; // this rank's slice of a full FP32 block
        ncclComm_t nc = g->nccl ? g->nccl : c->nccl; // (NULL: the world's)
        switch (op->kind) {
        case COLL_ALL_GATHER: // in place when shard == full + i*S, which NCCL supports
            if (coll_rounds(op) > 1) { // [hpZ] k all-gathers in one NCCL group: round t into full + t*n*S
                ncclResult_t r = ncclSuccess;
                nccl_lock(c);
                ncclResult_t q = ncclGroupStart();
                for (int t = 0; t < op->rounds && q == ncclSuccess; t++)
                    q = ncclAllGather((const floatX*)op->shard + (int64_t)t * S, (floatX*)op->full + (int64_t)t * g->n * S, (size_t)S, xt, nc, c->stream);
                r = ncclGroupEnd();
                nccl_unlock(c);
                nccl_settle_on(c, nc, q != ncclSuccess ? q : r, "ncclAllGather (hpZ rounds, grouped)", c->timeout_s);
            } else {
                ncclIssueOn(c, nc, ncclAllGather(op->shard, op->full, (size_t)S, xt, nc, c->stream), "ncclAllGather");
            }
            break;
        case COLL_REDUCE_SCATTER:
            if (!op->accumulate) {
                ncclIssueOn(c, nc, ncclReduceScatter(op->full, op->shard, (size_t)S, ncclFloat, ncclSum, nc, c->stream), "ncclReduceScatter");
            } else { // reduce into this rank's slice of the (scratch) block buffer, then add to the shard
                ncclIssueOn(c, nc, ncclReduceScatter(op->full, mine_f, (size_t)S, ncclFloat, ncclSum, nc, c->stream), "ncclReduceScatter");
                comm_add_kernel<<<(unsigned)ceil_div(S, 256), 256, 0, c->stream>>>((float*)op->shard, mine_f, S);
                cudaCheck(cudaGetLastError());
            }
            break;
        case COLL_ALL_REDUCE: // [ZeRO-0] as reduce-scatter + all-gather, both in place: then its sums are the
            // reduce-scatter's, as at ZeRO-1/2/3, and the stages stay bit-identical at R >= 3 (NCCL's all-reduce may
            // add in another order: a tree instead of the ring). Same bytes on the wire as a ring all-reduce.
            ncclIssueOn(c, nc, ncclReduceScatter(op->full, mine_f, (size_t)S, ncclFloat, ncclSum, nc, c->stream), "ncclReduceScatter");
            ncclIssueOn(c, nc, ncclAllGather(mine_f, op->full, (size_t)S, ncclFloat, nc, c->stream), "ncclAllGather");
            break;
        default: break;
        }
#else
        die(1, "the CUDA device with %d ranks needs NCCL: this build has none (internal error: comm_init_device checks)", c->R);
#endif
    }
    cudaCheck(cudaEventRecord(s->done, c->stream));
#ifdef USE_NCCL
    if (w) comm_watch_recorded(c, w);
#endif
}
#endif

static void comm_wait(Comm* c, int h);
static void comm_groups_world(Comm* c);

// The in-flight collective issued first, or -1.
static int comm_oldest(const Comm* c) {
    int h = -1;
    for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
        if (c->slots[i].active && (h < 0 || c->slots[i].seq < c->slots[h].seq)) h = i;
    return h;
}

static int comm_start(Comm* c, const CollOp* op) {
    if (c->delay_ms > 0) usleep((useconds_t)c->delay_ms * 1000);
    if (op->kind != COLL_ALL_GATHER && !c->device_side) // [MPI] one staging buffer: one reduction in flight at a time
        for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
            if (c->slots[i].active && c->slots[i].op.kind != COLL_ALL_GATHER) comm_wait(c, i);
    int h = -1;
    for (int i = 0; i < COMM_MAX_INFLIGHT; i++)
        if (!c->slots[i].active) { h = i; break; }
    if (h < 0) { h = comm_oldest(c); comm_wait(c, h); } // all busy: finish the oldest first
    CommSlot* s = &c->slots[h];
    s->op = *op;
    s->active = 1;
    s->seq = c->next_seq++;
    int64_t xbytes = (int64_t)sizeof(floatX);
    if (c->grp[CG_GRAD].n == 0) comm_groups_world(c); // (a Comm that comm_init never saw: the tests' single-rank ones)
    const CommGroup* g = &c->grp[op->grp];
    int64_t full_n = op->S * g->n * coll_rounds(op);
    switch (op->kind) {
    case COLL_ALL_GATHER: comm_account(c, op, full_n * xbytes); break;
    case COLL_REDUCE_SCATTER: comm_account(c, op, full_n * 4); break;
    case COLL_ALL_REDUCE: comm_account(c, op, full_n * 4); break;
    default: die(1, "comm_start: unsupported kind (internal error)");
    }
    if (c->count_only) { s->active = 0; return h; } // counted; there is nothing to move
    if (full_n > 2147483647LL) die(1, "block %d has %lld elements, more than one collective can move (2^31)", op->block, (long long)full_n);
#ifdef __CUDACC__
    if (c->device_side) { comm_start_cuda(c, s); return h; }
#endif
    if (g->n > 1 && !c->mpi) die(1, "comm_start: the CPU device with %d ranks and no MPI (internal error: comm_check_cpu_device)", c->R);
#ifdef USE_MPI
    if (g->n > 1) {
        if (op->kind == COLL_ALL_GATHER && coll_rounds(op) > 1) { // [hpZ] rank i's k shards land k times at stride n*S
            MPI_Iallgather(op->shard, (int)(op->S * op->rounds), c->x_type, op->full, 1, comm_spread_type(c, op->S, g->n, op->rounds), g->mpi, &s->req);
        } else if (op->kind == COLL_ALL_GATHER) {
            floatX* mine = (floatX*)op->full + (int64_t)g->i * op->S;
            const void* src = op->shard == (void*)mine ? MPI_IN_PLACE : op->shard;
            MPI_Iallgather(src, (int)op->S, c->x_type, op->full, (int)op->S, c->x_type, g->mpi, &s->req);
        } else {
            // reduce-scatter and all-reduce both start with the chunked all-to-all
            if (op->kind == COLL_ALL_REDUCE) s->op.shard = (float*)op->full + (int64_t)g->i * op->S;
            s->chunk0 = 0;
            comm_rs_issue(c, s);
        }
        return h;
    }
#endif
    return h; // one rank: all the work happens in comm_wait
}

#ifdef __CUDACC__
// [CUDA] time_waits: sum the oldest n timed waits of the ring into wait_s. The host waits for the
// last of them (and so for the earlier ones: one stream); each is the time between an event
// recorded on the compute stream just before its cudaStreamWaitEvent and one just after: how long
// the stream stalled there for the collective.
static void comm_sum_waits(Comm* c, int n) {
    if (n <= 0) return;
    int first = (c->wait_head - c->wait_pending + COMM_WAIT_EVENTS) % COMM_WAIT_EVENTS;
    cudaCheck(cudaEventSynchronize(c->wait_ev[(first + n - 1) % COMM_WAIT_EVENTS][1]));
    for (int i = 0; i < n; i++) {
        cudaEvent_t* pair = c->wait_ev[(first + i) % COMM_WAIT_EVENTS];
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, pair[0], pair[1]));
        c->wait_s += ms / 1000.0;
        c->waits++;
    }
    c->wait_pending -= n;
}
#endif

// Everything comm_wait timed is in wait_s and waits ([CUDA] time_waits: the host waits for the
// compute stream to pass the last wait; elsewhere there is nothing to collect).
static void comm_collect_waits(Comm* c) {
#ifdef __CUDACC__
    if (c->device_side) comm_sum_waits(c, c->wait_pending);
#else
    (void)c;
#endif
}

static void comm_wait(Comm* c, int h) {
    if (h < 0) return;
    CommSlot* s = &c->slots[h];
    if (!s->active) return;
    CollOp* op = &s->op;
#ifdef __CUDACC__
    if (c->device_side) { // the compute stream waits on the GPU; the host goes on
        cudaEvent_t* pair = NULL; // time_waits: events around the wait (the ring full: the older half summed first)
        if (c->time_waits) {
            if (c->wait_pending == COMM_WAIT_EVENTS) comm_sum_waits(c, COMM_WAIT_EVENTS / 2);
            pair = c->wait_ev[c->wait_head];
            cudaCheck(cudaEventRecord(pair[0], g_stream));
        }
        cudaCheck(cudaStreamWaitEvent(g_stream, s->done, 0));
        if (pair) {
            cudaCheck(cudaEventRecord(pair[1], g_stream));
            c->wait_head = (c->wait_head + 1) % COMM_WAIT_EVENTS;
            c->wait_pending++;
        }
        s->active = 0;
        return;
    }
#endif
    c->waits++;
    const CommGroup* g = &c->grp[op->grp];
    if (g->n == 1) {
        if (op->kind == COLL_ALL_GATHER && op->shard != op->full)
            memcpy(op->full, op->shard, op->S * coll_rounds(op) * sizeof(floatX));
        if (op->kind == COLL_REDUCE_SCATTER) {
            float* dst = (float*)op->shard;
            const float* src = (const float*)op->full;
            if (op->accumulate) { for (int64_t i = 0; i < op->S; i++) dst[i] += src[i]; }
            else if (dst != src) memcpy(dst, src, op->S * sizeof(float)); // (in place: [-offload-params with -offload])
        }
        s->active = 0;
        return;
    }
#ifdef USE_MPI
    if (op->kind == COLL_ALL_GATHER) {
        comm_poll(c, &s->req, coll_name[op->kind], op->block);
        s->active = 0;
        return;
    }
    // reduce-scatter rounds: wait, sum the R contributions in rank order, next chunk
    float* dst = (float*)op->shard;
    while (1) {
        comm_poll(c, &s->req, coll_name[op->kind], op->block);
        int64_t kn = op->S - s->chunk0 < c->chunk ? op->S - s->chunk0 : c->chunk;
        int acc = op->accumulate && op->kind == COLL_REDUCE_SCATTER;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < kn; i++) {
            float sum = c->stage_buf[i];
            for (int j = 1; j < g->n; j++) sum += c->stage_buf[(int64_t)j * kn + i];
            dst[s->chunk0 + i] = acc ? dst[s->chunk0 + i] + sum : sum;
        }
        s->chunk0 += kn;
        if (s->chunk0 >= op->S) break;
        comm_rs_issue(c, s);
    }
    if (op->kind == COLL_ALL_REDUCE) {
        MPI_Iallgather(MPI_IN_PLACE, (int)op->S, MPI_FLOAT, op->full, (int)op->S, MPI_FLOAT, g->mpi, &s->req);
        comm_poll(c, &s->req, coll_name[op->kind], op->block);
    }
    s->active = 0;
#endif
}

// Finish everything in flight, in issue order (the same order on every rank).
static void comm_wait_all(Comm* c) {
    for (int h; (h = comm_oldest(c)) >= 0;) comm_wait(c, h);
}

// ----------------------------------------------------------------------------
// The TCP rendezvous: several ranks without MPI (torchrun, or Slurm's srun without an MPI
// plug-in). Rank 0 listens on MASTER_PORT (+ 1 under torchrun's agent store: rdv_port); every other
// rank connects to MASTER_ADDR at that port, retrying until -comm-timeout, and says who it is (HELLO: rank, world size, protocol version);
// when all have arrived rank 0 answers each (WELCOME). Afterwards the same sockets carry the host
// side of the Comm layer (comm_sum_doubles, comm_allgather_u64, comm_broadcast: the flag/build
// hash, NCCL's unique id, scalar sums, the checkpoint's error flag and barriers) as a star through
// rank 0: each rank sends its bytes to rank 0, which answers with all of them in rank order, so
// the callers sum in rank order exactly as over MPI (the same bits). The CUDA device's block
// collectives go over NCCL, as under mpirun.
//
// Every frame starts with a checked header (magic, version, kind, sender's rank and world size,
// the host collective's number, payload size). Whatever does not fit (a peer that never arrives,
// another program on the port, a rank of another run or build, ranks issuing different host
// collectives) ends the rank that sees it with a message naming the peer (exit code 3), and the
// abort hook sends that message to the others (ABORT frame: they end with the same code and say
// who ended the run). A rank that dies closes its sockets: its peers see it at their next host
// collective; one waiting in NCCL is ended by the watchdog (comm_watchdog) after -comm-timeout.
//
// Only the job joins (docs/launch.md): each HELLO carries a hash of the job's token (ZT_JOB_TOKEN,
// else TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.SLURM_STEP_ID: rdv_job_token), and with a token rank
// 0 closes every connection that does not present it (garbage, a HELLO without it, an ABORT before
// HELLO), says so and goes on waiting: a stranger can neither take a rank's place nor end the run.
// Without one, one warning says the rendezvous is unauthenticated, and a stranger's frames end rank
// 0 as garbage (exit 3, blamed on its address). An ABORT is obeyed only from a rank that said HELLO;
// its text is printed escaped and its exit code kept to the codes a rank ends with (1-5, else 3).
// Rank 0 listens on MASTER_ADDR itself when that is a numeric address of this host (127.0.0.1: the
// loopback only), else on every interface.

#define RDV_MAGIC 0x5652545au // the bytes "ZTRV"
#define RDV_VERSION 2 // (2: HELLO carries the job token)
#define RDV_MAX_TEXT 1024     // an ABORT frame's message
enum { RDV_HELLO = 1, RDV_WELCOME = 2, RDV_DATA = 3, RDV_ABORT = 4 };
typedef struct {
    uint32_t magic;
    uint16_t version, kind;
    int32_t rank, world; // the sender's
    int64_t seq;         // DATA: the host collective's number; ABORT: the sender's exit code
    int64_t bytes;       // payload after the header
} RdvHdr;                // 32 bytes (every rank runs the same build: host byte order)

static Comm* g_rdv_comm = NULL; // for the abort hook (comm_rdv_abort)
enum { RDV_OK = 0, RDV_TIMEOUT = -1, RDV_EOF = -2, RDV_ERR = -3 };

// Milliseconds to wait in poll before the deadline (0: none), or -1 when it has passed.
static int rdv_poll_ms(double deadline) {
    if (deadline <= 0) return 1000;
    double left = deadline - wall_s();
    return left <= 0 ? -1 : left > 1.0 ? 1000 : (int)(left * 1000) + 1;
}

// Send or receive exactly n bytes on a non-blocking socket before the deadline.
static int rdv_io(int fd, void* p, size_t n, int sending, double deadline) {
    size_t done = 0;
    while (done < n) {
        int ms = rdv_poll_ms(deadline);
        if (ms < 0) return RDV_TIMEOUT;
        struct pollfd pf = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
        int k = poll(&pf, 1, ms);
        if (k < 0 && errno != EINTR) return RDV_ERR;
        if (k <= 0) continue;
        ssize_t m = sending ? send(fd, (char*)p + done, n - done, MSG_NOSIGNAL) : recv(fd, (char*)p + done, n - done, 0);
        if (m < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (m < 0) return RDV_ERR;
        if (m == 0) return RDV_EOF;
        done += (size_t)m;
    }
    return RDV_OK;
}

// "rank 2", or "rank 0 (MASTER_ADDR:MASTER_PORT)" seen from the other ranks.
static const char* rdv_peer(const Comm* c, int k) {
    static char name[400];
    if (k == 0) snprintf(name, sizeof(name), "rank 0 (%s)", c->rdv_where);
    else snprintf(name, sizeof(name), "rank %d", k);
    return name;
}

// The connection to rank k failed with e during `what`: end this rank (exit code 3).
static void rdv_lost(const Comm* c, int k, int e, const char* what) {
    const char* flag = c->timeout_flag ? c->timeout_flag : "-comm-timeout";
    if (e == RDV_TIMEOUT)
        die(3, "%s: %s sent nothing within %.0f s: it stopped responding (crashed, stopped or much slower). HINT: check "
               "its log; raise %s if it is only slow", what, rdv_peer(c, k), c->timeout_s, flag);
    if (e == RDV_EOF && c->r != 0 && k == 0 && !strncmp(what, "rendezvous", 10))
        die(3, "%s: %s closed the connection after this rank's HELLO: it refused it, or it ended. HINT: every rank needs the same "
               "ZT_JOB_TOKEN (docs/launch.md); rank 0's log says which", what, rdv_peer(c, k));
    if (e == RDV_EOF)
        die(3, "%s: %s closed its connection: it ended (crashed, was killed or failed). HINT: its log says why", what, rdv_peer(c, k));
    die(3, "%s: the connection to %s failed: %s. HINT: check its log and the network", what, rdv_peer(c, k), strerror(errno));
}

// One frame to rank k (its socket: fd), whole, before the deadline.
static void rdv_send(Comm* c, int k, int kind, int64_t seq, const void* p, int64_t bytes, const char* what, double deadline) {
    RdvHdr h = {RDV_MAGIC, RDV_VERSION, (uint16_t)kind, c->r, c->R, seq, bytes};
    int fd = c->rdv_fd[c->r == 0 ? k : 0];
    pthread_mutex_lock(&c->rdv_mu);
    int e = rdv_io(fd, &h, sizeof(h), 1, deadline);
    if (e == RDV_OK && bytes > 0) e = rdv_io(fd, (void*)p, (size_t)bytes, 1, deadline);
    pthread_mutex_unlock(&c->rdv_mu);
    if (e != RDV_OK) rdv_lost(c, k, e, what);
}

// A peer's text as printable ASCII: control and non-ASCII bytes as \xNN (no terminal escapes).
static void rdv_escape(const char* in, char* out, size_t cap) {
    size_t n = 0;
    for (const unsigned char* p = (const unsigned char*)in; *p && n + 5 < cap; p++) {
        if (*p >= 0x20 && *p < 0x7f) out[n++] = (char)*p;
        else n += (size_t)snprintf(out + n, cap - n, "\\x%02x", *p);
    }
    out[n] = 0;
}

// The job's token, hashed for HELLO (0: none): ZT_JOB_TOKEN (a secret: dev/launch.sh draws one),
// else TORCHELASTIC_RUN_ID (torchrun's --rdzv-id; its default "none" is none), else Slurm's
// SLURM_JOB_ID.SLURM_STEP_ID (they tell jobs apart; squeue shows them to every user: no secret).
// src names where it came from.
static uint64_t rdv_job_token(char* src, size_t cap) {
    const char* t = getenv("ZT_JOB_TOKEN");
    char buf[256];
    snprintf(src, cap, "ZT_JOB_TOKEN");
    if (!t || !*t) {
        t = getenv("TORCHELASTIC_RUN_ID");
        snprintf(src, cap, "TORCHELASTIC_RUN_ID");
        if (t && !strcmp(t, "none")) t = NULL;
    }
    if (!t || !*t) {
        const char *j = getenv("SLURM_JOB_ID"), *st = getenv("SLURM_STEP_ID");
        snprintf(src, cap, "SLURM_JOB_ID");
        if (j && *j) { snprintf(buf, sizeof(buf), "slurm %s.%s", j, st ? st : ""); t = buf; }
    }
    if (!t || !*t) { src[0] = 0; return 0; }
    uint64_t h = fnv1a(fnv1a(FNV_INIT, "zerotrain job token ", 20), t, strlen(t));
    return h ? h : 1;
}

// Read the next frame's header from rank k and check it: `kind` from rank k of this world, with
// this seq and payload size (-1: any). An ABORT frame ends this rank as its sender ended;
// anything else that does not fit is garbage. `who` names the peer ("rank 2", or an address
// before HELLO has said which rank it is).
static RdvHdr rdv_expect(Comm* c, int fd, int k, const char* who, int kind, int64_t seq, int64_t bytes, const char* what, double deadline) {
    RdvHdr h;
    memset(&h, 0, sizeof(h));
    int e = rdv_io(fd, &h, sizeof(h), 0, deadline);
    if (e != RDV_OK) {
        if (k >= 0) rdv_lost(c, k, e, what);
        die(3, "%s: %s %s", what, who, e == RDV_TIMEOUT ? "connected but sent nothing (not a rank of this run?)" :
                e == RDV_EOF ? "connected and closed the connection before saying which rank it is: not a rank of this run" : strerror(errno));
    }
    if (h.magic != RDV_MAGIC || h.version != RDV_VERSION)
        die(3, "%s: %s sent garbage (magic %08x version %u, expected %08x version %d): not a rank of this build of train. "
               "HINT: another program on MASTER_PORT, or a rank started from another build", what, who, h.magic, h.version, RDV_MAGIC, RDV_VERSION);
    if (h.kind == RDV_ABORT && k < 0) // (only a rank that said HELLO may end the run)
        die(3, "%s: %s sent an ABORT frame before saying which rank it is: not a rank of this run (ignored: the run does not end "
               "with its exit code). HINT: another program on MASTER_PORT; set ZT_JOB_TOKEN (docs/launch.md) so that rank 0 refuses such "
               "connections and goes on", what, who);
    if (h.kind == RDV_ABORT && h.bytes >= 0 && h.bytes <= RDV_MAX_TEXT) {
        char text[RDV_MAX_TEXT + 1] = "", shown[4 * RDV_MAX_TEXT + 1];
        if (rdv_io(fd, text, (size_t)h.bytes, 0, wall_s() + 5.0) != RDV_OK) snprintf(text, sizeof(text), "(its message was lost)");
        text[h.bytes] = 0;
        rdv_escape(text, shown, sizeof(shown));
        int code = h.seq >= 1 && h.seq <= 5 ? (int)h.seq : 3; // the codes a rank ends with (docs/reliability.md)
        die(code, "rank %d ended the run (exit code %d): %s", h.rank, code, shown);
    }
    if (h.kind == RDV_HELLO && kind == RDV_HELLO && h.world != c->R)
        die(3, "%s: %s says it is rank %d of %d, but rank 0 has a world of %d. HINT: start every rank with the same WORLD_SIZE "
               "(or SLURM_NTASKS)", what, who, h.rank, h.world, c->R);
    if (h.kind != kind || (k >= 0 && h.rank != k) || h.world != c->R || (seq >= 0 && h.seq != seq) || (bytes >= 0 && h.bytes != bytes))
        die(3, "%s: %s sent an unexpected frame (kind %u from rank %d of %d, host collective #%lld of %lld bytes; expected kind %d "
               "from rank %d of %d, #%lld of %lld bytes). HINT: every rank must be started with the same WORLD_SIZE and command line",
            what, who, h.kind, h.rank, h.world, (long long)h.seq, (long long)h.bytes, kind, k, c->R, (long long)seq, (long long)bytes);
    return h;
}

// A frame's payload (its header was checked) from rank k.
static void rdv_recv_payload(Comm* c, int k, void* p, int64_t bytes, const char* what, double deadline) {
    int e = rdv_io(c->rdv_fd[c->r == 0 ? k : 0], p, (size_t)bytes, 0, deadline);
    if (e != RDV_OK) rdv_lost(c, k, e, what);
}

static double rdv_deadline(const Comm* c) { return c->timeout_s > 0 ? wall_s() + c->timeout_s : 0; }

// Every rank's n bytes (mine), in rank order, into all (R*n bytes) on every rank.
static void rdv_allgather(Comm* c, const void* mine, void* all, int64_t n, const char* name) {
    int64_t seq = ++c->rdv_seq;
    double dl = rdv_deadline(c);
    char what[160];
    snprintf(what, sizeof(what), "host collective %s (#%lld) at step %d", name, (long long)seq, c->step);
    memmove((char*)all + (int64_t)c->r * n, mine, (size_t)n);
    if (c->r != 0) {
        rdv_send(c, 0, RDV_DATA, seq, mine, n, what, dl);
        rdv_expect(c, c->rdv_fd[0], 0, rdv_peer(c, 0), RDV_DATA, seq, n * c->R, what, dl);
        rdv_recv_payload(c, 0, all, n * c->R, what, dl);
        return;
    }
    // rank 0: take the frames as they come (an ABORT from any rank is seen at once), then answer
    int left = c->R - 1;
    char* got = (char*)calloc(c->R, 1);
    struct pollfd* pf = (struct pollfd*)malloc(sizeof(struct pollfd) * c->R);
    int* who = (int*)malloc(sizeof(int) * c->R);
    while (left > 0) {
        int np = 0;
        for (int k = 1; k < c->R; k++)
            if (!got[k]) { pf[np].fd = c->rdv_fd[k]; pf[np].events = POLLIN; pf[np].revents = 0; who[np++] = k; }
        int ms = rdv_poll_ms(dl);
        if (ms < 0) rdv_lost(c, who[0], RDV_TIMEOUT, what); // the first rank still missing
        int ready = poll(pf, (nfds_t)np, ms);
        if (ready < 0 && errno != EINTR) die(3, "%s: poll failed: %s", what, strerror(errno));
        for (int i = 0; i < np && ready > 0; i++) {
            if (!pf[i].revents) continue;
            int k = who[i];
            rdv_expect(c, c->rdv_fd[k], k, rdv_peer(c, k), RDV_DATA, seq, n, what, dl);
            rdv_recv_payload(c, k, (char*)all + (int64_t)k * n, n, what, dl);
            got[k] = 1;
            left--;
        }
    }
    free(got); free(pf); free(who);
    for (int k = 1; k < c->R; k++) rdv_send(c, k, RDV_DATA, seq, all, n * c->R, what, dl);
}

// Rank root's n bytes to every rank (through rank 0 when root is another rank).
static void rdv_broadcast(Comm* c, void* buf, int64_t n, int root) {
    int64_t seq = ++c->rdv_seq;
    double dl = rdv_deadline(c);
    char what[160];
    snprintf(what, sizeof(what), "host collective broadcast from rank %d (#%lld) at step %d", root, (long long)seq, c->step);
    if (root != 0 && c->r == root) rdv_send(c, 0, RDV_DATA, seq, buf, n, what, dl);
    if (root != 0 && c->r == 0) {
        rdv_expect(c, c->rdv_fd[root], root, rdv_peer(c, root), RDV_DATA, seq, n, what, dl);
        rdv_recv_payload(c, root, buf, n, what, dl);
    }
    if (c->r == 0) {
        for (int k = 1; k < c->R; k++)
            if (k != root) rdv_send(c, k, RDV_DATA, seq, buf, n, what, dl);
    } else if (c->r != root) {
        rdv_expect(c, c->rdv_fd[0], 0, rdv_peer(c, 0), RDV_DATA, seq, n, what, dl);
        rdv_recv_payload(c, 0, buf, n, what, dl);
    }
}

static void rdv_socket_options(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); // small frames, sent at once
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// Rank 0: listen on MASTER_PORT (every interface), take one HELLO per rank until all are there or
// the deadline passes, then WELCOME each.
static void rdv_listen(Comm* c, int port, double timeout_s, double dl) {
    char what[400];
    snprintf(what, sizeof(what), "rendezvous at %s", c->rdv_where);
    int lfd = -1, one = 1, zero = 0;
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof(sa));
    socklen_t salen = 0;
    const char* maddr = getenv("MASTER_ADDR");
    struct in_addr a4;
    struct in6_addr a6;
    if (maddr && (inet_pton(AF_INET, maddr, &a4) == 1 || inet_pton(AF_INET6, maddr, &a6) == 1)) { // MASTER_ADDR itself, when it is this host's
        int v4 = inet_pton(AF_INET, maddr, &a4) == 1;
        lfd = socket(v4 ? AF_INET : AF_INET6, SOCK_STREAM, 0);
        if (v4) { struct sockaddr_in* a = (struct sockaddr_in*)&sa; a->sin_family = AF_INET; a->sin_addr = a4; a->sin_port = htons((uint16_t)port); salen = sizeof(*a); }
        else { struct sockaddr_in6* a = (struct sockaddr_in6*)&sa; a->sin6_family = AF_INET6; a->sin6_addr = a6; a->sin6_port = htons((uint16_t)port); salen = sizeof(*a); }
        if (lfd >= 0) setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (lfd >= 0 && bind(lfd, (struct sockaddr*)&sa, salen) != 0) {
            int e = errno;
            close(lfd);
            lfd = -1;
            if (e != EADDRNOTAVAIL) { errno = e; die(3, "%s: rank 0 cannot listen on %s port %d: %s. HINT: another run or program uses it: choose another MASTER_PORT "
                                                         "(under torchrun's agent store the rendezvous takes MASTER_PORT + 1)", what, maddr, port, strerror(e)); }
            printf("%s: MASTER_ADDR %s is not an address of this host (NAT?): rank 0 listens on every interface\n", what, maddr);
        }
    }
    if (lfd < 0) {
        memset(&sa, 0, sizeof(sa));
        lfd = socket(AF_INET6, SOCK_STREAM, 0);
        if (lfd >= 0) { // IPv6 and IPv4 on one socket
            setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
            struct sockaddr_in6* a = (struct sockaddr_in6*)&sa;
            a->sin6_family = AF_INET6; a->sin6_addr = in6addr_any; a->sin6_port = htons((uint16_t)port);
            salen = sizeof(*a);
        } else {
            lfd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in* a = (struct sockaddr_in*)&sa;
            a->sin_family = AF_INET; a->sin_addr.s_addr = htonl(INADDR_ANY); a->sin_port = htons((uint16_t)port);
            salen = sizeof(*a);
        }
        if (lfd < 0) die(3, "%s: cannot make a socket: %s", what, strerror(errno));
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(lfd, (struct sockaddr*)&sa, salen) != 0)
            die(3, "%s: rank 0 cannot listen on port %d: %s. HINT: another run or program uses it: choose another MASTER_PORT "
                   "(under torchrun's agent store the rendezvous takes MASTER_PORT + 1)", what, port, strerror(errno));
    }
    if (listen(lfd, 128) != 0) die(3, "%s: rank 0 cannot listen on port %d: %s", what, port, strerror(errno));
    rdv_socket_options(lfd);
    int refused = 0; // connections closed for want of the job's token
    // accepted connections that have not said who they are yet, with their addresses
    int pend_fd[ZT_MAX_RANKS + 1], npend = 0, arrived = 0;
    double pend_t[ZT_MAX_RANKS + 1]; // when each connected (one that says nothing for 10 s is closed: strangers cannot fill the table)
    char pend_addr[ZT_MAX_RANKS + 1][96]; // (host 64, " port ", serv 16)
    char addrs[ZT_MAX_RANKS][96];
    while (arrived < c->R - 1) {
        int ms = rdv_poll_ms(dl);
        if (ms < 0) {
            char missing[256] = "";
            int nm = 0;
            for (int k = 1; k < c->R; k++)
                if (c->rdv_fd[k] < 0 && nm++ < 8) snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), "%s%d", nm > 1 ? ", " : "", k);
            die(3, "%s: rank%s %s%s never arrived within %.0f s (%d of %d ranks did%s). HINT: start every rank with the same "
                   "MASTER_ADDR, MASTER_PORT, WORLD_SIZE and ZT_JOB_TOKEN (dev/launch.sh does); raise -comm-timeout if they start slowly",
                what, nm > 1 ? "s" : "", missing, nm > 8 ? ", ..." : "", timeout_s, arrived + 1, c->R,
                refused ? "; connections without this job's token were refused: see above" : "");
        }
        for (int i = npend - 1; i >= 0; i--) // silent connections go (a rank says HELLO as soon as it connects)
            if (wall_s() - pend_t[i] > 10.0) {
                printf("%s: closed a connection from %s: it said nothing for 10 s\n", what, pend_addr[i]);
                close(pend_fd[i]);
                pend_fd[i] = pend_fd[npend - 1];
                pend_t[i] = pend_t[npend - 1];
                memcpy(pend_addr[i], pend_addr[npend - 1], sizeof(pend_addr[i]));
                npend--;
            }
        struct pollfd pf[ZT_MAX_RANKS + 2];
        pf[0].fd = lfd; pf[0].events = POLLIN; pf[0].revents = 0;
        for (int i = 0; i < npend; i++) { pf[1 + i].fd = pend_fd[i]; pf[1 + i].events = POLLIN; pf[1 + i].revents = 0; }
        if (poll(pf, (nfds_t)(1 + npend), ms) <= 0) continue;
        for (int i = npend - 1; i >= 0; i--) {
            if (!pf[1 + i].revents) continue;
            int fd = pend_fd[i];
            char who[128];
            snprintf(who, sizeof(who), "a connection from %s", pend_addr[i]);
            RdvHdr h;
            memset(&h, 0, sizeof(h));
            if (c->rdv_token) { // strangers are refused and the wait goes on
                char why[160] = "";
                int e = rdv_io(fd, &h, sizeof(h), 0, wall_s() + 5.0);
                if (e != RDV_OK) snprintf(why, sizeof(why), "%s", e == RDV_TIMEOUT ? "it sent nothing" : "it closed before saying which rank it is");
                else if (h.magic != RDV_MAGIC || h.version != RDV_VERSION) snprintf(why, sizeof(why), "it sent garbage (not a rank of this build)");
                else if (h.kind != RDV_HELLO) snprintf(why, sizeof(why), "it sent a frame of kind %u before HELLO%s", h.kind, h.kind == RDV_ABORT ? " (an ABORT: ignored)" : "");
                else if ((uint64_t)h.seq != c->rdv_token) snprintf(why, sizeof(why), "its HELLO (as rank %d) lacks this job's token", h.rank);
                if (why[0]) {
                    printf("%s: refused a connection from %s: %s. HINT: every rank needs this job's token (ZT_JOB_TOKEN; docs/launch.md)\n", what, pend_addr[i], why);
                    close(fd);
                    refused++;
                    pend_fd[i] = pend_fd[npend - 1];
                    pend_t[i] = pend_t[npend - 1];
                    memcpy(pend_addr[i], pend_addr[npend - 1], sizeof(pend_addr[i]));
                    npend--;
                    continue;
                }
                if (h.world != c->R)
                    die(3, "%s: %s says it is rank %d of %d, but rank 0 has a world of %d. HINT: start every rank with the same WORLD_SIZE "
                           "(or SLURM_NTASKS)", what, who, h.rank, h.world, c->R);
                if (h.bytes != 0) die(3, "%s: %s sent a HELLO with %lld payload bytes (expected none)", what, who, (long long)h.bytes);
            } else {
                h = rdv_expect(c, fd, -1, who, RDV_HELLO, -1, 0, what, wall_s() + 5.0);
                if (h.seq != 0)
                    die(3, "%s: %s presents a job token, and rank 0 has none. HINT: give every rank the same ZT_JOB_TOKEN (or none)", what, who);
            }
            if (h.rank < 1 || h.rank >= c->R)
                die(3, "%s: %s says it is rank %d of %d: not a rank of this run", what, who, h.rank, h.world);
            if (c->rdv_fd[h.rank] >= 0)
                die(3, "%s: rank %d arrived twice (from %s and %s). HINT: every rank needs its own RANK (or SLURM_PROCID)",
                    what, h.rank, addrs[h.rank], pend_addr[i]);
            c->rdv_fd[h.rank] = fd;
            snprintf(addrs[h.rank], sizeof(addrs[h.rank]), "%s", pend_addr[i]);
            arrived++;
            pend_fd[i] = pend_fd[npend - 1];
            pend_t[i] = pend_t[npend - 1];
            memcpy(pend_addr[i], pend_addr[npend - 1], sizeof(pend_addr[i]));
            npend--;
        }
        if (pf[0].revents && npend > ZT_MAX_RANKS) { // the table is full of connections still silent: this one goes at once
            int fd = accept(lfd, NULL, NULL);
            if (fd >= 0) close(fd);
        } else if (pf[0].revents) {
            struct sockaddr_storage from;
            socklen_t fl = sizeof(from);
            int fd = accept(lfd, (struct sockaddr*)&from, &fl);
            if (fd < 0) continue;
            rdv_socket_options(fd);
            char host[64] = "?", serv[16] = "?";
            getnameinfo((struct sockaddr*)&from, fl, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
            snprintf(pend_addr[npend], sizeof(pend_addr[npend]), "%s port %s", strncmp(host, "::ffff:", 7) ? host : host + 7, serv);
            pend_t[npend] = wall_s();
            pend_fd[npend++] = fd;
        }
    }
    close(lfd);
    for (int i = 0; i < npend; i++) close(pend_fd[i]); // (none: a stray connection was garbage)
    for (int k = 1; k < c->R; k++) rdv_send(c, k, RDV_WELCOME, 0, NULL, 0, what, dl);
}

// Rank r > 0: connect to MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not listening yet),
// say HELLO, wait for the WELCOME.
static void rdv_join(Comm* c, const char* addr, const char* port, double timeout_s, double dl) {
    char what[400], last[256] = "no attempt";
    snprintf(what, sizeof(what), "rendezvous at %s", c->rdv_where);
    int fd = -1;
    while (fd < 0) {
        if (rdv_poll_ms(dl) < 0)
            die(3, "%s: rank 0 never listened there within %.0f s (last attempt: %s). HINT: start rank 0 too, with the same "
                   "MASTER_ADDR and MASTER_PORT; raise -comm-timeout if it starts slowly", what, timeout_s, last);
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(addr, port, &hints, &res);
        if (g != 0) snprintf(last, sizeof(last), "MASTER_ADDR %s: %s", addr, gai_strerror(g));
        for (struct addrinfo* a = res; a && fd < 0; a = a->ai_next) {
            int s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (s < 0) continue;
            rdv_socket_options(s);
            int e = connect(s, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
            if (e == EINPROGRESS) { // wait for the connection, at most a second at a time
                struct pollfd pf = {s, POLLOUT, 0};
                int ms = rdv_poll_ms(dl);
                e = ETIMEDOUT;
                if (ms > 0 && poll(&pf, 1, ms) == 1) {
                    socklen_t el = sizeof(e);
                    getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
                }
            }
            if (e == 0) fd = s;
            else { snprintf(last, sizeof(last), "connect: %s", strerror(e)); close(s); }
        }
        if (res) freeaddrinfo(res);
        if (fd < 0) usleep(100000);
    }
    c->rdv_fd[0] = fd;
    rdv_send(c, 0, RDV_HELLO, (int64_t)c->rdv_token, NULL, 0, what, dl);
    // rank 0 (listening since before this connection) decides who is missing by its own deadline,
    // at most timeout_s from now, and tells every rank: wait for that a little longer than it does
    double dl_welcome = timeout_s > 0 ? wall_s() + timeout_s + 10.0 : 0;
    c->timeout_s = timeout_s + 10.0; // (for the message, should rank 0 not answer)
    rdv_expect(c, fd, 0, rdv_peer(c, 0), RDV_WELCOME, 0, 0, what, dl_welcome);
}

// The abort hook (g_abort_hook) without MPI: send this rank's last message to the others (rank 0:
// every rank; another rank: rank 0, which passes it on as it ends), then close the sockets cleanly.
static void comm_rdv_abort(int code) {
    Comm* c = g_rdv_comm;
    if (!c || !c->rdv || pthread_mutex_trylock(&c->rdv_mu) != 0) return; // mid-frame on another thread: they see the close
    size_t n = strnlen(g_die_msg, RDV_MAX_TEXT);
    RdvHdr h = {RDV_MAGIC, RDV_VERSION, RDV_ABORT, c->r, c->R, code, (int64_t)n};
    for (int k = 0; k < c->R; k++) {
        int fd = c->rdv_fd[k];
        if (fd < 0) continue;
        if (send(fd, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(h)) send(fd, g_die_msg, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(fd, SHUT_WR);
        char sink[4096]; // read what is pending, so that the close sends no reset that could lose the frame
        while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {}
    }
}

// The rendezvous's port: MASTER_PORT, or MASTER_PORT + 1 under torchrun when its agent holds
// MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True: its TCPStore listens there, as with the
// default static rendezvous). Exit code 2 when MASTER_PORT is not a port.
static int rdv_port(void) {
    const char* port = getenv("MASTER_PORT");
    const char* agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    char* end = NULL;
    long p = port ? strtol(port, &end, 10) : 0;
    int shift = agent && !strcmp(agent, "True");
    if (!port || !*port || *end || p < 1 || p + shift > 65535)
        die_user("MASTER_PORT=%s is not a TCP port (1..%d)", port ? port : "(unset)", 65535 - shift);
    return (int)p + shift;
}

// Start the rendezvous (rank 0 listens, the others join) within timeout_s (0: wait forever).
static void rdv_connect(Comm* c, double timeout_s) {
    char port[16];
    snprintf(port, sizeof(port), "%d", rdv_port());
    double saved = c->timeout_s;
    c->timeout_s = timeout_s;
    double dl = timeout_s > 0 ? wall_s() + timeout_s : 0;
    char src[32];
    c->rdv_token = rdv_job_token(src, sizeof(src));
    if (c->r == 0 && !c->rdv_token)
        printf("warning: the rendezvous at %s is unauthenticated: any process that reaches the port can join as a rank or end the run. "
               "HINT: give every rank the same secret ZT_JOB_TOKEN (dev/launch.sh draws one; docs/launch.md)\n", c->rdv_where);
    else if (c->r == 0 && strcmp(src, "ZT_JOB_TOKEN"))
        printf("rendezvous at %s: ranks are told apart from other jobs' by %s, which is no secret; ZT_JOB_TOKEN would be one (docs/launch.md)\n", c->rdv_where, src);
    if (c->r == 0) rdv_listen(c, atoi(port), timeout_s, dl);
    else rdv_join(c, getenv("MASTER_ADDR"), port, timeout_s, dl);
    c->timeout_s = saved;
}

// Does any rank have `mine` set? The same answer on every rank. The trainer's own agreement once a
// step (a stop signal, train_gpt.cu): not counted in the step's collectives, never traced.
static int comm_any(Comm* c, int mine) {
    if (c->R == 1 || c->count_only) return mine != 0;
    int* all = (int*)calloc((size_t)c->R, sizeof(int));
    if (!all) die(1, "out of host memory (%d flags)", c->R);
    int any = 0;
    if (c->rdv) rdv_allgather(c, &mine, all, (int64_t)sizeof(int), "stop flag");
#ifdef USE_MPI
    else {
        MPI_Request req;
        MPI_Iallgather(&mine, 1, MPI_INT, all, 1, MPI_INT, c->comm, &req);
        comm_poll(c, &req, "stop flag", -1);
    }
#endif
    for (int j = 0; j < c->R; j++) any |= all[j] != 0;
    free(all);
    return any;
}

// Sum n doubles over ranks, identically on every rank: all-gather, then add in rank order.
static void comm_sum_doubles(Comm* c, double* v, int n) {
    c->count[COLL_SCALARS]++;
    c->bytes[COLL_SCALARS] += (int64_t)n * 8 * c->R;
    if (c->trace) printf("[comm] rank %d step %d: %-14s %d value(s)\n", c->r, c->step, "scalars", n);
    if (c->R == 1 || c->count_only) return;
    if ((int64_t)n * c->R > c->sum_cap) { // grows at start-up (the memory tables' sums); a step's sums fit by then
        free(c->sum_buf);
        c->sum_cap = (int64_t)n * c->R;
        c->sum_buf = (double*)malloc(sizeof(double) * c->sum_cap);
        if (!c->sum_buf) die(1, "out of host memory (%lld doubles for a scalar sum)", (long long)c->sum_cap);
    }
    double* all = c->sum_buf;
    if (c->rdv) rdv_allgather(c, v, all, (int64_t)n * 8, "scalar sum");
#ifdef USE_MPI
    else {
        MPI_Request req;
        MPI_Iallgather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, c->comm, &req);
        comm_poll(c, &req, "scalar sum", -1);
    }
#endif
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < c->R; j++) s += all[j * n + i];
        v[i] = s;
    }
}

// Every rank's 64-bit value, in rank order (out has R entries).
static void comm_allgather_u64(Comm* c, uint64_t v, uint64_t* out) {
    out[0] = v;
    if (c->R == 1) return;
    if (c->rdv) { rdv_allgather(c, &v, out, 8, "all-gather (start-up check)"); return; }
#ifdef USE_MPI
    MPI_Request req;
    MPI_Iallgather(&v, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, c->comm, &req);
    comm_poll(c, &req, "all-gather (start-up check)", -1);
#endif
}

// Rank root's bytes to every rank. MPI counts are ints: a broadcast of 2^31 bytes or more (checkpoint.h's
// broadcast of an FP32 export of Qwen2.5-7B's io block at R = 2 is 2.2 GiB) goes in pieces of at most
// g_bcast_chunk bytes, one after the other (the TCP rendezvous's frames carry 64-bit sizes already).
static int64_t g_bcast_chunk = (int64_t)1 << 30; // (a test lowers it: test/test_main.cpp --bcast-check)
static void comm_broadcast(Comm* c, void* buf, int64_t bytes, int root) {
    c->count[COLL_BROADCAST]++;
    c->bytes[COLL_BROADCAST] += bytes;
    if (c->R == 1) return;
    if (c->rdv) { rdv_broadcast(c, buf, bytes, root); return; }
#ifdef USE_MPI
    for (int64_t off = 0; off < bytes; off += g_bcast_chunk) {
        int64_t n = bytes - off < g_bcast_chunk ? bytes - off : g_bcast_chunk;
        MPI_Request req;
        MPI_Ibcast((char*)buf + off, (int)n, MPI_BYTE, root, c->comm, &req);
        comm_poll(c, &req, "broadcast", -1);
    }
#else
    (void)g_bcast_chunk; // (one process, or the rendezvous above)
#endif
}

static void comm_reset_stats(Comm* c) {
    memset(c->count, 0, sizeof(c->count));
    memset(c->bytes, 0, sizeof(c->bytes));
    memset(c->sent, 0, sizeof(c->sent));
    c->wait_s = 0.0;
    c->waits = 0;
#ifdef __CUDACC__
    c->wait_pending = 0; // timed waits not summed are dropped (their events are recorded again later)
#endif
}

#ifdef USE_MPI
// MPI and threads: the NCCL watchdog's thread may end the run (die -> MPI_Abort) while the main thread
// is inside MPI (a scalar sum's MPI_Test). MPI allows that only at MPI_THREAD_MULTIPLE, so comm_init
// asks for it: the cost is a lock inside MPI's calls (the CUDA device makes a few per step; the CPU
// device's collectives are large: not measured here). An MPI that grants less (MPI_Init_thread's
// `provided`) is not called from another thread: that thread ends the process without MPI_Abort,
// and mpirun ends the job (a rank ended without MPI_Finalize); the other ranks' own timeouts end
// theirs under launchers that do not.
static int g_mpi_provided = 0;      // MPI_Init_thread's answer
static pthread_t g_mpi_thread;      // the thread that initialised MPI
static void comm_mpi_abort(int code) {
    if (g_mpi_provided < MPI_THREAD_MULTIPLE && !pthread_equal(pthread_self(), g_mpi_thread)) _exit(code);
    MPI_Abort(MPI_COMM_WORLD, code);
}
#endif

// End MPI: once, at the very end of the process.
static void comm_finalize(void) {
#ifdef USE_MPI
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Finalize();
#endif
}

// Without groups every block collective runs among the world (CG_REP: this rank alone).
static void comm_groups_world(Comm* c) {
    for (int k = 0; k < CG_COUNT; k++) {
        CommGroup* g = &c->grp[k];
        g->n = k == CG_REP ? 1 : c->R; g->i = k == CG_REP ? 0 : c->r; g->split = g->nccl_split = 0;
#ifdef USE_MPI
        g->mpi = c->mpi ? c->comm : MPI_COMM_NULL;
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
        g->nccl = NULL; // (the world's: Comm.nccl)
#endif
    }
}

// Start the communication layer: the TCP rendezvous when torchrun or Slurm started several ranks
// without MPI (launch_needs_rendezvous; the sockets are connected later, by comm_connect, once
// -comm-timeout is known), else MPI when built with it (its rank and size are checked against the
// launcher's variables), else a single process. Sets g_rank and g_world.
static void comm_init(Comm* c, int* argc, char*** argv, Launch* L) {
    memset(c, 0, sizeof(*c));
    char err[512];
    if (launch_from_env(L, err, sizeof(err)) != 0) die_user("%s", err);
    if (launch_needs_rendezvous(L)) {
        (void)argc; (void)argv;
        const char* addr = getenv("MASTER_ADDR");
        const char* port = getenv("MASTER_PORT");
        if (!addr || !*addr || !port || !*port)
            die_user("%s started rank %d of %d without MPI, but MASTER_ADDR and MASTER_PORT (where rank 0 listens) are %s. "
                     "HINT: torchrun sets them; under Slurm export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | "
                     "head -n 1) MASTER_PORT=29500; or use mpirun / srun --mpi=pmix with an MPI build", L->source, L->rank, L->world,
                     !addr || !*addr ? (!port || !*port ? "not set" : "not both set (MASTER_ADDR missing)") : "not both set (MASTER_PORT missing)");
        c->rdv = 1;
        c->R = L->world; c->r = L->rank;
        for (int k = 0; k < ZT_MAX_RANKS; k++) c->rdv_fd[k] = -1;
        pthread_mutex_init(&c->rdv_mu, NULL);
        snprintf(c->rdv_where, sizeof(c->rdv_where), "%s:%d", addr, rdv_port());
        L->source = !strcmp(L->source, "Slurm") ? "Slurm, TCP rendezvous" : "torchrun, TCP rendezvous";
        g_rdv_comm = c;
        g_abort_hook = comm_rdv_abort;
        if (c->R > ZT_MAX_RANKS) die_user("%d ranks: at most %d are supported", c->R, ZT_MAX_RANKS);
        g_rank = c->r;
        g_world = c->R;
        comm_groups_world(c);
        return;
    }
#ifdef USE_MPI
    c->mpi = 1;
    int initialized = 0, provided;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided); // once per process (see comm_mpi_abort)
    else MPI_Query_thread(&provided);
    g_mpi_provided = provided;
    g_mpi_thread = pthread_self();
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    MPI_Comm_rank(c->comm, &c->r);
    MPI_Comm_size(c->comm, &c->R);
    MPI_Type_contiguous((int)sizeof(floatX), MPI_BYTE, &c->x_type);
    MPI_Type_commit(&c->x_type);
    if (c->R > 1) g_abort_hook = comm_mpi_abort;
    g_finalize_hook = comm_finalize;
    if (L->world != 1 || L->rank != 0) {
        if (L->world != c->R || L->rank != c->r)
            die_user("the launcher says rank %d of %d (%s) but MPI says rank %d of %d. HINT: launch with "
                     "one launcher (mpirun or srun), not both", L->rank, L->world, L->source, c->r, c->R);
    } else if (c->R > 1) {
        // no launcher variables we know: count this node's ranks through MPI
        MPI_Comm node;
        MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, c->r, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &L->local_rank);
        MPI_Comm_size(node, &L->local_world);
        MPI_Comm_free(&node);
        L->rank = c->r; L->world = c->R; L->source = "MPI";
    }
#else
    (void)argc; (void)argv;
    if (L->world > 1)
        die_user("launched as rank %d of %d (%s) but this build has no MPI. HINT: install libopenmpi-dev "
                 "and rebuild (make clean train), or launch without MPI: dev/launch.sh N ./train ... or torchrun "
                 "--no-python (the CUDA device only)", L->rank, L->world, L->source);
    c->R = 1; c->r = 0;
#endif
    if (c->R > ZT_MAX_RANKS) die_user("%d ranks: at most %d are supported", c->R, ZT_MAX_RANKS);
    g_rank = c->r;
    g_world = c->R;
    comm_groups_world(c);
}

// Launched without MPI: meet the other ranks at MASTER_ADDR:MASTER_PORT within timeout_s
// (-comm-timeout; 0: forever). Nothing to do under MPI or alone.
static void comm_connect(Comm* c, double timeout_s) {
    if (c->rdv) rdv_connect(c, timeout_s);
}

// The CPU device's collectives are MPI's (comm_start, comm_wait): launched without MPI it runs one
// rank only. (Over the rendezvous they would move every block through rank 0's sockets: not built.)
static void comm_check_cpu_device(const Comm* c) {
    if (c->R > 1 && !c->mpi)
        die_user("-device cpu with %d ranks needs MPI, and this run was launched without it (%s): only the CUDA "
                 "device runs several ranks that way. HINT: mpirun -np %d ./train -device cpu ... (a build with MPI), "
                 "or -device cuda", c->R, c->rdv ? "TCP rendezvous" : "no MPI", c->R);
}

#if defined(__CUDACC__) && defined(USE_NCCL)
// [NCCL] One small all-gather and reduce-scatter right after the communicator's initialisation, the
// kinds a run issues, in place as the run's are: every peer is reached before the run starts. The
// connections' buffers (tens to hundreds of MiB) are allocated at the initialisation itself
// (NCCL_RUNTIME_CONNECT=0, comm_init_device): NCCL otherwise connects each protocol lazily, and this
// 1 KiB reaches only the small-message one, leaving the large messages' buffers to the first step,
// outside the baseline the planner's prediction is compared with (train_gpt.cu: mem_baseline).
// The watchdog watches it like a collective (marked warm_up): a peer that dies or stops right
// after the communicator's initialisation ends the run after -comm-timeout instead of hanging it.
// [groups] Each split communicator is warmed up the same way (comm_split_groups): nc, its R and r.
static void comm_nccl_warm_up_on(Comm* c, ncclComm_t nc, int R, int r) {
    const size_t n = 256; // elements per rank
    float* buf = NULL;    // (R * n) FP32
    cudaCheck(cudaMalloc((void**)&buf, sizeof(float) * n * R));
    cudaCheck(cudaMemsetAsync(buf, 0, sizeof(float) * n * R, c->stream));
    CommWatch* w = comm_watch_begin(c, -1, -1);
    ncclIssueOn(c, nc, ncclAllGather(buf + (size_t)r * n, buf, n, ncclFloat, nc, c->stream), "ncclAllGather (warm-up)");
    ncclIssueOn(c, nc, ncclReduceScatter(buf, buf + (size_t)r * n, n, ncclFloat, ncclSum, nc, c->stream), "ncclReduceScatter (warm-up)");
    comm_watch_recorded(c, w);
    cudaCheck(cudaEventSynchronize(w->done)); // (never returning: the watchdog ends the run)
    pthread_mutex_lock(&c->mu);
    w->pending = 0;
    pthread_mutex_unlock(&c->mu);
    cudaCheck(cudaFree(buf));
}
static void comm_nccl_warm_up(Comm* c) { comm_nccl_warm_up_on(c, c->nccl, c->R, c->r); }
#endif

// [groups] The communicators of hybrid sharding (Groups: -shard-group, -hpz), split from the world's:
// MPI_Comm_split for the host side and the CPU device's collectives; on the CUDA device
// (comm_init_device first) ncclCommSplit, non-blocking as the world's (settled within -comm-timeout,
// watched by the same watchdog, aborted with it). Every rank calls it with the same Groups.
// color: which communicator of the kind this rank joins; key: its index there (Shards).
static void comm_split_groups(Comm* c, Groups gr) {
    if (gr.N <= 0 || gr.N >= c->R) return; // flat: the world's
    Shards sh = shards_of(gr, c->r);
    struct { int n, i, color; } want[CG_COUNT] = {
        {sh.R, sh.r, sh.hsdp ? sh.g : 0},  // CG_GRAD: HSDP the group (hpZ: the world)
        {sh.pR, sh.pr, sh.g},               // CG_PARAM: the group
        {sh.G, sh.g, c->r % gr.N}};         // CG_REP: member (c->r % N) of every group
    for (int k = 0; k < CG_COUNT; k++) {
        CommGroup* g = &c->grp[k];
        g->n = want[k].n; g->i = want[k].i;
        if (g->n == c->R) continue; // the world, in rank order: its own (the same answer on every rank)
        if (k == CG_PARAM && sh.hsdp) { // [HSDP] the same ranks as CG_GRAD: its communicators (split, freed, aborted once there)
#ifdef USE_MPI
            g->mpi = c->grp[CG_GRAD].mpi;
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
            g->nccl = c->grp[CG_GRAD].nccl;
#endif
            continue;
        }
#ifdef USE_MPI
        if (c->mpi) {
            g->split = 1;
            MPI_Comm_split(c->comm, want[k].color, want[k].i, &g->mpi);
            int n, i;
            MPI_Comm_size(g->mpi, &n);
            MPI_Comm_rank(g->mpi, &i);
            if (n != g->n || i != g->i) die(1, "MPI_Comm_split gave rank %d of %d for the %s, expected %d of %d (internal error)", i, n, cg_name[k], g->i, g->n);
        }
#endif
#if defined(__CUDACC__) && defined(USE_NCCL)
        if (c->device_side && c->R > 1) {
            ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
            config.blocking = 0;
            char what[96];
            snprintf(what, sizeof(what), "ncclCommSplit (the %s)", cg_name[k]);
            g->nccl = NULL;
            nccl_lock(c);
            ncclResult_t r = ncclCommSplit(c->nccl, want[k].color, want[k].i, &g->nccl, &config);
            g->nccl_split = g->nccl != NULL; // (the watchdog polls it from now on)
            nccl_unlock(c);
            nccl_settle_on(c, g->nccl ? g->nccl : c->nccl, r, what, c->timeout_s);
            int n = 0, i = -1;
            ncclCheck(ncclCommCount(g->nccl, &n));
            ncclCheck(ncclCommUserRank(g->nccl, &i));
            if (n != g->n || i != g->i) die(1, "%s gave rank %d of %d, expected %d of %d (internal error)", what, i, n, g->i, g->n);
            comm_nccl_warm_up_on(c, g->nccl, g->n, g->i);
        }
#endif
    }
}

// The CUDA device: pick this rank's GPU, create the streams, the events (once), and the NCCL
// communicator (its unique id goes from rank 0 to every rank over MPI or the rendezvous): non-blocking, so that its
// initialisation and every call can be given up after timeout_s (-comm-timeout), with the watchdog
// thread (comm_watchdog) watching the collectives in flight.
static void comm_init_device(Comm* c, const Launch* L, double timeout_s) {
#ifdef __CUDACC__
    cuda_init(L->local_rank);
    c->device_side = 1;
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    for (int i = 0; i < COMM_MAX_INFLIGHT; i++) {
        cudaCheck(cudaEventCreateWithFlags(&c->slots[i].ready, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&c->slots[i].done, cudaEventDisableTiming));
    }
    for (int i = 0; i < COMM_WAIT_EVENTS; i++) // -tune's timed waits (comm_wait): with timing
        for (int k = 0; k < 2; k++) cudaCheck(cudaEventCreateWithFlags(&c->wait_ev[i][k], cudaEventDefault));
    if (c->R > 1) {
#ifdef USE_NCCL
        ncclUniqueId id;
        if (c->r == 0) ncclCheck(ncclGetUniqueId(&id));
        comm_broadcast(c, &id, sizeof(id), 0);
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        // every connection's buffers at the initialisation, inside the memory baseline (comm_nccl_warm_up);
        // a value the user set is kept (setenv's 0: no overwrite)
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        pthread_mutex_init(&c->nccl_mu, NULL);
        c->nccl_aborted = 0;
        nccl_lock(c);
        ncclResult_t r = ncclCommInitRankConfig(&c->nccl, c->R, id, c->r, &config);
        nccl_unlock(c);
        nccl_settle(c, r, "ncclCommInitRank", timeout_s);
        c->timeout_s = timeout_s;
        pthread_mutex_init(&c->mu, NULL);
        for (int i = 0; i < COMM_WATCHES; i++) {
            cudaCheck(cudaEventCreateWithFlags(&c->watch[i].done, cudaEventDisableTiming));
            c->watch[i].pending = 0;
        }
        c->watch_next = 0;
        c->watchdog_stop = 0;
        if (pthread_create(&c->watchdog, NULL, comm_watchdog, c) != 0) die(1, "cannot start the NCCL watchdog thread");
        c->watchdog_on = 1;
        comm_nccl_warm_up(c);
#else
        (void)timeout_s;
        die_user("%d ranks on the CUDA device need NCCL in the build. HINT: install it (or pip install nvidia-nccl-cu13, or "
                 "set NCCL_HOME) and rebuild (make clean train)", c->R);
#endif
    }
#else
    (void)c; (void)L; (void)timeout_s;
    die_user("-device cuda: this build has no CUDA (built with g++)");
#endif
}

// Release the communicator (MPI itself stays up: see comm_finalize).
static void comm_free(Comm* c) {
    (void)c;
#if defined(__CUDACC__)
    if (c->device_side) {
#ifdef USE_NCCL
        if (c->watchdog_on) {
            c->watchdog_stop = 1;
            pthread_join(c->watchdog, NULL);
            pthread_mutex_destroy(&c->mu);
            c->watchdog_on = 0;
            for (int i = 0; i < COMM_WATCHES; i++) cudaCheck(cudaEventDestroy(c->watch[i].done));
        }
        for (int k = 0; k < CG_COUNT; k++) { // [groups] the split communicators first
            CommGroup* g = &c->grp[k];
            if (!g->nccl_split) continue;
            ncclIssueOn(c, g->nccl, ncclCommFinalize(g->nccl), "ncclCommFinalize");
            nccl_lock(c);
            g->nccl_split = 0; // (the watchdog has ended; no other thread polls it)
            nccl_unlock(c);
            ncclResult_t r = ncclCommDestroy(g->nccl);
            if (r != ncclSuccess && r != ncclInProgress) die(1, "NCCL error in ncclCommDestroy: %s", ncclGetErrorString(r));
        }
        if (c->R > 1) { // non-blocking: finalize (it flushes what is in flight) may be in progress; then free
            ncclIssue(c, ncclCommFinalize(c->nccl), "ncclCommFinalize");
            ncclResult_t r = ncclCommDestroy(c->nccl); // (its handle is gone afterwards: nothing to poll; the watchdog has ended)
            pthread_mutex_destroy(&c->nccl_mu);
            if (r != ncclSuccess && r != ncclInProgress) die(1, "NCCL error in ncclCommDestroy: %s", ncclGetErrorString(r));
        }
#endif
        for (int i = 0; i < COMM_MAX_INFLIGHT; i++) {
            cudaCheck(cudaEventDestroy(c->slots[i].ready));
            cudaCheck(cudaEventDestroy(c->slots[i].done));
        }
        for (int i = 0; i < COMM_WAIT_EVENTS; i++)
            for (int k = 0; k < 2; k++) cudaCheck(cudaEventDestroy(c->wait_ev[i][k]));
        cudaCheck(cudaStreamDestroy(c->stream));
        c->device_side = 0;
    }
#endif
    if (c->rdv) {
        g_abort_hook = NULL;
        g_rdv_comm = NULL;
        for (int k = 0; k < c->R; k++)
            if (c->rdv_fd[k] >= 0) { close(c->rdv_fd[k]); c->rdv_fd[k] = -1; }
        pthread_mutex_destroy(&c->rdv_mu);
        c->rdv = 0;
    }
#ifdef USE_MPI
    if (c->mpi) {
        g_abort_hook = NULL;
        for (int k = 0; k < CG_COUNT; k++)
            if (c->grp[k].split) MPI_Comm_free(&c->grp[k].mpi);
        for (int i = 0; i < c->nspread; i++) MPI_Type_free(&c->spread[i].t);
        c->nspread = 0;
        MPI_Type_free(&c->x_type);
        MPI_Comm_free(&c->comm);
        c->mpi = 0;
    }
#endif
    free(c->sum_buf);
    c->sum_buf = NULL;
    c->sum_cap = 0;
}


// ----------------------------------------------------------------------------
// The ZeRO state: per-stage buffers (full_ / shard_), where each block's parameters and
// gradients are right now, and the collectives in flight.
//
// [ZeRO-3] Each gathered-parameter buffer goes through these states; every transition is checked,
// so a hook called out of order (a gather into a buffer a kernel still reads, a release of a block
// that was never handed out) ends the run with a message instead of computing with wrong weights:
//
//   FREE or RELEASED --gather_start--> GATHERING --gather_wait--> READY --acquire--> IN_USE
//   IN_USE --keep--> READY (gathered, kept for a later hook: the io block between the embedding
//   and the LM head, the last layer between forward and backward)
//   IN_USE --release--> RELEASED (poisoned with NaN under -poison 1; a gather may overwrite it)
typedef enum { BUF_FREE, BUF_GATHERING, BUF_READY, BUF_IN_USE, BUF_RELEASED } BufState;
static const char* buf_state_name[] = {"free", "gathering", "ready", "in use", "released"};

// Where the optimizer state (master, m, v) lives: on the device, in host memory, or in one file per
// rank (-offload; offload.h does the last two).
typedef enum { OFFLOAD_NONE, OFFLOAD_CPU, OFFLOAD_NVME } Offload;

typedef struct Zero {
    int stage, L;
    int R, r;                // the world and this rank (messages, files, who writes); the shards it holds are lay.R, lay.r (Shards)
    int poison;              // fill released buffers with NaN
    BlockLayout lay;
    ZeroSizes sz;
    Comm* comm;
    // parameters (floatX)
    floatX* full_params;     // [Z0,1,2] (lay.total); [Z3, LoRA replicated base] the base whole (lay.off[lay.adapter])
    floatX* shard_params;    // [Z3]     (lay.shard_total); [LoRA replicated base] the adapters' shard only (lay.S[lay.adapter])
    floatX* param_buf[4];    // [Z3]     [0] io block (P_0), [1], [2] layer blocks (P_1), [3] [LoRA] the adapter block
    int resident[4];         // [Z3]     block held by each param_buf, -1 none
    BufState buf_state[4];   // [Z3]     where each param_buf is in its life (BUF_FREE ... BUF_RELEASED)
    int gather_h[4];         // [Z3]     gather in flight into each param_buf, -1 none
    // gradients (FP32)
    float* full_grads;       // [Z0,1]   (lay.total)
    float* shard_grads;      // [Z2,3]   (lay.train_shard_total: lay.shard_total without frozen blocks)
    float* grad_buf[4];      // [Z2,3]   [0] io block, [1], [2] layer blocks, [3] [LoRA] the adapter block (frozen blocks: none)
    int reduce_h[4];         // [Z2,3]   reduce-scatter in flight from each grad_buf
    // optimizer state (FP32): everything under ZeRO-0, this rank's shard otherwise
    float *master, *m, *v;   // device memory; [offload] host memory (cpu) or NULL (a file: nvme)
    int64_t opt_total;
    AdamWMax* adam_max;      // where the step runs (the trainer's, beside its StepScalars), NULL: none:
                             // the maxima the last update left, which prove the next check (zero_adamw_check)
    // [offload] where master, m, v live when not on the device (-offload, offload.h): state_io moves
    // n floats of array a (0 master, 1 m, 2 v) at offset off to (write 0) or from (write 1) the host
    Offload offload;
    void (*state_io)(struct Zero* z, int a, int64_t off, float* host, int64_t n, int write);
    // [offload] block b's reduction h of this micro-step was issued (zero_reduce_block): -offload cpu
    // copies the block's gradient shard to the host once the step's last one is done (offload.h)
    void (*grad_reduced)(struct Zero* z, int b, int h, int micro, int last_micro);
    void* offload_ctx;
    // [-offload-params] [ZeRO-3] where the parameter shards live when not on the device (shard_params is
    // then NULL; offload.h: host memory (cpu) or a file per rank (nvme)). param_up copies block b's shard to
    // dst, its place in the gather buffer (param_buf + r*S), ordered after the compute stream's last use of
    // that buffer and before the all-gather (which then runs in place); param_io moves elements [at, at + n)
    // of block b's shard (PARAM_GET: to the host, PARAM_PUT: from the host, PARAM_PUT_DEV: from device
    // memory, in the compute stream's order; PARAM_SYNC (b -1): every PUT_DEV issued has landed).
    Offload param_loc;
    void (*param_up)(struct Zero* z, int b, floatX* dst);
    void (*param_io)(struct Zero* z, int b, int64_t at, floatX* buf, int64_t n, int mode);
    void* param_ctx;
    // [-offload-params with -offload] the FP32 gradient shard lives on the host, not the device
    // (shard_grads NULL): each block's reduce-scatter lands in its own gradient buffer (in place, at the
    // shard's place) every micro-step, and grad_reduced copies it down (= on the first micro-step, +=
    // on the host after it). grad_reuse(slot): the buffer of `slot` is about to be zeroed for its next
    // block (the copy down of its last one must be done first); host_sumsq: the gradient's sum of
    // squares from the host copy, in the order the device would have summed it (offload.h).
    int grads_host;
    void (*grad_reuse)(struct Zero* z, int slot);
    void (*host_sumsq)(struct Zero* z, double* out);
} Zero;
enum { PARAM_GET, PARAM_PUT, PARAM_PUT_DEV, PARAM_SYNC };

// [ZeRO-3] Block b's parameters are sharded and gathered for each use: every block under ZeRO-3,
// except [LoRA] the frozen base's with -lora-base replicated (held whole, like ZeRO-1/2's).
static inline int zero_gathered(const Zero* z, int b) { return z->stage == 3 && !(z->lay.rep_frozen && z->lay.frozen[b]); }
// [ZeRO-3] This rank's shard of block b's parameters (with a replicated base: the adapters' alone);
// [-offload-params] NULL: the shard is not on the device (zero_shard_get / zero_shard_put reach it).
// [hpZ] the rank's parameter part (layout_pS: G shards) of block b, not its optimizer shard.
static inline floatX* zero_shard_params(const Zero* z, int b) {
    if (!z->shard_params) return NULL;
    int64_t k = z->lay.sh.hpz ? z->lay.sh.G : 1; // ([hpZ] the parts are G shards each)
    return z->shard_params + k * (z->lay.shard_off[b] - (z->lay.rep_frozen && z->lay.adapter ? z->lay.shard_off[z->lay.adapter] : 0));
}

// Which param/grad buffer slot a block uses under ZeRO-2/3: io -> 0, layers alternate 1, 2, [LoRA]
// the adapter block 3; and the slot's size.
static inline int zero_slot(const Zero* z, int b) { return b == 0 ? 0 : b == z->lay.adapter ? 3 : 1 + (b - 1) % 2; }
// The block whose size slot i's buffers have (0 io, 1 the layers, 3 [LoRA] the adapters); -1 when the
// model has no such block (no layers, no adapters).
static inline int zero_slot_block(const BlockLayout* lay, int i) {
    int b = i == 3 ? lay->adapter : i == 0 ? 0 : 1;
    return (i == 3 ? !lay->adapter : b >= lay->nblocks - (lay->adapter > 0)) ? -1 : b;
}
static inline int64_t zero_slot_elems(const Zero* z, int slot) {
    return slot == 0 ? z->lay.P[0] : slot == 3 ? z->lay.P[z->lay.adapter] : z->lay.P[1];
}

// offload: OFFLOAD_NONE allocates master, m, v on the device; otherwise offload_init (offload.h)
// places them, after this.
// params: OFFLOAD_NONE allocates the ZeRO-3 parameter shards on the device; otherwise (-offload-params)
// param_offload_init (offload.h) places them, after this.
static void zero_init(Zero* z, BlockLayout* lay, int stage, Comm* comm, int poison, Offload offload, Offload params) {
    memset(z, 0, sizeof(*z));
    z->offload = offload;
    z->param_loc = stage == 3 ? params : OFFLOAD_NONE;
    z->grads_host = z->param_loc != OFFLOAD_NONE && offload != OFFLOAD_NONE; // [-offload-params with -offload]
    z->stage = stage; z->R = comm->R; z->r = comm->r; z->L = lay->nblocks - 1 - (lay->adapter > 0);
    z->lay = *lay;
    z->comm = comm;
    z->poison = poison;
    z->sz = zero_sizes(lay, stage);
    size_t X = sizeof(floatX);
    z->full_params = (floatX*)dev_alloc(TAG_PARAMS, z->sz.full_params * X);
    if (!z->param_loc) z->shard_params = (floatX*)dev_alloc(TAG_PARAMS, z->sz.shard_params * X);
    for (int i = 0; i < 4; i++) { // slot i's block: 0 io, 1 and 2 the layers, 3 the adapters
        int b = zero_slot_block(lay, i);
        if (b < 0) continue;
        if (zero_gathered(z, b)) z->param_buf[i] = (floatX*)dev_alloc(TAG_PARAM_BUF, zero_slot_elems(z, i) * X);
        if (stage >= 2 && !lay->frozen[b]) z->grad_buf[i] = (float*)dev_alloc(TAG_GRAD_BUF, zero_slot_elems(z, i) * 4);
    }
    z->full_grads = (float*)dev_alloc(TAG_GRADS, z->sz.full_grads * 4);
    if (!z->grads_host) z->shard_grads = (float*)dev_alloc(TAG_GRADS, z->sz.shard_grads * 4);
    z->opt_total = z->sz.opt;
    if (offload == OFFLOAD_NONE) {
        z->master = (float*)dev_alloc(TAG_MASTER, z->opt_total * 4);
        z->m = (float*)dev_alloc(TAG_ADAM_M, z->opt_total * 4);
        z->v = (float*)dev_alloc(TAG_ADAM_V, z->opt_total * 4);
    }
    if (zero_reduce_ranks(lay) > 1) { // (the gradient's shards, or [HSDP] its replicas)
        comm->chunk = zero_comm_chunk(lay);
        comm->stage_buf = (float*)dev_alloc(TAG_COMM, z->sz.comm * 4);
    }
    for (int i = 0; i < 4; i++) { z->resident[i] = -1; z->buf_state[i] = BUF_FREE; z->gather_h[i] = -1; z->reduce_h[i] = -1; }
#ifdef USE_MPI
    for (int i = 0; i < 4 && lay->sh.hpz && comm->mpi && !comm->device_side; i++) // [hpZ] the gathers' receive types, before any step
        if (zero_slot_block(lay, i) >= 0 && zero_gathered(z, zero_slot_block(lay, i)))
            comm_spread_type(comm, lay->S[zero_slot_block(lay, i)], comm->grp[CG_PARAM].n, lay->sh.G);
#endif
}

static void zero_free(Zero* z) {
    size_t X = sizeof(floatX);
    dev_free(TAG_PARAMS, z->full_params, z->sz.full_params * X);
    if (!z->param_loc) dev_free(TAG_PARAMS, z->shard_params, z->sz.shard_params * X);
    for (int i = 0; i < 4; i++) {
        int64_t n = z->param_buf[i] || z->grad_buf[i] ? zero_slot_elems(z, i) : 0;
        if (z->param_buf[i]) dev_free(TAG_PARAM_BUF, z->param_buf[i], n * X);
        if (z->grad_buf[i]) dev_free(TAG_GRAD_BUF, z->grad_buf[i], n * 4);
    }
    dev_free(TAG_GRADS, z->full_grads, z->sz.full_grads * 4);
    if (!z->grads_host) dev_free(TAG_GRADS, z->shard_grads, z->sz.shard_grads * 4);
    if (z->offload == OFFLOAD_NONE) { // [offload] offload_free frees them
        dev_free(TAG_MASTER, z->master, z->opt_total * 4);
        dev_free(TAG_ADAM_M, z->m, z->opt_total * 4);
        dev_free(TAG_ADAM_V, z->v, z->opt_total * 4);
    }
    if (z->comm->stage_buf) dev_free(TAG_COMM, z->comm->stage_buf, z->sz.comm * 4);
    z->comm->stage_buf = NULL;
}

// ----------------------------------------------------------------------------
// Where things are. The optimizer range of block b is the whole block under ZeRO-0 and the
// rank's shard otherwise; "shard" pointers are always the rank's shard (the gradient norm and
// the checkpoint files use the shard at every stage, so they are stage-independent).

static inline int64_t zero_opt_lo(const Zero* z, int b) { return z->stage == 0 ? 0 : z->lay.r * z->lay.S[b]; }
// [LoRA] a frozen block's optimizer range is empty (lo == hi): it has no master, m, v or gradient
static inline int64_t zero_opt_hi(const Zero* z, int b) {
    return z->lay.frozen[b] ? zero_opt_lo(z, b) : z->stage == 0 ? z->lay.P[b] : (z->lay.r + 1) * z->lay.S[b];
}
// offset of block b's optimizer range in master/m/v
static inline int64_t zero_opt_off(const Zero* z, int b) { return z->stage == 0 ? z->lay.goff[b] : z->lay.gshard_off[b]; }

// The rank's shard of block b's reduced gradient (valid after the step's reductions).
static inline float* zero_shard_grads(const Zero* z, int b) {
    if (z->lay.frozen[b]) return NULL;
    if (z->stage <= 1) return z->full_grads + z->lay.goff[b] + z->lay.r * z->lay.S[b];
    if (!z->shard_grads) return NULL; // [-offload-params with -offload] on the host (offload.h)
    return z->shard_grads + z->lay.gshard_off[b];
}
// The reduced gradient of block b's optimizer range.
static inline float* zero_opt_grads(const Zero* z, int b) {
    if (z->lay.frozen[b]) return NULL;
    return z->stage == 0 ? z->full_grads + z->lay.goff[b] : zero_shard_grads(z, b);
}
// The BF16 parameters of block b's optimizer range (what AdamW writes); [-offload-params] NULL for a
// gathered block: its shard is not on the device.
static inline floatX* zero_opt_params(const Zero* z, int b) {
    if (z->stage == 0) return z->full_params + z->lay.off[b];
    if (!zero_gathered(z, b)) return z->full_params + z->lay.off[b] + z->lay.r * z->lay.S[b];
    floatX* part = zero_shard_params(z, b);
    return part ? part + layout_prim(&z->lay, b) : NULL; // ([hpZ] its shard inside its part)
}

// n parameters of block b's optimizer range from element `at` of it, to the host (get) or from it
// (put): wherever the rank's part lives (the device, or [-offload-params] host memory or a file).
static void zero_shard_get(Zero* z, int b, int64_t at, floatX* host, int64_t n) {
    if (z->param_loc && zero_gathered(z, b)) { z->param_io(z, b, at, host, n, PARAM_GET); return; }
    dev_to_host(host, zero_opt_params(z, b) + at, sizeof(floatX) * (size_t)n);
}
static void zero_shard_put(Zero* z, int b, int64_t at, const floatX* host, int64_t n) {
    if (z->param_loc && zero_gathered(z, b)) { z->param_io(z, b, at, (floatX*)host, n, PARAM_PUT); return; }
    dev_from_host(zero_opt_params(z, b) + at, host, sizeof(floatX) * (size_t)n);
}

static void zero_poison(Zero* z, floatX* p, int64_t n) {
    if (!z->poison || !p) return;
#ifdef ENABLE_FP32
    dev_fill_u16(p, 0xFFFF, (size_t)n * 2); // 0xFFFFFFFF: a NaN
#else
    dev_fill_u16(p, 0x7FC0, (size_t)n);     // BF16 quiet NaN
#endif
}

// [ZeRO-3] A hook was called out of order: end the run naming the block, the buffer and its state.
static void zero_order_error(const Zero* z, const char* what, int b) {
    int slot = zero_slot(z, b);
    die(1, "ZeRO-3 hook out of order: %s block %d, but its buffer %d holds block %d (%s). HINT: this is a bug in "
           "the order of the zero_* hook calls (see the hook table in zero.h)", what, b, slot, z->resident[slot],
        buf_state_name[z->buf_state[slot]]);
}

// [ZeRO-3] Start gathering block b into its buffer (no-op if it is there or on its way). The buffer
// must be free or released: a gather never overwrites parameters a hook still holds.
static void zero_gather_start(Zero* z, int b) {
    if (!zero_gathered(z, b)) return; // [LoRA] a replicated base is always here
    int slot = zero_slot(z, b);
    if (z->resident[slot] == b && z->buf_state[slot] != BUF_RELEASED) return;
    if (z->buf_state[slot] != BUF_FREE && z->buf_state[slot] != BUF_RELEASED) zero_order_error(z, "gathering", b);
    const floatX* shard = zero_shard_params(z, b);
    if (z->param_loc) { // [-offload-params] the shard up into its place in the buffer, then gathered in place
        floatX* mine = z->param_buf[slot] ? z->param_buf[slot] + z->lay.sh.pr * layout_pS(&z->lay, b) : NULL; // (no hpZ: its part is one range)
        if (!z->comm->count_only) z->param_up(z, b, mine);
        shard = mine;
    }
    CollOp op = {COLL_ALL_GATHER, b, z->param_buf[slot], (void*)shard, layout_pS(&z->lay, b), 0, CG_PARAM, 0};
    if (z->lay.sh.hpz) { op.S = z->lay.S[b]; op.rounds = z->lay.sh.G; } // [hpZ] inside the group: G rounds of its N members' shards
    z->gather_h[slot] = comm_start(z->comm, &op);
    z->resident[slot] = b;
    z->buf_state[slot] = BUF_GATHERING;
}

// [ZeRO-3] Block b's full parameters for the hook's computation (gathering and waiting if needed):
// READY -> IN_USE. Handing out a block that is already in use is an ordering bug.
static floatX* zero_acquire(Zero* z, int b) {
    int slot = zero_slot(z, b);
    zero_gather_start(z, b);
    if (z->buf_state[slot] == BUF_GATHERING) {
        comm_wait(z->comm, z->gather_h[slot]);
        z->gather_h[slot] = -1;
        z->buf_state[slot] = BUF_READY;
    }
    if (z->buf_state[slot] != BUF_READY) zero_order_error(z, "handing out", b);
    z->buf_state[slot] = BUF_IN_USE;
    return z->param_buf[slot];
}

// [ZeRO-3] Block b stays gathered for a later hook: IN_USE -> READY.
static void zero_keep(Zero* z, int b) {
    if (!zero_gathered(z, b)) return;
    int slot = zero_slot(z, b);
    if (z->resident[slot] != b || z->buf_state[slot] != BUF_IN_USE) zero_order_error(z, "keeping", b);
    z->buf_state[slot] = BUF_READY;
}

// [ZeRO-3] Block b's computation is done and its buffer may be reused: IN_USE -> RELEASED.
static void zero_release_block(Zero* z, int b) {
    if (!zero_gathered(z, b)) return;
    int slot = zero_slot(z, b);
    if (z->resident[slot] != b || z->buf_state[slot] != BUF_IN_USE) zero_order_error(z, "releasing", b);
    z->buf_state[slot] = BUF_RELEASED;
    zero_poison(z, z->param_buf[slot], zero_slot_elems(z, slot));
}

// Block b's parameters for a computation (stages 0-2: always present; [ZeRO-3] acquired), and the
// matching release when it is done (nothing to do at stages 0-2).
static inline floatX* zero_params(Zero* z, int b) {
    if (!zero_gathered(z, b)) return z->full_params + z->lay.off[b];
    return zero_acquire(z, b);
}
static inline void zero_release(Zero* z, int b) {
    if (zero_gathered(z, b)) zero_release_block(z, b);
}

// ----------------------------------------------------------------------------
// The hooks (see the table at the top). b is a block: 0 = io, 1..L = layers.
// [ZeRO-3] The io block is gathered once per micro-step: for the embedding, kept (its buffer is its
// own, so keeping it costs no memory) through the LM head and, when backward follows, the LM-head
// backward; then released.

// Forward, io block, before the embedding. [ZeRO-3] gather io, prefetch layer 1.
static floatX* zero_before_embedding(Zero* z) {
    floatX* p = zero_params(z, 0);
    if (z->stage == 3 && z->lay.adapter) zero_gather_start(z, z->lay.adapter); // [LoRA] once per micro-step
    if (z->stage == 3 && z->L >= 1) zero_gather_start(z, 1);
    return p;
}

// [LoRA] The adapter block's parameters, for any hook of the micro-step (NULL: no adapters).
// [ZeRO-3] gathered (started with the io block's) and kept until zero_after_head (no backward) or
// zero_after_embedding_backward.
static floatX* zero_adapters(Zero* z) {
    if (!z->lay.adapter) return NULL;
    floatX* p = zero_params(z, z->lay.adapter);
    if (z->stage == 3) zero_keep(z, z->lay.adapter);
    return p;
}
// [LoRA] [ZeRO-3] the micro-step is done with the adapters' parameters.
static void zero_release_adapters(Zero* z) {
    if (z->stage != 3 || !z->lay.adapter) return;
    zero_acquire(z, z->lay.adapter);
    zero_release_block(z, z->lay.adapter);
}
// [ZeRO-3] The embedding is done: keep the io block for the LM head.
static void zero_after_embedding(Zero* z) {
    if (z->stage == 3) zero_keep(z, 0);
}

// Before layer block b's forward. [ZeRO-3] wait for b, start gathering the next layer.
static floatX* zero_before_block_forward(Zero* z, int b) {
    floatX* p = zero_params(z, b);
    if (z->stage == 3 && b < z->L) zero_gather_start(z, b + 1);
    return p;
}
// [ZeRO-3] release b, except the last layer when backward comes next (it needs it first).
static void zero_after_block_forward(Zero* z, int b, int backward_follows) {
    if (z->stage != 3) return;
    if (b == z->L && backward_follows) zero_keep(z, b);
    else zero_release_block(z, b);
}

// Forward, io block, before the final layernorm and LM head. [ZeRO-3] still there since the embedding.
static floatX* zero_before_head(Zero* z) { return zero_params(z, 0); }
// [ZeRO-3] After the LM head: keep the io block for the LM-head backward, or release it (eval,
// sampling: forward without backward ends here).
static void zero_after_head(Zero* z, int backward_follows) {
    if (z->stage != 3) return;
    if (backward_follows) zero_keep(z, 0);
    else { zero_release_block(z, 0); zero_release_adapters(z); }
}

// The gradient buffer block b accumulates into this micro-step. [ZeRO-2/3] the per-block buffer,
// once the reduce-scatter that last read it is done, zeroed.
// [LoRA] A frozen block has none: NULL.
static float* zero_grad_buffer(Zero* z, int b) {
    if (z->lay.frozen[b]) return NULL;
    if (z->stage <= 1) return z->full_grads + z->lay.goff[b];
    int slot = zero_slot(z, b);
    comm_wait(z->comm, z->reduce_h[slot]);
    z->reduce_h[slot] = -1;
    if (z->grad_reuse) z->grad_reuse(z, slot); // [-offload-params with -offload] its last copy down is done
    dev_zero(z->grad_buf[slot], zero_slot_elems(z, slot) * 4);
    return z->grad_buf[slot];
}

// Backward, io block, before the LM-head backward: its parameters are still here from the
// forward; its gradient buffer lives until the embedding backward (zero_after_embedding_backward).
// [ZeRO-3] start gathering layer L-1 (the last layer is still here) while the LM head runs.
static floatX* zero_before_head_backward(Zero* z, float** grads) {
    *grads = zero_grad_buffer(z, 0);
    floatX* p = zero_params(z, 0);
    if (z->stage == 3 && z->L > 1) zero_gather_start(z, z->L - 1);
    return p;
}
// [ZeRO-3] The LM head and final layernorm are done with wte and lnf: release the io block's
// parameters. Its gradient stays: the embedding backward adds to dwte without reading wte.
static void zero_after_head_backward(Zero* z) {
    if (z->stage == 3) zero_release_block(z, 0);
}

// Before layer block b's backward. [ZeRO-3] wait for b, start gathering b-1 (before any
// reduce-scatter of b is issued, so the gather is not queued behind it).
static floatX* zero_before_block_backward(Zero* z, int b, float** grads) {
    floatX* p = zero_params(z, b);
    if (z->stage == 3 && b > 1) zero_gather_start(z, b - 1);
    *grads = zero_grad_buffer(z, b);
    return p;
}

// [HSDP] Block b's gradient shard (S FP32 at `shard`), reduced inside the group, summed over its G
// replicas in the other groups: an all-reduce among them (each adds its part of the shard in group
// order, then all-gathers: every replica the same bits). Returns its handle; h when there are none.
static int zero_sum_replicas(Zero* z, int b, float* shard, int h) {
    if (!z->lay.sh.hsdp) return h;
    CollOp op = {COLL_ALL_REDUCE, b, shard, NULL, z->lay.S[b] / z->lay.sh.G, 0, CG_REP, 0};
    return comm_start(z->comm, &op);
}

// Reduce block b's gradient: ZeRO-0 all-reduce and ZeRO-1 reduce-scatter on the last
// micro-step only (gradients accumulate locally in full_grads until then); ZeRO-2/3 a
// reduce-scatter every micro-step into the FP32 shard (= on the first, += after); [HSDP] each
// summed over its replicas once complete (zero_sum_replicas).
static void zero_reduce_block(Zero* z, int b, int micro, int last_micro) {
    const BlockLayout* lay = &z->lay;
    if (lay->frozen[b]) return; // [LoRA] no gradient
    if (z->stage <= 1) {
        if (!last_micro) return;
        float* full = z->full_grads + lay->goff[b];
        CollOp op = {z->stage == 0 ? COLL_ALL_REDUCE : COLL_REDUCE_SCATTER, b, full,
                     full + lay->r * lay->S[b], lay->S[b], 0, CG_GRAD, 0};
        int h = comm_start(z->comm, &op); // waited for in zero_step
        h = zero_sum_replicas(z, b, (float*)op.shard, h);
        if (z->grad_reduced) z->grad_reduced(z, b, h, micro, 1); // [offload] the shard to the host once reduced
        return;
    }
    int slot = zero_slot(z, b);
    CollOp op = {COLL_REDUCE_SCATTER, b, z->grad_buf[slot], z->shard_grads + lay->gshard_off[b], lay->S[b], micro > 0, CG_GRAD, 0};
    if (z->grads_host) { // [-offload-params with -offload] in place, every micro-step: the host accumulates
        op.shard = z->grad_buf[slot] ? z->grad_buf[slot] + lay->r * lay->S[b] : NULL;
        op.accumulate = 0;
    }
    z->reduce_h[slot] = comm_start(z->comm, &op);
    // [HSDP] the shard is complete after the last micro-step ([-offload-params with -offload]: after
    // each, before the host adds it up)
    if (last_micro || z->grads_host) z->reduce_h[slot] = zero_sum_replicas(z, b, (float*)op.shard, z->reduce_h[slot]);
    if (z->grad_reduced) z->grad_reduced(z, b, z->reduce_h[slot], micro, last_micro); // [offload] the shard to the host once reduced
}

// After layer block b's backward: reduce; [ZeRO-3] release b.
static void zero_after_block_backward(Zero* z, int b, int micro, int last_micro) {
    zero_reduce_block(z, b, micro, last_micro);
    zero_release(z, b);
}

// [LoRA] The adapter block's gradient buffer for this micro-step's backward (NULL: no adapters).
static float* zero_adapter_grads(Zero* z) { return z->lay.adapter ? zero_grad_buffer(z, z->lay.adapter) : NULL; }

// After the embedding backward: the io block's gradient is complete; reduce it. [LoRA] So is the
// adapter block's: reduce it; [ZeRO-3] release its parameters.
static void zero_after_embedding_backward(Zero* z, int micro, int last_micro) {
    zero_reduce_block(z, 0, micro, last_micro);
    if (!z->lay.adapter) return;
    zero_reduce_block(z, z->lay.adapter, micro, last_micro);
    zero_release_adapters(z);
}

// ----------------------------------------------------------------------------
// The step: global gradient norm over the shards (padding excluded) with one scalar reduction,
// clipping, the overflow check (one more scalar reduction), AdamW on the optimizer range, then the
// parameters everyone needs again.

// Sum of squares of this rank's shard of the reduced gradient (all stages: the shard), every
// segment of every block in one op (one read-back on the GPU).
static void zero_local_sumsq(Zero* z, double* out) {
    int cap = z->lay.nblocks * MAX_BLOCK_TENSORS, n = 0;
    const float** ptr = (const float**)malloc(sizeof(float*) * cap);
    int64_t* len = (int64_t*)malloc(sizeof(int64_t) * cap);
    Segment seg[MAX_BLOCK_TENSORS];
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (z->lay.frozen[b]) continue; // [LoRA] no gradient
        int k = layout_segments(&z->lay, b, z->lay.r * z->lay.S[b], (z->lay.r + 1) * z->lay.S[b], seg);
        const float* g = zero_shard_grads(z, b);
        for (int i = 0; i < k; i++, n++) { ptr[n] = g + seg[i].off; len[n] = seg[i].len; }
    }
    op_sumsq_many_into(out, ptr, len, n);
    free(ptr);
    free(len);
}

// Wait for every reduction of the step, then the gradient's sum of squares into sc->sumsq, where
// the step runs; with R > 1, sc's loss and sum of squares are summed over ranks (read back for the
// rank-ordered sum: one wait per step), so every rank has the same numbers. One scalar reduction
// carries both (at R = 1 it is only counted).
static void zero_grad_sumsq(Zero* z, StepScalars* sc) {
    comm_wait_all(z->comm);
    for (int i = 0; i < 4; i++) z->reduce_h[i] = -1;
    int data = !z->comm->count_only; // counting mode: no data, only the scalar sum is issued
    if (data && z->grads_host) { // [-offload-params with -offload] from the host copy, in the device's order
        double v = 0.0;
        z->host_sumsq(z, &v);
        dev_from_host(&sc->sumsq, &v, sizeof(v));
    } else if (data) zero_local_sumsq(z, &sc->sumsq);
    double sums[2] = {0.0, 0.0};
    if (data && z->comm->R > 1) dev_to_host(sums, &sc->loss_sum, sizeof(sums)); // loss_sum, sumsq: adjacent
    if (z->lay.sh.hsdp && z->lay.sh.g > 0) sums[1] = 0.0; // [HSDP] each shard counted once: group 0's (adding 0 is exact)
    comm_sum_doubles(z->comm, sums, 2);
    if (data && z->comm->R > 1) dev_from_host(&sc->loss_sum, sums, sizeof(sums));
}

// AdamW over the optimizer range of every block; sc: the step's scalars (clip scale, finite and
// overflow flags: either skips the update on every block). The new state's maxima are folded into
// z->adam_max as the update runs (for the next step's zero_adamw_check).
// [-offload-params] The update is written into the block's own gather buffer (every buffer is released
// between the backward and the next forward), at the shard's place, and its segments go down to
// where the shard lives; train_step knows by then that the step is applied (readback_lag 0), so a
// skipped step copies nothing.
static void zero_adamw(Zero* z, const AdamWParams* hp, const StepScalars* sc) {
    Segment seg[MAX_BLOCK_TENSORS];
    if (z->adam_max) op_adamw_max_begin(z->adam_max, sc);
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (z->lay.frozen[b]) continue; // [LoRA]
        int n = layout_segments(&z->lay, b, zero_opt_lo(z, b), zero_opt_hi(z, b), seg);
        int64_t o = zero_opt_off(z, b);
        floatX* out = zero_opt_params(z, b);
        int slot = zero_slot(z, b), down = z->param_loc && zero_gathered(z, b);
        if (down) {
            if (z->buf_state[slot] != BUF_RELEASED && z->buf_state[slot] != BUF_FREE) zero_order_error(z, "updating", b); // (nothing it holds is used again)
            out = z->param_buf[slot] + z->lay.r * z->lay.S[b]; // (-offload-params: no hpZ, so its part is its shard)
        }
        op_adamw_scalars(out, z->master + o, z->m + o, z->v + o, zero_opt_grads(z, b), seg, n, hp, sc, z->adam_max);
        for (int i = 0; down && i < n; i++) z->param_io(z, b, seg[i].off, out + seg[i].off, seg[i].len, PARAM_PUT_DEV);
    }
    if (z->param_loc) z->param_io(z, -1, 0, NULL, 0, PARAM_SYNC);
}

// Before AdamW: would the update leave a non-finite value anywhere (op_adamw_check over every
// block, nothing written)? First the bound (op_adamw_bound, from the norm and the maxima the last
// update left): when it proves this rank's update finite, the check's launches read nothing. The
// flag sc->overflow is summed over ranks (one scalar reduction, read back for it: one wait per
// step at R > 1; at R = 1 it stays where the step runs and is only counted), so every rank skips
// the update together and no shard moves while another stays.
static void zero_adamw_check(Zero* z, const AdamWParams* hp, StepScalars* sc) {
    Segment seg[MAX_BLOCK_TENSORS];
    int data = !z->comm->count_only; // counting mode: only the scalar sum is issued
    if (data && z->adam_max) op_adamw_bound(sc, z->adam_max, hp);
    for (int b = 0; data && b < z->lay.nblocks; b++) {
        if (z->lay.frozen[b]) continue; // [LoRA]
        int n = layout_segments(&z->lay, b, zero_opt_lo(z, b), zero_opt_hi(z, b), seg);
        int64_t o = zero_opt_off(z, b);
        op_adamw_check(z->master + o, z->m + o, z->v + o, zero_opt_grads(z, b), seg, n, hp, sc);
    }
    int flag = 0;
    if (data && z->comm->R > 1) dev_to_host(&flag, &sc->overflow, sizeof(flag));
    double any = flag;
    comm_sum_doubles(z->comm, &any, 1);
    flag = any > 0.0;
    if (data && z->comm->R > 1) dev_from_host(&sc->overflow, &flag, sizeof(flag));
}

// After the optimizer: [ZeRO-1/2] all-gather every block's parameters in place ([LoRA] the
// trainable blocks (frozen 0): a frozen block never changes; its are gathered once, when loaded
// (frozen 1)). [hpZ] Each parameter part from its G shards (the same member of every group); a
// frozen block's parts are filled whole (zero_fill_frozen_params).
static void zero_gather_params(Zero* z, int frozen) {
    if (z->stage == 1 || z->stage == 2 || (z->stage == 3 && frozen && z->lay.rep_frozen)) { // [LoRA] a replicated base: once
        for (int b = 0; b < z->lay.nblocks; b++) {
            if (z->lay.frozen[b] != frozen) continue;
            floatX* full = z->full_params + z->lay.off[b];
            CollOp op = {COLL_ALL_GATHER, b, full, full + z->lay.r * z->lay.S[b], z->lay.S[b], 0, CG_PARAM, 0};
            comm_start(z->comm, &op);
        }
        comm_wait_all(z->comm);
    } else if (z->stage == 3 && !frozen && z->lay.sh.hpz) { // [hpZ]
        for (int b = 0; b < z->lay.nblocks; b++) {
            if (z->lay.frozen[b] || !zero_gathered(z, b)) continue;
            floatX* part = zero_shard_params(z, b);
            CollOp op = {COLL_ALL_GATHER, b, part, part ? part + layout_prim(&z->lay, b) : NULL, z->lay.S[b], 0, CG_REP, 0};
            comm_start(z->comm, &op);
        }
        comm_wait_all(z->comm);
    }
}
static void zero_after_step(Zero* z) { zero_gather_params(z, 0); }

// Gradients start the next step at zero. [ZeRO-0/1] full_grads accumulate across micro-steps;
// [ZeRO-2/3] the shard is written (=) by the first micro-step's reduce-scatter, so nothing to do.
static void zero_zero_grads(Zero* z) {
    if (z->stage <= 1) dev_zero(z->full_grads, z->lay.train_total * 4);
}

// ----------------------------------------------------------------------------
// The schedule, counted. The collectives one optimizer step issues, by kind and bytes, from the hooks
// themselves: a Zero that holds no buffers, over a Comm in counting mode (comm_start counts and moves
// nothing), is walked through the hooks in the order the model calls them -- gpt_forward (embedding,
// layers, head), gpt_backward (head, layers in reverse, embedding) for each of GA micro-steps, then
// the step (zero_grad_sumsq, AdamW, zero_after_step) -- so the planner's counts are the schedule, not
// a second description of it. No data is read or written (every buffer pointer stays NULL: dev_zero
// and the poisoning skip NULL, the compute that reads them is not called). The tests keep closed
// forms of their own (test/test_zero.h: zt_comm_closed_form).
// sent (NULL: not wanted): the bytes a rank sends in each group's collectives (Comm.sent).
static void zero_count_step(const BlockLayout* lay, int stage, int GA, int64_t count[COLL_KINDS], int64_t bytes[COLL_KINDS], double* sent) {
    Comm c;
    memset(&c, 0, sizeof(c));
    c.R = lay->sh.W;
    c.count_only = 1;
    const Shards* sh = &lay->sh;
    c.grp[CG_GRAD].n = sh->R; c.grp[CG_PARAM].n = sh->pR; c.grp[CG_REP].n = sh->G; // (the groups' sizes: their traffic)
    Zero z;
    memset(&z, 0, sizeof(z));
    z.stage = stage; z.R = lay->sh.W; z.r = 0; z.L = lay->nblocks - 1 - (lay->adapter > 0);
    z.lay = *lay;
    z.sz = zero_sizes(lay, stage);
    z.comm = &c;
    for (int i = 0; i < 4; i++) { z.resident[i] = -1; z.buf_state[i] = BUF_FREE; z.gather_h[i] = -1; z.reduce_h[i] = -1; }
    float* grads;
    for (int micro = 0; micro < GA; micro++) {
        int last = micro == GA - 1;
        zero_before_embedding(&z); // gpt_forward, backward_follows = 1
        zero_adapters(&z);
        zero_after_embedding(&z);
        for (int b = 1; b <= z.L; b++) {
            zero_before_block_forward(&z, b);
            zero_after_block_forward(&z, b, 1);
        }
        zero_before_head(&z);
        zero_adapters(&z);
        zero_after_head(&z, 1);
        zero_before_head_backward(&z, &grads); // gpt_backward
        zero_adapter_grads(&z);
        zero_after_head_backward(&z);
        for (int b = z.L; b >= 1; b--) {
            zero_before_block_backward(&z, b, &grads);
            zero_after_block_backward(&z, b, micro, last);
        }
        zero_after_embedding_backward(&z, micro, last);
    }
    zero_grad_sumsq(&z, NULL);        // train_step: the norm's scalar sum,
    zero_adamw_check(&z, NULL, NULL); // the overflow flag's, then the optimizer's gathers
    zero_after_step(&z);
    memcpy(count, c.count, sizeof(c.count));
    if (sent) memcpy(sent, c.sent, sizeof(c.sent));
    memcpy(bytes, c.bytes, sizeof(c.bytes));
}

// ----------------------------------------------------------------------------
// Filling the optimizer range from a logical source (init, a model file, a checkpoint), and
// deriving the parameters from the master weights.

// n floats of the optimizer state a (0 master, 1 m, 2 v) at offset off (laid out like master: the
// optimizer range of every block) to the host, or from it: wherever the state lives.
static void zero_state_get(Zero* z, int a, int64_t off, float* host, int64_t n) {
    if (z->state_io) { z->state_io(z, a, off, host, n, 0); return; } // [offload]
    float* arr = a == 0 ? z->master : a == 1 ? z->m : z->v;
    dev_to_host(host, arr + off, sizeof(float) * n);
}
static void zero_state_put(Zero* z, int a, int64_t off, const float* host, int64_t n) {
    if (z->state_io) { z->state_io(z, a, off, (float*)host, n, 1); return; } // [offload]
    if (z->adam_max) dev_zero(z->adam_max, sizeof(AdamWMax)); // (a state written here: its maxima unknown)
    float* arr = a == 0 ? z->master : a == 1 ? z->m : z->v;
    dev_from_host(arr + off, host, sizeof(float) * n);
}

// fill(ctx, dst, logical, len): write the len logical parameters starting at `logical` to dst.
typedef void (*LogicalFill)(void* ctx, float* dst, int64_t logical, int64_t len);

// Fill the optimizer state a (0 master, 1 m, 2 v) piece by piece from a logical source, one block
// at a time through a host buffer of one block's range (padding stays 0), so that no full-size
// host copy is ever made.
static void zero_fill_opt(Zero* z, int a, LogicalFill fill, void* ctx) {
    int64_t maxn = 0;
    for (int b = 0; b < z->lay.nblocks; b++) {
        int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
        maxn = n > maxn ? n : maxn;
    }
    float* host = (float*)malloc(sizeof(float) * maxn);
    Piece pc[MAX_BLOCK_TENSORS];
    for (int b = 0; b < z->lay.nblocks; b++) {
        int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
        memset(host, 0, sizeof(float) * n);
        int k = layout_pieces(&z->lay, b, zero_opt_lo(z, b), zero_opt_hi(z, b), pc);
        for (int i = 0; i < k; i++) fill(ctx, host + pc[i].local, pc[i].logical, pc[i].len);
        zero_state_put(z, a, zero_opt_off(z, b), host, n);
    }
    free(host);
}

// BF16 parameters from the master weights (rounded to nearest), then [ZeRO-1/2] all-gathered.
static void zero_params_from_master(Zero* z) {
    for (int b = 0; b < z->lay.nblocks; b++) {
        // the whole range, padding included: master is 0 there, and so the parameter
        int64_t n = zero_opt_hi(z, b) - zero_opt_lo(z, b);
        if (z->offload == OFFLOAD_NONE && zero_opt_params(z, b)) { op_round_params(zero_opt_params(z, b), z->master + zero_opt_off(z, b), n); continue; }
        // [offload, -offload-params] rounded on the host (rn, as the kernel), then copied to where they live
        float* host = (float*)malloc(sizeof(float) * (n > 0 ? n : 1));
        floatX* px = (floatX*)malloc(sizeof(floatX) * (n > 0 ? n : 1));
        zero_state_get(z, 0, zero_opt_off(z, b), host, n);
        for (int64_t i = 0; i < n; i++) px[i] = rn(host[i]);
        zero_shard_put(z, b, 0, px, n);
        free(host);
        free(px);
    }
    zero_after_step(z);
}

// [QLoRA] An encoded tensor's bytes come from the model: the stored bytes [byte0, byte0 + n) of tensor
// `tensor` of layer `layer` (BlockTensor.tensor, .layer) into dst. Returns the non-finite values among
// the logical values it read that this call counts (the model counts each tensor's once, at byte 0).
typedef int64_t (*EncodedFill)(void* ctx, int tensor, int layer, unsigned char* dst, int64_t byte0, int64_t n);

// One range of frozen block b: [lo, lo + n) of the block, put at `at` of its optimizer range (see
// zero_shard_put). Returns the non-finite values read when count is set.
static int64_t zero_fill_frozen_range(Zero* z, int b, int64_t lo, int64_t n, int64_t at, int count, LogicalFill fill, void* ctx,
                                      EncodedFill enc, void* enc_ctx) {
    Piece pc[MAX_BLOCK_TENSORS];
    int64_t bad = 0;
    float* host = (float*)calloc(n > 0 ? n : 1, sizeof(float));
    floatX* px = (floatX*)malloc(sizeof(floatX) * (n > 0 ? n : 1));
    if (!host || !px) die(1, "out of host memory (%lld floats for block %d)", (long long)n, b);
    int k = layout_pieces(&z->lay, b, lo, lo + n, pc);
    for (int i = 0; i < k; i++) fill(ctx, host + pc[i].local, pc[i].logical, pc[i].len);
    for (int64_t i = 0; i < n; i++) { px[i] = rn(host[i]); bad += count && !isfinite(host[i]); }
    EncRun er[MAX_BLOCK_TENSORS]; // [QLoRA] encoded tensors: their bytes in the range
    int ne = layout_encoded(&z->lay, b, lo, lo + n, er);
    if (ne && !enc) die(1, "block %d holds an encoded tensor and no encoder was given (internal error)", b);
    for (int i = 0; i < ne; i++) {
        const BlockTensor* t = &z->lay.tensors[b][er[i].k];
        int64_t nb = enc(enc_ctx, t->tensor, t->layer, (unsigned char*)(px + er[i].local), er[i].at * (int64_t)sizeof(floatX),
                         er[i].len * (int64_t)sizeof(floatX));
        bad += count ? nb : 0;
    }
    if (z->stage == 0) dev_from_host(z->full_params + z->lay.off[b], px, sizeof(floatX) * n);
    else zero_shard_put(z, b, at, px, n); // (the shard, [hpZ] a round of its part, or a replicated block's part of full_params)
    free(host);
    free(px);
    return bad;
}

// [LoRA] A frozen block's parameters straight from a logical source (no master to round from):
// each rank rounds its optimizer-range-sized part (the block under ZeRO-0, its shard otherwise) to
// floatX exactly as zero_params_from_master would, then [ZeRO-1/2] the frozen blocks are gathered.
// [QLoRA] The part of an encoded tensor in that range is enc's bytes (NULL: no encoded tensor).
// Returns the non-finite values this rank read (a frozen block has no master for the usual check).
static int64_t zero_fill_frozen_params(Zero* z, LogicalFill fill, void* ctx, EncodedFill enc, void* enc_ctx) {
    int64_t bad = 0;
    const Shards* sh = &z->lay.sh;
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (!z->lay.frozen[b]) continue;
        int64_t lo = zero_opt_lo(z, b), n = (z->stage == 0 ? z->lay.P[b] : (z->lay.r + 1) * z->lay.S[b]) - lo;
        int once = !sh->hsdp || sh->g == 0; // ([HSDP] each shard's values counted by group 0's ranks)
        if (!(zero_gathered(z, b) && sh->hpz)) { bad += zero_fill_frozen_range(z, b, lo, n, 0, once, fill, ctx, enc, enc_ctx); continue; }
        for (int t = 0; t < sh->G; t++) // [hpZ] its part whole: shards j, j + N, ... (its own, round g, counted)
            bad += zero_fill_frozen_range(z, b, (int64_t)(sh->pr + t * sh->pR) * n, n, (int64_t)(t - sh->g) * n, t == sh->g, fill, ctx, enc, enc_ctx);
    }
    zero_gather_params(z, 1);
    return bad;
}

#endif // ZT_ZERO_H
