// Split-M (templates/decode/decode_split_m.cuh): speculative decoding with more
// than 16 query rows per (request, KV head) holds 64 rows per CTA. Which kernels
// have it (tiling), when a launch takes it (decode_rows_per_cta, plan_xqa), the
// knob that turns it off, the grid's row blocks, and the workspace and semaphore
// sizing against the splits such launches plan.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <string>

#include "common/env_guard.hpp"
#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "common/expect_error.hpp"
#include "common/op_args.hpp"
#include "decode/decode_params.cuh"
#include "ops/decode/decode_generator.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "render/renderer.hpp"

namespace attnjit::ops {
namespace {

using testing::expect_error;
using testing::fake;

using testing::EnvGuard;

spec::KernelSpec spec_dec(int hd, int group, DType kv, const char* arch, int page = 32) {
  spec::KernelSpec s;
  s.family = spec::OpFamily::kXqa;
  s.q_dtype = s.out_dtype = DType::kBFloat16;
  s.kv_dtype = kv;
  s.set_head_dim(hd);
  s.group_size = group;
  s.page_size = page;
  s.mask = spec::MaskMode::kCustom;
  s.arch = spec::Arch::parse(arch);
  return s;
}

// xqa spec decoding: batch 2, kv_heads x group heads, q_seq_len draft tokens, pages of 32.
XqaArgs xqa_spec_dec(int q_seq_len, int group = 8, int kv_heads = 2, int hd = 128, DType kv = DType::kBFloat16) {
  XqaArgs a;
  const DType dt = DType::kBFloat16;
  const int heads = kv_heads * group, pages = 8, words = (q_seq_len + 31) / 32;
  a.q = TensorView::contiguous(fake(0x10000), dt, {2, 1, q_seq_len, heads, hd});
  a.output = TensorView::contiguous(fake(0x400000), dt, {2, 1, q_seq_len, heads, hd});
  a.mask = TensorView::contiguous(fake(0x500000), DType::kUInt16, {2, q_seq_len, 2 * words});
  a.q_seq_len = q_seq_len;
  a.k_cache = TensorView::contiguous(fake(0x100000), kv, {pages, 32, kv_heads, hd});
  a.v_cache = TensorView::contiguous(fake(0x200000), kv, {pages, 32, kv_heads, hd});
  a.page_table = TensorView::contiguous(fake(0x300000), DType::kInt32, {2, 4});
  a.seq_lens = TensorView::contiguous(fake(0x300100), DType::kUInt32, {2, 1});
  a.num_kv_heads = kv_heads;
  a.page_size = 32;
  return a;
}

TEST(SplitMTiling, SpecDecodeKernelsUpTo256HaveItOnEveryArch) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"})
    for (DType kv : {DType::kBFloat16, DType::kFloat8E4M3})
      for (int hd : {32, 64, 128, 192, 256})
        for (int page : {16, 32, 128}) {
          const spec::KernelSpec s = spec_dec(hd, 8, kv, arch, page);
          const std::string what = s.name();
          std::string why;
          ASSERT_TRUE(decode_can_implement(s, s.arch, &why)) << what << ": " << why;
          const DecodeTiling t = decode_tiling(s);
          EXPECT_GE(t.split_m_stages, 2) << what;
          EXPECT_LE(t.split_m_stages, 12) << what;
          EXPECT_LE(t.smem_bytes, t.smem_limit) << what;
          // The split-M layout (DecodeTraits::kSplitMBytes) fits what the launch asks for.
          const int raw_row = hd * int(dtype_size(kv)) + (kv == DType::kFloat8E4M3 && hd % 128 == 0 ? 0 : 16);
          const int bytes_m = kDecodeSplitMRows * (hd + 8) * 2 + hd * 2 +
                              std::max({t.split_m_stages * 2 * t.tile * raw_row, kDecodeSplitMRows * (hd + 2) * 4,
                                        2 * 16 * 256 * 4});
          EXPECT_LE(bytes_m, t.smem_bytes) << what;
        }
}

// Split-M shares the token-split kernel's shared memory, so a spec-decode launch
// with 16 rows or fewer keeps its occupancy (Hopper: 2 CTAs/SM at bf16 hd128, 3 at fp8).
TEST(SplitMTiling, OccupancyOfTheSpecDecodeKernelIsUnchanged) {
  spec::KernelSpec b = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  spec::KernelSpec f = spec_dec(128, 8, DType::kFloat8E4M3, "sm_90a");
  DecodeTiling on_b, on_f, off_b, off_f;
  {
    EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
    EnvGuard d("ATTNJIT_DECODE_DUAL_M", "0");  // dual-M's own occupancy: DualMTiling below
    on_b = decode_tiling(b);
    on_f = decode_tiling(f);
  }
  {
    EnvGuard k("ATTNJIT_DECODE_SPLIT_M", "0");
    off_b = decode_tiling(b);
    off_f = decode_tiling(f);
  }
  EXPECT_EQ(off_b.split_m_stages, 0);
  EXPECT_EQ(off_f.split_m_stages, 0);
  EXPECT_EQ(on_b.smem_bytes, off_b.smem_bytes);
  EXPECT_EQ(on_f.smem_bytes, off_f.smem_bytes);
  EXPECT_EQ(on_b.min_blocks, off_b.min_blocks);
  EXPECT_EQ(on_f.min_blocks, off_f.min_blocks);
  EXPECT_EQ(on_b.min_blocks, 2);
  EXPECT_EQ(on_f.min_blocks, 3);
  // At least ~64 KB in flight per CTA while a stage is computed.
  EXPECT_GE((on_b.split_m_stages - 1) * 2 * on_b.tile * (128 * 2 + 16), 64 * 1024);
}

TEST(SplitMTiling, OnlySpecDecodeTensorCoreKernelsWithoutRope) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  spec::KernelSpec s = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  s.mask = spec::MaskMode::kNone;  // q_seq_len 1: the measured kernels stay as they are
  EXPECT_EQ(decode_tiling(s).split_m_stages, 0);
  s.mask = spec::MaskMode::kCausal;
  EXPECT_EQ(decode_tiling(s).split_m_stages, 0);
  s = spec_dec(512, 8, DType::kBFloat16, "sm_90a");  // split-D has no spec decoding
  s.mask = spec::MaskMode::kNone;
  EXPECT_EQ(decode_tiling(s).split_m_stages, 0);
  s = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  s.pos_encoding = spec::PosEncoding::kRopeLlama;
  EXPECT_EQ(decode_tiling(s).split_m_stages, 0);
}

TEST(SplitMTiling, RenderedTraitsCarryTheStagesAndTheKnobTurnsThemOff) {
  const spec::KernelSpec s = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  std::string on, off;
  {
    EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
    const render::RenderedUnit u = render::render(s);
    on = u.source;
    const int stages = decode_tiling(s).split_m_stages;
    EXPECT_NE(on.find(", 16, true, " + std::to_string(stages) + ", true>;"), std::string::npos) << on;
    bool has_m = false, has_ring = false, has_dual = false;
    for (const auto& h : *u.headers) {
      has_m |= h.path == "decode/decode_split_m.cuh";
      has_ring |= h.path == "decode/decode_cta_ring.cuh";
      has_dual |= h.path == "decode/decode_dual_m.cuh";
    }
    EXPECT_TRUE(has_m && has_ring && has_dual) << "the unit carries the split-M, CTA ring and dual-M templates";
  }
  {
    EnvGuard k("ATTNJIT_DECODE_SPLIT_M", "0");
    off = render::render(s).source;
    EXPECT_NE(off.find(", 16, true>;"), std::string::npos) << off;
  }
  EXPECT_NE(on, off) << "the knob lands in the rendered source, so in the cache key";
}

TEST(SplitMTiling, BadKnobValueNamesTheVariable) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", "2");
  expect_error([] { decode_tiling(spec_dec(128, 8, DType::kBFloat16, "sm_90a")); }, ErrorCode::kInvalidArgument,
               {"ATTNJIT_DECODE_SPLIT_M"});
}

// Measured on the H200: 64 rows per CTA win at 64 rows (q_seq_len 8, g8) and lose at 32
// (q_seq_len 4, g8), so split-M takes more than 32 rows; 17-32 take dual-M's 32-row CTAs
// where the kernel has them (head_dim <= 128, the kernel's CTAs an SM kept).
TEST(SplitMRows, MoreThan32RowsTake64PerCta) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  const spec::KernelSpec g8 = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  EXPECT_EQ(decode_rows_per_cta(g8, 1), 16);
  EXPECT_EQ(decode_rows_per_cta(g8, 2), 16);  // 16 rows: one warp tile, the token split
  for (int q : {3, 4}) EXPECT_EQ(decode_rows_per_cta(g8, q), kDecodeDualMRows) << q;  // 24 and 32 rows
  for (int q : {5, 6, 8, 9, 64}) EXPECT_EQ(decode_rows_per_cta(g8, q), kDecodeSplitMRows) << q;
  const spec::KernelSpec g16 = spec_dec(128, 16, DType::kFloat8E4M3, "sm_90a");
  EXPECT_EQ(decode_rows_per_cta(g16, 1), 16);
  EXPECT_EQ(decode_rows_per_cta(g16, 2), kDecodeDualMRows);  // 32 rows
  EXPECT_EQ(decode_rows_per_cta(g16, 3), kDecodeSplitMRows);
  const spec::KernelSpec g4 = spec_dec(64, 4, DType::kBFloat16, "sm_80");
  EXPECT_EQ(decode_rows_per_cta(g4, 8), kDecodeDualMRows);
  EXPECT_EQ(decode_rows_per_cta(g4, 9), kDecodeSplitMRows);
  spec::KernelSpec none = g8;
  none.mask = spec::MaskMode::kNone;
  EXPECT_EQ(decode_rows_per_cta(none, 8), 16);
  EnvGuard off("ATTNJIT_DECODE_SPLIT_M", "0");
  EXPECT_EQ(decode_rows_per_cta(g8, 8), 16);
}

TEST(SplitMRows, RowBlocksFollowTheRowsPerCta) {
  EXPECT_EQ(decode_row_blocks(8, 3, 64), 1);
  EXPECT_EQ(decode_row_blocks(8, 8, 64), 1);
  EXPECT_EQ(decode_row_blocks(16, 8, 64), 2);
  EXPECT_EQ(decode_row_blocks(16, 5, 64), 2);
  EXPECT_EQ(decode_row_blocks(64, 1, 64), 1);
  EXPECT_EQ(decode_row_blocks(8, 8), 4);  // 16 rows per CTA by default
  DecodeShape s{16, 8, 8, 8, 128, 8192};
  EXPECT_EQ(decode_base_ctas(s), 16 * 8 * 4);
  s.rows_per_cta = 64;
  EXPECT_EQ(decode_base_ctas(s), 16 * 8);
  EXPECT_EQ(decode_base_blocks16(s), 16 * 8 * 4);
  // Workspace partials and semaphores stay per 16-row block whatever the CTA holds.
  DecodeShape t = s;
  t.rows_per_cta = 16;
  EXPECT_EQ(decode_workspace_bytes(s, 3), decode_workspace_bytes(t, 3));
  EXPECT_EQ(decode_semaphore_count(s), decode_semaphore_count(t));
  EXPECT_GE(decode_semaphore_count(s), size_t(decode_base_ctas(s)));
}

TEST(SplitMRows, PlanXqaTakesSplitMForSpecDecodeBeyond32Rows) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  const spec::Arch arch{90, true};
  EXPECT_EQ(plan_xqa(xqa_spec_dec(2), arch).shape.rows_per_cta, 16);
  for (int q : {3, 4}) EXPECT_EQ(plan_xqa(xqa_spec_dec(q), arch).shape.rows_per_cta, kDecodeDualMRows) << q;
  for (int q : {5, 6, 8}) {
    const XqaPlan p = plan_xqa(xqa_spec_dec(q), arch);
    EXPECT_EQ(p.shape.rows_per_cta, kDecodeSplitMRows) << q;
    EXPECT_EQ(p.spec.mask, spec::MaskMode::kCustom);
  }
  EXPECT_EQ(plan_xqa(xqa_spec_dec(4, 16, 2, 64, DType::kFloat8E4M3), arch).shape.rows_per_cta, kDecodeSplitMRows);
  EnvGuard off("ATTNJIT_DECODE_SPLIT_M", "0");
  EXPECT_EQ(plan_xqa(xqa_spec_dec(8), arch).shape.rows_per_cta, 16);
}

// A split-M launch plans its splits over fewer CTAs (a quarter at 64 rows), but its
// partials stay per 16-row block: the splits are capped so that 16-row partials
// stay within kMaxWaves waves, which keeps decode_workspace_bound an upper bound.
TEST(SplitMWorkspace, XqaWorkspaceCoversEverySplitMCall) {
  uint64_t seed = 11;
  auto next = [&](int n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + static_cast<int>((seed >> 33) % static_cast<uint64_t>(n));
  };
  const int kSms[] = {16, 78, 108, 132, 170};
  int split_m_calls = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int sms = kSms[next(5) - 1], kv_heads = next(16), group = next(64);
    const int batch = next(trial % 3 == 0 ? 300 : 24), q_len = next(trial % 2 ? 16 : 8);
    const int len = next(trial % 4 == 0 ? 1 << 20 : 40000), hd = 16 * next(16);
    const size_t ws = xqa_workspace_bytes(batch, kv_heads, group, q_len, hd, len, sms);
    for (int k = 0; k < 6; ++k) {
      DecodeShape call{next(batch), kv_heads, group, next(q_len), hd, next(len)};
      if (k >= 3) call.window_left = next(len) - 1;
      if (group * call.q_seq_len > 16) {  // dual-M up to 32 rows, split-M past
        call.rows_per_cta = group * call.q_seq_len <= kDecodeDualMRows ? kDecodeDualMRows : kDecodeSplitMRows;
        ++split_m_calls;
      }
      const int slots = sms * next(kMaxBlocksPerSmForSplit);
      const SplitPlan plan = plan_splits(call, sms, slots, 16);
      ASSERT_GE(ws, decode_workspace_bytes(call, plan.splits))
          << "sized for batch " << batch << " group " << group << " q_seq_len " << q_len << " len " << len
          << " sms " << sms << "; call batch " << call.batch << " q_seq_len " << call.q_seq_len << " len "
          << call.max_seq_len << " slots " << slots << " rows/CTA " << call.rows_per_cta;
      ASSERT_GE(xqa_semaphore_count(batch, kv_heads, group, q_len), decode_semaphore_count(call));
      ASSERT_GE(decode_semaphore_count(call), size_t(decode_base_ctas(call)));
    }
  }
  EXPECT_GT(split_m_calls, 1000);
}

// The issue's shape: B16 L8K, 8 KV heads, group 8. With 64 rows per CTA there are
// 128 CTAs before splitting (a quarter of the 16-row grid at q_seq_len 8), and the
// plan splits them to fill the H200.
TEST(SplitMWorkspace, IssueShapeSplitsToFillTheGpu) {
  for (int q : {3, 4, 8}) {
    DecodeShape s{16, 8, 8, q, 128, 8192};
    s.rows_per_cta = kDecodeSplitMRows;
    const int slots = 132 * 2;
    const SplitPlan p = plan_splits(s, 132, slots, 16);
    EXPECT_EQ(decode_base_ctas(s), 128);
    EXPECT_GE(p.splits, 2) << q;
    EXPECT_LE(decode_base_blocks16(s) * p.splits, 4 * slots + decode_base_blocks16(s) - 1) << q;
  }
}


// Dual-M (32 rows a CTA, two M tiles a warp) rides on split-M's kernels at head_dim <= 128
// where it keeps their CTAs an SM; decode_rows_per_cta takes it for 17-32 rows.
TEST(DualMTiling, RowsPerCtaFollowTheRowsAndTheKernel) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  EnvGuard d("ATTNJIT_DECODE_DUAL_M", nullptr);
  const spec::KernelSpec b = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  const DecodeTiling tb = decode_tiling(b);
  EXPECT_TRUE(tb.dual_m);
  EXPECT_EQ(tb.min_blocks, 2);
  EXPECT_EQ(decode_rows_per_cta(b, 1), 16);
  EXPECT_EQ(decode_rows_per_cta(b, 2), 16);   // 16 rows
  EXPECT_EQ(decode_rows_per_cta(b, 3), kDecodeDualMRows);  // 24
  EXPECT_EQ(decode_rows_per_cta(b, 4), kDecodeDualMRows);  // 32
  EXPECT_EQ(decode_rows_per_cta(b, 5), kDecodeSplitMRows);  // 40
  // The rendered traits carry it, and the TU checks the host's mirror.
  const std::string src = decode_generate(b).source;
  EXPECT_NE(src.find(fmt::format(", {}, true>;", tb.split_m_stages)), std::string::npos) << src;
  EXPECT_NE(src.find("Traits::kDualM == true"), std::string::npos) << src;
  // Shared memory never loses a CTA an SM to it (bf16 hd128: two either way).
  DecodeTiling without;
  {
    EnvGuard off("ATTNJIT_DECODE_DUAL_M", "0");
    without = decode_tiling(b);
  }
  const auto by_smem = [](const DecodeTiling& t) { return (t.smem_limit + 1024) / (t.smem_bytes + 1024); };
  EXPECT_EQ(by_smem(tb), by_smem(without));
  EXPECT_GT(tb.smem_bytes, without.smem_bytes);  // Q of 32 rows
  // fp8 hd128: its registers (O for 32 rows) cost the third CTA, which measured a gain
  // at q_seq_len 2 and 4 and -1% at 8 (PERFORMANCE.md, twenty-fifth session).
  const spec::KernelSpec f = spec_dec(128, 8, DType::kFloat8E4M3, "sm_90a");
  const DecodeTiling tf = decode_tiling(f);
  EXPECT_TRUE(tf.dual_m);
  EXPECT_EQ(tf.min_blocks, 2);
  EXPECT_EQ(by_smem(tf), 3);
  EXPECT_EQ(decode_rows_per_cta(f, 4), kDecodeDualMRows);
  // head_dim 64: the 32-row Q would cost a CTA an SM by shared memory.
  const spec::KernelSpec h64 = spec_dec(64, 8, DType::kBFloat16, "sm_90a");
  EXPECT_FALSE(decode_tiling(h64).dual_m);
  EXPECT_EQ(decode_rows_per_cta(h64, 4), kDecodeRowsPerCta);
  // head_dim 256: a warp cannot hold O for 32 rows.
  const spec::KernelSpec h = spec_dec(256, 8, DType::kBFloat16, "sm_90a");
  EXPECT_FALSE(decode_tiling(h).dual_m);
  EXPECT_EQ(decode_rows_per_cta(h, 4), kDecodeRowsPerCta);
}

TEST(DualMTiling, TheKnobTurnsItOff) {
  EnvGuard k("ATTNJIT_DECODE_SPLIT_M", nullptr);
  EnvGuard d("ATTNJIT_DECODE_DUAL_M", "0");
  const spec::KernelSpec b = spec_dec(128, 8, DType::kBFloat16, "sm_90a");
  EXPECT_FALSE(decode_tiling(b).dual_m);
  EXPECT_EQ(decode_rows_per_cta(b, 4), kDecodeRowsPerCta);  // 32 rows: two 16-row CTAs, as before dual-M
  EXPECT_EQ(decode_rows_per_cta(b, 5), kDecodeSplitMRows);
  EXPECT_NE(decode_generate(b).source.find("Traits::kDualM == false"), std::string::npos);
}
}  // namespace
}  // namespace attnjit::ops
