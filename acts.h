// acts.h — activations: what the forward keeps for the backward. The recompute mode (-r) decides
// which per-layer tensors are kept for every layer and which get one shared copy that the backward
// refills by running the *same* op again (so gradients are bit-identical in every mode):
//   -r 0 keep everything; -r 1 recompute GELU; -r 2 also the layernorms;
//   -r 3 keep only each layer's input x and recompute the whole layer in backward.
// Holds the activation table (LAYER_ACTS, SHARED_ACTS: every tensor with its shape), Acts and a
// layer's view of it (LayerActs, layer_acts), their allocation, and the closed forms the allocator
// and the planner share: acts_bytes and the ops' workspace (ops_workspace_floats). The forward and
// backward that fill these tensors are in train_gpt.cu (section 2).
//
// May call: device.cuh (dev_alloc, dev_free), model.h (GPTConfig) and the ops' workspace sizes
// (ops/matmul.cuh, ops/encoder.cuh, ops/attention.cuh, adamw.cuh). Knows nothing of the trainer's types.
#ifndef ZT_ACTS_H
#define ZT_ACTS_H
#include <float.h>           // (adamw.cuh uses FLT_MAX without including it)
#include "device.cuh"        // defines: floatX, dev_alloc, dev_free, TAG_ACTS, TAG_LOGITS, round_up, ceil_div
#include "model.h"           // defines: GPTConfig, MAX_BLOCK_TENSORS (zero.h)
#include "ops/matmul.cuh"    // defines: GEMM_PANEL_FLOATS, GEMM_NR, MATMUL_WORKSPACE_BYTES
#include "ops/encoder.cuh"   // defines: encoder_workspace_ints
#include "ops/attention.cuh" // defines: attention_workspace_floats, g_attn_cudnn, attention_cudnn_workspace_bytes
#include "ops/classifier.cuh" // defines: classifier_chunk_rows, classifier_buffer_rows
#include "adamw.cuh"         // defines: NORM_CHUNK


// X(name, type, elements per layer, keep): kept per layer while -r <= keep, else one shared copy.
// The sizes come from the model's derived sizes (model_dims: QKV, ATT, FC, F), so one table serves
// both families; MEAN is 1 for a layernorm (GPT-2), 0 for an RMSNorm (Llama: no mean). In Llama's
// layer, ln1/ln2 are the RMSNorm outputs, qkv holds q and k after RoPE, fch holds gate ; up (FC =
// 2F) and fch_gelu the SwiGLU output (F); dswiglu and the RoPE table (DSW, ROPE) are Llama's only;
// qkn and qkn_rstd (QKN, QKH) only a model with per-head q/k norms has (qk_norm: Qwen3).
#define LAYER_ACTS(X)                                                                  \
    X(x,        floatX, BT * C,              3) /* (B,T,C)  residual stream entering the layer */ \
    X(ln1,      floatX, BT * C,              1) /* (B,T,C)  layernorm 1 output */              \
    X(ln1_mean, float,  BT * MEAN,           1) /* (B,T) */                                    \
    X(ln1_rstd, float,  BT,                  1) /* (B,T) */                                    \
    X(qkv,      floatX, BT * QKV,            2) /* (B,T,QKV) q heads ; k heads ; v heads */    \
    X(qkn,      floatX, BT * QKN,            2) /* (B,T,NH+NKV,HD) [qk_norm] q, k heads before their RMSNorm */ \
    X(qkn_rstd, float,  BT * QKH,            2) /* (B,T,NH+NKV) [qk_norm] */                   \
    X(atty,     floatX, BT * ATT,            2) /* (B,T,ATT) attention output, heads concatenated */ \
    X(lse,      float,  BT * NH,             2) /* (B,NH,T) log-sum-exp of each score row */   \
    X(xmid,     floatX, BT * C,              2) /* (B,T,C)  x + attention projection */       \
    X(ln2,      floatX, BT * C,              1) /* (B,T,C) */                                  \
    X(ln2_mean, float,  BT * MEAN,           1) /* (B,T) */                                    \
    X(ln2_rstd, float,  BT,                  1) /* (B,T) */                                    \
    X(fch,      floatX, BT * FC,             2) /* (B,T,FC) MLP pre-activation */              \
    X(fch_gelu, floatX, BT * F,              0) /* (B,T,F) gelu(fch) / swiglu(fch) */

// X(name, type, elements): one copy whatever the mode.
#define SHARED_ACTS(X)                                                                 \
    X(proj,     floatX, BT * C)     /* (B,T,C)  attproj / fcproj output, read by the next residual add */ \
    X(xL,       floatX, BT * C)     /* (B,T,C)  final residual stream */                   \
    X(lnf,      floatX, BT * C)     /* (B,T,C)  final layernorm output */                  \
    X(lnf_mean, float,  BT * MEAN)  /* (B,T) */                                            \
    X(lnf_rstd, float,  BT)         /* (B,T) */                                            \
    X(losses,   float,  BT)         /* (B,T)    per-token loss */                          \
    X(inputs,   int,    BT)         /* (B,T)    token ids */                               \
    X(targets,  int,    BT)         /* (B,T)    next-token ids */                          \
    X(segs,     int,    BT)         /* (B,T)    [-doc-attention 1] the uploaded segment table (seg points here, or is NULL) */ \
    X(dres,     floatX, BT * C)     /* (B,T,C)  gradient of the residual stream */         \
    X(dln,      floatX, BT * C)     /* (B,T,C)  gradient of a layernorm output */          \
    X(datty,    floatX, BT * ATT)   /* (B,T,ATT) */                                        \
    X(dqkv,     floatX, BT * QKV)   /* (B,T,QKV) */                                        \
    X(dfch,     floatX, BT * FC)    /* (B,T,FC) */                                         \
    X(dswiglu,  floatX, BT * DSW)   /* (B,T,F)  [Llama] gradient of the SwiGLU output */   \
    X(rope,     float,  ROPE)       /* (2,T,HD/2) [Llama] RoPE's cos ; sin (rope_table), FP32 */

// The sizes the two tables above name, from the config (every one used by each table).
#define ACTS_SIZES(c, B, T)                                                                              \
    ModelDims dims_ = model_dims(c);                                                                     \
    int64_t BT = (int64_t)(B) * (T), C = (c)->C, NH = (c)->NH, L = (c)->L;                               \
    int64_t QKV = dims_.QKV, ATT = dims_.ATT, FC = dims_.FC, F = dims_.F, MEAN = (c)->family == FAMILY_GPT2; \
    int64_t DSW = (c)->family == FAMILY_LLAMA ? F : 0, ROPE = (c)->family == FAMILY_LLAMA ? (int64_t)(T) * dims_.HD : 0;  \
    int64_t QKH = (c)->qk_norm ? NH + dims_.NKV : 0, QKN = QKH * dims_.HD

typedef struct {
#define X(name, type, elems, keep) type* name; int64_t name##_n; int name##_per_layer;
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) type* name; int64_t name##_n;
    SHARED_ACTS(X)
#undef X
    int* seg;        // (B,T) segment table: seg[b*T + t] = the index in row b of the first token of t's
                     // example (positions t - seg, keys seg..t); NULL = one example per row (causal, 0..T-1)
    floatX* logits;  // (logits_rows, Vp) one chunk of logits, then their gradient in place (TAG_LOGITS)
    int chunk;       // rows per classifier chunk (classifier_chunk_rows: from Vp alone)
    int logits_rows; // min(B * T, chunk): the rows the logits buffer holds
    int logits_row0; // the (b*T + t) row of the buffer's first row after the last classifier (op_classifier)
    float dloss;     // gpt_forward's loss pre-scale, for the classifier gpt_backward runs (0: none)
    size_t bytes, logits_bytes; // TAG_ACTS and TAG_LOGITS totals
} Acts;

typedef struct {
#define X(name, type, elems, keep) type* name;
    LAYER_ACTS(X)
#undef X
} LayerActs;

// Bytes of activations (TAG_ACTS) and logits (TAG_LOGITS: one classifier chunk, at most B*T rows)
// for a micro-batch: the closed form the allocator uses and the planner prints.
static void acts_bytes(const GPTConfig* c, int B, int T, int recompute, size_t* acts, size_t* logits) {
    ACTS_SIZES(c, B, T);
    size_t total = 0;
#define X(name, type, elems, keep) total += sizeof(type) * (size_t)(elems) * (recompute <= keep ? L : 1);
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) total += sizeof(type) * (size_t)(elems);
    SHARED_ACTS(X)
#undef X
    *acts = total;
    *logits = sizeof(floatX) * (size_t)classifier_buffer_rows((int)BT, c->Vp) * c->Vp;
}

static void acts_alloc(Acts* a, const GPTConfig* c, int B, int T, int recompute) {
    ACTS_SIZES(c, B, T);
    memset(a, 0, sizeof(*a));
#define X(name, type, elems, keep)                                                   \
    a->name##_n = (elems);                                                           \
    a->name##_per_layer = recompute <= keep;                                         \
    a->name = (type*)dev_alloc(TAG_ACTS, sizeof(type) * a->name##_n * (a->name##_per_layer ? L : 1));
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) a->name##_n = (elems); a->name = (type*)dev_alloc(TAG_ACTS, sizeof(type) * a->name##_n);
    SHARED_ACTS(X)
#undef X
    acts_bytes(c, B, T, recompute, &a->bytes, &a->logits_bytes);
    a->chunk = classifier_chunk_rows(c->Vp);
    a->logits_rows = classifier_buffer_rows((int)BT, c->Vp);
    a->logits = (floatX*)dev_alloc(TAG_LOGITS, a->logits_bytes);
}

static void acts_free(Acts* a, int L) {
#define X(name, type, elems, keep) dev_free(TAG_ACTS, a->name, sizeof(type) * a->name##_n * (a->name##_per_layer ? L : 1));
    LAYER_ACTS(X)
#undef X
#define X(name, type, elems) dev_free(TAG_ACTS, a->name, sizeof(type) * a->name##_n);
    SHARED_ACTS(X)
#undef X
    dev_free(TAG_LOGITS, a->logits, a->logits_bytes);
    memset(a, 0, sizeof(*a));
}

static LayerActs layer_acts(const Acts* a, int l) {
    LayerActs v;
#define X(name, type, elems, keep) v.name = a->name + (a->name##_per_layer ? l * a->name##_n : 0);
    LAYER_ACTS(X)
#undef X
    return v;
}

// The ops' fixed workspace in floats: cuBLASLt's 32 MiB, the GEMM's packed panel (at least K*NR for
// the largest K), attention backward's row sums (and the parts of a split dK/dV), the embedding
// backward's buckets and pieces, the norm's chunk sums. Then STEP_SCALARS_FLOATS at its end that are
// not scratch: the step's scalars (StepScalars: loss, sum of squares, norm, clip scale, finite flag),
// which live across steps.
#define STEP_SCALARS_FLOATS 64 // 256 bytes: StepScalars, then the AdamW maxima (AdamWMax: zero.h's adam_max)
static_assert(sizeof(StepScalars) + sizeof(AdamWMax) <= STEP_SCALARS_FLOATS * sizeof(float), "the step's scalars outgrew their room");
static size_t ops_workspace_floats(const GPTConfig* c, int B, int T, int64_t opt_elems) {
    int64_t BT = (int64_t)B * T;
    ModelDims dm = model_dims(c); // the largest K of any matmul, forward (C, ATT, F) or backward (QKV, FC, C, Vp)
    int64_t maxK = c->C;
    int64_t ks[] = {dm.QKV, dm.ATT, dm.FC, dm.F};
    for (int i = 0; i < 4; i++) if (ks[i] > maxK) maxK = ks[i];
    if (c->Vp > maxK) maxK = c->Vp;
    if (BT > maxK) maxK = BT;
    size_t ws = GEMM_PANEL_FLOATS;
    if (MATMUL_WORKSPACE_BYTES / sizeof(float) > ws) ws = MATMUL_WORKSPACE_BYTES / sizeof(float);
    if ((size_t)maxK * GEMM_NR > ws) ws = (size_t)maxK * GEMM_NR;
    size_t att = attention_workspace_floats(B, T, c->NH, dm.NKV, dm.HD); // D (B, NH, T), dK/dV's parts where split
    size_t enc = encoder_workspace_ints(B, T, c->C, c->V);
    size_t norm = 2 * ((size_t)ceil_div(opt_elems, NORM_CHUNK) + (size_t)MAX_BLOCK_TENSORS * (c->L + 1)); // a partial chunk per segment
    if (att > ws) ws = att;
    if (enc > ws) ws = enc;
    if (norm > ws) ws = norm;
    if (g_attn_cudnn) { // [-attn cudnn]
        size_t cw = ceil_div((int64_t)attention_cudnn_workspace_bytes(B, T, c->NH, dm.NKV, dm.HD), sizeof(float));
        if (cw > ws) ws = cw;
    }
    return round_up((int64_t)ws, STEP_SCALARS_FLOATS) + STEP_SCALARS_FLOATS; // + the step's scalars (train_step)
}

#endif // ZT_ACTS_H
