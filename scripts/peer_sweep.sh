#!/usr/bin/env bash
# The xqa shape sweep against FlashInfer's own XQA kernels (issue 9, item 5).
#
#   scripts/peer_sweep.sh build BUILD_DIR STAGE_DIR   (here: nvcc + PyPI; builds
#       ../shared/peers/flashinfer_xqa binaries for every variant into STAGE_DIR/peers)
#   scripts/peer_sweep.sh run STAGE_DIR               (GPU machine: runs every shape,
#       one line each, then the worst ratios; ratio = FlashInfer time / attnjit time,
#       so < 1.0 means attnjit is slower)
#
# FlashInfer fixes dtype, group, page and head_dim at compile time, hence one binary per
# variant; HND, batch, lengths, windows and sinks are run-time flags.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peer=${PEER_DIR:-$here/../shared/peers/flashinfer_xqa}

# NAME:QDTYPE:KV:GROUP:PAGE:HEAD_DIM[:sm90][:window][:spec]
variants=(
  bf16_g8_p32_d128:bf16:bf16:8:32:128
  fp8sm90_g8_p32_d128:bf16:fp8:8:32:128:sm90
  fp8_g8_p32_d128:bf16:fp8:8:32:128
  bf16_g16_p128_d128:bf16:bf16:16:128:128
  bf16_g4_p16_d128:bf16:bf16:4:16:128
  bf16_g8_p64_d64:bf16:bf16:8:64:64
  bf16_g8_p32_d256:bf16:bf16:8:32:256
  fp16_g8_p32_d128:fp16:fp16:8:32:128
  bf16w_g8_p32_d128:bf16:bf16:8:32:128:window
  bf16spec_g8_p32_d128:bf16:bf16:8:32:128:spec
)

# VARIANT|ARGS, one run each.
shapes=(
  "bf16_g8_p32_d128|--hkv 8 --lens 32768"
  "bf16_g8_p32_d128|--hkv 8 --lens 8192"
  "bf16_g8_p32_d128|--hkv 8 --lens 1024"
  "bf16_g8_p32_d128|--hkv 8 --lens 2048"
  "bf16_g8_p32_d128|--hkv 8 --batch 4 --lens 4096"
  "bf16_g8_p32_d128|--hkv 8 --batch 16 --lens 8192"
  "bf16_g8_p32_d128|--hkv 8 --batch 64 --lens 4096"
  "bf16_g8_p32_d128|--hkv 8 --batch 128 --lens 2048"
  "bf16_g8_p32_d128|--hkv 8 --batch 16 --lens 8192 --hnd"
  "bf16_g8_p32_d128|--hkv 8 --lens 300,5000,17,12000,2048,777,9000,64"
  "bf16_g8_p32_d128|--hkv 8 --batch 16 --lens 8192 --sinks"
  "fp8sm90_g8_p32_d128|--hkv 8 --lens 32768"
  "fp8sm90_g8_p32_d128|--hkv 8 --lens 2048"
  "fp8sm90_g8_p32_d128|--hkv 8 --batch 16 --lens 8192"
  "fp8sm90_g8_p32_d128|--hkv 8 --batch 64 --lens 4096"
  "fp8sm90_g8_p32_d128|--hkv 8 --batch 128 --lens 2048"
  "fp8_g8_p32_d128|--hkv 8 --batch 128 --lens 2048"
  "bf16_g16_p128_d128|--hkv 4 --batch 16 --lens 8192"
  "bf16_g16_p128_d128|--hkv 4 --batch 16 --lens 8192 --hnd"
  "bf16_g16_p128_d128|--hkv 4 --batch 64 --lens 4096 --hnd"
  "bf16_g4_p16_d128|--hkv 8 --batch 32 --lens 4096"
  "bf16_g8_p64_d64|--hkv 8 --batch 32 --lens 8192"
  "bf16_g8_p64_d64|--hkv 8 --lens 32768"
  "bf16_g8_p32_d256|--hkv 8 --batch 32 --lens 4096"
  "fp16_g8_p32_d128|--hkv 8 --batch 64 --lens 4096"
  "bf16w_g8_p32_d128|--hkv 8 --batch 4 --lens 8192 --window 4096"
  "bf16w_g8_p32_d128|--hkv 8 --batch 4 --lens 32768 --window 4096"
  "bf16w_g8_p32_d128|--hkv 8 --batch 4 --lens 131072 --window 4096"
  "bf16spec_g8_p32_d128|--hkv 8 --batch 16 --lens 8192 --qlen 2"
  "bf16spec_g8_p32_d128|--hkv 8 --batch 16 --lens 8192 --qlen 4"
  "bf16spec_g8_p32_d128|--hkv 8 --batch 16 --lens 8192 --qlen 8"
)

case ${1:-} in
  build)
    build=$2 stage=$3
    mkdir -p "$stage/peers"
    FI_WORK=${FI_WORK:-/tmp/flashinfer-peer} "$peer/build.sh" "$here" "$build" "$stage/peers" "${variants[@]}"
    strip --strip-debug "$stage"/peers/* 2>/dev/null || true
    ;;
  run)
    stage=$(cd "$2" && pwd)
    export LD_LIBRARY_PATH=$stage${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log=$(mktemp)
    for s in "${shapes[@]}"; do
      name=${s%%|*} args=${s#*|}
      # shellcheck disable=SC2086
      "$stage/peers/$name" $args --iters "${ITERS:-50}" 2>&1 | tee -a "$log" || echo "FAILED $name $args" | tee -a "$log"
    done
    echo "--- worst ratios (FlashInfer time / attnjit time; < 1.0: attnjit slower)"
    grep -o 'ratio=[0-9.]*' "$log" | paste -d' ' - <(grep 'ratio=' "$log" | cut -d'|' -f1) | sort -t= -k2 -n | head -8
    grep -c 'bad=0 nan=0' "$log" | xargs -I{} echo "{} of ${#shapes[@]} shapes in parity"
    ! grep -q FAILED "$log"
    ;;
  *) sed -n 2,11p "$0"; exit 2 ;;
esac
