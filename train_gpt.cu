// train_gpt.cu — zerotrain: train GPT-2 or a Llama-family model with BF16 mixed precision, activation recompute and
// ZeRO-1/2/3 sharding, on a GPU (-device cuda) or on the CPU reference device (-device cpu),
// over N processes (mpirun), configured entirely by flags.
//
//     make train && ./train                           # a small GPT on the built-in KJV corpus
//     mpirun -np 4 ./train -device cpu -z 3           # ZeRO-3 over 4 processes
//
// This file is the training story; read it top to bottom, in the order a run and a step happen:
//   1. the model        the views of a block, initialisation (the tensor table: model.h)
//   2. forward/backward the layer loop, calling the ZeRO hooks (zero.h) around every block
//                       (what forward keeps for backward, by recompute mode: acts.h)
//   3. the step         micro-steps, gradient norm, clipping, AdamW, learning-rate schedule
//   4. checkpoints      saving and resuming the trainer (the files and the protocol: checkpoint.h)
//   5. eval & sampling
//   6. setup, the loop & main: trainer_setup, train_loop, train_main
// Every other subject is a header below it with a one-way interface (it takes narrow arguments,
// never the Trainer or Model defined here): the flags (flags.h), start-up (startup.h), the
// planner (plan.h), -tune (tune.h). The ops (ops/*.cuh) and AdamW (adamw.cuh) each hold a CPU loop
// and a CUDA kernel behind one dispatcher; zero.h holds everything about sharding and communication.
//
// Limits (see also README.md): the CUDA device (kernels, cuBLASLt, NCCL backend) is written and
// compiles with warnings as errors, but has never run on a GPU; dev/gpu_check.sh is the first thing
// to run on one. The CPU device is tested end to end.
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <dirent.h>
#include <signal.h>
#include "device.cuh"          // defines: floatX, ld, rn, dev_alloc, TAG_*, die, g_device, g_work
#include "ops/encoder.cuh"     // defines: op_encoder_forward, op_encoder_backward
#include "ops/layernorm.cuh"   // defines: op_residual_layernorm_forward, op_layernorm_backward
#include "ops/matmul.cuh"      // defines: op_matmul_forward, op_matmul_backward, op_gelu_forward
#include "ops/attention.cuh"   // defines: op_attention_forward, op_attention_backward
#include "ops/rmsnorm.cuh"     // defines: op_residual_rmsnorm_forward, op_rmsnorm_backward
#include "ops/rope.cuh"        // defines: RopeParams, rope_table, op_rope_forward, op_rope_backward
#include "ops/swiglu.cuh"      // defines: op_swiglu_forward, op_swiglu_backward
#include "ops/classifier.cuh"  // defines: op_classifier (the chunked LM head, loss and its backward)
#include "lora.h"              // defines: Lora, LoraView, proj_forward, proj_backward, lora_config, lora_fill ([LoRA] adapters),
                               //          lora_base_alloc, lora_base_set_map, lora_base_dequant, Nf4Source, LoraEncoder, lora_base_encode ([QLoRA] a 4-bit base)
#include "adamw.cuh"           // defines: AdamWParams, op_adamw, op_sumsq_many
#include "zero.h"              // defines: BlockLayout, Zero, Comm, the zero_* hooks, comm_*
#include "offload.h"           // defines: offload_init, offload_adamw (-offload cpu: master, m, v on the host)
#include "dataloader.h"        // defines: DataLoader, dataloader_init, dataloader_load
#include "tokenizer.h"         // defines: Tokenizer, tokenizer_init, tokenizer_print
#include "model.h"             // defines: GPTConfig, GPT2_TENSORS, ModelDesc, model_describe, model_layout
#include "checkpoint.h"        // defines: ckpt_save, ckpt_resume, write_model_file, ModelFile, state_pieces, fault_at
#include "hf.h"                // defines: HFCheckpoint, hf_open, hf_bind, hf_fill, hf_nf4_part, HFWriter (Hugging Face checkpoints in/out)
#include "prompts.h"           // defines: tokenize_prompts_to_shards (prompt/completion JSONL -> shards + loss masks)
#include "flags.h"             // defines: FLAG_TABLE, Flags, flags_parse, flags_hash, FLAG_SHOW, parse_float
#include "acts.h"              // defines: LAYER_ACTS, Acts, LayerActs, acts_alloc, acts_free, layer_acts, ops_workspace_floats
#include "plan.h"              // defines: PlanRow, plan_config, run_plan, choose_config, mfu_flops_per_token, fmt_bytes, parse_size
#include "startup.h"           // defines: resolve_defaults, pick_device, model_config, check_flags, setup_threads, ranks_agree,
                               //          print_setup, run_tokenize, gather_memory, peak_rss_bytes, peak_window_start, json_num,
                               //          check_output_paths, output_dir_ready
#include "tune.h"              // defines: TuneTrainer, tune_mark_auto, tune_config, tune_note_record (-tune)
#include "run_record.h"        // defines: flags_take_recorded, run_record_build, run_record_check (what a checkpoint records of its run)

// ----------------------------------------------------------------------------
// 1. The model. GPT-2 (Radford et al. 2019): token + position embedding, L pre-norm blocks of
// causal self-attention and a GELU MLP, a final layernorm, and the LM head tied to the token
// embedding. The vocabulary is padded to a multiple of 128 (Vp) for aligned matmuls; the padded
// rows of wte are zero and never enter the softmax. The Llama family (Llama 3, Qwen2, Mistral,
// SmolLM2: RMSNorm, RoPE, grouped-query attention, SwiGLU, its own LM head) sits beside it: its
// table is LLAMA_TENSORS, its layer code the llama_* functions of section 2 (docs/models.md).
//
// The tensors are described once, in GPT2_TENSORS, in llm.c's file order. Everything else is
// derived from it: the block layout (zero.h), the logical offsets used by model files and
// checkpoints, which tensors decay, how each is initialised, the printed layout. The table, the
// config and the layout live in model.h (checkpoint.h reads them too), the llm.c descriptors
// (-e dN) in startup.h; the views and initialisation are here.

// Views of one block: pointers to each of its tensors (the other entries stay NULL).
typedef struct { floatX* t[NUM_TENSORS]; } ParamView;
typedef struct Model Model;
typedef struct { float* t[NUM_TENSORS]; } GradView;

static ParamView param_view(const ModelDesc* d, floatX* block, int io) {
    ParamView v;
    for (int k = 0; k < NUM_TENSORS; k++) v.t[k] = d->t[k].io == io && d->t[k].n ? block + d->t[k].off : NULL;
    return v;
}
static ParamView layer_view(Model* m, floatX* block); // (after Model: [QLoRA] a 4-bit base dequantized first)
// [LoRA] A frozen block has no gradient (block NULL): its matrices' gradients are NULL (the matmuls
// skip them), its 1-D tensors' (the norms' fused column sums) go to a discard buffer, never read.
static GradView grad_view(const ModelDesc* d, float* block, int io, float* discard) {
    GradView v;
    for (int k = 0; k < NUM_TENSORS; k++)
        v.t[k] = d->t[k].io != io || !d->t[k].n ? NULL : block ? block + d->t[k].off : d->t[k].decay ? NULL : discard;
    return v;
}

// Initialisation, GPT-2's scheme from a counter-based RNG keyed by each element's logical index:
// the same model for every R and stage, and each rank fills only its own shard. Each element is a
// pure function of (seed, tensor, index), so the OpenMP threads split the elements and the bits do
// not depend on the thread count (~60 ns per element on one core: d48's 1.56 G would take ~95 s).
typedef struct { const ModelDesc* d; uint64_t seed; } InitCtx;

static void init_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const InitCtx* ic = (const InitCtx*)ctx;
    const ModelDesc* d = ic->d;
    const GPTConfig* c = &d->cfg;
    for (int64_t i = 0; i < len;) {
        int64_t li = logical + i;
        int k = NUM_TENSORS - 1; // the tensor holding li (tensors are in logical order)
        while (d->t[k].logical > li) k--;
        const TensorInfo* t = &d->t[k];
        int64_t end = t->logical + t->n * (t->io ? 1 : c->L); // run to the end of this tensor
        int64_t run = end - li < len - i ? end - li : len - i;
        uint64_t key = rng_key(ic->seed, 0x494E4954ull /* "INIT" */, (uint64_t)k);
        float std = t->init == INIT_RESID ? 0.02f / sqrtf(2.0f * c->L) : 0.02f;
#pragma omp parallel for schedule(static) if (run >= 32768) // small runs: not worth waking threads
        for (int64_t j = 0; j < run; j++) {
            int64_t e = li + j - t->logical; // element index within the tensor (all layers)
            float v;
            switch (t->init) {
            case INIT_ONE: v = 1.0f; break;
            case INIT_ZERO: v = 0.0f; break;
            default:
                v = (float)(std * rng_normal(key, (uint64_t)e));
                if (tensor_has_vocab_rows(k) && e / c->C >= c->V) v = 0.0f; // padded vocabulary rows
            }
            dst[i + j] = v;
        }
        i += run;
    }
}

// ----------------------------------------------------------------------------
// 2. Forward and backward. The layer loop never tests the ZeRO stage: it asks the hooks for each
// block's parameters and gradient buffer, and tells them when a block is done.

typedef struct FamilyOps FamilyOps;

typedef struct Model {
    ModelDesc d;
    GPTConfig cfg;
    const FamilyOps* ops; // the family's layer code (family_ops)
    int B, T;          // allocated micro-batch shape (a forward may use a smaller one)
    int recompute;
    Zero z;
    Acts a;
    float* rope_host;  // [Llama] RoPE's table on the host (2 x T x HD/2), uploaded to a.rope for rope_T positions
    int rope_T;
    Lora lora;         // [LoRA] the adapters' activations (their tensors: d.lora, the adapter block)
    floatX* ad_p;      // [LoRA] the adapter block's parameters and gradients for this micro-step (the hooks'), NULL: none
    float* ad_g;
} Model;

// A layer's parameters: where the hooks hold them; [QLoRA] a 4-bit base's matrices dequantized into
// the model's one BF16 layer buffer first (before the forward and again before the backward: lora.h).
static ParamView layer_view(Model* m, floatX* block) {
    ParamView v = param_view(&m->d, block, 0);
    lora_base_dequant(&m->lora, &m->d, v.t);
    return v;
}

// A family's code: the embedding, one layer and the head, forward and backward. The loop below
// (gpt_forward, gpt_backward) calls these and the ZeRO hooks around them; it never asks which
// family it runs. Both families' functions follow, side by side.
struct FamilyOps {
    const char* name;
    // x[0] (B,T,C) of A->inputs, from the io block's parameters
    void (*embed_forward)(Model* m, const ParamView* io, int B, int T);
    // one layer: inp1 (+ inp2 when not NULL) is the residual stream entering layer l
    void (*layer_forward)(Model* m, int l, const ParamView* p, const floatX* inp1, const floatX* inp2, int B, int T);
    // final norm of (last xmid + its MLP output) into A->lnf; with dloss == 0 the classifier
    // (op_classifier: losses with targets, else the last rows' logits); with dloss != 0 (training)
    // nothing more: the classifier runs whole in head_backward (A->dloss is kept for it)
    void (*head_forward)(Model* m, const ParamView* io, int B, int T, int with_targets, float dloss);
    // the classifier from A->lnf (op_classifier: logits, losses, dlogits, then dln and the head
    // weight's gradient, chunk by chunk), then the final norm's backward: A->dres = d(xL); the
    // head's and final norm's gradients into g
    void (*head_backward)(Model* m, const ParamView* io, const GradView* g, int B, int T);
    // on entry A->dres = d(layer output); on exit d(layer input); gradients added into g
    void (*layer_backward)(Model* m, int l, const ParamView* p, const GradView* g, int B, int T);
    // the embedding's gradients from A->dres (needs no parameter values)
    void (*embed_backward)(Model* m, const GradView* g, int B, int T);
};

// --- GPT-2 ---

// x[0] (B,T,C) = wte[inputs] + wpe[0..T)
static void gpt2_embed_forward(Model* m, const ParamView* io, int B, int T) {
    op_encoder_forward(layer_acts(&m->a, 0).x, m->a.inputs, m->a.seg, io->t[T_wte], io->t[T_wpe], B, T, m->cfg.C);
}

// One transformer block, forward. inp1 (+ inp2 when not NULL) is the residual stream entering the
// layer: the previous layer's xmid + its MLP output, added here so that the add and layernorm 1
// are one op. With inp2 == NULL, inp1 *is* the layer input a.x (layer 0, or a recompute).
static void gpt2_layer_forward(Model* m, int l, const ParamView* p, const floatX* inp1, const floatX* inp2, int B, int T) {
    int C = m->cfg.C, NH = m->cfg.NH, BT = B * T;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    // (x, ln1) = residual + layernorm(inp1, inp2)
    op_residual_layernorm_forward(inp2 ? a.x : NULL, a.ln1, a.ln1_mean, a.ln1_rstd, inp1, inp2,
                                  p->t[T_ln1w], p->t[T_ln1b], BT, C);
    // qkv (B,T,3C) = ln1 @ qkvw^T + qkvb
    LoraView lv = lora_view(&m->lora, m->ad_p, m->ad_g, l); // [LoRA] the projections' adapters (none: plain matmuls)
    proj_forward(&lv, PROJ_QKV, a.qkv, NULL, a.ln1, p->t[T_qkvw], p->t[T_qkvb], BT, C, 3 * C);
    // atty (B,T,C), lse (B,NH,T) = causal attention(qkv)
    op_attention_forward(a.atty, a.lse, a.qkv, A->seg, B, T, NH, NH, C / NH);
    // proj (B,T,C) = atty @ attprojw^T + attprojb
    proj_forward(&lv, PROJ_ATTO, A->proj, NULL, a.atty, p->t[T_attprojw], p->t[T_attprojb], BT, C, C);
    // (xmid, ln2) = residual + layernorm(x, proj)
    op_residual_layernorm_forward(a.xmid, a.ln2, a.ln2_mean, a.ln2_rstd, a.x, A->proj, p->t[T_ln2w],
                                  p->t[T_ln2b], BT, C);
    // fch (B,T,4C) = ln2 @ fcw^T + fcb;  fch_gelu = gelu(fch)
    proj_forward(&lv, PROJ_UP, a.fch_gelu, a.fch, a.ln2, p->t[T_fcw], p->t[T_fcb], BT, C, 4 * C);
    // proj (B,T,C) = fch_gelu @ fcprojw^T + fcprojb   (added to xmid by the next layer's first op)
    proj_forward(&lv, PROJ_DOWN, A->proj, NULL, a.fch_gelu, p->t[T_fcprojw], p->t[T_fcprojb], BT, 4 * C, C);
}

// (xL, lnf) = residual + layernorm(xmid of the last layer, its MLP output); evaluation and sampling:
// logits (B,T,Vp) = lnf @ wte^T and the losses, chunk by chunk (training: in gpt2_head_backward)
static void gpt2_head_forward(Model* m, const ParamView* io, int B, int T, int with_targets, float dloss) {
    const GPTConfig* c = &m->cfg;
    Acts* A = &m->a;
    int BT = B * T;
    op_residual_layernorm_forward(A->xL, A->lnf, A->lnf_mean, A->lnf_rstd, layer_acts(A, c->L - 1).xmid,
                                  A->proj, io->t[T_lnfw], io->t[T_lnfb], BT, c->C);
    A->dloss = dloss;
    if (dloss == 0.0f)
        A->logits_row0 = op_classifier(A->logits, A->losses, NULL, NULL, A->lnf, io->t[T_wte], with_targets ? A->targets : NULL,
                                       0.0f, BT, c->C, c->V, c->Vp, A->chunk);
}

static void gpt2_head_backward(Model* m, const ParamView* io, const GradView* g, int B, int T) {
    const GPTConfig* c = &m->cfg;
    Acts* A = &m->a;
    int BT = B * T, C = c->C;
    // logits = lnf @ wte^T, losses, dlogits; dln = dlogits @ wte, dwte += dlogits^T @ lnf: chunk by chunk
    A->logits_row0 = op_classifier(A->logits, A->losses, A->dln, g->t[T_wte], A->lnf, io->t[T_wte], A->targets, A->dloss,
                                   BT, C, c->V, c->Vp, A->chunk);
    // lnf = layernorm(xL): dres = d(xL)
    op_layernorm_backward(A->dres, g->t[T_lnfw], g->t[T_lnfb], A->dln, A->xL, io->t[T_lnfw], A->lnf_mean,
                          A->lnf_rstd, BT, C);
}

// One transformer block, backward. On entry A->dres holds d(layer output) = d(xmid + proj);
// on exit it holds d(layer input x). Weight gradients are added (+=) into g.
static void gpt2_layer_backward(Model* m, int l, const ParamView* p, const GradView* g, int B, int T) {
    int C = m->cfg.C, NH = m->cfg.NH, BT = B * T, r = m->recompute;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    LoraView lv = lora_view(&m->lora, m->ad_p, m->ad_g, l); // [LoRA]
    if (r == 3) gpt2_layer_forward(m, l, p, a.x, NULL, B, T);                     // [-r 3] the whole layer
    if (r == 1 || r == 2) op_gelu_forward(a.fch_gelu, a.fch, (int64_t)BT * 4 * C); // [-r 1,2] GELU
    // proj = fch_gelu @ fcprojw^T + fcprojb, with fch_gelu = gelu(fch): dfch = (dres @ fcprojw) * gelu'(fch)
    proj_backward(&lv, PROJ_DOWN, A->dfch, g->t[T_fcprojw], g->t[T_fcprojb], A->dres, a.fch_gelu, p->t[T_fcprojw],
                  a.fch, BT, 4 * C, C);
    if (r == 2) op_residual_layernorm_forward(NULL, a.ln2, a.ln2_mean, a.ln2_rstd, a.xmid, NULL,
                                              p->t[T_ln2w], p->t[T_ln2b], BT, C); // [-r 2] layernorm 2
    // fch = ln2 @ fcw^T + fcb
    proj_backward(&lv, PROJ_UP, A->dln, g->t[T_fcw], g->t[T_fcb], A->dfch, a.ln2, p->t[T_fcw], NULL, BT, C, 4 * C);
    // ln2 = layernorm(xmid): dres += d through the normalisation (dres is now d(xmid))
    op_layernorm_backward(A->dres, g->t[T_ln2w], g->t[T_ln2b], A->dln, a.xmid, p->t[T_ln2w], a.ln2_mean,
                          a.ln2_rstd, BT, C);
    // proj = atty @ attprojw^T + attprojb
    proj_backward(&lv, PROJ_ATTO, A->datty, g->t[T_attprojw], g->t[T_attprojb], A->dres, a.atty, p->t[T_attprojw],
                  NULL, BT, C, C);
    // atty = attention(qkv)
    op_attention_backward(A->dqkv, A->datty, a.qkv, a.atty, a.lse, A->seg, B, T, NH, NH, C / NH);
    if (r == 2) op_residual_layernorm_forward(NULL, a.ln1, a.ln1_mean, a.ln1_rstd, a.x, NULL,
                                              p->t[T_ln1w], p->t[T_ln1b], BT, C); // [-r 2] layernorm 1
    // qkv = ln1 @ qkvw^T + qkvb
    proj_backward(&lv, PROJ_QKV, A->dln, g->t[T_qkvw], g->t[T_qkvb], A->dqkv, a.ln1, p->t[T_qkvw], NULL, BT, C, 3 * C);
    // ln1 = layernorm(x): dres += d through the normalisation (dres is now d(x))
    op_layernorm_backward(A->dres, g->t[T_ln1w], g->t[T_ln1b], A->dln, a.x, p->t[T_ln1w], a.ln1_mean,
                          a.ln1_rstd, BT, C);
}

// x[0] = wte[inputs] + wpe: scatter-add dres into dwte, dwpe
static void gpt2_embed_backward(Model* m, const GradView* g, int B, int T) {
    op_encoder_backward(g->t[T_wte], g->t[T_wpe], m->a.dres, m->a.inputs, m->a.seg, B, T, m->cfg.C, m->cfg.V);
}

static const FamilyOps GPT2_OPS = {"gpt2", gpt2_embed_forward, gpt2_layer_forward, gpt2_head_forward,
                                   gpt2_head_backward, gpt2_layer_backward, gpt2_embed_backward};

// --- Llama (Llama 3, Qwen2, Qwen3, Mistral, SmolLM2): RMSNorm, RoPE on q and k, grouped-query attention,
// a SwiGLU MLP, no positional embedding, an LM head of its own unless tied to the embedding. An
// absent bias is a NULL view (param_view), which the matmuls skip.

// RoPE's cos/sin table (FP32, transformers' float32 operations: ops/rope.cuh) for T positions in
// a.rope. Built when the model is built (its T); a forward of another T (sampling) rebuilds it there.
static void llama_rope_for(Model* m, int T) {
    if (m->rope_T == T) return;
    const GPTConfig* c = &m->cfg;
    RopeParams rp = {c->HD, c->rope_theta, c->rope_type, c->rope_factor, c->rope_low_freq, c->rope_high_freq, c->rope_orig_maxT};
    rope_table(m->rope_host, &rp, T);
    dev_from_host(m->a.rope, m->rope_host, sizeof(float) * (size_t)T * c->HD);
    m->rope_T = T;
}

// x[0] (B,T,C) = embed[inputs]   (positions enter through RoPE)
static void llama_embed_forward(Model* m, const ParamView* io, int B, int T) {
    llama_rope_for(m, T);
    op_encoder_forward(layer_acts(&m->a, 0).x, m->a.inputs, m->a.seg, io->t[T_embed], NULL, B, T, m->cfg.C);
}

// One decoder layer, forward (inp1, inp2 as GPT-2's).
static void llama_layer_forward(Model* m, int l, const ParamView* p, const floatX* inp1, const floatX* inp2, int B, int T) {
    const GPTConfig* c = &m->cfg;
    ModelDims d = model_dims(c);
    int C = c->C, NH = c->NH, BT = B * T;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    // (x, ln1) = residual + rmsnorm(inp1, inp2)
    op_residual_rmsnorm_forward(inp2 ? a.x : NULL, a.ln1, a.ln1_rstd, inp1, inp2, p->t[T_attnnorm], BT, C, c->norm_eps);
    // qkv (B,T,QKV) = ln1 @ wqkv^T (+ bqkv); [Qwen3] each q and k head RMSNormed (no qnorm: skipped);
    // q and k rotated in place (RoPE)
    LoraView lv = lora_view(&m->lora, m->ad_p, m->ad_g, l); // [LoRA] the projections' adapters (none: plain matmuls)
    proj_forward(&lv, PROJ_QKV, a.qkv, NULL, a.ln1, p->t[T_wqkv], p->t[T_bqkv], BT, C, (int)d.QKV);
    op_head_rmsnorm_forward(a.qkv, a.qkn, a.qkn_rstd, p->t[T_qnorm], p->t[T_knorm], BT, NH, d.NKV, d.HD, c->norm_eps);
    op_rope_forward(a.qkv, A->rope, A->seg, B, T, NH, d.NKV, d.HD);
    // atty (B,T,ATT), lse (B,NH,T) = causal grouped-query attention(qkv)
    op_attention_forward(a.atty, a.lse, a.qkv, A->seg, B, T, NH, d.NKV, d.HD);
    // proj (B,T,C) = atty @ wo^T
    proj_forward(&lv, PROJ_ATTO, A->proj, NULL, a.atty, p->t[T_wo], NULL, BT, (int)d.ATT, C);
    // (xmid, ln2) = residual + rmsnorm(x, proj)
    op_residual_rmsnorm_forward(a.xmid, a.ln2, a.ln2_rstd, a.x, A->proj, p->t[T_mlpnorm], BT, C, c->norm_eps);
    // fch (B,T,2F) = ln2 @ wgu^T (+ bgu): gate ; up;  fch_gelu (B,T,F) = silu(gate) * up
    proj_forward(&lv, PROJ_UP, a.fch, NULL, a.ln2, p->t[T_wgu], p->t[T_bgu], BT, C, (int)d.FC);
    op_swiglu_forward(a.fch_gelu, a.fch, BT, (int)d.F);
    // proj (B,T,C) = fch_gelu @ wdown^T (+ bdown)   (added to xmid by the next layer's first op)
    proj_forward(&lv, PROJ_DOWN, A->proj, NULL, a.fch_gelu, p->t[T_wdown], p->t[T_bdown], BT, (int)d.F, C);
}

// The LM head: its own tensor, or the embedding when tied.
static int llama_head_tensor(const ParamView* io) { return io->t[T_lmhead] ? T_lmhead : T_embed; }

// (xL, lnf) = residual + rmsnorm(xmid of the last layer, its MLP output); evaluation and sampling:
// logits (B,T,Vp) = lnf @ lmhead^T and the losses, chunk by chunk (training: in llama_head_backward)
static void llama_head_forward(Model* m, const ParamView* io, int B, int T, int with_targets, float dloss) {
    const GPTConfig* c = &m->cfg;
    Acts* A = &m->a;
    int BT = B * T;
    op_residual_rmsnorm_forward(A->xL, A->lnf, A->lnf_rstd, layer_acts(A, c->L - 1).xmid, A->proj, io->t[T_normf], BT, c->C, c->norm_eps);
    A->dloss = dloss;
    if (dloss == 0.0f)
        A->logits_row0 = op_classifier(A->logits, A->losses, NULL, NULL, A->lnf, io->t[llama_head_tensor(io)],
                                       with_targets ? A->targets : NULL, 0.0f, BT, c->C, c->V, c->Vp, A->chunk);
}

static void llama_head_backward(Model* m, const ParamView* io, const GradView* g, int B, int T) {
    const GPTConfig* c = &m->cfg;
    Acts* A = &m->a;
    int BT = B * T, C = c->C, k = llama_head_tensor(io);
    // logits = lnf @ lmhead^T, losses, dlogits; dln = dlogits @ lmhead, dlmhead += dlogits^T @ lnf: chunk by chunk
    A->logits_row0 = op_classifier(A->logits, A->losses, A->dln, g->t[k], A->lnf, io->t[k], A->targets, A->dloss,
                                   BT, C, c->V, c->Vp, A->chunk);
    // lnf = rmsnorm(xL): dres = d(xL)
    op_rmsnorm_backward(A->dres, g->t[T_normf], A->dln, A->xL, io->t[T_normf], A->lnf_rstd, BT, C);
}

// One decoder layer, backward (A->dres as GPT-2's). Recompute: -r 1 SwiGLU, -r 2 also both
// RMSNorms, -r 3 the whole layer (RoPE included) from its input x.
static void llama_layer_backward(Model* m, int l, const ParamView* p, const GradView* g, int B, int T) {
    const GPTConfig* c = &m->cfg;
    ModelDims d = model_dims(c);
    int C = c->C, NH = c->NH, BT = B * T, r = m->recompute;
    Acts* A = &m->a;
    LayerActs a = layer_acts(A, l);
    LoraView lv = lora_view(&m->lora, m->ad_p, m->ad_g, l); // [LoRA]
    if (r == 3) llama_layer_forward(m, l, p, a.x, NULL, B, T);                    // [-r 3] the whole layer
    if (r == 1 || r == 2) op_swiglu_forward(a.fch_gelu, a.fch, BT, (int)d.F);     // [-r 1,2] SwiGLU
    // proj = fch_gelu @ wdown^T (+ bdown)
    proj_backward(&lv, PROJ_DOWN, A->dswiglu, g->t[T_wdown], g->t[T_bdown], A->dres, a.fch_gelu, p->t[T_wdown], NULL, BT, (int)d.F, C);
    // fch_gelu = silu(gate) * up
    op_swiglu_backward(A->dfch, A->dswiglu, a.fch, BT, (int)d.F);
    if (r == 2) op_residual_rmsnorm_forward(NULL, a.ln2, a.ln2_rstd, a.xmid, NULL, p->t[T_mlpnorm], BT, C, c->norm_eps); // [-r 2] RMSNorm 2
    // fch = ln2 @ wgu^T (+ bgu)
    proj_backward(&lv, PROJ_UP, A->dln, g->t[T_wgu], g->t[T_bgu], A->dfch, a.ln2, p->t[T_wgu], NULL, BT, C, (int)d.FC);
    // ln2 = rmsnorm(xmid): dres += d through the normalisation (dres is now d(xmid))
    op_rmsnorm_backward(A->dres, g->t[T_mlpnorm], A->dln, a.xmid, p->t[T_mlpnorm], a.ln2_rstd, BT, C);
    // proj = atty @ wo^T
    proj_backward(&lv, PROJ_ATTO, A->datty, g->t[T_wo], NULL, A->dres, a.atty, p->t[T_wo], NULL, BT, (int)d.ATT, C);
    // atty = attention(qkv after RoPE); then RoPE's transpose on dq, dk; [Qwen3] the heads' RMSNorm
    op_attention_backward(A->dqkv, A->datty, a.qkv, a.atty, a.lse, A->seg, B, T, NH, d.NKV, d.HD);
    op_rope_backward(A->dqkv, A->rope, A->seg, B, T, NH, d.NKV, d.HD);
    op_head_rmsnorm_backward(A->dqkv, g->t[T_qnorm], g->t[T_knorm], a.qkn, p->t[T_qnorm], p->t[T_knorm], a.qkn_rstd, BT, NH, d.NKV, d.HD);
    if (r == 2) op_residual_rmsnorm_forward(NULL, a.ln1, a.ln1_rstd, a.x, NULL, p->t[T_attnnorm], BT, C, c->norm_eps); // [-r 2] RMSNorm 1
    // qkv = ln1 @ wqkv^T (+ bqkv)
    proj_backward(&lv, PROJ_QKV, A->dln, g->t[T_wqkv], g->t[T_bqkv], A->dqkv, a.ln1, p->t[T_wqkv], NULL, BT, C, (int)d.QKV);
    // ln1 = rmsnorm(x): dres += d through the normalisation (dres is now d(x))
    op_rmsnorm_backward(A->dres, g->t[T_attnnorm], A->dln, a.x, p->t[T_attnnorm], a.ln1_rstd, BT, C);
}

// x[0] = embed[inputs]: scatter-add dres into dembed
static void llama_embed_backward(Model* m, const GradView* g, int B, int T) {
    op_encoder_backward(g->t[T_embed], NULL, m->a.dres, m->a.inputs, m->a.seg, B, T, m->cfg.C, m->cfg.V);
}

static const FamilyOps LLAMA_OPS = {"llama", llama_embed_forward, llama_layer_forward, llama_head_forward,
                                    llama_head_backward, llama_layer_backward, llama_embed_backward};

// The family's code, chosen once when the model is built.
static const FamilyOps* family_ops(const GPTConfig* c) { return c->family == FAMILY_LLAMA ? &LLAMA_OPS : &GPT2_OPS; }

// Every parameter from a logical source (a model file, Hugging Face files or init_fill): the master
// weights and the parameters rounded from them; [LoRA] the frozen base's parameters straight from
// the source (no master) and the adapters from lora_fill (the base's logical range comes first).
typedef struct { LogicalFill fill; void* ctx; const Model* m; const LoraPeft* peft; } ModelFill;

static void model_fill(void* ctx, float* dst, int64_t logical, int64_t len) {
    const ModelFill* mf = (const ModelFill*)ctx;
    const ModelDesc* d = &mf->m->d;
    int64_t base = logical < d->num_params ? (d->num_params - logical < len ? d->num_params - logical : len) : 0;
    if (base) mf->fill(mf->ctx, dst, logical, base);
    if (len > base && mf->peft) lora_peft_fill(mf->peft, dst + base, logical + base, len - base); // [LoRA] -lora-init
    else if (len > base) lora_fill(&d->lora, d->cfg.L, mf->m->lora.seed, dst + base, logical + base, len - base);
}

// peft_dir: [LoRA] -lora-init's adapter ("" or NULL: PEFT's initialisation); model: -e (its name is
// checked). Returns the non-finite values this rank read into the frozen base (0 without LoRA: the
// master weights hold everything, checked by master_nonfinite_all).
// pre: [QLoRA] the 4-bit parts a checkpoint already holds (hf_nf4_source; NULL: none).
static int64_t model_load(Model* m, LogicalFill fill, void* ctx, Nf4Source pre, const char* peft_dir, const char* model) {
    LoraPeft lp;
    if (peft_dir && peft_dir[0]) lora_peft_open(&lp, peft_dir, &m->d.lora, &m->cfg, model);
    ModelFill mf = {fill, ctx, m, peft_dir && peft_dir[0] ? &lp : NULL};
    zero_fill_opt(&m->z, 0, model_fill, &mf); // (0: master)
    LoraEncoder enc; // [QLoRA] a 4-bit base's bytes: read as they are (pre), or quantized from the same source
    lora_encoder_init(&enc, fill, ctx, pre, ctx, &m->d);
    int64_t bad = zero_fill_frozen_params(&m->z, model_fill, &mf, lora_base_encode, &enc);
    lora_encoder_free(&enc);
    zero_params_from_master(&m->z);
    if (mf.peft) lora_peft_close(&lp);
    return bad;
}

// [QLoRA] Nf4Source over an open Hugging Face checkpoint (hf_nf4_part); its errors end the run (exit 2).
static int hf_nf4_source(void* ctx, const char* tensor, int layer, int part, unsigned char* st, int64_t n) {
    char err[1024];
    int rc = hf_nf4_part((const HFCheckpoint*)ctx, tensor, layer, part, st, n, err, sizeof(err));
    if (rc < 0) die_user("-e %s", err);
    return rc;
}

// Forward over a B x T micro-batch (B, T at most the allocated shape) whose tokens are already in
// A->inputs (and A->targets when with_targets). With targets and dloss == 0 (evaluation), per-token
// losses land in A->losses; without targets the logits of the last rows are in A->logits (from row
// A->logits_row0). With dloss != 0 (training) the forward ends at the final layernorm: the
// classifier (logits, losses, dlogits pre-scaled by dloss, and both of its gradients) runs chunk by
// chunk at the start of gpt_backward, where the io block's gradient buffer is handed out
// (docs/classifier.md). backward_follows tells ZeRO-3 to keep the last layer and the io block gathered.
static void gpt_forward(Model* m, int B, int T, int with_targets, float dloss, int backward_follows) {
    const GPTConfig* c = &m->cfg;
    const FamilyOps* ops = m->ops;
    Zero* z = &m->z;
    Acts* A = &m->a;
    ParamView io = param_view(&m->d, zero_before_embedding(z), 1);
    m->ad_p = zero_adapters(z); // [LoRA] (NULL: none)
    m->lora.training = dloss != 0.0f; // [LoRA] -lora-dropout in training forwards only (and their recompute)
    ops->embed_forward(m, &io, B, T);
    zero_after_embedding(z);
    for (int l = 0; l < c->L; l++) {
        ParamView p = layer_view(m, zero_before_block_forward(z, 1 + l));
        if (l == 0) ops->layer_forward(m, 0, &p, layer_acts(A, 0).x, NULL, B, T);
        else ops->layer_forward(m, l, &p, layer_acts(A, l - 1).xmid, A->proj, B, T);
        zero_after_block_forward(z, 1 + l, backward_follows);
    }
    io = param_view(&m->d, zero_before_head(z), 1);
    ops->head_forward(m, &io, B, T, with_targets, dloss); // final norm; evaluation, sampling: logits, losses (training: in gpt_backward)
    zero_after_head(z, backward_follows);
}

// Backward of the micro-batch gpt_forward just ran (with dloss != 0), the classifier first: its
// per-token losses land in A->losses here. Adds every parameter's gradient into the buffers the
// hooks hand out; the hooks reduce them (micro, last_micro say where in the accumulation we are).
static void gpt_backward(Model* m, int B, int T, int micro, int last_micro) {
    const GPTConfig* c = &m->cfg;
    const FamilyOps* ops = m->ops;
    Zero* z = &m->z;
    Acts* A = &m->a;
    dev_zero(A->dres, sizeof(floatX) * (size_t)B * T * c->C);
    float* io_grads;
    ParamView io = param_view(&m->d, zero_before_head_backward(z, &io_grads), 1);
    GradView gio = grad_view(&m->d, io_grads, 1, m->lora.discard);
    m->ad_p = zero_adapters(z); // [LoRA] the adapters' parameters and gradient buffer (NULL: none)
    m->ad_g = zero_adapter_grads(z);
    ops->head_backward(m, &io, &gio, B, T); // the classifier (losses, dlogits, its gradients), chunk by chunk; dres = d(xL)
    zero_after_head_backward(z);
    for (int l = c->L - 1; l >= 0; l--) {
        float* grads;
        ParamView p = layer_view(m, zero_before_block_backward(z, 1 + l, &grads));
        GradView g = grad_view(&m->d, grads, 0, m->lora.discard);
        ops->layer_backward(m, l, &p, &g, B, T);
        zero_after_block_backward(z, 1 + l, micro, last_micro);
    }
    ops->embed_backward(m, &gio, B, T); // (needs no parameter values)
    zero_after_embedding_backward(z, micro, last_micro);
    m->ad_p = NULL; m->ad_g = NULL;
}

// ----------------------------------------------------------------------------
// 3. The step: GA micro-steps of forward + backward (the hooks reduce gradients as blocks
// finish), then the global gradient norm, clipping, the overflow check (the update computed and
// not written), AdamW and whatever the stage must gather again. The loss gradient is pre-scaled by
// 1/(R*GA*B*T) so that every reduction is a SUM and the accumulated gradient is the mean over the
// global batch.

// What a step reports once its numbers are read back. skipped: the optimizer changed nothing
// (decided where the step ran).
typedef struct {
    int valid;         // 0: nothing to report (no step read back)
    int step;          // 0-based
    float loss, norm, lr;
    int skipped;       // 1: the norm was not finite; 2: no counted target in the batch (loss mask);
                       // 3: the update would not be finite (op_adamw_check): the weights are unchanged
    int64_t counted;   // [masked loss] targets that count in the step's global batch: the loss's divisor
    double ms;         // from the previous read-back (or the step's start) to this one
    int64_t count[COLL_KINDS], bytes[COLL_KINDS]; // the step's collectives
    double comm_wait_s;
} StepResult;

typedef struct {
    Flags f;
    Launch launch;
    Comm comm;
    Groups groups;     // hybrid sharding (-shard-group, -hpz): the world's groups (groups_flat: none)
    Model model;
    DataLoader train, val;
    int has_val;
    Tokenizer tok;
    int has_tok;
    int nprompts;      // -prompt: the prompts as token ids (prompts.h's prompt_encode)
    int** prompt_ids;
    int* prompt_len;
    int* prompt_added; // how many of its first ids are not the user's (the document token before a text)
    char prompt_how[160]; // what -prompt does with the text, for each sample's header ("" for text as given)
    int stop[16], nstop;  // -prompt's replies end at these ids (load_prompts)
    int R, r, GA;
    int max_steps;
    int step;          // optimizer steps done
    int64_t adam_t;    // AdamW updates applied (a skipped step does not count)
    FILE* log;         // rank 0: <out_dir>/log.jsonl
    int log_failed;    // rank 0: a write to the log failed (the run ends with exit code 1)
    double flops_per_token; // for MFU: llm.c's 6N + 6LCT (mfu_flops_per_token)
    // the step's numbers (see train_step): where the step runs, and read back to the host
    StepScalars* scalars;      // the last STEP_SCALARS_FLOATS of g_work's allocation
    StepScalars* scalars_host; // their read-back (page-locked on a GPU)
    int readback_lag;          // 1 (one GPU): a step's numbers are read during the next step; 0: at once
    int pending;               // a step's read-back is issued and not read yet
    StepResult pending_res;    // that step's lr, step and collectives, until its numbers are read
    double t_mark;             // when the last result was read (or the first step began)
    int start_step, skips;     // this run's first step; consecutive skipped steps (-max-skips)
    int64_t checks_proved, checks_run; // steps whose overflow check was proved by its bound / read the state (zero_adamw_check)
    double t_first, first_s;   // the ETA: when this run's first step was logged, and its time
    double peak_flops;      // [CUDA] the GPU's BF16 dense peak (0: unknown)
    size_t mem_baseline;    // [CUDA] device memory in use after the context and communicator exist
    double mem_startup;     // [CUDA] bytes in use beyond it at the end of start-up (said against the plan)
    char tune_choice[128];  // -tune's choice as flags ("-z 2 -r 1"; "" without -tune): into every checkpoint
    Marker* resumed;        // the checkpoint this run resumed (its DONE marker), NULL: none
    char* recorded_run;     // -y 1: the run's record in the checkpoint it resumes (flags_take_recorded), NULL: none
    int recorded_step;      // that checkpoint's step
    char* run_record;       // this run's record, into every checkpoint (flags_run_record + the shard lists)
    int reading;            // 1: a resumed run that trains no step (-x at or below the step: export, evaluate): it changes nothing in -o
    int committed;          // 1: the run has committed to -o (commit_out_dir)
    char* log_mem;          // rank 0, before the commit: log.jsonl's records so far (tr->log is a memory stream)
    size_t log_mem_len;
    char* tune_mem;         // rank 0, -tune with -o: tune.jsonl's lines, written when the run commits to -o
    size_t tune_mem_len;
} Trainer;

// Learning rate at `step` (0-based): linear warmup over `warmup` steps, then the schedule down
// to lr * lr_final at the last step (llm.c's formulas).
static float lr_at(const Flags* f, int step, int max_steps) {
    double peak = f->lr, lo = f->lr * f->lr_final;
    if (step < f->warmup) return (float)(peak * (step + 1) / f->warmup);
    if (!strcmp(f->lr_schedule, "constant")) return (float)peak;
    int span = max_steps - f->warmup;
    double ratio = span > 0 ? (double)(step - f->warmup) / span : 1.0;
    if (ratio > 1.0) ratio = 1.0;
    if (!strcmp(f->lr_schedule, "linear")) return (float)(peak - (peak - lo) * ratio);
    return (float)(lo + 0.5 * (1.0 + cos(M_PI * ratio)) * (peak - lo)); // cosine
}


// Copy a loader's micro-batch into the model's token buffers (through page-locked slots: no host wait),
// and its segment table when the loader makes one (-doc-attention 1): a.seg points at it, else is
// NULL (one example per row, as every forward that writes a.inputs itself: sampling).
static void load_tokens(Model* m, const DataLoader* dl, int with_targets) {
    size_t bytes = sizeof(int) * (size_t)dl->B * dl->T;
    dev_upload(m->a.inputs, dl->inputs, bytes);
    if (with_targets) dev_upload(m->a.targets, dl->targets, bytes);
    if (dl->seg) dev_upload(m->a.segs, dl->seg, bytes);
    m->a.seg = dl->seg ? m->a.segs : NULL;
}

// Sum of the first n per-token losses, in order.
static double sum_losses(const Model* m, int n) {
    float* host = (float*)malloc(sizeof(float) * n);
    dev_to_host(host, m->a.losses, sizeof(float) * n);
    double s = 0.0;
    for (int i = 0; i < n; i++) s += host[i];
    free(host);
    return s;
}

// [-data-trace] one line per rank per micro-step: a hash of each of its B samples.
static void trace_batch(const Trainer* tr, int micro) {
    const DataLoader* dl = &tr->train;
    printf("[data] step %d micro %d rank %d:", tr->step, micro, tr->r);
    for (int b = 0; b < dl->B; b++) {
        uint64_t h = fnv1a(FNV_INIT, dl->inputs + (size_t)b * dl->T, sizeof(int) * dl->T);
        h = fnv1a(h, dl->targets + (size_t)b * dl->T + dl->T - 1, sizeof(int));
        printf(" %016llx", (unsigned long long)h);
    }
    printf("\n");
}

// [masked loss] The targets that count in step `step`'s global batch (all ranks, all micro-steps):
// R*GA*B*T without loss masks. Every rank counts the whole batch from the data itself (the batch
// order does not depend on R), so the loss's scale is known before the first backward, with no
// communication, and every rank agrees.
static int64_t step_counted_targets(Trainer* tr, int step) {
    int64_t n = 0;
    for (int micro = 0; micro < tr->GA; micro++)
        for (int q = 0; q < tr->R; q++) {
            int64_t k = dataloader_count_targets(&tr->train, ((int64_t)step * tr->GA + micro) * tr->R + q);
            if (k < 0) die_user("-i: %s", tr->train.err); // a mask changed since start-up
            n += k;
        }
    return n;
}

// Read the last issued step's numbers back (waiting for them on a GPU): its StepResult, and adam_t
// counts it if it was finite. Invalid when nothing is pending.
static StepResult step_read_back(Trainer* tr) {
    StepResult r;
    memset(&r, 0, sizeof(r));
    if (!tr->pending) return r;
    r = tr->pending_res;
    r.valid = 1;
    if (r.skipped != 2) { // (a step without counted targets ran nothing on the device)
        dev_read_wait();
        const StepScalars* h = tr->scalars_host;
        r.loss = (float)(h->loss_sum / (double)r.counted);
        r.norm = h->norm;
        r.skipped = !h->finite ? 1 : h->overflow ? 3 : 0;
        if (r.skipped == 0) tr->adam_t++;
        if (h->finite && !tr->model.z.offload) (h->proved ? tr->checks_proved : tr->checks_run)++; // (offload counts its own)
    }
    double now = wall_s();
    r.ms = (now - tr->t_mark) * 1000.0;
    tr->t_mark = now;
    tr->pending = 0;
    return r;
}

// [masked loss] A step whose global batch has no counted target: nothing runs, the step is logged
// as skipped (2) in its turn, after the step before it (so the log keeps its order on one GPU).
static StepResult step_without_targets(Trainer* tr) {
    StepResult prev = step_read_back(tr);
    StepResult* pr = &tr->pending_res;
    memset(pr, 0, sizeof(*pr));
    pr->step = tr->step;
    pr->lr = lr_at(&tr->f, tr->step, tr->max_steps);
    pr->skipped = 2;
    tr->pending = 1;
    tr->step++;
    return tr->readback_lag ? prev : step_read_back(tr);
}

// One optimizer step. Its numbers (loss, sum of squares, then norm, clip scale and finite flag:
// StepScalars) are computed where the step runs, and AdamW reads the clip scale and the finite flag
// there: on a GPU the host never waits inside a step. Before the update, a check pass computes the
// update without writing it (zero_adamw_check: the overflow flag, agreed by every rank); an update
// that would leave any value non-finite is not written at all, and the step counts as skipped.
// The step's numbers are copied back asynchronously at its end and read during the next step,
// just before that step's optimizer is issued (the previous step is long finished by then), so
// adam_t counts exactly the updates applied and the log is exact, one step late: train_step returns the *previous* step's result on one GPU
// (readback_lag 1), this step's on the CPU device or with several ranks (lag 0: the numbers are on
// the host already, and the host decides the skip as it always did). step_read_back flushes the last
// one (train_loop: before evaluation, sampling, checkpoints and at the end).
//   per micro-step: no host wait, no device-to-host copy (docs/cuda.md: "Host synchronisations")
//   per step:       one device-to-host copy (the scalars, into pinned memory) and one wait (the
//                   previous step's copy); with R > 1 also the scalar sums over ranks (the loss
//                   and norm, then the overflow flag)
static StepResult train_step(Trainer* tr) {
    Model* m = &tr->model;
    Zero* z = &m->z;
    const Flags* f = &tr->f;
    int B = m->B, T = m->T, BT = B * T;
    StepScalars* sc = tr->scalars;
    if (!tr->pending) tr->t_mark = wall_s(); // the step's time starts here (evaluation etc. excluded)
    // [masked loss] the loss is the mean over the counted targets: dloss = 1/count (= 1/(R*GA*B*T)
    // without masks); a step with none is skipped whole (every rank agrees: every rank counts)
    int64_t counted = step_counted_targets(tr, tr->step);
    if (counted == 0) return step_without_targets(tr);
    float dloss = 1.0f / (float)counted;
    dev_zero(sc, sizeof(StepScalars));
    for (int micro = 0; micro < tr->GA; micro++) {
        int64_t unit = ((int64_t)tr->step * tr->GA + micro) * tr->R + tr->r;
        if (dataloader_load(&tr->train, unit) != 0) die_user("-i: %s", tr->train.err);
        if (f->data_trace) trace_batch(tr, micro);
        load_tokens(m, &tr->train, 1);
        lora_set_batch(&m->lora, unit * B, T); // [LoRA] -lora-dropout's mask is keyed by the samples' stream positions
        gpt_forward(m, B, T, 1, dloss, 1);
        gpt_backward(m, B, T, micro, micro == tr->GA - 1); // (its classifier computes the losses)
        op_loss_add(sc, m->a.losses, BT); // the loss stays where it is computed
    }
    zero_grad_sumsq(z, sc);            // the gradient's sum of squares (one launch), summed over ranks
    op_step_scalars(sc, f->grad_clip); // norm, clip scale, finite flag
    StepResult prev = step_read_back(tr); // [one GPU] the previous step: adam_t is exact from here
    float lr = lr_at(f, tr->step, tr->max_steps);
    AdamWParams hp = {lr, f->beta1, f->beta2, f->eps, f->weight_decay, 1.0f, 0.0f, 0.0f};
    adamw_bias_corrections(&hp, tr->adam_t + 1); // this update's t, if it is applied
    if (fault_at("lr-spike", tr->r, tr->step + 1)) { // ZT_FAULT (tests): a finite learning rate whose update overflows
        hp.lr = FLT_MAX;
        if (tr->R > 1) printf("[rank %d] ", tr->r);
        printf("ZT_FAULT: step %d's AdamW runs with lr %g\n", tr->step + 1, (double)hp.lr);
    }
    int apply = 1;
    if (z->offload) { // [offload] the scalars to the host, the overflow check on the host's state, the flag back
        dev_to_host(tr->scalars_host, sc, sizeof(StepScalars));
        offload_adamw_check(z, &hp, tr->scalars_host); // (every rank agrees)
        dev_from_host(&sc->overflow, &tr->scalars_host->overflow, sizeof(sc->overflow));
        apply = tr->scalars_host->finite && !tr->scalars_host->overflow;
    } else {
        zero_adamw_check(z, &hp, sc); // the overflow flag: would any new value not be finite? (every rank agrees)
        if (tr->readback_lag == 0) { // the numbers are on the host already: skip here, as every rank does
            dev_to_host(tr->scalars_host, sc, sizeof(StepScalars));
            apply = tr->scalars_host->finite && !tr->scalars_host->overflow; // (the same sums and flag on every rank)
        }
    }
    if (apply) {
        if (z->offload) offload_adamw(z, &hp, tr->scalars_host); // [offload] on the host, block by block
        else zero_adamw(z, &hp, sc); // [one GPU] a non-finite or overflowing step is skipped on the device
        zero_after_step(z);
    }
    zero_zero_grads(z);
    // issue the read-back; keep what the log needs until it is read
    StepResult* pr = &tr->pending_res;
    memset(pr, 0, sizeof(*pr));
    pr->step = tr->step;
    pr->lr = lr;
    pr->counted = counted;
    memcpy(pr->count, tr->comm.count, sizeof(pr->count));
    memcpy(pr->bytes, tr->comm.bytes, sizeof(pr->bytes));
    pr->comm_wait_s = tr->comm.wait_s;
    dev_to_host_async(tr->scalars_host, sc, sizeof(StepScalars));
    tr->pending = 1;
    tr->step++;
    return tr->readback_lag ? prev : step_read_back(tr);
}

// ----------------------------------------------------------------------------
// 4. Checkpoints. checkpoint.h holds the files and the protocol (nonce per save, DONE then LATEST,
// CRC32C per 1 MiB chunk of state, the model file's checksum in DONE, flock on the directory);
// here the trainer hands it what it needs: the ZeRO state, the config, the step's counters.

static CkptMeta trainer_ckpt_meta(const Trainer* tr) {
    CkptMeta m;
    memset(&m, 0, sizeof(m));
    m.step = tr->step;
    m.adam_t = tr->adam_t;
    m.seed = tr->f.seed;
    m.step_tokens = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T;
    m.train_tokens = dataloader_total_tokens(&tr->train);
    m.writer_R = tr->R;
    snprintf(m.tune, sizeof(m.tune), "%s", tr->tune_choice);
    m.run = tr->run_record;
    return m;
}

// Waits around rank 0's checkpoint and export writes use -io-timeout, not -comm-timeout: a
// healthy run on slow storage must not end because rank 0 is still writing. auto: the bytes rank 0
// writes (model file and its state file) at a floor of 50 MB/s, and at least 10 minutes.
// (io_timeout_for: the same for a wait on reading `bytes`, the LoRA base's checksum.)
static double io_timeout_for(const Trainer* tr, double bytes) {
    if (tr->f.comm_timeout == 0 || tr->f.io_timeout == 0) return 0; // forever
    if (tr->f.io_timeout > 0) return tr->f.io_timeout;
    return fmax(600.0, bytes / 50e6);
}
static double io_save_bytes(const Trainer* tr) { return 1024.0 + (double)tr->model.d.num_params * sizeof(floatX) + 12.0 * tr->model.z.opt_total; }
static double io_timeout_s(const Trainer* tr) { return io_timeout_for(tr, io_save_bytes(tr)); }
static double io_wait_begin_for(Trainer* tr, double bytes) {
    double saved = tr->comm.timeout_s;
    tr->comm.timeout_s = io_timeout_for(tr, bytes);
    tr->comm.timeout_flag = "-io-timeout";
    return saved;
}
static double io_wait_begin(Trainer* tr) { return io_wait_begin_for(tr, io_save_bytes(tr)); }
static void io_wait_end(Trainer* tr, double saved) {
    tr->comm.timeout_s = saved;
    tr->comm.timeout_flag = NULL;
}

// [LoRA] The adapters as PEFT's files (lora.h) in dir, from the master weights (every rank takes part:
// the adapter block's shards are gathered to rank 0, which writes). 0 on success (other ranks: 0);
// err says why not.
static int write_adapter(Trainer* tr, const char* dir, char* err, size_t errlen) {
    Zero* z = &tr->model.z;
    int A = z->lay.adapter;
    float* host = (float*)calloc((size_t)z->lay.P[A], sizeof(float));
    if (!host) die(1, "out of host memory (%lld adapter elements)", (long long)z->lay.P[A]);
    block_values(z, A, 1, host);
    int rc = g_rank == 0 ? lora_write_peft(&tr->model.d.lora, &tr->model.cfg, host, dir, tr->f.model, err, errlen) : 0;
    free(host);
    return rc;
}

// [LoRA] Every checkpoint's adapter_<step>/ (CkptMeta's hook): a failure makes the checkpoint incomplete.
static int checkpoint_adapter(void* ctx, const char* dir) {
    char err[8192]; // (room for two paths: fileio.h's messages name the file and the directory)
    int rc = write_adapter((Trainer*)ctx, dir, err, sizeof(err));
    if (rc) fprintf(stderr, "error: %s: %s\n", dir, err);
    return rc;
}

// A checkpoint of the current step: every rank takes part. 0 on success (the same on every rank).
static int save_checkpoint(Trainer* tr, int last) {
    CkptMeta meta = trainer_ckpt_meta(tr);
    if (tr->model.cfg.lora_r) meta.adapter = checkpoint_adapter, meta.adapter_ctx = tr; // [LoRA] adapter_<step>/ for PEFT
    int with_model = !strcmp(tr->f.save_model, "1") || (last && !strcmp(tr->f.save_model, "last"));
    double saved = io_wait_begin(tr);
    int rc = ckpt_save(&tr->model.z, &tr->model.cfg, tr->f.out_dir, &meta, with_model, tr->f.ckpt_keep);
    io_wait_end(tr, saved);
    return rc;
}

// The model as a Hugging Face checkpoint (hf.h): config.json (hc: GPT-2, Llama, Mistral or Qwen2;
// hf_export_config) + model.safetensors (or shards + index above 5 GB) in dir, in `dtype`, from the
// master weights (F32, F16) or the parameters (BF16). Every rank must call it; rank 0 writes, one
// block at a time. On failure nothing is left in dir. Returns 0 on success.
// [LoRA] The merged model: each target's W + (alpha / r) B A (lora_merge), in FP32 from the
// adapters' master weights and the frozen base's parameters (it has no master), then `dtype`:
// what PEFT's merge_and_unload() gives, for every family the writer knows. [QLoRA] A 4-bit base's
// matrices are their dequantized values (what the forward multiplies by: base_dequant_values), plus
// the adapters: BF16 weights = dequantized base + (alpha / r) B A, as PEFT's merge of a 4-bit base
// computes before it quantizes again (here nothing is quantized again).

// [QLoRA] Layer block b's 4-bit matrices dequantized (lora_base_dequant), into host on rank 0: tensor
// k at host + at[k] (n elements, FP32 of the floatX values). Every rank takes part (a gather).
static void base_dequant_values(Model* m, int b, float* host, int64_t* at) {
    floatX* p = zero_params(&m->z, b);
    ParamView v = param_view(&m->d, p, 0);
    floatX* deq = m->lora.deq;
    lora_base_dequant(&m->lora, &m->d, v.t);
    if (m->z.r == 0) {
        floatX* tmp = (floatX*)malloc(sizeof(floatX) * (size_t)m->lora.deq_n);
        if (!tmp) die(1, "out of host memory (%lld elements of a dequantized layer)", (long long)m->lora.deq_n);
        dev_to_host(tmp, deq, sizeof(floatX) * (size_t)m->lora.deq_n);
        for (int64_t i = 0; i < m->lora.deq_n; i++) host[i] = ld(tmp[i]);
        free(tmp);
    }
    for (int k = 0; k < NUM_TENSORS; k++) at[k] = v.t[k] && m->d.t[k].stored ? v.t[k] - deq : -1;
    zero_release(&m->z, b);
}

static int write_hf_checkpoint(Model* m, const HFConfig* hc, const char* dir, StDtype dtype) {
    Zero* z = &m->z;
    HFWriter w;
    char err[1024] = "";
    int ok = 1, A = z->lay.adapter;
    if (g_rank == 0) {
        if (hf_writer_open(&w, dir, hc, dtype, err, sizeof(err))) ok = 0;
        else if (w.leftovers)
            printf("-export-hf %s: %s %d file(s) an interrupted export left (*.tmp.PID, *.replaced.PID)\n", dir,
                   w.restored ? "the earlier export restored first (its commit had been cut) from" : "removed", w.leftovers);
    }
    size_t maxP = 0;
    for (int b = 0; b < z->lay.nblocks; b++) maxP = (size_t)z->lay.P[b] > maxP ? (size_t)z->lay.P[b] : maxP;
    float* host = (float*)malloc(maxP * sizeof(float));
    float* ad = A ? (float*)malloc((size_t)z->lay.P[A] * sizeof(float)) : NULL; // [LoRA] the adapters (FP32 masters)
    float* deq = m->lora.deq ? (float*)malloc((size_t)m->lora.deq_n * sizeof(float)) : NULL; // [QLoRA] a layer's dequantized matrices
    if (!host || (A && !ad) || (m->lora.deq && !deq)) die(1, "out of host memory (%zu elements for an export)", maxP);
    if (A) block_values(z, A, 1, ad);
    for (int b = 0; b < z->lay.nblocks; b++) {
        if (A && b == A) continue; // [LoRA] merged into the layers' weights below
        block_values(z, b, dtype != ST_BF16 && !z->lay.frozen[b], host);
        float* val[NUM_TENSORS]; // each tensor's values: in the block, or [QLoRA] dequantized
        int64_t at[NUM_TENSORS];
        for (int k = 0; k < NUM_TENSORS; k++) val[k] = host + m->d.t[k].off;
        if (deq && b > 0) {
            base_dequant_values(m, b, deq, at);
            for (int k = 0; k < NUM_TENSORS; k++) if (at[k] >= 0) val[k] = deq + at[k];
        }
        for (int p = 0; A && b > 0 && g_rank == 0 && p < NUM_PROJ; p++) // [LoRA] W += (alpha / r) B A
            lora_merge(&m->d.lora, b - 1, p, val[proj_tensor(m->cfg.family, p)], ad);
        for (int k = 0; g_rank == 0 && ok && k < z->lay.ntensors[b]; k++) {
            const BlockTensor* t = &z->lay.tensors[b][k];
            if (hf_writer_put(&w, m->d.t[t->tensor].name, b == 0 ? 0 : b - 1, val[t->tensor], err, sizeof(err))) ok = 0;
        }
    }
    free(host);
    free(ad);
    free(deq);
    if (g_rank != 0) return 0;
    if (ok && hf_writer_commit(&w, err, sizeof(err)) == 0) return 0;
    if (!ok) hf_writer_abort(&w); // (a failed commit has cleaned up already)
    fprintf(stderr, "error: -export-hf %s: %s. HINT: check free disk space and permissions; an earlier export in the directory is left whole\n", dir, err);
    return -1;
}

// [LoRA] A checkpoint of a LoRA run holds the adapters' state, not the base again: the run's record
// names the base (-e's path, bytes and CRC32C: ckpt_base_identity, read by rank 0) as "lora-base",
// and a resume whose -e is another base (other bytes or checksum) is refused naming both. Only a
// run that can write or read checkpoints reads the base for its checksum.
static void lora_base_record(Trainer* tr, const GPTConfig* c) {
    const Flags* f = &tr->f;
    if (!c->lora_r || !f->out_dir[0] || !(f->resume || f->ckpt_every > 0)) return;
    char id[160] = "", now[PATH_MAX + 200], then[PATH_MAX + 200];
    // rank 0 reads the whole base while the others wait: a wait sized like rank 0's other I/O
    // (-io-timeout, auto on the base's bytes), not -comm-timeout
    int64_t bytes = tr->r == 0 ? ckpt_base_bytes(f->model) : 0;
    comm_broadcast(&tr->comm, &bytes, sizeof(bytes), 0);
    if (bytes > 0) printf0("checksumming the LoRA base %s (%s) for the checkpoints' record ...\n", f->model, fmt_bytes((double)bytes).s);
    double saved = io_wait_begin_for(tr, (double)bytes);
    if (tr->r == 0 && ckpt_base_identity(f->model, id, sizeof(id)) != 0)
        snprintf(id, sizeof(id), "error %.120s", zt_strerror(errno));
    comm_broadcast(&tr->comm, id, sizeof(id), 0);
    io_wait_end(tr, saved);
    if (!strncmp(id, "error ", 6)) die_user("-e %s: cannot read the LoRA base for its checksum: %s", f->model, id + 6);
    snprintf(now, sizeof(now), "%s %s", id, f->model);
    if (tr->run_record[0] && ckpt_run_add(tr->run_record, CKPT_RUN_MAX, "lora-base", now))
        printf0("warning: the run's record is full (%d bytes): its checkpoints do not record the LoRA base\n", CKPT_RUN_MAX);
    if (!tr->recorded_run || !ckpt_run_find(tr->recorded_run, "lora-base", then, sizeof(then))) return;
    long long b0 = -1, b1 = -1;
    unsigned c0 = 0, c1 = 0;
    int n = 0;
    sscanf(then, "%lld %x %n", &b0, &c0, &n);
    sscanf(id, "%lld %x", &b1, &c1);
    if (b0 != b1 || c0 != c1)
        die_user("-e %s (%lld bytes, CRC32C %08x) is not the base the checkpoint of step %d was trained on: %s (%lld bytes, CRC32C %08x). "
                 "HINT: resume with that base (its adapters were trained on it)", f->model, b1, c1, tr->recorded_step, then + n, b0, c0);
}

// Resume from the checkpoint LATEST names (or -resume-step). Returns 1 if one was loaded.
static int resume_checkpoint(Trainer* tr) {
    CkptMeta got, want = trainer_ckpt_meta(tr);
    tr->resumed = (Marker*)malloc(sizeof(Marker));
    if (!tr->resumed) die(1, "out of host memory (%zu bytes for a checkpoint marker)", sizeof(Marker));
    if (!ckpt_resume(&tr->model.z, &tr->model.cfg, tr->f.out_dir, tr->f.resume_step, &got, tr->resumed)) {
        free(tr->resumed);
        tr->resumed = NULL;
        if (tr->recorded_run) die_user("resume: the checkpoint of step %d (whose run flags this run took) is gone from %s", tr->recorded_step, tr->f.out_dir);
        return 0;
    }
    if (tr->recorded_run ? tr->resumed->step != tr->recorded_step : tr->resumed->run[0] != 0) // (the directory changed before its lock was taken)
        die_user("resume: %s changed while this run started (it took the run flags of step %d, then found step %d). HINT: run it again",
                 tr->f.out_dir, tr->recorded_step, tr->resumed->step);
    if (got.seed != want.seed)
        printf0("warning: the checkpoint was trained with -seed %lld, this run has -seed %lld: the data order changes\n", (long long)got.seed, (long long)want.seed);
    if (got.step_tokens != want.step_tokens)
        printf0("warning: the checkpoint used %lld tokens per step, this run %lld: the data position is the step, so samples are skipped or repeated\n",
                (long long)got.step_tokens, (long long)want.step_tokens);
    tr->step = got.step;
    tr->adam_t = got.adam_t;
    printf0("resume: step %d from %s (written by %d rank(s))\n", got.step, tr->f.out_dir, got.writer_R);
    return 1;
}

// ----------------------------------------------------------------------------
// 5. Evaluation and sampling. Every rank runs every forward (under ZeRO-3 each takes part in
// every gather), so every rank computes the same numbers; rank 0 prints them.

// Mean loss over val_steps micro-batches per rank of the val set (unit s*R + r of batch s). Each
// rank reads its own val batches: a rank slow to read them (slow storage) makes the others wait in
// the evaluation's collectives, so those waits use -io-timeout, not -comm-timeout.
// Val batches per rank per evaluation: -m, at most the whole micro-batches per rank the val set holds
// (at least 1). *whole: -m asked for more than there are (or -1).
static int eval_batches(const Trainer* tr, int* whole) {
    int64_t units = tr->val.total_samples / tr->model.B / tr->R; // whole micro-batches per rank in the val set
    *whole = tr->f.val_steps < 0 || tr->f.val_steps >= units;
    int nb = *whole ? (int)units : tr->f.val_steps;
    return nb < 1 ? 1 : nb;
}

static float evaluate(Trainer* tr) {
    double saved = io_wait_begin(tr);
    Model* m = &tr->model;
    int B = m->B, T = m->T, whole;
    int nb = eval_batches(tr, &whole);
    double sum = 0.0;
    int64_t counted = 0; // [masked loss] every rank counts every rank's targets itself
    for (int s = 0; s < nb; s++) {
        for (int q = 0; q < tr->R; q++) {
            int64_t k = dataloader_count_targets(&tr->val, (int64_t)s * tr->R + q);
            if (k < 0) die_user("-j: %s", tr->val.err);
            counted += k;
        }
        if (dataloader_load(&tr->val, (int64_t)s * tr->R + tr->r) != 0) die_user("-j: %s", tr->val.err);
        load_tokens(m, &tr->val, 1);
        gpt_forward(m, B, T, 1, 0.0f, 0);
        sum += sum_losses(m, B * T);
    }
    comm_sum_doubles(&tr->comm, &sum, 1);
    io_wait_end(tr, saved);
    return counted > 0 ? (float)(sum / (double)counted) : NAN;
}

// Generate gen_tokens tokens after a context, each drawn by sample_token (prompts.h: -temperature,
// -top-k; -temperature 0 is greedy) with the counter-based RNG keyed by (seed, step, position): the
// same text on every rank, and on a rerun or a resume. Without -prompt the context is the document
// token. With -prompt (prompt >= 0) it is the prompt's ids (load_prompts), printed apart from the
// reply, and the reply ends at a stop id (tr->stop: the model has learned where a completion stops)
// or after -g tokens:
//   sample at step S, prompt K (HOW):
//   --- prompt
//   the prompt as the model reads it (special tokens spelled, the document token put before a text not)
//   --- reply
//   the tokens generated
//   --- end: <|eot_id|> | -g 64 tokens
static void sample_one(Trainer* tr, const int* ctx, int nctx, int skip, int prompt) {
    Model* m = &tr->model;
    const GPTConfig* c = &m->cfg;
    int n = tr->f.gen_tokens, T = m->T;
    int* gen = (int*)malloc(sizeof(int) * (nctx + n));
    floatX* row = (floatX*)malloc(sizeof(floatX) * c->Vp);
    float* logits = (float*)malloc(sizeof(float) * c->V * 2); // the row as floats, then sample_token's scratch
    unsigned char* keep = (unsigned char*)malloc(c->V);
    memcpy(gen, ctx, sizeof(int) * nctx);
    uint64_t key = prompt < 0 ? rng_key((uint64_t)tr->f.seed, 0x53414D504C45ull /* "SAMPLE" */, (uint64_t)tr->step)
                              : rng_key((uint64_t)tr->f.seed ^ ((uint64_t)(prompt + 1) << 40), 0x50524F4D5054ull /* "PROMPT" */, (uint64_t)tr->step);
    if (prompt >= 0) printf0("sample at step %d, prompt %d%s:\n--- prompt\n", tr->step, prompt + 1, tr->prompt_how);
    else printf0("sample at step %d:\n---\n", tr->step);
    for (int i = skip; i < nctx && g_rank == 0; i++) {
        if (tr->has_tok) tokenizer_print(&tr->tok, (uint32_t)ctx[i], stdout);
        else printf("%d ", ctx[i]);
    }
    if (prompt >= 0) printf0("\n--- reply\n");
    int stopped = -1;
    for (int t = nctx; t < nctx + n && stopped < 0; t++) {
        int len = t < T ? t : T; // the last T tokens are the context
        dev_from_host(m->a.inputs, gen + t - len, sizeof(int) * len);
        m->a.seg = NULL; // one sequence: the prompt, or what was sampled after the document token
        gpt_forward(m, 1, len, 0, 0.0f, 0);
        dev_to_host(row, m->a.logits + (size_t)(len - 1 - m->a.logits_row0) * c->Vp, sizeof(floatX) * c->Vp);
        for (int j = 0; j < c->V; j++) logits[j] = ld(row[j]);
        int next = sample_token(logits, c->V, tr->f.temperature, tr->f.top_k, rng_uniform(key, (uint64_t)t), logits + c->V, keep);
        gen[t] = next;
        for (int k = 0; prompt >= 0 && k < tr->nstop; k++) if (next == tr->stop[k]) stopped = next; // every rank samples the same token: every rank stops
        if (stopped < 0 && g_rank == 0) {
            if (tr->has_tok) tokenizer_print(&tr->tok, (uint32_t)next, stdout);
            else printf("%d ", next);
            fflush(stdout);
        }
    }
    if (prompt < 0) printf0("\n---\n");
    else if (stopped >= 0 && tr->has_tok) {
        printf0("\n--- end: ");
        if (g_rank == 0) tokenizer_print(&tr->tok, (uint32_t)stopped, stdout);
        printf0("\n");
    } else if (stopped >= 0) printf0("\n--- end: token %d\n", stopped);
    else printf0("\n--- end: -g %d tokens\n", n);
    free(gen);
    free(row);
    free(logits);
    free(keep);
}

static void sample_text(Trainer* tr) {
    if (tr->nprompts == 0) {
        const GPTConfig* c = &tr->model.cfg;
        int start = tr->has_tok && tr->tok.eot_token >= 0 && tr->tok.eot_token < c->V ? tr->tok.eot_token : 0;
        sample_one(tr, &start, 1, 1, -1);
    }
    for (int p = 0; p < tr->nprompts; p++) sample_one(tr, tr->prompt_ids[p], tr->prompt_len[p], tr->prompt_added[p], p);
}

// The ids a reply stops at: id (when it is one of the model's V), once.
static void add_stop(Trainer* tr, int id, int V) {
    for (int k = 0; k < tr->nstop; k++) if (tr->stop[k] == id) return;
    if (id >= 0 && id < V && tr->nstop < (int)(sizeof(tr->stop) / sizeof(tr->stop[0]))) tr->stop[tr->nstop++] = id;
}

// eos_token_id (a number or a list of them) of the model directory's FILE (config.json,
// generation_config.json: transformers' generate stops at the latter's) into tr->stop.
static void add_stops_of(Trainer* tr, const char* dir, const char* file, int V) {
    char path[4200], err[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    Json j;
    int have = chat_read_json(path, &j, err, sizeof(err));
    if (have < 0) die_user("-prompt: %s", err);
    if (!have) return;
    int k = json_get(&j, 0, "eos_token_id");
    if (k >= 0 && j.nodes[k].type == JSON_NUMBER && j.nodes[k].is_int) add_stop(tr, (int)j.nodes[k].i, V);
    for (int e = k >= 0 && j.nodes[k].type == JSON_ARRAY ? j.nodes[k].first : -1; e >= 0; e = j.nodes[e].next)
        if (j.nodes[e].type == JSON_NUMBER && j.nodes[e].is_int) add_stop(tr, (int)j.nodes[e].i, V);
    json_free(&j);
}

// -prompt "text", -prompt @FILE (one prompt per non-empty line; a pipe, /dev/stdin or <(...) too)
// or -prompt @FILE.jsonl (one JSON string per line: prompts with newlines; or a "messages" list),
// read and split by prompts.h, each encoded by prompt_encode: through the model's chat template
// with the generation prompt (-chat-prompt: auto takes it when the tokenizer's directory has one this
// build renders), else as given after the document token (never a second BOS). A reply stops at the
// document token, the template's end of turn, and the eos_token_id of -e DIR's config.json and
// generation_config.json.
static void load_prompts(Trainer* tr, int V) {
    Flags* f = &tr->f;
    char err[1024];
    char tpath[4200];
    const char* tname = tokenizer_for_model(f->tokenizer, TOKENIZER_DEFAULT_PATH, f->model, tpath, sizeof(tpath));
    if (!tr->has_tok && tokenizer_init(&tr->tok, tname, err, sizeof(err))) die_user("-prompt needs the tokenizer: -tokenizer: %s", err);
    tr->has_tok = 1;
    if (tokenizer_load_merges(&tr->tok, f->merges, err, sizeof(err))) die_user("-prompt needs the merges to encode: -merges: %s", err);
    Chat chat;
    const Chat* use = NULL;
    if (strcmp(f->chat_prompt, "0")) {  // 1 or auto: the template, or why not (auto goes on as text only where there is none or it is unknown)
        char cerr[1024];
        int rc = chat_init(&chat, &tr->tok, f->chat_date, cerr, sizeof(cerr));
        if (rc == 0) use = &chat;
        else if (!strcmp(f->chat_prompt, "1") || (rc != CHAT_NONE && rc != CHAT_UNKNOWN)) die_user("-prompt through the chat template: %s", cerr);
        else if (rc == CHAT_UNKNOWN) printf0("-prompt: the text as given, not through the chat template: %s\n", cerr);
        if (!strcmp(f->chat_prompt, "auto") && use) FLAG_SHOW(f, chat_prompt, "1 (the %s chat template)", chat.t->name);
        else if (!strcmp(f->chat_prompt, "auto"))
            FLAG_SHOW(f, chat_prompt, "%s", rc == CHAT_UNKNOWN ? "0 (a chat template this build does not render)" : "0 (no chat template)");
    }
    PromptList pl;
    const char* path = f->prompt[0] == '@' ? f->prompt + 1 : "-prompt";
    if (f->prompt[0] == '@') {
        size_t n = strlen(path), len;
        char* text;
        if (prompt_file_read(path, &text, &len, err, sizeof(err))) die_user("-prompt @%s", err);
        int rc = prompt_split(path, text, len, n >= 6 && !strcmp(path + n - 6, ".jsonl"), &pl, err, sizeof(err));
        free(text);
        if (rc) die_user("-prompt @%s", err);
    } else {
        memset(&pl, 0, sizeof(pl));
        if (prompt_list_add(&pl, f->prompt, strlen(f->prompt), 0, 0)) die(1, "-prompt: out of memory");
    }
    int eot = tr->tok.eot_token >= 0 && tr->tok.eot_token < V ? tr->tok.eot_token : -1, bos, eos;
    int doc = eot >= 0 ? eot : 0;  // (a tokenizer that names none: token 0 goes first, as the warning in setup_data says)
    tokenizer_special_ids(&tr->tok, &bos, &eos);
    tr->prompt_ids = (int**)calloc(pl.n > 0 ? pl.n : 1, sizeof(int*));
    tr->prompt_len = (int*)calloc(pl.n > 0 ? pl.n : 1, sizeof(int));
    tr->prompt_added = (int*)calloc(pl.n > 0 ? pl.n : 1, sizeof(int));
    uint32_t* ids = NULL;
    size_t nids = 0, cap = 0;
    for (int k = 0; k < pl.n; k++) {
        int added;
        if (prompt_encode(use, &tr->tok, &pl, k, path, doc, bos, V, &ids, &nids, &cap, &added, err, sizeof(err))) die_user("-prompt %s", err);
        int* p = (int*)malloc(sizeof(int) * nids);
        for (size_t i = 0; i < nids; i++) p[i] = (int)ids[i];
        tr->prompt_ids[tr->nprompts] = p;
        tr->prompt_added[tr->nprompts] = added;
        tr->prompt_len[tr->nprompts++] = (int)nids;
    }
    free(ids);
    prompt_list_free(&pl);
    if (tr->nprompts == 0) die_user("-prompt %s: no prompt in it", f->prompt);
    if (eot >= 0) add_stop(tr, eot, V);  // (not token 0 standing in for a document token)
    if (use) add_stop(tr, (int)use->end_of_turn, V);
    if (hf_is_checkpoint_path(f->model)) {  // -e DIR, or DIR/model.safetensors
        char dir[PATH_MAX];
        hf_checkpoint_dir(f->model, dir, sizeof(dir));
        add_stops_of(tr, dir, "config.json", V);
        add_stops_of(tr, dir, "generation_config.json", V);
    }
    char stops[512] = "";
    for (int k = 0; k < tr->nstop; k++) {
        int len;
        const char* s = tokenizer_decode(&tr->tok, (uint32_t)tr->stop[k], &len);
        snprintf(stops + strlen(stops), sizeof(stops) - strlen(stops), "%s%.*s (%d)", k ? ", " : "", len < 40 ? len : 40, s, tr->stop[k]);
    }
    if (use) {
        snprintf(tr->prompt_how, sizeof(tr->prompt_how), " (the user's turn, through the %s chat template)", use->t->name);
        printf0("-prompt: each prompt the user's message (or its .jsonl line's \"messages\"), rendered through the %s chat template (%s) with the "
                "generation prompt; replies stop at %s. -chat-prompt 0: the text as given\n", use->t->name, use->path, stops);
    } else if (tr->tok.hf)
        printf0("-prompt: the text as given, after the document token unless it starts with it or the BOS; replies stop at %s\n", stops);
}

// ----------------------------------------------------------------------------
// 6. Setup, the loop, main. trainer_setup reads as the run starts: flags, device, model shape,
// checks, the plan or -tune's choice, data, the model built and loaded; then the loop and main.

// End a log.jsonl record: flush, and remember (and say once) when the write failed.
static void log_flush(Trainer* tr) {
    if (fflush(tr->log) == 0 && !ferror(tr->log)) return;
    if (!tr->log_failed) fprintf(stderr, "error: writing %s/log.jsonl failed: %s. HINT: check free disk space; the run continues and ends with exit code 1\n", tr->f.out_dir, strerror(errno));
    tr->log_failed = 1;
    clearerr(tr->log);
}

// The memory record of log.jsonl: exact bytes per tag for every rank, and the peak RSS.
static void log_memory(Trainer* tr, const char* when) {
    double* all = gather_memory(&tr->comm);
    if (tr->log) {
        fprintf(tr->log, "{\"memory\": \"%s\", \"ranks\": [", when);
        for (int r = 0; r < tr->R; r++) {
            fprintf(tr->log, "%s{", r ? ", " : "");
            for (int t = 0; t < TAG_COUNT; t++) fprintf(tr->log, "\"%s\": %.0f, ", mem_tag_name[t], all[r * MEM_COLS + t]);
            fprintf(tr->log, "\"vmhwm\": %.0f}", all[r * MEM_COLS + TAG_COUNT]);
        }
        fprintf(tr->log, "]}\n");
        log_flush(tr);
    }
    if (!strcmp(when, "end")) {
        printf0("peak memory (VmHWM, MiB):");
        for (int r = 0; r < tr->R; r++) printf0(" rank %d %.1f%s", r, all[r * MEM_COLS + TAG_COUNT] / 1048576.0, r + 1 < tr->R ? "," : "\n");
    }
    free(all);
}

// The model for (stage, recompute): layout, ZeRO buffers, activations, workspace and the step's
// scalars, every tag checked against the planner (plan: its row). -tune builds and frees one per
// candidate with this; the run builds its own with it afterwards, from nothing, the same way.
static void trainer_build_model(Trainer* tr, const GPTConfig* c, int stage, int recompute, Offload offload, PlanRow* plan) {
    const Flags* f = &tr->f;
    Model* m = &tr->model;
    m->cfg = *c; m->B = f->B; m->T = f->T; m->recompute = recompute;
    m->ops = family_ops(c);
    model_describe(&m->d, c);
    BlockLayout lay;
    Shards sh = shards_of(tr->groups, tr->r);
    model_layout_shards(&m->d, &lay, &sh);
    Offload params = stage == 3 ? (Offload)offload_parse(f->offload_params) : OFFLOAD_NONE;
    zero_init(&m->z, &lay, stage, &tr->comm, f->poison, offload, params);
    if (offload != OFFLOAD_NONE) offload_pin_threads(tr->launch.local_rank, tr->launch.local_world); // [offload] the rank's cores
    offload_init(&m->z, f->offload_dir, parse_size(f->offload_buffer)); // [offload] master, m, v in host memory or a file
    param_offload_init(&m->z, f->offload_dir); // [-offload-params] the parameter shards in host memory or a file
    acts_alloc(&m->a, c, f->B, f->T, recompute);
    lora_alloc(&m->lora, &m->d.lora, c->L, (uint64_t)f->seed, (int64_t)f->B * f->T, lora_discard_floats(&m->d)); // [LoRA]
    lora_base_alloc(&m->lora, &m->d); // [QLoRA] one layer dequantized (none for a BF16 base)
    m->rope_T = 0;
    m->rope_host = NULL;
    if (m->a.rope) { // [Llama] RoPE's table, built once for the run's T
        m->rope_host = (float*)malloc(sizeof(float) * (size_t)f->T * c->HD);
        if (!m->rope_host) die(1, "out of host memory (RoPE's table: %zu bytes)", sizeof(float) * (size_t)f->T * c->HD);
        llama_rope_for(m, f->T);
    }
    dev_upload_reserve((size_t)f->B * f->T * sizeof(int)); // the token uploads' page-locked slots (load_tokens)
    size_t work_floats = ops_workspace_floats(c, f->B, f->T, m->z.opt_total);
    g_work = (float*)dev_alloc(TAG_WORK, work_floats * sizeof(float));
    g_work_floats = work_floats - STEP_SCALARS_FLOATS; // the ops' scratch; then the step's scalars
    tr->scalars = (StepScalars*)(g_work + g_work_floats);
    m->z.adam_max = (AdamWMax*)(tr->scalars + 1); // the maxima the updates leave, beside the scalars (across steps)
    dev_zero(m->z.adam_max, sizeof(AdamWMax));    // (unknown: the first step's check runs)
    tr->scalars_host = (StepScalars*)host_pinned_alloc(sizeof(StepScalars));
    tr->readback_lag = g_device == DEV_CUDA && tr->R == 1 && !params; // see train_step ([-offload-params] zero_adamw)
    // what was allocated is exactly what the planner computes, tag by tag
    plan_config(c, f->B, f->T, tr->groups, tr->GA, stage, recompute, offload, parse_size(f->offload_buffer), params, plan);
    for (int t = 0; t < TAG_COUNT; t++)
        if (g_mem_bytes[t] != plan->bytes[t])
            die(1, "internal error: %s: %zu bytes allocated, the planner says %zu", mem_tag_name[t], g_mem_bytes[t], plan->bytes[t]);
    size_t host_bytes = (m->z.offload_ctx ? ((OffloadState*)m->z.offload_ctx)->host_bytes : 0) +
                        (m->z.param_ctx ? ((ParamOffload*)m->z.param_ctx)->host_bytes : 0);
    if (host_bytes != plan->host_bytes)
        die(1, "internal error: offload host memory: %zu bytes allocated, the planner says %zu", host_bytes, plan->host_bytes);
    if (offload != OFFLOAD_NONE)
        printf0("offload %s: %s, %s of host memory per rank%s; host AdamW: %s (%s), %s\n", offload_name(offload),
                offload == OFFLOAD_CPU ? "master, m, v and the pinned staging in host memory" : "master, m, v in a file per rank under -offload-dir, streamed through",
                fmt_bytes((double)host_bytes).s, g_device == DEV_CPU && offload == OFFLOAD_CPU ? " (on the CPU device the same RAM: a code path, not a saving)" : "",
                simd_names[simd_level()], getenv("ZT_SIMD") && *getenv("ZT_SIMD") ? "ZT_SIMD" : "this CPU's widest", g_pin_note);
    if (params != OFFLOAD_NONE)
        printf0("offload-params %s: each rank's BF16 parameter shard (%s) %s, copied up into its gather buffer block by block; "
                "%s of host memory per rank%s\n", offload_name(params), fmt_bytes((double)sizeof(floatX) * (double)m->z.sz.shard_params).s,
                params == OFFLOAD_CPU ? "in page-locked host memory" : "in a file per rank under -offload-dir, read through pinned staging",
                fmt_bytes((double)((ParamOffload*)m->z.param_ctx)->host_bytes).s,
                g_device == DEV_CPU && params == OFFLOAD_CPU ? " (on the CPU device the same RAM: a code path, not a saving)" : "");
}

static void trainer_free_model(Trainer* tr) {
    Model* m = &tr->model;
    if (tr->scalars_host) host_pinned_free(tr->scalars_host);
    tr->scalars_host = NULL;
    dev_free(TAG_WORK, g_work, (g_work_floats + STEP_SCALARS_FLOATS) * sizeof(float)); // the ops' part and the step's scalars
    g_work = NULL;
    acts_free(&m->a, m->cfg.L);
    lora_free(&m->lora);
    free(m->rope_host);
    m->rope_host = NULL;
    offload_free(&m->z);
    param_offload_free(&m->z);
    zero_free(&m->z);
    layout_free(&m->z.lay);
}

// The trainer as -tune sees it (TuneTrainer, tune.h): a candidate is built by trainer_build_model,
// initialised from -seed as a new run would be (scratch state, thrown away), stepped by train_step.
static size_t tune_build(void* ctx, const GPTConfig* c, int stage, int recompute, Offload offload) {
    Trainer* tr = (Trainer*)ctx;
    PlanRow plan;
    trainer_build_model(tr, c, stage, recompute, offload, &plan);
    InitCtx ic = {&tr->model.d, (uint64_t)tr->f.seed};
    model_load(&tr->model, init_fill, &ic, NULL, tr->f.lora_init, tr->f.model);
    tr->step = 0; tr->adam_t = 0; tr->pending = 0;
    return plan.host_bytes;
}
static void tune_step(void* ctx) { train_step((Trainer*)ctx); }
static void tune_wait(void* ctx) { step_read_back((Trainer*)ctx); }
static void tune_release(void* ctx) {
    Trainer* tr = (Trainer*)ctx;
    trainer_free_model(tr);
    tr->step = 0; tr->adam_t = 0; tr->pending = 0;
    tr->checks_proved = 0; tr->checks_run = 0;
}

// Everything before the first step. Bad input ends here with exit code 2, before allocation.
// Returns 1 when there is nothing to train (-plan printed its table, -tokenize wrote shards).
// [masked loss] Whether -i and -j have loss masks and how many targets count; masks that count none
// are refused (exit 2: the run would train nothing and end "successfully").
static void say_loss_masks(const Trainer* tr) {
    const Flags* f = &tr->f;
    for (int k = 0; k < 1 + tr->has_val; k++) {
        const DataLoader* dl = k ? &tr->val : &tr->train;
        if (!dl->has_mask) continue;
        int64_t all = dl->total_samples * (int64_t)f->T;
        if (dl->mask_counted == 0)
            die_user("%s: every target is masked: the .mask files beside its %d shard(s) count none of its %lld targets, so there is nothing to %s. "
                     "HINT: check the completions of the .jsonl it was tokenized from", k ? "-j" : "-i", dl->nshards, (long long)all, k ? "evaluate" : "learn");
        printf0("loss mask: on for %s (.mask files beside its shards): %lld of %lld targets count (%.1f%%); the loss is the mean over the counted targets\n",
                k ? "-j" : "-i", (long long)dl->mask_counted, (long long)all, 100.0 * dl->mask_counted / (double)all);
    }
}

// [-doc-attention] auto becomes 1 when -i records example starts (mask version 2), else 0. On, -i's
// and -j's loaders fill a segment table per micro-batch (dataloader.h): from their recorded starts,
// or at each document token (the -tokenizer's end-of-text) of data that records none. Said; a
// document token this run cannot know is an error naming the flag (exit 2). Needs tr->has_tok set.
static void setup_doc_attention(Trainer* tr, const char* tokenizer_path) {
    Flags* f = &tr->f;
    if (!strcmp(f->doc_attention, "auto")) {
        snprintf(f->doc_attention, sizeof(f->doc_attention), "%d", tr->train.has_starts);
        FLAG_SHOW(f, doc_attention, "%d", tr->train.has_starts);
    }
    if (strcmp(f->doc_attention, "1")) {
        if (tr->train.has_starts) printf0("doc attention: off (-doc-attention 0): packed examples attend to the examples before them in their sample\n");
        return;
    }
    int eot = -1;
    char err[1024] = "";
    if (!tr->train.has_starts || (tr->has_val && !tr->val.has_starts)) { // plain shards, or version-1 masks: the document token
        Tokenizer tok;
        const Tokenizer* t = &tr->tok;
        if (!tr->has_tok && tokenizer_init(&tok, tokenizer_path, err, sizeof(err)) == 0) t = &tok;
        eot = tr->has_tok || t == &tok ? t->eot_token : -1;
        if (t == &tok) tokenizer_free(&tok);
        if (eot < 0 && !err[0]) snprintf(err, sizeof(err), "-tokenizer %s names no end-of-text token", tokenizer_path);
    }
    for (int k = 0; k < 1 + tr->has_val; k++) {
        DataLoader* dl = k ? &tr->val : &tr->train;
        char derr[1024];
        if (dataloader_segments(dl, eot, derr, sizeof(derr)))
            die_user("flag -doc-attention 1: %s: %s%s%s. HINT: -tokenize the .jsonl again (its masks then record where examples start), "
                     "give the -tokenizer whose end-of-text token separates the documents, or -doc-attention 0", k ? "-j" : "-i", derr, err[0] ? ": " : "", err);
        if (dl->has_starts) printf0("doc attention: on for %s: each packed example attends only to itself, at positions from 0 (the .mask files record where examples start)\n", k ? "-j" : "-i");
        else printf0("doc attention: on for %s: each document attends only to itself, at positions from 0 (a document starts at each end-of-text token %d)\n", k ? "-j" : "-i", eot);
    }
}

// -y 1, before defaults are resolved: rank 0 reads the marker of the checkpoint the resume will take
// (quietly: it is loaded and checked later) and every rank takes the recorded flags not given.
static void take_run_record(Trainer* tr) {
    Flags* f = &tr->f;
    Marker* mk = (Marker*)calloc(1, sizeof(Marker));
    int rs = 0, step = -1;
    if (parse_int(f->resume_step_str, &rs) || rs < 0) rs = 0; // (check_flags says what is wrong with it)
    if (tr->r == 0) step = ckpt_peek(f->out_dir_str, rs, mk);
    comm_broadcast(&tr->comm, &step, sizeof(step), 0);
    if (step >= 0) {
        comm_broadcast(&tr->comm, mk->run, sizeof(mk->run), 0);
        tr->recorded_run = strdup(mk->run);
        tr->recorded_step = step;
        flags_take_recorded(f, mk->run, step);
        if (f->zero_stage_set && !strcmp(f->zero_stage_str, "auto") && !f->offload_set && strcmp(f->offload_str, "auto")) {
            snprintf(f->offload_str, sizeof(f->offload_str), "auto"); // -z auto given: the planner chooses the offload too,
            snprintf(f->offload_given, sizeof(f->offload_given), "auto"); // as it would for a new run
        }
        char v[16];
        if (mk->run[0] && !f->doc_attention_set && !ckpt_run_find(mk->run, "-doc-attention", v, sizeof(v))) { // [-doc-attention] a record
            snprintf(f->doc_attention_str, sizeof(f->doc_attention_str), "0");                              // from before it: no isolation
            snprintf(f->doc_attention_given, sizeof(f->doc_attention_given), "(from checkpoint)");
            printf0("resume: the checkpoint of step %d was written before -doc-attention existed: its run had no isolation, so this one has none "
                    "either (-doc-attention 1 changes that)\n", step);
        }
    }
    free(mk);
}

// A clean stop (docs/running.md "Stopping a run"). SIGUSR1 (what mpirun forwards to every rank, and
// what Slurm's --signal=USR1@SECONDS sends), SIGINT and SIGTERM (where the process receives them
// itself: one process, dev/launch.sh, torchrun) ask for a stop: the handler only notes it, every
// rank learns at the next step boundary whether any rank was asked (comm_any), and every rank then
// finishes that step, writes a checkpoint (with -o) and ends with ZT_EXIT_STOPPED. A second signal
// ends the process at once (the signal's default action); the checkpoint protocol never leaves a
// half-written checkpoint that a resume would take.
// The handlers are armed only while the training loop runs (stop_signals_arm): before it (loading,
// -tokenize, -tune) and after it (the export) a signal has its default effect, ending the process at
// once. A signal within a second of the first counts as the same one: Ctrl-C under dev/launch.sh
// reaches every rank twice, from the terminal and passed on by the script.
static volatile sig_atomic_t g_stop_signal = 0;
static struct timespec g_stop_t0;
static void on_stop_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); // (async-signal-safe)
    if (g_stop_signal) {
        double dt = (double)(now.tv_sec - g_stop_t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - g_stop_t0.tv_nsec);
        if (dt < 1.0) return;                    // the same stop, heard twice
        signal(sig, SIG_DFL); raise(sig); return; // the second: at once (delivered when the handler returns)
    }
    g_stop_t0 = now;
    g_stop_signal = sig;
}
static void stop_signals_arm(int on) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on ? on_stop_signal : SIG_DFL;
    sa.sa_flags = SA_RESTART; // a read or write in progress goes on
    sigemptyset(&sa.sa_mask);
    const int sigs[3] = {SIGUSR1, SIGINT, SIGTERM};
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &sa, NULL);
}
static const char* stop_signal_name(int sig) { return sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

// After the first step: how long a stop takes (the step in flight and a checkpoint at the -io-timeout
// floor's 50 MB/s), against the 30 s a scheduler typically waits before it kills (Slurm's KillWait).
static void stop_say_cost(const Trainer* tr, double step_s) {
    if (!tr->f.out_dir[0]) {
        printf0("stop: SIGUSR1, SIGINT or SIGTERM ends the run after the step in flight, exit code 5; without -o nothing is saved\n");
        return;
    }
    double write_s = io_save_bytes(tr) / 50e6, total = step_s + write_s;
    printf0("stop: SIGUSR1, SIGINT or SIGTERM ends the run after the step in flight with a checkpoint, exit code 5: about %.0f s "
            "(a step %.1f s, writing %s at 50 MB/s %.0f s)\n", ceil(total), step_s, fmt_bytes(io_save_bytes(tr)).s, write_s);
    if (total > 30.0)
        printf0("warning: a stop takes longer than the 30 s a scheduler typically grants after its signal (Slurm's KillWait). "
                "HINT: ask for the signal earlier: sbatch --signal=USR1@%.0f (docs/running.md)\n", ceil(2.0 * total + 30.0));
}

// Setting up a run (trainer_setup), one concern at a time, in the order they happen.

// Ranks and flags: the communicator, the flags (a resume's taken from its record), the device, and
// every rank agreeing on them; on a GPU its context, streams, NCCL and the memory baseline.
static void setup_ranks_and_flags(Trainer* tr, int argc, char** argv) {
    Flags* f = &tr->f;
    comm_init(&tr->comm, &argc, &argv, &tr->launch);
    tr->R = tr->comm.R;
    tr->r = tr->comm.r;
    flags_parse(f, argc, argv);
    float comm_timeout = 300.0f; // -comm-timeout bounds the rendezvous and NCCL's initialisation too (checked again with the other flags)
    if (parse_float(f->comm_timeout_str, &comm_timeout) || comm_timeout < 0) comm_timeout = 300.0f;
    comm_connect(&tr->comm, comm_timeout); // launched without MPI: the ranks meet at MASTER_ADDR:MASTER_PORT
    int plan_only = atoi(f->plan_str) == 1;
    if (!strcmp(f->resume_str, "1") && f->out_dir_str[0] && !plan_only && !f->tokenize_str[0]) take_run_record(tr); // a resume keeps its run's flags
    flags_check_resume_change(f);
    // -tokenize needs no device: the CUDA runtime is not even started (nor is it for -help, which
    // ended in flags_parse, or on a machine without NVIDIA device files: pick_device)
    const char* auto_cpu = NULL;
    g_device = f->tokenize_str[0] ? DEV_CPU : pick_device(f->device_str, plan_only, &auto_cpu);
    if (auto_cpu && !strcmp(f->device_given, "auto")) snprintf(f->device_given, sizeof(f->device_given), "auto (%s)", auto_cpu);
    // every rank must run the same flags on the same device with the same build, and know it
    // before any communicator is made: a rank on another device would wait in NCCL's init forever
    ranks_agree(&tr->comm, flags_hash(f) ^ (uint64_t)g_device, "was started with different flags, another device or a different build", "start every rank with the same command line, the same ./train and the same -device");
    int gpus = 0; // -plan -device cuda plans without a GPU
#ifdef __CUDACC__
    const char* why_none;
    if (g_device == DEV_CUDA) gpus = cuda_device_count(&why_none);
#endif
    if (g_device == DEV_CUDA && gpus > 0) comm_init_device(&tr->comm, &tr->launch, comm_timeout); // GPU, streams, NCCL, watchdog
    if (g_device == DEV_CPU && !plan_only) comm_check_cpu_device(&tr->comm); // its collectives are MPI's
#ifdef __CUDACC__
    if (g_device == DEV_CUDA && gpus > 0) { // the baseline the planner's prediction is compared with
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        tr->mem_baseline = total_b - free_b;
    }
#endif
}

// The model's config (-e, overrides, LoRA) and the flags checked against it; threads; every output
// path made or refused now. c, from_file (model_config's: 0 a descriptor, 1 an llm.c file, 2 Hugging
// Face) and the world -plan plans for.
static void setup_config(Trainer* tr, GPTConfig* c_out, int* from_file_out, int* R_plan_out) {
    Flags* f = &tr->f;
    int T_auto = !strcmp(f->T_str, "auto");
    resolve_defaults(f, g_device);
    GPTConfig c;
    int from_file;
    model_config(f, &c, &from_file);
    lora_config(&c, f->lora, f->lora_alpha, f->lora_targets, f->lora_dropout, f->lora_quant); // [LoRA] adapters on a frozen base (-lora 0: none)
    check_lora_flags(f, &c);
    if (c.lora_r && !from_file && f->resume && flag_listed(f->resume_change, "-seed")) // [LoRA] a descriptor's base is drawn from -seed
        die_user("flag -resume-change -seed: this LoRA run's frozen base is initialised from -seed (-e %s is a descriptor, not a file): "
                 "another seed is another base, not the one the adapters were trained on. HINT: keep -seed (a new order of the data "
                 "comes with a new base here)", f->model);
    if (T_auto && f->T > c.maxT) { f->T = c.maxT; snprintf(f->T_str, sizeof(f->T_str), "%d", f->T); } // "at most the model's"
    int R_plan = f->plan && f->world > 0 ? f->world : tr->R; // -plan -world R plans another world size
    check_flags(f, &c, R_plan);
    check_group_flags(f, flags_groups(f, &tr->launch, R_plan)); // [groups] (the layout given; -z auto may choose one: setup_choose)
    check_family_flags(f, &c); // (llm.c's files are GPT-2's)
    ranks_agree(&tr->comm, flags_hash(f), "was started with different flags once defaults were resolved (another model file?)", "start every rank with the same command line, the same ./train and the same -device");
    attention_choose(f, f->plan); // -attn: cuDNN's attention or ours (exit 2 where -attn cudnn cannot run)
    ranks_agree(&tr->comm, (uint64_t)g_attn_cudnn, "chose another attention than rank 0 (-attn auto: cuDNN loads on some nodes only)",
                "install the same cuDNN on every node, or give -attn own");
    if (g_device == DEV_CUDA) tr->peak_flops = gpu_peak_tflops(gpu_model_name(f)) * 1e12; // MFU's denominator
    int threads = setup_threads(f, &tr->launch);
    if (f->threads == 0) FLAG_SHOW(f, threads, "%d", threads);
    if (!strcmp(f->gpu, "auto")) FLAG_SHOW(f, gpu, "%s", g_device == DEV_CUDA ? gpu_model_name(f) : "unused: cpu device");
    check_output_paths(f, &tr->comm); // every output path made (with its parents) or refused now, not when training ends
    if (f->out_dir[0] && !f->tokenize[0]) output_dir_ready("-o", f->out_dir); // (every rank: each writes its state files there)
    *c_out = c;
    *from_file_out = from_file;
    *R_plan_out = R_plan;
}

// The stage, recompute and offload: measured (-tune), planned (-z auto, -r auto) or given.
static void setup_choose(Trainer* tr, const GPTConfig* c) {
    Flags* f = &tr->f;
    if (f->tune) tune_mark_auto(f); // chosen by measuring, once the data is open (tune_config)
    else if (f->zero_stage < 0 || f->recompute < 0) choose_config(f, c, tr->R, &tr->launch, &tr->comm);
    else { // the planner's inputs: nothing plans this run
        plan_inputs_unused(f, "unused: only -plan, -z auto and -r auto plan");
        if (f->pcie_gbps == 0) FLAG_SHOW(f, pcie_gbps, "unused: only -plan, -z auto and -r auto plan");
        if (f->disk_gbps == 0) FLAG_SHOW(f, disk_gbps, "unused: only -plan, -z auto and -r auto plan");
        if (!f->host_mem[0]) FLAG_SHOW(f, host_mem, "unused: only -plan, -z auto and -r auto plan");
        if (!strcmp(f->offload, "auto") && f->offload_dir[0] && strcmp(f->offload_params, "nvme")) die_user("flag -offload-dir is for -offload nvme or -offload-params nvme (or -offload auto with -z auto / -r auto)");
        if (!strcmp(f->offload, "auto")) snprintf(f->offload, sizeof(f->offload), "none"); // nothing plans: none
    }
    if (!c->lora_r) FLAG_SHOW(f, lora_base, "unused: no -lora");
    if (strcmp(f->offload_str, f->offload)) FLAG_SHOW(f, offload, "%s", f->offload);
    // [groups] hybrid sharding, given or chosen: every rank the same groups (auto: each node's ranks per
    // node), checked again with the stage chosen; then the communicators of each group
    tr->groups = flags_groups(f, &tr->launch, tr->R);
    ranks_agree(&tr->comm, (uint64_t)tr->groups.N << 1 | (uint64_t)tr->groups.hpz, "has other groups (-shard-group / -hpz auto: another "
                "number of ranks on its node)", "give N, or start as many ranks on every node");
    check_group_flags(f, tr->groups);
    if (g_device == DEV_CPU || tr->comm.device_side) {
        check_group_hosts(&tr->comm, f, tr->groups);
        comm_split_groups(&tr->comm, tr->groups);
    }
#ifdef __CUDACC__
    if (tr->comm.device_side && tr->groups.N < tr->groups.W) { // the split communicators' buffers are in the baseline too
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        tr->mem_baseline = total_b - free_b;
    }
#endif
    if (strcmp(f->offload_params_str, f->offload_params)) FLAG_SHOW(f, offload_params, "%s", f->offload_params);
}

// Data, tokenizer, prompts, packing, and the output directory's lock.
static void setup_data(Trainer* tr, const GPTConfig* c) {
    Flags* f = &tr->f;
    char err[1024];
    if (dataloader_init(&tr->train, f->train_data, f->B, f->T, c->V, f->shuffle, (uint64_t)f->seed, err, sizeof(err)))
        die_user("-i: %s", err);
    tr->has_val = f->val_data[0] != 0 && f->val_every > 0;
    if (tr->has_val && dataloader_init(&tr->val, f->val_data, f->B, f->T, c->V, 0, 0, err, sizeof(err)))
        die_user("-j: %s", err);
    if (tr->train.note[0]) printf0("warning: -i: %s\n", tr->train.note);
    if (tr->has_val && tr->val.note[0]) printf0("warning: -j: %s\n", tr->val.note);
    for (int k = 0; k < 1 + tr->has_val; k++) { // shards too short for one sample are skipped, and said so
        int n_short = dataloader_short_shards(k ? &tr->val : &tr->train);
        if (n_short) printf0("note: %s: %d shard(s) hold fewer than T+1 = %d tokens: skipped\n", k ? "-j" : "-i", n_short, f->T + 1);
    }
    ranks_agree(&tr->comm, data_hash(&tr->train, tr->has_val ? &tr->val : NULL), "reads different shards (-i / -j: their count or sizes)",
                "every rank must read the same files");
    say_loss_masks(tr); // [masked loss] on or not, and how many targets count (none: exit 2)
    char tpath[4200];
    const char* tname = tokenizer_for_model(f->tokenizer, TOKENIZER_DEFAULT_PATH, f->model, tpath, sizeof(tpath));
    if (tname != f->tokenizer) FLAG_SHOW(f, tokenizer, "%s (-e's tokenizer.json)", tname); // the settings table names the one used
    tr->has_tok = f->sample_every > 0 && tokenizer_init(&tr->tok, tname, err, sizeof(err)) == 0;
    if (f->sample_every > 0 && !tr->has_tok) printf0("warning: -tokenizer: %s; samples print token ids\n", err);
    if (f->prompt[0]) load_prompts(tr, c->V);
    else if (!strcmp(f->chat_prompt, "auto")) FLAG_SHOW(f, chat_prompt, "unused: no -prompt");
    if (tr->has_tok && tr->tok.eot_token < 0)
        printf0("warning: -tokenizer %s %s: it does not say which token is <|endoftext|>, so samples%s start after token 0%s. "
                "HINT: data/gpt2_tokenizer.bin (version 2, dev/make_vocab.py) names it\n", tname, tr->tok.hf ? "(a tokenizer.json) names no end-of-text or BOS token" : "is a version-1 file", f->prompt[0] ? " and prompts" : "",
                f->prompt[0] ? " and a sampled end of text cannot end a completion" : "");
    setup_doc_attention(tr, tname); // [-doc-attention] auto resolved from -i; on: the loaders' segment tables
    attention_choose_seg(f); // -attn auto with a segment table: ours
    if (f->out_dir[0] && tr->r == 0) {
        ckpt_lock_dir(f->out_dir); // two trainers never share one; nothing in it changes before commit_out_dir
        if (access(f->out_dir, W_OK) != 0) die_user("-o %s: cannot write into the directory: %s", f->out_dir, strerror(errno));
        ckpt_note_set_asides(f->out_dir);
    }
}

// Steps, the run's record (a resume's checked against it), the communicator's limits, -tune's
// measurement, and [LoRA] where the frozen base lives.
static void setup_steps(Trainer* tr, GPTConfig* c) {
    Flags* f = &tr->f;
    int64_t step_tokens = (int64_t)f->B * f->T * tr->R;
    tr->GA = f->total_batch == -1 ? 1 : (int)(f->total_batch / step_tokens);
    int64_t epoch_steps = dataloader_total_tokens(&tr->train) / (step_tokens * tr->GA);
    tr->max_steps = f->max_steps == -1 ? (int)(epoch_steps > 0 ? epoch_steps : 1) : f->max_steps;
    if (f->warmup == -1) f->warmup = tr->max_steps / 20;
    FLAG_SHOW(f, max_steps, "%d", tr->max_steps);
    FLAG_SHOW(f, warmup, "%d", f->warmup);
    FLAG_SHOW(f, total_batch, "%lld", (long long)step_tokens * tr->GA);
    tr->run_record = (char*)malloc(CKPT_RUN_MAX); // what every checkpoint records of this run
    run_record_build(f, &tr->train, tr->has_val ? &tr->val : NULL, classifier_chunk_rows(c->Vp), tr->run_record);
    if (tr->recorded_run) run_record_check(f, &tr->train, tr->has_val ? &tr->val : NULL, classifier_chunk_rows(c->Vp), f->B * f->T,
                                           tr->recorded_run, tr->recorded_step);
    lora_base_record(tr, c); // [LoRA] the base's identity: recorded, and a resume's -e checked against it
    tr->comm.trace = f->comm_trace;
    tr->comm.timeout_s = f->comm_timeout;
    tr->comm.delay_ms = f->comm_delay;
    if (f->tune) tune_attention(f, c, &tr->comm); // -attn auto where cuDNN can run: cuDNN's or ours, measured
    if (f->tune) { // the flags left at auto: measured, or a resume's recorded choice
        TuneTrainer t = {tr, tune_build, tune_step, tune_wait, tune_release, tr->mem_baseline};
        tune_config(f, c, tr->GA, &tr->comm, &tr->launch, &t, tr->tune_choice, sizeof(tr->tune_choice), &tr->tune_mem, &tr->tune_mem_len);
    } else if (f->resume) tune_note_record(f, tr->r);
    run_record_set_choice(tr->run_record, f); // -z, -r, -offload, [groups] the layout as this run runs them: a resume that gives none runs the same
    // [LoRA] nothing chose it (given stages, a reused -tune choice without it): ZeRO-3 shards the base
    plan_lora_base_resolve(f, f->zero_stage < 3, f->zero_stage, f->zero_stage < 3 ? "the default" : "nothing chose it: ZeRO-3's default");
    c->lora_rep = c->lora_r && !strcmp(f->lora_base, "replicated"); // [LoRA] given, planned, tuned or the default above
}

// What auto became for the flags resolved once the model is built; MFU's count; the device's memory
// against the plan.
static void setup_say_model(Trainer* tr, const GPTConfig* c, const PlanRow* plan) {
    Flags* f = &tr->f;
    (void)plan; // (read on a GPU only)
    tr->flops_per_token = mfu_flops_per_token(c, f->T);
    // the settings table shows what auto became for the flags resolved only now
    if (f->io_timeout < 0) {
        double io_s = io_timeout_s(tr);
        if (io_s > 0) FLAG_SHOW(f, io_timeout, "%.0f", io_s);
        else FLAG_SHOW(f, io_timeout, "0 (forever: -comm-timeout 0)");
    }
    if (!strcmp(f->export_dtype, "auto"))
        FLAG_SHOW(f, export_dtype, "%s", f->export_hf[0] ? (f->export_path[0] && sizeof(floatX) == 2 ? "fp32 (-export-hf), bf16 (-export)" : "fp32")
                                       : f->export_path[0] ? (sizeof(floatX) == 2 ? "bf16" : "fp32") : "unused: no -export or -export-hf");
    if (g_device == DEV_CUDA)
        printf0("MFU: llm.c's count, 6N + 6*L*C*T (Llama: C read as NH*HD, N without an untied embedding) = %.3f GFLOP per token (recompute not counted), against %s\n",
                tr->flops_per_token / 1e9, tr->peak_flops > 0 ? "the GPU's BF16 dense peak" : "no known peak for this GPU (n/a)");
#ifdef __CUDACC__
    if (g_device == DEV_CUDA) { // what the device says is in use, against the plan (allocator rounding, fragmentation)
        size_t free_b, total_b;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        double used = (double)(total_b - free_b) - (double)tr->mem_baseline, want = (double)plan->total;
        int close = fabs(used - want) <= fmax(0.05 * want, 256.0 * 1048576.0);
        printf0("device memory: %.1f MiB in use beyond the context and communicator, the planner says %.1f MiB (%s)\n",
                used / 1048576.0, want / 1048576.0, close ? "within 5% or 256 MiB" : "NOT within 5% or 256 MiB: please report");
        tr->mem_startup = used;
    }
#endif
}

// [CUDA] After the first step: nothing of ours allocates in a step, so device memory that grew is a
// library's lazy allocation the plan and the start-up line did not see (NCCL's connections before
// NCCL_RUNTIME_CONNECT=0, zero.h): said, since it is what a long run's headroom lacks.
static void say_memory_after_first_step(const Trainer* tr) {
#ifdef __CUDACC__
    if (g_device != DEV_CUDA) return;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    double grew = (double)(total_b - free_b) - (double)tr->mem_baseline - tr->mem_startup;
    if (grew > 64.0 * 1048576.0)
        printf0("warning: device memory grew by %.1f MiB during the first step (a library allocated it lazily; the planner did "
                "not count it): please report\n", grew / 1048576.0);
#else
    (void)tr;
#endif
}

// The parameters: a checkpoint, a model file (llm.c's or Hugging Face's), or initialisation; [LoRA]
// the adapters from -lora-init or the checkpoint; nothing non-finite; a resume that only reads.
static void setup_parameters(Trainer* tr, const GPTConfig* c, int from_file) {
    Flags* f = &tr->f;
    Model* m = &tr->model;
    // parameters: a checkpoint, a model file, or initialisation (a line first: each can take seconds)
    if (f->resume) printf0("resume: looking for the %s complete checkpoint in %s ...\n", f->resume_step ? "requested" : "newest", f->out_dir);
    double frozen_bad = 0.0; // [LoRA] non-finite values read into the frozen base
    // [LoRA] a checkpoint holds the adapters only: the base comes from -e first (the adapters
    // initialised, then replaced by the checkpoint's: -lora-init is not read when a checkpoint is)
    int lora_resume = f->resume && c->lora_r;
    const char* peft_dir = lora_resume && tr->recorded_run ? "" : f->lora_init;
    if (!(f->resume && !lora_resume && resume_checkpoint(tr))) {
        if (from_file) printf0("loading %lld parameters from %s ...\n", (long long)m->d.num_params, f->model);
        else printf0("initialising %lld parameters from seed %d ...\n", (long long)m->d.num_params, f->seed);
        if (from_file == 2) { // Hugging Face: the same logical ranges, from the safetensors files
            HFCheckpoint ck;
            char err[2048];
            int window = peak_window_start() == 0; // VmHWM from here on: the peak while loading
            double t0 = wall_s(), before = (double)proc_status_bytes("VmRSS"); // (what is resident before: the state allocated)
            if (hf_open(&ck, f->model, err, sizeof(err))) die_user("-e %s", err);
            HFLlmcTensor lt[NUM_TENSORS];
            int nt = 0; // the model's tensors (present ones), in logical order
            for (int k = 0; k < NUM_TENSORS; k++)
                if (m->d.t[k].n) lt[nt++] = (HFLlmcTensor){m->d.t[k].name, m->d.t[k].logical, m->d.t[k].n, !m->d.t[k].io};
            if (hf_bind(&ck, lt, nt, c->Vp, err, sizeof(err))) die(1, "-e %s: %s", f->model, err);
            if (ck.cfg.bnb4) { // [QLoRA] the checkpoint's nested code book, for every dequantization
                lora_base_set_map(&m->lora, ck.dyn_differs ? ck.dyn : NULL);
                if (ck.dyn_differs)
                    printf0("note: -e %s: its nested_quant_map differs from ours in %d of 256 entries (bitsandbytes makes it at run time; torch's "
                            "CPU linspace rounds by SIMD width): its parts are dequantized with theirs, as bitsandbytes does\n", f->model, ck.dyn_differs);
            }
            frozen_bad = (double)model_load(m, hf_fill, &ck, hf_nf4_source, peft_dir, f->model);
            double largest = 4.0 * (double)hf_largest_tensor(&ck);
            hf_close(&ck);
            // what loading cost in host memory: each rank's peak above what it held before (the
            // loader's buffer of one block's range, the file pages of one tensor piece at a time)
            double* all = (double*)calloc(2 * (size_t)tr->R, sizeof(double));
            all[2 * tr->r] = (double)proc_status_bytes("VmHWM") - before;
            all[2 * tr->r + 1] = (double)proc_status_bytes("VmHWM");
            comm_sum_doubles(&tr->comm, all, 2 * tr->R);
            double most = 0, peak = 0;
            for (int r = 0; r < tr->R; r++) { most = fmax(most, all[2 * r]); peak = fmax(peak, all[2 * r + 1]); }
            printf0("loaded in %.1f s; host memory: peak resident %.0f MiB on the busiest rank%s, at most %.0f MiB above what it held before "
                    "loading (2 x the largest tensor in FP32: %.0f MiB)\n", wall_s() - t0, peak / 1048576.0, window ? " while loading" : " (the run's: VmHWM could not be reset)",
                    most / 1048576.0, 2.0 * largest / 1048576.0);
            free(all);
        } else if (from_file) {
            ModelFile mf;
            GPTConfig fc;
            model_file_open(&mf, f->model, &fc);
            frozen_bad = (double)model_load(m, model_file_fill, &mf, NULL, peft_dir, f->model);
            close(mf.fd);
        } else {
            InitCtx ic = {&m->d, (uint64_t)f->seed};
            frozen_bad = (double)model_load(m, init_fill, &ic, NULL, peft_dir, f->model);
        }
    }
    if (lora_resume) resume_checkpoint(tr); // [LoRA] the adapters' parameters, masters, m and v
    comm_sum_doubles(&tr->comm, &frozen_bad, 1); // [LoRA] the frozen base (no master)
    double bad = master_nonfinite_all(&m->z) + frozen_bad; // one pass over what was loaded
    if (bad != 0.0)
        die_user("%s: the loaded weights hold %.0f non-finite value(s). HINT: %s", tr->step > 0 ? "resume" : f->model, bad,
                 tr->step > 0 ? "-resume-step an earlier checkpoint" : "the model file is corrupt or its training diverged");
    // reading is not resuming: a resumed run that trains no step changes nothing in -o (no set-aside,
    // no LATEST, no log record removed or added) and samples only when asked (-s or -prompt given)
    tr->reading = tr->resumed && tr->max_steps <= tr->step;
    if (tr->reading && !f->sample_every_set && f->sample_every > 0) {
        f->sample_every = 0;
        FLAG_SHOW(f, sample_every, "0 (reading checkpoint %d: no step to train, -s not given)", tr->step);
    }
    if (tr->reading && f->out_dir[0]) printf0("resume: reading step %d only (-x %d trains no step): nothing in %s changes\n", tr->step, tr->max_steps, f->out_dir);
    if (tr->r == 0 && f->out_dir[0]) { // log.jsonl's records wait in memory until the run commits to -o
        tr->log = open_memstream(&tr->log_mem, &tr->log_mem_len);
        if (!tr->log) die(1, "open_memstream: %s", strerror(errno));
    }
}

static int trainer_setup(Trainer* tr, int argc, char** argv) {
    memset(tr, 0, sizeof(*tr));
    Flags* f = &tr->f;
    setup_ranks_and_flags(tr, argc, argv);
    GPTConfig c;
    int from_file, R_plan;
    setup_config(tr, &c, &from_file, &R_plan);
    if (f->tokenize[0]) {
        if (tr->r == 0) run_tokenize(f);
        return 1;
    }
    if (f->plan) {
        run_plan(f, &c, R_plan, &tr->launch);
        return 1;
    }
    setup_choose(tr, &c);
    setup_data(tr, &c);
    setup_steps(tr, &c);
    PlanRow plan; // the model: layout, ZeRO buffers, activations, workspace
    trainer_build_model(tr, &c, f->zero_stage, f->recompute, (Offload)offload_parse(f->offload), &plan);
    setup_say_model(tr, &c, &plan);
    setup_parameters(tr, &c, from_file);
    return 0;
}

// The run commits to its output directory: called before its first step (or at the end of a fresh
// run that trains none; never for a run that only reads a checkpoint). Until here a run changes
// nothing in -o but its lock, so one that fails before its first step — a corrupt step S, a
// refused flag, a bad batch in the first evaluation — leaves the directory as it found it. Rank 0:
// the leftovers of a crash are removed, the steps after the one resumed (or, for a new run with
// -n, an older run's checkpoints) are set aside with the log records after it (a new run: an older
// run's log.jsonl and tune.jsonl, whole), LATEST names the step resumed, and log.jsonl is opened
// with the records held so far. -e's file is never touched.
static void commit_out_dir(Trainer* tr) {
    const Flags* f = &tr->f;
    if (tr->committed) return;
    tr->committed = 1;
    if (tr->r != 0 || !f->out_dir[0]) return;
    ckpt_clean_leftovers(f->out_dir, f->model);
    char path[PATH_MAX], sub[PATH_MAX] = "";
    if (tr->resumed) ckpt_commit_resume(f->out_dir, tr->resumed, f->resume_step > 0, f->model);
    else if (f->ckpt_every > 0) // a new run: an older run's checkpoints would mix with ours
        ckpt_set_aside(f->out_dir, -1, ckpt_nonce_local(), "a new run (no -y 1) in this directory", f->model, sub, sizeof(sub));
    for (int k = 0; k < 2 && !tr->resumed; k++) { // a new run: an older run's logs are set aside too, never truncated
        const char* name = k ? "tune.jsonl" : "log.jsonl";
        struct stat st;
        snprintf(path, sizeof(path), "%s/%s", f->out_dir, name);
        if (stat(path, &st) != 0 || st.st_size == 0) continue;
        if (!sub[0]) ckpt_aside_dir(f->out_dir, -1, ckpt_nonce_local(), sub, sizeof(sub));
        char to[PATH_MAX + 32];
        snprintf(to, sizeof(to), "%s/%s", sub, name);
        if (rename(path, to) != 0) die(1, "-o: cannot move %s to %s: %s", path, sub, strerror(errno));
        printf("log: the earlier run's %s moved to %s (a new run, no -y 1)\n", name, sub);
    }
    if (tr->tune_mem) { // -tune's candidates, measured before the commit
        snprintf(path, sizeof(path), "%s/tune.jsonl", f->out_dir);
        FILE* fp = fopen(path, "w");
        if (!fp || fwrite(tr->tune_mem, 1, tr->tune_mem_len, fp) != tr->tune_mem_len || fclose(fp) != 0)
            die(1, "-o: writing %s failed: %s", path, strerror(errno));
        free(tr->tune_mem);
        tr->tune_mem = NULL;
    }
    fclose(tr->log); // the memory stream: its records are in log_mem
    snprintf(path, sizeof(path), "%s/log.jsonl", f->out_dir);
    tr->log = fopen(path, tr->resumed ? "a" : "w");
    if (!tr->log) die(1, "-o: cannot write %s: %s", path, strerror(errno));
    fwrite(tr->log_mem, 1, tr->log_mem_len, tr->log);
    free(tr->log_mem);
    tr->log_mem = NULL;
    log_flush(tr);
}

// Hashes of this rank's parameters, master, m and v (over its shard): reproducibility checks. Each is
// XXH64 (rng.h) of the values in layout order, fed piece by piece (the same digest however the shard
// is cut into pieces); the ranks' four digests are then combined by FNV-1a in rank order, each shard once
// ([HSDP] the first lay.R ranks: group 0's; -hpz holds the shards as flat ZeRO does, and hashes as it does). (XXH64, not
// byte-wise FNV-1a: a 1B model's state is ~5 GB, which FNV-1a hashes at ~0.5 GB/s, XXH64 ~10x faster.)
static void log_hashes(Trainer* tr) {
    Zero* z = &tr->model.z;
    StatePiece* pcs = (StatePiece*)malloc(sizeof(StatePiece) * MAX_BLOCK_TENSORS * z->lay.nblocks);
    int n = state_pieces(z, pcs);
    Xxh64 hp, hm, h1, h2;
    xxh64_init(&hp, 0); xxh64_init(&hm, 0); xxh64_init(&h1, 0); xxh64_init(&h2, 0);
    float* buf = NULL;
    floatX* xbuf = NULL;
    for (int b = 0, i = 0; b < z->lay.nblocks; b++) { // parameters: the BF16 values of the shard
        int64_t lo = z->lay.r * z->lay.S[b];
        Piece pc[MAX_BLOCK_TENSORS];
        int k = layout_pieces(&z->lay, b, lo, lo + z->lay.S[b], pc);
        int64_t at = lo - zero_opt_lo(z, b); // (where the shard starts in the block's optimizer range)
        for (int j = 0; j < k; j++, i++) {
            xbuf = (floatX*)realloc(xbuf, sizeof(floatX) * pc[j].len);
            zero_shard_get(z, b, at + pc[j].local, xbuf, pc[j].len);
            xxh64_update(&hp, xbuf, sizeof(floatX) * pc[j].len);
        }
        EncRun er[MAX_BLOCK_TENSORS]; // [QLoRA] a 4-bit tensor's bytes in the shard (no pieces)
        int ne = layout_encoded(&z->lay, b, lo, lo + z->lay.S[b], er);
        for (int j = 0; j < ne; j++) {
            xbuf = (floatX*)realloc(xbuf, sizeof(floatX) * er[j].len);
            zero_shard_get(z, b, at + er[j].local, xbuf, er[j].len);
            xxh64_update(&hp, xbuf, sizeof(floatX) * er[j].len);
        }
    }
    for (int i = 0; i < n; i++) {
        buf = (float*)realloc(buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 0, pcs[i].opt_index, buf, pcs[i].len);
        xxh64_update(&hm, buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 1, pcs[i].opt_index, buf, pcs[i].len);
        xxh64_update(&h1, buf, sizeof(float) * pcs[i].len);
        zero_state_get(z, 2, pcs[i].opt_index, buf, pcs[i].len);
        xxh64_update(&h2, buf, sizeof(float) * pcs[i].len);
    }
    // combine the ranks' hashes in rank order (the same value on every rank)
    uint64_t* all = (uint64_t*)malloc(sizeof(uint64_t) * tr->R * 4);
    uint64_t mine[4] = {xxh64_digest(&hp), xxh64_digest(&hm), xxh64_digest(&h1), xxh64_digest(&h2)};
    for (int k = 0; k < 4; k++) {
        uint64_t* col = (uint64_t*)malloc(sizeof(uint64_t) * tr->R);
        comm_allgather_u64(&tr->comm, mine[k], col);
        for (int r = 0; r < tr->R; r++) all[k * tr->R + r] = col[r];
        free(col);
    }
    uint64_t out[4]; // each shard once: [HSDP] group 0's ranks (0 .. lay.R-1) hold them, and every replica must hold the same
    for (int k = 0; k < 4; k++) {
        out[k] = fnv1a(FNV_INIT, all + k * tr->R, sizeof(uint64_t) * z->lay.R);
        for (int w = z->lay.R; w < tr->R; w++)
            if (all[k * tr->R + w] != all[k * tr->R + w % z->lay.R])
                die(1, "internal error: step %d: rank %d's %s differ from rank %d's, whose shard it replicates (-shard-group): the "
                       "replicas diverged", tr->step, w, k == 0 ? "parameters" : k == 1 ? "master weights" : k == 2 ? "Adam m" : "Adam v", w % z->lay.R);
    }
    printf0("hashes: params %016llx master %016llx m %016llx v %016llx\n", (unsigned long long)out[0],
            (unsigned long long)out[1], (unsigned long long)out[2], (unsigned long long)out[3]);
    free(all); free(buf); free(xbuf); free(pcs);
}

// Exit codes (docs/reliability.md "Exit codes"). die() uses 1 and 2 as well.
// 3 is a collective past its timeout (comm_poll, the NCCL watchdog in zero.h), a rank lost (NCCL's
// remote error, a closed rendezvous connection), or a rendezvous that failed (a peer that never
// arrived or sent garbage).
// 5: stopped by a signal (below), after a checkpoint when -o is set: resume with -y 1.
enum { ZT_EXIT_OK = 0, ZT_EXIT_RUNTIME = 1, ZT_EXIT_BAD_INPUT = 2, ZT_EXIT_DIVERGED = 4, ZT_EXIT_STOPPED = 5 };


// "42s", "3m05s", "2h07m": the time left at the mean pace so far.
static void fmt_duration(char* out, size_t cap, double s) {
    if (!(s >= 0) || s > 1e8) snprintf(out, cap, "?");
    else if (s < 60) snprintf(out, cap, "%.0fs", s);
    else if (s < 3600) snprintf(out, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else snprintf(out, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

// One step's line on stdout (with the ETA at the mean pace since this run's first step) and in
// log.jsonl; counts consecutive skipped steps (non-finite norms and updates) for -max-skips.
static void log_step(Trainer* tr, const StepResult* s) {
    int64_t step_tokens = (int64_t)tr->GA * tr->R * tr->model.B * tr->model.T;
    double tok_s = step_tokens / (s->ms / 1000.0);
    int done = s->step + 1 - tr->start_step, left = tr->max_steps - (s->step + 1);
    if (done == 1) { tr->t_first = wall_s(); tr->first_s = s->ms / 1000.0; stop_say_cost(tr, tr->first_s); say_memory_after_first_step(tr); }
    char eta[32];
    fmt_duration(eta, sizeof(eta), left * (done > 1 ? (wall_s() - tr->t_first) / (done - 1) : tr->first_s));
    char mfu[64] = "";
    if (g_device == DEV_CUDA) { // model FLOPs per second per GPU over the GPU's BF16 dense peak
        if (tr->peak_flops > 0) snprintf(mfu, sizeof(mfu), " | mfu %.1f%%", 100.0 * tr->flops_per_token * tok_s / tr->R / tr->peak_flops);
        else snprintf(mfu, sizeof(mfu), " | mfu n/a");
    }
    printf0("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s | eta %s%s\n", s->step + 1, tr->max_steps,
            s->loss, s->lr, s->norm, s->ms, tok_s, mfu, eta,
            s->skipped == 2 ? " | SKIPPED: no counted target in the batch (loss mask)"
            : s->skipped == 3 ? " | SKIPPED: non-finite update (AdamW would overflow; weights unchanged)"
            : s->skipped     ? " | SKIPPED: non-finite gradient norm" : "");
    if (!isfinite(s->lr)) die(1, "internal error: step %d: learning rate %g is not finite (the flags were checked)", s->step + 1, s->lr);
    if (tr->log) {
        fprintf(tr->log, "{\"step\": %d", s->step + 1);
        json_num(tr->log, "loss", s->loss);
        json_num(tr->log, "lr", s->lr);
        json_num(tr->log, "norm", s->norm);
        fprintf(tr->log, ", \"ms\": %.3f, \"tok_s\": %.1f, \"skipped\": %d, \"comm_wait_ms\": %.3f", s->ms, tok_s, s->skipped,
                s->comm_wait_s * 1000.0);
        size_t tagged = 0; // rank 0's memory: what the tagged allocator holds, and the process's peak RSS (dev/plot.py)
        for (int t = 0; t < TAG_COUNT; t++) tagged += g_mem_bytes[t];
        fprintf(tr->log, ", \"mem_tagged\": %zu, \"vmhwm\": %lld", tagged, (long long)peak_rss_bytes());
        if (g_device == DEV_CUDA) json_num(tr->log, "mfu", tr->peak_flops > 0 ? tr->flops_per_token * tok_s / tr->R / tr->peak_flops : NAN);
        for (int k = 0; k < COLL_KINDS; k++)
            fprintf(tr->log, ", \"%s\": [%lld, %lld]", coll_name[k], (long long)s->count[k], (long long)s->bytes[k]);
        fprintf(tr->log, "}\n");
        log_flush(tr);
    }
    tr->skips = s->skipped == 1 || s->skipped == 3 ? tr->skips + 1 : 0; // every rank sees the same norm and flag: every rank counts the same
}

// Read back and log the step still in flight (if any): the host waits for the device only here,
// before an evaluation, a sample or a checkpoint, and after the last step.
static void flush_step(Trainer* tr) {
    StepResult p = step_read_back(tr);
    if (p.valid) log_step(tr, &p);
}

// -max-skips consecutive non-finite steps (norm or update): the run has diverged.
static int diverged(Trainer* tr) {
    printf0("error: %d consecutive steps skipped (non-finite gradient norm or update): the run has diverged (-max-skips %d). "
            "HINT: lower -l, or resume from an earlier checkpoint with -y 1 -resume-step\n", tr->skips, tr->f.max_skips);
    return ZT_EXIT_DIVERGED;
}

// The training loop. Returns the exit code (the same on every rank).
static int train_loop_run(Trainer* tr) {
    const Flags* f = &tr->f;
    int start = tr->step, failed_ckpts = 0;
    tr->start_step = start;
    int stop = 0;
    stop_signals_arm(1); // (disarmed again below: outside the loop a signal ends the process at once)
    for (;;) {
        int step = tr->step, last = step >= tr->max_steps;
        tr->comm.step = step; // collectives' messages name the step being evaluated, saved or trained
        if (!last) stop = comm_any(&tr->comm, g_stop_signal != 0); // a stop asked of any rank: every rank ends here
        if (stop) last = 1;
        int val = tr->has_val && !stop && (step % f->val_every == 0 || last); // (a stop does not evaluate or sample: the grace period is short)
        int sample = !stop && ((f->sample_every > 0 && (step % f->sample_every == 0 || last) && step > 0) || (last && tr->nprompts > 0)); // -prompt: also at the end
        int ckpt = step > start && ((f->ckpt_every > 0 && (step % f->ckpt_every == 0 || last)) || (stop && f->out_dir[0]));
        if (val || sample || ckpt || last) {
            flush_step(tr);
            if (f->max_skips > 0 && tr->skips >= f->max_skips) return diverged(tr);
        }
        if (val) {
            if (step == start) { // the first evaluation can take seconds before any step line
                int whole, nb = eval_batches(tr, &whole);
                printf0("step %5d | evaluating the val loss on %d batch(es) of %d x %d tokens per rank%s ...\n", step, nb, tr->model.B, tr->model.T,
                        whole ? " (the whole val set)" : "");
            }
            float vl = evaluate(tr);
            printf0("step %5d | val loss %.6f\n", step, vl);
            if (tr->log) { fprintf(tr->log, "{\"step\": %d", step); json_num(tr->log, "val_loss", vl); fprintf(tr->log, "}\n"); log_flush(tr); }
        }
        if (sample) sample_text(tr);
        if (ckpt) {
            int rc = save_checkpoint(tr, last);
            if (rc == CKPT_NONFINITE) return ZT_EXIT_DIVERGED;
            if (rc != 0 && last) { printf0("error: the final checkpoint (step %d) failed\n", step); return ZT_EXIT_RUNTIME; }
            if (rc != 0) failed_ckpts++; // training goes on; the run ends with exit code 1
        }
        if (last) break;
        if (!tr->committed) commit_out_dir(tr); // (the first step: -o changes from here on)
        comm_reset_stats(&tr->comm);
        StepResult s = train_step(tr); // on one GPU: the previous step's result
        if (s.valid) log_step(tr, &s);
        if (f->max_skips > 0 && tr->skips >= f->max_skips) return diverged(tr);
    }
    if (!tr->reading && !(stop && tr->step == start)) commit_out_dir(tr); // a fresh run that trained no step (-x 0) still starts its log
    if (failed_ckpts) printf0("error: %d checkpoint(s) failed during the run (see above)\n", failed_ckpts);
    if (stop) {
        int sig = g_stop_signal;
        if (tr->step == start) printf0("stopped (%s) before the first step of this run: nothing to save\n", sig ? stop_signal_name(sig) : "another rank's signal");
        else if (f->out_dir[0]) printf0("stopped (%s) after step %d: its checkpoint is in %s; resume with -y 1 (exit code 5)\n", sig ? stop_signal_name(sig) : "another rank's signal", tr->step, f->out_dir);
        else printf0("stopped (%s) after step %d: no -o, nothing saved (exit code 5)\n", sig ? stop_signal_name(sig) : "another rank's signal", tr->step);
        return failed_ckpts ? ZT_EXIT_RUNTIME : ZT_EXIT_STOPPED;
    }
    return failed_ckpts ? ZT_EXIT_RUNTIME : ZT_EXIT_OK;
}

// The loop with the stop signals armed for its duration only.
static int train_loop(Trainer* tr) {
    int rc = train_loop_run(tr);
    stop_signals_arm(0);
    return rc;
}

static void trainer_free(Trainer* tr) {
    if (tr->log) fclose(tr->log);
    free(tr->log_mem); // (a run that only read a checkpoint: its records are dropped)
    free(tr->resumed);
    free(tr->recorded_run);
    free(tr->run_record);
    trainer_free_model(tr);
    dataloader_free(&tr->train);
    if (tr->has_val) dataloader_free(&tr->val);
    if (tr->has_tok) tokenizer_free(&tr->tok);
    for (int p = 0; p < tr->nprompts; p++) free(tr->prompt_ids[p]);
    free(tr->prompt_ids);
    free(tr->prompt_len);
    free(tr->prompt_added);
}

// [LoRA] -lora-export: the adapters at the end of training.
static void export_lora(Trainer* tr) {
    char err[8192];
    if (write_adapter(tr, tr->f.lora_export, err, sizeof(err)))
        die(1, "-lora-export %s: %s. HINT: check free disk space and permissions", tr->f.lora_export, err);
    printf0("exported the adapters at step %d to %s (PEFT: adapter_model.safetensors F32, adapter_config.json)\n", tr->step, tr->f.lora_export);
}

// -export and -export-hf at the end of training (every rank takes part: blocks are gathered).
static void export_model(Trainer* tr) {
    const Flags* f = &tr->f;
    const char* dt = f->export_dtype;
    if (f->lora_export[0]) export_lora(tr);
    if (f->export_path[0]) {
        int fp32 = !strcmp(dt, "fp32") || (!strcmp(dt, "auto") && sizeof(floatX) == 4);
        double saved = io_wait_begin(tr);
        if (write_model_file(&tr->model.z, &tr->model.cfg, f->export_path, fp32, NULL, NULL) != 0) die(1, "-export %s failed", f->export_path);
        io_wait_end(tr, saved);
        printf0("exported the model at step %d to %s (llm.c, %s)\n", tr->step, f->export_path, fp32 ? "FP32 from the master weights" : "BF16 parameters");
    }
    if (f->export_hf[0]) {
        StDtype hd = !strcmp(dt, "bf16") ? ST_BF16 : !strcmp(dt, "fp16") ? ST_F16 : ST_F32;
        double saved = io_wait_begin(tr);
        HFConfig hc;
        char err[1024];
        if (hf_export_config(f, &tr->model.cfg, &hc, err, sizeof(err))) die_user("-export-hf %s: %s", f->export_hf, err); // (checked at start-up)
        if (write_hf_checkpoint(&tr->model, &hc, f->export_hf, hd) != 0) die(1, "-export-hf %s failed", f->export_hf);
        char tpath[4200], terr[1024], tnote[512] = "";  // the tokenizer beside it (tokenizer.json, ...: AutoTokenizer loads the directory)
        const char* tname = tokenizer_for_model(f->tokenizer, TOKENIZER_DEFAULT_PATH, f->model, tpath, sizeof(tpath));
        if (g_rank == 0 && tokenizer_export_files(tname, f->merges, f->export_hf, tr->model.cfg.V, tr->model.cfg.maxT, tnote, sizeof(tnote), terr, sizeof(terr)))
            printf0("warning: -export-hf %s: no tokenizer files written: %s\n", f->export_hf, terr);
        else if (tnote[0]) printf0("-export-hf %s: %s\n", f->export_hf, tnote);
        io_wait_end(tr, saved);
        if (tr->model.d.lora.r) // [LoRA]
            printf0("exported the merged model at step %d to %s (Hugging Face %s, %s: W + %g B A on %d module(s) a layer, in FP32 from the "
                    "adapters' master weights and the frozen base%s)\n", tr->step, f->export_hf, hf_archs[hc.arch].cls,
                    hd == ST_F32 ? "F32" : hd == ST_F16 ? "F16" : "BF16", (double)tr->model.d.lora.scale, tr->model.d.lora.nmods,
                    tr->model.lora.deq ? ", its 4-bit matrices dequantized: W is what the forward multiplied by" : "");
        else
            printf0("exported the model at step %d to %s (Hugging Face %s, %s)\n", tr->step, f->export_hf, hf_archs[hc.arch].cls,
                    hd == ST_F32 ? "F32 from the master weights" : hd == ST_F16 ? "F16 from the master weights" : "BF16 parameters");
    }
}

static int train_main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); // line-buffered even into a file or a pipe: a background run shows each line as it happens
    Trainer* tr = (Trainer*)calloc(1, sizeof(Trainer));
    if (trainer_setup(tr, argc, argv)) { // -plan: nothing allocated, nothing to free
        comm_free(&tr->comm);
        comm_finalize();
        free(tr);
        return 0;
    }
    print_setup(&tr->f, &tr->comm, &tr->launch, &tr->model.d, &tr->model.z, tr->model.B, tr->model.T, tr->model.recompute, tr->GA,
                tr->max_steps, dataloader_total_tokens(&tr->train), tr->has_val ? dataloader_total_tokens(&tr->val) : 0);
    if (tr->log) flags_log_json(&tr->f, tr->log); // every flag as given and resolved, whatever -verbose printed
    log_memory(tr, "start");
    int rc = train_loop(tr);
    if (rc == ZT_EXIT_OK) export_model(tr);
    if (rc == ZT_EXIT_OK && tr->f.log_hash) log_hashes(tr);
    log_memory(tr, "end");
    offload_report(&tr->model.z); // [offload] how often the overflow check read the state
    if (!tr->model.z.offload && tr->checks_proved + tr->checks_run > 0)
        printf0("the overflow check was proved by its bound on %lld step(s) (nothing read) and read the state on %lld "
                "(the first after a start or a load, or when the bound was too loose)\n",
                (long long)tr->checks_proved, (long long)tr->checks_run);
    int log_failed = tr->log_failed; // rank 0's; every rank ends with the same code
    comm_broadcast(&tr->comm, &log_failed, sizeof(log_failed), 0);
    if (log_failed) printf0("error: writes to %s/log.jsonl failed (see above)\n", tr->f.out_dir);
    if (rc == ZT_EXIT_OK && log_failed) rc = ZT_EXIT_RUNTIME;
    trainer_free(tr);
    comm_free(&tr->comm);
    comm_finalize();
    free(tr);
    return rc;
}

#ifndef TESTING
int main(int argc, char** argv) { return train_main(argc, argv); }
#endif
