// fused_infer_attention_score's Q_S = 1 calls on the decode family's split-KV
// kernel, on the GPU against the float64 reference: contiguous and paged KV, one
// long sequence, ragged lengths with 0, capture and replay, large batches.
#include <gtest/gtest.h>

#include <random>

#include "fia_gpu_case.hpp"

namespace attnjit {
namespace {

using fia_gpu::FiaCase;
using fia_gpu::describe;
using fia_gpu::run_fia;

// Q_S = 1 without mask, pse or LSE runs on the decode family's kernel: contiguous
// layouts through their batch and token strides at any KV_S (1001: no whole tile);
// GQA ratios up to 64; ragged lengths with 0 (output 0) and the full KV_S.
TEST(FiaGpu, DecodeKernelContiguous) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(777);
  const char* layouts[] = {"BSH", "BSND", "BNSD"};
  const int kv_seqs[] = {4096, 2000, 1001};
  const int groups[] = {1, 4, 8, 64};
  int n = 0;
  for (const char* layout : layouts)
    for (int kv_seq : kv_seqs)
      for (int g : groups) {
        FiaCase c;
        c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
        c.layout = layout;
        c.q_seq = 1;
        c.kv_seq = kv_seq;
        c.kv_heads = g == 64 ? 1 : 2 + int(n % 2);
        c.heads = c.kv_heads * g;
        c.head_dim = c.head_dim_v = n % 3 == 0 ? 64 : 128;
        c.batch = 1 + int(rng() % 5);
        if (n % 3 != 2) {  // ragged, with an empty and a full batch
          for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(int64_t(rng() % (kv_seq + 1)));
          c.kv_list[0] = 0;
          if (c.batch > 1) c.kv_list[1] = kv_seq;
        } else if (n % 2) {
          c.kv_list = {int64_t(1 + rng() % kv_seq)};  // one length for all
        }
        if (n % 5 == 0) c.scale = 1.0;  // the seed's default
        c.kernel = "decode.";
        EXPECT_LE(run_fia(c, 5000 + n), 1e-2) << describe(c);
        ++n;
      }
}

TEST(FiaGpu, DecodeKernelOneSequenceAndLongSplits) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  // KV_S 1000 at batch 1: one contiguous sequence.
  FiaCase c;
  c.layout = "BSND";
  c.q_seq = 1;
  c.batch = 1;
  c.kv_seq = 1000;
  c.heads = 32;
  c.kv_heads = 8;
  c.kernel = "decode.";
  EXPECT_LE(run_fia(c, 61), 1e-2) << describe(c);
  // Long KV: many splits merged through the runtime's scratch.
  c.kv_seq = 32768;
  c.layout = "BNSD";
  EXPECT_LE(run_fia(c, 62), 1e-2) << describe(c);
  c.batch = 3;
  c.kv_seq = 16384;
  c.kv_list = {16384, 0, 9001};
  c.layout = "BSH";
  EXPECT_LE(run_fia(c, 63), 1e-2) << describe(c);
  // Every batch empty: all output 0.
  c.kv_list = {0};
  EXPECT_LE(run_fia(c, 64), 1e-2) << describe(c);
  // KV_S 1000 at batch 2: contiguous K/V needs no length in whole pages.
  c.batch = 2;
  c.kv_seq = 1000;
  c.kv_list = {};
  EXPECT_LE(run_fia(c, 65), 1e-2) << describe(c);
}

TEST(FiaGpu, DecodeKernelPaged) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(31);
  const int block_sizes[] = {16, 32, 64, 128, 256, 512};
  for (int n = 0; n < 12; ++n) {
    FiaCase c;
    c.dtype = n % 2 ? DType::kFloat16 : DType::kBFloat16;
    c.layout = n % 3 == 0 ? "BSH" : n % 3 == 1 ? "BSND" : "BNSD";
    c.paged_rank4 = c.layout == "BNSD" && n % 2;
    c.q_seq = 1;
    c.block_size = block_sizes[n % 6];
    c.batch = 1 + int(rng() % 4);
    c.kv_heads = 1 + int(rng() % 4);
    c.heads = c.kv_heads * (1 << (rng() % 4));
    c.head_dim = c.head_dim_v = n % 4 == 0 ? 256 : 128;
    for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(int64_t(rng() % 3000));
    if (n % 4 == 1) c.kv_list[0] = 0;
    c.kernel = "decode.";
    EXPECT_LE(run_fia(c, 800 + n), 1e-2) << describe(c);
  }
}

// A captured decode call replays the lengths it was captured with (ragged: one
// memset per run of equal lengths into the stream's table).
TEST(FiaGpu, DecodeKernelCaptured) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  for (int n = 0; n < 3; ++n) {
    FiaCase c;
    c.layout = n == 1 ? "BNSD" : "BSND";
    c.q_seq = 1, c.batch = 6, c.kv_seq = 2048, c.heads = 16, c.kv_heads = 4;
    if (n == 0) c.kv_list = {2048, 0, 0, 700, 1, 2048};
    if (n == 1) c.kv_list = {1500};
    if (n == 2) {  // paged
      c.block_size = 64;
      c.kv_list = {100, 2048, 0, 0, 513, 64};
    }
    c.capture = true;
    c.kernel = "decode.";
    EXPECT_LE(run_fia(c, 900 + n), 1e-2) << describe(c);
  }
}

// Large batches: one decode launch (no work-list chunks), ragged.
TEST(FiaGpu, DecodeKernelLargeBatch) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  FiaCase c;
  c.layout = "BSND";
  c.q_seq = 1, c.batch = 130, c.kv_seq = 256, c.heads = 8, c.kv_heads = 2;
  std::mt19937 rng(8);
  for (int b = 0; b < c.batch; ++b) c.kv_list.push_back(int64_t(rng() % 257));
  c.kernel = "decode.";
  EXPECT_LE(run_fia(c, 66), 1e-2) << describe(c);
}

}  // namespace
}  // namespace attnjit
