#!/usr/bin/env bash
# The main job: install what is missing, build `pipeline`, train the digits example.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# An assignment, so that a failed setup stops this script (set -e).
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
cargo build --release --bin pipeline
exec target/release/pipeline run examples/digits.kdl "$@"
