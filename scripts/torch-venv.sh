#!/usr/bin/env bash
# Installs PyPI's torch==VERSION (with numpy) into the virtual environment VENV once, and
# the CUDA headers the NCCL shim needs that torch's wheels lack (crt and CCCL: header-only
# packages of the same CUDA toolkit, from PyPI). A marker file is written only once an
# install finished, so an interrupted one is redone rather than trusted. Prints torch's
# directory (the libtorch tch builds against). Used by scripts/setup.sh (the project's
# torch) and scripts/device-kit.sh (the GPU machine's).
#
# Usage: scripts/torch-venv.sh VERSION VENV
set -euo pipefail
version=$1
venv=$2
say() { printf 'setup: %s\n' "$*" >&2; }

if [ ! -f "$venv/.pipeline-complete" ]; then
  say "installing torch==$version into $venv (about 4.7 GB, once per machine)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    "torch==$version" numpy >&2
  touch "$venv/.pipeline-complete"
fi
torch_dir=$("$venv/bin/python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')

# torch's CUDA wheels bring nccl.h and the runtime headers, but not two header-only parts
# of the same CUDA toolkit that cuda_runtime.h includes (crt/, CCCL's nv/target).
if [ -f "$torch_dir/lib/libtorch_cuda.so" ] && [ ! -f "$venv/.pipeline-cuda-headers" ]; then
  cuda_toolkit=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("cuda-toolkit"))')
  say "installing the CUDA $cuda_toolkit headers torch lacks (crt, cccl)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    "cuda-toolkit[crt,cccl]==$cuda_toolkit" >&2
  touch "$venv/.pipeline-cuda-headers"
fi
echo "$torch_dir"
