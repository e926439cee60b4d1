// test/test_finetune.h — prompt/completion fine-tuning: the loss mask in the classifier and the
// step, mask files in the loader, -tokenize of a .jsonl file (prompts.h).

// A copy of the fixture's token stream at `name` in the scratch directory, with a mask file beside
// it: mask[i] = pattern(i) (0 or 1), packed for T.
static const char* ft_masked_shard(const Fixture* fx, const char* name, int (*pattern)(int64_t), int T) {
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), name);
    const FixtureTensor* st = fixture_get(fx, "stream");
    uint16_t* toks = (uint16_t*)malloc(sizeof(uint16_t) * st->n);
    uint8_t* mask = (uint8_t*)malloc(st->n);
    for (int64_t i = 0; i < st->n; i++) { toks[i] = (uint16_t)((int*)st->data)[i]; mask[i] = (uint8_t)pattern(i); }
    char err[512], mpath[PATH_MAX + 8];
    snprintf(mpath, sizeof(mpath), "%s.mask", path);
    if (write_token_shard(path, toks, st->n, err, sizeof(err)) || write_mask_file(mpath, mask, st->n, T, 1, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
    free(toks);
    free(mask);
    return path;
}
static int ft_all(int64_t i) { (void)i; return 1; }
static int ft_some(int64_t i) { return (i * 7919) % 5 < 2 || (i % 37) > 30; } // irregular, ~45%

static const char* ft_flags_with(const Fixture* fx, const char* shard, const char* extra) {
    static char flags[4096];
    snprintf(flags, sizeof(flags), "%s", tm_fixture_flags(fx, extra));
    char* e = strstr(flags, "-i ");
    char* end = e ? strchr(e + 3, ' ') : NULL;
    if (!e || !end) return flags;
    char rest[4096];
    snprintf(rest, sizeof(rest), "%s", end);
    snprintf(e, sizeof(flags) - (e - flags), "-i %s%s", shard, rest);
    return flags;
}

// An all-ones mask changes nothing, bit for bit: losses, norms and the master after 4 steps.
// A mask whose batches count no target skips every step (logged), leaves the model as it was, and
// never gives NaN: a mask of ones, zeroed in place after start-up (an all-zero mask is refused at
// start-up: ft_mask_pread_checks; and the loader reads the mask again for every batch).
TEST(ft_mask_all_ones_bitwise_all_zero_skipped) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    const int* cfg = (const int*)fixture_get(&fx, "config")->data;
    int T = cfg[7];
    float loss[2][4], norm[2][4];
    float* w[3];
    for (int v = 0; v < 3; v++) {
        const char* shard = v == 0 ? tm_fixture_shard(&fx) : ft_masked_shard(&fx, v == 1 ? "ones.bin" : "zeros.bin", ft_all, T);
        Trainer* tr = tm_trainer(ft_flags_with(&fx, shard, "-r 1 -z 1"));
        CHECK(tr->train.has_mask == (v > 0));
        if (v == 2) { // every byte after the header to 0, in place (same size, valid values)
            char mpath[PATH_MAX + 8];
            snprintf(mpath, sizeof(mpath), "%s.mask", shard);
            int64_t ntok = tr->train.shards[0].ntok;
            char* zeros = (char*)calloc(ntok, 1);
            int fd = open(mpath, O_WRONLY);
            CHECK(fd >= 0 && pwrite(fd, zeros, ntok, SHARD_HEADER_BYTES) == (ssize_t)ntok);
            if (fd >= 0) close(fd);
            free(zeros);
        }
        for (int s = 0; s < 4; s++) {
            StepResult r = train_step(tr);
            if (v < 2) { loss[v][s] = r.loss; norm[v][s] = r.norm; }
            else CHECKF(r.skipped == 2 && isfinite(r.loss), "all-zero mask, step %d: skipped %d, loss %g", s, r.skipped, r.loss);
        }
        w[v] = hf_master_logical(tr);
        int64_t n = tr->model.z.lay.logical_total;
        if (v == 2) {
            tm_free(tr);
            Trainer* init = tm_trainer(ft_flags_with(&fx, tm_fixture_shard(&fx), "-r 1 -z 1"));
            float* w0 = hf_master_logical(init);
            CHECKF(!memcmp(w0, w[2], sizeof(float) * n), "an all-zero mask changed the model");
            free(w0);
            tm_free(init);
            continue;
        }
        tm_free(tr);
        if (v == 1) CHECKF(!memcmp(w[0], w[1], sizeof(float) * n), "all-ones mask: the master differs from the unmasked run");
    }
    CHECKF(!memcmp(loss[0], loss[1], sizeof(loss[0])) && !memcmp(norm[0], norm[1], sizeof(norm[0])), "all-ones mask: losses or norms differ");
    printf("    all-ones mask: 4 steps bit-identical to no mask (loss %.6f ... %.6f); all-zero mask: 4 steps skipped, model unchanged\n", loss[0][0], loss[0][3]);
    for (int v = 0; v < 3; v++) free(w[v]);
    // a mask packed for another T is refused
    char err[1024];
    const char* shard = ft_masked_shard(&fx, "otherT.bin", ft_some, T + 1);
    DataLoader dl;
    int rc = dataloader_init(&dl, shard, 1, T, 128, 0, 0, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "packed for T = ") && strstr(err, "otherT.bin.mask"), "a mask for another T: %s", rc ? err : "accepted");
    if (rc == 0) dataloader_free(&dl);
    fixture_free(&fx);
}

// The masked loss and every gradient against the independent PyTorch program (F.cross_entropy
// with ignore_index, autograd, float64). In the FP32 binary only, where the tolerance is tight (the
// BF16 path of the mask is the same code, checked bit for bit by the all-ones case above).
#ifdef ENABLE_FP32
TEST(ft_masked_loss_grads_vs_pytorch) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import torch, numpy'", tm_torch_python());
    if (test_run_cmd(probe, NULL, 0) != 0) TEST_SKIP("needs a python with torch and numpy (ZT_TORCH_PYTHON or /usr/bin/python3)");
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    const int* cfg = (const int*)fixture_get(&fx, "config")->data;
    const char* shard = ft_masked_shard(&fx, "some.bin", ft_some, cfg[7]);
    Trainer* tr = tm_trainer(ft_flags_with(&fx, shard, "-r 0 -z 0"));
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    int B = m->B, T = m->T, BT = B * T;
    dataloader_load(&tr->train, 0);
    int64_t counted = dataloader_count_targets(&tr->train, 0), seen = 0;
    for (int i = 0; i < BT; i++) seen += tr->train.targets[i] >= 0;
    CHECKF(counted == seen && counted > 0 && counted < BT, "counted %lld, targets >= 0: %lld of %d", (long long)counted, (long long)seen, BT);
    char tokens[PATH_MAX], ref[PATH_MAX], cmd[4 * PATH_MAX], out[8192];
    snprintf(tokens, sizeof(tokens), "%s/masked_tokens.i32", test_tmpdir());
    snprintf(ref, sizeof(ref), "%s/masked_ref.bin", test_tmpdir());
    CHECK(tm_write_tokens(tokens, B, T, tr->train.inputs, tr->train.targets, NULL) == 0);
    snprintf(cmd, sizeof(cmd), "%s dev/reference.py --masked-grads test/fixtures/ref_model.bin %s %s", tm_torch_python(), tokens, ref);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "dev/reference.py --masked-grads failed:\n%s", out);
    Fixture rf;
    char err[512];
    if (rc || fixture_load(&rf, ref, err, sizeof(err))) { CHECK(0); tm_free(tr); fixture_free(&fx); return; }
    load_tokens(m, &tr->train, 1);
    gpt_forward(m, B, T, 1, 1.0f / (float)counted, 1);
    gpt_backward(m, B, T, 0, 1); // (its classifier computes the losses)
    float loss = (float)(sum_losses(m, BT) / (double)counted), ref_loss = ((const float*)fixture_get(&rf, "loss")->data)[0];
    CHECKF(fabs(loss - ref_loss) / fabs(ref_loss) < TOL_MODEL_LOSS, "masked loss %.7f vs PyTorch %.7f", loss, ref_loss);
    comm_wait_all(&tr->comm);
    float* g = (float*)calloc(m->z.lay.logical_total, sizeof(float));
    tm_to_logical(&m->z, m->z.full_grads, g);
    double worst = 0.0;
    for (int k = 0; k < NUM_TENSORS; k++) {
        const TensorInfo* t = &m->d.t[k];
        if (t->n == 0) continue; // (another family's tensor, an absent bias)
        char name[80];
        snprintf(name, sizeof(name), "grad.%s", t->name);
        const FixtureTensor* r = fixture_get(&rf, name);
        int64_t n = t->n * (t->io ? 1 : c->L);
        CHECKF(r && r->n == n, "%s missing or of the wrong size", name);
        if (!r || r->n != n) continue;
        double e = tm_relerr_f(g + t->logical, (const float*)r->data, n);
        worst = fmax(worst, e);
        CHECKF(e < TOL_MODEL_GRAD, "%s %.3g", name, e);
    }
    printf("    %lld of %d targets counted: loss %.6f vs PyTorch %.6f, worst gradient %.2e\n", (long long)counted, BT, loss, ref_loss, worst);
    free(g);
    fixture_free(&rf);
    tm_free(tr);
    fixture_free(&fx);
}

#endif // ENABLE_FP32

// -tokenize of a .jsonl file: every example inside one sample, the mask exactly on completion + EOT,
// the example start (bit 1, mask version 2) exactly on the EOT before each example, long prompts cut
// at the start, and bad lines named.
TEST(ft_tokenize_jsonl_packing) {
    Tokenizer tok;
    char err[1024];
    if (tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) || tokenizer_load_merges(&tok, "data/gpt2_merges.bin", err, sizeof(err))) {
        printf("    %s\n", err); CHECK(0); return;
    }
    char in[PATH_MAX], prefix[PATH_MAX];
    snprintf(in, sizeof(in), "%s/ft.jsonl", test_tmpdir());
    snprintf(prefix, sizeof(prefix), "%s/ftpack", test_tmpdir());
    const int T = 16, NEX = 40;
    char prompts[NEX][256], comps[NEX][128];
    FILE* f = fopen(in, "w");
    for (int i = 0; i < NEX; i++) {
        int lp = (i * 7) % 11, lc = 1 + (i * 5) % 6;
        snprintf(prompts[i], sizeof(prompts[i]), "Q%d:", i);
        for (int k = 0; k < lp; k++) strcat(prompts[i], " word");
        if (i % 13 == 5) for (int k = 0; k < 12; k++) strcat(prompts[i], " long"); // longer than T: cut at the start
        snprintf(comps[i], sizeof(comps[i]), " A");
        for (int k = 0; k < lc; k++) strcat(comps[i], " yes");
        fprintf(f, "{\"prompt\": \"%s\", \"completion\": \"%s\", \"extra\": [1, 2]}\n%s", prompts[i], comps[i], i == 3 ? "\n" : "");
    }
    fclose(f);
    PromptStats st;
    int rc = tokenize_prompts_to_shards(&tok, in, prefix, T, 0, 40, "", &st, err, sizeof(err)); // small shards: several
    CHECKF(rc == 0, "%s", err);
    CHECKF(st.examples[0] == NEX && st.cut > 0 && st.shards[0] >= 3, "examples %lld, cut %lld, shards %d", (long long)st.examples[0], (long long)st.cut, st.shards[0]);
    int64_t cut = 0;
    // read the shards back in order and find every example in them
    int ex = 0, bad_place = 0, bad_mask = 0, bad_starts = 0;
    for (int s = 0; s < st.shards[0]; s++) {
        char path[PATH_MAX + 16];
        tokenize_shard_path(path, sizeof(path), prefix, "train", s);
        DataLoader dl;
        CHECKF(dataloader_init(&dl, path, 1, T, 50257, 0, 0, err, sizeof(err)) == 0 && dl.has_mask && dl.has_starts, "%s", err);
        const DataShard* sh = &dl.shards[0];
        char mpath[PATH_MAX + 32]; // the mask file's bytes (the loader reads it by pread, batch by batch)
        snprintf(mpath, sizeof(mpath), "%s.mask", path);
        FILE* mf = fopen(mpath, "rb");
        uint8_t* mfile = (uint8_t*)calloc(SHARD_HEADER_BYTES + sh->ntok, 1);
        size_t mgot = mf ? fread(mfile, 1, SHARD_HEADER_BYTES + sh->ntok, mf) : 0;
        if (mf) fclose(mf);
        CHECKF(mgot == (size_t)(SHARD_HEADER_BYTES + sh->ntok), "%s: %zu bytes", mpath, mgot);
        const uint8_t* mask = mfile + SHARD_HEADER_BYTES;
        CHECKF((sh->ntok - 1) % T == 0, "shard %d: %lld tokens is not kT+1", s, (long long)sh->ntok);
        int64_t pos = 1, starts = 0, ex0 = ex;
        for (int64_t i = 0; i < sh->ntok; i++) starts += (mask[i] & MASK_STARTS) != 0;
        while (pos < sh->ntok && ex < NEX) {
            int padded = 0;
            while (pos < sh->ntok && sh->tokens[pos] == PROMPT_EOT && !(mask[pos] & MASK_COUNTS)) { pos++; padded = 1; } // padding
            if (pos >= sh->ntok) break;
            uint32_t* ids = NULL;
            size_t n = 0, cap = 0;
            tokenizer_encode(&tok, (const unsigned char*)prompts[ex], strlen(prompts[ex]), &ids, &n, &cap);
            size_t np = n;
            tokenizer_encode(&tok, (const unsigned char*)comps[ex], strlen(comps[ex]), &ids, &n, &cap);
            size_t skip = n + 1 > (size_t)T ? n + 1 - T : 0;
            int64_t len = (int64_t)(n - skip) + 1;
            cut += skip > 0;
            int match = pos + len <= sh->ntok && sh->tokens[pos - 1] == PROMPT_EOT && sh->tokens[pos + len - 1] == PROMPT_EOT;
            for (int64_t i = 0; match && i < len - 1; i++) match = sh->tokens[pos + i] == ids[skip + i];
            CHECKF(match, "example %d not found at shard %d position %lld", ex, s, (long long)pos);
            if (!match) { free(ids); break; }
            int64_t k = (pos - 1) / T; // the sample holding the leading EOT must hold the whole example
            if (pos + len - 1 > k * T + T) bad_place++;
            for (int64_t i = 0; i < len; i++) {
                int want = skip + i >= np ? 1 : 0;
                if ((mask[pos + i] & MASK_COUNTS) != want && bad_mask < 5) printf("    example %d token %lld: mask %d, want %d (np %zu skip %zu n %zu)\n", ex, (long long)i, mask[pos + i], want, np, skip, n);
                bad_mask += (mask[pos + i] & MASK_COUNTS) != want;
            }
            bad_mask += (mask[pos - 1] & MASK_COUNTS) != (pos - 1 == 0 || padded ? 0 : 1); // the leading EOT: padding, or the previous example's counted end
            bad_starts += !(mask[pos - 1] & MASK_STARTS); // ... opens the example
            pos += len;
            ex++;
            free(ids);
        }
        bad_starts += starts != ex - ex0; // and no other token is marked as a start
        free(mfile);
        dataloader_free(&dl);
    }
    CHECKF(ex == NEX, "found %d of %d examples", ex, NEX);
    CHECKF(bad_starts == 0, "%d example starts wrong", bad_starts);
    CHECKF(cut == st.cut, "%lld prompts longer than T, %lld reported cut", (long long)cut, (long long)st.cut);
    CHECKF(bad_place == 0, "%d examples cross a sample boundary", bad_place);
    CHECKF(bad_mask == 0, "%d mask bytes wrong", bad_mask);
    printf("    %d examples in %d shards of <= 40 tokens at T = %d: none crosses a sample, mask and example starts exact, %lld prompts cut\n", ex, st.shards[0], T, (long long)st.cut);
    // bad lines: the line is named, nothing is left behind
    static const struct { const char* text; const char* expect; } bad[] = {
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \"a\" \"completion\": \"b\"}\n", ":2: JSON"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"a\"}\n", ":3: no \"completion\""},
        {"{\"prompt\": [\"a\"], \"completion\": \"b\"}\n", ":1: \"prompt\" is a list of messages and \"completion\" is not"},
        {"{\"prompt\": 3, \"completion\": \"b\"}\n", ":1: \"prompt\" is not a string"},
        {"{\"prompt\": \"a\", \"completion\": \"\xff\"}\n", ":1: JSON: invalid UTF-8"},
        {"[1, 2]\n", ":1: not a JSON object"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char bprefix[PATH_MAX + 16], cmd[2 * PATH_MAX];
        snprintf(bprefix, sizeof(bprefix), "%s/ftbad%zu", test_tmpdir(), i);
        f = fopen(in, "w");
        fputs(bad[i].text, f);
        fclose(f);
        rc = tokenize_prompts_to_shards(&tok, in, bprefix, T, 0, 40, "", &st, err, sizeof(err));
        snprintf(cmd, sizeof(cmd), "ls %s* 2>/dev/null | wc -l", bprefix);
        char got[64];
        test_run_cmd(cmd, got, sizeof(got));
        CHECKF(rc != 0 && strstr(err, bad[i].expect) && strstr(err, in) && atoi(got) == 0, "bad case %zu: rc %d, '%s', %s files left", i, rc, err, got);
    }
    // a completion that cannot fit
    f = fopen(in, "w");
    fprintf(f, "{\"prompt\": \"a\", \"completion\": \"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen\"}\n");
    fclose(f);
    rc = tokenize_prompts_to_shards(&tok, in, prefix, T, 0, 40, "", &st, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, ":1: the completion is"), "%s", rc ? err : "accepted");
    tokenizer_free(&tok);
}

#ifndef ENABLE_FP32 // (processes: the BF16 binary only)
// -prompt @FILE: a sample per prompt at the end (even with -s 0), the prompt echoed, the same text
// on a rerun; a missing file is exit 2.
TEST(ft_prompt_samples) {
    char pf[PATH_MAX], cmd[2 * PATH_MAX], out[2][16384];
    snprintf(pf, sizeof(pf), "%s/prompts.txt", test_tmpdir());
    FILE* f = fopen(pf, "w");
    fprintf(f, "In the beginning\n\nAnd God said\n");
    fclose(f);
    for (int run = 0; run < 2; run++) {
        snprintf(cmd, sizeof(cmd), "%s --train -device cpu -e tiny -layers 1 -channels 32 -heads 2 -b 1 -t 16 -x 0 -v 0 -s 0 -g 6 -prompt @%s", g_test_self, pf);
        int rc = test_run_cmd(cmd, out[run], sizeof(out[run]));
        CHECKF(rc == 0, "-prompt run failed:\n%s", out[run]);
    }
    const char* p1 = strstr(out[0], "prompt 1:");
    const char* p2 = strstr(out[0], "prompt 2:");
    CHECKF(p1 && p2 && strstr(p1, "--- prompt\nIn the beginning\n--- reply\n") && strstr(p2, "--- prompt\nAnd God said\n--- reply\n") && !strstr(out[0], "prompt 3:"), "samples:\n%s", out[0]);
    for (int run = 0; run < 2; run++) { // keep the samples only (timings and memory follow them)
        char* q = strstr(out[run], "prompt 2:");
        char* end = q ? strstr(q, "\n--- end: ") : NULL; // the end of prompt 2's sample
        if (end) end[10] = 0;
    }
    CHECKF(p1 && strstr(out[1], "prompt 1:") && !strcmp(p1, strstr(out[1], "prompt 1:")), "two runs sample different text");
    snprintf(cmd, sizeof(cmd), "%s --train -device cpu -e tiny -layers 1 -channels 32 -heads 2 -t 16 -x 0 -v 0 -s 0 -prompt @%s/none.txt", g_test_self, test_tmpdir());
    int rc = test_run_cmd(cmd, out[0], sizeof(out[0]));
    CHECKF(rc == 2 && strstr(out[0], "-prompt @"), "a missing prompt file: rc %d\n%s", rc, out[0]);
}

// The stage identities with a loss mask at R = 3: ZeRO-0..3 bit-identical at GA = 1; z0 = z1 and
// z2 = z3 at GA = 2 (every rank counts the global batch's targets itself).
TEST(ft_masked_stages_R3) {
    char shard[PATH_MAX], mpath[PATH_MAX + 8], err[512];
    snprintf(shard, sizeof(shard), "%s/zt_masked.bin", test_tmpdir());
    snprintf(mpath, sizeof(mpath), "%s.mask", shard);
    DataLoader dl;
    if (dataloader_init(&dl, zt_data(0), 1, ZT_T, ZT_V, 0, 0, err, sizeof(err))) { printf("    %s\n", err); CHECK(0); return; }
    int64_t n = dl.shards[0].ntok;
    uint8_t* mask = (uint8_t*)malloc(n);
    for (int64_t i = 0; i < n; i++) mask[i] = (uint8_t)ft_some(i);
    for (int64_t i = 0; i < 3 * ZT_T; i++) mask[i] = 0; // a few samples with nothing counted
    int wrc = write_token_shard(shard, dl.shards[0].tokens, n, err, sizeof(err)) || write_mask_file(mpath, mask, n, ZT_T, 1, err, sizeof(err));
    free(mask);
    dataloader_free(&dl);
    if (wrc) { printf("    %s\n", err); CHECK(0); return; }
    for (int ga = 1; ga <= 2; ga++) {
        ZtLog ref;
        char ref_hash[512] = "";
        for (int z = 0; z <= 3; z++) {
            char name[64], flags[2048], hash[512];
            snprintf(name, sizeof(name), "masked_ga%d_z%d", ga, z);
            const char* dir = zt_dir(name);
            snprintf(flags, sizeof(flags), ZT_MODEL " -b 2 -d %d -x 3 -v 0 -s 0 -z %d -o %s -log-hash 1 -i %s", 2 * ZT_T * 3 * ga, z, dir, shard);
            int rc = zt_mpirun(3, flags, zt_out, sizeof(zt_out));
            CHECKF(rc == 0, "GA=%d z=%d failed (%d):\n%s", ga, z, rc, zt_out);
            if (rc) continue;
            cli_hash_line(zt_out, hash, sizeof(hash));
            ZtLog lg;
            zt_read_log(dir, &lg);
            CHECKF(lg.n == 3, "GA=%d z=%d: %d steps logged", ga, z, lg.n);
            if (z == 0 || (ga > 1 && z == 2)) { ref = lg; snprintf(ref_hash, sizeof(ref_hash), "%s", hash); continue; }
            CHECKF(!memcmp(lg.loss, ref.loss, sizeof(lg.loss)) && !memcmp(lg.norm, ref.norm, sizeof(lg.norm)) && hash[0] && !strcmp(hash, ref_hash),
                   "GA=%d: ZeRO-%d differs from ZeRO-%d:\n  %s\n  %s", ga, z, ga > 1 && z == 3 ? 2 : 0, hash, ref_hash);
        }
        printf("    R=3 GA=%d with a loss mask: %s\n", ga, ga == 1 ? "ZeRO-0..3 bit-identical" : "ZeRO-0 = ZeRO-1 and ZeRO-2 = ZeRO-3 bit for bit");
    }
}
#endif // ENABLE_FP32
