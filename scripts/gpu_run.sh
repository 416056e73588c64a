#!/usr/bin/env bash
# The whole GPU cycle in one call on the GPU machine, over a build staged with
# scripts/stage_gpu.sh: GPU tests, a compute-sanitizer subset, the benchmark
# (with start-up costs) and the PyTorch SDPA peers; short table last.
# Usage: scripts/gpu_run.sh [STAGE_DIR] [gtest filter]
#   SKIP_TESTS=1 SKIP_SANITIZER=1 SKIP_BENCH=1 SKIP_PEERS=1 SKIP_PEER_SWEEP=1 SKIP_FLASHMLA=1 skip a part.
#   STAGE_DIR/flashmla.tar.gz (scripts/stage_flashmla.sh) adds FlashMLA beside the MLA benchmark.
#   SANITIZER_FILTER sets the compute-sanitizer subset (a gtest filter).
#   BENCH_ARGS="--fia" runs only that benchmark (into bench_fia.log) instead of the usual set.
#   STAGE_DIR/peers (scripts/peer_sweep.sh build) adds the FlashInfer XQA sweep.
#   NCU=1 profiles one xqa launch per benchmark shape with Nsight Compute
#   (--clock-control none: the clocks stay as found) into $OUT/ncu.log;
#   NCU_ARGS picks the bench cases (default --xqa; ';' separates several profiles),
#   NCU_KERNEL the kernel (default attnjit_decode), NCU_SKIP/NCU_COUNT the launches
#   (default 10/4; NCU_SKIP may list one per case, ';'-separated). NCU_FULL=1 takes
#   the full section set and also writes each profile's report and its
#   per-instruction SASS table (stall samples) to $OUT. Every profile also reads the
#   DRAM and L2 counters (bytes from DRAM, L2 sectors and hit rate).
#   NCU_PEER="VARIANT|ARGS;..." profiles a FlashInfer peer binary (STAGE_DIR/peers/VARIANT,
#   e.g. "bf16_g8_p32_d128|--hkv 8 --batch 4 --lens 4096"): both sides' kernels, the same
#   counters, into $OUT/ncu_peer.log, so the two DRAM pictures sit side by side.
#   EXPERIMENT="ATTNJIT_DECODE_TILE=32 ATTNJIT_DECODE_LAZY_RESCALE=1" also runs the
#   decode GPU tests and the benchmark with those tuning knobs set.
#   SWEEP="KNOB=V KNOB=V;KNOB=V|--xqa --kv fp8_e4m3;..." runs attnjit-bench once
#   per ';'-separated setting, with the arguments after '|' (else $SWEEP_ARGS).
#   SWEEP_ROUNDS=N repeats the list (rounds rotate its order); a setting may name another template
#   set (ATTNJIT_TEMPLATE_DIR=$PWD/gpu-stage/tpl-before or tpl-NAME, stage_gpu.sh's BEFORE_TEMPLATES
#   and ALT_TEMPLATES).
set -uo pipefail
STAGE=${1:-gpu-stage}
FILTER=${2:-*}
export LD_LIBRARY_PATH="$PWD/$STAGE:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export ATTNJIT_CACHE_DIR=${ATTNJIT_CACHE_DIR:-/tmp/attnjit-cache}
mkdir -p "$ATTNJIT_CACHE_DIR" && chmod 700 "$ATTNJIT_CACHE_DIR"
# A store prewarmed on the build machine (scripts/stage_gpu.sh with PREWARM=1).
if [ -f "$STAGE/cache/cubins.sqlite3.gz" ] && [ ! -f "$ATTNJIT_CACHE_DIR/cubins.sqlite3" ]; then
  gzip -dc "$STAGE/cache/cubins.sqlite3.gz" >"$ATTNJIT_CACHE_DIR/cubins.sqlite3"
  chmod 600 "$ATTNJIT_CACHE_DIR"/cubins.sqlite3
fi
OUTDIR=${OUT:-/tmp/attnjit-out}
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # Info logging names every NVRTC compile: a prewarmed store should leave none.
  ATTNJIT_LOG_LEVEL=info "$STAGE/tests/attnjit_gpu_tests" --gtest_filter="$FILTER" >"$OUTDIR/gpu_tests.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error|tests? from .* ran" "$OUTDIR/gpu_tests.log" | tail -30
  # Compiles per test. RuntimeGpu tests start from an empty store on purpose (cold
  # compile, capture miss, second process) and the Hopper driver tests compile
  # probe kernels without a store: every other compile is a kernel the staged
  # store should have served.
  awk '/^\[ RUN      \]/ {t=$4} /compiled .* in .* ms/ {print t": "$0}' "$OUTDIR/gpu_tests.log" >"$OUTDIR/compiles.log"
  compiles=$(grep -vcE "^(RuntimeGpu|DriverHopperGpuTest)\." "$OUTDIR/compiles.log")
  echo "NVRTC compiles during the GPU tests: $(wc -l <"$OUTDIR/compiles.log") ($compiles outside the cold-store tests)"
  # A store staged on the build machine (same NVRTC) must serve every kernel.
  if [ -f "$STAGE/cache/cubins.sqlite3.gz" ] && [ "$compiles" != 0 ]; then
    echo "FAIL: the staged store left $compiles kernels to compile here:"
    grep -vE "^(RuntimeGpu|DriverHopperGpuTest)\." "$OUTDIR/compiles.log" | head -5
    status=1
  fi
fi
if [ "${SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  subset=${SANITIZER_FILTER:-'XqaGpu.Basic:SingleDecodeGpu.ProofKernel*:RuntimeGpu.Capture*:MlaGpu.Basic:FiaGpu.BasicBsndCausalGqa'}
  for tool in memcheck racecheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 "$STAGE/tests/attnjit_gpu_tests" \
      --gtest_filter="$subset" >"$OUTDIR/sanitizer_$tool.log" 2>&1 || status=1
    echo "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUTDIR/sanitizer_$tool.log" | tail -1)"
  done
fi
if [ "${SKIP_PEERS:-0}" != 1 ] && command -v python3 >/dev/null; then
  PYTHONUNBUFFERED=1 python3 scripts/peer_sdpa.py >"$OUTDIR/peers.log" 2>&1 || true
  # cuDNN and FA2 prefill beside attnjit-bench --fia (issues 11 and 13).
  PYTHONUNBUFFERED=1 python3 scripts/peer_sdpa_prefill.py >"$OUTDIR/peers_prefill.log" 2>&1 || true
fi
if [ -n "${BENCH_ARGS:-}" ] && [ -x "$STAGE/tools/bench/attnjit-bench" ]; then
  "$STAGE/tools/bench/attnjit-bench" $BENCH_ARGS >"$OUTDIR/bench_fia.log" 2>&1 || status=1  # only these cases
elif [ "${SKIP_BENCH:-0}" != 1 ] && [ -x "$STAGE/tools/bench/attnjit-bench" ]; then
  "$STAGE/tools/bench/attnjit-bench" --startup >"$OUTDIR/bench.log" 2>&1 || status=1
  "$STAGE/tools/bench/attnjit-bench" --mla >>"$OUTDIR/bench.log" 2>&1 || status=1  # issue 10: MLA decode
  "$STAGE/tools/bench/attnjit-bench" --fia >"$OUTDIR/bench_fia.log" 2>&1 || status=1  # issues 11, 13: FIA
fi
ncu_memory=dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sector_op_read_hit_rate.pct,lts__t_requests_srcunit_tex_op_read.sum
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null && [ -x "$STAGE/tools/bench/attnjit-bench" ]; then
  # One profile per ';'-separated NCU_ARGS entry; the SM-active spread shows tail imbalance.
  IFS=';' read -ra ncu_cases <<<"${NCU_ARGS:---xqa}"
  sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
            --section WarpStateStats --section SchedulerStats)
  [ "${NCU_FULL:-0}" = 1 ] && sections=(--set full --import-source no)
  IFS=';' read -ra ncu_skips <<<"${NCU_SKIP:-10}"
  n=0
  for case_args in "${ncu_cases[@]}"; do
    skip=${ncu_skips[$n]:-${ncu_skips[-1]}}
    n=$((n + 1))
    echo "== ncu: $case_args" | tee -a "$OUTDIR/ncu.log"
    report=()
    [ "${NCU_FULL:-0}" = 1 ] && report=(-f -o "$OUTDIR/ncu_$n")
    ncu --clock-control none --kernel-name "${NCU_KERNEL:-attnjit_decode}" --launch-skip "$skip" \
      --launch-count "${NCU_COUNT:-4}" "${sections[@]}" "${report[@]}" \
      --metrics sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,$ncu_memory \
      "$STAGE/tools/bench/attnjit-bench" $case_args --iters 1 >"$OUTDIR/ncu_case.log" 2>&1 || true
    if [ "${NCU_FULL:-0}" = 1 ] && [ -f "$OUTDIR/ncu_$n.ncu-rep" ]; then
      ncu --import "$OUTDIR/ncu_$n.ncu-rep" --page details >"$OUTDIR/ncu_case.log" 2>&1 || true
      ncu --import "$OUTDIR/ncu_$n.ncu-rep" --page source --csv --print-source sass >"$OUTDIR/ncu_${n}_sass.csv" 2>&1 || true
    fi
    cat "$OUTDIR/ncu_case.log" >>"$OUTDIR/ncu.log"
    grep -E "^  attnjit|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Issued Ipc|No Eligible|sm__cycles_active|gpc__cycles|dram__|lts__" \
      "$OUTDIR/ncu_case.log" | head -30
  done
fi
if [ -n "${NCU_PEER:-}" ] && command -v ncu >/dev/null && [ -d "$STAGE/peers" ]; then
  IFS=';' read -ra peer_cases <<<"$NCU_PEER"
  for entry in "${peer_cases[@]}"; do
    variant=${entry%%|*} args=${entry#*|}
    echo "== ncu peer: $variant $args" | tee -a "$OUTDIR/ncu_peer.log"
    # The harness's warm-up and parity calls come first; a few timed calls of each side follow.
    ncu --clock-control none --launch-skip "${NCU_PEER_SKIP:-6}" --launch-count "${NCU_PEER_COUNT:-4}" \
      --section SpeedOfLight --metrics "sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,$ncu_memory" \
      "$STAGE/peers/$variant" $args --iters 4 >"$OUTDIR/ncu_case.log" 2>&1 || true
    cat "$OUTDIR/ncu_case.log" >>"$OUTDIR/ncu_peer.log"
    grep -E "^  [a-zA-Z_]+.*\(|Duration|DRAM Throughput|sm__cycles_active|dram__|lts__" "$OUTDIR/ncu_case.log" | head -40
  done
fi
if [ -n "${EXPERIMENT:-}" ]; then
  env $EXPERIMENT "$STAGE/tests/attnjit_gpu_tests" --gtest_filter='XqaGpu.*:SingleDecodeGpu.ProofKernel*:SingleDecodeGpu.Features' \
    >"$OUTDIR/gpu_tests_experiment.log" 2>&1 || status=1
  echo "experiment ($EXPERIMENT) tests: $(grep -E '^\[  (PASSED|FAILED)' "$OUTDIR/gpu_tests_experiment.log" | tr '\n' ' ')"
  [ -x "$STAGE/tools/bench/attnjit-bench" ] && env $EXPERIMENT "$STAGE/tools/bench/attnjit-bench" \
    >"$OUTDIR/bench_experiment.log" 2>&1 || true
fi
if [ -n "${SWEEP:-}" ] && [ -x "$STAGE/tools/bench/attnjit-bench" ]; then
  IFS=';' read -ra settings <<<"$SWEEP"
  # SWEEP_ROUNDS=N walks the whole list N times, so each setting's rows alternate with the others';
  # round r starts at setting r - 1 (mod the list), so no setting always runs first or last.
  for round in $(seq 1 "${SWEEP_ROUNDS:-1}"); do
    for i in "${!settings[@]}"; do
      setting=${settings[$(((i + round - 1) % ${#settings[@]}))]}
      knobs=${setting%%|*} args=${SWEEP_ARGS:-}
      [[ "$setting" == *"|"* ]] && args=${setting#*|}
      echo "== sweep round $round [$(date +%T)]: ${knobs:-defaults} ($args)" >>"$OUTDIR/sweep.log"
      # Row lines of every benchmark (the FIA ones are indented).
      env $knobs "$STAGE/tools/bench/attnjit-bench" $args 2>&1 | grep -E "^ *(xqa|single|B[0-9]|h[0-9]|full |causal |bf16 |int[48] )" >>"$OUTDIR/sweep.log"
    done
  done
fi
# FlashMLA beside attnjit's MLA decode (staged by scripts/stage_flashmla.sh): built here
# (about 2 minutes of nvcc), then timed on attnjit-bench --mla's bf16 shapes.
if [ "${SKIP_FLASHMLA:-0}" != 1 ] && [ -f "$STAGE/flashmla.tar.gz" ]; then
  fm=/tmp/attnjit-flashmla
  [ -d $fm/flashmla ] || { mkdir -p $fm && tar -xzf "$STAGE/flashmla.tar.gz" -C $fm; }
  (cd $fm/flashmla && { [ -n "$(ls flash_mla/cuda*.so 2>/dev/null)" ] ||
    CPLUS_INCLUDE_PATH=/usr/local/cuda/include/cccl FLASH_MLA_DISABLE_SM100=1 NVCC_THREADS=4 MAX_JOBS=16 \
      python3 setup.py build_ext --inplace >"$OUTDIR/flashmla_build.log" 2>&1; }) &&
    PYTHONPATH=$fm/flashmla PYTHONUNBUFFERED=1 python3 scripts/peer_flashmla.py >"$OUTDIR/peer_flashmla.log" 2>&1 ||
    echo "FlashMLA peer failed: $(tail -3 "$OUTDIR/flashmla_build.log" "$OUTDIR/peer_flashmla.log" 2>/dev/null)"
fi
# FlashInfer's own XQA kernels beside attnjit (binaries from scripts/peer_sweep.sh build).
if [ "${SKIP_PEER_SWEEP:-0}" != 1 ] && [ -d "$STAGE/peers" ]; then
  scripts/peer_sweep.sh run "$STAGE" >"$OUTDIR/peer_sweep.log" 2>&1 || status=1
fi
[ -f "$OUTDIR/peers.log" ] && cat "$OUTDIR/peers.log"
[ -f "$OUTDIR/peer_sweep.log" ] && sed -n '/--- worst ratios/,$p' "$OUTDIR/peer_sweep.log"
[ -f "$OUTDIR/peers_prefill.log" ] && cat "$OUTDIR/peers_prefill.log"
[ -f "$OUTDIR/bench_fia.log" ] && cat "$OUTDIR/bench_fia.log"
[ -f "$OUTDIR/bench.log" ] && tail -40 "$OUTDIR/bench.log"
[ -f "$OUTDIR/peer_flashmla.log" ] && cat "$OUTDIR/peer_flashmla.log"
[ -f "$OUTDIR/bench_experiment.log" ] && echo "== experiment: $EXPERIMENT" && tail -16 "$OUTDIR/bench_experiment.log"
[ -f "$OUTDIR/sweep.log" ] && python3 scripts/sweep_summary.py "$OUTDIR/sweep.log"
exit $status
