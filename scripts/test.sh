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
# tests/e2e/report.rs renders the HTML report in a real browser: headless Chromium, from
# Debian's `chromium` package (the test says plainly that it is missing if this fails).
if ! command -v chromium >/dev/null 2>&1; then
  echo "test: installing Debian's chromium (tests/e2e/report.rs renders the HTML report with it)" >&2
  as_root=()
  if [ "$(id -u)" != 0 ]; then as_root=(sudo -n); fi
  apt_install=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
  "${apt_install[@]}" >&2 || { "${as_root[@]}" apt-get update -q >&2 && "${apt_install[@]}" >&2; } ||
    echo "test: could not install chromium: tests/e2e/report.rs will fail, saying so" >&2
fi
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace
