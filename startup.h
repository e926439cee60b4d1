// startup.h — everything before the model is built that needs no trainer: "auto" defaults per device
// (resolve_defaults), the device (pick_device), the model's shape (-e descriptors, files, overrides:
// model_config), the flag checks (check_flags), threads (setup_threads), the ranks' agreement
// (ranks_agree, data_hash), -tokenize (run_tokenize), the output directory, the process's memory
// (proc_status_bytes, peak_rss_bytes, peak_window_start, gather_memory), and what the run prints at start-up
// (print_setup: the settings table, the model, batch and per-rank memory tables). train_gpt.cu's trainer_setup calls these in order.
//
// May call: flags.h, plan.h (parse_size, the GPU tables), acts.h (acts_bytes), model.h, zero.h (Comm,
// Launch, comm_*), checkpoint.h (model_file_open), hf.h, tokenizer.h, prompts.h, dataloader.h.
// Knows nothing of the trainer's types: it takes Flags, the Comm, the Launch, the model's
// description and ZeRO state.
#ifndef ZT_STARTUP_H
#define ZT_STARTUP_H
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include "device.cuh"         // defines: Device, g_device, die_user, printf0, num_threads, g_mem_bytes, PRECISION_NAME
#include "flags.h"            // defines: Flags, flags_convert, flags_print_table, FLAG_SHOW
#include "plan.h"             // defines: parse_size, gpu_peak_index
#include "acts.h"             // defines: acts_bytes
#include "model.h"            // defines: GPTConfig, ModelDesc, model_describe
#include "lora.h"             // defines: lora_dequant_elems ([QLoRA] the memory table)
#include "zero.h"             // defines: Zero, ZeroSizes, Comm, Launch, comm_sum_doubles, comm_allgather_u64
#include "checkpoint.h"       // defines: ModelFile, model_file_open
#include "hf.h"               // defines: HFCheckpoint, hf_is_checkpoint_path, hf_open, hf_close
#include "dataloader.h"       // defines: DataLoader
#include "tokenizer.h"        // defines: Tokenizer, tokenizer_init, tokenizer_load_merges, tokenize_file_to_shards_ex
#include "prompts.h"          // defines: tokenize_prompts_to_shards
#include "ops/attention.cuh"  // defines: ATT_MAX_HS

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
    const char* ev = getenv("ZT_VERBOSE"); // (the test suite and dev/ scripts that read the full start-up set it to 1)
    AUTO(verbose, ev && *ev ? ev : "0", ev && *ev ? ev : "0");
#undef AUTO
    if (!strcmp(f->device_str, "auto")) snprintf(f->device_str, sizeof(f->device_str), "%s", cpu ? "cpu" : "cuda");
    flags_convert(f);
}

// Which device: -device, or a GPU when one is present. -plan may plan for cuda without a GPU (or
// without CUDA in the build): it allocates nothing, and sizes come from -gpu-mem and -gpu. When
// -device auto takes the CPU, *auto_cpu says why in a few words (the settings table's -device row):
// on a machine without NVIDIA device files that is all it says, and the CUDA runtime never starts.
static Device pick_device(const char* want, int plan, const char** auto_cpu) {
    *auto_cpu = NULL;
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
#ifdef __CUDACC__
        if (!gpu_device_files_present())
            die_user("-device cuda: no NVIDIA GPU on this machine (none of /dev/nvidiactl, /dev/nvidia0, /dev/dxg exists). HINT: use -device cpu");
#endif
        if (gpus == 0) die_user("-device cuda: no GPU found (cudaGetDeviceCount). HINT: use -device cpu");
        return DEV_CUDA;
    }
    if (!strcmp(want, "cpu")) return DEV_CPU;
    if (gpus == 0 && why) printf0("note: -device auto takes the CPU: the CUDA runtime cannot use the GPUs: %s\n", why);
#ifdef __CUDACC__
    if (gpus == 0) *auto_cpu = why ? "the CUDA runtime cannot use the GPUs" : gpu_device_files_present() ? "no GPU found" : "no NVIDIA GPU here";
#else
    *auto_cpu = "this build has no CUDA";
#endif
    return gpus > 0 ? DEV_CUDA : DEV_CPU;
}

// The llm.c model descriptors: -e dN gives depth N with llm.c's width and heads; "tiny" is our
// CPU default (a few million parameters, most of them the embedding).
static const struct { const char* name; int L, C, NH; } g_gpt2_descriptors[] = {
    {"tiny", 4, 128, 4},  {"d6", 6, 384, 6},     {"d12", 12, 768, 12}, {"d24", 24, 1024, 16},
    {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}, {"d60", 60, 1920, 30}, {"d72", 72, 2880, 30},
    {"d84", 84, 3456, 36},
};

// The Llama family's descriptors: shapes only (no weights), for runs from scratch and for -plan.
// A row is a config.json's fields; `source` says where the shape comes from.
typedef struct {
    const char* name;
    int L, C, NH, NKV, HD, F, V, maxT; // num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads,
                                       // head_dim, intermediate_size, vocab_size, max_position_embeddings
    int tied, qkv_bias, mlp_bias;      // tie_word_embeddings, attention_bias (Qwen2: q/k/v biases), mlp_bias
    float norm_eps;                    // rms_norm_eps
    int rope_type;                     // ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3
    double rope_theta, rope_factor, rope_low_freq, rope_high_freq; // rope_theta, rope_scaling's factor, low/high_freq_factor
    int rope_orig_maxT;                // rope_scaling's original_max_position_embeddings
    int qk_norm;                       // Qwen3's q_norm / k_norm (model_type qwen3)
    int fused_names;                   // Phi-3's qkv_proj / gate_up_proj (model_type phi3)
    const char* source;
} LlamaDescriptor;

static const LlamaDescriptor g_llama_descriptors[] = {
    // CPU-sized, with grouped-query attention (2 query heads per K/V head), an untied head and the
    // GPT-2 vocabulary (the KJV shards are GPT-2 ids): tests and a default-sized run
    {"llama-tiny", 4, 128, 4, 2, 32, 352, 50257, 256, 0, 0, 0, 1e-5f, ROPE_DEFAULT, 10000.0, 0, 0, 0, 0, 0, 0, "zerotrain's test shape"},
    // its twin through every optional path: Qwen2's q/k/v biases, MLP biases, a tied head, 4 query
    // heads per K/V head, head_dim 24 (NH * HD = 192, not C), Llama 3.2's RoPE (theta 500000, llama3
    // scaling: factor 32, low 1, high 4, original 8192) and eps 1e-6
    {"llama-tiny-tied", 4, 128, 8, 2, 24, 344, 50257, 256, 1, 1, 1, 1e-6f, ROPE_LLAMA3, 500000.0, 32.0, 1.0, 4.0, 8192, 0, 0, "zerotrain's test shape"},
    // Real models, shapes only (-plan, runs from scratch; their weights load from a checkpoint
    // directory instead): every field is the model's published config.json, from the public copy
    // named in `source` (docs/sizing.md: each source, its commit and the parameter count it gives).
    // mlc-llm: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py (the config.json files as dicts);
    // maxtext: AI-Hypercomputer/maxtext src/maxtext/checkpoint_conversion/utils/hf_model_configs.py.
    // Llama 3.1's config (Meta-Llama-3-8B/70B have the same shapes, 8192 positions and no rope_scaling)
    {"llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 0, 0, 0, 1e-5f, ROPE_LLAMA3, 500000.0, 8.0, 1.0, 4.0, 8192,
     0, 0, "Llama-3.1-8B config.json: maxtext llama31_8b_config, mlc-llm llama3_1_8b"},
    {"llama3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072, 0, 0, 0, 1e-5f, ROPE_LLAMA3, 500000.0, 8.0, 1.0, 4.0, 8192,
     0, 0, "Llama-3.1-70B config.json: maxtext llama31_70b_config, mlc-llm llama3_1_70b"},
    {"llama3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1, 0, 0, 1e-5f, ROPE_LLAMA3, 500000.0, 32.0, 1.0, 4.0, 8192,
     0, 0, "Llama-3.2-1B config.json: MatthewGoldsberry/LLM-Projects Llama-3.2-1B/config.json, mlc-llm llama3_2_1b"},
    {"llama3.2-3b", 28, 3072, 24, 8, 128, 8192, 128256, 131072, 1, 0, 0, 1e-5f, ROPE_LLAMA3, 500000.0, 32.0, 1.0, 4.0, 8192,
     0, 0, "Llama-3.2-3B: torchtune llama3_2_3b (Llama 3.2's RoPE scaling and tied head as its 1B)"},
    // Qwen2 has q/k/v biases whatever the config says (transformers' Qwen2Attention); use_sliding_window false
    {"qwen2.5-0.5b", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1, 1, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     0, 0, "Qwen2.5-0.5B config.json: mlc-llm qwen2_0_5b (Qwen2-0.5B's, the same in every field here)"},
    {"qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 32768, 0, 1, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     0, 0, "Qwen2.5-7B config.json: maxtext qwen25_7b_config"},
    {"smollm2-135m", 30, 576, 9, 3, 64, 1536, 49152, 8192, 1, 0, 0, 1e-5f, ROPE_DEFAULT, 100000.0, 0, 0, 0, 0,
     0, 0, "SmolLM2-135M config.json: mlc-llm smollm2_135m"},
    // maxT 4096, not its 32768 positions: its sliding window is 4096 and we run full attention, the
    // same only for T <= 4096
    {"mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, 4096, 0, 0, 0, 1e-5f, ROPE_DEFAULT, 10000.0, 0, 0, 0, 0,
     0, 0, "Mistral-7B-v0.1 config.json: mlc-llm mistral_7b (sliding_window 4096)"},
    // Qwen3: Qwen2 without q/k/v biases, with an RMSNorm over every q and k head before RoPE (q_norm,
    // k_norm) and an explicit head_dim (0.6B: 16 x 128 = 2048 query columns, twice its width)
    {"qwen3-tiny", 4, 128, 4, 2, 48, 352, 50257, 256, 1, 0, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     1, 0, "zerotrain's test shape (Qwen3's: q/k norms, NH * HD = 192, not C; tied head)"},
    {"qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1, 0, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     1, 0, "Qwen3-0.6B config.json: mlc-llm qwen3_0.6b, maxtext qwen3_0_6b_config"},
    {"qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 40960, 0, 0, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     1, 0, "Qwen3-8B config.json: maxtext qwen3_8b_config"},
    {"qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, 40960, 0, 0, 0, 1e-6f, ROPE_DEFAULT, 1000000.0, 0, 0, 0, 0,
     1, 0, "Qwen3-32B config.json: maxtext qwen3_32b_config"},
    // Phi-3: the Llama family under other names (qkv_proj, gate_up_proj fused). maxT 2047, not its
    // 4096 positions: its sliding window is 2047 and we run full attention, the same only for T <= 2047
    {"phi-3-mini-4k", 32, 3072, 32, 32, 96, 8192, 32064, 2047, 0, 0, 0, 1e-5f, ROPE_DEFAULT, 10000.0, 0, 0, 0, 0, 0, 1,
     "Phi-3-mini-4k-instruct config.json (transformers_version 4.40.2) as public code copies it; mlc-llm phi-3_5 (the same shape)"},
};

static void config_from_llama_descriptor(const LlamaDescriptor* d, GPTConfig* c) {
    memset(c, 0, sizeof(*c));
    c->family = FAMILY_LLAMA;
    c->L = d->L; c->C = d->C; c->NH = d->NH; c->NKV = d->NKV; c->HD = d->HD; c->F = d->F; c->V = d->V; c->maxT = d->maxT;
    c->tied = d->tied; c->qkv_bias = d->qkv_bias; c->mlp_bias = d->mlp_bias; c->norm_eps = d->norm_eps;
    c->rope_type = d->rope_type; c->rope_theta = d->rope_theta; c->rope_factor = d->rope_factor;
    c->rope_low_freq = d->rope_low_freq; c->rope_high_freq = d->rope_high_freq; c->rope_orig_maxT = d->rope_orig_maxT;
    c->qk_norm = d->qk_norm; c->fused_names = d->fused_names;
}

// A Hugging Face config.json (hf.h) as our config: GPT-2's five sizes, or the Llama family's fields.
static void config_from_hf(const HFConfig* h, GPTConfig* c) {
    memset(c, 0, sizeof(*c));
    c->L = h->L; c->C = h->C; c->NH = h->NH; c->V = h->V; c->maxT = h->maxT;
    if (h->arch == HF_ARCH_GPT2) return; // FAMILY_GPT2: the other fields stay 0
    c->family = FAMILY_LLAMA;
    c->NKV = h->NKV; c->HD = h->HD; c->F = h->F; c->tied = h->tied; c->qkv_bias = h->qkv_bias; c->mlp_bias = h->mlp_bias;
    c->norm_eps = (float)h->norm_eps; // (transformers adds it to an FP32 variance: the same float)
    c->rope_type = h->rope_type == HF_ROPE_LINEAR ? ROPE_LINEAR : h->rope_type == HF_ROPE_LLAMA3 ? ROPE_LLAMA3 : ROPE_DEFAULT;
    c->rope_theta = h->rope_theta; c->rope_factor = h->rope_factor;
    c->rope_low_freq = h->rope_low_freq; c->rope_high_freq = h->rope_high_freq; c->rope_orig_maxT = h->rope_orig_maxT;
    c->qk_norm = h->qk_norm; c->fused_names = h->fused;
}

// The reverse, for -export-hf: our config as a Hugging Face one (the architecture still to choose:
// hf_export_arch).
static HFConfig hf_from_config(const GPTConfig* c) {
    if (c->family == FAMILY_GPT2) return hf_gpt2_config(c->L, c->C, c->NH, c->V, c->maxT);
    HFConfig h;
    memset(&h, 0, sizeof(h));
    h.L = c->L; h.C = c->C; h.NH = c->NH; h.V = c->V; h.maxT = c->maxT;
    h.arch = HF_ARCH_LLAMA;
    h.NKV = c->NKV; h.HD = c->HD; h.F = c->F; h.tied = c->tied; h.qkv_bias = c->qkv_bias; h.mlp_bias = c->mlp_bias;
    h.qk_norm = c->qk_norm; h.fused = c->fused_names;
    char eps[32]; // the shortest decimal of the float (1e-05, not 9.99999974737875e-06)
    for (int p = 1; p <= 9; p++) { snprintf(eps, sizeof(eps), "%.*g", p, (double)c->norm_eps); if ((float)strtod(eps, NULL) == c->norm_eps) break; }
    h.norm_eps = strtod(eps, NULL);
    h.rope_type = c->rope_type == ROPE_LINEAR ? HF_ROPE_LINEAR : c->rope_type == ROPE_LLAMA3 ? HF_ROPE_LLAMA3 : HF_ROPE_DEFAULT;
    h.rope_theta = c->rope_theta; h.rope_factor = c->rope_type == ROPE_DEFAULT ? 1.0 : c->rope_factor;
    h.rope_low_freq = c->rope_low_freq; h.rope_high_freq = c->rope_high_freq; h.rope_orig_maxT = c->rope_orig_maxT;
    h.max_window_layers = 28;
    return h;
}

// What -export-hf writes for config c: hf_from_config, the architecture (and the sliding window,
// token ids) of -e's config.json when -e is a Hugging Face checkpoint that can hold the model
// (hf_export_arch). 0, or -1 with err.
static int hf_export_config(const Flags* f, const GPTConfig* c, HFConfig* out, char* err, size_t errlen) {
    *out = hf_from_config(c);
    HFConfig src;
    int have_src = 0;
    char dir[PATH_MAX] = "", path[PATH_MAX + 32]; // -e's directory, when -e is a Hugging Face checkpoint
    struct stat st;
    if (hf_is_checkpoint_path(f->model)) hf_checkpoint_dir(f->model, dir, sizeof(dir));
    if (c->family != FAMILY_GPT2 && dir[0]) {
        snprintf(path, sizeof(path), "%s/config.json", dir);
        have_src = hf_read_config(path, &src, err, errlen) == 0;
    }
    if (hf_export_arch(out, have_src ? &src : NULL, err, errlen)) return -1;
    snprintf(path, sizeof(path), "%s/generation_config.json", dir); // its eos list and sampling defaults go with the export
    if (dir[0] && stat(path, &st) == 0 && snprintf(out->gen_src, sizeof(out->gen_src), "%s", path) >= (int)sizeof(out->gen_src))
        out->gen_src[0] = 0;  // (a path longer than any: not copied)
    char tbuf[PATH_MAX + 32]; // no source config: GPT-2's tokenizer (llm.c's file) gives <|endoftext|> = 50256, as GPT-2's export says
    const char* tname = tokenizer_for_model(f->tokenizer, TOKENIZER_DEFAULT_PATH, f->model, tbuf, sizeof(tbuf));
    if (c->family != FAMILY_GPT2 && !have_src && c->V > 50256 && !strcmp(tname, TOKENIZER_DEFAULT_PATH)) {
        snprintf(out->bos, sizeof(out->bos), "50256");
        snprintf(out->eos, sizeof(out->eos), "50256");
    } else if (c->family != FAMILY_GPT2 && !have_src && tokenizer_is_hf(tname)) { // a tokenizer.json: the BOS and EOS its export names
        Tokenizer t;
        char terr[1024];
        if (tokenizer_init(&t, tname, terr, sizeof(terr)) == 0) { // (a bad one: the export's tokenizer warning says why)
            int bos, eos;
            tokenizer_special_ids(&t, &bos, &eos);
            if (bos < 0) bos = eos; // no BOS (Qwen2): its config.json names the EOS (else LlamaConfig's default, id 1, would stand)
            if (bos >= 0 && bos < c->V) snprintf(out->bos, sizeof(out->bos), "%d", bos);
            if (eos >= 0 && eos < c->V) snprintf(out->eos, sizeof(out->eos), "%d", eos);
            tokenizer_free(&t);
        }
    }
    return 0;
}

static int model_from_descriptor(const char* s, GPTConfig* c) {
    for (size_t i = 0; i < sizeof(g_gpt2_descriptors) / sizeof(g_gpt2_descriptors[0]); i++)
        if (!strcmp(s, g_gpt2_descriptors[i].name)) {
            memset(c, 0, sizeof(*c)); // FAMILY_GPT2
            c->L = g_gpt2_descriptors[i].L; c->C = g_gpt2_descriptors[i].C; c->NH = g_gpt2_descriptors[i].NH;
            c->V = 50257; c->maxT = !strcmp(s, "tiny") ? 256 : 1024;
            return 0;
        }
    for (size_t i = 0; i < sizeof(g_llama_descriptors) / sizeof(g_llama_descriptors[0]); i++)
        if (!strcmp(s, g_llama_descriptors[i].name)) {
            config_from_llama_descriptor(&g_llama_descriptors[i], c);
            return 0;
        }
    return -1;
}

// The descriptors' names, for a message: "tiny, d6, ..., llama-tiny, ...".
static const char* descriptor_names(void) {
    static char names[1024];
    size_t n = 0;
    names[0] = 0;
    for (size_t i = 0; i < sizeof(g_gpt2_descriptors) / sizeof(g_gpt2_descriptors[0]); i++)
        n += snprintf(names + n, sizeof(names) - n, "%s%s", n ? ", " : "", g_gpt2_descriptors[i].name);
    for (size_t i = 0; i < sizeof(g_llama_descriptors) / sizeof(g_llama_descriptors[0]) && n < sizeof(names); i++)
        n += snprintf(names + n, sizeof(names) - n, ", %s", g_llama_descriptors[i].name);
    return names;
}

// Parameters of a config in floating point (a model file's header is data: C^2 * L can overflow
// 64 bits), for the bound below.
static double model_params_approx(const GPTConfig* c) {
    if (c->family == FAMILY_GPT2)
        return ((double)c->Vp + c->maxT) * c->C + (double)c->L * (12.0 * c->C * c->C + 13.0 * c->C);
    double C = c->C, F = c->F, QKV = ((double)c->NH + 2.0 * c->NKV) * c->HD, ATT = (double)c->NH * c->HD;
    double layer = QKV * C + C * ATT + 3.0 * C * F + 2.0 * C + (c->qkv_bias ? QKV : 0) + (c->mlp_bias ? 2.0 * F + C : 0) + (c->qk_norm ? 2.0 * c->HD : 0);
    return (double)c->Vp * C * (c->tied ? 1 : 2) + C + (double)c->L * layer;
}

// The largest model sizes accepted: far beyond any GPU today, small enough that every element
// count and byte offset fits in 64 bits and every per-tensor row count in int.
#define MODEL_MAX_L 4096
#define MODEL_MAX_C 65536
#define MODEL_MAX_T (1 << 20)
#define MODEL_MAX_V (1 << 24)
#define MODEL_MAX_PARAMS 1e13
#define GEN_MAX_TOKENS 1000000

// The Llama family's fields (a descriptor's or a config.json's, after the override flags): exit 2
// naming the field, or the flag that set it.
static void llama_config_check(const Flags* f, const GPTConfig* c) {
    const char* m = f->model;
    if (c->NKV < 1 || c->NKV > c->NH)
        die_user("-e %s: num_key_value_heads %d must be between 1 and num_attention_heads %d%s", m, c->NKV, c->NH, f->heads ? " (set by -heads)" : "");
    if (c->NH % c->NKV != 0)
        die_user("-e %s: num_attention_heads %d is not a multiple of num_key_value_heads %d (grouped-query attention shares each K/V head "
                 "among NH / NKV query heads)%s", m, c->NH, c->NKV, f->heads ? ". HINT: -heads must be a multiple of it" : "");
    if (c->HD < 2 || c->HD % 2 != 0) die_user("-e %s: head_dim %d must be even (RoPE rotates pairs of channels)", m, c->HD);
    if (c->HD > ATT_MAX_HS) die_user("-e %s: head_dim %d is above %d, the most the attention kernels support", m, c->HD, ATT_MAX_HS);
    if (c->F < 1 || c->F > MODEL_MAX_C * 8) die_user("-e %s: intermediate_size %d must be between 1 and %d", m, c->F, MODEL_MAX_C * 8);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps)) die_user("-e %s: rms_norm_eps %g must be positive", m, (double)c->norm_eps);
    if (!(c->rope_theta > 0.0) || !isfinite(c->rope_theta)) die_user("-e %s: rope_theta %g must be positive", m, c->rope_theta);
    if (c->rope_type != ROPE_DEFAULT && c->rope_type != ROPE_LINEAR && c->rope_type != ROPE_LLAMA3)
        die_user("-e %s: rope type %d is not default, linear or llama3", m, c->rope_type);
    if (c->rope_type != ROPE_DEFAULT && !(c->rope_factor > 0.0 && isfinite(c->rope_factor)))
        die_user("-e %s: rope_scaling's factor %g must be positive", m, c->rope_factor);
    if (c->rope_type == ROPE_LLAMA3) {
        if (!(c->rope_low_freq > 0.0) || !(c->rope_high_freq > c->rope_low_freq) || !isfinite(c->rope_high_freq))
            die_user("-e %s: rope_scaling's low_freq_factor %g and high_freq_factor %g must be positive, high above low", m, c->rope_low_freq, c->rope_high_freq);
        if (c->rope_orig_maxT < 1) die_user("-e %s: rope_scaling's original_max_position_embeddings %d must be positive", m, c->rope_orig_maxT);
    }
    if ((int64_t)c->NH * c->HD > 8 * (int64_t)MODEL_MAX_C) die_user("-e %s: num_attention_heads x head_dim = %lld is too large", m, (long long)c->NH * c->HD);
}

// The model's shape: -e (descriptor or file) and the override flags; everything checked.
static void model_config(const Flags* f, GPTConfig* c, int* from_file) {
    memset(c, 0, sizeof(*c));
    *from_file = 0;
    if (model_from_descriptor(f->model, c) != 0) {
        struct stat st;
        if (stat(f->model, &st) != 0)
            die_user("-e %s: neither a model descriptor (%s) nor a readable file: %s", f->model, descriptor_names(), strerror(errno));
        if (hf_is_checkpoint_path(f->model)) { // a Hugging Face GPT-2, Llama, Mistral or Qwen2 (hf.h)
            HFCheckpoint ck;
            char err[2048];
            if (hf_open(&ck, f->model, err, sizeof(err))) die_user("-e %s", err);
            if (hf_check_run(&ck.cfg, f->T, ck.config_path, err, sizeof(err))) die_user("-e %s", err);
            if (ck.cfg.bnb4 && (f->lora <= 0 || strcmp(f->lora_quant, "nf4"))) // [QLoRA] a 4-bit base stays 4-bit and frozen
                die_user("-e %s: a bitsandbytes 4-bit checkpoint (%s: quantization_config) is a frozen 4-bit base: train adapters on it. "
                         "HINT: -lora r -lora-quant nf4", f->model, ck.config_path);
            config_from_hf(&ck.cfg, c);
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
    if (c->family == FAMILY_LLAMA) llama_config_check(f, c);
    double params = model_params_approx(c);
    if (params > MODEL_MAX_PARAMS)
        die_user("model: %.3g parameters (L %d, C %d) is above %.3g, the most this program supports. HINT: check -layers / -channels", params, c->L, c->C, MODEL_MAX_PARAMS);
    if (c->family != FAMILY_GPT2) return; // (the checks below are GPT-2's: head size C / NH)
    const char* said = *from_file == 2 ? "its config.json's n_embd / n_head" : "its header's C / NH"; // (a file's shape takes no override flags)
    if (c->C % c->NH != 0 && *from_file)
        die_user("-e %s: %s, %d / %d, is not a whole number: not a GPT-2 this program can train (a corrupt or foreign file?)", f->model, said, c->C, c->NH);
    if (c->C % c->NH != 0) die_user("model: C = %d is not divisible by NH = %d. HINT: pick -channels a multiple of -heads", c->C, c->NH);
    if (c->C / c->NH > ATT_MAX_HS && *from_file)
        die_user("-e %s: %s, %d / %d, gives a head size above %d, the most the attention kernels support", f->model, said, c->C, c->NH, ATT_MAX_HS);
    if (c->C / c->NH > ATT_MAX_HS) die_user("model: head size C/NH = %d is above %d. HINT: use more -heads", c->C / c->NH, ATT_MAX_HS);
}

// [LoRA] What LoRA does not do yet: the llm.c export of the merged model. Exit 2 naming the flag;
// -lora-base's words, and sharded only where ZeRO-3 shards. A checkpoint holds the adapters' state
// and the base's identity, never the base (-save-model is 0; another value given is refused).
// (-offload moves the adapters' state like any trainable block's; -export-hf writes the merged model.)
static void check_lora_flags(Flags* f, const GPTConfig* c) {
    if (!c->lora_r && f->lora_export[0]) die_user("flag -lora-export %s: needs -lora r (no adapters to write)", f->lora_export);
    if (!c->lora_r && f->lora_init[0]) die_user("flag -lora-init %s: needs -lora r (the adapter's rank)", f->lora_init);
    if (strcmp(f->lora_base, "auto") && strcmp(f->lora_base, "sharded") && strcmp(f->lora_base, "replicated"))
        die_user("flag -lora-base: '%s' is not sharded, replicated or auto", f->lora_base);
    if (!c->lora_r && strcmp(f->lora_base, "auto")) die_user("flag -lora-base %s: needs -lora r (no frozen base without adapters)", f->lora_base);
    if (!strcmp(f->lora_base, "sharded") && f->zero_stage >= 0 && f->zero_stage <= 2)
        die_user("flag -lora-base sharded: only ZeRO-3 shards parameters, and this run has -z %d (its ranks hold the whole base). HINT: -z 3, or -z auto", f->zero_stage);
    if (c->lora_r && !strcmp(f->lora_base, "replicated") && strcmp(f->offload_params, "none"))
        die_user("flag -offload-params %s: with -lora-base replicated every device holds the whole frozen base and only the "
                 "adapters are sharded: there is no base shard to offload. HINT: -lora-base sharded", f->offload_params);
    if (!c->lora_r) return;
    if (f->export_path[0]) die_user("flag -export: not yet with -lora (llm.c's export of a LoRA run is not built yet; -lora-export writes the adapters, -export-hf the merged model; see docs/lora.md)");
    // a checkpoint of a LoRA run holds the adapters' state and the base's identity, not the base again
    if (f->save_model_set && strcmp(f->save_model, "0"))
        die_user("flag -save-model %s: a checkpoint of a LoRA run holds the adapters' state, not the base again (the base is -e %s). "
                 "HINT: leave -save-model out (or 0); -lora-export DIR writes the adapters", f->save_model, f->model);
    if (strcmp(f->save_model, "0")) {
        snprintf(f->save_model, sizeof(f->save_model), "0");
        FLAG_SHOW(f, save_model, "0"); // (the run's record keeps this value; docs/lora.md says why)
    }
}

// The flags a model family decides. llm.c's model files hold GPT-2 only: for the Llama family
// -export is refused and a checkpoint holds no model file (-save-model 0; the state files are all a
// resume needs, and -export-hf writes the model for transformers). Exit 2 naming the flag.
static void check_family_flags(Flags* f, const GPTConfig* c) {
    if (c->family == FAMILY_GPT2) return;
    if (f->export_path[0])
        die_user("flag -export %s: llm.c model files hold GPT-2 only, and -e %s is a Llama-family model. HINT: -export-hf DIR writes it "
                 "as a Hugging Face checkpoint (config.json + safetensors) that transformers loads", f->export_path, f->model);
    if (f->save_model_set && strcmp(f->save_model, "0"))
        die_user("flag -save-model %s: a checkpoint's model file is an llm.c file, which holds GPT-2 only, and -e %s is a Llama-family "
                 "model. HINT: use -save-model 0 (a resume needs only the state files) and -export-hf DIR for the model", f->save_model, f->model);
    if (strcmp(f->save_model, "0")) {
        snprintf(f->save_model, sizeof(f->save_model), "0");
        FLAG_SHOW(f, save_model, "0"); // (the run's record keeps this value)
        printf0("note: -save-model 0: llm.c model files hold GPT-2 only; checkpoints of -e %s keep the state files (-export-hf writes the model)\n", f->model);
    }
}

// The flags that groups (gr: flags_groups) do not go with (exit 2).
static void check_group_flags(const Flags* f, Groups gr) {
    if (gr.N == gr.W) return;
    const char* val = gr.hpz ? f->hpz : f->shard_group;
    if (gr.hpz && !f->plan && (f->zero_stage != 3 || f->tune)) // (-plan plans its ZeRO-3 rows)
        die_user("flag -hpz %s needs -z 3 (given, not auto or -tune): it is a partition of ZeRO-3's gathered parameters; below "
                 "ZeRO-3 nothing is gathered. HINT: -z 3, or -shard-group %d for ZeRO-1/2 inside each group", val, gr.N);
    if (!gr.hpz && f->zero_stage == 0 && !f->plan)
        die_user("flag -shard-group %s with -z 0: ZeRO-0 shards nothing, so there is nothing to keep inside a group. HINT: -z 1, 2 "
                 "or 3", val);
    if (gr.hpz && strcmp(f->offload_params, "none"))
        die_user("flag -hpz %s with -offload-params %s: hpZ keeps a larger parameter part per rank (1/%d instead of 1/%d) to gather "
                 "inside the group; -offload-params moves the parameters off the device. HINT: one of the two", val, f->offload_params, gr.N, gr.W);
    if (gr.hpz && f->lora && !strcmp(f->lora_base, "replicated"))
        die_user("flag -hpz %s with -lora-base replicated: the base is whole on every rank and never gathered. HINT: -lora-base sharded", val);
}

// -shard-group auto / -hpz auto: no group may span hosts (each rank's host name, gathered: the
// launcher's ranks per node would be wrong otherwise). ZT_TEST_HOSTNAME (tests) stands in for this
// host's name. An explicit N may span hosts (a larger shard group over a fast network): said once.
static void check_group_hosts(Comm* comm, const Flags* f, Groups gr) {
    if (gr.N == gr.W || comm->R == 1) return;
    char host[64];
    memset(host, 0, sizeof(host));
    const char* fake = getenv("ZT_TEST_HOSTNAME");
    if (fake && *fake) snprintf(host, sizeof(host), "%s", fake);
    else gethostname(host, sizeof(host) - 1);
    uint64_t words[8], col[ZT_MAX_RANKS];
    memcpy(words, host, sizeof(words));
    char (*all)[64] = (char(*)[64])calloc((size_t)comm->R, 64);
    if (!all) die(1, "out of host memory (%d host names)", comm->R);
    for (int k = 0; k < 8; k++) {
        comm_allgather_u64(comm, words[k], col);
        for (int q = 0; q < comm->R; q++) memcpy(all[q] + 8 * k, &col[q], 8);
    }
    int is_auto = !strcmp(gr.hpz ? f->hpz : f->shard_group, "auto");
    for (int q = 0; q < comm->R; q++) {
        all[q][63] = 0;
        int first = q - q % gr.N;
        if (strcmp(all[q], all[first])) {
            if (is_auto)
                die_user("flag %s auto: group %d (ranks %d..%d) spans hosts: rank %d runs on %s, rank %d on %s. HINT: the launcher's "
                         "ranks per node (%d) do not match where the ranks run: give N, or place %d consecutive ranks on each node "
                         "(mpirun --map-by ppr:%d:node)", gr.hpz ? "-hpz" : "-shard-group", q / gr.N, first, first + gr.N - 1, first,
                         all[first], q, all[q], gr.N, gr.N, gr.N);
            printf0("note: %s %d: group %d spans hosts (rank %d on %s, rank %d on %s): its collectives cross the network\n",
                    gr.hpz ? "-hpz" : "-shard-group", gr.N, q / gr.N, first, all[first], q, all[q]);
            break;
        }
    }
    free(all);
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
    if (strcmp(f->chat_prompt, "auto") && strcmp(f->chat_prompt, "1") && strcmp(f->chat_prompt, "0"))
        die_user("flag -chat-prompt: '%s' is not 1, 0 or auto", f->chat_prompt);
    int off = strcmp(f->offload, "auto") ? offload_parse(f->offload) : OFFLOAD_NONE;
    if (off < 0) die_user("flag -offload: '%s' is not none, cpu, nvme or auto", f->offload);
    int poff = offload_parse(f->offload_params);
    if (poff < 0) die_user("flag -offload-params: '%s' is not none, cpu or nvme", f->offload_params);
    if (poff != OFFLOAD_NONE && f->zero_stage != 3 && f->zero_stage != -1 && !f->plan && !(f->tune && !f->zero_stage_set))
        die_user("flag -offload-params %s needs -z 3 (or -z auto): only ZeRO-3 shards the parameters and gathers them block by "
                 "block; below it every rank holds them whole", f->offload_params);
    if (poff != OFFLOAD_NONE && !strcmp(f->offload, "none") && !f->plan && (f->zero_stage == -1 || f->recompute == -1 || f->tune))
        die_user("flag -offload-params %s with -offload none: -z auto, -r auto and -tune choose among the planner's parameter-offload "
                 "rows, which hold the optimizer state off the device too. HINT: -offload auto (or cpu, nvme), or give -z 3 and -r", f->offload_params);
    if (poff == OFFLOAD_NVME && !f->offload_dir[0]) die_user("flag -offload-params nvme needs -offload-dir DIR (a directory on the disk that holds the parameters)");
    if (off != OFFLOAD_NVME && poff != OFFLOAD_NVME && f->offload_dir[0] && strcmp(f->offload, "auto"))
        die_user("flag -offload-dir is for -offload nvme or -offload-params nvme (this run: -offload %s)", f->offload);
    if (off == OFFLOAD_NVME && !f->offload_dir[0]) die_user("flag -offload nvme needs -offload-dir DIR (a directory on the disk that holds the state)");
    if (parse_size(f->offload_buffer) <= 0) die_user("flag -offload-buffer: '%s' is not a size (examples: 256MiB, 1GiB)", f->offload_buffer);
    if (off != OFFLOAD_NONE && f->zero_stage == 0 && !f->plan && !(f->tune && !f->zero_stage_set)) // (-plan plans every stage; -tune chooses -z)
        die_user("flag -offload %s needs -z 1, 2 or 3: under ZeRO-0 every rank holds the whole optimizer state, so offloading "
                 "it would put R copies of it into host memory and copy the full gradient to the host on every rank. HINT: "
                 "-z 1 shards the state first (and sends less than -z 0)", f->offload);
    if (f->world > 0 && !f->plan) die_user("flag -world plans for another world size: it needs -plan");
    if (f->link_gbps < 0 || f->tflops < 0 || f->pcie_gbps < 0 || f->disk_gbps < 0) die_user("flags -link-gbps / -tflops / -pcie-gbps / -disk-gbps must be positive");
    if (f->link_gbps > 0 && (strcmp(f->link_intra, "auto") || strcmp(f->link_inter, "auto")))
        die_user("flag -link-gbps %g with -link-intra %s -link-inter %s: -link-gbps sets both links. HINT: give -link-intra and -link-inter alone", f->link_gbps, f->link_intra, f->link_inter);
    const char* ed = f->export_dtype;
    if (strcmp(ed, "auto") && strcmp(ed, "fp32") && strcmp(ed, "bf16") && strcmp(ed, "fp16"))
        die_user("flag -export-dtype: '%s' is not auto, fp32, bf16 or fp16", ed);
    if (!strcmp(ed, "fp16") && f->export_path[0]) die_user("flag -export-dtype fp16: llm.c model files have no FP16 version (use it with -export-hf only)");
    if (f->export_hf[0]) { // a model no transformers architecture holds is refused now, not after training
        HFConfig hc;
        char err[1024];
        if (hf_export_config(f, c, &hc, err, sizeof(err))) die_user("flag -export-hf %s: %s", f->export_hf, err);
    }
    if (strcmp(f->gpu, "auto") && gpu_peak_index(f->gpu) < 0)
        die_user("flag -gpu: '%s' is not a GPU this program knows (h100, h200, a100, a800, gh200, l40s, l4, a10; a device name such as "
                 "'NVIDIA H100 PCIe' also works). HINT: for another GPU give its rate with -tflops", f->gpu);
    if (f->max_steps < -1) die_user("flag -x: %d steps: use a count, 0 (evaluate only) or -1 (one epoch)", f->max_steps);
    if (f->lr < 0) die_user("flag -l: learning rate %g is negative", f->lr);
    if (f->warmup < -1) die_user("flag -u: warmup %d is negative", f->warmup);
    if (f->lr_final < 0 || f->lr_final > 1) die_user("flag -q: final fraction %g is not in [0, 1]", f->lr_final);
    if (strcmp(f->doc_attention, "auto") && strcmp(f->doc_attention, "0") && strcmp(f->doc_attention, "1"))
        die_user("flag -doc-attention: '%s' is not 0, 1 or auto", f->doc_attention);
    if (strcmp(f->lr_schedule, "cosine") && strcmp(f->lr_schedule, "linear") && strcmp(f->lr_schedule, "constant"))
        die_user("flag -k: schedule '%s' is not cosine, linear or constant", f->lr_schedule);
    if (f->beta1 < 0 || f->beta1 >= 1 || f->beta2 < 0 || f->beta2 >= 1) die_user("flags -beta1/-beta2: %g, %g must be in [0, 1)", f->beta1, f->beta2);
    if (f->eps <= 0) die_user("flag -eps: %g must be positive", f->eps);
    if (f->weight_decay < 0) die_user("flag -c: weight decay %g is negative", f->weight_decay);
    if (f->grad_clip < 0) die_user("flag -grad-clip: %g is negative", f->grad_clip);
    if (f->shuffle != 0 && f->shuffle != 1) die_user("flag -shuffle: %d is not 0 or 1", f->shuffle);
    if (f->val_every < 0 || f->sample_every < 0 || f->ckpt_every < 0 || f->ckpt_keep < 0)
        die_user("flags -v, -s, -n, -nk: counts must not be negative");
    if (f->val_steps < -1 || f->val_steps == 0) die_user("flag -m: %d validation batches: use a count >= 1, or -1 for the whole val set", f->val_steps);
    if (f->temperature < 0) die_user("flag -temperature: %g is negative (0: greedy)", f->temperature);
    if (f->top_k < 0) die_user("flag -top-k: %d is negative (0: every token)", f->top_k);
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
    if (strcmp(f->attn, "auto") && strcmp(f->attn, "own") && strcmp(f->attn, "cudnn")) die_user("flag -attn: '%s' is not cudnn, own or auto", f->attn);
    if (!strcmp(f->attn, "cudnn") && !strcmp(f->doc_attention, "1"))
        die_user("flag -attn cudnn: not with -doc-attention 1 yet (cuDNN's ragged/padding masks are not mapped to the segment table). "
                 "HINT: -attn auto or own (our kernels take the segment table)");
    if (f->comm_timeout < 0 || f->comm_delay < 0) die_user("flags -comm-timeout / -comm-delay must not be negative");
    if (f->max_skips < 0) die_user("flag -max-skips: %d is negative", f->max_skips);
    if (strcmp(f->save_model, "0") && strcmp(f->save_model, "1") && strcmp(f->save_model, "last"))
        die_user("flag -save-model: '%s' is not 0, 1 or last", f->save_model);
    if (f->io_timeout < 0 && f->io_timeout != -1) die_user("flag -io-timeout: %g is negative", f->io_timeout);
    if (f->tune_steps < 1) die_user("flag -tune-steps: %d timed steps per candidate: at least 1", f->tune_steps);
    if (f->tune_rows < 1 || f->tune_rows > 16) die_user("flag -tune-rows: %d candidates: 1..16", f->tune_rows);
}

// -attn: the CUDA device's attention, cuDNN's fused SDPA (ops/attention_cudnn.cuh) or ours
// (ops/attention.cuh); sets g_attn_cudnn. cudnn: where it cannot run (the CPU device, a build without
// it, the emulator, libcudnn.so.9 absent or older than 9.0) exit 2 naming why; auto: cuDNN where it can
// run, else ours (a one-line note in a USE_CUDNN=1 build on the CUDA device, where cuDNN was expected;
// the settings row says why either way); own: ours. -plan loads nothing: -plan -attn cudnn counts
// cuDNN's workspace estimate, -plan -attn auto plans ours. -doc-attention 1 (the segment table) is
// refused with cudnn (check_flags) and takes ours with auto (attention_choose_seg, once it is known).
static void attention_choose(Flags* f, int plan_only) {
    g_attn_cudnn = g_attn_cudnn_given = 0;
    if (!strcmp(f->attn, "own")) return;
    int given = !strcmp(f->attn, "cudnn");
    char why[512];
    const char* brief;
    if (attention_cudnn_unavailable(g_device == DEV_CUDA, !plan_only, why, sizeof(why), &brief)) {
        if (given) die_user("flag -attn cudnn: %s. HINT: -attn auto or own (our kernels)", why);
#if defined(ZT_CUDNN)
        if (g_device == DEV_CUDA) printf0("note: -attn auto: %s: our attention kernels run\n", why);
#endif
        FLAG_SHOW(f, attn, "own (%s)", brief);
        return;
    }
    if (plan_only && !given) { FLAG_SHOW(f, attn, "own (-plan loads no cuDNN: -plan -attn cudnn counts its workspace)"); return; }
    g_attn_cudnn = 1;
    g_attn_cudnn_given = given;
    if (!given) FLAG_SHOW(f, attn, "cudnn");
}

// -attn with the segment table known (-doc-attention resolved from the data): auto takes ours.
static void attention_choose_seg(Flags* f) {
    if (!g_attn_cudnn || strcmp(f->doc_attention, "1")) return;
    if (g_attn_cudnn_given) // (check_flags refused a given -doc-attention 1; this one came from the data)
        die_user("flag -attn cudnn: not with -doc-attention 1 (auto: the data records example starts): cuDNN's ragged/padding masks are "
                 "not mapped to the segment table yet. HINT: -attn auto or own, or -doc-attention 0");
    g_attn_cudnn = 0;
    printf0("note: -attn auto: -doc-attention 1 (a segment table): our attention kernels run (cuDNN's masks are not mapped to it yet)\n");
    FLAG_SHOW(f, attn, "own (-doc-attention 1: cuDNN is not mapped to the segment table yet)");
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
    simd_level(); // the host AdamW's path: a bad ZT_SIMD ends the run here (exit 2)
    g_use_blas = f->blas;
#ifdef USE_BLAS
    openblas_set_num_threads(1); // one level of threads: ours (see cpu_gemm_blas)
#endif
    return num_threads();
}

// Why a directory could not be made or written, for the hint: the cause in words.
static const char* output_hint(int e) {
    switch (e) {
    case EACCES: case EPERM: return "this user may not write there: choose a directory you own, or fix its permissions";
    case EROFS: return "the file system is read-only: choose a path on a writable one";
    case ENOSPC: case EDQUOT: return "the disk (or your quota) is full: free space, or choose another disk";
    case ENAMETOOLONG: return "the path is too long: choose a shorter one";
    default: return "choose another path";
    }
}

// An output directory made ready before anything is read or trained: created with its parents,
// or refused (-1, err set) naming the component at fault, the cause and a hint. A missing or
// read-only directory found only when training ends loses the run's result.
static int output_dir_make(const char* dir, char* err, size_t cap) {
    char tmp[PATH_MAX];
    if (!dir[0]) { snprintf(err, cap, "an empty path"); return -1; }
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp)) { snprintf(err, cap, "the path is longer than %d bytes", PATH_MAX); return -1; }
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    for (char* p = tmp + 1;; p++) { // each component from the root down: present as a directory, or made
        int end = *p == 0;
        if (!end && *p != '/') continue;
        *p = 0;
        struct stat st;
        if (stat(tmp, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) { snprintf(err, cap, "%s is a file, not a directory. HINT: remove it, or choose another path", tmp); return -1; }
        } else if (errno != ENOENT) {
            int e = errno;
            snprintf(err, cap, "cannot reach %s: %s. HINT: %s", tmp, strerror(e), output_hint(e));
            return -1;
        } else if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            snprintf(err, cap, "cannot create the directory %s: %s. HINT: %s", tmp, strerror(e), output_hint(e));
            return -1;
        }
        if (end) break;
        *p = '/';
    }
    if (access(tmp, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(err, cap, "cannot write into %s: %s. HINT: %s", tmp, strerror(e), output_hint(e));
        return -1;
    }
    return 0;
}

// The directory a file path is written into ("." for a bare name).
static void output_parent(const char* path, char* out, size_t cap) {
    snprintf(out, cap, "%s", path);
    char* s = strrchr(out, '/');
    if (!s) snprintf(out, cap, ".");
    else if (s == out) out[1] = 0; // "/x": the root
    else *s = 0;
}

// -o's directory (every rank: each writes its checkpoint state there), or exit 2.
static void output_dir_ready(const char* flag, const char* dir) {
    char err[PATH_MAX + 512];
    if (output_dir_make(dir, err, sizeof(err))) die_user("flag %s %s: %s", flag, dir, err);
}

// Every output path of the run checked before the first step (rank 0 writes them; every rank ends
// with its answer, exit 2): -export's file (its directory made; not a directory itself), -export-hf's and
// -lora-export's directories, the -tokenize prefix's directory. Made with their parents when missing.
static void check_output_paths(const Flags* f, Comm* comm) {
    char err[2 * PATH_MAX] = "", dir[PATH_MAX];
    if (g_rank == 0) {
        struct stat st;
        if (f->tokenize[0] && f->out_dir[0]) {
            output_parent(f->out_dir, dir, sizeof(dir));
            char e[PATH_MAX + 512];
            if (output_dir_make(dir, e, sizeof(e))) snprintf(err, sizeof(err), "flag -o %s (the shards' prefix): %s", f->out_dir, e);
        }
        if (!f->tokenize[0] && !f->plan) {
            const char* flags[3] = {"-export", "-export-hf", "-lora-export"};
            const char* paths[3] = {f->export_path, f->export_hf, f->lora_export};
            for (int k = 0; k < 3 && !err[0]; k++) {
                if (!paths[k][0]) continue;
                char e[PATH_MAX + 512];
                if (k == 0 && stat(paths[k], &st) == 0 && S_ISDIR(st.st_mode))
                    snprintf(err, sizeof(err), "flag -export %s: a directory (-export writes one llm.c model file). HINT: name a file in it", paths[k]);
                else if (k == 0) output_parent(paths[k], dir, sizeof(dir));
                else snprintf(dir, sizeof(dir), "%s", paths[k]);
                if (!err[0] && output_dir_make(dir, e, sizeof(e))) snprintf(err, sizeof(err), "flag %s %s: %s", flags[k], paths[k], e);
            }
        }
    }
    comm_broadcast(comm, err, sizeof(err), 0);
    if (err[0]) die_user("%s", err);
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
// The run's peak: VmHWM, or what it was before peak_window_start reset it, whichever is larger.
static int64_t g_peak_rss_floor = 0;
static int64_t peak_rss_bytes(void) {
    int64_t now = proc_status_bytes("VmHWM");
    return now > g_peak_rss_floor ? now : g_peak_rss_floor;
}
// Start a window whose own peak proc_status_bytes("VmHWM") gives afterwards (Linux: writing 5 to
// /proc/self/clear_refs resets VmHWM to the resident memory now); peak_rss_bytes keeps the run's.
// Returns 0 when the reset worked.
static int peak_window_start(void) {
    int64_t before = proc_status_bytes("VmHWM");
    if (before > g_peak_rss_floor) g_peak_rss_floor = before;
    FILE* f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int bad = fputs("5", f) < 0;
    return fclose(f) != 0 || bad ? -1 : 0;
}

// Every rank's live bytes per tag and its peak RSS: row r (TAG_COUNT + 1 values) is rank r's.
// A collective: each rank fills its own row of a zeroed matrix and the rows are summed.
#define MEM_COLS (TAG_COUNT + 1)
static double* gather_memory(Comm* comm) {
    double* all = (double*)calloc((size_t)comm->R * MEM_COLS, sizeof(double));
    for (int t = 0; t < TAG_COUNT; t++) all[comm->r * MEM_COLS + t] = (double)g_mem_bytes[t];
    all[comm->r * MEM_COLS + TAG_COUNT] = (double)peak_rss_bytes();
    comm_sum_doubles(comm, all, comm->R * MEM_COLS);
    return all;
}

// The per-rank memory table: each tag's bytes on every rank beside the closed form for the stage
// (zero_sizes and acts_bytes: the functions the allocator itself uses, from the dtype table), then
// the model state against the ZeRO paper's formula. z: the model's ZeRO state; c, B, T, recompute: its
// activations'.
static void print_memory_table(Comm* comm, const Zero* z, const GPTConfig* c, int B, int T, int recompute) {
    const ZeroSizes* s = &z->sz;
    int R = comm->R, st = z->stage;
    double* all = gather_memory(comm);
    double MiB = 1048576.0, X = sizeof(floatX);
    size_t acts, logits;
    acts_bytes(c, B, T, recompute, &acts, &logits);
    // closed form per tag: formula and value
    const char* f_params = st <= 2 ? "X * Psi'" : "X * Psi' / R";
    const char* f_grads = st <= 1 ? "4 * Psi'" : "4 * Psi' / R";
    const char* f_opt = st == 0 ? "4 * Psi'" : "4 * Psi' / R";
    int rep = st == 3 && z->lay.adapter && z->lay.rep_frozen; // [LoRA] -lora-base replicated
    if (z->lay.adapter) { // [LoRA] the adapters' (P_A) only
        f_grads = st <= 1 ? "4 * P_A" : "4 * P_A / R";
        f_opt = st == 0 ? "4 * P_A" : "4 * P_A / R";
    }
    if (rep) f_params = "X * (Psi' - P_A + P_A / R)";
    int poff = z->param_loc != OFFLOAD_NONE; // [-offload-params] the shard is not on the device: 0 here
    if (poff) f_params = z->param_loc == OFFLOAD_CPU ? "- (-offload-params cpu)" : "- (-offload-params nvme)";
    if (z->grads_host) f_grads = "- (-offload-params + -offload)"; // [the gradient shard on the host too]
    int off = z->offload != OFFLOAD_NONE; // [offload] master, m, v are not on the device: 0 here
    double opt_dev = off ? 0.0 : 4.0 * s->opt;
    if (off) f_opt = z->offload == OFFLOAD_CPU ? "- (-offload cpu: host)" : "- (-offload nvme: file)";
    ModelDesc md; // [QLoRA] one layer's 4-bit matrices dequantized (lora.h), beside the gathered blocks
    model_describe(&md, c);
    double deq = X * (double)lora_dequant_elems(&md);
    const char* f_bufs = rep ? "X * P_A" : st == 3 ? "X * (P_io + 2 P_layer)" : "-";
    if (deq > 0) f_bufs = rep ? "X * (P_A + deq)" : st == 3 ? "X * (P_io+2 P_layer+deq)" : "X * deq";
    struct { const char* formula; double bytes; } closed[TAG_COUNT] = {
        {f_params, X * (s->full_params + (poff ? 0 : s->shard_params))},
        {f_bufs, X * s->param_bufs + deq},
        {f_grads, 4.0 * (s->full_grads + (z->grads_host ? 0 : s->shard_grads))},
        {st >= 2 ? "4 * (P_io + 2 P_layer)" : "-", 4.0 * s->grad_bufs},
        {f_opt, opt_dev}, {f_opt, opt_dev}, {f_opt, opt_dev},
        {"acts(B, T, -r)", (double)acts},
        {"X * min(B*T, chunk) * Vp", (double)logits},
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
    int chunk = classifier_chunk_rows(c->Vp);
    printf0("logits: the classifier runs in chunks of %d rows (from Vp = %d alone; docs/classifier.md): %d row(s) of %d held, "
            "%.2f MiB instead of %.2f MiB for the whole B*T\n", chunk, c->Vp, B * T < chunk ? B * T : chunk, B * T, logits / MiB,
            X * (double)B * T * c->Vp / MiB);
    // model state: ours against the paper's (2-byte parameters and gradients, 12 bytes of Adam)
    double psi = (double)z->lay.logical_total;
    double ours = X * (s->full_params + s->shard_params) + 4.0 * (s->full_grads + s->shard_grads) + 12.0 * s->opt;
    double paper[4] = {16 * psi, 4 * psi + 12 * psi / R, 2 * psi + 14 * psi / R, 16 * psi / R};
    const char* form[4] = {"16 Psi", "4 Psi + 12 Psi/R", "2 Psi + 14 Psi/R", "16 Psi/R"};
    const char* ourform[4] = {"(X + 16) Psi'", "(X + 4) Psi' + 12 Psi'/R", "X Psi' + 16 Psi'/R", "(X + 16) Psi'/R"};
    printf0("model state per rank (params + grads + master + m + v), Psi = %lld parameters (the model line's: padded vocabulary rows included):\n", (long long)psi);
    const char* loraform[4] = {"X Psi' + 16 P_A", "X Psi' + 4 P_A + 12 P_A/R", "X Psi' + 16 P_A/R", "X Psi'/R + 16 P_A/R"};
    int A = z->lay.adapter; // [LoRA] the base frozen: gradients, master, m, v for the adapter block (P_A) only
    double full = deq > 0 ? psi : (double)z->lay.total; // (full fine-tuning: [QLoRA] of a BF16 base, Psi without its padding)
    printf0("  ours:  %-26s = %9.2f MiB\n", rep ? "X (Psi' - P_A) + (X + 16) P_A/R" : A ? loraform[st] : ourform[st], ours / MiB);
    if (rep)
        printf0("         -lora-base replicated: every rank holds the whole frozen base (never gathered); only the adapters are sharded\n");
    if (A)
        printf0("         LoRA: the base (Psi' - P_A) is frozen, parameters only; the adapters, P_A = %lld elements, hold the gradients,\n"
                "         master, m and v (full fine-tuning of the same model: %s = %.2f MiB)\n", (long long)z->lay.P[A], ourform[st],
                (X * (st == 3 ? full / R : full) + (st <= 1 ? 4.0 * full : 4.0 * full / R) + 12.0 * (st == 0 ? full : full / R)) / MiB);
    if (off) // [offload] the device holds the parameters and gradients only
        printf0("         of which 12 Psi'/R = %.2f MiB (master, m, v) %s, %.2f MiB on the device\n", 12.0 * s->opt / MiB,
                z->offload == OFFLOAD_CPU ? "in host memory (-offload cpu)" : "in the -offload-dir file (-offload nvme)", (ours - 12.0 * s->opt) / MiB);
    if (poff) // [-offload-params] nor the parameter shard
        printf0("         of which X Psi'/R = %.2f MiB (the parameter shard) %s%s\n", X * s->shard_params / MiB,
                z->param_loc == OFFLOAD_CPU ? "in page-locked host memory (-offload-params cpu)" : "in the -offload-dir file (-offload-params nvme)",
                z->grads_host ? ", and the FP32 gradient shard in page-locked host memory" : "");
    printf0("  paper: %-26s = %9.2f MiB   (ZeRO section 5: 16-bit gradients)\n", form[st], paper[st] / MiB);
    printf0("  ours keeps gradients in FP32 (+2 bytes per gradient element held), has X = %d-byte parameters,\n"
            "  and pads tensors to 8 elements and blocks to 8R (Psi' - Psi = %lld); the io/layer buffers of\n"
            "  ZeRO-2/3, activations, logits, comm staging and workspace are in neither (rows above)\n",
            (int)X, (long long)(z->lay.total - z->lay.logical_total));
    if (deq > 0) // [QLoRA]
        printf0("  QLoRA: the base's layer matrices are stored as NF4 (4-bit codes, 8-bit absmax per 64, FP32 per 16384):\n"
                "  Psi' counts their bytes / X, so it is below Psi; deq = %lld elements, one layer's matrices dequantized\n",
                (long long)(deq / X));
}

// What a run prints before its first step. By default (-verbose 0) a short block: the flags given or
// taken from a checkpoint, then one line each for the device and stages, the model (one Psi), the
// batch, memory per rank against what the device has, and the step time the planner expects (on a
// GPU; the CPU device's first step measures it). -verbose 1: every flag's row, one line per rank,
// the memory table by tag with its closed forms and the model state against the ZeRO paper's count.
// d, z: the model built (trainer_build_model); B, T, recompute: its micro-batch; GA, max_steps, and
// the tokens of the train and val data (0: none).
static void print_setup(const Flags* f, Comm* comm, const Launch* L, const ModelDesc* d, const Zero* z, int B, int T, int recompute,
                        int GA, int max_steps, int64_t train_tokens, int64_t val_tokens) {
    const GPTConfig* c = &d->cfg;
    int R = comm->R, verbose = f->verbose > 0;
    flags_print_table(f, verbose, 12);
    if (R > 1 && verbose) { // one line per rank, in rank order
        char host[256] = "?";
        gethostname(host, sizeof(host));
        for (int r = 0; r < R; r++) {
            if (r == comm->r)
                printf("[launch] rank %d of %d: pid %d on %s, local rank %d of %d, %d threads\n", comm->r, R, (int)getpid(),
                       host, L->local_rank, L->local_world, num_threads());
            fflush(stdout);
            double dummy = 0.0;
            comm_sum_doubles(comm, &dummy, 1); // a barrier that keeps the lines in order
        }
    }
    char lora[256] = "none";
    if (c->lora_r) {
        int n = snprintf(lora, sizeof(lora), "r %d, alpha %g on", c->lora_r, (double)d->lora.alpha);
        for (int i = 0; i < d->lora.nmods && n > 0 && n < (int)sizeof(lora) - 32; i++)
            n += snprintf(lora + n, sizeof(lora) - (size_t)n, "%s%s", i ? "," : " ", d->lora.mods[i].target);
        snprintf(lora + n, sizeof(lora) - (size_t)n, " (%lld adapter elements)", (long long)d->lora.num_params);
    }
    char why[160] = ""; // -device auto: why this device ("no NVIDIA GPU here", "this build has no CUDA")
    if (!strncmp(f->device_given, "auto (", 6)) snprintf(why, sizeof(why), " (auto: %.*s)", (int)strcspn(f->device_given + 6, ")"), f->device_given + 6);
    printf0("device %s%s | precision %s | ranks %d (%s, %d on this node) | threads %d per rank | ZeRO-%d | recompute -r %d | offload %s | LoRA %s\n",
            g_device == DEV_CPU ? "cpu" : "cuda", why, PRECISION_NAME, R, L->source, L->local_world,
            num_threads(), f->zero_stage, f->recompute, offload_name(z->offload), lora);
    if (verbose)
        printf0("model: L %d, C %d, NH %d, V %d (padded %d), max T %d: Psi = %lld parameters, the padded vocabulary rows included "
                "(%lld without them); memory below also counts Psi' = %lld, with every tensor padded to 8 elements and every block to 8R\n",
                c->L, c->C, c->NH, c->V, c->Vp, c->maxT, (long long)d->num_params, (long long)d->num_real,
                (long long)z->lay.total);
    else
        printf0("model: L %d, C %d, NH %d, V %d (padded %d), max T %d: Psi = %lld parameters (the padded vocabulary rows included)\n",
                c->L, c->C, c->NH, c->V, c->Vp, c->maxT, (long long)d->num_params);
    char fam[512];
    model_family_text(c, fam, sizeof(fam));
    if (fam[0]) printf0("model: %s\n", fam);
    printf0("batch: B %d x T %d x R %d x GA %d = %lld tokens per step; %d steps; train %lld tokens, val %lld tokens\n",
            B, T, R, GA, (long long)GA * R * B * T, max_steps, (long long)train_tokens, (long long)val_tokens);
    if (verbose) { print_memory_table(comm, z, c, B, T, recompute); return; }
    // memory: the busiest rank's tags, summed by kind, against the device's
    double* all = gather_memory(comm);
    double kind[5] = {0, 0, 0, 0, 0}, most = 0; // params, grads, optimizer, activations + logits, the rest
    int busiest = 0;
    for (int r = 0; r < R; r++) {
        double t = 0;
        for (int k = 0; k < TAG_COUNT; k++) t += all[r * MEM_COLS + k];
        if (t > most) { most = t; busiest = r; }
    }
    for (int k = 0; k < TAG_COUNT; k++) {
        double b = all[busiest * MEM_COLS + k];
        kind[k == TAG_PARAMS || k == TAG_PARAM_BUF ? 0 : k == TAG_GRADS || k == TAG_GRAD_BUF ? 1 :
             k == TAG_MASTER || k == TAG_ADAM_M || k == TAG_ADAM_V ? 2 : k == TAG_ACTS || k == TAG_LOGITS ? 3 : 4] += b;
    }
    free(all);
    if (z->offload != OFFLOAD_NONE) kind[2] = 12.0 * (double)z->sz.opt; // [offload] master, m, v: the host's or the file's, not the device's
    char have[96] = ""; // what the device has: the GPU's memory, or the host's available memory per rank
#ifdef __CUDACC__
    size_t fr, tot;
    if (g_device == DEV_CUDA && cudaMemGetInfo(&fr, &tot) == cudaSuccess) snprintf(have, sizeof(have), " of the GPU's %s", fmt_bytes((double)tot).s);
#endif
    if (g_device == DEV_CPU)
        snprintf(have, sizeof(have), " of %s available per rank", fmt_bytes(mem_available_bytes() / (L->local_world > 0 ? L->local_world : 1)).s);
    printf0("memory per rank: %s%s (params %s%s, grads %s%s, optimizer %s%s, activations and logits %s, other %s; -verbose 1: by tag)\n",
            fmt_bytes(most).s, have, fmt_bytes(kind[0]).s,
            z->param_loc == OFFLOAD_NONE ? "" : z->param_loc == OFFLOAD_CPU ? " + the shard on the host" : " + the shard in the -offload-dir file",
            fmt_bytes(kind[1]).s, !z->grads_host ? "" : z->offload == OFFLOAD_CPU ? " + the shard on the host" : " + the shard in the -offload-dir file",
            fmt_bytes(kind[2]).s,
            z->offload == OFFLOAD_NONE ? "" : z->offload == OFFLOAD_CPU ? " on the host" : " in the -offload-dir file", fmt_bytes(kind[3]).s,
            fmt_bytes(kind[4]).s);
    if (g_device == DEV_CUDA) {
        const char* name = gpu_model_name(f);
        int i = gpu_peak_index(name);
        if (i >= 0) {
            PlanEnv e;
            memset(&e, 0, sizeof(e));
            plan_gpu_rates(i, &e.flops, &e.membw);
            printf0("time: about %.3g s per step of compute at half the %s's BF16 peak (communication and offload not counted: -plan prices them)\n",
                    plan_compute_s(&e, c, T, recompute) * (double)B * T * GA, g_gpu_peaks[i].part);
        }
    } else
        printf0("time: the first step measures it (each step line's tok/s and ETA)\n");
}

// A -tokenize into PREFIX begins: what a killed one left (PREFIX_*.tmp.PID of a process no longer
// running) is removed and said, and PREFIX.tokenizing is written (fsynced): until tokenize_end
// removes it, the loader refuses the prefix's shards (dataloader.h: tokenize_shard_parts), so the
// shards of a run that did not finish never train as if they were the corpus.
static void tokenize_begin(const char* prefix) {
    char dir[PATH_MAX], marker[PATH_MAX + 16], base[PATH_MAX];
    output_parent(prefix, dir, sizeof(dir));
    const char* slash = strrchr(prefix, '/');
    snprintf(base, sizeof(base), "%s_", slash ? slash + 1 : prefix);
    const char* prefixes[1] = {base};
    int left = zt_export_leftovers(dir, prefixes, 1, NULL, NULL);
    if (left) printf("-tokenize: removed %d temporary file(s) a killed -tokenize into %s left\n", left, prefix);
    char rec[PATH_MAX + 16];
    snprintf(rec, sizeof(rec), "%s.shards", prefix); // an earlier run's record: this run's shards replace its
    unlink(rec);
    snprintf(marker, sizeof(marker), "%s.tokenizing", prefix);
    FILE* m = fopen(marker, "w");
    if (!m || fprintf(m, "a -tokenize (pid %d) is writing the shards of %s; removed when every shard has its name\n", (int)getpid(), prefix) < 0 ||
        fflush(m) != 0 || fsync(fileno(m)) != 0 || fclose(m) != 0)
        die_user("-tokenize: cannot write %s: %s", marker, strerror(errno));
    zt_fsync_dir(dir);
}
static void tokenize_end(const char* prefix, const int shards[2], int masks) {
    char dir[PATH_MAX], marker[PATH_MAX + 16], path[PATH_MAX + 300], mask[PATH_MAX + 320];
    output_parent(prefix, dir, sizeof(dir));
    int stale = 0; // an earlier -tokenize into the prefix wrote more shards: those past ours would mix two corpora
    snprintf(marker, sizeof(marker), "%s.tokenizing", prefix);
    DIR* dd = opendir(dir);
    struct dirent* e;
    while (dd && (e = readdir(dd))) {
        char m2[PATH_MAX + 16], split[8];
        int idx;
        if (strchr(prefix, '/')) snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        else snprintf(path, sizeof(path), "%s", e->d_name);
        if (!tokenize_shard_parts(path, m2, sizeof(m2), split, sizeof(split), &idx) || strcmp(m2, marker)) continue;
        snprintf(mask, sizeof(mask), "%s.mask", path);
        if (idx < shards[!strcmp(split, "val")]) { // one of ours: a mask beside it that this run did not write is an earlier run's
            if (!masks && unlink(mask) == 0) stale++;
            continue;
        }
        unlink(mask);
        if (unlink(path) == 0) stale++;
    }
    if (dd) closedir(dd);
    if (stale) printf("-tokenize: removed %d shard(s) or mask(s) an earlier -tokenize into %s left (they would mix two corpora)\n", stale, prefix);
    // the record, last before the marker goes: every shard of this run as written (dataloader.h)
    char rec[PATH_MAX + 16], tmp[PATH_MAX + 48];
    snprintf(rec, sizeof(rec), "%s.shards", prefix);
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", rec, (int)getpid());
    FILE* rf = fopen(tmp, "w");
    int ok = rf && fprintf(rf, "%s\n", TOKENIZE_RECORD_MAGIC) > 0;
    for (int k = 0; k < 2 && ok; k++)
        for (int i = 0; i < shards[k] && ok; i++) {
            tokenize_shard_path(path, sizeof(path), prefix, k ? "val" : "train", i);
            uint64_t h;
            int64_t bytes;
            int32_t head[3] = {0, 0, 0};
            FILE* sf = fopen(path, "rb");
            ok = sf && fread(head, sizeof(head), 1, sf) == 1;
            if (sf) fclose(sf);
            ok = ok && tokenize_file_hash(path, &h, &bytes) == 0;
            const char* base = strrchr(path, '/');
            ok = ok && fprintf(rf, "shard %s %d %lld %016llx\n", base ? base + 1 : path, head[2], (long long)bytes, (unsigned long long)h) > 0;
        }
    ok = ok && fprintf(rf, "end\n") > 0 && fflush(rf) == 0 && fsync(fileno(rf)) == 0;
    if (rf && fclose(rf) != 0) ok = 0;
    if (!ok || rename(tmp, rec) != 0) { int e = errno; unlink(tmp); die(1, "-tokenize: writing %s failed: %s", rec, strerror(e)); }
    zt_fsync_dir(dir); // every shard's name on disk before the marker goes
    snprintf(marker, sizeof(marker), "%s.tokenizing", prefix);
    if (unlink(marker) != 0) die(1, "-tokenize: cannot remove %s: %s", marker, strerror(errno));
    zt_fsync_dir(dir);
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
    tokenize_begin(f->out_dir); // PREFIX.tokenizing until every shard has its name; a killed run's leftovers removed
    size_t n = strlen(f->tokenize);
    if (n >= 6 && !strcmp(f->tokenize + n - 6, ".jsonl")) { // prompt/completion pairs (prompts.h)
        PromptStats ps;
        char date[32];
        if (f->chat_date[0] && chat_date_string(f->chat_date, date, err, sizeof(err))) die_user("%s", err);
        if (tokenize_prompts_to_shards(&tok, f->tokenize, f->out_dir, f->T, f->val_every_doc, f->shard_tokens, f->chat_date, &ps, err, sizeof(err)))
            die_user("-tokenize: %s", err);
        printf("tokenized %s in %.2f s, packed for T = %d: train %lld examples, %lld tokens (%lld counted targets) in %d shard(s); "
               "val %lld examples, %lld tokens (%lld counted) in %d shard(s); %lld %s; prefix %s (each shard with a .mask: the loss mask and where each example starts)\n",
               f->tokenize, wall_s() - t0, f->T, (long long)ps.examples[0], (long long)ps.tokens[0], (long long)ps.counted[0], ps.shards[0],
               (long long)ps.examples[1], (long long)ps.tokens[1], (long long)ps.counted[1], ps.shards[1], (long long)ps.cut,
               ps.chat_template[0] ? "conversation(s) cut by whole turns at the start" : "prompt(s) cut at the start", f->out_dir);
        tokenize_end(f->out_dir, ps.shards, 1);
        if (ps.chat_template[0]) printf("chat template: %s%s%s\n", ps.chat_template, ps.chat_date[0] ? ", date line " : "", ps.chat_date);
        if (f->chat_date[0] && !ps.chat_date[0])
            printf("note: -chat-date %s changed nothing: %s\n", f->chat_date, ps.chat_template[0] ? "this chat template writes no date" : "the file holds no conversations");
        tokenizer_free(&tok);
        return;
    }
    TokenizeStats st;
    if (tokenize_file_to_shards_ex(&tok, f->tokenize, f->out_dir, f->val_every_doc, f->shard_tokens, TOKENIZE_CHUNK_BYTES, &st, err, sizeof(err)))
        die_user("-tokenize: %s", err);
    tokenize_end(f->out_dir, st.shards, 0);
    printf("tokenized %s (%lld bytes) in %.2f s: train %lld documents, %lld tokens in %d shard(s); val %lld documents, %lld tokens in %d shard(s); prefix %s; "
           "%lld of %lld documents encoded in parallel batches on %d thread(s), the others streamed on one\n",
           f->tokenize, (long long)st.bytes, wall_s() - t0, (long long)st.documents[0], (long long)st.tokens[0], st.shards[0],
           (long long)st.documents[1], (long long)st.tokens[1], st.shards[1], f->out_dir, (long long)st.batched,
           (long long)(st.documents[0] + st.documents[1]), st.threads);
    tokenizer_free(&tok);
}

// Every rank's value of h combined with the build's name, compared with rank 0's over the host
// communicator (MPI, or the TCP rendezvous), so that no rank goes on alone. Ends every rank (exit 2) with a message naming
// `what` and a hint.
static void ranks_agree(Comm* comm, uint64_t h, const char* what, const char* hint) {
    char build[128];
    snprintf(build, sizeof(build), "zerotrain %s %s built %s %s", ZT_VERSION, PRECISION_NAME, __DATE__, __TIME__);
    h = fnv1a(h, build, strlen(build));
    uint64_t* hs = (uint64_t*)malloc(sizeof(uint64_t) * comm->R);
    comm_allgather_u64(comm, h, hs);
    for (int r = 1; r < comm->R; r++)
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

// A number for log.jsonl and tune.jsonl: JSON has no NaN or infinity, so those are written as null.
static void json_num(FILE* f, const char* key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.9g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

#endif // ZT_STARTUP_H
