#!/usr/bin/env bash
# Runs on the GPU machine over a build made elsewhere: GPU tests, sanitizer
# subset, then the benchmark; prints a short table last.
# Usage: scripts/gpu_run.sh BUILD_DIR [gtest filter] [bench args...]
set -uo pipefail
BUILD=${1:-build}
FILTER=${2:-*}
shift 2 || true
export LD_LIBRARY_PATH="$PWD/$BUILD:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export ATTNJIT_CACHE_DIR=${ATTNJIT_CACHE_DIR:-/tmp/attnjit-cache}
mkdir -p "$ATTNJIT_CACHE_DIR" && chmod 700 "$ATTNJIT_CACHE_DIR"
OUTDIR=${OUT:-/tmp/attnjit-out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
status=0
"$BUILD/tests/attnjit_gpu_tests" --gtest_filter="$FILTER" 2>&1 | tee "$OUTDIR/gpu_tests.log" | grep -vE "^\[ +(RUN|OK) +\]" | tail -60
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ -x "$BUILD/tools/bench/attnjit-bench" ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
  "$BUILD/tools/bench/attnjit-bench" "$@" 2>&1 | tee "$OUTDIR/bench.log" | tail -40
fi
exit $status
