#!/usr/bin/env python3
"""dev/doc_samples.py — the sample outputs in docs/*.md regenerated from the program.

A sample is an indented block whose first line is `$ ./train FLAGS` (anything after three spaces and
a parenthesis, "   (columns and rows cut)", is a note); the indented lines after it are what the
command prints, cut as the page wants: a table keeps the columns its header line names and the rows
whose first two cells (z, -r) it lists; every other line stands for the output line that begins with
the same two words. This script runs each command (the host AdamW rate fixed, ZT_PLAN_ADAMW_NS=1,
so that the offload rows read the same on every machine) and rebuilds each block from the output:

    python3 dev/doc_samples.py [--binary ./train] [--check]      # --check: say what differs, exit 1

test/check_docs.py runs --check (make test's docs_pointers line), so a page cannot show what the
program no longer prints. The --binary may be test/test_bf16 (run as --train).
"""
import os, re, shlex, subprocess, sys

args = sys.argv[1:]
check = "--check" in args
binary = "./train"
if "--binary" in args:
    binary = args[args.index("--binary") + 1]
DOCS = ["docs/sizing.md", "docs/plan.md"]
SAMPLE = re.compile(r"^    \$ (\./train [^\n]*?)(\s{3,}\(.*\))?$")

def run(cmdline):
    argv = shlex.split(cmdline)[1:]
    prefix = [binary, "--train"] if "test_" in os.path.basename(binary) else [binary]
    env = dict(os.environ, ZT_PLAN_ADAMW_NS="1")
    out = subprocess.run(prefix + argv, capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        sys.exit("doc_samples: %s exited %d:\n%s" % (cmdline, out.returncode, out.stdout[-2000:] + out.stderr[-2000:]))
    return out.stdout.split("\n")

def cells(line):
    return line.split("|")[1:-1]

def rebuild(doc_lines, out):
    """The block's lines rebuilt from the program's output (None where a line has no counterpart)."""
    table = [l for l in out if l.startswith("| z |")]
    head_out = cells(table[0]) if table else []
    names_out = [c.strip() for c in head_out]
    keep = None
    result = []
    for line in doc_lines:
        if line.startswith("| z |"):
            names = [c.strip() for c in cells(line)]
            missing = [n for n in names if n not in names_out]
            if missing:
                result.append((line, "columns %s are not in the output's table" % missing)); continue
            keep = [names_out.index(n) for n in names]
            result.append(("|" + "|".join(head_out[i] for i in keep) + "|", None))
        elif line.startswith("| ") and keep is not None:
            key = [c.strip() for c in cells(line)[:2]]
            row = [l for l in out if l.startswith("| ") and [c.strip() for c in cells(l)[:2]] == key and not l.startswith("| z |")]
            if not row:
                result.append((line, "no row z %s -r %s in the output" % tuple(key))); continue
            c = cells(row[0])
            result.append(("|" + "|".join(c[i] for i in keep) + "|", None))
        else:
            words = line.split()[:2]
            match = [l for l in out if l.split()[:2] == words] if words else []
            if not match:
                result.append((line, "no output line begins with %r" % " ".join(words))); continue
            result.append((match[0], None))
    return result

problems = 0
for doc in DOCS:
    lines = open(doc, encoding="utf-8").read().split("\n")
    i = 0
    changed = False
    while i < len(lines):
        m = SAMPLE.match(lines[i])
        if not m:
            i += 1; continue
        j = i + 1
        while j < len(lines) and lines[j].startswith("    ") and not SAMPLE.match(lines[j]):
            j += 1
        block = [l[4:] for l in lines[i + 1:j]]
        out = run(m.group(1))
        new = rebuild(block, out)
        for k, (text, err) in enumerate(new):
            if err:
                print("%s:%d: %s" % (doc, i + 2 + k, err)); problems += 1
            elif text != block[k]:
                if check:
                    print("%s:%d: the page shows\n    %s\n  the program prints\n    %s" % (doc, i + 2 + k, block[k], text)); problems += 1
                lines[i + 1 + k] = "    " + text
                changed = True
        i = j
    if changed and not check:
        open(doc, "w", encoding="utf-8").write("\n".join(lines))
        print("%s: samples rebuilt from %s" % (doc, binary))
if check:
    print("doc_samples: %s" % ("every sample is what the program prints" if not problems else "%d line(s) differ: python3 dev/doc_samples.py rebuilds them" % problems))
sys.exit(1 if problems else 0)
