#!/usr/bin/env bash
# Stages FlashMLA (deepseek-ai/FlashMLA) with the CUTLASS its submodule pins into
# STAGE/flashmla.tar.gz (~30 MB of headers and sources packed small enough to carry), for gpu_run.sh to build there and time beside attnjit-bench --mla
# (scripts/peer_flashmla.py). A peer to measure against, not library code.
# Usage: scripts/stage_flashmla.sh FLASHMLA_GIT_DIR CUTLASS_GIT_DIR [STAGE]
#   (bare or normal git directories of the two public repositories)
set -euo pipefail
fm=$1 cutlass=$2 stage=${3:-gpu-stage}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dst="$tmp/flashmla"
mkdir -p "$dst"
git --git-dir="$fm" archive HEAD | tar -x -C "$dst"
pin=$(git --git-dir="$fm" ls-tree HEAD csrc/cutlass | awk '{print $3}')
mkdir -p "$dst/csrc/cutlass"
# Headers only: FlashMLA includes cutlass/include and tools/util/include.
git --git-dir="$cutlass" archive "$pin" include tools/util/include | tar -x -C "$dst/csrc/cutlass"
# setup.py runs `git submodule update`: without a .git there it is a harmless no-op error.
echo "FlashMLA $(git --git-dir="$fm" rev-parse --short HEAD), CUTLASS ${pin:0:9}" >"$dst/STAGED"
tar -czf "$stage/flashmla.tar.gz" -C "$tmp" flashmla
du -sh "$stage/flashmla.tar.gz"
