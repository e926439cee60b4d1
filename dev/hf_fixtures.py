#!/usr/bin/env python3
"""dev/hf_fixtures.py — small Hugging Face GPT-2 checkpoints made by transformers, and what
GPT2LMHeadModel computes on them: the fixtures of test/test_hf.h (our -e DIR loader).

Each fixture is a directory under test/fixtures/hf/ holding what transformers (or the hub) would
hand a user: config.json and model.safetensors (or model.safetensors.index.json + shards), plus
ref.bin (a test/fixture.h archive: "tokens" (B, T+1) int32, "logits" (B, T, V) and "loss" (1) of
GPT2LMHeadModel in float64 on tokens[:, :T] -> tokens[:, 1:]).

The cases (odd sizes on purpose):
  f32_prefix    L=2 C=36 NH=3 V=101 maxT=48  F32, save_pretrained: "transformer." names, no lm_head
  bf16_bare     L=3 C=20 NH=5 V=77  maxT=16  BF16, names without the prefix, the old attn.bias /
                                             attn.masked_bias buffers stored, lm_head.weight stored (= wte)
  f16_sharded   L=2 C=24 NH=2 V=50  maxT=20  F16, save_pretrained with a small max_shard_size: an index
                                             and several shards; activation gelu_pytorch_tanh
Every parameter is perturbed away from transformers' init (biases nonzero, layernorm gains != 1), so a
mapping mistake (a transpose, a swapped bias) changes the logits.

Usage (needs torch, transformers, safetensors; tested with the versions in PINNED below):
  python dev/hf_fixtures.py --out test/fixtures/hf      # write the fixtures
  python dev/hf_fixtures.py --check test/fixtures/hf    # regenerate in a temp dir; compare the
                                                        # tensors and the reference outputs; exit 0/1
  python dev/hf_fixtures.py --logits DIR TOKENS OUT     # GPT2LMHeadModel.from_pretrained(DIR) logits
                                                        # (float64) on int32 [b, t, tokens...] -> OUT f32
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

PINNED = {"transformers": "4.38.2", "safetensors": "0.4.5"}
CASES = [
    # name, config, dtype, "transformer." prefix, old attn buffers, lm_head stored, sharded
    ("f32_prefix", dict(n_layer=2, n_embd=36, n_head=3, vocab_size=101, n_positions=48), torch.float32, True, False, True, False),
    ("bf16_bare", dict(n_layer=3, n_embd=20, n_head=5, vocab_size=77, n_positions=16), torch.bfloat16, False, True, False, False),
    ("f16_sharded", dict(n_layer=2, n_embd=24, n_head=2, vocab_size=50, n_positions=20,
                         activation_function="gelu_pytorch_tanh"), torch.float16, True, False, False, True),
]
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


def reference(model_dir, tokens):
    """GPT2LMHeadModel.from_pretrained in float64: logits (B,T,V) and the mean loss."""
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float64).eval()
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


def generate(outdir):
    for case in CASES:
        d = make_case(*case, outdir)
        print(f"  {case[0]}: {sorted(os.listdir(d))}")


def check(fixdir):
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        from safetensors.torch import load_file
        for name, *_ in CASES:
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
    mode.add_argument("--logits", nargs=3, metavar=("DIR", "TOKENS", "OUT"))
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
    raw = np.fromfile(args.logits[1], dtype="<i4")
    b, t = int(raw[0]), int(raw[1])
    tokens = raw[2:2 + b * t].reshape(b, t)
    logits, _ = reference(args.logits[0], np.concatenate([tokens, tokens[:, -1:]], axis=1))
    logits.astype("<f4").tofile(args.logits[2])
    print(f"logits {logits.shape} of {args.logits[0]} written to {args.logits[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
