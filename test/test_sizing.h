// test/test_sizing.h — the real models' shape-only descriptors (-e llama3-8b, ...) and -plan for them.
//
// Independent references, none computed by the code under test: the parameter counts the
// publishers state for each model (the safetensors totals on their model pages, equal to
// transformers 4.47.1's num_parameters() on the same config.json, tied head counted once), the
// Hugging Face module-by-module count written here from the config's numbers, and the closed form
// of the model-state bytes per rank (the layout's padding rule and the dtype table, written here).

// Each model's config.json numbers as the test knows them, and its published parameter count.
static const struct {
    const char* name;
    int64_t published;                        // parameters (a tied head once); 0: not reachable here, see card
    int64_t L, C, NH, NKV, HD, F, V, tied, qkv_bias, qk_norm;
    double card;                              // where published is 0: the model card's size in billions, as rounded there
} g_ts_models[] = {
    {"llama3-8b",    8030261248LL,  32, 4096, 32, 8, 128, 14336, 128256, 0, 0, 0, 0},
    {"llama3-70b",   70553706496LL, 80, 8192, 64, 8, 128, 28672, 128256, 0, 0, 0, 0},
    {"llama3.2-1b",  1235814400LL,  16, 2048, 32, 8, 64,  8192,  128256, 1, 0, 0, 0},
    {"llama3.2-3b",  3212749824LL,  28, 3072, 24, 8, 128, 8192,  128256, 1, 0, 0, 0},
    {"qwen2.5-0.5b", 494032768LL,   24, 896,  14, 2, 64,  4864,  151936, 1, 1, 0, 0},
    {"qwen2.5-7b",   7615616512LL,  28, 3584, 28, 4, 128, 18944, 152064, 0, 1, 0, 0},
    {"smollm2-135m", 134515008LL,   30, 576,  9,  3, 64,  1536,  49152,  1, 0, 0, 0},
    {"mistral-7b",   7241732096LL,  32, 4096, 32, 8, 128, 14336, 32000,  0, 0, 0, 0},
    // Qwen3: the safetensors totals are not reachable from here; the model cards say 0.6B (0.44B
    // without the embedding), 8.2B (6.95B), 32.8B (31.2B)
    {"qwen3-0.6b",   0,             28, 1024, 16, 8, 128, 3072,  151936, 1, 0, 1, 0.6},
    {"qwen3-8b",     0,             36, 4096, 32, 8, 128, 12288, 151936, 0, 0, 1, 8.2},
    {"qwen3-32b",    0,             64, 5120, 64, 8, 128, 25600, 151936, 0, 0, 1, 32.8},
    // Phi-3-mini: transformers 4.47.1's Phi3ForCausalLM.num_parameters() on its config (built under accelerate's
    // init_empty_weights); its vocabulary 32064 is not a multiple of 128 (Vp 32128: 64 padded rows in each of the
    // embedding and the head, not counted)
    {"phi-3-mini-4k", 3821079552LL, 32, 3072, 32, 32, 96, 8192,  32064,  0, 0, 0, 0},
};
#define TS_NMODELS (int)(sizeof(g_ts_models) / sizeof(g_ts_models[0]))

static int64_t ts_pad(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// transformers' modules, one by one: embed_tokens; per layer q_proj, k_proj, v_proj (+ biases),
// o_proj, (Qwen3: q_norm, k_norm,) gate_proj, up_proj, down_proj, input_layernorm,
// post_attention_layernorm; norm; lm_head.
static int64_t ts_hf_count(int i) {
    const int64_t C = g_ts_models[i].C, q = g_ts_models[i].NH * g_ts_models[i].HD, kv = g_ts_models[i].NKV * g_ts_models[i].HD;
    const int64_t F = g_ts_models[i].F, V = g_ts_models[i].V;
    int64_t layer = C * q + 2 * C * kv + q * C + 2 * C * F + F * C + 2 * C;
    if (g_ts_models[i].qkv_bias) layer += q + 2 * kv;
    if (g_ts_models[i].qk_norm) layer += 2 * g_ts_models[i].HD;
    return V * C + g_ts_models[i].L * layer + C + (g_ts_models[i].tied ? 0 : V * C);
}

// The blocks of the layout (model.h's table, zero.h's rule): every tensor padded to 8 elements, each
// block to 8R; block 0 the embedding, the final norm and an untied head, one block per layer.
static void ts_blocks(int i, int R, int64_t* Pio, int64_t* Pl) {
    const int64_t C = g_ts_models[i].C, QKV = (g_ts_models[i].NH + 2 * g_ts_models[i].NKV) * g_ts_models[i].HD;
    const int64_t F = g_ts_models[i].F, Vp = ts_pad(g_ts_models[i].V, 128), att = g_ts_models[i].NH * g_ts_models[i].HD;
    int64_t io = ts_pad(Vp * C, 8) + ts_pad(C, 8) + (g_ts_models[i].tied ? 0 : ts_pad(Vp * C, 8));
    int64_t layer = ts_pad(C, 8) + ts_pad(QKV * C, 8) + (g_ts_models[i].qkv_bias ? ts_pad(QKV, 8) : 0) + ts_pad(C * att, 8) +
                    ts_pad(C, 8) + ts_pad(2 * F * C, 8) + ts_pad(C * F, 8) + (g_ts_models[i].qk_norm ? 2 * ts_pad(g_ts_models[i].HD, 8) : 0);
    *Pio = ts_pad(io, 8 * R);
    *Pl = ts_pad(layer, 8 * R);
}

static double ts_shard(int i, int R) {
    int64_t Pio, Pl;
    ts_blocks(i, R, &Pio, &Pl);
    return (double)(Pio + g_ts_models[i].L * Pl) / R;
}

// Model-state bytes per rank (parameters, their ZeRO-3 gather buffers, gradients, the ZeRO-2/3
// gradient buffers, master, m, v): floatX parameters, FP32 gradients, FP32 optimizer state; with
// offload the optimizer state is on the host.
static double ts_state_bytes(int i, int R, int z, int offload) {
    int64_t Pio, Pl;
    ts_blocks(i, R, &Pio, &Pl);
    const double X = sizeof(floatX), total = (double)(Pio + g_ts_models[i].L * Pl), shard = total / R, bufs = (double)(Pio + 2 * Pl);
    return X * (z <= 2 ? total : shard) + (z == 3 ? X * bufs : 0) + 4 * (z <= 1 ? total : shard) + (z >= 2 ? 4 * bufs : 0) +
           (offload ? 0 : 12 * (z == 0 ? total : shard));
}

// Every descriptor has its config's shape, and its parameter count is the published one and the
// module-by-module count (the layout's count without the padded vocabulary rows: none but Phi-3's,
// every other vocabulary here is a multiple of 128).
TEST(sizing_descriptors_published_counts) {
    for (int i = 0; i < TS_NMODELS; i++) {
        GPTConfig c;
        memset(&c, 0, sizeof(c));
        CHECKF(model_from_descriptor(g_ts_models[i].name, &c) == 0, "-e %s: no such descriptor", g_ts_models[i].name);
        c.Vp = (int)ts_pad(c.V, 128);
        CHECKF(c.family == FAMILY_LLAMA && c.L == g_ts_models[i].L && c.C == g_ts_models[i].C && c.NH == g_ts_models[i].NH &&
               c.NKV == g_ts_models[i].NKV && c.HD == g_ts_models[i].HD && c.F == g_ts_models[i].F && c.V == g_ts_models[i].V &&
               c.tied == g_ts_models[i].tied && c.qkv_bias == g_ts_models[i].qkv_bias && c.mlp_bias == 0 && c.qk_norm == g_ts_models[i].qk_norm,
               "%s: the descriptor's shape differs from its config.json", g_ts_models[i].name);
        ModelDesc d;
        model_describe(&d, &c);
        if (g_ts_models[i].published) {
            printf("    %-13s %14lld parameters (published %lld)\n", g_ts_models[i].name, (long long)d.num_real, (long long)g_ts_models[i].published);
            CHECKF(d.num_real == g_ts_models[i].published, "%s: %lld parameters, published %lld", g_ts_models[i].name,
                   (long long)d.num_real, (long long)g_ts_models[i].published);
        } else {
            printf("    %-13s %14lld parameters (model card %.1fB)\n", g_ts_models[i].name, (long long)d.num_real, g_ts_models[i].card);
            CHECKF(fabs(d.num_real / 1e9 - g_ts_models[i].card) < 0.05, "%s: %lld parameters, the model card says %.1fB", g_ts_models[i].name,
                   (long long)d.num_real, g_ts_models[i].card);
        }
        CHECKF(ts_hf_count(i) == d.num_real, "%s: module-by-module count %lld", g_ts_models[i].name, (long long)ts_hf_count(i));
    }
}

// -plan of a real model prints every row and each row's model-state bytes equal the closed form:
// Llama-3-8B at 8 ranks (the recommendation with and without -offload cpu), Llama-3-70B at 64
// ranks of 80 GiB (the command), Qwen2.5-0.5B (tied head, q/k/v biases) at 4, Qwen3-8B
// (q/k norms) at 8.
TEST(sizing_plan_real_models) {
    static const struct { int model, R; const char* extra; } runs[] = {
        {0, 8, ""}, {0, 8, "-offload cpu"}, {1, 64, ""}, {4, 4, ""}, {9, 8, ""},
    };
    for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); k++) {
        int i = runs[k].model, R = runs[k].R;
        const char* dir = zt_dir("sizing");
        char flags[1024], path[PATH_MAX];
        snprintf(flags, sizeof(flags), "-e %s -plan -device cuda -gpu h100 -gpu-mem 80GiB -host-mem 2TiB -world %d -o %s %s",
                 g_ts_models[i].name, R, dir, runs[k].extra);
        int rc = zt_mpirun(1, flags, zt_out, sizeof(zt_out));
        CHECKF(rc == 0, "-plan %s failed (%d):\n%s", flags, rc, zt_out);
        if (rc) continue;
        // a recommendation (none in the FP32 build for the 70B at B 16: 4-byte parameters); with
        // -offload cpu one of its rows
        const char* rec = strstr(zt_out, "recommendation: ");
        CHECKF(rec != NULL, "%s: no recommendation line:\n%s", flags, zt_out);
        if (rec && runs[k].extra[0] && strncmp(rec, "recommendation: none", 20))
            CHECKF(strstr(rec, "-offload cpu") != NULL, "%s: the recommendation does not offload: %s", flags, rec);
        snprintf(path, sizeof(path), "%s/plan.jsonl", dir);
        char* s = zt_read_file(path);
        CHECK(s != NULL);
        if (!s) continue;
        int rows = 0;
        for (char* line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
            int z, r, off, Rj;
            if (sscanf(line, "{\"stage\": %d, \"recompute\": %d, \"offload\": %d, \"R\": %d", &z, &r, &off, &Rj) != 4) continue;
            rows++;
            double state = 0;
            int tags[] = {TAG_PARAMS, TAG_PARAM_BUF, TAG_GRADS, TAG_GRAD_BUF, TAG_MASTER, TAG_ADAM_M, TAG_ADAM_V};
            for (size_t t = 0; t < sizeof(tags) / sizeof(tags[0]); t++) {
                char key[64];
                snprintf(key, sizeof(key), "\"%s\": ", mem_tag_name[tags[t]]);
                const char* p = strstr(line, key);
                CHECKF(p != NULL, "plan.jsonl has no %s", key);
                if (p) state += atof(p + strlen(key));
            }
            double want = ts_state_bytes(i, R, z, off);
            CHECKF(Rj == R && state == want, "%s R=%d z=%d r=%d offload %d: model state %.0f bytes, closed form %.0f", g_ts_models[i].name,
                   R, z, r, off, state, want);
            // offload rows: the host holds at least the shard's master, m and v (and its staging)
            const char* hb = strstr(line, "\"host_bytes\": ");
            if (off == OFFLOAD_CPU) CHECKF(hb && atof(hb + 14) >= 12.0 * ts_shard(i, R), "%s z=%d offload %d: host bytes below the shard's optimizer state",
                            g_ts_models[i].name, z, off);
        }
        CHECKF(rows == 4 * 4 + 2 * 3 * 4, "%s: %d rows, want every stage x recompute mode and the cpu and nvme rows", g_ts_models[i].name, rows);
        free(s);
    }
}
