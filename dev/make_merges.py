"""
dev/make_merges.py — write GPT-2's BPE merge list as a compact binary file, for encoding in C.

    python3 dev/make_merges.py [--vocab-dir DIR] [--out PATH]   # from the repository root
    -> data/gpt2_merges.bin

Input: data/gpt2/vocab.bpe (50,000 merges in rank order, each a pair of token strings)
and encoder.json (token string -> id). Both spell bytes with GPT-2's printable stand-ins
(bytes_to_unicode below); the output speaks only token ids and raw bytes.

Output format (read by tokenizer_load_merges in tokenizer.h; all little-endian):
  header      256 uint32: [0] = 20261130 (magic), [1] = 1 (version), [2] = number of merges M,
              [3] = vocabulary size V the ids live in (50257), the rest 0
  byte_to_id  256 uint16: the id of the one-byte token for byte b = 0..255 (GPT-2's byte tokens
              are NOT in byte order: id 0 is "!")
  merges      M records of 3 uint16 {left, right, merged}, in rank order: record r is merge rank r,
              which joins adjacent tokens left and right into token merged (GPT-2: merged = 256 + r)
Checked here: every id < V, merged ids distinct, and each merge only uses tokens that exist
before it (byte tokens or results of earlier merges). Written to a temporary name, fsynced,
renamed. Deterministic: rerunning reproduces the sha256 in data/README.md.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

from gpt2_bytes import bytes_to_unicode  # dev/gpt2_bytes.py: GPT-2's byte <-> character map

MERGES_MAGIC = 20261130
MERGES_VERSION = 1
HEADER_INTS = 256
GPT2_VOCAB_SIZE = 50257
GPT2_MERGES = 50000


def die(msg):
    print(f"make_merges: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_inputs(vocab_dir):
    encoder_json = os.path.join(vocab_dir, "encoder.json")
    vocab_bpe = os.path.join(vocab_dir, "vocab.bpe")
    try:
        with open(encoder_json, encoding="utf-8") as f:
            encoder = json.load(f)
        with open(vocab_bpe, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, ValueError) as e:
        die(f"cannot read the GPT-2 vocabulary: {e} (pass --vocab-dir DIR holding encoder.json and vocab.bpe)")
    if not lines[0].startswith("#version"):
        die(f"{vocab_bpe}: first line {lines[0]!r} is not the '#version: ...' header")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line]
    for i, m in enumerate(merges):
        if len(m) != 2:
            die(f"{vocab_bpe}: line {i + 2} is not two tokens separated by one space: {' '.join(m)!r}")
    if len(encoder) != GPT2_VOCAB_SIZE or len(merges) != GPT2_MERGES:
        die(f"{len(encoder)} tokens and {len(merges)} merges, expected {GPT2_VOCAB_SIZE} and {GPT2_MERGES}")
    return encoder, merges


def build(encoder, merges):
    """(byte_to_id[256], [(left, right, merged)]) with the checks of the docstring."""
    V = len(encoder)
    byte_to_id = [encoder[c] for b, c in sorted(bytes_to_unicode().items())]
    known = set(byte_to_id)
    records = []
    for r, (a, b) in enumerate(merges):
        for s in (a, b, a + b):
            if s not in encoder:
                die(f"merge rank {r} ({a!r} {b!r}): {s!r} is not in encoder.json")
        left, right, merged = encoder[a], encoder[b], encoder[a + b]
        if left not in known or right not in known:
            die(f"merge rank {r} ({a!r} {b!r}) uses a token that no earlier merge made")
        if merged in known:
            die(f"merge rank {r} ({a!r} {b!r}) makes token {merged}, which already exists")
        if max(left, right, merged) >= V or V > 65536:
            die(f"merge rank {r}: ids must be < V = {V} <= 65536 (uint16)")
        known.add(merged)
        records.append((left, right, merged))
    return byte_to_id, records


def write_merges(path, V, byte_to_id, records):
    header = [MERGES_MAGIC, MERGES_VERSION, len(records), V] + [0] * (HEADER_INTS - 4)
    blob = struct.pack(f"<{HEADER_INTS}I", *header) + struct.pack("<256H", *byte_to_id)
    blob += b"".join(struct.pack("<3H", *rec) for rec in records)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        die(f"{path}: cannot write: {e}")
    return len(blob)


def main():
    ap = argparse.ArgumentParser(description="Write GPT-2's merges as data/gpt2_merges.bin for tokenizer.h.")
    ap.add_argument("--vocab-dir", default="data/gpt2", help="directory with encoder.json and vocab.bpe")
    ap.add_argument("--out", default="data/gpt2_merges.bin", help="output file")
    args = ap.parse_args()

    encoder, merges = read_inputs(args.vocab_dir)
    byte_to_id, records = build(encoder, merges)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    size = write_merges(args.out, len(encoder), byte_to_id, records)
    rank_is_id = all(m == 256 + r for r, (_, _, m) in enumerate(records))
    with open(args.out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print(f"{args.out}: {len(records)} merges over {len(encoder)} tokens (merged id = 256 + rank: {rank_is_id}), "
          f"{size} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
