// train_gpt.cu — zerotrain: train GPT-2 with BF16 mixed precision, activation recompute and
// ZeRO-1/2/3 sharding, on a GPU (-device cuda) or on the CPU reference device (-device cpu),
// over N processes (mpirun), configured entirely by flags.
//
//     make train && ./train                           # a small GPT on the built-in KJV corpus
//     mpirun -np 4 ./train -device cpu -z 3           # ZeRO-3 over 4 processes
//
// Read it top to bottom:
//   1. flags            one table drives parsing, -help and the start-up settings table
//   2. the model        config, the tensor table, the block layout, initialisation
//   3. activations      what forward keeps for backward, by recompute mode
//   4. forward/backward the layer loop, calling the ZeRO hooks (zero.h) around every block
//   5. the step         micro-steps, gradient norm, clipping, AdamW, learning-rate schedule
//   6. checkpoints      llm.c model files and sharded training state (the protocol: checkpoint.h)
//   7. eval & sampling
//   8. sizing           -plan, -z auto: memory per tag, communication, step time, for every stage
//   9. the loop & main
// The ops (ops/*.cuh) and AdamW (adamw.cuh) each hold a CPU loop and a CUDA kernel behind one
// dispatcher; zero.h holds everything about sharding and communication.
//
// Limits (see also README.md): the CUDA device (kernels, cuBLASLt, NCCL backend) is written and
// compiles with warnings as errors, but has never run on a GPU; dev/gpu_check.sh is the first thing
// to run on one. The CPU device is tested end to end.
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <dirent.h>
#include "device.cuh"          // defines: floatX, ld, rn, dev_alloc, TAG_*, die, g_device, g_work
#include "ops/encoder.cuh"     // defines: op_encoder_forward, op_encoder_backward
#include "ops/layernorm.cuh"   // defines: op_residual_layernorm_forward, op_layernorm_backward
#include "ops/matmul.cuh"      // defines: op_matmul_forward, op_matmul_backward, op_gelu_forward
#include "ops/attention.cuh"   // defines: op_attention_forward, op_attention_backward
#include "ops/classifier.cuh"  // defines: op_lm_head_forward
#include "adamw.cuh"           // defines: AdamWParams, op_adamw, op_sumsq_many
#include "zero.h"              // defines: BlockLayout, Zero, Comm, the zero_* hooks, comm_*
#include "offload.h"           // defines: offload_init, offload_adamw (-offload cpu: master, m, v on the host)
#include "dataloader.h"        // defines: DataLoader, dataloader_init, dataloader_load
#include "tokenizer.h"         // defines: Tokenizer, tokenizer_init, tokenizer_print
#include "model.h"             // defines: GPTConfig, GPT2_TENSORS, ModelDesc, model_describe, model_layout
#include "checkpoint.h"        // defines: ckpt_save, ckpt_resume, write_model_file, ModelFile, state_pieces, fault_at
#include "hf.h"                // defines: HFCheckpoint, hf_open, hf_bind, hf_fill, HFWriter (Hugging Face GPT-2 in/out)
#include "prompts.h"           // defines: tokenize_prompts_to_shards (prompt/completion JSONL -> shards + loss masks)

// ----------------------------------------------------------------------------
// 1. Flags. One row per flag: llm.c's single letters where the meaning is the same, descriptive
// names for everything new. The same table parses argv, prints -help and prints the settings
// at start-up. "auto" defaults are resolved per device in resolve_defaults().

typedef enum { F_INT, F_FLOAT, F_STR, F_SWITCH } FlagType; // F_SWITCH: present = 1, takes no value

// X(flag, field, type, default, help)
#define FLAG_TABLE(X)                                                                                   \
    X("-device",        device,          F_STR,   "auto",   "cpu | cuda | auto (cuda when a GPU is present)")                    \
    X("-e",             model,           F_STR,   "auto",   "model: dN (d6 d12 d24 d36 d48 d60 d72 d84), tiny, an llm.c .bin file, or a Hugging Face GPT-2 (a directory with config.json + model.safetensors or its index, or a .safetensors file); auto: d12 on cuda, tiny on cpu") \
    X("-layers",        layers,          F_INT,   "0",      "override L, the number of layers (0: from -e)")                   \
    X("-channels",      channels,        F_INT,   "0",      "override C, the width (0: from -e)")                               \
    X("-heads",         heads,           F_INT,   "0",      "override NH, the attention heads (0: from -e)")                    \
    X("-max-seq",       max_seq,         F_INT,   "0",      "override the model's maximum sequence length (0: from -e)")       \
    X("-vocab",         vocab,           F_INT,   "0",      "override V, the vocabulary size (0: from -e); padded to 128")     \
    X("-i",             train_data,      F_STR,   "data/kjv_train.bin", "train data: glob of llm.c token shards")              \
    X("-j",             val_data,        F_STR,   "data/kjv_val.bin",   "val data: glob of llm.c token shards (\"\": none)")     \
    X("-tokenizer",     tokenizer,       F_STR,   "data/gpt2_tokenizer.bin", "llm.c tokenizer file for decoding samples")       \
    X("-tokenize",      tokenize,        F_STR,   "",       "encode this text file with GPT-2's BPE into llm.c shards named by -o (a prefix), then exit; documents are separated by lines that are exactly <|endoftext|>. A .jsonl file of {\"prompt\", \"completion\"} lines is packed for -t with a loss mask (completion + EOT count)") \
    X("-merges",        merges,          F_STR,   "data/gpt2_merges.bin", "GPT-2 merge list for -tokenize")                         \
    X("-val-every",     val_every_doc,   F_INT,   "20",     "with -tokenize: every N-th document goes to the val shards (0: none)") \
    X("-shard-tokens",  shard_tokens,    F_INT,   "100000000", "with -tokenize: tokens per shard at most")                          \
    X("-o",             out_dir,         F_STR,   "",       "output directory: log.jsonl and checkpoints (\"\": none)")        \
    X("-b",             B,               F_INT,   "auto",   "micro-batch size per rank (auto: 8 on cpu, 16 on cuda)")           \
    X("-t",             T,               F_INT,   "auto",   "sequence length (auto: 64 on cpu, 1024 on cuda, at most the model's)") \
    X("-d",             total_batch,     F_INT,   "-1",     "total batch per step in tokens; a multiple of B*T*R gives accumulation (-1: B*T*R)") \
    X("-x",             max_steps,       F_INT,   "auto",   "steps to train (auto: 300 on cpu, one epoch on cuda; -1: one epoch)") \
    X("-l",             lr,              F_FLOAT, "auto",   "peak learning rate (auto: 1e-3 on cpu, 6e-4 on cuda)")             \
    X("-u",             warmup,          F_INT,   "auto",   "learning-rate warmup steps (auto: 5% of the steps)")               \
    X("-q",             lr_final,        F_FLOAT, "0.1",    "final learning rate as a fraction of the peak")                    \
    X("-k",             lr_schedule,     F_STR,   "cosine", "learning-rate schedule after warmup: cosine | linear | constant")  \
    X("-c",             weight_decay,    F_FLOAT, "0.1",    "AdamW weight decay (matrices only)")                               \
    X("-beta1",         beta1,           F_FLOAT, "0.9",    "AdamW beta1")                                                      \
    X("-beta2",         beta2,           F_FLOAT, "0.95",   "AdamW beta2")                                                      \
    X("-eps",           eps,             F_FLOAT, "1e-8",   "AdamW epsilon")                                                    \
    X("-grad-clip",     grad_clip,       F_FLOAT, "1.0",    "clip the global gradient norm to this (0: off)")                   \
    X("-seed",          seed,            F_INT,   "1337",   "seed of initialisation, data order and sampling")                  \
    X("-shuffle",       shuffle,         F_INT,   "1",      "1: shuffle samples every epoch; 0: llm.c's sequential order")      \
    X("-v",             val_every,       F_INT,   "auto",   "validation loss every N steps (auto: 25 on cpu, 250 on cuda; 0: never)") \
    X("-m",             val_steps,       F_INT,   "20",     "validation batches per evaluation (-1: the whole val set)")       \
    X("-s",             sample_every,    F_INT,   "auto",   "sample text every N steps (auto: 100 on cpu, 500 on cuda; 0: never)") \
    X("-g",             gen_tokens,      F_INT,   "64",     "tokens to generate per sample")                                    \
    X("-n",             ckpt_every,      F_INT,   "0",      "checkpoint every N steps and at the end (0: never; needs -o)")     \
    X("-nk",            ckpt_keep,       F_INT,   "0",      "keep only the newest N checkpoints (0: keep all)")                 \
    X("-y",             resume,          F_INT,   "0",      "1: resume from the newest complete checkpoint in -o")              \
    X("-r",             recompute,       F_INT,   "1",      "recompute in backward: 0 none, 1 GELU, 2 GELU+layernorms, 3 whole blocks; auto: with -z auto, the planner's choice") \
    X("-z",             zero_stage,      F_INT,   "0",      "ZeRO stage: 0 replicate, 1 shard optimizer, 2 +gradients, 3 +parameters; auto: the lowest-time stage that fits (see -plan)") \
    X("-threads",       threads,         F_INT,   "0",      "CPU threads per rank (0: cores / ranks on this node, or OMP_NUM_THREADS)") \
    X("-blas",          blas,            F_INT,   "0",      "1: CPU matmuls through OpenBLAS when built with it (machine-dependent sums; see README for when it is faster); 0: the plain loop") \
    X("-comm-trace",    comm_trace,      F_INT,   "0",      "1: print every collective (kind, block, bytes)")                   \
    X("-comm-timeout",  comm_timeout,    F_FLOAT, "300",    "seconds a collective may take before the run ends with an error (0: forever)") \
    X("-comm-delay",    comm_delay,      F_INT,   "0",      "debug: delay every collective by N ms (exposes missing waits)")   \
    X("-poison",        poison,          F_INT,   "auto",   "debug: fill released ZeRO buffers with NaN (auto: 1 in DEBUG=1 builds, else 0)")                       \
    X("-data-trace",    data_trace,      F_INT,   "0",      "debug: log a hash of every rank's micro-batch")                    \
    X("-log-hash",      log_hash,        F_INT,   "0",      "log hashes of parameters, m and v at the end (reproducibility checks)") \
    X("-resume-step",   resume_step,     F_INT,   "0",      "with -y 1: resume from this checkpoint step instead of the newest")     \
    X("-export",        export_path,     F_STR,   "",       "when training ends, write the model to this llm.c file (with -y 1 -x 0: consolidates a sharded checkpoint)") \
    X("-plan",          plan,            F_SWITCH, "0",     "print memory and time per rank for every ZeRO stage x recompute mode and a recommendation, then exit (allocates nothing)") \
    X("-world",         world,           F_INT,   "0",      "with -plan: plan for this many ranks (0: the ranks this run has)")   \
    X("-gpu-mem",       gpu_mem,         F_STR,   "",       "memory per rank for -plan and -z auto, e.g. 80GiB, 40GB, 512MiB (\"\": the device's free memory)") \
    X("-link-gbps",     link_gbps,       F_FLOAT, "auto",   "link bandwidth per rank for -plan, Gbit/s per direction (auto: on cuda 3600 NVLink-class up to 8 ranks, 400 InfiniBand-class beyond; 80 on cpu)") \
    X("-tflops",        tflops,          F_FLOAT, "auto",   "compute rate per rank for -plan, TFLOP/s (auto: on cpu the median of 15 matmuls timed by CPU time, on cuda 50% of the -gpu's BF16 peak)") \
    X("-max-skips",     max_skips,       F_INT,   "10",     "end the run with exit code 4 after this many consecutive skipped steps (non-finite gradient norm or update; 0: never)") \
    X("-save-model",    save_model,      F_STR,   "1",      "llm.c model file in each checkpoint: 1 every one, last only the final one, 0 none (resume needs only the state files)") \
    X("-io-timeout",    io_timeout,      F_FLOAT, "auto",   "seconds ranks wait for rank 0's checkpoint or -export writes and for each other's evaluation reads (auto: bytes rank 0 writes at 50 MB/s, at least 600; 0: forever)") \
    X("-export-hf",     export_hf,       F_STR,   "",       "when training ends, write the model as a Hugging Face GPT-2 checkpoint into this directory (config.json + model.safetensors)") \
    X("-prompt",        prompt,          F_STR,   "",       "generate from this prompt (or from each line of @FILE) at the sample steps and at the end, up to -g tokens or an EOT (encoded with -merges)") \
    X("-export-dtype",  export_dtype,    F_STR,   "auto",   "dtype of -export / -export-hf: fp32 (from the FP32 master weights), bf16 (the parameters as trained), fp16 (-export-hf only); auto: -export the parameters' dtype, -export-hf fp32") \
    X("-gpu",           gpu,             F_STR,   "auto",   "GPU model for -plan and MFU: h100, h200, a100, l40s, l4, a10, ... (auto: the GPU present; h100 when planning without one)") \
    X("-tune",          tune,            F_SWITCH, "0",     "measure before training: every flag left at auto (-z, -r, -offload; with -tune, those not given count as auto) is chosen by running -tune-steps steps of each of the planner's fastest -tune-rows rows that fit (offload rows only where -z auto would offload: nothing fits without), on scratch state; the fastest that fits wins, and the run starts from its source with it (as if given; written into checkpoints, a resume reuses it)") \
    X("-tune-steps",    tune_steps,      F_INT,   "5",      "with -tune: timed steps per candidate, after one warm-up step") \
    X("-tune-rows",     tune_rows,       F_INT,   "4",      "with -tune: candidates at most, the planner's fastest rows that fit (1..16)") \
    X("-offload",       offload,         F_STR,   "auto",   "where each rank's shard of the optimizer state (master, m, v) lives: none (the device) | cpu (host memory; AdamW runs on the host, bit-identical to none; needs -z 1, 2 or 3) | nvme (a file per rank under -offload-dir, streamed through -offload-buffer; likewise bit-identical) | auto (with -z auto, -r auto or -tune: cpu only when nothing fits without it, nvme only when -offload-dir is given and nothing fits in host memory either; otherwise none)") \
    X("-pcie-gbps",     pcie_gbps,       F_FLOAT, "auto",   "host<->device bandwidth per rank for -plan's offload rows, Gbit/s per direction (auto: 200, PCIe 4.0 x16-class)") \
    X("-offload-dir",   offload_dir,     F_STR,   "",       "with -offload nvme: the directory of each rank's optimizer-state file (12 bytes per element of its shard; removed at exit)") \
    X("-offload-buffer", offload_buffer, F_STR,   "256MiB", "with -offload nvme: host memory per rank for streaming the state (three units of master, m, v plus the gradient and parameter staging), e.g. 256MiB") \
    X("-disk-gbps",     disk_gbps,       F_FLOAT, "auto",   "disk bandwidth per node for -plan's nvme offload rows, Gbit/s per direction, shared by the node's ranks (auto: 16, one NVMe SSD-class)")

// How each type is declared and converted from its text.
#define FLAG_FIELD_F_INT(field) int field;
#define FLAG_FIELD_F_FLOAT(field) float field;
#define FLAG_FIELD_F_STR(field) char field[1024];
#define FLAG_FIELD_F_SWITCH(field) int field;
#define FLAG_CONV_F_INT(flag, field, help) \
    if (parse_int(f->field##_str, &f->field)) die_user("flag %s: '%s' is not an integer (%s)", flag, f->field##_str, help);
#define FLAG_CONV_F_FLOAT(flag, field, help) \
    if (parse_float(f->field##_str, &f->field)) die_user("flag %s: '%s' is not a number (%s)", flag, f->field##_str, help); \
    if (!isfinite(f->field)) die_user("flag %s: '%s' is beyond a float's range (%.3g at most)", flag, f->field##_str, (double)FLT_MAX);
#define FLAG_CONV_F_STR(flag, field, help) snprintf(f->field, sizeof(f->field), "%s", f->field##_str);
#define FLAG_CONV_F_SWITCH(flag, field, help) f->field = atoi(f->field##_str);

// Per flag: its text as given or defaulted (_given, kept for the settings table), its text as
// resolved ("auto" and sentinels replaced by what the run uses: _str, hashed across ranks), its value,
// and whether the command line gave it (_set: -tune tunes only what was not given).
typedef struct {
#define X(flag, field, type, def, help) char field##_given[1024]; char field##_str[1024]; char field##_set; FLAG_FIELD_##type(field)
    FLAG_TABLE(X)
#undef X
} Flags;

static void flags_print_help(FILE* f) {
    fprintf(f, "usage: ./train [flags]      (mpirun -np R ./train [flags] for R processes)\n\n");
#define X(flag, field, type, def, help) \
    fprintf(f, "  %-14s %s (%s)\n", flag, help, type == F_SWITCH ? "a switch: no value" : def[0] ? "default: " def : "default: \"\"");
    FLAG_TABLE(X)
#undef X
}

// Parse a whole-string integer / float; 0 on success.
static int parse_int(const char* s, int* out) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}
static int parse_float(const char* s, float* out) {
    char* end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return -1;
    *out = (float)v;
    return 0;
}

// Store the text of every flag (defaults, then argv), then convert. "auto" stays text until
// resolve_defaults. Bad input: one line naming the flag, exit 2.
static void flags_parse(Flags* f, int argc, char** argv) {
    memset(f, 0, sizeof(*f));
#define X(flag, field, type, def, help) snprintf(f->field##_str, sizeof(f->field##_str), "%s", def);
    FLAG_TABLE(X)
#undef X
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (!strcmp(a, "-help") || !strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (g_rank == 0) flags_print_help(stdout);
            fflush(stdout);
            comm_finalize(); // every rank ends cleanly (mpirun -np 2 ./train -help exits 0)
            exit(0);
        }
        int known = 0;
#define X(flag, field, type, def, help)                                                                      \
        if (!known && !strcmp(a, flag) && type == F_SWITCH) {                                               \
            known = 1;                                                                                       \
            f->field##_set = 1;                                                                              \
            snprintf(f->field##_str, sizeof(f->field##_str), "1");                                          \
        }                                                                                                    \
        if (!known && !strcmp(a, flag)) {                                                                    \
            known = 1;                                                                                       \
            f->field##_set = 1;                                                                              \
            if (i + 1 >= argc) die_user("flag %s needs a value (%s). HINT: ./train -help", flag, help);      \
            if (strlen(argv[i + 1]) >= sizeof(f->field##_str)) die_user("flag %s: value too long", flag);    \
            snprintf(f->field##_str, sizeof(f->field##_str), "%s", argv[++i]);                             \
        }
        FLAG_TABLE(X)
#undef X
        if (!known) die_user("unknown flag '%s'. HINT: ./train -help lists the flags", a);
    }
#define X(flag, field, type, def, help) snprintf(f->field##_given, sizeof(f->field##_given), "%s", f->field##_str);
    FLAG_TABLE(X)
#undef X
}

// Record what a flag resolved to, for the settings table (after the ranks compared their hashes:
// these texts are for people, e.g. "unused: ..." where nothing needed the value).
#define FLAG_SHOW(f, field, ...) snprintf((f)->field##_str, sizeof((f)->field##_str), __VA_ARGS__)

// Convert every flag's text (after "auto" has been replaced) to its value.
static void flags_convert(Flags* f) {
#define X(flag, field, type, def, help) FLAG_CONV_##type(flag, field, help)
    FLAG_TABLE(X)
#undef X
}

// One row of the settings table: the value as given, and "given → resolved" when the run resolved
// it ("auto → 15", "-1 → 4096"), padded by characters, not bytes ("→" is three bytes of UTF-8).
static void flags_print_row(const char* flag, const char* given, const char* str) {
    char v[160];
    if (strcmp(given, str)) snprintf(v, sizeof(v), "%s \u2192 %s", given[0] ? given : "\"\"", str);
    else snprintf(v, sizeof(v), "%s", str);
    int w = 0, cut = 0;
    for (int i = 0; v[i]; i++) {
        if (((unsigned char)v[i] & 0xC0) != 0x80) w++; // count characters: skip UTF-8 continuation bytes
        if (w > 70) { cut = i; break; }
    }
    if (cut) { v[cut] = 0; w = 70; }
    printf0("| %-15s | %s%*s |\n", flag, v, 70 - w, ""); // (15: -offload-buffer, the longest flag)
}

static void flags_print_table(const Flags* f) {
    printf0("+-----------------+------------------------------------------------------------------------+\n");
    printf0("| flag            | value (as given \u2192 as resolved)                                         |\n");
    printf0("+-----------------+------------------------------------------------------------------------+\n");
#define X(flag, field, type, def, help) flags_print_row(flag, f->field##_given, f->field##_str);
    FLAG_TABLE(X)
#undef X
    printf0("+-----------------+------------------------------------------------------------------------+\n");
}

// A hash of every flag's final text: ranks compare it at start-up.
static uint64_t flags_hash(const Flags* f) {
    uint64_t h = FNV_INIT;
#define X(flag, field, type, def, help) h = fnv1a(h, flag, strlen(flag)); h = fnv1a(h, f->field##_str, strlen(f->field##_str) + 1);
    FLAG_TABLE(X)
#undef X
    return h;
}

// ----------------------------------------------------------------------------
// 2. The model. GPT-2 (Radford et al. 2019): token + position embedding, L pre-norm blocks of
// causal self-attention and a GELU MLP, a final layernorm, and the LM head tied to the token
// embedding. The vocabulary is padded to a multiple of 128 (Vp) for aligned matmuls; the padded
// rows of wte are zero and never enter the softmax.
//
// The tensors are described once, in GPT2_TENSORS, in llm.c's file order. Everything else is
// derived from it: the block layout (zero.h), the logical offsets used by model files and
// checkpoints, which tensors decay, how each is initialised, the printed layout. The table, the
// config and the layout live in model.h (checkpoint.h reads them too); the views, the llm.c
// descriptors and initialisation are here.

// Views of one block: pointers to each of its tensors (the other entries stay NULL).
typedef struct { floatX* t[NUM_TENSORS]; } ParamView;
typedef struct { float* t[NUM_TENSORS]; } GradView;

static ParamView param_view(const ModelDesc* d, floatX* block, int io) {
    ParamView v;
    for (int k = 0; k < NUM_TENSORS; k++) v.t[k] = d->t[k].io == io ? block + d->t[k].off : NULL;
    return v;
}
static GradView grad_view(const ModelDesc* d, float* block, int io) {
    GradView v;
    for (int k = 0; k < NUM_TENSORS; k++) v.t[k] = d->t[k].io == io ? block + d->t[k].off : NULL;
    return v;
}

// The llm.c model descriptors: -e dN gives depth N with llm.c's width and heads; "tiny" is our
// CPU default (a few million parameters, most of them the embedding).
static int model_from_descriptor(const char* s, GPTConfig* c) {
    static const struct { const char* name; int L, C, NH; } table[] = {
        {"tiny", 4, 128, 4},  {"d6", 6, 384, 6},     {"d12", 12, 768, 12}, {"d24", 24, 1024, 16},
        {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}, {"d60", 60, 1920, 30}, {"d72", 72, 2880, 30},
        {"d84", 84, 3456, 36},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(s, table[i].name)) {
            c->L = table[i].L; c->C = table[i].C; c->NH = table[i].NH;
            c->V = 50257; c->maxT = !strcmp(s, "tiny") ? 256 : 1024;
            return 0;
        }
    return -1;
}

// Initialisation, GPT-2's scheme from a counter-based RNG keyed by each element's logical index:
// the same model for every R and stage, and each rank fills only its own shard. Each element is a
// pure function of (seed, tensor, index), so the OpenMP threads split the elements and the bits do
// not depend on the thread count (~60 ns per element on one core: d48's 1.56 G would take ~95 s).
typedef struct { const ModelDesc* d; uint64_t seed; } InitCtx;

static void init_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const InitCtx* ic = (const InitCtx*)ctx;
    const ModelDesc* d = ic->d;
    const GPTConfig* c = &d->cfg;
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        int k = NUM_TENSORS - 1; // the tensor holding li (tensors are in logical order)
        while (d->t[k].logical > li) k--;
        const TensorInfo* t = &d->t[k];
        int64_t end = t->logical + t->n * (t->io ? 1 : c->L); // run to the end of this tensor
        int64_t run = end - li < len - i ? end - li : len - i;
        uint64_t key = rng_key(ic->seed, 0x494E4954ull /* "INIT" */, (uint64_t)k);
        float std = t->init == INIT_RESID ? 0.02f / sqrtf(2.0f * c->L) : 0.02f;
#pragma omp parallel for schedule(static) if (run >= 32768) // small runs: not worth waking threads
        for (int64_t j = 0; j < run; j++) {
            int64_t e = li + j - t->logical; // element index within the tensor (all layers)
            float v;
            switch (t->init) {
            case INIT_ONE: v = 1.0f; break;
            case INIT_ZERO: v = 0.0f; break;
            default:
                v = (float)(std * rng_normal(key, (uint64_t)e));
                if (k == T_wte && e / c->C >= c->V) v = 0.0f; // padded vocabulary rows
            }
            dst[i + j] = v;
        }
        i += run;
    }
}

// ----------------------------------------------------------------------------
// 3. Activations: what the forward keeps for the backward. The recompute mode (-r) decides which
// per-layer tensors are kept for every layer and which get one shared copy that the backward
// refills by running the *same* op again (so gradients are bit-identical in every mode):
//   -r 0 keep everything; -r 1 recompute GELU; -r 2 also the layernorms;
//   -r 3 keep only each layer's input x and recompute the whole layer in backward.

// X(name, type, elements per layer, keep): kept per layer while -r <= keep, else one shared copy.
#define LAYER_ACTS(X)                                                                  \
    X(x,        floatX, BT * C,              3) /* (B,T,C)  residual stream entering the layer */ \
    X(ln1,      floatX, BT * C,              1) /* (B,T,C)  layernorm 1 output */              \
    X(ln1_mean, float,  BT,                  1) /* (B,T) */                                    \
    X(ln1_rstd, float,  BT,                  1) /* (B,T) */                                    \
    X(qkv,      floatX, BT * 3 * C,          2) /* (B,T,3C) */                                 \
    X(atty,     floatX, BT * C,              2) /* (B,T,C)  attention output, heads concatenated */ \
    X(lse,      float,  BT * NH,             2) /* (B,NH,T) log-sum-exp of each score row */   \
    X(xmid,     floatX, BT * C,              2) /* (B,T,C)  x + attention projection */       \
    X(ln2,      floatX, BT * C,              1) /* (B,T,C) */                                  \
    X(ln2_mean, float,  BT,                  1) /* (B,T) */                                    \
    X(ln2_rstd, float,  BT,                  1) /* (B,T) */                                    \
    X(fch,      floatX, BT * 4 * C,          2) /* (B,T,4C) MLP pre-activation */              \
    X(fch_gelu, floatX, BT * 4 * C,          0) /* (B,T,4C) gelu(fch) */

// X(name, type, elements): one copy whatever the mode.
#define SHARED_ACTS(X)                                                                 \
    X(proj,     floatX, BT * C)     /* (B,T,C)  attproj / fcproj output, read by the next residual add */ \
    X(xL,       floatX, BT * C)     /* (B,T,C)  final residual stream */                   \
    X(lnf,      floatX, BT * C)     /* (B,T,C)  final layernorm output */                  \
    X(lnf_mean, float,  BT)         /* (B,T) */                                            \
    X(lnf_rstd, float,  BT)         /* (B,T) */                                            \
    X(losses,   float,  BT)         /* (B,T)    per-token loss */                          \
    X(inputs,   int,    BT)         /* (B,T)    token ids */                               \
    X(targets,  int,    BT)         /* (B,T)    next-token ids */                          \
    X(dres,     floatX, BT * C)     /* (B,T,C)  gradient of the residual stream */         \
    X(dln,      floatX, BT * C)     /* (B,T,C)  gradient of a layernorm output */          \
    X(datty,    floatX, BT * C)     /* (B,T,C) */                                          \
    X(dqkv,     floatX, BT * 3 * C) /* (B,T,3C) */                                         \
    X(dfch,     floatX, BT * 4 * C) /* (B,T,4C) */

typedef struct {
#define X(name, type, elems, keep) type* name; int64_t name##_n; int name##_per_layer;
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) type* name; int64_t name##_n;
    SHARED_ACTS(X)
#undef X
    floatX* logits;  // (B, T, Vp) logits, then their gradient in place (TAG_LOGITS)
    size_t bytes, logits_bytes; // TAG_ACTS and TAG_LOGITS totals
} Acts;

typedef struct {
#define X(name, type, elems, keep) type* name;
    LAYER_ACTS(X)
#undef X
} LayerActs;

// Bytes of activations (TAG_ACTS) and logits (TAG_LOGITS) for a micro-batch: the closed form
// the allocator uses and the planner prints.
static void acts_bytes(const GPTConfig* c, int B, int T, int recompute, size_t* acts, size_t* logits) {
    int64_t BT = (int64_t)B * T, C = c->C, NH = c->NH, L = c->L;
    size_t total = 0;
#define X(name, type, elems, keep) total += sizeof(type) * (size_t)(elems) * (recompute <= keep ? L : 1);
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) total += sizeof(type) * (size_t)(elems);
    SHARED_ACTS(X)
#undef X
    *acts = total;
    *logits = sizeof(floatX) * (size_t)BT * c->Vp;
}

static void acts_alloc(Acts* a, const GPTConfig* c, int B, int T, int recompute) {
    int64_t BT = (int64_t)B * T, C = c->C, NH = c->NH, L = c->L;
    memset(a, 0, sizeof(*a));
#define X(name, type, elems, keep)                                                   \
    a->name##_n = (elems);                                                           \
    a->name##_per_layer = recompute <= keep;                                         \
    a->name = (type*)dev_alloc(TAG_ACTS, sizeof(type) * a->name##_n * (a->name##_per_layer ? L : 1));
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) a->name##_n = (elems); a->name = (type*)dev_alloc(TAG_ACTS, sizeof(type) * a->name##_n);
    SHARED_ACTS(X)
#undef X
    acts_bytes(c, B, T, recompute, &a->bytes, &a->logits_bytes);
    a->logits = (floatX*)dev_alloc(TAG_LOGITS, a->logits_bytes);
}

static void acts_free(Acts* a, int L) {
#define X(name, type, elems, keep) dev_free(TAG_ACTS, a->name, sizeof(type) * a->name##_n * (a->name##_per_layer ? L : 1));
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) dev_free(TAG_ACTS, a->name, sizeof(type) * a->name##_n);
    SHARED_ACTS(X)
#undef X
    dev_free(TAG_LOGITS, a->logits, a->logits_bytes);
    memset(a, 0, sizeof(*a));
}

static LayerActs layer_acts(const Acts* a, int l) {
    LayerActs v;
#define X(name, type, elems, keep) v.name = a->name + (a->name##_per_layer ? l * a->name##_n : 0);
    LAYER_ACTS(X)
#undef X
    return v;
}

// The ops' fixed workspace in floats: cuBLASLt's 32 MiB, the GEMM's packed panel (at least K*NR for
// the largest K), attention backward's row sums, the embedding backward's buckets and pieces, the
// norm's chunk sums. Then STEP_SCALARS_FLOATS at its end that are not scratch: the step's scalars
// (StepScalars: loss, sum of squares, norm, clip scale, finite flag), which live across steps.
#define STEP_SCALARS_FLOATS 64 // 256 bytes
static size_t ops_workspace_floats(const GPTConfig* c, int B, int T, int64_t opt_elems) {
    int64_t BT = (int64_t)B * T;
    int64_t maxK = 4 * (int64_t)c->C;
    if (c->Vp > maxK) maxK = c->Vp;
    if (BT > maxK) maxK = BT;
    size_t ws = GEMM_PANEL_FLOATS;
    if (MATMUL_WORKSPACE_BYTES / sizeof(float) > ws) ws = MATMUL_WORKSPACE_BYTES / sizeof(float);
    if ((size_t)maxK * GEMM_NR > ws) ws = (size_t)maxK * GEMM_NR;
    size_t att = (size_t)BT * c->NH;
    size_t enc = encoder_workspace_ints(B, T, c->C, c->V);
    size_t norm = 2 * ((size_t)ceil_div(opt_elems, NORM_CHUNK) + (size_t)MAX_BLOCK_TENSORS * (c->L + 1)); // a partial chunk per segment
    if (att > ws) ws = att;
    if (enc > ws) ws = enc;
    if (norm > ws) ws = norm;
    return round_up((int64_t)ws, STEP_SCALARS_FLOATS) + STEP_SCALARS_FLOATS; // + the step's scalars (train_step)
}

// ----------------------------------------------------------------------------
// 4. Forward and backward. The layer loop never tests the ZeRO stage: it asks the hooks for each
// block's parameters and gradient buffer, and tells them when a block is done.

typedef struct {
    ModelDesc d;
    GPTConfig cfg;
    int B, T;          // allocated micro-batch shape (a forward may use a smaller one)
    int recompute;
    Zero z;
    Acts a;
} Model;

// One transformer block, forward. inp1 (+ inp2 when not NULL) is the residual stream entering the
// layer: the previous layer's xmid + its MLP output, added here so that the add and layernorm 1
// are one op. With inp2 == NULL, inp1 *is* the layer input a.x (layer 0, or a recompute).
static void layer_forward(Model* m, int l, const ParamView* p, const floatX* inp1, const floatX* inp2, int B, int T) {
    int C = m->cfg.C, NH = m->cfg.NH, BT = B * T;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    // (x, ln1) = residual + layernorm(inp1, inp2)
    op_residual_layernorm_forward(inp2 ? a.x : NULL, a.ln1, a.ln1_mean, a.ln1_rstd, inp1, inp2,
                                  p->t[T_ln1w], p->t[T_ln1b], BT, C);
    // qkv (B,T,3C) = ln1 @ qkvw^T + qkvb
    op_matmul_forward(a.qkv, NULL, a.ln1, p->t[T_qkvw], p->t[T_qkvb], BT, C, 3 * C);
    // atty (B,T,C), lse (B,NH,T) = causal attention(qkv)
    op_attention_forward(a.atty, a.lse, a.qkv, B, T, C, NH);
    // proj (B,T,C) = atty @ attprojw^T + attprojb
    op_matmul_forward(A->proj, NULL, a.atty, p->t[T_attprojw], p->t[T_attprojb], BT, C, C);
    // (xmid, ln2) = residual + layernorm(x, proj)
    op_residual_layernorm_forward(a.xmid, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, A->proj, p->t[T_ln2w],
                                  p->t[T_ln2b], BT, C);
    // fch (B,T,4C) = ln2 @ fcw^T + fcb;  fch_gelu = gelu(fch)
    op_matmul_forward(a.fch_gelu, a.fch, a.ln2, p->t[T_fcw], p->t[T_fcb], BT, C, 4 * C);
    // proj (B,T,C) = fch_gelu @ fcprojw^T + fcprojb   (added to xmid by the next layer's first op)
    op_matmul_forward(A->proj, NULL, a.fch_gelu, p->t[T_fcprojw], p->t[T_fcprojb], BT, 4 * C, C);
}

// One transformer block, backward. On entry A->dres holds d(layer output) = d(xmid + proj);
// on exit it holds d(layer input x). Weight gradients are added (+=) into g.
static void layer_backward(Model* m, int l, const ParamView* p, const GradView* g, int B, int T) {
    int C = m->cfg.C, NH = m->cfg.NH, BT = B * T, r = m->recompute;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    if (r == 3) layer_forward(m, l, p, a.x, NULL, B, T);                          // [-r 3] the whole layer
    if (r == 1 || r == 2) op_gelu_forward(a.fch_gelu, a.fch, (int64_t)BT * 4 * C); // [-r 1,2] GELU
    // proj = fch_gelu @ fcprojw^T + fcprojb, with fch_gelu = gelu(fch): dfch = (dres @ fcprojw) * gelu'(fch)
    op_matmul_backward(A->dfch, g->t[T_fcprojw], g->t[T_fcprojb], A->dres, a.fch_gelu, p->t[T_fcprojw],
                       a.fch, BT, 4 * C, C);
    if (r == 2) op_residual_layernorm_forward(NULL, a.ln2, a.ln2_mean, a.ln2_rstd, a.xmid, NULL,
                                              p->t[T_ln2w], p->t[T_ln2b], BT, C); // [-r 2] layernorm 2
    // fch = ln2 @ fcw^T + fcb
    op_matmul_backward(A->dln, g->t[T_fcw], g->t[T_fcb], A->dfch, a.ln2, p->t[T_fcw], NULL, BT, C, 4 * C);
    // ln2 = layernorm(xmid): dres += d through the normalisation (dres is now d(xmid))
    op_layernorm_backward(A->dres, g->t[T_ln2w], g->t[T_ln2b], A->dln, a.xmid, p->t[T_ln2w], a.ln2_mean,
                          a.ln2_rstd, BT, C);
    // proj = atty @ attprojw^T + attprojb
    op_matmul_backward(A->datty, g->t[T_attprojw], g->t[T_attprojb], A->dres, a.atty, p->t[T_attprojw],
                       NULL, BT, C, C);
    // atty = attention(qkv)
    op_attention_backward(A->dqkv, A->datty, a.qkv, a.atty, a.lse, B, T, C, NH);
    if (r == 2) op_residual_layernorm_forward(NULL, a.ln1, a.ln1_mean, a.ln1_rstd, a.x, NULL,
                                              p->t[T_ln1w], p->t[T_ln1b], BT, C); // [-r 2] layernorm 1
    // qkv = ln1 @ qkvw^T + qkvb
    op_matmul_backward(A->dln, g->t[T_qkvw], g->t[T_qkvb], A->dqkv, a.ln1, p->t[T_qkvw], NULL, BT, C, 3 * C);
    // ln1 = layernorm(x): dres += d through the normalisation (dres is now d(x))
    op_layernorm_backward(A->dres, g->t[T_ln1w], g->t[T_ln1b], A->dln, a.x, p->t[T_ln1w], a.ln1_mean,
                          a.ln1_rstd, BT, C);
}

// Forward over a B x T micro-batch (B, T at most the allocated shape) whose tokens are already in
// A->inputs (and A->targets when with_targets). With targets, per-token losses land in A->losses,
// and with dloss != 0 the logits gradient (pre-scaled by dloss) replaces the logits, ready for
// gpt_backward. backward_follows tells ZeRO-3 to keep the last layer and the io block gathered.
static void gpt_forward(Model* m, int B, int T, int with_targets, float dloss, int backward_follows) {
    const GPTConfig* c = &m->cfg;
    Zero* z = &m->z;
    Acts* A = &m->a;
    int BT = B * T, C = c->C;
    ParamView io = param_view(&m->d, zero_before_embedding(z), 1);
    // x[0] (B,T,C) = wte[inputs] + wpe[0..T)
    op_encoder_forward(layer_acts(A, 0).x, A->inputs, io.t[T_wte], io.t[T_wpe], B, T, C);
    zero_after_embedding(z);
    for (int l = 0; l < c->L; l++) {
        ParamView p = param_view(&m->d, zero_before_block_forward(z, 1 + l), 0);
        if (l == 0) layer_forward(m, 0, &p, layer_acts(A, 0).x, NULL, B, T);
        else layer_forward(m, l, &p, layer_acts(A, l - 1).xmid, A->proj, B, T);
        zero_after_block_forward(z, 1 + l, backward_follows);
    }
    io = param_view(&m->d, zero_before_head(z), 1);
    // (xL, lnf) = residual + layernorm(xmid of the last layer, its MLP output)
    op_residual_layernorm_forward(A->xL, A->lnf, A->lnf_mean, A->lnf_rstd, layer_acts(A, c->L - 1).xmid,
                                  A->proj, io.t[T_lnfw], io.t[T_lnfb], BT, C);
    // logits (B,T,Vp) = lnf @ wte^T; losses; dlogits in place when training
    op_lm_head_forward(A->logits, A->losses, A->lnf, io.t[T_wte], with_targets ? A->targets : NULL, dloss,
                       dloss != 0.0f, BT, C, c->V, c->Vp);
    zero_after_head(z, backward_follows);
}

// Backward of the micro-batch gpt_forward just ran (with dloss != 0). Adds every parameter's
// gradient into the buffers the hooks hand out; the hooks reduce them (micro, last_micro say
// where in the accumulation we are).
static void gpt_backward(Model* m, int B, int T, int micro, int last_micro) {
    const GPTConfig* c = &m->cfg;
    Zero* z = &m->z;
    Acts* A = &m->a;
    int BT = B * T, C = c->C;
    dev_zero(A->dres, sizeof(floatX) * (size_t)BT * C);
    float* io_grads;
    ParamView io = param_view(&m->d, zero_before_head_backward(z, &io_grads), 1);
    GradView gio = grad_view(&m->d, io_grads, 1);
    // logits = lnf @ wte^T   (A->logits holds dlogits)
    op_matmul_backward(A->dln, gio.t[T_wte], NULL, A->logits, A->lnf, io.t[T_wte], NULL, BT, C, c->Vp);
    // lnf = layernorm(xL): dres = d(xL)
    op_layernorm_backward(A->dres, gio.t[T_lnfw], gio.t[T_lnfb], A->dln, A->xL, io.t[T_lnfw], A->lnf_mean,
                          A->lnf_rstd, BT, C);
    zero_after_head_backward(z);
    for (int l = c->L - 1; l >= 0; l--) {
        float* grads;
        ParamView p = param_view(&m->d, zero_before_block_backward(z, 1 + l, &grads), 0);
        GradView g = grad_view(&m->d, grads, 0);
        layer_backward(m, l, &p, &g, B, T);
        zero_after_block_backward(z, 1 + l, micro, last_micro);
    }
    // x[0] = wte[inputs] + wpe: scatter-add dres into dwte, dwpe (needs no parameter values)
    op_encoder_backward(gio.t[T_wte], gio.t[T_wpe], A->dres, A->inputs, B, T, C, c->V);
    zero_after_embedding_backward(z, micro, last_micro);
}

// ----------------------------------------------------------------------------
// 5. The step: GA micro-steps of forward + backward (the hooks reduce gradients as blocks
// finish), then the global gradient norm, clipping, the overflow check (the update computed and
// not written), AdamW and whatever the stage must gather again. The loss gradient is pre-scaled by
// 1/(R*GA*B*T) so that every reduction is a SUM and the accumulated gradient is the mean over the
// global batch.

// What a step reports once its numbers are read back. skipped: the optimizer changed nothing
// (decided where the step ran).
typedef struct {
    int valid;         // 0: nothing to report (no step read back)
    int step;          // 0-based
    float loss, norm, lr;
    int skipped;       // 1: the norm was not finite; 2: no counted target in the batch (loss mask);
                       // 3: the update would not be finite (op_adamw_check): the weights are unchanged
    int64_t counted;   // [masked loss] targets that count in the step's global batch: the loss's divisor
    double ms;         // from the previous read-back (or the step's start) to this one
    int64_t count[COLL_KINDS], bytes[COLL_KINDS]; // the step's collectives
    double comm_wait_s;
} StepResult;

typedef struct {
    Flags f;
    Launch launch;
    Comm comm;
    Model model;
    DataLoader train, val;
    int has_val;
    Tokenizer tok;
    int has_tok;
    int nprompts;      // -prompt: the prompts as token ids, each after an EOT
    int** prompt_ids;
    int* prompt_len;
    int R, r, GA;
    int max_steps;
    int step;          // optimizer steps done
    int64_t adam_t;    // AdamW updates applied (a skipped step does not count)
    FILE* log;         // rank 0: <out_dir>/log.jsonl
    int log_failed;    // rank 0: a write to the log failed (the run ends with exit code 1)
    double flops_per_token; // for MFU: llm.c's 6N + 6LCT (mfu_flops_per_token)
    // the step's numbers (see train_step): where the step runs, and read back to the host
    StepScalars* scalars;      // the last STEP_SCALARS_FLOATS of g_work's allocation
    StepScalars* scalars_host; // their read-back (page-locked on a GPU)
    int readback_lag;          // 1 (one GPU): a step's numbers are read during the next step; 0: at once
    int pending;               // a step's read-back is issued and not read yet
    StepResult pending_res;    // that step's lr, step and collectives, until its numbers are read
    double t_mark;             // when the last result was read (or the first step began)
    int start_step, skips;     // this run's first step; consecutive skipped steps (-max-skips)
    double t_first, first_s;   // the ETA: when this run's first step was logged, and its time
    double peak_flops;      // [CUDA] the GPU's BF16 dense peak (0: unknown)
    size_t mem_baseline;    // [CUDA] device memory in use after the context and communicator exist
    char tune_choice[128];  // -tune's choice as flags ("-z 2 -r 1"; "" without -tune): into every checkpoint
} Trainer;

// Learning rate at `step` (0-based): linear warmup over `warmup` steps, then the schedule down
// to lr * lr_final at the last step (llm.c's formulas).
static float lr_at(const Flags* f, int step, int max_steps) {
    double peak = f->lr, lo = f->lr * f->lr_final;
    if (step < f->warmup) return (float)(peak * (step + 1) / f->warmup);
    if (!strcmp(f->lr_schedule, "constant")) return (float)peak;
    int span = max_steps - f->warmup;
    double ratio = span > 0 ? (double)(step - f->warmup) / span : 1.0;
    if (ratio > 1.0) ratio = 1.0;
    if (!strcmp(f->lr_schedule, "linear")) return (float)(peak - (peak - lo) * ratio);
    return (float)(lo + 0.5 * (1.0 + cos(M_PI * ratio)) * (peak - lo)); // cosine
}


// Copy a loader's micro-batch into the model's token buffers (through page-locked slots: no host wait).
static void load_tokens(Model* m, const DataLoader* dl, int with_targets) {
    size_t bytes = sizeof(int) * (size_t)dl->B * dl->T;
    dev_upload(m->a.inputs, dl->inputs, bytes);
    if (with_targets) dev_upload(m->a.targets, dl->targets, bytes);
}

// Sum of the first n per-token losses, in order.
static double sum_losses(const Model* m, int n) {
    float* host = (float*)malloc(sizeof(float) * n);
    dev_to_host(host, m->a.losses, sizeof(float) * n);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += host[i];
    free(host);
    return s;
}

// [-data-trace] one line per rank per micro-step: a hash of each of its B samples.
static void trace_batch(const Trainer* tr, int micro) {
    const DataLoader* dl = &tr->train;
    printf("[data] step %d micro %d rank %d:", tr->step, micro, tr->r);
    for (int b = 0; b < dl->B; b++) {
        uint64_t h = fnv1a(FNV_INIT, dl->inputs + (size_t)b * dl->T, sizeof(int) * dl->T);
        h = fnv1a(h, dl->targets + (size_t)b * dl->T + dl->T - 1, sizeof(int));
        printf(" %016llx", (unsigned long long)h);
    }
    printf("\n");
}

// [masked loss] The targets that count in step `step`'s global batch (all ranks, all micro-steps):
// R*GA*B*T without loss masks. Every rank counts the whole batch from the data itself (the batch
// order does not depend on R), so the loss's scale is known before the first backward, with no
// communication, and every rank agrees.
static int64_t step_counted_targets(Trainer* tr, int step) {
    int64_t n = 0;
    for (int micro = 0; micro < tr->GA; micro++)
        for (int q = 0; q < tr->R; q++) n += dataloader_count_targets(&tr->train, ((int64_t)step * tr->GA + micro) * tr->R + q);
    return n;
}

// Read the last issued step's numbers back (waiting for them on a GPU): its StepResult, and adam_t
// counts it if it was finite. Invalid when nothing is pending.
static StepResult step_read_back(Trainer* tr) {
    StepResult r;
    memset(&r, 0, sizeof(r));
    if (!tr->pending) return r;
    r = tr->pending_res;
    r.valid = 1;
    if (r.skipped != 2) { // (a step without counted targets ran nothing on the device)
        dev_read_wait();
        const StepScalars* h = tr->scalars_host;
        r.loss = (float)(h->loss_sum / (double)r.counted);
        r.norm = h->norm;
        r.skipped = !h->finite ? 1 : h->overflow ? 3 : 0;
        if (r.skipped == 0) tr->adam_t++;
    }
    double now = wall_s();
    r.ms = (now - tr->t_mark) * 1000.0;
    tr->t_mark = now;
    tr->pending = 0;
    return r;
}

// [masked loss] A step whose global batch has no counted target: nothing runs, the step is logged
// as skipped (2) in its turn, after the step before it (so the log keeps its order on one GPU).
static StepResult step_without_targets(Trainer* tr) {
    StepResult prev = step_read_back(tr);
    StepResult* pr = &tr->pending_res;
    memset(pr, 0, sizeof(*pr));
    pr->step = tr->step;
    pr->lr = lr_at(&tr->f, tr->step, tr->max_steps);
    pr->skipped = 2;
    tr->pending = 1;
    tr->step++;
    return tr->readback_lag ? prev : step_read_back(tr);
}

// One optimizer step. Its numbers (loss, sum of squares, then norm, clip scale and finite flag:
// StepScalars) are computed where the step runs, and AdamW reads the clip scale and the finite flag
// there: on a GPU the host never waits inside a step. Before the update, a check pass computes the
// update without writing it (zero_adamw_check: the overflow flag, agreed by every rank); an update
// that would leave any value non-finite is not written at all, and the step counts as skipped.
// The step's numbers are copied back asynchronously at its end and read during the next step,
// just before that step's optimizer is issued (the previous step is long finished by then), so
// adam_t counts exactly the updates applied and the log is exact, one step late: train_step returns the *previous* step's result on one GPU
// (readback_lag 1), this step's on the CPU device or with several ranks (lag 0: the numbers are on
// the host already, and the host decides the skip as it always did). step_read_back flushes the last
// one (train_loop: before evaluation, sampling, checkpoints and at the end).
//   per micro-step: no host wait, no device-to-host copy (README: "Host synchronisations")
//   per step:       one device-to-host copy (the scalars, into pinned memory) and one wait (the
//                   previous step's copy); with R > 1 also the scalar sums over ranks (the loss
//                   and norm, then the overflow flag)
static StepResult train_step(Trainer* tr) {
    Model* m = &tr->model;
    Zero* z = &m->z;
    const Flags* f = &tr->f;
    int B = m->B, T = m->T, BT = B * T;
    StepScalars* sc = tr->scalars;
    if (!tr->pending) tr->t_mark = wall_s(); // the step's time starts here (evaluation etc. excluded)
    // [masked loss] the loss is the mean over the counted targets: dloss = 1/count (= 1/(R*GA*B*T)
    // without masks); a step with none is skipped whole (every rank agrees: every rank counts)
    int64_t counted = step_counted_targets(tr, tr->step);
    if (counted == 0) return step_without_targets(tr);
    float dloss = 1.0f / (float)counted;
    dev_zero(sc, sizeof(StepScalars));
    for (int micro = 0; micro < tr->GA; micro++) {
        int64_t unit = ((int64_t)tr->step * tr->GA + micro) * tr->R + tr->r;
        if (dataloader_load(&tr->train, unit) != 0) die_user("-i: %s", tr->train.err);
        if (f->data_trace) trace_batch(tr, micro);
        load_tokens(m, &tr->train, 1);
        gpt_forward(m, B, T, 1, dloss, 1);
        op_loss_add(sc, m->a.losses, BT); // the loss stays where it is computed
        gpt_backward(m, B, T, micro, micro == tr->GA - 1);
    }
    zero_grad_sumsq(z, sc);            // the gradient's sum of squares (one launch), summed over ranks
    op_step_scalars(sc, f->grad_clip); // norm, clip scale, finite flag
    StepResult prev = step_read_back(tr); // [one GPU] the previous step: adam_t is exact from here
    float lr = lr_at(f, tr->step, tr->max_steps);
    AdamWParams hp = {lr, f->beta1, f->beta2, f->eps, f->weight_decay, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, tr->adam_t + 1); // this update's t, if it is applied
    if (fault_at("lr-spike", tr->r, tr->step + 1)) { // ZT_FAULT (tests): a finite learning rate whose update overflows
        hp.lr = FLT_MAX;
        printf("[rank %d] ZT_FAULT: step %d's AdamW runs with lr %g\n", tr->r, tr->step + 1, (double)hp.lr);
    }
    int apply = 1;
    if (z->offload) { // [offload] the scalars to the host, the overflow check on the host's state, the flag back
        dev_to_host(tr->scalars_host, sc, sizeof(StepScalars));
        offload_adamw_check(z, &hp, tr->scalars_host); // (every rank agrees)
        dev_from_host(&sc->overflow, &tr->scalars_host->overflow, sizeof(sc->overflow));
        apply = tr->scalars_host->finite && !tr->scalars_host->overflow;
    } else {
        zero_adamw_check(z, &hp, sc); // the overflow flag: would any new value not be finite? (every rank agrees)
        if (tr->readback_lag == 0) { // the numbers are on the host already: skip here, as every rank does
            dev_to_host(tr->scalars_host, sc, sizeof(StepScalars));
            apply = tr->scalars_host->finite && !tr->scalars_host->overflow; // (the same sums and flag on every rank)
        }
    }
    if (apply) {
        if (z->offload) offload_adamw(z, &hp, tr->scalars_host); // [offload] on the host, block by block
        else zero_adamw(z, &hp, sc); // [one GPU] a non-finite or overflowing step is skipped on the device
        zero_after_step(z);
    }
    zero_zero_grads(z);
    // issue the read-back; keep what the log needs until it is read
    StepResult* pr = &tr->pending_res;
    memset(pr, 0, sizeof(*pr));
    pr->step = tr->step;
    pr->lr = lr;
    pr->counted = counted;
    memcpy(pr->count, tr->comm.count, sizeof(pr->count));
    memcpy(pr->bytes, tr->comm.bytes, sizeof(pr->bytes));
    pr->comm_wait_s = tr->comm.wait_s;
    dev_to_host_async(tr->scalars_host, sc, sizeof(StepScalars));
    tr->pending = 1;
    tr->step++;
    return tr->readback_lag ? prev : step_read_back(tr);
}

// ----------------------------------------------------------------------------
// 6. Checkpoints. checkpoint.h holds the files and the protocol (nonce per save, DONE then LATEST,
// CRC32C per 1 MiB chunk of state, the model file's checksum in DONE, flock on the directory);
// here the trainer hands it what it needs: the ZeRO state, the config, the step's counters.

static CkptMeta trainer_ckpt_meta(const Trainer* tr) {
    CkptMeta m;
    memset(&m, 0, sizeof(m));
    m.step = tr->step;
    m.adam_t = tr->adam_t;
    m.seed = tr->f.seed;
    m.step_tokens = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T;
    m.train_tokens = dataloader_total_tokens(&tr->train);
    m.writer_R = tr->R;
    snprintf(m.tune, sizeof(m.tune), "%s", tr->tune_choice);
    return m;
}

// Waits around rank 0's checkpoint and export writes use -io-timeout, not -comm-timeout: a
// healthy run on slow storage must not end because rank 0 is still writing. auto: the bytes rank 0
// writes (model file and its state file) at a floor of 50 MB/s, and at least 10 minutes.
static double io_timeout_s(const Trainer* tr) {
    if (tr->f.comm_timeout == 0 || tr->f.io_timeout == 0) return 0; // forever
    if (tr->f.io_timeout > 0) return tr->f.io_timeout;
    double bytes = 1024.0 + (double)tr->model.d.num_params * sizeof(floatX) + 12.0 * tr->model.z.opt_total;
    return fmax(600.0, bytes / 50e6);
}
static double io_wait_begin(Trainer* tr) {
    double saved = tr->comm.timeout_s;
    tr->comm.timeout_s = io_timeout_s(tr);
    tr->comm.timeout_flag = "-io-timeout";
    return saved;
}
static void io_wait_end(Trainer* tr, double saved) {
    tr->comm.timeout_s = saved;
    tr->comm.timeout_flag = NULL;
}

// A checkpoint of the current step: every rank takes part. 0 on success (the same on every rank).
static int save_checkpoint(Trainer* tr, int last) {
    CkptMeta meta = trainer_ckpt_meta(tr);
    int with_model = !strcmp(tr->f.save_model, "1") || (last && !strcmp(tr->f.save_model, "last"));
    double saved = io_wait_begin(tr);
    int rc = ckpt_save(&tr->model.z, &tr->model.cfg, tr->f.out_dir, &meta, with_model, tr->f.ckpt_keep);
    io_wait_end(tr, saved);
    return rc;
}

// The model as a Hugging Face GPT-2 checkpoint (hf.h): config.json + model.safetensors in dir, in
// `dtype`, from the master weights (F32, F16) or the parameters (BF16). Every rank must call it;
// rank 0 writes. On failure nothing is left in dir. Returns 0 on success.
static int write_hf_checkpoint(Model* m, const char* dir, StDtype dtype) {
    const GPTConfig* c = &m->cfg;
    Zero* z = &m->z;
    HFConfig hc = {c->L, c->C, c->NH, c->V, c->maxT};
    HFWriter w;
    char err[1024] = "";
    int ok = 1;
    if (g_rank == 0) {
        if (hf_writer_open(&w, dir, &hc, dtype, err, sizeof(err))) ok = 0;
    }
    size_t maxP = 0;
    for (int b = 0; b < z->lay.nblocks; b++) maxP = (size_t)z->lay.P[b] > maxP ? (size_t)z->lay.P[b] : maxP;
    float* host = (float*)malloc(maxP * sizeof(float));
    for (int b = 0; b < z->lay.nblocks; b++) {
        block_values(z, b, dtype != ST_BF16, host);
        for (int k = 0; g_rank == 0 && ok && k < z->lay.ntensors[b]; k++) {
            const BlockTensor* t = &z->lay.tensors[b][k];
            if (hf_writer_put(&w, m->d.t[t->tensor].name, b == 0 ? 0 : b - 1, host + t->off, err, sizeof(err))) ok = 0;
        }
    }
    free(host);
    if (g_rank != 0) return 0;
    if (ok && hf_writer_commit(&w, err, sizeof(err)) == 0) return 0;
    if (!ok) hf_writer_abort(&w); // (a failed commit has cleaned up already)
    fprintf(stderr, "error: -export-hf %s: %s. HINT: check free disk space and permissions\n", dir, err);
    return -1;
}

// Resume from the checkpoint LATEST names (or -resume-step). Returns 1 if one was loaded.
static int resume_checkpoint(Trainer* tr) {
    CkptMeta got, want = trainer_ckpt_meta(tr);
    if (!ckpt_resume(&tr->model.z, &tr->model.cfg, tr->f.out_dir, tr->f.resume_step, &got)) return 0;
    if (got.seed != want.seed)
        printf0("warning: the checkpoint was trained with -seed %lld, this run has -seed %lld: the data order changes\n", (long long)got.seed, (long long)want.seed);
    if (got.step_tokens != want.step_tokens)
        printf0("warning: the checkpoint used %lld tokens per step, this run %lld: the data position is the step, so samples are skipped or repeated\n",
                (long long)got.step_tokens, (long long)want.step_tokens);
    tr->step = got.step;
    tr->adam_t = got.adam_t;
    printf0("resume: step %d from %s (written by %d rank(s))\n", got.step, tr->f.out_dir, got.writer_R);
    return 1;
}

// ----------------------------------------------------------------------------
// 7. Evaluation and sampling. Every rank runs every forward (under ZeRO-3 each takes part in
// every gather), so every rank computes the same numbers; rank 0 prints them.

// Mean loss over val_steps micro-batches per rank of the val set (unit s*R + r of batch s). Each
// rank reads its own val batches: a rank slow to read them (slow storage) makes the others wait in
// the evaluation's collectives, so those waits use -io-timeout, not -comm-timeout.
static float evaluate(Trainer* tr) {
    double saved = io_wait_begin(tr);
    Model* m = &tr->model;
    int B = m->B, T = m->T;
    int64_t units = tr->val.total_samples / B / tr->R; // whole micro-batches per rank in the val set
    int nb = tr->f.val_steps < 0 || tr->f.val_steps > units ? (int)units : tr->f.val_steps;
    if (nb < 1) nb = 1;
    double sum = 0.0;
    int64_t counted = 0; // [masked loss] every rank counts every rank's targets itself
    for (int s = 0; s < nb; s++) {
        for (int q = 0; q < tr->R; q++) counted += dataloader_count_targets(&tr->val, (int64_t)s * tr->R + q);
        if (dataloader_load(&tr->val, (int64_t)s * tr->R + tr->r) != 0) die_user("-j: %s", tr->val.err);
        load_tokens(m, &tr->val, 1);
        gpt_forward(m, B, T, 1, 0.0f, 0);
        sum += sum_losses(m, B * T);
    }
    comm_sum_doubles(&tr->comm, &sum, 1);
    io_wait_end(tr, saved);
    return counted > 0 ? (float)(sum / (double)counted) : NAN;
}

// Generate gen_tokens tokens after an end-of-text token, sampling from the softmax at
// temperature 1 with the counter-based RNG keyed by (seed, step, position): the same text on
// every rank, and on a rerun or a resume.
// With -prompt: the context is each prompt (after an EOT), printed before its continuation, and a
// sampled EOT ends it (a fine-tuned model has learned where a completion stops).
static void sample_one(Trainer* tr, const int* ctx, int nctx, int prompt) {
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    int n = tr->f.gen_tokens, T = m->T;
    int* gen = (int*)malloc(sizeof(int) * (nctx + n));
    floatX* row = (floatX*)malloc(sizeof(floatX) * c->Vp);
    memcpy(gen, ctx, sizeof(int) * nctx);
    int eot = tr->has_tok && tr->tok.eot_token >= 0 && tr->tok.eot_token < c->V ? tr->tok.eot_token : -1;
    uint64_t key = prompt < 0 ? rng_key((uint64_t)tr->f.seed, 0x53414D504C45ull /* "SAMPLE" */, (uint64_t)tr->step)
                              : rng_key((uint64_t)tr->f.seed ^ ((uint64_t)(prompt + 1) << 40), 0x50524F4D5054ull /* "PROMPT" */, (uint64_t)tr->step);
    if (prompt >= 0) printf0("sample at step %d, prompt %d:\n---\n", tr->step, prompt + 1);
    else printf0("sample at step %d:\n---\n", tr->step);
    for (int i = 1; i < nctx && g_rank == 0; i++) { // the prompt (after its EOT)
        if (tr->has_tok) tokenizer_print(&tr->tok, (uint32_t)ctx[i], stdout);
        else printf("%d ", ctx[i]);
    }
    if (prompt >= 0) printf0(" ->");
    for (int t = nctx; t < nctx + n; t++) {
        int len = t < T ? t : T; // the last T tokens are the context
        dev_from_host(m->a.inputs, gen + t - len, sizeof(int) * len);
        gpt_forward(m, 1, len, 0, 0.0f, 0);
        dev_to_host(row, m->a.logits + (size_t)(len - 1) * c->Vp, sizeof(floatX) * c->Vp);
        double maxv = -INFINITY, sum = 0.0;
        for (int j = 0; j < c->V; j++) maxv = fmax(maxv, ld(row[j]));
        for (int j = 0; j < c->V; j++) sum += exp(ld(row[j]) - maxv);
        double u = rng_uniform(key, (uint64_t)t) * sum, cdf = 0.0;
        int next = c->V - 1;
        for (int j = 0; j < c->V; j++) {
            cdf += exp(ld(row[j]) - maxv);
            if (u <= cdf) { next = j; break; }
        }
        gen[t] = next;
        if (prompt >= 0 && next == eot) break; // every rank samples the same token: every rank stops
        if (g_rank == 0) {
            if (tr->has_tok) tokenizer_print(&tr->tok, (uint32_t)next, stdout);
            else printf("%d ", next);
            fflush(stdout);
        }
    }
    printf0("\n---\n");
    free(gen);
    free(row);
}

static void sample_text(Trainer* tr) {
    if (tr->nprompts == 0) {
        const GPTConfig* c = &tr->model.cfg;
        int start = tr->has_tok && tr->tok.eot_token >= 0 && tr->tok.eot_token < c->V ? tr->tok.eot_token : 0;
        sample_one(tr, &start, 1, -1);
    }
    for (int p = 0; p < tr->nprompts; p++) sample_one(tr, tr->prompt_ids[p], tr->prompt_len[p], p);
}

// -prompt "text" or -prompt @FILE (one prompt per non-empty line): each encoded with our GPT-2 BPE
// after an EOT.
static void load_prompts(Trainer* tr, int V) {
    const Flags* f = &tr->f;
    char err[1024];
    if (!tr->has_tok && tokenizer_init(&tr->tok, f->tokenizer, err, sizeof(err))) die_user("-prompt needs the tokenizer: -tokenizer: %s", err);
    tr->has_tok = 1;
    if (tokenizer_load_merges(&tr->tok, f->merges, err, sizeof(err))) die_user("-prompt needs the merges to encode: -merges: %s", err);
    char* text = NULL;
    size_t len = 0;
    if (f->prompt[0] == '@') {
        FILE* pf = fopen(f->prompt + 1, "rb");
        if (!pf) die_user("-prompt %s: cannot open: %s", f->prompt, strerror(errno));
        fseek(pf, 0, SEEK_END);
        long n = ftell(pf);
        fseek(pf, 0, SEEK_SET);
        text = (char*)malloc((size_t)n + 1);
        len = fread(text, 1, (size_t)n, pf);
        fclose(pf);
    } else {
        text = strdup(f->prompt);
        len = strlen(text);
    }
    text[len] = 0;
    int eot = tr->tok.eot_token >= 0 && tr->tok.eot_token < V ? tr->tok.eot_token : 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = f->prompt[0] == '@' ? strchr(line, '\n') : NULL;
        if (next) *next++ = 0;
        if (!*line) continue;
        uint16_t* ids = NULL;
        size_t nids = 0, cap = 0;
        if (tokenizer_encode(&tr->tok, (const unsigned char*)line, strlen(line), &ids, &nids, &cap)) die(1, "-prompt: out of memory");
        tr->prompt_ids = (int**)realloc(tr->prompt_ids, sizeof(int*) * (tr->nprompts + 1));
        tr->prompt_len = (int*)realloc(tr->prompt_len, sizeof(int) * (tr->nprompts + 1));
        int* p = (int*)malloc(sizeof(int) * (nids + 1));
        p[0] = eot;
        for (size_t i = 0; i < nids; i++) {
            if (ids[i] >= V) die_user("-prompt: '%s' encodes to token %u, outside the model's vocabulary (V = %d)", line, (unsigned)ids[i], V);
            p[i + 1] = ids[i];
        }
        tr->prompt_ids[tr->nprompts] = p;
        tr->prompt_len[tr->nprompts++] = (int)nids + 1;
        free(ids);
    }
    free(text);
    if (tr->nprompts == 0) die_user("-prompt %s: no prompt in it", f->prompt);
}

// ----------------------------------------------------------------------------
// 8. Sizing: one pure function from the configuration to the bytes of every tag on one rank
// (plan_config), which the allocator follows (trainer_setup checks every tag against it), the
// communication schedule of a step, an estimate of the step time, -plan, and -z / -r auto.
// Nothing here allocates the model.

typedef struct {
    int stage, recompute, offload;  // offload: the optimizer state lives on the host (-offload cpu)
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
    double compute_s, comm_s, step_s;
    double free;                    // memory per rank minus total (negative: over by that much)
    int fits;                       // 1: leaves at least the headroom free (plan_headroom); only these are chosen
} PlanRow;

typedef struct {
    double mem;          // bytes per rank
    char mem_src[96];
    double headroom;     // bytes a row must leave free to fit (plan_headroom)
    double flops;        // FLOP/s per rank
    char flops_src[160];
    double link;         // bytes/s per rank and direction
    const char* link_src;
    double pcie;         // [offload] host<->device bytes/s per rank and direction
    const char* pcie_src;
    double host_mem;     // [offload] host memory per node (on the CPU device: unused, it is the device memory)
    char host_src[96];
    double disk;         // [nvme] bytes/s per node and direction
    const char* disk_src;
    double offload_buffer; // [nvme] -offload-buffer's bytes
    int nvme_ok;         // [nvme] -offload-dir was given: -z auto may choose nvme
    int ckpt_kept;       // checkpoints on disk at once at the peak (-n, -nk, -x); -1: not known (-x -1 without -nk)
    int ckpt_models;     // how many of them hold a model file (-save-model)
} PlanEnv;

// [offload] The host AdamW's rate, bytes of state moved per second per rank (per element: the
// gradient read, master, m, v read and written, the parameter written): an assumption, printed.
#define PLAN_HOST_ADAMW_GBS 4.0

// The headroom rule: a configuration fits only if it leaves max(5% of the memory, 1 GiB) free per
// rank, for what no tag counts: the CUDA context, NCCL's and cuBLAS's buffers, allocator rounding
// and fragmentation (on the CPU: the process, MPI's buffers, the page cache others need).
#define PLAN_HEADROOM_TEXT "max(5%% of the memory, 1 GiB)" // a printf format
static double plan_headroom(double mem) { return fmax(0.05 * mem, 1073741824.0); }

// Bytes of every tag on one rank and the collectives of one step, for a configuration.
static void plan_config(const GPTConfig* c, int B, int T, int R, int GA, int stage, int recompute, Offload offload, double offload_buffer,
                        PlanRow* p) {
    memset(p, 0, sizeof(*p));
    p->stage = stage;
    p->recompute = recompute;
    p->offload = offload;
    ModelDesc d;
    model_describe(&d, c);
    BlockLayout lay;
    model_layout(&d, &lay, R, 0);
    ZeroSizes s = zero_sizes(&lay, stage);
    size_t X = sizeof(floatX), acts, logits;
    acts_bytes(c, B, T, recompute, &acts, &logits);
    p->bytes[TAG_PARAMS] = X * (s.full_params + s.shard_params);
    p->bytes[TAG_PARAM_BUF] = X * s.param_bufs;
    p->bytes[TAG_GRADS] = 4 * (s.full_grads + s.shard_grads);
    p->bytes[TAG_GRAD_BUF] = 4 * s.grad_bufs;
    p->bytes[TAG_MASTER] = p->bytes[TAG_ADAM_M] = p->bytes[TAG_ADAM_V] = offload ? 0 : 4 * s.opt; // [offload] on the host
    p->host_bytes = offload_host_bytes(&lay, offload, offload_buffer);
    // [offload] the FP32 gradient shard down (cpu: block by block during the backward, the io block,
    // reduced last, after it; nvme: at the step, once while the overflow check is proved by its bound,
    // the steady state: adamw_bound_finite) and the floatX parameters up
    p->pcie_bytes = offload ? (double)(4 + X) * s.opt : 0.0;
    p->pcie_d2h_hidden = offload == OFFLOAD_CPU ? 4.0 * (double)(s.opt - lay.S[0]) : 0.0;
    p->state_bytes = offload ? 12.0 * (double)s.opt : 0.0;
    p->bytes[TAG_ACTS] = acts;
    p->bytes[TAG_LOGITS] = logits;
    p->bytes[TAG_COMM] = 4 * s.comm;
    p->bytes[TAG_WORK] = 4 * ops_workspace_floats(c, B, T, s.opt);
    for (int t = 0; t < TAG_COUNT; t++) p->total += p->bytes[t];
    // the schedule per step (what the log counts: each collective's full buffer), from the hooks
    // themselves run in counting mode (zero_count_step), and what a rank sends of it with ring
    // algorithms: (R-1)/R of each all-gather and reduce-scatter, twice that of an all-reduce
    zero_count_step(&lay, stage, GA, p->coll_count, p->coll_bytes);
    double ring = (double)(R - 1) / R;
    p->traffic = ring * ((double)p->coll_bytes[COLL_ALL_GATHER] + (double)p->coll_bytes[COLL_REDUCE_SCATTER] + 2.0 * (double)p->coll_bytes[COLL_ALL_REDUCE]);
    layout_free(&lay);
}

// FLOPs per trained token for the planner's time estimate: PaLM's 6 N + 12 L C T for forward and
// backward (attention's QK^T and AV counted in full), plus one more forward of the layers when -r 3
// recomputes them (2 N_layers + 4 L C T). The other modes recompute elementwise ops only, which this
// count ignores. (MFU uses llm.c's count instead: mfu_flops_per_token.)
static double plan_flops_per_token(const GPTConfig* c, int T, int recompute) {
    ModelDesc d;
    model_describe(&d, c);
    double N = (double)d.num_params, L = c->L, C = c->C;
    double f = 6.0 * N + 12.0 * L * C * T;
    if (recompute == 3) f += 2.0 * (N - (double)c->Vp * C - (double)c->maxT * C) + 4.0 * L * C * T;
    return f;
}

// FLOPs per trained token for MFU: llm.c's count, 6 N + 6 L C T (gpt2_estimate_mfu: N all parameters,
// padded vocabulary rows included; the attention term halved for causality; no recompute), so that
// our MFU compares with llm.c's published numbers. PaLM's 12 L C T would read higher: ~7% for d12,
// ~5% for d48 at T = 1024.
static double mfu_flops_per_token(const GPTConfig* c, int T) {
    ModelDesc d;
    model_describe(&d, c);
    return 6.0 * (double)d.num_params + 6.0 * c->L * (double)c->C * T;
}

// BF16 dense peak of a GPU from its name (TFLOP/s, vendor datasheets), 0 when unknown: MFU then
// prints "n/a". The name is the device's ("NVIDIA H100 80GB HBM3") or a user's -gpu ("h100"):
// matched case-insensitively, more specific names first (an "H100 PCIe" is also an "H100").
static const struct { const char* part; double tflops; } g_gpu_peaks[] = {
    {"H200 NVL", 835}, {"H100 NVL", 835}, {"H100 PCIe", 756}, {"H200", 989}, {"H100", 989},
    {"GH200", 989}, {"A100", 312}, {"A800", 312}, {"L40S", 362}, {"L4", 121}, {"A10", 125},
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

// Link bandwidth per rank when -link-gbps is auto, Gbit/s per direction: on cuda NVLink-class while
// the ranks fit one 8-GPU node, an InfiniBand NDR port per GPU beyond; on cpu, shared memory.
static double plan_link_gbps_default(int R) { return g_device == DEV_CUDA ? (R <= 8 ? 3600.0 : 400.0) : 80.0; }

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
        e->flops = 0.5 * g_gpu_peaks[i].tflops * 1e12;
        snprintf(e->flops_src, sizeof(e->flops_src), "assumed: 50%% of the %s's %.0f TFLOP/s BF16 dense peak (GPU: %s)", g_gpu_peaks[i].part,
                 g_gpu_peaks[i].tflops, name);
    } else {
        double lo, hi;
        e->flops = measure_cpu_flops(&lo, &hi);
        snprintf(e->flops_src, sizeof(e->flops_src), "measured: median of %d matmuls by CPU time, %.3g..%.3g, %d threads%s; -tflops fixes it",
                 PLAN_FLOPS_REPS, lo / 1e12, hi / 1e12, num_threads(), g_use_blas ? ", -blas 1" : "");
    }
    double gbps = f->link_gbps > 0 ? f->link_gbps : plan_link_gbps_default(R);
    e->link = gbps * 1e9 / 8.0;
    e->link_src = f->link_gbps > 0           ? "-link-gbps"
                  : g_device == DEV_CPU      ? "default: shared memory"
                  : R <= 8                   ? "default: NVLink-class, one node"
                                             : "default: InfiniBand-class, across nodes";
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
    if (hm && *hm) {
        e->host_mem = parse_size(hm);
        if (e->host_mem <= 0) die_user("ZT_HOST_MEM='%s' is not a memory size (examples: 512GiB, 64MiB)", hm);
        snprintf(e->host_src, sizeof(e->host_src), "ZT_HOST_MEM");
    } else {
        e->host_mem = mem_available_bytes();
        snprintf(e->host_src, sizeof(e->host_src), "available host memory on this node");
    }
}

// Every stage x recompute row (and the offload rows), with fit and time: at most PLAN_MAX_ROWS.
#define PLAN_MAX_ROWS 48 // 4 stages x 4 recompute modes x 3 places of the optimizer state
static int plan_rows(const GPTConfig* c, int B, int T, int R, int GA, int local_ranks, const PlanEnv* e, PlanRow* rows) {
    int n = 0;
    // the checkpoints kept, on the node of rank 0 (the model files and ranks 0 .. local_ranks-1's
    // state files, the largest share: the same for every row, the files are stage-independent)
    size_t ckpt = 0;
    if (e->ckpt_kept > 0) {
        ModelDesc d;
        model_describe(&d, c);
        BlockLayout lay;
        model_layout(&d, &lay, R, 0);
        int64_t states = 0;
        for (int q = 0; q < local_ranks && q < R; q++) states += ckpt_state_file_bytes(&lay, q);
        ckpt = (size_t)e->ckpt_kept * (size_t)states + (size_t)e->ckpt_models * (size_t)ckpt_model_file_bytes(&lay);
        layout_free(&lay);
    }
    for (int z = 0; z <= 3; z++) {
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            plan_config(c, B, T, R, GA, z, r, OFFLOAD_NONE, 0, p);
            p->compute_s = plan_flops_per_token(c, T, r) * B * T * GA / e->flops;
            p->comm_s = p->traffic / e->link;
            p->step_s = p->compute_s + p->comm_s; // no overlap assumed
            p->ckpt_per_node = p->disk_per_node = ckpt;
            p->free = e->mem - (double)p->total;
            p->fits = p->free >= e->headroom;
        }
    }
    // [offload] master, m, v and the pinned staging on the host (ZeRO-1..3; -z 0 refuses offload):
    // the device holds the rest; the step adds the copies and the host AdamW (no overlap assumed),
    // but with cpu the gradient copies of all blocks but the last reduced run during the backward
    // (2/3 of the compute): only what exceeds it counts.
    // On the CPU device the host is the device: the host bytes count against the same memory.
    // [nvme] the same with the state in a file per rank: the host holds -offload-buffer; the step also
    // reads and writes the state once at the node's disk bandwidth, shared by its ranks.
    for (int k = OFFLOAD_CPU; k <= OFFLOAD_NVME; k++)
    for (int z = 1; z <= 3; z++)
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            plan_config(c, B, T, R, GA, z, r, (Offload)k, e->offload_buffer, p);
            double state = p->state_bytes; // master, m, v of the shard: 12 bytes an element
            p->compute_s = plan_flops_per_token(c, T, r) * B * T * GA / e->flops;
            p->comm_s = p->traffic / e->link;
            double hidden = p->pcie_d2h_hidden / e->pcie; // [cpu] the copies under the backward
            p->pcie_s = (p->pcie_bytes - p->pcie_d2h_hidden) / e->pcie + fmax(0.0, hidden - 2.0 / 3.0 * p->compute_s);
            p->host_s = state / (PLAN_HOST_ADAMW_GBS * 1e9); // the state's bytes, each read and written once
            double files = k == OFFLOAD_NVME ? state * local_ranks : 0.0; // [nvme] the offload files
            p->disk_s = 2.0 * files / e->disk;
            p->ckpt_per_node = ckpt;
            p->disk_per_node = (size_t)files + ckpt;
            p->step_s = p->compute_s + p->comm_s + p->pcie_s + p->host_s + p->disk_s;
            p->host_per_node = p->host_bytes * (size_t)local_ranks;
            if (g_device == DEV_CPU) {
                p->free = e->mem - (double)p->total - (double)p->host_bytes;
                p->fits = p->free >= e->headroom;
            } else {
                p->free = e->mem - (double)p->total;
                p->fits = p->free >= e->headroom && e->host_mem - (double)p->host_per_node >= plan_headroom(e->host_mem);
            }
        }
    return n;
}

// The recommendation: among the rows that fit with the headroom, the lowest estimated step time;
// ties (within 1%) go to the lower stage, then to less recompute, the order users are taught.
// With R > 1 ZeRO-0 is never chosen: ZeRO-1 sends less (BF16 gather instead of FP32) in less memory.
// stage / recompute >= 0 fix that choice. kinds: a mask of the offload kinds allowed (1 << OFFLOAD_*),
// tried in order: none, then cpu only when no row without offload fits, then nvme only when no cpu
// row fits either. Returns the row index or -1.
static int plan_choose(const PlanRow* rows, int n, int R, int stage, int recompute, int kinds) {
    int best = -1;
    for (int pass = OFFLOAD_NONE; pass <= OFFLOAD_NVME && best < 0; pass++) {
        if (!(kinds & (1 << pass))) continue;
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[i];
            if (p->offload != pass || !p->fits || (R > 1 && p->stage == 0 && stage != 0)) continue;
            if ((stage >= 0 && p->stage != stage) || (recompute >= 0 && p->recompute != recompute)) continue;
            if (best < 0 || p->step_s < rows[best].step_s * 0.99) best = i; // rows come in (stage, recompute) order
        }
    }
    return best;
}
// -offload as plan_choose's mask: auto: none, cpu, and nvme when -offload-dir says where; else that kind.
static int plan_offload_arg(const Flags* f) {
    if (strcmp(f->offload, "auto")) return 1 << offload_parse(f->offload);
    return 1 << OFFLOAD_NONE | 1 << OFFLOAD_CPU | (f->offload_dir[0] ? 1 << OFFLOAD_NVME : 0);
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
    plan_config(c, B, T, R, GA, 3, 3, OFFLOAD_NONE, 0, &p);
    size_t fixed = p.bytes[TAG_ACTS] + p.bytes[TAG_LOGITS] + p.bytes[TAG_WORK] + p.bytes[TAG_PARAM_BUF] + p.bytes[TAG_GRAD_BUF];
    double usable = e->mem - e->headroom;
    int n = snprintf(out, cap, "nothing fits in %s per rank (%s) less the headroom of %s (" PLAN_HEADROOM_TEXT "): the smallest, "
                     "ZeRO-3 with -r 3, needs %s at R = %d", fmt_bytes(e->mem).s, e->mem_src, fmt_bytes(e->headroom).s,
                     fmt_bytes((double)p.total).s, R);
    int Rfit = 0;
    for (int r2 = R + 1; r2 <= 65536 && !Rfit; r2 *= 2) {
        PlanRow q;
        plan_config(c, B, T, r2, GA, 3, 3, OFFLOAD_NONE, 0, &q);
        if (q.total <= usable) Rfit = r2;
    }
    if (Rfit) n += snprintf(out + n, cap - n, "; with %d ranks it would fit", Rfit);
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
    int n = plan_rows(c, f->B, f->T, R, GA, local, &e, rows);
    ModelDesc d;
    model_describe(&d, c);
    printf0("plan: L %d C %d NH %d V %d (padded %d): Psi = %lld parameters; B %d x T %d x R %d x GA %d; %s%s %s\n", c->L, c->C, c->NH,
            c->V, c->Vp, (long long)d.num_params, f->B, f->T, R, GA, g_device == DEV_CUDA ? "cuda, GPU " : "cpu",
            g_device == DEV_CUDA ? gpu_model_name(f) : "", PRECISION_NAME);
    printf0("  memory per rank %s (%s); headroom %s, " PLAN_HEADROOM_TEXT ": a row fits only if it leaves that free\n",
            fmt_bytes(e.mem).s, e.mem_src, fmt_bytes(e.headroom).s);
    printf0("  compute %.3g TFLOP/s per rank (%s); link %.0f Gbit/s (%s)\n", e.flops / 1e12, e.flops_src, e.link * 8 / 1e9, e.link_src);
    if (g_device == DEV_CPU)
        printf0("  offload rows (-r N o): master, m, v on the host, which on the CPU device is the same memory (a code path, not a saving); "
                "host<->device copies at %.0f Gbit/s (%s), host AdamW at %.3g GB/s of state per rank (assumed)\n",
                e.pcie * 8 / 1e9, e.pcie_src, PLAN_HOST_ADAMW_GBS);
    else
        printf0("  offload rows (-r N o): master, m, v on the host, %s per node (%s) less the headroom; host<->device %.0f Gbit/s per rank (%s), "
                "host AdamW at %.3g GB/s of state per rank (assumed)\n",
                fmt_bytes(e.host_mem).s, e.host_src, e.pcie * 8 / 1e9, e.pcie_src, PLAN_HOST_ADAMW_GBS);
    printf0("per rank, by tag (activations: one micro-batch; est s/step: compute + communication, no overlap assumed):\n");
    int w[TAG_COUNT];
    printf0("| z | -r  |");
    for (int t = 0; t < TAG_COUNT; t++) {
        w[t] = (int)strlen(mem_tag_name[t]) > 9 ? (int)strlen(mem_tag_name[t]) : 9;
        printf0(" %*s |", w[t], mem_tag_name[t]);
    }
    printf0("     total |      free | fits  | comm/step | est s/step | host/node | disk/node |\n");
    for (int i = 0; i < n; i++) {
        const PlanRow* p = &rows[i];
        if (p->offload) printf0("| %d | %d %c |", p->stage, p->recompute, p->offload == OFFLOAD_NVME ? 'n' : 'o');
        else printf0("| %d | %d   |", p->stage, p->recompute);
        for (int t = 0; t < TAG_COUNT; t++) printf0(" %*s |", w[t], p->bytes[t] ? fmt_bytes((double)p->bytes[t]).s : "-");
        int64_t cb = 0;
        for (int k = 0; k < COLL_KINDS; k++) cb += p->coll_bytes[k];
        printf0(" %9s | %9s | %-5s | %9s | %10.3g | %9s | %9s |\n", fmt_bytes((double)p->total).s, fmt_bytes(p->free).s,
                p->fits ? "yes" : p->free >= 0 ? "tight" : "no", fmt_bytes((double)cb).s, p->step_s,
                p->offload ? fmt_bytes((double)p->host_per_node).s : "-", p->disk_per_node ? fmt_bytes((double)p->disk_per_node).s : "-");
    }
    printf0("fits: yes = leaves at least the headroom free; tight = fits in the memory but leaves less (never chosen); no = does not fit\n");
    printf0("-r N o: -offload cpu (master, m, v and pinned staging on the host: host/node; total is on the device%s); est s/step adds the "
            "copies (the gradient's run during the backward: only what exceeds it counts) and the host AdamW; chosen only when no row without offload fits\n", g_device == DEV_CPU ? ", free counts the host bytes too" : "");
    printf0("-r N n: -offload nvme (the state in a file per rank: disk/node, with the checkpoints kept; the host holds -offload-buffer %s per rank "
            "and the staging); est s/step also reads and writes the state at %.0f Gbit/s per node (%s); chosen only when no cpu row fits, "
            "and with -z auto only when -offload-dir is given\n", fmt_bytes(e.offload_buffer).s, e.disk * 8 / 1e9, e.disk_src);
    if (e.ckpt_kept > 0)
        printf0("disk/node: %d checkpoint%s on disk at once (-n %d, -nk %d, -x %d, -save-model %s: %d with a model file), %s on the node of "
                "rank 0 (its %d rank%s' state files and the model files; markers not counted)\n", e.ckpt_kept, e.ckpt_kept > 1 ? "s" : "",
                f->ckpt_every, f->ckpt_keep, f->max_steps, f->save_model, e.ckpt_models, fmt_bytes((double)rows[0].ckpt_per_node).s,
                local < R ? local : R, (local < R ? local : R) > 1 ? "s" : "");
    else if (e.ckpt_kept < 0)
        printf0("disk/node: checkpoints not counted: -x -1 (one epoch) with -nk 0 keeps every one, how many the data decides. HINT: -nk N\n");
    int best = plan_choose(rows, n, R, -1, -1, plan_offload_arg(f));
    if (best < 0) {
        char why[1024];
        plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
        printf0("recommendation: none: %s\n", why);
    } else {
        const PlanRow* p = &rows[best];
        printf0("recommendation: -z %d -r %d%s%s: %suses %s of %s per rank, leaving %s (headroom %s), and has the lowest estimated step time, "
                "%.3g s (compute %.3g s, communication %.3g s%s)%s\n", p->stage, p->recompute, p->offload ? " -offload " : "",
                p->offload ? offload_name((Offload)p->offload) : "",
                p->offload ? "nothing fits without offload; " : "", fmt_bytes((double)p->total).s, fmt_bytes(e.mem).s,
                fmt_bytes(p->free).s, fmt_bytes(e.headroom).s, p->step_s, p->compute_s, p->comm_s, p->offload ? ", host copies and AdamW" : "",
                R > 1 ? "; ZeRO-0 is never chosen with R > 1 (ZeRO-1 sends less in less memory)" : "");
    }
    if (f->out_dir[0] && g_rank == 0) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/plan.jsonl", f->out_dir);
        FILE* fp = fopen(path, "w");
        if (!fp) die_user("-o: cannot write %s: %s", path, strerror(errno));
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[i];
            fprintf(fp, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d", p->stage, p->recompute, p->offload, R, GA);
            for (int t = 0; t < TAG_COUNT; t++) fprintf(fp, ", \"%s\": %zu", mem_tag_name[t], p->bytes[t]);
            fprintf(fp, ", \"total\": %zu, \"fits\": %d, \"step_s\": %.6g, \"recommended\": %d", p->total, p->fits, p->step_s, i == best);
            fprintf(fp, ", \"mem\": %.0f, \"free\": %.0f, \"headroom\": %.0f, \"compute_s\": %.6g, \"comm_s\": %.6g, \"flops\": %.6g",
                    e.mem, p->free, e.headroom, p->compute_s, p->comm_s, e.flops);
            fprintf(fp, ", \"host_bytes\": %zu, \"host_per_node\": %zu, \"pcie_bytes\": %.0f, \"pcie_s\": %.6g, \"host_s\": %.6g",
                    p->host_bytes, p->host_per_node, p->pcie_bytes, p->pcie_s, p->host_s);
            fprintf(fp, ", \"disk_per_node\": %zu, \"ckpt_per_node\": %zu, \"disk_s\": %.6g", p->disk_per_node, p->ckpt_per_node, p->disk_s);
            for (int k = 0; k < COLL_KINDS; k++) fprintf(fp, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)p->coll_count[k], (long long)p->coll_bytes[k]);
            fprintf(fp, "}\n");
        }
        fclose(fp);
    }
}

// The settings table shows the planner's inputs as resolved (rank 0, which plans, prints it).
static void plan_env_show(Flags* f, const PlanEnv* e) {
    if (f->tflops == 0) FLAG_SHOW(f, tflops, "%.3g (%s)", e->flops / 1e12, g_device == DEV_CPU ? "measured" : "assumed");
    if (f->link_gbps == 0) FLAG_SHOW(f, link_gbps, "%.0f", e->link * 8 / 1e9);
    if (f->pcie_gbps == 0) FLAG_SHOW(f, pcie_gbps, "%.0f (%s)", e->pcie * 8 / 1e9, e->pcie_src);
    if (f->disk_gbps == 0) FLAG_SHOW(f, disk_gbps, "%.0f (%s)", e->disk * 8 / 1e9, e->disk_src);
    if (!f->gpu_mem[0]) FLAG_SHOW(f, gpu_mem, "%s (%s)", fmt_bytes(e->mem).s, e->mem_src);
}

// -z auto / -r auto: rank 0 plans with its own view of the memory and broadcasts the choice, so
// ranks that see different free memory never choose differently. One line says what and why.
static void choose_config(Flags* f, const GPTConfig* c, int R, const Launch* L, Comm* comm) {
    int choice[3] = {f->zero_stage, f->recompute, 0};
    char why[1024] = "";
    if (g_rank == 0) {
        int GA = plan_GA(f, R);
        PlanEnv e;
        plan_env(f, L, R, &e);
        PlanRow rows[PLAN_MAX_ROWS];
        int n = plan_rows(c, f->B, f->T, R, GA, L->local_world, &e, rows);
        int best = plan_choose(rows, n, R, f->zero_stage, f->recompute, plan_offload_arg(f));
        plan_env_show(f, &e);
        if (best < 0) {
            plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
            choice[0] = -2;
        } else {
            choice[0] = rows[best].stage;
            choice[1] = rows[best].recompute;
            choice[2] = rows[best].offload;
            snprintf(why, sizeof(why), "%suses %s of %s per rank (%s), leaving %s (headroom %s, " PLAN_HEADROOM_TEXT "), estimated %.3g s/step",
                     rows[best].offload == OFFLOAD_CPU && !strcmp(f->offload, "auto") ? "nothing fits without offload, so the optimizer state goes to the host; "
                     : rows[best].offload == OFFLOAD_NVME && !strcmp(f->offload, "auto") ? "nothing fits without offload nor with it in host memory, so the optimizer state goes to -offload-dir; " : "",
                     fmt_bytes((double)rows[best].total).s, fmt_bytes(e.mem).s, e.mem_src, fmt_bytes(rows[best].free).s,
                     fmt_bytes(e.headroom).s, rows[best].step_s);
        }
    }
    comm_broadcast(comm, choice, sizeof(choice), 0);
    if (choice[0] == -2) die_user("-z auto: %s", g_rank == 0 ? why : "rank 0 found no configuration that fits (see its message)");
    printf0("auto: -z %d -r %d%s%s chosen: %s\n", choice[0], choice[1], choice[2] ? " -offload " : "", choice[2] ? offload_name((Offload)choice[2]) : "", why);
    if (!strcmp(f->offload, "auto")) snprintf(f->offload, sizeof(f->offload), "%s", offload_name((Offload)choice[2]));
    f->zero_stage = choice[0];
    f->recompute = choice[1];
    snprintf(f->zero_stage_str, sizeof(f->zero_stage_str), "%d", choice[0]);
    snprintf(f->recompute_str, sizeof(f->recompute_str), "%d", choice[1]);
}

// ----------------------------------------------------------------------------
// 9. Setup, the loop, main.

// Replace "auto" defaults by the device's, then convert every flag.
static void resolve_defaults(Flags* f, Device dev) {
    int cpu = dev == DEV_CPU;
#define AUTO(field, cpu_value, cuda_value) \
    if (!strcmp(f->field##_str, "auto")) snprintf(f->field##_str, sizeof(f->field##_str), "%s", cpu ? cpu_value : cuda_value);
    AUTO(model, "tiny", "d12");
    AUTO(B, "8", "16");
    AUTO(T, "64", "1024");
    AUTO(max_steps, "300", "-1");
    AUTO(lr, "1e-3", "6e-4");
    AUTO(val_every, "25", "250");
    AUTO(sample_every, "100", "500");
    AUTO(zero_stage, "-1", "-1"); // decided after start-up by the planner (choose_config)
    AUTO(recompute, "-1", "-1");
    AUTO(link_gbps, "0", "0");    // 0: the device's default, resolved by plan_env
    AUTO(tflops, "0", "0");
    AUTO(pcie_gbps, "0", "0");    // 0: plan_env's default
    AUTO(disk_gbps, "0", "0");
    AUTO(io_timeout, "-1", "-1"); // -1: from the bytes rank 0 writes (io_timeout_s)
#ifdef ZT_DEBUG
    AUTO(poison, "1", "1");
#else
    AUTO(poison, "0", "0");
#endif
    AUTO(warmup, "-1", "-1");     // 5% of the steps, once their number is known (trainer_setup)
#undef AUTO
    if (!strcmp(f->device_str, "auto")) snprintf(f->device_str, sizeof(f->device_str), "%s", cpu ? "cpu" : "cuda");
    flags_convert(f);
}

// Which device: -device, or a GPU when one is present. -plan may plan for cuda without a GPU (or
// without CUDA in the build): it allocates nothing, and sizes come from -gpu-mem and -gpu.
static Device pick_device(const char* want, int plan) {
    if (strcmp(want, "auto") && strcmp(want, "cpu") && strcmp(want, "cuda"))
        die_user("flag -device: '%s' is not cpu, cuda or auto", want);
    int gpus = 0;
    const char* why = NULL; // the CUDA runtime's reason when it sees no GPU (a too-old driver, ...)
#ifdef __CUDACC__
    gpus = cuda_device_count(&why);
#endif
    if (!strcmp(want, "cuda")) {
        if (plan && gpus == 0) return DEV_CUDA;
#ifndef __CUDACC__
        die_user("-device cuda: this build has no CUDA (built with g++). HINT: install the CUDA toolkit and rebuild with make train, or use -device cpu");
#endif
        if (gpus == 0 && why) die(1, "-device cuda: the CUDA runtime cannot use the GPUs: %s", why);
        if (gpus == 0) die_user("-device cuda: no GPU found (cudaGetDeviceCount). HINT: use -device cpu");
        return DEV_CUDA;
    }
    if (!strcmp(want, "cpu")) return DEV_CPU;
    if (gpus == 0 && why) printf0("note: -device auto takes the CPU: the CUDA runtime cannot use the GPUs: %s\n", why);
    return gpus > 0 ? DEV_CUDA : DEV_CPU;
}

// The largest model sizes accepted: far beyond any GPU today, small enough that every element
// count and byte offset fits in 64 bits and every per-tensor row count in int.
#define MODEL_MAX_L 4096
#define MODEL_MAX_C 65536
#define MODEL_MAX_T (1 << 20)
#define MODEL_MAX_V (1 << 24)
#define MODEL_MAX_PARAMS 1e13
#define GEN_MAX_TOKENS 1000000

// The model's shape: -e (descriptor or file) and the override flags; everything checked.
static void model_config(const Flags* f, GPTConfig* c, int* from_file) {
    memset(c, 0, sizeof(*c));
    *from_file = 0;
    if (model_from_descriptor(f->model, c) != 0) {
        struct stat st;
        if (stat(f->model, &st) != 0)
            die_user("-e %s: neither a model descriptor (tiny, d6, d12, d24, d36, d48, d60, d72, d84) nor a readable file: %s", f->model, strerror(errno));
        if (hf_is_checkpoint_path(f->model)) { // a Hugging Face GPT-2 (hf.h)
            HFCheckpoint ck;
            char err[2048];
            if (hf_open(&ck, f->model, err, sizeof(err))) die_user("-e %s", err);
            c->L = ck.cfg.L; c->C = ck.cfg.C; c->NH = ck.cfg.NH; c->V = ck.cfg.V; c->maxT = ck.cfg.maxT;
            hf_close(&ck);
            *from_file = 2;
        } else {
            ModelFile mf;
            model_file_open(&mf, f->model, c);
            close(mf.fd);
            *from_file = 1;
        }
        if (f->layers || f->channels || f->heads || f->max_seq || f->vocab)
            die_user("-e %s is a model file: its shape is fixed, so -layers/-channels/-heads/-max-seq/-vocab cannot change it", f->model);
    }
    if (f->layers) c->L = f->layers;
    if (f->channels) c->C = f->channels;
    if (f->heads) c->NH = f->heads;
    if (f->max_seq) c->maxT = f->max_seq;
    if (f->vocab) c->V = f->vocab;
    if (*from_file != 1) c->Vp = (int)round_up(c->V, 128); // an llm.c file says its Vp
    if (c->L < 1 || c->C < 1 || c->NH < 1 || c->maxT < 1 || c->V < 2)
        die_user("model: L %d, C %d, NH %d, max-seq %d, V %d: every size must be positive (V at least 2)", c->L, c->C, c->NH, c->maxT, c->V);
    // bounds that keep every size and index in range (a model file's header is data too)
    const char* src = *from_file ? f->model : NULL;
    struct { const char* flag; int value, max; } bound[] = {
        {"-layers", c->L, MODEL_MAX_L}, {"-channels", c->C, MODEL_MAX_C}, {"-max-seq", c->maxT, MODEL_MAX_T}, {"-vocab", c->V, MODEL_MAX_V},
    };
    for (size_t i = 0; i < sizeof(bound) / sizeof(bound[0]); i++)
        if (bound[i].value > bound[i].max)
            die_user("%s%s %d is above %d, the most this program supports", src ? src : "flag ", src ? ": its header's" : bound[i].flag, bound[i].value, bound[i].max);
    double params = ((double)c->Vp + c->maxT) * c->C + (double)c->L * (12.0 * c->C * c->C + 13.0 * c->C);
    if (params > MODEL_MAX_PARAMS)
        die_user("model: %.3g parameters (L %d, C %d) is above %.3g, the most this program supports. HINT: check -layers / -channels", params, c->L, c->C, MODEL_MAX_PARAMS);
    if (c->C % c->NH != 0) die_user("model: C = %d is not divisible by NH = %d. HINT: pick -channels a multiple of -heads", c->C, c->NH);
    if (c->C / c->NH > ATT_MAX_HS) die_user("model: head size C/NH = %d is above %d. HINT: use more -heads", c->C / c->NH, ATT_MAX_HS);
}

// Checks on the training flags that need nothing but the flags and R (exit 2, before any allocation).
static void check_flags(const Flags* f, const GPTConfig* c, int R) {
    if (f->B < 1) die_user("flag -b: micro-batch size %d must be at least 1", f->B);
    if (f->T < 1 || f->T > c->maxT) die_user("flag -t: sequence length %d must be between 1 and the model's maximum %d. HINT: -max-seq raises it for a new model", f->T, c->maxT);
    int64_t step_tokens = (int64_t)f->B * f->T * R;
    if (f->total_batch != -1 && (f->total_batch < step_tokens || f->total_batch % step_tokens != 0))
        die_user("flag -d: total batch %d tokens is not a multiple of B*T*R = %d*%d*%d = %lld. HINT: use -d %lld or a multiple",
                 f->total_batch, f->B, f->T, R, (long long)step_tokens, (long long)step_tokens);
    if (f->zero_stage < -1 || f->zero_stage > 3) die_user("flag -z: ZeRO stage %d is not 0, 1, 2, 3 or auto", f->zero_stage);
    if (f->recompute < -1 || f->recompute > 3) die_user("flag -r: recompute mode %d is not 0, 1, 2, 3 or auto", f->recompute);
    if (f->world < 0) die_user("flag -world: %d ranks", f->world);
    int off = strcmp(f->offload, "auto") ? offload_parse(f->offload) : OFFLOAD_NONE;
    if (off < 0) die_user("flag -offload: '%s' is not none, cpu, nvme or auto", f->offload);
    if (off != OFFLOAD_NVME && f->offload_dir[0] && strcmp(f->offload, "auto")) die_user("flag -offload-dir is for -offload nvme (this run: -offload %s)", f->offload);
    if (off == OFFLOAD_NVME && !f->offload_dir[0]) die_user("flag -offload nvme needs -offload-dir DIR (a directory on the disk that holds the state)");
    if (parse_size(f->offload_buffer) <= 0) die_user("flag -offload-buffer: '%s' is not a size (examples: 256MiB, 1GiB)", f->offload_buffer);
    if (off != OFFLOAD_NONE && f->zero_stage == 0 && !f->plan && !(f->tune && !f->zero_stage_set)) // (-plan plans every stage; -tune chooses -z)
        die_user("flag -offload %s needs -z 1, 2 or 3: under ZeRO-0 every rank holds the whole optimizer state, so offloading "
                 "it would put R copies of it into host memory and copy the full gradient to the host on every rank. HINT: "
                 "-z 1 shards the state first (and sends less than -z 0)", f->offload);
    if (f->world > 0 && !f->plan) die_user("flag -world plans for another world size: it needs -plan");
    if (f->link_gbps < 0 || f->tflops < 0 || f->pcie_gbps < 0 || f->disk_gbps < 0) die_user("flags -link-gbps / -tflops / -pcie-gbps / -disk-gbps must be positive");
    const char* ed = f->export_dtype;
    if (strcmp(ed, "auto") && strcmp(ed, "fp32") && strcmp(ed, "bf16") && strcmp(ed, "fp16"))
        die_user("flag -export-dtype: '%s' is not auto, fp32, bf16 or fp16", ed);
    if (!strcmp(ed, "fp16") && f->export_path[0]) die_user("flag -export-dtype fp16: llm.c model files have no FP16 version (use it with -export-hf only)");
    if (strcmp(f->gpu, "auto") && gpu_peak_index(f->gpu) < 0)
        die_user("flag -gpu: '%s' is not a GPU this program knows (h100, h200, a100, a800, gh200, l40s, l4, a10; a device name such as "
                 "'NVIDIA H100 PCIe' also works). HINT: for another GPU give its rate with -tflops", f->gpu);
    if (f->max_steps < -1) die_user("flag -x: %d steps: use a count, 0 (evaluate only) or -1 (one epoch)", f->max_steps);
    if (f->lr < 0) die_user("flag -l: learning rate %g is negative", f->lr);
    if (f->warmup < -1) die_user("flag -u: warmup %d is negative", f->warmup);
    if (f->lr_final < 0 || f->lr_final > 1) die_user("flag -q: final fraction %g is not in [0, 1]", f->lr_final);
    if (strcmp(f->lr_schedule, "cosine") && strcmp(f->lr_schedule, "linear") && strcmp(f->lr_schedule, "constant"))
        die_user("flag -k: schedule '%s' is not cosine, linear or constant", f->lr_schedule);
    if (f->beta1 < 0 || f->beta1 >= 1 || f->beta2 < 0 || f->beta2 >= 1) die_user("flags -beta1/-beta2: %g, %g must be in [0, 1)", f->beta1, f->beta2);
    if (f->eps <= 0) die_user("flag -eps: %g must be positive", f->eps);
    if (f->weight_decay < 0) die_user("flag -c: weight decay %g is negative", f->weight_decay);
    if (f->grad_clip < 0) die_user("flag -grad-clip: %g is negative", f->grad_clip);
    if (f->shuffle != 0 && f->shuffle != 1) die_user("flag -shuffle: %d is not 0 or 1", f->shuffle);
    if (f->val_every < 0 || f->sample_every < 0 || f->ckpt_every < 0 || f->ckpt_keep < 0)
        die_user("flags -v, -s, -n, -nk: counts must not be negative");
    if (f->gen_tokens < 1 || f->gen_tokens > GEN_MAX_TOKENS) die_user("flag -g: %d tokens to generate: must be 1..%d", f->gen_tokens, GEN_MAX_TOKENS);
    if ((int64_t)f->B * f->T > (1 << 24)) die_user("flags -b x -t: %lld tokens per micro-batch: at most %d", (long long)f->B * f->T, 1 << 24);
    if (f->resume != 0 && f->resume != 1) die_user("flag -y: %d is not 0 or 1", f->resume);
    if ((f->ckpt_every > 0 || f->resume) && !f->out_dir[0]) die_user("flags -n / -y need an output directory: -o DIR");
    if (f->resume_step < 0 || (f->resume_step > 0 && !f->resume)) die_user("flag -resume-step %d needs -y 1 and a step >= 1", f->resume_step);
    if (f->threads < 0) die_user("flag -threads: %d is negative", f->threads);
    if (f->blas != 0 && f->blas != 1) die_user("flag -blas: %d is not 0 or 1", f->blas);
#ifndef USE_BLAS
    if (f->blas) die_user("flag -blas 1: this build has no OpenBLAS. HINT: apt-get install libopenblas-dev and rebuild (make clean train)");
#endif
    if (f->comm_timeout < 0 || f->comm_delay < 0) die_user("flags -comm-timeout / -comm-delay must not be negative");
    if (f->max_skips < 0) die_user("flag -max-skips: %d is negative", f->max_skips);
    if (strcmp(f->save_model, "0") && strcmp(f->save_model, "1") && strcmp(f->save_model, "last"))
        die_user("flag -save-model: '%s' is not 0, 1 or last", f->save_model);
    if (f->io_timeout < 0 && f->io_timeout != -1) die_user("flag -io-timeout: %g is negative", f->io_timeout);
    if (f->tune_steps < 1) die_user("flag -tune-steps: %d timed steps per candidate: at least 1", f->tune_steps);
    if (f->tune_rows < 1 || f->tune_rows > 16) die_user("flag -tune-rows: %d candidates: 1..16", f->tune_rows);
}

// Threads for the CPU ops: -threads, else OMP_NUM_THREADS, else this node's cores shared
// evenly by this node's ranks.
static int setup_threads(const Flags* f, const Launch* L) {
    int n = f->threads;
    if (n == 0 && getenv("OMP_NUM_THREADS")) n = num_threads();
    if (n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = (int)(cores / (L->local_world > 0 ? L->local_world : 1));
        if (n < 1) n = 1;
    }
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    g_use_blas = f->blas;
#ifdef USE_BLAS
    openblas_set_num_threads(1); // one level of threads: ours (see cpu_gemm_blas)
#endif
    return num_threads();
}

static void mkdir_p(const char* dir) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; mkdir(tmp, 0755); *p = '/'; }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) die_user("-o %s: cannot create the directory: %s", dir, strerror(errno));
    if (access(tmp, W_OK) != 0) die_user("-o %s: the directory is not writable", dir);
}

// A "Name: N kB" line of /proc/self/status in bytes (VmHWM: peak resident memory, VmRSS: resident
// now), 0 if unknown.
static int64_t proc_status_bytes(const char* name) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256], fmt[64];
    snprintf(fmt, sizeof(fmt), "%s: %%lld kB", name);
    long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, fmt, &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}
static int64_t peak_rss_bytes(void) { return proc_status_bytes("VmHWM"); }

// Every rank's live bytes per tag and its peak RSS: row r (TAG_COUNT + 1 values) is rank r's.
// A collective: each rank fills its own row of a zeroed matrix and the rows are summed.
#define MEM_COLS (TAG_COUNT + 1)
static double* gather_memory(Trainer* tr) {
    double* all = (double*)calloc((size_t)tr->R * MEM_COLS, sizeof(double));
    for (int t = 0; t < TAG_COUNT; t++) all[tr->r * MEM_COLS + t] = (double)g_mem_bytes[t];
    all[tr->r * MEM_COLS + TAG_COUNT] = (double)peak_rss_bytes();
    comm_sum_doubles(&tr->comm, all, tr->R * MEM_COLS);
    return all;
}

// End a log.jsonl record: flush, and remember (and say once) when the write failed.
static void log_flush(Trainer* tr) {
    if (fflush(tr->log) == 0 && !ferror(tr->log)) return;
    if (!tr->log_failed) fprintf(stderr, "error: writing %s/log.jsonl failed: %s. HINT: check free disk space; the run continues and ends with exit code 1\n", tr->f.out_dir, strerror(errno));
    tr->log_failed = 1;
    clearerr(tr->log);
}

// The memory record of log.jsonl: exact bytes per tag for every rank, and the peak RSS.
static void log_memory(Trainer* tr, const char* when) {
    double* all = gather_memory(tr);
    if (tr->log) {
        fprintf(tr->log, "{\"memory\": \"%s\", \"ranks\": [", when);
        for (int r = 0; r < tr->R; r++) {
            fprintf(tr->log, "%s{", r ? ", " : "");
            for (int t = 0; t < TAG_COUNT; t++) fprintf(tr->log, "\"%s\": %.0f, ", mem_tag_name[t], all[r * MEM_COLS + t]);
            fprintf(tr->log, "\"vmhwm\": %.0f}", all[r * MEM_COLS + TAG_COUNT]);
        }
        fprintf(tr->log, "]}\n");
        log_flush(tr);
    }
    if (!strcmp(when, "end")) {
        printf0("peak memory (VmHWM, MiB):");
        for (int r = 0; r < tr->R; r++) printf0(" rank %d %.1f%s", r, all[r * MEM_COLS + TAG_COUNT] / 1048576.0, r + 1 < tr->R ? "," : "\n");
    }
    free(all);
}

// The per-rank memory table: each tag's bytes on every rank beside the closed form for the stage
// (zero_sizes and acts_bytes: the functions the allocator itself uses, from the dtype table), then
// the model state against the ZeRO paper's formula.
static void print_memory_table(Trainer* tr) {
    Zero* z = &tr->model.z;
    const ZeroSizes* s = &z->sz;
    int R = tr->R, st = z->stage;
    double* all = gather_memory(tr);
    double MiB = 1048576.0, X = sizeof(floatX);
    size_t acts, logits;
    acts_bytes(&tr->model.cfg, tr->model.B, tr->model.T, tr->model.recompute, &acts, &logits);
    // closed form per tag: formula and value
    const char* f_params = st <= 2 ? "X * Psi'" : "X * Psi' / R";
    const char* f_grads = st <= 1 ? "4 * Psi'" : "4 * Psi' / R";
    const char* f_opt = st == 0 ? "4 * Psi'" : "4 * Psi' / R";
    int off = z->offload != OFFLOAD_NONE; // [offload] master, m, v are not on the device: 0 here
    double opt_dev = off ? 0.0 : 4.0 * s->opt;
    if (off) f_opt = z->offload == OFFLOAD_CPU ? "- (-offload cpu: host)" : "- (-offload nvme: file)";
    struct { const char* formula; double bytes; } closed[TAG_COUNT] = {
        {f_params, X * (s->full_params + s->shard_params)},
        {st == 3 ? "X * (P_io + 2 P_layer)" : "-", X * s->param_bufs},
        {f_grads, 4.0 * (s->full_grads + s->shard_grads)},
        {st >= 2 ? "4 * (P_io + 2 P_layer)" : "-", 4.0 * s->grad_bufs},
        {f_opt, opt_dev}, {f_opt, opt_dev}, {f_opt, opt_dev},
        {"acts(B, T, -r)", (double)acts},
        {"X * B * T * Vp", (double)logits},
        {R > 1 ? "4 * R * chunk" : "-", 4.0 * s->comm},
        {"ops_workspace_floats * 4", 4.0 * g_work_floats},
    };
    printf0("memory per rank (MiB) by tag, ZeRO-%d, R = %d; Psi' = %lld (Psi = %lld plus the 8-element and 8R-block padding), "
            "P_io = %lld, P_layer = %lld, X = %d:\n", st, R, (long long)z->lay.total, (long long)z->lay.logical_total, (long long)z->lay.P[0],
            (long long)(z->lay.nblocks > 1 ? z->lay.P[1] : 0), (int)X);
    printf0("| %-11s |", "tag");
    for (int r = 0; r < R && r < 8; r++) printf0(" rank %-4d|", r);
    if (R > 8) printf0(" ...      |");
    printf0(" closed form                        |\n");
    for (int t = 0; t < TAG_COUNT; t++) {
        printf0("| %-11s |", mem_tag_name[t]);
        for (int r = 0; r < R && r < 8; r++) printf0(" %9.2f|", all[r * MEM_COLS + t] / MiB);
        if (R > 8) printf0("          |");
        printf0(" %-24s %9.2f |\n", closed[t].formula, closed[t].bytes / MiB);
    }
    free(all);
    // model state: ours against the paper's (2-byte parameters and gradients, 12 bytes of Adam)
    double psi = (double)z->lay.logical_total;
    double ours = X * (s->full_params + s->shard_params) + 4.0 * (s->full_grads + s->shard_grads) + 12.0 * s->opt;
    double paper[4] = {16 * psi, 4 * psi + 12 * psi / R, 2 * psi + 14 * psi / R, 16 * psi / R};
    const char* form[4] = {"16 Psi", "4 Psi + 12 Psi/R", "2 Psi + 14 Psi/R", "16 Psi/R"};
    const char* ourform[4] = {"(X + 16) Psi'", "(X + 4) Psi' + 12 Psi'/R", "X Psi' + 16 Psi'/R", "(X + 16) Psi'/R"};
    printf0("model state per rank (params + grads + master + m + v), Psi = %lld parameters (the model line's: padded vocabulary rows included):\n", (long long)psi);
    printf0("  ours:  %-26s = %9.2f MiB\n", ourform[st], ours / MiB);
    if (off) // [offload] the device holds the parameters and gradients only
        printf0("         of which 12 Psi'/R = %.2f MiB (master, m, v) %s, %.2f MiB on the device\n", 12.0 * s->opt / MiB,
                z->offload == OFFLOAD_CPU ? "in host memory (-offload cpu)" : "in the -offload-dir file (-offload nvme)", (ours - 12.0 * s->opt) / MiB);
    printf0("  paper: %-26s = %9.2f MiB   (ZeRO section 5: 16-bit gradients)\n", form[st], paper[st] / MiB);
    printf0("  ours keeps gradients in FP32 (+2 bytes per gradient element held), has X = %d-byte parameters,\n"
            "  and pads tensors to 8 elements and blocks to 8R (Psi' - Psi = %lld); the io/layer buffers of\n"
            "  ZeRO-2/3, activations, logits, comm staging and workspace are in neither (rows above)\n",
            (int)X, (long long)(z->lay.total - z->lay.logical_total));
}

static void print_setup(Trainer* tr) {
    const GPTConfig* c = &tr->model.cfg;
    flags_print_table(&tr->f);
    if (tr->R > 1) { // one line per rank, in rank order
        char host[256] = "?";
        gethostname(host, sizeof(host));
        for (int r = 0; r < tr->R; r++) {
            if (r == tr->r)
                printf("[launch] rank %d of %d: pid %d on %s, local rank %d of %d, %d threads\n", tr->r, tr->R, (int)getpid(),
                       host, tr->launch.local_rank, tr->launch.local_world, num_threads());
            fflush(stdout);
            double dummy = 0.0;
            comm_sum_doubles(&tr->comm, &dummy, 1); // a barrier that keeps the lines in order
        }
    }
    printf0("device %s | precision %s | ranks %d (%s, %d on this node) | threads %d per rank | ZeRO-%d | recompute -r %d\n",
            g_device == DEV_CPU ? "cpu" : "cuda", PRECISION_NAME, tr->R, tr->launch.source, tr->launch.local_world,
            num_threads(), tr->f.zero_stage, tr->f.recompute);
    printf0("model: L %d, C %d, NH %d, V %d (padded %d), max T %d: Psi = %lld parameters, the padded vocabulary rows included "
            "(%lld without them); memory below also counts Psi' = %lld, with every tensor padded to 8 elements and every block to 8R\n",
            c->L, c->C, c->NH, c->V, c->Vp, c->maxT, (long long)tr->model.d.num_params, (long long)tr->model.d.num_real,
            (long long)tr->model.z.lay.total);
    printf0("batch: B %d x T %d x R %d x GA %d = %lld tokens per step; %d steps; train %lld tokens, val %lld tokens\n",
            tr->model.B, tr->model.T, tr->R, tr->GA, (long long)tr->GA * tr->R * tr->model.B * tr->model.T, tr->max_steps,
            (long long)dataloader_total_tokens(&tr->train), tr->has_val ? (long long)dataloader_total_tokens(&tr->val) : 0LL);
    print_memory_table(tr);
}

// -tokenize IN -o PREFIX: GPT-2 BPE in C, streamed, into PREFIX_train_000000.bin, ... and
// PREFIX_val_000000.bin (tokenize_file_to_shards in tokenizer.h). Exit 2 on bad input.
static void run_tokenize(const Flags* f) {
    if (!f->out_dir[0]) die_user("-tokenize needs -o PREFIX (shards are written as PREFIX_train_000000.bin, PREFIX_val_000000.bin, ...)");
    if (f->val_every_doc < 0 || f->shard_tokens < 1) die_user("flags -val-every / -shard-tokens: %d / %d must be >= 0 / >= 1", f->val_every_doc, f->shard_tokens);
    Tokenizer tok;
    char err[1024];
    if (tokenizer_init(&tok, f->tokenizer, err, sizeof(err))) die_user("-tokenizer: %s", err);
    if (tokenizer_load_merges(&tok, f->merges, err, sizeof(err))) die_user("-merges: %s", err);
    double t0 = wall_s();
    size_t n = strlen(f->tokenize);
    if (n >= 6 && !strcmp(f->tokenize + n - 6, ".jsonl")) { // prompt/completion pairs (prompts.h)
        PromptStats ps;
        if (tokenize_prompts_to_shards(&tok, f->tokenize, f->out_dir, f->T, f->val_every_doc, f->shard_tokens, &ps, err, sizeof(err)))
            die_user("-tokenize: %s", err);
        printf("tokenized %s in %.2f s, packed for T = %d: train %lld examples, %lld tokens (%lld counted targets) in %d shard(s); "
               "val %lld examples, %lld tokens (%lld counted) in %d shard(s); %lld prompt(s) cut at the start; prefix %s (each shard with a .mask)\n",
               f->tokenize, wall_s() - t0, f->T, (long long)ps.examples[0], (long long)ps.tokens[0], (long long)ps.counted[0], ps.shards[0],
               (long long)ps.examples[1], (long long)ps.tokens[1], (long long)ps.counted[1], ps.shards[1], (long long)ps.cut, f->out_dir);
        tokenizer_free(&tok);
        return;
    }
    TokenizeStats st;
    if (tokenize_file_to_shards_ex(&tok, f->tokenize, f->out_dir, f->val_every_doc, f->shard_tokens, TOKENIZE_CHUNK_BYTES, &st, err, sizeof(err)))
        die_user("-tokenize: %s", err);
    printf("tokenized %s (%lld bytes) in %.2f s: train %lld documents, %lld tokens in %d shard(s); val %lld documents, %lld tokens in %d shard(s); prefix %s\n",
           f->tokenize, (long long)st.bytes, wall_s() - t0, (long long)st.documents[0], (long long)st.tokens[0], st.shards[0],
           (long long)st.documents[1], (long long)st.tokens[1], st.shards[1], f->out_dir);
    tokenizer_free(&tok);
}

// Every rank's value of h combined with the build's name, compared with rank 0's over the host
// communicator (MPI, or the TCP rendezvous), so that no rank goes on alone. Ends every rank (exit 2) with a message naming
// `what` and a hint.
static void ranks_agree(Trainer* tr, uint64_t h, const char* what, const char* hint) {
    char build[128];
    snprintf(build, sizeof(build), "zerotrain %s %s built %s %s", ZT_VERSION, PRECISION_NAME, __DATE__, __TIME__);
    h = fnv1a(h, build, strlen(build));
    uint64_t* hs = (uint64_t*)malloc(sizeof(uint64_t) * tr->R);
    comm_allgather_u64(&tr->comm, h, hs);
    for (int r = 1; r < tr->R; r++)
        if (hs[r] != hs[0])
            die_user("rank %d %s than rank 0 (hash %016llx vs %016llx). HINT: %s", r, what,
                     (unsigned long long)hs[r], (unsigned long long)hs[0], hint);
    free(hs);
}

// The data every rank must agree on: the shards' count and token counts (val may be NULL).
static uint64_t data_hash(const DataLoader* train, const DataLoader* val) {
    uint64_t h = FNV_INIT;
    for (int k = 0; k < 2; k++) {
        const DataLoader* dl = k ? val : train;
        if (!dl) continue;
        h = fnv1a(h, &dl->nshards, sizeof(dl->nshards));
        for (int i = 0; i < dl->nshards; i++) h = fnv1a(h, &dl->shards[i].ntok, sizeof(dl->shards[i].ntok));
    }
    return h;
}

// Resuming at `step`: log.jsonl keeps its records up to that step (and the records without a
// step), so the steps trained again are not logged twice. Rewritten atomically.
static void log_truncate_after(const char* path, int step) {
    FILE* in = fopen(path, "r");
    if (!in) return;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    FILE* out = fopen(tmp, "w");
    if (!out) die(1, "cannot write %s: %s", tmp, strerror(errno));
    size_t cap = 1 << 16;
    char* line = (char*)malloc(cap);
    int dropped = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) > 0) {
        int s;
        if (sscanf(line, "{\"step\": %d", &s) == 1 && s > step) { dropped++; continue; }
        fwrite(line, 1, (size_t)n, out);
    }
    free(line);
    fclose(in);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0 || rename(tmp, path) != 0)
        die(1, "rewriting %s failed: %s. HINT: check free disk space", path, strerror(errno));
    if (dropped) printf("resume: %d record(s) of log.jsonl after step %d removed (those steps are trained again)\n", dropped, step);
}

// A number for log.jsonl and tune.jsonl: JSON has no NaN or infinity, so those are written as null.
static void json_num(FILE* f, const char* key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.9g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

// The model for (stage, recompute): layout, ZeRO buffers, activations, workspace and the step's
// scalars, every tag checked against the planner (plan: its row). -tune builds and frees one per
// candidate with this; the run builds its own with it afterwards, from nothing, the same way.
static void trainer_build_model(Trainer* tr, const GPTConfig* c, int stage, int recompute, Offload offload, PlanRow* plan) {
    const Flags* f = &tr->f;
    Model* m = &tr->model;
    m->cfg = *c; m->B = f->B; m->T = f->T; m->recompute = recompute;
    model_describe(&m->d, c);
    BlockLayout lay;
    model_layout(&m->d, &lay, tr->R, tr->r);
    zero_init(&m->z, &lay, stage, &tr->comm, f->poison, offload);
    offload_init(&m->z, f->offload_dir, parse_size(f->offload_buffer)); // [offload] master, m, v in host memory or a file
    acts_alloc(&m->a, c, f->B, f->T, recompute);
    size_t work_floats = ops_workspace_floats(c, f->B, f->T, m->z.opt_total);
    g_work = (float*)dev_alloc(TAG_WORK, work_floats * sizeof(float));
    g_work_floats = work_floats - STEP_SCALARS_FLOATS; // the ops' scratch; then the step's scalars
    tr->scalars = (StepScalars*)(g_work + g_work_floats);
    tr->scalars_host = (StepScalars*)host_pinned_alloc(sizeof(StepScalars));
    tr->readback_lag = g_device == DEV_CUDA && tr->R == 1; // see train_step
    // what was allocated is exactly what the planner computes, tag by tag
    plan_config(c, f->B, f->T, tr->R, tr->GA, stage, recompute, offload, parse_size(f->offload_buffer), plan);
    for (int t = 0; t < TAG_COUNT; t++)
        if (g_mem_bytes[t] != plan->bytes[t])
            die(1, "internal error: %s: %zu bytes allocated, the planner says %zu", mem_tag_name[t], g_mem_bytes[t], plan->bytes[t]);
    size_t host_bytes = m->z.offload_ctx ? ((OffloadState*)m->z.offload_ctx)->host_bytes : 0;
    if (host_bytes != plan->host_bytes)
        die(1, "internal error: offload host memory: %zu bytes allocated, the planner says %zu", host_bytes, plan->host_bytes);
    if (offload != OFFLOAD_NONE)
        printf0("offload %s: %s, %s of host memory per rank%s\n", offload_name(offload),
                offload == OFFLOAD_CPU ? "master, m, v and the pinned staging in host memory" : "master, m, v in a file per rank under -offload-dir, streamed through",
                fmt_bytes((double)host_bytes).s, g_device == DEV_CPU && offload == OFFLOAD_CPU ? " (on the CPU device the same RAM: a code path, not a saving)" : "");
}

static void trainer_free_model(Trainer* tr) {
    Model* m = &tr->model;
    if (tr->scalars_host) host_pinned_free(tr->scalars_host);
    tr->scalars_host = NULL;
    dev_free(TAG_WORK, g_work, (g_work_floats + STEP_SCALARS_FLOATS) * sizeof(float)); // the ops' part and the step's scalars
    g_work = NULL;
    acts_free(&m->a, m->cfg.L);
    offload_free(&m->z);
    zero_free(&m->z);
    layout_free(&m->z.lay);
}

// ----------------------------------------------------------------------------
// -tune: measure instead of estimate. The planner ranks the rows that fit with its headroom; the
// fastest -tune-rows of them that keep every flag given explicitly are each built, initialised from
// -seed, and run for one warm-up step and -tune-steps timed steps on the training data: scratch
// state, freed afterwards. Rank 0 picks the highest measured tokens/s among the candidates whose
// measured memory also leaves the headroom, and broadcasts it. The run is then built by the same
// code (trainer_build_model) from its own source (seed, -e file or checkpoint), exactly as if the
// chosen flags had been given: the same bits. The choice goes into every checkpoint's DONE marker
// as flags ("-z 2 -r 1"); a resume with -tune reuses it and never tunes again.
//
// Memory per candidate and rank: the tagged allocator's peak (g_mem_peak, reset before each build),
// and the process's: on the CPU device VmHWM, reset before each build by writing "5" to
// /proc/self/clear_refs (Linux sets VmHWM to VmRSS), so VmHWM minus the VmRSS of that moment is the
// candidate's growth; on CUDA the device memory in use after the steps beyond the context
// (cudaMemGetInfo: nothing is allocated inside a step, so that is the candidate's peak).
// Communication: on the CPU device the time the host waited in collectives (Comm.wait_s); on CUDA
// the host never waits for one, the compute stream does: while measuring (Comm.time_waits) comm_wait
// records an event on the compute stream just before and just after its cudaStreamWaitEvent on a
// collective (a ring of events created once with the communicator: nothing is allocated in a step),
// and the time between each pair, summed once the steps are done, is how long the stream stalled
// (plus, as on the CPU device, the host's waits in the scalar collectives: loss, norm, overflow).
//
// [offload] -offload is tuned like -z and -r, by the planner's rule (plan_choose): the candidates
// are the rows without offload that fit; only when none fits, the -offload cpu rows; only when none
// of those fits either (and -offload-dir is given), the nvme rows. Offload rows are not measured
// beside rows without offload that fit: on one device per rank an offload row runs the same
// kernels plus the copies and the host's AdamW, so it is slower by construction (its memory saving
// is what the headroom rule already granted the others), and measuring it would only let noise
// choose the run that also holds the optimizer state on the host. `-tune -offload cpu` measures the
// -z and -r of the offload rows for whoever wants the numbers.

// The flags -tune chooses, one row each: the flag, its Flags field, the PlanRow field holding a
// row's value, the largest value, how the Flags field holds it (TUNE_*_INT: the value itself, -1
// while auto; TUNE_*_OFFLOAD: its name, "auto" while auto), and the value of a recorded choice
// that lacks the flag (-1: such a record is invalid; -offload: records from before it was tuned
// mean none). While -tune works every value is an int, as in PlanRow; -1: auto. The candidates, the
// choice, the table, tune.jsonl, the checkpoint's record and the resume follow this table.
#define TUNE_DIMS(X)                                               \
    X("-z", zero_stage, stage, 3, INT, -1)                         \
    X("-r", recompute, recompute, 3, INT, -1)                      \
    X("-offload", offload, offload, OFFLOAD_NVME, OFFLOAD, OFFLOAD_NONE)
#define TUNE_GET_INT(f, field) ((f)->field)
#define TUNE_SET_INT(f, field, v) ((f)->field = (v))
#define TUNE_WORD_INT(v, buf) (snprintf(buf, sizeof(buf), "%d", v), buf)
#define TUNE_PARSE_INT(word, max) tune_parse_count(word, max)
#define TUNE_GET_OFFLOAD(f, field) (strcmp((f)->field, "auto") ? offload_parse((f)->field) : -1)
#define TUNE_SET_OFFLOAD(f, field, v) snprintf((f)->field, sizeof((f)->field), "%s", (v) < 0 ? "auto" : offload_name((Offload)(v)))
#define TUNE_WORD_OFFLOAD(v, buf) offload_name((Offload)(v))
#define TUNE_PARSE_OFFLOAD(word, max) offload_parse(word)
#define TUNE_MAX_ROWS 16
enum {
#define X(flag, field, row, max, kind, old) TD_##field,
    TUNE_DIMS(X)
#undef X
    TUNE_NDIMS
};

// "0".."max" -> its value; -1 for anything else.
static int tune_parse_count(const char* word, int max) {
    int v;
    return parse_int(word, &v) == 0 && v >= 0 && v <= max ? v : -1;
}

// With -tune, each tuned flag not given on the command line is auto (-z 0, -r 1 are defaults, not choices).
static void tune_mark_auto(Flags* f) {
#define X(flag, field, row, max, kind, old) \
    if (!f->field##_set) { TUNE_SET_##kind(f, field, -1); snprintf(f->field##_given, sizeof(f->field##_given), "auto"); }
    TUNE_DIMS(X)
#undef X
}

// A choice as flags: "-z 2 -r 1 -offload none".
static void tune_text(const Flags* f, char* out, size_t cap) {
    int n = 0;
    char buf[16];
    out[0] = 0;
#define X(flag, field, row, max, kind, old) \
    n += snprintf(out + n, cap - n, "%s%s %s", n ? " " : "", flag, TUNE_WORD_##kind(TUNE_GET_##kind(f, field), buf));
    TUNE_DIMS(X)
#undef X
    (void)buf;
}

// The word after `flag` in a choice's text ("-z 2 -r 1 -offload cpu") into word; -1 when absent.
static int tune_text_word(const char* text, const char* flag, char* word, size_t cap) {
    size_t n = strlen(flag);
    for (const char* p = text; (p = strstr(p, flag)) != NULL; p += n) {
        if ((p != text && p[-1] != ' ') || p[n] != ' ') continue;
        size_t len = strcspn(p + n + 1, " ");
        snprintf(word, cap, "%.*s", (int)(len < cap ? len : cap - 1), p + n + 1);
        return 0;
    }
    return -1;
}

// Every tuned flag's value in a recorded choice (v[TD_*]); a flag the record lacks takes the
// table's `old`. Returns the first flag that is invalid or missing, NULL when all are valid.
static const char* tune_record_values(const char* rec, int v[TUNE_NDIMS]) {
    char word[64];
#define X(flag, field, row, max, kind, old)                                                   \
    v[TD_##field] = tune_text_word(rec, flag, word, sizeof(word)) ? (old) : TUNE_PARSE_##kind(word, max); \
    if (v[TD_##field] < 0) return flag;
    TUNE_DIMS(X)
#undef X
    return NULL;
}

// What every rank measures of one candidate (summed over ranks into an R x TM_COLS matrix).
enum { TM_SECONDS, TM_WAIT, TM_WAITS, TM_COLLS, TM_TAGGED, TM_HOST, TM_PROCESS, TM_BASE, TM_RESET, TM_COLS };

// Build the candidate, run it on scratch state, measure, free it. mine: this rank's TM_COLS values.
static void tune_measure(Trainer* tr, const GPTConfig* c, const int v[TUNE_NDIMS], double* mine) {
    Flags* f = &tr->f;
    int fd = open("/proc/self/clear_refs", O_WRONLY); // VmHWM := VmRSS (Linux >= 4.0)
    int reset = fd >= 0 && write(fd, "5", 1) == 1;
    if (fd >= 0) close(fd);
    mine[TM_BASE] = (double)proc_status_bytes("VmRSS");
    mem_peak_reset();
    PlanRow plan;
    trainer_build_model(tr, c, v[TD_zero_stage], v[TD_recompute], (Offload)v[TD_offload], &plan);
    InitCtx ic = {&tr->model.d, (uint64_t)f->seed}; // scratch: initialised as a new run would be, thrown away
    zero_fill_opt(&tr->model.z, 0, init_fill, &ic); // (0: master)
    zero_params_from_master(&tr->model.z);
    tr->step = 0; tr->adam_t = 0; tr->pending = 0;
    train_step(tr); // warm-up: first touches, threads, cuBLASLt's choices
    step_read_back(tr);
    comm_reset_stats(&tr->comm);
    tr->comm.time_waits = 1; // [CUDA] the compute stream's stalls on collectives, timed by events (comm_wait)
    double t0 = wall_s();
    for (int i = 0; i < f->tune_steps; i++) train_step(tr);
    step_read_back(tr); // [one GPU] waits for the last step
    mine[TM_SECONDS] = wall_s() - t0;
    comm_collect_waits(&tr->comm); // [CUDA] the timed waits' events, summed
    tr->comm.time_waits = 0;
    mine[TM_WAIT] = tr->comm.wait_s;
    mine[TM_WAITS] = (double)tr->comm.waits;
    mine[TM_COLLS] = (double)(tr->comm.count[COLL_ALL_GATHER] + tr->comm.count[COLL_REDUCE_SCATTER] + tr->comm.count[COLL_ALL_REDUCE]);
    mine[TM_TAGGED] = (double)g_mem_peak;
    mine[TM_HOST] = (double)plan.host_bytes; // [offload] what offload_init allocated (trainer_build_model checked)
    mine[TM_PROCESS] = (double)peak_rss_bytes();
    mine[TM_RESET] = reset;
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) {
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        mine[TM_PROCESS] = (double)(total_b - free_b) - (double)tr->mem_baseline;
        mine[TM_BASE] = 0;
        mine[TM_RESET] = 1;
    }
#endif
    trainer_free_model(tr);
    tr->step = 0; tr->adam_t = 0; tr->pending = 0;
    comm_reset_stats(&tr->comm);
}

// The planner's fastest rows that fit (its headroom rule, its rule against ZeRO-0 with R > 1, and
// its order of the places of the optimizer state: the first of none, cpu, nvme that -offload allows
// and that has a row that fits) and keep every flag not at auto: up to k row indices into idx,
// fastest first (ties: table order).
static int tune_candidates(const PlanRow* rows, int n, const Flags* f, int R, int k, int* idx) {
    int got = 0, kinds = plan_offload_arg(f);
    for (int pass = OFFLOAD_NONE; pass <= OFFLOAD_NVME && got == 0; pass++) {
        if (!(kinds & (1 << pass))) continue;
        while (got < k) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                const PlanRow* p = &rows[i];
                int keep = p->offload == pass && p->fits && !(R > 1 && p->stage == 0 && f->zero_stage != 0);
#define X(flag, field, row, max, kind, old) if (TUNE_GET_##kind(f, field) >= 0 && p->row != TUNE_GET_##kind(f, field)) keep = 0;
                TUNE_DIMS(X)
#undef X
                for (int j = 0; j < got; j++) keep = keep && idx[j] != i;
                if (keep && (best < 0 || p->step_s < rows[best].step_s)) best = i;
            }
            if (best < 0) break;
            idx[got++] = best;
        }
    }
    return got;
}

// A resume with -tune: the choice its checkpoint records, for every flag still at auto. Returns 1
// when there was one (nothing is measured then).
static int tune_reuse(Trainer* tr) {
    Flags* f = &tr->f;
    char rec[128] = "";
    int step = -1;
    if (tr->r == 0) step = ckpt_peek_tune(f->out_dir, f->resume_step, rec, sizeof(rec));
    comm_broadcast(&tr->comm, &step, sizeof(step), 0);
    comm_broadcast(&tr->comm, rec, sizeof(rec), 0);
    if (step < 0) return 0; // nothing to resume: a new run, tuned
    if (!rec[0]) {
        printf0("tune: the checkpoint of step %d records no -tune choice (its run did not tune, or an older build wrote it): tuning now\n", step);
        return 0;
    }
    int v[TUNE_NDIMS];
    const char* bad = tune_record_values(rec, v);
    if (bad) die_user("resume: DONE_%08d in %s records the -tune choice '%s', which has no valid %s. HINT: give the flags yourself, or -resume-step another checkpoint",
                      step, f->out_dir, rec, bad);
    char b1[16], b2[16];
#define X(flag, field, row, max, kind, old)                                                                                   \
    if (TUNE_GET_##kind(f, field) < 0) {                                                                                      \
        TUNE_SET_##kind(f, field, v[TD_##field]);                                                                            \
        FLAG_SHOW(f, field, "%s (-tune: the checkpoint's choice)", TUNE_WORD_##kind(v[TD_##field], b1));                      \
    } else if (TUNE_GET_##kind(f, field) != v[TD_##field])                                                                    \
        printf0("tune: %s %s given: kept (the checkpoint's choice was %s %s)\n", flag, TUNE_WORD_##kind(TUNE_GET_##kind(f, field), b1), \
                flag, TUNE_WORD_##kind(v[TD_##field], b2));
    TUNE_DIMS(X)
#undef X
    (void)b1; (void)b2;
    if (offload_parse(f->offload) == OFFLOAD_NVME && !f->offload_dir[0])
        die_user("resume: the checkpoint's -tune choice is -offload nvme, which needs -offload-dir DIR (where the state's files go). "
                 "HINT: add -offload-dir, or give -offload cpu or none");
    tune_text(f, tr->tune_choice, sizeof(tr->tune_choice));
    printf0("tune: resuming step %d, whose checkpoint records -tune's choice %s: reused, not tuned again (running %s)\n", step, rec, tr->tune_choice);
    return 1;
}

// A resume without -tune of a checkpoint whose run tuned: its flags are this command line's (the
// defaults where not given), and one line says what the record holds and how to reuse it.
static void tune_note_record(Trainer* tr) {
    Flags* f = &tr->f;
    char rec[128] = "", mine[128];
    if (tr->r == 0 && ckpt_peek_tune(f->out_dir, f->resume_step, rec, sizeof(rec)) >= 0 && rec[0]) {
        tune_text(f, mine, sizeof(mine));
        int v[TUNE_NDIMS], same = tune_record_values(rec, v) == NULL; // (a record without -offload: none)
#define X(flag, field, row, max, kind, old) same = same && TUNE_GET_##kind(f, field) == v[TD_##field];
        TUNE_DIMS(X)
#undef X
        if (!same)
            printf0("note: the checkpoint records -tune's choice %s; this run has %s (without -tune a resume uses the flags as given). "
                    "HINT: add -tune to reuse the choice\n", rec, mine);
    }
}

// -tune: choose every flag at auto by measuring (see the banner above). Every rank takes part;
// rank 0 plans, decides and broadcasts.
static void tune_config(Trainer* tr, const GPTConfig* c) {
    Flags* f = &tr->f;
    int autos = 0;
    char names[64] = "";
#define X(flag, field, row, max, kind, old) \
    autos += TUNE_GET_##kind(f, field) < 0; \
    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", names[0] ? ", " : "", flag);
    TUNE_DIMS(X)
#undef X
    if (autos == 0) {
        printf0("tune: every flag -tune chooses was given (%s): nothing to tune\n", names);
        FLAG_SHOW(f, tune, "unused: %s were given", names);
    }
    if (autos == 0 || (f->resume && tune_reuse(tr))) { // the planner's inputs: nothing plans this run
        const char* why = autos ? "unused: -tune reused the checkpoint's choice" : "unused: -tune had nothing to choose";
        if (f->tflops == 0) FLAG_SHOW(f, tflops, "%s", why);
        if (f->link_gbps == 0) FLAG_SHOW(f, link_gbps, "%s", why);
        return;
    }
    // the candidates: rank 0 plans (its memory, as -z auto) and broadcasts them
    int64_t step_tokens = (int64_t)tr->GA * tr->R * f->B * f->T;
    PlanEnv e;
    PlanRow rows[PLAN_MAX_ROWS];
    int idx[TUNE_MAX_ROWS], n = 0, nrows = 0;
    int cand[TUNE_MAX_ROWS][TUNE_NDIMS]; // each candidate's value of every tuned flag
    char why[1024] = "";
    if (tr->r == 0) {
        plan_env(f, &tr->launch, tr->R, &e);
        plan_env_show(f, &e);
        nrows = plan_rows(c, f->B, f->T, tr->R, tr->GA, tr->launch.local_world, &e, rows);
        n = tune_candidates(rows, nrows, f, tr->R, f->tune_rows, idx);
        for (int i = 0; i < n; i++) {
#define X(flag, field, row, max, kind, old) cand[i][TD_##field] = rows[idx[i]].row;
            TUNE_DIMS(X)
#undef X
        }
        if (n == 0) plan_explain_misfit(c, f->B, f->T, tr->R, tr->GA, &e, why, sizeof(why));
    }
    comm_broadcast(&tr->comm, &n, sizeof(n), 0);
    comm_broadcast(&tr->comm, cand, sizeof(cand), 0);
    if (n == 0) die_user("-tune: %s", tr->r == 0 ? why : "rank 0 found no configuration that fits (see its message)");
    if (cand[0][TD_offload] != OFFLOAD_NONE && !strcmp(f->offload_given, "auto")) // [offload] the planner's order (see the banner)
        printf0("tune: nothing fits without offload%s: the candidates are -offload %s rows\n",
                cand[0][TD_offload] == OFFLOAD_NVME ? " nor with the state in host memory" : "", offload_name((Offload)cand[0][TD_offload]));
    printf0("tune: measuring %d candidate(s), the planner's fastest rows that fit %s per rank with the headroom %s: 1 warm-up + %d timed "
            "step(s) each, on scratch state (initialised from -seed, freed afterwards) ...\n", n, tr->r == 0 ? fmt_bytes(e.mem).s : "",
            tr->r == 0 ? fmt_bytes(e.headroom).s : "", f->tune_steps);
    printf0("tune: | -z | -r | -offload | est s/step | est tok/s |     tok/s |  ms/step | comm wait ms/step | tagged peak | process peak | fits |\n");
    int trace = tr->comm.trace, data_trace = f->data_trace;
    tr->comm.trace = 0; f->data_trace = 0; // the tuning steps' collectives and batches are not the run's
    double* meas = (double*)calloc((size_t)n * tr->R * TM_COLS, sizeof(double));
    double tok_s[TUNE_MAX_ROWS], foot[TUNE_MAX_ROWS];
    int fits[TUNE_MAX_ROWS], best = -1;
    const char* process_kind = g_device == DEV_CUDA ? "device" : "vmhwm";
    for (int i = 0; i < n; i++) {
        double* all = meas + (size_t)i * tr->R * TM_COLS;
        tune_measure(tr, c, cand[i], all + tr->r * TM_COLS);
        comm_sum_doubles(&tr->comm, all, tr->R * TM_COLS);
        double secs = 0, wait = 0, tagged = 0, process = 0;
        foot[i] = 0;
        for (int r = 0; r < tr->R; r++) { // the slowest rank, the largest footprint
            const double* v = all + r * TM_COLS;
            double grow = v[TM_RESET] ? v[TM_PROCESS] - v[TM_BASE] : 0; // VmHWM not reset: only the tagged bytes count
            double host = g_device == DEV_CPU ? v[TM_HOST] : 0;         // [offload] on the CPU device the host is the same memory
            secs = fmax(secs, v[TM_SECONDS]); wait = fmax(wait, v[TM_WAIT]);
            tagged = fmax(tagged, v[TM_TAGGED]); process = fmax(process, v[TM_PROCESS]);
            foot[i] = fmax(foot[i], fmax(v[TM_TAGGED] + host, grow));
            if (!v[TM_RESET]) process_kind = "vmhwm_since_start";
        }
        tok_s[i] = (double)step_tokens * f->tune_steps / fmax(secs, 1e-9);
        if (tr->r == 0) {
            const PlanRow* p = &rows[idx[i]];
            fits[i] = foot[i] + e.headroom <= e.mem;
            char waitc[32];
            snprintf(waitc, sizeof(waitc), "%.2f", 1000.0 * wait / f->tune_steps);
            printf0("tune: | %2d | %2d | %-8s | %10.3g | %9.0f | %9.0f | %8.2f | %17s | %11s | %12s | %-4s |\n", p->stage, p->recompute,
                    offload_name((Offload)p->offload), p->step_s,
                    (double)step_tokens / p->step_s, tok_s[i], 1000.0 * secs / f->tune_steps, waitc, fmt_bytes(tagged).s, fmt_bytes(process).s,
                    fits[i] ? "yes" : "no");
            if (fits[i] && (best < 0 || tok_s[i] > tok_s[best])) best = i;
        }
    }
    tr->comm.trace = trace; f->data_trace = data_trace;
    printf0("tune: est: the planner's estimate; tok/s, ms/step: the slowest rank; comm wait: %s; tagged peak: "
            "the allocator's; process peak: %s; fits: the larger of the tagged peak%s and the process's growth, plus the headroom, within "
            "the memory\n", g_device == DEV_CUDA ? "the compute stream's stalls on block collectives (events around each wait) and the host's waits in scalar ones, the largest rank's"
                                                  : "the host's time in collectives, the largest rank's",
            g_device == DEV_CUDA ? "device memory in use beyond the context (cudaMemGetInfo)"
                           : !strcmp(process_kind, "vmhwm") ? "VmHWM, reset per candidate (/proc/self/clear_refs)"
                                                            : "VmHWM since start (clear_refs failed: only the tagged peak counts)",
            g_device == DEV_CPU ? " (plus an offload row's host bytes: on the CPU device the same memory)" : "");
    // rank 0 decides; tune.jsonl (-o) keeps every candidate's numbers
    comm_broadcast(&tr->comm, &best, sizeof(best), 0);
    if (tr->r == 0 && f->out_dir[0]) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/tune.jsonl", f->out_dir);
        FILE* fp = fopen(path, "w");
        if (!fp) die_user("-o: cannot write %s: %s", path, strerror(errno));
        for (int i = 0; i < n; i++) {
            const PlanRow* p = &rows[idx[i]];
            const double* all = meas + (size_t)i * tr->R * TM_COLS;
            double secs = 0, wait = 0;
            for (int r = 0; r < tr->R; r++) { secs = fmax(secs, all[r * TM_COLS + TM_SECONDS]); wait = fmax(wait, all[r * TM_COLS + TM_WAIT]); }
            fprintf(fp, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d, \"GA\": %d, \"steps\": %d, \"est_step_s\": %.6g, "
                    "\"est_tok_s\": %.6g, \"planned_bytes\": %zu, \"planned_host_bytes\": %zu, \"tok_s\": %.6g, \"step_ms\": %.6g",
                    p->stage, p->recompute, p->offload, tr->R, tr->GA, f->tune_steps, p->step_s, (double)step_tokens / p->step_s, p->total,
                    p->host_bytes, tok_s[i], 1000.0 * secs / f->tune_steps);
            json_num(fp, "comm_wait_ms", 1000.0 * wait / f->tune_steps); // [CUDA] the compute stream's stalls
            const char* keys[5] = {"comm_waits", "block_collectives", "tagged_peak", "process_peak", "rss_before"}; // per rank
            const int cols[5] = {TM_WAITS, TM_COLLS, TM_TAGGED, TM_PROCESS, TM_BASE};
            for (int k = 0; k < 5; k++) {
                fprintf(fp, ", \"%s\": [", keys[k]);
                for (int r = 0; r < tr->R; r++) fprintf(fp, "%s%.0f", r ? ", " : "", all[r * TM_COLS + cols[k]]);
                fprintf(fp, "]");
            }
            fprintf(fp, ", \"process_kind\": \"%s\", \"footprint\": %.0f, \"mem\": %.0f, \"headroom\": %.0f, \"fits\": %d, \"chosen\": %d}\n",
                    process_kind, foot[i], e.mem, e.headroom, fits[i], i == best);
        }
        if (fclose(fp) != 0) die_user("-o: writing %s failed: %s", path, strerror(errno));
    }
    free(meas);
    if (best < 0) die_user("-tune: none of the %d candidate(s) leaves the headroom once measured (see the table). HINT: -plan, a smaller -b, or more ranks", n);
    char word[16];
#define X(flag, field, row, max, kind, old)                                                                  \
    TUNE_SET_##kind(f, field, cand[best][TD_##field]);                                                      \
    if (!strcmp(f->field##_given, "auto")) FLAG_SHOW(f, field, "%s (-tune: the fastest measured)", TUNE_WORD_##kind(cand[best][TD_##field], word));
    TUNE_DIMS(X)
#undef X
    (void)word;
    tune_text(f, tr->tune_choice, sizeof(tr->tune_choice));
    if (tr->r == 0) {
        const PlanRow* p = &rows[idx[best]];
        printf0("tune: chose %s: %.0f tok/s measured, the fastest of the %d candidate(s) that fit (the planner estimated %.0f tok/s); "
                "the run starts from its source as if started with %s\n", tr->tune_choice, tok_s[best], n, (double)step_tokens / p->step_s, tr->tune_choice);
    }
}

// Everything before the first step. Bad input ends here with exit code 2, before allocation.
// Returns 1 when there is nothing to train (-plan printed its table, -tokenize wrote shards).
static int trainer_setup(Trainer* tr, int argc, char** argv) {
    memset(tr, 0, sizeof(*tr));
    Flags* f = &tr->f;
    comm_init(&tr->comm, &argc, &argv, &tr->launch);
    tr->R = tr->comm.R;
    tr->r = tr->comm.r;
    flags_parse(f, argc, argv);
    float comm_timeout = 300.0f; // -comm-timeout bounds the rendezvous and NCCL's initialisation too (checked again with the other flags)
    if (parse_float(f->comm_timeout_str, &comm_timeout) || comm_timeout < 0) comm_timeout = 300.0f;
    comm_connect(&tr->comm, comm_timeout); // launched without MPI: the ranks meet at MASTER_ADDR:MASTER_PORT
    int plan_only = atoi(f->plan_str) == 1;
    g_device = pick_device(f->device_str, plan_only);
    // every rank must run the same flags on the same device with the same build, and know it
    // before any communicator is made: a rank on another device would wait in NCCL's init forever
    ranks_agree(tr, flags_hash(f) ^ (uint64_t)g_device, "was started with different flags, another device or a different build", "start every rank with the same command line, the same ./train and the same -device");
    int gpus = 0; // -plan -device cuda plans without a GPU
#ifdef __CUDACC__
    const char* why_none;
    gpus = cuda_device_count(&why_none);
#endif
    if (g_device == DEV_CUDA && gpus > 0) comm_init_device(&tr->comm, &tr->launch, comm_timeout); // GPU, streams, NCCL, watchdog
    if (g_device == DEV_CPU && !plan_only) comm_check_cpu_device(&tr->comm); // its collectives are MPI's
#ifdef __CUDACC__
    if (g_device == DEV_CUDA && gpus > 0) { // the baseline the planner's prediction is compared with
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        tr->mem_baseline = total_b - free_b;
    }
#endif
    int T_auto = !strcmp(f->T_str, "auto");
    resolve_defaults(f, g_device);
    GPTConfig c;
    int from_file;
    model_config(f, &c, &from_file);
    if (T_auto && f->T > c.maxT) { f->T = c.maxT; snprintf(f->T_str, sizeof(f->T_str), "%d", f->T); } // "at most the model's"
    int R_plan = f->plan && f->world > 0 ? f->world : tr->R; // -plan -world R plans another world size
    check_flags(f, &c, R_plan);
    ranks_agree(tr, flags_hash(f), "was started with different flags once defaults were resolved (another model file?)", "start every rank with the same command line, the same ./train and the same -device");
    if (g_device == DEV_CUDA) tr->peak_flops = gpu_peak_tflops(gpu_model_name(f)) * 1e12; // MFU's denominator
    int threads = setup_threads(f, &tr->launch);
    if (f->threads == 0) FLAG_SHOW(f, threads, "%d", threads);
    if (!strcmp(f->gpu, "auto")) FLAG_SHOW(f, gpu, "%s", g_device == DEV_CUDA ? gpu_model_name(f) : "unused: cpu device");
    if (f->tokenize[0]) {
        if (tr->r == 0) run_tokenize(f);
        return 1;
    }
    if (f->plan) {
        if (f->out_dir[0]) mkdir_p(f->out_dir);
        run_plan(f, &c, R_plan, &tr->launch);
        return 1;
    }
    if (f->tune) tune_mark_auto(f); // chosen by measuring, once the data is open (tune_config)
    else if (f->zero_stage < 0 || f->recompute < 0) choose_config(f, &c, tr->R, &tr->launch, &tr->comm);
    else { // the planner's inputs: nothing plans this run
        if (f->tflops == 0) FLAG_SHOW(f, tflops, "unused: only -plan, -z auto and -r auto plan");
        if (f->link_gbps == 0) FLAG_SHOW(f, link_gbps, "unused: only -plan, -z auto and -r auto plan");
        if (f->pcie_gbps == 0) FLAG_SHOW(f, pcie_gbps, "unused: only -plan, -z auto and -r auto plan");
        if (f->disk_gbps == 0) FLAG_SHOW(f, disk_gbps, "unused: only -plan, -z auto and -r auto plan");
        if (!strcmp(f->offload, "auto") && f->offload_dir[0]) die_user("flag -offload-dir is for -offload nvme (or -offload auto with -z auto / -r auto)");
        if (!strcmp(f->offload, "auto")) snprintf(f->offload, sizeof(f->offload), "none"); // nothing plans: none
    }
    if (strcmp(f->offload_str, f->offload)) FLAG_SHOW(f, offload, "%s", f->offload);
    // data, tokenizer, output directory
    char err[1024];
    if (dataloader_init(&tr->train, f->train_data, f->B, f->T, c.V, f->shuffle, (uint64_t)f->seed, err, sizeof(err)))
        die_user("-i: %s", err);
    tr->has_val = f->val_data[0] != 0 && f->val_every > 0;
    if (tr->has_val && dataloader_init(&tr->val, f->val_data, f->B, f->T, c.V, 0, 0, err, sizeof(err)))
        die_user("-j: %s", err);
    for (int k = 0; k < 1 + tr->has_val; k++) { // shards too short for one sample are skipped, and said so
        int n_short = dataloader_short_shards(k ? &tr->val : &tr->train);
        if (n_short) printf0("note: %s: %d shard(s) hold fewer than T+1 = %d tokens: skipped\n", k ? "-j" : "-i", n_short, f->T + 1);
    }
    ranks_agree(tr, data_hash(&tr->train, tr->has_val ? &tr->val : NULL), "reads different shards (-i / -j: their count or sizes)",
                "every rank must read the same files");
    tr->has_tok = f->sample_every > 0 && tokenizer_init(&tr->tok, f->tokenizer, err, sizeof(err)) == 0;
    if (f->sample_every > 0 && !tr->has_tok) printf0("warning: -tokenizer: %s; samples print token ids\n", err);
    if (f->prompt[0]) load_prompts(tr, c.V);
    if (f->out_dir[0]) mkdir_p(f->out_dir);
    if (f->out_dir[0] && tr->r == 0) {
        ckpt_lock_dir(f->out_dir);        // two trainers never share one
        ckpt_clean_leftovers(f->out_dir); // what a crash left: .tmp files, steps without DONE
    }
    if (f->out_dir[0] && !f->resume && f->ckpt_every > 0) { // a new run: an older run's checkpoints would mix with ours
        uint64_t nonce = ckpt_nonce(&tr->comm);
        if (tr->r == 0) ckpt_set_aside(f->out_dir, -1, nonce, "a new run (no -y 1) in this directory");
    }
    // steps
    int64_t step_tokens = (int64_t)f->B * f->T * tr->R;
    tr->GA = f->total_batch == -1 ? 1 : (int)(f->total_batch / step_tokens);
    int64_t epoch_steps = dataloader_total_tokens(&tr->train) / (step_tokens * tr->GA);
    tr->max_steps = f->max_steps == -1 ? (int)(epoch_steps > 0 ? epoch_steps : 1) : f->max_steps;
    if (f->warmup == -1) f->warmup = tr->max_steps / 20;
    FLAG_SHOW(f, max_steps, "%d", tr->max_steps);
    FLAG_SHOW(f, warmup, "%d", f->warmup);
    FLAG_SHOW(f, total_batch, "%lld", (long long)step_tokens * tr->GA);
    tr->comm.trace = f->comm_trace;
    tr->comm.timeout_s = f->comm_timeout;
    tr->comm.delay_ms = f->comm_delay;
    if (f->tune) tune_config(tr, &c); // the flags left at auto: measured, or a resume's recorded choice
    else if (f->resume) tune_note_record(tr);
    // the model: layout, ZeRO buffers, activations, workspace
    PlanRow plan;
    trainer_build_model(tr, &c, f->zero_stage, f->recompute, (Offload)offload_parse(f->offload), &plan);
    Model* m = &tr->model;
    tr->flops_per_token = mfu_flops_per_token(&c, f->T);
    // the settings table shows what auto became for the flags resolved only now
    if (f->io_timeout < 0) {
        double io_s = io_timeout_s(tr);
        if (io_s > 0) FLAG_SHOW(f, io_timeout, "%.0f", io_s);
        else FLAG_SHOW(f, io_timeout, "0 (forever: -comm-timeout 0)");
    }
    if (!strcmp(f->export_dtype, "auto"))
        FLAG_SHOW(f, export_dtype, "%s", f->export_hf[0] ? (f->export_path[0] && sizeof(floatX) == 2 ? "fp32 (-export-hf), bf16 (-export)" : "fp32")
                                       : f->export_path[0] ? (sizeof(floatX) == 2 ? "bf16" : "fp32") : "unused: no -export or -export-hf");
    if (g_device == DEV_CUDA)
        printf0("MFU: llm.c's count, 6N + 6*L*C*T = %.3f GFLOP per token (recompute not counted), against %s\n",
                tr->flops_per_token / 1e9, tr->peak_flops > 0 ? "the GPU's BF16 dense peak" : "no known peak for this GPU (n/a)");
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { // what the device says is in use, against the plan (allocator rounding, fragmentation)
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        double used = (double)(total_b - free_b) - (double)tr->mem_baseline, want = (double)plan.total;
        int close = fabs(used - want) <= fmax(0.05 * want, 256.0 * 1048576.0);
        printf0("device memory: %.1f MiB in use beyond the context and communicator, the planner says %.1f MiB (%s)\n",
                used / 1048576.0, want / 1048576.0, close ? "within 5% or 256 MiB" : "NOT within 5% or 256 MiB: please report");
    }
#endif
    // parameters: a checkpoint, a model file, or initialisation (a line first: each can take seconds)
    if (f->resume) printf0("resume: looking for the %s complete checkpoint in %s ...\n", f->resume_step ? "requested" : "newest", f->out_dir);
    if (!(f->resume && resume_checkpoint(tr))) {
        if (from_file) printf0("loading %lld parameters from %s ...\n", (long long)m->d.num_params, f->model);
        else printf0("initialising %lld parameters from seed %d ...\n", (long long)m->d.num_params, f->seed);
        if (from_file == 2) { // Hugging Face: the same logical ranges, from the safetensors files
            HFCheckpoint ck;
            char err[2048];
            if (hf_open(&ck, f->model, err, sizeof(err))) die_user("-e %s", err);
            HFLlmcTensor lt[NUM_TENSORS];
            for (int k = 0; k < NUM_TENSORS; k++) lt[k] = (HFLlmcTensor){m->d.t[k].name, m->d.t[k].logical, m->d.t[k].n, !m->d.t[k].io};
            if (hf_bind(&ck, lt, NUM_TENSORS, c.Vp, err, sizeof(err))) die(1, "-e %s: %s", f->model, err);
            zero_fill_opt(&m->z, 0, hf_fill, &ck);
            hf_close(&ck);
        } else if (from_file) {
            ModelFile mf;
            GPTConfig fc;
            model_file_open(&mf, f->model, &fc);
            zero_fill_opt(&m->z, 0, model_file_fill, &mf);
            close(mf.fd);
        } else {
            InitCtx ic = {&m->d, (uint64_t)f->seed};
            zero_fill_opt(&m->z, 0, init_fill, &ic);
        }
        zero_params_from_master(&m->z);
    }
    double bad = master_nonfinite_all(&m->z); // one pass over what was loaded
    if (bad != 0.0)
        die_user("%s: the loaded weights hold %.0f non-finite value(s). HINT: %s", tr->step > 0 ? "resume" : f->model, bad,
                 tr->step > 0 ? "-resume-step an earlier checkpoint" : "the model file is corrupt or its training diverged");
    if (tr->r == 0 && f->out_dir[0]) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/log.jsonl", f->out_dir);
        if (tr->step > 0) log_truncate_after(path, tr->step); // the steps about to be trained again
        tr->log = fopen(path, tr->step > 0 ? "a" : "w");
        if (!tr->log) die_user("-o: cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

// Hashes of this rank's parameters, master, m and v (over its shard): reproducibility checks.
static void log_hashes(Trainer* tr) {
    Zero* z = &tr->model.z;
    StatePiece* pcs = (StatePiece*)malloc(sizeof(StatePiece) * MAX_BLOCK_TENSORS * z->lay.nblocks);
    int n = state_pieces(z, pcs);
    uint64_t hp = FNV_INIT, hm = FNV_INIT, h1 = FNV_INIT, h2 = FNV_INIT;
    float* buf = NULL;
    floatX* xbuf = NULL;
    for (int b = 0, i = 0; b < z->lay.nblocks; b++) { // parameters: the BF16 values of the shard
        int64_t lo = z->r * z->lay.S[b];
        Piece pc[MAX_BLOCK_TENSORS];
        int k = layout_pieces(&z->lay, b, lo, lo + z->lay.S[b], pc);
        floatX* p = zero_opt_params(z, b) + (lo - zero_opt_lo(z, b));
        for (int j = 0; j < k; j++, i++) {
            xbuf = (floatX*)realloc(xbuf, sizeof(floatX) * pc[j].len);
            dev_to_host(xbuf, p + pc[j].local, sizeof(floatX) * pc[j].len);
            hp = fnv1a(hp, xbuf, sizeof(floatX) * pc[j].len);
        }
    }
    for (int i = 0; i < n; i++) {
        buf = (float*)realloc(buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 0, pcs[i].opt_index, buf, pcs[i].len);
        hm = fnv1a(hm, buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 1, pcs[i].opt_index, buf, pcs[i].len);
        h1 = fnv1a(h1, buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 2, pcs[i].opt_index, buf, pcs[i].len);
        h2 = fnv1a(h2, buf, sizeof(float) * pcs[i].len);
    }
    // combine the ranks' hashes in rank order (the same value on every rank)
    uint64_t* all = (uint64_t*)malloc(sizeof(uint64_t) * tr->R * 4);
    uint64_t mine[4] = {hp, hm, h1, h2};
    for (int k = 0; k < 4; k++) {
        uint64_t* col = (uint64_t*)malloc(sizeof(uint64_t) * tr->R);
        comm_allgather_u64(&tr->comm, mine[k], col);
        for (int r = 0; r < tr->R; r++) all[k * tr->R + r] = col[r];
        free(col);
    }
    uint64_t out[4];
    for (int k = 0; k < 4; k++) out[k] = fnv1a(FNV_INIT, all + k * tr->R, sizeof(uint64_t) * tr->R);
    printf0("hashes: params %016llx master %016llx m %016llx v %016llx\n", (unsigned long long)out[0],
            (unsigned long long)out[1], (unsigned long long)out[2], (unsigned long long)out[3]);
    free(all); free(buf); free(xbuf); free(pcs);
}

// Exit codes (README "Exit codes"). die() uses 1 and 2 as well.
// 3 is a collective past its timeout (comm_poll, the NCCL watchdog in zero.h), a rank lost (NCCL's
// remote error, a closed rendezvous connection), or a rendezvous that failed (a peer that never
// arrived or sent garbage).
enum { ZT_EXIT_OK = 0, ZT_EXIT_RUNTIME = 1, ZT_EXIT_BAD_INPUT = 2, ZT_EXIT_DIVERGED = 4 };

// "42s", "3m05s", "2h07m": the time left at the mean pace so far.
static void fmt_duration(char* out, size_t cap, double s) {
    if (!(s >= 0) || s > 1e8) snprintf(out, cap, "?");
    else if (s < 60) snprintf(out, cap, "%.0fs", s);
    else if (s < 3600) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

// One step's line on stdout (with the ETA at the mean pace since this run's first step) and in
// log.jsonl; counts consecutive skipped steps (non-finite norms and updates) for -max-skips.
static void log_step(Trainer* tr, const StepResult* s) {
    int64_t step_tokens = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T;
    double tok_s = step_tokens / (s->ms / 1000.0);
    int done = s->step + 1 - tr->start_step, left = tr->max_steps - (s->step + 1);
    if (done == 1) { tr->t_first = wall_s(); tr->first_s = s->ms / 1000.0; }
    char eta[32];
    fmt_duration(eta, sizeof(eta), left * (done > 1 ? (wall_s() - tr->t_first) / (done - 1) : tr->first_s));
    char mfu[64] = "";
    if (g_device == DEV_CUDA) { // model FLOPs per second per GPU over the GPU's BF16 dense peak
        if (tr->peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tr->flops_per_token * tok_s / tr->R / tr->peak_flops);
        else snprintf(mfu, sizeof(mfu), " | mfu n/a");
    }
    printf0("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s | eta %s%s\n", s->step + 1, tr->max_steps,
            s->loss, s->lr, s->norm, s->ms, tok_s, mfu, eta,
            s->skipped == 2 ? " | SKIPPED: no counted target in the batch (loss mask)"
            : s->skipped == 3 ? " | SKIPPED: non-finite update (AdamW would overflow; weights unchanged)"
            : s->skipped     ? " | SKIPPED: non-finite gradient norm" : "");
    if (!isfinite(s->lr)) die(1, "internal error: step %d: learning rate %g is not finite (the flags were checked)", s->step + 1, s->lr);
    if (tr->log) {
        fprintf(tr->log, "{\"step\": %d", s->step + 1);
        json_num(tr->log, "loss", s->loss);
        json_num(tr->log, "lr", s->lr);
        json_num(tr->log, "norm", s->norm);
        fprintf(tr->log, ", \"ms\": %.3f, \"tok_s\": %.1f, \"skipped\": %d, \"comm_wait_ms\": %.3f", s->ms, tok_s, s->skipped,
                s->comm_wait_s * 1000.0);
        size_t tagged = 0; // rank 0's memory: what the tagged allocator holds, and the process's peak RSS (dev/plot.py)
        for (int t = 0; t < TAG_COUNT; t++) tagged += g_mem_bytes[t];
        fprintf(tr->log, ", \"mem_tagged\": %zu, \"vmhwm\": %lld", tagged, (long long)peak_rss_bytes());
        if (g_device == DEV_CUDA) json_num(tr->log, "mfu", tr->peak_flops > 0 ? tr->flops_per_token * tok_s / tr->R / tr->peak_flops : NAN);
        for (int k = 0; k < COLL_KINDS; k++)
            fprintf(tr->log, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)s->count[k], (long long)s->bytes[k]);
        fprintf(tr->log, "}\n");
        log_flush(tr);
    }
    tr->skips = s->skipped == 1 || s->skipped == 3 ? tr->skips + 1 : 0; // every rank sees the same norm and flag: every rank counts the same
}

// Read back and log the step still in flight (if any): the host waits for the device only here,
// before an evaluation, a sample or a checkpoint, and after the last step.
static void flush_step(Trainer* tr) {
    StepResult p = step_read_back(tr);
    if (p.valid) log_step(tr, &p);
}

// -max-skips consecutive non-finite steps (norm or update): the run has diverged.
static int diverged(Trainer* tr) {
    printf0("error: %d consecutive steps skipped (non-finite gradient norm or update): the run has diverged (-max-skips %d). "
            "HINT: lower -l, or resume from an earlier checkpoint with -y 1 -resume-step\n", tr->skips, tr->f.max_skips);
    return ZT_EXIT_DIVERGED;
}

// The training loop. Returns the exit code (the same on every rank).
static int train_loop(Trainer* tr) {
    const Flags* f = &tr->f;
    int start = tr->step, failed_ckpts = 0;
    tr->start_step = start;
    for (;;) {
        int step = tr->step, last = step >= tr->max_steps;
        tr->comm.step = step; // collectives' messages name the step being evaluated, saved or trained
        int val = tr->has_val && (step % f->val_every == 0 || last);
        int sample = (f->sample_every > 0 && (step % f->sample_every == 0 || last) && step > 0) || (last && tr->nprompts > 0); // -prompt: also at the end
        int ckpt = f->ckpt_every > 0 && step > start && (step % f->ckpt_every == 0 || last);
        if (val || sample || ckpt || last) {
            flush_step(tr);
            if (f->max_skips > 0 && tr->skips >= f->max_skips) return diverged(tr);
        }
        if (val) {
            if (step == start) // the first evaluation can take seconds before any step line
                printf0("step %5d | evaluating the val loss on %d batches of %d x %d tokens per rank ...\n", step,
                        f->val_steps, tr->model.B, tr->model.T);
            float vl = evaluate(tr);
            printf0("step %5d | val loss %.6f\n", step, vl);
            if (tr->log) { fprintf(tr->log, "{\"step\": %d", step); json_num(tr->log, "val_loss", vl); fprintf(tr->log, "}\n"); log_flush(tr); }
        }
        if (sample) sample_text(tr);
        if (ckpt) {
            int rc = save_checkpoint(tr, last);
            if (rc == CKPT_NONFINITE) return ZT_EXIT_DIVERGED;
            if (rc != 0 && last) { printf0("error: the final checkpoint (step %d) failed\n", step); return ZT_EXIT_RUNTIME; }
            if (rc != 0) failed_ckpts++; // training goes on; the run ends with exit code 1
        }
        if (last) break;
        comm_reset_stats(&tr->comm);
        StepResult s = train_step(tr); // on one GPU: the previous step's result
        if (s.valid) log_step(tr, &s);
        if (f->max_skips > 0 && tr->skips >= f->max_skips) return diverged(tr);
    }
    if (failed_ckpts) printf0("error: %d checkpoint(s) failed during the run (see above)\n", failed_ckpts);
    return failed_ckpts ? ZT_EXIT_RUNTIME : ZT_EXIT_OK;
}

static void trainer_free(Trainer* tr) {
    if (tr->log) fclose(tr->log);
    trainer_free_model(tr);
    dataloader_free(&tr->train);
    if (tr->has_val) dataloader_free(&tr->val);
    if (tr->has_tok) tokenizer_free(&tr->tok);
    for (int p = 0; p < tr->nprompts; p++) free(tr->prompt_ids[p]);
    free(tr->prompt_ids);
    free(tr->prompt_len);
}

// -export and -export-hf at the end of training (every rank takes part: blocks are gathered).
static void export_model(Trainer* tr) {
    const Flags* f = &tr->f;
    const char* dt = f->export_dtype;
    if (f->export_path[0]) {
        int fp32 = !strcmp(dt, "fp32") || (!strcmp(dt, "auto") && sizeof(floatX) == 4);
        double saved = io_wait_begin(tr);
        if (write_model_file(&tr->model.z, &tr->model.cfg, f->export_path, fp32, NULL, NULL) != 0) die(1, "-export %s failed", f->export_path);
        io_wait_end(tr, saved);
        printf0("exported the model at step %d to %s (llm.c, %s)\n", tr->step, f->export_path, fp32 ? "FP32 from the master weights" : "BF16 parameters");
    }
    if (f->export_hf[0]) {
        StDtype hd = !strcmp(dt, "bf16") ? ST_BF16 : !strcmp(dt, "fp16") ? ST_F16 : ST_F32;
        double saved = io_wait_begin(tr);
        if (write_hf_checkpoint(&tr->model, f->export_hf, hd) != 0) die(1, "-export-hf %s failed", f->export_hf);
        io_wait_end(tr, saved);
        printf0("exported the model at step %d to %s (Hugging Face GPT-2, %s)\n", tr->step, f->export_hf,
                hd == ST_F32 ? "F32 from the master weights" : hd == ST_F16 ? "F16 from the master weights" : "BF16 parameters");
    }
}

static int train_main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); // line-buffered even into a file or a pipe: a background run shows each line as it happens
    Trainer* tr = (Trainer*)calloc(1, sizeof(Trainer));
    if (trainer_setup(tr, argc, argv)) { // -plan: nothing allocated, nothing to free
        comm_free(&tr->comm);
        comm_finalize();
        free(tr);
        return 0;
    }
    print_setup(tr);
    log_memory(tr, "start");
    int rc = train_loop(tr);
    if (rc == ZT_EXIT_OK) export_model(tr);
    if (rc == ZT_EXIT_OK && tr->f.log_hash) log_hashes(tr);
    log_memory(tr, "end");
    offload_report(&tr->model.z); // [offload] how often the overflow check read the state
    int log_failed = tr->log_failed; // rank 0's; every rank ends with the same code
    comm_broadcast(&tr->comm, &log_failed, sizeof(log_failed), 0);
    if (log_failed) printf0("error: writes to %s/log.jsonl failed (see above)\n", tr->f.out_dir);
    if (rc == ZT_EXIT_OK && log_failed) rc = ZT_EXIT_RUNTIME;
    trainer_free(tr);
    comm_free(&tr->comm);
    comm_finalize();
    free(tr);
    return rc;
}

#ifndef TESTING
int main(int argc, char** argv) { return train_main(argc, argv); }
#endif
