"""
dev/prepare_data.py — tokenize the King James Bible into llm.c token shards.

    python3 dev/prepare_data.py [--kjv PATH] [--vocab-dir DIR] [--out-dir DIR]   # from the repo root
    -> data/kjv_train.bin, data/kjv_val.bin (token counts and sha256 are printed)

Input: ../shared/data/kjv.txt (plain ASCII, one heading line such as "Genesis 1", "1 Samuel 3" or
"Song of Solomon 2" before each chapter) and the GPT-2 vocabulary in data/gpt2
(encoder.json + vocab.bpe). The tokenizer is tiktoken built from those two local files only, so
nothing is downloaded; it is checked against encoder.json before use.

Documents are chapters: a chapter is its heading line and everything up to the next heading (the
blank lines that close it included; the single blank line before "Genesis 1" belongs to no
chapter). Each document's tokens are preceded by the end-of-text token 50256, as in llm.c's data
scripts. Chapter i (0-based, in book order) goes to val if i % 20 == 19, else to train: about 5%
of the text, spread over the whole Bible rather than one book at its end.

Output format (llm.c's, read by dataloader.h): a header of 256 little-endian int32,
[0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens, then the tokens as
little-endian uint16. Each file is written to a temporary name, fsynced and renamed, so a crash
never leaves a half-written shard under the final name.
"""

import argparse
import hashlib
import json
import os
import re
import sys

import numpy as np
import tiktoken
import tiktoken.load

from gpt2_bytes import bytes_to_unicode  # dev/gpt2_bytes.py: GPT-2's byte <-> character map

# -----------------------------------------------------------------------------
# constants of the formats

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256                 # <|endoftext|>, the document separator
GPT2_VOCAB_SIZE = 50257     # 50,000 merges + 256 byte tokens + <|endoftext|>
SHARD_MAGIC = 20240520      # llm.c token shard
SHARD_VERSION = 1           # uint16 tokens
HEADER_INTS = 256           # header is 256 int32 = 1024 bytes

KJV_BOOKS = 66
KJV_CHAPTERS = 1189
VAL_EVERY = 20              # chapter i goes to val if i % VAL_EVERY == VAL_EVERY - 1

# A chapter heading is a whole line: an optional book number, the book name (capitalised words,
# "of" allowed as in "Song of Solomon"), then the chapter number. Verse lines start with spaces
# and continuation lines are running text, so neither matches; the counts are checked below.
HEADING = re.compile(r"^((?:[1-3] )?[A-Z][a-z]+(?: of [A-Z][a-z]+)?) ([0-9]+)$", re.MULTILINE)


def die(msg):
    print(f"prepare_data: error: {msg}", file=sys.stderr)
    sys.exit(1)


# -----------------------------------------------------------------------------
# tokenizer: tiktoken from the local GPT-2 files, checked against encoder.json


def load_encoding(vocab_dir):
    encoder_json = os.path.join(vocab_dir, "encoder.json")
    vocab_bpe = os.path.join(vocab_dir, "vocab.bpe")
    for path in (encoder_json, vocab_bpe):
        if not os.path.isfile(path):
            die(f"{path}: not found (pass --vocab-dir DIR holding GPT-2's encoder.json and vocab.bpe)")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=vocab_bpe, encoder_json_file=encoder_json)
    enc = tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": EOT})
    if enc.n_vocab != GPT2_VOCAB_SIZE:
        die(f"{encoder_json}: tokenizer has {enc.n_vocab} tokens, expected {GPT2_VOCAB_SIZE}")
    return enc


def check_encoding(enc, vocab_dir):
    """The encoding must give encoder.json's id for whole tokens, and known GPT-2 ids for text."""
    with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    byte_encoder = bytes_to_unicode()
    for text in ["The", " the", " beginning", "\n\n", " LORD", " Jesus", "!", " "]:
        key = "".join(byte_encoder[b] for b in text.encode("utf-8"))
        got = enc.encode_ordinary(text)
        if got != [encoder[key]]:
            die(f"tokenizer check failed: {text!r} encodes to {got}, encoder.json says [{encoder[key]}]")
    # GPT-2 ids known independently of these files
    known = {"Hello world": [15496, 995], "The": [464], " ": [220], "\n": [198]}
    for text, ids in known.items():
        if enc.encode_ordinary(text) != ids:
            die(f"tokenizer check failed: {text!r} encodes to {enc.encode_ordinary(text)}, GPT-2 gives {ids}")
    if enc.encode("<|endoftext|>", allowed_special={"<|endoftext|>"}) != [EOT]:
        die("tokenizer check failed: <|endoftext|> is not token 50256")


# -----------------------------------------------------------------------------
# chapters

def split_chapters(text, path):
    """Return the list of chapter texts, each starting at its heading line. Checks that the
    headings count 66 books and 1189 chapters, numbered 1, 2, ... within each book."""
    heads = list(HEADING.finditer(text))
    books = []
    for m in heads:
        book, chapter = m.group(1), int(m.group(2))
        if not books or books[-1][0] != book:
            books.append((book, 0))
        if chapter != books[-1][1] + 1:
            die(f"{path}: heading {m.group(0)!r} at offset {m.start()} breaks the chapter sequence of {book}")
        books[-1] = (book, chapter)
    if len(books) != KJV_BOOKS or len(heads) != KJV_CHAPTERS:
        die(f"{path}: found {len(books)} books and {len(heads)} chapters, expected {KJV_BOOKS} and {KJV_CHAPTERS}")
    if text[:heads[0].start()].strip():
        die(f"{path}: text before the first heading {heads[0].group(0)!r}")
    ends = [m.start() for m in heads[1:]] + [len(text)]
    return [text[m.start():end] for m, end in zip(heads, ends)]


# -----------------------------------------------------------------------------
# shards

def write_shard(path, tokens):
    """Write an llm.c token shard atomically: temp file, fsync, rename."""
    toks = np.asarray(tokens, dtype=np.int64)
    if toks.size and (toks.min() < 0 or toks.max() >= 2**16):
        die(f"{path}: token ids must fit in uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, SHARD_VERSION, toks.size
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(toks.astype("<u2").tobytes())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        die(f"{path}: cannot write: {e}")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description="Tokenize kjv.txt into llm.c token shards (train/val).")
    ap.add_argument("--kjv", default="../shared/data/kjv.txt", help="King James Bible text")
    ap.add_argument("--vocab-dir", default="data/gpt2", help="directory with encoder.json and vocab.bpe")
    ap.add_argument("--out-dir", default="data", help="where kjv_train.bin and kjv_val.bin go")
    args = ap.parse_args()

    enc = load_encoding(args.vocab_dir)
    check_encoding(enc, args.vocab_dir)

    try:
        with open(args.kjv, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        die(f"{args.kjv}: cannot read as ASCII text: {e}")
    chapters = split_chapters(text, args.kjv)

    # EOT before every document; chapter i -> val if i % 20 == 19
    split = {"train": [], "val": []}
    docs = {"train": 0, "val": 0}
    for i, chapter in enumerate(chapters):
        ids = enc.encode_ordinary(chapter)
        name = "val" if i % VAL_EVERY == VAL_EVERY - 1 else "train"
        split[name].append(EOT)
        split[name].extend(ids)
        docs[name] += 1

    os.makedirs(args.out_dir, exist_ok=True)
    print(f"{args.kjv}: {len(text):,} bytes, {len(chapters)} chapters")
    for name in ("train", "val"):
        path = os.path.join(args.out_dir, f"kjv_{name}.bin")
        write_shard(path, split[name])
        print(f"{path}: {docs[name]} chapters, {len(split[name])} tokens, "
              f"sha256 {sha256(path)}")
    print(f"total: {len(split['train']) + len(split['val'])} tokens")


if __name__ == "__main__":
    main()
