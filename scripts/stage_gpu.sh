#!/usr/bin/env bash
# Copies what the GPU machine needs from a build dir into gpu-stage/ (small
# enough to carry): the library, the GPU tests and the benchmark.
set -euo pipefail
BUILD=${1:-build}
rm -rf gpu-stage && mkdir -p gpu-stage/tests gpu-stage/tools/bench
cp -a "$BUILD"/libattnjit.so* gpu-stage/
cp "$BUILD/tests/attnjit_gpu_tests" gpu-stage/tests/
[ -f "$BUILD/tools/bench/attnjit-bench" ] && cp "$BUILD/tools/bench/attnjit-bench" gpu-stage/tools/bench/ || true
[ -f "$BUILD/tools/attnjit" ] && cp "$BUILD/tools/attnjit" gpu-stage/tools/ || true
du -sh gpu-stage
