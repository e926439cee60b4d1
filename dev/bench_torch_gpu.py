#!/usr/bin/env python3
"""dev/bench_torch_gpu.py — the PyTorch GPU run that `dev/gpu_check.sh --perf` puts beside ./train.

GPT-2 as llm.c defines it (dN: depth N, llm.c's widths), vocabulary padded to 50304, trained on
random tokens the way a strong PyTorch baseline would: BF16 autocast, scaled_dot_product_attention
(flash), torch.compile, fused AdamW, TF32 off. Prints one line:

    torch_gpu model d12 B 16 T 1024 tok_s 123456 mfu 0.45 peak_mib 12345 first_step_s 61.2

tokens/s is the median over the steps after the warm-up (compilation) steps; MFU uses the same
FLOPs per token as ./train (6N + 12 L C T) and the same peak table (BF16 dense, by GPU name);
first_step_s is the first step's wall time, torch.compile's compilation included (dev/perf_gpu.sh
decides from it whether d48 is compiled too).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEPTHS = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}
PEAKS = [("H200 NVL", 835), ("H100 NVL", 835), ("H100 PCIe", 756), ("H200", 989), ("H100", 989), ("A100", 312)]


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, Vp=50304, maxT=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("-B", type=int, default=16)
    ap.add_argument("-T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    C, NH = DEPTHS[a.depth]
    L = a.depth
    dev = "cuda"
    model = GPT(L, C, NH).to(dev)
    nparams = sum(p.numel() for p in model.parameters())  # llm.c's count: the padded vocabulary included
    flops_per_token = 6 * nparams + 12 * L * C * a.T
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    step_fn = model if a.no_compile else torch.compile(model)
    times = []
    first_step_s = None
    torch.cuda.reset_peak_memory_stats()
    for s in range(a.warmup + a.steps):
        idx = torch.randint(0, 50257, (a.B, a.T), device=dev)
        tgt = torch.randint(0, 50257, (a.B, a.T), device=dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s == 0:
            first_step_s = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    tok_s = a.B * a.T / statistics.median(times)
    name = torch.cuda.get_device_name()
    peak = next((p for k, p in PEAKS if k in name), 0) * 1e12
    mfu = f"{flops_per_token * tok_s / peak:.3f}" if peak else "n/a"
    print(f"torch_gpu model d{a.depth} B {a.B} T {a.T} tok_s {tok_s:.0f} mfu {mfu} "
          f"peak_mib {torch.cuda.max_memory_allocated() / 2**20:.0f} first_step_s {first_step_s:.1f} "
          f"({name}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
