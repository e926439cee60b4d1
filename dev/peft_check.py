#!/usr/bin/env python3
"""dev/peft_check.py — an adapter -lora-export wrote, loaded by PEFT itself (test/test_lora.h runs it).

    ZT_HF_PYTHON dev/peft_check.py BASE_DIR ADAPTER_DIR TOKENS_FILE [--write R ALPHA TARGETS] [--grads OUT]
                                   [--merged DIR] [--merged-bf16 DIR]

BASE_DIR: the base model as -export-hf writes it (Hugging Face GPT-2, F32). ADAPTER_DIR: what
-lora-export wrote (adapter_model.safetensors, adapter_config.json). TOKENS_FILE: int32 B, T, then
B*T inputs and B*T targets. Loads the base with transformers, the adapter with
PeftModel.from_pretrained (no key may be missing or unexpected: every lora_A / lora_B of the model
must come from the file), runs the inputs in FP32 and prints "peft loss X": the mean cross-entropy
over the targets. With --write, PEFT first makes the adapter itself (LoraConfig(r, lora_alpha,
target_modules, init_lora_weights=False: B random too, fan_in_fan_out for GPT-2's Conv1D), saves it
into ADAPTER_DIR with save_pretrained, then does the same (-lora-init reads it). With --grads OUT,
PEFT's autograd gives the mean loss's gradient of every lora_A / lora_B (FP32), written to OUT as
safetensors under the adapter file's names (test/test_lora.h compares ours).
--merged DIR: what -export-hf wrote with -lora (the merged model, F32): PEFT's merge_and_unload()
of the loaded adapter, tensor by tensor against DIR's model.safetensors (prints "merged worst R":
the largest ||ours - PEFT's|| / ||PEFT's|| over the tensors), then DIR loaded by from_pretrained on
its own ("merged loss X": the adapter-applied loss without PEFT). --merged-bf16 DIR: the same
export in BF16 against PEFT's FP32 merge rounded to BF16 ("bf16 ulps N M": elements more than one
BF16 ulp apart (N) and elements that differ at all (M)). Exit 3 when transformers or peft cannot be
imported (the test SKIPs).
"""
import sys
try:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    from peft import PeftModel
    from safetensors.torch import load_file
except Exception as e:  # noqa: BLE001 — any import failure means "not this venv"
    print("peft_check: cannot import transformers/peft/safetensors:", e)
    sys.exit(3)

base_dir, ad_dir, tok_path = sys.argv[1:4]
raw = np.fromfile(tok_path, dtype=np.int32)
B, T = int(raw[0]), int(raw[1])
inputs = torch.tensor(raw[2:2 + B * T].reshape(B, T), dtype=torch.long)
targets = torch.tensor(raw[2 + B * T:2 + 2 * B * T].reshape(B, T), dtype=torch.long)
base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
if "--write" in sys.argv:
    from peft import LoraConfig, get_peft_model
    i = sys.argv.index("--write")
    r, alpha, modules = int(sys.argv[i + 1]), float(sys.argv[i + 2]), sys.argv[i + 3].split(",")
    torch.manual_seed(0)
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=modules, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                     init_lora_weights=False, fan_in_fan_out=base.config.model_type == "gpt2")
    written = get_peft_model(base, cfg)
    written.save_pretrained(ad_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
model = PeftModel.from_pretrained(base, ad_dir)
model.eval()
# every adapter weight of the PEFT model equals the file's (nothing left at PEFT's init)
sd = load_file(ad_dir + "/adapter_model.safetensors")
mine = {k: v for k, v in model.state_dict().items() if "lora_" in k}
want = {k.replace(".weight", ".default.weight"): v for k, v in sd.items()}
if set(mine) != set(want):
    print("peft_check: the model's adapter tensors and the file's differ:", sorted(set(mine) ^ set(want))[:6])
    sys.exit(1)
for k, v in want.items():
    if not torch.equal(mine[k], v):
        print("peft_check: %s differs from the file" % k)
        sys.exit(1)
grads = "--grads" in sys.argv
for name, prm in model.named_parameters():  # (from_pretrained loads the adapter for inference: frozen)
    prm.requires_grad_(grads and "lora_" in name)
with torch.set_grad_enabled(grads):
    logits = model(input_ids=inputs).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
if grads:
    from safetensors.torch import save_file
    loss.backward()
    named = dict(model.named_parameters())
    out = {k: named[k.replace(".weight", ".default.weight")].grad.detach().contiguous() for k in sd}
    save_file(out, sys.argv[sys.argv.index("--grads") + 1])
    print("peft grads %d" % len(out))
print("peft tensors %d" % len(want))
print("peft loss %.9g" % loss.item())


def arg(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None


def ours_vs_merged(path, merged):
    """(name, our tensor, PEFT's) for every tensor of our file; PEFT's names may carry the model's prefix."""
    ours = load_file(path + "/model.safetensors")
    out = []
    for k, v in ours.items():
        m = merged.get(k)
        if m is None:
            m = merged.get("transformer." + k)
        if m is None:
            print("peft_check: %s of %s is not a tensor of the merged model" % (k, path))
            sys.exit(1)
        if tuple(m.shape) != tuple(v.shape):
            print("peft_check: %s: ours %s, PEFT's %s" % (k, tuple(v.shape), tuple(m.shape)))
            sys.exit(1)
        out.append((k, v, m))
    return out


mdir, bdir = arg("--merged"), arg("--merged-bf16")
if mdir or bdir:
    merged = {k: v.detach().clone() for k, v in model.merge_and_unload().state_dict().items()}
if mdir:
    worst, name = 0.0, ""
    for k, v, m in ours_vs_merged(mdir, merged):
        rel = (v.double() - m.double()).norm().item() / max(m.double().norm().item(), 1e-30)
        if rel > worst:
            worst, name = rel, k
    print("merged tensors %d worst %.3g (%s)" % (len(merged), worst, name))
    print("merged worst %.9g" % worst)
    alone = AutoModelForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32)
    alone.eval()
    with torch.no_grad():
        logits = alone(input_ids=inputs).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
    print("merged loss %.9g" % loss.item())
if bdir:
    far = differ = total = 0
    for k, v, m in ours_vs_merged(bdir, merged):
        if v.dtype != torch.bfloat16:
            print("peft_check: %s of %s is %s, not BF16" % (k, bdir, v.dtype))
            sys.exit(1)
        ref = m.to(torch.bfloat16)
        a, b = v.float(), ref.float()
        # one BF16 ulp at b: 2^(exponent(b) - 7)
        ulp = torch.ldexp(torch.ones_like(b), torch.frexp(b)[1] - 8)
        far += int(((a - b).abs() > ulp).sum())
        differ += int((a != b).sum())
        total += a.numel()
    print("bf16 ulps %d %d of %d" % (far, differ, total))
