#!/usr/bin/env python3
"""dev/attn_bench_torch.py — PyTorch's scaled_dot_product_attention at one shape, per backend.

    python3 dev/attn_bench_torch.py B NH T HS

Prints one line per SDPA backend that runs (flash = FlashAttention-2 inside PyTorch; cudnn =
cuDNN's fused attention), in the format of dev/attn_bench.cu:

    torch_flash fwd_ms X bwd_ms Y fwd_tflops A bwd_tflops B

BF16, causal, (B, NH, T, HS) tensors; FLOPs are the ideal causal FlashAttention counts (forward
2·B·NH·T²·HS, backward 2.5× that), the same as ours. Times are CUDA-event medians over 20 runs
after 3 warm-up runs; the backward is timed alone (the forward's graph is built outside the timing).
"""
import statistics
import sys

import torch
import torch.nn.functional as F


def bench(fn, warm=3, reps=20):
    times = []
    for r in range(warm + reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        if r >= warm:
            times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def main():
    B, NH, T, HS = (int(a) for a in sys.argv[1:5])
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("flash", SDPBackend.FLASH_ATTENTION)]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(("cudnn", SDPBackend.CUDNN_ATTENTION))
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    fwd_flops = 2.0 * B * NH * T * T * HS
    bwd_flops = 2.5 * fwd_flops
    for name, backend in backends:
        try:
            with sdpa_kernel([backend]):
                qq, kk, vv = (x.detach().requires_grad_(True) for x in (q, k, v))
                fwd_ms = bench(lambda: F.scaled_dot_product_attention(qq, kk, vv, is_causal=True))

                def backward():
                    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                    torch.cuda.synchronize()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    o.backward(do)
                    e1.record()
                    torch.cuda.synchronize()
                    return e0.elapsed_time(e1)

                for _ in range(3):
                    backward()
                bwd_ms = statistics.median(backward() for _ in range(20))
        except RuntimeError as e:  # the backend does not take this shape or GPU
            print("torch_%s unavailable: %s" % (name, str(e).splitlines()[0][:200]))
            continue
        print("torch_%s fwd_ms %.4f bwd_ms %.4f fwd_tflops %.1f bwd_tflops %.1f" %
              (name, fwd_ms, bwd_ms, fwd_flops / (fwd_ms * 1e-3) / 1e12, bwd_flops / (bwd_ms * 1e-3) / 1e12))


if __name__ == "__main__":
    main()
