#!/usr/bin/python3
"""dev/reference.py — an independent PyTorch reference for zerotrain's GPT-2.

It writes the small binary fixtures the C tests compare against: the initial model (in llm.c's
checkpoint format), its logits and loss on one batch, the gradient of every parameter tensor,
and a 10-step AdamW trajectory (loss, gradient norm, learning rate, final parameters).

Independent of what, and why:
  - of our C code and of llm.c's hand-written backward: the model is built from PyTorch's own
    layers (nn.Embedding, nn.LayerNorm, nn.Linear, nn.GELU(approximate='tanh'), F.cross_entropy)
    and differentiated by autograd; the optimizer is torch.optim.AdamW. A mistake in how we
    derived a backward pass cannot be repeated here, so agreement means something.
  - of our random numbers (rng.h): the C side does not re-create the initial weights, it loads
    them from ref_model.bin, so the reference only has to be deterministic with itself.
  - of float32 rounding: everything is computed in float64 ("truth") and only stored as float32.
    The initial weights are drawn in float32 and then widened, so the float32 model file holds
    exactly the values the float64 model starts from.
What is hand-written: the gradient clip (llm.c's rule, not clip_grad_norm_, which adds 1e-6 to
the norm) and the learning-rate schedule (llm.c's warmup + cosine).

Usage:
  /usr/bin/python3 dev/reference.py --out test/fixtures     # write the fixtures
  /usr/bin/python3 dev/reference.py --check test/fixtures   # regenerate, compare; exit 0/1
  /usr/bin/python3 dev/reference.py --fdcheck               # finite differences vs autograd
  python dev/reference.py --hf-logits DIR TOKENS OUT         # logits of a -export-hf checkpoint
                                                             # (needs the safetensors package)
  /usr/bin/python3 dev/reference.py --llama-grads CONFIG WEIGHTS TOKENS OUT
                                       # a Llama-family model (RMSNorm, RoPE, GQA, SwiGLU) in float64:
                                       # logits, loss, every gradient (test/test_llama.h)
  /usr/bin/python3 dev/reference.py --lora-grads CONFIG WEIGHTS TOKENS OUT
                                       # LoRA adapters on a GPT-2 or Llama-family base in float64:
                                       # loss, dA and dB of every module (test/test_lora.h)
  --masked-grads and --llama-grads take an optional segment table after the targets (packed
  examples, -doc-attention 1): each example attends only to itself (an explicit block-diagonal
  causal mask) at its own position ids (test/test_packing.h)
Exit status: 0 ok, 1 mismatch, 2 usage error.

Limits: CPU only, single thread, float64 — about a second for this tiny config, far too slow for
anything bigger. Tested with Debian 12's python3-torch 1.13 (no scaled_dot_product_attention, so
attention is written out with matmul + masked softmax, as in nanoGPT's slow path).
"""
import argparse
import math
import os
import struct
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ------------------------------------------------------------------------------------------------
# Configuration. Odd sizes on purpose (T not a multiple of anything, HS = 12, V < Vp) so that
# indexing mistakes show up. Everything here is also written to the archive ("config", "hparams").

V, Vp, maxT, L, NH, C = 101, 128, 48, 2, 3, 36   # vocab, padded vocab, max seq len, layers, heads, channels
HS = C // NH                                     # head size = 12
B, T, STEPS = 2, 37, 10                          # batch, sequence length, training steps
INIT_SEED, TOKEN_SEED = 1234, 42

LR_MAX, WARMUP, FINAL_LR_FRAC = 1e-2, 2, 0.1
BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 0.9, 0.95, 1e-8, 0.1, 1.0
LN_EPS = 1e-5

MODEL_MAGIC, MODEL_VERSION = 20240326, 3         # llm.c checkpoint header, version 3 = FP32
ARCHIVE_MAGIC, ARCHIVE_VERSION = b"ZTFX", 1
DTYPE_F32, DTYPE_I32 = 0, 1
TOLERANCE = 1e-6                                 # ‖a−b‖/‖b‖ per float tensor in --check

# ------------------------------------------------------------------------------------------------
# The parameter table: llm.c's 16 tensors in llm.c's order. One row per tensor:
#   llm.c name, PyTorch parameter ("{l}" = one per layer, stacked to a leading L), llm.c shape
#   (documentation; the code derives it from the modules), init, AdamW weight decay?
# Init kinds: "matrix" ~ N(0, 0.02); "residual" ~ N(0, 0.02/sqrt(2L)) (projections into the
# residual stream); "bias" ~ N(0, 0.02) (nonzero so bias gradients matter); "ln_weight" ~
# 1 + N(0, 0.1); "wte" = "matrix" on rows [0, V), rows [V, Vp) exactly zero.

PARAMS = [
    ("wte",      "wte.weight",              "(Vp, C)",      "wte",       True),
    ("wpe",      "wpe.weight",              "(maxT, C)",    "matrix",    True),
    ("ln1w",     "h.{l}.ln_1.weight",       "(L, C)",       "ln_weight", False),
    ("ln1b",     "h.{l}.ln_1.bias",         "(L, C)",       "bias",      False),
    ("qkvw",     "h.{l}.attn.c_attn.weight", "(L, 3C, C)",  "matrix",    True),
    ("qkvb",     "h.{l}.attn.c_attn.bias",  "(L, 3C)",      "bias",      False),
    ("attprojw", "h.{l}.attn.c_proj.weight", "(L, C, C)",   "residual",  True),
    ("attprojb", "h.{l}.attn.c_proj.bias",  "(L, C)",       "bias",      False),
    ("ln2w",     "h.{l}.ln_2.weight",       "(L, C)",       "ln_weight", False),
    ("ln2b",     "h.{l}.ln_2.bias",         "(L, C)",       "bias",      False),
    ("fcw",      "h.{l}.mlp.c_fc.weight",   "(L, 4C, C)",   "matrix",    True),
    ("fcb",      "h.{l}.mlp.c_fc.bias",     "(L, 4C)",      "bias",      False),
    ("fcprojw",  "h.{l}.mlp.c_proj.weight", "(L, C, 4C)",   "residual",  True),
    ("fcprojb",  "h.{l}.mlp.c_proj.bias",   "(L, C)",       "bias",      False),
    ("lnfw",     "ln_f.weight",             "(C)",          "ln_weight", False),
    ("lnfb",     "ln_f.bias",               "(C)",          "bias",      False),
]


def module_params(model, path):
    """The nn.Parameters behind one table row: L of them for "{l}" rows, else one."""
    if "{l}" in path:
        return [model.get_parameter(path.format(l=l)) for l in range(L)]
    return [model.get_parameter(path)]


def llmc_tensor(model, path, grad=False):
    """One llm.c tensor (or its gradient) gathered from the modules, in llm.c's shape."""
    ps = [p.grad if grad else p for p in module_params(model, path)]
    return torch.stack(ps) if "{l}" in path else ps[0]


# ------------------------------------------------------------------------------------------------
# The model: GPT-2 as in nanoGPT / llm.c, built only from PyTorch layers.
# nn.Linear(in, out) keeps weight as (out, in) and computes x @ W^T + b — exactly llm.c's layout
# (qkvw (3C, C), fcw (4C, C), fcprojw (C, 4C)), so no transposes are needed anywhere.

class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)   # x (B,T,C) -> qkv (B,T,3C): q, k, v in that order
        self.c_proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(maxT, maxT, dtype=torch.bool)))
        self.doc_mask = None                # packed examples: a (B,1,T,T) block-diagonal causal mask instead

    def forward(self, x):                   # x (B,T,C) -> y (B,T,C)
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B,T,C) -> (B,T,NH,HS) -> (B,NH,T,HS)
        q, k, v = (z.view(b, t, NH, HS).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))           # (B,NH,T,T)
        mask = self.mask[:t, :t] if self.doc_mask is None else self.doc_mask
        att = att.masked_fill(~mask, float("-inf"))                        # causal (per example when packed)
        att = F.softmax(att, dim=-1)
        y = att @ v                                                        # (B,NH,T,HS)
        y = y.transpose(1, 2).contiguous().view(b, t, C)                   # heads back side by side
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):                   # (B,T,C) -> (B,T,4C) -> (B,T,C)
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=LN_EPS)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(C, eps=LN_EPS)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)      # padded vocab; rows [V, Vp) stay zero
        self.wpe = nn.Embedding(maxT, C)
        self.h = nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=LN_EPS)

    def forward(self, idx, targets):        # idx, targets (B,T) -> logits (B,T,V), mean loss
        t = idx.shape[1]
        pos = torch.arange(t, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight[:V])    # tied head; padded rows give no logits
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        return logits, loss


def llmc_shapes():
    """llm.c shape of each table row, read off a freshly built model."""
    model = GPT()
    return {name: tuple(llmc_tensor(model, path).shape) for name, path, *_ in PARAMS}


def init_weights():
    """The initial weights as float32 llm.c tensors, drawn in table order from one stream seeded
    with INIT_SEED (the same numbers as torch.manual_seed(INIT_SEED) + torch.randn)."""
    g = torch.Generator().manual_seed(INIT_SEED)

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    shapes, weights = llmc_shapes(), {}
    for name, _, _, kind, _ in PARAMS:
        shape = shapes[name]
        if kind == "wte":                                  # only the V real rows are drawn
            w = torch.zeros(shape, dtype=torch.float32)
            w[:V] = normal((V, C), 0.02)
        elif kind in ("matrix", "bias"):
            w = normal(shape, 0.02)
        elif kind == "residual":
            w = normal(shape, 0.02 / math.sqrt(2 * L))
        elif kind == "ln_weight":
            w = 1.0 + normal(shape, 0.1)
        else:
            raise ValueError(kind)
        weights[name] = w
    return weights


def build_model(weights):
    """A float64 GPT holding `weights` (float32 llm.c tensors; widening to float64 is exact)."""
    model = GPT().double()
    with torch.no_grad():
        for name, path, *_ in PARAMS:
            w = weights[name].double()
            for l, p in enumerate(module_params(model, path)):
                p.copy_(w[l] if "{l}" in path else w)
    return model


def make_stream():
    """One token stream of STEPS*B*T + 1 ids, laid out as llm.c's unshuffled loader reads it."""
    g = torch.Generator().manual_seed(TOKEN_SEED)
    return torch.randint(0, V, (STEPS * B * T + 1,), generator=g)


def make_tokens():
    """(STEPS, B, T+1) token ids; batch s: inputs = [s,:,:T], targets = [s,:,1:].
    Row b of batch s is stream[(s*B+b)*T : (s*B+b)*T + T+1]: batch s is the stream's tokens
    [s*B*T, s*B*T + B*T + 1), exactly llm.c's unshuffled order, so the C side can write the
    stream to a token shard and train on it through its real data loader (-shuffle 0)."""
    stream = make_stream()
    rows = [stream[(s * B + b) * T:(s * B + b) * T + T + 1] for s in range(STEPS) for b in range(B)]
    return torch.stack(rows).reshape(STEPS, B, T + 1)


def forward_backward(model, tokens, s):
    """Zero the grads, run batch s forward and backward; returns (logits, loss)."""
    for p in model.parameters():
        p.grad = None
    logits, loss = model(tokens[s, :, :T], tokens[s, :, 1:])
    loss.backward()
    return logits, loss


# ------------------------------------------------------------------------------------------------
# Training: llm.c's schedule and clip, torch's AdamW.

def learning_rate(s):
    """llm.c: linear warmup over WARMUP steps, then cosine from LR_MAX down to LR_MAX*FINAL_LR_FRAC."""
    if s < WARMUP:
        return LR_MAX * (s + 1) / WARMUP
    min_lr = LR_MAX * FINAL_LR_FRAC
    ratio = (s - WARMUP) / (STEPS - WARMUP)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR_MAX - min_lr)


def train(weights, tokens):
    """STEPS AdamW steps from `weights`; returns per-step loss, grad norm, lr and the final model."""
    model = build_model(weights)
    decay, no_decay = [], []
    for name, path, _, _, wd in PARAMS:
        (decay if wd else no_decay).extend(module_params(model, path))
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR_MAX, betas=(BETA1, BETA2), eps=EPS)
    losses, norms, lrs = [], [], []
    for s in range(STEPS):
        _, loss = forward_backward(model, tokens, s)
        grads = [p.grad for p in model.parameters()]
        norm = torch.sqrt(sum((g * g).sum() for g in grads)).item()   # global L2, before clip
        if norm > GRAD_CLIP:                                           # llm.c's clip, no +1e-6
            for g in grads:
                g.mul_(GRAD_CLIP / norm)
        lr = learning_rate(s)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        losses.append(loss.item())
        norms.append(norm)
        lrs.append(lr)
    return losses, norms, lrs, model


# ------------------------------------------------------------------------------------------------
# File formats.
# ref_model.bin: llm.c checkpoint v3 — 256 int32 header, then the 16 tensors as float32.
# ref_out.bin: "ZTFX", int32 version, int32 count, then per entry: char name[64] (NUL-padded),
#   int32 dtype (0 f32, 1 i32), int32 ndim, int32 dims[4] (unused = 1), prod(dims) elements.
# All little-endian. test/fixture.h reads the archive in C.

def model_header():
    h = np.zeros(256, dtype="<i4")
    h[:8] = [MODEL_MAGIC, MODEL_VERSION, maxT, V, L, NH, C, Vp]
    return h


def write_model(path, weights):
    with open(path, "wb") as f:
        f.write(model_header().tobytes())
        for name, *_ in PARAMS:
            f.write(weights[name].numpy().astype("<f4").tobytes())


def read_model(path):
    """(header int32[256], {name: float32 array in llm.c shape}); raises ValueError if malformed.
    Reads llm.c's version 3 (FP32) and version 5 (BF16, widened exactly to FP32)."""
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    if header[0] != MODEL_MAGIC or header[1] not in (3, 5):
        raise ValueError(f"{path}: not an llm.c model file (magic {header[0]}, version {header[1]})")
    esize = 4 if header[1] == 3 else 2
    shapes, tensors, off = llmc_shapes(), {}, 1024
    for name, *_ in PARAMS:
        n = int(np.prod(shapes[name]))
        if off + esize * n > len(raw):
            raise ValueError(f"{path}: truncated at {name}")
        if esize == 4:
            t = np.frombuffer(raw, dtype="<f4", count=n, offset=off)
        else:  # BF16: the upper 16 bits of a float32
            t = (np.frombuffer(raw, dtype="<u2", count=n, offset=off).astype("<u4") << 16).view("<f4")
        tensors[name] = t.reshape(shapes[name])
        off += esize * n
    if len(header) != 256 or off != len(raw):
        raise ValueError(f"{path}: {len(raw)} bytes, expected {off}")
    return header, tensors


def write_logits(tensors, tokens_path, out_path, what):
    """The (B, T, V) logits of the model made of `tensors` (llm.c names and shapes, numpy) on the
    tokens of tokens_path (int32 file: B, T, then B*T ids), written to out_path as float32."""
    raw = np.fromfile(tokens_path, dtype="<i4")
    b, t = int(raw[0]), int(raw[1])
    idx = torch.from_numpy(raw[2:2 + b * t].astype(np.int64)).reshape(b, t)
    model = build_model({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()})
    with torch.no_grad():
        logits, _ = model(idx, idx)
    logits.float().numpy().astype("<f4").tofile(out_path)
    print(f"logits ({b}, {t}, {V}) of {what} written to {out_path}")


def logits_of(model_path, tokens_path, out_path):
    """--logits: the float64 model loaded from an llm.c file (written by ./train -export, say)
    applied to tokens (int32 file: B, T, then B*T ids); writes the (B, T, V) logits as float32."""
    header, tensors = read_model(model_path)
    if list(header[2:8]) != [maxT, V, L, NH, C, Vp]:
        raise ValueError(f"{model_path}: model {list(header[2:8])} is not the reference's {[maxT, V, L, NH, C, Vp]}")
    write_logits(tensors, tokens_path, out_path, model_path)


def hf_logits_of(model_dir, tokens_path, out_path):
    """--hf-logits: as --logits, for a Hugging Face checkpoint written by ./train -export-hf (F32 or
    F16): config.json + model.safetensors read with the safetensors package and numpy (no
    transformers), Conv1D weights (stored (in, out)) transposed into nn.Linear's (out, in)."""
    import json
    from safetensors import safe_open
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    got = [cfg["n_positions"], cfg["vocab_size"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"]]
    if got != [maxT, V, L, NH, C] or cfg.get("model_type") != "gpt2" or not cfg.get("tie_word_embeddings", True):
        raise ValueError(f"{model_dir}: config {got} is not the reference's GPT-2 {[maxT, V, L, NH, C]}")
    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="numpy") as f:
        if f.metadata() != {"format": "pt"}:
            raise ValueError(f"{model_dir}: metadata {f.metadata()}, transformers needs {{'format': 'pt'}}")
        hf = {k: f.get_tensor(k).astype(np.float32) for k in f.keys()}
    if "lm_head.weight" in hf:
        raise ValueError("lm_head.weight is stored: the tied head should be omitted")
    conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    shapes, tensors = llmc_shapes(), {}
    for name, path, *_ in PARAMS:
        keys = [path.format(l=l) for l in range(L)] if "{l}" in path else [path]
        ts = [hf.pop(k).T if k.endswith(conv1d) else hf.pop(k) for k in keys]
        t = np.stack(ts) if "{l}" in path else ts[0]
        if name == "wte":   # V rows stored; the padded rows are zero
            t = np.concatenate([t, np.zeros((Vp - V, C), dtype=np.float32)])
        if t.shape != shapes[name]:
            raise ValueError(f"{model_dir}: {name} has shape {t.shape}, expected {shapes[name]}")
        tensors[name] = t
    if hf:
        raise ValueError(f"{model_dir}: unexpected tensors {sorted(hf)}")
    write_logits(tensors, tokens_path, out_path, model_dir)


def read_tokens(tokens_path):
    """The tokens file of --masked-grads / --llama-grads: int32 B, T, then B*T inputs, B*T targets and,
    optionally, B*T segment table entries (seg[b, t] = the index of the first token of t's example
    in row b: packed examples). Returns idx, tgt (B, T) int64 and the example mask and position ids
    of the packing (None, None without a table)."""
    raw = np.fromfile(tokens_path, dtype="<i4")
    b, t = int(raw[0]), int(raw[1])
    if raw.size not in (2 + 2 * b * t, 2 + 3 * b * t):
        raise ValueError(f"{tokens_path}: {raw.size} int32, expected 2 + 2*B*T or 2 + 3*B*T")
    idx = torch.from_numpy(raw[2:2 + b * t].astype(np.int64)).reshape(b, t)
    tgt = torch.from_numpy(raw[2 + b * t:2 + 2 * b * t].astype(np.int64)).reshape(b, t)
    if raw.size == 2 + 2 * b * t:
        return idx, tgt, None, None
    seg = torch.from_numpy(raw[2 + 2 * b * t:].astype(np.int64)).reshape(b, t)
    return (idx, tgt) + packing_of(seg)


def packing_of(seg):
    """From a segment table (B, T): the block-diagonal causal mask (B, 1, T, T) — query i sees key j
    iff j <= i and both are in the same example, the examples numbered by counting starts — and the
    per-example position ids (B, T), counted from 0 at each example's first token."""
    b, t = seg.shape
    ar = torch.arange(t)
    starts = seg == ar                                    # an example starts where seg[t] = t
    if not bool(starts[:, 0].all()):
        raise ValueError("segment table: a row's first token must start an example")
    example = starts.long().cumsum(dim=1)                 # (B, T) example number of each token
    same = example[:, :, None] == example[:, None, :]     # (B, T, T) block diagonal
    mask = (same & torch.tril(torch.ones(t, t, dtype=torch.bool)))[:, None]
    first = torch.zeros(b, t, dtype=torch.long)           # each token's example's first index, by a scan
    for i in range(1, t):
        first[:, i] = torch.where(starts[:, i], torch.full((b,), i), first[:, i - 1])
    return mask, ar[None, :] - first


def masked_grads_of(model_path, tokens_path, out_path):
    """--masked-grads: the loss over the *counted* targets only and every parameter's gradient, of an
    llm.c model file of the reference's shape. tokens: int32 file B, T, then B*T inputs and B*T
    targets, a target < 0 not counting (F.cross_entropy's ignore_index): the loss is the mean over
    the counted targets; with a segment table (read_tokens), packed examples: a block-diagonal mask
    and per-example positions. Writes an archive: "loss" (1), "grad.<name>" for the 16 tensors, and
    "losses" (B, T): each target's loss (0 where not counted)."""
    header, tensors = read_model(model_path)
    if list(header[2:8]) != [maxT, V, L, NH, C, Vp]:
        raise ValueError(f"{model_path}: model {list(header[2:8])} is not the reference's")
    idx, tgt, doc_mask, pos_ids = read_tokens(tokens_path)
    b, t = idx.shape
    model = build_model({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()})
    pos = torch.arange(t, dtype=torch.long) if pos_ids is None else pos_ids
    for block in model.h:
        block.attn.doc_mask = doc_mask
    x = model.wte(idx) + model.wpe(pos)
    for block in model.h:
        x = block(x)
    logits = F.linear(model.ln_f(x), model.wte.weight[:V])
    loss = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-1)
    losses = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=-1, reduction="none").reshape(b, t)
    loss.backward()
    entries = [("loss", np.array([loss.item()])), ("losses", losses.detach().numpy())]
    entries += [("grad." + name, llmc_tensor(model, path, grad=True).numpy()) for name, path, *_ in PARAMS]
    write_archive(out_path, entries)
    print(f"masked loss {loss.item():.6f} over {(tgt >= 0).sum().item()} of {b * t} targets written to {out_path}")


# ------------------------------------------------------------------------------------------------
# The Llama family (Llama 3, Qwen2, Mistral, SmolLM2), for --llama-grads: written out from PyTorch
# primitives in float64, independently of our C code and of transformers (test/test_llama.h compares
# our CPU device's logits, loss and every gradient with it). Each piece as the papers and
# transformers' modeling_llama.py define it:
#   RMSNorm  x * rsqrt(mean(x^2) + eps) * w
#   RoPE     q * cos + rotate_half(q) * sin, rotate_half(q) = (-q2, q1) (pairs d, d + HD/2), the
#            inverse frequencies 1 / theta^(2i/HD), then rope_scaling's rule: linear (/ factor) or
#            llama3 (transformers' _compute_llama3_parameters), here in float64
#   GQA      k, v repeated over NH / NKV query heads (repeat_kv), causal softmax(q k^T / sqrt(HD)) v
#   SwiGLU   down(silu(gate(x)) * up(x))
#   head     an untied lm_head, or the embedding when tied
# The tensors are our internal ones in our logical order (model.h LLAMA_TENSORS): wqkv = q_proj ;
# k_proj ; v_proj rows, wgu = gate_proj ; up_proj rows, absent ones (biases, a tied head) left out.

def llama_shapes(cfg):
    """[(name, shape)] of the family's present tensors, in logical order (per layer: leading L)."""
    L_, C_, NH_, NKV_, HD_, F_, Vp_ = (cfg[k] for k in ("L", "C", "NH", "NKV", "HD", "F", "Vp"))
    QKV = (NH_ + 2 * NKV_) * HD_
    rows = [("embed", (Vp_, C_)), ("attnnorm", (L_, C_)), ("wqkv", (L_, QKV, C_))]
    rows += [("bqkv", (L_, QKV))] if cfg["qkv_bias"] else []
    rows += [("qnorm", (L_, HD_)), ("knorm", (L_, HD_))] if cfg.get("qk_norm") else []
    rows += [("wo", (L_, C_, NH_ * HD_)), ("mlpnorm", (L_, C_)), ("wgu", (L_, 2 * F_, C_))]
    rows += [("bgu", (L_, 2 * F_))] if cfg["mlp_bias"] else []
    rows += [("wdown", (L_, C_, F_))]
    rows += [("bdown", (L_, C_))] if cfg["mlp_bias"] else []
    rows += [("normf", (C_,))]
    rows += [] if cfg["tied"] else [("lmhead", (Vp_, C_))]
    return rows


def llama_inv_freq(cfg):
    """RoPE's inverse frequencies (HD/2), float64, with rope_scaling's rule."""
    HD_ = cfg["HD"]
    inv = 1.0 / cfg["rope_theta"] ** (torch.arange(0, HD_, 2, dtype=torch.float64) / HD_)
    kind = cfg["rope_type"]
    if kind == "linear":
        inv = inv / cfg["rope_factor"]
    elif kind == "llama3":
        factor, low, high, orig = cfg["rope_factor"], cfg["rope_low_freq"], cfg["rope_high_freq"], cfg["rope_orig_maxT"]
        low_wavelen, high_wavelen = orig / low, orig / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv = torch.where(medium, smoothed, scaled)
    elif kind != "default":
        raise ValueError(f"rope_type {kind}")
    return inv


def plain_linear(l, kind, x, weight, bias):
    """A projection x @ W^T + b (kind: "qkv", "atto", "up", "down"; --lora-grads adds adapters)."""
    return x @ weight.T + bias


def llama_forward(cfg, w, idx, tgt, doc_mask=None, pos_ids=None, lin=plain_linear):
    """(logits (B, T, V), mean cross-entropy over targets >= 0) of the float64 model `w`; packed
    examples (read_tokens): doc_mask (B, 1, T, T) block-diagonal causal, pos_ids (B, T) RoPE's positions;
    lin: the projections (--lora-grads adds adapters)."""
    NH_, NKV_, HD_, F_, V_, eps = (cfg[k] for k in ("NH", "NKV", "HD", "F", "V", "norm_eps"))
    b, t = idx.shape

    def rmsnorm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rotate_half(x):
        return torch.cat((-x[..., HD_ // 2:], x[..., :HD_ // 2]), dim=-1)

    pos = torch.arange(t, dtype=torch.float64)[None, :] if pos_ids is None else pos_ids.to(torch.float64)
    freqs = pos[..., None] * llama_inv_freq(cfg)      # (1 or B, T, HD/2)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # (1 or B, 1, T, HD): broadcast over heads
    cos, sin = emb.cos(), emb.sin()
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool)) if doc_mask is None else doc_mask
    x = w["embed"][idx]
    for l in range(cfg["L"]):
        h = rmsnorm(x, w["attnnorm"][l])
        qkv = lin(l, "qkv", h, w["wqkv"][l], w["bqkv"][l] if "bqkv" in w else 0)
        q = qkv[..., :NH_ * HD_].reshape(b, t, NH_, HD_)
        k = qkv[..., NH_ * HD_:(NH_ + NKV_) * HD_].reshape(b, t, NKV_, HD_)
        if "qnorm" in w:                              # Qwen3: q_norm, k_norm over each head's HD values, before RoPE
            q, k = rmsnorm(q, w["qnorm"][l]), rmsnorm(k, w["knorm"][l])
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = qkv[..., (NH_ + NKV_) * HD_:].reshape(b, t, NKV_, HD_).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH_ // NKV_, dim=1)   # transformers' repeat_kv: head h reads kv head h // rep
        v = v.repeat_interleave(NH_ // NKV_, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HD_)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, NH_ * HD_)
        x = x + lin(l, "atto", y, w["wo"][l], 0)
        h = rmsnorm(x, w["mlpnorm"][l])
        gu = lin(l, "up", h, w["wgu"][l], w["bgu"][l] if "bgu" in w else 0)
        x = x + lin(l, "down", F.silu(gu[..., :F_]) * gu[..., F_:], w["wdown"][l], w["bdown"][l] if "bdown" in w else 0)
    x = rmsnorm(x, w["normf"])
    head = w["lmhead"] if "lmhead" in w else w["embed"]
    logits = x @ head[:V_].T
    loss = F.cross_entropy(logits.reshape(-1, V_), tgt.reshape(-1), ignore_index=-1)
    return logits, loss


def llama_grads_of(cfg_path, weights_path, tokens_path, out_path):
    """--llama-grads: logits, loss and every present tensor's gradient of a Llama-family model.
    CONFIG: JSON of the config (L C NH NKV HD F V Vp tied qkv_bias mlp_bias norm_eps rope_type
    rope_theta rope_factor rope_low_freq rope_high_freq rope_orig_maxT; optional qk_norm: Qwen3's q/k norms); WEIGHTS: the logical vector,
    float32; TOKENS: int32 B, T, then B*T inputs and B*T targets (< 0: not counted). Writes an
    archive: "logits" (B, T, V), "loss" (1), "losses" (B, T: 0 where not counted), "grad.<name>" per present tensor."""
    import json
    cfg = json.load(open(cfg_path))
    flat = np.fromfile(weights_path, dtype="<f4")
    w, off = {}, 0
    for name, shape in llama_shapes(cfg):
        n = int(np.prod(shape))
        if off + n > flat.size:
            raise ValueError(f"{weights_path}: {flat.size} floats, the config needs more (at {name})")
        w[name] = torch.from_numpy(flat[off:off + n].astype(np.float64).reshape(shape)).requires_grad_(True)
        off += n
    if off != flat.size:
        raise ValueError(f"{weights_path}: {flat.size} floats, the config has {off}")
    idx, tgt, doc_mask, pos_ids = read_tokens(tokens_path)
    logits, loss = llama_forward(cfg, w, idx, tgt, doc_mask, pos_ids)
    losses = F.cross_entropy(logits.reshape(-1, cfg["V"]), tgt.reshape(-1), ignore_index=-1, reduction="none").reshape(idx.shape)
    loss.backward()
    entries = [("logits", logits.detach().numpy()), ("loss", np.array([loss.item()])), ("losses", losses.detach().numpy())]
    entries += [("grad." + name, w[name].grad.numpy()) for name, _ in llama_shapes(cfg)]
    write_archive(out_path, entries)
    print(f"llama: loss {loss.item():.6f}, {len(entries) - 3} gradients written to {out_path}")


# ------------------------------------------------------------------------------------------------
# LoRA (--lora-grads): adapters on a frozen base, as PEFT defines them (Hu et al. 2021): each target
# projection y = x W^T + b gains (alpha / r) (x A^T) B^T on its rows [row0, row0 + rows) of the
# output (a fused projection's q, k or v rows), A (r, in), B (rows, r). GPT-2 written out here from
# PyTorch primitives for any shape (F.layer_norm, F.gelu(approximate="tanh"), causal softmax), the
# Llama family through llama_forward; autograd differentiates A and B in float64. Independent of our
# proj_forward / proj_backward (lora.h): only the tensors' logical layout is ours.

GPT2_SHAPES = [("wte", "Vp C"), ("wpe", "maxT C"), ("ln1w", "L C"), ("ln1b", "L C"), ("qkvw", "L 3C C"), ("qkvb", "L 3C"),
               ("attprojw", "L C C"), ("attprojb", "L C"), ("ln2w", "L C"), ("ln2b", "L C"), ("fcw", "L 4C C"),
               ("fcb", "L 4C"), ("fcprojw", "L C 4C"), ("fcprojb", "L C"), ("lnfw", "C"), ("lnfb", "C")]


def gpt2_shapes(cfg):
    """[(name, shape)] of GPT-2's tensors in llm.c's (our logical) order, for any L, C, Vp, maxT."""
    dims = {"L": cfg["L"], "C": cfg["C"], "3C": 3 * cfg["C"], "4C": 4 * cfg["C"], "Vp": cfg["Vp"], "maxT": cfg["maxT"]}
    return [(name, tuple(dims[d] for d in shape.split())) for name, shape in GPT2_SHAPES]


def gpt2_forward(cfg, w, idx, tgt, lin=plain_linear):
    """(logits (B, T, V), mean cross-entropy) of a float64 GPT-2 of any shape, tied head."""
    L_, C_, NH_, V_ = cfg["L"], cfg["C"], cfg["NH"], cfg["V"]
    HS_ = C_ // NH_
    b, t = idx.shape
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    x = w["wte"][idx] + w["wpe"][:t]
    for l in range(L_):
        h = F.layer_norm(x, (C_,), w["ln1w"][l], w["ln1b"][l], LN_EPS)
        q, k, v = lin(l, "qkv", h, w["qkvw"][l], w["qkvb"][l]).split(C_, dim=2)
        q, k, v = (z.reshape(b, t, NH_, HS_).transpose(1, 2) for z in (q, k, v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(HS_)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, C_)
        x = x + lin(l, "atto", y, w["attprojw"][l], w["attprojb"][l])
        h = F.layer_norm(x, (C_,), w["ln2w"][l], w["ln2b"][l], LN_EPS)
        a = F.gelu(lin(l, "up", h, w["fcw"][l], w["fcb"][l]), approximate="tanh")  # the adapter adds before the GELU
        x = x + lin(l, "down", a, w["fcprojw"][l], w["fcprojb"][l])
    x = F.layer_norm(x, (C_,), w["lnfw"], w["lnfb"], LN_EPS)
    logits = x @ w["wte"][:V_].T
    loss = F.cross_entropy(logits.reshape(-1, V_), tgt.reshape(-1), ignore_index=-1)
    return logits, loss


def lora_grads_of(cfg_path, weights_path, tokens_path, out_path):
    """--lora-grads: the loss and dA, dB of every adapter module. CONFIG: JSON with "family" ("gpt2":
    L C NH V Vp maxT; "llama": as --llama-grads) and "lora": {"r", "alpha", "modules": [{"proj" (qkv,
    atto, up, down), "row0", "rows", "in", "logA", "logB"}]}; WEIGHTS: the logical vector, float32
    (the base's tensors, then each module's A (L, r, in) and B (L, rows, r) at logA, logB); TOKENS as
    --llama-grads. Writes an archive: "loss" (1), "grad.A<i>" (L, r, in) and "grad.B<i>" (L, rows, r)."""
    import json
    cfg = json.load(open(cfg_path))
    flat = np.fromfile(weights_path, dtype="<f4")
    shapes = gpt2_shapes(cfg) if cfg["family"] == "gpt2" else llama_shapes(cfg)
    w, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        if off + n > flat.size:
            raise ValueError(f"{weights_path}: {flat.size} floats, the config needs more (at {name})")
        w[name] = torch.from_numpy(flat[off:off + n].astype(np.float64).reshape(shape))
        off += n
    lo = cfg["lora"]
    r, scale, L_ = lo["r"], lo["alpha"] / lo["r"], cfg["L"]
    mods = []
    for m in lo["modules"]:
        nA, nB = L_ * r * m["in"], L_ * m["rows"] * r
        if m["logA"] < off or m["logA"] + nA > flat.size or m["logB"] + nB > flat.size:
            raise ValueError(f"{weights_path}: module {m} outside the {flat.size} floats (the base has {off})")
        A = torch.from_numpy(flat[m["logA"]:m["logA"] + nA].astype(np.float64).reshape(L_, r, m["in"])).requires_grad_(True)
        B = torch.from_numpy(flat[m["logB"]:m["logB"] + nB].astype(np.float64).reshape(L_, m["rows"], r)).requires_grad_(True)
        mods.append((m, A, B))

    def lin(l, kind, x, weight, bias):
        y = x @ weight.T + bias
        for m, A, B in mods:
            if m["proj"] != kind:
                continue
            delta = scale * ((x @ A[l].T) @ B[l].T)                     # (b, t, rows)
            y = y + F.pad(delta, (m["row0"], weight.shape[0] - m["row0"] - m["rows"]))
        return y

    raw = np.fromfile(tokens_path, dtype="<i4")
    b, t = int(raw[0]), int(raw[1])
    idx = torch.from_numpy(raw[2:2 + b * t].astype(np.int64)).reshape(b, t)
    tgt = torch.from_numpy(raw[2 + b * t:2 + 2 * b * t].astype(np.int64)).reshape(b, t)
    _, loss = (gpt2_forward if cfg["family"] == "gpt2" else llama_forward)(cfg, w, idx, tgt, lin=lin)
    loss.backward()
    entries = [("loss", np.array([loss.item()]))]
    for i, (m, A, B) in enumerate(mods):
        entries += [(f"grad.A{i}", A.grad.numpy()), (f"grad.B{i}", B.grad.numpy())]
    write_archive(out_path, entries)
    print(f"lora ({cfg['family']}): loss {loss.item():.9f}, dA and dB of {len(mods)} modules written to {out_path}")


def write_archive(path, entries):
    """entries: list of (name, numpy array); float arrays are stored as float32, ints as int32."""
    with open(path, "wb") as f:
        f.write(ARCHIVE_MAGIC + struct.pack("<ii", ARCHIVE_VERSION, len(entries)))
        for name, a in entries:
            a = np.asarray(a)
            is_int = np.issubdtype(a.dtype, np.integer)
            a = a.astype("<i4" if is_int else "<f4")
            assert len(name.encode()) < 64 and 1 <= a.ndim <= 4, name
            dims = list(a.shape) + [1] * (4 - a.ndim)
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<6i", DTYPE_I32 if is_int else DTYPE_F32, a.ndim, *dims))
            f.write(a.tobytes())


def read_archive(path):
    """[(name, array)] in file order; raises ValueError if malformed."""
    raw = open(path, "rb").read()
    if raw[:4] != ARCHIVE_MAGIC:
        raise ValueError(f"{path}: bad magic")
    version, count = struct.unpack_from("<ii", raw, 4)
    if version != ARCHIVE_VERSION:
        raise ValueError(f"{path}: version {version}, expected {ARCHIVE_VERSION}")
    off, entries = 12, []
    for _ in range(count):
        name = raw[off:off + 64].split(b"\0")[0].decode()
        dtype, ndim, *dims = struct.unpack_from("<6i", raw, off + 64)
        off += 64 + 24
        n = int(np.prod(dims))
        if dtype not in (DTYPE_F32, DTYPE_I32) or not 1 <= ndim <= 4 or off + 4 * n > len(raw):
            raise ValueError(f"{path}: bad entry '{name}'")
        a = np.frombuffer(raw, dtype="<i4" if dtype == DTYPE_I32 else "<f4", count=n, offset=off)
        entries.append((name, a.reshape(dims[:ndim])))
        off += 4 * n
    if off != len(raw):
        raise ValueError(f"{path}: {len(raw) - off} trailing bytes")
    return entries


# ------------------------------------------------------------------------------------------------
# The three modes.

def generate(outdir):
    """Compute everything and write ref_model.bin and ref_out.bin into outdir."""
    # Module constructors draw a default init from torch's global stream; it is overwritten by
    # build_model, but pin the stream anyway. Our draws use their own seeded generators.
    torch.manual_seed(0)
    weights = init_weights()
    tokens = make_tokens()

    # Batch 0 at the initial model: logits, loss, every gradient.
    model = build_model(weights)
    logits, loss = forward_backward(model, tokens, 0)
    grads = {name: llmc_tensor(model, path, grad=True) for name, path, *_ in PARAMS}
    assert not grads["wte"][V:].any(), "padded wte rows must get zero gradient"

    losses, norms, lrs, final = train(weights, tokens)
    assert not llmc_tensor(final, "wte.weight")[V:].any(), "padded wte rows must stay zero"

    f64 = lambda x: np.asarray(x, dtype=np.float64)
    entries = [
        ("config", np.array([V, Vp, maxT, L, NH, C, B, T, STEPS])),
        ("hparams", f64([LR_MAX, WARMUP, FINAL_LR_FRAC, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP])),
        ("tokens", tokens.numpy()),
        ("stream", make_stream().numpy()),
        ("logits", logits.detach().numpy()),
        ("loss", f64([loss.item()])),
    ]
    entries += [("grad." + name, grads[name].numpy()) for name, *_ in PARAMS]
    entries += [("traj.loss", f64(losses)), ("traj.norm", f64(norms)), ("traj.lr", f64(lrs))]
    entries += [("final." + name, llmc_tensor(final, path).detach().numpy()) for name, path, *_ in PARAMS]

    os.makedirs(outdir, exist_ok=True)
    write_model(os.path.join(outdir, "ref_model.bin"), weights)
    write_archive(os.path.join(outdir, "ref_out.bin"), entries)
    return loss.item(), losses, norms, lrs


def compare(name, a, b):
    """One line for tensor `name` (a regenerated, b committed); returns True if it matches."""
    if a.shape != b.shape or a.dtype != b.dtype:
        print(f"  FAIL {name:<16} shape/dtype {a.shape} {a.dtype} vs committed {b.shape} {b.dtype}")
        return False
    if np.issubdtype(b.dtype, np.integer):
        bad = int((a != b).sum())
        print(f"  {'ok  ' if bad == 0 else 'FAIL'} {name:<16} {str(b.shape):<14} exact, {bad} differ")
        return bad == 0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    diff, ref = np.linalg.norm(a64 - b64), np.linalg.norm(b64)
    err = 0.0 if diff == 0 else (diff / ref if ref > 0 else math.inf)
    ok = err <= TOLERANCE and np.isfinite(a64).all()
    print(f"  {'ok  ' if ok else 'FAIL'} {name:<16} {str(b.shape):<14} rel err {err:.2e}")
    return ok


def check(fixdir):
    """Regenerate into a temp dir and compare with the fixtures in fixdir; returns exit status."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        try:
            print("ref_model.bin")
            h_new, m_new = read_model(os.path.join(tmp, "ref_model.bin"))
            h_old, m_old = read_model(os.path.join(fixdir, "ref_model.bin"))
            ok &= compare("header", h_new, h_old)
            for name, *_ in PARAMS:
                ok &= compare(name, m_new[name], m_old[name])
            print("ref_out.bin")
            new = read_archive(os.path.join(tmp, "ref_out.bin"))
            old = read_archive(os.path.join(fixdir, "ref_out.bin"))
            if [n for n, _ in new] != [n for n, _ in old]:
                print("  FAIL entry names differ from the committed archive")
                ok = False
            else:
                for (name, a), (_, b) in zip(new, old):
                    ok &= compare(name, a, b)
        except (OSError, ValueError) as e:
            print(f"  FAIL {e}")
            ok = False
    print(f"reference --check: {'PASS' if ok else 'FAIL'} (tolerance {TOLERANCE:g} relative L2)")
    return 0 if ok else 1


def fdcheck():
    """Central finite differences in float64 for a few gradient entries vs autograd."""
    weights, tokens = init_weights(), make_tokens()
    model = build_model(weights)
    forward_backward(model, tokens, 0)
    probes = [("wte", "wte.weight", (5, 3)), ("wpe", "wpe.weight", (3, 4)),
              ("ln1w", "h.{l}.ln_1.weight", (0, 7)), ("qkvw", "h.{l}.attn.c_attn.weight", (1, 40, 5)),
              ("qkvb", "h.{l}.attn.c_attn.bias", (0, 80)), ("attprojb", "h.{l}.attn.c_proj.bias", (1, 11)),
              ("fcprojw", "h.{l}.mlp.c_proj.weight", (1, 2, 100)), ("lnfb", "ln_f.bias", (10,))]
    # h = 1e-5: truncation error ~h^2 and round-off ~loss*eps/h ~ 5e-11 are both tiny. Small
    # gradients (k weights at init, ~1e-6) therefore get an absolute floor in the verdict.
    h, ok = 1e-5, True
    for name, path, idx in probes:
        ps = module_params(model, path)
        p, i = (ps[idx[0]], idx[1:]) if "{l}" in path else (ps[0], idx)
        auto = p.grad[i].item()
        with torch.no_grad():
            w0 = p[i].item()
            p[i] = w0 + h
            lp = model(tokens[0, :, :T], tokens[0, :, 1:])[1].item()
            p[i] = w0 - h
            lm = model(tokens[0, :, :T], tokens[0, :, 1:])[1].item()
            p[i] = w0
        fd = (lp - lm) / (2 * h)
        diff = abs(fd - auto)
        ok &= diff <= 1e-6 * abs(auto) + 1e-9
        print(f"  {name + str(list(idx)):<18} autograd {auto:+.10e}  finite diff {fd:+.10e}"
              f"  abs {diff:.1e}  rel {diff / max(abs(auto), 1e-30):.1e}")
    print(f"finite differences: {'PASS' if ok else 'FAIL'} (|fd - autograd| <= 1e-6 |autograd| + 1e-9)")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR", help="write ref_model.bin and ref_out.bin into DIR")
    mode.add_argument("--check", metavar="DIR", help="regenerate and compare with the fixtures in DIR")
    mode.add_argument("--fdcheck", action="store_true", help="finite differences vs autograd")
    mode.add_argument("--logits", nargs=3, metavar=("MODEL", "TOKENS", "OUT"),
                      help="logits of an llm.c model file of the reference's shape on int32 tokens")
    mode.add_argument("--masked-grads", nargs=3, metavar=("MODEL", "TOKENS", "OUT"),
                      help="loss over the counted targets (target < 0: not counted) and every gradient")
    mode.add_argument("--hf-logits", nargs=3, metavar=("DIR", "TOKENS", "OUT"),
                      help="the same for a Hugging Face checkpoint (needs the safetensors package)")
    mode.add_argument("--lora-grads", nargs=4, metavar=("CONFIG", "WEIGHTS", "TOKENS", "OUT"),
                      help="LoRA on a GPT-2 or Llama base: loss, every adapter's dA and dB (float64)")
    mode.add_argument("--llama-grads", nargs=4, metavar=("CONFIG", "WEIGHTS", "TOKENS", "OUT"),
                      help="a Llama-family model's logits, loss and every gradient (float64)")
    args = ap.parse_args()   # exits 2 on usage errors

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    if args.out:
        loss0, losses, norms, lrs = generate(args.out)
        print(f"loss at batch 0: {loss0:.6f}")
        for s in range(STEPS):
            print(f"  step {s}: loss {losses[s]:.6f}  norm {norms[s]:.4f}  lr {lrs[s]:.6f}")
        status = 0
    elif args.check:
        status = check(args.check)
    elif args.logits:
        logits_of(*args.logits)
        status = 0
    elif args.masked_grads:
        masked_grads_of(*args.masked_grads)
        status = 0
    elif args.hf_logits:
        hf_logits_of(*args.hf_logits)
        status = 0
    elif args.llama_grads:
        llama_grads_of(*args.llama_grads)
        status = 0
    elif args.lora_grads:
        lora_grads_of(*args.lora_grads)
        status = 0
    else:
        status = fdcheck()
    print(f"{time.time() - t0:.2f} s (after imports)")
    return status


if __name__ == "__main__":
    sys.exit(main())
