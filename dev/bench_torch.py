#!/usr/bin/env python3
"""dev/bench_torch.py — the PyTorch CPU run that `make bench` puts beside the CPU device.

The same GPT-2 as ./train -e tiny (or any L, C, NH, V), in FP32, trained with torch.optim.AdamW
on random tokens, on the same number of threads; prints one line "torch_tok_s <tokens/s>" (median
over the steps after the warm-up). Written for Debian's python3-torch 1.13 (no
scaled_dot_product_attention, no torch.compile needed): attention is written out with a causal mask.

    /usr/bin/python3 dev/bench_torch.py --layers 4 --channels 128 --heads 4 --vocab 50257 -B 8 -T 64 --threads 2
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH, maxT):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH
        self.register_buffer("mask", torch.tril(torch.ones(maxT, maxT, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.NH)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, Vp, maxT):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH, maxT) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head over the padded vocabulary
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("-B", type=int, default=8)
    ap.add_argument("-T", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    Vp = (a.vocab + 127) // 128 * 128
    model = GPT(a.layers, a.channels, a.heads, Vp, max(a.T, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    times = []
    for step in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.B, a.T))
        tgt = torch.randint(0, a.vocab, (a.B, a.T))
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    tok_s = a.B * a.T / statistics.median(times[2:] if len(times) > 3 else times)
    print(f"torch_tok_s {tok_s:.1f} (torch {torch.__version__}, {a.threads} threads)")


if __name__ == "__main__":
    main()
