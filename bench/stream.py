"""The larger-than-memory benchmark (docs/benchmarks.md, "Streaming"), side by side in one run.

Writes (once, under --dir) a 4 GiB `.npy` of 1,000,000 × 1,000 float32 features with int64
labels (the class is the largest of the first ten features, so a linear model learns
it), and the same data's first --small rows as a file small enough to sit in memory.
Then trains one epoch of a linear model (1000 → 10, batch 1024, 1 libtorch thread)
with `pipeline run --no-cache`:

  stream-4G     the 4 GiB file, `load "stream"`, --workers threads assembling ahead;
  stream-4G-w0  the same with `workers 0` (each batch read when it is needed);
  memory-S      the small file, `load "memory"` (the whole array on the device);
  stream-S      the small file, `load "stream"`;
  parquet-4G    (with --parquet) the same 4 GiB as one Parquet file (pyarrow's defaults:
                snappy, row groups of 1Mi rows, so here one), labels a column of it,
                `load "stream"`: decoded chunk by chunk into an unnamed float32 file,
                then streamed; its wall time includes the decoding;

alternating their order from one repetition to the next. Per run: peak RSS of the whole
process tree (os.wait4), wall time, and the epoch's samples per second from the run's
metrics.jsonl. The ratio that matters is stream-4G's seconds per sample over memory-S's.

Usage: python bench/stream.py [--dir DIR] [--rows N] [--small N] [--reps R] [--workers W] [--parquet]
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

MANIFEST = """pipeline "stream-bench"
seed 1
data {{
    source "{source}"
    {labels}
    load "{load}"
    workers {workers}
    prefetch 4
    split train=1.0 val=0.0 test=0.0
}}
model {{
    linear 10
}}
loss "cross-entropy"
optimizer "sgd" lr=0.05
accelerator {{
    threads 1
}}
train epochs=1 batch-size=1024
"""


def write_data(directory, rows, small, width=1000):
    x_path, y_path = directory / "x.npy", directory / "y.npy"
    xs_path, ys_path = directory / f"x-{small}.npy", directory / f"y-{small}.npy"
    if not (x_path.exists() and y_path.exists() and xs_path.exists()):
        print(f"writing {rows} × {width} float32 ({rows * width * 4 / 2**30:.1f} GiB) into {directory}", file=sys.stderr)
        rng = np.random.default_rng(0)
        x = np.lib.format.open_memmap(directory / "x.tmp.npy", mode="w+", dtype=np.float32, shape=(rows, width))
        y = np.empty(rows, dtype=np.int64)
        chunk = 50_000
        for start in range(0, rows, chunk):
            part = rng.standard_normal((min(chunk, rows - start), width), dtype=np.float32)
            x[start:start + len(part)] = part
            y[start:start + len(part)] = part[:, :10].argmax(axis=1)
        x.flush()
        del x
        np.save(directory / "y.tmp.npy", y)
        os.replace(directory / "x.tmp.npy", x_path)
        os.replace(directory / "y.tmp.npy", y_path)
        x = np.load(x_path, mmap_mode="r")
        np.save(xs_path, np.asarray(x[:small]))
        np.save(ys_path, y[:small])
    return (x_path, y_path), (xs_path, ys_path)


def write_parquet(directory):
    """x.npy and y.npy as one Parquet file (columns f0 … f999 and y), pyarrow's defaults."""
    path = directory / "x.parquet"
    if path.exists():
        return path
    import pyarrow as pa
    import pyarrow.parquet as pq
    print(f"writing {path}", file=sys.stderr)
    x = np.load(directory / "x.npy", mmap_mode="r")
    y = np.load(directory / "y.npy")
    columns = {f"f{j}": pa.array(np.ascontiguousarray(x[:, j])) for j in range(x.shape[1])}
    columns["y"] = pa.array(y)
    pq.write_table(pa.table(columns), directory / "x.tmp.parquet")
    os.replace(directory / "x.tmp.parquet", path)
    return path


def measured(cmd, cwd):
    """Runs `cmd`; (peak RSS of the process tree in MiB, wall seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{proc.stderr.read().decode()[-3000:]}")
    return usage.ru_maxrss / 1024.0, wall


def epoch_record(directory):
    runs = sorted((directory / ".pipeline" / "runs").iterdir())
    for line in (runs[-1] / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("record") == "epoch" and record.get("epoch") == 1:
            return record
    raise SystemExit(f"no epoch record in {runs[-1]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/tmp/pipeline-stream-bench")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--small", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--parquet", action="store_true", help="add the parquet-4G side")
    p.add_argument("--json")
    p.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    if args.write_only:
        write_data(directory, args.rows, args.small)
        if args.parquet:
            write_parquet(directory)
        return
    # The data is written by a process of its own: a child forked from a parent that
    # touched 4 GiB would count the parent's pages in its own peak RSS until it execs.
    subprocess.run([sys.executable, __file__, "--write-only", "--dir", str(directory),
                    "--rows", str(args.rows), "--small", str(args.small)] + ["--parquet"] * args.parquet,
                   check=True)
    big_x, big_y = directory / "x.npy", directory / "y.npy"
    small_x, small_y = directory / f"x-{args.small}.npy", directory / f"y-{args.small}.npy"
    pipeline = ROOT / "target" / "release" / "pipeline"
    sides = {
        "stream-4G": (big_x, big_y, "stream", args.workers),
        "stream-4G-w0": (big_x, big_y, "stream", 0),
        "memory-S": (small_x, small_y, "memory", args.workers),
        "stream-S": (small_x, small_y, "stream", args.workers),
    }
    if args.parquet:
        sides["parquet-4G"] = (directory / "x.parquet", None, "stream", args.workers)
    for name, (x, y, load, workers) in sides.items():
        labels = f'labels "{y.name}"' if y else 'label "y"'
        (directory / f"{name}.kdl").write_text(MANIFEST.format(source=x.name, labels=labels, load=load, workers=workers))
    results = {name: [] for name in sides}
    for rep in range(args.reps):
        order = list(sides) if rep % 2 == 0 else list(reversed(sides))
        for name in order:
            rss, wall = measured([str(pipeline), "run", f"{name}.kdl", "--no-cache"], directory)
            record = epoch_record(directory)
            r = {"rss_mib": rss, "wall": wall, "epoch_s": record["seconds"],
                 "samples_per_s": record["samples_per_second"], "accuracy": record.get("accuracy")}
            results[name].append(r)
            print(f"rep {rep + 1}/{args.reps} {name:12} rss {rss:7.0f} MiB  wall {wall:7.2f} s  epoch {r['epoch_s']:7.2f} s  "
                  f"{r['samples_per_s']:9.0f} samples/s  acc {r['accuracy']:.4f}", file=sys.stderr)
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("rss_mib", "wall", "epoch_s", "samples_per_s")} for n, rs in results.items()}
    base = med["memory-S"]["samples_per_s"]
    print("| side | rows | peak RSS (MiB) | wall (s) | epoch (s) | samples/s | s per sample × memory-S |")
    print("|---|---|---|---|---|---|---|")
    for name, (x, _, _, _) in sides.items():
        rows = args.rows if x.suffix == ".parquet" else np.load(directory / x.name, mmap_mode="r").shape[0]
        m = med[name]
        print(f"| {name} | {rows:,} | {m['rss_mib']:.0f} | {m['wall']:.1f} | {m['epoch_s']:.2f} | {m['samples_per_s']:,.0f} | {base / m['samples_per_s']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "median": med}, indent=1))


if __name__ == "__main__":
    main()
