// hf.h — Hugging Face checkpoints in and out: GPT-2 (GPT2LMHeadModel) and the Llama family
// (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM).
//
// In:  a directory with config.json and model.safetensors (or model.safetensors.index.json and
//      its shards), or a model.safetensors file with config.json beside it. The config is read and
//      every architecture option we do not implement is refused by name, with its value; every
//      tensor is found, its shape checked against the config and its dtype (F32, F16, BF16)
//      widened to FP32 as it is read. The result is a LogicalFill source (zero.h): it fills the
//      same logical ranges as an llm.c model file does, so ZeRO sharding, resume and export need
//      nothing new. A rank reads only the ranges it keeps (each file is mapped, and the pages of a
//      range are dropped again once it is read): no rank holds the whole model in host memory.
// Out: config.json (as transformers writes it for the architecture) + model.safetensors with
//      {"format": "pt"} metadata, or above HF_SHARD_BYTES (5 GB, transformers' max_shard_size)
//      model-0000k-of-0000n.safetensors shards and model.safetensors.index.json; a tied head is
//      omitted (transformers ties it back); F32, BF16 or F16; and generation_config.json (the source
//      checkpoint's, else as transformers writes one from config.json's token ids).
//
// The mapping: one table per family (HF_GPT2_TENSORS, HF_LLAMA_TENSORS), a row per Hugging Face
// tensor, naming the tensor of ours it fills (model.h's names) and where in it. Several Hugging
// Face tensors fill consecutive rows of one of ours: q_proj, k_proj, v_proj make the fused wqkv
// (their biases bqkv), gate_proj and up_proj the fused wgu (nn.Linear stores (out, in), as we do).
// GPT-2's Conv1D weights are stored (in, out), the transpose of ours, for c_attn, c_proj and c_fc.
// Rows V..Vp of the embedding and of an untied head are padding: zero in, not written out.
// Buffers that are not parameters are skipped: GPT-2's attn.bias / attn.masked_bias, older Llama
// conversions' rotary_emb.inv_freq. lm_head.weight with a tied head must equal the embedding.
//
// Not supported, refused by name with the value found:
//   GPT-2: n_inner other than 4*n_embd, untied embeddings, cross-attention, scale_attn_weights
//   false, scale_attn_by_inverse_layer_idx, activations other than gelu_new / gelu_pytorch_tanh,
//   layer_norm_epsilon other than 1e-5.
//   Llama family: hidden_act other than silu, rope_scaling types other than default / linear /
//   llama3 (dynamic, yarn, longrope, ...), partial_rotary_factor other than 1, a nonzero o_proj
//   bias (Llama's attention_bias adds one to the q/k/v biases: we have none, so it must be zero;
//   the export writes zeros), mixture-of-experts fields,
//   another model_type's qk-norm fields (Qwen3's q_norm/k_norm are read), multimodal RoPE (use_mrope), interleaved RoPE pairs, num_attention_heads not a
//   multiple of num_key_value_heads, an odd head_dim; a sliding window shorter than the run's T
//   (hf_check_run: Mistral's window of 4096 is full attention for T <= 4096; Qwen2's applies only
//   with use_sliding_window).
//   Every family: other model_types, pytorch_model.bin (pickle) files.
// Dropout fields (attention_dropout, resid_pdrop, ...) are read by transformers only in training
// mode; we train without dropout, for either family.
//
// This header knows nothing of the trainer's types: the caller describes its logical layout
// (HFLlmcTensor: name, logical offset, elements per layer) and hands tensors of FP32 values to
// the writer.
//
// defines: HFConfig, hf_read_config, hf_check_run, hf_arch_name, HFCheckpoint, hf_is_checkpoint_path, hf_checkpoint_dir,
//          hf_open, hf_bind, hf_fill, hf_close, hf_largest_tensor, HFWriter, hf_writer_open, hf_writer_put,
//          hf_writer_commit, hf_writer_abort, HF_SHARD_BYTES, hf_row_part, hf_nf4_part
//
// [QLoRA] In, also: a checkpoint bitsandbytes quantized as transformers saves it (the *-bnb-4bit
//      repositories): config.json's quantization_config (quant_method bitsandbytes, load_in_4bit,
//      bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant; bnb_4bit_quant_storage uint8, bfloat16,
//      float16 or float32: the codes' bytes viewed as that dtype; llm_int8_skip_modules naming no
//      layer projection), each layer projection's weight its packed 4-bit codes ((ceil(n/2)/size, 1))
//      and beside it .absmax (U8), .quant_map (F32 16), .nested_absmax (F32), .nested_quant_map (F32 256)
//      and .quant_state.bitsandbytes__nf4 (the JSON of blocksize, shape, dtype, nested_blocksize,
//      nested_offset): hf_nf4_part copies them into ops/nf4.cuh's storage of the part, checked
//      against the config and NF4's code book; the nested code book, one for the checkpoint, is ck->dyn. Refused by name: another quant_method (GPTQ, AWQ,
//      ...), 8-bit, fp4, no double quantization, another blocksize, a projection left in 16 bits.
//
// May call: safetensors.h, ops/nf4.cuh (the 4-bit part's layout and code books) and the C library.
#ifndef ZT_HF_H
#define ZT_HF_H

#include <limits.h>
#include <math.h>
#include <dirent.h>
#include "safetensors.h" // defines: Json, json_parse, StFile, st_open, st_find, st_get, st_make_header
#include "ops/nf4.cuh"   // defines: Nf4Part, nf4_part, NF4_CODE, NF4_DYN ([QLoRA] a bitsandbytes 4-bit checkpoint)

enum { HF_ARCH_GPT2, HF_ARCH_LLAMA, HF_ARCH_MISTRAL, HF_ARCH_QWEN2, HF_ARCH_QWEN3, HF_ARCH_PHI3, HF_NARCH };
static const struct { const char* model_type; const char* cls; } hf_archs[HF_NARCH] = {
    {"gpt2", "GPT2LMHeadModel"}, {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"}, {"phi3", "Phi3ForCausalLM"}};
static const char* hf_arch_name(int arch) { return arch >= 0 && arch < HF_NARCH ? hf_archs[arch].model_type : "?"; }

enum { HF_ROPE_NONE, HF_ROPE_DEFAULT, HF_ROPE_LINEAR, HF_ROPE_LLAMA3 }; // (GPT-2: none, learned positions)

// The model config.json describes. The first five fields are GPT-2's (and every family's); the
// rest default to GPT-2's values when zero-initialised (arch gpt2).
typedef struct {
    int L, C, NH, V, maxT;     // num_hidden_layers (n_layer), hidden_size (n_embd), num_attention_heads
                               // (n_head), vocab_size, max_position_embeddings (n_positions)
    int arch;                  // HF_ARCH_*: model_type
    int NKV, HD, F;            // num_key_value_heads, head_dim, intermediate_size (GPT-2: NH, C/NH, 4C)
    int tied;                  // tie_word_embeddings (GPT-2: always)
    int qkv_bias, mlp_bias;    // q/k/v biases (Qwen2: always), gate/up/down biases (Llama's mlp_bias)
    double norm_eps;           // rms_norm_eps (GPT-2: layer_norm_epsilon, 1e-5)
    double rope_theta;         // rope_theta
    int rope_type;             // HF_ROPE_*
    double rope_factor, rope_low_freq, rope_high_freq; // rope_scaling's factor, low_freq_factor, high_freq_factor
    int rope_orig_maxT;        // rope_scaling's original_max_position_embeddings (llama3)
    int window;                // sliding window in tokens (0: none): a run's T must not exceed it
    int max_window_layers;     // Qwen2's, written back as read (28 when absent)
    char bos[96], eos[96], pad[96]; // bos/eos/pad_token_id as the JSON text read ("": absent), written back
    int o_bias;                // Llama's attention_bias: q/k/v biases and an o_proj bias, which must be zero (we have none)
    int qk_norm;               // Qwen3's q_norm / k_norm: an RMSNorm over every q and k head (model_type qwen3: always)
    int fused;                 // Phi-3's fused tensors: qkv_proj (q ; k ; v rows) and gate_up_proj (gate ; up rows)
    int orig_maxT;             // Phi-3's original_max_position_embeddings (read by its longrope only), written back as read
    int bnb4;                  // [QLoRA] quantization_config: bitsandbytes 4-bit nf4, double quantization (the projections' weights)
    char gen_src[PATH_MAX];    // an export's generation_config.json copied from here ("": written from bos/eos: hf_generation_text)
} HFConfig;

// A GPT-2's config from its five dimensions.
static HFConfig hf_gpt2_config(int L, int C, int NH, int V, int maxT) {
    HFConfig c;
    memset(&c, 0, sizeof(c));
    c.L = L; c.C = C; c.NH = NH; c.V = V; c.maxT = maxT;
    c.arch = HF_ARCH_GPT2;
    c.NKV = NH; c.HD = NH > 0 && C % NH == 0 ? C / NH : 0; c.F = 4 * C;
    c.tied = 1; c.qkv_bias = 1; c.mlp_bias = 1; c.norm_eps = 1e-5; c.rope_type = HF_ROPE_NONE;
    return c;
}

// X(ours, Hugging Face name ("%d": the layer), per layer, Conv1D (stored transposed), HF dim 0,
//   HF dim 1 (0: a 1-D tensor), first element inside ours, present in this config, vocabulary rows
//   (ours has Vp rows: V..Vp are padding), a layer Linear's weight (what bitsandbytes stores in 4 bits)) — in terms of HFConfig* c. Rows in transformers'
//   state_dict order (the order shards are filled in); ours in model.h's logical order is rebuilt
//   from `ours` and `at` by hf_bind.
#define HF_GPT2_TENSORS(X)                                                                          \
    X(wte,      "wte.weight",              0, 0, c->V,     c->C,     0, 1, 1, 0)                       \
    X(wpe,      "wpe.weight",              0, 0, c->maxT,  c->C,     0, 1, 0, 0)                       \
    X(ln1w,     "h.%d.ln_1.weight",        1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(ln1b,     "h.%d.ln_1.bias",          1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(qkvw,     "h.%d.attn.c_attn.weight", 1, 1, c->C,     3 * c->C, 0, 1, 0, 1)                       \
    X(qkvb,     "h.%d.attn.c_attn.bias",   1, 0, 3 * c->C, 0,        0, 1, 0, 0)                       \
    X(attprojw, "h.%d.attn.c_proj.weight", 1, 1, c->C,     c->C,     0, 1, 0, 1)                       \
    X(attprojb, "h.%d.attn.c_proj.bias",   1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(ln2w,     "h.%d.ln_2.weight",        1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(ln2b,     "h.%d.ln_2.bias",          1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(fcw,      "h.%d.mlp.c_fc.weight",    1, 1, c->C,     4 * c->C, 0, 1, 0, 1)                       \
    X(fcb,      "h.%d.mlp.c_fc.bias",      1, 0, 4 * c->C, 0,        0, 1, 0, 0)                       \
    X(fcprojw,  "h.%d.mlp.c_proj.weight",  1, 1, 4 * c->C, c->C,     0, 1, 0, 1)                       \
    X(fcprojb,  "h.%d.mlp.c_proj.bias",    1, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(lnfw,     "ln_f.weight",             0, 0, c->C,     0,        0, 1, 0, 0)                       \
    X(lnfb,     "ln_f.bias",               0, 0, c->C,     0,        0, 1, 0, 0)

// Q = NH*HD rows of queries, K = NKV*HD rows of keys (and of values): wqkv is (Q + 2K, C), wgu (2F, C).
// Phi-3 stores each fused: qkv_proj is wqkv's rows as they are, gate_up_proj wgu's (Phi3MLP: gate,
// up = chunk(2)); Phi3Attention defines o_proj before qkv_proj, hence the rows' order.
// `none`: a tensor with no counterpart of ours, all zeros (Llama's o_proj bias with attention_bias:
// read and checked to be zero, written as zeros).
#define HF_LLAMA_TENSORS(X)                                                                                                  \
    X(embed,    "model.embed_tokens.weight",                       0, 0, c->V, c->C, 0,                  1,           1, 0)      \
    X(wqkv,     "model.layers.%d.self_attn.q_proj.weight",         1, 0, Q,    c->C, 0,                  !c->fused,   0, 1)      \
    X(bqkv,     "model.layers.%d.self_attn.q_proj.bias",           1, 0, Q,    0,    0,                  c->qkv_bias, 0, 0)      \
    X(wqkv,     "model.layers.%d.self_attn.k_proj.weight",         1, 0, K,    c->C, Q * c->C,           !c->fused,   0, 1)      \
    X(bqkv,     "model.layers.%d.self_attn.k_proj.bias",           1, 0, K,    0,    Q,                  c->qkv_bias, 0, 0)      \
    X(wqkv,     "model.layers.%d.self_attn.v_proj.weight",         1, 0, K,    c->C, (Q + K) * c->C,     !c->fused,   0, 1)      \
    X(bqkv,     "model.layers.%d.self_attn.v_proj.bias",           1, 0, K,    0,    Q + K,              c->qkv_bias, 0, 0)      \
    X(wo,       "model.layers.%d.self_attn.o_proj.weight",         1, 0, c->C, Q,    0,                  1,           0, 1)      \
    X(none,     "model.layers.%d.self_attn.o_proj.bias",           1, 0, c->C, 0,    0,                  c->o_bias,   0, 0)      \
    X(wqkv,     "model.layers.%d.self_attn.qkv_proj.weight",       1, 0, Q + 2 * K, c->C, 0,             c->fused,    0, 1)      \
    X(qnorm,    "model.layers.%d.self_attn.q_norm.weight",         1, 0, c->HD, 0,   0,                  c->qk_norm,  0, 0)      \
    X(knorm,    "model.layers.%d.self_attn.k_norm.weight",         1, 0, c->HD, 0,   0,                  c->qk_norm,  0, 0)      \
    X(wgu,      "model.layers.%d.mlp.gate_proj.weight",            1, 0, c->F, c->C, 0,                  !c->fused,   0, 1)      \
    X(bgu,      "model.layers.%d.mlp.gate_proj.bias",              1, 0, c->F, 0,    0,                  c->mlp_bias, 0, 0)      \
    X(wgu,      "model.layers.%d.mlp.up_proj.weight",              1, 0, c->F, c->C, (int64_t)c->F * c->C, !c->fused, 0, 1)      \
    X(bgu,      "model.layers.%d.mlp.up_proj.bias",                1, 0, c->F, 0,    c->F,               c->mlp_bias, 0, 0)      \
    X(wgu,      "model.layers.%d.mlp.gate_up_proj.weight",         1, 0, 2 * (int64_t)c->F, c->C, 0,     c->fused,    0, 1)      \
    X(wdown,    "model.layers.%d.mlp.down_proj.weight",            1, 0, c->C, c->F, 0,                  1,           0, 1)      \
    X(bdown,    "model.layers.%d.mlp.down_proj.bias",              1, 0, c->C, 0,    0,                  c->mlp_bias, 0, 0)      \
    X(attnnorm, "model.layers.%d.input_layernorm.weight",          1, 0, c->C, 0,    0,                  1,           0, 0)      \
    X(mlpnorm,  "model.layers.%d.post_attention_layernorm.weight", 1, 0, c->C, 0,    0,                  1,           0, 0)      \
    X(normf,    "model.norm.weight",                               0, 0, c->C, 0,    0,                  1,           0, 0)      \
    X(lmhead,   "lm_head.weight",                                  0, 0, c->V, c->C, 0,                  !c->tied,    1, 0)

#define HF_MAX_ROWS 24

typedef struct {
    const char* ours;     // our tensor (model.h's name)
    const char* hf;       // its Hugging Face name ("%d": the layer)
    int per_layer, conv1d;
    int64_t d0, d1;       // the Hugging Face shape (d1 = 0: 1-D)
    int64_t at;           // its first element inside ours (per layer)
    int present;          // in a checkpoint of this config
    int vocab;            // ours has Vp rows, this tensor V
    int lin;              // a layer Linear's weight: in 4 bits in a bitsandbytes checkpoint ([QLoRA])
} HFTensorRow;

// The rows of c's family; returns their number.
static int hf_rows(const HFConfig* c, HFTensorRow* rows) {
    int k = 0;
#define X(name, hfname, pl, cv, dim0, dim1, first, pres, voc, ln) \
    rows[k++] = (HFTensorRow){#name, hfname, pl, cv, (int64_t)(dim0), (int64_t)(dim1), (int64_t)(first), (pres) ? 1 : 0, voc, ln};
    if (c->arch == HF_ARCH_GPT2) {
        HF_GPT2_TENSORS(X)
    } else {
        int64_t Q = (int64_t)c->NH * c->HD, K = (int64_t)c->NKV * c->HD;
        HF_LLAMA_TENSORS(X)
    }
#undef X
    return k;
}

static int64_t hf_row_numel(const HFTensorRow* r) { return r->d0 * (r->d1 ? r->d1 : 1); }

static void hf_name(const HFTensorRow* r, int layer, char* out, size_t cap) { // cap >= 64: the names are short
    int n = r->per_layer ? snprintf(out, cap, r->hf, layer) : snprintf(out, cap, "%s", r->hf);
    if (n < 0 || (size_t)n >= cap) out[0] = 0;
}

// ----------------------------------------------------------------------------
// config.json

static int hf_read_file(const char* path, char** out, size_t* len, size_t cap, char* err, size_t errlen) {
    FILE* f = zt_fopen_read(path);
    if (!f) return st_err(err, errlen, "%s: cannot open: %s", path, zt_strerror(errno));
    char* buf = (char*)malloc(cap + 1);
    if (!buf) { fclose(f); return st_err(err, errlen, "%s: out of memory", path); }
    size_t n = fread(buf, 1, cap + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); return st_err(err, errlen, "%s: read error", path); }
    if (n > cap) { free(buf); return st_err(err, errlen, "%s: larger than %zu bytes", path, cap); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

// A JSON value as an error message shows it: 'text', 12, 0.5, true, null, [...], {...}.
static const char* hf_show(const Json* j, int k, char* buf, size_t cap) {
    const JsonNode* n = &j->nodes[k];
    switch (n->type) {
    case JSON_NULL: return "null";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NUMBER: if (n->is_int) snprintf(buf, cap, "%lld", (long long)n->i); else snprintf(buf, cap, "%g", n->num); return buf;
    case JSON_STRING: snprintf(buf, cap, "'%.60s'", n->str); return buf;
    case JSON_ARRAY: return "[...]";
    default: return "{...}";
    }
}

// A field of object `obj` (the root, or rope_scaling): an integer, a number, a boolean. `def` when
// absent (or null, where allow_null); a missing required field, a wrong type or a value out of
// range is an error naming the file, the field and the value.
static int hf_cfg_int(const Json* j, int obj, const char* path, const char* key, int required, int allow_null, int64_t def,
                      int64_t lo, int64_t hi, int* out, char* err, size_t errlen) {
    int k = json_get(j, obj, key);
    const char* pre = obj ? "rope_scaling." : ""; // the one nested object we read
    if (k < 0 || (allow_null && j->nodes[k].type == JSON_NULL)) {
        if (required) return st_err(err, errlen, "%s: %s%s is missing (an integer; transformers' config needs it)", path, pre, key);
        *out = (int)def;
        return 0;
    }
    char b[96];
    const JsonNode* n = &j->nodes[k];
    if (n->type != JSON_NUMBER || !n->is_int || n->i < lo || n->i > hi)
        return st_err(err, errlen, "%s: %s%s = %s: must be an integer from %lld to %lld", path, pre, key, hf_show(j, k, b, sizeof(b)), (long long)lo, (long long)hi);
    *out = (int)n->i;
    return 0;
}

static int hf_cfg_num(const Json* j, int obj, const char* path, const char* key, int required, double def, double* out, char* err, size_t errlen) {
    int k = json_get(j, obj, key);
    const char* pre = obj ? "rope_scaling." : "";
    if (k < 0) {
        if (required) return st_err(err, errlen, "%s: %s%s is missing (a number; transformers' config needs it)", path, pre, key);
        *out = def;
        return 0;
    }
    char b[96];
    if (j->nodes[k].type != JSON_NUMBER || !(j->nodes[k].num > 0) || !isfinite(j->nodes[k].num))
        return st_err(err, errlen, "%s: %s%s = %s: must be a positive number", path, pre, key, hf_show(j, k, b, sizeof(b)));
    *out = j->nodes[k].num;
    return 0;
}

static int hf_cfg_bool(const Json* j, const char* path, const char* key, int def, int* out, char* err, size_t errlen) {
    int k = json_get(j, 0, key);
    if (k < 0) { *out = def; return 0; }
    char b[96];
    if (j->nodes[k].type != JSON_TRUE && j->nodes[k].type != JSON_FALSE)
        return st_err(err, errlen, "%s: %s = %s: must be true or false", path, key, hf_show(j, k, b, sizeof(b)));
    *out = j->nodes[k].type == JSON_TRUE;
    return 0;
}

// A token id field (an integer, a list of them, or null) kept as JSON text for the exporter.
static void hf_cfg_token(const Json* j, const char* key, char* out, size_t cap) {
    out[0] = 0;
    int k = json_get(j, 0, key);
    if (k < 0) return;
    const JsonNode* n = &j->nodes[k];
    if (n->type == JSON_NUMBER && n->is_int) { snprintf(out, cap, "%lld", (long long)n->i); return; }
    if (n->type == JSON_NULL) { snprintf(out, cap, "null"); return; }
    if (n->type != JSON_ARRAY) return;
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int ch = n->first; ch >= 0; ch = j->nodes[ch].next) {
        if (j->nodes[ch].type != JSON_NUMBER || !j->nodes[ch].is_int || len + 24 >= cap) { out[0] = 0; return; }
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", ch == n->first ? "" : ", ", (long long)j->nodes[ch].i);
    }
    snprintf(out + len, cap - len, "]");
}

// GPT-2 (GPT2Config): the dimensions (transformers' defaults where a key is absent) and a refusal,
// by name, of every option we do not implement.
static int hf_read_gpt2(const Json* jj, const char* path, HFConfig* c, char* err, size_t errlen) {
    const Json* j = jj;
    const JsonNode* N = j->nodes;
    char b[96];
    int k;
    static const struct { const char* key; int def; } dims[] = {
        {"n_layer", 12}, {"n_embd", 768}, {"n_head", 12}, {"vocab_size", 50257}, {"n_positions", 1024}};
    int v[5];
    for (int d = 0; d < 5; d++) {
        k = json_get(j, 0, dims[d].key);
        v[d] = dims[d].def;
        if (k >= 0) {
            if (N[k].type != JSON_NUMBER || !N[k].is_int || N[k].i < 1 || N[k].i > (1 << 24))
                return st_err(err, errlen, "%s: %s must be a positive integer", path, dims[d].key);
            v[d] = (int)N[k].i;
        }
    }
    *c = hf_gpt2_config(v[0], v[1], v[2], v[3], v[4]);
    if ((k = json_get(j, 0, "n_inner")) >= 0 && N[k].type != JSON_NULL && !(N[k].type == JSON_NUMBER && N[k].is_int && N[k].i == 4ll * c->C))
        return st_err(err, errlen, "%s: n_inner = %s is not supported (only null or 4*n_embd = %d)", path, hf_show(j, k, b, sizeof(b)), 4 * c->C);
    if ((k = json_get(j, 0, "activation_function")) >= 0 &&
        (N[k].type != JSON_STRING || (strcmp(N[k].str, "gelu_new") && strcmp(N[k].str, "gelu_pytorch_tanh"))))
        return st_err(err, errlen, "%s: activation_function %s is not supported (only gelu_new or gelu_pytorch_tanh: GELU, tanh approximation)",
                      path, hf_show(j, k, b, sizeof(b)));
    // booleans that must have GPT-2's value: (key, required value, what the other value means)
    static const struct { const char* key; int want; const char* what; } flags[] = {
        {"tie_word_embeddings", 1, "untied embeddings (a separate lm_head) are not supported for GPT-2"},
        {"add_cross_attention", 0, "cross-attention is not supported"},
        {"scale_attn_weights", 1, "attention without the 1/sqrt(head size) scale is not supported"},
        {"scale_attn_by_inverse_layer_idx", 0, "scaling attention by 1/layer index is not supported"},
    };
    for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++) {
        int on = 0; // set by hf_cfg_bool on success (g++ -O3 under nvcc cannot tell: maybe-uninitialized)
        if (hf_cfg_bool(j, path, flags[f].key, flags[f].want, &on, err, errlen)) return -1;
        if (on != flags[f].want) return st_err(err, errlen, "%s: %s = %s: %s", path, flags[f].key, on ? "true" : "false", flags[f].what);
    }
    if ((k = json_get(j, 0, "layer_norm_epsilon")) >= 0 && (N[k].type != JSON_NUMBER || fabs(N[k].num - 1e-5) > 1e-12))
        return st_err(err, errlen, "%s: layer_norm_epsilon = %s is not supported (only 1e-5, GPT-2's)", path, hf_show(j, k, b, sizeof(b)));
    return 0;
}

// The Llama family (LlamaConfig, MistralConfig, Qwen2Config as transformers 4.47 reads them): the
// shape fields are required (transformers' defaults are some 7B model's, never what a checkpoint
// means); the others take transformers' default for the model_type when absent.
static int hf_read_llama(const Json* j, const char* path, int arch, HFConfig* c, char* err, size_t errlen) {
    const JsonNode* N = j->nodes;
    char b[96];
    int k;
    const int big = 1 << 24;
    c->arch = arch;
    if (hf_cfg_int(j, 0, path, "num_hidden_layers", 1, 0, 0, 1, big, &c->L, err, errlen) ||
        hf_cfg_int(j, 0, path, "hidden_size", 1, 0, 0, 1, big, &c->C, err, errlen) ||
        hf_cfg_int(j, 0, path, "num_attention_heads", 1, 0, 0, 1, big, &c->NH, err, errlen) ||
        hf_cfg_int(j, 0, path, "intermediate_size", 1, 0, 0, 1, big, &c->F, err, errlen) ||
        hf_cfg_int(j, 0, path, "vocab_size", 1, 0, 0, 2, big, &c->V, err, errlen) ||
        hf_cfg_int(j, 0, path, "max_position_embeddings", 1, 0, 0, 1, big, &c->maxT, err, errlen) ||
        hf_cfg_int(j, 0, path, "num_key_value_heads", 0, 1, c->NH, 1, c->NH, &c->NKV, err, errlen) ||
        hf_cfg_num(j, 0, path, "rms_norm_eps", 1, 0.0, &c->norm_eps, err, errlen) ||
        hf_cfg_num(j, 0, path, "rope_theta", 0, 10000.0, &c->rope_theta, err, errlen) ||
        hf_cfg_bool(j, path, "tie_word_embeddings", 0, &c->tied, err, errlen))
        return -1;
    if (c->NH % c->NKV != 0)
        return st_err(err, errlen, "%s: num_attention_heads = %d is not a multiple of num_key_value_heads = %d (grouped-query attention needs whole groups)",
                      path, c->NH, c->NKV);
    // head_dim: Llama and Mistral read it (null or absent: hidden_size / heads); Qwen2 and Phi-3 (4.47)
    // never do; Qwen3 always does (absent: Qwen3Config's 128)
    k = json_get(j, 0, "head_dim");
    int fixed_hd = arch == HF_ARCH_QWEN2 || arch == HF_ARCH_PHI3;
    if (arch == HF_ARCH_QWEN3) {
        if (hf_cfg_int(j, 0, path, "head_dim", 0, 0, 128, 1, big, &c->HD, err, errlen)) return -1;
    } else if (fixed_hd || k < 0 || N[k].type == JSON_NULL) {
        if (c->C % c->NH != 0)
            return st_err(err, errlen, "%s: hidden_size = %d is not a multiple of num_attention_heads = %d, and no head_dim is given", path, c->C, c->NH);
        c->HD = c->C / c->NH;
        if (fixed_hd && k >= 0 && N[k].type != JSON_NULL && !(N[k].type == JSON_NUMBER && N[k].is_int && N[k].i == c->HD))
            return st_err(err, errlen, "%s: head_dim = %s: %s (transformers 4.47) always uses hidden_size / num_attention_heads = %d",
                          path, hf_show(j, k, b, sizeof(b)), arch == HF_ARCH_PHI3 ? "Phi-3" : "Qwen2", c->HD);
    } else if (hf_cfg_int(j, 0, path, "head_dim", 0, 1, 0, 1, big, &c->HD, err, errlen)) return -1;
    if (c->HD % 2) return st_err(err, errlen, "%s: head_dim = %d is odd: RoPE rotates pairs (d, d + head_dim/2)", path, c->HD);
    // the activation: SwiGLU with SiLU (transformers' ACT2FN: "silu" and "swish" are both nn.SiLU)
    if ((k = json_get(j, 0, "hidden_act")) >= 0 && (N[k].type != JSON_STRING || (strcmp(N[k].str, "silu") && strcmp(N[k].str, "swish"))))
        return st_err(err, errlen, "%s: hidden_act = %s is not supported (only silu: SwiGLU)", path, hf_show(j, k, b, sizeof(b)));
    // biases: Qwen2 always has q/k/v biases (and never an o_proj or MLP bias); Mistral none; Llama's
    // attention_bias adds q/k/v AND o_proj biases, mlp_bias gate/up/down biases; Qwen3's attention_bias
    // as Llama's, and never MLP biases. Qwen3 always normalises each q and k head (q_norm, k_norm).
    c->qkv_bias = arch == HF_ARCH_QWEN2;
    c->mlp_bias = 0;
    c->qk_norm = arch == HF_ARCH_QWEN3;
    c->fused = arch == HF_ARCH_PHI3; // Phi-3: no biases at all (4.47's Phi3 ignores attention_bias), qkv_proj and gate_up_proj
    if (arch == HF_ARCH_LLAMA || arch == HF_ARCH_QWEN3) { // (its o_proj bias must then be zero: hf_open checks the values)
        if (hf_cfg_bool(j, path, "attention_bias", 0, &c->qkv_bias, err, errlen) ||
            (arch == HF_ARCH_LLAMA && hf_cfg_bool(j, path, "mlp_bias", 0, &c->mlp_bias, err, errlen))) return -1;
        c->o_bias = c->qkv_bias;
    }
    // RoPE: rope_scaling null, or {"rope_type" (or the older "type"): default | linear | llama3, ...};
    // Phi-3's only kind is longrope (su, yarn: its older names), which is not implemented here
    c->rope_type = HF_ROPE_DEFAULT;
    c->rope_factor = 1.0;
    k = json_get(j, 0, "rope_scaling");
    if (arch == HF_ARCH_PHI3 && k >= 0 && N[k].type != JSON_NULL) {
        int t = N[k].type == JSON_OBJECT ? json_get(j, k, "type") : -1;
        if (t < 0 && N[k].type == JSON_OBJECT) t = json_get(j, k, "rope_type");
        return st_err(err, errlen, "%s: rope_scaling (type %s): Phi-3's longrope (Phi-3.5-mini, the 128k Phi-3 models, Phi-4-mini) is not supported; "
                      "only Phi-3 models without rope_scaling are (Phi-3-mini-4k, Phi-3-medium-4k)", path, t >= 0 ? hf_show(j, t, b, sizeof(b)) : "?");
    }
    if (k >= 0 && N[k].type != JSON_NULL) {
        if (N[k].type != JSON_OBJECT) return st_err(err, errlen, "%s: rope_scaling = %s: must be null or an object", path, hf_show(j, k, b, sizeof(b)));
        int t = json_get(j, k, "rope_type");
        if (t < 0) t = json_get(j, k, "type");
        if (t < 0 || N[t].type != JSON_STRING) return st_err(err, errlen, "%s: rope_scaling has no rope_type string", path);
        const char* rt = N[t].str;
        if (!strcmp(rt, "default")) c->rope_type = HF_ROPE_DEFAULT;
        else if (!strcmp(rt, "linear")) {
            c->rope_type = HF_ROPE_LINEAR;
            if (hf_cfg_num(j, k, path, "factor", 1, 1.0, &c->rope_factor, err, errlen)) return -1;
        } else if (!strcmp(rt, "llama3")) {
            c->rope_type = HF_ROPE_LLAMA3;
            if (hf_cfg_num(j, k, path, "factor", 1, 1.0, &c->rope_factor, err, errlen) ||
                hf_cfg_num(j, k, path, "low_freq_factor", 1, 1.0, &c->rope_low_freq, err, errlen) ||
                hf_cfg_num(j, k, path, "high_freq_factor", 1, 1.0, &c->rope_high_freq, err, errlen) ||
                hf_cfg_int(j, k, path, "original_max_position_embeddings", 1, 0, 0, 1, big, &c->rope_orig_maxT, err, errlen))
                return -1;
            if (!(c->rope_high_freq > c->rope_low_freq))
                return st_err(err, errlen, "%s: rope_scaling (llama3): high_freq_factor = %g must be above low_freq_factor = %g", path, c->rope_high_freq, c->rope_low_freq);
        } else
            return st_err(err, errlen, "%s: rope_scaling.rope_type = '%.40s' is not supported (only default, linear, llama3)", path, rt);
        for (int ch = N[k].first; ch >= 0; ch = N[ch].next) // a field the type does not use changes nothing in transformers either
            if (!strcmp(N[ch].key, "attention_factor") || !strcmp(N[ch].key, "mscale") || !strcmp(N[ch].key, "mscale_all_dim"))
                return st_err(err, errlen, "%s: rope_scaling.%s = %s is not supported (only default, linear, llama3 RoPE, unscaled attention)",
                              path, N[ch].key, hf_show(j, ch, b, sizeof(b)));
    }
    // what other Llama-like models add, refused by name: (key, what it would mean)
    static const struct { const char* key; const char* what; } refused[] = {
        {"num_local_experts", "mixture of experts is not supported"}, {"num_experts", "mixture of experts is not supported"},
        {"num_experts_per_tok", "mixture of experts is not supported"}, {"n_routed_experts", "mixture of experts is not supported"},
        {"moe_intermediate_size", "mixture of experts is not supported"}, {"n_shared_experts", "mixture of experts is not supported"},
        {"shared_expert_intermediate_size", "mixture of experts is not supported"}, {"qk_layernorm", "this qk-norm is not supported (Qwen3's q_norm/k_norm is: model_type qwen3)"},
        {"use_qk_norm", "this qk-norm is not supported (Qwen3's q_norm/k_norm is: model_type qwen3)"},
        {"qk_norm", "this qk-norm is not supported (Qwen3's q_norm/k_norm is: model_type qwen3)"},
        {"use_mrope", "multimodal RoPE (Qwen2-VL) is not supported"},
        {"rope_interleaved", "interleaved RoPE pairs are not supported (transformers ignores the field and rotates halves, so the checkpoint would mean another model)"},
    };
    for (size_t f = 0; f < sizeof(refused) / sizeof(refused[0]); f++) {
        k = json_get(j, 0, refused[f].key);
        if (k < 0 || N[k].type == JSON_NULL || N[k].type == JSON_FALSE || (N[k].type == JSON_NUMBER && N[k].num == 0)) continue;
        return st_err(err, errlen, "%s: %s = %s: %s", path, refused[f].key, hf_show(j, k, b, sizeof(b)), refused[f].what);
    }
    if ((k = json_get(j, 0, "partial_rotary_factor")) >= 0 && !(N[k].type == JSON_NUMBER && N[k].num == 1.0))
        return st_err(err, errlen, "%s: partial_rotary_factor = %s is not supported (only 1: RoPE on the whole head)", path, hf_show(j, k, b, sizeof(b)));
    // the sliding window: Mistral's sliding_window (null: none); Qwen2's only with use_sliding_window
    c->window = 0;
    c->max_window_layers = 28;
    if (arch == HF_ARCH_MISTRAL) { // absent: MistralConfig's 4096; null: none
        k = json_get(j, 0, "sliding_window");
        if (k >= 0 && N[k].type == JSON_NULL) c->window = 0;
        else if (hf_cfg_int(j, 0, path, "sliding_window", 0, 0, 4096, 1, INT_MAX, &c->window, err, errlen)) return -1;
    }
    if (arch == HF_ARCH_PHI3) { // absent or null: none (Phi3Config's default); Phi-3-mini-4k: 2047
        k = json_get(j, 0, "sliding_window");
        if (!(k < 0 || N[k].type == JSON_NULL) && hf_cfg_int(j, 0, path, "sliding_window", 0, 0, 0, 1, INT_MAX, &c->window, err, errlen)) return -1;
        if (hf_cfg_int(j, 0, path, "original_max_position_embeddings", 0, 0, 4096, 1, big, &c->orig_maxT, err, errlen)) return -1;
    }
    if (arch == HF_ARCH_QWEN2 || arch == HF_ARCH_QWEN3) { // (Qwen3Config: the same three fields, the same defaults)
        int use;
        if (hf_cfg_bool(j, path, "use_sliding_window", 0, &use, err, errlen) ||
            hf_cfg_int(j, 0, path, "max_window_layers", 0, 1, 28, 0, big, &c->max_window_layers, err, errlen)) return -1;
        k = json_get(j, 0, "sliding_window"); // absent: Qwen2Config's 4096; null: none
        if (use && !(k >= 0 && N[k].type == JSON_NULL) && hf_cfg_int(j, 0, path, "sliding_window", 0, 0, 4096, 1, INT_MAX, &c->window, err, errlen)) return -1;
        // later transformers write the layers' kinds out (layer_types): full attention everywhere, or
        // a window somewhere (taken for every layer: a run longer than the window is refused)
        k = json_get(j, 0, "layer_types");
        if (k >= 0 && N[k].type != JSON_NULL) {
            if (N[k].type != JSON_ARRAY) return st_err(err, errlen, "%s: layer_types = %s: must be a list", path, hf_show(j, k, b, sizeof(b)));
            for (int e = N[k].first; e >= 0; e = N[e].next) {
                if (N[e].type == JSON_STRING && !strcmp(N[e].str, "full_attention")) continue;
                if (!(N[e].type == JSON_STRING && !strcmp(N[e].str, "sliding_attention")))
                    return st_err(err, errlen, "%s: layer_types holds %s: only full_attention and sliding_attention are known", path, hf_show(j, e, b, sizeof(b)));
                if (!c->window && hf_cfg_int(j, 0, path, "sliding_window", 1, 0, 0, 1, INT_MAX, &c->window, err, errlen)) return -1;
            }
        }
    }
    hf_cfg_token(j, "bos_token_id", c->bos, sizeof(c->bos));
    hf_cfg_token(j, "eos_token_id", c->eos, sizeof(c->eos));
    hf_cfg_token(j, "pad_token_id", c->pad, sizeof(c->pad));
    return 0;
}

// [QLoRA] config.json's quantization_config: absent or null (the weights are F32/F16/BF16), or
// bitsandbytes' 4-bit NF4 with double quantization (c->bnb4 = 1); everything else refused naming the
// field and its value.
static int hf_read_quant(const Json* j, const char* path, HFConfig* c, char* err, size_t errlen) {
    int q = json_get(j, 0, "quantization_config");
    c->bnb4 = 0;
    if (q < 0 || j->nodes[q].type == JSON_NULL) return 0;
    char b[96];
    if (j->nodes[q].type != JSON_OBJECT) return st_err(err, errlen, "%s: quantization_config %s is not an object", path, hf_show(j, q, b, sizeof(b)));
    int k = json_get(j, q, "quant_method");
    if (k < 0 || j->nodes[k].type != JSON_STRING || strcmp(j->nodes[k].str, "bitsandbytes"))
        return st_err(err, errlen, "%s: quantization_config.quant_method %s: only bitsandbytes' 4-bit NF4 checkpoints are read (GPTQ, AWQ, "
                      "HQQ, fp8 and the rest are not). HINT: load the BF16 model and pass -lora-quant nf4", path, hf_show(j, k, b, sizeof(b)));
    k = json_get(j, q, "load_in_8bit");
    if (k >= 0 && j->nodes[k].type == JSON_TRUE)
        return st_err(err, errlen, "%s: quantization_config.load_in_8bit true: 8-bit (LLM.int8) checkpoints are not read, only 4-bit NF4", path);
    k = json_get(j, q, "load_in_4bit");
    if (k < 0 || j->nodes[k].type != JSON_TRUE)
        return st_err(err, errlen, "%s: quantization_config.load_in_4bit %s: only 4-bit NF4 checkpoints are read", path, hf_show(j, k, b, sizeof(b)));
    k = json_get(j, q, "bnb_4bit_quant_type");
    if (k < 0 || j->nodes[k].type != JSON_STRING || strcmp(j->nodes[k].str, "nf4"))
        return st_err(err, errlen, "%s: quantization_config.bnb_4bit_quant_type %s: only nf4 is read (fp4 is not)", path, hf_show(j, k, b, sizeof(b)));
    k = json_get(j, q, "bnb_4bit_use_double_quant");
    if (k < 0 || j->nodes[k].type != JSON_TRUE)
        return st_err(err, errlen, "%s: quantization_config.bnb_4bit_use_double_quant %s: only double quantization (QLoRA's) is read", path,
                      hf_show(j, k, b, sizeof(b)));
    k = json_get(j, q, "bnb_4bit_quant_storage");
    if (k >= 0 && !(j->nodes[k].type == JSON_STRING && (!strcmp(j->nodes[k].str, "uint8") || !strcmp(j->nodes[k].str, "bfloat16") ||
                                                       !strcmp(j->nodes[k].str, "float16") || !strcmp(j->nodes[k].str, "float32"))))
        return st_err(err, errlen, "%s: quantization_config.bnb_4bit_quant_storage %s: not uint8, bfloat16, float16 or float32", path, hf_show(j, k, b, sizeof(b)));
    // modules left in 16 bits: fine unless one is a layer's Linear. transformers skips a module when a
    // listed name is a substring of its dotted name: the same test against each 4-bit row's module
    k = json_get(j, q, "llm_int8_skip_modules");
    if (k >= 0 && j->nodes[k].type != JSON_NULL) {
        if (j->nodes[k].type != JSON_ARRAY) return st_err(err, errlen, "%s: quantization_config.llm_int8_skip_modules %s is not a list", path, hf_show(j, k, b, sizeof(b)));
        HFTensorRow rows[HF_MAX_ROWS];
        int nrows = hf_rows(c, rows);
        for (int e = j->nodes[k].first; e >= 0; e = j->nodes[e].next) {
            if (j->nodes[e].type != JSON_STRING)
                return st_err(err, errlen, "%s: quantization_config.llm_int8_skip_modules holds %s, not a module name", path, hf_show(j, e, b, sizeof(b)));
            for (int r = 0; r < nrows; r++)
                for (int l = 0; rows[r].lin && rows[r].present && l < c->L; l++) {
                    char mod[128];
                    hf_name(&rows[r], l, mod, sizeof(mod));
                    char* dot = strrchr(mod, '.');
                    if (dot) *dot = 0; // (the module: its weight's name without ".weight")
                    if (strstr(mod, j->nodes[e].str))
                        return st_err(err, errlen, "%s: quantization_config.llm_int8_skip_modules names %s, which leaves %s in 16 bits: a layer "
                                      "projection left in 16 bits is not supported (every projection of a 4-bit base is NF4 here)", path, j->nodes[e].str, mod);
                }
        }
    }
    if (c->arch == HF_ARCH_PHI3)
        return st_err(err, errlen, "%s: quantization_config: a 4-bit Phi-3 checkpoint is not read yet (its qkv_proj and gate_up_proj are one "
                      "4-bit Linear each). HINT: load the BF16 model and pass -lora-quant nf4", path);
    if (c->arch == HF_ARCH_GPT2)
        return st_err(err, errlen, "%s: quantization_config: a 4-bit GPT-2 checkpoint is not read yet (its Conv1D weights are quantized transposed); "
                      "the Llama family's are. HINT: load the BF16 GPT-2 and pass -lora-quant nf4", path);
    c->bnb4 = 1;
    return 0;
}

// Read config.json into c: model_type gpt2 (the default when absent, as older GPT-2 files have
// none), llama, mistral, qwen2, qwen3 or phi3. 0, or -1 with err naming the file, the field and its value.
static int hf_read_config(const char* path, HFConfig* c, char* err, size_t errlen) {
    memset(c, 0, sizeof(*c));
    char* text;
    size_t len;
    if (hf_read_file(path, &text, &len, 1 << 20, err, errlen)) return -1;
    Json j;
    char jerr[512], b[96];
    int rc = -1;
    if (json_parse(&j, text, len, jerr, sizeof(jerr))) st_err(err, errlen, "%s: %s", path, jerr);
    else if (j.nodes[0].type != JSON_OBJECT) st_err(err, errlen, "%s: not a JSON object", path);
    else {
        int k = json_get(&j, 0, "model_type"), arch = -1;
        if (k < 0) arch = HF_ARCH_GPT2;
        else if (j.nodes[k].type == JSON_STRING)
            for (int a = 0; a < HF_NARCH; a++) if (!strcmp(j.nodes[k].str, hf_archs[a].model_type)) arch = a;
        if (arch < 0)
            st_err(err, errlen, "%s: model_type %s is not supported (only gpt2: GPT2LMHeadModel; llama, mistral, qwen2, qwen3, phi3: LlamaForCausalLM, "
                   "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM)", path, hf_show(&j, k, b, sizeof(b)));
        else rc = arch == HF_ARCH_GPT2 ? hf_read_gpt2(&j, path, c, err, errlen) : hf_read_llama(&j, path, arch, c, err, errlen);
        if (rc == 0) rc = hf_read_quant(&j, path, c, err, errlen);
    }
    json_free(&j);
    free(text);
    return rc;
}

// What the config says about a run of T tokens: a sliding window shorter than T is refused
// (attention over the last `window` positions only, which we do not implement).
static int hf_check_run(const HFConfig* c, int T, const char* config_path, char* err, size_t errlen) {
    if (c->window > 0 && T > c->window)
        return st_err(err, errlen, "%s: sliding_window = %d is shorter than the run's T = %d: sliding-window attention is not supported "
                      "(up to T = %d it equals full attention). HINT: use -t %d or less", config_path, c->window, T, c->window, c->window);
    return 0;
}

// ----------------------------------------------------------------------------
// Reading a checkpoint.

typedef struct { const char* name; int64_t logical, n; int per_layer; } HFLlmcTensor; // one of ours, from the caller (n: per layer)

// One of our tensors bound to its Hugging Face rows (in `at` order; elements past the last are padding).
typedef struct { int64_t logical, n; int per_layer; int nrows; int rows[4]; } HFBound;

// [QLoRA] The tensors bitsandbytes saves beside a 4-bit weight W: W.<suffix> (Linear4bit's
// _save_to_state_dict: QuantState.as_dict(packed=True)).
enum { HF_Q_ABSMAX, HF_Q_MAP, HF_Q_NESTED, HF_Q_NESTED_MAP, HF_Q_STATE, HF_Q_N };
static const char* const hf_q_suffix[HF_Q_N] = {"absmax", "quant_map", "nested_absmax", "nested_quant_map", "quant_state.bitsandbytes__nf4"};

// [QLoRA] A row stored in 4 bits in a bitsandbytes checkpoint: a layer projection's weight.
static int hf_row_nf4(const HFConfig* c, const HFTensorRow* r) { return c->bnb4 && r->lin; }

typedef struct {
    HFConfig cfg;
    char config_path[PATH_MAX + 64];
    StFile* files;
    int nfiles;
    int nrows;
    HFTensorRow rows[HF_MAX_ROWS];
    const StTensor** src; // (nrows * L): the tensor of row k, layer l (io rows use l = 0); [QLoRA] a 4-bit row's: its packed codes
    int* src_file;        // (nrows * L)
    const StTensor** qsrc; // [QLoRA] (nrows * L * HF_Q_N): a 4-bit row's quantization state (hf_q_suffix), NULL elsewhere
    int* qsrc_file;
    float dyn[256];        // [QLoRA] the nested code book every 4-bit weight of the checkpoint uses (its .nested_quant_map)
    int dyn_differs;       // [QLoRA] entries of dyn that are not NF4_DYN's (0: ours)
    // bound to our logical layout by hf_bind, in logical order
    HFBound bound[HF_MAX_ROWS];
    int nbound;
    int Vp;
} HFCheckpoint;

static int hf_has_suffix(const char* s, const char* suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

// Is -e's value a Hugging Face checkpoint (a directory, a .safetensors file or an index)?
static int hf_is_checkpoint_path(const char* path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return 1;
    return hf_has_suffix(path, ".safetensors") || hf_has_suffix(path, ".safetensors.index.json");
}

static int hf_exists(const char* path) { struct stat st; return stat(path, &st) == 0; }

// The directory of a checkpoint path into dir: the path itself when it is a directory, else the
// directory its file sits in ("." for a bare name) — where config.json, generation_config.json and the
// tokenizer are.
static void hf_checkpoint_dir(const char* path, char* dir, size_t cap) {
    struct stat st;
    snprintf(dir, cap, "%s", path);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return;
    char* slash = strrchr(dir, '/');
    if (slash) *slash = 0; else snprintf(dir, cap, ".");
}

static void hf_close(HFCheckpoint* ck) {
    for (int i = 0; i < ck->nfiles; i++) st_close(&ck->files[i]);
    free(ck->files);
    free(ck->src);
    free(ck->src_file);
    free(ck->qsrc);
    free(ck->qsrc_file);
    memset(ck, 0, sizeof(*ck));
}

// Drop the pages of bytes [p, p + n) of a mapped file from this process (they stay in the page
// cache): what a rank has read and converted does not stay in its resident memory.
static void hf_drop_pages(const StFile* f, const unsigned char* p, int64_t n) {
    static long page = 0;
    if (!page) page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page, b = ((uintptr_t)p + (uintptr_t)n) / (uintptr_t)page * (uintptr_t)page;
    if (f->map && b > a) madvise((void*)a, b - a, MADV_DONTNEED); // (advice: a failure changes nothing read)
}

// The shards an index names (distinct, in order of first appearance), checked to be plain file
// names in the index's directory. Fills files[] (opened) and returns the index JSON in *idx.
static int hf_open_index(HFCheckpoint* ck, const char* dir, const char* index_path, Json* idx, char** idx_text, char* err, size_t errlen) {
    size_t len;
    if (hf_read_file(index_path, idx_text, &len, 64 << 20, err, errlen)) return -1;
    char jerr[512];
    if (json_parse(idx, *idx_text, len, jerr, sizeof(jerr))) return st_err(err, errlen, "%s: %s", index_path, jerr);
    int wm = json_get(idx, 0, "weight_map");
    if (wm < 0 || idx->nodes[wm].type != JSON_OBJECT) return st_err(err, errlen, "%s: no weight_map object", index_path);
    ck->files = (StFile*)calloc((size_t)idx->nodes[wm].count + 1, sizeof(StFile));
    const char** names = (const char**)calloc((size_t)idx->nodes[wm].count + 1, sizeof(char*));
    int rc = 0;
    for (int ch = idx->nodes[wm].first; ch >= 0 && rc == 0; ch = idx->nodes[ch].next) {
        const JsonNode* nd = &idx->nodes[ch];
        if (nd->type != JSON_STRING || strchr(nd->str, '/') || !nd->str[0] || !strcmp(nd->str, ".."))
            { rc = st_err(err, errlen, "%s: tensor %s: shard must be a file name in the same directory", index_path, nd->key); break; }
        int seen = 0;
        for (int i = 0; i < ck->nfiles; i++) if (!strcmp(names[i], nd->str)) seen = 1;
        if (seen) continue;
        char p[2 * PATH_MAX];
        snprintf(p, sizeof(p), "%s/%.*s", dir, PATH_MAX - 1, nd->str);
        names[ck->nfiles] = nd->str;
        if (!hf_exists(p)) rc = st_err(err, errlen, "%s: tensor %s: the index names the shard %s, which does not exist", index_path, nd->key, p);
        else if (st_open(&ck->files[ck->nfiles++], p, err, errlen)) rc = -1;
    }
    // every tensor the index names is in the shard it names, and every shard tensor is named
    for (int ch = idx->nodes[wm].first; ch >= 0 && rc == 0; ch = idx->nodes[ch].next) {
        const JsonNode* nd = &idx->nodes[ch];
        for (int i = 0; i < ck->nfiles; i++)
            if (!strcmp(names[i], nd->str) && !st_find(&ck->files[i], nd->key))
                rc = st_err(err, errlen, "%s: tensor %s: the index places it in %s, which does not hold it", index_path, nd->key, nd->str);
    }
    for (int i = 0; i < ck->nfiles && rc == 0; i++)
        for (int t = 0; t < ck->files[i].n && rc == 0; t++) {
            int k = json_get(idx, wm, ck->files[i].t[t].name);
            if (k < 0 || strcmp(idx->nodes[k].str, names[i]))
                rc = st_err(err, errlen, "%s: tensor %s: not listed in the index %s under this file", ck->files[i].path, ck->files[i].t[t].name, index_path);
        }
    free(names);
    return rc;
}

// Is `name` a stored buffer that is not a parameter (skipped)?
static int hf_is_buffer(const HFConfig* c, const char* bare) {
    int layer = -1;
    char rest[160];
    if (c->arch == HF_ARCH_GPT2) // the causal-mask buffers of older GPT-2 files
        return sscanf(bare, "h.%d.%150s", &layer, rest) == 2 && (!strcmp(rest, "attn.bias") || !strcmp(rest, "attn.masked_bias"));
    return sscanf(bare, "model.layers.%d.%150s", &layer, rest) == 2 && !strcmp(rest, "self_attn.rotary_emb.inv_freq"); // older Llama conversions
}

static void hf_shape_text(const int64_t* shape, int ndim, char* out, size_t cap) {
    out[0] = 0;
    for (int d = 0; d < ndim; d++) snprintf(out + strlen(out), cap - strlen(out), d ? ", %lld" : "%lld", (long long)shape[d]);
}

// The config's settings that decide which tensors exist, for an error message.
static void hf_settings_text(const HFConfig* c, char* out, size_t cap) {
    if (c->arch == HF_ARCH_GPT2) snprintf(out, cap, "n_layer %d", c->L);
    else snprintf(out, cap, "num_hidden_layers %d, %s, mlp_bias %s, tie_word_embeddings %s%s", c->L,
                  c->arch == HF_ARCH_QWEN2 ? "q/k/v biases (qwen2)" : c->qkv_bias ? "attention_bias true" : "no attention biases",
                  c->mlp_bias ? "true" : "false", c->tied ? "true" : "false",
                  c->qk_norm ? ", q_norm and k_norm (qwen3)" : c->fused ? ", qkv_proj and gate_up_proj (phi3)" : "");
}

// A directory without config.json where an -export-hf was interrupted while it replaced the files
// (fileio.h's zt_commit_export moved config.json aside first): 1 with err saying so.
static int hf_interrupted(const char* dir, char* err, size_t errlen) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof(p), "%s/config.json", dir);
    if (hf_exists(p)) return 0;
    DIR* d = opendir(dir);
    struct dirent* e;
    int cut = 0;
    while (d && (e = readdir(d))) cut |= !strncmp(e->d_name, "config.json.replaced.", 21);
    if (d) closedir(d);
    if (cut) st_err(err, errlen, "%s: no config.json: an -export-hf into this directory was interrupted while it replaced the files "
                    "(the earlier export's are the *.replaced.PID files). HINT: run the export again", dir);
    return cut;
}

// Open a checkpoint (see the top of this file for what `path` may be), read its config and find
// and check every tensor. Returns 0, or -1 with err naming the file and tensor.
static int hf_open(HFCheckpoint* ck, const char* path, char* err, size_t errlen) {
    memset(ck, 0, sizeof(*ck));
    char dir[PATH_MAX], single[PATH_MAX + 64] = "", index[PATH_MAX + 64] = "";
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof(dir), "%s", path);
        snprintf(single, sizeof(single), "%s/model.safetensors", dir);
        snprintf(index, sizeof(index), "%s/model.safetensors.index.json", dir);
        if (hf_interrupted(dir, err, errlen)) return -1;
        if (hf_exists(single)) index[0] = 0;
        else if (hf_exists(index)) single[0] = 0;
        else {
            char bin[PATH_MAX + 64];
            snprintf(bin, sizeof(bin), "%s/pytorch_model.bin", dir);
            if (hf_exists(bin))
                return st_err(err, errlen, "%s holds pytorch_model.bin (a pickle) but no model.safetensors: not supported. HINT: convert it with "
                              "transformers: AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)", dir);
            return st_err(err, errlen, "%s: no model.safetensors or model.safetensors.index.json in this directory", dir);
        }
    } else {
        if (stat(path, &st) != 0) return st_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        hf_checkpoint_dir(path, dir, sizeof(dir));
        if (hf_has_suffix(path, ".index.json")) snprintf(index, sizeof(index), "%s", path);
        else snprintf(single, sizeof(single), "%s", path);
    }
    snprintf(ck->config_path, sizeof(ck->config_path), "%s/config.json", dir);
    if (!hf_exists(ck->config_path)) {
        if (hf_interrupted(dir, err, errlen)) return -1;
        return st_err(err, errlen, "%s: no config.json beside the weights (it gives the architecture and the heads). HINT: download it with the model", dir);
    }
    if (hf_read_config(ck->config_path, &ck->cfg, err, errlen)) return -1;
    Json idx;
    memset(&idx, 0, sizeof(idx));
    char* idx_text = NULL;
    int rc = 0;
    if (single[0]) {
        ck->files = (StFile*)calloc(1, sizeof(StFile));
        ck->nfiles = 1;
        rc = st_open(&ck->files[0], single, err, errlen);
    } else {
        rc = hf_open_index(ck, dir, index, &idx, &idx_text, err, errlen);
    }
    json_free(&idx);
    free(idx_text);
    if (rc) return -1;
    // find every tensor once: GPT-2's with or without the "transformer." prefix
    const HFConfig* c = &ck->cfg;
    int gpt2 = c->arch == HF_ARCH_GPT2;
    ck->nrows = hf_rows(c, ck->rows);
    ck->src = (const StTensor**)calloc((size_t)ck->nrows * c->L, sizeof(StTensor*));
    ck->src_file = (int*)calloc((size_t)ck->nrows * c->L, sizeof(int));
    ck->qsrc = (const StTensor**)calloc((size_t)ck->nrows * c->L * HF_Q_N, sizeof(StTensor*));
    ck->qsrc_file = (int*)calloc((size_t)ck->nrows * c->L * HF_Q_N, sizeof(int));
    char (*want)[96] = (char(*)[96])calloc((size_t)ck->nrows * c->L, 96); // the expected name of each (row, layer) slot ("" : none)
    for (int k = 0; k < ck->nrows; k++)
        for (int l = 0; l < (ck->rows[k].per_layer ? c->L : 1); l++)
            if (ck->rows[k].present) hf_name(&ck->rows[k], l, want[k * c->L + l], 96);
    const StTensor* lm_head = NULL;
    int lm_head_file = 0;
    char settings[256];
    hf_settings_text(c, settings, sizeof(settings));
    for (int fi = 0; fi < ck->nfiles && rc == 0; fi++) {
        const StFile* f = &ck->files[fi];
        for (int t = 0; t < f->n && rc == 0; t++) {
            const char* name = f->t[t].name;
            const char* bare = gpt2 && !strncmp(name, "transformer.", 12) ? name + 12 : name;
            if (hf_is_buffer(c, bare)) continue;
            int slot = -1;
            for (int s = 0; s < ck->nrows * c->L && slot < 0; s++) if (want[s][0] && !strcmp(want[s], bare)) slot = s;
            if (slot < 0 && c->bnb4) { // [QLoRA] a 4-bit weight's state: "<weight>.<suffix>"
                int q = -1;
                for (int s = 0; s < ck->nrows * c->L && slot < 0; s++) {
                    size_t wl = strlen(want[s]);
                    if (!want[s][0] || !hf_row_nf4(c, &ck->rows[s / c->L]) || strncmp(bare, want[s], wl) || bare[wl] != '.') continue;
                    for (int k = 0; k < HF_Q_N && q < 0; k++) if (!strcmp(bare + wl + 1, hf_q_suffix[k])) q = k;
                    if (q < 0) { rc = st_err(err, errlen, "%s: tensor %s: not a part of bitsandbytes' NF4 state of %s (%s.absmax, .quant_map, "
                                             ".nested_absmax, .nested_quant_map, .quant_state.bitsandbytes__nf4)", f->path, name, want[s], want[s]); break; }
                    slot = s;
                }
                if (rc) break;
                if (slot >= 0) {
                    int at = slot * HF_Q_N + q;
                    if (ck->qsrc[at]) { rc = st_err(err, errlen, "%s: tensor %s: stored twice", f->path, name); break; }
                    ck->qsrc[at] = &f->t[t];
                    ck->qsrc_file[at] = fi;
                    continue;
                }
            }
            if (slot < 0 && !strcmp(name, "lm_head.weight") && (gpt2 || c->tied)) { lm_head = &f->t[t]; lm_head_file = fi; continue; }
            if (slot < 0) {
                rc = st_err(err, errlen, "%s: tensor %s is not part of a %s with %s's settings (%s): another architecture?",
                            f->path, name, hf_arch_name(c->arch), ck->config_path, settings);
                break;
            }
            const HFTensorRow* r = &ck->rows[slot / c->L];
            if (ck->src[slot]) { rc = st_err(err, errlen, "%s: tensor %s: stored twice (with and without the transformer. prefix?)", f->path, name); break; }
            const StTensor* s = &f->t[t];
            int want_ndim = r->d1 ? 2 : 1;
            if (hf_row_nf4(c, r)) { // [QLoRA] packed codes: (ceil(n/2) bytes / the storage dtype's size, 1)
                int64_t bytes = (r->d0 * r->d1 + 1) / 2; // (bitsandbytes allocates (n + 1) // (2 size) elements: for a 16- or
                                                         // 32-bit storage, n a multiple of 4 or 8 here, as every real shape is)
                if (strcmp(s->dtype_name, "U8") && strcmp(s->dtype_name, "BF16") && strcmp(s->dtype_name, "F16") && strcmp(s->dtype_name, "F32")) {
                    rc = st_err(err, errlen, "%s: tensor %s: 4-bit codes stored as %s: not uint8, bfloat16, float16 or float32 (bnb_4bit_quant_storage)",
                                f->path, name, s->dtype_name);
                    break;
                }
                if (s->ndim == 2 && s->shape[0] == r->d0 && s->shape[1] == r->d1) {
                    rc = st_err(err, errlen, "%s: tensor %s: (%lld, %lld) in %s, not 4-bit codes: a projection left in 16 bits in a 4-bit checkpoint "
                                "is not supported", f->path, name, (long long)r->d0, (long long)r->d1, s->dtype_name);
                    break;
                }
                if (s->ndim != 2 || s->shape[1] != 1 || s->shape[0] * s->esize != bytes) {
                    char shp[96];
                    hf_shape_text(s->shape, s->ndim, shp, sizeof(shp));
                    rc = st_err(err, errlen, "%s: tensor %s: shape (%s) of %s, but the 4-bit codes of a (%lld, %lld) weight are %lld bytes, (%lld / %d, 1)",
                                f->path, name, shp, s->dtype_name, (long long)r->d0, (long long)r->d1, (long long)bytes, (long long)bytes, s->esize);
                    break;
                }
                ck->src[slot] = s;
                ck->src_file[slot] = fi;
                continue;
            }
            if (s->ndim != want_ndim || s->shape[0] != r->d0 || (r->d1 && s->shape[1] != r->d1)) {
                char shp[96];
                hf_shape_text(s->shape, s->ndim, shp, sizeof(shp));
                if (r->d1) rc = st_err(err, errlen, "%s: tensor %s: shape (%s), but %s says (%lld, %lld)", f->path, name, shp, ck->config_path, (long long)r->d0, (long long)r->d1);
                else rc = st_err(err, errlen, "%s: tensor %s: shape (%s), but %s says (%lld)", f->path, name, shp, ck->config_path, (long long)r->d0);
                break;
            }
            if (s->dtype == ST_OTHER) { rc = st_err(err, errlen, "%s: tensor %s: dtype %s is not supported (F32, F16, BF16)", f->path, name, s->dtype_name); break; }
            ck->src[slot] = s;
            ck->src_file[slot] = fi;
        }
    }
    for (int s = 0; s < ck->nrows * c->L && rc == 0; s++)
        if (want[s][0] && !ck->src[s])
            rc = st_err(err, errlen, gpt2 ? "%s: tensor %s (or transformer.%s) is missing" : "%s: tensor %s is missing%.0s",
                        ck->nfiles == 1 ? ck->files[0].path : index, want[s], want[s]);
    for (int s = 0; s < ck->nrows * c->L && rc == 0; s++) // [QLoRA] every 4-bit weight's state
        for (int q = 0; want[s][0] && hf_row_nf4(c, &ck->rows[s / c->L]) && q < HF_Q_N && rc == 0; q++)
            if (!ck->qsrc[s * HF_Q_N + q])
                rc = st_err(err, errlen, "%s: tensor %s.%s is missing (%s's quantization_config says bitsandbytes 4-bit)",
                            ck->nfiles == 1 ? ck->files[0].path : index, want[s], hf_q_suffix[q], ck->config_path);
    // [QLoRA] the nested code book: bitsandbytes makes it at run time with torch.linspace, whose CPU
    // kernel rounds by its SIMD width (ops/nf4.cuh, NF4_DYN's note), once per process: one map for the
    // whole checkpoint, read here by every rank (each dequantizes every layer), each weight's checked
    // equal to the first; then used as it is (op_nf4_dequant_map), whether or not it is ours
    int first = -1;
    for (int s = 0; s < ck->nrows * c->L && rc == 0; s++) {
        const StTensor* t = ck->qsrc[s * HF_Q_N + HF_Q_NESTED_MAP];
        if (!want[s][0] || !hf_row_nf4(c, &ck->rows[s / c->L]) || !t) continue;
        const StFile* mf = &ck->files[ck->qsrc_file[s * HF_Q_N + HF_Q_NESTED_MAP]];
        if (strcmp(t->dtype_name, "F32") || t->numel != 256) {
            rc = st_err(err, errlen, "%s: tensor %s.nested_quant_map: %lld x %s, not 256 x F32", mf->path, want[s], (long long)t->numel, t->dtype_name);
            break;
        }
        for (int i = 0; i < 256 && rc == 0; i++) {
            float v = st_get(mf, t, i);
            if (first < 0 && !isfinite(v)) rc = st_err(err, errlen, "%s: tensor %s.nested_quant_map: entry %d is %g", mf->path, want[s], i, (double)v);
            else if (first < 0) ck->dyn[i] = v;
            else if (v != ck->dyn[i] && !(v != v && ck->dyn[i] != ck->dyn[i]))
                rc = st_err(err, errlen, "%s: tensor %s.nested_quant_map: entry %d is %.9g, %s's %.9g: a checkpoint whose weights use different "
                            "nested maps is not supported", mf->path, want[s], i, (double)v, want[first], (double)ck->dyn[i]);
        }
        if (first < 0) first = s;
    }
    for (int i = 0; first >= 0 && i < 256; i++) ck->dyn_differs += ck->dyn[i] != NF4_DYN[i];
    free(want);
    if (rc) return -1;
    for (int s = 0; s < ck->nrows * c->L; s++) { // tensors with no counterpart of ours must be zero (Llama's o_proj bias)
        const HFTensorRow* r = &ck->rows[s / c->L];
        if (strcmp(r->ours, "none") || !ck->src[s]) continue;
        const StFile* f = &ck->files[ck->src_file[s]];
        for (int64_t i = 0; i < ck->src[s]->numel; i++)
            if (st_get(f, ck->src[s], i) != 0.0f)
                return st_err(err, errlen, "%s: tensor %s: element %lld is %g: a nonzero o_proj bias is not supported (attention_bias true is read as "
                              "q/k/v biases and a zero o_proj bias; this program's layer has none)", f->path, ck->src[s]->name, (long long)i, st_get(f, ck->src[s], i));
    }
    if (lm_head) { // tied: it must hold the embedding's values (row 0 of either table)
        const StTensor* wte = ck->src[0];
        const StFile* wf = &ck->files[ck->src_file[0]];
        const StFile* lf = &ck->files[lm_head_file];
        const char* untied = gpt2 ? "an untied head is not supported for GPT-2" : "the config ties the head (tie_word_embeddings)";
        if (lm_head->ndim != 2 || lm_head->shape[0] != wte->shape[0] || lm_head->shape[1] != wte->shape[1] || lm_head->dtype == ST_OTHER)
            return st_err(err, errlen, "%s: tensor lm_head.weight: shape or dtype differs from %s: %s", lf->path, wte->name, untied);
        const unsigned char* a = wf->map + wf->data_start + wte->begin;
        const unsigned char* b = lf->map + lf->data_start + lm_head->begin;
        int differ = -1;
        if (lm_head->dtype == wte->dtype) { if (memcmp(a, b, (size_t)(wte->end - wte->begin))) differ = 0; }
        if (differ == 0 || lm_head->dtype != wte->dtype) {
            differ = -1;
            for (int64_t i = 0; i < wte->numel && differ < 0; i++)
                if (st_get(lf, lm_head, i) != st_get(wf, wte, i)) differ = (int)(i < INT_MAX ? i : INT_MAX);
        }
        hf_drop_pages(wf, a, wte->end - wte->begin);
        hf_drop_pages(lf, b, lm_head->end - lm_head->begin);
        if (differ >= 0)
            return st_err(err, errlen, "%s: tensor lm_head.weight differs from %s (element %d): %s", lf->path, wte->name, differ, untied);
    }
    return 0;
}

// The elements of the checkpoint's largest tensor (what a rank may hold twice while loading).
static int64_t hf_largest_tensor(const HFCheckpoint* ck) {
    int64_t most = 0;
    for (int k = 0; k < ck->nrows; k++) if (ck->rows[k].present && hf_row_numel(&ck->rows[k]) > most) most = hf_row_numel(&ck->rows[k]);
    return most;
}

// Bind to our logical layout: for each of our tensors the caller's (name, logical offset, elements
// per layer, per layer); tensors with 0 elements do not exist in this model. Checks that every
// tensor the checkpoint fills is there with the size its rows make (rows V..Vp of the vocabulary
// tensors included), and that every tensor of ours has a source.
static int hf_bind(HFCheckpoint* ck, const HFLlmcTensor* t, int n, int Vp, char* err, size_t errlen) {
    ck->Vp = Vp;
    ck->nbound = 0;
    int covered[HF_MAX_ROWS] = {0};
    for (int i = 0; i < n; i++) {
        if (t[i].n == 0) continue;
        HFBound* b = &ck->bound[ck->nbound];
        memset(b, 0, sizeof(*b));
        b->logical = t[i].logical; b->n = t[i].n; b->per_layer = t[i].per_layer;
        for (int64_t at = 0, more = 1; more;) { // the rows of t[i] in `at` order: each starts where the one before ends
            more = 0;
            for (int k = 0; k < ck->nrows; k++) {
                const HFTensorRow* r = &ck->rows[k];
                if (!r->present || strcmp(r->ours, t[i].name) || r->at != at || covered[k]) continue;
                if (r->per_layer != t[i].per_layer || b->nrows == 4)
                    return st_err(err, errlen, "internal error: %s is %s, the Hugging Face table says otherwise", t[i].name, t[i].per_layer ? "per layer" : "in the io block");
                b->rows[b->nrows++] = k;
                covered[k] = 1;
                at += r->vocab ? (int64_t)Vp * r->d1 : hf_row_numel(r);
                more = 1;
                break;
            }
            if (!more && b->nrows == 0)
                return st_err(err, errlen, "internal error: %s has no Hugging Face tensor in the %s table", t[i].name, hf_arch_name(ck->cfg.arch));
            if (!more && at != t[i].n)
                return st_err(err, errlen, "internal error: %s has %lld elements, its Hugging Face tensors %lld", t[i].name, (long long)t[i].n, (long long)at);
        }
        ck->nbound++;
    }
    for (int k = 0; k < ck->nrows; k++)
        if (ck->rows[k].present && !covered[k] && strcmp(ck->rows[k].ours, "none")) return st_err(err, errlen, "internal error: our layout has no tensor %s for %s", ck->rows[k].ours, ck->rows[k].hf);
    for (int a = 1; a < ck->nbound; a++) // logical order (insertion sort: a dozen entries)
        for (int b = a; b > 0 && ck->bound[b].logical < ck->bound[b - 1].logical; b--) {
            HFBound tmp = ck->bound[b]; ck->bound[b] = ck->bound[b - 1]; ck->bound[b - 1] = tmp;
        }
    return 0;
}

// LogicalFill (zero.h): dst[i] = logical parameter (logical + i), i < len, widened to FP32. Reads
// only the bytes of that range, and drops their pages again.
static void hf_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const HFCheckpoint* ck = (const HFCheckpoint*)ctx;
    const HFConfig* c = &ck->cfg;
    int bi = ck->nbound - 1;
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        while (bi > 0 && ck->bound[bi].logical > li) bi--; // our tensor holding li (logical order)
        while (bi + 1 < ck->nbound && ck->bound[bi + 1].logical <= li) bi++;
        const HFBound* b = &ck->bound[bi];
        int64_t within = li - b->logical;
        int l = (int)(within / b->n);
        int64_t e = within % b->n;
        const HFTensorRow* r = NULL;
        int k = -1;
        int64_t at = 0;
        for (int q = 0; q < b->nrows && !r; q++) { // the row holding element e: rows are consecutive from 0
            const HFTensorRow* rq = &ck->rows[b->rows[q]];
            if (e >= rq->at && e < rq->at + hf_row_numel(rq)) { r = rq; k = b->rows[q]; at = rq->at; }
        }
        if (!r) { // padded vocabulary rows V..Vp: zero
            int64_t run = b->n - e < len - i ? b->n - e : len - i;
            memset(dst + i, 0, sizeof(float) * (size_t)run);
            i += run;
            continue;
        }
        int64_t x0 = e - at, run = hf_row_numel(r) - x0 < len - i ? hf_row_numel(r) - x0 : len - i;
        int slot = k * c->L + (r->per_layer ? l : 0);
        const StTensor* s = ck->src[slot];
        const StFile* f = &ck->files[ck->src_file[slot]];
        if (r->conv1d) {                     // ours (out, in) from Conv1D (in, out) = (d0, d1)
            for (int64_t j = 0; j < run; j++) {
                int64_t x = x0 + j, o = x / r->d0, in = x % r->d0;
                dst[i + j] = st_get(f, s, in * r->d1 + o);
            }
        } else {
            for (int64_t j = 0; j < run; j++) dst[i + j] = st_get(f, s, x0 + j);
            hf_drop_pages(f, f->map + f->data_start + s->begin + x0 * s->esize, run * s->esize);
        }
        i += run;
    }
}

// [QLoRA] Row k's place among the 4-bit rows of its tensor of ours, by first element: the part it fills
// (wqkv: q_proj 0, k_proj 1, v_proj 2; model.h's nf4_describe_parts orders them the same way).
static int hf_row_part(const HFCheckpoint* ck, int k) {
    int part = 0;
    for (int q = 0; q < ck->nrows; q++)
        part += ck->rows[q].present && hf_row_nf4(&ck->cfg, &ck->rows[q]) && !strcmp(ck->rows[q].ours, ck->rows[k].ours) && ck->rows[q].at < ck->rows[k].at;
    return part;
}

// [QLoRA] Part `part` (in row order: q_proj, k_proj, v_proj of wqkv; gate_proj, up_proj of wgu) of our
// tensor `ours`, layer `layer`, from a bitsandbytes 4-bit checkpoint: its n weights' storage as
// ops/nf4.cuh lays it out (st: nf4_part(n).bytes), copied from the file's codes, absmax, nested
// absmax and the quant state's nested_offset, after checking them against the config (shape,
// blocksize 64, nested_blocksize 256, dtypes) and NF4's code book against ours (NF4_CODE, exactly). Returns 1 when filled, 0 when the checkpoint holds no 4-bit part there (a BF16
// checkpoint), -1 with err naming the tensor. The nested map is the checkpoint's (ck->dyn, checked by
// hf_open), not the part's: dequantize with it.
static int hf_nf4_part(const HFCheckpoint* ck, const char* ours, int layer, int part, unsigned char* st, int64_t n, char* err, size_t errlen) {
    const HFConfig* c = &ck->cfg;
    if (!c->bnb4) return 0;
    int k = -1, seen = 0;
    for (int r = 0; r < ck->nrows; r++) { // the part-th 4-bit row of ours
        if (!ck->rows[r].present || strcmp(ck->rows[r].ours, ours) || !hf_row_nf4(c, &ck->rows[r])) continue;
        if (hf_row_part(ck, r) == part) k = r;
        seen++;
    }
    if (k < 0) return st_err(err, errlen, "internal error: %s has %d 4-bit part(s) in the checkpoint, not part %d", ours, seen, part);
    const HFTensorRow* r = &ck->rows[k];
    int slot = k * c->L + layer;
    char name[128];
    hf_name(r, layer, name, sizeof(name));
    if (r->d0 * r->d1 != n) return st_err(err, errlen, "internal error: %s holds %lld weights, the part %lld", name, (long long)(r->d0 * r->d1), (long long)n);
    const StTensor* T[HF_Q_N];
    const StFile* F[HF_Q_N];
    for (int q = 0; q < HF_Q_N; q++) { T[q] = ck->qsrc[slot * HF_Q_N + q]; F[q] = &ck->files[ck->qsrc_file[slot * HF_Q_N + q]]; }
    // the quant state: a JSON object stored as U8 bytes
    const StTensor* qs = T[HF_Q_STATE];
    if (strcmp(qs->dtype_name, "U8") || qs->ndim != 1)
        return st_err(err, errlen, "%s: tensor %s.%s: %s, not the U8 bytes of a JSON object", F[HF_Q_STATE]->path, name, hf_q_suffix[HF_Q_STATE], qs->dtype_name);
    Json j;
    char jerr[256] = "";
    if (json_parse(&j, (const char*)(F[HF_Q_STATE]->map + F[HF_Q_STATE]->data_start + qs->begin), (size_t)(qs->end - qs->begin), jerr, sizeof(jerr))) {
        json_free(&j);
        return st_err(err, errlen, "%s: tensor %s.%s: not JSON (%s)", F[HF_Q_STATE]->path, name, hf_q_suffix[HF_Q_STATE], jerr);
    }
    if (j.nodes[0].type != JSON_OBJECT) {
        json_free(&j);
        return st_err(err, errlen, "%s: tensor %s.%s: JSON, but not an object", F[HF_Q_STATE]->path, name, hf_q_suffix[HF_Q_STATE]);
    }
    int64_t blocksize = -1, nested_bs = -1, d0 = -1, d1 = -1;
    double offset = NAN;
    const char *qtype = "", *ndtype = "";
    int x;
    if ((x = json_get(&j, 0, "quant_type")) >= 0 && j.nodes[x].type == JSON_STRING) qtype = j.nodes[x].str;
    if ((x = json_get(&j, 0, "blocksize")) >= 0 && j.nodes[x].is_int) blocksize = j.nodes[x].i;
    if ((x = json_get(&j, 0, "nested_blocksize")) >= 0 && j.nodes[x].is_int) nested_bs = j.nodes[x].i;
    if ((x = json_get(&j, 0, "nested_dtype")) >= 0 && j.nodes[x].type == JSON_STRING) ndtype = j.nodes[x].str;
    if ((x = json_get(&j, 0, "nested_offset")) >= 0 && j.nodes[x].type == JSON_NUMBER) offset = j.nodes[x].num;
    if ((x = json_get(&j, 0, "shape")) >= 0 && j.nodes[x].type == JSON_ARRAY && j.nodes[x].count == 2) {
        int e0 = j.nodes[x].first, e1 = j.nodes[e0].next;
        if (j.nodes[e0].is_int && j.nodes[e1].is_int) { d0 = j.nodes[e0].i; d1 = j.nodes[e1].i; }
    }
    char why[200] = "";
    if (strcmp(qtype, "nf4")) snprintf(why, sizeof(why), "quant_type \"%.40s\", not nf4", qtype);
    else if (blocksize != 64) snprintf(why, sizeof(why), "blocksize %lld, not 64 (QLoRA's)", (long long)blocksize);
    else if (nested_bs != 256) snprintf(why, sizeof(why), "nested_blocksize %lld, not 256", (long long)nested_bs);
    else if (strcmp(ndtype, "float32")) snprintf(why, sizeof(why), "nested_dtype \"%.40s\", not float32", ndtype);
    else if (!isfinite(offset)) snprintf(why, sizeof(why), "no finite nested_offset (no double quantization?)");
    else if (d0 != r->d0 || d1 != r->d1) snprintf(why, sizeof(why), "shape [%lld, %lld], but config.json gives (%lld, %lld)", (long long)d0, (long long)d1, (long long)r->d0, (long long)r->d1);
    json_free(&j);
    if (why[0]) return st_err(err, errlen, "%s: tensor %s.%s: %s", F[HF_Q_STATE]->path, name, hf_q_suffix[HF_Q_STATE], why);
    Nf4Part P = nf4_part(n);
    struct { int q; const char* dt; int64_t numel; } want[4] = {
        {HF_Q_ABSMAX, "U8", P.nb}, {HF_Q_MAP, "F32", 16}, {HF_Q_NESTED, "F32", P.nn}, {HF_Q_NESTED_MAP, "F32", 256}};
    for (int i = 0; i < 4; i++) {
        const StTensor* t = T[want[i].q];
        if (strcmp(t->dtype_name, want[i].dt) || t->numel != want[i].numel)
            return st_err(err, errlen, "%s: tensor %s.%s: %lld x %s, but a (%lld, %lld) weight's is %lld x %s", F[want[i].q]->path, name, hf_q_suffix[want[i].q],
                          (long long)t->numel, t->dtype_name, (long long)r->d0, (long long)r->d1, (long long)want[i].numel, want[i].dt);
    }
    for (int i = 0; i < 16; i++)
        if (st_get(F[HF_Q_MAP], T[HF_Q_MAP], i) != NF4_CODE[i])
            return st_err(err, errlen, "%s: tensor %s.quant_map: entry %d is %.9g, NF4's is %.9g: not bitsandbytes' NF4 code book", F[HF_Q_MAP]->path, name, i,
                          (double)st_get(F[HF_Q_MAP], T[HF_Q_MAP], i), (double)NF4_CODE[i]);
    memset(st, 0, (size_t)P.bytes);
    float off = (float)offset; // (the JSON holds the float32 offset's decimal: it comes back exactly)
    memcpy(st + P.o_offset, &off, 4);
    for (int64_t i = 0; i < P.nn; i++) { float v = st_get(F[HF_Q_NESTED], T[HF_Q_NESTED], i); memcpy(st + P.o_nested + 4 * i, &v, 4); }
    const unsigned char* qa = F[HF_Q_ABSMAX]->map + F[HF_Q_ABSMAX]->data_start + T[HF_Q_ABSMAX]->begin;
    memcpy(st + P.o_qabs, qa, (size_t)P.nb);
    const StTensor* cs = ck->src[slot];
    const StFile* cf = &ck->files[ck->src_file[slot]];
    memcpy(st + P.o_codes, cf->map + cf->data_start + cs->begin, (size_t)((n + 1) / 2)); // (any storage dtype: the same bytes)
    hf_drop_pages(cf, cf->map + cf->data_start + cs->begin, (n + 1) / 2);
    return 1;
}

// ----------------------------------------------------------------------------
// Writing a checkpoint: hf_writer_open (the shard plan and every header), hf_writer_put for each
// of our tensors of each layer, hf_writer_commit (fsync, then the whole set replaced all or nothing:
// zt_commit_export). Everything goes to temporary names first; on any error nothing is left behind
// and an earlier export in the directory is whole.

#define HF_SHARD_BYTES 5000000000ll // transformers' save_pretrained(max_shard_size="5GB"): 5 * 10^9 bytes, as huggingface_hub reads it

// The shard limit: HF_SHARD_BYTES, or ZT_HF_SHARD_BYTES from the environment (a test hook, so that
// tests shard kilobyte models; not a user setting).
static int64_t hf_shard_bytes(void) {
    const char* e = getenv("ZT_HF_SHARD_BYTES");
    long long v = e && *e ? atoll(e) : 0;
    return v > 0 ? (int64_t)v : HF_SHARD_BYTES;
}

// The architecture an export writes: the source checkpoint's (src, may be NULL) when it can express
// the model, else Qwen3 for q/k norms (only Qwen3 has them, and Qwen3 always), else Qwen2 for q/k/v
// biases without MLP biases (and head_dim = C / NH), else Llama (q/k/v biases there: attention_bias
// true with an o_proj bias of zeros). Copies the source's
// sliding window and token ids. c holds the shape; returns 0 (every model of the family has one).
static int hf_export_arch(HFConfig* c, const HFConfig* src, char* err, size_t errlen) {
    if (c->arch == HF_ARCH_GPT2) return 0;
    int q = c->qk_norm, f = c->fused;
    int can[HF_NARCH] = {0,
                         !q && !f,                                                                  // llama (q/k/v biases: attention_bias with a zero o_proj bias)
                         !q && !f && !c->qkv_bias && !c->mlp_bias,                                  // mistral
                         !q && !f && c->qkv_bias && !c->mlp_bias && (int64_t)c->HD * c->NH == c->C, // qwen2 (4.47: head_dim = hidden / heads)
                         q && !f && !c->mlp_bias,                                                   // qwen3 (q/k/v biases as llama's)
                         f && !q && !c->qkv_bias && !c->mlp_bias && (int64_t)c->HD * c->NH == c->C && // phi3 (4.47: no biases, head_dim =
                             c->rope_type == HF_ROPE_DEFAULT};                                            //  hidden / heads, no rope_scaling here)
    c->o_bias = 0;
    if (src && src->arch != HF_ARCH_GPT2 && can[src->arch]) {
        c->arch = src->arch;
        c->o_bias = (c->arch == HF_ARCH_LLAMA || c->arch == HF_ARCH_QWEN3) && c->qkv_bias;
        c->window = src->window;
        c->max_window_layers = src->max_window_layers;
        c->orig_maxT = src->orig_maxT;
        memcpy(c->bos, src->bos, sizeof(c->bos));
        memcpy(c->eos, src->eos, sizeof(c->eos));
        memcpy(c->pad, src->pad, sizeof(c->pad));
        return 0;
    }
    c->window = 0;
    c->max_window_layers = 28;
    if (f) { // (Phi-3's names come from a Phi-3 checkpoint, -e DIR: its config says phi3)
        if (!can[HF_ARCH_PHI3])
            return st_err(err, errlen, "-export-hf: Phi-3's fused names with biases, q/k norms, head_dim != hidden / heads or RoPE scaling: "
                          "Phi3ForCausalLM has none of them (here)");
        c->arch = HF_ARCH_PHI3;
        c->orig_maxT = c->maxT;
        return 0;
    }
    if (q) {
        if (!can[HF_ARCH_QWEN3]) return st_err(err, errlen, "-export-hf: q/k norms with MLP biases: no Hugging Face architecture has both");
        c->arch = HF_ARCH_QWEN3;
        c->o_bias = c->qkv_bias;
        return 0;
    }
    if (c->qkv_bias && can[HF_ARCH_QWEN2]) { c->arch = HF_ARCH_QWEN2; return 0; }
    c->arch = HF_ARCH_LLAMA; // (with q/k/v biases: attention_bias true and an o_proj bias of zeros)
    c->o_bias = c->qkv_bias;
    (void)err; (void)errlen;
    return 0;
}

// A float as Python's json writes it (shortest text that reads back, "500000.0" not "5e+05").
static void hf_float(double v, char* out, size_t cap) {
    int p = 1;
    for (; p < 17; p++) { snprintf(out, cap, "%.*g", p, v); if (strtod(out, NULL) == v) break; }
    if (strchr(out, 'e') && fabs(v) >= 1e-4 && fabs(v) < 1e16) { // Python uses exponents below 1e-4 and from 1e16 only
        for (int d = 0; d < 20; d++) { snprintf(out, cap, "%.*f", d, v); if (strtod(out, NULL) == v) break; }
    }
    if (!strpbrk(out, ".eEni")) snprintf(out + strlen(out), cap - strlen(out), ".0");
}

// generation_config.json as transformers writes it for a model without one (GenerationConfig.
// from_model_config, then save_pretrained: keys sorted, two-space indent, a list one id a line):
// config.json's bos/eos/pad_token_id. malloc'd text, NULL when out of memory.
static char* hf_generation_text(const HFConfig* c, size_t* len) {
    const char* keys[3] = {"bos_token_id", "eos_token_id", "pad_token_id"};
    const char* vals[3] = {c->bos, c->eos, c->pad};
    if (c->arch == HF_ARCH_GPT2) vals[0] = vals[1] = c->V > 50256 ? "50256" : "", vals[2] = ""; // (hf_config_text's GPT-2 ids)
    size_t cap = 512 + strlen(c->bos) * 4 + strlen(c->eos) * 4 + strlen(c->pad) * 4, n = 0;
    char* t = (char*)malloc(cap);
    if (!t) return NULL;
    n += (size_t)snprintf(t + n, cap - n, "{\n  \"_from_model_config\": true,\n");
    for (int k = 0; k < 3; k++) {
        if (!vals[k][0] || !strcmp(vals[k], "null")) continue;
        if (vals[k][0] != '[') { n += (size_t)snprintf(t + n, cap - n, "  \"%s\": %s,\n", keys[k], vals[k]); continue; }
        n += (size_t)snprintf(t + n, cap - n, "  \"%s\": [", keys[k]);
        const char* p = vals[k] + 1;
        for (int first = 1; *p && *p != ']'; first = 0) { // "[1, 2]" -> one id a line
            char* end;
            long long v = strtoll(p, &end, 10);
            if (end == p) break;
            n += (size_t)snprintf(t + n, cap - n, "%s\n    %lld", first ? "" : ",", v);
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
        n += (size_t)snprintf(t + n, cap - n, "\n  ],\n");
    }
    n += (size_t)snprintf(t + n, cap - n, "  \"transformers_version\": \"4.47.1\"\n}\n");
    *len = n;
    return t;
}

static int hf_cmp_line(const void* a, const void* b) { return strcmp(*(const char* const*)a, *(const char* const*)b); }

// config.json as transformers writes it for the architecture (keys sorted, two-space indent).
// Returns its length in out, or -1 when it does not fit.
static int hf_config_text(const HFConfig* c, StDtype dtype, char* out, size_t cap) {
    const char* tdt = dtype == ST_F32 ? "float32" : dtype == ST_F16 ? "float16" : "bfloat16";
    if (c->arch == HF_ARCH_GPT2) {
        char tokens[96] = "";
        if (c->V > 50256) snprintf(tokens, sizeof(tokens), "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n");
        int n = snprintf(out, cap,
            "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"vocab_size\": %d,\n  \"n_positions\": %d,\n"
            "  \"n_ctx\": %d,\n  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
            "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n  \"initializer_range\": 0.02,\n"
            "  \"resid_pdrop\": 0.1,\n  \"embd_pdrop\": 0.1,\n  \"attn_pdrop\": 0.1,\n  \"scale_attn_weights\": true,\n"
            "  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n%s  \"torch_dtype\": \"%s\"\n}\n",
            c->V, c->maxT, c->maxT, c->C, c->L, c->NH, tokens, tdt);
        return n < 0 || (size_t)n >= cap ? -1 : n;
    }
    char lines[40][384], f1[40], f2[40], f3[40], f4[40];
    int n = 0;
#define LINE(...) snprintf(lines[n++], sizeof(lines[0]), __VA_ARGS__)
    LINE("\"architectures\": [\n    \"%s\"\n  ]", hf_archs[c->arch].cls);
    LINE("\"model_type\": \"%s\"", hf_archs[c->arch].model_type);
    LINE("\"attention_dropout\": 0.0");
    LINE("\"hidden_act\": \"silu\"");
    LINE("\"hidden_size\": %d", c->C);
    LINE("\"initializer_range\": 0.02");
    LINE("\"intermediate_size\": %d", c->F);
    LINE("\"max_position_embeddings\": %d", c->maxT);
    LINE("\"num_attention_heads\": %d", c->NH);
    LINE("\"num_hidden_layers\": %d", c->L);
    LINE("\"num_key_value_heads\": %d", c->NKV);
    hf_float(c->norm_eps, f1, sizeof(f1));
    LINE("\"rms_norm_eps\": %s", f1);
    hf_float(c->rope_theta, f1, sizeof(f1));
    LINE("\"rope_theta\": %s", f1);
    hf_float(c->rope_factor, f1, sizeof(f1));
    hf_float(c->rope_low_freq, f2, sizeof(f2));
    hf_float(c->rope_high_freq, f3, sizeof(f3));
    snprintf(f4, sizeof(f4), "%d", c->rope_orig_maxT);
    if (c->rope_type == HF_ROPE_LINEAR) LINE("\"rope_scaling\": {\n    \"factor\": %s,\n    \"rope_type\": \"linear\"\n  }", f1);
    else if (c->rope_type == HF_ROPE_LLAMA3)
        LINE("\"rope_scaling\": {\n    \"factor\": %s,\n    \"high_freq_factor\": %s,\n    \"low_freq_factor\": %s,\n"
             "    \"original_max_position_embeddings\": %s,\n    \"rope_type\": \"llama3\"\n  }", f1, f3, f2, f4);
    else LINE("\"rope_scaling\": null");
    LINE("\"tie_word_embeddings\": %s", c->tied ? "true" : "false");
    LINE("\"torch_dtype\": \"%s\"", tdt);
    LINE("\"use_cache\": true");
    LINE("\"vocab_size\": %d", c->V);
    if (c->arch == HF_ARCH_LLAMA) {
        LINE("\"attention_bias\": %s", c->o_bias ? "true" : "false");
        LINE("\"head_dim\": %d", c->HD);
        LINE("\"mlp_bias\": %s", c->mlp_bias ? "true" : "false");
        LINE("\"pretraining_tp\": 1");
    } else if (c->arch == HF_ARCH_MISTRAL) {
        LINE("\"head_dim\": %d", c->HD);
        if (c->window) LINE("\"sliding_window\": %d", c->window); else LINE("\"sliding_window\": null");
    } else if (c->arch == HF_ARCH_PHI3) { // (Phi3Config's keys as 4.47.1 writes them; the dropouts 0: we train without)
        LINE("\"embd_pdrop\": 0.0");
        LINE("\"resid_pdrop\": 0.0");
        LINE("\"original_max_position_embeddings\": %d", c->orig_maxT);
        if (c->window) LINE("\"sliding_window\": %d", c->window); else LINE("\"sliding_window\": null");
    } else if (c->arch == HF_ARCH_QWEN3) { // (Qwen3-0.6B's config.json: these keys; no transformers_version written here)
        LINE("\"attention_bias\": %s", c->o_bias ? "true" : "false");
        LINE("\"head_dim\": %d", c->HD);
        LINE("\"max_window_layers\": %d", c->max_window_layers);
        LINE("\"use_sliding_window\": %s", c->window ? "true" : "false");
        if (c->window) LINE("\"sliding_window\": %d", c->window); else LINE("\"sliding_window\": null");
    } else {
        LINE("\"max_window_layers\": %d", c->max_window_layers);
        LINE("\"use_sliding_window\": %s", c->window ? "true" : "false");
        if (c->window) LINE("\"sliding_window\": %d", c->window); else LINE("\"sliding_window\": null");
    }
    if (c->bos[0]) LINE("\"bos_token_id\": %s", c->bos);
    if (c->eos[0]) LINE("\"eos_token_id\": %s", c->eos);
    if (c->pad[0]) LINE("\"pad_token_id\": %s", c->pad);
#undef LINE
    const char* sorted[40];
    for (int i = 0; i < n; i++) sorted[i] = lines[i];
    qsort(sorted, (size_t)n, sizeof(char*), hf_cmp_line);
    size_t len = (size_t)snprintf(out, cap, "{\n");
    for (int i = 0; i < n && len < cap; i++) len += (size_t)snprintf(out + len, cap - len, "  %s%s\n", sorted[i], i + 1 < n ? "," : "");
    if (len < cap) len += (size_t)snprintf(out + len, cap - len, "}\n");
    return len >= cap ? -1 : (int)len;
}

typedef struct {
    HFConfig cfg;
    StDtype dtype;
    char dir[PATH_MAX];
    int nrows;
    HFTensorRow rows[HF_MAX_ROWS];
    int nfiles;           // 1: model.safetensors; more: model-0000k-of-0000n.safetensors + the index
    int* fd;              // (nfiles)
    char (*path)[PATH_MAX + 64]; // (nfiles) final names
    char (*tmp)[PATH_MAX + 96];  // (nfiles) temporary names
    int64_t* data_start;  // (nfiles) first data byte
    int* file_of;         // (nrows * L) the shard of each (row, layer)
    int64_t* off;         // (nrows * L) its byte offset in that shard's data
    char* done;           // (nrows * L)
    int64_t total;        // bytes of tensor data (the index's metadata.total_size)
    int leftovers;        // files of interrupted exports removed or restored when the writer opened (said by the caller)
    int restored;         // 1: a commit had been cut: the earlier export was restored first (fileio.h)
} HFWriter;

static int hf_write_all(int fd, const void* buf, size_t n, off_t at) {
    const unsigned char* p = (const unsigned char*)buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w; n -= (size_t)w; at += w;
    }
    return 0;
}

static void hf_writer_abort(HFWriter* w) {
    for (int i = 0; i < w->nfiles; i++)
        if (w->fd && w->fd[i] >= 0) { close(w->fd[i]); unlink(w->tmp[i]); }
    free(w->fd); free(w->path); free(w->tmp); free(w->data_start);
    free(w->file_of); free(w->off); free(w->done);
    memset(w, 0, sizeof(*w));
}

typedef struct { int slot; int64_t bytes; int shard; } HFPlanEntry;

static int hf_cmp_spec(const void* a, const void* b) { return strcmp(((const StSpec*)a)->name, ((const StSpec*)b)->name); }

// Open the writer for config c (its arch decided: hf_export_arch) into dir: the tensors in
// transformers' state_dict order, cut into shards of at most hf_shard_bytes() as huggingface_hub's
// split_torch_state_dict_into_shards cuts them (a tensor larger than the limit gets a shard of its
// own), each shard's header in name order as the safetensors library writes it.
static int hf_writer_open(HFWriter* w, const char* dir, const HFConfig* c, StDtype dtype, char* err, size_t errlen) {
    memset(w, 0, sizeof(*w));
    w->cfg = *c;
    c = &w->cfg;
    w->dtype = dtype;
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return st_err(err, errlen, "%s: cannot create the directory: %s", dir, strerror(errno));
    static const char* const ours[] = {"model", "generation_config.json", "config.json"}; // an interrupted export's files (fileio.h)
    w->leftovers = zt_export_leftovers(dir, ours, 3, "config.json", &w->restored);
    w->nrows = hf_rows(c, w->rows);
    int S = w->nrows * c->L, es = st_esize(dtype);
    w->file_of = (int*)calloc((size_t)S, sizeof(int));
    w->off = (int64_t*)calloc((size_t)S, sizeof(int64_t));
    w->done = (char*)calloc((size_t)S, 1);
    HFPlanEntry* plan = (HFPlanEntry*)calloc((size_t)S, sizeof(HFPlanEntry));
    int first_layer_row = 0;
    while (first_layer_row < w->nrows && !w->rows[first_layer_row].per_layer) first_layer_row++;
    int n = 0;
    for (int pass = 0; pass < 3; pass++) // io rows before the layers, the layers, io rows after
        for (int l = 0; l < (pass == 1 ? c->L : 1); l++)
            for (int k = 0; k < w->nrows; k++) {
                const HFTensorRow* r = &w->rows[k];
                int in_pass = r->per_layer ? 1 : k < first_layer_row ? 0 : 2;
                if (in_pass != pass || !r->present) continue;
                plan[n].slot = k * c->L + l;
                plan[n].bytes = hf_row_numel(r) * es;
                n++;
            }
    for (int s = 0; s < S; s++) // slots that do not exist (io rows at l > 0, absent rows) count as done
        if ((!w->rows[s / c->L].per_layer && s % c->L > 0) || !w->rows[s / c->L].present) w->done[s] = 1;
    // the shard plan: shard numbers in the order huggingface_hub appends them
    int64_t limit = hf_shard_bytes(), cur_bytes = 0;
    int nshards = 0;
    int* pending = (int*)calloc((size_t)n + 1, sizeof(int));
    int npending = 0;
    for (int i = 0; i < n; i++) {
        w->total += plan[i].bytes;
        if (plan[i].bytes > limit) { plan[i].shard = nshards++; continue; } // its own shard, appended now
        if (npending > 0 && cur_bytes + plan[i].bytes > limit) {           // the open shard is full: appended now
            for (int q = 0; q < npending; q++) plan[pending[q]].shard = nshards;
            nshards++;
            npending = 0;
            cur_bytes = 0;
        }
        pending[npending++] = i;
        cur_bytes += plan[i].bytes;
    }
    if (npending > 0) { for (int q = 0; q < npending; q++) plan[pending[q]].shard = nshards; nshards++; }
    free(pending);
    w->nfiles = nshards;
    w->fd = (int*)malloc(sizeof(int) * (size_t)nshards);
    w->path = (char(*)[PATH_MAX + 64])calloc((size_t)nshards, sizeof(*w->path));
    w->tmp = (char(*)[PATH_MAX + 96])calloc((size_t)nshards, sizeof(*w->tmp));
    w->data_start = (int64_t*)calloc((size_t)nshards, sizeof(int64_t));
    for (int f = 0; f < nshards; f++) w->fd[f] = -1;
    StSpec* spec = (StSpec*)calloc((size_t)n + 1, sizeof(StSpec));
    int* slot_of = (int*)calloc((size_t)n + 1, sizeof(int));
    int64_t* offs = (int64_t*)calloc((size_t)n + 1, sizeof(int64_t));
    int rc = 0;
    for (int f = 0; f < nshards && rc == 0; f++) {
        if (nshards == 1) snprintf(w->path[f], sizeof(w->path[f]), "%s/model.safetensors", dir);
        else snprintf(w->path[f], sizeof(w->path[f]), "%s/model-%05d-of-%05d.safetensors", dir, f + 1, nshards);
        snprintf(w->tmp[f], sizeof(w->tmp[f]), "%s.tmp.%d", w->path[f], (int)getpid());
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (plan[i].shard != f) continue;
            const HFTensorRow* r = &w->rows[plan[i].slot / c->L];
            hf_name(r, plan[i].slot % c->L, spec[m].name, sizeof(spec[m].name));
            spec[m].dtype = dtype;
            spec[m].ndim = r->d1 ? 2 : 1;
            spec[m].shape[0] = r->d0;
            spec[m].shape[1] = r->d1;
            m++;
        }
        qsort(spec, (size_t)m, sizeof(StSpec), hf_cmp_spec);
        for (int q = 0; q < m; q++) { // the slot of each sorted name
            for (int i = 0; i < n; i++) {
                if (plan[i].shard != f) continue;
                char nm[128];
                hf_name(&w->rows[plan[i].slot / c->L], plan[i].slot % c->L, nm, sizeof(nm));
                if (!strcmp(nm, spec[q].name)) { slot_of[q] = plan[i].slot; break; }
            }
        }
        int64_t hlen;
        char* header = st_make_header(spec, m, offs, &hlen);
        for (int q = 0; q < m; q++) { w->file_of[slot_of[q]] = f; w->off[slot_of[q]] = offs[q]; }
        w->data_start[f] = hlen;
        w->fd[f] = open(w->tmp[f], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (w->fd[f] < 0) rc = st_err(err, errlen, "%s: cannot create: %s", w->tmp[f], strerror(errno));
        else if (hf_write_all(w->fd[f], header, (size_t)hlen, 0)) rc = st_err(err, errlen, "%s: write failed: %s", w->tmp[f], strerror(errno));
        free(header);
    }
    free(spec); free(slot_of); free(offs); free(plan);
    if (rc) hf_writer_abort(w);
    return rc;
}

static inline uint16_t hf_bf16_round(float f) { // nearest even, NaN kept (as device.cuh's f32_to_bf16)
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// Our tensor `ours` (model.h's name) of `layer` (0 for io tensors): v holds it in our shape (a
// vocabulary tensor with its Vp rows: only the first V are written; the fused wqkv / wgu as their
// q, k, v / gate, up tensors). Converted and written in pieces of at most 4M elements.
static int hf_writer_put(HFWriter* w, const char* ours, int layer, const float* v, char* err, size_t errlen) {
    const int64_t CHUNK = 1 << 22;
    int es = st_esize(w->dtype), found = 0;
    unsigned char* buf = NULL;
    for (int k = 0; k < w->nrows; k++) {
        const HFTensorRow* r = &w->rows[k];
        if (strcmp(r->ours, ours) || !r->present) continue;
        found = 1;
        int slot = k * w->cfg.L + (r->per_layer ? layer : 0);
        int64_t numel = hf_row_numel(r);
        if (!buf) buf = (unsigned char*)malloc((size_t)CHUNK * es);
        if (!buf) return st_err(err, errlen, "out of host memory writing %s", r->hf);
        for (int64_t x0 = 0; x0 < numel; x0 += CHUNK) {
            int64_t m = numel - x0 < CHUNK ? numel - x0 : CHUNK;
            for (int64_t j = 0; j < m; j++) { // x: the HF element; Conv1D (in, out) from ours (out, in)
                int64_t x = x0 + j;
                float val = r->conv1d ? v[(x % r->d1) * r->d0 + x / r->d1] : v[r->at + x];
                if (w->dtype == ST_F32) memcpy(buf + 4 * j, &val, 4);
                else { uint16_t h = w->dtype == ST_F16 ? f32_to_f16(val) : hf_bf16_round(val); memcpy(buf + 2 * j, &h, 2); }
            }
            int f = w->file_of[slot];
            if (hf_write_all(w->fd[f], buf, (size_t)(m * es), (off_t)(w->data_start[f] + w->off[slot] + x0 * es))) {
                free(buf);
                return st_err(err, errlen, "%s: write failed: %s", w->tmp[f], strerror(errno));
            }
        }
        w->done[slot] = 1;
    }
    free(buf);
    if (!found) return st_err(err, errlen, "internal error: no Hugging Face tensor for %s", ours);
    return 0;
}

static int hf_write_small(const char* path, const char* text, size_t n, int* fd_out, char* err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || hf_write_all(fd, text, n, 0)) {
        int rc = st_err(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0) { close(fd); unlink(path); }
        return rc;
    }
    *fd_out = fd;
    return 0;
}

// The index as transformers writes it: {"metadata": {"total_size": bytes}, "weight_map": {name: shard}},
// keys sorted, two-space indent. malloc'd; NULL when out of memory.
static char* hf_index_text(const HFWriter* w, size_t* len_out) {
    const HFConfig* c = &w->cfg;
    int S = w->nrows * c->L, n = 0;
    char** lines = (char**)calloc((size_t)S + 1, sizeof(char*));
    size_t cap = 256;
    for (int s = 0; s < S; s++) {
        const HFTensorRow* r = &w->rows[s / c->L];
        if (!r->present || (!r->per_layer && s % c->L > 0)) continue;
        char nm[128];
        hf_name(r, s % c->L, nm, sizeof(nm));
        const char* file = strrchr(w->path[w->file_of[s]], '/');
        file = file ? file + 1 : w->path[w->file_of[s]];
        size_t need = strlen(nm) + strlen(file) + 16;
        lines[n] = (char*)malloc(need);
        if (!lines[n]) break;
        snprintf(lines[n], need, "\"%s\": \"%s\"", nm, file);
        cap += need + 8;
        n++;
    }
    qsort(lines, (size_t)n, sizeof(char*), hf_cmp_line);
    char* out = (char*)malloc(cap);
    size_t len = 0;
    if (out) {
        len += (size_t)snprintf(out + len, cap - len, "{\n  \"metadata\": {\n    \"total_size\": %lld\n  },\n  \"weight_map\": {\n", (long long)w->total);
        for (int i = 0; i < n; i++) len += (size_t)snprintf(out + len, cap - len, "    %s%s\n", lines[i], i + 1 < n ? "," : "");
        len += (size_t)snprintf(out + len, cap - len, "  }\n}\n");
    }
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
    *len_out = len;
    return out;
}

// fsync and close a new file (fd): 0, or -1 with err set.
static int hf_close_fd(int fd, const char* tmp, char* err, size_t errlen) {
    if (fsync(fd) != 0) { int e = errno; close(fd); return st_err(err, errlen, "%s: fsync failed: %s", tmp, strerror(e)); }
    if (close(fd) != 0) return st_err(err, errlen, "%s: close failed: %s", tmp, strerror(errno));
    return 0;
}

// The weights of an earlier export in the other layout (model.safetensors beside a new index, or an
// old index and shards beside a new single file, or shards of another count) would be read instead
// of, or mixed with, the new ones: their paths, for zt_commit_export to move aside. malloc'd strings.
#define HF_MAX_STALE 100000 // (5 GB shards: half an exabyte of an earlier export's weights)
static int hf_stale_paths(const HFWriter* w, char** out, int cap) {
    int n = 0;
    char p[PATH_MAX + 260]; // the directory, '/', a d_name (255 at most)
    snprintf(p, sizeof(p), "%s/%s", w->dir, w->nfiles == 1 ? "model.safetensors.index.json" : "model.safetensors");
    struct stat st;
    if (lstat(p, &st) == 0 && n < cap && (out[n] = strdup(p)) != NULL) n++;
    DIR* d = opendir(w->dir);
    if (!d) return n;
    struct dirent* e;
    while ((e = readdir(d)) && n < cap) {
        int a, b, used = 0;
        if (sscanf(e->d_name, "model-%5d-of-%5d.safetensors%n", &a, &b, &used) != 2 || e->d_name[used] != 0 || strlen(e->d_name) != 32) continue;
        if (w->nfiles > 1 && b == w->nfiles) continue; // one of ours: replaced as a file of the set
        snprintf(p, sizeof(p), "%s/%s", w->dir, e->d_name);
        if ((out[n] = strdup(p)) != NULL) n++; // (out of memory: not moved aside; loaders prefer the new set's names anyway)
    }
    closedir(d);
    return n;
}

// Every shard fsynced, the index and config.json written, then the whole set committed all or
// nothing (zt_commit_export, fileio.h: config.json, the key every loader reads first, moved aside
// first and renamed in last). On any error nothing new is left and the earlier export is whole.
static int hf_writer_commit(HFWriter* w, char* err, size_t errlen) {
    const HFConfig* c = &w->cfg;
    for (int s = 0; s < w->nrows * c->L; s++) { // tensors with no counterpart of ours: zeros (Llama's o_proj bias)
        const HFTensorRow* r = &w->rows[s / c->L];
        if (strcmp(r->ours, "none") || w->done[s]) continue;
        size_t n = (size_t)(hf_row_numel(r) * st_esize(w->dtype));
        unsigned char* zero = (unsigned char*)calloc(n, 1);
        int f = w->file_of[s];
        int bad = !zero || hf_write_all(w->fd[f], zero, n, (off_t)(w->data_start[f] + w->off[s]));
        free(zero);
        if (bad) { int rc = st_err(err, errlen, "%s: write failed: %s", w->tmp[f], strerror(errno)); hf_writer_abort(w); return rc; }
        w->done[s] = 1;
    }
    for (int s = 0; s < w->nrows * c->L; s++)
        if (!w->done[s]) {
            int rc = st_err(err, errlen, "internal error: tensor %s of layer %d never written", w->rows[s / c->L].hf, s % c->L);
            hf_writer_abort(w);
            return rc;
        }
    char cfg[8192], cpath[PATH_MAX + 32], ctmp[PATH_MAX + 64], ipath[PATH_MAX + 64], itmp[PATH_MAX + 96], gpath[PATH_MAX + 64], gtmp[PATH_MAX + 96];
    int n = hf_config_text(c, w->dtype, cfg, sizeof(cfg));
    if (n < 0) { int rc = st_err(err, errlen, "internal error: config.json longer than %zu bytes", sizeof(cfg)); hf_writer_abort(w); return rc; }
    snprintf(cpath, sizeof(cpath), "%s/config.json", w->dir);
    snprintf(ctmp, sizeof(ctmp), "%s.tmp.%d", cpath, (int)getpid());
    snprintf(ipath, sizeof(ipath), "%s/model.safetensors.index.json", w->dir);
    snprintf(itmp, sizeof(itmp), "%s.tmp.%d", ipath, (int)getpid());
    snprintf(gpath, sizeof(gpath), "%s/generation_config.json", w->dir);
    snprintf(gtmp, sizeof(gtmp), "%s.tmp.%d", gpath, (int)getpid());
    int cfd = -1, ifd = -1, gfd = -1, rc = 0;
    for (int f = 0; f < w->nfiles && rc == 0; f++) { // every shard on disk first
        int fd = w->fd[f];
        w->fd[f] = -1;
        if (hf_close_fd(fd, w->tmp[f], err, errlen)) rc = -1;
    }
    if (rc == 0 && hf_write_small(ctmp, cfg, (size_t)n, &cfd, err, errlen)) rc = -1;
    if (rc == 0 && cfd >= 0) { rc = hf_close_fd(cfd, ctmp, err, errlen); cfd = -1; }
    if (rc == 0 && w->nfiles > 1) {
        size_t ilen;
        char* itext = hf_index_text(w, &ilen);
        if (!itext) rc = st_err(err, errlen, "out of host memory for %s", ipath);
        else if (hf_write_small(itmp, itext, ilen, &ifd, err, errlen)) rc = -1;
        free(itext);
        if (rc == 0) { rc = hf_close_fd(ifd, itmp, err, errlen); ifd = -1; }
    }
    if (rc == 0) { // generation_config.json: the source checkpoint's (its eos list, its sampling defaults), else written from the ids
        char* gtext = NULL;
        size_t glen = 0;
        if (c->gen_src[0]) rc = hf_read_file(c->gen_src, &gtext, &glen, 1 << 20, err, errlen);
        else if (!(gtext = hf_generation_text(c, &glen))) rc = st_err(err, errlen, "out of host memory for %s", gpath);
        if (rc == 0 && hf_write_small(gtmp, gtext, glen, &gfd, err, errlen)) rc = -1;
        free(gtext);
        if (rc == 0) { rc = hf_close_fd(gfd, gtmp, err, errlen); gfd = -1; }
    }
    if (rc == 0) { // the set: the shards, the index, config.json last (the key)
        ZtCommitFile* files = (ZtCommitFile*)calloc((size_t)w->nfiles + 3, sizeof(ZtCommitFile));
        char** stale = (char**)calloc(HF_MAX_STALE, sizeof(char*));
        int nf = 0, ns = files && stale ? hf_stale_paths(w, stale, HF_MAX_STALE) : 0;
        if (!files || !stale) rc = st_err(err, errlen, "out of host memory (an export's %d files)", w->nfiles);
        else {
            for (int f = 0; f < w->nfiles; f++) files[nf++] = (ZtCommitFile){w->tmp[f], w->path[f]};
            if (w->nfiles > 1) files[nf++] = (ZtCommitFile){itmp, ipath};
            files[nf++] = (ZtCommitFile){gtmp, gpath};
            files[nf++] = (ZtCommitFile){ctmp, cpath};
            rc = zt_commit_export(w->dir, files, nf, (const char* const*)stale, ns, err, errlen);
            for (int f = 0; f < w->nfiles; f++) w->tmp[f][0] = 0; // (committed or removed by the commit)
            ctmp[0] = itmp[0] = gtmp[0] = 0;
        }
        for (int k = 0; k < ns; k++) free(stale[k]);
        free(stale);
        free(files);
    }
    if (rc) { // before the commit: what was written goes
        for (int f = 0; f < w->nfiles; f++) if (w->tmp[f][0]) unlink(w->tmp[f]);
        if (ctmp[0]) unlink(ctmp);
        if (itmp[0] && w->nfiles > 1) unlink(itmp);
        if (gtmp[0]) unlink(gtmp);
    }
    hf_writer_abort(w); // frees (every fd is closed or -1)
    return rc;
}

#endif // ZT_HF_H
