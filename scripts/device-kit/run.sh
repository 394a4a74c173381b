#!/usr/bin/env bash
# The one command on the GPU machine, with this folder (.device-kit/, built by
# scripts/device-kit.sh) copied there:
#
#     .device-kit/run.sh OUT          # OUT gets figures.json and log.txt
#
# First, in seconds: torch is the kit's version, it sees the GPU, the binaries load with
# this machine's libtorch (found through its python3's torch, as LD_LIBRARY_PATH). Then
# kit.py: the GPU checks, the benchmarks side by side with this machine's PyTorch, the
# examples in each precision (about 7 minutes in all; --budget SECONDS after the checks).
# `--cpu` runs what the CPU can (scripts/device-kit.sh --check does, before any GPU time
# is spent). KIT_PYTHON names the python whose torch to use (python3 by default).
set -uo pipefail
kit=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cpu=()
if [ "${1:-}" = "--cpu" ]; then
  cpu=(--cpu)
  shift
fi
out=${1:?usage: run.sh [--cpu] OUT [--budget SECONDS]}
shift
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
python=${KIT_PYTHON:-python3}
say() { printf 'kit: %s\n' "$*"; }

want=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["torch"])' "$kit/kit.json")
if ! have=$("$python" -c 'import torch; print(torch.__version__)'); then
  say "$python cannot import torch: set KIT_PYTHON to the python that has it"
  exit 1
fi
if [ "$want" != "$have" ]; then
  say "the kit is built for torch $want and this machine has $have: build it again with scripts/device-kit.sh --torch ${have%%+*}"
  exit 1
fi
torch_lib=$("$python" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ ${#cpu[@]} -eq 0 ]; then
  if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    say "torch $have sees no GPU here"
    nvidia-smi || true
    exit 1
  fi
  nvidia-smi -L
fi
if ! "$kit/bin/pipeline" --version || ! "$kit/bin/pipeline-worker" --version; then
  say "the kit's binaries do not load with $torch_lib:"
  ldd "$kit/bin/pipeline-worker" | grep "not found"
  exit 1
fi
say "torch $have, libtorch from $torch_lib"
PYTHONUNBUFFERED=1 "$python" "$kit/kit.py" "${cpu[@]}" "$out" "$@"
