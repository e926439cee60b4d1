"""
dev/tokenizer_reference.py — the expected GPT-2 ids for the C encoder's tests, from tiktoken.

    python3 dev/tokenizer_reference.py --out test/fixtures/bpe_cases.txt     # write the fixture
    python3 dev/tokenizer_reference.py --check test/fixtures/bpe_cases.txt   # regenerate, compare; exit 0/1
Exit status: 0 ok, 1 mismatch or error, 2 usage. Needs `pip install tiktoken==0.14.0` (its
dependency `regex` comes with it); reads GPT-2's vocabulary from --vocab-dir
(data/gpt2: the files OpenAI published, copied verbatim), never from our derived data/*.bin, and
downloads nothing.

Independent of the C code (tokenizer.h, data/gpt2_merges.bin) by construction:
  - ids of well-formed UTF-8 text: tiktoken's `encode_ordinary` with GPT-2's pattern and the
    ranks tiktoken itself derives from vocab.bpe + encoder.json (`data_gym_to_mergeable_bpe_ranks`);
  - pieces (where the pattern cuts): the `regex` module's findall with the same pattern. For
    well-formed text this script checks that BPE of those pieces (tiktoken's
    `_encode_single_piece`) gives exactly `encode_ordinary`'s ids, so the two agree on the cuts;
  - malformed UTF-8, which tiktoken's public API cannot take (it replaces lone surrogates by
    U+FFFD): the bytes are decoded with errors="surrogateescape" (each bad byte becomes a lone
    surrogate, class "other" in the pattern), cut by the regex module, each piece turned back
    into its bytes and encoded by tiktoken's `_encode_single_piece`. That is the behaviour
    tokenizer.h documents: a malformed byte is one "other" character.
It also checks unicode_tables.h against tiktoken's own classes: for every code point, whether
tiktoken's regex matches it with \\p{L}, \\p{N} and \\s, compared with the table's class.

Fixture format (text; one case per line; fields separated by one tab):
    name    input bytes as lowercase hex    piece lengths in bytes    ids
with lengths and ids separated by single spaces; lines starting with '#' are comments. The
cases: hand-picked hard strings (contractions, digit runs, scripts, combining marks, whitespace
runs, emoji, "<|endoftext|>" as text, malformed UTF-8, long runs) and deterministic random ones
(a fixed xorshift generator, not Python's random, so the file is the same on every Python).
"""

import argparse
import hashlib
import os
import re
import sys

os.environ.setdefault("TIKTOKEN_CACHE_DIR", "")  # read the local files directly, cache nothing

import regex
import tiktoken
import tiktoken.load

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256
GPT2_VOCAB_SIZE = 50257
SHA256 = {  # data/README.md (the published files)
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
TABLES = "unicode_tables.h"


def die(msg, code=1):
    print(f"tokenizer_reference: error: {msg}", file=sys.stderr)
    sys.exit(code)


def load_encoding(vocab_dir):
    paths = {name: os.path.join(vocab_dir, name) for name in SHA256}
    for name, path in paths.items():
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            die(f"{path}: cannot read: {e} (pass --vocab-dir DIR holding GPT-2's encoder.json and vocab.bpe)")
        if digest != SHA256[name]:
            die(f"{path}: sha256 {digest}, expected GPT-2's {SHA256[name]}")
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=paths["vocab.bpe"],
                                                          encoder_json_file=paths["encoder.json"])
    enc = tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": EOT})
    if enc.n_vocab != GPT2_VOCAB_SIZE or enc.encode_ordinary("Hello world") != [15496, 995]:
        die("tiktoken does not give GPT-2's ids for 'Hello world' ([15496, 995])")
    return enc


# -----------------------------------------------------------------------------------------------
# the cases

HARD_CASES = [
    # contractions: lower case only, and only at the start of a piece
    ("contraction_dont", "don't"),
    ("contraction_upper", "I'M"),
    ("contraction_theyre", "they're"),
    ("contraction_quote_s_quote", "'s'"),
    ("contraction_all", "we've I'd you'll she's it'll they'd 'm 't"),
    ("contraction_upper_all", "'S 'T 'RE 'Ve 'LL 'D"),
    ("contraction_inside_word", "rock'n'roll o'clock"),
    ("contraction_after_quote", "''s '''re"),
    ("contraction_after_space", " 's  're"),
    ("contraction_prefix_of_word", "'sun 'really 'llama 'dog"),
    ("contraction_at_end", "'"),
    ("contraction_typographic", "don\u2019t it\u2019s"),
    # numbers: runs are not split
    ("digits_20", "12345678901234567890"),
    ("digits_pi", "3.14"),
    ("digits_grouped", "1,000,000 and 1_000"),
    ("digits_mixed", "x2y3 a1b22c333"),
    ("digits_space", " 42  7"),
    ("digits_arabic_indic", "\u0663\u0664\u0665 \u0661"),
    ("digits_roman_numeral", "\u216b chapters"),
    ("digits_fractions", "\u00bd \u00b2 \u00b3x"),
    ("digits_fullwidth", "\uff11\uff12\uff13"),
    ("digits_long", "1234567890" * 20),
    # letters of many scripts, combining marks (class "other", not letters)
    ("latin_accents", "na\u00efve caf\u00e9 \u00c5ngstr\u00f6m"),
    ("combining_acute", "e\u0301"),
    ("combining_in_word", "cafe\u0301 re\u0301sume\u0301"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("cjk", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5"),
    ("japanese", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002"),
    ("korean", "\ud55c\uad6d\uc5b4 \ubb38\uc7a5"),
    ("greek", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u03b3\u03c1\u03ac\u03bc\u03bc\u03b1\u03c4\u03b1"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!"),
    ("hebrew", "\u05e2\u05d1\u05e8\u05d9\u05ea"),
    ("arabic", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629"),
    ("thai", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22"),
    ("unicode15_cjk_ext_h", "\U00031350\U00031351 a\U00031352b"),
    ("unicode16_garay", "\U00010d50\U00010d51"),
    ("math_letters", "\U0001d400\U0001d401 \u2102"),
    # whitespace: the (?!\S) lookahead
    ("space_two", "a  b"),
    ("space_mixed_run", "a   \n\n  b"),
    ("space_trailing", "trailing   "),
    ("space_leading", "   leading"),
    ("space_tabs", "\t\t"),
    ("space_crlf", "\r\n"),
    ("space_newlines", "\n\n\n"),
    ("space_tab_between", "a\tb"),
    ("space_tab_then_space", " \t x"),
    ("space_newline_then_word", "a\n b"),
    ("space_before_punct", "x  !"),
    ("space_before_digit", "x   9"),
    ("space_only_one", " "),
    ("space_only_many", "     "),
    ("space_nbsp", "a \u00a0b \u00a0\u00a0c"),
    ("space_ideographic", "x\u3000y\u3000\u3000z"),
    ("space_line_separator", "a\u2028b\u2029c\u0085d"),
    ("space_vt_ff", "a\x0b\x0cb"),
    ("space_info_separators", "a\x1c\x1db\x1e\x1f"),
    ("space_zero_width", "a\u200bb\ufeffc\u180ed"),
    ("space_long", " " * 300),
    ("space_long_then_word", " " * 100 + "word"),
    ("newlines_long", "\n" * 100),
    ("space_in_code", "def f(x):\n    return x**2\n\n\nclass A:\n\tpass\n"),
    # emoji and symbols
    ("emoji", "I \u2764\ufe0f \U0001f980 rust \U0001f44d\U0001f3fd"),
    ("emoji_zwj_family", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"),
    ("emoji_flag", "\U0001f1eb\U0001f1f7 \U0001f1ef\U0001f1f5"),
    ("symbols", "\u20ac100 \u00a35 \u00a9\u00ae\u2122 \u2192 \u221e"),
    # <|endoftext|> is text here
    ("endoftext", "<|endoftext|>"),
    ("endoftext_inline", "a<|endoftext|>b"),
    ("endoftext_lines", "<|endoftext|>\n<|endoftext|>\n"),
    # punctuation and code
    ("punct_sentence", "Hello, world! How's it going?..."),
    ("punct_runs", "--- *** /// ... !!! ???"),
    ("punct_brackets", "(a)[b]{c}<d>"),
    ("punct_abbrev", "e.g. i.e. U.S.A."),
    ("punct_code", "C++ && x->y || a != b; #include <stdio.h>"),
    ("punct_typographic", "\u201cquoted\u201d \u2018text\u2019 \u2014 dash\u2026"),
    ("punct_url", "https://example.com/a?b=c&d=e#f"),
    ("nul_byte", "a\x00b\x00"),
    ("control_chars", "\x01\x02\x1b[31mred\x1b[0m\x7f"),
    ("long_letters", "a" * 1000),
    ("long_punct", "!?" * 100),
    ("kjv_verse", "  1 In the beginning God created the heaven and the earth.\n\n"),
]

MALFORMED_CASES = [  # bytes that are not well-formed UTF-8
    ("bad_ff", b"\xff"),
    ("bad_between_letters", b"a\xffb"),
    ("bad_after_space", b" \xff"),
    ("bad_truncated_e_acute", b"caf\xc3"),
    ("bad_lone_lead", b"\xc3"),
    ("bad_lone_lead_then_ascii", b"\xc3A"),
    ("bad_overlong_slash", b"\xc0\xaf"),
    ("bad_overlong_3byte", b"\xe0\x80\xaf"),
    ("bad_surrogate", b"\xed\xa0\x80"),
    ("bad_above_10ffff", b"\xf4\x90\x80\x80"),
    ("bad_f5", b"\xf5\x80\x80\x80"),
    ("bad_truncated_euro", b"\xe2\x82"),
    ("bad_truncated_emoji", b"\xf0\x9f\x98 ok"),
    ("bad_continuations", b"\x80\x80\x80"),
    ("bad_in_words", b"ab\xfe\xfd cd \xfeef"),
    ("bad_after_accent", b"\xc3\xa9\xff"),
    ("bad_in_contraction", b"'\xffs"),
    ("bad_space_accent_bad", b" \xc3\xa9\xff"),
    ("bad_in_whitespace", b"a \xff  b\n\xff\n"),
    ("bad_digits", b"12\xff34"),
    ("bad_punct", b"!\xff?"),
]


class XorShift:
    """xorshift64 (Marsaglia 2003): the same numbers on every Python."""

    def __init__(self, seed):
        self.s = seed

    def next(self):
        s = self.s
        s ^= (s << 13) & 0xFFFFFFFFFFFFFFFF
        s ^= s >> 7
        s ^= (s << 17) & 0xFFFFFFFFFFFFFFFF
        self.s = s
        return s

    def below(self, n):
        return self.next() % n


ATOMS = ["a", "b", "Z", "the", " the", "\u00e9", "\u00df", "\u4e2d", "\u0436", "1", "9", "42", "\u0663", "\u00bd", " ",
         "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "'", "'s", "'re", "'ll", "'t", "!", ".", ",", "-", "?!",
         "\U0001f600", "\u0301", "<|endoftext|>", "\U00031350", "\x00", "\x1c"]
BAD_ATOMS = [b"\xff", b"\xc3", b"\x80", b"\xed\xa0\x80", b"\xe2\x82"]


def random_cases(eot_free_ids):
    rng = XorShift(0x5A17C0DE2024)
    cases = []
    for i in range(150):  # strings of atoms; a fifth of them with malformed bytes
        n = 1 + rng.below(12)
        parts = [ATOMS[rng.below(len(ATOMS))].encode() for _ in range(n)]
        if i % 5 == 4:
            parts.insert(rng.below(n + 1), BAD_ATOMS[rng.below(len(BAD_ATOMS))])
        cases.append((f"random_atoms_{i:03d}", b"".join(parts)))
    for i in range(120):  # concatenations of whole tokens' bytes (often not UTF-8)
        n = 1 + rng.below(4)
        cases.append((f"random_tokens_{i:03d}", b"".join(eot_free_ids[rng.below(len(eot_free_ids))] for _ in range(n))))
    for i in range(40):  # uniform random bytes
        n = 1 + rng.below(30)
        cases.append((f"random_bytes_{i:03d}", bytes(rng.below(256) for _ in range(n))))
    return cases


def all_cases(enc):
    token_bytes = [enc.decode_single_token_bytes(i) for i in range(EOT)]
    cases = [(name, text.encode("utf-8")) for name, text in HARD_CASES] + MALFORMED_CASES + random_cases(token_bytes)
    names = [n for n, _ in cases]
    if len(set(names)) != len(names) or any(not re.fullmatch(r"[a-z0-9_]+", n) for n in names):
        die("case names must be unique and [a-z0-9_]+")
    return cases


def reference(enc, pat, data):
    """(piece lengths in bytes, ids) for the input bytes data."""
    text = data.decode("utf-8", errors="surrogateescape")
    pieces = [p.encode("utf-8", errors="surrogateescape") for p in pat.findall(text)]
    if b"".join(pieces) != data:
        die(f"the regex module's pieces do not cover the input {data!r}")
    by_pieces = [i for p in pieces for i in enc._encode_single_piece(p)]
    try:
        valid = data.decode("utf-8")
    except UnicodeDecodeError:
        valid = None
    if valid is not None:
        ids = enc.encode_ordinary(valid)
        if ids != by_pieces:
            die(f"tiktoken's encode_ordinary and the regex module's pieces disagree on {data!r}: {ids} vs {by_pieces}")
    else:
        ids = by_pieces
    if enc.decode_bytes(ids) != data:
        die(f"the ids of {data!r} do not decode to it")
    return [len(p) for p in pieces], ids


def render(enc):
    pat = regex.compile(GPT2_PATTERN)
    lines = [
        "# test/fixtures/bpe_cases.txt - GPT-2 BPE cases for test/test_tokenizer.h. GENERATED by",
        "# dev/tokenizer_reference.py (ids: tiktoken; pieces: the regex module); do not edit.",
        "# One case per line, tab-separated: name, input bytes (hex), piece lengths (bytes), ids.",
    ]
    for name, data in all_cases(enc):
        lengths, ids = reference(enc, pat, data)
        lines.append("\t".join([name, data.hex(), " ".join(map(str, lengths)), " ".join(map(str, ids))]))
    return "\n".join(lines) + "\n"


# -----------------------------------------------------------------------------------------------
# unicode_tables.h against tiktoken's regex

def tiktoken_classes(enc):
    """{code point: 'L' | 'N' | 'S'} as tiktoken's regex sees \\p{L}, \\p{N}, \\s. A pattern that
    matches one character of a class, with the text of every code point in order: tiktoken encodes
    only the matches, so decoding gives back exactly the members of the class."""
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    classes = {}
    for cls, pat in (("L", r"\p{L}"), ("N", r"\p{N}"), ("S", r"\s")):
        probe = tiktoken.Encoding(name="probe", pat_str=pat, mergeable_ranks=enc._mergeable_ranks, special_tokens={})
        for ch in probe.decode_bytes(probe.encode_ordinary(everything)).decode("utf-8"):
            if ord(ch) in classes:
                die(f"U+{ord(ch):04X} is in two classes of tiktoken's regex")
            classes[ord(ch)] = cls
    return classes


def check_tables(enc, path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        die(f"{path}: cannot read: {e}")
    table = {}
    for lo, hi, cls in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), UC_([LNS])\}", text):
        for c in range(int(lo, 16), int(hi, 16) + 1):
            table[c] = cls
    ref = tiktoken_classes(enc)
    diff = sorted(c for c in set(table) | set(ref) if table.get(c) != ref.get(c))
    shown = ", ".join(f"U+{c:04X} table {table.get(c, 'other')} tiktoken {ref.get(c, 'other')}" for c in diff[:5])
    print(f"{path}: {len(table)} classified code points; tiktoken {tiktoken.__version__} differs on {len(diff)}"
          + (f": {shown}" if diff else ""))
    return not diff


def main():
    ap = argparse.ArgumentParser(description="GPT-2 BPE fixture from tiktoken for the C encoder's tests.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="FILE", help="write the fixture")
    mode.add_argument("--check", metavar="FILE", help="regenerate and compare with FILE (and unicode_tables.h)")
    ap.add_argument("--vocab-dir", default="data/gpt2", help="directory with encoder.json and vocab.bpe")
    ap.add_argument("--tables", default=TABLES, help="unicode_tables.h to compare with tiktoken's classes")
    args = ap.parse_args()

    enc = load_encoding(args.vocab_dir)
    text = render(enc)
    tables_ok = check_tables(enc, args.tables)
    if args.out:
        tmp = f"{args.out}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="ascii", newline="\n") as f:
            f.write(text)
        os.replace(tmp, args.out)
        print(f"{args.out}: {text.count(chr(10)) - 3} cases (tiktoken {tiktoken.__version__}, regex {regex.__version__})")
        sys.exit(0 if tables_ok else 1)
    try:
        with open(args.check, encoding="ascii") as f:
            old = f.read()
    except OSError as e:
        die(f"{args.check}: cannot read: {e}")
    new_lines, old_lines = text.split("\n"), old.split("\n")
    bad = [n for n, o in zip(new_lines, old_lines) if n != o] + (["(line count)"] if len(new_lines) != len(old_lines) else [])
    for line in bad[:5]:
        print(f"  differs: regenerated {line[:160]!r}")
    print(f"{args.check}: {len(new_lines) - 4} cases regenerated with tiktoken {tiktoken.__version__}: "
          f"{'identical' if not bad else f'{len(bad)} lines differ'}")
    ok = not bad and tables_ok
    print("tokenizer_reference: " + ("OK" if ok else "MISMATCH"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
