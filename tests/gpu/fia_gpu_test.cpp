// fused_infer_attention_score on the GPU against the float64 reference, on the
// prefill kernels (both backends where the GPU has them): layouts, GQA, ragged
// lengths, masks and sparse modes with random pre/next, pse, paged KV, LSE, Q_S = 1
// and > 1, head dims past 256. Outputs start as NaN; every element is checked.
#include <gtest/gtest.h>

#include <random>

#include "common/env_guard.hpp"
#include "fia_gpu_case.hpp"

namespace attnjit {
namespace {

using fia_gpu::FiaCase;
using fia_gpu::describe;
using fia_gpu::run_fia;

// One random case of the sweeps: layouts, head dims, GQA, ragged lengths, every
// sparse mode with random pre/next, masks of each shape, pse, LSE, the default scale.
FiaCase random_fia_case(std::mt19937& rng) {
  const char* layouts[] = {"BSH", "BSND", "BNSD", "BNSD_BSND"};
  const int dims[] = {64, 128, 192, 256};
  const int groups[] = {1, 2, 4, 8, 16};
  FiaCase c;
  c.dtype = rng() % 2 ? DType::kFloat16 : DType::kBFloat16;
  c.layout = layouts[rng() % 4];
  c.head_dim = c.head_dim_v = dims[rng() % 4];
  const int g = groups[rng() % 5];
  c.kv_heads = 1 + int(rng() % 2);
  c.heads = c.kv_heads * g;
  c.batch = 1 + int(rng() % 3);
  const bool dec = c.layout != "BNSD_BSND" && rng() % 4 == 0;
  c.q_seq = dec ? 1 : 1 + int(rng() % 200) + (c.layout == "BNSD_BSND");
  if (c.q_seq == 1 && c.layout == "BNSD_BSND") c.q_seq = 2;
  const bool is_dec = c.q_seq == 1;
  c.kv_seq = 1 + int(rng() % 400);
  if (rng() % 2) {  // ragged lengths: one value or >= B values
    if (rng() % 3 == 0) c.q_list = {int64_t(1 + rng() % c.q_seq)};
    else
      for (int b = 0; b < c.batch + int(rng() % 2); ++b) c.q_list.push_back(int64_t(rng() % (c.q_seq + 1)));
    for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(int64_t(rng() % (c.kv_seq + 1)));
  }
  c.sparse = int(rng() % 5);
  c.pre = int64_t(rng() % 300) - 50;
  c.next = int64_t(rng() % 300) - 50;
  if (rng() % 4 == 0) c.pre = 2147483647;
  if (c.sparse >= 2) c.mask = 2;
  else if (c.sparse == 1 || rng() % 2) c.mask = 1;
  if (is_dec && rng() % 2) c.mask = 1;
  if (is_dec && c.mask == 2) c.mask = rng() % 2;  // Q_S = 1: a (B, KV_S) mask or none
  c.mask_shape = int(rng() % 5);
  c.pse = rng() % 3 == 0 ? 1 + int(rng() % 2) : 0;
  c.lse = rng() % 2;
  if (rng() % 4 == 0) c.scale = 1.0;  // the seed's default
  return c;
}

TEST(FiaGpu, BasicBsndCausalGqa) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  FiaCase c;
  c.sparse = 3;
  c.mask = 2;
  c.lse = true;
  EXPECT_LE(run_fia(c, 1), 1e-2) << describe(c);
}

TEST(FiaGpu, DecodeGroupHeadsInRows) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int g : {1, 8, 64}) {
    FiaCase c;
    c.layout = g == 8 ? "BNSD" : "BSH";
    c.q_seq = 1;
    c.kv_seq = 700;
    c.batch = 3;
    c.kv_heads = g == 64 ? 1 : 2;
    c.heads = c.kv_heads * g;
    c.kv_list = {700, 1, 333};
    c.lse = true;
    c.sparse = 3;  // ignored at Q_S = 1
    EXPECT_LE(run_fia(c, 10 + g), 1e-2) << describe(c);
  }
}

TEST(FiaGpu, RandomizedSweep) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(4242);
  for (int n = 0; n < 48; ++n) {
    const FiaCase c = random_fia_case(rng);
    double err = run_fia(c, 9000 + n);
    EXPECT_LE(err, 1e-2) << describe(c);
  }
}

TEST(FiaGpu, PagedKv) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(99);
  for (int n = 0; n < 12; ++n) {
    FiaCase c;
    c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
    const bool dec = n % 3 == 0;
    c.layout = n % 4 == 0 ? "BSH" : "BNSD";
    c.paged_rank4 = c.layout == "BNSD" && n % 2;
    c.q_seq = dec ? 1 : 1 + int(rng() % 150);
    c.block_size = dec ? 16 * (1 + int(rng() % 8)) : 128 * (1 + int(rng() % 2));
    c.batch = 1 + int(rng() % 3);
    c.kv_heads = 2;
    c.heads = 2 * (1 + int(rng() % 4));
    c.head_dim = c.head_dim_v = n % 5 == 0 ? 64 : 128;
    for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(int64_t(1 + rng() % 600));
    if (n % 2) {
      c.sparse = 3;
      c.mask = 2;
    } else if (n % 4 == 2) {
      c.mask = 1;
      c.mask_shape = int(rng() % 5);
    }
    if (c.q_seq == 1 && c.mask == 2) c.mask = 0;  // Q_S = 1: sparse_mode is ignored, the mask would be (B, KV_S)
    c.pse = n % 3 == 1 ? 1 : 0;
    c.lse = true;
    double err = run_fia(c, 300 + n);
    EXPECT_LE(err, 1e-2) << describe(c);
  }
}

TEST(FiaGpu, TndWithDifferentValueHeadDim) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int n = 0; n < 4; ++n) {
    FiaCase c;
    c.layout = "TND";
    c.heads = c.kv_heads = n % 2 ? 8 : 16;
    c.head_dim = 192;
    c.head_dim_v = n < 2 ? 128 : 192;
    c.batch = 3;
    c.q_list = {50, 50, 170};  // cumulative: 50, 0, 120
    c.kv_list = {80, 160, 300};
    if (n % 2) c.sparse = 3, c.mask = 2;
    c.lse = n != 2;
    EXPECT_LE(run_fia(c, 70 + n), 1e-2) << describe(c);
  }
}

// Many KV tiles: the stage ring wraps several times (its mbarrier phases flip),
// causal tiles are skipped, and the last tile is partial; every head dim the
// wgmma kernel takes, GQA and ragged lengths.
TEST(FiaGpu, LongSequencesWrapTheStageRing) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  const int dims[][2] = {{64, 64}, {128, 128}, {192, 192}, {256, 256}};  // unequal: TND only
  for (int n = 0; n < 8; ++n) {
    FiaCase c;
    c.layout = n % 2 ? "BNSD" : "BSND";
    c.head_dim = dims[n % 4][0];
    c.head_dim_v = dims[n % 4][1];
    c.dtype = n % 3 ? DType::kBFloat16 : DType::kFloat16;
    c.batch = 2;
    c.kv_heads = 2;
    c.heads = n < 4 ? 8 : 2;
    c.q_seq = 700;
    c.kv_seq = 1900;
    c.kv_list = {1900, 1111};
    c.q_list = {700, 333};
    if (n % 2 == 0) c.sparse = 3, c.mask = 2;
    c.lse = true;
    EXPECT_LE(run_fia(c, 600 + n), 1e-2) << describe(c);
  }
}

// Head dims past 256 (the seed allows 512): the portable kernel splits the value
// dims over two CTAs; Q_S > 1 and = 1, masks, pse, LSE, paged KV, GQA.
TEST(FiaGpu, HeadDimsPast256) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int n = 0; n < 6; ++n) {
    FiaCase c;
    c.head_dim = c.head_dim_v = n % 2 ? 384 : 512;
    c.dtype = n % 3 ? DType::kBFloat16 : DType::kFloat16;
    c.layout = n < 3 ? "BSND" : "BNSD";
    c.batch = 2;
    c.kv_heads = 2;
    c.heads = 4 + 4 * (n % 2);
    c.q_seq = n == 4 ? 1 : 90 + 10 * n;
    c.kv_seq = 300;
    c.kv_list = {300, 123};
    if (n == 0 || n == 2) c.sparse = 3, c.mask = 2;
    if (n == 1) c.mask = 1, c.mask_shape = 1;
    if (n == 2 || n == 5) c.pse = 1;
    if (n == 3) c.block_size = 128;
    c.lse = n != 4;
    EXPECT_LE(run_fia(c, 700 + n), 1e-2) << describe(c);
  }
}

// More CTAs (tiles x KV heads) than the H200 runs at once, on both kernels:
// padded rows (zero tiles), tiles whose band sees no key (mode 4 with a short KV),
// causal tile skipping and ragged lengths among them.
FiaCase many_tiles_case(int n) {
  FiaCase c;
  c.layout = n == 1 ? "BSND" : "BNSD";
  c.dtype = n == 2 ? DType::kFloat16 : DType::kBFloat16;
  c.head_dim = c.head_dim_v = n == 2 ? 64 : 128;
  c.batch = 4;
  c.heads = 16;
  c.kv_heads = 4;
  c.q_seq = 1000;
  c.kv_seq = 1200;
  c.q_list = {1000, 517, 1000, 333};
  c.kv_list = {1200, 600, 100, 1200};
  if (n == 0) c.sparse = 3, c.mask = 2;
  if (n == 1) c.sparse = 4, c.mask = 2, c.pre = 50, c.next = 0;  // batch 2: rows before 900 see nothing
  c.lse = true;
  return c;
}

TEST(FiaGpu, ManyTilesWithZeroAndEmptyOnes) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int n = 0; n < 3; ++n) {
    const FiaCase c = many_tiles_case(n);
    EXPECT_LE(run_fia(c, 800 + n), 1e-2) << describe(c);
  }
}

// The wgmma kernel's CTAs walk several work items each (ATTNJIT_PREFILL_CTAS caps the
// grid): the stage ring, the ping-pong turns and Q reloads run on across items of
// every kind (zero tiles, tiles that see no key, ragged, causal, masks, pse, LSE).
TEST(FiaGpu, FewCtasWalkEveryItem) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (const char* ctas : {"1", "3"}) {
    testing::EnvGuard cap("ATTNJIT_PREFILL_CTAS", ctas);
    std::mt19937 rng(777);
    for (int n = 0; n < 12; ++n) {
      const FiaCase c = random_fia_case(rng);
      EXPECT_LE(run_fia(c, 7000 + n), 1e-2) << describe(c) << " with " << ctas << " CTAs";
    }
    for (int n = 0; n < 3; ++n) {
      const FiaCase c = many_tiles_case(n);
      EXPECT_LE(run_fia(c, 800 + n), 1e-2) << describe(c) << " with " << ctas << " CTAs";
    }
  }
}

TEST(FiaGpu, LargeBatchSpansSeveralLaunches) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  FiaCase c;
  c.batch = 200;  // > kPrefillMaxBatches: the work list is split over launches
  c.q_seq = 20;
  c.kv_seq = 40;
  c.heads = c.kv_heads = 2;
  c.head_dim = c.head_dim_v = 64;
  std::mt19937 rng(5);
  for (int b = 0; b < c.batch; ++b) c.q_list.push_back(int64_t(rng() % 21)), c.kv_list.push_back(int64_t(rng() % 41));
  c.sparse = 3;
  c.mask = 2;
  c.lse = true;
  EXPECT_LE(run_fia(c, 55), 1e-2) << describe(c);
}

// The seed's empty inputs: with key/value of S2 = 0 attention_out is all zeros and the LSE
// +inf (no key seen); an empty query returns at once, writing nothing. No kernel runs.
TEST(FiaGpu, EmptyInputsAsTheSeedSays) {
  ATTNJIT_REQUIRE_GPU();
  using testing::DeviceTensor;
  const DType bf16 = DType::kBFloat16;
  DeviceTensor q(bf16, {2, 8, 4, 64}), out(bf16, {2, 8, 4, 64}), lse(DType::kFloat32, {2, 8, 4, 1}), kv(bf16, {1});
  q.upload_floats(std::vector<float>(size_t(q.view.numel()), 0.5f));
  out.poison();
  lse.poison();
  FiaArgs a;
  a.input_layout = "BNSD";
  a.num_heads = a.num_key_value_heads = 8;
  a.query = q.view;
  a.key = a.value = TensorView::contiguous(kv.view.data, bf16, {2, 8, 0, 64});
  a.attention_out = out.view;
  a.softmax_lse_flag = true;
  a.softmax_lse = lse.view;
  fused_infer_attention_score(a);
  driver::ctx_sync();
  for (float x : out.download_floats()) ASSERT_EQ(x, 0.f);
  for (float x : lse.download_floats()) ASSERT_TRUE(std::isinf(x) && x > 0) << x;
  out.poison();
  a.query.shape[2] = 0;  // an empty query: nothing is written
  a.key = a.value = kv.view;
  fused_infer_attention_score(a);
  driver::ctx_sync();
  for (float x : out.download_floats()) ASSERT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace attnjit
