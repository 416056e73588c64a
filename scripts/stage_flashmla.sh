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
# A snapshot mirror may lack large blobs outside these paths (images), which makes git archive
# exit non-zero after it has written them all: check the count of files instead.
git --git-dir="$cutlass" archive "$pin" include tools/util/include 2>/dev/null | tar -x -C "$dst/csrc/cutlass" || true
want=$(git --git-dir="$cutlass" ls-tree -r --name-only "$pin" include tools/util/include | wc -l)
got=$(find "$dst/csrc/cutlass" -type f | wc -l)
[ "$want" = "$got" ] || { echo "CUTLASS headers: $got of $want files exported" >&2; exit 1; }
# setup.py runs `git submodule update`: without a .git there it is a harmless no-op error.
echo "FlashMLA $(git --git-dir="$fm" rev-parse --short HEAD), CUTLASS ${pin:0:9}" >"$dst/STAGED"
tar -czf "$stage/flashmla.tar.gz" -C "$tmp" flashmla
du -sh "$stage/flashmla.tar.gz"
