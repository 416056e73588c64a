// The MLA split combine's launch shape (mla_params.cuh): rows a CTA and its shared memory.
// No GPU needed.
#include <gtest/gtest.h>

#include "mla/mla_params.cuh"

namespace attnjit {
namespace {

TEST(MlaCombineRows, AsManyAsOneRoundOfLoadsHolds) {
  // The wide tile's 32 float4s a thread: 8 splits (h64 B16 L8K) -> 4 rows a CTA.
  EXPECT_EQ(mla_combine_rows(8, 32), 4);
  EXPECT_EQ(mla_combine_rows(2, 32), 8);  // at most 8
  EXPECT_EQ(mla_combine_rows(16, 32), 2);
  EXPECT_EQ(mla_combine_rows(17, 32), 1);
  EXPECT_EQ(mla_combine_rows(64, 32), 1);
  EXPECT_EQ(mla_combine_rows(8, 16), 2);  // the narrow and mma.sync entries' 16
  EXPECT_EQ(mla_combine_rows(9, 16), 1);
  for (int batch : {16, 32})
    for (int splits = 1; splits <= 256; ++splits) {
      const int r = mla_combine_rows(splits, batch);
      if (r == 1) continue;
      // Several rows: every row's splits in one round of one lane group, one split a lane.
      EXPECT_LE(r * splits, batch) << splits;
      EXPECT_LE(splits, 32) << splits;
    }
  EXPECT_EQ(mla_combine_batch(256), 32);
  EXPECT_EQ(mla_combine_batch(384), 16);
  EXPECT_EQ(mla_combine_batch(128), 16);
}

TEST(MlaCombineRows, SharedMemoryCoversEveryRowsLaneGroups) {
  EXPECT_EQ(mla_combine_smem_bytes(128), mla_const::kMaxSplits * 4 + 2 * 4 * 4);
  EXPECT_GE(mla_combine_smem_bytes(256, 8), (8 * 32 + 16) * 4 + 8 * 128 * 16);
  EXPECT_GE(mla_combine_smem_bytes(128, 8), (8 * 32 + 16) * 4);
  EXPECT_GE(mla_combine_smem_bytes(256, 1), mla_combine_smem_bytes(256));
}

}  // namespace
}  // namespace attnjit
