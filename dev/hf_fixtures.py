#!/usr/bin/env python3
"""dev/hf_fixtures.py — small Hugging Face checkpoints made by transformers, and what transformers
computes on them: the fixtures of test/test_hf.h and test/test_hf_llama.h (our -e DIR loader).

Each fixture is a directory under test/fixtures/hf/ holding what transformers (or the hub) would
hand a user: config.json and model.safetensors (or model.safetensors.index.json + shards), plus
ref.bin (a test/fixture.h archive: "tokens" (B, T+1) int32, "logits" (B, T, V) and "loss" (1) of
AutoModelForCausalLM in float64 on tokens[:, :T] -> tokens[:, 1:]).

GPT-2 (GPT2LMHeadModel), odd sizes on purpose, random tokens:
  f32_prefix    L=2 C=36 NH=3 V=101 maxT=48  F32, save_pretrained: "transformer." names, no lm_head
  bf16_bare     L=3 C=20 NH=5 V=77  maxT=16  BF16, names without the prefix, the old attn.bias /
                                             attn.masked_bias buffers stored, lm_head.weight stored (= wte)
  f16_sharded   L=2 C=24 NH=2 V=50  maxT=20  F16, save_pretrained with a small max_shard_size: an index
                                             and several shards; activation gelu_pytorch_tanh
The Llama family (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM), save_pretrained, on
the first KJV tokens of data/kjv_val.bin (GPT-2 ids) modulo V:
  llama_gqa4_llama3  L=2 C=40 NH=8 NKV=2 head_dim=6 (!= C/NH) F=57 V=131, untied, mlp_bias, rope_theta
                     500000 with llama3 scaling (its three frequency bands all used), F32
  llama_mha_linear   L=2 C=24 NH=3 NKV=3 (GQA ratio 1) F=44 V=97, tied, linear RoPE scaling x2, BF16
  qwen2_single_kv    L=2 C=32 NH=4 NKV=1 F=50 V=113, tied, q/k/v biases, rms_norm_eps 1e-6, theta 1e6,
                     F16 in shards with an index
  mistral_gqa2       L=3 C=28 NH=4 NKV=2 head_dim=10 F=46 V=89, untied, sliding_window 4096, BF16
  qwen3_qknorm       L=2 C=32 NH=4 NKV=2 head_dim=8 F=50 V=109, untied, q_norm/k_norm, theta 1e6, BF16
  phi3_fused         L=2 C=48 NH=4 NKV=2 F=40 V=103, untied, fused qkv_proj / gate_up_proj (Phi3ForCausalLM),
                     sliding_window 47 (>= T: full attention), BF16 in shards with an index
Qwen3 (model_type qwen3) is newer than any transformers that runs on Debian's torch 1.13 (Qwen3 came
with 4.51). Its reference here is transformers 4.47.1's Qwen2 modules with Qwen3's differences put
where Qwen3's modelling code has them: an RMSNorm (Qwen2RMSNorm, the same code as Qwen3RMSNorm) over
each q head and each k head, applied to q_proj's and k_proj's outputs before RoPE, and no q/k/v
biases (attention_bias false). Qwen2's attention needs head_dim = hidden_size / heads, so the fixture
keeps that (the float64 reference of dev/reference.py covers head_dim != hidden / heads). The
checkpoint is written with Qwen3's names (self_attn.q_norm.weight, k_norm) and config.json keys.
Every parameter is drawn away from transformers' init (biases nonzero, norm gains != 1), so a
mapping mistake (a transpose, a swapped bias, q and k exchanged) changes the logits. transformers
computes RMSNorm, the eager softmax and RoPE's cos/sin in FP32 even in a float64 model (torch 1.13
has no SDPA): the reference is float64 elsewhere.

Usage (needs torch, transformers, safetensors; tested with the versions in PINNED below):
  python dev/hf_fixtures.py --out test/fixtures/hf      # write the fixtures
  python dev/hf_fixtures.py --check test/fixtures/hf    # regenerate in a temp dir; compare the
                                                        # tensors and the reference outputs; exit 0/1
  python dev/hf_fixtures.py --logits DIR TOKENS OUT ... # AutoModelForCausalLM.from_pretrained(DIR) logits
                                                        # (float64) on int32 [b, t, tokens...] -> OUT f32,
                                                        # for each DIR TOKENS OUT triple
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

PINNED = {"transformers": "4.47.1", "safetensors": "0.4.5"}
CASES = [
    # name, config, dtype, "transformer." prefix, old attn buffers, lm_head stored, sharded
    ("f32_prefix", dict(n_layer=2, n_embd=36, n_head=3, vocab_size=101, n_positions=48), torch.float32, True, False, True, False),
    ("bf16_bare", dict(n_layer=3, n_embd=20, n_head=5, vocab_size=77, n_positions=16), torch.bfloat16, False, True, False, False),
    ("f16_sharded", dict(n_layer=2, n_embd=24, n_head=2, vocab_size=50, n_positions=20,
                         activation_function="gelu_pytorch_tanh"), torch.float16, True, False, False, True),
]
# name, model_type, config, dtype, sharded
LLAMA_CASES = [
    ("llama_gqa4_llama3", "llama", dict(num_hidden_layers=2, hidden_size=40, num_attention_heads=8, num_key_value_heads=2, head_dim=6,
                                         intermediate_size=57, vocab_size=131, max_position_embeddings=48, rms_norm_eps=1e-5,
                                         tie_word_embeddings=False, mlp_bias=True, rope_theta=500000.0,
                                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                           original_max_position_embeddings=16)), torch.float32, False),
    ("llama_mha_linear", "llama", dict(num_hidden_layers=2, hidden_size=24, num_attention_heads=3, num_key_value_heads=3,
                                        intermediate_size=44, vocab_size=97, max_position_embeddings=48, rms_norm_eps=1e-5,
                                        tie_word_embeddings=True, rope_theta=10000.0, rope_scaling=dict(rope_type="linear", factor=2.0)),
     torch.bfloat16, False),
    ("qwen2_single_kv", "qwen2", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
                                       intermediate_size=50, vocab_size=113, max_position_embeddings=48, rms_norm_eps=1e-6,
                                       tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False), torch.float16, True),
    ("mistral_gqa2", "mistral", dict(num_hidden_layers=3, hidden_size=28, num_attention_heads=4, num_key_value_heads=2, head_dim=10,
                                      intermediate_size=46, vocab_size=89, max_position_embeddings=48, rms_norm_eps=1e-5,
                                      tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=4096), torch.bfloat16, False),
    ("phi3_fused", "phi3", dict(num_hidden_layers=2, hidden_size=48, num_attention_heads=4, num_key_value_heads=2,
                                intermediate_size=40, vocab_size=103, max_position_embeddings=48, rms_norm_eps=1e-5,
                                tie_word_embeddings=False, rope_theta=10000.0, sliding_window=47, bos_token_id=1, eos_token_id=32000 % 103,
                                pad_token_id=32000 % 103), torch.bfloat16, True),
    ("qwen3_qknorm", "qwen3", dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                   intermediate_size=50, vocab_size=109, max_position_embeddings=48, rms_norm_eps=1e-6,
                                   tie_word_embeddings=False, rope_theta=1000000.0), torch.bfloat16, False),
]
LLAMA_T = 40
B = 2
TOLERANCE = 1e-6   # --check: relative L2 per tensor (float64 forward, stored as float32)


def write_archive(path, entries):
    with open(path, "wb") as f:
        f.write(b"ZTFX" + struct.pack("<ii", 1, len(entries)))
        for name, a in entries:
            a = np.asarray(a)
            is_int = np.issubdtype(a.dtype, np.integer)
            a = a.astype("<i4" if is_int else "<f4")
            dims = list(a.shape) + [1] * (4 - a.ndim)
            f.write(name.encode().ljust(64, b"\0"))
            f.write(struct.pack("<6i", 1 if is_int else 0, a.ndim, *dims))
            f.write(a.tobytes())


def read_archive(path):
    raw = open(path, "rb").read()
    assert raw[:4] == b"ZTFX", path
    _, count = struct.unpack_from("<ii", raw, 4)
    off, out = 12, {}
    for _ in range(count):
        name = raw[off:off + 64].split(b"\0")[0].decode()
        dtype, ndim, *dims = struct.unpack_from("<6i", raw, off + 64)
        off += 88
        n = int(np.prod(dims))
        out[name] = np.frombuffer(raw, dtype="<i4" if dtype == 1 else "<f4", count=n, offset=off).reshape(dims[:ndim])
        off += 4 * n
    return out


def qwen3_model(cfg):
    """A Qwen3ForCausalLM of config dict cfg built from transformers 4.47.1's Qwen2 modules (see the
    top): Qwen2ForCausalLM of the same shape, q/k/v projections without biases, and q_norm / k_norm
    (Qwen2RMSNorm over head_dim) on each q and k head of q_proj's and k_proj's outputs."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm
    C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", 128)
    if hd * NH != C:
        raise ValueError(f"qwen3 reference: head_dim {hd} must be hidden_size / heads = {C / NH} (Qwen2's attention)")
    if cfg.get("attention_bias") or cfg.get("use_sliding_window"):
        raise ValueError("qwen3 reference: attention_bias and use_sliding_window are not modelled")
    keys = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size",
            "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "rope_theta")
    model = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **{k: cfg[k] for k in keys if k in cfg}))
    for layer in model.model.layers:
        attn = layer.self_attn
        for name, heads in (("q_proj", NH), ("k_proj", NKV), ("v_proj", NKV)):
            setattr(attn, name, torch.nn.Linear(C, heads * hd, bias=False))
        attn.q_norm, attn.k_norm = Qwen2RMSNorm(hd, eps=cfg["rms_norm_eps"]), Qwen2RMSNorm(hd, eps=cfg["rms_norm_eps"])
        for proj, norm in ((attn.q_proj, attn.q_norm), (attn.k_proj, attn.k_norm)):  # Qwen3: norm(proj(x).view(..., -1, hd))
            proj.forward = (lambda x, p=proj, n=norm: n(torch.nn.functional.linear(x, p.weight).unflatten(-1, (-1, hd))).flatten(-2))
    return model


def load_model(model_dir):
    """AutoModelForCausalLM.from_pretrained in float64, or for model_type qwen3 qwen3_model with the
    checkpoint's tensors (every one used, none missing)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    if cfg.get("model_type") != "qwen3":
        from transformers import AutoModelForCausalLM
        return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
    from safetensors.torch import load_file
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    state = {}
    for f in files:
        state.update(load_file(os.path.join(model_dir, f)))
    model = qwen3_model(cfg).to(torch.float64)
    if cfg.get("tie_word_embeddings"):
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict({k: v.to(torch.float64) for k, v in state.items()}, strict=True)
    return model.eval()


def reference(model_dir, tokens):
    """load_model in float64: logits (B,T,V) and the mean loss."""
    model = load_model(model_dir)
    idx = torch.from_numpy(tokens.astype(np.int64))
    with torch.no_grad():
        logits = model(idx[:, :-1]).logits                                  # (B,T,V)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[:, 1:].reshape(-1))
    return logits.numpy(), loss.item()


def make_case(name, cfg, dtype, prefix, buffers, lm_head, sharded, outdir):
    from transformers import GPT2Config, GPT2LMHeadModel
    from safetensors.torch import save_file
    torch.manual_seed(1234)
    model = GPT2LMHeadModel(GPT2Config(**cfg)).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():   # away from the init: every tensor matters
            if pname.endswith("ln_1.weight") or pname.endswith("ln_2.weight") or pname.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.05 * torch.randn(p.shape))
    model = model.to(dtype)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    if sharded:
        model.save_pretrained(d, safe_serialization=True, max_shard_size="10KB" if sharded else "10GB")
    else:
        tensors = {}
        for k, v in model.state_dict().items():
            if k == "lm_head.weight":
                continue
            tensors[k[len("transformer."):] if not prefix else k] = v.contiguous().clone()
        if buffers:   # what older hub files (openai-community/gpt2) hold besides the parameters
            T = cfg["n_positions"]
            for l in range(cfg["n_layer"]):
                tensors[f"h.{l}.attn.bias"] = torch.tril(torch.ones(T, T, dtype=dtype)).view(1, 1, T, T)
                tensors[f"h.{l}.attn.masked_bias"] = torch.tensor(-1e4, dtype=dtype)
        if lm_head:   # the tied head stored explicitly (equal to wte)
            tensors["lm_head.weight"] = model.transformer.wte.weight.detach().clone()
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        model.config.to_json_file(os.path.join(d, "config.json"))
    g = torch.Generator().manual_seed(42)
    T = cfg["n_positions"] - 3
    tokens = torch.randint(0, cfg["vocab_size"], (B, T + 1), generator=g).numpy().astype(np.int32)
    logits, loss = reference(d, tokens)
    write_archive(os.path.join(d, "ref.bin"), [("tokens", tokens), ("logits", logits), ("loss", np.array([loss]))])
    return d


def kjv_tokens(n, V):
    """The first n GPT-2 tokens of data/kjv_val.bin (an llm.c shard: 256 int32 header, uint16), modulo V."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "kjv_val.bin")
    raw = np.fromfile(path, dtype="<u2", count=512 + n)
    return (raw[512:512 + n].astype(np.int64) % V).astype(np.int32)


QWEN3_CONFIG = dict(architectures=["Qwen3ForCausalLM"], attention_bias=False, attention_dropout=0.0, hidden_act="silu",
                    initializer_range=0.02, max_window_layers=28, model_type="qwen3", rope_scaling=None, sliding_window=None,
                    use_cache=True, use_sliding_window=False)   # Qwen3-0.6B's config.json keys besides the shape


def make_llama_case(name, model_type, cfg, dtype, sharded, outdir):
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(4321)
    if model_type == "qwen3":
        model = qwen3_model(cfg).eval()
    else:
        config = AutoConfig.for_model(model_type, **cfg)
        model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():   # away from the init: every tensor matters
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.1 * torch.randn(p.shape))
    model = model.to(dtype)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    if model_type == "qwen3":   # Qwen3's names and config.json (save_pretrained would write Qwen2's config)
        from safetensors.torch import save_file
        state = {k: v.contiguous().clone() for k, v in model.state_dict().items()
                 if not (cfg["tie_word_embeddings"] and k == "lm_head.weight")}
        save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        conf = dict(QWEN3_CONFIG, **cfg, torch_dtype=str(dtype).split(".")[1], bos_token_id=None, eos_token_id=None)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({k: v for k, v in conf.items() if v is not None or k in ("rope_scaling", "sliding_window")}, f, indent=2, sort_keys=True)
            f.write("\n")
    else:
        model.save_pretrained(d, safe_serialization=True, max_shard_size="8KB" if sharded else "5GB")
    tokens = kjv_tokens(B * (LLAMA_T + 1), cfg["vocab_size"]).reshape(B, LLAMA_T + 1)
    logits, loss = reference(d, tokens)
    write_archive(os.path.join(d, "ref.bin"), [("tokens", tokens), ("logits", logits), ("loss", np.array([loss]))])
    return d


def generate(outdir):
    for case in CASES:
        d = make_case(*case, outdir)
        print(f"  {case[0]}: {sorted(os.listdir(d))}")
    for case in LLAMA_CASES:
        d = make_llama_case(*case, outdir)
        print(f"  {case[0]}: {sorted(os.listdir(d))}")


def check(fixdir):
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        from safetensors.torch import load_file
        for name in [c[0] for c in CASES] + [c[0] for c in LLAMA_CASES]:
            new_d, old_d = os.path.join(tmp, name), os.path.join(fixdir, name)
            files = sorted(f for f in os.listdir(new_d) if f.endswith(".safetensors"))
            if files != sorted(f for f in os.listdir(old_d) if f.endswith(".safetensors")):
                print(f"  FAIL {name}: shard files differ"); ok = False; continue
            for f in files:
                a, b = load_file(os.path.join(new_d, f)), load_file(os.path.join(old_d, f))
                same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
                print(f"  {'ok  ' if same else 'FAIL'} {name}/{f}: {len(a)} tensors {'equal' if same else 'differ'}")
                ok &= same
            ra, rb = read_archive(os.path.join(new_d, "ref.bin")), read_archive(os.path.join(old_d, "ref.bin"))
            for k in ("tokens", "logits", "loss"):
                a64, b64 = ra[k].astype(np.float64), rb[k].astype(np.float64)
                err = np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30)
                good = a64.shape == b64.shape and err <= (0 if k == "tokens" else TOLERANCE)
                print(f"  {'ok  ' if good else 'FAIL'} {name}/ref.bin {k:<7} rel err {err:.2e}")
                ok &= good
    print(f"hf_fixtures --check: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR")
    mode.add_argument("--check", metavar="DIR")
    mode.add_argument("--random-1b", metavar="DIR", help="a random 1.03B Llama (TinyLlama's shape, V 32000, tied) in BF16, "
                      "save_pretrained in 1 GB shards: docs/hf_llama.md's host-memory measurement")
    mode.add_argument("--logits", nargs="+", metavar="DIR TOKENS OUT", help="one or more triples (one python start for several models)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    import transformers, safetensors
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, safetensors {safetensors.__version__}")
    for pkg, want in PINNED.items():
        got = sys.modules[pkg].__version__
        if got != want:
            print(f"warning: {pkg} {got}, the fixtures were made with {want}")
    if args.out:
        generate(args.out)
        return 0
    if args.check:
        return check(args.check)
    if args.random_1b:
        from transformers import LlamaConfig, AutoModelForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(num_hidden_layers=22, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, intermediate_size=5632,
                          vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=True)
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16)
        model.save_pretrained(args.random_1b, safe_serialization=True, max_shard_size="1GB")
        print(f"{sum(p.numel() for p in model.parameters())} parameters written to {args.random_1b}")
        return 0
    if len(args.logits) % 3:
        ap.error("--logits takes DIR TOKENS OUT triples")
    for k in range(0, len(args.logits), 3):
        model_dir, tokens_path, out = args.logits[k:k + 3]
        raw = np.fromfile(tokens_path, dtype="<i4")
        b, t = int(raw[0]), int(raw[1])
        tokens = raw[2:2 + b * t].reshape(b, t)
        logits, _ = reference(model_dir, np.concatenate([tokens, tokens[:, -1:]], axis=1))
        logits.astype("<f4").tofile(out)
        print(f"logits {logits.shape} of {model_dir} written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
