// plan.h — sizing: one pure function from the configuration to the bytes of every tag on one rank
// (plan_config), which the allocator follows (trainer_build_model in train_gpt.cu checks every tag
// against it), the communication schedule of a step, an estimate of the step time, the planner's
// environment (PlanEnv: memory, compute rate, bandwidths, each with its source), -plan (run_plan)
// and -z / -r / -offload auto (choose_config). Also the helpers they need: the GPU tables (BF16
// peaks, gpu_model_name), parse_size, fmt_bytes, mem_available_bytes, measure_cpu_flops.
// Nothing here allocates the model.
//
// May call: flags.h (Flags, FLAG_SHOW), acts.h (acts_bytes, ops_workspace_floats), model.h
// (model_describe, model_layout), zero.h (zero_sizes, zero_count_step, comm_broadcast, Launch),
// offload.h (offload_host_bytes), adamw.cuh (adamw_host_rate: the host AdamW's measured rate),
// checkpoint.h (the checkpoint files' bytes) and the matmul op (measure_cpu_flops). Knows nothing of the trainer's types: it takes Flags, a GPTConfig, R and
// the Launch.
#ifndef ZT_PLAN_H
#define ZT_PLAN_H
#include <errno.h>
#include <limits.h>
#include <time.h>
#include "device.cuh"     // defines: floatX, TAG_*, mem_tag_name, g_device, g_work, num_threads, die_user
#include "flags.h"        // defines: Flags, FLAG_SHOW
#include "acts.h"         // defines: acts_bytes, ops_workspace_floats
#include "lora.h"         // defines: lora_acts_bytes, lora_discard_floats ([LoRA] the adapters' activations), lora_dequant_elems ([QLoRA])
#include "model.h"        // defines: GPTConfig, ModelDesc, model_describe, model_layout
#include "zero.h"         // defines: BlockLayout, zero_sizes, zero_count_step, Comm, comm_broadcast, Launch, COLL_*
#include "offload.h"      // defines: Offload, offload_host_bytes, offload_name, offload_parse
#include "adamw.cuh"      // defines: adamw_host_rate, simd_level, simd_names
#include "checkpoint.h"   // defines: ckpt_state_file_bytes, ckpt_model_file_bytes
#include "ops/matmul.cuh" // defines: op_matmul_forward (measure_cpu_flops)


typedef struct {
    int stage, recompute, offload;  // offload: the optimizer state lives on the host (-offload cpu)
    int offload_params;             // [-offload-params] the ZeRO-3 parameter shards live on the host (cpu) or disk (nvme);
                                    // with -offload the gradient shard on the host too
    double param_shard_bytes;       // [-offload-params] the rank's parameter shard (X bytes an element), off the device
    double prefetch_s, exposed_s;   // [-offload-params] the shards' copies up per step (and [nvme] their reads: the slower),
                                    // and the part of it that does not hide behind the compute
    int rep_base;                   // [LoRA] 1: every rank holds the whole frozen base (ZeRO-0/1/2 always; ZeRO-3 with
                                    // -lora-base replicated: never gathered, the adapters alone sharded); 0: sharded (or no LoRA)
    size_t bytes[TAG_COUNT];        // per rank
    size_t total;                   // on the device (offload rows: without the optimizer state)
    size_t host_per_node;           // offload rows: host bytes per node (host_bytes x ranks on a node)
    double pcie_bytes;              // offload rows: bytes over host<->device per step and rank (gradient shard D2H once: the
                                    // overflow check is proved by its bound in the steady state; parameters H2D once)
    double pcie_d2h_hidden;         // [cpu] of those, the gradient bytes copied during the backward (all blocks but the last reduced)
    double state_bytes;             // offload rows: master, m, v of the rank's shard (12 bytes an element)
    double pcie_s, host_s;          // offload rows: their time, and the host AdamW's
    size_t host_bytes;              // [offload] per rank: optimizer state (cpu) or its buffers (nvme) + staging (offload_host_bytes)
    size_t disk_per_node;           // [nvme] the offload files of the node's ranks (12 bytes per element of each shard), plus
                                    // the checkpoints on disk at once (ckpt_per_node), every row
    size_t ckpt_per_node;           // the checkpoints kept at the peak: model files (rank 0's node) + the node's ranks' state files
    double disk_s;                  // [nvme] reading and writing the state once per step at the node's disk bandwidth
    int64_t coll_count[COLL_KINDS], coll_bytes[COLL_KINDS]; // per step, as the log counts them
    double traffic;                 // bytes a rank sends per step with ring algorithms
    double sent[CG_COUNT];          // of which in each group's collectives (zero.h: CommGroupId; without groups: CG_GRAD, CG_PARAM)
    double sent_inter;              // of which between nodes (plan_link_times: the communicators that span nodes)
    double comm_intra_s, comm_inter_s; // comm_s, inside nodes and between them (a ring runs at its slowest link)
    Groups groups;                  // the row's layout (hybrid sharding: flat, -shard-group N, -hpz N)
    double compute_s, comm_s, step_s;
    double free;                    // memory per rank minus total (negative: over by that much)
    int fits;                       // 1: leaves at least the headroom free (plan_headroom); only these are chosen
} PlanRow;

typedef struct {
    double mem;          // bytes per rank
    char mem_src[96];
    double headroom;     // bytes a row must leave free to fit (plan_headroom)
    double flops;        // FLOP/s per rank
    double membw;        // device memory bytes/s per rank (elementwise recompute), 0: unknown (not priced)
    char flops_src[160 + sizeof(((Flags*)0)->gpu)]; // holds the -gpu text whole (plan_env)
    double link;         // bytes/s per rank and direction: inside a node (-link-intra; -link-gbps)
    char link_src[96];
    double inter;        // bytes/s per rank and direction between nodes (-link-inter; -link-gbps)
    char inter_src[96];
    int gpn;             // ranks per node (-gpus-per-node): a communicator whose ranks span nodes runs at `inter`
    char gpn_src[64];
    double pcie;         // [offload] host<->device bytes/s per rank and direction
    const char* pcie_src;
    double adamw;        // [offload] the host AdamW's elements/s per rank (measured: adamw_host_rate)
    char adamw_src[160];
    double host_mem;     // [offload] host memory per node (on the CPU device: unused, it is the device memory)
    char host_src[96];
    double disk;         // [nvme] bytes/s per node and direction
    const char* disk_src;
    double offload_buffer; // [nvme] -offload-buffer's bytes
    int nvme_ok;         // [nvme] -offload-dir was given: -z auto may choose nvme
    int ckpt_kept;       // checkpoints on disk at once at the peak (-n, -nk, -x); -1: not known (-x -1 without -nk)
    int ckpt_models;     // how many of them hold a model file (-save-model)
} PlanEnv;


// The headroom rule: a configuration fits only if it leaves max(5% of the memory, 1 GiB) free per
// rank, for what no tag counts: the CUDA context, NCCL's and cuBLAS's buffers, allocator rounding
// and fragmentation (on the CPU: the process, MPI's buffers, the page cache others need).
#define PLAN_HEADROOM_TEXT "max(5%% of the memory, 1 GiB)" // a printf format
static double plan_headroom(double mem) { return fmax(0.05 * mem, 1073741824.0); }

// Ranks per node: -gpus-per-node, else the launcher's (-plan -world: 8 on cuda, all on cpu); src: where from.
static int plan_ranks_per_node(const Flags* f, const Launch* L, int R, char* src, size_t cap) {
    int n = 0;
    if (strcmp(f->gpus_per_node, "auto")) {
        if (parse_int(f->gpus_per_node, &n) || n < 1) die_user("flag -gpus-per-node: '%s' is not a number of ranks (or auto)", f->gpus_per_node);
        snprintf(src, cap, "-gpus-per-node");
    } else if (f->plan && f->world > 0) {
        n = g_device == DEV_CUDA ? (R < 8 ? R : 8) : R;
        snprintf(src, cap, "%s", g_device == DEV_CUDA ? "default: 8-GPU nodes" : "default: one node");
    } else {
        n = L && L->local_world > 0 ? L->local_world : R;
        snprintf(src, cap, "the launcher's ranks per node");
    }
    return n;
}

// Hybrid sharding's groups (zero.h: Groups) from -shard-group and -hpz for a world of R ranks: N, or
// auto: the ranks per node (plan_ranks_per_node: the launcher's LOCAL_WORLD_SIZE,
// OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE, ...). Exit 2 when N does not divide R, or both
// are given. Nothing else (the stage, offload: check_group_flags).
static int flag_group_n(const Flags* f, const char* flag, const char* text, const Launch* L, int R) {
    int n;
    char src[64];
    if (!strcmp(text, "auto")) {
        n = plan_ranks_per_node(f, L, R, src, sizeof(src));
        if (R % n) die_user("flag %s auto: %d ranks do not split into groups of %d, the ranks per node (%s). HINT: give N, or as many "
                            "ranks on every node", flag, R, n, src);
        return n;
    }
    if (parse_int(text, &n) || n < 0) die_user("flag %s: '%s' is not a number of ranks per group (N), auto or 0", flag, text);
    if (n > 0 && R % n) die_user("flag %s %d: %d ranks do not split into groups of %d. HINT: N divides the ranks: the ranks per node (auto)", flag, n, R, n);
    return n;
}
static Groups flags_groups(const Flags* f, const Launch* L, int R) {
    int sg = flag_group_n(f, "-shard-group", f->shard_group, L, R), hz = flag_group_n(f, "-hpz", f->hpz, L, R);
    if (sg && hz)
        die_user("flags -shard-group %s and -hpz %s: give one. -shard-group shards inside each group and replicates across them "
                 "(HSDP); -hpz shards over all ranks and keeps only the parameter gathers inside a group (ZeRO++ hpZ)", f->shard_group, f->hpz);
    Groups g = groups_flat(R);
    int N = sg && sg != R ? sg : hz;
    if (N > 0 && N < R) { g.N = N; g.hpz = hz > 0 && hz < R; }
    return g;
}

// Bytes of every tag on one rank and the collectives of one step, for a configuration.
// gr: the world and its groups (hybrid sharding; groups_flat(R): none); the bytes are rank 0's (every
// rank's alike).
static void plan_config(const GPTConfig* c, int B, int T, Groups gr, int GA, int stage, int recompute, Offload offload, double offload_buffer,
                        Offload params, PlanRow* p) {
    memset(p, 0, sizeof(*p));
    if (stage != 3) params = OFFLOAD_NONE;
    p->stage = stage;
    p->recompute = recompute;
    p->offload = offload;
    p->offload_params = params;
    p->rep_base = c->lora_r && (stage <= 2 || c->lora_rep);
    ModelDesc d;
    model_describe(&d, c);
    BlockLayout lay;
    Shards sh = shards_of(gr, 0);
    model_layout_shards(&d, &lay, &sh);
    ZeroSizes s = zero_sizes(&lay, stage);
    size_t X = sizeof(floatX), acts, logits;
    acts_bytes(c, B, T, recompute, &acts, &logits);
    p->bytes[TAG_PARAMS] = X * (s.full_params + (params ? 0 : s.shard_params)); // [-offload-params] the shard on the host
    p->param_shard_bytes = params ? (double)X * (double)s.shard_params : 0.0;
    p->bytes[TAG_PARAM_BUF] = X * (s.param_bufs + lora_dequant_elems(&d)); // [QLoRA] + one layer dequantized (lora.h)
    int grads_host = params && offload; // [-offload-params with -offload] the gradient shard on the host (offload.h)
    p->bytes[TAG_GRADS] = 4 * (s.full_grads + (grads_host ? 0 : s.shard_grads));
    p->bytes[TAG_GRAD_BUF] = 4 * s.grad_bufs;
    p->bytes[TAG_MASTER] = p->bytes[TAG_ADAM_M] = p->bytes[TAG_ADAM_V] = offload ? 0 : 4 * s.opt; // [offload] on the host
    p->host_bytes = offload_host_bytes(&lay, offload, offload_buffer, params && offload) + param_offload_host_bytes(&lay, params);
    // [offload] the FP32 gradient shard down (cpu: block by block during the backward, the io block,
    // reduced last, after it; nvme: at the step, once while the overflow check is proved by its bound,
    // the steady state: adamw_bound_finite) and the floatX parameters up
    // [-offload-params] the parameters never go up at the step (the host AdamW writes the host shard);
    // without -offload the device's update goes down (X an element); every gather copies its shard up
    // (below, from the schedule); with -offload the gradient goes down every micro-step (grads_host)
    p->pcie_bytes = offload ? (double)(4 * (grads_host ? GA : 1) + (params ? 0 : X)) * s.opt : params ? (double)X * s.opt : 0.0;
    p->pcie_d2h_hidden = offload == OFFLOAD_CPU || grads_host ? 4.0 * (double)(s.opt * (grads_host ? GA : 1) - lay.S[0]) : 0.0;
    p->state_bytes = offload ? 12.0 * (double)s.opt : 0.0;
    p->bytes[TAG_ACTS] = acts + lora_acts_bytes(&d.lora, c->L, (int64_t)B * T, lora_discard_floats(&d)); // [LoRA] the adapters' (lora.h)
    p->bytes[TAG_LOGITS] = logits;
    p->bytes[TAG_COMM] = 4 * s.comm;
    p->bytes[TAG_WORK] = 4 * ops_workspace_floats(c, B, T, s.opt);
    for (int t = 0; t < TAG_COUNT; t++) p->total += p->bytes[t];
    // the schedule per step (what the log counts: each collective's full buffer), from the hooks
    // themselves run in counting mode (zero_count_step), and what a rank sends of it with ring
    // algorithms: (n-1)/n of each all-gather and reduce-scatter among n ranks, twice that of an
    // all-reduce ([groups] by communicator: p->sent)
    zero_count_step(&lay, stage, GA, p->coll_count, p->coll_bytes, p->sent);
    if (params) p->pcie_bytes += (double)p->coll_bytes[COLL_ALL_GATHER] / sh.pR; // [-offload-params] each gather's shard up
    p->traffic = 0.0;
    for (int k = 0; k < CG_COUNT; k++) p->traffic += p->sent[k];
    p->groups = gr;
    layout_free(&lay);
}

// The parameters a token's matmuls multiply by (N in the FLOP counts): every parameter, except the
// Llama family's embedding when its LM head is untied (a lookup, no matmul; GPT-2's wte is the head
// too, and llm.c's count keeps wpe). The layers' share (N_layers) leaves out the embeddings and head.
static void flop_params(const GPTConfig* c, double* N, double* N_layers) {
    ModelDesc d;
    model_describe(&d, c);
    *N = (double)d.num_params - (d.t[T_lmhead].n ? (double)d.t[T_embed].n : 0.0);
    *N_layers = (double)d.num_params - (double)(d.t[T_wte].n + d.t[T_wpe].n + d.t[T_embed].n + d.t[T_lmhead].n);
}

// FLOPs per trained token for the planner's time estimate: PaLM's 6 N + 12 L ATT T for forward and
// backward (attention's QK^T and AV counted in full; ATT = NH * HD, GPT-2's C): a matrix's forward
// 2 FLOPs per parameter, its backward 2 for the input's gradient and 2 for its own. [LoRA] The
// frozen base computes no weight gradient (4 N), its adapters all three (6 N_adapters: A x and B (A x)
// forward, their gradients and the input's backward). -r 3 recomputes the layers: one more forward
// (2 N_layers + 4 L ATT T, and the adapters'). The other modes recompute elementwise ops only, priced
// by bytes (plan_recompute_bytes_per_token). The Llama family's SwiGLU (three matrices) and
// grouped-query attention (narrower k, v) are in N through the tensor table. (MFU uses llm.c's count
// instead: mfu_flops_per_token.)
static double plan_flops_per_token(const GPTConfig* c, int T, int recompute) {
    double N, N_layers, L = c->L, ATT = (double)model_dims(c).ATT;
    flop_params(c, &N, &N_layers);
    LoraDesc lo;
    lora_describe(&lo, c);
    double Nad = (double)lo.num_params; // [LoRA] (0 without)
    double f = (c->lora_r ? 4.0 * N + 6.0 * Nad : 6.0 * N) + 12.0 * L * ATT * T;
    if (recompute == 3) f += 2.0 * (N_layers + Nad) + 4.0 * L * ATT * T;
    return f;
}

// Bytes of device memory traffic per trained token that -r adds by recomputing elementwise ops: each
// layer tensor the mode does not keep (LAYER_ACTS' keep column below the mode) is computed once more,
// reading its inputs and writing itself: about 3 times its bytes. Memory-bound on a GPU: the planner
// prices it at the GPU's memory bandwidth (plan_env), not its FLOP rate. (-r 3's matmuls are FLOPs.)
static double plan_recompute_bytes_per_token(const GPTConfig* c, int recompute) {
    ACTS_SIZES(c, 1, 1); // (one token: BT = 1)
    if (BT + C + NH + QKV + ATT + FC + F + MEAN + DSW + ROPE + QKH + QKN < 0) return 0.0; // (every size read: nvcc warns of a size set and unused)
    double bytes = 0.0;
#define X(name, type, elems, keep) if (keep < recompute) bytes += 3.0 * (double)sizeof(type) * (double)(elems);
    LAYER_ACTS(X)
#undef X
    return bytes * (double)L;
}

// FLOPs per trained token for MFU: llm.c's count, 6 N + 6 L C T (gpt2_estimate_mfu: N all parameters,
// padded vocabulary rows included; the attention term halved for causality; no recompute), so that
// our MFU compares with llm.c's published numbers. PaLM's 12 L C T would read higher: ~7% for d12,
// ~5% for d48 at T = 1024. The Llama family: N as flop_params (an untied embedding is no matmul), C
// read as ATT = NH * HD.
static double mfu_flops_per_token(const GPTConfig* c, int T) {
    double N, N_layers;
    flop_params(c, &N, &N_layers);
    return 6.0 * N + 6.0 * c->L * (double)model_dims(c).ATT * T;
}

// BF16 dense peak of a GPU from its name (TFLOP/s, vendor datasheets), 0 when unknown: MFU then
// prints "n/a". The name is the device's ("NVIDIA H100 80GB HBM3") or a user's -gpu ("h100"):
// matched case-insensitively, more specific names first (an "H100 PCIe" is also an "H100").
// With each, its memory bandwidth (TB/s, the datasheets' HBM/GDDR figure: what elementwise recompute
// is priced at; GH200's is the 96 GB part's, A100's the 80 GB SXM's).
static const struct { const char* part; double tflops, tbps; } g_gpu_peaks[] = {
    {"H200 NVL", 835, 4.8}, {"H100 NVL", 835, 3.9}, {"H100 PCIe", 756, 2.0}, {"H200", 989, 4.8}, {"H100", 989, 3.35},
    {"GH200", 989, 4.0}, {"A100", 312, 2.0}, {"A800", 312, 2.0}, {"L40S", 362, 0.864}, {"L4", 121, 0.3}, {"A10", 125, 0.6},
};
static inline int gpu_peak_index(const char* name) {
    for (size_t i = 0; i < sizeof(g_gpu_peaks) / sizeof(g_gpu_peaks[0]); i++)
        if (strcasestr(name, g_gpu_peaks[i].part)) return (int)i;
    return -1;
}
static inline double gpu_peak_tflops(const char* name) {
    int i = gpu_peak_index(name);
    return i < 0 ? 0.0 : g_gpu_peaks[i].tflops;
}

// "80GiB", "40 GB", "512MiB", "1.5TiB", "123456789": bytes, or -1.
static double parse_size(const char* s) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v > 0)) return -1;
    while (*end == ' ') end++;
    static const struct { const char* unit; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].unit)) return v * units[i].mult;
    return -1;
}

// Measured matmul rate of this process's CPU threads, FLOP/s: the median of 15 timed 512 x 1024 x 256
// products after one untimed (threads, caches, pages), with the slowest and fastest in lo / hi. Each
// is timed by the process's CPU time over its threads, not by the wall clock: on a machine others
// share, the wall clock measures their load (one timing moved 2x between identical runs), the CPU
// time what our cores deliver while they run us. A busy machine's steps are slower than this.
#define PLAN_FLOPS_REPS 15
static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}
static double measure_cpu_flops(double* lo, double* hi) {
    const int M = 512, N = 1024, K = 256;
    floatX* a = (floatX*)calloc((size_t)M * K, sizeof(floatX));
    floatX* b = (floatX*)calloc((size_t)N * K, sizeof(floatX));
    floatX* o = (floatX*)calloc((size_t)M * N, sizeof(floatX));
    float* saved = g_work;
    size_t saved_n = g_work_floats;
    g_work_floats = (size_t)K * N;
    g_work = (float*)malloc(sizeof(float) * g_work_floats);
    double rate[PLAN_FLOPS_REPS];
    for (int rep = -1; rep < PLAN_FLOPS_REPS; rep++) {
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        op_matmul_forward(o, NULL, a, b, NULL, M, K, N);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double per_thread = ((c1.tv_sec - c0.tv_sec) + 1e-9 * (c1.tv_nsec - c0.tv_nsec)) / num_threads();
        if (rep >= 0) rate[rep] = 2.0 * M * N * K / fmax(per_thread, 1e-9);
    }
    qsort(rate, PLAN_FLOPS_REPS, sizeof(double), cmp_double);
    *lo = rate[0];
    *hi = rate[PLAN_FLOPS_REPS - 1];
    free(g_work);
    g_work = saved;
    g_work_floats = saved_n;
    free(a); free(b); free(o);
    return rate[PLAN_FLOPS_REPS / 2];
}

// The GPU this process drives ("" when none: a -plan -device cuda run on a machine without one).
static const char* gpu_present_name(void) {
#ifdef __CUDACC__
    return g_cuda_prop.name;
#else
    return "";
#endif
}

// The GPU model the planner and MFU assume: -gpu, else the GPU present, else an H100 (said so).
static const char* gpu_model_name(const Flags* f) {
    if (strcmp(f->gpu, "auto")) return f->gpu;
    return gpu_present_name()[0] ? gpu_present_name() : "H100 (assumed: no GPU here and no -gpu)";
}

// Links by name (-link-intra, -link-inter), Gbit/s per rank and direction: NVLink's per-GPU
// bandwidth (NVLink 3: A100 300 GB/s a direction, 4: H100/H200 450, 5: B200 900), a PCIe x16 slot
// (4.0: 32 GB/s, 5.0: 64), one InfiniBand port per GPU (HDR 200 Gbit/s, NDR 400, XDR 800) or an
// Ethernet port (give a NIC shared by a node's GPUs as its rate divided by them).
static const struct { const char* name; double gbps; const char* what; } g_link_presets[] = {
    {"nvlink3", 2400, "NVLink 3 (A100), 300 GB/s a direction"}, {"nvlink4", 3600, "NVLink 4 (H100, H200), 450 GB/s a direction"},
    {"nvlink5", 7200, "NVLink 5 (B200), 900 GB/s a direction"}, {"pcie4", 256, "PCIe 4.0 x16, 32 GB/s"}, {"pcie5", 512, "PCIe 5.0 x16, 64 GB/s"},
    {"xdr", 800, "InfiniBand XDR, 800 Gbit/s a port"}, {"ndr", 400, "InfiniBand NDR, 400 Gbit/s a port"}, {"hdr", 200, "InfiniBand HDR, 200 Gbit/s a port"},
    {"400gbe", 400, "400 Gbit Ethernet"}, {"200gbe", 200, "200 Gbit Ethernet"}, {"100gbe", 100, "100 Gbit Ethernet"}, {"25gbe", 25, "25 Gbit Ethernet"},
};
// A link's rate from its name or a rate ("400Gbit", "400Gbps", "400Gb", "50GB/s", "1.6Tbit", a bare number:
// Gbit/s); what: its description. Returns 0, or -1 when the text is neither.
static int plan_parse_link(const char* text, double* gbps, char* what, size_t cap) {
    for (size_t i = 0; i < sizeof(g_link_presets) / sizeof(g_link_presets[0]); i++)
        if (!strcasecmp(text, g_link_presets[i].name)) {
            *gbps = g_link_presets[i].gbps;
            snprintf(what, cap, "%s", g_link_presets[i].what);
            return 0;
        }
    char* end = NULL;
    double v = strtod(text, &end);
    if (!end || end == text || !(v > 0) || !isfinite(v)) return -1;
    static const struct { const char* unit; double gbit; } units[] = {
        {"", 1}, {"gbit", 1}, {"gbps", 1}, {"gb", 1}, {"gbit/s", 1}, {"gb/s", 8}, {"gbyte/s", 8}, {"tbit", 1000}, {"tbps", 1000}, {"tbit/s", 1000}, {"mbit", 1e-3}, {"mbps", 1e-3}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        // "GB/s" is bytes, "Gb", "Gbit" bits: the case of the B decides
        if (strcasecmp(end, units[i].unit)) continue;
        double k = units[i].gbit;
        if (!strcmp(units[i].unit, "gb") || !strcmp(units[i].unit, "gb/s")) k = strchr(end, 'B') ? 8 : 1;
        *gbps = v * k;
        return snprintf(what, cap, "%s", text) < (int)cap ? 0 : -1;   // longer than any rate written: refused
    }
    return -1;
}
// The default links, Gbit/s per rank and direction: on cuda NVLink 4 inside a node, an InfiniBand
// NDR port per GPU between nodes; on cpu, shared memory.
static double plan_link_gbps_default(int inter) { return g_device == DEV_CUDA ? (inter ? 400.0 : 3600.0) : 80.0; }

// Does any communicator of kind k of layout gr span nodes of gpn ranks? Rank w's: CG_GRAD and CG_PARAM
// consecutive ranks (its group, or the world), CG_REP w % N, w % N + N, ... (one member of each
// group); a set of increasing ranks spans nodes when its first and last do.
static int plan_spans_nodes(Groups gr, int k, int gpn) {
    for (int w = 0; w < gr.W; w++) {
        Shards sh = shards_of(gr, w);
        int n = k == CG_GRAD ? sh.R : k == CG_PARAM ? sh.pR : sh.G, N = gr.W / sh.G;
        int first = k == CG_REP ? w % N : w - w % n, last = k == CG_REP ? first + (sh.G - 1) * N : first + n - 1;
        if (n > 1 && first / gpn != last / gpn) return 1;
    }
    return 0;
}
// A row's communication time: each communicator's bytes at the link it crosses (a ring runs at its
// slowest link), no overlap with the compute assumed.
static void plan_link_times(PlanRow* p, const PlanEnv* e) {
    p->comm_intra_s = p->comm_inter_s = p->sent_inter = 0.0;
    for (int k = 0; k < CG_COUNT; k++) {
        if (plan_spans_nodes(p->groups, k, e->gpn)) { p->comm_inter_s += p->sent[k] / e->inter; p->sent_inter += p->sent[k]; }
        else p->comm_intra_s += p->sent[k] / e->link;
    }
    p->comm_s = p->comm_intra_s + p->comm_inter_s;
}

// The host memory the kernel says is available to new work (MemAvailable), bytes; 0 if unknown.
static double mem_available_bytes(void) {
    FILE* m = fopen("/proc/meminfo", "r");
    long long kb = 0;
    char line[256];
    while (m && fgets(line, sizeof(line), m))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    if (m) fclose(m);
    return (double)kb * 1024.0;
}

// What the planner assumes of GPU i of g_gpu_peaks until our kernels are measured on it: half its
// BF16 dense peak and half its memory bandwidth (plan_env; the start-up's time line).
static void plan_gpu_rates(int i, double* flops, double* membw) {
    *flops = 0.5 * g_gpu_peaks[i].tflops * 1e12;
    *membw = 0.5 * g_gpu_peaks[i].tbps * 1e12;
}

// Seconds per trained token of a mode's compute: its FLOPs at the FLOP rate, and the elementwise
// recompute's bytes at the memory bandwidth where one is known (a GPU's).
static double plan_compute_s(const PlanEnv* e, const GPTConfig* c, int T, int recompute) {
    double s = plan_flops_per_token(c, T, recompute) / e->flops;
    if (e->membw > 0) s += plan_recompute_bytes_per_token(c, recompute) / e->membw;
    return s;
}

// Where the planner's memory, compute rate and bandwidth come from (each printed with its source).
// R is the world being planned (-world, or this run's).
static void plan_env(const Flags* f, const Launch* L, int R, PlanEnv* e) {
    memset(e, 0, sizeof(*e));
    const char* env = getenv("ZT_DEVICE_MEM"); // this process's memory, overriding detection (testing)
    if (f->gpu_mem[0]) {
        e->mem = parse_size(f->gpu_mem);
        if (e->mem <= 0) die_user("flag -gpu-mem: '%s' is not a memory size (examples: 80GiB, 40GB, 512MiB, 1073741824)", f->gpu_mem);
        snprintf(e->mem_src, sizeof(e->mem_src), "-gpu-mem");
    } else if (env && *env) {
        e->mem = parse_size(env);
        if (e->mem <= 0) die_user("ZT_DEVICE_MEM='%s' is not a memory size (examples: 80GiB, 512MiB)", env);
        snprintf(e->mem_src, sizeof(e->mem_src), "ZT_DEVICE_MEM");
    } else if (g_device == DEV_CUDA) {
        if (!gpu_present_name()[0])
            die_user("-device cuda without a GPU: the memory per GPU is unknown. HINT: give it, e.g. -plan -device cuda -gpu-mem 80GiB -gpu h100 -world 8");
#ifdef __CUDACC__
        size_t free_b = 0, total_b = 0;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        e->mem = (double)free_b;
#endif
        snprintf(e->mem_src, sizeof(e->mem_src), "free GPU memory");
    } else {
        int local = L->local_world > 0 ? L->local_world : 1;
        e->mem = mem_available_bytes() / local;
        snprintf(e->mem_src, sizeof(e->mem_src), "available host memory / %d rank%s on this node", local, local > 1 ? "s" : "");
    }
    e->headroom = plan_headroom(e->mem);
    if (f->tflops > 0) {
        e->flops = f->tflops * 1e12;
        snprintf(e->flops_src, sizeof(e->flops_src), "-tflops");
    } else if (g_device == DEV_CUDA) { // until our kernels are measured on each GPU: half its BF16 dense peak
        const char* name = gpu_model_name(f);
        int i = gpu_peak_index(name);
        if (i < 0) die_user("-gpu %s: no BF16 peak known for this GPU. HINT: give the rate with -tflops, or -gpu h100|h200|a100|...", name);
        plan_gpu_rates(i, &e->flops, &e->membw);
        snprintf(e->flops_src, sizeof(e->flops_src), "assumed: 50%% of the %s's %.0f TFLOP/s BF16 dense peak (GPU: %s)", g_gpu_peaks[i].part,
                 g_gpu_peaks[i].tflops, name);
    } else {
        double lo, hi;
        e->flops = measure_cpu_flops(&lo, &hi);
        snprintf(e->flops_src, sizeof(e->flops_src), "measured: median of %d matmuls by CPU time, %.3g..%.3g, %d threads%s; -tflops fixes it",
                 PLAN_FLOPS_REPS, lo / 1e12, hi / 1e12, num_threads(), g_use_blas ? ", -blas 1" : "");
    }
    // the links: -link-gbps (both), else -link-intra and -link-inter (a rate or a name), else the device's default
    for (int k = 0; k < 2; k++) {
        const char* text = k ? f->link_inter : f->link_intra;
        char* src = k ? e->inter_src : e->link_src;
        double gbps = 0.0;
        char what[64];
        if (f->link_gbps > 0) { gbps = f->link_gbps; snprintf(src, 96, "-link-gbps"); }
        else if (strcmp(text, "auto")) {
            if (plan_parse_link(text, &gbps, what, sizeof(what)))
                die_user("flag %s: '%s' is not a rate (400Gbit, 50GB/s, 1.6Tbit) nor a link's name (nvlink3, nvlink4, nvlink5, pcie4, pcie5, "
                         "xdr, ndr, hdr, 400gbe, 200gbe, 100gbe, 25gbe)", k ? "-link-inter" : "-link-intra", text);
            snprintf(src, 96, "%s %s", k ? "-link-inter" : "-link-intra", what);
        } else {
            gbps = plan_link_gbps_default(k);
            snprintf(src, 96, "%s", g_device == DEV_CPU ? "default: shared memory" : k ? "default: an InfiniBand NDR port per GPU" : "default: NVLink 4");
        }
        (k ? e->inter : e->link) = gbps * 1e9 / 8.0;
    }
    e->gpn = plan_ranks_per_node(f, L, R, e->gpn_src, sizeof(e->gpn_src));
    double lo, hi;
    const char* fixed = getenv("ZT_PLAN_ADAMW_NS"); // a plan that reads the same on every machine (docs' samples: dev/doc_samples.py)
    if (fixed && atof(fixed) > 0) {
        e->adamw = 1e9 / atof(fixed);
        snprintf(e->adamw_src, sizeof(e->adamw_src), "ZT_PLAN_ADAMW_NS, not measured");
    } else {
        e->adamw = adamw_host_rate(&lo, &hi); // [offload] this host's AdamW, whatever the device
        snprintf(e->adamw_src, sizeof(e->adamw_src), "measured: %s path, median of %d passes by CPU time, %.3g..%.3g ns, %d threads", simd_names[simd_level()],
                 ADAMW_RATE_REPS, 1e9 / hi, 1e9 / lo, num_threads());
    }
    e->pcie = (f->pcie_gbps > 0 ? f->pcie_gbps : 200.0) * 1e9 / 8.0;
    e->pcie_src = f->pcie_gbps > 0 ? "-pcie-gbps" : "default: PCIe 4.0 x16-class";
    e->disk = (f->disk_gbps > 0 ? f->disk_gbps : 16.0) * 1e9 / 8.0;
    e->disk_src = f->disk_gbps > 0 ? "-disk-gbps" : "default: one NVMe SSD-class";
    e->offload_buffer = parse_size(f->offload_buffer);
    e->nvme_ok = f->offload_dir[0] != 0;
    // the checkpoints on disk at once: a run of -x steps writes one every -n steps and one at the
    // end; -nk N keeps N and writes the next before it removes the oldest, so N + 1 at the peak
    // (checkpoint.h, ckpt_save); -save-model 1 puts a model file in each, last only in the final one
    if (f->ckpt_every > 0 && f->out_dir[0]) {
        int written = f->max_steps > 0 ? f->max_steps / f->ckpt_every + (f->max_steps % f->ckpt_every != 0) : f->max_steps == 0 ? 0 : -1;
        int peak = f->ckpt_keep + 1;
        e->ckpt_kept = f->ckpt_keep > 0 ? (written >= 0 && written < peak ? written : peak) : written;
        e->ckpt_models = e->ckpt_kept <= 0 ? 0 : !strcmp(f->save_model, "1") ? e->ckpt_kept : !strcmp(f->save_model, "last") ? 1 : 0;
    }
    const char* hm = getenv("ZT_HOST_MEM"); // the node's host memory, overriding detection (testing)
    if (f->host_mem[0]) { // the planned node's, which need not be this machine
        e->host_mem = parse_size(f->host_mem);
        if (e->host_mem <= 0) die_user("flag -host-mem: '%s' is not a memory size (examples: 2TiB, 512GiB, 64MiB)", f->host_mem);
        snprintf(e->host_src, sizeof(e->host_src), "-host-mem");
    } else if (hm && *hm) {
        e->host_mem = parse_size(hm);
        if (e->host_mem <= 0) die_user("ZT_HOST_MEM='%s' is not a memory size (examples: 512GiB, 64MiB)", hm);
        snprintf(e->host_src, sizeof(e->host_src), "ZT_HOST_MEM");
    } else {
        e->host_mem = mem_available_bytes();
        snprintf(e->host_src, sizeof(e->host_src), "available host memory on this machine; -host-mem sets the planned node's");
    }
}

// An offload row's host bytes per node and its fit: on the CPU device the host bytes count against the
// same memory; on a GPU the device must leave the headroom and the node's host memory its own.
static void plan_offload_fit(PlanRow* p, const PlanEnv* e, int local_ranks) {
    p->host_per_node = p->host_bytes * (size_t)local_ranks;
    if (g_device == DEV_CPU) {
        p->free = e->mem - (double)p->total - (double)p->host_bytes;
        p->fits = p->free >= e->headroom;
    } else {
        p->free = e->mem - (double)p->total;
        p->fits = p->free >= e->headroom && e->host_mem - (double)p->host_per_node >= plan_headroom(e->host_mem);
    }
}

// Every stage x recompute row (and the offload rows), with fit and time: at most PLAN_MAX_ROWS.
#define PLAN_MAX_ROWS 76 // 4 stages x 4 recompute modes without offload, [LoRA] + 4 (ZeRO-3, base replicated), 3 x 4 x 2 with,
                         // 3 x 4 with parameter offload (ZeRO-3: the PLAN_PARAM_ROWS pairs x recompute), [groups] 3 x 4 HSDP + 4 hpZ
// [-offload-params] the rows' (parameters, optimizer state) places, and their -r column's letter
static const struct { Offload params, state; char mark; } PLAN_PARAM_ROWS[3] = {
    {OFFLOAD_CPU, OFFLOAD_CPU, 'O'}, {OFFLOAD_CPU, OFFLOAD_NVME, 'M'}, {OFFLOAD_NVME, OFFLOAD_NVME, 'N'}};
// A row on the device alone (no offload): its compute and communication (no overlap assumed) and fit.
static void plan_row_resident(PlanRow* p, const PlanEnv* e, const GPTConfig* c, int B, int T, int GA, size_t ckpt) {
    p->compute_s = plan_compute_s(e, c, T, p->recompute) * B * T * GA;
    plan_link_times(p, e);
    p->step_s = p->compute_s + p->comm_s;
    p->ckpt_per_node = p->disk_per_node = ckpt;
    p->free = e->mem - (double)p->total;
    p->fits = p->free >= e->headroom;
}

// layouts: with gr flat and the world over several nodes of e->gpn ranks, the hybrid layouts' rows too
// (-shard-group and -hpz with N = the ranks per node, without offload: marks H, Z).
static int plan_rows(const GPTConfig* c, int B, int T, Groups gr, int GA, int local_ranks, const PlanEnv* e, PlanRow* rows, int layouts) {
    int n = 0;
    // the checkpoints kept, on the node of rank 0 (the model files and ranks 0 .. local_ranks-1's
    // state files, the largest share: the same for every row, the files are stage-independent)
    size_t ckpt = 0;
    if (e->ckpt_kept > 0) {
        ModelDesc d;
        model_describe(&d, c);
        BlockLayout lay;
        Shards sh = shards_of(gr, 0);
        model_layout_shards(&d, &lay, &sh);
        int64_t states = 0; // ([HSDP] group 0's ranks write the state files: one per shard)
        for (int q = 0; q < local_ranks && q < lay.R; q++) states += ckpt_state_file_bytes(&lay, q);
        ckpt = (size_t)e->ckpt_kept * (size_t)states + (size_t)e->ckpt_models * (size_t)ckpt_model_file_bytes(&lay);
        layout_free(&lay);
    }
    // z = 4: [LoRA] ZeRO-3 with the frozen base replicated (-lora-base replicated), after ZeRO-3's rows
    // [hpZ] ZeRO-3 only, and no replicated base (check_group_flags refuses both)
    for (int z = gr.hpz ? 3 : 0; z <= 3 + (c->lora_r > 0 && !gr.hpz); z++) {
        GPTConfig cz = *c;
        cz.lora_rep = z == 4;
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            plan_config(&cz, B, T, gr, GA, z == 4 ? 3 : z, r, OFFLOAD_NONE, 0, OFFLOAD_NONE, p);
            plan_row_resident(p, e, c, B, T, GA, ckpt);
        }
    }
    // [offload] master, m, v and the pinned staging on the host (ZeRO-1..3; -z 0 refuses offload):
    // the device holds the rest; the step adds the copies and the host AdamW (no overlap assumed),
    // but with cpu the gradient copies of all blocks but the last reduced run during the backward
    // (2/3 of the compute): only what exceeds it counts.
    // On the CPU device the host is the device: the host bytes count against the same memory.
    // [nvme] the same with the state in a file per rank: the host holds -offload-buffer; the step also
    // reads and writes the state once at the node's disk bandwidth, shared by its ranks.
    GPTConfig cs = *c;
    cs.lora_rep = 0; // [LoRA] the offload rows shard the base at ZeRO-3 (its adapters' state is what moves)
    for (int k = OFFLOAD_CPU; k <= OFFLOAD_NVME; k++)
    for (int z = gr.hpz ? 3 : 1; z <= 3; z++)
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            plan_config(&cs, B, T, gr, GA, z, r, (Offload)k, e->offload_buffer, OFFLOAD_NONE, p);
            double state = p->state_bytes; // master, m, v of the shard: 12 bytes an element
            p->compute_s = plan_compute_s(e, c, T, r) * B * T * GA;
            plan_link_times(p, e);
            double hidden = p->pcie_d2h_hidden / e->pcie; // [cpu] the copies under the backward
            p->pcie_s = (p->pcie_bytes - p->pcie_d2h_hidden) / e->pcie + fmax(0.0, hidden - 2.0 / 3.0 * p->compute_s);
            p->host_s = state / 12.0 / e->adamw; // the shard's elements (12 bytes of state each) at the measured rate
            double files = k == OFFLOAD_NVME ? state * local_ranks : 0.0; // [nvme] the offload files
            p->disk_s = 2.0 * files / e->disk;
            p->ckpt_per_node = ckpt;
            p->disk_per_node = (size_t)files + ckpt;
            p->step_s = p->compute_s + p->comm_s + p->pcie_s + p->host_s + p->disk_s;
            plan_offload_fit(p, e, local_ranks);
        }
    // [-offload-params] ZeRO-3 with the parameter shards (and with them the gradient shard) off the device
    // too: the device holds the gather buffers, activations and workspace. Each gather copies its shard
    // up ([nvme] read from the file first, at the node's disk bandwidth shared by its ranks): that
    // prefetch hides behind the compute of the layer before; what exceeds the step's compute is
    // exposed (a column). The gradient goes down every micro-step during the backward (as the cpu
    // rows' copies, only what exceeds 2/3 of the compute counts), the host AdamW writes the host shard
    // ([nvme] the parameter file: X bytes an element, and the state file as the n rows).
    for (int k = 0; k < 3 * !gr.hpz; k++) // ([hpZ] refused with -offload-params: check_group_flags)
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            Offload pk = PLAN_PARAM_ROWS[k].params, sk = PLAN_PARAM_ROWS[k].state;
            plan_config(&cs, B, T, gr, GA, 3, r, sk, e->offload_buffer, pk, p);
            double state = p->state_bytes, X = (double)sizeof(floatX);
            double up = (double)p->coll_bytes[COLL_ALL_GATHER] / shards_of(gr, 0).pR; // the shards copied up per step (per rank)
            double pfile = pk == OFFLOAD_NVME ? p->param_shard_bytes * local_ranks : 0.0; // [nvme] the parameter files
            double opt = state / 12.0; // (the optimizer range's elements)
            p->compute_s = plan_compute_s(e, c, T, r) * B * T * GA;
            plan_link_times(p, e);
            p->prefetch_s = fmax(up / e->pcie, pk == OFFLOAD_NVME ? up * local_ranks / e->disk : 0.0);
            p->exposed_s = fmax(0.0, p->prefetch_s - p->compute_s);
            double hidden = p->pcie_d2h_hidden / e->pcie; // the gradient's copies under the backward
            p->pcie_s = p->exposed_s + (p->pcie_bytes - up - p->pcie_d2h_hidden) / e->pcie + fmax(0.0, hidden - 2.0 / 3.0 * p->compute_s);
            p->host_s = state / 12.0 / e->adamw;
            // [nvme] the state files hold the gradient too (offload.h: gfile): written every micro-step (read back
            // and added after the first), read for the norm and with the update
            double files = sk == OFFLOAD_NVME ? (state + 4.0 * opt) * local_ranks : 0.0;
            double gdisk = sk == OFFLOAD_NVME ? 4.0 * opt * (2.0 * GA - 1.0 + 2.0) * local_ranks : 0.0;
            p->disk_s = (2.0 * state * (sk == OFFLOAD_NVME ? local_ranks : 0) + gdisk + (pk == OFFLOAD_NVME ? X * opt * local_ranks : 0.0)) / e->disk; // (the reads up: in the prefetch)
            p->ckpt_per_node = ckpt;
            p->disk_per_node = (size_t)(files + pfile) + ckpt;
            p->step_s = p->compute_s + p->comm_s + p->pcie_s + p->host_s + p->disk_s;
            plan_offload_fit(p, e, local_ranks);
        }
    // [groups] the hybrid layouts with a group per node: HSDP at ZeRO-1/2/3, hpZ at ZeRO-3 (mark H, Z)
    if (layouts && gr.N == gr.W && e->gpn > 1 && gr.W > e->gpn && gr.W % e->gpn == 0)
        for (int hpz = 0; hpz <= 1; hpz++)
            for (int z = hpz ? 3 : 1; z <= 3; z++)
                for (int r = 0; r <= 3; r++) {
                    Groups g = {gr.W, e->gpn, hpz};
                    PlanRow* p = &rows[n++];
                    plan_config(&cs, B, T, g, GA, z, r, OFFLOAD_NONE, 0, OFFLOAD_NONE, p);
                    plan_row_resident(p, e, c, B, T, GA, ckpt);
                }
    return n;
}

// The recommendation: among the rows that fit with the headroom, the lowest estimated step time;
// ties (within 1%) go to the lower stage, then to less recompute, the order users are taught.
// With R > 1 ZeRO-0 is never chosen: ZeRO-1 sends less (BF16 gather instead of FP32) in less memory.
// stage / recompute >= 0 fix that choice; base >= 0 ([LoRA] -lora-base: 0 sharded, 1 replicated) too.
// kinds: a mask of the offload kinds allowed (1 << OFFLOAD_*),
// tried in order: none, then cpu only when no row without offload fits, then nvme only when no cpu
// row fits either. Returns the row index or -1.
// [-offload-params] kinds' bit PLAN_PARAMS: a last pass over the parameter-offload rows (those whose
// state kind is in kinds), only when no other row fits; with params > 0 (-offload-params given) those
// rows only, of that kind.
#define PLAN_PARAMS (1 << 3)
static int plan_choose_params(const PlanRow* rows, int n, int R, int stage, int recompute, int base, int kinds, int params) {
    int best = -1;
    for (int pass = OFFLOAD_NONE; pass <= OFFLOAD_NVME + 1 && best < 0; pass++) {
        if (pass <= OFFLOAD_NVME ? params > 0 || !(kinds & (1 << pass)) : !(kinds & PLAN_PARAMS)) continue;
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[i];
            if (pass <= OFFLOAD_NVME ? p->offload_params || p->offload != pass : !p->offload_params) continue;
            if (pass > OFFLOAD_NVME && ((params > 0 && p->offload_params != params) || !(kinds & (1 << p->offload)))) continue;
            if (!p->fits || (R > 1 && p->stage == 0 && stage != 0)) continue;
            if ((stage >= 0 && p->stage != stage) || (recompute >= 0 && p->recompute != recompute)) continue;
            if (base >= 0 && p->rep_base != base) continue; // [LoRA]
            if (best < 0 || p->step_s < rows[best].step_s * 0.99) best = i; // rows come in (stage, recompute) order
        }
    }
    return best;
}
static int plan_choose(const PlanRow* rows, int n, int R, int stage, int recompute, int base, int kinds) {
    return plan_choose_params(rows, n, R, stage, recompute, base, kinds, 0);
}
// [LoRA] -lora-base as plan_choose's base: -1 auto (either), 0 sharded, 1 replicated.
static int plan_base_arg(const Flags* f) { return !strcmp(f->lora_base, "replicated") ? 1 : !strcmp(f->lora_base, "sharded") ? 0 : -1; }
// [LoRA] -lora-base auto resolved (rep 1: replicated, 0: sharded) and shown in the settings table
// as "replicated (WHY; ZeRO-0/1/2 hold the whole base)", the note below ZeRO-3 only. A given
// -lora-base, or no -lora: left alone. (-z auto, -tune and the trainer's default all come here.)
static void plan_lora_base_resolve(Flags* f, int rep, int stage, const char* why) {
    if (!f->lora || strcmp(f->lora_base, "auto")) return;
    const char* base = rep ? "replicated" : "sharded";
    snprintf(f->lora_base, sizeof(f->lora_base), "%s", base);
    FLAG_SHOW(f, lora_base, "%s (%s%s)", base, why, stage < 3 ? "; ZeRO-0/1/2 hold the whole base" : "");
}
// -offload as plan_choose's mask: auto: none, cpu, and nvme when -offload-dir says where; else that kind.
// [-offload-params] PLAN_PARAMS too unless -offload-params none was given: the parameter-offload rows,
// a last resort unless -offload-params names a kind (plan_params_arg).
static int plan_offload_arg(const Flags* f) {
    int params = f->offload_params_set && !strcmp(f->offload_params, "none") ? 0 : PLAN_PARAMS;
    if (strcmp(f->offload, "auto")) return 1 << offload_parse(f->offload) | params;
    return 1 << OFFLOAD_NONE | 1 << OFFLOAD_CPU | (f->offload_dir[0] ? 1 << OFFLOAD_NVME : 0) | params;
}
// [groups] plan_rows' layouts: the hybrid layouts' rows unless -shard-group or -hpz was given (0 too: flat).
static int plan_layouts_arg(const Flags* f) { return !f->shard_group_set && !f->hpz_set; }
static int plan_params_arg(const Flags* f) { int k = offload_parse(f->offload_params); return k > 0 ? k : 0; }
// A row's -r column: the mode and a letter for where the state (o, n) or the parameters (PLAN_PARAM_ROWS) live.
// [groups] H, Z: a hybrid layout's row without offload (with -shard-group or -hpz given, every row has it).
static char plan_row_mark(const PlanRow* p) {
    for (int k = 0; k < 3 && p->offload_params; k++)
        if (PLAN_PARAM_ROWS[k].params == p->offload_params && PLAN_PARAM_ROWS[k].state == p->offload) return PLAN_PARAM_ROWS[k].mark;
    char m = p->offload == OFFLOAD_NVME ? 'n' : p->offload ? 'o' : p->stage == 3 && p->rep_base ? 'b' : ' ';
    return m == ' ' && p->groups.N < p->groups.W ? (p->groups.hpz ? 'Z' : 'H') : m;
}

// A byte count in its own unit, three significant digits: "812 KiB", "20.8 GiB", "-1.50 GiB".
// Each cell of -plan picks its unit, so a 40 KiB row and an 80 GiB one are both readable.
typedef struct { char s[24]; } Bytes;
static Bytes fmt_bytes(double b) {
    static const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    Bytes r;
    char* buf = r.s;
    size_t cap = sizeof(r.s);
    double v = fabs(b);
    int u = 0;
    while (v >= 1023.5 && u < 5) { v /= 1024.0; u++; } // 1023.5 MiB prints as 1.00 GiB, never 1024 MiB
    const char* sign = b < 0 ? "-" : "";
    if (u == 0) snprintf(buf, cap, "%s%.0f B", sign, v);
    else snprintf(buf, cap, v >= 99.95 ? "%s%.0f %s" : v >= 9.995 ? "%s%.1f %s" : "%s%.2f %s", sign, v, unit[u]);
    return r;
}

// Why nothing fits, and what would: more ranks, a smaller micro-batch, recompute, more memory.
static void plan_explain_misfit(const GPTConfig* c, int B, int T, int R, int GA, const PlanEnv* e, char* out, size_t cap) {
    PlanRow p;
    plan_config(c, B, T, groups_flat(R), GA, 3, 3, OFFLOAD_NONE, 0, OFFLOAD_NONE, &p);
    size_t fixed = p.bytes[TAG_ACTS] + p.bytes[TAG_LOGITS] + p.bytes[TAG_WORK] + p.bytes[TAG_PARAM_BUF] + p.bytes[TAG_GRAD_BUF];
    double usable = e->mem - e->headroom;
    int n = snprintf(out, cap, "nothing fits in %s per rank (%s) less the headroom of %s (" PLAN_HEADROOM_TEXT "): the smallest, "
                     "ZeRO-3 with -r 3, needs %s at R = %d", fmt_bytes(e->mem).s, e->mem_src, fmt_bytes(e->headroom).s,
                     fmt_bytes((double)p.total).s, R);
    int Rfit = 0;
    for (int r2 = R + 1; r2 <= 65536 && !Rfit; r2 *= 2) {
        PlanRow q;
        plan_config(c, B, T, groups_flat(r2), GA, 3, 3, OFFLOAD_NONE, 0, OFFLOAD_NONE, &q);
        if (q.total <= usable) Rfit = r2;
    }
    if (Rfit) n += snprintf(out + n, cap - n, "; with %d ranks it would fit", Rfit);
    // what is left at this R with everything offloadable off the device (the -r 3 O row)
    PlanRow q;
    plan_config(c, B, T, groups_flat(R), GA, 3, 3, OFFLOAD_CPU, 0, OFFLOAD_CPU, &q);
    n += snprintf(out + n, cap - n, "; with the parameter, gradient and optimizer shards in host memory (-offload-params cpu -offload cpu) "
                  "the device still needs %s (the gather buffers, activations, logits and workspace)%s", fmt_bytes((double)q.total).s,
                  (double)q.total <= usable ? ", which fits: the host memory per node does not hold the rest (-host-mem)" : "");
    if (fixed > usable * 0.5)
        n += snprintf(out + n, cap - n, "; activations, logits and buffers alone need %s: use a smaller micro-batch -b (and -d to keep the batch)",
                      fmt_bytes((double)fixed).s);
    snprintf(out + n, cap - n, ". HINT: more ranks, a smaller -b, -r 3, or more memory per rank");
}

// The world -plan and -z auto plan for, its accumulation and ranks per node.
static int plan_GA(const Flags* f, int R) { return f->total_batch == -1 ? 1 : (int)(f->total_batch / ((int64_t)f->B * f->T * R)); }

// -plan: the table, the recommendation, and <out_dir>/plan.jsonl. Prints on rank 0. Every byte
// cell carries its own unit; "free" is the memory per rank minus the row's total, and a row fits
// only when that is at least the headroom (plan_headroom).
static void run_plan(const Flags* f, const GPTConfig* c, int R, const Launch* L) {
    int GA = plan_GA(f, R);
    int local = L->local_world > 0 ? L->local_world : 1;
    if (f->world > 0) local = R < 8 ? R : 8; // planning another world: assume up to 8 ranks a node
    PlanEnv e;
    plan_env(f, L, R, &e);
    PlanRow rows[PLAN_MAX_ROWS];
    int n = plan_rows(c, f->B, f->T, flags_groups(f, L, R), GA, local, &e, rows, plan_layouts_arg(f));
    ModelDesc d;
    model_describe(&d, c);
    printf0("plan: L %d C %d NH %d V %d (padded %d): Psi = %lld parameters; B %d x T %d x R %d x GA %d; %s%s %s\n", c->L, c->C, c->NH,
            c->V, c->Vp, (long long)d.num_params, f->B, f->T, R, GA, g_device == DEV_CUDA ? "cuda, GPU " : "cpu",
            g_device == DEV_CUDA ? gpu_model_name(f) : "", PRECISION_NAME);
    char fam[512];
    model_family_text(c, fam, sizeof(fam));
    if (fam[0]) printf0("  %s\n", fam);
    printf0("  memory per rank %s (%s); headroom %s, " PLAN_HEADROOM_TEXT ": a row fits only if it leaves that free\n",
            fmt_bytes(e.mem).s, e.mem_src, fmt_bytes(e.headroom).s);
    printf0("  compute %.3g TFLOP/s per rank (%s); links per rank and direction: %.0f Gbit/s inside a node (%s), %.0f Gbit/s between "
            "nodes (%s); %d rank%s per node (%s)\n", e.flops / 1e12, e.flops_src, e.link * 8 / 1e9, e.link_src, e.inter * 8 / 1e9, e.inter_src,
            e.gpn, e.gpn > 1 ? "s" : "", e.gpn_src);
    printf0("  per token: %.4g GFLOP (%s); -r 3 adds %.4g GFLOP (the layers' forward again); -r 1 and -r 2 recompute elementwise ops: "
            "%s and %s more memory traffic, %s\n", plan_flops_per_token(c, f->T, 0) / 1e9,
            c->lora_r ? "LoRA: the frozen base's forward and input gradients, no weight gradients; the adapters' all three" : "6 N + 12 L ATT T",
            (plan_flops_per_token(c, f->T, 3) - plan_flops_per_token(c, f->T, 0)) / 1e9, fmt_bytes(plan_recompute_bytes_per_token(c, 1)).s,
            fmt_bytes(plan_recompute_bytes_per_token(c, 2)).s, e.membw > 0 ? "priced at half the GPU's memory bandwidth" : "not priced (no memory bandwidth known on the CPU device)");
    if (g_device == DEV_CPU)
        printf0("  offload rows (-r N o): master, m, v on the host, which on the CPU device is the same memory (a code path, not a saving); "
                "host<->device copies at %.0f Gbit/s (%s), host AdamW %.3g ns per element per rank (%s)\n",
                e.pcie * 8 / 1e9, e.pcie_src, 1e9 / e.adamw, e.adamw_src);
    else
        printf0("  offload rows (-r N o): master, m, v on the host, %s per node (%s) less the headroom; host<->device %.0f Gbit/s per rank (%s), "
                "host AdamW %.3g ns per element per rank (%s)\n",
                fmt_bytes(e.host_mem).s, e.host_src, e.pcie * 8 / 1e9, e.pcie_src, 1e9 / e.adamw, e.adamw_src);
    printf0("per rank, by tag (activations: one micro-batch; est s/step: compute + communication, no overlap assumed):\n");
    int w[TAG_COUNT];
    printf0("| z | -r  |");
    for (int t = 0; t < TAG_COUNT; t++) {
        w[t] = (int)strlen(mem_tag_name[t]) > 9 ? (int)strlen(mem_tag_name[t]) : 9;
        printf0(" %*s |", w[t], mem_tag_name[t]);
    }
    printf0("     total |      free | fits  | comm/step | est s/step | host/node | disk/node |   exposed |\n");
    for (int i = 0; i < n; i++) {
        const PlanRow* p = &rows[i];
        printf0("| %d | %d %c |", p->stage, p->recompute, plan_row_mark(p));
        for (int t = 0; t < TAG_COUNT; t++) printf0(" %*s |", w[t], p->bytes[t] ? fmt_bytes((double)p->bytes[t]).s : "-");
        int64_t cb = 0;
        for (int k = 0; k < COLL_KINDS; k++) cb += p->coll_bytes[k];
        char exposed[32] = "-";
        if (p->offload_params) snprintf(exposed, sizeof(exposed), "%.3g s", p->exposed_s);
        printf0(" %9s | %9s | %-5s | %9s | %10.3g | %9s | %9s | %9s |\n", fmt_bytes((double)p->total).s, fmt_bytes(p->free).s,
                p->fits ? "yes" : p->free >= 0 ? "tight" : "no", fmt_bytes((double)cb).s, p->step_s,
                p->offload ? fmt_bytes((double)p->host_per_node).s : "-", p->disk_per_node ? fmt_bytes((double)p->disk_per_node).s : "-", exposed);
    }
    printf0("fits: yes = leaves at least the headroom free; tight = fits in the memory but leaves less (never chosen); no = does not fit\n");
    printf0("-r N o: -offload cpu (master, m, v and pinned staging on the host: host/node; total is on the device%s); est s/step adds the "
            "copies (the gradient's run during the backward: only what exceeds it counts) and the host AdamW; chosen only when no row without offload fits\n", g_device == DEV_CPU ? ", free counts the host bytes too" : "");
    if (c->lora_r)
        printf0("-r N b: [LoRA] ZeRO-3 with -lora-base replicated: every rank holds the whole frozen base (params; never gathered), only the "
                "adapters are sharded and gathered; the plain ZeRO-3 rows shard the base and gather it layer by layer (-lora-base sharded); "
                "ZeRO-1/2 hold the whole base too\n");
    printf0("-r N n: -offload nvme (the state in a file per rank: disk/node, with the checkpoints kept; the host holds -offload-buffer %s per rank "
            "and the staging); est s/step also reads and writes the state at %.0f Gbit/s per node (%s); chosen only when no cpu row fits, "
            "and with -z auto only when -offload-dir is given\n", fmt_bytes(e.offload_buffer).s, e.disk * 8 / 1e9, e.disk_src);
    if (n > 0 && rows[0].groups.N < R)
        printf0("every row: %s %d given (hybrid sharding: docs/hybrid.md)\n", rows[0].groups.hpz ? "-hpz" : "-shard-group", rows[0].groups.N);
    else if (n > 0 && rows[n - 1].groups.N < R)
        printf0("-r N H, Z: hybrid sharding with a group per node (%d ranks): H -shard-group %d (ZeRO-1/2/3 inside each node, each "
                "gradient shard all-reduced between the nodes), Z -hpz %d (ZeRO-3's gathers inside each node; flat ZeRO-3's bits); est "
                "s/step prices each communicator at the link it crosses\n", rows[n - 1].groups.N, rows[n - 1].groups.N, rows[n - 1].groups.N);
    printf0("-r N O, M, N: ZeRO-3 with -offload-params (the parameter shards off the device, and with them the FP32 gradient shard): O "
            "-offload-params cpu -offload cpu, M -offload-params cpu -offload nvme, N -offload-params nvme -offload nvme (the parameter "
            "file too); each gather copies its shard up (N: read from the file first), hidden behind the compute up to the step's "
            "compute time: exposed is what is not; chosen only when no other row fits (or with -offload-params cpu|nvme given)\n");
    if (e.ckpt_kept > 0)
        printf0("disk/node: %d checkpoint%s on disk at once (-n %d, -nk %d, -x %d, -save-model %s: %d with a model file), %s on the node of "
                "rank 0 (its %d rank%s' state files and the model files; markers not counted)\n", e.ckpt_kept, e.ckpt_kept > 1 ? "s" : "",
                f->ckpt_every, f->ckpt_keep, f->max_steps, f->save_model, e.ckpt_models, fmt_bytes((double)rows[0].ckpt_per_node).s,
                local < R ? local : R, (local < R ? local : R) > 1 ? "s" : "");
    else if (e.ckpt_kept < 0)
        printf0("disk/node: checkpoints not counted: -x -1 (one epoch) with -nk 0 keeps every one, how many the data decides. HINT: -nk N\n");
    int best = plan_choose_params(rows, n, R, -1, -1, plan_base_arg(f), plan_offload_arg(f), plan_params_arg(f));
    if (best < 0) {
        char why[1024];
        plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
        printf0("recommendation: none: %s\n", why);
    } else {
        const PlanRow* p = &rows[best];
        char lay[48] = "";
        if (p->groups.N < p->groups.W) snprintf(lay, sizeof(lay), " %s %d", p->groups.hpz ? "-hpz" : "-shard-group", p->groups.N);
        printf0("recommendation: -z %d -r %d%s%s%s%s%s%s: %suses %s of %s per rank, leaving %s (headroom %s), and has the lowest estimated step time, "
                "%.3g s (compute %.3g s, communication %.3g s: %.3g s inside nodes, %.3g s between them%s)%s\n", p->stage, p->recompute, lay, p->offload ? " -offload " : "",
                p->offload ? offload_name((Offload)p->offload) : "", p->offload_params ? " -offload-params " : "",
                p->offload_params ? offload_name((Offload)p->offload_params) : "", !c->lora_r ? "" : p->rep_base ? " -lora-base replicated" : " -lora-base sharded",
                p->offload_params && !plan_params_arg(f) ? "nothing fits without parameter offload; "
                : p->offload_params ? plan_choose(rows, n, R, -1, -1, plan_base_arg(f), plan_offload_arg(f) & ~PLAN_PARAMS) < 0
                  ? "-offload-params given (and nothing fits without it); " : "-offload-params given (rows without it fit too); "
                : !p->offload ? "" : plan_choose(rows, n, R, -1, -1, plan_base_arg(f), 1 << OFFLOAD_NONE) < 0 ? "nothing fits without offload; "
                : "-offload given (rows without offload fit too); ", fmt_bytes((double)p->total).s, fmt_bytes(e.mem).s,
                fmt_bytes(p->free).s, fmt_bytes(e.headroom).s, p->step_s, p->compute_s, p->comm_s, p->comm_intra_s, p->comm_inter_s, p->offload ? "; host copies and AdamW" : "",
                R > 1 ? "; ZeRO-0 is never chosen with R > 1 (ZeRO-1 sends less in less memory)" : "");
    }
    if (f->out_dir[0] && g_rank == 0) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/plan.jsonl", f->out_dir);
        FILE* fp = fopen(path, "w");
        if (!fp) die_user("-o: cannot write %s: %s", path, strerror(errno));
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[i];
            if (p->groups.N < p->groups.W) // [groups] the layout first, so that a reader keyed on {"stage": ... reads the flat rows only
                fprintf(fp, "{\"layout\": \"%s\", \"group\": %d, \"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d",
                        p->groups.hpz ? "hpz" : "hsdp", p->groups.N, p->stage, p->recompute, p->offload, R, GA);
            else if (p->offload_params) // [-offload-params] first, so that a reader keyed on {"stage": ... reads the other rows only
                fprintf(fp, "{\"offload_params\": %d, \"prefetch_s\": %.6g, \"exposed_s\": %.6g, \"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d",
                        p->offload_params, p->prefetch_s, p->exposed_s, p->stage, p->recompute, p->offload, R, GA);
            else
                fprintf(fp, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d", p->stage, p->recompute, p->offload, R, GA);
            for (int t = 0; t < TAG_COUNT; t++) fprintf(fp, ", \"%s\": %zu", mem_tag_name[t], p->bytes[t]);
            fprintf(fp, ", \"total\": %zu, \"fits\": %d, \"step_s\": %.6g, \"recommended\": %d", p->total, p->fits, p->step_s, i == best);
            fprintf(fp, ", \"mem\": %.0f, \"free\": %.0f, \"headroom\": %.0f, \"compute_s\": %.6g, \"comm_s\": %.6g, \"flops\": %.6g",
                    e.mem, p->free, e.headroom, p->compute_s, p->comm_s, e.flops);
            fprintf(fp, ", \"host_bytes\": %zu, \"host_per_node\": %zu, \"pcie_bytes\": %.0f, \"pcie_s\": %.6g, \"host_s\": %.6g",
                    p->host_bytes, p->host_per_node, p->pcie_bytes, p->pcie_s, p->host_s);
            fprintf(fp, ", \"disk_per_node\": %zu, \"ckpt_per_node\": %zu, \"disk_s\": %.6g", p->disk_per_node, p->ckpt_per_node, p->disk_s);
            for (int k = 0; k < COLL_KINDS; k++) fprintf(fp, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)p->coll_count[k], (long long)p->coll_bytes[k]);
            fprintf(fp, ", \"rep_base\": %d", p->rep_base); // [LoRA] 1: the frozen base whole on every rank
            fprintf(fp, ", \"comm_intra_s\": %.6g, \"comm_inter_s\": %.6g, \"sent_inter\": %.0f}\n", p->comm_intra_s, p->comm_inter_s, p->sent_inter); // [groups]
        }
        fclose(fp);
    }
}

// The settings table's planner inputs left at auto when nothing plans the run: why they are unused.
static void plan_inputs_unused(Flags* f, const char* why) {
    if (f->tflops == 0) FLAG_SHOW(f, tflops, "%s", why);
    if (f->link_gbps == 0) FLAG_SHOW(f, link_gbps, "%s", why);
    if (!strcmp(f->link_intra, "auto")) FLAG_SHOW(f, link_intra, "%s", why);
    if (!strcmp(f->link_inter, "auto")) FLAG_SHOW(f, link_inter, "%s", why);
    if (!strcmp(f->gpus_per_node, "auto")) FLAG_SHOW(f, gpus_per_node, "%s", why);
}

// The settings table shows the planner's inputs as resolved (rank 0, which plans, prints it).
static void plan_env_show(Flags* f, const PlanEnv* e) {
    if (f->tflops == 0) FLAG_SHOW(f, tflops, "%.3g (%s)", e->flops / 1e12, g_device == DEV_CPU ? "measured" : "assumed");
    if (f->link_gbps == 0) FLAG_SHOW(f, link_gbps, "%.0f inside a node, %.0f between nodes (-link-intra, -link-inter)", e->link * 8 / 1e9, e->inter * 8 / 1e9);
    if (!strcmp(f->link_intra, "auto")) FLAG_SHOW(f, link_intra, "%.0f Gbit/s (%s)", e->link * 8 / 1e9, e->link_src);
    if (!strcmp(f->link_inter, "auto")) FLAG_SHOW(f, link_inter, "%.0f Gbit/s (%s)", e->inter * 8 / 1e9, e->inter_src);
    if (!strcmp(f->gpus_per_node, "auto")) FLAG_SHOW(f, gpus_per_node, "%d (%s)", e->gpn, e->gpn_src);
    if (f->pcie_gbps == 0) FLAG_SHOW(f, pcie_gbps, "%.0f (%s)", e->pcie * 8 / 1e9, e->pcie_src);
    if (f->disk_gbps == 0) FLAG_SHOW(f, disk_gbps, "%.0f (%s)", e->disk * 8 / 1e9, e->disk_src);
    if (!f->gpu_mem[0]) FLAG_SHOW(f, gpu_mem, "%s (%s)", fmt_bytes(e->mem).s, e->mem_src);
    if (!f->host_mem[0]) FLAG_SHOW(f, host_mem, "%s", g_device == DEV_CPU ? "unused: on the cpu device the host is the device (-gpu-mem)"
                                                                          : fmt_bytes(e->host_mem).s);
}

// -z auto / -r auto: rank 0 plans with its own view of the memory and broadcasts the choice, so
// ranks that see different free memory never choose differently. One line says what and why.
static void choose_config(Flags* f, const GPTConfig* c, int R, const Launch* L, Comm* comm) {
    int choice[7] = {f->zero_stage, f->recompute, 0, 0, 0, 0, 0}; // ..., [groups] the layout (1 HSDP, 2 hpZ) and its N
    char why[1024] = "";
    if (g_rank == 0) {
        int GA = plan_GA(f, R);
        PlanEnv e;
        plan_env(f, L, R, &e);
        PlanRow rows[PLAN_MAX_ROWS];
        int n = plan_rows(c, f->B, f->T, flags_groups(f, L, R), GA, L->local_world, &e, rows, plan_layouts_arg(f));
        int best = plan_choose_params(rows, n, R, f->zero_stage, f->recompute, plan_base_arg(f), plan_offload_arg(f), plan_params_arg(f));
        plan_env_show(f, &e);
        if (best < 0) {
            plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
            choice[0] = -2;
        } else {
            choice[0] = rows[best].stage;
            choice[1] = rows[best].recompute;
            choice[2] = rows[best].offload;
            choice[3] = rows[best].rep_base;
            choice[4] = rows[best].offload_params;
            if (rows[best].groups.N < rows[best].groups.W) { choice[5] = rows[best].groups.hpz ? 2 : 1; choice[6] = rows[best].groups.N; }
            snprintf(why, sizeof(why), "%suses %s of %s per rank (%s), leaving %s (headroom %s, " PLAN_HEADROOM_TEXT "), estimated %.3g s/step",
                     rows[best].offload_params && !plan_params_arg(f) ? "nothing fits without parameter offload, so the parameter and gradient shards leave the device too; "
                     : rows[best].offload == OFFLOAD_CPU && !strcmp(f->offload, "auto") ? "nothing fits without offload, so the optimizer state goes to the host; "
                     : rows[best].offload == OFFLOAD_NVME && !strcmp(f->offload, "auto") ? "nothing fits without offload nor with it in host memory, so the optimizer state goes to -offload-dir; " : "",
                     fmt_bytes((double)rows[best].total).s, fmt_bytes(e.mem).s, e.mem_src, fmt_bytes(rows[best].free).s,
                     fmt_bytes(e.headroom).s, rows[best].step_s);
        }
    }
    comm_broadcast(comm, choice, sizeof(choice), 0);
    if (choice[0] == -2) die_user("-z auto: %s", g_rank == 0 ? why : "rank 0 found no configuration that fits (see its message)");
    const char* base = !c->lora_r ? "" : choice[3] ? " -lora-base replicated" : " -lora-base sharded"; // [LoRA]
    char lay[48] = ""; // [groups] a hybrid layout the planner chose (only when neither -shard-group nor -hpz was given)
    if (choice[5]) {
        snprintf(lay, sizeof(lay), " %s %d", choice[5] == 2 ? "-hpz" : "-shard-group", choice[6]);
        if (choice[5] == 2) { snprintf(f->hpz, sizeof(f->hpz), "%d", choice[6]); FLAG_SHOW(f, hpz, "%d (-z auto: the planner's choice)", choice[6]); }
        else { snprintf(f->shard_group, sizeof(f->shard_group), "%d", choice[6]); FLAG_SHOW(f, shard_group, "%d (-z auto: the planner's choice)", choice[6]); }
    }
    printf0("auto: -z %d -r %d%s%s%s%s%s%s chosen: %s\n", choice[0], choice[1], lay, choice[2] ? " -offload " : "", choice[2] ? offload_name((Offload)choice[2]) : "",
            choice[4] ? " -offload-params " : "", choice[4] ? offload_name((Offload)choice[4]) : "", base, why);
    snprintf(f->offload_params, sizeof(f->offload_params), "%s", offload_name((Offload)choice[4])); // [-offload-params] (none: none)
    plan_lora_base_resolve(f, choice[3], choice[0], "-z auto: the planner's choice");
    if (!strcmp(f->offload, "auto")) snprintf(f->offload, sizeof(f->offload), "%s", offload_name((Offload)choice[2]));
    f->zero_stage = choice[0];
    f->recompute = choice[1];
    snprintf(f->zero_stage_str, sizeof(f->zero_stage_str), "%d", choice[0]);
    snprintf(f->recompute_str, sizeof(f->recompute_str), "%d", choice[1]);
}

#endif // ZT_PLAN_H
