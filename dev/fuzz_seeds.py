#!/usr/bin/env python3
"""dev/fuzz_seeds.py — write the seed corpus of test/fuzz (test/fuzz_corpus/<harness>/): one small
valid input per reader, so the fuzzer starts from files that get past the magic numbers.
Run from the repository root: python3 dev/fuzz_seeds.py"""
import os, struct

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def put(harness, name, data):
    d = os.path.join("test", "fuzz_corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def model_params(L, C, V, Vp, maxT):
    return (Vp + maxT) * C + L * (12 * C * C + 13 * C) + 2 * C

# model: llm.c v3 (FP32) and v5 (BF16), L 1, C 4, NH 1, V 3 (Vp 4), maxT 2
for version, esize in ((3, 4), (5, 2)):
    n = model_params(1, 4, 3, 4, 2)
    header = struct.pack("<256i", 20240326, version, 2, 3, 1, 1, 4, 4, *([0] * 248))
    body = b"".join(struct.pack("<f", 0.01 * (i % 7)) if esize == 4 else struct.pack("<H", 0x3c00) for i in range(n))
    put("model", "v%d.bin" % version, header + body)

# shard: 20 tokens
put("shard", "small.bin", struct.pack("<256i", 20240520, 1, 20, *([0] * 253)) + struct.pack("<20H", *range(100, 120)))

# state: the harness's model (L 1, C 8, NH 2, V 10, Vp 16, maxT 4) at R = 1 as one piece
L, C, NH, V, Vp, maxT = 1, 8, 2, 10, 16, 4
total = model_params(L, C, V, Vp, maxT)
payload = b"".join(struct.pack("<f", 0.001 * i) for i in range(total)) + b"\0" * (8 * total)
chunks = [payload[i:i + (1 << 20)] for i in range(0, len(payload), 1 << 20)]
h = [0] * 32
h[:22] = [20261129, 2, 1, 0, 1, 1, 1, 1337, 1, total, L, C, NH, V, Vp, maxT, 64, 1000, 0x1234567890abcdef, 1 << 20, len(chunks), 0]
table = struct.pack("<2q", 0, total)
crcs = b"".join(struct.pack("<I", crc32c(c)) for c in chunks)
h[21] = crc32c(crcs, crc32c(table, crc32c(struct.pack("<32q", *h))))
put("state", "one_piece.bin", struct.pack("<32q", *h) + table + crcs + payload)

# tokenizer: llm.c version 2, 4 tokens, EOT = 3
toks = [b"a", b"bc", b"\xe2\x82", b"<|endoftext|>"]
put("tokenizer", "v2.bin", struct.pack("<256I", 20240328, 2, len(toks), 3, *([0] * 252)) + b"".join(bytes([len(t)]) + t for t in toks))

# bpe: text, with malformed UTF-8 and the end-of-text marker
put("bpe", "text.txt", "In the beginning God created the heaven and the earth.\n\nIt's 2026 — don't panic!".encode())
put("bpe", "bytes.bin", b"\xff\xfe caf\xc3\xa9 \xe2\x82 <|endoftext|>\r\n  \t\t12345")

# safetensors: a GPT-2 matching the harness's fixed config.json (L 1, C 8, NH 2, V 16, maxT 8), in
# F32 and BF16; the BF16 one with the "transformer." prefix, the tied lm_head and a causal-mask buffer
import json
L, C, V, maxT = 1, 8, 16, 8
gpt2 = [("wte.weight", [V, C]), ("wpe.weight", [maxT, C])]
for l in range(L):
    gpt2 += [("h.%d.ln_1.weight" % l, [C]), ("h.%d.ln_1.bias" % l, [C]), ("h.%d.attn.c_attn.weight" % l, [C, 3 * C]),
             ("h.%d.attn.c_attn.bias" % l, [3 * C]), ("h.%d.attn.c_proj.weight" % l, [C, C]), ("h.%d.attn.c_proj.bias" % l, [C]),
             ("h.%d.ln_2.weight" % l, [C]), ("h.%d.ln_2.bias" % l, [C]), ("h.%d.mlp.c_fc.weight" % l, [C, 4 * C]),
             ("h.%d.mlp.c_fc.bias" % l, [4 * C]), ("h.%d.mlp.c_proj.weight" % l, [4 * C, C]), ("h.%d.mlp.c_proj.bias" % l, [C])]
gpt2 += [("ln_f.weight", [C]), ("ln_f.bias", [C])]

def safetensors(tensors, dtype):
    header, body = {"__metadata__": {"format": "pt"}}, b""
    for name, shape, values in tensors:
        data = b"".join(struct.pack("<f", v) if dtype == "F32" else struct.pack("<f", v)[2:] for v in values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body

def values(shape, k):
    n = 1
    for d in shape: n *= d
    return [0.01 * ((i + k) % 13) - 0.06 for i in range(n)]

plain = [(name, shape, values(shape, k)) for k, (name, shape) in enumerate(gpt2)]
put("safetensors", "f32.safetensors", safetensors(plain, "F32"))
prefixed = [("transformer." + name, shape, v) for name, shape, v in plain]
prefixed += [("lm_head.weight", [V, C], plain[0][2]), ("transformer.h.0.attn.bias", [1, 1, maxT, maxT], [1.0] * maxT * maxT)]
put("safetensors", "bf16_prefixed.safetensors", safetensors(prefixed, "BF16"))

# jsonl: prompt/completion lines (escapes, unicode, a blank line, a long prompt cut at its start),
# and one file whose third line is bad (refused: no shard may be left behind)
lines = [{"prompt": "The capital of France is", "completion": " Paris."},
         {"prompt": "Translate: caf\u00e9 \u2192 ", "completion": " coffee \U0001F600"},
         {"prompt": "Q: 2+2?\nA:", "completion": " 4"},
         {"prompt": "a very long prompt " * 6, "completion": " short"},
         {"prompt": "", "completion": "<|endoftext|> \"quoted\" \\ tab\t"}]
good = "\n".join(json.dumps(x, ensure_ascii=k % 2 == 0) for k, x in enumerate(lines)) + "\n\n"
put("jsonl", "good.jsonl", good.encode())
put("jsonl", "bad_line.jsonl", (json.dumps(lines[0]) + "\n" + json.dumps(lines[2]) + "\n" + '{"prompt": "x", "completion": 3}\n').encode())

# chat: conversations; the first byte picks the template of test/fuzz's chat harness ("0": SmolLM2's
# ChatML, "1": Llama 3.1's). Two good files (both formats, a system prompt, whitespace that trim
# removes), one to cut by whole turns at T = 128, one with an unknown role (refused).
def msg(role, content):
    return {"role": role, "content": content}
chat_lines = [{"messages": [msg("system", "Be brief."), msg("user", "Hi ab"), msg("assistant", "Hello!")]},
              {"messages": [msg("user", "x"), msg("assistant", "y"), msg("user", "z"), msg("assistant", "w")]},
              {"messages": [msg("system", "  Sys  "), msg("user", " q\n"), msg("assistant", "\u00a0a\u3000")]},
              {"prompt": [msg("user", "p")], "completion": [msg("assistant", "c")]}]
put("chat", "chatml.jsonl", ("0" + "".join(json.dumps(x) + "\n" for x in chat_lines[:2])).encode())
put("chat", "llama31.jsonl", ("1" + "".join(json.dumps(x) + "\n" for x in chat_lines[2:])).encode())
put("chat", "cut.jsonl", ("1" + json.dumps({"messages": [msg("user", "a" * 100), msg("assistant", "x"), msg("user", "q"), msg("assistant", "y")]}) + "\n").encode())
put("chat", "bad_role.jsonl", ("0" + json.dumps({"messages": [msg("robot", "x"), msg("assistant", "y")]}) + "\n").encode())

# bnb: a bitsandbytes 4-bit Llama matching test/fuzz's bnb harness's config.json (L 1, C 8, NH 2, NKV 1,
# head_dim 4, F 16, V 16, maxT 8, untied head): each projection's packed codes (U8), .absmax (U8),
# .quant_map and .nested_quant_map (ops/nf4.cuh's tables, read from the header), .nested_absmax and the
# quant state's JSON (hf.h: hf_nf4_part); the rest F32
import re
hdr = open(os.path.join("ops", "nf4.cuh")).read()
def table(name):
    body = hdr[hdr.index("static const float %s[" % name):]
    body = body[body.index("{") + 1:body.index("};")]
    return [float.fromhex(x.strip().rstrip("f")) for x in body.split(",") if x.strip()]
NF4_T, DYN_T = table("NF4_CODE"), table("NF4_DYN")

def safetensors_raw(tensors):
    header, body = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body

f32 = lambda vals: b"".join(struct.pack("<f", v) for v in vals)
C, F, V, Q, K = 8, 16, 16, 8, 4
bnb = [("model.embed_tokens.weight", "F32", [V, C], f32(values([V, C], 1))), ("lm_head.weight", "F32", [V, C], f32(values([V, C], 2))),
       ("model.norm.weight", "F32", [C], f32([1.0] * C)), ("model.layers.0.input_layernorm.weight", "F32", [C], f32([1.0] * C)),
       ("model.layers.0.post_attention_layernorm.weight", "F32", [C], f32([1.0] * C))]
for mod, (d0, d1) in (("self_attn.q_proj", (Q, C)), ("self_attn.k_proj", (K, C)), ("self_attn.v_proj", (K, C)), ("self_attn.o_proj", (C, Q)),
                      ("mlp.gate_proj", (F, C)), ("mlp.up_proj", (F, C)), ("mlp.down_proj", (C, F))):
    w, n = "model.layers.0.%s.weight" % mod, d0 * d1
    nb = -(-n // 64); nn = -(-nb // 256)
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [d0, d1], "nested_blocksize": 256,
                        "nested_dtype": "float32", "nested_offset": 0.015625}).encode()
    bnb += [(w, "U8", [(n + 1) // 2, 1], bytes((i * 37 + 11) % 256 for i in range((n + 1) // 2))),
            (w + ".absmax", "U8", [nb], bytes((100 + 7 * i) % 256 for i in range(nb))),
            (w + ".quant_map", "F32", [16], f32(NF4_T)), (w + ".nested_absmax", "F32", [nn], f32([0.03] * nn)),
            (w + ".nested_quant_map", "F32", [256], f32(DYN_T)), (w + ".quant_state.bitsandbytes__nf4", "U8", [len(state)], state)]
put("bnb", "llama_nf4.safetensors", safetensors_raw(bnb))
