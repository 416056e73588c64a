// The full int8 path of fused_infer_attention_score on the GPU (int8 query, key and
// value; dequant_scale1, quant_scale1, dequant_scale2 per tensor on device) against the
// float64 reference ds2 * qs1 * softmax(scale * ds1 * q k^T + pse) v, on both prefill
// backends where the GPU has them: layouts, head dims, GQA, ragged and left-padded
// lengths, causal, band and mask modes, fp16 pse, LSE, fp16 and int8 output (per tensor
// and per channel), a captured graph. Outputs start as NaN (int8: -1); every element is checked.
#include <gtest/gtest.h>

#include <random>

#include "fia_gpu_case.hpp"

namespace attnjit {
namespace {

using fia_gpu::FiaCase;
using fia_gpu::describe;
using fia_gpu::run_fia;

TEST(FiaInt8Gpu, FullInt8Prefill) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::mt19937 rng(8101);
  const char* layouts[] = {"BSND", "BSH", "BNSD", "BNSD_BSND"};
  const int dims[] = {128, 64, 256, 96};
  const int groups[] = {1, 4, 8, 2};
  for (int n = 0; n < 16; ++n) {
    FiaCase c;
    c.int8_qkv = true;
    c.dtype = DType::kFloat16;  // the seed's output (and pse) on the int8 path
    c.expect_pass = 1;
    c.layout = layouts[n % 4];
    c.head_dim = c.head_dim_v = dims[(n / 4 + n) % 4];
    c.kv_heads = 1 + n % 2;
    c.heads = c.kv_heads * groups[(n / 2) % 4];
    c.batch = 1 + n % 3;
    c.q_seq = 2 + int(rng() % 200);
    c.kv_seq = 1 + int(rng() % 300);
    if (n % 3 == 1) {  // ragged lengths
      for (int b = 0; b < c.batch; ++b) {
        c.q_list.push_back(int64_t(1 + rng() % c.q_seq));
        c.kv_list.push_back(int64_t(rng() % (c.kv_seq + 1)));
      }
    }
    switch (n % 4) {
      case 0: c.sparse = 3, c.mask = 2; break;  // causal (rightDownCausal)
      case 1: c.sparse = 0, c.mask = 1, c.mask_shape = n; break;
      case 2: c.sparse = 4, c.mask = 2, c.pre = 40, c.next = 3; break;
      default: break;
    }
    c.pse = n % 5 == 2 ? 1 + n % 2 : 0;
    c.lse = n % 2 == 0;
    if (n == 6 || n == 13) {  // left padding on Q and KV (fits the tensors' S)
      c.q_list = {int64_t(c.q_seq / 2)};
      c.kv_list = {int64_t(c.kv_seq / 2)};
      c.q_pad = {int64_t(c.q_seq / 4)};
      c.kv_pad = {int64_t(c.kv_seq / 3)};
    }
    if (n % 4 == 3) {  // int8 output: per tensor, or per channel (not with left padding)
      c.quant = c.q_pad.empty() && n % 8 == 7 ? 2 : 1;
      c.quant_offset = n != 3;
      c.sparse = 0, c.mask = 0;
      if (!c.kv_list.empty() && c.quant_offset)  // every row sees a key (the seed refuses offsets otherwise)
        for (auto& kv : c.kv_list) kv = std::max<int64_t>(kv, 1);
    }
    c.negative_ds1 = n % 7 == 5;  // a negative dequant_scale1: the scores' sign flips, nothing is NaN
    EXPECT_LE(run_fia(c, 8100 + n), 1e-2) << describe(c);
  }
}

// The scales live on device: a captured graph replays them, and the copies in the
// stream's scratch (grown by the first call) serve the replay.
TEST(FiaInt8Gpu, CapturedWithDeviceScales) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  FiaCase c;
  c.int8_qkv = true;
  c.dtype = DType::kFloat16;
  c.q_seq = 96;
  c.kv_seq = 160;
  c.q_list = {96, 40};
  c.kv_list = {160, 77};
  c.sparse = 3, c.mask = 2;
  c.lse = true;
  c.capture = true;
  EXPECT_LE(run_fia(c, 8200), 1e-2) << describe(c);
}

}  // namespace
}  // namespace attnjit
