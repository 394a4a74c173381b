#!/usr/bin/env bash
# The main job: install what is missing, build `pipeline`, train the digits example.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
eval "$(scripts/setup.sh --env)"
cargo build --release --bin pipeline
exec target/release/pipeline run examples/digits.kdl "$@"
