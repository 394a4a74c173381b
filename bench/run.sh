#!/usr/bin/env bash
# The benchmarks, side by side in one run: pipeline, plain PyTorch (tensor indexing and
# DataLoader), Lightning and pytorch-accelerated. Arguments go to bench/harness.py
# (--quick for a smoke test, --reps N, --device cuda, --write-docs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
python="$PIPELINE_VENV/bin/python"
if ! "$python" -c 'import lightning, pytorch_accelerated' 2>/dev/null; then
  echo "bench: installing lightning and pytorch-accelerated (torch stays at 2.13.0)" >&2
  constraints=$(mktemp)
  echo "torch==2.13.0" > "$constraints"
  "$python" -m pip install --quiet --disable-pip-version-check --no-input -c "$constraints" \
    "lightning==2.6.6" "pytorch-accelerated==0.1.61" >&2
  rm -f "$constraints"
fi
cargo build --release --bins
exec "$python" bench/harness.py "$@"
