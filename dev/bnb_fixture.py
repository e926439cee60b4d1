#!/usr/bin/env python3
"""dev/bnb_fixture.py — a bitsandbytes 4-bit checkpoint as transformers saves one, made without bitsandbytes.

bitsandbytes needs torch >= 2.4 and a GPU build to quantize a model; this machine has neither. So this
script writes the files a `*-bnb-4bit` repository holds, in bitsandbytes 0.50.2's exact key layout
(Linear4bit._save_to_state_dict: QuantState.as_dict(packed=True)), with the numbers of
dev/nf4_reference.py (its port of bitsandbytes' quantize_4bit and quantize_blockwise, checked against
libbitsandbytes_cpu.so by test nf4_vs_bitsandbytes):

  model.layers.N.<proj>.weight                           packed 4-bit codes, (ceil(n/2) / size, 1) in the storage dtype
  model.layers.N.<proj>.weight.absmax                    U8 (nb,): the absmax, 8-bit blockwise (double quantization)
  model.layers.N.<proj>.weight.quant_map                 F32 (16,): NF4's code book
  model.layers.N.<proj>.weight.nested_absmax             F32 (nn,)
  model.layers.N.<proj>.weight.nested_quant_map          F32 (256,): the signed dynamic map
  model.layers.N.<proj>.weight.quant_state.bitsandbytes__nf4   U8: json.dumps of quant_type, blocksize, dtype, shape,
                                                         nested_blocksize, nested_dtype, nested_offset
and config.json's quantization_config as transformers 4.47 writes it. Every other tensor (embeddings,
norms, biases, the LM head) is copied in BF16 (the compute dtype a 4-bit model keeps them in).

Beside it, a plain checkpoint of the same model whose projections are the dequantized values (what
bitsandbytes' dequantize_4bit gives in BF16), written as F32: a BF16 base holding them is the model the
4-bit checkpoint describes.

Usage: dev/bnb_fixture.py SRC_DIR OUT_DIR [--storage S[,S...]]   (S: uint8 (the default), bfloat16, float16, float32)
  writes OUT_DIR/bnb4 (the 4-bit checkpoint, the first storage dtype), OUT_DIR/bnb4_<S> for each further one
  (the same bytes viewed as S) and OUT_DIR/deq (the dequantized one); SRC_DIR is a Llama-family checkpoint
  (config.json + model.safetensors, any float dtype). Exit 3: torch or safetensors missing.
"""
import json
import os
import re
import sys

try:
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file
except ImportError as e:  # the test reports SKIP
    print(f"bnb_fixture: {e}", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nf4_reference as ref  # noqa: E402

PROJ = re.compile(r"^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$")
STORAGE = {"uint8": torch.uint8, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def main():
    args = sys.argv[1:]
    storages = ["uint8"]
    if "--storage" in args:
        i = args.index("--storage")
        storages = args[i + 1].split(",")
        del args[i:i + 2]
    src, out = args
    for k, storage in enumerate(storages):
        write(src, out, storage, "bnb4" if k == 0 else "bnb4_" + storage, k == 0)


def write(src, out, storage, bnb_name, with_deq):
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(src, f)))
    bnb, deq = {}, {}
    for name, t in sd.items():
        t16 = t.to(torch.bfloat16)
        if not PROJ.match(name):
            bnb[name] = t16.contiguous()
            deq[name] = t16.float().contiguous()
            continue
        w = t16.float().numpy().reshape(-1)            # the BF16 weights transformers hands bitsandbytes
        q = ref.quantize_nf4_dq(w)
        codes = torch.from_numpy(q["codes"].copy())    # (ceil(n/2),) uint8
        st = STORAGE[storage]
        if st != torch.uint8:                          # bitsandbytes: packed.squeeze().view(quant_storage).unsqueeze(1)
            codes = codes.view(st)
        bnb[name] = codes.reshape(-1, 1).contiguous()
        bnb[name + ".absmax"] = torch.from_numpy(q["qabs"].copy())
        bnb[name + ".quant_map"] = torch.from_numpy(ref.NF4.astype(np.float32).copy())
        bnb[name + ".nested_absmax"] = torch.from_numpy(q["nested"].astype(np.float32).copy())
        bnb[name + ".nested_quant_map"] = torch.from_numpy(ref.DYN.astype(np.float32).copy())
        state = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": list(t.shape),
                 "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(q["offset"])}
        bnb[name + ".quant_state.bitsandbytes__nf4"] = torch.tensor(list(json.dumps(state).encode("utf-8")), dtype=torch.uint8)
        v, _ = ref.dequantize_nf4_dq(q, w.size)        # FP32 code[c] * absmax, then dequantize_4bit's BF16 output
        deq[name] = torch.from_numpy(v).reshape(t.shape).to(torch.bfloat16).float().contiguous()
    for sub, tensors, c in ((bnb_name, bnb, True), ("deq", deq, False)):
        if not c and not with_deq:
            continue
        d = os.path.join(out, sub)
        os.makedirs(d, exist_ok=True)
        conf = dict(cfg)
        conf["torch_dtype"] = "bfloat16" if c else "float32"
        if c:
            conf["quantization_config"] = {
                "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
                "bnb_4bit_quant_storage": storage, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
                "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}
        json.dump(conf, open(os.path.join(d, "config.json"), "w"), indent=2, sort_keys=True)
        save_file(tensors, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    print(f"bnb_fixture: {sum(1 for n in sd if PROJ.match(n))} projection(s) in 4 bits ({storage} storage) -> {out}/{bnb_name}"
          + (f", dequantized -> {out}/deq" if with_deq else ""))


if __name__ == "__main__":
    main()
