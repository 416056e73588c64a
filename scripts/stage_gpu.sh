#!/usr/bin/env bash
# Copies what the GPU machine needs from a build dir into gpu-stage/ (small
# enough to carry): the library, the GPU tests, the benchmark, the CLI and,
# with PREWARM=1, a cubin store holding the GPU tests' kernels (PREWARM_SUITES="a.*;b.*"
# limits it to those gtest filters; PREWARM_SPECS adds kernels by name, SPEC_KNOBS repeats
# them under sets of tuning knobs).
set -euo pipefail
BUILD=${1:-build}
# Build first: a stale test binary once ran old test cases against new kernels. Only what
# is staged (the CPU unit tests take longest to build and are not needed there).
cmake --build "$BUILD" -j"$(nproc)" --target attnjit attnjit_gpu_tests attnjit-bench attnjit-cli >/dev/null
rm -rf gpu-stage && mkdir -p gpu-stage/tests gpu-stage/tools/bench
cp -a "$BUILD"/libattnjit.so* gpu-stage/
cp "$BUILD/tests/attnjit_gpu_tests" gpu-stage/tests/
[ -f "$BUILD/tools/bench/attnjit-bench" ] && cp "$BUILD/tools/bench/attnjit-bench" gpu-stage/tools/bench/ || true
[ -f "$BUILD/tools/attnjit" ] && cp "$BUILD/tools/attnjit" gpu-stage/tools/ || true
# PREWARM=1: compile every kernel the GPU tests use into gpu-stage/cache here,
# so the GPU machine spends its time running them (same NVRTC there: same keys).
if [ "${PREWARM:-0}" = 1 ]; then
  mkdir -p -m 700 gpu-stage/cache
  # SEED_CACHE=old-stage/cache/cubins.sqlite3.gz: start from an earlier stage's store, so
  # only kernels whose key changed compile again.
  if [ -n "${SEED_CACHE:-}" ]; then gzip -dc "$SEED_CACHE" >gpu-stage/cache/cubins.sqlite3; chmod 600 gpu-stage/cache/cubins.sqlite3; fi
  STAGE_START_US=$(($(date +%s) * 1000000))
  # One process per suite, side by side (the store takes concurrent writers).
  prewarm() {
    local pids=()
    local suites=('SingleDecodeGpu.*:RuntimeGpu.*' 'XqaGpu.*:Driver*' 'FiaGpu.*' 'MlaGpu*')
    [ -n "${PREWARM_SUITES:-}" ] && IFS=';' read -ra suites <<<"$PREWARM_SUITES"
    for suite in "${suites[@]}"; do
      env "$@" ATTNJIT_GPU_TEST_PREWARM=${PREWARM_ARCH:-sm_90a} ATTNJIT_CACHE_DIR="$PWD/gpu-stage/cache" \
        "$BUILD/tests/attnjit_gpu_tests" --gtest_filter="$suite" >/dev/null &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done  # set -e: a failed prewarm stops the script
  }
  prewarm
  # EXPERIMENT="KNOB=V ...": also the kernels gpu_run.sh's experiment pass uses.
  if [ -n "${EXPERIMENT:-}" ]; then prewarm $EXPERIMENT; fi
  # PREWARM_SPECS="name name ...": kernels the benchmark launches that no GPU test does.
  if [ -n "${PREWARM_SPECS:-}" ]; then
    "$BUILD/tools/attnjit" --cache-dir "$PWD/gpu-stage/cache" prewarm -q -a "${PREWARM_ARCH:-sm_90a}" -s $PREWARM_SPECS
    # SPEC_KNOBS="A=1;A=2 B=0": the same kernels again under each set of tuning knobs (the
    # rendered source, so the key, follows a knob): a benchmark's A/B sides. KNOB_SPECS, when
    # set, names the kernels to repeat instead of all of PREWARM_SPECS.
    if [ -n "${SPEC_KNOBS:-}" ]; then
      IFS=';' read -ra knob_sets <<<"$SPEC_KNOBS"
      for knobs in "${knob_sets[@]}"; do
        env $knobs "$BUILD/tools/attnjit" --cache-dir "$PWD/gpu-stage/cache" prewarm -q -a "${PREWARM_ARCH:-sm_90a}" \
          -s ${KNOB_SPECS:-$PREWARM_SPECS}
      done
    fi
  fi
  # BEFORE_TEMPLATES=dir BEFORE_SPECS="name ...": a template-only change's "before" side: the
  # specs rendered from that template set too, both prewarmed here; the folder travels as
  # gpu-stage/tpl-before (on the GPU machine ATTNJIT_TEMPLATE_DIR=$PWD/gpu-stage/tpl-before
  # selects it; the key covers the templates' content, not their path). ALT_TEMPLATES="name=dir
  # ..." stages more sets the same way, as gpu-stage/tpl-name (several variants in one call).
  stage_templates() {  # name dir
    # The library refuses a template set whose params headers differ from its own (the host
    # fills those structs); a change that only added to one (new constants) keeps the set's
    # kernels' meaning, so the staged copy takes this tree's headers, and says which differed.
    local tpl=gpu-stage/tpl-$1
    cp -a "$2" "$tpl"
    for h in templates/*/*_params.cuh; do
      rel=${h#templates/}
      cmp -s "$h" "$tpl/$rel" || { echo "stage: tpl-$1 takes this tree's $rel"; cp "$h" "$tpl/$rel"; }
    done
    ATTNJIT_TEMPLATE_DIR=$PWD/$tpl "$BUILD/tools/attnjit" --cache-dir "$PWD/gpu-stage/cache" prewarm -q \
      -a "${PREWARM_ARCH:-sm_90a}" -s ${BEFORE_SPECS:?BEFORE_SPECS names the kernels of the template sets}
  }
  if [ -n "${BEFORE_TEMPLATES:-}" ]; then stage_templates before "$BEFORE_TEMPLATES"; fi
  for alt in ${ALT_TEMPLATES:-}; do stage_templates "${alt%%=*}" "${alt#*=}"; done
  if [ -n "${BEFORE_TEMPLATES:-}${ALT_TEMPLATES:-}" ]; then
    "$BUILD/tools/attnjit" --cache-dir "$PWD/gpu-stage/cache" prewarm -q -a "${PREWARM_ARCH:-sm_90a}" -s $BEFORE_SPECS
  fi
  # The seed's entries this stage did not use (keys a template edit changed) would only
  # weigh on the carry: drop them.
  if [ -n "${SEED_CACHE:-}" ] && command -v sqlite3 >/dev/null; then
    sqlite3 gpu-stage/cache/cubins.sqlite3 "DELETE FROM entries WHERE key NOT IN (SELECT key FROM usage WHERE \
      last_used_us >= $STAGE_START_US); DELETE FROM usage WHERE key NOT IN (SELECT key FROM entries); VACUUM;"
  fi
  "$BUILD/tools/attnjit" --cache-dir "$PWD/gpu-stage/cache" cache stats | head -3
  # Fold the WAL into the file so that one file carries everything.
  command -v sqlite3 >/dev/null && sqlite3 gpu-stage/cache/cubins.sqlite3 "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  rm -f gpu-stage/cache/cubins.sqlite3-shm gpu-stage/cache/cubins.sqlite3.lock
  # PTX text is most of the bytes and compresses ~4x; gpu_run.sh unpacks it.
  gzip -6 gpu-stage/cache/cubins.sqlite3
fi
# BEFORE_BUILD=dir: another build's libattnjit.so* and attnjit-bench, with its own store in
# cache/cubins.sqlite3.gz (prewarm it with that build's CLI), as gpu-stage/before: the
# "before" side of scripts/bench_before_after.sh when the host code changed too.
if [ -n "${BEFORE_BUILD:-}" ]; then
  mkdir -p gpu-stage/before
  cp -a "$BEFORE_BUILD"/libattnjit.so* "$BEFORE_BUILD/attnjit-bench" gpu-stage/before/
  [ -f "$BEFORE_BUILD/cache/cubins.sqlite3.gz" ] && mkdir -p -m 700 gpu-stage/before/cache &&
    cp "$BEFORE_BUILD/cache/cubins.sqlite3.gz" gpu-stage/before/cache/
fi
# Debug info is most of the size; the carry limit is 64 MiB.
find gpu-stage -type f \( -name 'libattnjit.so*' -o -perm -u+x \) -exec strip --strip-debug {} + 2>/dev/null || true
du -sh gpu-stage
