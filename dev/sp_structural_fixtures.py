#!/usr/bin/env python3
"""
dev/sp_structural_fixtures.py — small SentencePiece-style tokenizer.json files (the steps of
Mistral's, Llama 2's and Phi-3's files, a tiny vocabulary) and `tokenizers`' ids for them, committed
in test/fixtures/sp/ so that test/test_tokenizer.h (tok_sp_structural) runs without Python.

A BPE of 300 merges with byte_fallback and unk_token "<unk>" is trained with tokenizers 0.21 on the
first 200 KB of the KJV under the legacy steps, then written with each pipeline:
  legacy        normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")], no pre-tokenizer
                (Mistral v0.1-v0.3 legacy, Llama 2, Phi-3)
  first         Metaspace(prepend_scheme "first", split false), no normalizer (legacy false)
  always_split  Metaspace(prepend_scheme "always", split true)
  never         Metaspace(prepend_scheme "never", split false)
  replace_only  normalizer Replace(" " -> "▁") alone, no pre-tokenizer
each with the decoder Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)] and the
added tokens <unk>, <s>, </s> (special, not normalized) and "[INST]" (special).
  strip         legacy's file plus Phi-3-style added tokens that take the whitespace beside them:
                <|user|> <|assistant|> <|system|> <|end|> (special, rstrip), <|endoftext|> (special),
                <mask> (lstrip, not special), <sep> (rstrip, not special), <|both|> (special,
                lstrip and rstrip); all not normalized. Its cases: OUT/strip_cases.bin, its ids
                OUT/strip/cases.ids (special tokens matched) and OUT/strip/cases_text.ids (as text:
                encode_special_tokens, what -tokenize does). --strip-only writes this kind alone,
                from the committed legacy file.
    python3 dev/sp_structural_fixtures.py --kjv KJV.txt --out test/fixtures/sp
writes OUT/K/tokenizer.json, OUT/K/cases.ids (per case: int32 n, n uint32 ids, special tokens
matched) and OUT/cases.bin (per case: int32 n, its UTF-8 bytes).
"""
import argparse, json, os, struct, sys
import tokenizers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, trainers, AddedToken

CASES = ["Hello, world! The LORD is my shepherd.", " leading space", "  two", "a  b   c", "tabs\tand\nnewlines\n\n",
         "<s>after bos</s> and [INST] hi [/INST]", "漢字 😀 ctrl\x01\x7f", "▁meta ▁▁ x", "", "x", "In the beginning God created"]


STRIP_CASES = ["<|user|>\nHello there<|end|>\n<|assistant|>\n", "<|system|>  \t\n\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n",
               "a <|end|> b", "x  <mask>  y", "<mask><mask> <mask>", " <mask>", "<|end|>\u3000\u00a0z", "<|end|>\x1c\x1dq",
               "<|both|> mid <|both|>", "tail <|end|>   ", "<|endoftext|>  keep", "end<|user|>", "a<sep>  b <sep>\n\nc",
               "words  \u2003<mask>", "<|end|>", "   ", "<sep>\u0085\u2028x", "a\t <mask>", "\u2003 \t<mask>b", "<sep>\t \u3000 z"]


def strip_kind(out):
    """The strip kind from OUT/legacy/tokenizer.json (see above)."""
    t = Tokenizer.from_file(os.path.join(out, "legacy", "tokenizer.json"))
    t.add_special_tokens([AddedToken("<|endoftext|>", normalized=False, special=True)] +
                         [AddedToken(x, rstrip=True, normalized=False, special=True) for x in ["<|assistant|>", "<|end|>", "<|system|>", "<|user|>"]] +
                         [AddedToken("<|both|>", lstrip=True, rstrip=True, normalized=False, special=True)])
    t.add_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=False), AddedToken("<sep>", rstrip=True, normalized=False, special=False)])
    d = os.path.join(out, "strip")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8").write(t.to_str())
    with open(os.path.join(out, "strip_cases.bin"), "wb") as f:
        for c in STRIP_CASES:
            b = c.encode("utf-8")
            f.write(struct.pack(f"<i{len(b)}s", len(b), b))
    for name, text in (("cases.ids", False), ("cases_text.ids", True)):
        t.encode_special_tokens = text
        with open(os.path.join(d, name), "wb") as f:
            for c in STRIP_CASES:
                ids = t.encode(c, add_special_tokens=False).ids
                f.write(struct.pack(f"<i{len(ids)}I", len(ids), *ids))
    t.encode_special_tokens = False
    print("strip", [t.encode(c, add_special_tokens=False).tokens for c in STRIP_CASES[:3]], "tokenizers", tokenizers.__version__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kjv")
    ap.add_argument("--out", required=True)
    ap.add_argument("--strip-only", action="store_true", help="write the strip kind alone, from OUT/legacy/tokenizer.json")
    a = ap.parse_args()
    if a.strip_only:
        strip_kind(a.out)
        return 0
    if not a.kjv:
        ap.error("--kjv is needed (but with --strip-only)")
    text = open(a.kjv, encoding="utf-8").read()[:200000]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    alphabet = sorted(set(c for c in text if c != " ")) + ["▁"]
    tr = trainers.BpeTrainer(vocab_size=3 + 256 + len(alphabet) + 300, special_tokens=["<unk>", "<s>", "</s>"] + bytes_,
                             initial_alphabet=alphabet, limit_alphabet=len(alphabet), show_progress=False)
    tok.train_from_iterator([text[i:i + 2000] for i in range(0, len(text), 2000)], tr)
    tok.add_special_tokens([AddedToken("[INST]", normalized=False, special=True), AddedToken("[/INST]", normalized=False, special=True)])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    base = json.loads(tok.to_str())
    # the trainer made the <0xXX> tokens added tokens (special_tokens= is how it takes them in the
    # vocabulary); in Mistral's and Llama 2's files they are only in model.vocab
    base["added_tokens"] = [t for t in base["added_tokens"] if not t["content"].startswith("<0x")]
    meta = lambda scheme, split: {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
    kinds = {
        "legacy": (base["normalizer"], None),
        "first": (None, meta("first", False)),
        "always_split": (None, meta("always", True)),
        "never": (None, meta("never", False)),
        "replace_only": ({"type": "Replace", "pattern": {"String": " "}, "content": "▁"}, None),
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "cases.bin"), "wb") as f:
        for c in CASES:
            b = c.encode("utf-8")
            f.write(struct.pack(f"<i{len(b)}s", len(b), b))
    for k, (norm, pre) in kinds.items():
        j = dict(base, normalizer=norm, pre_tokenizer=pre)
        d = os.path.join(a.out, k)
        os.makedirs(d, exist_ok=True)
        s = json.dumps(j, ensure_ascii=False)
        open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8").write(s)
        t = Tokenizer.from_str(s)
        with open(os.path.join(d, "cases.ids"), "wb") as f:
            for c in CASES:
                ids = t.encode(c, add_special_tokens=False).ids
                f.write(struct.pack(f"<i{len(ids)}I", len(ids), *ids))
        print(k, [t.encode(c).tokens[:6] for c in CASES[1:3]])
    strip_kind(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
