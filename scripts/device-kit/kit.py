"""The GPU machine's run, started by run.sh: the GPU checks the ignored tests stand for, as
command-line checks; the examples on the device in each precision; and the benchmarks side
by side with this machine's own PyTorch (same models, initial weights and batches, runs
interleaved). Everything lands in OUT: figures.json (what docs/benchmarks.md is filled
from, by scripts/device-figures.py) and the log run.sh keeps.

A failed check is recorded and the run goes on; past the time budget what is left is
recorded as skipped. `--cpu` runs what the CPU can (scripts/device-kit.sh --check): the
kit's binaries, its NCCL library, a Gloo group, the precisions the CPU has, an example and
a short benchmark, so the GPU machine's minutes are never spent on a kit that does not
start.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

KIT = Path(__file__).resolve().parent
BIN = KIT / "bin"
PIPELINE = BIN / "pipeline"
EXAMPLES = KIT / "examples"

LOG = []


def say(line):
    print(line, flush=True)
    LOG.append(line)


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def pipeline(args, cwd, timeout=300, env=None):
    """`pipeline ARGS` in `cwd`: (exit code, stdout, stderr, seconds)."""
    start = time.perf_counter()
    try:
        done = subprocess.run([str(PIPELINE), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = 124, e.stdout or "", f"timed out after {timeout} s"
        out = out.decode() if isinstance(out, bytes) else out
    return code, out, err, time.perf_counter() - start


def last_lines(text, n=6):
    return "\n".join(text.strip().splitlines()[-n:])


def project(tmp, manifest_text, name="m.kdl"):
    """A project directory holding `manifest_text` and the examples' data (a link)."""
    tmp = Path(tmp)
    data = tmp / "data"
    if not data.exists():
        data.symlink_to(EXAMPLES / "data")
    (tmp / name).write_text(manifest_text)
    return tmp


def report_of(out):
    return json.loads(out) if out.strip().startswith("{") else None


def stage(report, kind=None, name=None):
    return next(s for s in report["stages"] if (kind is None or s["kind"] == kind) and (name is None or s["name"] == name))


def accuracy(report):
    for s in report["stages"]:
        if s["kind"] == "eval" and "accuracy" in s.get("metrics", {}):
            return s["metrics"]["accuracy"]
    return None


def safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    raw = Path(path).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    body = raw[8 + size :]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}


DIGITS = """pipeline "kit"
seed 42
data {{
    source "data/digits.csv.gz"
    label "last"
    scale "standard"
    split train=0.7 val=0.1 test=0.2
}}
model {{
{model}
}}
loss "cross-entropy"
optimizer "adam" lr=3e-3
accelerator {{
{accelerator}
}}
train {{
    epochs {epochs}
    batch-size 64
}}
logging {{
{logging}
}}
eval "test" needs="train" split="test"
checkpoint "export" needs="train" path="out/model.safetensors"
"""
MLP = "    linear 64\n    relu\n    linear 10"
BN_MLP = "    linear 64\n    batch-norm\n    relu\n    linear 10"


def digits(accelerator, epochs=5, model=MLP, logging=""):
    return DIGITS.format(accelerator=accelerator, epochs=epochs, model=model, logging=logging)


# --- the checks ------------------------------------------------------------------------


def check_nccl_library(ctx):
    """libpipeline_nccl.so loads with this machine's libtorch_cuda (no GPU needed)."""
    import torch

    lib = Path(torch.__file__).parent / "lib"
    ctypes.CDLL(str(lib / "libtorch_cuda.so"), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(str(BIN / "libpipeline_nccl.so"))
    return "loaded beside libtorch_cuda of " + str(lib)


def check_group(ctx):
    """A group of one process through the worker: NCCL on the GPU, Gloo on the CPU."""
    backend = "gloo" if ctx.cpu else "nccl"
    done = subprocess.run([str(BIN / "pipeline-worker"), "--self-test-group", backend], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(last_lines(done.stderr))
    return done.stdout.strip()


def run_ok(ctx, tmp, text, extra=()):
    d = project(tmp, text)
    code, out, err, seconds = pipeline(["run", "m.kdl", "--json", "--no-cache", *extra], d)
    report = report_of(out)
    if code != 0 or report is None:
        raise AssertionError(f"exit {code}: {last_lines(err)}")
    return d, report, seconds


def check_16_mixed(ctx):
    """16-mixed with the loss scaler: steps skipped on overflow counted, the scale in the
    step records, the exported weights float32."""
    with tempfile.TemporaryDirectory() as tmp:
        text = digits(f'    device "{ctx.device}"\n    precision "16-mixed"\n    max-norm 1.0', logging="    log-every-steps 5")
        d, report, seconds = run_ok(ctx, tmp, text)
        m = stage(report, kind="train")["metrics"]
        assert m["skipped_steps"] < m["steps"], m
        run_dir = d / report["run_dir"]
        steps = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
        scales = [r["loss_scale"] for r in steps if r.get("record") == "step"]
        assert scales and all(1.0 <= s <= 65536.0 for s in scales), scales[:10]
        dtypes = {t[0] for t in safetensors(d / "out/model.safetensors").values()}
        assert dtypes == {"F32"}, dtypes
        return f"accuracy {accuracy(report):.4f}, {m['skipped_steps']:.0f} of {m['steps']:.0f} steps skipped, scales {min(scales):g}–{max(scales):g}, {seconds:.1f} s"


def check_precision(precision):
    def check(ctx):
        with tempfile.TemporaryDirectory() as tmp:
            text = digits(f'    device "{ctx.device}"\n    precision "{precision}"')
            _, report, seconds = run_ok(ctx, tmp, text)
            acc = accuracy(report)
            assert acc is not None and acc > 0.85, acc
            return f"accuracy {acc:.4f}, {seconds:.1f} s"

    check.__doc__ = f"{precision} on the device: trains digits to more than 85 %."
    return check


def check_sync_batch_norm(ctx):
    """Sync batch-norm across two processes sharing the device (Gloo carries the
    statistics: one GPU allows no NCCL group of two)."""
    with tempfile.TemporaryDirectory() as tmp:
        device = ctx.device
        text = digits(f'    device "{device}"\n    strategy "ddp"\n    backend "gloo"\n    sync-batch-norm #true', model=BN_MLP)
        _, report, seconds = run_ok(ctx, tmp, text, ["--nproc-per-node", "2"])
        acc = accuracy(report)
        assert acc is not None and acc > 0.85, acc
        return f"2 processes on {device}: accuracy {acc:.4f}, {seconds:.1f} s"


def check_torchscript(ctx):
    """The scripted model (examples/torchscript.kdl) on the device."""
    with tempfile.TemporaryDirectory() as tmp:
        text = (EXAMPLES / "torchscript.kdl").read_text()
        _, report, seconds = run_ok(ctx, tmp, text, ["--set", f"accelerator.device={ctx.device}"])
        acc = accuracy(report)
        assert acc is not None and acc > 0.85, acc
        return f"accuracy {acc:.4f}, {seconds:.1f} s"


def check_resume(ctx):
    """A training killed (-9) after a snapshot written on the device resumes, and ends with
    the same weights, bit for bit, as one never interrupted."""
    accelerator = f'    device "{ctx.device}"\n    deterministic #true'
    epochs = 200  # long enough that the kill lands mid-run however fast the device is
    text = digits(accelerator, epochs=epochs)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        _, whole, _ = run_ok(ctx, a, text)
        d = project(b, text)
        snapshots = d / ".pipeline" / "cache" / "snapshots"
        proc = subprocess.Popen([str(PIPELINE), "run", "m.kdl", "--json"], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if snapshots.is_dir() and any(snapshots.rglob("*")):
                time.sleep(0.1)
                break
            time.sleep(0.02)
        if proc.poll() is not None:
            raise AssertionError("the training ended before a snapshot was written: lengthen it")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code, out, err, _ = pipeline(["run", "m.kdl", "--json"], d)
        report = report_of(out)
        if code != 0 or report is None:
            raise AssertionError(f"the resumed run: exit {code}: {last_lines(err)}")
        epoch = stage(report, kind="train").get("resumed_at_epoch")
        assert epoch is not None, "the second run did not resume"
        first, second = safetensors(Path(a) / "out/model.safetensors"), safetensors(d / "out/model.safetensors")
        differ = [k for k in first if first[k] != second.get(k)]
        assert not differ and first.keys() == second.keys(), f"weights differ: {differ}"
        return f"resumed at epoch {epoch} of {epochs}; {len(first)} tensors equal bit for bit"


CHECKS = [
    ("nccl library", check_nccl_library, False),
    ("process group", check_group, False),
    ("16-mixed", check_16_mixed, True),
    ("bf16-mixed", check_precision("bf16-mixed"), False),
    ("bf16-true", check_precision("bf16-true"), False),
    ("sync batch-norm", check_sync_batch_norm, False),
    ("torchscript", check_torchscript, False),
    ("resume after kill -9", check_resume, False),
]


def checks(ctx, budget):
    results = []
    for name, check, gpu_only in CHECKS:
        if gpu_only and ctx.cpu:
            results.append({"name": name, "ok": None, "detail": "needs the GPU"})
            continue
        if budget.left() < 30:
            results.append({"name": name, "ok": None, "detail": "out of time"})
            continue
        start = time.perf_counter()
        try:
            detail, ok = check(ctx), True
        except Exception as e:  # every failure is a figure: the run goes on
            detail, ok = f"{type(e).__name__}: {e}", False
        seconds = time.perf_counter() - start
        say(f"check {name}: {'ok' if ok else 'FAILED'} ({seconds:.1f} s): {detail}")
        results.append({"name": name, "ok": ok, "detail": detail, "seconds": round(seconds, 2)})
    return results


# --- the examples ----------------------------------------------------------------------


def examples(ctx, budget):
    names = ["digits"] if ctx.cpu else ["digits", "torchscript", "digits-images", "text-classification"]
    precisions = ["32"] if ctx.cpu else ["32", "16-mixed", "bf16-mixed"]
    results = []
    for name in names:
        for precision in precisions:
            if budget.left() < 20:
                results.append({"example": name, "precision": precision, "ok": None, "detail": "out of time"})
                continue
            with tempfile.TemporaryDirectory() as tmp:
                d = project(tmp, (EXAMPLES / f"{name}.kdl").read_text(), f"{name}.kdl")
                code, out, err, seconds = pipeline(["run", f"{name}.kdl", "--json", "--no-cache", "--set", f"accelerator.device={ctx.device}", "--set", f"accelerator.precision={precision}"], d)
                report = report_of(out)
                ok = code == 0 and report is not None
                acc = accuracy(report) if ok else None
                detail = f"accuracy {acc:.4f}" if acc is not None else ("ok" if ok else last_lines(err, 3))
                say(f"example {name} {precision}: {'ok' if ok else 'FAILED'}, {detail}, {seconds:.1f} s")
                results.append({"example": name, "precision": precision, "ok": ok, "accuracy": acc, "seconds": round(seconds, 2), "detail": detail})
    return results


# --- the benchmarks --------------------------------------------------------------------


class DeviceMemory:
    """The device's used memory (nvidia-smi, MiB) sampled every 0.1 s while a side runs,
    less what was used before it started: the peak a side's process added."""

    def __init__(self, enabled):
        self.enabled = enabled and shutil.which("nvidia-smi") is not None

    def used(self):
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True)
        return float(out.stdout.strip().splitlines()[0])

    def __enter__(self):
        self.peak = None
        if self.enabled:
            self.base = self.used()
            self.peak = 0.0
            self.stop = threading.Event()

            def sample():
                while not self.stop.is_set():
                    self.peak = max(self.peak, self.used() - self.base)
                    self.stop.wait(0.1)

            self.thread = threading.Thread(target=sample, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *_):
        if self.enabled:
            self.stop.set()
            self.thread.join()


def bench(ctx, budget):
    sys.path.insert(0, str(KIT / "bench"))
    import harness

    harness.PIPELINE = PIPELINE
    if ctx.cpu:
        # Enough to show the benchmark runs: the smallest workload, once.
        plan = [("transformer", None, 2)]
        reps = 1
    else:
        # The usual batches (per-step overhead), then large ones (the kernels dominate).
        plan = [("mlp", None, 3), ("cnn", None, 3), ("transformer", None, 3), ("cnn", 4096, 4), ("transformer", 512, 4)]
        reps = 2
    sides = ["pipeline", "plain"]
    results = []
    for workload, batch, epochs in plan:
        harness.data_of(workload)
        harness.make_init(workload)
        runs = {s: [] for s in sides}
        for rep in range(reps):
            for side in sides[rep % 2 :] + sides[: rep % 2]:
                if budget.left() < 30:
                    break
                with DeviceMemory(not ctx.cpu) as memory:
                    r = harness.run_side(side, workload, epochs, ctx.threads, ctx.device, batch)
                r["device_mib"] = memory.peak
                runs[side].append(r)
                mem = f", device +{memory.peak:.0f} MiB" if memory.peak is not None else ""
                say(f"bench {workload} batch {batch or 'default'} rep {rep + 1} {side}: {r['epoch']:.3f} s/epoch, accuracy {r['accuracy']:.4f}{mem}")
        if not all(runs[s] for s in sides):
            results.append({"workload": workload, "batch": batch, "ok": None, "detail": "out of time"})
            continue
        median = {s: statistics.median(r["epoch"] for r in runs[s]) for s in sides}
        peak = {s: max((r["device_mib"] or 0.0) for r in runs[s]) if not ctx.cpu else None for s in sides}
        ratios = [p["epoch"] / q["epoch"] for p, q in zip(runs["pipeline"], runs["plain"])]
        results.append({
            "workload": workload,
            "description": harness.WORKLOADS[workload],
            "batch": batch,
            "epochs": epochs,
            "seconds_per_epoch": median,
            "ratio_per_rep": ratios,
            "ratio": statistics.median(ratios),
            "device_mib": peak,
            "accuracy": {s: statistics.median(r["accuracy"] for r in runs[s]) for s in sides},
        })
    return results


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--budget", type=float, default=420.0, help="seconds for everything after the first checks")
    p.add_argument("--threads", type=int, help="CPU threads of each side (default: the cores, at most 8)")
    args = p.parse_args()
    args.threads = args.threads or min(8, os.cpu_count() or 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget)
    args.device = "cpu" if args.cpu else "cuda"
    import torch

    kit = json.loads((KIT / "kit.json").read_text())
    figures = {
        "kit": kit,
        "machine": {
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "device": args.device,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    start = time.perf_counter()
    figures["checks"] = checks(args, budget)
    figures["bench"] = bench(args, budget)
    figures["examples"] = examples(args, budget)
    figures["seconds"] = round(time.perf_counter() - start, 1)
    failed = [c["name"] for c in figures["checks"] if c["ok"] is False] + [f"{e['example']} {e['precision']}" for e in figures["examples"] if e["ok"] is False]
    figures["failed"] = failed
    tmp = out / "figures.json.tmp"
    tmp.write_text(json.dumps(figures, indent=2))
    tmp.replace(out / "figures.json")
    say(f"kit: {'every check passed' if not failed else 'FAILED: ' + ', '.join(failed)} in {figures['seconds']:.0f} s; figures in {out / 'figures.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
