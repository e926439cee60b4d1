#!/usr/bin/env python3
"""dev/bench_llama_hf.py — the Hugging Face CPU run that `make bench` puts beside ./train -e llama-tiny.

transformers' own LlamaForCausalLM with llama-tiny's shape (startup.h: L 4, C 128, NH 4, NKV 2,
head_dim 32, intermediate 352, V 50257, rope_theta 10000, untied head, rms_norm_eps 1e-5), in FP32,
trained with torch.optim.AdamW (our trainer's betas, eps, weight decay and clipping) on random
tokens, on the same number of threads; prints one line "hf_tok_s <tokens/s>" (median over the
steps after the warm-up). Needs transformers >= 4.45 (head_dim in LlamaConfig): CI's venv
($ZT_HF_PYTHON) or /tmp/zt-hf47. Under torch 1.13 transformers runs its eager attention (SDPA
needs torch >= 2.1.1), which is what a user with that torch gets.

    $ZT_HF_PYTHON dev/bench_llama_hf.py -B 8 -T 64 --threads 2 --steps 10
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=352)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("-B", type=int, default=8)
    ap.add_argument("-T", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=a.channels, intermediate_size=a.intermediate, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
                      vocab_size=a.vocab, max_position_embeddings=max(a.T, 256), rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                      hidden_act="silu", torch_dtype="float32")
    model = LlamaForCausalLM(cfg).float().train()
    assert model.config.head_dim == a.head_dim, "this transformers ignores head_dim: use >= 4.45"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    times = []
    for _ in range(a.steps):
        idx = torch.randint(0, a.vocab, (a.B, a.T))
        tgt = torch.randint(0, a.vocab, (a.B, a.T))
        t0 = time.perf_counter()
        logits = model(input_ids=idx).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    tok_s = a.B * a.T / statistics.median(times[2:] if len(times) > 3 else times)
    print(f"hf_tok_s {tok_s:.1f} (transformers {transformers.__version__}, torch {torch.__version__}, {a.threads} threads)")


if __name__ == "__main__":
    main()
