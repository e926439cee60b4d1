"""dev/rope_fixture.py — the RoPE fixture test/test_ops.h compares rope_table and op_rope_forward with.

Runs transformers' own LlamaRotaryEmbedding and apply_rotary_pos_emb (transformers 4.47.1 over torch
1.13, the CI venv of issue 21) in float32 on the CPU and writes test/fixtures/rope.bin, a ZTFX archive
(the format test/fixture.h reads; layout in test/fixtures/README.md):

    ZT_HF_PYTHON=/tmp/zt-hf47/bin/python; $ZT_HF_PYTHON dev/rope_fixture.py --out test/fixtures/rope.bin
    $ZT_HF_PYTHON dev/rope_fixture.py --check test/fixtures/rope.bin   # regenerate and compare bytes

Entries, for each case k of CASES (0-based):
    rope<k>.cfg   float32 [HD, T, theta, type (0 default, 1 linear, 2 llama3), factor, low_freq_factor,
                   high_freq_factor, original_max_position_embeddings]
    rope<k>.inv_freq float32 (HD/2): the frequencies (the scaling rules' output)
    rope<k>.cos   float32 (T, HD/2): transformers' cos for positions 0..T-1 (its two halves are equal;
    rope<k>.sin   float32 (T, HD/2)  checked here, so the C side stores one half)
and one apply case, rotating q (B, T, NH, HD) and k (B, T, NKV, HD) with case 0's table:
    apply.shape   int32 [B, T, NH, NKV, HD]
    apply.q, apply.k           float32 inputs (random, seed 1234)
    apply.q_out, apply.k_out   apply_rotary_pos_emb's outputs, float32
"""
import argparse
import struct
import sys

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

TYPES = {"default": 0, "linear": 1, "llama3": 2}
# (head_dim, T, rope_theta, rope_scaling or None): odd head sizes and factors on purpose, and llama3
# bands that put frequencies on both sides of and inside the smoothed band.
CASES = [
    (16, 37, 10000.0, None),
    (24, 37, 10000.0, {"rope_type": "linear", "factor": 3.0}),
    (64, 37, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192}),
    (40, 37, 10000.0, {"rope_type": "llama3", "factor": 5.0, "low_freq_factor": 1.5, "high_freq_factor": 6.0,
                       "original_max_position_embeddings": 96}),
]


def table(hd, T, theta, scaling):
    nh = 2
    cfg = LlamaConfig(hidden_size=hd * nh, num_attention_heads=nh, head_dim=hd, rope_theta=theta,
                      rope_scaling=scaling,
                      max_position_embeddings=max(T, 2 * (scaling or {}).get("original_max_position_embeddings", 64)))
    emb = LlamaRotaryEmbedding(config=cfg)
    x = torch.zeros(1, T, hd, dtype=torch.float32)
    cos, sin = emb(x, torch.arange(T)[None, :])
    cos, sin = cos[0], sin[0]
    assert torch.equal(cos[:, : hd // 2], cos[:, hd // 2:]) and torch.equal(sin[:, : hd // 2], sin[:, hd // 2:])
    return cos, sin, emb.inv_freq.float()


def entries():
    out = []
    for k, (hd, T, theta, sc) in enumerate(CASES):
        cos, sin, inv_freq = table(hd, T, theta, sc)
        t = TYPES[sc["rope_type"]] if sc else 0
        sc = sc or {}
        cfg = [hd, T, theta, t, sc.get("factor", 1.0), sc.get("low_freq_factor", 0.0), sc.get("high_freq_factor", 0.0),
               sc.get("original_max_position_embeddings", 0)]
        out.append((f"rope{k}.cfg", np.array(cfg, dtype=np.float32)))
        out.append((f"rope{k}.inv_freq", inv_freq.numpy()))
        out.append((f"rope{k}.cos", cos[:, : hd // 2].numpy()))
        out.append((f"rope{k}.sin", sin[:, : hd // 2].numpy()))
    hd, T, theta, sc = CASES[0]
    B, NH, NKV = 2, 3, 1
    g = torch.Generator().manual_seed(1234)
    q = torch.randn(B, T, NH, hd, generator=g, dtype=torch.float32)
    kk = torch.randn(B, T, NKV, hd, generator=g, dtype=torch.float32)
    cos, sin, _ = table(hd, T, theta, sc)
    # transformers' layout: (B, heads, T, HD), cos/sin (B, T, HD) unsqueezed at dim 1
    qo, ko = apply_rotary_pos_emb(q.transpose(1, 2), kk.transpose(1, 2), cos[None].expand(B, -1, -1),
                                  sin[None].expand(B, -1, -1))
    out.append(("apply.shape", np.array([B, T, NH, NKV, hd], dtype=np.int32)))
    out.append(("apply.q", q.numpy()))
    out.append(("apply.k", kk.numpy()))
    out.append(("apply.q_out", qo.transpose(1, 2).contiguous().numpy()))
    out.append(("apply.k_out", ko.transpose(1, 2).contiguous().numpy()))
    return out


def archive(ents):
    b = bytearray(b"ZTFX" + struct.pack("<ii", 1, len(ents)))
    for name, a in ents:
        a = np.ascontiguousarray(a)
        dims = list(a.shape) + [1] * (4 - a.ndim)
        dtype = 1 if a.dtype == np.int32 else 0
        b += name.encode().ljust(64, b"\0") + struct.pack("<ii4i", dtype, a.ndim, *dims)
        b += a.astype("<i4" if dtype else "<f4").tobytes()
    return bytes(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--check")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = archive(entries())
    if a.out:
        open(a.out, "wb").write(data)
        print(f"wrote {a.out} ({len(data)} bytes)")
    if a.check:
        old = open(a.check, "rb").read()
        if old != data:
            sys.exit(f"{a.check}: differs from a fresh run of dev/rope_fixture.py (regenerate with --out)")
        print(f"{a.check}: identical")
    if not a.out and not a.check:
        ap.error("give --out PATH or --check PATH")


if __name__ == "__main__":
    main()
