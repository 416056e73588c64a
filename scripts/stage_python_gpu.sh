#!/usr/bin/env bash
# Builds the attnjit Python package here for the GPU machine's Python (3.12 by
# default) and unpacks it into gpu-stage/python/site, with libattnjit beside the
# extension ($ORIGIN rpath). On the GPU machine, from the repository root:
#   PYTHONPATH=gpu-stage/python/site python3 -m pytest tests/python
#   PYTHONPATH=gpu-stage/python/site python3 tests/python/bench_overhead.py
# PY=/path/to/python picks another interpreter (its minor version must match there).
# PREWARM_ARCH=sm_90a (default) also compiles the GPU tests' kernels into
# gpu-stage/python/cache here (ATTNJIT_CACHE_DIR there; same NVRTC: same keys).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-$HOME/.pyenv/versions/3.12.1/bin/python}
out=gpu-stage/python
rm -rf "$out" && mkdir -p "$out/wheels" "$out/site"
# ccache makes the library's objects hit the ones other builds compiled.
if command -v ccache >/dev/null; then export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"; fi
"$PY" -m pip wheel . --no-deps -w "$out/wheels"
"$PY" -m zipfile -e "$out"/wheels/attnjit-*.whl "$out/site"
# Debug info is most of the size; the carry limit is 64 MiB.
find "$out/site" -name '*.so*' -exec strip --strip-debug {} + 2>/dev/null || true
if [ -n "${PREWARM_ARCH-sm_90a}" ]; then
  mkdir -p -m 700 "$out/cache"
  # The GPU tests' kernels, through the ops' prewarm (shapes only; no GPU needed).
  ATTNJIT_CACHE_DIR="$PWD/$out/cache" PYTHONPATH="$PWD/$out/site" ATTNJIT_PREWARM_ONLY="${PREWARM_ARCH-sm_90a}" \
    "$PY" tests/python/gpu/prewarm_gpu_tests.py
  command -v sqlite3 >/dev/null && sqlite3 "$out/cache/cubins.sqlite3" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  rm -f "$out/cache/cubins.sqlite3-shm" "$out/cache/cubins.sqlite3.lock"
fi
du -sh "$out"
