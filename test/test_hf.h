// test/test_hf.h — Hugging Face GPT-2 checkpoints in (-e DIR) and out (-export-hf), the JSON
// parser and the safetensors reader (safetensors.h, hf.h).
//
// The fixtures under test/fixtures/hf/ were made by transformers (dev/hf_fixtures.py, versions in
// test/fixtures/README.md): three small GPT-2 configs, F32 with the "transformer." prefix and the
// tied lm_head stored, BF16 without the prefix and with the old attn.bias buffers, F16 sharded
// through an index. Our logits and loss on their tokens are compared with GPT2LMHeadModel's
// (float64) within test/tolerances.h. Corrupt files are written here, byte by byte.

// ----------------------------------------------------------------------------
// The JSON parser.

static int hf_json_ok(const char* text) {
    Json j;
    char err[256];
    int rc = json_parse(&j, text, strlen(text), err, sizeof(err));
    json_free(&j);
    return rc == 0;
}

TEST(hf_json_parser) {
    const char* good[] = {"{}", "[]", " {\"a\": [1, -2, 3.5e2, true, false, null, \"x\"]} ", "\"\\u00e9\\ud83d\\ude00\\n\"",
                          "0", "-0.0e+1", "{\"a\":{\"b\":{\"c\":[[]]}}}", "\"caf\xc3\xa9\""};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) CHECKF(hf_json_ok(good[i]), "should parse: %s", good[i]);
    const char* bad[] = {"", "{", "{\"a\" 1}", "{\"a\":1,}", "[1,]", "[01]", "1.", ".5", "-", "1e", "tru", "nul",
                         "{\"a\":1} x", "\"abc", "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"a\tb\"", "{1:2}",
                         "{\"a\":1,\"a\":2}", "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "NaN", "[1 2]", "'a'"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) CHECKF(!hf_json_ok(bad[i]), "should be refused: %s", bad[i]);
    char deep[200];
    for (int i = 0; i < 70; i++) { deep[i] = '['; deep[70 + i] = ']'; }
    deep[140] = 0;
    CHECKF(!hf_json_ok(deep), "nesting 70 deep should be refused");
    // values, keys and escapes come back decoded
    Json j;
    char err[256];
    const char* t = "{\"n\": 9007199254740993, \"s\": \"a\\\"b\\u0041\", \"f\": 1e-05, \"big\": 99999999999999999999}";
    CHECK(json_parse(&j, t, strlen(t), err, sizeof(err)) == 0);
    int n = json_get(&j, 0, "n"), s = json_get(&j, 0, "s"), f = json_get(&j, 0, "f"), big = json_get(&j, 0, "big");
    CHECK(n >= 0 && j.nodes[n].is_int && j.nodes[n].i == 9007199254740993ll);
    CHECK(s >= 0 && !strcmp(j.nodes[s].str, "a\"bA"));
    CHECK(f >= 0 && !j.nodes[f].is_int && j.nodes[f].num == 1e-5);
    CHECK(big >= 0 && !j.nodes[big].is_int);
    CHECK(json_get(&j, 0, "missing") == -1);
    json_free(&j);
}

TEST(hf_half_conversions) {
    // every F16 value survives f16 -> f32 -> f16; a few known values
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue; // NaNs: only NaN-ness is kept
        if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECKF(bad == 0, "%d F16 values do not round-trip", bad);
    CHECK(f16_to_f32(0x3C00) == 1.0f && f16_to_f32(0xC000) == -2.0f && f16_to_f32(0x0001) == 5.9604644775390625e-8f);
    CHECK(f32_to_f16(65520.0f) == 0x7C00 && f32_to_f16(65519.0f) == 0x7BFF); // rounds to inf past the max
    CHECK(f32_to_f16(1.0f + 1.0f / 2048) == 0x3C00);                          // tie to even
    CHECK(f32_to_f16(1.0f + 3.0f / 2048) == 0x3C02);
}

// ----------------------------------------------------------------------------
// The fixtures made by transformers: our logits and loss against GPT2LMHeadModel's.

static const char* g_hf_cases[] = {"f32_prefix", "bf16_bare", "f16_sharded"};

TEST(hf_load_vs_transformers) {
    for (int ci = 0; ci < 3; ci++) {
        char dir[256], ref[300];
        snprintf(dir, sizeof(dir), "test/fixtures/hf/%s", g_hf_cases[ci]);
        snprintf(ref, sizeof(ref), "%s/ref.bin", dir);
        Fixture fx;
        char err[512];
        if (fixture_load(&fx, ref, err, sizeof(err))) { printf("    %s\n", err); CHECK(0); continue; }
        const FixtureTensor* tk = fixture_get(&fx, "tokens");
        int B = tk->dims[0], T = tk->dims[1] - 1;
        // a shard with the tokens (any valid data: the batch is set below)
        char shard[PATH_MAX];
        snprintf(shard, sizeof(shard), "%s/hf_%s.bin", test_tmpdir(), g_hf_cases[ci]);
        uint16_t* toks = (uint16_t*)malloc(sizeof(uint16_t) * tk->n);
        for (int64_t i = 0; i < tk->n; i++) toks[i] = (uint16_t)((int*)tk->data)[i];
        if (write_token_shard(shard, toks, tk->n, err, sizeof(err))) { printf("    %s\n", err); CHECK(0); continue; }
        free(toks);
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
        double el = tm_relerr_f(logits, (const float*)rl->data, (int64_t)BT * c->V);
        float loss = (float)(sum_losses(m, BT) / BT), ref_loss = ((const float*)fixture_get(&fx, "loss")->data)[0];
        double eloss = fabs(loss - ref_loss) / fabs(ref_loss);
        CHECKF(el < TOL_MODEL_FWD, "%s: logits rel err %.3g", dir, el);
        CHECKF(eloss < TOL_MODEL_LOSS, "%s: loss %.7f vs %.7f", dir, loss, ref_loss);
        printf("    %-12s L=%d C=%d NH=%d V=%d: logits %.2e, loss %.6f vs transformers %.6f\n", g_hf_cases[ci], c->L, c->C, c->NH, c->V, el, loss, ref_loss);
        free(logits);
        tm_free(tr);
        fixture_free(&fx);
    }
}

// ----------------------------------------------------------------------------
// Out and back in: -export-hf then -e, and -export -export-dtype fp32 then -e.

static float* hf_master_logical(Trainer* tr) {
    Zero* z = &tr->model.z;
    float* w = (float*)calloc(z->lay.logical_total, sizeof(float));
    tm_to_logical(z, z->master, w);
    return w;
}

TEST(hf_export_roundtrip) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    Trainer* tr = tm_trainer(tm_fixture_flags(&fx, "-r 0 -z 0"));
    for (int s = 0; s < 3; s++) train_step(tr); // master and parameters differ now (BF16 build)
    float* w = hf_master_logical(tr);
    int64_t n = tr->model.z.lay.logical_total;
    const char* dts[] = {"fp32", "bf16", "fp16"};
    char dirs[3][PATH_MAX], path[PATH_MAX];
    for (int d = 0; d < 3; d++) { // (one trainer at a time: the memory accounting is global)
        snprintf(dirs[d], sizeof(dirs[d]), "%s/export_%s", test_tmpdir(), dts[d]);
        snprintf(tr->f.export_hf, sizeof(tr->f.export_hf), "%s", dirs[d]);
        snprintf(tr->f.export_dtype, sizeof(tr->f.export_dtype), "%s", dts[d]);
        tr->f.export_path[0] = 0;
        export_model(tr);
    }
#ifndef ENABLE_FP32
    { // the BF16 export is exactly the parameters the forward uses
        Zero* z = &tr->model.z;
        floatX* p = (floatX*)tm_host(zero_params(z, 1), z->lay.P[1] * sizeof(floatX));
        float* m = (float*)tm_host(z->master + z->lay.off[1], z->lay.P[1] * sizeof(float));
        int64_t differ = 0;
        for (int64_t i = 0; i < z->lay.P[1]; i++) differ += p[i].bits != f32_to_bf16(m[i]).bits;
        CHECKF(differ == 0, "parameters are not the master rounded to BF16 (%lld differ)", (long long)differ);
        free(p);
        free(m);
    }
#endif
    // llm.c's format, FP32 from the master: version 3
    snprintf(path, sizeof(path), "%s/export_fp32.bin", test_tmpdir());
    snprintf(tr->f.export_path, sizeof(tr->f.export_path), "%s", path);
    snprintf(tr->f.export_dtype, sizeof(tr->f.export_dtype), "fp32");
    tr->f.export_hf[0] = 0;
    export_model(tr);
    tm_free(tr);
    int h[2] = {0, 0};
    FILE* f = fopen(path, "rb");
    CHECK(f && fread(h, 4, 2, f) == 2);
    if (f) fclose(f);
    CHECKF(h[1] == 3, "-export -export-dtype fp32 wrote version %d (want 3)", h[1]);
    for (int d = 0; d < 4; d++) { // each export back through -e
        char flags[1024];
        snprintf(flags, sizeof(flags), MODEL_DEVICE "-e %s -i %s -b 1 -t 8 -x 0 -v 0 -s 0 -z 0", d < 3 ? dirs[d] : path, tm_fixture_shard(&fx));
        Trainer* back = tm_trainer(flags);
        float* w2 = hf_master_logical(back);
        CHECKF(back->model.z.lay.logical_total == n, "%lld parameters back, %lld out", (long long)back->model.z.lay.logical_total, (long long)n);
        int64_t differ = 0;
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            float want = d == 1 ? bf16_to_f32(f32_to_bf16(w[i])) : d == 2 ? f16_to_f32(f32_to_f16(w[i])) : w[i];
            if (memcmp(&want, &w2[i], 4)) differ++;
            worst = fmax(worst, fabs((double)w2[i] - w[i]) / fmax(fabs((double)w[i]), 1e-3));
        }
        const char* what = d < 3 ? dts[d] : "fp32 (llm.c file)";
        CHECKF(differ == 0, "-export-dtype %s: %lld of %lld values differ from the master rounded to it", what, (long long)differ, (long long)n);
        printf("    %s -export-dtype %-17s: all %lld values back exactly as the master rounded (largest change %.1e)\n",
               d < 3 ? "-export-hf" : "-export   ", what, (long long)(n - differ), worst);
        free(w2);
        tm_free(back);
    }
    free(w);
    fixture_free(&fx);
}

// The cases that start other processes (mpirun, python) run in the BF16 binary only: what they
// check does not depend on the precision, and each costs seconds.
#ifndef ENABLE_FP32
// The FP32 export of a sharded master: ZeRO-0 and ZeRO-3 at R = 3 write the same bytes (GA = 1:
// the stages are bit-identical), so every rank's shard arrived in its place.
TEST(hf_export_sharded_master) {
    char d0[PATH_MAX], d3[PATH_MAX];
    snprintf(d0, sizeof(d0), "%s", zt_dir("hfx_z0"));
    snprintf(d3, sizeof(d3), "%s", zt_dir("hfx_z3"));
    char flags[2048];
    int rc[2];
    for (int i = 0; i < 2; i++) {
        snprintf(flags, sizeof(flags), ZT_MODEL " -device cpu -b 2 -x 3 -v 0 -s 0 -z %d -export-hf %s -export %s.bin -export-dtype fp32",
                 i ? 3 : 0, i ? d3 : d0, i ? d3 : d0);
        rc[i] = zt_mpirun(3, flags, zt_out, sizeof(zt_out));
        CHECKF(rc[i] == 0, "z%d run failed:\n%s", i ? 3 : 0, zt_out);
    }
    if (rc[0] || rc[1]) return;
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "cmp %s/model.safetensors %s/model.safetensors && cmp %s/config.json %s/config.json && cmp %s.bin %s.bin", d0, d3, d0, d3, d0, d3);
    CHECKF(test_run_cmd(cmd, zt_out, sizeof(zt_out)) == 0, "ZeRO-0 and ZeRO-3 exports differ: %s", zt_out);
}

#endif // ENABLE_FP32

// ----------------------------------------------------------------------------
// Corrupt checkpoints and configs: refused with the file and the tensor named, exit 2, nothing written.

// A tiny valid checkpoint in dir: L=1, C=8, NH=2, V=10, maxT=4, F32, every value 0.01 * index.
// edit(header) may change the header text before it is written; data_extra bytes are cut (< 0)
// or added; hlen_delta is added to the stored header length.
static void hf_write_case(const char* dir, const char* config, void (*edit)(char*), int64_t data_cut, int64_t hlen_delta) {
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    test_run_cmd(cmd, NULL, 0);
    HFConfig c = hf_gpt2_config(1, 8, 2, 10, 4);
    HFTensorRow rows[HF_MAX_ROWS];
    int nrows = hf_rows(&c, rows);
    StSpec spec[HF_MAX_ROWS];
    int64_t offs[HF_MAX_ROWS], data = 0;
    for (int k = 0; k < nrows; k++) {
        hf_name(&rows[k], 0, spec[k].name, sizeof(spec[k].name));
        spec[k].dtype = ST_F32;
        spec[k].ndim = rows[k].d1 ? 2 : 1;
        spec[k].shape[0] = rows[k].d0;
        spec[k].shape[1] = rows[k].d1;
        data += rows[k].d0 * (rows[k].d1 ? rows[k].d1 : 1) * 4;
    }
    int64_t hlen;
    char* h = st_make_header(spec, nrows, offs, &hlen);
    char text[8192];
    memcpy(text, h + 8, hlen - 8);
    text[hlen - 8] = 0;
    free(h);
    if (edit) edit(text);
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    FILE* f = fopen(path, "wb");
    uint64_t hl = strlen(text) + hlen_delta;
    fwrite(&hl, 8, 1, f);
    fwrite(text, 1, strlen(text), f);
    for (int64_t i = 0; i < data + data_cut; i += 4) { float v = 0.01f * (float)(i / 4 % 97); fwrite(&v, 4, 1, f); }
    fclose(f);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    f = fopen(path, "w");
    fprintf(f, "%s", config ? config : "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4}");
    fclose(f);
}

static void hf_sub(char* text, const char* from, const char* to) {
    char* p = strstr(text, from);
    if (!p) { printf("    (test setup: '%s' not in the header)\n", from); return; }
    char rest[8192];
    snprintf(rest, sizeof(rest), "%s", p + strlen(from));
    sprintf(p, "%s%s", to, rest);
}
static void ed_past_end(char* t) { // ln_f.bias (the last tensor) moved 64 bytes further than the data goes
    const char* key = "\"ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[";
    char* p = strstr(t, key);
    long long a, b;
    if (!p || sscanf(p + strlen(key), "%lld,%lld", &a, &b) != 2) { printf("    (test setup: no ln_f.bias)\n"); return; }
    char from[128], to[128];
    snprintf(from, sizeof(from), "[%lld,%lld]", a, b);
    snprintf(to, sizeof(to), "[%lld,%lld]", a + 64, b + 64);
    hf_sub(p, from, to);
}
static void ed_overlap(char* t) { hf_sub(t, "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[320,448]", "\"wpe.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[300,428]"); }
static void ed_shape(char* t) { hf_sub(t, "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[8]", "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[2,4]"); }
static void ed_dtype(char* t) { hf_sub(t, "\"h.0.ln_2.weight\":{\"dtype\":\"F32\"", "\"h.0.ln_2.weight\":{\"dtype\":\"F33\""); }
static void ed_i32(char* t) { hf_sub(t, "\"h.0.ln_2.weight\":{\"dtype\":\"F32\"", "\"h.0.ln_2.weight\":{\"dtype\":\"I32\""); }
static void ed_missing(char* t) { hf_sub(t, "\"h.0.mlp.c_fc.bias\"", "\"h.0.attn.masked_bias\""); } // a skipped buffer's name
static void ed_badjson(char* t) { hf_sub(t, "\"__metadata__\":{", "\"__metadata__\":{,"); }
static void ed_nbytes(char* t) { hf_sub(t, "\"shape\":[10,8],\"data_offsets\":[0,320]", "\"shape\":[10,8],\"data_offsets\":[0,316]"); }

TEST(hf_corrupt_checkpoints) {
    char dir[PATH_MAX], out[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/hf_bad", test_tmpdir());
    snprintf(out, sizeof(out), "%s/hf_bad_out", test_tmpdir());
    char shard[PATH_MAX], serr[256]; // tokens < 10 for the tiny vocabulary
    snprintf(shard, sizeof(shard), "%s/hf_bad_tokens.bin", test_tmpdir());
    uint16_t toks[256];
    for (int i = 0; i < 256; i++) toks[i] = (uint16_t)(i * 7 % 10);
    if (write_token_shard(shard, toks, 256, serr, sizeof(serr))) { printf("    %s\n", serr); CHECK(0); return; }
    static const struct { const char* what; void (*edit)(char*); int64_t cut, hdelta; const char* config; const char* expect[2]; } cases[] = {
        // the first three run the trainer as a process: exit code 2 and nothing written
        {"valid", NULL, 0, 0, NULL, {NULL, NULL}},
        {"offsets past the end", ed_past_end, 0, 0, NULL, {"ln_f.bias", "past the end"}},
        {"n_inner", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"n_inner\": 16}", {"config.json", "n_inner"}},
        {"truncated data", NULL, -8, 0, NULL, {"ln_f.bias", "past the end"}},
        {"overlapping tensors", ed_overlap, 0, 0, NULL, {"wpe.weight", "overlap"}},
        {"header length larger than the file", NULL, 0, 100000, NULL, {"header length", "larger than the file"}},
        {"wrong shape", ed_shape, 0, 0, NULL, {"h.0.ln_1.bias", "shape (2, 4)"}},
        {"unknown dtype", ed_dtype, 0, 0, NULL, {"h.0.ln_2.weight", "unknown dtype"}},
        {"unsupported dtype", ed_i32, 0, 0, NULL, {"h.0.ln_2.weight", "not supported"}},
        {"missing tensor", ed_missing, 0, 0, NULL, {"h.0.mlp.c_fc.bias", "missing"}},
        {"bad JSON", ed_badjson, 0, 0, NULL, {"header: JSON", "byte"}},
        {"offsets disagree with the shape", ed_nbytes, 0, 0, NULL, {"wte.weight", "need 320"}},
        {"config disagrees", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 11, \"n_positions\": 4}", {"wte.weight", "config.json says (11, 8)"}},
        {"untied", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"tie_word_embeddings\": false}", {"config.json", "untied"}},
        {"cross-attention", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"add_cross_attention\": true}", {"config.json", "cross-attention"}},
        {"unscaled attention", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"scale_attn_weights\": false}", {"config.json", "scale_attn_weights"}},
        {"inverse layer idx", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"scale_attn_by_inverse_layer_idx\": true}", {"config.json", "scale_attn_by_inverse_layer_idx"}},
        {"activation", NULL, 0, 0, "{\"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4, \"activation_function\": \"relu\"}", {"config.json", "activation_function 'relu'"}},
        {"another architecture", NULL, 0, 0, "{\"model_type\": \"gpt_neox\"}", {"config.json", "model_type 'gpt_neox'"}},
        {"more layers in the config", NULL, 0, 0, "{\"n_layer\": 2, \"n_embd\": 8, \"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4}", {"h.1.ln_1.weight", "missing"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hf_write_case(dir, cases[i].config, cases[i].edit, cases[i].cut, cases[i].hdelta);
        if (i > 2) { // the loader in this process (each trainer run costs ~0.6 s): the same message
            HFCheckpoint ck;
            char err[2048];
            int rc = hf_open(&ck, dir, err, sizeof(err));
            CHECKF(rc != 0 && strstr(err, cases[i].expect[0]) && strstr(err, cases[i].expect[1]) && strstr(err, dir),
                   "%s: the error should name the file and '%s' ... '%s': %s", cases[i].what, cases[i].expect[0], cases[i].expect[1], rc ? err : "accepted");
            if (rc == 0) hf_close(&ck);
            printf("    %-36s %s\n", cases[i].what, rc ? err : "accepted");
            continue;
        }
        char cmd[4 * PATH_MAX];
        snprintf(cmd, sizeof(cmd), "rm -rf %s; %s --train -device cpu -e %s -i %s -j '' -b 1 -t 4 -x 1 -v 0 -s 0 -export-hf %s; echo rc=$?; ls %s 2>/dev/null | wc -l",
                 out, g_test_self, dir, shard, out, out);
        static char got[1 << 17]; // the whole output: the settings and memory tables come before "rc="
        test_run_cmd(cmd, got, sizeof(got));
        int valid = cases[i].expect[0] == NULL;
        if (valid) {
            CHECKF(strstr(got, "rc=0") != NULL, "the valid case failed:\n%s", got);
            continue;
        }
        const char* err = strstr(got, "error: ");
        char line[1024] = "";
        if (err) { snprintf(line, sizeof(line), "%s", err); char* nl = strchr(line, '\n'); if (nl) *nl = 0; }
        int named = err && strstr(line, cases[i].expect[0]) && strstr(line, cases[i].expect[1]) && strstr(line, dir);
        CHECKF(strstr(got, "rc=2\n0\n") != NULL, "%s: want exit 2 and nothing in %s, got:\n%s", cases[i].what, out, got);
        CHECKF(named, "%s: the error should name the file and '%s' ... '%s':\n%s", cases[i].what, cases[i].expect[0], cases[i].expect[1], got);
        printf("    %-36s %s\n", cases[i].what, line);
    }
    // a directory with only pytorch_model.bin: refused with a hint
    char cmd[4 * PATH_MAX], got[4096];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && touch %s/pytorch_model.bin && cp test/fixtures/hf/f32_prefix/config.json %s/ && %s --train -device cpu -e %s -x 0; echo rc=$?",
             dir, dir, dir, dir, g_test_self, dir);
    test_run_cmd(cmd, got, sizeof(got));
    CHECKF(strstr(got, "rc=2") && strstr(got, "pytorch_model.bin") && strstr(got, "HINT") && strstr(got, "safe_serialization"), "pytorch_model.bin only:\n%s", got);
    // lm_head.weight present but different from wte: untied
    {
        HFCheckpoint ck;
        char err[2048];
        const char* src = "test/fixtures/hf/f32_prefix/model.safetensors";
        StFile sf;
        CHECK(st_open(&sf, src, err, sizeof(err)) == 0);
        const StTensor* lm = st_find(&sf, "lm_head.weight");
        CHECKF(lm != NULL, "the f32_prefix fixture should store lm_head.weight");
        if (lm) { // copy the fixture, flip one byte of lm_head
            snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && cp test/fixtures/hf/f32_prefix/config.json test/fixtures/hf/f32_prefix/model.safetensors %s/", dir, dir, dir);
            test_run_cmd(cmd, NULL, 0);
            char p[PATH_MAX];
            snprintf(p, sizeof(p), "%s/model.safetensors", dir);
            FILE* f = fopen(p, "r+b");
            fseek(f, (long)(sf.data_start + lm->begin + 4 * 77), SEEK_SET);
            float v = 0.5f;
            fwrite(&v, 4, 1, f);
            fclose(f);
            int rc = hf_open(&ck, dir, err, sizeof(err));
            CHECKF(rc != 0 && strstr(err, "lm_head.weight") && strstr(err, "untied"), "lm_head != wte: %s", rc ? err : "accepted");
            if (rc == 0) hf_close(&ck);
        }
        st_close(&sf);
    }
}

// A shard index that points at a file without the tensor, and one that names a path outside.
TEST(hf_corrupt_index) {
    char dir[PATH_MAX], cmd[4 * PATH_MAX], err[2048];
    snprintf(dir, sizeof(dir), "%s/hf_idx", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r test/fixtures/hf/f16_sharded %s && sed -i 's/\"transformer.wte.weight\": \"model-0000[0-9]/\"transformer.wte.weight\": \"model-00009/' %s/model.safetensors.index.json", dir, dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    HFCheckpoint ck;
    int rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "model-00009"), "a missing shard: %s", rc ? err : "accepted");
    if (rc == 0) hf_close(&ck);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r test/fixtures/hf/f16_sharded %s && sed -i 's/\"transformer.wte.weight\": \"model-/\"transformer.wte.weight\": \"..\\/model-/' %s/model.safetensors.index.json", dir, dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    rc = hf_open(&ck, dir, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "transformer.wte.weight") && strstr(err, "file name"), "a shard outside the directory: %s", rc ? err : "accepted");
    if (rc == 0) hf_close(&ck);
    // the sharded fixture itself loads, and -e works on a single .safetensors file too
    rc = hf_open(&ck, "test/fixtures/hf/f16_sharded", err, sizeof(err));
    CHECKF(rc == 0 && ck.nfiles > 1, "the sharded fixture: %s", rc ? err : "one file?");
    if (rc == 0) hf_close(&ck);
    rc = hf_open(&ck, "test/fixtures/hf/bf16_bare/model.safetensors", err, sizeof(err));
    CHECKF(rc == 0 && ck.cfg.L == 3, "a .safetensors file: %s", rc ? err : "wrong config");
    if (rc == 0) hf_close(&ck);
}

#ifndef ENABLE_FP32
// ----------------------------------------------------------------------------
// -export-hf read by others: the reference model trained 3 steps here and exported; our logits
// through -e DIR against (a) dev/reference.py's independent PyTorch GPT-2 reading the files with
// the safetensors package and numpy, (b) transformers' GPT2LMHeadModel.from_pretrained.
// The python: $ZT_HF_PYTHON (.ci/run makes a venv with safetensors and transformers), else python3.
static const char* hf_python(void) {
    const char* p = getenv("ZT_HF_PYTHON");
    return p && *p ? p : "python3";
}

static void hf_export_logits(const char* script_mode, const char* tag, const char* who) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    char dir[PATH_MAX], cmd[4 * PATH_MAX], out[1 << 16], py[PATH_MAX + 64];
    char flags[4096];
    static char made[PATH_MAX] = ""; // both cases read the same export: train and export once
    snprintf(dir, sizeof(dir), "%s/hf_exported", test_tmpdir());
    int rc = 0;
    if (strcmp(made, dir)) {
        snprintf(flags, sizeof(flags), "%s -export-hf %s", tm_fixture_flags(&fx, "-x 3"), dir);
        snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 %s --train %s", g_test_self, flags);
        rc = test_run_cmd(cmd, out, sizeof(out));
        CHECKF(rc == 0, "training and -export-hf failed:\n%s", out);
        if (rc == 0) snprintf(made, sizeof(made), "%s", dir);
        // the tokenizer beside the weights: GPT-2's (the default -tokenizer) has 50,257 ids, more than
        // this model's 101, so none is written and the run says why (tok_hf_export_gpt2 checks the files)
        char p[PATH_MAX + 64];
        struct stat st;
        snprintf(p, sizeof(p), "%s/tokenizer.json", dir);
        CHECKF(strstr(out, "no tokenizer files written") && strstr(out, "more than the model's vocabulary of 101") && stat(p, &st) != 0,
               "-export-hf with a tokenizer larger than the model: no warning, or a tokenizer.json written:\n%s", out);
    }
    // our logits from the exported directory, on batch 0, against theirs
    snprintf(py, sizeof(py), "%s %s", hf_python(), script_mode);
    double err = tm_logits_vs(&fx, dir, py, tag);
    CHECKF(err < TOL_MODEL_FWD, "logits of the -export-hf model: ours vs %s %.3g", who, err);
    printf("    -export-hf (F32 from the master): logits ours vs %s %.2e\n", who, err);
    fixture_free(&fx);
}

TEST(hf_export_logits_vs_reference) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import safetensors, torch, numpy'", hf_python());
    if (test_run_cmd(probe, NULL, 0) != 0)
        TEST_SKIP("needs a python with safetensors, torch and numpy (ZT_HF_PYTHON; .ci/run makes a venv)");
    hf_export_logits("dev/reference.py --hf-logits", "ref", "dev/reference.py");
}

TEST(hf_export_logits_vs_transformers) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import transformers, safetensors, torch'", hf_python());
    if (test_run_cmd(probe, NULL, 0) != 0)
        TEST_SKIP("needs a python with transformers (ZT_HF_PYTHON; .ci/run makes a venv: pip install transformers==4.47.1)");
    hf_export_logits("dev/hf_fixtures.py --logits", "transformers", "transformers");
}
#endif // ENABLE_FP32
