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
# Debug info is most of the size; the carry limit is 64 MiB.
find gpu-stage -type f \( -name 'libattnjit.so*' -o -perm -u+x \) -exec strip --strip-debug {} + 2>/dev/null || true
du -sh gpu-stage
