"""Benchmarks `pipeline` against plain PyTorch, a DataLoader loop, Lightning and
pytorch-accelerated, in one invocation: every repetition runs every side once, in a
rotating order (A/B/A/B), so the ratios compare runs made under the same machine load.

Prints a markdown table (median and min–max over repetitions, ratios against plain
PyTorch) and writes bench/results/latest.json; `--write-docs` also puts the table into
docs/benchmarks.md. Run it through bench/run.sh, which installs and builds what it needs.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
DATA = BENCH / "data"
PIPELINE = ROOT / "target" / "release" / "pipeline"
CACHE = DATA / "cache"
SIDES = ["pipeline", "plain", "dataloader", "lightning", "accelerated"]
LABELS = {
    "pipeline": "pipeline (Rust, libtorch)",
    "plain": "plain PyTorch (tensor indexing)",
    "dataloader": "plain PyTorch (DataLoader)",
    "lightning": "Lightning",
    "accelerated": "pytorch-accelerated",
}
WORKLOADS = {
    "mlp": "MLP 784-128-64-10, batch 32, Adam (overhead-bound)",
    "cnn": "CNN conv16-conv32-linear on 28×28×1, batch 256, Adam (compute-bound)",
    "lstm": "LSTM: embedding 1000×128, 2 layers of hidden 128, sequences of 64, batch 32, Adam",
    "transformer": "Transformer encoder: embedding 1000×128, learned positions, 2 layers (d 128, 4 heads, feed-forward 512), sequences of 64, batch 32, Adam",
}
SEQUENCE_WORKLOADS = {"lstm", "transformer"}


def make_data():
    """70,000 × 784 standard-normal samples, seen as 28×28 images. Each of the 10 classes
    owns a 7×7 block at a fixed random place; the label is the class whose block has the
    largest sum (plus noise). Both the MLP and the CNN can learn it, so the test accuracy
    shows that every side did the same work."""
    path = DATA / "synthetic.npz"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((70_000, 784), dtype=np.float32)
    blocks = np.zeros((10, 28, 28), dtype=np.float32)
    for k, (r, c) in enumerate(rng.integers(0, 22, size=(10, 2))):
        blocks[k, r : r + 7, c : c + 7] = 1.0 / 7.0
    noise = rng.standard_normal((70_000, 10)).astype(np.float32) * 0.3
    y = (x @ blocks.reshape(10, 784).T + noise).argmax(1).astype(np.int64)
    tmp = DATA / "synthetic.tmp.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, path)
    return path


def make_sequences():
    """8,000 sequences of 64 token ids (0 … 999, stored as floats as pipeline reads them):
    6,400 to train, 1,600 to test. The label is the most frequent last digit among the
    tokens (10 classes): learnable, so the test accuracy shows both sides did the work."""
    path = DATA / "sequences.npz"
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 1000, size=(8_000, 64))
    counts = np.stack([(tokens % 10 == k).sum(1) for k in range(10)], 1)
    y = (counts + rng.random(counts.shape) * 0.5).argmax(1).astype(np.int64)
    tmp = DATA / "sequences.tmp.npz"
    np.savez(tmp, x=tokens.astype(np.float32), y=y)
    os.replace(tmp, path)
    return path


def data_of(workload):
    return make_sequences() if workload in SEQUENCE_WORKLOADS else make_data()


def write_safetensors(tensors, path):
    header, body, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().numpy().astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        body.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(body))
    os.replace(tmp, path)


def make_init(workload):
    """The initial weights every side starts from."""
    path = DATA / f"{workload}-init.safetensors"
    if not path.exists():
        import torch

        sys.path.insert(0, str(BENCH))
        from reference import build

        torch.manual_seed(0)
        write_safetensors(build(workload).state_dict(), path)
    return path


def measured(cmd):
    """Runs `cmd`; returns (stdout, peak RSS in MiB, wall seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{stderr[-3000:]}")
    return stdout, usage.ru_maxrss / 1024.0, wall


def run_side(side, workload, epochs, threads, device, batch=None):
    """One training of `workload` by `side`, at the workload's batch size unless `batch`."""
    if side == "pipeline":
        manifest = BENCH / "manifests" / f"{workload}.kdl"
        # --force: train every time, with the defaults a user gets (the result stored in the
        # cache, a resumable snapshot every epoch).
        stdout, rss, wall = measured([
            PIPELINE, "run", manifest, "--json", "--force", "--cache-dir", CACHE,
            "--set", f"train.epochs={epochs}",
            "--set", f"accelerator.threads={threads}",
            "--set", f"accelerator.device={device}",
            *(["--set", f"train.batch-size={batch}"] if batch else []),
        ])
        report = json.loads(stdout)
        run_dir = manifest.parent / report["run_dir"]
        lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        shutil.rmtree(run_dir)
        seconds = [l["seconds"] for l in lines if l["stage"] == "train" and l["record"] == "epoch"]
        accuracy = next(s for s in report["stages"] if s["name"] == "test")["metrics"]["accuracy"]
    else:
        stdout, rss, wall = measured([
            sys.executable, BENCH / "reference.py", "--runner", side, "--workload", workload,
            "--data", data_of(workload), "--init", DATA / f"{workload}-init.safetensors",
            "--epochs", str(epochs), "--threads", str(threads), "--device", device,
            *(["--batch", str(batch)] if batch else []),
        ])
        result = json.loads(stdout.strip().splitlines()[-1])
        seconds, accuracy = result["epoch_seconds"], result["accuracy"]
    # The first epoch is a warm-up; report the mean of the others.
    return {"epoch": statistics.mean(seconds[1:]), "accuracy": accuracy, "rss_mib": rss, "wall": wall}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def bench_training(workloads, sides, reps, threads, device, epochs):
    results = {}
    for w in workloads:
        data_of(w)
        make_init(w)
        runs = {s: [] for s in sides}
        for rep in range(reps):
            order = sides[rep % len(sides):] + sides[: rep % len(sides)]
            for side in order:
                r = run_side(side, w, epochs[w], threads, device)
                runs[side].append(r)
                print(f"  {w} rep {rep + 1}/{reps} {side:12} {r['epoch']:.3f} s/epoch  acc {r['accuracy']:.4f}  rss {r['rss_mib']:.0f} MiB", file=sys.stderr)
        results[w] = {s: {"epoch": summary([r["epoch"] for r in runs[s]]), "rss_mib": summary([r["rss_mib"] for r in runs[s]]), "accuracy": summary([r["accuracy"] for r in runs[s]]), "runs": runs[s]} for s in sides}
    return results


def bench_startup(reps):
    examples = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.kdl"))
    times = {e: [] for e in examples}
    for _ in range(reps):
        for e in examples:
            start = time.perf_counter()
            subprocess.run([PIPELINE, "check", e], cwd=ROOT, check=True, capture_output=True)
            times[e].append((time.perf_counter() - start) * 1000)
    return {e: summary(t) for e, t in times.items()}


def wall_of(cmd, cwd):
    start = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_CACHE_DIR"}
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def bench_cache(reps):
    """The digits example run once, then again with every stage cached (wall time including
    process start); and hashing a 1 GiB data file without and with the hash memo."""
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "data").mkdir()
        shutil.copy(ROOT / "examples" / "data" / "digits.csv.gz", project / "data")
        shutil.copy(ROOT / "examples" / "digits.kdl", project)
        first = wall_of([PIPELINE, "run", "digits.kdl"], project)
        cached = [wall_of([PIPELINE, "run", "digits.kdl"], project) for _ in range(reps)]
        status = [wall_of([PIPELINE, "status", "digits.kdl"], project) for _ in range(reps)]

        big = project / "big.csv"
        with open(big, "wb") as f:
            block = np.random.default_rng(0).bytes(64 << 20)
            for _ in range(16):
                f.write(block)
        old = time.time() - 3600  # an old file, as data files are: the memo may keep it
        os.utime(big, (old, old))
        (project / "big.kdl").write_text('data { source "big.csv"; }\nmodel { linear 2; }\nloss "cross-entropy"\noptimizer "adam"\ntrain\n')
        size_gb = big.stat().st_size / 1e9
        unmemoised, memoised = [], []
        for _ in range(reps):
            (project / ".pipeline" / "cache" / "hashes.json").unlink(missing_ok=True)
            unmemoised.append(wall_of([PIPELINE, "status", "big.kdl"], project))
            memoised.append(wall_of([PIPELINE, "status", "big.kdl"], project))
    return {
        "digits_first_run_s": first,
        "digits_cached_run_s": summary(cached),
        "digits_status_s": summary(status),
        "hash_file_gb": size_gb,
        "hash_first_s": summary(unmemoised),
        "hash_memo_s": summary(memoised),
    }


def bench_bucket(reps):
    """A cached rerun of the digits example answered from a shared cache in an S3 bucket
    (moto's server on this machine, so the network is loopback: what is measured is
    pipeline's own cost) against the same rerun answered from the local cache, in turns.
    "From the bucket" is a machine that has never run it: an empty local cache, so every
    entry is fetched, checked and stored locally."""
    import boto3

    moto = Path(sys.executable).with_name("moto_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        creds = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench").create_bucket(Bucket="bench")
        url = "s3://bench/digits"
        with tempfile.TemporaryDirectory() as tmp:
            project = Path(tmp)
            (project / "data").mkdir()
            shutil.copy(ROOT / "examples" / "data" / "digits.csv.gz", project / "data")
            shutil.copy(ROOT / "examples" / "digits.kdl", project)

            def wall(args, local):
                env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
                env.update(creds, PIPELINE_CACHE_DIR=str(local))
                start = time.perf_counter()
                subprocess.run([PIPELINE, *args], cwd=project, check=True, capture_output=True, env=env)
                return time.perf_counter() - start

            first = wall(["run", "digits.kdl", "--cache-dir", url], project / "machine-a")
            plain, local, bucket = [], [], []
            for rep in range(reps):
                p = wall(["run", "digits.kdl"], project / "machine-a")
                a = wall(["run", "digits.kdl", "--cache-dir", url], project / "machine-a")
                b = wall(["run", "digits.kdl", "--cache-dir", url], project / f"machine-b-{rep}")
                plain.append(p)
                local.append((a, a / p))
                bucket.append((b, b / p))
        pair = lambda xs: {"s": summary([x for x, _ in xs]), "ratio": summary([r for _, r in xs])}
        return {"first_run_s": first, "plain_s": summary(plain), "local": pair(local), "bucket": pair(bucket)}
    finally:
        server.kill()
        server.wait()


def bench_scaling(reps, epochs):
    """The MLP workload on 1 process (2 threads) and on 2 processes under `ddp` (1 thread
    each, the same per-process batch): samples per second over both processes, and the
    time per optimizer step spent averaging gradients."""
    manifest = BENCH / "manifests" / "mlp.kdl"
    make_init("mlp")
    configs = {
        "1 process × 2 threads": ["--set", "accelerator.threads=2"],
        "2 processes × 1 thread (ddp)": ["--nproc-per-node", "2", "--set", "accelerator.threads=1", "--set", "accelerator.strategy=ddp"],
    }
    runs = {name: [] for name in configs}
    for rep in range(reps):
        for name, extra in (list(configs.items()) if rep % 2 == 0 else list(configs.items())[::-1]):
            stdout, _, _ = measured([
                PIPELINE, "run", manifest, "--json", "--force", "--cache-dir", CACHE, "--stage", "train",
                "--set", f"train.epochs={epochs}", *extra,
            ])
            report = json.loads(stdout)
            run_dir = manifest.parent / report["run_dir"]
            lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
            shutil.rmtree(run_dir)
            epochs_after_warmup = [l for l in lines if l["stage"] == "train" and l["record"] == "epoch"][1:]
            rate = statistics.mean(l["samples_per_second"] for l in epochs_after_warmup)
            comm = [l["comm_seconds"] / l["steps"] * 1000 for l in epochs_after_warmup if l.get("comm_seconds") is not None]
            runs[name].append({"samples_per_second": rate, "allreduce_ms_per_step": statistics.mean(comm) if comm else None})
            print(f"  scaling rep {rep + 1}/{reps} {name}: {rate:.0f} samples/s", file=sys.stderr)
    return {
        name: {
            "samples_per_second": summary([r["samples_per_second"] for r in rs]),
            "allreduce_ms_per_step": summary([r["allreduce_ms_per_step"] for r in rs]) if rs[0]["allreduce_ms_per_step"] is not None else None,
        }
        for name, rs in runs.items()
    }


def bench_logging(reps, epochs, threads):
    """The MLP workload (overhead-bound: ~1,900 optimizer steps per epoch) with step records
    off, every 50 steps (the default) and every step, in a rotating order: each record
    reads the device and writes a line of metrics.jsonl and TensorBoard's event file."""
    manifest = BENCH / "manifests" / "mlp.kdl"
    make_init("mlp")
    configs = {"off (log-every-steps 0)": 0, "default (log-every-steps 50)": 50, "every step (log-every-steps 1)": 1}
    runs = {name: [] for name in configs}
    names = list(configs)
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            stdout, _, _ = measured([
                PIPELINE, "run", manifest, "--json", "--force", "--cache-dir", CACHE, "--stage", "train",
                "--set", f"train.epochs={epochs}", "--set", f"accelerator.threads={threads}",
                "--set", f"logging.log-every-steps={configs[name]}",
            ])
            report = json.loads(stdout)
            run_dir = manifest.parent / report["run_dir"]
            lines = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
            shutil.rmtree(run_dir)
            seconds = [l["seconds"] for l in lines if l["stage"] == "train" and l["record"] == "epoch"][1:]
            steps = sum(1 for l in lines if l["record"] == "step")
            runs[name].append({"epoch": statistics.mean(seconds), "step_records": steps})
            print(f"  logging rep {rep + 1}/{reps} {name}: {statistics.mean(seconds):.3f} s/epoch, {steps} step records", file=sys.stderr)
    # Each repetition's ratio to the run without records in the same repetition: pairs
    # taken minutes apart on a shared machine drift less than medians taken apart.
    base = runs[names[0]]
    return {
        name: {
            "epoch": summary([r["epoch"] for r in rs]),
            "ratio": summary([r["epoch"] / b["epoch"] for r, b in zip(rs, base)]),
            "step_records": rs[0]["step_records"],
        }
        for name, rs in runs.items()
    }


def bench_sweep(reps):
    """An 8-point grid on the digits example (4 learning rates × 2 eval batch sizes, 5
    epochs), each time in a fresh copy of the project: `pipeline sweep --jobs 1`, `--jobs
    2`, and a shell loop of plain `pipeline run --set …`. Wall time, and how many training
    stages actually ran."""
    grid = [("optimizer.lr", ["0.001", "0.003", "0.01", "0.03"]), ("test.batch-size", ["100", "300"])]
    points = [[f"{grid[0][0]}={a}", f"{grid[1][0]}={b}"] for a in grid[0][1] for b in grid[1][1]]
    sweep_args = [x for key, values in grid for x in ("--grid", f"{key}={','.join(values)}")]
    configs = {
        "pipeline sweep --jobs 1": lambda: [[PIPELINE, "sweep", "digits.kdl", "--json", "--set", "train.epochs=5", *sweep_args, "--jobs", "1"]],
        "pipeline sweep --jobs 2": lambda: [[PIPELINE, "sweep", "digits.kdl", "--json", "--set", "train.epochs=5", *sweep_args, "--jobs", "2"]],
        "shell loop of pipeline run": lambda: [[PIPELINE, "run", "digits.kdl", "--json", "--set", "train.epochs=5", *[y for o in p for y in ("--set", o)]] for p in points],
    }
    runs = {name: [] for name in configs}
    names = list(configs)
    env = {k: v for k, v in os.environ.items() if k != "PIPELINE_CACHE_DIR"}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            with tempfile.TemporaryDirectory() as tmp:
                project = Path(tmp)
                (project / "data").mkdir()
                shutil.copy(ROOT / "examples" / "data" / "digits.csv.gz", project / "data")
                shutil.copy(ROOT / "examples" / "digits.kdl", project)
                start = time.perf_counter()
                trained = 0
                for cmd in configs[name]():
                    out = subprocess.run(cmd, cwd=project, check=True, capture_output=True, env=env).stdout
                    doc = json.loads(out)
                    reports = [p["stages"] for p in doc["points"]] if "points" in doc else [doc["stages"]]
                    trained += sum(1 for stages in reports for s in stages if s["kind"] == "train" and s["status"] == "ran")
                wall = time.perf_counter() - start
            runs[name].append({"wall": wall, "trained": trained})
            print(f"  sweep rep {rep + 1}/{reps} {name}: {wall:.1f} s, {trained} trainings", file=sys.stderr)
    return {name: {"wall": summary([r["wall"] for r in rs]), "trained": rs[0]["trained"]} for name, rs in runs.items()}


def table(results, startup, device, cache=None, scaling=None, logging=None, sweep=None, bucket=None):
    out = []
    for w, sides in results.items():
        base = sides.get("plain")
        out.append(f"\n**{WORKLOADS[w]}**, {device}\n")
        out.append("| side | s/epoch (median) | min–max | × plain PyTorch | test accuracy | peak RSS (MiB) | RSS × plain |")
        out.append("|---|---|---|---|---|---|---|")
        for s, r in sides.items():
            ratio = r["epoch"]["median"] / base["epoch"]["median"] if base else float("nan")
            rss_ratio = r["rss_mib"]["median"] / base["rss_mib"]["median"] if base else float("nan")
            out.append(
                f"| {LABELS[s]} | {r['epoch']['median']:.3f} | {r['epoch']['min']:.3f}–{r['epoch']['max']:.3f} | {ratio:.2f} | "
                f"{r['accuracy']['median']:.4f} | {r['rss_mib']['median']:.0f} | {rss_ratio:.2f} |"
            )
        if "pipeline" in sides and "lightning" in sides:
            out.append(f"\npipeline ÷ Lightning: {sides['pipeline']['epoch']['median'] / sides['lightning']['epoch']['median']:.2f}")
    if startup:
        out.append("\n**Start-up: `pipeline check` per manifest, including process start**\n")
        out.append("| manifest | ms (median) | min–max |")
        out.append("|---|---|---|")
        for e, t in startup.items():
            out.append(f"| {e} | {t['median']:.0f} | {t['min']:.0f}–{t['max']:.0f} |")
    if cache:
        c = cache
        first, again = c["digits_first_run_s"], c["digits_cached_run_s"]["median"]
        out.append("\n**The stage cache** (wall time including process start)\n")
        out.append("| what | seconds (median) | min–max | figure |")
        out.append("|---|---|---|---|")
        out.append(f"| examples/digits.kdl, first run | {first:.3f} | | |")
        out.append(f"| the same, every stage cached | {again:.3f} | {c['digits_cached_run_s']['min']:.3f}–{c['digits_cached_run_s']['max']:.3f} | {100 * again / first:.1f} % of the first run |")
        out.append(f"| `pipeline status` on it | {c['digits_status_s']['median']:.3f} | {c['digits_status_s']['min']:.3f}–{c['digits_status_s']['max']:.3f} | |")
        h, m = c["hash_first_s"], c["hash_memo_s"]
        out.append(f"| `pipeline status` hashing a {c['hash_file_gb']:.2f} GB data file | {h['median']:.3f} | {h['min']:.3f}–{h['max']:.3f} | {c['hash_file_gb'] / h['median']:.2f} GB/s |")
        out.append(f"| the same, unchanged file (hash memo) | {m['median']:.3f} | {m['min']:.3f}–{m['max']:.3f} | |")
    if bucket:
        b = bucket
        out.append("\n**A shared cache in an S3 bucket** (examples/digits.kdl, every stage cached; moto on loopback; wall time including process start)\n")
        out.append("| answered from | seconds (median) | min–max | × the local cache alone, paired by repetition (median) | min–max |")
        out.append("|---|---|---|---|---|")
        p = b["plain_s"]
        out.append(f"| the local cache alone (no bucket) | {p['median']:.3f} | {p['min']:.3f}–{p['max']:.3f} | 1.00 | |")
        for name, key in [("the local cache, bucket configured (one request checks it)", "local"), ("the bucket: a machine that never ran it (3 entries fetched and checked)", "bucket")]:
            s, r = b[key]["s"], b[key]["ratio"]
            out.append(f"| {name} | {s['median']:.3f} | {s['min']:.3f}–{s['max']:.3f} | {r['median']:.2f} | {r['min']:.2f}–{r['max']:.2f} |")
        out.append(f"| (the first run, which trained and published) | {b['first_run_s']:.3f} | | | |")
    if scaling:
        names = list(scaling)
        base = scaling[names[0]]["samples_per_second"]["median"]
        out.append("\n**Data parallel on the CPU** (MLP workload, batch 32 per process, the same two cores)\n")
        out.append("| run | samples/s (median) | min–max | × one process | all-reduce ms per step |")
        out.append("|---|---|---|---|---|")
        for name in names:
            r = scaling[name]
            comm = r["allreduce_ms_per_step"]
            comm_text = f"{comm['median']:.3f}" if comm else "-"
            out.append(f"| {name} | {r['samples_per_second']['median']:.0f} | {r['samples_per_second']['min']:.0f}–{r['samples_per_second']['max']:.0f} | {r['samples_per_second']['median'] / base:.2f} | {comm_text} |")
    if logging:
        names = list(logging)
        base = logging[names[0]]["epoch"]["median"]
        out.append("\n**Step records** (MLP workload; epoch time after the first epoch)\n")
        out.append("| step records | s/epoch (median) | min–max | × off, paired by repetition (median) | min–max | records written |")
        out.append("|---|---|---|---|---|---|")
        for name in names:
            e, r = logging[name]["epoch"], logging[name]["ratio"]
            out.append(f"| {name} | {e['median']:.3f} | {e['min']:.3f}–{e['max']:.3f} | {r['median']:.3f} | {r['min']:.3f}–{r['max']:.3f} | {logging[name]['step_records']} |")
    if sweep:
        names = list(sweep)
        base = sweep[names[-1]]["wall"]["median"]
        out.append("\n**An 8-point sweep** (digits example, 4 learning rates × 2 eval batch sizes, 5 epochs; wall time in a fresh project)\n")
        out.append("| how | seconds (median) | min–max | × shell loop | training stages run |")
        out.append("|---|---|---|---|---|")
        for name in names:
            w = sweep[name]["wall"]
            out.append(f"| {name} | {w['median']:.1f} | {w['min']:.1f}–{w['max']:.1f} | {w['median'] / base:.2f} | {sweep[name]['trained']} |")
    return "\n".join(out) + "\n"


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    import torch

    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}, torch {torch.__version__}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--workloads", default="mlp,cnn,lstm,transformer,startup,cache,bucket,scaling,logging,sweep")
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--quick", action="store_true", help="one repetition, one measured epoch: a smoke test")
    p.add_argument("--write-docs", action="store_true", help="put the table into docs/benchmarks.md")
    args = p.parse_args()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("--device cuda: no CUDA device here; nothing to run", file=sys.stderr)
            return
    reps = 1 if args.quick else args.reps
    epochs = {"mlp": 2, "cnn": 2, "lstm": 2, "transformer": 2} if args.quick else {"mlp": 4, "cnn": 3, "lstm": 3, "transformer": 3}
    workloads = args.workloads.split(",")
    make_data()
    training = [w for w in workloads if w in WORKLOADS]
    results = bench_training(training, args.sides.split(","), reps, args.threads, args.device, epochs)
    startup = bench_startup(3 if args.quick else 10) if "startup" in workloads else {}
    cache = bench_cache(3 if args.quick else 10) if "cache" in workloads else None
    scaling = bench_scaling(1 if args.quick else 3, 2 if args.quick else 3) if "scaling" in workloads and args.device == "cpu" else None
    logging = bench_logging(1 if args.quick else 9, 2 if args.quick else 3, args.threads) if "logging" in workloads and args.device == "cpu" else None
    sweep = bench_sweep(1 if args.quick else 3) if "sweep" in workloads and args.device == "cpu" else None
    bucket = bench_bucket(3 if args.quick else 10) if "bucket" in workloads else None
    text = table(results, startup, args.device, cache, scaling, logging, sweep, bucket)
    print(text)
    command = "bench/run.sh " + " ".join(sys.argv[1:])
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "machine": machine(), "command": command.strip(), "threads": args.threads, "reps": reps, "epochs": epochs, "training": results, "startup": startup, "cache": cache, "scaling": scaling, "logging": logging, "sweep": sweep, "bucket": bucket}
    (BENCH / "results").mkdir(exist_ok=True)
    (BENCH / "results" / "latest.json").write_text(json.dumps(record, indent=2))
    if args.write_docs:
        docs = ROOT / "docs" / "benchmarks.md"
        body = docs.read_text()
        begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
        block = f"{begin}\nMeasured {record['date']} on {record['machine']}, {args.threads} threads, {reps} repetitions, with:\n\n    {record['command']}\n{text}{end}"
        head, rest = body.split(begin, 1)
        docs.write_text(head + block + rest.split(end, 1)[1])


if __name__ == "__main__":
    main()
