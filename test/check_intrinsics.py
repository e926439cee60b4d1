#!/usr/bin/env python3
"""test/check_intrinsics.py — no instruction set assumed at compile time (docs/build.md, "Every CPU").

Every x86 SIMD intrinsic (_mm*_..., __m128/__m256/__m512 types, __mmask*) in the product, the
tests, the benches and dev/ must sit inside a function whose definition carries its target
attribute (ZT_TARGET_AVX2, ZT_TARGET_AVX512, ZT_TARGET_SSE42 from simd.h, or a literal
__attribute__((target(...)))), so that a build for plain x86-64 (or aarch64) compiles and the
function runs only where simd.h's run-time dispatch chose it. An intrinsic anywhere else (a
function without the attribute, a macro, a global) compiles only where -march says the CPU has that
instruction set: `make` with -march=native on an AVX2-only CPU then fails (the bug this guards).

The check reads C/C++/CUDA sources as text: comments, strings and preprocessor lines other than
#define are dropped; each top-level brace-enclosed body (a function, a TEST, a struct) is one unit,
whose "head" is the text since the previous top-level ';' or '}'. An intrinsic in a unit whose head
names no target attribute, or outside any unit, is reported as FILE:LINE, and so is any test of an
instruction-set macro (__AVX2__, __SSE4_2__, __ARM_NEON, ...: code that changes with -march). Exit 1
when one is found.

  python3 test/check_intrinsics.py [FILE...]   (default: every source file git knows of)
  python3 test/check_intrinsics.py --self-test  the check catches what it must, passes what it may
"""
import os
import re
import subprocess
import sys

EXTS = (".c", ".h", ".cpp", ".cc", ".cu", ".cuh")
INTRINSIC = re.compile(r"\b(_mm(?:256|512)?_\w+|__m(?:64|128|256|512)[dih]?\b|__mmask(?:8|16|32|64)\b)")
# a macro that says which instruction set the compiler was told (-march): testing one makes the code
# depend on the build's level, which is what this check rules out (simd.h dispatches at run time)
ISA_MACRO = re.compile(r"\b__(?:AVX\w*|SSE\w*|FMA4?|F16C|BMI2?|POPCNT|ARM_NEON\w*|ARM_FEATURE_\w+)__\b")
TARGET = re.compile(r"\bZT_TARGET_\w+|__attribute__\s*\(\(\s*target\s*\(")


def strip(text, directives=False):
    """Comments and string/char literals blanked (newlines kept, so line numbers hold); preprocessor
    directives other than #define blanked too (#include <immintrin.h> is not a use) unless directives."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1
        else:
            out.append(c); i += 1
    if directives:
        return "".join(out)
    lines = "".join(out).split("\n")
    kind = None  # inside a directive: "define" or "other" (continued by a trailing backslash)
    for k, line in enumerate(lines):
        s = line.lstrip()
        if kind is None and s.startswith("#"):
            kind = "define" if re.match(r"#\s*define\b", s) else "other"
        cont = line.rstrip().endswith("\\")
        if kind == "other":
            lines[k] = ""
        if not cont:
            kind = None
    return "\n".join(lines)


def check_text(path, text):
    src = strip(text)
    bad = []
    # the top-level units, then each intrinsic's position against them
    depth, head_start, unit_ok, unit_start = 0, 0, True, 0
    marks = []  # (start, end, ok) of top-level units, heads included
    for i, c in enumerate(src):
        if c == "{":
            if depth == 0:
                unit_ok = bool(TARGET.search(src[head_start:i]))
                unit_start = head_start
            depth += 1
        elif c == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                marks.append((unit_start, i + 1, unit_ok))
                head_start = i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1
    for m in INTRINSIC.finditer(src):
        ok = any(a <= m.start() < b and good for a, b, good in marks)
        if not ok:
            bad.append((src.count("\n", 0, m.start()) + 1, m.group(1)))
    return bad


def sources():
    try:
        names = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        names = [os.path.join(d, f) for d, _, fs in os.walk(".") for f in fs]
    return sorted(n for n in names if n.endswith(EXTS) and not n.startswith(("build/", "./build/")))


# (source, the findings it must give as (line, name)): a check that cannot fail proves nothing
SELF_TEST = [
    ("ZT_TARGET_AVX2 static void ok(float* p) { _mm256_storeu_ps(p, _mm256_setzero_ps()); }\n", []),
    ("static void bad(float* p) {\n    _mm512_storeu_ps(p, _mm512_setzero_ps());\n}\n",
     [(2, "_mm512_storeu_ps"), (2, "_mm512_setzero_ps")]),
    ("__attribute__((target(\"sse4.2\"))) static unsigned f(unsigned c, unsigned long w) {\n"
     "    return (unsigned)_mm_crc32_u64(c, w);\n}\n// _mm512_add_ps in a comment\nconst char* s = \"__m512\";\n", []),
    ("#define LOAD(p) _mm256_loadu_ps(p)\n", [(1, "_mm256_loadu_ps")]),
    ("template <int N>\nZT_TARGET_AVX512 static inline __m512 twice(__m512 x) {\n    return _mm512_add_ps(x, x);\n}\n", []),
    ("TEST(x) {\n    if (level == 2) f(_mm512_loadu_ps(x));\n}\n", [(2, "_mm512_loadu_ps")]),
]


def self_test():
    bad = 0
    for src, want in SELF_TEST:
        got = check_text("<self-test>", src)
        if got != want:
            print(f"self-test: {src!r}: found {got}, expected {want}")
            bad += 1
    macro = "#if defined(__SSE4_2__)\nint x;\n#endif\n"
    if not ISA_MACRO.search(strip(macro, directives=True)):
        print("self-test: #if defined(__SSE4_2__) not caught")
        bad += 1
    print(f"self-test: {len(SELF_TEST) + 1} cases, {bad} wrong")
    return 1 if bad else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    files = argv[1:] or sources()
    found, uses = 0, 0
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code = strip(text, directives=True)
        for m in ISA_MACRO.finditer(code):
            print(f"{path}:{code.count(chr(10), 0, m.start()) + 1}: {m.group(0)}: the build's instruction set tested at "
                  f"compile time (choose at run time: simd.h)")
            found += 1
        uses += len(INTRINSIC.findall(strip(text)))
        for line, name in check_text(path, text):
            print(f"{path}:{line}: {name} outside a function with a target attribute "
                  f"(ZT_TARGET_AVX2 / ZT_TARGET_AVX512 / ZT_TARGET_SSE42, simd.h)")
            found += 1
    print(f"{len(files)} files, {uses} intrinsic uses, {found} outside a target-attributed function or testing -march")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
