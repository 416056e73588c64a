// Tests of sliding-window decode planning (issue 9 item 1): src/ops/decode/decode_launch
// (decode_visible_len, plan_splits) and the kernel's own range arithmetic in
// templates/decode/decode_params.cuh (decode_kv_begin, decode_split_range), which
// the CTAs of templates/decode/gqa_decode.cuh run. Pure CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "decode/decode_params.cuh"
#include "ops/decode/decode_launch.hpp"

namespace attnjit::ops {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

DecodeShape windowed(int batch, int q_len, int max_len, int window_left) {
  DecodeShape s{batch, 8, 8, q_len, 128, max_len};
  s.window_left = window_left;
  return s;
}

void expect_same_plan(const SplitPlan& a, const SplitPlan& b, const char* what) {
  EXPECT_EQ(a.splits, b.splits) << what;
  EXPECT_EQ(a.tokens_per_split, b.tokens_per_split) << what;
}

// The shapes: window 4096 (xqa sliding_win_size 4096 = window_left 4095)
// on 4 sequences of 8K / 32K / 128K plans exactly as a plain sequence of 4096, and
// a 32K window on 128K as a plain 32K. Before, the plan covered window + tile - 1
// tokens: 4127 with 32-token tiles, 8 splits of 544 against 8 of 512 on 264 slots.
TEST(WindowPlan, WindowPlansAsAPlainSequenceOfTheWindow) {
  for (int tile : {16, 32})
    for (int slots : {132, 264, 396, 528})
      for (auto [window, len] : {std::pair{4096, 8192}, {4096, 32768}, {4096, 131072}, {32768, 131072}}) {
        SCOPED_TRACE(::testing::Message() << "tile " << tile << " slots " << slots << " window " << window << " L "
                                          << len);
        const SplitPlan win = plan_splits(windowed(4, 1, len, window - 1), 132, slots, tile);
        const SplitPlan plain = plan_splits(DecodeShape{4, 8, 8, 1, 128, window}, 132, slots, tile);
        expect_same_plan(win, plain, "windowed vs plain");
        EXPECT_GT(win.splits, 1) << "a 4-sequence batch splits its window";
      }
  // The bench shape, spelled out (bf16: 16-token tiles, fp8: 32), at one or two CTAs an SM.
  for (int tile : {16, 32})
    for (int ctas_per_sm : {1, 2}) {
      const SplitPlan p = plan_splits(windowed(4, 1, 131072, 4095), 132, 132 * ctas_per_sm, tile);
      EXPECT_EQ(int64_t(p.splits) * p.tokens_per_split, 4096) << p.splits << " x " << p.tokens_per_split;
    }
}

// Spec decoding: q_seq_len rows each see window_left keys before their own
// position, so their union is window_left + q_seq_len keys: the plan of a plain
// sequence that long (ragged drafts plan for the longest, q_seq_len).
TEST(WindowPlan, SpecDecodePlansOverTheUnionOfItsRowsWindows) {
  for (int q_len : {2, 3, 4, 8})
    for (int window_left : {63, 1000, 4095}) {
      const SplitPlan win = plan_splits(windowed(16, q_len, 131072, window_left), 132, 264, 32);
      const SplitPlan plain = plan_splits(DecodeShape{16, 8, 8, q_len, 128, window_left + q_len}, 132, 264, 32);
      expect_same_plan(win, plain, "spec decode");
      EXPECT_EQ(decode_visible_len(windowed(16, q_len, 131072, window_left)), window_left + q_len);
    }
}

TEST(WindowPlan, WindowWiderThanTheSequenceIsNoWindow) {
  for (int window_left : {4095, 4096, 5000, 1 << 30}) {
    DecodeShape win = windowed(2, 3, 4096, window_left);
    const DecodeShape plain{2, 8, 8, 3, 128, 4096};
    EXPECT_EQ(decode_visible_len(win), 4096);
    expect_same_plan(plan_splits(win, 132, 264, 32), plan_splits(plain, 132, 264, 32), "window >= L");
  }
  DecodeShape off = windowed(2, 3, 4096, -1);
  EXPECT_EQ(decode_visible_len(off), 4096);
  // And the kernel starts at 0: a window as wide as the sequence moves nothing.
  EXPECT_EQ(decode_kv_begin(4096, 3, 4093, 32), 0);
  EXPECT_EQ(decode_kv_begin(4096, 1, 1 << 30, 16), 0);
  EXPECT_EQ(decode_kv_begin(4096, 1, -1, 16), 0);
}

// The kernel's start: the first visible key's tile. Positions stay logical: row t
// is at seq_len - q_len + t and sees keys >= its position - window_left.
TEST(WindowPlan, KvBeginIsTheFirstVisibleKeysTile) {
  EXPECT_EQ(decode_kv_begin(131072, 1, 4095, 32), 131072 - 4096);  // already whole tiles
  EXPECT_EQ(decode_kv_begin(131077, 1, 4095, 32), 126976);          // 126981 rounded down
  EXPECT_EQ(decode_kv_begin(131077, 1, 4095, 16), 126976);
  EXPECT_EQ(decode_kv_begin(1000, 3, 500, 16), 496);  // row 0 at 997 sees 497..997
  EXPECT_EQ(decode_kv_begin(10, 1, 0, 16), 0);        // window 1: only key 9, tile 0
  EXPECT_EQ(decode_kv_begin(40, 1, 0, 16), 32);
}

// Every request's CTAs, as the kernel runs them (decode_kv_begin, then
// decode_split_range per split), over seq_lens up to max_seq_len: together they walk
// exactly [kv_begin, seq_len), contiguous and in order, starting at split 0 and
// never past the plan's splits; every key a row sees is walked; no tile (and so no
// page, pages being whole tiles) lies wholly before the window; only the last
// split may exceed tokens_per_split, and by less than a tile.
TEST(WindowPlan, SplitsCoverExactlyTheWindowFromAnOffset) {
  for (int tile : {16, 32})
    for (int q_len : {1, 2, 3, 4})
      for (int window_left : {0, 1, 31, 127, 1000, 4095, 32767}) {
        const int max_len = 131072 + 77;
        const DecodeShape shape = windowed(4, q_len, max_len, window_left);
        for (int slots : {132, 264}) {
          const SplitPlan plan = plan_splits(shape, 132, slots, tile);
          ASSERT_EQ(plan.tokens_per_split % tile, 0);
          for (int seq_len = 1; seq_len <= max_len; seq_len = seq_len * 2 + 13)
            for (int ql = 1; ql <= std::min(q_len, seq_len); ++ql) {  // ragged drafts are shorter
              SCOPED_TRACE(::testing::Message() << "tile " << tile << " window_left " << window_left << " seq_len "
                                                << seq_len << " q_len " << ql << " of " << q_len << " plan "
                                                << plan.splits << " x " << plan.tokens_per_split);
              const int begin = decode_kv_begin(seq_len, ql, window_left, tile);
              const int first_visible = std::max(0, seq_len - ql - window_left);
              ASSERT_EQ(begin % tile, 0);
              ASSERT_LE(begin, first_visible);
              ASSERT_GT(begin + tile, first_visible) << "a whole tile before the window would be read";
              int next = begin, used = 0;
              for (int split = 0; split < plan.splits; ++split) {
                const DecodeSplitRange r =
                    decode_split_range(begin, seq_len, split, plan.splits, plan.tokens_per_split);
                ASSERT_LE(r.n_splits, plan.splits);
                if (split >= r.n_splits) continue;  // the CTA exits at once
                ++used;
                ASSERT_EQ(r.lo, next);
                ASSERT_EQ(r.lo, begin + split * plan.tokens_per_split) << "splits start at kv_begin + k * tps";
                ASSERT_LT(r.lo, r.hi);
                const int len = r.hi - r.lo;
                if (split + 1 < r.n_splits) ASSERT_EQ(len, plan.tokens_per_split);
                else ASSERT_LT(len, plan.tokens_per_split + tile) << "the last split takes at most a tile more";
                next = r.hi;
              }
              ASSERT_EQ(next, seq_len) << "the walk ends at the last key";
              ASSERT_EQ(used, ceil_div(seq_len - begin, plan.tokens_per_split) > plan.splits
                                  ? plan.splits
                                  : ceil_div(seq_len - begin, plan.tokens_per_split));
            }
        }
      }
}

// A ragged batch plans for its longest visible span (max_seq_len caps it); each
// request then uses the splits its own span needs, from its own start.
TEST(WindowPlan, RaggedBatchUsesTheLongestVisibleSpan) {
  const int window_left = 4095, tile = 32;
  const DecodeShape shape = windowed(4, 1, 131072, window_left);
  const SplitPlan plan = plan_splits(shape, 132, 264, tile);
  for (int seq_len : {3, 4096, 4097, 40000 + 17, 131072}) {
    const int begin = decode_kv_begin(seq_len, 1, window_left, tile);
    const int n = decode_split_range(begin, seq_len, 0, plan.splits, plan.tokens_per_split).n_splits;
    EXPECT_EQ(n, std::min<int64_t>(plan.splits, ceil_div(seq_len - begin, plan.tokens_per_split))) << seq_len;
    if (seq_len == 3) EXPECT_EQ(n, 1);
    if (seq_len >= 4096) EXPECT_EQ(n, plan.splits) << "a sequence as long as the window fills the plan";
  }
  // The shorter window-capped batch (max_seq_len below the window) plans as itself.
  expect_same_plan(plan_splits(windowed(4, 1, 2000, window_left), 132, 264, tile),
                   plan_splits(DecodeShape{4, 8, 8, 1, 128, 2000}, 132, 264, tile), "max_seq_len < window");
}

// A window of 4096 on 128K keeps every planned split busy, where a plan over the
// whole sequence left the window in at most 3 splits and the rest of the grid idle.
TEST(WindowPlan, LongSequenceWindowFillsTheGpu) {
  const DecodeShape win = windowed(4, 1, 131072, 4095);
  const SplitPlan a = plan_splits(win, 132, 132 * 2, 32);
  const int begin = decode_kv_begin(131072, 1, 4095, 32);
  const int busy = decode_split_range(begin, 131072, 0, a.splits, a.tokens_per_split).n_splits;
  EXPECT_GE(a.splits, 4);
  EXPECT_EQ(busy, a.splits);
  const DecodeShape whole{4, 8, 8, 1, 128, 131072};
  const int old_busy = static_cast<int>(ceil_div(4096, plan_splits(whole, 132, 132 * 2, 32).tokens_per_split) + 1);
  EXPECT_LE(old_busy, 3);
  EXPECT_GT(busy, old_busy) << a.splits << " splits of " << a.tokens_per_split;
}

// Without a window the range arithmetic is the one the kernel always ran: splits
// of tokens_per_split from 0, the last (at most num_splits) taking the rest.
TEST(WindowPlan, NoWindowRangesAreUnchanged) {
  for (int seq_len : {1, 255, 256, 257, 4096, 5000})
    for (int splits : {1, 3, 16}) {
      const int tps = 256;
      int n = std::max<int>(1, ceil_div(seq_len, tps));
      n = std::min(n, splits);
      for (int s = 0; s < n; ++s) {
        const DecodeSplitRange r = decode_split_range(0, seq_len, s, splits, tps);
        EXPECT_EQ(r.n_splits, n);
        EXPECT_EQ(r.lo, s * tps);
        EXPECT_EQ(r.hi, s == n - 1 ? seq_len : std::min(seq_len, (s + 1) * tps));
      }
    }
}

}  // namespace
}  // namespace attnjit::ops
