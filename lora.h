// lora.h — LoRA (Hu et al. 2021): low-rank adapters on a frozen base, as PEFT defines them. For a
// target projection y = W x (+ b), W: [out, in], the adapter adds (alpha / r) * B (A x), with
// A: [r, in] and B: [out, r] (PEFT's shapes and names), A Kaiming-uniform (a = sqrt(5): U(-1/sqrt(in),
// 1/sqrt(in))) from the counter-based RNG keyed by each element's logical index (the same adapters
// for any R and stage), B zero: step 0 is the base model exactly.
//
// The pieces:
//   - the flags into the config (lora_config); the targets of each family, the modules and their
//     tensors in the adapter block are the model's table (model.h: LORA_TARGETS, LoraDesc; one
//     block after the layers, trainable; the base's blocks frozen: zero.h);
//   - Lora: the activations the backward needs;
//   - the projection op: proj_forward / proj_backward are op_matmul_forward / op_matmul_backward
//     plus the projection's adapters. With no adapter on a projection they are exactly the matmul,
//     so the layer code calls them unconditionally (no `if (lora)` in the step).
//
// defines: Lora, LoraView, lora_config, lora_alloc, lora_free, lora_fill, lora_view, proj_forward,
//          proj_backward, lora_acts_bytes, lora_merge, lora_write_peft, LoraPeft, lora_peft_open, lora_peft_fill, lora_peft_close,
//          lora_dequant_elems, lora_base_alloc, lora_base_set_map, lora_base_dequant, Nf4Source, LoraEncoder, lora_encoder_init, lora_encoder_free,
//          lora_base_encode
//
// May call: device.cuh, rng.h, zero.h (the block layout), model.h (GPTConfig, model_dims),
// ops/matmul.cuh, ops/lora.cuh, ops/elementwise.cuh, ops/nf4.cuh ([QLoRA] the 4-bit base). Knows
// nothing of the trainer's types.
#ifndef ZT_LORA_H
#define ZT_LORA_H
#include <math.h>
#include "device.cuh"       // defines: floatX, dev_alloc, dev_free, die_user, TAG_ACTS
#include "rng.h"            // defines: rng_key, rng_uniform
#include "model.h"          // defines: GPTConfig, ModelDims, model_dims, FAMILY_*, BlockLayout, layout_add_tensor, proj_tensor
#include "ops/matmul.cuh"   // defines: op_matmul_forward, op_matmul_backward, op_gelu_forward
#include "ops/lora.cuh"     // defines: op_lora_add_cols, op_lora_take_cols (and, from ops/elementwise.cuh, op_add_inplace)
#include "safetensors.h"    // defines: StSpec, st_make_header (the PEFT adapter file)
#include "ops/nf4.cuh"      // defines: nf4_part, nf4_quantize, op_nf4_dequant_map ([QLoRA])

// The adapters' run-time state: the model's adapter modules (ModelDesc.lora) and the activations
// the backward needs (allocated for N = B*T rows; TAG_ACTS).
typedef struct {
    const LoraDesc* d;  // the modules and their offsets (model.h)
    int L;
    uint64_t seed;
    floatX* u;          // (L, nmods, N, r): u = A x of every module of every layer, kept for dB
    floatX* tmp;        // (N, max(in, rows)): one adapter's scratch
    floatX* dv;         // (N, max rows)
    floatX* du;         // (N, r)
    floatX* xd;         // (N, max in): dropout(x) of one adapter (-lora-dropout > 0; else NULL), made again in the backward
    float* discard;     // (discard_n): a frozen 1-D tensor's gradient (a norm's gain) lands here, never read
    int64_t N, maxw, maxrows, maxin, discard_n;
    // -lora-dropout: what keys the mask of the micro-batch in hand (lora_set_batch, per micro-step)
    int64_t pos0;       // the stream position of the micro-batch's first sample (dataloader.h: unit * B)
    int T;              // tokens per sample
    int training;       // 1: a training forward (dropout applies), 0: evaluation, sampling (none)
    int drop_eval;      // tests: dropout in an evaluation forward too (finite differences with the mask fixed)
    floatX* deq;        // [QLoRA] (deq_n): one layer's 4-bit matrices dequantized (TAG_PARAM_BUF; NULL: a BF16 base)
    int64_t deq_n;
    float* dyn;         // [QLoRA] (256, host) the nested code book a checkpoint's parts use; NULL: NF4_DYN (lora_base_set_map)
} Lora;

// -lora r, -lora-alpha, -lora-targets, -lora-dropout, -lora-quant into the config (c->lora_*),
// or the run ends (exit 2) naming the flag: r < 0, alpha < 0, a target the family lacks, r above a
// target's min(out, in), dropout outside [0, 1), a -lora-quant not none or nf4 (nf4 without adapters).
// targets: comma-separated target names, "" or "all" every one of the family's. alpha 0: alpha = r.
static void lora_config(GPTConfig* c, int r, float alpha, const char* targets, float dropout, const char* quant) {
    c->lora_r = 0; c->lora_alpha = 0.0f; c->lora_mask = 0; c->lora_dropout = 0.0f; c->lora_nf4 = 0;
    if (r < 0) die_user("-lora %d: the rank must be positive (0: no adapters)", r);
    if (strcmp(quant, "none") && strcmp(quant, "nf4"))
        die_user("-lora-quant %s: not none or nf4 (bitsandbytes' 4-bit NormalFloat, QLoRA)", quant);
    if (r == 0) {
        if (targets[0] && strcmp(targets, "all")) die_user("-lora-targets %s: needs -lora r (the adapters' rank)", targets);
        if (dropout != 0.0f) die_user("-lora-dropout %g: needs -lora r (the adapters' rank)", dropout);
        if (!strcmp(quant, "nf4")) die_user("-lora-quant nf4: needs -lora r (a 4-bit base is frozen: only adapters train on it)");
        return;
    }
    if (!(dropout >= 0.0f && dropout < 1.0f)) die_user("-lora-dropout %g: the probability must be in [0, 1)", dropout);
    if (alpha < 0 || !isfinite(alpha)) die_user("-lora-alpha %g: must be positive (0: alpha = r)", alpha);
    ModelDims d = model_dims(c);
    int all = !targets[0] || !strcmp(targets, "all"), row = 0;
    char known[256] = "";
    (void)d;
#define X(fam, tname, thf, tproj, trow0, trows, tin)                                                            \
    if ((fam) == model_names(c)) {                                                                             \
        int want = all, bit = row++;                                                                           \
        if (!strstr(known, tname)) snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s", known[0] ? "," : "", tname); \
        for (const char* p = targets; !all && *p;) {                                                           \
            const char* e = strchr(p, ',');                                                                    \
            size_t n = e ? (size_t)(e - p) : strlen(p);                                                        \
            if (n == strlen(tname) && !strncmp(p, tname, n)) want = 1;                                         \
            p += n + (e ? 1 : 0);                                                                              \
        }                                                                                                      \
        if (want && (r > (trows) || r > (tin)))                                                                \
            die_user("-lora %d: larger than %s (%s: out %lld, in %lld); the rank is at most min(out, in)",     \
                     r, tname, thf, (long long)(trows), (long long)(tin));                                     \
        if (want) c->lora_mask |= 1u << bit;                                                                   \
    }
    LORA_TARGETS(X)
#undef X
    for (const char* p = targets; !all && *p;) { // every name must be one of the family's
        const char* e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[64];
        snprintf(name, sizeof(name), ",%.*s,", (int)(n < 60 ? n : 60), p);
        char list[260];
        snprintf(list, sizeof(list), ",%s,", known);
        if (!n || !strstr(list, name))
            die_user("-lora-targets %s: '%.*s' is not a projection of the %s family (its targets: %s)", targets, (int)n, p,
                     model_names(c) == NAMES_PHI3 ? "Llama (Phi-3's names)" : c->family == FAMILY_LLAMA ? "Llama" : "GPT-2", known);
        p += n + (e ? 1 : 0);
    }
    c->lora_r = r;
    c->lora_alpha = alpha > 0 ? alpha : (float)r;
    c->lora_dropout = dropout;
    c->lora_nf4 = !strcmp(quant, "nf4");
}

// The discard buffer's floats: the longest 1-D tensor of a LoRA model's base (0 without LoRA).
static int64_t lora_discard_floats(const ModelDesc* d) {
    int64_t n = 0;
    for (int k = 0; d->lora.r && k < NUM_TENSORS; k++)
        if (!d->t[k].decay && d->t[k].n > n) n = d->t[k].n;
    return n;
}

// The activations' bytes for N = B*T rows of an L-layer model (the allocator's and the planner's
// closed form); discard_n: the longest 1-D tensor of the base.
static size_t lora_acts_bytes(const LoraDesc* d, int L, int64_t N, int64_t discard_n) {
    if (!d->r) return 0;
    int64_t maxw = 0, maxrows = 0, maxin = 0;
    for (int i = 0; i < d->nmods; i++) {
        const LoraModule* m = &d->mods[i];
        maxw = m->in > maxw ? m->in : maxw;
        maxw = m->rows > maxw ? m->rows : maxw;
        maxrows = m->rows > maxrows ? m->rows : maxrows;
        maxin = m->in > maxin ? m->in : maxin;
    }
    int64_t xd = d->dropout > 0.0f ? maxin : 0; // dropout(x) of one adapter
    return sizeof(floatX) * (size_t)N * ((size_t)L * d->nmods * d->r + maxw + maxrows + d->r + xd) + sizeof(float) * (size_t)discard_n;
}

static void lora_alloc(Lora* lo, const LoraDesc* d, int L, uint64_t seed, int64_t N, int64_t discard_n) {
    memset(lo, 0, sizeof(*lo));
    lo->d = d; lo->L = L; lo->seed = seed;
    if (!d->r) return;
    lo->N = N; lo->discard_n = discard_n;
    for (int i = 0; i < d->nmods; i++) {
        const LoraModule* m = &d->mods[i];
        lo->maxw = m->in > lo->maxw ? m->in : lo->maxw;
        lo->maxw = m->rows > lo->maxw ? m->rows : lo->maxw;
        lo->maxrows = m->rows > lo->maxrows ? m->rows : lo->maxrows;
        lo->maxin = m->in > lo->maxin ? m->in : lo->maxin;
    }
    size_t X = sizeof(floatX);
    if (d->dropout > 0.0f) lo->xd = (floatX*)dev_alloc(TAG_ACTS, X * (size_t)N * lo->maxin);
    lo->u = (floatX*)dev_alloc(TAG_ACTS, X * (size_t)N * L * d->nmods * d->r);
    lo->tmp = (floatX*)dev_alloc(TAG_ACTS, X * (size_t)N * lo->maxw);
    lo->dv = (floatX*)dev_alloc(TAG_ACTS, X * (size_t)N * lo->maxrows);
    lo->du = (floatX*)dev_alloc(TAG_ACTS, X * (size_t)N * d->r);
    lo->discard = (float*)dev_alloc(TAG_ACTS, sizeof(float) * (size_t)discard_n);
}

static void lora_free(Lora* lo) {
    if (lo->deq) dev_free(TAG_PARAM_BUF, lo->deq, sizeof(floatX) * (size_t)lo->deq_n); // [QLoRA]
    lo->deq = NULL;
    free(lo->dyn);
    lo->dyn = NULL;
    if (!lo->d || !lo->d->r || !lo->u) return;
    size_t X = sizeof(floatX);
    const LoraDesc* d = lo->d;
    dev_free(TAG_ACTS, lo->u, X * (size_t)lo->N * lo->L * d->nmods * d->r);
    dev_free(TAG_ACTS, lo->tmp, X * (size_t)lo->N * lo->maxw);
    dev_free(TAG_ACTS, lo->dv, X * (size_t)lo->N * lo->maxrows);
    dev_free(TAG_ACTS, lo->du, X * (size_t)lo->N * d->r);
    dev_free(TAG_ACTS, lo->discard, sizeof(float) * (size_t)lo->discard_n);
    if (lo->xd) dev_free(TAG_ACTS, lo->xd, X * (size_t)lo->N * lo->maxin);
    lo->u = NULL; lo->xd = NULL;
}

// The adapters' initial values for the logical range [logical, logical + len) (inside the adapters:
// logical at or after the first module's logA): A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's
// kaiming_uniform_ with a = sqrt(5)), keyed by (seed, module, element index); B = 0.
static void lora_fill(const LoraDesc* d, int L, uint64_t seed, float* dst, int64_t logical, int64_t len) {
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        int k = 2 * d->nmods - 1; // the tensor holding li: A (even) or B (odd) of module k / 2
        while ((k % 2 ? d->mods[k / 2].logB : d->mods[k / 2].logA) > li) k--;
        const LoraModule* m = &d->mods[k / 2];
        int64_t start = k % 2 ? m->logB : m->logA;
        int64_t n = k % 2 ? (int64_t)L * m->rows * d->r : (int64_t)L * d->r * m->in;
        int64_t run = start + n - li < len - i ? start + n - li : len - i;
        uint64_t key = rng_key(seed, 0x4C4F5241ull /* "LORA" */, (uint64_t)(k / 2));
        double bound = 1.0 / sqrt((double)m->in);
        for (int64_t j = 0; j < run; j++)
            dst[i + j] = k % 2 ? 0.0f : (float)((2.0 * rng_uniform(key, (uint64_t)(li + j - start)) - 1.0) * bound);
        i += run;
    }
}

// One layer's adapters for the projection ops: the adapter block's parameters and (backward) its
// gradient buffer, as the ZeRO hooks hand them out (p NULL or no adapters: the plain matmul).
typedef struct {
    const Lora* lo;
    const floatX* p; // the adapter block's parameters
    float* g;        // its gradients (backward), else NULL
    int l;           // the layer
} LoraView;

static inline LoraView lora_view(const Lora* lo, const floatX* p, float* g, int l) {
    LoraView v = {lo, p, g, l};
    return v;
}

static inline int lora_on(const LoraView* v, int proj) {
    if (!v->p || !v->lo->d || !v->lo->d->r) return 0;
    for (int i = 0; i < v->lo->d->nmods; i++)
        if (v->lo->d->mods[i].proj == proj) return 1;
    return 0;
}

// ---- -lora-dropout: PEFT's y = W x + (alpha/r) B (A dropout(x)), dropout as torch's (a kept element
// scaled by 1/(1-p), a dropped one 0), in training forwards only. The mask is counter-based
// (ops/lora.cuh: lora_drop_keep), keyed by (-seed, layer, module, the sample's position in the data
// stream, token, column): the position pos0 + b (dataloader.h: unit u = (step*GA + micro)*R + rank
// holds positions u*B ..) names the step, the micro-step and the global sample at once, and is the
// same sample's for any R with the same global batch, so the mask is the same for any R, ZeRO
// stage, recompute mode or offload. It is never stored: the backward (and a recompute) makes it
// again from the same key, so dropout costs one (N, in) scratch, not a mask per layer.
// The micro-batch in hand: called by the training loop before each micro-step's forward.
static inline void lora_set_batch(Lora* lo, int64_t pos0, int T) { lo->pos0 = pos0; lo->T = T; }

static inline int lora_drop_on(const Lora* lo) { return lo->d && lo->d->dropout > 0.0f && (lo->training || lo->drop_eval); }

static inline LoraDrop lora_drop(const Lora* lo, int l, int i) {
    LoraDrop k;
    k.key = rng_key(lo->seed, LORA_DROP_LABEL, (uint64_t)l * LORA_MAX_MODULES + (uint64_t)i);
    k.pos0 = lo->pos0; k.T = lo->T > 0 ? lo->T : 1;
    k.thr = lora_drop_threshold(lo->d->dropout);
    k.scale = 1.0f / (1.0f - lo->d->dropout);
    return k;
}

// out (N, OC) = inp (N, C) @ W^T + bias, plus (alpha/r) B (A inp) on each adapted row range; with
// pre != NULL (GPT-2's c_fc): pre = that, out = gelu(pre) (the adapters add before the GELU).
static void proj_forward(const LoraView* v, int proj, floatX* out, floatX* pre, const floatX* inp, const floatX* w,
                         const floatX* bias, int N, int C, int OC) {
    if (!lora_on(v, proj)) { op_matmul_forward(out, pre, inp, w, bias, N, C, OC); return; }
    const Lora* lo = v->lo;
    const LoraDesc* d = lo->d;
    floatX* y = pre ? pre : out;
    op_matmul_forward(y, NULL, inp, w, bias, N, C, OC);
    for (int i = 0; i < d->nmods; i++) {
        const LoraModule* m = &d->mods[i];
        if (m->proj != proj) continue;
        floatX* u = lo->u + ((int64_t)v->l * d->nmods + i) * N * d->r;
        const floatX* A = v->p + m->offA + (int64_t)v->l * d->r * m->in;
        const floatX* B = v->p + m->offB + (int64_t)v->l * m->rows * d->r;
        const floatX* x = inp;
        if (lora_drop_on(lo)) { op_lora_dropout(lo->xd, inp, NULL, N, m->in, lora_drop(lo, v->l, i)); x = lo->xd; } // xd = dropout(x)
        op_matmul_forward(u, NULL, x, A, NULL, N, (int)m->in, d->r);            // u (N, r) = xd A^T
        op_matmul_forward(lo->tmp, NULL, u, B, NULL, N, d->r, (int)m->rows);    // (N, rows) = u B^T
        op_lora_add_cols(y, OC, m->row0, lo->tmp, N, m->rows, d->scale);        // y[:, rows] += scale * that
    }
    if (pre) op_gelu_forward(out, pre, (int64_t)N * OC);
}

// Backward of proj_forward: dinp (=) as op_matmul_backward's, through the adapters too; the base's
// dW and dbias (NULL: frozen, not computed); the adapters' dA and dB (+=) into v->g. pre_inp: as
// op_matmul_backward's (inp = gelu(pre_inp): the GELU's backward applies to both paths).
static void proj_backward(const LoraView* v, int proj, floatX* dinp, float* dw, float* dbias, const floatX* dout,
                          const floatX* inp, const floatX* w, const floatX* pre_inp, int N, int C, int OC) {
    op_matmul_backward(dinp, dw, dbias, dout, inp, w, pre_inp, N, C, OC);
    if (!lora_on(v, proj)) return;
    const Lora* lo = v->lo;
    const LoraDesc* d = lo->d;
    for (int i = 0; i < d->nmods; i++) {
        const LoraModule* m = &d->mods[i];
        if (m->proj != proj) continue;
        const floatX* u = lo->u + ((int64_t)v->l * d->nmods + i) * N * d->r;
        const floatX* A = v->p + m->offA + (int64_t)v->l * d->r * m->in;
        const floatX* B = v->p + m->offB + (int64_t)v->l * m->rows * d->r;
        float* dA = v->g + m->offA + (int64_t)v->l * d->r * m->in;
        float* dB = v->g + m->offB + (int64_t)v->l * m->rows * d->r;
        op_lora_take_cols(lo->dv, dout, OC, m->row0, N, m->rows, d->scale);     // dv (N, rows) = scale * dy[:, rows]
        op_matmul_backward(lo->du, dB, NULL, lo->dv, u, B, NULL, N, d->r, (int)m->rows); // du = dv B; dB += dv^T u
        if (lora_drop_on(lo)) { // u = dropout(x) A^T: the mask made again (the same key), never stored
            LoraDrop k = lora_drop(lo, v->l, i);
            op_lora_dropout(lo->xd, inp, NULL, N, m->in, k);                    // xd = dropout(x), as the forward's
            op_matmul_backward(dinp ? lo->tmp : NULL, dA, NULL, lo->du, lo->xd, A, NULL, N, (int)m->in, d->r); // dxd = du A; dA += du^T xd
            if (dinp) op_lora_dropout(lo->tmp, lo->tmp, pre_inp, N, m->in, k);  // dx' = dropout(dxd) (* gelu'(pre): c_proj's input)
        } else {
            op_matmul_backward(dinp ? lo->tmp : NULL, dA, NULL, lo->du, inp, A, pre_inp, N, (int)m->in, d->r); // dx' = du A; dA += du^T x
        }
        if (dinp) op_add_inplace(dinp, lo->tmp, (int64_t)N * m->in);
    }
}

// ---- The merged model (-export-hf with -lora: what PEFT's merge_and_unload() gives). The weight of
// each projection: proj_tensor (model.h).

// Layer l's weight of projection proj, w (OC, in) in our layout (+=): every module on it adds
// scale * B A to its rows [row0, row0 + rows), in FP32 (PEFT: W + (B @ A) * scaling; each sum over
// the rank in double, rounded once). ad: the adapter block's values (FP32: the master weights).
// The Hugging Face writer then transposes GPT-2's Conv1D and splits the fused q/k/v and gate/up as
// it does for every export, so the merge happens once, in our layout.
static void lora_merge(const LoraDesc* d, int l, int proj, float* w, const float* ad) {
    for (int i = 0; i < d->nmods; i++) {
        const LoraModule* m = &d->mods[i];
        if (m->proj != proj) continue;
        const float* A = ad + m->offA + (int64_t)l * d->r * m->in;   // (r, in)
        const float* B = ad + m->offB + (int64_t)l * m->rows * d->r; // (rows, r)
        for (int64_t o = 0; o < m->rows; o++) {
            float* row = w + (m->row0 + o) * m->in;
            for (int64_t j = 0; j < m->in; j++) {
                double s = 0.0;
                for (int k = 0; k < d->r; k++) s += (double)B[o * d->r + k] * (double)A[(int64_t)k * m->in + j];
                row[j] += (float)s * d->scale;
            }
        }
    }
}

// ---- PEFT's files. -lora-export DIR writes what PEFT 0.13.2's save_pretrained writes for a LoRA
// adapter: adapter_model.safetensors (base_model.model.<module>.lora_A.weight [r, in] and
// .lora_B.weight [out, r], F32) and adapter_config.json (peft_type LORA, r, lora_alpha,
// target_modules, lora_dropout (-lora-dropout), bias none, task_type CAUSAL_LM, base_model_name_or_path,
// fan_in_fan_out: true for GPT-2's Conv1D). block: the adapter block's values (padded coordinates,
// FP32: the master weights). Each file is written to a temporary name and renamed: a failure leaves
// no partial file. Returns 0, or -1 with a message in err.
// One file of the adapter written and fsynced under a temporary name (tmp, tcap bytes): 0, or -1
// with err set and nothing left.
static int lora_write_file(const char* dir, const char* name, char* tmp, size_t tcap, const void* a, size_t na, const float* block,
                           const StSpec* sp, const int64_t* src, int n, char* err, size_t errlen) {
    snprintf(tmp, tcap, "%s/%s.tmp.%d", dir, name, (int)getpid());
    FILE* fp = fopen(tmp, "wb");
    if (!fp) { snprintf(err, errlen, "cannot create %.512s: %s", tmp, strerror(errno)); return -1; }
    int ok = fwrite(a, 1, na, fp) == na;
    for (int k = 0; ok && k < n; k++) ok = fwrite(block + src[k], sizeof(float), (size_t)(sp[k].shape[0] * sp[k].shape[1]), fp) == (size_t)(sp[k].shape[0] * sp[k].shape[1]);
    ok = (fflush(fp) == 0) & ok;
    ok = (fsync(fileno(fp)) == 0) & ok;
    ok = (fclose(fp) == 0) & ok;
    if (!ok) {
        snprintf(err, errlen, "writing %.512s failed: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int lora_write_peft(const LoraDesc* d, const GPTConfig* c, const float* block, const char* dir, const char* base,
                           char* err, size_t errlen) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) { snprintf(err, errlen, "cannot create %.512s: %s", dir, strerror(errno)); return -1; }
    static const char* const ours[] = {"adapter_"}; // an interrupted export's files (fileio.h)
    int restored = 0, left = zt_export_leftovers(dir, ours, 1, "adapter_config.json", &restored);
    if (left) printf("%s: %s %d file(s) an interrupted adapter write left (*.tmp.PID, *.replaced.PID)\n", dir,
                     restored ? "the earlier adapter restored first (its commit had been cut) from" : "removed", left);
    int n = 2 * d->nmods * c->L;
    StSpec* sp = (StSpec*)calloc((size_t)n, sizeof(StSpec));
    int64_t* src = (int64_t*)malloc(sizeof(int64_t) * (size_t)n);
    int64_t* offs = (int64_t*)malloc(sizeof(int64_t) * (size_t)n);
    if (!sp || !src || !offs) die(1, "out of host memory (%d adapter tensors)", n);
    for (int l = 0, k = 0; l < c->L; l++)
        for (int i = 0; i < d->nmods; i++)
            for (int t = 0; t < 2; t++, k++) {
                const LoraModule* m = &d->mods[i];
                char mod[96];
                snprintf(mod, sizeof(mod), m->hf, l);
                snprintf(sp[k].name, sizeof(sp[k].name), "base_model.model.%s.lora_%s.weight", mod, t ? "B" : "A");
                sp[k].dtype = ST_F32; sp[k].ndim = 2;
                sp[k].shape[0] = t ? m->rows : d->r;
                sp[k].shape[1] = t ? d->r : m->in;
                src[k] = t ? m->offB + (int64_t)l * m->rows * d->r : m->offA + (int64_t)l * d->r * m->in;
            }
    int64_t hlen;
    char* h = st_make_header(sp, n, offs, &hlen);
    char mtmp[4300], ctmp[4300], mpath[4200], cpath[4200];
    snprintf(mpath, sizeof(mpath), "%s/adapter_model.safetensors", dir);
    snprintf(cpath, sizeof(cpath), "%s/adapter_config.json", dir);
    int rc = lora_write_file(dir, "adapter_model.safetensors", mtmp, sizeof(mtmp), h, (size_t)hlen, block, sp, src, n, err, errlen);
    free(h);
    // adapter_config.json: PEFT 0.13.2's LoraConfig fields, in its (sorted) order
    char targets[256] = "";
    for (int i = 0; i < d->nmods; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= !strcmp(d->mods[j].target, d->mods[i].target);
        if (!seen) snprintf(targets + strlen(targets), sizeof(targets) - strlen(targets), "%s\"%s\"", targets[0] ? ", " : "", d->mods[i].target);
    }
    char esc[1024]; // the base's name as a JSON string's contents
    size_t e = 0;
    for (const char* q = base; *q && e + 7 < sizeof(esc); q++) {
        if (*q == '"' || *q == '\\') { esc[e++] = '\\'; esc[e++] = *q; }
        else if ((unsigned char)*q < 0x20) e += (size_t)snprintf(esc + e, sizeof(esc) - e, "\\u%04x", (unsigned char)*q);
        else esc[e++] = *q;
    }
    esc[e] = 0;
    char json[4096];
    int nj = snprintf(json, sizeof(json),
        "{\n  \"alpha_pattern\": {},\n  \"auto_mapping\": null,\n  \"base_model_name_or_path\": \"%s\",\n  \"bias\": \"none\",\n"
        "  \"fan_in_fan_out\": %s,\n  \"inference_mode\": true,\n  \"init_lora_weights\": true,\n  \"layer_replication\": null,\n"
        "  \"layers_pattern\": null,\n  \"layers_to_transform\": null,\n  \"loftq_config\": {},\n  \"lora_alpha\": %.9g,\n"
        "  \"lora_dropout\": %.7g,\n  \"megatron_config\": null,\n  \"megatron_core\": \"megatron.core\",\n  \"modules_to_save\": null,\n"
        "  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"rank_pattern\": {},\n  \"revision\": null,\n  \"target_modules\": [%s],\n"
        "  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n  \"use_rslora\": false\n}\n",
        esc, c->family == FAMILY_GPT2 ? "true" : "false", (double)d->alpha, (double)d->dropout, d->r, targets);
    if (rc == 0 && (nj <= 0 || nj >= (int)sizeof(json))) { snprintf(err, errlen, "adapter_config.json: the base's name is too long"); unlink(mtmp); rc = -1; }
    if (rc == 0 && lora_write_file(dir, "adapter_config.json", ctmp, sizeof(ctmp), json, (size_t)nj, NULL, NULL, NULL, 0, err, errlen)) {
        unlink(mtmp);
        rc = -1;
    }
    if (rc == 0) { // both replaced all or nothing: adapter_config.json (the key PEFT and -lora-init read first) aside first, in last
        ZtCommitFile files[2] = {{mtmp, mpath}, {ctmp, cpath}};
        rc = zt_commit_export(dir, files, 2, NULL, 0, err, errlen);
    }
    free(sp); free(src); free(offs);
    return rc;
}

// -lora-init DIR: a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) as the
// adapters' initial values. Refused (exit 2, naming the file and both values): another peft_type,
// rank, alpha, target list or base (base_model_name_or_path against -e, compared by their last path
// component), a tensor missing, of another shape, or one the run has no place for.
typedef struct {
    StFile st;
    const LoraDesc* d;
    int L;
    const StTensor** t; // (L, nmods, 2): layer l, module i, A / B
} LoraPeft;

static const char* lora_base_name(const char* p, char* buf, size_t cap) { // the last path component
    snprintf(buf, cap, "%s", p);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    const char* s = strrchr(buf, '/');
    return s ? s + 1 : buf;
}

static void lora_peft_open(LoraPeft* lp, const char* dir, const LoraDesc* d, const GPTConfig* c, const char* model) {
    memset(lp, 0, sizeof(*lp));
    lp->d = d; lp->L = c->L;
    char path[4200], err[1024];
    snprintf(path, sizeof(path), "%s/adapter_config.json", dir);
    FILE* fp = zt_fopen_read(path);
    if (!fp) die_user("-lora-init %s: cannot read %s: %s", dir, path, zt_strerror(errno));
    char* text = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
        if (len + got + 1 > cap) { cap = 2 * (len + got + 1); text = (char*)realloc(text, cap); if (!text) die(1, "out of host memory"); }
        memcpy(text + len, chunk, got);
        len += got;
    }
    fclose(fp);
    Json j;
    if (!text || json_parse(&j, text, len, err, sizeof(err))) die_user("-lora-init %s: not JSON: %s", path, text ? err : "empty");
    int pt = json_get(&j, 0, "peft_type"), r = json_get(&j, 0, "r"), al = json_get(&j, 0, "lora_alpha"),
        tm = json_get(&j, 0, "target_modules"), bm = json_get(&j, 0, "base_model_name_or_path");
    if (pt < 0 || j.nodes[pt].type != JSON_STRING || strcmp(j.nodes[pt].str, "LORA"))
        die_user("-lora-init %s: peft_type %s, not LORA", path, pt >= 0 && j.nodes[pt].type == JSON_STRING ? j.nodes[pt].str : "missing");
    if (r < 0 || j.nodes[r].type != JSON_NUMBER || j.nodes[r].num != d->r)
        die_user("-lora-init %s: r %g, this run's -lora %d", path, r >= 0 ? j.nodes[r].num : -1.0, d->r);
    if (al < 0 || j.nodes[al].type != JSON_NUMBER || (float)j.nodes[al].num != d->alpha)
        die_user("-lora-init %s: lora_alpha %g, this run's -lora-alpha %g. HINT: give -lora-alpha %g", path, al >= 0 ? j.nodes[al].num : -1.0,
                 (double)d->alpha, al >= 0 ? j.nodes[al].num : 0.0);
    // target_modules: the same set of names as this run's
    char mine[256] = "", theirs[256] = "";
    int same = tm >= 0 && j.nodes[tm].type == JSON_ARRAY;
    for (int i = 0; i < d->nmods; i++) {
        int seen = 0, found = 0;
        for (int k = 0; k < i; k++) seen |= !strcmp(d->mods[k].target, d->mods[i].target);
        if (seen) continue;
        snprintf(mine + strlen(mine), sizeof(mine) - strlen(mine), "%s%s", mine[0] ? "," : "", d->mods[i].target);
        for (int k = same ? j.nodes[tm].first : -1; k >= 0; k = j.nodes[k].next)
            found |= j.nodes[k].type == JSON_STRING && !strcmp(j.nodes[k].str, d->mods[i].target);
        same &= found;
    }
    for (int k = tm >= 0 && j.nodes[tm].type == JSON_ARRAY ? j.nodes[tm].first : -1; k >= 0; k = j.nodes[k].next) {
        int known = 0;
        for (int i = 0; i < d->nmods; i++) known |= j.nodes[k].type == JSON_STRING && !strcmp(j.nodes[k].str, d->mods[i].target);
        same &= known;
        snprintf(theirs + strlen(theirs), sizeof(theirs) - strlen(theirs), "%s%s", theirs[0] ? "," : "", j.nodes[k].type == JSON_STRING ? j.nodes[k].str : "?");
    }
    if (!same) die_user("-lora-init %s: target_modules [%s], this run's -lora-targets %s", path, theirs, mine);
    if (bm >= 0 && j.nodes[bm].type == JSON_STRING) {
        char b1[1024], b2[1024];
        const char* n1 = lora_base_name(j.nodes[bm].str, b1, sizeof(b1));
        const char* n2 = lora_base_name(model, b2, sizeof(b2));
        if (strcmp(n1, n2))
            die_user("-lora-init %s: an adapter for the base %s, and this run's -e is %s", path, j.nodes[bm].str, model);
    }
    // PEFT's options this trainer does not implement, each at its default (null, false, {}, [], "", or
    // bias "none"), or the adapter is refused naming the field: applied here without them it would
    // be another adapter at another scale (use_rslora: alpha / sqrt(r)), silently
    static const struct { const char* key; const char* means; } peft_opts[] = {
        {"use_rslora", "rank-stabilised LoRA scales the update by lora_alpha / sqrt(r), not lora_alpha / r"},
        {"use_dora", "DoRA adds a magnitude vector to each adapted weight"},
        {"alpha_pattern", "some modules have another lora_alpha"},
        {"rank_pattern", "some modules have another r"},
        {"modules_to_save", "whole modules are trained and saved beside the adapters"},
        {"layers_to_transform", "only some layers carry adapters"},
        {"layers_pattern", "only some layers carry adapters"},
        {"layer_replication", "layers of the base are repeated"},
        {"bias", "biases are trained with the adapters"},
    };
    for (size_t q = 0; q < sizeof(peft_opts) / sizeof(peft_opts[0]); q++) {
        int k = json_get(&j, 0, peft_opts[q].key);
        if (k < 0) continue;
        const JsonNode* v = &j.nodes[k];
        int plain = v->type == JSON_NULL || v->type == JSON_FALSE || ((v->type == JSON_ARRAY || v->type == JSON_OBJECT) && v->first < 0) ||
                    (v->type == JSON_STRING && (!v->str[0] || !strcmp(v->str, "none")));
        if (plain) continue;
        char shown[64];
        if (v->type == JSON_STRING) snprintf(shown, sizeof(shown), "\"%.40s\"", v->str);
        else snprintf(shown, sizeof(shown), "%s", v->type == JSON_TRUE ? "true" : v->type == JSON_NUMBER ? "a number" : v->type == JSON_ARRAY ? "a list" : "an object");
        die_user("-lora-init %s: %s is %s (%s), which this trainer does not implement. HINT: train from the base with that adapter merged "
                 "(PEFT's merge_and_unload, saved as a Hugging Face checkpoint: -e it), or start from a plain LoRA adapter",
                 path, peft_opts[q].key, shown, peft_opts[q].means);
    }
    json_free(&j);
    free(text);
    snprintf(path, sizeof(path), "%s/adapter_model.safetensors", dir);
    if (st_open(&lp->st, path, err, sizeof(err))) die_user("-lora-init %s", err);
    int n = c->L * d->nmods * 2;
    lp->t = (const StTensor**)calloc((size_t)n, sizeof(*lp->t));
    if (!lp->t) die(1, "out of host memory");
    for (int l = 0, k = 0; l < c->L; l++)
        for (int i = 0; i < d->nmods; i++)
            for (int t = 0; t < 2; t++, k++) {
                const LoraModule* m = &d->mods[i];
                char mod[96], name[160];
                snprintf(mod, sizeof(mod), m->hf, l);
                snprintf(name, sizeof(name), "base_model.model.%s.lora_%s.weight", mod, t ? "B" : "A");
                const StTensor* x = st_find(&lp->st, name);
                int64_t r0 = t ? m->rows : d->r, c0 = t ? d->r : m->in;
                if (!x) die_user("-lora-init %s: no tensor %s", path, name);
                if (x->ndim != 2 || x->shape[0] != r0 || x->shape[1] != c0 || x->dtype == ST_OTHER)
                    die_user("-lora-init %s: %s is %s %lld x %lld, this run's is F32/F16/BF16 %lld x %lld (another base?)", path, name,
                             x->dtype_name, (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0), (long long)r0, (long long)c0);
                lp->t[k] = x;
            }
    if (lp->st.n != n) // a tensor this run has no place for (another target, layer or model)
        for (int q = 0; q < lp->st.n; q++) {
            int used = 0;
            for (int k = 0; k < n; k++) used |= lp->t[k] == &lp->st.t[q];
            if (!used) die_user("-lora-init %s: %s is not an adapter of this run (another base or target list?)", path, lp->st.t[q].name);
        }
    for (int k = 0; k < n; k++) { // a non-finite value is the adapter file's fault, not the base's: said here
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < lp->t[k]->numel; i++)
            if (!isfinite(st_get(&lp->st, lp->t[k], i))) { bad++; if (first < 0) first = i; }
        if (bad) die_user("-lora-init %s: %s holds %lld non-finite value(s) (the first at element %lld). HINT: the adapter is corrupt or "
                          "its training diverged: start from another adapter, or without -lora-init", path, lp->t[k]->name, (long long)bad, (long long)first);
    }
}

// The file's values for the logical range [logical, logical + len) of the adapters (as lora_fill).
static void lora_peft_fill(const LoraPeft* lp, float* dst, int64_t logical, int64_t len) {
    const LoraDesc* d = lp->d;
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        int k = 2 * d->nmods - 1;
        while ((k % 2 ? d->mods[k / 2].logB : d->mods[k / 2].logA) > li) k--;
        const LoraModule* m = &d->mods[k / 2];
        int64_t start = k % 2 ? m->logB : m->logA, per = k % 2 ? m->rows * d->r : d->r * m->in;
        int64_t e = li - start, l = e / per, within = e % per;
        int64_t run = per - within < len - i ? per - within : len - i;
        const StTensor* x = lp->t[((int64_t)l * d->nmods + k / 2) * 2 + k % 2];
        for (int64_t q = 0; q < run; q++) dst[i + q] = st_get(&lp->st, x, within + q);
        i += run;
    }
}

static void lora_peft_close(LoraPeft* lp) {
    st_close(&lp->st);
    free(lp->t);
    memset(lp, 0, sizeof(*lp));
}

// ---- [QLoRA] A 4-bit base (Dettmers et al. 2023, "QLoRA"; -lora-quant nf4): each layer's
// projection matrices are stored as bitsandbytes' NF4 with double quantization (ops/nf4.cuh), one
// part per Hugging Face module (model.h: nf4_describe_parts), in the frozen blocks where their BF16
// values would be: ZeRO shards, gathers and poisons those bytes like any block's. The rest of the
// base (embeddings, norms, biases, the LM head) stays BF16, as bitsandbytes leaves it.
//   - at load, lora_base_encode makes a tensor's bytes from its logical values: rounded to floatX
//     first (the BF16 weights transformers would hand bitsandbytes), then quantized part by part;
//     or, from a checkpoint bitsandbytes quantized (Nf4Source: hf.h), the parts as the file holds them.
//     A rank quantizes each tensor it holds bytes of whole, so every rank and stage makes the same
//     bits (the absmax mean of double quantization is the whole part's);
//   - before a layer's forward, and again before its backward (nothing is kept between: the
//     recompute and the backward read the same dequantized values), lora_base_dequant writes the
//     layer's matrices in floatX into one buffer (deq) and points the layer's view at it. The layer
//     code and the matmuls never see a 4-bit value.

// Elements of one layer's dequantized matrices (the deq buffer; 0: a BF16 base).
static int64_t lora_dequant_elems(const ModelDesc* d) {
    int64_t n = 0;
    for (int k = 0; k < NUM_TENSORS; k++)
        if (d->t[k].stored && !d->t[k].io) n += round_up(d->t[k].n, TENSOR_ALIGN);
    return n;
}

static void lora_base_alloc(Lora* lo, const ModelDesc* d) {
    lo->deq_n = lora_dequant_elems(d);
    lo->deq = lo->deq_n ? (floatX*)dev_alloc(TAG_PARAM_BUF, sizeof(floatX) * (size_t)lo->deq_n) : NULL;
    lo->dyn = NULL;
}

// The nested code book the base's parts were quantized with (a checkpoint's: hf.h reads it), dyn (256
// floats, copied) or NULL for ours (NF4_DYN: what nf4_quantize uses).
static void lora_base_set_map(Lora* lo, const float* dyn) {
    free(lo->dyn);
    lo->dyn = NULL;
    if (!dyn) return;
    lo->dyn = (float*)malloc(256 * sizeof(float));
    if (!lo->dyn) die(1, "out of host memory (a code book)");
    memcpy(lo->dyn, dyn, 256 * sizeof(float));
}

// The layer view t (NUM_TENSORS pointers into the block as the hooks hold it): each encoded matrix
// dequantized into deq, part after part, and its pointer moved there. No encoded tensor: nothing.
static void lora_base_dequant(const Lora* lo, const ModelDesc* d, floatX** t) {
    if (!lo->deq) return;
    floatX* out = lo->deq;
    for (int k = 0; k < NUM_TENSORS; k++) {
        const TensorInfo* ti = &d->t[k];
        if (!ti->stored || ti->io) continue;
        const unsigned char* src = (const unsigned char*)t[k];
        floatX* w = out;
        for (int i = 0; i < ti->nparts; i++) {
            op_nf4_dequant_map(w, src, ti->part_n[i], lo->dyn);
            w += ti->part_n[i];
            src += nf4_part(ti->part_n[i]).bytes;
        }
        t[k] = out;
        out += round_up(ti->n, TENSOR_ALIGN);
    }
}

// The encoder zero_fill_frozen_params calls (zero.h: EncodedFill): the bytes [byte0, byte0 + n) of
// layer `layer`'s tensor `tensor`, from the logical source. The tensor last made is kept, so a rank
// reads and quantizes each tensor it holds bytes of once. Non-finite values are counted by the call
// that holds byte 0 (one rank per tensor).
// A source of parts already in 4 bits (a bitsandbytes checkpoint: hf.h's hf_nf4_part): part `part`
// of layer `layer`'s tensor named `tensor` (model.h's name) into st (nf4_part(n).bytes). Returns 1
// when it filled it, 0 when the source holds no 4-bit part there (then it is quantized).
typedef int (*Nf4Source)(void* ctx, const char* tensor, int layer, int part, unsigned char* st, int64_t n);

typedef struct {
    LogicalFill fill;
    void* ctx;
    Nf4Source pre;          // NULL: every part quantized from fill's values
    void* pre_ctx;
    const ModelDesc* d;
    int tensor, layer;      // the tensor in st (-1: none)
    float* w;               // (n) its values
    unsigned char* st;      // its bytes
    int64_t bad;            // its non-finite values
} LoraEncoder;

static void lora_encoder_init(LoraEncoder* e, LogicalFill fill, void* ctx, Nf4Source pre, void* pre_ctx, const ModelDesc* d) {
    memset(e, 0, sizeof(*e));
    e->fill = fill; e->ctx = ctx; e->pre = pre; e->pre_ctx = pre_ctx; e->d = d; e->tensor = -1;
}
static void lora_encoder_free(LoraEncoder* e) { free(e->w); free(e->st); e->w = NULL; e->st = NULL; e->tensor = -1; }

static int64_t lora_base_encode(void* ctx, int tensor, int layer, unsigned char* dst, int64_t byte0, int64_t n) {
    LoraEncoder* e = (LoraEncoder*)ctx;
    const TensorInfo* t = &e->d->t[tensor];
    int64_t bytes = t->stored * (int64_t)sizeof(floatX);
    if (byte0 < 0 || n < 0 || byte0 + n > bytes) die(1, "%s: bytes [%lld, %lld) asked of its %lld (internal error)", t->name, (long long)byte0, (long long)(byte0 + n), (long long)bytes);
    if (e->tensor != tensor || e->layer != layer) {
        lora_encoder_free(e);
        e->st = (unsigned char*)malloc((size_t)bytes);
        if (!e->st) die(1, "out of host memory (%s of layer %d: %lld bytes)", t->name, layer, (long long)bytes);
        e->bad = 0;
        int64_t at = 0, sb = 0;
        for (int i = 0; i < t->nparts; i++) {
            Nf4Part P = nf4_part(t->part_n[i]);
            if (!(e->pre && e->pre(e->pre_ctx, t->name, layer, i, e->st + sb, t->part_n[i]))) { // (already 4-bit: copied as it is)
                if (!e->w) { // the tensor's values, once, rounded to floatX first (as the BF16 base holds them)
                    e->w = (float*)malloc(sizeof(float) * (size_t)t->n);
                    if (!e->w) die(1, "out of host memory (%s of layer %d: %lld weights to quantize)", t->name, layer, (long long)t->n);
                    e->fill(e->ctx, e->w, t->logical + (int64_t)layer * t->n, t->n);
                    for (int64_t j = 0; j < t->n; j++) { e->bad += !isfinite(e->w[j]); e->w[j] = ld(rn(e->w[j])); }
                }
                nf4_quantize(e->w + at, t->part_n[i], e->st + sb);
            } else { // a 4-bit part read as it is: its scales must be finite (a NaN would make every weight of its blocks NaN)
                float v;
                memcpy(&v, e->st + sb + P.o_offset, 4);
                e->bad += !isfinite(v);
                for (int64_t j = 0; j < P.nn; j++) { memcpy(&v, e->st + sb + P.o_nested + 4 * j, 4); e->bad += !isfinite(v); }
            }
            at += t->part_n[i];
            sb += P.bytes;
        }
        memset(e->st + sb, 0, (size_t)(bytes - sb));
        e->tensor = tensor; e->layer = layer;
    }
    memcpy(dst, e->st + byte0, (size_t)n);
    return byte0 == 0 ? e->bad : 0;
}

#endif // ZT_LORA_H
