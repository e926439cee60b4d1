// test/test_qlora.h — QLoRA, -lora-quant nf4 (lora.h, ops/nf4.cuh): a run on the 4-bit base is
// exactly a LoRA run on a BF16 base holding the dequantized values (the loss, and the adapters after
// three steps, bit for bit), the 4-bit bytes never change in training, ZeRO-0..3 are bit-identical,
// the planner's rows for the seeds' setups, and bad input. (The NF4 numbers themselves, against
// bitsandbytes: test_nf4.h.)

// Runs q (-lora-quant nf4), then b (the same flags, a BF16 base) with its base matrices replaced by
// q's dequantized ones (R = 1, ZeRO-0; one trainer at a time: the allocator's counts are per process).
// Then the two are the same model: the same losses and norms, the same adapters after three steps.
#define QLORA_STEPS 3
static void qlora_dequant_case(const char* model, const char* lora) {
    char fq[512], fb[512];
    snprintf(fq, sizeof(fq), "-z 0 -x 3 -l 1e-2 %s -lora-quant nf4", lora);
    snprintf(fb, sizeof(fb), "-z 0 -x 3 -l 1e-2 %s", lora);
    Trainer* q = tm_trainer(lora_flags(model, fq));
    Model* mq = &q->model;
    Zero* zq = &mq->z;
    int L = mq->cfg.L, encoded = 0;
    floatX* deq[NUM_TENSORS * 8] = {0}; // [layer * NUM_TENSORS + k]: q's dequantized matrices (L <= 8 here)
    CHECK(L <= 8);
    for (int l = 0; l < L; l++) {
        ParamView vq = layer_view(mq, zq->full_params + zq->lay.off[1 + l]);
        for (int k = 0; k < NUM_TENSORS; k++)
            if (mq->d.t[k].stored && !mq->d.t[k].io) { deq[l * NUM_TENSORS + k] = (floatX*)tm_host(vq.t[k], sizeof(floatX) * mq->d.t[k].n); encoded++; }
    }
    CHECKF(encoded == 4 * L, "%d matrices stored in 4 bits, expected the 4 projections of %d layers", encoded, L);
    int64_t q_total = zq->lay.total;
    double lq = lora_loss(q), ql[QLORA_STEPS], qn[QLORA_STEPS];
    uint64_t h0 = lora_base_hash(zq);
    for (int s = 0; s < QLORA_STEPS; s++) {
        StepResult r = tm_step(q);
        CHECKF(r.skipped == 0, "step %d skipped", s);
        ql[s] = r.loss; qn[s] = r.norm;
    }
    CHECKF(lora_base_hash(zq) == h0, "the 4-bit base's bytes changed in training");
    int A = zq->lay.adapter;
    size_t abytes = sizeof(floatX) * zq->lay.P[A];
    floatX* aq = (floatX*)tm_host(zq->full_params + zq->lay.off[A], abytes);
    tm_free(q);

    Trainer* b = tm_trainer(lora_flags(model, fb));
    Model* mb = &b->model;
    Zero* zb = &mb->z;
    double l_bf16 = lora_loss(b), err2 = 0.0, ref2 = 0.0;
    for (int l = 0; l < L; l++) {
        ParamView vb = param_view(&mb->d, zb->full_params + zb->lay.off[1 + l], 0);
        for (int k = 0; k < NUM_TENSORS; k++) {
            floatX* wq = deq[l * NUM_TENSORS + k];
            if (!wq) continue;
            int64_t n = mb->d.t[k].n;
            floatX* wb = (floatX*)tm_host(vb.t[k], sizeof(floatX) * n);
            for (int64_t i = 0; i < n; i++) {
                double d = (double)ld(wq[i]) - (double)ld(wb[i]);
                err2 += d * d;
                ref2 += (double)ld(wb[i]) * ld(wb[i]);
            }
            dev_from_host(vb.t[k], wq, sizeof(floatX) * n);
            free(wb);
            free(wq);
        }
    }
    CHECKF(q_total < zb->lay.total / 2, "the 4-bit layout holds %lld elements, the BF16 one %lld", (long long)q_total, (long long)zb->lay.total);
    double rel = sqrt(err2 / ref2);
    CHECKF(rel > 0.01 && rel < 0.2, "the dequantized matrices differ from the BF16 ones by %.4f (relative, Frobenius): NF4's is ~0.1", rel);
    double lb = lora_loss(b);
    CHECKF(lq == lb, "step 0: the 4-bit base's loss %.9g, the BF16 base holding its dequantized values %.9g", lq, lb);
    CHECKF(fabs(lq - l_bf16) < 0.05 * fabs(l_bf16), "the 4-bit base's loss %.6g is far from the BF16 base's %.6g", lq, l_bf16);
    for (int s = 0; s < QLORA_STEPS; s++) {
        StepResult r = tm_step(b);
        CHECKF(r.loss == ql[s] && r.norm == qn[s], "step %d: loss %.9g norm %.9g on the 4-bit base, %.9g %.9g on its dequantized values",
               s, ql[s], qn[s], r.loss, r.norm);
    }
    floatX* ab = (floatX*)tm_host(zb->full_params + zb->lay.off[A], abytes);
    CHECKF(zb->lay.P[A] == (int64_t)(abytes / sizeof(floatX)) && !memcmp(aq, ab, abytes), "the adapters after %d steps differ", QLORA_STEPS);
    printf("    %s: the 4-bit base = a BF16 base holding its dequantized values (step 0 loss %.6f, %d steps' losses, norms and adapters "
           "bitwise; the 4-bit bytes unchanged); NF4 error %.4f relative; the BF16 base's loss %.6f; %lld elements against %lld\n",
           mb->cfg.family == FAMILY_LLAMA ? "llama" : "gpt2", lq, QLORA_STEPS, rel, l_bf16, (long long)q_total, (long long)zb->lay.total);
    free(aq);
    free(ab);
    tm_free(b);
}

TEST(qlora_is_lora_on_dequantized_base) {
    qlora_dequant_case(LORA_GPT2, "-lora 2");
    qlora_dequant_case(LORA_LLAMA " -r 3", "-lora 2 -lora-targets q_proj,v_proj,down_proj");
}

// ZeRO-0..3 bit-identical with the 4-bit base (make test: Llama at R = 2, with -offload; make test-long: GPT-2 at R = 1..4, Llama at R = 3):
// ZeRO-3 shards and gathers the 4-bit bytes, ZeRO-0..2 hold them whole; the same steps either way.
TEST(qlora_zero_stages_bitwise) {
    const char* llama = "-e llama-tiny -layers 3 -vocab 97 -t 16 -poison 1 -blas 0";
    if (test_long()) {
        for (int R = 1; R <= 4; R++) lora_stages_case(R, ZT_MODEL, "-lora 2 -lora-quant nf4");
        lora_stages_case(3, llama, "-lora 2 -lora-quant nf4 -lora-targets q_proj,k_proj,gate_proj,down_proj");
    } else { // (GPT-2's partial 64-blocks, C = 28, at R = 3: make test-long)
        lora_stages_case(2, llama, "-lora 2 -lora-quant nf4 -lora-targets q_proj,k_proj,gate_proj,down_proj");
    }
}

// Checkpoints of a QLoRA run hold the adapters' state and the base's identity; the 4-bit base is made
// again at resume from -e (the same bits at any R and stage): ZeRO-1 -> ZeRO-3 (-offload cpu) at R = 2
// bit-identical to the uninterrupted run, R = 2 -> 3 within tolerance (lora_resume_case, test_lora.h).
#ifndef ENABLE_FP32
TEST(qlora_checkpoint_resume) {
    lora_resume_case("qlora_ckpt_llama", "-e llama-tiny -layers 2 -vocab 97 -t 16 -poison 1 -blas 0 -lora 2 -lora-targets q_proj,v_proj,down_proj "
                     "-lora-quant nf4");
}
#endif

// The adapters of a QLoRA run in PEFT (bitsandbytes cannot run on this torch: PEFT loads them onto the
// dequantized base, the merged -export-hf at step 0), and the merged export (dequantized base + adapters)
// against PEFT's merge_and_unload() there: lora_peft_case (test_lora.h), Llama at ZeRO-3 (FP32 build).
#ifdef ENABLE_FP32
TEST(qlora_export_loads_in_peft) {
    const char* py = getenv("ZT_HF_PYTHON");
    if (!py || !*py) TEST_SKIP("needs $ZT_HF_PYTHON with transformers and peft 0.13.2 (.ci/run makes it)");
    lora_peft_case(py, LORA_LLAMA, "qlora_llama", "-z 3 -lora 2 -lora-alpha 6 -lora-quant nf4 -lora-targets q_proj,v_proj,o_proj,up_proj,down_proj");
}
#endif

// A checkpoint bitsandbytes quantized, as transformers saves it (dev/bnb_fixture.py writes one from a
// committed Llama fixture with dev/nf4_reference.py's numbers, the port checked against bitsandbytes'
// library in test_nf4.h; and beside it the same model with its projections dequantized, in F32):
//   - loaded as it is (-lora-quant nf4), its 4-bit bytes are the ones this program makes from the
//     BF16 source at load (the same hash of the base): our quantization = bitsandbytes' rules;
//   - with the codes stored as bfloat16 (bnb_4bit_quant_storage), the same bytes;
//   - its loss at step 0 equals a BF16 base holding the dequantized values (bitwise), and three
//     steps of each give the same losses;
//   - refused (exit 2, naming the field or tensor): fp4, GPTQ, 8-bit, no double quantization, a
//     projection in llm_int8_skip_modules, no -lora-quant nf4; a missing .absmax, another
//     blocksize, an .absmax or the codes one byte short.
static double qlora_step0(const char* model, const char* extra, uint64_t* base_hash, double* losses) {
    char flags[2048];
    snprintf(flags, sizeof(flags), "-device cpu -e %s -t 16 -b 2 -v 0 -s 0 -blas 0 -poison 1 -z 0 -x 3 -l 1e-2 -lora 2 %s", model, extra);
    Trainer* tr = tm_trainer(lora_flags("", flags));
    double l = lora_loss(tr);
    if (base_hash) *base_hash = lora_base_hash(&tr->model.z);
    for (int s = 0; losses && s < 3; s++) losses[s] = tm_step(tr).loss;
    tm_free(tr);
    return l;
}


// A checkpoint made where torch's linspace gave another nested map (dev/bnb_fixture.py --simd 16: the
// AVX-512 map, 28 entries one ulp from ours; a wider model so that it changes some weights): its map is
// read and used (hf.h: HFCheckpoint.dyn; lora_base_set_map), so the FP32 build's dequantized values are
// bitsandbytes' exactly: the loss equals an FP32 base holding the FP32 values bitsandbytes computes
// with that map (bitwise, three steps too); the fixture counts the weights our own map would move.
#ifdef ENABLE_FP32
TEST(qlora_bnb_nested_map) {
    const char* py = getenv("ZT_HF_PYTHON");
    if (!py || !*py) TEST_SKIP("needs $ZT_HF_PYTHON with torch, numpy and safetensors (.ci/run makes it)");
    char out[PATH_MAX], cmd[3 * PATH_MAX], bnb[PATH_MAX + 16], deq[PATH_MAX + 16];
    snprintf(out, sizeof(out), "%s/qlora_bnb_map", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "%s dev/bnb_fixture.py test/fixtures/hf/llama_gqa4_llama3 %s --simd 16 --widen 128,256 --deq-f32 2>&1", py, out);
    int rc = test_run_cmd(cmd, zt_out, sizeof(zt_out));
    if (rc == 3) TEST_SKIP("$ZT_HF_PYTHON lacks torch, numpy or safetensors");
    CHECKF(rc == 0, "%s failed (%d):\n%s", cmd, rc, zt_out);
    if (rc) return;
    const char* mv = strstr(zt_out, "its nested map moves ");
    long moved = mv ? atol(mv + 21) : -1;
    CHECKF(moved > 0, "the other map moves no weight (%ld): the case tests nothing:\n%s", moved, zt_out);
    snprintf(bnb, sizeof(bnb), "%s/bnb4", out);
    snprintf(deq, sizeof(deq), "%s/deq", out);
    double lb[3], ld_[3];
    double l_bnb = qlora_step0(bnb, "-lora-quant nf4", NULL, lb);
    double l_deq = qlora_step0(deq, "", NULL, ld_);
    CHECKF(l_bnb == l_deq, "step 0: %.9g on the 4-bit checkpoint, %.9g on bitsandbytes' FP32 values with its map", l_bnb, l_deq);
    CHECKF(!memcmp(lb, ld_, sizeof(lb)), "3 steps: %.9g %.9g %.9g, with bitsandbytes' values %.9g %.9g %.9g", lb[0], lb[1], lb[2], ld_[0], ld_[1], ld_[2]);
    printf("    a checkpoint with the AVX-512 nested map (%ld FP32 weights that ours would move): its loss %.9f = bitsandbytes' values', "
           "3 steps equal\n", moved, l_bnb);
}
#endif

#ifndef ENABLE_FP32 // (the dequantized checkpoint holds BF16 values: what the BF16 build's dequantization gives)
static void qlora_edit_config(const char* src_dir, const char* dst_dir, const char* from, const char* to) {
    char cmd[4 * PATH_MAX];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && cp -r %s %s && sed -i 's/%s/%s/' %s/config.json", dst_dir, src_dir, dst_dir, from, to, dst_dir);
    CHECKF(test_run_cmd(cmd, zt_out, sizeof(zt_out)) == 0, "%s:\n%s", cmd, zt_out);
}

TEST(qlora_bnb_checkpoint) {
    const char* py = getenv("ZT_HF_PYTHON");
    if (!py || !*py) TEST_SKIP("needs $ZT_HF_PYTHON with torch, numpy and safetensors (.ci/run makes it)");
    const char* src = "test/fixtures/hf/llama_gqa4_llama3";
    char out[PATH_MAX], cmd[4 * PATH_MAX], bnb[2][PATH_MAX + 32], deq[PATH_MAX + 16];
    snprintf(out, sizeof(out), "%s/qlora_bnb", test_tmpdir());
    snprintf(cmd, sizeof(cmd), "%s dev/bnb_fixture.py %s %s --storage uint8,bfloat16 2>&1", py, src, out);
    int rc0 = test_run_cmd(cmd, zt_out, sizeof(zt_out));
    if (rc0 == 3) TEST_SKIP("$ZT_HF_PYTHON lacks torch, numpy or safetensors");
    CHECKF(rc0 == 0, "%s failed (%d):\n%s", cmd, rc0, zt_out);
    if (rc0) return;
    snprintf(bnb[0], sizeof(bnb[0]), "%s/bnb4", out);
    snprintf(bnb[1], sizeof(bnb[1]), "%s/bnb4_bfloat16", out);
    snprintf(deq, sizeof(deq), "%s/deq", out);
    uint64_t h_file, h_file16, h_made;
    double lf[3], ld_[3];
    double l_file = qlora_step0(bnb[0], "-lora-quant nf4", &h_file, lf);
    double l_file16 = qlora_step0(bnb[1], "-lora-quant nf4", &h_file16, NULL);
    double l_made = qlora_step0(src, "-lora-quant nf4", &h_made, NULL);
    double l_deq = qlora_step0(deq, "", NULL, ld_);
    CHECKF(h_file == h_made, "the 4-bit base read from the bitsandbytes checkpoint (%016llx) is not the one made at load from its source (%016llx)",
           (unsigned long long)h_file, (unsigned long long)h_made);
    CHECKF(h_file16 == h_file && l_file16 == l_file, "bfloat16 quant storage: base %016llx loss %.9g, uint8's %016llx %.9g",
           (unsigned long long)h_file16, l_file16, (unsigned long long)h_file, l_file);
    CHECKF(l_file == l_made, "step 0: the read 4-bit base's loss %.9g, the one made at load %.9g", l_file, l_made);
    CHECKF(l_file == l_deq, "step 0: the 4-bit checkpoint's loss %.9g, its dequantized values' in a BF16 base %.9g", l_file, l_deq);
    CHECKF(!memcmp(lf, ld_, sizeof(lf)), "3 steps: %.9g %.9g %.9g on the 4-bit checkpoint, %.9g %.9g %.9g on its dequantized values",
           lf[0], lf[1], lf[2], ld_[0], ld_[1], ld_[2]);
    printf("    bitsandbytes layout (uint8 and bfloat16 storage) read = made at load (base %016llx); step 0 loss %.9f = the dequantized "
           "BF16 base's; 3 steps equal\n", (unsigned long long)h_file, l_file);
    // refusals: each a copy of the uint8 checkpoint with one thing changed
    static const struct { const char* from; const char* to; const char* extra; const char* expect; } bad[] = {
        {"\"bnb_4bit_quant_type\": \"nf4\"", "\"bnb_4bit_quant_type\": \"fp4\"", "-lora 2 -lora-quant nf4", "bnb_4bit_quant_type 'fp4': only nf4"},
        {"\"quant_method\": \"bitsandbytes\"", "\"quant_method\": \"gptq\"", "-lora 2 -lora-quant nf4", "quant_method 'gptq': only bitsandbytes"},
        {"\"load_in_8bit\": false", "\"load_in_8bit\": true", "-lora 2 -lora-quant nf4", "load_in_8bit true: 8-bit"},
        {"\"bnb_4bit_use_double_quant\": true", "\"bnb_4bit_use_double_quant\": false", "-lora 2 -lora-quant nf4", "bnb_4bit_use_double_quant false"},
        {"\"llm_int8_skip_modules\": null", "\"llm_int8_skip_modules\": [\"lm_head\", \"down_proj\"]", "-lora 2 -lora-quant nf4",
         "llm_int8_skip_modules names down_proj"},
        {"\"quant_method\"", "\"quant_method\"", "-lora 2", "a bitsandbytes 4-bit checkpoint"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char dir[PATH_MAX + 32], flags[3 * PATH_MAX];
        snprintf(dir, sizeof(dir), "%s/qlora_bnb_bad%zu", test_tmpdir(), i);
        qlora_edit_config(bnb[0], dir, bad[i].from, bad[i].to);
        snprintf(flags, sizeof(flags), "-device cpu -e %s -i %s -j %s -t 16 -b 1 -x 1 -v 0 -s 0 %s", dir, zt_data(0), zt_data(1), bad[i].extra);
        int rc = cli_run(flags, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, bad[i].expect), "'%s' ('%s' -> '%s'): exit %d, expected 2 with '%s':\n%s", flags, bad[i].from, bad[i].to, rc,
               bad[i].expect, cli_out);
    }
    // the state's tensors wrong, one thing each: .absmax missing (dir 0); the quant state's blocksize
    // another (1); .absmax one byte short (2); the codes one byte short (3): each named
    char dir[4][PATH_MAX + 32], flags[3 * PATH_MAX], cp[4][3 * PATH_MAX];
    for (int k = 0; k < 4; k++) {
        snprintf(dir[k], sizeof(dir[k]), "%s/qlora_bnb_state%d", test_tmpdir(), k);
        snprintf(cp[k], sizeof(cp[k]), "rm -rf %s && cp -r %s %s", dir[k], bnb[0], dir[k]);
    }
    snprintf(cmd, sizeof(cmd), "%s && %s && %s && %s && %s -c \"import sys, json, torch; from safetensors.torch import load_file, save_file\n"
             "def edit(i, f):\n    p = sys.argv[i] + '/model.safetensors'; d = load_file(p); f(d); save_file(d, p)\n"
             "def bs(d):\n    k = 'model.layers.0.self_attn.k_proj.weight.quant_state.bitsandbytes__nf4'; s = json.loads(bytes(d[k].tolist())); s['blocksize'] = 128\n"
             "    d[k] = torch.tensor(list(json.dumps(s).encode()), dtype=torch.uint8)\n"
             "def cut(k):\n    return lambda d: d.__setitem__(k, d[k][:-1].clone())\n"
             "edit(1, lambda d: d.pop('model.layers.1.mlp.up_proj.weight.absmax')); edit(2, bs)\n"
             "edit(3, cut('model.layers.0.mlp.down_proj.weight.absmax')); edit(4, cut('model.layers.1.self_attn.o_proj.weight'))\" %s %s %s %s 2>&1",
             cp[0], cp[1], cp[2], cp[3], py, dir[0], dir[1], dir[2], dir[3]);
    CHECKF(test_run_cmd(cmd, zt_out, sizeof(zt_out)) == 0, "%s:\n%s", cmd, zt_out);
    static const char* const expect[4][2] = {{"model.layers.1.mlp.up_proj.weight.absmax is missing", ""},
                                              {"k_proj.weight.quant_state.bitsandbytes__nf4: blocksize 128, not 64", ""},
                                              {"model.layers.0.mlp.down_proj.weight.absmax: ", "x U8, but a (40, 57) weight's is"},
                                              {"model.layers.1.self_attn.o_proj.weight: shape (", "the 4-bit codes of a (40, 48) weight"}};
    for (int k = 0; k < 4; k++) {
        snprintf(flags, sizeof(flags), "-device cpu -e %s -i %s -j %s -t 16 -b 1 -x 1 -v 0 -s 0 -lora 2 -lora-quant nf4", dir[k], zt_data(0), zt_data(1));
        int rc = cli_run(flags, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, expect[k][0]) && strstr(cli_out, expect[k][1]), "'%s': exit %d, expected 2 with '%s' ... '%s':\n%s", flags, rc,
               expect[k][0], expect[k][1], cli_out);
    }
}
#endif

// The planner on the seeds' setups: Llama 3 8B on one 24 GB card and 70B on two 48 GB cards fit with a
// 4-bit base (B 1, T 2048); 70B on two 24 GB cards (Answer.AI's, which also offloads the parameters)
// fits only with -offload-params (and the plan says so); a BF16 base of 70B on two 48 GB cards fits in
// none, not even with its shards in a 64 GiB host.
TEST(qlora_plan) {
    static const struct { const char* flags; const char* expect; } cases[] = {
        {"-plan -device cuda -e llama3-8b -world 1 -gpu-mem 24GiB -b 1 -t 2048 -lora 16 -lora-quant nf4", "recommendation: -z"},
        {"-plan -device cuda -e llama3-70b -world 2 -gpu-mem 48GiB -b 1 -t 2048 -lora 16 -lora-quant nf4", "recommendation: -z"},
        {"-plan -device cuda -e llama3-70b -world 2 -gpu-mem 24GiB -host-mem 256GiB -b 1 -t 2048 -lora 16 -lora-quant nf4",
         "-offload-params cpu -lora-base sharded: nothing fits without parameter offload"},
        {"-plan -device cuda -e llama3-70b -world 2 -gpu-mem 48GiB -host-mem 64GiB -b 1 -t 2048 -lora 16", "recommendation: none"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = cli_run(cases[i].flags, cli_out, sizeof(cli_out));
        CHECKF(rc == 0 && strstr(cli_out, cases[i].expect), "'%s': exit %d, expected '%s':\n%s", cases[i].flags, rc, cases[i].expect, cli_out);
    }
}

TEST(qlora_bad_input) {
    static const struct { const char* flags; const char* expect; } cases[] = {
        {"-e tiny -lora 2 -lora-quant fp4", "-lora-quant fp4: not none or nf4"},
        {"-e tiny -lora-quant nf4", "-lora-quant nf4: needs -lora r"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = cli_run(cases[i].flags, cli_out, sizeof(cli_out));
        CHECKF(rc == 2 && strstr(cli_out, cases[i].expect), "'%s': exit %d, expected 2 with '%s':\n%s", cases[i].flags, rc, cases[i].expect, cli_out);
        CHECKF(strstr(cli_out, "step ") == NULL, "'%s' started training", cases[i].flags);
    }
}
