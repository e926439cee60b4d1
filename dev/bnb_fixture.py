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

Usage: dev/bnb_fixture.py SRC_DIR OUT_DIR [--storage S[,S...]] [--simd 16] [--widen H,F] [--deq-f32]
  S: uint8 (the default), bfloat16, float16, float32. --simd 16: the nested map as torch.linspace makes it
  with AVX-512's 16 lanes (dev/nf4_reference.py: 28 entries one ulp from the AVX2 map ops/nf4.cuh holds),
  used to quantize the absmax and saved as .nested_quant_map: a checkpoint made on such a CPU.
  --widen H,F: SRC's model with hidden_size H and intermediate_size F instead (every dimension equal to
  SRC's hidden or intermediate size replaced; random N(0, 0.02) weights, norms 1, seeded): more blocks.
  --deq-f32: the dequantized checkpoint holds bitsandbytes' FP32 values (code * absmax), not their BF16
  rounding (what an FP32 dequantization gives: the FP32 build's).
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
DYN, LUT = ref.DYN, None  # the nested map and its quantizer's table (None: nf4_reference's own)
MOVED = 0                 # --simd: BF16 weights that the AVX2 map would dequantize to another value
WIDEN = None              # --widen H,F
DEQ_F32 = False           # --deq-f32


STORAGE = {"uint8": torch.uint8, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def main():
    args = sys.argv[1:]
    storages = ["uint8"]
    global DYN, LUT
    if "--simd" in args:
        i = args.index("--simd")
        DYN = ref.create_dynamic_map(signed=True, vec=int(args[i + 1]))
        LUT = ref.build_quantize_lut(DYN)
        del args[i:i + 2]
    if "--storage" in args:
        i = args.index("--storage")
        storages = args[i + 1].split(",")
        del args[i:i + 2]
    global DEQ_F32
    if "--deq-f32" in args:
        DEQ_F32 = True
        args.remove("--deq-f32")
    widen = None
    if "--widen" in args:
        i = args.index("--widen")
        widen = [int(x) for x in args[i + 1].split(",")]
        del args[i:i + 2]
    src, out = args
    global WIDEN
    WIDEN = widen

    for k, storage in enumerate(storages):
        write(src, out, storage, "bnb4" if k == 0 else "bnb4_" + storage, k == 0)


def write(src, out, storage, bnb_name, with_deq):
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(src, f)))
    if WIDEN:  # the same architecture, wider: each tensor's hidden / intermediate dimensions replaced
        H0, F0 = cfg["hidden_size"], cfg["intermediate_size"]
        cfg = dict(cfg, hidden_size=WIDEN[0], intermediate_size=WIDEN[1])
        g = torch.Generator().manual_seed(1234)
        wide = {}
        for name in sorted(sd):
            shape = [WIDEN[0] if d == H0 else WIDEN[1] if d == F0 else d for d in sd[name].shape]
            wide[name] = torch.ones(shape) if name.endswith("norm.weight") else torch.randn(shape, generator=g) * 0.02
        sd = wide
    bnb, deq = {}, {}
    for name, t in sd.items():
        t16 = t.to(torch.bfloat16)
        if not PROJ.match(name):
            bnb[name] = t16.contiguous()
            deq[name] = t16.float().contiguous()
            continue
        w = t16.float().numpy().reshape(-1)            # the BF16 weights transformers hands bitsandbytes
        q = ref.quantize_nf4_dq(w, DYN, LUT)
        codes = torch.from_numpy(q["codes"].copy())    # (ceil(n/2),) uint8
        st = STORAGE[storage]
        if st != torch.uint8:                          # bitsandbytes: packed.squeeze().view(quant_storage).unsqueeze(1)
            codes = codes.view(st)
        bnb[name] = codes.reshape(-1, 1).contiguous()
        bnb[name + ".absmax"] = torch.from_numpy(q["qabs"].copy())
        bnb[name + ".quant_map"] = torch.from_numpy(ref.NF4.astype(np.float32).copy())
        bnb[name + ".nested_absmax"] = torch.from_numpy(q["nested"].astype(np.float32).copy())
        bnb[name + ".nested_quant_map"] = torch.from_numpy(DYN.astype(np.float32).copy())
        state = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": list(t.shape),
                 "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": float(q["offset"])}
        bnb[name + ".quant_state.bitsandbytes__nf4"] = torch.tensor(list(json.dumps(state).encode("utf-8")), dtype=torch.uint8)
        v, _ = ref.dequantize_nf4_dq(q, w.size, dyn=DYN)  # FP32 code[c] * absmax (then dequantize_4bit's BF16 output)
        if DYN is not ref.DYN:                          # how many weights another map (ours) would change
            global MOVED
            ours, _ = ref.dequantize_nf4_dq(q, w.size)
            a, b = torch.from_numpy(ours), torch.from_numpy(v)
            MOVED += int((a != b).sum() if DEQ_F32 else (a.to(torch.bfloat16) != b.to(torch.bfloat16)).sum())
        dv = torch.from_numpy(v).reshape(t.shape)
        deq[name] = (dv if DEQ_F32 else dv.to(torch.bfloat16).float()).contiguous()
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
          + (f", dequantized -> {out}/deq" if with_deq else "")
          + (f"; its nested map moves {MOVED} {'FP32' if DEQ_F32 else 'BF16'} weight(s) against ours" if DYN is not ref.DYN else ""))


if __name__ == "__main__":
    main()
