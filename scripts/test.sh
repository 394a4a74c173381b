#!/usr/bin/env bash
# The whole test suite: install what is missing, then formatting, lints and every test.
# Tests build in the release profile so that libtorch's bindings are compiled once for
# both the main job and the tests.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# An assignment, so that a failed setup stops this script (set -e).
setup_env=$(scripts/setup.sh --env)
eval "$setup_env"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
