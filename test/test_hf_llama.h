// test/test_hf_llama.h — Hugging Face Llama, Mistral and Qwen2 checkpoints (hf.h): config.json
// as published for real models, every refusal with its file, field and value, the name mapping
// onto our fused tensors (q/k/v -> wqkv, gate/up -> wgu, an untied head, padding rows), the
// writer's shards and index, and corrupt checkpoints. The loss/logits parity with transformers is
// in hf_llama_vs_transformers (needs the Llama forward).

static void hfl_write_text(const char* path, const char* text) {
    FILE* f = fopen(path, "w");
    if (!f) { printf("    cannot write %s\n", path); return; }
    fputs(text, f);
    fclose(f);
}

// The config.json files of published models (verbatim but for whitespace), read as transformers reads them.
TEST(hf_llama_config_published) {
    static const char* llama32_1b =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
        " \"eos_token_id\": 128001, \"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 8192, \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
        " \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192,"
        " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";
    static const char* qwen25_05b =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151643,"
        " \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
        " \"max_position_embeddings\": 32768, \"max_window_layers\": 24, \"model_type\": \"qwen2\", \"num_attention_heads\": 14,"
        " \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\", \"use_cache\": true,"
        " \"use_mrope\": false, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    static const char* smollm2_135m =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 0,"
        " \"eos_token_id\": 0, \"hidden_act\": \"silu\", \"hidden_size\": 576, \"initializer_range\": 0.041666666666666664,"
        " \"intermediate_size\": 1536, \"is_llama_config\": true, \"max_position_embeddings\": 8192, \"model_type\": \"llama\","
        " \"num_attention_heads\": 9, \"num_hidden_layers\": 30, \"num_key_value_heads\": 3, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05,"
        " \"rope_interleaved\": false, \"rope_scaling\": null, \"rope_theta\": 100000, \"tie_word_embeddings\": true,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.42.3\", \"use_cache\": true, \"vocab_size\": 49152}";
    static const char* mistral_7b =
        "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
        " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336, \"max_position_embeddings\": 32768,"
        " \"model_type\": \"mistral\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
        " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"sliding_window\": 4096, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.34.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}";
    static const char* llama3_8b_instruct = // eos_token_id as a list (Llama 3.1 Instruct); Llama 2's rotary buffers era fields
        "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"
        " \"hidden_act\": \"silu\", \"hidden_size\": 4096, \"intermediate_size\": 14336, \"max_position_embeddings\": 131072, \"mlp_bias\": false,"
        " \"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"pretraining_tp\": 1,"
        " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
        " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}";
    static const char* qwen3_06b = // mlc-llm model_preset.py "qwen3_0.6b" (its Python dict as JSON); Qwen3: q_norm/k_norm, head_dim 128 != 1024 / 16
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 3072, \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
        " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null,"
        " \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    static const char* phi3_mini_4k = // Phi-3-mini-4k-instruct's config.json as public code copies it (transformers_version 4.40.2)
        "{\"_name_or_path\": \"Phi-3-mini-4k-instruct\", \"architectures\": [\"Phi3ForCausalLM\"], \"attention_dropout\": 0.0,"
        " \"auto_map\": {\"AutoConfig\": \"configuration_phi3.Phi3Config\", \"AutoModelForCausalLM\": \"modeling_phi3.Phi3ForCausalLM\"},"
        " \"bos_token_id\": 1, \"embd_pdrop\": 0.0, \"eos_token_id\": 32000, \"hidden_act\": \"silu\", \"hidden_size\": 3072,"
        " \"initializer_range\": 0.02, \"intermediate_size\": 8192, \"max_position_embeddings\": 4096, \"model_type\": \"phi3\","
        " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 32, \"original_max_position_embeddings\": 4096,"
        " \"pad_token_id\": 32000, \"resid_pdrop\": 0.0, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null, \"rope_theta\": 10000.0,"
        " \"sliding_window\": 2047, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.2\","
        " \"use_cache\": true, \"attention_bias\": false, \"vocab_size\": 32064}";
    struct { const char* name; const char* text; HFConfig want; } cases[7];
    memset(cases, 0, sizeof(cases));
    cases[0].name = "Llama-3.2-1B"; cases[0].text = llama32_1b;
    cases[1].name = "Qwen2.5-0.5B"; cases[1].text = qwen25_05b;
    cases[2].name = "SmolLM2-135M"; cases[2].text = smollm2_135m;
    cases[3].name = "Mistral-7B-v0.1"; cases[3].text = mistral_7b;
    cases[4].name = "Llama-3.1-8B-Instruct"; cases[4].text = llama3_8b_instruct;
    //                                L   C     NH  V       maxT    arch              NKV HD   F      tied qkvb mlpb eps   theta     rope            factor low high orig  window
    HFConfig w0 = {16, 2048, 32, 128256, 131072, HF_ARCH_LLAMA,   8,  64,  8192,  1, 0, 0, 1e-5, 500000.0,  HF_ROPE_LLAMA3,  32.0, 1.0, 4.0, 8192, 0,     28, "128000", "128001", "", 0, 0, 0, 0, 0, ""};
    HFConfig w1 = {24, 896,  14, 151936, 32768,  HF_ARCH_QWEN2,   2,  64,  4864,  1, 1, 0, 1e-6, 1000000.0, HF_ROPE_DEFAULT, 1.0,  0,   0,   0,    0,     24, "151643", "151643", "", 0, 0, 0, 0, 0, ""};
    HFConfig w2 = {30, 576,  9,  49152,  8192,   HF_ARCH_LLAMA,   3,  64,  1536,  1, 0, 0, 1e-5, 100000.0,  HF_ROPE_DEFAULT, 1.0,  0,   0,   0,    0,     28, "0", "0", "", 0, 0, 0, 0, 0, ""};
    HFConfig w3 = {32, 4096, 32, 32000,  32768,  HF_ARCH_MISTRAL, 8,  128, 14336, 0, 0, 0, 1e-5, 10000.0,   HF_ROPE_DEFAULT, 1.0,  0,   0,   0,    4096,  28, "1", "2", "", 0, 0, 0, 0, 0, ""};
    HFConfig w4 = {32, 4096, 32, 128256, 131072, HF_ARCH_LLAMA,   8,  128, 14336, 0, 0, 0, 1e-5, 500000.0,  HF_ROPE_LLAMA3,  8.0,  1.0, 4.0, 8192, 0,     28, "128000", "[128001, 128008, 128009]", "", 0, 0, 0, 0, 0, ""};
    HFConfig w5 = {28, 1024, 16, 151936, 40960,  HF_ARCH_QWEN3,   8,  128, 3072,  1, 0, 0, 1e-6, 1000000.0, HF_ROPE_DEFAULT, 1.0,  0,   0,   0,    0,     28, "151643", "151645", "", 0, 1, 0, 0, 0, ""};
    cases[5].name = "Qwen3-0.6B"; cases[5].text = qwen3_06b;
    HFConfig w6 = {32, 3072, 32, 32064, 4096,    HF_ARCH_PHI3,    32, 96,  8192,  0, 0, 0, 1e-5, 10000.0,   HF_ROPE_DEFAULT, 1.0,  0,   0,   0,    2047,  28, "1", "32000", "32000", 0, 0, 1, 4096, 0, ""};
    cases[6].name = "Phi-3-mini-4k-instruct"; cases[6].text = phi3_mini_4k; cases[6].want = w6;
    cases[0].want = w0; cases[1].want = w1; cases[2].want = w2; cases[3].want = w3; cases[4].want = w4; cases[5].want = w5;
    char path[PATH_MAX], err[1024];
    snprintf(path, sizeof(path), "%s/hfl_config.json", test_tmpdir());
    for (int i = 0; i < 7; i++) {
        hfl_write_text(path, cases[i].text);
        HFConfig c;
        int rc = hf_read_config(path, &c, err, sizeof(err));
        CHECKF(rc == 0, "%s: %s", cases[i].name, err);
        if (rc) continue;
        const HFConfig* w = &cases[i].want;
        int same = c.L == w->L && c.C == w->C && c.NH == w->NH && c.V == w->V && c.maxT == w->maxT && c.arch == w->arch && c.NKV == w->NKV &&
                   c.HD == w->HD && c.F == w->F && c.tied == w->tied && c.qkv_bias == w->qkv_bias && c.mlp_bias == w->mlp_bias &&
                   c.norm_eps == w->norm_eps && c.rope_theta == w->rope_theta && c.rope_type == w->rope_type && c.rope_factor == w->rope_factor &&
                   c.rope_low_freq == w->rope_low_freq && c.rope_high_freq == w->rope_high_freq && c.rope_orig_maxT == w->rope_orig_maxT &&
                   c.window == w->window && c.max_window_layers == w->max_window_layers && !strcmp(c.bos, w->bos) && !strcmp(c.eos, w->eos) &&
                   c.qk_norm == w->qk_norm && c.fused == w->fused && c.orig_maxT == w->orig_maxT;
        CHECKF(same, "%s: read L %d C %d NH %d NKV %d HD %d F %d V %d maxT %d tied %d biases %d/%d eps %g theta %g rope %d (%g %g %g %d) window %d eos %s",
               cases[i].name, c.L, c.C, c.NH, c.NKV, c.HD, c.F, c.V, c.maxT, c.tied, c.qkv_bias, c.mlp_bias, c.norm_eps, c.rope_theta,
               c.rope_type, c.rope_factor, c.rope_low_freq, c.rope_high_freq, c.rope_orig_maxT, c.window, c.eos);
        // a window (Mistral's 4096, Phi-3-mini-4k's 2047) is full attention up to T = window, and refused beyond
        int W = w->window ? w->window : 4096;
        char wtext[64];
        snprintf(wtext, sizeof(wtext), "sliding_window = %d", W);
        CHECK(hf_check_run(&c, W, path, err, sizeof(err)) == 0);
        int refused = hf_check_run(&c, W + 1, path, err, sizeof(err)) != 0;
        CHECKF(refused == (w->window > 0) && (!refused || (strstr(err, wtext) && strstr(err, path))), "%s: T %d: %s", cases[i].name, W + 1, refused ? err : "accepted");
        // written back (as -export-hf writes it) and read again: the same config
        char text[8192];
        int n = hf_config_text(&c, ST_BF16, text, sizeof(text));
        CHECK(n > 0);
        hfl_write_text(path, text);
        HFConfig back;
        rc = hf_read_config(path, &back, err, sizeof(err));
        CHECKF(rc == 0 && !memcmp(&back, &c, sizeof(c)), "%s: config.json written and read back differs (%s):\n%s", cases[i].name, rc ? err : "fields", text);
        printf("    %-22s %s L %d C %d NH %d/%d HD %d F %d V %d: read, checked, written back\n", cases[i].name, hf_arch_name(c.arch), c.L, c.C, c.NH, c.NKV, c.HD, c.F, c.V);
    }
    char f[40];
    hf_float(500000.0, f, sizeof(f)); CHECKF(!strcmp(f, "500000.0"), "%s", f);
    hf_float(1e-5, f, sizeof(f)); CHECKF(!strcmp(f, "1e-05"), "%s", f);
    hf_float(1e-6, f, sizeof(f)); CHECKF(!strcmp(f, "1e-06"), "%s", f);
    hf_float(32.0, f, sizeof(f)); CHECKF(!strcmp(f, "32.0"), "%s", f);
    hf_float(0.25, f, sizeof(f)); CHECKF(!strcmp(f, "0.25"), "%s", f);
}

// Every refusal names the file, the field and the value found.
TEST(hf_llama_config_refused) {
#define HFL_PHI3 "\"model_type\": \"phi3\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, " \
                 "\"vocab_size\": 100, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-05"
#define HFL_BASE "\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, " \
                 "\"vocab_size\": 100, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-05"
    static const struct { const char* what; const char* json; const char* expect[2]; } cases[] = {
        {"another model_type", "{\"model_type\": \"gemma\"}", {"model_type 'gemma'", "not supported"}},
        {"missing hidden_size", "{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"intermediate_size\": 96}", {"hidden_size", "missing"}},
        {"missing rms_norm_eps", "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                                 "\"vocab_size\": 100, \"max_position_embeddings\": 32}", {"rms_norm_eps", "missing"}},
        {"a string size", "{" HFL_BASE ", \"num_key_value_heads\": \"2\"}", {"num_key_value_heads = '2'", "integer"}},
        {"heads not a multiple of kv heads", "{" HFL_BASE ", \"num_key_value_heads\": 3}", {"num_key_value_heads = 3", "multiple"}},
        {"odd head_dim", "{" HFL_BASE ", \"head_dim\": 15}", {"head_dim = 15", "odd"}},
        {"qwen2 head_dim", "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                           "\"vocab_size\": 100, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-06, \"head_dim\": 32}", {"head_dim = 32", "Qwen2"}},
        {"gelu", "{" HFL_BASE ", \"hidden_act\": \"gelu\"}", {"hidden_act = 'gelu'", "only silu"}},
        {"yarn", "{" HFL_BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", {"rope_scaling.rope_type = 'yarn'", "default, linear, llama3"}},
        {"dynamic (older 'type')", "{" HFL_BASE ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}", {"rope_type = 'dynamic'", "not supported"}},
        {"llama3 without its fields", "{" HFL_BASE ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}", {"rope_scaling.low_freq_factor", "missing"}},
        {"linear without factor", "{" HFL_BASE ", \"rope_scaling\": {\"rope_type\": \"linear\"}}", {"rope_scaling.factor", "missing"}},
        {"MoE", "{" HFL_BASE ", \"num_local_experts\": 8}", {"num_local_experts = 8", "mixture of experts"}},
        {"qk-norm", "{" HFL_BASE ", \"use_qk_norm\": true}", {"use_qk_norm = true", "qk-norm"}},
        {"partial rotary", "{" HFL_BASE ", \"partial_rotary_factor\": 0.5}", {"partial_rotary_factor = 0.5", "whole head"}},
        {"mrope", "{" HFL_BASE ", \"use_mrope\": true}", {"use_mrope = true", "not supported"}},
        {"interleaved rope", "{" HFL_BASE ", \"rope_interleaved\": true}", {"rope_interleaved = true", "not supported"}},
        {"negative theta", "{" HFL_BASE ", \"rope_theta\": -1}", {"rope_theta = -1", "positive"}},
        {"tie not a bool", "{" HFL_BASE ", \"tie_word_embeddings\": 1}", {"tie_word_embeddings = 1", "true or false"}},
        // Phi-3 (model_type phi3): its longrope (Phi-3.5-mini, the 128k models; "su" its older name), a head_dim of its own
        {"phi3 longrope", "{" HFL_PHI3 ", \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1.0], \"long_factor\": [1.0]}}",
         {"rope_scaling (type 'su')", "longrope"}},
        {"phi3 head_dim", "{" HFL_PHI3 ", \"head_dim\": 32}", {"head_dim = 32", "Phi-3 (transformers 4.47) always uses"}},
        {"phi3 partial rotary (Phi-4-mini)", "{" HFL_PHI3 ", \"partial_rotary_factor\": 0.75}", {"partial_rotary_factor = 0.75", "whole head"}},
    };
#undef HFL_PHI3
#undef HFL_BASE
    char path[PATH_MAX], err[1024];
    snprintf(path, sizeof(path), "%s/hfl_bad_config.json", test_tmpdir());
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hfl_write_text(path, cases[i].json);
        HFConfig c;
        int rc = hf_read_config(path, &c, err, sizeof(err));
        CHECKF(rc != 0 && strstr(err, path) && strstr(err, cases[i].expect[0]) && strstr(err, cases[i].expect[1]),
               "%s: want the file, '%s' and '%s': %s", cases[i].what, cases[i].expect[0], cases[i].expect[1], rc ? err : "accepted");
        printf("    %-34s %s\n", cases[i].what, rc ? strstr(err, "json: ") ? strstr(err, "json: ") + 6 : err : "accepted");
    }
    // the sliding windows: Qwen2's only counts with use_sliding_window
    const char* qwen_win = "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                           "\"vocab_size\": 100, \"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-06, \"use_sliding_window\": %s, \"sliding_window\": 16}";
    for (int use = 0; use < 2; use++) {
        char text[1024];
        snprintf(text, sizeof(text), qwen_win, use ? "true" : "false");
        hfl_write_text(path, text);
        HFConfig c;
        CHECK(hf_read_config(path, &c, err, sizeof(err)) == 0);
        int rc = hf_check_run(&c, 17, path, err, sizeof(err));
        CHECKF((rc != 0) == use, "qwen2 use_sliding_window %d, window 16, T 17: %s", use, rc ? err : "accepted");
    }
}

// ----------------------------------------------------------------------------
// The mapping, through our writer and reader. Our layout is written here from LLAMA.md's table
// (the logical order: embed, then each layer tensor for every layer, then normf, lmhead), so this
// test is independent of model.h.

typedef struct { const char* name; int io; int64_t n; } HflTensor;

static int hfl_layout(const HFConfig* c, int Vp, HflTensor* t, HFLlmcTensor* lt) {
    int64_t Q = (int64_t)c->NH * c->HD, K = (int64_t)c->NKV * c->HD, QKV = Q + 2 * K;
    HflTensor tab[] = {
        {"embed", 1, (int64_t)Vp * c->C}, {"attnnorm", 0, c->C}, {"wqkv", 0, QKV * c->C}, {"bqkv", 0, c->qkv_bias ? QKV : 0},
        {"qnorm", 0, c->qk_norm ? c->HD : 0}, {"knorm", 0, c->qk_norm ? c->HD : 0}, {"wo", 0, (int64_t)c->C * Q}, {"mlpnorm", 0, c->C}, {"wgu", 0, 2 * (int64_t)c->F * c->C}, {"bgu", 0, c->mlp_bias ? 2 * (int64_t)c->F : 0},
        {"wdown", 0, (int64_t)c->C * c->F}, {"bdown", 0, c->mlp_bias ? c->C : 0}, {"normf", 1, c->C}, {"lmhead", 1, c->tied ? 0 : (int64_t)Vp * c->C},
    };
    int n = (int)(sizeof(tab) / sizeof(tab[0]));
    int64_t logical = 0;
    for (int k = 0; k < n; k++) {
        t[k] = tab[k];
        lt[k] = (HFLlmcTensor){tab[k].name, logical, tab[k].n, !tab[k].io};
        logical += tab[k].n * (tab[k].io ? 1 : c->L);
    }
    return n;
}

static float hfl_value(int k, int l, int64_t i) { return (float)((k * 131 + l * 17 + i * 7) % 1999) / 1999.0f - 0.5f; } // exact in F32 and distinct enough

// A tiny Llama-family config: GQA 6 heads over 2, head_dim 10 (not C/NH), F 21, V 37 (Vp 40);
// Qwen2: 4 heads over 1, head_dim 4; Qwen3: the Llama shape with q/k norms.
static HFConfig hfl_tiny(int arch, int tied, int mlp_bias) {
    HFConfig c;
    memset(&c, 0, sizeof(c));
    c.L = 2; c.C = 16; c.NH = 6; c.V = 37; c.maxT = 24; c.arch = arch;
    c.NKV = 2; c.HD = 10; c.F = 21; c.tied = tied;
    if (arch == HF_ARCH_QWEN2) { c.NH = 4; c.NKV = 1; c.HD = 4; } // Qwen2: head_dim = C / NH; a single KV head
    c.qkv_bias = arch == HF_ARCH_QWEN2; c.mlp_bias = mlp_bias; c.norm_eps = 1e-6; c.rope_theta = 500000.0;
    c.qk_norm = arch == HF_ARCH_QWEN3; // Qwen3: q_norm / k_norm
    c.rope_type = HF_ROPE_LLAMA3; c.rope_factor = 8; c.rope_low_freq = 1; c.rope_high_freq = 4; c.rope_orig_maxT = 16;
    c.max_window_layers = 28;
    if (arch == HF_ARCH_PHI3) { // Phi-3: qkv_proj, gate_up_proj; head_dim = C / NH; no rope_scaling
        c.fused = 1; c.NH = 4; c.NKV = 2; c.HD = 4; c.orig_maxT = 4096;
        c.rope_type = HF_ROPE_DEFAULT; c.rope_factor = 1; c.rope_low_freq = c.rope_high_freq = 0; c.rope_orig_maxT = 0;
    }
    return c;
}

// Llama with attention_bias (q/k/v biases and a zero o_proj bias) and mlp_bias, tied.
static HFConfig hfl_tiny_biases(void) {
    HFConfig c = hfl_tiny(HF_ARCH_LLAMA, 1, 1);
    c.qkv_bias = c.o_bias = 1;
    return c;
}

// Write our tensors (values hfl_value) as a checkpoint in dir; returns 0 or -1 with err.
static int hfl_export(const HFConfig* c, int Vp, const char* dir, StDtype dt, char* err, size_t errlen) {
    HflTensor t[16];
    HFLlmcTensor lt[16];
    int n = hfl_layout(c, Vp, t, lt);
    HFWriter w;
    if (hf_writer_open(&w, dir, c, dt, err, errlen)) return -1;
    for (int k = 0; k < n; k++) {
        if (t[k].n == 0) continue;
        float* v = (float*)malloc(sizeof(float) * (size_t)t[k].n);
        for (int l = 0; l < (t[k].io ? 1 : c->L); l++) {
            for (int64_t i = 0; i < t[k].n; i++) v[i] = hfl_value(k, l, i);
            if (!strcmp(t[k].name, "embed") || !strcmp(t[k].name, "lmhead")) // padded rows hold garbage: never written
                for (int64_t i = (int64_t)c->V * c->C; i < t[k].n; i++) v[i] = 1e30f;
            if (hf_writer_put(&w, t[k].name, l, v, err, errlen)) { free(v); hf_writer_abort(&w); return -1; }
        }
        free(v);
    }
    return hf_writer_commit(&w, err, errlen);
}

// Read dir back through hf_open/hf_bind/hf_fill and compare with hfl_value; also checks named HF
// tensors directly against our fused tensors' rows. Returns the number of differing values.
static int64_t hfl_check_back(const HFConfig* c, int Vp, const char* dir, char* err, size_t errlen) {
    HflTensor t[16];
    HFLlmcTensor lt[16];
    int n = hfl_layout(c, Vp, t, lt);
    HFCheckpoint ck;
    if (hf_open(&ck, dir, err, errlen)) return -1;
    if (hf_bind(&ck, lt, n, Vp, err, errlen)) { hf_close(&ck); return -1; }
    int64_t total = lt[n - 1].logical + t[n - 1].n;
    float* all = (float*)malloc(sizeof(float) * (size_t)total);
    float* parts = (float*)malloc(sizeof(float) * (size_t)total);
    hf_fill(&ck, all, 0, total);
    for (int64_t at = 0, piece = 1; at < total; at += piece, piece = piece % 53 + 7) // filled in odd pieces: the same
        hf_fill(&ck, parts + at, at, piece < total - at ? piece : total - at);
    int64_t bad = memcmp(all, parts, sizeof(float) * (size_t)total) ? 1 : 0;
    for (int k = 0; k < n; k++)
        for (int l = 0; l < (t[k].io ? 1 : c->L); l++)
            for (int64_t i = 0; i < t[k].n; i++) {
                int pad = (!strcmp(t[k].name, "embed") || !strcmp(t[k].name, "lmhead")) && i >= (int64_t)c->V * c->C;
                float want = pad ? 0.0f : hfl_value(k, l, i), got = all[lt[k].logical + l * t[k].n + i];
                if (ck.files[0].t[0].dtype == ST_BF16) want = bf16_to_f32(f32_to_bf16(want));
                if (ck.files[0].t[0].dtype == ST_F16) want = f16_to_f32(f32_to_f16(want));
                bad += memcmp(&want, &got, 4) != 0;
            }
    // a few Hugging Face tensors by name: k_proj is rows Q..Q+K of wqkv, up_proj rows F..2F of wgu, v's bias
    int64_t Q = (int64_t)c->NH * c->HD, K = (int64_t)c->NKV * c->HD;
    // (fused: -1 every config, 0 those with separate q/k/v and gate/up, 1 Phi-3's fused ones)
    struct { const char* hf; int k; int64_t at; int fused; } named[] = {
        {"model.layers.1.self_attn.k_proj.weight", 2, Q * c->C, 0}, {"model.layers.1.mlp.up_proj.weight", 8, (int64_t)c->F * c->C, 0},
        {"model.layers.0.self_attn.v_proj.bias", 3, Q + K, 0}, {"model.layers.1.self_attn.o_proj.weight", 6, 0, -1}, {"lm_head.weight", 13, 0, -1},
        {"model.layers.1.self_attn.k_norm.weight", 5, 0, -1},
        {"model.layers.1.self_attn.qkv_proj.weight", 2, 0, 1}, {"model.layers.0.mlp.gate_up_proj.weight", 8, 0, 1},
    };
    for (size_t q = 0; q < sizeof(named) / sizeof(named[0]); q++) {
        const StTensor* s = NULL;
        int fi = 0;
        for (int f = 0; f < ck.nfiles && !s; f++) if ((s = st_find(&ck.files[f], named[q].hf))) fi = f;
        if (t[named[q].k].n == 0 || (named[q].fused >= 0 && named[q].fused != c->fused)) { bad += s != NULL; continue; } // absent in this config: not in the file
        if (!s) { bad++; continue; }
        int l = strstr(named[q].hf, "layers.1") ? 1 : 0;
        if (s->numel != (named[q].fused == 1 ? t[named[q].k].n : s->numel)) { bad++; continue; } // a fused tensor is the whole of ours
        for (int64_t i = 0; i < s->numel; i++) {
            float want = hfl_value(named[q].k, l, named[q].at + i);
            if (s->dtype == ST_BF16) want = bf16_to_f32(f32_to_bf16(want));
            if (s->dtype == ST_F16) want = f16_to_f32(f32_to_f16(want));
            bad += st_get(&ck.files[fi], s, i) != want;
        }
    }
    free(all);
    free(parts);
    hf_close(&ck);
    return bad;
}

TEST(hf_llama_mapping_roundtrip) {
    struct { const char* what; HFConfig c; StDtype dt; } cases[] = {
        {"llama untied, mlp_bias, F32", hfl_tiny(HF_ARCH_LLAMA, 0, 1), ST_F32},
        {"qwen2 tied (q/k/v biases), BF16", hfl_tiny(HF_ARCH_QWEN2, 1, 0), ST_BF16},
        {"mistral untied, F32", hfl_tiny(HF_ARCH_MISTRAL, 0, 0), ST_F32},
        {"llama attention_bias, mlp_bias, tied, F16", hfl_tiny_biases(), ST_F16},
        {"qwen3 untied (q/k norms), BF16", hfl_tiny(HF_ARCH_QWEN3, 0, 0), ST_BF16},
        {"phi3 untied (qkv_proj, gate_up_proj), F32", hfl_tiny(HF_ARCH_PHI3, 0, 0), ST_F32},
    };
    char dir[PATH_MAX], err[1024];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/hfl_map_%zu", test_tmpdir(), i);
        int Vp = (int)round_up(cases[i].c.V, 8);
        int rc = hfl_export(&cases[i].c, Vp, dir, cases[i].dt, err, sizeof(err));
        CHECKF(rc == 0, "%s: export: %s", cases[i].what, err);
        if (rc) continue;
        int64_t bad = hfl_check_back(&cases[i].c, Vp, dir, err, sizeof(err));
        CHECKF(bad == 0, "%s: %lld values differ%s%s", cases[i].what, (long long)bad, bad < 0 ? ": " : "", bad < 0 ? err : "");
        printf("    %-34s every value back in place (q/k/v, gate/up, biases, padding rows 0)\n", cases[i].what);
    }
}

// Above the shard limit: shards named and cut as transformers does, an index with every tensor
// and the total size; read back the same; a later single-file export into the same directory
// removes the shards and the index (and the other way round).
TEST(hf_llama_export_shards) {
    HFConfig c = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    int Vp = (int)round_up(c.V, 8);
    char dir[PATH_MAX], err[1024], p[PATH_MAX + 64];
    snprintf(dir, sizeof(dir), "%s/hfl_shards", test_tmpdir());
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
    setenv("ZT_HF_SHARD_BYTES", "4000", 1); // ~34 KB in F32; the largest tensors (q_proj, o_proj) are 3840 B
    int rc = hfl_export(&c, Vp, dir, ST_F32, err, sizeof(err));
    unsetenv("ZT_HF_SHARD_BYTES");
    CHECKF(rc == 0, "sharded export: %s", err);
    if (rc) return;
    snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
    char* text;
    size_t len;
    CHECK(hf_read_file(p, &text, &len, 1 << 20, err, sizeof(err)) == 0);
    Json j;
    char jerr[256];
    CHECK(json_parse(&j, text, len, jerr, sizeof(jerr)) == 0);
    int md = json_get(&j, 0, "metadata"), wm = json_get(&j, 0, "weight_map");
    int ts = json_get(&j, md, "total_size");
    int64_t want_total = 0;
    HFTensorRow rows[HF_MAX_ROWS];
    int nrows = hf_rows(&c, rows), ntensors = 0;
    for (int k = 0; k < nrows; k++)
        if (rows[k].present) { want_total += hf_row_numel(&rows[k]) * 4 * (rows[k].per_layer ? c.L : 1); ntensors += rows[k].per_layer ? c.L : 1; }
    CHECKF(ts >= 0 && j.nodes[ts].i == want_total, "total_size %lld, want %lld", ts >= 0 ? (long long)j.nodes[ts].i : -1ll, (long long)want_total);
    CHECKF(wm >= 0 && j.nodes[wm].count == ntensors, "weight_map has %d tensors, want %d", wm >= 0 ? j.nodes[wm].count : -1, ntensors);
    int nshards = 0;
    for (int f = 1; f < 100; f++) {
        snprintf(p, sizeof(p), "%s/model-%05d-of-", dir, f);
        char q[PATH_MAX + 96];
        int found = 0;
        for (int nn = f; nn < 100 && !found; nn++) { snprintf(q, sizeof(q), "%s%05d.safetensors", p, nn); found = hf_exists(q); }
        if (!found) break;
        nshards++;
    }
    int k_emb = json_get(&j, wm, "model.embed_tokens.weight"), k_head = json_get(&j, wm, "lm_head.weight");
    char first[64], last[64];
    snprintf(first, sizeof(first), "model-00001-of-%05d.safetensors", nshards);
    snprintf(last, sizeof(last), "model-%05d-of-%05d.safetensors", nshards, nshards);
    CHECKF(nshards >= 4 && k_emb >= 0 && !strcmp(j.nodes[k_emb].str, first) && k_head >= 0 && !strcmp(j.nodes[k_head].str, last),
           "%d shards; embed in %s, lm_head in %s", nshards, k_emb >= 0 ? j.nodes[k_emb].str : "?", k_head >= 0 ? j.nodes[k_head].str : "?");
    json_free(&j);
    free(text);
    int64_t bad = hfl_check_back(&c, Vp, dir, err, sizeof(err));
    CHECKF(bad == 0, "sharded: %lld values differ%s%s", (long long)bad, bad < 0 ? ": " : "", bad < 0 ? err : "");
    printf("    %d shards + index (total_size %lld): every value back in place\n", nshards, (long long)want_total);
    // a single-file export into the same directory: the shards and the index go
    rc = hfl_export(&c, Vp, dir, ST_BF16, err, sizeof(err));
    CHECKF(rc == 0, "single export: %s", err);
    snprintf(p, sizeof(p), "%s/model-00001-of-%05d.safetensors", dir, nshards);
    int stale = hf_exists(p);
    snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
    stale += hf_exists(p);
    CHECKF(stale == 0, "a single-file export left %d stale shard/index file(s)", stale);
    bad = hfl_check_back(&c, Vp, dir, err, sizeof(err));
    CHECKF(bad == 0, "single after sharded: %lld values differ%s%s", (long long)bad, bad < 0 ? ": " : "", bad < 0 ? err : "");
    // and sharded again: model.safetensors goes
    setenv("ZT_HF_SHARD_BYTES", "4000", 1);
    rc = hfl_export(&c, Vp, dir, ST_F32, err, sizeof(err));
    unsetenv("ZT_HF_SHARD_BYTES");
    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    CHECKF(rc == 0 && !hf_exists(p), "a sharded export left model.safetensors: %s", rc ? err : "");
}

// Corrupt Llama checkpoints: each refusal names the file and the tensor.
static void hfl_edit_header(const char* file, const char* from, const char* to) {
    // rewrite a single-file checkpoint's header with one substring replaced (same data)
    FILE* f = fopen(file, "rb");
    if (!f) return;
    uint64_t hl;
    if (fread(&hl, 8, 1, f) != 1) { fclose(f); return; }
    char* h = (char*)calloc(hl + 1, 1);
    size_t got = fread(h, 1, hl, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long dlen = size - 8 - (long)hl;
    char* data = (char*)malloc((size_t)dlen + 1);
    fseek(f, 8 + (long)hl, SEEK_SET);
    size_t dgot = fread(data, 1, (size_t)dlen, f);
    fclose(f);
    (void)got; (void)dgot;
    char* p = strstr(h, from);
    if (!p) { printf("    (test setup: '%s' not in the header)\n", from); free(h); free(data); return; }
    size_t nl = strlen(h) - strlen(from) + strlen(to);
    char* nh = (char*)malloc(nl + 8);
    snprintf(nh, nl + 8, "%.*s%s%s", (int)(p - h), h, to, p + strlen(from));
    while (strlen(nh) % 8) strcat(nh, " ");
    f = fopen(file, "wb");
    uint64_t nhl = strlen(nh);
    fwrite(&nhl, 8, 1, f);
    fwrite(nh, 1, nhl, f);
    fwrite(data, 1, (size_t)dlen, f);
    fclose(f);
    free(h); free(data); free(nh);
}

TEST(hf_llama_corrupt) {
    HFConfig c = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    int Vp = (int)round_up(c.V, 8);
    char dir[PATH_MAX], err[2048], p[PATH_MAX + 64], cmd[4 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/hfl_bad", test_tmpdir());
    HflTensor t[16];
    HFLlmcTensor lt[16];
    int n = hfl_layout(&c, Vp, t, lt);
    static const struct { const char* what; const char* from; const char* to; const char* expect[2]; } cases[] = {
        {"a missing tensor", "model.layers.1.mlp.down_proj.weight", "model.layers.1.self_attn.rotary_emb.inv_freq", {"model.layers.1.mlp.down_proj.weight", "missing"}},
        {"a wrong shape", "\"model.layers.0.self_attn.k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[20,16]", "\"model.layers.0.self_attn.k_proj.weight\":{\"dtype\":\"F32\",\"shape\":[16,20]",
         {"model.layers.0.self_attn.k_proj.weight", "shape (16, 20), but"}},
        {"a bias the config does not have", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias", {"q_proj.bias", "not part of a llama"}},
        {"an I32 tensor", "\"model.norm.weight\":{\"dtype\":\"F32\"", "\"model.norm.weight\":{\"dtype\":\"I32\"", {"model.norm.weight", "dtype I32 is not supported"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        test_run_cmd(cmd, NULL, 0);
        CHECK(hfl_export(&c, Vp, dir, ST_F32, err, sizeof(err)) == 0);
        snprintf(p, sizeof(p), "%s/model.safetensors", dir);
        hfl_edit_header(p, cases[i].from, cases[i].to);
        HFCheckpoint ck;
        int rc = hf_open(&ck, dir, err, sizeof(err));
        CHECKF(rc != 0 && strstr(err, dir) && strstr(err, cases[i].expect[0]) && strstr(err, cases[i].expect[1]),
               "%s: want the file, '%s' and '%s': %s", cases[i].what, cases[i].expect[0], cases[i].expect[1], rc ? err : "accepted");
        if (rc == 0) hf_close(&ck);
        printf("    %-34s %s\n", cases[i].what, rc ? err : "accepted");
    }
    // a tied config with a stored lm_head: accepted when equal to the embedding, refused when not
    HFConfig ct = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
    CHECK(hfl_export(&ct, Vp, dir, ST_F32, err, sizeof(err)) == 0); // untied: lm_head stored (values differ from embed)
    snprintf(p, sizeof(p), "%s/config.json", dir);
    ct.tied = 1;
    char text[8192];
    hf_config_text(&ct, ST_F32, text, sizeof(text));
    hfl_write_text(p, text);
    HFCheckpoint ck;
    int rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "lm_head.weight differs from model.embed_tokens.weight") && strstr(err, "tie_word_embeddings"), "tied, lm_head differs: %s", rc ? err : "accepted");
    if (rc == 0) hf_close(&ck);
    // a shard index naming a file that is not there
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
    setenv("ZT_HF_SHARD_BYTES", "4000", 1);
    CHECK(hfl_export(&c, Vp, dir, ST_F32, err, sizeof(err)) == 0);
    unsetenv("ZT_HF_SHARD_BYTES");
    snprintf(cmd, sizeof(cmd), "rm %s/model-00002-of-*.safetensors", dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "model.safetensors.index.json") && strstr(err, "model-00002-of-") && strstr(err, "does not exist"), "a missing shard: %s", rc ? err : "accepted");
    if (rc == 0) hf_close(&ck);
    printf("    %-34s %s\n", "an index naming a missing shard", rc ? err : "accepted");
    // Llama's attention_bias: the o_proj bias the export writes as zeros loads; a nonzero one is refused
    HFConfig cb = hfl_tiny_biases();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run_cmd(cmd, NULL, 0);
    CHECK(hfl_export(&cb, Vp, dir, ST_F32, err, sizeof(err)) == 0);
    rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc == 0 && ck.cfg.o_bias == 1 && ck.cfg.qkv_bias == 1, "attention_bias true with a zero o_proj bias: %s", rc ? err : "flags");
    if (rc == 0) hf_close(&ck);
    StFile sf;
    snprintf(p, sizeof(p), "%s/model.safetensors", dir);
    CHECK(st_open(&sf, p, err, sizeof(err)) == 0);
    const StTensor* ob = st_find(&sf, "model.layers.1.self_attn.o_proj.bias");
    CHECK(ob != NULL);
    long at = ob ? (long)(sf.data_start + ob->begin + 4 * 3) : 0;
    st_close(&sf);
    FILE* f = fopen(p, "r+b");
    float half = 0.5f;
    CHECK(f && ob && fseek(f, at, SEEK_SET) == 0 && fwrite(&half, 4, 1, f) == 1);
    if (f) fclose(f);
    rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "model.layers.1.self_attn.o_proj.bias") && strstr(err, "element 3 is 0.5") && strstr(err, dir), "a nonzero o_proj bias: %s", rc ? err : "accepted");
    if (rc == 0) hf_close(&ck);
    printf("    %-34s %s\n", "a nonzero o_proj bias", rc ? err : "accepted");
    (void)n;
}

// Which architecture -export-hf writes: the source's when it can hold the model, else Qwen2 for q/k/v
// biases (without MLP biases, head_dim = C / NH), else Llama (q/k/v biases: attention_bias true,
// a zero o_proj bias).
TEST(hf_llama_export_arch) {
    char err[512];
    HFConfig c = hfl_tiny(HF_ARCH_LLAMA, 0, 0), src = hfl_tiny(HF_ARCH_MISTRAL, 0, 0);
    src.window = 4096;
    snprintf(src.eos, sizeof(src.eos), "2");
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_MISTRAL && c.window == 4096 && !strcmp(c.eos, "2"));
    c = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    CHECK(hf_export_arch(&c, NULL, err, sizeof(err)) == 0 && c.arch == HF_ARCH_LLAMA && c.window == 0);
    c = hfl_tiny(HF_ARCH_QWEN2, 1, 0);
    c.arch = HF_ARCH_LLAMA; // (a from-scratch model with q/k/v biases)
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_QWEN2 && c.window == 0);
    c.mlp_bias = 1; // q/k/v + MLP biases: Llama, attention_bias with a zero o_proj bias
    CHECK(hf_export_arch(&c, NULL, err, sizeof(err)) == 0 && c.arch == HF_ARCH_LLAMA && c.o_bias == 1);
    c = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    c.qkv_bias = 1; // head_dim 10 != 16 / 6: not Qwen2 either, Llama
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_LLAMA && c.o_bias == 1);
    // q/k norms: Qwen3 whatever the source says (no other architecture has them), with attention_bias
    // as Llama's; MLP biases beside them: no architecture, refused
    c = hfl_tiny(HF_ARCH_QWEN3, 0, 0);
    c.arch = HF_ARCH_LLAMA;
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_QWEN3 && c.o_bias == 0 && c.window == 0);
    c.qkv_bias = 1;
    CHECK(hf_export_arch(&c, NULL, err, sizeof(err)) == 0 && c.arch == HF_ARCH_QWEN3 && c.o_bias == 1);
    src = hfl_tiny(HF_ARCH_QWEN3, 0, 0);
    snprintf(src.eos, sizeof(src.eos), "151645");
    c = hfl_tiny(HF_ARCH_QWEN3, 0, 0);
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_QWEN3 && !strcmp(c.eos, "151645"));
    c = hfl_tiny(HF_ARCH_LLAMA, 0, 0); // a model without them is never written as Qwen3
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_LLAMA);
    c = hfl_tiny(HF_ARCH_QWEN3, 0, 1);
    CHECKF(hf_export_arch(&c, NULL, err, sizeof(err)) != 0 && strstr(err, "q/k norms with MLP biases"), "%s", err);
    // Phi-3's fused names: Phi-3 only, with the source's window and original length; never for others
    src = hfl_tiny(HF_ARCH_PHI3, 0, 0);
    src.window = 2047; src.orig_maxT = 4096;
    c = hfl_tiny(HF_ARCH_PHI3, 0, 0);
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_PHI3 && c.window == 2047 && c.orig_maxT == 4096);
    c = hfl_tiny(HF_ARCH_PHI3, 0, 0);
    c.arch = HF_ARCH_LLAMA;
    CHECK(hf_export_arch(&c, NULL, err, sizeof(err)) == 0 && c.arch == HF_ARCH_PHI3 && c.orig_maxT == c.maxT);
    c = hfl_tiny(HF_ARCH_LLAMA, 0, 0);
    CHECK(hf_export_arch(&c, &src, err, sizeof(err)) == 0 && c.arch == HF_ARCH_LLAMA);
    c = hfl_tiny(HF_ARCH_PHI3, 0, 1);
    CHECKF(hf_export_arch(&c, &src, err, sizeof(err)) != 0 && strstr(err, "Phi3ForCausalLM has none"), "%s", err);
    c = hfl_tiny(HF_ARCH_PHI3, 0, 0);
    c.rope_type = HF_ROPE_LINEAR; c.rope_factor = 2;
    CHECKF(hf_export_arch(&c, &src, err, sizeof(err)) != 0 && strstr(err, "Phi3ForCausalLM has none"), "%s", err);
}


// ----------------------------------------------------------------------------
// The fixtures transformers 4.47.1 wrote (dev/hf_fixtures.py): read into our layout, then written
// by our writer with the same dtype and shard limit: every shard and the index are the same bytes
// as transformers' (save_pretrained's shard cut, names sorted in each header, the index's text),
// and config.json says the same.

static const char* g_hfl_cases[] = {"llama_gqa4_llama3", "llama_mha_linear", "qwen2_single_kv", "mistral_gqa2", "qwen3_qknorm", "phi3_fused"};
#define HFL_NCASES 6 // (qwen3_qknorm: written by safetensors' save_file, as save_pretrained would; its model is Qwen2's modules with Qwen3's q/k norms)

static int hfl_same_file(const char* a, const char* b) {
    char cmd[2 * PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", a, b);
    return test_run_cmd(cmd, NULL, 0) == 0;
}

TEST(hf_llama_writer_matches_transformers) {
    for (int ci = 0; ci < HFL_NCASES; ci++) {
        char src[PATH_MAX], dst[PATH_MAX], err[2048], cmd[2 * PATH_MAX];
        snprintf(src, sizeof(src), "test/fixtures/hf/%s", g_hfl_cases[ci]);
        snprintf(dst, sizeof(dst), "%s/hfl_rewrite_%s", test_tmpdir(), g_hfl_cases[ci]);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dst);
        test_run_cmd(cmd, NULL, 0);
        HFCheckpoint ck;
        int rc = hf_open(&ck, src, err, sizeof(err));
        CHECKF(rc == 0, "%s", err);
        if (rc) continue;
        HFConfig c = ck.cfg;
        int Vp = (int)round_up(c.V, 128);
        HflTensor t[16];
        HFLlmcTensor lt[16];
        int n = hfl_layout(&c, Vp, t, lt);
        rc = hf_bind(&ck, lt, n, Vp, err, sizeof(err));
        CHECKF(rc == 0, "%s: %s", src, err);
        int64_t total = lt[n - 1].logical + t[n - 1].n;
        float* all = (float*)malloc(sizeof(float) * (size_t)total);
        hf_fill(&ck, all, 0, total);
        StDtype dt = ck.files[0].t[0].dtype;
        int sharded = ck.nfiles > 1;
        hf_close(&ck);
        if (sharded) setenv("ZT_HF_SHARD_BYTES", "8000", 1); // save_pretrained(max_shard_size="8KB")
        HFWriter w;
        rc = hf_writer_open(&w, dst, &c, dt, err, sizeof(err));
        unsetenv("ZT_HF_SHARD_BYTES");
        for (int k = 0; k < n && rc == 0; k++)
            for (int l = 0; l < (t[k].io ? 1 : c.L) && rc == 0 && t[k].n; l++)
                rc = hf_writer_put(&w, t[k].name, l, all + lt[k].logical + l * t[k].n, err, sizeof(err));
        if (rc == 0) rc = hf_writer_commit(&w, err, sizeof(err));
        else hf_writer_abort(&w);
        free(all);
        CHECKF(rc == 0, "%s: writing: %s", src, err);
        if (rc) continue;
        // every file transformers wrote but config.json and generation_config.json: the same bytes
        int nsame = 0, ndiff = 0;
        DIR* d = opendir(src);
        struct dirent* e;
        while (d && (e = readdir(d))) {
            if (!hf_has_suffix(e->d_name, ".safetensors") && strcmp(e->d_name, "model.safetensors.index.json")) continue;
            char a[2 * PATH_MAX], b[2 * PATH_MAX];
            snprintf(a, sizeof(a), "%s/%s", src, e->d_name);
            snprintf(b, sizeof(b), "%s/%s", dst, e->d_name);
            if (hfl_same_file(a, b)) nsame++;
            else { ndiff++; printf("    %s differs from ours\n", a); }
        }
        if (d) closedir(d);
        CHECKF(ndiff == 0 && nsame >= 1, "%s: %d file(s) differ from transformers'", src, ndiff);
        HFConfig theirs, ours;
        char p1[PATH_MAX + 16], p2[PATH_MAX + 16];
        snprintf(p1, sizeof(p1), "%s/config.json", src);
        snprintf(p2, sizeof(p2), "%s/config.json", dst);
        CHECK(hf_read_config(p1, &theirs, err, sizeof(err)) == 0 && hf_read_config(p2, &ours, err, sizeof(err)) == 0);
        CHECKF(!memcmp(&theirs, &ours, sizeof(ours)), "%s: our config.json reads differently from transformers'", src);
        printf("    %-18s %s, %s: %d file(s) byte-identical to transformers' save_pretrained, config.json equivalent\n", g_hfl_cases[ci],
               hf_arch_name(c.arch), st_dtype_name(dt), nsame);
    }
}

// The contract with model.h: the fixtures bound to model_describe's layout (config_from_hf's
// config) fill exactly what they fill in LLAMA.md's layout written out above (hfl_layout).
TEST(hf_llama_binds_model_table) {
    for (int ci = 0; ci < HFL_NCASES; ci++) {
        char src[PATH_MAX], err[2048];
        snprintf(src, sizeof(src), "test/fixtures/hf/%s", g_hfl_cases[ci]);
        HFCheckpoint ck;
        int rc = hf_open(&ck, src, err, sizeof(err));
        CHECKF(rc == 0, "%s", err);
        if (rc) continue;
        GPTConfig c;
        config_from_hf(&ck.cfg, &c);
        c.Vp = (int)round_up(c.V, 128);
        ModelDesc d;
        model_describe(&d, &c);
        HFLlmcTensor lt[NUM_TENSORS];
        for (int k = 0; k < NUM_TENSORS; k++) lt[k] = (HFLlmcTensor){d.t[k].name, d.t[k].logical, d.t[k].n, !d.t[k].io};
        rc = hf_bind(&ck, lt, NUM_TENSORS, c.Vp, err, sizeof(err));
        CHECKF(rc == 0, "%s: binding to model.h's table: %s", src, err);
        HflTensor t2[16];
        HFLlmcTensor lt2[16];
        int n2 = hfl_layout(&ck.cfg, c.Vp, t2, lt2);
        int64_t total2 = lt2[n2 - 1].logical + t2[n2 - 1].n;
        CHECKF(d.num_params == total2, "%s: model.h has %lld parameters, LLAMA.md's table %lld", src, (long long)d.num_params, (long long)total2);
        if (rc || d.num_params != total2) { hf_close(&ck); continue; }
        float* a = (float*)malloc(sizeof(float) * (size_t)total2);
        float* b = (float*)malloc(sizeof(float) * (size_t)total2);
        hf_fill(&ck, a, 0, total2);
        CHECK(hf_bind(&ck, lt2, n2, c.Vp, err, sizeof(err)) == 0);
        hf_fill(&ck, b, 0, total2);
        CHECKF(!memcmp(a, b, sizeof(float) * (size_t)total2), "%s: model.h's logical order differs from LLAMA.md's", src);
        free(a);
        free(b);
        hf_close(&ck);
    }
}

#ifndef ENABLE_FP32
// Refused at start-up as a process: exit 2, the file, the field and its value, nothing written.
TEST(hf_llama_refused_at_startup) {
    char dir[PATH_MAX], out[PATH_MAX], cmd[6 * PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/hfl_proc", test_tmpdir());
    snprintf(out, sizeof(out), "%s/hfl_proc_out", test_tmpdir());
    static const struct { const char* what; const char* sed; const char* t; const char* expect[3]; } cases[] = {
        {"yarn RoPE", "s/\"rope_theta\"/\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}, \"rope_theta\"/", "16", {"config.json", "rope_type = 'yarn'", "not supported"}},
        {"a window shorter than T", "s/\"sliding_window\": 4096/\"sliding_window\": 24/", "32", {"config.json", "sliding_window = 24", "T = 32"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(cmd, sizeof(cmd), "rm -rf %s %s && cp -r test/fixtures/hf/mistral_gqa2 %s && sed -i '%s' %s/config.json && "
                 "%s --train -device cpu -e %s -i data/kjv_val.bin -j '' -b 1 -t %s -x 1 -v 0 -s 0 -export-hf %s; echo rc=$?; ls %s 2>/dev/null | wc -l",
                 dir, out, dir, cases[i].sed, dir, g_test_self, dir, cases[i].t, out, out);
        static char got[1 << 16];
        test_run_cmd(cmd, got, sizeof(got));
        const char* err = strstr(got, "error: ");
        char line[1024] = "";
        if (err) { snprintf(line, sizeof(line), "%s", err); char* nl = strchr(line, '\n'); if (nl) *nl = 0; }
        CHECKF(strstr(got, "rc=2\n0\n") && err && strstr(line, cases[i].expect[0]) && strstr(line, cases[i].expect[1]) && strstr(line, cases[i].expect[2]),
               "%s: want exit 2, nothing written, and '%s' ... '%s':\n%s", cases[i].what, cases[i].expect[1], cases[i].expect[2], got);
        printf("    %-26s %s\n", cases[i].what, line);
    }
}
#endif

// ----------------------------------------------------------------------------
// Our loss and logits against transformers' LlamaForCausalLM / Qwen2ForCausalLM /
// MistralForCausalLM (dev/hf_fixtures.py, float64 but for what transformers itself computes in
// FP32: RMSNorm, the eager softmax, RoPE's cos/sin) on the fixtures' KJV tokens, through -e DIR.
static void hfl_forward_vs_ref(const char* dir, double* el_out, double* eloss_out, float* loss_out, float* ref_out) {
    char ref[PATH_MAX + 16], err[512];
    snprintf(ref, sizeof(ref), "%s/ref.bin", dir);
    *el_out = *eloss_out = 1e30;
    Fixture fx;
    if (fixture_load(&fx, ref, err, sizeof(err))) { printf("    %s\n", err); CHECK(0); return; }
    const FixtureTensor* tk = fixture_get(&fx, "tokens");
    int B = tk->dims[0], T = tk->dims[1] - 1;
    char shard[PATH_MAX];
    snprintf(shard, sizeof(shard), "%s/hfl_tokens.bin", test_tmpdir());
    uint16_t* toks = (uint16_t*)malloc(sizeof(uint16_t) * tk->n);
    for (int64_t i = 0; i < tk->n; i++) toks[i] = (uint16_t)((int*)tk->data)[i];
    int rc = write_token_shard(shard, toks, tk->n, err, sizeof(err));
    free(toks);
    if (rc) { printf("    %s\n", err); CHECK(0); fixture_free(&fx); return; }
    char flags[1024];
    snprintf(flags, sizeof(flags), MODEL_DEVICE "-e %s -i %s -b %d -t %d -x 0 -v 0 -s 0 -shuffle 0 -r 0 -z 0 -blas 0", dir, shard, B, T);
    Trainer* tr = tm_trainer(flags);
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    dataloader_load(&tr->train, 0);
    const int* tok = (const int*)tk->data;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            tr->train.inputs[b * T + t] = tok[b * (T + 1) + t];
            tr->train.targets[b * T + t] = tok[b * (T + 1) + t + 1];
        }
    load_tokens(m, &tr->train, 1);
    gpt_forward(m, B, T, 1, 0.0f, 0);
    int BT = B * T;
    float* logits = (float*)malloc(sizeof(float) * BT * c->V);
    floatX* lx = (floatX*)tm_host(m->a.logits, sizeof(floatX) * BT * c->Vp);
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < c->V; j++) logits[i * c->V + j] = ld(lx[(int64_t)i * c->Vp + j]);
    free(lx);
    const FixtureTensor* rl = fixture_get(&fx, "logits");
    CHECKF(rl->n == (int64_t)BT * c->V, "%s: reference logits have %lld values", dir, (long long)rl->n);
    *el_out = tm_relerr_f(logits, (const float*)rl->data, (int64_t)BT * c->V);
    *loss_out = (float)(sum_losses(m, BT) / BT);
    *ref_out = ((const float*)fixture_get(&fx, "loss")->data)[0];
    *eloss_out = fabs(*loss_out - *ref_out) / fabs(*ref_out);
    free(logits);
    tm_free(tr);
    fixture_free(&fx);
}

TEST(hf_llama_vs_transformers) {
    for (int ci = 0; ci < HFL_NCASES; ci++) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "test/fixtures/hf/%s", g_hfl_cases[ci]);
        double el, eloss;
        float loss = 0, ref = 0;
        hfl_forward_vs_ref(dir, &el, &eloss, &loss, &ref);
        CHECKF(el < TOL_HF_LLAMA_LOGITS, "%s: logits rel err %.3g", dir, el);
        CHECKF(eloss < TOL_HF_LLAMA_LOSS, "%s: loss %.7f vs transformers %.7f (rel %.3g)", dir, loss, ref, eloss);
        printf("    %-18s logits rel L2 %.2e, loss %.6f vs transformers %.6f (rel %.1e)\n", g_hfl_cases[ci], el, loss, ref, eloss);
    }
}

#ifndef ENABLE_FP32
// -export-hf of a Llama-family model, read back by transformers: two fixtures and the
// llama-tiny-tied descriptor (q/k/v and MLP biases, tied: LlamaForCausalLM with attention_bias,
// its o_proj bias zeros; make test-long only) trained 3 steps
// (their weights change; the Llama one at R = 2 under ZeRO-3: loaded per rank, gathered for the
// export), exported in F32 (the Llama one in shards through the test hook), then
// our logits through -e EXPORTED against AutoModelForCausalLM.from_pretrained(EXPORTED)'s in
// float64 (one python start for both), and the architecture written is the source's.
TEST(hf_llama_export_vs_transformers) {
    const char* py = getenv("ZT_HF_PYTHON") && *getenv("ZT_HF_PYTHON") ? getenv("ZT_HF_PYTHON") : "python3";
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import transformers, safetensors, torch; assert tuple(map(int, transformers.__version__.split(\".\")[:2])) >= (4, 47)'", py);
    if (test_run_cmd(probe, NULL, 0) != 0) // (4.38 has no head_dim for Llama and no rope_type llama3)
        TEST_SKIP("needs a python with transformers 4.47 or later (ZT_HF_PYTHON; .ci/run makes a venv: pip install transformers==4.47.1)");
    static const struct { const char* src; const char* cls; const char* shard_bytes; } cases[] = {
        {"llama_gqa4_llama3", "LlamaForCausalLM", "50000"}, {"qwen2_single_kv", "Qwen2ForCausalLM", ""},
        {"qwen3_qknorm", "Qwen3ForCausalLM", ""}, {"phi3_fused", "Phi3ForCausalLM", ""},
        {"llama-tiny-tied", "LlamaForCausalLM", ""}}; // a descriptor: q/k/v + MLP biases, tied: attention_bias with a zero o_proj bias
    const char* lng = getenv("ZT_TEST_LONG");
    const int NC = lng && *lng == '1' ? 5 : 4; // make test: the four fixtures; make test-long adds the descriptor
    char pycmd[8 * PATH_MAX];
    snprintf(pycmd, sizeof(pycmd), "%s dev/hf_fixtures.py --logits", py);
    float* ours[5] = {NULL, NULL, NULL, NULL, NULL};
    int64_t nlog[5] = {0, 0, 0, 0, 0};
    char theirs[5][PATH_MAX];
    for (int ci = 0; ci < NC; ci++) {
        char src[PATH_MAX], dir[PATH_MAX], shard[PATH_MAX], tokens[PATH_MAX], cmd[6 * PATH_MAX], err[512];
        static char out[1 << 16];
        int descriptor = strchr(cases[ci].src, '-') != NULL;
        if (descriptor) snprintf(src, sizeof(src), "%s", cases[ci].src);
        else snprintf(src, sizeof(src), "test/fixtures/hf/%s", cases[ci].src);
        snprintf(dir, sizeof(dir), "%s/hfl_exported_%s", test_tmpdir(), cases[ci].src);
        snprintf(shard, sizeof(shard), "%s/hfl_train_%s.bin", test_tmpdir(), cases[ci].src);
        snprintf(tokens, sizeof(tokens), "%s/hfl_tokens_%s.i32", test_tmpdir(), cases[ci].src);
        snprintf(theirs[ci], sizeof(theirs[ci]), "%s/hfl_logits_%s.f32", test_tmpdir(), cases[ci].src);
        HFConfig hc;
        snprintf(cmd, sizeof(cmd), "%s/config.json", src);
        if (descriptor) { memset(&hc, 0, sizeof(hc)); hc.arch = HF_ARCH_LLAMA; hc.V = 50257; }
        else CHECK(hf_read_config(cmd, &hc, err, sizeof(err)) == 0);
        uint16_t toks[2048]; // KJV tokens modulo the model's vocabulary
        FILE* f = fopen("data/kjv_val.bin", "rb");
        CHECK(f && fseek(f, 1024, SEEK_SET) == 0 && fread(toks, 2, 2048, f) == 2048);
        if (f) fclose(f);
        for (int i = 0; i < 2048; i++) toks[i] = (uint16_t)(toks[i] % hc.V);
        CHECK(write_token_shard(shard, toks, 2048, err, sizeof(err)) == 0);
        if (ci == 0) // at R = 2, ZeRO-3: each rank reads its own slices, the export gathers them
            snprintf(cmd, sizeof(cmd), "rm -rf %s; " ZT_CLEAN_ENV "ZT_HF_SHARD_BYTES=%s OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe --allow-run-as-root "
                     "--mca mpi_yield_when_idle 1 %s --train -threads 1 -device cpu -z 3 -e %s -i %s -j '' -b 2 -t 16 -x 3 -v 0 -s 0 -l 1e-2 -export-hf %s",
                     dir, cases[ci].shard_bytes, g_test_self, src, shard, dir);
        else
            snprintf(cmd, sizeof(cmd), "rm -rf %s; ZT_HF_SHARD_BYTES=%s OMP_NUM_THREADS=2 %s --train -device cpu -e %s -i %s -j '' -b 2 -t 16 -x 3 -v 0 -s 0 -l 1e-2 -export-hf %s",
                     dir, cases[ci].shard_bytes, g_test_self, src, shard, dir);
        int rc = test_run_cmd(cmd, out, sizeof(out));
        CHECKF(rc == 0, "%s: training and -export-hf failed:\n%s", src, out);
        if (rc) continue;
        snprintf(cmd, sizeof(cmd), "%s/config.json", dir);
        HFConfig back;
        CHECKF(hf_read_config(cmd, &back, err, sizeof(err)) == 0 && back.arch == hc.arch, "%s: exported config.json: %s", src, err);
        if (descriptor) CHECKF(back.o_bias && back.qkv_bias && back.mlp_bias && back.tied && !strcmp(back.eos, "50256"), "%s: exported config.json", src);
        snprintf(cmd, sizeof(cmd), "%s/model.safetensors.index.json", dir);
        CHECKF(hf_exists(cmd) == (cases[ci].shard_bytes[0] != 0), "%s: sharded %d, want %d", src, hf_exists(cmd), cases[ci].shard_bytes[0] != 0);
        // ours, through -e EXPORTED, on the first batch
        char flags[2048];
        snprintf(flags, sizeof(flags), MODEL_DEVICE "-e %s -i %s -b 2 -t 16 -x 0 -v 0 -s 0 -shuffle 0 -r 0 -z 0 -blas 0", dir, shard);
        Trainer* tr = tm_trainer(flags);
        Model* m = &tr->model;
        int B = m->B, T = m->T, V = m->cfg.V;
        dataloader_load(&tr->train, 0);
        load_tokens(m, &tr->train, 0);
        gpt_forward(m, B, T, 0, 0.0f, 0);
        nlog[ci] = (int64_t)B * T * V;
        ours[ci] = (float*)malloc(sizeof(float) * (size_t)nlog[ci]);
        floatX* lx = (floatX*)tm_host(m->a.logits, sizeof(floatX) * B * T * m->cfg.Vp);
        for (int i = 0; i < B * T; i++)
            for (int j = 0; j < V; j++) ours[ci][i * V + j] = ld(lx[(int64_t)i * m->cfg.Vp + j]);
        free(lx);
        CHECK(tm_write_tokens(tokens, B, T, tr->train.inputs, NULL, NULL) == 0);
        tm_free(tr);
        snprintf(pycmd + strlen(pycmd), sizeof(pycmd) - strlen(pycmd), " %s %s %s", dir, tokens, theirs[ci]);
        printf("    %s trained 3 steps%s, exported as %s%s\n", cases[ci].src, ci == 0 ? " at R = 2, -z 3" : "", cases[ci].cls, cases[ci].shard_bytes[0] ? " in shards + index" : "");
    }
    static char out[1 << 16];
    int rc = test_run_cmd(pycmd, out, sizeof(out));
    CHECKF(rc == 0, "%s failed:\n%s", pycmd, out);
    for (int ci = 0; ci < NC && rc == 0; ci++) {
        if (!ours[ci]) continue;
        float* ref = (float*)malloc(sizeof(float) * (size_t)nlog[ci]);
        FILE* f = fopen(theirs[ci], "rb");
        size_t got = f ? fread(ref, sizeof(float), (size_t)nlog[ci], f) : 0;
        if (f) fclose(f);
        double e = got == (size_t)nlog[ci] ? tm_relerr_f(ours[ci], ref, nlog[ci]) : 1.0;
        CHECKF(e < TOL_HF_LLAMA_LOGITS, "%s: logits of the exported model, ours vs transformers: %.3g", cases[ci].src, e);
        printf("    %-18s -export-hf read by %s: logits ours vs transformers %.2e\n", cases[ci].src,
               strcmp(cases[ci].cls, "Qwen3ForCausalLM") ? cases[ci].cls : "Qwen2's modules with q/k norms (dev/hf_fixtures.py's Qwen3)", e);
        free(ref);
    }
    for (int ci = 0; ci < NC; ci++) free(ours[ci]);
}
#endif
