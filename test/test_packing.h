// test/test_packing.h — packed examples isolated (-doc-attention, docs/packing.md): the segment
// table from the loader (recorded example starts, version-1 masks, EOT on plain shards), the whole
// model on a packed micro-batch against each example alone, against PyTorch with an explicit
// block-diagonal causal mask and per-example position ids (dev/reference.py), the issue's
// motivating case (two prompt/completion examples in one sample at lr 0), the masked loss with
// isolation at R = 2 (ZeRO-0 = ZeRO-3 bit for bit), a resume that changes -doc-attention refused,
// and bad masks named.
//
// Needs test_model.h (tm_*), test_llama.h (llama_*), test_finetune.h (ft_*) and zero_runs.h (zt_*)
// before it. The GPU suite (test/test_gpu.cu) runs the in-process model cases on the CUDA device
// (MODEL_DEVICE), and a tensor-core shape there.

// ---- the packed micro-batch: B = 2 rows of T tokens; row 0 holds three examples, row 1 two (the
// second of each row ends the row). Each example's first 3 targets do not count (its prompt).

#define PK_MAX_EX 5
typedef struct { int row, start, len; } PkExample;

// The examples of a B = 2, T micro-batch (at least T = 16), in row order. Returns their number.
static int pk_examples(int T, PkExample* ex) {
    int s01 = T / 4, s02 = T / 4 + (2 * T) / 5, s11 = T / 2 + 1;
    PkExample e[PK_MAX_EX] = {{0, 0, s01}, {0, s01, s02 - s01}, {0, s02, T - s02}, {1, 0, s11}, {1, s11, T - s11}};
    memcpy(ex, e, sizeof(e));
    return PK_MAX_EX;
}

// The packed batch from unit 0 of tr's loader: its inputs, targets with each example's prompt
// masked (-1), and the segment table (B, T) of pk_examples.
static void pk_batch(Trainer* tr, int* in, int* tg, int* seg) {
    int B = tr->model.B, T = tr->model.T;
    dataloader_load(&tr->train, 0);
    memcpy(in, tr->train.inputs, sizeof(int) * B * T);
    memcpy(tg, tr->train.targets, sizeof(int) * B * T);
    PkExample ex[PK_MAX_EX];
    int n = pk_examples(T, ex);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < ex[k].len; i++) {
            int at = ex[k].row * T + ex[k].start + i;
            seg[at] = ex[k].start;
            if (i < 3) tg[at] = -1;
        }
}

// Forward and backward of one micro-batch (micro of `last`: the gradients accumulate over the
// micro-steps of one zero_zero_grads), seg NULL: one sequence per row, the loss gradient scaled by
// dloss. Per-token losses into losses.
static void pk_run(Trainer* tr, const int* in, const int* tg, const int* seg, float* losses, float dloss, int micro, int last) {
    Model* m = &tr->model;
    int B = m->B, T = m->T;
    size_t bytes = sizeof(int) * (size_t)B * T;
    dev_from_host(m->a.inputs, in, bytes);
    dev_from_host(m->a.targets, tg, bytes);
    if (seg) dev_from_host(m->a.segs, seg, bytes);
    m->a.seg = seg ? m->a.segs : NULL;
    gpt_forward(m, B, T, 1, dloss, 1);
    gpt_backward(m, B, T, micro, last); // (its classifier computes the losses)
    dev_to_host(losses, m->a.losses, sizeof(float) * B * T);
}

// The packed batch with seg (isolated), and without (one sequence per row), against each example
// alone at the start of a row (its tokens, then the rest of the row not counted), the alone runs'
// gradients summed over their micro-steps: each example's loss sum and the gradient of every
// tensor. Returns the worst relative errors (isolated: loss sums, gradients; not isolated: the
// loss sums, which must be far off).
static void pk_packed_vs_alone(Trainer* tr, double* loss_err, double* grad_err, double* off_err) {
    Model* m = &tr->model;
    int B = m->B, T = m->T, BT = B * T;
    int64_t nlog = m->z.lay.logical_total;
    int *in = (int*)malloc(sizeof(int) * BT), *tg = (int*)malloc(sizeof(int) * BT), *seg = (int*)malloc(sizeof(int) * BT);
    int *ain = (int*)malloc(sizeof(int) * BT), *atg = (int*)malloc(sizeof(int) * BT);
    float *lp = (float*)malloc(sizeof(float) * BT), *l0 = (float*)malloc(sizeof(float) * BT), *la = (float*)malloc(sizeof(float) * BT);
    float *gp = (float*)calloc(nlog, sizeof(float)), *ga = (float*)calloc(nlog, sizeof(float));
    double alone_sum[PK_MAX_EX];
    PkExample ex[PK_MAX_EX];
    int n = pk_examples(T, ex);
    pk_batch(tr, in, tg, seg);
#ifndef ZT_GPU_SUITE // (the GPU suite leaves the can-fail check to the CPU's: emulated time is dear)
    zero_zero_grads(&m->z);
    pk_run(tr, in, tg, NULL, l0, 1.0f, 0, 1); // not isolated (its gradients are discarded)
#else
    for (int i = 0; i < BT; i++) l0[i] = NAN;
#endif
    zero_zero_grads(&m->z);
    pk_run(tr, in, tg, seg, lp, 1.0f, 0, 1);
    comm_wait_all(&tr->comm);
    tm_to_logical(&m->z, m->z.full_grads, gp);
    zero_zero_grads(&m->z);
    int runs = (n + B - 1) / B;
    for (int r = 0; r < runs; r++) { // examples r*B .. r*B + B-1 alone, one per row
        memcpy(ain, in, sizeof(int) * BT);
        for (int i = 0; i < BT; i++) atg[i] = -1;
        for (int b = 0; b < B && r * B + b < n; b++) {
            const PkExample* e = &ex[r * B + b];
            memcpy(ain + b * T, in + e->row * T + e->start, sizeof(int) * e->len);
            memcpy(atg + b * T, tg + e->row * T + e->start, sizeof(int) * e->len);
        }
        pk_run(tr, ain, atg, NULL, la, 1.0f, r, r == runs - 1);
        for (int b = 0; b < B && r * B + b < n; b++) {
            double s = 0.0;
            for (int i = 0; i < ex[r * B + b].len; i++) s += la[b * T + i];
            alone_sum[r * B + b] = s;
        }
    }
    comm_wait_all(&tr->comm);
    tm_to_logical(&m->z, m->z.full_grads, ga);
    *loss_err = 0.0;
    *off_err = 0.0;
    for (int k = 0; k < n; k++) {
        double sp = 0.0, s0 = 0.0;
        for (int i = 0; i < ex[k].len; i++) { sp += lp[ex[k].row * T + ex[k].start + i]; s0 += l0[ex[k].row * T + ex[k].start + i]; }
        *loss_err = fmax(*loss_err, fabs(sp - alone_sum[k]) / fabs(alone_sum[k]));
        if (ex[k].start > 0) *off_err = isnan(s0) ? NAN : fmax(*off_err, fabs(s0 - alone_sum[k]) / fabs(alone_sum[k]));
    }
    *grad_err = 0.0;
    const char* worst = "";
    for (int k = 0; k < NUM_TENSORS; k++) {
        const TensorInfo* t = &m->d.t[k];
        if (t->n == 0) continue;
        int64_t len = t->n * (t->io ? 1 : m->cfg.L);
        double e = tm_relerr_f(gp + t->logical, ga + t->logical, len);
        if (e > *grad_err) worst = t->name;
        *grad_err = fmax(*grad_err, e);
    }
    printf("      worst gradient: %s\n", worst);
    free(in); free(tg); free(seg); free(ain); free(atg); free(lp); free(l0); free(la); free(gp); free(ga);
}

// Tolerances: on the CPU device an example sees the same keys in the same order packed or alone
// (TOL_PACKED_*); on the CUDA device the kernels' tiles sit at other offsets of a packed example
// than of the same example alone (TOL_GPU_*, the GPU against CPU bound).
#ifdef ZT_GPU_SUITE
#define PK_TOL_LOSS TOL_GPU_FWD
#define PK_TOL_GRAD TOL_GPU_BWD
#else
#define PK_TOL_LOSS TOL_PACKED_LOSS
#define PK_TOL_GRAD TOL_PACKED_GRAD
#endif

// Check one packed-vs-alone comparison (pk_packed_vs_alone): within the tolerances, and without
// isolation at least 10x further off than the tolerance and than the isolated error (so it can fail).
static void pk_check(const char* name, const Trainer* tr, double le, double ge, double off) {
    char o[64];
    if (isnan(off)) snprintf(o, sizeof(o), "(the CPU suite's)");
    else snprintf(o, sizeof(o), "loss sums %.2e off", off);
    printf("    %s, B %d T %d, 5 examples: loss sums %.2e, gradients %.2e (tol %.0e, %.0e); not isolated: %s\n",
           name, tr->model.B, tr->model.T, le, ge, PK_TOL_LOSS, PK_TOL_GRAD, o);
    CHECKF(le < PK_TOL_LOSS, "%s: a packed example's loss sum is %.3g off its loss alone", name, le);
    CHECKF(ge < PK_TOL_GRAD, "%s: packed gradients %.3g off the sum of the examples' alone", name, ge);
    CHECKF(isnan(off) || off > 10 * fmax(le, TOL_PACKED_LOSS), "%s: without isolation the packed examples are only %.3g off (the test cannot tell)", name, off);
}

// Packed = alone for GPT-2 (the fixture: learned positions) and the Llama family (RoPE; GQA): each
// example's loss sum and every gradient within the tolerance, and without isolation the examples
// after the first far off. make test: GPT-2, llama-tiny and qwen3-tiny (its q/k norms) in FP32,
// GPT-2 and llama-tiny-tied in BF16 on the CPU device; on the emulated CUDA device (the fixture's
// odd head sizes take the scalar attention kernels; the tensor-core ones:
// packed_examples_equal_alone_tc) GPT-2 in FP32 (make test-long: all but llama-tiny in both
// builds; the op cases check the kernels with seg).
static int pk_sampled(int fam) {
#ifdef ZT_GPU_SUITE
    if (test_long()) return fam != 1;
#ifdef ENABLE_FP32
    return fam == 0;
#else
    return 0;
#endif
#endif
    return fam == 0 || llama_shape_sampled(fam - 1);
}
TEST(packed_examples_equal_alone) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    int ran = 0;
    for (int fam = 0; fam < 1 + LLAMA_NSHAPES; fam++) {
        if (!pk_sampled(fam)) continue;
        ran++;
        Trainer* tr = fam == 0 ? tm_trainer(tm_fixture_flags(&fx, "-r 0 -z 0")) : llama_trainer(fam - 1, "-r 0 -z 0");
        if (fam > 0) { zero_fill_opt(&tr->model.z, 0, llama_test_fill, &tr->model.d); zero_params_from_master(&tr->model.z); }
        double le, ge, off;
        pk_packed_vs_alone(tr, &le, &ge, &off);
        pk_check(fam == 0 ? "gpt-2 (fixture)" : g_llama_names[fam - 1], tr, le, ge, off);
        tm_free(tr);
    }
    if (!ran) printf("    the scalar kernels' case runs in the FP32 build (make test-long: here too)\n");
    fixture_free(&fx);
}

#if defined(ZT_GPU_SUITE) && !defined(ENABLE_FP32)
// The same through the tensor-core FlashAttention-2 kernels (gpu_attention_model.h's shape: HS 64,
// T 128, two tiles per row, so examples start inside tiles and tiles are skipped), B 2.
TEST(packed_examples_equal_alone_tc) {
    Trainer* tr = tm_trainer(gam_flags("-b 2 -r 0 -z 0"));
    CHECKF(gam_uses_tc(&tr->model), "the model's attention does not take the tensor-core kernels");
    double le, ge, off;
    pk_packed_vs_alone(tr, &le, &ge, &off);
    pk_check("tiny (HS 64, tensor-core attention)", tr, le, ge, off);
    tm_free(tr);
}
#endif

#if defined(ENABLE_FP32) && !defined(ZT_GPU_SUITE)
// The packed batch against PyTorch (float64) with an explicit block-diagonal causal mask and
// per-example position ids (dev/reference.py reads the segment table after the targets): the loss
// over the counted targets, each per-token loss and every gradient. GPT-2 (learned positions: the
// wpe rows restart) and llama-tiny (RoPE's positions restart).
TEST(packed_vs_pytorch_block_diagonal) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import torch, numpy'", tm_torch_python());
    if (test_run_cmd(probe, NULL, 0) != 0) TEST_SKIP("needs a python with torch and numpy (ZT_TORCH_PYTHON or /usr/bin/python3)");
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    struct { TensorInfo t[NUM_TENSORS]; int L, BT; int* tg; float *losses, *g; int64_t counted; float loss; char out[PATH_MAX]; } F[2];
    static char pycmd[2][4 * PATH_MAX];
    for (int fam = 0; fam < 2; fam++) { // ours, and the reference's inputs (one trainer at a time: the allocator's totals are global)
        Trainer* tr = fam == 0 ? tm_trainer(tm_fixture_flags(&fx, "-r 0 -z 0")) : llama_trainer(0, "-r 0 -z 0");
        Model* m = &tr->model;
        if (fam > 0) { zero_fill_opt(&m->z, 0, llama_test_fill, &m->d); zero_params_from_master(&m->z); }
        int B = m->B, T = m->T, BT = B * T;
        int64_t nlog = m->z.lay.logical_total;
        int *in = (int*)malloc(sizeof(int) * BT), *seg = (int*)malloc(sizeof(int) * BT);
        int* tg = F[fam].tg = (int*)malloc(sizeof(int) * BT);
        float* losses = F[fam].losses = (float*)malloc(sizeof(float) * BT);
        F[fam].g = (float*)calloc(nlog, sizeof(float));
        pk_batch(tr, in, tg, seg);
        int64_t counted = 0;
        for (int i = 0; i < BT; i++) counted += tg[i] >= 0;
        F[fam].counted = counted;
        zero_zero_grads(&m->z);
        pk_run(tr, in, tg, seg, losses, 1.0f / (float)counted, 0, 1); // (the reference's gradient is the mean's)
        comm_wait_all(&tr->comm);
        tm_to_logical(&m->z, m->z.full_grads, F[fam].g);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += losses[i];
        F[fam].loss = (float)(sum / (double)counted);
        char tpath[PATH_MAX], cfg[PATH_MAX], wpath[PATH_MAX];
        snprintf(tpath, sizeof(tpath), "%s/packed%d.i32", test_tmpdir(), fam);
        snprintf(F[fam].out, sizeof(F[fam].out), "%s/packed%d_ref.bin", test_tmpdir(), fam);
        CHECK(tm_write_tokens(tpath, B, T, in, tg, seg) == 0);
        if (fam == 0) {
            snprintf(pycmd[fam], sizeof(pycmd[fam]), "%s dev/reference.py --masked-grads test/fixtures/ref_model.bin %s %s", tm_torch_python(), tpath, F[fam].out);
        } else {
            float* w = (float*)calloc(nlog, sizeof(float));
            snprintf(cfg, sizeof(cfg), "%s/packed_llama.json", test_tmpdir());
            snprintf(wpath, sizeof(wpath), "%s/packed_llama.f32", test_tmpdir());
            llama_write_config(&m->cfg, cfg);
            tm_to_logical(&m->z, m->z.master, w);
            CHECK(tm_write_floats(wpath, w, nlog) == 0);
            free(w);
            snprintf(pycmd[fam], sizeof(pycmd[fam]), "%s dev/reference.py --llama-grads %s %s %s %s", tm_torch_python(), cfg, wpath, tpath, F[fam].out);
        }
        memcpy(F[fam].t, m->d.t, sizeof(F[fam].t));
        F[fam].L = m->cfg.L;
        F[fam].BT = BT;
        free(in);
        free(seg);
        tm_free(tr);
    }
    // both references at once (each is mostly PyTorch's start-up): the exit status is either's failure
    static char cmd[9 * PATH_MAX], pyout[16384];
    snprintf(cmd, sizeof(cmd), "%s & p=$!; %s; b=$?; wait $p; a=$?; exit $((a | b))", pycmd[0], pycmd[1]);
    int rc = test_run_cmd(cmd, pyout, sizeof(pyout));
    CHECKF(rc == 0, "dev/reference.py failed:\n%s", pyout);
    for (int fam = 0; fam < 2; fam++) {
        int BT = F[fam].BT;
        Fixture rf;
        char err[512];
        if (rc == 0 && fixture_load(&rf, F[fam].out, err, sizeof(err)) == 0) {
            float loss = F[fam].loss, ref_loss = ((const float*)fixture_get(&rf, "loss")->data)[0];
            double lerr = fabs(loss - ref_loss) / fabs(ref_loss), worst = 0.0, tok_err = -1.0;
            const FixtureTensor* rl = fixture_get(&rf, "losses");
            CHECKF(rl && rl->n == BT, "the reference wrote no per-token losses");
            if (rl && rl->n == BT) {
                float* masked = (float*)malloc(sizeof(float) * BT);
                for (int i = 0; i < BT; i++) masked[i] = F[fam].tg[i] >= 0 ? F[fam].losses[i] : 0.0f;
                tok_err = tm_relerr_f(masked, (const float*)rl->data, BT);
                free(masked);
                CHECKF(tok_err < TOL_MODEL_FWD, "per-token losses %.3g off PyTorch's", tok_err);
            }
            CHECKF(lerr < TOL_MODEL_LOSS, "packed loss %.7f vs PyTorch %.7f", loss, ref_loss);
            for (int k = 0; k < NUM_TENSORS; k++) {
                const TensorInfo* t = &F[fam].t[k];
                if (t->n == 0) continue;
                char name[80];
                snprintf(name, sizeof(name), "grad.%s", t->name);
                const FixtureTensor* r = fixture_get(&rf, name);
                int64_t n = t->n * (t->io ? 1 : F[fam].L);
                CHECKF(r && r->n == n, "%s missing or of the wrong size", name);
                if (!r || r->n != n) continue;
                double e = tm_relerr_f(F[fam].g + t->logical, (const float*)r->data, n);
                worst = fmax(worst, e);
                CHECKF(e < TOL_MODEL_GRAD, "%s %.3g", name, e);
            }
            printf("    %s packed (5 examples, %lld of %d targets counted): loss %.7f vs PyTorch %.7f, per-token losses %.2e, worst gradient %.2e\n",
                   fam ? "llama-tiny" : "gpt-2", (long long)F[fam].counted, BT, loss, ref_loss, tok_err, worst);
            fixture_free(&rf);
        } else CHECKF(0, "%s: %s", F[fam].out, rc ? "no output" : err);
        free(F[fam].tg); free(F[fam].losses); free(F[fam].g);
    }
    fixture_free(&fx);
}
#endif

#ifndef ZT_GPU_SUITE
// ---- the data side (loader and -tokenize), in one binary: FP32

#ifdef ENABLE_FP32
// A shard of n ids with a mask file of version `version` (bytes as given).
static void pk_write(const char* path, const uint16_t* toks, const uint8_t* mask, int64_t n, int T, int version) {
    char err[512], mpath[PATH_MAX + 8];
    snprintf(mpath, sizeof(mpath), "%s.mask", path);
    if (write_token_shard(path, toks, n, err, sizeof(err)) || (mask && write_mask_file(mpath, mask, n, T, version, err, sizeof(err)))) {
        printf("    %s\n", err);
        exit(1);
    }
}

// The segment table from recorded starts (version 2), the same whatever the batch size (a function
// of the sample); a version-1 mask records none (auto: off; on: at the document token); plain
// shards at each EOT (it opens the document after it); a sample's first token always starts one.
TEST(packing_loader_segments) {
    const int T = 8, N = 4 * T + 1, EOT = 50;
    char path[PATH_MAX], err[1024];
    uint16_t toks[N];
    uint8_t mask[N];
    for (int i = 0; i < N; i++) { toks[i] = (uint16_t)(i % 7 == 3 ? EOT : 60 + i % 13); mask[i] = (uint8_t)(i % 3 == 1); }
    const int starts[] = {0, 3, 5, 8, 12, 13, 19, 27, 31}; // 8 and 16 (sample starts): 8 marked, 16 not (a partial example)
    for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); k++) mask[starts[k]] |= MASK_STARTS;
    snprintf(path, sizeof(path), "%s/pk_v2.bin", test_tmpdir());
    pk_write(path, toks, mask, N, T, 2);
    int want[4][8]; // per sample j (tokens j*T .. j*T + T-1)
    for (int j = 0; j < 4; j++)
        for (int t = 0; t < T; t++) {
            int i = j * T + t, s = t == 0 || (mask[i] & MASK_STARTS);
            want[j][t] = s ? t : want[j][t - 1];
        }
    int bad = 0;
    for (int B = 1; B <= 2; B++) {
        DataLoader dl;
        CHECKF(dataloader_init(&dl, path, B, T, 100, 0, 0, err, sizeof(err)) == 0 && dl.has_starts, "%s", err);
        CHECKF(dataloader_segments(&dl, -1, err, sizeof(err)) == 0, "%s", err);
        for (int u = 0; u < 4 / B; u++) {
            CHECK(dataloader_load(&dl, u) == 0);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) bad += dl.seg[b * T + t] != want[u * B + b][t];
            for (int b = 0; b < B; b++) // the targets read bit 0 only
                for (int t = 0; t < T; t++) bad += (dl.targets[b * T + t] >= 0) != (mask[(u * B + b) * T + t + 1] & MASK_COUNTS);
        }
        dataloader_free(&dl);
    }
    CHECKF(bad == 0, "%d segment table entries or targets wrong (version-2 starts)", bad);
    // version 1: no starts; on, the document token opens each example
    for (int i = 0; i < N; i++) mask[i] &= MASK_COUNTS;
    snprintf(path, sizeof(path), "%s/pk_v1.bin", test_tmpdir());
    pk_write(path, toks, mask, N, T, 1);
    DataLoader dl;
    CHECKF(dataloader_init(&dl, path, 1, T, 100, 0, 0, err, sizeof(err)) == 0 && dl.has_mask && !dl.has_starts && !dl.seg, "%s", err);
    CHECKF(dataloader_segments(&dl, -1, err, sizeof(err)) != 0 && strstr(err, "pk_v1.bin") && strstr(err, "version-1"), "v1 without a document token: %s", err);
    CHECKF(dataloader_segments(&dl, 100, err, sizeof(err)) != 0 && strstr(err, "inside the vocabulary"), "a document token outside V: %s", err);
    CHECKF(dataloader_segments(&dl, EOT, err, sizeof(err)) == 0, "%s", err);
    for (int u = 0; u < 4; u++) {
        CHECK(dataloader_load(&dl, u) == 0);
        for (int t = 0, s = 0; t < T; t++) {
            if (t == 0 || toks[u * T + t] == EOT) s = t;
            bad += dl.seg[t] != s;
        }
    }
    dataloader_free(&dl);
    CHECKF(bad == 0, "%d segment table entries wrong (at EOT)", bad);
    // plain shards: the same rule
    snprintf(path, sizeof(path), "%s/pk_plain.bin", test_tmpdir());
    pk_write(path, toks, NULL, N, T, 0);
    CHECKF(dataloader_init(&dl, path, 2, T, 100, 0, 0, err, sizeof(err)) == 0 && !dl.has_mask && !dl.has_starts, "%s", err);
    CHECKF(dataloader_segments(&dl, EOT, err, sizeof(err)) == 0, "%s", err);
    CHECK(dataloader_load(&dl, 1) == 0);
    for (int b = 0; b < 2; b++)
        for (int t = 0, s = 0; t < T; t++) {
            if (t == 0 || toks[(2 + b) * T + t] == EOT) s = t;
            bad += dl.seg[b * T + t] != s;
        }
    dataloader_free(&dl);
    CHECKF(bad == 0, "%d segment table entries wrong (plain shards)", bad);
    printf("    version 2: starts as recorded at B = 1 and 2; version 1 and plain shards: at each EOT; no table without one\n");
}

// Bad masks are named (the file) and refused: a version-2 start on the shard's last token (nothing
// can start there), a byte with bits above 1, a version-1 byte of 2 (v1 records no starts), an
// unknown version, masks of both versions under one pattern.
TEST(packing_bad_masks_named) {
    const int T = 8, N = 2 * T + 1;
    uint16_t toks[N];
    uint8_t mask[N];
    char path[PATH_MAX], err[1024];
    for (int i = 0; i < N; i++) { toks[i] = (uint16_t)(i % 50); mask[i] = (uint8_t)(i % 2); }
    struct { const char* name; int version, at, value; const char* expect; } bad[] = {
        {"pk_last.bin", 2, N - 1, MASK_STARTS, "an example starts at index 16, the shard's last token"},
        {"pk_bits.bin", 2, 5, 4, "value 4 at index 5 is not 0..3"},
        {"pk_v1start.bin", 1, 5, MASK_STARTS, "value 2 at index 5 is not 0 or 1"},
        {"pk_version.bin", 3, 5, 1, "wrong magic/version 20261201/3"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        uint8_t mk[N];
        memcpy(mk, mask, N);
        mk[bad[k].at] = (uint8_t)bad[k].value;
        snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), bad[k].name);
        pk_write(path, toks, mk, N, T, bad[k].version);
        DataLoader dl;
        int rc = dataloader_init(&dl, path, 1, T, 100, 0, 0, err, sizeof(err));
        CHECKF(rc != 0 && strstr(err, bad[k].expect) && strstr(err, bad[k].name), "%s: %s", bad[k].name, rc ? err : "accepted");
        if (rc == 0) dataloader_free(&dl);
    }
    snprintf(path, sizeof(path), "%s/pk_mixed_a.bin", test_tmpdir());
    pk_write(path, toks, mask, N, T, 1);
    snprintf(path, sizeof(path), "%s/pk_mixed_b.bin", test_tmpdir());
    pk_write(path, toks, mask, N, T, 2);
    snprintf(path, sizeof(path), "%s/pk_mixed_*.bin", test_tmpdir());
    DataLoader dl;
    int rc = dataloader_init(&dl, path, 1, T, 100, 0, 0, err, sizeof(err));
    CHECKF(rc != 0 && strstr(err, "pk_mixed_b.bin.mask: version 2 while") && strstr(err, "pk_mixed_a.bin.mask is version 1"), "mixed versions: %s", rc ? err : "accepted");
    if (rc == 0) dataloader_free(&dl);
}
#endif // ENABLE_FP32

#ifdef ENABLE_FP32 // (the 1e-6 bound is FP32's; the BF16 path is packed_examples_equal_alone's)
// The motivating case: two prompt/completion examples packed in one sample give, at lr 0,
// the mean loss of the same examples each alone (their counted targets' weighted mean); without
// isolation (-doc-attention 0) they did not (~1e-3 relative). -doc-attention auto is 1 for such data.
TEST(packing_two_examples_mean_loss) {
    char in[PATH_MAX], prefix[3][PATH_MAX], err[1024];
    Tokenizer tok;
    if (tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) || tokenizer_load_merges(&tok, "data/gpt2_merges.bin", err, sizeof(err))) {
        printf("    %s\n", err); CHECK(0); return;
    }
    const char* lines[2] = {"{\"prompt\": \"Q: What is the capital of France?\\nA:\", \"completion\": \" Paris, a city on the Seine.\"}\n",
                            "{\"prompt\": \"Translate to French: good morning\", \"completion\": \" bonjour\"}\n"};
    const int T = 48;
    for (int k = 0; k < 3; k++) { // 0: both packed, 1 and 2: each alone
        snprintf(in, sizeof(in), "%s/pk_two%d.jsonl", test_tmpdir(), k);
        snprintf(prefix[k], sizeof(prefix[k]), "%s/pk_two%d", test_tmpdir(), k);
        FILE* f = fopen(in, "w");
        if (k != 2) fputs(lines[0], f);
        if (k != 1) fputs(lines[1], f);
        fclose(f);
        PromptStats st;
        CHECKF(tokenize_prompts_to_shards(&tok, in, prefix[k], T, 0, 1000, "", &st, err, sizeof(err)) == 0 && st.shards[0] == 1, "%s", err);
    }
    tokenizer_free(&tok);
    double loss[2][3];
    int64_t counted[3];
    for (int iso = 0; iso < 2; iso++)
        for (int k = 0; k < 3; k++) {
            if (!iso && k > 0) continue; // (an example alone is the same either way: one example per sample)
            char flags[2 * PATH_MAX], shard[PATH_MAX + 32];
            tokenize_shard_path(shard, sizeof(shard), prefix[k], "train", 0);
            snprintf(flags, sizeof(flags), MODEL_DEVICE "-e tiny -layers 2 -channels 16 -heads 2 -b 1 -t %d -l 0 -x 1 -v 0 -s 0 -shuffle 0 -r 0 -z 0 -i %s%s",
                     T, shard, iso ? "" : " -doc-attention 0");
            Trainer* tr = tm_trainer(flags);
            CHECKF(tr->train.has_starts && tr->train.total_samples == 1, "%s: %lld samples", shard, (long long)tr->train.total_samples);
            CHECKF(!strcmp(tr->f.doc_attention_str, iso ? "1" : "0"), "-doc-attention resolved to %s", tr->f.doc_attention_str);
            counted[k] = tr->train.mask_counted;
            loss[iso][k] = tm_step(tr).loss;
            tm_free(tr);
        }
    CHECK(counted[0] == counted[1] + counted[2]);
    loss[0][1] = loss[1][1];
    loss[0][2] = loss[1][2];
    double rel[2];
    for (int iso = 0; iso < 2; iso++) {
        double mean = (loss[iso][1] * counted[1] + loss[iso][2] * counted[2]) / (double)counted[0];
        rel[iso] = fabs(loss[iso][0] - mean) / mean;
    }
    printf("    packed %.7f vs alone %.7f, %.7f (%lld + %lld targets): %.2e relative (tol %.0e); -doc-attention 0: %.2e\n", loss[1][0],
           loss[1][1], loss[1][2], (long long)counted[1], (long long)counted[2], rel[1], TOL_PACKED_LOSS, rel[0]);
    CHECKF(rel[1] < TOL_PACKED_LOSS, "isolated: packed %.3g off the examples alone", rel[1]);
    CHECKF(rel[0] > 10 * TOL_PACKED_LOSS, "-doc-attention 0: packed only %.3g off the examples alone", rel[0]);
}
#endif
#endif // !ZT_GPU_SUITE

#if !defined(ENABLE_FP32) && !defined(ZT_GPU_SUITE) // (processes: the BF16 binary only)
// The trainer as a process: the setting in the run record and resolved in the settings table; a
// resume that changes it refused (exit 2, naming the flag), one that keeps it accepted, one of a
// checkpoint from before the flag runs without isolation (as that run did);
// -doc-attention 1 on plain shards without a document token in the vocabulary refused; a bad
// value refused. On the ZeRO tests' small-vocabulary data with a version-2 mask.
static const char* pk_zt_masked(void) {
    static char shard[PATH_MAX];
    if (shard[0]) return shard;
    char mpath[PATH_MAX + 8], err[512];
    snprintf(shard, sizeof(shard), "%s/pk_zt_masked.bin", test_tmpdir());
    snprintf(mpath, sizeof(mpath), "%s.mask", shard);
    DataLoader dl;
    if (dataloader_init(&dl, zt_data(0), 1, ZT_T, ZT_V, 0, 0, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
    int64_t n = dl.shards[0].ntok;
    uint8_t* mask = (uint8_t*)malloc(n);
    for (int64_t i = 0; i < n; i++) mask[i] = (uint8_t)(ft_some(i) | ((i * 2654435761u) % 7 == 0 ? MASK_STARTS : 0));
    mask[n - 1] &= MASK_COUNTS;
    int wrc = write_token_shard(shard, dl.shards[0].tokens, n, err, sizeof(err)) || write_mask_file(mpath, mask, n, ZT_T, 2, err, sizeof(err));
    free(mask);
    dataloader_free(&dl);
    if (wrc) { printf("    %s\n", err); exit(1); }
    return shard;
}

TEST(packing_cli_record_resume_refusals) {
    char cmd[4 * PATH_MAX], out[16384], done[PATH_MAX + 64];
    const char* dir = zt_dir("pk_resume");
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu " ZT_MODEL " -b 2 -x 1 -v 0 -s 0 -n 1 -o %s -i %s", g_test_self, dir, pk_zt_masked());
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0 && strstr(out, "doc attention: on for -i") && strstr(out, "| -doc-attention  | auto \u2192 1"), "a run on version-2 masks: rc %d\n%s", rc, out);
    snprintf(done, sizeof(done), "%s/DONE_00000001", dir);
    char* rec = zt_read_file(done);
    CHECKF(rec && strstr(rec, "-doc-attention 1"), "the checkpoint does not record -doc-attention 1:\n%s", rec ? rec : "(no DONE)");
    free(rec);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu -o %s -y 1 -x 2 -doc-attention 0", g_test_self, dir);
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "flag -doc-attention: this run gives '0', the checkpoint of step 1 was trained with '1'"), "a resume changing it: rc %d\n%s", rc, out);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu -o %s -y 1 -x 2", g_test_self, dir);
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0 && strstr(out, "doc attention: on for -i"), "a resume keeping it: rc %d\n%s", rc, out);
    // a checkpoint from before the flag (its record has no -doc-attention line): that run had no isolation, nor has its resume
    snprintf(cmd, sizeof(cmd), "sed -i '/^run -doc-attention /d' %s/DONE_00000002 %s/LATEST", dir, dir);
    CHECK(test_run_cmd(cmd, NULL, 0) == 0);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu -o %s -y 1 -x 3", g_test_self, dir);
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0 && strstr(out, "written before -doc-attention existed") && strstr(out, "| -doc-attention  | (from checkpoint) \u2192 0") &&
           strstr(out, "doc attention: off"), "a resume of a checkpoint from before the flag: rc %d\n%s", rc, out);
    // plain shards: auto is 0; 1 needs the document token inside the vocabulary (GPT-2's 50256 is not, at V = 97)
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu " ZT_MODEL " -b 2 -x 0 -v 0 -s 0 -i %s -doc-attention 1", g_test_self, zt_data(0));
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "flag -doc-attention 1: -i: shard") && strstr(out, "inside the vocabulary"), "plain shards, no EOT in V: rc %d\n%s", rc, out);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu " ZT_MODEL " -b 2 -x 0 -v 0 -s 0 -i %s -doc-attention yes", g_test_self, zt_data(0));
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 2 && strstr(out, "flag -doc-attention: 'yes' is not 0, 1 or auto"), "a bad value: rc %d\n%s", rc, out);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=1 %s --train -device cpu " ZT_MODEL " -b 2 -x 0 -v 0 -s 0 -i %s", g_test_self, zt_data(0));
    rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0 && strstr(out, "| -doc-attention  | auto \u2192 0") && !strstr(out, "doc attention: on"), "plain shards, auto: rc %d\n%s", rc, out);
}

// The masked loss with isolation at R = 2: ZeRO-0 and ZeRO-3 bit for bit (losses, norms, the final
// hashes), GPT-2 and llama-tiny, on version-2 masks (auto: on).
TEST(packing_masked_R2_zero0_zero3_bitwise) {
    for (int fam = 0; fam < 2; fam++) {
        char ref_hash[512] = "";
        ZtLog ref;
        for (int z = 0; z <= 3; z += 3) {
            char name[64], flags[2048], hash[512];
            snprintf(name, sizeof(name), "pk_r2_%d_z%d", fam, z);
            const char* dir = zt_dir(name);
            snprintf(flags, sizeof(flags), "%s -b 2 -x 3 -v 0 -s 0 -z %d -o %s -log-hash 1 -i %s", fam ? g_llama_zt[0] : ZT_MODEL, z, dir, pk_zt_masked());
            int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
            CHECKF(rc == 0 && strstr(zt_out, "doc attention: on for -i"), "%s z=%d failed (%d):\n%s", fam ? "llama" : "gpt-2", z, rc, zt_out);
            if (rc) continue;
            cli_hash_line(zt_out, hash, sizeof(hash));
            ZtLog lg;
            zt_read_log(dir, &lg);
            CHECKF(lg.n == 3, "z=%d: %d steps logged", z, lg.n);
            if (z == 0) { ref = lg; snprintf(ref_hash, sizeof(ref_hash), "%s", hash); continue; }
            CHECKF(!memcmp(lg.loss, ref.loss, sizeof(lg.loss)) && !memcmp(lg.norm, ref.norm, sizeof(lg.norm)) && hash[0] && !strcmp(hash, ref_hash),
                   "%s: ZeRO-3 differs from ZeRO-0:\n  %s\n  %s", fam ? "llama" : "gpt-2", hash, ref_hash);
        }
        printf("    %s, R = 2, masked loss, packed examples isolated: ZeRO-0 = ZeRO-3 bit for bit (loss %.6f ... %.6f)\n", fam ? "llama-tiny" : "gpt-2",
               ref.loss[0], ref.loss[2]);
    }
}

// LoRA with dropout on tokenized prompt/completion data (version-2 masks, -i and -j, -doc-attention
// auto -> 1) at R = 2: -z 1 = -z 3 -lora-base replicated bit for bit (losses, val losses, state
// hashes), and a checkpoint of step 2 resumed at the other stage = the uninterrupted run.
TEST(packing_lora_dropout_z1_z3rep_resume) {
    char in[PATH_MAX], prefix[2][PATH_MAX], shard[2][PATH_MAX + 32], err[1024];
    Tokenizer tok;
    if (tokenizer_init(&tok, "data/gpt2_tokenizer.bin", err, sizeof(err)) || tokenizer_load_merges(&tok, "data/gpt2_merges.bin", err, sizeof(err))) {
        printf("    %s\n", err); CHECK(0); return;
    }
    static const char* words[6] = {"red", "green", "blue", "cat", "dog", "river"};
    for (int k = 0; k < 2; k++) { // 0: train, 1: val
        snprintf(in, sizeof(in), "%s/pk_lora%d.jsonl", test_tmpdir(), k);
        snprintf(prefix[k], sizeof(prefix[k]), "%s/pk_lora%d", test_tmpdir(), k);
        FILE* f = fopen(in, "w");
        CHECK(f != NULL);
        if (!f) return;
        for (int i = 0; i < 24; i++)
            fprintf(f, "{\"prompt\": \"Q: the %s %s?\\nA:\", \"completion\": \" a %s %s.\"}\n", words[(i + k) % 6], words[(i * 5) % 6],
                    words[(i * 7 + 1) % 6], words[(i + 3 * k) % 6]);
        fclose(f);
        PromptStats st;
        CHECKF(tokenize_prompts_to_shards(&tok, in, prefix[k], 32, 0, 100000, "", &st, err, sizeof(err)) == 0, "%s", err);
        tokenize_shard_path(shard[k], sizeof(shard[k]), prefix[k], "train", 0);
    }
    tokenizer_free(&tok);
    static const char* stage[2] = {"-z 1", "-z 3 -lora-base replicated"};
    char hash[3][512], flags[4 * PATH_MAX];
    ZtLog lg[3];
    for (int k = 0; k < 3; k++) { // 0: -z 1, 1: -z 3 replicated, 2: run 1's checkpoint of step 2 resumed at -z 1
        char name[PATH_MAX];
        snprintf(name, sizeof(name), "pk_lora_%d", k);
        const char* dir = k == 2 ? NULL : zt_dir(name);
        if (k < 2)
            snprintf(flags, sizeof(flags), "-e tiny -layers 2 -channels 16 -heads 2 -t 32 -b 2 -x 4 -v 2 -m 1 -s 0 -n 2 -l 1e-2 -lora 4 "
                     "-lora-dropout 0.1 -doc-attention auto -log-hash 1 -i %s -j %s -o %s %s", shard[0], shard[1], dir, stage[k]);
        else {
            snprintf(name, sizeof(name), "%s/pk_lora_1", test_tmpdir());
            snprintf(flags, sizeof(flags), "-o %s -y 1 -resume-step 2 %s -log-hash 1 -i %s -j %s", name, stage[0], shard[0], shard[1]); // (zt_mpirun's -i, -j replaced)
        }
        int rc = zt_mpirun(2, flags, zt_out, sizeof(zt_out));
        CHECKF(rc == 0 && strstr(zt_out, "doc attention: on for -i"), "run %d (%s) failed (%d):\n%s", k, stage[k % 2 ? 1 : 0], rc, zt_out);
        if (rc) return;
        zt_hash_line(zt_out, hash[k], sizeof(hash[k]));
        zt_read_log(k == 2 ? name : dir, &lg[k]);
        CHECKF(lg[k].n == 4 && lg[k].nval >= 2, "run %d: %d steps, %d val losses logged", k, lg[k].n, lg[k].nval);
    }
    for (int k = 1; k < 3; k++) { // (the resume evaluates again at its first step: step 2's val loss twice, the same bits)
        int same_val = lg[k].nval == lg[0].nval + (k == 2);
        for (int i = 0, j = 0; same_val && i < lg[k].nval; i++, j++) {
            if (k == 2 && i == 2) j--; // the repeat
            same_val = lg[k].val[i] == lg[0].val[j];
        }
        CHECKF(hash[k][0] && !strcmp(hash[k], hash[0]) && !memcmp(lg[k].loss, lg[0].loss, sizeof(lg[0].loss)) && same_val,
               "%s differs from -z 1:\n  %s\n  %s", k == 1 ? "-z 3 -lora-base replicated" : "the resume at -z 1 of -z 3's step 2", hash[k], hash[0]);
    }
    printf("    LoRA r 4, dropout 0.1, masked prompt/completion -i and -j, doc attention on, R = 2: -z 1 = -z 3 replicated = resumed "
           "across stages, bit for bit (loss %.6f ... %.6f, val %.6f)\n", lg[0].loss[0], lg[0].loss[3], lg[0].val[lg[0].nval - 1]);
}
#endif
