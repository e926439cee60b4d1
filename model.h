// model.h — the model's description: GPTConfig (both families' fields) and its derived sizes
// (model_dims), the two families' tensor tables side by side (GPT2_TENSORS, LLAMA_TENSORS), each
// tensor's logical offset (llm.c's file order for GPT-2; the table's order for Llama) and the block
// layout for R ranks ([QLoRA] a 4-bit base's matrices stored as their NF4 bytes: nf4_describe_parts).
// Nothing here allocates or computes; train_gpt.cu (section 1) and checkpoint.h both build on it.
//
// May call: zero.h (the block layout), ops/rope.cuh (the ROPE_* rules), ops/nf4.cuh (nf4_part).
#ifndef ZT_MODEL_H
#define ZT_MODEL_H
#include "zero.h" // defines: BlockLayout, layout_init, layout_add_tensor, layout_add_stored, layout_finish

// The model families: a tensor table each (below) and a layer's ops each (train_gpt.cu section 2).
enum { FAMILY_GPT2 = 0, FAMILY_LLAMA = 1 };
// (Llama's relatives are the same family: what differs is a config field that switches a tensor and
// its op on — Qwen2's q/k/v biases (qkv_bias), Qwen3's per-head q/k RMSNorm (qk_norm) — or names the
// same tensors otherwise — Phi-3's fused qkv_proj and gate_up_proj (fused_names) — never a branch.)
// The names a model's projections go by (Hugging Face modules, PEFT's target names): its family's,
// or Phi-3's (model_names). NAMES_GPT2 and NAMES_LLAMA are the families' own values.
enum { NAMES_GPT2 = FAMILY_GPT2, NAMES_LLAMA = FAMILY_LLAMA, NAMES_PHI3 = 2 };
// Positions: GPT-2 learns them (wpe); Llama rotates q and k (RoPE), with transformers' rope_type
// rules for the inverse frequencies: "default", "linear" (positions / factor) and "llama3" (the
// ROPE_* values, defined with the rules in ops/rope.cuh).
#include "ops/rope.cuh" // defines: ROPE_NONE, ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3
#include "rng.h"       // defines: fnv1a, FNV_INIT (model_family_hash)
#include "ops/nf4.cuh"  // defines: Nf4Part, nf4_part (a 4-bit base tensor's bytes)

// Every field of GPTConfig, written once: X(type, name, role). The role says what a checkpoint
// makes of the field, so a new field cannot be added without saying it:
//   CFG_SIZE     every family's sizes (llm.c's model file header; ints of their own in a state header)
//   CFG_FAMILY   the family's fields: hashed into the state header's model identity (model_family_hash),
//                so a checkpoint resumes only into the model that wrote it. Append new ones at the end
//                of the list: a new family field whose value is 0 leaves every existing hash unchanged.
//   CFG_ADAPTER  [LoRA] the adapters (lora.h sets them from -lora*; r 0: off, every tensor trains): r and
//                the targets are in the state header, alpha and dropout are the run's
//   CFG_PLACE    how this run places the model (not what it is)
// A GPTConfig whose family is FAMILY_GPT2 (0: a zeroed config, every llm.c descriptor and file)
// ignores the family fields: model_dims gives GPT-2's sizes from C and NH alone.
enum { CFG_SIZE, CFG_FAMILY, CFG_ADAPTER, CFG_PLACE };
#define GPTCONFIG_FIELDS(X) \
    X(int, L, CFG_SIZE)                   /* layers */ \
    X(int, C, CFG_SIZE)                   /* channels */ \
    X(int, NH, CFG_SIZE)                  /* heads */ \
    X(int, V, CFG_SIZE)                   /* vocabulary */ \
    X(int, Vp, CFG_SIZE)                  /* vocabulary padded (the embedding's rows) */ \
    X(int, maxT, CFG_SIZE)                /* max sequence */ \
    X(int, family, CFG_FAMILY)            /* FAMILY_GPT2 or FAMILY_LLAMA */ \
    X(int, NKV, CFG_FAMILY)               /* key/value heads (grouped-query attention: NH % NKV == 0) */ \
    X(int, HD, CFG_FAMILY)                /* head size (head_dim; may differ from C / NH) */ \
    X(int, F, CFG_FAMILY)                 /* MLP hidden size (intermediate_size) */ \
    X(int, tied, CFG_FAMILY)              /* LM head tied to the embedding (tie_word_embeddings) */ \
    X(int, qkv_bias, CFG_FAMILY)          /* q/k/v biases (attention_bias; Qwen2: 1) */ \
    X(int, mlp_bias, CFG_FAMILY)          /* gate/up/down biases (mlp_bias) */ \
    X(float, norm_eps, CFG_FAMILY)        /* rms_norm_eps */ \
    X(int, rope_type, CFG_FAMILY)         /* ROPE_* */ \
    X(double, rope_theta, CFG_FAMILY)     /* base of the inverse frequencies */ \
    X(double, rope_factor, CFG_FAMILY)    /* rope_scaling's factor (linear, llama3) */ \
    X(double, rope_low_freq, CFG_FAMILY)  /* rope_scaling's low_freq_factor (llama3) */ \
    X(double, rope_high_freq, CFG_FAMILY) /* rope_scaling's high_freq_factor (llama3) */ \
    X(int, rope_orig_maxT, CFG_FAMILY)    /* rope_scaling's original_max_position_embeddings (llama3) */ \
    X(int, qk_norm, CFG_FAMILY)           /* RMSNorm of every q and k head before RoPE (Qwen3's q_norm, k_norm) */ \
    X(int, fused_names, CFG_FAMILY)       /* Phi-3's names: q/k/v one Linear (qkv_proj), gate/up one (gate_up_proj); the math is Llama's */ \
    X(int, lora_r, CFG_ADAPTER)           /* [LoRA] rank (0: off) */ \
    X(float, lora_alpha, CFG_ADAPTER)     /* [LoRA] scale alpha / r */ \
    X(unsigned, lora_mask, CFG_ADAPTER)   /* [LoRA] bit i = row i of the family's rows in LORA_TARGETS */ \
    X(float, lora_dropout, CFG_ADAPTER)   /* [LoRA] p of the dropout on the adapters' input (0: none) */ \
    X(int, lora_nf4, CFG_ADAPTER)         /* [QLoRA] 1: the frozen base's layer matrices stored as NF4 (-lora-quant nf4) */ \
    X(int, lora_rep, CFG_PLACE)           /* [LoRA] 1: under ZeRO-3 every rank holds the whole frozen base (-lora-base replicated) */

#define GPTCONFIG_MEMBER(type, name, role) type name;
typedef struct {
    GPTCONFIG_FIELDS(GPTCONFIG_MEMBER)
} GPTConfig;
#undef GPTCONFIG_MEMBER

// The model's identity as a checkpoint keeps it: FNV-1a of an image of the CFG_FAMILY fields, each at
// its natural alignment in list order after 24 zero bytes (where the six sizes sat), zeros to 120
// bytes and no trailing zeros beyond. (The image is the byte layout GPTConfig had when the hash
// hashed the struct itself: checkpoints written then keep their hash.)
#define MODEL_HASH_MIN_BYTES 120
static uint64_t model_family_hash(const GPTConfig* c) {
    unsigned char img[512];
    memset(img, 0, sizeof(img));
    size_t off = 6 * sizeof(int);
#define GPTCONFIG_IMAGE(type, name, role) \
    if (role == CFG_FAMILY) { off = (off + sizeof(type) - 1) / sizeof(type) * sizeof(type); memcpy(img + off, &c->name, sizeof(type)); off += sizeof(type); }
    GPTCONFIG_FIELDS(GPTCONFIG_IMAGE)
#undef GPTCONFIG_IMAGE
    static_assert(sizeof(GPTConfig) <= sizeof(img) / 2, "model_family_hash: the image no longer has room for every field");
    size_t n = off;
    while (n > MODEL_HASH_MIN_BYTES && !img[n - 1]) n--;
    if (n < MODEL_HASH_MIN_BYTES) n = MODEL_HASH_MIN_BYTES;
    return fnv1a(FNV_INIT, img, n);
}

// A GPT-2 config from llm.c's six sizes (the other fields zero: FAMILY_GPT2).
static inline GPTConfig gpt2_config(int L, int C, int NH, int V, int Vp, int maxT) {
    GPTConfig c;
    memset(&c, 0, sizeof(c));
    c.L = L; c.C = C; c.NH = NH; c.V = V; c.Vp = Vp; c.maxT = maxT;
    return c;
}

// The sizes derived from a config, the same for every family's code: q/k/v's fused width QKV, the
// attention output's width ATT, the MLP's fused up-projection width FC (Llama: gate ; up) and its
// hidden width F (the down projection's input), the key/value heads NKV and the head size HD.
typedef struct {
    int64_t QKV, ATT, FC, F;
    int NKV, HD;
    int64_t KVW; // k's (and v's) width: NKV * HD
} ModelDims;

static inline ModelDims model_dims(const GPTConfig* c) {
    ModelDims m;
    if (c->family == FAMILY_LLAMA) {
        m.NKV = c->NKV; m.HD = c->HD;
        m.QKV = ((int64_t)c->NH + 2 * (int64_t)c->NKV) * c->HD;
        m.ATT = (int64_t)c->NH * c->HD;
        m.F = c->F;
        m.FC = 2 * (int64_t)c->F;
    } else { // GPT-2: 3C, C, 4C, 4C; NKV = NH, HD = C / NH
        m.NKV = c->NH; m.HD = c->NH > 0 ? c->C / c->NH : 0;
        m.QKV = 3 * (int64_t)c->C;
        m.ATT = c->C;
        m.F = 4 * (int64_t)c->C;
        m.FC = m.F;
    }
    m.KVW = (int64_t)m.NKV * m.HD;
    return m;
}

// [LoRA] A layer's four projections, the same slots in both families (the projection op, lora.h,
// adds the adapters of its slot).
typedef enum {
    PROJ_QKV,  // GPT-2 c_attn; Llama q;k;v (wqkv)
    PROJ_ATTO, // GPT-2 attn.c_proj; Llama o_proj (wo)
    PROJ_UP,   // GPT-2 c_fc; Llama gate;up (wgu)
    PROJ_DOWN, // GPT-2 mlp.c_proj; Llama down_proj (wdown)
    NUM_PROJ
} Proj;

// [LoRA] The adapter targets: X(names (model_names), target name (PEFT's target_modules), Hugging Face
// module (%d: the layer), projection, first output row, output rows, input width). An adapter writes
// only its rows of a fused projection's output (q_proj: q's rows of wqkv's). PEFT matches a target
// name against the end of a module's name, so GPT-2's "c_proj" adapts both attn.c_proj and
// mlp.c_proj. Phi-3's checkpoints fuse q/k/v and gate/up into one Linear each: their adapters cover
// the whole fused projection, as PEFT's on qkv_proj and gate_up_proj do.
#define LORA_TARGETS(X)                                                                                             \
    X(FAMILY_GPT2,  "c_attn",    "transformer.h.%d.attn.c_attn",     PROJ_QKV,  0,        d.QKV,    c->C)  \
    X(FAMILY_GPT2,  "c_proj",    "transformer.h.%d.attn.c_proj",     PROJ_ATTO, 0,        c->C,     d.ATT) \
    X(FAMILY_GPT2,  "c_fc",      "transformer.h.%d.mlp.c_fc",        PROJ_UP,   0,        d.FC,     c->C)  \
    X(FAMILY_GPT2,  "c_proj",    "transformer.h.%d.mlp.c_proj",      PROJ_DOWN, 0,        c->C,     d.F)   \
    X(FAMILY_LLAMA, "q_proj",    "model.layers.%d.self_attn.q_proj", PROJ_QKV,  0,        d.ATT,    c->C)  \
    X(FAMILY_LLAMA, "k_proj",    "model.layers.%d.self_attn.k_proj", PROJ_QKV,  d.ATT,    d.KVW,    c->C)  \
    X(FAMILY_LLAMA, "v_proj",    "model.layers.%d.self_attn.v_proj", PROJ_QKV,  d.ATT + d.KVW, d.KVW, c->C) \
    X(FAMILY_LLAMA, "o_proj",    "model.layers.%d.self_attn.o_proj", PROJ_ATTO, 0,        c->C,     d.ATT) \
    X(FAMILY_LLAMA, "gate_proj", "model.layers.%d.mlp.gate_proj",    PROJ_UP,   0,        d.F,      c->C)  \
    X(FAMILY_LLAMA, "up_proj",   "model.layers.%d.mlp.up_proj",      PROJ_UP,   d.F,      d.F,      c->C)  \
    X(FAMILY_LLAMA, "down_proj", "model.layers.%d.mlp.down_proj",    PROJ_DOWN, 0,        c->C,     d.F)    \
    X(NAMES_PHI3,   "qkv_proj",  "model.layers.%d.self_attn.qkv_proj", PROJ_QKV, 0,       d.QKV,    c->C)  \
    X(NAMES_PHI3,   "o_proj",    "model.layers.%d.self_attn.o_proj", PROJ_ATTO, 0,        c->C,     d.ATT) \
    X(NAMES_PHI3,   "gate_up_proj", "model.layers.%d.mlp.gate_up_proj", PROJ_UP, 0,       d.FC,     c->C)  \
    X(NAMES_PHI3,   "down_proj", "model.layers.%d.mlp.down_proj",    PROJ_DOWN, 0,        c->C,     d.F)

// The names of c's projections (LORA_TARGETS' first column).
static inline int model_names(const GPTConfig* c) { return c->family == FAMILY_LLAMA && c->fused_names ? NAMES_PHI3 : c->family; }

// The tensor of each projection in a family's table (defined at the end).
static int proj_tensor(int family, int proj);

#define LORA_MAX_MODULES 8 // per layer (Llama: 7); two tensors each fit one block (MAX_BLOCK_TENSORS)

// [LoRA] One adapted module: A [r, in] and B [rows, r] per layer, each module's tensors holding every
// layer's (layer-major) in the adapter block, after the base's logical vector.
typedef struct {
    const char* target; // PEFT's target name ("q_proj")
    const char* hf;     // the Hugging Face module, %d the layer ("model.layers.%d.self_attn.q_proj")
    int proj;           // Proj
    int64_t row0, rows, in; // rows [row0, row0 + rows) of the projection's output
    int64_t offA, offB; // in the adapter block: layer l's A at offA + l * r * in, its B at offB + l * rows * r
    int64_t logA, logB; // logical offsets of the same
} LoraModule;

typedef struct {
    int r, nmods;       // rank (0: off), modules per layer
    float alpha, scale; // alpha, alpha / r
    float dropout;      // p of the dropout on each adapter's input (training only; 0: none)
    LoraModule mods[LORA_MAX_MODULES];
    int64_t num_params; // adapter elements, all layers
} LoraDesc;

// The modules a config's lora_mask selects, with their shapes (offsets: model_layout).
static void lora_describe(LoraDesc* lo, const GPTConfig* c) {
    memset(lo, 0, sizeof(*lo));
    if (!c->lora_r) return;
    ModelDims d = model_dims(c);
    lo->r = c->lora_r; lo->alpha = c->lora_alpha; lo->scale = c->lora_alpha / (float)c->lora_r;
    lo->dropout = c->lora_dropout;
    int row = 0;
#define X(fam, tname, thf, tproj, trow0, trows, tin)                                     \
    if ((fam) == model_names(c) && ((c->lora_mask >> row++) & 1)) {                      \
        LoraModule* m = &lo->mods[lo->nmods++];                                          \
        m->target = tname; m->hf = thf; m->proj = tproj;                                 \
        m->row0 = (trow0); m->rows = (trows); m->in = (tin);                             \
        lo->num_params += (int64_t)c->L * c->lora_r * (m->in + m->rows);                 \
    }
    LORA_TARGETS(X)
#undef X
}

typedef enum { INIT_NORMAL, INIT_RESID, INIT_ONE, INIT_ZERO } InitKind;

// X(name, io (1: io block, 0: one per layer), rows, cols, decay, init)
// INIT_NORMAL: N(0, 0.02); INIT_RESID: N(0, 0.02/sqrt(2L)) for the projections into the residual
// stream (GPT-2's scaled init); INIT_ONE / INIT_ZERO: layernorm gains / biases.
// 3C and 4C are computed in 64 bits: a model file's header is data, and 3 * C overflows int.
#define GPT2_TENSORS(X)                                                  \
    X(wte,      1, c->Vp,             c->C,              1, INIT_NORMAL) \
    X(wpe,      1, c->maxT,           c->C,              1, INIT_NORMAL) \
    X(ln1w,     0, 1,                 c->C,              0, INIT_ONE)    \
    X(ln1b,     0, 1,                 c->C,              0, INIT_ZERO)   \
    X(qkvw,     0, 3 * (int64_t)c->C, c->C,              1, INIT_NORMAL) \
    X(qkvb,     0, 1,                 3 * (int64_t)c->C, 0, INIT_ZERO)   \
    X(attprojw, 0, c->C,              c->C,              1, INIT_RESID)  \
    X(attprojb, 0, 1,                 c->C,              0, INIT_ZERO)   \
    X(ln2w,     0, 1,                 c->C,              0, INIT_ONE)    \
    X(ln2b,     0, 1,                 c->C,              0, INIT_ZERO)   \
    X(fcw,      0, 4 * (int64_t)c->C, c->C,              1, INIT_NORMAL) \
    X(fcb,      0, 1,                 4 * (int64_t)c->C, 0, INIT_ZERO)   \
    X(fcprojw,  0, c->C,              4 * (int64_t)c->C, 1, INIT_RESID)  \
    X(fcprojb,  0, 1,                 c->C,              0, INIT_ZERO)   \
    X(lnfw,     1, 1,                 c->C,              0, INIT_ONE)    \
    X(lnfb,     1, 1,                 c->C,              0, INIT_ZERO)

// The Llama family (Llama 3, Qwen2, Qwen3, Mistral, SmolLM2), in its logical order. q/k/v are one fused
// tensor (rows: q_proj's NH*HD ; k_proj's NKV*HD ; v_proj's NKV*HD), gate/up one (gate_proj's F rows
// ; up_proj's F rows): one matmul each, and a Hugging Face tensor is a contiguous logical range.
// A tensor with 0 rows is absent (not in the layout): the biases unless the config has them, the
// LM head when it is tied to the embedding, Qwen3's q/k norms (HD gains each, shared by every q head,
// every k head) without qk_norm. No positional embedding: RoPE (ops/rope.cuh).
#define LLAMA_TENSORS(X)                                                                        \
    X(embed,    1, c->Vp,                      c->C,                     1, INIT_NORMAL) /* embed_tokens */    \
    X(attnnorm, 0, 1,                          c->C,                     0, INIT_ONE)    /* input_layernorm */ \
    X(wqkv,     0, model_dims(c).QKV,          c->C,                     1, INIT_NORMAL) /* q_proj;k_proj;v_proj */ \
    X(bqkv,     0, c->qkv_bias ? 1 : 0,        model_dims(c).QKV,        0, INIT_ZERO)                         \
    X(qnorm,    0, c->qk_norm ? 1 : 0,         model_dims(c).HD,         0, INIT_ONE)    /* self_attn.q_norm (Qwen3) */ \
    X(knorm,    0, c->qk_norm ? 1 : 0,         model_dims(c).HD,         0, INIT_ONE)    /* self_attn.k_norm (Qwen3) */ \
    X(wo,       0, c->C,                       model_dims(c).ATT,        1, INIT_RESID)  /* o_proj */          \
    X(mlpnorm,  0, 1,                          c->C,                     0, INIT_ONE)    /* post_attention_layernorm */ \
    X(wgu,      0, 2 * (int64_t)c->F,          c->C,                     1, INIT_NORMAL) /* gate_proj;up_proj */ \
    X(bgu,      0, c->mlp_bias ? 1 : 0,        2 * (int64_t)c->F,        0, INIT_ZERO)                         \
    X(wdown,    0, c->C,                       c->F,                     1, INIT_RESID)  /* down_proj */       \
    X(bdown,    0, c->mlp_bias ? 1 : 0,        c->C,                     0, INIT_ZERO)                         \
    X(normf,    1, 1,                          c->C,                     0, INIT_ONE)    /* model.norm */      \
    X(lmhead,   1, c->tied ? 0 : c->Vp,        c->C,                     1, INIT_NORMAL) /* lm_head */

// One enum over both families' tensors: a model has the tensors of its family (the other family's
// have 0 elements, like an absent bias). T_wte..T_lnfb keep their llm.c numbers.
enum {
#define X(name, io, rows, cols, decay, init) T_##name,
    GPT2_TENSORS(X)
    LLAMA_TENSORS(X)
#undef X
    NUM_TENSORS
};

// [QLoRA] A 4-bit base tensor is stored as parts, one per Hugging Face tensor it fuses (q_proj ;
// k_proj ; v_proj in wqkv: bitsandbytes quantizes each nn.Linear on its own, with its own absmax
// mean), each part nf4_part's bytes (ops/nf4.cuh), one after the other.
#define NF4_MAX_PARTS 3

typedef struct {
    const char* name;
    int io;          // lives in the io block (1) or in every layer block (0)
    int64_t n;       // elements (per layer for layer tensors); 0: absent (another family's, a bias the config has not)
    int64_t logical; // offset of its first element in the logical vector (llm.c's file order)
    int decay;
    InitKind init;
    int64_t off;     // offset inside its block (filled from the layout)
    // [QLoRA] with lora_nf4, a layer's projection matrices: stored as NF4 parts (stored: floatX elements
    // of their bytes; 0: stored as floatX, n elements)
    int nparts;
    int64_t part_n[NF4_MAX_PARTS]; // weights of each part, in row order
    int64_t stored;
} TensorInfo;

typedef struct {
    GPTConfig cfg;
    TensorInfo t[NUM_TENSORS];
    int64_t num_params;   // logical elements (llm.c's count, padded vocabulary rows included)
    int64_t num_real;     // the same without the padded vocabulary rows
    LoraDesc lora;        // [LoRA] the adapters (lora.r 0: none); their logical range follows num_params
} ModelDesc;

// The family's fields in words, for the start-up and -plan lines ("" for GPT-2).
static void model_family_text(const GPTConfig* c, char* buf, size_t cap) {
    buf[0] = 0;
    if (c->family != FAMILY_LLAMA) return;
    static const char* const rope[] = {"none", "default", "linear", "llama3"};
    int n = snprintf(buf, cap, "llama family: NKV %d (%d query heads per K/V head), head_dim %d, MLP %d (SwiGLU), %s head%s%s%s%s, "
                     "RMSNorm eps %g, RoPE %s theta %g", c->NKV, c->NKV > 0 ? c->NH / c->NKV : 0, c->HD, c->F, c->tied ? "tied" : "untied",
                     c->qkv_bias ? ", q/k/v biases" : "", c->mlp_bias ? ", MLP biases" : "", c->qk_norm ? ", q/k RMSNorm per head" : "",
                     c->fused_names ? ", Phi-3's names (qkv_proj, gate_up_proj)" : "", (double)c->norm_eps,
                     rope[c->rope_type >= 0 && c->rope_type <= 3 ? c->rope_type : 0], c->rope_theta);
    if (n > 0 && (size_t)n < cap && c->rope_type == ROPE_LINEAR) snprintf(buf + n, cap - n, " factor %g", c->rope_factor);
    if (n > 0 && (size_t)n < cap && c->rope_type == ROPE_LLAMA3)
        snprintf(buf + n, cap - n, " factor %g low %g high %g original %d", c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_maxT);
}

// The tensors holding padded vocabulary rows (V..Vp: zero, never in the softmax).
static inline int tensor_has_vocab_rows(int k) { return k == T_wte || k == T_embed || k == T_lmhead; }

// [QLoRA] The 4-bit base's parts: each layer projection's Hugging Face modules in row order (the
// family's LORA_TARGETS rows), and the floatX elements their bytes take.
static void nf4_describe_parts(ModelDesc* md, const GPTConfig* c) {
    ModelDims d = model_dims(c);
#define X(fam, tname, thf, tproj, trow0, trows, tin)                                                        \
    if ((fam) == model_names(c)) {                                                                          \
        TensorInfo* t = &md->t[proj_tensor(c->family, tproj)];                                             \
        int64_t done = 0;                                                                                   \
        for (int i = 0; i < t->nparts; i++) done += t->part_n[i];                                           \
        if (done == (int64_t)(trow0) * (tin) && t->nparts < NF4_MAX_PARTS) t->part_n[t->nparts++] = (int64_t)(trows) * (tin); \
    }
    LORA_TARGETS(X)
#undef X
    for (int p = 0; p < NUM_PROJ; p++) {
        TensorInfo* t = &md->t[proj_tensor(c->family, p)];
        int64_t done = 0, bytes = 0;
        for (int i = 0; i < t->nparts; i++) { done += t->part_n[i]; bytes += nf4_part(t->part_n[i]).bytes; }
        if (done != t->n) die(1, "the 4-bit parts of %s cover %lld of its %lld weights (internal error)", t->name, (long long)done, (long long)t->n);
        t->stored = bytes / (int64_t)sizeof(floatX);
    }
}

static void model_describe(ModelDesc* d, const GPTConfig* c) {
    memset(d, 0, sizeof(*d));
    d->cfg = *c;
    int64_t logical = 0, padded = 0;
    int fam;
#define X(tname, tio, rows, cols, tdecay, tinit)                                    \
    {                                                                               \
        TensorInfo* t = &d->t[T_##tname];                                           \
        t->name = #tname; t->io = tio;                                              \
        t->n = c->family == fam ? (int64_t)(rows) * (int64_t)(cols) : 0;            \
        t->logical = logical; t->decay = tdecay; t->init = tinit;                   \
        logical += t->n * (tio ? 1 : c->L);                                         \
        if (t->n && tensor_has_vocab_rows(T_##tname)) padded += (int64_t)(c->Vp - c->V) * c->C; \
    }
    fam = FAMILY_GPT2;
    GPT2_TENSORS(X)
    fam = FAMILY_LLAMA;
    LLAMA_TENSORS(X)
#undef X
    d->num_params = logical;
    d->num_real = logical - padded;
    lora_describe(&d->lora, c);
    if (c->lora_r && c->lora_nf4) nf4_describe_parts(d, c); // [QLoRA]
}

// Block layout for R ranks: block 0 = io tensors, block 1 + l = layer l's tensors, in table order.
// [LoRA] Then the base's blocks are frozen and block 1 + L holds the adapters (A then B of each
// module, every layer's in one tensor; table indices NUM_TENSORS + 2 i, + 2 i + 1), trainable.
// sh: which shards this rank holds (hybrid sharding: zero.h's Shards); model_layout: flat ZeRO.
static void model_layout_shards(ModelDesc* d, BlockLayout* lay, const Shards* sh) {
    const GPTConfig* c = &d->cfg;
    LoraDesc* lo = &d->lora;
    layout_init_shards(lay, 1 + c->L + (lo->r > 0), sh);
    for (int b = 0; b <= c->L; b++)
        for (int k = 0; k < NUM_TENSORS; k++) {
            TensorInfo* t = &d->t[k];
            if (t->io != (b == 0) || t->n == 0) continue; // (absent tensors are not in the layout)
            int layer = b - 1;
            layout_add_stored(lay, b, k, t->io ? -1 : layer, t->n, t->logical + (t->io ? 0 : layer * t->n), t->decay, t->stored);
        }
    if (lo->r) {
        int b = 1 + c->L;
        int64_t logical = d->num_params;
        for (int i = 0; i < lo->nmods; i++) {
            LoraModule* m = &lo->mods[i];
            int64_t nA = (int64_t)c->L * lo->r * m->in, nB = (int64_t)c->L * m->rows * lo->r;
            layout_add_tensor(lay, b, NUM_TENSORS + 2 * i, -1, nA, logical, 1); // (matrices decay, as the base's would)
            m->offA = lay->tensors[b][lay->ntensors[b] - 1].off; m->logA = logical; logical += nA;
            layout_add_tensor(lay, b, NUM_TENSORS + 2 * i + 1, -1, nB, logical, 1);
            m->offB = lay->tensors[b][lay->ntensors[b] - 1].off; m->logB = logical; logical += nB;
        }
        for (int k = 0; k < b; k++) lay->frozen[k] = 1;
        lay->adapter = b;
        lay->rep_frozen = c->lora_rep;
    }
    layout_finish(lay);
    for (int b = 0; b < 2 && b <= c->L; b++) // offsets inside a block are the same for every layer
        for (int k = 0; k < lay->ntensors[b]; k++) d->t[lay->tensors[b][k].tensor].off = lay->tensors[b][k].off;
}

static inline void model_layout(ModelDesc* d, BlockLayout* lay, int R, int r) {
    Shards sh = shards_of(groups_flat(R), r);
    model_layout_shards(d, lay, &sh);
}

static int proj_tensor(int family, int proj) {
    static const int gpt2[NUM_PROJ] = {T_qkvw, T_attprojw, T_fcw, T_fcprojw};
    static const int llama[NUM_PROJ] = {T_wqkv, T_wo, T_wgu, T_wdown};
    return family == FAMILY_LLAMA ? llama[proj] : gpt2[proj];
}

#endif // ZT_MODEL_H
