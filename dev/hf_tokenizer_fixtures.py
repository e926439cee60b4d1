#!/usr/bin/env python3
"""
dev/hf_tokenizer_fixtures.py — byte-level BPE tokenizer.json files made with Hugging Face
`tokenizers` (pinned 0.21.0) and the ids `tokenizers` gives for them, for the C reader's tests
(test/test_tokenizer.h, tok_hf_*). No real tokenizer file can be downloaded here, so each kind is
trained on the KJV under the real files' pipeline:

  gpt2      ByteLevel(use_regex=true) (GPT-2's pattern), <|endoftext|>
  llama3    Split(Llama 3's regex, Isolated) + ByteLevel(use_regex=false), ignore_merges = true,
            TemplateProcessing "<|begin_of_text|> $A"; filler entries in model.vocab up to id
            LLAMA3_V (> 65,536: uint32 shards), then whole pieces added to model.vocab that no merge
            reaches (so ignore_merges changes ids, and the KJV uses ids above 65,535), then a few
            reserved special tokens (tokenizers takes minutes over 60,000 added tokens, so the
            ids are pushed up in model.vocab instead)
  qwen2     NFC + Split(Qwen2's regex) + ByteLevel(use_regex=false), <|endoftext|> <|im_start|>
            <|im_end|> (special, not normalized), the merges in the ["a", "b"] form
  smollm2   Digits(individual_digits=true) + ByteLevel(use_regex=true)
  llama3_noignore   llama3's file with ignore_merges = false (expected ids only: the C test
            flips the flag on the llama3 tokenizer and must get these, and they must differ)

    $ZT_TOKENIZERS_PYTHON dev/hf_tokenizer_fixtures.py --kjv KJV.txt --out DIR
writes, for each kind K:
  DIR/K/tokenizer.json, DIR/K/tokenizer_config.json
  DIR/K/kjv.ids     uint32 LE: what -tokenize must write for KJV.txt, train and val together in
                    document order: per document (split at "<|endoftext|>" lines as tokenizer.h
                    does) the document token, then tokenizers' ids with encode_special_tokens
  DIR/K/hard.ids    per case of test/fixtures/hf_hard_cases.txt: int32 n, then n uint32 ids
                    (specials matched, tokenizers' default); n = -1 for a case tokenizers cannot
                    take (not UTF-8)
  DIR/K/hard.norm   per case: int32 n, then the normalized text's n bytes (the input for a case
                    that is not UTF-8): what the ids must decode to
  DIR/hard.bin      per case: int32 n, then its n bytes
Exit 0, or 1 with a message. Deterministic: the same files on every run (checked by --twice).
"""

import argparse
import ast
import json
import os
import re
import struct
import sys
import time

try:
    import tokenizers
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers, trainers, decoders, normalizers, processors
except ImportError:
    print("hf_tokenizer_fixtures: error: needs `pip install tokenizers==0.21.0`", file=sys.stderr)
    sys.exit(1)

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")
VOCAB = 6000          # trained vocabulary of each kind (a KJV BPE stops near 25,000 anyway)
WHOLE_PIECES = 300    # llama3: pieces added whole to model.vocab, beyond the merges
LLAMA3_V = 70000      # llama3: the first whole piece's id (> 65,536)
TRAIN_DOCS = 300      # chapters trained on (of 1,189): the ids are compared on all of them
SEPARATOR = re.compile(rb"(?:\A|(?<=\n))<\|endoftext\|>(?:\n|\Z)")


def die(msg):
    print(f"hf_tokenizer_fixtures: error: {msg}", file=sys.stderr)
    sys.exit(1)


def documents(data):
    return [d for d in SEPARATOR.split(data) if d]


def train(kind, texts):
    tok = Tokenizer(models.BPE(ignore_merges=(kind == "llama3")))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        specials = ["<|endoftext|>"]
    elif kind == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    elif kind == "qwen2":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    else:  # smollm2
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, show_progress=False, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    if kind == "llama3":
        tok = add_whole_pieces(tok, texts)
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))])])
        tok.add_special_tokens([f"<|reserved_special_token_{i}|>" for i in range(200)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def add_whole_pieces(tok, texts):
    """Add the most frequent pieces that BPE splits into several tokens to model.vocab as single
    tokens (no merge makes them): with ignore_merges they are taken whole."""
    counts = {}
    for t in texts[:400]:
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(t):
            counts[piece] = counts.get(piece, 0) + 1
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    chosen = []
    for piece, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if piece not in vocab and len(tok.model.tokenize(piece)) >= 2:
            chosen.append(piece)
        if len(chosen) == WHOLE_PIECES:
            break
    # fillers (never a piece: the pattern cuts "<" from letters) up to LLAMA3_V, then the pieces
    nxt = max(vocab.values()) + 1
    while nxt < LLAMA3_V:
        vocab[f"<filler_{nxt}>"] = nxt
        nxt += 1
    for piece in chosen:
        vocab[piece] = nxt
        nxt += 1
    return Tokenizer.from_str(json.dumps(spec))


def read_cases(path):
    cases = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            s = ast.literal_eval(line)
            if not isinstance(s, str):
                die(f"{path}: not a string literal: {line}")
            cases.append(s.encode("utf-8", "surrogateescape"))
    return cases


def write_ids(path, seqs):
    with open(path, "wb") as f:
        for ids in seqs:
            if ids is None:
                f.write(struct.pack("<i", -1))
            else:
                f.write(struct.pack("<i", len(ids)))
                f.write(struct.pack(f"<{len(ids)}I", *ids))


def write_blobs(path, blobs):
    with open(path, "wb") as f:
        for b in blobs:
            f.write(struct.pack("<i", len(b)))
            f.write(b)


def expected(tok, kind, docs, cases, outdir, doc_token):
    os.makedirs(outdir, exist_ok=True)
    tok.encode_special_tokens = True
    stream = []
    for enc, _ in zip(tok.encode_batch([d.decode("utf-8") for d in docs], add_special_tokens=False), docs):
        stream.append(doc_token)
        stream.extend(enc.ids)
    tok.encode_special_tokens = False
    with open(os.path.join(outdir, "kjv.ids"), "wb") as f:
        f.write(struct.pack(f"<{len(stream)}I", *stream))
    hard, norm = [], []
    for c in cases:
        try:
            s = c.decode("utf-8")
        except UnicodeDecodeError:
            hard.append(None)
            norm.append(c)
            continue
        ids = tok.encode(s, add_special_tokens=False).ids
        if tok.decode(ids, skip_special_tokens=False).encode("utf-8") != (tok.normalizer.normalize_str(s) if tok.normalizer else s).encode("utf-8"):
            die(f"{kind}: tokenizers' own round trip fails on {s!r}")
        hard.append(ids)
        norm.append((tok.normalizer.normalize_str(s) if tok.normalizer else s).encode("utf-8"))
    write_ids(os.path.join(outdir, "hard.ids"), hard)
    write_blobs(os.path.join(outdir, "hard.norm"), norm)
    return len(stream)


def main():
    ap = argparse.ArgumentParser(description="Train byte-level BPE tokenizer.json fixtures; write tokenizers' ids.")
    ap.add_argument("--kjv", required=True, help="the KJV text (chapters separated by <|endoftext|> lines)")
    ap.add_argument("--hard", default="test/fixtures/hf_hard_cases.txt", help="hard cases (default: %(default)s)")
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    if tokenizers.__version__ != "0.21.0":
        print(f"hf_tokenizer_fixtures: warning: tokenizers {tokenizers.__version__}, the pinned one is 0.21.0", file=sys.stderr)
    with open(args.kjv, "rb") as f:
        docs = documents(f.read())
    texts = [d.decode("utf-8") for d in docs]
    cases = read_cases(args.hard)
    os.makedirs(args.out, exist_ok=True)
    write_blobs(os.path.join(args.out, "hard.bin"), cases)
    for kind in ("gpt2", "llama3", "qwen2", "smollm2"):
        t0 = time.time()
        tok = train(kind, texts[:TRAIN_DOCS])
        t1 = time.time()
        d = os.path.join(args.out, kind)
        os.makedirs(d, exist_ok=True)
        spec = json.loads(tok.to_str())
        if kind == "qwen2":  # the merges in the ["a", "b"] form (tokenizers >= 0.20 writes it; older files have "a b")
            spec["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
        else:
            spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # exactly what the C reader reads
        doc = "<|begin_of_text|>" if kind == "llama3" else "<|endoftext|>"
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024,
               "bos_token": doc if kind == "llama3" else None, "eos_token": "<|end_of_text|>" if kind == "llama3" else "<|endoftext|>"}
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f)
        n = expected(tok, kind, docs, cases, d, tok.token_to_id(doc))
        print(f"{kind}: V = {tok.get_vocab_size(with_added_tokens=True)}, KJV stream {n} ids, {len(cases)} hard cases "
              f"(trained in {t1 - t0:.1f} s, the rest {time.time() - t1:.1f} s)")
        if kind == "llama3":
            spec["model"]["ignore_merges"] = False
            off = Tokenizer.from_str(json.dumps(spec))
            n = expected(off, "llama3_noignore", docs, cases, os.path.join(args.out, "llama3_noignore"), off.token_to_id(doc))
            print(f"llama3_noignore: KJV stream {n} ids")


if __name__ == "__main__":
    main()
