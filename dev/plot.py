#!/usr/bin/env python3
"""dev/plot.py — pictures of runs from their log.jsonl: several runs overlaid.

    python3 dev/plot.py out/log.jsonl -o loss.png                       # one run
    python3 dev/plot.py z0/log.jsonl:ZeRO-0 z3/log.jsonl:ZeRO-3 -o z.png  # runs overlaid, with labels
    make plot                                                           # out/log.jsonl -> out/loss.png

Four panels over the optimizer step: train loss (solid) and validation loss (dashed, dots), tokens/s,
memory of rank 0 (what the tagged allocator holds, solid; the process's peak RSS, dotted), and the
time waiting on communication per step. A run's label is the text after the last ':' of its argument,
else its directory's name. Needs matplotlib (Debian: apt-get install python3-matplotlib, for
/usr/bin/python3). Bad input (a missing file, a line that is not JSON, a log with no steps): one line
naming the file, exit 2.
"""
import argparse
import json
import os
import sys


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    """The steps of one log.jsonl: dict of lists keyed by what the log records."""
    run = {"step": [], "loss": [], "tok_s": [], "mem": [], "rss": [], "wait": [], "val_step": [], "val": [], "mem_records": []}
    try:
        f = open(path)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{n}: not JSON ({e.msg})")
            if not isinstance(rec, dict):
                fail(f"{path}:{n}: not a JSON object")
            if "memory" in rec:  # {"memory": "start"|"end", "ranks": [{tag: bytes, ..., "vmhwm": bytes}, ...]}
                ranks = rec.get("ranks") or [{}]
                r0 = ranks[0]
                run["mem_records"].append((rec["memory"], sum(v for k, v in r0.items() if k != "vmhwm"), r0.get("vmhwm")))
            elif "val_loss" in rec:
                if rec["val_loss"] is not None:
                    run["val_step"].append(rec["step"])
                    run["val"].append(rec["val_loss"])
            elif "loss" in rec and "step" in rec:
                run["step"].append(rec["step"])
                run["loss"].append(rec["loss"] if rec["loss"] is not None else float("nan"))
                run["tok_s"].append(rec.get("tok_s", float("nan")))
                run["mem"].append(rec.get("mem_tagged"))
                run["rss"].append(rec.get("vmhwm"))
                run["wait"].append(rec.get("comm_wait_ms", float("nan")))
    if not run["step"] and not run["val"]:
        fail(f"{path}: no steps and no validation losses (is it a zerotrain log.jsonl?)")
    return run


def label_of(arg):
    # "path:label" unless the part after ':' is the path's own tail (a Windows drive, a path with ':')
    if ":" in arg and not os.path.exists(arg):
        path, label = arg.rsplit(":", 1)
        return path, label
    d = os.path.basename(os.path.dirname(os.path.abspath(arg)))
    return arg, d or os.path.basename(arg)


def main():
    ap = argparse.ArgumentParser(description="Plot zerotrain log.jsonl files (several runs overlaid).")
    ap.add_argument("logs", nargs="+", help="log.jsonl files, each optionally followed by :label")
    ap.add_argument("-o", "--out", default="loss.png", help="output PNG (default loss.png)")
    ap.add_argument("--size", default="1200x800", help="image size in pixels, WxH (default 1200x800)")
    args = ap.parse_args()
    try:
        w, h = (int(x) for x in args.size.lower().split("x"))
        assert 100 <= w <= 10000 and 100 <= h <= 10000
    except (ValueError, AssertionError):
        fail(f"--size {args.size}: expected WxH in pixels, e.g. 1200x800")
    runs = []
    for a in args.logs:
        path, label = label_of(a)
        runs.append((label, read_log(path)))

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        fail(f"dev/plot.py draws with matplotlib, which {sys.executable} cannot import ({e}). HINT: apt-get install "
             f"python3-matplotlib (for /usr/bin/python3) or pip install matplotlib; the logs themselves were read fine")

    dpi = 100
    fig, ax = plt.subplots(2, 2, figsize=(w / dpi, h / dpi), dpi=dpi)
    (a_loss, a_tok), (a_mem, a_wait) = ax
    MiB = 1048576.0
    for i, (label, r) in enumerate(runs):
        c = f"C{i % 10}"
        a_loss.plot(r["step"], r["loss"], color=c, lw=1.2, label=f"{label} train")
        if r["val"]:
            a_loss.plot(r["val_step"], r["val"], color=c, lw=1.2, ls="--", marker="o", ms=3, label=f"{label} val")
        a_tok.plot(r["step"], r["tok_s"], color=c, lw=1.0, label=label)
        mem = [(s, m) for s, m in zip(r["step"], r["mem"]) if m is not None]
        rss = [(s, m) for s, m in zip(r["step"], r["rss"]) if m is not None]
        if not mem and r["mem_records"] and r["step"]:  # older logs: the start and end records only
            first, last = r["step"][0], r["step"][-1]
            for when, tagged, peak in r["mem_records"]:
                s = first if when == "start" else last
                mem.append((s, tagged))
                if peak is not None:
                    rss.append((s, peak))
        if mem:
            a_mem.plot([s for s, _ in mem], [m / MiB for _, m in mem], color=c, lw=1.2, label=f"{label} tagged")
        if rss:
            a_mem.plot([s for s, _ in rss], [m / MiB for _, m in rss], color=c, lw=1.2, ls=":", label=f"{label} peak RSS")
        a_wait.plot(r["step"], r["wait"], color=c, lw=1.0, label=label)
    a_loss.set_title("loss")
    a_loss.set_ylabel("cross-entropy (nats)")
    a_tok.set_title("throughput")
    a_tok.set_ylabel("tokens/s")
    a_mem.set_title("memory, rank 0")
    a_mem.set_ylabel("MiB")
    a_wait.set_title("waiting on communication")
    a_wait.set_ylabel("ms per step")
    for a in (a_loss, a_tok, a_mem, a_wait):
        a.set_xlabel("step")
        a.grid(True, alpha=0.3)
        if a.get_lines():
            a.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(args.out, dpi=dpi, format="png")
    except OSError as e:
        fail(f"-o {args.out}: {e.strerror}")
    print(f"wrote {args.out} ({w}x{h}) from {len(runs)} run(s)")


if __name__ == "__main__":
    main()
