#!/usr/bin/env python3
"""test/check_docs.py — every pointer README.md and docs/*.md give exists (make test runs it).

A newcomer trusts the map: a wrong pointer costs them more than a missing one. Checked, in the
text and in its `backtick` spans (fenced code blocks: only their ./train command lines):
  - paths: a span naming a file or folder of the tree (`zero.h`, `dev/plot.py`, `test/cuda_emu/`,
    globs like `ops/*.cuh`) exists; spans that name what a run writes (out/, DIR/, PREFIX, %08d...)
    are not paths of the tree and are recognised as such;
  - names: a span that is a C/Python/shell identifier of the code (snake_case, or an UPPER_CASE
    macro) is defined in the sources: a function, macro, type, table, variable, test case
    (TEST(name)), or a string the program reads (an environment variable, a JSON key); a name
    followed by () must be a function or macro;
  - the concept index (README "Where is…"): in each row, every name is defined in the file named
    after it ("`a`, `b` in `f.h`; `c` in `g.h`"), so a name put in the wrong file fails;
  - flags: every -flag of a span or of a ./train command line is in the flag table (compilers'
    -W..., -O1, -D..., -f... and a few other programs' flags, OTHER_FLAGS, excepted)
    (`test/test_bf16 --train -help`, or the binary given with --help-from);
  - links: [text](target) to a file of the tree exists, and #anchors match a heading there.
Before the docs, a page with planted wrong pointers (PLANTED below) must give exactly its problems:
the check shows it can fail. Prints one line per problem and "check_docs: N pointers checked in F
files, M wrong"; exits 1 if any is wrong.
"""
import glob, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)
args = sys.argv[1:]
help_bin = "test/test_bf16"
if "--help-from" in args:
    i = args.index("--help-from"); help_bin = args[i + 1]; del args[i:i + 2]
DOCS = args or ["README.md"] + sorted(glob.glob("docs/*.md"))

# ---- the sources: every file git knows (or, outside git, every file) minus the docs themselves
try:
    tree = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    tree = [t for t in tree if t and os.path.exists(t)]
except (OSError, subprocess.CalledProcessError):
    tree = [os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk(".") for f in fs]
SRC_EXT = (".h", ".cu", ".cuh", ".cpp", ".c", ".py", ".sh")
sources = {}
for t in tree:
    if t == "test/check_docs.py": continue  # its planted names must not count as defined
    if t.endswith(SRC_EXT) or os.path.basename(t) in ("Makefile", "run"):
        try:
            sources[t] = open(t, encoding="utf-8", errors="replace").read()
        except OSError:
            pass
basenames = {}
for t in tree:
    basenames.setdefault(os.path.basename(t), []).append(t)
targets = set()
if os.path.exists("Makefile"):
    targets = set(re.findall(r"^([\w./-]+)\s*:(?!=)", open("Makefile").read(), re.M))
dirs = set()
for t in tree:
    d = os.path.dirname(t)
    while d:
        dirs.add(d); d = os.path.dirname(d)

def strip_comments(text, path):
    if path.endswith((".py", ".sh")) or os.path.basename(path) in ("Makefile", "run"):
        return re.sub(r"(?m)(^|\s)#(?!include|define|if|else|endif|pragma|!).*$", r"\1", text)
    # C: a small lexer, so that "//" or "/*" inside a string (or a comment) is read as what it is
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i); i = n if j < 0 else j
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2); i = n if j < 0 else j + 2; out.append(" ")
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1]); i = j + 1
        else:
            j = i
            while j < n and text[j] not in "/\"'": j += 1
            if j == i: j += 1
            out.append(text[i:j]); i = j
    return "".join(out)

# Where each name is defined (the concept index needs the file), and which names the code uses
# otherwise (called, a member, a string it reads: an environment variable, a JSON key). Comments do
# not count: a name only a comment mentions is not in the code.
DEF_PATTERNS = [
    r"^#\s*define\s+(\w+)",                                      # a macro
    r"^\s*\w*TEST\w*\s*\(\s*(\w+)\s*\)",                         # a test case
    r"\b(?:struct|enum|union|class)\s+(\w+)",                        # a type
    r"^\s*}\s*(\w+)\s*;",                                          # typedef struct {...} name;
    r"\btypedef\b[^;]*?\b(\w+)\s*(?:\[[^\]]*\])?\s*;",                 # typedef
    r"^\s*(?!return\b|else\b|case\b|goto\b)[A-Za-z_][\w\s\*,:<>]*?[\s\*](\w+)\s*(?:\[[^\]]*\])*\s*(?:=|;)",  # a variable, table or member
    r"^\s+([A-Z][A-Z0-9_]+)\s*(?:=\s*[^,;]+)?,",                   # an enumerator
    r"^\s*(?:async\s+)?def\s+(\w+)\s*\(",                          # Python
    r"^(\w+)\s*=",                                                 # Python or shell, at the top
    r"^\s*(?:function\s+)?(\w+)\s*\(\)\s*\{",                        # shell
    r"^\s*(?:local\s+)?(\w+)=",                                     # shell variable
    r"^(\w+)\s*[:?+]?=",                                            # make variable
]
DEF_RX = re.compile("|".join("(?:%s)" % p for p in DEF_PATTERNS), re.M)
FUNC_LINE = re.compile(r"^(?![#/*}\s])[^\n]*", re.M)   # a line at column 0: where functions are defined
defined = {}   # name -> set of files
used = set()
for f, text in sources.items():
    code = strip_comments(text, f)
    names = set()
    for m in DEF_RX.finditer(code):
        names.update(g for g in m.groups() if g)
    for line in FUNC_LINE.findall(code):
        names.update(re.findall(r"\b([A-Za-z_]\w*)\s*\(", line))
    for n in names:
        defined.setdefault(n, set()).add(f)
    used.update(re.findall(r"\b([A-Za-z_]\w*)\b", code))                # in the code (not a comment): it compiles
    used.update(re.findall(r"(?:\.|->)([A-Za-z_]\w*)", code))            # a member
    used.update(re.findall(r"[\"']([A-Za-z_]\w*)", code))                 # in a string: env, keys
    used.update(re.findall(r"\$\{?([A-Za-z_]\w*)", code))                # shell and make variables
    if f == "Makefile":
        used.update(re.findall(r"\b([A-Z][A-Z0-9_]+)\b", code))      # make: variables
    if f.endswith((".sh", "run")):
        words = set(re.findall(r"\b([A-Za-z_]\w*)\b", code))          # shell: its words (case names, variables)
        used.update(words)
        for w in words: defined.setdefault(w, set()).add(f)       # a shell script's cases live in its words
# Names the docs may give that live outside this tree: variables other programs read, library
# calls described but not made, other tools' names. Keep it short: each is a deliberate exception.
EXTERNAL = {"CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE",
            "O_DIRECT", "encode_ordinary", "TORCHELASTIC_USE_AGENT_STORE", "sm_80", "sm_90", "compute_80",
            "compute_90"}

def definitions(name):
    return sorted(defined.get(name, ()))

def read_by_program(name):
    return name in used or name in EXTERNAL

def flag_table():
    try:
        out = subprocess.run([help_bin, "--train", "-help"] if "test_" in help_bin else [help_bin, "-help"],
                             capture_output=True, text=True, timeout=60).stdout
    except OSError as e:
        sys.exit("check_docs: cannot run %s -help (%s): build it first (make %s)" % (help_bin, e, help_bin))
    flags = set(re.findall(r"^  (-[a-z][a-z0-9-]*)", out, re.M))
    if len(flags) < 20:
        sys.exit("check_docs: %s -help printed %d flags: not the flag table" % (help_bin, len(flags)))
    # the recorded flags of each kind, which -help prints from the table's run column
    kinds = {k: m.group(1).split() for k in ("FLAG_RUN", "FLAG_KEEP")
             for m in [re.search(r"^  %s \([^)]*\):(.*)$" % k, out, re.M)] if m}
    return flags, kinds

FLAGS, RECORDED = flag_table()
FLAGS |= {"-help"}   # -help is answered before the table is read
# Flags of other programs that the docs name beside ours: make, mpirun, the compilers, torchrun,
# dev/ scripts, test binaries. Only these are allowed to look like flags and not be ours.
OTHER_FLAGS = {"-np", "-march", "-O1", "-O2", "-O3", "-g", "-gencode", "-Werror", "-Wformat-truncation",
               "-ffp-contract", "-fopenmp", "-runs", "-seed", "-max_len", "-max_total_time", "-DMATMUL_WORKSPACE_BYTES"}

def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[`*_~]", "", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")

def anchors(path):
    out = set()
    seen = {}
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"): in_code = not in_code
        if in_code: continue
        m = re.match(r"^#{1,6}\s+(.*)", line)
        if m:
            s = slug(m.group(1)); k = seen.get(s, 0); seen[s] = k + 1
            out.add(s if k == 0 else "%s-%d" % (s, k))
    return out

problems = []
checked = 0
def bad(doc, lineno, msg):
    problems.append("%s:%d: %s" % (doc, lineno, msg))

RUNTIME = re.compile(r"%|\bDIR\b|\bPATH\b|\bPREFIX\b|\bFILE\b|<|\$|^out/|^/|^~|^z\d/|^build/|\.\.\.|\bN\b|^data/(corpus|mine)")
TREE_ROOTS = ("dev/", "test/", "ops/", "docs/", "data/", ".ci/")
TREE_EXT = (".h", ".cu", ".cuh", ".cpp", ".py", ".sh", ".md", ".png")

def check_path(doc, ln, span, base):
    global checked
    p = span.rstrip("/")
    if RUNTIME.search(span): return
    cands = [os.path.normpath(os.path.join(base, p)), os.path.normpath(p)]
    checked += 1
    for c in cands:
        if any(ch in c for ch in "*?["):
            if glob.glob(c): return
        elif os.path.exists(c) or c in dirs: return
    if "/" not in p and (p in basenames or any(glob.fnmatch.fnmatch(b, p) for b in basenames)): return
    if p in targets: return
    bad(doc, ln, "`%s`: no such file or folder in the tree" % span)

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

def check_name(doc, ln, span):
    global checked
    call = span.endswith("()")
    name = span[:-2] if call else span
    if not IDENT.match(name): return
    # a code name: snake_case with an underscore, UPPER_CASE with an underscore, or written name()
    if not (call or ("_" in name and (name.islower() or name.isupper()))): return
    checked += 1
    if definitions(name): return
    if not call and read_by_program(name): return
    bad(doc, ln, "`%s`: not defined in the sources%s" % (span, "" if call else " (nor a name the program reads)"))

def check_flags_in(doc, ln, words):
    global checked
    for w in words:
        f = w.split("=")[0].rstrip(",.;:)")
        if not re.match(r"^-[A-Za-z][A-Za-z0-9_-]*$", f): continue
        checked += 1
        if f not in FLAGS and f not in OTHER_FLAGS and not re.match(r"^-(W|O\d|D[A-Z]|f[a-z])", f):  # compilers' flags
            bad(doc, ln, "flag %s is not in the flag table (%s -help)" % (f, help_bin))

def train_words(line):
    """The words of each ./train (or test binary --train) command on a line."""
    out = []
    for m in re.finditer(r"(?:\./train(?:_gpu\w*)?|\btrain\b(?= -)|test/test_\w+ --train)((?:\s+[^\s|#;&`]+)*)", line):
        out += m.group(1).split()
    return out

CONCEPT_ROW = re.compile(r"^\|[^|]+\|([^|]+)\|\s*$")

def check_doc(doc, lines, base):
    global checked
    in_code = False
    in_index = False
    for ln, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_code = not in_code; continue
        if line.startswith("## "):
            in_index = line.startswith("## Where is")
        if in_code or line.startswith("    "):   # code: only the trainer's command lines
            check_flags_in(doc, ln, train_words(line))
            continue
        text = re.sub(r"`[^`]*`", "", line)
        # links
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"): continue
            path, _, anchor = target.partition("#")
            checked += 1
            tpath = os.path.normpath(os.path.join(base, path)) if path else doc
            if not os.path.exists(tpath):
                bad(doc, ln, "link %s: no such file" % target); continue
            if anchor and tpath.endswith(".md") and anchor not in anchors(tpath):
                bad(doc, ln, "link %s: no heading #%s in %s" % (target, anchor, tpath))
        spans = re.findall(r"`([^`]+)`", line)
        for s in spans:
            s = s.strip()
            if s.startswith("-") and not s.startswith("--"):
                check_flags_in(doc, ln, s.split()[:1] + [w for w in s.split()[1:] if w.startswith("-")])
            elif re.match(r"^(\./train|mpirun|dev/launch\.sh|torchrun|test/test_\w+ --train)", s):
                check_flags_in(doc, ln, train_words(s))
            if " " in s: continue
            if s.startswith(TREE_ROOTS) or (("/" not in s) and s.endswith(TREE_EXT)) or s in ("Makefile",):
                check_path(doc, ln, s, base)
            else:
                check_name(doc, ln, s)
        # anywhere: "`name` in `file`" or "`name` (`file`": the name is defined in that file
        for m in re.finditer(r"`([A-Za-z_]\w*)(?:\(\))?`\s*(?:\(|in\s+)`?([\w./-]+\.(?:h|cu|cuh|cpp|py|sh))\b`?", line):
            n, f = m.group(1), m.group(2)
            if in_index or not (("_" in n) or n.isupper()): continue
            checked += 1
            if f not in definitions(n) and not any(d.endswith("/" + f) for d in definitions(n)):
                where = definitions(n)
                bad(doc, ln, "`%s` is not defined in `%s`%s" % (n, f, " (it is in %s)" % ", ".join(where) if where else ""))
        # the concept index: every name is defined in the file named after it
        m = CONCEPT_ROW.match(line)
        if in_index and m and "---" not in line:
            for part in m.group(1).split(";"):
                files = [f for f in re.findall(r"`([^`]+)`", part) if f.endswith((".h", ".cu", ".cuh", ".cpp", ".sh", ".py"))]
                names = [f for f in re.findall(r"`([^`]+)`", part) if IDENT.match(f)]
                if not names: continue
                checked += 1
                if len(files) != 1:
                    bad(doc, ln, "concept index: '%s' should name its file once: `a`, `b` in `file`" % part.strip()); continue
                for n in names:
                    where = definitions(n)
                    if files[0] not in where:
                        bad(doc, ln, "concept index: `%s` is not defined in `%s`%s" % (n, files[0],
                            " (it is in %s)" % ", ".join("`%s`" % w for w in where) if where else " (nor anywhere)"))


PLANTED = """# planted
## Where is…: a concept index

| concept | where |
|---|---|
| the gradient norm | `zero_grad_norm` in `zero.h` |
| the tensor table | `model_layout` in `train_gpt.cu` |

## Other

`dev/no_such_script.py` and `-no-such-flag`, a [link](docs/zero.md#no-such-heading), `ops/nothing.cuh`,
and the commands:

    ./train -z 3 -recompute 2
"""
PLANTED_WANT = ["`zero_grad_norm`: not defined", "concept index: `zero_grad_norm` is not defined in `zero.h`",
                "concept index: `model_layout` is not defined in `train_gpt.cu` (it is in `model.h`)",
                "`dev/no_such_script.py`: no such file", "flag -no-such-flag is not in the flag table",
                "link docs/zero.md#no-such-heading: no heading", "`ops/nothing.cuh`: no such file",
                "flag -recompute is not in the flag table"]

if True:
    # The check must be able to fail: first a page with planted wrong pointers must give exactly those
    # (the old README's zero_grad_norm and model_layout-in-train_gpt.cu among them).
    check_doc("PLANTED.md", PLANTED.split("\n"), ".")
    got, problems[:] = problems[:], []
    missed = [w for w in PLANTED_WANT if not any(w in g for g in got)]
    if missed or len(got) != len(PLANTED_WANT):
        print("check_docs: the planted page gave %d problem(s), %d expected:" % (len(got), len(PLANTED_WANT)))
        for g in got: print("  got:    " + g)
        for w in missed: print("  missed: " + w)
        sys.exit(1)
    print("check_docs: the planted page's %d wrong pointers were all found" % len(got))
    checked = 0

for doc in DOCS:
    check_doc(doc, open(doc, encoding="utf-8").read().split("\n"), os.path.dirname(doc))

# README's status table against docs/status.md: each README row's part links its page (the last link
# in the part cell); docs/status.md has a row linking the same page, whose state begins with the same
# word (done, written, ...) and says "never run on a GPU" exactly when README's does.
def table_rows(text, start, stop):
    a = text.index(start)
    b = text.find(stop, a + len(start))
    rows = []
    for line in text[a:b if b >= 0 else len(text)].split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if len(cells) >= 2 and cells[0] not in ("part", "---"):
            rows.append((cells[0], "|".join(cells[1:])))
    return rows
def first_word(state):
    m = re.match(r"[*_]*([A-Za-z-]+)", state)
    return m.group(1).lower() if m else ""
def never_on_gpu(state):
    return "never run on a gpu" in state.replace("*", "").lower()
readme_text = open("README.md", encoding="utf-8").read()
status_text = open("docs/status.md", encoding="utf-8").read()
status_rows = table_rows(status_text, "| part | state |", "\n\n")
for part, state in table_rows(readme_text, "## Status", "\n## "):
    checked += 1
    links = re.findall(r"\]\((?:docs/)?([a-z_]+\.md)", part)
    if not links:
        problems.append("README.md's status row '%s...' links no docs page in its part cell" % part[:40]); continue
    page = links[-1]
    match = [(p2, s2) for p2, s2 in status_rows if re.search(r"\]\(%s(#[^)]*)?\)" % re.escape(page), p2 + s2)]
    if not match:
        problems.append("README.md's status row for %s: docs/status.md has no row linking %s" % (page, page)); continue
    p2, s2 = match[0]
    if first_word(state) != first_word(s2):
        problems.append("status of %s: README.md says '%s', docs/status.md '%s'" % (page, first_word(state), first_word(s2)))
    if never_on_gpu(state) != never_on_gpu(s2):
        problems.append("status of %s: 'never run on a GPU' in %s only" % (page, "README.md" if never_on_gpu(state) else "docs/status.md"))

# docs/sizing.md's sample outputs are what the program prints (dev/doc_samples.py --check runs each)
checked += 1
ds = subprocess.run([sys.executable, "dev/doc_samples.py", "--binary", help_bin, "--check"], capture_output=True, text=True)
if ds.returncode != 0:
    problems.append("dev/doc_samples.py --check: the sample outputs differ from the program's:\n" + ds.stdout[-3000:] + ds.stderr[-1000:])

# docs/resume.md's table of recorded flags is -help's lists (dev/update_readme_flags.py copies them)
resume_md = open("docs/resume.md", encoding="utf-8").read()
for kind in ("FLAG_RUN", "FLAG_KEEP"):
    m = re.search(r"^\| `%s` \| `([^`]*)`" % kind, resume_md, re.M)
    checked += 1
    if kind not in RECORDED:
        problems.append("%s -help prints no %s line (flags_print_help)" % (help_bin, kind))
    elif not m or m.group(1).split() != RECORDED[kind]:
        problems.append("docs/resume.md: the %s row lists %s, -help %s: run python3 dev/update_readme_flags.py"
                        % (kind, m.group(1) if m else "nothing", " ".join(RECORDED[kind])))

for p in problems: print(p)
print("check_docs: %d pointers checked in %d files, %d wrong" % (checked, len(DOCS), len(problems)))
sys.exit(1 if problems else 0)
