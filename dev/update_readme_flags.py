#!/usr/bin/env python3
"""dev/update_readme_flags.py — paste the output of `./train -help` into README.md's flag list.

The test cli_readme_flags_current fails when README.md's list differs from what the program
prints; run this (after `make train`) to bring it up to date:  python3 dev/update_readme_flags.py [./train]
"""
import subprocess
import sys

binary = sys.argv[1] if len(sys.argv) > 1 else "./train"
help_text = subprocess.run([binary, "-help"], capture_output=True, text=True, check=True).stdout
readme = open("README.md").read()
start = readme.index("```\nusage: ./train")
end = readme.index("```", start + 3)
open("README.md", "w").write(readme[:start] + "```\n" + help_text + readme[end:])
print("README.md: flag list updated from", binary)
