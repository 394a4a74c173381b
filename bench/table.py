"""A table with columns of text read into the training tensor (docs/benchmarks.md, "Tables
with text"), side by side in one run.

Writes (once, under --dir) a CSV of --rows rows: 20 numeric columns, 5 columns of text
(4 to 40 values each, some missing) and a class label. Then, alternating their order
from one repetition to the next:

  pandas    `pd.read_csv` then `pd.get_dummies(…, dtype=float32)` and `.to_numpy()`: the
            features as a float32 matrix, the text one-hot (missing: a row of zeros);
  pipeline  `pipeline run --no-cache` of one epoch of a linear model (batch 65536) on
            the same file: reading it, encoding the text one-hot (the training split's
            values), filling the missing numbers with the median, and training; its
            epoch time is taken off its wall time (`read` below).

Per side: peak RSS of the process (os.wait4) and wall time. pandas is installed into the
project's torch venv when it is missing (a benchmark's dependency, not the tests').

Usage: python bench/table.py [--dir DIR] [--rows N] [--reps R]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PANDAS = "pandas==2.3.3"

MANIFEST = """pipeline "table-bench"
seed 1
data {
    source "table.csv"
    header #true
    label "y"
    missing "median"
    split train=1.0 val=0.0 test=0.0
}
model {
    linear 4
}
loss "cross-entropy"
optimizer "sgd" lr=0.05
accelerator {
    threads 1
}
train epochs=1 batch-size=65536
"""

READ_WITH_PANDAS = """
import sys, numpy as np, pandas as pd
df = pd.read_csv(sys.argv[1])
x = pd.get_dummies(df.drop(columns="y"), dtype=np.float32).to_numpy(dtype=np.float32)
print(x.shape, file=sys.stderr)
"""


def write_data(path, rows):
    if path.exists():
        return
    print(f"writing {rows} rows into {path}", file=sys.stderr)
    rng = np.random.default_rng(0)
    counts = [4, 8, 12, 20, 40]
    with open(path.with_suffix(".tmp"), "w") as f:
        f.write(",".join([f"n{j}" for j in range(20)] + [f"c{k}" for k in range(5)] + ["y"]) + "\n")
        chunk = 100_000
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            numbers = rng.standard_normal((n, 20))
            codes = [rng.integers(0, c, n) for c in counts]
            gaps = rng.random((n, 5)) < 0.02
            y = (numbers[:, 0] > 0).astype(int) + 2 * (codes[0] % 2)
            lines = []
            for i in range(n):
                cells = [f"{v:.5f}" for v in numbers[i]]
                cells += ["" if gaps[i, k] else f"value-{k}-{codes[k][i]}" for k in range(5)]
                cells.append(str(y[i]))
                lines.append(",".join(cells))
            f.write("\n".join(lines) + "\n")
    os.replace(path.with_suffix(".tmp"), path)


def measured(cmd, cwd):
    """Runs `cmd`; (peak RSS in MiB, wall seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr.read().decode()[-3000:]}")
    return usage.ru_maxrss / 1024.0, wall


def epoch_seconds(directory):
    runs = sorted((directory / ".pipeline" / "runs").iterdir())
    for line in (runs[-1] / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("record") == "epoch" and record.get("epoch") == 1:
            return record["seconds"]
    raise SystemExit(f"no epoch record in {runs[-1]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/pipeline-table-bench")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        import pandas  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", PANDAS], check=True)
    write_data(directory / "table.csv", args.rows)
    (directory / "table.kdl").write_text(MANIFEST)
    (directory / "pandas_side.py").write_text(READ_WITH_PANDAS)
    pipeline = ROOT / "target" / "release" / "pipeline"
    sides = {
        "pandas": [sys.executable, "pandas_side.py", "table.csv"],
        "pipeline": [str(pipeline), "run", "table.kdl", "--no-cache"],
    }
    results = {name: [] for name in sides}
    for rep in range(args.reps):
        order = list(sides) if rep % 2 == 0 else list(reversed(sides))
        for name in order:
            rss, wall = measured(sides[name], directory)
            r = {"rss_mib": rss, "wall": wall}
            if name == "pipeline":
                r["epoch_s"] = epoch_seconds(directory)
                r["read"] = wall - r["epoch_s"]
            results[name].append(r)
            print(f"rep {rep + 1}/{args.reps} {name:9} rss {rss:7.0f} MiB  wall {wall:6.2f} s  "
                  + (f"epoch {r['epoch_s']:5.2f} s" if "epoch_s" in r else ""), file=sys.stderr)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in results.items()}
    print("| side | peak RSS (MiB) | wall (s) | reading (s) |")
    print("|---|---|---|---|")
    print(f"| pandas | {med['pandas']['rss_mib']:.0f} | {med['pandas']['wall']:.2f} | {med['pandas']['wall']:.2f} |")
    print(f"| pipeline | {med['pipeline']['rss_mib']:.0f} | {med['pipeline']['wall']:.2f} | {med['pipeline']['read']:.2f} |")
    print(f"pipeline ÷ pandas: memory {med['pipeline']['rss_mib'] / med['pandas']['rss_mib']:.2f}, "
          f"wall {med['pipeline']['wall'] / med['pandas']['wall']:.2f}, reading {med['pipeline']['read'] / med['pandas']['wall']:.2f}")


if __name__ == "__main__":
    main()
