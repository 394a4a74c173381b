#!/usr/bin/env bash
# The GPU machine's kit: that machine has neither Rust nor a network, and a torch of its
# own (2.11.0+cu130 in its python3), so everything a GPU run needs is built here into
# .device-kit/ (git-ignored, at most 60 MiB), which travels there with the working tree:
#
#   - `pipeline` and `pipeline-worker`, built against the libtorch of PyPI's
#     torch==VERSION (the matching tch release, in a copy of the sources with its own
#     target directory: the project's Cargo.toml is untouched), without any path of this
#     machine in them (PIPELINE_RELOCATABLE), stripped; libpipeline_nccl.so beside them;
#   - the examples and their data (the TorchScript module scripted again by that torch),
#     the benchmarks' manifests and their PyTorch side (bench/harness.py, reference.py);
#   - run.sh (the one command there) and kit.py (what it runs), from scripts/device-kit/.
#
# Usage:
#   scripts/device-kit.sh [--torch VERSION]   build the kit (VERSION 2.11.0 by default)
#   scripts/device-kit.sh --check             run the kit here, on the CPU, as run.sh runs
#                                             there: its binaries against that torch's
#                                             libtorch found through LD_LIBRARY_PATH, its
#                                             NCCL library with libtorch_cuda's
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
torch=2.11.0
check=false
while [ $# -gt 0 ]; do
  case $1 in
    --torch) torch=$2; shift 2 ;;
    --check) check=true; shift ;;
    *) echo "device-kit: unknown argument $1 (--torch VERSION, --check)" >&2; exit 2 ;;
  esac
done
# The tch release that binds each torch (tch's README lists them).
case $torch in
  2.11.0) tch=0.24.0 ;;
  2.13.0) tch=0.26.0 ;;
  *) echo "device-kit: no tch release is known here for torch $torch (known: 2.11.0, 2.13.0)" >&2; exit 2 ;;
esac
cache=${PIPELINE_CACHE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeline}
venv=$cache/venv-torch-$torch
kit=$root/.device-kit
say() { printf 'device-kit: %s\n' "$*" >&2; }

if $check; then
  if [ ! -x "$kit/run.sh" ]; then
    say "no kit in $kit: build it first (scripts/device-kit.sh)"
    exit 1
  fi
  start=$SECONDS
  out=$(mktemp -d)
  # As there: a copy of the kit (what a run writes stays out of the one carried), and
  # run.sh finding torch through the python3 it is given, on the CPU.
  copy=$(mktemp -d)
  trap 'rm -rf "$copy"' EXIT
  cp -a "$kit" "$copy/.device-kit"
  KIT_PYTHON="$venv/bin/python" "$copy/.device-kit/run.sh" --cpu "$out"
  say "check passed in $((SECONDS - start)) s; the kit is $(($(du -sb "$kit" | cut -f1) >> 20)) MiB ($(find "$kit" -type f | wc -l) files); figures in $out/figures.json"
  exit 0
fi

start=$SECONDS
# The project's own set-up first: Gloo's headers and the examples' data.
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
torch_dir=$(scripts/torch-venv.sh "$torch" "$venv")

# A copy of the sources (tracked and untracked, not ignored) whose tch is the one for
# this torch; its own target directory, kept between builds.
src=$cache/kit-src-$torch
target=$cache/kit-target-$torch
say "copying the sources to $src (tch $tch)"
mkdir -p "$src"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$src"
sed -i -E "s/^tch = \"[^\"]+\"/tch = \"$tch\"/; s/^torch-sys = \"[^\"]+\"/torch-sys = \"$tch\"/" "$src/Cargo.toml"
say "building pipeline and pipeline-worker against torch $torch ($torch_dir)"
(
  cd "$src"
  env -u RUSTC_WORKSPACE_WRAPPER LIBTORCH="$torch_dir" LIBTORCH_CXX11_ABI=1 \
    PIPELINE_RELOCATABLE=1 CARGO_TARGET_DIR="$target" \
    cargo build --release --bin pipeline --bin pipeline-worker >&2
)
nccl=$(ls -t "$target"/release/build/pipeline-backends-*/out/libpipeline_nccl.so 2>/dev/null | head -n 1 || true)
if [ -z "$nccl" ]; then
  say "the build made no libpipeline_nccl.so (see its warnings above)"
  exit 1
fi

say "assembling $kit"
tmp=$kit.tmp
rm -rf "$tmp"
mkdir -p "$tmp/bin" "$tmp/bench/manifests" "$tmp/docs" "$tmp/examples/data"
for bin in pipeline pipeline-worker; do
  strip -o "$tmp/bin/$bin" "$target/release/$bin"
done
strip -o "$tmp/bin/libpipeline_nccl.so" "$nccl"
cp scripts/device-kit/run.sh scripts/device-kit/kit.py scripts/device-kit/README.md "$tmp/"
cp bench/harness.py bench/reference.py "$tmp/bench/"
cp bench/manifests/mlp.kdl bench/manifests/cnn.kdl bench/manifests/transformer.kdl "$tmp/bench/manifests/"
# reference.py builds the models torch.nn lacks from the twins on this page.
cp docs/models.md "$tmp/docs/"
for example in digits digits-mlp torchscript digits-images text-classification sequence-transformer; do
  cp "examples/$example.kdl" "$tmp/examples/"
done
(cd examples/data && cp -r digits.csv.gz digits-png digits-png.csv reviews.csv reviews-tokenizer.json order.csv "$tmp/examples/data/")
# A TorchScript archive is read by the torch that wrote it or a newer one: script it again.
"$venv/bin/python" scripts/make-torchscript-model.py "$tmp/examples/data/digits-cnn.pt" >&2
"$venv/bin/python" - "$tmp/kit.json" "$torch" "$("$venv/bin/python" -c 'import torch; print(torch.__version__)')" "$(git rev-parse HEAD)" "$(git status --porcelain | wc -l)" <<'PY'
import datetime, json, sys
out, wheel, version, commit, dirty = sys.argv[1:]
json.dump({"torch": version, "built_with": f"torch=={wheel} from PyPI", "commit": commit,
           "uncommitted_changes": int(dirty),
           "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
          open(out, "w"), indent=2)
PY
size=$(du -sb "$tmp" | cut -f1)
if [ "$size" -gt $((60 << 20)) ]; then
  say "the kit is $((size >> 20)) MiB, over the 60 MiB it may take"
  exit 1
fi
rm -rf "$kit"
mv "$tmp" "$kit"
say "built $kit in $((SECONDS - start)) s: $((size >> 20)) MiB; check it here with scripts/device-kit.sh --check"
