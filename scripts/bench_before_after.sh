#!/usr/bin/env bash
# Times two builds of attnjit-bench in one GPU session, alternating rounds, so a
# before/after comparison of a change is a ratio taken on one GPU at one time.
# Usage: scripts/bench_before_after.sh BEFORE_DIR AFTER_DIR [bench args...]
#   each DIR holds attnjit-bench and its libattnjit.so*, and may hold cache/cubins.sqlite3.gz
#   (a store prewarmed on the build machine, so neither side compiles here);
#   ROUNDS (default 2); ROWS, the rows kept (default: xqa, single_decode and MLA rows).
#   A template change alone: DIR's attnjit-bench may be a wrapper that runs the same binary
#   with ATTNJIT_TEMPLATE_DIR set to the old templates (the params headers must match).
#   scripts/ba_summary.py LOG pairs the rows: each round's TB/s before and after, and the ratio.
set -uo pipefail
before=$1 after=$2
shift 2
for round in $(seq 1 "${ROUNDS:-2}"); do
  for side in before after; do
    dir=$([ $side = before ] && echo "$before" || echo "$after")
    cache=/tmp/attnjit-bench-$(basename "$dir")  # one store per build, across calls with other pairs
    mkdir -p "$cache" && chmod 700 "$cache"
    if [ -f "$dir/cache/cubins.sqlite3.gz" ] && [ ! -f "$cache/cubins.sqlite3" ]; then
      gzip -dc "$dir/cache/cubins.sqlite3.gz" >"$cache/cubins.sqlite3" && chmod 600 "$cache/cubins.sqlite3"
    fi
    echo "== $side (round $round)"
    LD_LIBRARY_PATH="$dir:/usr/local/cuda/lib64" ATTNJIT_CACHE_DIR=$cache "$dir/attnjit-bench" "$@" 2>&1 |
      grep -E "${ROWS:-^(xqa|single|h[0-9])}"
  done
done
