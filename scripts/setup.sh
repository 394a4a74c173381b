#!/usr/bin/env bash
# Installs what `pipeline` needs, idempotently, and prints the environment to build with.
#
#   - libtorch: PyPI torch==$TORCH_VERSION in a virtual environment outside the clone,
#     keyed by the torch version ($PIPELINE_VENV, default ~/.cache/pipeline/venv-torch-X),
#     so every clean clone reuses it, with the CUDA headers the NCCL shim needs
#     (scripts/torch-venv.sh).
#   - safetensors (PyPI), with which the parity tests load checkpoints into torch.nn;
#     scikit-learn, with which the data tests recompute R² and accuracy, and pyarrow, with
#     which they write Parquet files;
#   - torchvision (PyPI, the release built against torch==$TORCH_VERSION, installed under
#     a constraint so torch is never replaced; it brings Pillow), with which the image
#     tests compare resizing and cropping and the image benchmark (bench/images.py) runs;
#   - tokenizers (PyPI, Hugging Face's Python binding of the same release as the Rust
#     crate pipeline tokenizes with), with which scripts/make-text-data.py trains the
#     text example's tokenizer;
#   - tensorboard (PyPI, without TensorFlow), whose event reader the TensorBoard tests
#     read pipeline's event files with;
#   - moto (PyPI, with its server), the S3-compatible server the object-storage tests run
#     on a free local port;
#   - Gloo's headers, which the wheel's c10d headers include but do not ship (the library
#     itself is inside libtorch_cpu): Debian's libgloo-dev package, downloaded and
#     unpacked into $cache/gloo-$GLOO_DEB_VERSION (no root needed, nothing installed).
#   - the sequence examples' data: examples/data/order.csv, written by
#     scripts/make-order-data.py (seeded);
#   - the table example's data: examples/data/rentals.csv (dates, words, gaps), written by
#     scripts/make-rentals-data.py (seeded);
#   - the TorchScript example's module: examples/data/digits-cnn.pt, scripted by
#     scripts/make-torchscript-model.py (seeded);
#   - scikit-learn's data sets as shipped (`sklearn/datasets/data/`: digits, wine, breast
#     cancer, diabetes) out of its wheel (pip download; nothing is downloaded at run
#     time), into examples/data/;
#   - the image examples' data: digits as 8×8 PNGs in torchvision's ImageFolder layout,
#     examples/data/digits-png/<label>/<row>.png, and their listing
#     examples/data/digits-png.csv, written by scripts/make-digits-images.py (deterministic).
#   - the text example's data: synthetic reviews examples/data/reviews.csv and their BPE
#     tokenizer examples/data/reviews-tokenizer.json, written by scripts/make-text-data.py
#     (seeded; the same bytes on every run).
#
# Usage: `source <(scripts/setup.sh --env)` or `eval "$(scripts/setup.sh --env)"`.
# All progress goes to stderr; with --env, stdout holds only `export` lines.
set -euo pipefail

TORCH_VERSION=2.13.0
SKLEARN_VERSION=1.6.1
GLOO_DEB_VERSION=0.0~git20220518.5b14351-3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${PIPELINE_CACHE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeline}
venv=${PIPELINE_VENV:-$cache/venv-torch-$TORCH_VERSION}
say() { printf 'setup: %s\n' "$*" >&2; }

# --- libtorch, and the CUDA headers the NCCL shim needs ---------------------------------
torch_dir=$("$root/scripts/torch-venv.sh" "$TORCH_VERSION" "$venv")

# pip_once MARKER WHY PACKAGE==VERSION…: installs the packages into the venv once (the
# marker file $venv/.pipeline-MARKER says it finished), under a constraint that keeps pip
# from replacing torch.
pip_once() {
  local marker=$1 why=$2
  shift 2
  [ -f "$venv/.pipeline-$marker" ] && return 0
  say "installing $* into $venv ($why)"
  printf 'torch==%s\n' "$TORCH_VERSION" >"$venv/.pipeline-constraints.txt"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --constraint "$venv/.pipeline-constraints.txt" "$@" >&2
  touch "$venv/.pipeline-$marker"
}

# --- what the tests compare with: Hugging Face's safetensors reader ----------------------
# The parity tests load pipeline's checkpoints into the equivalent torch.nn modules.
SAFETENSORS_VERSION=0.5.3
pip_once "safetensors-$SAFETENSORS_VERSION" "the parity tests read checkpoints with it" \
  "safetensors==$SAFETENSORS_VERSION"

# --- what the data tests compare with: scikit-learn and pyarrow --------------------------
# The tests recompute pipeline's metrics (R², accuracy) with scikit-learn on the same split,
# and write the Parquet files pipeline reads with pyarrow (what pandas writes them with).
PYARROW_VERSION=18.1.0
pip_once "sklearn-$SKLEARN_VERSION-pyarrow-$PYARROW_VERSION" "the data tests compare with them" \
  "scikit-learn==$SKLEARN_VERSION" "pyarrow==$PYARROW_VERSION"

# --- what the image tests compare with: torchvision -------------------------------------
# The image tests compare pipeline's resize and crop with torchvision's, and
# bench/images.py is the torchvision side of the image-folder benchmark. 0.28.0 is the
# release that requires torch==2.13.0.
TORCHVISION_VERSION=0.28.0
pip_once "torchvision-$TORCHVISION_VERSION" "the image tests compare with it" \
  "torchvision==$TORCHVISION_VERSION"

# --- what the text example's data is made with: Hugging Face's tokenizers -------------
# scripts/make-text-data.py trains the text example's tokenizer.json with the Python
# binding of the same release as the Rust crate that reads it.
TOKENIZERS_VERSION=0.23.2
pip_once "tokenizers-$TOKENIZERS_VERSION" "the text example's tokenizer is trained with it" \
  "tokenizers==$TOKENIZERS_VERSION"

# --- what the TensorBoard tests read with: TensorBoard's own event reader -----------------
# tests/e2e/tensorboard.rs reads the event files pipeline writes with EventAccumulator, the
# reader TensorBoard's scalar dashboards are built on (no TensorFlow needed).
TENSORBOARD_VERSION=2.21.0
pip_once "tensorboard-$TENSORBOARD_VERSION" "the TensorBoard tests read with it" \
  "tensorboard==$TENSORBOARD_VERSION"

# --- an S3 server for the object-storage tests ------------------------------------------
# tests/e2e/object_store.rs shares a stage cache and checkpoints through a real S3-compatible
# server (moto's, started on a free local port by the tests; no account, no network).
MOTO_VERSION=5.2.1
pip_once "moto-$MOTO_VERSION" "the object-storage tests run an S3 server" \
  "moto[server]==$MOTO_VERSION"

# --- Gloo's headers ----------------------------------------------------------------------
gloo="$cache/gloo-$GLOO_DEB_VERSION"
if [ ! -f "$gloo/.pipeline-complete" ]; then
  say "fetching Gloo's headers (Debian's libgloo-dev $GLOO_DEB_VERSION)"
  rm -rf "$gloo"
  mkdir -p "$gloo/deb"
  (cd "$gloo/deb" && apt-get download -q "libgloo-dev=$GLOO_DEB_VERSION" >&2 2>/dev/null ||
    apt-get download -q libgloo-dev >&2)
  dpkg-deb -x "$gloo"/deb/libgloo-dev_*.deb "$gloo/root"
  test -f "$gloo/root/usr/include/gloo/algorithm.h"
  touch "$gloo/.pipeline-complete"
fi

# --- scikit-learn's data sets ------------------------------------------------------------
# The files as shipped in the scikit-learn wheel, unchanged: digits, and the tabular
# examples' wine, breast cancer and diabetes (features and target in two files).
SKLEARN_FILES="digits.csv.gz wine_data.csv breast_cancer.csv diabetes_data_raw.csv.gz diabetes_target.csv.gz"
missing_files=""
for name in $SKLEARN_FILES; do
  [ -f "$root/examples/data/$name" ] || missing_files="$missing_files $name"
done
if [ -n "$missing_files" ]; then
  say "fetching$missing_files from the scikit-learn $SKLEARN_VERSION wheel"
  wheels="$cache/wheels"
  mkdir -p "$wheels" "$root/examples/data"
  if ! ls "$wheels"/scikit_learn-"$SKLEARN_VERSION"-*.whl >/dev/null 2>&1; then
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-input \
      --no-deps --only-binary=:all: -d "$wheels" "scikit-learn==$SKLEARN_VERSION" >&2
  fi
  wheel=$(ls "$wheels"/scikit_learn-"$SKLEARN_VERSION"-*.whl | head -n 1)
  "$venv/bin/python" - "$wheel" "$root/examples/data" $missing_files <<'PY'
import os, sys, zipfile
wheel, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        data = z.read("sklearn/datasets/data/" + name)
        out = os.path.join(out_dir, name)
        tmp = out + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, out)
PY
fi

# --- the prediction example's samples ---------------------------------------------------
# examples/breast-cancer.kdl's `predict` stage reads tumours without their class: the
# features of every row of breast_cancer.csv, without its metadata line and class column.
unlabelled="$root/examples/data/breast_cancer_unlabelled.csv"
if [ ! -f "$unlabelled" ]; then
  say "writing the prediction example's samples (examples/data/breast_cancer_unlabelled.csv)"
  "$venv/bin/python" - "$root/examples/data/breast_cancer.csv" "$unlabelled" <<'PY'
import os, sys
source, out = sys.argv[1], sys.argv[2]
rows = open(source).read().splitlines()[1:]
tmp = out + ".tmp"
with open(tmp, "w") as f:
    f.writelines(",".join(row.split(",")[:-1]) + "\n" for row in rows)
os.replace(tmp, out)
PY
fi

# --- the sequence examples' data ---------------------------------------------------------
# A synthetic task whose label is the order of three tokens (scripts/make-order-data.py).
order="$root/examples/data/order.csv"
if [ ! -f "$order" ]; then
  say "writing the sequence examples' data (examples/data/order.csv)"
  mkdir -p "$root/examples/data"
  "$venv/bin/python" "$root/scripts/make-order-data.py" "$order"
fi

# --- the table example's data -----------------------------------------------------------
# Two years of bike rentals with dates, words and gaps (scripts/make-rentals-data.py).
rentals="$root/examples/data/rentals.csv"
if [ ! -f "$rentals" ]; then
  say "writing the table example's data (examples/data/rentals.csv)"
  mkdir -p "$root/examples/data"
  "$venv/bin/python" "$root/scripts/make-rentals-data.py" "$rentals"
fi

# --- the TorchScript example's module ---------------------------------------------------
# A scripted twin of examples/digits.kdl's CNN (scripts/make-torchscript-model.py).
script_model="$root/examples/data/digits-cnn.pt"
if [ ! -f "$script_model" ]; then
  say "scripting the TorchScript example's module (examples/data/digits-cnn.pt)"
  mkdir -p "$root/examples/data"
  "$venv/bin/python" "$root/scripts/make-torchscript-model.py" "$script_model"
fi

# --- the image examples' data ------------------------------------------------------------
# digits.csv.gz (above) as 8×8 greyscale PNGs in ImageFolder layout, with a listing
# (scripts/make-digits-images.py; the same bytes on every run).
digits_png="$root/examples/data/digits-png"
digits_png_listing="$root/examples/data/digits-png.csv"
if [ ! -d "$digits_png" ] || [ ! -f "$digits_png_listing" ]; then
  say "writing the image examples' data (examples/data/digits-png/, digits-png.csv)"
  mkdir -p "$root/examples/data"
  "$venv/bin/python" "$root/scripts/make-digits-images.py" "$digits_png" "$digits_png_listing"
fi

# --- the text example's data ------------------------------------------------------------
# Synthetic short reviews labelled positive / negative / neutral, and a BPE tokenizer
# trained on them (scripts/make-text-data.py; seeded, the same bytes on every run).
reviews="$root/examples/data/reviews.csv"
reviews_tokenizer="$root/examples/data/reviews-tokenizer.json"
if [ ! -f "$reviews" ] || [ ! -f "$reviews_tokenizer" ]; then
  say "writing the text example's data (examples/data/reviews.csv, reviews-tokenizer.json)"
  mkdir -p "$root/examples/data"
  "$venv/bin/python" "$root/scripts/make-text-data.py" "$reviews" "$reviews_tokenizer"
fi

if [ "${1:-}" = "--env" ]; then
  printf 'export LIBTORCH=%q\n' "$torch_dir"
  printf 'export LIBTORCH_CXX11_ABI=1\n'
  printf 'export PIPELINE_VENV=%q\n' "$venv"
  printf 'export PIPELINE_GLOO_INCLUDE=%q\n' "$gloo/root/usr/include"
fi
