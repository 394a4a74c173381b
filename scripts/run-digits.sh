#!/usr/bin/env bash
# The main job: install what is missing, build both binaries, train the digits example.
# `pipeline` hands every run that is not fully cached to `pipeline-worker` (the binary
# that links libtorch), so both are always built.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# An assignment, so that a failed setup stops this script (set -e).
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
cargo build --release --bin pipeline --bin pipeline-worker
exec "${CARGO_TARGET_DIR:-target}/release/pipeline" run examples/digits.kdl "$@"
