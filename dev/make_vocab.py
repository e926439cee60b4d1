"""
dev/make_vocab.py — write GPT-2's vocabulary as llm.c's tokenizer file, for decoding in C.

    python3 dev/make_vocab.py [--vocab-dir DIR] [--out PATH]   # from the repository root
    -> data/gpt2_tokenizer.bin

Input: data/gpt2/encoder.json (50,257 token strings -> ids). GPT-2 stores each token's
bytes as printable characters (bytes_to_unicode below); we map them back to the raw bytes.

Output format (llm.c's gpt2_tokenizer.bin, read by tokenizer.h): a header of 256 little-endian
uint32, [0] = 20240328 (magic), [1] = 2 (version), [2] = vocab size (50257), [3] = EOT id (50256);
then for each token id in order one uint8 length followed by that many bytes. EOT's bytes are the
text "<|endoftext|>". Written to a temporary name, fsynced and renamed.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

from gpt2_bytes import bytes_to_unicode  # dev/gpt2_bytes.py: GPT-2's byte <-> character map

TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2       # version 2 adds the EOT id to the header
GPT2_VOCAB_SIZE = 50257
EOT = 50256
HEADER_INTS = 256


def die(msg):
    print(f"make_vocab: error: {msg}", file=sys.stderr)
    sys.exit(1)


def token_bytes(encoder_json):
    """Return the list of token byte strings indexed by id, checked: ids 0..V-1 each used once,
    every token 1..255 bytes."""
    try:
        with open(encoder_json, encoding="utf-8") as f:
            encoder = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{encoder_json}: cannot read: {e}")
    byte_decoder = {c: b for b, c in bytes_to_unicode().items()}
    table = [None] * len(encoder)
    for text, i in encoder.items():
        if not 0 <= i < len(encoder) or table[i] is not None:
            die(f"{encoder_json}: id {i} of {text!r} is out of range or used twice")
        table[i] = b"<|endoftext|>" if i == EOT else bytes(byte_decoder[c] for c in text)
    if len(table) != GPT2_VOCAB_SIZE or encoder.get("<|endoftext|>") != EOT:
        die(f"{encoder_json}: {len(table)} tokens, expected {GPT2_VOCAB_SIZE} with <|endoftext|> = {EOT}")
    for i, b in enumerate(table):
        if not 1 <= len(b) <= 255:
            die(f"{encoder_json}: token {i} is {len(b)} bytes long; the file format needs 1..255")
    return table


def write_tokenizer(path, table):
    header = np.zeros(HEADER_INTS, dtype="<u4")
    header[0], header[1], header[2], header[3] = TOKENIZER_MAGIC, TOKENIZER_VERSION, len(table), EOT
    body = b"".join(bytes([len(b)]) + b for b in table)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(body)
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
    ap = argparse.ArgumentParser(description="Write GPT-2's vocabulary as llm.c's tokenizer file.")
    ap.add_argument("--vocab-dir", default="data/gpt2", help="directory with encoder.json")
    ap.add_argument("--out", default="data/gpt2_tokenizer.bin", help="output file")
    args = ap.parse_args()

    table = token_bytes(os.path.join(args.vocab_dir, "encoder.json"))
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    write_tokenizer(args.out, table)
    lens = [len(b) for b in table]
    print(f"{args.out}: {len(table)} tokens, EOT {EOT}, token lengths {min(lens)}..{max(lens)} bytes, "
          f"{os.path.getsize(args.out)} bytes, sha256 {sha256(args.out)}")


if __name__ == "__main__":
    main()
