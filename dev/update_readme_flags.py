#!/usr/bin/env python3
"""dev/update_readme_flags.py — paste the output of `./train -help` into README.md's flag list, and
its lists of recorded flags (FLAG_RUN, FLAG_KEEP: flags.h's run column) into docs/resume.md's table.

The test cli_readme_flags_current fails when README.md's list differs from what the program
prints, docs_pointers (test/check_docs.py) when docs/resume.md's rows do; run this (after
`make train`) to bring both up to date:  python3 dev/update_readme_flags.py [./train]
"""
import re
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else "./train"
help_text = subprocess.run([binary, "-help"], capture_output=True, text=True, check=True).stdout
readme = open("README.md").read()
start = readme.index("```\nusage: ./train")
end = readme.index("```", start + 3)
open("README.md", "w").write(readme[:start] + "```\n" + help_text + readme[end:])
print("README.md: flag list updated from", binary)
resume = open("docs/resume.md").read()
for kind in ("FLAG_RUN", "FLAG_KEEP"):
    flags = re.search(r"^  %s \([^)]*\):(.*)$" % kind, help_text, re.M).group(1).split()
    resume = re.sub(r"^(\| `%s` \| )`[^`]*`" % kind, lambda m: m.group(1) + "`" + " ".join(flags) + "`", resume, count=1, flags=re.M)
open("docs/resume.md", "w").write(resume)
print("docs/resume.md: the recorded flags' rows updated from", binary)
