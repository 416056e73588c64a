// decode_tiling's choices for paged 16-bit K/V (the xqa family at q_len 1), which the H200
// measured: PERFORMANCE.md, twenty-fourth and twenty-fifth sessions.
#include <gtest/gtest.h>

#include "common/env_guard.hpp"
#include "ops/decode/decode_generator.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {
namespace {

using testing::EnvGuard;

spec::KernelSpec paged(int hd, int page, const char* arch) {
  spec::KernelSpec s;
  s.family = spec::OpFamily::kXqa;
  s.q_dtype = s.kv_dtype = s.out_dtype = DType::kBFloat16;
  s.set_head_dim(hd);
  s.group_size = 8;
  s.page_size = page;
  s.arch = spec::Arch::parse(arch);
  return s;
}

int ctas_by_smem(const DecodeTiling& t) { return (t.smem_limit + 1024) / (t.smem_bytes + 1024); }

// head_dim 64 on Hopper: 32-token tiles, three stages, two CTAs an SM (two tiles in flight a
// warp beat a third CTA with one).
TEST(DecodeTilingPaged16, HeadDim64TakesAThirdStageAtTwoCtas) {
  EnvGuard ring("ATTNJIT_DECODE_RING_KB", nullptr);
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  for (int page : {32, 64, 128}) {
    const DecodeTiling t = decode_tiling(paged(64, page, "sm_90a"));
    EXPECT_EQ(t.tile, 32) << page;
    EXPECT_EQ(t.stages, 3) << page;
    EXPECT_EQ(t.min_blocks, 2) << page;
    EXPECT_EQ(ctas_by_smem(t), 2) << page;
  }
  // Pages of 16 cannot hold a 32-token tile.
  EXPECT_EQ(decode_tiling(paged(64, 16, "sm_90a")).tile, 16);
  // Where a third stage would leave one CTA an SM (sm_80's 163 KB), two stages.
  const DecodeTiling a = decode_tiling(paged(64, 32, "sm_80"));
  EXPECT_EQ(a.tile, 32);
  EXPECT_EQ(a.stages, 2);
  EXPECT_EQ(a.min_blocks, 2);
}

// head_dim 128 keeps 16-token tiles (a 32-token ring holds one CTA an SM), three stages.
TEST(DecodeTilingPaged16, HeadDim128KeepsSixteenTokenTiles) {
  EnvGuard ring("ATTNJIT_DECODE_RING_KB", nullptr);
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  const DecodeTiling t = decode_tiling(paged(128, 32, "sm_90a"));
  EXPECT_EQ(t.tile, 16);
  EXPECT_EQ(t.stages, 3);
  EXPECT_EQ(t.min_blocks, 2);
}

// ATTNJIT_DECODE_RING_KB sizes the ring instead of the third-stage rule.
TEST(DecodeTilingPaged16, TheRingKnobOverridesTheThirdStage) {
  EnvGuard tile("ATTNJIT_DECODE_TILE", nullptr);
  EnvGuard ring("ATTNJIT_DECODE_RING_KB", "80");
  const DecodeTiling t = decode_tiling(paged(64, 64, "sm_90a"));
  EXPECT_EQ(t.tile, 32);
  EXPECT_EQ(t.stages, 2);
  EXPECT_EQ(t.min_blocks, 3);
}

}  // namespace
}  // namespace attnjit::ops
