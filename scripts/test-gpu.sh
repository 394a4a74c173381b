#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, which CI (CPU only) cannot run: every test marked
# `#[ignore = "needs a CUDA GPU …"]`, then the digits example (native, its scripted twin
# through TorchScript, and from PNG files with augmentation) and the text example on
# `cuda` in each precision, and digits on two processes, printing accuracy and time. Run
# it where a GPU is:
#
#     scripts/test-gpu.sh
#
# It needs cargo and PyPI. A GPU machine with neither (only Python and torch) runs the
# device kit instead: scripts/device-kit.sh builds it here, its run.sh runs the same
# checks there as command-line checks (scripts/device-kit/README.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
if ! nvidia-smi -L >&2; then
  echo "test-gpu: no NVIDIA GPU here (nvidia-smi failed)" >&2
  exit 1
fi
cargo build --release --bin pipeline --bin pipeline-worker
cargo test --release --workspace -- --ignored
for example in digits torchscript digits-images text-classification; do
  for precision in 32 16-mixed bf16-mixed; do
    echo "test-gpu: $example on cuda, precision $precision" >&2
    target/release/pipeline run "examples/$example.kdl" --no-cache \
      --set accelerator.device=cuda --set "accelerator.precision=$precision"
  done
done
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -ge 2 ]; then
  echo "test-gpu: digits on 2 GPUs (ddp over NCCL)" >&2
  target/release/pipeline run examples/digits.kdl --no-cache --nproc-per-node 2 \
    --set accelerator.device=cuda --set accelerator.strategy=ddp
fi
