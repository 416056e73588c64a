#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang + ASan/UBSan) and runs each one for a
# bounded time over a copy of its seed corpus (tests/fuzz/corpus/<target>/). Prints the
# executions each run made; any crash, leak, timeout or out-of-memory fails the script,
# and the input that caused it is kept under $FUZZ_OUT/<target>/.
#
#   scripts/run_fuzzers.sh [TARGET...]      all fuzz_* targets when none is named
#   FUZZ_TIME=60       seconds per target (libFuzzer -max_total_time)
#   FUZZ_JOBS=1        targets run at once (CI: one per core)
#   FUZZ_BUILD_DIR=build-fuzz   FUZZ_OUT=$FUZZ_BUILD_DIR/fuzz-out
#   FUZZ_TMPDIR=/dev/shm        where the targets write their input files
#   scripts/run_fuzzers.sh --make-seeds     rewrites the store seeds (needs sqlite3)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

time_s=${FUZZ_TIME:-60}
jobs=${FUZZ_JOBS:-1}
build=${FUZZ_BUILD_DIR:-build-fuzz}
out=${FUZZ_OUT:-$build/fuzz-out}
cxx=${FUZZ_CXX:-$(command -v clang++-14 || echo clang++)}

# Per-target libFuzzer flags. spec_json and model_config: inputs stay below the depth
# at which the recursive JSON copies in tools/cli overflow the stack (issue 14 item 2,
# fixed separately); lift the cap once that fix is in.
declare -A extra=(
  [fuzz_spec_json]="-max_len=4096"
  [fuzz_model_config]="-max_len=4096"
  [fuzz_kernel_name]="-max_len=256"
  [fuzz_xqa_args]="-max_len=512"
  [fuzz_single_decode_args]="-max_len=512"
  [fuzz_store_open]="-max_len=32768"
  [fuzz_bundle_import]="-max_len=32768"
)

start=$SECONDS
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  # -O1 -gline-tables-only (as OSS-Fuzz builds): it compiles faster than -O2 -g, and
  # stack traces still have file:line.
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DATTNJIT_FUZZ=ON -DATTNJIT_BUILD_TESTS=OFF -DATTNJIT_BUILD_TOOLS=OFF \
    -DATTNJIT_SANITIZE=fuzzer-no-link,address,undefined \
    ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER}
fi

if [[ ${1:-} == --make-seeds ]]; then
  cmake --build "$build" -j2 --target make_store_seeds
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$build/tests/fuzz/make_store_seeds" "$tmp"
  store_dir=tests/fuzz/corpus/fuzz_store_open bundle_dir=tests/fuzz/corpus/fuzz_bundle_import
  mkdir -p "$store_dir" "$bundle_dir"
  # 512-byte pages: the same content in a quarter of the bytes, so mutations hit structure.
  shrink() { sqlite3 "$1" "PRAGMA journal_mode=DELETE; PRAGMA page_size=512; VACUUM;" >/dev/null; }
  shrink "$tmp/store.sqlite3"; shrink "$tmp/bundle.sqlite3"
  cp "$tmp/bundle.sqlite3" "$bundle_dir/two_entries.sqlite3"
  cp "$tmp/store.sqlite3" "$store_dir/two_entries.sqlite3"
  cp "$tmp/store.sqlite3" "$tmp/wal.sqlite3"
  sqlite3 "$tmp/wal.sqlite3" "PRAGMA journal_mode=WAL;" >/dev/null   # the header a live store has
  cp "$tmp/wal.sqlite3" "$store_dir/two_entries_wal.sqlite3"
  for f in "$tmp/store.sqlite3" "$tmp/bundle.sqlite3"; do             # one row fails its checksum
    sqlite3 "$f" "UPDATE entries SET cubin = x'00' WHERE key LIKE '%b';" 
  done
  cp "$tmp/store.sqlite3" "$store_dir/one_bad_row.sqlite3"
  cp "$tmp/bundle.sqlite3" "$bundle_dir/one_bad_row.sqlite3"
  sqlite3 "$tmp/foreign.sqlite3" "PRAGMA page_size=512; CREATE TABLE entries(key TEXT);"   # not ours
  for d in "$store_dir" "$bundle_dir"; do
    cp "$tmp/foreign.sqlite3" "$d/foreign.sqlite3"
    : >"$d/empty"
    head -c 100 "$store_dir/two_entries.sqlite3" >"$d/header_only"
  done
  ls -l "$store_dir" "$bundle_dir"
  exit 0
fi

nice cmake --build "$build" -j2 --target attnjit_fuzzers
echo "run_fuzzers: built in $((SECONDS - start)) s"

if (($#)); then
  targets=("$@")
else
  targets=()
  for src in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi

rm -rf "$out"
mkdir -p "$out"
# The store targets write a file per input: in memory (/dev/shm) they run about five times faster.
if [[ -z ${FUZZ_TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then FUZZ_TMPDIR=/dev/shm; fi
# One folder for the whole run, so what a crashed target leaves there goes too.
run_tmp=$(mktemp -d "${FUZZ_TMPDIR:-${TMPDIR:-/tmp}}/attnjit-fuzz-run-XXXXXX")
trap 'rm -rf "$run_tmp"' EXIT
export TMPDIR=$run_tmp
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One run: a copy of the seeds as its corpus (the committed seeds stay as they are).
run_one() {
  local t=$1 dir=$out/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$dir/corpus/"
  # Inputs that once crashed this target (tests/fuzz/crashes/<target>-*) run first, as regressions.
  for f in tests/fuzz/crashes/"$t"-*; do [[ -f $f ]] && cp "$f" "$dir/corpus/"; done
  local rc=0
  # shellcheck disable=SC2086  # extra flags split on purpose
  "$build/tests/fuzz/$t" -max_total_time="$time_s" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" ${extra[$t]:-} "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

running=0
for t in "${targets[@]}"; do
  [[ -x "$build/tests/fuzz/$t" ]] || { echo "run_fuzzers: no target $t" >&2; exit 1; }
  run_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
printf '%-26s %12s %10s %8s  %s\n' target executions exec/s corpus result
for t in "${targets[@]}"; do
  dir=$out/$t
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  corpus=$(find "$dir/corpus" -type f | wc -l)
  rc=$(cat "$dir/rc")
  result=ok
  if [[ $rc != 0 ]] || compgen -G "$dir/artifacts/*" >/dev/null; then
    result="FAILED (exit $rc): $(ls "$dir/artifacts" | tr '\n' ' ')"
    failed=1
  fi
  printf '%-26s %12s %10s %8s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$result"
done
if ((failed)); then
  for t in "${targets[@]}"; do
    if [[ $(cat "$out/$t/rc") != 0 ]]; then
      echo "---- $t: last lines of $out/$t/log"
      tail -40 "$out/$t/log"
    fi
  done
  echo "run_fuzzers: a fuzz target failed; its input is under $out/<target>/artifacts/" >&2
  exit 1
fi
echo "run_fuzzers: all ${#targets[@]} targets clean, $time_s s each ($((SECONDS - start)) s in all)"
