// test/gpu_attention_model.h — the tensor-core attention through the whole model on the CUDA
// device (included by test/test_gpu.cu after test_model.h, whose helpers it uses).
//
// test_model.h's fixture has odd sizes (HS = 8), which take the scalar kernels; these cases build
// a model whose shape takes the tensor-core ones (HS = 64, T = 128: two tiles, so the double
// buffering, a skipped tile and a masked diagonal all occur) and check what the fixture cases check
// bitwise: the gradients of every recompute mode (-r 0..3) and two steps of ZeRO-0..3 at R = 1
// (the second step uses the first's m and v). Sized to add < 30 s to make test on 2 idle cores.
// Last, -attn through the trainer on the CUDA device (gpu_attention_cudnn_flag: where cuDNN cannot run,
// the emulator's case, the refusal and auto's fallback; zero_runs.h's small model and data).

// The model: -e tiny narrowed to 1 layer of 2 heads of 64 (C = 128), vocabulary 256, B 1, T 128,
// on a stream of random tokens (fixed seed).
static const char* gam_flags(const char* extra) {
    static char shard[PATH_MAX], flags[2048];
    if (!shard[0]) {
        snprintf(shard, sizeof(shard), "%s/gam_stream.bin", test_tmpdir());
        const int64_t n = 4096;
        uint16_t* toks = (uint16_t*)malloc(sizeof(uint16_t) * n);
        for (int64_t i = 0; i < n; i++) toks[i] = (uint16_t)(rng_u64(rng_key(12, 0, 0), (uint64_t)i) % 256);
        char err[512];
        if (write_token_shard(shard, toks, n, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
        free(toks);
    }
    snprintf(flags, sizeof(flags), "-device cuda -e tiny -layers 1 -heads 2 -vocab 256 -b 1 -t 128 -i %s -x 2 -v 0 "
             "-s 0 -shuffle 0 -blas 0 %s", shard, extra);
    return flags;
}

// The trainer's attention takes the tensor-core kernels (else these cases would test the others).
static int gam_uses_tc(const Model* m) {
    int C = m->cfg.C, NH = m->cfg.NH;
    return attention_uses_tc(m->T, C / NH, m->a.atty, m->a.lse, m->a.qkv, NULL);
}

TEST(gpu_attention_tc_model_recompute_bitwise) {
#ifdef ENABLE_FP32
    TEST_SKIP("the FP32 build has no tensor-core attention");
#endif
    float* first = NULL;
    float first_loss = 0;
    for (int r = 0; r <= 3; r++) {
        char extra[64];
        snprintf(extra, sizeof(extra), "-r %d -z 0", r);
        Trainer* tr = tm_trainer(gam_flags(extra));
        Model* m = &tr->model;
        if (r == 0) CHECKF(gam_uses_tc(m), "the model's attention does not take the tensor-core kernels");
        int BT = m->B * m->T;
        dataloader_load(&tr->train, 1);
        load_tokens(m, &tr->train, 1);
        gpt_forward(m, m->B, m->T, 1, 1.0f / BT, 1);
        gpt_backward(m, m->B, m->T, 0, 1); // (its classifier computes the losses)
        float loss = (float)sum_losses(m, BT);
        comm_wait_all(&tr->comm);
        int64_t n = m->z.lay.total;
        float* g = (float*)tm_host(m->z.full_grads, sizeof(float) * n);
        if (r == 0) {
            first = g;
            first_loss = loss;
            printf("    loss %.6f (HS 64, T 128, tensor-core attention)\n", loss);
        } else {
            CHECKF(memcmp(first, g, sizeof(float) * n) == 0, "-r %d gradients differ from -r 0", r);
            CHECKF(loss == first_loss, "-r %d loss differs", r);
            free(g);
        }
        tm_free(tr);
    }
    free(first);
}

TEST(gpu_attention_tc_model_zero_bitwise) {
#ifdef ENABLE_FP32
    TEST_SKIP("the FP32 build has no tensor-core attention");
#endif
    uint64_t h0 = 0;
    float l0[2];
    for (int stage = 0; stage <= 3; stage += test_long() ? 1 : 3) { // (make test: ZeRO-0 and ZeRO-3; make test-long: every stage)
        char extra[128];
        snprintf(extra, sizeof(extra), "-r 1 -z %d -poison 1 -comm-delay %d", stage, stage == 3 ? 2 : 0);
        Trainer* tr = tm_trainer(gam_flags(extra));
        if (stage == 0) CHECKF(gam_uses_tc(&tr->model), "the model's attention does not take the tensor-core kernels");
        float loss[2];
        for (int s = 0; s < 2; s++) loss[s] = tm_step(tr).loss; // (each step read back now: on one GPU a step's numbers come a step late)
        Zero* z = &tr->model.z;
        uint64_t h = FNV_INIT;
        const float* state[3] = {z->master, z->m, z->v};
        for (int k = 0; k < 3; k++) {
            float* hs = (float*)tm_host(state[k], sizeof(float) * z->opt_total);
            h = fnv1a(h, hs, sizeof(float) * z->opt_total);
            free(hs);
        }
        if (stage == 0) {
            h0 = h;
            memcpy(l0, loss, sizeof(l0));
            printf("    losses %.6f %.6f\n", loss[0], loss[1]);
        } else {
            CHECKF(h == h0, "ZeRO-%d optimizer state differs from ZeRO-0", stage);
            CHECKF(memcmp(loss, l0, sizeof(l0)) == 0, "ZeRO-%d losses differ from ZeRO-0", stage);
        }
        tm_free(tr);
    }
}

// -attn on the CUDA device, through the trainer: where cuDNN cannot run (the emulator, a build
// without USE_CUDNN=1, no libcudnn.so.9) -attn cudnn exits 2 naming why and -attn auto runs our
// kernels, its settings row saying why; where it can, both run cuDNN's.
TEST(gpu_attention_cudnn_flag) {
    static char out[1 << 16];
    char why[512], cmd[4096];
    const char* brief = NULL;
    int can = attention_cudnn_unavailable(1, 1, why, sizeof(why), &brief) == 0;
    char run[1024]; // (head size 64: one cuDNN takes)
    snprintf(run, sizeof(run), ZT_MODEL " -layers 1 -channels 64 -heads 1 -device cuda -b 1 -x 1 -v 0 -s 0 -threads 1 -verbose 1 -i %s -j %s", zt_data(0), zt_data(1));
    snprintf(cmd, sizeof(cmd), "%s --train %s -attn cudnn", g_test_self, run);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    if (can) CHECKF(rc == 0 && strstr(out, "| -attn           | cudnn"), "-attn cudnn with cuDNN here: exit %d:\n%s", rc, out);
    else {
        CHECKF(rc == 2, "-attn cudnn without cuDNN (%s): exit %d, expected 2:\n%s", why, rc, out);
        CHECKF(strstr(out, why) != NULL, "-attn cudnn: the refusal does not say '%s':\n%s", why, out);
        CHECKF(strstr(out, "step ") == NULL, "-attn cudnn started training:\n%s", out);
    }
    snprintf(cmd, sizeof(cmd), "%s --train %s -attn auto", g_test_self, run);
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "-attn auto: exit %d:\n%s", rc, out);
    char row[256];
    snprintf(row, sizeof(row), "| -attn           | auto \u2192 %s%s%s", can ? "cudnn" : "own (", can ? "" : brief, can ? "" : ")");
    CHECKF(strstr(out, row) != NULL, "-attn auto: no row '%s':\n%s", row, out);
}
