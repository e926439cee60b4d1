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
//   6. checkpoints      llm.c model files and sharded training state, written atomically
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
#include "dataloader.h"        // defines: DataLoader, dataloader_init, dataloader_load
#include "tokenizer.h"         // defines: Tokenizer, tokenizer_init, tokenizer_print

// ----------------------------------------------------------------------------
// 1. Flags. One row per flag: llm.c's single letters where the meaning is the same, descriptive
// names for everything new. The same table parses argv, prints -help and prints the settings
// at start-up. "auto" defaults are resolved per device in resolve_defaults().

typedef enum { F_INT, F_FLOAT, F_STR, F_SWITCH } FlagType; // F_SWITCH: present = 1, takes no value

// X(flag, field, type, default, help)
#define FLAG_TABLE(X)                                                                                   \
    X("-device",        device,          F_STR,   "auto",   "cpu | cuda | auto (cuda when a GPU is present)")                    \
    X("-e",             model,           F_STR,   "auto",   "model: dN (d6 d12 d24 d36 d48 d60 d72 d84), tiny, or an llm.c .bin file; auto: d12 on cuda, tiny on cpu") \
    X("-layers",        layers,          F_INT,   "0",      "override L, the number of layers (0: from -e)")                   \
    X("-channels",      channels,        F_INT,   "0",      "override C, the width (0: from -e)")                               \
    X("-heads",         heads,           F_INT,   "0",      "override NH, the attention heads (0: from -e)")                    \
    X("-max-seq",       max_seq,         F_INT,   "0",      "override the model's maximum sequence length (0: from -e)")       \
    X("-vocab",         vocab,           F_INT,   "0",      "override V, the vocabulary size (0: from -e); padded to 128")     \
    X("-i",             train_data,      F_STR,   "data/kjv_train.bin", "train data: glob of llm.c token shards")              \
    X("-j",             val_data,        F_STR,   "data/kjv_val.bin",   "val data: glob of llm.c token shards (\"\": none)")     \
    X("-tokenizer",     tokenizer,       F_STR,   "data/gpt2_tokenizer.bin", "llm.c tokenizer file for decoding samples")       \
    X("-tokenize",      tokenize,        F_STR,   "",       "encode this text file with GPT-2's BPE into llm.c shards named by -o (a prefix), then exit; documents are separated by lines that are exactly <|endoftext|>") \
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
    X("-link-gbps",     link_gbps,       F_FLOAT, "auto",   "link bandwidth per rank for -plan, Gbit/s per direction (auto: 3600 NVLink-class on cuda, 80 on cpu)") \
    X("-tflops",        tflops,          F_FLOAT, "auto",   "compute rate per rank for -plan, TFLOP/s (auto: measured matmul on cpu, peak table x 0.5 on cuda)")

// How each type is declared and converted from its text.
#define FLAG_FIELD_F_INT(field) int field;
#define FLAG_FIELD_F_FLOAT(field) float field;
#define FLAG_FIELD_F_STR(field) char field[1024];
#define FLAG_FIELD_F_SWITCH(field) int field;
#define FLAG_CONV_F_INT(flag, field, help) \
    if (parse_int(f->field##_str, &f->field)) die_user("flag %s: '%s' is not an integer (%s)", flag, f->field##_str, help);
#define FLAG_CONV_F_FLOAT(flag, field, help) \
    if (parse_float(f->field##_str, &f->field)) die_user("flag %s: '%s' is not a number (%s)", flag, f->field##_str, help);
#define FLAG_CONV_F_STR(flag, field, help) snprintf(f->field, sizeof(f->field), "%s", f->field##_str);
#define FLAG_CONV_F_SWITCH(flag, field, help) f->field = atoi(f->field##_str);

typedef struct {
#define X(flag, field, type, def, help) char field##_str[1024]; FLAG_FIELD_##type(field)
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
            exit(0);
        }
        int known = 0;
#define X(flag, field, type, def, help)                                                                      \
        if (!known && !strcmp(a, flag) && type == F_SWITCH) {                                               \
            known = 1;                                                                                       \
            snprintf(f->field##_str, sizeof(f->field##_str), "1");                                          \
        }                                                                                                    \
        if (!known && !strcmp(a, flag)) {                                                                    \
            known = 1;                                                                                       \
            if (i + 1 >= argc) die_user("flag %s needs a value (%s). HINT: ./train -help", flag, help);      \
            if (strlen(argv[i + 1]) >= sizeof(f->field##_str)) die_user("flag %s: value too long", flag);    \
            snprintf(f->field##_str, sizeof(f->field##_str), "%s", argv[++i]);                             \
        }
        FLAG_TABLE(X)
#undef X
        if (!known) die_user("unknown flag '%s'. HINT: ./train -help lists the flags", a);
    }
}

// Convert every flag's text (after "auto" has been replaced) to its value.
static void flags_convert(Flags* f) {
#define X(flag, field, type, def, help) FLAG_CONV_##type(flag, field, help)
    FLAG_TABLE(X)
#undef X
}

static void flags_print_table(const Flags* f) {
    printf0("+----------------+------------------------------------------------------------+\n");
    printf0("| flag           | value                                                      |\n");
    printf0("+----------------+------------------------------------------------------------+\n");
#define X(flag, field, type, def, help) printf0("| %-14s | %-58.58s |\n", flag, f->field##_str);
    FLAG_TABLE(X)
#undef X
    printf0("+----------------+------------------------------------------------------------+\n");
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
// checkpoints, which tensors decay, how each is initialised, the printed layout.

typedef struct {
    int L, C, NH, V, Vp, maxT; // layers, channels, heads, vocabulary (padded: Vp), max sequence
} GPTConfig;

typedef enum { INIT_NORMAL, INIT_RESID, INIT_ONE, INIT_ZERO } InitKind;

// X(name, io (1: io block, 0: one per layer), rows, cols, decay, init)
// INIT_NORMAL: N(0, 0.02); INIT_RESID: N(0, 0.02/sqrt(2L)) for the projections into the residual
// stream (GPT-2's scaled init); INIT_ONE / INIT_ZERO: layernorm gains / biases.
#define GPT2_TENSORS(X)                                          \
    X(wte,      1, c->Vp,     c->C,     1, INIT_NORMAL)          \
    X(wpe,      1, c->maxT,   c->C,     1, INIT_NORMAL)          \
    X(ln1w,     0, 1,         c->C,     0, INIT_ONE)             \
    X(ln1b,     0, 1,         c->C,     0, INIT_ZERO)            \
    X(qkvw,     0, 3 * c->C,  c->C,     1, INIT_NORMAL)          \
    X(qkvb,     0, 1,         3 * c->C, 0, INIT_ZERO)            \
    X(attprojw, 0, c->C,      c->C,     1, INIT_RESID)           \
    X(attprojb, 0, 1,         c->C,     0, INIT_ZERO)            \
    X(ln2w,     0, 1,         c->C,     0, INIT_ONE)             \
    X(ln2b,     0, 1,         c->C,     0, INIT_ZERO)            \
    X(fcw,      0, 4 * c->C,  c->C,     1, INIT_NORMAL)          \
    X(fcb,      0, 1,         4 * c->C, 0, INIT_ZERO)            \
    X(fcprojw,  0, c->C,      4 * c->C, 1, INIT_RESID)           \
    X(fcprojb,  0, 1,         c->C,     0, INIT_ZERO)            \
    X(lnfw,     1, 1,         c->C,     0, INIT_ONE)             \
    X(lnfb,     1, 1,         c->C,     0, INIT_ZERO)

enum {
#define X(name, io, rows, cols, decay, init) T_##name,
    GPT2_TENSORS(X)
#undef X
    NUM_TENSORS
};

typedef struct {
    const char* name;
    int io;          // lives in the io block (1) or in every layer block (0)
    int64_t n;       // elements (per layer for layer tensors)
    int64_t logical; // offset of its first element in the logical vector (llm.c's file order)
    int decay;
    InitKind init;
    int64_t off;     // offset inside its block (filled from the layout)
} TensorInfo;

typedef struct {
    GPTConfig cfg;
    TensorInfo t[NUM_TENSORS];
    int64_t num_params;   // logical elements (llm.c's count, padded vocabulary rows included)
    int64_t num_real;     // the same without the padded vocabulary rows
} ModelDesc;

static void model_describe(ModelDesc* d, const GPTConfig* c) {
    memset(d, 0, sizeof(*d));
    d->cfg = *c;
    int64_t logical = 0;
#define X(tname, tio, rows, cols, tdecay, tinit)                                    \
    {                                                                               \
        TensorInfo* t = &d->t[T_##tname];                                           \
        t->name = #tname; t->io = tio; t->n = (int64_t)(rows) * (cols);             \
        t->logical = logical; t->decay = tdecay; t->init = tinit;                   \
        logical += t->n * (tio ? 1 : c->L);                                         \
    }
    GPT2_TENSORS(X)
#undef X
    d->num_params = logical;
    d->num_real = logical - (int64_t)(c->Vp - c->V) * c->C;
}

// Block layout for R ranks: block 0 = io tensors, block 1 + l = layer l's tensors, in table order.
static void model_layout(ModelDesc* d, BlockLayout* lay, int R, int r) {
    const GPTConfig* c = &d->cfg;
    layout_init(lay, 1 + c->L, R, r);
    for (int b = 0; b <= c->L; b++)
        for (int k = 0; k < NUM_TENSORS; k++) {
            TensorInfo* t = &d->t[k];
            if (t->io != (b == 0)) continue;
            int layer = b - 1;
            layout_add_tensor(lay, b, k, t->io ? -1 : layer, t->n, t->logical + (t->io ? 0 : layer * t->n), t->decay);
        }
    layout_finish(lay);
    for (int b = 0; b < 2 && b <= c->L; b++) // offsets inside a block are the same for every layer
        for (int k = 0; k < lay->ntensors[b]; k++) d->t[lay->tensors[b][k].tensor].off = lay->tensors[b][k].off;
}

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

// The ops' fixed workspace in floats: the GEMM's packed panel (at least K*NR for the largest K),
// attention backward's row sums, the embedding backward's buckets, the norm's chunk sums.
// The ops' scratch, plus STEP_SCALARS_FLOATS at its end that are not scratch: the step's scalars
// (StepScalars: loss, sum of squares, norm, clip scale, finite flag), which live across steps.
#define STEP_SCALARS_FLOATS 64 // 256 bytes
static size_t ops_workspace_floats(const GPTConfig* c, int B, int T, int64_t opt_elems) {
    int64_t BT = (int64_t)B * T;
    int64_t maxK = 4 * (int64_t)c->C;
    if (c->Vp > maxK) maxK = c->Vp;
    if (BT > maxK) maxK = BT;
    size_t ws = GEMM_PANEL_FLOATS;
    if ((size_t)maxK * GEMM_NR > ws) ws = (size_t)maxK * GEMM_NR;
    size_t att = (size_t)BT * c->NH;
    size_t enc = encoder_workspace_ints(B, T, c->V);
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
    if (!backward_follows) zero_after_forward_only(z);
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
// finish), then the global gradient norm, clipping, AdamW and whatever the stage must gather
// again. The loss gradient is pre-scaled by 1/(R*GA*B*T) so that every reduction is a SUM and
// the accumulated gradient is the mean over the global batch.

// What a step reports once its numbers are read back. skipped: the norm was not finite and the
// optimizer changed nothing (decided where the step ran).
typedef struct {
    int valid;         // 0: nothing to report (no step read back)
    int step;          // 0-based
    float loss, norm, lr;
    int skipped;
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
    int R, r, GA;
    int max_steps;
    int step;          // optimizer steps done
    int64_t adam_t;    // AdamW updates applied (a skipped step does not count)
    FILE* log;         // rank 0: <out_dir>/log.jsonl
    double flops_per_token; // for MFU: llm.c's 6N + 6LCT (mfu_flops_per_token)
    // the step's numbers (see train_step): where the step runs, and read back to the host
    StepScalars* scalars;      // the last STEP_SCALARS_FLOATS of g_work's allocation
    StepScalars* scalars_host; // their read-back (page-locked on a GPU)
    int readback_lag;          // 1 (one GPU): a step's numbers are read during the next step; 0: at once
    int pending;               // a step's read-back is issued and not read yet
    StepResult pending_res;    // that step's lr, step and collectives, until its numbers are read
    double t_mark;             // when the last result was read (or the first step began)
    double peak_flops;      // [CUDA] the GPU's BF16 dense peak (0: unknown)
    size_t mem_baseline;    // [CUDA] device memory in use after the context and communicator exist
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


// Copy a loader's micro-batch into the model's token buffers.
static void load_tokens(Model* m, const DataLoader* dl, int with_targets) {
    size_t bytes = sizeof(int) * (size_t)dl->B * dl->T;
    dev_from_host(m->a.inputs, dl->inputs, bytes);
    if (with_targets) dev_from_host(m->a.targets, dl->targets, bytes);
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

// Read the last issued step's numbers back (waiting for them on a GPU): its StepResult, and adam_t
// counts it if it was finite. Invalid when nothing is pending.
static StepResult step_read_back(Trainer* tr) {
    StepResult r;
    memset(&r, 0, sizeof(r));
    if (!tr->pending) return r;
    dev_read_wait();
    const StepScalars* h = tr->scalars_host;
    r = tr->pending_res;
    r.valid = 1;
    r.loss = (float)(h->loss_sum / ((double)tr->R * tr->GA * tr->model.B * tr->model.T));
    r.norm = h->norm;
    r.skipped = !h->finite;
    if (h->finite) tr->adam_t++;
    double now = wall_s();
    r.ms = (now - tr->t_mark) * 1000.0;
    tr->t_mark = now;
    tr->pending = 0;
    return r;
}

// One optimizer step. Its numbers (loss, sum of squares, then norm, clip scale and finite flag:
// StepScalars) are computed where the step runs, and AdamW reads the clip scale and the finite flag
// there: on a GPU the host never waits inside a step. The step's numbers are copied back
// asynchronously at its end and read during the next step, just before that step's optimizer is
// issued (the previous step is long finished by then), so adam_t counts exactly the updates applied
// and the log is exact, one step late: train_step returns the *previous* step's result on one GPU
// (readback_lag 1), this step's on the CPU device or with several ranks (lag 0: the numbers are on
// the host already, and the host decides the skip as it always did). step_read_back flushes the last
// one (train_loop: before evaluation, sampling, checkpoints and at the end).
//   per micro-step: no host wait, no device-to-host copy (README: "Host synchronisations")
//   per step:       one device-to-host copy (the scalars, into pinned memory) and one wait (the
//                   previous step's copy); with R > 1 also the scalar sum over ranks
static StepResult train_step(Trainer* tr) {
    Model* m = &tr->model;
    Zero* z = &m->z;
    const Flags* f = &tr->f;
    int B = m->B, T = m->T, BT = B * T;
    StepScalars* sc = tr->scalars;
    if (!tr->pending) tr->t_mark = wall_s(); // the step's time starts here (evaluation etc. excluded)
    float dloss = 1.0f / ((float)tr->R * tr->GA * BT);
    dev_zero(sc, sizeof(StepScalars));
    for (int micro = 0; micro < tr->GA; micro++) {
        int64_t unit = ((int64_t)tr->step * tr->GA + micro) * tr->R + tr->r;
        dataloader_load(&tr->train, unit);
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
    int apply = 1;
    if (tr->readback_lag == 0) { // the numbers are on the host already: skip here, as every rank does
        dev_to_host(tr->scalars_host, sc, sizeof(StepScalars));
        apply = tr->scalars_host->finite; // (every rank has the same sums, so every rank agrees)
    }
    if (apply) {
        zero_adamw(z, &hp, sc); // [one GPU] a non-finite step is skipped on the device
        zero_after_step(z);
    }
    zero_zero_grads(z);
    // issue the read-back; keep what the log needs until it is read
    StepResult* pr = &tr->pending_res;
    memset(pr, 0, sizeof(*pr));
    pr->step = tr->step;
    pr->lr = lr;
    memcpy(pr->count, tr->comm.count, sizeof(pr->count));
    memcpy(pr->bytes, tr->comm.bytes, sizeof(pr->bytes));
    pr->comm_wait_s = tr->comm.wait_s;
    dev_to_host_async(tr->scalars_host, sc, sizeof(StepScalars));
    tr->pending = 1;
    tr->step++;
    return tr->readback_lag ? prev : step_read_back(tr);
}

// ----------------------------------------------------------------------------
// 6. Checkpoints. Three kinds of file in the output directory (llm.c's names):
//   model_%08d.bin        the model in llm.c's format, written by rank 0:
//                         header 256 int32 {20240326, version (3: FP32, 5: BF16), maxT, V, L, NH, C, Vp}
//                         then the parameters in llm.c's order (GPT2_TENSORS), unpadded
//   state_%08d_%05d.bin   one per rank: step, AdamW count, seed, and the rank's shard of master,
//                         m and v in the *logical* layout: a table of (logical offset, length)
//                         pieces, then the values. Any rank count or stage reads exactly the
//                         pieces it needs from whichever files hold them.
//   DONE_%08d             written by rank 0 once every rank reported success
// Every file is written under a temporary name, fsynced and renamed, so a crash leaves the last
// good checkpoint intact. Resuming (-y 1) starts from the newest step with a DONE marker.

#define MODEL_MAGIC 20240326
#define STATE_MAGIC 20261129 // zerotrain training state, version 1
#define STATE_HEADER_INTS 32

// Write-to-temp, fsync, rename, fsync the directory. Returns 0 on success.
static int file_commit(int fd, const char* tmp, const char* path) {
    if (fsync(fd) != 0) { close(fd); unlink(tmp); return -1; }
    if (close(fd) != 0) { unlink(tmp); return -1; }
    if (rename(tmp, path) != 0) { unlink(tmp); return -1; }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, sizeof(dir), ".");
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { fsync(dfd); close(dfd); }
    return 0;
}

static int pwrite_all(int fd, const void* buf, size_t n, off_t off) {
    const char* p = (const char*)buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w <= 0) { if (w < 0 && errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w; off += w;
    }
    return 0;
}

static int pread_all(int fd, void* buf, size_t n, off_t off) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r <= 0) { if (r < 0 && errno == EINTR) continue; return -1; }
        p += r; n -= (size_t)r; off += r;
    }
    return 0;
}

// The model in llm.c's format. Every rank must call it (under ZeRO-3 each block is gathered);
// rank 0 writes. Returns 0 on success (on rank 0; other ranks return 0).
static int write_model_file(Model* m, const char* path) {
    const GPTConfig* c = &m->cfg;
    Zero* z = &m->z;
    int fd = -1, ok = 1;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    if (g_rank == 0) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) { fprintf(stderr, "error: cannot create %s: %s\n", tmp, strerror(errno)); ok = 0; }
        int header[256] = {0};
        header[0] = MODEL_MAGIC;
        header[1] = sizeof(floatX) == 2 ? 5 : 3;
        header[2] = c->maxT; header[3] = c->V; header[4] = c->L; header[5] = c->NH; header[6] = c->C; header[7] = c->Vp;
        if (ok && pwrite_all(fd, header, sizeof(header), 0) != 0) ok = 0;
    }
    size_t maxP = 0;
    for (int b = 0; b < z->lay.nblocks; b++) maxP = (size_t)z->lay.P[b] > maxP ? (size_t)z->lay.P[b] : maxP;
    floatX* host = g_rank == 0 ? (floatX*)malloc(maxP * sizeof(floatX)) : NULL;
    for (int b = 0; b < z->lay.nblocks; b++) {
        floatX* p = zero_params(z, b); // [ZeRO-3] a gather every rank takes part in
        if (g_rank == 0 && ok) {
            dev_to_host(host, p, z->lay.P[b] * sizeof(floatX));
            for (int k = 0; k < z->lay.ntensors[b] && ok; k++) {
                const BlockTensor* t = &z->lay.tensors[b][k];
                if (pwrite_all(fd, host + t->off, t->len * sizeof(floatX), 1024 + t->logical * (off_t)sizeof(floatX)) != 0) ok = 0;
            }
        }
        zero_release(z, b);
    }
    free(host);
    if (g_rank != 0) return 0;
    if (!ok || file_commit(fd, tmp, path) != 0) {
        fprintf(stderr, "error: writing %s failed: %s. HINT: check free disk space and permissions\n", path, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        return -1;
    }
    return 0;
}

// Reading an llm.c model file: check its header (exit 2 with the reason on anything wrong).
typedef struct { int fd; int version; size_t esize; const char* path; } ModelFile;

static void model_file_open(ModelFile* mf, const char* path, GPTConfig* c) {
    mf->path = path;
    mf->fd = open(path, O_RDONLY);
    if (mf->fd < 0) die_user("-e %s: cannot open: %s", path, strerror(errno));
    int h[256];
    if (pread_all(mf->fd, h, sizeof(h), 0) != 0) die_user("-e %s: truncated header (an llm.c model file starts with 1024 bytes)", path);
    if (h[0] != MODEL_MAGIC) die_user("-e %s: wrong magic %d (expected %d: an llm.c GPT-2 model file)", path, h[0], MODEL_MAGIC);
    if (h[1] != 3 && h[1] != 5) die_user("-e %s: unsupported version %d (expected 3: FP32 or 5: BF16)", path, h[1]);
    c->maxT = h[2]; c->V = h[3]; c->L = h[4]; c->NH = h[5]; c->C = h[6]; c->Vp = h[7];
    if (c->maxT < 1 || c->V < 1 || c->L < 1 || c->NH < 1 || c->C < 1 || c->Vp < c->V)
        die_user("-e %s: impossible sizes in the header (maxT %d, V %d, L %d, NH %d, C %d, Vp %d)", path, c->maxT, c->V, c->L, c->NH, c->C, c->Vp);
    mf->version = h[1];
    mf->esize = h[1] == 3 ? 4 : 2;
    ModelDesc d;
    model_describe(&d, c);
    struct stat st;
    fstat(mf->fd, &st);
    off_t want = 1024 + (off_t)d.num_params * (off_t)mf->esize;
    if (st.st_size != want)
        die_user("-e %s: file is %lld bytes but its header describes %lld (%lld parameters of %d bytes): truncated or not an llm.c model",
                 path, (long long)st.st_size, (long long)want, (long long)d.num_params, (int)mf->esize);
}

// LogicalFill from a model file: FP32 (v3) or BF16 (v5) values, widened to FP32.
static void model_file_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const ModelFile* mf = (const ModelFile*)ctx;
    void* buf = malloc(len * mf->esize);
    if (pread_all(mf->fd, buf, len * mf->esize, 1024 + logical * (off_t)mf->esize) != 0)
        die(1, "-e %s: read failed: %s", mf->path, strerror(errno));
    for (int64_t i = 0; i < len; i++)
        dst[i] = mf->esize == 4 ? ((float*)buf)[i] : bf16_to_f32(((bf16_t*)buf)[i]);
    free(buf);
}

// The rank's shard pieces of every block (what its state file holds), and where each piece's
// values are in the optimizer arrays.
typedef struct { int64_t logical, len, opt_index; } StatePiece;

static int state_pieces(const Zero* z, StatePiece* out) {
    int n = 0;
    Piece pc[MAX_BLOCK_TENSORS];
    for (int b = 0; b < z->lay.nblocks; b++) {
        int64_t lo = z->r * z->lay.S[b];
        int k = layout_pieces(&z->lay, b, lo, lo + z->lay.S[b], pc);
        for (int i = 0; i < k; i++) {
            out[n].logical = pc[i].logical;
            out[n].len = pc[i].len;
            out[n].opt_index = zero_opt_off(z, b) + (lo - zero_opt_lo(z, b)) + pc[i].local;
            n++;
        }
    }
    return n;
}

// This rank's state file. Returns 0 on success.
static int write_state_file(Trainer* tr, const char* path) {
    Zero* z = &tr->model.z;
    const GPTConfig* c = &tr->model.cfg;
    StatePiece* pcs = (StatePiece*)malloc(sizeof(StatePiece) * MAX_BLOCK_TENSORS * z->lay.nblocks);
    int n = state_pieces(z, pcs);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += pcs[i].len;
    int64_t h[STATE_HEADER_INTS] = {0};
    h[0] = STATE_MAGIC; h[1] = 1; h[2] = tr->R; h[3] = tr->r; h[4] = z->stage; h[5] = tr->step;
    h[6] = tr->adam_t; h[7] = tr->f.seed; h[8] = n; h[9] = z->lay.logical_total;
    h[10] = c->L; h[11] = c->C; h[12] = c->NH; h[13] = c->V; h[14] = c->Vp; h[15] = c->maxT;
    h[16] = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T; // tokens per step
    h[17] = dataloader_total_tokens(&tr->train);
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0;
    off_t off = 0;
    if (ok) ok = pwrite_all(fd, h, sizeof(h), 0) == 0;
    off = sizeof(h);
    for (int i = 0; i < n && ok; i++) {
        int64_t e[2] = {pcs[i].logical, pcs[i].len};
        ok = pwrite_all(fd, e, sizeof(e), off) == 0;
        off += sizeof(e);
    }
    float* arrays[3] = {z->master, z->m, z->v};
    int64_t maxlen = 1;
    for (int i = 0; i < n; i++) maxlen = pcs[i].len > maxlen ? pcs[i].len : maxlen;
    float* host = (float*)malloc(sizeof(float) * maxlen); // one piece at a time
    for (int a = 0; a < 3 && ok; a++)
        for (int i = 0; i < n && ok; i++) {
            dev_to_host(host, arrays[a] + pcs[i].opt_index, sizeof(float) * pcs[i].len);
            ok = pwrite_all(fd, host, sizeof(float) * pcs[i].len, off) == 0;
            off += sizeof(float) * pcs[i].len;
        }
    free(host);
    free(pcs);
    if (!ok || file_commit(fd, tmp, path) != 0) {
        fprintf(stderr, "[rank %d] error: writing %s failed: %s. HINT: check free disk space and permissions\n", tr->r, path, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        return -1;
    }
    return 0;
}

static int write_marker(const char* path, int step) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    char text[32];
    int len = snprintf(text, sizeof(text), "%d\n", step);
    if (pwrite_all(fd, text, len, 0) != 0) { close(fd); unlink(tmp); return -1; }
    return file_commit(fd, tmp, path);
}

// Steps with a DONE marker in dir, ascending. Returns the count (list may be NULL to count).
static int list_done_steps(const char* dir, int* list, int cap) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        int s;
        char rest;
        if (sscanf(e->d_name, "DONE_%d%c", &s, &rest) == 1 && strlen(e->d_name) == 13) {
            if (list && n < cap) list[n] = s;
            n++;
        }
    }
    closedir(d);
    if (list) // insertion sort: a handful of entries
        for (int i = 1; i < n && i < cap; i++)
            for (int j = i; j > 0 && list[j - 1] > list[j]; j--) { int t = list[j]; list[j] = list[j - 1]; list[j - 1] = t; }
    return n;
}

// Remove every file of checkpoint `step` (DONE marker first, so a half-deleted one is never "complete").
static void remove_checkpoint(const char* dir, int step) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    unlink(path);
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    unlink(path);
    snprintf(path, sizeof(path), "%s/state_%08d_*.bin", dir, step);
    glob_t g;
    if (glob(path, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
    globfree(&g);
}

// A checkpoint of the current step: every rank takes part.
static void save_checkpoint(Trainer* tr) {
    const char* dir = tr->f.out_dir;
    char path[PATH_MAX];
    double err = 0.0;
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, tr->step);
    if (write_model_file(&tr->model, path) != 0) err += 1.0;
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", dir, tr->step, tr->r);
    if (write_state_file(tr, path) != 0) err += 1.0;
    comm_sum_doubles(&tr->comm, &err, 1); // every rank learns whether all files are safe
    if (err != 0.0) {
        printf0("checkpoint at step %d is incomplete (%d file(s) failed): no DONE marker; the previous one stays\n", tr->step, (int)err);
        return;
    }
    if (tr->r != 0) return;
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, tr->step);
    if (write_marker(path, tr->step) != 0) { fprintf(stderr, "error: writing %s failed: %s\n", path, strerror(errno)); return; }
    printf("checkpoint: step %d written to %s\n", tr->step, dir);
    if (tr->f.ckpt_keep > 0) {
        int steps[4096];
        int n = list_done_steps(dir, steps, 4096);
        for (int i = 0; i < n - tr->f.ckpt_keep && i < 4096; i++) remove_checkpoint(dir, steps[i]);
    }
}

// Resuming: the old state files of `step`, their piece tables sorted by logical offset.
typedef struct { int64_t logical, len; int file; int64_t index; } OldPiece; // index: element in its file's arrays
typedef struct {
    int nfiles;
    int* fd;
    int64_t* total;      // elements per array in each file
    int64_t* data_off;   // byte offset of the master array in each file
    OldPiece* pieces;
    int npieces;
    int which;           // 0 master, 1 m, 2 v: what state_fill reads
    const char* dir;
} OldState;

static int cmp_oldpiece(const void* a, const void* b) {
    int64_t x = ((const OldPiece*)a)->logical, y = ((const OldPiece*)b)->logical;
    return x < y ? -1 : x > y;
}

// Open every state file of `step`, check them against the model, read their piece tables.
static void old_state_open(OldState* os, Trainer* tr, int step, int64_t* adam_t) {
    const GPTConfig* c = &tr->model.cfg;
    memset(os, 0, sizeof(*os));
    os->dir = tr->f.out_dir;
    char path[PATH_MAX];
    int R_old = -1;
    for (int f = 0; R_old < 0 || f < R_old; f++) {
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", os->dir, step, f);
        int fd = open(path, O_RDONLY);
        if (fd < 0) die_user("resume: cannot open %s: %s (a DONE marker says step %d is complete). HINT: remove DONE_%08d to fall back to an older checkpoint", path, strerror(errno), step, step);
        int64_t h[STATE_HEADER_INTS];
        if (pread_all(fd, h, sizeof(h), 0) != 0) die_user("resume: %s: truncated header", path);
        if (h[0] != STATE_MAGIC || h[1] != 1) die_user("resume: %s: not a zerotrain state file (magic %lld, version %lld; expected %d, 1)", path, (long long)h[0], (long long)h[1], STATE_MAGIC);
        if (f == 0) {
            R_old = (int)h[2];
            if (R_old < 1 || R_old > ZT_MAX_RANKS) die_user("resume: %s: bad world size %d", path, R_old);
            os->nfiles = R_old;
            os->fd = (int*)calloc(R_old, sizeof(int));
            os->total = (int64_t*)calloc(R_old, sizeof(int64_t));
            os->data_off = (int64_t*)calloc(R_old, sizeof(int64_t));
            *adam_t = h[6];
        }
        if (h[2] != R_old || h[3] != f || h[5] != step)
            die_user("resume: %s: header says rank %lld of %lld at step %lld, expected rank %d of %d at step %d", path, (long long)h[3], (long long)h[2], (long long)h[5], f, R_old, step);
        if (h[10] != c->L || h[11] != c->C || h[12] != c->NH || h[13] != c->V || h[14] != c->Vp || h[15] != c->maxT)
            die_user("resume: %s: the checkpoint's model (L %lld, C %lld, NH %lld, V %lld, maxT %lld) differs from this run's (L %d, C %d, NH %d, V %d, maxT %d). HINT: resume with the same -e and model flags", path,
                     (long long)h[10], (long long)h[11], (long long)h[12], (long long)h[13], (long long)h[15], c->L, c->C, c->NH, c->V, c->maxT);
        if (f == 0 && h[7] != tr->f.seed) printf0("warning: the checkpoint was trained with -seed %lld, this run has -seed %d: the data order changes\n", (long long)h[7], tr->f.seed);
        if (f == 0 && h[16] != (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T)
            printf0("warning: the checkpoint used %lld tokens per step, this run %lld: the data position is the step, so samples are skipped or repeated\n",
                    (long long)h[16], (long long)tr->GA * tr->R * tr->model.B * tr->model.T);
        int n = (int)h[8];
        os->fd[f] = fd;
        os->pieces = (OldPiece*)realloc(os->pieces, sizeof(OldPiece) * (os->npieces + n));
        int64_t idx = 0;
        for (int i = 0; i < n; i++) {
            int64_t e[2];
            if (pread_all(fd, e, sizeof(e), sizeof(h) + 16 * (off_t)i) != 0) die_user("resume: %s: truncated piece table", path);
            OldPiece* p = &os->pieces[os->npieces++];
            p->logical = e[0]; p->len = e[1]; p->file = f; p->index = idx;
            idx += e[1];
        }
        os->total[f] = idx;
        os->data_off[f] = sizeof(h) + 16 * (int64_t)n;
        struct stat st;
        fstat(fd, &st);
        if (st.st_size != os->data_off[f] + 12 * idx)
            die_user("resume: %s: %lld bytes, expected %lld: truncated", path, (long long)st.st_size, (long long)(os->data_off[f] + 12 * idx));
    }
    qsort(os->pieces, os->npieces, sizeof(OldPiece), cmp_oldpiece);
    int64_t covered = 0; // the pieces must tile the logical vector exactly
    for (int i = 0; i < os->npieces; i++) {
        if (os->pieces[i].logical != covered) die_user("resume: the state files of step %d do not cover the parameters (gap or overlap at %lld)", step, (long long)covered);
        covered += os->pieces[i].len;
    }
    if (covered != tr->model.z.lay.logical_total) die_user("resume: the state files of step %d hold %lld parameters, the model has %lld", step, (long long)covered, (long long)tr->model.z.lay.logical_total);
}

// LogicalFill from the old state files: reads exactly the overlapping ranges.
static void old_state_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const OldState* os = (const OldState*)ctx;
    int lo = 0, hi = os->npieces - 1; // the last piece starting at or before `logical`
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (os->pieces[mid].logical <= logical) lo = mid; else hi = mid - 1;
    }
    for (int i = lo; len > 0; i++) {
        const OldPiece* p = &os->pieces[i];
        int64_t skip = logical - p->logical;
        int64_t take = p->len - skip < len ? p->len - skip : len;
        off_t off = os->data_off[p->file] + 4 * ((int64_t)os->which * os->total[p->file] + p->index + skip);
        if (pread_all(os->fd[p->file], dst, sizeof(float) * take, off) != 0) die(1, "resume: reading state file %d failed: %s", p->file, strerror(errno));
        dst += take; logical += take; len -= take;
    }
}

// Resume from the newest complete checkpoint (rank 0 chooses, every rank follows). Returns 1 if
// one was loaded.
static int resume_checkpoint(Trainer* tr) {
    int step = -1;
    if (tr->r == 0) {
        int steps[4096];
        int n = list_done_steps(tr->f.out_dir, steps, 4096);
        if (n > 4096) n = 4096;
        if (tr->f.resume_step > 0) {
            for (int i = 0; i < n; i++)
                if (steps[i] == tr->f.resume_step) step = steps[i];
            if (step < 0) step = -2;
        } else if (n > 0) step = steps[n - 1];
    }
    comm_broadcast(&tr->comm, &step, sizeof(step), 0);
    if (step == -2) die_user("-resume-step %d: no complete checkpoint (DONE_%08d) of that step in %s", tr->f.resume_step, tr->f.resume_step, tr->f.out_dir);
    if (step < 0) { printf0("resume: no complete checkpoint in %s, starting from step 0\n", tr->f.out_dir); return 0; }
    Zero* z = &tr->model.z;
    OldState os;
    int64_t adam_t = 0;
    old_state_open(&os, tr, step, &adam_t);
    float* arrays[3] = {z->master, z->m, z->v};
    for (int a = 0; a < 3; a++) {
        os.which = a;
        zero_fill_opt(z, arrays[a], old_state_fill, &os);
    }
    for (int f = 0; f < os.nfiles; f++) close(os.fd[f]);
    free(os.fd); free(os.total); free(os.data_off); free(os.pieces);
    zero_params_from_master(z);
    tr->step = step;
    tr->adam_t = adam_t;
    printf0("resume: step %d from %s (written by %d rank(s))\n", step, tr->f.out_dir, os.nfiles);
    return 1;
}

// ----------------------------------------------------------------------------
// 7. Evaluation and sampling. Every rank runs every forward (under ZeRO-3 each takes part in
// every gather), so every rank computes the same numbers; rank 0 prints them.

// Mean loss over val_steps micro-batches per rank of the val set (unit s*R + r of batch s).
static float evaluate(Trainer* tr) {
    Model* m = &tr->model;
    int B = m->B, T = m->T;
    int64_t units = tr->val.total_samples / B / tr->R; // whole micro-batches per rank in the val set
    int nb = tr->f.val_steps < 0 || tr->f.val_steps > units ? (int)units : tr->f.val_steps;
    if (nb < 1) nb = 1;
    double sum = 0.0;
    for (int s = 0; s < nb; s++) {
        dataloader_load(&tr->val, (int64_t)s * tr->R + tr->r);
        load_tokens(m, &tr->val, 1);
        gpt_forward(m, B, T, 1, 0.0f, 0);
        sum += sum_losses(m, B * T);
    }
    comm_sum_doubles(&tr->comm, &sum, 1);
    return (float)(sum / ((double)nb * tr->R * B * T));
}

// Generate gen_tokens tokens after an end-of-text token, sampling from the softmax at
// temperature 1 with the counter-based RNG keyed by (seed, step, position): the same text on
// every rank, and on a rerun or a resume.
static void sample_text(Trainer* tr) {
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    int n = tr->f.gen_tokens, T = m->T;
    int* gen = (int*)malloc(sizeof(int) * (n + 1));
    floatX* row = (floatX*)malloc(sizeof(floatX) * c->Vp);
    gen[0] = tr->has_tok && tr->tok.eot_token >= 0 && tr->tok.eot_token < c->V ? tr->tok.eot_token : 0;
    uint64_t key = rng_key((uint64_t)tr->f.seed, 0x53414D504C45ull /* "SAMPLE" */, (uint64_t)tr->step);
    printf0("sample at step %d:\n---\n", tr->step);
    for (int t = 1; t <= n; t++) {
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

// ----------------------------------------------------------------------------
// 8. Sizing: one pure function from the configuration to the bytes of every tag on one rank
// (plan_config), which the allocator follows (trainer_setup checks every tag against it), the
// communication schedule of a step, an estimate of the step time, -plan, and -z / -r auto.
// Nothing here allocates the model.

typedef struct {
    int stage, recompute, offload;  // offload: the optimizer state would live on the host (not available yet)
    size_t bytes[TAG_COUNT];        // per rank
    size_t total;                   // on the device (offload rows: without the optimizer state)
    size_t host_per_node;           // offload rows: host bytes per node for the optimizer state
    int64_t coll_count[COLL_KINDS], coll_bytes[COLL_KINDS]; // per step, as the log counts them
    double traffic;                 // bytes a rank sends per step with ring algorithms
    double compute_s, comm_s, step_s;
    int fits;
} PlanRow;

typedef struct {
    double mem;          // bytes per rank
    const char* mem_src;
    double flops;        // FLOP/s per rank
    char flops_src[128];
    double link;         // bytes/s per rank and direction
    const char* link_src;
} PlanEnv;

// Bytes of every tag on one rank and the collectives of one step, for a configuration.
static void plan_config(const GPTConfig* c, int B, int T, int R, int GA, int stage, int recompute, PlanRow* p) {
    memset(p, 0, sizeof(*p));
    p->stage = stage;
    p->recompute = recompute;
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
    p->bytes[TAG_MASTER] = p->bytes[TAG_ADAM_M] = p->bytes[TAG_ADAM_V] = 4 * s.opt;
    p->bytes[TAG_ACTS] = acts;
    p->bytes[TAG_LOGITS] = logits;
    p->bytes[TAG_COMM] = 4 * s.comm;
    p->bytes[TAG_WORK] = 4 * ops_workspace_floats(c, B, T, s.opt);
    for (int t = 0; t < TAG_COUNT; t++) p->total += p->bytes[t];
    // the schedule of the hook table, per step (what the log counts: each collective's full buffer)
    int64_t L = c->L, total = lay.total, Pio = lay.P[0], Pl = lay.P[1];
    double ring = (double)(R - 1) / R; // share of a buffer a rank sends in a ring reduce-scatter or all-gather
    switch (stage) {
    case 0:
        p->coll_count[COLL_ALL_REDUCE] = L + 1; p->coll_bytes[COLL_ALL_REDUCE] = 4 * total;
        p->traffic = 2 * ring * 4 * total;
        break;
    case 1:
    case 2: {
        int64_t rs = stage == 1 ? 1 : GA; // ZeRO-1 reduces once per step, ZeRO-2 every micro-step
        p->coll_count[COLL_REDUCE_SCATTER] = rs * (L + 1); p->coll_bytes[COLL_REDUCE_SCATTER] = rs * 4 * total;
        p->coll_count[COLL_ALL_GATHER] = L + 1; p->coll_bytes[COLL_ALL_GATHER] = X * total;
        p->traffic = ring * (rs * 4.0 * total + X * total);
        break;
    }
    case 3:
        p->coll_count[COLL_REDUCE_SCATTER] = GA * (L + 1); p->coll_bytes[COLL_REDUCE_SCATTER] = GA * 4 * total;
        p->coll_count[COLL_ALL_GATHER] = GA * (2 * L + 1); p->coll_bytes[COLL_ALL_GATHER] = GA * X * (2 * Pio + (2 * L - 1) * Pl);
        p->traffic = ring * (p->coll_bytes[COLL_REDUCE_SCATTER] + p->coll_bytes[COLL_ALL_GATHER]);
        break;
    }
    p->coll_count[COLL_SCALARS] = 1;
    p->coll_bytes[COLL_SCALARS] = 2 * 8 * R;
    if (R == 1) p->traffic = 0;
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
// prints "n/a". More specific names first (an "H100 PCIe" is also an "H100").
static inline double gpu_peak_tflops(const char* name) {
    static const struct { const char* part; double tflops; } table[] = {
        {"H200 NVL", 835}, {"H100 NVL", 835}, {"H100 PCIe", 756}, {"H200", 989}, {"H100", 989},
        {"GH200", 989}, {"A100", 312}, {"A800", 312}, {"L40S", 362}, {"L4", 121}, {"A10", 125},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strstr(name, table[i].part)) return table[i].tflops;
    return 0.0;
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

// Measured FP32 matmul rate of this process's CPU threads, FLOP/s (a 256 x 1024 x 256 product).
static double measure_cpu_flops(void) {
    const int M = 256, N = 1024, K = 256;
    floatX* a = (floatX*)calloc((size_t)M * K, sizeof(floatX));
    floatX* b = (floatX*)calloc((size_t)N * K, sizeof(floatX));
    floatX* o = (floatX*)calloc((size_t)M * N, sizeof(floatX));
    float* saved = g_work;
    size_t saved_n = g_work_floats;
    g_work_floats = (size_t)K * N;
    g_work = (float*)malloc(sizeof(float) * g_work_floats);
    double best = 0.0;
    for (int rep = 0; rep < 4; rep++) {
        double t0 = wall_s();
        op_matmul_forward(o, NULL, a, b, NULL, M, K, N);
        double dt = wall_s() - t0;
        if (rep > 0 && dt > 0) best = fmax(best, 2.0 * M * N * K / dt);
    }
    free(g_work);
    g_work = saved;
    g_work_floats = saved_n;
    free(a); free(b); free(o);
    return best;
}

// Where the planner's memory, compute rate and bandwidth come from (each printed with its source).
static void plan_env(const Flags* f, const Launch* L, PlanEnv* e) {
    memset(e, 0, sizeof(*e));
    const char* env = getenv("ZT_DEVICE_MEM"); // this process's memory, overriding detection (testing)
    if (f->gpu_mem[0]) {
        e->mem = parse_size(f->gpu_mem);
        if (e->mem <= 0) die_user("flag -gpu-mem: '%s' is not a memory size (examples: 80GiB, 40GB, 512MiB, 1073741824)", f->gpu_mem);
        e->mem_src = "-gpu-mem";
    } else if (env && *env) {
        e->mem = parse_size(env);
        if (e->mem <= 0) die_user("ZT_DEVICE_MEM='%s' is not a memory size (examples: 80GiB, 512MiB)", env);
        e->mem_src = "ZT_DEVICE_MEM";
    } else if (g_device == DEV_CUDA) {
#ifdef __CUDACC__
        size_t free_b = 0, total_b = 0;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        e->mem = (double)free_b;
#endif
        e->mem_src = "free GPU memory";
    } else {
        FILE* m = fopen("/proc/meminfo", "r");
        long long kb = 0;
        char line[256];
        while (m && fgets(line, sizeof(line), m))
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
        if (m) fclose(m);
        e->mem = (double)kb * 1024.0 / (L->local_world > 0 ? L->local_world : 1);
        e->mem_src = "available host memory / ranks on this node";
    }
    if (f->tflops > 0) {
        e->flops = f->tflops * 1e12;
        snprintf(e->flops_src, sizeof(e->flops_src), "-tflops");
    } else if (g_device == DEV_CUDA) {
        e->flops = 0.5 * 989e12; // until kernels exist to measure: H100/H200 SXM BF16 dense peak x 0.5
        snprintf(e->flops_src, sizeof(e->flops_src), "assumed: 50%% of an H100's 989 TFLOP/s");
    } else {
        e->flops = measure_cpu_flops();
        snprintf(e->flops_src, sizeof(e->flops_src), "measured matmul, %d threads", num_threads());
    }
    double gbps = f->link_gbps > 0 ? f->link_gbps : g_device == DEV_CUDA ? 3600.0 : 80.0;
    e->link = gbps * 1e9 / 8.0;
    e->link_src = f->link_gbps > 0 ? "-link-gbps" : g_device == DEV_CUDA ? "default: NVLink-class" : "default: shared memory";
}

// Every stage x recompute row (and one offload row per stage), with fit and time.
static int plan_rows(const GPTConfig* c, int B, int T, int R, int GA, int local_ranks, const PlanEnv* e, PlanRow* rows) {
    int n = 0;
    for (int z = 0; z <= 3; z++) {
        for (int r = 0; r <= 3; r++) {
            PlanRow* p = &rows[n++];
            plan_config(c, B, T, R, GA, z, r, p);
            p->compute_s = plan_flops_per_token(c, T, r) * B * T * GA / e->flops;
            p->comm_s = p->traffic / e->link;
            p->step_s = p->compute_s + p->comm_s; // no overlap assumed
            p->fits = p->total <= e->mem;
        }
        // offload: master, m, v on the host; what it would need (never recommended: not available yet)
        PlanRow* p = &rows[n++];
        *p = rows[n - 4]; // the -r 1 row of this stage (the default)
        p->offload = 1;
        size_t opt = p->bytes[TAG_MASTER] + p->bytes[TAG_ADAM_M] + p->bytes[TAG_ADAM_V];
        p->total -= opt;
        p->host_per_node = opt * (size_t)local_ranks;
        p->fits = 0;
    }
    return n;
}

// The recommendation: among the rows that fit (offload never), the lowest estimated step time;
// ties (within 1%) go to the lower stage, then to less recompute, the order users are taught.
// With R > 1 ZeRO-0 is never chosen: ZeRO-1 sends less (BF16 gather instead of FP32) in less memory.
// stage / recompute >= 0 fix that choice. Returns the row index or -1.
static int plan_choose(const PlanRow* rows, int n, int R, int stage, int recompute) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        const PlanRow* p = &rows[i];
        if (p->offload || !p->fits || (R > 1 && p->stage == 0 && stage != 0)) continue;
        if ((stage >= 0 && p->stage != stage) || (recompute >= 0 && p->recompute != recompute)) continue;
        if (best < 0 || p->step_s < rows[best].step_s * 0.99) best = i; // rows come in (stage, recompute) order
    }
    return best;
}

static const char* plan_unit(double max_bytes, double* div) {
    if (max_bytes >= 1073741824.0) { *div = 1073741824.0; return "GiB"; }
    *div = 1048576.0;
    return "MiB";
}

// Why nothing fits, and what would: more ranks, a smaller micro-batch, recompute, more memory.
static void plan_explain_misfit(const GPTConfig* c, int B, int T, int R, int GA, const PlanEnv* e, char* out, size_t cap) {
    PlanRow p;
    plan_config(c, B, T, R, GA, 3, 3, &p);
    size_t fixed = p.bytes[TAG_ACTS] + p.bytes[TAG_LOGITS] + p.bytes[TAG_WORK] + p.bytes[TAG_PARAM_BUF] + p.bytes[TAG_GRAD_BUF];
    double div;
    const char* u = plan_unit(fmax((double)p.total, e->mem), &div);
    int n = snprintf(out, cap, "nothing fits in %.2f %s per rank (%s): the smallest, ZeRO-3 with -r 3, needs %.2f %s at R = %d",
                     e->mem / div, u, e->mem_src, p.total / div, u, R);
    int Rfit = 0;
    for (int r2 = R + 1; r2 <= 65536 && !Rfit; r2 *= 2) {
        PlanRow q;
        plan_config(c, B, T, r2, GA, 3, 3, &q);
        if (q.total <= e->mem) Rfit = r2;
    }
    if (Rfit) n += snprintf(out + n, cap - n, "; with %d ranks it would fit", Rfit);
    if (fixed > e->mem * 0.5)
        n += snprintf(out + n, cap - n, "; activations, logits and buffers alone need %.2f %s: use a smaller micro-batch -b (and -d to keep the batch)",
                      fixed / div, u);
    snprintf(out + n, cap - n, ". HINT: more ranks, a smaller -b, -r 3, or more memory per rank");
}

// -plan: the table, the recommendation, and <out_dir>/plan.jsonl. Prints on rank 0.
static void run_plan(const Flags* f, const GPTConfig* c, int R, const Launch* L) {
    int GA = f->total_batch == -1 ? 1 : (int)(f->total_batch / ((int64_t)f->B * f->T * R));
    int local = L->local_world > 0 ? L->local_world : 1;
    if (f->world > 0) local = R < 8 ? R : 8; // planning another world: assume up to 8 ranks a node
    PlanEnv e;
    plan_env(f, L, &e);
    PlanRow rows[20];
    int n = plan_rows(c, f->B, f->T, R, GA, local, &e, rows);
    ModelDesc d;
    model_describe(&d, c);
    double maxb = 0;
    for (int i = 0; i < n; i++) maxb = fmax(maxb, (double)rows[i].total);
    double div;
    const char* u = plan_unit(fmax(maxb, e.mem), &div);
    printf0("plan: L %d C %d NH %d V %d (%lld parameters), B %d x T %d x R %d x GA %d, %s %s\n", c->L, c->C, c->NH, c->V,
            (long long)d.num_real, f->B, f->T, R, GA, g_device == DEV_CUDA ? "cuda" : "cpu", PRECISION_NAME);
    printf0("  memory per rank %.2f %s (%s); compute %.3g TFLOP/s (%s); link %.0f Gbit/s (%s)\n", e.mem / div, u, e.mem_src,
            e.flops / 1e12, e.flops_src, e.link * 8 / 1e9, e.link_src);
    printf0("per-rank %s by tag (activations: one micro-batch; time: compute + communication, no overlap assumed):\n", u);
    printf0("| z | -r  |");
    for (int t = 0; t < TAG_COUNT; t++) printf0(" %s |", mem_tag_name[t]);
    printf0("   total | fits | comm/step %s | est s/step |\n", u);
    for (int i = 0; i < n; i++) {
        const PlanRow* p = &rows[i];
        if (p->offload) printf0("| %d | off |", p->stage);
        else printf0("| %d | %d   |", p->stage, p->recompute);
        for (int t = 0; t < TAG_COUNT; t++) printf0(" %*.2f |", (int)strlen(mem_tag_name[t]), p->bytes[t] / div);
        int64_t cb = 0;
        for (int k = 0; k < COLL_KINDS; k++) cb += p->coll_bytes[k];
        if (p->offload)
            printf0(" %7.2f | not available yet: optimizer offload would need %.2f %s of host memory per node\n", p->total / div, p->host_per_node / div, u);
        else
            printf0(" %7.2f | %-4s | %13.2f | %10.3g |\n", p->total / div, p->fits ? "yes" : "no", cb / div, p->step_s);
    }
    int best = plan_choose(rows, n, R, -1, -1);
    if (best < 0) {
        char why[1024];
        plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
        printf0("recommendation: none: %s\n", why);
    } else {
        const PlanRow* p = &rows[best];
        printf0("recommendation: -z %d -r %d: fits (%.2f of %.2f %s) and has the lowest estimated step time, %.3g s "
                "(compute %.3g s, communication %.3g s)%s\n", p->stage, p->recompute, p->total / div, e.mem / div, u,
                p->step_s, p->compute_s, p->comm_s, R > 1 ? "; ZeRO-0 is never chosen with R > 1 (ZeRO-1 sends less in less memory)" : "");
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
            for (int k = 0; k < COLL_KINDS; k++) fprintf(fp, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)p->coll_count[k], (long long)p->coll_bytes[k]);
            fprintf(fp, "}\n");
        }
        fclose(fp);
    }
}

// -z auto / -r auto: rank 0 plans with its own view of the memory and broadcasts the choice, so
// ranks that see different free memory never choose differently. One line says what and why.
static void choose_config(Flags* f, const GPTConfig* c, int R, const Launch* L, Comm* comm) {
    int choice[2] = {f->zero_stage, f->recompute};
    char why[1024] = "";
    if (g_rank == 0) {
        int GA = f->total_batch == -1 ? 1 : (int)(f->total_batch / ((int64_t)f->B * f->T * R));
        PlanEnv e;
        plan_env(f, L, &e);
        PlanRow rows[20];
        int n = plan_rows(c, f->B, f->T, R, GA, L->local_world, &e, rows);
        int best = plan_choose(rows, n, R, f->zero_stage, f->recompute);
        if (best < 0) {
            plan_explain_misfit(c, f->B, f->T, R, GA, &e, why, sizeof(why));
            choice[0] = -2;
        } else {
            choice[0] = rows[best].stage;
            choice[1] = rows[best].recompute;
            double div;
            const char* u = plan_unit(e.mem, &div);
            snprintf(why, sizeof(why), "uses %.2f of %.2f %s per rank (%s), estimated %.3g s/step", rows[best].total / div, e.mem / div, u,
                     e.mem_src, rows[best].step_s);
        }
    }
    comm_broadcast(comm, choice, sizeof(choice), 0);
    if (choice[0] == -2) die_user("-z auto: %s", g_rank == 0 ? why : "rank 0 found no configuration that fits (see its message)");
    printf0("auto: -z %d -r %d chosen: %s\n", choice[0], choice[1], why);
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
#ifdef ZT_DEBUG
    AUTO(poison, "1", "1");
#else
    AUTO(poison, "0", "0");
#endif
#undef AUTO
    if (!strcmp(f->device_str, "auto")) snprintf(f->device_str, sizeof(f->device_str), "%s", cpu ? "cpu" : "cuda");
    int warmup_auto = !strcmp(f->warmup_str, "auto");
    if (warmup_auto) snprintf(f->warmup_str, sizeof(f->warmup_str), "0");
    flags_convert(f);
    f->warmup = warmup_auto ? -1 : f->warmup; // resolved once the number of steps is known
}

// Which device: -device, or a GPU when one is present.
static Device pick_device(const char* want) {
    if (strcmp(want, "auto") && strcmp(want, "cpu") && strcmp(want, "cuda"))
        die_user("flag -device: '%s' is not cpu, cuda or auto", want);
    int gpus = 0;
#ifdef __CUDACC__
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
#endif
    if (!strcmp(want, "cuda")) {
#ifndef __CUDACC__
        die_user("-device cuda: this build has no CUDA (built with g++). HINT: install the CUDA toolkit and rebuild with make train, or use -device cpu");
#endif
        if (gpus == 0) die_user("-device cuda: no GPU found (cudaGetDeviceCount). HINT: use -device cpu");
        return DEV_CUDA;
    }
    if (!strcmp(want, "cpu")) return DEV_CPU;
    return gpus > 0 ? DEV_CUDA : DEV_CPU;
}

// The model's shape: -e (descriptor or file) and the override flags; everything checked.
static void model_config(const Flags* f, GPTConfig* c, int* from_file) {
    memset(c, 0, sizeof(*c));
    *from_file = 0;
    if (model_from_descriptor(f->model, c) != 0) {
        struct stat st;
        if (stat(f->model, &st) != 0)
            die_user("-e %s: neither a model descriptor (tiny, d6, d12, d24, d36, d48, d60, d72, d84) nor a readable file: %s", f->model, strerror(errno));
        ModelFile mf;
        model_file_open(&mf, f->model, c);
        close(mf.fd);
        *from_file = 1;
        if (f->layers || f->channels || f->heads || f->max_seq || f->vocab)
            die_user("-e %s is a model file: its shape is fixed, so -layers/-channels/-heads/-max-seq/-vocab cannot change it", f->model);
    }
    if (f->layers) c->L = f->layers;
    if (f->channels) c->C = f->channels;
    if (f->heads) c->NH = f->heads;
    if (f->max_seq) c->maxT = f->max_seq;
    if (f->vocab) c->V = f->vocab;
    if (!*from_file) c->Vp = (int)round_up(c->V, 128);
    if (c->L < 1 || c->C < 1 || c->NH < 1 || c->maxT < 1 || c->V < 2)
        die_user("model: L %d, C %d, NH %d, max-seq %d, V %d: every size must be positive (V at least 2)", c->L, c->C, c->NH, c->maxT, c->V);
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
    if (f->world > 0 && !f->plan) die_user("flag -world plans for another world size: it needs -plan");
    if (f->link_gbps < 0 || f->tflops < 0) die_user("flags -link-gbps / -tflops must be positive");
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
    if (f->gen_tokens < 1) die_user("flag -g: %d tokens to generate must be at least 1", f->gen_tokens);
    if (f->resume != 0 && f->resume != 1) die_user("flag -y: %d is not 0 or 1", f->resume);
    if ((f->ckpt_every > 0 || f->resume) && !f->out_dir[0]) die_user("flags -n / -y need an output directory: -o DIR");
    if (f->resume_step < 0 || (f->resume_step > 0 && !f->resume)) die_user("flag -resume-step %d needs -y 1 and a step >= 1", f->resume_step);
    if (f->threads < 0) die_user("flag -threads: %d is negative", f->threads);
    if (f->blas != 0 && f->blas != 1) die_user("flag -blas: %d is not 0 or 1", f->blas);
#ifndef USE_BLAS
    if (f->blas) die_user("flag -blas 1: this build has no OpenBLAS. HINT: apt-get install libopenblas-dev and rebuild (make clean train)");
#endif
    if (f->comm_timeout < 0 || f->comm_delay < 0) die_user("flags -comm-timeout / -comm-delay must not be negative");
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

// This process's peak resident memory (VmHWM) in bytes, 0 if unknown.
static int64_t peak_rss_bytes(void) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return (int64_t)kb * 1024;
}

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
        fflush(tr->log);
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
    struct { const char* formula; double bytes; } closed[TAG_COUNT] = {
        {f_params, X * (s->full_params + s->shard_params)},
        {st == 3 ? "X * (P_io + 2 P_layer)" : "-", X * s->param_bufs},
        {f_grads, 4.0 * (s->full_grads + s->shard_grads)},
        {st >= 2 ? "4 * (P_io + 2 P_layer)" : "-", 4.0 * s->grad_bufs},
        {f_opt, 4.0 * s->opt}, {f_opt, 4.0 * s->opt}, {f_opt, 4.0 * s->opt},
        {"acts(B, T, -r)", (double)acts},
        {"X * B * T * Vp", (double)logits},
        {R > 1 ? "4 * R * chunk" : "-", 4.0 * s->comm},
        {"ops_workspace_floats * 4", 4.0 * g_work_floats},
    };
    printf0("memory per rank (MiB) by tag, ZeRO-%d, R = %d; Psi' = %lld padded parameters, P_io = %lld, P_layer = %lld, X = %d:\n",
            st, R, (long long)z->lay.total, (long long)z->lay.P[0], (long long)(z->lay.nblocks > 1 ? z->lay.P[1] : 0), (int)X);
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
    printf0("model state per rank (params + grads + master + m + v), Psi = %lld parameters:\n", (long long)psi);
    printf0("  ours:  %-26s = %9.2f MiB\n", ourform[st], ours / MiB);
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
    printf0("model: L %d, C %d, NH %d, V %d (padded %d), max T %d: %lld parameters (%lld with vocabulary padding)\n",
            c->L, c->C, c->NH, c->V, c->Vp, c->maxT, (long long)tr->model.d.num_real, (long long)tr->model.d.num_params);
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
    TokenizeStats st;
    double t0 = wall_s();
    if (tokenize_file_to_shards_ex(&tok, f->tokenize, f->out_dir, f->val_every_doc, f->shard_tokens, TOKENIZE_CHUNK_BYTES, &st, err, sizeof(err)))
        die_user("-tokenize: %s", err);
    printf("tokenized %s (%lld bytes) in %.2f s: train %lld documents, %lld tokens in %d shard(s); val %lld documents, %lld tokens in %d shard(s); prefix %s\n",
           f->tokenize, (long long)st.bytes, wall_s() - t0, (long long)st.documents[0], (long long)st.tokens[0], st.shards[0],
           (long long)st.documents[1], (long long)st.tokens[1], st.shards[1], f->out_dir);
    tokenizer_free(&tok);
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
    g_device = pick_device(f->device_str);
    if (g_device == DEV_CUDA) comm_init_device(&tr->comm, &tr->launch); // GPU, streams, NCCL
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { // the baseline the planner's prediction is compared with
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        tr->mem_baseline = total_b - free_b;
        tr->peak_flops = gpu_peak_tflops(g_cuda_prop.name) * 1e12;
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
    // every rank must run the same flags and the same build
    char build[128];
    snprintf(build, sizeof(build), "zerotrain %s %s built %s %s", ZT_VERSION, PRECISION_NAME, __DATE__, __TIME__);
    uint64_t h = fnv1a(flags_hash(f), build, strlen(build));
    uint64_t* hs = (uint64_t*)malloc(sizeof(uint64_t) * tr->R);
    comm_allgather_u64(&tr->comm, h, hs);
    for (int r = 1; r < tr->R; r++)
        if (hs[r] != hs[0])
            die_user("rank %d was started with different flags or a different build than rank 0 (hash %016llx vs %016llx). "
                     "HINT: start every rank with the same command line and the same ./train", r,
                     (unsigned long long)hs[r], (unsigned long long)hs[0]);
    free(hs);
    setup_threads(f, &tr->launch);
    if (f->tokenize[0]) {
        if (tr->r == 0) run_tokenize(f);
        return 1;
    }
    if (f->plan) {
        if (f->out_dir[0]) mkdir_p(f->out_dir);
        run_plan(f, &c, R_plan, &tr->launch);
        return 1;
    }
    if (f->zero_stage < 0 || f->recompute < 0) choose_config(f, &c, tr->R, &tr->launch, &tr->comm);
    // data, tokenizer, output directory
    char err[1024];
    if (dataloader_init(&tr->train, f->train_data, f->B, f->T, c.V, f->shuffle, (uint64_t)f->seed, err, sizeof(err)))
        die_user("-i: %s", err);
    tr->has_val = f->val_data[0] != 0 && f->val_every > 0;
    if (tr->has_val && dataloader_init(&tr->val, f->val_data, f->B, f->T, c.V, 0, 0, err, sizeof(err)))
        die_user("-j: %s", err);
    tr->has_tok = f->sample_every > 0 && tokenizer_init(&tr->tok, f->tokenizer, err, sizeof(err)) == 0;
    if (f->sample_every > 0 && !tr->has_tok) printf0("warning: -tokenizer: %s; samples print token ids\n", err);
    if (f->out_dir[0]) mkdir_p(f->out_dir);
    // steps
    int64_t step_tokens = (int64_t)f->B * f->T * tr->R;
    tr->GA = f->total_batch == -1 ? 1 : (int)(f->total_batch / step_tokens);
    int64_t epoch_steps = dataloader_total_tokens(&tr->train) / (step_tokens * tr->GA);
    tr->max_steps = f->max_steps == -1 ? (int)(epoch_steps > 0 ? epoch_steps : 1) : f->max_steps;
    if (f->warmup == -1) f->warmup = tr->max_steps / 20;
    // the model: layout, ZeRO buffers, activations, workspace
    Model* m = &tr->model;
    m->cfg = c; m->B = f->B; m->T = f->T; m->recompute = f->recompute;
    model_describe(&m->d, &c);
    BlockLayout lay;
    model_layout(&m->d, &lay, tr->R, tr->r);
    tr->comm.trace = f->comm_trace;
    tr->comm.timeout_s = f->comm_timeout;
    tr->comm.delay_ms = f->comm_delay;
    zero_init(&m->z, &lay, f->zero_stage, &tr->comm, f->poison);
    acts_alloc(&m->a, &c, f->B, f->T, f->recompute);
    size_t work_floats = ops_workspace_floats(&c, f->B, f->T, m->z.opt_total);
    g_work = (float*)dev_alloc(TAG_WORK, work_floats * sizeof(float));
    g_work_floats = work_floats - STEP_SCALARS_FLOATS; // the ops' scratch; then the step's scalars
    tr->scalars = (StepScalars*)(g_work + g_work_floats);
    tr->scalars_host = (StepScalars*)host_pinned_alloc(sizeof(StepScalars));
    tr->readback_lag = g_device == DEV_CUDA && tr->R == 1; // see train_step
    PlanRow plan; // what was allocated is exactly what the planner computes, tag by tag
    plan_config(&c, f->B, f->T, tr->R, tr->GA, f->zero_stage, f->recompute, &plan);
    for (int t = 0; t < TAG_COUNT; t++)
        if (g_mem_bytes[t] != plan.bytes[t])
            die(1, "internal error: %s: %zu bytes allocated, the planner says %zu", mem_tag_name[t], g_mem_bytes[t], plan.bytes[t]);
    tr->flops_per_token = mfu_flops_per_token(&c, f->T);
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
    // parameters: a checkpoint, a model file, or initialisation
    if (!(f->resume && resume_checkpoint(tr))) {
        if (from_file) {
            ModelFile mf;
            GPTConfig fc;
            model_file_open(&mf, f->model, &fc);
            zero_fill_opt(&m->z, m->z.master, model_file_fill, &mf);
            close(mf.fd);
        } else {
            InitCtx ic = {&m->d, (uint64_t)f->seed};
            zero_fill_opt(&m->z, m->z.master, init_fill, &ic);
        }
        zero_params_from_master(&m->z);
    }
    if (tr->r == 0 && f->out_dir[0]) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/log.jsonl", f->out_dir);
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
        dev_to_host(buf, z->master + pcs[i].opt_index, sizeof(float) * pcs[i].len);
        hm = fnv1a(hm, buf, sizeof(float) * pcs[i].len);
        dev_to_host(buf, z->m + pcs[i].opt_index, sizeof(float) * pcs[i].len);
        h1 = fnv1a(h1, buf, sizeof(float) * pcs[i].len);
        dev_to_host(buf, z->v + pcs[i].opt_index, sizeof(float) * pcs[i].len);
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

// A number for log.jsonl: JSON has no NaN or infinity, so those are written as null.
static void json_num(FILE* f, const char* key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.9g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

// One step's line on stdout and in log.jsonl.
static void log_step(Trainer* tr, const StepResult* s) {
    int64_t step_tokens = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T;
    double tok_s = step_tokens / (s->ms / 1000.0);
    char mfu[64] = "";
    if (g_device == DEV_CUDA) { // model FLOPs per second per GPU over the GPU's BF16 dense peak
        if (tr->peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tr->flops_per_token * tok_s / tr->R / tr->peak_flops);
        else snprintf(mfu, sizeof(mfu), " | mfu n/a");
    }
    printf0("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s%s\n", s->step + 1, tr->max_steps,
            s->loss, s->lr, s->norm, s->ms, tok_s, mfu, s->skipped ? " | SKIPPED: non-finite gradient norm" : "");
    if (tr->log) {
        fprintf(tr->log, "{\"step\": %d", s->step + 1);
        json_num(tr->log, "loss", s->loss);
        json_num(tr->log, "lr", s->lr);
        json_num(tr->log, "norm", s->norm);
        fprintf(tr->log, ", \"ms\": %.3f, \"tok_s\": %.1f, \"skipped\": %d, \"comm_wait_ms\": %.3f", s->ms, tok_s, s->skipped,
                s->comm_wait_s * 1000.0);
        if (g_device == DEV_CUDA) json_num(tr->log, "mfu", tr->peak_flops > 0 ? tr->flops_per_token * tok_s / tr->R / tr->peak_flops : NAN);
        for (int k = 0; k < COLL_KINDS; k++)
            fprintf(tr->log, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)s->count[k], (long long)s->bytes[k]);
        fprintf(tr->log, "}\n");
        fflush(tr->log);
    }
}

// Read back and log the step still in flight (if any): the host waits for the device only here,
// before an evaluation, a sample or a checkpoint, and after the last step.
static void flush_step(Trainer* tr) {
    StepResult p = step_read_back(tr);
    if (p.valid) log_step(tr, &p);
}

static void train_loop(Trainer* tr) {
    const Flags* f = &tr->f;
    int start = tr->step;
    for (;;) {
        int step = tr->step, last = step >= tr->max_steps;
        int val = tr->has_val && (step % f->val_every == 0 || last);
        int sample = f->sample_every > 0 && (step % f->sample_every == 0 || last) && step > 0;
        int ckpt = f->ckpt_every > 0 && step > start && (step % f->ckpt_every == 0 || last);
        if (val || sample || ckpt || last) flush_step(tr);
        if (val) {
            float vl = evaluate(tr);
            printf0("step %5d | val loss %.6f\n", step, vl);
            if (tr->log) { fprintf(tr->log, "{\"step\": %d", step); json_num(tr->log, "val_loss", vl); fprintf(tr->log, "}\n"); fflush(tr->log); }
        }
        if (sample) sample_text(tr);
        if (ckpt) save_checkpoint(tr);
        if (last) break;
        tr->comm.step = step;
        comm_reset_stats(&tr->comm);
        StepResult s = train_step(tr); // on one GPU: the previous step's result
        if (s.valid) log_step(tr, &s);
    }
}

static void trainer_free(Trainer* tr) {
    Model* m = &tr->model;
    if (tr->scalars_host) host_pinned_free(tr->scalars_host);
    tr->scalars_host = NULL;
    if (tr->log) fclose(tr->log);
    dev_free(TAG_WORK, g_work, (g_work_floats + STEP_SCALARS_FLOATS) * sizeof(float)); // the ops' part and the step's scalars
    g_work = NULL;
    acts_free(&m->a, m->cfg.L);
    zero_free(&m->z);
    layout_free(&m->z.lay);
    dataloader_free(&tr->train);
    if (tr->has_val) dataloader_free(&tr->val);
    if (tr->has_tok) tokenizer_free(&tr->tok);
}

static int train_main(int argc, char** argv) {
    Trainer* tr = (Trainer*)calloc(1, sizeof(Trainer));
    if (trainer_setup(tr, argc, argv)) { // -plan: nothing allocated, nothing to free
        comm_free(&tr->comm);
        comm_finalize();
        free(tr);
        return 0;
    }
    print_setup(tr);
    log_memory(tr, "start");
    train_loop(tr);
    if (tr->f.export_path[0]) { // every rank takes part (ZeRO-3 gathers); rank 0 writes
        if (write_model_file(&tr->model, tr->f.export_path) != 0) die(1, "-export %s failed", tr->f.export_path);
        printf0("exported the model at step %d to %s\n", tr->step, tr->f.export_path);
    }
    if (tr->f.log_hash) log_hashes(tr);
    log_memory(tr, "end");
    trainer_free(tr);
    comm_free(&tr->comm);
    comm_finalize();
    free(tr);
    return 0;
}

#ifndef TESTING
int main(int argc, char** argv) { return train_main(argc, argv); }
#endif
