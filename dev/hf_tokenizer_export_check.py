#!/usr/bin/env python3
"""
dev/hf_tokenizer_export_check.py — transformers' side of test/test_tokenizer.h tok_hf_export_llama3:
an -export-hf directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json)
loaded as a user would load it, and the ids transformers gives, for the C test to compare.

    $ZT_HF_PYTHON dev/hf_tokenizer_export_check.py HARD_CASES.txt DIR OUT_PREFIX KJV.txt|- [DIR OUT_PREFIX KJV.txt|- ...]

for each DIR (one python start for all: importing transformers and torch is most of the time):

  AutoTokenizer.from_pretrained(DIR) with split_special_tokens=True (as -tokenize: special tokens
  in a document are text), unless KJV.txt is "-": OUT_PREFIX.kjv = uint32 LE, per document of KJV.txt (split at
  "<|endoftext|>" lines as tokenizer.h does) the document token (the BOS when the tokenizer has
  one, else the EOS), then the document's ids without special tokens added;
  AutoTokenizer.from_pretrained(DIR) as it comes: OUT_PREFIX.hard = per case, int32 n and n uint32
  ids of tokenizer(case).input_ids (special tokens matched, the post-processor's BOS added); n = -1
  for a case that is not UTF-8;
  AutoModelForCausalLM.from_pretrained(DIR): its vocabulary holds the tokenizer's (ids beyond it only
  added tokens), config.json's and generation_config.json's bos/eos_token_id are the tokenizer's (the EOS as
  bos_token_id when it has no BOS, as Qwen2's config does), and a forward pass on tokenized text gives finite logits.
Prints one line per check; exit 0, or 1 with a message.
"""
import ast
import re
import struct
import sys


def check(d, kjv, hard, out):
    import torch
    from transformers import AutoTokenizer, AutoModelForCausalLM
    tok = AutoTokenizer.from_pretrained(d)
    split = AutoTokenizer.from_pretrained(d, split_special_tokens=True)
    split.model_max_length = 1 << 60  # whole documents: no length warning
    print(f"AutoTokenizer: {type(tok).__name__}, bos {tok.bos_token!r} = {tok.bos_token_id}, eos {tok.eos_token!r} = {tok.eos_token_id}, "
          f"{len(tok)} ids")
    doc_token = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    if kjv != "-":
        data = open(kjv, "rb").read()
        docs = [x.decode("utf-8") for x in re.split(rb"(?:\A|(?<=\n))<\|endoftext\|>(?:\n|\Z)", data) if x]
        stream = []
        for ids in split(docs, add_special_tokens=False)["input_ids"]:
            stream.append(doc_token)
            stream.extend(ids)
        with open(out + ".kjv", "wb") as f:
            f.write(struct.pack(f"<{len(stream)}I", *stream))
        print(f"KJV: {len(docs)} documents, {len(stream)} ids")
    with open(hard, encoding="utf-8") as f, open(out + ".hard", "wb") as o:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            s = ast.literal_eval(line)
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                o.write(struct.pack("<i", -1))
                continue
            ids = tok(s).input_ids
            o.write(struct.pack(f"<i{len(ids)}I", len(ids), *ids))
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
    cfg = model.config
    beyond = [i for i in range(cfg.vocab_size, len(tok)) if i not in tok.added_tokens_decoder]
    if beyond:  # ids past the model's rows: only added tokens (Llama 3.2 ships <|image|> so)
        sys.exit(f"the model has {cfg.vocab_size} ids, the tokenizer {len(tok)}, and id {beyond[0]} is not an added token")
    from transformers import GenerationConfig
    gen = GenerationConfig.from_pretrained(d)
    if gen.bos_token_id != cfg.bos_token_id or gen.eos_token_id != cfg.eos_token_id or model.generation_config.eos_token_id != cfg.eos_token_id:
        sys.exit(f"generation_config.json bos/eos_token_id {gen.bos_token_id}/{gen.eos_token_id}, config.json's {cfg.bos_token_id}/{cfg.eos_token_id}")
    bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id  # no BOS (Qwen2): config.json names the EOS
    if cfg.bos_token_id != bos or cfg.eos_token_id != tok.eos_token_id:
        sys.exit(f"config.json bos/eos_token_id {cfg.bos_token_id}/{cfg.eos_token_id}, the tokenizer's {tok.bos_token_id}/{tok.eos_token_id}")
    enc = tok("In the beginning God created the heaven and the earth.", return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    if logits.shape[-1] != cfg.vocab_size or not torch.isfinite(logits).all():
        sys.exit(f"forward: logits {tuple(logits.shape)}, finite {bool(torch.isfinite(logits).all())}")
    print(f"AutoModelForCausalLM: {type(model).__name__}, vocab {cfg.vocab_size} ({len(tok) - cfg.vocab_size} added token(s) beyond it), "
          f"bos/eos_token_id {cfg.bos_token_id}/{cfg.eos_token_id} (generation_config.json's the same), forward on {enc.input_ids.shape[1]} ids: finite logits")


def main():
    hard, rest = sys.argv[1], sys.argv[2:]
    if len(rest) < 3 or len(rest) % 3:
        sys.exit("usage: hf_tokenizer_export_check.py HARD_CASES.txt DIR OUT_PREFIX KJV.txt|- [DIR OUT_PREFIX KJV.txt|- ...]")
    for i in range(0, len(rest), 3):
        print(f"{rest[i]}:")
        check(rest[i], rest[i + 2], hard, rest[i + 1])


if __name__ == "__main__":
    main()
