#!/usr/bin/env bash
# How scripts/test.sh runs each test binary (cargo's `target.<triple>.runner`): with every
# test's time (libtest's `--report-time`, an unstable option stable's libtest accepts under
# RUSTC_BOOTSTRAP, set here for the test process alone, never for rustc, so nothing is
# rebuilt), its output also appended to $PIPELINE_TEST_TIMES for the table of the slowest
# tests. A binary asked to list its tests runs as it is.
set -euo pipefail
exe=$1
shift
case " $* " in
  *" --list "*) exec "$exe" "$@" ;;
esac
if [ -z "${PIPELINE_TEST_TIMES:-}" ]; then
  exec "$exe" "$@"
fi
# Two tests at once on two cores, each training on libtorch's threads: OpenMP's threads
# sleep when they wait instead of spinning against each other's (numerics unchanged).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
RUSTC_BOOTSTRAP=1 "$exe" "$@" -Zunstable-options --report-time | tee -a "$PIPELINE_TEST_TIMES"
