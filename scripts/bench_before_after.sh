#!/usr/bin/env bash
# Times two builds of attnjit-bench in one GPU session, alternating rounds, so a
# before/after comparison of a change is a ratio taken on one GPU at one time.
# Usage: scripts/bench_before_after.sh BEFORE_DIR AFTER_DIR [bench args...]
#   each DIR holds attnjit-bench and its libattnjit.so*; ROUNDS (default 2).
set -uo pipefail
before=$1 after=$2
shift 2
for round in $(seq 1 "${ROUNDS:-2}"); do
  for side in before after; do
    dir=$([ $side = before ] && echo "$before" || echo "$after")
    cache=/tmp/attnjit-bench-$side
    mkdir -p "$cache" && chmod 700 "$cache"
    echo "== $side (round $round)"
    LD_LIBRARY_PATH="$dir:/usr/local/cuda/lib64" ATTNJIT_CACHE_DIR=$cache "$dir/attnjit-bench" "$@" 2>&1 |
      grep -E "^(xqa|single)"
  done
done
