#!/usr/bin/env python3
"""Puts the figures of a GPU run of the device kit (its OUT/figures.json, see
scripts/device-kit.sh) into docs/benchmarks.md, between `<!-- gpu:begin -->` and
`<!-- gpu:end -->` (the section is added at the end the first time), so that the figures
of every GPU run land there the same way. Prints the section.

Usage: scripts/device-figures.py FIGURES.json [--docs docs/benchmarks.md]
"""

import argparse
import json
from pathlib import Path

BEGIN, END = "<!-- gpu:begin -->", "<!-- gpu:end -->"


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def section(f):
    m, k = f["machine"], f["kit"]
    out = [
        BEGIN,
        f"Measured {f['date']} on {m['gpu'] or 'no GPU (' + f['device'] + ')'}, {m['cpus']} cores, "
        f"torch {m['torch']}, Python {m['python']}; the kit built from {k['commit'][:10]} "
        f"against {k['built_with']}, with `.device-kit/run.sh` ({f['seconds']:.0f} s in all).",
        "",
        "**Checks** (the tests CI cannot run without a GPU, as command-line checks)",
        "",
        "| check | result | detail |",
        "|---|---|---|",
    ]
    for c in f["checks"]:
        result = {True: "passed", False: "**failed**", None: "not run"}[c["ok"]]
        out.append(f"| {c['name']} | {result} | {c['detail'].replace('|', '/')} |")
    out += [
        "",
        "**Side by side with the machine's PyTorch** (same model, initial weights and batches; "
        "the sides interleaved; seconds per epoch after the first, median; device memory: the "
        "peak a run added to the GPU's used memory, nvidia-smi)",
        "",
        "| workload | batch | pipeline s/epoch | PyTorch s/epoch | × PyTorch (per repetition) | pipeline MiB | PyTorch MiB | accuracy (pipeline / PyTorch) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in f["bench"]:
        if b.get("ok") is None and "ratio" not in b:
            out.append(f"| {b['workload']} | {b['batch'] or 'default'} | | | {b['detail']} | | | |")
            continue
        s, mem, acc = b["seconds_per_epoch"], b["device_mib"], b["accuracy"]
        reps = ", ".join(f"{r:.2f}" for r in b["ratio_per_rep"])
        out.append(
            f"| {b['description'].split(',')[0]} | {b['batch'] or b['description'].split('batch ')[1].split(',')[0]} "
            f"| {s['pipeline']:.3f} | {s['plain']:.3f} | **{b['ratio']:.2f}** ({reps}) "
            f"| {fmt(mem['pipeline'], '.0f')} | {fmt(mem['plain'], '.0f')} "
            f"| {acc['pipeline']:.4f} / {acc['plain']:.4f} |"
        )
    out += ["", "**The examples on the device**", "", "| example | precision | result | accuracy | seconds (with start) |", "|---|---|---|---|---|"]
    for e in f["examples"]:
        result = {True: "ran", False: "**failed**", None: "not run"}[e["ok"]]
        out.append(f"| {e['example']} | {e['precision']} | {result} | {fmt(e.get('accuracy'), '.4f')} | {fmt(e.get('seconds'), '.1f')} |")
    out.append(END)
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("figures")
    p.add_argument("--docs", default=str(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"))
    args = p.parse_args()
    figures = json.loads(Path(args.figures).read_text())
    text = section(figures)
    docs = Path(args.docs)
    body = docs.read_text()
    if BEGIN in body:
        head, rest = body.split(BEGIN, 1)
        body = head + text + rest.split(END, 1)[1].lstrip("\n")
    else:
        body = body.rstrip("\n") + "\n\n## On a GPU: the device kit\n\n" + text
    tmp = docs.with_suffix(".md.tmp")
    tmp.write_text(body)
    tmp.replace(docs)
    print(text)


if __name__ == "__main__":
    main()
