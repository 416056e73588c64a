#include "ops/decode/decode_launch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "attnjit/error.hpp"
#include "ops/common/launch.hpp"
#include "ops/common/validate.hpp"
#include "ops/decode/decode_generator.hpp"
#include "runtime/kernel_registry.hpp"
#include "util/env_knob.hpp"
#include "util/log.hpp"

namespace attnjit::ops {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int kMaxSplits = 256;  // templates/decode: Traits::kMaxSplits
constexpr int kSplitFixedCostTokens = 64;  // prologue, partial write and merge, in token-equivalents
constexpr int kMaxWaves = 4;  // splitting past ~4 waves only adds merge traffic
// A wave of a one-CTA-an-SM kernel past the first, in token-equivalents: its CTAs fill their
// pipelines cold (~10 us at ~22 ns a token, H100, B1 L64K; plan_splits).
constexpr int kColdWaveTokens = 512;

// ATTNJIT_DECODE_SPLITS=N forces the split count: a measuring knob for the
// split heuristic (attnjit-bench sweeps), read once; 0 or unset: the heuristic.
// A bad value throws (naming the variable) at every launch until it is fixed.
int forced_splits() {
  static const int n = util::env_knob("ATTNJIT_DECODE_SPLITS", 0, kMaxSplits).value_or(0);
  return n;
}
// ATTNJIT_DECODE_MIN_SPLIT_TOKENS=N lowers (or raises) the fewest tokens a split takes, for
// measuring short sequences' split counts (with ATTNJIT_DECODE_SPLITS, which the workspace
// bound, sized by it too, must allow); read once.
int min_split_tokens() {
  static const int n = util::env_knob("ATTNJIT_DECODE_MIN_SPLIT_TOKENS", 16, 1 << 20).value_or(kMinTokensPerSplit);
  return n;
}
}  // namespace

int decode_row_blocks(int group, int q_seq_len, int rows_per_cta) {
  return static_cast<int>(ceil_div(int64_t(group) * q_seq_len, std::max(rows_per_cta, 1)));
}

int64_t decode_base_ctas(const DecodeShape& s) {
  return int64_t(s.batch) * decode_head_ctas(s) * decode_row_blocks(s.group, s.q_seq_len, s.rows_per_cta);
}

int64_t decode_head_ctas(const DecodeShape& s) { return ceil_div(s.num_kv_heads, std::max(s.kv_heads_per_cta, 1)); }

int64_t decode_base_blocks16(const DecodeShape& s) {
  return int64_t(s.batch) * s.num_kv_heads * decode_row_blocks(s.group, s.q_seq_len, kDecodeRowsPerCta);
}

int choose_splits(int64_t base, int max_seq_len, int slots, int min_tokens) {
  if (base <= 0 || slots <= 0 || max_seq_len <= 0) return 1;
  // Splitting also pays when the grid is already a wave or more: 512 CTAs on 396
  // slots is two waves, the second a third full; three splits make four full ones.
  const int64_t cap = std::max<int64_t>(
      1, std::min<int64_t>({ceil_div(max_seq_len, std::max(min_tokens, 1)), ceil_div(kMaxWaves * int64_t(slots), base),
                            kMaxSplits}));
  // The smallest s in [1, cap] of least cost waves(s) * (ceil(L / s) + fixed). Within one
  // wave count the cost falls as s grows, so each wave's least cost is at its largest s, and
  // the smallest s of that cost is the first with the same ceil(L / s): a handful of wave
  // counts, not a loop over every s (which took ~0.4-0.8 us a launch at B1 L32K-128K).
  const int64_t L = max_seq_len;
  int best = 1;
  int64_t best_cost = INT64_MAX;
  for (int64_t w = ceil_div(base, slots); w <= ceil_div(base * cap, slots); ++w) {
    const int64_t lo = std::max<int64_t>(1, (w - 1) * slots / base + 1), hi = std::min<int64_t>(cap, w * slots / base);
    if (lo > hi) continue;  // no s has exactly w waves
    const int64_t q = ceil_div(L, hi), s = std::max(lo, ceil_div(L, q));
    const int64_t cost = w * (q + kSplitFixedCostTokens);
    if (cost < best_cost) {
      best_cost = cost;
      best = static_cast<int>(s);
    }
  }
  return best;
}

int fill_splits(int64_t base_ctas, int len, int sms, int granule) {
  if (base_ctas <= 0 || len <= 0 || sms <= 0) return 1;
  const int64_t by_tiles = ceil_div(len, std::max(granule, 1)), by_sms = sms / base_ctas;
  return static_cast<int>(std::clamp<int64_t>(std::min({by_tiles, by_sms, int64_t(kMaxFillSplits)}), 1, kMaxSplits));
}

int max_splits(const DecodeShape& s, int sm_count) {
  const int64_t base = decode_base_ctas(s);
  const int64_t chosen = std::max<int64_t>(
      1, std::min<int64_t>({ceil_div(s.max_seq_len, min_split_tokens()),
                            ceil_div(kMaxWaves * int64_t(sm_count) * kMaxBlocksPerSmForSplit, base), kMaxSplits}));
  return static_cast<int>(std::max<int64_t>(chosen, fill_splits(base, s.max_seq_len, sm_count, kMinSplitGranule)));
}

int decode_visible_len(const DecodeShape& s) {
  if (s.window_left < 0) return s.max_seq_len;
  // The union of the query rows' windows: row t (of q_seq_len) sees keys
  // [seq_len - q_seq_len + t - window_left, seq_len - q_seq_len + t]. The kernel
  // rounds its start down to a tile (decode_kv_begin); the up to granule - 1 keys
  // that adds fall to the last split (decode_split_range), so a window plans
  // exactly as a plain sequence of this length (planning over them as well made
  // every split longer: a 4096 window with 32-token tiles, 4 sequences on 264
  // slots, planned 8 splits of 544 tokens against the plain sequence's 8 of 512).
  const int64_t span = int64_t(s.window_left) + std::max(s.q_seq_len, 1);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(s.max_seq_len, span)));
}

SplitPlan plan_splits(const DecodeShape& s, int sms, int slots, int granule) {
  SplitPlan plan;
  // Splits follow the visible span, not the sequence: with a window the kernel
  // partitions [kv_begin, seq_len), so planning over max_seq_len would leave
  // most CTAs empty and the few busy ones long.
  const int len = decode_visible_len(s);
  if (forced_splits() > 0) {
    plan.splits = forced_splits();
  } else {
    const int64_t base = decode_base_ctas(s);
    plan.splits = choose_splits(base, len, slots, min_split_tokens());
    // A split-M CTA writes one partial per 16-row block: past ~kMaxWaves waves' worth
    // of 16-row partials a split only adds merge traffic (and decode_workspace_bound
    // counts partials so). A no-op at 16 rows per CTA, where choose_splits caps the same.
    const int64_t blocks = decode_base_blocks16(s);
    if (blocks > 0 && slots > 0)
      plan.splits = static_cast<int>(std::max<int64_t>(
          1, std::min<int64_t>(plan.splits, ceil_div(kMaxWaves * int64_t(slots), blocks))));
    // A grid of more CTAs than SMs runs at the pace of its busiest SMs: ceil(CTAs / SMs)
    // splits' tokens an SM. At batch 1, one CTA an SM is taken where it carries fewer tokens an
    // SM (by more than a granule: rounding, not a gain, separates closer plans), in two cases:
    // - fewer CTAs than slots, where some SMs hold two CTAs and others one. H100, B1 L6K g8,
    //   8 KV heads beside FlashInfer's XQA, us: 24 splits (192 CTAs) -> 16: bf16 18.2 -> 13.2,
    //   fp8 14.7 -> 10.5, hd64 p64 12.2 -> 8.9. (At L8K, 32 splits and 16 carry 512 tokens an
    //   SM alike, and 32 stays.)
    // - a kernel of one CTA an SM (slots <= sms), whose waves run one after another, each CTA
    //   filling its pipeline cold with nothing beside it to hide that: kColdWaveTokens a wave
    //   past the first. H100, B1 bf16 hd128 g8 with 32-token tiles, us: L64K 33 splits (two
    //   waves) 110.6 -> 16 splits 100.6, L128K 203.7 -> 191.7 (PERFORMANCE.md, forty-third
    //   session).
    // Batches keep their plan: the host knows only max_seq_len, and fewer splits leave a ragged
    // batch's long request to fewer CTAs (H100, hd256 g8, 8 KV heads, lens {65536, 300}: 33
    // splits 196 us, 8 splits 245 us; a uniform B2 gained 2%).
    const int64_t ctas = base * plan.splits;
    if (s.batch == 1 && ctas > sms && base <= sms && (ctas < slots || slots <= sms)) {
      const int64_t one = std::min<int64_t>(plan.splits, sms / base), waves = ceil_div(ctas, sms);
      const int64_t cold = slots <= sms ? (waves - 1) * kColdWaveTokens : 0;
      if (ceil_div(len, one) + granule < waves * ceil_div(len, plan.splits) + cold) plan.splits = static_cast<int>(one);
    }
    // Within the cap above: fill makes at most sms / base CTAs, and a split-M CTA at most
    // four 16-row blocks, so at most 4 x sms partials, under kMaxWaves x slots.
    plan.splits = std::max(plan.splits, fill_splits(base, len, sms, granule));
  }
  const int tile = std::max(granule, 1);
  plan.tokens_per_split = static_cast<int>(ceil_div(ceil_div(len, plan.splits), tile) * tile);
  plan.splits = static_cast<int>(ceil_div(len, plan.tokens_per_split));
  return plan;
}

bool decode_batch1_takes_tile32(const spec::KernelSpec& spec, const DecodeShape& shape, int sms) {
  if (shape.batch != 1 || shape.q_seq_len != 1 || sms <= 0 || decode_visible_len(shape) <= kBatch1Tile32AboveTokens)
    return false;
  const std::optional<DecodeTiling> t = decode_batch1_tile32(spec);
  if (!t) return false;
  const int slots = sms * std::clamp(t->min_blocks, 1, kMaxBlocksPerSmForSplit);
  return decode_base_ctas(shape) * plan_splits(shape, sms, slots, t->tile).splits <= sms;
}

size_t decode_workspace_bound(const DecodeShape& largest, int sm_count) {
  const int64_t base = decode_base_blocks16(largest);
  const int64_t by_length = std::min<int64_t>(ceil_div(largest.max_seq_len, min_split_tokens()), kMaxSplits);
  const int64_t by_waves = kMaxWaves * int64_t(sm_count) * kMaxBlocksPerSmForSplit;
  if (base <= 0) return 0;
  const int64_t split_partials = by_length > 1 ? std::min(base * by_length, by_waves + base - 1) : 0;
  // Short sequences' fill (fill_splits) makes at most one CTA an SM, each of at most
  // kDecodeSplitMRows / 16 blocks, in a call with fewer requests too; and never more splits
  // than 16-token tiles.
  const int64_t tiles = ceil_div(largest.max_seq_len, kMinSplitGranule);
  const int64_t fill_partials =
      tiles > 1 ? std::min<int64_t>(base * tiles, int64_t(kDecodeSplitMRows / kDecodeRowsPerCta) * sm_count) : 0;
  const int64_t partials = std::max(split_partials, fill_partials);
  return static_cast<size_t>(partials) * decode_partial_floats(largest.head_dim) * sizeof(float);
}

size_t decode_workspace_bytes(const DecodeShape& s, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(decode_base_blocks16(s)) * splits * decode_partial_floats(s.head_dim) * sizeof(float);
}

// One per 16-row block, which is at least one per CTA (the kernel indexes them by
// CTA row block), so the count xqa_semaphore_count gives never depends on the kernel.
size_t decode_semaphore_count(const DecodeShape& s) { return static_cast<size_t>(decode_base_blocks16(s)); }

void require_caller_scratch(const DecodeLaunch& l, int splits) {
  if (splits <= 1) return;
  const size_t need_ws = decode_workspace_bytes(l.shape, splits);
  const size_t need_sem = decode_semaphore_count(l.shape);
  ATTNJIT_REQUIRE(l.workspace && l.workspace_bytes >= need_ws, l.workspace_name,
                  fmt::format(">= {} bytes for this call ({} splits; xqa_workspace_bytes sizes it)", need_ws, splits),
                  l.workspace ? fmt::format("{} bytes", l.workspace_bytes) : std::string("none"));
  ATTNJIT_REQUIRE(l.semaphores && l.semaphore_count >= need_sem, l.semaphores_name,
                  fmt::format(">= {} uint32 counters (xqa_semaphore_count sizes them)", need_sem),
                  l.semaphores ? fmt::format("{}", l.semaphore_count) : std::string("none"));
}

void require_rows_fit_the_tile(const spec::KernelSpec& s, const DecodeShape& shape) {
  const bool int_kv = s.kv_dtype == DType::kInt8 || s.kv_dtype == DType::kInt32;  // the dtypes with a transposed tile
  const int pack = decode_kv_heads_per_cta(s);
  if (int_kv && int64_t(shape.group) * pack * shape.q_seq_len > 8 && decode_tiling(s).transposed)
    throw Error(ErrorCode::kInternal,
                fmt::format("{}: a transposed-tile kernel holds 8 query rows, not q_seq_len {} x group {} x {} KV heads",
                            s.name(), shape.q_seq_len, shape.group, pack));
}

int launch_decode(Runtime& rt, const DecodeLaunch& l, DecodeParams& p, Stream stream) {
  DecodeShape shape = l.shape;
  shape.kv_heads_per_cta = decode_kv_heads_per_cta(*l.spec);  // the kernel's, never the caller's
  require_rows_fit_the_tile(*l.spec, shape);
  auto& registry = rt.registry();
  CUstream cs = reinterpret_cast<CUstream>(stream);
  const int device = l.device >= 0 ? l.device : driver::current_device();
  const runtime::LoadedKernel& k = registry.kernel(*l.spec, device, cs);
  const int sms = l.sm_count > 0 ? l.sm_count : k.num_sms;
  const int slots = sms * std::clamp(k.blocks_per_sm, 1, kMaxBlocksPerSmForSplit);

  const SplitPlan plan = plan_splits(shape, sms, slots, k.launch.split_granule);
  const int splits = plan.splits, tps = plan.tokens_per_split;

  void* workspace = l.workspace;
  unsigned* semaphores = l.semaphores;
  if (splits > 1 && l.use_runtime_scratch) {
    auto scratch = registry.scratch(device, decode_workspace_bytes(l.shape, splits), decode_semaphore_count(l.shape), cs);
    workspace = scratch.workspace;
    semaphores = scratch.semaphores;
  } else {
    require_caller_scratch(l, splits);  // no-op for one split
  }
  p.workspace = static_cast<float*>(workspace);
  p.semaphores = semaphores;
  p.num_splits = splits;
  p.tokens_per_split = tps;
  p.row_blocks = decode_row_blocks(l.shape.group, l.shape.q_seq_len, l.shape.rows_per_cta);
  p.rows_per_cta = l.shape.rows_per_cta;

  Grid grid;
  grid.x = static_cast<unsigned>(splits);
  grid.y = static_cast<unsigned>(decode_head_ctas(shape) * p.row_blocks);
  grid.z = static_cast<unsigned>(l.shape.batch);
  // What the plan chose, per launch: ATTNJIT_LOG_LEVEL=trace (the name is built only then).
  if (util::log().should_log(spdlog::level::trace))
    util::log().trace("decode launch {}: {} splits of {} tokens, grid {}x{}x{}, {} rows a CTA, {} SMs x {} CTAs",
                      l.spec->name(), splits, tps, grid.x, grid.y, grid.z, p.rows_per_cta, sms, k.blocks_per_sm);
  launch_kernel(k, grid, cs, l.pdl, p);
  return splits;
}

}  // namespace attnjit::ops
