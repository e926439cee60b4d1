// test/test_model.h — the whole model against the independent PyTorch program (dev/reference.py),
// recompute modes, ZeRO stages at one rank, resume, and the default run's learning.
//
// The fixture (test/fixtures/ref_*.bin) holds a tiny GPT-2 (odd sizes) in llm.c's format, a token
// stream, and what PyTorch computed in float64: logits, loss and every parameter gradient on
// batch 0, then a 10-step AdamW trajectory. We load the model through our own loader (-e), train
// on the stream through our own data loader, and compare tensor by tensor (test/tolerances.h).

#include "tolerances.h"

// The same cases run on the CUDA device in the GPU suite (test/test_gpu.cu defines ZT_GPU_SUITE):
// every flag string starts with MODEL_DEVICE, and every read of a trainer's buffers goes through
// dev_to_host.
#ifdef ZT_GPU_SUITE
#define MODEL_DEVICE "-device cuda "
#else
#define MODEL_DEVICE "-device cpu "
#endif
#ifndef OPS_BLAS_MODES
#define OPS_BLAS_MODES 1
#endif

static char g_test_self[PATH_MAX]; // this binary: multi-process tests run it as the trainer

// A trainer in this process (one rank) from a flag string (space separated, no quoting).
static Trainer* tm_trainer(const char* flags) {
    static char buf[8192];
    snprintf(buf, sizeof(buf), "%s", flags);
    char* argv[256];
    int argc = 0;
    argv[argc++] = (char*)"train";
    for (char* tok = strtok(buf, " "); tok && argc < 255; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    Trainer* tr = (Trainer*)calloc(1, sizeof(Trainer));
    trainer_setup(tr, argc, argv);
    return tr;
}
// One step and its result now: on one GPU train_step returns the previous step's result (its
// numbers are read a step late), so read this one back too.
static StepResult tm_step(Trainer* tr) {
    StepResult r = train_step(tr);
    StepResult now = step_read_back(tr);
    return now.valid ? now : r;
}
static void tm_free(Trainer* tr) {
    trainer_free(tr);
    comm_free(&tr->comm);
    free(tr);
}

// A copy on the host of n elements of a trainer's (device) buffer; free() it.
static void* tm_host(const void* dev, size_t bytes) {
    void* h = malloc(bytes > 0 ? bytes : 1);
    dev_to_host(h, dev, bytes);
    return h;
}

// Copy a block-layout array (parameters' shape: the optimizer range at R = 1) to the logical order.
static void tm_to_logical(const Zero* z, const float* arr_dev, float* out) {
    float* arr = (float*)tm_host(arr_dev, sizeof(float) * z->lay.total);
    Piece pc[MAX_BLOCK_TENSORS];
    for (int b = 0; b < z->lay.nblocks; b++) {
        int n = layout_pieces(&z->lay, b, 0, z->lay.P[b], pc);
        for (int i = 0; i < n; i++) memcpy(out + pc[i].logical, arr + z->lay.off[b] + pc[i].local, sizeof(float) * pc[i].len);
    }
    free(arr);
}

static double tm_relerr_f(const float* a, const float* b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) { double d = (double)a[i] - b[i]; num += d * d; den += (double)b[i] * b[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// The files the Python references read (dev/reference.py's read_tokens, dev/peft_check.py,
// dev/hf_fixtures.py). Tokens: int32 B, T, then B*T inputs and, each only when given, B*T targets
// and the (B,T) segment table. Floats: n float32 values (the logical parameter vector). 0: written.
static int tm_write_tokens(const char* path, int B, int T, const int* inputs, const int* targets, const int* seg) {
    FILE* f = fopen(path, "wb");
    size_t n = (size_t)B * T;
    int hdr[2] = {B, T};
    int ok = f && fwrite(hdr, sizeof(int), 2, f) == 2 && fwrite(inputs, sizeof(int), n, f) == n &&
             (!targets || fwrite(targets, sizeof(int), n, f) == n) && (!seg || fwrite(seg, sizeof(int), n, f) == n);
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}
static int tm_write_floats(const char* path, const float* x, int64_t n) {
    FILE* f = fopen(path, "wb");
    int ok = f && fwrite(x, sizeof(float), (size_t)n, f) == (size_t)n;
    if (f && fclose(f) != 0) ok = 0;
    return ok ? 0 : -1;
}

// The fixture's token stream as a shard in the scratch directory; returns its path.
static const char* tm_fixture_shard(const Fixture* fx) {
    static char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/ref_stream.bin", test_tmpdir());
    const FixtureTensor* st = fixture_get(fx, "stream");
    uint16_t* toks = (uint16_t*)malloc(sizeof(uint16_t) * st->n);
    for (int64_t i = 0; i < st->n; i++) toks[i] = (uint16_t)((int*)st->data)[i];
    char err[512];
    if (write_token_shard(path, toks, st->n, err, sizeof(err))) { printf("    %s\n", err); exit(1); }
    free(toks);
    return path;
}

static const char* tm_fixture_flags(const Fixture* fx, const char* extra) {
    static char flags[4096];
    const float* hp = (const float*)fixture_get(fx, "hparams")->data;
    const int* cfg = (const int*)fixture_get(fx, "config")->data;
    snprintf(flags, sizeof(flags),
             MODEL_DEVICE "-e test/fixtures/ref_model.bin -i %s -b %d -t %d -x %d -v 0 -s 0 -shuffle 0 -l %.9g -u %d -q %.9g "
             "-k cosine -beta1 %.9g -beta2 %.9g -eps %.9g -c %.9g -grad-clip %.9g -blas 0 %s",
             tm_fixture_shard(fx), cfg[6], cfg[7], cfg[8], hp[0], (int)hp[1], hp[2], hp[3], hp[4], hp[5], hp[6], hp[7], extra);
    return flags;
}

static int tm_load_fixture(Fixture* fx) {
    char err[512];
    if (fixture_load(fx, "test/fixtures/ref_out.bin", err, sizeof(err))) { printf("    %s\n", err); return -1; }
    return 0;
}

static void model_vs_pytorch(int blas) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    Trainer* tr = tm_trainer(tm_fixture_flags(&fx, blas ? "-r 0 -z 0 -blas 1" : "-r 0 -z 0"));
    printf("    matmuls: %s\n", blas ? "OpenBLAS" : "plain loop");
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    int B = m->B, T = m->T, BT = B * T;
    // batch 0 through the real loader is the fixture's batch 0
    dataloader_load(&tr->train, 0);
    const int* tok = (const int*)fixture_get(&fx, "tokens")->data;
    int same = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            same &= tr->train.inputs[b * T + t] == tok[b * (T + 1) + t] && tr->train.targets[b * T + t] == tok[b * (T + 1) + t + 1];
    CHECKF(same, "the loader's batch 0 differs from the fixture's");
    load_tokens(m, &tr->train, 1);
    gpt_forward(m, B, T, 1, 1.0f / BT, 1);
    // logits are overwritten by their gradient in training: run a forward without it first
    gpt_forward(m, B, T, 1, 0.0f, 0);
    float* logits = (float*)malloc(sizeof(float) * BT * c->V);
    floatX* lx = (floatX*)tm_host(m->a.logits, sizeof(floatX) * BT * c->Vp);
    for (int i = 0; i < BT; i++)
        for (int j = 0; j < c->V; j++) logits[i * c->V + j] = ld(lx[(int64_t)i * c->Vp + j]);
    free(lx);
    double el = tm_relerr_f(logits, (const float*)fixture_get(&fx, "logits")->data, (int64_t)BT * c->V);
    float loss = (float)(sum_losses(m, BT) / BT), ref_loss = ((const float*)fixture_get(&fx, "loss")->data)[0];
    double eloss = fabs(loss - ref_loss) / fabs(ref_loss);
    CHECKF(el < TOL_MODEL_FWD, "logits %.3g", el);
    CHECKF(eloss < TOL_MODEL_LOSS, "loss %.7f vs %.7f", loss, ref_loss);
    printf("    logits %.2e, loss %.6f vs %.6f\n", el, loss, ref_loss);
    // gradients of every tensor
    gpt_forward(m, B, T, 1, 1.0f / BT, 1);
    gpt_backward(m, B, T, 0, 1);
    comm_wait_all(&tr->comm);
    float* g = (float*)calloc(m->z.lay.logical_total, sizeof(float));
    tm_to_logical(&m->z, m->z.full_grads, g);
    for (int k = 0; k < NUM_TENSORS; k++) {
        const TensorInfo* t = &m->d.t[k];
        if (t->n == 0) continue; // (another family's tensor, an absent bias)
        char name[80];
        snprintf(name, sizeof(name), "grad.%s", t->name);
        const FixtureTensor* ref = fixture_get(&fx, name);
        int64_t n = t->n * (t->io ? 1 : c->L);
        CHECKF(ref && ref->n == n, "%s missing or of the wrong size", name);
        if (!ref || ref->n != n) continue;
        double e = tm_relerr_f(g + t->logical, (const float*)ref->data, n);
        CHECKF(e < TOL_MODEL_GRAD, "%s %.3g", name, e);
        printf("    %-14s %.2e\n", name, e);
    }
    free(g);
    free(logits);
    tm_free(tr);
    fixture_free(&fx);
}

TEST(model_vs_pytorch) {
    for (int blas = 0; blas < OPS_BLAS_MODES; blas++) model_vs_pytorch(blas);
}

// The classifier in chunks (ops/classifier.cuh) through the whole model: the fixture's micro-batch
// in one chunk (the unchunked head: its rows fit the natural chunk) and in chunks of 24 rows (not a
// divisor of B*T; a multiple of 8, as op_classifier needs). The per-token losses and every gradient but the head weight's are the same bits;
// wte's within TOL_CLASSIFIER_CHUNK; the loss (per-token sum / B*T) and every gradient against
// dev/reference.py's fixture; the memory tagged "logits" is one chunk.
TEST(model_chunked_classifier) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    int chunks[2] = {0, 24};
    float* losses[2] = {NULL, NULL};
    float* grads[2] = {NULL, NULL};
    int64_t n = 0;
    int BT = 0;
    for (int k = 0; k < 2; k++) {
        classifier_chunk_override = chunks[k];
        Trainer* tr = tm_trainer(tm_fixture_flags(&fx, "-r 0 -z 0"));
        Model* m = &tr->model;
        const GPTConfig* c = &m->cfg;
        BT = m->B * m->T;
        if (k == 0) CHECKF(m->a.chunk >= BT, "the fixture's %d rows do not fit one natural chunk (%d)", BT, m->a.chunk);
        CHECKF(g_mem_bytes[TAG_LOGITS] == sizeof(floatX) * (size_t)(k ? 24 : BT) * c->Vp, "logits tagged %zu bytes", g_mem_bytes[TAG_LOGITS]);
        dataloader_load(&tr->train, 0);
        load_tokens(m, &tr->train, 1);
        gpt_forward(m, m->B, m->T, 1, 1.0f / BT, 1);
        gpt_backward(m, m->B, m->T, 0, 1);
        comm_wait_all(&tr->comm);
        losses[k] = (float*)tm_host(m->a.losses, sizeof(float) * BT);
        n = m->z.lay.logical_total;
        grads[k] = (float*)calloc(n, sizeof(float));
        tm_to_logical(&m->z, m->z.full_grads, grads[k]);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += losses[k][i];
        float ref_loss = ((const float*)fixture_get(&fx, "loss")->data)[0];
        double eloss = fabs(sum / BT - ref_loss) / fabs(ref_loss);
        CHECKF(eloss < TOL_MODEL_LOSS, "chunk %d: loss %.7f vs %.7f", chunks[k], sum / BT, ref_loss);
        double worst = 0.0;
        for (int t = 0; t < NUM_TENSORS; t++) {
            const TensorInfo* ti = &m->d.t[t];
            if (ti->n == 0) continue; // (another family's tensor, an absent bias)
            char name[80];
            snprintf(name, sizeof(name), "grad.%s", ti->name);
            const FixtureTensor* ref = fixture_get(&fx, name);
            int64_t tn = ti->n * (ti->io ? 1 : c->L);
            if (!ref || ref->n != tn) { CHECKF(0, "%s missing or of the wrong size", name); continue; }
            double e = tm_relerr_f(grads[k] + ti->logical, (const float*)ref->data, tn);
            CHECKF(e < TOL_MODEL_GRAD, "chunk %d: %s %.3g", chunks[k], name, e);
            worst = fmax(worst, e);
            if (k == 1 && t != T_wte) {
                if (g_device == DEV_CPU)
                    CHECKF(memcmp(grads[0] + ti->logical, grads[1] + ti->logical, sizeof(float) * tn) == 0, "%s differs from the unchunked head", name);
                else // a GPU's cuBLASLt may pick another algorithm for the logits' matmul at another row count
                    CHECKF(tm_relerr_f(grads[1] + ti->logical, grads[0] + ti->logical, tn) < TOL_GPU_BWD, "%s differs from the unchunked head", name);
            }
            if (k == 1 && t == T_wte) {
                double ec = tm_relerr_f(grads[1] + ti->logical, grads[0] + ti->logical, tn);
                CHECKF(ec < (g_device == DEV_CPU ? TOL_CLASSIFIER_CHUNK : TOL_GPU_BWD), "grad.wte chunked vs unchunked %.3g", ec);
                printf("    chunks of 24 rows (B*T = %d): grad.wte vs unchunked %.2e (every other gradient and the losses: %s)\n", BT, ec,
                       g_device == DEV_CPU ? "the same bits" : "within the GPU tolerance");
            }
        }
        printf("    %s: loss %.6f vs reference %.6f, worst gradient vs reference %.2e\n", k ? "chunks of 24" : "one chunk   ", sum / BT, ref_loss, worst);
        tm_free(tr);
    }
    classifier_chunk_override = 0;
    if (g_device == DEV_CPU) CHECKF(memcmp(losses[0], losses[1], sizeof(float) * BT) == 0, "per-token losses differ from the unchunked head");
    else CHECKF(tm_relerr_f(losses[1], losses[0], BT) < TOL_GPU_FWD, "per-token losses differ from the unchunked head");
    for (int k = 0; k < 2; k++) { free(losses[k]); free(grads[k]); }
    fixture_free(&fx);
}

// The chunked classifier on the Llama family's heads: the untied lm_head (llama-tiny) and the head
// tied to the embedding (llama-tiny-tied), B 2 x T 37 of the KJV, one chunk against chunks of 24
// rows. The per-token losses and every gradient but the head weight's (lmhead, or embed when tied)
// are the same bits; the head weight's within TOL_CLASSIFIER_CHUNK (its sums grouped by chunk).
// (The family itself against dev/reference.py is the Llama tests' subject: a chunked head equal to
// the unchunked one carries their check over.)
TEST(model_chunked_classifier_llama) {
    const char* models[2] = {"llama-tiny", "llama-tiny-tied"};
    for (int mi = 0; mi < 2; mi++) {
        float* losses[2] = {NULL, NULL};
        float* grads[2] = {NULL, NULL};
        int BT = 0, head = -1;
        double ec = 0.0;
        for (int k = 0; k < 2; k++) {
            char flags[512];
            snprintf(flags, sizeof(flags), MODEL_DEVICE "-e %s -layers 1 -i data/kjv_train.bin -b 2 -t 37 -x 1 -v 0 -s 0 -blas 0 -r 0 -z 0", models[mi]);
            classifier_chunk_override = k ? 24 : 0;
            Trainer* tr = tm_trainer(flags);
            Model* m = &tr->model;
            BT = m->B * m->T;
            head = m->d.t[T_lmhead].n ? T_lmhead : T_embed;
            dataloader_load(&tr->train, 0);
            load_tokens(m, &tr->train, 1);
            gpt_forward(m, m->B, m->T, 1, 1.0f / BT, 1);
            gpt_backward(m, m->B, m->T, 0, 1);
            comm_wait_all(&tr->comm);
            losses[k] = (float*)tm_host(m->a.losses, sizeof(float) * BT);
            grads[k] = (float*)calloc(m->z.lay.logical_total, sizeof(float));
            tm_to_logical(&m->z, m->z.full_grads, grads[k]);
            if (k == 1)
                for (int t = 0; t < NUM_TENSORS; t++) {
                    const TensorInfo* ti = &m->d.t[t];
                    int64_t tn = ti->n * (ti->io ? 1 : m->cfg.L);
                    if (tn == 0) continue;
                    if (t == head) { ec = tm_relerr_f(grads[1] + ti->logical, grads[0] + ti->logical, tn); continue; }
                    if (g_device == DEV_CPU)
                        CHECKF(!memcmp(grads[0] + ti->logical, grads[1] + ti->logical, sizeof(float) * tn), "%s: %s differs from the unchunked head", models[mi], ti->name);
                    else
                        CHECKF(tm_relerr_f(grads[1] + ti->logical, grads[0] + ti->logical, tn) < TOL_GPU_BWD, "%s: %s differs from the unchunked head", models[mi], ti->name);
                }
            tm_free(tr);
        }
        classifier_chunk_override = 0;
        CHECKF(ec < (g_device == DEV_CPU ? TOL_CLASSIFIER_CHUNK : TOL_GPU_BWD), "%s: grad.%s chunked vs unchunked %.3g", models[mi], head == T_lmhead ? "lmhead" : "embed", ec);
        if (g_device == DEV_CPU) CHECKF(!memcmp(losses[0], losses[1], sizeof(float) * BT), "%s: per-token losses differ", models[mi]);
        else CHECKF(tm_relerr_f(losses[1], losses[0], BT) < TOL_GPU_FWD, "%s: per-token losses differ", models[mi]);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) sum += losses[1][i];
        printf("    %-16s (%s head): loss %.6f; grad.%s chunks of 24 vs one chunk %.2e, the rest %s\n", models[mi], head == T_lmhead ? "untied" : "tied",
               sum / BT, head == T_lmhead ? "lmhead" : "embed", ec, g_device == DEV_CPU ? "the same bits" : "within the GPU tolerance");
        for (int k = 0; k < 2; k++) { free(losses[k]); free(grads[k]); }
    }
}

// Ten AdamW steps through the real training step and data loader: losses, norms, learning rates
// and the final parameters against PyTorch's torch.optim.AdamW.
TEST(model_adamw_trajectory_vs_pytorch) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    const int* cfg = (const int*)fixture_get(&fx, "config")->data;
    int steps = cfg[8];
    // ZeRO-0 and the FP32 shard path (ZeRO-3); on the emulated CUDA device make test runs ZeRO-3 alone
    for (int stage = g_device == DEV_CUDA && !test_long() ? 3 : 0; stage <= 3; stage += 3) {
        char extra[64];
        snprintf(extra, sizeof(extra), "-r 1 -z %d", stage);
        Trainer* tr = tm_trainer(tm_fixture_flags(&fx, extra));
        const float* rl = (const float*)fixture_get(&fx, "traj.loss")->data;
        const float* rn_ = (const float*)fixture_get(&fx, "traj.norm")->data;
        const float* rlr = (const float*)fixture_get(&fx, "traj.lr")->data;
        double worst = 0.0;
        for (int s = 0; s < steps; s++) {
            StepResult r = tm_step(tr);
            double e = fabs(r.loss - rl[s]) / fabs(rl[s]);
            worst = fmax(worst, e);
            CHECKF(e < TOL_TRAJ_LOSS, "ZeRO-%d step %d loss %.7f vs %.7f", stage, s, r.loss, rl[s]);
            CHECKF(fabs(r.norm - rn_[s]) / rn_[s] < TOL_MODEL_GRAD, "ZeRO-%d step %d norm %.6f vs %.6f", stage, s, r.norm, rn_[s]);
            CHECKF(fabs(r.lr - rlr[s]) <= 1e-6 * rlr[s], "step %d lr %.8g vs %.8g", s, r.lr, rlr[s]);
        }
        Zero* z = &tr->model.z;
        float* w = (float*)calloc(z->lay.logical_total, sizeof(float));
        tm_to_logical(z, z->master, w);
        double wp = 0.0;
        for (int k = 0; k < NUM_TENSORS; k++) {
            const TensorInfo* t = &tr->model.d.t[k];
        if (t->n == 0) continue; // (another family's tensor, an absent bias)
            char name[80];
            snprintf(name, sizeof(name), "final.%s", t->name);
            const FixtureTensor* ref = fixture_get(&fx, name);
            float* ours = w + t->logical;
            float* theirs = (float*)ref->data;
            float* kept_ours = (float*)malloc(sizeof(float) * ref->n);
            float* kept_theirs = (float*)malloc(sizeof(float) * ref->n);
            int64_t n = 0;
            int C = tr->model.cfg.C;
            for (int64_t i = 0; i < ref->n; i++) {
                // the key bias has an exactly zero gradient (softmax ignores adding q.b_k to a whole
                // row), so AdamW moves it by +-lr on rounding noise in *any* precision: skip it
                if (k == T_qkvb && i % (3 * C) >= C && i % (3 * C) < 2 * C) continue;
                kept_ours[n] = ours[i];
                kept_theirs[n] = theirs[i];
                n++;
            }
            double e = tm_relerr_f(kept_ours, kept_theirs, n);
            free(kept_ours);
            free(kept_theirs);
            wp = fmax(wp, e);
            CHECKF(e < TOL_TRAJ_PARAM, "ZeRO-%d %s %.3g", stage, name, e);
        }
        printf("    ZeRO-%d: worst step loss error %.2e, worst final parameter error %.2e\n", stage, worst, wp);
        free(w);
        tm_free(tr);
    }
    fixture_free(&fx);
}

// Gradients of one micro-batch in every recompute mode: bit-identical.
TEST(recompute_modes_bitwise) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    float* first = NULL;
    float first_loss = 0;
    int64_t n = 0;
    for (int r = 0; r <= 3; r++) {
        char extra[64];
        snprintf(extra, sizeof(extra), "-r %d -z 0", r);
        Trainer* tr = tm_trainer(tm_fixture_flags(&fx, extra));
        Model* m = &tr->model;
        int BT = m->B * m->T;
        dataloader_load(&tr->train, 1);
        load_tokens(m, &tr->train, 1);
        gpt_forward(m, m->B, m->T, 1, 1.0f / BT, 1);
        gpt_backward(m, m->B, m->T, 0, 1); // (its classifier computes the losses)
        float loss = (float)sum_losses(m, BT);
        comm_wait_all(&tr->comm);
        n = m->z.lay.total;
        float* g = (float*)tm_host(m->z.full_grads, sizeof(float) * n);
        if (r == 0) {
            first = g;
            first_loss = loss;
        } else {
            CHECKF(memcmp(first, g, sizeof(float) * n) == 0, "-r %d gradients differ from -r 0", r);
            CHECKF(loss == first_loss, "-r %d loss differs", r);
            free(g);
        }
        tm_free(tr);
    }
    free(first);
    fixture_free(&fx);
}

// One rank, ZeRO-0..3, three steps: identical bits (at R = 1 every reduction is a copy, so this
// checks the per-stage buffers, offsets and hooks; tests/test_zero.h does R = 2..4 over MPI).
TEST(zero_stages_one_rank_bitwise) {
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    uint64_t h0 = 0;
    float l0[3];
    // (on the emulated CUDA device make test runs ZeRO-0 and ZeRO-3, make test-long every stage)
    for (int stage = 0; stage <= 3; stage += g_device == DEV_CUDA && !test_long() ? 3 : 1) {
        char extra[128];
        snprintf(extra, sizeof(extra), "-r 1 -z %d -poison 1 -comm-delay %d", stage, stage == 3 ? 2 : 0);
        Trainer* tr = tm_trainer(tm_fixture_flags(&fx, extra));
        float loss[3];
        for (int s = 0; s < 3; s++) loss[s] = tm_step(tr).loss;
        Zero* z = &tr->model.z;
        uint64_t h = FNV_INIT;
        const float* state[3] = {z->master, z->m, z->v};
        for (int k = 0; k < 3; k++) {
            float* hs = (float*)tm_host(state[k], sizeof(float) * z->opt_total);
            h = fnv1a(h, hs, sizeof(float) * z->opt_total);
            free(hs);
        }
        if (stage == 0) { h0 = h; memcpy(l0, loss, sizeof(l0)); }
        else {
            CHECKF(h == h0, "ZeRO-%d optimizer state differs from ZeRO-0", stage);
            CHECKF(memcmp(loss, l0, sizeof(l0)) == 0, "ZeRO-%d losses differ from ZeRO-0", stage);
        }
        tm_free(tr);
    }
    fixture_free(&fx);
}

// A model trained here and exported (-export) gives the same logits through our loader and
// through the independent PyTorch program (dev/reference.py --logits reads llm.c files v3 and v5).
// The python with PyTorch: $ZT_TORCH_PYTHON, else Debian's /usr/bin/python3.
static const char* tm_torch_python(void) {
    const char* p = getenv("ZT_TORCH_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}

// Our logits of `model` (an llm.c file or a Hugging Face directory, in place of the fixture's model)
// on the fixture's batch 0, against the logits `python_cmd MODEL TOKENS OUT` writes for the same
// tokens (TOKENS: int32 B, T, then the B*T ids; OUT: B*T*V float32). Returns the relative error (1
// when anything failed: a CHECK says what).
static double tm_logits_vs(const Fixture* fx, const char* model, const char* python_cmd, const char* tag) {
    char tokens[PATH_MAX], theirs[PATH_MAX], cmd[4 * PATH_MAX], out[8192], flags[4096], rest[4096];
    snprintf(tokens, sizeof(tokens), "%s/tokens_%s.i32", test_tmpdir(), tag);
    snprintf(theirs, sizeof(theirs), "%s/logits_%s.f32", test_tmpdir(), tag);
    snprintf(flags, sizeof(flags), "%s -x 0", tm_fixture_flags(fx, ""));
    char* e = strstr(flags, "test/fixtures/ref_model.bin");
    snprintf(rest, sizeof(rest), "%s", e + strlen("test/fixtures/ref_model.bin"));
    snprintf(e, sizeof(flags) - (e - flags), "%s%s", model, rest);
    Trainer* tr = tm_trainer(flags);
    Model* m = &tr->model;
    int B = m->B, T = m->T, V = m->cfg.V;
    dataloader_load(&tr->train, 0);
    load_tokens(m, &tr->train, 0);
    gpt_forward(m, B, T, 0, 0.0f, 0);
    float* ours = (float*)malloc(sizeof(float) * B * T * V);
    floatX* lx = (floatX*)tm_host(m->a.logits, sizeof(floatX) * B * T * m->cfg.Vp);
    for (int i = 0; i < B * T; i++)
        for (int j = 0; j < V; j++) ours[i * V + j] = ld(lx[(int64_t)i * m->cfg.Vp + j]);
    free(lx);
    CHECK(tm_write_tokens(tokens, B, T, tr->train.inputs, NULL, NULL) == 0);
    tm_free(tr);
    snprintf(cmd, sizeof(cmd), "%s %s %s %s", python_cmd, model, tokens, theirs);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "%s failed:\n%s", python_cmd, out);
    float* ref = (float*)malloc(sizeof(float) * B * T * V);
    FILE* f = fopen(theirs, "rb");
    size_t got = f ? fread(ref, sizeof(float), (size_t)B * T * V, f) : 0;
    if (f) fclose(f);
    CHECK(got == (size_t)B * T * V);
    double err = got == (size_t)B * T * V ? tm_relerr_f(ours, ref, (int64_t)B * T * V) : 1.0;
    free(ours);
    free(ref);
    return err;
}

TEST(model_export_logits_vs_pytorch) {
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof(probe), "%s -c 'import torch, numpy'", tm_torch_python());
    if (test_run_cmd(probe, NULL, 0) != 0)
        TEST_SKIP("needs a python with torch and numpy: apt-get install python3-torch python3-numpy, or set ZT_TORCH_PYTHON");
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    char exported[PATH_MAX], cmd[4 * PATH_MAX], out[8192], py[PATH_MAX + 64];
    snprintf(exported, sizeof(exported), "%s/exported.bin", test_tmpdir());
    // train 3 steps from the reference model, export at the end
    char flags[4096];
    snprintf(flags, sizeof(flags), "%s -export %s", tm_fixture_flags(&fx, "-x 3"), exported);
    snprintf(cmd, sizeof(cmd), "OMP_NUM_THREADS=2 %s --train %s", g_test_self, flags);
    int rc = test_run_cmd(cmd, out, sizeof(out));
    CHECKF(rc == 0, "training and export failed:\n%s", out);
    // our logits from the exported file, on batch 0, against the PyTorch program reading it
    snprintf(py, sizeof(py), "%s dev/reference.py --logits", tm_torch_python());
    double err = tm_logits_vs(&fx, exported, py, "llmc");
    CHECKF(err < TOL_MODEL_FWD, "logits of the exported model: ours vs PyTorch %.3g", err);
    printf("    exported model (llm.c v%d): logits ours vs PyTorch %.2e\n", sizeof(floatX) == 2 ? 5 : 3, err);
    fixture_free(&fx);
}

#ifdef ZT_CUDA_EMU
// On one GPU a training step waits for the device and copies to the host only as docs/cuda.md's table
// "Host synchronisations" says: counted by the emulator (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, cudaMemcpy, cudaFree; device-to-host copies) over steps of GA = 1 and GA = 2:
// the difference is what the extra micro-steps cost, the rest is the step's. The budget is read from
// docs/cuda.md, so the documentation and the test cannot drift apart.
static int tm_readme_budget(const char* row, long* syncs, long* d2h) {
    FILE* f = fopen("docs/cuda.md", "rb");
    if (!f) return -1;
    char line[512], want[64];
    snprintf(want, sizeof(want), "| %s |", row);
    int found = -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, want, strlen(want)) && sscanf(line + strlen(want), " %ld | %ld |", syncs, d2h) == 2) { found = 0; break; }
    fclose(f);
    return found;
}

TEST(emu_host_syncs_per_step) {
    long micro_syncs, micro_d2h, step_syncs, step_d2h;
    CHECKF(tm_readme_budget("per micro-step", &micro_syncs, &micro_d2h) == 0 && tm_readme_budget("per step", &step_syncs, &step_d2h) == 0,
           "docs/cuda.md has no rows '| per micro-step | N | N |' and '| per step | N | N |'");
    Fixture fx;
    if (tm_load_fixture(&fx)) { CHECK(0); return; }
    const int* cfg = (const int*)fixture_get(&fx, "config")->data;
    long syncs[2], d2h[2];
    for (int k = 0; k < 2; k++) { // GA = 1 (ZeRO-1), then GA = 2 (ZeRO-3): the same B, -d twice B*T
        char extra[128];
        snprintf(extra, sizeof(extra), "-r 1 -z %d -d %d", k ? 3 : 1, (k ? 2 : 1) * cfg[6] * cfg[7]);
        Trainer* tr = tm_trainer(tm_fixture_flags(&fx, extra));
        train_step(tr); // the first step plans its GEMMs and has no previous step to read
        long s0 = emu::g_host_syncs, c0 = emu::g_d2h_copies;
        StepResult r = train_step(tr);
        syncs[k] = emu::g_host_syncs - s0;
        d2h[k] = emu::g_d2h_copies - c0;
        CHECKF(r.valid && r.step == 0, "train_step returned step %d (valid %d): the previous step's result expected", r.step, r.valid);
        StepResult last = step_read_back(tr);
        CHECKF(last.valid && last.step == 1 && tr->adam_t == 2, "the last step read back: step %d, adam_t %lld", last.step,
               (long long)tr->adam_t);
        printf("    GA %d (%s): a step waits %ld times and copies %ld times to the host\n", tr->GA, k ? "ZeRO-3" : "ZeRO-1", syncs[k], d2h[k]);
        tm_free(tr);
    }
    long per_micro_syncs = syncs[1] - syncs[0], per_micro_d2h = d2h[1] - d2h[0];
    printf("    per micro-step: %ld waits, %ld copies (docs/cuda.md: %ld, %ld); per step besides: %ld, %ld (docs/cuda.md: %ld, %ld)\n",
           per_micro_syncs, per_micro_d2h, micro_syncs, micro_d2h, syncs[0] - per_micro_syncs, d2h[0] - per_micro_d2h,
           step_syncs, step_d2h);
    CHECK(per_micro_syncs <= micro_syncs && per_micro_d2h <= micro_d2h);
    CHECK(syncs[0] - per_micro_syncs <= step_syncs && d2h[0] - per_micro_d2h <= step_d2h);
    CHECK(syncs[1] - 2 * per_micro_syncs <= step_syncs && d2h[1] - 2 * per_micro_d2h <= step_d2h);
    fixture_free(&fx);
}
#endif
