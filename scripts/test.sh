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
# What needs root (Debian's packages, SLURM's daemons) is done through sudo when not root.
as_root=()
if [ "$(id -u)" != 0 ]; then as_root=(sudo -n); fi
# tests/e2e/report.rs renders the HTML report in a real browser: headless Chromium, from
# Debian's `chromium` package (the test says plainly that it is missing if this fails).
if ! command -v chromium >/dev/null 2>&1; then
  echo "test: installing Debian's chromium (tests/e2e/report.rs renders the HTML report with it)" >&2
  apt_install=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)
  "${apt_install[@]}" >&2 || { "${as_root[@]}" apt-get update -q >&2 && "${apt_install[@]}" >&2; } ||
    echo "test: could not install chromium: tests/e2e/report.rs will fail, saying so" >&2
fi
# tests/e2e/slurm.rs submits jobs to a real one-node SLURM cluster, started (and Debian's
# slurm-wlm and munge installed when missing) while the tests build; as root.
slurm_log=$(mktemp)
trap 'rm -f "$slurm_log"' EXIT
"${as_root[@]}" scripts/slurm-local.sh >"$slurm_log" 2>&1 &
slurm_pid=$!
# phase NAME COMMAND…: runs a phase and says how long it took.
phase() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test: $name took $((SECONDS - start)) s" >&2
}
phase "cargo fmt" cargo fmt --all -- --check
# Clippy lints the workspace's crates as they are compiled for the tests (clippy-driver as
# the workspace's rustc wrapper, which is what `cargo clippy` does for a check build),
# every target the tests build: the dependencies are compiled once, not a second time in
# check mode. `-D warnings`, as `cargo clippy -- -D warnings`, through the variable
# cargo-clippy hands its arguments to the driver in.
export RUSTC_WORKSPACE_WRAPPER
RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
phase "building the tests (and clippy)" cargo test --release --workspace --no-run
if wait "$slurm_pid"; then
  tail -1 "$slurm_log" >&2
else
  echo "test: the SLURM cluster did not start: tests/e2e/slurm.rs will fail, saying so" >&2
  cat "$slurm_log" >&2
fi
# Each test binary runs through scripts/test-runner.sh, which notes every test's time.
times=$(mktemp)
trap 'rm -f "$times" "$slurm_log"' EXIT
triple=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_RUNNER"
# Two tests run at once on two cores: one libtorch thread each (OMP_NUM_THREADS, which
# pipeline's default `accelerator.threads` and PyTorch both read) keeps them from fighting
# over the cores (the suite in 368 s instead of 409 s; a test that needs more threads
# names them). An OMP_NUM_THREADS already set is kept.
phase "running the tests" env "$runner_var=$root/scripts/test-runner.sh" \
  PIPELINE_TEST_TIMES="$times" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" \
  cargo test --release --workspace
echo "test: the slowest tests" >&2
sed -nE 's/^test (.*) \.\.\. [a-z]+ <([0-9.]+)s>$/\2 \1/p' "$times" | sort -rn |
  awk 'NR <= 15 { printf "  %7.1f s  %s\n", $1, $2 }' >&2
