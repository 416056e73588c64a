#!/usr/bin/env bash
# Builds the attnjit Python package here for the GPU machine's Python (3.12 by
# default) and unpacks it into gpu-stage/python/site, with libattnjit beside the
# extension ($ORIGIN rpath). Run it after scripts/stage_gpu.sh (which empties
# gpu-stage/). On the GPU machine, from the repository root:
#   gpu-stage/python/run.sh     # pytest tests/python (GPU tests included), then the overhead bench
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
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine, from the repository root: the Python tests, then the host-overhead bench.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONPATH="$here/site${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"  # NVRTC, as scripts/gpu_run.sh
if [ -f "$here/cache/cubins.sqlite3" ]; then  # the store must be 0700/0600 and ours
  export ATTNJIT_CACHE_DIR=$(mktemp -d)
  cp "$here/cache/cubins.sqlite3" "$ATTNJIT_CACHE_DIR/" && chmod 600 "$ATTNJIT_CACHE_DIR/cubins.sqlite3"
fi
python3 -m pytest tests/python -q -rs; rc=$?
python3 tests/python/bench_overhead.py || rc=1
[ -x gpu-stage/tools/bench/attnjit-bench ] && LD_LIBRARY_PATH=gpu-stage gpu-stage/tools/bench/attnjit-bench --startup | grep -i overhead
exit $rc
RUN
chmod +x "$out/run.sh"
du -sh "$out"
