// fused_infer_attention_score's left padding, shared prefix and int8 output on the
// GPU against the float64 reference, on both prefill backends where the GPU has them
// (xqa everywhere, trtllm-gen on sm_90a): ragged lengths, Q_S > 1 and Q_S = 1, masks
// and causal modes, pse. Outputs start as NaN (int8: -1 bytes); every element is checked.
#include <gtest/gtest.h>

#include <random>

#include "fia_gpu_case.hpp"

namespace attnjit {
namespace {

using fia_gpu::FiaCase;
using fia_gpu::describe;
using fia_gpu::run_fia;

// Left padding on Q and KV with ragged lengths: per-batch and shared pads, negative
// pads (0), a window that does not fit (the batch reads 0), masks (mode 0 ignores
// pre/next then) and pse indexed within the windows, LSE at physical rows.
TEST(FiaPadPrefixGpu, LeftPaddingOnQueryAndKv) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(7001);
  const char* layouts[] = {"BSH", "BSND", "BNSD", "BNSD_BSND"};
  for (int n = 0; n < 16; ++n) {
    FiaCase c;
    c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.layout = layouts[n % 4];
    c.batch = 3;
    c.kv_heads = 2;
    c.heads = 2 * (1 + int(rng() % 4));
    c.q_seq = 40 + int(rng() % 100);
    c.kv_seq = 60 + int(rng() % 200);
    for (int b = 0; b < c.batch; ++b) {
      c.q_list.push_back(1 + int(rng() % (c.q_seq - 2)));
      c.kv_list.push_back(int(rng() % c.kv_seq));
    }
    const int qroom = c.q_seq - int(*std::max_element(c.q_list.begin(), c.q_list.end()));
    const int kvroom = c.kv_seq - int(*std::max_element(c.kv_list.begin(), c.kv_list.end()));
    if (n % 3 == 0) {
      c.q_pad = {int64_t(rng() % (qroom + 1))};
    } else {
      for (int b = 0; b < c.batch; ++b) c.q_pad.push_back(int64_t(rng() % (qroom + 1)) - (b == 1 ? 5 : 0));
    }
    for (int b = 0; b < c.batch; ++b) c.kv_pad.push_back(int64_t(rng() % (kvroom + 1)));
    if (n == 5) c.kv_pad[2] = c.kv_seq;  // the window starts before 0: batch 2 reads 0
    c.sparse = n % 4 == 1 ? 3 : 0;
    c.mask = c.sparse == 3 ? 2 : n % 4 == 2 ? 1 : 0;
    c.mask_shape = n;
    c.pre = 3, c.next = 2;  // ignored with left padding in mode 0
    c.pse = n % 5 == 0 ? 1 : 0;
    c.lse = n % 2 == 0;
    EXPECT_LE(run_fia(c, 100 + n), 1e-2) << describe(c);
  }
  // Only the KV side, and Q_S = 1 (the query's pad is ignored there).
  FiaCase d;
  d.q_seq = 1;
  d.kv_seq = 500;
  d.batch = 4;
  d.kv_list = {100, 499, 0, 250};
  d.kv_pad = {7, 1, 3, 250};
  d.q_pad = {9};
  d.lse = true;
  d.mask = 1;
  EXPECT_LE(run_fia(d, 150), 1e-2) << describe(d);
}

// The shared prefix with ragged own lengths, Q_S > 1 and Q_S = 1, with masks
// (columns index [prefix | own]), causal modes (d counts the prefix) and pse; the
// prefix length from device memory or the prefix's S.
TEST(FiaPadPrefixGpu, SharedPrefixRagged) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(7002);
  const char* layouts[] = {"BSND", "BSH", "BNSD", "BNSD_BSND"};
  for (int n = 0; n < 16; ++n) {
    FiaCase c;
    c.dtype = n % 2 ? DType::kBFloat16 : DType::kFloat16;
    c.layout = layouts[n % 4];
    const bool dec = n % 4 != 3 && n % 3 == 0;
    c.batch = 2 + int(rng() % 3);
    c.kv_heads = 1 + int(rng() % 2);
    c.heads = c.kv_heads * (1 + int(rng() % 8));
    c.q_seq = dec ? 1 : 2 + int(rng() % 150);
    c.kv_seq = 1 + int(rng() % 200);
    c.prefix = 1 + int(rng() % 300);
    c.prefix_len = n % 4 == 2 ? -1 : int64_t(rng() % (c.prefix + 1));
    for (int b = 0; b < c.batch; ++b) {
      c.kv_list.push_back(int(rng() % (c.kv_seq + 1)));
      if (!dec) c.q_list.push_back(1 + int(rng() % c.q_seq));
    }
    const int mode = n % 4;
    if (dec) {
      c.mask = mode == 1 ? 1 : 0;
    } else if (mode == 1) {
      c.sparse = 3, c.mask = 2;
    } else if (mode == 2) {
      c.sparse = 0, c.mask = 1, c.pre = int64_t(rng() % 200), c.next = int64_t(rng() % 50);
    } else if (mode == 3) {
      c.sparse = 2, c.mask = 2;
    }
    c.mask_shape = n;
    c.pse = n % 5 == 1 ? 2 : 0;
    c.lse = n % 2 == 1;
    EXPECT_LE(run_fia(c, 200 + n), 1e-2) << describe(c);
  }
}

// int8 output per tensor and per channel, fp32 and bf16 scales, with and without an
// offset, at Q_S > 1 and Q_S = 1, with a causal mode and left padding (per tensor).
TEST(FiaPadPrefixGpu, Int8Output) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(7003);
  const char* layouts[] = {"BSND", "BSH", "BNSD", "BNSD_BSND"};
  for (int n = 0; n < 12; ++n) {
    FiaCase c;
    c.dtype = n % 3 == 0 ? DType::kFloat16 : DType::kBFloat16;
    c.layout = layouts[n % 4];
    c.quant = 1 + n % 2;
    c.quant_offset = n % 3 != 1;
    c.quant_bf16 = c.dtype == DType::kBFloat16 && n % 4 == 2;
    const bool dec = n % 4 != 3 && n % 5 == 0;
    c.batch = 2;
    c.q_seq = dec ? 1 : 20 + int(rng() % 120);
    c.kv_seq = c.q_seq + int(rng() % 200);
    c.lse = n % 2 == 0;
    if (!dec) c.q_list = {int64_t(c.q_seq), int64_t(1 + rng() % c.q_seq)};
    c.kv_list = {int64_t(c.kv_seq), int64_t(c.q_seq + rng() % (c.kv_seq - c.q_seq + 1))};
    if (!dec && n % 4 == 1) c.sparse = 3, c.mask = 2;
    if (c.quant == 1 && n % 3 == 2) c.kv_pad = {int64_t(rng() % 5)}, c.kv_list = {int64_t(c.kv_seq) - 5, 3};
    if (n == 7) c.prefix = 64, c.prefix_len = 40;
    EXPECT_LE(run_fia(c, 300 + n), 1e-2) << describe(c);
  }
}

// The padding and prefix lengths are read on device: a captured graph replays them.
TEST(FiaPadPrefixGpu, CapturedWithDeviceLengths) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  FiaCase c;
  c.q_seq = 64;
  c.kv_seq = 128;
  c.q_list = {30, 64};
  c.kv_list = {100, 20};
  c.q_pad = {10, 0};
  c.kv_pad = {28};
  c.capture = true;
  c.lse = true;
  EXPECT_LE(run_fia(c, 400), 1e-2) << describe(c);
  FiaCase p;
  p.q_seq = 1;
  p.prefix = 300;
  p.prefix_len = 257;
  p.kv_list = {3, 150};
  p.capture = true;
  EXPECT_LE(run_fia(p, 401), 1e-2) << describe(p);
}

}  // namespace
}  // namespace attnjit
