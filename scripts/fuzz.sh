#!/usr/bin/env bash
# Fuzzes `pipeline check` for SECONDS (default 600): the manifest reader, lowering, the
# rules, `--set` and both renderings, in-process and without libtorch (fuzz/src/lib.rs).
# Inputs that fail (a panic, no valid JSON, a diagnostic without code, help or a label in
# the text, or slower than a second) are written to tests/fuzz-regressions/, which
# `cargo test` replays; fix them and commit the files. Extra arguments go to the fuzzer
# (`--seed N` to repeat a run).
#
#   scripts/fuzz.sh 3600
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${1:-600}
shift || true
cargo build --release --quiet -p pipeline-fuzz
exec "${CARGO_TARGET_DIR:-target}/release/pipeline-fuzz" --seconds "$seconds" "$@"
