#!/usr/bin/env python3
"""
dev/bench_tokenize.py — the reference side of make bench's tokenizer section (dev/bench.sh).

    $ZT_TIKTOKEN_PYTHON dev/bench_tokenize.py prepare DIR   # DIR/kjv.txt, DIR/gpt2/tokenizer.json
    $ZT_TIKTOKEN_PYTHON dev/bench_tokenize.py time DIR MODE [TOKENIZER_JSON]  # prints "<MB/s>" for one MODE

prepare: the KJV text decoded from the committed shards (data/kjv_*.bin, GPT-2's byte decoder from
data/gpt2/encoder.json), four times over, chapters joined by "<|endoftext|>" lines; and GPT-2 as a tokenizer.json
built by `tokenizers` itself from data/gpt2/encoder.json + vocab.bpe (the files OpenAI published).
time MODE, on the chapters of DIR/kjv.txt (the same text -tokenize reads), best of 3:
  tiktoken1      tiktoken 0.14.0 GPT-2 encode_ordinary, one chapter at a time (one thread)
  tokenizers1    tokenizers 0.21.0 on DIR/gpt2/tokenizer.json, encode_batch with one thread
  tokenizersN    the same with every core (RAYON_NUM_THREADS unset)
  (with TOKENIZER_JSON, the tokenizers modes run that file instead of GPT-2's: a SentencePiece-style
  one of dev/sp_tokenizer_fixtures.py for make bench's Mistral line)
(tokenizers' thread count is fixed at import, so each mode is its own process.)
"""
import json
import os
import re
import struct
import sys
import time

from gpt2_bytes import bytes_to_unicode  # dev/gpt2_bytes.py: GPT-2's byte <-> character map


def prepare(d):
    os.makedirs(os.path.join(d, "gpt2"), exist_ok=True)
    enc = json.load(open("data/gpt2/encoder.json", encoding="utf-8"))
    dec = {c: b for b, c in bytes_to_unicode().items()}
    tok_bytes = {i: bytes(dec[c] for c in s) for s, i in enc.items()}
    docs = []
    for split in ("train", "val"):
        raw = open(f"data/kjv_{split}.bin", "rb").read()
        n = struct.unpack("<3i", raw[:12])[2]
        ids = struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n])
        cur = None
        for t in ids:
            if t == 50256:
                if cur is not None:
                    docs.append(b"".join(cur))
                cur = []
            else:
                cur.append(tok_bytes[t])
        docs.append(b"".join(cur))
    with open(os.path.join(d, "kjv.txt"), "wb") as f:  # the KJV four times over: 17 MB, 4,756 documents
        f.write(b"<|endoftext|>\n".join(docs * 4))
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken
    t = Tokenizer(models.BPE.from_file("data/gpt2/encoder.json", "data/gpt2/vocab.bpe"))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    t.save(os.path.join(d, "gpt2", "tokenizer.json"))


def chapters(d):
    data = open(os.path.join(d, "kjv.txt"), "rb").read()
    return [c.decode("utf-8") for c in re.split(rb"(?:\A|(?<=\n))<\|endoftext\|>(?:\n|\Z)", data) if c], len(data)


def time_mode(d, mode, tokenizer_json=None):
    if mode == "tokenizers1":
        os.environ["RAYON_NUM_THREADS"] = "1"
    docs, nbytes = chapters(d)
    if mode == "tiktoken1":
        import tiktoken
        import tiktoken.load
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab_bpe_file="data/gpt2/vocab.bpe",
                                                              encoder_json_file="data/gpt2/encoder.json")
        pat = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
        enc = tiktoken.Encoding(name="gpt2-local", pat_str=pat, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
        run = lambda: [enc.encode_ordinary(x) for x in docs]
    else:
        from tokenizers import Tokenizer
        t = Tokenizer.from_file(tokenizer_json or os.path.join(d, "gpt2", "tokenizer.json"))
        t.encode_special_tokens = True
        run = lambda: t.encode_batch(docs, add_special_tokens=False)
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    print(f"{nbytes / best / 1e6:.2f}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "prepare":
        prepare(sys.argv[2])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "time":
        time_mode(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else None)
    else:
        sys.exit(__doc__)
