// xqa (paged GQA decode, spec decode) on the GPU against the float64 reference.
#include <gtest/gtest.h>

#include <vector>

#include "common/env_guard.hpp"
#include "xqa_gpu_case.hpp"

namespace attnjit {
namespace {

using xqa_gpu::XqaCase;
using xqa_gpu::describe;
using xqa_gpu::run_xqa;
using xqa_gpu::tolerance;

TEST(XqaGpu, Basic) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  XqaCase c;
  EXPECT_LE(run_xqa(c, 1), tolerance(c)) << describe(c);
}

TEST(XqaGpu, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(777);
  const int hds[] = {64, 128, 256};
  const int groups[] = {1, 2, 4, 5, 8, 16, 64};
  const int pages[] = {16, 32, 64, 128};
  int n = 0;
  for (int hd : hds)
    for (int g : groups)
      for (int p : pages) {
        XqaCase c;
        c.dtype = rng() % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.kv_dtype = rng() % 3 == 0 ? DType::kFloat8E4M3 : c.dtype;
        c.out_dtype = (c.kv_dtype == DType::kFloat8E4M3 && rng() % 3 == 0) ? DType::kFloat8E4M3 : c.dtype;
        if (c.out_dtype == DType::kFloat8E4M3) c.rcp_out_scale = 4.0f;
        c.head_dim = hd;
        c.group = g;
        c.page_size = p;
        c.num_kv_heads = g >= 16 ? 1 : 2;
        c.layout = rng() % 2 ? KvLayout::kNHD : KvLayout::kHND;
        c.batch = 3;
        c.seq_lens = {1 + int(rng() % 40), 1 + int(rng() % 700), 1 + int(rng() % 3000)};
        c.sm_count = rng() % 3 == 0 ? 1 : 0;
        if (c.kv_dtype == DType::kFloat8E4M3) c.kv_scale = 0.75f;
        double err = run_xqa(c, 5000 + n++);
        EXPECT_LE(err, tolerance(c)) << describe(c);
      }
}

TEST(XqaGpu, SinksWindowsScalesAndSplits) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3}) {
    XqaCase b;
    b.kv_dtype = kvd;
    b.seq_lens = {1, 37, 5000};
    XqaCase c = b;
    c.sinks = true;
    cases.push_back(c);
    c = b;
    c.window = 100;  // shorter than most sequences
    cases.push_back(c);
    c = b;
    c.window = 9000;  // longer than every sequence
    c.sinks = true;
    cases.push_back(c);
    c = b;
    c.scale_ptrs = true;
    c.q_scale = 0.5f;
    c.kv_scale = 1.25f;
    cases.push_back(c);
    c = b;
    c.sm_count = 1;  // multi-block off
    cases.push_back(c);
    c = b;
    c.batch = 1;
    c.seq_lens = {32768};  // multi-block on: many splits
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 7000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

TEST(XqaGpu, SpeculativeDecoding) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int qlen : {2, 4, 7})
    for (int mk : {0, 1})
      for (bool ragged : {false, true}) {
        XqaCase c;
        c.q_seq_len = qlen;
        c.mask_kind = mk;
        c.ragged = ragged;
        c.group = qlen == 7 ? 4 : 8;
        c.seq_lens = {qlen + 3, 300, 2000};
        cases.push_back(c);
      }
  {
    XqaCase c;  // spec decode with sinks, a window and fp8 KV together
    c.q_seq_len = 4;
    c.mask_kind = 1;
    c.sinks = true;
    c.window = 64;
    c.kv_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.seq_lens = {7, 300, 2000};
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 9000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 5: speculative decoding with more than 32 query rows per (request,
// KV head) holds 64 rows per CTA (split-M, templates/decode/decode_split_m.cuh): 16
// rows per warp over one CTA-wide ring, and the split merge over four 16-row blocks.
// Rows 48 (a warp without rows), 64, 96 and 128 (two 64-row CTAs, the second partly
// valid); 24 and 32 at head_dim 128 take dual-M (the test below), at 64 and 256 split-M; group x q_seq_len <= 16 (the token split) beside them; uniform and
// ragged drafts, random masks, groups 4/8/16, NHD/HND, bf16 and fp8 KV (fp8 output
// too), sinks, windows, head dims 64/128/256, one split and many.
TEST(XqaGpu, SpeculativeDecodingSixtyFourRowsPerCta) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  const int groups[] = {4, 8, 16};
  int i = 0;
  for (int qlen : {3, 4, 6, 8})
    for (int group : groups)
      for (bool ragged : {false, true}) {
        XqaCase c;
        c.q_seq_len = qlen;
        c.group = group;
        c.ragged = ragged;
        c.mask_kind = 1;
        c.batch = 3;
        c.seq_lens = {qlen + 2, 700 + qlen, 9000 + 17 * qlen};  // a lone draft, one split, several
        c.layout = i % 2 ? KvLayout::kHND : KvLayout::kNHD;
        c.kv_dtype = i % 3 == 1 ? DType::kFloat8E4M3 : DType::kBFloat16;
        if (dtype_size(c.kv_dtype) == 1) c.kv_scale = 0.5f;
        c.sm_count = i % 4 == 3 ? 1 : 0;  // 1: one split (straight to the output); 0: many
        c.sinks = i % 5 == 2;
        c.window = i % 7 == 4 ? 333 : 0;
        c.page_size = i % 6 == 5 ? 64 : 32;
        ++i;
        cases.push_back(c);
      }
  for (int hd : {64, 256})
    for (int sm : {0, 1}) {
      XqaCase c;  // the other head dims: Q in registers (64), Q read from shared memory (256)
      c.head_dim = hd;
      c.q_seq_len = 5;
      c.group = 8;
      c.mask_kind = 1;
      c.sm_count = sm;
      c.seq_lens = {5, 2500, 12000};
      c.ragged = sm == 1;
      cases.push_back(c);
    }
  {
    XqaCase c;  // fp8 KV and fp8 output, sinks, window, page 128, group 16 x 8 drafts (two CTAs)
    c.kv_dtype = DType::kFloat8E4M3;
    c.out_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.rcp_out_scale = 2.f;
    c.group = 16;
    c.q_seq_len = 8;
    c.page_size = 128;
    c.sinks = true;
    c.window = 1000;
    c.mask_kind = 1;
    c.seq_lens = {9, 5000, 30000};
    cases.push_back(c);
  }
  {
    XqaCase c;  // q_seq_len 2 at group 16: 32 rows
    c.group = 16;
    c.q_seq_len = 2;
    c.mask_kind = 0;
    c.seq_lens = {3, 4000};
    c.batch = 2;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 13000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Spec decoding with 17-32 query rows per (request, KV head) holds 32 rows per CTA
// (dual-M, templates/decode/decode_dual_m.cuh): two 16-row M tiles per warp, the warps
// splitting the tokens, the warp merge and split merge over two 16-row blocks. Rows 24
// and 32 (g8 x 3/4, g4 x 8, g16 x 2); ragged drafts down to one token (a second M tile
// of padding); bf16, fp16 and fp8 KV, NHD/HND, sinks, windows, one split and many.
TEST(XqaGpu, SpeculativeDecodingThirtyTwoRowsPerCta) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  struct Shape { int qlen, group; };
  const Shape shapes[] = {{3, 8}, {4, 8}, {8, 4}, {2, 16}};
  std::vector<XqaCase> cases;
  int i = 0;
  for (const Shape& sh : shapes)
    for (bool ragged : {false, true}) {
      XqaCase c;
      c.q_seq_len = sh.qlen;
      c.group = sh.group;
      c.ragged = ragged;
      c.mask_kind = i % 3 == 2 ? 0 : 1;
      c.batch = 3;
      c.seq_lens = {sh.qlen + 1, 900 + sh.qlen, 11000 + 13 * sh.qlen};
      c.layout = i % 2 ? KvLayout::kHND : KvLayout::kNHD;
      c.kv_dtype = i % 3 == 1 ? DType::kFloat8E4M3 : (i == 4 ? DType::kFloat16 : DType::kBFloat16);
      if (c.kv_dtype == DType::kFloat16) c.dtype = c.out_dtype = DType::kFloat16;
      if (dtype_size(c.kv_dtype) == 1) c.kv_scale = 0.5f;
      c.sm_count = i % 4 == 3 ? 1 : 0;
      c.sinks = i % 5 == 1;
      c.window = i % 3 == 0 ? 500 : 0;
      ++i;
      cases.push_back(c);
    }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 16000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// ATTNJIT_DECODE_SPLIT_M=0 (the A/B knob) renders and launches the 16-row kernel;
// both stay correct.
TEST(XqaGpu, SpeculativeDecodingWithSplitMOff) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard off("ATTNJIT_DECODE_SPLIT_M", "0");
  for (bool ragged : {false, true}) {
    XqaCase c;
    c.q_seq_len = 6;
    c.group = 8;
    c.ragged = ragged;
    c.mask_kind = 1;
    c.seq_lens = {7, 3000, 10000};
    double err = run_xqa(c, 15000 + int(ragged));
    EXPECT_LE(err, tolerance(c)) << describe(c) << " split-M off";
  }
}

// ATTNJIT_DECODE_DUAL_M=0 (its A/B knob) launches 32 rows as two 16-row CTAs again.
TEST(XqaGpu, SpeculativeDecodingWithDualMOff) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  testing::EnvGuard off("ATTNJIT_DECODE_DUAL_M", "0");
  for (bool ragged : {false, true}) {
    XqaCase c;
    c.q_seq_len = 4;
    c.group = 8;
    c.ragged = ragged;
    c.mask_kind = 1;
    c.seq_lens = {5, 3000, 10000};
    double err = run_xqa(c, 15100 + int(ragged));
    EXPECT_LE(err, tolerance(c)) << describe(c) << " dual-M off";
  }
}


// Issue 9 item 4: head_dim 384 and 512, where the warps split the output dims over
// one CTA-wide ring (templates/decode/decode_split_d.cuh). Both KV dtypes, both
// layouts, pages 16 (16-token tiles) and 64 (32-token tiles), groups up to 16,
// sinks, windows (the start moved off the prefetched pages), fp8 output, scale
// pointers, ragged lengths, and one split as well as many (the split merge reuses
// the ring).
TEST(XqaGpu, HeadDimsPast256SplitTheOutputDims) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int hd : {384, 512})
    for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3})
      for (int page : {16, 64}) {
        XqaCase c;
        c.head_dim = hd;
        c.kv_dtype = kvd;
        if (kvd == DType::kFloat8E4M3) c.kv_scale = 0.75f;
        c.page_size = page;
        c.layout = page == 16 ? KvLayout::kHND : KvLayout::kNHD;
        c.batch = 4;
        c.seq_lens = {1, 37, 1000 + hd / 16, 5000};  // ragged: a lone token, part of a tile, several splits
        cases.push_back(c);
        c.sinks = true;
        c.window = 300;
        c.layout = page == 16 ? KvLayout::kNHD : KvLayout::kHND;
        cases.push_back(c);
        c.sinks = false;
        c.window = 0;
        c.sm_count = 1;  // one split per request: the warp slices go straight to the output
        c.group = 16;
        c.num_kv_heads = 1;
        cases.push_back(c);
      }
  {
    XqaCase c;  // fp8 output and device scales at head_dim 512, group 1
    c.head_dim = 512;
    c.group = 1;
    c.num_kv_heads = 4;
    c.kv_dtype = DType::kFloat8E4M3;
    c.out_dtype = DType::kFloat8E4M3;
    c.rcp_out_scale = 4.0f;
    c.scale_ptrs = true;
    c.q_scale = 0.5f;
    c.kv_scale = 1.25f;
    c.seq_lens = {2049, 65, 3};
    cases.push_back(c);
  }
  {
    XqaCase c;  // batch 1, one long sequence: many splits, window with sinks
    c.head_dim = 512;
    c.dtype = c.kv_dtype = c.out_dtype = DType::kFloat16;
    c.batch = 1;
    c.seq_lens = {32768 + 5};
    c.window = 4096;
    c.sinks = true;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 15000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// The split-D kernel at sizes compute-sanitizer gets through quickly: each warp copies
// and reads its own dims of every stage, and the warps' partial scores alternate two
// buffers (one over Q's bytes), so racecheck runs here (gpu_run.sh's SANITIZER_FILTER).
TEST(XqaGpu, SplitDSmallForTheSanitizer) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  int n = 0;
  for (DType kvd : {DType::kBFloat16, DType::kFloat8E4M3}) {
    XqaCase c;
    c.head_dim = 512;
    c.kv_dtype = kvd;
    c.page_size = 32;
    c.batch = 3;
    c.seq_lens = {1, 70, 300};
    c.sm_count = 2;  // a few splits, merged
    EXPECT_LE(run_xqa(c, 16000 + n++), tolerance(c)) << describe(c);
    c.head_dim = 384;
    c.window = 100;
    c.sinks = true;
    EXPECT_LE(run_xqa(c, 16000 + n++), tolerance(c)) << describe(c);
  }
}

}  // namespace
}  // namespace attnjit
