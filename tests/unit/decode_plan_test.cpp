// Tests of src/ops/decode/decode_launch: split-KV choice and workspace sizing (pure CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>

#include "attnjit/error.hpp"
#include "attnjit/xqa.hpp"
#include "decode/decode_params.cuh"
#include "ops/decode/decode_launch.hpp"

namespace attnjit::ops {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splitting may pay past one wave (it evens out the last one: 265 CTAs on 264 slots
// split 4 ways fill 5 waves), but a grid of whole waves never gains from it.
TEST(ChooseSplits, OneWhenTheBaseGridIsWholeWaves) {
  for (int64_t k : {1, 2, 3, 8})
    for (int slots : {108, 264, 528})
      for (int len : {1, 128, 4096, 1 << 20})
        EXPECT_EQ(choose_splits(k * slots, len, slots), 1) << k << " waves of " << slots << ", len " << len;
  for (int len : {4096, 1 << 20}) EXPECT_EQ(choose_splits(100000, len, 264), 1);
}

// choose_splits walks wave counts, not every split count: it picks what the plain search
// over s = 1..cap picks (the smallest s of least cost), over a sweep of bases, lengths, slots.
TEST(ChooseSplits, WaveWalkPicksWhatEverySplitCountWouldPick) {
  auto reference = [](int64_t base, int len, int slots) {
    const int64_t cap = std::max<int64_t>(1, std::min<int64_t>({ceil_div(len, 256), ceil_div(4 * int64_t(slots), base), 256}));
    int best = 1;
    int64_t best_cost = INT64_MAX;
    for (int64_t s = 1; s <= cap; ++s) {
      const int64_t cost = ceil_div(base * s, slots) * (ceil_div(len, s) + 64);
      if (cost < best_cost) best_cost = cost, best = static_cast<int>(s);
    }
    return best;
  };
  std::mt19937 rng(77);
  int n = 0;
  for (int slots : {1, 7, 108, 132, 264, 396, 528})
    for (int64_t base : {1, 2, 3, 5, 8, 16, 31, 64, 100, 131, 132, 133, 263, 264, 265, 500, 1000, 4096})
      for (int i = 0; i < 40; ++i) {
        const int len = i < 8 ? (1 << (i * 2 + 2)) + i : 1 + int(rng() % (1 << 18));
        ASSERT_EQ(choose_splits(base, len, slots), reference(base, len, slots)) << base << " " << len << " " << slots;
        ++n;
      }
  EXPECT_EQ(n, 7 * 18 * 40);
}

TEST(ChooseSplits, DegenerateInputsGiveOne) {
  EXPECT_EQ(choose_splits(0, 4096, 264), 1);
  EXPECT_EQ(choose_splits(8, 0, 264), 1);
  EXPECT_EQ(choose_splits(8, 4096, 0), 1);
  EXPECT_EQ(choose_splits(-1, 4096, 264), 1);
}

TEST(ChooseSplits, ShortSequencesDoNotSplit) {
  EXPECT_EQ(choose_splits(8, 100, 264), 1);
  EXPECT_EQ(choose_splits(1, 128, 528), 1);
  EXPECT_EQ(choose_splits(1, 1, 528), 1);
}

TEST(ChooseSplits, LongSequenceSmallBatchFillsOneWave) {
  const int s = choose_splits(8, 32768, 264);
  EXPECT_GT(s, 1);
  EXPECT_LE(8 * s, 264) << "one wave";
  EXPECT_GE(32768 / s, 128) << "at least 128 tokens per split";
  EXPECT_GE(8 * s, 264 / 2) << "uses most of the machine: " << s;
  std::printf("  choose_splits(8, 32768, 264) = %d\n", s);
}

// Splits of fewer than ~256 tokens cost more in partials and merge than they gain in
// fill (measured on the H200: L4K 16 splits beat 32; B1 L8K 33 splits beat 17).
TEST(ChooseSplits, SplitsKeepAtLeast256Tokens) {
  for (auto [len, lo, hi] : {std::tuple{4096, 16, 16}, {8192, 32, 32}, {32768, 33, 33}}) {
    const int s = choose_splits(8, len, 264);
    EXPECT_GE(s, lo) << len;
    EXPECT_LE(s, hi) << len;
  }
}

// Short sequences fill the SMs with one CTA each, a warp tile a split at least (the H100
// measurements behind it: decode_launch.hpp). B1, 8 KV heads (8 CTAs before splitting), 132
// SMs: 16 splits from L512 to L4K (L1K and L2K planned 4 and 8 by length alone), L8K and
// longer as before; 16 requests (128 CTAs) split as the waves decide.
TEST(FillSplits, ShortSequencesFillTheSms) {
  EXPECT_EQ(fill_splits(8, 1024, 132, 16), 16);
  EXPECT_EQ(fill_splits(8, 100, 132, 16), 7);  // a tile a split at least
  EXPECT_EQ(fill_splits(8, 16, 132, 16), 1);
  EXPECT_EQ(fill_splits(200, 1024, 132, 16), 1);
  EXPECT_EQ(fill_splits(0, 1024, 132, 16), 1);
  EXPECT_EQ(fill_splits(1, 4096, 132, 16), 16);  // one KV head: at most kMaxFillSplits
  EXPECT_EQ(fill_splits(4, 4096, 132, 16), 16);
  const auto splits = [](int batch, int len, int granule) {
    return plan_splits(DecodeShape{batch, 8, 8, 1, 128, len}, 132, 264, granule).splits;
  };
  for (int len : {512, 1024, 2048, 4096}) EXPECT_EQ(splits(1, len, 16), 16) << len;
  EXPECT_EQ(splits(1, 1024, 32), 16);  // 64 tokens: two of the four warps' 32-token tiles
  EXPECT_EQ(splits(1, 8192, 16), 32);  // 33 planned, 256 tokens each after rounding to tiles
  EXPECT_EQ(splits(1, 32768, 16), 33);
  EXPECT_EQ(splits(16, 1024, 16), 2);
  EXPECT_EQ(splits(2, 2048, 16), 8);  // 16 CTAs: 8 an SM's worth, which length gives already
  // Forced split counts stay as forced; the bound covers the fill.
  for (int batch : {1, 2, 3, 8})
    for (int len : {17, 100, 512, 1024, 3000})
      for (int sms : {16, 108, 132, 170}) {
        const DecodeShape s{batch, 8, 8, 1, 128, len};
        const int fill = fill_splits(decode_base_ctas(s), len, sms, 16);
        EXPECT_GE(max_splits(s, sms), fill);
        EXPECT_LE(decode_base_ctas(s) * fill, std::max<int64_t>(sms, decode_base_ctas(s)));
      }
}

TEST(ChooseSplits, PropertiesOverAGrid) {
  for (int64_t base : {1, 2, 3, 7, 8, 16, 31, 64, 100, 131, 132, 200, 263, 264, 265, 528, 1000, 5000})
    for (int len : {1, 100, 127, 128, 129, 255, 256, 1000, 4096, 8191, 32768, 131072, 1 << 20})
      for (int slots : {1, 4, 108, 132, 264, 396, 528, 1024}) {
        const int s = choose_splits(base, len, slots);
        SCOPED_TRACE(::testing::Message() << "base " << base << " len " << len << " slots " << slots << " -> " << s);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, 256);
        ASSERT_LE(s, ceil_div(len, 128)) << "never fewer than ~128 tokens per split";
        if (s > 1) {
          ASSERT_LT(base * (s - 1), 4 * int64_t(slots)) << "at most ~4 waves' worth";
          ASSERT_GE(ceil_div(len, s), 64) << "splits stay long enough to amortise the merge";
        }
        if (base >= 4 * int64_t(slots)) ASSERT_EQ(s, 1) << "4 waves or more already";
        if (base % slots == 0) ASSERT_EQ(s, 1) << "whole waves";
      }
}

TEST(ChooseSplits, NeverSlowerThanNotSplitting) {
  // The cost model the choice minimises: waves x (tokens per split + fixed cost).
  auto cost = [](int64_t base, int len, int slots, int s) {
    return ceil_div(base * s, slots) * (ceil_div(len, s) + 64);
  };
  for (int64_t base : {1, 8, 33, 132})
    for (int len : {256, 2048, 65536})
      for (int slots : {132, 528}) {
        const int s = choose_splits(base, len, slots);
        EXPECT_LE(cost(base, len, slots, s), cost(base, len, slots, 1)) << base << " " << len << " " << slots;
      }
}

TEST(DecodeShape, BaseCtasAndRowBlocks) {
  EXPECT_EQ(decode_row_blocks(8, 1), 1);
  EXPECT_EQ(decode_row_blocks(16, 1), 1);
  EXPECT_EQ(decode_row_blocks(17, 1), 2);
  EXPECT_EQ(decode_row_blocks(64, 1), 4);
  EXPECT_EQ(decode_row_blocks(8, 3), 2);
  EXPECT_EQ(decode_row_blocks(5, 4), 2);
  DecodeShape s{4, 8, 8, 1, 128, 4096};
  EXPECT_EQ(decode_base_ctas(s), 32);
  s.q_seq_len = 4;  // 32 rows -> 2 blocks
  EXPECT_EQ(decode_base_ctas(s), 64);
  EXPECT_EQ(decode_semaphore_count(s), 64u);
}

TEST(MaxSplits, BoundsWhatTheOpCanChoose) {
  for (int batch : {1, 2, 3, 8, 32, 128})
    for (int kv_heads : {1, 2, 8, 32})
      for (int group : {1, 4, 8, 16, 64})
        for (int q_len : {1, 4})
          for (int len : {1, 64, 128, 1000, 4096, 32768, 1 << 20})
            for (int sms : {1, 78, 108, 132, 170}) {
              const DecodeShape s{batch, kv_heads, group, q_len, 128, len};
              const int m = max_splits(s, sms);
              const int64_t base = decode_base_ctas(s);
              SCOPED_TRACE(::testing::Message() << "batch " << batch << " kvh " << kv_heads << " g " << group
                                                << " qlen " << q_len << " len " << len << " sms " << sms);
              ASSERT_GE(m, 1);
              ASSERT_LE(m, 256);
              // The launch uses slots = sms x min(occupancy, 4).
              for (int per_sm = 1; per_sm <= kMaxBlocksPerSmForSplit; ++per_sm)
                ASSERT_GE(m, choose_splits(base, len, sms * per_sm));
            }
}

TEST(Workspace, NoneWithoutSplits) {
  const DecodeShape s{4, 8, 8, 1, 128, 32768};
  EXPECT_EQ(decode_workspace_bytes(s, 1), 0u);
  EXPECT_EQ(decode_workspace_bytes(s, 0), 0u);
  EXPECT_EQ(decode_workspace_bytes(s, 2), size_t(decode_base_ctas(s)) * 2 * decode_partial_floats(128) * 4);
  EXPECT_LT(decode_workspace_bytes(s, 2), decode_workspace_bytes(s, 3));
  EXPECT_LT(decode_workspace_bytes(s, 4), decode_workspace_bytes({4, 8, 8, 1, 256, 32768}, 4));
}

TEST(Workspace, XqaWorkspaceCoversEveryChoice) {
  for (int batch : {1, 2, 5, 16, 64})
    for (int len : {128, 4096, 65536})
      for (int sms : {108, 132}) {
        const size_t ws = xqa_workspace_bytes(batch, 8, 8, 1, 128, len, sms);
        const DecodeShape s{batch, 8, 8, 1, 128, len};
        for (int per_sm = 1; per_sm <= kMaxBlocksPerSmForSplit; ++per_sm) {
          const int chosen = choose_splits(decode_base_ctas(s), len, sms * per_sm);
          EXPECT_GE(ws, decode_workspace_bytes(s, chosen)) << batch << " " << len << " " << sms;
        }
        EXPECT_EQ(xqa_semaphore_count(batch, 8, 8, 1), size_t(decode_base_ctas(s)));
      }
}

// A host sizes the workspace once, for its largest batch (FlashInfer's usage), and
// then calls with smaller batches; that only works if the bound grows with batch.
// One buffer sized for the largest batch must serve every smaller batch, which
// may split more (batch 264 once needed 0 bytes while batch 263 needed 35 MB).
TEST(Workspace, XqaWorkspaceIsMonotoneInBatch) {
  EXPECT_GE(xqa_workspace_bytes(264, 8, 8, 1, 128, 32768, 132), xqa_workspace_bytes(263, 8, 8, 1, 128, 32768, 132));
  EXPECT_GE(xqa_workspace_bytes(66, 8, 8, 1, 128, 32768, 132), xqa_workspace_bytes(65, 8, 8, 1, 128, 32768, 132));
  for (int kv_heads : {1, 8})
    for (int len : {4096, 32768, 1 << 20})
      for (int sms : {108, 132}) {
        size_t prev = 0;
        for (int batch = 1; batch <= 512; ++batch) {
          const size_t ws = xqa_workspace_bytes(batch, kv_heads, 8, 1, 128, len, sms);
          ASSERT_GE(ws, prev) << "batch " << batch << " kv_heads " << kv_heads << " len " << len << " sms " << sms;
          prev = ws;
        }
      }
}

// What does hold: for a fixed batch, more KV never needs less workspace, and a
// larger head_dim never needs less.
TEST(Workspace, XqaWorkspaceMonotoneInSeqLenAndHeadDim) {
  for (int batch : {1, 4, 32})
    for (int sms : {108, 132}) {
      size_t prev = 0;
      for (int len = 1; len <= (1 << 18); len = len * 3 / 2 + 1) {
        const size_t ws = xqa_workspace_bytes(batch, 8, 8, 1, 128, len, sms);
        EXPECT_GE(ws, prev) << batch << " " << len;
        prev = ws;
      }
      EXPECT_LE(xqa_workspace_bytes(batch, 8, 8, 1, 64, 32768, sms),
                xqa_workspace_bytes(batch, 8, 8, 1, 256, 32768, sms));
    }
}

// The contract of xqa_workspace_bytes, checked against what a launch asks for
// (plan_splits, as launch_decode calls it): every call with batch, q_seq_len and
// max_seq_len at most the sized ones, at any occupancy and tile. A ragged spec-
// decode call passes a smaller q_seq_len than the host sized for; once that
// needed more (sm 16, 8 KV heads, group 16: sized for q_seq_len 16, q_seq_len 10
// needed 2,662,400 bytes against 2,129,920).
TEST(Workspace, XqaWorkspaceCoversEverySmallerCall) {
  uint64_t seed = 7;
  auto next = [&](int n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return 1 + static_cast<int>((seed >> 33) % static_cast<uint64_t>(n));
  };
  const int kSms[] = {16, 78, 108, 132, 170};
  for (int trial = 0; trial < 3000; ++trial) {
    const int sms = kSms[next(5) - 1], kv_heads = next(16), group = next(64);
    const int batch = next(trial % 3 == 0 ? 300 : 24), q_len = next(trial % 2 ? 16 : 3);
    const int len = next(trial % 4 == 0 ? 1 << 20 : 40000), hd = 16 * next(16);
    const size_t ws = xqa_workspace_bytes(batch, kv_heads, group, q_len, hd, len, sms);
    for (int k = 0; k < 6; ++k) {
      DecodeShape call{next(batch), kv_heads, group, next(q_len), hd, next(len)};
      if (k >= 3) call.window_left = next(len) - 1;  // a window only narrows the plan
      const int slots = sms * next(kMaxBlocksPerSmForSplit);
      const SplitPlan plan = plan_splits(call, sms, slots, k % 2 ? 32 : 16);
      ASSERT_GE(ws, decode_workspace_bytes(call, plan.splits))
          << "sized for batch " << batch << " q_seq_len " << q_len << " len " << len << " sms " << sms
          << "; call batch " << call.batch << " q_seq_len " << call.q_seq_len << " len " << call.max_seq_len
          << " slots " << slots;
      ASSERT_GE(xqa_semaphore_count(batch, kv_heads, group, q_len), decode_semaphore_count(call));
    }
  }
}

// Windowed plans (issue 9 item 1): decode_window_plan_test.cpp.

// xqa's caller-owned workspace and semaphores are checked against the split the
// launch chose, naming the argument (the issue: "too small a workspace").
TEST(Workspace, TooSmallCallerScratchNamesTheArgument) {
  DecodeLaunch l;
  l.shape = DecodeShape{2, 8, 8, 1, 128, 32768};
  const int splits = 4;
  const size_t need = decode_workspace_bytes(l.shape, splits);
  l.workspace = reinterpret_cast<void*>(0x1000);
  l.semaphores = reinterpret_cast<unsigned*>(0x2000);
  l.workspace_bytes = need;
  l.semaphore_count = decode_semaphore_count(l.shape);
  require_caller_scratch(l, splits);  // exactly enough
  auto expect_names = [&](const DecodeLaunch& bad, const std::string& arg, const std::string& needle) {
    try {
      require_caller_scratch(bad, splits);
      ADD_FAILURE() << arg << ": nothing thrown";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("argument '" + arg + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DecodeLaunch small = l;
  small.workspace_bytes = need - 16;
  expect_names(small, "workspace_buffer", ">= " + std::to_string(need) + " bytes");
  DecodeLaunch none = l;
  none.workspace = nullptr;
  none.workspace_bytes = 0;
  expect_names(none, "workspace_buffer", "none");
  DecodeLaunch few = l;
  few.semaphore_count = decode_semaphore_count(l.shape) - 1;
  expect_names(few, "semaphores", "uint32 counters");
  DecodeLaunch unsplit = none;
  unsplit.semaphores = nullptr;
  require_caller_scratch(unsplit, 1);  // one split needs no scratch
}

TEST(Workspace, SizingHelpersNameBadArguments) {
  auto expect_names = [](auto&& f, const std::string& arg) {
    try {
      f();
      ADD_FAILURE() << arg << ": nothing thrown";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("argument '" + arg + "'"), std::string::npos) << e.what();
    }
  };
  expect_names([] { xqa_workspace_bytes(4, 0, 8, 1, 128, 4096, 132); }, "num_kv_heads");
  expect_names([] { xqa_workspace_bytes(4, 8, 0, 1, 128, 4096, 132); }, "head_group_ratio");
  expect_names([] { xqa_workspace_bytes(4, 8, 8, 0, 128, 4096, 132); }, "q_seq_len");
  expect_names([] { xqa_workspace_bytes(4, 8, 8, 1, -128, 4096, 132); }, "head_dim");
  expect_names([] { xqa_workspace_bytes(4, 8, 8, 1, 128, 0, 132); }, "max_seq_len");
  expect_names([] { xqa_workspace_bytes(4, 8, 8, 1, 128, 4096, 0); }, "sm_count");
  expect_names([] { xqa_workspace_bytes(0, 8, 8, 1, 128, 4096, 132); }, "batch");
  expect_names([] { xqa_semaphore_count(4, -8, 8, 1); }, "num_kv_heads");
  expect_names([] { xqa_semaphore_count(4, 8, 65, 1); }, "head_group_ratio");
}

// A grid between one and two CTAs an SM runs at the pace of the SMs with two: plan_splits takes
// one CTA an SM where that carries fewer tokens an SM (B1 L6K: 24 splits, 192 CTAs on 132 SMs,
// 512 tokens on the doubled SMs, against 16 splits of 384), and keeps the grid where the
// tokens an SM tie (L8K: 32 x 256 on two CTAs an SM, 16 x 512 on one).
TEST(SplitPlanSms, UnevenGridsTakeOneCtaAnSm) {
  for (int granule : {16, 32})
    for (int ctas_per_sm : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << "granule " << granule << " ctas/SM " << ctas_per_sm);
      const int slots = 132 * ctas_per_sm;
      const SplitPlan l6 = plan_splits(DecodeShape{1, 8, 8, 1, 128, 6144}, 132, slots, granule);
      EXPECT_EQ(l6.splits, 16);
      EXPECT_EQ(l6.tokens_per_split, 384);
      EXPECT_EQ(plan_splits(DecodeShape{1, 8, 8, 1, 128, 8192}, 132, slots, granule).splits, 32);
      EXPECT_EQ(plan_splits(DecodeShape{1, 8, 8, 1, 128, 5000}, 132, slots, granule).splits * 8, 128);
      // Batches keep their plan (a ragged batch's long request needs its splits): B2 L6K's 16
      // splits fill two slots an SM evenly; B4 L4K's 12 splits on three slots (384 CTAs) stay.
      if (ctas_per_sm == 2) {
        EXPECT_EQ(plan_splits(DecodeShape{2, 8, 8, 1, 128, 6144}, 132, slots, granule).splits, 16);
        EXPECT_EQ(plan_splits(DecodeShape{4, 8, 8, 1, 128, 4096}, 132, slots, granule).splits, 8);
      } else {
        EXPECT_EQ(plan_splits(DecodeShape{4, 8, 8, 1, 128, 4096}, 132, slots, granule).splits, 12);
      }
    }
  // At any length, the plan's tokens an SM (ceil(CTAs / SMs) splits) are no more than one CTA
  // an SM's would be, to within the rounding of two splits to the granule.
  for (int len = 256; len <= 65536; len += 128) {
    const SplitPlan p = plan_splits(DecodeShape{1, 8, 8, 1, 128, len}, 132, 264, 16);
    const int64_t per_sm = (8 * int64_t(p.splits) + 131) / 132 * p.tokens_per_split;
    const int64_t one_cta_an_sm = (len + 15) / 16;
    EXPECT_LE(per_sm, one_cta_an_sm + 2 * 16) << "L" << len << ": " << p.splits << " x " << p.tokens_per_split;
  }
}

// At batch 1, a one-CTA-an-SM kernel's second wave starts its pipelines cold (kColdWaveTokens): 8 KV
// heads stays at 16 splits (one wave) at 64K and 128K, where the plain cost model would take 33
// (two waves); a grid whose one wave leaves half the SMs idle still takes more (67 KV heads at
// 32K: one split on 67 SMs, 32768 tokens an SM, against seven splits in four waves, 18728 and
// three cold waves).
TEST(SplitPlanSms, OneCtaAnSmKernelsKeepToOneWave) {
  for (int len : {32768, 65536, 131072}) {
    EXPECT_EQ(plan_splits(DecodeShape{1, 8, 8, 1, 128, len}, 132, 132, 32).splits, 16) << len;
    EXPECT_EQ(plan_splits(DecodeShape{1, 8, 8, 1, 128, len}, 132, 264, 16).splits, 33) << len
        << ": two CTAs an SM overlap their pipelines, and keep two";
  }
  EXPECT_EQ(plan_splits(DecodeShape{1, 67, 8, 1, 128, 32768}, 132, 132, 32).splits, 7);
  // Batches keep the cost model's plan: a ragged batch's long request needs the splits (hd256,
  // lens {65536, 300}: 8 splits ran 25% slower than 33), and the host knows only max_seq_len.
  EXPECT_EQ(plan_splits(DecodeShape{2, 8, 8, 1, 256, 65536}, 132, 132, 16).splits, 33);
}

}  // namespace
}  // namespace attnjit::ops
