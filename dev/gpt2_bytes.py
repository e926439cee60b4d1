"""dev/gpt2_bytes.py — GPT-2's byte <-> printable-character map, shared by the dev/ scripts.

GPT-2's files (encoder.json, vocab.bpe) spell every byte as a printable character (from OpenAI's
gpt-2/src/encoder.py): printable Latin-1 bytes stand for themselves, the other 68 bytes for
chr(256 + n) in byte order. Our files store the raw bytes; this map converts.
"""


def bytes_to_unicode():
    """{byte: the character that stands for it in GPT-2's files}."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
