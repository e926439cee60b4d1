#!/usr/bin/env python3
"""dev/bench_adamw_torch.py — PyTorch's CPU AdamW on one FP32 tensor, for `make bench` beside the
host AdamW of -offload (test/test_bf16 --bench-adamw).

Prints one line per variant this PyTorch offers (the for-loop one, foreach where the version has it,
fused where AdamW takes `fused` and it runs on the CPU: PyTorch 2.4 and later):
"torch_adamw <variant> <ns per element> <GB/s>", the median of 7 steps after one warm-up; a variant
the version names but cannot run on the CPU: "torch_adamw_missing <variant> <why>".
Bytes per element as PyTorch's FP32 AdamW moves them: reads param, grad, exp_avg, exp_avg_sq
(16 B) and writes param, exp_avg, exp_avg_sq (12 B).

    /usr/bin/python3 dev/bench_adamw_torch.py --elements 33554432 --threads 2
"""
import argparse
import inspect
import statistics
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--elements", type=int, default=1 << 25)
ap.add_argument("--threads", type=int, default=0)
a = ap.parse_args()
if a.threads > 0:
    torch.set_num_threads(a.threads)
params = inspect.signature(torch.optim.AdamW).parameters
variants = [("for-loop", {"foreach": False} if "foreach" in params else {})]
if "foreach" in params:
    variants.append(("foreach", {"foreach": True}))
if "fused" in params:
    variants.append(("fused", {"fused": True}))
else:
    print(f"torch_adamw_missing fused not in PyTorch {torch.__version__} (AdamW takes no fused=)")
n = a.elements
for name, kw in variants:
    p = torch.nn.Parameter(torch.randn(n) * 0.02)
    p.grad = torch.randn(n) * 1e-3
    try:
        opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
        opt.step()  # warm-up: allocates exp_avg and exp_avg_sq
    except (RuntimeError, ValueError) as e:
        print(f"torch_adamw_missing {name} {str(e).splitlines()[0][:100]}")
        continue
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    print(f"torch_adamw {name} {t / n * 1e9:.3f} {28.0 * n / t / 1e9:.3f}")
