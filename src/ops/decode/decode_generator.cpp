// The decode family: can_implement, the generator and the tiling they share,
// the backend table, and the family's registration.
#include "ops/decode/decode_generator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include "attnjit/error.hpp"
#include "decode/decode_params.cuh"
#include "ops/decode/decode_launch.hpp"
#include "render/renderer.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

namespace {

// Tuning knobs for experiments (defaults are the measured configuration): each
// one lands in the rendered source, so the cache key follows it. A bad value is
// an Error naming the variable, never a silent other setting.
constexpr int kMaxRingKb = 1024;  // above every arch's shared memory; * 1024 still fits int
constexpr int kMaxSplitDStages = 8;

// Past head_dim 256 the warps split the output dims over one CTA-wide ring
// (DecodeTraits::kSplitD, templates/decode/decode_split_d.cuh).
bool split_d(const spec::KernelSpec& s) { return s.head_dim_qk > 256; }

constexpr int kMaxSplitMStages = 12;

// Spec-decode kernels with head_dim <= 256 can also hold 64 query rows per CTA
// (split-M, templates/decode/decode_split_m.cuh), which the launch takes when a
// request has more than 16 rows (group x q_seq_len). Not with RoPE or an fp8 tile
// widened in shared memory (the CTA ring reads K/V as stored).
// ATTNJIT_DECODE_SPLIT_M=0 renders and launches without it, for A/B measuring.
bool split_m_eligible(const spec::KernelSpec& s) {
  const bool fp8 = dtype_size(s.kv_dtype) == 1;
  if (s.mask != spec::MaskMode::kCustom || split_d(s) ||
      s.has(spec::feature::kKTokenScale | spec::feature::kVTokenScale) ||
      s.pos_encoding == spec::PosEncoding::kRopeLlama || (fp8 && s.head_dim_qk % 32 != 0))
    return false;
  return util::env_knob("ATTNJIT_DECODE_SPLIT_M", 0, 1, "0 or 1").value_or(1) == 1;
}

// Dual-M (32 rows per CTA, two M tiles per warp: templates/decode/decode_dual_m.cuh)
// rides on split-M's kernels at head_dim <= 128 with 16-bit or fp8 K/V (a warp holds O
// for 32 rows). ATTNJIT_DECODE_DUAL_M=0 renders and launches without it, for A/B measuring.
bool dual_m_eligible(const spec::KernelSpec& s) {
  const bool int_kv = s.kv_dtype == DType::kInt8 || s.kv_dtype == DType::kInt32;
  return s.head_dim_qk <= 128 && !int_kv &&
         util::env_knob("ATTNJIT_DECODE_DUAL_M", 0, 1, "0 or 1").value_or(1) == 1;
}

// stages_floor: a ring of at least this many stages where shared memory holds it (0: the
// default budget decides).
DecodeTiling tiling_for(const spec::KernelSpec& s, int tile, bool lazy, int l2_prefetch, int stages_floor = 0) {
  DecodeTiling t;
  t.tile = tile;
  t.lazy_rescale = lazy;
  t.l2_prefetch = l2_prefetch;
  const int hd = s.head_dim_qk;
  const bool int4 = s.kv_dtype == DType::kInt32;  // eight dims to a word
  const int kv_bytes = static_cast<int>(dtype_size(s.kv_dtype));
  const bool fp8 = kv_bytes == 1;
  const bool widen = fp8 && (s.pos_encoding == spec::PosEncoding::kRopeLlama || hd % 32 != 0);  // !Traits::kDirectFp8
  const int pack = decode_kv_heads_per_cta(s);  // Traits::kKvPack
  const int row_bytes = (int4 ? hd / 2 : hd * kv_bytes) * pack;  // Traits::kRowDataBytes
  const bool swizzled = (fp8 && hd % 128 == 0) || (int4 && (row_bytes == 32 || row_bytes == 64 || row_bytes % 128 == 0));
  const int raw_row = row_bytes + (swizzled ? 0 : 16);  // Traits::kRawRowBytes
  const bool sd = split_d(s);
  const int rings = sd ? 1 : t.warps;  // split-D: one CTA-wide ring; else one per warp
  const bool token_scales = s.has(spec::feature::kKTokenScale | spec::feature::kVTokenScale);
  const int tok_heads = s.has(spec::feature::kTokHead) ? 2 : 1;  // Traits::kTokHeads
  const int per_stage = rings * (2 * t.tile * raw_row + (token_scales ? 16 * t.tile * tok_heads : 0));  // Traits::kStageBytes
  const int conv = widen ? rings * 2 * t.tile * (hd + 8) * 2 : 0;
  const int scores = sd ? t.warps * t.tile * 64 : 0;  // split-D's partial scores (Traits::kScoreBytes)
  const int beside_ring = conv + scores;  // the loop's bytes past the ring
  const int fixed = 16 * (hd + 8) * 2 + hd * 2;  // Q tile + RoPE frequencies
  const int tail = std::max((sd ? 1 : t.warps) * 16 * (hd + 2) * 4, 2 * 16 * 256 * 4);  // warp merge / split weights and sums
  t.smem_limit = render::max_smem_per_block(s.arch);
  auto smem = [&] { return fixed + std::max(t.stages * per_stage + beside_ring, tail); };
  if (sd) {
    // Never fewer than two stages: the next tile's copy refills the stage of the tile
    // before it (a one-stage ring would overwrite the tile being read); where two do
    // not fit, smem_bytes says so and the caller takes the 16-token tile or refuses.
    auto fit = [&](int budget) {
      t.stages = std::clamp((budget - beside_ring) / per_stage, 2, kMaxSplitDStages);
      while (t.stages > 2 && smem() > t.smem_limit) --t.stages;
    };
    const auto ring_kb = util::env_knob("ATTNJIT_DECODE_RING_KB", 1, kMaxRingKb);
    if (ring_kb) {
      fit(*ring_kb * 1024);
    } else {
      // Two CTAs an SM where a ring of two stages or more allows it: one CTA's warps
      // meet once per tile (the score exchange), and the other CTA's keep the SM busy
      // meanwhile. H200, xqa B64 L4K g8, TB/s, one CTA with the deepest ring -> two:
      // fp8 hd384 / hd512 2.60 / 3.15 -> 3.30 / 3.62 (32-token tiles), bf16 hd384
      // 3.87 -> 4.04 (16-token tiles), bf16 hd512 4.19 -> 4.18 (PERFORMANCE.md,
      // twenty-second session). Else one CTA with the deepest ring.
      const int half = (t.smem_limit + 1024) / 2 - 1024;
      fit(half - fixed);
      if (smem() > half) fit(t.smem_limit - fixed);
    }
    t.smem_bytes = smem();
    const int reg_estimate = hd / t.warps / 2 + 64 + (t.tile - 16);  // DecodeTraits::kRegEstimate
    t.min_blocks = std::clamp(std::min(65536 / (t.warps * 32 * reg_estimate), (t.smem_limit + 1024) / (t.smem_bytes + 1024)), 1, 3);
    return t;
  }
  // Ring budget per CTA: ~105 KB lets two CTAs share an SM with two tiles in
  // flight per warp (~128 KB per SM: what HBM latency needs at full bandwidth).
  // Never more than the arch allows per block.
  // int4 and per-token scales (Traits::kFourCtas): a ring that leaves room for four CTAs.
  const bool four_ctas = int4 || token_scales;
  // int4 on the transposed tile (half the O registers) leaves shared memory for a fifth
  // (int8 keeps its deeper ring: it already runs at the HBM rate); the registers allow it
  // at 16-token tiles only (the 32-token tile, contiguous K/V's default, runs four: 111
  // registers). int4 takes no mask, so never split-M: this is Traits::kTransposed && kInt4Kv.
  const bool int4_transposed = int4 && s.group_size <= 8;
  // kvpair (two KV heads a CTA, 128-byte int4 rows at hd128) takes the 105 KB ring: three
  // 32-token stages a warp, two CTAs an SM, two tiles in flight a warp. H200, D128 N 32/8,
  // TB/s per channel / per token, B128·KV4K: 3.38 / 3.59 with two stages and three CTAs,
  // 3.97 / 3.59 with three and two; B16·KV32K 3.79 / 3.70 -> 3.88 / 3.76 (16-token tiles
  // were slower at three of the four; PERFORMANCE.md, twentieth session).
  const int ctas = pack > 1 ? 0 : int4_transposed ? 5 : four_ctas ? 4 : 0;
  // The ring shares its bytes with the merge's tail: never smaller than that.
  const int default_kb =
      ctas ? std::max(std::min(105, ((t.smem_limit + 1024) / ctas - 1024 - fixed) / 1024), tail / 1024) : 105;
  int budget = util::env_knob("ATTNJIT_DECODE_RING_KB", 1, kMaxRingKb).value_or(default_kb) * 1024;
  if (t.tile == 32) budget = std::max(budget, 2 * per_stage + conv);  // a 32-token ring still prefetches
  budget = std::max(budget, stages_floor * per_stage + conv);
  // At least two stages (one tile in flight while another is computed), fewer
  // only where the arch's shared memory cannot hold two.
  t.stages = std::clamp((budget - conv) / per_stage, 2, 4);
  while (t.stages > 1 && smem() > t.smem_limit) --t.stages;
  t.smem_bytes = smem();
  if (split_m_eligible(s)) {
    // Split-M's layout (DecodeTraits::kSplitMBytes: Q of 64 rows, one CTA ring, a
    // 64-row merge buffer) takes as many stages as the token-split layout's bytes
    // hold, so the launch's occupancy does not change; at least two.
    const int stage_m = 2 * t.tile * raw_row;
    const int fixed_m = kDecodeSplitMRows * (hd + 8) * 2 + hd * 2;
    const int tail_m = std::max(kDecodeSplitMRows * (hd + 2) * 4, 2 * 16 * 256 * 4);
    const int stages_m = std::clamp((t.smem_bytes - fixed_m) / stage_m, 2, kMaxSplitMStages);
    const int bytes_m = fixed_m + std::max(stages_m * stage_m, tail_m);
    if (std::max(t.smem_bytes, bytes_m) <= t.smem_limit) {
      t.split_m_stages = stages_m;
      t.smem_bytes = std::max(t.smem_bytes, bytes_m);
    }
  }
  // DecodeTraits::kMinBlocks: CTAs per SM by shared memory, capped where the
  // register budget __launch_bounds__ derives from it would force spills.
  t.transposed = s.group_size <= 8 && ((s.kv_dtype == DType::kInt8 && !widen) || int4) &&
                 t.split_m_stages == 0;
  const bool q_in_regs = hd <= 128 && !four_ctas;  // Traits::kQInRegs
  const int max_blocks = four_ctas ? (int4_transposed ? 5 : 4) : 3;  // Traits::kMaxBlocks
  const auto blocks = [&](int smem_bytes, bool dual_m) {
    const int reg_estimate = std::max(hd / (t.transposed ? 4 : 2) + (q_in_regs ? hd / 4 : 0) + 64 + (t.tile - 16),
                                      dual_m ? hd + 64 + (t.tile - 16) : 0);  // dual-M: O of 32 rows
    const int by_regs = 65536 / (t.warps * 32 * reg_estimate);
    const int by_smem = (t.smem_limit + 1024) / (smem_bytes + 1024);
    return std::clamp(std::min(by_regs, by_smem), 1, max_blocks);
  };
  t.min_blocks = blocks(t.smem_bytes, false);
  if (t.split_m_stages > 0 && dual_m_eligible(s)) {
    // Dual-M's layout (DecodeTraits::kDualMBytes: Q of 32 rows, the token-split rings,
    // a merge buffer of the warps' 32 rows), only where shared memory keeps the kernel's
    // CTAs an SM. Its registers (O of 32 rows) may cost one: fp8 hd128 runs two CTAs
    // instead of three, and measured (H200, B16 L8K g8, TB/s) q_seq_len 2 3.40 -> 3.50,
    // 4 1.94 -> 2.38, 8 (split-M) 1.14 -> 1.12-1.13 (PERFORMANCE.md, twenty-fifth session).
    const int fixed_d = kDecodeDualMRows * (hd + 8) * 2 + hd * 2;
    const int tail_d = std::max(t.warps * kDecodeDualMRows * (hd + 2) * 4, 2 * 16 * 256 * 4);
    const int bytes_d = std::max(t.smem_bytes, fixed_d + std::max(t.stages * per_stage + beside_ring, tail_d));
    const auto by_smem = [&](int bytes) { return (t.smem_limit + 1024) / (bytes + 1024); };
    if (bytes_d <= t.smem_limit && by_smem(bytes_d) >= by_smem(t.smem_bytes)) {
      t.dual_m = true;
      t.smem_bytes = bytes_d;
      t.min_blocks = blocks(bytes_d, true);
    }
  }
  return t;
}

}  // namespace

DecodeTiling decode_tiling(const spec::KernelSpec& s) {
  // Warp tiles of 32 tokens (a tile never spans two pages, so 32 needs pages of 32 or
  // more): fp8 pays the softmax and address work once per 32 tokens, and paged 16-bit
  // K/V gained too (below). Spec-decode masks and head dims over 128 keep 16: the larger
  // tile's registers spill there. Lazy rescaling skips the O rescale while no row max
  // moves. ATTNJIT_DECODE_TILE=16|32 and ATTNJIT_DECODE_LAZY_RESCALE=0|1 override both,
  // for measurement.
  const bool lazy = util::env_knob("ATTNJIT_DECODE_LAZY_RESCALE", 0, 1, "0 or 1").value_or(1) == 1;
  // L2 fetches this many bytes around each K/V copy. int4's rows (hd128: 64 bytes) are half
  // an L2 line, whose other half the next KV head's CTA reads at about the same time: with
  // whole lines fetched, B128·KV4K BSND went 2.58 -> 3.46 TB/s on the H200. 16-bit K/V
  // gained 2-3% (xqa bf16 B1-B128, single_decode L32K-128K, FIA B128); 8-bit K/V lost up to
  // 1% (int8) or nothing (fp8), so it fetches as it asks (PERFORMANCE.md, nineteenth session).
  // ATTNJIT_DECODE_L2_PREFETCH overrides, for measurement.
  const int l2_default = s.kv_dtype == DType::kInt32 || dtype_size(s.kv_dtype) == 2 ? 128 : 0;
  const int l2 = util::env_knob("ATTNJIT_DECODE_L2_PREFETCH", 0, 256, "0, 64, 128 or 256").value_or(l2_default);
  if (l2 != 0 && l2 != 64 && l2 != 128 && l2 != 256)
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ATTNJIT_DECODE_L2_PREFETCH='{}': expected 0, 64, 128 or 256", l2));
  // Split-D (head_dim > 256) starts from 32 too, and takes 16 where only that
  // tile lets two CTAs share an SM (below).
  // Paged (xqa) 16-bit K/V take 32 too where that keeps the 16-token tiling's CTAs an
  // SM (head_dim 64: three, or two with a deeper ring, below): a 16-token tile's fixed
  // work (softmax, address math, barriers) weighs most there. H200, beside FlashInfer's XQA, us, 16 -> 32: hd64 p64
  // B32 L8K 144.4 -> 142.7, B1 L32K 26.8 -> 26.4. At hd128 a 32-token ring of two stages
  // holds one CTA an SM, and the split plan (which sizes splits to the CTAs an SM) then
  // halves the splits: uniform batches gained (g8 B1 L32K 3.00 -> 3.14 TB/s, B16 L8K 3.90
  // -> 4.05, g16 p128 B16 L8K 77.9 -> 74.8 us), but a ragged batch's longest request ran
  // on half the CTAs (lens 300..12000, B8: 51.5 -> 67.5 us), so hd128 keeps 16 until the
  // plan weighs ragged lengths (PERFORMANCE.md, twenty-fourth session). Planning the 32-token
  // kernel's splits for two CTAs an SM serves the ragged batch (57.1 -> 53.6 us, H100) but runs
  // uniform ones in two waves (B4 L4K 33.9 -> 40.9 us): the host knows only max_seq_len. Counts
  // taken from the lengths on the device (branch s42-flat-splits) lost 1-2 us a call to the later
  // page-id read (forty-second session). Batch 1, which cannot be ragged, has a 32-token kernel
  // of its own (the tile32 feature, asked for below; decode_batch1_takes_tile32). Spec-decode masks
  // keep 16 (split-M's 64-row CTAs: q_seq_len 8, 2.43 -> 2.17 TB/s at 32).
  const bool one_byte = dtype_size(s.kv_dtype) == 1 || s.kv_dtype == DType::kInt32;  // int4: half a byte
  const bool wide = one_byte || s.family == spec::OpFamily::kXqa;
  // The tile32 feature asks for 32 where the rule above keeps 16: xqa at batch 1 and single_decode
  // (decode_batch1_tile32 says why), where no batch can be ragged.
  const auto knob = util::env_knob("ATTNJIT_DECODE_TILE", 16, 32, "16 or 32");
  const bool asked32 = s.has(spec::feature::kTile32);
  const bool forced = knob.has_value() || asked32;
  const int tile =
      knob.value_or((wide && s.mask == spec::MaskMode::kNone && s.head_dim_qk <= 128) || split_d(s) || asked32 ? 32 : 16);
  if (tile != 16 && tile != 32)  // the only warp tiles the template has
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ATTNJIT_DECODE_TILE='{}': expected 16 or 32; unset it for the default", tile));
  if (tile == 32 && (s.page_size == 0 || s.page_size % 32 == 0)) {
    DecodeTiling t = tiling_for(s, 32, lazy, l2);
    // Not a one-stage ring (nothing in flight while a tile is computed), and 16-bit K/V
    // only without losing CTAs an SM (above); else 16 tokens.
    const bool take = t.smem_bytes <= t.smem_limit && (t.stages >= 2 || split_d(s) || knob.has_value());
    if (take && !one_byte && !split_d(s) && !forced) {
      DecodeTiling t16 = tiling_for(s, 16, lazy, l2);
      if (t.min_blocks < t16.min_blocks) return t16;
      // A third stage where two CTAs an SM still hold it (head_dim <= 64): two tiles in
      // flight a warp beat a third CTA with one. H200 beside FlashInfer's XQA, hd64 p64
      // g8, us: B32 L8K 138.3 -> 131.1, B1 L32K 26.0 -> 23.8 (PERFORMANCE.md, twenty-fifth
      // session). ATTNJIT_DECODE_RING_KB, when set, sizes the ring instead.
      if (t.stages == 2 && !util::env_knob("ATTNJIT_DECODE_RING_KB", 1, kMaxRingKb)) {
        DecodeTiling t3 = tiling_for(s, 32, lazy, l2, 3);
        if (t3.stages == 3 && t3.min_blocks >= 2) return t3;
      }
    }
    if (take) {
      if (!split_d(s) || forced) return t;
      // Split-D: two CTAs an SM first (32-token tiles, else 16), then one CTA with
      // a 32-token ring of three stages or more (tiling_for says why).
      if (t.min_blocks >= 2) return t;
      DecodeTiling t16 = tiling_for(s, 16, lazy, l2);
      if (t16.min_blocks >= 2 || t.stages < 3) return t16;
      return t;
    }
  }
  return tiling_for(s, 16, lazy, l2);
}

bool decode_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why) {
  // The reason is formatted only when asked for and only on failure: backend
  // resolution runs this on every launch.
  auto refuse = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  if (s.backend != spec::Backend::kXqa)
    return refuse([&] { return fmt::format("only the xqa backend has {} kernels ({} has none yet)",
                                           spec::to_string(s.family), spec::to_string(s.backend)); });
  if (arch.sm < 80) return refuse([] { return std::string("the decode templates need sm_80 or newer (mma.sync bf16, cp.async)"); });
  if (s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16)
    return refuse([&] { return fmt::format("q dtype {}: the decode templates take fp16 or bf16 queries", dtype_name(s.q_dtype)); });
  const bool fp8_kv = s.kv_dtype == DType::kFloat8E4M3 || s.kv_dtype == DType::kFloat8E5M2;
  const bool int4_kv = s.kv_dtype == DType::kInt32;  // int4 packed eight to an int32 (FIA)
  const bool int8_kv = s.kv_dtype == DType::kInt8 || int4_kv;  // what holds for int8 holds for int4
  if (s.kv_dtype != s.q_dtype && !fp8_kv && !int8_kv)
    return refuse([&] { return fmt::format("kv dtype {}: K/V are q's dtype, fp8, int8 or int4 in int32 (FIA)",
                                           dtype_name(s.kv_dtype)); });
  if (int4_kv && (s.head_dim_qk % 64 != 0 || s.mask != spec::MaskMode::kNone || s.has(spec::feature::kSlidingWindow)))
    return refuse([&] { return fmt::format("kv dtype int32 (int4, FIA antiquant) takes head dims in 64s, no mask and no "
                                           "window ({})", s.name()); });
  if (s.has(spec::feature::kTokHead) &&
      (!s.has(spec::feature::kKvPair) || !s.has(spec::feature::kKTokenScale | spec::feature::kVTokenScale)))
    return refuse([&] { return fmt::format("tokhead (both heads' per-token scales a stage) takes kvpair and per-token "
                                           "scales ({})", s.name()); });
  if (s.has(spec::feature::kKvPair) && (!int4_kv || s.group_size > 4 || s.head_dim_qk > 128))
    return refuse([&] { return fmt::format("kvpair (two KV heads a CTA) takes int4 (int32) K/V, group <= 4 and head_dim "
                                           "<= 128: two groups fill the transposed tile's 8 columns, and past 128 a "
                                           "head's row is a whole L2 line already ({})", s.name()); });
  const bool out_16 = s.out_dtype == DType::kFloat16 || s.out_dtype == DType::kBFloat16;
  // int8 K/V (FIA's antiquant): K's offset shifts a row's scores alike, which softmax drops,
  // unless an LSE, sinks, a soft cap or a position term see the raw scores; q takes K's
  // channel scales before any rotation.
  constexpr uint32_t kRawScores = spec::feature::kReturnLse | spec::feature::kSinks | spec::feature::kSoftCap |
                                  spec::feature::kScalePointers;
  if (int8_kv && (s.has(kRawScores) || s.pos_encoding != spec::PosEncoding::kNone || s.head_dim_qk > 256 || !out_16))
    return refuse([&] { return fmt::format("kv dtype int8 (FIA antiquant) takes no LSE, sinks, soft cap, scale "
                                           "pointers, RoPE/ALiBi or fp8 output, and head_dim <= 256 ({})", s.name()); });
  if (!out_16 && !(fp8_kv && s.out_dtype == DType::kFloat8E4M3))
    return refuse([&] { return fmt::format("output dtype {}: fp16, bf16, or fp8_e4m3 with fp8 K/V", dtype_name(s.out_dtype)); });
  if (s.head_dim_qk != s.head_dim_vo)
    return refuse([&] { return fmt::format("head dims {}/{}: the decode templates need head_dim_qk == head_dim_vo",
                                           s.head_dim_qk, s.head_dim_vo); });
  if (!decode_head_dim_ok(s.head_dim_qk))
    return refuse([&] { return fmt::format("head_dim {}: the decode templates need {}", s.head_dim_qk, kDecodeHeadDims); });
  if (s.group_size < 1 || s.group_size > kMaxDecodeGroup)
    return refuse([&] { return fmt::format("group_size {}: expected 1 to {}", s.group_size, kMaxDecodeGroup); });
  if (split_d(s)) {
    // FlashInfer's limits past head_dim 256, which the split-D kernel keeps.
    if (s.group_size > kMaxGroupSplitD)
      return refuse([&] { return fmt::format("group_size {} at head_dim {}: expected <= {} past head_dim 256",
                                             s.group_size, s.head_dim_qk, kMaxGroupSplitD); });
    if (s.mask != spec::MaskMode::kNone || s.has(spec::feature::kRaggedQ))
      return refuse([&] { return fmt::format("head_dim {}: no speculative decoding (mask, ragged q) past head_dim 256",
                                             s.head_dim_qk); });
  }
  if (s.page_size != 0 && (s.page_size % 16 != 0 || s.page_size < 16 || s.page_size > 1024))
    return refuse([&] { return fmt::format("page_size {}: 0 (contiguous) or a multiple of 16 up to 1024", s.page_size); });
  if (s.layout != spec::KvLayout::kNHD && s.layout != spec::KvLayout::kHND) return refuse([] { return std::string("unknown KV layout"); });
  if (s.mask != spec::MaskMode::kNone && s.mask != spec::MaskMode::kCausal && s.mask != spec::MaskMode::kCustom)
    return refuse([] { return std::string("unknown mask mode"); });
  if (s.pos_encoding != spec::PosEncoding::kNone && s.pos_encoding != spec::PosEncoding::kRopeLlama &&
      s.pos_encoding != spec::PosEncoding::kAlibi)
    return refuse([] { return std::string("unknown positional encoding"); });
  // splitrope is the mla family's, dqpass the prefill family's
  if (s.features &
      ~(spec::feature::kAll & ~spec::feature::kSplitRope & ~spec::feature::kDequantPass & ~spec::feature::kNarrowTile &
        ~spec::feature::kNarrow32 & ~spec::feature::kFlat))
    return refuse([&] { return fmt::format("unknown feature bits {:#x}", s.features); });
  // (8-bit K/V tiles 32 tokens already: the feature would name the same kernel twice.)
  if (s.has(spec::feature::kTile32) &&
      ((s.family != spec::OpFamily::kXqa && s.family != spec::OpFamily::kDecode) || s.page_size % 32 != 0 ||
       s.mask != spec::MaskMode::kNone || dtype_size(s.kv_dtype) != 2))
    return refuse([&] {
      return fmt::format("tile32 (32-token warp tiles asked for) takes xqa or single_decode with 16-bit K/V, pages "
                         "of a multiple of 32 (or contiguous K/V) and no mask ({})", s.name());
    });
  if (s.has(spec::feature::kKTokenScale | spec::feature::kVTokenScale)) {
    // FIA's per-token antiquant: K per token with V per token, or K per channel with V per token.
    if (!int8_kv || s.mask != spec::MaskMode::kNone || s.has(spec::feature::kSlidingWindow))
      return refuse([&] { return fmt::format("ktokscale/vtokscale take int8/int4 K/V without mask or window ({})", s.name()); });
    if (s.has(spec::feature::kKTokenScale) && !s.has(spec::feature::kVTokenScale))
      return refuse([] { return std::string("ktokscale comes with vtokscale (FIA: per-token K implies per-token V)"); });
  }
  if (s.has(spec::feature::kLeftPad | spec::feature::kSharedPrefix))  // FIA's: the prefill kernels serve them
    return refuse([] { return std::string("leftpad and prefix are the prefill family's features (FIA)"); });
  spec::KernelSpec on_arch = s;
  on_arch.arch = arch;
  const DecodeTiling t = decode_tiling(on_arch);
  if (t.smem_bytes > t.smem_limit || (split_d(on_arch) && t.stages < 2))
    return refuse([&] { return fmt::format("needs {} bytes of shared memory per block, {} allows {}", t.smem_bytes,
                                           arch.str(), t.smem_limit); });
  // (ATTNJIT_DECODE_TILE, a measuring knob, overrides the feature as it does the default.)
  if (s.has(spec::feature::kTile32) && t.tile != 32 && !util::env_knob("ATTNJIT_DECODE_TILE", 16, 32, "16 or 32"))
    return refuse([&] {
      return fmt::format("tile32: a ring of two 32-token stages does not fit {}'s {} bytes of shared memory ({})",
                         arch.str(), t.smem_limit, s.name());
    });
  return true;
}

std::optional<DecodeTiling> decode_batch1_tile32(const spec::KernelSpec& s) {
  // The cheap tests first: this runs on every long batch-1 launch (two tilings).
  const bool family = s.family == spec::OpFamily::kXqa || s.family == spec::OpFamily::kDecode;
  if (!family || s.page_size % 32 != 0 || s.mask != spec::MaskMode::kNone || (s.head_dim_qk != 128 && !split_d(s)) ||
      dtype_size(s.kv_dtype) != 2 || s.has(spec::feature::kTile32))
    return std::nullopt;
  if (decode_tiling(s).tile != 16) return std::nullopt;
  spec::KernelSpec asked = s;
  asked.features |= spec::feature::kTile32;
  const DecodeTiling t = decode_tiling(asked);
  // (split-D as measured: three stages, where one CTA an SM holds them)
  if (t.tile != 32 || t.smem_bytes > t.smem_limit || (split_d(s) && t.stages < 3)) return std::nullopt;
  return t;
}

// Split-M pays past 32 rows (H200, B16 L8K g8 bf16: q_seq_len 8, 64 rows, 379 -> 324 us;
// q_seq_len 4, 32 rows, 200 -> 302 us: half the CTAs, half their warps idle). Dual-M takes
// 17-32 rows where the kernel has it (H200, the same shape beside FlashInfer's XQA, us:
// q_seq_len 3 197 -> 146, q_seq_len 4 197 -> 149; PERFORMANCE.md, twenty-fifth session).
constexpr int64_t kSplitMMinRows = 33;

int decode_rows_per_cta(const spec::KernelSpec& s, int q_seq_len) {
  const int64_t rows = int64_t(s.group_size) * q_seq_len;
  if (rows <= kDecodeRowsPerCta || !split_m_eligible(s)) return kDecodeRowsPerCta;
  const DecodeTiling t = decode_tiling(s);
  if (rows <= kDecodeDualMRows && t.dual_m) return kDecodeDualMRows;
  return rows >= kSplitMMinRows && t.split_m_stages > 0 ? kDecodeSplitMRows : kDecodeRowsPerCta;
}

render::RenderedUnit decode_generate(const spec::KernelSpec& s) {
  const DecodeTiling t = decode_tiling(s);
  render::RenderedUnit u;
  // The host's shared-memory arithmetic mirrors the Traits; the static_assert in
  // the TU makes every compile (CI's variant matrix too) check the mirror.
  u.launch.threads = t.warps * 32;
  u.launch.smem_bytes = t.smem_bytes;
  u.launch.min_blocks_per_sm = t.min_blocks;
  u.launch.split_granule = t.tile;  // a split never cuts a warp tile (nor so a page)
  u.entry = "attnjit_decode";
  u.smem_symbol = "attnjit_smem_bytes";
  u.source = fmt::format(
      "// attnjit {name}\n"
      "{prefetch}"
      "#include \"decode/gqa_decode.cuh\"\n"
      "using Traits = attnjit::DecodeTraits<{q}, {kv}, {o}, {hd}, {g}, {page}, {hnd}, {mask}, {pos}, "
      "{feat}u, {warps}, {stages}, {smem_limit}, {tile}, {lazy}{split_m}>;\n"
      "static_assert(Traits::kSmemBytes == {expected}, \"host and kernel disagree on shared memory\");\n"
      "static_assert(Traits::kThreads == {threads} && Traits::kMinBlocks == {min_blocks}, "
      "\"host and kernel disagree on launch metadata\");\n"
      "static_assert(Traits::kTransposed == {transposed} && Traits::kDualM == {dual_m}, "
      "\"host and kernel disagree on the MMA tile\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::DecodeParams params) {{\n"
      "  extern __shared__ __align__(16) unsigned char smem[];\n"
      "  attnjit::GqaDecode<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()),
      fmt::arg("prefetch", t.l2_prefetch ? fmt::format("#define ATTNJIT_CP_ASYNC_L2_PREFETCH {}\n", t.l2_prefetch) : ""),
      fmt::arg("q", render::device_type(s.q_dtype, "decode")),
      fmt::arg("kv", render::device_type(s.kv_dtype, "decode")),
      fmt::arg("o", render::device_type(s.out_dtype, "decode")),
      fmt::arg("hd", s.head_dim_qk), fmt::arg("g", s.group_size), fmt::arg("page", s.page_size),
      fmt::arg("hnd", s.layout == spec::KvLayout::kHND ? "true" : "false"),
      fmt::arg("mask", static_cast<int>(s.mask)), fmt::arg("pos", static_cast<int>(s.pos_encoding)),
      fmt::arg("feat", s.features), fmt::arg("warps", t.warps), fmt::arg("stages", t.stages),
      fmt::arg("smem_limit", t.smem_limit), fmt::arg("tile", t.tile),
      fmt::arg("lazy", t.lazy_rescale ? "true" : "false"),
      fmt::arg("split_m", t.split_m_stages > 0 ? fmt::format(", {}{}", t.split_m_stages, t.dual_m ? ", true" : "")
                                               : std::string()),
      fmt::arg("expected", t.smem_bytes), fmt::arg("threads", u.launch.threads),
      fmt::arg("min_blocks", t.min_blocks), fmt::arg("transposed", t.transposed ? "true" : "false"),
      fmt::arg("dual_m", t.dual_m ? "true" : "false"),
      fmt::arg("smem", u.smem_symbol), fmt::arg("entry", u.entry));
  return u;
}

namespace {
// Backend rows: the MLA seed's (render::kMlaSeedBackendRows).
// Kernels that exist and have run correctly on a GPU. xqa's decode kernel is
// portable (mma.sync, sm_80+; run on the H200). No trtllm-gen decode kernel exists
// yet, so trtllm-gen is available nowhere and auto takes xqa everywhere.
constexpr render::VerifiedBackend kVerified[] = {{spec::Backend::kXqa, 0}};

spec::Backend measured_faster(const spec::KernelSpec&, const char** why) {
  if (why) *why = "no trtllm-gen decode kernel exists to measure against xqa";
  return spec::Backend::kXqa;
}

const render::BackendTable kTable = {render::kMlaSeedBackendRows, std::size(render::kMlaSeedBackendRows), kVerified,
                                     std::size(kVerified), measured_faster};
}  // namespace

const render::BackendTable& decode_backend_table() { return kTable; }

namespace decode {
// The decode family's registration (its line is in src/spec/families.def).
const render::Family& family() {
  static const render::Family f = {spec::OpFamily::kDecode, decode_can_implement, decode_generate,
                                   &decode_backend_table(), "decode/decode_params.cuh", sizeof(DecodeParams)};
  return f;
}
}  // namespace decode

}  // namespace attnjit::ops
