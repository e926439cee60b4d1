#!/usr/bin/env python3
"""
dev/sp_tokenizer_fixtures.py — Mistral's own SentencePiece models as tokenizer.json files, and the
ids `tokenizers` and `sentencepiece` give for them, for the C reader's tests (test/test_tokenizer.h,
tok_sp_vs_mistral). Needs transformers 4.47.1 (its converter), sentencepiece 0.2.0, protobuf and
mistral-common (PyPI: it ships Mistral's tokenizer.model.v1 and the v3 model of Mistral-7B v0.3);
.ci/run installs them into /tmp/zt-sp.

Each model goes through transformers' converter as LlamaTokenizerFast(vocab_file=...,
from_slow=True, legacy=L, add_prefix_space=True) and save_pretrained, for L = True and False:

  v1_legacy  v1 (Mistral 7B v0.1/v0.2, Mixtral 8x7B; 32,000 ids): Sequence[Prepend("▁"),
             Replace(" " -> "▁")] normalizer, no pre-tokenizer
  v1         the same model with legacy False: Metaspace(prepend_scheme "first", split false)
  v3_legacy, v3   Mistral 7B v0.3's model (32,768 ids, 771 added control tokens), both ways

(add_prefix_space=True: without it transformers 4.47.1 passes add_prefix_space=None to the slow
tokenizer and the converter drops the leading "▁" — no Prepend, prepend_scheme "never" — which
neither sentencepiece nor the published files do.)

    $ZT_SP_PYTHON dev/sp_tokenizer_fixtures.py --kjv KJV.txt --out DIR
writes, for each kind K:
  DIR/K/tokenizer.json, tokenizer_config.json (save_pretrained)
  DIR/K/kjv.ids        uint32 LE: per document (split at "<|endoftext|>" lines) <s>, then tokenizers'
                       ids with encode_special_tokens (what -tokenize must write); only for the
                       kinds of --kjv-kinds (default v1_legacy,v3: both models, both settings,
                       within the test's time budget)
  DIR/K/kjv.spm.ids    the same with sentencepiece's ids
  DIR/K/hard.ids       per case: int32 n, then n uint32 ids (tokenizers, special tokens matched)
  DIR/K/hard.plain.ids per case: tokenizers with encode_special_tokens (specials as text)
  DIR/K/hard.spm.ids   per case: sentencepiece's ids
  DIR/K/hard.dec       per case: int32 n, then tokenizers' decode of hard.plain.ids (n bytes)
  DIR/hard.bin         per case: int32 n, then its bytes (UTF-8)
Cases: test/fixtures/hf_hard_cases.txt (those that are UTF-8), EXTRA below (byte fallback:
CJK, emoji, control bytes; leading spaces; special tokens in the text) and 1,000 random_cases.
"""
import argparse, ast, os, random, re, struct, sys

try:
    import sentencepiece as spm
    from tokenizers import Tokenizer
    from transformers import LlamaTokenizerFast
    import mistral_common
except ImportError as e:
    print(f"sp_tokenizer_fixtures: error: needs transformers==4.47.1 sentencepiece==0.2.0 protobuf mistral-common ({e})", file=sys.stderr)
    sys.exit(1)

SEPARATOR = re.compile(rb"(?:\A|(?<=\n))<\|endoftext\|>(?:\n|\Z)")
MODELS = {"v1": "tokenizer.model.v1", "v3": "mistral_instruct_tokenizer_240323.model.v3"}
EXTRA = [
    "漢字 鬱 龘 𠀋 𪚥 中文字符 日本語 한국어",        # CJK: rare ones only as <0xXX> bytes
    "emoji 😀🎉🦄 👨‍👩‍👧 🇫🇷 ✨",
    "control \x01\x02\x07\x1b[0m \x7f nul\x00end",
    " one leading space", "  two leading spaces", "\tleading tab", "▁already a metaspace ▁▁",
    "trailing spaces   ", "a  b   c    d",
    "<s>after bos</s> [INST] hi [/INST] <unk> [TOOL_CALLS]",
    "x", "",
]
RANDOM_CASES = 1000  # and this many random_cases after them


def random_cases(n, seed=7):
    """n texts of 0..12 atoms drawn (seeded) from what trips a SentencePiece-style pipeline: spaces
    and runs of them, ▁ itself, special tokens and pieces of them, CJK and emoji (byte fallback),
    control bytes, combining marks, tabs and newlines."""
    atoms = [" ", "  ", "\t", "\n", "▁", "▁▁", "<s>", "</s>", "[INST]", "[/INST]", "<unk>", "hello", "World", "the", "LORD", "漢",
             "字", "😀", "🦄", "\x01", "\x00", "\x7f", "é", "e\u0301", "123", " a", "a ", "x", "[control_8]", "<0x41>", "ing", "Ġ", "  \n "]
    rng = random.Random(seed)
    return ["".join(rng.choice(atoms) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def cases_from(path):
    out = []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("#"): continue
        s = ast.literal_eval(line)
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            continue  # not UTF-8: neither library takes it
        out.append(s)
    return out + EXTRA + random_cases(RANDOM_CASES)


def put(f, seq, fmt="<I"):
    f.write(struct.pack("<i", len(seq)))
    for x in seq: f.write(struct.pack(fmt, x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kjv", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kjv-kinds", default="v1_legacy,v3")
    ap.add_argument("--cases", default=os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "hf_hard_cases.txt"))
    a = ap.parse_args()
    data = open(a.kjv, "rb").read()
    docs = [d.decode("utf-8") for d in SEPARATOR.split(data) if d]
    cases = cases_from(a.cases)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "hard.bin"), "wb") as f:
        for c in cases: put(f, c.encode("utf-8"), "B")
    mdir = os.path.join(os.path.dirname(mistral_common.__file__), "data")
    for ver, fname in MODELS.items():
        sp = spm.SentencePieceProcessor(model_file=os.path.join(mdir, fname))
        kjv_kinds = [k for k in a.kjv_kinds.split(",") if k.split("_")[0] == ver]
        sp_docs = [sp.encode(d) for d in docs] if kjv_kinds else []
        sp_cases = [sp.encode(c) for c in cases]
        for legacy in (True, False):
            kind = ver + ("_legacy" if legacy else "")
            d = os.path.join(a.out, kind)
            os.makedirs(d, exist_ok=True)
            fast = LlamaTokenizerFast(vocab_file=os.path.join(mdir, fname), from_slow=True, legacy=legacy, add_prefix_space=True)
            fast.save_pretrained(d)
            tk = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
            bos = tk.token_to_id("<s>")
            tk.encode_special_tokens = True
            plain_docs = tk.encode_batch(docs, add_special_tokens=False) if kind in kjv_kinds else []
            if kind in kjv_kinds:
                with open(os.path.join(d, "kjv.ids"), "wb") as f:
                    for e in plain_docs: f.write(struct.pack(f"<{1 + len(e.ids)}I", bos, *e.ids))
                with open(os.path.join(d, "kjv.spm.ids"), "wb") as f:
                    for ids in sp_docs: f.write(struct.pack(f"<{1 + len(ids)}I", bos, *ids))
            plain = [tk.encode(c, add_special_tokens=False).ids for c in cases]
            tk.encode_special_tokens = False
            special = [tk.encode(c, add_special_tokens=False).ids for c in cases]
            for name, seqs in (("hard.ids", special), ("hard.plain.ids", plain), ("hard.spm.ids", sp_cases)):
                with open(os.path.join(d, name), "wb") as f:
                    for s in seqs: put(f, s)
            with open(os.path.join(d, "hard.dec"), "wb") as f:
                for s in plain: put(f, tk.decode(s, skip_special_tokens=False).encode("utf-8"), "B")
            same_docs = sum(e.ids == s for e, s in zip(plain_docs, sp_docs))
            same_cases = sum(p == s for p, s in zip(plain, sp_cases))
            kjv = f"KJV {sum(len(e.ids) for e in plain_docs)} ids, tokenizers = sentencepiece on {same_docs} of {len(docs)} documents; " if plain_docs else ""
            print(f"  {kind}: {kjv}tokenizers = sentencepiece on {same_cases} of {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
