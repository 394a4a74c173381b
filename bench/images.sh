#!/usr/bin/env bash
# The image-folder benchmark, side by side in one run (docs/benchmarks.md, "Images"):
#
#  (a) pipeline: `pipeline run bench/manifests/images.kdl --no-cache --set train.epochs=N`
#      on examples/data/digits-png (1,797 8×8 grey PNGs, ImageFolder layout), 1 thread;
#  (b) torchvision: `python bench/images.py --epochs N --threads 1 --workers 2`, the same
#      tree and CNN through ImageFolder + DataLoader(num_workers=2);
#
# alternating which side goes first from one repetition to the next, after one unreported
# warm-up run of each (page cache, libtorch's first load). Per side: images/s of each
# epoch (pipeline's from the run's metrics.jsonl, torchvision's from its JSON), the
# steady rate (median of epochs 2..N), the first epoch, and the whole process's wall time.
#
#  (c) hashing: a tree of 10,000 PNGs under /tmp (the digits PNGs copied into 10 class
#      directories of 1,000, distinct names), `pipeline status` on a manifest reading it,
#      with an empty cache (cold: every image hashed into <cache>/hashes.json) and again
#      with the memo (every image answered by size, mtime, ctime and inode).
#
# Usage: bench/images.sh [--epochs N] [--reps R] [--hash-reps K] [--json FILE]
#   --epochs N     epochs per training run (default 6; at least 2 for a steady rate)
#   --reps R       repetitions of (a) and (b) (default 3)
#   --hash-reps K  timed passes of each kind in (c) (default 7; 0 skips it)
#   --json FILE    also write every measurement as one JSON object to FILE
#
# The binaries must be built first (cargo build --release --bins); this script does not
# build. Wall times are taken with bash's $EPOCHREALTIME around each process.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

epochs=6
reps=3
hash_reps=7
json_out=""
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) epochs=${2:?--epochs needs a number}; shift 2 ;;
    --reps) reps=${2:?--reps needs a number}; shift 2 ;;
    --hash-reps) hash_reps=${2:?--hash-reps needs a number}; shift 2 ;;
    --json) json_out=${2:?--json needs a file}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench/images.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for n in "$epochs" "$reps" "$hash_reps"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "bench/images.sh: $n is not a number" >&2; exit 2; }
done
[ "$epochs" -ge 1 ] && [ "$reps" -ge 1 ] || { echo "bench/images.sh: --epochs and --reps must be at least 1" >&2; exit 2; }

say() { printf 'bench/images: %s\n' "$*" >&2; }
eval "$(scripts/setup.sh --env)"
python="$PIPELINE_VENV/bin/python"
pipeline="$root/target/release/pipeline"
for bin in pipeline pipeline-worker; do
  if [ ! -x "$root/target/release/$bin" ]; then
    say "target/release/$bin is missing: build it first with cargo build --release --bins"
    exit 1
  fi
done
"$python" -c 'import torchvision' 2>/dev/null || { say "torchvision is missing from $PIPELINE_VENV (scripts/setup.sh installs it)"; exit 1; }
manifest=bench/manifests/images.kdl

work=$(mktemp -d /tmp/bench-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
# A copy of the two binaries (`pipeline` starts the `pipeline-worker` beside it), so that a
# cargo build running meanwhile cannot swap them in the middle of the benchmark.
mkdir "$work/bin"
cp "$root/target/release/pipeline" "$root/target/release/pipeline-worker" "$work/bin/"
pipeline="$work/bin/pipeline"
"$pipeline" --version >/dev/null || { say "target/release/pipeline does not start"; exit 1; }
say "binaries of $(date -u -r "$root/target/release/pipeline-worker" +%Y-%m-%dT%H:%M:%SZ) ($("$pipeline" --version))"
results="$work/results.jsonl"
check() { "$pipeline" check "$1" >"$work/check.out" 2>&1 || { cat "$work/check.out" >&2; exit 1; }; }
check "$manifest"
: >"$results"

now_us() { echo "${EPOCHREALTIME/./}"; }

# Prefixes each line read with the moment it was read (µs).
stamp() { while IFS= read -r line; do printf '%s %s\n' "${EPOCHREALTIME/./}" "$line"; done; }

# (a) One pipeline run of $1 epochs; appends a JSON line to $results unless $2 is "warmup".
run_pipeline() {
  local n=$1 tag=$2 start end
  start=$(now_us)
  # Not --json, which silences the progress lines: every line goes through the stamper,
  # and the run directory is read from the "… · run directory DIR" line.
  "$pipeline" run "$manifest" --no-cache --set "train.epochs=$n" 2>&1 | stamp >"$work/pipeline.out"
  end=$(now_us)
  "$python" - "$work/pipeline.out" "$start" "$end" "$tag" >>"$results" <<'PY'
import json, os, shutil, sys
err, start, end, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lines = [l.rstrip("\n").partition(" ")[::2] for l in open(err)]
run_dir = next((text.split("run directory ", 1)[1].strip() for _, text in lines
                if "run directory " in text), None)
if run_dir is None:
    sys.exit("bench/images: no run directory in pipeline's output:\n" + "\n".join(t for _, t in lines))
epochs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if l.strip()]
epochs = [e for e in epochs if e.get("stage") == "train" and e.get("record") == "epoch"]
# When the data and the model were ready: the worker's "N samples (…) · model …" line.
ready = None
for t, text in lines:
    if " samples (" in text and "model" in text:
        ready = (int(t) - start) / 1e6
        break
# Only this benchmark's own run directory is removed (bench/manifests/.pipeline/runs/…).
if os.path.realpath(run_dir).startswith(os.path.realpath("bench/manifests/.pipeline/runs") + os.sep):
    shutil.rmtree(run_dir, ignore_errors=True)
print(json.dumps({
    "side": "pipeline", "tag": tag, "wall": (end - start) / 1e6, "ready": ready,
    "epochs": [{"seconds": e["seconds"], "images_per_s": e["samples_per_second"],
                "loss": e.get("loss"), "accuracy": e.get("accuracy")} for e in epochs],
}))
PY
}

# (b) One torchvision run.
run_torchvision() {
  local n=$1 tag=$2 start end
  start=$(now_us)
  "$python" bench/images.py --epochs "$n" --threads 1 --workers 2 >"$work/tv.json"
  end=$(now_us)
  "$python" - "$work/tv.json" "$start" "$end" "$tag" >>"$results" <<'PY'
import json, sys
out, start, end, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = json.load(open(out))
print(json.dumps({"side": "torchvision", "tag": tag, "wall": (end - start) / 1e6,
                  "ready": None, "epochs": r["epochs"]}))
PY
}

say "warm-up: one 1-epoch run of each side (not reported)"
run_pipeline 1 warmup
run_torchvision 1 warmup
for ((rep = 1; rep <= reps; rep++)); do
  if ((rep % 2)); then order="pipeline torchvision"; else order="torchvision pipeline"; fi
  for side in $order; do
    say "rep $rep/$reps: $side, $epochs epochs"
    "run_$side" "$epochs" "$rep"
  done
done

# (c) Hashing a tree of 10,000 images.
hash_results="$work/hash.jsonl"
: >"$hash_results"
if [ "$hash_reps" -gt 0 ]; then
  hb="$work/hash"
  say "hashing: writing a tree of 10,000 PNGs under $hb/tree"
  "$python" - "$root/examples/data/digits-png" "$hb" <<'PY'
import os, shutil, sys
from pathlib import Path
src = sorted(Path(sys.argv[1]).glob("*/*.png"))
out = Path(sys.argv[2])
for c in range(10):
    for tree, count in (("tree", 1000), ("tree-small", 1)):
        d = out / tree / str(c)
        d.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            k = c * count + i
            shutil.copyfile(src[k % len(src)], d / f"{k:05d}.png")
for tree in ("tree", "tree-small"):
    (out / f"{tree}.kdl").write_text(f"""pipeline "hash-bench"
data {{
    source "{tree}"
    images channels=1 {{
        normalize mean=0.5 std=0.5
    }}
}}
model {{
    flatten
    linear 10
}}
loss "cross-entropy"
optimizer "adamw"
accelerator {{
    device "cpu"
}}
train {{
    epochs 1
}}
""")
PY
  check "$hb/tree.kdl"
  # The memo skips files changed within the last 2 s (racily clean): let the tree age.
  sleep 3
  time_status() { # $1 manifest, $2 cache, $3 kind; appends the pass's wall seconds
    local start end
    start=$(now_us)
    "$pipeline" status "$1" --cache-dir "$2" >/dev/null
    end=$(now_us)
    echo "{\"kind\": \"$3\", \"wall\": $(((end - start)))e-6}" >>"$hash_results"
  }
  say "hashing: $hash_reps cold passes (memo deleted before each), then $hash_reps memoised"
  for ((i = 1; i <= hash_reps; i++)); do
    rm -rf "$hb/cache"
    time_status "$hb/tree.kdl" "$hb/cache" cold
  done
  entries=$("$python" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$hb/cache/hashes.json")
  echo "{\"kind\": \"memo_entries\", \"count\": $entries}" >>"$hash_results"
  for ((i = 1; i <= hash_reps; i++)); do
    time_status "$hb/tree.kdl" "$hb/cache" memoised
  done
  # The fixed cost: the same command on a tree of 10 images, memoised.
  "$pipeline" status "$hb/tree-small.kdl" --cache-dir "$hb/cache-small" >/dev/null
  for ((i = 1; i <= hash_reps; i++)); do
    time_status "$hb/tree-small.kdl" "$hb/cache-small" small
  done
fi

"$python" - "$results" "$hash_results" "$epochs" "$json_out" <<'PY'
import json, statistics, sys
results_file, hash_file, epochs, json_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
runs = [json.loads(l) for l in open(results_file) if l.strip()]
runs = [r for r in runs if r["tag"] != "warmup"]
hashing = [json.loads(l) for l in open(hash_file) if l.strip()]
med = statistics.median

def figures(r):
    e = r["epochs"]
    train = sum(x["seconds"] for x in e)
    return {
        "steady": med([x["images_per_s"] for x in e[1:]]) if len(e) > 1 else None,
        "first": e[0]["images_per_s"],
        "first_s": e[0]["seconds"],
        "train_s": train,
        "outside_s": r["wall"] - train,
        "ready_s": r["ready"],
        "wall": r["wall"],
        "accuracy": e[-1].get("accuracy"),
    }

reps = sorted({r["tag"] for r in runs}, key=int)
rows = []
for rep in reps:
    p = figures(next(r for r in runs if r["tag"] == rep and r["side"] == "pipeline"))
    t = figures(next(r for r in runs if r["tag"] == rep and r["side"] == "torchvision"))
    rows.append({"rep": int(rep), "pipeline": p, "torchvision": t,
                 "steady_ratio": p["steady"] / t["steady"] if p["steady"] else None,
                 "first_ratio": p["first"] / t["first"],
                 "wall_ratio": t["wall"] / p["wall"]})

def f(x, fmt):
    return "-" if x is None else format(x, fmt)

print(f"\nImage-folder training: {epochs} epochs of 1,797 8×8 PNGs, batch 64, 1 thread per side; "
      "images/s per epoch; steady = median of epochs 2..N")
print("\n| rep | pipeline steady img/s | torchvision steady img/s | × | pipeline epoch 1 img/s | "
      "torchvision epoch 1 img/s | × | pipeline wall s | torchvision wall s | torchvision ÷ pipeline |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    p, t = r["pipeline"], r["torchvision"]
    print(f"| {r['rep']} | {f(p['steady'], '.0f')} | {f(t['steady'], '.0f')} | {f(r['steady_ratio'], '.2f')} | "
          f"{p['first']:.0f} | {t['first']:.0f} | {r['first_ratio']:.2f} | {p['wall']:.2f} | {t['wall']:.2f} | "
          f"{r['wall_ratio']:.2f} |")

def m(side, key):
    xs = [r[side][key] for r in rows if r[side][key] is not None]
    return med(xs) if xs else None

def mr(key):
    xs = [r[key] for r in rows if r[key] is not None]
    return med(xs) if xs else None

def rng(side, key, fmt):
    xs = [r[side][key] for r in rows if r[side][key] is not None]
    return f"{min(xs):{fmt}}–{max(xs):{fmt}}" if xs else ""

print(f"\nMedian over {len(rows)} repetitions:\n")
print("| figure | pipeline | torchvision | pipeline ÷ torchvision |")
print("|---|---|---|---|")
print(f"| steady images/s (epochs 2..{epochs}) | {f(m('pipeline', 'steady'), '.0f')} ({rng('pipeline', 'steady', '.0f')}) | "
      f"{f(m('torchvision', 'steady'), '.0f')} ({rng('torchvision', 'steady', '.0f')}) | {f(mr('steady_ratio'), '.2f')} |")
print(f"| first epoch images/s | {m('pipeline', 'first'):.0f} | {m('torchvision', 'first'):.0f} | {mr('first_ratio'):.2f} |")
print(f"| first epoch s | {m('pipeline', 'first_s'):.3f} | {m('torchvision', 'first_s'):.3f} | |")
print(f"| training s (all epochs) | {m('pipeline', 'train_s'):.3f} | {m('torchvision', 'train_s'):.3f} | |")
print(f"| start to data ready s | {f(m('pipeline', 'ready_s'), '.3f')} | - | |")
print(f"| wall s outside the epochs | {m('pipeline', 'outside_s'):.3f} | {m('torchvision', 'outside_s'):.3f} | |")
print(f"| whole-process wall s | {m('pipeline', 'wall'):.2f} ({rng('pipeline', 'wall', '.2f')}) | "
      f"{m('torchvision', 'wall'):.2f} ({rng('torchvision', 'wall', '.2f')}) | "
      f"{1 / mr('wall_ratio'):.2f} (torchvision ÷ pipeline {mr('wall_ratio'):.2f}) |")
print(f"| final training accuracy | {m('pipeline', 'accuracy'):.3f} | {m('torchvision', 'accuracy'):.3f} | |")
print("\n'start to data ready': process start to the worker's 'N samples … model …' line (libtorch loaded,\n"
      "the tree listed, every PNG decoded, the model built). 'outside the epochs': wall minus the\n"
      "epochs' own seconds (pipeline: that, plus the stage's end and the process's exit; torchvision:\n"
      "interpreter start, importing torch and torchvision, listing the tree, building the model, and\n"
      "stopping the workers at exit; its workers start inside epoch 1).")

summary = {"epochs": epochs, "reps": rows}
if hashing:
    def hk(kind):
        xs = [h["wall"] for h in hashing if h["kind"] == kind]
        return {"median": med(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None
    cold, memo, small = hk("cold"), hk("memoised"), hk("small")
    entries = next((h["count"] for h in hashing if h["kind"] == "memo_entries"), None)
    print(f"\nHashing a tree of 10,000 PNGs with `pipeline status` (wall ms, process start included; "
          f"{cold['n']} passes each; memo after a cold pass: {entries} entries)\n")
    print("| pass | ms (median) | min–max |")
    print("|---|---|---|")
    for name, h in (("cold (memo deleted first)", cold), ("memoised (second and later passes)", memo),
                    ("the same on a tree of 10 images, memoised (fixed cost)", small)):
        print(f"| {name} | {h['median'] * 1e3:.0f} | {h['min'] * 1e3:.0f}–{h['max'] * 1e3:.0f} |")
    per_file = (memo["median"] - small["median"]) / 9990 * 1e6
    print(f"\nmemoised: about {per_file:.1f} µs per image beyond the fixed cost")
    summary["hashing"] = {"cold": cold, "memoised": memo, "ten_images_memoised": small,
                          "memo_entries": entries, "memoised_us_per_image": per_file}
if json_out:
    with open(json_out, "w") as out:
        json.dump(summary, out, indent=1)
PY
